//! DeleteGroups: removes empty groups with their committed offsets; one result per group.

use std::sync::Arc;

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::{DeleteGroupsRequest, DeleteGroupsResponse};

use crate::broker::Broker;

pub async fn handle(broker: Arc<Broker>, request: DeleteGroupsRequest) -> DeleteGroupsResponse {
    let mut results = Vec::with_capacity(request.groups_names.len());
    for id in request.groups_names {
        let outcome = broker.groups.delete_group(&id.0).await;
        if outcome.is_ok() {
            tracing::info!(group = %id.0, "deleted consumer group");
        }
        results.push(
            DeletableGroupResult::default()
                .with_group_id(id)
                .with_error_code(outcome.err().map_or(0, |e| e.code())),
        );
    }
    DeleteGroupsResponse::default().with_results(results)
}

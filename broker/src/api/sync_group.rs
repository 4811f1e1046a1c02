//! SyncGroup: the leader hands in the assignment; every member gets its part once stored.

use std::sync::Arc;

use kafka_protocol::messages::{SyncGroupRequest, SyncGroupResponse};

use super::str_bytes;
use crate::broker::Broker;
use crate::group::coordinator::SyncRequest;

pub async fn handle(broker: Arc<Broker>, request: SyncGroupRequest) -> SyncGroupResponse {
    let sync = SyncRequest {
        group_id: request.group_id.0.to_string(),
        generation_id: request.generation_id,
        member_id: request.member_id.to_string(),
        group_instance_id: request.group_instance_id.map(|i| i.to_string()),
        protocol_type: request.protocol_type.map(|p| p.to_string()),
        protocol_name: request.protocol_name.map(|p| p.to_string()),
        assignments: request
            .assignments
            .into_iter()
            .map(|a| (a.member_id.to_string(), a.assignment))
            .collect(),
    };
    let result = broker.groups.sync(sync).await;
    SyncGroupResponse::default()
        .with_error_code(result.error.map_or(0, |e| e.code()))
        .with_protocol_type(result.protocol_type.map(str_bytes))
        .with_protocol_name(result.protocol_name.map(str_bytes))
        .with_assignment(result.assignment)
}

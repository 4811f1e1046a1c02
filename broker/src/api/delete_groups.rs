//! DeleteGroups: removes empty groups with their committed offsets; one result per group.
//! Each group needs DELETE, else GROUP_AUTHORIZATION_FAILED, as Kafka.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::{DeleteGroupsRequest, DeleteGroupsResponse};

use super::{Access, RequestContext};
use crate::metadata::acls::{AclOperation, ResourceType};

pub async fn handle(ctx: RequestContext, request: DeleteGroupsRequest) -> DeleteGroupsResponse {
    let RequestContext { broker, session, .. } = ctx;
    let image = broker.metadata.image();
    let access = session.access(&broker.security.authorizer, &image.acls);
    let mut results = Vec::with_capacity(request.groups_names.len());
    for id in request.groups_names {
        let outcome = if may_delete(access, &id.0) {
            broker.groups.delete_group(&id.0).await
        } else {
            Err(ResponseError::GroupAuthorizationFailed)
        };
        if outcome.is_ok() {
            // A share group's records in flight on this node go with it.
            broker.share.forget_group(&id.0);
            tracing::info!(group = %id.0, "deleted group");
        }
        results.push(
            DeletableGroupResult::default()
                .with_group_id(id)
                .with_error_code(outcome.err().map_or(0, |e| e.code())),
        );
    }
    DeleteGroupsResponse::default().with_results(results)
}

/// Whether the principal may delete group `id`: DELETE on it.
fn may_delete(access: Access<'_>, id: &str) -> bool {
    access.authorize(AclOperation::Delete, ResourceType::Group, id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::testing::Acls;

    #[test]
    fn deleting_a_group_needs_delete_on_it() {
        let acls = Acls::none()
            .allow(ResourceType::Group, "g", AclOperation::Delete)
            .allow(ResourceType::Group, "h", AclOperation::Read);
        assert!(may_delete(acls.access(), "g"));
        assert!(!may_delete(acls.access(), "h"), "READ is not DELETE");
    }
}

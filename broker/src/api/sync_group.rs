//! SyncGroup: the leader hands in the assignment; every member gets its part once stored.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{SyncGroupRequest, SyncGroupResponse};

use super::join_group::may_take_part;
use super::{str_bytes, RequestContext};
use crate::group::coordinator::SyncRequest;

/// Needs READ on the group, else GROUP_AUTHORIZATION_FAILED.
pub async fn handle(ctx: RequestContext, request: SyncGroupRequest) -> SyncGroupResponse {
    let RequestContext { broker, session, .. } = ctx;
    let image = broker.metadata.image();
    if !may_take_part(
        session.access(&broker.security.authorizer, &image.acls),
        &request.group_id.0,
    ) {
        return SyncGroupResponse::default().with_error_code(ResponseError::GroupAuthorizationFailed.code());
    }
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

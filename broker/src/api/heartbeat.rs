//! Heartbeat: keeps a member's session alive and tells it when to rejoin.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{HeartbeatRequest, HeartbeatResponse};

use super::join_group::may_take_part;
use super::RequestContext;

/// Needs READ on the group, else GROUP_AUTHORIZATION_FAILED.
pub fn handle(ctx: &RequestContext, request: HeartbeatRequest) -> HeartbeatResponse {
    let RequestContext { broker, session, .. } = ctx;
    let image = broker.metadata.image();
    if !may_take_part(
        session.access(&broker.security.authorizer, &image.acls),
        &request.group_id.0,
    ) {
        return HeartbeatResponse::default().with_error_code(ResponseError::GroupAuthorizationFailed.code());
    }
    let result = broker.groups.heartbeat(
        &request.group_id.0,
        &request.member_id,
        request.group_instance_id.as_deref(),
        request.generation_id,
    );
    HeartbeatResponse::default().with_error_code(result.err().map_or(0, |e| e.code()))
}

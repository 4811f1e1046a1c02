//! LeaveGroup: members leave (v3+: several at once, static members by instance id).

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::{LeaveGroupRequest, LeaveGroupResponse};

use super::join_group::may_take_part;
use super::RequestContext;

/// v3 batches members and answers per member.
const FIRST_BATCHED_VERSION: i16 = 3;

/// Needs READ on the group, else GROUP_AUTHORIZATION_FAILED for the whole request.
pub fn handle(ctx: &RequestContext, request: LeaveGroupRequest) -> LeaveGroupResponse {
    let version = ctx.version;
    let RequestContext { broker, session, .. } = ctx;
    let image = broker.metadata.image();
    if !may_take_part(
        session.access(&broker.security.authorizer, &image.acls),
        &request.group_id.0,
    ) {
        return LeaveGroupResponse::default().with_error_code(ResponseError::GroupAuthorizationFailed.code());
    }
    let leaving: Vec<(String, Option<String>)> = if version < FIRST_BATCHED_VERSION {
        vec![(request.member_id.to_string(), None)]
    } else {
        request
            .members
            .iter()
            .map(|m| {
                (
                    m.member_id.to_string(),
                    m.group_instance_id.as_ref().map(|i| i.to_string()),
                )
            })
            .collect()
    };
    match broker.groups.leave(&request.group_id.0, &leaving) {
        Err(error) => LeaveGroupResponse::default().with_error_code(error.code()),
        Ok(errors) if version < FIRST_BATCHED_VERSION => {
            LeaveGroupResponse::default().with_error_code(errors.first().copied().flatten().map_or(0, |e| e.code()))
        }
        Ok(errors) => LeaveGroupResponse::default().with_members(
            request
                .members
                .into_iter()
                .zip(errors)
                .map(|(m, error)| {
                    MemberResponse::default()
                        .with_member_id(m.member_id)
                        .with_group_instance_id(m.group_instance_id)
                        .with_error_code(error.map_or(0, |e| e.code()))
                })
                .collect(),
        ),
    }
}

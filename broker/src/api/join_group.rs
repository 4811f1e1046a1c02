//! JoinGroup: a member (re)joins its group; the answer waits for the rebalance to settle.
//!
//! Taking part in a group (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) needs READ on it,
//! else GROUP_AUTHORIZATION_FAILED, as Kafka ([`may_take_part`]).

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::{JoinGroupRequest, JoinGroupResponse};
use uuid::Uuid;

use super::{str_bytes, Access, RequestContext};
use crate::group::coordinator::JoinRequest;
use crate::metadata::acls::{AclOperation, ResourceType};

/// From v4 a new member first gets MEMBER_ID_REQUIRED and an id to rejoin with (KIP-394).
const FIRST_VERSION_REQUIRING_MEMBER_ID: i16 = 4;
/// From v7 the protocol name is nullable (and null in an error answer).
const FIRST_VERSION_WITH_NULLABLE_PROTOCOL_NAME: i16 = 7;

/// Whether the principal may take part in group `group_id` as a member: READ on it.
pub(super) fn may_take_part(access: Access<'_>, group_id: &str) -> bool {
    access.authorize(AclOperation::Read, ResourceType::Group, group_id)
}

/// Why `access` may not heartbeat in group `group_id` subscribed to `topics`
/// (ConsumerGroupHeartbeat, ShareGroupHeartbeat), if it may not: READ on the group
/// (GROUP_AUTHORIZATION_FAILED), then DESCRIBE on every subscribed topic
/// (TOPIC_AUTHORIZATION_FAILED, naming the topics refused), as Kafka.
pub(super) fn heartbeat_refusal<'t>(
    access: Access<'_>,
    group_id: &str,
    topics: impl IntoIterator<Item = &'t str>,
) -> Option<(ResponseError, String)> {
    if !may_take_part(access, group_id) {
        return Some((ResponseError::GroupAuthorizationFailed, String::new()));
    }
    let refused: Vec<&str> = topics
        .into_iter()
        .filter(|n| !access.authorize(AclOperation::Describe, ResourceType::Topic, n))
        .collect();
    (!refused.is_empty()).then(|| {
        (
            ResponseError::TopicAuthorizationFailed,
            format!(
                "Not authorized to describe the subscribed topics {}.",
                refused.join(", ")
            ),
        )
    })
}

pub async fn handle(ctx: RequestContext, request: JoinGroupRequest) -> JoinGroupResponse {
    let version = ctx.version;
    let client_id = ctx.client_id().to_string();
    let RequestContext { broker, session, .. } = ctx;
    let image = broker.metadata.image();
    if !may_take_part(
        session.access(&broker.security.authorizer, &image.acls),
        &request.group_id.0,
    ) {
        return refused(version);
    }
    let peer = session.peer;
    let instance_id = request.group_instance_id.map(|i| i.to_string());
    let prefix = instance_id.clone().unwrap_or_else(|| client_id.clone());
    let join = JoinRequest {
        group_id: request.group_id.0.to_string(),
        member_id: request.member_id.to_string(),
        group_instance_id: instance_id,
        client_id,
        client_host: format!("/{}", peer.ip()),
        session_timeout_ms: request.session_timeout_ms,
        // v0 has no rebalance timeout: the session timeout stands in, as in Kafka.
        rebalance_timeout_ms: if version == 0 {
            request.session_timeout_ms
        } else {
            request.rebalance_timeout_ms
        },
        protocol_type: request.protocol_type.to_string(),
        protocols: request
            .protocols
            .into_iter()
            .map(|p| (p.name.to_string(), p.metadata))
            .collect(),
        require_known_member_id: version >= FIRST_VERSION_REQUIRING_MEMBER_ID,
        new_member_id: format!("{prefix}-{}", Uuid::new_v4()),
    };
    let result = broker.groups.join(join, &image).await;
    JoinGroupResponse::default()
        .with_error_code(result.error.map_or(0, |e| e.code()))
        .with_generation_id(result.generation_id)
        .with_protocol_type(result.protocol_type.map(str_bytes))
        .with_protocol_name(result.protocol_name.map(str_bytes))
        .with_leader(str_bytes(result.leader_id))
        .with_member_id(str_bytes(result.member_id))
        .with_members(
            result
                .members
                .into_iter()
                .map(|m| {
                    JoinGroupResponseMember::default()
                        .with_member_id(str_bytes(m.member_id))
                        .with_group_instance_id(m.group_instance_id.map(str_bytes))
                        .with_metadata(m.metadata)
                })
                .collect(),
        )
}

/// Kafka's JoinGroup error answer, for a principal without READ on the group.
fn refused(version: i16) -> JoinGroupResponse {
    let protocol_name = (version < FIRST_VERSION_WITH_NULLABLE_PROTOCOL_NAME).then(|| str_bytes(""));
    JoinGroupResponse::default()
        .with_error_code(ResponseError::GroupAuthorizationFailed.code())
        .with_generation_id(-1)
        .with_protocol_name(protocol_name)
        .with_leader(str_bytes(""))
        .with_member_id(str_bytes(""))
        .with_members(Vec::new())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::testing::Acls;

    #[test]
    fn taking_part_in_a_group_needs_read_on_it() {
        let acls = Acls::none().allow(ResourceType::Group, "g", AclOperation::Read).allow(
            ResourceType::Group,
            "watched",
            AclOperation::Describe,
        );
        assert!(may_take_part(acls.access(), "g"));
        assert!(!may_take_part(acls.access(), "watched"), "DESCRIBE is not READ");
        assert!(!may_take_part(acls.access(), "other"));
        assert_eq!(refused(9).error_code, ResponseError::GroupAuthorizationFailed.code());
        assert_eq!(
            (refused(9).protocol_name, refused(6).protocol_name),
            (None, Some(str_bytes("")))
        );
    }
}

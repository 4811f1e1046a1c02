//! ShareGroupHeartbeat (KIP-932): a share group member joins (epoch 0, with the member id it
//! chose), heartbeats and leaves (-1), and learns the partitions it fetches from
//! (`group/coordinator/share.rs`).
//!
//! Needs READ on the group (GROUP_AUTHORIZATION_FAILED) and DESCRIBE on every topic it
//! subscribes to (TOPIC_AUTHORIZATION_FAILED), as Kafka; `share.version` 0 turns it off.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::share_group_heartbeat_response::{Assignment, TopicPartitions};
use kafka_protocol::messages::{ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse};

use super::join_group::heartbeat_refusal;
use super::{str_bytes, Access, RequestContext};
use crate::config::group_configs;
use crate::group::ShareHeartbeat;

pub fn handle(ctx: &RequestContext, request: ShareGroupHeartbeatRequest) -> ShareGroupHeartbeatResponse {
    let RequestContext { broker, session, .. } = ctx;
    let failed = |error: ResponseError, message: String| {
        ShareGroupHeartbeatResponse::default()
            .with_error_code(error.code())
            .with_error_message(Some(str_bytes(message)).filter(|m| !m.is_empty()))
            .with_member_epoch(-1)
    };
    let image = broker.metadata.image();
    if broker.share_version(&image) < 1 {
        return failed(
            ResponseError::UnsupportedVersion,
            "Share groups are off on this cluster (share.version 0); kafka-features can upgrade share.version to 1."
                .into(),
        );
    }
    let access = session.access(&broker.security.authorizer, &image.acls);
    if let Some((error, message)) = refusal(access, &request) {
        return failed(error, message);
    }
    let configs = image.group_configs(&request.group_id.0);
    let heartbeat = ShareHeartbeat {
        group_id: request.group_id.0.to_string(),
        member_id: request.member_id.to_string(),
        member_epoch: request.member_epoch,
        rack_id: request.rack_id.map(|r| r.to_string()),
        subscribed_topic_names: request
            .subscribed_topic_names
            .map(|names| names.into_iter().map(|n| n.0.to_string()).collect()),
        client_id: ctx.client_id().to_string(),
        client_host: format!("/{}", session.peer.ip()),
        session_timeout_ms: group_configs::group_int(configs, group_configs::SHARE_SESSION_TIMEOUT_MS),
        heartbeat_interval_ms: group_configs::group_int(configs, group_configs::SHARE_HEARTBEAT_INTERVAL_MS),
    };
    match broker.groups.share_heartbeat(heartbeat, &image) {
        Ok(result) => ShareGroupHeartbeatResponse::default()
            .with_member_id(Some(str_bytes(result.member_id)))
            .with_member_epoch(result.member_epoch)
            .with_heartbeat_interval_ms(result.heartbeat_interval_ms)
            .with_assignment(result.assignment.map(|a| {
                Assignment::default().with_topic_partitions(
                    a.into_iter()
                        .map(|(topic_id, partitions)| {
                            TopicPartitions::default()
                                .with_topic_id(topic_id)
                                .with_partitions(partitions.into_iter().collect())
                        })
                        .collect(),
                )
            })),
        Err((error, message)) => failed(error, message),
    }
}

/// Why `access` may not send this heartbeat, if it may not (`join_group::heartbeat_refusal`).
fn refusal(access: Access<'_>, request: &ShareGroupHeartbeatRequest) -> Option<(ResponseError, String)> {
    let topics = request.subscribed_topic_names.as_deref().unwrap_or_default();
    heartbeat_refusal(access, &request.group_id.0, topics.iter().map(|n| n.0.as_str()))
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::{GroupId, TopicName};

    use super::*;
    use crate::api::testing::Acls;
    use crate::metadata::acls::{AclOperation, ResourceType};

    fn heartbeat(group: &str, topics: &[&str]) -> ShareGroupHeartbeatRequest {
        ShareGroupHeartbeatRequest::default()
            .with_group_id(GroupId(str_bytes(group.to_string())))
            .with_subscribed_topic_names(Some(
                topics.iter().map(|t| TopicName(str_bytes(t.to_string()))).collect(),
            ))
    }

    #[test]
    fn a_share_member_needs_read_on_its_group_and_describe_on_its_topics() {
        let acls = Acls::none()
            .allow(ResourceType::Group, "sg", AclOperation::Read)
            .allow(ResourceType::Group, "watched", AclOperation::Describe)
            .allow(ResourceType::Topic, "jobs", AclOperation::Read);
        assert_eq!(refusal(acls.access(), &heartbeat("sg", &["jobs"])), None);
        assert_eq!(
            refusal(acls.access(), &heartbeat("watched", &["jobs"])).map(|(e, _)| e),
            Some(ResponseError::GroupAuthorizationFailed)
        );
        assert_eq!(
            refusal(acls.access(), &heartbeat("sg", &["jobs", "payroll"])),
            Some((
                ResponseError::TopicAuthorizationFailed,
                "Not authorized to describe the subscribed topics payroll.".to_string()
            ))
        );
        assert_eq!(
            refusal(Acls::none().access(), &heartbeat("sg", &[])).map(|(e, _)| e),
            Some(ResponseError::GroupAuthorizationFailed)
        );
    }
}

//! ConsumerGroupHeartbeat (KIP-848): a member of a consumer group joins, heartbeats and leaves
//! with it, and learns its partitions from the coordinator (`group/coordinator/consumer*.rs`).
//!
//! Needs READ on the group (GROUP_AUTHORIZATION_FAILED) and DESCRIBE on every topic it names
//! (TOPIC_AUTHORIZATION_FAILED), as Kafka.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::consumer_group_heartbeat_response::{Assignment, TopicPartitions};
use kafka_protocol::messages::{ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse};
use uuid::Uuid;

use super::join_group::heartbeat_refusal;
use super::{str_bytes, Access, RequestContext};
use crate::config::group_configs;
use crate::group::coordinator::ConsumerHeartbeat;

pub async fn handle(ctx: RequestContext, request: ConsumerGroupHeartbeatRequest) -> ConsumerGroupHeartbeatResponse {
    let client_id = ctx.client_id().to_string();
    let RequestContext { broker, session, .. } = ctx;
    let failed = |error: ResponseError, message: String| {
        ConsumerGroupHeartbeatResponse::default()
            .with_error_code(error.code())
            .with_error_message(Some(str_bytes(message)).filter(|m| !m.is_empty()))
            .with_member_epoch(-1)
    };
    let image = broker.metadata.image();
    if !broker.groups.consumer_protocol_enabled() || broker.group_version(&image) < 1 {
        return failed(
            ResponseError::UnsupportedVersion,
            "This cluster serves only classic groups (group.coordinator.rebalance.protocols, group.version); use group.protocol=classic.".into(),
        );
    }
    let access = session.access(&broker.security.authorizer, &image.acls);
    if let Some((error, message)) = refusal(access, &request) {
        return failed(error, message);
    }
    let configs = image.group_configs(&request.group_id.0);
    let heartbeat = ConsumerHeartbeat {
        group_id: request.group_id.0.to_string(),
        member_id: request.member_id.to_string(),
        member_epoch: request.member_epoch,
        instance_id: request.instance_id.map(|i| i.to_string()),
        rack_id: request.rack_id.map(|r| r.to_string()),
        rebalance_timeout_ms: request.rebalance_timeout_ms,
        subscribed_topic_names: request
            .subscribed_topic_names
            .map(|names| names.into_iter().map(|n| n.0.to_string()).collect()),
        subscribed_topic_regex: request.subscribed_topic_regex.map(|r| r.to_string()),
        server_assignor: request.server_assignor.map(|a| a.to_string()),
        owned: request.topic_partitions.map(|owned| {
            owned
                .into_iter()
                .map(|t| (t.topic_id, t.partitions.into_iter().collect()))
                .collect()
        }),
        client_id,
        client_host: format!("/{}", session.peer.ip()),
        new_member_id: Uuid::new_v4().to_string(),
        session_timeout_ms: group_configs::group_int(configs, group_configs::CONSUMER_SESSION_TIMEOUT_MS),
        heartbeat_interval_ms: group_configs::group_int(configs, group_configs::CONSUMER_HEARTBEAT_INTERVAL_MS),
    };
    match broker.groups.consumer_heartbeat(heartbeat, &image).await {
        Ok(result) => ConsumerGroupHeartbeatResponse::default()
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
fn refusal(access: Access<'_>, request: &ConsumerGroupHeartbeatRequest) -> Option<(ResponseError, String)> {
    let topics = request.subscribed_topic_names.as_deref().unwrap_or_default();
    heartbeat_refusal(access, &request.group_id.0, topics.iter().map(|n| n.0.as_str()))
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::{GroupId, TopicName};

    use super::*;
    use crate::api::testing::Acls;
    use crate::metadata::acls::{AclOperation, ResourceType};

    fn heartbeat(group: &str, topics: &[&str]) -> ConsumerGroupHeartbeatRequest {
        ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(str_bytes(group.to_string())))
            .with_subscribed_topic_names(Some(
                topics.iter().map(|t| TopicName(str_bytes(t.to_string()))).collect(),
            ))
    }

    #[test]
    fn a_member_needs_read_on_its_group_and_describe_on_every_subscribed_topic() {
        let acls = Acls::none()
            .allow(ResourceType::Group, "g", AclOperation::Read)
            .allow(ResourceType::Group, "watched", AclOperation::Describe)
            .allow(ResourceType::Topic, "orders", AclOperation::Read)
            .allow(ResourceType::Topic, "payments", AclOperation::Describe);
        assert_eq!(refusal(acls.access(), &heartbeat("g", &["orders", "payments"])), None);
        assert_eq!(refusal(acls.access(), &heartbeat("g", &[])), None);
        assert_eq!(
            refusal(acls.access(), &heartbeat("watched", &["orders"])),
            Some((ResponseError::GroupAuthorizationFailed, String::new())),
            "DESCRIBE on the group is not READ"
        );
        assert_eq!(
            refusal(
                acls.access(),
                &heartbeat("g", &["orders", "secrets", "payments", "audit"])
            ),
            Some((
                ResponseError::TopicAuthorizationFailed,
                "Not authorized to describe the subscribed topics secrets, audit.".to_string()
            ))
        );
        let denied = Acls::none()
            .allow(ResourceType::Group, "g", AclOperation::Read)
            .allow(ResourceType::Topic, "orders", AclOperation::Describe)
            .deny(ResourceType::Topic, "orders", AclOperation::Describe);
        assert_eq!(
            refusal(denied.access(), &heartbeat("g", &["orders"])).map(|(e, _)| e),
            Some(ResponseError::TopicAuthorizationFailed),
            "a DENY outweighs an ALLOW"
        );
        // A heartbeat that leaves the subscription unchanged (null) names no topic.
        let unchanged = heartbeat("g", &[]).with_subscribed_topic_names(None);
        assert_eq!(
            refusal(
                Acls::none()
                    .allow(ResourceType::Group, "g", AclOperation::Read)
                    .access(),
                &unchanged
            ),
            None
        );
    }
}

//! AlterShareGroupOffsets (KIP-932): kafka-share-groups --reset-offsets. Each named
//! share-partition starts over at the given offset, forgetting its records in flight; the
//! group must have no member (NON_EMPTY_GROUP), and an id no group holds becomes an empty
//! share group, as Kafka.
//!
//! Applied to this node's share-partitions, those of the partitions it leads; a partition led
//! by another node is answered NOT_LEADER_OR_FOLLOWER (the share state is not yet kept by the
//! group coordinator).
//!
//! Needs READ on the group (GROUP_AUTHORIZATION_FAILED) and on each topic
//! (TOPIC_AUTHORIZATION_FAILED for its partitions), as Kafka's offset resets.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_share_group_offsets_response::{
    AlterShareGroupOffsetsResponsePartition, AlterShareGroupOffsetsResponseTopic,
};
use kafka_protocol::messages::{AlterShareGroupOffsetsRequest, AlterShareGroupOffsetsResponse};
use uuid::Uuid;

use super::{str_bytes, RequestContext};
use crate::config::group_configs;
use crate::metadata::acls::{AclOperation, ResourceType};
use crate::share::SharePartitionKey;

pub fn handle(ctx: &RequestContext, request: AlterShareGroupOffsetsRequest) -> AlterShareGroupOffsetsResponse {
    let RequestContext { broker, session, .. } = ctx;
    let image = broker.metadata.image();
    let access = session.access(&broker.security.authorizer, &image.acls);
    let group_id = request.group_id.0.to_string();
    let failed = |error: ResponseError, message: String| {
        AlterShareGroupOffsetsResponse::default()
            .with_error_code(error.code())
            .with_error_message(Some(str_bytes(message)).filter(|m| !m.is_empty()))
    };
    if !access.authorize(AclOperation::Read, ResourceType::Group, &group_id) {
        return failed(ResponseError::GroupAuthorizationFailed, String::new());
    }
    if let Err((error, message)) = broker.groups.share_group_for_reset(&group_id) {
        return failed(error, message);
    }
    let limits = broker.share.limits(group_configs::share_record_lock_duration_ms(
        image.group_configs(&group_id),
    ));
    let responses = request
        .topics
        .into_iter()
        .map(|topic| {
            let found = image.topic(&topic.topic_name.0);
            let topic_id = found.map_or(Uuid::nil(), |t| t.topic_id);
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    let outcome = match found {
                        None => Err((ResponseError::UnknownTopicOrPartition, String::new())),
                        Some(t) if !access.authorize(AclOperation::Read, ResourceType::Topic, &t.name) => {
                            Err((ResponseError::TopicAuthorizationFailed, String::new()))
                        }
                        Some(t) => broker
                            .replicas
                            .leader_partition_or_explain(t, p.partition_index)
                            .and_then(|(partition, _)| {
                                let (low, high) = (partition.log_start_offset(), partition.high_watermark());
                                if p.start_offset < low || p.start_offset > high {
                                    return Err((
                                        ResponseError::InvalidRequest,
                                        format!("Offset {} is outside the log ({low} to {high}).", p.start_offset),
                                    ));
                                }
                                let key = SharePartitionKey {
                                    group_id: group_id.clone(),
                                    topic_id: t.topic_id,
                                    partition: p.partition_index,
                                };
                                broker.share.reset(&key, limits, p.start_offset)
                            }),
                    };
                    let (code, message) = super::share_fetch::code(outcome.err());
                    AlterShareGroupOffsetsResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code)
                        .with_error_message(message)
                })
                .collect();
            AlterShareGroupOffsetsResponseTopic::default()
                .with_topic_name(topic.topic_name)
                .with_topic_id(topic_id)
                .with_partitions(partitions)
        })
        .collect();
    tracing::info!(group = %group_id, "share group offsets reset");
    AlterShareGroupOffsetsResponse::default().with_responses(responses)
}

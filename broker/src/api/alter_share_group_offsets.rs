//! AlterShareGroupOffsets (KIP-932): kafka-share-groups --reset-offsets. Each named
//! share-partition starts over at the given offset, forgetting its records in flight; the
//! group must have no member (NON_EMPTY_GROUP), and an id no group holds becomes an empty
//! share group, as Kafka.
//!
//! Sent to the group's coordinator, which stores each new state at the next state epoch
//! (`share_state.rs` in the group coordinator); the partitions' leaders read it on their next
//! fetch.
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
use crate::broker::Broker;
use crate::metadata::acls::{AclOperation, ResourceType};
use crate::metadata::image::TopicImage;
use crate::share::SharePartitionKey;

pub async fn handle(ctx: RequestContext, request: AlterShareGroupOffsetsRequest) -> AlterShareGroupOffsetsResponse {
    let RequestContext { broker, session, .. } = &ctx;
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
    let mut responses = Vec::new();
    for topic in request.topics {
        let found = image.topic(&topic.topic_name.0);
        let topic_id = found.map_or(Uuid::nil(), |t| t.topic_id);
        let mut partitions = Vec::new();
        for p in &topic.partitions {
            let outcome = match found {
                None => Err((ResponseError::UnknownTopicOrPartition, String::new())),
                Some(t) if !access.authorize(AclOperation::Read, ResourceType::Topic, &t.name) => {
                    Err((ResponseError::TopicAuthorizationFailed, String::new()))
                }
                Some(t) => reset(broker, &group_id, t, p.partition_index, p.start_offset).await,
            };
            let (code, message) = super::share_fetch::code(outcome.err());
            partitions.push(
                AlterShareGroupOffsetsResponsePartition::default()
                    .with_partition_index(p.partition_index)
                    .with_error_code(code)
                    .with_error_message(message),
            );
        }
        responses.push(
            AlterShareGroupOffsetsResponseTopic::default()
                .with_topic_name(topic.topic_name)
                .with_topic_id(topic_id)
                .with_partitions(partitions),
        );
    }
    tracing::info!(group = %group_id, "share group offsets reset");
    AlterShareGroupOffsetsResponse::default().with_responses(responses)
}

/// Resets one share-partition: the offset must lie in the log as this node's replica sees
/// it; the coordinator stores the new state, and this node's copy, if it leads the partition,
/// goes (a leader elsewhere is fenced on its next write and reads the state anew).
async fn reset(
    broker: &Broker,
    group_id: &str,
    topic: &TopicImage,
    index: i32,
    offset: i64,
) -> Result<(), (ResponseError, String)> {
    let in_range = usize::try_from(index).is_ok_and(|i| i < topic.partitions.len());
    if !in_range {
        return Err((ResponseError::UnknownTopicOrPartition, String::new()));
    }
    if let Some(replica) = broker.replicas.get(topic.topic_id, index) {
        let (low, high) = (replica.log_start_offset(), replica.high_watermark());
        if offset < low || offset > high {
            return Err((
                ResponseError::InvalidRequest,
                format!("Offset {offset} is outside the log ({low} to {high})."),
            ));
        }
    } else if offset < 0 {
        return Err((ResponseError::InvalidRequest, format!("Offset {offset} is negative.")));
    }
    broker
        .groups
        .reset_share_state(group_id, topic.topic_id, index, offset)
        .await?;
    let key = SharePartitionKey {
        group_id: group_id.to_string(),
        topic_id: topic.topic_id,
        partition: index,
    };
    if let Some(slot) = broker.share.get(&key) {
        broker.share.forget(&key, &slot);
    }
    Ok(())
}

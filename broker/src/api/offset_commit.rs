//! OffsetCommit: a group's committed positions, answered once `__consumer_offsets` holds them
//! on the ISR.

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::offset_commit_response::{OffsetCommitResponsePartition, OffsetCommitResponseTopic};
use kafka_protocol::messages::{OffsetCommitRequest, OffsetCommitResponse};

use crate::broker::Broker;
use crate::clock::now_ms;
use crate::group::records::OffsetAndMetadata;

pub async fn handle(broker: Arc<Broker>, request: OffsetCommitRequest) -> OffsetCommitResponse {
    let image = broker.metadata.image();
    let max_metadata = broker.config.group.offset_metadata_max_bytes;
    let now = now_ms();
    // Per partition: an error found before the commit, or the offset to commit.
    let mut checked: Vec<Vec<Result<OffsetAndMetadata, ResponseError>>> = Vec::with_capacity(request.topics.len());
    let mut to_commit = Vec::new();
    for topic in &request.topics {
        let known = image.topic(&topic.name.0);
        let partitions = topic
            .partitions
            .iter()
            .map(|p| {
                let exists =
                    known.is_some_and(|t| p.partition_index >= 0 && (p.partition_index as usize) < t.partitions.len());
                let metadata = p.committed_metadata.as_deref().unwrap_or_default();
                if !exists {
                    Err(ResponseError::UnknownTopicOrPartition)
                } else if metadata.len() > max_metadata {
                    Err(ResponseError::OffsetMetadataTooLarge)
                } else {
                    let value = OffsetAndMetadata {
                        offset: p.committed_offset,
                        leader_epoch: p.committed_leader_epoch,
                        metadata: metadata.to_string(),
                        commit_timestamp_ms: now,
                    };
                    to_commit.push(((topic.name.0.to_string(), p.partition_index), value.clone()));
                    Ok(value)
                }
            })
            .collect();
        checked.push(partitions);
    }
    let outcome = broker
        .groups
        .commit_offsets(
            &request.group_id.0,
            &request.member_id,
            request.group_instance_id.as_deref(),
            request.generation_id_or_member_epoch,
            to_commit,
        )
        .await;
    if let Err(e) = outcome {
        tracing::debug!(group = %request.group_id.0, error = ?e, "offset commit refused");
    }
    let topics = request
        .topics
        .into_iter()
        .zip(checked)
        .map(|(topic, partitions)| {
            OffsetCommitResponseTopic::default()
                .with_name(topic.name)
                .with_topic_id(topic.topic_id)
                .with_partitions(
                    topic
                        .partitions
                        .iter()
                        .zip(partitions)
                        .map(|(p, check)| {
                            let error = match check {
                                Err(e) => Some(e),
                                Ok(_) => outcome.err(),
                            };
                            OffsetCommitResponsePartition::default()
                                .with_partition_index(p.partition_index)
                                .with_error_code(error.map_or(0, |e| e.code()))
                        })
                        .collect(),
                )
        })
        .collect();
    OffsetCommitResponse::default().with_topics(topics)
}

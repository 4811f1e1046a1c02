//! OffsetFetch: a group's committed offsets (v8+: several groups at once). Partitions without
//! a commit answer -1, which clients read as "use auto.offset.reset".

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions, OffsetFetchResponseTopic,
    OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{OffsetFetchRequest, OffsetFetchResponse, TopicName};

use super::str_bytes;
use crate::broker::Broker;
use crate::group::coordinator::CommittedOffsets as Committed;
use crate::group::records::OffsetAndMetadata;

const FIRST_BATCHED_VERSION: i16 = 8;
/// v1 has no top-level error: group errors go on each partition.
const FIRST_VERSION_WITH_TOP_LEVEL_ERROR: i16 = 2;

/// One topic's committed offsets by partition.
type TopicOffsets = (String, Vec<(i32, Option<OffsetAndMetadata>)>);

pub fn handle(broker: &Broker, request: OffsetFetchRequest, version: i16) -> OffsetFetchResponse {
    if version >= FIRST_BATCHED_VERSION {
        let groups = request
            .groups
            .into_iter()
            .map(|group| {
                let topics: Option<Vec<(String, Vec<i32>)>> = group.topics.map(|ts| {
                    ts.into_iter()
                        .map(|t| (t.name.0.to_string(), t.partition_indexes))
                        .collect()
                });
                let response = OffsetFetchResponseGroup::default().with_group_id(group.group_id.clone());
                match broker.groups.fetch_offsets(&group.group_id.0, topics.as_deref()) {
                    Ok(committed) => response.with_topics(batched_topics(committed)),
                    Err(error) => response.with_error_code(error.code()),
                }
            })
            .collect();
        return OffsetFetchResponse::default().with_groups(groups);
    }
    let topics: Option<Vec<(String, Vec<i32>)>> = request.topics.map(|ts| {
        ts.into_iter()
            .map(|t| (t.name.0.to_string(), t.partition_indexes))
            .collect()
    });
    match broker.groups.fetch_offsets(&request.group_id.0, topics.as_deref()) {
        Ok(committed) => OffsetFetchResponse::default().with_topics(single_group_topics(committed, None)),
        Err(error) if version < FIRST_VERSION_WITH_TOP_LEVEL_ERROR => {
            let unanswered = topics
                .into_iter()
                .flatten()
                .flat_map(|(t, ps)| ps.into_iter().map(move |p| (t.clone(), p, None)))
                .collect();
            OffsetFetchResponse::default().with_topics(single_group_topics(unanswered, Some(error)))
        }
        Err(error) => OffsetFetchResponse::default().with_error_code(error.code()),
    }
}

/// Groups consecutive entries of one topic (the coordinator returns them grouped).
fn by_topic(committed: Committed) -> Vec<TopicOffsets> {
    let mut topics: Vec<TopicOffsets> = Vec::new();
    for (topic, partition, offset) in committed {
        match topics.last_mut() {
            Some((name, partitions)) if *name == topic => partitions.push((partition, offset)),
            _ => topics.push((topic, vec![(partition, offset)])),
        }
    }
    topics
}

fn fields(offset: &Option<OffsetAndMetadata>) -> (i64, i32, String) {
    match offset {
        Some(o) => (o.offset, o.leader_epoch, o.metadata.clone()),
        None => (-1, -1, String::new()),
    }
}

fn single_group_topics(committed: Committed, error: Option<ResponseError>) -> Vec<OffsetFetchResponseTopic> {
    by_topic(committed)
        .into_iter()
        .map(|(topic, partitions)| {
            OffsetFetchResponseTopic::default()
                .with_name(TopicName(str_bytes(topic)))
                .with_partitions(
                    partitions
                        .into_iter()
                        .map(|(index, offset)| {
                            let (offset, epoch, metadata) = fields(&offset);
                            OffsetFetchResponsePartition::default()
                                .with_partition_index(index)
                                .with_committed_offset(offset)
                                .with_committed_leader_epoch(epoch)
                                .with_metadata(Some(str_bytes(metadata)))
                                .with_error_code(error.map_or(0, |e| e.code()))
                        })
                        .collect(),
                )
        })
        .collect()
}

fn batched_topics(committed: Committed) -> Vec<OffsetFetchResponseTopics> {
    by_topic(committed)
        .into_iter()
        .map(|(topic, partitions)| {
            OffsetFetchResponseTopics::default()
                .with_name(TopicName(str_bytes(topic)))
                .with_partitions(
                    partitions
                        .into_iter()
                        .map(|(index, offset)| {
                            let (offset, epoch, metadata) = fields(&offset);
                            OffsetFetchResponsePartitions::default()
                                .with_partition_index(index)
                                .with_committed_offset(offset)
                                .with_committed_leader_epoch(epoch)
                                .with_metadata(Some(str_bytes(metadata)))
                        })
                        .collect(),
                )
        })
        .collect()
}

//! OffsetFetch: a group's committed offsets (v8+: several groups at once). Partitions without
//! a commit answer -1, which clients read as "use auto.offset.reset".
//!
//! A group needs DESCRIBE (else GROUP_AUTHORIZATION_FAILED) and each topic DESCRIBE: a named
//! topic without it is answered TOPIC_AUTHORIZATION_FAILED per partition, and a fetch of every
//! committed topic silently leaves it out, as Kafka.

use std::collections::HashSet;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions, OffsetFetchResponseTopic,
    OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{OffsetFetchRequest, OffsetFetchResponse, TopicName};

use super::{str_bytes, Access, RequestContext};
use crate::broker::Broker;
use crate::group::coordinator::CommittedOffsets as Committed;
use crate::group::records::OffsetAndMetadata;
use crate::metadata::acls::{AclOperation, ResourceType};

const FIRST_BATCHED_VERSION: i16 = 8;
/// v1 has no top-level error: group errors go on each partition.
const FIRST_VERSION_WITH_TOP_LEVEL_ERROR: i16 = 2;

/// One topic's committed offsets by partition.
type TopicOffsets = (String, Vec<(i32, Option<OffsetAndMetadata>)>);
/// Topics by name with the partitions asked for.
type Asked = Vec<(String, Vec<i32>)>;
/// Partitions with offsets of an open transaction.
type Unstable = HashSet<(String, i32)>;

pub fn handle(ctx: &RequestContext, request: OffsetFetchRequest) -> OffsetFetchResponse {
    let version = ctx.version;
    let RequestContext { broker, session, .. } = ctx;
    let image = broker.metadata.image();
    let access = session.access(&broker.security.authorizer, &image.acls);
    if version >= FIRST_BATCHED_VERSION {
        let groups = request
            .groups
            .into_iter()
            .map(|group| {
                let response = OffsetFetchResponseGroup::default().with_group_id(group.group_id.clone());
                if !may_describe_group(access, &group.group_id.0) {
                    return response.with_error_code(ResponseError::GroupAuthorizationFailed.code());
                }
                let topics: Option<Asked> = group.topics.map(|ts| {
                    ts.into_iter()
                        .map(|t| (t.name.0.to_string(), t.partition_indexes))
                        .collect()
                });
                let (asked, refused) = split_by_describe(access, topics);
                match fetch(broker, &group.group_id.0, asked.as_deref(), request.require_stable) {
                    Ok((committed, unstable)) => {
                        let committed = describable(access, committed, asked.is_none());
                        let mut topics = batched_topics(committed, &unstable);
                        topics.extend(refused.into_iter().map(refused_batched_topic));
                        response.with_topics(topics)
                    }
                    Err(error) => response.with_error_code(error.code()),
                }
            })
            .collect();
        return OffsetFetchResponse::default().with_groups(groups);
    }
    let topics: Option<Asked> = request.topics.map(|ts| {
        ts.into_iter()
            .map(|t| (t.name.0.to_string(), t.partition_indexes))
            .collect()
    });
    let fetched = if may_describe_group(access, &request.group_id.0) {
        let (asked, refused) = split_by_describe(access, topics.clone());
        fetch(broker, &request.group_id.0, asked.as_deref(), request.require_stable)
            .map(|(committed, unstable)| (describable(access, committed, asked.is_none()), unstable, refused))
    } else {
        Err(ResponseError::GroupAuthorizationFailed)
    };
    match fetched {
        Ok((committed, unstable, refused)) => {
            let mut answered = single_group_topics(committed, None, &unstable);
            answered.extend(refused.into_iter().map(refused_topic));
            OffsetFetchResponse::default().with_topics(answered)
        }
        Err(error) if version < FIRST_VERSION_WITH_TOP_LEVEL_ERROR => {
            let unanswered = topics
                .into_iter()
                .flatten()
                .flat_map(|(t, ps)| ps.into_iter().map(move |p| (t.clone(), p, None)))
                .collect();
            OffsetFetchResponse::default().with_topics(single_group_topics(unanswered, Some(error), &HashSet::new()))
        }
        Err(error) => OffsetFetchResponse::default().with_error_code(error.code()),
    }
}

/// The group's committed offsets and, with `require_stable` (v7+), the partitions an open
/// transaction holds offsets for: Kafka answers those UNSTABLE_OFFSET_COMMIT, which the
/// client retries, so a consumer taking over never starts from an offset a pending
/// transaction is about to replace.
fn fetch(
    broker: &Broker,
    group_id: &str,
    asked: Option<&[(String, Vec<i32>)]>,
    require_stable: bool,
) -> Result<(Committed, Unstable), ResponseError> {
    if require_stable {
        broker.groups.fetch_offsets_and_pending(group_id, asked)
    } else {
        Ok((broker.groups.fetch_offsets(group_id, asked)?, Unstable::new()))
    }
}

/// A partition's answer fields: its committed offset, or -1 with the partition's error.
fn answer(
    topic: &str,
    partition: i32,
    offset: &Option<OffsetAndMetadata>,
    unstable: &Unstable,
) -> ((i64, i32, String), Option<ResponseError>) {
    if unstable.contains(&(topic.to_string(), partition)) {
        return ((-1, -1, String::new()), Some(ResponseError::UnstableOffsetCommit));
    }
    (fields(offset), None)
}

/// Whether the principal may see the group's offsets: DESCRIBE on it.
fn may_describe_group(access: Access<'_>, group_id: &str) -> bool {
    access.authorize(AclOperation::Describe, ResourceType::Group, group_id)
}

/// The named topics the principal may describe, and those it may not (answered
/// TOPIC_AUTHORIZATION_FAILED). `None` (every committed topic) stays `None`.
fn split_by_describe(access: Access<'_>, topics: Option<Asked>) -> (Option<Asked>, Asked) {
    let Some(topics) = topics else {
        return (None, Vec::new());
    };
    let (asked, refused) = topics
        .into_iter()
        .partition(|(name, _)| access.authorize(AclOperation::Describe, ResourceType::Topic, name));
    (Some(asked), refused)
}

/// A fetch of every committed topic shows only those the principal may describe (silently);
/// named topics were authorized before.
fn describable(access: Access<'_>, committed: Committed, all_topics: bool) -> Committed {
    if !all_topics || !access.is_enabled() {
        return committed;
    }
    committed
        .into_iter()
        .filter(|(topic, _, _)| access.check(AclOperation::Describe, ResourceType::Topic, topic))
        .collect()
}

fn refused_topic((name, partitions): (String, Vec<i32>)) -> OffsetFetchResponseTopic {
    OffsetFetchResponseTopic::default()
        .with_name(TopicName(str_bytes(name)))
        .with_partitions(
            partitions
                .into_iter()
                .map(|index| {
                    OffsetFetchResponsePartition::default()
                        .with_partition_index(index)
                        .with_committed_offset(-1)
                        .with_committed_leader_epoch(-1)
                        .with_metadata(Some(str_bytes("")))
                        .with_error_code(ResponseError::TopicAuthorizationFailed.code())
                })
                .collect(),
        )
}

fn refused_batched_topic((name, partitions): (String, Vec<i32>)) -> OffsetFetchResponseTopics {
    OffsetFetchResponseTopics::default()
        .with_name(TopicName(str_bytes(name)))
        .with_partitions(
            partitions
                .into_iter()
                .map(|index| {
                    OffsetFetchResponsePartitions::default()
                        .with_partition_index(index)
                        .with_committed_offset(-1)
                        .with_committed_leader_epoch(-1)
                        .with_metadata(Some(str_bytes("")))
                        .with_error_code(ResponseError::TopicAuthorizationFailed.code())
                })
                .collect(),
        )
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

fn single_group_topics(
    committed: Committed,
    error: Option<ResponseError>,
    unstable: &Unstable,
) -> Vec<OffsetFetchResponseTopic> {
    by_topic(committed)
        .into_iter()
        .map(|(topic, partitions)| {
            let answered = partitions
                .into_iter()
                .map(|(index, offset)| {
                    let ((offset, epoch, metadata), unstable) = answer(&topic, index, &offset, unstable);
                    OffsetFetchResponsePartition::default()
                        .with_partition_index(index)
                        .with_committed_offset(offset)
                        .with_committed_leader_epoch(epoch)
                        .with_metadata(Some(str_bytes(metadata)))
                        .with_error_code(error.or(unstable).map_or(0, |e| e.code()))
                })
                .collect();
            OffsetFetchResponseTopic::default()
                .with_name(TopicName(str_bytes(topic)))
                .with_partitions(answered)
        })
        .collect()
}

fn batched_topics(committed: Committed, unstable: &Unstable) -> Vec<OffsetFetchResponseTopics> {
    by_topic(committed)
        .into_iter()
        .map(|(topic, partitions)| {
            let answered = partitions
                .into_iter()
                .map(|(index, offset)| {
                    let ((offset, epoch, metadata), unstable) = answer(&topic, index, &offset, unstable);
                    OffsetFetchResponsePartitions::default()
                        .with_partition_index(index)
                        .with_committed_offset(offset)
                        .with_committed_leader_epoch(epoch)
                        .with_metadata(Some(str_bytes(metadata)))
                        .with_error_code(unstable.map_or(0, |e| e.code()))
                })
                .collect();
            OffsetFetchResponseTopics::default()
                .with_name(TopicName(str_bytes(topic)))
                .with_partitions(answered)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::testing::Acls;

    fn offset(offset: i64) -> Option<OffsetAndMetadata> {
        Some(OffsetAndMetadata {
            offset,
            leader_epoch: -1,
            metadata: String::new(),
            commit_timestamp_ms: 0,
        })
    }

    #[test]
    fn fetching_offsets_needs_describe_on_the_group() {
        assert!(!may_describe_group(Acls::none().access(), "g"));
        let members = Acls::none().allow(ResourceType::Group, "g", AclOperation::Read);
        assert!(may_describe_group(members.access(), "g"), "READ implies DESCRIBE");
        assert!(!may_describe_group(members.access(), "h"));
    }

    #[test]
    fn named_topics_without_describe_are_refused_and_others_asked() {
        let acls = Acls::none().allow(ResourceType::Topic, "orders", AclOperation::Read);
        let asked = vec![("orders".to_string(), vec![0]), ("audit".to_string(), vec![0, 1])];
        let (asked, refused) = split_by_describe(acls.access(), Some(asked));
        assert_eq!(asked, Some(vec![("orders".to_string(), vec![0])]));
        let refused: Vec<OffsetFetchResponseTopics> = refused.into_iter().map(refused_batched_topic).collect();
        assert_eq!(refused[0].name.0.as_str(), "audit");
        let codes: Vec<i16> = refused[0].partitions.iter().map(|p| p.error_code).collect();
        assert_eq!(codes, vec![ResponseError::TopicAuthorizationFailed.code(); 2]);
        assert_eq!(split_by_describe(acls.access(), None), (None, Vec::new()));
    }

    #[test]
    fn a_fetch_of_every_topic_silently_leaves_out_topics_without_describe() {
        let acls = Acls::none().allow(ResourceType::Topic, "orders", AclOperation::Describe);
        let committed = vec![
            ("audit".to_string(), 0, offset(3)),
            ("orders".to_string(), 0, offset(7)),
        ];
        let shown = describable(acls.access(), committed.clone(), true);
        assert_eq!(shown.len(), 1);
        assert_eq!(shown[0].0, "orders");
        assert_eq!(
            describable(acls.access(), committed, false).len(),
            2,
            "named topics were checked before"
        );
    }

    #[test]
    fn with_require_stable_partitions_of_open_transactions_are_unstable_in_both_formats() {
        let committed = vec![
            ("orders".to_string(), 0, offset(7)),
            ("orders".to_string(), 1, offset(8)),
        ];
        let unstable = HashSet::from([("orders".to_string(), 1)]);
        let unstable_code = ResponseError::UnstableOffsetCommit.code();

        let single = single_group_topics(committed.clone(), None, &unstable);
        let answered: Vec<(i64, i16)> = single[0]
            .partitions
            .iter()
            .map(|p| (p.committed_offset, p.error_code))
            .collect();
        assert_eq!(answered, vec![(7, 0), (-1, unstable_code)]);

        let batched = batched_topics(committed.clone(), &unstable);
        let answered: Vec<(i64, i16)> = batched[0]
            .partitions
            .iter()
            .map(|p| (p.committed_offset, p.error_code))
            .collect();
        assert_eq!(answered, vec![(7, 0), (-1, unstable_code)]);

        let stable = batched_topics(committed, &Unstable::new());
        assert!(stable[0].partitions.iter().all(|p| p.error_code == 0));
    }
}

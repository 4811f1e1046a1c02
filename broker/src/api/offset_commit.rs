//! OffsetCommit: a group's committed positions, answered once `__consumer_offsets` holds them
//! on the ISR.
//!
//! Needs READ on the group (else every partition is answered GROUP_AUTHORIZATION_FAILED) and
//! READ on each topic (else its partitions get TOPIC_AUTHORIZATION_FAILED and the others are
//! committed), as Kafka.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::offset_commit_response::{OffsetCommitResponsePartition, OffsetCommitResponseTopic};
use kafka_protocol::messages::{OffsetCommitRequest, OffsetCommitResponse};

use super::{Access, RequestContext};
use crate::clock::now_ms;
use crate::group::records::OffsetAndMetadata;
use crate::metadata::acls::{AclOperation, ResourceType};
use crate::metadata::image::{MetadataImage, TopicImage};

/// Per requested partition: an error found before the commit, or the offset to commit.
type Checked = Vec<Vec<Result<OffsetAndMetadata, ResponseError>>>;
/// The offsets to commit, by topic and partition.
type ToCommit = Vec<((String, i32), OffsetAndMetadata)>;

pub async fn handle(ctx: RequestContext, request: OffsetCommitRequest) -> OffsetCommitResponse {
    let RequestContext { broker, session, .. } = ctx;
    let image = broker.metadata.image();
    let access = session.access(&broker.security.authorizer, &image.acls);
    if let Some(refused) = group_refusal(access, &request) {
        return refused;
    }
    let max_metadata = broker.config.group.offset_metadata_max_bytes;
    let (checked, to_commit) = check(&image, access, &request, max_metadata, now_ms());
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

/// Each partition's offset to commit, or why it is not committed: no READ on its topic, an
/// unknown topic or partition, metadata over `offset.metadata.max.bytes`.
fn check(
    image: &MetadataImage,
    access: Access<'_>,
    request: &OffsetCommitRequest,
    max_metadata: usize,
    now: i64,
) -> (Checked, ToCommit) {
    let mut checked = Vec::with_capacity(request.topics.len());
    let mut to_commit = Vec::new();
    for topic in &request.topics {
        let readable = access.authorize(AclOperation::Read, ResourceType::Topic, &topic.name.0);
        let known = image.topic(&topic.name.0);
        let partitions = topic
            .partitions
            .iter()
            .map(|p| {
                let metadata = p.committed_metadata.as_deref().unwrap_or_default();
                refusal(known, readable, p.partition_index, metadata, max_metadata)?;
                let value = OffsetAndMetadata {
                    offset: p.committed_offset,
                    leader_epoch: p.committed_leader_epoch,
                    metadata: metadata.to_string(),
                    commit_timestamp_ms: now,
                };
                to_commit.push(((topic.name.0.to_string(), p.partition_index), value.clone()));
                Ok(value)
            })
            .collect();
        checked.push(partitions);
    }
    (checked, to_commit)
}

/// Why one partition's offset is not committed, checked in Kafka's order (shared with
/// TxnOffsetCommit): no READ on its topic, an unknown topic or partition, metadata over
/// `offset.metadata.max.bytes`.
pub(super) fn refusal(
    topic: Option<&TopicImage>,
    readable: bool,
    partition_index: i32,
    metadata: &str,
    max_metadata: usize,
) -> Result<(), ResponseError> {
    let exists = topic.is_some_and(|t| partition_index >= 0 && (partition_index as usize) < t.partitions.len());
    if !readable {
        Err(ResponseError::TopicAuthorizationFailed)
    } else if !exists {
        Err(ResponseError::UnknownTopicOrPartition)
    } else if metadata.len() > max_metadata {
        Err(ResponseError::OffsetMetadataTooLarge)
    } else {
        Ok(())
    }
}

/// Without READ on the group, every partition answered GROUP_AUTHORIZATION_FAILED.
fn group_refusal(access: Access<'_>, request: &OffsetCommitRequest) -> Option<OffsetCommitResponse> {
    if access.authorize(AclOperation::Read, ResourceType::Group, &request.group_id.0) {
        return None;
    }
    let topics = request
        .topics
        .iter()
        .map(|topic| {
            OffsetCommitResponseTopic::default()
                .with_name(topic.name.clone())
                .with_topic_id(topic.topic_id)
                .with_partitions(
                    topic
                        .partitions
                        .iter()
                        .map(|p| {
                            OffsetCommitResponsePartition::default()
                                .with_partition_index(p.partition_index)
                                .with_error_code(ResponseError::GroupAuthorizationFailed.code())
                        })
                        .collect(),
                )
        })
        .collect();
    Some(OffsetCommitResponse::default().with_topics(topics))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::testing::Acls;
    use crate::metadata::records::MetadataRecord;
    use kafka_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
    use kafka_protocol::messages::{GroupId, TopicName};
    use uuid::Uuid;

    #[test]
    fn partitions_of_topics_without_read_are_refused_and_the_rest_committed() {
        let mut image = MetadataImage::new("c".into());
        for (n, name) in ["orders", "audit"].into_iter().enumerate() {
            let topic_id = Uuid::from_u128(n as u128 + 1);
            image.apply(&MetadataRecord::Topic {
                name: name.into(),
                topic_id,
            });
            image.apply(&MetadataRecord::Partition {
                topic_id,
                partition: 0,
                replicas: vec![1],
                isr: vec![1],
                leader: 1,
                leader_epoch: 0,
                partition_epoch: 0,
                election: None,
            });
        }
        let topic = |name: &str| {
            OffsetCommitRequestTopic::default()
                .with_name(TopicName(crate::api::str_bytes(name)))
                .with_partitions(vec![OffsetCommitRequestPartition::default().with_committed_offset(5)])
        };
        let request = OffsetCommitRequest::default()
            .with_group_id(GroupId(crate::api::str_bytes("g")))
            .with_topics(vec![topic("orders"), topic("audit")]);
        let acls = Acls::none()
            .allow(ResourceType::Group, "g", AclOperation::Read)
            .allow(ResourceType::Topic, "orders", AclOperation::Read)
            .allow(ResourceType::Topic, "audit", AclOperation::Describe);
        let (checked, to_commit) = check(&image, acls.access(), &request, 4096, 0);
        assert!(checked[0][0].is_ok());
        assert_eq!(
            checked[1][0].as_ref().err(),
            Some(&ResponseError::TopicAuthorizationFailed)
        );
        assert_eq!(to_commit.len(), 1);
        assert_eq!(to_commit[0].0, ("orders".to_string(), 0));

        assert!(group_refusal(acls.access(), &request).is_none());
        let watchers = Acls::none().allow(ResourceType::Group, "g", AclOperation::Describe);
        let refused = group_refusal(watchers.access(), &request).expect("DESCRIBE is not READ");
        let codes: Vec<i16> = refused.topics.iter().map(|t| t.partitions[0].error_code).collect();
        assert_eq!(codes, vec![ResponseError::GroupAuthorizationFailed.code(); 2]);
    }
}

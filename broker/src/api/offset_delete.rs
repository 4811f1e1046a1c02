//! OffsetDelete: removes a group's committed offsets for partitions no active member
//! subscribes to (GROUP_SUBSCRIBED_TO_TOPIC otherwise).
//!
//! Needs DELETE on the group (else GROUP_AUTHORIZATION_FAILED) and READ on each topic (else its
//! partitions get TOPIC_AUTHORIZATION_FAILED and keep their offsets), as Kafka.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::offset_delete_request::OffsetDeleteRequestTopic;
use kafka_protocol::messages::offset_delete_response::{OffsetDeleteResponsePartition, OffsetDeleteResponseTopic};
use kafka_protocol::messages::{OffsetDeleteRequest, OffsetDeleteResponse};

use super::{Access, RequestContext};
use crate::metadata::acls::{AclOperation, ResourceType};
use crate::metadata::image::MetadataImage;

pub async fn handle(ctx: RequestContext, request: OffsetDeleteRequest) -> OffsetDeleteResponse {
    let RequestContext { broker, session, .. } = ctx;
    let image = broker.metadata.image();
    let access = session.access(&broker.security.authorizer, &image.acls);
    if !may_delete_offsets(access, &request.group_id.0) {
        return OffsetDeleteResponse::default().with_error_code(ResponseError::GroupAuthorizationFailed.code());
    }
    // Per topic: why none of its partitions are asked about, if so.
    let topic_errors = topic_errors(&image, access, &request.topics);
    let mut wanted = Vec::new();
    for (topic, error) in request.topics.iter().zip(&topic_errors) {
        if error.is_none() {
            wanted.extend(
                topic
                    .partitions
                    .iter()
                    .map(|p| (topic.name.0.to_string(), p.partition_index)),
            );
        }
    }
    let outcome = broker.groups.delete_offsets(&request.group_id.0, &wanted).await;
    let errors = match outcome {
        Err(error) => return OffsetDeleteResponse::default().with_error_code(error.code()),
        Ok(errors) => errors,
    };
    let mut errors = errors.into_iter();
    let topics = request
        .topics
        .into_iter()
        .zip(topic_errors)
        .map(|(topic, topic_error)| {
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    let error = match topic_error {
                        None => errors.next().flatten(),
                        Some(error) => Some(error),
                    };
                    OffsetDeleteResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(error.map_or(0, |e| e.code()))
                })
                .collect();
            OffsetDeleteResponseTopic::default()
                .with_name(topic.name)
                .with_partitions(partitions)
        })
        .collect();
    OffsetDeleteResponse::default().with_topics(topics)
}

/// Whether the principal may delete group `group_id`'s offsets: DELETE on the group.
fn may_delete_offsets(access: Access<'_>, group_id: &str) -> bool {
    access.authorize(AclOperation::Delete, ResourceType::Group, group_id)
}

/// For each topic, the error all its partitions are answered with before the coordinator is
/// asked: no READ on it, or no such topic.
fn topic_errors(
    image: &MetadataImage,
    access: Access<'_>,
    topics: &[OffsetDeleteRequestTopic],
) -> Vec<Option<ResponseError>> {
    topics
        .iter()
        .map(|topic| {
            if !access.authorize(AclOperation::Read, ResourceType::Topic, &topic.name.0) {
                Some(ResponseError::TopicAuthorizationFailed)
            } else if image.topic(&topic.name.0).is_none() {
                Some(ResponseError::UnknownTopicOrPartition)
            } else {
                None
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::testing::Acls;
    use crate::metadata::records::MetadataRecord;
    use kafka_protocol::messages::TopicName;

    #[test]
    fn deleting_offsets_needs_delete_on_the_group() {
        let acls = Acls::none()
            .allow(ResourceType::Group, "g", AclOperation::Delete)
            .allow(ResourceType::Group, "h", AclOperation::Read);
        assert!(may_delete_offsets(acls.access(), "g"));
        assert!(!may_delete_offsets(acls.access(), "h"));
    }

    #[test]
    fn topics_without_read_are_refused_before_the_coordinator_is_asked() {
        let mut image = MetadataImage::new("c".into());
        for (n, name) in ["orders", "audit"].into_iter().enumerate() {
            image.apply(&MetadataRecord::Topic {
                name: name.into(),
                topic_id: uuid::Uuid::from_u128(n as u128 + 1),
            });
        }
        let topic = |name: &str| OffsetDeleteRequestTopic::default().with_name(TopicName(crate::api::str_bytes(name)));
        let acls = Acls::none()
            .allow(ResourceType::Topic, "orders", AclOperation::Read)
            .allow(ResourceType::Topic, "gone", AclOperation::Read)
            .allow(ResourceType::Topic, "audit", AclOperation::Delete);
        let errors = topic_errors(&image, acls.access(), &[topic("orders"), topic("audit"), topic("gone")]);
        assert_eq!(
            errors,
            vec![
                None,
                Some(ResponseError::TopicAuthorizationFailed),
                Some(ResponseError::UnknownTopicOrPartition)
            ]
        );
    }
}

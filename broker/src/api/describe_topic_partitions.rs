//! DescribeTopicPartitions (KIP-966; what Kafka 4's `kafka-topics --describe` and Admin
//! `describeTopics` use when it is advertised): topic metadata paged by partition count.
//!
//! Paged as Kafka's `DescribeTopicPartitionsRequestHandler` and metadata cache do: topics in
//! name order (every topic when the request names none) from the cursor's topic on, starting
//! at the cursor's partition within that topic; at most min(`response_partition_limit`,
//! `max.request.partition.size.limit`) partitions (at least 1). When a topic is cut short, or
//! the limit is used up before the next topic, `next_cursor` says where to go on.
//!
//! With an authorizer, as Kafka: a topic needs DESCRIBE to be described. A request for every
//! topic silently leaves out the others; a topic named without it is answered
//! TOPIC_AUTHORIZATION_FAILED (after the page, without its id), exists or not.

use std::collections::BTreeSet;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_topic_partitions_response::{
    Cursor, DescribeTopicPartitionsResponsePartition, DescribeTopicPartitionsResponseTopic,
};
use kafka_protocol::messages::{DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse, TopicName};
use uuid::Uuid;

use super::metadata::PartitionView;
use super::{str_bytes, Access, RequestContext};
use crate::controller;
use crate::metadata::acls::{AclOperation, ResourceType};
use crate::metadata::image::{MetadataImage, TopicImage};

pub fn handle(ctx: &RequestContext, request: DescribeTopicPartitionsRequest) -> DescribeTopicPartitionsResponse {
    let RequestContext { broker, session, .. } = ctx;
    let image = broker.metadata.image();
    describe(
        &image,
        session.access(&broker.security.authorizer, &image.acls),
        &request,
        broker.config.max_request_partition_size_limit,
        &session.listener,
    )
}

/// `listener`: the client's, which partition leaders must have (as in Metadata).
fn describe(
    image: &MetadataImage,
    access: Access<'_>,
    request: &DescribeTopicPartitionsRequest,
    max_partitions: i32,
    listener: &str,
) -> DescribeTopicPartitionsResponse {
    let (cursor_topic, cursor_partition) = match &request.cursor {
        Some(cursor) => (cursor.topic_name.0.as_str(), cursor.partition_index),
        None => ("", 0),
    };
    let requested: BTreeSet<&str> = request.topics.iter().map(|t| t.name.0.as_str()).collect();
    // A cursor names where the previous page stopped: a partition index, and (when topics are
    // named) one of them.
    let cursor_outside_request = request.cursor.is_some() && !requested.is_empty() && !requested.contains(cursor_topic);
    if cursor_partition < 0 || cursor_outside_request {
        // Kafka refuses the request; this response has no top-level error, so every topic does.
        let topics = requested
            .into_iter()
            .map(|name| error_topic(name, ResponseError::InvalidRequest))
            .collect();
        return DescribeTopicPartitionsResponse::default().with_topics(topics);
    }
    let all_topics = request.topics.is_empty();
    let names: Vec<&str> = if all_topics {
        image.topics.keys().map(String::as_str).collect()
    } else {
        requested.into_iter().collect()
    };
    let mut remaining = request.response_partition_limit.min(max_partitions).max(1) as usize;
    let mut topics = Vec::new();
    let mut refused = Vec::new();
    let mut next_cursor = None;
    for name in names.into_iter().filter(|name| *name >= cursor_topic) {
        let describable = if all_topics {
            access.check(AclOperation::Describe, ResourceType::Topic, name)
        } else {
            access.authorize(AclOperation::Describe, ResourceType::Topic, name)
        };
        if !describable {
            if !all_topics {
                refused.push(error_topic(name, ResponseError::TopicAuthorizationFailed));
            }
            continue;
        }
        if remaining == 0 {
            next_cursor = Some(cursor(name, 0));
            break;
        }
        let Some(topic) = image.topic(name) else {
            let error = controller::validate_topic_name(name)
                .map_or_else(|e| e.error, |()| ResponseError::UnknownTopicOrPartition);
            topics.push(error_topic(name, error));
            continue;
        };
        let start = if name == cursor_topic {
            cursor_partition as usize
        } else {
            0
        };
        let end = topic.partitions.len().min(start.saturating_add(remaining));
        topics.push(topic_partitions(image, topic, start..end, listener));
        if end < topic.partitions.len() {
            next_cursor = Some(cursor(name, end as i32));
            break;
        }
        remaining -= end.saturating_sub(start);
    }
    for topic in &mut topics {
        if let Some(name) = &topic.name {
            topic.topic_authorized_operations = access.operations(ResourceType::Topic, &name.0);
        }
    }
    topics.extend(refused);
    DescribeTopicPartitionsResponse::default()
        .with_topics(topics)
        .with_next_cursor(next_cursor)
}

fn topic_partitions(
    image: &MetadataImage,
    topic: &TopicImage,
    indexes: std::ops::Range<usize>,
    listener: &str,
) -> DescribeTopicPartitionsResponseTopic {
    let partitions = topic
        .partitions
        .get(indexes.clone())
        .unwrap_or_default()
        .iter()
        .zip(indexes)
        .map(|(p, index)| {
            let view = PartitionView::of(image, p, listener);
            // No KIP-966 eligible leader replicas: both lists are empty, not null.
            DescribeTopicPartitionsResponsePartition::default()
                .with_error_code(view.error_code)
                .with_partition_index(index as i32)
                .with_leader_id(view.leader_id)
                .with_leader_epoch(view.leader_epoch)
                .with_replica_nodes(view.replica_nodes)
                .with_isr_nodes(view.isr_nodes)
                .with_eligible_leader_replicas(Some(Vec::new()))
                .with_last_known_elr(Some(Vec::new()))
                .with_offline_replicas(view.offline_replicas)
        })
        .collect();
    DescribeTopicPartitionsResponseTopic::default()
        .with_name(Some(TopicName(str_bytes(topic.name.clone()))))
        .with_topic_id(topic.topic_id)
        .with_is_internal(controller::is_internal_topic(&topic.name))
        .with_partitions(partitions)
}

fn error_topic(name: &str, error: ResponseError) -> DescribeTopicPartitionsResponseTopic {
    DescribeTopicPartitionsResponseTopic::default()
        .with_error_code(error.code())
        .with_name(Some(TopicName(str_bytes(name))))
        .with_topic_id(Uuid::nil())
        .with_is_internal(controller::is_internal_topic(name))
}

fn cursor(topic: &str, partition_index: i32) -> Cursor {
    Cursor::default()
        .with_topic_name(TopicName(str_bytes(topic)))
        .with_partition_index(partition_index)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::testing::Acls;
    use crate::metadata::records::{Endpoint, MetadataRecord};
    use kafka_protocol::messages::describe_topic_partitions_request::{self as request, TopicRequest};

    static NO_AUTHORIZER: std::sync::LazyLock<Acls> = std::sync::LazyLock::new(Acls::disabled);

    /// No authorizer: every topic and every operation.
    fn everything() -> Access<'static> {
        NO_AUTHORIZER.access()
    }

    /// Broker 1 and topics `a` (3 partitions) and `b` (2), all on broker 1.
    fn image() -> MetadataImage {
        let mut image = MetadataImage::new("test".into());
        image.apply(&MetadataRecord::RegisterBroker {
            broker_id: 1,
            incarnation_id: Uuid::nil(),
            endpoints: vec![Endpoint::plaintext("127.0.0.1", 9092)],
            rack: None,
            replica_capacity: None,
        });
        for (n, (name, count)) in [("a", 3), ("b", 2)].into_iter().enumerate() {
            let topic_id = Uuid::from_u128(n as u128 + 1);
            image.apply(&MetadataRecord::Topic {
                name: name.into(),
                topic_id,
            });
            for partition in 0..count {
                image.apply(&MetadataRecord::Partition {
                    topic_id,
                    partition,
                    replicas: vec![1],
                    isr: vec![1],
                    leader: 1,
                    leader_epoch: 0,
                    partition_epoch: 0,
                    election: None,
                });
            }
        }
        image
    }

    fn request(topics: &[&str], limit: i32, cursor: Option<(&str, i32)>) -> DescribeTopicPartitionsRequest {
        DescribeTopicPartitionsRequest::default()
            .with_topics(
                topics
                    .iter()
                    .map(|t| TopicRequest::default().with_name(TopicName(str_bytes(*t))))
                    .collect(),
            )
            .with_response_partition_limit(limit)
            .with_cursor(cursor.map(|(t, p)| {
                request::Cursor::default()
                    .with_topic_name(TopicName(str_bytes(t)))
                    .with_partition_index(p)
            }))
    }

    type TopicPartition = (String, i32);

    /// (topic, partition) described, in order, and the next cursor.
    fn page(response: &DescribeTopicPartitionsResponse) -> (Vec<TopicPartition>, Option<TopicPartition>) {
        let described = response
            .topics
            .iter()
            .flat_map(|t| {
                let name = t.name.as_ref().unwrap().0.to_string();
                t.partitions.iter().map(move |p| (name.clone(), p.partition_index))
            })
            .collect();
        let next = response
            .next_cursor
            .as_ref()
            .map(|c| (c.topic_name.0.to_string(), c.partition_index));
        (described, next)
    }

    fn pairs(list: &[(&str, i32)]) -> Vec<TopicPartition> {
        list.iter().map(|(t, p)| (t.to_string(), *p)).collect()
    }

    #[test]
    fn pages_cover_every_partition_of_every_topic_once_in_order() {
        let image = image();
        let mut cursor: Option<TopicPartition> = None;
        let mut seen = Vec::new();
        let mut pages = 0;
        loop {
            let request = request(&[], 2, cursor.as_ref().map(|(t, p)| (t.as_str(), *p)));
            let (described, next) = page(&describe(&image, everything(), &request, 2000, "PLAINTEXT"));
            assert!(described.len() <= 2, "page {pages} holds {described:?}");
            seen.extend(described);
            pages += 1;
            match next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        assert_eq!(pages, 3);
        assert_eq!(seen, pairs(&[("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1)]));
    }

    #[test]
    fn a_full_page_that_ends_with_a_topic_points_at_the_next_topic() {
        let (described, next) = page(&describe(
            &image(),
            everything(),
            &request(&[], 3, None),
            2000,
            "PLAINTEXT",
        ));
        assert_eq!(described, pairs(&[("a", 0), ("a", 1), ("a", 2)]));
        assert_eq!(next, Some(("b".to_string(), 0)));
    }

    #[test]
    fn the_broker_limit_caps_what_the_client_asks_for() {
        let (described, next) = page(&describe(
            &image(),
            everything(),
            &request(&["b", "a"], 100, None),
            1,
            "PLAINTEXT",
        ));
        assert_eq!(described, pairs(&[("a", 0)]));
        assert_eq!(next, Some(("a".to_string(), 1)));
        // A limit of 0 or less still describes one partition.
        let (described, _) = page(&describe(
            &image(),
            everything(),
            &request(&["b"], 0, None),
            2000,
            "PLAINTEXT",
        ));
        assert_eq!(described, pairs(&[("b", 0)]));
    }

    #[test]
    fn named_topics_are_sorted_and_unknown_ones_get_an_error() {
        let response = describe(
            &image(),
            everything(),
            &request(&["zz", "b", "b", "bad/name"], 10, Some(("b", 1))),
            2000,
            "PLAINTEXT",
        );
        let topics: Vec<(String, i16)> = response
            .topics
            .iter()
            .map(|t| (t.name.as_ref().unwrap().0.to_string(), t.error_code))
            .collect();
        let expected = vec![
            ("b".to_string(), 0),
            ("bad/name".to_string(), ResponseError::InvalidTopicException.code()),
            ("zz".to_string(), ResponseError::UnknownTopicOrPartition.code()),
        ];
        assert_eq!(topics, expected);
        assert_eq!(page(&response).0, pairs(&[("b", 1)]));
        let b = &response.topics[0];
        assert_eq!(
            (b.topic_id, b.topic_authorized_operations),
            (Uuid::from_u128(2), 0b1101_1111_1000)
        );
        assert_eq!(b.partitions[0].eligible_leader_replicas, Some(vec![]));
    }

    #[test]
    fn a_negative_cursor_partition_or_a_cursor_outside_the_named_topics_is_an_invalid_request() {
        for cursor in [("a", -1), ("b", 0)] {
            let response = describe(
                &image(),
                everything(),
                &request(&["a"], 10, Some(cursor)),
                2000,
                "PLAINTEXT",
            );
            assert_eq!(response.topics.len(), 1, "{cursor:?}");
            assert_eq!(
                response.topics[0].error_code,
                ResponseError::InvalidRequest.code(),
                "{cursor:?}"
            );
        }
    }

    #[test]
    fn topics_without_describe_are_left_out_of_all_topics_and_refused_when_named() {
        let acls = Acls::none().allow(ResourceType::Topic, "b", AclOperation::Read);
        let all = describe(&image(), acls.access(), &request(&[], 10, None), 2000, "PLAINTEXT");
        let names: Vec<(String, i16)> = all
            .topics
            .iter()
            .map(|t| (t.name.as_ref().unwrap().0.to_string(), t.error_code))
            .collect();
        assert_eq!(names, vec![("b".to_string(), 0)]);
        let read_and_describe = (1 << AclOperation::Read as i32) | (1 << AclOperation::Describe as i32);
        assert_eq!(all.topics[0].topic_authorized_operations, read_and_describe);

        let named = describe(
            &image(),
            acls.access(),
            &request(&["a", "b", "zz"], 10, None),
            2000,
            "PLAINTEXT",
        );
        let refused = ResponseError::TopicAuthorizationFailed.code();
        let topics: Vec<(String, i16, Uuid, usize)> = named
            .topics
            .iter()
            .map(|t| {
                (
                    t.name.as_ref().unwrap().0.to_string(),
                    t.error_code,
                    t.topic_id,
                    t.partitions.len(),
                )
            })
            .collect();
        assert_eq!(
            topics,
            vec![
                ("b".to_string(), 0, Uuid::from_u128(2), 2),
                ("a".to_string(), refused, Uuid::nil(), 0),
                ("zz".to_string(), refused, Uuid::nil(), 0),
            ]
        );
        assert_eq!(named.topics[1].topic_authorized_operations, i32::MIN);
    }
}

//! OffsetDelete: removes a group's committed offsets for partitions no active member
//! subscribes to (GROUP_SUBSCRIBED_TO_TOPIC otherwise).

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::offset_delete_response::{OffsetDeleteResponsePartition, OffsetDeleteResponseTopic};
use kafka_protocol::messages::{OffsetDeleteRequest, OffsetDeleteResponse};

use crate::broker::Broker;

pub async fn handle(broker: Arc<Broker>, request: OffsetDeleteRequest) -> OffsetDeleteResponse {
    let image = broker.metadata.image();
    let mut wanted = Vec::new();
    for topic in &request.topics {
        if image.topic(&topic.name.0).is_some() {
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
        .map(|topic| {
            let known = image.topic(&topic.name.0).is_some();
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    let error = if known {
                        errors.next().flatten()
                    } else {
                        Some(ResponseError::UnknownTopicOrPartition)
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

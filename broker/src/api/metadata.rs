//! Metadata: brokers, controller, topics and partition leadership, from the applied image.
//! Unknown topics are auto-created when both the client and `auto.create.topics.enable`
//! allow it, with `num.partitions` partitions.

use std::collections::BTreeMap;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse, TopicName};
use uuid::Uuid;

use super::str_bytes;
use crate::broker::Broker;
use crate::controller::{self, NewTopic};
use crate::metadata::image::{MetadataImage, TopicImage};

pub fn handle(broker: &Broker, request: MetadataRequest, version: i16) -> MetadataResponse {
    let mut image = broker.metadata.image();
    // v0 has no null: an empty list means every topic.
    let all_topics = request.topics.is_none() || (version == 0 && request.topics.as_ref().is_some_and(Vec::is_empty));
    let mut topics = Vec::new();
    if all_topics {
        topics.extend(image.topics.values().map(|t| topic_metadata(&image, t)));
    } else {
        for requested in request.topics.iter().flatten() {
            let by_name = requested.name.as_ref().map(|n| n.0.to_string());
            let found = match &by_name {
                Some(name) => image.topic(name).cloned(),
                None => image.topic_by_id(&requested.topic_id).cloned(),
            };
            let entry = match (found, by_name) {
                (Some(topic), _) => topic_metadata(&image, &topic),
                (None, Some(name)) if request.allow_auto_topic_creation && broker.config.auto_create_topics_enable => {
                    match auto_create(broker, &name) {
                        Ok(next) => {
                            image = next;
                            match image.topic(&name) {
                                Some(topic) => topic_metadata(&image, topic),
                                None => error_topic(Some(name), Uuid::nil(), ResponseError::LeaderNotAvailable),
                            }
                        }
                        Err(error) => error_topic(Some(name), Uuid::nil(), error),
                    }
                }
                (None, Some(name)) => {
                    let error = match controller::validate_topic_name(&name) {
                        Ok(()) => ResponseError::UnknownTopicOrPartition,
                        Err(e) => e.error,
                    };
                    error_topic(Some(name), Uuid::nil(), error)
                }
                (None, None) => error_topic(None, requested.topic_id, ResponseError::UnknownTopicId),
            };
            topics.push(entry);
        }
    }
    MetadataResponse::default()
        .with_brokers(brokers(&image))
        .with_cluster_id(Some(str_bytes(image.cluster_id.clone())))
        .with_controller_id(BrokerId(broker.config.node_id))
        .with_topics(topics)
}

fn auto_create(broker: &Broker, name: &str) -> Result<std::sync::Arc<MetadataImage>, ResponseError> {
    let new_topic = NewTopic {
        name: name.to_string(),
        num_partitions: broker.config.num_partitions,
        replication_factor: broker.config.default_replication_factor,
        assignments: None,
        configs: BTreeMap::new(),
    };
    let created = broker.commit(|image| {
        if image.topic(name).is_some() {
            return Ok((Vec::new(), ())); // created meanwhile by another request
        }
        Ok((controller::create_topic(image, &new_topic, Uuid::new_v4())?, ()))
    });
    match created {
        Ok((image, ())) => {
            tracing::info!(topic = name, partitions = new_topic.num_partitions, "auto-created topic on a metadata request");
            Ok(image)
        }
        Err(crate::metadata::CommitError::Refused(e)) => Err(e.error),
        Err(e) => {
            tracing::error!(topic = name, error = %e, "auto-creating a topic failed");
            Err(ResponseError::KafkaStorageError)
        }
    }
}

fn brokers(image: &MetadataImage) -> Vec<MetadataResponseBroker> {
    image
        .live_brokers()
        .filter_map(|b| {
            let endpoint = b.endpoints.first()?;
            Some(
                MetadataResponseBroker::default()
                    .with_node_id(BrokerId(b.broker_id))
                    .with_host(str_bytes(endpoint.host.clone()))
                    .with_port(endpoint.port)
                    .with_rack(b.rack.clone().map(str_bytes)),
            )
        })
        .collect()
}

fn topic_metadata(image: &MetadataImage, topic: &TopicImage) -> MetadataResponseTopic {
    let partitions = topic
        .partitions
        .iter()
        .enumerate()
        .map(|(index, p)| {
            let ids = |v: &[i32]| v.iter().map(|&id| BrokerId(id)).collect::<Vec<_>>();
            let offline: Vec<BrokerId> =
                p.replicas.iter().filter(|id| !image.live_brokers().any(|b| b.broker_id == **id)).map(|&id| BrokerId(id)).collect();
            let leader_alive = image.live_brokers().any(|b| b.broker_id == p.leader);
            MetadataResponsePartition::default()
                .with_error_code(if leader_alive { 0 } else { ResponseError::LeaderNotAvailable.code() })
                .with_partition_index(index as i32)
                .with_leader_id(BrokerId(if leader_alive { p.leader } else { -1 }))
                .with_leader_epoch(p.leader_epoch)
                .with_replica_nodes(ids(&p.replicas))
                .with_isr_nodes(ids(&p.isr))
                .with_offline_replicas(offline)
        })
        .collect();
    MetadataResponseTopic::default()
        .with_name(Some(TopicName(str_bytes(topic.name.clone()))))
        .with_topic_id(topic.topic_id)
        .with_is_internal(topic.name.starts_with("__"))
        .with_partitions(partitions)
}

fn error_topic(name: Option<String>, topic_id: Uuid, error: ResponseError) -> MetadataResponseTopic {
    MetadataResponseTopic::default()
        .with_error_code(error.code())
        .with_name(name.map(|n| TopicName(str_bytes(n))))
        .with_topic_id(topic_id)
}

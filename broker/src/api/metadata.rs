//! Metadata: brokers, controller, topics and partition leadership, from the applied image.
//! Unknown topics are auto-created when both the client and `auto.create.topics.enable`
//! allow it, with `num.partitions` partitions.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use futures::FutureExt;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse, TopicName};
use uuid::Uuid;

use sluice_protocol::ResponseBody;

use super::{str_bytes, Reply};
use crate::broker::Broker;
use crate::controller;
use crate::metadata::image::{MetadataImage, PartitionRegistration, TopicImage};
use crate::metadata::records::MetadataCommand;
use crate::metadata::records::NewTopic;
use crate::metadata::CommitError;

/// Answers at once unless unknown topics are to be auto-created: then after their creation
/// is committed, with LEADER_NOT_AVAILABLE for each created topic, as Kafka answers. The
/// client asks again (its retry backoff, 100 ms by default), by when every broker has applied
/// the creation: had this broker named the leaders at once, a producer could reach a leader
/// that has not yet heard of the topic, and an acks=0 batch refused there is lost unseen.
pub fn handle(broker: &Arc<Broker>, request: MetadataRequest, version: i16, listener: &Arc<str>) -> Reply {
    let image = broker.metadata.image();
    let to_create: Vec<String> = if request.allow_auto_topic_creation && broker.config.auto_create_topics_enable {
        request
            .topics
            .iter()
            .flatten()
            .filter_map(|t| t.name.as_ref().map(|n| n.0.to_string()))
            .filter(|name| image.topic(name).is_none() && controller::may_auto_create(name))
            .collect()
    } else {
        Vec::new()
    };
    if to_create.is_empty() {
        return Reply::Now(ResponseBody::Metadata(respond(
            broker,
            &request,
            version,
            listener,
            &HashMap::new(),
        )));
    }
    let (broker, listener) = (broker.clone(), listener.clone());
    Reply::Later(
        async move {
            let mut failures = HashMap::new();
            for name in to_create {
                let error = auto_create(&broker, &name).await.err();
                failures.insert(name, error.unwrap_or(ResponseError::LeaderNotAvailable));
            }
            ResponseBody::Metadata(respond(&broker, &request, version, &listener, &failures))
        }
        .boxed(),
    )
}

/// Builds the response from the current image; `failures` are the topics this request
/// auto-created (LEADER_NOT_AVAILABLE) or failed to. Brokers are described by their endpoint
/// on the client's `listener`; one without it is left out.
fn respond(
    broker: &Broker,
    request: &MetadataRequest,
    version: i16,
    listener: &str,
    failures: &HashMap<String, ResponseError>,
) -> MetadataResponse {
    let image = broker.metadata.image();
    let topic_metadata = |image: &MetadataImage, topic: &TopicImage| topic_metadata(image, topic, listener, version);
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
                (Some(topic), name) => match name.as_ref().and_then(|n| failures.get(n)) {
                    Some(error) => error_topic(name, Uuid::nil(), *error),
                    None => topic_metadata(&image, &topic),
                },
                (None, Some(name)) => {
                    let error = match (failures.get(&name), controller::validate_topic_name(&name)) {
                        (Some(error), _) => *error,
                        (None, Err(e)) => e.error,
                        (None, Ok(())) => ResponseError::UnknownTopicOrPartition,
                    };
                    error_topic(Some(name), Uuid::nil(), error)
                }
                (None, None) => error_topic(None, requested.topic_id, ResponseError::UnknownTopicId),
            };
            topics.push(entry);
        }
    }
    if request.include_topic_authorized_operations && version >= 8 {
        for topic in topics.iter_mut().filter(|t| t.error_code == 0) {
            topic.topic_authorized_operations = TOPIC_OPERATIONS;
        }
    }
    let response = MetadataResponse::default()
        .with_brokers(brokers(&image, listener))
        .with_cluster_id(Some(str_bytes(image.cluster_id.clone())))
        .with_controller_id(BrokerId(broker.metadata.controller_id()))
        .with_topics(topics);
    // Without an authorizer every operation is allowed, and Kafka says so when asked.
    if request.include_cluster_authorized_operations && (8..=10).contains(&version) {
        response.with_cluster_authorized_operations(CLUSTER_OPERATIONS)
    } else {
        response
    }
}

/// ACL operation bits (Kafka's `AclOperation` codes) allowed on a topic / the cluster when no
/// authorizer is configured: what kafka-python and the Admin clients decode.
pub const TOPIC_OPERATIONS: i32 = bits(&[3, 4, 5, 6, 7, 8, 10, 11]);
pub const CLUSTER_OPERATIONS: i32 = bits(&[5, 7, 8, 9, 10, 11, 12]);

const fn bits(operations: &[u32]) -> i32 {
    let mut value = 0;
    let mut i = 0;
    while i < operations.len() {
        value |= 1 << operations[i];
        i += 1;
    }
    value
}

async fn auto_create(broker: &Broker, name: &str) -> Result<(), ResponseError> {
    let topic = NewTopic {
        name: name.to_string(),
        num_partitions: broker.config.num_partitions,
        replication_factor: broker.config.default_replication_factor,
        replication_factor_defaulted: true,
        assignments: None,
        configs: BTreeMap::new(),
    };
    let topic = controller::propose_placement(&broker.metadata.image(), topic);
    match broker
        .commit(MetadataCommand::CreateTopic {
            topic,
            topic_id: Uuid::new_v4(),
        })
        .await
    {
        Ok(_) => {
            tracing::info!(
                topic = name,
                partitions = broker.config.num_partitions,
                "auto-created topic on a metadata request"
            );
            Ok(())
        }
        // Created meanwhile by another client: not a failure.
        Err(CommitError::Refused(e)) if e.error == ResponseError::TopicAlreadyExists => Ok(()),
        Err(CommitError::Refused(e)) => Err(e.error),
        Err(e) => {
            tracing::warn!(topic = name, error = %e, "auto-creating a topic failed; the client will retry");
            Err(ResponseError::LeaderNotAvailable)
        }
    }
}

fn brokers(image: &MetadataImage, listener: &str) -> Vec<MetadataResponseBroker> {
    image
        .live_brokers()
        .filter_map(|b| {
            let endpoint = b.endpoint(listener)?;
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

fn topic_metadata(image: &MetadataImage, topic: &TopicImage, listener: &str, version: i16) -> MetadataResponseTopic {
    let partitions = topic
        .partitions
        .iter()
        .enumerate()
        .map(|(index, p)| {
            let mut view = PartitionView::of(image, p, listener);
            // Kafka reports a leader missing the client's listener as LISTENER_NOT_FOUND from v6.
            if version < 6 && view.error_code == ResponseError::ListenerNotFound.code() {
                view.error_code = ResponseError::LeaderNotAvailable.code();
            }
            MetadataResponsePartition::default()
                .with_error_code(view.error_code)
                .with_partition_index(index as i32)
                .with_leader_id(view.leader_id)
                .with_leader_epoch(view.leader_epoch)
                .with_replica_nodes(view.replica_nodes)
                .with_isr_nodes(view.isr_nodes)
                .with_offline_replicas(view.offline_replicas)
        })
        .collect();
    MetadataResponseTopic::default()
        .with_name(Some(TopicName(str_bytes(topic.name.clone()))))
        .with_topic_id(topic.topic_id)
        .with_is_internal(controller::is_internal_topic(&topic.name))
        .with_partitions(partitions)
}

/// One partition as Metadata and DescribeTopicPartitions describe it: a leader that is not
/// live is reported as -1 with LEADER_NOT_AVAILABLE (clients wait and refresh), one without
/// the client's listener as -1 with LISTENER_NOT_FOUND (the brokers' listeners disagree), and
/// replicas on brokers that are not live are offline.
pub(crate) struct PartitionView {
    pub error_code: i16,
    pub leader_id: BrokerId,
    pub leader_epoch: i32,
    pub replica_nodes: Vec<BrokerId>,
    pub isr_nodes: Vec<BrokerId>,
    pub offline_replicas: Vec<BrokerId>,
}

impl PartitionView {
    pub(crate) fn of(image: &MetadataImage, p: &PartitionRegistration, listener: &str) -> PartitionView {
        let ids = |v: &[i32]| v.iter().map(|&id| BrokerId(id)).collect::<Vec<_>>();
        let live = |id: i32| image.live_brokers().any(|b| b.broker_id == id);
        let leader = image.brokers.get(&p.leader).filter(|b| b.is_live());
        let error = match leader {
            None => Some(ResponseError::LeaderNotAvailable),
            Some(b) if b.endpoint(listener).is_none() => Some(ResponseError::ListenerNotFound),
            Some(_) => None,
        };
        PartitionView {
            error_code: error.map_or(0, |e| e.code()),
            leader_id: BrokerId(if error.is_none() { p.leader } else { -1 }),
            leader_epoch: p.leader_epoch,
            replica_nodes: ids(&p.replicas),
            isr_nodes: ids(&p.isr),
            offline_replicas: p
                .replicas
                .iter()
                .filter(|id| !live(**id))
                .map(|&id| BrokerId(id))
                .collect(),
        }
    }
}

fn error_topic(name: Option<String>, topic_id: Uuid, error: ResponseError) -> MetadataResponseTopic {
    MetadataResponseTopic::default()
        .with_error_code(error.code())
        .with_name(name.map(|n| TopicName(str_bytes(n))))
        .with_topic_id(topic_id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::records::{Endpoint, MetadataRecord};

    /// Broker 1 with an INTERNAL and an EXTERNAL listener, broker 2 with INTERNAL only, and a
    /// partition of `t` led by each.
    fn image() -> MetadataImage {
        let mut image = MetadataImage::new("test".into());
        let endpoint = |listener: &str, port| Endpoint {
            listener: listener.into(),
            host: format!("{listener}.example").to_lowercase(),
            port,
        };
        let brokers = [
            (1, vec![endpoint("INTERNAL", 9092), endpoint("EXTERNAL", 19092)]),
            (2, vec![endpoint("INTERNAL", 9092)]),
        ];
        for (broker_id, endpoints) in brokers {
            image.apply(&MetadataRecord::RegisterBroker {
                broker_id,
                incarnation_id: Uuid::nil(),
                endpoints,
                rack: None,
                replica_capacity: None,
            });
        }
        let topic_id = Uuid::from_u128(1);
        image.apply(&MetadataRecord::Topic {
            name: "t".into(),
            topic_id,
        });
        for (partition, leader) in [(0, 1), (1, 2)] {
            image.apply(&MetadataRecord::Partition {
                topic_id,
                partition,
                replicas: vec![1, 2],
                isr: vec![1, 2],
                leader,
                leader_epoch: 0,
                partition_epoch: 0,
            });
        }
        image
    }

    #[test]
    fn brokers_and_leaders_are_described_by_the_clients_listener() {
        let image = image();
        let listed = |listener| {
            brokers(&image, listener)
                .into_iter()
                .map(|b| (b.node_id.0, b.host.to_string(), b.port))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            listed("INTERNAL"),
            vec![
                (1, "internal.example".into(), 9092),
                (2, "internal.example".into(), 9092)
            ]
        );
        assert_eq!(listed("EXTERNAL"), vec![(1, "external.example".into(), 19092)]);
        let topic = image.topic("t").unwrap();
        let errors = |listener, version| {
            let t = topic_metadata(&image, topic, listener, version);
            t.partitions
                .iter()
                .map(|p| (p.error_code, p.leader_id.0))
                .collect::<Vec<_>>()
        };
        assert_eq!(errors("INTERNAL", 12), vec![(0, 1), (0, 2)]);
        // Broker 2 has no EXTERNAL listener: from v6 Kafka says so, before it the leader is unavailable.
        let not_found = ResponseError::ListenerNotFound.code();
        assert_eq!(errors("EXTERNAL", 12), vec![(0, 1), (not_found, -1)]);
        let unavailable = ResponseError::LeaderNotAvailable.code();
        assert_eq!(errors("EXTERNAL", 5), vec![(0, 1), (unavailable, -1)]);
    }
}

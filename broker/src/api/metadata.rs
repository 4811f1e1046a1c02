//! Metadata: brokers, controller, topics and partition leadership, from the applied image.
//! Unknown topics are auto-created when both the client and `auto.create.topics.enable`
//! allow it, with `num.partitions` partitions.
//!
//! With an authorizer, as Kafka: a topic needs DESCRIBE to be shown. A request for every topic
//! silently leaves out the others; a topic named without it is answered
//! TOPIC_AUTHORIZATION_FAILED, exists or not (by id: with its id, which is not secret).
//! Auto-creating a topic also needs CREATE on the cluster or on the topic, else
//! TOPIC_AUTHORIZATION_FAILED. Authorized-operations bits are computed only when asked for.

use std::collections::{BTreeMap, HashMap};

use futures::FutureExt;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse, TopicName};
use uuid::Uuid;

use sluice_protocol::ResponseBody;

use super::{str_bytes, Access, Reply, RequestContext, Session};
use crate::broker::Broker;
use crate::controller;
use crate::metadata::acls::{AclOperation, ResourceType};
use crate::metadata::image::{MetadataImage, PartitionRegistration, TopicImage};
use crate::metadata::records::MetadataCommand;
use crate::metadata::records::NewTopic;
use crate::metadata::CommitError;

/// Answers at once unless unknown topics are to be auto-created: then after their creation
/// is committed, with LEADER_NOT_AVAILABLE for each created topic, as Kafka answers. The
/// client asks again (its retry backoff, 100 ms by default), by when every broker has applied
/// the creation: had this broker named the leaders at once, a producer could reach a leader
/// that has not yet heard of the topic, and an acks=0 batch refused there is lost unseen.
pub fn handle(ctx: &RequestContext, request: MetadataRequest) -> Reply {
    let version = ctx.version;
    let RequestContext { broker, session, .. } = ctx;
    let image = broker.metadata.image();
    let access = session.access(&broker.security.authorizer, &image.acls);
    let creating = request.allow_auto_topic_creation && broker.config.auto_create_topics_enable;
    let allowed = authorize_named(&image, access, &request, version, creating);
    let to_create: Vec<String> = if creating {
        request
            .topics
            .iter()
            .flatten()
            .zip(&allowed)
            .filter(|(_, allowed)| **allowed)
            .filter_map(|(t, _)| t.name.as_ref().map(|n| n.0.to_string()))
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
            session,
            &allowed,
            &HashMap::new(),
        )));
    }
    let (broker, session) = (broker.clone(), session.clone());
    Reply::Later(
        async move {
            let mut failures = HashMap::new();
            for name in to_create {
                let error = auto_create(&broker, &name).await.err();
                failures.insert(name, error.unwrap_or(ResponseError::LeaderNotAvailable));
            }
            ResponseBody::Metadata(respond(&broker, &request, version, &session, &allowed, &failures))
        }
        .boxed(),
    )
}

/// Whether the request is for every topic (v0 has no null: an empty list means every topic).
fn is_all_topics(request: &MetadataRequest, version: i16) -> bool {
    request.topics.is_none() || (version == 0 && request.topics.as_ref().is_some_and(Vec::is_empty))
}

/// For each topic the request names (none when it asks for every topic), whether it may be
/// shown: DESCRIBE on it, and when it is missing and `auto_create` would create it, CREATE
/// on the cluster or on it. A topic named by an unknown id is allowed (answered
/// UNKNOWN_TOPIC_ID).
fn authorize_named(
    image: &MetadataImage,
    access: Access<'_>,
    request: &MetadataRequest,
    version: i16,
    auto_create: bool,
) -> Vec<bool> {
    if is_all_topics(request, version) {
        return Vec::new();
    }
    let describe = |name: &str| access.authorize(AclOperation::Describe, ResourceType::Topic, name);
    request
        .topics
        .iter()
        .flatten()
        .map(|requested| match &requested.name {
            Some(name) => {
                let name = name.0.as_str();
                let may_create = || {
                    access.check_cluster(AclOperation::Create)
                        || access.authorize(AclOperation::Create, ResourceType::Topic, name)
                };
                describe(name) && (!auto_create || image.topic(name).is_some() || may_create())
            }
            None => image.topic_by_id(&requested.topic_id).is_none_or(|t| describe(&t.name)),
        })
        .collect()
}

/// Builds the response from the current image; `allowed` is [`authorize_named`]'s verdict on
/// each named topic, `failures` are the topics this request auto-created
/// (LEADER_NOT_AVAILABLE) or failed to. Brokers are described by their endpoint on the
/// client's listener; one without it is left out.
fn respond(
    broker: &Broker,
    request: &MetadataRequest,
    version: i16,
    session: &Session,
    allowed: &[bool],
    failures: &HashMap<String, ResponseError>,
) -> MetadataResponse {
    let image = broker.metadata.image();
    let access = session.access(&broker.security.authorizer, &image.acls);
    let listener = &session.listener;
    let topics = topics(&image, access, request, version, listener, allowed, failures);
    let response = MetadataResponse::default()
        .with_brokers(brokers(&image, listener))
        .with_cluster_id(Some(str_bytes(image.cluster_id.clone())))
        .with_controller_id(BrokerId(controller_for_clients(
            broker.metadata.controller_id(),
            broker.config.node_id,
            &image,
            listener,
        )))
        .with_topics(topics);
    if request.include_cluster_authorized_operations && (8..=10).contains(&version) {
        response.with_cluster_authorized_operations(access.cluster_operations())
    } else {
        response
    }
}

/// The response's topics: every topic the principal may describe, or each named one.
fn topics(
    image: &MetadataImage,
    access: Access<'_>,
    request: &MetadataRequest,
    version: i16,
    listener: &str,
    allowed: &[bool],
    failures: &HashMap<String, ResponseError>,
) -> Vec<MetadataResponseTopic> {
    let topic_metadata = |topic: &TopicImage| topic_metadata(image, topic, listener, version);
    let mut topics = Vec::new();
    if is_all_topics(request, version) {
        let visible = image
            .topics
            .values()
            .filter(|t| access.check(AclOperation::Describe, ResourceType::Topic, &t.name));
        topics.extend(visible.map(|t| topic_metadata(t)));
    } else {
        let refused = ResponseError::TopicAuthorizationFailed;
        for (requested, allowed) in request.topics.iter().flatten().zip(allowed) {
            let by_name = requested.name.as_ref().map(|n| n.0.to_string());
            if !allowed {
                // No id with a name the principal may not see; an id is not secret.
                let topic_id = if by_name.is_some() {
                    Uuid::nil()
                } else {
                    requested.topic_id
                };
                topics.push(error_topic(by_name, topic_id, refused));
                continue;
            }
            let found = match &by_name {
                Some(name) => image.topic(name),
                None => image.topic_by_id(&requested.topic_id),
            };
            let entry = match (found, by_name) {
                (Some(topic), name) => match name.as_ref().and_then(|n| failures.get(n)) {
                    Some(error) => error_topic(name, Uuid::nil(), *error),
                    None => topic_metadata(topic),
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
        // Every topic shown by name, as Kafka: not the refused ones, nor unknown ids.
        for topic in topics
            .iter_mut()
            .filter(|t| t.error_code != ResponseError::TopicAuthorizationFailed.code())
        {
            if let Some(name) = &topic.name {
                topic.topic_authorized_operations = access.operations(ResourceType::Topic, &name.0);
            }
        }
    }
    topics
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

/// The controller id a client is told: one of the brokers it is told of, or it cannot send
/// admin requests there (librdkafka's CreateTopics waits for the controller's connection
/// until it times out). Any broker here takes admin requests, as Kafka's KRaft brokers
/// forward them, so the quorum leader is named while it is listed (operators read it as the
/// active controller), else this node, else the lowest listed id; -1 when none is listed.
pub(super) fn controller_for_clients(quorum_leader: i32, this_node: i32, image: &MetadataImage, listener: &str) -> i32 {
    let listed = |id: i32| {
        image
            .brokers
            .get(&id)
            .is_some_and(|b| b.is_live() && b.endpoint(listener).is_some())
    };
    if listed(quorum_leader) {
        return quorum_leader;
    }
    if listed(this_node) {
        return this_node;
    }
    image
        .live_brokers()
        .find(|b| b.endpoint(listener).is_some())
        .map_or(-1, |b| b.broker_id)
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
                election: None,
            });
        }
        image
    }

    #[test]
    fn the_controller_a_client_is_told_of_is_always_a_broker_it_is_told_of() {
        let image = image();
        // The quorum leader, when listed on the client's listener.
        assert_eq!(controller_for_clients(2, 1, &image, "INTERNAL"), 2);
        // Broker 2 has no EXTERNAL listener: this node instead.
        assert_eq!(controller_for_clients(2, 1, &image, "EXTERNAL"), 1);
        // A leader that is no broker (not registered yet, or controller-only), asked on a node
        // that is not listed either: the lowest listed broker.
        assert_eq!(controller_for_clients(3, 3, &image, "INTERNAL"), 1);
        // No quorum leader known.
        assert_eq!(controller_for_clients(-1, 2, &image, "INTERNAL"), 2);
        // Nobody listed on that listener.
        assert_eq!(controller_for_clients(1, 1, &image, "OTHER"), -1);
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

    mod authorization {
        use super::*;
        use crate::api::testing::Acls;
        use kafka_protocol::messages::metadata_request::MetadataRequestTopic;

        fn named(names: &[&str]) -> MetadataRequest {
            MetadataRequest::default().with_topics(Some(
                names
                    .iter()
                    .map(|n| MetadataRequestTopic::default().with_name(Some(TopicName(str_bytes(*n)))))
                    .collect(),
            ))
        }

        fn shown(acls: &Acls, request: &MetadataRequest, auto_create: bool) -> Vec<(Option<String>, i16, Uuid)> {
            let image = image();
            let allowed = authorize_named(&image, acls.access(), request, 12, auto_create);
            topics(
                &image,
                acls.access(),
                request,
                12,
                "INTERNAL",
                &allowed,
                &HashMap::new(),
            )
            .into_iter()
            .map(|t| (t.name.map(|n| n.0.to_string()), t.error_code, t.topic_id))
            .collect()
        }

        #[test]
        fn a_request_for_every_topic_silently_leaves_out_topics_without_describe() {
            let all = MetadataRequest::default().with_topics(None);
            assert_eq!(shown(&Acls::none(), &all, false), vec![]);
            let readers = Acls::none().allow(ResourceType::Topic, "t", AclOperation::Read);
            assert_eq!(
                shown(&readers, &all, false),
                vec![(Some("t".into()), 0, Uuid::from_u128(1))]
            );
        }

        #[test]
        fn a_named_topic_without_describe_is_refused_without_its_id_or_partitions() {
            let refused = ResponseError::TopicAuthorizationFailed.code();
            // Whether it exists ("t") or not ("nope") is not disclosed.
            assert_eq!(
                shown(&Acls::none(), &named(&["t", "nope"]), false),
                vec![
                    (Some("t".into()), refused, Uuid::nil()),
                    (Some("nope".into()), refused, Uuid::nil())
                ]
            );
            let image = image();
            let response = topics(
                &image,
                Acls::none().access(),
                &named(&["t"]),
                12,
                "INTERNAL",
                &[false],
                &HashMap::new(),
            );
            assert!(response[0].partitions.is_empty());
            // Asked by id, the id is answered (it is not secret) but not the name.
            let by_id = MetadataRequest::default().with_topics(Some(vec![MetadataRequestTopic::default()
                .with_name(None)
                .with_topic_id(Uuid::from_u128(1))]));
            assert_eq!(
                shown(&Acls::none(), &by_id, false),
                vec![(None, refused, Uuid::from_u128(1))]
            );
            let describers = Acls::none().allow(ResourceType::Topic, "t", AclOperation::Describe);
            assert_eq!(
                shown(&describers, &by_id, false),
                vec![(Some("t".into()), 0, Uuid::from_u128(1))]
            );
        }

        #[test]
        fn auto_creating_a_topic_needs_create_on_the_cluster_or_the_topic() {
            let image = image();
            let request = named(&["new", "t"]);
            let describers = Acls::none()
                .allow(ResourceType::Topic, "new", AclOperation::Describe)
                .allow(ResourceType::Topic, "t", AclOperation::Describe);
            let verdict = |acls: &Acls, auto_create| authorize_named(&image, acls.access(), &request, 12, auto_create);
            assert_eq!(
                verdict(&describers, true),
                vec![false, true],
                "no CREATE: refused; t exists"
            );
            assert_eq!(
                verdict(&describers, false),
                vec![true, true],
                "nothing to create: unknown, not refused"
            );
            let topic_creator = describers.allow(ResourceType::Topic, "new", AclOperation::Create);
            assert_eq!(verdict(&topic_creator, true), vec![true, true]);
            let cluster_creator = Acls::none()
                .allow(ResourceType::Topic, "new", AclOperation::Describe)
                .allow_cluster(AclOperation::Create);
            assert_eq!(verdict(&cluster_creator, true), vec![true, false]);
        }

        #[test]
        fn authorized_operations_are_the_principals_and_only_when_asked() {
            let image = image();
            let acls = Acls::none().allow(ResourceType::Topic, "t", AclOperation::Read);
            let ask = |version| {
                let request = named(&["t"]).with_include_topic_authorized_operations(true);
                topics(
                    &image,
                    acls.access(),
                    &request,
                    version,
                    "INTERNAL",
                    &[true],
                    &HashMap::new(),
                )[0]
                .topic_authorized_operations
            };
            assert_eq!(
                ask(12),
                (1 << AclOperation::Read as i32) | (1 << AclOperation::Describe as i32)
            );
            assert_eq!(ask(7), i32::MIN, "the field does not exist before v8");
            let everything = Acls::disabled();
            let all = topics(
                &image,
                everything.access(),
                &named(&["t"]).with_include_topic_authorized_operations(true),
                12,
                "INTERNAL",
                &[true],
                &HashMap::new(),
            );
            assert_eq!(
                all[0].topic_authorized_operations, 0b1101_1111_1000,
                "every topic operation"
            );
            assert_eq!(Acls::none().access().cluster_operations(), 0);
            let describer = Acls::none().allow_cluster(AclOperation::Describe);
            assert_eq!(
                describer.access().cluster_operations(),
                1 << AclOperation::Describe as i32
            );
        }
    }
}

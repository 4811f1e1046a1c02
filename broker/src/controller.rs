//! Controller decisions: validating admin requests against the metadata image and turning
//! them into metadata records. Pure functions of (image, request): no I/O, no clock, no
//! randomness (ids are passed in), so every decision is unit-tested and replayable.

use std::collections::BTreeMap;

use kafka_protocol::error::ResponseError;
use uuid::Uuid;

use crate::metadata::image::{MetadataImage, PartitionRegistration, TopicImage};
use crate::metadata::records::{AlterOp, ConfigResource, MetadataCommand, MetadataRecord, NewTopic};
use crate::topic_config;

/// A refused request: the Kafka error for the client and a sentence for a human.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub error: ResponseError,
    pub message: String,
}

impl ApiError {
    pub fn new(error: ResponseError, message: impl Into<String>) -> Self {
        ApiError {
            error,
            message: message.into(),
        }
    }

    pub fn code(&self) -> i16 {
        self.error.code()
    }
}

/// Longest legal topic name, as in Kafka.
pub const MAX_TOPIC_NAME_LEN: usize = 249;

/// Kafka's topic-name rule: 1..=249 chars of `[a-zA-Z0-9._-]`, and not `.` or `..`.
pub fn validate_topic_name(name: &str) -> Result<(), ApiError> {
    let invalid = |why: &str| {
        Err(ApiError::new(
            ResponseError::InvalidTopicException,
            format!("topic name {name:?} is invalid: {why}"),
        ))
    };
    if name.is_empty() {
        return invalid("it is empty");
    }
    if name == "." || name == ".." {
        return invalid("'.' and '..' are reserved");
    }
    if name.len() > MAX_TOPIC_NAME_LEN {
        return invalid("it is longer than 249 characters");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return invalid("only ASCII letters, digits, '.', '_' and '-' are allowed");
    }
    Ok(())
}

/// Upper bound on partitions per request, so one request cannot exhaust file handles.
pub const MAX_PARTITIONS_PER_TOPIC: i32 = 10_000;

/// The replication factor a topic is created with: its assignment's, or the requested one.
/// A factor left to the broker default is lowered to the number of live brokers (at least 1),
/// so a default of 3 still lets a one- or two-node cluster create topics; an explicit factor
/// above the live broker count is refused by the placement.
pub fn replication_factor(image: &MetadataImage, topic: &NewTopic) -> i16 {
    if let Some(replicas) = topic.assignments.as_ref().and_then(|a| a.first()) {
        return replicas.len() as i16;
    }
    if !topic.replication_factor_defaulted {
        return topic.replication_factor;
    }
    let live = image.live_brokers().count().min(i16::MAX as usize) as i16;
    topic.replication_factor.min(live).max(1)
}

/// Validates a topic creation and returns the records that perform it.
pub fn create_topic(image: &MetadataImage, topic: &NewTopic, topic_id: Uuid) -> Result<Vec<MetadataRecord>, ApiError> {
    validate_topic_name(&topic.name)?;
    if image.topic(&topic.name).is_some() {
        return Err(ApiError::new(
            ResponseError::TopicAlreadyExists,
            format!("topic {:?} already exists", topic.name),
        ));
    }
    for (name, value) in &topic.configs {
        topic_config::validate(name, value).map_err(|e| ApiError::new(ResponseError::InvalidConfig, e.to_string()))?;
    }
    let assignments = match &topic.assignments {
        Some(a) => validate_assignments(image, a, None)?,
        None => {
            check_partition_count(topic.num_partitions)?;
            place_replicas(image, 0, topic.num_partitions, replication_factor(image, topic))?
        }
    };
    let mut records = vec![MetadataRecord::Topic {
        name: topic.name.clone(),
        topic_id,
    }];
    records.extend(partition_records(topic_id, 0, assignments));
    records.extend(topic.configs.iter().map(|(name, value)| MetadataRecord::Config {
        resource: ConfigResource::Topic(topic.name.clone()),
        name: name.clone(),
        value: Some(value.clone()),
    }));
    Ok(records)
}

/// Grows a topic to `count` partitions.
pub fn create_partitions(
    image: &MetadataImage,
    name: &str,
    count: i32,
    assignments: Option<&[Vec<i32>]>,
) -> Result<Vec<MetadataRecord>, ApiError> {
    let topic = existing_topic(image, name)?;
    let current = topic.partitions.len() as i32;
    if count <= current {
        return Err(ApiError::new(
            ResponseError::InvalidPartitions,
            format!("topic {name:?} has {current} partitions; the new count must be larger, not {count}"),
        ));
    }
    check_partition_count(count)?;
    let new_assignments = match assignments {
        Some(a) => {
            if a.len() as i32 != count - current {
                return Err(ApiError::new(
                    ResponseError::InvalidReplicaAssignment,
                    format!("{} assignments given for {} new partitions", a.len(), count - current),
                ));
            }
            validate_assignments(image, a, Some(topic.partitions[0].replicas.len()))?
        }
        None => {
            let rf = topic.partitions.first().map_or(1, |p| p.replicas.len()) as i16;
            place_replicas(image, current, count - current, rf)?
        }
    };
    Ok(partition_records(topic.topic_id, current, new_assignments).collect())
}

pub fn delete_topic(topic: &TopicImage) -> Vec<MetadataRecord> {
    vec![MetadataRecord::RemoveTopic {
        topic_id: topic.topic_id,
    }]
}

/// Validates config changes to a topic and returns the records that apply them.
pub fn alter_topic_configs(
    image: &MetadataImage,
    name: &str,
    ops: &[(String, AlterOp, Option<String>)],
    list_bases: &BTreeMap<String, String>,
) -> Result<Vec<MetadataRecord>, ApiError> {
    let topic = existing_topic(image, name)?;
    let invalid = |msg: String| ApiError::new(ResponseError::InvalidConfig, msg);
    let mut records = Vec::with_capacity(ops.len());
    for (key, op, value) in ops {
        let def = topic_config::def(key).ok_or_else(|| invalid(format!("unknown topic config {key:?}")))?;
        let new_value = match op {
            AlterOp::Delete => None,
            AlterOp::Set => Some(
                value
                    .clone()
                    .ok_or_else(|| invalid(format!("SET of {key} needs a value")))?,
            ),
            AlterOp::Append | AlterOp::Subtract => {
                if def.ty != topic_config::ConfigType::List {
                    return Err(invalid(format!(
                        "{key} is not a list; APPEND and SUBTRACT apply only to lists"
                    )));
                }
                let current = topic
                    .configs
                    .get(key.as_str())
                    .or_else(|| list_bases.get(key.as_str()))
                    .cloned()
                    .unwrap_or_else(|| def.default.to_string());
                let mut items: Vec<String> = current
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect();
                let given: Vec<String> = value
                    .as_deref()
                    .unwrap_or("")
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect();
                if *op == AlterOp::Append {
                    for item in given {
                        if !items.contains(&item) {
                            items.push(item);
                        }
                    }
                } else {
                    items.retain(|i| !given.contains(i));
                }
                Some(items.join(","))
            }
        };
        if let Some(v) = &new_value {
            topic_config::validate(key, v).map_err(|e| invalid(e.to_string()))?;
        }
        records.push(MetadataRecord::Config {
            resource: ConfigResource::Topic(name.to_string()),
            name: key.clone(),
            value: new_value,
        });
    }
    Ok(records)
}

/// What a decided command reports back to the client that proposed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Done,
    /// A topic was deleted: its name and id (the request may have named only one).
    TopicDeleted {
        name: String,
        topic_id: Uuid,
    },
    /// Producer ids `first..first + size` now belong to the proposing broker.
    ProducerIdBlock {
        first: i64,
        size: i64,
    },
    /// An AlterPartition was accepted: the partition's registration as it now stands (what
    /// Kafka's AlterPartition response carries; the leader adopts the new partition epoch).
    PartitionChanged {
        leader_epoch: i32,
        partition_epoch: i32,
        isr: Vec<i32>,
    },
}

/// Producer ids handed to a broker at a time (Kafka's block size).
pub const PRODUCER_ID_BLOCK_SIZE: i64 = 1000;

/// Decides a proposed command against the image: the records that carry it out, or why not.
/// Runs when the command is applied, in log order, identically on every node.
pub fn decide(image: &MetadataImage, command: &MetadataCommand) -> Result<(Vec<MetadataRecord>, Outcome), ApiError> {
    let done = |records| Ok((records, Outcome::Done));
    match command {
        MetadataCommand::RegisterBroker {
            broker_id,
            incarnation_id,
            endpoints,
            rack,
        } => {
            let mut records = vec![MetadataRecord::RegisterBroker {
                broker_id: *broker_id,
                incarnation_id: *incarnation_id,
                endpoints: endpoints.clone(),
                rack: rack.clone(),
            }];
            records.extend(elect_leaders_for_returning(image, *broker_id));
            done(records)
        }
        MetadataCommand::FenceBroker { broker_id } => done(fence_broker(image, *broker_id)),
        MetadataCommand::UnfenceBroker { broker_id } => {
            // A broker in controlled shutdown comes back only by registering again.
            if image
                .brokers
                .get(broker_id)
                .is_none_or(|b| !b.fenced || b.in_controlled_shutdown)
            {
                return done(Vec::new());
            }
            let mut records = vec![MetadataRecord::UnfenceBroker { broker_id: *broker_id }];
            records.extend(elect_leaders_for_returning(image, *broker_id));
            done(records)
        }
        MetadataCommand::CreateTopic { topic, topic_id } => done(create_topic(image, topic, *topic_id)?),
        MetadataCommand::AllocateProducerIds { broker_id } => {
            let first = image.next_producer_id;
            let record = MetadataRecord::ProducerIds {
                broker_id: *broker_id,
                next_block_start: first + PRODUCER_ID_BLOCK_SIZE,
            };
            Ok((
                vec![record],
                Outcome::ProducerIdBlock {
                    first,
                    size: PRODUCER_ID_BLOCK_SIZE,
                },
            ))
        }
        MetadataCommand::DeleteTopic { name, topic_id } => {
            let topic = match name {
                Some(n) => existing_topic(image, n)?,
                None => image.topic_by_id(topic_id).ok_or_else(|| {
                    ApiError::new(ResponseError::UnknownTopicId, format!("no topic has id {topic_id}"))
                })?,
            };
            let outcome = Outcome::TopicDeleted {
                name: topic.name.clone(),
                topic_id: topic.topic_id,
            };
            Ok((delete_topic(topic), outcome))
        }
        MetadataCommand::CreatePartitions {
            name,
            count,
            assignments,
        } => done(create_partitions(image, name, *count, assignments.as_deref())?),
        MetadataCommand::AlterTopicConfigs { name, ops, list_bases } => {
            done(alter_topic_configs(image, name, ops, list_bases)?)
        }
        MetadataCommand::ControlledShutdown {
            broker_id,
            incarnation_id,
        } => done(controlled_shutdown(image, *broker_id, *incarnation_id)),
        MetadataCommand::AlterPartition {
            topic_id,
            partition,
            leader_id,
            leader_epoch,
            partition_epoch,
            new_isr,
        } => alter_partition(
            image,
            *topic_id,
            *partition,
            *leader_id,
            *leader_epoch,
            *partition_epoch,
            new_isr,
        ),
        MetadataCommand::ElectPreferredLeaders => done(elect_preferred_leaders(image)),
    }
}

/// Kafka's AlterPartition (KIP-497): the partition leader `leader_id` replaces the ISR.
/// A compare-and-set on the leader and partition epochs: a deposed leader or one acting on a
/// stale registration is refused, as is an ISR without the leader or one that adds a replica
/// which cannot be in sync (KIP-841: fenced, shutting down or not registered). An unchanged
/// ISR writes nothing.
pub fn alter_partition(
    image: &MetadataImage,
    topic_id: Uuid,
    partition: i32,
    leader_id: i32,
    leader_epoch: i32,
    partition_epoch: i32,
    new_isr: &[i32],
) -> Result<(Vec<MetadataRecord>, Outcome), ApiError> {
    let topic = image
        .topic_by_id(&topic_id)
        .ok_or_else(|| ApiError::new(ResponseError::UnknownTopicId, format!("no topic has id {topic_id}")))?;
    let p = usize::try_from(partition)
        .ok()
        .and_then(|i| topic.partitions.get(i))
        .ok_or_else(|| {
            ApiError::new(
                ResponseError::UnknownTopicOrPartition,
                format!("{} has no partition {partition}", topic.name),
            )
        })?;
    let refuse = |error, why: String| {
        Err(ApiError::new(
            error,
            format!("AlterPartition of {}-{partition} refused: {why}", topic.name),
        ))
    };
    if leader_id != p.leader {
        let why = format!("broker {leader_id} is not the leader, {} is", p.leader);
        return refuse(ResponseError::NotLeaderOrFollower, why);
    }
    if leader_epoch != p.leader_epoch {
        let error = if leader_epoch < p.leader_epoch {
            ResponseError::FencedLeaderEpoch
        } else {
            ResponseError::UnknownLeaderEpoch
        };
        return refuse(
            error,
            format!("leader epoch {leader_epoch}, current {}", p.leader_epoch),
        );
    }
    if partition_epoch != p.partition_epoch {
        let why = format!("partition epoch {partition_epoch}, current {}", p.partition_epoch);
        return refuse(ResponseError::InvalidUpdateVersion, why);
    }
    let mut distinct = new_isr.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.len() != new_isr.len()
        || !new_isr.contains(&p.leader)
        || new_isr.iter().any(|id| !p.replicas.contains(id))
    {
        let why = format!(
            "ISR {new_isr:?} must be distinct replicas of {:?} including the leader {}",
            p.replicas, p.leader
        );
        return refuse(ResponseError::InvalidRequest, why);
    }
    if let Some(id) = new_isr.iter().find(|id| !p.isr.contains(id) && !image.is_live(**id)) {
        let why = format!("replica {id} is fenced, shutting down or not registered");
        return refuse(ResponseError::IneligibleReplica, why);
    }
    // In the replicas' order, so that the same set always makes the same record.
    let isr: Vec<i32> = p.replicas.iter().copied().filter(|id| new_isr.contains(id)).collect();
    let changed = isr != p.isr;
    let records = if changed {
        vec![partition_change(
            topic.topic_id,
            partition as usize,
            &p.replicas,
            isr.clone(),
            p.leader,
            p,
        )]
    } else {
        Vec::new()
    };
    let outcome = Outcome::PartitionChanged {
        leader_epoch: p.leader_epoch,
        partition_epoch: p.partition_epoch + i32::from(changed),
        isr,
    };
    Ok((records, outcome))
}

/// Fences a broker the controller stopped hearing from: it leaves every ISR it is in (unless it
/// is the last member) and the partitions it led get a new leader or go offline.
pub fn fence_broker(image: &MetadataImage, broker_id: i32) -> Vec<MetadataRecord> {
    if !image.is_live(broker_id) {
        return Vec::new();
    }
    let mut records = vec![MetadataRecord::FenceBroker { broker_id }];
    records.extend(take_out_of_service(image, broker_id));
    records
}

/// A broker's controlled shutdown: like fencing, but the broker stays fenced until it
/// registers again. Ignored for an unknown broker, a stale incarnation (a restarted broker
/// must not be shut down by its predecessor's request) or a shutdown already under way.
pub fn controlled_shutdown(image: &MetadataImage, broker_id: i32, incarnation_id: Uuid) -> Vec<MetadataRecord> {
    let Some(broker) = image.brokers.get(&broker_id) else {
        return Vec::new();
    };
    if broker.incarnation_id != incarnation_id || broker.in_controlled_shutdown {
        return Vec::new();
    }
    let mut records = vec![MetadataRecord::BrokerShutdown { broker_id }];
    records.extend(take_out_of_service(image, broker_id));
    records
}

/// The partition changes that follow a broker out of service: it leaves every ISR it is in
/// (unless it is the last member), and the partitions it led move to another live in-sync
/// replica. When none is left the partition goes offline (leader -1), or, if the topic allows
/// unclean leader election, any live replica leads with itself as the whole ISR. Each change
/// bumps the partition epoch, and the leader epoch when leadership moves. Partitions already
/// in that state (a fenced broker now shutting down) are left alone.
fn take_out_of_service(image: &MetadataImage, broker_id: i32) -> Vec<MetadataRecord> {
    let mut records = Vec::new();
    let eligible = |id: &i32| *id != broker_id && image.is_live(*id);
    for topic in image.topics.values() {
        let unclean = unclean_leader_election_enabled(topic);
        for (index, p) in topic.partitions.iter().enumerate() {
            if p.leader != broker_id && !p.isr.contains(&broker_id) {
                continue;
            }
            let remaining: Vec<i32> = p.isr.iter().copied().filter(|id| *id != broker_id).collect();
            let (leader, isr) = if p.leader != broker_id {
                (p.leader, remaining)
            } else if let Some(leader) = p.isr.iter().copied().find(eligible) {
                (leader, remaining)
            } else if let Some(leader) = p.replicas.iter().copied().find(eligible).filter(|_| unclean) {
                (leader, vec![leader])
            } else {
                (-1, remaining)
            };
            // Kafka keeps the last in-sync replica in the ISR so it can lead again when it returns.
            let isr = if isr.is_empty() { p.isr.clone() } else { isr };
            if leader == p.leader && isr == p.isr {
                continue;
            }
            records.push(partition_change(topic.topic_id, index, &p.replicas, isr, leader, p));
        }
    }
    records
}

/// The topic's own `unclean.leader.election.enable`. Only the topic-level setting counts:
/// decisions run on every node, and broker-level settings may differ between nodes.
fn unclean_leader_election_enabled(topic: &TopicImage) -> bool {
    topic
        .configs
        .get("unclean.leader.election.enable")
        .is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

/// Moves leadership back to each partition's preferred replica (the first), wherever that
/// replica is live, in sync and not already leading (Kafka's preferred leader election).
pub fn elect_preferred_leaders(image: &MetadataImage) -> Vec<MetadataRecord> {
    let mut records = Vec::new();
    for topic in image.topics.values() {
        for (index, p) in topic.partitions.iter().enumerate() {
            if let Some(preferred) = preferred_leader_to_elect(image, p) {
                records.push(partition_change(
                    topic.topic_id,
                    index,
                    &p.replicas,
                    p.isr.clone(),
                    preferred,
                    p,
                ));
            }
        }
    }
    records
}

/// Whether [`elect_preferred_leaders`] would change anything: the controller checks this
/// before proposing, so a balanced cluster does not fill the metadata log with no-ops.
pub fn preferred_leader_imbalance(image: &MetadataImage) -> bool {
    image
        .topics
        .values()
        .flat_map(|t| &t.partitions)
        .any(|p| preferred_leader_to_elect(image, p).is_some())
}

fn preferred_leader_to_elect(image: &MetadataImage, p: &PartitionRegistration) -> Option<i32> {
    let preferred = *p.replicas.first()?;
    (preferred != p.leader && p.isr.contains(&preferred) && image.is_live(preferred)).then_some(preferred)
}

/// Fence/unfence decisions of the active controller. `contacts` holds, per quorum member, how
/// long ago the leader last heard from it (`None`: not yet known); `leading_for_ms` gives a new
/// leader a full session before it fences anyone it has not heard from.
pub fn liveness_changes(
    image: &MetadataImage,
    contacts: &[(i32, Option<u64>)],
    leading_for_ms: u64,
    session_timeout_ms: u64,
) -> Vec<MetadataCommand> {
    image
        .brokers
        .values()
        .filter_map(|b| {
            let contact = contacts
                .iter()
                .find(|(id, _)| *id == b.broker_id)
                .and_then(|(_, ms)| *ms);
            let alive = match contact {
                Some(ms) => ms < session_timeout_ms,
                None => leading_for_ms < session_timeout_ms,
            };
            match (b.fenced, alive) {
                (false, false) => Some(MetadataCommand::FenceBroker { broker_id: b.broker_id }),
                (true, true) if contact.is_some() && !b.in_controlled_shutdown => {
                    Some(MetadataCommand::UnfenceBroker { broker_id: b.broker_id })
                }
                _ => None,
            }
        })
        .collect()
}

/// Partitions left without a leader get one back when an in-sync replica returns, or, if the
/// topic allows unclean leader election, when any of their replicas returns (leading with
/// itself as the whole ISR).
fn elect_leaders_for_returning(image: &MetadataImage, broker_id: i32) -> Vec<MetadataRecord> {
    let mut records = Vec::new();
    for topic in image.topics.values() {
        let unclean = unclean_leader_election_enabled(topic);
        for (index, p) in topic.partitions.iter().enumerate() {
            if p.leader != -1 {
                continue;
            }
            let isr = if p.isr.contains(&broker_id) {
                p.isr.clone()
            } else if unclean && p.replicas.contains(&broker_id) {
                vec![broker_id]
            } else {
                continue;
            };
            records.push(partition_change(topic.topic_id, index, &p.replicas, isr, broker_id, p));
        }
    }
    records
}

fn partition_change(
    topic_id: Uuid,
    index: usize,
    replicas: &[i32],
    isr: Vec<i32>,
    leader: i32,
    previous: &PartitionRegistration,
) -> MetadataRecord {
    MetadataRecord::Partition {
        topic_id,
        partition: index as i32,
        replicas: replicas.to_vec(),
        isr,
        leader,
        // Kafka bumps the leader epoch only when leadership moves; every change bumps the
        // partition epoch (the compare-and-set version of the registration).
        leader_epoch: previous.leader_epoch + i32::from(leader != previous.leader),
        partition_epoch: previous.partition_epoch + 1,
    }
}

fn existing_topic<'a>(image: &'a MetadataImage, name: &str) -> Result<&'a TopicImage, ApiError> {
    image.topic(name).ok_or_else(|| {
        ApiError::new(
            ResponseError::UnknownTopicOrPartition,
            format!("topic {name:?} does not exist"),
        )
    })
}

fn check_partition_count(count: i32) -> Result<(), ApiError> {
    if count <= 0 || count > MAX_PARTITIONS_PER_TOPIC {
        return Err(ApiError::new(
            ResponseError::InvalidPartitions,
            format!("number of partitions must be between 1 and {MAX_PARTITIONS_PER_TOPIC}, got {count}"),
        ));
    }
    Ok(())
}

/// Spreads replicas round-robin over live brokers, starting each partition one broker
/// further on so that leaders (the first replica) are balanced too. With racks, brokers are
/// ordered alternating between racks, so consecutive replicas land on different racks.
fn place_replicas(image: &MetadataImage, first: i32, count: i32, rf: i16) -> Result<Vec<Vec<i32>>, ApiError> {
    let brokers = rack_alternating_brokers(image);
    if rf <= 0 || rf as usize > brokers.len() {
        return Err(ApiError::new(
            ResponseError::InvalidReplicationFactor,
            format!(
                "replication factor {rf} is invalid with {} available broker(s)",
                brokers.len()
            ),
        ));
    }
    Ok((first..first + count)
        .map(|p| {
            (0..rf as usize)
                .map(|r| brokers[(p as usize + r) % brokers.len()])
                .collect()
        })
        .collect())
}

/// Live broker ids, interleaved across racks (rack a's first, rack b's first, ..., rack a's
/// second, ...). Without racks this is simply ascending id order.
fn rack_alternating_brokers(image: &MetadataImage) -> Vec<i32> {
    let mut by_rack: BTreeMap<Option<&str>, Vec<i32>> = BTreeMap::new();
    for broker in image.live_brokers() {
        by_rack
            .entry(broker.rack.as_deref())
            .or_default()
            .push(broker.broker_id);
    }
    let longest = by_rack.values().map(Vec::len).max().unwrap_or(0);
    (0..longest)
        .flat_map(|i| by_rack.values().filter_map(move |ids| ids.get(i).copied()))
        .collect()
}

fn validate_assignments(
    image: &MetadataImage,
    assignments: &[Vec<i32>],
    expected_rf: Option<usize>,
) -> Result<Vec<Vec<i32>>, ApiError> {
    let bad = |msg: String| ApiError::new(ResponseError::InvalidReplicaAssignment, msg);
    check_partition_count(assignments.len() as i32)?;
    for replicas in assignments {
        if replicas.is_empty() {
            return Err(bad("a partition's replica list is empty".to_string()));
        }
        if expected_rf.is_some_and(|rf| rf != replicas.len()) {
            return Err(bad(format!(
                "replica list {replicas:?} does not match the topic's replication factor"
            )));
        }
        let mut seen = replicas.clone();
        seen.sort_unstable();
        seen.dedup();
        if seen.len() != replicas.len() {
            return Err(bad(format!("replica list {replicas:?} names a broker twice")));
        }
        if let Some(unknown) = replicas.iter().find(|id| !image.brokers.contains_key(id)) {
            return Err(bad(format!(
                "broker {unknown} in replica list {replicas:?} is not registered"
            )));
        }
    }
    Ok(assignments.to_vec())
}

fn partition_records(topic_id: Uuid, first: i32, assignments: Vec<Vec<i32>>) -> impl Iterator<Item = MetadataRecord> {
    assignments
        .into_iter()
        .enumerate()
        .map(move |(i, replicas)| MetadataRecord::Partition {
            topic_id,
            partition: first + i as i32,
            leader: replicas[0],
            isr: replicas.clone(),
            replicas,
            leader_epoch: 0,
            partition_epoch: 0,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::records::Endpoint;

    fn image_with_brokers(ids: &[i32]) -> MetadataImage {
        let mut image = MetadataImage::new("test".into());
        for id in ids {
            image.apply(&MetadataRecord::RegisterBroker {
                broker_id: *id,
                incarnation_id: Uuid::nil(),
                endpoints: vec![Endpoint {
                    host: "127.0.0.1".into(),
                    port: 9092 + id,
                }],
                rack: None,
            });
        }
        image
    }

    fn new_topic(name: &str, partitions: i32, rf: i16) -> NewTopic {
        NewTopic {
            name: name.into(),
            num_partitions: partitions,
            replication_factor: rf,
            replication_factor_defaulted: false,
            assignments: None,
            configs: BTreeMap::new(),
        }
    }

    fn apply_all(image: &mut MetadataImage, records: &[MetadataRecord]) {
        records.iter().for_each(|r| image.apply(r));
    }

    #[test]
    fn topic_names_follow_kafka_rules() {
        assert!(validate_topic_name("orders.v1_2-x").is_ok());
        for bad in ["", ".", "..", "bad topic", "ümlaut", &"x".repeat(250)] {
            assert_eq!(
                validate_topic_name(bad).unwrap_err().error,
                ResponseError::InvalidTopicException
            );
        }
    }

    #[test]
    fn leaders_are_spread_over_brokers() {
        let mut image = image_with_brokers(&[1, 2, 3]);
        let records = create_topic(&image, &new_topic("t", 6, 3), Uuid::from_u128(7)).unwrap();
        apply_all(&mut image, &records);
        let topic = image.topic("t").unwrap();
        let mut leaders: Vec<i32> = topic.partitions.iter().map(|p| p.leader).collect();
        leaders.sort();
        assert_eq!(leaders, vec![1, 1, 2, 2, 3, 3]);
        assert!(topic
            .partitions
            .iter()
            .all(|p| p.replicas.len() == 3 && p.isr == p.replicas));
    }

    #[test]
    fn replicas_of_a_partition_land_on_different_racks() {
        let mut image = MetadataImage::new("test".into());
        for (id, rack) in [(1, "a"), (2, "a"), (3, "b"), (4, "b"), (5, "c"), (6, "c")] {
            image.apply(&MetadataRecord::RegisterBroker {
                broker_id: id,
                incarnation_id: Uuid::nil(),
                endpoints: vec![],
                rack: Some(rack.to_string()),
            });
        }
        let rack = |id: i32| image.brokers[&id].rack.clone();
        let records = create_topic(&image, &new_topic("t", 12, 3), Uuid::from_u128(1)).unwrap();
        let mut leaders = std::collections::BTreeMap::new();
        for record in &records {
            if let MetadataRecord::Partition { replicas, leader, .. } = record {
                let mut racks: Vec<_> = replicas.iter().map(|id| rack(*id)).collect();
                racks.sort();
                racks.dedup();
                assert_eq!(racks.len(), 3, "replicas {replicas:?} share a rack");
                *leaders.entry(*leader).or_insert(0) += 1;
            }
        }
        assert!(leaders.values().all(|n| *n == 2), "leaders per broker: {leaders:?}");
    }

    #[test]
    fn too_high_replication_factor_and_duplicates_are_refused() {
        let mut image = image_with_brokers(&[1]);
        let err = create_topic(&image, &new_topic("t", 1, 3), Uuid::from_u128(1)).unwrap_err();
        assert_eq!(err.error, ResponseError::InvalidReplicationFactor);
        let records = create_topic(&image, &new_topic("t", 1, 1), Uuid::from_u128(1)).unwrap();
        apply_all(&mut image, &records);
        let err = create_topic(&image, &new_topic("t", 1, 1), Uuid::from_u128(2)).unwrap_err();
        assert_eq!(err.error, ResponseError::TopicAlreadyExists);
        let err = create_topic(&image, &new_topic("u", 0, 1), Uuid::from_u128(3)).unwrap_err();
        assert_eq!(err.error, ResponseError::InvalidPartitions);
    }

    #[test]
    fn invalid_configs_are_refused_at_creation() {
        let image = image_with_brokers(&[1]);
        let mut topic = new_topic("t", 1, 1);
        topic.configs.insert("retention.ms".into(), "forever".into());
        assert_eq!(
            create_topic(&image, &topic, Uuid::from_u128(1)).unwrap_err().error,
            ResponseError::InvalidConfig
        );
    }

    #[test]
    fn partitions_only_grow() {
        let mut image = image_with_brokers(&[1]);
        let records = create_topic(&image, &new_topic("t", 3, 1), Uuid::from_u128(1)).unwrap();
        apply_all(&mut image, &records);
        assert_eq!(
            create_partitions(&image, "t", 3, None).unwrap_err().error,
            ResponseError::InvalidPartitions
        );
        let records = create_partitions(&image, "t", 6, None).unwrap();
        apply_all(&mut image, &records);
        assert_eq!(image.topic("t").unwrap().partitions.len(), 6);
        assert_eq!(
            create_partitions(&image, "nope", 6, None).unwrap_err().error,
            ResponseError::UnknownTopicOrPartition
        );
    }

    #[test]
    fn fencing_moves_leadership_to_a_live_isr_member_or_takes_the_partition_offline() {
        let mut image = image_with_brokers(&[1, 2, 3]);
        let records = create_topic(&image, &new_topic("rf3", 3, 3), Uuid::from_u128(1)).unwrap();
        apply_all(&mut image, &records);
        let records = create_topic(&image, &new_topic("rf1", 3, 1), Uuid::from_u128(2)).unwrap();
        apply_all(&mut image, &records);
        let led_by_1: Vec<usize> = image
            .topic("rf1")
            .unwrap()
            .partitions
            .iter()
            .enumerate()
            .filter(|(_, p)| p.leader == 1)
            .map(|(i, _)| i)
            .collect();
        let records = fence_broker(&image, 1);
        apply_all(&mut image, &records);
        assert!(!image.is_live(1));
        for p in &image.topic("rf3").unwrap().partitions {
            assert_ne!(p.leader, 1);
            assert!(!p.isr.contains(&1));
        }
        for i in &led_by_1 {
            let p = &image.topic("rf1").unwrap().partitions[*i];
            assert_eq!((p.leader, p.leader_epoch), (-1, 1));
        }
        // Fencing twice changes nothing; unfencing brings the offline partitions back.
        assert!(fence_broker(&image, 1).is_empty());
        let (records, _) = decide(&image, &MetadataCommand::UnfenceBroker { broker_id: 1 }).unwrap();
        apply_all(&mut image, &records);
        for i in &led_by_1 {
            let p = &image.topic("rf1").unwrap().partitions[*i];
            assert_eq!((p.leader, p.leader_epoch), (1, 2));
        }
    }

    /// A controlled shutdown of a broker registered with the nil incarnation.
    fn shutdown_of(broker_id: i32) -> MetadataCommand {
        MetadataCommand::ControlledShutdown {
            broker_id,
            incarnation_id: Uuid::nil(),
        }
    }

    fn decide_and_apply(image: &mut MetadataImage, command: MetadataCommand) -> Outcome {
        let (records, outcome) = decide(image, &command).unwrap();
        apply_all(image, &records);
        outcome
    }

    fn register(image: &mut MetadataImage, broker_id: i32, incarnation: u128) {
        let command = MetadataCommand::RegisterBroker {
            broker_id,
            incarnation_id: Uuid::from_u128(incarnation),
            endpoints: vec![],
            rack: None,
        };
        decide_and_apply(image, command);
    }

    #[test]
    fn controlled_shutdown_moves_leadership_away_and_keeps_the_broker_fenced_until_it_registers_again() {
        let mut image = image_with_brokers(&[1, 2, 3]);
        let records = create_topic(&image, &new_topic("t", 3, 3), Uuid::from_u128(1)).unwrap();
        apply_all(&mut image, &records);
        let shutdown = shutdown_of(1);
        decide_and_apply(&mut image, shutdown.clone());
        let broker = &image.brokers[&1];
        assert!(broker.fenced && broker.in_controlled_shutdown);
        for p in &image.topic("t").unwrap().partitions {
            assert_ne!(p.leader, 1);
            assert_eq!(p.isr.len(), 2);
            assert!(!p.isr.contains(&1));
        }
        // Repeating the request, hearing from the broker, or an UnfenceBroker change nothing.
        assert!(decide(&image, &shutdown).unwrap().0.is_empty());
        let contacts = [(1, Some(0)), (2, Some(0)), (3, Some(0))];
        assert!(liveness_changes(&image, &contacts, 60_000, 9_000).is_empty());
        let unfence = MetadataCommand::UnfenceBroker { broker_id: 1 };
        assert!(decide(&image, &unfence).unwrap().0.is_empty());
        // A new incarnation registers and is live again.
        register(&mut image, 1, 2);
        assert!(image.is_live(1) && !image.brokers[&1].in_controlled_shutdown);
    }

    #[test]
    fn controlled_shutdown_of_a_stale_incarnation_or_unknown_broker_is_ignored() {
        let mut image = image_with_brokers(&[1, 2]);
        register(&mut image, 1, 5);
        for (broker_id, incarnation) in [(1, 4), (7, 5)] {
            let command = MetadataCommand::ControlledShutdown {
                broker_id,
                incarnation_id: Uuid::from_u128(incarnation),
            };
            assert_eq!(decide(&image, &command).unwrap(), (vec![], Outcome::Done));
        }
        assert!(image.is_live(1));
    }

    #[test]
    fn controlled_shutdown_of_a_fenced_broker_only_marks_it() {
        let mut image = image_with_brokers(&[1, 2]);
        let records = create_topic(&image, &new_topic("t", 2, 2), Uuid::from_u128(1)).unwrap();
        apply_all(&mut image, &records);
        let records = fence_broker(&image, 1);
        apply_all(&mut image, &records);
        let command = shutdown_of(1);
        let (records, _) = decide(&image, &command).unwrap();
        assert_eq!(records, vec![MetadataRecord::BrokerShutdown { broker_id: 1 }]);
    }

    #[test]
    fn new_partitions_are_not_placed_on_fenced_or_shutting_down_brokers() {
        let mut image = image_with_brokers(&[1, 2, 3, 4]);
        let records = fence_broker(&image, 2);
        apply_all(&mut image, &records);
        let shutdown = shutdown_of(3);
        decide_and_apply(&mut image, shutdown);
        let err = create_topic(&image, &new_topic("t", 1, 3), Uuid::from_u128(1)).unwrap_err();
        assert_eq!(err.error, ResponseError::InvalidReplicationFactor);
        let records = create_topic(&image, &new_topic("t", 4, 2), Uuid::from_u128(1)).unwrap();
        apply_all(&mut image, &records);
        for p in &image.topic("t").unwrap().partitions {
            let mut replicas = p.replicas.clone();
            replicas.sort();
            assert_eq!(replicas, vec![1, 4]);
        }
    }

    fn alter_isr(leader_id: i32, leader_epoch: i32, partition_epoch: i32, new_isr: &[i32]) -> MetadataCommand {
        MetadataCommand::AlterPartition {
            topic_id: Uuid::from_u128(1),
            partition: 0,
            leader_id,
            leader_epoch,
            partition_epoch,
            new_isr: new_isr.to_vec(),
        }
    }

    /// Brokers 1..=n and topic "t" (id 1) with one partition on all of them, led by 1.
    fn one_partition_on(n: i32) -> MetadataImage {
        let brokers: Vec<i32> = (1..=n).collect();
        let mut image = image_with_brokers(&brokers);
        let mut topic = new_topic("t", 1, n as i16);
        topic.assignments = Some(vec![brokers]);
        let records = create_topic(&image, &topic, Uuid::from_u128(1)).unwrap();
        apply_all(&mut image, &records);
        image
    }

    #[test]
    fn alter_partition_shrinks_and_expands_the_isr_as_a_compare_and_set() {
        let mut image = one_partition_on(3);
        let outcome = decide_and_apply(&mut image, alter_isr(1, 0, 0, &[3, 1]));
        let expected = Outcome::PartitionChanged {
            leader_epoch: 0,
            partition_epoch: 1,
            isr: vec![1, 3],
        };
        assert_eq!(outcome, expected);
        let p = &image.topic("t").unwrap().partitions[0];
        assert_eq!(
            (p.leader, p.leader_epoch, p.partition_epoch, &p.isr),
            (1, 0, 1, &vec![1, 3])
        );
        // A request built on the old registration loses the race.
        let err = decide(&image, &alter_isr(1, 0, 0, &[1, 2, 3])).unwrap_err();
        assert_eq!(err.error, ResponseError::InvalidUpdateVersion);
        decide_and_apply(&mut image, alter_isr(1, 0, 1, &[2, 1, 3]));
        let p = &image.topic("t").unwrap().partitions[0];
        assert_eq!((p.partition_epoch, &p.isr), (2, &p.replicas));
        // The same ISR again writes nothing and reports the registration as it is.
        let (records, outcome) = decide(&image, &alter_isr(1, 0, 2, &[1, 2, 3])).unwrap();
        assert!(records.is_empty());
        assert!(matches!(outcome, Outcome::PartitionChanged { partition_epoch: 2, .. }));
    }

    #[test]
    fn alter_partition_refuses_unknown_partitions_deposed_leaders_and_stale_epochs() {
        let mut image = one_partition_on(3);
        let mut unknown_topic = alter_isr(1, 0, 0, &[1]);
        if let MetadataCommand::AlterPartition { topic_id, .. } = &mut unknown_topic {
            *topic_id = Uuid::from_u128(99);
        }
        let mut unknown_partition = alter_isr(1, 0, 0, &[1]);
        if let MetadataCommand::AlterPartition { partition, .. } = &mut unknown_partition {
            *partition = 1;
        }
        let cases = [
            (unknown_topic, ResponseError::UnknownTopicId),
            (unknown_partition, ResponseError::UnknownTopicOrPartition),
            (alter_isr(2, 0, 0, &[2]), ResponseError::NotLeaderOrFollower),
            (alter_isr(1, 1, 0, &[1]), ResponseError::UnknownLeaderEpoch),
            (alter_isr(1, 0, 1, &[1]), ResponseError::InvalidUpdateVersion),
        ];
        for (command, error) in cases {
            assert_eq!(decide(&image, &command).unwrap_err().error, error, "{command:?}");
        }
        // Broker 1 is fenced: broker 2 leads at epoch 1 and 1's last request is refused.
        let records = fence_broker(&image, 1);
        apply_all(&mut image, &records);
        let err = decide(&image, &alter_isr(1, 0, 0, &[1, 2])).unwrap_err();
        assert_eq!(err.error, ResponseError::NotLeaderOrFollower);
        let err = decide(&image, &alter_isr(2, 0, 1, &[2, 3])).unwrap_err();
        assert_eq!(err.error, ResponseError::FencedLeaderEpoch);
        assert!(decide(&image, &alter_isr(2, 1, 1, &[2])).is_ok());
    }

    #[test]
    fn alter_partition_refuses_malformed_isrs_and_ineligible_replicas() {
        let mut image = one_partition_on(4);
        decide_and_apply(&mut image, alter_isr(1, 0, 0, &[1]));
        for isr in [&[][..], &[2, 3], &[1, 1], &[1, 9]] {
            let err = decide(&image, &alter_isr(1, 0, 1, isr)).unwrap_err();
            assert_eq!(err.error, ResponseError::InvalidRequest, "ISR {isr:?}");
        }
        let records = fence_broker(&image, 2);
        apply_all(&mut image, &records);
        let shutdown = shutdown_of(3);
        decide_and_apply(&mut image, shutdown);
        for isr in [[1, 2], [1, 3]] {
            let err = decide(&image, &alter_isr(1, 0, 1, &isr)).unwrap_err();
            assert_eq!(err.error, ResponseError::IneligibleReplica, "ISR {isr:?}");
        }
        decide_and_apply(&mut image, alter_isr(1, 0, 1, &[1, 4]));
        assert_eq!(image.topic("t").unwrap().partitions[0].isr, vec![1, 4]);
    }

    #[test]
    fn preferred_leaders_lead_again_once_live_and_in_sync() {
        let mut image = one_partition_on(3);
        assert!(!preferred_leader_imbalance(&image));
        assert!(elect_preferred_leaders(&image).is_empty());
        let records = fence_broker(&image, 1);
        apply_all(&mut image, &records);
        // Fenced and then back, but out of the ISR: not yet.
        decide_and_apply(&mut image, MetadataCommand::UnfenceBroker { broker_id: 1 });
        assert_eq!(image.topic("t").unwrap().partitions[0].leader, 2);
        assert!(!preferred_leader_imbalance(&image));
        decide_and_apply(&mut image, alter_isr(2, 1, 1, &[1, 2, 3]));
        assert!(preferred_leader_imbalance(&image));
        decide_and_apply(&mut image, MetadataCommand::ElectPreferredLeaders);
        let p = &image.topic("t").unwrap().partitions[0];
        assert_eq!((p.leader, p.leader_epoch, p.partition_epoch), (1, 2, 3));
        assert!(!preferred_leader_imbalance(&image));
    }

    #[test]
    fn a_shutting_down_preferred_replica_is_not_elected() {
        let mut image = one_partition_on(2);
        let records = fence_broker(&image, 1);
        apply_all(&mut image, &records);
        // Still in the ISR (re-added while it was briefly back), but shutting down.
        decide_and_apply(&mut image, MetadataCommand::UnfenceBroker { broker_id: 1 });
        decide_and_apply(&mut image, alter_isr(2, 1, 1, &[1, 2]));
        let shutdown = shutdown_of(1);
        let (records, _) = decide(&image, &shutdown).unwrap();
        let mut after = image.clone();
        apply_all(&mut after, &records[..1]);
        assert!(!preferred_leader_imbalance(&after));
        assert!(elect_preferred_leaders(&after).is_empty());
    }

    fn set_topic_config(image: &mut MetadataImage, name: &str, value: &str) {
        image.apply(&MetadataRecord::Config {
            resource: ConfigResource::Topic("t".into()),
            name: name.into(),
            value: Some(value.into()),
        });
    }

    #[test]
    fn unclean_election_lets_a_live_out_of_sync_replica_lead_when_the_topic_allows_it() {
        for unclean in [false, true] {
            let mut image = one_partition_on(3);
            set_topic_config(&mut image, "unclean.leader.election.enable", &unclean.to_string());
            decide_and_apply(&mut image, alter_isr(1, 0, 0, &[1]));
            let records = fence_broker(&image, 1);
            apply_all(&mut image, &records);
            let p = &image.topic("t").unwrap().partitions[0];
            if unclean {
                assert_eq!((p.leader, p.leader_epoch, &p.isr), (2, 1, &vec![2]));
            } else {
                assert_eq!((p.leader, p.leader_epoch, &p.isr), (-1, 1, &vec![1]));
            }
        }
    }

    #[test]
    fn an_offline_partition_waits_for_its_last_in_sync_replica_unless_unclean_election_is_enabled() {
        for unclean in [false, true] {
            let mut image = one_partition_on(2);
            set_topic_config(&mut image, "unclean.leader.election.enable", &unclean.to_string());
            decide_and_apply(&mut image, alter_isr(1, 0, 0, &[1]));
            for broker_id in [2, 1] {
                let records = fence_broker(&image, broker_id);
                apply_all(&mut image, &records);
            }
            assert_eq!(image.topic("t").unwrap().partitions[0].leader, -1);
            decide_and_apply(&mut image, MetadataCommand::UnfenceBroker { broker_id: 2 });
            let p = &image.topic("t").unwrap().partitions[0];
            if unclean {
                assert_eq!((p.leader, &p.isr), (2, &vec![2]));
            } else {
                assert_eq!((p.leader, &p.isr), (-1, &vec![1]));
                register(&mut image, 1, 2);
                let p = &image.topic("t").unwrap().partitions[0];
                assert_eq!((p.leader, &p.isr), (1, &vec![1]));
            }
        }
    }

    #[test]
    fn unclean_election_never_picks_a_shutting_down_replica() {
        let mut image = one_partition_on(3);
        set_topic_config(&mut image, "unclean.leader.election.enable", "true");
        decide_and_apply(&mut image, alter_isr(1, 0, 0, &[1]));
        let shutdown = shutdown_of(2);
        decide_and_apply(&mut image, shutdown);
        let records = fence_broker(&image, 1);
        apply_all(&mut image, &records);
        let p = &image.topic("t").unwrap().partitions[0];
        assert_eq!((p.leader, &p.isr), (3, &vec![3]));
    }

    #[test]
    fn silent_brokers_are_fenced_after_the_session_timeout_and_unfenced_when_heard_again() {
        let mut image = image_with_brokers(&[1, 2, 3]);
        let contacts = [(1, Some(0)), (2, Some(200)), (3, Some(9_500))];
        assert_eq!(
            liveness_changes(&image, &contacts, 60_000, 9_000),
            vec![MetadataCommand::FenceBroker { broker_id: 3 }]
        );
        // A new leader that has heard nothing yet waits a full session before fencing.
        let unknown = [(1, Some(0)), (2, None), (3, None)];
        assert!(liveness_changes(&image, &unknown, 1_000, 9_000).is_empty());
        assert_eq!(liveness_changes(&image, &unknown, 9_000, 9_000).len(), 2);
        let records = fence_broker(&image, 3);
        apply_all(&mut image, &records);
        let back = [(1, Some(0)), (2, Some(0)), (3, Some(100))];
        assert_eq!(
            liveness_changes(&image, &back, 60_000, 9_000),
            vec![MetadataCommand::UnfenceBroker { broker_id: 3 }]
        );
    }

    #[test]
    fn producer_id_blocks_never_overlap() {
        let mut image = image_with_brokers(&[1, 2]);
        let mut blocks = Vec::new();
        for broker_id in [1, 2, 1] {
            let (records, outcome) = decide(&image, &MetadataCommand::AllocateProducerIds { broker_id }).unwrap();
            apply_all(&mut image, &records);
            blocks.push(outcome);
        }
        assert_eq!(
            blocks,
            vec![
                Outcome::ProducerIdBlock { first: 0, size: 1000 },
                Outcome::ProducerIdBlock {
                    first: 1000,
                    size: 1000
                },
                Outcome::ProducerIdBlock {
                    first: 2000,
                    size: 1000
                },
            ]
        );
    }

    #[test]
    fn a_default_replication_factor_is_lowered_to_the_live_broker_count() {
        let mut image = image_with_brokers(&[1, 2]);
        let mut topic = new_topic("t", 2, 3);
        topic.replication_factor_defaulted = true;
        assert_eq!(replication_factor(&image, &topic), 2);
        let records = fence_broker(&image, 2);
        apply_all(&mut image, &records);
        assert_eq!(replication_factor(&image, &topic), 1);
        let command = MetadataCommand::CreateTopic {
            topic,
            topic_id: Uuid::from_u128(1),
        };
        decide_and_apply(&mut image, command);
        assert!(image.topic("t").unwrap().partitions.iter().all(|p| p.replicas == [1]));
        // An explicit factor is never lowered.
        let command = MetadataCommand::CreateTopic {
            topic: new_topic("u", 1, 2),
            topic_id: Uuid::from_u128(2),
        };
        assert_eq!(
            decide(&image, &command).unwrap_err().error,
            ResponseError::InvalidReplicationFactor
        );
    }

    #[test]
    fn topics_with_three_replicas_are_created_on_three_brokers() {
        let mut image = image_with_brokers(&[1, 2, 3]);
        let command = MetadataCommand::CreateTopic {
            topic: new_topic("t", 1, 3),
            topic_id: Uuid::from_u128(1),
        };
        decide_and_apply(&mut image, command);
        let p = &image.topic("t").unwrap().partitions[0];
        assert_eq!((p.replicas.len(), &p.isr), (3, &p.replicas));
    }

    #[test]
    fn racing_creations_of_one_topic_decide_in_log_order() {
        let mut image = image_with_brokers(&[1]);
        let first = MetadataCommand::CreateTopic {
            topic: new_topic("t", 1, 1),
            topic_id: Uuid::from_u128(1),
        };
        let second = MetadataCommand::CreateTopic {
            topic: new_topic("t", 2, 1),
            topic_id: Uuid::from_u128(2),
        };
        let (records, _) = decide(&image, &first).unwrap();
        apply_all(&mut image, &records);
        assert_eq!(
            decide(&image, &second).unwrap_err().error,
            ResponseError::TopicAlreadyExists
        );
        assert_eq!(image.topic("t").unwrap().topic_id, Uuid::from_u128(1));
    }

    #[test]
    fn incremental_alter_supports_set_delete_append_subtract() {
        let mut image = image_with_brokers(&[1]);
        let records = create_topic(&image, &new_topic("t", 1, 1), Uuid::from_u128(1)).unwrap();
        apply_all(&mut image, &records);
        let default = BTreeMap::from([("cleanup.policy".to_string(), "delete".to_string())]);
        let ops = vec![
            ("retention.ms".to_string(), AlterOp::Set, Some("1000".to_string())),
            (
                "cleanup.policy".to_string(),
                AlterOp::Append,
                Some("compact".to_string()),
            ),
        ];
        let records = alter_topic_configs(&image, "t", &ops, &default).unwrap();
        apply_all(&mut image, &records);
        assert_eq!(image.topic("t").unwrap().configs["cleanup.policy"], "delete,compact");
        let ops = vec![
            ("retention.ms".to_string(), AlterOp::Delete, None),
            (
                "cleanup.policy".to_string(),
                AlterOp::Subtract,
                Some("delete".to_string()),
            ),
        ];
        let records = alter_topic_configs(&image, "t", &ops, &default).unwrap();
        apply_all(&mut image, &records);
        let configs = &image.topic("t").unwrap().configs;
        assert!(!configs.contains_key("retention.ms"));
        assert_eq!(configs["cleanup.policy"], "compact");
        let ops = vec![("retention.ms".to_string(), AlterOp::Append, Some("1".to_string()))];
        assert_eq!(
            alter_topic_configs(&image, "t", &ops, &default).unwrap_err().error,
            ResponseError::InvalidConfig
        );
    }
}

//! The applied metadata: brokers, topics, partitions and configs as of the last record.
//! Brokers serve Metadata from it and react to its changes; it is rebuilt by replaying
//! the metadata log, so applying must be deterministic.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use smallvec::SmallVec;
use uuid::Uuid;

use super::acls::AclTable;
use super::records::{
    ConfigResource, ElectionReason, Endpoint, LeaderElection, MetadataRecord, QuotaEntity, QuotaValue, ScramCredential, ScramMechanism,
};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerRegistration {
    pub broker_id: i32,
    pub incarnation_id: Uuid,
    pub endpoints: Vec<Endpoint>,
    pub rack: Option<String>,
    pub fenced: bool,
    /// Set by a controlled shutdown: the broker is fenced and stays so until it registers again
    /// (the liveness check must not unfence a broker that is on its way out).
    pub in_controlled_shutdown: bool,
    /// Kafka's broker epoch: the metadata offset of this registration (`last_offset` once it was
    /// applied), so every node derives the same value and each start of a broker gets a larger
    /// one. A follower names it in its Fetch (`replica_state.replica_epoch`, KIP-903); a fetch
    /// naming any other epoch is not a follower's fetch.
    pub broker_epoch: i64,
    /// Partition replicas the broker can host within its open-files limit (`None`: unlimited,
    /// as in registrations written before brokers reported it). The controller refuses to
    /// place more on it.
    pub replica_capacity: Option<u32>,
    /// A newer incarnation of this broker that asked to register while this one was live. It
    /// is refused until this one is fenced, which the controller does once a session timeout
    /// has passed since (contact from the node is the newer process's now, so it no longer
    /// keeps this session alive); until then nothing unfences this registration.
    pub pending_incarnation: Option<Uuid>,
}

impl BrokerRegistration {
    pub fn is_live(&self) -> bool {
        !self.fenced && !self.in_controlled_shutdown
    }

    /// Where this broker's listener of that name is reached, if it has one.
    pub fn endpoint(&self, listener: &str) -> Option<&Endpoint> {
        self.endpoints.iter().find(|e| e.listener == listener)
    }
}

/// Broker ids: a replica set, an ISR, a reassignment's joining or leaving replicas. Every node
/// holds several per partition (its image's registration, and its own replicas' state), so up
/// to four are kept inline, without an allocation of their own.
pub type ReplicaIds = SmallVec<[i32; 4]>;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartitionRegistration {
    /// During a reassignment: the target replicas, then the ones being removed.
    pub replicas: ReplicaIds,
    pub isr: ReplicaIds,
    pub leader: i32,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    /// An ongoing reassignment (Kafka's KIP-455), `None` when there is none. Boxed: every node
    /// holds every partition's registration, and few are ever reassigned.
    pub reassignment: Option<Box<Reassignment>>,
    /// Why `leader` leads, as the last Partition record said (`None` before Sluice kept it).
    pub election: Option<LeaderElection>,
}

/// The replicas a reassignment adds and removes. The target is the partition's `replicas`
/// without `removing`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reassignment {
    pub adding: ReplicaIds,
    pub removing: ReplicaIds,
}

impl Reassignment {
    /// `None` when neither list names a replica: no reassignment is under way.
    pub fn of(adding: ReplicaIds, removing: ReplicaIds) -> Option<Box<Reassignment>> {
        (!adding.is_empty() || !removing.is_empty()).then(|| Box::new(Reassignment { adding, removing }))
    }
}

/// No partition has a leader (`-1`), as Kafka writes it.
pub const NO_LEADER: i32 = -1;

impl PartitionRegistration {
    pub fn is_reassigning(&self) -> bool {
        self.reassignment.is_some()
    }

    /// The replicas an ongoing reassignment adds (none when there is none).
    pub fn adding_replicas(&self) -> &[i32] {
        self.reassignment.as_ref().map_or(&[], |r| &r.adding)
    }

    /// The replicas an ongoing reassignment removes (none when there is none).
    pub fn removing_replicas(&self) -> &[i32] {
        self.reassignment.as_ref().map_or(&[], |r| &r.removing)
    }

    /// The replicas a reassignment moves to (all replicas when none is under way).
    pub fn target_replicas(&self) -> Vec<i32> {
        self.replicas
            .iter()
            .copied()
            .filter(|id| !self.removing_replicas().contains(id))
            .collect()
    }

    /// The replicas before the reassignment began (all replicas when none is under way).
    pub fn original_replicas(&self) -> Vec<i32> {
        self.replicas
            .iter()
            .copied()
            .filter(|id| !self.adding_replicas().contains(id))
            .collect()
    }

    /// Which of the invariants the design relies on `self` would break as the successor of
    /// `previous`, if any: the leader is in the ISR (or there is none), the ISR is a subset of
    /// the replicas, replicas are distinct, the partition epoch goes forward, the leader
    /// epoch never goes back and goes forward whenever the leader changes, and the recorded
    /// election matches the leader (none exactly when offline, alone in the ISR when unclean,
    /// the same leader when unchanged).
    pub fn invariant_violation(&self, previous: Option<&PartitionRegistration>) -> Option<String> {
        if self.leader != NO_LEADER && !self.isr.contains(&self.leader) {
            return Some(format!("leader {} is not in the ISR {:?}", self.leader, self.isr));
        }
        if let Some(outsider) = self.isr.iter().find(|id| !self.replicas.contains(id)) {
            return Some(format!("ISR member {outsider} is not a replica of {:?}", self.replicas));
        }
        let mut distinct = self.replicas.clone();
        distinct.sort_unstable();
        distinct.dedup();
        if distinct.len() != self.replicas.len() {
            return Some(format!("replicas {:?} repeat a broker", self.replicas));
        }
        if let Some(election) = self.election {
            let offline = election.reason == ElectionReason::Offline;
            if offline != (self.leader == NO_LEADER) {
                return Some(format!("leader {} does not match the election's outcome: {election}", self.leader));
            }
            if election.reason == ElectionReason::Unclean && self.isr[..] != [self.leader] {
                return Some(format!(
                    "an unclean election leaves the leader {} alone in the ISR, not {:?}",
                    self.leader, self.isr
                ));
            }
            if election.reason == ElectionReason::Unchanged && previous.is_some_and(|p| p.leader != self.leader) {
                return Some(format!("the leader moves to {} but the record says {election}", self.leader));
            }
        }
        let previous = previous?;
        if self.leader_epoch < previous.leader_epoch || self.partition_epoch <= previous.partition_epoch {
            return Some(format!(
                "epochs do not go forward: leader epoch {} / partition epoch {} after {} / {}",
                self.leader_epoch, self.partition_epoch, previous.leader_epoch, previous.partition_epoch
            ));
        }
        if self.leader != previous.leader && self.leader_epoch == previous.leader_epoch {
            return Some(format!(
                "leadership moves from {} to {} without a new leader epoch (still {})",
                previous.leader, self.leader, self.leader_epoch
            ));
        }
        None
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicImage {
    pub name: String,
    pub topic_id: Uuid,
    /// Indexed by partition id; partitions are always 0..n without gaps.
    pub partitions: Vec<PartitionRegistration>,
    pub configs: BTreeMap<String, String>,
}

/// Cluster metadata as of `last_offset`, the number of records applied. It is also the
/// quorum's snapshot: encoded whole (`codec.rs`), restored whole.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetadataImage {
    pub cluster_id: String,
    pub last_offset: u64,
    pub brokers: BTreeMap<i32, BrokerRegistration>,
    /// Each topic behind its own `Arc`: publishing an image after a change copies the map's
    /// pointers and the changed topic only, not every partition of every topic.
    pub topics: BTreeMap<String, Arc<TopicImage>>,
    pub topic_names: HashMap<Uuid, String>,
    pub broker_configs: BTreeMap<i32, BTreeMap<String, String>>,
    /// First producer id of the next block to hand out (ids are never reused).
    pub next_producer_id: i64,
    /// Client quotas by entity (Kafka's `ClientQuotasImage`); an entity with no keys left is
    /// removed, so every entry holds at least one value.
    pub client_quotas: BTreeMap<QuotaEntity, BTreeMap<String, QuotaValue>>,
    /// SCRAM credentials by user and mechanism (Kafka's `ScramImage`): what SASL/SCRAM and
    /// SASL/PLAIN check passwords against.
    pub scram_credentials: BTreeMap<(String, ScramMechanism), ScramCredential>,
    /// The ACLs (Kafka's `AclsImage`), shared between images so that publishing a new image
    /// does not copy them.
    pub acls: Arc<AclTable>,
    /// Finalized feature levels (Kafka's `FeaturesImage`), set by UpdateFeatures, 0 included.
    /// A feature absent here is at the level the node's settings give (`transaction.version`).
    pub features: BTreeMap<String, i16>,
    /// The offset of the record that last changed `features`: ApiVersions' finalized features
    /// epoch, by which clients tell a newer answer from an older one.
    pub features_epoch: i64,
    /// Group configs by group id (KIP-848/KIP-932, `config::group_configs`). Keyed by id, not
    /// by group: Kafka lets a group id have configs before its group exists. A group id with
    /// no config left is removed, so every entry holds at least one.
    pub group_configs: BTreeMap<String, BTreeMap<String, String>>,
}

impl MetadataImage {
    pub fn new(cluster_id: String) -> Self {
        MetadataImage {
            cluster_id,
            ..Default::default()
        }
    }

    pub fn topic(&self, name: &str) -> Option<&TopicImage> {
        self.topics.get(name).map(Arc::as_ref)
    }

    /// A group config set or removed. The group id's entry goes with its last config, so the
    /// image keeps nothing for group ids that have none.
    fn apply_group_config(&mut self, group_id: &str, name: &str, value: Option<&str>) {
        match value {
            Some(v) => {
                let configs = self.group_configs.entry(group_id.to_string()).or_default();
                configs.insert(name.to_string(), v.to_string());
            }
            None => {
                if let Some(configs) = self.group_configs.get_mut(group_id) {
                    configs.remove(name);
                    if configs.is_empty() {
                        self.group_configs.remove(group_id);
                    }
                }
            }
        }
    }

    /// The configs set for a group id, if any (`None` when it has none: every config is at
    /// the broker's value). Read with `config::group_configs`' accessors.
    pub fn group_configs(&self, group_id: &str) -> Option<&BTreeMap<String, String>> {
        self.group_configs.get(group_id)
    }

    pub fn topic_by_id(&self, id: &Uuid) -> Option<&TopicImage> {
        self.topic_names.get(id).and_then(|name| self.topics.get(name)).map(Arc::as_ref)
    }

    /// Brokers clients can be sent to, and the only ones that may lead or be given replicas.
    pub fn live_brokers(&self) -> impl Iterator<Item = &BrokerRegistration> {
        self.brokers.values().filter(|b| b.is_live())
    }

    pub fn is_live(&self, broker_id: i32) -> bool {
        self.brokers.get(&broker_id).is_some_and(BrokerRegistration::is_live)
    }

    /// Whether the controller may move leadership to this broker: live, and not on its way out
    /// because a newer process of it waits to register (that process serves nothing yet, and
    /// the registered one is being fenced).
    pub fn can_take_leadership(&self, broker_id: i32) -> bool {
        self.brokers
            .get(&broker_id)
            .is_some_and(|b| b.is_live() && b.pending_incarnation.is_none())
    }

    /// Whether the user has a SCRAM credential of any mechanism.
    pub fn has_scram_user(&self, user: &str) -> bool {
        self.scram_credentials
            .range((user.to_string(), ScramMechanism::Sha256)..)
            .next()
            .is_some_and(|((u, _), _)| u == user)
    }

    /// Checks a decision's records as a whole, before any is applied: every partition change
    /// must keep the invariants of [`PartitionRegistration::invariant_violation`] against the
    /// registration before it (an earlier record of the same decision, else the image), and a
    /// reassignment may only name replicas. Records for something unknown pass (they are
    /// ignored when applied).
    pub fn check(&self, records: &[MetadataRecord]) -> Result<(), String> {
        let mut changed: HashMap<(Uuid, i32), PartitionRegistration> = HashMap::new();
        let mut new_topics: HashMap<Uuid, &str> = HashMap::new();
        for record in records {
            match record {
                MetadataRecord::Topic { name, topic_id } => {
                    new_topics.insert(*topic_id, name);
                }
                MetadataRecord::RemoveTopic { topic_id } => {
                    new_topics.remove(topic_id);
                    changed.retain(|(id, _), _| id != topic_id);
                }
                MetadataRecord::Partition { topic_id, partition, .. } => {
                    let existing = self.topic_by_id(topic_id).filter(|_| !new_topics.contains_key(topic_id));
                    let name = match (existing, new_topics.get(topic_id)) {
                        (Some(topic), _) => topic.name.as_str(),
                        (None, Some(name)) => name,
                        (None, None) => continue,
                    };
                    let before = changed.get(&(*topic_id, *partition)).cloned().or_else(|| {
                        let index = usize::try_from(*partition).ok()?;
                        existing.and_then(|t| t.partitions.get(index)).cloned()
                    });
                    let Some(after) = registration_from(record, before.as_ref()) else {
                        continue;
                    };
                    if let Some(broken) = after.invariant_violation(before.as_ref()) {
                        return Err(format!("a change of {name}-{partition} breaks an invariant: {broken}"));
                    }
                    changed.insert((*topic_id, *partition), after);
                }
                MetadataRecord::PartitionReassignment {
                    topic_id,
                    partition,
                    adding,
                    removing,
                } => {
                    let current = changed.get(&(*topic_id, *partition)).or_else(|| {
                        let index = usize::try_from(*partition).ok()?;
                        self.topic_by_id(topic_id)?.partitions.get(index)
                    });
                    if let Some(p) = current {
                        if let Some(id) = adding.iter().chain(removing).find(|id| !p.replicas.contains(id)) {
                            return Err(format!(
                                "a reassignment of partition {partition} of topic {topic_id} names broker {id}, which is not one of its replicas {:?}",
                                p.replicas
                            ));
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Applies one record. Records that refer to something unknown (a partition of a
    /// deleted topic, say) are ignored: the log is the truth and replay must not fail. A
    /// record that would break an invariant the image relies on (see [`Self::check`], which
    /// decisions pass first) is refused, and the image is left as it was.
    pub fn try_apply(&mut self, record: &MetadataRecord) -> Result<(), String> {
        self.last_offset += 1;
        match record {
            MetadataRecord::RegisterBroker {
                broker_id,
                incarnation_id,
                endpoints,
                rack,
                replica_capacity,
            } => {
                self.brokers.insert(
                    *broker_id,
                    BrokerRegistration {
                        broker_id: *broker_id,
                        incarnation_id: *incarnation_id,
                        endpoints: endpoints.clone(),
                        rack: rack.clone(),
                        fenced: false,
                        in_controlled_shutdown: false,
                        broker_epoch: self.last_offset as i64,
                        replica_capacity: *replica_capacity,
                        pending_incarnation: None,
                    },
                );
            }
            MetadataRecord::RegistrationPending {
                broker_id,
                incarnation_id,
            } => {
                if let Some(broker) = self.brokers.get_mut(broker_id) {
                    broker.pending_incarnation = Some(*incarnation_id);
                }
            }
            MetadataRecord::Topic { name, topic_id } => {
                self.topic_names.insert(*topic_id, name.clone());
                self.topics.insert(
                    name.clone(),
                    Arc::new(TopicImage {
                        name: name.clone(),
                        topic_id: *topic_id,
                        partitions: Vec::new(),
                        configs: BTreeMap::new(),
                    }),
                );
            }
            MetadataRecord::Partition { topic_id, partition, .. } => {
                let Some(topic) = self.topic_names.get(topic_id).and_then(|n| self.topics.get_mut(n)) else {
                    return Ok(());
                };
                let topic = Arc::make_mut(topic);
                let index = *partition as usize;
                let Some(registration) = registration_from(record, topic.partitions.get(index)) else {
                    return Ok(());
                };
                if let Some(broken) = registration.invariant_violation(topic.partitions.get(index)) {
                    return Err(format!("a change of {}-{partition} breaks an invariant: {broken}", topic.name));
                }
                if index < topic.partitions.len() {
                    topic.partitions[index] = registration;
                } else if index == topic.partitions.len() {
                    topic.partitions.push(registration);
                }
            }
            MetadataRecord::Config { resource, name, value } => {
                let configs = match resource {
                    ConfigResource::Topic(topic) => match self.topics.get_mut(topic) {
                        Some(t) => &mut Arc::make_mut(t).configs,
                        None => return Ok(()),
                    },
                    ConfigResource::Broker(id) => self.broker_configs.entry(*id).or_default(),
                    ConfigResource::Group(group_id) => {
                        self.apply_group_config(group_id, name, value.as_deref());
                        return Ok(());
                    }
                };
                match value {
                    Some(v) => configs.insert(name.clone(), v.clone()),
                    None => configs.remove(name),
                };
            }
            MetadataRecord::RemoveTopic { topic_id } => {
                if let Some(name) = self.topic_names.remove(topic_id) {
                    self.topics.remove(&name);
                }
            }
            MetadataRecord::ProducerIds { next_block_start, .. } => {
                self.next_producer_id = self.next_producer_id.max(*next_block_start);
            }
            MetadataRecord::FenceBroker { broker_id } | MetadataRecord::UnfenceBroker { broker_id } => {
                if let Some(broker) = self.brokers.get_mut(broker_id) {
                    broker.fenced = matches!(record, MetadataRecord::FenceBroker { .. });
                }
            }
            MetadataRecord::PartitionReassignment {
                topic_id,
                partition,
                adding,
                removing,
            } => {
                let Some(topic) = self.topic_names.get(topic_id).and_then(|n| self.topics.get_mut(n)) else {
                    return Ok(());
                };
                let topic = Arc::make_mut(topic);
                let Some(p) = usize::try_from(*partition)
                    .ok()
                    .and_then(|i| topic.partitions.get_mut(i))
                else {
                    return Ok(());
                };
                if let Some(id) = adding.iter().chain(removing).find(|id| !p.replicas.contains(id)) {
                    return Err(format!(
                        "a reassignment of {}-{partition} names broker {id}, which is not one of its replicas {:?}",
                        topic.name, p.replicas
                    ));
                }
                p.reassignment = Reassignment::of(adding.as_slice().into(), removing.as_slice().into());
            }
            MetadataRecord::BrokerShutdown { broker_id } => {
                if let Some(broker) = self.brokers.get_mut(broker_id) {
                    broker.fenced = true;
                    broker.in_controlled_shutdown = true;
                }
            }
            MetadataRecord::ClientQuota { entity, key, value } => match value {
                Some(value) => {
                    self.client_quotas
                        .entry(entity.clone())
                        .or_default()
                        .insert(key.clone(), *value);
                }
                None => {
                    if let Some(values) = self.client_quotas.get_mut(entity) {
                        values.remove(key);
                        if values.is_empty() {
                            self.client_quotas.remove(entity);
                        }
                    }
                }
            },
            MetadataRecord::ScramCredential(credential) => {
                self.scram_credentials
                    .insert((credential.user.clone(), credential.mechanism), credential.clone());
            }
            MetadataRecord::RemoveScramCredential { user, mechanism } => {
                self.scram_credentials.remove(&(user.clone(), *mechanism));
            }
            MetadataRecord::Acl { id, binding } => Arc::make_mut(&mut self.acls).insert(*id, binding.clone()),
            MetadataRecord::RemoveAcl { id } => {
                Arc::make_mut(&mut self.acls).remove(id);
            }
            MetadataRecord::FeatureLevel { name, level } => {
                // Level 0 is kept, unlike Kafka: it overrides a node's setting (`kafka-features
                // disable` must turn transactions v2 off even where `transaction.version=2`).
                self.features.insert(name.clone(), *level);
                self.features_epoch = self.last_offset as i64;
            }
        }
        Ok(())
    }

    /// [`Self::try_apply`] for tests, where a refused record is a failed test.
    #[cfg(test)]
    pub fn apply(&mut self, record: &MetadataRecord) {
        if let Err(broken) = self.try_apply(record) {
            panic!("{broken}");
        }
    }
}

/// The registration a Partition record makes of the one before it (`previous`; `None` for a new
/// partition); `None` for any other record. A reassignment under way stays as it is
/// (PartitionReassignment records change it); replicas the record no longer lists leave it.
fn registration_from(record: &MetadataRecord, previous: Option<&PartitionRegistration>) -> Option<PartitionRegistration> {
    let MetadataRecord::Partition {
        replicas,
        isr,
        leader,
        leader_epoch,
        partition_epoch,
        election,
        ..
    } = record
    else {
        return None;
    };
    let listed = |ids: &[i32]| ids.iter().copied().filter(|id| replicas.contains(id)).collect();
    let reassignment = previous
        .and_then(|p| p.reassignment.as_ref())
        .and_then(|r| Reassignment::of(listed(&r.adding), listed(&r.removing)));
    Some(PartitionRegistration {
        replicas: replicas.as_slice().into(),
        isr: isr.as_slice().into(),
        leader: *leader,
        leader_epoch: *leader_epoch,
        partition_epoch: *partition_epoch,
        reassignment,
        election: *election,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::records::ElectionTrigger;

    fn topic_records(name: &str, id: Uuid, partitions: i32) -> Vec<MetadataRecord> {
        let mut out = vec![MetadataRecord::Topic {
            name: name.to_string(),
            topic_id: id,
        }];
        out.extend((0..partitions).map(|p| MetadataRecord::Partition {
            topic_id: id,
            partition: p,
            replicas: vec![1],
            isr: vec![1],
            leader: 1,
            leader_epoch: 0,
            partition_epoch: 0,
            election: None,
        }));
        out
    }

    #[test]
    fn group_configs_need_no_group_and_go_with_their_last_value() {
        let mut image = MetadataImage::new("c".into());
        let config = |name: &str, value: Option<&str>| MetadataRecord::Config {
            resource: ConfigResource::Group("g1".into()),
            name: name.into(),
            value: value.map(String::from),
        };
        assert_eq!(image.group_configs("g1"), None);
        image.apply(&config("share.auto.offset.reset", Some("earliest")));
        image.apply(&config("share.isolation.level", Some("read_committed")));
        let configs = image.group_configs("g1").expect("no group needed");
        assert_eq!(
            configs.get("share.auto.offset.reset").map(String::as_str),
            Some("earliest")
        );
        assert_eq!(configs.len(), 2);

        image.apply(&config("share.auto.offset.reset", None));
        assert_eq!(image.group_configs("g1").map(BTreeMap::len), Some(1));
        image.apply(&config("share.isolation.level", None));
        assert_eq!(image.group_configs("g1"), None, "no empty entry is kept");
        image.apply(&config("share.isolation.level", None));
        assert!(image.group_configs.is_empty(), "removing what is not there is a no-op");
    }

    #[test]
    fn topic_partitions_and_configs_apply_in_order() {
        let id = Uuid::new_v4();
        let mut image = MetadataImage::new("c".into());
        for r in topic_records("orders", id, 3) {
            image.apply(&r);
        }
        image.apply(&MetadataRecord::Config {
            resource: ConfigResource::Topic("orders".into()),
            name: "retention.ms".into(),
            value: Some("1000".into()),
        });
        let topic = image.topic("orders").unwrap();
        assert_eq!(topic.partitions.len(), 3);
        assert_eq!(topic.configs.get("retention.ms").map(String::as_str), Some("1000"));
        assert_eq!(image.topic_by_id(&id).unwrap().name, "orders");
        assert_eq!(image.last_offset, 5);
    }

    #[test]
    fn remove_topic_forgets_it_and_later_records_for_it_are_ignored() {
        let id = Uuid::new_v4();
        let mut image = MetadataImage::new("c".into());
        for r in topic_records("t", id, 1) {
            image.apply(&r);
        }
        image.apply(&MetadataRecord::RemoveTopic { topic_id: id });
        image.apply(&topic_records("t", id, 2)[1]);
        assert!(image.topic("t").is_none());
        assert!(image.topic_by_id(&id).is_none());
    }

    #[test]
    fn shutdown_fences_until_the_next_registration() {
        let mut image = MetadataImage::new("c".into());
        let register = MetadataRecord::RegisterBroker {
            broker_id: 1,
            incarnation_id: Uuid::nil(),
            endpoints: vec![],
            rack: None,
            replica_capacity: None,
        };
        image.apply(&register);
        image.apply(&MetadataRecord::BrokerShutdown { broker_id: 1 });
        assert!(!image.is_live(1) && image.brokers[&1].in_controlled_shutdown);
        assert_eq!(image.live_brokers().count(), 0);
        image.apply(&register);
        assert!(image.is_live(1) && !image.brokers[&1].in_controlled_shutdown);
    }

    #[test]
    fn records_breaking_partition_invariants_are_refused() {
        let id = Uuid::from_u128(9);
        let mut image = MetadataImage::new("c".into());
        for r in topic_records("t", id, 1) {
            image.apply(&r);
        }
        let good = image.topic("t").unwrap().partitions[0].clone();
        let change = |f: &dyn Fn(&mut PartitionRegistration)| {
            let mut p = good.clone();
            f(&mut p);
            p
        };
        let broken = [
            change(&|p| p.leader = 9),
            change(&|p| p.isr = vec![p.leader, 42].into()),
            change(&|p| p.replicas = vec![p.leader, p.leader].into()),
            change(&|p| p.leader_epoch -= 1),
            change(&|p| p.partition_epoch -= 1),
        ];
        for p in broken {
            let reason = p.invariant_violation(Some(&good));
            assert!(reason.is_some(), "{p:?} should be refused");
        }
        let leaderless = change(&|p| {
            p.leader = NO_LEADER;
            p.leader_epoch += 1;
            p.partition_epoch += 1;
        });
        assert_eq!(leaderless.invariant_violation(Some(&good)), None);
    }

    /// The election a record gives as the reason for its leader must match it.
    #[test]
    fn a_recorded_election_that_contradicts_the_leader_is_refused() {
        let id = Uuid::from_u128(9);
        let mut image = MetadataImage::new("c".into());
        for r in topic_records("t", id, 1) {
            image.apply(&r);
        }
        let good = image.topic("t").unwrap().partitions[0].clone();
        let elected = |reason, leader, isr: &[i32]| PartitionRegistration {
            replicas: vec![1, 2].into(),
            isr: isr.into(),
            leader,
            leader_epoch: good.leader_epoch + 1,
            partition_epoch: good.partition_epoch + 1,
            election: Some(LeaderElection {
                reason,
                trigger: ElectionTrigger::BrokerLeft,
            }),
            ..good.clone()
        };
        let contradictions = [
            elected(ElectionReason::Offline, 2, &[2]),
            elected(ElectionReason::InSync, NO_LEADER, &[1]),
            elected(ElectionReason::Unclean, 2, &[1, 2]),
            elected(ElectionReason::Unchanged, 2, &[1, 2]),
        ];
        for p in contradictions {
            let reason = p.invariant_violation(Some(&good));
            assert!(reason.is_some(), "{:?} with leader {} should be refused", p.election, p.leader);
        }
        for p in [
            elected(ElectionReason::Offline, NO_LEADER, &[1]),
            elected(ElectionReason::InSync, 2, &[1, 2]),
            elected(ElectionReason::Unclean, 2, &[2]),
        ] {
            assert_eq!(p.invariant_violation(Some(&good)), None, "{:?}", p.election);
        }
    }

    #[test]
    fn each_registration_gets_a_new_broker_epoch_from_its_metadata_offset() {
        let mut image = MetadataImage::new("c".into());
        let register = |broker_id| MetadataRecord::RegisterBroker {
            broker_id,
            incarnation_id: Uuid::nil(),
            endpoints: vec![],
            rack: None,
            replica_capacity: None,
        };
        image.apply(&register(1));
        image.apply(&register(2));
        let first = image.brokers[&1].broker_epoch;
        assert_eq!((first, image.brokers[&2].broker_epoch), (1, 2));
        image.apply(&MetadataRecord::FenceBroker { broker_id: 1 });
        assert_eq!(image.brokers[&1].broker_epoch, first, "fencing keeps the registration");
        image.apply(&register(1));
        assert_eq!(
            image.brokers[&1].broker_epoch, 4,
            "a new start registers at a new epoch"
        );
    }

    #[test]
    fn a_pending_incarnation_stays_through_fencing_until_a_registration_replaces_it() {
        let mut image = MetadataImage::new("c".into());
        let register = |incarnation| MetadataRecord::RegisterBroker {
            broker_id: 1,
            incarnation_id: Uuid::from_u128(incarnation),
            endpoints: vec![],
            rack: None,
            replica_capacity: None,
        };
        let pending = |broker_id| MetadataRecord::RegistrationPending {
            broker_id,
            incarnation_id: Uuid::from_u128(2),
        };
        image.apply(&pending(1));
        assert!(image.brokers.is_empty(), "pending for an unknown broker is ignored");
        image.apply(&register(1));
        image.apply(&pending(1));
        image.apply(&MetadataRecord::FenceBroker { broker_id: 1 });
        let broker = &image.brokers[&1];
        assert!(broker.fenced && broker.pending_incarnation == Some(Uuid::from_u128(2)));
        let old_epoch = broker.broker_epoch;
        image.apply(&register(2));
        let broker = &image.brokers[&1];
        assert!(broker.is_live() && broker.pending_incarnation.is_none());
        assert_eq!(broker.incarnation_id, Uuid::from_u128(2));
        assert!(broker.broker_epoch > old_epoch);
    }

    #[test]
    fn replay_is_deterministic() {
        let id = Uuid::new_v4();
        let records = topic_records("a", id, 2);
        let mut one = MetadataImage::new("c".into());
        let mut two = MetadataImage::new("c".into());
        records.iter().for_each(|r| one.apply(r));
        records.iter().for_each(|r| two.apply(r));
        assert_eq!(one, two);
    }
}

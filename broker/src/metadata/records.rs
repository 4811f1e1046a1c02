//! Metadata records: every change to cluster metadata is one of these, appended to the
//! metadata log and applied in order to the [`MetadataImage`](super::image::MetadataImage).
//! They mirror KRaft's record types so that moving the log onto the Raft quorum changes
//! where records come from, not what they mean.

use std::collections::BTreeMap;

use uuid::Uuid;

use super::acls::{AclBinding, AclFilter};

/// A Kafka listener endpoint as advertised to clients: the listener's name (a client is
/// answered with the endpoints of the listener it connected to) and its address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub listener: String,
    pub host: String,
    pub port: i32,
}

impl Endpoint {
    /// An endpoint of the `PLAINTEXT` listener, the one a node has unless named otherwise.
    pub fn plaintext(host: impl Into<String>, port: i32) -> Endpoint {
        Endpoint {
            listener: crate::config::DEFAULT_LISTENER_NAME.to_string(),
            host: host.into(),
            port,
        }
    }
}

/// What a config record applies to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum ConfigResource {
    Topic(String),
    /// One broker's dynamic configs, or with [`BROKER_DEFAULT`] the cluster-wide ones.
    Broker(i32),
    /// A group id's configs (Kafka's resource type GROUP, 32). The group need not exist.
    Group(String),
}

/// The broker id under which the cluster-wide dynamic broker configs are kept: Kafka's broker
/// config resource named `""`. No broker has a negative id, so it names none.
pub const BROKER_DEFAULT: i32 = -1;

/// Why a Partition record names the leader it does: what the election found and what asked
/// for it. It is kept in the record and the image, so the metadata log says why each leader
/// was chosen, and the broker that becomes leader logs it. Records written before Sluice kept
/// it carry none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaderElection {
    pub reason: ElectionReason,
    pub trigger: ElectionTrigger,
}

/// What an election found (`controller::election::elect`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElectionReason {
    /// The leader stays.
    Unchanged,
    /// The first replica, in sync.
    Preferred,
    /// Another in-sync replica.
    InSync,
    /// An out-of-sync replica: records only the old ISR had may be lost.
    Unclean,
    /// No replica may lead: the partition is offline until one returns.
    Offline,
}

/// What asked for an election.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElectionTrigger {
    /// The topic or partition was created.
    Created,
    /// The leader changed the ISR (AlterPartition); the leader stays.
    IsrChange,
    /// A broker was fenced or is shutting down.
    BrokerLeft,
    /// A broker came back and may lead a partition that had no leader.
    BrokerReturned,
    /// The controller's preferred leader balancing (`auto.leader.rebalance.enable`).
    PreferredBalancing,
    /// An operator's ElectLeaders (preferred or unclean).
    ElectLeaders,
    /// A reassignment started.
    ReassignmentStarted,
    /// A reassignment finished: its target is in sync.
    ReassignmentFinished,
}

impl std::fmt::Display for LeaderElection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let reason = match self.reason {
            ElectionReason::Unchanged => "the leader stayed",
            ElectionReason::Preferred => "the preferred replica was elected",
            ElectionReason::InSync => "an in-sync replica was elected",
            ElectionReason::Unclean => "an out-of-sync replica was elected (unclean election)",
            ElectionReason::Offline => "no replica may lead",
        };
        let trigger = match self.trigger {
            ElectionTrigger::Created => "the partition was created",
            ElectionTrigger::IsrChange => "the leader changed the ISR",
            ElectionTrigger::BrokerLeft => "a broker left service",
            ElectionTrigger::BrokerReturned => "a broker returned",
            ElectionTrigger::PreferredBalancing => "preferred leader balancing",
            ElectionTrigger::ElectLeaders => "an ElectLeaders request",
            ElectionTrigger::ReassignmentStarted => "a reassignment started",
            ElectionTrigger::ReassignmentFinished => "a reassignment finished",
        };
        write!(f, "{reason} ({trigger})")
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetadataRecord {
    /// A broker announced itself (on every start, with a fresh incarnation id).
    RegisterBroker {
        broker_id: i32,
        incarnation_id: Uuid,
        endpoints: Vec<Endpoint>,
        rack: Option<String>,
        /// Partition replicas it can host (`None`: unlimited); see `BrokerRegistration`.
        replica_capacity: Option<u32>,
    },
    /// A topic was created; its partitions follow as [`MetadataRecord::Partition`] records.
    Topic { name: String, topic_id: Uuid },
    /// A partition's full registration (created, or changed leader/ISR).
    Partition {
        topic_id: Uuid,
        partition: i32,
        replicas: Vec<i32>,
        isr: Vec<i32>,
        leader: i32,
        leader_epoch: i32,
        partition_epoch: i32,
        /// Why `leader` leads; `None` in records written before Sluice kept it.
        election: Option<LeaderElection>,
    },
    /// A config was set (`Some`) or removed (`None`).
    Config {
        resource: ConfigResource,
        name: String,
        value: Option<String>,
    },
    /// A topic and all its partitions were deleted.
    RemoveTopic { topic_id: Uuid },
    /// The controller stopped hearing from a broker: clients are no longer sent to it.
    FenceBroker { broker_id: i32 },
    /// A fenced broker is reachable again.
    UnfenceBroker { broker_id: i32 },
    /// A new incarnation of a registered broker asked to register while the registered one was
    /// live. It is refused until the registered one is fenced; from now on contact from that
    /// node is taken to be the new process's, so the old session is ending (see
    /// `BrokerRegistration::pending_incarnation`).
    RegistrationPending { broker_id: i32, incarnation_id: Uuid },
    /// A broker began a controlled shutdown: it is fenced and stays fenced (whatever the
    /// liveness check hears) until it registers again with a new incarnation.
    BrokerShutdown { broker_id: i32 },
    /// A block of producer ids was handed to a broker; the next block starts here.
    ProducerIds { broker_id: i32, next_block_start: i64 },
    /// A partition's reassignment began, changed or ended (both lists empty). Partition records
    /// leave it as it is; the replica set during a move is in the Partition record.
    PartitionReassignment {
        topic_id: Uuid,
        partition: i32,
        adding: Vec<i32>,
        removing: Vec<i32>,
    },
    /// A client quota was set (`Some`) or removed (`None`), as KRaft's `QuotaRecord`.
    ClientQuota {
        entity: QuotaEntity,
        key: String,
        value: Option<QuotaValue>,
    },
    /// A user's SCRAM credential for one mechanism was set (KRaft's `UserScramCredentialRecord`).
    ScramCredential(ScramCredential),
    /// A user's SCRAM credential for one mechanism was removed.
    RemoveScramCredential { user: String, mechanism: ScramMechanism },
    /// An ACL was created (KRaft's `AccessControlEntryRecord`).
    Acl { id: Uuid, binding: AclBinding },
    /// An ACL was deleted.
    RemoveAcl { id: Uuid },
    /// A feature was finalized at `level`, 0 included (KRaft's `FeatureLevelRecord`).
    FeatureLevel { name: String, level: i16 },
}

/// Kafka's SCRAM mechanisms, by their `ScramMechanism` type codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ScramMechanism {
    Sha256 = 1,
    Sha512 = 2,
}

impl ScramMechanism {
    pub fn from_code(code: i8) -> Option<ScramMechanism> {
        match code {
            1 => Some(ScramMechanism::Sha256),
            2 => Some(ScramMechanism::Sha512),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ScramMechanism::Sha256 => "SCRAM-SHA-256",
            ScramMechanism::Sha512 => "SCRAM-SHA-512",
        }
    }
}

/// What the cluster keeps of a user's SCRAM password for one mechanism (RFC 5802): the salt,
/// the iteration count and the keys derived from the salted password. Never the password, nor
/// the salted password, which would let anyone who reads the metadata log log in.
#[derive(Clone, PartialEq, Eq)]
pub struct ScramCredential {
    pub user: String,
    pub mechanism: ScramMechanism,
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
    pub iterations: u32,
}

impl std::fmt::Debug for ScramCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScramCredential")
            .field("user", &self.user)
            .field("mechanism", &self.mechanism)
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

/// One partition's part of [`MetadataCommand::AlterPartitions`]: the registration the leader
/// acts on (leader and partition epochs, compared and set) and the ISR it asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsrChangeRequest {
    pub topic_id: Uuid,
    pub partition: i32,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub new_isr: Vec<i32>,
}

/// A request to change metadata, proposed to the quorum by any broker and decided when it is
/// applied, identically on every node (see `controller::decide`). Deciding at apply time, in
/// log order, means two brokers racing to create one topic cannot both succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetadataCommand {
    RegisterBroker {
        broker_id: i32,
        incarnation_id: Uuid,
        endpoints: Vec<Endpoint>,
        rack: Option<String>,
        /// Partition replicas it can host (`None`: unlimited); see `BrokerRegistration`.
        replica_capacity: Option<u32>,
        /// Refused (DUPLICATE_BROKER_REGISTRATION) while an earlier incarnation of the broker is
        /// live, as Kafka refuses a registration overlapping a live session. Every build from
        /// metadata version 4 sets it; it is false only in entries written before, which were
        /// always accepted and must replay as they were decided.
        wait_for_previous_session: bool,
    },
    FenceBroker {
        broker_id: i32,
    },
    /// A fenced broker asks to be unfenced (Kafka's heartbeat asking to leave the fenced state):
    /// only the registered incarnation's request counts. `None` only in entries written before
    /// metadata version 4, when the controller unfenced whichever incarnation it heard from.
    UnfenceBroker {
        broker_id: i32,
        incarnation_id: Option<Uuid>,
    },
    CreateTopic {
        topic: NewTopic,
        topic_id: Uuid,
    },
    /// A block of producer ids for a broker's InitProducerId answers.
    AllocateProducerIds {
        broker_id: i32,
    },
    /// By name, or by id when `name` is `None`.
    DeleteTopic {
        name: Option<String>,
        topic_id: Uuid,
    },
    CreatePartitions {
        name: String,
        count: i32,
        assignments: Option<Vec<Vec<i32>>>,
    },
    /// `list_bases` holds the proposer's effective value of each list config that an APPEND or
    /// SUBTRACT starts from when the topic has no override (broker defaults differ per node,
    /// so they travel with the command to keep apply deterministic).
    AlterTopicConfigs {
        name: String,
        ops: Vec<(String, AlterOp, Option<String>)>,
        list_bases: BTreeMap<String, String>,
    },
    /// IncrementalAlterConfigs on a broker resource: `broker_id` names one broker, or is
    /// [`BROKER_DEFAULT`] for the cluster-wide dynamic defaults. Only SET and DELETE.
    AlterBrokerConfigs {
        broker_id: i32,
        ops: Vec<(String, AlterOp, Option<String>)>,
    },
    /// IncrementalAlterConfigs or AlterConfigs on a group resource (KIP-848/KIP-932 group
    /// configs): SET and DELETE on a group id's configs, whether or not the group exists.
    AlterGroupConfigs {
        group_id: String,
        ops: Vec<(String, AlterOp, Option<String>)>,
    },
    /// Kafka's AlterPartition: a partition leader changes its ISR. Accepted only if the leader
    /// still leads at `leader_epoch` and the registration is still at `partition_epoch`
    /// (compare-and-set), so a deposed leader or a stale view cannot change the ISR.
    AlterPartition {
        topic_id: Uuid,
        partition: i32,
        leader_id: i32,
        leader_epoch: i32,
        partition_epoch: i32,
        new_isr: Vec<i32>,
    },
    /// Kafka's AlterPartition request as a leader sends it: ISR changes to any number of the
    /// partitions `leader_id` leads, each decided on its own as [`MetadataCommand::AlterPartition`]
    /// is (one refused change does not hold back the others). A leader batches its changes into
    /// one of these, so that thousands of ISR changes after a restart are a handful of entries.
    AlterPartitions {
        leader_id: i32,
        changes: Vec<IsrChangeRequest>,
    },
    /// A broker is stopping (SIGTERM): leadership moves to other in-sync replicas and the broker
    /// leaves every ISR before the process exits. It stays fenced until it registers again.
    ControlledShutdown {
        broker_id: i32,
        incarnation_id: Uuid,
    },
    /// Moves leadership back to each partition's preferred (first) replica where it is live,
    /// in sync and not leading (`auto.leader.rebalance.enable`).
    ElectPreferredLeaders,
    /// One entity of an AlterClientQuotas request: each key set to a value, or removed (`None`).
    AlterClientQuotas {
        entity: QuotaEntity,
        ops: Vec<(String, Option<QuotaValue>)>,
    },
    /// AlterUserScramCredentials: remove and set credentials. With `only_if_absent` (the
    /// `--add-scram` users a broker brings at start) an upsertion whose user already has any
    /// credential is skipped, so a restart never resets a password changed since.
    AlterScramCredentials {
        deletions: Vec<(String, ScramMechanism)>,
        upsertions: Vec<ScramCredential>,
        only_if_absent: bool,
    },
    /// CreateAcls: each binding with the id the proposer chose for it. A binding already
    /// present is not added twice.
    CreateAcls {
        acls: Vec<(Uuid, AclBinding)>,
    },
    /// DeleteAcls: every ACL matching any of the filters.
    DeleteAcls {
        filters: Vec<AclFilter>,
    },
    /// UpdateFeatures (`kafka-features upgrade|downgrade|disable`): finalize each feature at its
    /// level (0 too). All or nothing; whether a downgrade was allowed is the request's to check.
    UpdateFeatures {
        updates: Vec<(String, i16)>,
    },
    /// AlterPartitionReassignments for one partition: move it to `target` (add the new replicas,
    /// and once they are in sync switch to `target`), or with `None` cancel an ongoing move.
    ReassignPartition {
        name: String,
        partition: i32,
        target: Option<Vec<i32>>,
    },
    /// Kafka's ElectLeaders (KIP-460) as an admin asked for it: `partitions` names topics and
    /// their partition indexes, or `None` for every partition of every topic.
    ElectLeaders {
        election: ElectionType,
        partitions: Option<Vec<(String, Vec<i32>)>>,
    },
}

/// Which leader an ElectLeaders request asks for, in Kafka's codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElectionType {
    /// The first replica of the assignment, if it is live and in sync.
    Preferred,
    /// Any live replica, even one out of sync, for a partition without a live leader.
    Unclean,
}

impl ElectionType {
    pub fn from_code(code: i8) -> Option<ElectionType> {
        match code {
            0 => Some(ElectionType::Preferred),
            1 => Some(ElectionType::Unclean),
            _ => None,
        }
    }
}

/// One entry of the metadata log: a command and who proposed it, so that only the proposing
/// process keeps the decision's outcome for its waiting client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proposal {
    pub proposer: i32,
    pub incarnation: Uuid,
    pub command: MetadataCommand,
}

/// A topic to create, with defaults already filled in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTopic {
    pub name: String,
    pub num_partitions: i32,
    pub replication_factor: i16,
    /// The request left the replication factor to the broker default: see the controller's `replication_factor`.
    pub replication_factor_defaulted: bool,
    /// Explicit replica lists per partition, or `None` to let the controller place them.
    pub assignments: Option<Vec<Vec<i32>>>,
    pub configs: BTreeMap<String, String>,
}

/// One IncrementalAlterConfigs operation, in Kafka's codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlterOp {
    Set,
    Delete,
    Append,
    Subtract,
}

impl AlterOp {
    pub fn from_code(code: i8) -> Option<AlterOp> {
        Some(match code {
            0 => AlterOp::Set,
            1 => AlterOp::Delete,
            2 => AlterOp::Append,
            3 => AlterOp::Subtract,
            _ => return None,
        })
    }
}

/// A client quota entity (Kafka's `ClientQuotaEntity` without `ip`): which of the `user` and
/// `client-id` dimensions it names, each a name or the default. `None` means the entity does
/// not have that dimension at all, which differs from naming the default.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QuotaEntity {
    pub user: Option<QuotaName>,
    pub client_id: Option<QuotaName>,
}

/// One dimension of a quota entity: a specific name, or the default (`<default>` in
/// `kafka-configs`, a null entity name on the wire).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum QuotaName {
    Default,
    Named(String),
}

impl QuotaName {
    /// The wire form: the name, or null for the default.
    pub fn from_wire(name: Option<&str>) -> QuotaName {
        name.map_or(QuotaName::Default, |n| QuotaName::Named(n.to_string()))
    }

    pub fn as_wire(&self) -> Option<&str> {
        match self {
            QuotaName::Default => None,
            QuotaName::Named(name) => Some(name),
        }
    }
}

/// A quota value (Kafka sends every quota as a double). Compared bit for bit so that records
/// and images stay `Eq`; the controller refuses NaN, so equal values have equal bits.
#[derive(Debug, Clone, Copy)]
pub struct QuotaValue(pub f64);

impl PartialEq for QuotaValue {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

impl Eq for QuotaValue {}

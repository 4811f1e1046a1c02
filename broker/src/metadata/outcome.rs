//! What a controller decision hands back: records and an [`Outcome`] for the proposer, or an
//! [`ApiError`] saying why the request was refused. A leaf of `controller/`, so every manager
//! can return these without depending on `decide`.

use kafka_protocol::error::ResponseError;
use uuid::Uuid;

use super::acls::AclBinding;

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
    /// An AlterPartitions was decided: per change, in request order, the registration as it
    /// now stands, or why that change was refused.
    PartitionsChanged(Vec<Result<PartitionState, ApiError>>),
    /// An ElectLeaders request was decided: per topic, per partition, whether a leader was
    /// elected (`None`) or why not.
    LeadersElected(Vec<TopicElection>),
    /// AlterUserScramCredentials was decided: per user named, its error if it was refused
    /// (the others' changes were written).
    ScramCredentialsAltered(Vec<(String, Option<ApiError>)>),
    /// DeleteAcls was decided: per filter, in request order, the ACLs it deleted.
    AclsDeleted(Vec<Vec<AclBinding>>),
    /// The request was refused, but its decision still wrote records (a registration refused
    /// while the broker's previous incarnation is live records that a new one is waiting). The
    /// proposer gets the error as it would a plain refusal.
    Refused(ApiError),
}

/// A partition's registration after an accepted ISR change (what Kafka's AlterPartition
/// response carries per partition).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionState {
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub isr: Vec<i32>,
}

/// One topic's part of an ElectLeaders outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicElection {
    pub topic: String,
    pub partitions: Vec<(i32, Option<ApiError>)>,
}

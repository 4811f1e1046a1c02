//! Metadata records: every change to cluster metadata is one of these, appended to the
//! metadata log and applied in order to the [`MetadataImage`](super::image::MetadataImage).
//! They mirror KRaft's record types so that moving the log onto the Raft quorum changes
//! where records come from, not what they mean.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// A Kafka listener endpoint as advertised to clients.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    pub host: String,
    pub port: i32,
}

/// What a config record applies to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ConfigResource {
    Topic(String),
    Broker(i32),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MetadataRecord {
    /// A broker announced itself (on every start, with a fresh incarnation id).
    RegisterBroker {
        broker_id: i32,
        incarnation_id: Uuid,
        endpoints: Vec<Endpoint>,
        rack: Option<String>,
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
    },
    /// A config was set (`Some`) or removed (`None`).
    Config { resource: ConfigResource, name: String, value: Option<String> },
    /// A topic and all its partitions were deleted.
    RemoveTopic { topic_id: Uuid },
}

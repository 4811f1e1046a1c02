//! The Kafka wire protocol as Sluice speaks it: request framing, the API version table,
//! and a zero-copy view of v2 record-batch headers. Message codecs come from the
//! `kafka-protocol` crate; this crate adds what the crate does not do for a broker.

pub mod apis;
pub mod batch;
pub mod frame;
pub mod fuzzing;
pub mod request;
pub mod versions;

pub use kafka_protocol;

pub use apis::{RequestBody, ResponseBody};

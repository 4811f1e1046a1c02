//! The Kafka wire protocol as Sluice speaks it: request framing, the API version table,
//! a zero-copy view of v2 record-batch headers, and bounded decoding of the records inside a
//! batch for the few features that need them. Message codecs come from the `kafka-protocol`
//! crate; this crate adds what the crate does not do for a broker.

pub mod apis;
pub mod batch;
pub mod control;
pub mod frame;
pub mod fuzzing;
pub mod records;
pub mod request;
pub mod response_frame;
pub mod versions;

pub use kafka_protocol;

pub use apis::{RequestBody, ResponseBody};

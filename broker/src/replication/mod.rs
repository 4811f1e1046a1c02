//! Partition replication between brokers: the follower side (replica fetchers) and the
//! high-watermark checkpoint. The leader side lives in [`crate::partition::Partition`] and
//! the Fetch handler.

pub mod checkpoint;
mod client;
pub mod fetcher;

pub use fetcher::ReplicaFetcherManager;

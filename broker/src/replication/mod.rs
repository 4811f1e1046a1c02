//! Partition replication between brokers: the follower side (replica fetchers) and the
//! high-watermark checkpoint. The leader side lives in `partition/leader.rs` and
//! `replica_manager/isr.rs`.

pub mod checkpoint;
pub mod client;
pub mod fetcher;
mod session;

pub use fetcher::ReplicaFetcherManager;

/// Fetch v15 moved the replica id into `replica_state`, beside the broker epoch (KIP-903):
/// followers fetch at this version, and leaders accept a follower fetch from it on.
pub const FIRST_FETCH_VERSION_WITH_REPLICA_STATE: i16 = 15;

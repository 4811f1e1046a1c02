//! KIP-932 share groups on the partition leader: each share-partition's in-flight records
//! (`partition.rs`).

pub mod partition;

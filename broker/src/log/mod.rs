//! The partition log: Kafka's `UnifiedLog`, `LogSegment`, `OffsetIndex` and `TimeIndex`.
//!
//! On disk, one directory per partition, laid out as Kafka lays it out:
//!
//! ```text
//! <topic>-<partition>/
//!     00000000000000000000.log        record batches, stored exactly as produced (offsets stamped)
//!     00000000000000000000.index      sparse offset index: (relative offset u32, position u32)
//!                                     (entries written in bulk; see index.rs)
//!     00000000000000000000.timeindex  sparse time index: (timestamp i64, relative offset u32)
//!     00000000000000000000.txnindex   aborted transactions whose abort marker is in the segment
//!                                     (34-byte entries; only for segments that have one)
//!     00000000000000012345.log        next segment, named after its base offset
//!     <base>.log.pending-<bytes>      the active segment while its predecessor's seal (fsync)
//!                                     is pending; `<bytes>` is the size it was sealed at
//!     ...
//!     <offset>.snapshot               producer state at that offset (`producer_state`)
//!     leader-epoch-checkpoint         leader epoch -> first offset (Kafka's text checkpoint)
//!     partition.metadata              the topic id this directory belongs to
//!     log-start-offset                the log start, once it lies inside a segment
//!     <base>.log.cleaned / .swap      a cleaned segment being written / swapped in (cleaner.rs)
//!     .clean_shutdown                 present only between a clean close and the next open
//! ```
//!
//! Guarantees: offsets are assigned consecutively from the log end offset; fetches return whole
//! stored batches; after a crash the active segment is scanned and truncated at the first torn or
//! invalid batch. A roll leaves the sealed segment's fsync to background writeback; until it is
//! done the new segment's `.log` has a pending name, and an open that finds one checks the sealed
//! segment against the size in it and drops what follows a hole (`resolve_interrupted_seals`).
//! A segment file under its final name means every segment before it is durable.
//! Durability between fsyncs comes from replication, as in Kafka (`flush.messages`/`flush.ms`
//! opt into fsync). The leader-epoch cache answers OffsetForLeaderEpoch so that a follower can
//! truncate to the leader's history before fetching; it is rebuilt from batch headers when its
//! checkpoint is missing or corrupt.
//!
//! Nothing here decodes records (batches are handled through their 61-byte headers,
//! `sluice_protocol::batch`) except the log cleaner (`cleaner.rs`), which compacts topics with
//! `cleanup.policy=compact`, and a ListOffsets timestamp lookup, which decodes the one batch
//! holding the target (`offset_for_timestamp`). Every checkpoint file is replaced through
//! `checkpoint_file.rs`.

pub mod checkpoint_file;
mod cleaner;
mod config;
mod error;
mod file_cache;
mod index;
mod leader_epoch;
mod log_to_clean;
mod partition_log;
pub mod partition_metadata;
mod segment;
mod tail;
pub mod txn_index;

#[cfg(test)]
mod tests;

pub use checkpoint_file::OffsetCheckpoint;
pub use cleaner::{
    read_cleaner_checkpoint, write_cleaner_checkpoint, CleanStats, CleanerConfig, LogCleaner,
    CLEANER_OFFSET_CHECKPOINT_FILE,
};
pub use config::LogConfig;
pub use error::LogError;
pub use file_cache::{FileCache, FileCacheStats};
pub use index::{OffsetIndex, OffsetPosition, TimeIndex, TimestampOffset, MAX_UNWRITTEN_INDEX_ENTRIES};
pub use leader_epoch::{LEADER_EPOCH_CHECKPOINT_FILE, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET};
pub use log_to_clean::LogToClean;
pub use partition_log::{
    ActiveSegment, AppendInfo, PartitionLog, PlannedRead, ReadResult, CLEAN_SHUTDOWN_FILE,
    LOG_START_OFFSET_FILE,
};
pub use segment::{LogSegment, RecoveryOutcome};
pub use tail::TailCacheBudget;
pub use txn_index::AbortedTxn;

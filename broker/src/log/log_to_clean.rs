//! What one partition log offers the cleaner (Kafka's `LogToClean`): snapshots of its sealed
//! segments and where the dirty section starts. [`PartitionLog`](super::PartitionLog) makes it
//! under its lock; the cleaner works from it without the lock.

use std::path::Path;
use std::sync::Arc;

use super::file_cache::FileCache;
use super::segment::SegmentSnapshot;
use super::LogConfig;

/// A sealed segment the cleaner may rewrite, with the base offset of the segment after it.
#[derive(Debug)]
pub(crate) struct CleanableSegment {
    pub snapshot: SegmentSnapshot,
    pub next_base_offset: i64,
}

/// What one partition log offers the cleaner (Kafka's `LogToClean`): see
/// [`PartitionLog::log_to_clean`].
#[derive(Debug)]
pub struct LogToClean {
    pub(super) name: String,
    pub(super) dir: Arc<Path>,
    pub(super) config: Arc<LogConfig>,
    /// The log's file cache, which the cleaned segment is written through.
    pub(super) file_cache: Arc<FileCache>,
    pub(super) first_dirty_offset: i64,
    pub(super) segments: Vec<CleanableSegment>,
    /// The log's truncation count when the snapshot was taken.
    pub(super) truncations: u64,
    /// Aborted transactions overlapping the cleanable segments: their records never stand
    /// for their keys in the offset map, so an aborted write cannot replace a committed one.
    pub(super) aborted: Vec<crate::log::txn_index::AbortedTxn>,
}

impl LogToClean {
    pub(super) fn new(
        name: String,
        dir: Arc<Path>,
        config: Arc<LogConfig>,
        file_cache: Arc<FileCache>,
        first_dirty_offset: i64,
        segments: Vec<CleanableSegment>,
        truncations: u64,
        aborted: Vec<crate::log::txn_index::AbortedTxn>,
    ) -> LogToClean {
        LogToClean {
            name,
            dir,
            config,
            file_cache,
            first_dirty_offset,
            segments,
            truncations,
            aborted,
        }
    }

    /// Whether a transactional batch of `producer_id` at `offset` belongs to an aborted
    /// transaction (Kafka's cleaner skips those when it builds its offset map).
    pub(super) fn is_aborted(&self, producer_id: i64, offset: i64) -> bool {
        self.aborted
            .iter()
            .any(|t| t.producer_id == producer_id && t.first_offset <= offset && offset <= t.last_offset)
    }

    /// Where the dirty section starts.
    pub fn first_dirty_offset(&self) -> i64 {
        self.first_dirty_offset
    }

    /// Bytes of cleanable segments wholly below the first dirty offset.
    pub fn clean_bytes(&self) -> u64 {
        self.segments
            .iter()
            .filter(|s| s.next_base_offset <= self.first_dirty_offset)
            .map(|s| s.snapshot.size_bytes)
            .sum()
    }

    /// Bytes of cleanable segments holding dirty offsets.
    pub fn dirty_bytes(&self) -> u64 {
        self.segments
            .iter()
            .filter(|s| s.next_base_offset > self.first_dirty_offset)
            .map(|s| s.snapshot.size_bytes)
            .sum()
    }

    /// Kafka's cleanable ratio: dirty bytes over all cleanable bytes (0 when there are none).
    pub fn dirty_ratio(&self) -> f64 {
        let dirty = self.dirty_bytes();
        let total = dirty + self.clean_bytes();
        if total == 0 {
            0.0
        } else {
            dirty as f64 / total as f64
        }
    }

    /// Whether the dirty section is large enough to clean (`min.cleanable.dirty.ratio`).
    pub fn needs_cleaning(&self) -> bool {
        self.dirty_bytes() > 0 && self.dirty_ratio() >= self.config.min_cleanable_dirty_ratio
    }

    /// Whether there is anything at all in reach of the cleaner.
    pub fn is_empty(&self) -> bool {
        self.segments.is_empty()
    }
}

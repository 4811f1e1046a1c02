//! `PartitionLog` (Kafka's `UnifiedLog`): the segments of one partition, with the log start
//! offset, the log end offset, the leader-epoch cache, rolling, retention, flushing and crash
//! recovery.

use std::collections::VecDeque;
use std::fs::{self, File};
use std::path::Path;
use std::sync::Arc;

use super::file_cache::FileCache;
use super::leader_epoch::LeaderEpochCache;
use super::log_to_clean::{CleanableSegment, LogToClean};
use super::segment::{
    segment_file_name, LogSegment, SegmentSnapshot, CLEANED_FILE_SUFFIX, INDEX_FILE_SUFFIX, LOG_FILE_SUFFIX,
    SWAP_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX,
};
use super::txn_index::{self, AbortedTxn, AbortedTxns, TXN_INDEX_FILE_SUFFIX};
use super::{LogConfig, LogError};
use open::{complete_interrupted_swaps, file_names, list_segments, resolve_interrupted_seals};
pub use read::{PlannedRead, ReadResult};

mod append;
mod open;
mod read;
use crate::fs::{create_dir_if_missing, remove_if_exists, sync_dir, write_atomically};

/// Written by [`PartitionLog::close`]; its presence at open means the tail needs no scan.
pub const CLEAN_SHUTDOWN_FILE: &str = ".clean_shutdown";

/// The log start offset once it lies inside a segment (DeleteRecords, or a follower copying its
/// leader's), which segment base offsets alone cannot tell after a restart. One decimal line,
/// replaced atomically on every move (Kafka keeps these in `log-start-offset-checkpoint`).
pub const LOG_START_OFFSET_FILE: &str = "log-start-offset";

/// What an append did, for the produce response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendInfo {
    pub base_offset: i64,
    pub last_offset: i64,
    /// The broker time stamped on the batches, -1 under CreateTime.
    pub log_append_time_ms: i64,
    pub log_start_offset: i64,
    /// Largest batch timestamp appended and the last offset of its batch.
    pub max_timestamp: i64,
    pub offset_of_max_timestamp: i64,
}

/// One partition's log: a directory `<topic>-<partition>/` of segments. Appends go to the last
/// (active) segment; older segments are sealed and only read or deleted.
///
/// Fetches plan their reads under the caller's lock ([`PartitionLog::plan_read`], no disk I/O)
/// and read the bytes after releasing it, so concurrent fetches never wait on each other or on
/// appends while the disk is read.
#[derive(Debug)]
pub struct PartitionLog {
    /// Shared with every segment, which builds its file paths from it.
    dir: Arc<Path>,
    /// The topic's settings, shared by its partitions.
    config: Arc<LogConfig>,
    /// The node's bound on open segment files, which every segment's `.log` goes through.
    file_cache: Arc<FileCache>,
    /// Sealed segments, oldest first.
    inactive: VecDeque<LogSegment>,
    active: LogSegment,
    log_start_offset: i64,
    log_end_offset: i64,
    unflushed_records: u64,
    last_flush_ms: i64,
    /// Latest broker clock reading passed in, for segments created by calls that take no clock.
    clock_ms: i64,
    /// Epoch -> first offset, kept in step with the batches' `partitionLeaderEpoch` fields.
    leader_epoch_cache: LeaderEpochCache,
    /// Bumped by every truncation: a cleaning pass whose offset map was built from records that
    /// a truncation removed meanwhile must not swap its result in.
    truncations: u64,
    /// The last appended bytes of the active segment, for fetches (`log/tail.rs`).
    tail: super::tail::TailCache,
    /// Bumped by every roll that leaves its seal to the background, so a [`PendingSeal`]
    /// taken before a later roll is told apart from that roll's.
    deferred_seals: u64,
    /// Every segment's `.txnindex` entries, in memory for `read_committed` fetches.
    aborted: AbortedTxns,
}

/// See [`PartitionLog::active_segment`].
pub struct ActiveSegment {
    pub base_offset: i64,
    pub size_bytes: u64,
    pub seal_pending: bool,
}

/// A seal a roll left to background writeback: the sealed segment's files to fsync. See
/// [`PartitionLog::pending_seal`].
#[derive(Debug)]
pub struct PendingSeal {
    files: super::segment::SealFiles,
    generation: u64,
}

impl PendingSeal {
    /// fsyncs the sealed segment's files. Takes no lock; the log may change meanwhile.
    pub fn sync(&self) -> std::io::Result<()> {
        self.files.sync()
    }
}

/// A log's name in the operator's log lines: its directory's, `<topic>-<partition>`.
fn log_name(dir: &Path) -> std::path::Display<'_> {
    Path::new(dir.file_name().unwrap_or(dir.as_os_str())).display()
}

impl PartitionLog {
    /// `<topic>-<partition>` (the directory's name), for the operator's log lines; derived
    /// rather than stored, as every hosted replica would carry a copy.
    fn name(&self) -> std::path::Display<'_> {
        log_name(&self.dir)
    }

    /// Opens or creates the log in `dir`. Without the clean-shutdown marker, the active segment
    /// is recovered: every batch is validated and the file truncated at the first torn or invalid
    /// one. A segment left under its pending name by a crash during a seal has the segment before
    /// it checked first (it goes if that one lost its tail). Other sealed segments were fsynced
    /// before their successor took its final name; their indexes are sanity-checked and rebuilt
    /// if damaged.
    ///
    /// The directory is fsynced only when this open changed its entries in a way a later
    /// decision depends on: a first segment created, or the clean-shutdown marker removed (an
    /// interrupted cleaner swap is made durable where it is completed). Reopening an unchanged
    /// log costs no directory fsync.
    pub fn open(
        dir: &Path,
        config: impl Into<Arc<LogConfig>>,
        file_cache: &Arc<FileCache>,
        now_ms: i64,
    ) -> Result<PartitionLog, LogError> {
        let config: Arc<LogConfig> = config.into();
        let created_dir = create_dir_if_missing(dir)?;
        let dir: Arc<Path> = Arc::from(dir);
        let marker = dir.join(CLEAN_SHUTDOWN_FILE);
        let clean_shutdown = marker.try_exists()?;

        complete_interrupted_swaps(&dir)?;
        let mut files = file_names(&dir)?;
        let mut dir_changed = resolve_interrupted_seals(&dir, &files, config.index_interval_bytes, file_cache, now_ms)?;
        if dir_changed {
            files = file_names(&dir)?;
        }
        let base_offsets = list_segments(&files)?;
        let mut inactive = VecDeque::with_capacity(base_offsets.len());
        // The first segment of an empty directory must be durable before any append. This is
        // also what makes a new partition's `partition.metadata` durable: its rename into a
        // directory created for it is left to this fsync (see `partition_metadata`).
        let active = match base_offsets.split_last() {
            None => {
                dir_changed = true;
                LogSegment::create(&dir, 0, file_cache, now_ms)?
            }
            Some((&last, older)) => {
                for &base_offset in older {
                    inactive.push_back(LogSegment::open(&dir, base_offset, false, file_cache, now_ms)?);
                }
                LogSegment::open(&dir, last, true, file_cache, now_ms)?
            }
        };
        let log_start_offset = inactive.front().unwrap_or(&active).base_offset();
        let mut log = PartitionLog {
            dir: dir.clone(),
            config,
            file_cache: file_cache.clone(),
            inactive,
            active,
            log_start_offset,
            log_end_offset: log_start_offset,
            unflushed_records: 0,
            last_flush_ms: now_ms,
            clock_ms: now_ms,
            leader_epoch_cache: LeaderEpochCache::empty(&dir),
            truncations: 0,
            tail: super::tail::TailCache::default(),
            deferred_seals: 0,
            aborted: AbortedTxns::default(),
        };
        log.aborted = load_aborted_txns(&files)?;
        log.check_sealed_segments()?;
        log.log_end_offset = log.load_active_segment(clean_shutdown)?;
        log.leader_epoch_cache = log.load_leader_epoch_cache(clean_shutdown)?;
        if let Some(saved) = read_log_start_offset(&dir) {
            // A recovered tail may end below a start saved before the crash: never past the end.
            let start = saved.min(log.log_end_offset);
            if start > log.log_start_offset {
                // The file already says `saved`: rewrite it only if the start had to be lowered.
                log.move_log_start_offset(start, start != saved)?;
            }
        }

        log.prune_aborted_txns_after_open()?;

        // From here on a crash is unclean: the marker must be gone from disk before any append.
        // Without a marker there is nothing to remove and nothing to make durable.
        if clean_shutdown {
            remove_if_exists(&marker)?;
            dir_changed = true;
        }
        if dir_changed {
            sync_dir(&dir)?;
        }
        if created_dir {
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                sync_dir(parent)?;
            }
        }
        Ok(log)
    }

    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset
    }

    pub fn log_end_offset(&self) -> i64 {
        self.log_end_offset
    }

    /// Kafka's `latestEpoch`: the leader epoch of the newest batch that carried one; a follower
    /// sends it as `lastFetchedEpoch` and asks the leader where it ends.
    pub fn latest_epoch(&self) -> Option<i32> {
        self.leader_epoch_cache.latest_epoch()
    }

    /// OffsetForLeaderEpoch (Kafka's `endOffsetForEpoch`): `(epoch, end offset)` where epoch is
    /// the largest this log knows that is <= `requested_epoch` and end offset is where the next
    /// epoch starts (the log end offset for the latest epoch). `requested_epoch` below every
    /// known epoch gives `(requested_epoch, start of the first one)`; an unknown answer is
    /// `(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)`. A follower truncates to the end offset.
    pub fn end_offset_for_epoch(&self, requested_epoch: i32) -> (i32, i64) {
        self.leader_epoch_cache
            .end_offset_for(requested_epoch, self.log_end_offset)
    }

    /// The epoch cache's entries, oldest first.
    #[cfg(test)]
    pub(super) fn epoch_entries(&self) -> &[super::leader_epoch::EpochEntry] {
        self.leader_epoch_cache.entries()
    }

    /// Retention: deletes the oldest sealed segments whose newest timestamp is older than
    /// `retention.ms`, then more while the log exceeds `retention.bytes`, and advances the log
    /// start offset. The active segment is never deleted, and neither is a segment holding
    /// offsets at or above `high_watermark`: records not yet on every in-sync replica stay, as
    /// in Kafka. Returns how many segments went.
    pub fn delete_retained_segments(&mut self, now_ms: i64, high_watermark: i64) -> Result<usize, LogError> {
        let mut deleted = 0;
        // `cleanup.policy=compact` alone: old records go only through compaction (Kafka's
        // `deleteOldSegments` returns 0 unless the policy includes delete).
        if !self.config.cleanup_policy_delete {
            return Ok(0);
        }
        if self.config.retention_ms >= 0 {
            while let Some(oldest) = self.inactive.front() {
                if now_ms.saturating_sub(oldest.largest_timestamp_ms()?) <= self.config.retention_ms
                    || !self.oldest_segment_below(high_watermark)
                {
                    break;
                }
                self.delete_oldest_segment()?;
                deleted += 1;
            }
        }
        if self.config.retention_bytes >= 0 {
            let mut excess = self.size_bytes() as i64 - self.config.retention_bytes;
            while let Some(oldest) = self.inactive.front() {
                let size = oldest.size_bytes() as i64;
                if excess < size || !self.oldest_segment_below(high_watermark) {
                    break;
                }
                excess -= size;
                self.delete_oldest_segment()?;
                deleted += 1;
            }
        }
        if deleted > 0 {
            tracing::info!(
                partition = %self.name(),
                deleted_segments = deleted,
                log_start_offset = self.log_start_offset,
                "deleted segments past retention"
            );
        }
        Ok(deleted)
    }

    /// What the log cleaner may work on (Kafka's `LogToClean`): snapshots of the sealed segments
    /// that lie wholly below the first uncleanable offset, which is the lowest of the active
    /// segment's base offset, the high watermark, and the base of the first segment holding a
    /// record younger than `min.compaction.lag.ms`. `first_dirty_offset` is where the previous
    /// cleaning stopped (the cleaner checkpoint); outside the log it restarts at the log start.
    pub fn log_to_clean(
        &self,
        first_dirty_offset: Option<i64>,
        last_stable_offset: i64,
        now_ms: i64,
    ) -> Result<LogToClean, LogError> {
        let first_dirty = first_dirty_offset
            .filter(|o| (self.log_start_offset..=self.log_end_offset).contains(o))
            .unwrap_or(self.log_start_offset);
        // Below the last stable offset only (Kafka's firstUncleanableOffset): a transaction
        // still open must not have its records stand for their keys before it is decided.
        let mut uncleanable = self.active.base_offset().min(last_stable_offset);
        if self.config.min_compaction_lag_ms > 0 {
            for segment in &self.inactive {
                if now_ms.saturating_sub(segment.largest_timestamp_ms()?) < self.config.min_compaction_lag_ms {
                    uncleanable = uncleanable.min(segment.base_offset());
                    break;
                }
            }
        }
        let mut segments = Vec::new();
        for (i, segment) in self.inactive.iter().enumerate() {
            let next_base = self.inactive.get(i + 1).unwrap_or(&self.active).base_offset();
            if next_base > uncleanable {
                break;
            }
            segments.push(CleanableSegment {
                snapshot: segment.snapshot()?,
                next_base_offset: next_base,
            });
        }
        let cleanable_end = segments.last().map_or(first_dirty, |s| s.next_base_offset);
        let aborted = self.collect_aborted_txns(self.log_start_offset, cleanable_end);
        Ok(LogToClean::new(
            self.name().to_string(),
            self.dir.clone(),
            self.config.clone(),
            self.file_cache.clone(),
            first_dirty,
            segments,
            self.truncations,
            aborted,
        ))
    }

    /// Swaps a cleaned segment (written as `<base>.log.cleaned` with its indexes, fsynced) in for
    /// the sealed segments it replaces, as Kafka's `replaceSegments` does: the cleaned files are
    /// renamed to `.swap`, the old segments deleted, then the `.swap` files renamed to their
    /// final names, each step made durable, so that [`PartitionLog::open`] can finish or discard
    /// an interrupted swap. Returns false, changing nothing, when the segments are no longer
    /// all there as they were read (retention or truncation got to them first) or the log was
    /// truncated at all since `truncations_seen` was read.
    pub(super) fn replace_segments(
        &mut self,
        replaced: &[&SegmentSnapshot],
        truncations_seen: u64,
        now_ms: i64,
    ) -> Result<bool, LogError> {
        let Some(first) = replaced.first() else {
            return Ok(false);
        };
        if truncations_seen != self.truncations {
            return Ok(false); // the offset map may hold records that are gone
        }
        let Some(start) = self.inactive.iter().position(|s| s.base_offset() == first.base_offset) else {
            return Ok(false);
        };
        for (i, old) in replaced.iter().enumerate() {
            match self.inactive.get(start + i) {
                Some(s)
                    if s.base_offset() == old.base_offset
                        && s.size_bytes() == old.size_bytes
                        && s.file_id()? == old.file_id => {}
                _ => return Ok(false),
            }
        }
        // A seal in flight is done first: the open that checks a sealed segment after a crash
        // compares it with the size it was sealed at, which a cleaned copy does not keep.
        self.finish_pending_seal_now()?;
        let base = first.base_offset;
        self.tail.reset(); // it holds only the active segment, but a swap is rare: stay obviously safe
        let suffixes = [INDEX_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX, LOG_FILE_SUFFIX];
        for suffix in suffixes {
            let name = segment_file_name(base, suffix);
            fs::rename(
                self.dir.join(format!("{name}{CLEANED_FILE_SUFFIX}")),
                self.dir.join(format!("{name}{SWAP_FILE_SUFFIX}")),
            )?;
        }
        sync_dir(&self.dir)?;
        for old in self.inactive.drain(start..start + replaced.len()) {
            old.delete()?;
        }
        // The log file last: an open that finds `<base>.log.swap` completes the swap.
        for suffix in suffixes {
            let name = segment_file_name(base, suffix);
            fs::rename(self.dir.join(format!("{name}{SWAP_FILE_SUFFIX}")), self.dir.join(&name))?;
        }
        sync_dir(&self.dir)?;
        let cleaned = LogSegment::open(&self.dir, base, false, &self.file_cache, now_ms)?;
        self.inactive.insert(start, cleaned);
        // The replaced segments' `.txnindex` files went with them: one file for the cleaned
        // segment now holds their entries (control batches survive cleaning).
        self.rewrite_txn_index(base)?;
        Ok(true)
    }

    /// Indexes an aborted transaction in the segment holding its marker (its `.txnindex` file
    /// and memory), unless its marker is indexed already: the partition's producer-state
    /// rebuild after an unclean stop meets markers the files already hold.
    pub fn append_aborted_txn(&mut self, txn: AbortedTxn) -> Result<(), LogError> {
        if txn.last_offset < self.log_start_offset || txn.last_offset >= self.log_end_offset {
            return Ok(()); // not (or no longer) in this log
        }
        if self.aborted.insert(txn) {
            let base = self.segment_base_of(txn.last_offset);
            txn_index::append(&self.txn_index_path(base), &txn)?;
        }
        Ok(())
    }

    /// The aborted transactions a `read_committed` fetch from `fetch_offset` bounded by
    /// `upper_bound_offset` may need, in first-offset order (see `AbortedTxns::collect`).
    /// Memory only: called under the partition's lock while a fetch is planned.
    pub fn collect_aborted_txns(&self, fetch_offset: i64, upper_bound_offset: i64) -> Vec<AbortedTxn> {
        self.aborted.collect(fetch_offset, upper_bound_offset)
    }

    fn txn_index_path(&self, base_offset: i64) -> std::path::PathBuf {
        self.dir.join(segment_file_name(base_offset, TXN_INDEX_FILE_SUFFIX))
    }

    /// Base offset of the segment holding `offset`.
    pub(in crate::log) fn segment_base_of(&self, offset: i64) -> i64 {
        self.segments_from(self.floor_segment_index(offset))
            .next()
            .map_or(self.active.base_offset(), LogSegment::base_offset)
    }

    /// Rewrites the `.txnindex` of the segment at `base_offset` from memory (after a truncation
    /// or a cleaner swap changed which entries it holds).
    fn rewrite_txn_index(&self, base_offset: i64) -> Result<(), LogError> {
        let next_base = self
            .segments()
            .map(LogSegment::base_offset)
            .find(|b| *b > base_offset)
            .unwrap_or(i64::MAX);
        txn_index::rewrite(
            &self.txn_index_path(base_offset),
            self.aborted.in_range(base_offset, next_base),
        )?;
        Ok(())
    }

    /// After open: entries whose marker lies below the log start or past a recovered tail go.
    fn prune_aborted_txns_after_open(&mut self) -> Result<(), LogError> {
        self.aborted.drop_below(self.log_start_offset);
        if self.aborted.truncate_from(self.log_end_offset) {
            self.rewrite_txn_index(self.active.base_offset())?;
        }
        Ok(())
    }

    /// How many truncations this log has seen since it was opened (see `truncations`).
    pub(super) fn truncations(&self) -> u64 {
        self.truncations
    }

    /// Whether every offset of the oldest sealed segment is below `offset`.
    fn oldest_segment_below(&self, offset: i64) -> bool {
        let next_base = self.inactive.get(1).unwrap_or(&self.active).base_offset();
        next_base <= offset
    }

    /// Rolls the active segment once it is older than `segment.ms`, even without appends, so
    /// retention can delete idle data.
    pub fn maybe_roll(&mut self, now_ms: i64) -> Result<(), LogError> {
        self.clock_ms = now_ms;
        let active = &self.active;
        if !active.is_empty() && active.time_waited_for_roll_ms(now_ms, now_ms) > self.config.segment_ms {
            self.roll(self.log_end_offset, now_ms)?;
        }
        Ok(())
    }

    /// `flush.ms`: fsyncs when the last fsync is older than the interval. For the periodic task.
    pub fn maybe_flush(&mut self, now_ms: i64) -> Result<(), LogError> {
        if now_ms.saturating_sub(self.last_flush_ms) >= self.config.flush_interval_ms {
            self.last_flush_ms = now_ms;
            self.flush()?;
        }
        Ok(())
    }

    /// fsyncs the active segment and writes and fsyncs its index entries, after finishing a seal
    /// still in flight (every other sealed segment is durable already).
    pub fn flush(&mut self) -> Result<(), LogError> {
        self.finish_pending_seal_now()?;
        self.active.flush()?;
        self.unflushed_records = 0;
        Ok(())
    }

    /// The first half of the seal the last roll left to the background, if it is still to do:
    /// writes the sealed segment's index entries to their files and returns what to fsync. The
    /// caller fsyncs without the lock, then calls [`PartitionLog::complete_seal`].
    pub fn pending_seal(&mut self) -> Result<Option<PendingSeal>, LogError> {
        if self.active.unsynced_predecessor_bytes().is_none() {
            return Ok(None);
        }
        // Retention and DeleteRecords finish the seal before deleting its segment, so it is
        // still the newest sealed one; should it be gone, nothing before the active is left
        // to wait for.
        let Some(sealed) = self.inactive.back_mut() else {
            self.active.mark_predecessor_synced()?;
            return Ok(None);
        };
        Ok(Some(PendingSeal {
            files: sealed.unsynced_files()?,
            generation: self.deferred_seals,
        }))
    }

    /// The second half: the sealed segment is durable, so its successor's `.log` takes its final
    /// name (the caller fsyncs the directory). Returns false, changing nothing, when the seal was
    /// finished another way meanwhile or a later roll superseded it.
    pub fn complete_seal(&mut self, seal: &PendingSeal) -> Result<bool, LogError> {
        if seal.generation != self.deferred_seals || self.active.unsynced_predecessor_bytes().is_none() {
            return Ok(false);
        }
        if let Some(sealed) = self.inactive.back_mut() {
            sealed.finish_seal();
        }
        self.active.mark_predecessor_synced()?;
        Ok(true)
    }

    /// Whether a roll's seal still waits for background writeback.
    pub fn has_pending_seal(&self) -> bool {
        self.active.unsynced_predecessor_bytes().is_some()
    }

    /// Does the seal in flight, if any, here and now.
    fn finish_pending_seal_now(&mut self) -> Result<(), LogError> {
        if let Some(seal) = self.pending_seal()? {
            seal.sync()?;
            self.complete_seal(&seal)?;
            sync_dir(&self.dir)?;
        }
        Ok(())
    }

    /// Writes the active segment's index entries not yet in their files, without an fsync: for
    /// background writeback, which hands the log's new bytes to the disk at the same time.
    pub fn write_index_entries(&mut self) -> Result<(), LogError> {
        self.active.write_index_entries()
    }

    /// Drops the batch holding `offset` and everything after it (replica truncation). If
    /// `offset` falls inside a batch the whole batch goes, so the log end offset becomes that
    /// batch's base offset. At or below the log start offset, the log restarts empty at `offset`.
    /// Epochs starting at or after the new log end offset leave the epoch cache.
    pub fn truncate_to(&mut self, offset: i64) -> Result<(), LogError> {
        if offset >= self.log_end_offset {
            return Ok(());
        }
        self.tail.reset();
        if offset <= self.log_start_offset {
            return self.truncate_fully_and_start_at(offset);
        }
        self.truncations += 1;
        while self.active.base_offset() >= offset {
            let Some(previous) = self.inactive.pop_back() else {
                break;
            };
            std::mem::replace(&mut self.active, previous).delete()?;
            self.active.on_become_active()?;
        }
        let (truncated_bytes, next_offset) = self.active.truncate_to(offset)?;
        tracing::info!(partition = %self.name(), offset, truncated_bytes, "truncated log");
        self.log_end_offset = next_offset;
        debug_assert!(self.log_end_offset <= offset && self.log_end_offset >= self.log_start_offset);
        if self.aborted.truncate_from(self.log_end_offset) {
            self.rewrite_txn_index(self.active.base_offset())?;
        }
        // The new end, not `offset`: a batch straddling `offset` went whole, epoch and all.
        self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
    }

    /// New settings take effect from the next append, roll or retention pass.
    pub fn update_config(&mut self, config: impl Into<Arc<LogConfig>>) {
        self.config = config.into();
    }

    pub fn config(&self) -> &LogConfig {
        &self.config
    }

    /// Clean shutdown: seals the active segment's time index, fsyncs, and writes the marker that
    /// lets the next open skip recovery.
    pub fn close(mut self) -> Result<(), LogError> {
        self.active.append_final_time_index_entry()?;
        self.flush()?; // finishes a seal in flight too: no pending name survives a clean stop
                       // The next open trusts the checkpoint without rescanning the active segment.
        self.leader_epoch_cache.sync()?;
        let marker = self.dir.join(CLEAN_SHUTDOWN_FILE);
        fs::File::create(&marker)?.sync_all()?;
        sync_dir(&self.dir)?;
        Ok(())
    }

    /// Removes the partition directory (topic deletion).
    pub fn delete(self) -> Result<(), LogError> {
        let dir = self.dir.clone();
        drop(self);
        fs::remove_dir_all(&dir)?;
        Ok(())
    }

    /// Bytes stored in all segments.
    pub fn size_bytes(&self) -> u64 {
        self.segments().map(LogSegment::size_bytes).sum()
    }

    /// What background writeback works on: the active segment's base offset (which names it),
    /// its size, and whether the seal of the segment before it is still to do.
    pub fn active_segment(&self) -> ActiveSegment {
        ActiveSegment {
            base_offset: self.active.base_offset(),
            size_bytes: self.active.size_bytes(),
            seal_pending: self.has_pending_seal(),
        }
    }

    /// The active segment's file if that segment is still the one based at `base_offset`
    /// (reopened if the file cache had closed it): writeback, outside the log's lock.
    pub fn active_segment_file(&self, base_offset: i64) -> Option<Result<Arc<File>, LogError>> {
        (self.active.base_offset() == base_offset).then(|| self.active.log_file())
    }

    /// Base offsets of the segments, oldest first (producer snapshots are named after them).
    pub fn segment_base_offsets(&self) -> impl Iterator<Item = i64> + '_ {
        self.segments().map(LogSegment::base_offset)
    }

    pub fn segment_count(&self) -> usize {
        self.inactive.len() + 1
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Index of the last segment whose base offset is at most `offset` (0 if none is).
    fn floor_segment_index(&self, offset: i64) -> usize {
        let sealed_at_or_below = self.inactive.partition_point(|s| s.base_offset() <= offset);
        if sealed_at_or_below == self.inactive.len() && self.active.base_offset() <= offset {
            return self.inactive.len();
        }
        sealed_at_or_below.saturating_sub(1)
    }

    fn segments(&self) -> impl Iterator<Item = &LogSegment> {
        self.segments_from(0)
    }

    fn segments_from(&self, index: usize) -> impl Iterator<Item = &LogSegment> {
        let sealed = self.inactive.range(index.min(self.inactive.len())..);
        sealed.chain(std::iter::once(&self.active))
    }

    /// Raises the log start offset to `offset` (never lowers it), as Kafka's
    /// `maybeIncrementLogStartOffset` does for DeleteRecords and for a follower copying its
    /// leader's: offsets below it are no longer readable, sealed segments wholly below it are
    /// deleted, and the epoch cache drops what lies below it. The new start is durable before
    /// any segment goes, so a crash in between leaves a start that reopening completes.
    /// `offset` may not pass the log end offset. Returns whether the start moved.
    pub fn advance_log_start_offset(&mut self, offset: i64) -> Result<bool, LogError> {
        self.move_log_start_offset(offset, true)
    }

    /// [`PartitionLog::advance_log_start_offset`]; `persist` false when the file already holds
    /// `offset` (reopening).
    fn move_log_start_offset(&mut self, offset: i64, persist: bool) -> Result<bool, LogError> {
        if offset <= self.log_start_offset {
            return Ok(false);
        }
        if offset > self.log_end_offset {
            return Err(self.out_of_range(offset));
        }
        if persist {
            write_atomically(&self.dir.join(LOG_START_OFFSET_FILE), format!("{offset}\n").as_bytes())?;
        }
        while !self.inactive.is_empty() && self.oldest_segment_below(offset) {
            self.delete_oldest_segment()?;
        }
        self.log_start_offset = offset;
        self.aborted.drop_below(offset);
        self.tail.trim_below(offset);
        self.leader_epoch_cache.truncate_from_start(offset)?;
        tracing::info!(partition = %self.name(), log_start_offset = offset, "log start offset moved");
        Ok(true)
    }

    fn delete_oldest_segment(&mut self) -> Result<(), LogError> {
        if self.inactive.len() == 1 {
            self.finish_pending_seal_now()?; // `pending_seal` expects its segment to be there
        }
        if let Some(oldest) = self.inactive.pop_front() {
            let next_base = self.inactive.front().unwrap_or(&self.active).base_offset();
            self.log_start_offset = self.log_start_offset.max(next_base);
            oldest.delete()?;
            self.aborted.drop_below(self.log_start_offset);
            self.leader_epoch_cache.truncate_from_start(self.log_start_offset)?;
        }
        Ok(())
    }

    /// Empties the log and restarts it at `offset`: a follower whose leader has deleted (by
    /// retention) everything this replica holds starts over at the leader's log start.
    pub fn truncate_fully_and_start_at(&mut self, offset: i64) -> Result<(), LogError> {
        self.tail.reset();
        self.truncations += 1;
        let new_segment = LogSegment::create(&self.dir, offset, &self.file_cache, self.clock_ms)?;
        let old_active = std::mem::replace(&mut self.active, new_segment);
        if old_active.base_offset() != offset {
            old_active.delete()?;
        }
        for segment in self.inactive.drain(..) {
            if segment.base_offset() != offset {
                segment.delete()?;
            }
        }
        self.aborted = AbortedTxns::default();
        remove_if_exists(&self.txn_index_path(offset))?;
        sync_dir(&self.dir)?;
        // The segment base says where the log starts now; a saved start would contradict it.
        remove_if_exists(&self.dir.join(LOG_START_OFFSET_FILE))?;
        self.log_start_offset = offset;
        self.log_end_offset = offset;
        self.leader_epoch_cache.clear()?;
        tracing::info!(partition = %self.name(), offset, "truncated log fully");
        Ok(())
    }

    fn out_of_range(&self, offset: i64) -> LogError {
        LogError::OffsetOutOfRange {
            offset,
            log_start: self.log_start_offset,
            log_end: self.log_end_offset,
        }
    }
}

/// Every `.txnindex` file in the directory listing, into memory. A file that cannot be read
/// fails the open like any other unreadable segment file; invalid entries are skipped (see
/// `txn_index::load`).
fn load_aborted_txns(files: &[(String, std::path::PathBuf)]) -> Result<AbortedTxns, LogError> {
    let mut entries = Vec::new();
    for (name, path) in files {
        if open::parse_segment_file_name(name, TXN_INDEX_FILE_SUFFIX).is_some() {
            entries.extend(txn_index::load(path)?);
        }
    }
    Ok(AbortedTxns::from_entries(entries))
}

/// The saved log start offset, if any. A file that does not parse is ignored with a warning:
/// the worst outcome is records below a DeleteRecords offset becoming readable again.
fn read_log_start_offset(dir: &Path) -> Option<i64> {
    let path = dir.join(LOG_START_OFFSET_FILE);
    let text = fs::read_to_string(&path).ok()?;
    match text.trim().parse::<i64>() {
        Ok(offset) if offset >= 0 => Some(offset),
        _ => {
            tracing::warn!(path = %path.display(), "ignoring a log start offset file that does not hold an offset");
            None
        }
    }
}

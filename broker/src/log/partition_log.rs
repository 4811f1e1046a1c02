//! `PartitionLog` (Kafka's `UnifiedLog`): the segments of one partition, with the log start
//! offset, the log end offset, the leader-epoch cache, rolling, retention, flushing and crash
//! recovery.

use std::collections::VecDeque;
use std::fs;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use sluice_protocol::batch::{self, BatchError, BatchHeader, BatchIter, BatchesInfo, NO_TIMESTAMP};

use super::leader_epoch::{EpochScan, LeaderEpochCache};
use super::log_to_clean::{CleanableSegment, LogToClean};
use super::segment::{
    segment_file_name, LogSegment, SegmentReader, SegmentSnapshot, CLEANED_FILE_SUFFIX, INDEX_FILE_SUFFIX,
    LOG_FILE_SUFFIX, SWAP_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX,
};
use super::{LogConfig, LogError};
use crate::fs::{remove_if_exists, sync_dir};

/// Written by [`PartitionLog::close`]; its presence at open means the tail needs no scan.
pub const CLEAN_SHUTDOWN_FILE: &str = ".clean_shutdown";

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

/// Stored batches for a fetch, in one buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadResult {
    /// Whole batches, exactly as stored; empty when nothing qualified.
    pub records: Bytes,
    pub log_start_offset: i64,
    pub log_end_offset: i64,
}

/// A fetch's read planned under the log's lock (see [`PartitionLog::plan_read`]) and done after
/// it is released by [`PlannedRead::read`]: the segments from the one that may hold the offset,
/// each with its own reference to its file and its size at planning time. The lock is held only
/// while this is built, which touches no disk; appends made since are not read, and a segment
/// deleted since (retention, compaction) is still read through its open file.
#[derive(Debug)]
pub struct PlannedRead {
    offset: i64,
    max_offset: i64,
    /// Oldest first; empty when the offset is the log end.
    segments: Vec<SegmentReader>,
    log_start_offset: i64,
    log_end_offset: i64,
}

impl PlannedRead {
    /// Reads whole stored batches from the one holding the planned offset, across segments, up
    /// to `max_bytes` and never a batch at or beyond the planned `max_offset`; the first batch
    /// whole even when larger than `max_bytes` if `min_one_message` (Kafka's KIP-74 rule). The
    /// buffer is sized by the bytes present, never by `max_bytes` alone. Positional reads only:
    /// call it off the async workers.
    pub fn read(&self, max_bytes: usize, min_one_message: bool) -> Result<ReadResult, LogError> {
        let mut records = Vec::new();
        self.read_into(max_bytes as u64, min_one_message, &mut records)?;
        if records.capacity() > 2 * records.len() {
            // Most of what was read lay beyond `max_offset`: keep only what is sent.
            records.shrink_to_fit();
        }
        Ok(ReadResult {
            records: Bytes::from(records),
            log_start_offset: self.log_start_offset,
            log_end_offset: self.log_end_offset,
        })
    }

    fn read_into(&self, max_bytes: u64, min_one_message: bool, out: &mut Vec<u8>) -> Result<(), LogError> {
        let Some((segment_index, first, position)) = self.find_batch()? else {
            return Ok(());
        };
        let first_len = first.total_len() as u64;
        if first.base_offset >= self.max_offset || (first_len > max_bytes && !min_one_message) {
            return Ok(());
        }
        let budget = max_bytes.max(first_len);
        let segments = self.segments.get(segment_index..).unwrap_or_default();
        let present: u64 = segments.iter().map(SegmentReader::size_bytes).sum();
        out.reserve_exact(budget.min(present.saturating_sub(position)) as usize);
        let mut position = position;
        for segment in segments {
            let want = (budget - out.len() as u64).min(segment.size_bytes().saturating_sub(position));
            let start = out.len();
            segment.read_into(position, want, out)?;
            let complete = complete_batches_below(&out[start..], self.max_offset);
            out.truncate(start + complete);
            let consumed_segment = complete as u64 == want && position + want == segment.size_bytes();
            if !consumed_segment || out.len() as u64 >= budget {
                break;
            }
            position = 0;
        }
        Ok(())
    }

    /// The planned segment (by index) and position of the batch holding the offset.
    fn find_batch(&self) -> Result<Option<(usize, BatchHeader, u64)>, LogError> {
        for (i, segment) in self.segments.iter().enumerate() {
            if let Some((header, position)) = segment.translate_offset(self.offset)? {
                return Ok(Some((i, header, position)));
            }
        }
        Ok(None)
    }
}

/// One partition's log: a directory `<topic>-<partition>/` of segments. Appends go to the last
/// (active) segment; older segments are sealed and only read or deleted.
///
/// Fetches plan their reads under the caller's lock ([`PartitionLog::plan_read`], no disk I/O)
/// and read the bytes after releasing it, so concurrent fetches never wait on each other or on
/// appends while the disk is read.
#[derive(Debug)]
pub struct PartitionLog {
    dir: PathBuf,
    /// `<topic>-<partition>`, for the operator's log lines.
    name: String,
    config: LogConfig,
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
}

impl PartitionLog {
    /// Opens or creates the log in `dir`. Without the clean-shutdown marker, the active segment
    /// is recovered: every batch is validated and the file truncated at the first torn or invalid
    /// one. Sealed segments were fsynced when rolled; their indexes are sanity-checked and
    /// rebuilt if damaged.
    pub fn open(dir: &Path, config: LogConfig, now_ms: i64) -> Result<PartitionLog, LogError> {
        fs::create_dir_all(dir)?;
        let name = dir
            .file_name()
            .map_or_else(|| dir.display().to_string(), |n| n.to_string_lossy().into_owned());
        let marker = dir.join(CLEAN_SHUTDOWN_FILE);
        let clean_shutdown = marker.exists();

        complete_interrupted_swaps(dir)?;
        let base_offsets = list_segments(dir)?;
        let mut inactive = VecDeque::with_capacity(base_offsets.len());
        let active = match base_offsets.split_last() {
            None => LogSegment::create(dir, 0, now_ms)?,
            Some((&last, older)) => {
                for &base_offset in older {
                    inactive.push_back(LogSegment::open(dir, base_offset, false, now_ms)?);
                }
                LogSegment::open(dir, last, true, now_ms)?
            }
        };
        let log_start_offset = inactive.front().unwrap_or(&active).base_offset();
        let mut log = PartitionLog {
            dir: dir.to_path_buf(),
            name,
            config,
            inactive,
            active,
            log_start_offset,
            log_end_offset: log_start_offset,
            unflushed_records: 0,
            last_flush_ms: now_ms,
            clock_ms: now_ms,
            leader_epoch_cache: LeaderEpochCache::empty(dir),
            truncations: 0,
        };
        log.check_sealed_segments()?;
        log.log_end_offset = log.load_active_segment(clean_shutdown)?;
        log.leader_epoch_cache = log.load_leader_epoch_cache()?;

        // From here on a crash is unclean: the marker must be gone from disk before any append.
        remove_if_exists(&marker)?;
        sync_dir(dir)?;
        Ok(log)
    }

    /// Appends a produce request's batches (validated by `validate_batches`), keeping the leader
    /// epoch the producer wrote (recorded in the epoch cache like a follower's, if >= 0). See
    /// [`PartitionLog::append_as_leader`].
    pub fn append(&mut self, records: &mut [u8], now_ms: i64) -> Result<AppendInfo, LogError> {
        self.append_stamped(records, None, now_ms)
    }

    /// Kafka's `appendAsLeader`: assigns offsets from the log end offset by patching each batch's
    /// base offset, stamps `leader_epoch`, applies LogAppendTime if configured, rolls if needed,
    /// and writes the bytes as received. Each batch must fit `max.message.bytes`. A new epoch is
    /// recorded (and checkpointed) at the first offset it writes; an epoch below the log's latest
    /// is a bug in the caller's leadership tracking: it asserts in debug builds and is refused
    /// with `LeaderEpochRegression` in release builds.
    pub fn append_as_leader(
        &mut self,
        records: &mut [u8],
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<AppendInfo, LogError> {
        self.append_stamped(records, Some(leader_epoch), now_ms)
    }

    /// Kafka's `appendAsFollower`: batches that already carry offsets, from the leader. Validates
    /// them fully (they crossed the network), and requires them to continue the log: the first
    /// offset must not be below the log end offset (gaps are legal, as after compaction) and
    /// offsets must increase. Each batch keeps the leader's `partitionLeaderEpoch`, and epochs it
    /// has not seen are recorded; an epoch going backwards means this replica diverged from the
    /// leader, and the append is refused with `LeaderEpochRegression` before anything is written.
    pub fn append_as_follower(&mut self, records: &[u8], now_ms: i64) -> Result<AppendInfo, LogError> {
        self.clock_ms = now_ms;
        let info = batch::validate_stored_batches(records)?;
        let append = self.check_follower_offsets(records)?;
        let new_epochs = self.leader_epoch_cache.new_entries(stored_epochs(records))?;
        let records_len = records.len() as u64;
        self.maybe_roll_for(
            records_len,
            append.base_offset,
            append.last_offset,
            append.max_timestamp,
            now_ms,
        )?;
        self.leader_epoch_cache.assign(&new_epochs)?;
        self.active.append(records, self.config.index_interval_bytes)?;
        self.log_end_offset = append.last_offset + 1;
        self.maybe_flush_after(info.record_count, now_ms)?;
        Ok(append)
    }

    /// Reads stored batches from the one holding `offset` (a fetch offset inside a batch gets
    /// the whole batch), continuing across segments, up to `max_bytes` of whole batches and
    /// never a batch whose base offset is `max_offset` (the high watermark) or beyond. The first
    /// batch is returned whole even when larger than `max_bytes` if `min_one_message`, as Kafka
    /// does so that a consumer can always make progress. [`PartitionLog::plan_read`] then
    /// [`PlannedRead::read`], for callers that already own the log.
    pub fn read(
        &self,
        offset: i64,
        max_bytes: usize,
        max_offset: i64,
        min_one_message: bool,
    ) -> Result<ReadResult, LogError> {
        self.plan_read(offset, max_offset, max_bytes)?
            .read(max_bytes, min_one_message)
    }

    /// Plans a read from `offset` below `max_offset` of about `max_bytes` (see [`PlannedRead`]):
    /// the segment that may hold `offset` and as many after it as `max_bytes` could reach. No
    /// disk I/O, so it is cheap to do under the partition's lock. `OffsetOutOfRange` outside the
    /// log.
    pub fn plan_read(&self, offset: i64, max_offset: i64, max_bytes: usize) -> Result<PlannedRead, LogError> {
        if offset < self.log_start_offset || offset > self.log_end_offset {
            return Err(self.out_of_range(offset));
        }
        let mut segments = Vec::new();
        if offset < self.log_end_offset {
            let mut beyond_first = 0u64;
            for segment in self.segments_from(self.floor_segment_index(offset)) {
                // The first segment may end before `offset` (compaction gaps); the second one
                // is always taken so the first batch at or after it can be found.
                if segments.len() >= 2 && beyond_first >= max_bytes as u64 {
                    break;
                }
                if !segments.is_empty() {
                    beyond_first += segment.size_bytes();
                }
                segments.push(segment.reader(offset));
            }
        }
        Ok(PlannedRead {
            offset,
            max_offset,
            segments,
            log_start_offset: self.log_start_offset,
            log_end_offset: self.log_end_offset,
        })
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

    /// ListOffsets by timestamp: the first batch whose max timestamp is at least `timestamp`, as
    /// (its base offset, its max timestamp). Records are not decoded, so the offset is that of
    /// the batch's first record: a consumer seeking there may see a few older records, never
    /// miss a newer one.
    pub fn offset_for_timestamp(&self, timestamp: i64) -> Result<Option<(i64, i64)>, LogError> {
        for segment in self.segments() {
            if let Some(found) = segment.find_offset_by_timestamp(timestamp)? {
                return Ok(Some(found));
            }
        }
        Ok(None)
    }

    /// ListOffsets MAX_TIMESTAMP (-3): (offset, timestamp) of the largest timestamp in the log,
    /// the offset being the last offset of its batch (Kafka's shallow answer); the earliest such
    /// batch on ties.
    pub fn max_timestamp_offset(&self) -> Option<(i64, i64)> {
        let mut best: Option<(i64, i64)> = None;
        for max in self.segments().filter_map(LogSegment::max_timestamp) {
            if best.is_none_or(|(_, timestamp)| max.timestamp > timestamp) {
                best = Some((max.offset, max.timestamp));
            }
        }
        best
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
                partition = %self.name,
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
        high_watermark: i64,
        now_ms: i64,
    ) -> Result<LogToClean, LogError> {
        let first_dirty = first_dirty_offset
            .filter(|o| (self.log_start_offset..=self.log_end_offset).contains(o))
            .unwrap_or(self.log_start_offset);
        let mut uncleanable = self.active.base_offset().min(high_watermark);
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
        Ok(LogToClean::new(
            self.name.clone(),
            self.dir.clone(),
            self.config.clone(),
            first_dirty,
            segments,
            self.truncations,
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
        let base = first.base_offset;
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
        let cleaned = LogSegment::open(&self.dir, base, false, now_ms)?;
        self.inactive.insert(start, cleaned);
        Ok(true)
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

    /// fsyncs the active segment and its indexes (sealed segments were fsynced when rolled).
    pub fn flush(&mut self) -> Result<(), LogError> {
        self.active.flush()?;
        self.unflushed_records = 0;
        Ok(())
    }

    /// Drops the batch holding `offset` and everything after it (replica truncation). If
    /// `offset` falls inside a batch the whole batch goes, so the log end offset becomes that
    /// batch's base offset. At or below the log start offset, the log restarts empty at `offset`.
    /// Epochs starting at or after the new log end offset leave the epoch cache.
    pub fn truncate_to(&mut self, offset: i64) -> Result<(), LogError> {
        if offset >= self.log_end_offset {
            return Ok(());
        }
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
        tracing::info!(partition = %self.name, offset, truncated_bytes, "truncated log");
        self.log_end_offset = next_offset;
        debug_assert!(self.log_end_offset <= offset && self.log_end_offset >= self.log_start_offset);
        // The new end, not `offset`: a batch straddling `offset` went whole, epoch and all.
        self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
    }

    /// New settings take effect from the next append, roll or retention pass.
    pub fn update_config(&mut self, config: LogConfig) {
        self.config = config;
    }

    pub fn config(&self) -> &LogConfig {
        &self.config
    }

    /// Clean shutdown: seals the active segment's time index, fsyncs, and writes the marker that
    /// lets the next open skip recovery.
    pub fn close(mut self) -> Result<(), LogError> {
        self.active.append_final_time_index_entry()?;
        self.flush()?;
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

    pub fn segment_count(&self) -> usize {
        self.inactive.len() + 1
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn append_stamped(
        &mut self,
        records: &mut [u8],
        leader_epoch: Option<i32>,
        now_ms: i64,
    ) -> Result<AppendInfo, LogError> {
        self.clock_ms = now_ms;
        let info = self.check_leader_append(records)?;
        let first_offset = self.log_end_offset;
        let last_offset = first_offset + info.record_count - 1;
        debug_assert!(last_offset >= first_offset, "every v2 batch spans at least one offset");
        let log_append_time_ms = if self.config.message_timestamp_log_append {
            now_ms
        } else {
            NO_TIMESTAMP
        };
        let max_timestamp = if log_append_time_ms == NO_TIMESTAMP {
            info.max_timestamp
        } else {
            now_ms
        };
        let next_offset = stamp_batches(records, first_offset, leader_epoch, log_append_time_ms)?;
        // Invariant: an append covers exactly the offsets after the log end, with no gap.
        if next_offset != last_offset + 1 {
            return Err(LogError::Corrupt(format!(
                "an append stamped offsets {first_offset}..{next_offset} but was validated as {first_offset}..={last_offset}; nothing was written"
            )));
        }
        let new_epochs = match leader_epoch {
            Some(epoch) => self.leader_epoch_cache.new_entries([(epoch, first_offset)]),
            None => self.leader_epoch_cache.new_entries(stored_epochs(records)),
        };
        debug_assert!(
            leader_epoch.is_none() || new_epochs.is_ok(),
            "leader append with an epoch below the log's latest: {new_epochs:?}"
        );
        let new_epochs = new_epochs?;
        self.maybe_roll_for(records.len() as u64, first_offset, last_offset, max_timestamp, now_ms)?;
        self.leader_epoch_cache.assign(&new_epochs)?;
        self.active.append(records, self.config.index_interval_bytes)?;
        self.log_end_offset = last_offset + 1;
        self.maybe_flush_after(info.record_count, now_ms)?;
        // Under LogAppendTime every batch has the max timestamp: the first one holds it.
        let offset_of_max_timestamp = match log_append_time_ms {
            NO_TIMESTAMP => first_offset + info.offset_delta_of_max_timestamp,
            _ => BatchHeader::parse(records)?.last_offset(),
        };
        Ok(AppendInfo {
            base_offset: first_offset,
            last_offset,
            log_append_time_ms,
            log_start_offset: self.log_start_offset,
            max_timestamp,
            offset_of_max_timestamp,
        })
    }

    /// The header checks an append needs without a second CRC pass: whole batches, sane fields,
    /// each batch within `max.message.bytes` and `segment.bytes` (Kafka checks per batch).
    fn check_leader_append(&self, records: &[u8]) -> Result<BatchesInfo, LogError> {
        let info = batch::inspect_batches(records)?;
        let batch_bytes = info.max_batch_bytes;
        if batch_bytes > self.config.max_message_bytes as usize {
            return Err(LogError::MessageTooLarge {
                batch_bytes,
                max: self.config.max_message_bytes,
            });
        }
        let segment_bytes = self.config.effective_segment_bytes();
        if batch_bytes as u64 > segment_bytes {
            return Err(LogError::RecordBatchTooLarge {
                batch_bytes,
                segment_bytes,
            });
        }
        Ok(info)
    }

    /// Checks that a follower append continues the log with increasing offsets, and describes it.
    fn check_follower_offsets(&self, records: &[u8]) -> Result<AppendInfo, LogError> {
        let mut batches = BatchIter::new(records);
        let Some((first, _)) = batches.next() else {
            return Err(BatchError::NoBatches.into());
        };
        if first.base_offset < self.log_end_offset {
            return Err(LogError::UnexpectedAppendOffset {
                first_offset: first.base_offset,
                log_end: self.log_end_offset,
            });
        }
        // Keeps `last_offset + 1` (the next log end offset) from overflowing on hostile input.
        let too_large = |header: &BatchHeader| header.last_offset() == i64::MAX;
        if too_large(&first) {
            return Err(LogError::Corrupt(format!(
                "follower append reaches offset {}",
                i64::MAX
            )));
        }
        let mut append = AppendInfo {
            base_offset: first.base_offset,
            last_offset: first.last_offset(),
            log_append_time_ms: NO_TIMESTAMP,
            log_start_offset: self.log_start_offset,
            max_timestamp: first.max_timestamp,
            offset_of_max_timestamp: first.last_offset(),
        };
        for (header, _) in batches {
            if header.base_offset <= append.last_offset || too_large(&header) {
                return Err(LogError::Corrupt(format!(
                    "follower append has batch base offset {} after offset {}",
                    header.base_offset, append.last_offset
                )));
            }
            if header.max_timestamp > append.max_timestamp {
                append.max_timestamp = header.max_timestamp;
                append.offset_of_max_timestamp = header.last_offset();
            }
            append.last_offset = header.last_offset();
        }
        Ok(append)
    }

    /// Kafka's `maybeRoll`: a new segment when this append would push the active one past
    /// `segment.bytes`, when it is older than `segment.ms`, or when the offsets would not fit the
    /// indexes' relative u32 offsets.
    fn maybe_roll_for(
        &mut self,
        append_bytes: u64,
        first_offset: i64,
        last_offset: i64,
        max_timestamp_ms: i64,
        now_ms: i64,
    ) -> Result<(), LogError> {
        let active = &self.active;
        let offsets_overflow = last_offset - active.base_offset() > i64::from(i32::MAX);
        let full = active.size_bytes() + append_bytes > self.config.effective_segment_bytes();
        let old = active.time_waited_for_roll_ms(now_ms, max_timestamp_ms) > self.config.segment_ms;
        if offsets_overflow || (!active.is_empty() && (full || old)) {
            self.roll(first_offset, now_ms)?;
        }
        Ok(())
    }

    /// Seals the active segment (fsynced before its successor exists, so recovery after a crash
    /// only ever needs to scan the last segment) and starts a new one at `base_offset`. An empty
    /// active segment is replaced instead.
    fn roll(&mut self, base_offset: i64, now_ms: i64) -> Result<(), LogError> {
        if self.active.is_empty() && self.active.base_offset() == base_offset {
            return Ok(());
        }
        if !self.active.is_empty() {
            self.active.on_become_inactive()?;
        }
        let new_segment = LogSegment::create(&self.dir, base_offset, now_ms)?;
        sync_dir(&self.dir)?;
        let previous = std::mem::replace(&mut self.active, new_segment);
        if previous.is_empty() {
            previous.delete()?;
            if self.inactive.is_empty() {
                self.log_start_offset = base_offset;
                self.leader_epoch_cache.truncate_from_start(base_offset)?;
            }
        } else {
            self.inactive.push_back(previous);
        }
        tracing::info!(partition = %self.name, base_offset, "rolled new log segment");
        Ok(())
    }

    fn maybe_flush_after(&mut self, records: i64, now_ms: i64) -> Result<(), LogError> {
        self.unflushed_records = self.unflushed_records.saturating_add(records.max(0) as u64);
        if self.unflushed_records >= self.config.flush_interval_messages {
            self.last_flush_ms = now_ms;
            return self.flush();
        }
        self.maybe_flush(now_ms)
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

    fn delete_oldest_segment(&mut self) -> Result<(), LogError> {
        if let Some(oldest) = self.inactive.pop_front() {
            self.log_start_offset = self.inactive.front().unwrap_or(&self.active).base_offset();
            oldest.delete()?;
            self.leader_epoch_cache.truncate_from_start(self.log_start_offset)?;
        }
        Ok(())
    }

    /// Empties the log and restarts it at `offset`: a follower whose leader has deleted (by
    /// retention) everything this replica holds starts over at the leader's log start.
    pub fn truncate_fully_and_start_at(&mut self, offset: i64) -> Result<(), LogError> {
        self.truncations += 1;
        let new_segment = LogSegment::create(&self.dir, offset, self.clock_ms)?;
        let old_active = std::mem::replace(&mut self.active, new_segment);
        if old_active.base_offset() != offset {
            old_active.delete()?;
        }
        for segment in self.inactive.drain(..) {
            if segment.base_offset() != offset {
                segment.delete()?;
            }
        }
        sync_dir(&self.dir)?;
        self.log_start_offset = offset;
        self.log_end_offset = offset;
        self.leader_epoch_cache.clear()?;
        tracing::info!(partition = %self.name, offset, "truncated log fully");
        Ok(())
    }

    /// Rebuilds indexes of sealed segments that fail the sanity check.
    fn check_sealed_segments(&mut self) -> Result<(), LogError> {
        let interval = self.config.index_interval_bytes;
        for segment in self.inactive.iter_mut().filter(|s| !s.is_sane()) {
            let outcome = segment.recover(interval)?;
            segment.on_become_inactive()?;
            tracing::warn!(
                partition = %self.name,
                segment_base_offset = segment.base_offset(),
                truncated_bytes = outcome.truncated_bytes,
                reason = outcome.reason.as_deref().unwrap_or("damaged index"),
                "rebuilt indexes of a sealed log segment"
            );
        }
        Ok(())
    }

    /// Finds the log end offset: a header scan of the tail after a clean shutdown, full recovery
    /// of the active segment otherwise (or when the quick path finds damage).
    fn load_active_segment(&mut self, clean_shutdown: bool) -> Result<i64, LogError> {
        if clean_shutdown && self.active.is_sane() {
            match self.active.load_tail() {
                Ok(next_offset) => return Ok(next_offset),
                Err(LogError::Corrupt(e)) => {
                    tracing::warn!(partition = %self.name, error = %e, "damaged log tail despite clean shutdown")
                }
                Err(e) => return Err(e),
            }
        }
        let outcome = self.active.recover(self.config.index_interval_bytes)?;
        if outcome.truncated_bytes > 0 {
            tracing::warn!(
                partition = %self.name,
                offset = outcome.next_offset,
                truncated_bytes = outcome.truncated_bytes,
                segment_base_offset = self.active.base_offset(),
                reason = outcome.reason.as_deref().unwrap_or("unknown"),
                "recovered partition log after an unclean shutdown: truncated a torn or invalid tail at this offset"
            );
        }
        Ok(outcome.next_offset)
    }

    /// Kafka's load of the epoch cache: the checkpoint trimmed to the log (entries past a tail
    /// lost in a crash, or before the log start, go), or, when the checkpoint is missing under a
    /// non-empty log or corrupt, a cache rebuilt from the batch headers.
    fn load_leader_epoch_cache(&self) -> Result<LeaderEpochCache, LogError> {
        match LeaderEpochCache::read(&self.dir) {
            Ok(Some(mut cache)) => {
                cache.truncate_from_end(self.log_end_offset)?;
                cache.truncate_from_start(self.log_start_offset)?;
                return Ok(cache);
            }
            Ok(None) if self.log_end_offset == self.log_start_offset => {
                return Ok(LeaderEpochCache::empty(&self.dir));
            }
            Ok(None) => {}
            Err(LogError::Corrupt(e)) => tracing::warn!(
                partition = %self.name,
                error = %e,
                "corrupt leader-epoch-checkpoint; rebuilding it from the log's batch headers"
            ),
            Err(e) => return Err(e),
        }
        let mut scan = EpochScan::default();
        for segment in self.segments() {
            segment.for_each_batch_header(|header| {
                scan.observe(header.partition_leader_epoch, header.base_offset);
            })?;
        }
        let cache = LeaderEpochCache::rebuild(&self.dir, scan)?;
        tracing::info!(
            partition = %self.name,
            epochs = cache.entries().len(),
            "rebuilt the leader epoch cache from batch headers"
        );
        Ok(cache)
    }

    fn out_of_range(&self, offset: i64) -> LogError {
        LogError::OffsetOutOfRange {
            offset,
            log_start: self.log_start_offset,
            log_end: self.log_end_offset,
        }
    }
}

/// Patches each batch in place: consecutive offsets from `first_offset`, the leader epoch if
/// given, LogAppendTime if `log_append_time_ms` is set. Only LogAppendTime rewrites the CRC.
/// Returns the offset after the last batch.
fn stamp_batches(
    records: &mut [u8],
    first_offset: i64,
    leader_epoch: Option<i32>,
    log_append_time_ms: i64,
) -> Result<i64, BatchError> {
    let mut next_offset = first_offset;
    let mut rest = records;
    while !rest.is_empty() {
        let header = BatchHeader::parse(rest)?;
        let len = header.total_len().min(rest.len());
        let (batch, tail) = rest.split_at_mut(len);
        batch::set_base_offset(batch, next_offset)?;
        if let Some(epoch) = leader_epoch {
            batch::set_partition_leader_epoch(batch, epoch)?;
        }
        if log_append_time_ms != NO_TIMESTAMP {
            batch::set_log_append_time(batch, log_append_time_ms)?;
        }
        next_offset += header.offset_count();
        rest = tail;
    }
    Ok(next_offset)
}

/// `(partitionLeaderEpoch, baseOffset)` of each batch, for the epoch cache.
fn stored_epochs(records: &[u8]) -> impl Iterator<Item = (i32, i64)> + '_ {
    BatchIter::new(records).map(|(header, _)| (header.partition_leader_epoch, header.base_offset))
}

/// Length of the leading whole batches of `buf` whose base offset is below `max_offset`.
fn complete_batches_below(buf: &[u8], max_offset: i64) -> usize {
    BatchIter::new(buf)
        .take_while(|(header, _)| header.base_offset < max_offset)
        .last()
        .map_or(0, |(_, range)| range.end)
}

/// Finishes or discards what an interrupted log-cleaner swap left in `dir`, as Kafka does on
/// load: `.cleaned` files were never swapped in and are deleted; a `<base>.log.swap` is a whole
/// cleaned segment (fsynced before it was renamed), so the segments it replaces (base offsets
/// from its base up to its next offset) are deleted and it takes its final name. Its indexes
/// are dropped and rebuilt from the log file when the segment is opened.
fn complete_interrupted_swaps(dir: &Path) -> Result<(), LogError> {
    let mut swaps = Vec::new();
    let mut segment_files = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let file_name = entry.file_name();
        let Some(name) = file_name.to_str() else {
            continue;
        };
        if name.ends_with(CLEANED_FILE_SUFFIX) {
            tracing::info!(file = %entry.path().display(), "deleting a cleaned segment file that was never swapped in");
            remove_if_exists(&entry.path())?;
        } else if let Some(stem) = name.strip_suffix(SWAP_FILE_SUFFIX) {
            if let Some(base) = parse_segment_file_name(stem, LOG_FILE_SUFFIX) {
                swaps.push(base);
            } else if parse_segment_file_name(stem, INDEX_FILE_SUFFIX)
                .or_else(|| parse_segment_file_name(stem, TIME_INDEX_FILE_SUFFIX))
                .is_some()
            {
                remove_if_exists(&entry.path())?;
            }
        } else {
            for suffix in [LOG_FILE_SUFFIX, INDEX_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX] {
                if let Some(base) = parse_segment_file_name(name, suffix) {
                    segment_files.push((base, entry.path()));
                }
            }
        }
    }
    for base in swaps {
        let swap_path = dir.join(format!(
            "{}{SWAP_FILE_SUFFIX}",
            segment_file_name(base, LOG_FILE_SUFFIX)
        ));
        let next_offset = super::segment::next_offset_of_file(&swap_path, base)?;
        for (_, path) in segment_files
            .iter()
            .filter(|(b, _)| *b >= base && (*b < next_offset || *b == base))
        {
            remove_if_exists(path)?;
        }
        fs::rename(&swap_path, dir.join(segment_file_name(base, LOG_FILE_SUFFIX)))?;
        tracing::warn!(
            dir = %dir.display(),
            base_offset = base,
            next_offset,
            "completed a cleaned-segment swap interrupted by a crash"
        );
    }
    Ok(sync_dir(dir)?)
}

/// Base offsets of the segments in `dir`, ascending. Index files without a `.log` are leftovers
/// of an interrupted deletion and are removed, as Kafka does.
fn list_segments(dir: &Path) -> Result<Vec<i64>, LogError> {
    let mut log_bases = Vec::new();
    let mut index_files = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let file_name = entry.file_name();
        let Some(name) = file_name.to_str() else {
            continue;
        };
        if let Some(base) = parse_segment_file_name(name, LOG_FILE_SUFFIX) {
            log_bases.push(base);
        } else if let Some(base) = parse_segment_file_name(name, INDEX_FILE_SUFFIX)
            .or_else(|| parse_segment_file_name(name, TIME_INDEX_FILE_SUFFIX))
        {
            index_files.push((base, entry.path()));
        }
    }
    log_bases.sort_unstable();
    for (base, path) in index_files {
        if log_bases.binary_search(&base).is_err() {
            remove_if_exists(&path)?;
        }
    }
    Ok(log_bases)
}

fn parse_segment_file_name(name: &str, suffix: &str) -> Option<i64> {
    let stem = name.strip_suffix(suffix)?;
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let base = stem.parse().ok()?;
    (segment_file_name(base, suffix) == name).then_some(base)
}

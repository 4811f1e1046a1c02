//! Reading a partition log: planning a read under the log's lock (no disk I/O) and doing it
//! after the lock is released ([`PlannedRead`]), from the tail cache when it holds the bytes
//! (`log/tail.rs`), and the timestamp lookups ListOffsets uses.

use std::sync::Arc;

use bytes::Bytes;
use sluice_protocol::batch::{BatchHeader, BatchIter};
use sluice_protocol::records::BatchRecords;

use super::PartitionLog;
use crate::log::segment::{LogSegment, SegmentReader};
use crate::log::tail::{TailCacheBudget, TailRead};
use crate::log::LogError;

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
/// deleted since (retention, compaction) is still read through its open file. When the tail
/// cache holds the batch of the offset, the plan holds its chunks instead and reads no file.
#[derive(Debug)]
pub struct PlannedRead {
    pub(super) offset: i64,
    pub(super) max_offset: i64,
    /// Oldest first; empty when the offset is the log end or the tail cache answers.
    pub(super) segments: Vec<SegmentReader>,
    pub(super) tail: Option<TailRead>,
    pub(super) log_start_offset: i64,
    pub(super) log_end_offset: i64,
}

impl PlannedRead {
    /// Reads whole stored batches from the one holding the planned offset, across segments, up
    /// to `max_bytes` and never a batch at or beyond the planned `max_offset`; the first batch
    /// whole even when larger than `max_bytes` if `min_one_message` (Kafka's KIP-74 rule). The
    /// buffer is sized by the bytes present, never by `max_bytes` alone. `max_bytes` is at most
    /// the planned one. Positional reads unless [`PlannedRead::reads_disk`] is false: call it
    /// off the async workers when it is true.
    pub fn read(&self, max_bytes: usize, min_one_message: bool) -> Result<ReadResult, LogError> {
        if let Some(tail) = &self.tail {
            return Ok(ReadResult {
                records: tail.read(max_bytes, min_one_message, self.max_offset),
                log_start_offset: self.log_start_offset,
                log_end_offset: self.log_end_offset,
            });
        }
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

    /// Whether [`PlannedRead::read`] reads files; when false it is a memory read (the tail
    /// cache, or nothing at the log end) that may run on an async worker.
    pub fn reads_disk(&self) -> bool {
        !self.segments.is_empty()
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

impl PartitionLog {
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
        self.plan_read_from(offset, max_offset, max_bytes, true)
    }

    /// [`PartitionLog::plan_read`], from the files even when the tail cache holds the bytes.
    #[cfg(test)]
    pub(crate) fn plan_disk_read(
        &self,
        offset: i64,
        max_offset: i64,
        max_bytes: usize,
    ) -> Result<PlannedRead, LogError> {
        self.plan_read_from(offset, max_offset, max_bytes, false)
    }

    fn plan_read_from(
        &self,
        offset: i64,
        max_offset: i64,
        max_bytes: usize,
        use_tail: bool,
    ) -> Result<PlannedRead, LogError> {
        if offset < self.log_start_offset || offset > self.log_end_offset {
            return Err(self.out_of_range(offset));
        }
        let mut segments = Vec::new();
        let tail = match use_tail {
            true => self
                .tail
                .plan(offset, max_bytes, self.log_end_offset, self.active.size_bytes()),
            false => None,
        };
        if offset < self.log_end_offset && tail.is_none() {
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
            tail,
            log_start_offset: self.log_start_offset,
            log_end_offset: self.log_end_offset,
        })
    }

    /// ListOffsets by timestamp: the first record whose timestamp is at least `timestamp`, as
    /// (offset, timestamp), as Kafka answers. The time index and batch headers find the batch;
    /// its records are then decoded (within `max.message.bytes`) to find the record, so a
    /// consumer seeking by time does not re-read the batch's earlier records. A batch with
    /// LogAppendTime gives every record its max timestamp, so its first record answers; a
    /// batch that cannot be decoded answers with its first offset and max timestamp (Kafka's
    /// shallow answer, never later than the record sought).
    pub fn offset_for_timestamp(&self, timestamp: i64) -> Result<Option<(i64, i64)>, LogError> {
        for segment in self.segments() {
            let Some((header, position)) = segment.find_batch_by_timestamp(timestamp)? else {
                continue;
            };
            let shallow = (header.base_offset.max(self.log_start_offset), header.max_timestamp);
            if header.timestamp_type_is_log_append() {
                return Ok(Some(shallow));
            }
            let batch = segment.read_batch(&header, position)?;
            let records = match BatchRecords::decode(&batch, self.config.max_message_bytes as usize) {
                Ok(records) => records,
                Err(e) => {
                    tracing::warn!(dir = %self.dir.display(), offset = header.base_offset, error = %e,
                        "cannot decode a stored batch's records for a timestamp lookup; answering with the batch's first offset");
                    return Ok(Some(shallow));
                }
            };
            let found = records
                .iter()
                .map(|r| {
                    (
                        header.base_offset + i64::from(r.offset_delta),
                        header.base_timestamp + r.timestamp_delta,
                    )
                })
                // Records below the log start offset (DeleteRecords) are gone for readers.
                .find(|(offset, ts)| *offset >= self.log_start_offset && *ts >= timestamp);
            return Ok(Some(found.unwrap_or(shallow)));
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
}

impl PartitionLog {
    /// Keeps the leader's recent appends in memory within `budget` (see `log/tail.rs`); a log
    /// opened without it reads every fetch from its files.
    pub fn enable_tail_cache(&mut self, budget: Arc<TailCacheBudget>) {
        self.tail = crate::log::tail::TailCache::new(budget);
    }

    /// Bytes of this log's tail held in memory.
    pub fn tail_cache_bytes(&self) -> usize {
        self.tail.bytes()
    }

    /// Housekeeping, every few seconds: a log not appended to since the last pass gives back
    /// its tail cache and its active segment's in-memory index copies, which are written to
    /// their files first (no fsync, as writeback does). The next append reads them back in.
    /// An active segment's copies hold every entry of the segment, up to megabytes, so
    /// without this a node's idle replicas would keep them all.
    pub fn release_idle_memory(&mut self) -> Result<(), LogError> {
        if self.tail.release_if_idle() {
            self.active.release_index_copies()?;
        }
        Ok(())
    }

    /// Whether the active segment's index entries are held in memory.
    #[cfg(test)]
    pub fn active_indexes_in_memory(&self) -> bool {
        self.active.indexes_in_memory()
    }
}

/// Length of the leading whole batches of `buf` whose base offset is below `max_offset`.
pub(super) fn complete_batches_below(buf: &[u8], max_offset: i64) -> usize {
    BatchIter::new(buf)
        .take_while(|(header, _)| header.base_offset < max_offset)
        .last()
        .map_or(0, |(_, range)| range.end)
}

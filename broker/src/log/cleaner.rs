//! `LogCleaner`: log compaction for topics whose `cleanup.policy` includes `compact`, done the way
//! Kafka's cleaner does it.
//!
//! A pass over one partition log:
//!
//! 1. [`PartitionLog::log_to_clean`] (under the log's lock, briefly) snapshots the sealed segments
//!    wholly below the first uncleanable offset: the active segment, anything at or above the high
//!    watermark and anything younger than `min.compaction.lag.ms` are never touched. Segments
//!    below the cleaner checkpoint are the *clean* section, the rest the *dirty* section.
//! 2. Without the lock, the dirty section's keys go into an [`OffsetMap`] (16-byte key hash →
//!    latest offset) of at most `log.cleaner.dedupe.buffer.size` bytes. When it fills, the pass
//!    covers only the prefix it mapped; the rest waits for the next pass.
//! 3. Segments from the log start up to the mapped end are rewritten in groups of at most
//!    `segment.bytes`, each into one `<base>.log.cleaned` with freshly built indexes: a record is
//!    kept unless a later offset of its key is in the map, keyless records go, and tombstones
//!    (null values) go once their segment is older than `delete.retention.ms`. Records keep their
//!    offsets, so compacted logs have offset gaps.
//! 4. Each group is swapped in under the lock ([`PartitionLog::replace_segments`]) after checking
//!    the segments it replaces are still there; if retention or truncation removed them, the pass
//!    is abandoned. The caller records the mapped end in `cleaner-offset-checkpoint`.
//!
//! Records are decoded through [`BatchRecords`], decompressing to at most the partition's
//! `max.message.bytes`; a batch that cannot be decoded ends the pass with
//! [`LogError::UncleanableBatch`] before anything is swapped in. A batch that keeps every record
//! is copied as stored; one that loses some is rebuilt from the surviving records' bytes
//! (recompressed with its codec) keeping its base offset, last offset delta, timestamps,
//! attributes, producer id, epoch and base sequence and partition leader epoch, with a new
//! length, count and CRC; one that loses all is dropped.
//!
//! Transactions, as Kafka's cleaner treats them: the cleaner works below the last stable offset
//! only; an aborted transaction's batches (the aborted-transaction index says which) never stand
//! for their keys in the map and are removed when their segment is cleaned; a transaction
//! marker (control batch) is removed once no batch of its transaction is left before it in
//! the log and its segment is older than `delete.retention.ms`, as tombstones are. A marker
//! whose transaction still has data stays: without it, a replica rebuilding its producer state
//! from the log would take that data for an open transaction.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::Hasher;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use sluice_protocol::batch::BatchHeader;
use sluice_protocol::records::{self, BatchRecords, Compressor, RecordView};

use super::checkpoint_file::OffsetCheckpoint;
use super::log_to_clean::{CleanableSegment, LogToClean};
use super::segment::{
    segment_file_name, LogSegment, SegmentSnapshot, CLEANED_FILE_SUFFIX, INDEX_FILE_SUFFIX, LOG_FILE_SUFFIX,
    TIME_INDEX_FILE_SUFFIX,
};
use super::{LogError, PartitionLog};
use crate::fs::remove_if_exists;

/// Kafka's file in the data dir: per partition, the offset up to which its log was cleaned.
pub const CLEANER_OFFSET_CHECKPOINT_FILE: &str = "cleaner-offset-checkpoint";

/// Bytes of dedupe buffer per map entry: a 16-byte key hash and an 8-byte offset, as Kafka counts.
const MAP_ENTRY_BYTES: u64 = 24;
/// Kafka's `log.cleaner.io.buffer.load.factor`: the map is full at 90% of its slots.
const MAP_LOAD_FACTOR: f64 = 0.9;
/// Retained batches are written to the cleaned segment in chunks of about this size.
const WRITE_BUFFER_BYTES: usize = 1024 * 1024;

/// Broker-wide cleaner settings (Kafka's names).
#[derive(Debug, Clone, PartialEq)]
pub struct CleanerConfig {
    /// `log.cleaner.enable`.
    pub enable: bool,
    /// `log.cleaner.backoff.ms`: sleep between passes that found nothing to clean.
    pub backoff_ms: u64,
    /// `log.cleaner.dedupe.buffer.size`: memory for the key → offset map.
    pub dedupe_buffer_size: u64,
}

impl Default for CleanerConfig {
    fn default() -> Self {
        CleanerConfig {
            enable: true,
            backoff_ms: 15_000,
            dedupe_buffer_size: 134_217_728,
        }
    }
}

/// What a cleaning pass did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CleanStats {
    /// The new first dirty offset (for `cleaner-offset-checkpoint`); unchanged if abandoned.
    pub end_offset: i64,
    pub segments_replaced: usize,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub records_removed: u64,
    /// True when the segments changed under the cleaner and the pass was given up.
    pub abandoned: bool,
    /// Earliest time a tombstone this pass kept becomes removable: the log should be cleaned
    /// again then even if nothing new arrives.
    pub tombstone_deadline_ms: Option<i64>,
}

/// Kafka's `SkimpyOffsetMap`: an open-addressing table from a 16-byte key hash to the latest
/// offset seen for it, in a buffer of at most `log.cleaner.dedupe.buffer.size` bytes. The
/// buffer is zeroed memory the OS maps lazily (so a pass costs only the pages its keys touch)
/// and is made for each pass and released after it, so an idle broker holds none of it.
pub struct OffsetMap {
    /// Slot `i` is bytes `24 i .. 24 i + 24`: 16 bytes of hash, then offset + 1 as big-endian
    /// i64 (0 = empty).
    slots: Vec<u8>,
    /// Slots in use.
    used: Vec<u32>,
    capacity: usize,
}

const SLOT_BYTES: usize = MAP_ENTRY_BYTES as usize;

impl OffsetMap {
    pub fn new(dedupe_buffer_size: u64) -> OffsetMap {
        let slots = (dedupe_buffer_size / MAP_ENTRY_BYTES).clamp(1, u64::from(u32::MAX)) as usize;
        OffsetMap {
            slots: vec![0u8; slots * SLOT_BYTES],
            used: Vec::new(),
            capacity: ((slots as f64 * MAP_LOAD_FACTOR) as usize).max(1),
        }
    }

    /// Keys the map holds before it counts as full.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn len(&self) -> usize {
        self.used.len()
    }

    /// Records `offset` for `hash`. False, changing nothing, when the key is new and the map full.
    pub fn put(&mut self, hash: &[u8; 16], offset: i64) -> bool {
        let i = self.find_slot(hash);
        let full = self.used.len() >= self.capacity;
        let slot = self.slot_mut(i);
        let empty = slot[16..] == [0; 8];
        if empty {
            if full {
                return false;
            }
            slot[..16].copy_from_slice(hash);
        }
        slot[16..].copy_from_slice(&(offset + 1).to_be_bytes());
        if empty {
            self.used.push(i as u32);
        }
        true
    }

    pub fn get(&self, hash: &[u8; 16]) -> Option<i64> {
        let slot = self.slot(self.find_slot(hash));
        let stored = i64::from_be_bytes(slot[16..].try_into().ok()?);
        (stored != 0).then_some(stored - 1)
    }

    fn slot(&self, i: usize) -> &[u8] {
        &self.slots[i * SLOT_BYTES..(i + 1) * SLOT_BYTES]
    }

    fn slot_mut(&mut self, i: usize) -> &mut [u8] {
        &mut self.slots[i * SLOT_BYTES..(i + 1) * SLOT_BYTES]
    }

    /// The slot holding `hash`, or the empty slot where it would go (linear probing; the load
    /// factor guarantees an empty slot exists).
    fn find_slot(&self, hash: &[u8; 16]) -> usize {
        let n = self.slots.len() / SLOT_BYTES;
        let start = u64::from_be_bytes(hash[..8].try_into().unwrap_or_default()) % n as u64;
        let mut i = start as usize;
        loop {
            let slot = self.slot(i);
            if slot[16..] == [0; 8] || slot[..16] == hash[..] {
                return i;
            }
            i = (i + 1) % n;
        }
    }
}

/// 128-bit hash of a record key (Kafka uses MD5; any well-mixed 128 bits make collisions
/// negligible): two SipHash runs with different prefixes.
fn key_hash(key: &[u8]) -> [u8; 16] {
    let mut first = DefaultHasher::new();
    first.write(key);
    let mut second = DefaultHasher::new();
    second.write_u8(0xa5);
    second.write(key);
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&first.finish().to_be_bytes());
    out[8..].copy_from_slice(&second.finish().to_be_bytes());
    out
}

/// The log cleaner: an offset map made for each pass.
pub struct LogCleaner {
    map: OffsetMap,
    dedupe_buffer_size: u64,
    stop: Arc<AtomicBool>,
}

impl LogCleaner {
    /// A cleaner whose passes give up early once `stop` is set (broker shutdown).
    pub fn new(config: &CleanerConfig, stop: Arc<AtomicBool>) -> LogCleaner {
        LogCleaner {
            map: OffsetMap::new(MAP_ENTRY_BYTES),
            dedupe_buffer_size: config.dedupe_buffer_size,
            stop,
        }
    }

    /// The dedupe buffer of the passes that follow (`log.cleaner.dedupe.buffer.size` is
    /// dynamic); the map is made at that size at the start of each pass.
    pub fn set_dedupe_buffer_size(&mut self, bytes: u64) {
        self.dedupe_buffer_size = bytes.max(1);
    }

    /// Cleans what `to_clean` offers of `log` (see the module docs). Holds the log's lock only to
    /// swap cleaned segments in. `now_ms` decides which tombstones have expired.
    pub fn clean(
        &mut self,
        log: &Mutex<PartitionLog>,
        to_clean: &LogToClean,
        now_ms: i64,
    ) -> Result<CleanStats, LogError> {
        let result = self.clean_segments(log, to_clean, now_ms);
        // Give the pass's map back to the OS.
        self.map = OffsetMap::new(MAP_ENTRY_BYTES);
        let abandoned = CleanStats {
            end_offset: to_clean.first_dirty_offset,
            abandoned: true,
            ..CleanStats::default()
        };
        match result {
            // A truncation shortened a segment under the reader: not a disk problem.
            Err(_) if log.lock().truncations() != to_clean.truncations => {
                tracing::info!(partition = %to_clean.name, "log truncated while it was being cleaned; abandoning this pass");
                Ok(abandoned)
            }
            // Retention removed a segment the pass had yet to read, its file closed meanwhile.
            Err(LogError::RemovedDuringRead { .. }) => {
                tracing::info!(partition = %to_clean.name, "segments removed while they were being cleaned (retention); abandoning this pass");
                Ok(abandoned)
            }
            result => result,
        }
    }

    fn clean_segments(
        &mut self,
        log: &Mutex<PartitionLog>,
        to_clean: &LogToClean,
        now_ms: i64,
    ) -> Result<CleanStats, LogError> {
        let mut stats = CleanStats {
            end_offset: to_clean.first_dirty_offset,
            ..CleanStats::default()
        };
        let end_offset = self.build_offset_map(to_clean, &mut stats)?;
        if self.stopped() {
            stats.abandoned = true;
            return Ok(stats);
        }
        let in_range: Vec<&CleanableSegment> = to_clean
            .segments
            .iter()
            .filter(|s| s.snapshot.base_offset < end_offset)
            .collect();
        let delete_horizon_ms = now_ms.saturating_sub(to_clean.config.delete_retention_ms);
        let mut txns = RetainedTxns::default();
        for group in group_segments(&in_range, to_clean.config.effective_segment_bytes()) {
            if self.stopped() {
                stats.abandoned = true;
                return Ok(stats);
            }
            let horizons = (end_offset, delete_horizon_ms);
            let swapped = self.clean_group(log, to_clean, &group, horizons, now_ms, &mut txns, &mut stats)?;
            if !swapped {
                tracing::info!(
                    partition = %to_clean.name,
                    "segments changed while they were being cleaned (retention or truncation); abandoning this pass"
                );
                stats.abandoned = true;
                return Ok(stats);
            }
            stats.segments_replaced += group.len();
        }
        stats.end_offset = end_offset;
        Ok(stats)
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Fills the map from the dirty section and returns the offset the map covers up to
    /// (exclusive): the end of the cleanable segments, or the first record whose key did not fit.
    fn build_offset_map(&mut self, to_clean: &LogToClean, stats: &mut CleanStats) -> Result<i64, LogError> {
        self.map = OffsetMap::new(self.dedupe_buffer_size);
        let first_dirty = to_clean.first_dirty_offset;
        let mut end_offset = first_dirty;
        let max_message_bytes = to_clean.config.max_message_bytes;
        for segment in to_clean.segments.iter().filter(|s| s.next_base_offset > first_dirty) {
            if self.stopped() {
                break;
            }
            let mut full_at = None;
            let map = &mut self.map;
            segment.snapshot.for_each_batch(|header, batch| {
                stats.bytes_read += batch.len() as u64;
                if full_at.is_some() || header.last_offset() < first_dirty || header.is_control() {
                    return Ok(());
                }
                // An aborted transaction's records never replace a key's committed value.
                if header.is_transactional() && to_clean.is_aborted(header.producer_id, header.base_offset) {
                    return Ok(());
                }
                for record in stored_records(header, batch, max_message_bytes)?.iter() {
                    let offset = header.base_offset.saturating_add(i64::from(record.offset_delta));
                    if full_at.is_some() || offset < first_dirty {
                        continue;
                    }
                    if let Some(key) = record.key {
                        if !map.put(&key_hash(key), offset) {
                            full_at = Some(offset);
                        }
                    }
                }
                Ok(())
            })?;
            if let Some(offset) = full_at {
                if offset == first_dirty {
                    tracing::warn!(
                        partition = %to_clean.name,
                        capacity = self.map.capacity(),
                        "log.cleaner.dedupe.buffer.size holds no key at all; raise it"
                    );
                }
                tracing::debug!(partition = %to_clean.name, offset, keys = self.map.len(), "offset map full; cleaning a prefix");
                return Ok(offset);
            }
            end_offset = segment.next_base_offset;
        }
        Ok(end_offset)
    }

    /// Writes the group's retained batches into one `.cleaned` segment and swaps it in.
    #[allow(clippy::too_many_arguments)]
    /// `horizons` is the mapped end offset (records at or above it stay) and the time before
    /// which tombstones and markers may go.
    fn clean_group(
        &self,
        log: &Mutex<PartitionLog>,
        to_clean: &LogToClean,
        group: &[&CleanableSegment],
        horizons: (i64, i64),
        now_ms: i64,
        txns: &mut RetainedTxns,
        stats: &mut CleanStats,
    ) -> Result<bool, LogError> {
        let base_offset = group[0].snapshot.base_offset;
        let mut cleaned = LogSegment::create_with_suffix(
            &to_clean.dir,
            base_offset,
            CLEANED_FILE_SUFFIX,
            &to_clean.file_cache,
            now_ms,
        )?;
        let written = self.write_cleaned(to_clean, group, horizons, &mut cleaned, txns, stats);
        let written = written.and_then(|()| cleaned.on_become_inactive());
        if let Err(e) = written {
            let _ = cleaned.delete();
            return Err(e);
        }
        drop(cleaned);
        let snapshots: Vec<&SegmentSnapshot> = group.iter().map(|s| &s.snapshot).collect();
        let swapped = log.lock().replace_segments(&snapshots, to_clean.truncations, now_ms);
        if !matches!(swapped, Ok(true)) {
            remove_cleaned_files(&to_clean.dir, base_offset);
        }
        swapped
    }

    fn write_cleaned(
        &self,
        to_clean: &LogToClean,
        group: &[&CleanableSegment],
        (end_offset, delete_horizon_ms): (i64, i64),
        cleaned: &mut LogSegment,
        txns: &mut RetainedTxns,
        stats: &mut CleanStats,
    ) -> Result<(), LogError> {
        let interval = to_clean.config.index_interval_bytes;
        let mut out = Vec::with_capacity(WRITE_BUFFER_BYTES);
        for segment in group {
            let retain_tombstones = segment.snapshot.largest_timestamp_ms >= delete_horizon_ms;
            let mut kept_tombstone = false;
            segment.snapshot.for_each_batch(|header, batch| {
                stats.bytes_read += batch.len() as u64;
                if header.last_offset() < end_offset && header.is_transactional() {
                    let removable = if header.is_control() {
                        txns.on_marker(header.producer_id) && !retain_tombstones
                    } else {
                        to_clean.is_aborted(header.producer_id, header.base_offset)
                    };
                    if removable {
                        stats.records_removed += u64::try_from(header.records_count).unwrap_or(0);
                        return Ok(());
                    }
                }
                let filter = RecordFilter {
                    map: &self.map,
                    end_offset,
                    retain_tombstones,
                    max_message_bytes: to_clean.config.max_message_bytes,
                };
                let filtered = filter_batch(header, batch, &filter)?;
                stats.records_removed += filtered.removed;
                kept_tombstone |= filtered.kept_tombstone;
                let kept = !matches!(filtered.outcome, BatchOutcome::Drop);
                if kept && header.is_transactional() && !header.is_control() {
                    txns.retained(header.producer_id);
                }
                match filtered.outcome {
                    BatchOutcome::Keep => out.extend_from_slice(batch),
                    BatchOutcome::Rebuilt(rebuilt) => out.extend_from_slice(&rebuilt),
                    BatchOutcome::Drop => {}
                }
                if out.len() >= WRITE_BUFFER_BYTES {
                    stats.bytes_written += out.len() as u64;
                    cleaned.append(&out, interval)?;
                    out.clear();
                }
                Ok(())
            })?;
            if kept_tombstone {
                let deadline = segment
                    .snapshot
                    .largest_timestamp_ms
                    .saturating_add(to_clean.config.delete_retention_ms)
                    .saturating_add(1);
                stats.tombstone_deadline_ms = Some(stats.tombstone_deadline_ms.map_or(deadline, |d| d.min(deadline)));
            }
        }
        if !out.is_empty() {
            stats.bytes_written += out.len() as u64;
            cleaned.append(&out, interval)?;
        }
        Ok(())
    }
}

/// Kafka's `groupSegmentsBySize`: consecutive segments whose sizes sum to at most `max_bytes`
/// (at least one each) and whose offsets fit one segment's relative u32 index entries.
fn group_segments<'a>(segments: &[&'a CleanableSegment], max_bytes: u64) -> Vec<Vec<&'a CleanableSegment>> {
    let mut groups: Vec<Vec<&CleanableSegment>> = Vec::new();
    for &segment in segments {
        if let Some(group) = groups.last_mut() {
            let size: u64 = group.iter().map(|s| s.snapshot.size_bytes).sum();
            let first_base = group[0].snapshot.base_offset;
            let fits = size + segment.snapshot.size_bytes <= max_bytes
                && segment.next_base_offset - first_base <= i64::from(i32::MAX);
            if fits {
                group.push(segment);
                continue;
            }
        }
        groups.push(vec![segment]);
    }
    groups
}

fn remove_cleaned_files(dir: &Path, base_offset: i64) {
    for suffix in [LOG_FILE_SUFFIX, INDEX_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX] {
        let path = dir.join(segment_file_name(base_offset, suffix) + CLEANED_FILE_SUFFIX);
        if let Err(e) = remove_if_exists(&path) {
            tracing::warn!(file = %path.display(), error = %e, "could not remove a cleaned segment file; it is deleted on the next open");
        }
    }
}

/// Producers whose current transaction (in log order, within one pass) has a batch that
/// stays in the cleaned log (Kafka's `CleanedTransactionMetadata`): their marker stays too.
#[derive(Default)]
struct RetainedTxns(std::collections::HashSet<i64>);

impl RetainedTxns {
    fn retained(&mut self, producer_id: i64) {
        self.0.insert(producer_id);
    }

    /// A marker of `producer_id` ends its transaction: whether none of its batches is left.
    fn on_marker(&mut self, producer_id: i64) -> bool {
        !self.0.remove(&producer_id)
    }
}

/// Which records of a batch survive.
struct RecordFilter<'a> {
    map: &'a OffsetMap,
    /// Offsets at and above this were not mapped: their records stay.
    end_offset: i64,
    /// False once the segment is older than `delete.retention.ms`: its tombstones go.
    retain_tombstones: bool,
    /// The partition's `max.message.bytes`: the most a batch's records may decompress to.
    max_message_bytes: u32,
}

impl RecordFilter<'_> {
    /// Kafka's `shouldRetainRecord`.
    fn retain(&self, offset: i64, record: &RecordView<'_>) -> bool {
        if offset >= self.end_offset {
            return true;
        }
        let Some(key) = record.key else {
            return false; // keyless records have no place in a compacted log
        };
        let superseded = self.map.get(&key_hash(key)).is_some_and(|latest| offset < latest);
        let expired_tombstone = record.value.is_none() && !self.retain_tombstones;
        !superseded && !expired_tombstone
    }
}

enum BatchOutcome {
    Keep,
    Rebuilt(Vec<u8>),
    Drop,
}

struct FilteredBatch {
    outcome: BatchOutcome,
    removed: u64,
    kept_tombstone: bool,
}

fn filter_batch(header: &BatchHeader, batch: &[u8], filter: &RecordFilter<'_>) -> Result<FilteredBatch, LogError> {
    if header.is_control() {
        return Ok(FilteredBatch {
            outcome: BatchOutcome::Keep,
            removed: 0,
            kept_tombstone: false,
        });
    }
    let codec = header.compression();
    let records = stored_records(header, batch, filter.max_message_bytes)?;
    let mut kept = Vec::with_capacity(records.section().len());
    let (mut kept_count, mut total, mut kept_tombstone) = (0i32, 0u64, false);
    for record in records.iter() {
        total += 1;
        if filter.retain(
            header.base_offset.saturating_add(i64::from(record.offset_delta)),
            &record,
        ) {
            kept.extend_from_slice(record.bytes);
            kept_count += 1;
            kept_tombstone |= record.value.is_none();
        }
    }
    let removed = total - kept_count as u64;
    let outcome = if removed == 0 {
        BatchOutcome::Keep
    } else if kept_count == 0 {
        BatchOutcome::Drop
    } else {
        BatchOutcome::Rebuilt(rebuild_batch(batch, codec, &kept, kept_count)?)
    };
    Ok(FilteredBatch {
        outcome,
        removed,
        kept_tombstone,
    })
}

/// The original header with a new records section, length, count and CRC, in the batch's own
/// codec: everything else (base offset, last offset delta, timestamps, attributes, producer
/// fields, leader epoch) stays.
fn rebuild_batch(original: &[u8], codec: u8, records: &[u8], count: i32) -> Result<Vec<u8>, LogError> {
    records::rebuild_batch(original, Compressor::new(codec), records, count)
        .map_err(|e| LogError::Corrupt(format!("cannot rebuild a cleaned batch: {e}")))
}

/// A stored batch's checked records, decompressed within the partition's `max.message.bytes`.
fn stored_records<'a>(
    header: &BatchHeader,
    batch: &'a [u8],
    max_message_bytes: u32,
) -> Result<BatchRecords<'a>, LogError> {
    BatchRecords::decode(batch, max_message_bytes as usize).map_err(|source| LogError::UncleanableBatch {
        base_offset: header.base_offset,
        source,
    })
}

/// Reads `cleaner-offset-checkpoint` from the data dir (missing: empty).
pub fn read_cleaner_checkpoint(data_dir: &Path) -> HashMap<(String, i32), i64> {
    OffsetCheckpoint::read(&data_dir.join(CLEANER_OFFSET_CHECKPOINT_FILE))
}

/// Replaces `cleaner-offset-checkpoint` in the data dir (through the checkpoint helper).
pub fn write_cleaner_checkpoint(data_dir: &Path, entries: &HashMap<(String, i32), i64>) -> std::io::Result<()> {
    let mut sorted: Vec<(String, i32, i64)> = entries.iter().map(|((t, p), o)| (t.clone(), *p, *o)).collect();
    sorted.sort();
    OffsetCheckpoint::write(&data_dir.join(CLEANER_OFFSET_CHECKPOINT_FILE), &sorted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_offset_map_keeps_the_latest_offset_and_refuses_new_keys_when_full() {
        // 10 slots of 24 bytes: full at 9 keys.
        let mut map = OffsetMap::new(240);
        assert_eq!(map.capacity(), 9);
        for i in 0..9u8 {
            assert!(map.put(&key_hash(&[i]), i64::from(i)));
        }
        assert!(map.put(&key_hash(&[3]), 100), "an existing key can still be updated");
        assert!(!map.put(&key_hash(&[42]), 101), "a new key cannot");
        assert_eq!(map.get(&key_hash(&[3])), Some(100));
        assert_eq!(map.get(&key_hash(&[42])), None);
        assert_eq!(map.len(), 9);
    }
}

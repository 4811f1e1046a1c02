//! The log cleaner on real segment files: what survives compaction, at which offsets, what is
//! never touched, and crash leftovers.

use kafka_protocol::error::ResponseError;
use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::records::RecordBatchDecoder;
use parking_lot::Mutex;
use sluice_protocol::batch::test_support::{encode_batch, TestRecord};
use sluice_protocol::batch::{validate_stored_batch, CRC_COVERED_FROM, CRC_OFFSET};

use super::*;
use crate::log::{CleanStats, CleanerConfig, LogCleaner, LogError};

const DAY_MS: i64 = 86_400_000;

/// A compacted topic with small segments; cleaning whenever anything is dirty.
fn compacted() -> LogConfig {
    LogConfig {
        segment_bytes: 600,
        index_interval_bytes: 100,
        cleanup_policy_compact: true,
        cleanup_policy_delete: false,
        min_cleanable_dirty_ratio: 0.0,
        delete_retention_ms: DAY_MS,
        ..LogConfig::default()
    }
}

fn cleaner(dedupe_buffer_size: u64) -> LogCleaner {
    let config = CleanerConfig {
        dedupe_buffer_size,
        ..CleanerConfig::default()
    };
    LogCleaner::new(&config, Arc::new(AtomicBool::new(false)))
}

/// Appends one batch of `(key, value)` records (None = tombstone) at `ts`; returns its base offset.
fn append_records(log: &mut PartitionLog, records: &[(&str, Option<&str>)], ts: i64) -> i64 {
    let records: Vec<TestRecord<'_>> = records
        .iter()
        .map(|(k, v)| TestRecord {
            key: Some(k.as_bytes()),
            value: v.map(str::as_bytes),
            timestamp_delta_ms: 0,
        })
        .collect();
    let mut batch = encode_batch(0, ts, &records);
    log.append(&mut batch, ts).unwrap().base_offset
}

/// `key = value` updates, one record per batch, in order.
fn append_each(log: &mut PartitionLog, updates: &[(String, Option<String>)], ts: i64) {
    for (key, value) in updates {
        append_records(log, &[(key, value.as_deref())], ts);
    }
}

/// Seals the active segment (a roll by `segment.ms` long after the data).
fn seal(log: &mut PartitionLog) {
    log.maybe_roll(T0 + 30 * DAY_MS).unwrap();
}

/// Every record from `from` to the log end as (offset, key, value), decoded the way clients
/// decode them (CRC checked).
fn records_from(log: &PartitionLog, from: i64) -> Vec<(i64, String, Option<String>)> {
    let read = log.read(from, usize::MAX >> 1, i64::MAX, true).unwrap();
    for (_, range) in BatchIter::new(&read.records) {
        validate_stored_batch(&read.records[range]).expect("every stored batch keeps a valid CRC");
    }
    let mut bytes = Bytes::from(read.records.to_vec());
    let sets = RecordBatchDecoder::decode_all(&mut bytes).unwrap();
    sets.into_iter()
        .flat_map(|set| set.records)
        .map(|r| {
            let text = |b: Option<Bytes>| b.map(|b| String::from_utf8(b.to_vec()).unwrap());
            (r.offset, text(r.key).unwrap(), text(r.value))
        })
        .collect()
}

fn records(log: &PartitionLog) -> Vec<(i64, String, Option<String>)> {
    records_from(log, log.log_start_offset())
}

fn clean(
    log: &Mutex<PartitionLog>,
    cleaner: &mut LogCleaner,
    first_dirty: Option<i64>,
    hw: i64,
    now: i64,
) -> CleanStats {
    let to_clean = log.lock().log_to_clean(first_dirty, hw, now).unwrap();
    cleaner.clean(log, &to_clean, now).unwrap()
}

fn updates(keys: usize, rounds: usize) -> Vec<(String, Option<String>)> {
    (0..rounds)
        .flat_map(|round| (0..keys).map(move |k| (format!("k{k}"), Some(format!("v{round}")))))
        .collect()
}

/// The latest record of each key as key → (offset, value).
fn latest(records: &[(i64, String, Option<String>)]) -> BTreeMap<String, (i64, Option<String>)> {
    records.iter().map(|(o, k, v)| (k.clone(), (*o, v.clone()))).collect()
}

#[test]
fn the_latest_value_of_each_key_survives_at_its_original_offset() {
    let root = tempfile::tempdir().unwrap();
    let mut log = open(root.path(), compacted());
    append_each(&mut log, &updates(5, 10), T0);
    // A multi-record batch that loses some records is rebuilt, not dropped.
    let mixed = append_records(&mut log, &[("a", Some("a1")), ("b", Some("b1")), ("c", Some("c1"))], T0);
    append_records(&mut log, &[("b", Some("b2"))], T0);
    seal(&mut log);
    let before = records(&log);
    let expected = latest(&before);
    let end = log.log_end_offset();
    let size_before = log.size_bytes();
    let log = Mutex::new(log);

    let stats = clean(&log, &mut cleaner(1 << 20), None, end, T0 + 1);
    assert!(!stats.abandoned);
    assert_eq!(stats.end_offset, end, "everything below the active segment was cleaned");
    let log = log.into_inner();
    let after = records(&log);
    assert_eq!(after.len(), expected.len(), "one record per key: {after:?}");
    assert_eq!(latest(&after), expected, "latest values at their original offsets");
    assert!(log.size_bytes() < size_before / 3);
    assert_eq!(log.log_end_offset(), end);

    // The rebuilt batch keeps its base offset and offset range, loses b1, and has a valid CRC.
    let read = log.read(mixed, 1 << 20, i64::MAX, true).unwrap();
    let header = first_header(&read.records);
    assert_eq!(
        (header.base_offset, header.last_offset(), header.records_count),
        (mixed, mixed + 2, 2)
    );
    assert_eq!(header.max_timestamp, T0);

    // Offset gaps: a fetch offset in a gap gets the first batch whose last offset is >= it.
    let gap = mixed + 1; // b1's offset, removed
    let read = log.read(gap, 1 << 20, i64::MAX, true).unwrap();
    assert_eq!(batch_offsets(&read.records)[0], (mixed, mixed + 2));
    let first_kept = after[0].0;
    assert!(first_kept > 0, "the earliest updates went");
    let read = log.read(0, 1 << 20, i64::MAX, true).unwrap();
    assert_eq!(first_header(&read.records).base_offset, first_kept);
    assert_eq!(records_from(&log, 1), after, "from inside the leading gap");
    // ListOffsets by timestamp still finds the first batch.
    assert_eq!(log.offset_for_timestamp(T0).unwrap().map(|(o, _)| o), Some(first_kept));

    // Reopened, with rebuilt-or-sane indexes and no leftovers, it reads the same.
    log.close().unwrap();
    let log = open(root.path(), compacted());
    assert_eq!(records(&log), after);
    assert!(files(root.path())
        .iter()
        .all(|f| !f.ends_with(".cleaned") && !f.ends_with(".swap")));
}

#[test]
fn tombstones_survive_until_delete_retention_ms_then_vanish() {
    let root = tempfile::tempdir().unwrap();
    let mut log = open(root.path(), compacted());
    append_each(&mut log, &updates(4, 3), T0);
    append_records(&mut log, &[("k1", None)], T0 + 10);
    append_records(&mut log, &[("k3", None)], T0 + 10);
    seal(&mut log);
    let end = log.log_end_offset();
    let log = Mutex::new(log);
    let mut cleaner = cleaner(1 << 20);

    let stats = clean(&log, &mut cleaner, None, end, T0 + 1_000);
    let kept = records(&log.lock());
    let keys: Vec<(&str, bool)> = kept.iter().map(|(_, k, v)| (k.as_str(), v.is_some())).collect();
    assert_eq!(
        keys,
        vec![("k0", true), ("k2", true), ("k1", false), ("k3", false)],
        "older values of deleted keys go, their tombstones stay"
    );
    let deadline = stats.tombstone_deadline_ms.expect("kept tombstones come due");
    assert_eq!(deadline, T0 + 10 + DAY_MS + 1);

    // Not yet: the tombstones stay.
    clean(&log, &mut cleaner, Some(stats.end_offset), end, T0 + 10 + DAY_MS);
    assert_eq!(records(&log.lock()).len(), 4);
    // Past delete.retention.ms: gone, with nothing older resurfacing.
    let stats = clean(&log, &mut cleaner, Some(stats.end_offset), end, deadline);
    let kept = records(&log.lock());
    let keys: Vec<&str> = kept.iter().map(|(_, k, _)| k.as_str()).collect();
    assert_eq!(keys, vec!["k0", "k2"]);
    assert_eq!(stats.tombstone_deadline_ms, None);
}

#[test]
fn the_active_segment_and_offsets_at_or_above_the_high_watermark_are_untouched() {
    let root = tempfile::tempdir().unwrap();
    let mut log = open(root.path(), compacted());
    append_each(&mut log, &updates(3, 20), T0);
    assert!(log.segment_count() > 4);
    let end = log.log_end_offset();
    let high_watermark = end / 2;
    let before = records(&log);
    let log = Mutex::new(log);

    let to_clean = log.lock().log_to_clean(None, high_watermark, T0).unwrap();
    let stats = cleaner(1 << 20).clean(&log, &to_clean, T0).unwrap();
    assert!(stats.end_offset <= high_watermark);
    assert!(stats.end_offset > 0);
    let log = log.into_inner();
    let after = records(&log);
    let tail = |records: &[(i64, String, Option<String>)]| -> Vec<(i64, String, Option<String>)> {
        records.iter().filter(|r| r.0 >= stats.end_offset).cloned().collect()
    };
    assert_eq!(
        tail(&after),
        tail(&before),
        "nothing at or above the cleaned range changed"
    );
    assert!(
        after.iter().filter(|r| r.0 >= high_watermark).count()
            == before.iter().filter(|r| r.0 >= high_watermark).count()
    );
    assert!(after.len() < before.len(), "below the high watermark, duplicates went");

    // The active segment alone (everything in one segment) is never cleaned.
    let root = tempfile::tempdir().unwrap();
    let mut log = open(
        root.path(),
        LogConfig {
            segment_bytes: 1 << 20,
            ..compacted()
        },
    );
    append_each(&mut log, &updates(3, 5), T0);
    let end = log.log_end_offset();
    let log = Mutex::new(log);
    let to_clean = log.lock().log_to_clean(None, end, T0).unwrap();
    assert!(to_clean.is_empty());
    assert!(!to_clean.needs_cleaning());
    let stats = cleaner(1 << 20).clean(&log, &to_clean, T0).unwrap();
    assert_eq!(stats.segments_replaced, 0);
    assert_eq!(records(&log.lock()).len(), 15);
}

#[test]
fn a_dirty_ratio_below_min_cleanable_dirty_ratio_means_no_cleaning() {
    let root = tempfile::tempdir().unwrap();
    let config = LogConfig {
        min_cleanable_dirty_ratio: 0.5,
        ..compacted()
    };
    let mut log = open(root.path(), config);
    append_each(&mut log, &updates(50, 1), T0); // distinct keys: cleaning keeps them all
    seal(&mut log);
    let end = log.log_end_offset();
    let to_clean = log.log_to_clean(None, end, T0).unwrap();
    assert_eq!(to_clean.dirty_ratio(), 1.0, "never cleaned: all dirty");
    assert!(to_clean.needs_cleaning());

    // Cleaned up to `end`, then a little more arrives: dirty / (clean + dirty) < 0.5.
    append_each(&mut log, &updates(3, 1), T0);
    seal(&mut log);
    let new_end = log.log_end_offset();
    let to_clean = log.log_to_clean(Some(end), new_end, T0).unwrap();
    assert!(to_clean.dirty_bytes() > 0);
    assert!(to_clean.dirty_ratio() < 0.5, "ratio {}", to_clean.dirty_ratio());
    assert!(!to_clean.needs_cleaning());

    // min.compaction.lag.ms keeps young segments out of reach altogether.
    log.update_config(LogConfig {
        min_compaction_lag_ms: DAY_MS,
        ..log.config().clone()
    });
    let to_clean = log.log_to_clean(None, new_end, T0 + 1_000).unwrap();
    assert!(to_clean.is_empty());
    let to_clean = log.log_to_clean(None, new_end, T0 + 2 * DAY_MS).unwrap();
    assert!(!to_clean.is_empty());
}

#[test]
fn a_dedupe_buffer_too_small_for_every_key_cleans_a_prefix_correctly() {
    let root = tempfile::tempdir().unwrap();
    let mut log = open(root.path(), compacted());
    // k0 x5, k1 x5, ..., k5 x5, then one last k0.
    let mut writes: Vec<(String, Option<String>)> = (0..6)
        .flat_map(|k| (0..5).map(move |v| (format!("k{k}"), Some(format!("v{v}")))))
        .collect();
    writes.push(("k0".into(), Some("last".into())));
    // A tombstone past what the first pass can map must outlive it, expired or not, or k4's
    // older values (also unmapped) would come back.
    writes.push(("k4".into(), None));
    append_each(&mut log, &writes, T0);
    seal(&mut log);
    let end = log.log_end_offset();
    let mut expected = latest(&records(&log));
    expected.remove("k4");
    let now = T0 + 2 * DAY_MS; // every tombstone has expired
    let log = Mutex::new(log);
    // 4 slots of 24 bytes: room for 3 keys.
    let mut cleaner = cleaner(4 * 24);

    let stats = clean(&log, &mut cleaner, None, end, now);
    assert_eq!(
        stats.end_offset, 15,
        "k0, k1 and k2 (offsets 0..15) fit; k3 at 15 did not"
    );
    let after = records(&log.lock());
    let below: Vec<(i64, &str)> = after.iter().filter(|r| r.0 < 15).map(|r| (r.0, r.1.as_str())).collect();
    assert_eq!(below, vec![(4, "k0"), (9, "k1"), (14, "k2")]);
    assert_eq!(
        after.iter().filter(|r| r.0 >= 15).count(),
        17,
        "the unmapped rest is untouched"
    );

    let mut first_dirty = stats.end_offset;
    for _ in 0..5 {
        first_dirty = clean(&log, &mut cleaner, Some(first_dirty), end, now).end_offset;
    }
    assert_eq!(first_dirty, end);
    let after = records(&log.lock());
    assert_eq!(after.len(), 5, "{after:?}");
    assert_eq!(latest(&after), expected);
    assert_eq!(expected["k0"], (30, Some("last".to_string())));
}

/// `plain` (an uncompressed batch) with its records section gzipped, as a producer sends it.
fn gzipped(plain: &[u8]) -> Vec<u8> {
    use kafka_protocol::compression::{Compressor, Gzip};
    let mut gzip = plain[..61].to_vec();
    Gzip::compress(&mut gzip, |buf: &mut bytes::BytesMut| {
        buf.extend_from_slice(&plain[61..]);
        Ok(())
    })
    .unwrap();
    let len = (gzip.len() - 12) as i32;
    gzip[8..12].copy_from_slice(&len.to_be_bytes());
    gzip[21..23].copy_from_slice(&1i16.to_be_bytes()); // attributes: gzip
    let crc = crc32c::crc32c(&gzip[CRC_COVERED_FROM..]);
    gzip[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
    gzip
}

#[test]
fn compressed_batches_are_rebuilt_with_their_codec() {
    let root = tempfile::tempdir().unwrap();
    let mut log = open(root.path(), compacted());
    let plain = encode_batch(
        0,
        T0,
        &[
            TestRecord {
                key: Some(b"x"),
                value: Some(b"1"),
                timestamp_delta_ms: 0,
            },
            TestRecord {
                key: Some(b"y"),
                value: Some(b"1"),
                timestamp_delta_ms: 1,
            },
        ],
    );
    log.append(&mut gzipped(&plain), T0).unwrap();
    append_records(&mut log, &[("x", Some("2"))], T0);
    seal(&mut log);
    let end = log.log_end_offset();
    let log = Mutex::new(log);
    clean(&log, &mut cleaner(1 << 20), None, end, T0);
    let log = log.into_inner();
    let read = log.read(0, 1 << 20, i64::MAX, true).unwrap();
    assert_eq!(first_header(&read.records).compression(), 1, "still gzip");
    let kept: Vec<(i64, String)> = records(&log).into_iter().map(|r| (r.0, r.1)).collect();
    assert_eq!(kept, vec![(1, "y".to_string()), (2, "x".to_string())]);
}

#[test]
fn a_stored_batch_decompressing_past_max_message_bytes_fails_the_pass_and_changes_nothing() {
    let root = tempfile::tempdir().unwrap();
    let config = LogConfig {
        max_message_bytes: 5_000,
        ..compacted()
    };
    let mut log = open(root.path(), config);
    append_records(&mut log, &[("x", Some("1"))], T0);
    // 20 KB of zeros gzip to a batch far below max.message.bytes (as appended before the
    // produce path checked decompressed sizes); decompressed, they are four times over it.
    let zeros = "0".repeat(20_000);
    let bomb = gzipped(&encode_batch(
        0,
        T0,
        &[TestRecord {
            key: Some(b"x"),
            value: Some(zeros.as_bytes()),
            timestamp_delta_ms: 0,
        }],
    ));
    assert!(bomb.len() < 1_000);
    log.append(&mut bomb.clone(), T0).unwrap();
    append_records(&mut log, &[("x", Some("3")), ("y", Some("1"))], T0);
    seal(&mut log);
    let before = records(&log);
    let files_before = segment_files(root.path());
    let end = log.log_end_offset();
    let log = Mutex::new(log);
    let to_clean = log.lock().log_to_clean(None, end, T0).unwrap();
    let err = cleaner(1 << 20).clean(&log, &to_clean, T0).unwrap_err();
    match &err {
        LogError::UncleanableBatch { base_offset: 1, source } => {
            assert_eq!(source.response_error(), ResponseError::RecordListTooLarge, "{source}")
        }
        other => panic!("expected the batch at offset 1 to be uncleanable, got {other}"),
    }
    let log = log.into_inner();
    assert_eq!(records(&log), before, "every record is still there");
    assert_eq!(
        segment_files(root.path()),
        files_before,
        "no cleaned segment was left behind"
    );
}

/// Paths of every file below `dir`, sorted.
fn segment_files(dir: &std::path::Path) -> Vec<String> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            names.extend(segment_files(&path));
        } else {
            names.push(path.display().to_string());
        }
    }
    names.sort();
    names
}

#[test]
fn a_pass_is_abandoned_when_retention_removed_its_segments_meanwhile() {
    let root = tempfile::tempdir().unwrap();
    let config = LogConfig {
        cleanup_policy_delete: true,
        retention_ms: DAY_MS,
        ..compacted()
    };
    let mut log = open(root.path(), config);
    append_each(&mut log, &updates(3, 20), T0);
    seal(&mut log);
    let end = log.log_end_offset();
    let log = Mutex::new(log);
    let to_clean = log.lock().log_to_clean(None, end, T0).unwrap();
    // Retention runs while the cleaner reads (`compact,delete`).
    assert!(log.lock().delete_retained_segments(T0 + 2 * DAY_MS, end).unwrap() > 0);
    let before = records(&log.lock());
    let stats = cleaner(1 << 20).clean(&log, &to_clean, T0).unwrap();
    assert!(stats.abandoned);
    assert_eq!(records(&log.lock()), before);
    assert!(files(root.path())
        .iter()
        .all(|f| !f.ends_with(".cleaned") && !f.ends_with(".swap")));
}

#[test]
fn a_pass_is_abandoned_when_the_log_was_truncated_meanwhile() {
    let root = tempfile::tempdir().unwrap();
    let mut log = open(root.path(), compacted());
    append_each(&mut log, &updates(3, 20), T0);
    seal(&mut log);
    let end = log.log_end_offset();
    let log = Mutex::new(log);
    let to_clean = log.lock().log_to_clean(None, end, T0).unwrap();
    // A follower truncating to its leader's history drops the newest values the cleaner has
    // mapped; the older values they would have superseded must stay.
    log.lock().truncate_to(end - 3).unwrap();
    let before = records(&log.lock());
    let stats = cleaner(1 << 20).clean(&log, &to_clean, T0).unwrap();
    assert!(stats.abandoned);
    assert_eq!(records(&log.lock()), before);
}

#[test]
fn leftover_cleaned_files_are_deleted_and_swap_files_completed_on_open() {
    // A log, and a copy of it cleaned into one merged segment: the swap file a crash left.
    let root = tempfile::tempdir().unwrap();
    let copy = tempfile::tempdir().unwrap();
    let write = |dir: &Path| {
        let mut log = open(dir, compacted());
        append_each(&mut log, &updates(3, 10), T0);
        seal(&mut log);
        log
    };
    let log = write(root.path());
    let sealed_before = log.segment_count() - 1;
    assert!(sealed_before >= 3);
    let end = log.log_end_offset();
    log.close().unwrap();
    let mut cleaned = write(copy.path());
    cleaned.update_config(LogConfig {
        segment_bytes: 1 << 20,
        ..compacted()
    });
    let cleaned = Mutex::new(cleaned);
    clean(&cleaned, &mut cleaner(1 << 20), None, end, T0);
    let cleaned = cleaned.into_inner();
    assert_eq!(
        cleaned.segment_count(),
        2,
        "merged into one sealed segment beside the active one"
    );
    let expected = records(&cleaned);

    let dir = partition_dir(root.path());
    let copy_dir = partition_dir(copy.path());
    std::fs::copy(
        copy_dir.join("00000000000000000000.log"),
        dir.join("00000000000000000000.log.swap"),
    )
    .unwrap();
    std::fs::write(dir.join("00000000000000000000.index.swap"), b"half").unwrap();
    std::fs::write(dir.join("00000000000000000000.timeindex.cleaned"), b"x").unwrap();
    std::fs::write(dir.join(format!("{:020}.log.cleaned", end)), b"unfinished").unwrap();

    let log = open(root.path(), compacted());
    assert_eq!(records(&log), expected, "the swap completed: old segments replaced");
    assert_eq!(log.segment_count(), 2);
    assert_eq!(log.log_end_offset(), end);
    assert!(files(root.path())
        .iter()
        .all(|f| !f.ends_with(".cleaned") && !f.ends_with(".swap")));

    // A swap interrupted after the old first segment was already deleted completes as well.
    drop(log);
    let root = tempfile::tempdir().unwrap();
    write(root.path()).close().unwrap();
    let dir = partition_dir(root.path());
    std::fs::remove_file(dir.join("00000000000000000000.log")).unwrap();
    std::fs::copy(
        copy_dir.join("00000000000000000000.log"),
        dir.join("00000000000000000000.log.swap"),
    )
    .unwrap();
    let log = open(root.path(), compacted());
    assert_eq!(records(&log), expected);
}

/// The same key written by a committed plain batch and then by a transactional batch whose
/// transaction was aborted: the cleaner keeps the committed value (Kafka's cleaner leaves
/// aborted records out of its offset map), so reading the key afterwards still finds it.
#[test]
fn an_aborted_transactions_record_never_replaces_a_committed_one() {
    use crate::log::txn_index::AbortedTxn;
    let dir = tempfile::tempdir().unwrap();
    let log = Mutex::new(PartitionLog::open(dir.path(), compacted(), &FileCache::new(2), T0).unwrap());
    {
        let mut log = log.lock();
        append_records(&mut log, &[("k", Some("committed"))], T0);
        let records = [TestRecord {
            key: Some(b"k"),
            value: Some(b"aborted"),
            timestamp_delta_ms: 0,
        }];
        let mut batch = encode_batch(0, T0, &records);
        batch[21..23].copy_from_slice(&0x10i16.to_be_bytes()); // transactional
        batch[43..51].copy_from_slice(&7i64.to_be_bytes()); // producer id 7
        let crc = crc32c::crc32c(&batch[CRC_COVERED_FROM..]);
        batch[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
        let aborted_at = log.append(&mut batch, T0).unwrap().base_offset;
        // Stands where the abort marker would be (the index takes only offsets in the log).
        let marker_at = append_records(&mut log, &[("other", Some("x"))], T0);
        log.append_aborted_txn(AbortedTxn {
            producer_id: 7,
            first_offset: aborted_at,
            last_offset: marker_at,
            last_stable_offset: aborted_at,
        })
        .unwrap();
        seal(&mut log);
    }
    let end = log.lock().log_end_offset();
    clean(&log, &mut cleaner(1 << 20), None, end, T0);
    let kept = records(&log.lock());
    assert!(
        kept.iter()
            .any(|(o, k, v)| *o == 0 && k == "k" && v.as_deref() == Some("committed")),
        "the committed value of k was cleaned away: {kept:?}"
    );
}

/// One transactional batch of producer `pid` holding `key = value`.
fn append_txn_record(log: &mut PartitionLog, pid: i64, key: &str, value: &str, ts: i64) -> i64 {
    let records = [TestRecord {
        key: Some(key.as_bytes()),
        value: Some(value.as_bytes()),
        timestamp_delta_ms: 0,
    }];
    let mut batch = encode_batch(0, ts, &records);
    batch[21..23].copy_from_slice(&0x10i16.to_be_bytes()); // transactional
    batch[43..51].copy_from_slice(&pid.to_be_bytes());
    let crc = crc32c::crc32c(&batch[CRC_COVERED_FROM..]);
    batch[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
    log.append(&mut batch, ts).unwrap().base_offset
}

fn append_marker(log: &mut PartitionLog, pid: i64, kind: sluice_protocol::control::ControlType, ts: i64) -> i64 {
    let mut marker = sluice_protocol::control::encode_control_batch(pid, 0, 0, kind, ts);
    log.append(&mut marker, ts).unwrap().base_offset
}

/// The producer ids of the markers left in the log, in order.
fn markers(log: &PartitionLog) -> Vec<i64> {
    let read = log
        .read(log.log_start_offset(), usize::MAX >> 1, i64::MAX, true)
        .unwrap();
    BatchIter::new(&read.records)
        .filter(|(h, _)| h.is_control())
        .map(|(h, _)| h.producer_id)
        .collect()
}

/// Kafka's cleaner with transactions: an aborted transaction's records are removed, and a
/// marker goes once its transaction has no record left and delete.retention.ms has passed;
/// a committed transaction whose record survives keeps its marker.
#[test]
fn aborted_data_and_markers_without_data_are_cleaned_away_once_past_delete_retention() {
    use crate::log::txn_index::AbortedTxn;
    use sluice_protocol::control::ControlType;
    let dir = tempfile::tempdir().unwrap();
    let log = Mutex::new(PartitionLog::open(dir.path(), compacted(), &FileCache::new(2), T0).unwrap());
    {
        let mut log = log.lock();
        let aborted_at = append_txn_record(&mut log, 7, "a", "aborted", T0);
        let abort_marker = append_marker(&mut log, 7, ControlType::Abort, T0);
        log.append_aborted_txn(AbortedTxn {
            producer_id: 7,
            first_offset: aborted_at,
            last_offset: abort_marker,
            last_stable_offset: aborted_at,
        })
        .unwrap();
        append_txn_record(&mut log, 8, "b", "committed-then-replaced", T0);
        append_marker(&mut log, 8, ControlType::Commit, T0);
        append_records(&mut log, &[("b", Some("later"))], T0);
        append_txn_record(&mut log, 9, "c", "committed-and-kept", T0);
        append_marker(&mut log, 9, ControlType::Commit, T0);
        seal(&mut log);
    }
    let end = log.lock().log_end_offset();
    // Within delete.retention.ms: the aborted record goes, every marker stays.
    clean(&log, &mut cleaner(1 << 20), None, end, T0 + 1_000);
    // Data values only: a marker's record has a binary key (version 0, then its type).
    let values = |log: &PartitionLog| -> Vec<String> {
        records(log)
            .into_iter()
            .filter(|(_, k, _)| !k.starts_with('\0'))
            .filter_map(|(_, _, v)| v)
            .collect()
    };
    assert_eq!(values(&log.lock()), vec!["later", "committed-and-kept"]);
    assert_eq!(markers(&log.lock()), vec![7, 8, 9]);
    // Past it: the markers of transactions with nothing left go; producer 9's stays.
    clean(&log, &mut cleaner(1 << 20), Some(0), end, T0 + 2 * DAY_MS);
    assert_eq!(values(&log.lock()), vec!["later", "committed-and-kept"]);
    assert_eq!(markers(&log.lock()), vec![9]);
}

use sluice_protocol::batch::test_support::encode_simple_batch;
use kafka_protocol::error::ResponseError;
use sluice_protocol::batch::validate_batch;

use super::*;
use crate::log::LogError;
use std::sync::Arc;

#[test]
fn append_assigns_consecutive_offsets_and_read_returns_stored_batches() {
    let root = tempfile::tempdir().unwrap();
    let mut log = open(root.path(), LogConfig::default());
    assert_eq!(
        (
            append(&mut log, 2, 10, T0),
            append(&mut log, 3, 10, T0),
            append(&mut log, 1, 10, T0)
        ),
        (0, 2, 5)
    );
    assert_eq!(log.log_end_offset(), 6);

    let read = log.read(0, 1 << 20, 6, true).unwrap();
    assert_eq!(batch_offsets(&read.records), vec![(0, 1), (2, 4), (5, 5)]);
    for (_, range) in BatchIter::new(&read.records) {
        validate_batch(&read.records[range]).expect("stored batch keeps a valid CRC");
    }
    assert_eq!((read.log_start_offset, read.log_end_offset), (0, 6));
}

#[test]
fn append_returns_offsets_and_keeps_several_batches_of_one_request_consecutive() {
    let root = tempfile::tempdir().unwrap();
    let mut log = open(root.path(), LogConfig::default());
    append(&mut log, 4, 10, T0);
    let mut blob = encode_simple_batch(2, 10, T0 + 5);
    blob.extend_from_slice(&encode_simple_batch(3, 10, T0 + 1));
    let info = log.append(&mut blob, T0).unwrap();
    assert_eq!((info.base_offset, info.last_offset, info.log_start_offset), (4, 8, 0));
    assert_eq!(
        (
            info.log_append_time_ms,
            info.max_timestamp,
            info.offset_of_max_timestamp
        ),
        (-1, T0 + 6, 5)
    );
    assert_eq!(
        batch_offsets(&log.read(4, 1 << 20, 9, true).unwrap().records),
        vec![(4, 5), (6, 8)]
    );
}

#[test]
fn fetch_offset_inside_a_batch_returns_that_whole_batch() {
    let root = tempfile::tempdir().unwrap();
    let mut log = open(root.path(), LogConfig::default());
    append(&mut log, 2, 10, T0);
    append(&mut log, 5, 10, T0);
    for offset in 2..7 {
        let read = log.read(offset, 1 << 20, 7, true).unwrap();
        assert_eq!(batch_offsets(&read.records), vec![(2, 6)], "fetch offset {offset}");
    }
}

#[test]
fn read_at_log_end_is_empty_and_past_it_is_out_of_range() {
    let root = tempfile::tempdir().unwrap();
    let mut log = open(root.path(), LogConfig::default());
    assert!(
        log.read(0, 100, 0, true).unwrap().records.is_empty(),
        "empty log, offset 0 = log end"
    );
    append(&mut log, 3, 10, T0);
    assert!(log.read(3, 100, 3, true).unwrap().records.is_empty());
    let err = log.read(4, 100, 4, true).unwrap_err();
    assert!(
        matches!(
            err,
            LogError::OffsetOutOfRange {
                offset: 4,
                log_start: 0,
                log_end: 3
            }
        ),
        "{err}"
    );
    assert_eq!(err.response_error(), ResponseError::OffsetOutOfRange);
    assert!(matches!(
        log.read(-1, 100, 3, true),
        Err(LogError::OffsetOutOfRange { .. })
    ));
}

#[test]
fn max_bytes_returns_whole_batches_and_the_first_batch_even_when_larger() {
    let root = tempfile::tempdir().unwrap();
    let mut log = open(root.path(), LogConfig::default());
    for _ in 0..3 {
        append(&mut log, 2, 100, T0);
    }
    let batch_len = first_header(&log.read(0, 1, 6, true).unwrap().records).total_len();

    let read = log.read(0, 2 * batch_len - 1, 6, true).unwrap();
    assert_eq!(batch_offsets(&read.records), vec![(0, 1)]);
    let read = log.read(0, 2 * batch_len, 6, true).unwrap();
    assert_eq!(batch_offsets(&read.records), vec![(0, 1), (2, 3)]);

    let read = log.read(1, 10, 6, true).unwrap();
    assert_eq!(
        batch_offsets(&read.records),
        vec![(0, 1)],
        "first batch whole despite max_bytes"
    );
    assert!(
        log.read(1, 10, 6, false).unwrap().records.is_empty(),
        "min_one_message off"
    );
}

#[test]
fn max_offset_excludes_batches_at_or_past_the_high_watermark() {
    let root = tempfile::tempdir().unwrap();
    let mut log = open(root.path(), LogConfig::default());
    append(&mut log, 2, 10, T0);
    append(&mut log, 3, 10, T0);
    append(&mut log, 1, 10, T0);
    assert_eq!(
        batch_offsets(&log.read(0, 1 << 20, 2, true).unwrap().records),
        vec![(0, 1)]
    );
    assert_eq!(
        batch_offsets(&log.read(0, 1 << 20, 3, true).unwrap().records),
        vec![(0, 1), (2, 4)]
    );
    assert!(log.read(0, 1 << 20, 0, true).unwrap().records.is_empty());
    assert!(log.read(5, 1 << 20, 5, true).unwrap().records.is_empty());
}

#[test]
fn segments_roll_by_size_and_reads_cross_segment_boundaries() {
    let root = tempfile::tempdir().unwrap();
    let mut log = open(root.path(), small_segments());
    for i in 0..30 {
        assert_eq!(append(&mut log, 2, 80, T0 + i), 2 * i);
    }
    assert!(log.segment_count() > 5, "{} segments", log.segment_count());
    assert!(files(root.path()).contains(&"00000000000000000000.log".to_string()));
    assert_eq!(log_files(root.path()).len(), log.segment_count());
    for file in log_files(root.path()) {
        let len = std::fs::metadata(partition_dir(root.path()).join(&file)).unwrap().len();
        assert!(len <= 1_000, "{file} has {len} bytes");
    }

    let all = log.read(0, 1 << 20, 60, true).unwrap();
    let expected: Vec<(i64, i64)> = (0..30).map(|i| (2 * i, 2 * i + 1)).collect();
    assert_eq!(batch_offsets(&all.records), expected);
    assert_eq!(all.records.len() as u64, log.size_bytes());
}

#[test]
fn index_lookup_finds_every_offset_in_a_log_with_many_segments() {
    let root = tempfile::tempdir().unwrap();
    let config = LogConfig {
        segment_bytes: 2_000,
        index_interval_bytes: 300,
        ..LogConfig::default()
    };
    let mut log = open(root.path(), config.clone());
    let mut batches = Vec::new();
    for i in 0..400usize {
        let records = 1 + i % 3;
        let base = append(&mut log, records, 20 + i % 50, T0 + i as i64);
        batches.push((base, base + records as i64 - 1));
    }
    assert!(log.segment_count() > 20);
    let index_bytes: u64 = files(root.path())
        .iter()
        .filter(|f| f.ends_with(".index"))
        .map(|f| std::fs::metadata(partition_dir(root.path()).join(f)).unwrap().len())
        .sum();
    assert!(index_bytes > 0, "sparse index entries were written");

    let check = |log: &PartitionLog| {
        for &(base, last) in &batches {
            for offset in base..=last {
                let read = log.read(offset, 1, log.log_end_offset(), true).unwrap();
                assert_eq!(batch_offsets(&read.records), vec![(base, last)], "offset {offset}");
            }
        }
    };
    check(&log);
    log.close().unwrap();
    check(&PartitionLog::open(&partition_dir(root.path()), config, &FileCache::unbounded(), T0).unwrap());
}

#[test]
fn append_refuses_a_batch_over_max_message_bytes() {
    let root = tempfile::tempdir().unwrap();
    let mut log = open(
        root.path(),
        LogConfig {
            max_message_bytes: 500,
            ..LogConfig::default()
        },
    );
    append(&mut log, 1, 10, T0);
    let mut big = encode_simple_batch(2, 400, T0);
    let err = log.append(&mut big, T0).unwrap_err();
    assert!(matches!(err, LogError::MessageTooLarge { max: 500, .. }), "{err}");
    assert_eq!(err.response_error(), ResponseError::MessageTooLarge);
    assert_eq!(log.log_end_offset(), 1);
}

#[test]
fn append_refuses_bytes_that_are_not_whole_batches() {
    let root = tempfile::tempdir().unwrap();
    let mut log = open(root.path(), LogConfig::default());
    let mut batch = encode_simple_batch(2, 10, T0);
    let len = batch.len();
    let err = log.append(&mut batch[..len - 1], T0).unwrap_err();
    assert_eq!(err.response_error(), ResponseError::CorruptMessage, "{err}");
    assert!(log.append(&mut [], T0).is_err());
    assert_eq!((log.log_end_offset(), log.size_bytes()), (0, 0));
}

#[test]
fn append_as_leader_stamps_the_partition_leader_epoch() {
    let root = tempfile::tempdir().unwrap();
    let mut log = open(root.path(), LogConfig::default());
    let mut batch = encode_simple_batch(2, 10, T0);
    log.append_as_leader(&mut batch, 7, T0).unwrap();
    let read = log.read(0, 1 << 20, 2, true).unwrap();
    let header = validate_batch(&read.records).unwrap();
    assert_eq!(header.partition_leader_epoch, 7);
}

#[test]
fn follower_append_keeps_offsets_and_refuses_going_backwards() {
    let root = tempfile::tempdir().unwrap();
    let mut leader = open(root.path(), LogConfig::default());
    append(&mut leader, 2, 10, T0);
    append(&mut leader, 3, 10, T0);
    let fetched = leader.read(0, 1 << 20, 5, true).unwrap().records;

    let follower_root = tempfile::tempdir().unwrap();
    let mut follower = open(follower_root.path(), LogConfig::default());
    let info = follower.append_as_follower(&fetched, T0).unwrap();
    assert_eq!(
        (info.base_offset, info.last_offset, follower.log_end_offset()),
        (0, 4, 5)
    );
    assert_eq!(follower.read(0, 1 << 20, 5, true).unwrap().records, fetched);

    let err = follower.append_as_follower(&fetched, T0).unwrap_err();
    assert!(
        matches!(
            err,
            LogError::UnexpectedAppendOffset {
                first_offset: 0,
                log_end: 5
            }
        ),
        "{err}"
    );
    let mut corrupt = fetched.to_vec();
    *corrupt.last_mut().unwrap() ^= 1;
    assert!(matches!(
        follower.append_as_follower(&corrupt, T0),
        Err(LogError::InvalidBatch(_))
    ));
}

#[test]
fn truncate_to_drops_later_batches_and_segments_and_appends_continue() {
    let root = tempfile::tempdir().unwrap();
    let mut log = open(root.path(), small_segments());
    for i in 0..20 {
        append(&mut log, 2, 80, T0 + i);
    }
    let segments_before = log.segment_count();
    log.truncate_to(11).unwrap();
    assert_eq!(log.log_end_offset(), 10, "the batch holding offset 11 went whole");
    assert!(log.segment_count() < segments_before);
    let expected: Vec<(i64, i64)> = (0..5).map(|i| (2 * i, 2 * i + 1)).collect();
    assert_eq!(
        batch_offsets(&log.read(0, 1 << 20, 10, true).unwrap().records),
        expected
    );
    assert_eq!(append(&mut log, 1, 10, T0), 10);
    assert_eq!(
        batch_offsets(&log.read(9, 1 << 20, 11, true).unwrap().records),
        vec![(8, 9), (10, 10)]
    );

    log.truncate_to(0).unwrap();
    assert_eq!(
        (log.log_start_offset(), log.log_end_offset(), log.size_bytes()),
        (0, 0, 0)
    );
    assert_eq!(
        files(root.path()),
        vec![
            "00000000000000000000.index",
            "00000000000000000000.log",
            "00000000000000000000.timeindex"
        ]
    );
}

#[test]
fn delete_removes_the_partition_directory() {
    let root = tempfile::tempdir().unwrap();
    let mut log = open(root.path(), LogConfig::default());
    append(&mut log, 2, 10, T0);
    log.delete().unwrap();
    assert!(!partition_dir(root.path()).exists());
}

#[test]
fn reads_across_segments_stop_at_max_bytes_and_max_offset() {
    let root = tempfile::tempdir().unwrap();
    let mut log = open(root.path(), small_segments());
    for i in 0..30 {
        append(&mut log, 2, 80, T0 + i);
    }
    let batch_len = first_header(&log.read(0, 1, 60, true).unwrap().records).total_len();
    assert!(log.segment_count() > 5);

    // From offset 3 (inside batch 2..3): ten whole batches, crossing several segments.
    let read = log.read(3, 10 * batch_len + batch_len / 2, 60, true).unwrap();
    let expected: Vec<(i64, i64)> = (1..11).map(|i| (2 * i, 2 * i + 1)).collect();
    assert_eq!(batch_offsets(&read.records), expected);

    // The high watermark cuts the read in a later segment.
    let read = log.read(3, 1 << 20, 25, true).unwrap();
    let expected: Vec<(i64, i64)> = (1..13).map(|i| (2 * i, 2 * i + 1)).collect();
    assert_eq!(batch_offsets(&read.records), expected);
}

#[test]
fn a_planned_read_sees_the_log_as_planned_and_sizes_its_buffer_by_the_bytes_present() {
    let root = tempfile::tempdir().unwrap();
    let mut log = filled(root.path(), small_segments(), 12);
    let end = log.log_end_offset();
    let size_then = log.size_bytes();
    let planned = log.plan_read(0, end, i32::MAX as usize).unwrap();
    // Appends after planning are not part of the read.
    append(&mut log, 2, 80, T0 + 20);
    let read = planned.read(i32::MAX as usize, true).unwrap();
    assert_eq!(batch_offsets(&read.records).last(), Some(&(end - 2, end - 1)));
    // A request for 2 GiB gets (and allocated for) the data there was.
    assert_eq!(read.records.len() as u64, size_then);
    assert_eq!((read.log_start_offset, read.log_end_offset), (0, end));
}

/// A log of many small segments through `cache`, whose retention (`retention.bytes=1`) keeps
/// only the active one.
fn retained_to_one_segment(dir: &Path, cache: &Arc<FileCache>) -> PartitionLog {
    let config = LogConfig {
        retention_bytes: 1,
        retention_ms: -1,
        ..small_segments()
    };
    let mut log = PartitionLog::open(dir, config, cache, T0).unwrap();
    for i in 0..30 {
        append(&mut log, 2, 80, T0 + i);
    }
    log
}

#[test]
fn a_planned_read_survives_retention_deleting_its_segments_while_their_files_are_open() {
    let root = tempfile::tempdir().unwrap();
    let dir = partition_dir(root.path());
    let mut log = retained_to_one_segment(&dir, &FileCache::unbounded());
    let planned = log.plan_read(0, i64::MAX, 1 << 20).unwrap();
    assert!(log.delete_retained_segments(T0, i64::MAX).unwrap() > 0);
    assert!(log.log_start_offset() > 0, "segment 0 is gone from the directory");
    assert!(!dir.join("00000000000000000000.log").exists());
    let read = planned.read(1 << 20, true).unwrap();
    assert_eq!(first_header(&read.records).base_offset, 0, "read through the open file");
    assert!(batch_offsets(&read.records).len() > 1);
}

#[test]
fn a_planned_read_whose_deleted_segment_the_cache_closed_is_told_to_retry() {
    let root = tempfile::tempdir().unwrap();
    // A cache of one file: segment 0's is closed by the time the read runs.
    let mut log = retained_to_one_segment(&partition_dir(root.path()), &FileCache::new(1));
    let planned = log.plan_read(0, i64::MAX, 1 << 20).unwrap();
    assert!(log.delete_retained_segments(T0, i64::MAX).unwrap() > 0);
    // A new segment at offset 0 would take the old name: never read in its place.
    match planned.read(1 << 20, true) {
        Err(e @ LogError::RemovedDuringRead { .. }) => {
            assert_eq!(e.response_error(), ResponseError::NotLeaderOrFollower, "{e}");
        }
        other => panic!("expected RemovedDuringRead, got {other:?}"),
    }
    let read = log.read(log.log_start_offset(), 1 << 20, i64::MAX, true).unwrap();
    assert_eq!(
        first_header(&read.records).base_offset,
        log.log_start_offset(),
        "the retry reads the log as it is"
    );
}

#[test]
fn a_planned_read_past_a_truncated_tail_is_an_error_not_a_panic() {
    let root = tempfile::tempdir().unwrap();
    let mut log = filled(root.path(), LogConfig::default(), 6);
    let planned = log.plan_read(4, i64::MAX, 1 << 20).unwrap();
    log.truncate_to(2).unwrap();
    match planned.read(1 << 20, true) {
        Err(LogError::TruncatedDuringRead { .. }) => {}
        other => panic!("expected TruncatedDuringRead, got {other:?}"),
    }
    assert_eq!(
        LogError::TruncatedDuringRead {
            path: String::new(),
            position: 0
        }
        .response_error(),
        ResponseError::NotLeaderOrFollower,
        "NOT_LEADER_OR_FOLLOWER: the client refreshes metadata and retries"
    );
    // Planned from offset 0, the read fails at the first byte the file no longer has.
    let planned = log.plan_read(0, i64::MAX, 1 << 20).unwrap();
    log.truncate_to(0).unwrap();
    assert!(planned.read(1 << 20, true).is_err());
}

#[test]
fn a_planned_read_of_a_sealed_segment_looks_its_index_up_after_planning() {
    let root = tempfile::tempdir().unwrap();
    let log = filled(root.path(), small_segments(), 30);
    assert!(log.segment_count() > 3);
    for offset in [0, 1, 7, 20, 33, 45] {
        let planned = log.plan_read(offset, i64::MAX, 1).unwrap();
        let read = planned.read(1, true).unwrap();
        let (base, last) = batch_offsets(&read.records)[0];
        assert!(
            base <= offset && offset <= last,
            "offset {offset} in batch {base}..={last}"
        );
        assert_eq!(read, log.read(offset, 1, i64::MAX, true).unwrap());
    }
}

use super::*;
use crate::log::LogError;

const HOUR_MS: i64 = 3_600_000;

#[test]
fn retention_by_time_deletes_old_sealed_segments_and_advances_log_start() {
    let root = tempfile::tempdir().unwrap();
    let config = LogConfig {
        retention_ms: 10 * HOUR_MS,
        ..small_segments()
    };
    let mut log = open(root.path(), config);
    for i in 0..8 {
        append(&mut log, 2, 80, T0 + i); // old data
    }
    let old_segments = log.segment_count() - 1;
    let fresh_from = log.log_end_offset();
    log.maybe_roll(T0 + 1_000_000_000).unwrap();
    for i in 0..8 {
        append(&mut log, 2, 80, T0 + 20 * HOUR_MS + i);
    }

    assert_eq!(
        log.delete_retained_segments(T0 + 9 * HOUR_MS, i64::MAX).unwrap(),
        0,
        "nothing is old enough yet"
    );
    let deleted = log.delete_retained_segments(T0 + 21 * HOUR_MS, i64::MAX).unwrap();
    assert_eq!(deleted, old_segments + 1);
    assert_eq!(log.log_start_offset(), fresh_from);
    assert!(!files(root.path()).contains(&"00000000000000000000.log".to_string()));
    assert!(!files(root.path()).contains(&"00000000000000000000.index".to_string()));
    assert!(!files(root.path()).contains(&"00000000000000000000.timeindex".to_string()));
    let err = log.read(0, 100, log.log_end_offset(), true).unwrap_err();
    assert!(matches!(err, LogError::OffsetOutOfRange { .. }));
    let read = log.read(fresh_from, 1 << 20, log.log_end_offset(), true).unwrap();
    assert_eq!(read.log_start_offset, fresh_from);
    assert_eq!(
        batch_offsets(&read.records).first(),
        Some(&(fresh_from, fresh_from + 1))
    );

    let far_future = T0 + 1_000 * HOUR_MS;
    log.delete_retained_segments(far_future, i64::MAX).unwrap();
    assert!(
        log.log_end_offset() > log.log_start_offset(),
        "the active segment is never deleted"
    );
}

#[test]
fn retention_by_bytes_keeps_the_log_under_the_limit() {
    let root = tempfile::tempdir().unwrap();
    let config = LogConfig {
        retention_bytes: 2_500,
        retention_ms: -1,
        ..small_segments()
    };
    let mut log = open(root.path(), config);
    for i in 0..40 {
        append(&mut log, 2, 80, T0 + i);
    }
    let size_before = log.size_bytes();
    let deleted = log.delete_retained_segments(T0, i64::MAX).unwrap();
    assert!(deleted > 0);
    // Like Kafka, whole segments go while the rest still exceeds the limit: the log ends up over
    // it by less than one segment, and never under it by a whole segment.
    let size = log.size_bytes();
    assert!(
        size > 2_500 - 1_000 && size < 2_500 + 1_000,
        "{size} bytes left of {size_before}"
    );
    assert!(log.log_start_offset() > 0);
    assert_eq!(log_files(root.path()).len(), log.segment_count());
    let first = log.read(log.log_start_offset(), 1, 80, true).unwrap();
    assert_eq!(first_header(&first.records).base_offset, log.log_start_offset());
}

#[test]
fn infinite_retention_deletes_nothing() {
    let root = tempfile::tempdir().unwrap();
    let mut log = open(
        root.path(),
        LogConfig {
            retention_ms: -1,
            ..small_segments()
        },
    );
    for i in 0..10 {
        append(&mut log, 2, 80, T0 + i);
    }
    assert_eq!(log.delete_retained_segments(i64::MAX, i64::MAX).unwrap(), 0);
    assert_eq!(log.log_start_offset(), 0);
}

#[test]
fn segment_ms_rolls_on_append_and_on_timer() {
    let root = tempfile::tempdir().unwrap();
    let mut log = open(
        root.path(),
        LogConfig {
            segment_ms: HOUR_MS,
            ..LogConfig::default()
        },
    );
    append(&mut log, 1, 10, T0);
    append(&mut log, 1, 10, T0 + HOUR_MS / 2);
    assert_eq!(log.segment_count(), 1);
    append(&mut log, 1, 10, T0 + 2 * HOUR_MS);
    assert_eq!(
        log.segment_count(),
        2,
        "rolled: first batch of the segment is older than segment.ms"
    );

    log.maybe_roll(T0 + 2 * HOUR_MS + 1).unwrap();
    assert_eq!(log.segment_count(), 2);
    log.maybe_roll(T0 + 4 * HOUR_MS).unwrap();
    assert_eq!(log.segment_count(), 3);
    log.maybe_roll(T0 + 8 * HOUR_MS).unwrap();
    assert_eq!(log.segment_count(), 3, "an empty active segment is not rolled");
    assert_eq!(append(&mut log, 1, 10, T0 + 8 * HOUR_MS), 3);
}

#[test]
fn retention_keeps_segments_holding_offsets_at_or_above_the_high_watermark() {
    let root = tempfile::tempdir().unwrap();
    let config = LogConfig {
        retention_ms: HOUR_MS,
        ..small_segments()
    };
    let mut log = open(root.path(), config);
    for i in 0..20 {
        append(&mut log, 2, 80, T0 + i);
    }
    let sealed = log.segment_count() - 1;
    assert!(sealed >= 2, "the test needs several sealed segments");
    let far_future = T0 + 100 * HOUR_MS;
    // Nothing is committed yet: every segment stays, however old.
    assert_eq!(log.delete_retained_segments(far_future, 0).unwrap(), 0);
    // Committed up to offset 11 (inside a batch): only segments wholly below it go.
    let deleted = log.delete_retained_segments(far_future, 11).unwrap();
    assert!(
        log.log_start_offset() <= 11,
        "log start {} passed the HW",
        log.log_start_offset()
    );
    assert!(
        deleted > 0 && deleted < sealed,
        "deleted {deleted} of {sealed} sealed segments"
    );
    // Everything committed: all sealed segments go.
    log.delete_retained_segments(far_future, log.log_end_offset()).unwrap();
    assert_eq!(log.segment_count(), 1);
}

#[test]
fn retention_deletes_segments_only_when_cleanup_policy_includes_delete() {
    let far_future = T0 + 100 * HOUR_MS;
    for (delete, compact, expect_deleted) in [(true, false, true), (false, true, false), (true, true, true)] {
        let root = tempfile::tempdir().unwrap();
        let config = LogConfig {
            retention_ms: HOUR_MS,
            retention_bytes: 100,
            cleanup_policy_delete: delete,
            cleanup_policy_compact: compact,
            ..small_segments()
        };
        let mut log = open(root.path(), config);
        for i in 0..20 {
            append(&mut log, 2, 80, T0 + i);
        }
        let segments = log.segment_count();
        let deleted = log.delete_retained_segments(far_future, log.log_end_offset()).unwrap();
        let policy = format!("delete={delete} compact={compact}");
        if expect_deleted {
            assert_eq!(deleted, segments - 1, "{policy}: old segments go by time and size");
            assert!(log.log_start_offset() > 0, "{policy}");
        } else {
            assert_eq!(deleted, 0, "{policy}: a compact-only topic keeps old segments");
            assert_eq!((log.segment_count(), log.log_start_offset()), (segments, 0), "{policy}");
        }
    }
}

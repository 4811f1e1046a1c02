//! Rolls leave the sealed segment's fsync to background writeback; the new segment's `.log`
//! carries a pending name until then, and an open after a crash checks the sealed segment
//! against the size that name records.

use super::recovery::{file_len, last_log_file, set_file_len};
use super::*;

/// Appends 2-record batches until the log has two segments. Returns the log and the second
/// segment's base offset.
fn two_segments(root: &Path) -> (PartitionLog, i64) {
    let mut log = open(root, small_segments());
    let mut next = 0;
    while log.segment_count() < 2 {
        next = append(&mut log, 2, 80, T0 + next) + 2;
    }
    (log, next - 2)
}

fn segment_name(base: i64) -> String {
    format!("{base:020}.log")
}

fn sealed_log_path(root: &Path) -> PathBuf {
    partition_dir(root).join(segment_name(0))
}

#[test]
fn a_roll_leaves_the_seal_to_writeback_and_names_the_new_segment_pending() {
    let root = tempfile::tempdir().unwrap();
    let (mut log, second) = two_segments(root.path());
    let sealed_bytes = file_len(&sealed_log_path(root.path()));
    assert!(log.has_pending_seal());
    assert_eq!(
        log_files(root.path()),
        vec![
            segment_name(0),
            format!("{}.pending-{sealed_bytes}", segment_name(second))
        ]
    );

    let seal = log.pending_seal().unwrap().expect("the roll left its seal pending");
    seal.sync().unwrap();
    assert!(log.complete_seal(&seal).unwrap());
    assert!(!log.has_pending_seal());
    assert_eq!(log_files(root.path()), vec![segment_name(0), segment_name(second)]);
    assert!(!log.complete_seal(&seal).unwrap(), "a seal completes once");
    assert_eq!(append(&mut log, 1, 10, T0), log.log_end_offset() - 1, "appends go on");
}

#[test]
fn a_roll_does_the_previous_seal_itself_so_at_most_one_is_in_flight() {
    let root = tempfile::tempdir().unwrap();
    let mut log = filled(root.path(), small_segments(), 30);
    assert!(log.segment_count() > 5, "{} segments", log.segment_count());
    let names = log_files(root.path());
    let pending: Vec<&String> = names.iter().filter(|f| f.contains(".pending-")).collect();
    assert_eq!(pending.len(), 1, "{names:?}");
    assert_eq!(Some(pending[0]), names.last(), "only the active segment waits");
    assert!(log.has_pending_seal());
    log.flush().unwrap();
    assert!(!log.has_pending_seal(), "a flush makes every segment durable");
    assert!(!log_files(root.path()).iter().any(|f| f.contains(".pending-")));
}

#[test]
fn a_seal_taken_before_a_later_roll_does_not_complete_that_roll() {
    let root = tempfile::tempdir().unwrap();
    let (mut log, _) = two_segments(root.path());
    let stale = log.pending_seal().unwrap().unwrap();
    let segments = log.segment_count();
    while log.segment_count() == segments {
        append(&mut log, 2, 80, T0);
    }
    stale.sync().unwrap();
    assert!(!log.complete_seal(&stale).unwrap());
    assert!(log.has_pending_seal(), "the later roll's seal is still to do");
    let names = log_files(root.path());
    assert!(names.last().unwrap().contains(".pending-"), "{names:?}");
}

#[test]
fn a_crash_before_the_seal_keeps_everything_when_the_sealed_segment_is_whole() {
    let root = tempfile::tempdir().unwrap();
    let (mut log, second) = two_segments(root.path());
    append(&mut log, 2, 80, T0);
    let end = log.log_end_offset();
    let records = log.read(0, 1 << 20, end, true).unwrap().records;
    drop(log); // a crash: the seal never ran

    let log = open(root.path(), small_segments());
    assert_eq!(log.log_end_offset(), end);
    assert_eq!(log.read(0, 1 << 20, end, true).unwrap().records, records);
    assert_eq!(log_files(root.path()), vec![segment_name(0), segment_name(second)]);
    assert!(!log.has_pending_seal());
}

/// A sealed segment that lost its last batch in the crash, whole (the file size never reached
/// the disk) or torn mid-batch: the pending segment after it would follow a hole, so it goes.
fn sealed_segment_losing_its_tail(cut_bytes: impl Fn(u64, u64) -> u64) {
    let root = tempfile::tempdir().unwrap();
    let (mut log, second) = two_segments(root.path());
    append(&mut log, 2, 80, T0);
    let batch_bytes = file_len(&sealed_log_path(root.path())) / (second as u64 / 2);
    drop(log);

    let path = sealed_log_path(root.path());
    let len = file_len(&path);
    set_file_len(&path, len - cut_bytes(len, batch_bytes));

    let mut log = open(root.path(), small_segments());
    assert_eq!(
        log.log_end_offset(),
        second - 2,
        "the sealed segment's last whole batch ends the log"
    );
    assert_eq!(log.segment_count(), 1);
    assert_eq!(
        files(root.path())
            .iter()
            .filter(|f| f.starts_with(&format!("{second:020}")))
            .count(),
        0
    );
    assert_eq!(
        append(&mut log, 1, 10, T0),
        second - 2,
        "appends continue after the last whole batch"
    );
}

#[test]
fn a_crash_that_lost_whole_batches_of_the_unsynced_sealed_segment_drops_the_segment_after_it() {
    sealed_segment_losing_its_tail(|_, batch_bytes| batch_bytes);
}

#[test]
fn a_crash_that_tore_the_unsynced_sealed_segment_drops_the_segment_after_it() {
    sealed_segment_losing_its_tail(|_, _| 1);
}

#[test]
fn a_crash_tearing_the_pending_segment_itself_recovers_it_like_any_active_segment() {
    let root = tempfile::tempdir().unwrap();
    let (mut log, second) = two_segments(root.path());
    append(&mut log, 2, 80, T0);
    drop(log);
    let path = last_log_file(root.path());
    assert!(path.to_string_lossy().contains(".pending-"));
    set_file_len(&path, file_len(&path) - 1);

    let log = open(root.path(), small_segments());
    assert_eq!(log.log_end_offset(), second + 2, "only the torn batch goes");
    assert_eq!(log_files(root.path()), vec![segment_name(0), segment_name(second)]);
}

#[test]
fn retention_finishes_the_seal_before_deleting_its_segment() {
    let root = tempfile::tempdir().unwrap();
    let (mut log, second) = two_segments(root.path());
    let config = LogConfig {
        retention_bytes: 0,
        retention_ms: -1,
        ..small_segments()
    };
    log.update_config(config);
    assert_eq!(log.delete_retained_segments(T0, i64::MAX).unwrap(), 1);
    assert_eq!(log.log_start_offset(), second);
    assert!(!log.has_pending_seal());
    assert_eq!(log_files(root.path()), vec![segment_name(second)]);
}

#[test]
fn truncating_back_into_the_sealed_segment_removes_the_pending_one() {
    let root = tempfile::tempdir().unwrap();
    let (mut log, second) = two_segments(root.path());
    log.truncate_to(second - 2).unwrap();
    assert!(!log.has_pending_seal());
    assert_eq!(log_files(root.path()), vec![segment_name(0)]);
    assert_eq!(append(&mut log, 2, 80, T0), second - 2);
    drop(log);
    let log = open(root.path(), small_segments());
    assert_eq!(log.log_end_offset(), second);
}

//! DeleteRecords at the log: the log start offset moves inside a segment, reads below it are
//! out of range, whole segments below it go, and the start survives a restart (clean or not).

use super::*;
use crate::log::LogError;

#[test]
fn the_log_start_moves_inside_a_segment_and_reads_below_it_are_out_of_range() {
    let root = tempfile::tempdir().unwrap();
    let mut log = filled(root.path(), small_segments(), 20); // offsets 0..40
    let segments_before = log.segment_count();
    assert!(segments_before > 3, "the test needs several segments");

    assert!(log.advance_log_start_offset(15).unwrap());
    assert_eq!(log.log_start_offset(), 15);
    assert!(
        log.segment_count() < segments_before,
        "segments wholly below 15 are deleted"
    );
    let err = log.read(14, 1 << 20, log.log_end_offset(), true).unwrap_err();
    assert!(
        matches!(err, LogError::OffsetOutOfRange { log_start: 15, .. }),
        "{err:?}"
    );
    // Offset 15 sits in the batch 14..15, which is served whole (the client skips 14).
    let read = log.read(15, 1 << 20, log.log_end_offset(), true).unwrap();
    assert_eq!(batch_offsets(&read.records).first(), Some(&(14, 15)));
    assert_eq!(read.log_start_offset, 15);

    assert!(!log.advance_log_start_offset(10).unwrap(), "the start never goes back");
    assert_eq!(log.log_start_offset(), 15);
    let past_end = log.advance_log_start_offset(41).unwrap_err();
    assert!(matches!(past_end, LogError::OffsetOutOfRange { .. }));
}

#[test]
fn the_log_start_survives_clean_and_unclean_restarts() {
    let root = tempfile::tempdir().unwrap();
    let mut log = filled(root.path(), small_segments(), 20);
    log.advance_log_start_offset(23).unwrap();
    log.close().unwrap();
    let log = open(root.path(), small_segments());
    assert_eq!(log.log_start_offset(), 23);
    drop(log); // no clean-shutdown marker: the next open recovers
    let mut log = open(root.path(), small_segments());
    assert_eq!(log.log_start_offset(), 23);
    // Timestamp lookups answer nothing below the start.
    assert_eq!(log.offset_for_timestamp(T0).unwrap().map(|(o, _)| o), Some(23));
    // A follower starting over below it: the segment base is the truth again.
    log.truncate_fully_and_start_at(5).unwrap();
    drop(log);
    assert_eq!(open(root.path(), small_segments()).log_start_offset(), 5);
}

#[test]
fn a_saved_start_past_a_recovered_end_is_clamped_to_the_end() {
    let root = tempfile::tempdir().unwrap();
    let log = filled(root.path(), small_segments(), 5); // offsets 0..10
    drop(log);
    std::fs::write(
        partition_dir(root.path()).join(crate::log::LOG_START_OFFSET_FILE),
        "99\n",
    )
    .unwrap();
    let log = open(root.path(), small_segments());
    assert_eq!(log.log_start_offset(), 10);
    assert_eq!(log.log_end_offset(), 10);
}

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::FileExt;

use super::*;
use crate::log::CLEAN_SHUTDOWN_FILE;

/// The last segment's `.log` file (under its pending name if it has one), where a crash tears
/// writes.
pub(super) fn last_log_file(root: &Path) -> PathBuf {
    let last = log_files(root).pop().unwrap();
    partition_dir(root).join(last)
}

/// Cuts (or extends) the file at `path` to `len` bytes, as a crash can.
pub(super) fn set_file_len(path: &Path, len: u64) {
    OpenOptions::new().write(true).open(path).unwrap().set_len(len).unwrap();
}

pub(super) fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().len()
}

#[test]
fn torn_tail_with_garbage_is_truncated_to_the_last_whole_batch() {
    let root = tempfile::tempdir().unwrap();
    let mut log = open(root.path(), LogConfig::default());
    for _ in 0..5 {
        append(&mut log, 3, 50, T0);
    }
    let whole_four = log.read(0, 1 << 20, 12, true).unwrap().records.len() as u64;
    drop(log); // a crash: no close, no clean-shutdown marker

    let path = last_log_file(root.path());
    let file = OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(whole_four + 70).unwrap(); // mid fifth batch
    file.write_all_at(&[0xAB; 300], whole_four + 70).unwrap();

    let mut log = open(root.path(), LogConfig::default());
    assert_eq!(log.log_end_offset(), 12);
    assert_eq!(file_len(&path), whole_four);
    assert_eq!(
        append(&mut log, 1, 10, T0),
        12,
        "appends continue after the last whole batch"
    );
    let offsets = batch_offsets(&log.read(0, 1 << 20, 13, true).unwrap().records);
    assert_eq!(offsets, vec![(0, 2), (3, 5), (6, 8), (9, 11), (12, 12)]);
}

#[test]
fn flipped_byte_in_the_last_batch_fails_its_crc_and_is_truncated() {
    let root = tempfile::tempdir().unwrap();
    let mut log = open(root.path(), LogConfig::default());
    for _ in 0..3 {
        append(&mut log, 2, 40, T0);
    }
    let whole_two = log.read(0, 1 << 20, 4, true).unwrap().records.len() as u64;
    drop(log);

    let path = last_log_file(root.path());
    let file = OpenOptions::new().read(true).write(true).open(&path).unwrap();
    let at = file_len(&path) - 5; // a value byte of the last record
    let mut byte = [0u8];
    file.read_exact_at(&mut byte, at).unwrap();
    file.write_all_at(&[byte[0] ^ 0x10], at).unwrap();

    let log = open(root.path(), LogConfig::default());
    assert_eq!(log.log_end_offset(), 4);
    assert_eq!(file_len(&path), whole_two);
}

#[test]
fn unclean_shutdown_without_damage_loses_nothing() {
    let root = tempfile::tempdir().unwrap();
    let mut log = open(root.path(), small_segments());
    for i in 0..12 {
        append(&mut log, 2, 80, T0 + i);
    }
    let before = log.read(0, 1 << 20, 24, true).unwrap().records;
    drop(log);
    let log = open(root.path(), small_segments());
    assert_eq!(log.log_end_offset(), 24);
    assert_eq!(log.read(0, 1 << 20, 24, true).unwrap().records, before);
}

#[test]
fn torn_tail_of_the_last_of_many_segments_is_recovered() {
    let root = tempfile::tempdir().unwrap();
    let mut log = open(root.path(), small_segments());
    for i in 0..13 {
        append(&mut log, 2, 80, T0 + i);
    }
    let segments = log.segment_count();
    drop(log);
    let path = last_log_file(root.path());
    set_file_len(&path, file_len(&path) - 1);

    let mut log = open(root.path(), small_segments());
    assert_eq!(log.log_end_offset(), 24);
    assert_eq!(log.segment_count(), segments);
    assert_eq!(append(&mut log, 1, 10, T0), 24);
}

#[test]
fn clean_close_and_reopen_keeps_everything() {
    let root = tempfile::tempdir().unwrap();
    let mut log = open(root.path(), small_segments());
    for i in 0..15 {
        append(&mut log, 2, 80, T0 + 10 * i);
    }
    let records = log.read(0, 1 << 20, 30, true).unwrap().records;
    let max = log.max_timestamp_offset();
    let by_time = log.offset_for_timestamp(T0 + 75).unwrap();
    log.close().unwrap();
    assert!(partition_dir(root.path()).join(CLEAN_SHUTDOWN_FILE).exists());
    let files_before: Vec<String> = files(root.path())
        .into_iter()
        .filter(|f| f != CLEAN_SHUTDOWN_FILE)
        .collect();
    assert!(
        !files_before.iter().any(|f| f.contains(".pending-")),
        "a clean close finishes the seal in flight: {files_before:?}"
    );

    let mut log = open(root.path(), small_segments());
    assert!(
        !partition_dir(root.path()).join(CLEAN_SHUTDOWN_FILE).exists(),
        "a later crash must not look clean"
    );
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (0, 30));
    assert_eq!(log.read(0, 1 << 20, 30, true).unwrap().records, records);
    assert_eq!(log.max_timestamp_offset(), max);
    assert_eq!(log.offset_for_timestamp(T0 + 75).unwrap(), by_time);
    assert_eq!(files(root.path()), files_before);
    assert_eq!(append(&mut log, 1, 10, T0 + 200), 30);
}

#[test]
fn torn_tail_is_found_even_when_a_clean_marker_claims_otherwise() {
    let root = tempfile::tempdir().unwrap();
    let mut log = open(root.path(), LogConfig::default());
    append(&mut log, 2, 10, T0);
    append(&mut log, 2, 10, T0);
    log.close().unwrap();
    let path = last_log_file(root.path());
    set_file_len(&path, file_len(&path) - 3);

    let log = open(root.path(), LogConfig::default());
    assert_eq!(log.log_end_offset(), 2);
}

#[test]
fn damaged_index_of_a_sealed_segment_is_rebuilt() {
    let root = tempfile::tempdir().unwrap();
    let mut log = open(root.path(), small_segments());
    for i in 0..12 {
        append(&mut log, 2, 80, T0 + i);
    }
    let records = log.read(0, 1 << 20, 24, true).unwrap().records;
    log.close().unwrap();
    let index = partition_dir(root.path()).join("00000000000000000000.index");
    let mut file = OpenOptions::new().append(true).open(&index).unwrap();
    file.write_all(&[0xFF; 5]).unwrap();

    let log = open(root.path(), small_segments());
    assert_eq!(file_len(&index) % 8, 0);
    assert_eq!(log.read(0, 1 << 20, 24, true).unwrap().records, records);
    for offset in 0..24 {
        let read = log.read(offset, 1, 24, true).unwrap();
        assert_eq!(batch_offsets(&read.records), vec![(offset / 2 * 2, offset / 2 * 2 + 1)]);
    }
}

#[test]
fn orphan_index_files_are_removed_on_open() {
    let root = tempfile::tempdir().unwrap();
    let log = open(root.path(), LogConfig::default());
    log.close().unwrap();
    let orphan = partition_dir(root.path()).join("00000000000000000500.index");
    std::fs::write(&orphan, [0u8; 8]).unwrap();
    let _log = open(root.path(), LogConfig::default());
    assert!(!orphan.exists());
}

#[test]
fn missing_index_files_of_a_sealed_segment_are_rebuilt() {
    let root = tempfile::tempdir().unwrap();
    let mut log = open(root.path(), small_segments());
    for i in 0..12 {
        append(&mut log, 2, 80, T0 + 10 * i);
    }
    let by_time = log.offset_for_timestamp(T0 + 15).unwrap();
    log.close().unwrap();
    for name in ["00000000000000000000.index", "00000000000000000000.timeindex"] {
        std::fs::remove_file(partition_dir(root.path()).join(name)).unwrap();
    }

    let log = open(root.path(), small_segments());
    assert_eq!(
        by_time,
        Some((4, T0 + 20)),
        "batch 2 is the first whose max timestamp reaches it; its first record (offset 4) is at T0 + 20"
    );
    assert_eq!(log.offset_for_timestamp(T0 + 15).unwrap(), by_time);
    let timeindex = partition_dir(root.path()).join("00000000000000000000.timeindex");
    assert!(file_len(&timeindex) >= 12);
}

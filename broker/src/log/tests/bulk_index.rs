//! Index entries written in bulk, index files not held open, and directory fsyncs only when an
//! open changed the directory.

use super::*;
use crate::fs::test_support::dir_syncs;
use crate::log::partition_metadata::prepare_partition_dir;
use crate::log::MAX_UNWRITTEN_INDEX_ENTRIES;

const FIRST_INDEX: &str = "00000000000000000000.index";
const FIRST_TIME_INDEX: &str = "00000000000000000000.timeindex";

/// An entry for every batch after a segment's first (each is larger than the interval).
fn dense_index() -> LogConfig {
    LogConfig {
        index_interval_bytes: 1,
        ..LogConfig::default()
    }
}

fn file_len(root: &Path, name: &str) -> u64 {
    std::fs::metadata(partition_dir(root).join(name)).unwrap().len()
}

/// `batches` batches of 2 records with growing timestamps: offsets 0..2 * batches.
fn append_batches(log: &mut PartitionLog, batches: i64) {
    for _ in 0..batches {
        let next = log.log_end_offset();
        append(log, 2, 80, T0 + next);
    }
}

/// Every offset of the log reads back as the batch holding it.
pub(super) fn assert_every_offset_reads_its_batch(log: &PartitionLog) {
    let end = log.log_end_offset();
    for offset in log.log_start_offset()..end {
        let read = log.read(offset, 1, end, true).unwrap();
        let first = offset / 2 * 2;
        assert_eq!(
            batch_offsets(&read.records),
            vec![(first, first + 1)],
            "offset {offset}"
        );
    }
}

#[test]
fn appends_write_no_index_entry_however_many_wait_and_writeback_writes_them_all() {
    let root = tempfile::tempdir().unwrap();
    let mut log = open(root.path(), dense_index());
    let many = 3 * MAX_UNWRITTEN_INDEX_ENTRIES as i64;
    append_batches(&mut log, many + 1); // `many` entries
    assert_eq!(
        file_len(root.path(), FIRST_INDEX),
        0,
        "the produce path writes no index file"
    );
    assert_eq!(file_len(root.path(), FIRST_TIME_INDEX), 0);
    assert_every_offset_reads_its_batch(&log);

    log.write_index_entries().unwrap();
    assert_eq!(file_len(root.path(), FIRST_INDEX), many as u64 * 8, "one bulk write");
    assert_eq!(file_len(root.path(), FIRST_TIME_INDEX), many as u64 * 12);
    assert_every_offset_reads_its_batch(&log);
}

#[test]
fn flush_writes_the_buffered_index_entries() {
    let root = tempfile::tempdir().unwrap();
    let mut log = open(root.path(), dense_index());
    append_batches(&mut log, 10);
    assert_eq!(file_len(root.path(), FIRST_INDEX), 0);
    log.flush().unwrap();
    assert_eq!(file_len(root.path(), FIRST_INDEX), 9 * 8);
    assert_eq!(file_len(root.path(), FIRST_TIME_INDEX), 9 * 12);
    append_batches(&mut log, 3);
    log.write_index_entries().unwrap();
    assert_eq!(file_len(root.path(), FIRST_INDEX), 12 * 8, "writeback writes them too");
}

#[test]
fn rolling_writes_every_index_entry_of_the_sealed_segment() {
    let root = tempfile::tempdir().unwrap();
    let config = LogConfig {
        segment_bytes: 2_000,
        ..dense_index()
    };
    let mut log = open(root.path(), config.clone());
    append_batches(&mut log, 30);
    assert!(log.segment_count() > 2);
    let sealed_batches = log.read(0, 1 << 20, i64::MAX, true).unwrap();
    let first_segment: Vec<_> = BatchIter::new(&sealed_batches.records)
        .take_while(|(_, range)| range.end <= 2_000)
        .collect();
    // Every batch of the sealed segment but its first has an entry, in the file, and the
    // final time index entry too.
    assert_eq!(file_len(root.path(), FIRST_INDEX), (first_segment.len() as u64 - 1) * 8);
    assert_eq!(
        file_len(root.path(), FIRST_TIME_INDEX),
        (first_segment.len() as u64 - 1) * 12
    );
    drop(log); // a crash: the sealed segments are trusted, the active one recovered
    let log = open(root.path(), config);
    assert_eq!(log.log_end_offset(), 60);
    assert_every_offset_reads_its_batch(&log);
}

#[test]
fn clean_close_writes_every_index_entry_and_the_reopen_trusts_the_index() {
    let root = tempfile::tempdir().unwrap();
    let mut log = open(root.path(), dense_index());
    append_batches(&mut log, 20);
    log.close().unwrap();
    assert_eq!(file_len(root.path(), FIRST_INDEX), 19 * 8);
    assert_eq!(file_len(root.path(), FIRST_TIME_INDEX), 19 * 12);

    // Drop the last entry: still a sane index, only shorter than the log. A reopen that
    // trusts it keeps it short (a rebuild would restore the entry), and lookups stay right.
    let index = partition_dir(root.path()).join(FIRST_INDEX);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&index)
        .unwrap()
        .set_len(18 * 8)
        .unwrap();
    let mut log = open(root.path(), dense_index());
    assert_eq!(log.log_end_offset(), 40);
    assert_every_offset_reads_its_batch(&log);
    log.flush().unwrap();
    assert_eq!(
        file_len(root.path(), FIRST_INDEX),
        18 * 8,
        "the index was trusted, not rebuilt"
    );
    append_batches(&mut log, 1);
    assert_eq!(append(&mut log, 2, 80, T0 + 100), 42);
    assert_every_offset_reads_its_batch(&log);
}

#[test]
fn unclean_shutdown_rebuilds_the_active_index_from_the_log() {
    let root = tempfile::tempdir().unwrap();
    let bound = MAX_UNWRITTEN_INDEX_ENTRIES as i64;
    let mut log = open(root.path(), dense_index());
    // Some entries written (by writeback), more only in memory when the process dies.
    append_batches(&mut log, bound + 1);
    log.write_index_entries().unwrap();
    append_batches(&mut log, 49);
    assert_eq!(file_len(root.path(), FIRST_INDEX), bound as u64 * 8);
    drop(log); // no close: the buffered entries are lost with the process

    let mut log = open(root.path(), dense_index());
    assert_eq!(log.log_end_offset(), 2 * (bound + 50));
    assert_every_offset_reads_its_batch(&log);
    log.flush().unwrap();
    assert_eq!(
        file_len(root.path(), FIRST_INDEX),
        (bound as u64 + 49) * 8,
        "rebuilt whole"
    );
    assert_eq!(file_len(root.path(), FIRST_TIME_INDEX), (bound as u64 + 49) * 12);
}

#[test]
fn truncation_drops_buffered_index_entries() {
    let root = tempfile::tempdir().unwrap();
    let mut log = open(root.path(), dense_index());
    append_batches(&mut log, 20);
    log.write_index_entries().unwrap();
    append_batches(&mut log, 20); // 20 more entries only in memory
    log.truncate_to(50).unwrap(); // inside the buffered part
    assert_eq!(log.log_end_offset(), 50);
    log.truncate_to(30).unwrap(); // inside the written part
    assert_eq!(log.log_end_offset(), 30);
    assert_eq!(
        file_len(root.path(), FIRST_INDEX),
        14 * 8,
        "entries at or past the end went"
    );
    append_batches(&mut log, 5);
    assert_every_offset_reads_its_batch(&log);
    log.close().unwrap();
    assert_eq!(file_len(root.path(), FIRST_INDEX), 19 * 8);

    let log = open(root.path(), dense_index());
    assert_eq!(log.log_end_offset(), 40);
    assert_every_offset_reads_its_batch(&log);
}

/// Descriptors of this process open on files under `root` (other tests' files do not count).
pub(super) fn open_files_under(root: &Path) -> Vec<PathBuf> {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter(|target| target.starts_with(root))
        .collect()
}

#[test]
fn an_idle_log_keeps_only_its_active_segment_file_open() {
    let root = tempfile::tempdir().unwrap();
    let root_path = root.path().canonicalize().unwrap();
    let mut log = PartitionLog::open(&partition_dir(&root_path), dense_index(), &FileCache::unbounded(), T0).unwrap();
    append_batches(&mut log, 20);
    log.flush().unwrap();
    assert_eq!(
        open_files_under(&root_path),
        vec![partition_dir(&root_path).join("00000000000000000000.log")]
    );
    log.close().unwrap();
    let log = PartitionLog::open(&partition_dir(&root_path), dense_index(), &FileCache::unbounded(), T0).unwrap();
    assert_eq!(open_files_under(&root_path).len(), 1);
    assert_every_offset_reads_its_batch(&log);
}

#[test]
fn reopening_an_unchanged_log_costs_no_directory_fsync() {
    let root = tempfile::tempdir().unwrap();
    let before = dir_syncs();
    let mut log = open(root.path(), LogConfig::default());
    // New: the partition directory (its first segment) and the parent (the directory itself).
    assert_eq!(dir_syncs() - before, 2);
    append(&mut log, 2, 10, T0);
    drop(log);

    let before = dir_syncs();
    let log = open(root.path(), LogConfig::default());
    assert_eq!(dir_syncs() - before, 0, "an unclean reopen that changed nothing");
    assert_eq!(log.log_end_offset(), 2);
    log.close().unwrap();

    let before = dir_syncs();
    let log = open(root.path(), LogConfig::default());
    assert_eq!(dir_syncs() - before, 1, "removing the clean-shutdown marker");
    assert_eq!(log.log_end_offset(), 2);
}

#[test]
fn a_new_partition_directory_costs_two_directory_fsyncs() {
    let root = tempfile::tempdir().unwrap();
    let dir = partition_dir(root.path());
    let topic_id = uuid::Uuid::from_u128(7);
    let before = dir_syncs();
    assert!(!prepare_partition_dir(&dir, topic_id).unwrap());
    let log = PartitionLog::open(&dir, LogConfig::default(), &FileCache::unbounded(), T0).unwrap();
    assert_eq!(dir_syncs() - before, 2);
    assert_eq!(
        crate::log::partition_metadata::read_topic_id(&dir).unwrap(),
        Some(topic_id)
    );
    log.close().unwrap();
    let before = dir_syncs();
    assert!(!prepare_partition_dir(&dir, topic_id).unwrap());
    assert_eq!(
        dir_syncs() - before,
        0,
        "an existing directory of the topic is left alone"
    );
}

/// Issue 33: an active segment's index entries are in memory only while it is written to. The
/// idle pass after one without appends writes them to their files and frees the copies; reads
/// and timestamp lookups then use the files, and the next append reads the entries back in,
/// with nothing lost across a reopen.
#[test]
fn an_idle_active_segment_gives_back_its_index_copies_and_takes_appends_again() {
    let root = tempfile::tempdir().unwrap();
    let mut log = open(root.path(), dense_index());
    append_batches(&mut log, 50); // 49 entries
    log.release_idle_memory().unwrap(); // appended to since the last pass: kept
    assert!(log.active_indexes_in_memory());
    assert_eq!(file_len(root.path(), FIRST_INDEX), 0);
    log.release_idle_memory().unwrap();
    assert!(!log.active_indexes_in_memory(), "an idle log kept its index copies");
    assert_eq!(
        file_len(root.path(), FIRST_INDEX),
        49 * 8,
        "the entries were not written out first"
    );
    assert_eq!(file_len(root.path(), FIRST_TIME_INDEX), 49 * 12);
    assert_every_offset_reads_its_batch(&log);
    assert_eq!(
        log.offset_for_timestamp(T0 + 40).unwrap().map(|(offset, _)| offset),
        Some(40)
    );

    append_batches(&mut log, 10);
    assert!(
        log.active_indexes_in_memory(),
        "an append did not read the entries back in"
    );
    assert_every_offset_reads_its_batch(&log);
    assert_eq!(
        log.offset_for_timestamp(T0 + 110).unwrap().map(|(offset, _)| offset),
        Some(110)
    );
    log.close().unwrap();

    let log = open(root.path(), dense_index());
    assert_eq!(file_len(root.path(), FIRST_INDEX), 59 * 8);
    assert_every_offset_reads_its_batch(&log);
    assert_eq!(
        log.offset_for_timestamp(T0 + 40).unwrap().map(|(offset, _)| offset),
        Some(40)
    );
}

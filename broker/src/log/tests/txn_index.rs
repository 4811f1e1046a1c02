//! The aborted-transaction index on real files: entries land in the `.txnindex` of the segment
//! holding the abort marker, survive a restart, and follow truncation, DeleteRecords and
//! retention.

use super::*;
use crate::log::txn_index::{self, AbortedTxn, TXN_INDEX_FILE_SUFFIX};

fn aborted(producer_id: i64, first_offset: i64, last_offset: i64) -> AbortedTxn {
    AbortedTxn {
        producer_id,
        first_offset,
        last_offset,
        last_stable_offset: last_offset + 1,
    }
}

fn txn_index_files(root: &Path) -> Vec<String> {
    files(root)
        .into_iter()
        .filter(|f| f.ends_with(TXN_INDEX_FILE_SUFFIX))
        .collect()
}

/// A log of 20 batches of 2 records (offsets 0..40) in small segments, with aborts whose
/// markers are at offsets 5, 21 and 37.
fn log_with_aborts(root: &Path) -> PartitionLog {
    let mut log = filled(root, small_segments(), 20);
    for txn in [aborted(1, 2, 5), aborted(2, 10, 21), aborted(3, 30, 37)] {
        log.append_aborted_txn(txn).unwrap();
    }
    log
}

#[test]
fn aborts_are_written_to_the_segment_holding_the_marker_and_survive_clean_and_unclean_restarts() {
    let root = tempfile::tempdir().unwrap();
    let log = log_with_aborts(root.path());
    assert!(txn_index_files(root.path()).len() >= 2, "markers in different segments");
    let all = log.collect_aborted_txns(0, 40);
    assert_eq!(all.iter().map(|t| t.producer_id).collect::<Vec<_>>(), vec![1, 2, 3]);
    let marker_segment = log.segment_base_of(21);
    let on_disk = txn_index::load(&partition_dir(root.path()).join(format!("{marker_segment:020}.txnindex"))).unwrap();
    assert_eq!(on_disk, vec![aborted(2, 10, 21)]);

    log.close().unwrap();
    let log = open(root.path(), small_segments());
    assert_eq!(log.collect_aborted_txns(0, 40), all);
    drop(log); // unclean
    let log = open(root.path(), small_segments());
    assert_eq!(log.collect_aborted_txns(0, 40), all);
}

#[test]
fn a_marker_already_indexed_is_not_indexed_twice() {
    let root = tempfile::tempdir().unwrap();
    let mut log = log_with_aborts(root.path());
    log.append_aborted_txn(aborted(2, 10, 21)).unwrap();
    log.close().unwrap();
    let log = open(root.path(), small_segments());
    assert_eq!(log.collect_aborted_txns(0, 40).len(), 3);
}

#[test]
fn truncation_drops_aborts_whose_marker_is_at_or_past_the_new_end_and_rewrites_the_file() {
    let root = tempfile::tempdir().unwrap();
    let mut log = log_with_aborts(root.path());
    log.truncate_to(36).unwrap();
    let left = log.collect_aborted_txns(0, 100);
    assert_eq!(left.iter().map(|t| t.producer_id).collect::<Vec<_>>(), vec![1, 2]);
    log.truncate_to(21).unwrap();
    assert_eq!(log.collect_aborted_txns(0, 100).len(), 1);
    drop(log);
    let log = open(root.path(), small_segments());
    assert_eq!(log.collect_aborted_txns(0, 100), vec![aborted(1, 2, 5)]);
}

#[test]
fn delete_records_and_retention_drop_aborts_below_the_log_start() {
    let root = tempfile::tempdir().unwrap();
    let mut log = log_with_aborts(root.path());
    let files_before = txn_index_files(root.path()).len();
    log.advance_log_start_offset(22).unwrap();
    assert_eq!(
        log.collect_aborted_txns(0, 100)
            .iter()
            .map(|t| t.producer_id)
            .collect::<Vec<_>>(),
        vec![3]
    );
    assert!(
        txn_index_files(root.path()).len() < files_before,
        "deleted segments took their index"
    );
    log.close().unwrap();
    let log = open(root.path(), small_segments());
    assert_eq!(log.collect_aborted_txns(0, 100).len(), 1);
}

#[test]
fn truncating_fully_forgets_every_abort() {
    let root = tempfile::tempdir().unwrap();
    let mut log = log_with_aborts(root.path());
    log.truncate_fully_and_start_at(100).unwrap();
    assert!(log.collect_aborted_txns(0, 200).is_empty());
    assert!(txn_index_files(root.path()).is_empty());
}

//! Transactions at the partition (KIP-98): the last stable offset over interleaved producers,
//! markers appended by the coordinator's API, `read_committed` reads and their aborted
//! transactions, on leader and follower, across a restart.

use super::tests::{append, lead_alone, open, registration, NOW};
use super::*;
use crate::producer_state::snapshot;
use sluice_protocol::batch::{
    test_support::encode_simple_batch, ATTRIBUTES_OFFSET, BASE_SEQUENCE_OFFSET, CRC_COVERED_FROM, CRC_OFFSET,
    PRODUCER_EPOCH_OFFSET, PRODUCER_ID_OFFSET,
};
use sluice_protocol::control::ControlType;

/// A transactional batch of `records` records from `producer_id` at `epoch`, sequence `seq`.
fn txn_batch(producer_id: i64, epoch: i16, seq: i32, records: usize) -> Vec<u8> {
    let mut batch = encode_simple_batch(records, 10, NOW);
    batch[ATTRIBUTES_OFFSET..ATTRIBUTES_OFFSET + 2].copy_from_slice(&0x10i16.to_be_bytes());
    batch[PRODUCER_ID_OFFSET..PRODUCER_ID_OFFSET + 8].copy_from_slice(&producer_id.to_be_bytes());
    batch[PRODUCER_EPOCH_OFFSET..PRODUCER_EPOCH_OFFSET + 2].copy_from_slice(&epoch.to_be_bytes());
    batch[BASE_SEQUENCE_OFFSET..BASE_SEQUENCE_OFFSET + 4].copy_from_slice(&seq.to_be_bytes());
    let crc = crc32c::crc32c(&batch[CRC_COVERED_FROM..]);
    batch[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
    batch
}

fn append_txn(p: &Partition, producer_id: i64, seq: i32, records: usize) -> i64 {
    let mut batch = txn_batch(producer_id, 0, seq, records);
    match p.append_as_leader(&mut batch, NOW).unwrap() {
        AppendOutcome::Appended(info) => info.base_offset,
        AppendOutcome::Duplicate { .. } => panic!("not a retry"),
    }
}

fn aborted_ids(outcome: &ReadOutcome) -> Vec<(i64, i64)> {
    outcome
        .aborted_transactions
        .as_ref()
        .expect("a read_committed read reports aborted transactions")
        .iter()
        .map(|t| (t.producer_id, t.first_offset))
        .collect()
}

#[test]
fn the_last_stable_offset_waits_for_the_oldest_open_transaction_of_interleaved_producers() {
    let dir = tempfile::tempdir().unwrap();
    let p = open(dir.path(), 1);
    lead_alone(&p);
    assert_eq!(append_txn(&p, 1, 0, 2), 0); // producer 1: 0..=1
    assert_eq!(append_txn(&p, 2, 0, 1), 2); // producer 2: 2
    append(&p, 1); // 3, not transactional
    assert_eq!(p.high_watermark(), 4);
    assert_eq!(p.last_stable_offset(), 0);
    let nothing = p.read(0, 1 << 20, true, ReadBound::LastStable).unwrap();
    assert!(nothing.records.is_empty());
    assert_eq!(nothing.last_stable_offset, 0);

    let abort = p.append_control_batch(1, 0, 0, ControlType::Abort, NOW).unwrap();
    assert_eq!(abort, 4);
    assert_eq!(p.last_stable_offset(), 2, "producer 2 is still open");
    let commit = p.append_control_batch(2, 0, 0, ControlType::Commit, NOW).unwrap();
    assert_eq!(commit, 5);
    assert_eq!(p.last_stable_offset(), 6);
    assert_eq!(p.last_stable_offset(), p.high_watermark());

    let read = p.read(0, 1 << 20, true, ReadBound::LastStable).unwrap();
    assert_eq!(BatchIter::new(&read.records).count(), 5);
    assert_eq!(aborted_ids(&read), vec![(1, 0)]);
    let later = p.read(5, 1 << 20, true, ReadBound::LastStable).unwrap();
    assert_eq!(
        aborted_ids(&later),
        Vec::<(i64, i64)>::new(),
        "the abort ended before offset 5"
    );
    let uncommitted = p.read(0, 1 << 20, true, ReadBound::HighWatermark).unwrap();
    assert!(uncommitted.aborted_transactions.is_none());
    let described = p.active_producers();
    assert!(described
        .iter()
        .all(|d| d.current_txn_start_offset == -1 && d.coordinator_epoch == 0));
}

#[test]
fn markers_are_fenced_by_producer_and_coordinator_epoch_and_only_a_leader_writes_them() {
    let dir = tempfile::tempdir().unwrap();
    let p = open(dir.path(), 1);
    assert_eq!(
        p.append_control_batch(1, 0, 0, ControlType::Commit, NOW).unwrap_err().0,
        ResponseError::NotLeaderOrFollower
    );
    lead_alone(&p);
    let mut batch = txn_batch(7, 3, 0, 1);
    p.append_as_leader(&mut batch, NOW).unwrap();
    assert_eq!(p.active_producers()[0].current_txn_start_offset, 0);
    p.append_control_batch(7, 3, 5, ControlType::Commit, NOW).unwrap();
    assert_eq!(
        p.append_control_batch(7, 2, 5, ControlType::Abort, NOW).unwrap_err().0,
        ResponseError::InvalidProducerEpoch
    );
    assert_eq!(
        p.append_control_batch(7, 3, 4, ControlType::Abort, NOW).unwrap_err().0,
        ResponseError::TransactionCoordinatorFenced
    );
    assert_eq!(p.log_end_offset(), 2, "refused markers append nothing");
    assert_eq!(p.active_producers()[0].coordinator_epoch, 5);
}

#[test]
fn aborted_transactions_and_open_ones_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let p = open(dir.path(), 1);
    lead_alone(&p);
    append_txn(&p, 1, 0, 2);
    p.append_control_batch(1, 0, 0, ControlType::Abort, NOW).unwrap();
    append_txn(&p, 2, 0, 1); // 3, left open
    p.shutdown(false).unwrap();

    let p = open(dir.path(), 1);
    lead_alone(&p);
    assert_eq!(p.last_stable_offset(), 3, "the open transaction is found again");
    p.append_control_batch(2, 0, 0, ControlType::Commit, NOW).unwrap();
    let read = p.read(0, 1 << 20, true, ReadBound::LastStable).unwrap();
    assert_eq!(aborted_ids(&read), vec![(1, 0)]);
}

#[test]
fn an_unclean_stop_rebuilds_the_aborted_index_from_the_rescanned_tail() {
    let dir = tempfile::tempdir().unwrap();
    let p = open(dir.path(), 1);
    lead_alone(&p);
    append_txn(&p, 1, 0, 2);
    p.append_control_batch(1, 0, 0, ControlType::Abort, NOW).unwrap();
    drop(p); // no clean close
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "txnindex") {
            std::fs::remove_file(path).unwrap();
        }
    }
    let p = open(dir.path(), 1);
    lead_alone(&p);
    let read = p.read(0, 1 << 20, true, ReadBound::LastStable).unwrap();
    assert_eq!(aborted_ids(&read), vec![(1, 0)]);
}

#[test]
fn a_follower_tracks_transactions_and_aborts_from_the_leaders_bytes() {
    let leader_dir = tempfile::tempdir().unwrap();
    let follower_dir = tempfile::tempdir().unwrap();
    let leader = open(leader_dir.path(), 1);
    let follower = open(follower_dir.path(), 2);
    leader.apply_registration(&registration(1, 4, 0, &[1]), NOW);
    follower.apply_registration(&registration(1, 4, 0, &[1]), NOW);
    append_txn(&leader, 1, 0, 2);
    leader.append_control_batch(1, 0, 0, ControlType::Abort, NOW).unwrap();
    append_txn(&leader, 2, 0, 1);
    let batches = leader.read(0, 1 << 20, true, ReadBound::LogEnd).unwrap().records;
    follower.append_as_follower(&batches, 4, NOW).unwrap();
    follower.update_follower_high_watermark(4, 4);
    assert_eq!(follower.last_stable_offset(), 3);
    let read = follower.read(0, 1 << 20, true, ReadBound::LastStable).unwrap();
    assert_eq!(aborted_ids(&read), vec![(1, 0)]);
    // Truncating below the abort marker forgets the abort and reopens the transaction.
    follower.apply_registration(&registration(3, 5, 1, &[2, 3]), NOW);
    follower.truncate_as_follower(2, 5, false).unwrap();
    assert_eq!(follower.last_stable_offset(), 0);
    follower.update_follower_high_watermark(2, 5);
    let read = follower.read(0, 1 << 20, true, ReadBound::LogEnd).unwrap();
    assert_eq!(BatchIter::new(&read.records).count(), 1);
}

fn open_small_segments(dir: &Path) -> Partition {
    let tail_cache = crate::log::TailCacheBudget::new(1 << 20, 64 << 20);
    let config = LogConfig {
        segment_bytes: 1_000,
        ..LogConfig::default()
    };
    Partition::open(
        dir,
        "t",
        Uuid::nil(),
        0,
        1,
        config,
        None,
        &tail_cache,
        &crate::log::FileCache::unbounded(),
        NOW,
    )
    .unwrap()
}

fn snapshot_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "snapshot"))
        .collect();
    files.sort();
    files
}

#[test]
fn a_transaction_open_across_many_segments_is_found_again_through_producer_snapshots() {
    let dir = tempfile::tempdir().unwrap();
    let p = open_small_segments(dir.path());
    lead_alone(&p);
    append_txn(&p, 1, 0, 1); // offset 0, left open
    for _ in 0..80 {
        append(&p, 1);
    }
    assert!(snapshot_files(dir.path()).len() >= 3, "a snapshot per roll");
    assert_eq!(p.last_stable_offset(), 0);
    p.shutdown(false).unwrap();
    let clean_close = snapshot::snapshot_path(dir.path(), 81);
    assert!(clean_close.exists(), "a clean close snapshots at the log end");

    // Unclean restart with the two newest snapshots damaged: an older one still has it.
    std::fs::write(&clean_close, b"torn").unwrap();
    let snapshots = snapshot_files(dir.path());
    std::fs::write(&snapshots[snapshots.len() - 2], [0u8; 64]).unwrap();
    let p = open_small_segments(dir.path());
    lead_alone(&p);
    assert_eq!(p.last_stable_offset(), 0, "the open transaction is not forgotten");
    p.append_control_batch(1, 0, 0, ControlType::Abort, NOW).unwrap();
    assert_eq!(p.last_stable_offset(), p.high_watermark());
    let read = p.read(0, 1 << 20, true, ReadBound::LastStable).unwrap();
    assert_eq!(aborted_ids(&read), vec![(1, 0)]);
}

#[test]
fn truncation_removes_snapshots_past_the_new_end() {
    let dir = tempfile::tempdir().unwrap();
    let p = open_small_segments(dir.path());
    p.apply_registration(&registration(1, 4, 0, &[1]), NOW);
    for _ in 0..40 {
        append(&p, 1);
    }
    let before = snapshot_files(dir.path()).len();
    assert!(before > 2);
    p.apply_registration(&registration(3, 5, 1, &[1, 3]), NOW);
    p.truncate_as_follower(5, 5, false).unwrap();
    let after = snapshot::list(dir.path()).unwrap();
    assert!(after.iter().all(|o| *o <= 5), "{after:?}");
}

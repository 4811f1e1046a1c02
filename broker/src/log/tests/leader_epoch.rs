use sluice_protocol::batch::test_support::encode_simple_batch;

use super::*;
use crate::log::leader_epoch::{EpochEntry, LeaderEpochCache};
use crate::log::{LogError, LEADER_EPOCH_CHECKPOINT_FILE, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET};

const UNDEFINED: (i32, i64) = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET);

/// Appends a 2-record batch as leader of `epoch`; returns its base offset.
fn append_leader(log: &mut PartitionLog, epoch: i32) -> i64 {
    let mut batch = encode_simple_batch(2, 80, T0);
    log.append_as_leader(&mut batch, epoch, T0).unwrap().base_offset
}

/// Appends one 2-record batch per epoch in `epochs`.
fn append_epochs(log: &mut PartitionLog, epochs: &[i32]) {
    for &epoch in epochs {
        append_leader(log, epoch);
    }
}

fn entries(pairs: &[(i32, i64)]) -> Vec<EpochEntry> {
    pairs
        .iter()
        .map(|&(epoch, start_offset)| EpochEntry { epoch, start_offset })
        .collect()
}

fn checkpoint_path(root: &Path) -> PathBuf {
    partition_dir(root).join(LEADER_EPOCH_CHECKPOINT_FILE)
}

fn checkpoint_text(root: &Path) -> String {
    std::fs::read_to_string(checkpoint_path(root)).unwrap()
}

#[test]
fn checkpoint_is_kafkas_text_format_and_round_trips_through_reopen() {
    let root = tempfile::tempdir().unwrap();
    let mut log = open(root.path(), LogConfig::default());
    append_epochs(&mut log, &[0, 0, 2, 5, 5]);
    assert_eq!(checkpoint_text(root.path()), "0\n3\n0 0\n2 4\n5 6\n");
    log.close().unwrap();

    let log = open(root.path(), LogConfig::default());
    assert_eq!(log.epoch_entries(), entries(&[(0, 0), (2, 4), (5, 6)]));
    assert_eq!(checkpoint_text(root.path()), "0\n3\n0 0\n2 4\n5 6\n");
    assert!(
        !partition_dir(root.path()).join("leader-epoch-checkpoint.tmp").exists(),
        "the temporary file was renamed into place"
    );
}

#[test]
fn leader_appends_record_each_new_epoch_at_its_first_offset() {
    let root = tempfile::tempdir().unwrap();
    let mut log = open(root.path(), LogConfig::default());
    assert_eq!(log.latest_epoch(), None);
    append_epochs(&mut log, &[1, 1]);
    assert_eq!(log.latest_epoch(), Some(1));
    append_epochs(&mut log, &[3, 3, 3]);
    append_epochs(&mut log, &[4]);
    assert_eq!(log.latest_epoch(), Some(4));
    assert_eq!(log.epoch_entries(), entries(&[(1, 0), (3, 4), (4, 10)]));
}

#[test]
fn producer_batches_without_an_epoch_leave_no_checkpoint() {
    let root = tempfile::tempdir().unwrap();
    let mut log = open(root.path(), LogConfig::default());
    append(&mut log, 2, 10, T0); // partitionLeaderEpoch -1, as producers write it
    assert_eq!(log.latest_epoch(), None);
    assert!(!checkpoint_path(root.path()).exists());
    drop(log);
    let log = open(root.path(), LogConfig::default());
    assert_eq!(log.latest_epoch(), None);
    assert!(!checkpoint_path(root.path()).exists());
}

#[test]
fn follower_appends_keep_the_leaders_epochs() {
    let leader_root = tempfile::tempdir().unwrap();
    let mut leader = open(leader_root.path(), LogConfig::default());
    append_epochs(&mut leader, &[0, 2, 2, 4]);
    let end = leader.log_end_offset();

    let follower_root = tempfile::tempdir().unwrap();
    let mut follower = open(follower_root.path(), LogConfig::default());
    let first_half = leader.read(0, 1 << 20, 4, true).unwrap().records;
    follower.append_as_follower(&first_half, T0).unwrap();
    assert_eq!(follower.epoch_entries(), entries(&[(0, 0), (2, 2)]));
    let rest = leader.read(4, 1 << 20, end, true).unwrap().records;
    follower.append_as_follower(&rest, T0).unwrap();

    assert_eq!(follower.epoch_entries(), leader.epoch_entries());
    assert_eq!(
        checkpoint_text(follower_root.path()),
        checkpoint_text(leader_root.path())
    );
    let stored = follower.read(0, 1 << 20, end, true).unwrap().records;
    let epochs: Vec<i32> = BatchIter::new(&stored).map(|(h, _)| h.partition_leader_epoch).collect();
    assert_eq!(epochs, vec![0, 2, 2, 4]);
}

#[test]
fn follower_append_whose_epoch_goes_backwards_is_refused_before_writing() {
    let leader_root = tempfile::tempdir().unwrap();
    let mut stale_leader = open(leader_root.path(), LogConfig::default());
    append_epochs(&mut stale_leader, &[3, 3, 3]);
    let from_epoch_3 = stale_leader.read(4, 1 << 20, 6, true).unwrap().records;

    let follower_root = tempfile::tempdir().unwrap();
    let mut follower = open(follower_root.path(), LogConfig::default());
    append_epochs(&mut follower, &[1, 5]); // offsets 0..4, latest epoch 5
    let size = follower.size_bytes();

    let err = follower.append_as_follower(&from_epoch_3, T0).unwrap_err();
    assert!(
        matches!(
            err,
            LogError::LeaderEpochRegression {
                base_offset: 4,
                epoch: 3,
                latest_epoch: 5
            }
        ),
        "{err}"
    );
    assert_eq!((follower.log_end_offset(), follower.size_bytes()), (4, size));
    assert_eq!(follower.epoch_entries(), entries(&[(1, 0), (5, 2)]));
}

/// A leader appending at an epoch below the log's latest is a bug in leadership tracking: the
/// append is refused in every build (the caller reports the broken invariant), and nothing is
/// written. This test ran only in debug builds and expected a panic until the refusal replaced
/// it; it runs everywhere now.
#[test]
fn leader_append_with_a_stale_epoch_is_refused_before_writing() {
    let root = tempfile::tempdir().unwrap();
    let mut log = open(root.path(), LogConfig::default());
    append_epochs(&mut log, &[4]);
    let size = log.size_bytes();
    let mut stale = encode_simple_batch(2, 80, T0);
    let err = log.append_as_leader(&mut stale, 2, T0).unwrap_err();
    assert!(
        matches!(
            err,
            LogError::LeaderEpochRegression {
                base_offset: 2,
                epoch: 2,
                latest_epoch: 4
            }
        ),
        "{err}"
    );
    assert_eq!((log.log_end_offset(), log.size_bytes()), (2, size));
    assert_eq!(log.epoch_entries(), entries(&[(4, 0)]));
    assert!(crate::invariant::reported("a leader append at epoch 2 was refused"));
}

#[test]
fn end_offset_for_epoch_follows_kafkas_end_offset_for() {
    let root = tempfile::tempdir().unwrap();
    let mut log = open(root.path(), LogConfig::default());
    assert_eq!(log.end_offset_for_epoch(0), UNDEFINED, "empty cache");

    // Epoch 2 starts at 0, epoch 4 at 6, epoch 7 at 10; the log ends at 14.
    append_epochs(&mut log, &[2, 2, 2, 4, 4, 7, 7]);
    assert_eq!(log.log_end_offset(), 14);

    assert_eq!(log.end_offset_for_epoch(7), (7, 14), "latest: log end");
    assert_eq!(log.end_offset_for_epoch(4), (4, 10), "middle: next start");
    assert_eq!(log.end_offset_for_epoch(2), (2, 6), "first: next start");
    assert_eq!(
        log.end_offset_for_epoch(5),
        (4, 10),
        "between cached epochs: the largest epoch below it"
    );
    assert_eq!(
        log.end_offset_for_epoch(1),
        (1, 0),
        "below the earliest: Kafka answers the requested epoch and the first epoch's start"
    );
    assert_eq!(log.end_offset_for_epoch(8), UNDEFINED, "above the latest");
    assert_eq!(log.end_offset_for_epoch(UNDEFINED_EPOCH), UNDEFINED);
}

#[test]
fn truncate_to_drops_epochs_starting_at_or_after_the_new_end() {
    let root = tempfile::tempdir().unwrap();
    let mut log = open(root.path(), small_segments());
    append_epochs(&mut log, &[1, 1, 2, 2, 3, 3]); // epoch 2 at 4, epoch 3 at 8

    log.truncate_to(9).unwrap(); // inside epoch 3's first batch: it goes whole
    assert_eq!(log.log_end_offset(), 8);
    assert_eq!(log.epoch_entries(), entries(&[(1, 0), (2, 4)]));
    assert_eq!(log.end_offset_for_epoch(2), (2, 8));
    assert_eq!(checkpoint_text(root.path()), "0\n2\n1 0\n2 4\n");

    assert_eq!(append_leader(&mut log, 6), 8);
    assert_eq!(log.epoch_entries(), entries(&[(1, 0), (2, 4), (6, 8)]));

    log.truncate_to(4).unwrap();
    assert_eq!(log.epoch_entries(), entries(&[(1, 0)]));

    log.truncate_to(0).unwrap();
    assert_eq!(log.latest_epoch(), None);
    assert_eq!(checkpoint_text(root.path()), "0\n0\n");
}

#[test]
fn retention_moves_the_first_epochs_start_to_the_new_log_start() {
    let root = tempfile::tempdir().unwrap();
    let mut log = open(root.path(), small_segments());
    append_epochs(&mut log, &[1; 16]); // offsets 0..32
    append_epochs(&mut log, &[2; 8]); // offsets 32..48
    let half = LogConfig {
        retention_ms: -1,
        retention_bytes: log.size_bytes() as i64 / 2,
        ..small_segments()
    };
    log.update_config(half);
    assert!(log.delete_retained_segments(T0, i64::MAX).unwrap() > 0);
    let start = log.log_start_offset();
    assert!(start > 0 && start < 32, "log start {start} is inside epoch 1");
    assert_eq!(log.epoch_entries(), entries(&[(1, start), (2, 32)]));
    assert_eq!(log.end_offset_for_epoch(0), (0, start));

    log.update_config(LogConfig {
        retention_ms: -1,
        retention_bytes: 0,
        ..small_segments()
    });
    log.delete_retained_segments(T0, i64::MAX).unwrap();
    let start = log.log_start_offset();
    assert!(start > 32, "only the active segment is left, from {start}");
    assert_eq!(log.epoch_entries(), entries(&[(2, start)]));
    assert_eq!(checkpoint_text(root.path()), format!("0\n1\n2 {start}\n"));

    drop(log);
    let log = open(root.path(), small_segments());
    assert_eq!(log.epoch_entries(), entries(&[(2, start)]));
}

#[test]
fn reopen_after_an_unclean_stop_without_a_checkpoint_rebuilds_it_from_batch_headers() {
    let root = tempfile::tempdir().unwrap();
    let mut log = open(root.path(), small_segments());
    append_epochs(&mut log, &[0, 0, 0, 3, 3, 3, 3, 3, 8, 9, 9]);
    let expected = log.epoch_entries().to_vec();
    let text = checkpoint_text(root.path());
    assert!(log.segment_count() > 1, "epochs span several segments");
    drop(log); // no close: an unclean stop
    std::fs::remove_file(checkpoint_path(root.path())).unwrap();

    let log = open(root.path(), small_segments());
    assert_eq!(log.epoch_entries(), expected);
    assert_eq!(checkpoint_text(root.path()), text, "rebuilt file written back");
    assert_eq!(log.end_offset_for_epoch(3), (3, 16));
}

#[test]
fn epochs_an_unsynced_checkpoint_write_lost_come_back_from_the_active_segment_after_a_crash() {
    let root = tempfile::tempdir().unwrap();
    let mut log = open(root.path(), small_segments());
    append_epochs(&mut log, &[0, 0, 3]);
    // Until a roll, which synced the checkpoint (epochs 0 and 3): the active segment holds one batch.
    let segments = log.segment_count();
    while log.segment_count() == segments {
        append_leader(&mut log, 3);
    }
    let synced = checkpoint_text(root.path());
    // Epochs 5 and 6 start in the active segment; their checkpoint writes skip the fsync.
    append_epochs(&mut log, &[5, 6]);
    assert_eq!(log.segment_count(), segments + 1, "no roll since");
    let expected = log.epoch_entries().to_vec();
    assert_eq!(expected.len(), 4, "{expected:?}");
    drop(log); // no close: an unclean stop
               // Power loss took the unsynced writes: the file is as of the last durable write.
    std::fs::write(checkpoint_path(root.path()), &synced).unwrap();

    let log = open(root.path(), small_segments());
    assert_eq!(log.epoch_entries(), expected);
    assert_eq!(log.end_offset_for_epoch(5), (5, expected[3].start_offset));
    assert_eq!(
        LeaderEpochCache::read(&std::sync::Arc::from(partition_dir(root.path())))
            .unwrap()
            .unwrap()
            .entries(),
        expected,
        "the restored entries are written back"
    );
}

#[test]
fn a_clean_close_makes_the_checkpoint_whole_so_reopening_trusts_it() {
    let root = tempfile::tempdir().unwrap();
    let mut log = open(root.path(), LogConfig::default());
    append_epochs(&mut log, &[1, 2]);
    log.close().unwrap();
    // Were the file trusted after an unclean stop only, this edit would be undone by a rescan.
    std::fs::write(checkpoint_path(root.path()), "0\n1\n1 0\n").unwrap();
    let log = open(root.path(), LogConfig::default());
    assert_eq!(
        log.epoch_entries(),
        entries(&[(1, 0)]),
        "a clean open reads the checkpoint as is"
    );
}

#[test]
fn reopen_after_a_clean_close_gives_the_same_cache() {
    let root = tempfile::tempdir().unwrap();
    let mut log = open(root.path(), small_segments());
    append_epochs(&mut log, &[0, 2, 2, 2, 2, 2, 7, 7]);
    let expected = log.epoch_entries().to_vec();
    log.close().unwrap();

    let mut log = open(root.path(), small_segments());
    assert_eq!(log.epoch_entries(), expected);
    assert_eq!(log.latest_epoch(), Some(7));
    assert_eq!(append_leader(&mut log, 7), 16);
    assert_eq!(log.epoch_entries(), expected, "same epoch adds nothing");
}

#[test]
fn corrupt_checkpoint_is_rebuilt_from_batch_headers() {
    let root = tempfile::tempdir().unwrap();
    let mut log = open(root.path(), LogConfig::default());
    append_epochs(&mut log, &[1, 1, 4, 6]);
    let expected = log.epoch_entries().to_vec();
    let text = checkpoint_text(root.path());
    log.close().unwrap();

    let corruptions = [
        "garbage",
        "1\n3\n1 0\n4 4\n6 6\n",   // unknown version
        "0\n3\n1 0\n4 4\n",        // fewer entries than counted
        "0\n2\n1 0\n4 4\n6 6\n",   // more entries than counted
        "0\n3\n1 0\n4 x\n6 6\n",   // unparsable offset
        "0\n3\n1 0\n6 4\n4 6\n",   // epochs going backwards
        "0\n3\n1 0\n4 4 4\n6 6\n", // three fields
        "0\n3\n-2 0\n4 4\n6 6\n",  // negative epoch
    ];
    for corruption in corruptions {
        std::fs::write(checkpoint_path(root.path()), corruption).unwrap();
        let log = open(root.path(), LogConfig::default());
        assert_eq!(log.epoch_entries(), expected, "after {corruption:?}");
        assert_eq!(checkpoint_text(root.path()), text, "after {corruption:?}");
        log.close().unwrap();
    }
}

#[test]
fn checkpoint_entries_past_the_recovered_log_end_are_dropped_on_open() {
    // The checkpoint is written before the batch, so a crash can leave an epoch whose data
    // never reached the disk.
    let root = tempfile::tempdir().unwrap();
    let mut log = open(root.path(), LogConfig::default());
    append_epochs(&mut log, &[1, 2]);
    drop(log);
    std::fs::write(checkpoint_path(root.path()), "0\n3\n1 0\n2 2\n5 4\n").unwrap();

    let log = open(root.path(), LogConfig::default());
    assert_eq!(log.epoch_entries(), entries(&[(1, 0), (2, 2)]));
    assert_eq!(checkpoint_text(root.path()), "0\n2\n1 0\n2 2\n");
}

//! Unit tests of a partition replica: leader and follower sides, the ISR and the high watermark.

use super::*;
use crate::metadata::records::IsrChangeRequest;
use sluice_protocol::batch::test_support::encode_simple_batch;

pub(super) const NOW: i64 = 1_800_000_000_000;
const LAG_MS: i64 = 30_000;

pub(super) fn registration(leader: i32, leader_epoch: i32, partition_epoch: i32, isr: &[i32]) -> PartitionRegistration {
    PartitionRegistration {
        replicas: vec![1, 2, 3].into(),
        isr: isr.into(),
        leader,
        leader_epoch,
        partition_epoch,
        ..Default::default()
    }
}

pub(crate) fn open(dir: &Path, node_id: i32) -> Partition {
    let tail_cache = crate::log::TailCacheBudget::new(1 << 20, 64 << 20);
    Partition::open(
        dir,
        "t",
        Uuid::nil(),
        0,
        node_id,
        LogConfig::default(),
        None,
        &tail_cache,
        &crate::log::FileCache::unbounded(),
        NOW,
    )
    .unwrap()
}

/// Makes broker 1 the only replica, leader at epoch 0.
pub(super) fn lead_alone(p: &Partition) {
    let single = PartitionRegistration {
        replicas: vec![1].into(),
        isr: vec![1].into(),
        leader: 1,
        leader_epoch: 0,
        partition_epoch: 0,
        ..Default::default()
    };
    p.apply_registration(&single, NOW);
}

pub(super) fn append(p: &Partition, records: usize) -> i64 {
    let mut batch = encode_simple_batch(records, 10, NOW);
    match p.append_as_leader(&mut batch, NOW).unwrap() {
        AppendOutcome::Appended(info) => info.last_offset + 1,
        AppendOutcome::Duplicate { .. } => panic!("not a retry"),
    }
}

fn new_isr(change: Option<IsrChangeRequest>) -> Vec<i32> {
    match change {
        Some(IsrChangeRequest { new_isr, .. }) => new_isr,
        other => panic!("expected an ISR change, got {other:?}"),
    }
}

#[test]
fn the_high_watermark_is_the_lowest_log_end_over_the_isr() {
    let dir = tempfile::tempdir().unwrap();
    let p = open(dir.path(), 1);
    assert_eq!(
        p.apply_registration(&registration(1, 0, 0, &[1, 2, 3]), NOW),
        RoleChange::BecameLeader
    );
    assert_eq!(append(&p, 5), 5);
    assert_eq!(p.high_watermark(), 0, "no follower has confirmed anything yet");
    assert_eq!(p.record_follower_fetch(2, 5, 0, -1, NOW).unwrap(), None);
    assert_eq!(p.high_watermark(), 0, "follower 3 has not fetched from this leader yet");
    p.record_follower_fetch(3, 3, 0, -1, NOW).unwrap();
    assert_eq!(p.high_watermark(), 3);
    p.record_follower_fetch(3, 5, 0, -1, NOW).unwrap();
    assert_eq!(p.high_watermark(), 5);
    // A follower that reports less later (it truncated) never moves the HW backwards.
    p.record_follower_fetch(3, 4, 0, -1, NOW).unwrap();
    assert_eq!(p.high_watermark(), 5);
    // Consumers read only below it; followers read to the log end.
    append(&p, 2);
    let consumer = p.read(5, 1 << 20, true, ReadBound::HighWatermark).unwrap();
    assert!(consumer.records.is_empty());
    let follower = p.read(5, 1 << 20, true, ReadBound::LogEnd).unwrap();
    assert_eq!(BatchIter::new(&follower.records).count(), 1);
}

#[test]
fn a_lagging_follower_leaves_the_isr_once_committed_and_rejoins_when_caught_up() {
    let dir = tempfile::tempdir().unwrap();
    let p = open(dir.path(), 1);
    p.apply_registration(&registration(1, 0, 0, &[1, 2, 3]), NOW);
    append(&p, 10);
    p.record_follower_fetch(2, 10, 0, -1, NOW + 1_000).unwrap();
    assert_eq!(
        p.isr_shrink(NOW + LAG_MS, LAG_MS),
        None,
        "everyone is within the lag time"
    );
    assert_eq!(new_isr(p.isr_shrink(NOW + LAG_MS + 1, LAG_MS)), vec![1, 2]);
    assert_eq!(p.isr_shrink(NOW + LAG_MS + 2, LAG_MS), None, "one change at a time");
    assert_eq!(p.high_watermark(), 0, "the shrink takes effect only once committed");
    p.apply_registration(&registration(1, 0, 1, &[1, 2]), NOW + LAG_MS + 3);
    assert_eq!(p.high_watermark(), 10);
    // Follower 3 returns: behind the HW it stays out; at the HW it asks to rejoin.
    assert_eq!(p.record_follower_fetch(3, 4, 0, -1, NOW + LAG_MS + 4).unwrap(), None);
    let rejoin = p.record_follower_fetch(3, 10, 0, -1, NOW + LAG_MS + 5).unwrap();
    match rejoin {
        Some(IsrChangeRequest {
            leader_epoch,
            partition_epoch,
            new_isr,
            ..
        }) => {
            assert_eq!((leader_epoch, partition_epoch), (0, 1));
            assert_eq!(new_isr, vec![1, 2, 3]);
        }
        other => panic!("expected an ISR expansion, got {other:?}"),
    }
    // While the expansion is decided the joining follower already holds the HW back, so
    // the HW never passes what a member-to-be has.
    append(&p, 5);
    p.record_follower_fetch(2, 15, 0, -1, NOW + LAG_MS + 6).unwrap();
    assert_eq!(p.high_watermark(), 10);
    p.record_follower_fetch(3, 15, 0, -1, NOW + LAG_MS + 7).unwrap();
    assert_eq!(p.high_watermark(), 15);
}

#[test]
fn a_single_replica_commits_on_append_and_unknown_replicas_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = open(dir.path(), 1);
    lead_alone(&p);
    assert_eq!(append(&p, 3), 3);
    assert_eq!(p.high_watermark(), 3);
    assert_eq!(
        p.record_follower_fetch(7, 0, 0, -1, NOW),
        Err(ResponseError::NotLeaderOrFollower)
    );
}

#[test]
fn a_follower_copies_the_leaders_batches_and_drops_fetches_from_an_old_epoch() {
    let leader_dir = tempfile::tempdir().unwrap();
    let follower_dir = tempfile::tempdir().unwrap();
    let leader = open(leader_dir.path(), 1);
    let follower = open(follower_dir.path(), 2);
    leader.apply_registration(&registration(1, 4, 0, &[1, 2, 3]), NOW);
    let change = follower.apply_registration(&registration(1, 4, 0, &[1, 2, 3]), NOW);
    assert_eq!(
        change,
        RoleChange::BecameFollower {
            leader: 1,
            leader_epoch: 4
        }
    );
    append(&leader, 3);
    append(&leader, 2);
    let batches = leader.read(0, 1 << 20, true, ReadBound::LogEnd).unwrap().records;
    assert_eq!(follower.append_as_follower(&batches, 4, NOW).unwrap(), 5);
    assert_eq!(follower.latest_log_epoch(), Some(4));
    follower.update_follower_high_watermark(3, 4);
    assert_eq!(follower.high_watermark(), 3);
    follower.update_follower_high_watermark(9, 4);
    assert_eq!(follower.high_watermark(), 5, "never past the follower's log end");
    follower.update_follower_high_watermark(1, 4);
    assert_eq!(follower.high_watermark(), 5, "never back, whatever the leader reports");
    let copied = follower.read(0, 1 << 20, true, ReadBound::LogEnd).unwrap().records;
    assert_eq!(copied, batches, "replicas hold identical bytes");
    // Appending as leader is refused to a follower, and so is a fetch from an older epoch.
    let mut batch = encode_simple_batch(1, 10, NOW);
    assert_eq!(
        follower.append_as_leader(&mut batch, NOW).err().map(|e| e.0),
        Some(ResponseError::NotLeaderOrFollower)
    );
    follower.apply_registration(&registration(3, 5, 1, &[2, 3]), NOW);
    let err = follower.append_as_follower(&batches, 4, NOW).unwrap_err();
    assert_eq!(err.0, ResponseError::FencedLeaderEpoch);
    // Truncation to the new leader's history drops the tail and lowers the HW with it.
    follower.truncate_as_follower(3, 5, false).unwrap();
    assert_eq!(follower.log_end_offset(), 3);
    assert_eq!(follower.high_watermark(), 3);
    follower.truncate_as_follower(2, 5, false).unwrap();
    assert_eq!(follower.log_end_offset(), 0, "a batch straddling the point goes whole");
    assert_eq!(follower.high_watermark(), 0);
    // A late answer from the previous leader (epoch 4) does not move the high watermark.
    follower.update_follower_high_watermark(5, 4);
    assert_eq!(follower.high_watermark(), 0);
}

/// HW <= LEO is asserted where the high watermark moves: a candidate past the log end offset
/// (here forced, as the `hw_past_log_end` failpoint does) is reported as a broken invariant and
/// not taken.
#[test]
fn a_high_watermark_past_the_log_end_is_a_broken_invariant_and_is_not_taken() {
    let dir = tempfile::tempdir().unwrap();
    let leader = open(dir.path(), 1);
    leader.apply_registration(&registration(1, 4, 0, &[1]), NOW);
    append(&leader, 3);
    assert_eq!(leader.high_watermark(), 3);
    leader.advance_high_watermark(7);
    assert_eq!(leader.high_watermark(), 3, "not taken");
    assert!(crate::invariant::reported(
        "the high watermark would move to 7, past the log end offset 3"
    ));
}

#[test]
fn a_fetch_from_outside_the_replica_set_is_refused_and_moves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let p = open(dir.path(), 1);
    p.apply_registration(&registration(1, 0, 0, &[1, 2, 3]), NOW);
    append(&p, 5);
    p.record_follower_fetch(2, 5, 0, 0, NOW).unwrap();
    p.record_follower_fetch(3, 3, 0, 0, NOW).unwrap();
    assert_eq!(p.high_watermark(), 3);
    // Broker 3 is reassigned away; broker 2 drops out of the ISR meanwhile.
    let moved = PartitionRegistration {
        replicas: vec![1, 2].into(),
        isr: vec![1, 2].into(),
        leader: 1,
        leader_epoch: 0,
        partition_epoch: 1,
        ..Default::default()
    };
    p.apply_registration(&moved, NOW);
    append(&p, 5);
    let hw = p.high_watermark();
    assert_eq!(hw, 5, "the ISR {{1, 2}} holds offsets below 5");
    assert_eq!(
        p.record_follower_fetch(3, 10, 0, 0, NOW),
        Err(ResponseError::UnknownLeaderEpoch),
        "a leader epoch was named: Kafka's answer is UNKNOWN_LEADER_EPOCH"
    );
    assert_eq!(
        p.record_follower_fetch(3, 10, 0, -1, NOW),
        Err(ResponseError::NotLeaderOrFollower)
    );
    assert_eq!(
        p.record_follower_fetch(1, 10, 0, -1, NOW),
        Err(ResponseError::NotLeaderOrFollower),
        "the leader never fetches from itself"
    );
    assert_eq!(p.high_watermark(), hw, "refused fetches move no high watermark");
    // Nothing was recorded for broker 3: a later legitimate fetch still starts from scratch.
    assert_eq!(p.record_follower_fetch(2, 10, 0, 0, NOW).unwrap(), None);
    assert_eq!(p.high_watermark(), 10);
}

#[test]
fn a_planned_read_holds_no_lock_and_reads_what_was_there_when_planned() {
    let dir = tempfile::tempdir().unwrap();
    let p = open(dir.path(), 1);
    lead_alone(&p);
    append(&p, 3);
    let planned = p.plan_read(0, i32::MAX as usize, ReadBound::HighWatermark).unwrap();
    let second = p.plan_read(0, i32::MAX as usize, ReadBound::HighWatermark).unwrap();
    // Appends and other plans go ahead while plans are outstanding (the lock is not held).
    assert_eq!(append(&p, 2), 5);
    let read = planned.read(i32::MAX as usize, true).unwrap();
    assert_eq!(BatchIter::new(&read.records).count(), 1);
    assert_eq!(read.high_watermark, 3, "the HW the plan was bounded by");
    assert_eq!(second.read(i32::MAX as usize, true).unwrap().records, read.records);
    let now = p.read(0, i32::MAX as usize, true, ReadBound::HighWatermark).unwrap();
    assert_eq!(BatchIter::new(&now.records).count(), 2);
}

#[test]
fn timestamp_lookups_answer_consumers_only_from_records_below_the_high_watermark() {
    let dir = tempfile::tempdir().unwrap();
    let p = open(dir.path(), 1);
    p.apply_registration(&registration(1, 0, 0, &[1, 2, 3]), NOW);
    for (i, timestamp) in [NOW, NOW + 1_000, NOW + 2_000].into_iter().enumerate() {
        let mut batch = encode_simple_batch(1, 10, timestamp);
        assert!(matches!(
            p.append_as_leader(&mut batch, NOW).unwrap(),
            AppendOutcome::Appended(info) if info.last_offset == i as i64
        ));
    }
    p.record_follower_fetch(2, 2, 0, -1, NOW).unwrap();
    p.record_follower_fetch(3, 2, 0, -1, NOW).unwrap();
    assert_eq!(p.high_watermark(), 2, "offset 2 is not replicated yet");
    let consumer = ReadBound::HighWatermark;
    assert_eq!(p.last_fetchable_offset(consumer), 2);
    assert_eq!(p.last_fetchable_offset(ReadBound::LogEnd), 3);

    assert_eq!(
        p.offset_for_timestamp(NOW + 500, consumer).unwrap(),
        Some((1, NOW + 1_000))
    );
    assert_eq!(
        p.offset_for_timestamp(NOW + 2_000, consumer).unwrap(),
        None,
        "the only record reaching the time sits past the HW"
    );
    assert_eq!(p.max_timestamp_offset(consumer), None);
    // A replica (or a debugging tool) is answered from the whole log.
    assert_eq!(
        p.offset_for_timestamp(NOW + 2_000, ReadBound::LogEnd).unwrap(),
        Some((2, NOW + 2_000))
    );
    assert_eq!(p.max_timestamp_offset(ReadBound::LogEnd), Some((2, NOW + 2_000)));

    // Once replicated, the record is visible to consumers' lookups too.
    p.record_follower_fetch(2, 3, 0, -1, NOW).unwrap();
    p.record_follower_fetch(3, 3, 0, -1, NOW).unwrap();
    assert_eq!(p.high_watermark(), 3);
    assert_eq!(
        p.offset_for_timestamp(NOW + 2_000, consumer).unwrap(),
        Some((2, NOW + 2_000))
    );
    assert_eq!(p.max_timestamp_offset(consumer), Some((2, NOW + 2_000)));
    assert_eq!(
        p.offset_for_timestamp(NOW + 2_001, consumer).unwrap(),
        None,
        "past every record"
    );
}

#[test]
fn a_consumer_may_be_sent_only_to_in_sync_followers_whose_log_holds_its_offset() {
    let dir = tempfile::tempdir().unwrap();
    let p = open(dir.path(), 1);
    p.apply_registration(&registration(1, 0, 0, &[1, 2]), NOW);
    append(&p, 10);
    p.record_follower_fetch(2, 10, 0, -1, NOW).unwrap(); // in sync, caught up
    p.record_follower_fetch(3, 10, 0, -1, NOW).unwrap(); // caught up, but not in the ISR
    let ids = |offset: i64| -> Vec<i32> {
        let candidates = p.read_candidates(offset, NOW + 500).unwrap();
        candidates.iter().map(|c| c.broker_id).collect()
    };
    assert_eq!(ids(4), vec![1, 2], "follower 3 is outside the ISR");
    assert_eq!(ids(10), vec![1, 2], "follower 2 holds up to its log end");
    assert_eq!(ids(11), vec![1], "no follower holds an offset past its log end");
    let follower = p.read_candidates(4, NOW + 500).unwrap()[1];
    assert_eq!((follower.log_end_offset, follower.since_caught_up_ms), (10, 500));
    // A follower replica sends no one anywhere.
    let dir = tempfile::tempdir().unwrap();
    let follower = open(dir.path(), 2);
    follower.apply_registration(&registration(1, 0, 0, &[1, 2]), NOW);
    assert!(follower.read_candidates(0, NOW).is_none());
}

#[test]
fn a_follower_fetching_in_a_session_stays_in_the_isr_on_an_idle_partition_it_no_longer_names() {
    let dir = tempfile::tempdir().unwrap();
    let p = open(dir.path(), 1);
    p.apply_registration(&registration(1, 0, 0, &[1, 2, 3]), NOW);
    append(&p, 10);
    let session = WatchSet::new();
    session.fetched(NOW + 1_000);
    p.record_follower_session_fetch(2, 10, 0, -1, NOW + 1_000, Some(session.fetch_clock()))
        .unwrap();
    p.record_follower_fetch(3, 10, 0, -1, NOW + 1_000).unwrap();
    // Follower 2's session goes on fetching without naming the partition (nothing moved);
    // follower 3 stopped fetching.
    session.fetched(NOW + 2 * LAG_MS);
    assert_eq!(new_isr(p.isr_shrink(NOW + 2 * LAG_MS, LAG_MS)), vec![1, 2]);
    p.apply_registration(&registration(1, 0, 1, &[1, 2]), NOW + 2 * LAG_MS);
    // Once the session no longer holds the partition, its fetches say nothing about it.
    p.forget_follower_session(2, session.fetch_clock());
    session.fetched(NOW + 4 * LAG_MS);
    assert_eq!(new_isr(p.isr_shrink(NOW + 4 * LAG_MS, LAG_MS)), vec![1]);
}

#[test]
fn an_append_ends_what_a_sessions_fetches_say_for_a_follower_that_does_not_catch_up() {
    let dir = tempfile::tempdir().unwrap();
    let p = open(dir.path(), 1);
    p.apply_registration(
        &PartitionRegistration {
            replicas: vec![1, 2].into(),
            isr: vec![1, 2].into(),
            leader: 1,
            leader_epoch: 0,
            partition_epoch: 0,
            ..Default::default()
        },
        NOW,
    );
    let session = WatchSet::new();
    session.fetched(NOW);
    p.record_follower_session_fetch(2, 0, 0, -1, NOW, Some(session.fetch_clock()))
        .unwrap();
    // The follower's session fetches at NOW + LAG_MS, caught up; then records arrive and its
    // later fetches never name the partition at the new log end.
    session.fetched(NOW + LAG_MS);
    append(&p, 5);
    session.fetched(NOW + 3 * LAG_MS);
    assert_eq!(
        p.isr_shrink(NOW + 2 * LAG_MS, LAG_MS),
        None,
        "caught up at the session's fetch before the append"
    );
    assert_eq!(new_isr(p.isr_shrink(NOW + 2 * LAG_MS + 1, LAG_MS)), vec![1]);
}

#[test]
fn the_writeback_pass_hears_only_of_logs_that_changed_since_it_last_looked() {
    let dir = tempfile::tempdir().unwrap();
    let p = open(dir.path(), 1);
    assert!(p.take_writeback_due(), "a log just opened is looked at once");
    assert!(!p.take_writeback_due(), "then not while nothing changes");
    lead_alone(&p);
    assert!(!p.take_writeback_due(), "a role change writes nothing");
    append(&p, 3);
    assert!(p.take_writeback_due(), "an append");
    assert!(!p.take_writeback_due());
    p.delete_records(2).unwrap();
    assert!(p.take_writeback_due(), "a log start move");
    p.writeback_again();
    assert!(p.take_writeback_due(), "work a pass could not finish");
}

/// Every hosted replica keeps a `Partition`, idle or not (issue 33: 100,000 replicas a node).
/// What most replicas never use stays out of it: producer tables until an idempotent producer
/// writes, the topic's settings and name shared by its partitions, the log's name derived from
/// its directory. Growing it is a decision, not an accident.
#[test]
fn a_partition_replica_stays_small() {
    use std::mem::size_of;
    let size = size_of::<Partition>();
    assert!(
        size <= 848,
        "Partition is {size} bytes, more than the 848 it was held to"
    );
    assert!(size_of::<Mutex<crate::producer_state::ProducerStateManager>>() <= 32);
    assert!(size_of::<crate::log::PartitionLog>() <= 560);
}

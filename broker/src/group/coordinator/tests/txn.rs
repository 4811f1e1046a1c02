//! Transactional offsets (KIP-98/KIP-447): pending until their producer's marker, the
//! later-append-wins rule against plain commits, fencing of zombie producers, retention and
//! deletion, and the same answers from a replayed log.
use super::*;

const PRODUCER: i64 = 4_000;
const OTHER_PRODUCER: i64 = 4_001;

fn orders(partition: i32, value: i64) -> ((String, i32), OffsetAndMetadata) {
    (("orders".to_string(), partition), offset(value, 100))
}

fn committed(f: &Fixture, group: &str, partition: i32) -> Option<i64> {
    let asked = [("orders".to_string(), vec![partition])];
    let fetched = f.coordinator.fetch_offsets(group, Some(&asked)).unwrap();
    fetched[0].2.as_ref().map(|o| o.offset)
}

fn pending(f: &Fixture, group: &str) -> Vec<(String, i32)> {
    let mut partitions: Vec<_> = f.coordinator.pending_txn_partitions(group).into_iter().collect();
    partitions.sort();
    partitions
}

/// A TxnOffsetCommit of `offsets` by `producer` appended at log offset `base_offset`.
fn txn_commit(
    f: &mut Fixture,
    group: &str,
    producer: i64,
    offsets: Vec<((String, i32), OffsetAndMetadata)>,
    base: i64,
) {
    assert_eq!(f.coordinator.validate_txn_commit(group, "", None, -1, f.now), Ok(0));
    f.coordinator.txn_offsets_appended(group, producer, offsets, base);
}

#[test]
fn transactional_offsets_are_invisible_until_their_commit_marker() {
    let mut f = Fixture::new(config());
    txn_commit(&mut f, GROUP, PRODUCER, vec![orders(0, 15), orders(1, 16)], 10);
    assert_eq!(committed(&f, GROUP, 0), None);
    assert_eq!(f.coordinator.fetch_offsets(GROUP, None).unwrap(), vec![]);
    assert_eq!(pending(&f, GROUP), vec![("orders".into(), 0), ("orders".into(), 1)]);

    f.coordinator.complete_transaction(0, PRODUCER, true);
    assert_eq!(committed(&f, GROUP, 0), Some(15));
    assert_eq!(committed(&f, GROUP, 1), Some(16));
    assert!(pending(&f, GROUP).is_empty());
}

#[test]
fn an_abort_marker_drops_the_transactions_offsets_and_keeps_the_committed_ones() {
    let mut f = Fixture::new(config());
    f.coordinator.offsets_committed(GROUP, vec![orders(0, 5)], 0, f.now);
    txn_commit(&mut f, GROUP, PRODUCER, vec![orders(0, 15)], 10);
    f.coordinator.complete_transaction(0, PRODUCER, false);
    assert_eq!(committed(&f, GROUP, 0), Some(5));
    assert!(pending(&f, GROUP).is_empty());
    f.coordinator.complete_transaction(0, PRODUCER, true);
    assert_eq!(
        committed(&f, GROUP, 0),
        Some(5),
        "a second marker finds nothing pending"
    );
}

#[test]
fn a_committed_transaction_replaces_only_offsets_appended_before_it() {
    let mut f = Fixture::new(config());
    // Plain commit at log offset 5, transaction at 10: the transaction is later and wins.
    f.coordinator.offsets_committed(GROUP, vec![orders(0, 30)], 5, f.now);
    // Transaction at 10, plain commit at 20: the plain commit is later and stays.
    txn_commit(&mut f, GROUP, PRODUCER, vec![orders(0, 15), orders(1, 15)], 10);
    f.coordinator.offsets_committed(GROUP, vec![orders(1, 40)], 20, f.now);
    f.coordinator.complete_transaction(0, PRODUCER, true);
    assert_eq!(committed(&f, GROUP, 0), Some(15));
    assert_eq!(committed(&f, GROUP, 1), Some(40));

    // A plain commit appended before the transaction but replicated after its marker does
    // not overwrite it either.
    txn_commit(&mut f, GROUP, PRODUCER, vec![orders(2, 50)], 31);
    f.coordinator.complete_transaction(0, PRODUCER, true);
    f.coordinator.offsets_committed(GROUP, vec![orders(2, 9)], 30, f.now);
    assert_eq!(committed(&f, GROUP, 2), Some(50));
}

#[test]
fn a_marker_ends_only_its_producers_transaction_on_its_partition() {
    let mut f = Fixture::new(GroupConfig {
        num_partitions: 1,
        ..config()
    });
    txn_commit(&mut f, GROUP, PRODUCER, vec![orders(0, 15)], 10);
    txn_commit(&mut f, OTHER, PRODUCER, vec![orders(0, 25)], 11);
    txn_commit(&mut f, GROUP, OTHER_PRODUCER, vec![orders(1, 35)], 12);
    f.coordinator.complete_transaction(3, PRODUCER, true);
    assert_eq!(committed(&f, GROUP, 0), None, "another partition's marker");
    f.coordinator.complete_transaction(0, PRODUCER, true);
    assert_eq!(committed(&f, GROUP, 0), Some(15));
    assert_eq!(committed(&f, OTHER, 0), Some(25), "every group of the partition");
    assert_eq!(committed(&f, GROUP, 1), None);
    assert_eq!(pending(&f, GROUP), vec![("orders".into(), 1)]);
    // A later transaction of the same producer replaces what it left pending.
    txn_commit(&mut f, GROUP, OTHER_PRODUCER, vec![orders(1, 36)], 13);
    f.coordinator.complete_transaction(0, OTHER_PRODUCER, true);
    assert_eq!(committed(&f, GROUP, 1), Some(36));
}

#[test]
fn members_named_by_a_txn_commit_are_checked_so_zombies_are_fenced() {
    let mut f = Fixture::new(config());
    let generation = f.stable_group(GROUP, &["m1"]);
    let txn = |f: &mut Fixture, member: &str, generation: i32| {
        f.coordinator
            .validate_txn_commit(GROUP, member, None, generation, f.now)
    };
    assert_eq!(txn(&mut f, "m1", generation), Ok(0));
    assert_eq!(txn(&mut f, "m1", generation - 1), Err(ResponseError::IllegalGeneration));
    assert_eq!(txn(&mut f, "zombie", generation), Err(ResponseError::UnknownMemberId));
    // v0-v2 name no member: accepted whatever the group's state, as Kafka.
    assert_eq!(txn(&mut f, "", -1), Ok(0));
    assert_eq!(f.commit(GROUP, "", -1), Err(ResponseError::UnknownMemberId));
    // Unknown groups: created for generation -1, else ILLEGAL_GENERATION.
    assert_eq!(
        f.coordinator.validate_txn_commit("new", "m", None, 3, f.now),
        Err(ResponseError::IllegalGeneration)
    );
    assert_eq!(f.coordinator.validate_txn_commit("new", "", None, -1, f.now), Ok(0));
}

#[test]
fn a_txn_commit_is_accepted_while_the_rebalance_completes() {
    let mut f = Fixture::new(config());
    let generation = f.joined_group(GROUP, &["m1"]);
    assert_eq!(
        f.commit(GROUP, "m1", generation),
        Err(ResponseError::RebalanceInProgress)
    );
    assert_eq!(
        f.coordinator.validate_txn_commit(GROUP, "m1", None, generation, f.now),
        Ok(0)
    );
}

#[test]
fn txn_commits_to_a_partition_this_broker_does_not_lead_or_still_loads_are_refused() {
    let mut c = GroupCoordinator::new(config());
    assert_eq!(
        c.validate_txn_commit(GROUP, "", None, -1, 0),
        Err(ResponseError::NotCoordinator)
    );
    c.begin_load(0, 1);
    assert_eq!(
        c.validate_txn_commit(GROUP, "", None, -1, 0),
        Err(ResponseError::CoordinatorLoadInProgress)
    );
}

#[test]
fn open_transactions_keep_their_offsets_and_group_from_expiring() {
    let retention_ms = 1_000;
    let mut f = Fixture::new(GroupConfig {
        offsets_retention_ms: retention_ms,
        ..config()
    });
    f.coordinator
        .offsets_committed("standalone", vec![orders(0, 1), orders(1, 1)], 0, 0);
    txn_commit(&mut f, "standalone", PRODUCER, vec![orders(1, 2)], 5);
    txn_commit(&mut f, "txn-only", PRODUCER, vec![orders(0, 3)], 6);
    f.now = 10 * retention_ms;
    let fx = f.coordinator.expire_offsets(f.now);
    assert_eq!(
        fx,
        vec![Effect::Tombstones {
            partition: 0,
            group_id: "standalone".into(),
            offsets: vec![("orders".into(), 0)],
            group: false,
        }]
    );
    f.coordinator.complete_transaction(0, PRODUCER, true);
    assert_eq!(committed(&f, "standalone", 1), Some(2));
    assert_eq!(
        committed(&f, "txn-only", 0),
        Some(3),
        "the group was kept for its COMMIT"
    );
}

#[test]
fn deleting_a_group_tombstones_and_drops_its_open_transactions_offsets() {
    let mut f = Fixture::new(config());
    f.coordinator.offsets_committed(GROUP, vec![orders(0, 1)], 0, f.now);
    txn_commit(&mut f, GROUP, PRODUCER, vec![orders(0, 2), orders(1, 2)], 5);
    assert_eq!(
        f.coordinator.delete_group(GROUP),
        Ok(vec![Effect::Tombstones {
            partition: 0,
            group_id: GROUP.into(),
            offsets: vec![("orders".into(), 0), ("orders".into(), 1)],
            group: true,
        }])
    );
    f.coordinator.complete_transaction(0, PRODUCER, true);
    assert_eq!(committed(&f, GROUP, 1), None, "the COMMIT cannot bring the group back");
    assert!(pending(&f, GROUP).is_empty());
}

#[test]
fn deleting_a_partitions_offsets_drops_it_from_open_transactions() {
    let mut f = Fixture::new(config());
    txn_commit(&mut f, GROUP, PRODUCER, vec![orders(0, 2), orders(1, 2)], 5);
    let (errors, _) = f
        .coordinator
        .delete_offsets(GROUP, &[("orders".into(), 0)], |_, _| false)
        .unwrap();
    assert_eq!(errors, vec![None]);
    f.coordinator.complete_transaction(0, PRODUCER, true);
    assert_eq!(committed(&f, GROUP, 0), None);
    assert_eq!(committed(&f, GROUP, 1), Some(2));
}

// ---- loading ----

fn record(
    offset_in_log: i64,
    producer_id: Option<i64>,
    group: &str,
    partition: i32,
    value: Option<i64>,
) -> LoadedRecord {
    let value = value.map(|v| offset_commit_value(&offset(v, 100)));
    LoadedRecord::Record {
        offset: offset_in_log,
        producer_id,
        record: decode(Some(&offset_commit_key(group, "orders", partition)), value.as_deref()).unwrap(),
    }
}

fn marker(producer_id: i64, commit: bool) -> LoadedRecord {
    LoadedRecord::Marker { producer_id, commit }
}

fn loaded(log: Vec<LoadedRecord>) -> Fixture {
    let mut coordinator = GroupCoordinator::new(config());
    assert!(coordinator.begin_load(0, 1).is_empty());
    assert!(coordinator.complete_load(0, 1, log, 0));
    Fixture {
        coordinator,
        now: 0,
        next_reply: 1,
    }
}

#[test]
fn loading_applies_committed_transactions_drops_aborted_ones_and_keeps_open_ones_pending() {
    const ABORTED: i64 = 7;
    const OPEN: i64 = 8;
    let f = loaded(vec![
        record(0, None, GROUP, 0, Some(1)),
        record(1, Some(PRODUCER), GROUP, 0, Some(10)),
        record(2, Some(ABORTED), GROUP, 1, Some(20)),
        record(3, Some(OPEN), GROUP, 2, Some(30)),
        record(4, Some(PRODUCER), OTHER, 0, Some(11)),
        marker(ABORTED, false),
        marker(PRODUCER, true),
        record(7, Some(OPEN), "txn-only", 0, Some(40)),
    ]);
    assert_eq!(committed(&f, GROUP, 0), Some(10));
    assert_eq!(committed(&f, OTHER, 0), Some(11));
    assert_eq!(committed(&f, GROUP, 1), None, "aborted");
    assert_eq!(committed(&f, GROUP, 2), None, "still open");
    assert_eq!(pending(&f, GROUP), vec![("orders".into(), 2)]);
    assert_eq!(pending(&f, "txn-only"), vec![("orders".into(), 0)]);

    let mut f = f;
    f.coordinator.complete_transaction(0, OPEN, true);
    assert_eq!(committed(&f, GROUP, 2), Some(30));
    assert_eq!(committed(&f, "txn-only", 0), Some(40));
}

#[test]
fn loading_keeps_a_plain_commit_appended_after_a_transaction_that_commits_later() {
    let f = loaded(vec![
        record(0, Some(PRODUCER), GROUP, 0, Some(10)),
        record(1, None, GROUP, 0, Some(20)),
        record(2, None, GROUP, 1, Some(5)),
        record(3, Some(PRODUCER), GROUP, 1, Some(6)),
        marker(PRODUCER, true),
    ]);
    assert_eq!(committed(&f, GROUP, 0), Some(20));
    assert_eq!(committed(&f, GROUP, 1), Some(6));
}

#[test]
fn loading_a_tombstone_drops_the_partition_from_open_transactions() {
    let f = loaded(vec![
        record(0, Some(PRODUCER), GROUP, 0, Some(10)),
        record(1, Some(PRODUCER), GROUP, 1, Some(11)),
        record(2, None, GROUP, 0, None),
        marker(PRODUCER, true),
        // A marker of a producer with nothing pending changes nothing.
        marker(OTHER_PRODUCER, true),
    ]);
    assert_eq!(committed(&f, GROUP, 0), None);
    assert_eq!(committed(&f, GROUP, 1), Some(11));
}

#[test]
fn a_marker_written_while_the_partition_loads_ends_the_transaction_once_loaded() {
    let mut c = GroupCoordinator::new(config());
    c.begin_load(0, 1);
    // The load read the log before the markers: both transactions look open.
    c.complete_transaction(0, PRODUCER, true);
    c.complete_transaction(0, OTHER_PRODUCER, false);
    let log = vec![
        record(0, Some(PRODUCER), GROUP, 0, Some(10)),
        record(1, Some(OTHER_PRODUCER), GROUP, 1, Some(11)),
    ];
    assert!(c.complete_load(0, 1, log, 0));
    let f = Fixture {
        coordinator: c,
        now: 0,
        next_reply: 1,
    };
    assert_eq!(committed(&f, GROUP, 0), Some(10));
    assert_eq!(committed(&f, GROUP, 1), None);
    assert!(pending(&f, GROUP).is_empty());
}

#[test]
fn markers_seen_during_a_load_that_leadership_abandoned_are_forgotten() {
    let mut c = GroupCoordinator::new(config());
    c.begin_load(0, 1);
    c.complete_transaction(0, PRODUCER, true);
    c.unload(0);
    c.begin_load(0, 2);
    assert!(c.complete_load(0, 2, vec![record(0, Some(PRODUCER), GROUP, 0, Some(10))], 0));
    let f = Fixture {
        coordinator: c,
        now: 0,
        next_reply: 1,
    };
    assert_eq!(pending(&f, GROUP), vec![("orders".into(), 0)]);
}

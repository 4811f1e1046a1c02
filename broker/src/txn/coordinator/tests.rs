use super::*;

const NOW: i64 = 1_000_000;

fn coordinator() -> TransactionCoordinator {
    let mut c = TransactionCoordinator::new(TxnCoordinatorConfig {
        num_partitions: 1,
        max_timeout_ms: 900_000,
        id_expiration_ms: 604_800_000,
    });
    c.begin_load(0, 5);
    assert!(c.complete_load(0, 5, Vec::new()).is_empty());
    c
}

fn written(c: &mut TransactionCoordinator, t: &Transition) -> Option<MarkerJob> {
    c.transition_written(t)
}

/// A new id initialised: (producer id, epoch).
fn init(c: &mut TransactionCoordinator, id: &str, pid: i64) -> (i64, i16) {
    let t = match c.init_producer_id(id, 60_000, None, None, NOW).unwrap() {
        InitOutcome::NeedProducerId => match c.init_producer_id(id, 60_000, None, Some(pid), NOW).unwrap() {
            InitOutcome::Write(t) => t,
            other => panic!("{other:?}"),
        },
        InitOutcome::Write(t) => t,
        other => panic!("{other:?}"),
    };
    assert_eq!(written(c, &t), None);
    (t.target.producer_id, t.target.producer_epoch)
}

/// A transactions v1 EndTxn: `None` when nothing is written (a retry), else the transition.
fn end_v1(
    c: &mut TransactionCoordinator,
    id: &str,
    pid: i64,
    epoch: i16,
    commit: bool,
    now: i64,
) -> Result<Option<Transition>, ResponseError> {
    c.end_txn(
        id,
        EndRequest {
            producer_id: pid,
            producer_epoch: epoch,
            commit,
            tv2: false,
        },
        None,
        now,
    )
    .map(|outcome| match outcome {
        EndOutcome::Done { .. } => None,
        EndOutcome::Write { transition, .. } => Some(transition),
        EndOutcome::NeedProducerId => panic!("transactions v1 never asks for a producer id"),
    })
}

fn parts(list: &[(&str, i32)]) -> Vec<(String, i32)> {
    list.iter().map(|(t, p)| (t.to_string(), *p)).collect()
}

#[test]
fn java_string_hash_places_ids_as_kafka_does() {
    // "" hashes to 0; "a" to 97; Kafka's abs(hashCode) % 50.
    assert_eq!(partition_for("", 50), 0);
    assert_eq!(partition_for("a", 50), 97 % 50);
    let h = "my-transactional-id"
        .encode_utf16()
        .fold(0i32, |h, u| h.wrapping_mul(31).wrapping_add(u as i32));
    assert_eq!(partition_for("my-transactional-id", 50), h.abs() % 50);
}

#[test]
fn a_new_id_gets_a_producer_id_at_epoch_0_and_each_init_bumps_the_epoch() {
    let mut c = coordinator();
    assert_eq!(init(&mut c, "tx", 4000), (4000, 0));
    let t = match c.init_producer_id("tx", 60_000, None, None, NOW).unwrap() {
        InitOutcome::Write(t) => t,
        other => panic!("{other:?}"),
    };
    assert_eq!((t.target.producer_id, t.target.producer_epoch), (4000, 1));
    assert_eq!(t.target.state, TxnState::Empty);
    c.transition_written(&t);
    assert_eq!(c.describe("tx").unwrap().producer_epoch, 1);
}

#[test]
fn a_timeout_above_the_maximum_is_refused() {
    let mut c = coordinator();
    assert_eq!(
        c.init_producer_id("tx", 900_001, None, Some(1), NOW),
        Err(ResponseError::InvalidTransactionTimeout)
    );
    assert_eq!(
        c.init_producer_id("tx", 0, None, Some(1), NOW),
        Err(ResponseError::InvalidTransactionTimeout)
    );
}

#[test]
fn commit_goes_through_prepare_markers_and_complete() {
    let mut c = coordinator();
    let (pid, epoch) = init(&mut c, "tx", 7);
    let add = c
        .add_partitions(
            "tx",
            pid,
            epoch,
            &parts(&[("orders", 1), ("orders", 0)]),
            false,
            NOW + 1,
        )
        .unwrap()
        .expect("a write");
    assert_eq!(add.target.state, TxnState::Ongoing);
    assert_eq!(add.target.partitions, vec![("orders".to_string(), vec![0, 1])]);
    assert_eq!(add.target.start_ms, NOW + 1);
    // Busy while the write is pending.
    assert_eq!(
        c.add_partitions("tx", pid, epoch, &parts(&[("x", 0)]), false, NOW),
        Err(ResponseError::ConcurrentTransactions)
    );
    assert_eq!(written(&mut c, &add), None);
    assert_eq!(
        c.add_partitions("tx", pid, epoch, &parts(&[("orders", 0)]), false, NOW),
        Ok(None),
        "already in the transaction: nothing to write"
    );
    let prepare = end_v1(&mut c, "tx", pid, epoch, true, NOW + 2).unwrap().unwrap();
    assert_eq!(prepare.target.state, TxnState::PrepareCommit);
    let job = written(&mut c, &prepare).expect("markers owed");
    assert_eq!(
        job,
        MarkerJob {
            transactional_id: "tx".into(),
            partition: 0,
            coordinator_epoch: 5,
            producer_id: pid,
            producer_epoch: epoch,
            commit: true,
            partitions: parts(&[("orders", 0), ("orders", 1)]),
        }
    );
    assert_eq!(
        end_v1(&mut c, "tx", pid, epoch, true, NOW),
        Err(ResponseError::ConcurrentTransactions),
        "a retried commit while markers are written"
    );
    assert_eq!(
        end_v1(&mut c, "tx", pid, epoch, false, NOW),
        Err(ResponseError::InvalidTxnState)
    );
    let complete = c.markers_written(&job, NOW + 3).unwrap();
    assert_eq!(complete.target.state, TxnState::CompleteCommit);
    assert!(complete.target.partitions.is_empty());
    assert_eq!(written(&mut c, &complete), None);
    assert_eq!(
        end_v1(&mut c, "tx", pid, epoch, true, NOW),
        Ok(None),
        "a retried commit after it completed"
    );
    assert_eq!(
        end_v1(&mut c, "tx", pid, epoch, false, NOW),
        Err(ResponseError::InvalidTxnState)
    );
    // The next transaction starts afresh.
    let next = c
        .add_partitions("tx", pid, epoch, &parts(&[("b", 0)]), false, NOW + 9)
        .unwrap()
        .unwrap();
    assert_eq!(next.target.partitions, vec![("b".to_string(), vec![0])]);
    assert_eq!(next.target.start_ms, NOW + 9);
}

#[test]
fn abort_writes_abort_markers() {
    let mut c = coordinator();
    let (pid, epoch) = init(&mut c, "tx", 7);
    let add = c
        .add_partitions("tx", pid, epoch, &parts(&[("o", 0)]), false, NOW)
        .unwrap()
        .unwrap();
    written(&mut c, &add);
    let prepare = end_v1(&mut c, "tx", pid, epoch, false, NOW).unwrap().unwrap();
    assert_eq!(prepare.target.state, TxnState::PrepareAbort);
    let job = written(&mut c, &prepare).unwrap();
    assert!(!job.commit);
    assert_eq!(
        job.producer_epoch, epoch,
        "a client's abort keeps its epoch (transactions v1)"
    );
    let done = c.markers_written(&job, NOW).unwrap();
    assert_eq!(done.target.state, TxnState::CompleteAbort);
}

#[test]
fn end_txn_without_a_transaction_and_wrong_producers_are_refused() {
    let mut c = coordinator();
    assert_eq!(
        end_v1(&mut c, "nobody", 1, 0, true, NOW),
        Err(ResponseError::InvalidProducerIdMapping)
    );
    let (pid, epoch) = init(&mut c, "tx", 7);
    assert_eq!(
        end_v1(&mut c, "tx", pid, epoch, true, NOW),
        Err(ResponseError::InvalidTxnState)
    );
    assert_eq!(
        end_v1(&mut c, "tx", pid + 1, epoch, true, NOW),
        Err(ResponseError::InvalidProducerIdMapping)
    );
    assert_eq!(
        c.add_partitions("tx", pid, epoch + 1, &parts(&[("o", 0)]), false, NOW),
        Err(ResponseError::ProducerFenced)
    );
    assert_eq!(
        end_v1(&mut c, "", pid, epoch, true, NOW),
        Err(ResponseError::InvalidRequest)
    );
}

#[test]
fn a_new_producer_fences_the_open_transaction_of_the_old_one() {
    let mut c = coordinator();
    let (pid, epoch) = init(&mut c, "tx", 7);
    let add = c
        .add_partitions("tx", pid, epoch, &parts(&[("o", 0)]), false, NOW)
        .unwrap()
        .unwrap();
    written(&mut c, &add);
    let fence = match c.init_producer_id("tx", 60_000, None, None, NOW).unwrap() {
        InitOutcome::Fence(t) => t,
        other => panic!("{other:?}"),
    };
    assert_eq!(fence.target.state, TxnState::PrepareAbort);
    assert_eq!(
        fence.target.producer_epoch,
        epoch + 1,
        "the abort is written under a new epoch"
    );
    let job = written(&mut c, &fence).unwrap();
    assert_eq!((job.producer_epoch, job.commit), (epoch + 1, false));
    // The old producer is fenced; the new one retries until the abort completes.
    assert_eq!(
        end_v1(&mut c, "tx", pid, epoch, true, NOW),
        Err(ResponseError::ProducerFenced)
    );
    assert_eq!(
        c.init_producer_id("tx", 60_000, None, None, NOW),
        Err(ResponseError::ConcurrentTransactions)
    );
    let done = c.markers_written(&job, NOW).unwrap();
    written(&mut c, &done);
    match c.init_producer_id("tx", 60_000, None, None, NOW).unwrap() {
        InitOutcome::Write(t) => assert_eq!(t.target.producer_epoch, epoch + 2),
        other => panic!("{other:?}"),
    }
}

#[test]
fn kip_360_recovery_names_the_current_or_previous_producer_else_is_fenced() {
    let mut c = coordinator();
    let (pid, epoch) = init(&mut c, "tx", 7);
    assert_eq!(
        c.init_producer_id("tx", 60_000, Some((pid, epoch + 3)), None, NOW),
        Err(ResponseError::ProducerFenced)
    );
    let t = match c.init_producer_id("tx", 60_000, Some((pid, epoch)), None, NOW).unwrap() {
        InitOutcome::Write(t) => t,
        other => panic!("{other:?}"),
    };
    written(&mut c, &t);
    // A retry naming the epoch before this bump is still accepted.
    assert!(matches!(
        c.init_producer_id("tx", 60_000, Some((pid, epoch)), None, NOW),
        Ok(InitOutcome::Write(_))
    ));
}

#[test]
fn an_exhausted_epoch_gets_a_new_producer_id() {
    let mut c = coordinator();
    let (pid, _) = init(&mut c, "tx", 7);
    let mut stored = c.txns["tx"].stored();
    stored.producer_epoch = i16::MAX - 1;
    c.txns.get_mut("tx").unwrap().apply(&stored);
    assert_eq!(
        c.init_producer_id("tx", 60_000, None, None, NOW),
        Ok(InitOutcome::NeedProducerId)
    );
    match c.init_producer_id("tx", 60_000, None, Some(pid + 100), NOW).unwrap() {
        InitOutcome::Write(t) => assert_eq!((t.target.producer_id, t.target.producer_epoch), (pid + 100, 0)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn expired_transactions_are_aborted_under_a_new_epoch() {
    let mut c = coordinator();
    let (pid, epoch) = init(&mut c, "tx", 7);
    let add = c
        .add_partitions("tx", pid, epoch, &parts(&[("o", 0)]), false, NOW)
        .unwrap()
        .unwrap();
    written(&mut c, &add);
    assert!(
        c.expired_transactions(NOW + 60_000).is_empty(),
        "not past its timeout yet"
    );
    let expired = c.expired_transactions(NOW + 60_001);
    assert_eq!(expired.len(), 1);
    assert_eq!(expired[0].target.state, TxnState::PrepareAbort);
    assert_eq!(expired[0].target.producer_epoch, epoch + 1);
    assert!(c.expired_transactions(NOW + 90_000).is_empty(), "already being aborted");
    written(&mut c, &expired[0]).unwrap();
    assert_eq!(
        end_v1(&mut c, "tx", pid, epoch, true, NOW),
        Err(ResponseError::ProducerFenced)
    );
}

#[test]
fn idle_ids_expire_as_tombstones() {
    let mut c = coordinator();
    init(&mut c, "tx", 7);
    assert!(c.expired_ids(NOW + 604_800_000).is_empty());
    let gone = c.expired_ids(NOW + 604_800_001);
    assert_eq!(gone.len(), 1);
    assert_eq!(gone[0].target.state, TxnState::Dead);
    written(&mut c, &gone[0]);
    assert_eq!(c.describe("tx"), Err(ResponseError::TransactionalIdNotFound));
}

#[test]
fn loading_restores_ids_and_resumes_unfinished_completions() {
    let mut c = TransactionCoordinator::new(TxnCoordinatorConfig {
        num_partitions: 1,
        max_timeout_ms: 900_000,
        id_expiration_ms: 604_800_000,
    });
    c.begin_load(0, 9);
    assert_eq!(c.describe("a"), Err(ResponseError::CoordinatorLoadInProgress));
    let stored = |state, epoch| StoredTxn {
        producer_id: 11,
        producer_epoch: epoch,
        timeout_ms: 60_000,
        state,
        partitions: vec![("o".into(), vec![2])],
        last_update_ms: NOW,
        start_ms: NOW,
        prev_producer_id: -1,
        next_producer_id: -1,
        client_transaction_version: 0,
    };
    let records = vec![
        ("a".to_string(), Some(stored(TxnState::Ongoing, 3))),
        ("a".to_string(), Some(stored(TxnState::PrepareCommit, 3))),
        ("b".to_string(), Some(stored(TxnState::Ongoing, 1))),
        ("gone".to_string(), Some(stored(TxnState::Empty, 1))),
        ("gone".to_string(), None),
    ];
    let jobs = c.complete_load(0, 9, records);
    assert_eq!(jobs.len(), 1);
    assert_eq!(
        (
            jobs[0].transactional_id.as_str(),
            jobs[0].commit,
            jobs[0].coordinator_epoch
        ),
        ("a", true, 9)
    );
    assert_eq!(c.describe("b").unwrap().state, TxnState::Ongoing);
    assert_eq!(c.describe("gone"), Err(ResponseError::TransactionalIdNotFound));
    // A stale load (the partition moved on) installs nothing.
    c.unload(0);
    assert!(c
        .complete_load(0, 9, vec![("a".to_string(), Some(stored(TxnState::PrepareAbort, 3)))])
        .is_empty());
    assert_eq!(c.describe("a"), Err(ResponseError::NotCoordinator));
}

#[test]
fn reports_after_the_partition_moved_change_nothing() {
    let mut c = coordinator();
    let (pid, epoch) = init(&mut c, "tx", 7);
    let add = c
        .add_partitions("tx", pid, epoch, &parts(&[("o", 0)]), false, NOW)
        .unwrap()
        .unwrap();
    c.begin_load(0, 6);
    assert_eq!(c.transition_written(&add), None);
    assert!(c.complete_load(0, 6, Vec::new()).is_empty());
    assert_eq!(c.describe("tx"), Err(ResponseError::TransactionalIdNotFound));
}

#[test]
fn verification_names_partitions_outside_the_open_transaction() {
    let mut c = coordinator();
    let (pid, epoch) = init(&mut c, "tx", 7);
    let add = c
        .add_partitions("tx", pid, epoch, &parts(&[("o", 0)]), false, NOW)
        .unwrap()
        .unwrap();
    written(&mut c, &add);
    let checked = c
        .verify_partitions("tx", pid, epoch, &parts(&[("o", 0), ("o", 1)]))
        .unwrap();
    assert_eq!(checked[0].1, None);
    assert_eq!(checked[1].1, Some(ResponseError::InvalidTxnState));
    assert_eq!(
        c.verify_partitions("tx", pid, epoch - 1, &parts(&[("o", 0)])),
        Err(ResponseError::ProducerFenced)
    );
    // Adding another partition (not yet replicated) leaves the added ones verifiable; the
    // pending one is not in the transaction until its add is written.
    let more = c
        .add_partitions("tx", pid, epoch, &parts(&[("o", 1)]), false, NOW)
        .unwrap()
        .unwrap();
    let checked = c
        .verify_partitions("tx", pid, epoch, &parts(&[("o", 0), ("o", 1)]))
        .unwrap();
    assert_eq!(
        (checked[0].1, checked[1].1),
        (None, Some(ResponseError::InvalidTxnState))
    );
    written(&mut c, &more);
    let checked = c.verify_partitions("tx", pid, epoch, &parts(&[("o", 1)])).unwrap();
    assert_eq!(checked[0].1, None);
    // While the transaction completes, the producer is told to retry.
    let end = end_v1(&mut c, "tx", pid, epoch, true, NOW).unwrap().unwrap();
    written(&mut c, &end);
    assert_eq!(
        c.verify_partitions("tx", pid, epoch, &parts(&[("o", 0)])),
        Err(ResponseError::ConcurrentTransactions)
    );
}

#[test]
fn listing_filters_by_state_producer_and_duration() {
    let mut c = coordinator();
    let (pid, epoch) = init(&mut c, "a", 7);
    init(&mut c, "b", 8);
    let add = c
        .add_partitions("a", pid, epoch, &parts(&[("o", 0)]), false, NOW)
        .unwrap()
        .unwrap();
    written(&mut c, &add);
    let all = c
        .list(
            &ListFilter {
                min_duration_ms: -1,
                ..Default::default()
            },
            NOW,
        )
        .0;
    assert_eq!(
        all.iter().map(|v| v.transactional_id.as_str()).collect::<Vec<_>>(),
        ["a", "b"]
    );
    let ongoing = ListFilter {
        states: vec![TxnState::Ongoing],
        min_duration_ms: -1,
        ..Default::default()
    };
    assert_eq!(c.list(&ongoing, NOW).0.len(), 1);
    let by_producer = ListFilter {
        producer_ids: vec![8],
        min_duration_ms: -1,
        ..Default::default()
    };
    assert_eq!(c.list(&by_producer, NOW).0[0].transactional_id, "b");
    let long = ListFilter {
        min_duration_ms: 5_000,
        ..Default::default()
    };
    assert!(c.list(&long, NOW + 4_999).0.is_empty());
    assert_eq!(c.list(&long, NOW + 5_000).0.len(), 1);
}

/// A transactions v2 EndTxn that writes: the transition and the producer id and epoch answered.
/// A transactions v2 EndTxn of "tx" with no fresh producer id at hand, as answered.
fn try_end_v2(c: &mut TransactionCoordinator, pid: i64, epoch: i16, commit: bool) -> Result<EndOutcome, ResponseError> {
    c.end_txn(
        "tx",
        EndRequest {
            producer_id: pid,
            producer_epoch: epoch,
            commit,
            tv2: true,
        },
        None,
        NOW,
    )
}

fn end_v2(
    c: &mut TransactionCoordinator,
    pid: i64,
    epoch: i16,
    commit: bool,
    fresh: Option<i64>,
) -> (Transition, i64, i16) {
    match c
        .end_txn(
            "tx",
            EndRequest {
                producer_id: pid,
                producer_epoch: epoch,
                commit,
                tv2: true,
            },
            fresh,
            NOW,
        )
        .unwrap()
    {
        EndOutcome::Write {
            transition,
            producer_id,
            producer_epoch,
        } => (transition, producer_id, producer_epoch),
        other => panic!("{other:?}"),
    }
}

#[test]
fn transactions_v2_bump_the_epoch_at_every_end_and_recognise_retries_by_it() {
    let mut c = coordinator();
    let (pid, epoch) = init(&mut c, "tx", 42);
    // A leader adds the partition for the producer (its Produce v12): the transaction opens.
    let add = c
        .add_partitions("tx", pid, epoch, &parts(&[("o", 0)]), true, NOW)
        .unwrap()
        .unwrap();
    assert_eq!(
        (add.target.state, add.target.client_transaction_version),
        (TxnState::Ongoing, TV2)
    );
    written(&mut c, &add);
    let (prepare, answered_pid, answered_epoch) = end_v2(&mut c, pid, epoch, true, None);
    assert_eq!(
        (answered_pid, answered_epoch),
        (pid, epoch + 1),
        "the client continues at epoch + 1"
    );
    assert_eq!(
        (prepare.target.state, prepare.target.producer_epoch),
        (TxnState::PrepareCommit, epoch + 1)
    );
    let job = written(&mut c, &prepare).expect("markers owed");
    assert_eq!(
        job.producer_epoch,
        epoch + 1,
        "markers carry the bumped epoch and fence late writes"
    );
    // A retry (the old epoch) while the markers are written, and after.
    assert_eq!(
        try_end_v2(&mut c, pid, epoch, true),
        Err(ResponseError::ConcurrentTransactions)
    );
    // The producer's next end at its new epoch, racing these markers, waits too (Kafka would
    // fence the producer).
    assert_eq!(
        try_end_v2(&mut c, pid, epoch + 1, true),
        Err(ResponseError::ConcurrentTransactions)
    );
    let complete = c.markers_written(&job, NOW).unwrap();
    written(&mut c, &complete);
    assert_eq!(
        try_end_v2(&mut c, pid, epoch, true),
        Ok(EndOutcome::Done {
            producer_id: pid,
            producer_epoch: epoch + 1
        })
    );
    assert_eq!(
        try_end_v2(&mut c, pid, epoch, false),
        Err(ResponseError::InvalidTxnState),
        "a retry of the commit as an abort"
    );
    // At the new epoch: committing nothing is refused, aborting nothing is written (the client
    // cannot know whether its sends reached a leader) and bumps the epoch again.
    assert_eq!(
        try_end_v2(&mut c, pid, epoch + 1, true),
        Err(ResponseError::InvalidTxnState)
    );
    let (empty_abort, _, next_epoch) = end_v2(&mut c, pid, epoch + 1, false, None);
    assert_eq!(next_epoch, epoch + 2);
    assert!(empty_abort.target.partitions.is_empty());
    let job = written(&mut c, &empty_abort).expect("an abort with no markers to write");
    assert!(job.partitions.is_empty());
    let complete = c.markers_written(&job, NOW).unwrap();
    assert_eq!(complete.target.state, TxnState::CompleteAbort);
    written(&mut c, &complete);
    // Two epochs behind is a fenced producer, not a retry.
    assert_eq!(
        try_end_v2(&mut c, pid, epoch, false),
        Err(ResponseError::ProducerFenced)
    );
    assert_eq!(
        try_end_v2(&mut c, pid, epoch + 1, false),
        Ok(EndOutcome::Done {
            producer_id: pid,
            producer_epoch: epoch + 2
        })
    );
}

#[test]
fn transactions_v2_move_to_a_new_producer_id_when_the_epoch_is_exhausted_even_across_a_failover() {
    let mut c = coordinator();
    let ongoing = StoredTxn {
        producer_id: 11,
        producer_epoch: i16::MAX - 1,
        timeout_ms: 60_000,
        state: TxnState::Ongoing,
        partitions: vec![("o".into(), vec![0])],
        last_update_ms: NOW,
        start_ms: NOW,
        prev_producer_id: 11,
        next_producer_id: -1,
        client_transaction_version: TV2,
    };
    c.unload(0);
    c.begin_load(0, 6);
    c.complete_load(0, 6, vec![("tx".to_string(), Some(ongoing))]);
    assert_eq!(
        c.end_txn(
            "tx",
            EndRequest {
                producer_id: 11,
                producer_epoch: i16::MAX - 1,
                commit: true,
                tv2: true
            },
            None,
            NOW
        ),
        Ok(EndOutcome::NeedProducerId)
    );
    let (prepare, pid, epoch) = end_v2(&mut c, 11, i16::MAX - 1, true, Some(99));
    assert_eq!((pid, epoch), (99, 0), "the client continues under the new id");
    assert_eq!(
        (
            prepare.target.producer_id,
            prepare.target.producer_epoch,
            prepare.target.next_producer_id
        ),
        (11, i16::MAX, 99)
    );
    written(&mut c, &prepare);
    // The coordinator moves before the markers are written: the new one completes the
    // transaction into the new producer id, from the record alone.
    let mut moved = coordinator();
    moved.unload(0);
    moved.begin_load(0, 7);
    use crate::txn::records;
    let record = records::decode(Some(&records::key("tx")), Some(&records::value(&prepare.target))).unwrap();
    let jobs = moved.complete_load(0, 7, vec![record]);
    assert_eq!((jobs[0].producer_id, jobs[0].producer_epoch), (11, i16::MAX));
    let complete = moved.markers_written(&jobs[0], NOW).unwrap();
    assert_eq!(
        (
            complete.target.producer_id,
            complete.target.producer_epoch,
            complete.target.prev_producer_id
        ),
        (99, 0, 11)
    );
    written(&mut moved, &complete);
    // A retry of the EndTxn names the old id at the last epoch.
    assert_eq!(
        moved.end_txn(
            "tx",
            EndRequest {
                producer_id: 11,
                producer_epoch: i16::MAX - 1,
                commit: true,
                tv2: true
            },
            None,
            NOW
        ),
        Ok(EndOutcome::Done {
            producer_id: 99,
            producer_epoch: 0
        })
    );
    assert_eq!(
        moved.end_txn(
            "tx",
            EndRequest {
                producer_id: 12,
                producer_epoch: i16::MAX - 1,
                commit: true,
                tv2: true
            },
            None,
            NOW
        ),
        Err(ResponseError::InvalidProducerIdMapping)
    );
}

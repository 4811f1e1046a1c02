//! Share-partition transitions on a fake clock: acquisition, acknowledgement of each type,
//! lock expiry, the delivery count limit, the in-flight cap and the start offset moving.

use super::*;

const LIMITS: ShareLimits = ShareLimits {
    record_lock_duration_ms: 30_000,
    delivery_count_limit: 3,
    max_record_locks: 200,
};

fn member(name: &str) -> Arc<str> {
    Arc::from(name)
}

fn batch(first_offset: i64, last_offset: i64) -> BatchSpan {
    BatchSpan {
        first_offset,
        last_offset,
        is_control: false,
    }
}

fn got(first_offset: i64, last_offset: i64, delivery_count: u16) -> Acquired {
    Acquired {
        first_offset,
        last_offset,
        delivery_count,
    }
}

/// A partition from 0 whose log holds batches of ten: 0-9, 10-19, ... up to `log_end`.
fn log(log_end: i64) -> Vec<BatchSpan> {
    (0..log_end / 10).map(|i| batch(i * 10, i * 10 + 9)).collect()
}

/// The batches of `log` from `offset` on, as a read from `next_fetch_offset` returns them.
fn read_from(log: &[BatchSpan], offset: i64) -> Vec<BatchSpan> {
    log.iter().copied().filter(|b| b.last_offset >= offset).collect()
}

#[test]
fn new_records_are_acquired_in_whole_batches_and_accepted_records_move_the_start() {
    let (a, b) = (member("a"), member("b"));
    let log = log(100);
    let mut sp = SharePartition::new(0, LIMITS);
    assert_eq!(
        sp.acquire(&a, &log, 15, 0),
        vec![got(0, 9, 1), got(10, 19, 1)],
        "a batch is taken whole"
    );
    assert_eq!(sp.next_fetch_offset(), 20);
    assert_eq!(sp.acquire(&b, &read_from(&log, 20), 5, 0), vec![got(20, 29, 1)]);
    assert_eq!((sp.start_offset(), sp.end_offset()), (0, 30));

    assert_eq!(sp.acknowledge("b", 20, 29, &[1], 1), Ok(()));
    assert_eq!(sp.start_offset(), 0, "0-19 are still held by a");
    assert_eq!(sp.acknowledge("a", 0, 19, &[1], 2), Ok(()));
    assert_eq!(
        (sp.start_offset(), sp.end_offset()),
        (30, 30),
        "everything up to the SPEO is done"
    );
    assert_eq!(sp.counts(), [0, 0, 0, 0]);
}

#[test]
fn the_record_limit_mode_splits_a_batch_to_hand_out_no_more_than_asked() {
    let (a, b) = (member("a"), member("b"));
    let log = log(100);
    let mut sp = SharePartition::new(0, LIMITS);
    assert_eq!(
        sp.acquire_record_limit(&a, &log, 15, 0),
        vec![got(0, 9, 1), got(10, 14, 1)]
    );
    assert_eq!(sp.next_fetch_offset(), 15);
    // The rest of batch 10-19 goes to the next member, still no more than asked.
    assert_eq!(
        sp.acquire_record_limit(&b, &read_from(&log, 15), 3, 0),
        vec![got(15, 17, 1)]
    );
    assert_eq!(sp.counts(), [0, 18, 0, 0]);
    // a's release makes 0-9 Available again; the limit holds for records handed out again too.
    assert_eq!(sp.acknowledge("a", 0, 9, &[2], 1), Ok(()));
    assert_eq!(
        sp.acquire_record_limit(&b, &read_from(&log, 0), 4, 2),
        vec![got(0, 3, 2)]
    );
}

#[test]
fn a_renewal_keeps_the_records_with_their_member_and_starts_the_lock_over() {
    let a = member("a");
    let mut sp = SharePartition::new(0, LIMITS);
    sp.acquire(&a, &log(10), 100, 0);
    // Twenty seconds in, a renews 0-4 (types per offset: renew five, nothing else said).
    assert_eq!(sp.acknowledge("a", 0, 4, &[RENEW], 20_000), Ok(()));
    // At 35 s the first lock has run out for 5-9 only.
    assert_eq!(sp.expire_locks(35_000), 5);
    assert_eq!(sp.counts(), [5, 5, 0, 0]);
    assert_eq!(
        sp.acknowledge("a", 0, 4, &[1], 40_000),
        Ok(()),
        "still a's within the renewed lock"
    );
    assert_eq!(
        sp.acquire(&a, &log(10), 100, 41_000),
        vec![got(5, 9, 2)],
        "5-9 went back"
    );
}

#[test]
fn a_member_may_acknowledge_only_records_it_holds() {
    let (a, b) = (member("a"), member("b"));
    let mut sp = SharePartition::new(0, LIMITS);
    sp.acquire(&a, &log(10), 100, 0);
    let refused = |r: Result<(), AckError>| r.map_err(|(e, _)| e);
    assert_eq!(
        refused(sp.acknowledge("b", 0, 9, &[1], 1)),
        Err(ResponseError::InvalidRecordState)
    );
    assert_eq!(
        refused(sp.acknowledge("a", 5, 12, &[1], 1)),
        Err(ResponseError::InvalidRecordState),
        "past the SPEO"
    );
    assert_eq!(
        refused(sp.acknowledge("a", 9, 5, &[1], 1)),
        Err(ResponseError::InvalidRequest)
    );
    assert_eq!(
        refused(sp.acknowledge("a", 0, 9, &[5], 1)),
        Err(ResponseError::InvalidRequest),
        "Kafka's types stop at 4 (renew)"
    );
    assert_eq!(
        refused(sp.acknowledge("a", 0, 9, &[1, 1], 1)),
        Err(ResponseError::InvalidRequest),
        "1 or 10 types"
    );
    assert_eq!(sp.counts(), [0, 10, 0, 0], "a refused acknowledgement changes nothing");
    assert_eq!(sp.acknowledge("a", 0, 9, &[1], 1), Ok(()));
    assert_eq!(
        refused(sp.acknowledge("a", 0, 9, &[1], 1)),
        Err(ResponseError::InvalidRecordState),
        "twice"
    );
    let _ = b;
}

#[test]
fn released_records_are_delivered_again_with_a_higher_count_and_rejected_ones_never() {
    let (a, b) = (member("a"), member("b"));
    let log = log(10);
    let mut sp = SharePartition::new(0, LIMITS);
    sp.acquire(&a, &log, 100, 0);
    // 0-2 accepted, 3 released, 4 rejected, 5 a gap, 6-9 released.
    assert_eq!(sp.acknowledge("a", 0, 9, &[1, 1, 1, 2, 3, 0, 2, 2, 2, 2], 1), Ok(()));
    assert_eq!(sp.start_offset(), 3);
    assert_eq!(sp.counts(), [5, 0, 0, 2]);
    assert_eq!(sp.next_fetch_offset(), 3);
    assert_eq!(
        sp.acquire(&b, &read_from(&log, 3), 100, 2),
        vec![got(3, 3, 2), got(6, 9, 2)],
        "the archived 4 and 5 are skipped"
    );
    assert_eq!(sp.acknowledge("b", 3, 3, &[1], 3), Ok(()));
    assert_eq!(sp.acknowledge("b", 6, 9, &[1], 3), Ok(()));
    assert_eq!((sp.start_offset(), sp.counts()), (10, [0, 0, 0, 0]));
}

#[test]
fn a_lapsed_lock_makes_records_available_and_the_late_acknowledgement_is_refused() {
    let (a, b) = (member("a"), member("b"));
    let log = log(20);
    let mut sp = SharePartition::new(0, LIMITS);
    sp.acquire(&a, &log, 10, 1_000);
    assert_eq!(sp.next_lock_deadline_ms(), Some(31_000));
    assert_eq!(sp.expire_locks(30_999), 0);
    assert_eq!(sp.expire_locks(31_000), 10);
    assert_eq!(sp.next_lock_deadline_ms(), None);
    assert_eq!(
        sp.acknowledge("a", 0, 9, &[1], 31_001).map_err(|(e, _)| e),
        Err(ResponseError::InvalidRecordState)
    );
    assert_eq!(sp.acquire(&b, &log, 100, 31_002), vec![got(0, 9, 2), got(10, 19, 1)]);
}

#[test]
fn a_record_delivered_as_often_as_the_limit_allows_is_archived_when_released_again() {
    let a = member("a");
    let log = log(10);
    let mut sp = SharePartition::new(0, LIMITS);
    for delivery in 1..=3u16 {
        assert_eq!(sp.acquire(&a, &log, 100, 0), vec![got(0, 9, delivery)]);
        if delivery < 3 {
            assert_eq!(sp.acknowledge("a", 0, 9, &[2], 0), Ok(()));
        }
    }
    // The third delivery's lock runs out: archived, never handed out a fourth time.
    sp.expire_locks(30_000);
    assert_eq!((sp.start_offset(), sp.end_offset()), (10, 10));
    assert!(sp.acquire(&a, &log, 100, 30_001).is_empty());
}

#[test]
fn no_new_record_is_acquired_beyond_the_in_flight_cap() {
    let a = member("a");
    let limits = ShareLimits {
        max_record_locks: 25,
        ..LIMITS
    };
    let log = log(100);
    let mut sp = SharePartition::new(0, limits);
    assert_eq!(
        sp.acquire(&a, &log, 1000, 0),
        vec![got(0, 9, 1), got(10, 19, 1), got(20, 29, 1)]
    );
    assert!(!sp.can_acquire(), "30 in flight, at or above the cap of 25");
    assert!(sp.acquire(&a, &read_from(&log, 30), 1000, 0).is_empty());
    assert_eq!(sp.acknowledge("a", 0, 9, &[1], 0), Ok(()));
    assert!(sp.can_acquire());
    assert_eq!(sp.acquire(&a, &read_from(&log, 30), 1000, 0), vec![got(30, 39, 1)]);
}

#[test]
fn control_batches_and_missing_offsets_are_archived_not_delivered() {
    let a = member("a");
    let batches = [
        batch(0, 4),
        BatchSpan {
            first_offset: 5,
            last_offset: 5,
            is_control: true,
        },
        // 6-9 compacted away.
        batch(10, 14),
    ];
    let mut sp = SharePartition::new(0, LIMITS);
    assert_eq!(sp.acquire(&a, &batches, 100, 0), vec![got(0, 4, 1), got(10, 14, 1)]);
    assert_eq!(sp.counts(), [0, 10, 0, 5]);
    assert_eq!(sp.acknowledge("a", 0, 4, &[1], 0), Ok(()));
    assert_eq!(sp.start_offset(), 10, "past the marker and the gap");
}

#[test]
fn a_member_leaving_releases_what_it_holds_and_only_that() {
    let (a, b) = (member("a"), member("b"));
    let log = log(20);
    let mut sp = SharePartition::new(0, LIMITS);
    sp.acquire(&a, &log[..1], 100, 0);
    sp.acquire(&b, &log[1..], 100, 0);
    assert_eq!(sp.release_member("a"), 10);
    assert_eq!(sp.counts(), [10, 10, 0, 0]);
    assert_eq!(sp.next_fetch_offset(), 0);
    assert_eq!(sp.acknowledge("b", 10, 19, &[1], 0), Ok(()));
}

#[test]
fn a_partial_redelivery_takes_only_as_many_records_as_asked() {
    let (a, b) = (member("a"), member("b"));
    let log = log(10);
    let mut sp = SharePartition::new(0, LIMITS);
    sp.acquire(&a, &log, 100, 0);
    sp.acknowledge("a", 0, 9, &[2], 0).unwrap();
    assert_eq!(sp.acquire(&b, &log, 4, 0), vec![got(0, 3, 2)]);
    assert_eq!(sp.acquire(&a, &log, 100, 0), vec![got(4, 9, 2)]);
}

#[test]
fn the_log_start_moving_past_in_flight_records_drops_them() {
    let a = member("a");
    let mut sp = SharePartition::new(0, LIMITS);
    sp.acquire(&a, &log(30), 100, 0);
    sp.log_start_moved(15);
    assert_eq!((sp.start_offset(), sp.end_offset()), (15, 30));
    assert_eq!(sp.counts(), [0, 15, 0, 0]);
    sp.log_start_moved(50);
    assert_eq!((sp.start_offset(), sp.end_offset()), (50, 50));
    assert_eq!(sp.acquire(&a, &[batch(50, 59)], 100, 0), vec![got(50, 59, 1)]);
}

#[test]
fn a_reset_is_refused_while_records_are_held_and_starts_over_otherwise() {
    let a = member("a");
    let mut sp = SharePartition::new(0, LIMITS);
    sp.acquire(&a, &log(10), 100, 0);
    assert_eq!(sp.reset(0).map_err(|(e, _)| e), Err(ResponseError::NonEmptyGroup));
    sp.acknowledge("a", 0, 9, &[1], 0).unwrap();
    assert_eq!(sp.reset(0), Ok(()));
    assert_eq!(sp.acquire(&a, &log(10), 100, 0), vec![got(0, 9, 1)]);
}

#[test]
fn a_batch_before_the_start_offset_is_skipped_and_one_across_it_is_cut() {
    let a = member("a");
    let mut sp = SharePartition::new(15, LIMITS);
    assert_eq!(sp.acquire(&a, &log(30), 100, 0), vec![got(15, 19, 1), got(20, 29, 1)]);
}

/// What a new leader makes of `sp`'s stored state.
fn failed_over(sp: &SharePartition) -> SharePartition {
    let (start_offset, batches) = sp.snapshot();
    let state = ShareState {
        state_epoch: 0,
        leader_epoch: 1,
        start_offset,
        batches,
    };
    assert_eq!(state.problem(usize::MAX), None);
    SharePartition::restore(&state, LIMITS)
}

#[test]
fn after_a_failover_acknowledged_records_stay_done_and_only_records_in_flight_go_out_again() {
    let (a, b) = (member("a"), member("b"));
    let log = log(60);
    let mut sp = SharePartition::new(0, LIMITS);
    assert_eq!(sp.acquire(&a, &log, 20, 0), vec![got(0, 9, 1), got(10, 19, 1)]);
    assert_eq!(
        sp.acquire(&b, &read_from(&log, 20), 20, 0),
        vec![got(20, 29, 1), got(30, 39, 1)]
    );
    // a accepts 0-9 and rejects 15; b accepts 30-39 and releases 20-29; a still holds 10-14, 16-19.
    assert_eq!(sp.acknowledge("a", 0, 9, &[1], 1), Ok(()));
    assert_eq!(sp.acknowledge("a", 15, 15, &[3], 1), Ok(()));
    assert_eq!(sp.acknowledge("b", 30, 39, &[1], 1), Ok(()));
    assert_eq!(sp.acknowledge("b", 20, 29, &[2], 1), Ok(()));
    assert_eq!(sp.start_offset(), 10);

    let mut next = failed_over(&sp);
    assert_eq!((next.start_offset(), next.end_offset()), (10, 40));
    assert_eq!(
        next.counts(),
        [19, 0, 10, 1],
        "10-14, 16-29 Available; 30-39 Acknowledged; 15 Archived"
    );
    let c = member("c");
    // Redelivered, counted: 10-14 and 16-19 (a held them), 20-29 (released), then new records.
    assert_eq!(
        next.acquire(&c, &read_from(&log, next.next_fetch_offset()), 100, 2),
        vec![
            got(10, 14, 2),
            got(16, 19, 2),
            got(20, 29, 2),
            got(40, 49, 1),
            got(50, 59, 1)
        ]
    );
    assert_eq!(
        next.acknowledge("c", 30, 30, &[1], 3).map_err(|e| e.0),
        Err(ResponseError::InvalidRecordState),
        "an acknowledged record is never handed out again"
    );
}

#[test]
fn a_restored_state_archives_offsets_no_batch_holds_and_control_batches_instead_of_waiting_on_them() {
    let a = member("a");
    // The stored state has 0-19 delivered once (count 1), the log 0-9, a marker at 10, 11-19.
    let state = ShareState {
        state_epoch: 0,
        leader_epoch: 1,
        start_offset: 0,
        batches: vec![StateBatch {
            first_offset: 0,
            last_offset: 19,
            delivery_state: DELIVERY_AVAILABLE,
            delivery_count: 1,
        }],
    };
    let mut sp = SharePartition::restore(&state, LIMITS);
    let log = vec![
        batch(0, 9),
        BatchSpan {
            first_offset: 10,
            last_offset: 10,
            is_control: true,
        },
        batch(12, 19),
    ];
    assert_eq!(sp.acquire(&a, &log, 100, 0), vec![got(0, 9, 2), got(12, 19, 2)]);
    assert_eq!(
        sp.counts(),
        [0, 18, 0, 2],
        "the marker (10) and the missing offset (11) are archived"
    );
    assert_eq!(sp.acknowledge("a", 0, 9, &[1], 1), Ok(()));
    assert_eq!(sp.acknowledge("a", 12, 19, &[1], 1), Ok(()));
    assert_eq!((sp.start_offset(), sp.end_offset()), (20, 20));
}

#[test]
fn a_restored_record_at_the_delivery_count_limit_is_archived() {
    let state = ShareState {
        state_epoch: 0,
        leader_epoch: 1,
        start_offset: 0,
        batches: vec![StateBatch {
            first_offset: 5,
            last_offset: 9,
            delivery_state: DELIVERY_AVAILABLE,
            delivery_count: i16::try_from(LIMITS.delivery_count_limit).unwrap(),
        }],
    };
    let sp = SharePartition::restore(&state, LIMITS);
    assert_eq!((sp.start_offset(), sp.end_offset()), (0, 10));
    assert_eq!(sp.counts(), [5, 0, 0, 5]);
}

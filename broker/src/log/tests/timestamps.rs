use sluice_protocol::batch::test_support::{encode_batch, TestRecord};
use sluice_protocol::batch::validate_batch;

use super::*;

fn append_at(log: &mut PartitionLog, deltas: &[i64], ts: i64) -> i64 {
    let records: Vec<TestRecord<'_>> = deltas
        .iter()
        .map(|&d| TestRecord {
            key: None,
            value: Some(&[7; 60]),
            timestamp_delta_ms: d,
        })
        .collect();
    let mut batch = encode_batch(0, ts, &records);
    log.append(&mut batch, ts).unwrap().base_offset
}

#[test]
fn offset_for_timestamp_finds_the_first_record_reaching_it_across_segments() {
    let root = tempfile::tempdir().unwrap();
    let mut log = open(root.path(), small_segments());
    // Batch i holds offset 2i at T0 + 100 i and offset 2i+1 at T0 + 100 i + 5.
    for i in 0..40 {
        append_at(&mut log, &[0, 5], T0 + 100 * i);
    }
    assert!(log.segment_count() > 5);
    assert_eq!(log.offset_for_timestamp(0).unwrap(), Some((0, T0)));
    assert_eq!(log.offset_for_timestamp(T0 + 1).unwrap(), Some((1, T0 + 5)));
    assert_eq!(log.offset_for_timestamp(T0 + 5).unwrap(), Some((1, T0 + 5)));
    assert_eq!(log.offset_for_timestamp(T0 + 6).unwrap(), Some((2, T0 + 100)));
    for i in 1..40 {
        let target = T0 + 100 * i - 50;
        assert_eq!(
            log.offset_for_timestamp(target).unwrap(),
            Some((2 * i, T0 + 100 * i)),
            "target {target}"
        );
        let second = T0 + 100 * i + 3;
        assert_eq!(
            log.offset_for_timestamp(second).unwrap(),
            Some((2 * i + 1, T0 + 100 * i + 5)),
            "target {second}"
        );
    }
    assert_eq!(log.offset_for_timestamp(T0 + 100 * 39 + 6).unwrap(), None);
}

#[test]
fn offset_for_timestamp_looks_inside_a_batch_whose_records_span_the_target() {
    // The case: one batch, a record at 1234 (offset 0) and one at 999999999999 (offset 1).
    let root = tempfile::tempdir().unwrap();
    let mut log = open(root.path(), small_segments());
    append_at(&mut log, &[0, 999_999_999_999 - 1234], 1234);
    assert_eq!(
        log.offset_for_timestamp(999_999_999_999).unwrap(),
        Some((1, 999_999_999_999))
    );
    assert_eq!(log.offset_for_timestamp(1234).unwrap(), Some((0, 1234)));
    assert_eq!(log.offset_for_timestamp(1235).unwrap(), Some((1, 999_999_999_999)));
}

#[test]
fn a_log_append_time_batch_answers_with_its_first_record_at_its_max_timestamp() {
    let root = tempfile::tempdir().unwrap();
    let mut log = open(root.path(), small_segments());
    let records = [0, 5, 10].map(|d| TestRecord {
        key: None,
        value: Some(&[7; 60]),
        timestamp_delta_ms: d,
    });
    let mut batch = encode_batch(0, T0, &records);
    sluice_protocol::batch::set_log_append_time(&mut batch, T0 + 1_000).unwrap();
    log.append(&mut batch, T0).unwrap();
    // Every record of a LogAppendTime batch has the batch's timestamp.
    assert_eq!(log.offset_for_timestamp(T0 + 7).unwrap(), Some((0, T0 + 1_000)));
}

#[test]
fn offset_for_timestamp_handles_out_of_order_producer_timestamps() {
    let root = tempfile::tempdir().unwrap();
    let mut log = open(root.path(), small_segments());
    append_at(&mut log, &[0], T0 + 1_000); // offset 0
    append_at(&mut log, &[0], T0 + 10); // offset 1: an older timestamp later in the log
    append_at(&mut log, &[0], T0 + 2_000); // offset 2
    assert_eq!(log.offset_for_timestamp(T0 + 500).unwrap(), Some((0, T0 + 1_000)));
    assert_eq!(log.offset_for_timestamp(T0 + 1_500).unwrap(), Some((2, T0 + 2_000)));
}

#[test]
fn max_timestamp_offset_is_the_last_offset_of_the_batch_with_the_largest_timestamp() {
    let root = tempfile::tempdir().unwrap();
    let mut log = open(root.path(), small_segments());
    assert_eq!(log.max_timestamp_offset(), None);
    for i in 0..20 {
        append_at(&mut log, &[0, 1, 2], T0 + i);
    }
    append_at(&mut log, &[0, 1, 9_000], T0); // offsets 60..62, max T0 + 9000
    for i in 0..10 {
        append_at(&mut log, &[0, 1, 2], T0 + 100 + i);
    }
    assert_eq!(log.max_timestamp_offset(), Some((62, T0 + 9_000)));
}

#[test]
fn log_append_time_stamps_batches_with_the_broker_clock() {
    let root = tempfile::tempdir().unwrap();
    let config = LogConfig {
        message_timestamp_log_append: true,
        ..LogConfig::default()
    };
    let mut log = open(root.path(), config);
    let mut batch = encode_simple_batch(3, 10, 1_000);
    let now = T0 + 42;
    let info = log.append(&mut batch, now).unwrap();
    assert_eq!(
        (
            info.log_append_time_ms,
            info.max_timestamp,
            info.offset_of_max_timestamp
        ),
        (now, now, 2)
    );

    let read = log.read(0, 1 << 20, 3, true).unwrap();
    let header = validate_batch(&read.records).expect("CRC rewritten after stamping");
    assert!(header.timestamp_type_is_log_append());
    assert_eq!(header.max_timestamp, now);
    assert_eq!(log.offset_for_timestamp(now).unwrap(), Some((0, now)));
    assert_eq!(log.max_timestamp_offset(), Some((2, now)));
}

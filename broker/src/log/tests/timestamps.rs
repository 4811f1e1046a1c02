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
fn offset_for_timestamp_finds_the_first_batch_reaching_it_across_segments() {
    let root = tempfile::tempdir().unwrap();
    let mut log = open(root.path(), small_segments());
    // Batch i (offsets 2i, 2i+1) has max timestamp T0 + 100 i + 5.
    for i in 0..40 {
        append_at(&mut log, &[0, 5], T0 + 100 * i);
    }
    assert!(log.segment_count() > 5);
    assert_eq!(log.offset_for_timestamp(0).unwrap(), Some((0, T0 + 5)));
    assert_eq!(log.offset_for_timestamp(T0 + 5).unwrap(), Some((0, T0 + 5)));
    assert_eq!(log.offset_for_timestamp(T0 + 6).unwrap(), Some((2, T0 + 105)));
    for i in 1..40 {
        let target = T0 + 100 * i - 50;
        assert_eq!(
            log.offset_for_timestamp(target).unwrap(),
            Some((2 * i, T0 + 100 * i + 5)),
            "target {target}"
        );
    }
    assert_eq!(log.offset_for_timestamp(T0 + 100 * 39 + 6).unwrap(), None);
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

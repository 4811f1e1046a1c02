//! The tail cache (`log/tail.rs`) answers exactly what the files would, stays within its bounds
//! and never serves bytes a truncation removed.

use std::sync::Arc;

use sluice_protocol::batch::test_support::encode_simple_batch;

use super::{batch_offsets, open, T0};
use crate::log::{LogConfig, PartitionLog, TailCacheBudget};

/// xorshift64*: reproducible pseudo-random choices without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn between(&mut self, low: i64, high: i64) -> i64 {
        low + self.below((high - low + 1) as u64) as i64
    }
}

/// One produce request's worth: 1-3 batches of 1-5 records with values of up to 600 bytes.
fn random_append(rng: &mut Rng, ts: i64) -> Vec<u8> {
    let mut records = Vec::new();
    for _ in 0..1 + rng.below(3) {
        let count = 1 + rng.below(5) as usize;
        records.extend(encode_simple_batch(count, rng.below(600) as usize, ts));
    }
    records
}

fn with_tail_cache(root: &std::path::Path, config: LogConfig, budget: &Arc<TailCacheBudget>) -> PartitionLog {
    let mut log = open(root, config);
    log.enable_tail_cache(budget.clone());
    log
}

/// Checks many reads from `log` against the same reads from its files; returns how many the
/// tail cache answered.
fn check_reads_match_disk(log: &PartitionLog, rng: &mut Rng) -> usize {
    let (start, end) = (log.log_start_offset(), log.log_end_offset());
    let mut from_tail = 0;
    for _ in 0..40 {
        // Mostly near the end, where fetches are.
        let offset = match rng.below(4) {
            0 => rng.between(start, end),
            _ => rng.between((end - 20).max(start), end),
        };
        let max_offset = match rng.below(3) {
            0 => i64::MAX,
            _ => rng.between(offset, end + 1),
        };
        let max_bytes = match rng.below(4) {
            0 => 0,
            1 => rng.below(200) as usize,
            2 => rng.below(6_000) as usize,
            _ => 1 << 20,
        };
        let planned = log.plan_read(offset, max_offset, max_bytes).unwrap();
        let disk = log.plan_disk_read(offset, max_offset, max_bytes).unwrap();
        if !planned.reads_disk() && offset < end {
            from_tail += 1;
        }
        for read_bytes in [max_bytes, max_bytes / 2] {
            for min_one_message in [false, true] {
                let got = planned.read(read_bytes, min_one_message).unwrap();
                let want = disk.read(read_bytes, min_one_message).unwrap();
                assert_eq!(
                    got, want,
                    "offset {offset} max_offset {max_offset} max_bytes {read_bytes} min_one {min_one_message} (log {start}..{end})"
                );
            }
        }
    }
    from_tail
}

#[test]
fn tail_reads_equal_disk_reads_across_rolls_truncations_and_log_start_moves() {
    let root = tempfile::tempdir().unwrap();
    // A roll every few appends, and a tail smaller than a segment so chunks get evicted.
    let config = LogConfig {
        segment_bytes: 12_000,
        index_interval_bytes: 500,
        ..LogConfig::default()
    };
    let budget = TailCacheBudget::new(5_000, 1 << 20);
    let mut log = with_tail_cache(root.path(), config, &budget);
    let mut rng = Rng(0x5eed_0001);
    let mut epoch = 0;
    let mut from_tail = 0;
    for step in 0..400 {
        let ts = T0 + step;
        match rng.below(20) {
            0 if log.log_end_offset() > log.log_start_offset() => {
                let offset = rng.between(log.log_start_offset(), log.log_end_offset());
                log.truncate_to(offset).unwrap();
                epoch += 1; // what follows carries other bytes at the same offsets
            }
            1 => {
                let offset = rng.between(log.log_start_offset(), log.log_end_offset());
                log.advance_log_start_offset(offset).unwrap();
            }
            2 if step % 7 == 0 => {
                let offset = log.log_end_offset() + rng.between(0, 3);
                log.truncate_fully_and_start_at(offset).unwrap();
                epoch += 1;
            }
            _ => {
                let mut records = random_append(&mut rng, ts);
                log.append_as_leader(&mut records, epoch, ts).unwrap();
            }
        }
        from_tail += check_reads_match_disk(&log, &mut rng);
        assert!(log.tail_cache_bytes() <= 5_000, "over log.tail.cache.bytes");
        assert_eq!(budget.used_bytes(), log.tail_cache_bytes());
    }
    assert!(log.segment_count() > 1, "the test should roll");
    assert!(from_tail > 4_000, "the tail cache answered only {from_tail} reads");
}

#[test]
fn tail_read_within_one_append_shares_the_cached_buffer() {
    let root = tempfile::tempdir().unwrap();
    let budget = TailCacheBudget::new(1 << 20, 1 << 20);
    let mut log = with_tail_cache(root.path(), LogConfig::default(), &budget);
    let mut records = encode_simple_batch(10, 3_000, T0);
    let base = log.append_as_leader(&mut records, 0, T0).unwrap().base_offset;
    let first = log.plan_read(base, i64::MAX, 1 << 20).unwrap();
    let second = log.plan_read(base + 4, i64::MAX, 1 << 20).unwrap();
    assert!(!first.reads_disk() && !second.reads_disk());
    let (a, b) = (first.read(1 << 20, true).unwrap(), second.read(1 << 20, true).unwrap());
    assert_eq!(&a.records[..], &records[..], "the stored (stamped) bytes");
    assert_eq!(
        a.records.as_ptr(),
        b.records.as_ptr(),
        "both slices of the one cached chunk"
    );
}

#[test]
fn tail_cache_stays_within_the_partition_and_broker_bounds() {
    let root = tempfile::tempdir().unwrap();
    let budget = TailCacheBudget::new(8_000, 12_000);
    let mut a = with_tail_cache(&root.path().join("a"), LogConfig::default(), &budget);
    let mut b = with_tail_cache(&root.path().join("b"), LogConfig::default(), &budget);
    let mut rng = Rng(7);
    for step in 0..200 {
        let log = if rng.below(2) == 0 { &mut a } else { &mut b };
        let mut records = random_append(&mut rng, T0 + step);
        log.append_as_leader(&mut records, 0, T0 + step).unwrap();
        assert!(a.tail_cache_bytes() <= 8_000 && b.tail_cache_bytes() <= 8_000);
        assert_eq!(budget.used_bytes(), a.tail_cache_bytes() + b.tail_cache_bytes());
        assert!(budget.used_bytes() <= 12_000);
    }
    assert!(a.tail_cache_bytes() > 0 || b.tail_cache_bytes() > 0);
    // An append larger than the partition's bound is not cached, and what was cached goes.
    let mut big = encode_simple_batch(1, 9_000, T0);
    a.append_as_leader(&mut big, 0, T0).unwrap();
    assert_eq!(a.tail_cache_bytes(), 0);
    // Idle: a housekeeping pass after one without appends frees the memory.
    b.release_idle_memory().unwrap();
    let held = b.tail_cache_bytes();
    b.release_idle_memory().unwrap();
    assert!(held > 0 && b.tail_cache_bytes() == 0);
    assert_eq!(budget.used_bytes(), 0);
    let mut small = encode_simple_batch(1, 100, T0);
    a.append_as_leader(&mut small, 0, T0).unwrap();
    drop(a);
    assert_eq!(budget.used_bytes(), 0, "a closed log gives its tail back");
}

#[test]
fn nothing_stale_is_served_after_truncation_or_a_follower_append() {
    let root = tempfile::tempdir().unwrap();
    let budget = TailCacheBudget::new(1 << 20, 1 << 20);
    let mut log = with_tail_cache(root.path(), LogConfig::default(), &budget);
    for i in 0..5 {
        let mut records = encode_simple_batch(2, 100, T0 + i);
        log.append_as_leader(&mut records, 0, T0 + i).unwrap();
    }
    let old = log.read(6, 1 << 20, i64::MAX, true).unwrap().records;
    log.truncate_to(6).unwrap();
    // The same offsets again, other bytes (epoch and timestamps).
    let mut records = encode_simple_batch(2, 100, T0 + 100);
    log.append_as_leader(&mut records, 1, T0 + 100).unwrap();
    let planned = log.plan_read(6, i64::MAX, 1 << 20).unwrap();
    let new = planned.read(1 << 20, true).unwrap().records;
    assert!(!planned.reads_disk());
    assert_eq!(batch_offsets(&new), vec![(6, 7)]);
    assert_ne!(new, old.slice(..new.len()));
    assert_eq!(
        new,
        log.plan_disk_read(6, i64::MAX, 1 << 20)
            .unwrap()
            .read(1 << 20, true)
            .unwrap()
            .records
    );

    // A follower's append (after it stopped leading) leaves nothing cached to serve.
    let mut theirs = encode_simple_batch(3, 50, T0 + 200);
    sluice_protocol::batch::set_base_offset(&mut theirs, 8).unwrap();
    sluice_protocol::batch::set_partition_leader_epoch(&mut theirs, 1).unwrap();
    log.append_as_follower(&theirs, T0 + 200).unwrap();
    assert_eq!(log.tail_cache_bytes(), 0);
    assert!(log.plan_read(6, i64::MAX, 1 << 20).unwrap().reads_disk());
    assert_eq!(budget.used_bytes(), 0);
}

//! Tests of the partition log on real files.

mod append_read;
mod bulk_index;
mod cleaner;
mod delete_records;
mod file_cache;
mod leader_epoch;
mod recovery;
mod retention;
mod seal;
mod tail_cache;
mod timestamps;
mod txn_index;

use std::path::{Path, PathBuf};

use sluice_protocol::batch::test_support::encode_simple_batch;
use sluice_protocol::batch::{BatchHeader, BatchIter};

use super::{FileCache, LogConfig, PartitionLog};

/// A clock far from zero, so timestamp arithmetic looks like production.
const T0: i64 = 1_700_000_000_000;

fn partition_dir(root: &Path) -> PathBuf {
    root.join("orders-0")
}

/// Opens the log through a file cache of two files, so that every test with more segments
/// than that also reads and writes through files the cache closed and reopened.
fn open(root: &Path, config: LogConfig) -> PartitionLog {
    PartitionLog::open(&partition_dir(root), config, &FileCache::new(2), T0).unwrap()
}

/// Appends a batch of `records` records with `value_len`-byte values timestamped from `ts`.
/// Returns its base offset.
fn append(log: &mut PartitionLog, records: usize, value_len: usize, ts: i64) -> i64 {
    let mut batch = encode_simple_batch(records, value_len, ts);
    log.append(&mut batch, ts).unwrap().base_offset
}

/// A log opened with `config` holding `batches` batches of 2 records of 80-byte values.
fn filled(root: &Path, config: LogConfig, batches: i64) -> PartitionLog {
    let mut log = open(root, config);
    for i in 0..batches {
        append(&mut log, 2, 80, T0 + i);
    }
    log
}

/// (base offset, last offset) of every batch in a read.
fn batch_offsets(bytes: &[u8]) -> Vec<(i64, i64)> {
    let mut iter = BatchIter::new(bytes);
    let offsets = iter.by_ref().map(|(h, _)| (h.base_offset, h.last_offset())).collect();
    assert!(iter.at_end(), "read returned a partial batch");
    offsets
}

fn first_header(bytes: &[u8]) -> BatchHeader {
    BatchHeader::parse(bytes).unwrap()
}

/// Names of the files in the partition directory, sorted.
fn files(root: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(partition_dir(root))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Names of the segments' `.log` files, sorted, the active one's included while it still carries
/// its pending name (`<base>.log.pending-<bytes>`, until background writeback seals the segment
/// before it).
fn log_files(root: &Path) -> Vec<String> {
    files(root).into_iter().filter(|f| f.contains(".log")).collect()
}

fn small_segments() -> LogConfig {
    LogConfig {
        segment_bytes: 1_000,
        index_interval_bytes: 100,
        ..LogConfig::default()
    }
}

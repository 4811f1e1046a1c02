//! Logs sharing a file cache smaller than their segment count: every segment is written and
//! read through files the cache closed and reopened, a segment whose pending name changes while
//! its file is closed reopens under its final name, and the process never holds more segment
//! files open than the cache allows.

use std::sync::Arc;

use super::bulk_index::{assert_every_offset_reads_its_batch, open_files_under};
use super::*;

const LOGS: usize = 6;
const CAPACITY: usize = 3;

fn open_shared(root: &Path, i: usize, cache: &Arc<FileCache>) -> PartitionLog {
    PartitionLog::open(&root.join(format!("orders-{i}")), small_segments(), cache, T0).unwrap()
}

#[test]
fn logs_with_more_segments_than_the_cache_holds_stay_readable_writable_and_within_it() {
    let root = tempfile::tempdir().unwrap();
    let root = root.path().canonicalize().unwrap();
    let cache = FileCache::new(CAPACITY);
    let mut logs: Vec<PartitionLog> = (0..LOGS).map(|i| open_shared(&root, i, &cache)).collect();
    // Interleaved appends: each log rolls several times while the others push its files out.
    for round in 0..40 {
        for log in &mut logs {
            append(log, 2, 80, T0 + round);
        }
        assert!(
            open_files_under(&root).len() <= CAPACITY,
            "round {round}: {:?}",
            open_files_under(&root)
        );
    }
    for log in &logs {
        assert!(log.segment_count() > 3, "{} segments", log.segment_count());
        assert_every_offset_reads_its_batch(log);
    }
    let stats = cache.stats();
    assert!(stats.open <= CAPACITY, "{stats:?}");
    assert!(stats.reopened > 0 && stats.closed > 0, "{stats:?}");
    assert!(open_files_under(&root).len() <= CAPACITY);

    // Each log's last roll left its seal pending, its active `.log` under the pending name;
    // completing the seals renames files the cache has mostly closed.
    for log in &mut logs {
        if let Some(seal) = log.pending_seal().unwrap() {
            seal.sync().unwrap();
            assert!(log.complete_seal(&seal).unwrap());
        }
    }
    for (i, log) in logs.iter_mut().enumerate() {
        let pending = std::fs::read_dir(root.join(format!("orders-{i}")))
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().contains(".pending-"))
            .count();
        assert_eq!(pending, 0, "log {i} kept a pending name");
        let end = log.log_end_offset();
        assert_eq!(append(log, 2, 80, T0), end, "log {i} appends after its rename");
        assert_every_offset_reads_its_batch(log);
    }
    for log in logs {
        log.close().unwrap();
    }
    let logs: Vec<PartitionLog> = (0..LOGS).map(|i| open_shared(&root, i, &cache)).collect();
    for log in &logs {
        assert_every_offset_reads_its_batch(log);
    }
    assert!(open_files_under(&root).len() <= CAPACITY);
}

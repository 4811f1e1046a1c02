//! Opening a partition log after a stop: finishing interrupted cleaner swaps, listing the
//! segment files, checking sealed segments, recovering the active segment's tail (truncated
//! at the first invalid batch unless the stop was clean) and the leader-epoch cache.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::PartitionLog;
use crate::fs::{remove_if_exists, sync_dir};
use crate::log::file_cache::FileCache;
use crate::log::leader_epoch::{EpochScan, LeaderEpochCache};
use crate::log::segment::{
    segment_file_name, LogSegment, CLEANED_FILE_SUFFIX, INDEX_FILE_SUFFIX, LOG_FILE_SUFFIX, PENDING_LOG_INFIX,
    SWAP_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX,
};
use crate::log::LogError;

impl PartitionLog {
    /// Rebuilds indexes of sealed segments that fail the sanity check.
    pub(super) fn check_sealed_segments(&mut self) -> Result<(), LogError> {
        let interval = self.config.index_interval_bytes;
        let dir = self.dir.clone();
        for segment in self.inactive.iter_mut().filter(|s| !s.is_sane()) {
            let outcome = segment.recover(interval)?;
            segment.on_become_inactive()?;
            tracing::warn!(
                partition = %super::log_name(&dir),
                segment_base_offset = segment.base_offset(),
                truncated_bytes = outcome.truncated_bytes,
                reason = outcome.reason.as_deref().unwrap_or("damaged index"),
                "rebuilt indexes of a sealed log segment"
            );
        }
        Ok(())
    }

    /// Finds the log end offset: a header scan of the tail after a clean shutdown, full recovery
    /// of the active segment otherwise (or when the quick path finds damage).
    pub(super) fn load_active_segment(&mut self, clean_shutdown: bool) -> Result<i64, LogError> {
        if clean_shutdown && self.active.is_sane() {
            match self.active.load_tail() {
                Ok(next_offset) => return Ok(next_offset),
                Err(LogError::Corrupt(e)) => {
                    tracing::warn!(partition = %self.name(), error = %e, "damaged log tail despite clean shutdown")
                }
                Err(e) => return Err(e),
            }
        }
        let outcome = self.active.recover(self.config.index_interval_bytes)?;
        if outcome.truncated_bytes > 0 {
            tracing::warn!(
                partition = %self.name(),
                offset = outcome.next_offset,
                truncated_bytes = outcome.truncated_bytes,
                segment_base_offset = self.active.base_offset(),
                reason = outcome.reason.as_deref().unwrap_or("unknown"),
                "recovered partition log after an unclean shutdown: truncated a torn or invalid tail at this offset"
            );
        }
        Ok(outcome.next_offset)
    }

    /// Kafka's load of the epoch cache: the checkpoint trimmed to the log (entries past a tail
    /// lost in a crash, or before the log start, go), or, when the checkpoint is missing under a
    /// non-empty log or corrupt, a cache rebuilt from the batch headers. After an unclean
    /// shutdown the active segment's batch headers add the epochs an unsynced write of the
    /// checkpoint lost (see `leader_epoch.rs`).
    pub(super) fn load_leader_epoch_cache(&self, clean_shutdown: bool) -> Result<LeaderEpochCache, LogError> {
        match LeaderEpochCache::read(&self.dir) {
            Ok(Some(mut cache)) => {
                cache.truncate_from_end(self.log_end_offset)?;
                cache.truncate_from_start(self.log_start_offset)?;
                if !clean_shutdown {
                    let mut scan = EpochScan::default();
                    self.active.for_each_batch_header(|header| {
                        scan.observe(header.partition_leader_epoch, header.base_offset);
                    })?;
                    let added = cache.extend(scan)?;
                    if added > 0 {
                        tracing::info!(
                            partition = %self.name(),
                            added,
                            "restored leader epochs the checkpoint lost in a crash from the active segment's batch headers"
                        );
                    }
                }
                return Ok(cache);
            }
            Ok(None) if self.log_end_offset == self.log_start_offset => {
                return Ok(LeaderEpochCache::empty(&self.dir));
            }
            Ok(None) => {}
            Err(LogError::Corrupt(e)) => tracing::warn!(
                partition = %self.name(),
                error = %e,
                "corrupt leader-epoch-checkpoint; rebuilding it from the log's batch headers"
            ),
            Err(e) => return Err(e),
        }
        let mut scan = EpochScan::default();
        for segment in self.segments() {
            segment.for_each_batch_header(|header| {
                scan.observe(header.partition_leader_epoch, header.base_offset);
            })?;
        }
        let cache = LeaderEpochCache::rebuild(&self.dir, scan)?;
        tracing::info!(
            partition = %self.name(),
            epochs = cache.entries().len(),
            "rebuilt the leader epoch cache from batch headers"
        );
        Ok(cache)
    }
}

/// Finishes or discards what an interrupted log-cleaner swap left in `dir`, as Kafka does on
/// load: `.cleaned` files were never swapped in and are deleted; a `<base>.log.swap` is a whole
/// cleaned segment (fsynced before it was renamed), so the segments it replaces (base offsets
/// from its base up to its next offset) are deleted and it takes its final name. Its indexes
/// are dropped and rebuilt from the log file when the segment is opened.
///
/// The directory is fsynced only when a swap was completed: the deletions of the replaced
/// segments must be durable with the rename, or a crash could bring back a replaced segment
/// beside the cleaned one. Leftover `.cleaned` and index `.swap` files that a crash brings
/// back are simply deleted again by the next open, so their removal needs no fsync.
pub(super) fn complete_interrupted_swaps(dir: &Path) -> Result<(), LogError> {
    let mut swaps = Vec::new();
    let mut segment_files = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let file_name = entry.file_name();
        let Some(name) = file_name.to_str() else {
            continue;
        };
        if name.ends_with(CLEANED_FILE_SUFFIX) {
            tracing::info!(file = %entry.path().display(), "deleting a cleaned segment file that was never swapped in");
            remove_if_exists(&entry.path())?;
        } else if let Some(stem) = name.strip_suffix(SWAP_FILE_SUFFIX) {
            if let Some(base) = parse_segment_file_name(stem, LOG_FILE_SUFFIX) {
                swaps.push(base);
            } else if parse_segment_file_name(stem, INDEX_FILE_SUFFIX)
                .or_else(|| parse_segment_file_name(stem, TIME_INDEX_FILE_SUFFIX))
                .is_some()
            {
                remove_if_exists(&entry.path())?;
            }
        } else {
            for suffix in [LOG_FILE_SUFFIX, INDEX_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX] {
                if let Some(base) = parse_segment_file_name(name, suffix) {
                    segment_files.push((base, entry.path()));
                }
            }
        }
    }
    let completed_swap = !swaps.is_empty();
    for base in swaps {
        let swap_path = dir.join(format!(
            "{}{SWAP_FILE_SUFFIX}",
            segment_file_name(base, LOG_FILE_SUFFIX)
        ));
        let next_offset = crate::log::segment::next_offset_of_file(&swap_path, base)?;
        for (_, path) in segment_files
            .iter()
            .filter(|(b, _)| *b >= base && (*b < next_offset || *b == base))
        {
            remove_if_exists(path)?;
        }
        fs::rename(&swap_path, dir.join(segment_file_name(base, LOG_FILE_SUFFIX)))?;
        tracing::warn!(
            dir = %dir.display(),
            base_offset = base,
            next_offset,
            "completed a cleaned-segment swap interrupted by a crash"
        );
    }
    if completed_swap {
        sync_dir(dir)?;
    }
    Ok(())
}

/// Resolves what a crash during a seal left (see [`PENDING_LOG_INFIX`]). For each segment file
/// still under its pending name, the segment before it is recovered (every batch validated, a
/// torn tail truncated) and sealed again, durably. If it still holds the bytes it was sealed
/// at, the pending file takes its final name. Otherwise that segment lost part of its tail, so
/// the pending segment and every later one go, because they would follow a hole; their index
/// files are left to [`list_segments`], which removes indexes without a `.log`. Returns whether
/// the directory changed (the caller fsyncs it).
pub(super) fn resolve_interrupted_seals(
    dir: &Arc<Path>,
    files: &[(String, PathBuf)],
    index_interval_bytes: u32,
    file_cache: &Arc<FileCache>,
    now_ms: i64,
) -> Result<bool, LogError> {
    let mut pending = Vec::new();
    let mut log_bases = Vec::new();
    for (name, path) in files {
        if let Some(base) = parse_segment_file_name(name, LOG_FILE_SUFFIX) {
            log_bases.push(base);
        } else if let Some((base, sealed_bytes)) = parse_pending_log_name(name) {
            pending.push((base, sealed_bytes, path));
        }
    }
    if pending.is_empty() {
        return Ok(false);
    }
    pending.sort_unstable_by_key(|&(base, ..)| base);
    log_bases.sort_unstable();
    let mut hole_at = None;
    for (base, sealed_bytes, path) in pending {
        if hole_at.is_some_and(|hole| base > hole) {
            remove_if_exists(&path)?;
            continue;
        }
        let intact = match log_bases.iter().copied().rfind(|&b| b < base) {
            None => true,
            Some(predecessor) => {
                let mut segment = LogSegment::open(dir, predecessor, true, file_cache, now_ms)?;
                segment.recover(index_interval_bytes)?;
                segment.on_become_inactive()?;
                let kept = segment.size_bytes();
                if kept != sealed_bytes {
                    tracing::warn!(
                        dir = %dir.display(),
                        segment_base_offset = predecessor,
                        sealed_bytes,
                        kept_bytes = kept,
                        dropped_segment_base_offset = base,
                        "a crash came before a sealed log segment reached the disk and it lost part of its \
                         tail; dropping the segments after it, which replication fills in again"
                    );
                }
                kept == sealed_bytes
            }
        };
        if intact {
            fs::rename(&path, dir.join(segment_file_name(base, LOG_FILE_SUFFIX)))?;
            let at = log_bases.partition_point(|&b| b < base);
            log_bases.insert(at, base);
            tracing::info!(dir = %dir.display(), segment_base_offset = base, "finished a segment seal interrupted by a crash");
        } else {
            remove_if_exists(&path)?;
            for &later in log_bases.iter().filter(|&&b| b > base) {
                remove_if_exists(&dir.join(segment_file_name(later, LOG_FILE_SUFFIX)))?;
            }
            log_bases.retain(|&b| b < base);
            hole_at = Some(base);
        }
    }
    Ok(true)
}

/// The names (those that are UTF-8; segment files always are) and paths of the files in `dir`.
pub(super) fn file_names(dir: &Path) -> Result<Vec<(String, PathBuf)>, LogError> {
    let mut names = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        if let Ok(name) = entry.file_name().into_string() {
            names.push((name, entry.path()));
        }
    }
    Ok(names)
}

/// `<base>.log.pending-<bytes>` as `(base, bytes)`.
fn parse_pending_log_name(name: &str) -> Option<(i64, u64)> {
    let (segment, bytes) = name.split_once(PENDING_LOG_INFIX)?;
    let base = parse_segment_file_name(segment, LOG_FILE_SUFFIX)?;
    let sealed_bytes: u64 = bytes.parse().ok()?;
    (sealed_bytes.to_string() == bytes).then_some((base, sealed_bytes))
}

/// Base offsets of the segments among `files` (a listing of the partition directory),
/// ascending. Index files without a `.log` are leftovers of an interrupted deletion and are
/// removed, as Kafka does.
pub(super) fn list_segments(files: &[(String, PathBuf)]) -> Result<Vec<i64>, LogError> {
    let mut log_bases = Vec::new();
    let mut index_files = Vec::new();
    for (name, path) in files {
        if let Some(base) = parse_segment_file_name(name, LOG_FILE_SUFFIX) {
            log_bases.push(base);
        } else if let Some(base) = parse_segment_file_name(name, INDEX_FILE_SUFFIX)
            .or_else(|| parse_segment_file_name(name, TIME_INDEX_FILE_SUFFIX))
            .or_else(|| parse_segment_file_name(name, crate::log::txn_index::TXN_INDEX_FILE_SUFFIX))
        {
            index_files.push((base, path));
        }
    }
    log_bases.sort_unstable();
    for (base, path) in index_files {
        if log_bases.binary_search(&base).is_err() {
            remove_if_exists(&path)?;
        }
    }
    Ok(log_bases)
}

pub(super) fn parse_segment_file_name(name: &str, suffix: &str) -> Option<i64> {
    let stem = name.strip_suffix(suffix)?;
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let base = stem.parse().ok()?;
    (segment_file_name(base, suffix) == name).then_some(base)
}

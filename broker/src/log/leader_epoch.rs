//! `LeaderEpochCache` (Kafka's `LeaderEpochFileCache`): for each leader epoch that wrote to the
//! log, the offset of its first batch, persisted as Kafka's `leader-epoch-checkpoint` file.
//!
//! It exists for replica truncation (KIP-101, KIP-279): a follower asks the leader where its
//! latest epoch ends (OffsetForLeaderEpoch) and truncates to that offset before fetching, so
//! replicas never diverge. The answer comes from [`LeaderEpochCache::end_offset_for`].
//!
//! The checkpoint is Kafka's text format, so an operator's tools read it as they read Kafka's:
//!
//! ```text
//! 0                 version
//! 2                 number of entries
//! 0 0               <epoch> <start offset>, epochs and start offsets strictly increasing
//! 3 1200
//! ```
//!
//! Every change is written before the batch that caused it, so after a process crash the file
//! never misses an epoch whose data the log holds; entries past the data are trimmed when the
//! log is opened. Changes happen once per epoch change, truncation or retention pass, never per
//! batch.
//!
//! Durability against power loss, as Kafka does it since KAFKA-15046: a new epoch on the append
//! path ([`LeaderEpochCache::assign`]) is written without fsync, because after a leader election
//! every partition's first append would otherwise pay two fsyncs (100,000 partitions: minutes of
//! fsyncs, one after another, before the last produce is answered). The file is made durable
//! ([`LeaderEpochCache::sync`]) before the segment holding such an epoch's first batch is sealed
//! and before a clean shutdown; an open after an unclean shutdown adds back, from the active
//! segment's batch headers, the epochs a lost write left out ([`LeaderEpochCache::extend`]).
//! So what the file may lack after power loss is only ever in the one segment that is rescanned.
//! Truncations and retention still write durably at once: they are rare, and an entry they
//! remove must not come back.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;
use std::sync::Arc;

use super::LogError;
use crate::fs::{replace_file_unsynced, write_atomically};

/// The checkpoint's name inside the partition directory, as Kafka names it.
pub const LEADER_EPOCH_CHECKPOINT_FILE: &str = "leader-epoch-checkpoint";
/// OffsetForLeaderEpoch's "no such epoch" (Kafka's `OffsetsForLeaderEpochResponse.UNDEFINED_EPOCH`).
pub const UNDEFINED_EPOCH: i32 = -1;
/// OffsetForLeaderEpoch's "no end offset" (`UNDEFINED_EPOCH_OFFSET`): the follower falls back to
/// truncating to its high watermark.
pub const UNDEFINED_EPOCH_OFFSET: i64 = -1;

const CHECKPOINT_VERSION: i32 = 0;
/// A checkpoint larger than this is not one we wrote (a million epochs fit in ~30 MB).
const MAX_CHECKPOINT_BYTES: u64 = 64 * 1024 * 1024;

/// Kafka's `EpochEntry`: `epoch` began writing at `start_offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEntry {
    pub epoch: i32,
    pub start_offset: i64,
}

/// The epoch → start offset map of one partition and its checkpoint file. Invariant: epochs and
/// start offsets both strictly increase, epochs are >= 0, and memory equals the file (a missing
/// file is an empty cache).
#[derive(Debug)]
pub struct LeaderEpochCache {
    /// The partition log's directory, shared with it.
    dir: Arc<Path>,
    epochs: Vec<EpochEntry>,
    /// `assign` wrote the file without fsync since it was last made durable.
    unsynced: bool,
}

impl LeaderEpochCache {
    /// An empty cache for `dir`, without touching the disk.
    pub(super) fn empty(dir: &Arc<Path>) -> LeaderEpochCache {
        LeaderEpochCache {
            dir: dir.clone(),
            epochs: Vec::new(),
            unsynced: false,
        }
    }

    /// Reads the checkpoint in `dir`. `Ok(None)` when there is none (or it is empty, as Kafka
    /// creates it): the caller decides whether the log must be scanned. A checkpoint that does not
    /// parse, or breaks the ordering invariant, is `Corrupt`.
    pub(super) fn read(dir: &Arc<Path>) -> Result<Option<LeaderEpochCache>, LogError> {
        let path = dir.join(LEADER_EPOCH_CHECKPOINT_FILE);
        let file = match File::open(&path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            file => file?,
        };
        let len = file.metadata()?.len();
        if len > MAX_CHECKPOINT_BYTES {
            return Err(corrupt(&path, format!("{len} bytes is too large")));
        }
        let mut bytes = Vec::with_capacity(len as usize);
        file.take(MAX_CHECKPOINT_BYTES).read_to_end(&mut bytes)?;
        if bytes.is_empty() {
            return Ok(None);
        }
        let text = std::str::from_utf8(&bytes).map_err(|e| corrupt(&path, e.to_string()))?;
        let epochs = parse_checkpoint(text).map_err(|reason| corrupt(&path, reason))?;
        Ok(Some(LeaderEpochCache {
            dir: dir.clone(),
            epochs,
            unsynced: false,
        }))
    }

    /// A cache rebuilt from a scan of the log's batch headers, written out.
    pub(super) fn rebuild(dir: &Arc<Path>, scan: EpochScan) -> Result<LeaderEpochCache, LogError> {
        if scan.regressions > 0 {
            tracing::warn!(
                dir = %dir.display(),
                batches = scan.regressions,
                "log holds batches whose leader epoch is below an earlier batch's; ignored them"
            );
        }
        let mut cache = LeaderEpochCache {
            dir: dir.clone(),
            epochs: scan.entries,
            unsynced: false,
        };
        cache.write_unless_absent_and_empty()?;
        Ok(cache)
    }

    /// Kafka's `latestEpoch`: the epoch of the last entry, the one still being written to.
    pub fn latest_epoch(&self) -> Option<i32> {
        self.epochs.last().map(|e| e.epoch)
    }

    pub fn entries(&self) -> &[EpochEntry] {
        &self.epochs
    }

    /// Kafka's `endOffsetFor`: the largest cached epoch <= `requested_epoch` and where it ends,
    /// which is the start offset of the next cached epoch, or `log_end_offset` when the latest
    /// epoch is requested. A request below every cached epoch gets `(requested_epoch, start of
    /// the first epoch)`: that data is gone, and the follower should truncate to where the
    /// leader's log begins. Unknown (empty cache, `UNDEFINED_EPOCH`, above the latest) is
    /// `(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)`.
    pub fn end_offset_for(&self, requested_epoch: i32, log_end_offset: i64) -> (i32, i64) {
        const UNDEFINED: (i32, i64) = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET);
        if requested_epoch == UNDEFINED_EPOCH {
            return UNDEFINED;
        }
        if self.latest_epoch() == Some(requested_epoch) {
            return (requested_epoch, log_end_offset);
        }
        let higher = self.epochs.partition_point(|e| e.epoch <= requested_epoch);
        let Some(next) = self.epochs.get(higher) else {
            return UNDEFINED;
        };
        match higher.checked_sub(1).and_then(|i| self.epochs.get(i)) {
            Some(floor) => (floor.epoch, next.start_offset),
            None => (requested_epoch, next.start_offset),
        }
    }

    /// The entries an append adds, given its batches as `(partition_leader_epoch, base_offset)`
    /// in order: one per batch whose epoch exceeds every earlier one. Changes nothing, so an
    /// append can be refused before any of it is written. A batch whose epoch is below the
    /// latest means the log and its source disagree about history: `LeaderEpochRegression`.
    pub(super) fn new_entries(
        &self,
        batches: impl IntoIterator<Item = (i32, i64)>,
    ) -> Result<Vec<EpochEntry>, LogError> {
        let mut latest = self.epochs.last().copied();
        let mut added = Vec::new();
        for (epoch, base_offset) in batches {
            match latest {
                _ if epoch < 0 => continue,
                Some(last) if epoch < last.epoch => {
                    return Err(LogError::LeaderEpochRegression {
                        base_offset,
                        epoch,
                        latest_epoch: last.epoch,
                    })
                }
                Some(last) if epoch == last.epoch => continue,
                _ => {}
            }
            let entry = EpochEntry {
                epoch,
                start_offset: base_offset,
            };
            debug_assert!(
                latest.is_none_or(|last| last.start_offset < base_offset),
                "epoch {epoch} would start at {base_offset}, not after {latest:?}"
            );
            added.push(entry);
            latest = Some(entry);
        }
        Ok(added)
    }

    /// Kafka's `assign`, for entries from [`LeaderEpochCache::new_entries`]: records them and
    /// writes the checkpoint, before the batches themselves are written, without fsync (see
    /// the module comment; [`LeaderEpochCache::sync`] makes it durable).
    pub(super) fn assign(&mut self, entries: &[EpochEntry]) -> Result<(), LogError> {
        if entries.is_empty() {
            return Ok(());
        }
        let len = self.epochs.len();
        self.epochs.extend_from_slice(entries);
        let path = self.dir.join(LEADER_EPOCH_CHECKPOINT_FILE);
        if let Err(e) = replace_file_unsynced(&path, self.text().as_bytes()) {
            self.epochs.truncate(len);
            return Err(e.into());
        }
        self.unsynced = true;
        Ok(())
    }

    /// Makes the checkpoint durable if `assign` wrote it without fsync since it last was.
    pub(super) fn sync(&mut self) -> Result<(), LogError> {
        if self.unsynced {
            self.write()?;
        }
        Ok(())
    }

    /// After an unclean shutdown: adds the epochs of `scan` (the active segment's batch
    /// headers) that come after every cached one, which a write `assign` left unsynced may have
    /// lost, and writes the checkpoint durably if any was added. Returns how many were.
    pub(super) fn extend(&mut self, scan: EpochScan) -> Result<usize, LogError> {
        let mut added = 0;
        for entry in scan.entries {
            let after = self
                .epochs
                .last()
                .is_none_or(|last| entry.epoch > last.epoch && entry.start_offset > last.start_offset);
            if after {
                self.epochs.push(entry);
                added += 1;
            }
        }
        if added > 0 {
            self.write()?;
        }
        Ok(added)
    }

    /// Kafka's `truncateFromEnd`: drops the entries of epochs starting at or after `end_offset`,
    /// whose batches were truncated away.
    pub(super) fn truncate_from_end(&mut self, end_offset: i64) -> Result<(), LogError> {
        let keep = self.epochs.partition_point(|e| e.start_offset < end_offset);
        if end_offset < 0 || keep == self.epochs.len() {
            return Ok(());
        }
        self.epochs.truncate(keep);
        self.write()
    }

    /// Kafka's `truncateFromStart`: after the log start moved to `start_offset`, drops epochs
    /// that ended before it and moves the start of the epoch covering it to `start_offset`.
    pub(super) fn truncate_from_start(&mut self, start_offset: i64) -> Result<(), LogError> {
        let covered = self.epochs.partition_point(|e| e.start_offset <= start_offset);
        let Some(covering) = covered.checked_sub(1).and_then(|i| self.epochs.get(i)) else {
            return Ok(());
        };
        let first = EpochEntry {
            epoch: covering.epoch,
            start_offset,
        };
        if covered == 1 && *covering == first {
            return Ok(());
        }
        self.epochs.drain(..covered - 1);
        self.epochs[0] = first;
        self.write()
    }

    /// Kafka's `clearAndFlush`, for a log truncated fully.
    pub(super) fn clear(&mut self) -> Result<(), LogError> {
        self.epochs.clear();
        self.write_unless_absent_and_empty()
    }

    /// A missing checkpoint already says "empty": partitions that never had an epoch (written
    /// by `PartitionLog::append`) need no file.
    fn write_unless_absent_and_empty(&mut self) -> Result<(), LogError> {
        let path = self.dir.join(LEADER_EPOCH_CHECKPOINT_FILE);
        if self.epochs.is_empty() && !path.try_exists()? {
            return Ok(());
        }
        self.write()
    }

    /// Replaces the checkpoint atomically and durably: a crash leaves the old file or the new
    /// one, whole.
    fn write(&mut self) -> Result<(), LogError> {
        write_atomically(&self.dir.join(LEADER_EPOCH_CHECKPOINT_FILE), self.text().as_bytes())?;
        self.unsynced = false;
        Ok(())
    }

    fn text(&self) -> String {
        let mut text = format!("{CHECKPOINT_VERSION}\n{}\n", self.epochs.len());
        for e in &self.epochs {
            text.push_str(&format!("{} {}\n", e.epoch, e.start_offset));
        }
        text
    }
}

/// Collects epoch entries from batch headers seen in log order, keeping only epoch changes, so a
/// rebuild holds one entry per epoch, not one per batch.
#[derive(Debug, Default)]
pub(super) struct EpochScan {
    entries: Vec<EpochEntry>,
    /// Batches whose epoch is below an earlier one's: never written by the append paths, ignored.
    regressions: u64,
}

impl EpochScan {
    /// Batches without an epoch (-1, as producers write it) are skipped.
    pub(super) fn observe(&mut self, epoch: i32, base_offset: i64) {
        match self.entries.last() {
            _ if epoch < 0 => {}
            Some(latest) if epoch < latest.epoch => self.regressions += 1,
            Some(latest) if epoch == latest.epoch => {}
            _ => self.entries.push(EpochEntry {
                epoch,
                start_offset: base_offset,
            }),
        }
    }
}

/// Parses Kafka's checkpoint text: version line, count line, then exactly `count` lines of
/// `<epoch> <start offset>` (whitespace-separated, as Kafka splits them).
fn parse_checkpoint(text: &str) -> Result<Vec<EpochEntry>, String> {
    let mut lines = text.lines();
    let version = lines.next().unwrap_or_default();
    if version.parse::<i32>() != Ok(CHECKPOINT_VERSION) {
        return Err(format!("unrecognised version line {version:?}"));
    }
    let count_line = lines.next().ok_or("missing entry count")?;
    let count: usize = count_line
        .parse()
        .map_err(|_| format!("invalid entry count {count_line:?}"))?;
    let mut entries: Vec<EpochEntry> = Vec::with_capacity(count.min(1024));
    for found in 0..count {
        let line = lines
            .next()
            .ok_or_else(|| format!("expected {count} entries, found {found}"))?;
        let entry = parse_entry(line).ok_or_else(|| format!("malformed entry {line:?}"))?;
        if let Some(previous) = entries.last() {
            if entry.epoch <= previous.epoch || entry.start_offset <= previous.start_offset {
                return Err(format!("entry {line:?} does not follow {previous:?}"));
            }
        }
        entries.push(entry);
    }
    if let Some(extra) = lines.next() {
        return Err(format!("expected {count} entries, found more: {extra:?}"));
    }
    Ok(entries)
}

fn parse_entry(line: &str) -> Option<EpochEntry> {
    let mut fields = line.split_whitespace();
    let (Some(epoch), Some(start_offset), None) = (fields.next(), fields.next(), fields.next()) else {
        return None;
    };
    let entry = EpochEntry {
        epoch: epoch.parse().ok()?,
        start_offset: start_offset.parse().ok()?,
    };
    (entry.epoch >= 0 && entry.start_offset >= 0).then_some(entry)
}

fn corrupt(path: &Path, reason: String) -> LogError {
    LogError::Corrupt(format!("{}: {reason}", path.display()))
}

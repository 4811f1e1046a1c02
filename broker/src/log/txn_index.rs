//! The aborted-transaction index (Kafka's `TransactionIndex`, `<base offset>.txnindex`): one
//! 34-byte entry per aborted transaction whose abort marker lies in that segment, so that a
//! `read_committed` fetch can tell the consumer which producers' records in its range to drop.
//!
//! Entry layout, big-endian: `i16 version (0), i64 producer id, i64 first offset, i64 last
//! offset (the marker's), i64 last stable offset at the time of the abort`. The last stable
//! offset lets a lookup stop early: once an abort's LSO reaches the fetch's upper bound, no
//! later abort can concern a transaction that started below it.
//!
//! The whole log's entries are also kept in memory ([`AbortedTxns`], sorted by marker offset),
//! so a fetch collects them under the log's lock without I/O. Files follow the log's style:
//! opened to append or rewrite, closed after.

use std::collections::VecDeque;
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

/// File suffix of a segment's aborted-transaction index.
pub const TXN_INDEX_FILE_SUFFIX: &str = ".txnindex";
/// Bytes of one entry.
pub const TXN_INDEX_ENTRY_BYTES: usize = 34;
const TXN_INDEX_VERSION: i16 = 0;

/// One aborted transaction (Kafka's `AbortedTxn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    /// The abort marker's offset.
    pub last_offset: i64,
    /// The partition's last stable offset right after the abort.
    pub last_stable_offset: i64,
}

impl AbortedTxn {
    pub fn encode(&self) -> [u8; TXN_INDEX_ENTRY_BYTES] {
        let mut out = [0u8; TXN_INDEX_ENTRY_BYTES];
        out[0..2].copy_from_slice(&TXN_INDEX_VERSION.to_be_bytes());
        out[2..10].copy_from_slice(&self.producer_id.to_be_bytes());
        out[10..18].copy_from_slice(&self.first_offset.to_be_bytes());
        out[18..26].copy_from_slice(&self.last_offset.to_be_bytes());
        out[26..34].copy_from_slice(&self.last_stable_offset.to_be_bytes());
        out
    }

    /// None for an unknown version or an entry whose offsets cannot be a transaction's.
    pub fn decode(bytes: &[u8; TXN_INDEX_ENTRY_BYTES]) -> Option<AbortedTxn> {
        let i64_at = |at: usize| bytes[at..at + 8].try_into().ok().map(i64::from_be_bytes);
        if i16::from_be_bytes([bytes[0], bytes[1]]) != TXN_INDEX_VERSION {
            return None;
        }
        let txn = AbortedTxn {
            producer_id: i64_at(2)?,
            first_offset: i64_at(10)?,
            last_offset: i64_at(18)?,
            last_stable_offset: i64_at(26)?,
        };
        (txn.first_offset >= 0 && txn.first_offset <= txn.last_offset).then_some(txn)
    }
}

/// Reads a `.txnindex` file. A torn last entry (a crash mid-append) is ignored; an entry that
/// does not decode ends the read with a warning, keeping what came before it.
pub fn load(path: &Path) -> io::Result<Vec<AbortedTxn>> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut entries = Vec::with_capacity(bytes.len() / TXN_INDEX_ENTRY_BYTES);
    for chunk in bytes.chunks_exact(TXN_INDEX_ENTRY_BYTES) {
        let Some(txn) = chunk.try_into().ok().and_then(AbortedTxn::decode) else {
            tracing::warn!(path = %path.display(), "ignoring the rest of a transaction index with an invalid entry");
            break;
        };
        entries.push(txn);
    }
    Ok(entries)
}

/// Appends one entry to `path`, creating the file (open, write, close).
pub fn append(path: &Path, txn: &AbortedTxn) -> io::Result<()> {
    let mut file = OpenOptions::new().create(true).append(true).open(path)?;
    file.write_all(&txn.encode())
}

/// Replaces `path` with `entries` (removing it when there are none), after a truncation or a
/// cleaner swap changed which entries belong to its segment.
pub fn rewrite(path: &Path, entries: impl Iterator<Item = AbortedTxn>) -> io::Result<()> {
    let bytes: Vec<u8> = entries.flat_map(|t| t.encode()).collect();
    if bytes.is_empty() {
        return crate::fs::remove_if_exists(path);
    }
    crate::fs::replace_file(path, &bytes)
}

/// The log's aborted transactions in memory, ordered by marker offset (markers are appended in
/// offset order). 32 bytes each; they go when their segment goes.
#[derive(Debug, Default)]
pub struct AbortedTxns {
    entries: VecDeque<AbortedTxn>,
}

impl AbortedTxns {
    /// From entries loaded in any order (one file per segment).
    pub fn from_entries(mut entries: Vec<AbortedTxn>) -> AbortedTxns {
        entries.sort_by_key(|t| t.last_offset);
        entries.dedup_by_key(|t| t.last_offset);
        AbortedTxns {
            entries: entries.into(),
        }
    }

    /// Adds `txn` unless an entry for its marker is already there (a rescan after an unclean
    /// stop meets markers already indexed). Returns whether it was added.
    pub fn insert(&mut self, txn: AbortedTxn) -> bool {
        let at = self.entries.partition_point(|t| t.last_offset < txn.last_offset);
        if self.entries.get(at).is_some_and(|t| t.last_offset == txn.last_offset) {
            return false;
        }
        self.entries.insert(at, txn);
        true
    }

    /// Kafka's `collectAbortedTxns`: the aborted transactions overlapping `[fetch_offset,
    /// upper_bound_offset)`, sorted by first offset (clients depend on the order). Stops at the
    /// first abort whose last stable offset reaches the upper bound: every transaction open
    /// below the bound had ended by then.
    pub fn collect(&self, fetch_offset: i64, upper_bound_offset: i64) -> Vec<AbortedTxn> {
        let start = self.entries.partition_point(|t| t.last_offset < fetch_offset);
        let mut found = Vec::new();
        for txn in self.entries.range(start..) {
            if txn.first_offset < upper_bound_offset {
                found.push(*txn);
            }
            if txn.last_stable_offset >= upper_bound_offset {
                break;
            }
        }
        found.sort_by_key(|t| t.first_offset);
        found
    }

    /// Forgets the entries whose marker lies below `log_start_offset`: their segments are gone
    /// or no fetch can reach them.
    pub fn drop_below(&mut self, log_start_offset: i64) {
        while self.entries.front().is_some_and(|t| t.last_offset < log_start_offset) {
            self.entries.pop_front();
        }
    }

    /// Forgets the entries whose marker is at or past `offset` (a truncation); returns whether
    /// any went.
    pub fn truncate_from(&mut self, offset: i64) -> bool {
        let keep = self.entries.partition_point(|t| t.last_offset < offset);
        let dropped = keep < self.entries.len();
        self.entries.truncate(keep);
        dropped
    }

    /// The entries whose marker lies in `[from, to)`: one segment's file.
    pub fn in_range(&self, from: i64, to: i64) -> impl Iterator<Item = AbortedTxn> + '_ {
        let start = self.entries.partition_point(|t| t.last_offset < from);
        self.entries
            .range(start..)
            .take_while(move |t| t.last_offset < to)
            .copied()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// What a `read_committed` fetch reports of `candidates` (collected up to the read's bound
/// before the read): those that overlap the records actually returned, `[fetch_offset,
/// last_offset_returned]`, in first-offset order. Nothing when nothing was returned.
pub fn aborted_in_read(
    candidates: &[AbortedTxn],
    fetch_offset: i64,
    last_offset_returned: Option<i64>,
) -> Vec<AbortedTxn> {
    let Some(last) = last_offset_returned else {
        return Vec::new();
    };
    candidates
        .iter()
        .filter(|t| t.last_offset >= fetch_offset && t.first_offset <= last)
        .copied()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn txn(producer_id: i64, first_offset: i64, last_offset: i64, last_stable_offset: i64) -> AbortedTxn {
        AbortedTxn {
            producer_id,
            first_offset,
            last_offset,
            last_stable_offset,
        }
    }

    #[test]
    fn an_entry_is_34_bytes_in_kafka_s_layout_and_round_trips() {
        let entry = txn(0x0102, 3, 9, 10);
        let bytes = entry.encode();
        assert_eq!(&bytes[0..2], &[0, 0]);
        assert_eq!(&bytes[2..10], &0x0102i64.to_be_bytes());
        assert_eq!(&bytes[26..34], &10i64.to_be_bytes());
        assert_eq!(AbortedTxn::decode(&bytes), Some(entry));
        let mut other_version = bytes;
        other_version[1] = 1;
        assert_eq!(AbortedTxn::decode(&other_version), None);
    }

    #[test]
    fn files_append_load_and_rewrite_and_a_torn_tail_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000000.txnindex");
        assert!(load(&path).unwrap().is_empty());
        append(&path, &txn(1, 0, 4, 5)).unwrap();
        append(&path, &txn(2, 2, 8, 9)).unwrap();
        let mut bytes = fs::read(&path).unwrap();
        bytes.extend_from_slice(&[0, 0, 1]);
        fs::write(&path, &bytes).unwrap();
        assert_eq!(load(&path).unwrap(), vec![txn(1, 0, 4, 5), txn(2, 2, 8, 9)]);
        rewrite(&path, [txn(1, 0, 4, 5)].into_iter()).unwrap();
        assert_eq!(load(&path).unwrap(), vec![txn(1, 0, 4, 5)]);
        rewrite(&path, std::iter::empty()).unwrap();
        assert!(!path.exists());
    }

    #[test]
    fn collect_returns_overlapping_aborts_sorted_by_first_offset_and_stops_at_the_bound() {
        // Producer 1's transaction spans 0..=10, producer 2's 5..=6, producer 3's 12..=14.
        let aborted = AbortedTxns::from_entries(vec![txn(1, 0, 10, 11), txn(2, 5, 6, 0), txn(3, 12, 14, 15)]);
        let ids = |v: Vec<AbortedTxn>| v.iter().map(|t| t.producer_id).collect::<Vec<_>>();
        assert_eq!(ids(aborted.collect(0, 100)), vec![1, 2, 3]);
        assert_eq!(ids(aborted.collect(7, 100)), vec![1, 3]);
        assert_eq!(ids(aborted.collect(0, 5)), vec![1]);
        assert_eq!(ids(aborted.collect(11, 12)), Vec::<i64>::new());
        assert_eq!(ids(aborted.collect(15, 100)), Vec::<i64>::new());
    }

    #[test]
    fn the_read_filter_keeps_only_aborts_overlapping_the_returned_records() {
        let candidates = vec![txn(1, 0, 10, 11), txn(2, 5, 6, 0), txn(3, 12, 14, 15)];
        let ids = |v: Vec<AbortedTxn>| v.iter().map(|t| t.producer_id).collect::<Vec<_>>();
        assert_eq!(ids(aborted_in_read(&candidates, 0, Some(5))), vec![1, 2]);
        assert_eq!(ids(aborted_in_read(&candidates, 0, Some(4))), vec![1]);
        assert_eq!(ids(aborted_in_read(&candidates, 7, Some(20))), vec![1, 3]);
        assert!(aborted_in_read(&candidates, 0, None).is_empty());
    }

    #[test]
    fn insert_is_idempotent_per_marker_and_pruning_drops_by_marker_offset() {
        let mut aborted = AbortedTxns::default();
        assert!(aborted.insert(txn(1, 0, 4, 5)));
        assert!(aborted.insert(txn(2, 1, 9, 10)));
        assert!(!aborted.insert(txn(1, 0, 4, 5)));
        assert!(aborted.insert(txn(3, 5, 6, 1)));
        assert_eq!(
            aborted.in_range(0, 7).map(|t| t.producer_id).collect::<Vec<_>>(),
            vec![1, 3]
        );
        aborted.drop_below(5);
        assert_eq!(aborted.len(), 2);
        assert!(aborted.truncate_from(9));
        assert!(!aborted.truncate_from(9));
        assert_eq!(aborted.len(), 1);
    }
}

//! Producer-state snapshots, Kafka's `<offset>.snapshot` files (`ProducerStateManager`'s
//! `writeSnapshot`/`readSnapshot`): the state of every producer as it stood just before
//! `offset`, so an open rebuilds producer state by scanning batch headers only from the newest
//! snapshot instead of from the log start — and an open transaction that began long before the
//! log tail is not lost.
//!
//! Layout, big-endian: `i16 version, u32 CRC32C of everything after it, i32 entry count`, then
//! per producer `i64 producer id, i16 epoch, i32 last sequence, i64 last offset, i32 offset
//! delta, i64 timestamp, i32 coordinator epoch, i64 current txn first offset` (46 bytes).
//! Version 1 is Kafka's and stops there: only each producer's last batch. Sluice writes
//! version 2, which follows each entry with `u8 count` (at most 4) and that many earlier
//! batches, oldest first, as `i32 first sequence, i32 last sequence, i64 base offset, i64 last
//! offset` (24 bytes each): with them a restarted leader still recognises a retry of any of the
//! producer's last five batches as a duplicate. With the last batch only (Kafka's), a client
//! retrying its second-to-last batch after the leader restarted got OUT_OF_ORDER_SEQUENCE_NUMBER,
//! which librdkafka's idempotent producer takes as fatal ("sequence desynchronization"). Both
//! versions are read.
//!
//! Written at each segment roll for the new segment's base offset (without an fsync: a torn
//! file fails its CRC and the next older one is used) and at a clean close (fsynced). A file
//! that does not check is logged and skipped, never trusted.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// File suffix of a producer snapshot.
pub const SNAPSHOT_FILE_SUFFIX: &str = ".snapshot";
/// Kafka's version: each producer's last batch only.
const KAFKA_SNAPSHOT_VERSION: i16 = 1;
/// The version written: entries followed by their earlier batches.
const SNAPSHOT_VERSION: i16 = 2;
/// Version, CRC and entry count.
const SNAPSHOT_HEADER_BYTES: usize = 2 + 4 + 4;
/// Bytes of one producer's entry, without its earlier batches.
pub const SNAPSHOT_ENTRY_BYTES: usize = 8 + 2 + 4 + 8 + 4 + 8 + 4 + 8;
/// Bytes of one earlier batch (version 2).
const SNAPSHOT_BATCH_BYTES: usize = 4 + 4 + 8 + 8;
/// Earlier batches an entry may carry: with the last one, the five a producer may have in
/// flight.
pub const MAX_EARLIER_BATCHES: usize = 4;

/// A batch before a producer's last one, as version 2 stores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotBatch {
    pub first_seq: i32,
    pub last_seq: i32,
    pub base_offset: i64,
    pub last_offset: i64,
}

/// One producer as a snapshot stores it (Kafka's `ProducerSnapshotEntry`, plus its earlier
/// batches).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotEntry {
    pub producer_id: i64,
    pub epoch: i16,
    /// -1 when the producer wrote no sequenced batch.
    pub last_sequence: i32,
    /// -1 when the producer wrote no sequenced batch.
    pub last_offset: i64,
    /// Offsets the last batch spans, minus one.
    pub offset_delta: i32,
    pub timestamp: i64,
    pub coordinator_epoch: i32,
    /// -1 when no transaction is open.
    pub current_txn_first_offset: i64,
    /// The batches before the last one, oldest first (at most [`MAX_EARLIER_BATCHES`]; none
    /// from a version 1 file).
    pub earlier: Vec<SnapshotBatch>,
}

impl SnapshotEntry {
    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.producer_id.to_be_bytes());
        out.extend_from_slice(&self.epoch.to_be_bytes());
        out.extend_from_slice(&self.last_sequence.to_be_bytes());
        out.extend_from_slice(&self.last_offset.to_be_bytes());
        out.extend_from_slice(&self.offset_delta.to_be_bytes());
        out.extend_from_slice(&self.timestamp.to_be_bytes());
        out.extend_from_slice(&self.coordinator_epoch.to_be_bytes());
        out.extend_from_slice(&self.current_txn_first_offset.to_be_bytes());
        let earlier = &self.earlier[self.earlier.len().saturating_sub(MAX_EARLIER_BATCHES)..];
        out.push(earlier.len() as u8);
        for b in earlier {
            out.extend_from_slice(&b.first_seq.to_be_bytes());
            out.extend_from_slice(&b.last_seq.to_be_bytes());
            out.extend_from_slice(&b.base_offset.to_be_bytes());
            out.extend_from_slice(&b.last_offset.to_be_bytes());
        }
    }

    /// Reads one entry of `version` from the front of `bytes`; returns it and the bytes it
    /// took, or `None` if they are not all present or claim too many earlier batches.
    fn read(bytes: &[u8], version: i16) -> Option<(SnapshotEntry, usize)> {
        let mut at = 0;
        let mut take = |len: usize| {
            let field = bytes.get(at..at + len);
            at += len;
            field
        };
        let mut entry = SnapshotEntry {
            producer_id: i64::from_be_bytes(take(8)?.try_into().ok()?),
            epoch: i16::from_be_bytes(take(2)?.try_into().ok()?),
            last_sequence: i32::from_be_bytes(take(4)?.try_into().ok()?),
            last_offset: i64::from_be_bytes(take(8)?.try_into().ok()?),
            offset_delta: i32::from_be_bytes(take(4)?.try_into().ok()?),
            timestamp: i64::from_be_bytes(take(8)?.try_into().ok()?),
            coordinator_epoch: i32::from_be_bytes(take(4)?.try_into().ok()?),
            current_txn_first_offset: i64::from_be_bytes(take(8)?.try_into().ok()?),
            earlier: Vec::new(),
        };
        if version >= SNAPSHOT_VERSION {
            let count = usize::from(take(1)?[0]);
            if count > MAX_EARLIER_BATCHES {
                return None;
            }
            for _ in 0..count {
                let b = take(SNAPSHOT_BATCH_BYTES)?;
                entry.earlier.push(SnapshotBatch {
                    first_seq: i32::from_be_bytes(b[0..4].try_into().ok()?),
                    last_seq: i32::from_be_bytes(b[4..8].try_into().ok()?),
                    base_offset: i64::from_be_bytes(b[8..16].try_into().ok()?),
                    last_offset: i64::from_be_bytes(b[16..24].try_into().ok()?),
                });
            }
        }
        Some((entry, at))
    }
}

/// The bytes of a snapshot of `entries`.
pub fn encode(entries: &[SnapshotEntry]) -> Vec<u8> {
    let mut out = Vec::with_capacity(SNAPSHOT_HEADER_BYTES + entries.len() * SNAPSHOT_ENTRY_BYTES);
    out.extend_from_slice(&SNAPSHOT_VERSION.to_be_bytes());
    out.extend_from_slice(&0u32.to_be_bytes()); // CRC, filled below
    out.extend_from_slice(&(entries.len() as i32).to_be_bytes());
    for entry in entries {
        entry.put(&mut out);
    }
    let crc = crc32c::crc32c(&out[6..]);
    out[2..6].copy_from_slice(&crc.to_be_bytes());
    out
}

/// The entries of a snapshot (version 1 or 2), or why it cannot be trusted. The entries must
/// fill the bytes present exactly, and nothing is sized by a count read from the file.
pub fn decode(bytes: &[u8]) -> Result<Vec<SnapshotEntry>, String> {
    if bytes.len() < SNAPSHOT_HEADER_BYTES {
        return Err(format!("{} bytes, shorter than a snapshot header", bytes.len()));
    }
    let version = i16::from_be_bytes([bytes[0], bytes[1]]);
    if version != KAFKA_SNAPSHOT_VERSION && version != SNAPSHOT_VERSION {
        return Err(format!("unknown snapshot version {version}"));
    }
    let stored = u32::from_be_bytes([bytes[2], bytes[3], bytes[4], bytes[5]]);
    let computed = crc32c::crc32c(&bytes[6..]);
    if stored != computed {
        return Err(format!("CRC {stored:#x} does not match the contents ({computed:#x})"));
    }
    let count = i32::from_be_bytes([bytes[6], bytes[7], bytes[8], bytes[9]]);
    let mut body = &bytes[SNAPSHOT_HEADER_BYTES..];
    // Each entry takes at least SNAPSHOT_ENTRY_BYTES, so a count the bytes cannot hold is
    // refused before anything is reserved.
    let fits = usize::try_from(count)
        .ok()
        .and_then(|c| c.checked_mul(SNAPSHOT_ENTRY_BYTES))
        .is_some_and(|least| least <= body.len());
    if !fits {
        return Err(format!("{count} entries do not fit in {} bytes", body.len()));
    }
    let mut entries = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let (entry, used) = SnapshotEntry::read(body, version).ok_or_else(|| "a truncated entry".to_string())?;
        entries.push(entry);
        body = &body[used..];
    }
    if !body.is_empty() {
        return Err(format!("{count} entries leave {} bytes over", body.len()));
    }
    Ok(entries)
}

/// `<offset, 20 digits>.snapshot` in `dir`.
pub fn snapshot_path(dir: &Path, offset: i64) -> PathBuf {
    dir.join(format!("{offset:020}{SNAPSHOT_FILE_SUFFIX}"))
}

/// Writes a snapshot for `offset`. `durable`: fsync the file (a clean close); otherwise the
/// bytes are written and renamed into place without one (a roll under the log's lock), and a
/// crash may leave a file that fails its CRC, which loading skips.
pub fn write(dir: &Path, offset: i64, entries: &[SnapshotEntry], durable: bool) -> io::Result<()> {
    let path = snapshot_path(dir, offset);
    let bytes = encode(entries);
    if durable {
        return crate::fs::replace_file(&path, &bytes);
    }
    let tmp = path.with_extension("snapshot.tmp");
    fs::write(&tmp, &bytes)?;
    fs::rename(&tmp, &path)
}

/// Offsets of the snapshot files in `dir`, ascending.
pub fn list(dir: &Path) -> io::Result<Vec<i64>> {
    let mut offsets = Vec::new();
    for entry in fs::read_dir(dir)? {
        let name = entry?.file_name();
        let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(SNAPSHOT_FILE_SUFFIX)) else {
            continue;
        };
        if stem.len() == 20 && stem.bytes().all(|b| b.is_ascii_digit()) {
            if let Ok(offset) = stem.parse::<i64>() {
                offsets.push(offset);
            }
        }
    }
    offsets.sort_unstable();
    Ok(offsets)
}

/// The newest snapshot at or below `max_offset` that reads and checks, with its offset.
/// Corrupt or unreadable ones are logged and skipped.
pub fn load_latest(dir: &Path, max_offset: i64) -> io::Result<Option<(i64, Vec<SnapshotEntry>)>> {
    for offset in list(dir)?.into_iter().rev().filter(|o| *o <= max_offset) {
        let path = snapshot_path(dir, offset);
        match fs::read(&path).map_err(|e| e.to_string()).and_then(|b| decode(&b)) {
            Ok(entries) => return Ok(Some((offset, entries))),
            Err(why) => {
                tracing::warn!(path = %path.display(), %why, "skipping a producer snapshot that does not check")
            }
        }
    }
    Ok(None)
}

/// Removes the snapshots for offsets outside `[from, to]`: above a truncation point, or below
/// what the log still holds.
pub fn delete_outside(dir: &Path, from: i64, to: i64) -> io::Result<()> {
    for offset in list(dir)? {
        if offset < from || offset > to {
            crate::fs::remove_if_exists(&snapshot_path(dir, offset))?;
        }
    }
    Ok(())
}

/// Removes every snapshot: the log started over elsewhere (a follower truncating fully), so
/// none describes its history any more.
pub fn delete_all(dir: &Path) -> io::Result<()> {
    delete_outside(dir, i64::MAX, i64::MIN)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(producer_id: i64, current_txn_first_offset: i64) -> SnapshotEntry {
        SnapshotEntry {
            producer_id,
            epoch: 3,
            last_sequence: 41,
            last_offset: 99,
            offset_delta: 4,
            timestamp: 1_700_000_000_000,
            coordinator_epoch: 7,
            current_txn_first_offset,
            earlier: Vec::new(),
        }
    }

    fn batch(seq: i32) -> SnapshotBatch {
        SnapshotBatch {
            first_seq: seq,
            last_seq: seq + 1,
            base_offset: i64::from(seq) * 10,
            last_offset: i64::from(seq) * 10 + 1,
        }
    }

    #[test]
    fn a_snapshot_round_trips_with_each_producers_earlier_batches() {
        let mut with_batches = entry(2, 90);
        with_batches.earlier = (0..4).map(|i| batch(i * 2)).collect();
        let entries = vec![entry(1, -1), with_batches];
        let bytes = encode(&entries);
        assert_eq!(bytes.len(), 10 + 2 * 46 + 2 + 4 * 24);
        assert_eq!(&bytes[0..2], &2i16.to_be_bytes());
        assert_eq!(&bytes[6..10], &2i32.to_be_bytes());
        assert_eq!(decode(&bytes), Ok(entries));
        assert_eq!(decode(&encode(&[])), Ok(vec![]));
    }

    #[test]
    fn kafkas_version_1_layout_still_reads() {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&1i16.to_be_bytes());
        bytes.extend_from_slice(&0u32.to_be_bytes());
        bytes.extend_from_slice(&2i32.to_be_bytes());
        for e in [entry(1, -1), entry(2, 90)] {
            let mut one = Vec::new();
            e.put(&mut one);
            bytes.extend_from_slice(&one[..SNAPSHOT_ENTRY_BYTES]);
        }
        let crc = crc32c::crc32c(&bytes[6..]);
        bytes[2..6].copy_from_slice(&crc.to_be_bytes());
        assert_eq!(bytes.len(), 10 + 2 * 46);
        assert_eq!(decode(&bytes), Ok(vec![entry(1, -1), entry(2, 90)]));
    }

    #[test]
    fn an_entry_claiming_more_than_four_earlier_batches_is_refused() {
        let mut e = entry(1, -1);
        e.earlier = (0..4).map(batch).collect();
        let mut bytes = encode(&[e]);
        bytes[10 + SNAPSHOT_ENTRY_BYTES] = 5;
        bytes.extend_from_slice(&[0; SNAPSHOT_BATCH_BYTES]);
        let crc = crc32c::crc32c(&bytes[6..]);
        bytes[2..6].copy_from_slice(&crc.to_be_bytes());
        assert!(decode(&bytes).is_err());
    }

    #[test]
    fn corrupt_truncated_or_lying_snapshots_are_refused_without_panicking() {
        let mut e = entry(1, -1);
        e.earlier = vec![batch(7)];
        let bytes = encode(&[e]);
        for len in 0..bytes.len() {
            assert!(decode(&bytes[..len]).is_err(), "truncated at {len}");
        }
        for at in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[at] ^= 0x40;
            assert!(decode(&bad).is_err(), "flipped byte {at}");
        }
        // A count claiming billions of entries with a matching CRC sizes nothing.
        let mut lying = bytes.clone();
        lying[6..10].copy_from_slice(&i32::MAX.to_be_bytes());
        let crc = crc32c::crc32c(&lying[6..]);
        lying[2..6].copy_from_slice(&crc.to_be_bytes());
        assert!(decode(&lying).is_err());
    }

    #[test]
    fn loading_takes_the_newest_snapshot_that_checks_at_or_below_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), 10, &[entry(1, -1)], false).unwrap();
        write(dir.path(), 20, &[entry(2, -1)], true).unwrap();
        write(dir.path(), 30, &[entry(3, -1)], false).unwrap();
        fs::write(snapshot_path(dir.path(), 20), b"garbage").unwrap();
        let (offset, entries) = load_latest(dir.path(), 25).unwrap().unwrap();
        assert_eq!((offset, entries[0].producer_id), (10, 1));
        assert_eq!(load_latest(dir.path(), 30).unwrap().unwrap().0, 30);
        assert!(load_latest(dir.path(), 5).unwrap().is_none());
        delete_outside(dir.path(), 15, 25).unwrap();
        assert_eq!(list(dir.path()).unwrap(), vec![20]);
    }
}

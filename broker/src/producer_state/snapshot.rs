//! Producer-state snapshots, Kafka's `<offset>.snapshot` files (`ProducerStateManager`'s
//! `writeSnapshot`/`readSnapshot`, version 1): the state of every producer as it stood just
//! before `offset`, so an open rebuilds producer state by scanning batch headers only from the
//! newest snapshot instead of from the log start — and an open transaction that began long
//! before the log tail is not lost.
//!
//! Layout, big-endian: `i16 version (1), u32 CRC32C of everything after it, i32 entry count`,
//! then per producer `i64 producer id, i16 epoch, i32 last sequence, i64 last offset, i32
//! offset delta, i64 timestamp, i32 coordinator epoch, i64 current txn first offset` (46
//! bytes). Only each producer's last batch is kept, as in Kafka.
//!
//! Written at each segment roll for the new segment's base offset (without an fsync: a torn
//! file fails its CRC and the next older one is used) and at a clean close (fsynced). A file
//! that does not check is logged and skipped, never trusted.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// File suffix of a producer snapshot.
pub const SNAPSHOT_FILE_SUFFIX: &str = ".snapshot";
const SNAPSHOT_VERSION: i16 = 1;
/// Version, CRC and entry count.
const SNAPSHOT_HEADER_BYTES: usize = 2 + 4 + 4;
/// Bytes of one producer's entry.
pub const SNAPSHOT_ENTRY_BYTES: usize = 8 + 2 + 4 + 8 + 4 + 8 + 4 + 8;

/// One producer as a snapshot stores it (Kafka's `ProducerSnapshotEntry`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    }

    fn read(bytes: &[u8]) -> Option<SnapshotEntry> {
        let mut at = 0;
        let mut take = |len: usize| {
            let field = bytes.get(at..at + len);
            at += len;
            field
        };
        Some(SnapshotEntry {
            producer_id: i64::from_be_bytes(take(8)?.try_into().ok()?),
            epoch: i16::from_be_bytes(take(2)?.try_into().ok()?),
            last_sequence: i32::from_be_bytes(take(4)?.try_into().ok()?),
            last_offset: i64::from_be_bytes(take(8)?.try_into().ok()?),
            offset_delta: i32::from_be_bytes(take(4)?.try_into().ok()?),
            timestamp: i64::from_be_bytes(take(8)?.try_into().ok()?),
            coordinator_epoch: i32::from_be_bytes(take(4)?.try_into().ok()?),
            current_txn_first_offset: i64::from_be_bytes(take(8)?.try_into().ok()?),
        })
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

/// The entries of a snapshot, or why it cannot be trusted. The entry count must match the
/// bytes present exactly, so nothing is sized by it.
pub fn decode(bytes: &[u8]) -> Result<Vec<SnapshotEntry>, String> {
    if bytes.len() < SNAPSHOT_HEADER_BYTES {
        return Err(format!("{} bytes, shorter than a snapshot header", bytes.len()));
    }
    let version = i16::from_be_bytes([bytes[0], bytes[1]]);
    if version != SNAPSHOT_VERSION {
        return Err(format!("unknown snapshot version {version}"));
    }
    let stored = u32::from_be_bytes([bytes[2], bytes[3], bytes[4], bytes[5]]);
    let computed = crc32c::crc32c(&bytes[6..]);
    if stored != computed {
        return Err(format!("CRC {stored:#x} does not match the contents ({computed:#x})"));
    }
    let count = i32::from_be_bytes([bytes[6], bytes[7], bytes[8], bytes[9]]);
    let body = &bytes[SNAPSHOT_HEADER_BYTES..];
    if usize::try_from(count)
        .ok()
        .and_then(|c| c.checked_mul(SNAPSHOT_ENTRY_BYTES))
        != Some(body.len())
    {
        return Err(format!("{count} entries do not fill {} bytes", body.len()));
    }
    body.chunks_exact(SNAPSHOT_ENTRY_BYTES)
        .map(|chunk| SnapshotEntry::read(chunk).ok_or_else(|| "a truncated entry".to_string()))
        .collect()
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
        }
    }

    #[test]
    fn a_snapshot_round_trips_in_kafka_s_layout() {
        let entries = vec![entry(1, -1), entry(2, 90)];
        let bytes = encode(&entries);
        assert_eq!(bytes.len(), 10 + 2 * 46);
        assert_eq!(&bytes[0..2], &1i16.to_be_bytes());
        assert_eq!(&bytes[6..10], &2i32.to_be_bytes());
        assert_eq!(decode(&bytes), Ok(entries));
        assert_eq!(decode(&encode(&[])), Ok(vec![]));
    }

    #[test]
    fn corrupt_truncated_or_lying_snapshots_are_refused_without_panicking() {
        let bytes = encode(&[entry(1, -1)]);
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

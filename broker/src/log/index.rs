//! Kafka's sparse segment indexes: `OffsetIndex` (`.index`) and `TimeIndex` (`.timeindex`).
//!
//! Both are arrays of fixed-size big-endian entries, offsets stored relative to the segment's base
//! offset, in Kafka's on-disk layout. An entry is added every `index.interval.bytes` appended, so a
//! lookup lands within a few KiB of its target and a short scan of batch headers finishes the job.
//!
//! Entries are written through to the file on append. Only the active segment keeps a copy in
//! memory (the hot tail that consumers read); older segments answer lookups with a binary search
//! of positional reads, which the page cache serves, so index memory does not grow with retention.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;

use crate::fs::remove_if_exists;

/// An offset index entry: the batch whose base offset is `offset` starts at `position` in the
/// segment file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetPosition {
    pub offset: i64,
    pub position: u32,
}

/// A time index entry: `timestamp` is the largest timestamp in the segment up to and including
/// the batch whose last offset is `offset` (Kafka's shallow offset of the max timestamp).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimestampOffset {
    pub timestamp: i64,
    pub offset: i64,
}

/// Fixed-size on-disk entry, offsets relative to the segment's base offset.
trait IndexEntry: Copy {
    const SIZE: usize;
    fn decode(bytes: &[u8]) -> Option<Self>;
    /// Writes the entry into the first `SIZE` bytes of the returned array.
    fn encode(&self) -> [u8; MAX_ENTRY_SIZE];
}

const MAX_ENTRY_SIZE: usize = 12;

#[derive(Debug, Clone, Copy)]
struct RawOffsetEntry {
    relative_offset: u32,
    position: u32,
}

impl IndexEntry for RawOffsetEntry {
    const SIZE: usize = 8;

    fn decode(bytes: &[u8]) -> Option<Self> {
        Some(RawOffsetEntry {
            relative_offset: u32::from_be_bytes(bytes.get(0..4)?.try_into().ok()?),
            position: u32::from_be_bytes(bytes.get(4..8)?.try_into().ok()?),
        })
    }

    fn encode(&self) -> [u8; MAX_ENTRY_SIZE] {
        let mut out = [0u8; MAX_ENTRY_SIZE];
        out[0..4].copy_from_slice(&self.relative_offset.to_be_bytes());
        out[4..8].copy_from_slice(&self.position.to_be_bytes());
        out
    }
}

#[derive(Debug, Clone, Copy)]
struct RawTimeEntry {
    timestamp: i64,
    relative_offset: u32,
}

impl IndexEntry for RawTimeEntry {
    const SIZE: usize = 12;

    fn decode(bytes: &[u8]) -> Option<Self> {
        Some(RawTimeEntry {
            timestamp: i64::from_be_bytes(bytes.get(0..8)?.try_into().ok()?),
            relative_offset: u32::from_be_bytes(bytes.get(8..12)?.try_into().ok()?),
        })
    }

    fn encode(&self) -> [u8; MAX_ENTRY_SIZE] {
        let mut out = [0u8; MAX_ENTRY_SIZE];
        out[0..8].copy_from_slice(&self.timestamp.to_be_bytes());
        out[8..12].copy_from_slice(&self.relative_offset.to_be_bytes());
        out
    }
}

/// The file and bookkeeping shared by both indexes.
#[derive(Debug)]
struct IndexFile<E> {
    path: PathBuf,
    /// Shared with [`OffsetIndexView`]s, so a read planned under the log's lock can finish its
    /// lookup after the lock is released (and after the file is deleted).
    file: Arc<File>,
    len: usize,
    /// False when the file length is not a whole number of entries (torn write): rebuild it.
    whole: bool,
    /// The file did not exist when opened: rebuild it if the segment has data.
    was_missing: bool,
    last: Option<E>,
    /// All entries, kept while the segment is active.
    cached: Option<Vec<E>>,
}

impl<E: IndexEntry> IndexFile<E> {
    fn open(path: PathBuf, cache: bool) -> io::Result<Self> {
        let was_missing = !path.try_exists()?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)?;
        let file_len = file.metadata()?.len();
        let len = usize::try_from(file_len / E::SIZE as u64)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "index file too large"))?;
        let whole = file_len % E::SIZE as u64 == 0;
        let mut index = IndexFile {
            path,
            file: Arc::new(file),
            len,
            whole,
            was_missing,
            last: None,
            cached: None,
        };
        index.last = match len {
            0 => None,
            n => Some(index.entry_at(n - 1)?),
        };
        if cache {
            index.cache()?;
        }
        Ok(index)
    }

    fn entry_at(&self, i: usize) -> io::Result<E> {
        if let Some(cached) = &self.cached {
            return cached.get(i).copied().ok_or_else(|| out_of_bounds(i));
        }
        read_entry(&self.file, self.len, i)
    }

    /// Number of leading entries for which `pred` holds (`pred` must hold for a prefix).
    fn partition_point(&self, pred: impl Fn(&E) -> bool) -> io::Result<usize> {
        partition_point(self.len, |i| self.entry_at(i), pred)
    }

    /// The last entry for which `pred` holds.
    fn floor(&self, pred: impl Fn(&E) -> bool) -> io::Result<Option<E>> {
        floor(self.len, |i| self.entry_at(i), pred)
    }

    fn append(&mut self, entry: E) -> io::Result<()> {
        let encoded = entry.encode();
        self.file
            .write_all_at(&encoded[..E::SIZE], (self.len * E::SIZE) as u64)?;
        self.len += 1;
        self.last = Some(entry);
        if let Some(cached) = &mut self.cached {
            cached.push(entry);
        }
        Ok(())
    }

    /// Keeps only the entries for which `keep` holds (a prefix).
    fn truncate_where(&mut self, keep: impl Fn(&E) -> bool) -> io::Result<()> {
        let n = self.partition_point(keep)?;
        self.truncate_to_len(n)
    }

    fn truncate_to_len(&mut self, n: usize) -> io::Result<()> {
        let n = n.min(self.len);
        self.file.set_len((n * E::SIZE) as u64)?;
        if let Some(cached) = &mut self.cached {
            cached.truncate(n);
        }
        self.len = n;
        self.whole = true;
        self.was_missing = false;
        self.last = match self.len {
            0 => None,
            n => Some(self.entry_at(n - 1)?),
        };
        Ok(())
    }

    fn is_sane(&self, log_size_bytes: u64) -> bool {
        self.whole && !(self.was_missing && log_size_bytes > 0)
    }

    fn cache(&mut self) -> io::Result<()> {
        if self.cached.is_some() {
            return Ok(());
        }
        let mut bytes = vec![0u8; self.len * E::SIZE];
        self.file.read_exact_at(&mut bytes, 0)?;
        let entries = bytes.chunks_exact(E::SIZE).filter_map(E::decode).collect();
        self.cached = Some(entries);
        Ok(())
    }

    fn uncache(&mut self) {
        self.cached = None;
    }

    fn flush(&self) -> io::Result<()> {
        self.file.sync_all()
    }

    /// Removes the file; holders of a view keep reading the unlinked inode.
    fn delete(self) -> io::Result<()> {
        drop(self.file);
        remove_if_exists(&self.path)
    }
}

/// Entry `i` of an index file holding `len` entries, by a positional read.
fn read_entry<E: IndexEntry>(file: &File, len: usize, i: usize) -> io::Result<E> {
    if i >= len {
        return Err(out_of_bounds(i));
    }
    let mut buf = [0u8; MAX_ENTRY_SIZE];
    let bytes = &mut buf[..E::SIZE];
    file.read_exact_at(bytes, (i * E::SIZE) as u64)?;
    E::decode(bytes).ok_or_else(|| out_of_bounds(i))
}

/// Binary search over `len` entries: how many leading ones satisfy `pred` (true on a prefix).
fn partition_point<E>(
    len: usize,
    entry_at: impl Fn(usize) -> io::Result<E>,
    pred: impl Fn(&E) -> bool,
) -> io::Result<usize> {
    let (mut lo, mut hi) = (0, len);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if pred(&entry_at(mid)?) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    Ok(lo)
}

/// The last of `len` entries for which `pred` holds (true on a prefix).
fn floor<E>(len: usize, entry_at: impl Fn(usize) -> io::Result<E>, pred: impl Fn(&E) -> bool) -> io::Result<Option<E>> {
    match partition_point(len, &entry_at, pred)? {
        0 => Ok(None),
        n => entry_at(n - 1).map(Some),
    }
}

fn out_of_bounds(i: usize) -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!("index entry {i} is past the end of the index"),
    )
}

/// `.index`: maps offsets to file positions of batches in one segment.
#[derive(Debug)]
pub struct OffsetIndex {
    base_offset: i64,
    file: IndexFile<RawOffsetEntry>,
}

impl OffsetIndex {
    pub fn open(path: PathBuf, base_offset: i64, cache: bool) -> io::Result<OffsetIndex> {
        Ok(OffsetIndex {
            base_offset,
            file: IndexFile::open(path, cache)?,
        })
    }

    /// The last entry at or below `offset`, or the segment start when there is none: the batch
    /// holding `offset` starts at or after the returned position.
    pub fn lookup(&self, offset: i64) -> io::Result<OffsetPosition> {
        let found = self.file.floor(at_or_below(self.base_offset, offset))?;
        Ok(absolute_or_start(self.base_offset, found))
    }

    /// Where the batch holding `offset` is searched from, without touching the disk: the position
    /// when the entries are in memory (the active segment), otherwise a view that looks it up
    /// later with positional reads (see [`OffsetIndexView::lookup`]), outside the log's lock.
    pub fn start_for_read(&self, offset: i64) -> ReadStart {
        match &self.file.cached {
            Some(entries) => {
                let below = at_or_below(self.base_offset, offset);
                let found = entries
                    .partition_point(below)
                    .checked_sub(1)
                    .and_then(|i| entries.get(i));
                ReadStart::Position(u64::from(absolute_or_start(self.base_offset, found.copied()).position))
            }
            None => ReadStart::Lookup(OffsetIndexView {
                base_offset: self.base_offset,
                file: self.file.file.clone(),
                len: self.file.len,
            }),
        }
    }

    /// Adds an entry for the batch with base offset `offset` at `position`. An offset that does
    /// not fit a relative u32 is skipped (the index is sparse; a missing entry only lengthens a scan).
    pub fn append(&mut self, offset: i64, position: u32) -> io::Result<()> {
        let Ok(relative_offset) = u32::try_from(offset - self.base_offset) else {
            debug_assert!(false, "offset {offset} outside segment {}", self.base_offset);
            return Ok(());
        };
        if let Some(last) = self.file.last {
            debug_assert!(relative_offset > last.relative_offset && position > last.position);
        }
        self.file.append(RawOffsetEntry {
            relative_offset,
            position,
        })
    }

    pub fn last_entry(&self) -> Option<OffsetPosition> {
        self.file.last.map(|e| self.absolute(e))
    }

    /// Drops entries pointing at `position` or beyond (the log was truncated there).
    pub fn truncate_to_position(&mut self, position: u32) -> io::Result<()> {
        self.file.truncate_where(|e| e.position < position)
    }

    /// Kafka's sanity check: present if the log has data, whole entries, the last one inside the
    /// log file.
    pub fn is_sane(&self, log_size_bytes: u64) -> bool {
        self.file.is_sane(log_size_bytes) && self.file.last.is_none_or(|e| u64::from(e.position) < log_size_bytes)
    }

    pub fn reset(&mut self) -> io::Result<()> {
        self.file.truncate_to_len(0)
    }

    pub fn cache(&mut self) -> io::Result<()> {
        self.file.cache()
    }

    pub fn uncache(&mut self) {
        self.file.uncache()
    }

    pub fn flush(&self) -> io::Result<()> {
        self.file.flush()
    }

    pub fn delete(self) -> io::Result<()> {
        self.file.delete()
    }

    fn absolute(&self, e: RawOffsetEntry) -> OffsetPosition {
        absolute_or_start(self.base_offset, Some(e))
    }
}

/// Predicate of the entries at or below `offset` in an index whose base offset is `base_offset`.
fn at_or_below(base_offset: i64, offset: i64) -> impl Fn(&RawOffsetEntry) -> bool {
    let relative = offset.saturating_sub(base_offset);
    move |e| i64::from(e.relative_offset) <= relative
}

/// The entry made absolute, or the segment start when no entry was found.
fn absolute_or_start(base_offset: i64, found: Option<RawOffsetEntry>) -> OffsetPosition {
    found.map_or(
        OffsetPosition {
            offset: base_offset,
            position: 0,
        },
        |e| OffsetPosition {
            offset: base_offset + i64::from(e.relative_offset),
            position: e.position,
        },
    )
}

/// Where a planned read starts searching a segment for its offset (see
/// [`OffsetIndex::start_for_read`]).
#[derive(Debug, Clone)]
pub enum ReadStart {
    Position(u64),
    Lookup(OffsetIndexView),
}

/// A sealed segment's offset index as a read planned under the log's lock saw it: the file
/// (shared, so retention may delete it meanwhile) and how many entries it held.
#[derive(Debug, Clone)]
pub struct OffsetIndexView {
    base_offset: i64,
    file: Arc<File>,
    len: usize,
}

impl OffsetIndexView {
    /// [`OffsetIndex::lookup`] by positional reads of the shared file. An entry gone since the
    /// view was taken (the index was truncated) is an `UnexpectedEof` error.
    pub fn lookup(&self, offset: i64) -> io::Result<u64> {
        let entry_at = |i| read_entry::<RawOffsetEntry>(&self.file, self.len, i);
        let found = floor(self.len, entry_at, at_or_below(self.base_offset, offset))?;
        Ok(u64::from(absolute_or_start(self.base_offset, found).position))
    }
}

/// `.timeindex`: maps timestamps to offsets in one segment. Entries are added only when the
/// segment's max timestamp grows, so both columns increase.
#[derive(Debug)]
pub struct TimeIndex {
    base_offset: i64,
    file: IndexFile<RawTimeEntry>,
}

impl TimeIndex {
    pub fn open(path: PathBuf, base_offset: i64, cache: bool) -> io::Result<TimeIndex> {
        Ok(TimeIndex {
            base_offset,
            file: IndexFile::open(path, cache)?,
        })
    }

    /// The last entry with a timestamp strictly below `timestamp`. Every batch up to and including
    /// the one holding its offset is then older than `timestamp`, so a search can start there.
    pub fn lookup_before(&self, timestamp: i64) -> io::Result<Option<TimestampOffset>> {
        Ok(self.file.floor(|e| e.timestamp < timestamp)?.map(|e| self.absolute(e)))
    }

    /// Records that `timestamp` is the segment's max so far, reached at `offset`, if it grew.
    pub fn maybe_append(&mut self, timestamp: i64, offset: i64) -> io::Result<()> {
        if self.file.last.is_some_and(|last| timestamp <= last.timestamp) {
            return Ok(());
        }
        let Ok(relative_offset) = u32::try_from(offset - self.base_offset) else {
            debug_assert!(false, "offset {offset} outside segment {}", self.base_offset);
            return Ok(());
        };
        if let Some(last) = self.file.last {
            debug_assert!(relative_offset >= last.relative_offset);
        }
        self.file.append(RawTimeEntry {
            timestamp,
            relative_offset,
        })
    }

    pub fn last_entry(&self) -> Option<TimestampOffset> {
        self.file.last.map(|e| self.absolute(e))
    }

    /// Drops entries for `offset` and beyond.
    pub fn truncate_to_offset(&mut self, offset: i64) -> io::Result<()> {
        let relative = offset - self.base_offset;
        self.file.truncate_where(|e| i64::from(e.relative_offset) < relative)
    }

    /// Present if the log has data and made of whole entries. A sealed segment with data always
    /// has at least the entry written when it was rolled.
    pub fn is_sane(&self, log_size_bytes: u64) -> bool {
        self.file.is_sane(log_size_bytes)
    }

    pub fn reset(&mut self) -> io::Result<()> {
        self.file.truncate_to_len(0)
    }

    pub fn cache(&mut self) -> io::Result<()> {
        self.file.cache()
    }

    pub fn uncache(&mut self) {
        self.file.uncache()
    }

    pub fn flush(&self) -> io::Result<()> {
        self.file.flush()
    }

    pub fn delete(self) -> io::Result<()> {
        self.file.delete()
    }

    fn absolute(&self, e: RawTimeEntry) -> TimestampOffset {
        TimestampOffset {
            timestamp: e.timestamp,
            offset: self.base_offset + i64::from(e.relative_offset),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_index_lookup_returns_floor_entry_in_memory_and_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000100.index");
        let mut index = OffsetIndex::open(path.clone(), 100, true).unwrap();
        for (offset, position) in [(110, 4_000), (125, 8_200), (140, 12_500)] {
            index.append(offset, position).unwrap();
        }
        let reopened = OffsetIndex::open(path, 100, false).unwrap();
        for index in [&index, &reopened] {
            assert_eq!(
                index.lookup(99).unwrap(),
                OffsetPosition {
                    offset: 100,
                    position: 0
                }
            );
            assert_eq!(
                index.lookup(109).unwrap(),
                OffsetPosition {
                    offset: 100,
                    position: 0
                }
            );
            assert_eq!(
                index.lookup(110).unwrap(),
                OffsetPosition {
                    offset: 110,
                    position: 4_000
                }
            );
            assert_eq!(
                index.lookup(139).unwrap(),
                OffsetPosition {
                    offset: 125,
                    position: 8_200
                }
            );
            assert_eq!(
                index.lookup(i64::MAX).unwrap(),
                OffsetPosition {
                    offset: 140,
                    position: 12_500
                }
            );
        }
        assert_eq!(
            reopened.last_entry(),
            Some(OffsetPosition {
                offset: 140,
                position: 12_500
            })
        );
    }

    #[test]
    fn offset_index_truncation_drops_entries_at_and_after_the_position() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000000.index");
        let mut index = OffsetIndex::open(path.clone(), 0, true).unwrap();
        index.append(10, 100).unwrap();
        index.append(20, 200).unwrap();
        index.truncate_to_position(200).unwrap();
        assert_eq!(
            index.last_entry(),
            Some(OffsetPosition {
                offset: 10,
                position: 100
            })
        );
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 8);
    }

    #[test]
    fn torn_index_file_is_reported_not_sane() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000000.index");
        std::fs::write(&path, [0u8; 11]).unwrap();
        let index = OffsetIndex::open(path, 0, true).unwrap();
        assert!(!index.is_sane(1_000));
    }

    #[test]
    fn time_index_appends_only_growing_timestamps_and_looks_up_strictly_before() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000050.timeindex");
        let mut index = TimeIndex::open(path, 50, false).unwrap();
        index.maybe_append(1_000, 55).unwrap();
        index.maybe_append(1_000, 60).unwrap();
        index.maybe_append(900, 61).unwrap();
        index.maybe_append(2_000, 70).unwrap();
        assert_eq!(index.lookup_before(1_000).unwrap(), None);
        assert_eq!(
            index.lookup_before(1_001).unwrap(),
            Some(TimestampOffset {
                timestamp: 1_000,
                offset: 55
            })
        );
        assert_eq!(
            index.lookup_before(5_000).unwrap(),
            Some(TimestampOffset {
                timestamp: 2_000,
                offset: 70
            })
        );
        index.truncate_to_offset(70).unwrap();
        assert_eq!(
            index.last_entry(),
            Some(TimestampOffset {
                timestamp: 1_000,
                offset: 55
            })
        );
    }
}

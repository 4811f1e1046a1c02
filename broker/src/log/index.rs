//! Kafka's sparse segment indexes: `OffsetIndex` (`.index`) and `TimeIndex` (`.timeindex`).
//!
//! Both are arrays of fixed-size big-endian entries, offsets stored relative to the segment's base
//! offset, in Kafka's on-disk layout. An entry is added every `index.interval.bytes` appended, so a
//! lookup lands within a few KiB of its target and a short scan of batch headers finishes the job.
//!
//! Only the active segment keeps its entries in memory (the hot tail that consumers read), and
//! only while it is written to: a replica with no append for one of the writeback task's idle
//! passes writes them out and drops the copy, and its next append reads them back. Entries
//! are added in memory only: they reach the file in bulk, one positional write for all entries
//! not yet written, when the segment is sealed, when the log is flushed or written back
//! (background writeback, each second, for a segment that grew by a MiB), and at a clean close;
//! never from an append, so the produce path writes no index file. Recovery, which rebuilds a
//! segment's indexes, writes them every [`MAX_UNWRITTEN_INDEX_ENTRIES`]. The file on disk
//! may therefore hold fewer entries than the log has batches for: a sparse index that is short
//! only makes a scan start earlier, never wrong, and after an unclean stop the active segment's
//! indexes are rebuilt from the log anyway.
//!
//! No index keeps its file open: the file is opened for a write, a truncation, or a lookup of a
//! segment whose entries are not in memory (a binary search of positional reads, which the page
//! cache serves), and closed after it, so an idle partition holds no descriptor for its indexes.
//! The paths are the segment's to give ([`crate::log::segment`] builds them from the partition
//! directory); nothing here stores one.

use std::fs::{File, OpenOptions};
use std::io;
use std::num::NonZeroU64;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

use crate::fs::remove_if_exists;

/// Entries a recovery rebuilds in memory before it writes them to the index file: bounds the
/// size of one bulk write (a few KiB of entries, about a megabyte of log at the default
/// `index.interval.bytes`).
pub const MAX_UNWRITTEN_INDEX_ENTRIES: usize = 256;

/// Bulk writes are encoded through a stack buffer of this size, one `pwrite` per buffer.
const WRITE_BUFFER_BYTES: usize = 4096;

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

/// The bookkeeping shared by both indexes: how many entries the index holds, how many of them
/// are in its file, and, while the segment is active, all of them in memory.
#[derive(Debug)]
struct IndexFile<E> {
    /// Entries in the index: the first `written` are in the file, the rest only in `cached`.
    /// 32 bits each, as every segment of every replica keeps two indexes: an entry takes at least
    /// one batch, so a segment (positions are 32-bit) holds fewer than 2^32 of them.
    len: u32,
    written: u32,
    /// The file changed since its last fsync.
    unsynced: bool,
    /// False when the file length is not a whole number of entries (torn write): rebuild it.
    whole: bool,
    /// The file did not exist when opened: rebuild it if the segment has data.
    was_missing: bool,
    /// The file's inode, once known: a lookup by path outside the log's lock checks that it
    /// still reads the file this index describes (see [`OffsetIndexView::lookup`]).
    file_id: Option<NonZeroU64>,
    last: Option<E>,
    /// All entries, kept while the segment is active and written to; the only place unwritten
    /// ones live.
    cached: Option<Vec<E>>,
}

impl<E: IndexEntry> IndexFile<E> {
    /// An empty index whose file is created (or emptied) now; it starts in memory.
    fn create(path: &Path) -> io::Result<Self> {
        let file = File::create(path)?;
        let file_id = NonZeroU64::new(file.metadata()?.ino());
        Ok(IndexFile {
            len: 0,
            written: 0,
            unsynced: false,
            whole: true,
            was_missing: false,
            file_id,
            last: None,
            cached: Some(Vec::new()),
        })
    }

    /// Reads the index's length and last entry (and, with `cache`, every entry) and closes the
    /// file. A missing file is an empty index that [`IndexFile::is_sane`] reports.
    fn open(path: &Path, cache: bool) -> io::Result<Self> {
        let file = match File::open(path) {
            Ok(file) => Some(file),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        let (file_len, file_id) = match &file {
            Some(file) => {
                let meta = file.metadata()?;
                (meta.len(), NonZeroU64::new(meta.ino()))
            }
            None => (0, None),
        };
        let len = u32::try_from(file_len / E::SIZE as u64)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "index file too large"))?;
        let mut index = IndexFile {
            len,
            written: len,
            unsynced: false,
            whole: file_len % E::SIZE as u64 == 0,
            was_missing: file.is_none(),
            file_id,
            last: None,
            cached: None,
        };
        if let Some(file) = &file {
            if cache {
                index.cached = Some(read_all(file, len as usize)?);
            }
            index.last = match len {
                0 => None,
                n => Some(index.entry_in(file, n as usize - 1)?),
            };
        } else if cache {
            index.cached = Some(Vec::new());
        }
        Ok(index)
    }

    /// Entry `i`, from memory when cached, else by a positional read of `file`.
    fn entry_in(&self, file: &File, i: usize) -> io::Result<E> {
        match &self.cached {
            Some(cached) => cached.get(i).copied().ok_or_else(|| out_of_bounds(i)),
            None => read_entry(file, self.count(), i),
        }
    }

    /// Number of leading entries for which `pred` holds (`pred` must hold for a prefix).
    fn partition_point(&self, path: &Path, pred: impl Fn(&E) -> bool) -> io::Result<usize> {
        match &self.cached {
            Some(cached) => Ok(cached.partition_point(pred)),
            None if self.len == 0 => Ok(0),
            None => {
                let file = File::open(path)?;
                partition_point(self.count(), |i| read_entry(&file, self.count(), i), pred)
            }
        }
    }

    /// The last entry for which `pred` holds.
    fn floor(&self, path: &Path, pred: impl Fn(&E) -> bool) -> io::Result<Option<E>> {
        match &self.cached {
            Some(cached) => Ok(cached
                .partition_point(pred)
                .checked_sub(1)
                .and_then(|i| cached.get(i))
                .copied()),
            None if self.len == 0 => Ok(None),
            None => {
                let file = File::open(path)?;
                floor(self.count(), |i| read_entry(&file, self.count(), i), pred)
            }
        }
    }

    /// Adds an entry in memory; [`IndexFile::write_pending`] takes it to the file. Only an index
    /// in memory takes entries: the active segment's, or one being rebuilt (which starts from
    /// [`IndexFile::truncate_to_len`]`(0)`, in memory).
    fn append(&mut self, entry: E) {
        let Some(cached) = &mut self.cached else {
            debug_assert!(false, "an entry appended to an index that is not in memory");
            return; // the index is sparse: a missing entry only lengthens a scan
        };
        cached.push(entry);
        self.len += 1;
        self.last = Some(entry);
    }

    /// Entries in the index.
    fn count(&self) -> usize {
        self.len as usize
    }

    fn unwritten(&self) -> usize {
        (self.len - self.written) as usize
    }

    /// Writes the entries not yet in the file, in bulk, and with `sync` fsyncs the file if it
    /// changed since the last fsync. Opens the file only when there is something to do.
    fn write_pending(&mut self, path: &Path, sync: bool) -> io::Result<()> {
        let pending = self.unwritten();
        if pending == 0 && !(sync && self.unsynced) {
            return Ok(());
        }
        let file = OpenOptions::new().write(true).create(true).truncate(false).open(path)?;
        if self.file_id.is_none() {
            self.file_id = NonZeroU64::new(file.metadata()?.ino());
        }
        if pending > 0 {
            let entries = self
                .cached
                .as_deref()
                .and_then(|cached| cached.get(self.written as usize..self.count()))
                .ok_or_else(|| out_of_bounds(self.count()))?;
            let mut buf = [0u8; WRITE_BUFFER_BYTES];
            let mut position = self.written as u64 * E::SIZE as u64;
            for chunk in entries.chunks(WRITE_BUFFER_BYTES / E::SIZE) {
                let bytes = chunk.len() * E::SIZE;
                for (slot, entry) in buf[..bytes].chunks_exact_mut(E::SIZE).zip(chunk) {
                    slot.copy_from_slice(&entry.encode()[..E::SIZE]);
                }
                file.write_all_at(&buf[..bytes], position)?;
                position += bytes as u64;
            }
            self.written = self.len;
            self.unsynced = true;
        }
        if sync && self.unsynced {
            file.sync_all()?;
            self.unsynced = false;
        }
        Ok(())
    }

    /// Keeps only the entries for which `keep` holds (a prefix).
    fn truncate_where(&mut self, path: &Path, keep: impl Fn(&E) -> bool) -> io::Result<()> {
        let n = self.partition_point(path, keep)?;
        self.truncate_to_len(path, n)
    }

    /// Keeps the first `n` entries, written or not. The file is touched only when written
    /// entries go or it is not a whole, present index of what is written; truncating to 0 leaves
    /// the index in memory, ready to be rebuilt.
    fn truncate_to_len(&mut self, path: &Path, n: usize) -> io::Result<()> {
        let n = n.min(self.count());
        if n < self.written as usize || !self.whole || self.was_missing {
            let file = OpenOptions::new().write(true).create(true).truncate(false).open(path)?;
            file.set_len((n * E::SIZE) as u64)?;
            self.file_id = NonZeroU64::new(file.metadata()?.ino());
            self.written = self.written.min(n as u32); // n <= len, a u32
            self.unsynced = true;
        }
        if n == 0 && self.cached.is_none() {
            self.cached = Some(Vec::new());
        }
        if let Some(cached) = &mut self.cached {
            cached.truncate(n);
        }
        self.len = n as u32; // n <= len, a u32
        self.whole = true;
        self.was_missing = false;
        self.last = match (n, &self.cached) {
            (0, _) => None,
            (n, Some(cached)) => cached.get(n - 1).copied(),
            (n, None) => Some(read_entry(&File::open(path)?, n, n - 1)?),
        };
        Ok(())
    }

    fn is_sane(&self, log_size_bytes: u64) -> bool {
        self.whole && !(self.was_missing && log_size_bytes > 0)
    }

    fn cache(&mut self, path: &Path) -> io::Result<()> {
        if self.cached.is_some() {
            return Ok(());
        }
        self.cached = Some(match self.len {
            0 => Vec::new(),
            len => read_all(&File::open(path)?, len as usize)?,
        });
        Ok(())
    }

    /// Frees the in-memory copy; entries not yet written keep it (write them first).
    fn uncache(&mut self) {
        debug_assert_eq!(self.unwritten(), 0, "uncaching an index with unwritten entries");
        if self.unwritten() == 0 {
            self.cached = None;
        }
    }

    fn view(&self, base_offset: i64) -> OffsetIndexView {
        OffsetIndexView {
            base_offset,
            len: self.written as usize,
            file_id: self.file_id.map(NonZeroU64::get),
        }
    }
}

/// The first `len` entries of an index file (its length was checked by the caller).
fn read_all<E: IndexEntry>(file: &File, len: usize) -> io::Result<Vec<E>> {
    let mut bytes = vec![0u8; len * E::SIZE];
    file.read_exact_at(&mut bytes, 0)?;
    Ok(bytes.chunks_exact(E::SIZE).filter_map(E::decode).collect())
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

/// `.index`: maps offsets to file positions of batches in one segment. Methods that may need
/// the file take its path.
#[derive(Debug)]
pub struct OffsetIndex {
    base_offset: i64,
    file: IndexFile<RawOffsetEntry>,
}

impl OffsetIndex {
    /// A new, empty index (its file created or emptied), in memory.
    pub fn create(path: &Path, base_offset: i64) -> io::Result<OffsetIndex> {
        Ok(OffsetIndex {
            base_offset,
            file: IndexFile::create(path)?,
        })
    }

    /// An existing index; `cache` keeps its entries in memory (the active segment).
    pub fn open(path: &Path, base_offset: i64, cache: bool) -> io::Result<OffsetIndex> {
        Ok(OffsetIndex {
            base_offset,
            file: IndexFile::open(path, cache)?,
        })
    }

    /// The last entry at or below `offset`, or the segment start when there is none: the batch
    /// holding `offset` starts at or after the returned position.
    pub fn lookup(&self, path: &Path, offset: i64) -> io::Result<OffsetPosition> {
        let found = self.file.floor(path, at_or_below(self.base_offset, offset))?;
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
            // At or below the base offset the segment start is the answer: no file needed.
            None if offset <= self.base_offset || self.file.len == 0 => ReadStart::Position(0),
            None => ReadStart::Lookup(self.file.view(self.base_offset)),
        }
    }

    /// Adds an entry for the batch with base offset `offset` at `position`, in memory. An offset
    /// that does not fit a relative u32 is skipped (the index is sparse; a missing entry only
    /// lengthens a scan).
    pub fn append(&mut self, offset: i64, position: u32) {
        let Ok(relative_offset) = u32::try_from(offset - self.base_offset) else {
            debug_assert!(false, "offset {offset} outside segment {}", self.base_offset);
            return;
        };
        if let Some(last) = self.file.last {
            debug_assert!(relative_offset > last.relative_offset && position > last.position);
        }
        self.file.append(RawOffsetEntry {
            relative_offset,
            position,
        });
    }

    /// Entries added but not yet in the file.
    pub fn unwritten_entries(&self) -> usize {
        self.file.unwritten()
    }

    /// Writes the entries not yet in the file, in bulk; `sync` then fsyncs it if it changed.
    pub fn write_pending(&mut self, path: &Path, sync: bool) -> io::Result<()> {
        self.file.write_pending(path, sync)
    }

    pub fn last_entry(&self) -> Option<OffsetPosition> {
        self.file.last.map(|e| self.absolute(e))
    }

    /// Drops entries pointing at `position` or beyond (the log was truncated there), written or not.
    pub fn truncate_to_position(&mut self, path: &Path, position: u32) -> io::Result<()> {
        self.file.truncate_where(path, |e| e.position < position)
    }

    /// Kafka's sanity check: present if the log has data, whole entries, the last one inside the
    /// log file.
    pub fn is_sane(&self, log_size_bytes: u64) -> bool {
        self.file.is_sane(log_size_bytes) && self.file.last.is_none_or(|e| u64::from(e.position) < log_size_bytes)
    }

    /// Drops every entry, leaving an empty index in memory (to be rebuilt).
    pub fn reset(&mut self, path: &Path) -> io::Result<()> {
        self.file.truncate_to_len(path, 0)
    }

    pub fn cache(&mut self, path: &Path) -> io::Result<()> {
        self.file.cache(path)
    }

    /// Whether the entries are held in memory: an active segment's are, unless an idle pass
    /// released them.
    pub fn is_cached(&self) -> bool {
        self.file.cached.is_some()
    }

    pub fn uncache(&mut self) {
        self.file.uncache()
    }

    pub fn delete(path: &Path) -> io::Result<()> {
        remove_if_exists(path)
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

/// A sealed segment's offset index as a read planned under the log's lock saw it: how many
/// entries its file held and which file (inode) it was. The file is opened only when the read
/// looks the offset up, after the lock is released.
#[derive(Debug, Clone)]
pub struct OffsetIndexView {
    base_offset: i64,
    len: usize,
    file_id: Option<u64>,
}

impl OffsetIndexView {
    /// [`OffsetIndex::lookup`] by positional reads of the file at `path`. Retention or the
    /// cleaner may have deleted or replaced that file since the read was planned: a file that is
    /// gone, or is not the one the view saw, answers with the segment start (always a correct
    /// place to search from). An entry gone since (the index was truncated) is an
    /// `UnexpectedEof` error. The caller still checks that a batch with the entry's offset starts
    /// at its position, since a replaced file may have reused the inode number.
    pub fn lookup(&self, path: &Path, offset: i64) -> io::Result<OffsetPosition> {
        let start = absolute_or_start(self.base_offset, None);
        if self.len == 0 {
            return Ok(start);
        }
        let file = match File::open(path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(start),
            Err(e) => return Err(e),
        };
        if self.file_id != Some(file.metadata()?.ino()) {
            return Ok(start);
        }
        let entry_at = |i| read_entry::<RawOffsetEntry>(&file, self.len, i);
        let found = floor(self.len, entry_at, at_or_below(self.base_offset, offset))?;
        Ok(absolute_or_start(self.base_offset, found))
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
    /// A new, empty index (its file created or emptied), in memory.
    pub fn create(path: &Path, base_offset: i64) -> io::Result<TimeIndex> {
        Ok(TimeIndex {
            base_offset,
            file: IndexFile::create(path)?,
        })
    }

    /// An existing index; `cache` keeps its entries in memory (the active segment).
    pub fn open(path: &Path, base_offset: i64, cache: bool) -> io::Result<TimeIndex> {
        Ok(TimeIndex {
            base_offset,
            file: IndexFile::open(path, cache)?,
        })
    }

    /// The last entry with a timestamp strictly below `timestamp`. Every batch up to and including
    /// the one holding its offset is then older than `timestamp`, so a search can start there.
    pub fn lookup_before(&self, path: &Path, timestamp: i64) -> io::Result<Option<TimestampOffset>> {
        Ok(self
            .file
            .floor(path, |e| e.timestamp < timestamp)?
            .map(|e| self.absolute(e)))
    }

    /// Records that `timestamp` is the segment's max so far, reached at `offset`, if it grew
    /// (in memory; see [`TimeIndex::write_pending`]).
    pub fn maybe_append(&mut self, timestamp: i64, offset: i64) {
        if self.file.last.is_some_and(|last| timestamp <= last.timestamp) {
            return;
        }
        let Ok(relative_offset) = u32::try_from(offset - self.base_offset) else {
            debug_assert!(false, "offset {offset} outside segment {}", self.base_offset);
            return;
        };
        if let Some(last) = self.file.last {
            debug_assert!(relative_offset >= last.relative_offset);
        }
        self.file.append(RawTimeEntry {
            timestamp,
            relative_offset,
        });
    }

    /// Entries added but not yet in the file.
    pub fn unwritten_entries(&self) -> usize {
        self.file.unwritten()
    }

    /// Writes the entries not yet in the file, in bulk; `sync` then fsyncs it if it changed.
    pub fn write_pending(&mut self, path: &Path, sync: bool) -> io::Result<()> {
        self.file.write_pending(path, sync)
    }

    pub fn last_entry(&self) -> Option<TimestampOffset> {
        self.file.last.map(|e| self.absolute(e))
    }

    /// Drops entries for `offset` and beyond, written or not.
    pub fn truncate_to_offset(&mut self, path: &Path, offset: i64) -> io::Result<()> {
        let relative = offset - self.base_offset;
        self.file
            .truncate_where(path, |e| i64::from(e.relative_offset) < relative)
    }

    /// Present if the log has data and made of whole entries. A sealed segment with data always
    /// has at least the entry written when it was rolled.
    pub fn is_sane(&self, log_size_bytes: u64) -> bool {
        self.file.is_sane(log_size_bytes)
    }

    /// Drops every entry, leaving an empty index in memory (to be rebuilt).
    pub fn reset(&mut self, path: &Path) -> io::Result<()> {
        self.file.truncate_to_len(path, 0)
    }

    pub fn cache(&mut self, path: &Path) -> io::Result<()> {
        self.file.cache(path)
    }

    /// Whether the entries are held in memory: an active segment's are, unless an idle pass
    /// released them.
    pub fn is_cached(&self) -> bool {
        self.file.cached.is_some()
    }

    pub fn uncache(&mut self) {
        self.file.uncache()
    }

    pub fn delete(path: &Path) -> io::Result<()> {
        remove_if_exists(path)
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

    fn at(offset: i64, position: u32) -> OffsetPosition {
        OffsetPosition { offset, position }
    }

    fn file_len(path: &Path) -> u64 {
        std::fs::metadata(path).unwrap().len()
    }

    #[test]
    fn offset_index_lookup_returns_floor_entry_in_memory_and_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000100.index");
        let mut index = OffsetIndex::create(&path, 100).unwrap();
        for (offset, position) in [(110, 4_000), (125, 8_200), (140, 12_500)] {
            index.append(offset, position);
        }
        index.write_pending(&path, true).unwrap();
        let reopened = OffsetIndex::open(&path, 100, false).unwrap();
        for index in [&index, &reopened] {
            assert_eq!(index.lookup(&path, 99).unwrap(), at(100, 0));
            assert_eq!(index.lookup(&path, 109).unwrap(), at(100, 0));
            assert_eq!(index.lookup(&path, 110).unwrap(), at(110, 4_000));
            assert_eq!(index.lookup(&path, 139).unwrap(), at(125, 8_200));
            assert_eq!(index.lookup(&path, i64::MAX).unwrap(), at(140, 12_500));
        }
        assert_eq!(reopened.last_entry(), Some(at(140, 12_500)));
    }

    #[test]
    fn appended_entries_stay_in_memory_until_written_in_one_bulk_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000000.index");
        let mut index = OffsetIndex::create(&path, 0).unwrap();
        for i in 1..=10u32 {
            index.append(i64::from(i) * 10, i * 1_000);
        }
        assert_eq!(file_len(&path), 0, "nothing written before a write is asked for");
        assert_eq!(index.unwritten_entries(), 10);
        // Lookups see the unwritten entries.
        assert_eq!(index.lookup(&path, 55).unwrap(), at(50, 5_000));
        index.write_pending(&path, false).unwrap();
        assert_eq!(index.unwritten_entries(), 0);
        assert_eq!(file_len(&path), 80);
        index.append(110, 11_000);
        index.write_pending(&path, true).unwrap();
        assert_eq!(file_len(&path), 88, "the next write appends after what is written");
        let reopened = OffsetIndex::open(&path, 0, true).unwrap();
        assert_eq!(reopened.lookup(&path, 55).unwrap(), at(50, 5_000));
        assert_eq!(reopened.last_entry(), Some(at(110, 11_000)));
    }

    #[test]
    fn truncation_drops_written_and_unwritten_entries() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000000.index");
        let mut index = OffsetIndex::create(&path, 0).unwrap();
        index.append(10, 100);
        index.append(20, 200);
        index.write_pending(&path, false).unwrap();
        index.append(30, 300);
        index.append(40, 400);
        // Only unwritten entries go: the file is not touched.
        index.truncate_to_position(&path, 400).unwrap();
        assert_eq!(index.last_entry(), Some(at(30, 300)));
        assert_eq!(index.unwritten_entries(), 1);
        assert_eq!(file_len(&path), 16);
        // Written ones go too: the file shrinks and the unwritten entry is gone.
        index.truncate_to_position(&path, 200).unwrap();
        assert_eq!(index.last_entry(), Some(at(10, 100)));
        assert_eq!(index.unwritten_entries(), 0);
        assert_eq!(file_len(&path), 8);
        assert_eq!(index.lookup(&path, 35).unwrap(), at(10, 100));
        index.append(15, 150);
        index.write_pending(&path, true).unwrap();
        let reopened = OffsetIndex::open(&path, 0, false).unwrap();
        assert_eq!(reopened.last_entry(), Some(at(15, 150)));
        assert_eq!(file_len(&path), 16);
    }

    #[test]
    fn torn_index_file_is_reported_not_sane() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000000.index");
        std::fs::write(&path, [0u8; 11]).unwrap();
        let index = OffsetIndex::open(&path, 0, true).unwrap();
        assert!(!index.is_sane(1_000));
    }

    #[test]
    fn missing_index_file_is_not_sane_under_data_and_created_by_a_reset() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000000.index");
        let mut index = OffsetIndex::open(&path, 0, true).unwrap();
        assert!(!path.exists(), "opening creates nothing");
        assert!(index.is_sane(0));
        assert!(!index.is_sane(1_000));
        index.reset(&path).unwrap();
        assert!(path.exists());
        assert!(index.is_sane(1_000));
    }

    #[test]
    fn view_of_a_sealed_index_looks_up_by_path_and_falls_back_to_the_start_when_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000000.index");
        let mut index = OffsetIndex::create(&path, 0).unwrap();
        index.append(10, 100);
        index.append(20, 200);
        index.write_pending(&path, true).unwrap();
        index.uncache();
        let ReadStart::Lookup(view) = index.start_for_read(25) else {
            panic!("a sealed index is looked up outside the lock");
        };
        assert!(matches!(index.start_for_read(0), ReadStart::Position(0)));
        assert_eq!(view.lookup(&path, 25).unwrap(), at(20, 200));
        // The cleaner swaps in another file under the same name: its entries are not used.
        let replacement = dir.path().join("replacement");
        let mut other = OffsetIndex::create(&replacement, 0).unwrap();
        other.append(20, 999);
        other.write_pending(&replacement, true).unwrap();
        std::fs::rename(&replacement, &path).unwrap();
        assert_eq!(view.lookup(&path, 25).unwrap(), at(0, 0));
        // Retention deletes it: the segment start again.
        std::fs::remove_file(&path).unwrap();
        assert_eq!(view.lookup(&path, 25).unwrap(), at(0, 0));
    }

    #[test]
    fn time_index_appends_only_growing_timestamps_and_looks_up_strictly_before() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000050.timeindex");
        let mut index = TimeIndex::create(&path, 50).unwrap();
        index.maybe_append(1_000, 55);
        index.maybe_append(1_000, 60);
        index.maybe_append(900, 61);
        index.maybe_append(2_000, 70);
        assert_eq!(index.unwritten_entries(), 2);
        let ts = |timestamp, offset| Some(TimestampOffset { timestamp, offset });
        for written in [false, true] {
            if written {
                index.write_pending(&path, true).unwrap();
                index.uncache();
                assert_eq!(file_len(&path), 24);
            }
            assert_eq!(index.lookup_before(&path, 1_000).unwrap(), None);
            assert_eq!(index.lookup_before(&path, 1_001).unwrap(), ts(1_000, 55));
            assert_eq!(index.lookup_before(&path, 5_000).unwrap(), ts(2_000, 70));
        }
        index.truncate_to_offset(&path, 70).unwrap();
        assert_eq!(index.last_entry(), ts(1_000, 55));
        assert_eq!(file_len(&path), 12);
    }
}

//! `LogSegment`: one `<base_offset>.log` file of record batches stored as received, with its
//! `.index` and `.timeindex`.
//!
//! A segment never decodes records: it reads 61-byte batch headers to find positions, and crash
//! recovery streams each batch through CRC32C without holding it in memory.
//!
//! A segment's `.log` is opened through the node's [`FileCache`], which closes it while it is
//! not used and more files are open than the cache allows; its indexes open their files only to
//! write, truncate or (sealed) look up, and its paths are built when needed from the partition
//! directory it shares with the log ([`SegmentFiles`]).

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::UNIX_EPOCH;

use sluice_protocol::batch::{
    BatchHeader, BatchIter, BATCH_HEADER_LEN, CRC_COVERED_FROM, MIN_BATCH_LENGTH, NO_TIMESTAMP,
};

use super::file_cache::{CachedFile, FileCache};
use super::index::{OffsetIndex, ReadStart, TimeIndex, TimestampOffset, MAX_UNWRITTEN_INDEX_ENTRIES};
use super::LogError;
use crate::fs::remove_if_exists;

/// Header scans read this much at a time: several small batches per syscall.
const SCAN_BUFFER_BYTES: usize = 8 * 1024;
/// Recovery reads the segment sequentially through a buffer this large.
const RECOVERY_BUFFER_BYTES: usize = 1024 * 1024;

pub(super) const LOG_FILE_SUFFIX: &str = ".log";
pub(super) const INDEX_FILE_SUFFIX: &str = ".index";
pub(super) const TIME_INDEX_FILE_SUFFIX: &str = ".timeindex";
/// Suffix of a cleaned segment's files while they are written (deleted if found on open).
pub const CLEANED_FILE_SUFFIX: &str = ".cleaned";
/// Suffix of a cleaned segment's files while they replace the old ones (completed on open).
pub const SWAP_FILE_SUFFIX: &str = ".swap";
/// What follows `.log` in the name of an active segment's file while the segment before it
/// still waits for its fsync: `<base>.log.pending-<bytes>`, where `<bytes>` is the size that
/// segment was sealed at. A segment file under its final name therefore means every segment
/// before it is durable; an open that finds a pending name checks the segment before it
/// against `<bytes>` (see [`LogSegment::create_after_unsynced`]).
pub(super) const PENDING_LOG_INFIX: &str = ".pending-";

/// Kafka's file name for a segment: the base offset zero-padded to 20 digits.
pub(super) fn segment_file_name(base_offset: i64, suffix: &str) -> String {
    format!("{base_offset:020}{suffix}")
}

/// Names a segment's three files without storing them: the partition directory (one allocation
/// shared by the log and all its segments), the base offset, and the extra suffix of a segment
/// the cleaner is writing (`.cleaned`, else empty). Displays as the `.log` file's path.
#[derive(Debug, Clone)]
pub(super) struct SegmentFiles {
    dir: Arc<Path>,
    base_offset: i64,
    suffix: &'static str,
}

impl SegmentFiles {
    fn new(dir: &Arc<Path>, base_offset: i64, suffix: &'static str) -> SegmentFiles {
        SegmentFiles {
            dir: dir.clone(),
            base_offset,
            suffix,
        }
    }

    fn name(&self, kind: &str) -> String {
        segment_file_name(self.base_offset, kind) + self.suffix
    }

    fn path(&self, kind: &str) -> PathBuf {
        self.dir.join(self.name(kind))
    }

    /// The `.log` file's name while the previous segment's seal is in flight.
    fn pending_log_name(&self, predecessor_bytes: u64) -> String {
        format!("{}{PENDING_LOG_INFIX}{predecessor_bytes}", self.name(LOG_FILE_SUFFIX))
    }

    pub fn index_path(&self) -> PathBuf {
        self.path(INDEX_FILE_SUFFIX)
    }

    pub fn time_index_path(&self) -> PathBuf {
        self.path(TIME_INDEX_FILE_SUFFIX)
    }
}

impl fmt::Display for SegmentFiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}{}",
            self.dir.display(),
            segment_file_name(self.base_offset, LOG_FILE_SUFFIX),
            self.suffix
        )
    }
}

/// What crash recovery of a segment found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveryOutcome {
    /// Offset after the last valid batch: the segment's next offset.
    pub next_offset: i64,
    pub truncated_bytes: u64,
    /// Why the scan stopped before the end of the file, when it did.
    pub reason: Option<String>,
}

#[derive(Debug)]
pub struct LogSegment {
    files: SegmentFiles,
    /// Through the node's file cache. A [`SegmentReader`] holds a clone: a fetch reads through
    /// it after the log's lock is released, and on Linux an open file keeps working after
    /// retention unlinks it. Retired when the segment is dropped (see [`CachedFile::retire`]).
    log: CachedFile,
    size_bytes: u64,
    indexes: SegmentIndexes,
    /// `maxTimestamp` of the first batch: Kafka measures `segment.ms` from it.
    rolling_base_timestamp: Option<i64>,
    /// Broker clock when the segment was created or opened, for segments without timestamps.
    created_ms: i64,
    /// Set while the segment before this one waits for its fsync: the size it was sealed at,
    /// which this segment's `.log` name carries until [`LogSegment::mark_predecessor_synced`].
    unsynced_predecessor_bytes: Option<u64>,
}

/// What sealing a segment must still fsync, outside the partition's lock: its `.log`, its
/// two index files (every entry already written to them) and its aborted-transaction index,
/// if it has one (a sealed segment's aborts are not rescanned after a crash).
#[derive(Debug)]
pub struct SealFiles {
    log: Arc<File>,
    index: PathBuf,
    time_index: PathBuf,
    txn_index: PathBuf,
}

impl SealFiles {
    pub fn sync(&self) -> io::Result<()> {
        self.log.sync_all()?;
        for path in [&self.index, &self.time_index, &self.txn_index] {
            sync_if_exists(path)?;
        }
        Ok(())
    }
}

/// fsyncs `path`; a file deleted meanwhile (retention, truncation) or never written (a
/// segment without aborts) has nothing to make durable.
fn sync_if_exists(path: &Path) -> io::Result<()> {
    match File::open(path) {
        Ok(file) => file.sync_all(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// The per-batch bookkeeping shared by appends and recovery (Kafka's `LogSegment.append`).
#[derive(Debug)]
struct SegmentIndexes {
    offset_index: OffsetIndex,
    time_index: TimeIndex,
    /// Largest batch max timestamp so far, with the last offset of the first batch reaching it.
    max_timestamp: Option<TimestampOffset>,
    bytes_since_last_index_entry: u64,
}

impl SegmentIndexes {
    /// Accounts for a batch appended at `position`, adding index entries every
    /// `index_interval_bytes`.
    /// The entries go to memory; see [`SegmentIndexes::write_if_due`].
    fn on_batch(&mut self, header: &BatchHeader, position: u64, index_interval_bytes: u32) {
        self.observe(header);
        if self.bytes_since_last_index_entry > u64::from(index_interval_bytes) {
            if let Ok(position) = u32::try_from(position) {
                self.offset_index.append(header.base_offset, position);
            }
            if let Some(max) = self.max_timestamp {
                self.time_index.maybe_append(max.timestamp, max.offset);
            }
            self.bytes_since_last_index_entry = 0;
        }
        self.bytes_since_last_index_entry += header.total_len() as u64;
    }

    /// Writes both indexes' unwritten entries once either has [`MAX_UNWRITTEN_INDEX_ENTRIES`]
    /// (recovery, which rebuilds a whole segment's indexes at once).
    fn write_if_due(&mut self, files: &SegmentFiles) -> io::Result<()> {
        let most = self
            .offset_index
            .unwritten_entries()
            .max(self.time_index.unwritten_entries());
        if most >= MAX_UNWRITTEN_INDEX_ENTRIES {
            self.write(files, false)?;
        }
        Ok(())
    }

    /// Writes both indexes' unwritten entries; `sync` fsyncs what changed.
    fn write(&mut self, files: &SegmentFiles, sync: bool) -> io::Result<()> {
        self.offset_index.write_pending(&files.index_path(), sync)?;
        self.time_index.write_pending(&files.time_index_path(), sync)
    }

    fn observe(&mut self, header: &BatchHeader) {
        let current = self.max_timestamp.map_or(NO_TIMESTAMP, |m| m.timestamp);
        if header.max_timestamp > current {
            self.max_timestamp = Some(TimestampOffset {
                timestamp: header.max_timestamp,
                offset: header.last_offset(),
            });
        }
    }

    fn reset(&mut self, files: &SegmentFiles) -> io::Result<()> {
        self.offset_index.reset(&files.index_path())?;
        self.time_index.reset(&files.time_index_path())?;
        self.max_timestamp = None;
        self.bytes_since_last_index_entry = 0;
        Ok(())
    }
}

impl LogSegment {
    /// Creates an empty segment, replacing any files of the same name.
    pub fn create(
        dir: &Arc<Path>,
        base_offset: i64,
        cache: &Arc<FileCache>,
        now_ms: i64,
    ) -> Result<LogSegment, LogError> {
        LogSegment::create_with_suffix(dir, base_offset, "", cache, now_ms)
    }

    /// Opens existing files without validating them; see [`LogSegment::is_sane`],
    /// [`LogSegment::load_tail`] and [`LogSegment::recover`]. `active` keeps the indexes in memory.
    pub fn open(
        dir: &Arc<Path>,
        base_offset: i64,
        active: bool,
        cache: &Arc<FileCache>,
        now_ms: i64,
    ) -> Result<LogSegment, LogError> {
        let files = SegmentFiles::new(dir, base_offset, "");
        let log = CachedFile::open(
            cache,
            dir,
            files.name(LOG_FILE_SUFFIX),
            OpenOptions::new().read(true).write(true),
        )?;
        let size_bytes = log.metadata()?.len();
        let indexes = SegmentIndexes {
            offset_index: OffsetIndex::open(&files.index_path(), base_offset, active)?,
            time_index: TimeIndex::open(&files.time_index_path(), base_offset, active)?,
            max_timestamp: None,
            bytes_since_last_index_entry: 0,
        };
        let mut segment = LogSegment::with_files(files, log, indexes, now_ms);
        segment.size_bytes = size_bytes;
        segment.indexes.max_timestamp = segment.indexes.time_index.last_entry();
        segment.rolling_base_timestamp = segment.first_batch_max_timestamp();
        Ok(segment)
    }

    /// Creates an empty segment whose three files carry an extra `suffix` (`.cleaned`): the log
    /// cleaner writes a replacement segment beside the live one, indexes and all, before swapping
    /// it in.
    pub(super) fn create_with_suffix(
        dir: &Arc<Path>,
        base_offset: i64,
        suffix: &'static str,
        cache: &Arc<FileCache>,
        now_ms: i64,
    ) -> Result<LogSegment, LogError> {
        let files = SegmentFiles::new(dir, base_offset, suffix);
        let log_name = files.name(LOG_FILE_SUFFIX);
        LogSegment::create_files(files, log_name, cache, now_ms)
    }

    /// Creates the segment that follows one sealed at `predecessor_bytes` bytes whose fsync has
    /// not happened yet (a roll leaves it to background writeback). Its `.log` is created under
    /// the pending name that records `predecessor_bytes`, so a crash before that fsync is found
    /// on open and the predecessor checked against it; see [`PENDING_LOG_INFIX`].
    pub fn create_after_unsynced(
        dir: &Arc<Path>,
        base_offset: i64,
        predecessor_bytes: u64,
        cache: &Arc<FileCache>,
        now_ms: i64,
    ) -> Result<LogSegment, LogError> {
        let files = SegmentFiles::new(dir, base_offset, "");
        let log_name = files.pending_log_name(predecessor_bytes);
        let mut segment = LogSegment::create_files(files, log_name, cache, now_ms)?;
        segment.unsynced_predecessor_bytes = Some(predecessor_bytes);
        Ok(segment)
    }

    fn create_files(
        files: SegmentFiles,
        log_name: String,
        cache: &Arc<FileCache>,
        now_ms: i64,
    ) -> Result<LogSegment, LogError> {
        let base_offset = files.base_offset;
        let log = CachedFile::open(
            cache,
            &files.dir,
            log_name,
            OpenOptions::new().read(true).write(true).create(true).truncate(true),
        )?;
        let indexes = SegmentIndexes {
            offset_index: OffsetIndex::create(&files.index_path(), base_offset)?,
            time_index: TimeIndex::create(&files.time_index_path(), base_offset)?,
            max_timestamp: None,
            bytes_since_last_index_entry: 0,
        };
        Ok(LogSegment::with_files(files, log, indexes, now_ms))
    }

    /// The size the previous segment was sealed at, while its fsync is still to come.
    pub fn unsynced_predecessor_bytes(&self) -> Option<u64> {
        self.unsynced_predecessor_bytes
    }

    /// The previous segment is durable: the `.log` takes its final name.
    pub fn mark_predecessor_synced(&mut self) -> Result<(), LogError> {
        if self.unsynced_predecessor_bytes.is_some() {
            self.log.rename(self.files.name(LOG_FILE_SUFFIX))?;
            self.unsynced_predecessor_bytes = None;
        }
        Ok(())
    }

    /// The first half of a seal done outside the partition's lock: writes every index entry
    /// to its file (no fsync) and returns the files to fsync. [`LogSegment::finish_seal`]
    /// follows once they are.
    pub fn unsynced_files(&mut self) -> Result<SealFiles, LogError> {
        self.indexes.write(&self.files, false)?;
        Ok(SealFiles {
            log: self.log.get()?,
            index: self.files.index_path(),
            time_index: self.files.time_index_path(),
            txn_index: self.files.path(super::txn_index::TXN_INDEX_FILE_SUFFIX),
        })
    }

    /// The second half: the files are durable, so the in-memory index copies go.
    pub fn finish_seal(&mut self) {
        self.indexes.offset_index.uncache();
        self.indexes.time_index.uncache();
    }

    fn with_files(files: SegmentFiles, log: CachedFile, indexes: SegmentIndexes, now_ms: i64) -> LogSegment {
        LogSegment {
            files,
            log,
            size_bytes: 0,
            indexes,
            rolling_base_timestamp: None,
            created_ms: now_ms,
            unsynced_predecessor_bytes: None,
        }
    }

    pub fn base_offset(&self) -> i64 {
        self.files.base_offset
    }

    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    /// The segment's log file, for writeback outside the partition's lock (reopened if the
    /// file cache had closed it).
    pub fn log_file(&self) -> Result<Arc<File>, LogError> {
        Ok(self.log.get()?)
    }

    pub fn is_empty(&self) -> bool {
        self.size_bytes == 0
    }

    /// Largest batch timestamp in the segment and the last offset of the batch holding it.
    pub fn max_timestamp(&self) -> Option<TimestampOffset> {
        self.indexes.max_timestamp
    }

    /// Kafka's sanity check on open: index files hold whole entries that point inside the log.
    /// An index that fails it is rebuilt by [`LogSegment::recover`].
    pub fn is_sane(&self) -> bool {
        self.indexes.offset_index.is_sane(self.size_bytes) && self.indexes.time_index.is_sane(self.size_bytes)
    }

    /// After a clean shutdown: finds the next offset, the max timestamp and the index interval
    /// state by scanning batch headers from the last offset index entry. Fails with `Corrupt` if
    /// the tail is torn, which means the shutdown was not clean after all.
    pub fn load_tail(&mut self) -> Result<i64, LogError> {
        let start = self
            .indexes
            .offset_index
            .last_entry()
            .map_or(0, |e| u64::from(e.position));
        self.indexes.max_timestamp = self.indexes.time_index.last_entry();
        self.indexes.bytes_since_last_index_entry = self.size_bytes.saturating_sub(start);
        let mut next_offset = self.base_offset();
        // Built from fields, not `self.scanner()`, so `self.indexes` stays mutable in the loop.
        let mut scanner = HeaderScanner::new(self.log.get()?, &self.files, start, self.size_bytes);
        while let Some((header, _)) = scanner.next()? {
            self.indexes.observe(&header);
            next_offset = header.last_offset().saturating_add(1);
        }
        Ok(next_offset)
    }

    /// Kafka's `LogSegment.recover`: validates every batch from the start (header, CRC, offsets
    /// increasing), rebuilds both indexes, and truncates the file at the first invalid or torn
    /// batch. The rebuilt entries reach the index files in bulk, as appended ones do.
    pub fn recover(&mut self, index_interval_bytes: u32) -> Result<RecoveryOutcome, LogError> {
        self.indexes.reset(&self.files)?;
        let file = self.log.get()?;
        let file_len = file.metadata()?.len();
        // No larger than the file: opening a new or small partition must not cost a megabyte.
        let buffer_bytes =
            usize::try_from(file_len).map_or(RECOVERY_BUFFER_BYTES, |len| len.min(RECOVERY_BUFFER_BYTES));
        let mut reader = BufReader::with_capacity(buffer_bytes, &*file);
        reader.seek(SeekFrom::Start(0))?;
        let mut position = 0u64;
        let base_offset = self.base_offset();
        let mut next_offset = base_offset;
        let reason = loop {
            let remaining = file_len - position;
            match read_valid_batch(&mut reader, base_offset, next_offset, remaining)? {
                RecoveredBatch::Valid(header) => {
                    self.indexes.on_batch(&header, position, index_interval_bytes);
                    self.indexes.write_if_due(&self.files)?;
                    position += header.total_len() as u64;
                    next_offset = header.last_offset().saturating_add(1);
                }
                RecoveredBatch::End => break None,
                RecoveredBatch::Invalid(reason) => break Some(reason),
            }
        };
        drop(reader);
        if position < file_len {
            file.set_len(position)?;
        }
        self.size_bytes = position;
        self.rolling_base_timestamp = self.first_batch_max_timestamp();
        Ok(RecoveryOutcome {
            next_offset,
            truncated_bytes: file_len - position,
            reason,
        })
    }

    /// Writes already stamped batches at the end of the segment and indexes them in memory.
    /// The index files get the entries in bulk from background writeback, a flush, the seal or a
    /// clean close (see [`crate::log::index`]), never from here: an append writes only the log.
    pub fn append(&mut self, records: &[u8], index_interval_bytes: u32) -> Result<(), LogError> {
        self.cache_indexes()?; // before the write: a failure leaves nothing unindexed
        let start = self.size_bytes;
        self.log.get()?.write_all_at(records, start)?;
        self.size_bytes += records.len() as u64;
        for (header, range) in BatchIter::new(records) {
            if range.start == 0 && start == 0 {
                self.rolling_base_timestamp = Some(header.max_timestamp);
            }
            self.indexes
                .on_batch(&header, start + range.start as u64, index_interval_bytes);
        }
        Ok(())
    }

    /// Writes the index entries not yet in their files (no fsync): for writeback, which hands
    /// the log's new bytes to the disk, so the index files keep up with it.
    pub fn write_index_entries(&mut self) -> Result<(), LogError> {
        Ok(self.indexes.write(&self.files, false)?)
    }

    /// Kafka's `translateOffset`: the first batch whose last offset is at least `offset`, so a
    /// fetch offset inside a batch finds that whole batch. `None` if the segment ends first.
    pub fn translate_offset(&self, offset: i64) -> Result<Option<(BatchHeader, u64)>, LogError> {
        let start = self
            .indexes
            .offset_index
            .lookup(&self.files.index_path(), offset)?
            .position;
        self.scanner(u64::from(start))?.first_batch_reaching(offset)
    }

    /// What a fetch needs to read this segment from `offset` on without the log's lock: the
    /// file (taken from the cache only when the read runs), its size now (bytes appended later
    /// are not read), and where to start looking for `offset`. Touches no disk.
    pub(super) fn reader(&self, offset: i64) -> SegmentReader {
        SegmentReader {
            size_bytes: self.size_bytes,
            file: self.log.clone(),
            files: self.files.clone(),
            start: self.indexes.offset_index.start_for_read(offset),
        }
    }

    /// Calls `f` with every batch header in order, reading headers only (a few KB per syscall,
    /// batch bodies skipped): for rebuilding state kept in headers, like the leader epochs.
    pub(super) fn for_each_batch_header(&self, mut f: impl FnMut(&BatchHeader)) -> Result<(), LogError> {
        let mut scanner = self.scanner(0)?;
        while let Some((header, _)) = scanner.next()? {
            f(&header);
        }
        Ok(())
    }

    /// The first batch whose max timestamp is at least `timestamp`: its header and position.
    /// Starts from the time index, then scans headers.
    pub fn find_batch_by_timestamp(&self, timestamp: i64) -> Result<Option<(BatchHeader, u64)>, LogError> {
        if self.indexes.max_timestamp.is_none_or(|m| m.timestamp < timestamp) {
            return Ok(None);
        }
        let from_offset = self
            .indexes
            .time_index
            .lookup_before(&self.files.time_index_path(), timestamp)?
            .map_or(self.base_offset(), |e| e.offset);
        let start = self
            .indexes
            .offset_index
            .lookup(&self.files.index_path(), from_offset)?
            .position;
        let mut scanner = self.scanner(u64::from(start))?;
        while let Some((header, position)) = scanner.next()? {
            if header.max_timestamp >= timestamp {
                return Ok(Some((header, position)));
            }
        }
        Ok(None)
    }

    /// The stored bytes of the batch `header` starts at `position` (as found by a scan of this
    /// segment, so its length is within the segment).
    pub fn read_batch(&self, header: &BatchHeader, position: u64) -> Result<Vec<u8>, LogError> {
        let mut batch = vec![0; header.total_len()];
        self.log.get()?.read_exact_at(&mut batch, position)?;
        Ok(batch)
    }

    /// Drops the batch holding `offset` and everything after it. Returns the bytes removed and
    /// the segment's new next offset.
    pub fn truncate_to(&mut self, offset: i64) -> Result<(u64, i64), LogError> {
        let Some((header, position)) = self.translate_offset(offset)? else {
            return Ok((0, self.load_tail()?));
        };
        let truncated = self.size_bytes - position;
        self.log.get()?.set_len(position)?;
        self.size_bytes = position;
        // Written and unwritten entries alike: none may point past the new end.
        if let Ok(position) = u32::try_from(position) {
            self.indexes
                .offset_index
                .truncate_to_position(&self.files.index_path(), position)?;
        }
        self.indexes
            .time_index
            .truncate_to_offset(&self.files.time_index_path(), header.base_offset)?;
        if position == 0 {
            self.rolling_base_timestamp = None;
        }
        Ok((truncated, self.load_tail()?))
    }

    /// How long this segment has been filling, for `segment.ms`. Like Kafka, measured from the
    /// first batch's timestamp to `message_timestamp_ms` when the segment has one, so producers'
    /// clocks are compared with each other; otherwise on the broker's clock.
    pub fn time_waited_for_roll_ms(&self, now_ms: i64, message_timestamp_ms: i64) -> i64 {
        match self.rolling_base_timestamp {
            Some(first) if first >= 0 => message_timestamp_ms.saturating_sub(first),
            _ => now_ms.saturating_sub(self.created_ms),
        }
    }

    /// The timestamp retention compares with `retention.ms`: the newest batch timestamp, or the
    /// file's modification time when no batch carries one (Kafka's `largestTimestamp`).
    pub fn largest_timestamp_ms(&self) -> Result<i64, LogError> {
        if let Some(max) = self.indexes.max_timestamp {
            return Ok(max.timestamp);
        }
        let modified = self.log.metadata()?.modified()?;
        let since_epoch = modified.duration_since(UNIX_EPOCH).unwrap_or_default();
        Ok(i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX))
    }

    /// Seals a segment that stops being the active one: records its final max timestamp in the
    /// time index (so it survives a restart), writes every index entry and fsyncs (so a sealed
    /// segment's indexes are trusted after any stop), and frees the in-memory index copies.
    pub fn on_become_inactive(&mut self) -> Result<(), LogError> {
        self.append_final_time_index_entry()?;
        self.flush()?;
        self.indexes.offset_index.uncache();
        self.indexes.time_index.uncache();
        Ok(())
    }

    /// Makes a sealed segment the active one again (after truncation removed its successors).
    pub fn on_become_active(&mut self) -> Result<(), LogError> {
        self.cache_indexes()
    }

    /// Reads the index entries into memory unless they are there (an active segment's are,
    /// unless an idle pass released them); builds no path when they are.
    fn cache_indexes(&mut self) -> Result<(), LogError> {
        if !self.indexes.offset_index.is_cached() {
            self.indexes.offset_index.cache(&self.files.index_path())?;
        }
        if !self.indexes.time_index.is_cached() {
            self.indexes.time_index.cache(&self.files.time_index_path())?;
        }
        Ok(())
    }

    /// An idle active segment: writes its index entries to their files (no fsync) and frees
    /// the in-memory copies. Lookups then read the files, as a sealed segment's do, and the
    /// next append or seal reads the entries back in.
    pub fn release_index_copies(&mut self) -> Result<(), LogError> {
        if !self.indexes_in_memory() {
            return Ok(()); // an earlier pass released them: no write to try, no path to build
        }
        self.indexes.write(&self.files, false)?;
        self.indexes.offset_index.uncache();
        self.indexes.time_index.uncache();
        Ok(())
    }

    /// Whether the index entries are in memory (both indexes are cached and released together).
    pub fn indexes_in_memory(&self) -> bool {
        self.indexes.offset_index.is_cached() || self.indexes.time_index.is_cached()
    }

    pub fn append_final_time_index_entry(&mut self) -> Result<(), LogError> {
        if let Some(max) = self.indexes.max_timestamp {
            self.cache_indexes()?;
            self.indexes.time_index.maybe_append(max.timestamp, max.offset);
        }
        Ok(())
    }

    /// fsyncs the log file, writes the index entries not yet in their files, and fsyncs those
    /// that changed since their last fsync.
    pub fn flush(&mut self) -> Result<(), LogError> {
        self.log.get()?.sync_all()?;
        self.indexes.write(&self.files, true)?;
        sync_if_exists(&self.files.path(super::txn_index::TXN_INDEX_FILE_SUFFIX))?;
        Ok(())
    }

    /// Removes the segment's files (log, indexes, aborted-transaction index).
    pub fn delete(self) -> Result<(), LogError> {
        let log_path = self.log.path(); // the pending name while a seal is in flight
        let files = self.files.clone();
        drop(self);
        remove_if_exists(&log_path)?;
        OffsetIndex::delete(&files.index_path())?;
        TimeIndex::delete(&files.time_index_path())?;
        remove_if_exists(&files.path(super::txn_index::TXN_INDEX_FILE_SUFFIX))?;
        Ok(())
    }

    /// A read-only view of this (sealed) segment for the log cleaner, which reads it without the
    /// log's lock: its own handle on the file, so the segment may be deleted or replaced meanwhile.
    pub(super) fn snapshot(&self) -> Result<SegmentSnapshot, LogError> {
        Ok(SegmentSnapshot {
            base_offset: self.base_offset(),
            size_bytes: self.size_bytes,
            file_id: self.file_id()?,
            largest_timestamp_ms: self.largest_timestamp_ms()?,
            file: self.log.clone(),
            files: self.files.clone(),
        })
    }

    /// Identity of the `.log` file (its inode): tells the cleaner whether the segment it read
    /// is still the one in the log when it comes to swap in the cleaned copy.
    pub(super) fn file_id(&self) -> Result<u64, LogError> {
        Ok(std::os::unix::fs::MetadataExt::ino(&self.log.metadata()?))
    }

    fn first_batch_max_timestamp(&self) -> Option<i64> {
        let mut scanner = self.scanner(0).ok()?;
        scanner.next().ok().flatten().map(|(header, _)| header.max_timestamp)
    }

    fn scanner(&self, start: u64) -> Result<HeaderScanner<'_>, LogError> {
        Ok(HeaderScanner::new(self.log.get()?, &self.files, start, self.size_bytes))
    }
}

impl Drop for LogSegment {
    /// The segment leaves its log: reads planned before keep an open file, but never reopen
    /// the name, which another segment may take.
    fn drop(&mut self) {
        self.log.retire();
    }
}

/// A sealed segment as the log cleaner saw it (see [`LogSegment::snapshot`]).
#[derive(Debug)]
pub(super) struct SegmentSnapshot {
    pub base_offset: i64,
    pub size_bytes: u64,
    pub file_id: u64,
    pub largest_timestamp_ms: i64,
    file: CachedFile,
    files: SegmentFiles,
}

impl SegmentSnapshot {
    /// Calls `f` with each whole batch of the segment, in order, read through a buffer of
    /// [`RECOVERY_BUFFER_BYTES`] (a batch larger than that is read on its own).
    pub fn for_each_batch(
        &self,
        mut f: impl FnMut(&BatchHeader, &[u8]) -> Result<(), LogError>,
    ) -> Result<(), LogError> {
        let file = open_for_read(&self.file, &self.files)?;
        let mut scanner = HeaderScanner::new(file.clone(), &self.files, 0, self.size_bytes);
        let mut buf = Vec::new();
        while let Some((header, position)) = scanner.next()? {
            buf.resize(header.total_len(), 0);
            file.read_exact_at(&mut buf, position)?;
            f(&header, &buf)?;
        }
        Ok(())
    }
}

/// One segment as a fetch planned it under the log's lock (see [`LogSegment::reader`]). Reads
/// are positional and bounded by the size seen then; a segment that has since shrunk (the log
/// was truncated) gives [`LogError::TruncatedDuringRead`], never a short or mixed answer.
#[derive(Debug, Clone)]
pub(super) struct SegmentReader {
    size_bytes: u64,
    file: CachedFile,
    files: SegmentFiles,
    start: ReadStart,
}

impl SegmentReader {
    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    /// [`LogSegment::translate_offset`] on the planned view.
    pub fn translate_offset(&self, offset: i64) -> Result<Option<(BatchHeader, u64)>, LogError> {
        let file = open_for_read(&self.file, &self.files)?;
        let mut scanner = HeaderScanner::new(file, &self.files, 0, self.size_bytes);
        match &self.start {
            ReadStart::Position(position) => scanner.seek(*position),
            ReadStart::Lookup(index) => {
                let entry = index
                    .lookup(&self.files.index_path(), offset)
                    .map_err(|e| read_error(e, &self.files, 0))?;
                // The index file was read by path after the log's lock was released; if it was
                // replaced meanwhile its positions are another file's. Trust the entry only where
                // this file has a batch with the entry's offset; otherwise search from the start.
                let position = u64::from(entry.position);
                if position > 0 && scanner.base_offset_at(position) == Some(entry.offset) {
                    scanner.seek(position);
                }
            }
        }
        scanner.first_batch_reaching(offset)
    }

    /// Appends up to `len` bytes starting at `position` to `out`, no further than the planned size.
    pub fn read_into(&self, position: u64, len: u64, out: &mut Vec<u8>) -> Result<(), LogError> {
        let len = len.min(self.size_bytes.saturating_sub(position));
        let file = open_for_read(&self.file, &self.files)?;
        let start = out.len();
        out.resize(start + len as usize, 0);
        let result = file.read_exact_at(&mut out[start..], position);
        if let Err(e) = result {
            out.truncate(start);
            return Err(read_error(e, &self.files, position + len));
        }
        Ok(())
    }
}

/// The file of a segment planned for a read, from the cache. A segment removed from its log
/// since (retention, compaction, truncation) whose file the cache has closed is gone for the
/// read: [`LogError::RemovedDuringRead`].
fn open_for_read(file: &CachedFile, files: &SegmentFiles) -> Result<Arc<File>, LogError> {
    file.get().map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => LogError::RemovedDuringRead {
            path: files.to_string(),
        },
        _ => LogError::Io(e),
    })
}

/// A failed positional read: past the end of the file means the file shrank after the read was
/// planned (truncation), anything else is the disk.
fn read_error(e: io::Error, path: &dyn fmt::Display, position: u64) -> LogError {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        LogError::TruncatedDuringRead {
            path: path.to_string(),
            position,
        }
    } else {
        LogError::Io(e)
    }
}

/// The offset after the last batch of the segment file at `path` (its base offset if empty), for
/// completing an interrupted swap of cleaned segments. A torn tail ends the scan.
pub(super) fn next_offset_of_file(path: &Path, base_offset: i64) -> Result<i64, LogError> {
    let file = File::open(path)?;
    let len = file.metadata()?.len();
    let name = path.display();
    let mut scanner = HeaderScanner::new(Arc::new(file), &name, 0, len);
    let mut next = base_offset;
    while let Ok(Some((header, _))) = scanner.next() {
        next = header.last_offset().saturating_add(1);
    }
    Ok(next)
}

/// One step of crash recovery.
enum RecoveredBatch {
    Valid(BatchHeader),
    /// Clean end of the file.
    End,
    /// Torn or invalid: recovery truncates here.
    Invalid(String),
}

/// Reads the next batch of a sequential recovery scan and checks it as a producer's batch would
/// be checked, streaming the CRC so a batch never has to fit in memory.
fn read_valid_batch(
    reader: &mut BufReader<&File>,
    segment_base_offset: i64,
    min_offset: i64,
    remaining: u64,
) -> io::Result<RecoveredBatch> {
    if remaining == 0 {
        return Ok(RecoveredBatch::End);
    }
    let mut header_bytes = [0u8; BATCH_HEADER_LEN];
    if remaining < BATCH_HEADER_LEN as u64 {
        return Ok(RecoveredBatch::Invalid(format!(
            "torn batch header ({remaining} bytes)"
        )));
    }
    reader.read_exact(&mut header_bytes)?;
    let header = match BatchHeader::parse(&header_bytes).and_then(|h| h.validate_stored_fields().map(|()| h)) {
        Ok(header) => header,
        Err(e) => return Ok(RecoveredBatch::Invalid(e.to_string())),
    };
    if header.total_len() as u64 > remaining {
        return Ok(RecoveredBatch::Invalid(format!(
            "torn batch ({} of {} bytes)",
            remaining,
            header.total_len()
        )));
    }
    let relative_last_offset = header.last_offset().saturating_sub(segment_base_offset);
    if header.base_offset < min_offset || relative_last_offset > i64::from(i32::MAX) {
        return Ok(RecoveredBatch::Invalid(format!(
            "batch base offset {} out of order (expected at least {min_offset})",
            header.base_offset
        )));
    }
    let computed = stream_crc(reader, &header_bytes, header.total_len() - BATCH_HEADER_LEN)?;
    if computed != header.crc {
        return Ok(RecoveredBatch::Invalid(format!(
            "record batch CRC mismatch: expected {:#010x}, computed {computed:#010x}",
            header.crc
        )));
    }
    Ok(RecoveredBatch::Valid(header))
}

/// CRC32C of a batch whose header was read already and whose `body_len` record bytes follow.
fn stream_crc(reader: &mut BufReader<&File>, header: &[u8; BATCH_HEADER_LEN], body_len: usize) -> io::Result<u32> {
    let mut crc = crc32c::crc32c(&header[CRC_COVERED_FROM..]);
    let mut left = body_len;
    while left > 0 {
        let chunk = reader.fill_buf()?;
        if chunk.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "segment shrank during recovery",
            ));
        }
        let n = chunk.len().min(left);
        crc = crc32c::crc32c_append(crc, &chunk[..n]);
        reader.consume(n);
        left -= n;
    }
    Ok(crc)
}

/// Walks batch headers of a segment file with positional reads, [`SCAN_BUFFER_BYTES`] at a
/// time: a scan over small batches costs a syscall per buffer, not per batch, and concurrent
/// readers never share a file cursor.
struct HeaderScanner<'a> {
    file: Arc<File>,
    /// The file's name, for errors.
    path: &'a dyn fmt::Display,
    end: u64,
    pos: u64,
    buf: [u8; SCAN_BUFFER_BYTES],
    buf_start: u64,
    buf_len: usize,
}

impl<'a> HeaderScanner<'a> {
    fn new(file: Arc<File>, path: &'a dyn fmt::Display, start: u64, end: u64) -> HeaderScanner<'a> {
        HeaderScanner {
            file,
            path,
            end,
            pos: start,
            buf: [0; SCAN_BUFFER_BYTES],
            buf_start: 0,
            buf_len: 0,
        }
    }

    /// Continues the scan at `position`.
    fn seek(&mut self, position: u64) {
        self.pos = position;
    }

    /// The base offset of a batch header read at `position`, if one parses there (the read is
    /// buffered, so a scan continuing there does not read it again).
    fn base_offset_at(&mut self, position: u64) -> Option<i64> {
        self.header_at(position).ok().map(|header| header.base_offset)
    }

    /// The first batch whose last offset is at least `offset`, and its position.
    fn first_batch_reaching(&mut self, offset: i64) -> Result<Option<(BatchHeader, u64)>, LogError> {
        while let Some((header, position)) = self.next()? {
            if header.last_offset() >= offset {
                return Ok(Some((header, position)));
            }
        }
        Ok(None)
    }

    /// The next batch header and its position; `None` exactly at the end. A header that cannot
    /// be a batch, or a batch running past the end, is `Corrupt`: stored data is whole batches.
    fn next(&mut self) -> Result<Option<(BatchHeader, u64)>, LogError> {
        if self.pos >= self.end {
            return Ok(None);
        }
        let position = self.pos;
        let header = self.header_at(position)?;
        let end = position + header.total_len() as u64;
        if header.batch_length < MIN_BATCH_LENGTH || end > self.end {
            return Err(self.corrupt(position, "invalid batch length"));
        }
        self.pos = end;
        Ok(Some((header, position)))
    }

    fn header_at(&mut self, position: u64) -> Result<BatchHeader, LogError> {
        if position + BATCH_HEADER_LEN as u64 > self.end {
            return Err(self.corrupt(position, "torn batch header"));
        }
        let buffered =
            position >= self.buf_start && position + BATCH_HEADER_LEN as u64 <= self.buf_start + self.buf_len as u64;
        if !buffered {
            let len = (self.end - position).min(SCAN_BUFFER_BYTES as u64) as usize;
            self.file
                .read_exact_at(&mut self.buf[..len], position)
                .map_err(|e| read_error(e, self.path, position + len as u64))?;
            self.buf_start = position;
            self.buf_len = len;
        }
        let from = (position - self.buf_start) as usize;
        let bytes = self.buf.get(from..self.buf_len).unwrap_or_default();
        BatchHeader::parse(bytes).map_err(|_| self.corrupt(position, "torn batch header"))
    }

    fn corrupt(&self, position: u64, what: &str) -> LogError {
        LogError::Corrupt(format!("{what} at position {position} of {}", self.path))
    }
}

//! Durable storage for the metadata quorum's Raft log (implements [`raft::Storage`]).
//!
//! One directory per quorum member, owned entirely by this module:
//!
//! | file              | contents                                                              |
//! |-------------------|-----------------------------------------------------------------------|
//! | `meta.properties` | format version, cluster id, node id, incarnation (written last on init) |
//! | `entries.log`     | Raft entries after the snapshot, appended as `len u32, crc32c u32, protobuf Entry` |
//! | `hard-state`      | Raft `HardState` (term, vote, commit), replaced atomically            |
//! | `snapshot`        | latest Raft `Snapshot` (metadata incl. `ConfState` + state machine bytes), replaced atomically |
//!
//! Every small file is `magic[4], len u32, crc32c u32, payload` and is replaced with
//! write-tmp + fsync + rename + fsync-dir, so a crash leaves either the old or the new version.
//! The entry log is only ever appended to (fsync after every append) or truncated; after a
//! crash, a torn or corrupt tail is cut off on open. Such a tail was never acknowledged, because
//! the driver fsyncs before sending any message that depends on it.
//!
//! The `ConfState` lives in the snapshot metadata rather than in a file of its own: the driver
//! takes a snapshot whenever it applies a configuration change, and configuration changes in the
//! log after the snapshot are re-applied on restart (raft-rs treats them idempotently). One source
//! of truth means no reconciliation between a conf-state file and the snapshot after a crash.
//!
//! Everything is also held in memory (the metadata log is small and compacted by snapshots), so
//! the `raft::Storage` reads never touch the disk.
//!
//! Over 700 lines only because its crash and corruption tests sit beside the storage code they
//! check.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use prost::Message;
use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};
use raft::{GetEntriesContext, RaftState, StorageError};

use crate::QuorumError;

/// On-disk format version recorded in `meta.properties`; a directory with another version is refused.
pub(crate) const FORMAT_VERSION: u32 = 1;
/// Upper bound on any single record (entry, snapshot, hard state). Matches the transport's frame
/// limit: nothing larger could be replicated anyway.
pub(crate) const MAX_RECORD_BYTES: usize = 64 << 20;

const META_FILE: &str = "meta.properties";
const LOG_FILE: &str = "entries.log";
const HARD_STATE_FILE: &str = "hard-state";
const SNAPSHOT_FILE: &str = "snapshot";
const HARD_STATE_MAGIC: &[u8; 4] = b"SLHS";
const SNAPSHOT_MAGIC: &[u8; 4] = b"SLSN";
const RECORD_HEADER_BYTES: usize = 8;

/// What `meta.properties` records about the directory's owner.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Meta {
    version: u32,
    cluster_id: String,
    node_id: u64,
    /// Bumped on every open; makes proposal ids unique across restarts of the same node.
    incarnation: u64,
}

/// How to initialize a directory that has never been used.
pub(crate) enum Bootstrap<'a> {
    /// A configured voter: start from a snapshot at index 1, term 1 holding the full voter set and
    /// the empty state machine. Every voter writes the identical snapshot, so they agree on the
    /// initial configuration without any log entry; nodes joining later must catch up by snapshot
    /// (the log starts at index 2), which carries the configuration they lack.
    Voter {
        conf_state: ConfState,
        initial_data: &'a dyn Fn() -> Vec<u8>,
    },
    /// Not a voter: start empty and wait for the leader's snapshot after `add_learner`.
    Learner,
}

/// The Raft log, hard state and latest snapshot of one quorum member, on disk and in memory.
pub(crate) struct DiskStorage {
    dir: PathBuf,
    log: File,
    /// Valid bytes in `entries.log`; appends go here.
    log_len: u64,
    /// Entries after the snapshot: `entries[i].index == snapshot index + 1 + i`.
    entries: Vec<Entry>,
    /// File offset of each entry's record, parallel to `entries` (for truncating a suffix).
    offsets: Vec<u64>,
    hard_state: HardState,
    snapshot: Snapshot,
    incarnation: u64,
}

impl DiskStorage {
    /// Opens (initializing if new) the directory, checks it belongs to this cluster and node,
    /// and loads it, cutting off a torn tail of the entry log.
    pub(crate) fn open(
        dir: &Path,
        cluster_id: &str,
        node_id: u64,
        bootstrap: Bootstrap<'_>,
    ) -> Result<DiskStorage, QuorumError> {
        fs::create_dir_all(dir).map_err(|e| io_err("create directory", dir, e))?;
        let meta_path = dir.join(META_FILE);
        let incarnation = if meta_path.exists() {
            let meta = read_meta(&meta_path)?;
            check_meta(dir, &meta, cluster_id, node_id)?;
            meta.incarnation + 1
        } else {
            initialize(dir, bootstrap)?;
            1
        };
        // Written last on a fresh directory: its presence means initialization completed.
        write_meta(
            dir,
            &Meta {
                version: FORMAT_VERSION,
                cluster_id: cluster_id.to_owned(),
                node_id,
                incarnation,
            },
        )?;
        load(dir, incarnation)
    }

    /// Bumped on every open of the directory.
    pub(crate) fn incarnation(&self) -> u64 {
        self.incarnation
    }

    pub(crate) fn hard_state(&self) -> &HardState {
        &self.hard_state
    }

    pub(crate) fn latest_snapshot(&self) -> &Snapshot {
        &self.snapshot
    }

    pub(crate) fn snapshot_index(&self) -> u64 {
        self.snapshot.get_metadata().index
    }

    fn first_index(&self) -> u64 {
        self.snapshot_index() + 1
    }

    fn last_index(&self) -> u64 {
        self.entries.last().map_or(self.snapshot_index(), |e| e.index)
    }

    /// Appends entries from a `Ready`, replacing any conflicting suffix, and fsyncs.
    pub(crate) fn append(&mut self, entries: &[Entry]) -> Result<(), QuorumError> {
        let Some(first) = entries.first() else {
            return Ok(());
        };
        let path = self.dir.join(LOG_FILE);
        if first.index < self.first_index() || first.index > self.last_index() + 1 {
            return Err(QuorumError::Corrupt {
                path,
                detail: format!(
                    "raft appended entry {} but the log holds entries {}..={}",
                    first.index,
                    self.first_index(),
                    self.last_index()
                ),
            });
        }
        // Entries from `first.index` on are replaced by the new ones (a follower's conflicting suffix).
        let keep = (first.index - self.first_index()) as usize;
        if keep < self.entries.len() {
            self.log_len = self.offsets[keep];
            self.entries.truncate(keep);
            self.offsets.truncate(keep);
            self.log
                .set_len(self.log_len)
                .map_err(|e| io_err("truncate", &path, e))?;
        }
        let mut buf = Vec::new();
        for entry in entries {
            self.offsets.push(self.log_len + buf.len() as u64);
            encode_record(&mut buf, entry, &path)?;
        }
        self.log
            .seek(SeekFrom::Start(self.log_len))
            .and_then(|_| self.log.write_all(&buf))
            .and_then(|_| self.log.sync_data())
            .map_err(|e| io_err("append to", &path, e))?;
        self.log_len += buf.len() as u64;
        self.entries.extend_from_slice(entries);
        Ok(())
    }

    /// Persists a new hard state (term, vote, commit) if it changed.
    pub(crate) fn set_hard_state(&mut self, hs: HardState) -> Result<(), QuorumError> {
        if hs == self.hard_state {
            return Ok(());
        }
        let payload = encode_message(&hs, &self.dir.join(HARD_STATE_FILE))?;
        write_framed(&self.dir, HARD_STATE_FILE, HARD_STATE_MAGIC, &payload)?;
        self.hard_state = hs;
        Ok(())
    }

    /// Persists an advanced commit index (from a `LightReady`), so a restart replays up to it.
    pub(crate) fn set_commit(&mut self, commit: u64) -> Result<(), QuorumError> {
        let mut hs = self.hard_state.clone();
        hs.commit = commit;
        self.set_hard_state(hs)
    }

    /// Installs a snapshot received from the leader: it replaces the whole log.
    ///
    /// Write order: snapshot, empty log, hard state. A crash in between is repaired on open
    /// (entries the snapshot covers or contradicts are dropped; commit is raised to the snapshot).
    pub(crate) fn apply_snapshot(&mut self, snapshot: Snapshot) -> Result<(), QuorumError> {
        let meta = snapshot.get_metadata();
        let (index, term) = (meta.index, meta.term);
        if index < self.snapshot_index() {
            return Err(QuorumError::Corrupt {
                path: self.dir.join(SNAPSHOT_FILE),
                detail: format!(
                    "raft installed snapshot {index} older than the stored snapshot {}",
                    self.snapshot_index()
                ),
            });
        }
        write_snapshot(&self.dir, &snapshot)?;
        self.snapshot = snapshot;
        self.entries.clear();
        self.rewrite_log()?;
        let mut hs = self.hard_state.clone();
        hs.term = hs.term.max(term);
        hs.commit = hs.commit.max(index);
        self.set_hard_state(hs)
    }

    /// Records a snapshot of the local state machine at `index` (applied, hence committed and
    /// durable) and compacts the log up to it.
    pub(crate) fn create_snapshot(
        &mut self,
        index: u64,
        conf_state: ConfState,
        data: Vec<u8>,
    ) -> Result<(), QuorumError> {
        let term = raft::Storage::term(self, index).map_err(|e| QuorumError::Corrupt {
            path: self.dir.join(LOG_FILE),
            detail: format!("no term for snapshot index {index}: {e}"),
        })?;
        let mut snapshot = Snapshot::default();
        snapshot.data = data.into();
        let meta = snapshot.mut_metadata();
        meta.index = index;
        meta.term = term;
        meta.set_conf_state(conf_state);
        write_snapshot(&self.dir, &snapshot)?;
        self.snapshot = snapshot;
        let drop = self.entries.partition_point(|e| e.index <= index);
        self.entries.drain(..drop);
        self.rewrite_log()
    }

    /// Replaces `entries.log` with the in-memory entries (after compaction or a snapshot install).
    fn rewrite_log(&mut self) -> Result<(), QuorumError> {
        let path = self.dir.join(LOG_FILE);
        let mut buf = Vec::new();
        self.offsets.clear();
        for entry in &self.entries {
            self.offsets.push(buf.len() as u64);
            encode_record(&mut buf, entry, &path)?;
        }
        atomic_write(&self.dir, LOG_FILE, &buf)?;
        self.log = open_log(&path)?;
        self.log_len = buf.len() as u64;
        Ok(())
    }
}

impl raft::Storage for DiskStorage {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(RaftState::new(
            self.hard_state.clone(),
            self.snapshot.get_metadata().get_conf_state().clone(),
        ))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        if low < self.first_index() {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if high > self.last_index() + 1 || low > high {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        let start = (low - self.first_index()) as usize;
        let end = (high - self.first_index()) as usize;
        let mut entries = self.entries[start..end].to_vec();
        raft::util::limit_size(&mut entries, max_size.into());
        Ok(entries)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        if idx == self.snapshot_index() {
            return Ok(self.snapshot.get_metadata().term);
        }
        if idx < self.first_index() {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if idx > self.last_index() {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        Ok(self.entries[(idx - self.first_index()) as usize].term)
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(DiskStorage::first_index(self))
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(DiskStorage::last_index(self))
    }

    /// The latest stored snapshot. The driver snapshots on every configuration change, so it
    /// always contains every member a leader might send it to.
    fn snapshot(&self, request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        if self.snapshot_index() < request_index {
            return Err(raft::Error::Store(StorageError::SnapshotTemporarilyUnavailable));
        }
        Ok(self.snapshot.clone())
    }
}

/// Creates the files of a fresh directory (everything but `meta.properties`).
fn initialize(dir: &Path, bootstrap: Bootstrap<'_>) -> Result<(), QuorumError> {
    // Leftovers of an initialization that crashed before writing meta.properties.
    for name in [SNAPSHOT_FILE, HARD_STATE_FILE] {
        match fs::remove_file(dir.join(name)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("remove", &dir.join(name), e)),
        }
    }
    if let Bootstrap::Voter {
        conf_state,
        initial_data,
    } = bootstrap
    {
        let mut snapshot = Snapshot::default();
        snapshot.data = initial_data().into();
        let meta = snapshot.mut_metadata();
        meta.index = 1;
        meta.term = 1;
        meta.set_conf_state(conf_state);
        write_snapshot(dir, &snapshot)?;
        let mut hs = HardState::default();
        hs.term = 1;
        hs.commit = 1;
        let path = dir.join(HARD_STATE_FILE);
        write_framed(dir, HARD_STATE_FILE, HARD_STATE_MAGIC, &encode_message(&hs, &path)?)?;
    }
    atomic_write(dir, LOG_FILE, &[])
}

fn load(dir: &Path, incarnation: u64) -> Result<DiskStorage, QuorumError> {
    let snapshot_path = dir.join(SNAPSHOT_FILE);
    let snapshot: Snapshot = match read_framed(&snapshot_path, SNAPSHOT_MAGIC)? {
        Some(payload) => decode_message(&payload, &snapshot_path)?,
        None => Snapshot::default(),
    };
    let hs_path = dir.join(HARD_STATE_FILE);
    let mut hard_state: HardState = match read_framed(&hs_path, HARD_STATE_MAGIC)? {
        Some(payload) => decode_message(&payload, &hs_path)?,
        None => HardState::default(),
    };

    let log_path = dir.join(LOG_FILE);
    let mut log = open_log(&log_path)?;
    let scanned = scan_log(&mut log, &log_path)?;
    let (snap_index, snap_term) = {
        let m = snapshot.get_metadata();
        (m.index, m.term)
    };
    let entries = reconcile_with_snapshot(scanned, snap_index, snap_term, &log_path)?;

    let mut storage = DiskStorage {
        dir: dir.to_owned(),
        log,
        log_len: 0,
        entries,
        offsets: Vec::new(),
        hard_state: HardState::default(),
        snapshot,
        incarnation,
    };
    // Rewriting the file from the good entries drops a torn tail and entries the snapshot
    // covers, and recomputes the offsets. (One small rewrite per start, at metadata scale.)
    storage.rewrite_log()?;

    // A crash between writing a snapshot and the hard state leaves commit behind the snapshot;
    // raft-rs requires commit >= snapshot index.
    hard_state.commit = hard_state.commit.max(snap_index);
    hard_state.term = hard_state.term.max(snap_term);
    if hard_state.commit > storage.last_index() {
        return Err(QuorumError::Corrupt {
            path: hs_path,
            detail: format!(
                "commit index {} is beyond the last entry {} in {}; entries that were fsynced are missing",
                hard_state.commit,
                storage.last_index(),
                log_path.display()
            ),
        });
    }
    storage.hard_state = hard_state;
    Ok(storage)
}

/// Reads `entries.log` up to the first torn or corrupt record; that record and everything after
/// it are ignored. Returns the good entries.
fn scan_log(log: &mut File, path: &Path) -> Result<Vec<Entry>, QuorumError> {
    let mut bytes = Vec::new();
    log.seek(SeekFrom::Start(0))
        .and_then(|_| log.read_to_end(&mut bytes))
        .map_err(|e| io_err("read", path, e))?;
    let mut entries: Vec<Entry> = Vec::new();
    let mut pos = 0usize;
    let stop_reason = loop {
        if pos == bytes.len() {
            break None;
        }
        let Some(payload) = record_at(&bytes, pos) else {
            break Some("torn or checksum-failing record");
        };
        let entry = match Entry::decode(payload) {
            Ok(e) => e,
            Err(_) => break Some("undecodable entry"),
        };
        if let Some(prev) = entries.last() {
            if entry.index != prev.index + 1 {
                return Err(QuorumError::Corrupt {
                    path: path.to_owned(),
                    detail: format!("entry {} follows entry {} at byte {pos}", entry.index, prev.index),
                });
            }
        }
        entries.push(entry);
        pos += RECORD_HEADER_BYTES + payload.len();
    };
    if let Some(reason) = stop_reason {
        tracing::warn!(
            path = %path.display(),
            valid_bytes = pos,
            dropped_bytes = bytes.len() - pos,
            last_index = entries.last().map(|e| e.index),
            "truncating the raft log after a {reason}; expected after a crash mid-append"
        );
        // `load` rewrites the log from the good entries, which removes the tail on disk.
    }
    Ok(entries)
}

/// The payload of the record at `pos`, if it is complete and its checksum matches.
fn record_at(bytes: &[u8], pos: usize) -> Option<&[u8]> {
    let header = bytes.get(pos..pos + RECORD_HEADER_BYTES)?;
    let len = u32::from_be_bytes(header[0..4].try_into().ok()?) as usize;
    let crc = u32::from_be_bytes(header[4..8].try_into().ok()?);
    if len > MAX_RECORD_BYTES {
        return None;
    }
    let start = pos + RECORD_HEADER_BYTES;
    let payload = bytes.get(start..start + len)?;
    (crc32c::crc32c(payload) == crc).then_some(payload)
}

/// Keeps only log entries that continue the snapshot's history.
///
/// Normally the log starts right after the snapshot. After a crash during compaction or a
/// snapshot install it may still hold older entries: those the snapshot covers are dropped, and
/// if the log's entry at the snapshot index has another term, the whole log contradicts the
/// snapshot and is dropped.
fn reconcile_with_snapshot(
    entries: Vec<Entry>,
    snap_index: u64,
    snap_term: u64,
    path: &Path,
) -> Result<Vec<Entry>, QuorumError> {
    let Some(first) = entries.first().map(|e| e.index) else {
        return Ok(entries);
    };
    if first > snap_index + 1 {
        return Err(QuorumError::Corrupt {
            path: path.to_owned(),
            detail: format!("log starts at entry {first} but the snapshot ends at {snap_index}"),
        });
    }
    if first <= snap_index {
        let at_snapshot = entries.iter().find(|e| e.index == snap_index);
        if at_snapshot.is_some_and(|e| e.term != snap_term) {
            return Ok(Vec::new());
        }
    }
    Ok(entries.into_iter().filter(|e| e.index > snap_index).collect())
}

fn check_meta(dir: &Path, meta: &Meta, cluster_id: &str, node_id: u64) -> Result<(), QuorumError> {
    if meta.version != FORMAT_VERSION {
        return Err(QuorumError::FormatVersion {
            dir: dir.to_owned(),
            found: meta.version,
            expected: FORMAT_VERSION,
        });
    }
    if meta.cluster_id != cluster_id {
        return Err(QuorumError::ClusterIdMismatch {
            dir: dir.to_owned(),
            found: meta.cluster_id.clone(),
            expected: cluster_id.to_owned(),
        });
    }
    if meta.node_id != node_id {
        return Err(QuorumError::NodeIdMismatch {
            dir: dir.to_owned(),
            found: meta.node_id,
            expected: node_id,
        });
    }
    Ok(())
}

/// `meta.properties` is plain `key=value` text (like Kafka's) so an operator can read it.
fn read_meta(path: &Path) -> Result<Meta, QuorumError> {
    let text = fs::read_to_string(path).map_err(|e| io_err("read", path, e))?;
    let corrupt = |detail: String| QuorumError::Corrupt {
        path: path.to_owned(),
        detail,
    };
    let mut version = None;
    let mut cluster_id = None;
    let mut node_id = None;
    let mut incarnation = None;
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            return Err(corrupt(format!("line {line:?} is not key=value")));
        };
        let parse_u64 = |v: &str| {
            v.parse::<u64>()
                .map_err(|_| corrupt(format!("{key}={v} is not a number")))
        };
        match key {
            "version" => version = Some(parse_u64(value)?),
            "cluster.id" => cluster_id = Some(value.to_owned()),
            "node.id" => node_id = Some(parse_u64(value)?),
            "incarnation" => incarnation = Some(parse_u64(value)?),
            _ => {}
        }
    }
    let missing = |key: &str| corrupt(format!("{key} is missing"));
    Ok(Meta {
        version: u32::try_from(version.ok_or_else(|| missing("version"))?).unwrap_or(u32::MAX),
        cluster_id: cluster_id.ok_or_else(|| missing("cluster.id"))?,
        node_id: node_id.ok_or_else(|| missing("node.id"))?,
        incarnation: incarnation.ok_or_else(|| missing("incarnation"))?,
    })
}

fn write_meta(dir: &Path, meta: &Meta) -> Result<(), QuorumError> {
    let text = format!(
        "# Sluice metadata quorum member. Do not edit.\nversion={}\ncluster.id={}\nnode.id={}\nincarnation={}\n",
        meta.version, meta.cluster_id, meta.node_id, meta.incarnation
    );
    atomic_write(dir, META_FILE, text.as_bytes())
}

fn write_snapshot(dir: &Path, snapshot: &Snapshot) -> Result<(), QuorumError> {
    let payload = encode_message(snapshot, &dir.join(SNAPSHOT_FILE))?;
    write_framed(dir, SNAPSHOT_FILE, SNAPSHOT_MAGIC, &payload)
}

/// Writes `magic, len, crc32c, payload` atomically.
fn write_framed(dir: &Path, name: &str, magic: &[u8; 4], payload: &[u8]) -> Result<(), QuorumError> {
    let mut buf = Vec::with_capacity(12 + payload.len());
    buf.extend_from_slice(magic);
    buf.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    buf.extend_from_slice(&crc32c::crc32c(payload).to_be_bytes());
    buf.extend_from_slice(payload);
    atomic_write(dir, name, &buf)
}

/// Reads a file written by [`write_framed`]; `None` if it does not exist.
fn read_framed(path: &Path, magic: &[u8; 4]) -> Result<Option<Vec<u8>>, QuorumError> {
    let mut bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err("read", path, e)),
    };
    let corrupt = |detail: &str| QuorumError::Corrupt {
        path: path.to_owned(),
        detail: detail.to_owned(),
    };
    if bytes.len() < 12 || &bytes[0..4] != magic {
        return Err(corrupt("bad header"));
    }
    let len = u32::from_be_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]) as usize;
    let crc = u32::from_be_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
    if bytes.len() != 12 + len {
        return Err(corrupt("length does not match the file size"));
    }
    let payload = bytes.split_off(12);
    if crc32c::crc32c(&payload) != crc {
        return Err(corrupt("checksum mismatch"));
    }
    Ok(Some(payload))
}

/// Replaces `dir/name` with `bytes` so that a crash leaves the old or the new content.
fn atomic_write(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), QuorumError> {
    let tmp = dir.join(format!("{name}.tmp"));
    let target = dir.join(name);
    let mut file = File::create(&tmp).map_err(|e| io_err("create", &tmp, e))?;
    file.write_all(bytes)
        .and_then(|_| file.sync_all())
        .map_err(|e| io_err("write", &tmp, e))?;
    drop(file);
    fs::rename(&tmp, &target).map_err(|e| io_err("rename into place", &target, e))?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_err("fsync directory", dir, e))
}

fn open_log(path: &Path) -> Result<File, QuorumError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| io_err("open", path, e))
}

fn encode_record(buf: &mut Vec<u8>, entry: &Entry, path: &Path) -> Result<(), QuorumError> {
    let payload = encode_message(entry, path)?;
    buf.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    buf.extend_from_slice(&crc32c::crc32c(&payload).to_be_bytes());
    buf.extend_from_slice(&payload);
    Ok(())
}

fn encode_message(msg: &impl Message, path: &Path) -> Result<Vec<u8>, QuorumError> {
    let bytes = msg.encode_to_vec();
    if bytes.len() > MAX_RECORD_BYTES {
        return Err(QuorumError::RecordTooLarge {
            path: path.to_owned(),
            bytes: bytes.len(),
            max: MAX_RECORD_BYTES,
        });
    }
    Ok(bytes)
}

fn decode_message<M: Message + Default>(payload: &[u8], path: &Path) -> Result<M, QuorumError> {
    M::decode(payload).map_err(|e| QuorumError::Corrupt {
        path: path.to_owned(),
        detail: format!("undecodable record: {e}"),
    })
}

fn io_err(op: &'static str, path: &Path, source: io::Error) -> QuorumError {
    QuorumError::Io {
        op,
        path: path.to_owned(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use raft::Storage as _;

    fn entry(index: u64, term: u64, data: &[u8]) -> Entry {
        let mut e = Entry::default();
        e.index = index;
        e.term = term;
        e.data = data.to_vec().into();
        e
    }

    fn voter_bootstrap(initial: &dyn Fn() -> Vec<u8>) -> Bootstrap<'_> {
        let mut cs = ConfState::default();
        cs.voters = vec![1];
        Bootstrap::Voter {
            conf_state: cs,
            initial_data: initial,
        }
    }

    fn open_voter(dir: &Path) -> Result<DiskStorage, QuorumError> {
        DiskStorage::open(dir, "cluster-a", 1, voter_bootstrap(&Vec::new))
    }

    #[test]
    fn fresh_voter_directory_starts_from_bootstrap_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let s = open_voter(dir.path()).unwrap();
        assert_eq!(s.snapshot_index(), 1);
        assert_eq!(s.first_index(), 2);
        assert_eq!(s.last_index(), 1);
        assert_eq!(s.term(1).unwrap(), 1);
        let state = s.initial_state().unwrap();
        assert_eq!(state.conf_state.voters, vec![1]);
        assert_eq!(state.hard_state.commit, 1);
        assert_eq!(s.incarnation(), 1);
        drop(s);
        assert_eq!(open_voter(dir.path()).unwrap().incarnation(), 2);
    }

    #[test]
    fn appended_entries_survive_reopen_and_conflicting_suffix_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = open_voter(dir.path()).unwrap();
        s.append(&[entry(2, 2, b"a"), entry(3, 2, b"b"), entry(4, 2, b"c")])
            .unwrap();
        // A new leader overwrites entries 3.. with its own.
        s.append(&[entry(3, 3, b"x")]).unwrap();
        drop(s);
        let s = open_voter(dir.path()).unwrap();
        assert_eq!(s.last_index(), 3);
        let got = s.entries(2, 4, None, GetEntriesContext::empty(false)).unwrap();
        assert_eq!(got[0].data.as_ref(), b"a");
        assert_eq!(got[1].data.as_ref(), b"x");
        assert_eq!(got[1].term, 3);
    }

    #[test]
    fn torn_tail_of_entry_log_is_truncated_on_open() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = open_voter(dir.path()).unwrap();
        s.append(&[entry(2, 2, b"first"), entry(3, 2, b"second")]).unwrap();
        drop(s);
        let log_path = dir.path().join(LOG_FILE);
        let full = fs::read(&log_path).unwrap();
        // A crash half-way through appending entry 4: header plus part of the payload.
        let mut torn = Vec::new();
        encode_record(&mut torn, &entry(4, 2, b"third-entry-payload"), &log_path).unwrap();
        let mut bytes = full.clone();
        bytes.extend_from_slice(&torn[..torn.len() - 5]);
        fs::write(&log_path, &bytes).unwrap();

        let mut s = open_voter(dir.path()).unwrap();
        assert_eq!(s.last_index(), 3);
        assert_eq!(fs::read(&log_path).unwrap(), full, "tail cut at the last good record");
        // The log keeps working after the repair.
        s.append(&[entry(4, 2, b"again")]).unwrap();
        drop(s);
        let s = open_voter(dir.path()).unwrap();
        assert_eq!(s.term(4).unwrap(), 2);
    }

    #[test]
    fn flipped_bit_in_last_record_is_truncated_on_open() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = open_voter(dir.path()).unwrap();
        s.append(&[entry(2, 2, b"first"), entry(3, 2, b"second")]).unwrap();
        drop(s);
        let log_path = dir.path().join(LOG_FILE);
        let mut bytes = fs::read(&log_path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0x40;
        fs::write(&log_path, &bytes).unwrap();
        let s = open_voter(dir.path()).unwrap();
        assert_eq!(s.last_index(), 2);
    }

    #[test]
    fn snapshot_compacts_log_and_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = open_voter(dir.path()).unwrap();
        s.append(&[entry(2, 2, b"a"), entry(3, 2, b"b"), entry(4, 2, b"c")])
            .unwrap();
        s.set_commit(4).unwrap();
        let mut cs = ConfState::default();
        cs.voters = vec![1];
        s.create_snapshot(3, cs, b"state@3".to_vec()).unwrap();
        assert_eq!(s.first_index(), 4);
        assert!(matches!(
            s.entries(3, 4, None, GetEntriesContext::empty(false)),
            Err(raft::Error::Store(StorageError::Compacted))
        ));
        drop(s);
        let s = open_voter(dir.path()).unwrap();
        assert_eq!(s.snapshot_index(), 3);
        assert_eq!(s.term(3).unwrap(), 2);
        assert_eq!(s.last_index(), 4);
        assert_eq!(s.snapshot(0, 2).unwrap().data.as_ref(), b"state@3");
    }

    #[test]
    fn installed_snapshot_that_contradicts_stale_log_drops_it_on_open() {
        // Simulates a crash after the snapshot file was written but before the log was reset.
        let dir = tempfile::tempdir().unwrap();
        let mut s = open_voter(dir.path()).unwrap();
        s.append(&[entry(2, 2, b"a"), entry(3, 2, b"stale")]).unwrap();
        let mut snap = Snapshot::default();
        snap.mut_metadata().index = 3;
        snap.mut_metadata().term = 5;
        snap.mut_metadata().mut_conf_state().voters = vec![1];
        write_snapshot(dir.path(), &snap).unwrap();
        drop(s);
        let s = open_voter(dir.path()).unwrap();
        assert_eq!(s.snapshot_index(), 3);
        assert_eq!(s.last_index(), 3);
        assert_eq!(s.hard_state().commit, 3, "commit raised to the snapshot");
    }

    #[test]
    fn directory_of_another_cluster_or_node_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        drop(open_voter(dir.path()).unwrap());
        let other_cluster = DiskStorage::open(dir.path(), "cluster-b", 1, Bootstrap::Learner);
        assert!(matches!(other_cluster, Err(QuorumError::ClusterIdMismatch { .. })));
        let other_node = DiskStorage::open(dir.path(), "cluster-a", 2, Bootstrap::Learner);
        assert!(matches!(other_node, Err(QuorumError::NodeIdMismatch { .. })));
    }

    #[test]
    fn directory_with_other_format_version_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        drop(open_voter(dir.path()).unwrap());
        let meta = dir.path().join(META_FILE);
        let text = fs::read_to_string(&meta).unwrap().replace("version=1", "version=99");
        fs::write(&meta, text).unwrap();
        let err = open_voter(dir.path()).err().unwrap();
        assert!(matches!(err, QuorumError::FormatVersion { found: 99, .. }), "{err}");
    }

    /// A directory written by the build that encoded with rust-protobuf 2 (raft's
    /// `protobuf-codec`; `testdata/protobuf2/`, repeated fields unpacked) opens under prost
    /// with every field intact and keeps working, so upgrading needs no migration.
    #[test]
    fn directory_written_with_rust_protobuf_opens_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/protobuf2");
        for name in [META_FILE, LOG_FILE, HARD_STATE_FILE, SNAPSHOT_FILE] {
            fs::copy(fixture.join(name), dir.path().join(name)).unwrap();
        }
        let mut s = DiskStorage::open(dir.path(), "cluster-a", 1, Bootstrap::Learner).unwrap();
        assert_eq!(s.incarnation(), 2);
        let hs = s.hard_state();
        assert_eq!((hs.term, hs.vote, hs.commit), (3, 2, 3));
        let meta = s.latest_snapshot().get_metadata();
        assert_eq!((meta.index, meta.term), (1, 1));
        assert_eq!(meta.get_conf_state().voters, vec![1, 2, 3]);
        assert_eq!(s.latest_snapshot().data.as_ref(), b"initial-state");
        let got = s.entries(2, 5, None, GetEntriesContext::empty(false)).unwrap();
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].get_entry_type(), raft::eraftpb::EntryType::EntryConfChange);
        assert_eq!(got[0].context.as_ref(), 7u64.to_be_bytes());
        let change = raft::eraftpb::ConfChange::decode(got[0].data.as_ref()).unwrap();
        assert_eq!(change.get_change_type(), raft::eraftpb::ConfChangeType::AddLearnerNode);
        assert_eq!((change.node_id, change.context.as_ref()), (4, &b"127.0.0.1:9094"[..]));
        assert_eq!((got[1].index, got[1].term), (3, 2));
        assert_eq!(
            (got[1].data.as_ref(), got[1].context.as_ref()),
            (&b"command-three"[..], &b"ctx3"[..])
        );
        assert_eq!((got[2].index, got[2].term, got[2].data.is_empty()), (4, 3, true));
        // Entries appended under prost follow the old ones in the same file.
        s.append(&[entry(5, 3, b"new")]).unwrap();
        drop(s);
        let s = DiskStorage::open(dir.path(), "cluster-a", 1, Bootstrap::Learner).unwrap();
        assert_eq!(s.last_index(), 5);
        assert_eq!(
            s.entries(2, 6, None, GetEntriesContext::empty(false)).unwrap()[1..3],
            got[1..3]
        );
    }

    #[test]
    fn fresh_learner_directory_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        let s = DiskStorage::open(dir.path(), "cluster-a", 4, Bootstrap::Learner).unwrap();
        assert_eq!(s.first_index(), 1);
        assert_eq!(s.last_index(), 0);
        assert!(!s.initial_state().unwrap().initialized());
    }
}

//! The local metadata log: records appended durably (fsync) and replayed on start.
//!
//! This is the single-node stand-in for the Raft log: a file of `[len u32][crc32c u32][record]`
//! entries. Replay stops at the first torn or corrupt entry and truncates it, so a crash
//! mid-append loses only the unacknowledged record.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use super::records::MetadataRecord;

const ENTRY_HEADER_LEN: usize = 8;
/// No metadata record comes near this; a larger length means a corrupt entry.
const MAX_ENTRY_BYTES: usize = 16 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("metadata log {path}: {source}; check the data directory's permissions and free space")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("metadata record could not be encoded: {0}")]
    Encode(#[from] serde_json::Error),
}

pub struct MetadataJournal {
    path: PathBuf,
    file: File,
}

impl MetadataJournal {
    /// Opens (creating if needed) the journal in `dir` and returns every intact record.
    pub fn open(dir: &Path) -> Result<(MetadataJournal, Vec<MetadataRecord>), JournalError> {
        let path = dir.join("metadata.log");
        let io = |source| JournalError::Io { path: path.clone(), source };
        std::fs::create_dir_all(dir).map_err(io)?;
        let mut file = OpenOptions::new().create(true).read(true).append(true).open(&path).map_err(io)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(io)?;
        let (records, valid_len) = decode_entries(&bytes);
        if valid_len < bytes.len() {
            tracing::warn!(
                path = %path.display(),
                kept_bytes = valid_len,
                dropped_bytes = bytes.len() - valid_len,
                "metadata log had a torn or corrupt tail; truncating it (only an unacknowledged change is lost)"
            );
            file.set_len(valid_len as u64).map_err(io)?;
            file.sync_all().map_err(io)?;
        }
        Ok((MetadataJournal { path, file }, records))
    }

    /// Appends records and fsyncs before returning: a change is acknowledged only once durable.
    pub fn append(&mut self, records: &[MetadataRecord]) -> Result<(), JournalError> {
        let mut buf = Vec::new();
        for record in records {
            let body = serde_json::to_vec(record)?;
            buf.extend_from_slice(&(body.len() as u32).to_be_bytes());
            buf.extend_from_slice(&crc32c::crc32c(&body).to_be_bytes());
            buf.extend_from_slice(&body);
        }
        let io = |source| JournalError::Io { path: self.path.clone(), source };
        self.file.write_all(&buf).map_err(io)?;
        self.file.sync_data().map_err(io)
    }
}

/// Decodes entries up to the first invalid one; returns them and the valid prefix length.
fn decode_entries(bytes: &[u8]) -> (Vec<MetadataRecord>, usize) {
    let mut records = Vec::new();
    let mut pos = 0;
    while let Some(header) = bytes.get(pos..pos + ENTRY_HEADER_LEN) {
        let len = u32::from_be_bytes([header[0], header[1], header[2], header[3]]) as usize;
        let crc = u32::from_be_bytes([header[4], header[5], header[6], header[7]]);
        if len > MAX_ENTRY_BYTES {
            break;
        }
        let Some(body) = bytes.get(pos + ENTRY_HEADER_LEN..pos + ENTRY_HEADER_LEN + len) else {
            break;
        };
        if crc32c::crc32c(body) != crc {
            break;
        }
        let Ok(record) = serde_json::from_slice(body) else {
            break;
        };
        records.push(record);
        pos += ENTRY_HEADER_LEN + len;
    }
    (records, pos)
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    fn topic(name: &str) -> MetadataRecord {
        MetadataRecord::Topic { name: name.to_string(), topic_id: Uuid::new_v4() }
    }

    #[test]
    fn appended_records_are_replayed_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let (mut journal, replayed) = MetadataJournal::open(dir.path()).unwrap();
        assert!(replayed.is_empty());
        let records = vec![topic("a"), topic("b")];
        journal.append(&records).unwrap();
        journal.append(&[topic("c")]).unwrap();
        drop(journal);
        let (_, replayed) = MetadataJournal::open(dir.path()).unwrap();
        assert_eq!(replayed.len(), 3);
        assert_eq!(&replayed[..2], &records[..]);
    }

    #[test]
    fn torn_tail_is_truncated_and_appends_continue() {
        let dir = tempfile::tempdir().unwrap();
        let (mut journal, _) = MetadataJournal::open(dir.path()).unwrap();
        journal.append(&[topic("a")]).unwrap();
        drop(journal);
        let path = dir.path().join("metadata.log");
        let intact = std::fs::metadata(&path).unwrap().len();
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&[0, 0, 0, 50, 1, 2, 3, 4, b'{']).unwrap();
        drop(f);
        let (mut journal, replayed) = MetadataJournal::open(dir.path()).unwrap();
        assert_eq!(replayed.len(), 1);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), intact);
        journal.append(&[topic("b")]).unwrap();
        drop(journal);
        let (_, replayed) = MetadataJournal::open(dir.path()).unwrap();
        assert_eq!(replayed.len(), 2);
    }

    #[test]
    fn corrupt_entry_stops_replay_there() {
        let dir = tempfile::tempdir().unwrap();
        let (mut journal, _) = MetadataJournal::open(dir.path()).unwrap();
        journal.append(&[topic("a"), topic("b")]).unwrap();
        drop(journal);
        let path = dir.path().join("metadata.log");
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 2;
        bytes[last] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        let (_, replayed) = MetadataJournal::open(dir.path()).unwrap();
        assert_eq!(replayed.len(), 1);
    }
}

//! `partition.metadata` (Kafka's `PartitionMetadataFile`): the topic id a partition directory
//! belongs to, so that a directory left behind by a deleted topic is never opened as the log of
//! a new topic that reuses the name (deleted and re-created while this broker was down, or a
//! deletion that failed half-way).
//!
//! Kafka's format, with the topic id in Kafka's base64 form (URL-safe, unpadded, 22 characters):
//!
//! ```text
//! version: 0
//! topic_id: 4fG0Z2mkT2ShNIdV3bBTNQ
//! ```

use std::fs;
use std::io;
use std::path::Path;

use uuid::Uuid;

use super::LogError;
use crate::fs::{create_dir_if_missing, replace_file, sync_dir, write_atomically};

pub const PARTITION_METADATA_FILE: &str = "partition.metadata";
const VERSION: i32 = 0;
/// Anything larger is not a file we wrote.
const MAX_FILE_BYTES: u64 = 4096;
const BASE64_URL: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Kafka's `Uuid.toString()`: the 16 bytes, big-endian, in URL-safe base64 without padding.
pub fn kafka_topic_id_string(topic_id: Uuid) -> String {
    let bytes = topic_id.as_bytes();
    let mut out = String::with_capacity(22);
    for chunk in bytes.chunks(3) {
        let mut group = [0u8; 3];
        group[..chunk.len()].copy_from_slice(chunk);
        let bits = u32::from_be_bytes([0, group[0], group[1], group[2]]);
        for i in 0..=chunk.len() {
            out.push(BASE64_URL[((bits >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

/// Parses Kafka's string form of a topic id.
pub fn parse_kafka_topic_id(text: &str) -> Option<Uuid> {
    if text.len() != 22 {
        return None;
    }
    let mut bytes = Vec::with_capacity(18);
    for chunk in text.as_bytes().chunks(4) {
        let mut bits = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            let sextet = BASE64_URL.iter().position(|&b| b == c)? as u32;
            bits |= sextet << (18 - 6 * i);
        }
        bytes.extend_from_slice(&bits.to_be_bytes()[1..chunk.len()]);
        // The last character of a partial group must not carry bits past the data.
        if chunk.len() == 2 && bits & 0xFFFF != 0 {
            return None;
        }
    }
    Some(Uuid::from_bytes(bytes.try_into().ok()?))
}

/// The topic id recorded in `dir`, `None` when the file is absent (a directory created by an
/// older Sluice, or no directory at all). A file that does not parse is `Corrupt`.
pub fn read_topic_id(dir: &Path) -> Result<Option<Uuid>, LogError> {
    let path = dir.join(PARTITION_METADATA_FILE);
    let text = match fs::metadata(&path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
        Ok(meta) if meta.len() > MAX_FILE_BYTES => {
            return Err(corrupt(&path, format!("{} bytes is too large", meta.len())))
        }
        Ok(_) => fs::read_to_string(&path).map_err(|e| corrupt(&path, e.to_string()))?,
    };
    let field = |name: &str| {
        text.lines()
            .filter_map(|line| line.split_once(':'))
            .find(|(key, _)| key.trim() == name)
            .map(|(_, value)| value.trim())
    };
    match field("version").map(str::parse::<i32>) {
        Some(Ok(VERSION)) => {}
        other => return Err(corrupt(&path, format!("unsupported version {other:?}"))),
    }
    let topic_id = field("topic_id").ok_or_else(|| corrupt(&path, "no topic_id".to_string()))?;
    parse_kafka_topic_id(topic_id)
        .map(Some)
        .ok_or_else(|| corrupt(&path, format!("invalid topic_id {topic_id:?}")))
}

/// Writes `dir/partition.metadata` for `topic_id` (atomically, through the checkpoint helper).
pub fn write(dir: &Path, topic_id: Uuid) -> io::Result<()> {
    write_atomically(&dir.join(PARTITION_METADATA_FILE), metadata_text(topic_id).as_bytes())
}

/// Readies `dir` to be opened as the log of `topic_id`, as Kafka checks a log's topic id on load:
/// a directory whose `partition.metadata` names another topic id belongs to a topic that no longer
/// exists and is removed, so the new topic starts with an empty log; a directory without the file
/// gets one; a new directory is created with it. Returns whether an old directory was removed.
///
/// A new directory costs one fsync of the parent (the directory's own entry, and the removal of
/// an old one). Its `partition.metadata` is written whole (temp file, fsync, rename) but the
/// rename is made durable by the one directory fsync [`crate::log::PartitionLog::open`] does
/// when it creates the first segment in the empty directory, before any append: a crash before
/// that leaves no file, and the next start writes it again.
pub fn prepare_partition_dir(dir: &Path, topic_id: Uuid) -> Result<bool, LogError> {
    let mut removed = false;
    match read_topic_id(dir)? {
        Some(found) if found == topic_id => return Ok(false),
        Some(found) => {
            tracing::warn!(
                dir = %dir.display(),
                found_topic_id = %kafka_topic_id_string(found),
                topic_id = %kafka_topic_id_string(topic_id),
                "partition directory belongs to an older topic of the same name (deleted and re-created, or a failed \
                 deletion); removing it and starting an empty log"
            );
            fs::remove_dir_all(dir)?;
            removed = true;
        }
        None => {}
    }
    if !create_dir_if_missing(dir)? {
        // An existing directory without the file (an older Sluice): replaced durably now, as
        // its log may already have data.
        write(dir, topic_id)?;
        return Ok(removed);
    }
    replace_file(&dir.join(PARTITION_METADATA_FILE), metadata_text(topic_id).as_bytes())?;
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        sync_dir(parent)?;
    }
    Ok(removed)
}

fn metadata_text(topic_id: Uuid) -> String {
    format!("version: {VERSION}\ntopic_id: {}\n", kafka_topic_id_string(topic_id))
}

fn corrupt(path: &Path, reason: String) -> LogError {
    LogError::Corrupt(format!("{}: {reason}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_ids_use_kafkas_base64_form() {
        // Kafka: new Uuid(0x0123456789abcdefL, 0xfedcba9876543210L).toString()
        let id = Uuid::from_u128(0x0123_4567_89ab_cdef_fedc_ba98_7654_3210);
        assert_eq!(kafka_topic_id_string(id), "ASNFZ4mrze_-3LqYdlQyEA");
        assert_eq!(parse_kafka_topic_id("ASNFZ4mrze_-3LqYdlQyEA"), Some(id));
        assert_eq!(kafka_topic_id_string(Uuid::nil()), "AAAAAAAAAAAAAAAAAAAAAA");
        assert_eq!(parse_kafka_topic_id("ASNFZ4mrze_-3LqYdlQyEB"), None, "padding bits set");
        assert_eq!(parse_kafka_topic_id("short"), None);
        for _ in 0..100 {
            let id = Uuid::new_v4();
            assert_eq!(parse_kafka_topic_id(&kafka_topic_id_string(id)), Some(id));
        }
    }

    #[test]
    fn the_file_is_written_in_kafkas_format_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let id = Uuid::from_u128(0x0123_4567_89ab_cdef_fedc_ba98_7654_3210);
        assert_eq!(read_topic_id(dir.path()).unwrap(), None);
        write(dir.path(), id).unwrap();
        assert_eq!(
            fs::read_to_string(dir.path().join(PARTITION_METADATA_FILE)).unwrap(),
            "version: 0\ntopic_id: ASNFZ4mrze_-3LqYdlQyEA\n"
        );
        assert_eq!(read_topic_id(dir.path()).unwrap(), Some(id));
        fs::write(dir.path().join(PARTITION_METADATA_FILE), "version: 0\ntopic_id: nope\n").unwrap();
        assert!(matches!(read_topic_id(dir.path()), Err(LogError::Corrupt(_))));
    }

    #[test]
    fn a_directory_of_another_topic_id_is_removed_and_one_without_the_file_gets_it() {
        let data = tempfile::tempdir().unwrap();
        let dir = data.path().join("orders-0");
        let (old, new) = (Uuid::new_v4(), Uuid::new_v4());
        assert!(!prepare_partition_dir(&dir, old).unwrap(), "a new directory");
        fs::write(dir.join("00000000000000000000.log"), b"old topic's data").unwrap();
        assert!(!prepare_partition_dir(&dir, old).unwrap(), "same topic: kept");
        assert!(dir.join("00000000000000000000.log").exists());

        assert!(prepare_partition_dir(&dir, new).unwrap(), "re-created topic: removed");
        assert!(!dir.join("00000000000000000000.log").exists());
        assert_eq!(read_topic_id(&dir).unwrap(), Some(new));

        // A directory from an older Sluice: kept, and the file written.
        fs::remove_file(dir.join(PARTITION_METADATA_FILE)).unwrap();
        fs::write(dir.join("00000000000000000000.log"), b"data").unwrap();
        assert!(!prepare_partition_dir(&dir, new).unwrap());
        assert!(dir.join("00000000000000000000.log").exists());
        assert_eq!(read_topic_id(&dir).unwrap(), Some(new));
    }
}

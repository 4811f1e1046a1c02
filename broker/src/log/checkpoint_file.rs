//! Kafka's checkpoint files (`org.apache.kafka.storage.internals.checkpoint`): small text files
//! that record where some state stands (high watermarks, leader epochs, cleaned offsets, a
//! partition's topic id, the data dir's identity).
//!
//! Every one of them is replaced the same way, so a crash leaves the old file or the new one,
//! whole, never a mix: write a temporary file beside it, fsync it, rename it over the target, and
//! fsync the directory so the rename itself is durable: [`crate::fs::write_atomically`] is that one way.
//!
//! [`OffsetCheckpoint`] is Kafka's `OffsetCheckpointFile` format, shared by
//! `replication-offset-checkpoint` and `cleaner-offset-checkpoint`:
//!
//! ```text
//! 0                  version
//! 2                  number of entries
//! orders 0 1200      <topic> <partition> <offset>
//! orders 1 977
//! ```

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::Path;

use crate::fs::write_atomically;

const OFFSET_CHECKPOINT_VERSION: &str = "0";

/// Kafka's `OffsetCheckpointFile`: an offset per `(topic, partition)`.
pub struct OffsetCheckpoint;

impl OffsetCheckpoint {
    /// Reads the checkpoint at `path`; a missing file is empty, and lines that do not parse are
    /// skipped with a warning (every user of these files treats a missing entry as "start over").
    pub fn read(path: &Path) -> HashMap<(String, i32), i64> {
        let Ok(text) = fs::read_to_string(path) else {
            return HashMap::new();
        };
        let mut lines = text.lines();
        if lines.next().map(str::trim) != Some(OFFSET_CHECKPOINT_VERSION) {
            tracing::warn!(path = %path.display(), "ignoring an offset checkpoint of an unknown version");
            return HashMap::new();
        }
        let _count = lines.next();
        lines
            .filter_map(|line| {
                let parsed = parse_offset_line(line);
                if parsed.is_none() {
                    tracing::warn!(path = %path.display(), line, "skipping an unreadable offset checkpoint line");
                }
                parsed
            })
            .collect()
    }

    /// Replaces the checkpoint at `path` with `entries`, in the order given.
    pub fn write(path: &Path, entries: &[(impl AsRef<str>, i32, i64)]) -> io::Result<()> {
        use std::fmt::Write as _;
        let mut text = format!("{OFFSET_CHECKPOINT_VERSION}\n{}\n", entries.len());
        for (topic, partition, offset) in entries {
            // Writing to a String cannot fail.
            let _ = writeln!(text, "{} {partition} {offset}", topic.as_ref());
        }
        write_atomically(path, text.as_bytes())
    }
}

fn parse_offset_line(line: &str) -> Option<((String, i32), i64)> {
    let mut fields = line.split_whitespace();
    let topic = fields.next()?.to_string();
    let partition = fields.next()?.parse().ok()?;
    let offset = fields.next()?.parse().ok()?;
    fields.next().is_none().then_some(((topic, partition), offset))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leftover_temporary_file_from_a_crash_does_not_change_what_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cleaner-offset-checkpoint");
        OffsetCheckpoint::write(&path, &[("orders", 0, 42)]).unwrap();
        // A crash after writing the temporary file but before the rename.
        fs::write(dir.path().join("cleaner-offset-checkpoint.tmp"), "0\n1\norders 0 9").unwrap();
        assert_eq!(OffsetCheckpoint::read(&path).get(&("orders".into(), 0)), Some(&42));
        OffsetCheckpoint::write(&path, &[("orders", 0, 50)]).unwrap();
        assert_eq!(OffsetCheckpoint::read(&path).get(&("orders".into(), 0)), Some(&50));
        assert!(!dir.path().join("cleaner-offset-checkpoint.tmp").exists());
    }

    #[test]
    fn offset_checkpoints_use_kafkas_text_format() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("replication-offset-checkpoint");
        OffsetCheckpoint::write(&path, &[("a", 0, 5), ("my-topic", 3, 7)]).unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "0\n2\na 0 5\nmy-topic 3 7\n");
        fs::write(&path, "0\n2\norders 0 x\nok 1 5\n").unwrap();
        let read = OffsetCheckpoint::read(&path);
        assert_eq!(read.len(), 1);
        assert_eq!(read.get(&("ok".into(), 1)), Some(&5));
        fs::write(&path, "1\n1\nok 1 5\n").unwrap();
        assert!(OffsetCheckpoint::read(&path).is_empty(), "unknown version");
    }
}

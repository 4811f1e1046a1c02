//! The high-watermark checkpoint (Kafka's `replication-offset-checkpoint` in the data dir):
//! each hosted partition's high watermark, written periodically and at shutdown, so that a
//! restarted replica knows how much of its log was committed.
//!
//! Format, as Kafka writes it: a version line (0), a count line, then `topic partition offset`
//! per line. Written through `log::checkpoint_file` (temp file, fsync, rename, directory fsync).

use std::collections::HashMap;
use std::path::Path;

use crate::log::OffsetCheckpoint;

pub const FILE_NAME: &str = "replication-offset-checkpoint";

/// Reads the checkpoint; a missing file is empty, and lines that do not parse are skipped
/// with a warning (the worst outcome is a lower starting high watermark).
pub fn read(data_dir: &Path) -> HashMap<(String, i32), i64> {
    OffsetCheckpoint::read(&data_dir.join(FILE_NAME))
}

/// Replaces the checkpoint with `entries` (through the one checkpoint-file helper).
pub fn write(data_dir: &Path, entries: &[(impl AsRef<str>, i32, i64)]) -> std::io::Result<()> {
    OffsetCheckpoint::write(&data_dir.join(FILE_NAME), entries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn a_written_checkpoint_reads_back_and_bad_lines_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read(dir.path()).is_empty());
        write(dir.path(), &[("orders", 0, 42), ("my-topic", 3, 7)]).unwrap();
        let read_back = read(dir.path());
        assert_eq!(read_back.get(&("orders".into(), 0)), Some(&42));
        assert_eq!(read_back.get(&("my-topic".into(), 3)), Some(&7));
        fs::write(dir.path().join(FILE_NAME), "0\n2\norders 0 x\nok 1 5\n").unwrap();
        let read_back = read(dir.path());
        assert_eq!(read_back.len(), 1);
        assert_eq!(read_back.get(&("ok".into(), 1)), Some(&5));
    }
}

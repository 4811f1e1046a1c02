//! The high-watermark checkpoint (Kafka's `replication-offset-checkpoint` in the data dir):
//! each hosted partition's high watermark, written periodically and at shutdown, so that a
//! restarted replica knows how much of its log was committed.
//!
//! Format, as Kafka writes it: a version line (0), a count line, then `topic partition offset`
//! per line. Written to a temporary file, fsynced and renamed over the old one.

use std::collections::HashMap;
use std::fs;
use std::io::Write;
use std::path::Path;

pub const FILE_NAME: &str = "replication-offset-checkpoint";
const VERSION: &str = "0";

/// Reads the checkpoint; a missing file is empty, and lines that do not parse are skipped
/// with a warning (the worst outcome is a lower starting high watermark).
pub fn read(data_dir: &Path) -> HashMap<(String, i32), i64> {
    let path = data_dir.join(FILE_NAME);
    let Ok(text) = fs::read_to_string(&path) else {
        return HashMap::new();
    };
    let mut lines = text.lines();
    if lines.next().map(str::trim) != Some(VERSION) {
        tracing::warn!(path = %path.display(), "ignoring a high-watermark checkpoint of an unknown version");
        return HashMap::new();
    }
    let _count = lines.next();
    lines
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let parsed = (|| {
                let topic = fields.next()?.to_string();
                let partition = fields.next()?.parse().ok()?;
                let offset = fields.next()?.parse().ok()?;
                Some(((topic, partition), offset))
            })();
            if parsed.is_none() {
                tracing::warn!(path = %path.display(), line, "skipping an unreadable high-watermark checkpoint line");
            }
            parsed
        })
        .collect()
}

/// Replaces the checkpoint with `entries`.
pub fn write(data_dir: &Path, entries: &[(String, i32, i64)]) -> std::io::Result<()> {
    let mut text = format!("{VERSION}\n{}\n", entries.len());
    for (topic, partition, offset) in entries {
        text.push_str(&format!("{topic} {partition} {offset}\n"));
    }
    let tmp = data_dir.join(format!("{FILE_NAME}.tmp"));
    let mut file = fs::File::create(&tmp)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    fs::rename(&tmp, data_dir.join(FILE_NAME))?;
    fs::File::open(data_dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_checkpoint_reads_back_and_bad_lines_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read(dir.path()).is_empty());
        write(dir.path(), &[("orders".into(), 0, 42), ("my-topic".into(), 3, 7)]).unwrap();
        let read_back = read(dir.path());
        assert_eq!(read_back.get(&("orders".into(), 0)), Some(&42));
        assert_eq!(read_back.get(&("my-topic".into(), 3)), Some(&7));
        fs::write(dir.path().join(FILE_NAME), "0\n2\norders 0 x\nok 1 5\n").unwrap();
        let read_back = read(dir.path());
        assert_eq!(read_back.len(), 1);
        assert_eq!(read_back.get(&("ok".into(), 1)), Some(&5));
    }
}

//! Bridges raft-rs's `slog` logging into `tracing`, so Raft's own lines ("became leader at
//! term 5", rejected votes, ...) land in the broker's log with everything else.
//!
//! A ten-line `slog::Drain` beats pulling in `slog-stdlog` + `tracing-log` for the same result.
//!
//! raft-rs names members by raft id (node id + 1, see [`crate::raft_id`]); every line is written
//! with node ids instead: the key-values that carry one (`raft_id` as `node_id`, `from`, `to`,
//! `vote`, ...), and the ids raft-rs writes into its message text and debug-printed
//! configurations (`RawNode created with id 2`, `cast vote for 3`, `voters: {2, 3, 4}`), found
//! by the words raft-rs puts before them ([`node_ids_in_text`]).

use std::fmt::{self, Write as _};

use slog::{Drain, Key, Level, OwnedKVList, Record, Serializer, KV};

/// The logger handed to `RawNode` (raft-rs adds `raft_id` to every record itself).
pub(crate) fn raft_logger() -> slog::Logger {
    slog::Logger::root(TracingDrain, slog::o!())
}

/// Forwards slog records to `tracing` events with target `raft`, key-values appended as `k=v`.
struct TracingDrain;

impl Drain for TracingDrain {
    type Ok = ();
    type Err = slog::Never;

    fn log(&self, record: &Record<'_>, values: &OwnedKVList) -> Result<(), slog::Never> {
        macro_rules! forward {
            ($level:expr) => {
                if tracing::enabled!(target: "raft", $level) {
                    let line = format_record(record, values);
                    tracing::event!(target: "raft", $level, "{line}");
                }
            };
        }
        match record.level() {
            Level::Critical | Level::Error => forward!(tracing::Level::ERROR),
            Level::Warning => forward!(tracing::Level::WARN),
            Level::Info => forward!(tracing::Level::INFO),
            Level::Debug => forward!(tracing::Level::DEBUG),
            Level::Trace => forward!(tracing::Level::TRACE),
        }
        Ok(())
    }
}

fn format_record(record: &Record<'_>, values: &OwnedKVList) -> String {
    let mut out = KvWriter(node_ids_in_text(&record.msg().to_string()));
    // Serialization into a String cannot fail; a failure would only lose key-values.
    let _ = record.kv().serialize(record, &mut out);
    let _ = values.serialize(record, &mut out);
    out.0
}

/// What raft-rs writes right before a raft id in its message text (`RawNode created with id {}`,
/// `from {}`, `to {}`, `cast vote for {}`, `progress of {}`, `[... vote: {}]`), and before a set of
/// them in a debug-printed configuration (`voters: {2, 3, 4}`).
const BEFORE_RAFT_ID: &[&str] = &["id ", "from ", "to ", "for ", "of ", "vote: "];
const BEFORE_RAFT_ID_SET: &[&str] = &["voters: {", "learners: {", "learners_next: {"];

/// `text` with the raft ids raft-rs wrote into it replaced by node ids. A marker counts only at
/// a word start ("into 5" is not "to 5"); 0 (raft-rs's "none") is left as it is.
fn node_ids_in_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut at_word_start = true;
    while let Some(c) = rest.chars().next() {
        let single = BEFORE_RAFT_ID.iter().find(|m| rest.starts_with(**m));
        let set = BEFORE_RAFT_ID_SET.iter().find(|m| rest.starts_with(**m));
        match (at_word_start, single, set) {
            (true, Some(marker), _) => {
                out.push_str(marker);
                rest = write_node_id(&mut out, &rest[marker.len()..]);
            }
            (true, None, Some(marker)) => {
                out.push_str(marker);
                rest = &rest[marker.len()..];
                while let Some(d) = rest
                    .chars()
                    .next()
                    .filter(|d| d.is_ascii_digit() || *d == ',' || *d == ' ')
                {
                    if d.is_ascii_digit() {
                        rest = write_node_id(&mut out, rest);
                    } else {
                        out.push(d);
                        rest = &rest[1..];
                    }
                }
            }
            _ => {
                out.push(c);
                rest = &rest[c.len_utf8()..];
            }
        }
        at_word_start = !out.chars().next_back().is_some_and(|c| c.is_alphanumeric() || c == '_');
    }
    out
}

/// Writes the raft id `text` starts with as a node id; returns what follows it.
fn write_node_id<'a>(out: &mut String, text: &'a str) -> &'a str {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    match text[..digits].parse::<u64>() {
        Ok(id) if id > 0 => {
            let _ = write!(out, "{}", crate::node_id_of(id));
        }
        _ => out.push_str(&text[..digits]),
    }
    &text[digits..]
}

struct KvWriter(String);

/// raft-rs's key-values whose value is a raft id.
const RAFT_ID_KEYS: &[&str] = &[
    "raft_id",
    "id",
    "from",
    "to",
    "vote",
    "lead_transferee",
    "last_lead_transferee",
];

impl Serializer for KvWriter {
    fn emit_arguments(&mut self, key: Key, val: &fmt::Arguments<'_>) -> slog::Result {
        let raft_id = RAFT_ID_KEYS
            .contains(&key)
            .then(|| val.to_string().parse::<u64>().ok())
            .flatten();
        let _ = match raft_id {
            // 0 is raft-rs's "none" (no vote, no leader), not a member.
            Some(id) if id > 0 => {
                let key = if key == "raft_id" { "node_id" } else { key };
                write!(self.0, " {key}={}", crate::node_id_of(id))
            }
            _ => write!(self.0, " {key}={}", node_ids_in_text(&val.to_string())),
        };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raft_ids_in_key_values_are_written_as_node_ids() {
        use std::sync::{Arc, Mutex};
        struct Capture(Arc<Mutex<String>>);
        impl Drain for Capture {
            type Ok = ();
            type Err = slog::Never;
            fn log(&self, record: &Record<'_>, values: &OwnedKVList) -> Result<(), slog::Never> {
                *self.0.lock().unwrap() = super::format_record(record, values);
                Ok(())
            }
        }
        let line = Arc::new(Mutex::new(String::new()));
        let logger = slog::Logger::root(Capture(line.clone()), slog::o!("raft_id" => 2u64));
        slog::info!(logger, "cast vote"; "from" => 4u64, "vote" => 0u64, "term" => 7u64);
        assert_eq!(*line.lock().unwrap(), "cast vote term=7 vote=0 from=3 node_id=1");
    }

    #[test]
    fn raft_ids_in_message_text_are_written_as_node_ids() {
        let cases = [
            ("RawNode created with id 2.", "RawNode created with id 1."),
            (
                "[logterm: 1, index: 1, vote: 0] cast vote for 3 [logterm: 1, index: 1] at term 2",
                "[logterm: 1, index: 1, vote: 0] cast vote for 2 [logterm: 1, index: 1] at term 2",
            ),
            (
                "received a message with higher term from 4",
                "received a message with higher term from 3",
            ),
            (
                "Configuration { voters: {4, 2, 3} }, learners: {}, learners_next: {5}",
                "Configuration { voters: {3, 1, 2} }, learners: {}, learners_next: {4}",
            ),
            (
                "moved into 5 states at term 9 index 7",
                "moved into 5 states at term 9 index 7",
            ),
            ("became leader at term 5", "became leader at term 5"),
        ];
        for (raft, node) in cases {
            assert_eq!(node_ids_in_text(raft), node, "{raft}");
        }
    }

    #[test]
    fn raft_log_lines_reach_tracing_without_panicking() {
        let logger = super::raft_logger();
        slog::info!(logger, "became leader"; "term" => 3);
        slog::debug!(logger, "ignored unless enabled");
    }
}

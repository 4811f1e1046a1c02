//! Bridges raft-rs's `slog` logging into `tracing`, so Raft's own lines ("became leader at
//! term 5", rejected votes, ...) land in the broker's log with everything else.
//!
//! A ten-line `slog::Drain` beats pulling in `slog-stdlog` + `tracing-log` for the same result.
//!
//! raft-rs names members by raft id (node id + 1, see [`crate::raft_id`]); the key-values that
//! carry one (`raft_id`, `from`, `to`, `vote`, ...) are written as node ids, `raft_id` as
//! `node_id`. Ids inside raft-rs's message text and its debug-printed configurations (info and
//! debug lines only) stay raft ids.

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
    let mut out = KvWriter(record.msg().to_string());
    // Serialization into a String cannot fail; a failure would only lose key-values.
    let _ = record.kv().serialize(record, &mut out);
    let _ = values.serialize(record, &mut out);
    out.0
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
            _ => write!(self.0, " {key}={val}"),
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
    fn raft_log_lines_reach_tracing_without_panicking() {
        let logger = super::raft_logger();
        slog::info!(logger, "became leader"; "term" => 3);
        slog::debug!(logger, "ignored unless enabled");
    }
}

//! Bridges raft-rs's `slog` logging into `tracing`, so Raft's own lines ("became leader at
//! term 5", rejected votes, ...) land in the broker's log with everything else.
//!
//! A ten-line `slog::Drain` beats pulling in `slog-stdlog` + `tracing-log` for the same result.

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

impl Serializer for KvWriter {
    fn emit_arguments(&mut self, key: Key, val: &fmt::Arguments<'_>) -> slog::Result {
        let _ = write!(self.0, " {key}={val}");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn raft_log_lines_reach_tracing_without_panicking() {
        let logger = super::raft_logger();
        slog::info!(logger, "became leader"; "term" => 3);
        slog::debug!(logger, "ignored unless enabled");
    }
}

//! The wall clock, in Kafka's unit. Decision code (controller, group coordinator, ISR and high
//! watermark tracking) takes `now` as an argument so it can be tested with a fake clock; only
//! the edges that feed it read this. A leaf module: it imports nothing from the crate.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch: Kafka's timestamp unit.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

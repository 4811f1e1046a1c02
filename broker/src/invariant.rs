//! Invariants the design relies on, checked in release builds where they are established
//! (ARCHITECTURE.md lists them). One that does not hold is a bug in sluice, never bad input
//! (input is refused with a Kafka error where it arrives): [`broken`] logs it with the values,
//! the caller refuses the operation at hand, and the node stops the way SIGTERM stops it
//! (leadership handed over first), then exits with a failure, rather than serve data it can no
//! longer trust. The soak counts the log line as a violation.
//!
//! Failpoints (`SLUICE_FAILPOINTS`, a comma-separated list read once at start) make a check
//! see a violating value, so tests can watch a real node stop on it, or hold a step open so a
//! test can kill the node inside a window that is otherwise microseconds wide; they are not
//! settings and do nothing unless named.

use std::sync::{LazyLock, OnceLock};

use tokio::sync::Notify;

/// What the log line says; the soak and the tests look for it.
pub const LOG_MESSAGE: &str = "an invariant sluice relies on does not hold; this is a bug in sluice, and this node stops rather than serve data it cannot trust. Report it with this log, then restart the node: it recovers from its log";

static FIRST: OnceLock<String> = OnceLock::new();
static STOP: Notify = Notify::const_new();
/// Every report, for unit tests: they share one process, so a test looks for its own report
/// among the others' rather than expecting to be first.
#[cfg(test)]
static REPORTED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Reports a broken invariant (`what` names it with the values) and asks the node to stop.
/// The caller refuses the operation that found it.
pub fn broken(what: String) {
    tracing::error!(invariant = %what, "{LOG_MESSAGE}");
    #[cfg(test)]
    REPORTED.lock().unwrap_or_else(|e| e.into_inner()).push(what.clone());
    if FIRST.set(what).is_ok() {
        // A stored permit: the node's main task sees it even if it was not waiting yet.
        STOP.notify_one();
    }
}

/// Resolves with the first broken invariant once one is reported.
pub async fn stop_requested() -> String {
    loop {
        if let Some(what) = FIRST.get() {
            return what.clone();
        }
        STOP.notified().await;
    }
}

/// Whether any test of this process reported a broken invariant containing `text`.
#[cfg(test)]
pub fn reported(text: &str) -> bool {
    REPORTED.lock().unwrap_or_else(|e| e.into_inner()).iter().any(|r| r.contains(text))
}

static FAILPOINTS: LazyLock<Vec<String>> = LazyLock::new(|| {
    std::env::var("SLUICE_FAILPOINTS")
        .map(|v| v.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect())
        .unwrap_or_default()
});

/// Whether the failpoint `name` was named in `SLUICE_FAILPOINTS` at start.
pub fn failpoint(name: &str) -> bool {
    FAILPOINTS.iter().any(|f| f == name)
}

/// Failpoint: the leader's next high watermark candidate is one past its log end offset.
pub static HW_PAST_LOG_END: LazyLock<bool> = LazyLock::new(|| failpoint("hw_past_log_end"));

/// Failpoint: the group write that stores a replaced static member's new member id waits
/// [`STALL_STATIC_MEMBER_STORE_MS`] before it starts, logging [`STALL_STATIC_MEMBER_STORE_LOG`],
/// so a test can kill the coordinator between the JoinGroup and its write.
pub static STALL_STATIC_MEMBER_STORE: LazyLock<bool> = LazyLock::new(|| failpoint("stall_static_member_store"));
pub const STALL_STATIC_MEMBER_STORE_MS: u64 = 3_000;
pub const STALL_STATIC_MEMBER_STORE_LOG: &str = "failpoint stall_static_member_store: holding the write of a replaced static member";

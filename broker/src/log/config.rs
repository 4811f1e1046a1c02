//! Per-topic log settings, named after Kafka's topic configs.

/// How a partition log rolls, indexes, retains and flushes. Defaults are Kafka's.
#[derive(Debug, Clone, PartialEq)]
pub struct LogConfig {
    /// `segment.bytes`: roll when the active segment would grow past this.
    pub segment_bytes: u64,
    /// `segment.ms`: roll when the active segment is older than this.
    pub segment_ms: i64,
    /// `retention.ms`: delete segments whose newest record is older than this; -1 = forever.
    pub retention_ms: i64,
    /// `retention.bytes`: delete the oldest segments while the log is larger; -1 = no limit.
    pub retention_bytes: i64,
    /// `index.interval.bytes`: bytes appended between two sparse index entries.
    pub index_interval_bytes: u32,
    /// `max.message.bytes`: largest record batch a producer may append.
    pub max_message_bytes: u32,
    /// `message.timestamp.type` == `LogAppendTime`: the broker stamps batches with its clock.
    pub message_timestamp_log_append: bool,
    /// `flush.messages`: fsync after this many appended records (default never: replication
    /// provides durability).
    pub flush_interval_messages: u64,
    /// `flush.ms`: fsync when the last fsync is older than this (default never).
    pub flush_interval_ms: i64,
    /// `cleanup.policy` includes `delete`: retention by time and size deletes old segments.
    pub cleanup_policy_delete: bool,
    /// `cleanup.policy` includes `compact`: the log cleaner keeps the latest record per key.
    pub cleanup_policy_compact: bool,
    /// `min.cleanable.dirty.ratio`: clean once dirty bytes / cleanable bytes reach this.
    pub min_cleanable_dirty_ratio: f64,
    /// `min.compaction.lag.ms`: records younger than this stay uncompacted.
    pub min_compaction_lag_ms: i64,
    /// `delete.retention.ms`: how long a tombstone (null value) survives compaction.
    pub delete_retention_ms: i64,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: 1_073_741_824,
            segment_ms: 604_800_000,
            retention_ms: 604_800_000,
            retention_bytes: -1,
            index_interval_bytes: 4096,
            max_message_bytes: 1_048_588,
            message_timestamp_log_append: false,
            flush_interval_messages: u64::MAX,
            flush_interval_ms: i64::MAX,
            cleanup_policy_delete: true,
            cleanup_policy_compact: false,
            min_cleanable_dirty_ratio: 0.5,
            min_compaction_lag_ms: 0,
            delete_retention_ms: 86_400_000,
        }
    }
}

/// Kafka caps `segment.bytes` at `Int.MaxValue`; index entries store positions as u32, and every
/// batch start in a segment stays below this bound.
pub(super) const MAX_SEGMENT_BYTES: u64 = i32::MAX as u64;

impl LogConfig {
    /// `segment_bytes` clamped to what a segment's u32 file positions can address.
    pub(super) fn effective_segment_bytes(&self) -> u64 {
        self.segment_bytes.clamp(1, MAX_SEGMENT_BYTES)
    }
}

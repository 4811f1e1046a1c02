//! Errors of the partition log and the Kafka error codes they become.

use kafka_protocol::error::ResponseError;
use sluice_protocol::batch::BatchError;

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The disk failed us. Like Kafka, treat the log as offline afterwards: in-memory state may be
    /// ahead of what reached the disk.
    #[error(
        "partition log I/O failed: {0}; check the data directory's disk, permissions and free \
         space, then restart the broker to recover the log"
    )]
    Io(#[from] std::io::Error),
    #[error("offset {offset} is out of range: the log holds offsets {log_start} up to {log_end} (exclusive)")]
    OffsetOutOfRange { offset: i64, log_start: i64, log_end: i64 },
    #[error(
        "record batch of {batch_bytes} bytes exceeds max.message.bytes ({max}); raise the topic's \
         max.message.bytes or lower the producer's batch.size"
    )]
    MessageTooLarge { batch_bytes: usize, max: u32 },
    #[error(
        "record batch of {batch_bytes} bytes is larger than segment.bytes ({segment_bytes}); \
         raise the topic's segment.bytes"
    )]
    RecordBatchTooLarge { batch_bytes: usize, segment_bytes: u64 },
    #[error("invalid record batch: {0}")]
    InvalidBatch(#[from] BatchError),
    /// A stored batch whose records the log cleaner cannot decode (within the partition's
    /// `max.message.bytes`). The same bytes fail the same way on every pass.
    #[error(
        "the stored batch at offset {base_offset} cannot be compacted: {source}. The log cleaner \
         skips this partition until the broker restarts; the batch itself is kept and served"
    )]
    UncleanableBatch { base_offset: i64, source: BatchError },
    #[error(
        "follower append starts at offset {first_offset} but the log end offset is {log_end}; \
         the replica must truncate or catch up first"
    )]
    UnexpectedAppendOffset { first_offset: i64, log_end: i64 },
    /// An append whose batch carries a leader epoch below the log's latest: Kafka's leader epochs
    /// never go backwards in a log. On the follower path the replica diverged from the leader
    /// and must truncate (OffsetForLeaderEpoch) first; on the leader path this broker's epoch is
    /// stale. Refused before anything is written.
    #[error(
        "record batch at offset {base_offset} has leader epoch {epoch}, below the log's latest \
         leader epoch {latest_epoch}; a follower must truncate to the leader's epoch end offset \
         before fetching, a leader must refresh its partition state"
    )]
    LeaderEpochRegression {
        base_offset: i64,
        epoch: i32,
        latest_epoch: i32,
    },
    /// A read planned under the log's lock found a segment shorter than it was then: the log
    /// was truncated meanwhile, which happens only when this replica stops leading. Not a disk
    /// failure; the client is sent to refresh metadata and retry.
    #[error(
        "the log was truncated while a fetch read it ({path} ends before position {position}); \
         refresh metadata and retry the fetch against the partition's current leader"
    )]
    TruncatedDuringRead { path: String, position: u64 },
    /// A read planned under the log's lock found its segment removed from the log since
    /// (retention, compaction or truncation) and its file already closed. Not a disk failure;
    /// the client is sent to refresh metadata and retry, and its retry reads the log as it is.
    #[error("a log segment was removed while a fetch read it ({path}); refresh metadata and retry the fetch")]
    RemovedDuringRead { path: String },
    #[error(
        "log data is corrupt: {0}; restart the broker to recover the log, or delete the \
         partition directory and let it re-replicate"
    )]
    Corrupt(String),
    /// A broken invariant found by the log (see `invariant`): a bug in sluice, not in the data
    /// or the request. Nothing was written; the node stops.
    #[error("internal error: {0}; this is a bug in sluice, and the broker stops to protect the log: report it with the broker's log")]
    Internal(String),
}

impl LogError {
    /// The Kafka error code for a client: storage failures are `KAFKA_STORAGE_ERROR`, batch
    /// problems keep their own code (`CORRUPT_MESSAGE` or `UNSUPPORTED_FOR_MESSAGE_FORMAT`).
    /// `UnexpectedAppendOffset` only happens on the replication path and is never sent to a client;
    /// `LeaderEpochRegression` reaches a client only if the leader's epoch is stale, and
    /// `NOT_LEADER_OR_FOLLOWER` sends it to refresh metadata and retry. An internal error is
    /// `UNKNOWN_SERVER_ERROR`.
    pub fn response_error(&self) -> ResponseError {
        match self {
            LogError::Io(_) => ResponseError::KafkaStorageError,
            LogError::OffsetOutOfRange { .. } => ResponseError::OffsetOutOfRange,
            LogError::MessageTooLarge { .. } => ResponseError::MessageTooLarge,
            LogError::RecordBatchTooLarge { .. } => ResponseError::RecordListTooLarge,
            LogError::InvalidBatch(e) | LogError::UncleanableBatch { source: e, .. } => e.response_error(),
            LogError::UnexpectedAppendOffset { .. } | LogError::Internal(_) => ResponseError::UnknownServerError,
            LogError::LeaderEpochRegression { .. }
            | LogError::TruncatedDuringRead { .. }
            | LogError::RemovedDuringRead { .. } => ResponseError::NotLeaderOrFollower,
            LogError::Corrupt(_) => ResponseError::CorruptMessage,
        }
    }
}

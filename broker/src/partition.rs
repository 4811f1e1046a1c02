//! One partition replica hosted by this broker (Kafka's `Partition`): its log plus the
//! offsets clients are served by, and the signal that wakes long-polling fetches.
//!
//! The log sits behind a mutex that is never held across an await: appends and reads are
//! short synchronous page-cache operations. The high watermark is published through a
//! `watch` channel so a waiting fetch is woken by new data rather than by polling.

use std::path::Path;
use std::sync::atomic::{AtomicI32, AtomicI64, Ordering};

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use parking_lot::Mutex;
use tokio::sync::watch;
use uuid::Uuid;

use sluice_protocol::batch::BatchIter;

use crate::log::{AppendInfo, LogConfig, LogError, PartitionLog};
use crate::producer_state::{ProducerStateManager, SequenceCheck};

/// Offsets of the log tail scanned on open to rebuild idempotent-producer state: retries
/// concern only the last few batches of each producer.
const PRODUCER_STATE_REBUILD_OFFSETS: i64 = 10_000;
const REBUILD_READ_BYTES: usize = 8 * 1024 * 1024;

pub struct Partition {
    pub topic: String,
    pub topic_id: Uuid,
    pub index: i32,
    log: Mutex<PartitionLog>,
    /// Idempotent producers' recent batches; locked only while `log` is held, so the sequence
    /// check and the append are one atomic step.
    producers: Mutex<ProducerStateManager>,
    /// Offsets below this are visible to consumers. A single replica's HW is its log end.
    high_watermark: watch::Sender<i64>,
    log_start_offset: AtomicI64,
    leader_epoch: AtomicI32,
}

/// Result of a leader append.
pub enum AppendOutcome {
    Appended(AppendInfo),
    /// An idempotent producer's retry of batches already in the log at this offset.
    Duplicate {
        base_offset: i64,
    },
}

/// A refused append: the Kafka error for the client and a sentence for the log.
pub type AppendError = (ResponseError, String);

/// What a read returned, with the offsets the fetch response reports beside it.
pub struct ReadOutcome {
    pub records: Bytes,
    pub high_watermark: i64,
    pub log_start_offset: i64,
}

impl Partition {
    pub fn open(
        dir: &Path,
        topic: &str,
        topic_id: Uuid,
        index: i32,
        config: LogConfig,
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<Partition, LogError> {
        let log = PartitionLog::open(dir, config, now_ms)?;
        let producers = rebuild_producer_state(&log)?;
        let (high_watermark, _) = watch::channel(log.log_end_offset());
        Ok(Partition {
            topic: topic.to_string(),
            topic_id,
            index,
            log_start_offset: AtomicI64::new(log.log_start_offset()),
            log: Mutex::new(log),
            producers: Mutex::new(producers),
            high_watermark,
            leader_epoch: AtomicI32::new(leader_epoch),
        })
    }

    /// Appends validated batches as leader and advances the high watermark. Idempotent
    /// producers' batches are checked against their sequence first; a retry of batches already
    /// appended is answered with their original offset and not appended again.
    pub fn append_as_leader(&self, records: &mut [u8], now_ms: i64) -> Result<AppendOutcome, AppendError> {
        let info = {
            let mut log = self.log.lock();
            let mut producers = self.producers.lock();
            let mut duplicate = None;
            for (header, _) in BatchIter::new(records) {
                match producers.check(&header)? {
                    SequenceCheck::Append if duplicate.is_some() => {
                        return Err((
                            ResponseError::OutOfOrderSequenceNumber,
                            "a request mixed retried and new batches".into(),
                        ))
                    }
                    SequenceCheck::Append => {}
                    SequenceCheck::Duplicate { base_offset } => duplicate = duplicate.or(Some(base_offset)),
                }
            }
            if let Some(base_offset) = duplicate {
                return Ok(AppendOutcome::Duplicate { base_offset });
            }
            let info = log
                .append_as_leader(records, self.leader_epoch(), now_ms)
                .map_err(|e| log_error(&e))?;
            for (header, _) in BatchIter::new(records) {
                producers.record(&header);
            }
            self.log_start_offset.store(log.log_start_offset(), Ordering::Release);
            info
        };
        self.high_watermark.send_replace(info.last_offset + 1);
        Ok(AppendOutcome::Appended(info))
    }

    /// Reads up to `max_bytes` from `offset`, bounded by the high watermark.
    pub fn read(&self, offset: i64, max_bytes: usize, min_one_message: bool) -> Result<ReadOutcome, LogError> {
        let high_watermark = self.high_watermark();
        let log = self.log.lock();
        let result = log.read(offset, max_bytes, high_watermark, min_one_message)?;
        Ok(ReadOutcome {
            records: result.records,
            high_watermark,
            log_start_offset: log.log_start_offset(),
        })
    }

    pub fn high_watermark(&self) -> i64 {
        *self.high_watermark.borrow()
    }

    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset.load(Ordering::Acquire)
    }

    pub fn leader_epoch(&self) -> i32 {
        self.leader_epoch.load(Ordering::Acquire)
    }

    /// Kafka's check of a client's `current_leader_epoch` (-1 = not checked): an older epoch
    /// is fenced, a newer one means this broker has not caught up with the metadata yet.
    pub fn check_leader_epoch(&self, requested: i32) -> Result<(), ResponseError> {
        let epoch = self.leader_epoch();
        match requested {
            r if r < 0 || r == epoch => Ok(()),
            r if r < epoch => Err(ResponseError::FencedLeaderEpoch),
            _ => Err(ResponseError::UnknownLeaderEpoch),
        }
    }

    pub fn set_leader_epoch(&self, epoch: i32) {
        self.leader_epoch.store(epoch, Ordering::Release);
    }

    /// A receiver that changes whenever the high watermark moves (fetch long-poll wake-up).
    pub fn watch_high_watermark(&self) -> watch::Receiver<i64> {
        self.high_watermark.subscribe()
    }

    pub fn offset_for_timestamp(&self, timestamp_ms: i64) -> Result<Option<(i64, i64)>, LogError> {
        self.log.lock().offset_for_timestamp(timestamp_ms)
    }

    /// Kafka's OffsetForLeaderEpoch answer: the largest epoch <= `epoch` in this log and the
    /// offset where it ends.
    pub fn end_offset_for_epoch(&self, epoch: i32) -> (i32, i64) {
        self.log.lock().end_offset_for_epoch(epoch)
    }

    pub fn max_timestamp_offset(&self) -> Option<(i64, i64)> {
        self.log.lock().max_timestamp_offset()
    }

    pub fn update_config(&self, config: LogConfig) {
        self.log.lock().update_config(config);
    }

    /// Periodic housekeeping: time-based roll and retention.
    pub fn run_retention(&self, now_ms: i64) -> Result<usize, LogError> {
        let mut log = self.log.lock();
        log.maybe_roll(now_ms)?;
        let deleted = log.delete_retained_segments(now_ms)?;
        self.log_start_offset.store(log.log_start_offset(), Ordering::Release);
        Ok(deleted)
    }

    pub fn flush(&self) -> Result<(), LogError> {
        self.log.lock().flush()
    }

    /// Consumes the partition, closing (`delete == false`) or removing its log.
    pub fn shutdown(self, delete: bool) -> Result<(), LogError> {
        let log = self.log.into_inner();
        if delete {
            log.delete()
        } else {
            log.close()
        }
    }
}

/// The Kafka error for a failed log operation; storage failures are logged for the operator.
pub fn log_error(e: &LogError) -> AppendError {
    let error = ResponseError::try_from_code(e.kafka_error_code()).unwrap_or(ResponseError::KafkaStorageError);
    if error == ResponseError::KafkaStorageError {
        tracing::error!(error = %e, "partition log operation failed");
    }
    (error, e.to_string())
}

/// Rebuilds idempotent-producer state from the headers of the log's last batches.
fn rebuild_producer_state(log: &PartitionLog) -> Result<ProducerStateManager, LogError> {
    let mut state = ProducerStateManager::default();
    let end = log.log_end_offset();
    let mut offset = log.log_start_offset().max(end - PRODUCER_STATE_REBUILD_OFFSETS);
    while offset < end {
        let read = log.read(offset, REBUILD_READ_BYTES, end, true)?;
        let mut next = offset;
        for (header, _) in BatchIter::new(&read.records) {
            state.record(&header);
            next = header.last_offset() + 1;
        }
        if next <= offset {
            break; // no whole batch came back: nothing more to learn
        }
        offset = next;
    }
    Ok(state)
}

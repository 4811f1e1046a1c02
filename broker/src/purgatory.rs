//! The delayed operations (Kafka's purgatory): requests that wait on a partition's state
//! instead of answering at once. Each waits on the partition's `watch` channels (high
//! watermark, log end offset, leader epoch), so it is woken by the change it waits for, never
//! by polling, and each has a deadline.
//!
//! - [`DelayedProduce`]: an append with `acks=all` (and a group's offset commit or assignment)
//!   completes when the high watermark passes it, fails when leadership moves or time runs out.
//! - [`DelayedDeleteRecords`]: DeleteRecords completes when the low watermark (the lowest log
//!   start offset over the ISR) reaches the new log start, fails when leadership moves or time
//!   runs out.
//! - [`DelayedFetch`]: a fetch that found fewer than `min_bytes` waits until one of its
//!   partitions changes (the high watermark for a consumer, the log end for a follower) or
//!   `max_wait_ms` passes, then reads again.

use std::sync::Arc;

use futures::FutureExt;
use kafka_protocol::error::ResponseError;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::partition::{AppendError, Partition};

/// An append waiting for the high watermark to pass `required_offset` (Kafka's
/// `DelayedProduce`): `acks=all` produces, offset commits and group assignments.
pub struct DelayedProduce {
    pub partition: Arc<Partition>,
    pub required_offset: i64,
    pub leader_epoch: i32,
    pub min_insync_replicas: usize,
}

impl DelayedProduce {
    /// Done when the high watermark reaches `required_offset` (with
    /// `NOT_ENOUGH_REPLICAS_AFTER_APPEND` if the ISR shrank below the minimum meanwhile),
    /// failed if leadership moves or the deadline passes first. Woken by high-watermark and
    /// leader-epoch changes, never by polling.
    pub async fn wait(self, deadline: tokio::time::Instant) -> Result<(), AppendError> {
        let mut high_watermark = self.partition.watch_high_watermark();
        let mut leader_epoch = self.partition.watch_leader_epoch();
        let moved = || {
            (
                ResponseError::NotLeaderOrFollower,
                "leadership moved before the records were replicated; retry against the new leader".to_string(),
            )
        };
        loop {
            if *leader_epoch.borrow_and_update() != self.leader_epoch || !self.partition.is_leader() {
                return Err(moved());
            }
            if *high_watermark.borrow_and_update() >= self.required_offset {
                let isr = self.partition.isr_size();
                if isr < self.min_insync_replicas {
                    return Err((
                        ResponseError::NotEnoughReplicasAfterAppend,
                        format!(
                            "the records were written, but the ISR shrank to {isr}, below min.insync.replicas={}",
                            self.min_insync_replicas
                        ),
                    ));
                }
                return Ok(());
            }
            tokio::select! {
                changed = high_watermark.changed() => if changed.is_err() { return Err(moved()) },
                changed = leader_epoch.changed() => if changed.is_err() { return Err(moved()) },
                _ = tokio::time::sleep_until(deadline) => return Err((
                    ResponseError::RequestTimedOut,
                    "the in-sync replicas did not confirm the records within the request timeout".to_string(),
                )),
            }
        }
    }
}

/// A DeleteRecords waiting until every ISR member has moved its log start offset to at least
/// `log_start_offset` (Kafka's `DelayedDeleteRecords`).
pub struct DelayedDeleteRecords {
    pub partition: Arc<Partition>,
    pub log_start_offset: i64,
    pub leader_epoch: i32,
}

impl DelayedDeleteRecords {
    /// The low watermark once it reaches the new log start; failed if leadership moves or the
    /// deadline passes first. Woken by low-watermark and leader-epoch changes.
    pub async fn wait(self, deadline: Instant) -> Result<i64, AppendError> {
        let mut low_watermark = self.partition.watch_low_watermark();
        let mut leader_epoch = self.partition.watch_leader_epoch();
        let moved = || {
            (
                ResponseError::NotLeaderOrFollower,
                "leadership moved before every replica had deleted the records; retry against the new leader"
                    .to_string(),
            )
        };
        loop {
            if *leader_epoch.borrow_and_update() != self.leader_epoch || !self.partition.is_leader() {
                return Err(moved());
            }
            let low = *low_watermark.borrow_and_update();
            if low >= self.log_start_offset {
                return Ok(low);
            }
            tokio::select! {
                changed = low_watermark.changed() => if changed.is_err() { return Err(moved()) },
                changed = leader_epoch.changed() => if changed.is_err() { return Err(moved()) },
                _ = tokio::time::sleep_until(deadline) => return Err((
                    ResponseError::RequestTimedOut,
                    format!(
                        "the leader deleted the records, but not every in-sync replica confirmed it within the request timeout (low watermark {low}, wanted {})",
                        self.log_start_offset
                    ),
                )),
            }
        }
    }
}

/// What a waiting fetch watches: one receiver per partition it reads, subscribed before its
/// first read so that a write between that read and the wait is not missed.
pub struct DelayedFetch {
    watchers: Vec<watch::Receiver<i64>>,
    deadline: Instant,
}

/// Why a [`DelayedFetch`] stopped waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchWake {
    /// A watched partition changed: read again.
    Changed,
    /// A watched partition went away (deleted, or no longer hosted): answer now.
    PartitionGone,
    /// `max_wait_ms` passed: answer with what there is.
    Expired,
}

impl DelayedFetch {
    /// Watches each partition's log end offset (`follower`) or high watermark (consumer).
    pub fn new<'a>(partitions: impl Iterator<Item = &'a Arc<Partition>>, follower: bool, deadline: Instant) -> Self {
        let watchers = partitions
            .map(|p| {
                if follower {
                    p.watch_log_end_offset()
                } else {
                    p.watch_high_watermark()
                }
            })
            .collect();
        DelayedFetch { watchers, deadline }
    }

    /// Whether there is anything to wait on.
    pub fn is_empty(&self) -> bool {
        self.watchers.is_empty()
    }

    /// Waits for the next change of any watched partition, or the deadline.
    pub async fn wait(&mut self) -> FetchWake {
        if self.watchers.is_empty() {
            return FetchWake::Expired;
        }
        let changed = futures::future::select_all(self.watchers.iter_mut().map(|w| w.changed().boxed()));
        match tokio::time::timeout_at(self.deadline, changed).await {
            Err(_) => FetchWake::Expired,
            Ok((Err(_), _, _)) => FetchWake::PartitionGone,
            Ok((Ok(()), _, _)) => FetchWake::Changed,
        }
    }
}

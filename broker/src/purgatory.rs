//! The delayed operations (Kafka's purgatory): requests that wait on a partition's state
//! instead of answering at once. Each waits on the partition's [`PartitionWatch`] (high
//! watermark, log end offset, leader epoch, low watermark, first unstable offset: one `Notify`
//! for all five), so it is woken by changes, never by polling; one woken by a value it does not
//! wait on goes back to waiting without doing any work. Each has a deadline.
//!
//! - [`DelayedProduce`]: an append with `acks=all` (and a group's offset commit or assignment)
//!   completes when the high watermark passes it, fails when leadership moves or time runs out.
//! - [`DelayedDeleteRecords`]: DeleteRecords completes when the low watermark (the lowest log
//!   start offset over the ISR) reaches the new log start, fails when leadership moves or time
//!   runs out.
//! - [`DelayedFetch`]: a fetch that found fewer than `min_bytes` waits until one of its
//!   partitions changes (the high watermark for a consumer, the last stable offset for a
//!   `read_committed` one, the log end for a follower) or
//!   `max_wait_ms` passes, then reads again.

use std::sync::Arc;

use futures::FutureExt;
use kafka_protocol::error::ResponseError;
use tokio::time::Instant;

use crate::partition::{AppendError, Partition, PartitionWatch, ReadBound, Watched};

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
        let moved = || {
            (
                ResponseError::NotLeaderOrFollower,
                "leadership moved before the records were replicated; retry against the new leader".to_string(),
            )
        };
        // What the last full check saw: a wake that moved neither is not worth a lock.
        let mut seen: Option<(i64, i32)> = None;
        let outcome = self.partition.watch().wait_for(deadline, |now: Watched| {
            let relevant = (now.high_watermark, now.leader_epoch);
            if seen == Some(relevant) {
                return None;
            }
            seen = Some(relevant);
            if now.leader_epoch != self.leader_epoch || !self.partition.is_leader() {
                return Some(Err(moved()));
            }
            if now.high_watermark < self.required_offset {
                return None;
            }
            let isr = self.partition.isr_size();
            if isr < self.min_insync_replicas {
                return Some(Err((
                    ResponseError::NotEnoughReplicasAfterAppend,
                    format!(
                        "the records were written, but the ISR shrank to {isr}, below min.insync.replicas={}",
                        self.min_insync_replicas
                    ),
                )));
            }
            Some(Ok(()))
        });
        outcome.await.unwrap_or_else(|| {
            Err((
                ResponseError::RequestTimedOut,
                "the in-sync replicas did not confirm the records within the request timeout".to_string(),
            ))
        })
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
        let moved = || {
            (
                ResponseError::NotLeaderOrFollower,
                "leadership moved before every replica had deleted the records; retry against the new leader"
                    .to_string(),
            )
        };
        let mut seen: Option<(i64, i32)> = None;
        let outcome = self.partition.watch().wait_for(deadline, |now: Watched| {
            let relevant = (now.low_watermark, now.leader_epoch);
            if seen == Some(relevant) {
                return None;
            }
            seen = Some(relevant);
            if now.leader_epoch != self.leader_epoch || !self.partition.is_leader() {
                return Some(Err(moved()));
            }
            (now.low_watermark >= self.log_start_offset).then_some(Ok(now.low_watermark))
        });
        outcome.await.unwrap_or_else(|| {
            let low = self.partition.watch().low_watermark();
            Err((
                ResponseError::RequestTimedOut,
                format!(
                    "the leader deleted the records, but not every in-sync replica confirmed it within the request timeout (low watermark {low}, wanted {})",
                    self.log_start_offset
                ),
            ))
        })
    }
}

/// What a waiting fetch watches: the log end offset (a follower's fetch), the high watermark
/// (a consumer's) or the last stable offset (a `read_committed` consumer's) of each partition
/// it reads, as they were before its first read, so that a write between that read and the
/// wait is not missed. The last stable offset moves with the high watermark and with markers,
/// both of which notify the partition's watch. Where consumers read from followers, a
/// follower's fetch also ends when a high watermark moves, so followers know it within a
/// round trip, not a long poll later.
pub struct DelayedFetch {
    partitions: Vec<Arc<Partition>>,
    /// Each partition's watched offset as last seen, by position.
    seen: Vec<i64>,
    /// A follower's fetch that wakes for the high watermark ([`Self::wake_on_high_watermark`]):
    /// each partition's high watermark when it began (empty otherwise).
    seen_high_watermarks: Vec<i64>,
    bound: ReadBound,
    deadline: Instant,
}

/// Why a [`DelayedFetch`] stopped waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchWake {
    /// A watched offset moved: read again.
    Changed,
    /// `max_wait_ms` passed: answer with what there is.
    Expired,
    /// A follower's fetch: a high watermark moved, which the follower is told at once.
    HighWatermarkMoved,
}

impl DelayedFetch {
    /// Watches each partition's offset that bounds the fetch's reads (`bound`), from their
    /// values now: call it before the first read.
    pub fn new<'a>(partitions: impl Iterator<Item = &'a Arc<Partition>>, bound: ReadBound, deadline: Instant) -> Self {
        let partitions: Vec<Arc<Partition>> = partitions.cloned().collect();
        let seen = partitions.iter().map(|p| watched(p.watch(), bound)).collect();
        DelayedFetch {
            partitions,
            seen,
            seen_high_watermarks: Vec::new(),
            bound,
            deadline,
        }
    }

    /// A follower's fetch ends when a high watermark moves, not only when the log grows: a
    /// follower learns the high watermark only from fetch answers, and consumers reading from
    /// it (KIP-392) see only what lies below it. Without this, a follower waits up to its
    /// `max_wait_ms` to learn it when no new record comes.
    pub fn wake_on_high_watermark(&mut self) {
        if self.bound == ReadBound::LogEnd {
            self.seen_high_watermarks = self.partitions.iter().map(|p| p.watch().high_watermark()).collect();
        }
    }

    /// With [`Self::wake_on_high_watermark`]: the high watermarks the follower was last told
    /// (by position; `None`: unknown), where older than now, so the wait ends at once.
    pub fn known_high_watermarks(&mut self, known: impl Iterator<Item = Option<i64>>) {
        for (seen, known) in self.seen_high_watermarks.iter_mut().zip(known) {
            if let Some(known) = known {
                *seen = (*seen).min(known);
            }
        }
    }

    /// Whether there is anything to wait on.
    pub fn is_empty(&self) -> bool {
        self.partitions.is_empty()
    }

    /// Waits until a watched offset differs from the one last seen (already, or after a
    /// change), or the deadline. Wake-ups by the partitions' other values (a consumer's
    /// partition appending, a follower's moving its high watermark) go back to waiting.
    pub async fn wait(&mut self) -> FetchWake {
        if self.partitions.is_empty() {
            return FetchWake::Expired;
        }
        loop {
            // Registered before the offsets are compared, so a change after the comparison
            // completes one of them.
            let changes: Vec<_> = self.partitions.iter().map(|p| p.watch().changed().boxed()).collect();
            let mut moved = false;
            for (p, seen) in self.partitions.iter().zip(self.seen.iter_mut()) {
                let now = watched(p.watch(), self.bound);
                if now != *seen {
                    *seen = now;
                    moved = true;
                }
            }
            if moved {
                return FetchWake::Changed;
            }
            let high_watermarks = self.partitions.iter().map(|p| p.watch().high_watermark());
            if self
                .seen_high_watermarks
                .iter()
                .zip(high_watermarks)
                .any(|(seen, now)| now > *seen)
            {
                return FetchWake::HighWatermarkMoved;
            }
            if tokio::time::timeout_at(self.deadline, futures::future::select_all(changes))
                .await
                .is_err()
            {
                return FetchWake::Expired;
            }
        }
    }
}

fn watched(watch: &PartitionWatch, bound: ReadBound) -> i64 {
    match bound {
        ReadBound::LogEnd => watch.log_end_offset(),
        ReadBound::HighWatermark => watch.high_watermark(),
        ReadBound::LastStable => watch.last_stable_offset(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use sluice_protocol::batch::test_support::encode_simple_batch;

    use super::*;
    use crate::metadata::image::PartitionRegistration;

    const NOW: i64 = 1_800_000_000_000;

    /// Broker 1 leading replicas 1-3 with 5 records that follower 2 holds and 3 does not yet.
    fn leader_with_one_follower_behind(dir: &std::path::Path) -> Arc<Partition> {
        let p = crate::partition::tests::open(dir, 1);
        let registration = PartitionRegistration {
            replicas: vec![1, 2, 3].into(),
            isr: vec![1, 2, 3].into(),
            leader: 1,
            ..Default::default()
        };
        p.apply_registration(&registration, NOW);
        let mut batch = encode_simple_batch(5, 10, NOW);
        p.append_as_leader(&mut batch, NOW).unwrap();
        p.record_follower_fetch(2, 5, 0, -1, NOW).unwrap();
        assert_eq!(p.high_watermark(), 0, "follower 3 holds nothing yet");
        Arc::new(p)
    }

    #[tokio::test]
    async fn a_followers_fetch_ends_when_the_high_watermark_passes_the_one_it_was_told() {
        let dir = tempfile::tempdir().unwrap();
        let p = leader_with_one_follower_behind(dir.path());
        let deadline = Instant::now() + Duration::from_secs(30);
        // Follower 2 waits at its log end; a consumer waits at the high watermark.
        let mut follower = DelayedFetch::new([&p].into_iter(), ReadBound::LogEnd, deadline);
        follower.wake_on_high_watermark();
        let mut plain = DelayedFetch::new(
            [&p].into_iter(),
            ReadBound::LogEnd,
            Instant::now() + Duration::from_millis(50),
        );
        let mut consumer = DelayedFetch::new([&p].into_iter(), ReadBound::HighWatermark, deadline);
        p.record_follower_fetch(3, 5, 0, -1, NOW).unwrap();
        assert_eq!(p.high_watermark(), 5);
        assert_eq!(
            follower.wait().await,
            FetchWake::HighWatermarkMoved,
            "the log did not grow"
        );
        assert_eq!(consumer.wait().await, FetchWake::Changed);
        assert_eq!(
            plain.wait().await,
            FetchWake::Expired,
            "without it, only the log end wakes it"
        );
        // A fetch that begins after the move, from a follower last told 0, ends at once.
        let mut late = DelayedFetch::new(
            [&p].into_iter(),
            ReadBound::LogEnd,
            Instant::now() + Duration::from_millis(50),
        );
        late.wake_on_high_watermark();
        late.known_high_watermarks([Some(0)].into_iter());
        assert_eq!(late.wait().await, FetchWake::HighWatermarkMoved);
        // One told 5 waits for the log or the deadline.
        let mut told = DelayedFetch::new(
            [&p].into_iter(),
            ReadBound::LogEnd,
            Instant::now() + Duration::from_millis(50),
        );
        told.wake_on_high_watermark();
        told.known_high_watermarks([Some(5)].into_iter());
        assert_eq!(told.wait().await, FetchWake::Expired);
    }
}

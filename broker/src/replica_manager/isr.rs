//! The leader side of follower fetches and ISR changes: the replica identity check (KIP-903),
//! each follower's fetch state (which may expand the ISR), the AlterPartition proposals through
//! the metadata quorum, and the timer that shrinks the ISR and checkpoints high watermarks.

use std::sync::atomic::AtomicI64;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use tokio::sync::watch;

use super::{ReplicaManager, Serves};
use crate::clock::now_ms;
use crate::metadata::image::{MetadataImage, TopicImage};
use crate::metadata::outcome::{ApiError, Outcome, PartitionState};
use crate::metadata::records::{IsrChangeRequest, MetadataCommand};
use crate::partition::Partition;

/// Which way a leader's ISR change goes (Kafka's IsrShrinksPerSec / IsrExpandsPerSec).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IsrChange {
    Shrink,
    Expand,
}

/// Pause after a refused ISR change before the leader may propose another.
const ISR_CHANGE_RETRY: Duration = Duration::from_secs(1);

/// ISR changes in one AlterPartitions entry: about 30 bytes each, so a full entry stays far
/// below the quorum's proposal limit (`raft_meta::MAX_PROPOSAL_BYTES`), and one entry's apply
/// stays short.
const MAX_ISR_CHANGES_PER_PROPOSAL: usize = 4096;

/// ISR changes waiting for the next AlterPartitions entry. Bounded by the partitions this
/// broker leads: a leader queues a change only when none of its own is pending
/// (`LeaderState::pending_isr`).
#[derive(Default)]
pub(super) struct IsrQueue {
    waiting: Vec<QueuedIsrChange>,
    /// A flusher task is running (it clears this when it finds the queue empty).
    flushing: bool,
}

struct QueuedIsrChange {
    partition: Arc<Partition>,
    change: IsrChangeRequest,
    way: IsrChange,
}

/// Who a fetch is from, once its replica identity has been checked.
#[derive(Debug, Clone, Copy)]
pub enum FetchParty {
    /// A consumer; `any_replica` when it may read from a follower (Fetch v11+, KIP-392).
    Consumer { any_replica: bool },
    /// A fetch claiming to be broker `replica_id`'s; `identity` is the outcome of
    /// [`check_follower_identity`], so a failed claim is answered per partition.
    Follower {
        replica_id: i32,
        identity: Result<(), ResponseError>,
    },
}

/// Kafka's replica identity check (KIP-903) for a Fetch that claims `replica_id` >= 0: it is a
/// follower's fetch only if it names, in `replica_state` (v15+), the broker epoch of that
/// broker's current registration in `image`. A claim without an epoch (before v15), with a
/// stale or unknown epoch, or for an unregistered broker is refused with NOT_LEADER_OR_FOLLOWER,
/// Kafka's answer to a stale broker epoch in a follower fetch; such a fetch must move no
/// follower's progress, ISR or high watermark. Whether the broker is in each partition's replica
/// set is checked per partition by `Partition::record_follower_fetch`. No allocation.
pub fn check_follower_identity(
    image: &MetadataImage,
    replica_id: i32,
    broker_epoch: Option<i64>,
) -> Result<(), ResponseError> {
    let registered = image.brokers.get(&replica_id).map(|b| b.broker_epoch);
    match (broker_epoch, registered) {
        (Some(claimed), Some(current)) if claimed == current => Ok(()),
        _ => Err(ResponseError::NotLeaderOrFollower),
    }
}

impl ReplicaManager {
    /// Kafka's `fetchMessages` before any read: partition `index` of `topic` when this broker
    /// leads it. For a follower whose identity checked out, its fetch offset is its log end
    /// offset (`updateFollowerFetchState`): that may advance the high watermark, and the
    /// AlterPartition bringing it back into the ISR is proposed here. A refused fetch moves
    /// no follower's progress, ISR or high watermark. `session_clock`: the follower's fetch
    /// session's ([`crate::partition::WatchSet::fetch_clock`]).
    #[allow(clippy::too_many_arguments)]
    pub fn partition_for_fetch(
        self: &Arc<Self>,
        topic: &TopicImage,
        index: i32,
        fetch_offset: i64,
        log_start_offset: i64,
        current_leader_epoch: i32,
        party: FetchParty,
        now_ms: i64,
        session_clock: Option<&Arc<AtomicI64>>,
    ) -> Result<Arc<Partition>, ResponseError> {
        let partition = match party {
            FetchParty::Consumer { any_replica: true } => {
                self.serving_partition(Some(topic), index, Serves::AnyReplica)?
            }
            _ => self.leader_partition(topic, index)?.0,
        };
        if let FetchParty::Follower { replica_id, identity } = party {
            identity?;
            partition.check_leader_epoch(current_leader_epoch)?;
            let expand = partition.record_follower_session_fetch(
                replica_id,
                fetch_offset,
                log_start_offset,
                current_leader_epoch,
                now_ms,
                session_clock,
            )?;
            if let Some(change) = expand {
                self.propose_isr_change(partition.clone(), change, IsrChange::Expand);
            }
        }
        Ok(partition)
    }

    /// Queues an ISR change a partition leader decided on, to be proposed in the background
    /// with every other change waiting then (one AlterPartitions entry, as Kafka's
    /// `AlterPartitionManager` sends one AlterPartition request for all its partitions). Once
    /// the quorum has decided, the hosted partitions are brought up to date before the leader
    /// may propose again, so the leader never counts an ISR older than the one committed.
    pub fn propose_isr_change(self: &Arc<Self>, partition: Arc<Partition>, change: IsrChangeRequest, way: IsrChange) {
        let start_flusher = {
            let mut queue = self.isr_queue.lock();
            queue.waiting.push(QueuedIsrChange { partition, change, way });
            !std::mem::replace(&mut queue.flushing, true)
        };
        if start_flusher {
            let replicas = self.clone();
            self.spawn_isr_task(async move { replicas.flush_isr_changes().await });
        }
    }

    fn spawn_isr_task(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        let mut tasks = self.isr_proposals.lock();
        while tasks.try_join_next().is_some() {} // reap finished ones
        tasks.spawn(task);
    }

    /// Proposes the queued ISR changes, at most [`MAX_ISR_CHANGES_PER_PROPOSAL`] per entry and
    /// one entry at a time, until none is waiting. Changes queued while an entry is decided go
    /// in the next one, so a burst of changes (every follower rejoining after a restart) takes
    /// as many entries as it takes rounds, not one per partition.
    async fn flush_isr_changes(self: Arc<Self>) {
        loop {
            let batch: Vec<QueuedIsrChange> = {
                let mut queue = self.isr_queue.lock();
                if queue.waiting.is_empty() {
                    queue.flushing = false;
                    return;
                }
                let take = queue.waiting.len().min(MAX_ISR_CHANGES_PER_PROPOSAL);
                queue.waiting.drain(..take).collect()
            };
            let (partitions, changes): (Vec<_>, Vec<_>) =
                batch.into_iter().map(|q| ((q.partition, q.way), q.change)).unzip();
            let command = MetadataCommand::AlterPartitions {
                leader_id: self.config.node_id,
                changes,
            };
            let results = match self.metadata.commit(command).await {
                Ok((_, Outcome::PartitionsChanged(results))) if results.len() == partitions.len() => results,
                Ok((_, outcome)) => {
                    tracing::warn!(?outcome, "the quorum answered an AlterPartitions with an unexpected outcome; the leaders will re-evaluate their ISRs shortly");
                    let refused = ApiError::new(ResponseError::UnknownServerError, "unexpected outcome");
                    vec![Err(refused); partitions.len()]
                }
                Err(e) => {
                    let refused = ApiError::new(ResponseError::RequestTimedOut, e.to_string());
                    vec![Err(refused); partitions.len()]
                }
            };
            self.isr_changes_decided(partitions, results);
        }
    }

    /// Counts and finishes the decided changes of one AlterPartitions: the accepted ones once
    /// the hosted partitions reflect them, the refused ones after [`ISR_CHANGE_RETRY`] (a
    /// replica still fenced, say, is not proposed again at fetch rate).
    fn isr_changes_decided(
        self: &Arc<Self>,
        partitions: Vec<(Arc<Partition>, IsrChange)>,
        results: Vec<Result<PartitionState, ApiError>>,
    ) {
        let mut accepted = Vec::new();
        let mut refused = Vec::new();
        for ((partition, way), result) in partitions.into_iter().zip(results) {
            match result {
                Ok(_) => {
                    let counter = match way {
                        IsrChange::Shrink => &self.metrics.isr_shrinks,
                        IsrChange::Expand => &self.metrics.isr_expands,
                    };
                    counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    accepted.push(partition);
                }
                Err(e) => {
                    tracing::debug!(
                        topic = %partition.topic, partition = partition.index, error = %e.message,
                        "ISR change not accepted; will re-evaluate shortly"
                    );
                    refused.push((partition, e));
                }
            }
        }
        if let Some((first, e)) = refused.first() {
            tracing::info!(
                refused = refused.len(),
                accepted = accepted.len(),
                first = %format_args!("{}-{}", first.topic, first.index),
                error = %e.message,
                "ISR changes not accepted; their leaders will re-evaluate them shortly"
            );
            let refused: Vec<Arc<Partition>> = refused.into_iter().map(|(p, _)| p).collect();
            self.spawn_isr_task(async move {
                tokio::time::sleep(ISR_CHANGE_RETRY).await;
                refused.iter().for_each(|p| p.isr_change_finished());
            });
        }
        if !accepted.is_empty() {
            let replicas = self.clone();
            self.spawn_isr_task(async move {
                replicas.wait_reconciled().await;
                accepted.iter().for_each(|p| p.isr_change_finished());
            });
        }
    }

    /// Abandons ISR changes still in flight before the process stops.
    pub async fn stop_isr_proposals(&self) {
        let mut proposals = std::mem::take(&mut *self.isr_proposals.lock());
        proposals.shutdown().await;
    }

    /// The leaders' timer-driven duty: drop followers that have not caught up within
    /// `replica.lag.time.max.ms` from the ISR (checked every half lag period, as Kafka does),
    /// and checkpoint high watermarks every `replica.high.watermark.checkpoint.interval.ms`.
    pub async fn run_isr_maintenance(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let lag_ms = self.config.replica_lag_time_max_ms;
        let mut isr_ticker = tokio::time::interval(Duration::from_millis((lag_ms / 2).max(10)));
        isr_ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let checkpoint_period =
            Duration::from_millis(self.config.replica_high_watermark_checkpoint_interval_ms.max(10));
        let mut checkpoint_ticker = tokio::time::interval(checkpoint_period);
        checkpoint_ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.changed() => return,
                _ = isr_ticker.tick() => {
                    let now = now_ms();
                    for partition in self.all() {
                        if let Some(change) = partition.isr_shrink(now, lag_ms as i64) {
                            self.propose_isr_change(partition, change, IsrChange::Shrink);
                        }
                    }
                }
                _ = checkpoint_ticker.tick() => {
                    // The write ends in an fsync: on the blocking pool, not a runtime worker.
                    let this = self.clone();
                    let _ = tokio::task::spawn_blocking(move || this.checkpoint_high_watermarks()).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::check_follower_identity;
    use crate::metadata::image::MetadataImage;
    use crate::metadata::records::MetadataRecord;
    use kafka_protocol::error::ResponseError;
    use uuid::Uuid;

    fn register(image: &mut MetadataImage, broker_id: i32) -> i64 {
        image.apply(&MetadataRecord::RegisterBroker {
            broker_id,
            incarnation_id: Uuid::nil(),
            endpoints: vec![],
            rack: None,
            replica_capacity: None,
        });
        image.brokers[&broker_id].broker_epoch
    }

    #[test]
    fn only_the_current_broker_epoch_makes_a_fetch_a_followers() {
        let mut image = MetadataImage::new("c".into());
        let stale = register(&mut image, 2);
        register(&mut image, 3);
        let current = register(&mut image, 2);
        assert!(current > stale);
        assert_eq!(check_follower_identity(&image, 2, Some(current)), Ok(()));
        let refused = Err(ResponseError::NotLeaderOrFollower);
        assert_eq!(
            check_follower_identity(&image, 2, Some(stale)),
            refused,
            "a previous start"
        );
        assert_eq!(
            check_follower_identity(&image, 2, Some(current + 1)),
            refused,
            "not yet known"
        );
        assert_eq!(check_follower_identity(&image, 2, Some(-1)), refused, "no epoch given");
        assert_eq!(check_follower_identity(&image, 2, None), refused, "Fetch before v15");
        assert_eq!(
            check_follower_identity(&image, 7, Some(current)),
            refused,
            "not registered"
        );
        assert_eq!(
            check_follower_identity(&image, 3, Some(current)),
            refused,
            "another broker's epoch"
        );
    }
}

//! The partitions this broker hosts (Kafka's `ReplicaManager`), and the one owner of the
//! replica side:
//!
//! - kept in step with the metadata image: logs are opened for new assignments, reconfigured
//!   on config changes and removed when their topic is deleted; each replica becomes leader or
//!   follower as its registration says, and followers are handed to the replica fetcher of
//!   their leader;
//! - follower fetches: the replica identity check (KIP-903) and each follower's fetch state
//!   ([`ReplicaManager::partition_for_fetch`], Kafka's `fetchMessages` →
//!   `updateFollowerFetchState`), which moves the high watermark and may bring it back into
//!   the ISR;
//! - ISR changes: the AlterPartition a leader decides on (expand in a follower's fetch, shrink
//!   in [`ReplicaManager::run_isr_maintenance`]) goes through the metadata quorum from here, and
//!   the decision is applied to the hosted partitions before the leader may propose again;
//! - the high-watermark checkpoint.
//!
//! What a partition decides (the high watermark, who is caught up) lives in
//! `partition/leader.rs`; the waits on it (acks=all, long-poll fetch) in `purgatory.rs`.
//!
//! `reconcile.rs` keeps the hosted partitions in step with the image (rounds, opening and
//! deleting logs, roles, orphaned directories); `isr.rs` is the leader side of followers (the
//! identity check, follower fetch state, ISR proposals and maintenance). This file holds the
//! struct, the lookups, the high-watermark checkpoint and shutdown.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use parking_lot::RwLock;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use uuid::Uuid;

use crate::config::open_files::OpenFilesBudget;
use crate::config::BrokerConfig;
use crate::log::{FileCache, FileCacheStats, TailCacheBudget};
use crate::metadata::image::{PartitionRegistration, TopicImage};
use crate::metadata::MetadataStore;
use crate::metrics::BrokerMetrics;
use crate::partition::{AppendError, Partition};
use crate::quota::ReplicationQuota;
use crate::replication::{checkpoint, ReplicaFetcherManager};
use crate::topic_config;
pub use isr::{check_follower_identity, FetchParty, IsrChange};
pub use read_replica::preferred_read_replica;

mod isr;
mod read_replica;
mod reconcile;

type PartitionKey = (Uuid, i32);

/// Which replica may answer a partition-level read ([`ReplicaManager::serving_partition`]).
#[derive(Debug, Clone, Copy)]
pub enum Serves {
    /// Only the leader, at the leader epoch the client names (`-1`: any).
    Leader { current_leader_epoch: i32 },
    /// Any replica hosting the partition (Kafka's `Partition.activeProducerState`).
    AnyReplica,
}

pub struct ReplicaManager {
    config: Arc<BrokerConfig>,
    partitions: RwLock<HashMap<PartitionKey, Arc<Partition>>>,
    /// Topic configs each hosted topic was last opened/updated with, to spot changes.
    applied_configs: RwLock<HashMap<Uuid, std::collections::BTreeMap<String, String>>>,
    /// Every topic of the image the last round applied: a topic whose image is the same `Arc`
    /// now has nothing new for this broker, and a round skips its partitions.
    applied_topics: parking_lot::Mutex<HashMap<Uuid, Arc<TopicImage>>>,
    /// The broker-level topic defaults (static and dynamic) those were resolved against.
    applied_defaults: parking_lot::Mutex<topic_config::BrokerOverrides>,
    fetchers: ReplicaFetcherManager,
    /// The leader side of the replication throttle (the follower side is the fetchers').
    leader_quota: Arc<ReplicationQuota>,
    /// High watermarks from the checkpoint read at start, for partitions not opened yet.
    checkpointed: parking_lot::Mutex<HashMap<(String, i32), i64>>,
    /// What the last high-watermark checkpoint written held, as (partitions, fingerprint):
    /// a checkpoint that would hold the same is not written again.
    hw_checkpoint_written: parking_lot::Mutex<Option<(usize, u64)>>,
    /// Turns for fetch disk reads on the blocking pool, `num.io.threads` at once: bounds the
    /// blocking threads and the read buffers being filled at any moment.
    fetch_reads: Arc<Semaphore>,
    /// The memory all hosted partitions' tail caches share (`log.tail.cache.*`).
    tail_cache: Arc<TailCacheBudget>,
    /// The segment files all hosted partitions' logs hold open at once, within the
    /// open-files budget (`config::open_files`).
    file_cache: Arc<FileCache>,
    /// Where ISR changes are proposed and the image they are applied from.
    metadata: Arc<MetadataStore>,
    /// ISR shrinks and expands are counted here once committed.
    metrics: Arc<BrokerMetrics>,
    /// Held for a reconciliation round, so rounds never overlap (they come from one task).
    round: tokio::sync::Mutex<()>,
    /// Partitions that became leader and follower in the current round (see
    /// `reconcile::ROLE_CHANGES_LOGGED`).
    role_changes: [std::sync::atomic::AtomicUsize; 2],
    /// Turns for opening and deleting partition logs on the blocking pool,
    /// `num.recovery.threads.per.data.dir` at once.
    recovery_permits: Arc<Semaphore>,
    /// `last_offset` of the newest image the hosted partitions reflect; `None` before the
    /// first round (this start's registration is not committed yet).
    reconciled: watch::Sender<Option<u64>>,
    /// Hosted partitions whose log failed to open: offline until restart, logged once.
    failed: parking_lot::Mutex<HashSet<PartitionKey>>,
    /// ISR changes waiting to be proposed (at most one per led partition, see
    /// `LeaderState::pending_isr`).
    isr_queue: parking_lot::Mutex<isr::IsrQueue>,
    /// The tasks proposing and finishing ISR changes, stopped at shutdown.
    isr_proposals: parking_lot::Mutex<JoinSet<()>>,
}

impl ReplicaManager {
    pub fn new(
        config: Arc<BrokerConfig>,
        metadata: Arc<MetadataStore>,
        metrics: Arc<BrokerMetrics>,
        security: Arc<crate::security::Security>,
    ) -> Self {
        let checkpointed = checkpoint::read(&config.data_dir);
        ReplicaManager {
            fetchers: ReplicaFetcherManager::new(
                config.clone(),
                security,
                metadata.subscribe(),
                ReplicationQuota::follower(
                    config.quota.replication_window_num,
                    config.quota.replication_window_ms(),
                ),
                metrics.clone(),
            ),
            leader_quota: Arc::new(ReplicationQuota::leader(
                config.quota.replication_window_num,
                config.quota.replication_window_ms(),
            )),
            metadata,
            metrics,
            round: tokio::sync::Mutex::new(()),
            role_changes: Default::default(),
            recovery_permits: Arc::new(Semaphore::new(config.num_recovery_threads_per_data_dir.max(1))),
            reconciled: watch::channel(None).0,
            failed: parking_lot::Mutex::default(),
            isr_queue: parking_lot::Mutex::default(),
            isr_proposals: parking_lot::Mutex::default(),
            partitions: RwLock::default(),
            applied_configs: RwLock::default(),
            applied_topics: parking_lot::Mutex::default(),
            applied_defaults: parking_lot::Mutex::new(config.overrides.clone()),
            checkpointed: parking_lot::Mutex::new(checkpointed),
            hw_checkpoint_written: parking_lot::Mutex::default(),
            fetch_reads: Arc::new(Semaphore::new(config.num_io_threads.max(1))),
            tail_cache: TailCacheBudget::new(config.log_tail_cache_bytes, config.log_tail_cache_total_bytes),
            file_cache: match OpenFilesBudget::of(&config).segment_files() {
                Some(files) => FileCache::new(files),
                None => FileCache::unbounded(),
            },
            config,
        }
    }

    /// The leader side of the replication throttle, for follower fetches this broker serves.
    pub fn leader_quota(&self) -> &Arc<ReplicationQuota> {
        &self.leader_quota
    }

    /// Turns for fetch disk reads (see `fetch_reads`): a fetch holds one while its bytes are read.
    pub fn fetch_read_permits(&self) -> &Arc<Semaphore> {
        &self.fetch_reads
    }

    pub fn get(&self, topic_id: Uuid, index: i32) -> Option<Arc<Partition>> {
        self.partitions.read().get(&(topic_id, index)).cloned()
    }

    /// Partition `index` of `topic` when this broker leads and hosts it, with its registration:
    /// UNKNOWN_TOPIC_OR_PARTITION if the topic has no such partition, NOT_LEADER_OR_FOLLOWER if
    /// another broker leads it (clients refresh metadata and move on).
    /// [`Self::leader_partition`] with the sentence a client is told.
    pub fn leader_partition_or_explain<'a>(
        &self,
        topic: &'a TopicImage,
        index: i32,
    ) -> Result<(Arc<Partition>, &'a PartitionRegistration), AppendError> {
        self.leader_partition(topic, index).map_err(|error| {
            let message = match error {
                ResponseError::UnknownTopicOrPartition => format!("{} has no partition {index}", topic.name),
                _ => "this broker is not the partition leader".to_string(),
            };
            (error, message)
        })
    }

    /// The hosted partition `index` of `topic` (`None`: a topic this broker does not know) that
    /// may answer a read as `serves` says, else the Kafka error clients act on:
    /// UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, or FENCED/UNKNOWN_LEADER_EPOCH for a
    /// leader read at another epoch. ListOffsets, OffsetForLeaderEpoch and DescribeProducers
    /// look partitions up through it; authorization is theirs.
    pub fn serving_partition(
        &self,
        topic: Option<&TopicImage>,
        index: i32,
        serves: Serves,
    ) -> Result<Arc<Partition>, ResponseError> {
        let topic = topic.ok_or(ResponseError::UnknownTopicOrPartition)?;
        match serves {
            Serves::Leader { current_leader_epoch } => {
                let (partition, _) = self.leader_partition(topic, index)?;
                partition.check_leader_epoch(current_leader_epoch)?;
                Ok(partition)
            }
            Serves::AnyReplica => {
                usize::try_from(index)
                    .ok()
                    .filter(|i| *i < topic.partitions.len())
                    .ok_or(ResponseError::UnknownTopicOrPartition)?;
                self.get(topic.topic_id, index)
                    .ok_or(ResponseError::NotLeaderOrFollower)
            }
        }
    }

    pub fn leader_partition<'a>(
        &self,
        topic: &'a TopicImage,
        index: i32,
    ) -> Result<(Arc<Partition>, &'a PartitionRegistration), ResponseError> {
        let registration = usize::try_from(index)
            .ok()
            .and_then(|i| topic.partitions.get(i))
            .ok_or(ResponseError::UnknownTopicOrPartition)?;
        if registration.leader != self.config.node_id {
            return Err(ResponseError::NotLeaderOrFollower);
        }
        let partition = self
            .get(topic.topic_id, index)
            .ok_or(ResponseError::NotLeaderOrFollower)?;
        Ok((partition, registration))
    }

    pub fn all(&self) -> Vec<Arc<Partition>> {
        self.partitions.read().values().cloned().collect()
    }

    /// The hosted partitions `pick` takes, without touching the others' reference counts
    /// (a pass over 10,000 idle partitions a second should cost reads only).
    pub fn picked(&self, mut pick: impl FnMut(&Partition) -> bool) -> Vec<Arc<Partition>> {
        self.partitions.read().values().filter(|p| pick(p)).cloned().collect()
    }

    /// Whether this broker hosts the partition.
    pub fn hosts(&self, key: &PartitionKey) -> bool {
        self.partitions.read().contains_key(key)
    }

    fn partition_dir(&self, topic: &str, index: i32) -> PathBuf {
        partition_dir(&self.config.data_dir, topic, index)
    }

    /// The segment files open now, the cache's bound, and its reopens and closes so far.
    pub fn file_cache_stats(&self) -> FileCacheStats {
        self.file_cache.stats()
    }

    /// Records every hosted partition's high watermark in the data dir's checkpoint, unless it
    /// would hold what the last one written this run holds.
    pub fn checkpoint_high_watermarks(&self) {
        // Held throughout, so two writers never race and the fingerprint is the file's.
        let mut written = self.hw_checkpoint_written.lock();
        let (count, fingerprint) = {
            let partitions = self.partitions.read();
            let fingerprint = partitions.values().fold(0u64, |sum, p| {
                sum.wrapping_add(hw_fingerprint(p.topic_id, p.index, p.high_watermark()))
            });
            (partitions.len(), fingerprint)
        };
        if *written == Some((count, fingerprint)) {
            return; // nothing moved since the last write: idle partitions cost no disk write
        }
        let mut entries: Vec<(Arc<str>, i32, i64)> = self
            .partitions
            .read()
            .values()
            .map(|p| (p.topic.clone(), p.index, p.high_watermark()))
            .collect();
        entries.sort_unstable();
        match checkpoint::write(&self.config.data_dir, &entries) {
            // What was written may be newer than the fingerprint (a high watermark moved in
            // between): then the next call writes again, which is only a spare write.
            Ok(()) => *written = Some((count, fingerprint)),
            Err(e) => tracing::warn!(error = %e, dir = %self.config.data_dir.display(),
                "could not write the high-watermark checkpoint; check the data dir's disk"),
        }
    }

    /// Stops every replica fetcher (after a controlled shutdown this broker follows no one).
    pub fn stop_fetching(&self) {
        self.fetchers.shutdown();
    }

    /// Closes every log cleanly (flush + clean-shutdown marker) so the next start skips recovery.
    pub fn shutdown(&self) {
        self.fetchers.shutdown();
        self.checkpoint_high_watermarks();
        let partitions: Vec<Arc<Partition>> = self.partitions.write().drain().map(|(_, p)| p).collect();
        for partition in partitions {
            let (topic, index) = (partition.topic.clone(), partition.index);
            let result = match Arc::try_unwrap(partition) {
                Ok(p) => p.shutdown(false),
                Err(p) => p.flush(),
            };
            if let Err(e) = result {
                tracing::warn!(%topic, partition = index, error = %e, "failed to close the partition log; it will be recovered on the next start");
            }
        }
    }
}

/// One partition's term in the high-watermark checkpoint's fingerprint (a wrapping sum over
/// the hosted partitions, so their order does not matter).
fn hw_fingerprint(topic_id: Uuid, index: i32, high_watermark: i64) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (topic_id, index, high_watermark).hash(&mut hasher);
    hasher.finish()
}

/// Splits `<topic>-<partition>` at the last dash.
fn parse_partition_dir(name: &str) -> Option<(&str, i32)> {
    let (topic, index) = name.rsplit_once('-')?;
    let index: i32 = index.parse().ok()?;
    (!topic.is_empty() && index >= 0).then_some((topic, index))
}

/// The directory a partition's log lives in, named as Kafka names it.
pub fn partition_dir(data_dir: &Path, topic: &str, index: i32) -> PathBuf {
    data_dir.join(format!("{topic}-{index}"))
}

#[cfg(test)]
mod tests {
    use super::parse_partition_dir;

    #[test]
    fn partition_dirs_split_at_the_last_dash() {
        assert_eq!(parse_partition_dir("my-topic-12"), Some(("my-topic", 12)));
        assert_eq!(parse_partition_dir("orders-0"), Some(("orders", 0)));
        assert_eq!(parse_partition_dir("orders"), None);
        assert_eq!(parse_partition_dir("-3"), None);
        assert_eq!(parse_partition_dir("x-y"), None);
    }
}

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

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use parking_lot::RwLock;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use uuid::Uuid;

use crate::clock::now_ms;
use crate::config::open_files::OpenFilesBudget;
use crate::config::BrokerConfig;
use crate::log::{partition_metadata, LogError, TailCacheBudget};
use crate::metadata::image::{MetadataImage, PartitionRegistration, TopicImage};
use crate::metadata::records::MetadataCommand;
use crate::metadata::{MetadataStore, METADATA_LOG_DIR};
use crate::metrics::BrokerMetrics;
use crate::partition::{AppendError, Partition, RoleChange};
use crate::quota::ReplicationQuota;
use crate::replication::{checkpoint, ReplicaFetcherManager};
use crate::topic_config;

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
    /// The broker-level topic defaults (static and dynamic) those were resolved against.
    applied_defaults: parking_lot::Mutex<topic_config::BrokerOverrides>,
    fetchers: ReplicaFetcherManager,
    /// The leader side of the replication throttle (the follower side is the fetchers').
    leader_quota: Arc<ReplicationQuota>,
    /// High watermarks from the checkpoint read at start, for partitions not opened yet.
    checkpointed: parking_lot::Mutex<HashMap<(String, i32), i64>>,
    /// Turns for fetch disk reads on the blocking pool, `num.io.threads` at once: bounds the
    /// blocking threads and the read buffers being filled at any moment.
    fetch_reads: Arc<Semaphore>,
    /// The memory all hosted partitions' tail caches share (`log.tail.cache.*`).
    tail_cache: Arc<TailCacheBudget>,
    /// Where ISR changes are proposed and the image they are applied from.
    metadata: Arc<MetadataStore>,
    /// ISR shrinks and expands are counted here once committed.
    metrics: Arc<BrokerMetrics>,
    /// Held for a reconciliation round, so rounds never overlap (they come from one task).
    round: tokio::sync::Mutex<()>,
    /// Turns for opening and deleting partition logs on the blocking pool,
    /// `num.recovery.threads.per.data.dir` at once.
    recovery_permits: Arc<Semaphore>,
    /// `last_offset` of the newest image the hosted partitions reflect; `None` before the
    /// first round (this start's registration is not committed yet).
    reconciled: watch::Sender<Option<u64>>,
    /// Partition replicas this broker may host (its open-files budget); `None`: unlimited.
    replica_capacity: Option<u32>,
    /// Hosted partitions whose log failed to open: offline until restart, logged once.
    failed: parking_lot::Mutex<HashSet<PartitionKey>>,
    /// Hosted partitions left offline because the replica capacity is full, logged once.
    offline_for_capacity: parking_lot::Mutex<HashSet<PartitionKey>>,
    /// ISR changes on their way through the quorum (at most one per led partition, see
    /// `LeaderState::pending_isr`), stopped at shutdown.
    isr_proposals: parking_lot::Mutex<JoinSet<()>>,
}

/// Which way a leader's ISR change goes (Kafka's IsrShrinksPerSec / IsrExpandsPerSec).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IsrChange {
    Shrink,
    Expand,
}

/// Pause after a refused ISR change before the leader may propose another.
const ISR_CHANGE_RETRY: Duration = Duration::from_secs(1);

/// Who a fetch is from, once its replica identity has been checked.
#[derive(Debug, Clone, Copy)]
pub enum FetchParty {
    Consumer,
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
            recovery_permits: Arc::new(Semaphore::new(config.num_recovery_threads_per_data_dir.max(1))),
            reconciled: watch::channel(None).0,
            replica_capacity: OpenFilesBudget::of(&config).replica_capacity(),
            failed: parking_lot::Mutex::default(),
            offline_for_capacity: parking_lot::Mutex::default(),
            isr_proposals: parking_lot::Mutex::default(),
            partitions: RwLock::default(),
            applied_configs: RwLock::default(),
            applied_defaults: parking_lot::Mutex::new(config.overrides.clone()),
            checkpointed: parking_lot::Mutex::new(checkpointed),
            fetch_reads: Arc::new(Semaphore::new(config.num_io_threads.max(1))),
            tail_cache: TailCacheBudget::new(config.log_tail_cache_bytes, config.log_tail_cache_total_bytes),
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
                self.get(topic.topic_id, index).ok_or(ResponseError::NotLeaderOrFollower)
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

    fn partition_dir(&self, topic: &str, index: i32) -> PathBuf {
        partition_dir(&self.config.data_dir, topic, index)
    }

    /// The partition replicas this broker may host (`None`: unlimited), from its open-files
    /// budget; registered with the quorum so the controller places no more here.
    pub fn replica_capacity(&self) -> Option<u32> {
        self.replica_capacity
    }

    /// Waits until the hosted partitions reflect the image at `last_offset` or a newer one
    /// (the reconciler in `broker.rs` reports each round through [`Self::mark_reconciled`]).
    pub async fn wait_reconciled_to(&self, last_offset: u64) {
        let mut reconciled = self.reconciled.subscribe();
        let _ = reconciled.wait_for(|done| done.is_some_and(|d| d >= last_offset)).await;
    }

    /// Waits until the hosted partitions reflect the current image; returns at once before the
    /// first round (this start's registration is not committed yet, so nothing is hosted).
    pub async fn wait_reconciled(&self) {
        let target = self.metadata.image().last_offset;
        let mut reconciled = self.reconciled.subscribe();
        let _ = reconciled.wait_for(|done| done.is_none_or(|d| d >= target)).await;
    }

    /// Whether the hosted partitions already reflect the image at `last_offset`.
    pub fn is_reconciled_to(&self, last_offset: u64) -> bool {
        self.reconciled.borrow().is_some_and(|d| d >= last_offset)
    }

    /// Releases every waiter for good once the reconciler has stopped (shutdown): a commit made
    /// after that (the controller's timer finishing a proposal) must not wait for a round that
    /// will never run.
    pub fn stop_reconciling(&self) {
        self.mark_reconciled(u64::MAX);
    }

    /// Records that a round brought everything up to the image at `last_offset`.
    pub fn mark_reconciled(&self, last_offset: u64) {
        self.reconciled.send_if_modified(|done| {
            let newer = done.is_none_or(|d| d < last_offset);
            if newer {
                *done = Some(last_offset);
            }
            newer
        });
    }

    /// One reconciliation round: brings the hosted partitions in line with `image`. Rounds
    /// run one at a time, from the reconciler task (`broker.rs`), each with the newest image,
    /// so a later image never takes effect before an earlier one's.
    ///
    /// Nothing here blocks an async worker on the disk. Registrations and configs of
    /// partitions already open are applied first, at once; then the logs of partitions no
    /// longer hosted are deleted, and the new ones opened (created or recovered), on the
    /// blocking pool, `num.recovery.threads.per.data.dir` at a time (deletions first, so a
    /// topic re-created under the same name never shares its directory with the old log).
    /// A partition becomes visible, as leader or follower, only once its log is open. One
    /// that fails to open is logged once and stays offline until restart; one beyond this
    /// broker's replica capacity is logged once and stays offline while the capacity is full.
    pub async fn reconcile_image(&self, image: &MetadataImage, now_ms: i64) {
        let _round = self.round.lock().await;
        let plan = self.plan_round(image, now_ms);
        let mut deletions = JoinSet::new();
        for partition in plan.deletions {
            let Ok(permit) = self.recovery_permits.clone().acquire_owned().await else {
                return;
            };
            let dir = self.partition_dir(&partition.topic, partition.index);
            deletions.spawn_blocking(move || {
                let _permit = permit;
                delete_log(partition, &dir);
            });
        }
        while deletions.join_next().await.is_some() {}
        let mut opens = JoinSet::new();
        for job in plan.opens {
            let Ok(permit) = self.recovery_permits.clone().acquire_owned().await else {
                return;
            };
            let node = self.config.node_id;
            let tail_cache = self.tail_cache.clone();
            opens.spawn_blocking(move || {
                let _permit = permit;
                let opened = open_replica(&job, node, &tail_cache, now_ms);
                (job, opened)
            });
            while let Some(done) = opens.try_join_next() {
                self.install(done, now_ms);
            }
        }
        while let Some(done) = opens.join_next().await {
            self.install(done, now_ms);
        }
    }

    /// The synchronous part of a round (memory only): applies `image` to the partitions
    /// already open, takes the ones no longer hosted out of the map, and lists the logs to
    /// delete and to open.
    fn plan_round(&self, image: &MetadataImage, now_ms: i64) -> RoundPlan {
        let node = self.config.node_id;
        let mut wanted = HashSet::new();
        let mut opens = Vec::new();
        let defaults = topic_config::broker_defaults(&self.config.overrides, &image.broker_configs, node);
        // A dynamic broker config (log.retention.ms, ...) changes every topic's fallback.
        let defaults_changed = {
            let mut applied = self.applied_defaults.lock();
            let changed = *applied != *defaults;
            if changed {
                *applied = defaults.clone().into_owned();
            }
            changed
        };
        for topic in image.topics.values() {
            let config_changed =
                defaults_changed || self.applied_configs.read().get(&topic.topic_id) != Some(&topic.configs);
            let log_config = topic_config::log_config(&topic.configs, &defaults);
            for (index, registration) in topic.partitions.iter().enumerate() {
                if !registration.replicas.contains(&node) {
                    continue;
                }
                let key = (topic.topic_id, index as i32);
                wanted.insert(key);
                match self.get(key.0, key.1) {
                    Some(existing) => {
                        if config_changed {
                            existing.update_config(log_config.clone());
                        }
                        self.apply_role(&existing, registration, now_ms);
                    }
                    None if self.failed.lock().contains(&key) => {}
                    None => opens.push(OpenJob {
                        key,
                        topic: topic.name.clone(),
                        dir: self.partition_dir(&topic.name, key.1),
                        log_config: log_config.clone(),
                        registration: registration.clone(),
                        checkpointed_hw: self.checkpointed.lock().remove(&(topic.name.clone(), key.1)),
                    }),
                }
            }
            if config_changed {
                self.applied_configs
                    .write()
                    .insert(topic.topic_id, topic.configs.clone());
            }
        }
        let deletions: Vec<Arc<Partition>> = {
            let mut partitions = self.partitions.write();
            let gone: Vec<PartitionKey> = partitions.keys().filter(|k| !wanted.contains(k)).copied().collect();
            gone.iter().filter_map(|k| partitions.remove(k)).collect()
        };
        for partition in &deletions {
            self.fetchers.remove((partition.topic_id, partition.index));
            self.applied_configs.write().remove(&partition.topic_id);
        }
        self.failed.lock().retain(|k| wanted.contains(k));
        let opens = self.within_capacity(opens, &wanted);
        RoundPlan { deletions, opens }
    }

    /// The opens that fit the replica capacity once the partitions already open are counted;
    /// each one left out is logged once (until it opens or is no longer hosted here).
    fn within_capacity(&self, mut opens: Vec<OpenJob>, wanted: &HashSet<PartitionKey>) -> Vec<OpenJob> {
        let mut offline = self.offline_for_capacity.lock();
        offline.retain(|k| wanted.contains(k));
        let Some(capacity) = self.replica_capacity else {
            offline.clear();
            return opens;
        };
        let room = (capacity as usize).saturating_sub(self.partitions.read().len());
        if opens.len() <= room {
            for job in &opens {
                offline.remove(&job.key);
            }
            return opens;
        }
        let left_out = opens.split_off(room);
        for job in &opens {
            offline.remove(&job.key);
        }
        let mut checkpointed = self.checkpointed.lock();
        for job in &left_out {
            if let Some(hw) = job.checkpointed_hw {
                checkpointed.insert((job.topic.clone(), job.key.1), hw);
            }
            if offline.insert(job.key) {
                tracing::error!(
                    topic = %job.topic, partition = job.key.1, replica_capacity = capacity,
                    "this broker already hosts as many partition replicas as its open-files limit allows; this one stays offline. Raise the open-files limit (ulimit -n) and restart the broker, or move replicas to other brokers"
                );
            }
        }
        opens
    }

    /// Makes an opened log visible (in the map, with its registration applied), or records
    /// that it failed to open.
    fn install(&self, done: Result<(OpenJob, Result<Partition, LogError>), tokio::task::JoinError>, now_ms: i64) {
        let (job, opened) = match done {
            Ok(done) => done,
            Err(e) => {
                tracing::error!(error = %e, "a partition open on the blocking pool did not finish; that partition stays offline");
                return;
            }
        };
        match opened {
            Ok(partition) => {
                let partition = Arc::new(partition);
                self.partitions.write().insert(job.key, partition.clone());
                self.apply_role(&partition, &job.registration, now_ms);
            }
            Err(e) => {
                self.failed.lock().insert(job.key);
                tracing::error!(
                    topic = %job.topic, partition = job.key.1, error = %e,
                    "failed to open the partition log; it stays offline until the problem is fixed and the broker restarted"
                );
            }
        }
    }

    /// Applies a partition's registration: leader or follower, handed to the right fetcher.
    fn apply_role(&self, partition: &Arc<Partition>, registration: &PartitionRegistration, now_ms: i64) {
        let key = (partition.topic_id, partition.index);
        match partition.apply_registration(registration, now_ms) {
            RoleChange::Unchanged => {}
            RoleChange::BecameLeader => {
                let why = registration
                    .election
                    .map_or_else(|| "not recorded".to_string(), |e| e.to_string());
                tracing::info!(topic = %partition.topic, partition = key.1, leader_epoch = registration.leader_epoch,
                    isr = ?registration.isr, election = %why, "became partition leader");
                self.fetchers.remove(key);
            }
            RoleChange::BecameFollower { leader, leader_epoch } => {
                tracing::info!(topic = %partition.topic, partition = key.1, leader, leader_epoch, "became follower");
                self.fetchers.follow(partition.clone(), leader, leader_epoch);
            }
        }
    }

    /// Kafka's `fetchMessages` before any read: partition `index` of `topic` when this broker
    /// leads it. For a follower whose identity checked out, its fetch offset is its log end
    /// offset (`updateFollowerFetchState`): that may advance the high watermark, and the
    /// AlterPartition bringing it back into the ISR is proposed here. A refused fetch moves
    /// no follower's progress, ISR or high watermark.
    pub fn partition_for_fetch(
        self: &Arc<Self>,
        topic: &TopicImage,
        index: i32,
        fetch_offset: i64,
        log_start_offset: i64,
        current_leader_epoch: i32,
        party: FetchParty,
        now_ms: i64,
    ) -> Result<Arc<Partition>, ResponseError> {
        let (partition, _) = self.leader_partition(topic, index)?;
        if let FetchParty::Follower { replica_id, identity } = party {
            identity?;
            partition.check_leader_epoch(current_leader_epoch)?;
            let expand = partition.record_follower_fetch(
                replica_id,
                fetch_offset,
                log_start_offset,
                current_leader_epoch,
                now_ms,
            )?;
            if let Some(command) = expand {
                self.propose_isr_change(partition.clone(), command, IsrChange::Expand);
            }
        }
        Ok(partition)
    }

    /// Proposes an ISR change a partition leader decided on, in the background. Once the
    /// quorum has decided, the hosted partitions are brought up to date before the leader may
    /// propose again, so the leader never counts an ISR older than the one committed.
    pub fn propose_isr_change(
        self: &Arc<Self>,
        partition: Arc<Partition>,
        command: MetadataCommand,
        change: IsrChange,
    ) {
        let replicas = self.clone();
        let mut proposals = self.isr_proposals.lock();
        while proposals.try_join_next().is_some() {} // reap finished ones
        proposals.spawn(async move {
            match replicas.metadata.commit(command).await {
                Ok(_) => {
                    let counter = match change {
                        IsrChange::Shrink => &replicas.metrics.isr_shrinks,
                        IsrChange::Expand => &replicas.metrics.isr_expands,
                    };
                    counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    replicas.wait_reconciled().await;
                }
                Err(e) => {
                    tracing::info!(
                        topic = %partition.topic, partition = partition.index, error = %e,
                        "ISR change not accepted; will re-evaluate shortly"
                    );
                    // Refused changes (a replica still fenced, say) are not retried at fetch rate.
                    tokio::time::sleep(ISR_CHANGE_RETRY).await;
                }
            }
            partition.isr_change_finished();
        });
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
                        if let Some(command) = partition.isr_shrink(now, lag_ms as i64) {
                            self.propose_isr_change(partition, command, IsrChange::Shrink);
                        }
                    }
                }
                _ = checkpoint_ticker.tick() => self.checkpoint_high_watermarks(),
            }
        }
    }

    /// Deletes partition directories whose topic no longer exists (deleted while the broker
    /// was down, or a crash between the metadata change and the deletion).
    pub fn remove_orphan_dirs(&self, image: &MetadataImage) {
        let Ok(entries) = std::fs::read_dir(&self.config.data_dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if !path.is_dir() {
                continue;
            }
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            if name == METADATA_LOG_DIR {
                continue;
            }
            let Some((topic, index)) = parse_partition_dir(name) else {
                continue;
            };
            let hosted = image
                .topic(topic)
                .and_then(|t| t.partitions.get(index as usize))
                .is_some_and(|p| p.replicas.contains(&self.config.node_id));
            if !hosted {
                tracing::info!(dir = %path.display(), "removing the log of a partition that no longer exists");
                if let Err(e) = std::fs::remove_dir_all(&path) {
                    tracing::warn!(dir = %path.display(), error = %e, "could not remove an orphaned partition directory");
                }
            }
        }
    }

    /// Records every hosted partition's high watermark in the data dir's checkpoint.
    pub fn checkpoint_high_watermarks(&self) {
        let mut entries: Vec<(String, i32, i64)> = self
            .all()
            .iter()
            .map(|p| (p.topic.clone(), p.index, p.high_watermark()))
            .collect();
        entries.sort();
        if let Err(e) = checkpoint::write(&self.config.data_dir, &entries) {
            tracing::warn!(error = %e, dir = %self.config.data_dir.display(),
                "could not write the high-watermark checkpoint; check the data dir's disk");
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

/// What one reconciliation round does on the disk, decided from the image in memory.
struct RoundPlan {
    /// Partitions no longer hosted here, already out of the map: their logs are deleted.
    deletions: Vec<Arc<Partition>>,
    opens: Vec<OpenJob>,
}

/// A partition log to open (create or recover) on the blocking pool, and the registration it
/// takes once open.
struct OpenJob {
    key: PartitionKey,
    topic: String,
    dir: PathBuf,
    log_config: crate::log::LogConfig,
    registration: PartitionRegistration,
    checkpointed_hw: Option<i64>,
}

/// Opens a replica's log (blocking: directory fsyncs, tail recovery). A directory left by an
/// older topic of the same name is removed first, and its checkpointed high watermark ignored.
fn open_replica(
    job: &OpenJob,
    node_id: i32,
    tail_cache: &Arc<TailCacheBudget>,
    now_ms: i64,
) -> Result<Partition, LogError> {
    let mut checkpointed_hw = job.checkpointed_hw;
    if partition_metadata::prepare_partition_dir(&job.dir, job.key.0)? {
        checkpointed_hw = None;
    }
    Partition::open(
        &job.dir,
        &job.topic,
        job.key.0,
        job.key.1,
        node_id,
        job.log_config.clone(),
        checkpointed_hw,
        tail_cache,
        now_ms,
    )
}

/// Deletes a removed partition's log (blocking).
fn delete_log(partition: Arc<Partition>, dir: &Path) {
    tracing::info!(topic = %partition.topic, partition = partition.index, "deleting partition log");
    let result = match Arc::try_unwrap(partition) {
        Ok(p) => p.shutdown(true),
        // A request still holds it: remove the files; the open handles die with it.
        Err(_) => std::fs::remove_dir_all(dir).map_err(LogError::from),
    };
    if let Err(e) = result {
        tracing::warn!(dir = %dir.display(), error = %e, "could not delete a removed partition's directory; delete it by hand");
    }
}

#[cfg(test)]
mod tests {
    use super::{check_follower_identity, parse_partition_dir};
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

    #[test]
    fn partition_dirs_split_at_the_last_dash() {
        assert_eq!(parse_partition_dir("my-topic-12"), Some(("my-topic", 12)));
        assert_eq!(parse_partition_dir("orders-0"), Some(("orders", 0)));
        assert_eq!(parse_partition_dir("orders"), None);
        assert_eq!(parse_partition_dir("-3"), None);
        assert_eq!(parse_partition_dir("x-y"), None);
    }
}

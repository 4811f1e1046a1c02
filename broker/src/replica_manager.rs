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

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use parking_lot::RwLock;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use uuid::Uuid;

use crate::clock::now_ms;
use crate::config::BrokerConfig;
use crate::log::{partition_metadata, LogError};
use crate::metadata::image::{MetadataImage, PartitionRegistration, TopicImage};
use crate::metadata::records::MetadataCommand;
use crate::metadata::{MetadataStore, METADATA_LOG_DIR};
use crate::metrics::BrokerMetrics;
use crate::partition::{AppendError, Partition, RoleChange};
use crate::quota::ReplicationQuota;
use crate::replication::{checkpoint, ReplicaFetcherManager};
use crate::topic_config;

type PartitionKey = (Uuid, i32);

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
    /// Where ISR changes are proposed and the image they are applied from.
    metadata: Arc<MetadataStore>,
    /// ISR shrinks and expands are counted here once committed.
    metrics: Arc<BrokerMetrics>,
    /// Serialises reconciliation so partitions always follow the newest image, never an older
    /// one applied late by a slower task.
    reconcile_lock: parking_lot::Mutex<()>,
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
    pub fn new(config: Arc<BrokerConfig>, metadata: Arc<MetadataStore>, metrics: Arc<BrokerMetrics>) -> Self {
        let checkpointed = checkpoint::read(&config.data_dir);
        ReplicaManager {
            fetchers: ReplicaFetcherManager::new(
                config.clone(),
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
            reconcile_lock: parking_lot::Mutex::new(()),
            isr_proposals: parking_lot::Mutex::default(),
            partitions: RwLock::default(),
            applied_configs: RwLock::default(),
            applied_defaults: parking_lot::Mutex::new(config.overrides.clone()),
            checkpointed: parking_lot::Mutex::new(checkpointed),
            fetch_reads: Arc::new(Semaphore::new(config.num_io_threads.max(1))),
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

    /// Brings hosted partitions in line with the newest image, read under the reconcile lock,
    /// and returns that image. Errors opening one log are logged and that partition stays
    /// offline; the others carry on.
    pub fn reconcile(&self, now_ms: i64) -> Arc<MetadataImage> {
        let _serial = self.reconcile_lock.lock();
        let image = self.metadata.image();
        self.apply_image(&image, now_ms);
        image
    }

    fn apply_image(&self, image: &MetadataImage, now_ms: i64) {
        let node = self.config.node_id;
        let mut wanted = std::collections::HashSet::new();
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
                let partition = match self.get(key.0, key.1) {
                    Some(existing) => {
                        if config_changed {
                            existing.update_config(log_config.clone());
                        }
                        existing
                    }
                    None => {
                        let dir = self.partition_dir(&topic.name, key.1);
                        let mut checkpointed_hw = self.checkpointed.lock().remove(&(topic.name.clone(), key.1));
                        match partition_metadata::prepare_partition_dir(&dir, topic.topic_id) {
                            // The checkpointed HW was the old topic's.
                            Ok(true) => checkpointed_hw = None,
                            Ok(false) => {}
                            Err(e) => {
                                tracing::error!(
                                    topic = %topic.name, partition = key.1, error = %e,
                                    "cannot tell which topic the partition directory belongs to; it stays offline until partition.metadata is fixed or the directory removed"
                                );
                                continue;
                            }
                        }
                        match Partition::open(
                            &dir,
                            &topic.name,
                            topic.topic_id,
                            key.1,
                            node,
                            log_config.clone(),
                            checkpointed_hw,
                            now_ms,
                        ) {
                            Ok(partition) => {
                                let partition = Arc::new(partition);
                                self.partitions.write().insert(key, partition.clone());
                                partition
                            }
                            Err(e) => {
                                tracing::error!(
                                    topic = %topic.name, partition = key.1, error = %e,
                                    "failed to open the partition log; it stays offline until the disk problem is fixed and the broker restarted"
                                );
                                continue;
                            }
                        }
                    }
                };
                match partition.apply_registration(registration, now_ms) {
                    RoleChange::Unchanged => {}
                    RoleChange::BecameLeader => {
                        tracing::info!(topic = %topic.name, partition = key.1, leader_epoch = registration.leader_epoch,
                            isr = ?registration.isr, "became partition leader");
                        self.fetchers.remove(key);
                    }
                    RoleChange::BecameFollower { leader, leader_epoch } => {
                        tracing::info!(topic = %topic.name, partition = key.1, leader, leader_epoch, "became follower");
                        self.fetchers.follow(partition, leader, leader_epoch);
                    }
                }
            }
            if config_changed {
                self.applied_configs
                    .write()
                    .insert(topic.topic_id, topic.configs.clone());
            }
        }
        let removed: Vec<Arc<Partition>> = {
            let mut partitions = self.partitions.write();
            let gone: Vec<PartitionKey> = partitions.keys().filter(|k| !wanted.contains(k)).copied().collect();
            gone.iter().filter_map(|k| partitions.remove(k)).collect()
        };
        for partition in removed {
            self.fetchers.remove((partition.topic_id, partition.index));
            self.applied_configs.write().remove(&partition.topic_id);
            let dir = self.partition_dir(&partition.topic, partition.index);
            tracing::info!(topic = %partition.topic, partition = partition.index, "deleting partition log");
            let result = match Arc::try_unwrap(partition) {
                Ok(p) => p.shutdown(true),
                // A request still holds it: remove the files; the open handles die with it.
                Err(_) => std::fs::remove_dir_all(&dir).map_err(LogError::from),
            };
            if let Err(e) = result {
                tracing::warn!(dir = %dir.display(), error = %e, "could not delete a removed partition's directory; delete it by hand");
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
                    replicas.reconcile(now_ms());
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

//! Reconciling the hosted partitions with the metadata image, one round at a time: logs opened
//! and deleted on the blocking pool, configs and roles (leader or follower) applied, orphaned
//! partition directories removed, and the waits for a round to reach a given image.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::task::JoinSet;
use uuid::Uuid;

/// Role changes a reconciliation round logs one line each at info level: enough for a failover
/// of a few topics, while a restart of a broker leading 100,000 partitions logs one summary.
const ROLE_CHANGES_LOGGED: usize = 64;

/// `tracing::info!` when the first argument is true, else `tracing::debug!` (a callsite's
/// level is fixed at compile time).
macro_rules! info_or_debug {
    ($at_info:expr, $($event:tt)+) => {
        if $at_info {
            tracing::info!($($event)+)
        } else {
            tracing::debug!($($event)+)
        }
    };
}

use super::{parse_partition_dir, PartitionKey, ReplicaManager};
use crate::log::{partition_metadata, FileCache, LogError, TailCacheBudget};
use crate::metadata::image::{MetadataImage, PartitionRegistration};
use crate::metadata::METADATA_LOG_DIR;
use crate::partition::{Partition, RoleChange};
use crate::topic_config;

impl ReplicaManager {
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
    /// that fails to open is logged once and stays offline until restart.
    pub async fn reconcile_image(&self, image: &MetadataImage, now_ms: i64) {
        let _round = self.round.lock().await;
        for count in &self.role_changes {
            count.store(0, Ordering::Relaxed);
        }
        self.install_round(image, now_ms).await;
        let [leader, follower] = self.role_changes.each_ref().map(|c| c.load(Ordering::Relaxed));
        if leader + follower > ROLE_CHANGES_LOGGED {
            tracing::info!(
                became_leader = leader,
                became_follower = follower,
                "this broker became leader of {leader} partitions and follower of {follower}; the first \
                 {ROLE_CHANGES_LOGGED} were logged one by one, the rest at debug level"
            );
        }
    }

    async fn install_round(&self, image: &MetadataImage, now_ms: i64) {
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
            let (tail_cache, file_cache) = (self.tail_cache.clone(), self.file_cache.clone());
            opens.spawn_blocking(move || {
                let _permit = permit;
                let opened = open_replica(&job, node, &tail_cache, &file_cache, now_ms);
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
        // Topics whose image is the one the last round applied keep their partitions as they
        // are: a round costs the topics that changed, not every hosted partition.
        let mut applied_topics = self.applied_topics.lock();
        let mut unchanged: HashSet<Uuid> = HashSet::new();
        for topic in image.topics.values() {
            if !defaults_changed
                && applied_topics
                    .get(&topic.topic_id)
                    .is_some_and(|t| Arc::ptr_eq(t, topic))
            {
                unchanged.insert(topic.topic_id);
                continue;
            }
            applied_topics.insert(topic.topic_id, topic.clone());
            let config_changed =
                defaults_changed || self.applied_configs.read().get(&topic.topic_id) != Some(&topic.configs);
            // One copy of the topic's settings and name, shared by its partitions.
            let log_config = Arc::new(topic_config::log_config(&topic.configs, &defaults));
            let mut name: Option<Arc<str>> = None;
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
                        topic: name.get_or_insert_with(|| Arc::from(topic.name.as_str())).clone(),
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
        applied_topics.retain(|id, _| image.topic_names.contains_key(id));
        drop(applied_topics);
        let kept = |k: &PartitionKey| unchanged.contains(&k.0) || wanted.contains(k);
        let deletions: Vec<Arc<Partition>> = {
            let mut partitions = self.partitions.write();
            let gone: Vec<PartitionKey> = partitions.keys().filter(|k| !kept(k)).copied().collect();
            gone.iter().filter_map(|k| partitions.remove(k)).collect()
        };
        for partition in &deletions {
            // Fetch sessions following it read it once more and find it gone.
            partition.watch().close_subscriptions();
            self.fetchers.remove((partition.topic_id, partition.index));
            self.applied_configs.write().remove(&partition.topic_id);
        }
        self.failed.lock().retain(kept);
        RoundPlan { deletions, opens }
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
    /// A round's first [`ROLE_CHANGES_LOGGED`] role changes are logged at info, one line each,
    /// the rest at debug and summed up when the round ends.
    fn apply_role(&self, partition: &Arc<Partition>, registration: &PartitionRegistration, now_ms: i64) {
        let key = (partition.topic_id, partition.index);
        let change = partition.apply_registration(registration, now_ms);
        let side = match change {
            RoleChange::Unchanged => return,
            RoleChange::BecameLeader => 0,
            RoleChange::BecameFollower { .. } => 1,
        };
        let seen = self.role_changes[side].fetch_add(1, Ordering::Relaxed)
            + self.role_changes[1 - side].load(Ordering::Relaxed);
        let at_info = seen < ROLE_CHANGES_LOGGED;
        match change {
            RoleChange::Unchanged => {}
            RoleChange::BecameLeader => {
                let why = registration
                    .election
                    .map_or_else(|| "not recorded".to_string(), |e| e.to_string());
                info_or_debug!(at_info, topic = %partition.topic, partition = key.1, leader_epoch = registration.leader_epoch,
                    isr = ?registration.isr, election = %why, "became partition leader");
                self.fetchers.remove(key);
            }
            RoleChange::BecameFollower { leader, leader_epoch } => {
                info_or_debug!(at_info, topic = %partition.topic, partition = key.1, leader, leader_epoch, "became follower");
                self.fetchers.follow(partition.clone(), leader, leader_epoch);
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
    topic: Arc<str>,
    dir: PathBuf,
    log_config: Arc<crate::log::LogConfig>,
    registration: PartitionRegistration,
    checkpointed_hw: Option<i64>,
}

/// Opens a replica's log (blocking: directory fsyncs, tail recovery). A directory left by an
/// older topic of the same name is removed first, and its checkpointed high watermark ignored.
fn open_replica(
    job: &OpenJob,
    node_id: i32,
    tail_cache: &Arc<TailCacheBudget>,
    file_cache: &Arc<FileCache>,
    now_ms: i64,
) -> Result<Partition, LogError> {
    let mut checkpointed_hw = job.checkpointed_hw;
    if partition_metadata::prepare_partition_dir(&job.dir, job.key.0)? {
        checkpointed_hw = None;
    }
    Partition::open(
        &job.dir,
        job.topic.clone(),
        job.key.0,
        job.key.1,
        node_id,
        job.log_config.clone(),
        checkpointed_hw,
        tail_cache,
        file_cache,
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

//! Consumer groups (Kafka's classic group protocol) and their durable offsets.
//!
//! `coordinator/` is the pure state machine; `records.rs` the `__consumer_offsets` record
//! formats. This module is the glue (Kafka's `GroupMetadataManager`): it loads a partition's
//! groups when this broker becomes its leader and drops them when leadership moves, appends the
//! records the state machine asks for to `__consumer_offsets` and waits until they are
//! committed (high watermark past them) before the client is answered, delivers deferred
//! JoinGroup/SyncGroup answers, and drives the timers. TxnOffsetCommit appends transactional
//! batches whose offsets stay pending until WriteTxnMarkers reports the transaction's end
//! (`complete_transaction`); loading replays markers the same way.
//!
//! The state machine sits behind one mutex, never held across an await; appends to the
//! offsets partition happen under it so that validation and append are one step.

pub mod assignor;
pub mod consumer_records;
pub mod coordinator;
pub mod record_codec;
pub mod records;
mod share_state;
pub mod share_state_records;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use parking_lot::Mutex;
use tokio::sync::{oneshot, watch};

use sluice_protocol::batch::{validate_stored_batch, BatchError, BatchHeader};
use sluice_protocol::records::BatchRecords;

use crate::clock::now_ms;
pub use crate::config::OffsetsSettings;
use crate::coordinator_log::{self, Appended};
use crate::invariant;
use crate::log::LogError;
use crate::metadata::image::MetadataImage;
use crate::metadata::MetadataStore;
use crate::partition::Partition;
use crate::producer_state::{TxnVerification, VerificationGuard};
use crate::replica_manager::ReplicaManager;
use crate::topic_config::BrokerOverrides;
use coordinator::{
    AfterStore, ConsumerGroupSummary, ConsumerHeartbeat, ConsumerHeartbeatResult, Effect, GroupConfig,
    GroupCoordinator, GroupSummary, HeartbeatError, JoinRequest, JoinResult, ListedGroup, LoadedRecord, MemberError,
    ReplyId, SyncRequest, SyncResult, TopicCatalog,
};
pub use coordinator::{ShareGroupSummary, ShareHeartbeat, ShareHeartbeatResult, ShareMember};
use records::{GroupRecord, OffsetAndMetadata};
use sluice_protocol::control::{control_type, ControlType};

/// The internal topic holding group metadata and committed offsets.
pub use crate::controller::OFFSETS_TOPIC;

/// The topics KIP-848 subscriptions resolve against: the metadata image's, internal ones
/// left out of regex matches.
struct ImageTopics<'a>(&'a MetadataImage);

impl TopicCatalog for ImageTopics<'_> {
    fn topic(&self, name: &str) -> Option<(uuid::Uuid, i32)> {
        self.0.topic(name).map(|t| (t.topic_id, t.partitions.len() as i32))
    }

    fn matching(&self, pattern: &regex::Regex) -> Vec<String> {
        self.0
            .topics
            .keys()
            .filter(|name| !crate::controller::is_internal_topic(name) && pattern.is_match(name))
            .cloned()
            .collect()
    }
}

/// How often session, join and sync deadlines are checked.
const TICK: Duration = Duration::from_millis(100);

pub struct GroupMetadataManager {
    inner: Arc<Mutex<Inner>>,
    settings: OffsetsSettings,
    /// Where `__consumer_offsets` partitions are hosted (records are appended as their leader).
    replicas: Arc<ReplicaManager>,
    metadata: Arc<MetadataStore>,
    /// The broker's `--set` values: `min.insync.replicas` for `__consumer_offsets` falls back on them.
    broker_overrides: BrokerOverrides,
}

struct Inner {
    coordinator: GroupCoordinator,
    next_reply: ReplyId,
    joins: HashMap<ReplyId, oneshot::Sender<JoinResult>>,
    syncs: HashMap<ReplyId, oneshot::Sender<SyncResult>>,
}

/// Appends the state machine asked for, run once the lock is released.
enum Store {
    Group {
        partition: i32,
        group_id: String,
        key: Bytes,
        value: Bytes,
        generation_id: i32,
        then: AfterStore,
    },
    Tombstones {
        partition: i32,
        keys: Vec<Bytes>,
    },
    Records {
        partition: i32,
        records: Vec<(Bytes, Option<Bytes>)>,
    },
}

impl Inner {
    /// Delivers answers now and returns the appends to make.
    fn apply(&mut self, fx: Vec<Effect>) -> Vec<Store> {
        let mut stores = Vec::new();
        for effect in fx {
            match effect {
                Effect::Join(id, result) => {
                    if let Some(tx) = self.joins.remove(&id) {
                        let _ = tx.send(result);
                    }
                }
                Effect::Sync(id, result) => {
                    if let Some(tx) = self.syncs.remove(&id) {
                        let _ = tx.send(result);
                    }
                }
                Effect::StoreGroup {
                    partition,
                    group_id,
                    group,
                    generation_id,
                    then,
                } => stores.push(Store::Group {
                    partition,
                    key: records::group_metadata_key(&group_id),
                    value: records::group_metadata_value(&group),
                    group_id,
                    generation_id,
                    then,
                }),
                Effect::Tombstones {
                    partition,
                    group_id,
                    offsets,
                    group,
                } => {
                    let mut keys: Vec<Bytes> = offsets
                        .iter()
                        .map(|(topic, p)| records::offset_commit_key(&group_id, topic, *p))
                        .collect();
                    if group {
                        keys.push(records::group_metadata_key(&group_id));
                    }
                    if !keys.is_empty() {
                        stores.push(Store::Tombstones { partition, keys });
                    }
                }
                Effect::Records { partition, records } => stores.push(Store::Records {
                    partition,
                    records: records.iter().map(GroupRecord::encode).collect(),
                }),
            }
        }
        stores
    }

    fn reply_id(&mut self) -> ReplyId {
        self.next_reply = self.next_reply.wrapping_add(1);
        self.next_reply
    }
}

impl GroupMetadataManager {
    pub fn new(
        config: GroupConfig,
        settings: OffsetsSettings,
        replicas: Arc<ReplicaManager>,
        metadata: Arc<MetadataStore>,
        broker_overrides: BrokerOverrides,
    ) -> Self {
        GroupMetadataManager {
            replicas,
            metadata,
            broker_overrides,
            inner: Arc::new(Mutex::new(Inner {
                coordinator: GroupCoordinator::new(config),
                next_reply: 0,
                joins: HashMap::new(),
                syncs: HashMap::new(),
            })),
            settings,
        }
    }

    pub fn partition_for(&self, group_id: &str) -> i32 {
        self.inner.lock().coordinator.partition_for(group_id)
    }

    pub fn config(&self) -> GroupConfig {
        self.inner.lock().coordinator.config().clone()
    }

    /// Follows leadership of `__consumer_offsets` partitions: loads the groups of partitions
    /// this broker now leads (at a new leader epoch) and unloads those it no longer leads.
    pub fn reconcile(&self, image: &MetadataImage, node_id: i32) {
        let mut wanted: HashMap<i32, (i32, Arc<Partition>)> = HashMap::new();
        if let Some(topic) = image.topic(OFFSETS_TOPIC) {
            for (index, registration) in topic.partitions.iter().enumerate() {
                if registration.leader != node_id {
                    continue;
                }
                if let Some(partition) = self.replicas.get(topic.topic_id, index as i32) {
                    wanted.insert(index as i32, (registration.leader_epoch, partition));
                }
            }
        }
        let mut inner = self.inner.lock();
        let owned = inner.coordinator.owned_partitions();
        let mut fx = Vec::new();
        for (partition, epoch) in &owned {
            if wanted.get(partition).map(|(e, _)| e) != Some(epoch) {
                tracing::info!(
                    partition,
                    "no longer leading this __consumer_offsets partition; unloading its groups"
                );
                fx.extend(inner.coordinator.unload(*partition));
            }
        }
        for (index, (epoch, partition)) in wanted {
            if owned.get(&index) == Some(&epoch) {
                continue;
            }
            fx.extend(inner.coordinator.begin_load(index, epoch));
            let manager = self.inner.clone();
            let buffer = self.settings.load_buffer_size;
            let max_message_bytes = partition.max_message_bytes();
            tokio::task::spawn_blocking(move || {
                load_partition(manager, partition, index, epoch, buffer, max_message_bytes)
            });
        }
        let stores = inner.apply(fx);
        debug_assert!(stores.is_empty(), "loading and unloading only answer waiting requests");
    }

    pub async fn join(self: &Arc<Self>, request: JoinRequest, image: &MetadataImage) -> JoinResult {
        let (tx, rx) = oneshot::channel();
        let (stores, classic) = {
            let mut inner = self.inner.lock();
            if inner.coordinator.has_consumer_members(&request.group_id) {
                // A classic member of a KIP-848 group (`coordinator/migration.rs`): answered
                // once its records are stored, as a ConsumerGroupHeartbeat is.
                let now = now_ms();
                let catalog = ImageTopics(image);
                let (result, records) = inner.coordinator.classic_join_consumer_group(&request, &catalog, now);
                let partition = inner.coordinator.partition_for(&request.group_id);
                (Vec::new(), Some((result, self.append_records(partition, &records, now))))
            } else {
                let id = inner.reply_id();
                inner.joins.insert(id, tx);
                let fx = inner.coordinator.join_group(request, id, now_ms());
                (self.apply_ordered(&mut inner, fx), None)
            }
        };
        if let Some((result, appended)) = classic {
            let stored = match appended {
                Ok(None) => Ok(()),
                Ok(Some(appended)) => self.await_appended(appended).await.map_err(|(e, _)| e),
                Err(e) => Err(commit_error(e)),
            };
            return match stored {
                Ok(()) => result,
                Err(e) => JoinResult::failed(&result.member_id, e),
            };
        }
        self.run_stores(stores);
        rx.await.unwrap_or_else(|_| lost_join())
    }

    pub async fn sync(self: &Arc<Self>, request: SyncRequest) -> SyncResult {
        let (tx, rx) = oneshot::channel();
        let stores = {
            let mut inner = self.inner.lock();
            let id = inner.reply_id();
            inner.syncs.insert(id, tx);
            let fx = inner.coordinator.sync_group(request, id, now_ms());
            inner.apply(fx)
        };
        self.run_stores(stores);
        rx.await.unwrap_or_else(|_| SyncResult {
            error: Some(ResponseError::CoordinatorNotAvailable),
            protocol_type: None,
            protocol_name: None,
            assignment: Bytes::new(),
        })
    }

    pub fn heartbeat(
        &self,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation_id: i32,
    ) -> Result<(), ResponseError> {
        self.inner
            .lock()
            .coordinator
            .heartbeat(group_id, member_id, instance_id, generation_id, now_ms())
    }

    pub fn leave(
        self: &Arc<Self>,
        group_id: &str,
        members: &[(String, Option<String>)],
    ) -> Result<Vec<MemberError>, ResponseError> {
        let (errors, stores) = {
            let mut inner = self.inner.lock();
            let (errors, fx) = inner.coordinator.leave_group(group_id, members, now_ms())?;
            (errors, self.apply_ordered(&mut inner, fx))
        };
        self.run_stores(stores);
        Ok(errors)
    }

    /// Commits offsets: checked against the group, appended to its partition, and answered
    /// once the ISR has them, so a coordinator failover never loses an acknowledged commit.
    pub async fn commit_offsets(
        &self,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation_id: i32,
        offsets: Vec<((String, i32), OffsetAndMetadata)>,
    ) -> Result<(), ResponseError> {
        if offsets.is_empty() {
            return Ok(());
        }
        let now = now_ms();
        let wait = {
            let mut inner = self.inner.lock();
            let partition = inner
                .coordinator
                .validate_commit(group_id, member_id, instance_id, generation_id, now)?;
            let records = offset_records(group_id, &offsets);
            append(self, partition, &records, None, TxnVerification::Unchecked, now).map_err(commit_error)?
        };
        let deadline = tokio::time::Instant::now() + Duration::from_millis(self.settings.commit_timeout_ms);
        wait.wait.wait(deadline).await.map_err(|(e, _)| commit_error(e))?;
        self.inner
            .lock()
            .coordinator
            .offsets_committed(group_id, offsets, wait.base_offset, now_ms());
        Ok(())
    }

    /// Starts verifying (KIP-890) `producer_id`'s first transactional offset commit for the
    /// group: its `__consumer_offsets` partition and the guard to commit with, or `None` when
    /// the producer's transaction is open there already.
    pub fn start_txn_verification(
        &self,
        group_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        bumped_epoch: bool,
    ) -> Result<Option<(i32, VerificationGuard)>, ResponseError> {
        let index = self.partition_for(group_id);
        let image = self.metadata.image();
        let topic = image
            .topic(OFFSETS_TOPIC)
            .ok_or(ResponseError::CoordinatorNotAvailable)?;
        let (partition, _) = self
            .replicas
            .leader_partition(topic, index)
            .map_err(|_| ResponseError::NotCoordinator)?;
        Ok(partition
            .start_txn_verification(producer_id, producer_epoch, -1, bumped_epoch)
            .map(|guard| (index, guard)))
    }

    /// TxnOffsetCommit: checked against the group (KIP-447 fencing when the request names a
    /// member), appended as one transactional batch of `producer_id`/`producer_epoch` and
    /// pending from then on, answered once the ISR has it. The transaction's marker later
    /// ends it through [`GroupMetadataManager::complete_transaction`].
    #[allow(clippy::too_many_arguments)]
    pub async fn txn_commit_offsets(
        &self,
        group_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        member_id: &str,
        instance_id: Option<&str>,
        generation_id: i32,
        offsets: Vec<((String, i32), OffsetAndMetadata)>,
        verification: TxnVerification,
    ) -> Result<(), ResponseError> {
        let now = now_ms();
        let wait = {
            let mut inner = self.inner.lock();
            let partition =
                inner
                    .coordinator
                    .validate_txn_commit(group_id, member_id, instance_id, generation_id, now)?;
            if offsets.is_empty() {
                return Ok(());
            }
            let records = offset_records(group_id, &offsets);
            let producer = Some((producer_id, producer_epoch));
            let appended = append(self, partition, &records, producer, verification, now).map_err(txn_commit_error)?;
            inner
                .coordinator
                .txn_offsets_appended(group_id, producer_id, offsets, appended.base_offset);
            appended.wait
        };
        let deadline = tokio::time::Instant::now() + Duration::from_millis(self.settings.commit_timeout_ms);
        wait.wait(deadline).await.map_err(|(e, _)| txn_commit_error(e))
    }

    /// A COMMIT (`commit`) or ABORT marker of `producer_id` was appended to
    /// `__consumer_offsets` partition `partition_index`, which this broker leads, and
    /// replicated: that producer's pending offsets there become committed or are dropped.
    /// Called by WriteTxnMarkers.
    pub fn complete_transaction(&self, partition_index: i32, producer_id: i64, commit: bool) {
        self.inner
            .lock()
            .coordinator
            .complete_transaction(partition_index, producer_id, commit);
    }

    pub fn fetch_offsets(
        &self,
        group_id: &str,
        topics: Option<&[(String, Vec<i32>)]>,
    ) -> Result<coordinator::CommittedOffsets, ResponseError> {
        self.inner.lock().coordinator.fetch_offsets(group_id, topics)
    }

    /// [`GroupMetadataManager::fetch_offsets`] with, read in the same step, the partitions an
    /// open transaction holds offsets for (OffsetFetch's `require_stable`).
    pub fn fetch_offsets_and_pending(
        &self,
        group_id: &str,
        topics: Option<&[(String, Vec<i32>)]>,
    ) -> Result<(coordinator::CommittedOffsets, HashSet<(String, i32)>), ResponseError> {
        let inner = self.inner.lock();
        let committed = inner.coordinator.fetch_offsets(group_id, topics)?;
        Ok((committed, inner.coordinator.pending_txn_partitions(group_id)))
    }

    pub fn list_groups(&self) -> (Vec<ListedGroup>, bool) {
        self.inner.lock().coordinator.list_groups()
    }

    /// Whether KIP-848 consumer groups are served (`group.coordinator.rebalance.protocols`).
    pub fn consumer_protocol_enabled(&self) -> bool {
        self.inner.lock().coordinator.config().consumer_protocol_enabled
    }

    /// ConsumerGroupHeartbeat (KIP-848): what changed is appended to `__consumer_offsets`
    /// under the lock (so records reach the log in the order the state changed) and the
    /// answer waits until they are committed, as Kafka's.
    pub async fn consumer_heartbeat(
        &self,
        request: ConsumerHeartbeat,
        image: &MetadataImage,
    ) -> Result<ConsumerHeartbeatResult, HeartbeatError> {
        let catalog = ImageTopics(image);
        let now = now_ms();
        let (result, wait) = {
            let mut inner = self.inner.lock();
            let partition = inner.coordinator.partition_for(&request.group_id);
            let (result, records, fx) = inner.coordinator.consumer_heartbeat(request, &catalog, now)?;
            // Requests of a classic group's rebalance answered by its upgrade.
            let stores = inner.apply(fx);
            debug_assert!(stores.is_empty(), "an upgrade only answers waiting requests");
            let appended = self
                .append_records(partition, &records, now)
                .map_err(|e| (commit_error(e), String::new()))?;
            (result, appended)
        };
        if let Some(appended) = wait {
            self.await_appended(appended).await?;
        }
        Ok(result)
    }

    /// ShareGroupHeartbeat (KIP-932): share group members are kept in memory, nothing is stored.
    pub fn share_heartbeat(
        &self,
        request: ShareHeartbeat,
        image: &MetadataImage,
    ) -> Result<ShareHeartbeatResult, HeartbeatError> {
        self.inner
            .lock()
            .coordinator
            .share_heartbeat(request, &ImageTopics(image), now_ms())
    }

    pub fn share_group_for_reset(&self, group_id: &str) -> Result<(), HeartbeatError> {
        self.inner.lock().coordinator.share_group_for_reset(group_id)
    }

    pub fn describe_share_group(&self, group_id: &str) -> Result<ShareGroupSummary, HeartbeatError> {
        self.inner.lock().coordinator.describe_share_group(group_id)
    }

    pub fn describe_consumer_group(&self, group_id: &str) -> Result<ConsumerGroupSummary, HeartbeatError> {
        self.inner.lock().coordinator.describe_consumer_group(group_id)
    }

    pub fn describe_group(&self, group_id: &str) -> Result<Option<GroupSummary>, ResponseError> {
        self.inner.lock().coordinator.describe_group(group_id)
    }

    /// Deletes an empty group: answered once its tombstones are committed.
    pub async fn delete_group(&self, group_id: &str) -> Result<(), ResponseError> {
        let stores = {
            let mut inner = self.inner.lock();
            let fx = inner.coordinator.delete_group(group_id)?;
            inner.apply(fx)
        };
        self.store_and_wait(stores).await
    }

    pub async fn delete_offsets(
        &self,
        group_id: &str,
        partitions: &[(String, i32)],
    ) -> Result<Vec<MemberError>, ResponseError> {
        let (errors, stores) = {
            let mut inner = self.inner.lock();
            let (errors, effect) = inner.coordinator.delete_offsets(group_id, partitions, subscribes_to)?;
            (errors, inner.apply(effect.into_iter().collect()))
        };
        self.store_and_wait(stores).await?;
        Ok(errors)
    }

    /// Session expiry, rebalance deadlines and offset expiry, until shutdown.
    pub async fn run_timers(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let mut ticker = tokio::time::interval(TICK);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let retention_check = Duration::from_millis(self.settings.retention_check_interval_ms.max(1));
        let mut last_retention_check = tokio::time::Instant::now();
        loop {
            tokio::select! {
                _ = shutdown.changed() => return,
                _ = ticker.tick() => {}
            }
            let now = now_ms();
            let stores = {
                let mut inner = self.inner.lock();
                let mut fx = inner.coordinator.tick(now);
                if last_retention_check.elapsed() >= retention_check {
                    last_retention_check = tokio::time::Instant::now();
                    fx.extend(inner.coordinator.expire_offsets(now));
                }
                self.apply_ordered(&mut inner, fx)
            };
            self.run_stores(stores);
        }
    }

    /// Appends a KIP-848 group's records now: the caller holds the coordinator's lock, so they
    /// reach the log in the order the state changed. Returns the wait for their replication.
    fn append_records(&self, partition: i32, records: &[GroupRecord], now: i64) -> Result<Option<Appended>, ResponseError> {
        if records.is_empty() {
            return Ok(None);
        }
        let encoded: Vec<(Bytes, Option<Bytes>)> = records.iter().map(GroupRecord::encode).collect();
        append(self, partition, &encoded, None, TxnVerification::Unchecked, now).map(Some)
    }

    /// [`Inner::apply`], but a KIP-848 group's records ([`Effect::Records`]) are appended now,
    /// under the lock the caller holds, in order with the heartbeats' (their replication is
    /// not waited for: nobody's answer depends on them).
    fn apply_ordered(&self, inner: &mut Inner, fx: Vec<Effect>) -> Vec<Store> {
        let now = now_ms();
        let (records, rest): (Vec<Effect>, Vec<Effect>) =
            fx.into_iter().partition(|e| matches!(e, Effect::Records { .. }));
        for effect in records {
            let Effect::Records { partition, records } = effect else {
                continue;
            };
            if let Err(e) = self.append_records(partition, &records, now) {
                tracing::warn!(partition, error = ?e, "could not write a consumer group's records to __consumer_offsets; a coordinator taking the group over may see its members as they were until their sessions expire");
            }
        }
        inner.apply(rest)
    }

    /// Appends each store in the background; a stored assignment then completes its
    /// generation's SyncGroup answers.
    fn run_stores(self: &Arc<Self>, stores: Vec<Store>) {
        for store in stores {
            let manager = self.clone();
            tokio::spawn(async move {
                let replaces_static_member = matches!(
                    &store,
                    Store::Group {
                        then: AfterStore::AnswerStaticJoin(_),
                        ..
                    }
                );
                if replaces_static_member && *invariant::STALL_STATIC_MEMBER_STORE {
                    tracing::warn!("{}", invariant::STALL_STATIC_MEMBER_STORE_LOG);
                    tokio::time::sleep(Duration::from_millis(invariant::STALL_STATIC_MEMBER_STORE_MS)).await;
                }
                let outcome = store_one(&manager, &store).await;
                let waiting = match store {
                    Store::Group {
                        group_id,
                        generation_id,
                        then,
                        ..
                    } if then != AfterStore::Nothing => Some((group_id, generation_id, then)),
                    _ => None,
                };
                let Some((group_id, generation_id, then)) = waiting else {
                    if let Err(e) = outcome {
                        tracing::warn!(error = ?e, "could not write a group record to __consumer_offsets; the coordinator's next change rewrites it");
                    }
                    return;
                };
                let result = outcome.map_err(store_group_error);
                let stores = {
                    let mut inner = manager.inner.lock();
                    let fx = match then {
                        AfterStore::CompleteSync => {
                            inner
                                .coordinator
                                .group_stored(&group_id, generation_id, result, now_ms())
                        }
                        AfterStore::AnswerStaticJoin(join) => {
                            inner.coordinator.static_member_stored(&group_id, *join, result)
                        }
                        AfterStore::Nothing => Vec::new(),
                    };
                    inner.apply(fx)
                };
                manager.run_stores(stores);
            });
        }
    }

    /// Waits up to `offsets.commit.timeout.ms` for the ISR to have `appended`; a failure reads
    /// as a committing client understands it ([`commit_error`]).
    async fn await_appended(&self, appended: Appended) -> Result<(), HeartbeatError> {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(self.settings.commit_timeout_ms);
        appended
            .wait
            .wait(deadline)
            .await
            .map_err(|(e, _)| (commit_error(e), String::new()))
    }

    async fn store_and_wait(&self, stores: Vec<Store>) -> Result<(), ResponseError> {
        for store in &stores {
            store_one(self, store).await.map_err(commit_error)?;
        }
        Ok(())
    }
}

/// A JoinGroup whose answer was dropped (it cannot happen while the coordinator holds the
/// sender, but the client must get an answer it retries on).
fn lost_join() -> JoinResult {
    JoinResult {
        error: Some(ResponseError::CoordinatorNotAvailable),
        generation_id: -1,
        protocol_type: None,
        protocol_name: None,
        leader_id: String::new(),
        member_id: String::new(),
        members: Vec::new(),
    }
}

async fn store_one(groups: &GroupMetadataManager, store: &Store) -> Result<(), ResponseError> {
    let now = now_ms();
    let wait = match store {
        Store::Group {
            partition, key, value, ..
        } => append(
            groups,
            *partition,
            &[(key.clone(), Some(value.clone()))],
            None,
            TxnVerification::Unchecked,
            now,
        ),
        Store::Tombstones { partition, keys } => {
            let records: Vec<(Bytes, Option<Bytes>)> = keys.iter().map(|k| (k.clone(), None)).collect();
            append(groups, *partition, &records, None, TxnVerification::Unchecked, now)
        }
        Store::Records { partition, records } => {
            append(groups, *partition, records, None, TxnVerification::Unchecked, now)
        }
    }?;
    let timeout = Duration::from_millis(groups.settings.commit_timeout_ms);
    wait.wait
        .wait(tokio::time::Instant::now() + timeout)
        .await
        .map_err(|(e, _)| e)
}

/// The OffsetCommit records of `offsets`, in their order.
fn offset_records(group_id: &str, offsets: &[((String, i32), OffsetAndMetadata)]) -> Vec<(Bytes, Option<Bytes>)> {
    offsets
        .iter()
        .map(|((topic, p), value)| {
            (
                records::offset_commit_key(group_id, topic, *p),
                Some(records::offset_commit_value(value)),
            )
        })
        .collect()
}

/// Appends records to `__consumer_offsets` partition `index` as its leader and returns the
/// wait for their replication. With `producer` (id, epoch) the batch is transactional.
fn append(
    groups: &GroupMetadataManager,
    index: i32,
    entries: &[(Bytes, Option<Bytes>)],
    producer: Option<(i64, i16)>,
    verification: TxnVerification,
    now: i64,
) -> Result<Appended, ResponseError> {
    let image = groups.metadata.image();
    let topic = image
        .topic(OFFSETS_TOPIC)
        .ok_or(ResponseError::UnknownTopicOrPartition)?;
    let target = coordinator_log::Target {
        replicas: &groups.replicas,
        topic,
        broker_overrides: &groups.broker_overrides,
        index,
        expected_leader_epoch: None,
    };
    coordinator_log::append(&target, entries, producer, verification, now)
}

/// Reads a `__consumer_offsets` partition from its start to its end and hands the records
/// to the coordinator. Runs on a blocking thread: the log may be large.
fn load_partition(
    manager: Arc<Mutex<Inner>>,
    partition: Arc<Partition>,
    index: i32,
    epoch: i32,
    buffer: usize,
    max_message_bytes: u32,
) {
    let started = std::time::Instant::now();
    let read = match read_for_load(&partition, buffer, max_message_bytes) {
        Ok(read) => read,
        Err(e) => {
            tracing::error!(partition = index, error = %e, "could not read __consumer_offsets while loading groups; they stay unavailable until the broker restarts");
            return;
        }
    };
    if let Some((base_offset, error)) = read.first_unreadable {
        tracing::warn!(partition = index, base_offset, %error,
            "skipped unreadable batches of __consumer_offsets while loading groups (the first is named); \
             the groups and offsets they held are not loaded");
    }
    let count = read.records.len();
    let skipped = read.skipped;
    let done = manager
        .lock()
        .coordinator
        .complete_load(index, epoch, read.records, now_ms());
    if done && count + skipped > 0 {
        tracing::info!(
            partition = index,
            records = count,
            skipped,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "loaded consumer groups from __consumer_offsets"
        );
    }
}

/// What loading read from a `__consumer_offsets` log.
struct LoadRead {
    /// Records and transaction markers in log order.
    records: Vec<LoadedRecord>,
    /// Records that could not be decoded, unreadable batches, and control batches that are
    /// no COMMIT or ABORT marker.
    skipped: usize,
    /// The first unreadable batch's base offset and why.
    first_unreadable: Option<(i64, BatchError)>,
}

/// Reads the log from its start to its end: each record with its offset and, in a
/// transactional batch, its producer id; each transaction marker (a control batch) with its
/// producer id, so the coordinator can commit or drop what that producer wrote before it.
/// A batch whose CRC or records are bad, or whose records decompress past the partition's
/// `max.message.bytes`, counts as one skipped entry.
fn read_for_load(partition: &Partition, buffer: usize, max_message_bytes: u32) -> Result<LoadRead, LogError> {
    let mut read = LoadRead {
        records: Vec::new(),
        skipped: 0,
        first_unreadable: None,
    };
    coordinator_log::scan(partition, buffer, |header, batch, from| {
        if header.is_control() {
            // A batch starting before `from` was read by the previous chunk.
            if header.base_offset >= from {
                read.marker(header, batch);
            }
        } else {
            read.records_of(header, batch, from, max_message_bytes);
        }
    })?;
    Ok(read)
}

impl LoadRead {
    fn marker(&mut self, header: &BatchHeader, batch: &[u8]) {
        let checked = validate_stored_batch(batch).map(|_| control_type(batch));
        match checked {
            Ok(Some(marker)) => self.records.push(LoadedRecord::Marker {
                producer_id: header.producer_id,
                commit: marker == ControlType::Commit,
            }),
            Ok(None) => self.skipped += 1,
            Err(e) => {
                self.skipped += 1;
                self.first_unreadable.get_or_insert((header.base_offset, e));
            }
        }
    }

    /// The batch's records at or after `from`.
    fn records_of(&mut self, header: &BatchHeader, batch: &[u8], from: i64, max_message_bytes: u32) {
        let producer_id = header.is_transactional().then_some(header.producer_id);
        let decoded =
            validate_stored_batch(batch).and_then(|_| BatchRecords::decode(batch, max_message_bytes as usize));
        let decoded = match decoded {
            Ok(decoded) => decoded,
            Err(e) => {
                self.skipped += 1;
                self.first_unreadable.get_or_insert((header.base_offset, e));
                return;
            }
        };
        for record in decoded.iter() {
            let offset = header.base_offset.saturating_add(i64::from(record.offset_delta));
            if offset < from {
                continue;
            }
            match records::decode(record.key, record.value) {
                Ok(record) => self.records.push(LoadedRecord::Record {
                    offset,
                    producer_id,
                    record,
                }),
                Err(_) => self.skipped += 1,
            }
        }
    }
}

/// Kafka's `ConsumerProtocolSubscription` check for OffsetDelete: does this member's
/// metadata subscribe to `topic`? Unreadable metadata counts as subscribed.
fn subscribes_to(metadata: &Bytes, topic: &str) -> bool {
    use kafka_protocol::messages::ConsumerProtocolSubscription;
    use kafka_protocol::protocol::Decodable;
    let mut buf = metadata.clone();
    if buf.len() < 2 {
        return true;
    }
    let version = i16::from_be_bytes([buf[0], buf[1]]);
    let _ = bytes::Buf::get_i16(&mut buf);
    match ConsumerProtocolSubscription::decode(&mut buf, version.clamp(0, 3)) {
        Ok(s) => s.topics.iter().any(|t| t.as_str() == topic),
        Err(_) => true,
    }
}

/// A consumer group member's assignment (Kafka's `ConsumerProtocolAssignment`) as topic and
/// partitions; nothing when it does not decode (another protocol's bytes, or a client's bug).
pub fn consumer_assignment(assignment: &Bytes) -> Vec<(String, Vec<i32>)> {
    use kafka_protocol::messages::ConsumerProtocolAssignment;
    use kafka_protocol::protocol::Decodable;
    let mut buf = assignment.clone();
    if buf.len() < 2 {
        return Vec::new();
    }
    let version = bytes::Buf::get_i16(&mut buf);
    match ConsumerProtocolAssignment::decode(&mut buf, version.clamp(0, 3)) {
        Ok(a) => a
            .assigned_partitions
            .into_iter()
            .map(|tp| (tp.topic.0.to_string(), tp.partitions))
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// Kafka's mapping of a failed offsets append to what a committing client understands.
fn commit_error(error: ResponseError) -> ResponseError {
    use ResponseError::*;
    match error {
        UnknownTopicOrPartition | NotEnoughReplicas | NotEnoughReplicasAfterAppend | RequestTimedOut => {
            CoordinatorNotAvailable
        }
        NotLeaderOrFollower | KafkaStorageError | FencedLeaderEpoch => NotCoordinator,
        MessageTooLarge | RecordListTooLarge | InvalidFetchSize => InvalidCommitOffsetSize,
        other if is_group_error(other) => other,
        _ => UnknownServerError,
    }
}

/// [`commit_error`] for a TxnOffsetCommit, whose producer may also be refused by the
/// partition's producer state (an old epoch: the client aborts or is fenced).
fn txn_commit_error(error: ResponseError) -> ResponseError {
    use ResponseError::*;
    match error {
        InvalidProducerEpoch | ProducerFenced | InvalidTxnState | InvalidProducerIdMapping => error,
        other => commit_error(other),
    }
}

/// Kafka's mapping of a failed group-metadata append for the SyncGroup answers.
fn store_group_error(error: ResponseError) -> ResponseError {
    use ResponseError::*;
    match error {
        UnknownTopicOrPartition | NotEnoughReplicas | NotEnoughReplicasAfterAppend => CoordinatorNotAvailable,
        NotLeaderOrFollower | KafkaStorageError | FencedLeaderEpoch => NotCoordinator,
        RequestTimedOut => RebalanceInProgress,
        _ => UnknownServerError,
    }
}

/// Errors the coordinator itself gives, passed to the client as they are.
fn is_group_error(error: ResponseError) -> bool {
    use ResponseError::*;
    matches!(
        error,
        NotCoordinator
            | CoordinatorNotAvailable
            | CoordinatorLoadInProgress
            | InvalidGroupId
            | IllegalGeneration
            | UnknownMemberId
            | RebalanceInProgress
            | FencedInstanceId
            | GroupIdNotFound
            | NonEmptyGroup
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coordinator_log::encode_batch;
    use crate::log::{LogConfig, TailCacheBudget};
    use crate::metadata::image::PartitionRegistration;
    use crate::partition::AppendOutcome;
    use bytes::BytesMut;
    use kafka_protocol::records::TimestampType;
    use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions};
    use uuid::Uuid;

    const NOW: i64 = 1_800_000_000_000;

    fn leading_partition(dir: &std::path::Path) -> Partition {
        let tail_cache = TailCacheBudget::new(1 << 20, 64 << 20);
        let p = Partition::open(
            dir,
            OFFSETS_TOPIC,
            Uuid::nil(),
            0,
            1,
            LogConfig::default(),
            None,
            &tail_cache,
            &crate::log::FileCache::unbounded(),
            NOW,
        )
        .unwrap();
        let alone = PartitionRegistration {
            replicas: vec![1].into(),
            isr: vec![1].into(),
            leader: 1,
            leader_epoch: 0,
            partition_epoch: 0,
            ..Default::default()
        };
        p.apply_registration(&alone, NOW);
        p
    }

    fn commit(group: &str, partition: i32, offset: i64) -> (Bytes, Option<Bytes>) {
        let value = OffsetAndMetadata {
            offset,
            leader_epoch: -1,
            metadata: String::new(),
            commit_timestamp_ms: NOW,
        };
        (
            records::offset_commit_key(group, "orders", partition),
            Some(records::offset_commit_value(&value)),
        )
    }

    /// A COMMIT (type 1) or ABORT (type 0) marker as the transaction coordinator writes it.
    fn marker(producer_id: i64, commit: bool) -> BytesMut {
        let record = Record {
            transactional: true,
            control: true,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id,
            producer_epoch: 0,
            timestamp_type: TimestampType::Creation,
            offset: 0,
            sequence: -1,
            timestamp: NOW,
            key: Some(Bytes::from(vec![0, 0, 0, u8::from(commit)])),
            value: Some(Bytes::from_static(&[0, 0, 0, 0, 0, 0])),
            headers: Default::default(),
        };
        let mut buf = BytesMut::new();
        let options = RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        };
        RecordBatchEncoder::encode(&mut buf, [record].iter(), &options).unwrap();
        buf
    }

    fn append_batch(p: &Partition, mut batch: BytesMut) {
        match p.append_as_leader(&mut batch, NOW).unwrap() {
            AppendOutcome::Appended(_) => {}
            AppendOutcome::Duplicate { .. } => panic!("not a retry"),
        }
    }

    #[test]
    fn a_txn_offset_commit_batch_is_transactional_without_a_sequence() {
        let batch = encode_batch(&[commit("g", 0, 5), commit("g", 1, 6)], Some((42, 3)), NOW).unwrap();
        let header = validate_stored_batch(&batch).unwrap();
        assert!(header.is_transactional());
        assert!(!header.is_control());
        assert_eq!((header.producer_id, header.producer_epoch), (42, 3));
        assert_eq!(header.base_sequence, -1, "Kafka's NO_SEQUENCE");
        assert_eq!(header.records_count, 2);

        let plain = encode_batch(&[commit("g", 0, 5)], None, NOW).unwrap();
        let header = validate_stored_batch(&plain).unwrap();
        assert!(!header.is_transactional());
        assert_eq!(header.producer_id, -1);
    }

    #[test]
    fn loading_reads_transactional_batches_and_their_markers_from_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let p = leading_partition(dir.path());
        append_batch(&p, encode_batch(&[commit("g", 0, 1)], None, NOW).unwrap()); // 0
        append_batch(
            &p,
            encode_batch(&[commit("g", 0, 10), commit("g", 1, 11)], Some((7, 0)), NOW).unwrap(),
        ); // 1-2
        append_batch(&p, encode_batch(&[commit("g", 2, 20)], Some((8, 0)), NOW).unwrap()); // 3
        append_batch(&p, marker(7, true)); // 4
        append_batch(&p, marker(8, false)); // 5
        append_batch(&p, encode_batch(&[commit("g", 3, 30)], Some((9, 0)), NOW).unwrap()); // 6

        // A small buffer makes the read take several chunks.
        let read = read_for_load(&p, 1, 1 << 20).unwrap();
        assert_eq!(read.skipped, 0);
        let shape: Vec<(Option<i64>, Option<i64>, Option<bool>)> = read
            .records
            .iter()
            .map(|r| match r {
                LoadedRecord::Record {
                    offset, producer_id, ..
                } => (Some(*offset), *producer_id, None),
                LoadedRecord::Marker { producer_id, commit } => (None, Some(*producer_id), Some(*commit)),
            })
            .collect();
        assert_eq!(
            shape,
            vec![
                (Some(0), None, None),
                (Some(1), Some(7), None),
                (Some(2), Some(7), None),
                (Some(3), Some(8), None),
                (None, Some(7), Some(true)),
                (None, Some(8), Some(false)),
                (Some(6), Some(9), None),
            ]
        );

        let mut coordinator = GroupCoordinator::new(GroupConfig {
            num_partitions: 1,
            ..GroupConfig::default()
        });
        coordinator.begin_load(0, 0);
        assert!(coordinator.complete_load(0, 0, read.records, NOW));
        let committed: Vec<(i32, i64)> = coordinator
            .fetch_offsets("g", None)
            .unwrap()
            .into_iter()
            .map(|(_, p, o)| (p, o.map_or(-1, |o| o.offset)))
            .collect();
        assert_eq!(committed, vec![(0, 10), (1, 11)], "8 aborted, 9 still open");
        assert_eq!(
            coordinator.pending_txn_partitions("g"),
            HashSet::from([("orders".to_string(), 3)])
        );
    }
}

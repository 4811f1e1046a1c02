//! Transactions (KIP-98): the transaction coordinator and the markers it writes.
//!
//! `coordinator.rs` is the pure state machine and `records.rs` the `__transaction_state`
//! record format. This module is the glue (Kafka's `TransactionStateManager` and
//! `TransactionMarkerChannelManager`): it loads a `__transaction_state` partition's ids when
//! this broker becomes its leader and drops them when leadership moves, appends each
//! transition and waits until the ISR has it before the client is answered, writes the
//! COMMIT/ABORT markers a completing transaction owes (`markers.rs`: to partitions led here
//! directly, to other brokers with WriteTxnMarkers), and aborts transactions past their timeout.
//!
//! The state machine sits behind one mutex, never held across an await.

pub mod coordinator;
pub mod markers;
pub mod records;
pub mod verify;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use parking_lot::Mutex;
use tokio::sync::watch;

use sluice_protocol::batch::validate_stored_batch;
use sluice_protocol::records::BatchRecords;

use crate::clock::now_ms;
pub use crate::config::TxnConfig;
use crate::controller::TRANSACTION_STATE_TOPIC;
use crate::coordinator_log;
use crate::group::GroupMetadataManager;
use crate::metadata::image::MetadataImage;
use crate::metadata::records::NewTopic;
use crate::metadata::MetadataStore;
use crate::partition::Partition;
use crate::producer_state::TxnVerification;
use crate::purgatory::DelayedProduce;
use crate::replica_manager::ReplicaManager;
use crate::security::Security;
use crate::topic_config::{self, BrokerOverrides};
use coordinator::{
    EndOutcome, EndRequest, InitOutcome, ListFilter, MarkerJob, TransactionCoordinator, Transition,
    TxnCoordinatorConfig, TxnView,
};
use markers::MarkerChannels;
use verify::VerifyChannels;

/// How often the timers wake; each check runs at its own interval, at this granularity.
const TICK: Duration = Duration::from_millis(100);
/// Wait between rounds of markers that could not all be written yet.
const MARKER_RETRY: Duration = Duration::from_millis(100);
/// Longest AddPartitionsToTxn / AddOffsetsToTxn waits for the producer's previous
/// transaction to complete (its markers written) before answering CONCURRENT_TRANSACTIONS.
/// A producer that begins its next transaction right after a commit would otherwise retry
/// every 20 ms (librdkafka; the Java client backs off alike) until the markers are written;
/// held here, it is answered as soon as they are. The clients' request timeouts are 30 s.
const COMPLETION_WAIT: Duration = Duration::from_secs(1);

pub struct TransactionManager {
    coordinator: Mutex<TransactionCoordinator>,
    config: TxnConfig,
    replicas: Arc<ReplicaManager>,
    metadata: Arc<MetadataStore>,
    groups: Arc<GroupMetadataManager>,
    broker_overrides: BrokerOverrides,
    channels: MarkerChannels,
    /// KIP-890 verifications for coordinators on other brokers.
    verifications: VerifyChannels,
    /// This broker: markers for partitions it leads are written directly.
    node_id: i32,
    /// Woken whenever one of this coordinator's transitions has been written or has failed:
    /// what an add waiting for a transaction to complete waits on ([`COMPLETION_WAIT`]).
    settled: tokio::sync::Notify,
}

/// What InitProducerId answers, once its transition is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerIdAndEpoch {
    pub producer_id: i64,
    pub producer_epoch: i16,
}

impl TransactionManager {
    pub fn new(
        config: TxnConfig,
        replicas: Arc<ReplicaManager>,
        metadata: Arc<MetadataStore>,
        groups: Arc<GroupMetadataManager>,
        broker_overrides: BrokerOverrides,
        security: Arc<Security>,
        broker_config: Arc<crate::config::BrokerConfig>,
    ) -> Self {
        let coordinator = TransactionCoordinator::new(TxnCoordinatorConfig {
            num_partitions: config.num_partitions,
            max_timeout_ms: config.max_timeout_ms,
            id_expiration_ms: config.id_expiration_ms,
        });
        TransactionManager {
            node_id: broker_config.node_id,
            coordinator: Mutex::new(coordinator),
            channels: MarkerChannels::new(broker_config.clone(), security.clone(), metadata.clone()),
            verifications: VerifyChannels::new(broker_config, security, metadata.clone()),
            config,
            replicas,
            metadata,
            groups,
            broker_overrides,
            settled: tokio::sync::Notify::new(),
        }
    }

    /// Whether partition leaders verify a producer's first transactional write with its
    /// coordinator (`transaction.partition.verification.enable`).
    pub fn partition_verification(&self) -> bool {
        self.config.partition_verification
    }

    pub fn partition_for(&self, transactional_id: &str) -> i32 {
        coordinator::partition_for(transactional_id, self.config.num_partitions)
    }

    pub fn config(&self) -> &TxnConfig {
        &self.config
    }

    /// `__transaction_state` as FindCoordinator creates it on first use: compacted, with
    /// `transaction.state.log.min.isr` as its `min.insync.replicas`, both lowered to the
    /// `live_brokers` (the replication factor is, so a one-node cluster can write it).
    pub fn new_topic(&self, live_brokers: usize) -> NewTopic {
        let replicas = (self.config.replication_factor.max(1) as usize).min(live_brokers.max(1));
        let min_isr = (self.config.min_isr.max(1) as usize).min(replicas);
        NewTopic {
            name: TRANSACTION_STATE_TOPIC.to_string(),
            num_partitions: self.config.num_partitions,
            replication_factor: self.config.replication_factor,
            replication_factor_defaulted: true,
            assignments: None,
            configs: BTreeMap::from([
                ("cleanup.policy".to_string(), "compact".to_string()),
                ("compression.type".to_string(), "uncompressed".to_string()),
                ("min.insync.replicas".to_string(), min_isr.to_string()),
                topic_config::segment_bytes_entry(self.config.segment_bytes.into()),
                ("unclean.leader.election.enable".to_string(), "false".to_string()),
            ]),
        }
    }

    /// Follows leadership of `__transaction_state` partitions: loads the ids of partitions
    /// this broker now leads (at a new leader epoch) and unloads those it no longer leads.
    pub fn reconcile(self: &Arc<Self>, image: &MetadataImage, node_id: i32) {
        let mut wanted: HashMap<i32, (i32, Arc<Partition>)> = HashMap::new();
        if let Some(topic) = image.topic(TRANSACTION_STATE_TOPIC) {
            for (index, registration) in topic.partitions.iter().enumerate() {
                if registration.leader != node_id {
                    continue;
                }
                if let Some(partition) = self.replicas.get(topic.topic_id, index as i32) {
                    wanted.insert(index as i32, (registration.leader_epoch, partition));
                }
            }
        }
        let mut coordinator = self.coordinator.lock();
        let owned = coordinator.owned_partitions();
        for (partition, epoch) in &owned {
            if wanted.get(partition).map(|(e, _)| e) != Some(epoch) {
                tracing::info!(
                    partition,
                    "no longer leading this {TRANSACTION_STATE_TOPIC} partition; unloading its transactions"
                );
                coordinator.unload(*partition);
            }
        }
        for (index, (epoch, partition)) in wanted {
            if owned.get(&index) == Some(&epoch) {
                continue;
            }
            coordinator.begin_load(index, epoch);
            let manager = self.clone();
            let runtime = tokio::runtime::Handle::current();
            tokio::task::spawn_blocking(move || {
                let records = load_partition(&partition, index, manager.config.load_buffer_size);
                let jobs = manager.coordinator.lock().complete_load(index, epoch, records);
                if !jobs.is_empty() {
                    tracing::info!(
                        partition = index,
                        transactions = jobs.len(),
                        "completing transactions the previous coordinator left half done"
                    );
                }
                let _guard = runtime.enter();
                for job in jobs {
                    manager.spawn_markers(job);
                }
            });
        }
    }

    /// InitProducerId for `transactional_id`. `allocate` gives a new producer id when the
    /// state machine needs one (a new id, or exhausted epochs).
    pub async fn init_producer_id<F, Fut>(
        self: &Arc<Self>,
        transactional_id: &str,
        timeout_ms: i32,
        expected: Option<(i64, i16)>,
        allocate: F,
    ) -> Result<ProducerIdAndEpoch, ResponseError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<i64, ResponseError>>,
    {
        let mut fresh = None;
        loop {
            let outcome =
                self.coordinator
                    .lock()
                    .init_producer_id(transactional_id, timeout_ms, expected, fresh, now_ms())?;
            match outcome {
                InitOutcome::NeedProducerId if fresh.is_none() => fresh = Some(allocate().await?),
                InitOutcome::NeedProducerId => return Err(ResponseError::UnknownServerError),
                InitOutcome::Write(transition) => {
                    let answer = ProducerIdAndEpoch {
                        producer_id: transition.target.producer_id,
                        producer_epoch: transition.target.producer_epoch,
                    };
                    self.write(&transition).await?;
                    return Ok(answer);
                }
                InitOutcome::Fence(transition) => {
                    tracing::info!(
                        transactional_id,
                        "a new producer initialised while a transaction was open; aborting it to fence the old producer"
                    );
                    self.write(&transition).await?;
                    return Err(ResponseError::ConcurrentTransactions);
                }
            }
        }
    }

    /// AddPartitionsToTxn / AddOffsetsToTxn: the partitions join the producer's transaction
    /// (written and replicated before the answer). `tv2`: a partition leader adds them for a
    /// transactions v2 producer.
    pub async fn add_partitions(
        self: &Arc<Self>,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[(String, i32)],
        tv2: bool,
    ) -> Result<(), ResponseError> {
        let deadline = tokio::time::Instant::now() + COMPLETION_WAIT;
        loop {
            // Registered before the check, so a transition settling in between still wakes it.
            let settled = self.settled.notified();
            tokio::pin!(settled);
            settled.as_mut().enable();
            let added = self.coordinator.lock().add_partitions(
                transactional_id,
                producer_id,
                producer_epoch,
                partitions,
                tv2,
                now_ms(),
            );
            match added {
                // The previous transaction is completing: ask again when a write settles.
                Err(ResponseError::ConcurrentTransactions) if tokio::time::Instant::now() < deadline => {
                    let _ = tokio::time::timeout_at(deadline, settled).await;
                }
                Err(e) => return Err(e),
                Ok(Some(t)) => return self.write(&t).await,
                Ok(None) => return Ok(()),
            }
        }
    }

    /// KIP-890 verification (AddPartitionsToTxn v4+ with `verify_only`).
    pub fn verify_partitions(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[(String, i32)],
    ) -> Result<coordinator::PartitionErrors, ResponseError> {
        self.coordinator
            .lock()
            .verify_partitions(transactional_id, producer_id, producer_epoch, partitions)
    }

    /// EndTxn: answered once the PrepareCommit/PrepareAbort is replicated, as Kafka does; the
    /// markers and the completion follow in the background. Returns the producer id and epoch
    /// the client continues with (transactions v2 bumps the epoch at every EndTxn; `allocate`
    /// gives a new producer id when the epoch is exhausted).
    pub async fn end_txn<F, Fut>(
        self: &Arc<Self>,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
        tv2: bool,
        allocate: F,
    ) -> Result<ProducerIdAndEpoch, ResponseError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<i64, ResponseError>>,
    {
        let mut fresh = None;
        loop {
            let request = EndRequest {
                producer_id,
                producer_epoch,
                commit,
                tv2,
            };
            let outcome = self
                .coordinator
                .lock()
                .end_txn(transactional_id, request, fresh, now_ms())?;
            match outcome {
                EndOutcome::NeedProducerId if fresh.is_none() => fresh = Some(allocate().await?),
                EndOutcome::NeedProducerId => return Err(ResponseError::UnknownServerError),
                EndOutcome::Done {
                    producer_id,
                    producer_epoch,
                } => {
                    return Ok(ProducerIdAndEpoch {
                        producer_id,
                        producer_epoch,
                    })
                }
                EndOutcome::Write {
                    transition,
                    producer_id,
                    producer_epoch,
                } => {
                    self.write(&transition).await?;
                    return Ok(ProducerIdAndEpoch {
                        producer_id,
                        producer_epoch,
                    });
                }
            }
        }
    }

    pub fn describe(&self, transactional_id: &str) -> Result<TxnView, ResponseError> {
        self.coordinator.lock().describe(transactional_id)
    }

    pub fn list(&self, filter: &ListFilter) -> (Vec<TxnView>, bool) {
        self.coordinator.lock().list(filter, now_ms())
    }

    /// Aborts timed-out transactions and forgets expired ids, until shutdown.
    pub async fn run_timers(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let mut ticker = tokio::time::interval(TICK);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let abort_every = Duration::from_millis(self.config.abort_check_interval_ms);
        let expire_every = Duration::from_millis(self.config.expiration_check_interval_ms);
        let mut last_abort = tokio::time::Instant::now();
        let mut last_expire = tokio::time::Instant::now();
        loop {
            tokio::select! {
                _ = shutdown.changed() => return,
                _ = ticker.tick() => {}
            }
            let mut due = Vec::new();
            if last_abort.elapsed() >= abort_every {
                last_abort = tokio::time::Instant::now();
                due.extend(self.coordinator.lock().expired_transactions(now_ms()));
            }
            if last_expire.elapsed() >= expire_every {
                last_expire = tokio::time::Instant::now();
                due.extend(self.coordinator.lock().expired_ids(now_ms()));
            }
            for transition in due {
                if transition.target.state == records::TxnState::PrepareAbort {
                    tracing::info!(
                        transactional_id = %transition.transactional_id,
                        "aborting a transaction open longer than its transaction.timeout.ms"
                    );
                }
                let manager = self.clone();
                tokio::spawn(async move {
                    let _ = manager.write(&transition).await;
                });
            }
        }
    }

    /// Appends a transition to its `__transaction_state` partition, waits for the ISR, and
    /// applies it; a PrepareCommit/PrepareAbort then starts its markers.
    async fn write(self: &Arc<Self>, transition: &Transition) -> Result<(), ResponseError> {
        let outcome = self.append_and_wait(transition).await;
        let job = {
            let mut coordinator = self.coordinator.lock();
            match outcome {
                Ok(()) => coordinator.transition_written(transition),
                Err(_) => {
                    coordinator.transition_failed(transition);
                    None
                }
            }
        };
        self.settled.notify_waiters();
        if let Some(job) = job {
            self.spawn_markers(job);
        }
        outcome
    }

    async fn append_and_wait(&self, transition: &Transition) -> Result<(), ResponseError> {
        let value = if transition.target.state == records::TxnState::Dead {
            None
        } else {
            Some(records::value(&transition.target))
        };
        let key = records::key(&transition.transactional_id);
        let wait = self.append(transition.partition, transition.coordinator_epoch, key, value)?;
        let deadline = tokio::time::Instant::now() + Duration::from_millis(self.config.append_timeout_ms);
        wait.wait(deadline).await.map_err(|(e, _)| append_error(e))
    }

    /// Appends one record to `__transaction_state` partition `index` as its leader at
    /// `coordinator_epoch` (NOT_COORDINATOR if leadership moved on), refusing as `acks=all`
    /// would when the ISR is below `min.insync.replicas`.
    fn append(
        &self,
        index: i32,
        coordinator_epoch: i32,
        key: Bytes,
        value: Option<Bytes>,
    ) -> Result<DelayedProduce, ResponseError> {
        let image = self.metadata.image();
        let topic = image
            .topic(TRANSACTION_STATE_TOPIC)
            .ok_or(ResponseError::CoordinatorNotAvailable)?;
        let target = coordinator_log::Target {
            replicas: &self.replicas,
            topic,
            broker_overrides: &self.broker_overrides,
            index,
            expected_leader_epoch: Some(coordinator_epoch),
        };
        coordinator_log::append(&target, &[(key, value)], None, TxnVerification::Unchecked, now_ms())
            .map(|appended| appended.wait)
            .map_err(append_error)
    }

    /// Writes a job's markers in the background until every partition has its marker (or is
    /// gone), then the completion; stops when this coordinator no longer owns the transaction.
    fn spawn_markers(self: &Arc<Self>, job: MarkerJob) {
        let manager = self.clone();
        tokio::spawn(async move {
            let mut remaining = job.partitions.clone();
            loop {
                remaining = markers::write_round(&manager, &job, remaining).await;
                if remaining.is_empty() {
                    break;
                }
                if !manager.owns(&job) {
                    return;
                }
                tokio::time::sleep(MARKER_RETRY).await;
            }
            loop {
                let Some(complete) = manager.coordinator.lock().markers_written(&job, now_ms()) else {
                    return;
                };
                match manager.write(&complete).await {
                    Ok(()) => return,
                    Err(e) => {
                        tracing::debug!(transactional_id = %job.transactional_id, error = ?e, "could not write a transaction's completion; retrying");
                        tokio::time::sleep(MARKER_RETRY).await;
                    }
                }
            }
        });
    }

    /// Whether this broker still coordinates `job`'s partition at its epoch.
    fn owns(&self, job: &MarkerJob) -> bool {
        self.coordinator.lock().owned_partitions().get(&job.partition) == Some(&job.coordinator_epoch)
    }
}

/// Kafka's mapping of a failed `__transaction_state` append to what a transactional client
/// retries on.
fn append_error(error: ResponseError) -> ResponseError {
    use ResponseError::*;
    match error {
        UnknownTopicOrPartition | NotEnoughReplicas | NotEnoughReplicasAfterAppend | RequestTimedOut => {
            CoordinatorNotAvailable
        }
        NotLeaderOrFollower | KafkaStorageError | FencedLeaderEpoch => NotCoordinator,
        NotCoordinator | CoordinatorNotAvailable | CoordinatorLoadInProgress => error,
        _ => UnknownServerError,
    }
}

/// Reads a `__transaction_state` partition from its start to its end, in log order.
/// Unreadable batches and records are skipped and logged (the ids they held are not loaded).
fn load_partition(partition: &Partition, index: i32, buffer: usize) -> Vec<(String, Option<records::StoredTxn>)> {
    let started = std::time::Instant::now();
    let max_message_bytes = partition.max_message_bytes() as usize;
    let mut loaded = Vec::new();
    let mut skipped = 0usize;
    let scanned = coordinator_log::scan(partition, buffer, |header, batch, from| {
        // The coordinator writes one record per batch, so a batch starting before `from`
        // was taken whole by the previous chunk.
        if header.is_control() || header.base_offset < from {
            return;
        }
        match validate_stored_batch(batch).and_then(|_| BatchRecords::decode(batch, max_message_bytes)) {
            Ok(batch) => {
                for record in batch.iter() {
                    match records::decode(record.key, record.value) {
                        Ok(r) => loaded.push(r),
                        Err(_) => skipped += 1,
                    }
                }
            }
            Err(_) => skipped += 1,
        }
    });
    if let Err(e) = scanned {
        tracing::error!(partition = index, error = %e, "could not read {TRANSACTION_STATE_TOPIC} while loading transactions; the ids after the error are not loaded");
    }
    if skipped > 0 {
        tracing::warn!(
            partition = index,
            skipped,
            "skipped unreadable records of {TRANSACTION_STATE_TOPIC} while loading transactions"
        );
    }
    if !loaded.is_empty() {
        tracing::info!(
            partition = index,
            records = loaded.len(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "loaded transactions from {TRANSACTION_STATE_TOPIC}"
        );
    }
    loaded
}

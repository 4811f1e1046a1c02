//! The broker's shared state, handed to every connection and request handler, and the
//! background work that keeps it in step with the cluster.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::{watch, Semaphore};
use uuid::Uuid;

use crate::config::BrokerConfig;
use crate::controller::{self, Outcome};
use crate::group::GroupMetadataManager;
use crate::metadata::image::MetadataImage;
use crate::metadata::records::{Endpoint, MetadataCommand};
use crate::metadata::{node_id_of, CommitError, MetadataError, MetadataStore};
use crate::replica_manager::ReplicaManager;
use crate::topic_config;

pub struct Broker {
    pub config: Arc<BrokerConfig>,
    pub metadata: MetadataStore,
    pub replicas: ReplicaManager,
    /// Consumer groups this broker coordinates.
    pub groups: GroupMetadataManager,
    /// Bytes of requests being read or handled across all connections
    /// (`queued.max.request.bytes`): a flood of large requests waits instead of exhausting memory.
    pub request_memory: Arc<Semaphore>,
    /// Serialises reconciliation so partitions always follow the newest image, never an older
    /// one applied late by a slower task.
    reconcile_lock: parking_lot::Mutex<()>,
    /// Set once this start's registration is committed: only then is the local image known
    /// to be current. Before that, replaying the local metadata log passes through old states
    /// (this broker leading partitions it no longer leads), which must not be acted on.
    registered: std::sync::atomic::AtomicBool,
    /// True once registered and the hosted partitions reflect the image: only then are client
    /// requests served (Kafka too serves only after its initial metadata is published), so a
    /// restarting broker never answers for a partition it has not opened yet.
    serving: watch::Sender<bool>,
    /// Unused producer ids of this broker's current block: `next..end`.
    producer_ids: parking_lot::Mutex<(i64, i64)>,
    /// This process's registration; a controlled shutdown names it so that a stale one from a
    /// previous run cannot fence a restarted broker.
    pub incarnation_id: Uuid,
    /// ISR changes on their way through the quorum, stopped at shutdown.
    isr_proposals: parking_lot::Mutex<tokio::task::JoinSet<()>>,
}

/// Pause after a refused ISR change before the leader may propose another.
const ISR_CHANGE_RETRY: Duration = Duration::from_secs(1);

/// Milliseconds since the Unix epoch: Kafka's timestamp unit.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl Broker {
    /// Opens the data dir and joins the metadata quorum (replaying the local metadata log).
    /// Partitions are opened once this start's registration is committed (see `register`).
    pub async fn open(config: BrokerConfig) -> Result<Arc<Broker>, MetadataError> {
        let config = Arc::new(config);
        let metadata = MetadataStore::open(&config).await?;
        let replicas = ReplicaManager::new(config.clone(), metadata.subscribe());
        let permits = config
            .queued_max_request_bytes
            .clamp(1, (u32::MAX as usize).min(Semaphore::MAX_PERMITS));
        let mut group_config = config.group.clone();
        let max_message_bytes = topic_config::effective_value("max.message.bytes", &Default::default(), &config);
        group_config.max_group_record_bytes = max_message_bytes.parse().unwrap_or(group_config.max_group_record_bytes);
        let groups = GroupMetadataManager::new(group_config, config.offsets.clone());
        let broker = Arc::new(Broker {
            groups,
            request_memory: Arc::new(Semaphore::new(permits)),
            config,
            metadata,
            replicas,
            reconcile_lock: parking_lot::Mutex::new(()),
            registered: std::sync::atomic::AtomicBool::new(false),
            serving: watch::channel(false).0,
            producer_ids: parking_lot::Mutex::new((0, 0)),
            incarnation_id: Uuid::new_v4(),
            isr_proposals: parking_lot::Mutex::default(),
        });
        broker.replicas.remove_orphan_dirs(&broker.metadata.image());
        Ok(broker)
    }

    /// Starts the background tasks: registration, following metadata changes, and (while
    /// this node leads the quorum) the controller's liveness checks.
    pub fn spawn_background(self: &Arc<Self>, shutdown: watch::Receiver<bool>) -> Vec<tokio::task::JoinHandle<()>> {
        vec![
            tokio::spawn(register(self.clone(), shutdown.clone())),
            tokio::spawn(follow_metadata(self.clone(), shutdown.clone())),
            tokio::spawn(controller::timer::run(
                self.clone(),
                controller_timer_config(&self.config),
                shutdown.clone(),
            )),
            tokio::spawn(run_isr_maintenance(self.clone(), shutdown.clone())),
            tokio::spawn(GroupMetadataManager::run_timers(self.clone(), shutdown)),
        ]
    }

    /// Proposes an ISR change a partition leader decided on, in the background; the leader
    /// may propose again once this one is decided.
    pub fn propose_isr_change(self: &Arc<Self>, partition: Arc<crate::partition::Partition>, command: MetadataCommand) {
        let broker = self.clone();
        let mut proposals = self.isr_proposals.lock();
        while proposals.try_join_next().is_some() {} // reap finished ones
        proposals.spawn(async move {
            if let Err(e) = broker.commit(command).await {
                tracing::info!(
                    topic = %partition.topic, partition = partition.index, error = %e,
                    "ISR change not accepted; will re-evaluate shortly"
                );
                // Refused changes (a replica still fenced, say) are not retried at fetch rate.
                tokio::time::sleep(ISR_CHANGE_RETRY).await;
            }
            partition.isr_change_finished();
        });
    }

    /// Abandons ISR changes still in flight (they hold the broker) before the process stops.
    pub async fn stop_isr_proposals(&self) {
        let mut proposals = std::mem::take(&mut *self.isr_proposals.lock());
        proposals.shutdown().await;
    }

    /// Kafka's controlled shutdown: moves leadership of this broker's partitions to other
    /// in-sync replicas and leaves their ISRs, so clients move on before the process exits.
    pub async fn controlled_shutdown(&self) {
        if !self.config.controlled_shutdown_enable {
            return;
        }
        let command = MetadataCommand::ControlledShutdown {
            broker_id: self.config.node_id,
            incarnation_id: self.incarnation_id,
        };
        match tokio::time::timeout(Duration::from_secs(15), self.commit(command)).await {
            Ok(Ok(_)) => tracing::info!("controlled shutdown: leadership moved to other replicas"),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "controlled shutdown was not accepted; stopping anyway (clients fail over once this broker is fenced)")
            }
            Err(_) => tracing::warn!(
                "controlled shutdown timed out; stopping anyway (clients fail over once this broker is fenced)"
            ),
        }
    }

    /// Commits a metadata change through the quorum and applies it to the hosted partitions
    /// before returning, so a client that was told "created" can produce at once.
    pub async fn commit(&self, command: MetadataCommand) -> Result<(Arc<MetadataImage>, Outcome), CommitError> {
        let result = self.metadata.commit(command).await?;
        self.reconcile();
        Ok(result)
    }

    /// Waits until the broker may serve clients (see `serving`).
    pub async fn wait_until_serving(&self) {
        let mut serving = self.serving.subscribe();
        let _ = serving.wait_for(|s| *s).await;
    }

    /// A producer id never handed out before, taking a new block from the quorum when the
    /// current one is used up.
    pub async fn next_producer_id(&self) -> Result<i64, CommitError> {
        loop {
            {
                let mut ids = self.producer_ids.lock();
                if ids.0 < ids.1 {
                    ids.0 += 1;
                    return Ok(ids.0 - 1);
                }
            }
            let command = MetadataCommand::AllocateProducerIds {
                broker_id: self.config.node_id,
            };
            if let (_, Outcome::ProducerIdBlock { first, size }) = self.commit(command).await? {
                let mut ids = self.producer_ids.lock();
                if ids.0 >= ids.1 {
                    *ids = (first, first + size);
                }
            }
        }
    }

    fn reconcile(&self) {
        if !self.registered.load(std::sync::atomic::Ordering::Acquire) {
            return;
        }
        let _serial = self.reconcile_lock.lock();
        let image = self.metadata.image();
        self.replicas.reconcile(&image, now_ms());
        self.groups.reconcile(&image, &self.replicas, self.config.node_id);
    }
}

/// The settings of `config` that the controller's timer runs by.
fn controller_timer_config(config: &BrokerConfig) -> controller::timer::TimerConfig {
    controller::timer::TimerConfig {
        broker_heartbeat_interval_ms: config.broker_heartbeat_interval_ms,
        broker_session_timeout_ms: config.broker_session_timeout_ms,
        auto_leader_rebalance_enable: config.auto_leader_rebalance_enable,
        leader_imbalance_check_interval_seconds: config.leader_imbalance_check_interval_seconds,
    }
}

/// The broker as the controller's timer sees it: the quorum leader's contact times in broker
/// ids, the image, and proposing through `commit` (so hosted partitions follow at once).
impl controller::timer::ControllerHost for Broker {
    type Error = CommitError;

    fn broker_contacts(&self) -> Option<Vec<(i32, Option<u64>)>> {
        let status = self.metadata.quorum_status();
        if status.role != sluice_raft_meta::Role::Leader {
            return None;
        }
        let contacts = status
            .voters
            .iter()
            .chain(status.learners.iter())
            .map(|r| {
                let ms = if r.id == status.node_id {
                    Some(0)
                } else {
                    r.last_contact_ms_ago
                };
                (node_id_of(r.id), ms)
            })
            .collect();
        Some(contacts)
    }

    fn image(&self) -> Arc<MetadataImage> {
        self.metadata.image()
    }

    async fn propose(&self, command: MetadataCommand) -> Result<(), CommitError> {
        self.commit(command).await.map(|_| ())
    }
}

/// Announces this broker (a new incarnation on every start), retrying until the quorum takes it.
async fn register(broker: Arc<Broker>, mut shutdown: watch::Receiver<bool>) {
    let command = MetadataCommand::RegisterBroker {
        broker_id: broker.config.node_id,
        incarnation_id: broker.incarnation_id,
        endpoints: vec![Endpoint {
            host: broker.config.advertised_host.clone(),
            port: broker.config.advertised_port,
        }],
        rack: broker.config.rack.clone(),
    };
    let mut attempt = 0u32;
    loop {
        match broker.commit(command.clone()).await {
            Ok(_) => {
                tracing::info!(node_id = broker.config.node_id, "registered with the metadata quorum");
                broker.registered.store(true, std::sync::atomic::Ordering::Release);
                broker.reconcile();
                broker.serving.send_replace(true);
                return;
            }
            Err(e) => {
                attempt += 1;
                if attempt % 10 == 1 {
                    tracing::warn!(error = %e, attempt, "broker registration is waiting for the metadata quorum");
                }
            }
        }
        tokio::select! {
            _ = shutdown.changed() => return,
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
    }
}

/// Applies metadata changes made elsewhere in the cluster to the hosted partitions.
async fn follow_metadata(broker: Arc<Broker>, mut shutdown: watch::Receiver<bool>) {
    let mut images = broker.metadata.subscribe();
    loop {
        tokio::select! {
            _ = shutdown.changed() => return,
            changed = images.changed() => if changed.is_err() { return },
        }
        broker.reconcile();
    }
}

/// The partition leader's timer-driven duty: drop followers that have not caught up within
/// `replica.lag.time.max.ms` from the ISR (checked every half lag period, as Kafka does), and
/// checkpoint high watermarks every `replica.high.watermark.checkpoint.interval.ms`.
async fn run_isr_maintenance(broker: Arc<Broker>, mut shutdown: watch::Receiver<bool>) {
    let lag_ms = broker.config.replica_lag_time_max_ms;
    let mut isr_ticker = tokio::time::interval(Duration::from_millis((lag_ms / 2).max(10)));
    isr_ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let checkpoint_period = Duration::from_millis(broker.config.replica_high_watermark_checkpoint_interval_ms.max(10));
    let mut checkpoint_ticker = tokio::time::interval(checkpoint_period);
    checkpoint_ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.changed() => return,
            _ = isr_ticker.tick() => {
                let now = now_ms();
                for partition in broker.replicas.all() {
                    if let Some(command) = partition.isr_shrink(now, lag_ms as i64) {
                        broker.propose_isr_change(partition, command);
                    }
                }
            }
            _ = checkpoint_ticker.tick() => broker.replicas.checkpoint_high_watermarks(),
        }
    }
}

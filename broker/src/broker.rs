//! The broker's shared state, handed to every connection and request handler, and the
//! background work that keeps it in step with the cluster.
//!
//! Lifecycle of one start: `register` commits a `RegisterBroker` (a new incarnation, with the
//! broker's replica capacity), retried with backoff while the controller refuses it with
//! DUPLICATE_BROKER_REGISTRATION (the previous process's session is still live). Only then does
//! `run_reconciler` start, since replaying the local metadata log passes through states that
//! must not be acted on; serving starts once its first round has opened the hosted partitions
//! ([`Broker::wait_until_serving`]). After that, `keep_unfenced` asks to be unfenced
//! (`UnfenceBroker`, naming the incarnation) whenever the image shows this broker fenced.
//!
//! The reconciler follows every new image, one round at a time and always from the newest:
//! hosted partitions (`ReplicaManager::reconcile_image`), then groups and transaction
//! coordinators. [`Broker::commit`] waits for the round covering its change before the client
//! is answered, and the produce path can wait for one inline ([`Broker::catch_up_with_metadata`]).
//! Producer ids come in blocks from the quorum ([`Broker::next_producer_id`]).

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use tokio::sync::{watch, Semaphore};
use uuid::Uuid;

use crate::clock::now_ms;
use crate::config::listeners::HTTP_ENDPOINT_NAME;
use crate::config::BrokerConfig;
use crate::controller::{self, Outcome};
use crate::fetch_session::FetchSessionCache;
use crate::group::GroupMetadataManager;
use crate::metadata::image::MetadataImage;
use crate::metadata::records::{Endpoint, MetadataCommand, BROKER_DEFAULT};
use crate::metadata::{node_id_of, CommitError, MetadataError, MetadataStore};
use crate::metrics::history::History;
use crate::metrics::BrokerMetrics;
use crate::quota::ClientQuotaManager;
use crate::replica_manager::ReplicaManager;
use crate::security::Security;
use crate::topic_config::{self, BrokerOverrides};
use crate::txn::TransactionManager;

pub struct Broker {
    pub config: Arc<BrokerConfig>,
    /// TLS configurations, the authorizer, the OAUTHBEARER validator, the brokers' credential.
    pub security: Arc<Security>,
    pub metadata: Arc<MetadataStore>,
    pub replicas: Arc<ReplicaManager>,
    /// Consumer groups this broker coordinates.
    pub groups: Arc<GroupMetadataManager>,
    /// KIP-932 share-partitions this node leads and its share sessions.
    pub share: crate::share::ShareManager,
    /// Where the share-partitions' state is read and stored: the groups' coordinators.
    pub share_persister: crate::share_persister::SharePersister,
    /// Transactions this broker coordinates, and the markers it writes.
    pub txn: Arc<TransactionManager>,
    /// Bytes of requests being read or handled across all connections
    /// (`queued.max.request.bytes`): a flood of large requests waits instead of exhausting memory.
    pub request_memory: Arc<Semaphore>,
    /// Set once this start's registration is committed: only then is the local image known
    /// to be current. Before that, replaying the local metadata log passes through old states
    /// (this broker leading partitions it no longer leads), which must not be acted on, so the
    /// reconciler (`run_reconciler`) starts only then.
    registered: watch::Sender<bool>,
    /// True once registered and the hosted partitions reflect the image: only then are client
    /// requests served (Kafka too serves only after its initial metadata is published), so a
    /// restarting broker never answers for a partition it has not opened yet.
    serving: watch::Sender<bool>,
    /// Unused producer ids of this broker's current block: `next..end`.
    producer_ids: parking_lot::Mutex<(i64, i64)>,
    /// This process's registration; a controlled shutdown names it so that a stale one from a
    /// previous run cannot fence a restarted broker.
    pub incarnation_id: Uuid,
    /// Client byte-rate quotas: `producer_byte_rate` on produce, `consumer_byte_rate` on
    /// consumer fetches.
    pub produce_quotas: ClientQuotaManager,
    pub fetch_quotas: ClientQuotaManager,
    /// Traffic counters and request timings (`metrics/`), shown at `/metrics` and the console.
    pub metrics: Arc<BrokerMetrics>,
    /// The console's recent samples of this broker's throughput and latency.
    pub history: History,
    /// Incremental fetch sessions (KIP-227) of the clients fetching from this broker.
    pub fetch_sessions: FetchSessionCache,
}

impl Broker {
    /// Opens the data dir and joins the metadata quorum (replaying the local metadata log).
    /// Partitions are opened once this start's registration is committed (see `register`).
    pub async fn open(config: BrokerConfig, security: Arc<Security>) -> Result<Arc<Broker>, MetadataError> {
        let config = Arc::new(config);
        let metadata = Arc::new(MetadataStore::open(&config, controller::decide, security.quorum_tls()).await?);
        let metrics = Arc::new(BrokerMetrics::new(
            config.listeners.all.iter().map(|l| Arc::<str>::from(l.name.as_str())),
        ));
        let replicas = Arc::new(ReplicaManager::new(
            config.clone(),
            metadata.clone(),
            metrics.clone(),
            security.clone(),
        ));
        let permits = request_memory_budget(&config);
        let mut group_config = config.group.clone();
        let max_message_bytes =
            topic_config::effective_value("max.message.bytes", &Default::default(), &config.overrides);
        group_config.max_group_record_bytes = max_message_bytes.parse().unwrap_or(group_config.max_group_record_bytes);
        let groups = Arc::new(GroupMetadataManager::new(
            group_config,
            config.offsets.clone(),
            replicas.clone(),
            metadata.clone(),
            config.overrides.clone(),
        ));
        let txn = Arc::new(TransactionManager::new(
            config.txn.clone(),
            replicas.clone(),
            metadata.clone(),
            groups.clone(),
            config.overrides.clone(),
            security.clone(),
            config.clone(),
        ));
        let share_persister = crate::share_persister::SharePersister::new(
            config.clone(),
            security.clone(),
            metadata.clone(),
            groups.clone(),
        );
        let broker = Arc::new(Broker {
            txn,
            share_persister,
            produce_quotas: ClientQuotaManager::produce(&config.quota),
            fetch_quotas: ClientQuotaManager::fetch(&config.quota),
            groups,
            share: crate::share::ShareManager::new(config.group.share),
            metrics,
            history: History::default(),
            fetch_sessions: FetchSessionCache::new(config.fetch_sessions),
            request_memory: Arc::new(Semaphore::new(permits)),
            config,
            security,
            metadata,
            replicas,
            registered: watch::channel(false).0,
            serving: watch::channel(false).0,
            producer_ids: parking_lot::Mutex::new((0, 0)),
            incarnation_id: Uuid::new_v4(),
        });
        broker.replicas.remove_orphan_dirs(&broker.metadata.image());
        Ok(broker)
    }

    /// Starts the background tasks: registration (then asking to be unfenced whenever the
    /// controller fenced this broker), following metadata changes, and (while this node leads
    /// the quorum) the controller's liveness checks.
    pub fn spawn_background(self: &Arc<Self>, shutdown: watch::Receiver<bool>) -> Vec<tokio::task::JoinHandle<()>> {
        vec![
            tokio::spawn(run_lifecycle(self.clone(), shutdown.clone())),
            tokio::spawn(run_reconciler(self.clone(), shutdown.clone())),
            tokio::spawn(controller::timer::run(
                self.clone(),
                controller_timer_config(&self.config),
                shutdown.clone(),
            )),
            tokio::spawn(self.replicas.clone().run_isr_maintenance(shutdown.clone())),
            tokio::spawn(self.groups.clone().run_timers(shutdown.clone())),
            tokio::spawn(self.txn.clone().run_timers(shutdown)),
        ]
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

    /// The broker-level values this broker's topic configs fall back to: its `--set` values with
    /// the dynamic broker configs of `image` (the one the request is served from) on top.
    pub fn topic_defaults(&self, image: &MetadataImage) -> Cow<'_, BrokerOverrides> {
        topic_config::broker_defaults(&self.config.overrides, &image.broker_configs, self.config.node_id)
    }

    /// A dynamic broker setting ([`topic_config::LIVE_BROKER_SETTINGS`]) as it now applies to
    /// this broker: its own dynamic value, else the cluster-wide one, else `fallback` (the
    /// static setting). A value that does not parse (the controller validated it) falls back.
    pub fn dynamic_setting<T: std::str::FromStr>(&self, key: &str, fallback: T) -> T {
        let image = self.metadata.image();
        [self.config.node_id, BROKER_DEFAULT]
            .iter()
            .find_map(|id| image.broker_configs.get(id)?.get(key))
            .and_then(|v| v.parse().ok())
            .unwrap_or(fallback)
    }

    /// The `transaction.version` in effect: finalized by UpdateFeatures (`kafka-features`), else
    /// this node's `transaction.version` setting.
    pub fn transaction_version(&self, image: &MetadataImage) -> i16 {
        image
            .features
            .get(crate::controller::features::TRANSACTION_VERSION)
            .copied()
            .unwrap_or(self.config.txn.transaction_version)
    }

    /// The finalized `group.version`: UpdateFeatures' level, else 1 while
    /// `group.coordinator.rebalance.protocols` includes `consumer`.
    pub fn group_version(&self, image: &MetadataImage) -> i16 {
        image
            .features
            .get(crate::controller::features::GROUP_VERSION)
            .copied()
            .unwrap_or(i16::from(self.config.group.consumer_protocol_enabled))
    }

    /// The finalized `share.version`: UpdateFeatures' level, else 1 (Kafka 4.2's default,
    /// share groups generally available).
    pub fn share_version(&self, image: &MetadataImage) -> i16 {
        image
            .features
            .get(crate::controller::features::SHARE_VERSION)
            .copied()
            .unwrap_or(1)
    }

    /// Whether a request of a transactions v2 client version (Produce v12+, TxnOffsetCommit
    /// v5+) is treated as one: `transaction.version` is 2.
    pub fn tv2_enabled(&self) -> bool {
        self.transaction_version(&self.metadata.image()) >= crate::txn::coordinator::TV2
    }

    /// Whether partition leaders verify a producer's first transactional write with its
    /// coordinator (`transaction.partition.verification.enable`, dynamic).
    pub fn partition_verification(&self) -> bool {
        self.dynamic_setting(
            "transaction.partition.verification.enable",
            self.txn.partition_verification(),
        )
    }

    /// Commits a metadata change through the quorum and applies it to the hosted partitions
    /// before returning, so a client that was told "created" can produce at once.
    pub async fn commit(&self, command: MetadataCommand) -> Result<(Arc<MetadataImage>, Outcome), CommitError> {
        let result = self.metadata.commit(command).await?;
        self.reconcile().await;
        Ok(result)
    }

    /// The request memory budget `request_memory` was created with.
    pub fn request_memory_budget(&self) -> usize {
        request_memory_budget(&self.config)
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

    /// Waits, for at most [`CATCH_UP_WAIT`], until the hosted partitions and groups reflect the
    /// newest image, for a request that found its partition behind the image it was served from
    /// and must keep its place on the connection (the produce path, whose handler is
    /// synchronous). The reconciler does the work; this thread only waits, through
    /// `block_in_place`, so the runtime moves the worker's other tasks elsewhere meanwhile.
    pub fn catch_up_with_metadata(&self) {
        if !*self.registered.borrow() {
            return;
        }
        let target = self.metadata.image().last_offset;
        if self.replicas.is_reconciled_to(target) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if runtime.runtime_flavor() != tokio::runtime::RuntimeFlavor::MultiThread {
            return; // block_in_place needs other workers to hand this one's tasks to
        }
        tokio::task::block_in_place(|| {
            runtime.block_on(async {
                let _ = tokio::time::timeout(CATCH_UP_WAIT, self.replicas.wait_reconciled_to(target)).await;
            })
        });
    }

    /// Waits until the hosted partitions and groups reflect the current image (at once before
    /// this start's registration is committed).
    async fn reconcile(&self) {
        if !*self.registered.borrow() {
            return;
        }
        self.replicas
            .wait_reconciled_to(self.metadata.image().last_offset)
            .await;
    }
}

/// The longest a produce request waits inline for the hosted partitions to catch up with the
/// image before it is answered from what is open (NOT_LEADER_OR_FOLLOWER, which clients retry).
const CATCH_UP_WAIT: Duration = Duration::from_secs(10);

/// Bytes of requests held at once (`queued.max.request.bytes`, within what a semaphore and a
/// frame size can count).
fn request_memory_budget(config: &BrokerConfig) -> usize {
    config
        .queued_max_request_bytes
        .clamp(1, (u32::MAX as usize).min(Semaphore::MAX_PERMITS))
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

    fn broker_contacts(&self) -> Option<Vec<controller::MemberContact>> {
        let status = self.metadata.quorum_status();
        if status.role != sluice_raft_meta::Role::Leader {
            return None;
        }
        let voters = status.voters.iter().map(|r| (r, true));
        let learners = status.learners.iter().map(|r| (r, false));
        let contacts = voters
            .chain(learners)
            .map(|(r, voter)| controller::MemberContact {
                broker_id: node_id_of(r.id),
                last_heard_ms: if r.id == status.node_id {
                    Some(0)
                } else {
                    r.last_contact_ms_ago
                },
                voter,
            })
            .collect();
        Some(contacts)
    }

    fn image(&self) -> Arc<MetadataImage> {
        self.metadata.image()
    }

    fn own_incarnation(&self) -> (i32, Uuid) {
        (self.config.node_id, self.incarnation_id)
    }

    async fn propose(&self, command: MetadataCommand) -> Result<(), CommitError> {
        self.commit(command).await.map(|_| ())
    }
}

/// Kafka's `BrokerLifecycleManager`: registers this process, then keeps it unfenced.
async fn run_lifecycle(broker: Arc<Broker>, mut shutdown: watch::Receiver<bool>) {
    if register(&broker, &mut shutdown).await {
        if !broker.config.security.add_scram.is_empty() {
            tokio::spawn(add_scram_users(broker.clone(), shutdown.clone()));
        }
        keep_unfenced(&broker, &mut shutdown).await;
    }
}

/// Creates the `--add-scram` users the cluster has none of (Kafka's `kafka-storage format
/// --add-scram`, but at any start: a user that exists, with any mechanism, is left as it is, so
/// a password changed since is never reset). Retries while the quorum is unavailable.
async fn add_scram_users(broker: Arc<Broker>, mut shutdown: watch::Receiver<bool>) {
    let users = broker.config.security.add_scram.clone();
    let upsertions = tokio::task::spawn_blocking(move || {
        users
            .iter()
            .map(|u| {
                let mechanism = match u.mechanism {
                    crate::config::SaslMechanism::ScramSha256 => crate::metadata::records::ScramMechanism::Sha256,
                    _ => crate::metadata::records::ScramMechanism::Sha512,
                };
                crate::security::scram::credential_from_password(&u.name, mechanism, u.password.expose(), u.iterations)
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap_or_default();
    let existing = broker.metadata.image();
    let command = MetadataCommand::AlterScramCredentials {
        deletions: Vec::new(),
        upsertions: upsertions.clone(),
        only_if_absent: true,
    };
    for attempt in 0..30u32 {
        match broker.commit(command.clone()).await {
            Ok((image, _)) => {
                for c in &upsertions {
                    if existing.has_scram_user(&c.user)
                        || !image.scram_credentials.contains_key(&(c.user.clone(), c.mechanism))
                    {
                        tracing::info!(user = %c.user, "--add-scram: the cluster already has this user; left it unchanged (change passwords with kafka-configs --alter --entity-type users)");
                    } else {
                        tracing::info!(user = %c.user, mechanism = c.mechanism.name(), "--add-scram: created the SCRAM user");
                    }
                }
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, attempt, "--add-scram: could not create the users yet; retrying");
                tokio::select! {
                    _ = shutdown.changed() => return,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
            }
        }
    }
    tracing::error!("--add-scram: gave up creating the users after 30 attempts; create them with kafka-configs --alter --entity-type users");
}

/// How long registration and unfencing requests wait before they are repeated: half a
/// heartbeat interval, as the controller's timer ticks, so each repeat (a metadata log entry)
/// stays rare.
fn lifecycle_retry(config: &BrokerConfig) -> Duration {
    Duration::from_millis(config.broker_heartbeat_interval_ms.clamp(200, 2000) / 2)
}

/// Announces this broker (a new incarnation on every start), retrying until the quorum takes
/// it. While this node's previous process is still registered and its session not over, the
/// controller refuses (DUPLICATE_BROKER_REGISTRATION) and this retries with backoff: nothing
/// is served meanwhile, so no partition is led on the strength of metadata from before the
/// restart. Returns whether it registered (false: shutting down).
async fn register(broker: &Arc<Broker>, shutdown: &mut watch::Receiver<bool>) -> bool {
    let command = MetadataCommand::RegisterBroker {
        broker_id: broker.config.node_id,
        incarnation_id: broker.incarnation_id,
        endpoints: broker
            .config
            .listeners
            .all
            .iter()
            .map(|l| Endpoint {
                listener: l.name.clone(),
                host: l.advertised_host.clone(),
                port: l.advertised_port,
            })
            .chain(http_endpoint(&broker.config))
            .collect(),
        rack: broker.config.rack.clone(),
        // Segment files go through a bounded cache, so the open-files limit no longer caps the
        // replicas a broker hosts; the field stays for brokers of earlier versions, which
        // register one and are still held to it by the controller.
        replica_capacity: None,
        wait_for_previous_session: true,
    };
    let mut attempt = 0u32;
    let mut refusals = 0u32;
    loop {
        let mut backoff = Duration::from_millis(200);
        match broker.commit(command.clone()).await {
            Ok((image, _)) => {
                let broker_epoch = image.brokers.get(&broker.config.node_id).map(|b| b.broker_epoch);
                tracing::info!(
                    node_id = broker.config.node_id,
                    broker_epoch,
                    "registered with the metadata quorum"
                );
                broker.registered.send_replace(true);
                // Serving starts once the reconciler has opened the hosted partitions.
                tokio::select! {
                    _ = shutdown.changed() => return false,
                    _ = broker.replicas.wait_reconciled_to(image.last_offset) => {}
                }
                tracing::info!(
                    hosted_partitions = broker.replicas.all().len(),
                    "hosted partitions opened; serving clients"
                );
                broker.serving.send_replace(true);
                return true;
            }
            Err(CommitError::Refused(e)) if e.error == ResponseError::DuplicateBrokerRegistration => {
                refusals += 1;
                if refusals == 1 {
                    tracing::warn!(
                        session_timeout_ms = broker.config.broker_session_timeout_ms,
                        "this node's previous process is still registered and its session has not expired: waiting for it to expire (at most broker.session.timeout.ms) before registering; this node serves nothing until then"
                    );
                } else {
                    tracing::debug!(refusals, reason = %e.message, "registration still waits for the previous session to expire");
                }
                let doubled = Duration::from_millis(100) * 2u32.saturating_pow(refusals.min(8));
                backoff = doubled.min(lifecycle_retry(&broker.config));
            }
            Err(e) => {
                attempt += 1;
                if attempt % 10 == 1 {
                    tracing::warn!(error = %e, attempt, "broker registration is waiting for the metadata quorum");
                }
            }
        }
        tokio::select! {
            _ = shutdown.changed() => return false,
            _ = tokio::time::sleep(backoff) => {}
        }
    }
}

/// Kafka's heartbeat asking to leave the fenced state. The controller fences a broker it has
/// not heard from within `broker.session.timeout.ms` (this process was paused, say, or cut off)
/// but never unfences by contact, which is a quorum member's and not an incarnation's: this
/// process asks, naming its incarnation, whenever the image shows its own registration fenced.
/// Not after its own controlled shutdown, nor once a newer process of this node waits to
/// register (then this one is the stale one).
async fn keep_unfenced(broker: &Arc<Broker>, shutdown: &mut watch::Receiver<bool>) {
    let node_id = broker.config.node_id;
    let mut images = broker.metadata.subscribe();
    let mut asking = false;
    loop {
        let image = images.borrow_and_update().clone();
        let fenced = image.brokers.get(&node_id).is_some_and(|b| {
            b.incarnation_id == broker.incarnation_id
                && b.fenced
                && !b.in_controlled_shutdown
                && b.pending_incarnation.is_none()
        });
        if !fenced {
            asking = false;
            tokio::select! {
                _ = shutdown.changed() => return,
                changed = images.changed() => if changed.is_err() { return },
            }
            continue;
        }
        if !asking {
            tracing::info!("the controller fenced this broker (it did not hear from it within broker.session.timeout.ms); asking to be unfenced");
            asking = true;
        }
        let command = MetadataCommand::UnfenceBroker {
            broker_id: node_id,
            incarnation_id: Some(broker.incarnation_id),
        };
        if let Err(e) = broker.commit(command).await {
            tracing::debug!(error = %e, "the request to be unfenced was not committed; will retry");
        }
        // A request that changed nothing (the image moved on meanwhile) is not repeated at once.
        tokio::select! {
            _ = shutdown.changed() => return,
            _ = tokio::time::sleep(lifecycle_retry(&broker.config)) => {}
        }
    }
}

/// Where the other brokers' consoles reach this one's (`metrics.listen`): its address, or for
/// an unspecified one (0.0.0.0) the inter-broker listener's advertised host with its port.
fn http_endpoint(config: &BrokerConfig) -> Option<Endpoint> {
    let bound = config.metrics_listen?;
    let host = if bound.ip().is_unspecified() {
        let inter_broker = config
            .listeners
            .all
            .iter()
            .find(|l| l.name == config.listeners.inter_broker)?;
        inter_broker.advertised_host.clone()
    } else {
        bound.ip().to_string()
    };
    Some(Endpoint {
        listener: HTTP_ENDPOINT_NAME.to_string(),
        host,
        port: bound.port() as i32,
    })
}

/// The reconciler: once this start's registration is committed, brings the hosted partitions
/// and groups in line with every new image, one round at a time and always from the newest
/// image (`ReplicaManager::reconcile_image`), and reports each round done, which `commit`,
/// `register` and the produce path's catch-up wait for.
async fn run_reconciler(broker: Arc<Broker>, mut shutdown: watch::Receiver<bool>) {
    /// Whichever way the reconciler ends, nothing may wait for it afterwards.
    struct Stopped<'a>(&'a ReplicaManager);
    impl Drop for Stopped<'_> {
        fn drop(&mut self) {
            self.0.stop_reconciling();
        }
    }
    let _stopped = Stopped(&broker.replicas);
    let mut registered = broker.registered.subscribe();
    tokio::select! {
        _ = shutdown.changed() => return,
        result = registered.wait_for(|r| *r) => if result.is_err() { return },
    }
    let mut images = broker.metadata.subscribe();
    loop {
        images.borrow_and_update();
        let image = broker.metadata.image();
        tokio::select! {
            _ = shutdown.changed() => return,
            _ = broker.replicas.reconcile_image(&image, now_ms()) => {}
        }
        broker.groups.reconcile(&image, broker.config.node_id);
        broker.txn.reconcile(&image, broker.config.node_id);
        broker.replicas.mark_reconciled(image.last_offset);
        tokio::select! {
            _ = shutdown.changed() => return,
            changed = images.changed() => if changed.is_err() { return },
        }
    }
}

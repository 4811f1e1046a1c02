//! The broker's shared state, handed to every connection and request handler.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::Semaphore;
use uuid::Uuid;

use crate::config::BrokerConfig;
use crate::controller::ApiError;
use crate::metadata::image::MetadataImage;
use crate::metadata::records::{Endpoint, MetadataRecord};
use crate::metadata::{CommitError, MetadataError, MetadataStore};
use crate::replica_manager::ReplicaManager;

pub struct Broker {
    pub config: Arc<BrokerConfig>,
    pub metadata: MetadataStore,
    pub replicas: ReplicaManager,
    /// Bytes of requests being read or handled across all connections
    /// (`queued.max.request.bytes`): a flood of large requests waits instead of exhausting memory.
    pub request_memory: Arc<Semaphore>,
    /// Serialises reconciliation so partitions always follow the newest image, never an older
    /// one applied late by a slower thread.
    reconcile_lock: parking_lot::Mutex<()>,
}

/// Milliseconds since the Unix epoch: Kafka's timestamp unit.
pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

impl Broker {
    /// Opens the data dir, replays metadata, registers this broker and opens its partitions.
    pub fn open(config: BrokerConfig) -> Result<Arc<Broker>, MetadataError> {
        let config = Arc::new(config);
        let metadata = MetadataStore::open(&config.data_dir, config.node_id)?;
        let replicas = ReplicaManager::new(config.clone());
        let permits = config.queued_max_request_bytes.clamp(1, (u32::MAX as usize).min(Semaphore::MAX_PERMITS));
        let broker = Arc::new(Broker {
            request_memory: Arc::new(Semaphore::new(permits)),
            config,
            metadata,
            replicas,
            reconcile_lock: parking_lot::Mutex::new(()),
        });
        broker.register().map_err(|e| match e {
            CommitError::Storage(j) => MetadataError::Journal(j),
            CommitError::Refused(e) => MetadataError::BadProperties {
                path: broker.config.data_dir.clone(),
                reason: e.message,
            },
        })?;
        broker.replicas.remove_orphan_dirs(&broker.metadata.image());
        broker.reconcile();
        Ok(broker)
    }

    /// Records this broker's endpoints (a new incarnation on every start).
    fn register(&self) -> Result<(), CommitError> {
        let record = MetadataRecord::RegisterBroker {
            broker_id: self.config.node_id,
            incarnation_id: Uuid::new_v4(),
            endpoints: vec![Endpoint { host: self.config.advertised_host.clone(), port: self.config.advertised_port }],
            rack: self.config.rack.clone(),
        };
        self.metadata.commit(|_| Ok((vec![record], ()))).map(|_| ())
    }

    /// Commits a metadata change and applies it to the hosted partitions before returning,
    /// so a client that was told "created" can produce at once.
    pub fn commit<T>(
        &self,
        decide: impl FnOnce(&MetadataImage) -> Result<(Vec<MetadataRecord>, T), ApiError>,
    ) -> Result<(Arc<MetadataImage>, T), CommitError> {
        let (image, value) = self.metadata.commit(decide)?;
        self.reconcile();
        Ok((image, value))
    }

    fn reconcile(&self) {
        let _serial = self.reconcile_lock.lock();
        self.replicas.reconcile(&self.metadata.image(), now_ms());
    }
}

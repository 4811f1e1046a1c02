//! Requests brokers send each other, batched per destination (Kafka's
//! `InterBrokerSendThread`): one task per destination broker owns a connection to its
//! inter-broker listener and sends what is queued for it as one request, so many items share
//! a round trip. Transaction markers (`txn/markers.rs`, WriteTxnMarkers to partition
//! leaders), verifications (`txn/verify.rs`, AddPartitionsToTxn to coordinators) and
//! share-partition state (`share_persister.rs`, Read/WriteShareGroupState to group
//! coordinators) each keep their own set of channels.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use parking_lot::Mutex;
use tokio::sync::mpsc;

use crate::config::BrokerConfig;
use crate::metadata::MetadataStore;
use crate::replication::client::BrokerConnection;
use crate::security::Security;

/// Items queued for one broker before senders wait: bounded, as every queue.
const CHANNEL_CAPACITY: usize = 1024;

/// One queued item and how a batch of them travels.
pub trait Exchange: Sized + Send + 'static {
    /// The client id the connection announces (in the other broker's logs and metrics).
    const PURPOSE: &'static str;
    /// Items sent in one request at most.
    const MAX_PER_REQUEST: usize;
    /// Answers the item with `error`: it could not be sent.
    fn fail(self, error: ResponseError);
    /// Sends `batch` as one request and answers each item. A connection that failed hands the
    /// batch back with why: its items are failed and the connection is dialled again.
    fn exchange(
        connection: &mut BrokerConnection,
        batch: Vec<Self>,
    ) -> impl Future<Output = Result<(), (Vec<Self>, String)>> + Send + '_;
}

/// One sending task per destination broker, started on first use.
pub struct BrokerChannels<T: Exchange> {
    config: Arc<BrokerConfig>,
    security: Arc<Security>,
    metadata: Arc<MetadataStore>,
    senders: Mutex<HashMap<i32, mpsc::Sender<T>>>,
}

impl<T: Exchange> BrokerChannels<T> {
    pub fn new(config: Arc<BrokerConfig>, security: Arc<Security>, metadata: Arc<MetadataStore>) -> Self {
        BrokerChannels {
            config,
            security,
            metadata,
            senders: Mutex::new(HashMap::new()),
        }
    }

    /// Queues `item` for `broker`; it is answered through itself (failed with
    /// COORDINATOR_NOT_AVAILABLE when the broker cannot be reached).
    pub async fn send(&self, broker: i32, item: T) {
        if let Err(mpsc::error::SendError(item)) = self.sender(broker).send(item).await {
            item.fail(ResponseError::CoordinatorNotAvailable);
        }
    }

    fn sender(&self, broker: i32) -> mpsc::Sender<T> {
        let mut senders = self.senders.lock();
        if let Some(tx) = senders.get(&broker).filter(|tx| !tx.is_closed()) {
            return tx.clone();
        }
        let (tx, rx) = mpsc::channel(CHANNEL_CAPACITY);
        senders.insert(broker, tx.clone());
        tokio::spawn(send_loop(
            broker,
            rx,
            self.config.clone(),
            self.security.clone(),
            self.metadata.clone(),
        ));
        tx
    }
}

/// Owns the connection to `broker` and sends what is queued, many items per request.
async fn send_loop<T: Exchange>(
    broker: i32,
    mut queue: mpsc::Receiver<T>,
    config: Arc<BrokerConfig>,
    security: Arc<Security>,
    metadata: Arc<MetadataStore>,
) {
    let mut connection: Option<BrokerConnection> = None;
    while let Some(first) = queue.recv().await {
        let mut batch = vec![first];
        while batch.len() < T::MAX_PER_REQUEST {
            match queue.try_recv() {
                Ok(more) => batch.push(more),
                Err(_) => break,
            }
        }
        if connection.is_none() {
            let image = metadata.image();
            match BrokerConnection::dial_broker(broker, T::PURPOSE, &image, &config, &security).await {
                Ok(c) => connection = Some(c),
                Err(e) => {
                    tracing::debug!(broker, purpose = T::PURPOSE, error = %e, "cannot reach the broker yet; the senders retry");
                    fail_all(batch, ResponseError::CoordinatorNotAvailable);
                    continue;
                }
            }
        }
        let Some(conn) = connection.as_mut() else { continue };
        if let Err((batch, error)) = T::exchange(conn, batch).await {
            tracing::debug!(broker, purpose = T::PURPOSE, %error, "a request to the broker failed; the senders retry");
            connection = None;
            fail_all(batch, ResponseError::CoordinatorNotAvailable);
        }
    }
}

pub fn fail_all<T: Exchange>(batch: Vec<T>, error: ResponseError) {
    for item in batch {
        item.fail(error);
    }
}

//! Transaction markers (Kafka's `TransactionMarkerChannelManager` and the partition side of
//! `WriteTxnMarkers`): a completing transaction owes each of its partitions a COMMIT or ABORT
//! control batch, written by the partition's leader and replicated before it counts.
//!
//! Partitions this broker leads get theirs directly ([`TransactionManager::write_marker`]);
//! for the others, one task per destination broker owns a connection to its inter-broker
//! listener and sends what is queued for it as one WriteTxnMarkers request, so markers of
//! many transactions share a round trip. A marker that fails (leader moved, not enough
//! replicas, connection lost) is retried by the job with the leader the next image names.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::write_txn_markers_request::{WritableTxnMarker, WritableTxnMarkerTopic};
use kafka_protocol::messages::{ProducerId, TopicName, WriteTxnMarkersRequest};
use kafka_protocol::protocol::StrBytes;
use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot};

use sluice_protocol::control::ControlType;

use super::coordinator::MarkerJob;
use super::TransactionManager;
use crate::clock::now_ms;
use crate::config::BrokerConfig;
use crate::controller::OFFSETS_TOPIC;
use crate::metadata::MetadataStore;
use crate::purgatory::DelayedProduce;
use crate::replication::client::BrokerConnection;
use crate::security::Security;
use crate::topic_config;

/// WriteTxnMarkers' only version the crate speaks; brokers of this build all answer it.
const WRITE_TXN_MARKERS_VERSION: i16 = 1;
/// How long another broker may take to answer a WriteTxnMarkers (it waits for its ISR).
const MARKER_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Markers queued for one broker before senders wait: bounded, as every queue.
const CHANNEL_CAPACITY: usize = 1024;
/// Markers sent in one WriteTxnMarkers request at most.
const MAX_MARKERS_PER_REQUEST: usize = 256;
/// How long a marker waits for its partition's ISR on the leader.
const MARKER_APPEND_TIMEOUT: Duration = Duration::from_secs(30);

/// One marker for some partitions of one broker, and where its per-partition answers go.
struct QueuedMarker {
    producer_id: i64,
    producer_epoch: i16,
    coordinator_epoch: i32,
    commit: bool,
    partitions: Vec<(String, i32)>,
    reply: oneshot::Sender<Vec<((String, i32), Result<(), ResponseError>)>>,
}

/// One sending task per destination broker, started on first use.
pub struct MarkerChannels {
    config: Arc<BrokerConfig>,
    security: Arc<Security>,
    metadata: Arc<MetadataStore>,
    senders: Mutex<HashMap<i32, mpsc::Sender<QueuedMarker>>>,
}

impl MarkerChannels {
    pub fn new(config: Arc<BrokerConfig>, security: Arc<Security>, metadata: Arc<MetadataStore>) -> Self {
        MarkerChannels {
            config,
            security,
            metadata,
            senders: Mutex::new(HashMap::new()),
        }
    }

    fn sender(&self, broker: i32) -> mpsc::Sender<QueuedMarker> {
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

    /// Sends one marker for `partitions` to `broker`, their leader, and returns each one's answer.
    async fn send(
        &self,
        broker: i32,
        job: &MarkerJob,
        partitions: Vec<(String, i32)>,
    ) -> Vec<((String, i32), Result<(), ResponseError>)> {
        let (reply, answer) = oneshot::channel();
        let queued = QueuedMarker {
            producer_id: job.producer_id,
            producer_epoch: job.producer_epoch,
            coordinator_epoch: job.coordinator_epoch,
            commit: job.commit,
            partitions: partitions.clone(),
            reply,
        };
        let failed = |partitions: Vec<(String, i32)>| {
            partitions
                .into_iter()
                .map(|p| (p, Err(ResponseError::CoordinatorNotAvailable)))
                .collect()
        };
        if self.sender(broker).send(queued).await.is_err() {
            return failed(partitions);
        }
        answer.await.unwrap_or_else(|_| failed(partitions))
    }
}

/// Owns the connection to `broker` and sends what is queued, many markers per request.
async fn send_loop(
    broker: i32,
    mut queue: mpsc::Receiver<QueuedMarker>,
    config: Arc<BrokerConfig>,
    security: Arc<Security>,
    metadata: Arc<MetadataStore>,
) {
    let mut connection: Option<BrokerConnection> = None;
    while let Some(first) = queue.recv().await {
        let mut batch = vec![first];
        while batch.len() < MAX_MARKERS_PER_REQUEST {
            match queue.try_recv() {
                Ok(more) => batch.push(more),
                Err(_) => break,
            }
        }
        if connection.is_none() {
            let image = metadata.image();
            match BrokerConnection::dial_broker(broker, "sluice-txn-markers", &image, &config, &security).await {
                Ok(c) => connection = Some(c),
                Err(e) => {
                    tracing::debug!(broker, error = %e, "cannot send transaction markers yet; retrying");
                    fail_all(batch, ResponseError::CoordinatorNotAvailable);
                    continue;
                }
            }
        }
        let Some(conn) = connection.as_mut() else { continue };
        let request = WriteTxnMarkersRequest::default().with_markers(
            batch
                .iter()
                .map(|m| {
                    WritableTxnMarker::default()
                        .with_producer_id(ProducerId(m.producer_id))
                        .with_producer_epoch(m.producer_epoch)
                        .with_coordinator_epoch(m.coordinator_epoch)
                        .with_transaction_result(m.commit)
                        .with_topics(by_topic(&m.partitions))
                })
                .collect(),
        );
        match conn.call(&request, WRITE_TXN_MARKERS_VERSION, MARKER_REQUEST_TIMEOUT).await {
            Ok(response) if response.markers.len() == batch.len() => {
                for (queued, answer) in batch.into_iter().zip(response.markers) {
                    let mut results: HashMap<(String, i32), Result<(), ResponseError>> = HashMap::new();
                    for topic in answer.topics {
                        for p in topic.partitions {
                            let result = match ResponseError::try_from_code(p.error_code) {
                                None => Ok(()),
                                Some(e) => Err(e),
                            };
                            results.insert((topic.name.to_string(), p.partition_index), result);
                        }
                    }
                    let answers = queued
                        .partitions
                        .iter()
                        .map(|p| {
                            let r = results.remove(p).unwrap_or(Err(ResponseError::UnknownServerError));
                            (p.clone(), r)
                        })
                        .collect();
                    let _ = queued.reply.send(answers);
                }
            }
            Ok(_) => {
                tracing::warn!(broker, "a WriteTxnMarkers answer did not match its request; retrying");
                fail_all(batch, ResponseError::UnknownServerError);
            }
            Err(e) => {
                tracing::debug!(broker, error = %e, "sending transaction markers failed; retrying");
                connection = None;
                fail_all(batch, ResponseError::CoordinatorNotAvailable);
            }
        }
    }
}

fn fail_all(batch: Vec<QueuedMarker>, error: ResponseError) {
    for queued in batch {
        let answers = queued.partitions.iter().map(|p| (p.clone(), Err(error))).collect();
        let _ = queued.reply.send(answers);
    }
}

fn by_topic(partitions: &[(String, i32)]) -> Vec<WritableTxnMarkerTopic> {
    let mut topics: Vec<WritableTxnMarkerTopic> = Vec::new();
    for (topic, p) in partitions {
        match topics.iter_mut().find(|t| t.name.as_str() == topic) {
            Some(t) => t.partition_indexes.push(*p),
            None => topics.push(
                WritableTxnMarkerTopic::default()
                    .with_name(TopicName(StrBytes::from_string(topic.clone())))
                    .with_partition_indexes(vec![*p]),
            ),
        }
    }
    topics
}

/// One round of a job's markers: each remaining partition's marker is written by its current
/// leader (here, or through WriteTxnMarkers); returns the partitions still owed one.
/// Partitions whose topic is gone are done: there is nothing left to mark.
pub(super) async fn write_round(
    manager: &Arc<TransactionManager>,
    job: &MarkerJob,
    remaining: Vec<(String, i32)>,
) -> Vec<(String, i32)> {
    let image = manager.metadata.image();
    let node_id = manager.node_id;
    let mut by_leader: HashMap<i32, Vec<(String, i32)>> = HashMap::new();
    let mut still_owed = Vec::new();
    for (topic, index) in remaining {
        let Some(registration) = image
            .topic(&topic)
            .and_then(|t| usize::try_from(index).ok().and_then(|i| t.partitions.get(i)))
        else {
            continue;
        };
        if registration.leader < 0 {
            still_owed.push((topic, index));
        } else {
            by_leader.entry(registration.leader).or_default().push((topic, index));
        }
    }
    let rounds = by_leader.into_iter().map(|(leader, partitions)| async move {
        if leader == node_id {
            let writes = partitions.into_iter().map(|(topic, index)| async move {
                let result = manager
                    .write_marker(
                        &topic,
                        index,
                        job.producer_id,
                        job.producer_epoch,
                        job.coordinator_epoch,
                        job.commit,
                    )
                    .await;
                ((topic, index), result)
            });
            join_all(writes).await
        } else {
            manager.channels.send(leader, job, partitions).await
        }
    });
    for answers in join_all(rounds).await {
        for (partition, result) in answers {
            match result {
                Ok(()) => {}
                // The topic was deleted meanwhile: nothing to mark.
                Err(ResponseError::UnknownTopicOrPartition) if image.topic(&partition.0).is_none() => {}
                Err(e) => {
                    tracing::debug!(topic = %partition.0, partition = partition.1, error = ?e, "a transaction marker was not written; retrying");
                    still_owed.push(partition);
                }
            }
        }
    }
    still_owed
}

impl TransactionManager {
    /// The partition side of WriteTxnMarkers: appends the marker as the partition's leader and
    /// answers once the ISR has it (as `acks=all`); a marker on a `__consumer_offsets`
    /// partition then makes the producer's pending offset commits there take effect or go.
    pub async fn write_marker(
        &self,
        topic_name: &str,
        index: i32,
        producer_id: i64,
        producer_epoch: i16,
        coordinator_epoch: i32,
        commit: bool,
    ) -> Result<(), ResponseError> {
        let wait = {
            let image = self.metadata.image();
            let topic = image.topic(topic_name).ok_or(ResponseError::UnknownTopicOrPartition)?;
            let (partition, registration) = self.replicas.leader_partition(topic, index)?;
            let min_isr =
                topic_config::min_insync_replicas(&topic.configs, &self.broker_overrides, registration.replicas.len());
            if partition.isr_size() < min_isr {
                return Err(ResponseError::NotEnoughReplicas);
            }
            let leader_epoch = partition.leader_epoch();
            let kind = if commit { ControlType::Commit } else { ControlType::Abort };
            let offset = partition
                .append_control_batch(producer_id, producer_epoch, coordinator_epoch, kind, now_ms())
                .map_err(|(e, message)| {
                    tracing::debug!(topic = topic_name, partition = index, %message, "refused a transaction marker");
                    e
                })?;
            DelayedProduce {
                partition,
                required_offset: offset + 1,
                leader_epoch,
                min_insync_replicas: min_isr,
            }
        };
        wait.wait(tokio::time::Instant::now() + MARKER_APPEND_TIMEOUT)
            .await
            .map_err(|(e, _)| e)?;
        if topic_name == OFFSETS_TOPIC {
            self.groups.complete_transaction(index, producer_id, commit);
        }
        Ok(())
    }
}

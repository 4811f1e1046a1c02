//! Transaction markers (Kafka's `TransactionMarkerChannelManager` and the partition side of
//! `WriteTxnMarkers`): a completing transaction owes each of its partitions a COMMIT or ABORT
//! control batch, written by the partition's leader and replicated before it counts.
//!
//! Partitions this broker leads get theirs directly ([`TransactionManager::write_marker`]);
//! the others' go through `channels.rs`, up to 256 markers of many transactions in one
//! WriteTxnMarkers request per destination. A marker that fails (leader moved, not enough
//! replicas, connection lost) is retried by the job with the leader the next image names.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::write_txn_markers_request::{WritableTxnMarker, WritableTxnMarkerTopic};
use kafka_protocol::messages::{ProducerId, TopicName, WriteTxnMarkersRequest};
use kafka_protocol::protocol::StrBytes;
use tokio::sync::oneshot;

use sluice_protocol::control::ControlType;

use super::coordinator::MarkerJob;
use super::TransactionManager;
use crate::broker_channels::{fail_all, BrokerChannels, Exchange};
use crate::clock::now_ms;
use crate::controller::OFFSETS_TOPIC;
use crate::purgatory::DelayedProduce;
use crate::replication::client::BrokerConnection;
use crate::topic_config;

/// WriteTxnMarkers' only version the crate speaks; brokers of this build all answer it.
const WRITE_TXN_MARKERS_VERSION: i16 = 1;
/// How long another broker may take to answer a WriteTxnMarkers (it waits for its ISR).
const MARKER_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a marker waits for its partition's ISR on the leader.
const MARKER_APPEND_TIMEOUT: Duration = Duration::from_secs(30);

type MarkerAnswers = Vec<((String, i32), Result<(), ResponseError>)>;

/// One marker for some partitions of one broker, and where its per-partition answers go.
pub(super) struct QueuedMarker {
    producer_id: i64,
    producer_epoch: i16,
    coordinator_epoch: i32,
    commit: bool,
    partitions: Vec<(String, i32)>,
    reply: oneshot::Sender<MarkerAnswers>,
}

/// Markers for other brokers: one sending task per destination.
pub(super) type MarkerChannels = BrokerChannels<QueuedMarker>;

impl Exchange for QueuedMarker {
    const PURPOSE: &'static str = "sluice-txn-markers";
    const MAX_PER_REQUEST: usize = 256;

    fn fail(self, error: ResponseError) {
        let answers = self.partitions.into_iter().map(|p| (p, Err(error))).collect();
        let _ = self.reply.send(answers);
    }

    async fn exchange(connection: &mut BrokerConnection, batch: Vec<Self>) -> Result<(), (Vec<Self>, String)> {
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
        let response = match connection
            .call(&request, WRITE_TXN_MARKERS_VERSION, MARKER_REQUEST_TIMEOUT)
            .await
        {
            Ok(response) => response,
            Err(e) => return Err((batch, e.to_string())),
        };
        if response.markers.len() != batch.len() {
            tracing::warn!("a WriteTxnMarkers answer did not match its request; the markers are retried");
            fail_all(batch, ResponseError::UnknownServerError);
            return Ok(());
        }
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
        Ok(())
    }
}

/// Sends one marker for `partitions` to `broker`, their leader, and returns each one's answer.
async fn send_marker(
    channels: &MarkerChannels,
    broker: i32,
    job: &MarkerJob,
    partitions: Vec<(String, i32)>,
) -> MarkerAnswers {
    let (reply, answer) = oneshot::channel();
    let queued = QueuedMarker {
        producer_id: job.producer_id,
        producer_epoch: job.producer_epoch,
        coordinator_epoch: job.coordinator_epoch,
        commit: job.commit,
        partitions: partitions.clone(),
        reply,
    };
    channels.send(broker, queued).await;
    answer.await.unwrap_or_else(|_| {
        partitions
            .into_iter()
            .map(|p| (p, Err(ResponseError::CoordinatorNotAvailable)))
            .collect()
    })
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
            send_marker(&manager.channels, leader, job, partitions).await
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
            let kind = if commit {
                ControlType::Commit
            } else {
                ControlType::Abort
            };
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

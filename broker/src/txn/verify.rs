//! KIP-890, the partition leader's side (Kafka's `AddPartitionsToTxnManager`): before a
//! producer's first transactional batch on a partition is appended, the leader asks the
//! producer's transaction coordinator whether the partition is in its open transaction (part
//! 1), or, for a transactions v2 producer (Produce v12+, TxnOffsetCommit v5+ while
//! `transaction.version` is 2), has the coordinator add it (part 2: such a producer sends no
//! AddPartitionsToTxn of its own). A coordinator on this broker answers directly; another
//! gets AddPartitionsToTxn v5, `verify_only` for part 1, many transactions per request
//! (`channels.rs`).
//!
//! Answers are per partition. The coordinator's retriable refusals (it moved, is loading, the
//! transaction is completing, the connection failed) reach the producer as
//! NOT_ENOUGH_REPLICAS, as Kafka sends them: every client retries that produce error without
//! a metadata refresh, while they would not understand a coordinator's error on a Produce.

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::add_partitions_to_txn_request::{AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction};
use kafka_protocol::messages::{AddPartitionsToTxnRequest, ProducerId, TopicName, TransactionalId};
use kafka_protocol::protocol::StrBytes;
use tokio::sync::oneshot;

use super::TransactionManager;
use crate::broker_channels::{fail_all, BrokerChannels, Exchange};
use crate::controller::TRANSACTION_STATE_TOPIC;
use crate::replication::client::BrokerConnection;

/// The AddPartitionsToTxn version leaders send: v4 brought `verify_only`, v5 marks an add as
/// a transactions v2 producer's (brokers of this build answer both).
const VERIFY_VERSION: i16 = 5;
/// How long a coordinator on another broker may take to answer (it answers from memory).
const VERIFY_TIMEOUT: Duration = Duration::from_secs(10);

/// Per partition: in the transaction, or why it cannot be written now.
pub type Verdicts = Vec<((String, i32), Result<(), ResponseError>)>;

/// One producer's partitions to verify with its coordinator on another broker.
pub(super) struct QueuedVerification {
    transactional_id: String,
    producer_id: i64,
    producer_epoch: i16,
    partitions: Vec<(String, i32)>,
    /// Add the partitions (transactions v2) instead of only verifying them.
    add: bool,
    reply: oneshot::Sender<Verdicts>,
}

/// Verifications for coordinators on other brokers: one sending task per destination.
pub(super) type VerifyChannels = BrokerChannels<QueuedVerification>;

impl Exchange for QueuedVerification {
    const PURPOSE: &'static str = "sluice-txn-verify";
    const MAX_PER_REQUEST: usize = 256;

    fn fail(self, error: ResponseError) {
        let verdicts = self.partitions.into_iter().map(|p| (p, Err(error))).collect();
        let _ = self.reply.send(verdicts);
    }

    async fn exchange(connection: &mut BrokerConnection, batch: Vec<Self>) -> Result<(), (Vec<Self>, String)> {
        let request = AddPartitionsToTxnRequest::default().with_transactions(
            batch
                .iter()
                .map(|v| {
                    AddPartitionsToTxnTransaction::default()
                        .with_transactional_id(TransactionalId(StrBytes::from_string(v.transactional_id.clone())))
                        .with_producer_id(ProducerId(v.producer_id))
                        .with_producer_epoch(v.producer_epoch)
                        .with_verify_only(!v.add)
                        .with_topics(by_topic(&v.partitions))
                })
                .collect(),
        );
        let response = match connection.call(&request, VERIFY_VERSION, VERIFY_TIMEOUT).await {
            Ok(response) => response,
            Err(e) => return Err((batch, e.to_string())),
        };
        if let Some(error) = ResponseError::try_from_code(response.error_code) {
            fail_all(batch, error);
            return Ok(());
        }
        // Answered in request order, one result per transaction.
        if response.results_by_transaction.len() != batch.len() {
            tracing::warn!("an AddPartitionsToTxn verification answer did not match its request; the producers retry");
            fail_all(batch, ResponseError::UnknownServerError);
            return Ok(());
        }
        for (queued, result) in batch.into_iter().zip(response.results_by_transaction) {
            if result.transactional_id.as_str() != queued.transactional_id {
                queued.fail(ResponseError::UnknownServerError);
                continue;
            }
            let mut answered = std::collections::HashMap::new();
            for topic in result.topic_results {
                for p in topic.results_by_partition {
                    let verdict = match ResponseError::try_from_code(p.partition_error_code) {
                        None => Ok(()),
                        Some(e) => Err(e),
                    };
                    answered.insert((topic.name.to_string(), p.partition_index), verdict);
                }
            }
            let verdicts = queued
                .partitions
                .into_iter()
                .map(|p| {
                    let verdict = answered.remove(&p).unwrap_or(Err(ResponseError::UnknownServerError));
                    (p, verdict)
                })
                .collect();
            let _ = queued.reply.send(verdicts);
        }
        Ok(())
    }
}

fn by_topic(partitions: &[(String, i32)]) -> Vec<AddPartitionsToTxnTopic> {
    let mut topics: Vec<AddPartitionsToTxnTopic> = Vec::new();
    for (topic, p) in partitions {
        match topics.iter_mut().find(|t| t.name.as_str() == topic) {
            Some(t) => t.partitions.push(*p),
            None => topics.push(
                AddPartitionsToTxnTopic::default()
                    .with_name(TopicName(StrBytes::from_string(topic.clone())))
                    .with_partitions(vec![*p]),
            ),
        }
    }
    topics
}

/// The coordinator's answer as the producer is to get it on its Produce.
pub fn produce_error(error: ResponseError) -> ResponseError {
    use ResponseError::*;
    match error {
        ConcurrentTransactions
        | NetworkException
        | CoordinatorLoadInProgress
        | CoordinatorNotAvailable
        | NotCoordinator
        | RequestTimedOut
        | UnknownServerError => NotEnoughReplicas,
        // Producers know a fenced epoch on Produce by this name at every version.
        ProducerFenced => InvalidProducerEpoch,
        other => other,
    }
}

impl TransactionManager {
    /// Asks `transactional_id`'s coordinator whether `partitions` are in the open transaction
    /// of `producer_id` at `producer_epoch`, or (`add`, transactions v2) to add them to it. An
    /// add the coordinator refuses because the transaction is busy (another leader's add being
    /// written, or the previous transaction's markers) is asked again every
    /// `add.partitions.to.txn.retry.backoff.ms` for up to `add.partitions.to.txn.retry.backoff.max.ms`,
    /// as Kafka's leaders do, before the producer is told to retry.
    pub async fn verify_for_produce(
        self: &Arc<Self>,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: Vec<(String, i32)>,
        add: bool,
    ) -> Verdicts {
        let backoff = Duration::from_millis(self.config.add_partitions_retry_backoff_ms);
        let deadline =
            tokio::time::Instant::now() + Duration::from_millis(self.config.add_partitions_retry_backoff_max_ms);
        loop {
            let verdicts = self
                .verify_once(transactional_id, producer_id, producer_epoch, partitions.clone(), add)
                .await;
            let busy = verdicts
                .iter()
                .any(|(_, v)| *v == Err(ResponseError::ConcurrentTransactions));
            if !add || !busy || tokio::time::Instant::now() + backoff > deadline {
                return verdicts;
            }
            tokio::time::sleep(backoff).await;
        }
    }

    async fn verify_once(
        self: &Arc<Self>,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: Vec<(String, i32)>,
        add: bool,
    ) -> Verdicts {
        let all = |partitions: Vec<(String, i32)>, error: ResponseError| -> Verdicts {
            partitions.into_iter().map(|p| (p, Err(error))).collect()
        };
        let index = self.partition_for(transactional_id);
        let leader = {
            let image = self.metadata.image();
            image
                .topic(TRANSACTION_STATE_TOPIC)
                .and_then(|t| usize::try_from(index).ok().and_then(|i| t.partitions.get(i)))
                .map(|r| r.leader)
        };
        match leader {
            // No coordinator has any transaction of this id: none can be open.
            None => all(partitions, ResponseError::InvalidTxnState),
            Some(leader) if leader < 0 => all(partitions, ResponseError::CoordinatorNotAvailable),
            Some(leader) if leader == self.node_id && add => {
                match self
                    .add_partitions(transactional_id, producer_id, producer_epoch, &partitions, true)
                    .await
                {
                    Ok(()) => partitions.into_iter().map(|p| (p, Ok(()))).collect(),
                    Err(e) => all(partitions, e),
                }
            }
            Some(leader) if leader == self.node_id => {
                match self.verify_partitions(transactional_id, producer_id, producer_epoch, &partitions) {
                    Ok(results) => results.into_iter().map(|(p, e)| (p, e.map_or(Ok(()), Err))).collect(),
                    Err(e) => all(partitions, e),
                }
            }
            Some(leader) => {
                let (reply, answer) = oneshot::channel();
                let queued = QueuedVerification {
                    transactional_id: transactional_id.to_string(),
                    producer_id,
                    producer_epoch,
                    partitions: partitions.clone(),
                    add,
                    reply,
                };
                self.verifications.send(leader, queued).await;
                answer
                    .await
                    .unwrap_or_else(|_| all(partitions, ResponseError::CoordinatorNotAvailable))
            }
        }
    }
}

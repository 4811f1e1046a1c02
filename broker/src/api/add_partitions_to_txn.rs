//! AddPartitionsToTxn: partitions join the producer's open transaction before it writes to
//! them (v0–v3, from producers), or a partition leader asks the coordinator whether they have
//! (v4+, batched by transaction, `verify_only`; KIP-890 part 1), or adds them for a
//! transactions v2 producer that writes without asking first (v5+, not `verify_only`; KIP-890
//! part 2).
//!
//! As Kafka authorizes it: v0–v3 need WRITE on the transactional id (else every partition is
//! TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and WRITE on each topic (TOPIC_AUTHORIZATION_FAILED);
//! a partition refused or unknown (UNKNOWN_TOPIC_OR_PARTITION) adds nothing, and the others
//! are OPERATION_NOT_ATTEMPTED. v4+ is a broker's request: CLUSTER_ACTION on the cluster, else
//! CLUSTER_AUTHORIZATION_FAILED for the whole request.

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::add_partitions_to_txn_request::{AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction};
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::{AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, TopicName};

use super::end_txn::fenced_for;
use super::{str_bytes, Access, RequestContext, Session};
use crate::broker::Broker;
use crate::metadata::acls::{AclOperation, ResourceType};
use crate::metadata::image::MetadataImage;

const FIRST_BATCHED_VERSION: i16 = 4;
/// From v5 a partition leader adds partitions for a transactions v2 producer (its Produce v12+
/// or TxnOffsetCommit v5+; KIP-890 part 2), which Kafka marks as that client's version.
const TV2_SINCE: i16 = 5;
const PRODUCER_FENCED_SINCE: i16 = 2;

type PartitionResults = Vec<((String, i32), Option<ResponseError>)>;

pub async fn handle(ctx: RequestContext, request: AddPartitionsToTxnRequest) -> AddPartitionsToTxnResponse {
    let version = ctx.version;
    let RequestContext { broker, session, .. } = ctx;
    if version < FIRST_BATCHED_VERSION {
        let transaction = AddPartitionsToTxnTransaction::default()
            .with_transactional_id(request.v3_and_below_transactional_id)
            .with_producer_id(request.v3_and_below_producer_id)
            .with_producer_epoch(request.v3_and_below_producer_epoch)
            .with_topics(request.v3_and_below_topics);
        let results = add(&broker, &session, &transaction, version).await;
        return AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(by_topic(results));
    }
    let allowed = {
        let image = broker.metadata.image();
        session
            .access(&broker.security.authorizer, &image.acls)
            .authorize_cluster(AclOperation::ClusterAction)
    };
    if !allowed {
        return AddPartitionsToTxnResponse::default().with_error_code(ResponseError::ClusterAuthorizationFailed.code());
    }
    let mut results = Vec::with_capacity(request.transactions.len());
    for transaction in &request.transactions {
        let partition_results = if transaction.verify_only {
            verify(&broker, transaction)
        } else {
            add(&broker, &session, transaction, version).await
        };
        results.push(
            AddPartitionsToTxnResult::default()
                .with_transactional_id(transaction.transactional_id.clone())
                .with_topic_results(by_topic(partition_results)),
        );
    }
    AddPartitionsToTxnResponse::default().with_results_by_transaction(results)
}

fn partitions_of(topics: &[AddPartitionsToTxnTopic]) -> Vec<(String, i32)> {
    topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(move |p| (t.name.0.to_string(), *p)))
        .collect()
}

/// Adds the partitions to the transaction, or says per partition why not.
async fn add(
    broker: &Arc<Broker>,
    session: &Session,
    transaction: &AddPartitionsToTxnTransaction,
    version: i16,
) -> PartitionResults {
    let id = transaction.transactional_id.0.as_str();
    let partitions = partitions_of(&transaction.topics);
    let refused = {
        let image = broker.metadata.image();
        let access = session.access(&broker.security.authorizer, &image.acls);
        refusals(access, &image, id, &partitions, version >= FIRST_BATCHED_VERSION)
    };
    if let Some(results) = refused {
        return results;
    }
    let result = broker
        .txn
        .add_partitions(
            id,
            transaction.producer_id.0,
            transaction.producer_epoch,
            &partitions,
            version >= TV2_SINCE,
        )
        .await;
    let error = result.err().map(|e| fenced_for(e, version, PRODUCER_FENCED_SINCE));
    partitions.into_iter().map(|p| (p, error)).collect()
}

/// Why some partitions may not join, if any may not: then nothing is added.
fn refusals(
    access: Access<'_>,
    image: &MetadataImage,
    id: &str,
    partitions: &[(String, i32)],
    from_broker: bool,
) -> Option<PartitionResults> {
    if !from_broker && !access.authorize(AclOperation::Write, ResourceType::TransactionalId, id) {
        return Some(
            partitions
                .iter()
                .map(|p| (p.clone(), Some(ResponseError::TransactionalIdAuthorizationFailed)))
                .collect(),
        );
    }
    let errors: Vec<Option<ResponseError>> = partitions
        .iter()
        .map(|(topic, index)| {
            if !from_broker && !access.authorize(AclOperation::Write, ResourceType::Topic, topic) {
                return Some(ResponseError::TopicAuthorizationFailed);
            }
            let exists = image
                .topic(topic)
                .is_some_and(|t| *index >= 0 && (*index as usize) < t.partitions.len());
            (!exists).then_some(ResponseError::UnknownTopicOrPartition)
        })
        .collect();
    if errors.iter().all(Option::is_none) {
        return None;
    }
    Some(
        partitions
            .iter()
            .zip(errors)
            .map(|(p, e)| (p.clone(), Some(e.unwrap_or(ResponseError::OperationNotAttempted))))
            .collect(),
    )
}

/// KIP-890 verification: per partition, whether it is in the producer's open transaction.
fn verify(broker: &Broker, transaction: &AddPartitionsToTxnTransaction) -> PartitionResults {
    let partitions = partitions_of(&transaction.topics);
    match broker.txn.verify_partitions(
        transaction.transactional_id.0.as_str(),
        transaction.producer_id.0,
        transaction.producer_epoch,
        &partitions,
    ) {
        Ok(results) => results,
        Err(e) => partitions.into_iter().map(|p| (p, Some(e))).collect(),
    }
}

fn by_topic(results: PartitionResults) -> Vec<AddPartitionsToTxnTopicResult> {
    let mut topics: Vec<AddPartitionsToTxnTopicResult> = Vec::new();
    for ((topic, index), error) in results {
        let result = AddPartitionsToTxnPartitionResult::default()
            .with_partition_index(index)
            .with_partition_error_code(error.map_or(0, |e| e.code()));
        match topics.iter_mut().find(|t| t.name.0.as_str() == topic) {
            Some(t) => t.results_by_partition.push(result),
            None => topics.push(
                AddPartitionsToTxnTopicResult::default()
                    .with_name(TopicName(str_bytes(topic)))
                    .with_results_by_partition(vec![result]),
            ),
        }
    }
    topics
}

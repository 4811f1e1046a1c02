//! TxnOffsetCommit (KIP-98): a transactional producer's consumed offsets, appended to the
//! group's `__consumer_offsets` partition as part of its transaction and answered once the
//! ISR has them. They stay invisible to OffsetFetch until the transaction's COMMIT marker
//! reaches that partition (`GroupMetadataManager::complete_transaction`).
//!
//! Needs WRITE on the transactional id (else every partition is answered
//! TRANSACTIONAL_ID_AUTHORIZATION_FAILED), READ on the group (else GROUP_AUTHORIZATION_FAILED)
//! and READ on each topic (else its partitions get TOPIC_AUTHORIZATION_FAILED and the others
//! are committed), checked in that order, as Kafka. From v3 the request names the member and
//! generation it consumed as (KIP-447), which are checked like an OffsetCommit's so a zombie
//! producer of an old generation is fenced.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{TxnOffsetCommitRequest, TxnOffsetCommitResponse};

use super::offset_commit::refusal;
use super::{Access, RequestContext};
use crate::broker::Broker;
use crate::clock::now_ms;
use crate::controller::OFFSETS_TOPIC;
use crate::group::records::OffsetAndMetadata;
use crate::metadata::acls::{AclOperation, ResourceType};
use crate::metadata::image::MetadataImage;
use crate::producer_state::TxnVerification;

/// Per requested partition: an error found before the commit, or none.
type Checked = Vec<Vec<Option<ResponseError>>>;
/// The offsets to commit, by topic and partition.
type ToCommit = Vec<((String, i32), OffsetAndMetadata)>;

/// The first version a transactions v2 producer sends (it sends no AddOffsetsToTxn first).
const TV2_SINCE: i16 = 5;

pub async fn handle(ctx: RequestContext, request: TxnOffsetCommitRequest) -> TxnOffsetCommitResponse {
    let version = ctx.version;
    let RequestContext { broker, session, .. } = ctx;
    let image = broker.metadata.image();
    let access = session.access(&broker.security.authorizer, &image.acls);
    if let Some(error) = request_refusal(access, &request) {
        return respond(&request, vec![], Some(error));
    }
    let max_metadata = broker.config.group.offset_metadata_max_bytes;
    let (checked, to_commit) = check(&image, access, &request, max_metadata, now_ms());
    let outcome = if to_commit.is_empty() {
        Ok(())
    } else {
        match verify(&broker, &request, version).await {
            Ok(verification) => {
                broker
                    .groups
                    .txn_commit_offsets(
                        &request.group_id.0,
                        request.producer_id.0,
                        request.producer_epoch,
                        &request.member_id,
                        request.group_instance_id.as_deref(),
                        request.generation_id,
                        to_commit,
                        verification,
                    )
                    .await
            }
            Err(e) => Err(e),
        }
    };
    if let Err(e) = outcome {
        tracing::debug!(group = %request.group_id.0, producer_id = request.producer_id.0, error = ?e,
            "transactional offset commit refused");
    }
    respond(&request, checked, outcome.err())
}

/// KIP-890 part 1 for offsets: unless the producer's transaction is open on the group's
/// `__consumer_offsets` partition already, its coordinator must confirm the partition is in
/// the transaction (AddOffsetsToTxn put it there), so a late commit cannot leave offsets
/// pending forever (and `require_stable` offset fetches refused with them). The coordinator's
/// retriable refusals reach the client as COORDINATOR_LOAD_IN_PROGRESS: it retries without
/// looking up the group coordinator again, which is not the one that refused.
async fn verify(
    broker: &Broker,
    request: &TxnOffsetCommitRequest,
    version: i16,
) -> Result<TxnVerification, ResponseError> {
    // A transactions v2 producer sends no AddOffsetsToTxn: the group's partition is added here.
    let add = version >= TV2_SINCE && broker.tv2_enabled();
    if !broker.partition_verification() && !add {
        return Ok(TxnVerification::Unchecked);
    }
    let (producer_id, producer_epoch) = (request.producer_id.0, request.producer_epoch);
    let Some((index, guard)) =
        broker
            .groups
            .start_txn_verification(&request.group_id.0, producer_id, producer_epoch, add)?
    else {
        return Ok(TxnVerification::Checked(None));
    };
    let asked = vec![(OFFSETS_TOPIC.to_string(), index)];
    let verdicts = broker
        .txn
        .verify_for_produce(&request.transactional_id.0, producer_id, producer_epoch, asked, add)
        .await;
    match verdicts.into_iter().next().map(|(_, verdict)| verdict) {
        Some(Ok(())) => Ok(TxnVerification::Checked(Some(guard))),
        Some(Err(error)) => Err(match error {
            ResponseError::ConcurrentTransactions
            | ResponseError::NetworkException
            | ResponseError::CoordinatorNotAvailable
            | ResponseError::NotCoordinator
            | ResponseError::CoordinatorLoadInProgress
            | ResponseError::RequestTimedOut
            | ResponseError::UnknownServerError => ResponseError::CoordinatorLoadInProgress,
            ResponseError::ProducerFenced => ResponseError::InvalidProducerEpoch,
            other => other,
        }),
        None => Err(ResponseError::CoordinatorLoadInProgress),
    }
}

/// The error every partition gets when the request itself is not authorized: WRITE on the
/// transactional id first, then READ on the group, as Kafka checks them.
fn request_refusal(access: Access<'_>, request: &TxnOffsetCommitRequest) -> Option<ResponseError> {
    if !access.authorize(
        AclOperation::Write,
        ResourceType::TransactionalId,
        &request.transactional_id.0,
    ) {
        return Some(ResponseError::TransactionalIdAuthorizationFailed);
    }
    if !access.authorize(AclOperation::Read, ResourceType::Group, &request.group_id.0) {
        return Some(ResponseError::GroupAuthorizationFailed);
    }
    None
}

/// Each partition's refusal (no READ on its topic, unknown topic or partition, metadata too
/// large), and the offsets of the others.
fn check(
    image: &MetadataImage,
    access: Access<'_>,
    request: &TxnOffsetCommitRequest,
    max_metadata: usize,
    now: i64,
) -> (Checked, ToCommit) {
    let mut checked = Vec::with_capacity(request.topics.len());
    let mut to_commit = Vec::new();
    for topic in &request.topics {
        let readable = access.authorize(AclOperation::Read, ResourceType::Topic, &topic.name.0);
        let known = image.topic(&topic.name.0);
        let partitions = topic
            .partitions
            .iter()
            .map(|p| {
                let metadata = p.committed_metadata.as_deref().unwrap_or_default();
                let refused = refusal(known, readable, p.partition_index, metadata, max_metadata).err();
                if refused.is_none() {
                    let value = OffsetAndMetadata {
                        offset: p.committed_offset,
                        leader_epoch: p.committed_leader_epoch,
                        metadata: metadata.to_string(),
                        commit_timestamp_ms: now,
                    };
                    to_commit.push(((topic.name.0.to_string(), p.partition_index), value));
                }
                refused
            })
            .collect();
        checked.push(partitions);
    }
    (checked, to_commit)
}

/// The response: each partition's own refusal, else `outcome` (the commit's error or none).
/// `checked` may be empty, then every partition gets `outcome`.
fn respond(
    request: &TxnOffsetCommitRequest,
    checked: Checked,
    outcome: Option<ResponseError>,
) -> TxnOffsetCommitResponse {
    let topics = request
        .topics
        .iter()
        .enumerate()
        .map(|(t, topic)| {
            let partitions = topic
                .partitions
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    let own = checked.get(t).and_then(|c| c.get(i)).copied().flatten();
                    TxnOffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(own.or(outcome).map_or(0, |e| e.code()))
                })
                .collect();
            TxnOffsetCommitResponseTopic::default()
                .with_name(topic.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    TxnOffsetCommitResponse::default().with_topics(topics)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::testing::Acls;
    use crate::metadata::records::MetadataRecord;
    use kafka_protocol::messages::txn_offset_commit_request::{
        TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::{GroupId, TopicName, TransactionalId};
    use uuid::Uuid;

    fn image() -> MetadataImage {
        let mut image = MetadataImage::new("c".into());
        for (n, name) in ["orders", "audit"].into_iter().enumerate() {
            let topic_id = Uuid::from_u128(n as u128 + 1);
            image.apply(&MetadataRecord::Topic {
                name: name.into(),
                topic_id,
            });
            image.apply(&MetadataRecord::Partition {
                topic_id,
                partition: 0,
                replicas: vec![1],
                isr: vec![1],
                leader: 1,
                leader_epoch: 0,
                partition_epoch: 0,
                election: None,
            });
        }
        image
    }

    fn request() -> TxnOffsetCommitRequest {
        let topic = |name: &str, partitions: &[i32]| {
            TxnOffsetCommitRequestTopic::default()
                .with_name(TopicName(crate::api::str_bytes(name)))
                .with_partitions(
                    partitions
                        .iter()
                        .map(|p| {
                            TxnOffsetCommitRequestPartition::default()
                                .with_partition_index(*p)
                                .with_committed_offset(5)
                        })
                        .collect(),
                )
        };
        TxnOffsetCommitRequest::default()
            .with_transactional_id(TransactionalId(crate::api::str_bytes("tx")))
            .with_group_id(GroupId(crate::api::str_bytes("g")))
            .with_topics(vec![topic("orders", &[0, 3]), topic("audit", &[0])])
    }

    fn codes(response: &TxnOffsetCommitResponse) -> Vec<Vec<i16>> {
        response
            .topics
            .iter()
            .map(|t| t.partitions.iter().map(|p| p.error_code).collect())
            .collect()
    }

    #[test]
    fn write_on_the_transactional_id_is_checked_before_read_on_the_group() {
        let request = request();
        let nothing = Acls::none();
        assert_eq!(
            request_refusal(nothing.access(), &request),
            Some(ResponseError::TransactionalIdAuthorizationFailed)
        );
        let producer = Acls::none().allow(ResourceType::TransactionalId, "tx", AclOperation::Write);
        assert_eq!(
            request_refusal(producer.access(), &request),
            Some(ResponseError::GroupAuthorizationFailed)
        );
        let describe_only = Acls::none()
            .allow(ResourceType::TransactionalId, "tx", AclOperation::Describe)
            .allow(ResourceType::Group, "g", AclOperation::Read);
        assert_eq!(
            request_refusal(describe_only.access(), &request),
            Some(ResponseError::TransactionalIdAuthorizationFailed),
            "DESCRIBE is not WRITE"
        );
        let both = producer.allow(ResourceType::Group, "g", AclOperation::Read);
        assert_eq!(request_refusal(both.access(), &request), None);
        assert_eq!(request_refusal(Acls::disabled().access(), &request), None);

        let refused = respond(
            &request,
            vec![],
            Some(ResponseError::TransactionalIdAuthorizationFailed),
        );
        let code = ResponseError::TransactionalIdAuthorizationFailed.code();
        assert_eq!(codes(&refused), vec![vec![code, code], vec![code]]);
    }

    #[test]
    fn partitions_of_unreadable_or_unknown_topics_are_refused_and_the_rest_committed() {
        let request = request();
        let acls = Acls::none()
            .allow(ResourceType::Topic, "orders", AclOperation::Read)
            .allow(ResourceType::Topic, "audit", AclOperation::Describe);
        let (checked, to_commit) = check(&image(), acls.access(), &request, 4096, 0);
        assert_eq!(
            checked,
            vec![
                vec![None, Some(ResponseError::UnknownTopicOrPartition)],
                vec![Some(ResponseError::TopicAuthorizationFailed)]
            ]
        );
        assert_eq!(to_commit.len(), 1);
        assert_eq!(to_commit[0].0, ("orders".to_string(), 0));
        assert_eq!(to_commit[0].1.offset, 5);

        // The commit's own outcome goes to the partitions that reached it.
        let response = respond(&request, checked, Some(ResponseError::IllegalGeneration));
        assert_eq!(
            codes(&response),
            vec![
                vec![
                    ResponseError::IllegalGeneration.code(),
                    ResponseError::UnknownTopicOrPartition.code()
                ],
                vec![ResponseError::TopicAuthorizationFailed.code()]
            ]
        );
    }
}

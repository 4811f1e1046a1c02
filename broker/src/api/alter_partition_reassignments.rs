//! AlterPartitionReassignments (KIP-455; `kafka-reassign-partitions --execute/--cancel`): each
//! named partition is moved to its new replica list, or its move cancelled (a null list),
//! through one metadata command per partition. The controller decides the steps
//! (`controller::reassign_partition`); the request returns once each move has started, as
//! Kafka's does, and ListPartitionReassignments shows the moves still under way. Needs
//! ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED (top level and on every partition).

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::{AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse};

use super::{commit_error, str_bytes, Access, RequestContext};
use crate::broker::Broker;
use crate::metadata::acls::AclOperation;
use crate::metadata::records::MetadataCommand;

pub async fn handle(
    ctx: RequestContext,
    request: AlterPartitionReassignmentsRequest,
) -> AlterPartitionReassignmentsResponse {
    let RequestContext { broker, session, .. } = ctx;
    let image = broker.metadata.image();
    if let Some(refused) = refusal(session.access(&broker.security.authorizer, &image.acls), &request) {
        return refused;
    }
    let mut responses = Vec::with_capacity(request.topics.len());
    for topic in &request.topics {
        let name = topic.name.0.to_string();
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for p in &topic.partitions {
            let target: Option<Vec<i32>> = p.replicas.as_ref().map(|r| r.iter().map(|id| id.0).collect());
            let result = ReassignablePartitionResponse::default().with_partition_index(p.partition_index);
            let refusal = match refuse_replication_factor_change(&broker, &request, &name, p.partition_index, &target) {
                Some(refusal) => Some(refusal),
                None => {
                    let command = MetadataCommand::ReassignPartition {
                        name: name.clone(),
                        partition: p.partition_index,
                        target: target.clone(),
                    };
                    match broker.commit(command).await {
                        Ok(_) => {
                            tracing::info!(topic = %name, partition = p.partition_index, ?target,
                                "partition reassignment requested by an admin client");
                            None
                        }
                        Err(e) => Some(commit_error(&e)),
                    }
                }
            };
            partitions.push(match refusal {
                None => result,
                Some((code, message)) => result
                    .with_error_code(code)
                    .with_error_message(Some(str_bytes(message))),
            });
        }
        responses.push(
            ReassignableTopicResponse::default()
                .with_name(topic.name.clone())
                .with_partitions(partitions),
        );
    }
    AlterPartitionReassignmentsResponse::default()
        .with_allow_replication_factor_change(request.allow_replication_factor_change)
        .with_responses(responses)
}

/// The answer without ALTER on the cluster: the error at the top and on every partition.
fn refusal(
    access: Access<'_>,
    request: &AlterPartitionReassignmentsRequest,
) -> Option<AlterPartitionReassignmentsResponse> {
    if access.authorize_cluster(AclOperation::Alter) {
        return None;
    }
    let code = ResponseError::ClusterAuthorizationFailed.code();
    let message = access.denied_cluster(AclOperation::Alter);
    let responses = request
        .topics
        .iter()
        .map(|topic| {
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    ReassignablePartitionResponse::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code)
                        .with_error_message(Some(str_bytes(message.clone())))
                })
                .collect();
            ReassignableTopicResponse::default()
                .with_name(topic.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    Some(
        AlterPartitionReassignmentsResponse::default()
            .with_error_code(code)
            .with_error_message(Some(str_bytes(message)))
            .with_allow_replication_factor_change(request.allow_replication_factor_change)
            .with_responses(responses),
    )
}

/// KIP-860: a v1 client that does not allow it may not change a partition's replica count.
fn refuse_replication_factor_change(
    broker: &Broker,
    request: &AlterPartitionReassignmentsRequest,
    name: &str,
    partition: i32,
    target: &Option<Vec<i32>>,
) -> Option<(i16, String)> {
    let target = target.as_ref()?;
    if request.allow_replication_factor_change {
        return None;
    }
    let image = broker.metadata.image();
    let current = image
        .topic(name)
        .and_then(|t| usize::try_from(partition).ok().and_then(|i| t.partitions.get(i)))?
        .original_replicas();
    (current.len() != target.len()).then(|| {
        (
            ResponseError::InvalidReplicationFactor.code(),
            format!(
                "{name}-{partition} has {} replicas and the target names {}; allow replication factor changes to resize it",
                current.len(),
                target.len()
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::testing::Acls;
    use kafka_protocol::messages::alter_partition_reassignments_request::{ReassignablePartition, ReassignableTopic};
    use kafka_protocol::messages::TopicName;

    #[test]
    fn reassigning_partitions_needs_alter_on_the_cluster() {
        let request = AlterPartitionReassignmentsRequest::default().with_topics(vec![ReassignableTopic::default()
            .with_name(TopicName(str_bytes("orders")))
            .with_partitions(vec![ReassignablePartition::default().with_partition_index(3)])]);
        let refused = refusal(Acls::none().allow_cluster(AclOperation::Describe).access(), &request).expect("refused");
        let code = ResponseError::ClusterAuthorizationFailed.code();
        assert_eq!(refused.error_code, code);
        assert_eq!(refused.responses[0].partitions[0].error_code, code);
        assert!(refusal(Acls::none().allow_cluster(AclOperation::Alter).access(), &request).is_none());
    }
}

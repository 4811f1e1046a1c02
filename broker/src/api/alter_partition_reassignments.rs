//! AlterPartitionReassignments (KIP-455; `kafka-reassign-partitions --execute/--cancel`): each
//! named partition is moved to its new replica list, or its move cancelled (a null list),
//! through one metadata command per partition. The controller decides the steps
//! (`controller::reassign_partition`); the request returns once each move has started, as
//! Kafka's does, and ListPartitionReassignments shows the moves still under way.

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::{AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse};

use super::{commit_error, str_bytes};
use crate::broker::Broker;
use crate::metadata::records::MetadataCommand;

pub async fn handle(
    broker: Arc<Broker>,
    request: AlterPartitionReassignmentsRequest,
) -> AlterPartitionReassignmentsResponse {
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

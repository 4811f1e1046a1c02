//! DeleteRecords (`kafka-delete-records`, `Admin.deleteRecords`): each partition's leader moves
//! its log start offset to the requested offset (-1: the high watermark; never past it), and
//! the answer waits until every in-sync replica has copied the new start from its fetch
//! responses (the low watermark), as Kafka's delayed delete-records does. Reads below the new
//! start get OFFSET_OUT_OF_RANGE. Topics whose `cleanup.policy` lacks `delete` refuse it with
//! POLICY_VIOLATION, and internal topics (`__consumer_offsets`) with INVALID_TOPIC_EXCEPTION,
//! as Kafka does. Each topic needs DELETE (else its partitions get TOPIC_AUTHORIZATION_FAILED
//! and nothing moves).

use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::delete_records_response::{DeleteRecordsPartitionResult, DeleteRecordsTopicResult};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};

use super::{Access, RequestContext};
use crate::broker::Broker;
use crate::controller;
use crate::metadata::acls::{AclOperation, ResourceType};
use crate::metadata::image::TopicImage;
use crate::partition::AppendError;
use crate::purgatory::DelayedDeleteRecords;
use crate::topic_config;

pub async fn handle(ctx: RequestContext, request: DeleteRecordsRequest) -> DeleteRecordsResponse {
    let RequestContext { broker, session, .. } = ctx;
    let image = broker.metadata.image();
    let access = session.access(&broker.security.authorizer, &image.acls);
    let deadline = tokio::time::Instant::now() + Duration::from_millis(request.timeout_ms.max(0) as u64);
    // Every partition's start moves first; then the waits share one deadline.
    let mut pending = Vec::new();
    for topic in request.topics {
        let refusal = delete_refusal(access, &topic.name.0);
        let started: Vec<(i32, Result<DelayedDeleteRecords, AppendError>)> = topic
            .partitions
            .iter()
            .map(|p| {
                let result = match (image.topic(topic.name.0.as_str()), &refusal) {
                    (_, Some(message)) => Err((ResponseError::TopicAuthorizationFailed, message.clone())),
                    (None, None) => Err((ResponseError::UnknownTopicOrPartition, "unknown topic".to_string())),
                    (Some(image_topic), None) => start(&broker, image_topic, p.partition_index, p.offset),
                };
                (p.partition_index, result)
            })
            .collect();
        pending.push((topic.name, started));
    }
    let mut topics = Vec::with_capacity(pending.len());
    for (name, started) in pending {
        let mut partitions = Vec::with_capacity(started.len());
        for (index, result) in started {
            let outcome = match result {
                Ok(wait) => wait.wait(deadline).await,
                Err(e) => Err(e),
            };
            let (low_watermark, error) = match outcome {
                Ok(low) => (low, 0),
                Err((error, message)) => {
                    tracing::info!(topic = %name.0, partition = index, ?error, %message, "DeleteRecords refused");
                    (-1, error.code())
                }
            };
            partitions.push(
                DeleteRecordsPartitionResult::default()
                    .with_partition_index(index)
                    .with_low_watermark(low_watermark)
                    .with_error_code(error),
            );
        }
        topics.push(
            DeleteRecordsTopicResult::default()
                .with_name(name)
                .with_partitions(partitions),
        );
    }
    DeleteRecordsResponse::default().with_topics(topics)
}

/// Moves the log start of partition `index` on this leader and returns the wait for the ISR.
fn start(broker: &Broker, topic: &TopicImage, index: i32, offset: i64) -> Result<DelayedDeleteRecords, AppendError> {
    // Kafka's ReplicaManager refuses this before looking at the partition.
    if controller::is_internal_topic(&topic.name) {
        return Err((
            ResponseError::InvalidTopicException,
            format!("Cannot delete records of internal topic {}", topic.name),
        ));
    }
    let (partition, _) = broker.replicas.leader_partition_or_explain(topic, index)?;
    let policy = topic_config::effective_value(
        "cleanup.policy",
        &topic.configs,
        &broker.topic_defaults(&broker.metadata.image()),
    );
    if !topic_config::cleanup_policy_includes(&policy, "delete") {
        return Err((
            ResponseError::PolicyViolation,
            format!(
                "records of {} cannot be deleted: its cleanup.policy is {policy}",
                topic.name
            ),
        ));
    }
    let leader_epoch = partition.leader_epoch();
    let log_start_offset = partition.delete_records(offset)?;
    Ok(DelayedDeleteRecords {
        partition,
        log_start_offset,
        leader_epoch,
    })
}

/// Why the principal may not delete records of topic `name`, if it may not.
fn delete_refusal(access: Access<'_>, name: &str) -> Option<String> {
    let allowed = access.authorize(AclOperation::Delete, ResourceType::Topic, name);
    (!allowed).then(|| access.denied(AclOperation::Delete, ResourceType::Topic, name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::testing::Acls;

    #[test]
    fn deleting_records_needs_delete_on_the_topic() {
        let acls = Acls::none()
            .allow(ResourceType::Topic, "orders", AclOperation::Delete)
            .allow(ResourceType::Topic, "audit", AclOperation::Write);
        assert_eq!(delete_refusal(acls.access(), "orders"), None);
        assert!(delete_refusal(acls.access(), "audit").is_some(), "WRITE is not DELETE");
    }
}

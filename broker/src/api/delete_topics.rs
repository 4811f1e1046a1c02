//! DeleteTopics: by name (v0–5) or by name or id (v6); one result per requested topic.
//! Internal topics are not deleted (INVALID_TOPIC_EXCEPTION).

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{DeleteTopicsRequest, DeleteTopicsResponse, TopicName};
use uuid::Uuid;

use super::{commit_error, str_bytes};
use crate::broker::Broker;
use crate::controller::{self, Outcome};
use crate::metadata::records::MetadataCommand;

pub async fn handle(broker: Arc<Broker>, request: DeleteTopicsRequest, version: i16) -> DeleteTopicsResponse {
    let wanted: Vec<(Option<TopicName>, Uuid)> = if version >= 6 {
        request.topics.into_iter().map(|t| (t.name, t.topic_id)).collect()
    } else {
        request
            .topic_names
            .into_iter()
            .map(|n| (Some(n), Uuid::nil()))
            .collect()
    };
    let mut responses = Vec::with_capacity(wanted.len());
    for (name, topic_id) in wanted {
        let result = DeletableTopicResult::default()
            .with_name(name.clone())
            .with_topic_id(topic_id);
        if !broker.config.delete_topic_enable {
            let message = "delete.topic.enable is false on this broker".to_string();
            responses.push(failed(result, ResponseError::TopicDeletionDisabled.code(), message));
            continue;
        }
        if let Some(internal) = internal_topic(&broker, name.as_ref(), &topic_id) {
            let message = format!("topic {internal} is internal: only the broker manages it, and it cannot be deleted");
            responses.push(failed(result, ResponseError::InvalidTopicException.code(), message));
            continue;
        }
        let command = MetadataCommand::DeleteTopic {
            name: name.as_ref().map(|n| n.0.to_string()),
            topic_id,
        };
        responses.push(match broker.commit(command).await {
            Ok((_, Outcome::TopicDeleted { name, topic_id })) => {
                tracing::info!(topic = %name, "deleted topic");
                result
                    .with_name(Some(TopicName(str_bytes(name))))
                    .with_topic_id(topic_id)
            }
            Ok(_) => result,
            Err(e) => {
                let (code, message) = commit_error(&e);
                failed(result, code, message)
            }
        });
    }
    DeleteTopicsResponse::default().with_responses(responses)
}

/// The internal topic (Kafka's `Topic.isInternal`) the request names, by name or by id. Kafka's
/// controller would delete it (only its `kafka-topics` tool refuses); deleting
/// `__consumer_offsets` loses every group's committed offsets, so Sluice refuses it, with
/// INVALID_TOPIC_EXCEPTION as Kafka refuses writes to and DeleteRecords on these topics.
fn internal_topic(broker: &Broker, name: Option<&TopicName>, topic_id: &Uuid) -> Option<String> {
    let name = match name {
        Some(n) => n.0.to_string(),
        None => broker.metadata.image().topic_by_id(topic_id)?.name.clone(),
    };
    controller::is_internal_topic(&name).then_some(name)
}

fn failed(result: DeletableTopicResult, code: i16, message: String) -> DeletableTopicResult {
    result
        .with_error_code(code)
        .with_error_message(Some(str_bytes(message)))
}

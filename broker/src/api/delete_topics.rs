//! DeleteTopics: by name (v0–5) or by name or id (v6); one result per requested topic.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{DeleteTopicsRequest, DeleteTopicsResponse, TopicName};
use uuid::Uuid;

use super::{commit_error, str_bytes};
use crate::broker::Broker;
use crate::controller::{self, ApiError};

pub fn handle(broker: &Broker, request: DeleteTopicsRequest, version: i16) -> DeleteTopicsResponse {
    let wanted: Vec<(Option<TopicName>, Uuid)> = if version >= 6 {
        request.topics.into_iter().map(|t| (t.name, t.topic_id)).collect()
    } else {
        request.topic_names.into_iter().map(|n| (Some(n), Uuid::nil())).collect()
    };
    let responses = wanted
        .into_iter()
        .map(|(name, topic_id)| {
            let result = DeletableTopicResult::default().with_name(name.clone()).with_topic_id(topic_id);
            if !broker.config.delete_topic_enable {
                return failed(result, ResponseError::TopicDeletionDisabled.code(), "delete.topic.enable is false on this broker".into());
            }
            let outcome = broker.commit(|image| {
                let topic = match &name {
                    Some(n) => image.topic(&n.0),
                    None => image.topic_by_id(&topic_id),
                };
                let topic = topic.ok_or_else(|| match &name {
                    Some(n) => ApiError::new(ResponseError::UnknownTopicOrPartition, format!("topic {:?} does not exist", n.0.as_str())),
                    None => ApiError::new(ResponseError::UnknownTopicId, format!("no topic has id {topic_id}")),
                })?;
                Ok((controller::delete_topic(topic), (topic.name.clone(), topic.topic_id)))
            });
            match outcome {
                Ok((_, (deleted_name, deleted_id))) => {
                    tracing::info!(topic = %deleted_name, "deleted topic");
                    result.with_name(Some(TopicName(str_bytes(deleted_name)))).with_topic_id(deleted_id)
                }
                Err(e) => {
                    let (code, message) = commit_error(&e);
                    failed(result, code, message)
                }
            }
        })
        .collect();
    DeleteTopicsResponse::default().with_responses(responses)
}

fn failed(result: DeletableTopicResult, code: i16, message: String) -> DeletableTopicResult {
    result.with_error_code(code).with_error_message(Some(str_bytes(message)))
}

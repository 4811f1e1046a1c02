//! DeleteTopics: by name (v0–5) or by name or id (v6); one result per requested topic.
//! Internal topics are not deleted (INVALID_TOPIC_EXCEPTION).
//!
//! Authorized as Kafka's controller does: DELETE on the cluster allows every topic; else a
//! topic needs DESCRIBE and DELETE, each refused with TOPIC_AUTHORIZATION_FAILED. A topic
//! named without DESCRIBE is refused whether it exists or not; one named by id is answered
//! without its name unless the principal may describe it.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{DeleteTopicsRequest, DeleteTopicsResponse, TopicName};
use uuid::Uuid;

use super::{commit_error, str_bytes, Access, RequestContext};
use crate::broker::Broker;
use crate::controller::{self, Outcome};
use crate::metadata::acls::{AclOperation, ResourceType};
use crate::metadata::image::MetadataImage;
use crate::metadata::records::MetadataCommand;

pub async fn handle(ctx: RequestContext, request: DeleteTopicsRequest) -> DeleteTopicsResponse {
    let version = ctx.version;
    let RequestContext { broker, session, .. } = ctx;
    let image = broker.metadata.image();
    let access = session.access(&broker.security.authorizer, &image.acls);
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
        let as_named = name.as_ref().map(|n| n.0.as_str());
        if let Some(refusal) = deletion_refusal(access, &image, as_named, &topic_id) {
            let shown = refusal.shown_name.map(|n| TopicName(str_bytes(n)));
            let code = ResponseError::TopicAuthorizationFailed.code();
            responses.push(failed(result.with_name(shown), code, refusal.message));
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

/// A topic the principal may not delete: the name its answer may show, and why.
#[derive(Debug, PartialEq)]
struct Refusal {
    shown_name: Option<String>,
    message: String,
}

/// Why the principal may not delete the topic named `name` or (`None`) `topic_id`, if it
/// may not. An unknown id is left to the deletion, which answers UNKNOWN_TOPIC_ID.
fn deletion_refusal(access: Access<'_>, image: &MetadataImage, name: Option<&str>, topic_id: &Uuid) -> Option<Refusal> {
    if access.check_cluster(AclOperation::Delete) {
        return None;
    }
    let may = |operation, name: &str| access.authorize(operation, ResourceType::Topic, name);
    let refusal = |shown_name: Option<&str>, operation, name: &str| Refusal {
        shown_name: shown_name.map(str::to_string),
        message: access.denied(operation, ResourceType::Topic, name),
    };
    match name {
        Some(name) if !may(AclOperation::Describe, name) => Some(refusal(Some(name), AclOperation::Describe, name)),
        // A topic it may describe but that does not exist is answered UNKNOWN_TOPIC_OR_PARTITION.
        Some(name) if image.topic(name).is_some() && !may(AclOperation::Delete, name) => {
            Some(refusal(Some(name), AclOperation::Delete, name))
        }
        Some(_) => None,
        None => {
            let name = image.topic_by_id(topic_id)?.name.as_str();
            if may(AclOperation::Delete, name) {
                return None;
            }
            let shown = may(AclOperation::Describe, name).then_some(name);
            Some(refusal(shown, AclOperation::Delete, name))
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::testing::Acls;
    use crate::metadata::records::MetadataRecord;

    fn image() -> MetadataImage {
        let mut image = MetadataImage::new("c".into());
        for (n, name) in ["orders", "audit"].into_iter().enumerate() {
            image.apply(&MetadataRecord::Topic {
                name: name.into(),
                topic_id: Uuid::from_u128(n as u128 + 1),
            });
        }
        image
    }

    #[test]
    fn deleting_a_named_topic_needs_describe_then_delete() {
        let image = image();
        let nil = Uuid::nil();
        let refused = |acls: &Acls, name| deletion_refusal(acls.access(), &image, Some(name), &nil);
        let none = Acls::none();
        assert!(refused(&none, "orders").is_some_and(|r| r.message.contains("DESCRIBE")));
        assert!(
            refused(&none, "missing").is_some(),
            "existence is not disclosed without DESCRIBE"
        );
        let describers = Acls::none().allow(ResourceType::Topic, "orders", AclOperation::Describe);
        assert!(refused(&describers, "orders").is_some_and(|r| r.message.contains("DELETE")));
        let deleters = Acls::none().allow(ResourceType::Topic, "orders", AclOperation::Delete);
        assert_eq!(refused(&deleters, "orders"), None, "DELETE implies DESCRIBE");
        let cluster = Acls::none().allow_cluster(AclOperation::Delete);
        assert_eq!(refused(&cluster, "audit"), None);
    }

    #[test]
    fn a_topic_named_by_id_is_refused_without_its_name_unless_describable() {
        let image = image();
        let orders = Uuid::from_u128(1);
        let none = Acls::none();
        let refusal = deletion_refusal(none.access(), &image, None, &orders).expect("no DELETE");
        assert_eq!(refusal.shown_name, None);
        let describers = Acls::none().allow(ResourceType::Topic, "orders", AclOperation::Describe);
        let refusal = deletion_refusal(describers.access(), &image, None, &orders).expect("no DELETE");
        assert_eq!(refusal.shown_name.as_deref(), Some("orders"));
        assert_eq!(
            deletion_refusal(none.access(), &image, None, &Uuid::from_u128(9)),
            None,
            "unknown id"
        );
    }
}

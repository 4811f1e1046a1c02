//! CreatePartitions: grow topics; one result per requested topic. Each topic needs ALTER
//! (else TOPIC_AUTHORIZATION_FAILED), as Kafka.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::{CreatePartitionsRequest, CreatePartitionsResponse};

use super::{commit_error, str_bytes, Access, RequestContext};
use crate::controller;
use crate::metadata::acls::{AclOperation, ResourceType};
use crate::metadata::records::MetadataCommand;
use crate::metadata::CommitError;

pub async fn handle(ctx: RequestContext, request: CreatePartitionsRequest) -> CreatePartitionsResponse {
    let RequestContext { broker, session, .. } = ctx;
    let image = broker.metadata.image();
    let access = session.access(&broker.security.authorizer, &image.acls);
    let mut results = Vec::with_capacity(request.topics.len());
    for topic in &request.topics {
        let name = topic.name.0.to_string();
        if let Some(message) = alter_refusal(access, &name) {
            results.push(
                CreatePartitionsTopicResult::default()
                    .with_name(topic.name.clone())
                    .with_error_code(ResponseError::TopicAuthorizationFailed.code())
                    .with_error_message(Some(str_bytes(message))),
            );
            continue;
        }
        let assignments: Option<Vec<Vec<i32>>> = topic
            .assignments
            .as_ref()
            .map(|a| a.iter().map(|x| x.broker_ids.iter().map(|b| b.0).collect()).collect());
        let result = CreatePartitionsTopicResult::default().with_name(topic.name.clone());
        let outcome = if request.validate_only {
            controller::create_partitions(&broker.metadata.image(), &name, topic.count, assignments.as_deref())
                .map(|_| ())
                .map_err(CommitError::Refused)
        } else {
            let command = MetadataCommand::CreatePartitions {
                name: name.clone(),
                count: topic.count,
                assignments,
            };
            broker.commit(command).await.map(|_| ())
        };
        results.push(match outcome {
            Ok(()) => {
                if !request.validate_only {
                    tracing::info!(topic = %name, partitions = topic.count, "added partitions");
                }
                result
            }
            Err(e) => {
                let (code, message) = commit_error(&e);
                result
                    .with_error_code(code)
                    .with_error_message(Some(str_bytes(message)))
            }
        });
    }
    CreatePartitionsResponse::default().with_results(results)
}

/// Why the principal may not add partitions to topic `name`, if it may not.
fn alter_refusal(access: Access<'_>, name: &str) -> Option<String> {
    let allowed = access.authorize(AclOperation::Alter, ResourceType::Topic, name);
    (!allowed).then(|| access.denied(AclOperation::Alter, ResourceType::Topic, name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::testing::Acls;

    #[test]
    fn adding_partitions_needs_alter_on_the_topic() {
        let acls = Acls::none()
            .allow(ResourceType::Topic, "orders", AclOperation::Alter)
            .allow(ResourceType::Topic, "audit", AclOperation::AlterConfigs);
        assert_eq!(alter_refusal(acls.access(), "orders"), None);
        assert!(
            alter_refusal(acls.access(), "audit").is_some(),
            "ALTER_CONFIGS is not ALTER"
        );
    }
}

//! AlterConfigs (the legacy API 33, which kafkajs, kafka-python and rust-rdkafka send): the
//! request carries a topic's (or a broker's dynamic) whole config set, so every override it
//! leaves out is removed.
//! It is turned into IncrementalAlterConfigs' SET and DELETE operations and committed through
//! the same metadata command, so both APIs validate and apply configs the same way.
//! Each resource needs ALTER_CONFIGS on its topic or on the cluster (`config_refusal`).

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_configs_request::AlterConfigsResource;
use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{AlterConfigsRequest, AlterConfigsResponse};

use super::describe_configs::{alter_if_authorized, RESOURCE_BROKER, RESOURCE_TOPIC};
use super::incremental_alter_configs::{alter_broker_configs, broker_resource_id};
use super::{commit_error, str_bytes, Session};
use crate::broker::Broker;
use crate::controller;
use crate::metadata::records::MetadataCommand;
use crate::metadata::CommitError;

pub async fn handle(broker: Arc<Broker>, session: Session, request: AlterConfigsRequest) -> AlterConfigsResponse {
    let image = broker.metadata.image();
    let access = session.access(&broker.security.authorizer, &image.acls);
    let mut responses = Vec::with_capacity(request.resources.len());
    for resource in &request.resources {
        let result = AlterConfigsResourceResponse::default()
            .with_resource_type(resource.resource_type)
            .with_resource_name(resource.resource_name.clone());
        let altered = alter_if_authorized(
            access,
            resource.resource_type,
            &resource.resource_name,
            alter(&broker, resource, request.validate_only),
        )
        .await;
        responses.push(match altered {
            Ok(()) => result,
            Err((code, message)) => result
                .with_error_code(code)
                .with_error_message(Some(str_bytes(message))),
        });
    }
    AlterConfigsResponse::default().with_responses(responses)
}

async fn alter(broker: &Broker, resource: &AlterConfigsResource, validate_only: bool) -> Result<(), (i16, String)> {
    let invalid = |message: String| (ResponseError::InvalidRequest.code(), message);
    let given: Vec<(String, Option<String>)> = resource
        .configs
        .iter()
        .map(|c| (c.name.to_string(), c.value.as_ref().map(|v| v.to_string())))
        .collect();
    let image = broker.metadata.image();
    match resource.resource_type {
        RESOURCE_TOPIC => {}
        RESOURCE_BROKER => {
            let broker_id = broker_resource_id(&resource.resource_name)?;
            let ops = controller::replace_broker_configs_ops(&image, broker_id, &given).map_err(invalid)?;
            return alter_broker_configs(broker, broker_id, ops, validate_only).await;
        }
        other => return Err(invalid(format!("resource type {other} cannot be altered"))),
    }
    let name = resource.resource_name.to_string();
    let ops = controller::replace_topic_configs_ops(&image, &name, &given).map_err(invalid)?;
    let outcome = if validate_only {
        controller::alter_topic_configs(&image, &name, &ops, &Default::default())
            .map(|_| ())
            .map_err(CommitError::Refused)
    } else {
        broker
            .commit(MetadataCommand::AlterTopicConfigs {
                name,
                ops,
                list_bases: Default::default(),
            })
            .await
            .map(|_| ())
    };
    outcome.map_err(|e| commit_error(&e))
}

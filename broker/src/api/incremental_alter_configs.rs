//! IncrementalAlterConfigs: SET, DELETE, APPEND and SUBTRACT on topic configs; the change is
//! committed through the metadata quorum and the topic's logs pick it up at once.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::incremental_alter_configs_request::AlterConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse};
use kafka_protocol::protocol::StrBytes;

use super::describe_configs::{RESOURCE_BROKER, RESOURCE_TOPIC};
use super::{commit_error, str_bytes};
use crate::broker::Broker;
use crate::controller;
use crate::metadata::records::AlterOp;
use crate::metadata::records::MetadataCommand;
use crate::metadata::CommitError;
use crate::topic_config;

pub async fn handle(broker: Arc<Broker>, request: IncrementalAlterConfigsRequest) -> IncrementalAlterConfigsResponse {
    let mut responses = Vec::with_capacity(request.resources.len());
    for resource in &request.resources {
        let result = AlterConfigsResourceResponse::default()
            .with_resource_type(resource.resource_type)
            .with_resource_name(resource.resource_name.clone());
        responses.push(match alter(&broker, resource, request.validate_only).await {
            Ok(()) => result,
            Err((code, message)) => result
                .with_error_code(code)
                .with_error_message(Some(str_bytes(message))),
        });
    }
    IncrementalAlterConfigsResponse::default().with_responses(responses)
}

async fn alter(broker: &Broker, resource: &AlterConfigsResource, validate_only: bool) -> Result<(), (i16, String)> {
    let invalid = |message: String| (ResponseError::InvalidRequest.code(), message);
    let mut ops = Vec::with_capacity(resource.configs.len());
    for config in &resource.configs {
        let op = AlterOp::from_code(config.config_operation)
            .ok_or_else(|| invalid(format!("unknown config operation {}", config.config_operation)))?;
        ops.push((
            config.name.to_string(),
            op,
            config.value.as_ref().map(|v| v.to_string()),
        ));
    }
    match resource.resource_type {
        RESOURCE_TOPIC => {}
        RESOURCE_BROKER => return delete_broker_configs(broker, &resource.resource_name, &ops),
        other => return Err(invalid(format!("resource type {other} cannot be altered"))),
    }
    let name = resource.resource_name.to_string();
    // APPEND/SUBTRACT start from this broker's effective value when the topic has no override.
    let list_bases: BTreeMap<String, String> = ops
        .iter()
        .filter(|(_, op, _)| matches!(op, AlterOp::Append | AlterOp::Subtract))
        .map(|(key, _, _)| {
            (
                key.clone(),
                topic_config::effective_value(key, &Default::default(), &broker.config.overrides),
            )
        })
        .collect();
    let outcome = if validate_only {
        controller::alter_topic_configs(&broker.metadata.image(), &name, &ops, &list_bases)
            .map(|_| ())
            .map_err(CommitError::Refused)
    } else {
        broker
            .commit(MetadataCommand::AlterTopicConfigs { name, ops, list_bases })
            .await
            .map(|_| ())
    };
    outcome.map_err(|e| commit_error(&e))
}

/// Broker configs are static (set at start with `--set`), so no broker has a dynamic value to
/// remove: DELETE of one succeeds without a change, as Kafka answers a DELETE of a config that
/// has no dynamic value (`kafka-reassign-partitions --verify` clears throttle rates this way).
/// SET, APPEND and SUBTRACT would need dynamic broker configs and are refused.
fn delete_broker_configs(
    broker: &Broker,
    name: &StrBytes,
    ops: &[(String, AlterOp, Option<String>)],
) -> Result<(), (i16, String)> {
    let invalid = |message: String| (ResponseError::InvalidRequest.code(), message);
    if !name.is_empty() {
        let id: i32 = name
            .parse()
            .map_err(|_| invalid(format!("broker resource name {name:?} is not a broker id; use an id or \"\"")))?;
        if !broker.metadata.image().brokers.contains_key(&id) {
            return Err(invalid(format!("broker {id} is not registered in this cluster")));
        }
    }
    if let Some((key, _, _)) = ops.iter().find(|(_, op, _)| *op != AlterOp::Delete) {
        return Err(invalid(format!(
            "broker configs are static in this version, so {key} cannot be set while the broker runs; \
             restart the broker with --set {key}=VALUE"
        )));
    }
    Ok(())
}

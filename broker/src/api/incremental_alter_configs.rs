//! IncrementalAlterConfigs: SET, DELETE, APPEND and SUBTRACT on topic configs, SET and DELETE on
//! dynamic broker configs; the change is committed through the metadata quorum and the logs
//! pick it up at once. Each resource needs ALTER_CONFIGS on its topic or on the cluster
//! (`config_refusal`).

use std::collections::BTreeMap;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::incremental_alter_configs_request::AlterConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse};
use kafka_protocol::protocol::StrBytes;

use super::describe_configs::{alter_if_authorized, RESOURCE_BROKER, RESOURCE_TOPIC};
use super::{commit_error, str_bytes, RequestContext, Session};
use crate::broker::Broker;
use crate::controller;
use crate::metadata::records::MetadataCommand;
use crate::metadata::records::{AlterOp, BROKER_DEFAULT};
use crate::metadata::CommitError;
use crate::topic_config;

pub async fn handle(ctx: RequestContext, request: IncrementalAlterConfigsRequest) -> IncrementalAlterConfigsResponse {
    let RequestContext { broker, session, .. } = ctx;
    let responses = answer_each!(broker, session, request, alter, AlterConfigsResourceResponse);
    IncrementalAlterConfigsResponse::default().with_responses(responses)
}

/// The per-resource responses of an AlterConfigs or IncrementalAlterConfigs `request`: each
/// resource through [`alter_each`] with the API's own `alter`, answered in a `$response` (the
/// two APIs' response types differ in name only).
macro_rules! answer_each {
    ($broker:expr, $session:expr, $request:expr, $alter:expr, $response:ty) => {{
        let validate_only = $request.validate_only;
        let results = alter_each(
            &$broker,
            &$session,
            &$request.resources,
            |r| (r.resource_type, &r.resource_name),
            |r| $alter(&$broker, r, validate_only),
        )
        .await;
        $request
            .resources
            .iter()
            .zip(results)
            .map(|(resource, result)| {
                let response = <$response>::default()
                    .with_resource_type(resource.resource_type)
                    .with_resource_name(resource.resource_name.clone());
                match result {
                    Ok(()) => response,
                    Err((code, message)) => response
                        .with_error_code(code)
                        .with_error_message(Some(str_bytes(message))),
                }
            })
            .collect()
    }};
}
pub(super) use answer_each;

/// Each resource of an AlterConfigs or IncrementalAlterConfigs request, in order: refused
/// without ALTER_CONFIGS on its topic or the cluster (`config_refusal`), else altered by
/// `alter`, one commit per resource as Kafka does. `Ok`, or the (error code, message) the
/// resource is answered with.
pub(super) async fn alter_each<'r, R, F, Fut>(
    broker: &Broker,
    session: &Session,
    resources: &'r [R],
    id: impl Fn(&R) -> (i8, &StrBytes),
    alter: F,
) -> Vec<Result<(), (i16, String)>>
where
    F: Fn(&'r R) -> Fut,
    Fut: std::future::Future<Output = Result<(), (i16, String)>>,
{
    let image = broker.metadata.image();
    let access = session.access(&broker.security.authorizer, &image.acls);
    let mut results = Vec::with_capacity(resources.len());
    for resource in resources {
        let (resource_type, name) = id(resource);
        results.push(alter_if_authorized(access, resource_type, name, alter(resource)).await);
    }
    results
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
        RESOURCE_BROKER => {
            let broker_id = broker_resource_id(&resource.resource_name)?;
            return alter_broker_configs(broker, broker_id, ops, validate_only).await;
        }
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
                topic_config::effective_value(
                    key,
                    &Default::default(),
                    &broker.topic_defaults(&broker.metadata.image()),
                ),
            )
        })
        .collect();
    alter_topic_configs(broker, name, ops, list_bases, validate_only).await
}

/// A topic's configs: checked against the image (`validate_only`) or committed through the
/// quorum, after which every replica's log picks them up. Also AlterConfigs' path for a topic.
pub(super) async fn alter_topic_configs(
    broker: &Broker,
    name: String,
    ops: Vec<(String, AlterOp, Option<String>)>,
    list_bases: BTreeMap<String, String>,
    validate_only: bool,
) -> Result<(), (i16, String)> {
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

/// A broker resource names one broker by id, or (`""`) the cluster-wide dynamic defaults.
pub fn broker_resource_id(name: &StrBytes) -> Result<i32, (i16, String)> {
    if name.is_empty() {
        return Ok(BROKER_DEFAULT);
    }
    name.parse::<i32>().ok().filter(|id| *id >= 0).ok_or_else(|| {
        (
            ResponseError::InvalidRequest.code(),
            format!(
                "broker resource name {name:?} is not a broker id; use an id, or \"\" for the cluster-wide default"
            ),
        )
    })
}

/// Dynamic broker configs (Kafka's `kafka-configs --entity-type brokers`) of `broker_id` (or
/// [`BROKER_DEFAULT`]): committed through the quorum; every broker's topic defaults and
/// replication throttles follow at once. Also AlterConfigs' path for a broker resource.
pub(super) async fn alter_broker_configs(
    broker: &Broker,
    broker_id: i32,
    ops: Vec<(String, AlterOp, Option<String>)>,
    validate_only: bool,
) -> Result<(), (i16, String)> {
    let outcome = if validate_only {
        controller::alter_broker_configs(&broker.metadata.image(), broker_id, &ops)
            .map(|_| ())
            .map_err(CommitError::Refused)
    } else {
        broker
            .commit(MetadataCommand::AlterBrokerConfigs { broker_id, ops })
            .await
            .map(|_| ())
    };
    outcome.map_err(|e| commit_error(&e))
}

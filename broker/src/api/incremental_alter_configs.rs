//! IncrementalAlterConfigs: SET, DELETE, APPEND and SUBTRACT on topic configs, SET and DELETE on
//! dynamic broker configs and on group configs (KIP-848/KIP-932, resource type 32); the change
//! is committed through the metadata quorum and the logs pick it up at once. Each resource
//! needs ALTER_CONFIGS on its topic, on the cluster, or on its group (`config_refusal`).

use std::collections::BTreeMap;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::incremental_alter_configs_request::AlterConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse};
use kafka_protocol::protocol::StrBytes;

use super::describe_configs::{alter_if_authorized, RESOURCE_BROKER, RESOURCE_GROUP, RESOURCE_TOPIC};
use super::{commit_error, str_bytes, RequestContext, Session};
use crate::broker::Broker;
use crate::config::group_configs::{self, GroupConfigBounds};
use crate::controller;
use crate::metadata::image::MetadataImage;
use crate::metadata::outcome::ApiError;
use crate::metadata::records::{AlterOp, BROKER_DEFAULT};
use crate::metadata::records::{MetadataCommand, MetadataRecord};
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
        RESOURCE_GROUP => {
            return alter_group_configs(broker, resource.resource_name.to_string(), ops, validate_only).await;
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

/// A group id's configs (Kafka's `kafka-configs --entity-type groups`): checked here against
/// this broker's ranges, which the controller's decision cannot see, then decided and
/// committed through the quorum like a topic's. Also AlterConfigs' path for a group resource.
pub(super) async fn alter_group_configs(
    broker: &Broker,
    group_id: String,
    ops: Vec<(String, AlterOp, Option<String>)>,
    validate_only: bool,
) -> Result<(), (i16, String)> {
    let bounds = GroupConfigBounds::of(&broker.config.group);
    let checked = check_group_configs(&broker.metadata.image(), &group_id, &ops, &bounds);
    let outcome = match checked {
        Err(refused) => Err(CommitError::Refused(refused)),
        Ok(_) if validate_only => Ok(()),
        Ok(_) => broker
            .commit(MetadataCommand::AlterGroupConfigs { group_id, ops })
            .await
            .map(|_| ()),
    };
    outcome.map_err(|e| commit_error(&e))
}

/// What the controller would decide for the change on `image`, and the broker's ranges
/// (`bounds`) checked on the config set it leaves: the records, or why it is refused.
fn check_group_configs(
    image: &MetadataImage,
    group_id: &str,
    ops: &[(String, AlterOp, Option<String>)],
    bounds: &GroupConfigBounds,
) -> Result<Vec<MetadataRecord>, ApiError> {
    let records = controller::alter_group_configs(image, group_id, ops)?;
    let mut after = image.group_configs(group_id).cloned().unwrap_or_default();
    for record in &records {
        if let MetadataRecord::Config { name, value, .. } = record {
            match value {
                Some(v) => after.insert(name.clone(), v.clone()),
                None => after.remove(name),
            };
        }
    }
    group_configs::validate_within(&after, bounds)
        .map_err(|e| ApiError::new(ResponseError::InvalidConfig, e.to_string()))?;
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::GroupConfig;

    fn set(key: &str, value: &str) -> Vec<(String, AlterOp, Option<String>)> {
        vec![(key.to_string(), AlterOp::Set, Some(value.to_string()))]
    }

    fn refusal(ops: &[(String, AlterOp, Option<String>)]) -> ApiError {
        let image = MetadataImage::new("c".into());
        let bounds = GroupConfigBounds::of(&GroupConfig::default());
        check_group_configs(&image, "g1", ops, &bounds).unwrap_err()
    }

    #[test]
    fn a_group_config_is_accepted_for_a_group_that_does_not_exist() {
        let image = MetadataImage::new("c".into());
        let bounds = GroupConfigBounds::of(&GroupConfig::default());
        let records = check_group_configs(&image, "g1", &set("share.auto.offset.reset", "earliest"), &bounds).unwrap();
        assert_eq!(records.len(), 1);
    }

    #[test]
    fn an_unknown_group_config_name_is_refused_with_invalid_config() {
        let refused = refusal(&set("share.auto.offset.reste", "earliest"));
        assert_eq!(refused.error, ResponseError::InvalidConfig);
        assert!(
            refused.message.contains("share.auto.offset.reste"),
            "{}",
            refused.message
        );
    }

    #[test]
    fn a_bad_group_config_value_is_refused_with_invalid_config() {
        for (key, value) in [
            ("share.auto.offset.reset", "sometimes"),
            ("share.isolation.level", "dirty"),
            ("share.record.lock.duration.ms", "-1"),
            // Parses, but lies outside the broker's group.consumer.min/max.session.timeout.ms.
            ("consumer.session.timeout.ms", "1000"),
            ("consumer.heartbeat.interval.ms", "60000"),
        ] {
            let refused = refusal(&set(key, value));
            assert_eq!(refused.error, ResponseError::InvalidConfig, "{key}={value}");
            assert!(refused.message.contains(key), "{key}={value}: {}", refused.message);
        }
    }
}

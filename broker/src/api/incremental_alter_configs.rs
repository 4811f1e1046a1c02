//! IncrementalAlterConfigs: SET, DELETE, APPEND and SUBTRACT on topic configs; the change is
//! committed to metadata and the topic's logs pick it up at once.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse};

use super::describe_configs::{RESOURCE_BROKER, RESOURCE_TOPIC};
use super::{commit_error, str_bytes};
use crate::broker::Broker;
use crate::controller::{self, AlterOp, ApiError};
use crate::topic_config;

pub fn handle(broker: &Broker, request: IncrementalAlterConfigsRequest) -> IncrementalAlterConfigsResponse {
    let responses = request
        .resources
        .iter()
        .map(|resource| {
            let result = AlterConfigsResourceResponse::default()
                .with_resource_type(resource.resource_type)
                .with_resource_name(resource.resource_name.clone());
            let fail = |code: i16, message: String| {
                result.clone().with_error_code(code).with_error_message(Some(str_bytes(message)))
            };
            match resource.resource_type {
                RESOURCE_TOPIC => {}
                RESOURCE_BROKER => {
                    return fail(
                        ResponseError::InvalidRequest.code(),
                        "broker configs are static in this version; restart the broker with --set KEY=VALUE".into(),
                    )
                }
                other => return fail(ResponseError::InvalidRequest.code(), format!("resource type {other} cannot be altered")),
            }
            let mut ops = Vec::with_capacity(resource.configs.len());
            for config in &resource.configs {
                let Some(op) = AlterOp::from_code(config.config_operation) else {
                    return fail(ResponseError::InvalidRequest.code(), format!("unknown config operation {}", config.config_operation));
                };
                ops.push((config.name.to_string(), op, config.value.as_ref().map(|v| v.to_string())));
            }
            let name = resource.resource_name.as_str();
            let outcome = broker.commit(|image| {
                let topic = image.topic(name).ok_or_else(|| {
                    ApiError::new(ResponseError::UnknownTopicOrPartition, format!("topic {name:?} does not exist"))
                })?;
                let effective = |key: &str| topic_config::effective_value(key, &topic.configs, &broker.config);
                let records = controller::alter_topic_configs(image, name, &ops, effective)?;
                Ok((if request.validate_only { Vec::new() } else { records }, ()))
            });
            match outcome {
                Ok(_) => result,
                Err(e) => {
                    let (code, message) = commit_error(&e);
                    fail(code, message)
                }
            }
        })
        .collect();
    IncrementalAlterConfigsResponse::default().with_responses(responses)
}

//! AlterConfigs (the legacy API 33, which kafkajs, kafka-python and rust-rdkafka send): the
//! request carries a topic's (or a broker's dynamic, or a group id's) whole config set, so
//! every override it leaves out is removed.
//! It is turned into IncrementalAlterConfigs' SET and DELETE operations and committed through
//! the same metadata command, so both APIs validate and apply configs the same way.
//! Each resource needs ALTER_CONFIGS on its topic, on the cluster, or on its group
//! (`config_refusal`).

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_configs_request::AlterConfigsResource;
use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{AlterConfigsRequest, AlterConfigsResponse};

use super::describe_configs::{RESOURCE_BROKER, RESOURCE_GROUP, RESOURCE_TOPIC};
use super::incremental_alter_configs::{
    alter_broker_configs, alter_each, alter_group_configs, alter_topic_configs, answer_each, broker_resource_id,
};
use super::{str_bytes, RequestContext};
use crate::broker::Broker;
use crate::controller;

pub async fn handle(ctx: RequestContext, request: AlterConfigsRequest) -> AlterConfigsResponse {
    let RequestContext { broker, session, .. } = ctx;
    let responses = answer_each!(broker, session, request, alter, AlterConfigsResourceResponse);
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
        RESOURCE_GROUP => {
            let group_id = resource.resource_name.to_string();
            let ops = controller::replace_group_configs_ops(&image, &group_id, &given).map_err(invalid)?;
            return alter_group_configs(broker, group_id, ops, validate_only).await;
        }
        other => return Err(invalid(format!("resource type {other} cannot be altered"))),
    }
    let name = resource.resource_name.to_string();
    let ops = controller::replace_topic_configs_ops(&image, &name, &given).map_err(invalid)?;
    alter_topic_configs(broker, name, ops, Default::default(), validate_only).await
}

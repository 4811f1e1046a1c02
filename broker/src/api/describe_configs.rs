//! DescribeConfigs: every topic or broker config with its value, source, type and synonyms,
//! so tools can read-modify-write on the output.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse};
use kafka_protocol::protocol::StrBytes;

use super::str_bytes;
use crate::broker::Broker;
use crate::topic_config::{self, ConfigDef, ConfigSource, ConfigType};

pub const RESOURCE_TOPIC: i8 = 2;
pub const RESOURCE_BROKER: i8 = 4;

pub fn handle(broker: &Broker, request: DescribeConfigsRequest, _version: i16) -> DescribeConfigsResponse {
    let results = request
        .resources
        .iter()
        .map(|resource| {
            let result = DescribeConfigsResult::default()
                .with_resource_type(resource.resource_type)
                .with_resource_name(resource.resource_name.clone());
            let wanted = |name: &str| {
                resource
                    .configuration_keys
                    .as_ref()
                    .is_none_or(|keys| keys.iter().any(|k| k.as_str() == name))
            };
            let options = Options {
                synonyms: request.include_synonyms,
                documentation: request.include_documentation,
            };
            match describe(broker, resource.resource_type, &resource.resource_name, options) {
                Ok(configs) => result.with_configs(configs.into_iter().filter(|c| wanted(c.name.as_str())).collect()),
                Err((error, message)) => result
                    .with_error_code(error.code())
                    .with_error_message(Some(str_bytes(message))),
            }
        })
        .collect();
    DescribeConfigsResponse::default().with_results(results)
}

#[derive(Clone, Copy)]
struct Options {
    synonyms: bool,
    documentation: bool,
}

fn describe(
    broker: &Broker,
    resource_type: i8,
    name: &StrBytes,
    options: Options,
) -> Result<Vec<DescribeConfigsResourceResult>, (ResponseError, String)> {
    match resource_type {
        RESOURCE_TOPIC => {
            let image = broker.metadata.image();
            let topic = image.topic(name.as_str()).ok_or_else(|| {
                (
                    ResponseError::UnknownTopicOrPartition,
                    format!("topic {:?} does not exist", name.as_str()),
                )
            })?;
            let replicas = topic.partitions.first().map_or(1, |p| p.replicas.len());
            Ok(topic_config::describe(&topic.configs, &broker.config.overrides)
                .into_iter()
                .map(|(def, value, source)| {
                    // Unset, min.insync.replicas follows the replication factor: show what applies.
                    let value = if def.name == "min.insync.replicas" && source == ConfigSource::Default {
                        topic_config::min_insync_replicas(&topic.configs, &broker.config.overrides, replicas)
                            .to_string()
                    } else {
                        value
                    };
                    topic_entry(broker, def, value, source, options)
                })
                .collect())
        }
        RESOURCE_BROKER => {
            let own_id = broker.config.node_id.to_string();
            if !name.is_empty() && name.as_str() != own_id {
                return Err((
                    ResponseError::InvalidRequest,
                    format!("broker {} is not this broker ({own_id})", name.as_str()),
                ));
            }
            Ok(broker
                .config
                .describe()
                .into_iter()
                .map(|(key, value, explicit)| {
                    let source = if explicit {
                        ConfigSource::StaticBroker
                    } else {
                        ConfigSource::Default
                    };
                    DescribeConfigsResourceResult::default()
                        .with_name(str_bytes(key))
                        .with_value(Some(str_bytes(value)))
                        .with_read_only(true)
                        .with_config_source(source as i8)
                        .with_config_type(ConfigType::String as i8)
                })
                .collect())
        }
        other => Err((
            ResponseError::InvalidRequest,
            format!("resource type {other} is not supported; use 2 (topic) or 4 (broker)"),
        )),
    }
}

fn topic_entry(
    broker: &Broker,
    def: &ConfigDef,
    value: String,
    source: ConfigSource,
    options: Options,
) -> DescribeConfigsResourceResult {
    let mut synonyms = Vec::new();
    if options.synonyms {
        if source == ConfigSource::DynamicTopic {
            synonyms.push(synonym(def.name, &value, ConfigSource::DynamicTopic));
        }
        if let Some(v) = def
            .broker_synonym
            .and_then(|k| broker.config.static_override(k).map(|v| (k, v)))
        {
            synonyms.push(synonym(v.0, v.1, ConfigSource::StaticBroker));
        }
        synonyms.push(synonym(
            def.broker_synonym.unwrap_or(def.name),
            def.default,
            ConfigSource::Default,
        ));
    }
    DescribeConfigsResourceResult::default()
        .with_name(str_bytes(def.name))
        .with_value(Some(str_bytes(value)))
        .with_config_source(source as i8)
        .with_config_type(def.ty as i8)
        .with_synonyms(synonyms)
        .with_documentation(options.documentation.then(|| str_bytes(def.doc)))
}

fn synonym(name: &str, value: &str, source: ConfigSource) -> DescribeConfigsSynonym {
    DescribeConfigsSynonym::default()
        .with_name(str_bytes(name))
        .with_value(Some(str_bytes(value)))
        .with_source(source as i8)
}

//! DescribeConfigs: every topic or broker config with its value, source, type and synonyms,
//! so tools can read-modify-write on the output.
//!
//! Each resource needs DESCRIBE_CONFIGS: a topic's on the topic (else
//! TOPIC_AUTHORIZATION_FAILED), a broker's on the cluster (else CLUSTER_AUTHORIZATION_FAILED),
//! as Kafka; AlterConfigs and IncrementalAlterConfigs need ALTER_CONFIGS the same way
//! ([`config_refusal`]).

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse};
use kafka_protocol::protocol::StrBytes;

use super::{str_bytes, Access, RequestContext};
use crate::broker::Broker;
use crate::controller::acls::CLUSTER_NAME;
use crate::metadata::acls::{AclOperation, ResourceType};
use crate::metadata::records::BROKER_DEFAULT;
use crate::topic_config::{self, ConfigDef, ConfigSource, ConfigType};

pub const RESOURCE_TOPIC: i8 = 2;
pub const RESOURCE_BROKER: i8 = 4;
/// Kafka's other config resource types: Sluice serves none of them, but authorizes them as
/// Kafka does before saying so.
const RESOURCE_BROKER_LOGGER: i8 = 8;
const RESOURCE_CLIENT_METRICS: i8 = 16;
const RESOURCE_GROUP: i8 = 32;

/// Why the principal may not perform `operation` (DESCRIBE_CONFIGS or ALTER_CONFIGS) on the
/// config resource, if it may not: the Kafka error and its message. A topic is its own ACL
/// resource, a broker (or its loggers) the cluster.
pub(super) fn config_refusal(
    access: Access<'_>,
    operation: AclOperation,
    resource_type: i8,
    name: &str,
) -> Option<(ResponseError, String)> {
    let (acl_type, acl_name, error) = match resource_type {
        RESOURCE_TOPIC => (ResourceType::Topic, name, ResponseError::TopicAuthorizationFailed),
        RESOURCE_BROKER | RESOURCE_BROKER_LOGGER | RESOURCE_CLIENT_METRICS => (
            ResourceType::Cluster,
            CLUSTER_NAME,
            ResponseError::ClusterAuthorizationFailed,
        ),
        RESOURCE_GROUP => (ResourceType::Group, name, ResponseError::GroupAuthorizationFailed),
        // Unknown types are refused as such.
        _ => return None,
    };
    let allowed = access.authorize(operation, acl_type, acl_name);
    (!allowed).then(|| (error, access.denied(operation, acl_type, acl_name)))
}

/// One resource of AlterConfigs or IncrementalAlterConfigs: refused with its type's error
/// without ALTER_CONFIGS on it, else what `alter` (not started until allowed) answers.
pub(super) async fn alter_if_authorized(
    access: Access<'_>,
    resource_type: i8,
    name: &str,
    alter: impl std::future::Future<Output = Result<(), (i16, String)>>,
) -> Result<(), (i16, String)> {
    match config_refusal(access, AclOperation::AlterConfigs, resource_type, name) {
        Some((error, message)) => Err((error.code(), message)),
        None => alter.await,
    }
}

pub fn handle(ctx: &RequestContext, request: DescribeConfigsRequest) -> DescribeConfigsResponse {
    let RequestContext { broker, session, .. } = ctx;
    let image = broker.metadata.image();
    let access = session.access(&broker.security.authorizer, &image.acls);
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
            let refusal = config_refusal(
                access,
                AclOperation::DescribeConfigs,
                resource.resource_type,
                &resource.resource_name,
            );
            let described = match refusal {
                Some(refusal) => Err(refusal),
                None => describe(broker, resource.resource_type, &resource.resource_name, options),
            };
            match described {
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
            let defaults = broker.topic_defaults(&image);
            let dynamic = |id: i32, key: Option<&str>| {
                key.zip(image.broker_configs.get(&id))
                    .is_some_and(|(k, configs)| configs.contains_key(k))
            };
            Ok(topic_config::describe(&topic.configs, &defaults)
                .into_iter()
                .map(|(def, value, source)| {
                    // Unset, min.insync.replicas follows the replication factor: show what applies.
                    let value = if def.name == "min.insync.replicas" && source == ConfigSource::Default {
                        topic_config::min_insync_replicas(&topic.configs, &defaults, replicas).to_string()
                    } else {
                        value
                    };
                    // A broker-level value may be a dynamic broker config rather than `--set`.
                    let source = match source {
                        ConfigSource::StaticBroker if dynamic(broker.config.node_id, def.broker_synonym) => {
                            ConfigSource::DynamicBroker
                        }
                        ConfigSource::StaticBroker if dynamic(BROKER_DEFAULT, def.broker_synonym) => {
                            ConfigSource::DynamicDefaultBroker
                        }
                        other => other,
                    };
                    topic_entry(broker, def, value, source, options)
                })
                .collect())
        }
        RESOURCE_BROKER => Ok(describe_broker(broker, name, options)?),
        other => Err((
            ResponseError::InvalidRequest,
            format!("resource type {other} is not supported; use 2 (topic) or 4 (broker)"),
        )),
    }
}

/// A broker's configs: the static ones (`--set`, else the default) with its dynamic ones and
/// the cluster-wide dynamic ones on top; for the resource `""`, the cluster-wide dynamic ones
/// alone, as Kafka describes it.
fn describe_broker(
    broker: &Broker,
    name: &StrBytes,
    options: Options,
) -> Result<Vec<DescribeConfigsResourceResult>, (ResponseError, String)> {
    let image = broker.metadata.image();
    let cluster_wide = image.broker_configs.get(&BROKER_DEFAULT);
    if name.is_empty() {
        return Ok(cluster_wide
            .into_iter()
            .flatten()
            .map(|(key, value)| {
                let layers = [(value.as_str(), ConfigSource::DynamicDefaultBroker)];
                broker_entry(key, &layers, options)
            })
            .collect());
    }
    let own_id = broker.config.node_id;
    if name.as_str() != own_id.to_string() {
        return Err((
            ResponseError::InvalidRequest,
            format!(
                "broker {} is not this broker ({own_id}); send the request to that broker",
                name.as_str()
            ),
        ));
    }
    let own = image.broker_configs.get(&own_id);
    let mut rows = broker.config.describe();
    for rate in [
        topic_config::LEADER_THROTTLED_RATE,
        topic_config::FOLLOWER_THROTTLED_RATE,
    ] {
        rows.push((rate.to_string(), i64::MAX.to_string(), false));
    }
    Ok(rows
        .iter()
        .map(|(key, value, explicit)| {
            let mut layers = Vec::with_capacity(3);
            if let Some(v) = own.and_then(|c| c.get(key)) {
                layers.push((v.as_str(), ConfigSource::DynamicBroker));
            }
            if let Some(v) = cluster_wide.and_then(|c| c.get(key)) {
                layers.push((v.as_str(), ConfigSource::DynamicDefaultBroker));
            }
            let base = if *explicit {
                ConfigSource::StaticBroker
            } else {
                ConfigSource::Default
            };
            layers.push((value.as_str(), base));
            broker_entry(key, &layers, options)
        })
        .collect())
}

/// One broker config whose value comes from the first of `layers`, the rest its synonyms.
fn broker_entry(key: &str, layers: &[(&str, ConfigSource)], options: Options) -> DescribeConfigsResourceResult {
    let (value, source) = layers[0];
    let synonyms = if options.synonyms && !crate::config::security::is_sensitive(key) {
        layers.iter().map(|(v, s)| synonym(key, v, *s)).collect()
    } else {
        Vec::new()
    };
    // Secrets are listed as set, never shown (Kafka's PASSWORD configs).
    let sensitive = crate::config::security::is_sensitive(key);
    let (doc, ty) = broker_doc(key).unwrap_or(("", ConfigType::String));
    DescribeConfigsResourceResult::default()
        .with_name(str_bytes(key))
        .with_value((!sensitive).then(|| str_bytes(value)))
        .with_is_sensitive(sensitive)
        .with_read_only(!topic_config::is_dynamic_broker_config(key))
        .with_config_source(source as i8)
        .with_config_type(if sensitive { ConfigType::Password } else { ty } as i8)
        .with_synonyms(synonyms)
        .with_documentation((options.documentation && !doc.is_empty()).then(|| str_bytes(doc)))
}

/// What `sluice settings` says a broker setting means, and its type: from the broker settings'
/// table, or the topic config the setting is the broker-wide default of.
fn broker_doc(key: &str) -> Option<(&'static str, ConfigType)> {
    match key {
        topic_config::LEADER_THROTTLED_RATE => Some((
            "Bytes per second this broker sends to followers of throttled replicas (leader.replication.throttled.replicas).",
            ConfigType::Long,
        )),
        topic_config::FOLLOWER_THROTTLED_RATE => Some((
            "Bytes per second this broker fetches for its throttled follower replicas (follower.replication.throttled.replicas).",
            ConfigType::Long,
        )),
        _ => crate::config::BROKER_SETTINGS
            .iter()
            .find(|s| s.name == key)
            .map(|s| (s.doc, s.ty))
            .or_else(|| topic_config::by_broker_synonym(key).map(|d| (d.doc, d.ty))),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::testing::Acls;

    #[test]
    fn config_resources_are_authorized_on_their_topic_or_the_cluster() {
        let acls = Acls::none()
            .allow(ResourceType::Topic, "orders", AclOperation::DescribeConfigs)
            .allow(ResourceType::Topic, "audit", AclOperation::AlterConfigs);
        let describe = |resource_type, name| {
            config_refusal(acls.access(), AclOperation::DescribeConfigs, resource_type, name).map(|r| r.0)
        };
        assert_eq!(describe(RESOURCE_TOPIC, "orders"), None);
        assert_eq!(
            describe(RESOURCE_TOPIC, "audit"),
            None,
            "ALTER_CONFIGS implies DESCRIBE_CONFIGS"
        );
        assert_eq!(
            describe(RESOURCE_TOPIC, "payments"),
            Some(ResponseError::TopicAuthorizationFailed)
        );
        assert_eq!(
            describe(RESOURCE_BROKER, "1"),
            Some(ResponseError::ClusterAuthorizationFailed)
        );
        let alter = |name| config_refusal(acls.access(), AclOperation::AlterConfigs, RESOURCE_TOPIC, name).map(|r| r.0);
        assert_eq!(alter("audit"), None);
        assert_eq!(alter("orders"), Some(ResponseError::TopicAuthorizationFailed));
        let operators = Acls::none().allow_cluster(AclOperation::AlterConfigs);
        let broker = |operation| config_refusal(operators.access(), operation, RESOURCE_BROKER, "");
        assert_eq!(broker(AclOperation::AlterConfigs), None);
        assert_eq!(broker(AclOperation::DescribeConfigs), None);
    }
}

//! DescribeConfigs: every topic, broker or group config with its value, source, type and
//! synonyms, so tools can read-modify-write on the output.
//!
//! Each resource needs DESCRIBE_CONFIGS: a topic's on the topic (else
//! TOPIC_AUTHORIZATION_FAILED), a broker's on the cluster (else CLUSTER_AUTHORIZATION_FAILED),
//! a group's on the group (else GROUP_AUTHORIZATION_FAILED), as Kafka; AlterConfigs and
//! IncrementalAlterConfigs need ALTER_CONFIGS the same way ([`config_refusal`]).
//!
//! A group resource lists every group config Sluice knows (`config::group_configs`): a set one
//! as GROUP_CONFIG, the others at the broker's value as DEFAULT_CONFIG, as Kafka's
//! `ConfigHelper` does. The group id need not name a group that exists.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse};
use kafka_protocol::protocol::StrBytes;

use super::{str_bytes, Access, RequestContext};
use crate::broker::Broker;
use crate::config::group_configs::{self, GroupConfigBounds, GroupConfigDef};
use crate::controller::acls::CLUSTER_NAME;
use crate::metadata::acls::{AclOperation, ResourceType};
use crate::metadata::records::BROKER_DEFAULT;
use crate::topic_config::{self, ConfigDef, ConfigSource, ConfigType};

pub const RESOURCE_TOPIC: i8 = 2;
pub const RESOURCE_BROKER: i8 = 4;
/// A group id's configs (KIP-848/KIP-932).
pub const RESOURCE_GROUP: i8 = 32;
/// Kafka's other config resource types: Sluice serves neither, but authorizes them as Kafka
/// does before saying so.
const RESOURCE_BROKER_LOGGER: i8 = 8;
const RESOURCE_CLIENT_METRICS: i8 = 16;

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
        RESOURCE_GROUP => {
            let image = broker.metadata.image();
            let bounds = GroupConfigBounds::of(&broker.config.group);
            describe_group(image.group_configs(name.as_str()), name.as_str(), &bounds, options)
        }
        other => Err((
            ResponseError::InvalidRequest,
            format!("resource type {other} is not supported; use 2 (topic), 4 (broker) or 32 (group)"),
        )),
    }
}

/// A group id's configs (`set`: those set for it): every known group config, a set one as
/// GROUP_CONFIG, the others at this broker's value as DEFAULT_CONFIG.
fn describe_group(
    set: Option<&std::collections::BTreeMap<String, String>>,
    group_id: &str,
    bounds: &GroupConfigBounds,
    options: Options,
) -> Result<Vec<DescribeConfigsResourceResult>, (ResponseError, String)> {
    if group_id.is_empty() {
        return Err((
            ResponseError::InvalidRequest,
            "a group config resource needs a group id; name the group (kafka-configs --entity-type groups --entity-name <group>)".into(),
        ));
    }
    Ok(group_configs::GROUP_CONFIGS
        .iter()
        .map(|def| group_entry(def, set.and_then(|c| c.get(def.name)), bounds, options))
        .collect())
}

fn group_entry(
    def: &GroupConfigDef,
    set: Option<&String>,
    bounds: &GroupConfigBounds,
    options: Options,
) -> DescribeConfigsResourceResult {
    let default = bounds.default_value(def);
    let (value, source) = match set {
        Some(v) => (v.clone(), ConfigSource::Group),
        None => (default.clone(), ConfigSource::Default),
    };
    let mut synonyms = Vec::new();
    if options.synonyms {
        if set.is_some() {
            synonyms.push(synonym(def.name, &value, ConfigSource::Group));
        }
        synonyms.push(synonym(
            def.broker_synonym.unwrap_or(def.name),
            &default,
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

    #[test]
    fn group_configs_are_authorized_on_the_group_not_the_cluster() {
        let acls = Acls::none()
            .allow(ResourceType::Group, "readers", AclOperation::DescribeConfigs)
            .allow(ResourceType::Group, "owned", AclOperation::AlterConfigs)
            .allow_cluster(AclOperation::AlterConfigs)
            .allow(ResourceType::Group, "locked", AclOperation::AlterConfigs)
            .deny(ResourceType::Group, "locked", AclOperation::AlterConfigs);
        let refusal = |operation, name| config_refusal(acls.access(), operation, RESOURCE_GROUP, name).map(|r| r.0);
        assert_eq!(refusal(AclOperation::DescribeConfigs, "readers"), None);
        assert_eq!(
            refusal(AclOperation::DescribeConfigs, "owned"),
            None,
            "ALTER_CONFIGS implies DESCRIBE_CONFIGS"
        );
        assert_eq!(refusal(AclOperation::AlterConfigs, "owned"), None);
        for (operation, name) in [
            (AclOperation::AlterConfigs, "readers"),
            (AclOperation::AlterConfigs, "other"),
            (AclOperation::DescribeConfigs, "other"),
            (AclOperation::AlterConfigs, "locked"),
        ] {
            assert_eq!(
                refusal(operation, name),
                Some(ResponseError::GroupAuthorizationFailed),
                "{operation:?} on {name}: ALTER_CONFIGS on the cluster does not reach groups, DENY wins"
            );
        }
    }

    #[tokio::test]
    async fn a_group_alteration_without_alter_configs_is_refused_before_it_runs() {
        let acls = Acls::none().allow(ResourceType::Group, "g1", AclOperation::DescribeConfigs);
        let ran = std::cell::Cell::new(false);
        let alter = async {
            ran.set(true);
            Ok(())
        };
        let (code, message) = alter_if_authorized(acls.access(), RESOURCE_GROUP, "g1", alter)
            .await
            .unwrap_err();
        assert_eq!(code, ResponseError::GroupAuthorizationFailed.code());
        assert!(message.contains("g1"), "{message}");
        assert!(!ran.get(), "nothing was altered");
    }

    #[test]
    fn a_group_lists_every_group_config_with_its_source() {
        let bounds = GroupConfigBounds::of(&crate::config::GroupConfig {
            consumer_session_timeout_ms: 50_000,
            ..Default::default()
        });
        let options = Options {
            synonyms: true,
            documentation: false,
        };
        let set = std::collections::BTreeMap::from([(
            group_configs::SHARE_AUTO_OFFSET_RESET.to_string(),
            "earliest".to_string(),
        )]);
        let described = describe_group(Some(&set), "g1", &bounds, options).unwrap();
        assert_eq!(described.len(), group_configs::GROUP_CONFIGS.len());
        let entry = |name: &str| described.iter().find(|c| c.name.as_str() == name).unwrap();
        let reset = entry(group_configs::SHARE_AUTO_OFFSET_RESET);
        assert_eq!(reset.value.as_deref(), Some("earliest"));
        assert_eq!(reset.config_source, 8, "Kafka's GROUP_CONFIG");
        assert_eq!(reset.synonyms[1].value.as_deref(), Some("latest"));
        let session = entry(group_configs::CONSUMER_SESSION_TIMEOUT_MS);
        assert_eq!(session.value.as_deref(), Some("50000"), "the broker's value");
        assert_eq!(session.config_source, ConfigSource::Default as i8);
        assert_eq!(session.synonyms[0].name.as_str(), "group.consumer.session.timeout.ms");
        assert_eq!(
            entry(group_configs::SHARE_ISOLATION_LEVEL).value.as_deref(),
            Some("read_uncommitted")
        );

        let (error, message) = describe_group(None, "", &bounds, options).unwrap_err();
        assert_eq!(error, ResponseError::InvalidRequest);
        assert!(message.contains("--entity-name"), "{message}");
    }
}

//! Topic config changes (Kafka's `ConfigurationControlManager`): IncrementalAlterConfigs'
//! SET, DELETE, APPEND and SUBTRACT, each value validated before it is written.
//!
//! Dynamic broker configs too: SET and DELETE on one registered broker or on the cluster-wide
//! defaults (`BROKER_DEFAULT`), kept in the image's `broker_configs`. Only a topic config's
//! broker synonym (`log.retention.ms`, ...) and the replication throttle rates are dynamic;
//! any other broker setting is static and refused with INVALID_REQUEST.
//!
//! Group configs (KIP-848/KIP-932) too: SET and DELETE on a group id's configs, kept in the
//! image's `group_configs`, whether or not the group exists. Here each is checked as far as
//! the image allows (`group_configs::validate`: a known name, a value of Kafka's form); the
//! broker's ranges are checked by the broker that proposes the change.

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::error::ResponseError;

use super::topics::existing_topic;
use crate::config::group_configs;
use crate::metadata::image::MetadataImage;
use crate::metadata::outcome::ApiError;
use crate::metadata::records::{AlterOp, ConfigResource, MetadataRecord, BROKER_DEFAULT};
use crate::topic_config;

/// Validates config changes to a topic and returns the records that apply them.
pub fn alter_topic_configs(
    image: &MetadataImage,
    name: &str,
    ops: &[(String, AlterOp, Option<String>)],
    list_bases: &BTreeMap<String, String>,
) -> Result<Vec<MetadataRecord>, ApiError> {
    let topic = existing_topic(image, name)?;
    let invalid = |msg: String| ApiError::new(ResponseError::InvalidConfig, msg);
    let mut records = Vec::with_capacity(ops.len());
    for (key, op, value) in ops {
        // Kafka checks the config set a change leaves, so removing what is not there (even a
        // name this broker does not know, such as a replication throttle list) succeeds.
        if *op == AlterOp::Delete && !topic.configs.contains_key(key.as_str()) {
            continue;
        }
        let def = topic_config::def(key);
        if def.is_none() && key != topic_config::INTERNAL_SEGMENT_BYTES {
            return Err(invalid(topic_config::TopicConfigError::Unknown(key.clone()).to_string()));
        }
        let new_value = match op {
            AlterOp::Delete => None,
            AlterOp::Set => Some(
                value
                    .clone()
                    .ok_or_else(|| invalid(format!("SET of {key} needs a value")))?,
            ),
            AlterOp::Append | AlterOp::Subtract => {
                let Some(def) = def.filter(|d| d.ty == topic_config::ConfigType::List) else {
                    return Err(invalid(format!(
                        "{key} is not a list; APPEND and SUBTRACT apply only to lists"
                    )));
                };
                let current = topic
                    .configs
                    .get(key.as_str())
                    .or_else(|| list_bases.get(key.as_str()))
                    .cloned()
                    .unwrap_or_else(|| def.default.to_string());
                let mut items: Vec<String> = current
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect();
                let given: Vec<String> = value
                    .as_deref()
                    .unwrap_or("")
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect();
                if *op == AlterOp::Append {
                    for item in given {
                        if !items.contains(&item) {
                            items.push(item);
                        }
                    }
                } else {
                    items.retain(|i| !given.contains(i));
                }
                Some(items.join(","))
            }
        };
        if let Some(v) = &new_value {
            topic_config::validate(key, v).map_err(|e| invalid(e.to_string()))?;
        }
        records.push(MetadataRecord::Config {
            resource: ConfigResource::Topic(name.to_string()),
            name: key.clone(),
            value: new_value,
        });
    }
    let changes = records.iter().filter_map(|r| match r {
        MetadataRecord::Config { name, value, .. } => Some((name.as_str(), value.as_deref())),
        _ => None,
    });
    topic_config::validate_together(&topic.configs, changes).map_err(|e| invalid(e.to_string()))?;
    Ok(records)
}

/// Validates dynamic config changes to one broker (`broker_id`) or to the cluster-wide
/// defaults ([`BROKER_DEFAULT`]) and returns the records that apply them. Only SET and DELETE:
/// none of the dynamic broker configs is a list.
pub fn alter_broker_configs(
    image: &MetadataImage,
    broker_id: i32,
    ops: &[(String, AlterOp, Option<String>)],
) -> Result<Vec<MetadataRecord>, ApiError> {
    if broker_id != BROKER_DEFAULT && !image.brokers.contains_key(&broker_id) {
        return Err(ApiError::new(
            ResponseError::InvalidRequest,
            format!("broker {broker_id} is not registered in this cluster; name a registered broker id, or \"\" for the cluster-wide default"),
        ));
    }
    let current = image.broker_configs.get(&broker_id);
    let invalid = |msg: String| ApiError::new(ResponseError::InvalidConfig, msg);
    let mut records = Vec::with_capacity(ops.len());
    for (key, op, value) in ops {
        let value = match op {
            // As for topics, removing what is not there succeeds (kafka-reassign-partitions
            // --verify clears throttle rates that may never have been set).
            AlterOp::Delete if current.is_none_or(|c| !c.contains_key(key.as_str())) => continue,
            AlterOp::Delete => None,
            AlterOp::Set => {
                let v = value
                    .clone()
                    .ok_or_else(|| invalid(format!("SET of {key} needs a value")))?;
                topic_config::validate_dynamic_broker_config(key, &v).map_err(|e| {
                    // Kafka answers a static config with INVALID_REQUEST, a bad value with
                    // INVALID_CONFIG.
                    let code = if topic_config::is_dynamic_broker_config(key) {
                        ResponseError::InvalidConfig
                    } else {
                        ResponseError::InvalidRequest
                    };
                    ApiError::new(code, e)
                })?;
                Some(v)
            }
            AlterOp::Append | AlterOp::Subtract => {
                return Err(invalid(format!(
                    "{key} is not a list; APPEND and SUBTRACT apply only to lists, and no dynamic broker config is one"
                )))
            }
        };
        records.push(MetadataRecord::Config {
            resource: ConfigResource::Broker(broker_id),
            name: key.clone(),
            value,
        });
    }
    Ok(records)
}

/// Validates config changes to a group id (which need not name an existing group) and returns
/// the records that apply them. Only SET and DELETE: no group config is a list. An unknown
/// name or a bad value is refused with INVALID_CONFIG, as Kafka refuses it.
pub fn alter_group_configs(
    image: &MetadataImage,
    group_id: &str,
    ops: &[(String, AlterOp, Option<String>)],
) -> Result<Vec<MetadataRecord>, ApiError> {
    if group_id.is_empty() {
        return Err(ApiError::new(
            ResponseError::InvalidRequest,
            "a group config resource needs a group id; name the group (kafka-configs --entity-type groups --entity-name <group>)",
        ));
    }
    let current = image.group_configs(group_id);
    let invalid = |msg: String| ApiError::new(ResponseError::InvalidConfig, msg);
    let mut records = Vec::with_capacity(ops.len());
    for (key, op, value) in ops {
        let value = match op {
            // As for topics, removing what is not there succeeds and writes nothing.
            AlterOp::Delete if current.is_none_or(|c| !c.contains_key(key.as_str())) => continue,
            AlterOp::Delete => None,
            AlterOp::Set => {
                let v = value
                    .clone()
                    .ok_or_else(|| invalid(format!("SET of {key} needs a value")))?;
                group_configs::validate(key, &v).map_err(|e| invalid(e.to_string()))?;
                Some(v)
            }
            AlterOp::Append | AlterOp::Subtract => {
                return Err(invalid(format!(
                    "{key} is not a list; APPEND and SUBTRACT apply only to lists, and no group config is one"
                )))
            }
        };
        records.push(MetadataRecord::Config {
            resource: ConfigResource::Group(group_id.to_string()),
            name: key.clone(),
            value,
        });
    }
    Ok(records)
}

/// AlterConfigs' whole-set replace as IncrementalAlterConfigs operations: the ones that make `given` the topic's whole override set: DELETE for each current
/// override it leaves out, SET for each value it names (a null value removes the override,
/// as Kafka treats it). A name given twice is refused, as Kafka refuses it.
pub fn replace_topic_configs_ops(
    image: &MetadataImage,
    topic: &str,
    given: &[(String, Option<String>)],
) -> Result<Vec<(String, AlterOp, Option<String>)>, String> {
    replace_configs_ops(image.topic(topic).map(|t| &t.configs), given)
}

/// The same for a broker resource's dynamic configs (`broker_id` or [`BROKER_DEFAULT`]).
pub fn replace_broker_configs_ops(
    image: &MetadataImage,
    broker_id: i32,
    given: &[(String, Option<String>)],
) -> Result<Vec<(String, AlterOp, Option<String>)>, String> {
    replace_configs_ops(image.broker_configs.get(&broker_id), given)
}

/// The same for a group id's configs.
pub fn replace_group_configs_ops(
    image: &MetadataImage,
    group_id: &str,
    given: &[(String, Option<String>)],
) -> Result<Vec<(String, AlterOp, Option<String>)>, String> {
    replace_configs_ops(image.group_configs(group_id), given)
}

fn replace_configs_ops(
    current: Option<&BTreeMap<String, String>>,
    given: &[(String, Option<String>)],
) -> Result<Vec<(String, AlterOp, Option<String>)>, String> {
    let mut named = BTreeSet::new();
    for (key, _) in given {
        if !named.insert(key.as_str()) {
            return Err(format!("config {key:?} is given more than once; name each config once"));
        }
    }
    let mut ops: Vec<(String, AlterOp, Option<String>)> = current
        .into_iter()
        .flat_map(BTreeMap::keys)
        .filter(|key| !named.contains(key.as_str()))
        .map(|key| (key.clone(), AlterOp::Delete, None))
        .collect();
    ops.extend(given.iter().map(|(key, value)| match value {
        Some(v) => (key.clone(), AlterOp::Set, Some(v.clone())),
        None => (key.clone(), AlterOp::Delete, None),
    }));
    Ok(ops)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::create_topic;
    use crate::controller::test_support::*;
    use uuid::Uuid;

    #[test]
    fn incremental_alter_supports_set_delete_append_subtract() {
        let mut image = image_with_brokers(&[1]);
        let records = create_topic(&image, &new_topic("t", 1, 1), Uuid::from_u128(1)).unwrap();
        apply_all(&mut image, &records);
        let default = BTreeMap::from([("cleanup.policy".to_string(), "delete".to_string())]);
        let ops = vec![
            ("retention.ms".to_string(), AlterOp::Set, Some("1000".to_string())),
            (
                "cleanup.policy".to_string(),
                AlterOp::Append,
                Some("compact".to_string()),
            ),
        ];
        let records = alter_topic_configs(&image, "t", &ops, &default).unwrap();
        apply_all(&mut image, &records);
        assert_eq!(image.topic("t").unwrap().configs["cleanup.policy"], "delete,compact");
        let ops = vec![
            ("retention.ms".to_string(), AlterOp::Delete, None),
            (
                "cleanup.policy".to_string(),
                AlterOp::Subtract,
                Some("delete".to_string()),
            ),
        ];
        let records = alter_topic_configs(&image, "t", &ops, &default).unwrap();
        apply_all(&mut image, &records);
        let configs = &image.topic("t").unwrap().configs;
        assert!(!configs.contains_key("retention.ms"));
        assert_eq!(configs["cleanup.policy"], "compact");
        let ops = vec![("retention.ms".to_string(), AlterOp::Append, Some("1".to_string()))];
        assert_eq!(
            alter_topic_configs(&image, "t", &ops, &default).unwrap_err().error,
            ResponseError::InvalidConfig
        );
        let absent = vec![
            (
                "leader.replication.throttled.replicas".to_string(),
                AlterOp::Delete,
                None,
            ),
            ("retention.ms".to_string(), AlterOp::Delete, None),
        ];
        assert_eq!(alter_topic_configs(&image, "t", &absent, &default).unwrap(), vec![]);
        let unknown = vec![("no.such.config".to_string(), AlterOp::Set, Some("1".to_string()))];
        assert_eq!(
            alter_topic_configs(&image, "t", &unknown, &default).unwrap_err().error,
            ResponseError::InvalidConfig
        );
    }

    fn set(key: &str, value: &str) -> (String, Option<String>) {
        (key.to_string(), Some(value.to_string()))
    }

    #[test]
    fn the_given_set_replaces_every_override() {
        let mut image = image_with_brokers(&[1]);
        let records = create_topic(&image, &new_topic("t", 1, 1), Uuid::from_u128(1)).unwrap();
        apply_all(&mut image, &records);
        let first = replace_topic_configs_ops(
            &image,
            "t",
            &[set("retention.ms", "1000"), set("segment.bytes", "1048576")],
        )
        .unwrap();
        let records = alter_topic_configs(&image, "t", &first, &Default::default()).unwrap();
        apply_all(&mut image, &records);
        assert_eq!(image.topic("t").unwrap().configs.len(), 2);

        let second = replace_topic_configs_ops(&image, "t", &[set("retention.ms", "2000")]).unwrap();
        let records = alter_topic_configs(&image, "t", &second, &Default::default()).unwrap();
        apply_all(&mut image, &records);
        let configs = &image.topic("t").unwrap().configs;
        assert_eq!(configs.get("retention.ms").map(String::as_str), Some("2000"));
        assert!(
            !configs.contains_key("segment.bytes"),
            "left out, so removed: {configs:?}"
        );

        let emptied = replace_topic_configs_ops(&image, "t", &[("retention.ms".to_string(), None)]).unwrap();
        let records = alter_topic_configs(&image, "t", &emptied, &Default::default()).unwrap();
        apply_all(&mut image, &records);
        assert!(image.topic("t").unwrap().configs.is_empty());
    }

    #[test]
    fn a_name_given_twice_is_refused() {
        let image = image_with_brokers(&[1]);
        let err =
            replace_topic_configs_ops(&image, "t", &[set("retention.ms", "1"), set("retention.ms", "2")]).unwrap_err();
        assert!(err.contains("more than once"), "{err}");
    }

    #[test]
    fn dynamic_broker_configs_are_set_and_removed_per_broker_and_cluster_wide() {
        let mut image = image_with_brokers(&[1, 2]);
        let ops = vec![
            ("log.retention.ms".to_string(), AlterOp::Set, Some("60000".to_string())),
            (
                "follower.replication.throttled.rate".to_string(),
                AlterOp::Set,
                Some("1000".to_string()),
            ),
        ];
        let records = alter_broker_configs(&image, 2, &ops).unwrap();
        apply_all(&mut image, &records);
        let cluster_wide = vec![(
            "log.segment.bytes".to_string(),
            AlterOp::Set,
            Some("1048576".to_string()),
        )];
        let records = alter_broker_configs(&image, BROKER_DEFAULT, &cluster_wide).unwrap();
        apply_all(&mut image, &records);
        assert_eq!(image.broker_configs[&2]["log.retention.ms"], "60000");
        assert_eq!(image.broker_configs[&2]["follower.replication.throttled.rate"], "1000");
        assert_eq!(image.broker_configs[&BROKER_DEFAULT]["log.segment.bytes"], "1048576");
        assert!(!image.broker_configs.contains_key(&1));

        let static_overrides = BTreeMap::new();
        let defaults = topic_config::broker_defaults(&static_overrides, &image.broker_configs, 2);
        assert_eq!(
            topic_config::log_config(&BTreeMap::new(), &defaults).retention_ms,
            60_000
        );
        assert_eq!(
            topic_config::log_config(&BTreeMap::new(), &defaults).segment_bytes,
            1_048_576
        );

        let delete = vec![
            ("log.retention.ms".to_string(), AlterOp::Delete, None),
            ("leader.replication.throttled.rate".to_string(), AlterOp::Delete, None),
        ];
        let records = alter_broker_configs(&image, 2, &delete).unwrap();
        assert_eq!(records.len(), 1, "removing what is not set writes nothing: {records:?}");
        apply_all(&mut image, &records);
        assert!(!image.broker_configs[&2].contains_key("log.retention.ms"));
    }

    #[test]
    fn static_or_invalid_broker_configs_are_refused_with_kafkas_codes() {
        let image = image_with_brokers(&[1]);
        let set = |key: &str, value: &str| vec![(key.to_string(), AlterOp::Set, Some(value.to_string()))];
        let code = |broker_id, ops: &[(String, AlterOp, Option<String>)]| {
            alter_broker_configs(&image, broker_id, ops).unwrap_err().error
        };
        assert_eq!(code(1, &set("num.io.threads", "4")), ResponseError::InvalidRequest);
        assert_eq!(code(1, &set("log.retention.ms", "soon")), ResponseError::InvalidConfig);
        assert_eq!(
            code(1, &set("leader.replication.throttled.rate", "-5")),
            ResponseError::InvalidConfig
        );
        assert_eq!(code(7, &set("log.retention.ms", "1")), ResponseError::InvalidRequest);
        let append = vec![("log.retention.ms".to_string(), AlterOp::Append, Some("1".to_string()))];
        assert_eq!(code(1, &append), ResponseError::InvalidConfig);
    }

    #[test]
    fn group_configs_are_set_and_removed_without_a_group() {
        let mut image = image_with_brokers(&[1]);
        let ops = vec![
            (
                "share.auto.offset.reset".to_string(),
                AlterOp::Set,
                Some("earliest".to_string()),
            ),
            (
                "consumer.session.timeout.ms".to_string(),
                AlterOp::Set,
                Some("50000".to_string()),
            ),
            ("share.isolation.level".to_string(), AlterOp::Delete, None),
        ];
        let records = alter_group_configs(&image, "g1", &ops).unwrap();
        assert_eq!(records.len(), 2, "removing what is not set writes nothing: {records:?}");
        apply_all(&mut image, &records);
        let configs = image.group_configs("g1").unwrap();
        assert_eq!(configs["share.auto.offset.reset"], "earliest");
        assert_eq!(configs["consumer.session.timeout.ms"], "50000");

        let replace = replace_group_configs_ops(
            &image,
            "g1",
            &[("share.auto.offset.reset".to_string(), Some("latest".to_string()))],
        )
        .unwrap();
        let records = alter_group_configs(&image, "g1", &replace).unwrap();
        apply_all(&mut image, &records);
        let configs = image.group_configs("g1").unwrap();
        assert_eq!(configs.len(), 1, "left out, so removed: {configs:?}");
        assert_eq!(configs["share.auto.offset.reset"], "latest");
    }

    #[test]
    fn bad_group_configs_are_refused_with_kafkas_codes_and_a_sentence() {
        let image = image_with_brokers(&[1]);
        let refused = |group_id: &str, key: &str, op: AlterOp, value: Option<&str>| {
            let ops = vec![(key.to_string(), op, value.map(String::from))];
            alter_group_configs(&image, group_id, &ops).unwrap_err()
        };
        let unknown = refused("g1", "no.such.config", AlterOp::Set, Some("1"));
        assert_eq!(unknown.error, ResponseError::InvalidConfig);
        assert!(
            unknown.message.contains("unknown group config name"),
            "{}",
            unknown.message
        );
        let bad = refused("g1", "share.auto.offset.reset", AlterOp::Set, Some("sometimes"));
        assert_eq!(bad.error, ResponseError::InvalidConfig);
        assert!(bad.message.contains("\"sometimes\""), "{}", bad.message);
        assert_eq!(
            refused("g1", "consumer.heartbeat.interval.ms", AlterOp::Set, Some("0")).error,
            ResponseError::InvalidConfig
        );
        assert_eq!(
            refused("g1", "share.isolation.level", AlterOp::Set, None).error,
            ResponseError::InvalidConfig
        );
        assert_eq!(
            refused("g1", "share.isolation.level", AlterOp::Append, Some("x")).error,
            ResponseError::InvalidConfig
        );
        assert_eq!(
            refused("", "share.isolation.level", AlterOp::Set, Some("read_committed")).error,
            ResponseError::InvalidRequest
        );
    }
}

//! Topic config changes (Kafka's `ConfigurationControlManager`): IncrementalAlterConfigs'
//! SET, DELETE, APPEND and SUBTRACT, each value validated before it is written.

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::error::ResponseError;

use super::topics::existing_topic;
use crate::metadata::image::MetadataImage;
use crate::metadata::outcome::ApiError;
use crate::metadata::records::{AlterOp, ConfigResource, MetadataRecord};
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
        let def = topic_config::def(key).ok_or_else(|| invalid(format!("unknown topic config {key:?}")))?;
        let new_value = match op {
            AlterOp::Delete => None,
            AlterOp::Set => Some(
                value
                    .clone()
                    .ok_or_else(|| invalid(format!("SET of {key} needs a value")))?,
            ),
            AlterOp::Append | AlterOp::Subtract => {
                if def.ty != topic_config::ConfigType::List {
                    return Err(invalid(format!(
                        "{key} is not a list; APPEND and SUBTRACT apply only to lists"
                    )));
                }
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
    let mut named = BTreeSet::new();
    for (key, _) in given {
        if !named.insert(key.as_str()) {
            return Err(format!("config {key:?} is given more than once; name each config once"));
        }
    }
    let current = image.topic(topic).map(|t| t.configs.keys().cloned().collect::<Vec<_>>());
    let mut ops: Vec<(String, AlterOp, Option<String>)> = current
        .unwrap_or_default()
        .into_iter()
        .filter(|key| !named.contains(key.as_str()))
        .map(|key| (key, AlterOp::Delete, None))
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
            ("leader.replication.throttled.replicas".to_string(), AlterOp::Delete, None),
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
        let first = replace_topic_configs_ops(&image, "t", &[set("retention.ms", "1000"), set("segment.bytes", "1048576")]).unwrap();
        let records = alter_topic_configs(&image, "t", &first, &Default::default()).unwrap();
        apply_all(&mut image, &records);
        assert_eq!(image.topic("t").unwrap().configs.len(), 2);

        let second = replace_topic_configs_ops(&image, "t", &[set("retention.ms", "2000")]).unwrap();
        let records = alter_topic_configs(&image, "t", &second, &Default::default()).unwrap();
        apply_all(&mut image, &records);
        let configs = &image.topic("t").unwrap().configs;
        assert_eq!(configs.get("retention.ms").map(String::as_str), Some("2000"));
        assert!(!configs.contains_key("segment.bytes"), "left out, so removed: {configs:?}");

        let emptied = replace_topic_configs_ops(&image, "t", &[("retention.ms".to_string(), None)]).unwrap();
        let records = alter_topic_configs(&image, "t", &emptied, &Default::default()).unwrap();
        apply_all(&mut image, &records);
        assert!(image.topic("t").unwrap().configs.is_empty());
    }

    #[test]
    fn a_name_given_twice_is_refused() {
        let image = image_with_brokers(&[1]);
        let err = replace_topic_configs_ops(&image, "t", &[set("retention.ms", "1"), set("retention.ms", "2")]).unwrap_err();
        assert!(err.contains("more than once"), "{err}");
    }
}

//! Topic config changes (Kafka's `ConfigurationControlManager`): IncrementalAlterConfigs'
//! SET, DELETE, APPEND and SUBTRACT, each value validated before it is written.

use std::collections::BTreeMap;

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
    }
}

//! Client quota changes (Kafka's `ClientQuotaControlManager`): AlterClientQuotas on `user`,
//! `client-id` and `user` + `client-id` entities, each name or the default; every key and value
//! validated before a record is written, and only changed values written.

use std::collections::HashSet;

use kafka_protocol::error::ResponseError;

use crate::metadata::image::MetadataImage;
use crate::metadata::outcome::ApiError;
use crate::metadata::records::{MetadataRecord, QuotaEntity, QuotaName, QuotaValue};

/// Kafka's entity type names.
pub const USER: &str = "user";
pub const CLIENT_ID: &str = "client-id";
pub const IP: &str = "ip";

/// Kafka's quota keys for user and client-id entities.
pub const PRODUCER_BYTE_RATE: &str = "producer_byte_rate";
pub const CONSUMER_BYTE_RATE: &str = "consumer_byte_rate";
pub const REQUEST_PERCENTAGE: &str = "request_percentage";
pub const CONTROLLER_MUTATION_RATE: &str = "controller_mutation_rate";

/// Whether a key holds whole numbers (Kafka's LONG) or any number (DOUBLE).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyType {
    Long,
    Double,
}

/// The keys Kafka accepts on user and client-id entities. The byte rates are enforced
/// (`quota/`); `request_percentage` and `controller_mutation_rate` are not ([`NOT_ENFORCED`]).
const QUOTA_KEYS: &[(&str, KeyType)] = &[
    (PRODUCER_BYTE_RATE, KeyType::Long),
    (CONSUMER_BYTE_RATE, KeyType::Long),
    (REQUEST_PERCENTAGE, KeyType::Double),
    (CONTROLLER_MUTATION_RATE, KeyType::Double),
];

/// Keys Kafka enforces and Sluice does not yet: a value is refused rather than stored and
/// ignored (removing one stored by an earlier build is accepted).
const NOT_ENFORCED: &[&str] = &[REQUEST_PERCENTAGE, CONTROLLER_MUTATION_RATE];

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::new(ResponseError::InvalidRequest, message.into())
}

/// Builds an entity from the request's (entity type, entity name) pairs, as Kafka validates
/// them: not empty, each type once, known types, no empty names (null is the default).
pub fn parse_entity<'a>(
    components: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
) -> Result<QuotaEntity, ApiError> {
    let mut entity = QuotaEntity {
        user: None,
        client_id: None,
    };
    let mut any = false;
    for (entity_type, name) in components {
        any = true;
        let slot = match entity_type {
            USER => &mut entity.user,
            CLIENT_ID => &mut entity.client_id,
            IP => {
                return Err(invalid(
                    "ip quota entities (connection_creation_rate) are not supported by this broker; use user or client-id entities",
                ))
            }
            other => return Err(invalid(format!("Unhandled client quota entity type: {other}"))),
        };
        if slot.is_some() {
            return Err(invalid(format!(
                "Invalid client quota entity, duplicate entity entry {entity_type}"
            )));
        }
        if name == Some("") {
            return Err(invalid(format!(
                "Empty {entity_type} not supported; to name the default entity, send a null name"
            )));
        }
        *slot = Some(QuotaName::from_wire(name));
    }
    if !any {
        return Err(invalid("Invalid empty client quota entity"));
    }
    Ok(entity)
}

/// Validates one entity's changes and returns the records that apply them: a set only when
/// the value differs, a removal only of a key the entity has.
pub fn alter_client_quotas(
    image: &MetadataImage,
    entity: &QuotaEntity,
    ops: &[(String, Option<QuotaValue>)],
) -> Result<Vec<MetadataRecord>, ApiError> {
    if entity.user.is_none() && entity.client_id.is_none() {
        return Err(invalid("Invalid empty client quota entity"));
    }
    let current = image.client_quotas.get(entity);
    let mut records = Vec::with_capacity(ops.len());
    let mut seen = HashSet::with_capacity(ops.len());
    for (key, value) in ops {
        if !seen.insert(key.as_str()) {
            return Err(invalid(format!(
                "Duplicate quota key {key}; no quota of this entity was changed"
            )));
        }
        let current_value = current.and_then(|values| values.get(key));
        match value {
            None if current_value.is_some() => records.push(MetadataRecord::ClientQuota {
                entity: entity.clone(),
                key: key.clone(),
                value: None,
            }),
            None => {}
            Some(value) => {
                validate_value(key, value.0)?;
                if current_value != Some(value) {
                    records.push(MetadataRecord::ClientQuota {
                        entity: entity.clone(),
                        key: key.clone(),
                        value: Some(*value),
                    });
                }
            }
        }
    }
    Ok(records)
}

/// A key Kafka knows, with a finite, non-negative value (whole for byte rates).
fn validate_value(key: &str, value: f64) -> Result<(), ApiError> {
    let Some((_, ty)) = QUOTA_KEYS.iter().find(|(name, _)| *name == key) else {
        let known: Vec<&str> = QUOTA_KEYS.iter().map(|(name, _)| *name).collect();
        return Err(invalid(format!(
            "Invalid configuration key {key}; quota keys are {}",
            known.join(", ")
        )));
    };
    if NOT_ENFORCED.contains(&key) {
        return Err(invalid(format!(
            "Sluice does not enforce {key}, so it refuses the quota rather than accept a limit it would ignore; limit clients with producer_byte_rate and consumer_byte_rate"
        )));
    }
    if !value.is_finite() || value < 0.0 {
        return Err(invalid(format!(
            "Configuration {key} must be a finite, non-negative number, not {value}"
        )));
    }
    if *ty == KeyType::Long && (value.fract() != 0.0 || value > i64::MAX as f64) {
        return Err(invalid(format!(
            "Configuration {key} must be a Long value, not {value}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::test_support::apply_all;

    fn client(name: Option<&str>) -> QuotaEntity {
        QuotaEntity {
            user: None,
            client_id: Some(QuotaName::from_wire(name)),
        }
    }

    fn set(key: &str, value: f64) -> (String, Option<QuotaValue>) {
        (key.to_string(), Some(QuotaValue(value)))
    }

    fn remove(key: &str) -> (String, Option<QuotaValue>) {
        (key.to_string(), None)
    }

    #[test]
    fn entities_parse_with_defaults_and_refuse_what_kafka_refuses() {
        let both = parse_entity([(USER, Some("alice")), (CLIENT_ID, None)]).unwrap();
        assert_eq!(both.user, Some(QuotaName::Named("alice".into())));
        assert_eq!(both.client_id, Some(QuotaName::Default));
        for bad in [
            vec![],
            vec![(USER, Some("a")), (USER, Some("b"))],
            vec![(CLIENT_ID, Some(""))],
            vec![("group", Some("g"))],
            vec![(IP, Some("127.0.0.1"))],
        ] {
            let err = parse_entity(bad.clone()).unwrap_err();
            assert_eq!(err.error, ResponseError::InvalidRequest, "{bad:?}");
            assert!(!err.message.is_empty());
        }
    }

    #[test]
    fn set_change_and_remove_write_only_what_changes() {
        let mut image = MetadataImage::new("c".into());
        let app = client(Some("app"));
        let records = alter_client_quotas(
            &image,
            &app,
            &[set(PRODUCER_BYTE_RATE, 1024.0), set(CONSUMER_BYTE_RATE, 2048.0)],
        )
        .unwrap();
        assert_eq!(records.len(), 2);
        apply_all(&mut image, &records);
        assert_eq!(image.client_quotas[&app][PRODUCER_BYTE_RATE], QuotaValue(1024.0));
        // The same value again changes nothing; removing an absent key writes nothing.
        let records = alter_client_quotas(
            &image,
            &app,
            &[set(PRODUCER_BYTE_RATE, 1024.0), remove(REQUEST_PERCENTAGE)],
        )
        .unwrap();
        assert!(records.is_empty(), "{records:?}");
        let records =
            alter_client_quotas(&image, &app, &[remove(PRODUCER_BYTE_RATE), remove(CONSUMER_BYTE_RATE)]).unwrap();
        apply_all(&mut image, &records);
        assert!(image.client_quotas.is_empty(), "an entity with no keys left is gone");
    }

    #[test]
    fn defaults_are_their_own_entities() {
        let mut image = MetadataImage::new("c".into());
        let records = alter_client_quotas(&image, &client(None), &[set(CONSUMER_BYTE_RATE, 10.0)]).unwrap();
        apply_all(&mut image, &records);
        assert!(image.client_quotas.contains_key(&client(None)));
        assert!(!image.client_quotas.contains_key(&client(Some("app"))));
    }

    #[test]
    fn unknown_keys_and_bad_values_are_invalid_requests() {
        let image = MetadataImage::new("c".into());
        let app = client(Some("app"));
        for ops in [
            vec![set("producer_byte_rates", 1.0)],
            vec![set(PRODUCER_BYTE_RATE, -1.0)],
            vec![set(PRODUCER_BYTE_RATE, f64::NAN)],
            vec![set(PRODUCER_BYTE_RATE, f64::INFINITY)],
            vec![set(PRODUCER_BYTE_RATE, 1.5)],
            vec![set(REQUEST_PERCENTAGE, -0.5)],
            vec![set(PRODUCER_BYTE_RATE, 1.0), set(PRODUCER_BYTE_RATE, 2.0)],
        ] {
            let err = alter_client_quotas(&image, &app, &ops).unwrap_err();
            assert_eq!(err.error, ResponseError::InvalidRequest, "{ops:?}");
        }
        assert!(alter_client_quotas(&image, &app, &[set(CONSUMER_BYTE_RATE, 5.0)]).is_ok());
    }

    /// Quotas Sluice would not enforce are refused, not stored and ignored; one stored by an
    /// earlier build can still be removed.
    #[test]
    fn quotas_sluice_does_not_enforce_are_refused() {
        let mut image = MetadataImage::new("c".into());
        let app = client(Some("app"));
        for key in [REQUEST_PERCENTAGE, CONTROLLER_MUTATION_RATE] {
            let err = alter_client_quotas(&image, &app, &[set(key, 50.0)]).unwrap_err();
            assert_eq!(err.error, ResponseError::InvalidRequest);
            assert!(err.message.contains(&format!("Sluice does not enforce {key}")), "{}", err.message);
        }
        image.apply(&MetadataRecord::ClientQuota {
            entity: app.clone(),
            key: REQUEST_PERCENTAGE.into(),
            value: Some(QuotaValue(50.0)),
        });
        let records = alter_client_quotas(&image, &app, &[remove(REQUEST_PERCENTAGE)]).unwrap();
        apply_all(&mut image, &records);
        assert!(image.client_quotas.is_empty());
        let empty = QuotaEntity {
            user: None,
            client_id: None,
        };
        assert!(alter_client_quotas(&image, &empty, &[set(PRODUCER_BYTE_RATE, 1.0)]).is_err());
    }
}

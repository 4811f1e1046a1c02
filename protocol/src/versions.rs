//! The API version table Sluice advertises in ApiVersions.
//!
//! Clients pick the highest version both sides support and then rely on every field of it,
//! so an API is listed only once its handler implements that whole range. Ranges are the
//! `kafka-protocol` crate's (Kafka 4.1 schemas) unless a handler supports less.

use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::VersionRange;

use crate::apis::IMPLEMENTED;

/// The version range served for `key`, or `None` when the API is not implemented.
pub fn supported_versions(key: ApiKey) -> Option<VersionRange> {
    IMPLEMENTED.contains(&key).then(|| key.valid_versions())
}

/// Every implemented API with its range, in API-key order (the order Kafka lists them).
pub fn all_supported() -> impl Iterator<Item = (ApiKey, VersionRange)> {
    ApiKey::iter().filter_map(|key| supported_versions(key).map(|range| (key, range)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn implemented_apis_are_listed_in_key_order_and_others_are_not() {
        let keys: Vec<i16> = all_supported().map(|(k, _)| k as i16).collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted);
        assert!(supported_versions(ApiKey::Produce).is_some());
        assert!(supported_versions(ApiKey::JoinGroup).is_some());
        assert!(supported_versions(ApiKey::SaslHandshake).is_none());
        assert_eq!(supported_versions(ApiKey::ApiVersions).unwrap().max, 4);
    }
}

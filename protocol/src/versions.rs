//! The API version table Sluice advertises in ApiVersions.
//!
//! Clients pick the highest version both sides support and then rely on every field of it,
//! so an API is listed only once its handler implements that whole range. A range is the
//! one `apis.rs` derives: Kafka 4.1's for the API, narrowed to what the `kafka-protocol`
//! crate's request and response types decode and encode.

use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::VersionRange;

use crate::apis::implemented_versions;

/// The version range served for `key`, or `None` when the API is not implemented.
pub fn supported_versions(key: ApiKey) -> Option<VersionRange> {
    implemented_versions(key).filter(|range| !range.is_empty())
}

/// Every implemented API with its range, in API-key order (the order Kafka lists them).
pub fn all_supported() -> impl Iterator<Item = (ApiKey, VersionRange)> {
    ApiKey::iter().filter_map(|key| supported_versions(key).map(|range| (key, range)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::{default_response, encode_default_request};
    use crate::request::{decode_request, encode_response};
    use bytes::BytesMut;
    use kafka_protocol::messages::RequestHeader;
    use kafka_protocol::protocol::encode_request_header_into_buffer;

    /// What proves the table: a client may send any advertised version, so each must decode
    /// (header and body, through the broker's own entry point) and each must be answerable.
    #[test]
    fn every_advertised_version_decodes_a_request_and_encodes_a_response() {
        let mut checked = 0;
        for (key, range) in all_supported() {
            assert!(!range.is_empty(), "{key:?} is advertised with an empty range {range}");
            for version in range.min..=range.max {
                let mut frame = BytesMut::new();
                let header = RequestHeader::default()
                    .with_request_api_key(key as i16)
                    .with_request_api_version(version)
                    .with_correlation_id(7);
                encode_request_header_into_buffer(&mut frame, &header).unwrap();
                encode_default_request(key, &mut frame, version)
                    .expect("implemented")
                    .unwrap_or_else(|e| panic!("{key:?} v{version}: a default request does not encode: {e}"));
                let request = decode_request(frame.freeze())
                    .unwrap_or_else(|e| panic!("{key:?} v{version}: advertised but not decodable: {e}"));
                assert_eq!((request.api_key, request.api_version), (key, version));

                let response = default_response(key).expect("implemented");
                let encoded = encode_response(version, 7, &response)
                    .unwrap_or_else(|e| panic!("{key:?} v{version}: advertised but not encodable: {e}"));
                assert!(encoded.len() > 8, "{key:?} v{version}: empty response frame");
                checked += 1;
            }
        }
        assert!(checked > 100, "only {checked} API versions checked");
    }

    #[test]
    fn ranges_stop_where_the_crate_stops_decoding() {
        // Kafka 4.1 defines OffsetCommit/OffsetFetch v10 and InitProducerId v6; the crate's
        // request types end at v9, v9 and v5.
        for (key, crate_max) in [
            (ApiKey::OffsetCommit, 9),
            (ApiKey::OffsetFetch, 9),
            (ApiKey::InitProducerId, 5),
        ] {
            assert!(
                key.valid_versions().max > crate_max,
                "{key:?}: the crate caught up; drop this case"
            );
            assert_eq!(supported_versions(key).unwrap().max, crate_max, "{key:?}");
        }
    }

    #[test]
    fn implemented_apis_are_listed_in_key_order_and_others_are_not() {
        let keys: Vec<i16> = all_supported().map(|(k, _)| k as i16).collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted);
        assert!(supported_versions(ApiKey::Produce).is_some());
        assert!(supported_versions(ApiKey::JoinGroup).is_some());
        assert!(supported_versions(ApiKey::SaslHandshake).is_some());
        assert!(supported_versions(ApiKey::EndTxn).is_some());
        assert_eq!(supported_versions(ApiKey::ConsumerGroupHeartbeat).unwrap().max, 1);
        // KIP-932 at the versions every KafkaShareConsumer from 4.1 on speaks (v1; 4.2's v2
        // adds renew acknowledgements the crate does not decode).
        for key in [
            ApiKey::ShareGroupHeartbeat,
            ApiKey::ShareGroupDescribe,
            ApiKey::ShareFetch,
            ApiKey::ShareAcknowledge,
        ] {
            assert_eq!(supported_versions(key).map(|r| (r.min, r.max)), Some((1, 1)), "{key:?}");
        }
        assert!(
            supported_versions(ApiKey::InitializeShareGroupState).is_none(),
            "a broker-to-broker API"
        );
        assert_eq!(supported_versions(ApiKey::ApiVersions).unwrap().max, 4);
    }
}

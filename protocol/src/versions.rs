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
        // KIP-932 at the versions KafkaShareConsumer speaks from 4.1 (v1) to 4.4 (ShareFetch and
        // ShareAcknowledge v2: renew acknowledgements and the record_limit acquire mode).
        for (key, max) in [
            (ApiKey::ShareGroupHeartbeat, 1),
            (ApiKey::ShareGroupDescribe, 1),
            (ApiKey::ShareFetch, 2),
            (ApiKey::ShareAcknowledge, 2),
        ] {
            assert_eq!(
                supported_versions(key).map(|r| (r.min, r.max)),
                Some((1, max)),
                "{key:?}"
            );
        }
        assert!(
            supported_versions(ApiKey::InitializeShareGroupState).is_none(),
            "a broker-to-broker API"
        );
        assert_eq!(supported_versions(ApiKey::ApiVersions).unwrap().max, 4);
    }

    /// The v2 fields of ShareFetch and ShareAcknowledge (the vendored crate's patch) lie where
    /// Kafka 4.4's generated classes put them: the bytes are what `ShareFetchRequestData`,
    /// `ShareAcknowledgeRequestData` and `ShareAcknowledgeResponseData` write.
    #[test]
    fn share_fetch_and_acknowledge_v2_fields_match_kafkas_layout() {
        use kafka_protocol::messages::{ShareAcknowledgeRequest, ShareAcknowledgeResponse, ShareFetchRequest};
        use kafka_protocol::protocol::{Decodable, Encodable};
        fn bytes(hex: &str) -> bytes::Bytes {
            (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect::<Vec<u8>>()
                .into()
        }
        // group "g", member "m", MaxRecords 7, BatchSize 3; v2 adds ShareAcquireMode and IsRenewAck.
        let v1 = ShareFetchRequest::decode(
            &mut bytes("0267026d0000000000000000000000007fffffff0000000700000003010100"),
            1,
        )
        .unwrap();
        assert_eq!(
            (v1.max_records, v1.batch_size, v1.share_acquire_mode, v1.is_renew_ack),
            (7, 3, 0, false)
        );
        let mode = ShareFetchRequest::decode(
            &mut bytes("0267026d0000000000000000000000007fffffff00000000000000000100010100"),
            2,
        )
        .unwrap();
        assert_eq!((mode.share_acquire_mode, mode.is_renew_ack), (1, false));
        let renew = ShareFetchRequest::decode(
            &mut bytes("0267026d0000000000000000000000007fffffff00000000000000000001010100"),
            2,
        )
        .unwrap();
        assert_eq!((renew.share_acquire_mode, renew.is_renew_ack), (0, true));
        let ack = ShareAcknowledgeRequest::decode(&mut bytes("0267026d00000000010100"), 2).unwrap();
        assert!(ack.is_renew_ack);
        let ack_v1 = ShareAcknowledgeRequest::decode(&mut bytes("0267026d000000000100"), 1).unwrap();
        assert!(!ack_v1.is_renew_ack);
        let response = ShareAcknowledgeResponse::default().with_acquisition_lock_timeout_ms(9);
        for (version, hex) in [(1, "00000000000000010100"), (2, "0000000000000000000009010100")] {
            let mut out = bytes::BytesMut::new();
            response.encode(&mut out, version).unwrap();
            assert_eq!(out.freeze(), bytes(hex), "v{version}");
        }
    }
}

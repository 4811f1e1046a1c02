//! Turning a frame body into a typed request, and a response into a frame.
//!
//! The `kafka-protocol` crate decodes message bodies; this module guards it. The crate's
//! header decoder panics on short input and its body decoders fail on versions outside
//! their range, so the fixed header prefix is checked here first and every failure becomes
//! a [`RequestError`] that tells the connection what to do.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, ApiVersionsResponse, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{decode_request_header_from_buffer, Encodable};

use crate::apis::{RequestBody, ResponseBody};
use crate::frame::SIZE_PREFIX_LEN;
use crate::response_frame::{ChunkedBuf, ResponseFrame, MIN_SHARED_BYTES};
use crate::versions::supported_versions;

/// api_key (i16) + api_version (i16) + correlation_id (i32): present in every header version.
const FIXED_HEADER_LEN: usize = 8;

/// A decoded request with the header fields the broker needs.
#[derive(Debug)]
pub struct Request {
    pub api_key: ApiKey,
    pub api_version: i16,
    pub header: RequestHeader,
    pub body: RequestBody,
}

/// Why a frame did not yield a request.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// An ApiVersions request newer than we speak: Kafka answers it with a v0 response
    /// carrying UNSUPPORTED_VERSION so the client can retry at a version we list.
    #[error("ApiVersions v{version} is newer than this broker supports")]
    ApiVersionsTooNew { correlation_id: i32, version: i16 },
    /// Anything else that cannot be decoded: the connection is closed, as Kafka does.
    #[error("{0}; closing the connection")]
    Malformed(String),
}

/// Decodes one frame body (without its size prefix).
pub fn decode_request(mut frame: Bytes) -> Result<Request, RequestError> {
    if frame.len() < FIXED_HEADER_LEN {
        return Err(RequestError::Malformed(format!(
            "request of {} bytes is shorter than a Kafka request header",
            frame.len()
        )));
    }
    let raw_key = i16::from_be_bytes([frame[0], frame[1]]);
    let api_version = i16::from_be_bytes([frame[2], frame[3]]);
    let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
    let api_key =
        ApiKey::try_from(raw_key).map_err(|_| RequestError::Malformed(format!("unknown API key {raw_key}")))?;
    let Some(range) = supported_versions(api_key) else {
        return Err(RequestError::Malformed(format!(
            "API {api_key:?} (key {raw_key}) is not supported by this broker"
        )));
    };
    if api_version > range.max && api_key == ApiKey::ApiVersions {
        return Err(RequestError::ApiVersionsTooNew {
            correlation_id,
            version: api_version,
        });
    }
    if api_version < range.min || api_version > range.max {
        return Err(RequestError::Malformed(format!(
            "{api_key:?} v{api_version} is outside the supported range {range}"
        )));
    }
    let header = decode_request_header_from_buffer(&mut frame)
        .map_err(|e| RequestError::Malformed(format!("bad {api_key:?} request header: {e}")))?;
    let body = RequestBody::decode(api_key, &mut frame, api_version)
        .map_err(|e| RequestError::Malformed(format!("bad {api_key:?} v{api_version} body: {e}")))?
        .ok_or_else(|| RequestError::Malformed(format!("API {api_key:?} has no decoder")))?;
    // Trailing bytes are ignored, as Kafka ignores them: librdkafka 2.x sends three extra
    // bytes after an all-topics Metadata v12+ body, and rejecting them breaks every such client.
    Ok(Request {
        api_key,
        api_version,
        header,
        body,
    })
}

/// Encodes a response frame (size prefix, header, body) for a request.
pub fn encode_response(api_version: i16, correlation_id: i32, body: &ResponseBody) -> Result<BytesMut, EncodeError> {
    let mut buf = BytesMut::with_capacity(256);
    buf.put_i32(0);
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    let header_version = body.api_key().response_header_version(api_version);
    header.encode(&mut buf, header_version).map_err(EncodeError::encode)?;
    body.encode(&mut buf, api_version).map_err(EncodeError::encode)?;
    patch_size_prefix(&mut buf)?;
    Ok(buf)
}

/// [`encode_response`] as a chunked frame: a Fetch response's record sets go into it by
/// reference, not copied (`response_frame.rs`). Other responses are one chunk.
pub fn encode_response_frame(
    api_version: i16,
    correlation_id: i32,
    body: &ResponseBody,
) -> Result<ResponseFrame, EncodeError> {
    let candidates = shared_record_sets(body);
    if candidates.is_empty() {
        let buf = encode_response(api_version, correlation_id, body)?;
        return Ok(ResponseFrame {
            chunks: vec![buf.freeze()],
        });
    }
    let mut buf = ChunkedBuf::new(256, candidates);
    buf.put_i32(0);
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    let header_version = body.api_key().response_header_version(api_version);
    header.encode(&mut buf, header_version).map_err(EncodeError::encode)?;
    body.encode(&mut buf, api_version).map_err(EncodeError::encode)?;
    let size = i32::try_from(buf.len() - SIZE_PREFIX_LEN).map_err(|_| EncodeError::TooLarge(buf.len()))?;
    buf.patch(0, &size.to_be_bytes());
    Ok(buf.finish())
}

/// The record sets of a Fetch response large enough to send by reference, in encoding order.
fn shared_record_sets(body: &ResponseBody) -> Vec<Bytes> {
    match body {
        ResponseBody::Fetch(fetch) => fetch
            .responses
            .iter()
            .flat_map(|t| t.partitions.iter())
            .filter_map(|p| p.records.clone())
            .filter(|r| r.len() >= MIN_SHARED_BYTES)
            .collect(),
        _ => Vec::new(),
    }
}

/// The v0 ApiVersions reply to a too-new ApiVersions request (always header v0).
pub fn encode_api_versions_too_new(correlation_id: i32, body: &ApiVersionsResponse) -> Result<BytesMut, EncodeError> {
    encode_response(0, correlation_id, &ResponseBody::ApiVersions(body.clone()))
}

fn patch_size_prefix(buf: &mut BytesMut) -> Result<(), EncodeError> {
    let size = i32::try_from(buf.len() - SIZE_PREFIX_LEN).map_err(|_| EncodeError::TooLarge(buf.len()))?;
    buf[..SIZE_PREFIX_LEN].copy_from_slice(&size.to_be_bytes());
    Ok(())
}

/// A response that could not be encoded: a broker bug, logged and answered by closing.
#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    #[error("failed to encode response: {0}")]
    Encode(String),
    #[error("response of {0} bytes exceeds the 2 GiB frame limit")]
    TooLarge(usize),
}

impl EncodeError {
    fn encode(e: impl std::fmt::Display) -> Self {
        EncodeError::Encode(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::MetadataRequest;
    use kafka_protocol::protocol::{encode_request_header_into_buffer, StrBytes};

    #[test]
    fn a_chunked_fetch_response_is_the_plain_encoding_with_records_by_reference() {
        use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
        use kafka_protocol::messages::FetchResponse;
        let big = Bytes::from(vec![5u8; 3 * MIN_SHARED_BYTES]);
        let small = Bytes::from(vec![6u8; 100]);
        let partition = |i: i32, records: &Bytes| {
            PartitionData::default()
                .with_partition_index(i)
                .with_high_watermark(10)
                .with_records(Some(records.clone()))
        };
        let body = ResponseBody::Fetch(FetchResponse::default().with_session_id(9).with_responses(vec![
            FetchableTopicResponse::default().with_partitions(vec![
                partition(0, &big),
                partition(1, &small),
                partition(2, &big),
            ]),
        ]));
        for version in [7, 12, 16] {
            let plain = encode_response(version, 7, &body).unwrap();
            let frame = encode_response_frame(version, 7, &body).unwrap();
            assert_eq!(frame.to_bytes(), plain, "v{version}");
            let shared = frame.chunks.iter().filter(|c| c.as_ptr() == big.as_ptr()).count();
            assert_eq!(shared, 2, "v{version}: both large record sets by reference");
        }
    }

    fn frame_for(key: ApiKey, version: i16, body: &MetadataRequest) -> Bytes {
        let mut buf = BytesMut::new();
        let header = RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version)
            .with_correlation_id(42)
            .with_client_id(Some(StrBytes::from_static_str("test")));
        encode_request_header_into_buffer(&mut buf, &header).unwrap();
        body.encode(&mut buf, version).unwrap();
        buf.freeze()
    }

    #[test]
    fn metadata_request_round_trips() {
        let body = MetadataRequest::default().with_topics(None);
        let req = decode_request(frame_for(ApiKey::Metadata, 12, &body)).unwrap();
        assert_eq!(req.api_key, ApiKey::Metadata);
        assert_eq!(req.header.correlation_id, 42);
        assert!(matches!(req.body, RequestBody::Metadata(_)));
    }

    #[test]
    fn trailing_bytes_after_a_body_are_ignored_as_kafka_does() {
        // librdkafka 2.16's all-topics Metadata v13, byte for byte.
        let frame = Bytes::from_static(&[
            0, 3, 0, 13, 0, 0, 0, 3, 0, 7, b'r', b'd', b'k', b'a', b'f', b'k', b'a', 0, 0, 0, 0, 0, 1, 0, 0,
        ]);
        let req = decode_request(frame).unwrap();
        match req.body {
            RequestBody::Metadata(m) => assert!(m.topics.is_none()),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn short_and_unknown_frames_are_malformed_not_panics() {
        for bytes in [
            &[][..],
            &[0, 3][..],
            &[0, 3, 0, 1, 0, 0, 0][..],
            &[0x27, 0x0f, 0, 0, 0, 0, 0, 1][..],
        ] {
            assert!(matches!(
                decode_request(Bytes::copy_from_slice(bytes)),
                Err(RequestError::Malformed(_))
            ));
        }
        // A valid header prefix followed by garbage.
        let garbage = Bytes::from_static(&[0, 3, 0, 12, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0xff]);
        assert!(matches!(decode_request(garbage), Err(RequestError::Malformed(_))));
    }

    /// A request header (v1 below the flexible versions, v2 from them) with an empty client id.
    fn header(key: ApiKey, version: i16) -> Vec<u8> {
        let mut frame = Vec::new();
        frame.extend_from_slice(&(key as i16).to_be_bytes());
        frame.extend_from_slice(&version.to_be_bytes());
        frame.extend_from_slice(&9i32.to_be_bytes());
        frame.extend_from_slice(&0i16.to_be_bytes());
        if key.request_header_version(version) >= 2 {
            frame.push(0); // no tagged fields
        }
        frame
    }

    fn refused(frame: Vec<u8>) -> String {
        match decode_request(Bytes::from(frame)) {
            Err(RequestError::Malformed(reason)) => reason,
            other => panic!("expected a malformed request, got {other:?}"),
        }
    }

    #[test]
    fn counts_beyond_the_frame_are_refused_before_allocating() {
        // Metadata v0: topics array of 0x7fffffff, the 19-byte request that used to abort.
        let mut frame = header(ApiKey::Metadata, 0);
        frame.extend_from_slice(&i32::MAX.to_be_bytes());
        assert!(refused(frame).contains("only 0 bytes remain"));

        // Metadata v12 (flexible): compact array length as a 5-byte varint of u32::MAX.
        let mut frame = header(ApiKey::Metadata, 12);
        frame.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
        assert!(refused(frame).contains("CompactArray"));

        // Produce v3: transactional id null, acks, timeout, then 0x7fffffff topics.
        let mut frame = header(ApiKey::Produce, 3);
        frame.extend_from_slice(&(-1i16).to_be_bytes());
        frame.extend_from_slice(&(-1i16).to_be_bytes());
        frame.extend_from_slice(&1000i32.to_be_bytes());
        frame.extend_from_slice(&i32::MAX.to_be_bytes());
        refused(frame);

        // JoinGroup v9 (flexible): group id "g", session timeout, rebalance timeout, member id
        // "", group instance id null, protocol type "consumer", then a protocols compact array
        // claiming four billion entries.
        let mut frame = header(ApiKey::JoinGroup, 9);
        frame.extend_from_slice(&[2, b'g']);
        frame.extend_from_slice(&10_000i32.to_be_bytes());
        frame.extend_from_slice(&10_000i32.to_be_bytes());
        frame.extend_from_slice(&[1, 0]);
        frame.push(9);
        frame.extend_from_slice(b"consumer");
        frame.extend_from_slice(&[0xfe, 0xff, 0xff, 0xff, 0x0f]);
        refused(frame);

        // ConsumerGroupHeartbeat v1 (KIP-848): group "g", member "m", epoch 0, no instance or
        // rack, rebalance timeout, then subscribed topic names claiming four billion entries.
        let mut frame = header(ApiKey::ConsumerGroupHeartbeat, 1);
        frame.extend_from_slice(&[2, b'g', 2, b'm']);
        frame.extend_from_slice(&0i32.to_be_bytes());
        frame.extend_from_slice(&[0, 0]);
        frame.extend_from_slice(&30_000i32.to_be_bytes());
        frame.extend_from_slice(&[0xfe, 0xff, 0xff, 0xff, 0x0f]);
        refused(frame);

        // ConsumerGroupDescribe v0: a group ids compact array claiming four billion entries.
        let mut frame = header(ApiKey::ConsumerGroupDescribe, 0);
        frame.extend_from_slice(&[0xfe, 0xff, 0xff, 0xff, 0x0f]);
        refused(frame);

        // ShareFetch v1 (KIP-932): group "g", member "m", session epoch, max wait, min bytes,
        // max bytes, max records, batch size, then topics claiming four billion entries.
        let mut frame = header(ApiKey::ShareFetch, 1);
        frame.extend_from_slice(&[2, b'g', 2, b'm']);
        for value in [0i32, 500, 1, 1 << 20, 500, 500] {
            frame.extend_from_slice(&value.to_be_bytes());
        }
        frame.extend_from_slice(&[0xfe, 0xff, 0xff, 0xff, 0x0f]);
        refused(frame);

        // ShareGroupHeartbeat v1: group "g", member "m", epoch 0, no rack, then subscribed topic
        // names claiming four billion entries.
        let mut frame = header(ApiKey::ShareGroupHeartbeat, 1);
        frame.extend_from_slice(&[2, b'g', 2, b'm']);
        frame.extend_from_slice(&0i32.to_be_bytes());
        frame.push(0);
        frame.extend_from_slice(&[0xfe, 0xff, 0xff, 0xff, 0x0f]);
        refused(frame);

        // ShareGroupDescribe v1, DescribeShareGroupOffsets v1: a groups compact array claiming
        // four billion entries.
        for (api, version) in [(ApiKey::ShareGroupDescribe, 1), (ApiKey::DescribeShareGroupOffsets, 1)] {
            let mut frame = header(api, version);
            frame.extend_from_slice(&[0xfe, 0xff, 0xff, 0xff, 0x0f]);
            refused(frame);
        }

        // AlterShareGroupOffsets and DeleteShareGroupOffsets v0, and the brokers'
        // ReadShareGroupState and WriteShareGroupState v0: group "g", then topics claiming four
        // billion entries.
        for api in [
            ApiKey::AlterShareGroupOffsets,
            ApiKey::DeleteShareGroupOffsets,
            ApiKey::ReadShareGroupState,
            ApiKey::WriteShareGroupState,
        ] {
            let mut frame = header(api, 0);
            frame.extend_from_slice(&[2, b'g']);
            frame.extend_from_slice(&[0xfe, 0xff, 0xff, 0xff, 0x0f]);
            refused(frame);
        }

        // ShareAcknowledge v1: group "g", member "m", session epoch 1, then topics claiming four
        // billion entries.
        let mut frame = header(ApiKey::ShareAcknowledge, 1);
        frame.extend_from_slice(&[2, b'g', 2, b'm']);
        frame.extend_from_slice(&1i32.to_be_bytes());
        frame.extend_from_slice(&[0xfe, 0xff, 0xff, 0xff, 0x0f]);
        refused(frame);

        // OffsetCommit v2: a group id whose length runs past the end of the frame.
        let mut frame = header(ApiKey::OffsetCommit, 2);
        frame.extend_from_slice(&i16::MAX.to_be_bytes());
        frame.extend_from_slice(b"abc");
        refused(frame);

        // SyncGroup v3: an assignment whose byte length claims 2 GiB.
        let mut frame = header(ApiKey::SyncGroup, 3);
        for s in [&b"g"[..], b"member"] {
            frame.extend_from_slice(&(s.len() as i16).to_be_bytes());
            frame.extend_from_slice(s);
        }
        frame.extend_from_slice(&1i32.to_be_bytes()); // generation
        frame.extend_from_slice(&(-1i16).to_be_bytes()); // group instance id
        frame.extend_from_slice(&1i32.to_be_bytes()); // one assignment
        frame.extend_from_slice(&(6i16).to_be_bytes());
        frame.extend_from_slice(b"member");
        frame.extend_from_slice(&i32::MAX.to_be_bytes());
        refused(frame);
    }

    #[test]
    fn too_new_api_versions_is_answered_not_closed() {
        let frame = Bytes::from_static(&[0, 18, 0, 99, 0, 0, 0, 7, 0xff, 0xff]);
        match decode_request(frame) {
            Err(RequestError::ApiVersionsTooNew {
                correlation_id,
                version,
            }) => {
                assert_eq!((correlation_id, version), (7, 99));
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn response_frame_has_correct_size_prefix() {
        let body = ResponseBody::ApiVersions(ApiVersionsResponse::default());
        let frame = encode_response(3, 5, &body).unwrap();
        let size = i32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]) as usize;
        assert_eq!(size, frame.len() - 4);
        assert_eq!(&frame[4..8], &5i32.to_be_bytes());
    }
}

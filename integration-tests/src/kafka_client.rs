//! A minimal blocking Kafka client over the `kafka-protocol` codecs, for tests that need
//! fields the client libraries do not expose (the controller id, quorum state, exact error
//! codes of admin requests).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::create_topics_request::{
    CreatableReplicaAssignment, CreatableTopic, CreatableTopicConfig,
};
use kafka_protocol::messages::describe_quorum_request::{PartitionData, TopicData};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::fetch_response;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::produce_response::PartitionProduceResponse;
use kafka_protocol::messages::{
    ApiKey, BrokerId, CreateTopicsRequest, DescribeQuorumRequest, FetchRequest, FetchResponse, MetadataRequest,
    ProduceRequest, RequestHeader, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};

use crate::security::{ClientSecurity, KafkaStream};
use crate::wire;

/// Sends one request at `version` and decodes its response.
pub fn call<R: Request>(addr: SocketAddr, request: &R, version: i16, timeout: Duration) -> Result<R::Response> {
    KafkaConnection::connect(addr, "sluice-it", timeout)?.call(request, version)
}

/// [`call`] on a connection secured (TLS, SASL login) as `security` says.
pub fn call_secured<R: Request>(
    addr: SocketAddr,
    security: &ClientSecurity,
    request: &R,
    version: i16,
    timeout: Duration,
) -> Result<R::Response> {
    KafkaConnection::connect_secured(addr, security, "sluice-it", timeout)?.call(request, version)
}

/// One client connection, kept across requests, with its own client id (quotas apply per
/// client id, and a throttled client's next request waits on the same connection).
pub struct KafkaConnection {
    stream: KafkaStream,
    client_id: StrBytes,
    correlation_id: i32,
}

impl KafkaConnection {
    pub fn connect(addr: SocketAddr, client_id: &str, timeout: Duration) -> Result<KafkaConnection> {
        Self::connect_secured(addr, &ClientSecurity::default(), client_id, timeout)
    }

    /// [`Self::connect`], then the TLS handshake and SASL login `security` asks for.
    pub fn connect_secured(
        addr: SocketAddr,
        security: &ClientSecurity,
        client_id: &str,
        timeout: Duration,
    ) -> Result<KafkaConnection> {
        let stream =
            TcpStream::connect_timeout(&addr, Duration::from_secs(5)).with_context(|| format!("connect {addr}"))?;
        stream.set_read_timeout(Some(timeout))?;
        let stream = match (&security.tls, &security.sasl) {
            (None, None) => KafkaStream::Plain(stream),
            _ => security.secure(stream, addr)?,
        };
        Ok(KafkaConnection {
            stream,
            client_id: StrBytes::from_string(client_id.to_string()),
            correlation_id: 0,
        })
    }

    /// Sends one request at `version` and decodes its response.
    pub fn call<R: Request>(&mut self, request: &R, version: i16) -> Result<R::Response> {
        self.correlation_id += 1;
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation_id)
            .with_client_id(Some(self.client_id.clone()));
        let mut buf = BytesMut::new();
        buf.put_i32(0);
        header.encode(&mut buf, R::header_version(version))?;
        request.encode(&mut buf, version)?;
        let size = (buf.len() - 4) as i32;
        buf[..4].copy_from_slice(&size.to_be_bytes());
        self.stream.write_all(&buf)?;
        let mut len = [0u8; 4];
        self.stream.read_exact(&mut len).context("read response size")?;
        let mut body = vec![0u8; i32::from_be_bytes(len) as usize];
        self.stream.read_exact(&mut body).context("read response body")?;
        let mut body = Bytes::from(body);
        let response_header = ResponseHeader::decode(&mut body, R::Response::header_version(version))?;
        ensure!(
            response_header.correlation_id == self.correlation_id,
            "correlation id mismatch"
        );
        let response = R::Response::decode(&mut body, version)?;
        ensure!(
            !body.has_remaining() || ApiKey::try_from(R::KEY).is_ok(),
            "trailing bytes"
        );
        Ok(response)
    }
}

/// All-topics Metadata v12 (controller id, brokers, topics with leaders).
pub fn metadata(addr: SocketAddr) -> Result<kafka_protocol::messages::MetadataResponse> {
    metadata_secured(addr, &ClientSecurity::default())
}

/// [`metadata`] over a connection secured as `security` says.
pub fn metadata_secured(
    addr: SocketAddr,
    security: &ClientSecurity,
) -> Result<kafka_protocol::messages::MetadataResponse> {
    call_secured(
        addr,
        security,
        &MetadataRequest::default().with_topics(None),
        12,
        Duration::from_secs(10),
    )
}

/// The id of `topic`, as Metadata lists it.
pub fn topic_id(addr: SocketAddr, topic: &str) -> Result<uuid::Uuid> {
    metadata(addr)?
        .topics
        .iter()
        .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == topic))
        .map(|t| t.topic_id)
        .with_context(|| format!("{topic} is not in metadata"))
}

/// CreateTopics v7 for one topic (one replica per partition); returns the per-topic error code.
pub fn create_topic(addr: SocketAddr, name: &str, partitions: i32, timeout: Duration) -> Result<i16> {
    create_topic_secured(addr, &ClientSecurity::default(), name, partitions, timeout)
}

/// [`create_topic`] on a connection logged in as `security` says.
pub fn create_topic_secured(
    addr: SocketAddr,
    security: &ClientSecurity,
    name: &str,
    partitions: i32,
    timeout: Duration,
) -> Result<i16> {
    let topic = CreatableTopic::default()
        .with_name(TopicName(StrBytes::from_string(name.to_string())))
        .with_num_partitions(partitions)
        .with_replication_factor(1);
    let request = CreateTopicsRequest::default()
        .with_topics(vec![topic])
        .with_timeout_ms(30_000);
    let response = call_secured(addr, security, &request, 7, timeout)?;
    let result = response.topics.first().context("no topic result")?;
    Ok(result.error_code)
}

/// CreateTopics v7 with explicit replica lists, one per partition; fails unless created.
pub fn create_topic_on(addr: SocketAddr, topic: &str, assignments: &[&[i32]]) -> Result<()> {
    create_topic_with_configs(addr, topic, assignments, &[])
}

/// [`create_topic_on`] with topic configs (`min.insync.replicas`, ...).
pub fn create_topic_with_configs(
    addr: SocketAddr,
    topic: &str,
    assignments: &[&[i32]],
    configs: &[(&str, &str)],
) -> Result<()> {
    let assignments = assignments
        .iter()
        .enumerate()
        .map(|(i, replicas)| {
            CreatableReplicaAssignment::default()
                .with_partition_index(i as i32)
                .with_broker_ids(replicas.iter().map(|id| BrokerId(*id)).collect())
        })
        .collect();
    let request = CreateTopicsRequest::default()
        .with_topics(vec![CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_num_partitions(-1)
            .with_replication_factor(-1)
            .with_assignments(assignments)
            .with_configs(
                configs
                    .iter()
                    .map(|(name, value)| {
                        CreatableTopicConfig::default()
                            .with_name(StrBytes::from_string(name.to_string()))
                            .with_value(Some(StrBytes::from_string(value.to_string())))
                    })
                    .collect(),
            )])
        .with_timeout_ms(30_000);
    let response = call(addr, &request, 7, Duration::from_secs(30))?;
    let code = response.topics.first().context("no topic result")?.error_code;
    ensure!(code == 0, "creating {topic} failed with error code {code}");
    Ok(())
}

/// DescribeQuorum v2 for the metadata log.
pub fn describe_quorum(addr: SocketAddr) -> Result<kafka_protocol::messages::DescribeQuorumResponse> {
    let topic = TopicData::default()
        .with_topic_name(TopicName(StrBytes::from_static_str("__cluster_metadata")))
        .with_partitions(vec![PartitionData::default()]);
    call(
        addr,
        &DescribeQuorumRequest::default().with_topics(vec![topic]),
        2,
        Duration::from_secs(10),
    )
}

/// Produce v9 of `records` (whole batches) to partition 0 of `topic` with `acks` and the
/// request timeout `timeout`: the partition's answer.
pub fn produce_to_partition_0(
    addr: SocketAddr,
    topic: &str,
    acks: i16,
    records: Bytes,
    timeout: Duration,
) -> Result<PartitionProduceResponse> {
    let request = ProduceRequest::default()
        .with_acks(acks)
        .with_timeout_ms(timeout.as_millis().min(i32::MAX as u128) as i32)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(records))])]);
    // The broker answers by the request timeout; the socket waits a little longer.
    let response = call(addr, &request, 9, timeout + Duration::from_secs(10))?;
    response
        .responses
        .into_iter()
        .next()
        .and_then(|t| t.partition_responses.into_iter().next())
        .context("produce response without a partition")
}

/// [`produce_to_partition_0`] of one small record: the partition's error code.
pub fn produce_one_record(addr: SocketAddr, topic: &str, acks: i16) -> Result<i16> {
    let batch = wire::record_batch_v2(
        crate::clients::now_ms(),
        &[wire::RawRecord {
            key: Some(b"k"),
            value: Some(b"v"),
        }],
    );
    let answer = produce_to_partition_0(addr, topic, acks, Bytes::from(batch), Duration::from_secs(5))?;
    Ok(answer.error_code)
}

/// Fetch v12 names topics (v13+ use ids).
pub const FETCH_VERSION_BY_NAME: i16 = 12;

/// Partition 0 of `topic` from `offset` in a Fetch v12 request (by name).
pub fn fetch_topic(topic: &str, offset: i64, partition_max_bytes: i32) -> FetchTopic {
    FetchTopic::default()
        .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
        .with_partitions(vec![FetchPartition::default()
            .with_partition(0)
            .with_fetch_offset(offset)
            .with_partition_max_bytes(partition_max_bytes)])
}

/// A consumer's Fetch v12 of partition 0 of `topic` from `offset`, waiting up to `max_wait_ms`
/// for a first byte.
pub fn consumer_fetch_request(topic: &str, offset: i64, max_wait_ms: i32) -> FetchRequest {
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(i32::MAX)
        .with_topics(vec![fetch_topic(topic, offset, i32::MAX)])
}

/// The first partition of a fetch response, failing on a request-level error.
pub fn first_fetch_partition(response: &FetchResponse) -> Result<&fetch_response::PartitionData> {
    ensure!(
        response.error_code == 0,
        "fetch failed: error code {}",
        response.error_code
    );
    response
        .responses
        .first()
        .and_then(|t| t.partitions.first())
        .context("fetch response without a partition")
}

/// A consumer's Fetch v12 (by name) of partition 0 from `offset`, answered at once; its record
/// bytes.
pub fn consumer_fetch(
    addr: SocketAddr,
    topic: &str,
    offset: i64,
    max_bytes: i32,
    partition_max_bytes: i32,
) -> Result<Bytes> {
    let request = consumer_fetch_request(topic, offset, 0)
        .with_max_bytes(max_bytes)
        .with_topics(vec![fetch_topic(topic, offset, partition_max_bytes)]);
    let response = call(addr, &request, FETCH_VERSION_BY_NAME, Duration::from_secs(30))?;
    let partition = first_fetch_partition(&response)?;
    ensure!(
        partition.error_code == 0,
        "fetch at {offset}: error code {}",
        partition.error_code
    );
    Ok(partition.records.clone().unwrap_or_default())
}

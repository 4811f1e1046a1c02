//! Client quotas end to end on a real node: AlterClientQuotas and DescribeClientQuotas over the
//! wire (rdkafka has no quota admin), a produce and a consume quota that hold a client near
//! its byte rate (throttle_time_ms in the answers, the connection paused), and quotas kept
//! across a restart.
//!
//! The rate bounds are generous (3x the quota) but fail without throttling: an unthrottled
//! client on loopback moves megabytes per second. Kafka measures a rate over at least
//! `quota.window.num - 1` samples (10 s), so a client may first send 10 s worth at once; the
//! measurement runs long enough that this burst alone stays under the bound.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use bytes::Bytes;
use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    AlterClientQuotasRequest, BrokerId, DescribeClientQuotasRequest, DescribeClientQuotasResponse, FetchRequest,
    ProduceRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use sluice_integration_tests::kafka_client::{self, KafkaConnection};
use sluice_integration_tests::wire::{record_batch_v2, RawRecord};
use sluice_integration_tests::{NodeOptions, SluiceNode};

const TIMEOUT: Duration = Duration::from_secs(30);
/// Kafka's INVALID_REQUEST.
const INVALID_REQUEST: i16 = 42;
const MATCH_EXACT: i8 = 0;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// AlterClientQuotas v1 for one client-id entity; returns the entry's error code and message.
fn alter_client_quota(
    addr: SocketAddr,
    client_id: &str,
    key: &str,
    value: Option<f64>,
) -> Result<(i16, Option<String>)> {
    let entry = EntryData::default()
        .with_entity(vec![EntityData::default()
            .with_entity_type(s("client-id"))
            .with_entity_name(Some(s(client_id)))])
        .with_ops(vec![OpData::default()
            .with_key(s(key))
            .with_value(value.unwrap_or(0.0))
            .with_remove(value.is_none())]);
    let response = kafka_client::call(
        addr,
        &AlterClientQuotasRequest::default().with_entries(vec![entry]),
        1,
        TIMEOUT,
    )?;
    let result = response
        .entries
        .first()
        .context("no entry in the AlterClientQuotas response")?;
    Ok((result.error_code, result.error_message.as_ref().map(|m| m.to_string())))
}

/// The quotas of exactly the client-id entity `client_id` (strict EXACT filter).
fn client_quotas(addr: SocketAddr, client_id: &str) -> Result<Vec<(String, f64)>> {
    let request = DescribeClientQuotasRequest::default()
        .with_components(vec![ComponentData::default()
            .with_entity_type(s("client-id"))
            .with_match_type(MATCH_EXACT)
            .with_match(Some(s(client_id)))])
        .with_strict(true);
    let response: DescribeClientQuotasResponse = kafka_client::call(addr, &request, 1, TIMEOUT)?;
    ensure!(
        response.error_code == 0,
        "describe failed: {:?}",
        response.error_message
    );
    let entries = response.entries.unwrap_or_default();
    Ok(entries
        .iter()
        .flat_map(|e| e.values.iter().map(|v| (v.key.to_string(), v.value)))
        .collect())
}

fn produce_request(topic: &str, batch: &[u8]) -> ProduceRequest {
    ProduceRequest::default()
        .with_acks(1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(s(topic)))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(Bytes::copy_from_slice(batch)))])])
}

/// A batch of ten 1000-byte records, about 10 KB.
fn ten_kb_batch() -> Vec<u8> {
    let value = vec![b'q'; 1000];
    let records: Vec<RawRecord> = (0..10)
        .map(|_| RawRecord {
            key: None,
            value: Some(&value),
        })
        .collect();
    record_batch_v2(0, &records)
}

/// Produces ten-kilobyte batches on one connection for `duration`; returns the bytes produced,
/// the seconds it took and the largest throttle time answered.
fn produce_for(addr: SocketAddr, client_id: &str, topic: &str, duration: Duration) -> Result<(usize, f64, i32)> {
    let mut connection = KafkaConnection::connect(addr, client_id, TIMEOUT)?;
    let batch = ten_kb_batch();
    let request = produce_request(topic, &batch);
    let started = Instant::now();
    let (mut bytes, mut max_throttle) = (0, 0);
    while started.elapsed() < duration {
        let response = connection.call(&request, 9)?;
        let error = response.responses[0].partition_responses[0].error_code;
        ensure!(error == 0, "produce failed with error {error}");
        bytes += batch.len();
        max_throttle = max_throttle.max(response.throttle_time_ms);
    }
    Ok((bytes, started.elapsed().as_secs_f64(), max_throttle))
}

fn start_with_topic(topic: &str) -> Result<SluiceNode> {
    let node = SluiceNode::start(NodeOptions::default())?;
    let error = kafka_client::create_topic(node.addr(), topic, 1, TIMEOUT)?;
    ensure!(error == 0, "create topic {topic}: error {error}");
    Ok(node)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_byte_rate_holds_a_client_near_its_quota_and_survives_a_restart() -> Result<()> {
    let mut node = start_with_topic("quota-produce")?;
    let addr = node.addr();
    const QUOTA: f64 = 20_000.0;
    let (error, message) = alter_client_quota(addr, "slow-producer", "producer_byte_rate", Some(QUOTA))?;
    ensure!(error == 0, "AlterClientQuotas failed: {error} {message:?}");
    ensure!(
        client_quotas(addr, "slow-producer")? == vec![("producer_byte_rate".to_string(), QUOTA)],
        "describe does not show the quota set"
    );
    for (key, value) in [
        ("producer_byte_rate", -1.0),
        ("producer_byte_rate", f64::NAN),
        ("no_such_rate", 1.0),
    ] {
        let (error, message) = alter_client_quota(addr, "slow-producer", key, Some(value))?;
        ensure!(
            error == INVALID_REQUEST && message.is_some(),
            "{key}={value} answered {error} {message:?}"
        );
    }

    let (bytes, seconds, max_throttle) = produce_for(addr, "slow-producer", "quota-produce", Duration::from_secs(8))?;
    let rate = bytes as f64 / seconds;
    eprintln!("producer: {bytes} bytes in {seconds:.1} s = {rate:.0} B/s, largest throttle {max_throttle} ms");
    ensure!(
        rate < 3.0 * QUOTA,
        "a producer with a {QUOTA} B/s quota achieved {rate:.0} B/s ({bytes} bytes in {seconds:.1} s)"
    );
    ensure!(max_throttle > 0, "no produce response carried a throttle time");
    // Another client id is not held back by this quota.
    let (other_bytes, other_seconds, other_throttle) =
        produce_for(addr, "free-producer", "quota-produce", Duration::from_secs(1))?;
    ensure!(
        other_throttle == 0 && other_bytes as f64 / other_seconds > 3.0 * QUOTA,
        "an unquoted client id was throttled: {other_bytes} bytes in {other_seconds:.1} s, throttle {other_throttle}"
    );

    node.respawn()?;
    node.wait_ready()?;
    ensure!(
        client_quotas(addr, "slow-producer")? == vec![("producer_byte_rate".to_string(), QUOTA)],
        "the quota did not survive a restart"
    );
    let (error, _) = alter_client_quota(addr, "slow-producer", "producer_byte_rate", None)?;
    ensure!(error == 0, "removing the quota failed: {error}");
    ensure!(
        client_quotas(addr, "slow-producer")?.is_empty(),
        "the removed quota is still described"
    );
    Ok(())
}

/// Fetch v12 (topics by name) of partition 0 from `offset`, as a consumer.
fn fetch_request(topic: &str, offset: i64) -> FetchRequest {
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(100)
        .with_min_bytes(1)
        .with_max_bytes(50 * 1024 * 1024)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(s(topic)))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(offset)
                .with_current_leader_epoch(-1)
                .with_log_start_offset(-1)
                .with_partition_max_bytes(10 * 1024 * 1024)])])
}

/// The offset after the last whole batch in fetched record bytes (v2 batch headers).
fn next_offset(records: &[u8], mut offset: i64) -> i64 {
    let mut rest = records;
    while rest.len() >= 61 {
        let length = i32::from_be_bytes(rest[8..12].try_into().unwrap()) as usize;
        if rest.len() < 12 + length {
            break;
        }
        let base = i64::from_be_bytes(rest[0..8].try_into().unwrap());
        let last_delta = i32::from_be_bytes(rest[23..27].try_into().unwrap());
        offset = base + i64::from(last_delta) + 1;
        rest = &rest[12 + length..];
    }
    offset
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_byte_rate_holds_a_consumer_near_its_quota() -> Result<()> {
    let node = start_with_topic("quota-fetch")?;
    let addr = node.addr();
    // 1 MB to read, produced by a client without a quota.
    let mut producer = KafkaConnection::connect(addr, "loader", TIMEOUT)?;
    let batch = ten_kb_batch();
    for _ in 0..100 {
        let response = producer.call(&produce_request("quota-fetch", &batch), 9)?;
        ensure!(
            response.responses[0].partition_responses[0].error_code == 0,
            "load failed"
        );
    }
    const QUOTA: f64 = 20_000.0;
    let (error, message) = alter_client_quota(addr, "slow-consumer", "consumer_byte_rate", Some(QUOTA))?;
    ensure!(error == 0, "AlterClientQuotas failed: {error} {message:?}");

    let mut consumer = KafkaConnection::connect(addr, "slow-consumer", TIMEOUT)?;
    let started = Instant::now();
    let (mut offset, mut bytes, mut max_throttle) = (0, 0, 0);
    while started.elapsed() < Duration::from_secs(8) {
        let response = consumer.call(&fetch_request("quota-fetch", offset), 12)?;
        max_throttle = max_throttle.max(response.throttle_time_ms);
        for partition in response.responses.iter().flat_map(|t| t.partitions.iter()) {
            ensure!(
                partition.error_code == 0,
                "fetch failed with error {}",
                partition.error_code
            );
            let records = partition.records.clone().unwrap_or_default();
            bytes += records.len();
            offset = next_offset(&records, offset);
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let rate = bytes as f64 / seconds;
    eprintln!("consumer: {bytes} bytes in {seconds:.1} s = {rate:.0} B/s, largest throttle {max_throttle} ms");
    ensure!(bytes > 0, "the consumer read nothing");
    ensure!(
        rate < 3.0 * QUOTA,
        "a consumer with a {QUOTA} B/s quota achieved {rate:.0} B/s ({bytes} bytes in {seconds:.1} s)"
    );
    ensure!(max_throttle > 0, "no fetch response carried a throttle time");
    Ok(())
}

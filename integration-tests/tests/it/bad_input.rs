//! Hostile or invalid input: malformed frames close only their own connection while other
//! clients keep working; request-level problems come back as the Kafka error codes clients
//! expect.

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use kafka_protocol::messages::MetadataRequest;
use rdkafka::admin::{NewTopic, TopicReplication};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::Offset;
use sluice_integration_tests::canary::Canary;
use sluice_integration_tests::kafka_client::{self, KafkaConnection};
use sluice_integration_tests::wire::{self, RawRecord};
use sluice_integration_tests::{clients, procstat, NodeOptions, SluiceNode};

const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);
const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// Sends `bytes` on a fresh connection and requires the broker to close it; any bytes it sends
/// first must be whole response frames (never a partial frame followed by silence).
fn send_and_expect_close(node: &SluiceNode, what: &str, bytes: &[u8]) -> Result<wire::Closed> {
    let mut s = wire::connect(node.addr(), IO_TIMEOUT)?;
    wire::write_tolerating_close(&mut s, bytes)?;
    let closed = wire::await_close_by_broker(&mut s, CLOSE_TIMEOUT).with_context(|| what.to_string())?;
    Ok(closed)
}

async fn start_with_canary() -> Result<(SluiceNode, Canary)> {
    let node = SluiceNode::start(NodeOptions::default())?;
    let canary = Canary::start(&node, "canary").await?;
    Ok((node, canary))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_garbage_closes_only_that_connection() -> Result<()> {
    let (mut node, mut canary) = start_with_canary().await?;

    // Raw garbage whose first four bytes read as a negative frame length.
    let mut garbage = wire::pseudo_random_bytes(0x5eed_0001, 4096);
    garbage[0] |= 0x80;
    send_and_expect_close(&node, "garbage with a negative length prefix", &garbage)?;
    canary.check("after negative-length garbage").await?;

    // A well-sized frame of garbage with an API key no broker knows (>= 16384).
    let mut payload = wire::pseudo_random_bytes(0x5eed_0002, 1000);
    payload[0] = (payload[0] & 0x7f) | 0x40;
    send_and_expect_close(
        &node,
        "framed garbage with a garbage header",
        &wire::length_prefixed(&payload),
    )?;
    canary.check("after framed garbage").await?;

    // A valid Produce v9 header followed by a garbage body: decoding must fail cleanly, without
    // trusting the garbage array lengths.
    for seed in 3..8u64 {
        let body = wire::pseudo_random_bytes(0x5eed_0000 + seed, 512);
        let frame = wire::request_frame(wire::API_KEY_PRODUCE, 9, 42, Some("garbage"), true, &body);
        send_and_expect_close(&node, &format!("Produce v9 with garbage body (seed {seed})"), &frame)?;
    }
    canary.check("after garbage Produce bodies").await?;
    node.assert_running()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn length_prefix_above_socket_request_max_bytes_closes_connection() -> Result<()> {
    let (mut node, mut canary) = start_with_canary().await?;
    // socket.request.max.bytes defaults to 104857600: one byte more must be refused up front,
    // without the broker trying to read (or allocate) 100 MiB.
    for len in [104_857_601i32, i32::MAX] {
        let mut bytes = len.to_be_bytes().to_vec();
        bytes.extend_from_slice(&[0u8; 1024]);
        send_and_expect_close(&node, &format!("length prefix {len}"), &bytes)?;
        canary.check(&format!("after length prefix {len}")).await?;
    }
    node.assert_running()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_frame_neither_stalls_other_clients_nor_harms_broker_when_abandoned() -> Result<()> {
    let (mut node, mut canary) = start_with_canary().await?;
    // Announce 100 bytes, send 20 (a partial ApiVersions header and body), and keep waiting.
    let mut s = wire::connect(node.addr(), IO_TIMEOUT)?;
    let full = wire::request_frame(
        wire::API_KEY_API_VERSIONS,
        0,
        5,
        Some("truncated-client-id-padding"),
        false,
        &[0u8; 60],
    );
    let mut partial = (100i32).to_be_bytes().to_vec();
    partial.extend_from_slice(&full[4..24]);
    s.write_all(&partial)?;
    canary.check("while a truncated frame is pending").await?;
    drop(s); // close mid-frame
    canary.check("after the truncated connection closed").await?;

    // Same with a frame cut inside the length prefix itself.
    let mut s = TcpStream::connect(node.addr())?;
    s.write_all(&[0, 0])?;
    drop(s);
    canary
        .check("after a connection closed inside the length prefix")
        .await?;
    node.assert_running()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_too_short_for_a_request_header_close_connection() -> Result<()> {
    let (mut node, mut canary) = start_with_canary().await?;
    // A request header needs at least api key, version and correlation id (8 bytes).
    let cases: [(&str, Vec<u8>); 4] = [
        ("length 0", wire::length_prefixed(&[])),
        ("length 2 with 2 bytes", wire::length_prefixed(&[0, 18])),
        (
            "length 4 (api key + version only)",
            wire::length_prefixed(&[0, 18, 0, 0]),
        ),
        ("length 6", wire::length_prefixed(&[0, 18, 0, 0, 0, 1])),
    ];
    for (what, bytes) in cases {
        send_and_expect_close(&node, what, &bytes)?;
        canary.check(&format!("after {what}")).await?;
    }
    node.assert_running()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_api_key_9999_closes_connection_after_at_most_an_error_response() -> Result<()> {
    let (mut node, mut canary) = start_with_canary().await?;
    let frame = wire::request_frame(9999, 0, 77, Some("it"), false, &[]);
    let closed = send_and_expect_close(&node, "api key 9999", &frame)?;
    if !closed.received.is_empty() {
        // An error response is acceptable; it must be a whole frame for correlation id 77.
        let mut d = wire::Decoder::new(&closed.received);
        let len = d.i32()?;
        ensure!(
            len as usize == closed.received.len() - 4,
            "partial or extra response bytes: {:02x?}",
            closed.received
        );
        let corr = d.i32()?;
        ensure!(corr == 77, "response to api key 9999 carries correlation id {corr}");
    }
    canary.check("after api key 9999").await?;
    node.assert_running()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_versions_v99_gets_v0_unsupported_version_reply_and_connection_stays_usable() -> Result<()> {
    let mut node = SluiceNode::start(NodeOptions::default())?;
    let mut s = wire::connect(node.addr(), IO_TIMEOUT)?;
    // A client newer than the broker: ApiVersions v99 with a flexible (v2) header and v3 body.
    let req = wire::request_frame(
        wire::API_KEY_API_VERSIONS,
        99,
        0x1234_5678,
        Some("future-client"),
        true,
        &wire::api_versions_v3_body(),
    );
    s.write_all(&req)?;
    let frame = wire::read_frame(&mut s)?;
    let resp = wire::parse_api_versions_v0(&frame).context("reply to v99 must be ApiVersions v0 with header v0")?;
    ensure!(
        resp.correlation_id == 0x1234_5678,
        "correlation id {:#x}",
        resp.correlation_id
    );
    ensure!(
        resp.error_code == wire::ERROR_UNSUPPORTED_VERSION,
        "error code {} (want 35 UNSUPPORTED_VERSION)",
        resp.error_code
    );
    ensure!(!resp.apis.is_empty(), "UNSUPPORTED_VERSION reply lists no APIs");
    let av = resp
        .range(wire::API_KEY_API_VERSIONS)
        .context("reply does not list ApiVersions itself")?;
    ensure!(
        av.min_version == 0 && av.max_version >= 3,
        "ApiVersions range {}..={}",
        av.min_version,
        av.max_version
    );

    // The client then retries with a version the broker supports, on the same connection.
    let ok = wire::api_versions_v0(&mut s, 2)?;
    ensure!(
        ok.error_code == wire::ERROR_NONE,
        "ApiVersions v0 retry: error code {}",
        ok.error_code
    );
    for (key, name) in [
        (0, "Produce"),
        (1, "Fetch"),
        (2, "ListOffsets"),
        (3, "Metadata"),
        (18, "ApiVersions"),
    ] {
        let r = ok
            .range(key)
            .with_context(|| format!("{name} missing from ApiVersions"))?;
        ensure!(
            r.min_version <= r.max_version,
            "{name} range {}..={}",
            r.min_version,
            r.max_version
        );
    }
    node.assert_running()
}

/// Picks a Produce version in 3..=8 (one shared non-flexible layout) that the broker supports.
fn produce_version(s: &mut TcpStream) -> Result<i16> {
    let r = wire::api_versions_v0(s, 1)?
        .range(wire::API_KEY_PRODUCE)
        .context("Produce not advertised")?;
    let v = r.max_version.min(8);
    ensure!(
        v >= r.min_version && v >= 3,
        "no Produce version in 3..=8 (broker: {}..={})",
        r.min_version,
        r.max_version
    );
    Ok(v)
}

/// Writes a Produce of `batch` to one partition with `acks`, without reading any answer.
fn send_produce(
    s: &mut TcpStream,
    version: i16,
    corr: i32,
    acks: i16,
    topic: &str,
    partition: i32,
    batch: &[u8],
) -> Result<()> {
    let body = wire::produce_body_v3(acks, 5000, topic, partition, batch);
    s.write_all(&wire::request_frame(
        wire::API_KEY_PRODUCE,
        version,
        corr,
        Some("raw"),
        false,
        &body,
    ))?;
    Ok(())
}

fn raw_produce(
    s: &mut TcpStream,
    version: i16,
    corr: i32,
    topic: &str,
    partition: i32,
    batch: &[u8],
) -> Result<(i16, i64)> {
    send_produce(s, version, corr, -1, topic, partition, batch)?;
    let (c, t, p, err, base) = wire::parse_produce_response_first_partition(&wire::read_frame(s)?)?;
    ensure!(
        c == corr && t == topic && p == partition,
        "response for ({c}, {t}, {p}), sent ({corr}, {topic}, {partition})"
    );
    Ok((err, base))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_to_nonexistent_partition_is_rejected_unknown_topic_or_partition() -> Result<()> {
    let mut node = SluiceNode::start(NodeOptions::default())?;
    let admin = clients::admin_client(&node.bootstrap())?;
    clients::create_topic(&admin, "one-partition", 1, &[]).await?;
    let ts = clients::now_ms();

    // Raw: the broker itself must answer UNKNOWN_TOPIC_OR_PARTITION for partition 7.
    let mut s = wire::connect(node.addr(), IO_TIMEOUT)?;
    let v = produce_version(&mut s)?;
    let batch = wire::record_batch_v2(
        ts,
        &[RawRecord {
            key: Some(b"k"),
            value: Some(b"hand-encoded"),
        }],
    );
    let (err, base) = raw_produce(&mut s, v, 10, "one-partition", 0, &batch)?;
    ensure!(
        err == wire::ERROR_NONE && base == 0,
        "control: valid raw produce to partition 0 got error {err}, base offset {base}"
    );
    let (err, _) = raw_produce(&mut s, v, 11, "one-partition", 7, &batch)?;
    ensure!(
        err == wire::ERROR_UNKNOWN_TOPIC_OR_PARTITION,
        "produce to partition 7: error code {err}, want 3"
    );

    // rdkafka: knows the partition count from Metadata and fails the record as UnknownPartition.
    let producer = clients::future_producer(&node.bootstrap())?;
    let r = producer
        .send(
            FutureRecord::<str, str>::to("one-partition").partition(7).payload("x"),
            Duration::from_secs(5),
        )
        .await;
    match r {
        Err((
            KafkaError::MessageProduction(
                RDKafkaErrorCode::UnknownPartition | RDKafkaErrorCode::UnknownTopicOrPartition,
            ),
            _,
        )) => {}
        other => bail!("rdkafka produce to partition 7: {other:?}"),
    }

    // The hand-encoded record is readable by a real client, byte for byte.
    let consumer = clients::stream_consumer(&node.bootstrap())?;
    clients::assign(&consumer, "one-partition", &[0], Offset::Offset(0))?;
    let m = tokio::time::timeout(Duration::from_secs(20), consumer.recv())
        .await
        .context("consume raw record")??;
    ensure!(
        m.offset() == 0 && m.key() == Some(b"k") && m.payload() == Some(b"hand-encoded"),
        "raw record read back as {m:?}"
    );
    node.assert_running()
}

/// An acks=0 produce gets no response, so Kafka signals its failure the one way it can: by
/// closing the connection, after which the client reconnects and refreshes its metadata. A
/// successful one leaves the connection open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_acks0_produce_closes_the_connection_and_a_good_one_does_not() -> Result<()> {
    let mut node = SluiceNode::start(NodeOptions::default())?;
    let admin = clients::admin_client(&node.bootstrap())?;
    clients::create_topic(&admin, "fire-and-forget", 1, &[]).await?;
    let batch = wire::record_batch_v2(
        clients::now_ms(),
        &[RawRecord {
            key: Some(b"k"),
            value: Some(b"v"),
        }],
    );
    let acks0 = |s: &mut TcpStream, version: i16, corr: i32, partition: i32| {
        send_produce(s, version, corr, 0, "fire-and-forget", partition, &batch)
    };

    let mut s = wire::connect(node.addr(), IO_TIMEOUT)?;
    let v = produce_version(&mut s)?;
    acks0(&mut s, v, 2, 0)?;
    // Answered in order: the ApiVersions after it proves the connection is still open.
    wire::api_versions_v0(&mut s, 3).context("the connection should stay open after a good acks=0 produce")?;

    acks0(&mut s, v, 4, 7)?;
    wire::await_close_by_broker(&mut s, CLOSE_TIMEOUT).context("an acks=0 produce to partition 7 should close")?;

    let consumer = clients::stream_consumer(&node.bootstrap())?;
    clients::assign(&consumer, "fire-and-forget", &[0], Offset::Offset(0))?;
    let m = tokio::time::timeout(Duration::from_secs(20), consumer.recv())
        .await
        .context("consume the acks=0 record")??;
    ensure!(m.offset() == 0 && m.payload() == Some(b"v"), "read back {m:?}");
    node.assert_running()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_with_bad_crc_is_rejected_corrupt_message_and_not_appended() -> Result<()> {
    let mut node = SluiceNode::start(NodeOptions::default())?;
    let admin = clients::admin_client(&node.bootstrap())?;
    clients::create_topic(&admin, "crc", 1, &[]).await?;
    let mut s = wire::connect(node.addr(), IO_TIMEOUT)?;
    let v = produce_version(&mut s)?;
    let ts = clients::now_ms();

    let mut corrupt = wire::record_batch_v2(
        ts,
        &[RawRecord {
            key: None,
            value: Some(b"flipped-byte"),
        }],
    );
    let last = corrupt.len() - 3;
    corrupt[last] ^= 0x01; // inside the record value, covered by the CRC
    let (err, _) = raw_produce(&mut s, v, 20, "crc", 0, &corrupt)?;
    ensure!(
        err == wire::ERROR_CORRUPT_MESSAGE,
        "batch with bad CRC: error code {err}, want 2 CORRUPT_MESSAGE"
    );

    let good = wire::record_batch_v2(
        ts,
        &[RawRecord {
            key: None,
            value: Some(b"good"),
        }],
    );
    let (err, base) = raw_produce(&mut s, v, 21, "crc", 0, &good)?;
    ensure!(
        err == wire::ERROR_NONE && base == 0,
        "valid batch after a corrupt one: error {err}, base offset {base} (want 0: nothing appended before it)"
    );

    let consumer = clients::stream_consumer(&node.bootstrap())?;
    clients::assign(&consumer, "crc", &[0], Offset::Offset(0))?;
    let m = tokio::time::timeout(Duration::from_secs(20), consumer.recv())
        .await
        .context("consume")??;
    ensure!(m.offset() == 0 && m.payload() == Some(b"good"), "read back {m:?}");
    node.assert_running()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_topics_with_invalid_names_fails_invalid_topic_per_topic() -> Result<()> {
    let node = SluiceNode::start(NodeOptions::default())?;
    let admin = clients::admin_client(&node.bootstrap())?;
    let long = "x".repeat(250);
    let invalid = ["bad topic!", "..", ".", "slash/name", long.as_str()];
    let mut topics: Vec<NewTopic<'_>> = invalid
        .iter()
        .map(|n| NewTopic::new(n, 1, TopicReplication::Fixed(1)))
        .collect();
    topics.push(NewTopic::new("valid-alongside", 1, TopicReplication::Fixed(1)));
    let results = admin.create_topics(topics.iter(), &clients::admin_options()).await?;
    ensure!(
        results.len() == invalid.len() + 1,
        "{} results for {} topics",
        results.len(),
        invalid.len() + 1
    );
    for r in &results {
        match r {
            Ok(name) if name == "valid-alongside" => {}
            Err((name, RDKafkaErrorCode::InvalidTopic)) if invalid.contains(&name.as_str()) => {}
            other => bail!("unexpected CreateTopics result {other:?}"),
        }
    }
    let consumer = clients::base_consumer(&node.bootstrap())?;
    ensure!(
        clients::partition_count(&consumer, "valid-alongside")? == Some(1),
        "valid topic not created"
    );
    for n in invalid {
        ensure!(
            clients::partition_count(&consumer, n)?.is_none(),
            "invalid topic {n:?} was created"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn record_over_topic_max_message_bytes_is_rejected_message_size_too_large() -> Result<()> {
    let node = SluiceNode::start(NodeOptions::default())?;
    let admin = clients::admin_client(&node.bootstrap())?;
    clients::create_topic(&admin, "small-messages", 1, &[("max.message.bytes", "10000")]).await?;
    let mut cfg = clients::producer_config(&node.bootstrap());
    // The client must not refuse locally: its own limit stays far above the topic's.
    cfg.set("message.max.bytes", "1000000")
        .set("compression.type", "none")
        .set("linger.ms", "0");
    let producer: FutureProducer = cfg.create()?;
    let send = |len: usize| {
        let payload = vec![b'z'; len];
        let producer = producer.clone();
        async move {
            producer
                .send(
                    FutureRecord::<str, [u8]>::to("small-messages")
                        .partition(0)
                        .payload(&payload),
                    Duration::from_secs(5),
                )
                .await
        }
    };
    let small = send(5_000).await;
    ensure!(
        small.is_ok(),
        "5 KB record under a 10000-byte limit was rejected: {:?}",
        small.err().map(|e| e.0)
    );
    match send(20_000).await {
        Err((KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge), _)) => Ok(()),
        other => bail!(
            "20 KB record over max.message.bytes=10000: {:?}",
            other.map_err(|e| e.0)
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_beyond_log_end_surfaces_offset_out_of_range() -> Result<()> {
    let node = SluiceNode::start(NodeOptions::default())?;
    let admin = clients::admin_client(&node.bootstrap())?;
    clients::create_topic(&admin, "short", 1, &[]).await?;
    let producer = clients::future_producer(&node.bootstrap())?;
    for i in 0..5 {
        producer
            .send(
                FutureRecord::<str, str>::to("short")
                    .partition(0)
                    .payload(&format!("r{i}")),
                Duration::from_secs(5),
            )
            .await
            .map_err(|(e, _)| anyhow::anyhow!("produce: {e}"))?;
    }
    // consumer_config sets auto.offset.reset=error, so the broker's OFFSET_OUT_OF_RANGE surfaces.
    let consumer = clients::stream_consumer(&node.bootstrap())?;
    clients::assign(&consumer, "short", &[0], Offset::Offset(1000))?;
    let r = tokio::time::timeout(Duration::from_secs(20), consumer.recv())
        .await
        .context("no error within 20 s")?;
    match r {
        Err(KafkaError::MessageConsumption(RDKafkaErrorCode::AutoOffsetReset | RDKafkaErrorCode::OffsetOutOfRange)) => {
            Ok(())
        }
        other => bail!(
            "fetch at offset 1000 of a 5-record log: {:?}",
            other.map(|m| m.offset())
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyless_record_on_compacted_topic_is_rejected_invalid_record() -> Result<()> {
    let node = SluiceNode::start(NodeOptions::default())?;
    let admin = clients::admin_client(&node.bootstrap())?;
    clients::create_topic(&admin, "compacted", 1, &[("cleanup.policy", "compact")]).await?;
    let producer = clients::future_producer(&node.bootstrap())?;
    let keyed = producer
        .send(
            FutureRecord::<str, str>::to("compacted")
                .partition(0)
                .key("k")
                .payload("v"),
            Duration::from_secs(5),
        )
        .await;
    ensure!(
        keyed.is_ok(),
        "keyed record on a compacted topic was rejected: {:?}",
        keyed.err().map(|e| e.0)
    );
    match producer
        .send(
            FutureRecord::<str, str>::to("compacted").partition(0).payload("no key"),
            Duration::from_secs(5),
        )
        .await
    {
        Err((KafkaError::MessageProduction(RDKafkaErrorCode::InvalidRecord), _)) => Ok(()),
        other => bail!("keyless record on a compacted topic: {:?}", other.map_err(|e| e.0)),
    }
}

/// KIP-467: in one batch of keyed and keyless records to a compacted topic, the broker lists
/// the keyless records by index, so librdkafka fails those with INVALID_RECORD and the others
/// with its "different record" error (the batch is refused whole, as Kafka refuses it), rather
/// than failing every record with INVALID_RECORD.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyless_records_in_a_mixed_batch_are_named_by_index() -> Result<()> {
    let node = SluiceNode::start(NodeOptions::default())?;
    let admin = clients::admin_client(&node.bootstrap())?;
    clients::create_topic(&admin, "compacted-mixed", 1, &[("cleanup.policy", "compact")]).await?;
    let mut config = clients::producer_config(&node.bootstrap());
    config.set("linger.ms", "500");
    let producer: FutureProducer = config.create()?;
    // All enqueued before any is sent, so with a long linger they travel in one batch.
    let keys = [Some("a"), None, Some("c"), None];
    let mut deliveries = Vec::new();
    for key in keys {
        let mut record = FutureRecord::<str, str>::to("compacted-mixed")
            .partition(0)
            .payload("v");
        if let Some(key) = key {
            record = record.key(key);
        }
        deliveries.push(
            producer
                .send_result(record)
                .map_err(|(e, _)| anyhow::anyhow!("enqueue: {e}"))?,
        );
    }
    let mut codes = Vec::new();
    for delivery in deliveries {
        codes.push(match delivery.await? {
            Ok(_) => None,
            Err((KafkaError::MessageProduction(code), _)) => Some(code),
            Err((other, _)) => bail!("unexpected delivery error {other}"),
        });
    }
    use RDKafkaErrorCode::{InvalidDifferentRecord, InvalidRecord};
    ensure!(
        codes
            == [
                Some(InvalidDifferentRecord),
                Some(InvalidRecord),
                Some(InvalidDifferentRecord),
                Some(InvalidRecord)
            ],
        "delivery results {codes:?}: want only the keyless records (1 and 3) failed as invalid"
    );
    Ok(())
}

/// A Fetch v12+ body that opens a fetch session (id 0, epoch 0) with no topics, then whatever
/// `rest` writes from the forgotten topics on.
fn session_fetch_body(rest: &dyn Fn(&mut wire::Encoder)) -> Vec<u8> {
    let mut body = wire::Encoder::new();
    // Replica id, max wait, min bytes, max bytes, isolation, session id, session epoch.
    body.i32(-1).i32(0).i32(1).i32(1 << 20).i8(0).i32(0).i32(0);
    body.uvarint(1); // no topics
    rest(&mut body);
    body.buf
}

/// Request bodies whose counts or lengths claim far more than the frame holds, in several APIs,
/// flexible and not, and in every admin API of issue 11. Each used to make the codec reserve
/// gigabytes and abort the process.
fn oversized_count_frames() -> Vec<(&'static str, Vec<u8>)> {
    let mut produce = wire::Encoder::new();
    produce.nullable_string(None).i16(-1).i32(1000).i32(i32::MAX);
    let mut join_group = wire::Encoder::new();
    join_group
        .compact_string("g")
        .i32(10_000)
        .i32(10_000)
        .compact_string("")
        .uvarint(0)
        .compact_string("consumer")
        .uvarint(u64::from(u32::MAX));
    let mut offset_commit = wire::Encoder::new();
    offset_commit.i16(i16::MAX).bytes(b"abc");
    let mut sync_group = wire::Encoder::new();
    sync_group
        .string("g")
        .string("member")
        .i32(1)
        .nullable_string(None)
        .i32(1)
        .string("member")
        .i32(i32::MAX);
    let mut fetch = wire::Encoder::new();
    // Fetch v12: max wait, min bytes, max bytes, isolation, session id and epoch, then topics.
    fetch
        .i32(500)
        .i32(1)
        .i32(1 << 20)
        .i8(0)
        .i32(0)
        .i32(-1)
        .uvarint(u64::from(u32::MAX));
    // Fetch v12/v13 opening an incremental-session request (KIP-227) whose forgotten topics
    // claim 4 billion entries, or one forgotten topic with 4 billion partitions.
    let session_fetch =
        |version: i16, forgotten: &dyn Fn(&mut wire::Encoder)| (1, version, true, session_fetch_body(forgotten));
    let forgotten_topics = session_fetch(12, &|b| {
        b.uvarint(u64::from(u32::MAX));
    });
    let forgotten_partitions_by_name = session_fetch(12, &|b| {
        b.uvarint(2).compact_string("t").uvarint(u64::from(u32::MAX));
    });
    let forgotten_partitions_by_id = session_fetch(13, &|b| {
        b.uvarint(2).bytes(&[7; 16]).uvarint(u64::from(u32::MAX));
    });
    let frames = [
        (
            "Fetch v12 in a session with 4 billion forgotten topics",
            forgotten_topics,
        ),
        (
            "Fetch v12 forgetting a topic's 4 billion partitions",
            forgotten_partitions_by_name,
        ),
        (
            "Fetch v13 forgetting a topic id's 4 billion partitions",
            forgotten_partitions_by_id,
        ),
        (
            "Metadata v0 with 0x7fffffff topics",
            (3, 0, false, i32::MAX.to_be_bytes().to_vec()),
        ),
        (
            "Metadata v12 with a 4-billion compact array",
            (3, 12, true, vec![0xff, 0xff, 0xff, 0xff, 0x0f]),
        ),
        ("Produce v3 with 0x7fffffff topics", (0, 3, false, produce.buf.clone())),
        (
            "Fetch v12 with a 4-billion topic array",
            (1, 12, true, fetch.buf.clone()),
        ),
        (
            "JoinGroup v9 with 4 billion protocols",
            (11, 9, true, join_group.buf.clone()),
        ),
        (
            "OffsetCommit v2 with a group id running past the frame",
            (8, 2, false, offset_commit.buf.clone()),
        ),
        (
            "SyncGroup v3 with a 2 GiB assignment",
            (14, 3, false, sync_group.buf.clone()),
        ),
    ];
    // The admin APIs whose request opens with (after at most one fixed field) a compact array:
    // each claims 4 billion entries in a few bytes.
    let four_billion = |prefix: &[u8]| {
        let mut body = wire::Encoder::new();
        body.bytes(prefix).uvarint(u64::from(u32::MAX));
        body.buf
    };
    let timeout_ms = 30_000i32.to_be_bytes();
    let admin = [
        ("DeleteRecords v2 with 4 billion topics", 21, 2, four_billion(&[])),
        ("CreateAcls v3 with 4 billion creations", 30, 3, four_billion(&[])),
        ("DeleteAcls v3 with 4 billion filters", 31, 3, four_billion(&[])),
        // resource_type_filter (TOPIC), then a resource name claiming 4 GB.
        ("DescribeAcls v3 with a 4 GB resource name", 29, 3, four_billion(&[2])),
        (
            "DescribeUserScramCredentials v0 with 4 billion users",
            50,
            0,
            four_billion(&[]),
        ),
        (
            "AlterUserScramCredentials v0 with 4 billion deletions",
            51,
            0,
            four_billion(&[]),
        ),
        ("AlterConfigs v2 with 4 billion resources", 33, 2, four_billion(&[])),
        ("AlterReplicaLogDirs v2 with 4 billion dirs", 34, 2, four_billion(&[])),
        ("DescribeLogDirs v4 with 4 billion topics", 35, 4, four_billion(&[])),
        ("ElectLeaders v2 with 4 billion topics", 43, 2, four_billion(&[0])),
        (
            "UpdateFeatures v1 with 4 billion feature updates",
            57,
            1,
            four_billion(&60_000i32.to_be_bytes()),
        ),
        (
            "IncrementalAlterConfigs v1 with 4 billion resources",
            44,
            1,
            four_billion(&[]),
        ),
        (
            "AlterPartitionReassignments v0 with 4 billion topics",
            45,
            0,
            four_billion(&timeout_ms),
        ),
        (
            "ListPartitionReassignments v0 with 4 billion topics",
            46,
            0,
            four_billion(&timeout_ms),
        ),
        (
            "DescribeClientQuotas v1 with 4 billion components",
            48,
            1,
            four_billion(&[]),
        ),
        ("AlterClientQuotas v1 with 4 billion entries", 49, 1, four_billion(&[])),
        ("DescribeProducers v0 with 4 billion topics", 61, 0, four_billion(&[])),
        // The transaction APIs: arrays of 4 billion, or a transactional id claiming 4 GB.
        (
            "AddPartitionsToTxn v4 with 4 billion transactions",
            24,
            4,
            four_billion(&[]),
        ),
        (
            "AddOffsetsToTxn v3 with a 4 GB transactional id",
            25,
            3,
            four_billion(&[]),
        ),
        ("EndTxn v3 with a 4 GB transactional id", 26, 3, four_billion(&[])),
        ("WriteTxnMarkers v1 with 4 billion markers", 27, 1, four_billion(&[])),
        (
            "TxnOffsetCommit v3 with a 4 GB transactional id",
            28,
            3,
            four_billion(&[]),
        ),
        ("DescribeTransactions v0 with 4 billion ids", 65, 0, four_billion(&[])),
        (
            "ListTransactions v0 with 4 billion state filters",
            66,
            0,
            four_billion(&[]),
        ),
        (
            "DescribeTopicPartitions v0 with 4 billion topics",
            75,
            0,
            four_billion(&[]),
        ),
    ]
    .map(|(what, key, version, body)| (what, (key, version, true, body)));
    frames
        .into_iter()
        .chain(admin)
        .map(|(what, (key, version, flexible, body))| {
            (
                what,
                wire::request_frame(key, version, 7, Some("hostile"), flexible, &body),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_and_lengths_beyond_the_frame_close_only_that_connection() -> Result<()> {
    let (mut node, mut canary) = start_with_canary().await?;
    let rss_before = rss_bytes(&node)?;
    for (what, frame) in oversized_count_frames() {
        let closed = send_and_expect_close(&node, what, &frame)?;
        ensure!(
            closed.received.is_empty(),
            "{what}: the broker answered {} bytes instead of closing",
            closed.received.len()
        );
        node.assert_running()
            .with_context(|| format!("the broker died on {what}"))?;
        canary.check(&format!("after {what}")).await?;
    }
    let rss_after = rss_bytes(&node)?;
    ensure!(
        rss_after < rss_before + (64 << 20),
        "the broker's RSS grew from {rss_before} to {rss_after} bytes on a handful of tiny requests"
    );
    node.assert_running()
}

/// The hostile session fetches above differ from this one only in their counts: well formed,
/// it opens a session and is answered.
#[test]
fn a_well_formed_session_fetch_like_the_hostile_ones_opens_a_session() -> Result<()> {
    let mut node = SluiceNode::start(NodeOptions::default())?;
    for version in [12, 13] {
        let body = session_fetch_body(&|b| {
            b.uvarint(1).compact_string("").uvarint(0); // no forgotten topics, rack "", no tags
        });
        let mut s = wire::connect(node.addr(), IO_TIMEOUT)?;
        s.write_all(&wire::request_frame(1, version, 7, Some("hostile"), true, &body))?;
        let frame = wire::read_frame(&mut s)?;
        let mut r = wire::Decoder::new(&frame);
        ensure!(r.i32()? == 7, "v{version}: wrong correlation id");
        r.take(1)?; // the response header's empty tagged fields
        let _throttle = r.i32()?;
        let error = r.i16()?;
        let session_id = r.i32()?;
        ensure!(error == 0, "v{version}: the session fetch failed with error {error}");
        ensure!(
            session_id > 0,
            "v{version}: no session was opened (session id {session_id})"
        );
    }
    node.assert_running()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_frame_times_out_and_returns_its_request_memory() -> Result<()> {
    // The stalled frame announces more than the whole request-memory budget, so while it is
    // pending every other request waits for memory; the read timeout must end that.
    let node = SluiceNode::start(
        NodeOptions::default()
            .set("queued.max.request.bytes", 16 << 20)
            .set("socket.request.read.timeout.ms", 2000),
    )?;
    let mut canary = Canary::start(&node, "canary").await?;
    let mut node = node;
    for (what, prefix) in [
        ("a 2 GiB size prefix and silence", i32::MAX),
        ("a 100 MB size prefix and silence", 100_000_000),
        ("a 50 MB size prefix, 10 bytes and silence", 50_000_000),
    ] {
        let mut s = wire::connect(node.addr(), IO_TIMEOUT)?;
        let mut bytes = prefix.to_be_bytes().to_vec();
        if prefix == 50_000_000 {
            bytes.extend_from_slice(&[0, 18, 0, 0, 0, 0, 0, 1, 0, 0]);
        }
        s.write_all(&bytes)?;
        let closed = wire::await_close_by_broker(&mut s, Duration::from_secs(15)).with_context(|| what.to_string())?;
        ensure!(closed.received.is_empty(), "{what}: unexpected response bytes");
        canary.check(&format!("after {what}")).await?;
    }
    ensure!(
        rss_bytes(&node)? < 150 << 20,
        "a stalled frame left the broker's RSS at {} bytes",
        rss_bytes(&node)?
    );
    node.assert_running()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_are_closed_but_busy_ones_are_not() -> Result<()> {
    let mut node = SluiceNode::start(NodeOptions::default().set("connections.max.idle.ms", 1500))?;
    let mut idle = wire::connect(node.addr(), IO_TIMEOUT)?;
    wire::api_versions_v0(&mut idle, 1)?;
    // A connection that keeps sending requests, more often than the idle limit, stays open
    // past the moment the idle one is closed.
    let mut busy = wire::connect(node.addr(), IO_TIMEOUT)?;
    let closed = std::thread::scope(|scope| {
        let waiter = scope.spawn(|| wire::await_close_by_broker(&mut idle, Duration::from_secs(15)));
        let mut correlation_id = 1;
        while !waiter.is_finished() {
            wire::api_versions_v0(&mut busy, correlation_id)?;
            correlation_id += 1;
            std::thread::sleep(Duration::from_millis(300));
        }
        for _ in 0..8 {
            wire::api_versions_v0(&mut busy, correlation_id).context("the busy connection was closed")?;
            correlation_id += 1;
            std::thread::sleep(Duration::from_millis(300));
        }
        waiter
            .join()
            .map_err(|_| anyhow::anyhow!("the waiting thread panicked"))?
    })?;
    ensure!(
        closed.received.is_empty(),
        "the idle connection received unexpected bytes"
    );
    ensure!(
        closed.after >= Duration::from_millis(1200),
        "the idle connection was closed {:?} after its last request, before connections.max.idle.ms=1500",
        closed.after
    );
    node.assert_running()
}

/// A long-poll Fetch owes its response for longer than `connections.max.idle.ms`: the
/// connection is waiting, not idle, so it stays open until answered and serves the next request.
#[test]
fn a_connection_waiting_on_a_long_poll_longer_than_the_idle_limit_stays_open() -> Result<()> {
    const MAX_WAIT_MS: i32 = 3_000;
    let mut node = SluiceNode::start(NodeOptions::default().set("connections.max.idle.ms", 1000))?;
    ensure!(kafka_client::create_topic(node.addr(), "long-poll", 1, IO_TIMEOUT)? == 0);
    let mut connection = KafkaConnection::connect(node.addr(), "long-poll", IO_TIMEOUT)?;
    let started = Instant::now();
    let request = kafka_client::consumer_fetch_request("long-poll", 0, MAX_WAIT_MS);
    let response = connection
        .call(&request, kafka_client::FETCH_VERSION_BY_NAME)
        .context("the broker closed a connection waiting on a long poll")?;
    let waited = started.elapsed();
    let partition = kafka_client::first_fetch_partition(&response)?;
    ensure!(
        partition.error_code == 0 && partition.records.as_ref().is_none_or(|r| r.is_empty()),
        "an empty partition's long poll: {partition:?}"
    );
    ensure!(
        waited >= Duration::from_millis(MAX_WAIT_MS as u64 - 500),
        "the fetch was answered after {waited:?}, not after its max_wait_ms: it never waited past the idle limit"
    );
    connection
        .call(&MetadataRequest::default().with_topics(Some(vec![])), 12)
        .context("the connection was closed once its long poll was answered")?;
    node.assert_running()
}

/// The broker process's resident set size.
fn rss_bytes(node: &SluiceNode) -> Result<u64> {
    let pid = node.pid().context("the broker is not running")?;
    Ok(procstat::status_kib(pid, "VmRSS")? * 1024)
}

/// A producer that pipelines far more requests than `max.in.flight.requests.per.connection`
/// (here 2) on one connection, without reading any answer until it has sent them all: the
/// broker reads the next request only as it answers one, and every request is still answered,
/// in order, each record appended once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_produces_beyond_the_in_flight_bound_are_all_answered_in_order() -> Result<()> {
    const REQUESTS: i32 = 40;
    let mut node = SluiceNode::start(NodeOptions::default().set("max.in.flight.requests.per.connection", 2))?;
    let admin = clients::admin_client(&node.bootstrap())?;
    clients::create_topic(&admin, "pipelined", 1, &[]).await?;
    let value = vec![b'p'; 64 * 1024];
    let batch = wire::record_batch_v2(
        clients::now_ms(),
        &[RawRecord {
            key: None,
            value: Some(&value),
        }],
    );
    let mut s = wire::connect(node.addr(), IO_TIMEOUT)?;
    let v = produce_version(&mut s)?;
    for corr in 1..=REQUESTS {
        send_produce(&mut s, v, corr, -1, "pipelined", 0, &batch)?;
    }
    for corr in 1..=REQUESTS {
        let (c, _, _, err, base) = wire::parse_produce_response_first_partition(&wire::read_frame(&mut s)?)?;
        ensure!(
            (c, err, base) == (corr, 0, i64::from(corr - 1)),
            "answer {corr} of {REQUESTS}: correlation id {c}, error {err}, base offset {base}"
        );
    }
    node.assert_running()
}

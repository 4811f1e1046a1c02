//! Hostile record batches against a real broker: decompression bombs and record counts that
//! lie are refused with the Kafka error codes clients expect, without the broker taking the
//! memory they claim, and the broker keeps serving other clients. Compressed batches from a
//! real client still reach a compacted topic, the one produce path that decodes records.

use std::collections::{BTreeSet, HashMap};
use std::io::Write;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{anyhow, bail, ensure, Context, Result};
use bytes::Bytes;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ProduceRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use rdkafka::error::KafkaError;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::Offset;
use sluice_integration_tests::canary::Canary;
use sluice_integration_tests::{clients, kafka_client, procstat, wire, NodeOptions, SluiceNode};
use sluice_protocol::batch::test_support::{encode_batch, with_records_section, TestRecord};
use sluice_protocol::batch::{BatchIter, BATCH_HEADER_LEN};

const CORRUPT_MESSAGE: i16 = 2;
const RECORD_LIST_TOO_LARGE: i16 = 18;
const TIMEOUT: Duration = Duration::from_secs(30);
/// Zeros in each bomb: they compress to a batch below the default max.message.bytes (1 MB), and
/// a broker that decompressed them whole would hold half a gigabyte.
const BOMB_ZEROS: usize = 512 * 1024 * 1024;
/// What the broker may reach at its peak while refusing a bomb: it keeps at most
/// max.message.bytes of decompressed records.
const MAX_BROKER_PEAK_RSS_KIB: u64 = 200 * 1024;

/// What a Produce v9 answered for partition 0.
#[derive(Debug)]
struct Produced {
    error_code: i16,
    error_message: String,
    base_offset: i64,
}

/// Produce v9 (`acks=all`) of exactly `batch` to partition 0 of `topic`, on a new connection.
fn produce(addr: SocketAddr, topic: &str, batch: Vec<u8>) -> Result<Produced> {
    let partition = PartitionProduceData::default()
        .with_index(0)
        .with_records(Some(Bytes::from(batch)));
    let topic_data = TopicProduceData::default()
        .with_name(TopicName(StrBytes::from_string(topic.to_string())))
        .with_partition_data(vec![partition]);
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5_000)
        .with_topic_data(vec![topic_data]);
    let response = kafka_client::call(addr, &request, 9, TIMEOUT)?;
    let answer = response
        .responses
        .first()
        .and_then(|t| t.partition_responses.first())
        .context("the produce response names no partition")?;
    Ok(Produced {
        error_code: answer.error_code,
        error_message: answer.error_message.as_deref().unwrap_or_default().to_string(),
        base_offset: answer.base_offset,
    })
}

/// A one-record batch whose records section is `section`, compressed with `codec`.
fn one_record_batch(codec: u8, section: &[u8]) -> Vec<u8> {
    with_records_section(&encode_batch(0, clients::now_ms(), &[]), codec, section, 1)
}

/// The records section of one record keyed `k` whose value is `zeros` zero bytes, written
/// through `compressor` a megabyte at a time, so the test never holds the value.
fn stream_zero_record<W: Write>(mut compressor: W, zeros: usize) -> Result<W> {
    let mut fields = wire::Encoder::new();
    // attributes, timestamp delta, offset delta, key, value length
    fields
        .i8(0)
        .varlong(0)
        .varlong(0)
        .varlong(1)
        .bytes(b"k")
        .varlong(zeros as i64);
    let record_len = fields.buf.len() + zeros + 1; // + header count
    let mut head = wire::Encoder::new();
    head.varlong(record_len as i64).bytes(&fields.buf);
    compressor.write_all(&head.buf)?;
    let chunk = vec![0u8; 1 << 20];
    let mut left = zeros;
    while left > 0 {
        let n = left.min(chunk.len());
        compressor.write_all(&chunk[..n])?;
        left -= n;
    }
    compressor.write_all(&[0])?; // no headers
    Ok(compressor)
}

fn gzip_bomb() -> Result<Vec<u8>> {
    let encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let section = stream_zero_record(encoder, BOMB_ZEROS)?.finish()?;
    Ok(one_record_batch(1, &section))
}

fn zstd_bomb() -> Result<Vec<u8>> {
    let encoder = zstd::stream::write::Encoder::new(Vec::new(), 3)?;
    let section = stream_zero_record(encoder, BOMB_ZEROS)?.finish()?;
    Ok(one_record_batch(4, &section))
}

fn keyed_batch(key: &[u8], value: &[u8]) -> Vec<u8> {
    let record = TestRecord {
        key: Some(key),
        value: Some(value),
        timestamp_delta_ms: 0,
    };
    encode_batch(0, clients::now_ms(), &[record])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gzip_and_zstd_bombs_to_a_compacted_topic_are_refused_record_list_too_large_in_bounded_memory() -> Result<()> {
    let mut node = SluiceNode::start(NodeOptions::default())?;
    let mut canary = Canary::start(&node, "canary").await?;
    let admin = clients::admin_client(&node.bootstrap())?;
    clients::create_topic(&admin, "compacted", 1, &[("cleanup.policy", "compact")]).await?;
    let pid = node.pid().context("the broker has no process id")?;

    for (codec, bomb) in [("gzip", gzip_bomb()?), ("zstd", zstd_bomb()?)] {
        ensure!(
            bomb.len() < 1_000_000,
            "the {codec} bomb is {} bytes: over max.message.bytes, it would not reach decompression",
            bomb.len()
        );
        // Without a reset, VmHWM is the peak since start: still an upper bound for the bomb.
        procstat::reset_peak_rss(pid);
        let produced = produce(node.addr(), "compacted", bomb.clone())?;
        let peak_rss_kib = procstat::status_kib(pid, "VmHWM")?;
        println!(
            "{codec} bomb: {} bytes decompressing to {BOMB_ZEROS}+ answered {} ({:?}); broker peak RSS {peak_rss_kib} KiB",
            bomb.len(),
            produced.error_code,
            produced.error_message
        );
        ensure!(
            produced.error_code == RECORD_LIST_TOO_LARGE && produced.error_message.contains("max.message.bytes"),
            "the {codec} bomb was answered {produced:?}, not RECORD_LIST_TOO_LARGE naming max.message.bytes"
        );
        ensure!(
            peak_rss_kib < MAX_BROKER_PEAK_RSS_KIB,
            "refusing the {codec} bomb took the broker to {peak_rss_kib} KiB resident"
        );
        canary.check(&format!("after the {codec} bomb")).await?;
    }

    // Nothing of either bomb was appended: the first keyed record lands at offset 0.
    let produced = produce(node.addr(), "compacted", keyed_batch(b"k", b"v"))?;
    ensure!(
        (produced.error_code, produced.base_offset) == (0, 0),
        "a keyed record after the bombs: {produced:?}"
    );
    node.assert_running()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_count_the_batch_bytes_cannot_hold_is_refused_corrupt_message() -> Result<()> {
    let mut node = SluiceNode::start(NodeOptions::default())?;
    let mut canary = Canary::start(&node, "canary").await?;
    let admin = clients::admin_client(&node.bootstrap())?;
    clients::create_topic(&admin, "plain", 1, &[]).await?;
    clients::create_topic(&admin, "compacted", 1, &[("cleanup.policy", "compact")]).await?;

    // Uncompressed, on a delete topic (records not decoded): 1,000,000 records claimed over
    // the bytes of one, with a matching lastOffsetDelta and a correct CRC.
    let honest = keyed_batch(b"k", b"honest");
    let lying = with_records_section(&honest, 0, &honest[BATCH_HEADER_LEN..], 1_000_000);
    let produced = produce(node.addr(), "plain", lying)?;
    println!("uncompressed count lie: {produced:?}");
    ensure!(
        produced.error_code == CORRUPT_MESSAGE && produced.error_message.contains("declares 1000000 records"),
        "an uncompressed batch claiming 1,000,000 records was answered {produced:?}"
    );
    canary.check("after the uncompressed count lie").await?;

    // zstd, on a compacted topic (records decoded): the same lie, found after decompression.
    let section = zstd::bulk::compress(&honest[BATCH_HEADER_LEN..], 3)?;
    let produced = produce(node.addr(), "compacted", one_record_batch(4, &section))?;
    ensure!(produced.error_code == 0, "the honest zstd batch: {produced:?}");
    let lying = with_records_section(&honest, 4, &section, 1_000_000);
    let produced = produce(node.addr(), "compacted", lying)?;
    println!("zstd count lie on a compacted topic: {produced:?}");
    ensure!(
        produced.error_code == CORRUPT_MESSAGE,
        "a zstd batch claiming 1,000,000 records was answered {produced:?}"
    );
    canary.check("after the zstd count lie").await?;

    // Neither lie was appended.
    for (topic, next_offset) in [("plain", 0), ("compacted", 1)] {
        let produced = produce(node.addr(), topic, honest.clone())?;
        ensure!(
            (produced.error_code, produced.base_offset) == (0, next_offset),
            "an honest batch to {topic} after the lies: {produced:?}"
        );
    }
    node.assert_running()
}

/// Codecs as librdkafka names them, with Kafka's ids.
const CLIENT_CODECS: [(&str, u8); 4] = [("gzip", 1), ("snappy", 2), ("lz4", 3), ("zstd", 4)];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_batches_compressed_by_rdkafka_reach_a_compacted_topic_in_every_codec() -> Result<()> {
    const TOPIC: &str = "compacted-clients";
    const RECORDS_PER_CODEC: usize = 200;
    let node = SluiceNode::start(NodeOptions::default())?;
    let admin = clients::admin_client(&node.bootstrap())?;
    clients::create_topic(&admin, TOPIC, 1, &[("cleanup.policy", "compact")]).await?;

    let mut expected = Vec::new();
    for (codec, _) in CLIENT_CODECS {
        let producer: FutureProducer = clients::producer_config(&node.bootstrap())
            .set("compression.codec", codec)
            .set("linger.ms", "20")
            .create()?;
        let mut deliveries = Vec::new();
        for i in 0..RECORDS_PER_CODEC {
            let key = format!("{codec}-{}", i % 10);
            let value = format!("{codec} value {i} ").repeat(20);
            let record = FutureRecord::to(TOPIC).partition(0).key(&key).payload(&value);
            let delivery = producer
                .send_result(record)
                .map_err(|(e, _)| anyhow!("{codec} record {i} could not be queued: {e}"))?;
            deliveries.push(delivery);
            expected.push((key, value));
        }
        for (i, delivery) in deliveries.into_iter().enumerate() {
            delivery
                .await
                .context("a delivery was cancelled")?
                .map_err(|(e, _)| anyhow!("{codec} record {i} was refused: {e}"))?;
        }
        // A keyless record in the same codec is refused: proof the records were decoded.
        let keyless = FutureRecord::<str, str>::to(TOPIC).partition(0).payload("no key");
        match producer.send(keyless, TIMEOUT).await {
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::InvalidRecord), _)) => {}
            other => bail!("a keyless {codec} record to a compacted topic: {other:?}"),
        }
    }

    let consumer = clients::stream_consumer(&node.bootstrap())?;
    clients::assign(&consumer, TOPIC, &[0], Offset::Offset(0))?;
    let total = HashMap::from([(0, expected.len())]);
    let consumed = clients::consume_exact(&consumer, &total, TIMEOUT).await?;
    let got: Vec<(String, String)> = consumed
        .get(&0)
        .context("nothing read from partition 0")?
        .iter()
        .map(|c| {
            let text = |b: &Option<Vec<u8>>| String::from_utf8_lossy(b.as_deref().unwrap_or_default()).into_owned();
            (text(&c.key), text(&c.value))
        })
        .collect();
    ensure!(got == expected, "records read back differ from those produced");

    // The batches are stored as the client compressed them: every codec is in the log.
    let segment = node
        .data_dir()
        .join(format!("{TOPIC}-0"))
        .join("00000000000000000000.log");
    let stored = std::fs::read(&segment).with_context(|| format!("read {}", segment.display()))?;
    let codecs: BTreeSet<u8> = BatchIter::new(&stored).map(|(h, _)| h.compression()).collect();
    let wanted: BTreeSet<u8> = CLIENT_CODECS.iter().map(|(_, id)| *id).collect();
    println!("codecs stored: {codecs:?}");
    ensure!(
        codecs == wanted,
        "stored batches use codecs {codecs:?}, expected {wanted:?}"
    );
    Ok(())
}

//! Produce with rdkafka (acks=all), read everything back with an assigned consumer, and check
//! that the broker kept every byte, every offset and the order; and that a topic's
//! `compression.type` decides the codec batches are stored and served in.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::FutureRecord;
use rdkafka::{Offset, Timestamp};
use sluice_integration_tests::clients::{self, Consumed};
use sluice_integration_tests::{kafka_client, NodeOptions, SluiceNode};
use sluice_protocol::batch::BatchIter;

const RECORDS: usize = 100_000;

fn key(i: usize) -> Vec<u8> {
    format!("key-{i}").into_bytes()
}

/// Value of record `i`: a null value every 997th record (a tombstone is not an empty value),
/// an empty value every 991st, otherwise 0..=300 bytes repeating a tag derived from `i` (unique
/// per record, and redundant enough that every codec shrinks a batch of them).
fn value(i: usize) -> Option<Vec<u8>> {
    if i.is_multiple_of(997) {
        return None;
    }
    if i.is_multiple_of(991) {
        return Some(Vec::new());
    }
    let len = (i * 7919) % 301;
    let mut tag = format!("v{i}|").into_bytes();
    tag.extend_from_slice(&[0x00, 0xff, b'|']); // not only ASCII
    Some(tag.iter().copied().cycle().take(len).collect())
}

fn headers(i: usize) -> Vec<(String, Option<Vec<u8>>)> {
    let mut h = vec![
        ("idx".to_string(), Some(i.to_string().into_bytes())),
        ("trace".to_string(), Some(vec![0, 1, 2, 255, (i % 256) as u8])),
    ];
    if i.is_multiple_of(3) {
        h.push(("null-header".to_string(), None));
    }
    h
}

fn owned_headers(h: &[(String, Option<Vec<u8>>)]) -> OwnedHeaders {
    h.iter().fold(OwnedHeaders::new_with_capacity(h.len()), |acc, (k, v)| {
        acc.insert(Header {
            key: k,
            value: v.as_deref(),
        })
    })
}

/// Delivered position of each produced record index.
struct Delivered {
    by_index: Vec<(i32, i64)>,
}

async fn produce_indexed(
    bootstrap: &str,
    topic: &str,
    records: usize,
    base_ts: i64,
    extra: &[(&str, &str)],
) -> Result<Delivered> {
    let mut cfg = clients::producer_config(bootstrap);
    // Without retries a record can never be reordered behind a later one, so produce order is
    // exactly offset order and any deviation is the broker's.
    cfg.set("message.send.max.retries", "0");
    for (k, v) in extra {
        cfg.set(*k, *v);
    }
    let producer: rdkafka::producer::FutureProducer = cfg.create()?;
    let mut outstanding = VecDeque::new();
    let mut done = Vec::with_capacity(records);
    for i in 0..records {
        let k = key(i);
        let v = value(i);
        let h = owned_headers(&headers(i));
        let mut rec: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(topic)
            .key(&k[..])
            .timestamp(base_ts + i as i64)
            .headers(h);
        if let Some(v) = v.as_deref() {
            rec = rec.payload(v);
        }
        clients::enqueue(&producer, rec, &mut outstanding, &mut done, i).await?;
    }
    while let Some((i, fut)) = outstanding.pop_front() {
        done.push((i, fut.await.context("delivery future cancelled")?));
    }
    let mut by_index = vec![(-1, -1); records];
    let mut failures = Vec::new();
    for (i, r) in done {
        match r {
            Ok(d) => by_index[i] = (d.partition, d.offset),
            Err((e, _)) => failures.push((i, e)),
        }
    }
    ensure!(
        failures.is_empty(),
        "{} of {records} deliveries failed, first: {:?}",
        failures.len(),
        failures.first()
    );
    Ok(Delivered { by_index })
}

/// Checks one partition's consumed records against what was produced to it, in produce order.
fn check_partition(
    partition: i32,
    consumed: &[Consumed],
    produced_indices: &[usize],
    delivered: &Delivered,
    base_ts: i64,
) -> Result<()> {
    ensure!(
        consumed.len() == produced_indices.len(),
        "partition {partition}: consumed {} records, produced {}",
        consumed.len(),
        produced_indices.len()
    );
    for (pos, (c, &i)) in consumed.iter().zip(produced_indices).enumerate() {
        let ctx = || format!("partition {partition}, position {pos}, record index {i}");
        ensure!(
            c.offset == pos as i64,
            "{}: offset {} (offsets must be contiguous from 0)",
            ctx(),
            c.offset
        );
        ensure!(
            delivered.by_index[i] == (partition, c.offset),
            "{}: delivery report said {:?}, consumed at offset {}",
            ctx(),
            delivered.by_index[i],
            c.offset
        );
        ensure!(c.key.as_deref() == Some(&key(i)[..]), "{}: key {:?}", ctx(), c.key);
        ensure!(
            c.value == value(i),
            "{}: value differs (len {:?})",
            ctx(),
            c.value.as_ref().map(Vec::len)
        );
        ensure!(
            c.timestamp == Timestamp::CreateTime(base_ts + i as i64),
            "{}: timestamp {:?}",
            ctx(),
            c.timestamp
        );
        ensure!(c.headers == headers(i), "{}: headers {:?}", ctx(), c.headers);
    }
    Ok(())
}

/// Produce order per partition = the record indices sorted by delivered offset; with no retries
/// this must also be ascending index order.
fn produced_order(delivered: &Delivered, partitions: i32) -> Result<HashMap<i32, Vec<usize>>> {
    let mut per: HashMap<i32, Vec<(i64, usize)>> = HashMap::new();
    for (i, &(p, o)) in delivered.by_index.iter().enumerate() {
        ensure!((0..partitions).contains(&p), "record {i} delivered to partition {p}");
        per.entry(p).or_default().push((o, i));
    }
    let mut out = HashMap::new();
    for (p, mut v) in per {
        v.sort();
        for w in v.windows(2) {
            ensure!(
                w[0].0 != w[1].0,
                "partition {p}: two records acknowledged at offset {}",
                w[0].0
            );
            ensure!(
                w[0].1 < w[1].1,
                "partition {p}: record {} (offset {}) was sent after record {} (offset {})",
                w[0].1,
                w[0].0,
                w[1].1,
                w[1].0
            );
        }
        out.insert(p, v.into_iter().map(|(_, i)| i).collect());
    }
    Ok(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundred_thousand_keyed_records_read_back_in_order_with_headers_and_timestamps() -> Result<()> {
    let node = SluiceNode::start(NodeOptions::default())?;
    let admin = clients::admin_client(&node.bootstrap())?;
    let topic = "roundtrip";
    clients::create_topic(&admin, topic, 3, &[]).await?;

    let base_ts = clients::now_ms() - 3_600_000;
    let delivered = produce_indexed(&node.bootstrap(), topic, RECORDS, base_ts, &[]).await?;
    let order = produced_order(&delivered, 3)?;
    ensure!(
        order.len() == 3,
        "keys spread over {} partitions, expected all 3",
        order.len()
    );

    let consumer = clients::stream_consumer(&node.bootstrap())?;
    clients::assign(&consumer, topic, &[0, 1, 2], Offset::Offset(0))?;
    let expected: HashMap<i32, usize> = order.iter().map(|(p, v)| (*p, v.len())).collect();
    let consumed = clients::consume_exact(&consumer, &expected, Duration::from_secs(120)).await?;
    for p in 0..3 {
        check_partition(p, &consumed[&p], &order[&p], &delivered, base_ts)?;
    }
    Ok(())
}

/// Stored batches per compression codec (attributes & 7) in the `.log` segments of `topic` under
/// `data_dir` (layout `<topic>-<partition>/<base_offset>.log`, batches stored as received: see
/// DESIGN.md), each codec with the record counts of its batches.
fn stored_batch_codecs(data_dir: &Path, topic: &str) -> Result<BTreeMap<i16, Vec<i32>>> {
    let mut codecs: BTreeMap<i16, Vec<i32>> = BTreeMap::new();
    for entry in std::fs::read_dir(data_dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().to_string();
        let is_partition_dir = name
            .strip_prefix(topic)
            .and_then(|r| r.strip_prefix('-'))
            .is_some_and(|p| p.parse::<u32>().is_ok());
        if !is_partition_dir {
            continue;
        }
        for f in std::fs::read_dir(entry.path())? {
            let path = f?.path();
            if path.extension().is_none_or(|e| e != "log") {
                continue;
            }
            let bytes = std::fs::read(&path)?;
            let mut pos = 0usize;
            // Batch header: base offset i64, batch length i32, leader epoch i32, magic i8,
            // crc u32, attributes i16 (at byte 21), ..., record count i32 (at byte 57).
            while pos + 61 <= bytes.len() {
                let len = i32::from_be_bytes(bytes[pos + 8..pos + 12].try_into()?);
                ensure!(len >= 49, "{}: batch length {len} at byte {pos}", path.display());
                let attributes = i16::from_be_bytes(bytes[pos + 21..pos + 23].try_into()?);
                let records = i32::from_be_bytes(bytes[pos + 57..pos + 61].try_into()?);
                codecs.entry(attributes & 7).or_default().push(records);
                pos += 12 + len as usize;
            }
        }
    }
    Ok(codecs)
}

/// Produces 3,000 records with `codec`, reads them back intact, and checks that the stored
/// batches carry that codec: the client really compressed, and the broker kept the batches as
/// received.
async fn compressed_round_trip(codec: &str, codec_id: i16) -> Result<()> {
    const N: usize = 3_000;
    let node = SluiceNode::start(NodeOptions::default())?;
    let admin = clients::admin_client(&node.bootstrap())?;
    let base_ts = clients::now_ms() - 60_000;
    let topic = format!("compressed-{codec}");
    clients::create_topic(&admin, &topic, 1, &[]).await?;
    let delivered = produce_indexed(
        &node.bootstrap(),
        &topic,
        N,
        base_ts,
        &[("compression.type", codec), ("linger.ms", "20")],
    )
    .await
    .with_context(|| format!("produce {codec}"))?;
    let order = produced_order(&delivered, 1)?;

    let consumer = clients::stream_consumer(&node.bootstrap())?;
    clients::assign(&consumer, &topic, &[0], Offset::Offset(0))?;
    let consumed = clients::consume_exact(&consumer, &HashMap::from([(0, N)]), Duration::from_secs(60))
        .await
        .with_context(|| format!("consume {codec}"))?;
    check_partition(0, &consumed[&0], &order[&0], &delivered, base_ts).with_context(|| format!("codec {codec}"))?;

    let codecs = stored_batch_codecs(node.data_dir(), &topic)?;
    ensure!(
        !codecs.is_empty(),
        "{codec}: no batches found in segment files under {}",
        node.data_dir().display()
    );
    // librdkafka sends a batch uncompressed when compressing did not make it smaller
    // (rdkafka_msgset_writer.c), which happens to a batch of one or two short records when a
    // loaded machine cuts batches small. Any larger uncompressed batch means the client chose
    // not to compress: it enables LZ4 only if the broker advertises FindCoordinator, and ZSTD
    // only with Produce >= v7 and Fetch >= v10 (librdkafka src/rdkafka_feature.c).
    let compressed = codecs.get(&codec_id).map_or(0, Vec::len);
    let wrong: Vec<_> = codecs
        .iter()
        .filter(|(&c, counts)| c != codec_id && !(c == 0 && counts.iter().all(|&n| n <= 2)))
        .collect();
    ensure!(
        compressed > 0 && wrong.is_empty(),
        "{codec}: record counts of the stored batches by codec id {codecs:?}; want codec {codec_id}, \
         or 0 only for batches of at most 2 records"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gzip_batches_round_trip_and_are_stored_compressed() -> Result<()> {
    compressed_round_trip("gzip", 1).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snappy_batches_round_trip_and_are_stored_compressed() -> Result<()> {
    compressed_round_trip("snappy", 2).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lz4_batches_round_trip_and_are_stored_compressed() -> Result<()> {
    compressed_round_trip("lz4", 3).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zstd_batches_round_trip_and_are_stored_compressed() -> Result<()> {
    compressed_round_trip("zstd", 4).await
}

/// A fetch whose offset falls inside a batch gets that whole batch and the client skips the
/// records before its offset. A broker that returned only batches starting at or after the offset
/// would make records unreachable and hang a consumer positioned in the last batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_starting_inside_a_batch_reads_the_rest_of_that_batch() -> Result<()> {
    const N: usize = 100;
    let node = SluiceNode::start(NodeOptions::default())?;
    let admin = clients::admin_client(&node.bootstrap())?;
    clients::create_topic(&admin, "one-batch", 1, &[]).await?;
    let base_ts = clients::now_ms();
    // A long linger puts all records in one batch (checked below), compressed so that the
    // broker cannot serve a slice of it even if it wanted to.
    let delivered = produce_indexed(
        &node.bootstrap(),
        "one-batch",
        N,
        base_ts,
        &[("linger.ms", "500"), ("compression.type", "gzip")],
    )
    .await?;
    let codecs = stored_batch_codecs(node.data_dir(), "one-batch")?;
    ensure!(
        codecs.len() == 1 && codecs.get(&1).is_some_and(|counts| counts.len() == 1),
        "expected one gzip batch, stored {codecs:?}"
    );
    let order = produced_order(&delivered, 1)?;

    for start in [50usize, N - 1] {
        let consumer = clients::stream_consumer(&node.bootstrap())?;
        clients::assign(&consumer, "one-batch", &[0], Offset::Offset(start as i64))?;
        let m = tokio::time::timeout(Duration::from_secs(20), consumer.recv())
            .await
            .with_context(|| format!("nothing consumed from offset {start} within 20 s"))??;
        let c = Consumed::from_message(&m);
        ensure!(
            c.offset == start as i64,
            "first record from offset {start} has offset {}",
            c.offset
        );
        let i = order[&0][start];
        ensure!(
            c.key.as_deref() == Some(&key(i)[..]) && c.value == value(i),
            "record at offset {start} differs"
        );
    }
    Ok(())
}

/// Codec ids (attributes & 7) of the batches a consumer's Fetch serves from partition 0 of
/// `topic`, each with its record counts, reading from offset 0 until `records` records came.
fn fetched_batch_codecs(addr: SocketAddr, topic: &str, records: usize) -> Result<BTreeMap<i16, Vec<i32>>> {
    let mut codecs: BTreeMap<i16, Vec<i32>> = BTreeMap::new();
    let (mut offset, mut seen) = (0i64, 0usize);
    while seen < records {
        let fetched = kafka_client::consumer_fetch(addr, topic, offset, 1 << 20, 1 << 20)?;
        let before = offset;
        for (header, _) in BatchIter::new(&fetched) {
            codecs
                .entry(header.attributes & 7)
                .or_default()
                .push(header.records_count);
            seen += header.records_count as usize;
            offset = header.last_offset() + 1;
        }
        ensure!(
            offset > before,
            "no whole batch fetched from offset {offset} of {topic}"
        );
    }
    Ok(codecs)
}

/// Produces 2,000 records uncompressed and 2,000 with lz4, each to its own topic created with
/// `topic_configs` on a node started with `node`, reads them back identical (keys, values,
/// headers, timestamps, offsets), and checks the codec of every batch a Fetch serves: `stored`,
/// or for `compression.type=producer` (`stored` = None) the producer's own.
async fn stored_codec_round_trip(node: NodeOptions, topic_configs: &[(&str, &str)], stored: Option<i16>) -> Result<()> {
    const N: usize = 2_000;
    let node = SluiceNode::start(node)?;
    let admin = clients::admin_client(&node.bootstrap())?;
    for (sent, sent_id) in [("none", 0), ("lz4", 3)] {
        let topic = format!(
            "stored-{}-sent-{sent}",
            stored.map_or("producer".to_string(), |c| c.to_string())
        );
        clients::create_topic(&admin, &topic, 1, topic_configs).await?;
        let base_ts = clients::now_ms() - 60_000;
        let producer_settings = [("compression.type", sent), ("linger.ms", "20")];
        let delivered = produce_indexed(&node.bootstrap(), &topic, N, base_ts, &producer_settings).await?;
        let order = produced_order(&delivered, 1)?;
        let consumer = clients::stream_consumer(&node.bootstrap())?;
        clients::assign(&consumer, &topic, &[0], Offset::Offset(0))?;
        let consumed = clients::consume_exact(&consumer, &HashMap::from([(0, N)]), Duration::from_secs(60)).await?;
        check_partition(0, &consumed[&0], &order[&0], &delivered, base_ts).with_context(|| topic.clone())?;

        let codecs = fetched_batch_codecs(node.addr(), &topic, N)?;
        let want = stored.unwrap_or(sent_id);
        // With `producer`, librdkafka's tiny batches that compression did not shrink stay
        // uncompressed (see `compressed_round_trip`); a topic codec applies to every batch.
        let wrong: Vec<_> = codecs
            .iter()
            .filter(|(&c, counts)| c != want && !(stored.is_none() && c == 0 && counts.iter().all(|&n| n <= 2)))
            .collect();
        ensure!(
            codecs.contains_key(&want) && wrong.is_empty(),
            "{topic}: record counts of the fetched batches by codec id {codecs:?}; want codec {want}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zstd_topic_stores_every_batch_in_zstd_whatever_the_producer_sent() -> Result<()> {
    stored_codec_round_trip(NodeOptions::default(), &[("compression.type", "zstd")], Some(4)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gzip_topic_with_a_compression_level_stores_every_batch_in_gzip() -> Result<()> {
    let configs = [("compression.type", "gzip"), ("compression.gzip.level", "9")];
    stored_codec_round_trip(NodeOptions::default(), &configs, Some(1)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncompressed_topic_stores_compressed_batches_decompressed() -> Result<()> {
    stored_codec_round_trip(NodeOptions::default(), &[("compression.type", "uncompressed")], Some(0)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_topic_keeps_the_producers_codec() -> Result<()> {
    stored_codec_round_trip(NodeOptions::default(), &[], None).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_broker_default_compression_type_applies_to_topics_without_one() -> Result<()> {
    let node = NodeOptions::default().set("compression.type", "zstd");
    stored_codec_round_trip(node, &[], Some(4)).await
}

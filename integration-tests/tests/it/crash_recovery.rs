//! Acknowledged records survive a broker crash (SIGKILL) and a graceful stop (SIGTERM), at the
//! same offsets, and topics with their configs come back after the restart.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use rdkafka::admin::{AdminClient, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::producer::{DeliveryFuture, FutureRecord};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::Offset;
use sluice_integration_tests::clients::{self, Consumed};
use sluice_integration_tests::{NodeOptions, SluiceNode};

const TOPIC: &str = "crash";
const IDLE_TOPIC: &str = "crash-idle";
const PARTITIONS: i32 = 3;
const RETENTION_MS: &str = "123456789";
const IDLE_MAX_MESSAGE_BYTES: &str = "500000";

fn key(i: usize) -> Vec<u8> {
    format!("k{i:08}").into_bytes()
}

/// ~1 KB value that identifies its record, so a record at a wrong offset cannot pass.
fn value(i: usize) -> Vec<u8> {
    let mut v = format!("record {i} ").into_bytes();
    v.resize(1000, b'a' + (i % 26) as u8);
    v
}

/// (record index, partition, offset) of every acknowledged record.
type Acked = Vec<(usize, i32, i64)>;

async fn create_topics(admin: &AdminClient<DefaultClientContext>) -> Result<()> {
    clients::create_topic(admin, TOPIC, PARTITIONS, &[("retention.ms", RETENTION_MS)]).await?;
    clients::create_topic(admin, IDLE_TOPIC, 1, &[("max.message.bytes", IDLE_MAX_MESSAGE_BYTES)]).await
}

async fn assert_topics_and_configs_intact(node: &SluiceNode) -> Result<()> {
    let consumer = clients::base_consumer(&node.bootstrap())?;
    ensure!(
        clients::partition_count(&consumer, TOPIC)? == Some(PARTITIONS as usize),
        "after restart, {TOPIC} has {:?} partitions",
        clients::partition_count(&consumer, TOPIC)?
    );
    ensure!(
        clients::partition_count(&consumer, IDLE_TOPIC)? == Some(1),
        "after restart, {IDLE_TOPIC} has {:?} partitions",
        clients::partition_count(&consumer, IDLE_TOPIC)?
    );
    let admin = clients::admin_client(&node.bootstrap())?;
    let described = admin
        .describe_configs(
            [&ResourceSpecifier::Topic(TOPIC), &ResourceSpecifier::Topic(IDLE_TOPIC)],
            &clients::admin_options(),
        )
        .await?;
    ensure!(
        described.len() == 2,
        "DescribeConfigs returned {} resources for 2",
        described.len()
    );
    for (res, (name, want)) in described.into_iter().zip([
        ("retention.ms", RETENTION_MS),
        ("max.message.bytes", IDLE_MAX_MESSAGE_BYTES),
    ]) {
        let res = res.map_err(|e| anyhow::anyhow!("DescribeConfigs error {e:?}"))?;
        let entry = res
            .get(name)
            .with_context(|| format!("{:?} has no {name}", res.specifier))?;
        ensure!(
            entry.value.as_deref() == Some(want),
            "{:?}: {name} = {:?} after restart, was created with {want}",
            res.specifier,
            entry.value
        );
    }
    Ok(())
}

/// Consumes `topic` from offset 0 on every partition until each partition has reached
/// `upto[p]` (inclusive); returns consumed records per partition, checked to be contiguous.
async fn read_upto(bootstrap: &str, topic: &str, upto: &BTreeMap<i32, i64>) -> Result<HashMap<i32, Vec<Consumed>>> {
    let consumer: StreamConsumer = clients::stream_consumer(bootstrap)?;
    let parts: Vec<i32> = upto.keys().copied().collect();
    clients::assign(&consumer, topic, &parts, Offset::Offset(0))?;
    let mut out: HashMap<i32, Vec<Consumed>> = HashMap::new();
    let mut remaining: usize = parts.len();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    while remaining > 0 {
        let m = tokio::time::timeout_at(deadline, consumer.recv()).await.map_err(|_| {
            let got: BTreeMap<i32, Option<i64>> = out.iter().map(|(p, v)| (*p, v.last().map(|c| c.offset))).collect();
            anyhow::anyhow!("timed out reading back: last offsets {got:?}, need {upto:?}")
        })??;
        let c = Consumed::from_message(&m);
        let target = upto[&c.partition];
        let list = out.entry(c.partition).or_default();
        if list.last().is_some_and(|l| l.offset >= target) {
            continue; // this partition is done; later records were not acknowledged
        }
        let want = list.len() as i64;
        ensure!(
            c.offset == want,
            "partition {}: offset {} follows {} (gap or reorder)",
            c.partition,
            c.offset,
            want - 1
        );
        let done = c.offset >= target;
        list.push(c);
        if done {
            remaining -= 1;
        }
    }
    Ok(out)
}

fn verify_acked(acked: &Acked, read: &HashMap<i32, Vec<Consumed>>) -> Result<()> {
    for &(i, p, o) in acked {
        let c = read
            .get(&p)
            .and_then(|v| v.get(o as usize))
            .with_context(|| format!("acknowledged record {i} at {p}/{o} is missing"))?;
        ensure!(
            c.key.as_deref() == Some(&key(i)[..]) && c.value.as_deref() == Some(&value(i)[..]),
            "acknowledged record {i} at {p}/{o}: found key {:?} / value prefix {:?}",
            c.key.as_ref().map(|k| String::from_utf8_lossy(k).to_string()),
            c.value
                .as_ref()
                .map(|v| String::from_utf8_lossy(&v[..v.len().min(20)]).to_string())
        );
    }
    Ok(())
}

fn max_offsets(acked: &Acked) -> BTreeMap<i32, i64> {
    let mut m = BTreeMap::new();
    for &(_, p, o) in acked {
        let e = m.entry(p).or_insert(o);
        *e = (*e).max(o);
    }
    m
}

/// Streams records `first_index..` to [`TOPIC`] with acks=all until at least `min_acked` are
/// acknowledged, SIGKILLs the broker while the producer is still sending, and returns every
/// acknowledged record once all deliveries have resolved.
async fn stream_and_kill(node: &mut SluiceNode, first_index: usize, min_acked: usize) -> Result<Acked> {
    let mut cfg = clients::producer_config(&node.bootstrap());
    // Unacknowledged records fail soon after the kill instead of waiting for the restart.
    cfg.set("message.timeout.ms", "4000").set("linger.ms", "2");
    let producer: rdkafka::producer::FutureProducer = cfg.create()?;

    let stop = Arc::new(AtomicBool::new(false));
    let acked_count = Arc::new(AtomicUsize::new(0));
    let sent_count = Arc::new(AtomicUsize::new(0));
    // Bounded below queue.buffering.max.messages, so librdkafka's queue never fills.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<(usize, DeliveryFuture)>(50_000);

    let sender = {
        let (stop, sent_count, producer) = (stop.clone(), sent_count.clone(), producer.clone());
        tokio::spawn(async move {
            for i in first_index..first_index + 5_000_000 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let (k, v) = (key(i), value(i));
                let rec: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(TOPIC).key(&k[..]).payload(&v[..]);
                match producer.send_result(rec) {
                    Ok(fut) => {
                        sent_count.fetch_add(1, Ordering::Relaxed);
                        if tx.send((i, fut)).await.is_err() {
                            break;
                        }
                    }
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                        bail!("librdkafka queue full: raise queue.buffering.max.messages above the channel bound")
                    }
                    Err((e, _)) => bail!("enqueue {i}: {e}"),
                }
            }
            Ok(())
        })
    };
    let collector = {
        let acked_count = acked_count.clone();
        tokio::spawn(async move {
            let mut acked: Acked = Vec::new();
            let mut failed = 0usize;
            while let Some((i, fut)) = rx.recv().await {
                match fut.await {
                    Ok(Ok(d)) => {
                        acked.push((i, d.partition, d.offset));
                        acked_count.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(Err(_)) | Err(_) => failed += 1,
                }
            }
            (acked, failed)
        })
    };

    let waited = tokio::time::timeout(Duration::from_secs(90), async {
        while acked_count.load(Ordering::Relaxed) < min_acked && !sender.is_finished() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    ensure!(
        waited.is_ok(),
        "only {} records acknowledged in 90 s",
        acked_count.load(Ordering::Relaxed)
    );
    ensure!(
        !sender.is_finished(),
        "producer stopped before the kill: {:?}",
        sender.await
    );
    node.kill()?;
    let sent_at_kill = sent_count.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    sender.await??;
    let (acked, failed) = tokio::time::timeout(Duration::from_secs(60), collector)
        .await
        .context("deliveries did not resolve after the kill")??;
    eprintln!(
        "records {first_index}..: {sent_at_kill} sent before the kill, {} acknowledged, {failed} not",
        acked.len()
    );
    ensure!(
        acked.len() >= min_acked,
        "acknowledged count went down to {}",
        acked.len()
    );
    Ok(acked)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acked_records_survive_repeated_sigkill_mid_stream_and_restart() -> Result<()> {
    // Small segments so the crashes land in logs with several rolled segments.
    let mut node = SluiceNode::start(NodeOptions::default().set("log.segment.bytes", 1_048_576))?;
    create_topics(&clients::admin_client(&node.bootstrap())?).await?;

    // Three crashes: each recovery must also cope with the tail the previous crash left.
    let mut acked: Acked = Vec::new();
    let mut next_index = 0;
    for round in 0..3 {
        let round_acked = stream_and_kill(&mut node, next_index, 8_000)
            .await
            .with_context(|| format!("round {round}"))?;
        next_index = round_acked.iter().map(|a| a.0).max().unwrap_or(next_index) + 1_000_000;
        acked.extend(round_acked);
        node.restart()?;
        let upto = max_offsets(&acked);
        ensure!(
            upto.len() == PARTITIONS as usize,
            "acks only on partitions {:?}",
            upto.keys()
        );
        let read = read_upto(&node.bootstrap(), TOPIC, &upto)
            .await
            .with_context(|| format!("round {round}"))?;
        verify_acked(&acked, &read).with_context(|| format!("after crash {}", round + 1))?;
    }
    assert_topics_and_configs_intact(&node).await?;

    // New records go after the recovered log end: nothing acknowledged gets overwritten.
    let upto = max_offsets(&acked);
    let consumer = clients::base_consumer(&node.bootstrap())?;
    let producer = clients::future_producer(&node.bootstrap())?;
    let mut high_before = BTreeMap::new();
    for p in 0..PARTITIONS {
        let (_, high) = consumer.fetch_watermarks(TOPIC, p, Duration::from_secs(5))?;
        ensure!(
            high > upto[&p],
            "partition {p}: high watermark {high} <= last acknowledged offset {}",
            upto[&p]
        );
        let d = producer
            .send(
                FutureRecord::<str, str>::to(TOPIC)
                    .partition(p)
                    .key("after")
                    .payload("restart"),
                Duration::from_secs(5),
            )
            .await
            .map_err(|(e, _)| anyhow::anyhow!("produce after restart: {e}"))?;
        ensure!(
            d.offset == high,
            "partition {p}: first record after restart got offset {}, log end was {high}",
            d.offset
        );
        high_before.insert(p, high + 1);
    }
    drop(producer);

    // A crash with no traffic in flight changes nothing.
    node.kill()?;
    node.restart()?;
    let consumer = clients::base_consumer(&node.bootstrap())?;
    for p in 0..PARTITIONS {
        let (low, high) = consumer.fetch_watermarks(TOPIC, p, Duration::from_secs(5))?;
        ensure!(
            low == 0 && high == high_before[&p],
            "partition {p}: watermarks ({low}, {high}) after an idle crash, expected (0, {})",
            high_before[&p]
        );
    }
    verify_acked(&acked, &read_upto(&node.bootstrap(), TOPIC, &upto).await?)?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acked_records_survive_sigterm_and_restart() -> Result<()> {
    const N: usize = 5_000;
    let mut node = SluiceNode::start(NodeOptions::default())?;
    create_topics(&clients::admin_client(&node.bootstrap())?).await?;
    let producer = clients::future_producer(&node.bootstrap())?;
    let mut outstanding = VecDeque::new();
    let mut done = Vec::new();
    for i in 0..N {
        let (k, v) = (key(i), value(i));
        let rec: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(TOPIC).key(&k[..]).payload(&v[..]);
        clients::enqueue(&producer, rec, &mut outstanding, &mut done, i).await?;
    }
    while let Some((i, f)) = outstanding.pop_front() {
        done.push((i, f.await?));
    }
    drop(producer);
    let mut acked: Acked = Vec::new();
    for (i, r) in done {
        let d = r.map_err(|(e, _)| anyhow::anyhow!("record {i} not delivered: {e}"))?;
        acked.push((i, d.partition, d.offset));
    }

    let status = node.terminate(Duration::from_secs(15))?;
    eprintln!("broker exit status after SIGTERM: {status}");
    node.restart()?;
    let read = read_upto(&node.bootstrap(), TOPIC, &max_offsets(&acked)).await?;
    verify_acked(&acked, &read)?;
    assert_topics_and_configs_intact(&node).await
}

/// The high-watermark checkpoint (`replication-offset-checkpoint`) follows the high watermark,
/// and a broker whose high watermarks stand still does not write it again: at 10,000
/// partitions each write was a file of them all, fsynced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_high_watermark_checkpoint_is_written_when_a_high_watermark_moves_and_only_then() -> Result<()> {
    const INTERVAL_MS: u64 = 50;
    let node =
        SluiceNode::start(NodeOptions::default().set("replica.high.watermark.checkpoint.interval.ms", INTERVAL_MS))?;
    let admin = clients::admin_client(&node.bootstrap())?;
    clients::create_topic(&admin, HW_TOPIC, 1, &[]).await?;

    produce_until_checkpointed(&node, 5, 5).await?;
    let path = node.data_dir().join("replication-offset-checkpoint");
    let written = std::fs::metadata(&path)?.modified()?;
    // Twenty checkpoint intervals with nothing produced: the file is the same one.
    std::thread::sleep(Duration::from_millis(20 * INTERVAL_MS));
    ensure!(
        std::fs::metadata(&path)?.modified()? == written && checkpoint_holds(&node, 5),
        "the checkpoint was written again while no high watermark moved"
    );

    produce_until_checkpointed(&node, 3, 8).await
}

const HW_TOPIC: &str = "hw-checkpoint";

/// Whether the node's high-watermark checkpoint holds `high_watermark` for partition 0 of
/// [`HW_TOPIC`].
fn checkpoint_holds(node: &SluiceNode, high_watermark: i64) -> bool {
    let line = format!("{HW_TOPIC} 0 {high_watermark}");
    std::fs::read_to_string(node.data_dir().join("replication-offset-checkpoint"))
        .is_ok_and(|text| text.lines().any(|l| l == line))
}

/// Produces `records` to [`HW_TOPIC`], then waits for the checkpoint to hold `high_watermark`.
async fn produce_until_checkpointed(node: &SluiceNode, records: usize, high_watermark: i64) -> Result<()> {
    clients::produce_numbered(&node.bootstrap(), HW_TOPIC, records).await?;
    clients::wait_until(
        Duration::from_secs(10),
        &format!("the checkpoint holding high watermark {high_watermark}"),
        || checkpoint_holds(node, high_watermark).then_some(()),
    )
}

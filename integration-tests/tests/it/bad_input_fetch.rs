//! Fetch requests that ask for too much or claim to be someone else, against real brokers.
//!
//! - A consumer asking for 2 GiB (`max_bytes` = `partition_max_bytes` = 2^31-1) of a partition
//!   holding ~200 MB gets at most `fetch.max.bytes` of records per response (a lowered value
//!   and Kafka's 55 MiB default), the first batch whole even past the limits (KIP-74), while the
//!   broker's resident memory stays bounded with several such fetches in flight; a real
//!   consumer still drains the partition.
//! - In a 3-node cluster, a Fetch claiming a follower's replica id without that broker's current
//!   broker epoch (v15+ with a wrong epoch, or v12, which carries none) is answered
//!   NOT_LEADER_OR_FOLLOWER and moves neither the high watermark nor the ISR; nor does a
//!   consumer's fetch. The brokers serve normal traffic afterwards.
//!
//! Each case starts its own brokers; they run one at a time to share the machine's cores.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ReplicaState};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse, ListOffsetsRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use rdkafka::consumer::BaseConsumer;
use rdkafka::{Message, Offset};
use sluice_integration_tests::clients::{self, wait_until};
use sluice_integration_tests::kafka_client::{
    consumer_fetch, fetch_topic, first_fetch_partition, FETCH_VERSION_BY_NAME,
};
use sluice_integration_tests::node::{NodeOptions, SluiceNode};
use sluice_integration_tests::wire::{self, RawRecord};
use sluice_integration_tests::{faults, kafka_client, procstat, Cluster};
use sluice_protocol::batch::BatchIter;

/// One case at a time: each starts brokers that want the machine's cores.
static SERIAL: Mutex<()> = Mutex::new(());

const ASK_EVERYTHING: i32 = i32::MAX;
/// Kafka's `fetch.max.bytes` default (55 MiB).
const DEFAULT_FETCH_MAX_BYTES: usize = 57_671_680;
/// The lowered cap the concurrent fetches run under.
const LOWERED_FETCH_MAX_BYTES: usize = 8 << 20;
/// Records per stored batch and value size: batches of ~1 MB, under max.message.bytes.
const RECORDS_PER_BATCH: usize = 16;
const VALUE_BYTES: usize = 64_000;
/// Batches per produce request, and requests: ~200 MB in all.
const BATCHES_PER_REQUEST: usize = 8;
const PRODUCE_REQUESTS: usize = 25;
/// Resident memory the broker must stay under while several 2 GiB fetches run.
const RSS_LIMIT_KIB: u64 = 300 * 1024;
const CONCURRENT_FETCHES: usize = 6;
const FETCHES_EACH: usize = 3;
const FETCH_VERSION_WITH_REPLICA_STATE: i16 = 15;
const NOT_LEADER_OR_FOLLOWER: i16 = 6;
const IO_TIMEOUT: Duration = Duration::from_secs(30);

#[test]
fn fetches_asking_for_2_gib_get_at_most_fetch_max_bytes_and_the_broker_stays_small() -> Result<()> {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let started = Instant::now();
    let topic = "two-gib-ask";
    let mut lowered = SluiceNode::start(
        NodeOptions::default()
            .set("fetch.max.bytes", LOWERED_FETCH_MAX_BYTES)
            .set("log.segment.bytes", 64 << 20),
    )?;
    ensure!(
        kafka_client::create_topic(lowered.addr(), topic, 1, IO_TIMEOUT)? == 0,
        "CreateTopics failed"
    );
    let end = fill(lowered.addr(), topic)?;
    let stored: u64 = std::fs::read_dir(lowered.data_dir().join(format!("{topic}-0")))?
        .filter_map(|e| e.ok())
        .filter(|e| sluice_integration_tests::faults::is_segment_log_file(&e.file_name().to_string_lossy()))
        .map(|e| e.metadata().map_or(0, |m| m.len()))
        .sum();
    eprintln!(
        "filled {topic}-0 with {end} records, {stored} bytes in segments, in {:?}",
        started.elapsed()
    );
    ensure!(stored > 190_000_000, "only {stored} bytes stored");

    // KIP-74: a first batch larger than every limit still comes back whole, alone.
    let one = consumer_fetch(lowered.addr(), topic, 5, 1, 1)?;
    let batches = batch_spans(&one)?;
    ensure!(
        batches.len() == 1 && batches[0].0 <= 5 && batches[0].1 >= 5,
        "max_bytes=1 fetch at 5 returned {batches:?}"
    );

    let pid = lowered.pid().context("broker pid")?;
    let (peak_kib, sizes) = fetch_concurrently(lowered.addr(), topic, end, pid)?;
    eprintln!(
        "{CONCURRENT_FETCHES}x{FETCHES_EACH} concurrent fetches of 2^31-1 bytes under fetch.max.bytes={LOWERED_FETCH_MAX_BYTES}: \
         response record bytes {sizes:?}, broker peak VmRSS {peak_kib} KiB"
    );
    ensure!(peak_kib < RSS_LIMIT_KIB, "broker VmRSS reached {peak_kib} KiB");

    drain_with_consumer(&lowered.bootstrap(), topic, end)?;
    eprintln!(
        "a consumer drained all {end} records, {:?} into the case",
        started.elapsed()
    );

    // The same log under the default fetch.max.bytes (55 MiB): one response per fetch, capped.
    lowered.terminate(IO_TIMEOUT)?;
    let default = SluiceNode::start(
        NodeOptions::default()
            .data_dir(lowered.data_dir().to_path_buf())
            .set("log.segment.bytes", 64 << 20),
    )?;
    let pid = default.pid().context("broker pid")?;
    let mut sizes = Vec::new();
    for offset in [0, end / 2] {
        let records = await_fetch_everything(default.addr(), topic, offset)?;
        check_batches_from(&records, offset)?;
        ensure!(
            records.len() <= DEFAULT_FETCH_MAX_BYTES && records.len() > DEFAULT_FETCH_MAX_BYTES - (2 << 20),
            "default cap: {} record bytes from offset {offset}",
            records.len()
        );
        sizes.push(records.len());
    }
    let rss = procstat::status_kib(pid, "VmRSS")?;
    eprintln!("default fetch.max.bytes: response record bytes {sizes:?}, broker VmRSS after {rss} KiB");
    ensure!(rss < RSS_LIMIT_KIB, "broker VmRSS {rss} KiB after two 55 MiB fetches");

    produce_then_fetch(default.addr(), topic)?;
    eprintln!("case took {:?}", started.elapsed());
    drop(default);
    drop(lowered);
    Ok(())
}

#[test]
fn a_fetch_claiming_a_followers_id_without_its_broker_epoch_moves_no_high_watermark_or_isr() -> Result<()> {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let topic = "spoofed";
    // The frozen follower must stay in the ISR (and unfenced) for the whole case.
    let mut cluster = Cluster::start(
        3,
        &[
            ("broker.session.timeout.ms", "120000"),
            ("replica.lag.time.max.ms", "120000"),
        ],
    )?;
    faults::create_topic(&cluster, 1, topic, 1, 3, &[])?;
    cluster.await_full_isr(topic, Duration::from_secs(20))?;
    let leader = cluster.partition_leader(1, topic, 0, Duration::from_secs(10))?;
    let state = cluster
        .partitions(leader, topic)?
        .into_iter()
        .next()
        .context("partition 0")?;
    let frozen = *state.replicas.iter().find(|id| **id != leader).context("a follower")?;
    let leader_addr = cluster.addr(leader);
    let topic_id = kafka_client::topic_id(leader_addr, topic)?;

    cluster.node(frozen).pause()?;
    let records = 40;
    for i in 0..records / 4 {
        let batch = small_batch(4, i);
        produce(leader_addr, topic, 1, Bytes::from(batch))?;
    }
    let log_end = records as i64;
    let hw_before = high_watermark(leader_addr, topic)?;
    ensure!(
        hw_before < log_end,
        "HW {hw_before} already at the log end {log_end} with a follower frozen"
    );

    // v15 with the follower's id and a broker epoch it does not have, then one given as -1.
    for epoch in [987_654_321, -1] {
        let spoof = FetchRequest::default()
            .with_replica_state(
                ReplicaState::default()
                    .with_replica_id(BrokerId(frozen))
                    .with_replica_epoch(epoch),
            )
            .with_max_bytes(ASK_EVERYTHING)
            .with_topics(vec![FetchTopic::default().with_topic_id(topic_id).with_partitions(
                vec![FetchPartition::default()
                    .with_partition(0)
                    .with_current_leader_epoch(state.leader_epoch)
                    .with_fetch_offset(log_end)
                    .with_partition_max_bytes(ASK_EVERYTHING)],
            )]);
        let response: FetchResponse =
            kafka_client::call(leader_addr, &spoof, FETCH_VERSION_WITH_REPLICA_STATE, IO_TIMEOUT)?;
        let error = first_fetch_partition(&response)?.error_code;
        eprintln!("Fetch v15 claiming replica {frozen} with broker epoch {epoch}: error code {error}");
        ensure!(
            error == NOT_LEADER_OR_FOLLOWER,
            "v15 spoof with epoch {epoch}: error {error}"
        );
    }
    // v12 carries no broker epoch at all.
    let spoof = FetchRequest::default()
        .with_replica_id(BrokerId(frozen))
        .with_max_bytes(ASK_EVERYTHING)
        .with_topics(vec![fetch_topic(topic, log_end, ASK_EVERYTHING)]);
    let response: FetchResponse = kafka_client::call(leader_addr, &spoof, FETCH_VERSION_BY_NAME, IO_TIMEOUT)?;
    let error = first_fetch_partition(&response)?.error_code;
    eprintln!("Fetch v12 claiming replica {frozen}: error code {error}");
    ensure!(error == NOT_LEADER_OR_FOLLOWER, "v12 spoof: error {error}");

    // A consumer's fetch at the log end does not count as anyone's progress either.
    let consumer = consumer_fetch(leader_addr, topic, log_end, ASK_EVERYTHING, ASK_EVERYTHING)?;
    ensure!(
        consumer.is_empty(),
        "a consumer read {} bytes above the HW",
        consumer.len()
    );

    let hw_after = high_watermark(leader_addr, topic)?;
    let isr_after = cluster
        .partitions(leader, topic)?
        .into_iter()
        .next()
        .context("partition 0")?
        .isr;
    eprintln!("HW before the spoofs {hw_before}, after {hw_after}; ISR after {isr_after:?}");
    ensure!(hw_after == hw_before, "the HW moved from {hw_before} to {hw_after}");
    ensure!(
        isr_after.contains(&frozen) && isr_after.len() == 3,
        "ISR changed to {isr_after:?}"
    );

    // The real follower, resumed, is what moves the HW; then normal traffic flows.
    cluster.node(frozen).resume()?;
    wait_until(
        Duration::from_secs(20),
        "the resumed follower to bring the HW to the log end",
        || high_watermark(leader_addr, topic).ok().filter(|hw| *hw >= log_end),
    )?;
    produce_then_fetch(leader_addr, topic)?;
    Ok(())
}

/// Produces ~200 MB of ~1 MB batches with acks=1; returns the log end offset.
fn fill(addr: SocketAddr, topic: &str) -> Result<i64> {
    let value = wire::pseudo_random_bytes(7, VALUE_BYTES);
    let records: Vec<RawRecord<'_>> = (0..RECORDS_PER_BATCH)
        .map(|_| RawRecord {
            key: None,
            value: Some(&value),
        })
        .collect();
    let batch = wire::record_batch_v2(clients::now_ms(), &records);
    let request: Bytes = batch.repeat(BATCHES_PER_REQUEST).into();
    let mut end = 0;
    for _ in 0..PRODUCE_REQUESTS {
        end = produce(addr, topic, 1, request.clone())? + (BATCHES_PER_REQUEST * RECORDS_PER_BATCH) as i64;
    }
    Ok(end)
}

/// Produce v9 of `records` (whole batches) to partition 0, retried while the partition's
/// leadership settles; returns the base offset.
fn produce(addr: SocketAddr, topic: &str, acks: i16, records: Bytes) -> Result<i64> {
    let mut last_error = 0;
    for _ in 0..100 {
        let partition = kafka_client::produce_to_partition_0(addr, topic, acks, records.clone(), IO_TIMEOUT)?;
        match partition.error_code {
            0 => return Ok(partition.base_offset),
            // Leadership not settled yet: LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER.
            5 | 6 => {
                last_error = partition.error_code;
                std::thread::sleep(Duration::from_millis(100));
            }
            other => bail!("produce to {topic}: error code {other}"),
        }
    }
    bail!("produce to {topic} kept failing with error code {last_error}")
}

/// A 2 GiB [`consumer_fetch`], retried while a restarted broker is still opening its partitions.
fn await_fetch_everything(addr: SocketAddr, topic: &str, offset: i64) -> Result<Bytes> {
    let serving = || {
        consumer_fetch(addr, topic, offset, ASK_EVERYTHING, ASK_EVERYTHING)
            .ok()
            .filter(|records| !records.is_empty())
    };
    wait_until(
        Duration::from_secs(20),
        "the restarted broker to serve the partition",
        serving,
    )
}

/// (base offset, last offset) of each whole batch; fails on a partial batch.
fn batch_spans(records: &[u8]) -> Result<Vec<(i64, i64)>> {
    let mut iter = BatchIter::new(records);
    let spans = iter.by_ref().map(|(h, _)| (h.base_offset, h.last_offset())).collect();
    ensure!(iter.at_end(), "a fetch response ended in a partial batch");
    Ok(spans)
}

/// The response holds whole batches, contiguous, the first one holding `offset`.
fn check_batches_from(records: &[u8], offset: i64) -> Result<()> {
    let spans = batch_spans(records)?;
    let (first_base, first_last) = *spans.first().context("no batch")?;
    ensure!(
        first_base <= offset && offset <= first_last,
        "first batch {first_base}..={first_last} for offset {offset}"
    );
    for pair in spans.windows(2) {
        ensure!(pair[1].0 == pair[0].1 + 1, "batches not contiguous: {pair:?}");
    }
    Ok(())
}

/// Runs [`CONCURRENT_FETCHES`] threads of 2 GiB fetches from spread offsets while sampling the
/// broker's VmRSS; returns the peak and the response sizes.
fn fetch_concurrently(addr: SocketAddr, topic: &str, end: i64, pid: u32) -> Result<(u64, Vec<usize>)> {
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut peak = 0;
            while !done.load(Ordering::Relaxed) {
                peak = peak.max(procstat::status_kib(pid, "VmRSS").unwrap_or(0));
                std::thread::sleep(Duration::from_millis(10));
            }
            peak.max(procstat::status_kib(pid, "VmRSS").unwrap_or(0))
        })
    };
    let fetchers: Vec<_> = (0..CONCURRENT_FETCHES)
        .map(|i| {
            let topic = topic.to_string();
            std::thread::spawn(move || -> Result<Vec<usize>> {
                let mut sizes = Vec::new();
                for round in 0..FETCHES_EACH {
                    let offset =
                        end * (i * FETCHES_EACH + round) as i64 / (CONCURRENT_FETCHES * FETCHES_EACH) as i64 + 3;
                    let records = consumer_fetch(addr, &topic, offset, ASK_EVERYTHING, ASK_EVERYTHING)?;
                    check_batches_from(&records, offset)?;
                    ensure!(
                        records.len() <= LOWERED_FETCH_MAX_BYTES,
                        "{} record bytes from offset {offset} exceed fetch.max.bytes",
                        records.len()
                    );
                    sizes.push(records.len());
                }
                Ok(sizes)
            })
        })
        .collect();
    let mut sizes = Vec::new();
    let mut failure = None;
    for fetcher in fetchers {
        match fetcher.join() {
            Ok(Ok(s)) => sizes.extend(s),
            Ok(Err(e)) => failure = Some(e),
            Err(_) => failure = Some(anyhow::anyhow!("a fetch thread panicked")),
        }
    }
    done.store(true, Ordering::Relaxed);
    let peak = sampler
        .join()
        .map_err(|_| anyhow::anyhow!("the RSS sampler panicked"))?;
    if let Some(e) = failure {
        return Err(e);
    }
    ensure!(
        sizes.iter().all(|s| *s > LOWERED_FETCH_MAX_BYTES - (2 << 20)),
        "with ~200 MB stored every response should be near the cap: {sizes:?}"
    );
    Ok((peak, sizes))
}

/// A librdkafka consumer reads every offset `0..end` once, in order, with whole values.
fn drain_with_consumer(bootstrap: &str, topic: &str, end: i64) -> Result<()> {
    let consumer: BaseConsumer = clients::consumer_config(bootstrap)
        .set("group.id", "drain")
        .set("enable.auto.commit", "false")
        .create()?;
    clients::assign(&consumer, topic, &[0], Offset::Beginning)?;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut next = 0;
    while next < end {
        ensure!(Instant::now() < deadline, "consumer stopped at offset {next} of {end}");
        let Some(message) = consumer.poll(Duration::from_secs(1)) else {
            continue;
        };
        let message = message?;
        ensure!(
            message.offset() == next,
            "consumer got offset {} where {next} was due",
            message.offset()
        );
        ensure!(
            message.payload().map(<[u8]>::len) == Some(VALUE_BYTES),
            "record {next} has a damaged value"
        );
        next += 1;
    }
    Ok(())
}

/// After the abuse, an acks=all produce of one record is answered and a consumer fetch of it
/// returns it.
fn produce_then_fetch(addr: SocketAddr, topic: &str) -> Result<()> {
    let base = produce(addr, topic, -1, Bytes::from(small_batch(1, 99)))?;
    let records = wait_until(Duration::from_secs(10), "the produced record to be fetchable", || {
        consumer_fetch(addr, topic, base, 1 << 20, 1 << 20)
            .ok()
            .filter(|r| !r.is_empty())
    })?;
    let spans = batch_spans(&records)?;
    ensure!(
        spans.first() == Some(&(base, base)),
        "fetched {spans:?}, produced offset {base}"
    );
    Ok(())
}

fn small_batch(records: usize, seed: u64) -> Vec<u8> {
    let value = wire::pseudo_random_bytes(seed + 1, 100);
    let records: Vec<RawRecord<'_>> = (0..records)
        .map(|_| RawRecord {
            key: None,
            value: Some(&value),
        })
        .collect();
    wire::record_batch_v2(clients::now_ms(), &records)
}

/// ListOffsets LATEST (read_uncommitted): the partition's high watermark.
fn high_watermark(addr: SocketAddr, topic: &str) -> Result<i64> {
    let request = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(0)
                .with_timestamp(-1)])]);
    let response = kafka_client::call(addr, &request, 7, IO_TIMEOUT)?;
    let partition = response
        .topics
        .first()
        .and_then(|t| t.partitions.first())
        .context("ListOffsets without a partition")?;
    ensure!(
        partition.error_code == 0,
        "ListOffsets: error code {}",
        partition.error_code
    );
    Ok(partition.offset)
}

//! Log compaction end to end: a topic created with `cleanup.policy=compact` through rdkafka's
//! admin client, many updates per key and then tombstones produced with rdkafka, and a consumer
//! reading from the beginning that eventually sees exactly the latest value of every live key,
//! at the offset it was acknowledged at, and nothing of deleted keys once `delete.retention.ms`
//! has passed; the partition shrinks on disk, and survives a hard restart.

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use rdkafka::consumer::BaseConsumer;
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::FutureRecord;
use rdkafka::Offset;
use sluice_integration_tests::{clients, NodeOptions, SluiceNode};

const TOPIC: &str = "compacted";
const KEYS: usize = 40;
const UPDATES_PER_KEY: usize = 100;
const DELETE_RETENTION_MS: i64 = 3_000;

fn key(k: usize) -> String {
    format!("key-{k:02}")
}

/// Every third key is deleted at the end.
fn tombstoned(k: usize) -> bool {
    k % 3 == 0
}

/// Produces `(key, value)` pairs in order (None = tombstone) and returns each one's offset.
async fn produce(bootstrap: &str, records: &[(String, Option<String>)]) -> Result<Vec<i64>> {
    let mut cfg = clients::producer_config(bootstrap);
    // Batches stay well below segment.bytes; no retries keeps produce order = offset order.
    cfg.set("batch.size", "2000").set("message.send.max.retries", "0");
    let producer: rdkafka::producer::FutureProducer = cfg.create()?;
    let mut outstanding = VecDeque::new();
    let mut done = Vec::with_capacity(records.len());
    for (i, (k, v)) in records.iter().enumerate() {
        let mut record: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(TOPIC).partition(0).key(k.as_bytes());
        if let Some(v) = v {
            record = record.payload(v.as_bytes());
        }
        clients::enqueue(&producer, record, &mut outstanding, &mut done, i).await?;
    }
    while let Some((i, fut)) = outstanding.pop_front() {
        done.push((i, fut.await.context("delivery future cancelled")?));
    }
    let mut offsets = vec![-1; records.len()];
    for (i, result) in done {
        match result {
            Ok(delivery) => offsets[i] = delivery.offset,
            Err((e, _)) => anyhow::bail!("record {i} was not delivered: {e}"),
        }
    }
    Ok(offsets)
}

/// Everything a consumer reads from `start` to the end of partition 0, as (offset, key, value).
fn read_all(bootstrap: &str, start: Offset) -> Result<Vec<(i64, String, Option<String>)>> {
    let mut cfg = clients::consumer_config(bootstrap);
    cfg.set("enable.partition.eof", "true");
    let consumer: BaseConsumer = cfg.create()?;
    clients::assign(&consumer, TOPIC, &[0], start)?;
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut out = Vec::new();
    while Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(500)) {
            None => continue,
            Some(Err(KafkaError::PartitionEOF(_))) => return Ok(out),
            Some(Err(e)) => anyhow::bail!("consumer error: {e}"),
            Some(Ok(m)) => {
                let text = |b: Option<&[u8]>| b.map(|b| String::from_utf8_lossy(b).into_owned());
                let key = text(m.key()).context("a record without a key in a compacted topic")?;
                out.push((m.offset(), key, text(m.payload())));
            }
        }
    }
    anyhow::bail!(
        "did not reach the end of the partition in 20 s ({} records read)",
        out.len()
    )
}

fn log_bytes(partition_dir: &Path) -> Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(partition_dir)? {
        let entry = entry?;
        if sluice_integration_tests::faults::is_segment_log_file(&entry.file_name().to_string_lossy()) {
            total += entry.metadata()?.len();
        }
    }
    Ok(total)
}

/// Whether `read` is exactly the expected compacted state: one record per live key with its
/// latest value at its acknowledged offset, in offset order, and nothing else.
fn is_compacted(read: &[(i64, String, Option<String>)], expected: &BTreeMap<i64, (String, String)>) -> bool {
    read.len() == expected.len()
        && read.iter().all(|(o, k, v)| {
            expected
                .get(o)
                .is_some_and(|(ek, ev)| ek == k && Some(ev) == v.as_ref())
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_keeps_the_latest_value_per_key_and_drops_expired_tombstones() -> Result<()> {
    let mut node = SluiceNode::start(
        NodeOptions::default()
            .set("log.cleaner.backoff.ms", 200)
            .set("log.retention.check.interval.ms", 200),
    )?;
    let bootstrap = node.bootstrap();
    let admin = clients::admin_client(&bootstrap)?;
    let delete_retention = DELETE_RETENTION_MS.to_string();
    clients::create_topic(
        &admin,
        TOPIC,
        1,
        &[
            ("cleanup.policy", "compact"),
            ("internal.segment.bytes", "16384"),
            // Closes the active segment soon after the last write, so all of it can be cleaned.
            ("segment.ms", "1000"),
            ("min.cleanable.dirty.ratio", "0.01"),
            ("delete.retention.ms", &delete_retention),
        ],
    )
    .await?;

    let mut records = Vec::new();
    for update in 0..UPDATES_PER_KEY {
        for k in 0..KEYS {
            records.push((key(k), Some(format!("{}-update-{update}", key(k)))));
        }
    }
    let updates = records.len();
    records.extend((0..KEYS).filter(|&k| tombstoned(k)).map(|k| (key(k), None)));
    let offsets = produce(&bootstrap, &records).await?;
    let tombstones_acked = clients::now_ms();

    // The latest value of each live key, by the offset it was acknowledged at.
    let mut latest: BTreeMap<String, (i64, String)> = BTreeMap::new();
    for ((k, v), &offset) in records[..updates].iter().zip(&offsets) {
        latest.insert(k.clone(), (offset, v.clone().unwrap_or_default()));
    }
    let expected: BTreeMap<i64, (String, String)> = latest
        .into_iter()
        .filter(|(k, _)| !tombstoned(k[4..].parse().unwrap_or(0)))
        .map(|(k, (offset, v))| (offset, (k, v)))
        .collect();
    ensure!(
        expected.len() == KEYS - KEYS.div_ceil(3),
        "{} live keys",
        expected.len()
    );

    let partition_dir = node.data_dir().join(format!("{TOPIC}-0"));
    let bytes_before = log_bytes(&partition_dir)?;
    let everything = read_all(&bootstrap, Offset::Beginning)?;
    ensure!(
        everything.len() <= records.len() && !everything.is_empty(),
        "read {} of {} records before compaction",
        everything.len(),
        records.len()
    );

    // Poll (no fixed sleep) until the consumer sees the compacted state.
    let deadline = Instant::now() + Duration::from_secs(90);
    let compacted = loop {
        let read = read_all(&bootstrap, Offset::Beginning)?;
        if is_compacted(&read, &expected) {
            break read;
        }
        ensure!(
            Instant::now() < deadline,
            "not compacted within 90 s: read {} records (want {}), first few {:?}\nbroker log:\n{}",
            read.len(),
            expected.len(),
            &read[..read.len().min(5)],
            node.log_tail(40)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    ensure!(
        clients::now_ms() - tombstones_acked >= DELETE_RETENTION_MS,
        "tombstones vanished before delete.retention.ms passed"
    );

    let bytes_after = log_bytes(&partition_dir)?;
    ensure!(
        bytes_after * 10 < bytes_before,
        "the partition did not shrink on disk: {bytes_before} -> {bytes_after} bytes"
    );
    ensure!(
        node.data_dir().join("cleaner-offset-checkpoint").exists(),
        "no cleaner-offset-checkpoint in the data dir"
    );
    let metadata = std::fs::read_to_string(partition_dir.join("partition.metadata"))?;
    ensure!(
        metadata.starts_with("version: 0\ntopic_id: "),
        "partition.metadata: {metadata:?}"
    );

    // A fetch offset in a gap left by compaction returns the next record that remains.
    let first_kept = *expected.keys().next().context("nothing expected")?;
    let gap_offset = *offsets
        .iter()
        .find(|&&o| o > first_kept && !expected.contains_key(&o))
        .context("no removed offset after the first kept one")?;
    let from_gap = read_all(&bootstrap, Offset::Offset(gap_offset))?;
    let want: Vec<_> = compacted.iter().filter(|(o, _, _)| *o >= gap_offset).cloned().collect();
    ensure!(
        from_gap == want,
        "from gap offset {gap_offset}: {from_gap:?}, want {want:?}"
    );

    // The cleaned log survives a hard kill and restart unchanged.
    node.restart()?;
    let after_restart = read_all(&node.bootstrap(), Offset::Beginning)?;
    ensure!(after_restart == compacted, "after restart: {after_restart:?}");

    Ok(())
}

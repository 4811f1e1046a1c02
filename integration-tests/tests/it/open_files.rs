//! An idle partition replica keeps one file open, its active segment's log (index files are
//! opened only to write or look up): 200 partitions on one node stay well under two open
//! files each, and every record is readable after a graceful restart and after a SIGKILL.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use rdkafka::consumer::StreamConsumer;
use rdkafka::producer::FutureRecord;
use rdkafka::Offset;
use sluice_integration_tests::clients::{self, Consumed};
use sluice_integration_tests::{NodeOptions, SluiceNode};

const TOPIC: &str = "many-partitions";
const PARTITIONS: i32 = 200;
/// 2 KB records produced one at a time: enough batches per partition for index entries.
const RECORDS_PER_PARTITION: usize = 6;
/// Open files that are not partition logs: listeners, client connections, the metadata
/// quorum's files, the runtime's epoll and eventfds, stdio.
const OTHER_OPEN_FILES: usize = 100;

fn value(partition: i32, i: usize) -> Vec<u8> {
    let mut v = format!("p{partition} r{i} ").into_bytes();
    v.resize(2_000, b'a' + (i % 26) as u8);
    v
}

fn open_files(node: &SluiceNode) -> Result<usize> {
    let pid = node.pid().context("the broker is not running")?;
    Ok(std::fs::read_dir(format!("/proc/{pid}/fd"))?.count())
}

/// The partition replicas the node hosts (`<topic>-<partition>` directories): the test's topic,
/// and `__consumer_offsets` once the consumer's group has made the broker create it.
fn hosted_replicas(node: &SluiceNode) -> Result<usize> {
    Ok(std::fs::read_dir(node.data_dir())?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.rsplit_once('-')
                .is_some_and(|(_, p)| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        })
        .count())
}

/// Open files may be at most one per hosted replica plus [`OTHER_OPEN_FILES`].
fn check_open_files(node: &SluiceNode, when: &str) -> Result<()> {
    let replicas = hosted_replicas(node)?;
    let limit = replicas + OTHER_OPEN_FILES;
    let open = open_files(node)?;
    ensure!(
        open <= limit,
        "{open} open files {when} with {replicas} partition replicas hosted (at most {limit}: one per replica)"
    );
    Ok(())
}

async fn produce_to_every_partition(bootstrap: &str) -> Result<()> {
    let producer = clients::future_producer(bootstrap)?;
    for i in 0..RECORDS_PER_PARTITION {
        // One record per partition in flight at a time: each is a batch of its own.
        let mut deliveries = Vec::new();
        for p in 0..PARTITIONS {
            let v = value(p, i);
            let record = FutureRecord::<[u8], [u8]>::to(TOPIC).partition(p).payload(&v[..]);
            let delivery = producer
                .send_result(record)
                .map_err(|(e, _)| anyhow::anyhow!("enqueue to partition {p}: {e}"))?;
            deliveries.push((p, delivery));
        }
        for (p, delivery) in deliveries {
            let (partition, offset) = delivery
                .await
                .context("the producer went away")?
                .map_err(|(e, _)| anyhow::anyhow!("produce to partition {p}: {e}"))
                .map(|d| (d.partition, d.offset))?;
            ensure!(
                (partition, offset) == (p, i as i64),
                "record {i} for partition {p} landed at {partition}/{offset}"
            );
        }
    }
    Ok(())
}

/// Reads every partition from offset 0 and checks each record is the one produced there.
async fn assert_every_record_readable(bootstrap: &str) -> Result<()> {
    let consumer: StreamConsumer = clients::stream_consumer(bootstrap)?;
    let partitions: Vec<i32> = (0..PARTITIONS).collect();
    clients::assign(&consumer, TOPIC, &partitions, Offset::Offset(0))?;
    let mut read: BTreeMap<i32, usize> = BTreeMap::new();
    let mut total = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    while total < PARTITIONS as usize * RECORDS_PER_PARTITION {
        let m = tokio::time::timeout_at(deadline, consumer.recv())
            .await
            .with_context(|| format!("timed out with {total} records read"))??;
        let c = Consumed::from_message(&m);
        let next = read.entry(c.partition).or_default();
        ensure!(
            c.offset == *next as i64,
            "partition {}: offset {} after {}",
            c.partition,
            c.offset,
            *next
        );
        ensure!(
            c.value.as_deref() == Some(&value(c.partition, *next)[..]),
            "partition {}: wrong record at offset {}",
            c.partition,
            c.offset
        );
        *next += 1;
        total += 1;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_partition_replicas_hold_one_open_file_each_and_keep_their_records_across_restarts() -> Result<()> {
    let mut node = SluiceNode::start(NodeOptions::default())?;
    let admin = clients::admin_client(&node.bootstrap())?;
    clients::create_topic(&admin, TOPIC, PARTITIONS, &[]).await?;
    drop(admin);
    produce_to_every_partition(&node.bootstrap()).await?;

    check_open_files(&node, "after producing")?;

    // Graceful stop: the index files are complete and the reopen trusts them.
    node.terminate(Duration::from_secs(30))?;
    node.respawn()?;
    node.wait_ready()?;
    assert_every_record_readable(&node.bootstrap()).await?;
    check_open_files(&node, "after a restart")?;

    // SIGKILL: every active segment is recovered and its index rebuilt from the log.
    node.restart()?;
    assert_every_record_readable(&node.bootstrap()).await?;
    check_open_files(&node, "after a crash")?;
    Ok(())
}

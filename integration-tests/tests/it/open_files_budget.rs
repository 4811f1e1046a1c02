//! The open-files budget and many partitions: under an open-files limit of 1,000, three nodes
//! host 2,000 partitions at RF 3 (2,000 replicas each, twice the limit), every partition takes
//! and returns a record, before and after all nodes are SIGKILLed and restarted, with fewer
//! segment files open than replicas hosted and no descriptor error logged, and the 4,000
//! followers rejoining the ISRs after the restart take a few metadata entries (AlterPartitions
//! batches), not one each; a 3-node cluster
//! creates hundreds of partitions, all led with a full ISR, and reopens them after a restart.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::{CreateTopicsRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use rdkafka::producer::FutureRecord;
use rdkafka::Offset;
use sluice_integration_tests::{clients, kafka_client, Cluster, SluiceNode};

const WIDE: &str = "wide";
const WIDE_PARTITIONS: i32 = 2_000;
/// Each node's open-files limit: half the replicas it hosts.
const OPEN_FILES_LIMIT: u64 = 1_000;

/// CreateTopics v7 for `name` with `partitions` at RF 3, answered without error.
fn create_rf3(cluster: &Cluster, name: &str, partitions: i32) -> Result<()> {
    let request = CreateTopicsRequest::default()
        .with_topics(vec![CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_string(name.to_string())))
            .with_num_partitions(partitions)
            .with_replication_factor(3)])
        .with_timeout_ms(120_000);
    let response = kafka_client::call(cluster.addr(1), &request, 7, Duration::from_secs(120))?;
    let result = response.topics.first().context("no topic result")?;
    ensure!(
        result.error_code == 0,
        "creating {name}: {} {:?}",
        result.error_code,
        result.error_message
    );
    Ok(())
}

fn value(partition: i32, round: usize) -> String {
    format!("partition {partition} round {round}")
}

/// One record to every partition of [`WIDE`] (acks=all); each must land at `offset`.
async fn produce_round(bootstrap: &str, round: usize, offset: i64) -> Result<()> {
    let producer = clients::future_producer(bootstrap)?;
    let mut deliveries = Vec::new();
    for p in 0..WIDE_PARTITIONS {
        let v = value(p, round);
        let record = FutureRecord::<str, str>::to(WIDE).partition(p).payload(&v);
        let delivery = producer
            .send_result(record)
            .map_err(|(e, _)| anyhow::anyhow!("enqueue to partition {p}: {e}"))?;
        deliveries.push((p, delivery));
    }
    for (p, delivery) in deliveries {
        let delivered = delivery
            .await
            .context("the producer went away")?
            .map_err(|(e, _)| anyhow::anyhow!("produce to partition {p}: {e}"))?;
        ensure!(
            (delivered.partition, delivered.offset) == (p, offset),
            "round {round} for partition {p} landed at {}/{}",
            delivered.partition,
            delivered.offset
        );
    }
    Ok(())
}

/// Reads every partition of [`WIDE`] from offset 0: `rounds` records each, in order.
async fn read_all(bootstrap: &str, rounds: usize) -> Result<()> {
    let consumer = clients::stream_consumer(bootstrap)?;
    let partitions: Vec<i32> = (0..WIDE_PARTITIONS).collect();
    clients::assign(&consumer, WIDE, &partitions, Offset::Offset(0))?;
    let expected: HashMap<i32, usize> = partitions.iter().map(|&p| (p, rounds)).collect();
    let consumed = clients::consume_exact(&consumer, &expected, Duration::from_secs(120)).await?;
    for p in 0..WIDE_PARTITIONS {
        let values: Vec<Option<Vec<u8>>> = consumed
            .get(&p)
            .into_iter()
            .flatten()
            .map(|r| r.value.clone())
            .collect();
        let want: Vec<Option<Vec<u8>>> = (0..rounds).map(|r| Some(value(p, r).into_bytes())).collect();
        ensure!(values == want, "partition {p} read back {values:?}");
    }
    Ok(())
}

/// The metadata log's high watermark, as the quorum leader reports it (DescribeQuorum).
fn metadata_high_watermark(cluster: &Cluster) -> Result<i64> {
    let response = kafka_client::describe_quorum(cluster.addr(1))?;
    let partition = response
        .topics
        .first()
        .and_then(|t| t.partitions.first())
        .context("DescribeQuorum answered no partition")?;
    ensure!(
        partition.error_code == 0,
        "DescribeQuorum: error {}",
        partition.error_code
    );
    Ok(partition.high_watermark)
}

/// The node's open descriptors, and how many of them are segment `.log` files.
fn open_files(node: &SluiceNode) -> Result<(usize, usize)> {
    let pid = node.pid().context("the broker is not running")?;
    let mut all = 0;
    let mut segments = 0;
    for fd in std::fs::read_dir(format!("/proc/{pid}/fd"))? {
        all += 1;
        let Ok(target) = std::fs::read_link(fd?.path()) else {
            continue;
        };
        let name = target.file_name().unwrap_or_default().to_string_lossy().into_owned();
        if name.ends_with(".log") || name.contains(".log.pending-") {
            segments += 1;
        }
    }
    Ok((all, segments))
}

/// Every node: within its limit, fewer segment files open than the [`WIDE`] replicas it hosts
/// (so the cache closed some), and no descriptor error in its log.
fn check_descriptors(cluster: &mut Cluster, when: &str) -> Result<()> {
    for id in cluster.ids() {
        let node = cluster.node(id);
        node.assert_running()?;
        let (all, segments) = open_files(node)?;
        ensure!(
            (all as u64) < OPEN_FILES_LIMIT && segments < WIDE_PARTITIONS as usize,
            "node {id} {when}: {all} descriptors open, {segments} of them segment files, \
             for {WIDE_PARTITIONS} replicas under a limit of {OPEN_FILES_LIMIT}"
        );
        let log = std::fs::read_to_string(node.log_path())?;
        for symptom in ["Too many open files", "os error 24", "EMFILE"] {
            ensure!(
                !log.contains(symptom),
                "node {id} {when} logged {symptom:?}:\n{}",
                node.log_tail(40)
            );
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twice_as_many_replicas_as_the_open_files_limit_are_all_writable_and_readable() -> Result<()> {
    let mut cluster = Cluster::start_custom(
        3,
        &[("max.connections", "200")],
        true,
        |_| Vec::new(),
        |_, options| {
            options.open_files_limit = Some(OPEN_FILES_LIMIT);
        },
    )?;
    create_rf3(&cluster, WIDE, WIDE_PARTITIONS)?;
    let partitions = cluster.await_full_isr(WIDE, Duration::from_secs(240))?;
    ensure!(
        partitions.len() == WIDE_PARTITIONS as usize,
        "{} partitions listed",
        partitions.len()
    );
    let bootstrap = cluster.bootstrap();
    produce_round(&bootstrap, 0, 0).await?;
    read_all(&bootstrap, 1).await?;
    check_descriptors(&mut cluster, "after the first round")?;

    // All nodes SIGKILLed: every log is recovered under the same limit.
    for id in cluster.ids() {
        cluster.node(id).kill()?;
    }
    for id in cluster.ids() {
        cluster.node(id).respawn()?;
    }
    for id in cluster.ids() {
        cluster.node(id).wait_ready()?;
    }
    // Each restarted broker fenced its previous incarnation, which took it out of every ISR:
    // some 4,000 followers rejoin. Leaders batch their ISR changes (AlterPartitions), so that
    // is a few dozen metadata entries, not one per follower.
    let entries_before = metadata_high_watermark(&cluster)?;
    cluster.await_full_isr(WIDE, Duration::from_secs(240))?;
    let entries = metadata_high_watermark(&cluster)? - entries_before;
    eprintln!("{entries} metadata entries committed while the ISRs filled up after the restart");
    ensure!(
        entries < i64::from(WIDE_PARTITIONS) / 4,
        "{entries} metadata entries were committed while {WIDE_PARTITIONS} partitions' ISRs filled up again: \
         ISR changes are not batched"
    );
    produce_round(&bootstrap, 1, 1).await?;
    read_all(&bootstrap, 2).await?;
    check_descriptors(&mut cluster, "after a restart of every node")?;
    Ok(())
}

#[test]
fn three_hundred_partitions_are_all_led_with_a_full_isr_and_reopen_after_a_restart() -> Result<()> {
    let mut cluster = Cluster::start(3, &[])?;
    let topics = ["many-a", "many-b", "many-c"];
    for topic in topics {
        create_rf3(&cluster, topic, 100)?;
    }
    let all_full = |cluster: &Cluster| -> Result<()> {
        for topic in topics {
            let partitions = cluster.await_full_isr(topic, Duration::from_secs(120))?;
            ensure!(partitions.len() == 100, "{topic}: {} partitions", partitions.len());
            ensure!(
                partitions.iter().all(|p| p.replicas.len() == 3 && p.leader >= 1),
                "{topic}: {partitions:?}"
            );
        }
        Ok(())
    };
    all_full(&cluster)?;
    // A restarted node reopens its 300 replicas (on the blocking pool) and rejoins every ISR.
    cluster.node(2).restart()?;
    all_full(&cluster)?;
    for id in cluster.ids() {
        cluster.node(id).assert_running()?;
    }
    Ok(())
}

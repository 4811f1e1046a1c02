//! A 3-node cluster of real `sluice` processes (every node a broker and a metadata-quorum
//! voter) driven with rdkafka and typed Kafka requests: placement, controller failover,
//! catch-up after restart, fencing, and behaviour without a quorum.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use kafka_protocol::error::ResponseError;
use rdkafka::producer::FutureRecord;
use rdkafka::Offset;
use sluice_integration_tests::clients::{self, wait_until};
use sluice_integration_tests::{kafka_client, Cluster};

/// Short sessions so fencing tests take seconds, not the default 9.
/// A 3 s broker session with a heartbeat every 500 ms: a broker that stops heartbeating is
/// fenced between 2.5 s and 3 s after its last heartbeat reached the controller.
const FAST_FENCING: &[(&str, &str)] = &[
    ("broker.session.timeout.ms", "3000"),
    ("broker.heartbeat.interval.ms", "500"),
];

fn leaders(cluster: &Cluster, asking: i32, topic: &str) -> Result<Vec<i32>> {
    let m = kafka_client::metadata(cluster.addr(asking))?;
    let t = m
        .topics
        .iter()
        .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == topic))
        .ok_or_else(|| anyhow::anyhow!("topic {topic} not listed"))?;
    let mut partitions: Vec<_> = t
        .partitions
        .iter()
        .map(|p| (p.partition_index, p.leader_id.0))
        .collect();
    partitions.sort();
    Ok(partitions.into_iter().map(|(_, leader)| leader).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_partitions_spread_leaders_over_three_brokers_and_every_partition_round_trips() -> Result<()> {
    let cluster = Cluster::start(3, &[])?;
    let admin = clients::admin_client(&cluster.bootstrap())?;
    clients::create_topic(&admin, "spread", 6, &[]).await?;

    let mut per_broker: HashMap<i32, usize> = HashMap::new();
    for leader in leaders(&cluster, 2, "spread")? {
        *per_broker.entry(leader).or_default() += 1;
    }
    ensure!(
        per_broker == HashMap::from([(1, 2), (2, 2), (3, 2)]),
        "leaders per broker: {per_broker:?}"
    );
    // Single-partition topics take turns at leading (Kafka starts each at a random broker).
    let mut solo_leaders = Vec::new();
    for i in 0..3 {
        let name = format!("solo-{i}");
        clients::create_topic(&admin, &name, 1, &[]).await?;
        let leader = wait_until(Duration::from_secs(10), "the new topic's leader", || {
            leaders(&cluster, 1, &name).ok().filter(|l| l.iter().all(|id| *id > 0))
        })?;
        solo_leaders.extend(leader);
    }
    solo_leaders.sort();
    ensure!(
        solo_leaders == [1, 2, 3],
        "leaders of three single-partition topics: {solo_leaders:?}"
    );
    cluster.await_identical_metadata(&[1, 2, 3], Duration::from_secs(10))?;

    let producer = clients::future_producer(&cluster.bootstrap())?;
    for partition in 0..6 {
        for i in 0..50 {
            let value = format!("p{partition}-{i}");
            let record = FutureRecord::to("spread")
                .partition(partition)
                .key("k")
                .payload(value.as_bytes());
            let delivered = producer
                .send(record, Duration::from_secs(10))
                .await
                .map_err(|(e, _)| e)?;
            ensure!(
                delivered.offset == i64::from(i),
                "partition {partition} record {i} got offset {}",
                delivered.offset
            );
        }
    }
    let consumer = clients::stream_consumer(&cluster.bootstrap())?;
    clients::assign(&consumer, "spread", &[0, 1, 2, 3, 4, 5], Offset::Beginning)?;
    let expected: HashMap<i32, usize> = (0..6).map(|p| (p, 50)).collect();
    let got = clients::consume_exact(&consumer, &expected, Duration::from_secs(30)).await?;
    for (partition, records) in got {
        for (i, r) in records.iter().enumerate() {
            ensure!(
                r.value.as_deref() == Some(format!("p{partition}-{i}").as_bytes()),
                "partition {partition} offset {i}: {r:?}"
            );
        }
    }
    Ok(())
}

#[test]
fn killing_the_controller_elects_another_and_topic_creation_resumes_then_the_node_catches_up() -> Result<()> {
    let mut cluster = Cluster::start(3, FAST_FENCING)?;
    let controller = cluster.controller(1, Duration::from_secs(10))?;
    ensure!(kafka_client::create_topic(cluster.addr(controller), "before", 3, Duration::from_secs(15))? == 0);

    cluster.node(controller).kill()?;
    let survivors: Vec<i32> = cluster.ids().into_iter().filter(|id| *id != controller).collect();
    let killed_at = Instant::now();
    let new_controller = wait_until(Duration::from_secs(15), "a new controller", || {
        cluster
            .controller(survivors[0], Duration::from_secs(1))
            .ok()
            .filter(|id| survivors.contains(id))
    })?;
    // Topic creation works again through either survivor.
    let created =
        wait_until(
            Duration::from_secs(15),
            "topic creation after failover",
            || match kafka_client::create_topic(cluster.addr(survivors[1]), "after", 3, Duration::from_secs(15)) {
                Ok(0) => Some(()),
                _ => None,
            },
        );
    created?;
    eprintln!(
        "controller {controller} killed; {new_controller} took over; creation resumed after {:?}",
        killed_at.elapsed()
    );

    // The killed node restarts from its data dir, catches up, and every node agrees.
    cluster.node(controller).respawn()?;
    cluster.node(controller).wait_ready()?;
    let view = cluster.await_identical_metadata(&[1, 2, 3], Duration::from_secs(20))?;
    ensure!(
        view.contains("\"before ") && view.contains("\"after "),
        "metadata after catch-up: {view}"
    );
    Ok(())
}

#[test]
fn a_killed_broker_is_fenced_within_the_session_timeout_and_returns_after_restart() -> Result<()> {
    let mut cluster = Cluster::start(3, FAST_FENCING)?;
    let controller = cluster.controller(1, Duration::from_secs(10))?;
    let victim = cluster.ids().into_iter().find(|id| *id != controller).expect("3 nodes");
    let observer = cluster.ids().into_iter().find(|id| *id != victim).expect("3 nodes");
    // Each node is ready once it lists itself; the observer may apply the last registration
    // a moment later, so all three being listed is awaited, not assumed.
    wait_until(Duration::from_secs(10), "the observer to list all three brokers", || {
        cluster
            .listed_brokers(observer)
            .ok()
            .filter(|ids| *ids == vec![1, 2, 3])
    })?;

    cluster.node(victim).kill()?;
    let killed_at = Instant::now();
    wait_until(Duration::from_secs(10), "the killed broker to be fenced", || {
        cluster
            .listed_brokers(observer)
            .ok()
            .filter(|ids| !ids.contains(&victim))
    })?;
    let fenced_after = killed_at.elapsed();
    // The last heartbeat reached the controller at most one interval (500 ms) before the kill,
    // or somewhat more on a starved machine; fencing before 1.5 s would mean the controller did
    // not wait for the session to run out.
    ensure!(
        fenced_after >= Duration::from_millis(1500),
        "fenced after only {fenced_after:?}, before the session timeout"
    );

    cluster.node(victim).respawn()?;
    cluster.node(victim).wait_ready()?;
    wait_until(Duration::from_secs(10), "the restarted broker to be listed", || {
        cluster
            .listed_brokers(observer)
            .ok()
            .filter(|ids| ids.contains(&victim))
    })?;
    cluster.await_identical_metadata(&[1, 2, 3], Duration::from_secs(10))?;
    Ok(())
}

#[test]
fn without_a_quorum_metadata_changes_fail_with_a_retriable_error_and_recover() -> Result<()> {
    let mut cluster = Cluster::start(3, &[])?;
    cluster.node(2).kill()?;
    cluster.node(3).kill()?;
    let started = Instant::now();
    let code = kafka_client::create_topic(cluster.addr(1), "no-quorum", 1, Duration::from_secs(40))?;
    let waited = started.elapsed();
    let retriable = [
        ResponseError::RequestTimedOut.code(),
        ResponseError::NotController.code(),
    ];
    ensure!(
        retriable.contains(&code),
        "CreateTopics without a quorum answered error code {code}"
    );
    ensure!(waited < Duration::from_secs(30), "CreateTopics took {waited:?} to fail");

    cluster.node(2).respawn()?;
    cluster.node(3).respawn()?;
    cluster.node(2).wait_ready()?;
    cluster.node(3).wait_ready()?;
    wait_until(
        Duration::from_secs(20),
        "topic creation once the quorum is back",
        || match kafka_client::create_topic(cluster.addr(1), "with-quorum", 1, Duration::from_secs(15)) {
            Ok(0) => Some(()),
            _ => None,
        },
    )?;
    Ok(())
}

#[test]
fn describe_quorum_reports_the_leader_and_three_voters() -> Result<()> {
    let cluster = Cluster::start(3, &[])?;
    // Leadership can move under load between asking who leads and asking the leader, so the
    // whole answer is awaited: the controller describes itself as leader of three voters.
    let mut last = String::from("no answer yet");
    let found = wait_until(Duration::from_secs(30), "DescribeQuorum from the leader", || {
        let controller = cluster.controller(1, Duration::from_secs(5)).ok()?;
        let response = match kafka_client::describe_quorum(cluster.addr(controller)) {
            Ok(r) => r,
            Err(e) => {
                last = format!("controller {controller}: {e:#}");
                return None;
            }
        };
        last = format!("controller {controller}: {response:?}");
        let partition = response.topics.first()?.partitions.first()?;
        let mut voters: Vec<i32> = partition.current_voters.iter().map(|v| v.replica_id.0).collect();
        voters.sort();
        let complete = partition.error_code == 0
            && partition.leader_id.0 == controller
            && voters == vec![1, 2, 3]
            && partition.high_watermark > 0
            && response.nodes.len() == 3;
        complete.then_some(())
    });
    found.map_err(|e| e.context(format!("last DescribeQuorum seen: {last}")))
}

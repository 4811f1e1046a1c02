//! Partition reassignment (AlterPartitionReassignments / ListPartitionReassignments, KIP-455)
//! on real 3-node clusters, sent as typed Kafka requests (rdkafka's admin client has neither):
//! a partition moves to other brokers with every record, the broker it left deletes its log,
//! a move waits while a new replica is down and completes once it is back, a cancelled move
//! reverts, a throttled move copies no faster than its throttle, and refused targets get
//! Kafka's error codes.
//!
//! `kafka-reassign-partitions` itself is run in `integration-tests/python/test_java_reassign.py`.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_partition_reassignments_request::{ReassignablePartition, ReassignableTopic};
use kafka_protocol::messages::incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
use kafka_protocol::messages::list_partition_reassignments_response::OngoingPartitionReassignment;
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, BrokerId, IncrementalAlterConfigsRequest, ListPartitionReassignmentsRequest,
    TopicName,
};
use kafka_protocol::protocol::StrBytes;
use rdkafka::message::Message;
use rdkafka::Offset;
use sluice_integration_tests::clients::{self, wait_until};
use sluice_integration_tests::{kafka_client, Cluster};

const TIMEOUT: Duration = Duration::from_secs(30);

/// Fencing within seconds, and no automatic preferred-leader election moving leaders meanwhile.
const SETTINGS: &[(&str, &str)] = &[
    ("broker.session.timeout.ms", "3000"),
    ("auto.leader.rebalance.enable", "false"),
];

/// AlterPartitionReassignments for partition 0 of `topic` (`None` cancels) at `version`, with
/// `allow_rf_change` (v1); the partition's error code.
fn reassign_with(
    addr: SocketAddr,
    topic: &str,
    target: Option<&[i32]>,
    version: i16,
    allow_rf_change: bool,
) -> Result<i16> {
    let request = AlterPartitionReassignmentsRequest::default()
        .with_timeout_ms(30_000)
        .with_allow_replication_factor_change(allow_rf_change)
        .with_topics(vec![ReassignableTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partitions(vec![ReassignablePartition::default()
                .with_partition_index(0)
                .with_replicas(
                    target.map(|ids| ids.iter().map(|id| BrokerId(*id)).collect()),
                )])]);
    let response = kafka_client::call(addr, &request, version, TIMEOUT)?;
    ensure!(response.error_code == 0, "top-level error {}", response.error_code);
    let p = response
        .responses
        .first()
        .and_then(|t| t.partitions.first())
        .context("no partition result")?;
    Ok(p.error_code)
}

fn reassign(addr: SocketAddr, topic: &str, target: Option<&[i32]>) -> Result<i16> {
    reassign_with(addr, topic, target, 0, true)
}

/// The ongoing reassignment of partition 0 of `topic`, if any.
fn ongoing(addr: SocketAddr, topic: &str) -> Result<Option<OngoingPartitionReassignment>> {
    let response = kafka_client::call(
        addr,
        &ListPartitionReassignmentsRequest::default().with_timeout_ms(30_000),
        0,
        TIMEOUT,
    )?;
    ensure!(response.error_code == 0, "top-level error {}", response.error_code);
    Ok(response
        .topics
        .into_iter()
        .find(|t| t.name.0.as_str() == topic)
        .and_then(|t| t.partitions.into_iter().find(|p| p.partition_index == 0)))
}

/// IncrementalAlterConfigs SET (`Some`) or DELETE (`None`) of one config of a broker (`"1"`)
/// or topic resource; the resource's error code.
fn alter_config(addr: SocketAddr, resource_type: i8, name: &str, key: &str, value: Option<&str>) -> Result<i16> {
    let request = IncrementalAlterConfigsRequest::default().with_resources(vec![AlterConfigsResource::default()
        .with_resource_type(resource_type)
        .with_resource_name(StrBytes::from_string(name.to_string()))
        .with_configs(vec![AlterableConfig::default()
            .with_name(StrBytes::from_string(key.to_string()))
            .with_config_operation(if value.is_some() { 0 } else { 1 })
            .with_value(value.map(|v| StrBytes::from_string(v.to_string())))])]);
    let response = kafka_client::call(addr, &request, 1, TIMEOUT)?;
    Ok(response.responses.first().context("no resource result")?.error_code)
}

const BROKER: i8 = 4;
const TOPIC: i8 = 2;

/// Bytes of the segment files of partition 0 of `topic` in `data_dir`.
fn log_bytes(data_dir: &std::path::Path, topic: &str) -> u64 {
    std::fs::read_dir(data_dir.join(format!("{topic}-0")))
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

fn ids(v: &[BrokerId]) -> Vec<i32> {
    v.iter().map(|b| b.0).collect()
}

/// Reads partition 0 of `topic` from the beginning and checks it holds exactly
/// `record-0` .. `record-{n-1}` at offsets 0 .. n-1.
fn assert_all_records(bootstrap: &str, topic: &str, n: usize) -> Result<()> {
    let consumer = clients::base_consumer(bootstrap)?;
    clients::assign(&consumer, topic, &[0], Offset::Beginning)?;
    let mut next = 0usize;
    wait_until(TIMEOUT, &format!("{n} records of {topic}"), || {
        while let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
            let value = m.payload().map(|p| String::from_utf8_lossy(p).into_owned());
            assert_eq!(m.offset(), next as i64, "records out of order");
            assert_eq!(value.as_deref(), Some(format!("record-{next}").as_str()));
            next += 1;
        }
        (next >= n).then_some(())
    })?;
    ensure!(next == n, "read {next} records of {topic}, expected {n}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_partition_moves_to_other_brokers_with_every_record_and_the_old_replica_deletes_its_log() -> Result<()> {
    let cluster = Cluster::start(3, SETTINGS)?;
    kafka_client::create_topic_on(cluster.addr(1), "moving", &[&[1]])?;
    cluster.partition_leader(1, "moving", 0, TIMEOUT)?;
    let bootstrap = cluster.bootstrap();
    clients::produce_numbered(&bootstrap, "moving", 500).await?;
    let old_dir = cluster.data_dir(1).join("moving-0");
    ensure!(
        old_dir.is_dir(),
        "broker 1 should hold the log at {}",
        old_dir.display()
    );

    ensure!(
        reassign(cluster.addr(2), "moving", Some(&[2, 3]))? == 0,
        "the move should start"
    );
    let moved = cluster.await_partition_0(
        &[1, 2, 3],
        "moving",
        "the partition on brokers 2 and 3, in sync",
        TIMEOUT,
        |p| p.replicas == [2, 3] && p.has_full_isr(),
    )?;
    ensure!(moved.leader == 2, "the first in-sync target replica leads: {moved:?}");
    wait_until(TIMEOUT, "no reassignment listed", || {
        ongoing(cluster.addr(3), "moving").ok()?.is_none().then_some(())
    })?;
    wait_until(TIMEOUT, "broker 1 to delete the partition it left", || {
        (!old_dir.exists()).then_some(())
    })?;
    assert_all_records(&bootstrap, "moving", 500)?;

    // And back onto three replicas: broker 1 copies the log anew to rejoin the ISR.
    ensure!(reassign(cluster.addr(1), "moving", Some(&[3, 2, 1]))? == 0);
    cluster.await_partition_0(
        &[1, 2, 3],
        "moving",
        "the partition on all three brokers, in sync",
        TIMEOUT,
        |p| p.replicas == [3, 2, 1] && p.has_full_isr(),
    )?;
    assert_all_records(&bootstrap, "moving", 500)?;
    Ok(())
}

#[test]
fn a_move_onto_a_down_broker_waits_for_it_and_a_cancelled_move_reverts() -> Result<()> {
    let mut cluster = Cluster::start(3, SETTINGS)?;
    kafka_client::create_topic_on(cluster.addr(1), "waiting", &[&[1]])?;
    kafka_client::create_topic_on(cluster.addr(1), "cancelled", &[&[2]])?;
    cluster.partition_leader(1, "waiting", 0, TIMEOUT)?;
    cluster.partition_leader(1, "cancelled", 0, TIMEOUT)?;
    cluster.node(3).kill()?;
    // Once the live brokers fence broker 3, the quorum has a leader among them: a proposal
    // forwarded to a leader that just died is lost, and its request would wait out its timeout.
    wait_until(TIMEOUT, "brokers 1 and 2 to fence broker 3", || {
        [1, 2]
            .iter()
            .all(|&n| cluster.listed_brokers(n).is_ok_and(|ids| ids == [1, 2]))
            .then_some(())
    })?;

    ensure!(reassign(cluster.addr(1), "waiting", Some(&[1, 3]))? == 0);
    let under_way = ongoing(cluster.addr(1), "waiting")?.context("the move should be listed while broker 3 is down")?;
    ensure!(
        (
            ids(&under_way.replicas),
            ids(&under_way.adding_replicas),
            ids(&under_way.removing_replicas)
        ) == (vec![1, 3], vec![3], vec![]),
        "{under_way:?}"
    );
    let p = cluster.partitions(2, "waiting")?.remove(0);
    ensure!(p.isr == [1] && p.leader == 1, "the ISR waits for broker 3: {p:?}");

    ensure!(reassign(cluster.addr(2), "cancelled", Some(&[3]))? == 0);
    let listed = ongoing(cluster.addr(2), "cancelled")?.context("the second move should be listed")?;
    ensure!(ids(&listed.removing_replicas) == [2], "{listed:?}");
    ensure!(
        reassign(cluster.addr(1), "cancelled", None)? == 0,
        "cancelling should succeed"
    );
    ensure!(
        ongoing(cluster.addr(1), "cancelled")?.is_none(),
        "a cancelled move is no longer listed"
    );
    let reverted = cluster.partitions(1, "cancelled")?.remove(0);
    ensure!(reverted.replicas == [2] && reverted.leader == 2, "{reverted:?}");
    ensure!(
        reassign(cluster.addr(1), "cancelled", None)? == ResponseError::NoReassignmentInProgress.code(),
        "nothing left to cancel"
    );

    cluster.node(3).respawn()?;
    cluster.node(3).wait_ready()?;
    cluster.await_partition_0(
        &[1, 2, 3],
        "waiting",
        "broker 3 caught up and the move finished",
        TIMEOUT,
        |p| p.replicas == [1, 3] && p.has_full_isr(),
    )?;
    wait_until(TIMEOUT, "the finished move unlisted", || {
        ongoing(cluster.addr(3), "waiting").ok()?.is_none().then_some(())
    })?;
    Ok(())
}

/// `kafka-reassign-partitions --throttle` as the tool sets it: the rates on the brokers, the
/// moving replicas on the topic. The new replica copies no faster than the throttle allows
/// (after the first fetch, whose megabyte alone is ten seconds' worth at 100 KB/s) and
/// finishes once the throttle is lifted.
#[tokio::test(flavor = "multi_thread")]
async fn a_throttled_move_copies_no_faster_than_the_throttle_until_it_is_lifted() -> Result<()> {
    const RECORDS: usize = 3_000;
    let cluster = Cluster::start(3, SETTINGS)?;
    kafka_client::create_topic_on(cluster.addr(1), "throttled", &[&[1]])?;
    cluster.partition_leader(1, "throttled", 0, TIMEOUT)?;
    let producer = clients::future_producer(&cluster.bootstrap())?;
    let value = vec![b'x'; 2048];
    let mut outstanding = std::collections::VecDeque::new();
    let mut done = Vec::new();
    for i in 0..RECORDS {
        let record = rdkafka::producer::FutureRecord::<[u8], [u8]>::to("throttled")
            .partition(0)
            .payload(&value[..]);
        clients::enqueue(&producer, record, &mut outstanding, &mut done, i).await?;
    }
    for (i, delivery) in outstanding {
        done.push((i, delivery.await?));
    }
    ensure!(
        done.iter().all(|(_, d)| d.is_ok()),
        "every record should be acknowledged"
    );
    let leader_bytes = log_bytes(&cluster.data_dir(1), "throttled");
    ensure!(leader_bytes > 5_000_000, "the leader holds {leader_bytes} bytes");

    let addr = cluster.addr(1);
    for (resource_type, name, key, value) in [
        (BROKER, "1", "leader.replication.throttled.rate", "100000"),
        (BROKER, "2", "follower.replication.throttled.rate", "100000"),
        (TOPIC, "throttled", "leader.replication.throttled.replicas", "0:1"),
        (TOPIC, "throttled", "follower.replication.throttled.replicas", "0:2"),
    ] {
        ensure!(
            alter_config(addr, resource_type, name, key, Some(value))? == 0,
            "setting {key}"
        );
    }
    ensure!(
        reassign(addr, "throttled", Some(&[1, 2]))? == 0,
        "the move should start"
    );
    wait_until(TIMEOUT, "broker 2 to start copying", || {
        (log_bytes(&cluster.data_dir(2), "throttled") > 0).then_some(())
    })?;
    std::thread::sleep(Duration::from_secs(3)); // what the throttle lets through meanwhile is the point
    let copied = log_bytes(&cluster.data_dir(2), "throttled");
    ensure!(
        copied < leader_bytes / 2,
        "broker 2 copied {copied} of {leader_bytes} bytes within 3 s of a 100 KB/s throttle"
    );
    let p = cluster.partition_0(1, "throttled")?;
    ensure!(p.isr == [1], "the throttled replica is still catching up: {p:?}");
    ensure!(ongoing(addr, "throttled")?.is_some(), "the move is still under way");

    for (resource_type, name, key) in [
        (BROKER, "1", "leader.replication.throttled.rate"),
        (BROKER, "2", "follower.replication.throttled.rate"),
    ] {
        ensure!(
            alter_config(addr, resource_type, name, key, None)? == 0,
            "removing {key}"
        );
    }
    cluster.await_partition_0(
        &[1, 2],
        "throttled",
        "the move to finish once the throttle is lifted",
        TIMEOUT,
        |p| p.replicas == [1, 2] && p.has_full_isr(),
    )?;
    ensure!(
        log_bytes(&cluster.data_dir(2), "throttled") == leader_bytes,
        "broker 2 holds the whole log"
    );
    Ok(())
}

#[test]
fn refused_targets_get_kafkas_error_codes() -> Result<()> {
    let cluster = Cluster::start(3, SETTINGS)?;
    kafka_client::create_topic_on(cluster.addr(1), "fixed", &[&[1, 2]])?;
    let addr = cluster.addr(3);
    let invalid = ResponseError::InvalidReplicaAssignment.code();
    for target in [&[][..], &[2, 2][..], &[1, 9][..]] {
        ensure!(
            reassign(addr, "fixed", Some(target))? == invalid,
            "{target:?} should be refused"
        );
    }
    ensure!(reassign(addr, "absent", Some(&[1]))? == ResponseError::UnknownTopicOrPartition.code());
    ensure!(
        reassign_with(addr, "fixed", Some(&[1, 2, 3]), 1, false)? == ResponseError::InvalidReplicationFactor.code(),
        "v1 without allow_replication_factor_change may not resize"
    );
    ensure!(
        reassign(addr, "fixed", None)? == ResponseError::NoReassignmentInProgress.code(),
        "nothing to cancel"
    );
    let p = cluster.partitions(3, "fixed")?.remove(0);
    ensure!(p.replicas == [1, 2], "a refused move changes nothing: {p:?}");
    Ok(())
}

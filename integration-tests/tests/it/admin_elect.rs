//! ElectLeaders, DescribeProducers and DescribeTopicPartitions against real nodes, sent as
//! typed Kafka requests (rdkafka's admin client has none of the three): preferred and unclean
//! elections on a cluster after real restarts and kills, the producer state an idempotent
//! rdkafka producer leaves, and paging over every partition with the cursor.
//!
//! Kafka's own tools (`kafka-leader-election`, `kafka-topics --describe`) are run against a
//! cluster in `integration-tests/python/test_java_admin_tools.py`.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_producers_request::TopicRequest as ProducersTopic;
use kafka_protocol::messages::describe_topic_partitions_request::{Cursor, TopicRequest};
use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
use kafka_protocol::messages::{
    BrokerId, DescribeProducersRequest, DescribeProducersResponse, DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse, ElectLeadersRequest, ElectLeadersResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use sluice_integration_tests::clients::{self, wait_until};
use sluice_integration_tests::{kafka_client, Cluster, NodeOptions, SluiceNode};

const PREFERRED: i8 = 0;
const UNCLEAN: i8 = 1;
const TIMEOUT: Duration = Duration::from_secs(30);

/// Fencing within seconds, and no automatic preferred-leader election racing the test's own.
const SETTINGS: &[(&str, &str)] = &[
    ("broker.session.timeout.ms", "3000"),
    ("auto.leader.rebalance.enable", "false"),
];

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

/// ElectLeaders v2 for partition 0 of `topic`; the response's (partition, error code) pairs.
fn elect(addr: SocketAddr, election_type: i8, topic: &str) -> Result<Vec<(i32, i16)>> {
    let request = ElectLeadersRequest::default()
        .with_election_type(election_type)
        .with_topic_partitions(Some(vec![TopicPartitions::default()
            .with_topic(name(topic))
            .with_partitions(vec![0])]))
        .with_timeout_ms(30_000);
    let response: ElectLeadersResponse = kafka_client::call(addr, &request, 2, TIMEOUT)?;
    ensure!(response.error_code == 0, "top-level error {}", response.error_code);
    Ok(response
        .replica_election_results
        .iter()
        .filter(|t| t.topic.0.as_str() == topic)
        .flat_map(|t| t.partition_result.iter().map(|p| (p.partition_id, p.error_code)))
        .collect())
}

#[test]
fn preferred_election_after_the_preferred_leader_restarts_moves_leadership_back_and_bumps_the_epoch() -> Result<()> {
    let mut cluster = Cluster::start(3, SETTINGS)?;
    kafka_client::create_topic_on(cluster.addr(1), "pref", &[&[1, 2, 3]])?;
    let before = cluster.await_full_isr("pref", TIMEOUT)?.remove(0);
    ensure!(before.leader == 1, "broker 1 should lead first: {before:?}");
    ensure!(
        elect(cluster.addr(2), PREFERRED, "pref")? == vec![(0, ResponseError::ElectionNotNeeded.code())],
        "the preferred replica already leads"
    );

    // A controlled shutdown moves leadership away; back, broker 1 rejoins the ISR as a follower.
    cluster.node(1).terminate(TIMEOUT)?;
    cluster.node(1).respawn()?;
    cluster.node(1).wait_ready()?;
    let moved = cluster.await_partition_0(
        &[1, 2, 3],
        "pref",
        "broker 1 back in the ISR, not leading",
        TIMEOUT,
        |p| p.has_full_isr() && p.leader != 1,
    )?;
    ensure!(moved.leader_epoch > before.leader_epoch, "{moved:?} after {before:?}");

    ensure!(
        elect(cluster.addr(3), PREFERRED, "pref")? == vec![(0, 0)],
        "preferred election should succeed"
    );
    // The proposer answers once the change is applied on it; the others follow.
    let after = cluster.partition_0(3, "pref")?;
    ensure!(after.leader == 1, "broker 1 should lead again: {after:?}");
    ensure!(
        after.leader_epoch == moved.leader_epoch + 1,
        "the election bumps the leader epoch once: {after:?} after {moved:?}"
    );
    cluster.await_partition_0(&[1, 2, 3], "pref", "every node to see broker 1 lead", TIMEOUT, |p| {
        p.leader == 1 && p.leader_epoch == after.leader_epoch
    })?;
    ensure!(
        elect(cluster.addr(1), PREFERRED, "pref")? == vec![(0, ResponseError::ElectionNotNeeded.code())],
        "a second election is not needed"
    );
    ensure!(
        elect(cluster.addr(1), UNCLEAN, "pref")? == vec![(0, ResponseError::ElectionNotNeeded.code())],
        "an unclean election is not needed while a leader is live"
    );

    // Any replica describes its producers, a follower too (Kafka reads the local log's
    // state; `kafka-transactions find-hanging --broker-id` asks each broker about all it hosts).
    let follower = cluster.addr(2);
    let response = describe_producers(follower, &[("pref", &[0])])?;
    ensure!(
        response.topics[0].partitions[0].error_code == 0,
        "a follower describes its replica's producers: {response:?}"
    );
    Ok(())
}

#[test]
fn unclean_election_when_the_whole_isr_is_down_elects_the_live_out_of_sync_replica() -> Result<()> {
    // Five voters, so that the quorum survives two brokers down.
    let mut cluster = Cluster::start(5, SETTINGS)?;
    kafka_client::create_topic_on(cluster.addr(3), "unclean", &[&[1, 2]])?;
    let before = cluster.await_full_isr("unclean", TIMEOUT)?.remove(0);
    let observers = [3, 4, 5];

    // Broker 2 dies and leaves the ISR; then broker 1, the last in-sync replica, dies too.
    cluster.node(2).kill()?;
    cluster.await_partition_0(&observers, "unclean", "broker 2 out of the ISR", TIMEOUT, |p| {
        p.isr == [1]
    })?;
    cluster.node(1).kill()?;
    let offline = cluster.await_partition_0(&observers, "unclean", "the partition offline", TIMEOUT, |p| {
        p.leader == -1
    })?;
    ensure!(
        offline.isr == [1],
        "the last in-sync replica stays in the ISR: {offline:?}"
    );
    ensure!(
        elect(cluster.addr(3), UNCLEAN, "unclean")? == vec![(0, ResponseError::EligibleLeadersNotAvailable.code())],
        "no replica is alive"
    );

    // Broker 2 returns: alive, out of sync, and (unclean election being off for the topic)
    // not elected on its own.
    cluster.node(2).respawn()?;
    cluster.node(2).wait_ready()?;
    wait_until(TIMEOUT, "broker 2 listed again", || {
        cluster.listed_brokers(3).ok().filter(|ids| ids.contains(&2))
    })?;
    let waiting = cluster.partition_0(3, "unclean")?;
    ensure!(waiting.leader == -1, "nothing elects broker 2 unasked: {waiting:?}");
    ensure!(
        elect(cluster.addr(4), PREFERRED, "unclean")? == vec![(0, ResponseError::PreferredLeaderNotAvailable.code())],
        "the preferred replica (1) is down"
    );

    ensure!(
        elect(cluster.addr(4), UNCLEAN, "unclean")? == vec![(0, 0)],
        "unclean election should succeed"
    );
    let elected =
        cluster.await_partition_0(&[2, 3, 4, 5], "unclean", "broker 2 leading", TIMEOUT, |p| p.leader == 2)?;
    ensure!(elected.isr == [2], "the unclean leader is the whole ISR: {elected:?}");
    ensure!(
        elected.leader_epoch > offline.leader_epoch && offline.leader_epoch > before.leader_epoch,
        "epochs only grow: {before:?}, {offline:?}, {elected:?}"
    );
    Ok(())
}

fn describe_producers(addr: SocketAddr, partitions: &[(&str, &[i32])]) -> Result<DescribeProducersResponse> {
    let topics = partitions
        .iter()
        .map(|(topic, indexes)| {
            ProducersTopic::default()
                .with_name(name(topic))
                .with_partition_indexes(indexes.to_vec())
        })
        .collect();
    kafka_client::call(
        addr,
        &DescribeProducersRequest::default().with_topics(topics),
        0,
        TIMEOUT,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_producers_lists_an_idempotent_producer_with_its_last_sequence() -> Result<()> {
    let node = SluiceNode::start(NodeOptions::default())?;
    ensure!(kafka_client::create_topic(node.addr(), "idem", 1, TIMEOUT)? == 0);
    let producer: FutureProducer = clients::producer_config(&node.bootstrap())
        .set("enable.idempotence", "true")
        .create()?;
    let mut deliveries = Vec::new();
    for i in 0..25 {
        let record = FutureRecord::<str, str>::to("idem").partition(0).payload("x");
        deliveries.push(producer.send_result(record).map_err(|(e, _)| e)?);
        if i == 10 {
            producer.flush(TIMEOUT)?;
        }
    }
    for delivery in deliveries {
        delivery.await?.map_err(|(e, _)| e)?;
    }

    let response = describe_producers(node.addr(), &[("idem", &[0, 7]), ("nope", &[0])])?;
    let idem = &response.topics[0];
    ensure!(
        idem.name.0.as_str() == "idem" && idem.partitions.len() == 2,
        "{response:?}"
    );
    let p0 = &idem.partitions[0];
    ensure!(p0.error_code == 0, "partition 0: {p0:?}");
    let [producer_state] = p0.active_producers.as_slice() else {
        bail!("expected one active producer: {p0:?}");
    };
    ensure!(producer_state.producer_id.0 >= 0, "{producer_state:?}");
    ensure!(producer_state.producer_epoch == 0, "{producer_state:?}");
    ensure!(
        producer_state.last_sequence == 24,
        "25 records were sent, sequences 0..=24: {producer_state:?}"
    );
    ensure!(producer_state.last_timestamp > 0, "{producer_state:?}");
    ensure!(
        (
            producer_state.coordinator_epoch,
            producer_state.current_txn_start_offset
        ) == (-1, -1),
        "no transactions: {producer_state:?}"
    );
    let unknown = ResponseError::UnknownTopicOrPartition.code();
    ensure!(idem.partitions[1].error_code == unknown, "partition 7: {response:?}");
    ensure!(response.topics[1].partitions[0].error_code == unknown, "{response:?}");
    Ok(())
}

fn describe_page(
    addr: SocketAddr,
    topics: &[&str],
    limit: i32,
    cursor: Option<(String, i32)>,
) -> Result<DescribeTopicPartitionsResponse> {
    let request = DescribeTopicPartitionsRequest::default()
        .with_topics(
            topics
                .iter()
                .map(|t| TopicRequest::default().with_name(name(t)))
                .collect(),
        )
        .with_response_partition_limit(limit)
        .with_cursor(cursor.map(|(topic, partition)| {
            Cursor::default()
                .with_topic_name(name(&topic))
                .with_partition_index(partition)
        }));
    kafka_client::call(addr, &request, 0, TIMEOUT)
}

/// Pages through `topics` (all when empty) `limit` partitions at a time; every page must hold
/// at most `page_size` partitions. Returns the (topic, partition) pairs in order, and the pages.
fn describe_all(
    addr: SocketAddr,
    topics: &[&str],
    limit: i32,
    page_size: usize,
) -> Result<(Vec<(String, i32)>, usize)> {
    let mut seen = Vec::new();
    let mut cursor = None;
    for pages in 1..=100 {
        let response = describe_page(addr, topics, limit, cursor)?;
        let mut on_page = 0;
        for topic in &response.topics {
            let topic_name = topic.name.as_ref().context("topic without a name")?.0.to_string();
            ensure!(topic.error_code == 0, "{topic_name}: error {}", topic.error_code);
            for p in &topic.partitions {
                ensure!(
                    p.leader_id.0 == 1 && p.isr_nodes == [BrokerId(1)],
                    "{topic_name}: {p:?}"
                );
                seen.push((topic_name.clone(), p.partition_index));
                on_page += 1;
            }
        }
        ensure!(
            on_page <= page_size,
            "page {pages} holds {on_page} partitions, more than {page_size}"
        );
        match response.next_cursor {
            Some(next) => cursor = Some((next.topic_name.0.to_string(), next.partition_index)),
            None => return Ok((seen, pages)),
        }
    }
    bail!("more than 100 pages: the cursor does not advance")
}

#[test]
fn describe_topic_partitions_pages_return_every_partition_exactly_once() -> Result<()> {
    let node = SluiceNode::start(NodeOptions::default().set("max.request.partition.size.limit", 4))?;
    ensure!(kafka_client::create_topic(node.addr(), "many", 11, TIMEOUT)? == 0);
    ensure!(kafka_client::create_topic(node.addr(), "few", 2, TIMEOUT)? == 0);
    let mut expected: Vec<(String, i32)> = (0..2).map(|p| ("few".to_string(), p)).collect();
    expected.extend((0..11).map(|p| ("many".to_string(), p)));

    // The client's limit, when below the broker's.
    let (seen, pages) = describe_all(node.addr(), &["many", "few"], 3, 3)?;
    ensure!(seen == expected, "named topics, 3 at a time: {seen:?}");
    ensure!(pages == 5, "13 partitions, 3 a page: {pages} pages");
    // The broker's limit (4), when the client asks for more; every topic when none is named.
    let (seen, pages) = describe_all(node.addr(), &[], 1000, 4)?;
    ensure!(seen == expected, "all topics, 4 at a time: {seen:?}");
    ensure!(pages == 4, "13 partitions, 4 a page: {pages} pages");
    let distinct: BTreeSet<&(String, i32)> = seen.iter().collect();
    ensure!(distinct.len() == seen.len(), "a partition was described twice");

    let response = describe_page(node.addr(), &["few", "missing"], 10, None)?;
    let errors: Vec<(String, i16)> = response
        .topics
        .iter()
        .map(|t| {
            (
                t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default(),
                t.error_code,
            )
        })
        .collect();
    let expected = vec![
        ("few".to_string(), 0),
        ("missing".to_string(), ResponseError::UnknownTopicOrPartition.code()),
    ];
    ensure!(errors == expected, "{errors:?}");
    Ok(())
}

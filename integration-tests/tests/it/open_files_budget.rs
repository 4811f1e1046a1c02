//! The open-files budget and many partitions: a broker under a low open-files limit refuses
//! the topic that would take it past its replica capacity (POLICY_VIOLATION, with a message
//! saying what to do) and keeps serving, its metadata quorum intact; a 3-node cluster creates
//! hundreds of partitions, all led with a full ISR, and reopens them after a restart.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::{CreateTopicsRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use rdkafka::admin::NewPartitions;
use rdkafka::producer::FutureRecord;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::Offset;
use sluice_integration_tests::{clients, kafka_client, Cluster, NodeOptions, SluiceNode};

/// Kafka's POLICY_VIOLATION error code.
const POLICY_VIOLATION: i16 = 44;

/// CreateTopics v7 for one topic of `partitions` at RF 1: its error code and message.
fn create(node: &SluiceNode, name: &str, partitions: i32) -> Result<(i16, Option<String>)> {
    let topic = CreatableTopic::default()
        .with_name(TopicName(StrBytes::from_string(name.to_string())))
        .with_num_partitions(partitions)
        .with_replication_factor(1);
    let request = CreateTopicsRequest::default()
        .with_topics(vec![topic])
        .with_timeout_ms(30_000);
    let response = kafka_client::call(node.addr(), &request, 7, Duration::from_secs(30))?;
    let result = response.topics.first().context("no topic result")?;
    Ok((result.error_code, result.error_message.as_ref().map(|m| m.to_string())))
}

async fn produce(bootstrap: &str, topic: &str, payload: &str) -> Result<i64> {
    let producer = clients::future_producer(bootstrap)?;
    let delivered = producer
        .send(
            FutureRecord::<str, str>::to(topic).partition(0).payload(payload),
            Duration::from_secs(20),
        )
        .await
        .map_err(|(e, _)| anyhow::anyhow!("produce to {topic}: {e}"))?;
    Ok(delivered.offset)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_at_its_open_files_limit_refuses_more_replicas_and_keeps_serving() -> Result<()> {
    // 400 files, 100 of them for connections: room for a few dozen replicas.
    let mut node = SluiceNode::start(
        NodeOptions::default()
            .open_files_limit(400)
            .set("max.connections", 100)
            .set("num.recovery.threads.per.data.dir", 2),
    )?;
    let bootstrap = node.bootstrap();
    let admin = clients::admin_client(&bootstrap)?;
    clients::create_topic(&admin, "kept", 1, &[]).await?;
    ensure!(
        produce(&bootstrap, "kept", "before").await? == 0,
        "first record's offset"
    );

    let mut created = 0;
    let mut refusal = None;
    for i in 0..200 {
        let (code, message) = create(&node, &format!("fill-{i}"), 5)?;
        if code == 0 {
            created += 1;
            continue;
        }
        refusal = Some((code, message));
        break;
    }
    let (code, message) = refusal.context("no CreateTopics was refused within 1,000 partitions")?;
    ensure!(created > 0, "the first topic was already refused: {code} {message:?}");
    ensure!(
        code == POLICY_VIOLATION,
        "refused with {code}, not POLICY_VIOLATION: {message:?}"
    );
    let message = message.unwrap_or_default();
    for part in ["on broker 1", "capacity of", "ulimit -n", "add brokers"] {
        ensure!(message.contains(part), "{part:?} missing from the refusal: {message}");
    }

    // CreatePartitions past the capacity is refused the same way.
    let results = admin
        .create_partitions([&NewPartitions::new("kept", 500)], &clients::admin_options())
        .await?;
    ensure!(
        matches!(results.as_slice(), [Err((_, RDKafkaErrorCode::PolicyViolation))]),
        "CreatePartitions kept -> 500: {results:?}"
    );

    // Still serving: the existing topic takes and returns records, and every created topic is led.
    ensure!(
        produce(&bootstrap, "kept", "after").await? == 1,
        "second record's offset"
    );
    let consumer = clients::stream_consumer(&bootstrap)?;
    clients::assign(&consumer, "kept", &[0], Offset::Offset(0))?;
    let consumed = clients::consume_exact(&consumer, &HashMap::from([(0, 2)]), Duration::from_secs(20)).await?;
    let payloads: Vec<_> = consumed
        .get(&0)
        .into_iter()
        .flatten()
        .map(|r| r.value.clone())
        .collect();
    ensure!(
        payloads == [Some(b"before".to_vec()), Some(b"after".to_vec())],
        "read back {payloads:?}"
    );
    let metadata = kafka_client::metadata(node.addr())?;
    let fill_topics: Vec<_> = metadata
        .topics
        .iter()
        .filter(|t| t.name.as_ref().is_some_and(|n| n.0.starts_with("fill-")))
        .collect();
    ensure!(
        fill_topics.len() == created,
        "{} fill topics listed, {created} created",
        fill_topics.len()
    );
    for topic in fill_topics {
        ensure!(
            topic.partitions.iter().all(|p| p.error_code == 0 && p.leader_id.0 == 1),
            "{:?} not led by broker 1: {:?}",
            topic.name,
            topic.partitions
        );
    }

    // Its metadata quorum is fine: still led by itself, and still committing (a new topic
    // that fits is created).
    let quorum = kafka_client::describe_quorum(node.addr())?;
    let partition = quorum
        .topics
        .first()
        .and_then(|t| t.partitions.first())
        .context("DescribeQuorum has no partition")?;
    ensure!(
        partition.error_code == 0 && partition.leader_id.0 == 1,
        "DescribeQuorum: {partition:?}"
    );
    let (code, message) = create(&node, "one-more", 1)?;
    ensure!(
        code == 0 || code == POLICY_VIOLATION,
        "a one-partition topic: {code} {message:?}"
    );
    node.assert_running()?;
    let log = std::fs::read_to_string(node.log_path())?;
    ensure!(
        !log.contains("Too many open files"),
        "the broker ran out of open files:\n{}",
        node.log_tail(40)
    );
    Ok(())
}

#[test]
fn three_hundred_partitions_are_all_led_with_a_full_isr_and_reopen_after_a_restart() -> Result<()> {
    let mut cluster = Cluster::start(3, &[])?;
    let addr = cluster.addr(1);
    let topics = ["many-a", "many-b", "many-c"];
    for topic in topics {
        let request = CreateTopicsRequest::default()
            .with_topics(vec![CreatableTopic::default()
                .with_name(TopicName(StrBytes::from_static_str(topic)))
                .with_num_partitions(100)
                .with_replication_factor(3)])
            .with_timeout_ms(60_000);
        let response = kafka_client::call(addr, &request, 7, Duration::from_secs(60))?;
        let result = response.topics.first().context("no topic result")?;
        ensure!(
            result.error_code == 0,
            "creating {topic}: {} {:?}",
            result.error_code,
            result.error_message
        );
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

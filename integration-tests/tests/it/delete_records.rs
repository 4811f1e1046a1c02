//! DeleteRecords through librdkafka's admin API (`rd_kafka_DeleteRecords`, what
//! `kafka-delete-records` and `Admin.deleteRecords` send): the log start offset moves, reads
//! below it are out of range, it survives a restart, and on a 3-node cluster the answer comes
//! once every in-sync replica has moved, so a new leader after a failover starts there too.

use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use rdkafka::admin::{AdminClient, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::FutureRecord;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use sluice_integration_tests::clients::{self, wait_until};
use sluice_integration_tests::{Cluster, NodeOptions, SluiceNode};

const TIMEOUT: Duration = Duration::from_secs(15);

/// DeleteRecords before `offset` of partition 0; the per-partition outcome (the low watermark;
/// the rdkafka crate reports a partition error as `OffsetFetch`).
async fn delete_before(
    admin: &AdminClient<DefaultClientContext>,
    topic: &str,
    offset: Offset,
) -> Result<std::result::Result<Offset, KafkaError>> {
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, offset)?;
    let result = admin.delete_records(&tpl, &clients::admin_options()).await?;
    let elem = result
        .find_partition(topic, 0)
        .context("no DeleteRecords result for partition 0")?;
    Ok(elem.error().map(|()| elem.offset()))
}

fn low_watermark(consumer: &BaseConsumer, topic: &str) -> Result<i64> {
    Ok(consumer.fetch_watermarks(topic, 0, TIMEOUT)?.0)
}

/// The first offset a consumer starting at the earliest offset receives.
fn first_offset_from_earliest(bootstrap: &str, topic: &str) -> Result<i64> {
    let consumer = clients::base_consumer(bootstrap)?;
    clients::assign(&consumer, topic, &[0], Offset::Beginning)?;
    wait_until(TIMEOUT, "a record from the earliest offset", || {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => Some(m.offset()),
            _ => None,
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_records_are_gone_for_readers_and_stay_gone_after_a_restart() -> Result<()> {
    let mut node = SluiceNode::start(NodeOptions::default())?;
    let bootstrap = node.bootstrap();
    let admin = clients::admin_client(&bootstrap)?;
    clients::create_topic(&admin, "trimmed", 1, &[]).await?;
    clients::produce_numbered(&bootstrap, "trimmed", 100).await?;

    let deleted = delete_before(&admin, "trimmed", Offset::Offset(30)).await?;
    ensure!(
        deleted == Ok(Offset::Offset(30)),
        "DeleteRecords before 30: {deleted:?}"
    );
    let consumer = clients::base_consumer(&bootstrap)?;
    ensure!(low_watermark(&consumer, "trimmed")? == 30, "low watermark is not 30");
    ensure!(first_offset_from_earliest(&bootstrap, "trimmed")? == 30);

    // A read below the start is out of range (auto.offset.reset=error surfaces it).
    clients::assign(&consumer, "trimmed", &[0], Offset::Offset(10))?;
    let below = wait_until(TIMEOUT, "an answer to a fetch below the log start", || {
        consumer.poll(Duration::from_millis(200)).map(|r| r.map(|m| m.offset()))
    })?;
    match below {
        Err(KafkaError::MessageConsumption(RDKafkaErrorCode::OffsetOutOfRange | RDKafkaErrorCode::AutoOffsetReset)) => {
        }
        other => bail!("a fetch at offset 10 after deleting before 30 answered {other:?}"),
    }

    // Past the high watermark: OFFSET_OUT_OF_RANGE, and nothing moves.
    let beyond = delete_before(&admin, "trimmed", Offset::Offset(500)).await?;
    ensure!(
        matches!(beyond, Err(KafkaError::OffsetFetch(RDKafkaErrorCode::OffsetOutOfRange))),
        "DeleteRecords past the high watermark answered {beyond:?}"
    );
    // The end (-1 on the wire) is the high watermark.
    let all = delete_before(&admin, "trimmed", Offset::End).await?;
    ensure!(
        all == Ok(Offset::Offset(100)),
        "DeleteRecords before -1 (the HW): {all:?}"
    );

    node.restart()?;
    let consumer = clients::base_consumer(&node.bootstrap())?;
    ensure!(
        low_watermark(&consumer, "trimmed")? == 100,
        "the log start did not survive a restart"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compacted_topics_refuse_delete_records_with_policy_violation() -> Result<()> {
    let node = SluiceNode::start(NodeOptions::default())?;
    let admin = clients::admin_client(&node.bootstrap())?;
    clients::create_topic(&admin, "compacted", 1, &[("cleanup.policy", "compact")]).await?;
    let producer = clients::future_producer(&node.bootstrap())?;
    producer
        .send(
            FutureRecord::<str, str>::to("compacted")
                .partition(0)
                .key("k")
                .payload("v"),
            TIMEOUT,
        )
        .await
        .map_err(|(e, _)| anyhow::anyhow!("produce: {e}"))?;
    let refused = delete_before(&admin, "compacted", Offset::Offset(1)).await?;
    ensure!(
        matches!(refused, Err(KafkaError::OffsetFetch(RDKafkaErrorCode::PolicyViolation))),
        "DeleteRecords on a compacted topic answered {refused:?}"
    );
    Ok(())
}

#[test]
fn every_in_sync_replica_moves_its_log_start_so_a_new_leader_starts_there_too() -> Result<()> {
    let mut cluster = Cluster::start(3, &[])?;
    let bootstrap = cluster.bootstrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let admin = clients::admin_client(&bootstrap)?;
        let topic = NewTopic::new("replicated-trim", 1, TopicReplication::Fixed(3));
        let created = admin.create_topics([&topic], &clients::admin_options()).await?;
        ensure!(matches!(created.as_slice(), [Ok(_)]), "create topic: {created:?}");
        anyhow::Ok(())
    })?;
    cluster.await_full_isr("replicated-trim", TIMEOUT)?;
    runtime.block_on(clients::produce_numbered(&bootstrap, "replicated-trim", 100))?;
    let deleted = runtime.block_on(async {
        let admin = clients::admin_client(&bootstrap)?;
        delete_before(&admin, "replicated-trim", Offset::Offset(40)).await
    })?;
    ensure!(
        deleted == Ok(Offset::Offset(40)),
        "DeleteRecords before 40: {deleted:?}"
    );

    // The answer came once every ISR member had moved: whichever node leads next starts at 40.
    let leader = cluster.partition_leader(1, "replicated-trim", 0, TIMEOUT)?;
    cluster.node(leader).kill()?;
    let survivor = cluster
        .ids()
        .into_iter()
        .find(|id| *id != leader)
        .context("no other node")?;
    let new_leader = wait_until(TIMEOUT, "a new leader", || {
        cluster
            .partition_leader(survivor, "replicated-trim", 0, TIMEOUT)
            .ok()
            .filter(|l| *l != leader)
    })?;
    let consumer = clients::base_consumer(&cluster.node(new_leader).bootstrap())?;
    let low = low_watermark(&consumer, "replicated-trim")?;
    ensure!(low == 40, "the new leader {new_leader} starts at {low}, want 40");
    Ok(())
}

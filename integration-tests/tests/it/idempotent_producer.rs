//! The idempotent producer (the Java client's and franz-go's default): InitProducerId, and a
//! retried batch answered with its original offset instead of being appended twice, also
//! after the broker restarts.

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{InitProducerIdRequest, ListOffsetsRequest, ProduceRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use sluice_integration_tests::{kafka_client, NodeOptions, SluiceNode};
use sluice_protocol::batch::test_support::encode_simple_batch;

const TIMEOUT: Duration = Duration::from_secs(10);

/// A 5-record batch from producer `pid`/`epoch` starting at sequence `seq`.
fn idempotent_batch(pid: i64, epoch: i16, seq: i32) -> Bytes {
    let mut batch = encode_simple_batch(5, 100, 1_700_000_000_000);
    batch[43..51].copy_from_slice(&pid.to_be_bytes());
    batch[51..53].copy_from_slice(&epoch.to_be_bytes());
    batch[53..57].copy_from_slice(&seq.to_be_bytes());
    let crc = crc32c::crc32c(&batch[21..]);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
    Bytes::from(batch)
}

/// Produces one batch to partition 0 of `topic`; returns (error code, base offset).
fn produce(node: &SluiceNode, topic: &str, batch: Bytes) -> Result<(i16, i64)> {
    let data = PartitionProduceData::default().with_index(0).with_records(Some(batch));
    let topic = TopicProduceData::default()
        .with_name(TopicName(StrBytes::from_string(topic.to_string())))
        .with_partition_data(vec![data]);
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(5000)
        .with_topic_data(vec![topic]);
    let response = kafka_client::call(node.addr(), &request, 9, TIMEOUT)?;
    let p = &response
        .responses
        .first()
        .context("no topic")?
        .partition_responses
        .first()
        .context("no partition")?;
    Ok((p.error_code, p.base_offset))
}

fn log_end_offset(node: &SluiceNode, topic: &str) -> Result<i64> {
    let partition = ListOffsetsPartition::default()
        .with_partition_index(0)
        .with_timestamp(-1);
    let topic = ListOffsetsTopic::default()
        .with_name(TopicName(StrBytes::from_string(topic.to_string())))
        .with_partitions(vec![partition]);
    let request = ListOffsetsRequest::default()
        .with_replica_id((-1).into())
        .with_topics(vec![topic]);
    let response = kafka_client::call(node.addr(), &request, 7, TIMEOUT)?;
    Ok(response.topics[0].partitions[0].offset)
}

#[test]
fn retried_batches_are_not_appended_twice_even_after_a_restart() -> Result<()> {
    let mut node = SluiceNode::start(NodeOptions::default())?;
    ensure!(kafka_client::create_topic(node.addr(), "idem", 1, TIMEOUT)? == 0);
    let init = kafka_client::call(
        node.addr(),
        &InitProducerIdRequest::default().with_transaction_timeout_ms(60_000),
        4,
        TIMEOUT,
    )?;
    ensure!(
        init.error_code == 0 && init.producer_id.0 >= 0 && init.producer_epoch == 0,
        "InitProducerId: {init:?}"
    );
    let pid = init.producer_id.0;
    let second = kafka_client::call(
        node.addr(),
        &InitProducerIdRequest::default().with_transaction_timeout_ms(60_000),
        4,
        TIMEOUT,
    )?;
    ensure!(second.producer_id.0 != pid, "two producers got the same id {pid}");

    ensure!(produce(&node, "idem", idempotent_batch(pid, 0, 0))? == (0, 0));
    ensure!(produce(&node, "idem", idempotent_batch(pid, 0, 5))? == (0, 5));
    // A retry of either batch gets its original offset and appends nothing.
    ensure!(produce(&node, "idem", idempotent_batch(pid, 0, 0))? == (0, 0));
    ensure!(produce(&node, "idem", idempotent_batch(pid, 0, 5))? == (0, 5));
    ensure!(log_end_offset(&node, "idem")? == 10);
    // A gap in the sequence is refused.
    let (code, _) = produce(&node, "idem", idempotent_batch(pid, 0, 20))?;
    ensure!(
        code == ResponseError::OutOfOrderSequenceNumber.code(),
        "gap answered {code}"
    );

    // After a crash the producer state is rebuilt from the log: the retry is still a duplicate.
    node.kill()?;
    node.restart()?;
    ensure!(produce(&node, "idem", idempotent_batch(pid, 0, 5))? == (0, 5));
    ensure!(produce(&node, "idem", idempotent_batch(pid, 0, 10))? == (0, 10));
    ensure!(log_end_offset(&node, "idem")? == 15);

    // After a clean shutdown the state comes from the snapshot written at close, not from the
    // log: a retry of a batch before the last one is still a duplicate, not out of order (which
    // librdkafka's idempotent producer takes as fatal).
    let status = node.terminate(TIMEOUT)?;
    ensure!(status.success(), "SIGTERM exit: {status}");
    node.restart()?;
    ensure!(produce(&node, "idem", idempotent_batch(pid, 0, 0))? == (0, 0));
    ensure!(produce(&node, "idem", idempotent_batch(pid, 0, 5))? == (0, 5));
    ensure!(produce(&node, "idem", idempotent_batch(pid, 0, 10))? == (0, 10));
    ensure!(log_end_offset(&node, "idem")? == 15);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn librdkafka_with_idempotence_enabled_delivers_every_record_once_in_order() -> Result<()> {
    use rdkafka::producer::{FutureProducer, FutureRecord};
    use rdkafka::Offset;
    use sluice_integration_tests::clients;
    use std::collections::HashMap;

    let node = SluiceNode::start(NodeOptions::default())?;
    let admin = clients::admin_client(&node.bootstrap())?;
    clients::create_topic(&admin, "idem-rd", 2, &[]).await?;
    let producer: FutureProducer = clients::producer_config(&node.bootstrap())
        .set("enable.idempotence", "true")
        .create()?;
    let mut deliveries = Vec::new();
    for i in 0..2000 {
        let value = format!("v{i}");
        let record = FutureRecord::to("idem-rd")
            .partition(i % 2)
            .key("k")
            .payload(value.as_bytes());
        deliveries.push(producer.send_result(record).map_err(|(e, _)| e)?);
    }
    let mut offsets: HashMap<i32, Vec<i64>> = HashMap::new();
    for delivery in deliveries {
        let delivered = delivery.await?.map_err(|(e, _)| e)?;
        offsets.entry(delivered.partition).or_default().push(delivered.offset);
    }
    for (partition, got) in &offsets {
        ensure!(
            *got == (0..1000).collect::<Vec<i64>>(),
            "partition {partition} offsets not 0..1000"
        );
    }
    let consumer = clients::stream_consumer(&node.bootstrap())?;
    clients::assign(&consumer, "idem-rd", &[0, 1], Offset::Beginning)?;
    let expected = HashMap::from([(0, 1000), (1, 1000)]);
    let got = clients::consume_exact(&consumer, &expected, Duration::from_secs(30)).await?;
    for (partition, records) in got {
        for (n, r) in records.iter().enumerate() {
            let i = n as i32 * 2 + partition;
            ensure!(
                r.value.as_deref() == Some(format!("v{i}").as_bytes()),
                "partition {partition} position {n}: {r:?}"
            );
        }
    }
    Ok(())
}

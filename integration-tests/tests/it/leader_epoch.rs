//! OffsetForLeaderEpoch and the leader-epoch checkpoint of a real broker: where each leader
//! epoch ends, the way followers (and KIP-320 consumers) ask for it.

use std::time::Duration;

use anyhow::{ensure, Result};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::offset_for_leader_epoch_request::{OffsetForLeaderPartition, OffsetForLeaderTopic};
use kafka_protocol::messages::{OffsetForLeaderEpochRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use rdkafka::producer::FutureRecord;
use sluice_integration_tests::{clients, kafka_client, NodeOptions, SluiceNode};

/// (error code, leader epoch, end offset) for one partition.
fn end_offset_for(node: &SluiceNode, topic: &str, current_epoch: i32, epoch: i32) -> Result<(i16, i32, i64)> {
    let partition = OffsetForLeaderPartition::default()
        .with_partition(0)
        .with_current_leader_epoch(current_epoch)
        .with_leader_epoch(epoch);
    let topic = OffsetForLeaderTopic::default()
        .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
        .with_partitions(vec![partition]);
    let request = OffsetForLeaderEpochRequest::default()
        .with_replica_id((-1).into())
        .with_topics(vec![topic]);
    let response = kafka_client::call(node.addr(), &request, 4, Duration::from_secs(10))?;
    let p = &response.topics[0].partitions[0];
    Ok((p.error_code, p.leader_epoch, p.end_offset))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offset_for_leader_epoch_reports_where_each_epoch_ends_and_the_checkpoint_is_written() -> Result<()> {
    let node = SluiceNode::start(NodeOptions::default())?;
    let admin = clients::admin_client(&node.bootstrap())?;
    clients::create_topic(&admin, "epochs", 1, &[]).await?;
    let producer = clients::future_producer(&node.bootstrap())?;
    for i in 0..15 {
        let value = format!("v{i}");
        producer
            .send(
                FutureRecord::to("epochs")
                    .partition(0)
                    .key("k")
                    .payload(value.as_bytes()),
                Duration::from_secs(10),
            )
            .await
            .map_err(|(e, _)| e)?;
    }
    ensure!(
        end_offset_for(&node, "epochs", -1, 0)? == (0, 0, 15),
        "epoch 0 should end at the log end"
    );
    ensure!(
        end_offset_for(&node, "epochs", 0, 7)? == (0, -1, -1),
        "an epoch above the latest is undefined"
    );
    let (code, _, _) = end_offset_for(&node, "epochs", 3, 0)?;
    ensure!(
        code == ResponseError::UnknownLeaderEpoch.code(),
        "a newer current epoch answered {code}"
    );
    let (code, _, _) = end_offset_for(&node, "no-such-topic", -1, 0)?;
    ensure!(
        code == ResponseError::UnknownTopicOrPartition.code(),
        "unknown topic answered {code}"
    );
    let checkpoint = std::fs::read_to_string(node.data_dir().join("epochs-0").join("leader-epoch-checkpoint"))?;
    ensure!(checkpoint == "0\n1\n0 0\n", "checkpoint file: {checkpoint:?}");
    Ok(())
}

//! Replication guards seen through typed Kafka requests against a 3-node cluster: `acks=all`
//! refused with NOT_ENOUGH_REPLICAS below `min.insync.replicas`, and requests carrying a
//! leader epoch from before a failover fenced with FENCED_LEADER_EPOCH.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{BrokerId, FetchRequest, ListOffsetsRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use sluice_integration_tests::clients::wait_until;
use sluice_integration_tests::{faults, kafka_client, Cluster};

const TIMEOUT: Duration = Duration::from_secs(20);
/// Short sessions so a killed broker is fenced (and leaves the ISR) within seconds.
const FAST_FENCING: &[(&str, &str)] = &[("broker.session.timeout.ms", "3000")];

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

/// (leader, leader epoch, ISR) of partition 0 of `topic` as node `addr` reports it.
fn partition_state(addr: SocketAddr, topic: &str) -> Result<(i32, i32, Vec<i32>)> {
    let m = kafka_client::metadata(addr)?;
    let t = m
        .topics
        .iter()
        .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == topic))
        .with_context(|| format!("{topic} not listed"))?;
    let p = t.partitions.first().context("no partition 0")?;
    let mut isr: Vec<i32> = p.isr_nodes.iter().map(|b| b.0).collect();
    isr.sort();
    Ok((p.leader_id.0, p.leader_epoch, isr))
}

#[test]
fn acks_all_below_min_insync_replicas_is_refused_with_not_enough_replicas() -> Result<()> {
    let mut cluster = Cluster::start(3, FAST_FENCING)?;
    let addr = cluster.addr(1);
    faults::create_topic(&cluster, 1, "strict", 1, 3, &[("min.insync.replicas", "3")])?;
    let (leader, _, isr) = wait_until(TIMEOUT, "a leader with a full ISR", || {
        partition_state(addr, "strict")
            .ok()
            .filter(|(leader, _, isr)| *leader > 0 && isr.len() == 3)
    })?;
    ensure!(isr == vec![1, 2, 3], "ISR {isr:?}");
    let leader_addr = cluster.addr(leader);
    let code = wait_until(TIMEOUT, "acks=all accepted by the leader", || {
        kafka_client::produce_one_record(leader_addr, "strict", -1)
            .ok()
            .filter(|c| *c == 0)
    });
    ensure!(code.is_ok(), "acks=all with a full ISR was not accepted: {code:?}");

    let follower = (1..=3).find(|id| *id != leader).unwrap();
    cluster.node(follower).kill()?;
    wait_until(TIMEOUT, "the killed follower out of the ISR", || {
        partition_state(leader_addr, "strict")
            .ok()
            .filter(|(_, _, isr)| isr.len() == 2)
    })?;
    // Metadata is answered from the applied image; the leader's partition takes on the shrunk
    // ISR a moment later. A produce in between is appended and then answered
    // NOT_ENOUGH_REPLICAS_AFTER_APPEND (as in Kafka); after it, acks=all is refused outright.
    let code = wait_until(TIMEOUT, "acks=all refused with NOT_ENOUGH_REPLICAS", || {
        kafka_client::produce_one_record(leader_addr, "strict", -1)
            .ok()
            .filter(|c| *c != ResponseError::NotEnoughReplicasAfterAppend.code())
    })?;
    ensure!(
        code == ResponseError::NotEnoughReplicas.code(),
        "acks=all with 2 in-sync replicas of min.insync.replicas=3 answered error code {code}, expected NOT_ENOUGH_REPLICAS"
    );
    let code = kafka_client::produce_one_record(leader_addr, "strict", 1)?;
    ensure!(
        code == 0,
        "acks=1 is not guarded by min.insync.replicas, yet got error code {code}"
    );

    // Once the follower is back and caught up, acks=all works again.
    cluster.node(follower).restart()?;
    wait_until(Duration::from_secs(30), "the follower back in the ISR", || {
        partition_state(leader_addr, "strict")
            .ok()
            .filter(|(_, _, isr)| isr.len() == 3)
    })?;
    let code = kafka_client::produce_one_record(leader_addr, "strict", -1)?;
    ensure!(code == 0, "acks=all with the full ISR back answered error code {code}");
    Ok(())
}

#[test]
fn requests_with_a_leader_epoch_from_before_a_failover_are_fenced() -> Result<()> {
    let mut cluster = Cluster::start(3, FAST_FENCING)?;
    faults::create_topic(&cluster, 1, "epochs", 1, 3, &[])?;
    let (old_leader, old_epoch, _) = wait_until(TIMEOUT, "a leader with a full ISR", || {
        partition_state(cluster.addr(1), "epochs")
            .ok()
            .filter(|(leader, _, isr)| *leader > 0 && isr.len() == 3)
    })?;
    cluster.node(old_leader).kill()?;
    let survivor = cluster.addr((1..=3).find(|id| *id != old_leader).unwrap());
    let (new_leader, new_epoch, _) = wait_until(TIMEOUT, "a new leader", || {
        partition_state(survivor, "epochs")
            .ok()
            .filter(|(leader, _, _)| *leader > 0 && *leader != old_leader)
    })?;
    ensure!(
        new_epoch > old_epoch,
        "leader epoch {new_epoch} after failover, was {old_epoch}"
    );
    let leader_addr = cluster.addr(new_leader);

    let fetch = |epoch: i32| -> Result<i16> {
        let request = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(0)
            .with_max_bytes(1 << 20)
            .with_topics(vec![FetchTopic::default().with_topic(name("epochs")).with_partitions(
                vec![FetchPartition::default()
                    .with_partition(0)
                    .with_current_leader_epoch(epoch)
                    .with_fetch_offset(0)
                    .with_partition_max_bytes(1 << 20)],
            )]);
        let response = kafka_client::call(leader_addr, &request, 12, TIMEOUT)?;
        Ok(response.responses[0].partitions[0].error_code)
    };
    let list_offsets = |epoch: i32| -> Result<i16> {
        let request = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(name("epochs"))
                .with_partitions(vec![ListOffsetsPartition::default()
                    .with_partition_index(0)
                    .with_current_leader_epoch(epoch)
                    .with_timestamp(-1)])]);
        let response = kafka_client::call(leader_addr, &request, 7, TIMEOUT)?;
        Ok(response.topics[0].partitions[0].error_code)
    };
    let fenced = ResponseError::FencedLeaderEpoch.code();
    // The new leader may apply its promotion a moment after the survivor reported it.
    wait_until(TIMEOUT, "the new leader serving its epoch", || {
        fetch(new_epoch).ok().filter(|c| *c == 0)
    })?;
    let code = fetch(old_epoch)?;
    ensure!(
        code == fenced,
        "Fetch at the old epoch answered {code}, expected FENCED_LEADER_EPOCH"
    );
    let code = list_offsets(old_epoch)?;
    ensure!(
        code == fenced,
        "ListOffsets at the old epoch answered {code}, expected FENCED_LEADER_EPOCH"
    );
    ensure!(list_offsets(new_epoch)? == 0, "ListOffsets at the current epoch failed");
    Ok(())
}

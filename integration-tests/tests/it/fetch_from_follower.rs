//! Fetching from the nearest replica (KIP-392): three nodes in racks `rack-1`..`rack-3` with
//! `replica.selector.class=...RackAwareReplicaSelector`. An rdkafka consumer with the
//! `client.rack` of a follower is sent there by the leader and reads every record from it
//! (the nodes' `kafka_server_brokertopicmetrics_messagesout` on `/metrics` say who served
//! it); with the leader's rack, or none, it reads from the leader. When that follower is
//! killed the consumer falls back to the leader and reads on without a gap.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::ops::Range;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use rdkafka::consumer::StreamConsumer;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::FutureRecord;
use rdkafka::Offset;
use sluice_integration_tests::clients::{assign, consumer_config, future_producer, Consumed};
use sluice_integration_tests::faults;
use sluice_integration_tests::node::{loopback_addr, scrape_metrics};
use sluice_integration_tests::{free_loopback_port, Cluster};

const NODES: usize = 3;
const TIMEOUT: Duration = Duration::from_secs(60);
const RACK_AWARE: &str = "org.apache.kafka.common.replica.RackAwareReplicaSelector";
const SERVED: &str = "kafka_server_brokertopicmetrics_messagesout_total";

/// Records each of the nodes `ids` has sent to consumers, by node id.
fn records_served(metrics: &[SocketAddr], ids: &[i32]) -> Result<BTreeMap<i32, u64>> {
    ids.iter()
        .map(|&id| {
            let value = scrape_metrics(metrics[id as usize - 1])?
                .get(SERVED)
                .copied()
                .with_context(|| format!("/metrics on node {id} has no {SERVED}"))?;
            Ok((id, value as u64))
        })
        .collect()
}

/// Records served since `before` by each node it counts.
fn served_since(metrics: &[SocketAddr], before: &BTreeMap<i32, u64>) -> Result<BTreeMap<i32, u64>> {
    let ids: Vec<i32> = before.keys().copied().collect();
    let now = records_served(metrics, &ids)?;
    Ok(now.iter().map(|(id, n)| (*id, n - before[id])).collect())
}

/// Produces `record-{i}` for each `i` of `range` to partition 0 (acks=all), one at a time, so
/// on a partition holding `range.start` records, record `i` lands at offset `i`.
async fn produce_range(bootstrap: &str, topic: &str, range: Range<usize>) -> Result<()> {
    let producer = future_producer(bootstrap)?;
    for i in range {
        let payload = format!("record-{i}");
        producer
            .send(
                FutureRecord::<str, str>::to(topic).partition(0).payload(&payload),
                TIMEOUT,
            )
            .await
            .map_err(|(e, _)| anyhow::anyhow!("produce record {i}: {e}"))?;
    }
    Ok(())
}

/// A consumer assigned partition 0 of `topic` from the beginning, in `rack` (none if empty).
fn consumer_in_rack(bootstrap: &str, topic: &str, rack: &str) -> Result<StreamConsumer> {
    let mut config = consumer_config(bootstrap);
    if !rack.is_empty() {
        config.set("client.rack", rack);
    }
    let consumer: StreamConsumer = config.create()?;
    assign(&consumer, topic, &[0], Offset::Beginning)?;
    Ok(consumer)
}

/// Reads the records `range` of partition 0 and checks they are `record-{i}` at offset `i`.
/// librdkafka reports a lost connection to the broker it fetches from as a consumer error and
/// carries on (from another replica): such errors are skipped, any other fails the read.
async fn read_range(consumer: &StreamConsumer, range: Range<usize>) -> Result<()> {
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    for i in range {
        let record = loop {
            let received = tokio::time::timeout_at(deadline, consumer.recv())
                .await
                .with_context(|| format!("no record {i} within {TIMEOUT:?}"))?;
            match received {
                Ok(m) => break Consumed::from_message(&m),
                Err(KafkaError::MessageConsumption(RDKafkaErrorCode::BrokerTransportFailure)) => continue,
                Err(e) => bail!("reading record {i}: {e}"),
            }
        };
        let expected = format!("record-{i}");
        if record.value.as_deref() != Some(expected.as_bytes()) || record.offset != i as i64 {
            bail!("record {i} read as {:?} at offset {}", record.value, record.offset);
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_consumer_reads_from_the_replica_in_its_rack_and_falls_back_to_the_leader() -> Result<()> {
    let metrics: Vec<SocketAddr> = (0..NODES)
        .map(|_| free_loopback_port().map(loopback_addr))
        .collect::<Result<_>>()?;
    let mut cluster = Cluster::start_each(NODES, &[("replica.selector.class", RACK_AWARE)], true, |id| {
        vec![
            ("metrics.listen".to_string(), metrics[id as usize - 1].to_string()),
            ("broker.rack".to_string(), format!("rack-{id}")),
        ]
    })?;
    let bootstrap = cluster.bootstrap();
    let topic = "read-nearby";
    faults::create_topic(&cluster, 1, topic, 1, NODES as i16, &[])?;
    cluster.await_full_isr(topic, TIMEOUT)?;
    produce_range(&bootstrap, topic, 0..200).await?;
    let leader = cluster.partition_leader(1, topic, 0, TIMEOUT)?;
    let follower = cluster
        .ids()
        .into_iter()
        .find(|id| *id != leader)
        .context("a follower")?;
    let all = cluster.ids();

    // In the follower's rack: the leader only redirects, the follower serves every record.
    let before = records_served(&metrics, &all)?;
    let near = consumer_in_rack(&bootstrap, topic, &format!("rack-{follower}"))?;
    read_range(&near, 0..200).await?;
    let served = served_since(&metrics, &before)?;
    if served[&follower] != 200 || served[&leader] != 0 {
        bail!(
            "a consumer in rack-{follower} was served {served:?} by node; expected all 200 records from node {follower}, none from the leader {leader}"
        );
    }

    // In the leader's rack, and in no rack: the leader serves.
    for rack in [format!("rack-{leader}"), String::new()] {
        let before = records_served(&metrics, &all)?;
        let consumer = consumer_in_rack(&bootstrap, topic, &rack)?;
        read_range(&consumer, 0..200).await?;
        let served = served_since(&metrics, &before)?;
        if served[&leader] != 200 || served.values().sum::<u64>() != 200 {
            bail!("a consumer in rack {rack:?} was served {served:?} by node; expected all 200 records from the leader {leader}");
        }
    }

    // The follower dies: the consumer it served goes back to the leader and reads on.
    cluster.node(follower).kill()?;
    let alive: Vec<i32> = all.iter().copied().filter(|id| *id != follower).collect();
    let before = records_served(&metrics, &alive)?;
    produce_range(&bootstrap, topic, 200..300).await?;
    read_range(&near, 200..300)
        .await
        .context("reading on after the follower it read from was killed")?;
    let served = served_since(&metrics, &before)?;
    if served[&leader] != 100 {
        bail!("after the follower died the live nodes served {served:?}; expected the 100 new records from the leader {leader}");
    }
    Ok(())
}

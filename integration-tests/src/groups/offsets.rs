//! Where a group's offsets live and what they are: its `__consumer_offsets` partition, the
//! coordinator a node names, and OffsetFetch / OffsetCommit from a client outside the group.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use kafka_protocol::messages::FindCoordinatorRequest;
use kafka_protocol::protocol::StrBytes;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::{Offset, TopicPartitionList};

use super::member::member_config;
use crate::{kafka_client, ClientSecurity};

/// Partitions of `__consumer_offsets` (Kafka's `offsets.topic.num.partitions` default).
pub const OFFSETS_TOPIC_PARTITIONS: i32 = 50;

/// Java's `String.hashCode` (UTF-16 code units, wrapping arithmetic).
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(c as i32))
}

/// The `__consumer_offsets` partition whose leader coordinates `group`. Kafka:
/// `Utils.abs(groupId.hashCode) % offsets.topic.num.partitions`, where `Utils.abs` is
/// `Math.abs` with `Integer.MIN_VALUE` mapped to 0 -- not `& 0x7fffffff` (the producer's
/// `toPositive`), which gives another partition for every negative hash.
pub fn offsets_partition(group: &str) -> i32 {
    let h = java_string_hash(group);
    let abs = if h == i32::MIN { 0 } else { h.abs() };
    abs % OFFSETS_TOPIC_PARTITIONS
}

/// The coordinator a node names for `group` (FindCoordinator v3, key type 0 = group):
/// `Ok(node id)` or the error code and message it answered with.
pub fn find_coordinator(addr: SocketAddr, group: &str) -> Result<std::result::Result<i32, (i16, String)>> {
    let request = FindCoordinatorRequest::default()
        .with_key(StrBytes::from_string(group.to_string()))
        .with_key_type(0);
    let response = kafka_client::call(addr, &request, 3, Duration::from_secs(10))?;
    if response.error_code != 0 {
        let message = response.error_message.map(|m| m.to_string()).unwrap_or_default();
        return Ok(Err((response.error_code, message)));
    }
    Ok(Ok(response.node_id.0))
}

/// The committed offsets of `group` for `partitions` of `topic`, through OffsetFetch by a
/// client that never joins the group (`None`: no committed offset). Retried for up to 30 s on
/// errors, as clients do while a coordinator moves (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS).
pub fn committed_offsets(
    bootstrap: &str,
    group: &str,
    topic: &str,
    partitions: i32,
) -> Result<BTreeMap<i32, Option<i64>>> {
    committed_offsets_as(bootstrap, &ClientSecurity::default(), group, topic, partitions)
}

/// [`committed_offsets`] by a client that connects as `security` says (TLS, SASL login).
pub fn committed_offsets_as(
    bootstrap: &str,
    security: &ClientSecurity,
    group: &str,
    topic: &str,
    partitions: i32,
) -> Result<BTreeMap<i32, Option<i64>>> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match fetch_committed_once(bootstrap, security, group, topic, partitions) {
            Ok(offsets) => return Ok(offsets),
            Err(e) if Instant::now() < deadline => {
                eprintln!("OffsetFetch for {group} failed ({e:#}); retrying");
                std::thread::sleep(Duration::from_millis(500));
            }
            Err(e) => return Err(e.context("OffsetFetch, retried for 30 s")),
        }
    }
}

fn fetch_committed_once(
    bootstrap: &str,
    security: &ClientSecurity,
    group: &str,
    topic: &str,
    partitions: i32,
) -> Result<BTreeMap<i32, Option<i64>>> {
    let consumer: BaseConsumer =
        crate::clients::secured(member_config(bootstrap, group, "sluice-groups-offset-fetch"), security).create()?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition(topic, p);
    }
    let committed = consumer
        .committed_offsets(tpl, Duration::from_secs(10))
        .with_context(|| format!("OffsetFetch for group {group}"))?;
    let mut out = BTreeMap::new();
    for e in committed.elements_for_topic(topic) {
        if let Some(err) = e.error().err() {
            bail!("OffsetFetch {group} {topic}-{}: {err}", e.partition());
        }
        let offset = match e.offset() {
            Offset::Offset(o) => Some(o),
            Offset::Invalid => None,
            other => bail!("OffsetFetch {group} {topic}-{}: unexpected {other:?}", e.partition()),
        };
        out.insert(e.partition(), offset);
    }
    Ok(out)
}

/// Commits `offsets` for `group` from a client that is not a member (generation -1, as
/// `kafka-consumer-groups --reset-offsets` does); the group must have no active members.
pub fn commit_as_admin(bootstrap: &str, group: &str, topic: &str, offsets: &BTreeMap<i32, i64>) -> Result<()> {
    let consumer: BaseConsumer = member_config(bootstrap, group, "sluice-groups-committer").create()?;
    let mut tpl = TopicPartitionList::new();
    for (p, o) in offsets {
        tpl.add_partition_offset(topic, *p, Offset::Offset(*o))?;
    }
    consumer
        .commit(&tpl, CommitMode::Sync)
        .with_context(|| format!("OffsetCommit {offsets:?} for group {group}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_partition_matches_kafka_utils_abs_of_the_java_hash() {
        assert_eq!(java_string_hash("orders-sink"), -1_813_797_765);
        // Kafka 4.1 (checked against a real broker): orders-sink -> 15, analytics -> 10.
        assert_eq!(offsets_partition("orders-sink"), 15);
        assert_eq!(offsets_partition("analytics"), 10);
        assert_eq!(offsets_partition("witness-0"), 46);
    }
}

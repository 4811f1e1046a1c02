//! Where new partitions' replicas go (Kafka's `ReplicaPlacer`): round-robin over live brokers,
//! continuing from topic to topic, leaders balanced, consecutive replicas on different racks;
//! and the checks on a placement a request names itself.

use std::collections::BTreeMap;

use kafka_protocol::error::ResponseError;

use crate::metadata::image::MetadataImage;
use crate::metadata::outcome::ApiError;
use crate::metadata::records::NewTopic;
use crate::topic_config::MAX_PARTITIONS_PER_TOPIC;

/// The replication factor a topic is created with: its assignment's, or the requested one.
/// A factor left to the broker default is lowered to the number of live brokers (at least 1),
/// so a default of 3 still lets a one- or two-node cluster create topics; an explicit factor
/// above the live broker count is refused by the placement.
pub fn replication_factor(image: &MetadataImage, topic: &NewTopic) -> i16 {
    if let Some(replicas) = topic.assignments.as_ref().and_then(|a| a.first()) {
        return replicas.len() as i16;
    }
    if !topic.replication_factor_defaulted {
        return topic.replication_factor;
    }
    let live = image.live_brokers().count().min(i16::MAX as usize) as i16;
    topic.replication_factor.min(live).max(1)
}

pub(super) fn check_partition_count(count: i32) -> Result<(), ApiError> {
    if count <= 0 || count > MAX_PARTITIONS_PER_TOPIC {
        return Err(ApiError::new(
            ResponseError::InvalidPartitions,
            format!("number of partitions must be between 1 and {MAX_PARTITIONS_PER_TOPIC}, got {count}"),
        ));
    }
    Ok(())
}

/// Spreads replicas round-robin over live brokers, partition `first` + i starting i brokers
/// further on so that leaders (the first replica) are balanced too. With racks, brokers are
/// ordered alternating between racks, so consecutive replicas land on different racks.
///
/// This is the placement `decide` makes for a command that names none. Commands already in
/// metadata logs were decided by this rule and are decided again when a node replays its log,
/// so it must not change: a node replaying with another rule would place those partitions
/// differently from the nodes that applied them. New rules go in [`propose_placement`].
pub(super) fn place_replicas(
    image: &MetadataImage,
    first: i32,
    count: i32,
    rf: i16,
) -> Result<Vec<Vec<i32>>, ApiError> {
    let brokers = rack_alternating_brokers(image);
    if rf <= 0 || rf as usize > brokers.len() {
        return Err(ApiError::new(
            ResponseError::InvalidReplicationFactor,
            format!(
                "replication factor {rf} is invalid with {} available broker(s)",
                brokers.len()
            ),
        ));
    }
    Ok((first..first + count)
        .map(|p| {
            (0..rf as usize)
                .map(|r| brokers[(p as usize + r) % brokers.len()])
                .collect()
        })
        .collect())
}

/// Where the proposing broker places a new topic that names no placement itself, carried in
/// the command as its assignments (so every node applies the same replicas, whatever rule its
/// build has). The round-robin continues across topics: the first partition starts at the
/// broker after the last partition placed, counted as the partitions in the image. Kafka's
/// `StripedReplicaPlacer` starts each topic at a random broker for the same reason, so that a
/// run of single-partition topics does not put every leader on the first broker; a rotation
/// balances such a run exactly rather than on average. A topic that names its own placement,
/// or cannot be placed, is returned as it is: applying the command then refuses it with the
/// reason.
pub fn propose_placement(image: &MetadataImage, topic: NewTopic) -> NewTopic {
    if topic.assignments.is_some() || check_partition_count(topic.num_partitions).is_err() {
        return topic;
    }
    let placed: usize = image.topics.values().map(|t| t.partitions.len()).sum();
    let start = (placed % image.live_brokers().count().max(1)) as i32;
    let assignments = place_replicas(image, start, topic.num_partitions, replication_factor(image, &topic)).ok();
    NewTopic { assignments, ..topic }
}

/// Live broker ids, interleaved across racks (rack a's first, rack b's first, ..., rack a's
/// second, ...). Without racks this is simply ascending id order.
fn rack_alternating_brokers(image: &MetadataImage) -> Vec<i32> {
    let mut by_rack: BTreeMap<Option<&str>, Vec<i32>> = BTreeMap::new();
    for broker in image.live_brokers() {
        by_rack
            .entry(broker.rack.as_deref())
            .or_default()
            .push(broker.broker_id);
    }
    let longest = by_rack.values().map(Vec::len).max().unwrap_or(0);
    (0..longest)
        .flat_map(|i| by_rack.values().filter_map(move |ids| ids.get(i).copied()))
        .collect()
}

/// Refuses a placement that would put more partition replicas on a broker than the capacity
/// it registered (what its open-files limit allows, see `config::open_files`): POLICY_VIOLATION,
/// naming the broker, the replicas it would host, its capacity and what to do. Brokers that
/// registered no capacity (older data) are unlimited.
pub(super) fn check_replica_capacity(
    image: &MetadataImage,
    topic: &str,
    assignments: &[Vec<i32>],
) -> Result<(), ApiError> {
    let mut added: BTreeMap<i32, (u64, u32)> = BTreeMap::new();
    for broker_id in assignments.iter().flatten() {
        if let Some(capacity) = image.brokers.get(broker_id).and_then(|b| b.replica_capacity) {
            added.entry(*broker_id).or_insert((0, capacity)).0 += 1;
        }
    }
    if added.is_empty() {
        return Ok(());
    }
    let mut hosted: BTreeMap<i32, u64> = BTreeMap::new();
    for partition in image.topics.values().flat_map(|t| t.partitions.iter()) {
        for broker_id in &partition.replicas {
            if added.contains_key(broker_id) {
                *hosted.entry(*broker_id).or_default() += 1;
            }
        }
    }
    for (broker_id, (new, capacity)) in added {
        let already = hosted.get(&broker_id).copied().unwrap_or(0);
        if already + new > u64::from(capacity) {
            return Err(ApiError::new(
                ResponseError::PolicyViolation,
                format!(
                    "topic {topic:?} would put {} partition replicas on broker {broker_id} ({already} hosted + {new} new), \
                     more than its capacity of {capacity} replicas within its open-files limit; raise the open-files \
                     limit (ulimit -n) of broker {broker_id} and restart it, or add brokers",
                    already + new
                ),
            ));
        }
    }
    Ok(())
}

pub(super) fn validate_assignments(
    image: &MetadataImage,
    assignments: &[Vec<i32>],
    expected_rf: Option<usize>,
) -> Result<Vec<Vec<i32>>, ApiError> {
    let bad = |msg: String| ApiError::new(ResponseError::InvalidReplicaAssignment, msg);
    check_partition_count(assignments.len() as i32)?;
    for replicas in assignments {
        if replicas.is_empty() {
            return Err(bad("a partition's replica list is empty".to_string()));
        }
        if expected_rf.is_some_and(|rf| rf != replicas.len()) {
            return Err(bad(format!(
                "replica list {replicas:?} does not match the topic's replication factor"
            )));
        }
        let mut seen = replicas.clone();
        seen.sort_unstable();
        seen.dedup();
        if seen.len() != replicas.len() {
            return Err(bad(format!("replica list {replicas:?} names a broker twice")));
        }
        if let Some(unknown) = replicas.iter().find(|id| !image.brokers.contains_key(id)) {
            return Err(bad(format!(
                "broker {unknown} in replica list {replicas:?} is not registered"
            )));
        }
    }
    Ok(assignments.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::test_support::*;
    use crate::controller::{create_partitions, create_topic, decide, fence_broker};
    use crate::metadata::records::{MetadataCommand, MetadataRecord};
    use kafka_protocol::error::ResponseError;
    use uuid::Uuid;

    #[test]
    fn leaders_are_spread_over_brokers() {
        let mut image = image_with_brokers(&[1, 2, 3]);
        let records = create_topic(&image, &new_topic("t", 6, 3), Uuid::from_u128(7)).unwrap();
        apply_all(&mut image, &records);
        let topic = image.topic("t").unwrap();
        let mut leaders: Vec<i32> = topic.partitions.iter().map(|p| p.leader).collect();
        leaders.sort();
        assert_eq!(leaders, vec![1, 1, 2, 2, 3, 3]);
        assert!(topic
            .partitions
            .iter()
            .all(|p| p.replicas.len() == 3 && p.isr == p.replicas));
    }

    #[test]
    fn single_partition_topics_take_turns_at_leading() {
        let mut image = image_with_brokers(&[1, 2, 3]);
        let mut leaders = std::collections::BTreeMap::new();
        for i in 0..30 {
            let name = format!("t{i}");
            let topic = propose_placement(&image, new_topic(&name, 1, 2));
            let records = create_topic(&image, &topic, Uuid::from_u128(i + 1)).unwrap();
            apply_all(&mut image, &records);
            let p = &image.topic(&name).unwrap().partitions[0];
            assert_ne!(p.replicas[0], p.replicas[1], "{name}: {:?}", p.replicas);
            *leaders.entry(p.leader).or_insert(0) += 1;
        }
        assert_eq!(leaders, std::collections::BTreeMap::from([(1, 10), (2, 10), (3, 10)]));
    }

    #[test]
    fn a_command_that_names_no_placement_is_decided_as_logged_commands_were() {
        // Replaying a metadata log decides its commands again: the rule for unplaced ones
        // must stay the one they were decided with (every topic from the first broker).
        let mut image = image_with_brokers(&[1, 2, 3]);
        for i in 0..3 {
            let name = format!("t{i}");
            let records = create_topic(&image, &new_topic(&name, 2, 2), Uuid::from_u128(i + 1)).unwrap();
            apply_all(&mut image, &records);
            let replicas: Vec<_> = image
                .topic(&name)
                .unwrap()
                .partitions
                .iter()
                .map(|p| p.replicas.to_vec())
                .collect();
            assert_eq!(replicas, vec![vec![1, 2], vec![2, 3]]);
        }
        let records = create_partitions(&image, "t0", 3, None).unwrap();
        apply_all(&mut image, &records);
        assert_eq!(image.topic("t0").unwrap().partitions[2].replicas[..], [3, 1]);
        // Nothing is proposed for a topic that cannot be placed: applying it says why.
        assert_eq!(propose_placement(&image, new_topic("wide", 1, 4)).assignments, None);
        assert_eq!(propose_placement(&image, new_topic("none", 0, 1)).assignments, None);
        // A placement the request names is kept.
        let mut named = new_topic("named", 1, 1);
        named.assignments = Some(vec![vec![3]]);
        assert_eq!(propose_placement(&image, named).assignments, Some(vec![vec![3]]));
    }

    #[test]
    fn replicas_of_a_partition_land_on_different_racks() {
        let mut image = MetadataImage::new("test".into());
        for (id, rack) in [(1, "a"), (2, "a"), (3, "b"), (4, "b"), (5, "c"), (6, "c")] {
            image.apply(&MetadataRecord::RegisterBroker {
                broker_id: id,
                incarnation_id: Uuid::nil(),
                endpoints: vec![],
                rack: Some(rack.to_string()),
                replica_capacity: None,
            });
        }
        let rack = |id: i32| image.brokers[&id].rack.clone();
        let records = create_topic(&image, &new_topic("t", 12, 3), Uuid::from_u128(1)).unwrap();
        let mut leaders = std::collections::BTreeMap::new();
        for record in &records {
            if let MetadataRecord::Partition { replicas, leader, .. } = record {
                let mut racks: Vec<_> = replicas.iter().map(|id| rack(*id)).collect();
                racks.sort();
                racks.dedup();
                assert_eq!(racks.len(), 3, "replicas {replicas:?} share a rack");
                *leaders.entry(*leader).or_insert(0) += 1;
            }
        }
        assert!(leaders.values().all(|n| *n == 2), "leaders per broker: {leaders:?}");
    }

    #[test]
    fn new_partitions_are_not_placed_on_fenced_or_shutting_down_brokers() {
        let mut image = image_with_brokers(&[1, 2, 3, 4]);
        let records = fence_broker(&image, 2);
        apply_all(&mut image, &records);
        let shutdown = shutdown_of(3);
        decide_and_apply(&mut image, shutdown);
        let err = create_topic(&image, &new_topic("t", 1, 3), Uuid::from_u128(1)).unwrap_err();
        assert_eq!(err.error, ResponseError::InvalidReplicationFactor);
        let records = create_topic(&image, &new_topic("t", 4, 2), Uuid::from_u128(1)).unwrap();
        apply_all(&mut image, &records);
        for p in &image.topic("t").unwrap().partitions {
            let mut replicas = p.replicas.clone();
            replicas.sort();
            assert_eq!(replicas[..], [1, 4]);
        }
    }

    #[test]
    fn a_default_replication_factor_is_lowered_to_the_live_broker_count() {
        let mut image = image_with_brokers(&[1, 2]);
        let mut topic = new_topic("t", 2, 3);
        topic.replication_factor_defaulted = true;
        assert_eq!(replication_factor(&image, &topic), 2);
        let records = fence_broker(&image, 2);
        apply_all(&mut image, &records);
        assert_eq!(replication_factor(&image, &topic), 1);
        let command = MetadataCommand::CreateTopic {
            topic,
            topic_id: Uuid::from_u128(1),
        };
        decide_and_apply(&mut image, command);
        assert!(image
            .topic("t")
            .unwrap()
            .partitions
            .iter()
            .all(|p| p.replicas[..] == [1]));
        // An explicit factor is never lowered.
        let command = MetadataCommand::CreateTopic {
            topic: new_topic("u", 1, 2),
            topic_id: Uuid::from_u128(2),
        };
        assert_eq!(
            decide(&image, &command).unwrap_err().error,
            ResponseError::InvalidReplicationFactor
        );
    }

    #[test]
    fn topics_with_three_replicas_are_created_on_three_brokers() {
        let mut image = image_with_brokers(&[1, 2, 3]);
        let command = MetadataCommand::CreateTopic {
            topic: new_topic("t", 1, 3),
            topic_id: Uuid::from_u128(1),
        };
        decide_and_apply(&mut image, command);
        let p = &image.topic("t").unwrap().partitions[0];
        assert_eq!((p.replicas.len(), &p.isr), (3, &p.replicas));
    }
}

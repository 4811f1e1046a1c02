//! Partition reassignment (Kafka's KIP-455, `kafka-reassign-partitions`): moving a partition
//! to a new replica set without losing availability. Kafka's three steps, each a metadata
//! record decided here:
//!
//! 1. Start: the replica set becomes the target followed by the replicas leaving (so the new
//!    replicas are created and fetch from the leader), and the partition records which
//!    replicas are being added and removed. The ISR and leader stay.
//! 2. Each added replica joins the ISR once it has caught up (the leader's ordinary
//!    AlterPartition).
//! 3. Finish: once every target replica is in the ISR, the replica set becomes the target,
//!    the ISR keeps only target replicas, and if the leader is leaving, leadership moves to
//!    the first in-sync target replica (leader epoch bumped). Replicas that left delete their
//!    logs when they apply it. A start whose target is already in sync finishes at once.
//!
//! Cancelling reverts to the original replicas (those not being added). A new target for a
//! partition already moving replaces the old one, counted from the original replicas, as Kafka
//! does.

use kafka_protocol::error::ResponseError;

use super::election::{self, Candidates};
use super::partition_change::{finish_reassignment, in_order, partition_change};
use crate::metadata::image::MetadataImage;
use crate::metadata::outcome::ApiError;
use crate::metadata::records::{ElectionTrigger, LeaderElection, MetadataRecord};

/// Decides AlterPartitionReassignments for one partition: `target` to move it, `None` to
/// cancel the move under way.
pub fn reassign_partition(
    image: &MetadataImage,
    name: &str,
    partition: i32,
    target: Option<&[i32]>,
) -> Result<Vec<MetadataRecord>, ApiError> {
    let unknown = || {
        ApiError::new(
            ResponseError::UnknownTopicOrPartition,
            format!("{name} has no partition {partition}"),
        )
    };
    let topic = image.topic(name).ok_or_else(unknown)?;
    let p = usize::try_from(partition)
        .ok()
        .and_then(|i| topic.partitions.get(i))
        .ok_or_else(unknown)?;
    let original = p.original_replicas();
    let target = match target {
        Some(target) => {
            check_target(image, target)?;
            target.to_vec()
        }
        None if p.is_reassigning() => original.clone(),
        None => {
            return Err(ApiError::new(
                ResponseError::NoReassignmentInProgress,
                format!("{name}-{partition} has no reassignment in progress to cancel"),
            ))
        }
    };
    let leaving: Vec<i32> = original.iter().copied().filter(|id| !target.contains(id)).collect();
    let replicas: Vec<i32> = target.iter().chain(&leaving).copied().collect();
    let adding: Vec<i32> = target.iter().copied().filter(|id| !original.contains(id)).collect();
    let isr = in_order(&replicas, &p.isr);
    if target.iter().all(|id| isr.contains(id)) {
        return finish_reassignment(image, topic.topic_id, partition, p, &target, isr);
    }
    if isr.is_empty() {
        return Err(ApiError::new(
            ResponseError::InvalidReplicaAssignment,
            format!("no in-sync replica of {name}-{partition} would remain; wait until one is in sync"),
        ));
    }
    let elected = election::elect_on_isr_change(&replicas, p.leader, &isr, false, &Candidates::new(image));
    let mut records = Vec::new();
    if replicas[..] != p.replicas[..] || elected.isr[..] != p.isr[..] || elected.leader != p.leader {
        let election = LeaderElection {
            reason: elected.reason,
            trigger: ElectionTrigger::ReassignmentStarted,
        };
        records.push(partition_change(
            topic.topic_id,
            partition as usize,
            &replicas,
            elected.isr,
            elected.leader,
            p,
            election,
        ));
    }
    records.push(MetadataRecord::PartitionReassignment {
        topic_id: topic.topic_id,
        partition,
        adding,
        removing: leaving,
    });
    Ok(records)
}

/// A target must be non-empty, distinct and name registered brokers (Kafka:
/// INVALID_REPLICA_ASSIGNMENT).
fn check_target(image: &MetadataImage, target: &[i32]) -> Result<(), ApiError> {
    let invalid = |why: String| Err(ApiError::new(ResponseError::InvalidReplicaAssignment, why));
    if target.is_empty() {
        return invalid("the target replica list is empty; name at least one broker".into());
    }
    let mut distinct = target.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.len() != target.len() {
        return invalid(format!("the target replicas {target:?} repeat a broker"));
    }
    if let Some(id) = target.iter().find(|id| !image.brokers.contains_key(id)) {
        return invalid(format!(
            "broker {id} in the target replicas {target:?} is not registered"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::test_support::*;
    use crate::controller::{create_topic, decide};
    use crate::metadata::image::PartitionRegistration;
    use crate::metadata::records::MetadataCommand;
    use uuid::Uuid;

    const TOPIC: &str = "moving";

    /// A 1-partition topic on brokers [1, 2, 3] (of 1..=4), led by 1, all in sync.
    fn image() -> MetadataImage {
        let mut image = image_with_brokers(&[1, 2, 3, 4]);
        let mut topic = new_topic(TOPIC, 1, 3);
        topic.assignments = Some(vec![vec![1, 2, 3]]);
        let records = create_topic(&image, &topic, Uuid::from_u128(9)).unwrap();
        apply_all(&mut image, &records);
        image
    }

    fn reassign(image: &mut MetadataImage, target: Option<Vec<i32>>) -> Result<(), ApiError> {
        let command = MetadataCommand::ReassignPartition {
            name: TOPIC.into(),
            partition: 0,
            target,
        };
        let (records, _) = decide(image, &command)?;
        apply_all(image, &records);
        Ok(())
    }

    fn partition(image: &MetadataImage) -> PartitionRegistration {
        image.topic(TOPIC).unwrap().partitions[0].clone()
    }

    /// The leader's AlterPartition adding `joining` to the ISR.
    fn join_isr(image: &mut MetadataImage, joining: i32) {
        let p = partition(image);
        let mut new_isr = p.isr.clone();
        new_isr.push(joining);
        decide_and_apply(
            image,
            MetadataCommand::AlterPartition {
                topic_id: Uuid::from_u128(9),
                partition: 0,
                leader_id: p.leader,
                leader_epoch: p.leader_epoch,
                partition_epoch: p.partition_epoch,
                new_isr: new_isr.to_vec(),
            },
        );
    }

    #[test]
    fn a_move_adds_the_new_replica_then_switches_once_it_is_in_sync() {
        let mut image = image();
        reassign(&mut image, Some(vec![2, 3, 4])).unwrap();
        let moving = partition(&image);
        assert_eq!(
            moving.replicas[..],
            [2, 3, 4, 1],
            "target first, then the leaving replica"
        );
        assert_eq!(
            (moving.adding_replicas().to_vec(), moving.removing_replicas().to_vec()),
            (vec![4], vec![1])
        );
        assert_eq!(moving.isr[..], [2, 3, 1]);
        assert_eq!(moving.leader, 1, "the leader stays while the new replica catches up");

        join_isr(&mut image, 4);
        let done = partition(&image);
        assert_eq!(done.replicas[..], [2, 3, 4]);
        assert_eq!(done.isr[..], [2, 3, 4]);
        assert_eq!(
            done.leader, 2,
            "the leaving leader hands over to the first in-sync target replica"
        );
        assert_eq!(done.leader_epoch, moving.leader_epoch + 1);
        assert!(!done.is_reassigning());
    }

    #[test]
    fn a_target_already_in_sync_finishes_at_once() {
        let mut image = image();
        let before = partition(&image);
        reassign(&mut image, Some(vec![3, 2])).unwrap();
        let p = partition(&image);
        assert_eq!(
            (p.replicas.to_vec(), p.isr.to_vec(), p.leader),
            (vec![3, 2], vec![3, 2], 3)
        );
        assert!(p.partition_epoch > before.partition_epoch && p.leader_epoch > before.leader_epoch);
        assert!(!p.is_reassigning());
    }

    #[test]
    fn cancelling_reverts_to_the_original_replicas() {
        let mut image = image();
        let err = reassign(&mut image, None).unwrap_err();
        assert_eq!(err.error, ResponseError::NoReassignmentInProgress);
        reassign(&mut image, Some(vec![2, 3, 4])).unwrap();
        reassign(&mut image, None).unwrap();
        let p = partition(&image);
        // As in Kafka, the original replicas keep the order of the merged set (target first).
        assert_eq!(
            (p.replicas.to_vec(), p.isr.to_vec(), p.leader),
            (vec![2, 3, 1], vec![2, 3, 1], 1)
        );
        assert!(!p.is_reassigning());
    }

    #[test]
    fn a_new_target_replaces_the_old_one_from_the_original_replicas() {
        let mut image = image();
        reassign(&mut image, Some(vec![2, 3, 4])).unwrap();
        reassign(&mut image, Some(vec![1, 2, 4])).unwrap();
        let p = partition(&image);
        assert_eq!(p.replicas[..], [1, 2, 4, 3]);
        assert_eq!(
            (p.adding_replicas().to_vec(), p.removing_replicas().to_vec()),
            (vec![4], vec![3])
        );
    }

    #[test]
    fn invalid_targets_are_refused_with_invalid_replica_assignment() {
        let mut image = image();
        for target in [vec![], vec![2, 2, 3], vec![2, 3, 9]] {
            let err = reassign(&mut image, Some(target.clone())).unwrap_err();
            assert_eq!(
                err.error,
                ResponseError::InvalidReplicaAssignment,
                "{target:?}: {}",
                err.message
            );
        }
        let unknown = decide(
            &image,
            &MetadataCommand::ReassignPartition {
                name: TOPIC.into(),
                partition: 5,
                target: Some(vec![1]),
            },
        )
        .unwrap_err();
        assert_eq!(unknown.error, ResponseError::UnknownTopicOrPartition);
    }

    #[test]
    fn the_reassignment_survives_a_snapshot() {
        let mut image = image();
        reassign(&mut image, Some(vec![2, 3, 4])).unwrap();
        let restored = crate::metadata::codec::decode_image(&crate::metadata::codec::encode_image(&image)).unwrap();
        assert_eq!(partition(&restored), partition(&image));
    }
}

//! Changes to partition registrations (Kafka's `PartitionChangeBuilder` and the election half of
//! `ReplicationControlManager`): AlterPartition from a partition leader, taking a broker out of
//! service, leader elections (preferred, returning replicas, unclean), finishing a reassignment
//! (see `reassignment.rs`) once its target is in sync, and the epoch bumps that
//! make each registration a compare-and-set version.

use std::collections::HashSet;

use kafka_protocol::error::ResponseError;
use uuid::Uuid;

use super::election::{self, Candidates, Elected, Kind, Reason};
use crate::metadata::image::{MetadataImage, PartitionRegistration, NO_LEADER};
use crate::metadata::outcome::{ApiError, Outcome, PartitionState};
use crate::metadata::records::{ElectionTrigger, IsrChangeRequest, LeaderElection, MetadataRecord};

/// Kafka's AlterPartition (KIP-497): the partition leader `leader_id` replaces the ISR.
/// A compare-and-set on the leader and partition epochs: a deposed leader or one acting on a
/// stale registration is refused, as is an ISR without the leader or one that adds a replica
/// which cannot be in sync (KIP-841: fenced, shutting down or not registered). An unchanged
/// ISR writes nothing.
pub fn alter_partition(
    image: &MetadataImage,
    topic_id: Uuid,
    partition: i32,
    leader_id: i32,
    leader_epoch: i32,
    partition_epoch: i32,
    new_isr: &[i32],
) -> Result<(Vec<MetadataRecord>, Outcome), ApiError> {
    let change = IsrChangeRequest {
        topic_id,
        partition,
        leader_epoch,
        partition_epoch,
        new_isr: new_isr.to_vec(),
    };
    let (records, state) = change_isr(image, leader_id, &change)?;
    let outcome = Outcome::PartitionChanged {
        leader_epoch: state.leader_epoch,
        partition_epoch: state.partition_epoch,
        isr: state.isr,
    };
    Ok((records, outcome))
}

/// Kafka's AlterPartition request with many partitions: each change decided as
/// [`alter_partition`] decides one, against the image before the request (the changes touch
/// distinct partitions, so none sees another's records). A partition named twice is refused
/// the second time (INVALID_REQUEST): both would pass the compare-and-set. The records of the
/// accepted changes, and per change, in order, its registration after or its refusal.
pub fn alter_partitions(
    image: &MetadataImage,
    leader_id: i32,
    changes: &[IsrChangeRequest],
) -> (Vec<MetadataRecord>, Outcome) {
    let mut records = Vec::new();
    let mut seen = HashSet::with_capacity(changes.len());
    let results = changes
        .iter()
        .map(|change| {
            if !seen.insert((change.topic_id, change.partition)) {
                let why = format!(
                    "AlterPartition names partition {} of topic id {} more than once",
                    change.partition, change.topic_id
                );
                return Err(ApiError::new(ResponseError::InvalidRequest, why));
            }
            let (mut written, state) = change_isr(image, leader_id, change)?;
            records.append(&mut written);
            Ok(state)
        })
        .collect();
    (records, Outcome::PartitionsChanged(results))
}

/// One partition's ISR change (see [`alter_partition`]): its records and the registration after.
fn change_isr(
    image: &MetadataImage,
    leader_id: i32,
    change: &IsrChangeRequest,
) -> Result<(Vec<MetadataRecord>, PartitionState), ApiError> {
    let IsrChangeRequest {
        topic_id,
        partition,
        leader_epoch,
        partition_epoch,
        ref new_isr,
    } = *change;
    let topic = image
        .topic_by_id(&topic_id)
        .ok_or_else(|| ApiError::new(ResponseError::UnknownTopicId, format!("no topic has id {topic_id}")))?;
    let p = usize::try_from(partition)
        .ok()
        .and_then(|i| topic.partitions.get(i))
        .ok_or_else(|| {
            ApiError::new(
                ResponseError::UnknownTopicOrPartition,
                format!("{} has no partition {partition}", topic.name),
            )
        })?;
    let refuse = |error, why: String| {
        Err(ApiError::new(
            error,
            format!("AlterPartition of {}-{partition} refused: {why}", topic.name),
        ))
    };
    if leader_id != p.leader {
        let why = format!("broker {leader_id} is not the leader, {} is", p.leader);
        return refuse(ResponseError::NotLeaderOrFollower, why);
    }
    if leader_epoch != p.leader_epoch {
        let error = if leader_epoch < p.leader_epoch {
            ResponseError::FencedLeaderEpoch
        } else {
            ResponseError::UnknownLeaderEpoch
        };
        return refuse(
            error,
            format!("leader epoch {leader_epoch}, current {}", p.leader_epoch),
        );
    }
    if partition_epoch != p.partition_epoch {
        let why = format!("partition epoch {partition_epoch}, current {}", p.partition_epoch);
        return refuse(ResponseError::InvalidUpdateVersion, why);
    }
    let mut distinct = new_isr.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.len() != new_isr.len()
        || !new_isr.contains(&p.leader)
        || new_isr.iter().any(|id| !p.replicas.contains(id))
    {
        let why = format!(
            "ISR {new_isr:?} must be distinct replicas of {:?} including the leader {}",
            p.replicas, p.leader
        );
        return refuse(ResponseError::InvalidRequest, why);
    }
    if let Some(id) = new_isr.iter().find(|id| !p.isr.contains(id) && !image.is_live(**id)) {
        let why = format!("replica {id} is fenced, shutting down or not registered");
        return refuse(ResponseError::IneligibleReplica, why);
    }
    // In the replicas' order, so that the same set always makes the same record.
    let isr: Vec<i32> = p.replicas.iter().copied().filter(|id| new_isr.contains(id)).collect();
    // The last replica a reassignment waits for is in sync: finish the move in the same step.
    let target = p.target_replicas();
    if p.is_reassigning() && target.iter().all(|id| isr.contains(id)) {
        let records = finish_reassignment(image, topic.topic_id, partition, p, &target, isr)?;
        let mut after = p.clone();
        for record in &records {
            if let MetadataRecord::Partition {
                isr,
                leader_epoch,
                partition_epoch,
                ..
            } = record
            {
                (after.isr, after.leader_epoch, after.partition_epoch) = (isr.as_slice().into(), *leader_epoch, *partition_epoch);
            }
        }
        let state = PartitionState {
            leader_epoch: after.leader_epoch,
            partition_epoch: after.partition_epoch,
            isr: after.isr.to_vec(),
        };
        return Ok((records, state));
    }
    let changed = isr[..] != p.isr[..];
    let records = if changed {
        let election = LeaderElection {
            reason: Reason::Unchanged,
            trigger: ElectionTrigger::IsrChange,
        };
        vec![partition_change(
            topic.topic_id,
            partition as usize,
            &p.replicas,
            isr.clone(),
            p.leader,
            p,
            election,
        )]
    } else {
        Vec::new()
    };
    let state = PartitionState {
        leader_epoch: p.leader_epoch,
        partition_epoch: p.partition_epoch + i32::from(changed),
        isr,
    };
    Ok((records, state))
}

/// The partition changes that follow a broker out of service: it leaves every ISR it is in
/// (unless it is the last member: Kafka keeps it so it can lead again when it returns), and
/// the partitions it led get a new leader by [`election::elect`] (another in-sync replica, an
/// out-of-sync one where the topic allows unclean election, or none: offline). Each change
/// bumps the partition epoch, and the leader epoch when leadership moves. Partitions already
/// in that state (a fenced broker now shutting down) are left alone.
pub(super) fn take_out_of_service(image: &MetadataImage, broker_id: i32) -> Vec<MetadataRecord> {
    let mut records = Vec::new();
    let candidates = Candidates::new(image).leaving(broker_id);
    for topic in image.topics.values() {
        for (index, p) in topic.partitions.iter().enumerate() {
            if p.leader != broker_id && !p.isr.contains(&broker_id) {
                continue;
            }
            let remaining: Vec<i32> = p.isr.iter().copied().filter(|id| *id != broker_id).collect();
            let isr = if remaining.is_empty() { p.isr.to_vec() } else { remaining };
            let Some(elected) = election::elect_for(topic, p, &isr, Kind::IsrChange, &candidates) else {
                continue;
            };
            if elected.leader == p.leader && elected.isr[..] == p.isr[..] {
                continue;
            }
            records.push(changed_by(topic.topic_id, index, p, elected, ElectionTrigger::BrokerLeft));
        }
    }
    records
}

/// Moves leadership back to each partition's preferred replica (the first), wherever that
/// replica may lead, is in sync and is not already leading (Kafka's preferred leader election).
pub fn elect_preferred_leaders(image: &MetadataImage) -> Vec<MetadataRecord> {
    let candidates = Candidates::new(image);
    let mut records = Vec::new();
    for topic in image.topics.values() {
        for (index, p) in topic.partitions.iter().enumerate() {
            if let Some(elected) = election::elect_for(topic, p, &p.isr, Kind::Preferred, &candidates) {
                records.push(changed_by(topic.topic_id, index, p, elected, ElectionTrigger::PreferredBalancing));
            }
        }
    }
    records
}

/// Whether [`elect_preferred_leaders`] would change anything: the controller checks this
/// before proposing, so a balanced cluster does not fill the metadata log with no-ops.
pub fn preferred_leader_imbalance(image: &MetadataImage) -> bool {
    let candidates = Candidates::new(image);
    image.topics.values().any(|topic| {
        topic
            .partitions
            .iter()
            .any(|p| election::elect_for(topic, p, &p.isr, Kind::Preferred, &candidates).is_some())
    })
}

/// Partitions left without a leader get one back when a replica returns and may lead: an
/// in-sync one, or, if the topic allows unclean leader election, any (leading with itself as
/// the whole ISR).
pub(super) fn elect_leaders_for_returning(image: &MetadataImage, broker_id: i32) -> Vec<MetadataRecord> {
    let candidates = Candidates::new(image).arriving(broker_id);
    let mut records = Vec::new();
    for topic in image.topics.values() {
        for (index, p) in topic.partitions.iter().enumerate() {
            if p.leader != NO_LEADER || !p.replicas.contains(&broker_id) {
                continue;
            }
            let Some(elected) = election::elect_for(topic, p, &p.isr, Kind::IsrChange, &candidates) else {
                continue;
            };
            if elected.leader != NO_LEADER {
                records.push(changed_by(topic.topic_id, index, p, elected, ElectionTrigger::BrokerReturned));
            }
        }
    }
    records
}

/// The change a leader election makes, with why that leader was chosen in the record.
pub(super) fn changed_by(
    topic_id: Uuid,
    index: usize,
    p: &PartitionRegistration,
    elected: Elected,
    trigger: ElectionTrigger,
) -> MetadataRecord {
    let election = LeaderElection {
        reason: elected.reason,
        trigger,
    };
    if elected.leader != p.leader {
        tracing::debug!(%topic_id, partition = index, from = p.leader, to = elected.leader, %election, "leader elected");
    }
    partition_change(topic_id, index, &p.replicas, elected.isr, elected.leader, p, election)
}

pub(super) fn partition_change(
    topic_id: Uuid,
    index: usize,
    replicas: &[i32],
    isr: Vec<i32>,
    leader: i32,
    previous: &PartitionRegistration,
    election: LeaderElection,
) -> MetadataRecord {
    MetadataRecord::Partition {
        topic_id,
        partition: index as i32,
        replicas: replicas.to_vec(),
        isr,
        leader,
        // Kafka bumps the leader epoch only when leadership moves; every change bumps the
        // partition epoch (the compare-and-set version of the registration).
        leader_epoch: previous.leader_epoch + i32::from(leader != previous.leader),
        partition_epoch: previous.partition_epoch + 1,
        election: Some(election),
    }
}

/// The records that finish a reassignment whose target is wholly in `isr` (in replica order):
/// the target becomes the replica set, and leadership moves to an in-sync target replica if
/// the leader is leaving. Used when a reassignment starts already in sync, and by AlterPartition when the last added
/// replica catches up.
pub(super) fn finish_reassignment(
    image: &MetadataImage,
    topic_id: Uuid,
    partition: i32,
    p: &PartitionRegistration,
    target: &[i32],
    isr: Vec<i32>,
) -> Result<Vec<MetadataRecord>, ApiError> {
    let isr = in_order(target, &isr);
    let elected = election::elect_on_isr_change(target, p.leader, &isr, false, &Candidates::new(image));
    let mut records = Vec::new();
    if target != &p.replicas[..] || elected.isr[..] != p.isr[..] || elected.leader != p.leader {
        let election = LeaderElection {
            reason: elected.reason,
            trigger: ElectionTrigger::ReassignmentFinished,
        };
        records.push(partition_change(topic_id, partition as usize, target, elected.isr, elected.leader, p, election));
    }
    if p.is_reassigning() {
        records.push(MetadataRecord::PartitionReassignment {
            topic_id,
            partition,
            adding: Vec::new(),
            removing: Vec::new(),
        });
    }
    Ok(records)
}

/// The members of `set` in the order of `order`.
pub(super) fn in_order(order: &[i32], set: &[i32]) -> Vec<i32> {
    order.iter().copied().filter(|id| set.contains(id)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::test_support::*;
    use crate::controller::{create_topic, decide, fence_broker};
    use crate::metadata::records::{ConfigResource, MetadataCommand};

    #[test]
    fn alter_partition_shrinks_and_expands_the_isr_as_a_compare_and_set() {
        let mut image = one_partition_on(3);
        let outcome = decide_and_apply(&mut image, alter_isr(1, 0, 0, &[3, 1]));
        let expected = Outcome::PartitionChanged {
            leader_epoch: 0,
            partition_epoch: 1,
            isr: vec![1, 3],
        };
        assert_eq!(outcome, expected);
        let p = &image.topic("t").unwrap().partitions[0];
        assert_eq!(
            (p.leader, p.leader_epoch, p.partition_epoch, &p.isr),
            (1, 0, 1, &vec![1, 3].into())
        );
        // A request built on the old registration loses the race.
        let err = decide(&image, &alter_isr(1, 0, 0, &[1, 2, 3])).unwrap_err();
        assert_eq!(err.error, ResponseError::InvalidUpdateVersion);
        decide_and_apply(&mut image, alter_isr(1, 0, 1, &[2, 1, 3]));
        let p = &image.topic("t").unwrap().partitions[0];
        assert_eq!((p.partition_epoch, &p.isr), (2, &p.replicas));
        // The same ISR again writes nothing and reports the registration as it is.
        let (records, outcome) = decide(&image, &alter_isr(1, 0, 2, &[1, 2, 3])).unwrap();
        assert!(records.is_empty());
        assert!(matches!(outcome, Outcome::PartitionChanged { partition_epoch: 2, .. }));
    }

    /// Brokers 1..=3 and topic "t" (id 1) with three partitions: 0 and 1 led by 1, 2 by 2.
    fn three_partitions() -> MetadataImage {
        let mut image = image_with_brokers(&[1, 2, 3]);
        let mut topic = new_topic("t", 3, 3);
        topic.assignments = Some(vec![vec![1, 2, 3], vec![1, 2, 3], vec![2, 1, 3]]);
        let records = create_topic(&image, &topic, Uuid::from_u128(1)).unwrap();
        apply_all(&mut image, &records);
        image
    }

    fn isr_change(topic: u128, partition: i32, partition_epoch: i32, new_isr: &[i32]) -> IsrChangeRequest {
        IsrChangeRequest {
            topic_id: Uuid::from_u128(topic),
            partition,
            leader_epoch: 0,
            partition_epoch,
            new_isr: new_isr.to_vec(),
        }
    }

    #[test]
    fn alter_partitions_decides_each_change_on_its_own_and_refuses_a_partition_named_twice() {
        let mut image = three_partitions();
        let changes = vec![
            isr_change(1, 0, 0, &[1, 2]),
            isr_change(1, 1, 5, &[1, 2]),
            isr_change(1, 2, 0, &[1, 2]),
            isr_change(1, 0, 0, &[1, 3]),
            isr_change(7, 0, 0, &[1]),
            isr_change(1, 9, 0, &[1]),
            isr_change(1, 1, 0, &[1, 2, 3]),
        ];
        let command = MetadataCommand::AlterPartitions { leader_id: 1, changes };
        let (records, outcome) = decide(&image, &command).unwrap();
        let Outcome::PartitionsChanged(results) = outcome else {
            panic!("not an AlterPartitions outcome: {outcome:?}")
        };
        let errors: Vec<Option<ResponseError>> = results.iter().map(|r| r.as_ref().err().map(|e| e.error)).collect();
        assert_eq!(
            errors,
            vec![
                None,
                Some(ResponseError::InvalidUpdateVersion),
                Some(ResponseError::NotLeaderOrFollower),
                Some(ResponseError::InvalidRequest),
                Some(ResponseError::UnknownTopicId),
                Some(ResponseError::UnknownTopicOrPartition),
                Some(ResponseError::InvalidRequest),
            ]
        );
        let accepted = PartitionState {
            leader_epoch: 0,
            partition_epoch: 1,
            isr: vec![1, 2],
        };
        assert_eq!(results[0], Ok(accepted));
        assert_eq!(records.len(), 1, "{records:?}");
        apply_all(&mut image, &records);
        let partitions = &image.topic("t").unwrap().partitions;
        let isrs: Vec<(i32, Vec<i32>)> = partitions.iter().map(|p| (p.partition_epoch, p.isr.to_vec())).collect();
        assert_eq!(isrs, vec![(1, vec![1, 2]), (0, vec![1, 2, 3]), (0, vec![2, 1, 3])]);

        // The next request built on the old registration of 0 loses the race; 1 goes through,
        // and an unchanged ISR is accepted without writing anything.
        let changes = vec![isr_change(1, 0, 0, &[1, 3]), isr_change(1, 1, 0, &[1])];
        let command = MetadataCommand::AlterPartitions { leader_id: 1, changes };
        let (records, outcome) = decide(&image, &command).unwrap();
        let Outcome::PartitionsChanged(results) = outcome else { panic!("{outcome:?}") };
        assert_eq!(results[0].as_ref().unwrap_err().error, ResponseError::InvalidUpdateVersion);
        assert_eq!(results[1].as_ref().map(|s| s.isr.clone()), Ok(vec![1]));
        apply_all(&mut image, &records);
        assert_eq!(image.topic("t").unwrap().partitions[1].isr[..], [1]);
        let command = MetadataCommand::AlterPartitions {
            leader_id: 1,
            changes: vec![isr_change(1, 1, 1, &[1])],
        };
        let unchanged = PartitionState {
            leader_epoch: 0,
            partition_epoch: 1,
            isr: vec![1],
        };
        let (records, outcome) = decide(&image, &command).unwrap();
        assert_eq!((records, outcome), (vec![], Outcome::PartitionsChanged(vec![Ok(unchanged)])));
    }

    #[test]
    fn alter_partition_refuses_unknown_partitions_deposed_leaders_and_stale_epochs() {
        let mut image = one_partition_on(3);
        let mut unknown_topic = alter_isr(1, 0, 0, &[1]);
        if let MetadataCommand::AlterPartition { topic_id, .. } = &mut unknown_topic {
            *topic_id = Uuid::from_u128(99);
        }
        let mut unknown_partition = alter_isr(1, 0, 0, &[1]);
        if let MetadataCommand::AlterPartition { partition, .. } = &mut unknown_partition {
            *partition = 1;
        }
        let cases = [
            (unknown_topic, ResponseError::UnknownTopicId),
            (unknown_partition, ResponseError::UnknownTopicOrPartition),
            (alter_isr(2, 0, 0, &[2]), ResponseError::NotLeaderOrFollower),
            (alter_isr(1, 1, 0, &[1]), ResponseError::UnknownLeaderEpoch),
            (alter_isr(1, 0, 1, &[1]), ResponseError::InvalidUpdateVersion),
        ];
        for (command, error) in cases {
            assert_eq!(decide(&image, &command).unwrap_err().error, error, "{command:?}");
        }
        // Broker 1 is fenced: broker 2 leads at epoch 1 and 1's last request is refused.
        let records = fence_broker(&image, 1);
        apply_all(&mut image, &records);
        let err = decide(&image, &alter_isr(1, 0, 0, &[1, 2])).unwrap_err();
        assert_eq!(err.error, ResponseError::NotLeaderOrFollower);
        let err = decide(&image, &alter_isr(2, 0, 1, &[2, 3])).unwrap_err();
        assert_eq!(err.error, ResponseError::FencedLeaderEpoch);
        assert!(decide(&image, &alter_isr(2, 1, 1, &[2])).is_ok());
    }

    #[test]
    fn alter_partition_refuses_malformed_isrs_and_ineligible_replicas() {
        let mut image = one_partition_on(4);
        decide_and_apply(&mut image, alter_isr(1, 0, 0, &[1]));
        for isr in [&[][..], &[2, 3], &[1, 1], &[1, 9]] {
            let err = decide(&image, &alter_isr(1, 0, 1, isr)).unwrap_err();
            assert_eq!(err.error, ResponseError::InvalidRequest, "ISR {isr:?}");
        }
        let records = fence_broker(&image, 2);
        apply_all(&mut image, &records);
        let shutdown = shutdown_of(3);
        decide_and_apply(&mut image, shutdown);
        for isr in [[1, 2], [1, 3]] {
            let err = decide(&image, &alter_isr(1, 0, 1, &isr)).unwrap_err();
            assert_eq!(err.error, ResponseError::IneligibleReplica, "ISR {isr:?}");
        }
        decide_and_apply(&mut image, alter_isr(1, 0, 1, &[1, 4]));
        assert_eq!(image.topic("t").unwrap().partitions[0].isr[..], [1, 4]);
    }

    #[test]
    fn preferred_leaders_lead_again_once_live_and_in_sync() {
        let mut image = one_partition_on(3);
        assert!(!preferred_leader_imbalance(&image));
        assert!(elect_preferred_leaders(&image).is_empty());
        let records = fence_broker(&image, 1);
        apply_all(&mut image, &records);
        // Fenced and then back, but out of the ISR: not yet.
        unfence(&mut image, 1);
        assert_eq!(image.topic("t").unwrap().partitions[0].leader, 2);
        assert!(!preferred_leader_imbalance(&image));
        decide_and_apply(&mut image, alter_isr(2, 1, 1, &[1, 2, 3]));
        assert!(preferred_leader_imbalance(&image));
        decide_and_apply(&mut image, MetadataCommand::ElectPreferredLeaders);
        let p = &image.topic("t").unwrap().partitions[0];
        assert_eq!((p.leader, p.leader_epoch, p.partition_epoch), (1, 2, 3));
        assert!(!preferred_leader_imbalance(&image));
    }

    /// Every record a decision makes says why its leader leads, and the image keeps it.
    #[test]
    fn each_partition_change_records_why_its_leader_leads() {
        let election = |image: &MetadataImage| {
            let e = image.topic("t").unwrap().partitions[0].election.expect("an election is recorded");
            (e.reason, e.trigger)
        };
        let mut image = one_partition_on(3);
        assert_eq!(election(&image), (Reason::Preferred, ElectionTrigger::Created));
        let records = fence_broker(&image, 1);
        apply_all(&mut image, &records);
        assert_eq!(election(&image), (Reason::InSync, ElectionTrigger::BrokerLeft));
        unfence(&mut image, 1);
        decide_and_apply(&mut image, alter_isr(2, 1, 1, &[1, 2, 3]));
        assert_eq!(election(&image), (Reason::Unchanged, ElectionTrigger::IsrChange));
        decide_and_apply(&mut image, MetadataCommand::ElectPreferredLeaders);
        assert_eq!(election(&image), (Reason::Preferred, ElectionTrigger::PreferredBalancing));

        let mut image = one_partition_on(2);
        set_topic_config(&mut image, "unclean.leader.election.enable", "true");
        decide_and_apply(&mut image, alter_isr(1, 0, 0, &[1]));
        let records = fence_broker(&image, 1);
        apply_all(&mut image, &records);
        assert_eq!(election(&image), (Reason::Unclean, ElectionTrigger::BrokerLeft));
    }

    #[test]
    fn a_shutting_down_preferred_replica_is_not_elected() {
        let mut image = one_partition_on(2);
        let records = fence_broker(&image, 1);
        apply_all(&mut image, &records);
        // Still in the ISR (re-added while it was briefly back), but shutting down.
        unfence(&mut image, 1);
        decide_and_apply(&mut image, alter_isr(2, 1, 1, &[1, 2]));
        let shutdown = shutdown_of(1);
        let (records, _) = decide(&image, &shutdown).unwrap();
        let mut after = image.clone();
        apply_all(&mut after, &records[..1]);
        assert!(!preferred_leader_imbalance(&after));
        assert!(elect_preferred_leaders(&after).is_empty());
    }

    fn set_topic_config(image: &mut MetadataImage, name: &str, value: &str) {
        image.apply(&MetadataRecord::Config {
            resource: ConfigResource::Topic("t".into()),
            name: name.into(),
            value: Some(value.into()),
        });
    }

    #[test]
    fn unclean_election_lets_a_live_out_of_sync_replica_lead_when_the_topic_allows_it() {
        for unclean in [false, true] {
            let mut image = one_partition_on(3);
            set_topic_config(&mut image, "unclean.leader.election.enable", &unclean.to_string());
            decide_and_apply(&mut image, alter_isr(1, 0, 0, &[1]));
            let records = fence_broker(&image, 1);
            apply_all(&mut image, &records);
            let p = &image.topic("t").unwrap().partitions[0];
            if unclean {
                assert_eq!((p.leader, p.leader_epoch, &p.isr[..]), (2, 1, &[2][..]));
            } else {
                assert_eq!((p.leader, p.leader_epoch, &p.isr[..]), (-1, 1, &[1][..]));
            }
        }
    }

    #[test]
    fn an_offline_partition_waits_for_its_last_in_sync_replica_unless_unclean_election_is_enabled() {
        for unclean in [false, true] {
            let mut image = one_partition_on(2);
            set_topic_config(&mut image, "unclean.leader.election.enable", &unclean.to_string());
            decide_and_apply(&mut image, alter_isr(1, 0, 0, &[1]));
            for broker_id in [2, 1] {
                let records = fence_broker(&image, broker_id);
                apply_all(&mut image, &records);
            }
            assert_eq!(image.topic("t").unwrap().partitions[0].leader, -1);
            unfence(&mut image, 2);
            let p = &image.topic("t").unwrap().partitions[0];
            if unclean {
                assert_eq!((p.leader, &p.isr[..]), (2, &[2][..]));
            } else {
                assert_eq!((p.leader, &p.isr[..]), (-1, &[1][..]));
                register(&mut image, 1, 2);
                let p = &image.topic("t").unwrap().partitions[0];
                assert_eq!((p.leader, &p.isr[..]), (1, &[1][..]));
            }
        }
    }

    #[test]
    fn unclean_election_never_picks_a_shutting_down_replica() {
        let mut image = one_partition_on(3);
        set_topic_config(&mut image, "unclean.leader.election.enable", "true");
        decide_and_apply(&mut image, alter_isr(1, 0, 0, &[1]));
        let shutdown = shutdown_of(2);
        decide_and_apply(&mut image, shutdown);
        let records = fence_broker(&image, 1);
        apply_all(&mut image, &records);
        let p = &image.topic("t").unwrap().partitions[0];
        assert_eq!((p.leader, &p.isr[..]), (3, &[3][..]));
    }
}

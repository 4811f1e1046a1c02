//! Kafka's ElectLeaders (KIP-460), decided as `ReplicationControlManager.electLeaders` does:
//! per partition, a preferred election moves leadership to the first replica of the
//! assignment when it is live and in sync; an unclean election gives a partition without a
//! live leader one, from the ISR if a member is live, else any live replica (which then is the
//! whole ISR, accepting that records only the old ISR had are lost).
//!
//! Each partition is answered on its own: one partition that cannot be elected does not stop
//! the others. The records reuse `partition_change`, so every election bumps the leader and
//! partition epochs and keeps leader ∈ ISR ⊆ replicas.

use std::collections::HashSet;

use kafka_protocol::error::ResponseError;
use uuid::Uuid;

use super::election::{self, Candidates, Elected, Kind};
use super::partition_change::partition_change;
use crate::metadata::image::{MetadataImage, PartitionRegistration, TopicImage, NO_LEADER};
use crate::metadata::outcome::{ApiError, Outcome, TopicElection};
use crate::metadata::records::{ElectionTrigger, ElectionType, LeaderElection, MetadataRecord};

/// Decides an ElectLeaders request: `partitions` by topic name, or `None` for every partition
/// of every topic (then, as Kafka does, partitions that already have the leader asked for are
/// left out of the answer rather than reported as ELECTION_NOT_NEEDED).
pub fn elect_leaders(
    image: &MetadataImage,
    election: ElectionType,
    partitions: Option<&[(String, Vec<i32>)]>,
) -> (Vec<MetadataRecord>, Outcome) {
    let mut election = Election {
        image,
        election,
        records: Vec::new(),
        elected: HashSet::new(),
    };
    let results = match partitions {
        None => image
            .topics
            .values()
            .map(|topic| {
                let partitions = (0..topic.partitions.len() as i32)
                    .map(|index| (index, election.elect(topic, index).err()))
                    .filter(|(_, error)| !matches!(error, Some(e) if e.error == ResponseError::ElectionNotNeeded))
                    .collect();
                TopicElection {
                    topic: topic.name.clone(),
                    partitions,
                }
            })
            .collect(),
        Some(requested) => requested
            .iter()
            .map(|(name, indexes)| {
                let partitions = indexes
                    .iter()
                    .map(|&index| {
                        let result = match image.topic(name) {
                            Some(topic) => election.elect(topic, index),
                            None => Err(unknown_partition(name, index)),
                        };
                        (index, result.err())
                    })
                    .collect();
                TopicElection {
                    topic: name.clone(),
                    partitions,
                }
            })
            .collect(),
    };
    (election.records, Outcome::LeadersElected(results))
}

/// One request's elections in progress: the records so far, and the partitions they elected
/// (a partition named twice is elected once; the second time it needs no election).
struct Election<'a> {
    image: &'a MetadataImage,
    election: ElectionType,
    records: Vec<MetadataRecord>,
    elected: HashSet<(Uuid, i32)>,
}

impl Election<'_> {
    fn elect(&mut self, topic: &TopicImage, index: i32) -> Result<(), ApiError> {
        let p = usize::try_from(index)
            .ok()
            .and_then(|i| topic.partitions.get(i))
            .ok_or_else(|| unknown_partition(&topic.name, index))?;
        let name = format!("{}-{index}", topic.name);
        if self.elected.contains(&(topic.topic_id, index)) {
            let why = format!("{name} is listed twice; its leader was elected once");
            return Err(ApiError::new(ResponseError::ElectionNotNeeded, why));
        }
        let elected = match self.election {
            ElectionType::Preferred => preferred_leader(self.image, p, &name)?,
            ElectionType::Unclean => unclean_leader(self.image, p, &name)?,
        };
        let election = LeaderElection {
            reason: elected.reason,
            trigger: ElectionTrigger::ElectLeaders,
        };
        self.records.push(partition_change(
            topic.topic_id,
            index as usize,
            &p.replicas,
            elected.isr,
            elected.leader,
            p,
            election,
        ));
        self.elected.insert((topic.topic_id, index));
        Ok(())
    }
}

fn unknown_partition(topic: &str, index: i32) -> ApiError {
    ApiError::new(
        ResponseError::UnknownTopicOrPartition,
        format!("{topic}-{index} does not exist; list the topic's partitions with kafka-topics --describe"),
    )
}

/// The preferred replica as leader, with the ISR unchanged.
fn preferred_leader(image: &MetadataImage, p: &PartitionRegistration, name: &str) -> Result<Elected, ApiError> {
    let Some(&preferred) = p.replicas.first() else {
        return Err(ApiError::new(
            ResponseError::PreferredLeaderNotAvailable,
            format!("{name} has no replicas"),
        ));
    };
    if preferred == p.leader {
        let why = format!("{name} is already led by its preferred replica {preferred}");
        return Err(ApiError::new(ResponseError::ElectionNotNeeded, why));
    }
    let candidates = Candidates::new(image);
    match election::elect(&p.replicas, p.leader, &p.isr, Kind::Preferred, false, &candidates) {
        Some(elected) => Ok(elected),
        None => {
            let state = if !candidates.is_live(preferred) {
                "alive"
            } else if !p.isr.contains(&preferred) {
                "in sync"
            } else {
                "registered as its current process"
            };
            let why = format!(
                "the preferred replica {preferred} of {name} is not {state}; retry once it is back and has caught up"
            );
            Err(ApiError::new(ResponseError::PreferredLeaderNotAvailable, why))
        }
    }
}

/// A live ISR member as leader (ISR unchanged), else any replica that may lead as the whole ISR.
fn unclean_leader(image: &MetadataImage, p: &PartitionRegistration, name: &str) -> Result<Elected, ApiError> {
    let candidates = Candidates::new(image);
    if p.leader != NO_LEADER && candidates.may_lead(p.leader) {
        let why = format!("{name} has a live leader, {}", p.leader);
        return Err(ApiError::new(ResponseError::ElectionNotNeeded, why));
    }
    match election::elect(&p.replicas, p.leader, &p.isr, Kind::Unclean, true, &candidates) {
        Some(elected) if elected.leader != NO_LEADER => Ok(elected),
        _ => {
            let why = format!(
                "no replica of {name} ({:?}) is alive; start one of those brokers and retry",
                p.replicas
            );
            Err(ApiError::new(ResponseError::EligibleLeadersNotAvailable, why))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::test_support::*;
    use crate::controller::{decide, fence_broker};
    use crate::metadata::records::MetadataCommand;

    fn elect(election: ElectionType, partitions: &[(&str, &[i32])]) -> MetadataCommand {
        MetadataCommand::ElectLeaders {
            election,
            partitions: Some(partitions.iter().map(|(t, p)| (t.to_string(), p.to_vec())).collect()),
        }
    }

    /// The error of each partition in the outcome, in order (`None`: elected).
    fn errors(outcome: &Outcome) -> Vec<(String, i32, Option<ResponseError>)> {
        let Outcome::LeadersElected(topics) = outcome else {
            panic!("not an election outcome: {outcome:?}");
        };
        topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|(index, error)| (t.topic.clone(), *index, error.as_ref().map(|e| e.error)))
            })
            .collect()
    }

    /// Elects t-0, which must succeed.
    fn elect_t0(image: &mut MetadataImage, election: ElectionType) {
        let outcome = decide_and_apply(image, elect(election, &[("t", &[0])]));
        assert_eq!(errors(&outcome), vec![("t".to_string(), 0, None)]);
    }

    /// Decides an election of t-0 that must write nothing, and returns why.
    fn refusal(image: &MetadataImage, election: ElectionType) -> ResponseError {
        let (records, outcome) = decide(image, &elect(election, &[("t", &[0])])).unwrap();
        assert!(records.is_empty(), "{records:?}");
        match errors(&outcome).as_slice() {
            [(_, 0, Some(error))] => *error,
            other => panic!("expected one refused partition, got {other:?}"),
        }
    }

    fn registration(image: &MetadataImage) -> (i32, i32, Vec<i32>) {
        let p = &image.topic("t").unwrap().partitions[0];
        (p.leader, p.leader_epoch, p.isr.to_vec())
    }

    fn fence(image: &mut MetadataImage, broker_id: i32) {
        let records = fence_broker(image, broker_id);
        apply_all(image, &records);
    }

    /// Broker 1, the preferred replica, was fenced and is back in the ISR: broker 2 leads.
    fn led_off_preferred() -> MetadataImage {
        let mut image = one_partition_on(3);
        fence(&mut image, 1);
        unfence(&mut image, 1);
        decide_and_apply(&mut image, alter_isr(2, 1, 1, &[1, 2, 3]));
        assert_eq!(registration(&image), (2, 1, vec![1, 2, 3]));
        image
    }

    /// Topic "t" whose partition 0 lost its leader: only `isr` remains of the ISR.
    fn leaderless(isr: &[i32]) -> MetadataImage {
        let mut image = one_partition_on(3);
        let p = image.topic("t").unwrap().partitions[0].clone();
        image.apply(&MetadataRecord::Partition {
            topic_id: Uuid::from_u128(1),
            partition: 0,
            replicas: p.replicas.to_vec(),
            isr: isr.to_vec(),
            leader: -1,
            leader_epoch: p.leader_epoch + 1,
            partition_epoch: p.partition_epoch + 1,
            election: None,
        });
        image
    }

    #[test]
    fn preferred_election_moves_leadership_to_the_live_in_sync_first_replica() {
        let mut image = led_off_preferred();
        elect_t0(&mut image, ElectionType::Preferred);
        assert_eq!(registration(&image), (1, 2, vec![1, 2, 3]));
        // Once it leads, there is nothing to do and nothing is written.
        assert_eq!(
            refusal(&image, ElectionType::Preferred),
            ResponseError::ElectionNotNeeded
        );
    }

    #[test]
    fn preferred_election_refuses_a_preferred_replica_out_of_sync_or_not_alive() {
        let mut image = one_partition_on(3);
        fence(&mut image, 1);
        let not_available = ResponseError::PreferredLeaderNotAvailable;
        assert_eq!(refusal(&image, ElectionType::Preferred), not_available, "fenced");
        unfence(&mut image, 1);
        let why = "alive but out of the ISR";
        assert_eq!(refusal(&image, ElectionType::Preferred), not_available, "{why}");
    }

    #[test]
    fn unclean_election_is_not_needed_while_a_leader_is_live() {
        let image = one_partition_on(3);
        assert_eq!(refusal(&image, ElectionType::Unclean), ResponseError::ElectionNotNeeded);
    }

    #[test]
    fn unclean_election_prefers_a_live_isr_member_and_keeps_the_isr() {
        // Replicas 1 and 2 are live but out of sync; 3 is in sync and wins.
        let mut image = leaderless(&[3]);
        elect_t0(&mut image, ElectionType::Unclean);
        assert_eq!(registration(&image), (3, 2, vec![3]));
    }

    #[test]
    fn unclean_election_elects_a_live_out_of_sync_replica_when_the_whole_isr_is_down() {
        let mut image = one_partition_on(3);
        decide_and_apply(&mut image, alter_isr(1, 0, 0, &[1]));
        fence(&mut image, 1);
        assert_eq!(registration(&image), (-1, 1, vec![1]));
        elect_t0(&mut image, ElectionType::Unclean);
        assert_eq!(registration(&image), (2, 2, vec![2]));
    }

    #[test]
    fn unclean_election_without_a_live_replica_reports_no_eligible_leader() {
        let mut image = leaderless(&[1]);
        for id in 1..=3 {
            fence(&mut image, id);
        }
        let no_eligible = ResponseError::EligibleLeadersNotAvailable;
        assert_eq!(refusal(&image, ElectionType::Unclean), no_eligible);
    }

    #[test]
    fn unknown_topics_and_partitions_are_answered_per_partition() {
        let mut image = led_off_preferred();
        let command = elect(ElectionType::Preferred, &[("nope", &[0]), ("t", &[-1, 1, 0, 0])]);
        let outcome = decide_and_apply(&mut image, command);
        let unknown = Some(ResponseError::UnknownTopicOrPartition);
        let expected = vec![
            ("nope".to_string(), 0, unknown),
            ("t".to_string(), -1, unknown),
            ("t".to_string(), 1, unknown),
            ("t".to_string(), 0, None),
            // Named twice: elected once, and the second mention needs no election.
            ("t".to_string(), 0, Some(ResponseError::ElectionNotNeeded)),
        ];
        assert_eq!(errors(&outcome), expected);
        assert_eq!(registration(&image), (1, 2, vec![1, 2, 3]));
    }

    #[test]
    fn electing_every_partition_leaves_out_those_that_need_no_election() {
        let mut image = led_off_preferred();
        let create = MetadataCommand::CreateTopic {
            topic: new_topic("balanced", 2, 3),
            topic_id: Uuid::from_u128(2),
        };
        decide_and_apply(&mut image, create);
        let all = MetadataCommand::ElectLeaders {
            election: ElectionType::Preferred,
            partitions: None,
        };
        let outcome = decide_and_apply(&mut image, all.clone());
        assert_eq!(errors(&outcome), vec![("t".to_string(), 0, None)]);
        let Outcome::LeadersElected(topics) = &outcome else {
            unreachable!()
        };
        let names: Vec<&str> = topics.iter().map(|t| t.topic.as_str()).collect();
        assert_eq!(
            names,
            ["balanced", "t"],
            "every topic is listed, even with nothing to report"
        );
        let (records, outcome) = decide(&image, &all).unwrap();
        assert!(records.is_empty());
        assert!(errors(&outcome).is_empty());
    }
}

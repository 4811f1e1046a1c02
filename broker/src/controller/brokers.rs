//! Broker decisions (Kafka's `ClusterControlManager` and `BrokerHeartbeatManager`):
//! registration, fencing and unfencing, controlled shutdown, and which brokers the active
//! controller should fence given how long ago it last heard from each.
//!
//! Each start of a broker is a new incarnation with a new broker epoch. As in Kafka, a
//! registration overlapping the live session of an earlier incarnation is refused
//! (DUPLICATE_BROKER_REGISTRATION) until that session ends: the first refusal records the
//! pending incarnation, and the controller fences the earlier one a session timeout later,
//! which moves its leadership away at a bumped leader epoch. Only then does the new one
//! register, and it comes back as a follower of every partition that has another leader.
//! The controller hears from quorum members, not incarnations, so contact never proves an
//! incarnation alive: the controller only fences by silence, and a fenced broker asks to be
//! unfenced itself, naming its incarnation (Kafka's heartbeat asking to leave the fenced state).

use std::collections::BTreeMap;

use kafka_protocol::error::ResponseError;
use uuid::Uuid;

use super::partition_change::{elect_leaders_for_returning, take_out_of_service};
use crate::metadata::image::MetadataImage;
use crate::metadata::outcome::{ApiError, Outcome};
use crate::metadata::records::{Endpoint, MetadataCommand, MetadataRecord};

/// A broker's registration, made on every start as a new incarnation: it is live again (even
/// after a controlled shutdown), and partitions left offline waiting for it get it as leader.
/// With `wait_for_previous_session` (every registration since metadata version 4) it is
/// refused while an earlier incarnation is live; a repeat of the registered incarnation's own
/// registration while it is live changes nothing.
pub fn register_broker(
    image: &MetadataImage,
    broker_id: i32,
    incarnation_id: Uuid,
    endpoints: &[Endpoint],
    rack: Option<&str>,
    replica_capacity: Option<u32>,
    wait_for_previous_session: bool,
) -> Result<(Vec<MetadataRecord>, Outcome), ApiError> {
    let registered = image.brokers.get(&broker_id).filter(|b| b.is_live());
    if let (true, Some(previous)) = (wait_for_previous_session, registered) {
        if previous.incarnation_id == incarnation_id {
            return Ok((Vec::new(), Outcome::Done));
        }
        let refused = ApiError::new(
            ResponseError::DuplicateBrokerRegistration,
            format!(
                "broker {broker_id} is still registered by its previous process (incarnation {}), whose session has not expired; the controller fences it broker.session.timeout.ms after this process first asked, and then accepts this registration",
                previous.incarnation_id
            ),
        );
        if previous.pending_incarnation == Some(incarnation_id) {
            return Err(refused);
        }
        let pending = MetadataRecord::RegistrationPending {
            broker_id,
            incarnation_id,
        };
        return Ok((vec![pending], Outcome::Refused(refused)));
    }
    let mut records = vec![MetadataRecord::RegisterBroker {
        broker_id,
        incarnation_id,
        endpoints: endpoints.to_vec(),
        rack: rack.map(String::from),
        replica_capacity,
    }];
    records.extend(elect_leaders_for_returning(image, broker_id));
    Ok((records, Outcome::Done))
}

/// Fences a broker the controller stopped hearing from: it leaves every ISR it is in (unless it
/// is the last member) and the partitions it led get a new leader or go offline.
pub fn fence_broker(image: &MetadataImage, broker_id: i32) -> Vec<MetadataRecord> {
    if !image.is_live(broker_id) {
        return Vec::new();
    }
    let mut records = vec![MetadataRecord::FenceBroker { broker_id }];
    records.extend(take_out_of_service(image, broker_id));
    records
}

/// Unfences a fenced broker that asks for it, bringing back partitions left offline waiting for
/// it. Only the registered incarnation may ask (`None`: entries from before metadata version 4,
/// decided as they were); a broker in controlled shutdown comes back only by registering again,
/// and one whose successor waits to register stays fenced.
pub fn unfence_broker(image: &MetadataImage, broker_id: i32, incarnation_id: Option<Uuid>) -> Vec<MetadataRecord> {
    let Some(broker) = image.brokers.get(&broker_id) else {
        return Vec::new();
    };
    let stale = incarnation_id.is_some_and(|id| id != broker.incarnation_id);
    if !broker.fenced || broker.in_controlled_shutdown || broker.pending_incarnation.is_some() || stale {
        return Vec::new();
    }
    let mut records = vec![MetadataRecord::UnfenceBroker { broker_id }];
    records.extend(elect_leaders_for_returning(image, broker_id));
    records
}

/// A broker's controlled shutdown: like fencing, but the broker stays fenced until it
/// registers again. Ignored for an unknown broker, a stale incarnation (a restarted broker
/// must not be shut down by its predecessor's request) or a shutdown already under way.
pub fn controlled_shutdown(image: &MetadataImage, broker_id: i32, incarnation_id: Uuid) -> Vec<MetadataRecord> {
    let Some(broker) = image.brokers.get(&broker_id) else {
        return Vec::new();
    };
    if broker.incarnation_id != incarnation_id || broker.in_controlled_shutdown {
        return Vec::new();
    }
    let mut records = vec![MetadataRecord::BrokerShutdown { broker_id }];
    records.extend(take_out_of_service(image, broker_id));
    records
}

/// What the active controller knows of one quorum member's liveness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberContact {
    pub broker_id: i32,
    /// How long ago the controller last heard from it (`None`: not yet known; itself: `Some(0)`).
    pub last_heard_ms: Option<u64>,
    /// A voter of the metadata quorum (otherwise a learner).
    pub voter: bool,
}

/// The brokers the active controller should fence. `contacts` holds, per quorum member, how
/// long ago the leader last heard from it; `leading_for_ms` gives a new leader a full session
/// before it fences anyone it has not heard from. `pending_for_ms` holds, per broker whose
/// image registration has a pending newer incarnation, how long ago this controller first saw
/// it: the registered incarnation cannot have been heard from since, whatever the member's
/// contact says (that is the new process), so its session ends a session timeout after that.
///
/// A controller that has not heard from a majority of the voters (itself included) within a
/// session fences no one: its view is stale, not the brokers. That happens when its own
/// process was paused (every member then looks silent, though the others have elected a new
/// leader meanwhile, and a proposal made now would still be committed by that leader) or when
/// it is about to lose leadership anyway. A live leader always hears from a majority.
///
/// Nothing is unfenced here: contact is a quorum member's, not an incarnation's, so a fenced
/// broker asks to be unfenced itself ([`unfence_broker`]).
pub fn liveness_changes(
    image: &MetadataImage,
    contacts: &[MemberContact],
    pending_for_ms: &BTreeMap<i32, u64>,
    leading_for_ms: u64,
    session_timeout_ms: u64,
) -> Vec<MetadataCommand> {
    let heard_recently = |c: &MemberContact| c.last_heard_ms.is_some_and(|ms| ms < session_timeout_ms);
    let voters = contacts.iter().filter(|c| c.voter).count();
    let voters_heard = contacts.iter().filter(|c| c.voter && heard_recently(c)).count();
    if voters_heard * 2 <= voters {
        return Vec::new();
    }
    image
        .live_brokers()
        .filter(|b| {
            let contact = contacts
                .iter()
                .find(|c| c.broker_id == b.broker_id)
                .and_then(|c| c.last_heard_ms);
            let silent_ms = match (contact, b.pending_incarnation.map(|_| pending_for_ms.get(&b.broker_id))) {
                // Not yet timed by this controller: it has just seen the pending incarnation.
                (contact, Some(pending)) => contact.unwrap_or(0).max(pending.copied().unwrap_or(0)),
                (Some(ms), None) => ms,
                (None, None) => leading_for_ms,
            };
            silent_ms >= session_timeout_ms
        })
        .map(|b| MetadataCommand::FenceBroker { broker_id: b.broker_id })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::test_support::*;
    use crate::controller::{create_topic, decide, Outcome};
    use crate::metadata::image::{PartitionRegistration, NO_LEADER};

    #[test]
    fn fencing_moves_leadership_to_a_live_isr_member_or_takes_the_partition_offline() {
        let mut image = image_with_brokers(&[1, 2, 3]);
        let records = create_topic(&image, &new_topic("rf3", 3, 3), Uuid::from_u128(1)).unwrap();
        apply_all(&mut image, &records);
        let records = create_topic(&image, &new_topic("rf1", 3, 1), Uuid::from_u128(2)).unwrap();
        apply_all(&mut image, &records);
        let led_by_1: Vec<usize> = image
            .topic("rf1")
            .unwrap()
            .partitions
            .iter()
            .enumerate()
            .filter(|(_, p)| p.leader == 1)
            .map(|(i, _)| i)
            .collect();
        let records = fence_broker(&image, 1);
        apply_all(&mut image, &records);
        assert!(!image.is_live(1));
        for p in &image.topic("rf3").unwrap().partitions {
            assert_ne!(p.leader, 1);
            assert!(!p.isr.contains(&1));
        }
        for i in &led_by_1 {
            let p = &image.topic("rf1").unwrap().partitions[*i];
            assert_eq!((p.leader, p.leader_epoch), (-1, 1));
        }
        // Fencing twice changes nothing; unfencing brings the offline partitions back.
        assert!(fence_broker(&image, 1).is_empty());
        let (records, _) = decide(&image, &unfence(1, 0)).unwrap();
        apply_all(&mut image, &records);
        for i in &led_by_1 {
            let p = &image.topic("rf1").unwrap().partitions[*i];
            assert_eq!((p.leader, p.leader_epoch), (1, 2));
        }
    }

    #[test]
    fn controlled_shutdown_moves_leadership_away_and_keeps_the_broker_fenced_until_it_registers_again() {
        let mut image = image_with_brokers(&[1, 2, 3]);
        let records = create_topic(&image, &new_topic("t", 3, 3), Uuid::from_u128(1)).unwrap();
        apply_all(&mut image, &records);
        let shutdown = shutdown_of(1);
        decide_and_apply(&mut image, shutdown.clone());
        let broker = &image.brokers[&1];
        assert!(broker.fenced && broker.in_controlled_shutdown);
        for p in &image.topic("t").unwrap().partitions {
            assert_ne!(p.leader, 1);
            assert_eq!(p.isr.len(), 2);
            assert!(!p.isr.contains(&1));
        }
        // Repeating the request, hearing from the broker, or an UnfenceBroker change nothing.
        assert!(decide(&image, &shutdown).unwrap().0.is_empty());
        let contacts = voters(&[(1, Some(0)), (2, Some(0)), (3, Some(0))]);
        assert!(liveness_changes(&image, &contacts, &BTreeMap::new(), 60_000, 9_000).is_empty());
        assert!(decide(&image, &unfence(1, 0)).unwrap().0.is_empty());
        // A new incarnation registers and is live again.
        register(&mut image, 1, 2);
        assert!(image.is_live(1) && !image.brokers[&1].in_controlled_shutdown);
    }

    #[test]
    fn controlled_shutdown_of_a_stale_incarnation_or_unknown_broker_is_ignored() {
        let mut image = image_with_brokers(&[2]);
        register(&mut image, 1, 5);
        for (broker_id, incarnation) in [(1, 4), (7, 5)] {
            let command = MetadataCommand::ControlledShutdown {
                broker_id,
                incarnation_id: Uuid::from_u128(incarnation),
            };
            assert_eq!(decide(&image, &command).unwrap(), (vec![], Outcome::Done));
        }
        assert!(image.is_live(1));
    }

    #[test]
    fn controlled_shutdown_of_a_fenced_broker_only_marks_it() {
        let mut image = image_with_brokers(&[1, 2]);
        let records = create_topic(&image, &new_topic("t", 2, 2), Uuid::from_u128(1)).unwrap();
        apply_all(&mut image, &records);
        let records = fence_broker(&image, 1);
        apply_all(&mut image, &records);
        let command = shutdown_of(1);
        let (records, _) = decide(&image, &command).unwrap();
        assert_eq!(records, vec![MetadataRecord::BrokerShutdown { broker_id: 1 }]);
    }

    #[test]
    fn silent_brokers_are_fenced_after_the_session_timeout_and_unfenced_when_they_ask() {
        let mut image = image_with_brokers(&[1, 2, 3]);
        let contacts = voters(&[(1, Some(0)), (2, Some(200)), (3, Some(9_500))]);
        assert_eq!(
            liveness_changes(&image, &contacts, &BTreeMap::new(), 60_000, 9_000),
            vec![MetadataCommand::FenceBroker { broker_id: 3 }]
        );
        // A new leader that has heard nothing yet waits a full session before fencing.
        let unknown = [(1, Some(0)), (2, None), (3, None)].map(|(broker_id, last_heard_ms)| MemberContact {
            broker_id,
            last_heard_ms,
            voter: broker_id == 1,
        });
        assert!(liveness_changes(&image, &unknown, &BTreeMap::new(), 1_000, 9_000).is_empty());
        assert_eq!(
            liveness_changes(&image, &unknown, &BTreeMap::new(), 9_000, 9_000).len(),
            2
        );
        let records = fence_broker(&image, 3);
        apply_all(&mut image, &records);
        // Contact is a quorum member's, not an incarnation's: hearing from it unfences no one.
        let back = voters(&[(1, Some(0)), (2, Some(0)), (3, Some(100))]);
        assert!(liveness_changes(&image, &back, &BTreeMap::new(), 60_000, 9_000).is_empty());
        // The broker asks, naming its incarnation; a stale incarnation's request is ignored.
        assert!(decide(&image, &unfence(3, 7)).unwrap().0.is_empty());
        decide_and_apply(&mut image, unfence(3, 0));
        assert!(image.is_live(3));
    }

    /// Brokers 1..=3, topic "rf3" (3 partitions on all three) and "rf1" (3 single-replica
    /// partitions), with the leader epoch of every partition broker 1 leads.
    fn cluster_led_partly_by_1() -> (MetadataImage, Vec<(String, usize, i32)>) {
        let mut image = image_with_brokers(&[1, 2, 3]);
        for (name, rf, id) in [("rf3", 3, 1), ("rf1", 1, 2)] {
            let records = create_topic(&image, &new_topic(name, 3, rf), Uuid::from_u128(id)).unwrap();
            apply_all(&mut image, &records);
        }
        let led = led_by(&image, 1);
        assert!(led.iter().any(|(t, ..)| t == "rf3") && led.iter().any(|(t, ..)| t == "rf1"));
        (image, led)
    }

    fn led_by(image: &MetadataImage, broker_id: i32) -> Vec<(String, usize, i32)> {
        let mut led = Vec::new();
        for topic in image.topics.values() {
            for (i, p) in topic.partitions.iter().enumerate() {
                if p.leader == broker_id {
                    led.push((topic.name.clone(), i, p.leader_epoch));
                }
            }
        }
        led
    }

    fn partition<'a>(image: &'a MetadataImage, topic: &str, index: usize) -> &'a PartitionRegistration {
        &image.topic(topic).unwrap().partitions[index]
    }

    fn registration(broker_id: i32, incarnation: u128, wait_for_previous_session: bool) -> MetadataCommand {
        MetadataCommand::RegisterBroker {
            broker_id,
            incarnation_id: Uuid::from_u128(incarnation),
            endpoints: vec![],
            rack: None,
            replica_capacity: None,
            wait_for_previous_session,
        }
    }

    fn unfence(broker_id: i32, incarnation: u128) -> MetadataCommand {
        MetadataCommand::UnfenceBroker {
            broker_id,
            incarnation_id: Some(Uuid::from_u128(incarnation)),
        }
    }

    #[test]
    fn a_restarted_broker_is_refused_while_its_previous_session_is_live_and_accepted_once_fenced() {
        let (mut image, led_before) = cluster_led_partly_by_1();
        let old_epoch = image.brokers[&1].broker_epoch;
        // The restarted process (incarnation 2) asks while incarnation 0 is still live: refused,
        // and the pending incarnation is recorded once, not on every retry.
        let (records, outcome) = decide(&image, &registration(1, 2, true)).unwrap();
        let Outcome::Refused(refused) = outcome else {
            panic!("not refused: {outcome:?}")
        };
        assert_eq!(refused.error, ResponseError::DuplicateBrokerRegistration);
        assert!(
            refused.message.contains("broker.session.timeout.ms"),
            "{}",
            refused.message
        );
        assert_eq!(
            records,
            vec![MetadataRecord::RegistrationPending {
                broker_id: 1,
                incarnation_id: Uuid::from_u128(2)
            }]
        );
        apply_all(&mut image, &records);
        let retry = decide(&image, &registration(1, 2, true)).unwrap_err();
        assert_eq!(retry.error, ResponseError::DuplicateBrokerRegistration);
        let broker = &image.brokers[&1];
        assert!(broker.is_live() && broker.incarnation_id == Uuid::nil());
        assert_eq!(led_by(&image, 1), led_before, "nothing moved yet");

        // Node 1 is heard from all along (that is the new process): its old session still ends
        // a session timeout after the pending incarnation was first seen.
        let contacts = voters(&[(1, Some(0)), (2, Some(0)), (3, Some(0))]);
        let pending_for = |ms| BTreeMap::from([(1, ms)]);
        assert!(liveness_changes(&image, &contacts, &pending_for(8_999), 60_000, 9_000).is_empty());
        let fence = liveness_changes(&image, &contacts, &pending_for(9_000), 60_000, 9_000);
        assert_eq!(fence, vec![MetadataCommand::FenceBroker { broker_id: 1 }]);
        decide_and_apply(&mut image, fence[0].clone());

        // Fenced: leadership moved away at a bumped epoch, or the partition went offline.
        for (topic, index, epoch) in &led_before {
            let p = partition(&image, topic, *index);
            assert_ne!(p.leader, 1);
            assert!(p.leader_epoch > *epoch);
            assert!(p.leader == NO_LEADER || !p.isr.contains(&1), "{topic}-{index}: {p:?}");
        }
        // Nothing unfences the old incarnation: not hearing from the node, not its request.
        assert!(liveness_changes(&image, &contacts, &pending_for(0), 60_000, 9_000).is_empty());
        assert!(decide(&image, &unfence(1, 0)).unwrap().0.is_empty());
        let legacy = MetadataCommand::UnfenceBroker {
            broker_id: 1,
            incarnation_id: None,
        };
        assert!(decide(&image, &legacy).unwrap().0.is_empty());

        // The next retry is accepted: a new broker epoch, a follower wherever another broker
        // leads, and the leader only of partitions that waited for it, at a newer epoch.
        let outcome = decide_and_apply(&mut image, registration(1, 2, true));
        assert_eq!(outcome, Outcome::Done);
        let broker = &image.brokers[&1];
        assert!(broker.is_live() && broker.incarnation_id == Uuid::from_u128(2));
        assert_eq!(broker.pending_incarnation, None);
        assert!(broker.broker_epoch > old_epoch);
        for (topic, index, epoch) in led_by(&image, 1) {
            assert_eq!(topic, "rf1", "rf3 has live in-sync leaders");
            let before = led_before.iter().find(|(t, i, _)| *t == topic && *i == index).unwrap();
            assert!(
                epoch > before.2 + 1,
                "{topic}-{index}: epoch {epoch} after {}",
                before.2
            );
        }
        for p in &image.topic("rf3").unwrap().partitions {
            assert!(!p.isr.contains(&1), "back in the ISR only once caught up: {p:?}");
        }
    }

    #[test]
    fn leadership_never_moves_to_a_broker_whose_newer_process_waits_to_register() {
        // Brokers 1 and 2 both restarted at once: fencing 1 hands its partitions to 3 only.
        let (mut image, led_before) = cluster_led_partly_by_1();
        for broker_id in [1, 2] {
            let (records, _) = decide(&image, &registration(broker_id, 10, true)).unwrap();
            apply_all(&mut image, &records);
        }
        decide_and_apply(&mut image, MetadataCommand::FenceBroker { broker_id: 1 });
        for (topic, index, _) in led_before.iter().filter(|(t, ..)| t == "rf3") {
            assert_eq!(partition(&image, topic, *index).leader, 3, "{topic}-{index}");
        }
    }

    #[test]
    fn a_broker_fenced_or_shut_down_before_it_restarts_registers_at_once() {
        let (mut image, _) = cluster_led_partly_by_1();
        decide_and_apply(&mut image, MetadataCommand::FenceBroker { broker_id: 1 });
        assert_eq!(decide_and_apply(&mut image, registration(1, 2, true)), Outcome::Done);
        decide_and_apply(&mut image, shutdown_of(3));
        assert_eq!(decide_and_apply(&mut image, registration(3, 4, true)), Outcome::Done);
        assert!(image.is_live(1) && image.is_live(3));
    }

    #[test]
    fn the_registered_incarnations_repeated_registration_changes_nothing() {
        let (image, _) = cluster_led_partly_by_1();
        assert_eq!(decide(&image, &registration(1, 0, true)), Ok((vec![], Outcome::Done)));
    }

    #[test]
    fn registrations_from_before_metadata_version_4_are_decided_as_they_were() {
        let (mut image, _) = cluster_led_partly_by_1();
        let (records, outcome) = decide(&image, &registration(1, 2, false)).unwrap();
        assert_eq!(outcome, Outcome::Done);
        assert!(matches!(records[0], MetadataRecord::RegisterBroker { .. }));
        apply_all(&mut image, &records);
        assert_eq!(image.brokers[&1].incarnation_id, Uuid::from_u128(2));
    }

    #[test]
    fn a_controller_that_heard_from_no_majority_of_voters_fences_no_one() {
        // Its process was paused past the session timeout: every member looks silent, and the
        // other voters have elected a new leader meanwhile.
        let image = image_with_brokers(&[1, 2, 3]);
        let stale = voters(&[(1, Some(0)), (2, Some(9_500)), (3, Some(12_000))]);
        assert!(liveness_changes(&image, &stale, &BTreeMap::new(), 60_000, 9_000).is_empty());
        // Hearing from one other voter of three is a majority: the silent one is fenced.
        let fresh = voters(&[(1, Some(0)), (2, Some(100)), (3, Some(12_000))]);
        assert_eq!(
            liveness_changes(&image, &fresh, &BTreeMap::new(), 60_000, 9_000),
            vec![MetadataCommand::FenceBroker { broker_id: 3 }]
        );
    }

    /// Every listed member as a voter.
    fn voters(contacts: &[(i32, Option<u64>)]) -> Vec<MemberContact> {
        contacts
            .iter()
            .map(|&(broker_id, last_heard_ms)| MemberContact {
                broker_id,
                last_heard_ms,
                voter: true,
            })
            .collect()
    }
}

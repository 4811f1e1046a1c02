//! Broker decisions (Kafka's `ClusterControlManager` and `BrokerHeartbeatManager`):
//! registration, fencing and unfencing, controlled shutdown, and which brokers the active
//! controller should fence or unfence given how long ago it last heard from each.

use uuid::Uuid;

use super::partition_change::{elect_leaders_for_returning, take_out_of_service};
use crate::metadata::image::MetadataImage;
use crate::metadata::records::{Endpoint, MetadataCommand, MetadataRecord};

/// A broker's registration, made on every start as a new incarnation: it is live again (even
/// after a controlled shutdown), and partitions left offline waiting for it get it as leader.
pub fn register_broker(
    image: &MetadataImage,
    broker_id: i32,
    incarnation_id: Uuid,
    endpoints: &[Endpoint],
    rack: Option<&str>,
) -> Vec<MetadataRecord> {
    let mut records = vec![MetadataRecord::RegisterBroker {
        broker_id,
        incarnation_id,
        endpoints: endpoints.to_vec(),
        rack: rack.map(String::from),
    }];
    records.extend(elect_leaders_for_returning(image, broker_id));
    records
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

/// Unfences a broker the controller hears from again, bringing back partitions left offline
/// waiting for it. A broker in controlled shutdown comes back only by registering again.
pub fn unfence_broker(image: &MetadataImage, broker_id: i32) -> Vec<MetadataRecord> {
    if image
        .brokers
        .get(&broker_id)
        .is_none_or(|b| !b.fenced || b.in_controlled_shutdown)
    {
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

/// Fence/unfence decisions of the active controller. `contacts` holds, per quorum member, how
/// long ago the leader last heard from it; `leading_for_ms` gives a new leader a full session
/// before it fences anyone it has not heard from.
///
/// A controller that has not heard from a majority of the voters (itself included) within a
/// session fences no one: its view is stale, not the brokers. That happens when its own
/// process was paused (every member then looks silent, though the others have elected a new
/// leader meanwhile, and a proposal made now would still be committed by that leader) or when
/// it is about to lose leadership anyway. A live leader always hears from a majority.
pub fn liveness_changes(
    image: &MetadataImage,
    contacts: &[MemberContact],
    leading_for_ms: u64,
    session_timeout_ms: u64,
) -> Vec<MetadataCommand> {
    let heard_recently = |c: &MemberContact| c.last_heard_ms.is_some_and(|ms| ms < session_timeout_ms);
    let voters = contacts.iter().filter(|c| c.voter).count();
    let voters_heard = contacts.iter().filter(|c| c.voter && heard_recently(c)).count();
    let view_is_fresh = voters_heard * 2 > voters;
    image
        .brokers
        .values()
        .filter_map(|b| {
            let contact = contacts
                .iter()
                .find(|c| c.broker_id == b.broker_id)
                .and_then(|c| c.last_heard_ms);
            let alive = match contact {
                Some(ms) => ms < session_timeout_ms,
                None => leading_for_ms < session_timeout_ms,
            };
            match (b.fenced, alive) {
                (false, false) if view_is_fresh => Some(MetadataCommand::FenceBroker { broker_id: b.broker_id }),
                (true, true) if contact.is_some() && !b.in_controlled_shutdown => {
                    Some(MetadataCommand::UnfenceBroker { broker_id: b.broker_id })
                }
                _ => None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::test_support::*;
    use crate::controller::{create_topic, decide, Outcome};

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
        let (records, _) = decide(&image, &MetadataCommand::UnfenceBroker { broker_id: 1 }).unwrap();
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
        assert!(liveness_changes(&image, &contacts, 60_000, 9_000).is_empty());
        let unfence = MetadataCommand::UnfenceBroker { broker_id: 1 };
        assert!(decide(&image, &unfence).unwrap().0.is_empty());
        // A new incarnation registers and is live again.
        register(&mut image, 1, 2);
        assert!(image.is_live(1) && !image.brokers[&1].in_controlled_shutdown);
    }

    #[test]
    fn controlled_shutdown_of_a_stale_incarnation_or_unknown_broker_is_ignored() {
        let mut image = image_with_brokers(&[1, 2]);
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
    fn silent_brokers_are_fenced_after_the_session_timeout_and_unfenced_when_heard_again() {
        let mut image = image_with_brokers(&[1, 2, 3]);
        let contacts = voters(&[(1, Some(0)), (2, Some(200)), (3, Some(9_500))]);
        assert_eq!(
            liveness_changes(&image, &contacts, 60_000, 9_000),
            vec![MetadataCommand::FenceBroker { broker_id: 3 }]
        );
        // A new leader that has heard nothing yet waits a full session before fencing.
        let unknown = [(1, Some(0)), (2, None), (3, None)].map(|(broker_id, last_heard_ms)| MemberContact {
            broker_id,
            last_heard_ms,
            voter: broker_id == 1,
        });
        assert!(liveness_changes(&image, &unknown, 1_000, 9_000).is_empty());
        assert_eq!(liveness_changes(&image, &unknown, 9_000, 9_000).len(), 2);
        let records = fence_broker(&image, 3);
        apply_all(&mut image, &records);
        let back = voters(&[(1, Some(0)), (2, Some(0)), (3, Some(100))]);
        assert_eq!(
            liveness_changes(&image, &back, 60_000, 9_000),
            vec![MetadataCommand::UnfenceBroker { broker_id: 3 }]
        );
    }

    #[test]
    fn a_controller_that_heard_from_no_majority_of_voters_fences_no_one() {
        // Its process was paused past the session timeout: every member looks silent, and the
        // other voters have elected a new leader meanwhile.
        let image = image_with_brokers(&[1, 2, 3]);
        let stale = voters(&[(1, Some(0)), (2, Some(9_500)), (3, Some(12_000))]);
        assert!(liveness_changes(&image, &stale, 60_000, 9_000).is_empty());
        // Hearing from one other voter of three is a majority: the silent one is fenced.
        let fresh = voters(&[(1, Some(0)), (2, Some(100)), (3, Some(12_000))]);
        assert_eq!(
            liveness_changes(&image, &fresh, 60_000, 9_000),
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

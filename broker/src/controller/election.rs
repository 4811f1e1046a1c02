//! Every partition leader the controller picks is picked here (Kafka's
//! `PartitionChangeBuilder.electLeader` and `isValidNewLeader`), whatever asked for it: topic
//! creation, a broker leaving service (fenced or shutting down), a broker returning, preferred
//! leader balancing, ElectLeaders (preferred and unclean), and a reassignment starting or
//! finishing.
//!
//! One rule says who may lead: [`Candidates::may_lead`], a broker that is live (registered,
//! unfenced, not shutting down) and not on its way out because a newer process of it waits to
//! register. An election never picks anyone else, and what it returns keeps
//! leader ∈ ISR ⊆ replicas (or no leader).

use crate::metadata::image::{MetadataImage, PartitionRegistration, TopicImage, NO_LEADER};

/// What asked for the election.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The ISR changed (a broker left it, a reassignment started or finished): the leader
    /// stays if it is still in sync and may lead; else the first in-sync replica that may;
    /// else, where the topic allows unclean election, any replica that may (then the whole
    /// ISR); else none.
    IsrChange,
    /// Leadership back to the first replica (preferred leader election), when it is in sync
    /// and may lead; otherwise nothing changes.
    Preferred,
    /// ElectLeaders UNCLEAN from an operator: as [`Kind::IsrChange`], with unclean election
    /// allowed whatever the topic says.
    Unclean,
}

/// Why the leader is the one it is; kept in the record the election makes.
pub use crate::metadata::records::ElectionReason as Reason;

/// The outcome of one election: the leader (or [`NO_LEADER`]) and the ISR that goes with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Elected {
    pub leader: i32,
    pub isr: Vec<i32>,
    pub reason: Reason,
}

/// Who may lead, as the image will be once the change being decided is made: `leaving` is on
/// its way out of service, `arriving` is registering or being unfenced in the same change.
#[derive(Debug, Clone, Copy)]
pub struct Candidates<'a> {
    image: &'a MetadataImage,
    leaving: Option<i32>,
    arriving: Option<i32>,
}

impl<'a> Candidates<'a> {
    pub fn new(image: &'a MetadataImage) -> Self {
        Candidates {
            image,
            leaving: None,
            arriving: None,
        }
    }

    pub fn leaving(self, broker_id: i32) -> Self {
        Candidates {
            leaving: Some(broker_id),
            ..self
        }
    }

    pub fn arriving(self, broker_id: i32) -> Self {
        Candidates {
            arriving: Some(broker_id),
            ..self
        }
    }

    /// The one eligibility rule: live, and not replaced by a newer process waiting to register.
    pub fn may_lead(&self, broker_id: i32) -> bool {
        self.leaving != Some(broker_id)
            && (self.arriving == Some(broker_id) || self.image.can_take_leadership(broker_id))
    }

    /// Whether the broker is live as the change leaves it (may be in sync), whether or not it
    /// may lead.
    pub fn is_live(&self, broker_id: i32) -> bool {
        self.leaving != Some(broker_id) && (self.arriving == Some(broker_id) || self.image.is_live(broker_id))
    }
}

/// Elects a leader for a partition whose replicas are `replicas` (in order; the first is the
/// preferred leader), currently led by `current` (or [`NO_LEADER`]), whose ISR is to be `isr`.
/// `None` when a preferred election finds nothing to do. `isr` must be a subset of `replicas`.
pub fn elect(
    replicas: &[i32],
    current: i32,
    isr: &[i32],
    kind: Kind,
    unclean_allowed: bool,
    candidates: &Candidates,
) -> Option<Elected> {
    match kind {
        Kind::Preferred => {
            let preferred = *replicas.first()?;
            (preferred != current && isr.contains(&preferred) && candidates.may_lead(preferred)).then(|| Elected {
                leader: preferred,
                isr: isr.to_vec(),
                reason: Reason::Preferred,
            })
        }
        Kind::IsrChange => Some(elect_on_isr_change(replicas, current, isr, unclean_allowed, candidates)),
        Kind::Unclean => Some(elect_on_isr_change(replicas, current, isr, true, candidates)),
    }
}

/// [`elect`] for [`Kind::IsrChange`], which always has an outcome: the leader stays, another
/// replica leads, or none does.
pub fn elect_on_isr_change(
    replicas: &[i32],
    current: i32,
    isr: &[i32],
    unclean_allowed: bool,
    candidates: &Candidates,
) -> Elected {
    debug_assert!(isr.iter().all(|id| replicas.contains(id)), "ISR {isr:?} ⊄ replicas {replicas:?}");
    let elected = |leader, isr: &[i32], reason| Elected {
        leader,
        isr: isr.to_vec(),
        reason,
    };
    if current != NO_LEADER && isr.contains(&current) && candidates.may_lead(current) {
        return elected(current, isr, Reason::Unchanged);
    }
    if let Some(&leader) = isr.iter().find(|id| candidates.may_lead(**id)) {
        let reason = if replicas.first() == Some(&leader) {
            Reason::Preferred
        } else {
            Reason::InSync
        };
        return elected(leader, isr, reason);
    }
    if unclean_allowed {
        if let Some(&leader) = replicas.iter().find(|id| candidates.may_lead(**id)) {
            return elected(leader, &[leader], Reason::Unclean);
        }
    }
    elected(NO_LEADER, isr, Reason::Offline)
}

/// [`elect`] for an existing partition of `topic` with its ISR becoming `isr`, unclean
/// election as the topic allows it.
pub fn elect_for(
    topic: &TopicImage,
    p: &PartitionRegistration,
    isr: &[i32],
    kind: Kind,
    candidates: &Candidates,
) -> Option<Elected> {
    elect(
        &p.replicas,
        p.leader,
        isr,
        kind,
        unclean_leader_election_enabled(topic),
        candidates,
    )
}

/// The leader and ISR of a new partition: every live replica is in sync, and the first that
/// may lead leads. `None` when no replica is live.
pub fn elect_new(replicas: &[i32], candidates: &Candidates) -> Option<Elected> {
    let isr: Vec<i32> = replicas.iter().copied().filter(|id| candidates.is_live(*id)).collect();
    if isr.is_empty() {
        return None;
    }
    Some(elect_on_isr_change(replicas, NO_LEADER, &isr, false, candidates))
}

/// The topic's own `unclean.leader.election.enable`. Only the topic-level setting counts:
/// decisions run on every node, and broker-level settings may differ between nodes.
pub fn unclean_leader_election_enabled(topic: &TopicImage) -> bool {
    topic
        .configs
        .get("unclean.leader.election.enable")
        .is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::test_support::*;
    use crate::metadata::records::MetadataRecord;
    use uuid::Uuid;

    /// Brokers 1..=4, all live.
    fn image() -> MetadataImage {
        image_with_brokers(&[1, 2, 3, 4])
    }

    fn fence(image: &mut MetadataImage, broker_id: i32) {
        image.apply(&MetadataRecord::FenceBroker { broker_id });
    }

    /// Broker `broker_id`'s restarted process asked to register; the old one is still live.
    fn restarted(image: &mut MetadataImage, broker_id: i32) {
        image.apply(&MetadataRecord::RegistrationPending {
            broker_id,
            incarnation_id: Uuid::from_u128(99),
        });
    }

    fn leader(e: Option<Elected>) -> (i32, Vec<i32>, Reason) {
        let e = e.expect("an election");
        (e.leader, e.isr, e.reason)
    }

    #[test]
    fn the_leader_stays_while_it_is_in_sync_and_may_lead() {
        let image = image();
        let c = Candidates::new(&image);
        assert_eq!(
            leader(elect(&[1, 2, 3], 2, &[1, 2], Kind::IsrChange, false, &c)),
            (2, vec![1, 2], Reason::Unchanged)
        );
    }

    #[test]
    fn a_leaving_leader_hands_over_to_the_first_in_sync_replica_that_may_lead() {
        let mut image = image();
        fence(&mut image, 2);
        let c = Candidates::new(&image).leaving(1);
        assert_eq!(
            leader(elect(&[1, 2, 3], 1, &[2, 3], Kind::IsrChange, false, &c)),
            (3, vec![2, 3], Reason::InSync),
            "2 is fenced, so 3 leads"
        );
    }

    #[test]
    fn without_an_in_sync_candidate_the_partition_goes_offline_unless_unclean_is_allowed() {
        let mut image = image();
        fence(&mut image, 2);
        let c = Candidates::new(&image).leaving(1);
        assert_eq!(
            leader(elect(&[1, 2, 3], 1, &[2], Kind::IsrChange, false, &c)),
            (NO_LEADER, vec![2], Reason::Offline)
        );
        assert_eq!(
            leader(elect(&[1, 2, 3], 1, &[2], Kind::IsrChange, true, &c)),
            (3, vec![3], Reason::Unclean)
        );
        assert_eq!(
            leader(elect(&[1, 2, 3], 1, &[2], Kind::Unclean, false, &c)),
            (3, vec![3], Reason::Unclean),
            "an operator's unclean election overrides the topic"
        );
    }

    #[test]
    fn a_returning_broker_leads_an_offline_partition_it_is_in_sync_for() {
        let mut image = image();
        fence(&mut image, 2);
        let c = Candidates::new(&image).arriving(2);
        assert_eq!(
            leader(elect(&[1, 2, 3], NO_LEADER, &[2], Kind::IsrChange, false, &c)),
            (2, vec![2], Reason::InSync)
        );
        assert_eq!(
            leader(elect(&[1, 2, 3], NO_LEADER, &[2], Kind::IsrChange, false, &Candidates::new(&image))),
            (NO_LEADER, vec![2], Reason::Offline),
            "not before it arrives"
        );
    }

    #[test]
    fn preferred_election_moves_only_to_an_in_sync_first_replica_that_may_lead() {
        let mut image = image();
        let c = Candidates::new(&image);
        assert_eq!(
            leader(elect(&[1, 2, 3], 2, &[1, 2, 3], Kind::Preferred, false, &c)),
            (1, vec![1, 2, 3], Reason::Preferred)
        );
        assert_eq!(elect(&[1, 2, 3], 1, &[1, 2, 3], Kind::Preferred, false, &c), None, "already there");
        assert_eq!(elect(&[1, 2, 3], 2, &[2, 3], Kind::Preferred, false, &c), None, "not in sync");
        fence(&mut image, 1);
        let c = Candidates::new(&image);
        assert_eq!(elect(&[1, 2, 3], 2, &[1, 2, 3], Kind::Preferred, false, &c), None, "fenced");
    }

    /// A broker whose restarted process waits to register serves nothing: no kind of election
    /// picks it, though it is still live (and may stay in the ISR).
    #[test]
    fn a_restarted_broker_that_has_not_registered_is_never_elected() {
        let mut image = image();
        restarted(&mut image, 1);
        restarted(&mut image, 3);
        assert!(image.is_live(1), "the old process is still registered");
        let c = Candidates::new(&image);
        for kind in [Kind::IsrChange, Kind::Preferred, Kind::Unclean] {
            for unclean in [false, true] {
                let e = elect(&[1, 2, 3], NO_LEADER, &[1, 3], kind, unclean, &c);
                assert!(
                    e.as_ref().map_or(true, |e| e.leader != 1 && e.leader != 3),
                    "{kind:?} (unclean {unclean}) elected {e:?}"
                );
            }
        }
        assert_eq!(
            leader(elect(&[1, 2, 3], 1, &[1, 2], Kind::IsrChange, false, &c)),
            (2, vec![1, 2], Reason::InSync),
            "a leader being replaced does not stay"
        );
        assert_eq!(
            leader(elect_new(&[1, 2, 3], &c)),
            (2, vec![1, 2, 3], Reason::InSync),
            "a new partition: in sync, but led by 2"
        );
    }

    #[test]
    fn a_new_partition_is_in_sync_on_its_live_replicas_and_led_by_the_first() {
        let mut image = image();
        let c = Candidates::new(&image);
        assert_eq!(leader(elect_new(&[3, 1, 2], &c)), (3, vec![3, 1, 2], Reason::Preferred));
        fence(&mut image, 3);
        let c = Candidates::new(&image);
        assert_eq!(leader(elect_new(&[3, 1, 2], &c)), (1, vec![1, 2], Reason::InSync));
        fence(&mut image, 1);
        fence(&mut image, 2);
        let c = Candidates::new(&image);
        assert_eq!(elect_new(&[3, 1, 2], &c), None);
    }

    #[test]
    fn every_election_keeps_the_leader_in_the_isr_and_the_isr_in_the_replicas() {
        let mut image = image();
        fence(&mut image, 4);
        restarted(&mut image, 2);
        let replicas = [1, 2, 3, 4];
        let subsets: Vec<Vec<i32>> = (0u32..16)
            .map(|mask| replicas.iter().copied().filter(|id| mask & (1 << (id - 1)) != 0).collect())
            .collect();
        for isr in &subsets {
            for current in [NO_LEADER, 1, 2, 3, 4] {
                for kind in [Kind::IsrChange, Kind::Preferred, Kind::Unclean] {
                    for unclean in [false, true] {
                        for c in [Candidates::new(&image), Candidates::new(&image).leaving(1)] {
                            let Some(e) = elect(&replicas, current, isr, kind, unclean, &c) else {
                                continue;
                            };
                            assert!(e.isr.iter().all(|id| replicas.contains(id)), "{e:?}");
                            assert!(e.leader == NO_LEADER || e.isr.contains(&e.leader), "{e:?}");
                            assert!(e.leader == NO_LEADER || c.may_lead(e.leader), "{e:?}");
                        }
                    }
                }
            }
        }
    }
}

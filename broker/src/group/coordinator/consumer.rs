//! A KIP-848 consumer group's state (Kafka's `ConsumerGroup` and `ConsumerGroupMember`) and
//! the reconciliation of one member towards its target (Kafka's `CurrentAssignmentBuilder`).
//!
//! Three epochs order everything. The *group epoch* moves when membership, a subscription or a
//! subscribed topic's partitions change; the *assignment epoch* is the group epoch the target
//! assignment was computed at; a member's *member epoch* is the target epoch it has reached.
//! A member reaches a new target in steps, never holding a partition another member still
//! holds: partitions leaving it are revoked first (it stays at its epoch, in
//! UnrevokedPartitions, until its heartbeat shows it no longer owns them); partitions coming to
//! it are given once their previous owner has released them (UnreleasedPartitions until then).
//!
//! The heartbeat and timers that drive this are in `consumer_members.rs`.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use uuid::Uuid;

use crate::group::assignor::{Assignment, Assignor, AssignorMember, TopicPartitionCounts};
use crate::group::consumer_records::{
    ConsumerRecord, StoredClassicMember, StoredConsumerMember, StoredMemberAssignment,
};
use crate::group::records::GroupRecord;

/// The epoch a static member leaves with (`-2`): it keeps its partitions for its session
/// timeout in case the same instance comes back.
pub const LEAVE_STATIC_EPOCH: i32 = -2;
/// The epoch a member leaves with (`-1`).
pub const LEAVE_EPOCH: i32 = -1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberState {
    /// At the target assignment's epoch, holding all of its target.
    Stable,
    /// Asked to give up partitions; stays at its epoch until it has.
    UnrevokedPartitions,
    /// At the target epoch, waiting for partitions other members still hold.
    UnreleasedPartitions,
}

impl MemberState {
    /// Kafka's byte for the state in `ConsumerGroupCurrentMemberAssignment` records.
    pub fn code(self) -> i8 {
        match self {
            MemberState::Stable => 0,
            MemberState::UnrevokedPartitions => 1,
            MemberState::UnreleasedPartitions => 2,
        }
    }

    pub fn from_code(code: i8) -> MemberState {
        match code {
            1 => MemberState::UnrevokedPartitions,
            2 => MemberState::UnreleasedPartitions,
            _ => MemberState::Stable,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            MemberState::Stable => "STABLE",
            MemberState::UnrevokedPartitions => "UNREVOKED_PARTITIONS",
            MemberState::UnreleasedPartitions => "UNRELEASED_PARTITIONS",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ConsumerMember {
    pub(super) member_epoch: i32,
    pub(super) previous_member_epoch: i32,
    pub(super) state: MemberState,
    pub(super) instance_id: Option<String>,
    pub(super) rack_id: Option<String>,
    pub(super) client_id: String,
    pub(super) client_host: String,
    /// Sorted and without repeats.
    pub(super) subscribed_topic_names: Vec<String>,
    pub(super) subscribed_topic_regex: Option<String>,
    pub(super) server_assignor: Option<String>,
    pub(super) rebalance_timeout_ms: i32,
    /// What the member may consume now.
    pub(super) assigned: Assignment,
    /// What it was asked to give up and has not yet confirmed.
    pub(super) pending_revocation: Assignment,
    pub(super) last_heartbeat_ms: i64,
    /// When it entered UnrevokedPartitions: it must finish revoking within its rebalance timeout.
    pub(super) revoking_since_ms: Option<i64>,
    /// Set for a member speaking the classic protocol (JoinGroup, SyncGroup, Heartbeat) in
    /// this consumer group (`migration.rs`): its session timeout and protocols.
    pub(super) classic: Option<StoredClassicMember>,
    /// A classic member told to rejoin, or that joined and has not synced, is removed if it
    /// has not done so by then (Kafka's consumer group join and sync timeouts). Not stored.
    pub(super) classic_deadline_ms: Option<i64>,
}

impl ConsumerMember {
    pub(super) fn new(client_id: String, client_host: String, now: i64) -> Self {
        ConsumerMember {
            member_epoch: 0,
            previous_member_epoch: 0,
            state: MemberState::Stable,
            instance_id: None,
            rack_id: None,
            client_id,
            client_host,
            subscribed_topic_names: Vec::new(),
            subscribed_topic_regex: None,
            server_assignor: None,
            rebalance_timeout_ms: 0,
            assigned: Assignment::new(),
            pending_revocation: Assignment::new(),
            last_heartbeat_ms: now,
            revoking_since_ms: None,
            classic: None,
            classic_deadline_ms: None,
        }
    }

    /// How long it may go unheard: a classic member's own session timeout, else the group's.
    pub(super) fn session_timeout_ms(&self, group_session_ms: i32) -> i32 {
        self.classic.as_ref().map_or(group_session_ms, |c| c.session_timeout_ms)
    }
}

impl ConsumerMember {
    /// Its `ConsumerGroupMemberMetadata` value.
    pub(super) fn stored_metadata(&self) -> StoredConsumerMember {
        StoredConsumerMember {
            instance_id: self.instance_id.clone(),
            rack_id: self.rack_id.clone(),
            client_id: self.client_id.clone(),
            client_host: self.client_host.clone(),
            subscribed_topic_names: self.subscribed_topic_names.clone(),
            subscribed_topic_regex: self.subscribed_topic_regex.clone(),
            rebalance_timeout_ms: self.rebalance_timeout_ms,
            server_assignor: self.server_assignor.clone(),
            classic: self.classic.clone(),
        }
    }

    /// Its `ConsumerGroupCurrentMemberAssignment` value.
    pub(super) fn stored_assignment(&self) -> StoredMemberAssignment {
        StoredMemberAssignment {
            member_epoch: self.member_epoch,
            previous_member_epoch: self.previous_member_epoch,
            state: self.state.code(),
            assigned: self.assigned.clone(),
            pending_revocation: self.pending_revocation.clone(),
        }
    }

    fn restore(metadata: StoredConsumerMember, current: Option<StoredMemberAssignment>, now: i64) -> ConsumerMember {
        let mut member = ConsumerMember::new(metadata.client_id, metadata.client_host, now);
        member.instance_id = metadata.instance_id;
        member.rack_id = metadata.rack_id;
        member.subscribed_topic_names = metadata.subscribed_topic_names;
        member.subscribed_topic_regex = metadata.subscribed_topic_regex;
        member.server_assignor = metadata.server_assignor;
        member.rebalance_timeout_ms = metadata.rebalance_timeout_ms;
        member.classic = metadata.classic;
        if let Some(c) = current {
            member.member_epoch = c.member_epoch;
            member.previous_member_epoch = c.previous_member_epoch;
            member.state = MemberState::from_code(c.state);
            member.assigned = c.assigned;
            member.pending_revocation = c.pending_revocation;
            if member.state == MemberState::UnrevokedPartitions {
                member.revoking_since_ms = Some(now);
            }
        }
        member
    }
}

/// The records of `member` that differ from `before` (all of them for a new member).
pub(super) fn member_records(
    group_id: &str,
    member_id: &str,
    before: Option<&ConsumerMember>,
    member: &ConsumerMember,
) -> Vec<GroupRecord> {
    let mut out = Vec::new();
    let metadata = member.stored_metadata();
    if before.is_none_or(|b| b.stored_metadata() != metadata) {
        out.push(GroupRecord::Consumer(ConsumerRecord::Member {
            group_id: group_id.to_string(),
            member_id: member_id.to_string(),
            value: Some(metadata),
        }));
    }
    let assignment = member.stored_assignment();
    if before.is_none_or(|b| b.stored_assignment() != assignment) {
        out.push(GroupRecord::Consumer(ConsumerRecord::CurrentAssignment {
            group_id: group_id.to_string(),
            member_id: member_id.to_string(),
            value: Some(assignment),
        }));
    }
    out
}

/// Tombstones of a member's three records, in Kafka's order.
pub(super) fn member_tombstones(group_id: &str, member_id: &str) -> [GroupRecord; 3] {
    let (g, m) = (group_id.to_string(), member_id.to_string());
    [
        GroupRecord::Consumer(ConsumerRecord::CurrentAssignment {
            group_id: g.clone(),
            member_id: m.clone(),
            value: None,
        }),
        GroupRecord::Consumer(ConsumerRecord::TargetMember {
            group_id: g.clone(),
            member_id: m.clone(),
            value: None,
        }),
        GroupRecord::Consumer(ConsumerRecord::Member {
            group_id: g,
            member_id: m,
            value: None,
        }),
    ]
}

/// A group's records as replayed from `__consumer_offsets` (the latest per key).
#[derive(Debug, Default)]
pub(super) struct StoredConsumerGroup {
    epoch: Option<i32>,
    assignment_epoch: Option<i32>,
    members: BTreeMap<String, StoredConsumerMember>,
    targets: BTreeMap<String, Assignment>,
    current: BTreeMap<String, StoredMemberAssignment>,
}

impl StoredConsumerGroup {
    pub(super) fn apply(&mut self, record: ConsumerRecord) {
        fn put<V>(map: &mut BTreeMap<String, V>, key: String, value: Option<V>) {
            match value {
                Some(v) => map.insert(key, v),
                None => map.remove(&key),
            };
        }
        match record {
            ConsumerRecord::GroupEpoch { epoch, .. } => self.epoch = epoch,
            ConsumerRecord::TargetEpoch { epoch, .. } => self.assignment_epoch = epoch,
            ConsumerRecord::Member { member_id, value, .. } => put(&mut self.members, member_id, value),
            ConsumerRecord::TargetMember { member_id, value, .. } => put(&mut self.targets, member_id, value),
            ConsumerRecord::CurrentAssignment { member_id, value, .. } => put(&mut self.current, member_id, value),
        }
    }

    /// Whether the group exists: its epoch record is there (a deleted group's is tombstoned).
    pub(super) fn exists(&self) -> bool {
        self.epoch.is_some()
    }
}

impl ConsumerGroup {
    /// Rebuilds a group from its records. Sessions start over from `now`; the subscribed
    /// topics are resolved again at the first heartbeat.
    pub(super) fn restore(stored: StoredConsumerGroup, now: i64) -> ConsumerGroup {
        let StoredConsumerGroup {
            epoch,
            assignment_epoch,
            members,
            mut targets,
            mut current,
        } = stored;
        let mut group = ConsumerGroup {
            group_epoch: epoch.unwrap_or(0),
            assignment_epoch: assignment_epoch.unwrap_or(0),
            restored: true,
            ..ConsumerGroup::default()
        };
        for (id, metadata) in members {
            let member = ConsumerMember::restore(metadata, current.remove(&id), now);
            if let Some(target) = targets.remove(&id) {
                group.target.insert(id.clone(), target);
            }
            group.put_member(&id, member);
        }
        group
    }
}

/// The topics a member's subscription resolves to: existing topics by name, with their id and
/// partition count.
pub type SubscribedTopics = BTreeMap<String, (Uuid, i32)>;

#[derive(Debug, Default, Clone)]
pub(super) struct ConsumerGroup {
    pub(super) group_epoch: i32,
    pub(super) assignment_epoch: i32,
    pub(super) members: BTreeMap<String, ConsumerMember>,
    /// Each member's partitions in the target assignment.
    pub(super) target: BTreeMap<String, Assignment>,
    /// `group.instance.id` → member id.
    pub(super) static_members: HashMap<String, String>,
    /// The subscribed topics as last resolved: a change moves the group epoch.
    pub(super) subscribed: SubscribedTopics,
    /// Which member holds each partition, assigned or still revoking it.
    owners: HashMap<(Uuid, i32), String>,
    /// Rebuilt from its records and not yet heard from: `subscribed` is still to be resolved,
    /// which moves the group epoch only if the assignment would change.
    pub(super) restored: bool,
    /// The group's `consumer.session.timeout.ms` group config as of its last heartbeat (not
    /// stored: each heartbeat brings it again).
    pub(super) session_timeout_ms: Option<i32>,
}

impl ConsumerGroup {
    /// Kafka's consumer group states as DescribeGroups, ListGroups and
    /// ConsumerGroupDescribe name them.
    pub(super) fn state_name(&self) -> &'static str {
        if self.members.is_empty() {
            "Empty"
        } else if self.group_epoch > self.assignment_epoch {
            "Assigning"
        } else if self
            .members
            .values()
            .any(|m| m.state != MemberState::Stable || m.member_epoch != self.assignment_epoch)
        {
            "Reconciling"
        } else {
            "Stable"
        }
    }

    /// Replaces a member's record, keeping the partition owners in step.
    pub(super) fn put_member(&mut self, member_id: &str, member: ConsumerMember) {
        if let Some(old) = self.members.get(member_id) {
            for tp in partitions(&old.assigned).chain(partitions(&old.pending_revocation)) {
                if self.owners.get(&tp).is_some_and(|o| o == member_id) {
                    self.owners.remove(&tp);
                }
            }
        }
        for tp in partitions(&member.assigned).chain(partitions(&member.pending_revocation)) {
            let previous = self.owners.insert(tp, member_id.to_string());
            debug_assert!(
                previous.is_none() || previous.as_deref() == Some(member_id),
                "partition {tp:?} given to {member_id} while {previous:?} holds it"
            );
        }
        if let Some(instance) = &member.instance_id {
            self.static_members.insert(instance.clone(), member_id.to_string());
        }
        self.members.insert(member_id.to_string(), member);
    }

    /// Removes a member and frees its partitions; the group epoch moves so the others are
    /// given its share.
    pub(super) fn remove_member(&mut self, member_id: &str) -> Option<ConsumerMember> {
        let member = self.members.remove(member_id)?;
        for tp in partitions(&member.assigned).chain(partitions(&member.pending_revocation)) {
            if self.owners.get(&tp).is_some_and(|o| o == member_id) {
                self.owners.remove(&tp);
            }
        }
        if let Some(instance) = &member.instance_id {
            if self.static_members.get(instance).is_some_and(|m| m == member_id) {
                self.static_members.remove(instance);
            }
        }
        self.target.remove(member_id);
        self.group_epoch += 1;
        Some(member)
    }

    /// Moves a member's record to a new id (a static member's instance rejoining), with its
    /// partitions and target; the group epoch stays, as membership did not change.
    pub(super) fn rename_member(&mut self, from: &str, to: &str) -> Option<ConsumerMember> {
        let member = self.members.remove(from)?;
        for tp in partitions(&member.assigned).chain(partitions(&member.pending_revocation)) {
            self.owners.insert(tp, to.to_string());
        }
        if let Some(target) = self.target.remove(from) {
            self.target.insert(to.to_string(), target);
        }
        if let Some(instance) = &member.instance_id {
            self.static_members.insert(instance.clone(), to.to_string());
        }
        self.members.insert(to.to_string(), member.clone());
        Some(member)
    }

    /// The member holding a partition, if any.
    pub(super) fn holder(&self, tp: &(Uuid, i32)) -> Option<&str> {
        self.owners.get(tp).map(String::as_str)
    }

    /// Computes a new target assignment at the group epoch with `assignor`, from each
    /// member's resolved subscription.
    pub(super) fn compute_target(&mut self, assignor: Assignor, resolve: impl Fn(&ConsumerMember) -> BTreeSet<Uuid>) {
        self.target = self.target_by(assignor, resolve);
        self.assignment_epoch = self.group_epoch;
    }

    /// The target assignment `assignor` gives the members now.
    pub(super) fn target_by(
        &self,
        assignor: Assignor,
        resolve: impl Fn(&ConsumerMember) -> BTreeSet<Uuid>,
    ) -> BTreeMap<String, Assignment> {
        let counts: TopicPartitionCounts = self.subscribed.values().map(|(id, n)| (*id, *n)).collect();
        let subscriptions: Vec<(String, BTreeSet<Uuid>)> =
            self.members.iter().map(|(id, m)| (id.clone(), resolve(m))).collect();
        let members: Vec<AssignorMember<'_>> = subscriptions
            .iter()
            .map(|(id, topics)| AssignorMember {
                id,
                topics,
                previous: self.target.get(id),
            })
            .collect();
        assignor.assign(&members, &counts)
    }

    /// Moves `member` as far towards its target as it can go now (Kafka's
    /// `CurrentAssignmentBuilder`). `owned` is what the member's heartbeat says it still
    /// holds; `None` when the heartbeat did not say.
    pub(super) fn reconcile(
        &self,
        member_id: &str,
        member: &ConsumerMember,
        owned: Option<&Assignment>,
    ) -> ConsumerMember {
        let empty = Assignment::new();
        let target = self.target.get(member_id).unwrap_or(&empty);
        let target_epoch = self.assignment_epoch;
        match member.state {
            MemberState::UnrevokedPartitions => {
                if still_owns(owned, &member.pending_revocation) {
                    // Nothing moves until it has let go, even if the target moved meanwhile.
                    member.clone()
                } else {
                    // Revoked: on to the next epoch, towards the newest target.
                    let mut done = member.clone();
                    done.pending_revocation.clear();
                    done.revoking_since_ms = None;
                    self.next(
                        member_id,
                        &done,
                        (member.member_epoch + 1).min(target_epoch),
                        target,
                        owned,
                    )
                }
            }
            MemberState::UnreleasedPartitions if member.member_epoch == target_epoch => {
                self.next(member_id, member, target_epoch, target, owned)
            }
            _ if member.member_epoch != target_epoch => {
                self.next(member_id, member, member.member_epoch, target, owned)
            }
            _ => member.clone(),
        }
    }

    fn next(
        &self,
        member_id: &str,
        member: &ConsumerMember,
        member_epoch: i32,
        target: &Assignment,
        owned: Option<&Assignment>,
    ) -> ConsumerMember {
        let mut assigned = Assignment::new();
        let mut revoke = Assignment::new();
        let mut unreleased = false;
        let topics: BTreeSet<&Uuid> = target.keys().chain(member.assigned.keys()).collect();
        for topic in topics {
            let wanted = target.get(topic);
            let current = member.assigned.get(topic);
            for &p in current.into_iter().flatten() {
                if wanted.is_some_and(|w| w.contains(&p)) {
                    assigned.entry(*topic).or_default().insert(p);
                } else {
                    revoke.entry(*topic).or_default().insert(p);
                }
            }
            for &p in wanted.into_iter().flatten() {
                if current.is_some_and(|c| c.contains(&p)) {
                    continue;
                }
                match self.holder(&(*topic, p)) {
                    Some(holder) if holder != member_id => unreleased = true,
                    _ => {
                        assigned.entry(*topic).or_default().insert(p);
                    }
                }
            }
        }
        let mut next = member.clone();
        if !revoke.is_empty() && still_owns(owned, &revoke) {
            // Revoke first; new partitions wait until the member has let go of the old.
            for (topic, ps) in assigned.iter_mut() {
                let current = member.assigned.get(topic);
                ps.retain(|p| current.is_some_and(|c| c.contains(p)));
            }
            assigned.retain(|_, ps| !ps.is_empty());
            next.state = MemberState::UnrevokedPartitions;
            next.assigned = assigned;
            next.pending_revocation = revoke;
            if next.member_epoch != member_epoch {
                next.previous_member_epoch = next.member_epoch;
                next.member_epoch = member_epoch;
            }
            next.revoking_since_ms = member.revoking_since_ms.or(Some(member.last_heartbeat_ms));
            return next;
        }
        next.state = if unreleased {
            MemberState::UnreleasedPartitions
        } else {
            MemberState::Stable
        };
        next.assigned = assigned;
        next.pending_revocation.clear();
        next.revoking_since_ms = None;
        if next.member_epoch != self.assignment_epoch {
            next.previous_member_epoch = next.member_epoch;
            next.member_epoch = self.assignment_epoch;
        }
        next
    }

    /// Kafka's owner invariant: every partition is held by at most one member, and the owners
    /// map says exactly what the members hold.
    #[cfg(test)]
    pub(super) fn check_owners(&self) {
        let mut held = HashMap::new();
        for (id, m) in &self.members {
            for tp in partitions(&m.assigned).chain(partitions(&m.pending_revocation)) {
                assert!(held.insert(tp, id.clone()).is_none(), "{tp:?} held twice");
            }
        }
        assert_eq!(held, self.owners);
    }
}

/// Whether the member still holds any of `revoking`: it does when its heartbeat did not say
/// what it owns, or says it owns one of them.
fn still_owns(owned: Option<&Assignment>, revoking: &Assignment) -> bool {
    let Some(owned) = owned else {
        return true;
    };
    revoking
        .iter()
        .any(|(topic, ps)| owned.get(topic).is_some_and(|o| ps.iter().any(|p| o.contains(p))))
}

/// Every (topic, partition) of an assignment.
pub(super) fn partitions(a: &Assignment) -> impl Iterator<Item = (Uuid, i32)> + '_ {
    a.iter().flat_map(|(t, ps)| ps.iter().map(move |p| (*t, *p)))
}

/// Whether `a` holds only partitions `b` holds.
pub(super) fn is_subset(a: &Assignment, b: &Assignment) -> bool {
    a.iter()
        .all(|(t, ps)| ps.is_empty() || b.get(t).is_some_and(|bs| ps.is_subset(bs)))
}

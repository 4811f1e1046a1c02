//! The in-memory state of one group and its members (Kafka's `GroupMetadata` and
//! `MemberMetadata`) with the small helpers that read it, and `restore`, which rebuilds it from
//! a stored record. Split from `mod.rs` so the state sits apart from the transitions.

use std::collections::{HashMap, HashSet};

use bytes::Bytes;
use indexmap::IndexMap;
use kafka_protocol::error::ResponseError;

use super::consumer::ConsumerGroup;
use super::{Effect, Fx, GroupState, JoinResult, JoinedMember, ReplyId, SyncResult};
use crate::group::records::{OffsetAndMetadata, StoredGroup, StoredMember};

pub(super) struct Member {
    pub(super) instance_id: Option<String>,
    pub(super) client_id: String,
    pub(super) client_host: String,
    pub(super) session_timeout_ms: i32,
    pub(super) rebalance_timeout_ms: i32,
    pub(super) protocols: Vec<(String, Bytes)>,
    pub(super) assignment: Bytes,
    pub(super) awaiting_join: Option<ReplyId>,
    pub(super) awaiting_sync: Option<ReplyId>,
    pub(super) last_heartbeat_ms: i64,
    pub(super) is_new: bool,
}

impl Member {
    /// Answers this member's waiting JoinGroup and SyncGroup with `error`.
    pub(super) fn fail_waiting(&mut self, member_id: &str, error: ResponseError, fx: &mut Fx) {
        if let Some(reply) = self.awaiting_join.take() {
            fx.push(Effect::Join(reply, JoinResult::failed(member_id, error)));
        }
        if let Some(reply) = self.awaiting_sync.take() {
            fx.push(Effect::Sync(reply, SyncResult::failed(error)));
        }
    }

    pub(super) fn metadata(&self, protocol: Option<&str>) -> Bytes {
        protocol
            .and_then(|p| self.protocols.iter().find(|(name, _)| name == p))
            .map(|(_, m)| m.clone())
            .unwrap_or_default()
    }
}

/// Extra delays of the first rebalance of an empty group (Kafka's `InitialDelayedJoin`): each
/// delay that saw a new member is followed by another while the rebalance timeout allows.
pub(super) struct InitialDelay {
    pub(super) remaining_ms: i64,
}

pub(super) struct Group {
    pub(super) id: String,
    pub(super) partition: i32,
    pub(super) state: GroupState,
    pub(super) state_since_ms: i64,
    pub(super) generation_id: i32,
    pub(super) protocol_type: Option<String>,
    pub(super) protocol_name: Option<String>,
    pub(super) leader_id: Option<String>,
    pub(super) members: IndexMap<String, Member>,
    /// Ids handed out with MEMBER_ID_REQUIRED, with the time they lapse if unused.
    pub(super) pending_members: HashMap<String, i64>,
    /// Static members: `group.instance.id` → member id.
    pub(super) static_members: HashMap<String, String>,
    /// Members of this generation that have not sent SyncGroup yet.
    pub(super) pending_sync: HashSet<String>,
    pub(super) join_deadline_ms: i64,
    pub(super) initial_delay: Option<InitialDelay>,
    pub(super) new_member_added: bool,
    pub(super) sync_deadline_ms: i64,
    /// The leader's assignment while it is being stored.
    pub(super) pending_assignment: Option<HashMap<String, Bytes>>,
    /// Committed offsets: what OffsetFetch serves.
    pub(super) offsets: HashMap<TopicPartition, CommittedOffset>,
    /// Offsets of TxnOffsetCommits whose transaction has not ended, by producer id (Kafka's
    /// `pendingTransactionalOffsetCommits`): invisible to OffsetFetch until a COMMIT marker
    /// makes them committed; an ABORT marker drops them.
    pub(super) pending_txn_offsets: HashMap<i64, HashMap<TopicPartition, CommittedOffset>>,
    /// Set while the group is a KIP-848 consumer group (`consumer_members.rs`): its classic
    /// state is then Empty, and the offsets above are the group's.
    pub(super) consumer: Option<Box<ConsumerGroup>>,
}

/// A group's offsets are kept per (topic, partition).
pub(super) type TopicPartition = (String, i32);

/// An offset with the log offset of the `__consumer_offsets` record that holds it (Kafka's
/// `CommitRecordMetadataAndOffset`). When a transaction commits, its offset replaces a
/// committed one only if its record is later in the log: the log order is the order the
/// commits were made in, and a reload must arrive at the same answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct CommittedOffset {
    pub(super) value: OffsetAndMetadata,
    pub(super) record_offset: i64,
}

impl CommittedOffset {
    /// Stores `offset` at `tp` unless what is there was appended later.
    pub(super) fn keep_latest(
        offsets: &mut HashMap<TopicPartition, CommittedOffset>,
        tp: TopicPartition,
        offset: CommittedOffset,
    ) {
        match offsets.get(&tp) {
            Some(existing) if existing.record_offset > offset.record_offset => {}
            _ => {
                offsets.insert(tp, offset);
            }
        }
    }
}

impl Group {
    pub(super) fn new(id: &str, partition: i32, now: i64) -> Self {
        Group {
            id: id.to_string(),
            partition,
            state: GroupState::Empty,
            state_since_ms: now,
            generation_id: 0,
            protocol_type: None,
            protocol_name: None,
            leader_id: None,
            members: IndexMap::new(),
            pending_members: HashMap::new(),
            static_members: HashMap::new(),
            pending_sync: HashSet::new(),
            join_deadline_ms: 0,
            initial_delay: None,
            new_member_added: false,
            sync_deadline_ms: 0,
            pending_assignment: None,
            offsets: HashMap::new(),
            pending_txn_offsets: HashMap::new(),
            consumer: None,
        }
    }

    /// Moves the group to `state`. Invariant: only from a state [`GroupState::may_follow`]
    /// allows; any other move is a bug, reported (the node stops; unit tests fail) and not made.
    pub(super) fn transition(&mut self, state: GroupState, now: i64) {
        if !state.may_follow(self.state) {
            let broken = format!(
                "group {:?} would move from {} to {}, which Kafka's group state machine does not allow",
                self.id,
                self.state.name(),
                state.name()
            );
            #[cfg(test)]
            panic!("{broken}");
            #[cfg(not(test))]
            {
                crate::invariant::broken(broken);
                return;
            }
        }
        self.state = state;
        self.state_since_ms = now;
    }

    /// No members under either protocol.
    pub(super) fn is_empty(&self) -> bool {
        self.state == GroupState::Empty && self.consumer.as_ref().is_none_or(|c| c.members.is_empty())
    }

    pub(super) fn rebalance_timeout_ms(&self) -> i64 {
        self.members
            .values()
            .map(|m| i64::from(m.rebalance_timeout_ms))
            .max()
            .unwrap_or(0)
    }

    pub(super) fn is_leader(&self, member_id: &str) -> bool {
        self.leader_id.as_deref() == Some(member_id)
    }

    /// Kafka's `supportsProtocols`: an empty group takes any non-empty offer; otherwise the
    /// type must match and one protocol must be supported by every member.
    pub(super) fn supports_protocols(&self, protocol_type: &str, protocols: &[(String, Bytes)]) -> bool {
        if self.members.is_empty() {
            return !protocol_type.is_empty() && !protocols.is_empty();
        }
        self.protocol_type.as_deref() == Some(protocol_type)
            && protocols.iter().any(|(name, _)| {
                self.members
                    .values()
                    .all(|m| m.protocols.iter().any(|(n, _)| n == name))
            })
    }

    /// The protocol every member supports that most members prefer (Kafka's vote).
    pub(super) fn select_protocol(&self) -> Option<String> {
        let first = self.members.values().next()?;
        let candidates: Vec<&String> = first
            .protocols
            .iter()
            .map(|(n, _)| n)
            .filter(|name| {
                self.members
                    .values()
                    .all(|m| m.protocols.iter().any(|(n, _)| n == *name))
            })
            .collect();
        let mut votes: Vec<(usize, &String)> = candidates.iter().map(|c| (0, *c)).collect();
        for member in self.members.values() {
            if let Some((choice, _)) = member.protocols.iter().find(|(n, _)| candidates.contains(&n)) {
                if let Some(slot) = votes.iter_mut().find(|(_, c)| *c == choice) {
                    slot.0 += 1;
                }
            }
        }
        // Most votes; ties go to the earlier candidate.
        votes
            .iter()
            .rev()
            .max_by_key(|(count, _)| *count)
            .map(|(_, name)| (*name).clone())
    }

    /// Whether a transaction still holds an offset of this partition (OffsetFetch with
    /// `require_stable` answers UNSTABLE_OFFSET_COMMIT for it; retention keeps it).
    pub(super) fn has_pending_txn_offset(&self, tp: &TopicPartition) -> bool {
        self.pending_txn_offsets.values().any(|o| o.contains_key(tp))
    }

    /// Drops `tp` from every open transaction (a tombstone for it was written: Kafka 4.x's
    /// replay of an offset tombstone does the same, so a later COMMIT cannot bring it back).
    pub(super) fn drop_pending_txn_offset(&mut self, tp: &TopicPartition) {
        for offsets in self.pending_txn_offsets.values_mut() {
            offsets.remove(tp);
        }
        self.pending_txn_offsets.retain(|_, o| !o.is_empty());
    }

    pub(super) fn has_all_members_joined(&self) -> bool {
        self.pending_members.is_empty() && self.members.values().all(|m| m.awaiting_join.is_some())
    }

    pub(super) fn is_static_member_fenced(&self, member_id: &str, instance_id: Option<&str>) -> bool {
        instance_id
            .and_then(|i| self.static_members.get(i))
            .is_some_and(|known| known != member_id)
    }

    pub(super) fn stored(&self, assignments: Option<&HashMap<String, Bytes>>) -> StoredGroup {
        let protocol = self.protocol_name.as_deref();
        StoredGroup {
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            generation_id: self.generation_id,
            protocol_name: self.protocol_name.clone(),
            leader_id: self.leader_id.clone(),
            current_state_timestamp_ms: self.state_since_ms,
            members: self
                .members
                .iter()
                .map(|(id, m)| StoredMember {
                    member_id: id.clone(),
                    group_instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    session_timeout_ms: m.session_timeout_ms,
                    subscription: m.metadata(protocol),
                    assignment: assignments
                        .and_then(|a| a.get(id).cloned())
                        .unwrap_or_else(|| m.assignment.clone()),
                })
                .collect(),
        }
    }

    pub(super) fn join_result(&self, member_id: &str) -> JoinResult {
        let protocol = self.protocol_name.as_deref();
        let members = if self.is_leader(member_id) {
            self.members
                .iter()
                .map(|(id, m)| JoinedMember {
                    member_id: id.clone(),
                    group_instance_id: m.instance_id.clone(),
                    metadata: m.metadata(protocol),
                })
                .collect()
        } else {
            Vec::new()
        };
        JoinResult {
            error: None,
            generation_id: self.generation_id,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            leader_id: self.leader_id.clone().unwrap_or_default(),
            member_id: member_id.to_string(),
            members,
        }
    }
}

/// What a member's protocols add to the group's record, at most.
pub(super) fn stored_bytes(protocols: &[(String, Bytes)]) -> usize {
    protocols
        .iter()
        .map(|(name, metadata)| name.len() + metadata.len())
        .sum()
}

/// Restores a group from its stored record: Stable with its members, or Empty.
pub(super) fn restore(group: &mut Group, stored: StoredGroup, now: i64) {
    group.generation_id = stored.generation_id;
    group.protocol_type = Some(stored.protocol_type).filter(|t| !t.is_empty());
    group.protocol_name = stored.protocol_name.clone();
    group.leader_id = stored.leader_id;
    group.state_since_ms = if stored.current_state_timestamp_ms >= 0 {
        stored.current_state_timestamp_ms
    } else {
        now
    };
    for m in stored.members {
        if let Some(instance) = &m.group_instance_id {
            group.static_members.insert(instance.clone(), m.member_id.clone());
        }
        let protocols = stored
            .protocol_name
            .clone()
            .map(|p| vec![(p, m.subscription.clone())])
            .unwrap_or_default();
        group.members.insert(
            m.member_id,
            Member {
                instance_id: m.group_instance_id,
                client_id: m.client_id,
                client_host: m.client_host,
                session_timeout_ms: m.session_timeout_ms,
                rebalance_timeout_ms: m.rebalance_timeout_ms,
                protocols,
                assignment: m.assignment,
                awaiting_join: None,
                awaiting_sync: None,
                last_heartbeat_ms: now,
                is_new: false,
            },
        );
    }
    group.state = if group.members.is_empty() {
        GroupState::Empty
    } else {
        GroupState::Stable
    };
}

/// Kafka's member checks shared by SyncGroup and Heartbeat: a static member replaced by a
/// newer instance is fenced; an id the group does not know is unknown.
pub(super) fn check_member(group: &Group, member_id: &str, instance_id: Option<&str>) -> Result<(), ResponseError> {
    if group.is_static_member_fenced(member_id, instance_id) {
        return Err(ResponseError::FencedInstanceId);
    }
    if !group.members.contains_key(member_id) {
        return Err(ResponseError::UnknownMemberId);
    }
    Ok(())
}

//! Online migration between the classic and the consumer group protocols
//! (`group.consumer.migration.policy`; Kafka's `GroupMetadataManager.classicGroup*ToConsumerGroup`,
//! `convertToConsumerGroup` and `convertToClassicGroup`).
//!
//! - **Upgrade.** A KIP-848 member joining a classic group that has members and uses the
//!   consumer protocol type turns it into a consumer group: each classic member becomes a member
//!   at the group's generation, Stable, holding the partitions its last assignment gave it (also
//!   its target), so nobody loses a partition by the conversion. Requests waiting in a classic
//!   rebalance are answered REBALANCE_IN_PROGRESS.
//! - **Classic members inside a consumer group.** They keep speaking JoinGroup, SyncGroup,
//!   Heartbeat and LeaveGroup. A JoinGroup is a ConsumerGroupHeartbeat in disguise: its
//!   `ConsumerProtocolSubscription` gives the topics and the partitions the member still owns,
//!   it is reconciled as any member is, and its generation is its member epoch. SyncGroup hands
//!   out its assigned partitions as a `ConsumerProtocolAssignment`. A Heartbeat answers
//!   REBALANCE_IN_PROGRESS when the member must rejoin to move on (the group epoch moved, it
//!   must revoke, or partitions it waits for are free), and the member then has its rebalance
//!   timeout to rejoin and to sync, or it is removed.
//! - **Downgrade.** When the last KIP-848 member leaves (or is expired) and classic members
//!   remain, the group becomes classic again at its group epoch, with each member's target as
//!   its assignment, and a rebalance starts.
//!
//! Empty groups convert either way whatever the policy (`consumer_members.rs`, `members.rs`).

use std::collections::{BTreeSet, HashMap};

use bytes::{Buf, Bytes, BytesMut};
use indexmap::IndexMap;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    consumer_protocol_assignment, ConsumerProtocolAssignment, ConsumerProtocolSubscription,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use uuid::Uuid;

use super::consumer::{member_records, member_tombstones, partitions, ConsumerGroup, ConsumerMember, MemberState};
use super::consumer_members::{group_tombstones, settle, Change, HeartbeatError, Snapshot, TopicCatalog};
use super::group::{Group, Member};
use super::rebalance::prepare_rebalance;
use super::{Fx, GroupCoordinator, GroupState, JoinRequest, JoinResult, MemberError, SyncRequest, SyncResult};
use crate::group::assignor::Assignment;
use crate::group::consumer_records::{ConsumerRecord, StoredClassicMember};
use crate::group::records::GroupRecord;

/// The protocol type of clients that speak Kafka's embedded consumer protocol.
const CONSUMER_PROTOCOL_TYPE: &str = "consumer";

/// A member's `ConsumerProtocolSubscription`, as far as the coordinator uses it.
#[derive(Debug, Default)]
struct Subscription {
    /// Sorted, without repeats.
    topics: Vec<String>,
    owned: Vec<(String, Vec<i32>)>,
    rack: Option<String>,
}

/// Decodes `[version int16][ConsumerProtocolSubscription]`; `None` if it does not decode.
fn decode_subscription(metadata: &Bytes) -> Option<Subscription> {
    let mut buf = metadata.clone();
    if buf.remaining() < 2 {
        return None;
    }
    let version = buf.get_i16();
    let s = ConsumerProtocolSubscription::decode(&mut buf, version.clamp(0, 3)).ok()?;
    let topics: BTreeSet<String> = s.topics.iter().map(|t| t.to_string()).collect();
    Some(Subscription {
        topics: topics.into_iter().collect(),
        owned: s
            .owned_partitions
            .into_iter()
            .map(|tp| (tp.topic.0.to_string(), tp.partitions))
            .collect(),
        rack: s.rack_id.map(|r| r.to_string()),
    })
}

/// Decodes `[version int16][ConsumerProtocolAssignment]` as (topic, partitions); `None` if it
/// does not decode. An empty assignment (a member that has none yet) is an empty list.
fn decode_assignment(assignment: &Bytes) -> Option<Vec<(String, Vec<i32>)>> {
    if assignment.is_empty() {
        return Some(Vec::new());
    }
    let mut buf = assignment.clone();
    if buf.remaining() < 2 {
        return None;
    }
    let version = buf.get_i16();
    let a = ConsumerProtocolAssignment::decode(&mut buf, version.clamp(0, 3)).ok()?;
    Some(
        a.assigned_partitions
            .into_iter()
            .map(|tp| (tp.topic.0.to_string(), tp.partitions))
            .collect(),
    )
}

/// The version of the embedded protocol a member's first protocol speaks (its assignment is
/// written back at that version, as Kafka's `prepareAssignment`).
fn protocol_version(classic: &StoredClassicMember) -> i16 {
    classic
        .protocols
        .first()
        .map(|(_, m)| m)
        .filter(|m| m.len() >= 2)
        .map_or(0, |m| i16::from_be_bytes([m[0], m[1]]).clamp(0, 3))
}

/// `assignment` as `[version int16][ConsumerProtocolAssignment]`, topics named by `names`
/// (a partition of a topic gone from the metadata is left out).
fn encode_assignment(assignment: &Assignment, names: &HashMap<Uuid, String>, version: i16) -> Bytes {
    let assigned_partitions = assignment
        .iter()
        .filter_map(|(id, ps)| {
            let name = names.get(id)?;
            Some(
                consumer_protocol_assignment::TopicPartition::default()
                    .with_topic(StrBytes::from_string(name.clone()).into())
                    .with_partitions(ps.iter().copied().collect()),
            )
        })
        .collect();
    let message = ConsumerProtocolAssignment::default().with_assigned_partitions(assigned_partitions);
    let mut buf = BytesMut::new();
    buf.extend_from_slice(&version.to_be_bytes());
    // Encoding a message built here cannot fail; an empty assignment is what a failure would give.
    if message.encode(&mut buf, version).is_err() {
        return Bytes::new();
    }
    buf.freeze()
}

/// Topic names by id, from what the group's subscriptions resolved to.
fn topic_names(cg: &ConsumerGroup) -> HashMap<Uuid, String> {
    cg.subscribed
        .iter()
        .map(|(name, (id, _))| (*id, name.clone()))
        .collect()
}

/// Partitions named by topic as an assignment by topic id: topics the catalog does not know
/// and partitions it does not have are left out.
fn by_topic_id(named: &[(String, Vec<i32>)], topics: &dyn TopicCatalog) -> Assignment {
    let mut out = Assignment::new();
    for (name, ps) in named {
        let Some((id, count)) = topics.topic(name) else {
            continue;
        };
        let valid: BTreeSet<i32> = ps.iter().copied().filter(|p| (0..count).contains(p)).collect();
        if !valid.is_empty() {
            out.entry(id).or_default().extend(valid);
        }
    }
    out
}

/// Finds a classic member of a consumer group by id, or by instance id for a static member
/// (an instance now under another id is fenced).
fn classic_member<'a>(
    cg: &'a mut ConsumerGroup,
    member_id: &str,
    instance_id: Option<&str>,
) -> Result<&'a mut ConsumerMember, ResponseError> {
    let id = match instance_id {
        Some(instance) => {
            let known = cg
                .static_members
                .get(instance)
                .cloned()
                .ok_or(ResponseError::UnknownMemberId)?;
            if known != member_id {
                return Err(ResponseError::FencedInstanceId);
            }
            known
        }
        None => member_id.to_string(),
    };
    match cg.members.get_mut(&id) {
        Some(member) if member.classic.is_some() => Ok(member),
        _ => Err(ResponseError::UnknownMemberId),
    }
}

/// Whether a member waiting for partitions still waits: one of its target's is held by another.
fn waits_on_unreleased(cg: &ConsumerGroup, member_id: &str, member: &ConsumerMember) -> bool {
    member.state == MemberState::UnreleasedPartitions
        && cg
            .target
            .get(member_id)
            .is_some_and(|target| partitions(target).any(|tp| cg.holder(&tp).is_some_and(|holder| holder != member_id)))
}

impl GroupCoordinator {
    /// Whether `group_id` is a consumer group with members: classic JoinGroups then go to
    /// [`GroupCoordinator::classic_join_consumer_group`].
    pub fn has_consumer_members(&self, group_id: &str) -> bool {
        self.owner(group_id).is_ok()
            && self
                .groups
                .get(group_id)
                .and_then(|g| g.consumer.as_ref())
                .is_some_and(|cg| !cg.members.is_empty())
    }

    /// A classic member's JoinGroup to a consumer group with members: reconciled as a
    /// ConsumerGroupHeartbeat, answered with its member epoch as the generation and no leader
    /// (every member gets its assignment from the coordinator in SyncGroup). The records are
    /// stored before the answer goes out.
    pub fn classic_join_consumer_group(
        &mut self,
        req: &JoinRequest,
        topics: &dyn TopicCatalog,
        now: i64,
    ) -> (JoinResult, Vec<GroupRecord>) {
        self.try_classic_join(req, topics, now)
            .unwrap_or_else(|error| (JoinResult::failed(&req.member_id, error), Vec::new()))
    }

    fn try_classic_join(
        &mut self,
        req: &JoinRequest,
        topics: &dyn TopicCatalog,
        now: i64,
    ) -> Result<(JoinResult, Vec<GroupRecord>), ResponseError> {
        self.owner(&req.group_id)?;
        let session = req.session_timeout_ms;
        if session < self.config.min_session_timeout_ms || session > self.config.max_session_timeout_ms {
            return Err(ResponseError::InvalidSessionTimeout);
        }
        if req.protocol_type != CONSUMER_PROTOCOL_TYPE || req.protocols.is_empty() {
            return Err(ResponseError::InconsistentGroupProtocol);
        }
        let subscription = decode_subscription(&req.protocols[0].1).ok_or(ResponseError::InconsistentGroupProtocol)?;
        let max_size = self.config.max_size;
        let default_assignor = self.default_assignor();
        let cg = self
            .groups
            .get_mut(&req.group_id)
            .and_then(|g| g.consumer.as_mut())
            .ok_or(ResponseError::UnknownMemberId)?;
        let member_id = if req.member_id.is_empty() {
            req.new_member_id.clone()
        } else {
            req.member_id.clone()
        };
        if req.member_id.is_empty() && req.require_known_member_id {
            // KIP-394: the member rejoins with this id; nothing is kept until it does.
            return Ok((
                JoinResult {
                    member_id,
                    ..JoinResult::failed("", ResponseError::MemberIdRequired)
                },
                Vec::new(),
            ));
        }
        let snapshot = Snapshot::of(cg, &member_id, true);
        let (mut member, is_new) = match req
            .group_instance_id
            .as_ref()
            .and_then(|i| cg.static_members.get(i).cloned())
        {
            Some(known) if known == member_id => existing_classic(cg, &member_id)?,
            Some(known) => {
                if !req.member_id.is_empty() {
                    return Err(ResponseError::FencedInstanceId);
                }
                // The instance is back under a new id: it takes over the old one's record.
                let member = cg
                    .rename_member(&known, &member_id)
                    .ok_or(ResponseError::UnknownMemberId)?;
                (member, false)
            }
            None => match cg.members.get(&member_id) {
                Some(_) => existing_classic(cg, &member_id)?,
                None => {
                    if cg.members.len() >= max_size {
                        return Err(ResponseError::GroupMaxSizeReached);
                    }
                    (
                        ConsumerMember::new(req.client_id.clone(), req.client_host.clone(), now),
                        true,
                    )
                }
            },
        };
        let changed = is_new
            || member.subscribed_topic_names != subscription.topics
            || member.subscribed_topic_regex.is_some()
            || member.server_assignor.is_some();
        member.subscribed_topic_names = subscription.topics.clone();
        member.subscribed_topic_regex = None;
        member.server_assignor = None;
        if subscription.rack.is_some() {
            member.rack_id = subscription.rack.clone();
        }
        if req.rebalance_timeout_ms > 0 {
            member.rebalance_timeout_ms = req.rebalance_timeout_ms;
        }
        member.instance_id = req.group_instance_id.clone();
        member.client_id = req.client_id.clone();
        member.client_host = req.client_host.clone();
        member.classic = Some(StoredClassicMember {
            session_timeout_ms: session,
            protocols: req.protocols.clone(),
        });
        member.last_heartbeat_ms = now;
        // It must now sync within its rebalance timeout.
        member.classic_deadline_ms = Some(now + i64::from(member.rebalance_timeout_ms.max(0)));
        cg.put_member(&member_id, member);
        let owned = by_topic_id(&subscription.owned, topics);
        let (next, records) = settle(
            cg,
            &req.group_id,
            &member_id,
            Change { changed, is_new },
            Some(&owned),
            snapshot,
            topics,
            default_assignor,
        );
        let result = JoinResult {
            error: None,
            generation_id: next.member_epoch,
            protocol_type: Some(CONSUMER_PROTOCOL_TYPE.into()),
            protocol_name: Some(req.protocols[0].0.clone()),
            leader_id: String::new(),
            member_id,
            members: Vec::new(),
        };
        Ok((result, records))
    }

    /// A classic member's SyncGroup in a consumer group: its assigned partitions, unless the
    /// group moved on and it must rejoin first.
    pub(super) fn classic_sync_consumer_group(
        &mut self,
        req: &SyncRequest,
        now: i64,
    ) -> Result<SyncResult, ResponseError> {
        let cg = self
            .groups
            .get_mut(&req.group_id)
            .and_then(|g| g.consumer.as_mut())
            .ok_or(ResponseError::UnknownMemberId)?;
        let group_epoch = cg.group_epoch;
        let names = topic_names(cg);
        let member = classic_member(cg, &req.member_id, req.group_instance_id.as_deref())?;
        if req.generation_id != member.member_epoch {
            return Err(ResponseError::IllegalGeneration);
        }
        let classic = member.classic.as_ref().expect("a classic member");
        let protocol_name = classic.protocols.first().map(|(n, _)| n.clone());
        let type_mismatch = req
            .protocol_type
            .as_deref()
            .is_some_and(|t| t != CONSUMER_PROTOCOL_TYPE);
        let name_mismatch = req.protocol_name.is_some() && req.protocol_name != protocol_name;
        if type_mismatch || name_mismatch {
            return Err(ResponseError::InconsistentGroupProtocol);
        }
        member.last_heartbeat_ms = now;
        if group_epoch > member.member_epoch && member.state != MemberState::UnrevokedPartitions {
            let timeout = i64::from(member.rebalance_timeout_ms.max(0));
            member.classic_deadline_ms.get_or_insert(now + timeout);
            return Err(ResponseError::RebalanceInProgress);
        }
        member.classic_deadline_ms = None;
        let assignment = encode_assignment(&member.assigned, &names, protocol_version(classic));
        Ok(SyncResult {
            error: None,
            protocol_type: Some(CONSUMER_PROTOCOL_TYPE.into()),
            protocol_name,
            assignment,
        })
    }

    /// A classic member's Heartbeat in a consumer group: REBALANCE_IN_PROGRESS when it must
    /// rejoin to move towards its target (Kafka's three cases), and then it has its rebalance
    /// timeout to do so.
    pub(super) fn classic_heartbeat_consumer_group(
        &mut self,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation_id: i32,
        now: i64,
    ) -> Result<(), ResponseError> {
        let cg = self
            .groups
            .get_mut(group_id)
            .and_then(|g| g.consumer.as_mut())
            .ok_or(ResponseError::UnknownMemberId)?;
        let group_epoch = cg.group_epoch;
        let member = classic_member(cg, member_id, instance_id)?.clone();
        if generation_id != member.member_epoch {
            return Err(ResponseError::IllegalGeneration);
        }
        let rejoin = member.member_epoch < group_epoch
            || member.state == MemberState::UnrevokedPartitions
            || (member.state == MemberState::UnreleasedPartitions && !waits_on_unreleased(cg, member_id, &member));
        let member = cg.members.get_mut(member_id).expect("found above under this id");
        member.last_heartbeat_ms = now;
        if rejoin {
            let timeout = i64::from(member.rebalance_timeout_ms.max(0));
            member.classic_deadline_ms.get_or_insert(now + timeout);
            return Err(ResponseError::RebalanceInProgress);
        }
        Ok(())
    }

    /// A classic LeaveGroup to a consumer group: each named classic member is removed and the
    /// group epoch moves so the others get its partitions.
    pub(super) fn classic_leave_consumer_group(
        &mut self,
        group_id: &str,
        leaving: &[(String, Option<String>)],
    ) -> (Vec<MemberError>, Vec<GroupRecord>) {
        let mut errors = Vec::with_capacity(leaving.len());
        let mut records = Vec::new();
        let Some(cg) = self.groups.get_mut(group_id).and_then(|g| g.consumer.as_mut()) else {
            return (vec![Some(ResponseError::UnknownMemberId); leaving.len()], records);
        };
        for (member_id, instance_id) in leaving {
            // An admin may name a static member by its instance id alone.
            let id = match (member_id.is_empty(), instance_id) {
                (true, Some(instance)) => cg.static_members.get(instance).cloned().unwrap_or_default(),
                _ => member_id.clone(),
            };
            match classic_member(cg, &id, instance_id.as_deref()) {
                Ok(_) => {
                    tracing::info!(group = %group_id, member = %id, "classic member left the consumer group");
                    cg.remove_member(&id);
                    records.extend(member_tombstones(group_id, &id));
                    errors.push(None);
                }
                Err(e) => errors.push(Some(e)),
            }
        }
        if !records.is_empty() {
            records.push(GroupRecord::Consumer(ConsumerRecord::GroupEpoch {
                group_id: group_id.to_string(),
                epoch: Some(cg.group_epoch),
            }));
        }
        (errors, records)
    }

    /// Upgrade: a KIP-848 member joins classic group `group_id` that has members. Returns the
    /// conversion's records (the classic record's tombstone, then the consumer group's), or
    /// why it cannot convert; waiting JoinGroup and SyncGroup requests get their answers in
    /// `fx`.
    pub(super) fn upgrade_to_consumer_group(
        &mut self,
        group_id: &str,
        topics: &dyn TopicCatalog,
        now: i64,
        fx: &mut Fx,
    ) -> Result<Vec<GroupRecord>, HeartbeatError> {
        let refuse = |why: String| (ResponseError::GroupIdNotFound, why);
        if !self.config.migration_policy.upgrade() {
            return Err(refuse(format!(
                "Group {group_id:?} is a classic group with members and group.consumer.migration.policy does not allow upgrading it; its consumers must all leave before members using group.protocol=consumer can join."
            )));
        }
        let max_size = self.config.max_size;
        let Some(group) = self.groups.get_mut(group_id) else {
            return Err(refuse(format!("Group {group_id:?} does not exist.")));
        };
        if group.protocol_type.as_deref() != Some(CONSUMER_PROTOCOL_TYPE) {
            return Err(refuse(format!(
                "Group {group_id:?} is a classic group of protocol type {:?}, not consumer, so members using group.protocol=consumer cannot join it.",
                group.protocol_type.as_deref().unwrap_or_default()
            )));
        }
        if group.members.len() >= max_size {
            return Err(refuse(format!(
                "Group {group_id:?} already has group.max.size ({max_size}) members."
            )));
        }
        let mut cg = ConsumerGroup::default();
        cg.group_epoch = group.generation_id;
        cg.assignment_epoch = group.generation_id;
        let protocol = group.protocol_name.clone();
        let mut converted = Vec::with_capacity(group.members.len());
        for (id, m) in &group.members {
            let metadata = protocol
                .as_deref()
                .and_then(|p| m.protocols.iter().find(|(n, _)| n == p))
                .or(m.protocols.first())
                .map(|(_, b)| b.clone())
                .unwrap_or_default();
            let malformed = || {
                refuse(format!(
                    "Group {group_id:?} cannot become a consumer group: member {id}'s embedded consumer protocol is malformed."
                ))
            };
            let subscription = decode_subscription(&metadata).ok_or_else(malformed)?;
            let assigned = decode_assignment(&m.assignment).ok_or_else(malformed)?;
            converted.push((id.clone(), m, subscription, by_topic_id(&assigned, topics)));
        }
        for (id, m, subscription, mut assigned) in converted {
            // A leader's bug could give a partition twice: the first member keeps it.
            for (topic, ps) in assigned.iter_mut() {
                ps.retain(|p| cg.holder(&(*topic, *p)).is_none());
            }
            assigned.retain(|_, ps| !ps.is_empty());
            let mut member = ConsumerMember::new(m.client_id.clone(), m.client_host.clone(), now);
            member.member_epoch = group.generation_id;
            member.previous_member_epoch = group.generation_id;
            member.instance_id = m.instance_id.clone();
            member.rack_id = subscription.rack;
            member.subscribed_topic_names = subscription.topics;
            member.rebalance_timeout_ms = m.rebalance_timeout_ms;
            member.classic = Some(StoredClassicMember {
                session_timeout_ms: m.session_timeout_ms,
                protocols: m.protocols.clone(),
            });
            member.assigned = assigned.clone();
            cg.target.insert(id.clone(), assigned);
            cg.put_member(&id, member);
        }
        for (id, member) in group.members.iter_mut() {
            member.fail_waiting(id, ResponseError::RebalanceInProgress, fx);
        }
        let mut records = vec![GroupRecord::Group {
            group_id: group_id.to_string(),
            value: None,
        }];
        records.extend(consumer_group_records(group_id, &cg));
        tracing::info!(
            group = %group_id,
            generation = group.generation_id,
            members = cg.members.len(),
            "a member using group.protocol=consumer joined a classic group: converting it to a consumer group"
        );
        clear_classic(group, now);
        group.protocol_type = Some(CONSUMER_PROTOCOL_TYPE.into());
        group.consumer = Some(Box::new(cg));
        Ok(records)
    }

    /// Downgrade: `leaving`, a KIP-848 member, is about to be removed from consumer group
    /// `group_id`; if every other member speaks the classic protocol and the policy allows,
    /// the group becomes classic at its group epoch and starts a rebalance. Returns the records
    /// (the consumer group's tombstones, then the classic record), or `None` when the group
    /// stays a consumer group (the caller removes the member then).
    pub(super) fn maybe_downgrade(
        &mut self,
        group_id: &str,
        leaving: &str,
        now: i64,
        fx: &mut Fx,
    ) -> Option<Vec<GroupRecord>> {
        let config = self.config.clone();
        let group = self.groups.get_mut(group_id)?;
        let cg = group.consumer.as_ref()?;
        let others = || cg.members.iter().filter(|(id, _)| id.as_str() != leaving);
        let leaving_is_consumer = cg.members.get(leaving).is_some_and(|m| m.classic.is_none());
        let all_classic = others().all(|(_, m)| m.classic.is_some());
        let count = others().count();
        if !leaving_is_consumer || !all_classic || count == 0 {
            return None;
        }
        if !config.migration_policy.downgrade() {
            tracing::info!(group = %group_id, "the last member using group.protocol=consumer left; group.consumer.migration.policy keeps the group a consumer group");
            return None;
        }
        if count > config.max_size {
            return None;
        }
        let names = topic_names(cg);
        let mut records = Vec::new();
        for id in cg.members.keys() {
            records.extend(member_tombstones(group_id, id));
        }
        records.extend(group_tombstones(group_id));
        let mut members = IndexMap::new();
        let mut static_members = HashMap::new();
        for (id, m) in others() {
            let classic = m.classic.clone().expect("checked above");
            let target = cg.target.get(id).cloned().unwrap_or_default();
            if let Some(instance) = &m.instance_id {
                static_members.insert(instance.clone(), id.clone());
            }
            members.insert(
                id.clone(),
                Member {
                    instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    session_timeout_ms: classic.session_timeout_ms,
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    assignment: encode_assignment(&target, &names, protocol_version(&classic)),
                    protocols: classic.protocols,
                    awaiting_join: None,
                    awaiting_sync: None,
                    last_heartbeat_ms: now,
                    is_new: false,
                },
            );
        }
        let generation = cg.group_epoch;
        tracing::info!(
            group = %group_id,
            generation,
            members = members.len(),
            "the last member using group.protocol=consumer left: converting the group back to a classic group"
        );
        clear_classic(group, now);
        group.consumer = None;
        group.protocol_type = Some(CONSUMER_PROTOCOL_TYPE.into());
        group.generation_id = generation;
        group.leader_id = members.keys().next().cloned();
        group.members = members;
        group.static_members = static_members;
        group.protocol_name = group.select_protocol();
        // Built as Stable, as a group restored from its record is; the rebalance follows.
        group.state = GroupState::Stable;
        records.push(GroupRecord::Group {
            group_id: group_id.to_string(),
            value: Some(group.stored(None)),
        });
        prepare_rebalance(group, &config, now, fx);
        Some(records)
    }
}

/// A classic member found by its id: it must speak the classic protocol.
fn existing_classic(cg: &ConsumerGroup, member_id: &str) -> Result<(ConsumerMember, bool), ResponseError> {
    match cg.members.get(member_id) {
        Some(m) if m.classic.is_some() => Ok((m.clone(), false)),
        _ => Err(ResponseError::UnknownMemberId),
    }
}

/// The records of a whole consumer group just made from a classic one, in Kafka's order
/// (`createConsumerGroupRecords`).
fn consumer_group_records(group_id: &str, cg: &ConsumerGroup) -> Vec<GroupRecord> {
    let mut records = Vec::new();
    for (id, m) in &cg.members {
        records.extend(
            member_records(group_id, id, None, m)
                .into_iter()
                .filter(|r| matches!(r, GroupRecord::Consumer(ConsumerRecord::Member { .. }))),
        );
    }
    records.push(GroupRecord::Consumer(ConsumerRecord::GroupEpoch {
        group_id: group_id.to_string(),
        epoch: Some(cg.group_epoch),
    }));
    for (id, target) in &cg.target {
        records.push(GroupRecord::Consumer(ConsumerRecord::TargetMember {
            group_id: group_id.to_string(),
            member_id: id.clone(),
            value: Some(target.clone()),
        }));
    }
    records.push(GroupRecord::Consumer(ConsumerRecord::TargetEpoch {
        group_id: group_id.to_string(),
        epoch: Some(cg.assignment_epoch),
    }));
    for (id, m) in &cg.members {
        records.extend(
            member_records(group_id, id, None, m)
                .into_iter()
                .filter(|r| matches!(r, GroupRecord::Consumer(ConsumerRecord::CurrentAssignment { .. }))),
        );
    }
    records
}

/// Drops a group's classic membership and rebalance state (its offsets stay), leaving it Empty
/// as a group that never had members is: the group is about to change protocol.
fn clear_classic(group: &mut Group, now: i64) {
    group.members.clear();
    group.pending_members.clear();
    group.static_members.clear();
    group.pending_sync.clear();
    group.pending_assignment = None;
    group.initial_delay = None;
    group.leader_id = None;
    group.protocol_name = None;
    group.state = GroupState::Empty;
    group.state_since_ms = now;
}

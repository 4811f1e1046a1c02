//! Kafka's classic group protocol as a pure state machine (Kafka's `GroupCoordinator` and
//! `GroupMetadata`): requests, loaded records and the time go in; responses, records to
//! store and tombstones come out as [`Effect`]s. No I/O, no clock, no randomness (the glue
//! passes new member ids in), so every rebalance can be replayed in a unit test.
//!
//! States: Empty → PreparingRebalance (members (re)join) → CompletingRebalance (the leader
//! computes assignments) → Stable; Dead once deleted or moved away. A JoinGroup answer waits
//! until every known member has rejoined or the rebalance timeout passes; a SyncGroup answer
//! waits until the leader's assignment is stored in `__consumer_offsets`.
//!
//! The coordinator serves only groups whose `__consumer_offsets` partition this broker leads
//! and has loaded: others get NOT_COORDINATOR, loading ones COORDINATOR_LOAD_IN_PROGRESS.

use std::collections::{HashMap, HashSet};

use bytes::Bytes;
use indexmap::IndexMap;
use kafka_protocol::error::ResponseError;

use super::records::{GroupRecord, OffsetAndMetadata, StoredGroup, StoredMember};
pub use crate::config::GroupConfig;

/// Identifies a JoinGroup or SyncGroup request waiting for its answer.
pub type ReplyId = u64;

/// A member that has not rejoined during a rebalance is dropped after this long if it is new
/// (Kafka's `NewMemberJoinTimeoutMs`), so a client that vanished mid-join cannot hold a group.
const NEW_MEMBER_JOIN_TIMEOUT_MS: i64 = 300_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
}

impl GroupState {
    /// The name Kafka's DescribeGroups and ListGroups report.
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }
}

/// The `__consumer_offsets` partition that holds a group: Kafka's
/// `Utils.abs(groupId.hashCode()) % partitions`, with Java's UTF-16 `String.hashCode`.
pub fn partition_for(group_id: &str, num_partitions: i32) -> i32 {
    let hash = group_id
        .encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)));
    let abs = if hash == i32::MIN { 0 } else { hash.abs() };
    abs % num_partitions.max(1)
}

pub struct JoinRequest {
    pub group_id: String,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
    /// JoinGroup v4+: a first join gets MEMBER_ID_REQUIRED and an id to rejoin with (KIP-394).
    pub require_known_member_id: bool,
    /// The id this member gets if it is new (`<client or instance id>-<uuid>`, made by the caller).
    pub new_member_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinedMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub metadata: Bytes,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinResult {
    pub error: Option<ResponseError>,
    pub generation_id: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader_id: String,
    pub member_id: String,
    /// Only the leader gets the members and their metadata, to compute the assignment.
    pub members: Vec<JoinedMember>,
}

impl JoinResult {
    fn failed(member_id: &str, error: ResponseError) -> Self {
        JoinResult {
            error: Some(error),
            generation_id: -1,
            protocol_type: None,
            protocol_name: None,
            leader_id: String::new(),
            member_id: member_id.to_string(),
            members: Vec::new(),
        }
    }
}

pub struct SyncRequest {
    pub group_id: String,
    pub generation_id: i32,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignments: Vec<(String, Bytes)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncResult {
    pub error: Option<ResponseError>,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignment: Bytes,
}

impl SyncResult {
    /// A member's assignment in the group's current protocol.
    fn assigned(protocol_type: &Option<String>, protocol_name: &Option<String>, assignment: &Bytes) -> Self {
        SyncResult {
            error: None,
            protocol_type: protocol_type.clone(),
            protocol_name: protocol_name.clone(),
            assignment: assignment.clone(),
        }
    }

    fn failed(error: ResponseError) -> Self {
        SyncResult {
            error: Some(error),
            protocol_type: None,
            protocol_name: None,
            assignment: Bytes::new(),
        }
    }
}

/// What the glue must do for the state machine.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    Join(ReplyId, JoinResult),
    Sync(ReplyId, SyncResult),
    /// Append the group's record to its partition. With `completes_sync`, report the outcome
    /// back through [`GroupCoordinator::group_stored`]: the generation's SyncGroup answers wait on it.
    StoreGroup {
        partition: i32,
        group_id: String,
        group: StoredGroup,
        generation_id: i32,
        completes_sync: bool,
    },
    /// Append tombstones: for these offsets, and for the group record itself if `group`.
    Tombstones {
        partition: i32,
        group_id: String,
        offsets: Vec<(String, i32)>,
        group: bool,
    },
}

/// Committed offsets as `(topic, partition, offset)`; `None` where nothing was committed.
pub type CommittedOffsets = Vec<(String, i32, Option<OffsetAndMetadata>)>;

/// A member's answer in a batched LeaveGroup.
pub type MemberError = Option<ResponseError>;

#[derive(Debug, Clone)]
pub struct MemberSummary {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub metadata: Bytes,
    pub assignment: Bytes,
}

#[derive(Debug, Clone)]
pub struct GroupSummary {
    pub state: GroupState,
    pub protocol_type: String,
    pub protocol_name: String,
    pub members: Vec<MemberSummary>,
}

struct Member {
    instance_id: Option<String>,
    client_id: String,
    client_host: String,
    session_timeout_ms: i32,
    rebalance_timeout_ms: i32,
    protocols: Vec<(String, Bytes)>,
    assignment: Bytes,
    awaiting_join: Option<ReplyId>,
    awaiting_sync: Option<ReplyId>,
    last_heartbeat_ms: i64,
    is_new: bool,
}

impl Member {
    /// Answers this member's waiting JoinGroup and SyncGroup with `error`.
    fn fail_waiting(&mut self, member_id: &str, error: ResponseError, fx: &mut Fx) {
        if let Some(reply) = self.awaiting_join.take() {
            fx.push(Effect::Join(reply, JoinResult::failed(member_id, error)));
        }
        if let Some(reply) = self.awaiting_sync.take() {
            fx.push(Effect::Sync(reply, SyncResult::failed(error)));
        }
    }

    fn metadata(&self, protocol: Option<&str>) -> Bytes {
        protocol
            .and_then(|p| self.protocols.iter().find(|(name, _)| name == p))
            .map(|(_, m)| m.clone())
            .unwrap_or_default()
    }
}

/// Extra delays of the first rebalance of an empty group (Kafka's `InitialDelayedJoin`): each
/// delay that saw a new member is followed by another while the rebalance timeout allows.
struct InitialDelay {
    remaining_ms: i64,
}

struct Group {
    id: String,
    partition: i32,
    state: GroupState,
    state_since_ms: i64,
    generation_id: i32,
    protocol_type: Option<String>,
    protocol_name: Option<String>,
    leader_id: Option<String>,
    members: IndexMap<String, Member>,
    /// Ids handed out with MEMBER_ID_REQUIRED, with the time they lapse if unused.
    pending_members: HashMap<String, i64>,
    /// Static members: `group.instance.id` → member id.
    static_members: HashMap<String, String>,
    /// Members of this generation that have not sent SyncGroup yet.
    pending_sync: HashSet<String>,
    join_deadline_ms: i64,
    initial_delay: Option<InitialDelay>,
    new_member_added: bool,
    sync_deadline_ms: i64,
    /// The leader's assignment while it is being stored.
    pending_assignment: Option<HashMap<String, Bytes>>,
    offsets: HashMap<(String, i32), OffsetAndMetadata>,
}

impl Group {
    fn new(id: &str, partition: i32, now: i64) -> Self {
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
        }
    }

    fn transition(&mut self, state: GroupState, now: i64) {
        self.state = state;
        self.state_since_ms = now;
    }

    fn rebalance_timeout_ms(&self) -> i64 {
        self.members
            .values()
            .map(|m| i64::from(m.rebalance_timeout_ms))
            .max()
            .unwrap_or(0)
    }

    fn is_leader(&self, member_id: &str) -> bool {
        self.leader_id.as_deref() == Some(member_id)
    }

    /// Kafka's `supportsProtocols`: an empty group takes any non-empty offer; otherwise the
    /// type must match and one protocol must be supported by every member.
    fn supports_protocols(&self, protocol_type: &str, protocols: &[(String, Bytes)]) -> bool {
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
    fn select_protocol(&self) -> Option<String> {
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

    fn has_all_members_joined(&self) -> bool {
        self.pending_members.is_empty() && self.members.values().all(|m| m.awaiting_join.is_some())
    }

    fn is_static_member_fenced(&self, member_id: &str, instance_id: Option<&str>) -> bool {
        instance_id
            .and_then(|i| self.static_members.get(i))
            .is_some_and(|known| known != member_id)
    }

    fn stored(&self, assignments: Option<&HashMap<String, Bytes>>) -> StoredGroup {
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

    fn join_result(&self, member_id: &str) -> JoinResult {
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Load {
    Loading { epoch: i32 },
    Loaded { epoch: i32 },
}

/// Every group this broker coordinates.
pub struct GroupCoordinator {
    config: GroupConfig,
    groups: HashMap<String, Group>,
    /// `__consumer_offsets` partitions this broker leads, by leader epoch.
    partitions: HashMap<i32, Load>,
}

type Fx = Vec<Effect>;

impl GroupCoordinator {
    pub fn new(config: GroupConfig) -> Self {
        GroupCoordinator {
            config,
            groups: HashMap::new(),
            partitions: HashMap::new(),
        }
    }

    pub fn config(&self) -> &GroupConfig {
        &self.config
    }

    pub fn partition_for(&self, group_id: &str) -> i32 {
        partition_for(group_id, self.config.num_partitions)
    }

    /// The partition of a group this broker serves, or the error that sends the client elsewhere.
    fn owner(&self, group_id: &str) -> Result<i32, ResponseError> {
        if group_id.is_empty() {
            return Err(ResponseError::InvalidGroupId);
        }
        let partition = self.partition_for(group_id);
        match self.partitions.get(&partition) {
            Some(Load::Loaded { .. }) => Ok(partition),
            Some(Load::Loading { .. }) => Err(ResponseError::CoordinatorLoadInProgress),
            None => Err(ResponseError::NotCoordinator),
        }
    }

    // ---- partition ownership ----

    /// Partitions this broker leads (loaded or loading) with their leader epochs.
    pub fn owned_partitions(&self) -> HashMap<i32, i32> {
        self.partitions
            .iter()
            .map(|(p, l)| {
                let (Load::Loading { epoch } | Load::Loaded { epoch }) = l;
                (*p, *epoch)
            })
            .collect()
    }

    /// This broker became leader of `partition` at `epoch`: its groups load next.
    pub fn begin_load(&mut self, partition: i32, epoch: i32) -> Fx {
        let fx = self.unload(partition);
        self.partitions.insert(partition, Load::Loading { epoch });
        fx
    }

    /// Replays the partition's records (in log order) and starts serving its groups. Returns
    /// false if leadership moved on since the load began (the records are dropped).
    pub fn complete_load(
        &mut self,
        partition: i32,
        epoch: i32,
        records: impl IntoIterator<Item = GroupRecord>,
        now: i64,
    ) -> bool {
        if self.partitions.get(&partition) != Some(&Load::Loading { epoch }) {
            return false;
        }
        let mut stored: HashMap<String, StoredGroup> = HashMap::new();
        let mut offsets: HashMap<String, HashMap<(String, i32), OffsetAndMetadata>> = HashMap::new();
        for record in records {
            match record {
                GroupRecord::Offset {
                    group_id,
                    topic,
                    partition: p,
                    value,
                } => {
                    let group = offsets.entry(group_id).or_default();
                    match value {
                        Some(v) => group.insert((topic, p), v),
                        None => group.remove(&(topic, p)),
                    };
                }
                GroupRecord::Group { group_id, value } => match value {
                    Some(v) => {
                        stored.insert(group_id, v);
                    }
                    None => {
                        stored.remove(&group_id);
                    }
                },
            }
        }
        offsets.retain(|_, o| !o.is_empty());
        let ids: HashSet<String> = stored.keys().chain(offsets.keys()).cloned().collect();
        for id in ids {
            if partition_for(&id, self.config.num_partitions) != partition {
                continue;
            }
            let mut group = Group::new(&id, partition, now);
            if let Some(s) = stored.remove(&id) {
                restore(&mut group, s, now);
            }
            group.offsets = offsets.remove(&id).unwrap_or_default();
            self.groups.insert(id, group);
        }
        self.partitions.insert(partition, Load::Loaded { epoch });
        true
    }

    /// This broker no longer leads `partition`: its groups go (their clients find the new
    /// coordinator), and requests waiting on them are answered NOT_COORDINATOR.
    pub fn unload(&mut self, partition: i32) -> Fx {
        let mut fx = Vec::new();
        if self.partitions.remove(&partition).is_none() {
            return fx;
        }
        let ids: Vec<String> = self
            .groups
            .iter()
            .filter(|(_, g)| g.partition == partition)
            .map(|(id, _)| id.clone())
            .collect();
        for id in ids {
            if let Some(mut group) = self.groups.remove(&id) {
                for (member_id, member) in group.members.iter_mut() {
                    member.fail_waiting(member_id, ResponseError::NotCoordinator, &mut fx);
                }
            }
        }
        fx
    }

    // ---- JoinGroup ----

    pub fn join_group(&mut self, request: JoinRequest, reply: ReplyId, now: i64) -> Fx {
        let mut fx = Vec::new();
        if let Err(error) = self.try_join(&request, reply, now, &mut fx) {
            fx.push(Effect::Join(reply, JoinResult::failed(&request.member_id, error)));
        }
        fx
    }

    fn try_join(&mut self, req: &JoinRequest, reply: ReplyId, now: i64, fx: &mut Fx) -> Result<(), ResponseError> {
        let partition = self.owner(&req.group_id)?;
        let session = req.session_timeout_ms;
        if session < self.config.min_session_timeout_ms || session > self.config.max_session_timeout_ms {
            return Err(ResponseError::InvalidSessionTimeout);
        }
        if req.protocol_type.is_empty() || req.protocols.is_empty() {
            return Err(ResponseError::InconsistentGroupProtocol);
        }
        let is_unknown = req.member_id.is_empty();
        if !self.groups.contains_key(&req.group_id) {
            if !is_unknown {
                return Err(ResponseError::UnknownMemberId);
            }
            self.groups
                .insert(req.group_id.clone(), Group::new(&req.group_id, partition, now));
        }
        let config = self.config.clone();
        let group = self.groups.get_mut(&req.group_id).expect("inserted above");
        if group.state == GroupState::Dead {
            return Err(ResponseError::CoordinatorNotAvailable);
        }
        if !group.supports_protocols(&req.protocol_type, &req.protocols) {
            return Err(ResponseError::InconsistentGroupProtocol);
        }
        let others: usize = group
            .members
            .iter()
            .filter(|(id, _)| **id != req.member_id)
            .map(|(_, m)| stored_bytes(&m.protocols) + m.assignment.len())
            .sum();
        if others + stored_bytes(&req.protocols) > config.max_group_record_bytes {
            return Err(ResponseError::GroupMaxSizeReached);
        }
        if is_unknown {
            join_unknown_member(group, &config, req, reply, now, fx)
        } else {
            join_known_member(group, &config, req, reply, now, fx)
        }
    }

    // ---- SyncGroup ----

    pub fn sync_group(&mut self, req: SyncRequest, reply: ReplyId, now: i64) -> Fx {
        let mut fx = Vec::new();
        if let Err(error) = self.try_sync(req, reply, now, &mut fx) {
            fx.push(Effect::Sync(reply, SyncResult::failed(error)));
        }
        fx
    }

    fn try_sync(&mut self, req: SyncRequest, reply: ReplyId, now: i64, fx: &mut Fx) -> Result<(), ResponseError> {
        self.owner(&req.group_id)?;
        let group = self
            .groups
            .get_mut(&req.group_id)
            .ok_or(ResponseError::UnknownMemberId)?;
        check_member(group, &req.member_id, req.group_instance_id.as_deref())?;
        if req.generation_id != group.generation_id {
            return Err(ResponseError::IllegalGeneration);
        }
        let type_mismatch = req.protocol_type.is_some() && req.protocol_type != group.protocol_type;
        let name_mismatch = req.protocol_name.is_some() && req.protocol_name != group.protocol_name;
        if type_mismatch || name_mismatch {
            return Err(ResponseError::InconsistentGroupProtocol);
        }
        match group.state {
            GroupState::Empty => return Err(ResponseError::UnknownMemberId),
            GroupState::Dead => return Err(ResponseError::CoordinatorNotAvailable),
            GroupState::PreparingRebalance => return Err(ResponseError::RebalanceInProgress),
            GroupState::Stable | GroupState::CompletingRebalance => {}
        }
        group.pending_sync.remove(&req.member_id);
        let member = group.members.get_mut(&req.member_id).expect("checked above");
        member.last_heartbeat_ms = now;
        match group.state {
            GroupState::Stable => {
                let result = SyncResult::assigned(&group.protocol_type, &group.protocol_name, &member.assignment);
                fx.push(Effect::Sync(reply, result));
                Ok(())
            }
            _ => {
                if let Some(previous) = member.awaiting_sync.replace(reply) {
                    fx.push(Effect::Sync(
                        previous,
                        SyncResult::failed(ResponseError::RebalanceInProgress),
                    ));
                }
                if group.is_leader(&req.member_id) && group.pending_assignment.is_none() {
                    let assignments: HashMap<String, Bytes> = req
                        .assignments
                        .into_iter()
                        .filter(|(id, _)| group.members.contains_key(id))
                        .collect();
                    fx.push(Effect::StoreGroup {
                        partition: group.partition,
                        group_id: req.group_id.clone(),
                        group: group.stored(Some(&assignments)),
                        generation_id: group.generation_id,
                        completes_sync: true,
                    });
                    group.pending_assignment = Some(assignments);
                }
                Ok(())
            }
        }
    }

    /// The outcome of storing a generation's assignment ([`Effect::StoreGroup`] with
    /// `completes_sync`): members get their assignments and the group is Stable, or the
    /// storing failed, they get `error` and the group rebalances.
    pub fn group_stored(
        &mut self,
        group_id: &str,
        generation_id: i32,
        result: Result<(), ResponseError>,
        now: i64,
    ) -> Fx {
        let mut fx = Vec::new();
        let Some(group) = self.groups.get_mut(group_id) else {
            return fx;
        };
        if group.state != GroupState::CompletingRebalance || group.generation_id != generation_id {
            return fx;
        }
        let Some(mut assignments) = group.pending_assignment.take() else {
            return fx;
        };
        match result {
            Ok(()) => {
                for (id, member) in group.members.iter_mut() {
                    member.assignment = assignments.remove(id).unwrap_or_default();
                    if let Some(reply) = member.awaiting_sync.take() {
                        // Kafka restarts the session once the assignment is handed out.
                        member.last_heartbeat_ms = now;
                        let result =
                            SyncResult::assigned(&group.protocol_type, &group.protocol_name, &member.assignment);
                        fx.push(Effect::Sync(reply, result));
                    }
                }
                group.transition(GroupState::Stable, now);
            }
            Err(error) => {
                let config = self.config.clone();
                for member in group.members.values_mut() {
                    if let Some(reply) = member.awaiting_sync.take() {
                        member.last_heartbeat_ms = now;
                        fx.push(Effect::Sync(reply, SyncResult::failed(error)));
                    }
                }
                prepare_rebalance(group, &config, now, &mut fx);
            }
        }
        fx
    }

    // ---- Heartbeat ----

    pub fn heartbeat(
        &mut self,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation_id: i32,
        now: i64,
    ) -> Result<(), ResponseError> {
        self.owner(group_id)?;
        let group = self.groups.get_mut(group_id).ok_or(ResponseError::UnknownMemberId)?;
        match group.state {
            GroupState::Dead => return Err(ResponseError::CoordinatorNotAvailable),
            GroupState::Empty => return Err(ResponseError::UnknownMemberId),
            _ => {}
        }
        check_member(group, member_id, instance_id)?;
        if generation_id != group.generation_id {
            return Err(ResponseError::IllegalGeneration);
        }
        if let Some(member) = group.members.get_mut(member_id) {
            member.last_heartbeat_ms = now;
        }
        if group.state == GroupState::PreparingRebalance {
            return Err(ResponseError::RebalanceInProgress);
        }
        Ok(())
    }

    // ---- LeaveGroup ----

    /// Removes members (`(member id, instance id)`; an empty member id names a static member
    /// by its instance id). Per-member errors, or a group-level one.
    pub fn leave_group(
        &mut self,
        group_id: &str,
        leaving: &[(String, Option<String>)],
        now: i64,
    ) -> Result<(Vec<MemberError>, Fx), ResponseError> {
        self.owner(group_id)?;
        let mut fx = Vec::new();
        let config = self.config.clone();
        let Some(group) = self.groups.get_mut(group_id) else {
            return Ok((vec![Some(ResponseError::UnknownMemberId); leaving.len()], fx));
        };
        if group.state == GroupState::Dead {
            return Err(ResponseError::CoordinatorNotAvailable);
        }
        let mut errors = Vec::with_capacity(leaving.len());
        for (member_id, instance_id) in leaving {
            let member_id = match (member_id.is_empty(), instance_id) {
                (true, Some(instance)) => match group.static_members.get(instance) {
                    Some(id) => id.clone(),
                    None => {
                        errors.push(Some(ResponseError::UnknownMemberId));
                        continue;
                    }
                },
                _ => member_id.clone(),
            };
            if group.is_static_member_fenced(&member_id, instance_id.as_deref()) {
                errors.push(Some(ResponseError::FencedInstanceId));
            } else if group.pending_members.remove(&member_id).is_some() {
                try_complete_join(group, &config, now, &mut fx);
                errors.push(None);
            } else if group.members.contains_key(&member_id) {
                remove_member_and_update(group, &config, &member_id, now, &mut fx);
                errors.push(None);
            } else {
                errors.push(Some(ResponseError::UnknownMemberId));
            }
        }
        Ok((errors, fx))
    }

    // ---- timers ----

    /// Session expiry, join and sync deadlines, lapsed pending member ids.
    pub fn tick(&mut self, now: i64) -> Fx {
        let mut fx = Vec::new();
        let config = self.config.clone();
        for group in self.groups.values_mut() {
            let pending = group.pending_members.len();
            group.pending_members.retain(|_, deadline| *deadline > now);
            if group.pending_members.len() < pending {
                try_complete_join(group, &config, now, &mut fx);
            }
            let expired: Vec<String> = group
                .members
                .iter()
                .filter(|(_, m)| {
                    if m.awaiting_join.is_some() {
                        m.is_new && m.last_heartbeat_ms + NEW_MEMBER_JOIN_TIMEOUT_MS <= now
                    } else {
                        m.awaiting_sync.is_none() && m.last_heartbeat_ms + i64::from(m.session_timeout_ms) <= now
                    }
                })
                .map(|(id, _)| id.clone())
                .collect();
            for id in expired {
                tracing::info!(member = %id, generation = group.generation_id, "group member's session expired; removing it");
                remove_member_and_update(group, &config, &id, now, &mut fx);
            }
            match group.state {
                GroupState::PreparingRebalance if now >= group.join_deadline_ms => {
                    on_join_deadline(group, &config, now, &mut fx)
                }
                GroupState::CompletingRebalance | GroupState::Stable
                    if !group.pending_sync.is_empty() && now >= group.sync_deadline_ms =>
                {
                    let late: Vec<String> = group.pending_sync.drain().collect();
                    for id in late {
                        if let Some(member) = group.members.shift_remove(&id) {
                            forget_member(group, &id, member, &mut fx);
                        }
                    }
                    if group.state == GroupState::Stable || group.state == GroupState::CompletingRebalance {
                        prepare_rebalance(group, &config, now, &mut fx);
                        try_complete_join(group, &config, now, &mut fx);
                    }
                }
                _ => {}
            }
        }
        fx
    }

    /// Drops offsets past `offsets.retention.minutes` (Kafka's KIP-211 rule: a consumer
    /// group's offsets expire once it has been empty that long; standalone commits that long
    /// after they were made) and forgets empty groups left with none.
    pub fn expire_offsets(&mut self, now: i64) -> Fx {
        let retention = self.config.offsets_retention_ms;
        let mut fx = Vec::new();
        let mut dead = Vec::new();
        for (id, group) in self.groups.iter_mut() {
            if group.state != GroupState::Empty {
                continue;
            }
            let expired: Vec<(String, i32)> = group
                .offsets
                .iter()
                .filter(|(_, o)| {
                    let base = if group.protocol_type.is_some() {
                        group.state_since_ms
                    } else {
                        o.commit_timestamp_ms
                    };
                    base.saturating_add(retention) <= now
                })
                .map(|(k, _)| k.clone())
                .collect();
            for key in &expired {
                group.offsets.remove(key);
            }
            let gone = group.offsets.is_empty() && group.pending_members.is_empty();
            if !expired.is_empty() || gone {
                fx.push(Effect::Tombstones {
                    partition: group.partition,
                    group_id: id.clone(),
                    offsets: expired,
                    group: gone,
                });
            }
            if gone {
                dead.push(id.clone());
            }
        }
        for id in dead {
            self.groups.remove(&id);
        }
        fx
    }

    // ---- offsets ----

    /// Kafka's checks before an OffsetCommit is written; a group unknown here is created for
    /// a commit from outside group management (generation -1). Returns the group's partition.
    pub fn validate_commit(
        &mut self,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation_id: i32,
        now: i64,
    ) -> Result<i32, ResponseError> {
        let partition = self.owner(group_id)?;
        if !self.groups.contains_key(group_id) {
            if generation_id >= 0 {
                return Err(ResponseError::IllegalGeneration);
            }
            self.groups
                .insert(group_id.to_string(), Group::new(group_id, partition, now));
        }
        let group = self.groups.get_mut(group_id).expect("inserted above");
        if group.state == GroupState::Dead {
            return Err(ResponseError::CoordinatorNotAvailable);
        }
        if generation_id < 0 && group.state == GroupState::Empty {
            return Ok(partition);
        }
        // Kafka checks the member and its generation before the state.
        check_member(group, member_id, instance_id)?;
        if generation_id != group.generation_id {
            return Err(ResponseError::IllegalGeneration);
        }
        if group.state == GroupState::CompletingRebalance {
            return Err(ResponseError::RebalanceInProgress);
        }
        if let Some(member) = group.members.get_mut(member_id) {
            member.last_heartbeat_ms = now;
        }
        Ok(partition)
    }

    /// Offsets whose records are committed in `__consumer_offsets`: now they are served.
    pub fn offsets_committed(&mut self, group_id: &str, offsets: Vec<((String, i32), OffsetAndMetadata)>, now: i64) {
        let partition = self.partition_for(group_id);
        if !matches!(self.partitions.get(&partition), Some(Load::Loaded { .. })) {
            return;
        }
        let group = self
            .groups
            .entry(group_id.to_string())
            .or_insert_with(|| Group::new(group_id, partition, now));
        group.offsets.extend(offsets);
    }

    /// Committed offsets of a group: those asked for (`None`: all), unknown ones as `None`.
    pub fn fetch_offsets(
        &self,
        group_id: &str,
        topics: Option<&[(String, Vec<i32>)]>,
    ) -> Result<CommittedOffsets, ResponseError> {
        self.owner(group_id)?;
        let offsets = self.groups.get(group_id).map(|g| &g.offsets);
        Ok(match topics {
            Some(topics) => topics
                .iter()
                .flat_map(|(topic, partitions)| {
                    partitions.iter().map(move |p| {
                        let value = offsets.and_then(|o| o.get(&(topic.clone(), *p)).cloned());
                        (topic.clone(), *p, value)
                    })
                })
                .collect(),
            None => {
                let mut all: Vec<_> = offsets
                    .into_iter()
                    .flatten()
                    .map(|((t, p), o)| (t.clone(), *p, Some(o.clone())))
                    .collect();
                all.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
                all
            }
        })
    }

    // ---- admin ----

    /// Groups this broker coordinates, `(id, protocol type, state)`, and whether some of its
    /// partitions are still loading (ListGroups answers COORDINATOR_LOAD_IN_PROGRESS then).
    pub fn list_groups(&self) -> (Vec<(String, String, GroupState)>, bool) {
        let loading = self.partitions.values().any(|l| matches!(l, Load::Loading { .. }));
        let mut groups: Vec<_> = self
            .groups
            .iter()
            .filter(|(_, g)| g.state != GroupState::Dead)
            .map(|(id, g)| (id.clone(), g.protocol_type.clone().unwrap_or_default(), g.state))
            .collect();
        groups.sort_by(|a, b| a.0.cmp(&b.0));
        (groups, loading)
    }

    /// DescribeGroups: `None` for a group this coordinator does not know (Kafka reports it Dead).
    pub fn describe_group(&self, group_id: &str) -> Result<Option<GroupSummary>, ResponseError> {
        self.owner(group_id)?;
        let Some(group) = self.groups.get(group_id) else {
            return Ok(None);
        };
        let stable = group.state == GroupState::Stable;
        let protocol = group.protocol_name.as_deref();
        Ok(Some(GroupSummary {
            state: group.state,
            protocol_type: group.protocol_type.clone().unwrap_or_default(),
            protocol_name: if stable {
                protocol.unwrap_or_default().to_string()
            } else {
                String::new()
            },
            members: group
                .members
                .iter()
                .map(|(id, m)| MemberSummary {
                    member_id: id.clone(),
                    group_instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    metadata: if stable { m.metadata(protocol) } else { Bytes::new() },
                    assignment: if stable { m.assignment.clone() } else { Bytes::new() },
                })
                .collect(),
        }))
    }

    /// DeleteGroups for one group: only an empty group goes; its offsets and record are
    /// tombstoned.
    pub fn delete_group(&mut self, group_id: &str) -> Result<Effect, ResponseError> {
        let partition = self.owner(group_id)?;
        let group = self.groups.get(group_id).ok_or(ResponseError::GroupIdNotFound)?;
        match group.state {
            GroupState::Dead => return Err(ResponseError::GroupIdNotFound),
            GroupState::Empty => {}
            _ => return Err(ResponseError::NonEmptyGroup),
        }
        let group = self.groups.remove(group_id).expect("checked above");
        let mut offsets: Vec<(String, i32)> = group.offsets.into_keys().collect();
        offsets.sort();
        Ok(Effect::Tombstones {
            partition,
            group_id: group_id.to_string(),
            offsets,
            group: true,
        })
    }

    /// OffsetDelete: the partitions' offsets go unless an active member is subscribed to the
    /// topic (GROUP_SUBSCRIBED_TO_TOPIC). `subscribed` says whether a member's metadata (for
    /// the group's protocol) subscribes to a topic; metadata that cannot be read counts as yes.
    pub fn delete_offsets(
        &mut self,
        group_id: &str,
        partitions: &[(String, i32)],
        subscribed: impl Fn(&Bytes, &str) -> bool,
    ) -> Result<(Vec<MemberError>, Option<Effect>), ResponseError> {
        let partition = self.owner(group_id)?;
        let group = self.groups.get_mut(group_id).ok_or(ResponseError::GroupIdNotFound)?;
        let active = match group.state {
            GroupState::Dead => return Err(ResponseError::GroupIdNotFound),
            GroupState::Empty => false,
            _ if group.protocol_type.as_deref() == Some("consumer") => true,
            _ => return Err(ResponseError::NonEmptyGroup),
        };
        let protocol = group.protocol_name.clone();
        let mut errors = Vec::with_capacity(partitions.len());
        let mut deleted = Vec::new();
        for (topic, p) in partitions {
            let in_use = active
                && group
                    .members
                    .values()
                    .any(|m| subscribed(&m.metadata(protocol.as_deref()), topic));
            if in_use {
                errors.push(Some(ResponseError::GroupSubscribedToTopic));
            } else {
                group.offsets.remove(&(topic.clone(), *p));
                deleted.push((topic.clone(), *p));
                errors.push(None);
            }
        }
        let effect = (!deleted.is_empty()).then(|| Effect::Tombstones {
            partition,
            group_id: group_id.to_string(),
            offsets: deleted,
            group: false,
        });
        Ok((errors, effect))
    }
}

/// What a member's protocols add to the group's record, at most.
fn stored_bytes(protocols: &[(String, Bytes)]) -> usize {
    protocols
        .iter()
        .map(|(name, metadata)| name.len() + metadata.len())
        .sum()
}

/// Restores a group from its stored record: Stable with its members, or Empty.
fn restore(group: &mut Group, stored: StoredGroup, now: i64) {
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
fn check_member(group: &Group, member_id: &str, instance_id: Option<&str>) -> Result<(), ResponseError> {
    if group.is_static_member_fenced(member_id, instance_id) {
        return Err(ResponseError::FencedInstanceId);
    }
    if !group.members.contains_key(member_id) {
        return Err(ResponseError::UnknownMemberId);
    }
    Ok(())
}

fn join_unknown_member(
    group: &mut Group,
    config: &GroupConfig,
    req: &JoinRequest,
    reply: ReplyId,
    now: i64,
    fx: &mut Fx,
) -> Result<(), ResponseError> {
    let new_id = req.new_member_id.clone();
    if let Some(instance) = &req.group_instance_id {
        if let Some(old_id) = group.static_members.get(instance).cloned() {
            return replace_static_member(group, config, req, &old_id, reply, now, fx);
        }
    }
    if group.members.len() + group.pending_members.len() >= config.max_size {
        return Err(ResponseError::GroupMaxSizeReached);
    }
    if req.group_instance_id.is_none() && req.require_known_member_id {
        // KIP-394: the member rejoins with this id, so a client that retries a lost
        // response does not leave a ghost member behind.
        group
            .pending_members
            .insert(new_id.clone(), now + i64::from(req.session_timeout_ms));
        fx.push(Effect::Join(
            reply,
            JoinResult::failed(&new_id, ResponseError::MemberIdRequired),
        ));
        return Ok(());
    }
    add_member_and_rebalance(group, config, req, &new_id, reply, now, fx);
    Ok(())
}

fn join_known_member(
    group: &mut Group,
    config: &GroupConfig,
    req: &JoinRequest,
    reply: ReplyId,
    now: i64,
    fx: &mut Fx,
) -> Result<(), ResponseError> {
    let member_id = req.member_id.as_str();
    if group.is_static_member_fenced(member_id, req.group_instance_id.as_deref()) {
        return Err(ResponseError::FencedInstanceId);
    }
    if group.pending_members.contains_key(member_id) {
        if group.members.len() >= config.max_size {
            group.pending_members.remove(member_id);
            return Err(ResponseError::GroupMaxSizeReached);
        }
        group.pending_members.remove(member_id);
        add_member_and_rebalance(group, config, req, member_id, reply, now, fx);
        return Ok(());
    }
    let Some(member) = group.members.get(member_id) else {
        return Err(ResponseError::UnknownMemberId);
    };
    let same_protocols = member.protocols == req.protocols;
    match group.state {
        GroupState::PreparingRebalance => update_member_and_rebalance(group, config, req, reply, now, fx),
        GroupState::CompletingRebalance if same_protocols => {
            // The join response was lost: answer it again.
            fx.push(Effect::Join(reply, group.join_result(member_id)));
        }
        GroupState::CompletingRebalance => update_member_and_rebalance(group, config, req, reply, now, fx),
        GroupState::Stable if same_protocols && !group.is_leader(member_id) => {
            // A follower rejoining with unchanged metadata keeps the current generation.
            if let Some(m) = group.members.get_mut(member_id) {
                m.last_heartbeat_ms = now;
            }
            fx.push(Effect::Join(reply, group.join_result(member_id)));
        }
        GroupState::Stable => update_member_and_rebalance(group, config, req, reply, now, fx),
        GroupState::Empty | GroupState::Dead => return Err(ResponseError::UnknownMemberId),
    }
    Ok(())
}

/// A static member rejoined with a new member id (KIP-345): the old id is fenced. A Stable
/// group whose protocol stays the same keeps its assignment without a rebalance.
fn replace_static_member(
    group: &mut Group,
    config: &GroupConfig,
    req: &JoinRequest,
    old_id: &str,
    reply: ReplyId,
    now: i64,
    fx: &mut Fx,
) -> Result<(), ResponseError> {
    let new_id = req.new_member_id.clone();
    let Some(mut member) = group.members.shift_remove(old_id) else {
        return Err(ResponseError::UnknownMemberId);
    };
    member.fail_waiting(old_id, ResponseError::FencedInstanceId, fx);
    let old_protocols = std::mem::replace(&mut member.protocols, req.protocols.clone());
    member.session_timeout_ms = req.session_timeout_ms;
    member.rebalance_timeout_ms = req.rebalance_timeout_ms;
    member.client_id = req.client_id.clone();
    member.client_host = req.client_host.clone();
    member.last_heartbeat_ms = now;
    let was_leader = group.is_leader(old_id);
    if was_leader {
        group.leader_id = Some(new_id.clone());
    }
    if group.pending_sync.remove(old_id) {
        group.pending_sync.insert(new_id.clone());
    }
    if let Some(instance) = &req.group_instance_id {
        group.static_members.insert(instance.clone(), new_id.clone());
    }
    group.members.insert(new_id.clone(), member);
    match group.state {
        GroupState::Stable if old_protocols == req.protocols => {
            // The old leader id is returned so the new instance does not compute (and cannot
            // broadcast) an assignment in a stable group; Kafka does the same.
            let mut result = group.join_result(&new_id);
            result.members.clear();
            if was_leader {
                result.leader_id = old_id.to_string();
            }
            fx.push(Effect::StoreGroup {
                partition: group.partition,
                group_id: group.id.clone(),
                group: group.stored(None),
                generation_id: group.generation_id,
                completes_sync: false,
            });
            fx.push(Effect::Join(reply, result));
        }
        GroupState::PreparingRebalance => {
            group.members.get_mut(&new_id).expect("inserted").awaiting_join = Some(reply);
            try_complete_join(group, config, now, fx);
        }
        _ => {
            group.members.get_mut(&new_id).expect("inserted").awaiting_join = Some(reply);
            prepare_rebalance(group, config, now, fx);
            try_complete_join(group, config, now, fx);
        }
    }
    Ok(())
}

fn add_member_and_rebalance(
    group: &mut Group,
    config: &GroupConfig,
    req: &JoinRequest,
    member_id: &str,
    reply: ReplyId,
    now: i64,
    fx: &mut Fx,
) {
    if group.members.is_empty() {
        group.protocol_type = Some(req.protocol_type.clone());
    }
    if let Some(instance) = &req.group_instance_id {
        group.static_members.insert(instance.clone(), member_id.to_string());
    }
    group.members.insert(
        member_id.to_string(),
        Member {
            instance_id: req.group_instance_id.clone(),
            client_id: req.client_id.clone(),
            client_host: req.client_host.clone(),
            session_timeout_ms: req.session_timeout_ms,
            rebalance_timeout_ms: req.rebalance_timeout_ms,
            protocols: req.protocols.clone(),
            assignment: Bytes::new(),
            awaiting_join: Some(reply),
            awaiting_sync: None,
            last_heartbeat_ms: now,
            is_new: true,
        },
    );
    if group.leader_id.is_none() {
        group.leader_id = Some(member_id.to_string());
    }
    // Kafka: a rebalance that started from Empty (previous state), whatever the generation.
    if group.state == GroupState::PreparingRebalance && group.initial_delay.is_some() {
        group.new_member_added = true;
    }
    maybe_prepare_rebalance(group, config, now, fx);
    try_complete_join(group, config, now, fx);
}

fn update_member_and_rebalance(
    group: &mut Group,
    config: &GroupConfig,
    req: &JoinRequest,
    reply: ReplyId,
    now: i64,
    fx: &mut Fx,
) {
    let member = group.members.get_mut(&req.member_id).expect("caller checked");
    member.protocols = req.protocols.clone();
    member.session_timeout_ms = req.session_timeout_ms;
    member.rebalance_timeout_ms = req.rebalance_timeout_ms;
    member.last_heartbeat_ms = now;
    if let Some(previous) = member.awaiting_join.replace(reply) {
        fx.push(Effect::Join(
            previous,
            JoinResult::failed(&req.member_id, ResponseError::RebalanceInProgress),
        ));
    }
    maybe_prepare_rebalance(group, config, now, fx);
    try_complete_join(group, config, now, fx);
}

fn maybe_prepare_rebalance(group: &mut Group, config: &GroupConfig, now: i64, fx: &mut Fx) {
    if matches!(
        group.state,
        GroupState::Stable | GroupState::CompletingRebalance | GroupState::Empty
    ) {
        prepare_rebalance(group, config, now, fx);
    }
}

/// Starts a rebalance: members must rejoin within the rebalance timeout. An empty group
/// first waits `group.initial.rebalance.delay.ms` so that consumers starting together land in
/// one generation.
fn prepare_rebalance(group: &mut Group, config: &GroupConfig, now: i64, fx: &mut Fx) {
    if group.state == GroupState::CompletingRebalance {
        for member in group.members.values_mut() {
            member.assignment = Bytes::new();
            if let Some(reply) = member.awaiting_sync.take() {
                fx.push(Effect::Sync(
                    reply,
                    SyncResult::failed(ResponseError::RebalanceInProgress),
                ));
            }
        }
    }
    group.pending_sync.clear();
    group.pending_assignment = None;
    let rebalance_timeout = group.rebalance_timeout_ms();
    if group.state == GroupState::Empty {
        let delay = config.initial_rebalance_delay_ms.max(0);
        group.join_deadline_ms = now + delay;
        group.initial_delay = Some(InitialDelay {
            remaining_ms: (rebalance_timeout - delay).max(0),
        });
        group.new_member_added = false;
    } else {
        group.join_deadline_ms = now + rebalance_timeout;
        group.initial_delay = None;
    }
    group.transition(GroupState::PreparingRebalance, now);
}

/// A join phase without the initial delay completes as soon as every member has rejoined;
/// any join phase completes once its deadline has passed.
fn try_complete_join(group: &mut Group, config: &GroupConfig, now: i64, fx: &mut Fx) {
    if group.state != GroupState::PreparingRebalance {
        return;
    }
    if now >= group.join_deadline_ms {
        on_join_deadline(group, config, now, fx);
    } else if group.initial_delay.is_none() && group.has_all_members_joined() {
        complete_join(group, now, fx);
    }
}

fn on_join_deadline(group: &mut Group, config: &GroupConfig, now: i64, fx: &mut Fx) {
    if let Some(delay) = &mut group.initial_delay {
        if group.new_member_added && delay.remaining_ms > 0 {
            let extra = config.initial_rebalance_delay_ms.min(delay.remaining_ms).max(1);
            delay.remaining_ms -= extra;
            group.new_member_added = false;
            group.join_deadline_ms = now + extra;
            return;
        }
    }
    complete_join(group, now, fx);
}

/// Kafka's `onCompleteJoin`: dynamic members that did not rejoin are dropped, the next
/// generation starts, and every joined member gets its JoinGroup answer (the leader with the
/// members' metadata).
fn complete_join(group: &mut Group, now: i64, fx: &mut Fx) {
    group.initial_delay = None;
    let not_rejoined: Vec<String> = group
        .members
        .iter()
        .filter(|(_, m)| m.awaiting_join.is_none() && m.instance_id.is_none())
        .map(|(id, _)| id.clone())
        .collect();
    for id in not_rejoined {
        if let Some(member) = group.members.shift_remove(&id) {
            forget_member(group, &id, member, fx);
        }
    }
    let any_joined = group.members.values().any(|m| m.awaiting_join.is_some());
    if !group.members.is_empty() && !any_joined {
        // Only static members that have not rejoined are left: wait for them (or for their
        // sessions to expire) one more rebalance timeout.
        group.join_deadline_ms = now + group.rebalance_timeout_ms();
        return;
    }
    let leader_rejoined = group
        .leader_id
        .as_ref()
        .and_then(|l| group.members.get(l))
        .is_some_and(|m| m.awaiting_join.is_some());
    if !leader_rejoined {
        group.leader_id = group
            .members
            .iter()
            .find(|(_, m)| m.awaiting_join.is_some())
            .map(|(id, _)| id.clone());
    }
    group.generation_id += 1;
    if group.members.is_empty() {
        group.protocol_name = None;
        group.leader_id = None;
        group.transition(GroupState::Empty, now);
        fx.push(Effect::StoreGroup {
            partition: group.partition,
            group_id: group.id.clone(),
            group: group.stored(None),
            generation_id: group.generation_id,
            completes_sync: false,
        });
        return;
    }
    group.protocol_name = group.select_protocol();
    group.transition(GroupState::CompletingRebalance, now);
    group.sync_deadline_ms = now + group.rebalance_timeout_ms();
    let ids: Vec<String> = group.members.keys().cloned().collect();
    for id in ids {
        let result = group.join_result(&id);
        let member = group.members.get_mut(&id).expect("listed above");
        if let Some(reply) = member.awaiting_join.take() {
            fx.push(Effect::Join(reply, result));
        }
        member.last_heartbeat_ms = now;
        member.is_new = false;
        group.pending_sync.insert(id);
    }
}

/// Removes a member (left or expired) and moves the group on: a rebalance if it was settled,
/// or the join phase may now be complete.
fn remove_member_and_update(group: &mut Group, config: &GroupConfig, member_id: &str, now: i64, fx: &mut Fx) {
    let Some(member) = group.members.shift_remove(member_id) else {
        return;
    };
    forget_member(group, member_id, member, fx);
    match group.state {
        GroupState::Dead | GroupState::Empty => {}
        GroupState::Stable | GroupState::CompletingRebalance => {
            prepare_rebalance(group, config, now, fx);
            try_complete_join(group, config, now, fx);
        }
        GroupState::PreparingRebalance => try_complete_join(group, config, now, fx),
    }
}

/// Answers a removed member's waiting requests and drops every trace of it.
fn forget_member(group: &mut Group, member_id: &str, mut member: Member, fx: &mut Fx) {
    member.fail_waiting(member_id, ResponseError::UnknownMemberId, fx);
    if let Some(instance) = &member.instance_id {
        if group.static_members.get(instance).map(String::as_str) == Some(member_id) {
            group.static_members.remove(instance);
        }
    }
    group.pending_sync.remove(member_id);
    if group.is_leader(member_id) {
        group.leader_id = group.members.keys().next().cloned();
    }
}

#[cfg(test)]
#[path = "coordinator_tests.rs"]
mod tests;

//! Kafka's classic group protocol as a pure state machine (Kafka's `GroupCoordinator` and
//! `GroupMetadata`): requests, loaded records and the time go in; responses, records to
//! store and tombstones come out as [`Effect`]s. No I/O, no clock, no randomness (the glue
//! passes new member ids in), so every rebalance can be replayed in a unit test.
//!
//! States: Empty → PreparingRebalance (members (re)join) → CompletingRebalance (the leader
//! computes assignments) → Stable, each move checked against [`GroupState::may_follow`]. Kafka's
//! Dead is a group removed from the map (deleted, expired, or its partition moved away). A
//! JoinGroup answer waits until every known member has rejoined or the rebalance timeout
//! passes; a SyncGroup answer waits until the leader's assignment is stored in
//! `__consumer_offsets`.
//!
//! The coordinator serves only groups whose `__consumer_offsets` partition this broker leads
//! and has loaded: others get NOT_COORDINATOR, loading ones COORDINATOR_LOAD_IN_PROGRESS.
//!
//! This file holds the public types, the coordinator, partition loading and the admin calls;
//! `group.rs` the group and member state, `members.rs` JoinGroup/SyncGroup/Heartbeat/LeaveGroup,
//! `rebalance.rs` the rebalance transitions and timers, `offsets.rs` committed offsets,
//! `transactions.rs` transactional offsets (KIP-98/KIP-447), `load.rs` the replay of a
//! partition's log, `consumer.rs`/`consumer_members.rs` KIP-848 groups, `migration.rs` the
//! online conversion between the two protocols (split
//! so that no file runs past ~600 lines; `members.rs` uses `rebalance.rs`, and all three use
//! `group.rs`, never the reverse).

use std::collections::{BTreeSet, HashMap, HashSet};

use bytes::Bytes;
use kafka_protocol::error::ResponseError;

use super::records::{GroupRecord, OffsetAndMetadata, StoredGroup};
pub use crate::config::GroupConfig;
pub use consumer::{MemberState, LEAVE_EPOCH, LEAVE_STATIC_EPOCH};
pub use consumer_members::{
    compile_regex, ConsumerGroupSummary, ConsumerHeartbeat, ConsumerHeartbeatResult, ConsumerMemberSummary,
    HeartbeatError, TopicCatalog,
};
use group::{restore, Group};
pub use load::LoadedRecord;
use load::Replay;
use share::ShareGroup;
pub use share::{ShareGroupSummary, ShareHeartbeat, ShareHeartbeatResult, ShareMember, SHARE_LEAVE_EPOCH};

mod consumer;
mod consumer_members;
mod group;
mod load;
mod members;
mod migration;
mod offsets;
mod rebalance;
mod share;
mod share_state;
mod transactions;

/// Identifies a JoinGroup or SyncGroup request waiting for its answer.
pub type ReplyId = u64;

/// A member that has not rejoined during a rebalance is dropped after this long if it is new
/// (Kafka's `NewMemberJoinTimeoutMs`), so a client that vanished mid-join cannot hold a group.
const NEW_MEMBER_JOIN_TIMEOUT_MS: i64 = 300_000;

/// A classic group's state. Kafka's fifth, `Dead`, is a removed group here: a group leaves the
/// coordinator's map when it is deleted, expires or its partition moves away, and every
/// request looks its group up afresh, so none can hold on to a dead one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
}

impl GroupState {
    /// The name Kafka's DescribeGroups and ListGroups report.
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
        }
    }

    /// The states a group may enter this one from (Kafka's `GroupMetadata.validPreviousStates`):
    /// a rebalance starts from any state but itself, and each of its steps follows the one
    /// before.
    pub fn may_follow(self, previous: GroupState) -> bool {
        use GroupState::*;
        match self {
            Empty => previous == PreparingRebalance,
            PreparingRebalance => matches!(previous, Empty | CompletingRebalance | Stable),
            CompletingRebalance => previous == PreparingRebalance,
            Stable => previous == CompletingRebalance,
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
    pub fn failed(member_id: &str, error: ResponseError) -> Self {
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
    /// Append the group's record to its partition, then do `then` with the outcome.
    StoreGroup {
        partition: i32,
        group_id: String,
        group: StoredGroup,
        generation_id: i32,
        then: AfterStore,
    },
    /// Append tombstones: for these offsets, and for the group record itself if `group`.
    Tombstones {
        partition: i32,
        group_id: String,
        offsets: Vec<(String, i32)>,
        group: bool,
    },
    /// Append these records (a consumer group's, KIP-848); no answer waits on them.
    Records {
        partition: i32,
        records: Vec<GroupRecord>,
    },
}

/// What waits on a group record being stored: answers that must not go out before it is.
#[derive(Debug, Clone, PartialEq)]
pub enum AfterStore {
    Nothing,
    /// The generation's SyncGroup answers ([`GroupCoordinator::group_stored`]).
    CompleteSync,
    /// A replaced static member's JoinGroup answer, or the replacement undone
    /// ([`GroupCoordinator::static_member_stored`]).
    AnswerStaticJoin(Box<StaticJoin>),
}

/// A static member's replacement waiting for its group record (Kafka answers only once the new
/// member id is stored, so a coordinator that dies in between cannot fence the new instance).
#[derive(Debug, Clone, PartialEq)]
pub struct StaticJoin {
    pub reply: ReplyId,
    pub result: JoinResult,
    pub instance_id: String,
    pub old_member_id: String,
    pub new_member_id: String,
    /// The old instance's protocols and timeouts, restored if the store fails.
    pub old_protocols: Vec<(String, Bytes)>,
    pub old_session_timeout_ms: i32,
    pub old_rebalance_timeout_ms: i32,
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

/// One group as ListGroups shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedGroup {
    pub group_id: String,
    pub protocol_type: String,
    pub state: &'static str,
    /// KIP-848's group type: `classic`, `consumer` or `share`.
    pub group_type: &'static str,
}

#[derive(Debug, Clone)]
pub struct GroupSummary {
    pub state: GroupState,
    pub protocol_type: String,
    pub protocol_name: String,
    pub members: Vec<MemberSummary>,
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
    /// Transaction markers written to a partition while it was loading, by producer id (the
    /// last one per producer; a producer has one transaction open at a time). The load may
    /// have read the log before the marker, so they are applied once it completes; applying
    /// one the load already saw finds nothing pending.
    txn_ends_while_loading: HashMap<i32, HashMap<i64, bool>>,
    /// KIP-932 share groups (`share.rs`), apart from `groups`: they keep no offsets and no
    /// records here.
    share_groups: HashMap<String, ShareGroup>,
    /// KIP-932 share-partition states the share groups' partition leaders stored
    /// (`share_state.rs`).
    share_states: share_state::ShareStates,
}

type Fx = Vec<Effect>;

impl GroupCoordinator {
    pub fn new(config: GroupConfig) -> Self {
        GroupCoordinator {
            config,
            groups: HashMap::new(),
            partitions: HashMap::new(),
            txn_ends_while_loading: HashMap::new(),
            share_groups: HashMap::new(),
            share_states: HashMap::new(),
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

    /// Replays the partition's records (in log order, transaction markers included: see
    /// `load.rs`) and starts serving its groups. Returns false if leadership moved on since
    /// the load began (the records are dropped). Transactions that ended while the partition
    /// was loading (`complete_transaction`) end now.
    pub fn complete_load(
        &mut self,
        partition: i32,
        epoch: i32,
        records: impl IntoIterator<Item = LoadedRecord>,
        now: i64,
    ) -> bool {
        if self.partitions.get(&partition) != Some(&Load::Loading { epoch }) {
            return false;
        }
        let mut replay = Replay::default();
        for record in records {
            replay.apply(record);
        }
        let mut pending = replay.pending_by_group();
        let Replay {
            groups: mut stored,
            mut offsets,
            mut consumer,
            share_states,
            ..
        } = replay;
        offsets.retain(|_, o| !o.is_empty());
        consumer.retain(|_, g| g.exists());
        let ids: HashSet<String> = stored
            .keys()
            .chain(offsets.keys())
            .chain(pending.keys())
            .chain(consumer.keys())
            .cloned()
            .collect();
        for id in ids {
            if partition_for(&id, self.config.num_partitions) != partition {
                continue;
            }
            let mut group = Group::new(&id, partition, now);
            if let Some(s) = stored.remove(&id) {
                restore(&mut group, s, now);
            }
            if let Some(c) = consumer.remove(&id) {
                group.consumer = Some(Box::new(consumer::ConsumerGroup::restore(c, now)));
                group.protocol_type = Some("consumer".into());
            }
            group.offsets = offsets.remove(&id).unwrap_or_default();
            group.pending_txn_offsets = pending.remove(&id).unwrap_or_default();
            self.groups.insert(id, group);
        }
        self.restore_share_states(partition, share_states, now);
        self.partitions.insert(partition, Load::Loaded { epoch });
        for (producer_id, commit) in self.txn_ends_while_loading.remove(&partition).unwrap_or_default() {
            self.complete_transaction(partition, producer_id, commit);
        }
        true
    }

    /// This broker no longer leads `partition`: its groups go (their clients find the new
    /// coordinator), and requests waiting on them are answered NOT_COORDINATOR.
    pub fn unload(&mut self, partition: i32) -> Fx {
        let mut fx = Vec::new();
        self.txn_ends_while_loading.remove(&partition);
        if self.partitions.remove(&partition).is_none() {
            return fx;
        }
        let ids: Vec<String> = self
            .groups
            .iter()
            .filter(|(_, g)| g.partition == partition)
            .map(|(id, _)| id.clone())
            .collect();
        self.share_groups.retain(|_, g| g.partition != partition);
        let groups = self.config.num_partitions;
        self.share_states
            .retain(|(group_id, _, _), _| partition_for(group_id, groups) != partition);
        for id in ids {
            if let Some(mut group) = self.groups.remove(&id) {
                for (member_id, member) in group.members.iter_mut() {
                    member.fail_waiting(member_id, ResponseError::NotCoordinator, &mut fx);
                }
            }
        }
        fx
    }

    // ---- admin ----

    /// Groups this broker coordinates, and whether some of its partitions are still loading
    /// (ListGroups answers COORDINATOR_LOAD_IN_PROGRESS then).
    pub fn list_groups(&self) -> (Vec<ListedGroup>, bool) {
        let loading = self.partitions.values().any(|l| matches!(l, Load::Loading { .. }));
        let mut groups: Vec<_> = self
            .groups
            .iter()
            .map(|(id, g)| match &g.consumer {
                Some(cg) => ListedGroup {
                    group_id: id.clone(),
                    protocol_type: "consumer".into(),
                    state: cg.state_name(),
                    group_type: "consumer",
                },
                None => ListedGroup {
                    group_id: id.clone(),
                    protocol_type: g.protocol_type.clone().unwrap_or_default(),
                    state: g.state.name(),
                    group_type: "classic",
                },
            })
            .chain(self.share_groups.iter().map(|(id, g)| ListedGroup {
                group_id: id.clone(),
                protocol_type: "share".into(),
                state: g.state_name(),
                group_type: "share",
            }))
            .collect();
        groups.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        (groups, loading)
    }

    /// DescribeGroups: `None` for a group this coordinator does not know (Kafka reports it Dead).
    pub fn describe_group(&self, group_id: &str) -> Result<Option<GroupSummary>, ResponseError> {
        self.owner(group_id)?;
        let Some(group) = self.groups.get(group_id).filter(|g| g.consumer.is_none()) else {
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
    /// tombstoned. Offsets of open transactions are tombstoned and dropped too (Kafka 4.x's
    /// `deleteAllOffsets`), so a COMMIT arriving later cannot bring the group's offsets back,
    /// in memory or on reload.
    pub fn delete_group(&mut self, group_id: &str) -> Result<Fx, ResponseError> {
        let partition = self.owner(group_id)?;
        if let Some(share) = self.share_groups.get(group_id) {
            if !share.members.is_empty() {
                return Err(ResponseError::NonEmptyGroup);
            }
            self.share_groups.remove(group_id);
            return Ok(self.forget_share_states(group_id, partition, |_| true));
        }
        let group = self.groups.get(group_id).ok_or(ResponseError::GroupIdNotFound)?;
        if !group.is_empty() {
            return Err(ResponseError::NonEmptyGroup);
        }
        let Some(group) = self.groups.remove(group_id) else {
            return Err(ResponseError::GroupIdNotFound);
        };
        let consumer = group.consumer.is_some();
        let pending = group.pending_txn_offsets.into_values().flat_map(|o| o.into_keys());
        let offsets: BTreeSet<(String, i32)> = group.offsets.into_keys().chain(pending).collect();
        let offsets: Vec<(String, i32)> = offsets.into_iter().collect();
        let mut fx = vec![Effect::Tombstones {
            partition,
            group_id: group_id.to_string(),
            offsets,
            group: !consumer,
        }];
        if consumer {
            fx.push(Effect::Records {
                partition,
                records: consumer_members::group_tombstones(group_id),
            });
        }
        Ok(fx)
    }
}

#[cfg(test)]
mod tests;

//! KIP-848 consumer groups on the coordinator: ConsumerGroupHeartbeat (join, reconcile, leave),
//! ConsumerGroupDescribe, the session and revocation timers, and the offset-commit checks by
//! member epoch (Kafka's `GroupMetadataManager.consumerGroupHeartbeat` and
//! `ConsumerGroup.validateOffsetCommit`). The state and the reconciliation rules are in
//! `consumer.rs`.
//!
//! A consumer group lives beside a classic group's state in the same [`Group`], which keeps the
//! committed offsets whichever protocol the members speak. An empty classic group (offsets only)
//! becomes a consumer group, and an empty consumer group becomes classic again on a JoinGroup;
//! groups with members convert online as `migration.rs` says.

use std::collections::{BTreeSet, HashMap};

use kafka_protocol::error::ResponseError;
use regex::Regex;
use uuid::Uuid;

use super::consumer::{
    is_subset, member_records, member_tombstones, ConsumerGroup, ConsumerMember, MemberState, SubscribedTopics,
};
pub use super::consumer::{LEAVE_EPOCH, LEAVE_STATIC_EPOCH};
use super::group::Group;
use super::{partition_for, Effect, Fx, GroupCoordinator, GroupState};
use crate::group::assignor::{Assignment, Assignor};
use crate::group::consumer_records::ConsumerRecord;
use crate::group::records::GroupRecord;

/// What the coordinator needs to know about topics: the glue answers from the metadata image.
pub trait TopicCatalog {
    /// A topic's id and partition count.
    fn topic(&self, name: &str) -> Option<(Uuid, i32)>;
    /// Names of the topics (internal ones left out) that `pattern` matches whole.
    fn matching(&self, pattern: &Regex) -> Vec<String>;
}

#[derive(Debug, Clone)]
pub struct ConsumerHeartbeat {
    pub group_id: String,
    pub member_id: String,
    pub member_epoch: i32,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub subscribed_topic_names: Option<Vec<String>>,
    pub subscribed_topic_regex: Option<String>,
    pub server_assignor: Option<String>,
    /// What the member holds (`None`: not said in this heartbeat).
    pub owned: Option<Assignment>,
    pub client_id: String,
    pub client_host: String,
    /// The id a joining member gets when it sent none (ConsumerGroupHeartbeat v0).
    pub new_member_id: String,
    /// The group's `consumer.session.timeout.ms` and `consumer.heartbeat.interval.ms` group
    /// configs, where set (else the broker's `group.consumer.*`).
    pub session_timeout_ms: Option<i32>,
    pub heartbeat_interval_ms: Option<i32>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ConsumerHeartbeatResult {
    pub member_id: String,
    pub member_epoch: i32,
    pub heartbeat_interval_ms: i32,
    /// The member's partitions, when they changed or the member must be told them.
    pub assignment: Option<Assignment>,
}

/// An error with the sentence Kafka's clients log beside its code.
pub type HeartbeatError = (ResponseError, String);

#[derive(Debug, Clone)]
pub struct ConsumerMemberSummary {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub member_epoch: i32,
    pub state: MemberState,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_topic_names: Vec<String>,
    pub subscribed_topic_regex: Option<String>,
    pub assignment: Assignment,
    pub target: Assignment,
    /// It speaks the classic protocol (JoinGroup/SyncGroup) in this consumer group.
    pub classic: bool,
}

#[derive(Debug, Clone)]
pub struct ConsumerGroupSummary {
    pub state: &'static str,
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub assignor: String,
    pub members: Vec<ConsumerMemberSummary>,
}

fn invalid(message: impl Into<String>) -> HeartbeatError {
    (ResponseError::InvalidRequest, message.into())
}

/// A subscription regex compiled to match a whole topic name, as Java's `matches` does.
pub fn compile_regex(pattern: &str) -> Result<Regex, HeartbeatError> {
    Regex::new(&format!("^(?:{pattern})$")).map_err(|e| {
        (
            ResponseError::InvalidRegularExpression,
            format!("The subscription regular expression {pattern:?} is not valid: {e}"),
        )
    })
}

impl GroupCoordinator {
    /// The assignor of a group whose members ask for none: the first of `group.consumer.assignors`.
    pub(super) fn default_assignor(&self) -> Assignor {
        self.config
            .consumer_assignors
            .first()
            .copied()
            .unwrap_or(Assignor::Uniform)
    }

    /// ConsumerGroupHeartbeat: a member joins (epoch 0), heartbeats at its epoch, or leaves
    /// (-1, or -2 for a static member that will come back).
    pub fn consumer_heartbeat(
        &mut self,
        req: ConsumerHeartbeat,
        topics: &dyn TopicCatalog,
        now: i64,
    ) -> Result<(ConsumerHeartbeatResult, Vec<GroupRecord>, Fx), HeartbeatError> {
        check_request(&req, &self.config.consumer_assignors)?;
        let partition = self.owner(&req.group_id).map_err(|e| (e, String::new()))?;
        if self.is_share_group(&req.group_id) {
            return Err((
                ResponseError::GroupIdNotFound,
                format!("Group {} is a share group; use another group id for consumers.", req.group_id),
            ));
        }
        let interval = req.heartbeat_interval_ms.unwrap_or(self.config.consumer_heartbeat_interval_ms);
        if req.member_epoch == LEAVE_EPOCH || req.member_epoch == LEAVE_STATIC_EPOCH {
            return self.consumer_leave(&req, now);
        }
        let max_size = self.config.max_size;
        let default_assignor = self.default_assignor();
        let mut fx = Vec::new();
        let mut records = Vec::new();
        let classic_with_members = self
            .groups
            .get(&req.group_id)
            .is_some_and(|g| g.consumer.is_none() && (!g.members.is_empty() || g.state != GroupState::Empty));
        if classic_with_members {
            records = self.upgrade_to_consumer_group(&req.group_id, topics, now, &mut fx)?;
        }
        let group = self
            .groups
            .entry(req.group_id.clone())
            .or_insert_with(|| Group::new(&req.group_id, partition, now));
        if group.consumer.is_none() {
            if group.protocol_type.is_some() {
                // It was a classic group: its record goes.
                records.push(GroupRecord::Group {
                    group_id: req.group_id.clone(),
                    value: None,
                });
            }
            group.consumer = Some(Box::default());
            group.protocol_type = Some("consumer".into());
        }
        let cg = group.consumer.as_mut().expect("set above");
        cg.session_timeout_ms = req.session_timeout_ms;
        let snapshot = Snapshot::of(cg, &req.member_id, req.member_epoch == 0);

        // Find the member, or admit a new one.
        let (member_id, mut member, is_new) = if req.member_epoch == 0 {
            join(cg, &req, max_size, now)?
        } else {
            let Some(member) = cg.members.get(&req.member_id) else {
                return Err((
                    ResponseError::UnknownMemberId,
                    format!(
                        "Member {} is not a member of group {:?}; it must rejoin.",
                        req.member_id, req.group_id
                    ),
                ));
            };
            // A heartbeat names its instance only when joining or when it changed.
            if req.instance_id.is_some() && member.instance_id != req.instance_id {
                return Err((
                    ResponseError::FencedInstanceId,
                    format!("Member {} was replaced by another instance.", req.member_id),
                ));
            }
            check_epoch(member, &req)?;
            (req.member_id.clone(), member.clone(), false)
        };

        // Its subscription: a change moves the group epoch.
        let mut changed = is_new;
        if let Some(names) = &req.subscribed_topic_names {
            let names: BTreeSet<&String> = names.iter().collect();
            let names: Vec<String> = names.into_iter().cloned().collect();
            changed |= names != member.subscribed_topic_names;
            member.subscribed_topic_names = names;
        }
        if let Some(regex) = &req.subscribed_topic_regex {
            let regex = Some(regex.clone()).filter(|r| !r.is_empty());
            changed |= regex != member.subscribed_topic_regex;
            member.subscribed_topic_regex = regex;
        }
        if let Some(assignor) = &req.server_assignor {
            let assignor = Some(assignor.clone()).filter(|a| !a.is_empty());
            changed |= assignor != member.server_assignor;
            member.server_assignor = assignor;
        }
        if req.rack_id.is_some() {
            member.rack_id = req.rack_id.clone();
        }
        if req.rebalance_timeout_ms > 0 {
            member.rebalance_timeout_ms = req.rebalance_timeout_ms;
        }
        member.instance_id = req.instance_id.clone().or(member.instance_id.take());
        member.client_id = req.client_id.clone();
        member.client_host = req.client_host.clone();
        member.last_heartbeat_ms = now;
        let before = cg.members.get(&member_id).map(|m| m.assigned.clone());
        cg.put_member(&member_id, member);

        let (next, settled) = settle(
            cg,
            &req.group_id,
            &member_id,
            Change { changed, is_new },
            req.owned.as_ref(),
            snapshot,
            topics,
            default_assignor,
        );
        records.extend(settled);
        let send_assignment = req.owned.is_some() || req.member_epoch == 0 || before.as_ref() != Some(&next.assigned);
        let result = ConsumerHeartbeatResult {
            member_id: member_id.clone(),
            member_epoch: next.member_epoch,
            heartbeat_interval_ms: interval,
            assignment: send_assignment.then(|| next.assigned.clone()),
        };
        Ok((result, records, fx))
    }

    fn consumer_leave(
        &mut self,
        req: &ConsumerHeartbeat,
        now: i64,
    ) -> Result<(ConsumerHeartbeatResult, Vec<GroupRecord>, Fx), HeartbeatError> {
        let unknown = || {
            (
                ResponseError::UnknownMemberId,
                format!("Member {} is not a member of group {:?}.", req.member_id, req.group_id),
            )
        };
        let known = self
            .groups
            .get(&req.group_id)
            .and_then(|g| g.consumer.as_ref())
            .is_some_and(|cg| cg.members.contains_key(&req.member_id));
        if !known {
            return Err(unknown());
        }
        let result = ConsumerHeartbeatResult {
            member_id: req.member_id.clone(),
            member_epoch: req.member_epoch,
            heartbeat_interval_ms: 0,
            assignment: None,
        };
        let mut fx = Vec::new();
        if req.member_epoch == LEAVE_EPOCH {
            if let Some(records) = self.maybe_downgrade(&req.group_id, &req.member_id, now, &mut fx) {
                return Ok((result, records, fx));
            }
        }
        let Some(cg) = self.groups.get_mut(&req.group_id).and_then(|g| g.consumer.as_mut()) else {
            return Err(unknown());
        };
        let Some(member) = cg.members.get(&req.member_id) else {
            return Err(unknown());
        };
        let records = if req.member_epoch == LEAVE_STATIC_EPOCH && member.instance_id.is_some() {
            // It keeps its partitions for its session timeout, for the same instance to return.
            let before = member.clone();
            let mut member = member.clone();
            member.previous_member_epoch = member.member_epoch;
            member.member_epoch = LEAVE_STATIC_EPOCH;
            member.last_heartbeat_ms = now;
            let records = member_records(&req.group_id, &req.member_id, Some(&before), &member);
            cg.put_member(&req.member_id, member);
            records
        } else {
            cg.remove_member(&req.member_id);
            let mut records = member_tombstones(&req.group_id, &req.member_id).to_vec();
            records.push(group_epoch_record(&req.group_id, cg.group_epoch));
            records
        };
        Ok((result, records, fx))
    }

    /// Members whose session lapsed, or who did not give up partitions within their rebalance
    /// timeout, are removed; their partitions go to the others. A classic member (`migration.rs`)
    /// has its own session timeout, and is removed too if it did not rejoin or sync within its
    /// rebalance timeout when asked to. When the last KIP-848 member of a group with classic
    /// members goes, the group may become classic again.
    pub(super) fn expire_consumer_members(&mut self, now: i64) -> Fx {
        let mut fx = Vec::new();
        let default_session = self.config.consumer_session_timeout_ms;
        let mut expired: Vec<(String, String, &'static str)> = Vec::new();
        for (group_id, group) in &self.groups {
            let Some(cg) = group.consumer.as_ref() else {
                continue;
            };
            let session = cg.session_timeout_ms.unwrap_or(default_session);
            for (id, m) in &cg.members {
                let why = if m.last_heartbeat_ms + i64::from(m.session_timeout_ms(session)) <= now {
                    "its session expired"
                } else if m
                    .revoking_since_ms
                    .is_some_and(|since| since + i64::from(m.rebalance_timeout_ms.max(0)) <= now)
                {
                    "it did not give up its partitions within its rebalance timeout"
                } else if m.classic_deadline_ms.is_some_and(|deadline| deadline <= now) {
                    "it did not rejoin or sync within its rebalance timeout"
                } else {
                    continue;
                };
                expired.push((group_id.clone(), id.clone(), why));
            }
        }
        let mut records: HashMap<String, Vec<GroupRecord>> = HashMap::new();
        for (group_id, id, why) in expired {
            tracing::info!(group = %group_id, member = %id, "removing a consumer group member: {why}");
            if let Some(converted) = self.maybe_downgrade(&group_id, &id, now, &mut fx) {
                records.entry(group_id).or_default().extend(converted);
                continue;
            }
            let Some(cg) = self.groups.get_mut(&group_id).and_then(|g| g.consumer.as_mut()) else {
                continue;
            };
            if cg.remove_member(&id).is_none() {
                continue;
            }
            let out = records.entry(group_id.clone()).or_default();
            out.extend(member_tombstones(&group_id, &id));
            out.push(group_epoch_record(&group_id, cg.group_epoch));
        }
        for (group_id, records) in records {
            fx.push(Effect::Records {
                partition: partition_for(&group_id, self.config.num_partitions),
                records,
            });
        }
        fx
    }

    /// ConsumerGroupDescribe of one group.
    pub fn describe_consumer_group(&self, group_id: &str) -> Result<ConsumerGroupSummary, HeartbeatError> {
        self.owner(group_id).map_err(|e| (e, String::new()))?;
        let not_found = |why: &str| (ResponseError::GroupIdNotFound, format!("Group {group_id:?} {why}."));
        let group = self.groups.get(group_id).ok_or_else(|| not_found("does not exist"))?;
        let cg = group
            .consumer
            .as_ref()
            .ok_or_else(|| not_found("is not a consumer group"))?;
        let default_assignor = self.default_assignor();
        Ok(ConsumerGroupSummary {
            state: cg.state_name(),
            group_epoch: cg.group_epoch,
            assignment_epoch: cg.assignment_epoch,
            assignor: choose_assignor(cg, default_assignor).name().to_string(),
            members: cg
                .members
                .iter()
                .map(|(id, m)| ConsumerMemberSummary {
                    member_id: id.clone(),
                    instance_id: m.instance_id.clone(),
                    rack_id: m.rack_id.clone(),
                    member_epoch: m.member_epoch,
                    state: m.state,
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    subscribed_topic_names: m.subscribed_topic_names.clone(),
                    subscribed_topic_regex: m.subscribed_topic_regex.clone(),
                    assignment: m.assigned.clone(),
                    target: cg.target.get(id).cloned().unwrap_or_default(),
                    classic: m.classic.is_some(),
                })
                .collect(),
        })
    }

    /// A consumer group's OffsetCommit checks: a member at its current epoch (a plain commit
    /// at another epoch is STALE_MEMBER_EPOCH; a transactional one, or a classic member's,
    /// ILLEGAL_GENERATION), or
    /// anyone while the group has no members.
    pub(super) fn validate_consumer_commit(
        cg: &ConsumerGroup,
        member_id: &str,
        member_epoch: i32,
        transactional: bool,
    ) -> Result<(), ResponseError> {
        if member_epoch < 0 && cg.members.is_empty() {
            return Ok(());
        }
        if transactional && member_epoch < 0 && member_id.is_empty() {
            return Ok(());
        }
        let member = cg.members.get(member_id).ok_or(ResponseError::UnknownMemberId)?;
        if member.member_epoch != member_epoch {
            // A classic member's generation is its member epoch; it understands only this.
            return Err(if transactional || member.classic.is_some() {
                ResponseError::IllegalGeneration
            } else {
                ResponseError::StaleMemberEpoch
            });
        }
        Ok(())
    }
}

fn group_epoch_record(group_id: &str, epoch: i32) -> GroupRecord {
    GroupRecord::Consumer(ConsumerRecord::GroupEpoch {
        group_id: group_id.to_string(),
        epoch: Some(epoch),
    })
}

/// Tombstones of an empty consumer group's own records (its members' are gone already).
pub(super) fn group_tombstones(group_id: &str) -> Vec<GroupRecord> {
    vec![
        GroupRecord::Consumer(ConsumerRecord::TargetEpoch {
            group_id: group_id.to_string(),
            epoch: None,
        }),
        GroupRecord::Consumer(ConsumerRecord::GroupEpoch {
            group_id: group_id.to_string(),
            epoch: None,
        }),
    ]
}

/// What a group looked like before a request changed one of its members: the records of the
/// change are what differs from it.
pub(super) struct Snapshot {
    epoch: i32,
    assignment_epoch: i32,
    /// The member the request named, as it was.
    member: Option<ConsumerMember>,
    /// Every member id, when the request may have replaced one (a join).
    ids: Vec<String>,
}

impl Snapshot {
    pub(super) fn of(cg: &ConsumerGroup, member_id: &str, joining: bool) -> Snapshot {
        Snapshot {
            epoch: cg.group_epoch,
            assignment_epoch: cg.assignment_epoch,
            member: cg.members.get(member_id).cloned(),
            ids: if joining {
                cg.members.keys().cloned().collect()
            } else {
                Vec::new()
            },
        }
    }
}

/// How a request changed its member: `changed` when membership or its subscription moved
/// (the group epoch moves), `is_new` when it was admitted by this request.
pub(super) struct Change {
    pub(super) changed: bool,
    pub(super) is_new: bool,
}

/// After a request updated `member_id`'s record in `cg`: resolves the group's subscribed
/// topics, moves the group epoch and computes a new target if anything changed, reconciles the
/// member towards its target with what it says it `owned`, and stores its next state in `cg`.
/// Returns that state and the records of everything that changed since `snapshot`, in
/// Kafka's order, for the glue to store before answering. Shared by ConsumerGroupHeartbeat
/// and a classic member's JoinGroup (`migration.rs`).
#[allow(clippy::too_many_arguments)]
pub(super) fn settle(
    cg: &mut ConsumerGroup,
    group_id: &str,
    member_id: &str,
    change: Change,
    owned: Option<&Assignment>,
    snapshot: Snapshot,
    topics: &dyn TopicCatalog,
    default_assignor: Assignor,
) -> (ConsumerMember, Vec<GroupRecord>) {
    let Change { mut changed, is_new } = change;
    // The subscribed topics of the whole group, resolved against the topics now.
    let subscribed = resolve_group(cg, topics);
    if subscribed != cg.subscribed {
        cg.subscribed = subscribed;
        if cg.restored && !changed && cg.group_epoch == cg.assignment_epoch {
            // First heard from since a failover: the epoch moves only if the topics did.
            let resolved = cg.subscribed.clone();
            let target = cg.target_by(choose_assignor(cg, default_assignor), |m| member_topics(m, &resolved));
            changed = target != cg.target;
        } else {
            changed = true;
        }
    }
    cg.restored = false;
    if changed {
        cg.group_epoch += 1;
    }
    let mut target_records = Vec::new();
    if cg.group_epoch > cg.assignment_epoch {
        let assignor = choose_assignor(cg, default_assignor);
        let resolved = cg.subscribed.clone();
        let previous = cg.target.clone();
        cg.compute_target(assignor, |m| member_topics(m, &resolved));
        for (id, target) in &cg.target {
            if previous.get(id) != Some(target) {
                target_records.push(GroupRecord::Consumer(ConsumerRecord::TargetMember {
                    group_id: group_id.to_string(),
                    member_id: id.clone(),
                    value: Some(target.clone()),
                }));
            }
        }
    }

    let member = cg.members.get(member_id).expect("put by the caller").clone();
    let next = cg.reconcile(member_id, &member, owned);
    if next.state != member.state || next.member_epoch != member.member_epoch {
        tracing::debug!(
            group = %group_id,
            member = %member_id,
            epoch = next.member_epoch,
            state = next.state.name(),
            "consumer group member reconciled"
        );
    }
    let mut records = Vec::new();
    for id in snapshot.ids.iter().filter(|id| !cg.members.contains_key(*id)) {
        records.extend(member_tombstones(group_id, id));
    }
    let before = snapshot
        .member
        .as_ref()
        .filter(|_| !is_new || snapshot.ids.iter().any(|id| id == member_id));
    let member_records = member_records(group_id, member_id, before, &next);
    let (metadata, current): (Vec<_>, Vec<_>) = member_records
        .into_iter()
        .partition(|r| matches!(r, GroupRecord::Consumer(ConsumerRecord::Member { .. })));
    records.extend(metadata);
    if cg.group_epoch != snapshot.epoch {
        records.push(group_epoch_record(group_id, cg.group_epoch));
    }
    records.extend(target_records);
    if cg.assignment_epoch != snapshot.assignment_epoch {
        records.push(GroupRecord::Consumer(ConsumerRecord::TargetEpoch {
            group_id: group_id.to_string(),
            epoch: Some(cg.assignment_epoch),
        }));
    }
    records.extend(current);
    cg.put_member(member_id, next.clone());
    (next, records)
}

/// Kafka's request checks (`throwIfConsumerGroupHeartbeatRequestIsInvalid`).
fn check_request(req: &ConsumerHeartbeat, assignors: &[Assignor]) -> Result<(), HeartbeatError> {
    if req.group_id.is_empty() {
        return Err(invalid("GroupId can't be empty."));
    }
    if req.instance_id.as_deref() == Some("") {
        return Err(invalid("InstanceId can't be empty."));
    }
    match req.member_epoch {
        0 => {
            if req.rebalance_timeout_ms < 0 {
                return Err(invalid("RebalanceTimeoutMs must be provided in first request."));
            }
            if req.owned.as_ref().is_some_and(|o| o.values().any(|p| !p.is_empty())) {
                return Err(invalid("TopicPartitions must be empty when (re-)joining."));
            }
            if req.subscribed_topic_names.is_none() && req.subscribed_topic_regex.is_none() {
                return Err(invalid(
                    "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.",
                ));
            }
        }
        LEAVE_STATIC_EPOCH => {
            if req.instance_id.is_none() {
                return Err(invalid("InstanceId can't be null when leaving with epoch -2."));
            }
        }
        epoch if epoch < LEAVE_STATIC_EPOCH => return Err(invalid(format!("MemberEpoch {epoch} is not valid."))),
        _ => {}
    }
    if req.member_epoch != 0 && req.member_id.is_empty() {
        return Err(invalid("MemberId can't be empty."));
    }
    if let Some(name) = req.server_assignor.as_deref().filter(|a| !a.is_empty()) {
        if !assignors.iter().any(|a| a.name() == name) {
            let known: Vec<&str> = assignors.iter().map(|a| a.name()).collect();
            return Err((
                ResponseError::UnsupportedAssignor,
                format!(
                    "ServerAssignor {name} is not supported; this broker offers {}.",
                    known.join(", ")
                ),
            ));
        }
    }
    if let Some(regex) = req.subscribed_topic_regex.as_deref().filter(|r| !r.is_empty()) {
        compile_regex(regex)?;
    }
    Ok(())
}

/// Admits a joining member (epoch 0): a static member's instance returning takes over its
/// previous record; a dynamic member that rejoins under its id starts over.
fn join(
    cg: &mut ConsumerGroup,
    req: &ConsumerHeartbeat,
    max_size: usize,
    now: i64,
) -> Result<(String, ConsumerMember, bool), HeartbeatError> {
    let member_id = if req.member_id.is_empty() {
        req.new_member_id.clone()
    } else {
        req.member_id.clone()
    };
    if let Some(instance) = &req.instance_id {
        if let Some(previous_id) = cg.static_members.get(instance).cloned() {
            let previous_epoch = cg.members.get(&previous_id).map(|m| m.member_epoch);
            if previous_epoch.is_some_and(|e| e != LEAVE_STATIC_EPOCH) && previous_id != member_id {
                return Err((
                    ResponseError::UnreleasedInstanceId,
                    format!(
                        "Static member {instance} is still in group {:?} as member {previous_id}; it must leave first.",
                        req.group_id
                    ),
                ));
            }
            // The instance is back: it takes over its record (partitions, target and the epoch
            // it left at) under its new id.
            if let Some(mut member) = cg.rename_member(&previous_id, &member_id) {
                if member.member_epoch == LEAVE_STATIC_EPOCH {
                    member.member_epoch = member.previous_member_epoch;
                }
                member.last_heartbeat_ms = now;
                return Ok((member_id, member, false));
            }
        }
    }
    if cg.members.contains_key(&member_id) {
        cg.remove_member(&member_id);
    }
    if cg.members.len() >= max_size {
        return Err((
            ResponseError::GroupMaxSizeReached,
            format!(
                "Group {:?} already has group.max.size ({max_size}) members.",
                req.group_id
            ),
        ));
    }
    Ok((
        member_id,
        ConsumerMember::new(req.client_id.clone(), req.client_host.clone(), now),
        true,
    ))
}

/// Kafka's `throwIfMemberEpochIsInvalid`: a heartbeat at the member's epoch, or at its
/// previous one from a member that missed the answer that moved it (its owned partitions
/// then fit in what it has).
fn check_epoch(member: &ConsumerMember, req: &ConsumerHeartbeat) -> Result<(), HeartbeatError> {
    let fenced = || {
        (
            ResponseError::FencedMemberEpoch,
            format!(
                "Member {} sent epoch {} but is at epoch {}; it must rejoin.",
                req.member_id, req.member_epoch, member.member_epoch
            ),
        )
    };
    if req.member_epoch > member.member_epoch {
        return Err(fenced());
    }
    if req.member_epoch < member.member_epoch {
        let fits = req.owned.as_ref().is_some_and(|o| is_subset(o, &member.assigned));
        if req.member_epoch != member.previous_member_epoch || !fits {
            return Err(fenced());
        }
    }
    Ok(())
}

/// The topics one member's subscription resolves to, by id, among the group's resolved topics.
fn member_topics(member: &ConsumerMember, resolved: &SubscribedTopics) -> BTreeSet<Uuid> {
    let regex = member
        .subscribed_topic_regex
        .as_deref()
        .and_then(|r| compile_regex(r).ok());
    resolved
        .iter()
        .filter(|(name, _)| {
            member.subscribed_topic_names.binary_search(name).is_ok()
                || regex.as_ref().is_some_and(|r| r.is_match(name))
        })
        .map(|(_, (id, _))| *id)
        .collect()
}

/// Every existing topic some member subscribes to, by name or regex.
fn resolve_group(cg: &ConsumerGroup, topics: &dyn TopicCatalog) -> SubscribedTopics {
    let mut out = SubscribedTopics::new();
    let mut regexes: BTreeSet<&str> = BTreeSet::new();
    for member in cg.members.values() {
        for name in &member.subscribed_topic_names {
            if let Some(meta) = topics.topic(name) {
                out.insert(name.clone(), meta);
            }
        }
        if let Some(r) = &member.subscribed_topic_regex {
            regexes.insert(r);
        }
    }
    for pattern in regexes {
        let Ok(regex) = compile_regex(pattern) else {
            continue;
        };
        for name in topics.matching(&regex) {
            if let Some(meta) = topics.topic(&name) {
                out.insert(name, meta);
            }
        }
    }
    out
}

/// The assignor most members ask for; with none asked, the first of `group.consumer.assignors`.
fn choose_assignor(cg: &ConsumerGroup, default: Assignor) -> Assignor {
    let mut votes: HashMap<Assignor, usize> = HashMap::new();
    for m in cg.members.values() {
        if let Some(a) = m.server_assignor.as_deref().and_then(Assignor::by_name) {
            *votes.entry(a).or_default() += 1;
        }
    }
    Assignor::ALL
        .into_iter()
        .filter_map(|a| votes.get(&a).map(|n| (*n, a)))
        .max_by_key(|(n, a)| (*n, std::cmp::Reverse(a.name())))
        .map_or(default, |(_, a)| a)
}

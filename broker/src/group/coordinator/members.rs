//! JoinGroup, SyncGroup, Heartbeat and LeaveGroup: the member-facing requests and the join
//! paths of new, known and static members (KIP-345, KIP-394). They start and finish
//! rebalances through `rebalance.rs`.

use std::collections::HashMap;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;

use super::group::{check_member, stored_bytes, Group, Member};
use super::rebalance::{maybe_prepare_rebalance, prepare_rebalance, remove_member_and_update, try_complete_join};
use super::{
    AfterStore, Effect, Fx, GroupConfig, GroupCoordinator, GroupState, JoinRequest, JoinResult, MemberError, ReplyId,
    StaticJoin, SyncRequest, SyncResult,
};

impl GroupCoordinator {
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
        if self.is_share_group(&req.group_id) {
            // Kafka's answer to a classic member joining a group of another type.
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
        if group.consumer.is_some() {
            if !group.is_empty() {
                // Kafka's answer to a classic member joining a consumer group with members.
                return Err(ResponseError::InconsistentGroupProtocol);
            }
            // An empty consumer group becomes classic again; its offsets stay, its records go.
            group.consumer = None;
            group.protocol_type = None;
            fx.push(Effect::Records {
                partition,
                records: super::consumer_members::group_tombstones(&req.group_id),
            });
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
        if self.groups.get(&req.group_id).is_some_and(|g| g.consumer.is_some()) {
            let result = self.classic_sync_consumer_group(&req, now)?;
            fx.push(Effect::Sync(reply, result));
            return Ok(());
        }
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
                        then: AfterStore::CompleteSync,
                    });
                    group.pending_assignment = Some(assignments);
                }
                Ok(())
            }
        }
    }

    /// The outcome of storing a replaced static member's new id ([`AfterStore::AnswerStaticJoin`]):
    /// its JoinGroup is answered; or the store failed, the replacement is undone (the old
    /// instance's id, protocols and timeouts are back) and the JoinGroup gets `error`, as
    /// Kafka's `updateStaticMemberAndRebalance` does. Nothing is undone if the group moved on
    /// meanwhile (another generation, or the member gone).
    pub fn static_member_stored(&mut self, group_id: &str, join: StaticJoin, result: Result<(), ResponseError>) -> Fx {
        let StaticJoin {
            reply,
            result: answer,
            instance_id,
            old_member_id,
            new_member_id,
            old_protocols,
            old_session_timeout_ms,
            old_rebalance_timeout_ms,
        } = join;
        let error = match result {
            Ok(()) => return vec![Effect::Join(reply, answer)],
            Err(error) => error,
        };
        let failed = |generation_id| JoinResult {
            generation_id,
            member_id: String::new(),
            ..JoinResult::failed("", error)
        };
        let Some(group) = self.groups.get_mut(group_id) else {
            return vec![Effect::Join(reply, failed(-1))];
        };
        if group.generation_id == answer.generation_id {
            if let Some(mut member) = group.members.shift_remove(&new_member_id) {
                member.protocols = old_protocols;
                member.session_timeout_ms = old_session_timeout_ms;
                member.rebalance_timeout_ms = old_rebalance_timeout_ms;
                if group.leader_id.as_deref() == Some(new_member_id.as_str()) {
                    group.leader_id = Some(old_member_id.clone());
                }
                if group.pending_sync.remove(&new_member_id) {
                    group.pending_sync.insert(old_member_id.clone());
                }
                group.static_members.insert(instance_id, old_member_id.clone());
                group.members.insert(old_member_id, member);
            }
        }
        vec![Effect::Join(reply, failed(group.generation_id))]
    }

    /// The outcome of storing a generation's assignment ([`Effect::StoreGroup`] with
    /// [`AfterStore::CompleteSync`]): members get their assignments and the group is Stable, or the
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
        if self.groups.get(group_id).is_some_and(|g| g.consumer.is_some()) {
            return self.classic_heartbeat_consumer_group(group_id, member_id, instance_id, generation_id, now);
        }
        let group = self.groups.get_mut(group_id).ok_or(ResponseError::UnknownMemberId)?;
        match group.state {
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
        let partition = self.owner(group_id)?;
        let mut fx = Vec::new();
        if self.groups.get(group_id).is_some_and(|g| g.consumer.is_some()) {
            let (errors, records) = self.classic_leave_consumer_group(group_id, leaving);
            if !records.is_empty() {
                fx.push(Effect::Records { partition, records });
            }
            return Ok((errors, fx));
        }
        let config = self.config.clone();
        let Some(group) = self.groups.get_mut(group_id) else {
            return Ok((vec![Some(ResponseError::UnknownMemberId); leaving.len()], fx));
        };
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
        GroupState::Empty => return Err(ResponseError::UnknownMemberId),
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
    let old_session_timeout_ms = std::mem::replace(&mut member.session_timeout_ms, req.session_timeout_ms);
    let old_rebalance_timeout_ms = std::mem::replace(&mut member.rebalance_timeout_ms, req.rebalance_timeout_ms);
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
            // Answered once the new member id is stored (Kafka's order), or undone.
            let join = StaticJoin {
                reply,
                result,
                instance_id: req.group_instance_id.clone().unwrap_or_default(),
                old_member_id: old_id.to_string(),
                new_member_id: new_id,
                old_protocols,
                old_session_timeout_ms,
                old_rebalance_timeout_ms,
            };
            fx.push(Effect::StoreGroup {
                partition: group.partition,
                group_id: group.id.clone(),
                group: group.stored(None),
                generation_id: group.generation_id,
                then: AfterStore::AnswerStaticJoin(Box::new(join)),
            });
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

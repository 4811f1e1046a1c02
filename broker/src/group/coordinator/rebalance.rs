//! Rebalance transitions (Kafka's `prepareRebalance`, `onCompleteJoin`, member removal) and
//! the timers that drive them (`tick`: sessions, join and sync deadlines). Split from
//! `members.rs`, which calls into it, so the generation logic reads on its own.

use bytes::Bytes;
use kafka_protocol::error::ResponseError;

use super::group::{Group, InitialDelay, Member};
use super::{AfterStore, Effect, Fx, GroupConfig, GroupCoordinator, GroupState, SyncResult, NEW_MEMBER_JOIN_TIMEOUT_MS};

impl GroupCoordinator {
    // ---- timers ----

    /// Session expiry, join and sync deadlines, lapsed pending member ids.
    pub fn tick(&mut self, now: i64) -> Fx {
        let mut fx = self.expire_consumer_members(now);
        self.expire_share_members(now);
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
}

pub(super) fn maybe_prepare_rebalance(group: &mut Group, config: &GroupConfig, now: i64, fx: &mut Fx) {
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
pub(super) fn prepare_rebalance(group: &mut Group, config: &GroupConfig, now: i64, fx: &mut Fx) {
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
pub(super) fn try_complete_join(group: &mut Group, config: &GroupConfig, now: i64, fx: &mut Fx) {
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
            then: AfterStore::Nothing,
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
pub(super) fn remove_member_and_update(
    group: &mut Group,
    config: &GroupConfig,
    member_id: &str,
    now: i64,
    fx: &mut Fx,
) {
    let Some(member) = group.members.shift_remove(member_id) else {
        return;
    };
    forget_member(group, member_id, member, fx);
    match group.state {
        GroupState::Empty => {}
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

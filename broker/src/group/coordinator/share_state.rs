//! The share-partition states (KIP-932) this coordinator keeps for its share groups: the
//! partition leaders store each share-partition's state here after every acknowledgement
//! (WriteShareGroupState, or a call when the leader is this node) and a new leader reads it
//! back (ReadShareGroupState), so the state fails over with the group's `__consumer_offsets`
//! partition. Kafka keeps it with a separate share coordinator; the rules are Kafka's:
//!
//! - a write at a state epoch older than the stored one is FENCED_STATE_EPOCH (an admin reset
//!   the leader has not seen yet), and one at the stored state epoch from an older partition
//!   leader epoch is FENCED_LEADER_EPOCH (a leader that lost the partition);
//! - a reset (kafka-share-groups --reset-offsets) stores the new start offset at the next state
//!   epoch, with nothing in flight;
//! - deleting the group tombstones its states.

use std::collections::HashMap;

use kafka_protocol::error::ResponseError;
use uuid::Uuid;

use super::share::ShareGroup;
use super::{partition_for, Effect, Fx, GroupCoordinator, HeartbeatError};
use crate::group::records::GroupRecord;
use crate::share::state::ShareState;

/// States by (group, topic id, partition).
pub(in crate::group) type ShareStates = HashMap<(String, Uuid, i32), ShareState>;

/// Keeps `state` unless the one stored is at a newer state epoch: records replayed in log
/// order, or a write committed after a reset it raced with, never take a reset back.
pub(super) fn keep_newer(states: &mut ShareStates, key: (String, Uuid, i32), state: ShareState) {
    match states.get(&key) {
        Some(stored) if stored.state_epoch > state.state_epoch => {}
        _ => {
            states.insert(key, state);
        }
    }
}

impl GroupCoordinator {
    /// State batches one share-partition may store at most: its in-flight records are capped
    /// by `group.share.partition.max.record.locks`, and a batch acquired whole or split by
    /// per-record acknowledgements adds a few more ranges.
    pub fn max_share_state_batches(&self) -> usize {
        usize::try_from(self.config.share.partition_max_record_locks.max(1))
            .unwrap_or(usize::MAX)
            .saturating_mul(4)
            .saturating_add(4096)
    }

    /// The loaded partition's share states, and an empty share group for each group that has
    /// one, so the group is listed and described before its members come back.
    pub(super) fn restore_share_states(&mut self, partition: i32, states: ShareStates, _now: i64) {
        for (key, state) in states {
            if partition_for(&key.0, self.config.num_partitions) != partition || self.groups.contains_key(&key.0) {
                continue;
            }
            self.share_groups
                .entry(key.0.clone())
                .or_insert_with(|| ShareGroup::empty(partition));
            self.share_states.insert(key, state);
        }
    }

    /// ReadShareGroupState: the stored state, `None` when the leader is the first to have it.
    pub fn read_share_state(
        &self,
        group_id: &str,
        topic_id: Uuid,
        partition: i32,
    ) -> Result<Option<ShareState>, ResponseError> {
        self.owner(group_id)?;
        Ok(self
            .share_states
            .get(&(group_id.to_string(), topic_id, partition))
            .cloned())
    }

    /// Checks a leader's WriteShareGroupState before it is appended; returns the
    /// `__consumer_offsets` partition to append it to.
    pub fn check_share_write(
        &self,
        group_id: &str,
        topic_id: Uuid,
        partition: i32,
        state: &ShareState,
    ) -> Result<i32, HeartbeatError> {
        let offsets_partition = self.owner(group_id).map_err(|e| (e, String::new()))?;
        if self.groups.contains_key(group_id) {
            return Err((
                ResponseError::InvalidRequest,
                format!("Group {group_id} is not a share group."),
            ));
        }
        if let Some(problem) = state.problem(self.max_share_state_batches()) {
            return Err((
                ResponseError::InvalidRequest,
                format!("The share-partition state cannot be stored: {problem}."),
            ));
        }
        if let Some(stored) = self.share_states.get(&(group_id.to_string(), topic_id, partition)) {
            if state.state_epoch < stored.state_epoch {
                return Err((
                    ResponseError::FencedStateEpoch,
                    format!(
                        "The share-partition's state is at epoch {}, the write at {}: it was reset.",
                        stored.state_epoch, state.state_epoch
                    ),
                ));
            }
            if state.state_epoch == stored.state_epoch && state.leader_epoch < stored.leader_epoch {
                return Err((
                    ResponseError::FencedLeaderEpoch,
                    format!(
                        "The state was written by the partition's leader at epoch {}; this one is at {}.",
                        stored.leader_epoch, state.leader_epoch
                    ),
                ));
            }
        }
        Ok(offsets_partition)
    }

    /// A write checked by [`GroupCoordinator::check_share_write`] is stored: later reads see it.
    pub fn share_state_written(&mut self, group_id: &str, topic_id: Uuid, partition: i32, state: ShareState) {
        if self.owner(group_id).is_err() {
            return;
        }
        keep_newer(
            &mut self.share_states,
            (group_id.to_string(), topic_id, partition),
            state,
        );
    }

    /// The stored states of `group_id`'s share-partitions, in (topic id, partition) order.
    pub fn share_states_of(&self, group_id: &str) -> Vec<((Uuid, i32), ShareState)> {
        let mut states: Vec<_> = self
            .share_states
            .iter()
            .filter(|((g, _, _), _)| g == group_id)
            .map(|((_, topic_id, partition), s)| ((*topic_id, *partition), s.clone()))
            .collect();
        states.sort_by_key(|(k, _)| *k);
        states
    }

    /// The state a reset of the share-partition to `offset` stores: the next state epoch,
    /// nothing in flight. The caller checked the group with `share_group_for_reset`.
    pub fn reset_share_state(
        &self,
        group_id: &str,
        topic_id: Uuid,
        partition: i32,
        offset: i64,
    ) -> Result<(i32, ShareState), ResponseError> {
        let offsets_partition = self.owner(group_id)?;
        let state_epoch = self
            .share_states
            .get(&(group_id.to_string(), topic_id, partition))
            .map_or(0, |s| s.state_epoch)
            .saturating_add(1);
        Ok((
            offsets_partition,
            ShareState {
                state_epoch,
                leader_epoch: -1,
                start_offset: offset,
                batches: Vec::new(),
            },
        ))
    }

    /// DeleteShareGroupOffsets (kafka-share-groups --delete-offsets): the states of an empty
    /// share group's partitions of `topic_ids` go, so a member coming back starts those
    /// partitions from `share.auto.offset.reset`.
    pub fn delete_share_offsets(&mut self, group_id: &str, topic_ids: &[Uuid]) -> Result<Fx, HeartbeatError> {
        let offsets_partition = self.owner(group_id).map_err(|e| (e, String::new()))?;
        let Some(group) = self.share_groups.get(group_id) else {
            return Err((
                ResponseError::GroupIdNotFound,
                format!("Group {group_id} is not a share group this coordinator knows."),
            ));
        };
        if !group.members.is_empty() {
            return Err((
                ResponseError::NonEmptyGroup,
                format!("Share group {group_id} has members; stop its consumers before deleting its offsets."),
            ));
        }
        Ok(self.forget_share_states(group_id, offsets_partition, |topic_id| topic_ids.contains(&topic_id)))
    }

    /// Tombstones for `group_id`'s states of the topics `which` picks, which leave memory.
    pub(super) fn forget_share_states(
        &mut self,
        group_id: &str,
        offsets_partition: i32,
        which: impl Fn(Uuid) -> bool,
    ) -> Fx {
        let keys: Vec<(String, Uuid, i32)> = self
            .share_states
            .keys()
            .filter(|(g, topic_id, _)| g == group_id && which(*topic_id))
            .cloned()
            .collect();
        if keys.is_empty() {
            return Vec::new();
        }
        let records = keys
            .into_iter()
            .map(|key| {
                self.share_states.remove(&key);
                let (group_id, topic_id, partition) = key;
                GroupRecord::ShareState {
                    group_id,
                    topic_id,
                    partition,
                    value: None,
                }
            })
            .collect();
        vec![Effect::Records {
            partition: offsets_partition,
            records,
        }]
    }
}

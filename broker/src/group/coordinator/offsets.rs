//! Committed offsets: OffsetCommit validation, serving committed offsets, OffsetFetch,
//! OffsetDelete and retention expiry (KIP-211). Split from `mod.rs` because offsets are a
//! concern of their own next to membership.

use std::collections::hash_map::Entry;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;

use super::group::{check_member, CommittedOffset, Group};
use super::{CommittedOffsets, Effect, Fx, GroupCoordinator, GroupState, Load, MemberError};
use crate::group::records::OffsetAndMetadata;

impl GroupCoordinator {
    // ---- retention ----

    /// Drops offsets past `offsets.retention.minutes` (Kafka's KIP-211 rule: a consumer
    /// group's offsets expire once it has been empty that long; standalone commits that long
    /// after they were made) and forgets empty groups left with none. A partition an open
    /// transaction holds an offset for does not expire, and a group with an open transaction
    /// stays (Kafka 4.x): its COMMIT must find the group.
    pub fn expire_offsets(&mut self, now: i64) -> Fx {
        let retention = self.config.offsets_retention_ms;
        let mut fx = Vec::new();
        let mut dead = Vec::new();
        for (id, group) in self.groups.iter_mut() {
            if !group.is_empty() {
                continue;
            }
            let expired: Vec<(String, i32)> = group
                .offsets
                .iter()
                .filter(|(tp, o)| {
                    let base = if group.protocol_type.is_some() {
                        group.state_since_ms
                    } else {
                        o.value.commit_timestamp_ms
                    };
                    base.saturating_add(retention) <= now && !group.has_pending_txn_offset(tp)
                })
                .map(|(k, _)| k.clone())
                .collect();
            for key in &expired {
                group.offsets.remove(key);
            }
            let gone =
                group.offsets.is_empty() && group.pending_members.is_empty() && group.pending_txn_offsets.is_empty();
            if !expired.is_empty() || gone {
                fx.push(Effect::Tombstones {
                    partition: group.partition,
                    group_id: id.clone(),
                    offsets: expired,
                    group: gone,
                });
            }
            if gone {
                if group.consumer.is_some() {
                    fx.push(Effect::Records {
                        partition: group.partition,
                        records: super::consumer_members::group_tombstones(id),
                    });
                }
                dead.push(id.clone());
            }
        }
        for id in dead {
            self.groups.remove(&id);
        }
        fx
    }

    // ---- OffsetCommit, OffsetFetch and OffsetDelete ----

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
        self.validate_commit_as(group_id, member_id, instance_id, generation_id, false, now)
    }

    /// Kafka's `validateOffsetCommit`, for OffsetCommit and (`transactional`) TxnOffsetCommit.
    /// A TxnOffsetCommit before v3 names no member: it is accepted whatever the group's state,
    /// as is a transactional commit during CompletingRebalance (Kafka checks the state only
    /// for plain commits); one that names a member or generation (KIP-447) is checked like a
    /// plain commit, so a zombie producer of an old generation is fenced.
    pub(super) fn validate_commit_as(
        &mut self,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation_id: i32,
        transactional: bool,
        now: i64,
    ) -> Result<i32, ResponseError> {
        let partition = self.owner(group_id)?;
        let group = match self.groups.entry(group_id.to_string()) {
            Entry::Occupied(entry) => entry.into_mut(),
            Entry::Vacant(_) if generation_id >= 0 => return Err(ResponseError::IllegalGeneration),
            Entry::Vacant(entry) => entry.insert(Group::new(group_id, partition, now)),
        };
        if let Some(cg) = &group.consumer {
            Self::validate_consumer_commit(cg, member_id, generation_id, transactional)?;
            return Ok(partition);
        }
        if generation_id < 0 && group.state == GroupState::Empty {
            return Ok(partition);
        }
        let names_member = generation_id >= 0 || !member_id.is_empty() || instance_id.is_some();
        if transactional && !names_member {
            return Ok(partition);
        }
        // Kafka checks the member and its generation before the state.
        check_member(group, member_id, instance_id)?;
        if generation_id != group.generation_id {
            return Err(ResponseError::IllegalGeneration);
        }
        if !transactional && group.state == GroupState::CompletingRebalance {
            return Err(ResponseError::RebalanceInProgress);
        }
        if let Some(member) = group.members.get_mut(member_id) {
            member.last_heartbeat_ms = now;
        }
        Ok(partition)
    }

    /// Offsets whose records are committed in `__consumer_offsets`: now they are served.
    /// `base_offset` is the log offset of their batch, whose records are in `offsets`' order.
    /// An offset a committed transaction appended later than its record stays.
    pub fn offsets_committed(
        &mut self,
        group_id: &str,
        offsets: Vec<((String, i32), OffsetAndMetadata)>,
        base_offset: i64,
        now: i64,
    ) {
        let partition = self.partition_for(group_id);
        if !matches!(self.partitions.get(&partition), Some(Load::Loaded { .. })) {
            return;
        }
        let group = self
            .groups
            .entry(group_id.to_string())
            .or_insert_with(|| Group::new(group_id, partition, now));
        for (record_offset, (tp, value)) in (base_offset..).zip(offsets) {
            CommittedOffset::keep_latest(&mut group.offsets, tp, CommittedOffset { value, record_offset });
        }
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
                        let value = offsets.and_then(|o| o.get(&(topic.clone(), *p)).map(|c| c.value.clone()));
                        (topic.clone(), *p, value)
                    })
                })
                .collect(),
            None => {
                let mut all: Vec<_> = offsets
                    .into_iter()
                    .flatten()
                    .map(|((t, p), o)| (t.clone(), *p, Some(o.value.clone())))
                    .collect();
                all.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
                all
            }
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
            _ if group.consumer.is_some() => !group.is_empty(),
            GroupState::Empty => false,
            _ if group.protocol_type.as_deref() == Some("consumer") => true,
            _ => return Err(ResponseError::NonEmptyGroup),
        };
        let protocol = group.protocol_name.clone();
        let mut errors = Vec::with_capacity(partitions.len());
        let mut deleted = Vec::new();
        for (topic, p) in partitions {
            let in_use = active
                && match &group.consumer {
                    Some(cg) => cg.subscribed.contains_key(topic),
                    None => group
                        .members
                        .values()
                        .any(|m| subscribed(&m.metadata(protocol.as_deref()), topic)),
                };
            if in_use {
                errors.push(Some(ResponseError::GroupSubscribedToTopic));
            } else {
                let tp = (topic.clone(), *p);
                group.offsets.remove(&tp);
                group.drop_pending_txn_offset(&tp);
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

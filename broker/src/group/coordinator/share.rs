//! KIP-932 share groups on the group coordinator: membership by ShareGroupHeartbeat and the
//! assignment of partitions to members (Kafka's `SimpleAssignor` idea: every subscribed
//! partition has a member, every member a partition, and with more members than partitions a
//! partition is shared). There is no revocation: records are handed out one acquisition at a
//! time by the partition leaders (`share::partition`), so a member simply gets its new
//! assignment at the group's new epoch.
//!
//! Share groups share the group id namespace with classic and consumer groups, as in Kafka: a
//! heartbeat for an id a consumer or classic group holds is refused, and theirs for an id a
//! share group holds. Members are kept in memory: after a coordinator move they rejoin (the
//! heartbeat answers UNKNOWN_MEMBER_ID and the client joins again at epoch 0); what they
//! acknowledged is kept by the partition leaders, not here.

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::error::ResponseError;
use uuid::Uuid;

use super::consumer_members::{HeartbeatError, TopicCatalog};
use super::GroupCoordinator;
use crate::group::assignor::Assignment;

/// A member's epoch in a ShareGroupHeartbeat that leaves the group.
pub const SHARE_LEAVE_EPOCH: i32 = -1;

#[derive(Debug, Clone)]
pub struct ShareHeartbeat {
    pub group_id: String,
    pub member_id: String,
    pub member_epoch: i32,
    pub rack_id: Option<String>,
    /// `None`: unchanged since the last heartbeat.
    pub subscribed_topic_names: Option<Vec<String>>,
    pub client_id: String,
    pub client_host: String,
    /// The group's `share.session.timeout.ms` and `share.heartbeat.interval.ms` group configs,
    /// where set (else the broker's `group.share.*`).
    pub session_timeout_ms: Option<i32>,
    pub heartbeat_interval_ms: Option<i32>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareHeartbeatResult {
    pub member_id: String,
    pub member_epoch: i32,
    pub heartbeat_interval_ms: i32,
    /// Set when the member's assignment is new to it (a join, or a new epoch).
    pub assignment: Option<Assignment>,
}

#[derive(Debug, Clone)]
pub struct ShareMember {
    pub member_epoch: i32,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_topic_names: BTreeSet<String>,
    pub assignment: Assignment,
    pub session_deadline_ms: i64,
}

#[derive(Debug, Default)]
pub struct ShareGroup {
    pub partition: i32,
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub members: BTreeMap<String, ShareMember>,
    /// Partition counts of the subscribed topics when the assignment was computed: a topic
    /// created, deleted or grown since bumps the epoch.
    subscribed_partitions: BTreeMap<String, Option<(Uuid, i32)>>,
    /// Each member's assignment at the assignment epoch; a member takes its own on its next
    /// heartbeat, moving to that epoch.
    targets: BTreeMap<String, Assignment>,
}

impl ShareGroup {
    /// A share group with no member yet, held in `__consumer_offsets` partition `partition`.
    pub(super) fn empty(partition: i32) -> ShareGroup {
        ShareGroup {
            partition,
            ..ShareGroup::default()
        }
    }

    /// Kafka's share group states: Empty, Stable (Kafka has no rebalance to wait for here).
    pub fn state_name(&self) -> &'static str {
        if self.members.is_empty() {
            "Empty"
        } else {
            "Stable"
        }
    }

    fn subscriptions(&self, topics: &dyn TopicCatalog) -> BTreeMap<String, Option<(Uuid, i32)>> {
        self.members
            .values()
            .flat_map(|m| m.subscribed_topic_names.iter())
            .map(|name| (name.clone(), topics.topic(name)))
            .collect()
    }

    /// Moves the group epoch once if the members changed (`members_changed`) or the subscribed
    /// topics did, and computes the assignment at the new epoch.
    fn assign_if_needed(&mut self, topics: &dyn TopicCatalog, members_changed: bool) {
        let subscribed = self.subscriptions(topics);
        if members_changed || subscribed != self.subscribed_partitions {
            self.group_epoch += 1;
            self.subscribed_partitions = subscribed;
        }
        if self.assignment_epoch == self.group_epoch {
            return;
        }
        self.targets = assign(&self.members, &self.subscribed_partitions);
        self.assignment_epoch = self.group_epoch;
    }

    /// Moves `member_id` to the assignment epoch with its target, if it is behind.
    fn reconcile(&mut self, member_id: &str) {
        let Some(member) = self.members.get_mut(member_id) else {
            return;
        };
        if member.member_epoch != self.assignment_epoch {
            member.member_epoch = self.assignment_epoch;
            member.assignment = self.targets.get(member_id).cloned().unwrap_or_default();
        }
    }
}

/// Every subscribed partition to at least one subscriber and every subscriber to at least one
/// partition of each topic it subscribes to: with no more members than partitions, partition
/// p goes to the (p mod m)th member; with more, member i gets partition (i mod n). Members in
/// id order, so the answer depends only on the group.
pub fn assign(
    members: &BTreeMap<String, ShareMember>,
    topics: &BTreeMap<String, Option<(Uuid, i32)>>,
) -> BTreeMap<String, Assignment> {
    let mut out: BTreeMap<String, Assignment> = BTreeMap::new();
    for (name, topic) in topics {
        let Some((topic_id, partitions)) = topic else {
            continue;
        };
        let subscribers: Vec<&String> = members
            .iter()
            .filter(|(_, m)| m.subscribed_topic_names.contains(name))
            .map(|(id, _)| id)
            .collect();
        let (m, n) = (subscribers.len(), usize::try_from(*partitions).unwrap_or(0));
        if m == 0 || n == 0 {
            continue;
        }
        let mut give = |member: &String, partition: usize| {
            out.entry(member.clone())
                .or_default()
                .entry(*topic_id)
                .or_default()
                .insert(partition as i32);
        };
        if m <= n {
            (0..n).for_each(|p| give(subscribers[p % m], p));
        } else {
            subscribers
                .iter()
                .enumerate()
                .for_each(|(i, member)| give(member, i % n));
        }
    }
    out
}

/// A share group as ShareGroupDescribe and kafka-share-groups show it.
#[derive(Debug, Clone)]
pub struct ShareGroupSummary {
    pub state: &'static str,
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub members: Vec<(String, ShareMember)>,
}

fn invalid(message: impl Into<String>) -> HeartbeatError {
    (ResponseError::InvalidRequest, message.into())
}

impl GroupCoordinator {
    /// ShareGroupHeartbeat: join (epoch 0, with the member id the client chose, as Kafka 4.1+
    /// clients do), heartbeat at the member's epoch, or leave (-1).
    pub fn share_heartbeat(
        &mut self,
        req: ShareHeartbeat,
        topics: &dyn TopicCatalog,
        now: i64,
    ) -> Result<ShareHeartbeatResult, HeartbeatError> {
        if req.group_id.is_empty() {
            return Err(invalid("GroupId can't be empty."));
        }
        if req.member_id.is_empty() {
            return Err(invalid("MemberId can't be empty."));
        }
        if req.member_epoch < SHARE_LEAVE_EPOCH {
            return Err(invalid(format!("MemberEpoch {} is not valid.", req.member_epoch)));
        }
        if req.member_epoch == 0 && req.subscribed_topic_names.as_ref().is_none_or(|n| n.is_empty()) {
            return Err(invalid(
                "SubscribedTopicNames must be set and not empty in first request.",
            ));
        }
        let partition = self.owner(&req.group_id).map_err(|e| (e, String::new()))?;
        if self.groups.contains_key(&req.group_id) {
            return Err((
                ResponseError::GroupIdNotFound,
                format!(
                    "Group {} is not a share group: a classic or consumer group holds this id.",
                    req.group_id
                ),
            ));
        }
        let config = self.config.share;
        let interval = req.heartbeat_interval_ms.unwrap_or(config.heartbeat_interval_ms);
        if req.member_epoch == SHARE_LEAVE_EPOCH {
            if let Some(group) = self.share_groups.get_mut(&req.group_id) {
                if group.members.remove(&req.member_id).is_some() {
                    group.assign_if_needed(topics, true);
                }
            }
            return Ok(ShareHeartbeatResult {
                member_id: req.member_id,
                member_epoch: SHARE_LEAVE_EPOCH,
                heartbeat_interval_ms: interval,
                assignment: None,
            });
        }
        let group = self
            .share_groups
            .entry(req.group_id.clone())
            .or_insert_with(|| ShareGroup::empty(partition));
        let session_deadline_ms = now + i64::from(req.session_timeout_ms.unwrap_or(config.session_timeout_ms));
        let known_epoch = group.members.get(&req.member_id).map(|m| m.member_epoch);
        let mut changed = false;
        match (req.member_epoch, known_epoch) {
            (0, None) => {
                if group.members.len() >= config.max_size {
                    return Err((
                        ResponseError::GroupMaxSizeReached,
                        format!(
                            "Share group {} has {} members, as many as group.share.max.size allows.",
                            req.group_id, config.max_size
                        ),
                    ));
                }
                group.members.insert(
                    req.member_id.clone(),
                    ShareMember {
                        member_epoch: 0,
                        rack_id: None,
                        client_id: String::new(),
                        client_host: String::new(),
                        subscribed_topic_names: BTreeSet::new(),
                        assignment: Assignment::new(),
                        session_deadline_ms,
                    },
                );
                changed = true;
            }
            // Rejoining under the same id: the member lost its state; it is taken back as is.
            (0, Some(_)) => changed = true,
            (_, None) => {
                return Err((
                    ResponseError::UnknownMemberId,
                    format!(
                        "Member {} is not in share group {}; it rejoins.",
                        req.member_id, req.group_id
                    ),
                ))
            }
            (sent, Some(known)) if sent != known => {
                return Err((
                    ResponseError::FencedMemberEpoch,
                    format!("Member epoch {sent} is not the member's current epoch {known}; it rejoins."),
                ))
            }
            _ => {}
        }
        let member = group.members.get_mut(&req.member_id).expect("admitted above");
        let epoch_before = if req.member_epoch == 0 { -1 } else { member.member_epoch };
        member.session_deadline_ms = session_deadline_ms;
        member.client_id = req.client_id;
        member.client_host = req.client_host;
        member.rack_id = req.rack_id;
        if let Some(names) = req.subscribed_topic_names {
            let names: BTreeSet<String> = names.into_iter().collect();
            if names != member.subscribed_topic_names {
                member.subscribed_topic_names = names;
                changed = true;
            }
        }
        group.assign_if_needed(topics, changed);
        group.reconcile(&req.member_id);
        let member = &group.members[&req.member_id];
        Ok(ShareHeartbeatResult {
            member_id: req.member_id,
            member_epoch: member.member_epoch,
            heartbeat_interval_ms: interval,
            assignment: (member.member_epoch != epoch_before).then(|| member.assignment.clone()),
        })
    }

    /// Removes share group members whose session ran out; the others get a new assignment on
    /// their next heartbeat (the group epoch moved).
    pub(super) fn expire_share_members(&mut self, now: i64) {
        for (group_id, group) in self.share_groups.iter_mut() {
            let before = group.members.len();
            group.members.retain(|member_id, m| {
                let alive = m.session_deadline_ms > now;
                if !alive {
                    tracing::info!(group = %group_id, member = %member_id, "share group member's session expired; removing it");
                }
                alive
            });
            if group.members.len() < before {
                // The assignment follows on the next heartbeat, which has the topics.
                group.group_epoch += 1;
            }
        }
    }

    pub fn describe_share_group(&self, group_id: &str) -> Result<ShareGroupSummary, HeartbeatError> {
        self.owner(group_id).map_err(|e| (e, String::new()))?;
        let Some(group) = self.share_groups.get(group_id) else {
            let message = if self.groups.contains_key(group_id) {
                format!("Group {group_id} is not a share group.")
            } else {
                format!("Group {group_id} not found.")
            };
            return Err((ResponseError::GroupIdNotFound, message));
        };
        Ok(ShareGroupSummary {
            state: group.state_name(),
            group_epoch: group.group_epoch,
            assignment_epoch: group.assignment_epoch,
            members: group.members.iter().map(|(id, m)| (id.clone(), m.clone())).collect(),
        })
    }

    /// AlterShareGroupOffsets' check: `group_id` is a share group of this coordinator (an unknown
    /// id becomes an empty one, as Kafka) with no member.
    pub fn share_group_for_reset(&mut self, group_id: &str) -> Result<(), HeartbeatError> {
        let partition = self.owner(group_id).map_err(|e| (e, String::new()))?;
        if self.groups.contains_key(group_id) {
            return Err((
                ResponseError::GroupIdNotFound,
                format!("Group {group_id} is not a share group."),
            ));
        }
        let group = self
            .share_groups
            .entry(group_id.to_string())
            .or_insert_with(|| ShareGroup::empty(partition));
        if !group.members.is_empty() {
            return Err((
                ResponseError::NonEmptyGroup,
                format!("Share group {group_id} has members; stop its consumers before resetting its offsets."),
            ));
        }
        Ok(())
    }

    /// Whether `group_id` is a share group this coordinator holds.
    pub fn is_share_group(&self, group_id: &str) -> bool {
        self.share_groups.contains_key(group_id)
    }
}

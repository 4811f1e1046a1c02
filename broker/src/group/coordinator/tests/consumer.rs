//! KIP-848 consumer groups: joining, incremental reconciliation (revoke before assign, never a
//! partition held twice), epochs and fencing, leaving and expiry, static members, regex
//! subscriptions, the offset-commit checks by member epoch, and the boundary with classic groups.
use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use super::*;
use crate::group::assignor::Assignment;
use crate::group::records::GroupRecord;

thread_local! {
    /// Every record the coordinator asked to store in this test, in order.
    static STORED: std::cell::RefCell<Vec<GroupRecord>> = const { std::cell::RefCell::new(Vec::new()) };
}

struct Topics(BTreeMap<String, (Uuid, i32)>);

impl TopicCatalog for Topics {
    fn topic(&self, name: &str) -> Option<(Uuid, i32)> {
        self.0.get(name).copied()
    }

    fn matching(&self, pattern: &regex::Regex) -> Vec<String> {
        self.0.keys().filter(|n| pattern.is_match(n)).cloned().collect()
    }
}

fn id(n: u8) -> Uuid {
    Uuid::from_bytes([n; 16])
}

fn topics() -> Topics {
    Topics([("orders".to_string(), (id(1), 4)), ("payments".to_string(), (id(2), 2))].into())
}

fn hb(member_id: &str, epoch: i32) -> ConsumerHeartbeat {
    ConsumerHeartbeat {
        group_id: "g".into(),
        member_id: member_id.into(),
        member_epoch: epoch,
        instance_id: None,
        rack_id: None,
        rebalance_timeout_ms: if epoch == 0 { 60_000 } else { -1 },
        subscribed_topic_names: (epoch == 0).then(|| vec!["orders".to_string()]),
        subscribed_topic_regex: None,
        server_assignor: None,
        owned: (epoch == 0).then(Assignment::new),
        client_id: "client".into(),
        client_host: "/127.0.0.1".into(),
        new_member_id: format!("{member_id}-new"),
        session_timeout_ms: None,
        heartbeat_interval_ms: None,
    }
}

fn owning(mut h: ConsumerHeartbeat, owned: &Assignment) -> ConsumerHeartbeat {
    h.owned = Some(owned.clone());
    h
}

fn orders(ps: &[i32]) -> Assignment {
    if ps.is_empty() {
        return Assignment::new();
    }
    [(id(1), ps.iter().copied().collect::<BTreeSet<i32>>())].into()
}

impl Fixture {
    fn consumer(&mut self, h: ConsumerHeartbeat) -> Result<ConsumerHeartbeatResult, HeartbeatError> {
        let result = self.coordinator.consumer_heartbeat(h, &topics(), self.now);
        if let Some(cg) = self.coordinator.groups.get("g").and_then(|g| g.consumer.as_ref()) {
            cg.check_owners();
        }
        result.map(|(answer, records, _answered)| {
            STORED.with(|log| log.borrow_mut().extend(records));
            answer
        })
    }

    fn consumer_ok(&mut self, h: ConsumerHeartbeat) -> ConsumerHeartbeatResult {
        self.consumer(h).unwrap_or_else(|e| panic!("heartbeat refused: {e:?}"))
    }

    fn consumer_err(&mut self, h: ConsumerHeartbeat) -> ResponseError {
        self.consumer(h).expect_err("heartbeat accepted").0
    }

    fn group_state(&self) -> &'static str {
        self.coordinator.describe_consumer_group("g").unwrap().state
    }
}

fn fixture() -> Fixture {
    Fixture::new(config())
}

#[test]
fn a_lone_member_gets_every_partition_of_its_topics_at_epoch_one() {
    let mut f = fixture();
    let joined = f.consumer_ok(hb("a", 0));
    assert_eq!(joined.member_epoch, 1);
    assert_eq!(joined.assignment, Some(orders(&[0, 1, 2, 3])));
    assert_eq!(joined.heartbeat_interval_ms, 5_000);
    assert_eq!(f.group_state(), "Stable");
    // A heartbeat with nothing new carries no assignment.
    let again = f.consumer_ok(hb("a", 1));
    assert_eq!((again.member_epoch, again.assignment), (1, None));
    let (groups, _) = f.coordinator.list_groups();
    assert_eq!(groups[0].group_type, "consumer");
    assert_eq!(groups[0].protocol_type, "consumer");
}

#[test]
fn a_joining_member_gets_partitions_only_after_the_holder_revokes_them() {
    let mut f = fixture();
    f.consumer_ok(hb("a", 0));
    // b joins at group epoch 2; a still holds everything, so b waits at epoch 2 with nothing.
    let b = f.consumer_ok(hb("b", 0));
    assert_eq!(b.member_epoch, 2);
    assert_eq!(b.assignment, Some(Assignment::new()));
    assert_eq!(f.group_state(), "Reconciling");

    // a is asked to give two up and stays at epoch 1 until it has.
    let a = f.consumer_ok(hb("a", 1));
    assert_eq!(a.member_epoch, 1);
    let kept = a.assignment.expect("a's assignment shrinks");
    assert_eq!(kept.values().map(BTreeSet::len).sum::<usize>(), 2);
    // Still owning the revoked ones: no progress.
    let still = f.consumer_ok(owning(hb("a", 1), &orders(&[0, 1, 2, 3])));
    assert_eq!(still.member_epoch, 1);
    // b cannot have them yet either.
    assert_eq!(f.consumer_ok(hb("b", 2)).assignment, None);

    // a confirms: it moves to epoch 2, and b then gets the two a gave up.
    let done = f.consumer_ok(owning(hb("a", 1), &kept));
    assert_eq!(done.member_epoch, 2);
    let b = f.consumer_ok(hb("b", 2));
    let given = b.assignment.expect("b gets the released partitions");
    let mut all: Vec<i32> = kept[&id(1)].iter().chain(given[&id(1)].iter()).copied().collect();
    all.sort();
    assert_eq!(all, vec![0, 1, 2, 3]);
    assert_eq!(f.group_state(), "Stable");
}

#[test]
fn epochs_ahead_or_unknown_members_are_fenced_and_the_previous_epoch_is_tolerated() {
    let mut f = fixture();
    f.consumer_ok(hb("a", 0));
    assert_eq!(f.consumer_err(hb("a", 2)), ResponseError::FencedMemberEpoch);
    assert_eq!(f.consumer_err(hb("nobody", 1)), ResponseError::UnknownMemberId);
    f.consumer_ok(hb("b", 0));
    let a = f.consumer_ok(hb("a", 1));
    let kept = a.assignment.unwrap();
    assert_eq!(f.consumer_ok(owning(hb("a", 1), &kept)).member_epoch, 2);
    // The answer that moved a to 2 was lost: epoch 1 with what it holds is still accepted.
    assert_eq!(f.consumer_ok(owning(hb("a", 1), &kept)).member_epoch, 2);
    // Epoch 1 claiming partitions it no longer has is not.
    assert_eq!(
        f.consumer_err(owning(hb("a", 1), &orders(&[0, 1, 2, 3]))),
        ResponseError::FencedMemberEpoch
    );
}

#[test]
fn a_member_that_leaves_or_expires_hands_its_partitions_to_the_others() {
    let mut f = fixture();
    f.consumer_ok(hb("a", 0));
    f.consumer_ok(hb("b", 0));
    let kept = f.consumer_ok(hb("a", 1)).assignment.unwrap();
    f.consumer_ok(owning(hb("a", 1), &kept));
    f.consumer_ok(hb("b", 2));

    let left = f.consumer_ok(hb("b", LEAVE_EPOCH));
    assert_eq!(left.member_epoch, LEAVE_EPOCH);
    let a = f.consumer_ok(hb("a", 2));
    assert_eq!((a.member_epoch, a.assignment), (3, Some(orders(&[0, 1, 2, 3]))));

    // c joins and then stops heartbeating: after the session timeout a gets everything back.
    f.consumer_ok(hb("c", 0));
    let kept = f.consumer_ok(hb("a", 3)).assignment.unwrap();
    f.consumer_ok(owning(hb("a", 3), &kept));
    f.now += 40_000;
    f.consumer_ok(hb("a", 4));
    f.advance(6_000);
    assert_eq!(f.consumer_err(hb("c", 4)), ResponseError::UnknownMemberId);
    let a = f.consumer_ok(hb("a", 4));
    assert_eq!(a.assignment, Some(orders(&[0, 1, 2, 3])));
}

#[test]
fn a_member_that_does_not_revoke_within_its_rebalance_timeout_is_removed() {
    let mut f = fixture();
    let mut join = hb("a", 0);
    join.rebalance_timeout_ms = 10_000;
    f.consumer_ok(join);
    f.consumer_ok(hb("b", 0));
    f.consumer_ok(hb("a", 1)); // asked to revoke
    f.advance(5_000);
    f.consumer_ok(hb("b", 2));
    f.advance(5_100);
    assert_eq!(f.consumer_err(hb("a", 1)), ResponseError::UnknownMemberId);
    let b = f.consumer_ok(hb("b", 2));
    assert_eq!(b.assignment, Some(orders(&[0, 1, 2, 3])));
}

#[test]
fn a_static_member_keeps_its_partitions_across_a_restart() {
    let mut f = fixture();
    let mut join = hb("a", 0);
    join.instance_id = Some("instance-1".into());
    f.consumer_ok(join.clone());
    f.consumer_ok(hb("b", 0));
    let kept = f.consumer_ok(hb("a", 1)).assignment.unwrap();
    let mut confirm = owning(hb("a", 1), &kept);
    confirm.instance_id = Some("instance-1".into());
    f.consumer_ok(confirm);

    // Another process with the same instance id while a is in: refused.
    let mut twin = join.clone();
    twin.member_id = "a2".into();
    assert_eq!(f.consumer_err(twin.clone()), ResponseError::UnreleasedInstanceId);

    // a leaves for a restart (-2) and comes back as a2 with its partitions and epoch.
    let mut leave = hb("a", LEAVE_STATIC_EPOCH);
    leave.instance_id = Some("instance-1".into());
    f.consumer_ok(leave);
    let back = f.consumer_ok(twin);
    assert_eq!(back.member_epoch, 2);
    assert_eq!(back.assignment, Some(kept));
    let summary = f.coordinator.describe_consumer_group("g").unwrap();
    let ids: Vec<&str> = summary.members.iter().map(|m| m.member_id.as_str()).collect();
    assert_eq!(ids, vec!["a2", "b"]);
}

#[test]
fn regex_subscriptions_follow_topics_as_they_appear() {
    let mut f = fixture();
    let mut join = hb("a", 0);
    join.subscribed_topic_names = None;
    join.subscribed_topic_regex = Some("pay.*".into());
    let joined = f.consumer_ok(join);
    assert_eq!(joined.assignment, Some([(id(2), [0, 1].into())].into()));

    let mut bad = hb("b", 0);
    bad.subscribed_topic_regex = Some("(".into());
    assert_eq!(f.consumer_err(bad), ResponseError::InvalidRegularExpression);
    let mut assignor = hb("b", 0);
    assignor.server_assignor = Some("sticky".into());
    assert_eq!(f.consumer_err(assignor), ResponseError::UnsupportedAssignor);

    // A new topic matching the regex moves the group epoch and is assigned.
    let more = Topics(
        [
            ("orders".to_string(), (id(1), 4)),
            ("payments".to_string(), (id(2), 2)),
            ("payouts".to_string(), (id(3), 1)),
        ]
        .into(),
    );
    let (a, _, _) = f.coordinator.consumer_heartbeat(hb("a", 1), &more, f.now).unwrap();
    assert_eq!(a.member_epoch, 2);
    assert_eq!(a.assignment, Some([(id(2), [0, 1].into()), (id(3), [0].into())].into()));
}

#[test]
fn offset_commits_are_checked_by_member_epoch() {
    let mut f = fixture();
    f.consumer_ok(hb("a", 0));
    assert_eq!(f.coordinator.validate_commit("g", "a", None, 1, f.now), Ok(0));
    assert_eq!(
        f.coordinator.validate_commit("g", "a", None, 0, f.now),
        Err(ResponseError::StaleMemberEpoch)
    );
    assert_eq!(
        f.coordinator.validate_commit("g", "x", None, 1, f.now),
        Err(ResponseError::UnknownMemberId)
    );
    // Outside group management only while the group has no members.
    assert_eq!(
        f.coordinator.validate_commit("g", "", None, -1, f.now),
        Err(ResponseError::UnknownMemberId)
    );
    f.consumer_ok(hb("a", LEAVE_EPOCH));
    assert_eq!(f.coordinator.validate_commit("g", "", None, -1, f.now), Ok(0));
    assert_eq!(f.group_state(), "Empty");
}

#[test]
fn classic_members_that_do_not_speak_the_consumer_protocol_stay_out_of_consumer_groups() {
    let mut f = fixture();
    f.consumer_ok(hb("a", 0));
    // A classic member whose metadata is not Kafka's consumer protocol cannot join a
    // consumer group with members (`migration.rs` takes those that are).
    assert!(f.coordinator.has_consumer_members("g"));
    let join = |metadata: &'static [u8]| JoinRequest {
        group_id: "g".into(),
        member_id: String::new(),
        group_instance_id: None,
        client_id: "c".into(),
        client_host: "h".into(),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 10_000,
        protocol_type: "consumer".into(),
        protocols: vec![("range".into(), Bytes::from_static(metadata))],
        require_known_member_id: false,
        new_member_id: "classic-1".into(),
    };
    let (refused, records) =
        f.coordinator
            .classic_join_consumer_group(&join(b"not a subscription"), &topics(), f.now);
    assert_eq!(refused.error, Some(ResponseError::InconsistentGroupProtocol));
    assert!(records.is_empty());
    // Nor through the classic path, should the glue send it there.
    let (reply, fx) = f.join(join(b""));
    assert!(
        matches!(&fx[..], [Effect::Join(r, res)] if *r == reply && res.error == Some(ResponseError::InconsistentGroupProtocol))
    );
    assert_eq!(
        f.coordinator.delete_group("g").unwrap_err(),
        ResponseError::NonEmptyGroup
    );
    // DescribeGroups does not describe a consumer group; ConsumerGroupDescribe does.
    assert!(f.coordinator.describe_group("g").unwrap().is_none());
    // Once empty it may be deleted.
    f.consumer_ok(hb("a", LEAVE_EPOCH));
    assert!(f.coordinator.delete_group("g").is_ok());
    // A classic group is not a consumer group for ConsumerGroupDescribe.
    assert_eq!(
        f.coordinator.describe_consumer_group("nope").unwrap_err().0,
        ResponseError::GroupIdNotFound
    );
}

#[test]
fn a_new_coordinator_rebuilds_the_group_from_its_records() {
    STORED.with(|log| log.borrow_mut().clear());
    let mut f = fixture();
    let mut join = hb("a", 0);
    join.instance_id = Some("instance-1".into());
    join.rack_id = Some("rack-1".into());
    f.consumer_ok(join);
    f.consumer_ok(hb("b", 0));
    f.consumer_ok(hb("c", 0));
    let kept = f.consumer_ok(hb("a", 1)).assignment.unwrap();
    f.consumer_ok(hb("c", LEAVE_EPOCH));
    f.consumer_ok(owning(hb("a", 1), &kept)); // a revoked; moves on towards the newest target
    f.consumer_ok(hb("b", 2));
    let before = f.coordinator.describe_consumer_group("g").unwrap();

    // Replay what was stored (through its bytes) on a fresh coordinator.
    let records = STORED.with(|log| replayed(&log.borrow()));
    let mut restored = GroupCoordinator::new(GroupConfig {
        num_partitions: 1,
        ..config()
    });
    restored.begin_load(0, 2);
    assert!(restored.complete_load(0, 2, records, f.now));
    let after = restored.describe_consumer_group("g").unwrap();
    assert_eq!(
        (after.group_epoch, after.assignment_epoch),
        (before.group_epoch, before.assignment_epoch)
    );
    let view = |s: &ConsumerGroupSummary| -> Vec<_> {
        s.members
            .iter()
            .map(|m| {
                (
                    m.member_id.clone(),
                    m.member_epoch,
                    m.state,
                    m.instance_id.clone(),
                    m.rack_id.clone(),
                    m.assignment.clone(),
                    m.target.clone(),
                )
            })
            .collect()
    };
    assert_eq!(view(&after), view(&before));
    assert_eq!(after.members.len(), 2, "c left and stays gone");
    // Members carry on at their epochs with the new coordinator.
    let b_epoch = after.members.iter().find(|m| m.member_id == "b").unwrap().member_epoch;
    let mut f2 = Fixture {
        coordinator: restored,
        now: f.now,
        next_reply: 1,
    };
    assert_eq!(f2.consumer_ok(hb("b", b_epoch)).member_epoch, b_epoch);
}

#[test]
fn the_groups_own_session_timeout_and_heartbeat_interval_configs_apply() {
    let mut f = fixture();
    let with_group_configs = |h: ConsumerHeartbeat| ConsumerHeartbeat {
        session_timeout_ms: Some(50_000),
        heartbeat_interval_ms: Some(7_000),
        ..h
    };
    let a = f.consumer_ok(with_group_configs(hb("a", 0)));
    assert_eq!(a.heartbeat_interval_ms, 7_000);
    // Past the broker's 45 s, within the group's 50 s: still a member.
    f.advance(46_000);
    let a = f.consumer_ok(with_group_configs(hb("a", 1)));
    assert_eq!(a.member_epoch, 1);
    f.advance(50_000);
    assert_eq!(f.consumer_err(with_group_configs(hb("a", 1))), ResponseError::UnknownMemberId);
}

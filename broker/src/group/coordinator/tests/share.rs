//! KIP-932 share groups on the coordinator: joining with a client-chosen id, the assignment
//! (every subscribed partition covered, partitions shared when members outnumber them), epochs
//! taken on each member's own heartbeat, fencing, leaving, expiry, and the id namespace shared
//! with classic and consumer groups.
use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use super::*;
use crate::group::assignor::Assignment;

struct Topics(BTreeMap<String, (Uuid, i32)>);

impl TopicCatalog for Topics {
    fn topic(&self, name: &str) -> Option<(Uuid, i32)> {
        self.0.get(name).copied()
    }

    fn matching(&self, pattern: &regex::Regex) -> Vec<String> {
        self.0.keys().filter(|n| pattern.is_match(n)).cloned().collect()
    }
}

const ORDERS: Uuid = Uuid::from_bytes([1; 16]);

fn topics(partitions: i32) -> Topics {
    Topics([("orders".to_string(), (ORDERS, partitions))].into())
}

pub(super) fn hb(member_id: &str, epoch: i32) -> ShareHeartbeat {
    ShareHeartbeat {
        group_id: "sg".into(),
        member_id: member_id.into(),
        member_epoch: epoch,
        rack_id: None,
        subscribed_topic_names: (epoch == 0).then(|| vec!["orders".to_string()]),
        client_id: "client".into(),
        client_host: "/127.0.0.1".into(),
        session_timeout_ms: None,
        heartbeat_interval_ms: None,
    }
}

fn orders(ps: &[i32]) -> Assignment {
    [(ORDERS, ps.iter().copied().collect::<BTreeSet<i32>>())].into()
}

impl Fixture {
    fn share(&mut self, h: ShareHeartbeat, partitions: i32) -> Result<ShareHeartbeatResult, HeartbeatError> {
        self.coordinator.share_heartbeat(h, &topics(partitions), self.now)
    }

    pub(super) fn share_ok(&mut self, h: ShareHeartbeat) -> ShareHeartbeatResult {
        self.share(h, 3).unwrap_or_else(|e| panic!("heartbeat refused: {e:?}"))
    }

    /// The epoch `member` was last told.
    fn epoch_of(&self, member: &str) -> i32 {
        let summary = self.coordinator.describe_share_group("sg").unwrap();
        summary
            .members
            .iter()
            .find(|(id, _)| id == member)
            .unwrap()
            .1
            .member_epoch
    }

    fn share_err(&mut self, h: ShareHeartbeat) -> ResponseError {
        self.share(h, 3).expect_err("heartbeat accepted").0
    }
}

fn fixture() -> Fixture {
    Fixture::new(GroupConfig::default())
}

#[test]
fn a_lone_share_member_gets_every_partition_and_then_heartbeats_without_an_assignment() {
    let mut f = fixture();
    let joined = f.share_ok(hb("a", 0));
    assert_eq!((joined.member_id.as_str(), joined.member_epoch), ("a", 1));
    assert_eq!(joined.assignment, Some(orders(&[0, 1, 2])));
    assert_eq!(joined.heartbeat_interval_ms, 5_000);
    let again = f.share_ok(hb("a", 1));
    assert_eq!((again.member_epoch, again.assignment), (1, None));
    let (groups, _) = f.coordinator.list_groups();
    assert_eq!(
        (groups[0].group_type, groups[0].protocol_type.as_str(), groups[0].state),
        ("share", "share", "Stable")
    );
}

#[test]
fn members_outnumbering_partitions_share_them_and_each_takes_its_epoch_on_its_own_heartbeat() {
    let mut f = fixture();
    let a = f.share_ok(hb("a", 0));
    let b = f.share_ok(hb("b", 0));
    assert_eq!(
        b.assignment,
        Some(orders(&[1])),
        "b is second of two: partition 1 (p mod 2)"
    );
    // a learns its smaller share on its next heartbeat, at its old epoch.
    let a2 = f.share_ok(hb("a", a.member_epoch));
    assert_eq!(
        (a2.member_epoch, a2.assignment),
        (b.member_epoch, Some(orders(&[0, 2])))
    );
    let mut epochs = vec![a2.member_epoch];
    for m in ["c", "d", "e"] {
        epochs.push(f.share_ok(hb(m, 0)).member_epoch);
    }
    let summary = f.coordinator.describe_share_group("sg").unwrap();
    // Five members, three partitions: member i has partition i mod 3 once it has heartbeated.
    let e = f.share_ok(hb("e", *epochs.last().unwrap()));
    assert_eq!(e.assignment, None);
    let held: BTreeMap<&str, Assignment> = ["a", "b", "c", "d"]
        .into_iter()
        .map(|m| {
            let answer = f.share_ok(hb(m, f.epoch_of(m)));
            (
                m,
                answer
                    .assignment
                    .unwrap_or_else(|| panic!("{m} was behind and got nothing")),
            )
        })
        .collect();
    assert_eq!(held["a"], orders(&[0]));
    assert_eq!(held["b"], orders(&[1]));
    assert_eq!(held["c"], orders(&[2]));
    assert_eq!(held["d"], orders(&[0]));
    assert_eq!(summary.members.len(), 5);
}

#[test]
fn a_wrong_epoch_is_fenced_and_an_unknown_member_told_to_rejoin() {
    let mut f = fixture();
    let a = f.share_ok(hb("a", 0));
    assert_eq!(
        f.share_err(hb("a", a.member_epoch + 1)),
        ResponseError::FencedMemberEpoch
    );
    assert_eq!(f.share_err(hb("stranger", 3)), ResponseError::UnknownMemberId);
    assert_eq!(f.share_err(hb("", 0)), ResponseError::InvalidRequest);
    let mut no_topics = hb("b", 0);
    no_topics.subscribed_topic_names = Some(Vec::new());
    assert_eq!(f.share_err(no_topics), ResponseError::InvalidRequest);
    assert_eq!(f.share_err(hb("a", -2)), ResponseError::InvalidRequest);
}

#[test]
fn a_leaving_member_hands_its_partitions_to_the_others_and_an_expired_one_too() {
    let mut f = fixture();
    f.share_ok(hb("a", 0));
    let b = f.share_ok(hb("b", 0));
    let left = f.share_ok(hb("b", -1));
    assert_eq!((left.member_epoch, left.assignment), (-1, None));
    assert!(b.member_epoch > 0);
    let a = f.share_ok(hb("a", f.epoch_of("a")));
    assert_eq!(a.assignment, Some(orders(&[0, 1, 2])));
    // c joins and stops heartbeating: after the session timeout a has everything again.
    f.share_ok(hb("c", 0));
    f.now += 30_000;
    let a = f.share_ok(hb("a", f.epoch_of("a")));
    assert_eq!(a.assignment, Some(orders(&[0, 2])));
    f.advance(20_000);
    let summary = f.coordinator.describe_share_group("sg").unwrap();
    assert_eq!(
        summary.members.iter().map(|(id, _)| id.as_str()).collect::<Vec<_>>(),
        ["a"]
    );
    let a = f.share_ok(hb("a", a.member_epoch));
    assert_eq!(a.assignment, Some(orders(&[0, 1, 2])));
}

#[test]
fn a_share_group_holds_its_id_against_classic_and_consumer_groups_and_goes_when_empty() {
    let mut f = fixture();
    f.share_ok(hb("a", 0));
    let consumer = ConsumerHeartbeat {
        group_id: "sg".into(),
        member_id: String::new(),
        member_epoch: 0,
        instance_id: None,
        rack_id: None,
        rebalance_timeout_ms: 60_000,
        subscribed_topic_names: Some(vec!["orders".into()]),
        subscribed_topic_regex: None,
        server_assignor: None,
        owned: Some(Assignment::new()),
        client_id: "c".into(),
        client_host: "/127.0.0.1".into(),
        new_member_id: "m".into(),
        session_timeout_ms: None,
        heartbeat_interval_ms: None,
    };
    let refused = f
        .coordinator
        .consumer_heartbeat(consumer, &topics(3), 0)
        .map(|_| ())
        .unwrap_err();
    assert_eq!(refused.0, ResponseError::GroupIdNotFound);
    assert_eq!(
        f.coordinator.delete_group("sg").map(|_| ()),
        Err(ResponseError::NonEmptyGroup)
    );
    f.share_ok(hb("a", -1));
    assert_eq!(f.coordinator.describe_share_group("sg").unwrap().state, "Empty");
    assert_eq!(f.coordinator.delete_group("sg").map(|fx| fx.len()), Ok(0));
    assert_eq!(
        f.coordinator.describe_share_group("sg").map(|_| ()).unwrap_err().0,
        ResponseError::GroupIdNotFound
    );
}

#[test]
fn new_partitions_of_a_subscribed_topic_move_the_epoch() {
    let mut f = fixture();
    let a = f.share_ok(hb("a", 0));
    let grown = f.share(hb("a", a.member_epoch), 5).unwrap();
    assert_eq!(
        (grown.member_epoch, grown.assignment),
        (a.member_epoch + 1, Some(orders(&[0, 1, 2, 3, 4])))
    );
}

#[test]
fn the_groups_own_share_session_timeout_and_heartbeat_interval_configs_apply() {
    let mut f = fixture();
    let with_group_configs = |h: ShareHeartbeat| ShareHeartbeat {
        session_timeout_ms: Some(60_000),
        heartbeat_interval_ms: Some(9_000),
        ..h
    };
    let a = f.share_ok(with_group_configs(hb("a", 0)));
    assert_eq!(a.heartbeat_interval_ms, 9_000);
    f.advance(50_000);
    assert_eq!(f.epoch_of("a"), 1, "past the broker's 45 s, within the group's 60 s");
    f.advance(10_000);
    assert_eq!(f.share_err(hb("a", 1)), ResponseError::UnknownMemberId);
}

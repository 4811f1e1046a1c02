//! Online migration between the classic and consumer protocols (`migration.rs`): a KIP-848
//! member joining a classic group with members upgrades it without taking a partition from
//! anyone; classic members inside the consumer group rejoin, sync and heartbeat their way to
//! the new target, never holding a partition another member holds; the last KIP-848 member
//! leaving downgrades it and a classic rebalance follows; `group.consumer.migration.policy`
//! holds either way back; a reload keeps the classic members classic.
use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::messages::{
    consumer_protocol_assignment, consumer_protocol_subscription, ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
};
use kafka_protocol::protocol::{Encodable, StrBytes};
use uuid::Uuid;

use super::*;
use crate::config::MigrationPolicy;
use crate::group::assignor::Assignment;
use crate::group::records::GroupRecord;

const G: &str = "g";
const TOPIC: &str = "orders";
const PARTITIONS: i32 = 4;

struct Topics;

impl TopicCatalog for Topics {
    fn topic(&self, name: &str) -> Option<(Uuid, i32)> {
        (name == TOPIC).then_some((topic_id(), PARTITIONS))
    }

    fn matching(&self, pattern: &regex::Regex) -> Vec<String> {
        [TOPIC.to_string()]
            .into_iter()
            .filter(|n| pattern.is_match(n))
            .collect()
    }
}

fn topic_id() -> Uuid {
    Uuid::from_bytes([7; 16])
}

/// `[version][ConsumerProtocolSubscription]` of a consumer of "orders" owning `owned`.
fn subscription(owned: &[i32]) -> Bytes {
    let owned = if owned.is_empty() {
        Vec::new()
    } else {
        vec![consumer_protocol_subscription::TopicPartition::default()
            .with_topic(StrBytes::from_static_str(TOPIC).into())
            .with_partitions(owned.to_vec())]
    };
    let s = ConsumerProtocolSubscription::default()
        .with_topics(vec![StrBytes::from_static_str(TOPIC)])
        .with_owned_partitions(owned);
    let mut buf = bytes::BytesMut::new();
    buf.extend_from_slice(&1i16.to_be_bytes());
    s.encode(&mut buf, 1).unwrap();
    buf.freeze()
}

fn assignment_of(partitions: &[i32]) -> Bytes {
    let a = ConsumerProtocolAssignment::default().with_assigned_partitions(vec![
        consumer_protocol_assignment::TopicPartition::default()
            .with_topic(StrBytes::from_static_str(TOPIC).into())
            .with_partitions(partitions.to_vec()),
    ]);
    let mut buf = bytes::BytesMut::new();
    buf.extend_from_slice(&1i16.to_be_bytes());
    a.encode(&mut buf, 1).unwrap();
    buf.freeze()
}

/// The partitions of "orders" in a SyncGroup assignment.
fn partitions_in(assignment: &Bytes) -> BTreeSet<i32> {
    crate::group::consumer_assignment(assignment)
        .into_iter()
        .filter(|(t, _)| t == TOPIC)
        .flat_map(|(_, ps)| ps)
        .collect()
}

fn classic_join(member_id: &str, owned: &[i32]) -> JoinRequest {
    JoinRequest {
        group_id: G.into(),
        member_id: member_id.into(),
        group_instance_id: None,
        client_id: "classic".into(),
        client_host: "/127.0.0.1".into(),
        session_timeout_ms: SESSION_MS,
        rebalance_timeout_ms: REBALANCE_MS,
        protocol_type: "consumer".into(),
        protocols: vec![("range".into(), subscription(owned))],
        require_known_member_id: false,
        new_member_id: member_id.into(),
    }
}

/// A new member's first JoinGroup (v3: no MEMBER_ID_REQUIRED round).
fn first_join(new_member_id: &str) -> JoinRequest {
    JoinRequest {
        member_id: String::new(),
        ..classic_join(new_member_id, &[])
    }
}

fn hb(member_id: &str, epoch: i32, owned: Option<&[i32]>) -> ConsumerHeartbeat {
    ConsumerHeartbeat {
        group_id: G.into(),
        member_id: member_id.into(),
        member_epoch: epoch,
        instance_id: None,
        rack_id: None,
        rebalance_timeout_ms: if epoch == 0 { REBALANCE_MS } else { -1 },
        subscribed_topic_names: (epoch == 0).then(|| vec![TOPIC.to_string()]),
        subscribed_topic_regex: None,
        server_assignor: None,
        owned: owned.map(held),
        client_id: "kip848".into(),
        client_host: "/127.0.0.1".into(),
        new_member_id: member_id.into(),
        session_timeout_ms: None,
        heartbeat_interval_ms: None,
    }
}

fn held(ps: &[i32]) -> Assignment {
    if ps.is_empty() {
        return Assignment::new();
    }
    [(topic_id(), ps.iter().copied().collect::<BTreeSet<i32>>())].into()
}

fn orders(a: &Assignment) -> Vec<i32> {
    a.get(&topic_id())
        .map(|ps| ps.iter().copied().collect())
        .unwrap_or_default()
}

/// A fixture that also keeps every record the coordinator asked to store.
struct Migration {
    f: Fixture,
    stored: Vec<GroupRecord>,
}

impl Migration {
    fn new(policy: MigrationPolicy) -> Self {
        Migration {
            f: Fixture::new(GroupConfig {
                migration_policy: policy,
                ..config()
            }),
            stored: Vec::new(),
        }
    }

    /// A Stable classic group whose members hold the given partitions of "orders".
    fn classic_group(&mut self, members: &[(&str, &[i32])]) -> i32 {
        let replies: Vec<ReplyId> = members
            .iter()
            .map(|(m, _)| {
                let (reply, fx) = self.f.join(first_join(m));
                assert!(fx.is_empty(), "{fx:?}");
                reply
            })
            .collect();
        let fx = self.f.until_answered(&replies);
        let generation = join_result(&fx, replies[0]).generation_id;
        let assignments = members
            .iter()
            .map(|(m, ps)| (m.to_string(), assignment_of(ps)))
            .collect();
        let mut replies = vec![self.f.sync(sync_req(G, members[0].0, generation, assignments)).0];
        for (m, _) in &members[1..] {
            replies.push(self.f.sync(sync_req(G, m, generation, Vec::new())).0);
        }
        let fx = self.f.stored(G, generation, Ok(()));
        assert_eq!(answers(&fx), members.len());
        assert_eq!(self.f.state(G), Some(GroupState::Stable));
        generation
    }

    fn consumer(&mut self, h: ConsumerHeartbeat) -> Result<(ConsumerHeartbeatResult, Vec<Effect>), HeartbeatError> {
        let (result, records, fx) = self.f.coordinator.consumer_heartbeat(h, &Topics, self.f.now)?;
        self.stored.extend(records);
        self.check_owners();
        Ok((result, fx))
    }

    /// A classic member rejoins (eager: it gave up everything first) and syncs; returns its
    /// generation and the partitions SyncGroup gave it.
    fn rejoin(&mut self, member_id: &str) -> (i32, BTreeSet<i32>) {
        let (joined, records) =
            self.f
                .coordinator
                .classic_join_consumer_group(&classic_join(member_id, &[]), &Topics, self.f.now);
        assert_eq!(joined.error, None, "{member_id}'s rejoin");
        assert_eq!(joined.leader_id, "", "no classic leader in a consumer group");
        assert!(joined.members.is_empty());
        self.stored.extend(records);
        self.check_owners();
        let (reply, fx) = self.f.sync(sync_req(G, member_id, joined.generation_id, Vec::new()));
        let synced = sync_result(&fx, reply);
        assert_eq!(synced.error, None, "{member_id}'s sync");
        (joined.generation_id, partitions_in(&synced.assignment))
    }

    fn classic_heartbeat(&mut self, member_id: &str, generation: i32) -> Result<(), ResponseError> {
        self.f.heartbeat(G, member_id, generation)
    }

    fn check_owners(&self) {
        if let Some(cg) = self.f.coordinator.groups.get(G).and_then(|g| g.consumer.as_ref()) {
            cg.check_owners();
        }
    }

    fn describe(&self) -> ConsumerGroupSummary {
        self.f.coordinator.describe_consumer_group(G).unwrap()
    }
}

/// Classic a (0, 1) and b (2, 3) in a Stable group, then KIP-848 member c joins.
fn upgraded() -> (Migration, i32) {
    let mut m = Migration::new(MigrationPolicy::Bidirectional);
    let generation = m.classic_group(&[("a", &[0, 1]), ("b", &[2, 3])]);
    let (c, fx) = m.consumer(hb("c", 0, Some(&[]))).unwrap();
    assert!(fx.is_empty(), "nobody was waiting in a Stable group");
    assert!(
        orders(c.assignment.as_ref().unwrap()).is_empty(),
        "c gets nothing a or b still hold"
    );
    (m, generation)
}

#[test]
fn a_consumer_member_joining_a_classic_group_upgrades_it_and_takes_nothing_still_held() {
    let (m, generation) = upgraded();
    // The classic record goes first, then the consumer group's records.
    assert_eq!(
        m.stored.first(),
        Some(&GroupRecord::Group {
            group_id: G.into(),
            value: None
        })
    );
    let group = m.describe();
    assert_eq!(group.group_epoch, generation + 1, "c's join moved the epoch");
    let by_id: BTreeMap<_, _> = group.members.iter().map(|s| (s.member_id.as_str(), s)).collect();
    assert!(by_id["a"].classic && by_id["b"].classic && !by_id["c"].classic);
    assert_eq!(
        orders(&by_id["a"].assignment),
        [0, 1],
        "a keeps what its last assignment gave it"
    );
    assert_eq!(orders(&by_id["b"].assignment), [2, 3]);
    assert_eq!(
        (by_id["a"].member_epoch, by_id["b"].member_epoch),
        (generation, generation)
    );
    assert_eq!(group.state, "Reconciling");
}

#[test]
fn classic_members_rejoin_until_every_partition_has_exactly_one_holder() {
    let (mut m, generation) = upgraded();
    // The epoch moved: classic members are told to rejoin; their generation is their epoch.
    assert_eq!(
        m.classic_heartbeat("a", generation),
        Err(ResponseError::RebalanceInProgress)
    );
    assert_eq!(
        m.classic_heartbeat("a", generation + 5),
        Err(ResponseError::IllegalGeneration)
    );
    let mut holding: BTreeMap<&str, (i32, BTreeSet<i32>)> = BTreeMap::new();
    let mut c_epoch = m
        .describe()
        .members
        .iter()
        .find(|s| s.member_id == "c")
        .unwrap()
        .member_epoch;
    let mut c_owned: Vec<i32> = Vec::new();
    for _ in 0..6 {
        for member in ["a", "b"] {
            let generation = holding.get(member).map_or(generation, |(g, _)| *g);
            if m.classic_heartbeat(member, generation) == Err(ResponseError::RebalanceInProgress) {
                holding.insert(member, m.rejoin(member));
            }
        }
        let (c, _) = m.consumer(hb("c", c_epoch, Some(&c_owned))).unwrap();
        c_epoch = c.member_epoch;
        if let Some(a) = c.assignment {
            c_owned = orders(&a);
        }
        // No partition is ever given to two members at once.
        let mut seen = BTreeSet::new();
        for p in holding.values().flat_map(|(_, ps)| ps.iter()).chain(c_owned.iter()) {
            assert!(seen.insert(*p), "partition {p} held twice: {holding:?} c={c_owned:?}");
        }
    }
    let group = m.describe();
    assert_eq!(group.state, "Stable");
    let all: BTreeSet<i32> = holding
        .values()
        .flat_map(|(_, ps)| ps.iter().copied())
        .chain(c_owned.clone())
        .collect();
    assert_eq!(all, (0..PARTITIONS).collect(), "every partition is held");
    assert!(!c_owned.is_empty(), "c got its share");
    // A classic member's commit is checked by its generation, which is its epoch.
    let (a_generation, _) = holding["a"];
    assert_eq!(
        m.f.coordinator.validate_commit(G, "a", None, a_generation - 1, m.f.now),
        Err(ResponseError::IllegalGeneration)
    );
    assert!(m
        .f
        .coordinator
        .validate_commit(G, "a", None, a_generation, m.f.now)
        .is_ok());
}

#[test]
fn the_last_consumer_member_leaving_downgrades_the_group_and_a_classic_rebalance_follows() {
    let (mut m, generation) = upgraded();
    let epoch = m.describe().group_epoch;
    let (_, fx) = m.consumer(hb("c", LEAVE_EPOCH, None)).unwrap();
    assert!(fx.is_empty());
    // The consumer records are tombstoned, then the classic record is written.
    let Some(GroupRecord::Group {
        value: Some(classic), ..
    }) = m.stored.last()
    else {
        panic!("the classic group's record is stored last: {:?}", m.stored.last());
    };
    assert_eq!(classic.generation_id, epoch);
    assert_eq!(classic.members.len(), 2);
    assert!(!m.f.coordinator.has_consumer_members(G));
    assert_eq!(m.f.state(G), Some(GroupState::PreparingRebalance));
    // The members rejoin through the classic protocol and get a new generation.
    assert_eq!(
        m.classic_heartbeat("a", generation),
        Err(ResponseError::IllegalGeneration)
    );
    let (ra, _) = m.f.join(classic_join("a", &[]));
    let (rb, fx) = m.f.join(classic_join("b", &[]));
    let answered = join_result(&fx, ra);
    assert_eq!(answered.generation_id, epoch + 1);
    assert_eq!(join_result(&fx, rb).generation_id, epoch + 1);
    assert_eq!(m.f.state(G), Some(GroupState::CompletingRebalance));
}

#[test]
fn the_migration_policy_holds_either_conversion_back() {
    // Disabled: a KIP-848 member cannot join a classic group with members.
    let mut m = Migration::new(MigrationPolicy::Disabled);
    m.classic_group(&[("a", &[0, 1, 2, 3])]);
    let refused = m.consumer(hb("c", 0, Some(&[]))).unwrap_err();
    assert_eq!(refused.0, ResponseError::GroupIdNotFound);
    assert!(refused.1.contains("group.consumer.migration.policy"), "{}", refused.1);
    assert_eq!(m.f.state(G), Some(GroupState::Stable), "the classic group is untouched");

    // Upgrade only: the group stays a consumer group when its last KIP-848 member leaves.
    let mut m = Migration::new(MigrationPolicy::Upgrade);
    m.classic_group(&[("a", &[0, 1, 2, 3])]);
    m.consumer(hb("c", 0, Some(&[]))).unwrap();
    m.consumer(hb("c", LEAVE_EPOCH, None)).unwrap();
    assert!(m.f.coordinator.has_consumer_members(G));
    assert_eq!(m.describe().members.len(), 1);
}

#[test]
fn an_upgrade_answers_requests_waiting_in_a_classic_rebalance() {
    let mut m = Migration::new(MigrationPolicy::Bidirectional);
    m.classic_group(&[("a", &[0, 1, 2, 3])]);
    // d's join starts a rebalance that waits for a.
    let (waiting, fx) = m.f.join(first_join("d"));
    assert!(fx.is_empty());
    let (_, fx) = m.consumer(hb("c", 0, Some(&[]))).unwrap();
    assert_eq!(
        join_result(&fx, waiting).error,
        Some(ResponseError::RebalanceInProgress)
    );
    assert_eq!(m.describe().members.len(), 3);
}

#[test]
fn a_classic_member_that_does_not_rejoin_within_its_rebalance_timeout_is_removed() {
    let (mut m, generation) = upgraded();
    assert_eq!(
        m.classic_heartbeat("a", generation),
        Err(ResponseError::RebalanceInProgress)
    );
    // b rejoins and keeps heartbeating; a goes silent (but within its session timeout).
    let (b_generation, _) = m.rejoin("b");
    let mut step = 0;
    while step < i64::from(REBALANCE_MS) {
        m.f.now += 5_000;
        step += 5_000;
        let _ = m.classic_heartbeat("b", b_generation);
        m.f.coordinator
            .groups
            .get_mut(G)
            .unwrap()
            .consumer
            .as_mut()
            .unwrap()
            .members
            .get_mut("a")
            .unwrap()
            .last_heartbeat_ms = m.f.now;
        let fx = m.f.coordinator.tick(m.f.now);
        for effect in fx {
            if let Effect::Records { records, .. } = effect {
                m.stored.extend(records);
            }
        }
    }
    let members: Vec<String> = m.describe().members.into_iter().map(|s| s.member_id).collect();
    assert_eq!(members, ["b", "c"], "a never rejoined");
    assert_eq!(
        m.classic_heartbeat("a", generation),
        Err(ResponseError::UnknownMemberId)
    );
}

#[test]
fn a_classic_leave_and_a_reload_keep_the_group_consistent() {
    let (mut m, generation) = upgraded();
    // a leaves by LeaveGroup; b stays classic across a reload of the stored records.
    let (errors, fx) =
        m.f.coordinator
            .leave_group(G, &[("a".into(), None), ("zz".into(), None)], m.f.now)
            .unwrap();
    assert_eq!(errors, vec![None, Some(ResponseError::UnknownMemberId)]);
    for effect in fx {
        if let Effect::Records { records, .. } = effect {
            m.stored.extend(records);
        }
    }
    let records = replayed(&m.stored);
    let mut restored = GroupCoordinator::new(config());
    restored.begin_load(0, 2);
    assert!(restored.complete_load(0, 2, records, m.f.now));
    let group = restored.describe_consumer_group(G).unwrap();
    let summary: Vec<(String, bool, Vec<i32>)> = group
        .members
        .iter()
        .map(|s| (s.member_id.clone(), s.classic, orders(&s.assignment)))
        .collect();
    assert_eq!(
        summary,
        vec![("b".into(), true, vec![2, 3]), ("c".into(), false, vec![])]
    );
    // b's heartbeat at its generation is understood by the new coordinator.
    assert_eq!(
        restored.heartbeat(G, "b", None, generation, m.f.now),
        Err(ResponseError::RebalanceInProgress),
        "the epoch moved past b's generation: it must rejoin"
    );
}

#[test]
fn a_join_whose_subscription_claims_more_topics_than_its_bytes_hold_is_refused() {
    let (mut m, _) = upgraded();
    // Version 1, then a topic count of 0x7fffffff with no topics after it.
    let hostile = Bytes::from_static(&[0, 1, 0x7f, 0xff, 0xff, 0xff]);
    let join = JoinRequest {
        protocols: vec![("range".into(), hostile)],
        ..first_join("x")
    };
    let (refused, records) = m.f.coordinator.classic_join_consumer_group(&join, &Topics, m.f.now);
    assert_eq!(refused.error, Some(ResponseError::InconsistentGroupProtocol));
    assert!(records.is_empty());
    assert_eq!(m.describe().members.len(), 3, "nobody was added");
}

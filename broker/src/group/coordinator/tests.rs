//! Long by design: the state machine's scenario tests, one per Kafka behaviour; long because each
//! scenario is spelled out.
//!
//! Unit tests of the group state machine (fake clock).
//!
//! Time is a plain `now` in ms that the tests advance; `tick(now)` fires whatever timers a real
//! broker's timer loop would. Member ids are handed in by the test (`new_member_id`), so every
//! answer can be checked exactly.
use super::*;
use crate::group::records::{
    decode, group_metadata_key, group_metadata_value, offset_commit_key, offset_commit_value, StoredMember,
};

const GROUP: &str = "orders-sink";
const OTHER: &str = "payments";
const SESSION_MS: i32 = 10_000;
const REBALANCE_MS: i32 = 30_000;
const DELAY_MS: i64 = 3_000;

/// Kafka's defaults, one `__consumer_offsets` partition so every group lands on partition 0.
fn config() -> GroupConfig {
    GroupConfig {
        num_partitions: 1,
        initial_rebalance_delay_ms: DELAY_MS,
        ..GroupConfig::default()
    }
}

fn metadata(member: &str) -> Bytes {
    // What a consumer subscribed to "orders" would send, made unique per member.
    Bytes::from(format!("{member}:orders"))
}

fn assignment(member: &str) -> Bytes {
    Bytes::from(format!("assignment-of-{member}"))
}

/// A JoinGroup v4+ of a dynamic consumer using the "range" protocol; its metadata names
/// the member (`new_member_id` on a first join, `member_id` afterwards).
fn join_req(group: &str, member_id: &str, new_member_id: &str) -> JoinRequest {
    let name = if member_id.is_empty() { new_member_id } else { member_id };
    JoinRequest {
        group_id: group.to_string(),
        member_id: member_id.to_string(),
        group_instance_id: None,
        client_id: "consumer-1".to_string(),
        client_host: "/127.0.0.1".to_string(),
        session_timeout_ms: SESSION_MS,
        rebalance_timeout_ms: REBALANCE_MS,
        protocol_type: "consumer".to_string(),
        protocols: vec![("range".to_string(), metadata(name))],
        require_known_member_id: true,
        new_member_id: new_member_id.to_string(),
    }
}

fn sync_req(group: &str, member_id: &str, generation_id: i32, assignments: Vec<(String, Bytes)>) -> SyncRequest {
    SyncRequest {
        group_id: group.to_string(),
        generation_id,
        member_id: member_id.to_string(),
        group_instance_id: None,
        protocol_type: Some("consumer".to_string()),
        protocol_name: None,
        assignments,
    }
}

fn offset(offset: i64, commit_timestamp_ms: i64) -> OffsetAndMetadata {
    OffsetAndMetadata {
        offset,
        leader_epoch: 0,
        metadata: String::new(),
        commit_timestamp_ms,
    }
}

fn join_result(fx: &[Effect], reply: ReplyId) -> &JoinResult {
    fx.iter()
        .find_map(|e| match e {
            Effect::Join(r, result) if *r == reply => Some(result),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no JoinGroup answer for reply {reply} in {fx:?}"))
}

fn sync_result(fx: &[Effect], reply: ReplyId) -> &SyncResult {
    fx.iter()
        .find_map(|e| match e {
            Effect::Sync(r, result) if *r == reply => Some(result),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no SyncGroup answer for reply {reply} in {fx:?}"))
}

fn answers(fx: &[Effect]) -> usize {
    fx.iter()
        .filter(|e| matches!(e, Effect::Join(..) | Effect::Sync(..)))
        .count()
}

/// Records as a new coordinator's load reads them back: through their bytes, at offsets in
/// their order.
fn replayed(records: &[GroupRecord]) -> Vec<LoadedRecord> {
    records
        .iter()
        .enumerate()
        .map(|(offset, record)| {
            let (key, value) = record.encode();
            LoadedRecord::Record {
                offset: offset as i64,
                producer_id: None,
                record: decode(Some(&key), value.as_deref()).unwrap(),
            }
        })
        .collect()
}

fn member_ids(result: &JoinResult) -> Vec<&str> {
    result.members.iter().map(|m| m.member_id.as_str()).collect()
}

struct Fixture {
    coordinator: GroupCoordinator,
    now: i64,
    next_reply: ReplyId,
}

impl Fixture {
    /// A coordinator whose only `__consumer_offsets` partition is loaded (and empty).
    fn new(config: GroupConfig) -> Self {
        let mut coordinator = GroupCoordinator::new(GroupConfig {
            num_partitions: 1,
            ..config
        });
        assert!(coordinator.begin_load(0, 1).is_empty());
        assert!(coordinator.complete_load(0, 1, Vec::new(), 0));
        Fixture {
            coordinator,
            now: 0,
            next_reply: 1,
        }
    }

    /// Moves the clock on and fires the timers due.
    fn advance(&mut self, ms: i64) -> Vec<Effect> {
        self.now += ms;
        self.coordinator.tick(self.now)
    }

    fn join(&mut self, request: JoinRequest) -> (ReplyId, Vec<Effect>) {
        let reply = self.next_reply;
        self.next_reply += 1;
        (reply, self.coordinator.join_group(request, reply, self.now))
    }

    /// KIP-394's two steps: MEMBER_ID_REQUIRED with `member_id`, then the rejoin with it.
    fn join_new(&mut self, group: &str, member_id: &str) -> (ReplyId, Vec<Effect>) {
        let (reply, fx) = self.join(join_req(group, "", member_id));
        let result = join_result(&fx, reply);
        assert_eq!(result.error, Some(ResponseError::MemberIdRequired));
        assert_eq!(result.member_id, member_id);
        self.join(join_req(group, member_id, "unused"))
    }

    fn sync(&mut self, request: SyncRequest) -> (ReplyId, Vec<Effect>) {
        let reply = self.next_reply;
        self.next_reply += 1;
        (reply, self.coordinator.sync_group(request, reply, self.now))
    }

    fn heartbeat(&mut self, group: &str, member_id: &str, generation_id: i32) -> Result<(), ResponseError> {
        self.coordinator
            .heartbeat(group, member_id, None, generation_id, self.now)
    }

    fn stored(&mut self, group: &str, generation_id: i32, result: Result<(), ResponseError>) -> Vec<Effect> {
        self.coordinator.group_stored(group, generation_id, result, self.now)
    }

    fn state(&self, group: &str) -> Option<GroupState> {
        self.coordinator.describe_group(group).unwrap().map(|g| g.state)
    }

    fn commit(&mut self, group: &str, member_id: &str, generation_id: i32) -> Result<i32, ResponseError> {
        self.coordinator
            .validate_commit(group, member_id, None, generation_id, self.now)
    }

    /// Ticks through the initial delay (and its extensions) until every reply is answered.
    fn until_answered(&mut self, replies: &[ReplyId]) -> Vec<Effect> {
        let mut fx = Vec::new();
        for _ in 0..20 {
            fx.extend(self.advance(DELAY_MS));
            let answered = |r: &ReplyId| fx.iter().any(|e| matches!(e, Effect::Join(id, _) if id == r));
            if replies.iter().all(answered) {
                return fx;
            }
        }
        panic!("joins {replies:?} never answered: {fx:?}");
    }

    /// First generation of `members` (first one leads), left in CompletingRebalance.
    fn joined_group(&mut self, group: &str, members: &[&str]) -> i32 {
        let replies: Vec<ReplyId> = members
            .iter()
            .map(|m| {
                let (reply, fx) = self.join_new(group, m);
                assert!(fx.is_empty(), "the initial delay holds the answer back: {fx:?}");
                reply
            })
            .collect();
        let fx = self.until_answered(&replies);
        let generation = join_result(&fx, replies[0]).generation_id;
        assert_eq!(join_result(&fx, replies[0]).leader_id, members[0]);
        assert_eq!(self.state(group), Some(GroupState::CompletingRebalance));
        generation
    }

    /// A Stable group of `members` (first one leads), each holding `assignment(member)`.
    fn stable_group(&mut self, group: &str, members: &[&str]) -> i32 {
        let generation = self.joined_group(group, members);
        let assignments = members.iter().map(|m| (m.to_string(), assignment(m))).collect();
        let (leader_reply, fx) = self.sync(sync_req(group, members[0], generation, assignments));
        assert!(matches!(
            fx[..],
            [Effect::StoreGroup {
                then: AfterStore::CompleteSync,
                ..
            }]
        ));
        let mut replies = vec![leader_reply];
        for m in &members[1..] {
            let (reply, fx) = self.sync(sync_req(group, m, generation, Vec::new()));
            assert!(fx.is_empty());
            replies.push(reply);
        }
        let fx = self.stored(group, generation, Ok(()));
        for (m, reply) in members.iter().zip(replies) {
            assert_eq!(sync_result(&fx, reply).assignment, assignment(m));
        }
        assert_eq!(self.state(group), Some(GroupState::Stable));
        generation
    }
}

// ---- JoinGroup and the initial delay ----

#[test]
fn first_join_gets_member_id_required_and_the_rejoin_starts_a_delayed_first_rebalance() {
    let mut f = Fixture::new(config());
    let (reply, fx) = f.join(join_req(GROUP, "", "m1"));
    assert_eq!(
        fx,
        vec![Effect::Join(
            reply,
            JoinResult {
                error: Some(ResponseError::MemberIdRequired),
                generation_id: -1,
                protocol_type: None,
                protocol_name: None,
                leader_id: String::new(),
                member_id: "m1".to_string(),
                members: Vec::new(),
            }
        )]
    );
    assert_eq!(f.state(GROUP), Some(GroupState::Empty));
    // An id the coordinator never handed out is refused.
    let (ghost, fx) = f.join(join_req(GROUP, "ghost", "unused"));
    assert_eq!(join_result(&fx, ghost).error, Some(ResponseError::UnknownMemberId));

    f.now += 100;
    let (reply, fx) = f.join(join_req(GROUP, "m1", "unused"));
    assert!(fx.is_empty(), "{fx:?}");
    assert_eq!(f.state(GROUP), Some(GroupState::PreparingRebalance));
    assert_eq!(f.heartbeat(GROUP, "m1", 0), Err(ResponseError::RebalanceInProgress));

    assert!(f.advance(DELAY_MS - 1).is_empty());
    let fx = f.advance(1);
    assert_eq!(
        fx,
        vec![Effect::Join(
            reply,
            JoinResult {
                error: None,
                generation_id: 1,
                protocol_type: Some("consumer".to_string()),
                protocol_name: Some("range".to_string()),
                leader_id: "m1".to_string(),
                member_id: "m1".to_string(),
                members: vec![JoinedMember {
                    member_id: "m1".to_string(),
                    group_instance_id: None,
                    metadata: metadata("m1"),
                }],
            }
        )]
    );
    assert_eq!(f.state(GROUP), Some(GroupState::CompletingRebalance));
}

#[test]
fn initial_delay_is_extended_while_new_members_keep_joining() {
    let mut f = Fixture::new(config());
    let (a, fx) = f.join_new(GROUP, "a");
    assert!(fx.is_empty());
    f.now = 2_000;
    let (b, fx) = f.join_new(GROUP, "b");
    assert!(fx.is_empty());
    // At 3000 "b" has arrived during the delay: one more delay, to 6000.
    assert!(f.advance(1_000).is_empty());
    assert!(f.advance(2_999).is_empty());
    let fx = f.advance(1);
    assert_eq!(f.now, 6_000);
    assert_eq!(join_result(&fx, a).generation_id, 1);
    assert_eq!(member_ids(join_result(&fx, a)), ["a", "b"]);
    assert_eq!(join_result(&fx, b).generation_id, 1);
    assert!(join_result(&fx, b).members.is_empty());
}

#[test]
fn initial_delay_extensions_stop_at_the_rebalance_timeout() {
    let mut f = Fixture::new(config());
    let join = |f: &mut Fixture, id: &str| {
        let (reply, fx) = f.join(JoinRequest {
            rebalance_timeout_ms: 5_000,
            ..join_req(GROUP, "", id)
        });
        assert_eq!(join_result(&fx, reply).error, Some(ResponseError::MemberIdRequired));
        let (reply, fx) = f.join(JoinRequest {
            rebalance_timeout_ms: 5_000,
            ..join_req(GROUP, id, "unused")
        });
        assert!(fx.is_empty());
        reply
    };
    let a = join(&mut f, "a");
    f.now = 1_000;
    let b = join(&mut f, "b");
    // 3000: "b" joined, so the delay is extended, but only by the 2000 ms the timeout leaves.
    assert!(f.advance(2_000).is_empty());
    f.now = 4_000;
    let c = join(&mut f, "c");
    assert!(f.advance(999).is_empty());
    let fx = f.advance(1);
    assert_eq!(f.now, 5_000);
    assert_eq!(member_ids(join_result(&fx, a)), ["a", "b", "c"]);
    assert_eq!(join_result(&fx, b).generation_id, 1);
    assert_eq!(join_result(&fx, c).generation_id, 1);
}

#[test]
fn initial_delay_is_not_cut_short_by_a_smaller_rebalance_timeout() {
    // Kafka schedules the first delay for the full group.initial.rebalance.delay.ms.
    let mut f = Fixture::new(config());
    let (reply, fx) = f.join(join_req(GROUP, "", "a"));
    assert_eq!(join_result(&fx, reply).error, Some(ResponseError::MemberIdRequired));
    let (reply, fx) = f.join(JoinRequest {
        rebalance_timeout_ms: 2_000,
        ..join_req(GROUP, "a", "unused")
    });
    assert!(fx.is_empty());
    assert!(f.advance(2_999).is_empty());
    let fx = f.advance(1);
    assert_eq!(join_result(&fx, reply).generation_id, 1);
}

#[test]
fn initial_delay_is_extended_for_a_group_that_emptied_after_earlier_generations() {
    let mut f = Fixture::new(config());
    f.stable_group(GROUP, &["a"]);
    let (errors, _) = f.coordinator.leave_group(GROUP, &[("a".into(), None)], f.now).unwrap();
    assert_eq!(errors, [None]);
    assert_eq!(f.state(GROUP), Some(GroupState::Empty));

    let start = f.now;
    let (b, fx) = f.join_new(GROUP, "b");
    assert!(fx.is_empty());
    f.now = start + 1_000;
    let (c, fx) = f.join_new(GROUP, "c");
    assert!(fx.is_empty());
    // "c" joined during the first delay: like a brand-new group, the delay is extended.
    assert!(f.advance(2_000).is_empty(), "completed at the first delay");
    assert!(f.advance(2_999).is_empty());
    let fx = f.advance(1);
    assert_eq!(f.now, start + 2 * DELAY_MS);
    assert_eq!(join_result(&fx, b).generation_id, 3);
    assert_eq!(member_ids(join_result(&fx, b)), ["b", "c"]);
    assert_eq!(join_result(&fx, c).generation_id, 3);
}

#[test]
fn without_initial_delay_the_first_generation_completes_at_once() {
    let mut f = Fixture::new(GroupConfig {
        initial_rebalance_delay_ms: 0,
        ..config()
    });
    let (reply, fx) = f.join_new(GROUP, "m1");
    let result = join_result(&fx, reply);
    assert_eq!(result.error, None);
    assert_eq!(result.generation_id, 1);
    assert_eq!(result.leader_id, "m1");
    assert_eq!(member_ids(result), ["m1"]);
    assert_eq!(f.state(GROUP), Some(GroupState::CompletingRebalance));
}

#[test]
fn join_answers_come_when_all_members_rejoined_leader_gets_the_members_follower_none() {
    let mut f = Fixture::new(config());
    let generation = f.stable_group(GROUP, &["m1", "m2"]);
    let (r1, fx) = f.join(join_req(GROUP, "m1", "unused"));
    assert!(fx.is_empty(), "the leader waits for m2: {fx:?}");
    assert_eq!(
        f.heartbeat(GROUP, "m2", generation),
        Err(ResponseError::RebalanceInProgress)
    );
    f.now += 1_000;
    let (r2, fx) = f.join(join_req(GROUP, "m2", "unused"));
    assert_eq!(answers(&fx), 2);
    let leader = join_result(&fx, r1);
    let follower = join_result(&fx, r2);
    assert_eq!(leader.generation_id, generation + 1);
    assert_eq!(follower.generation_id, generation + 1);
    assert_eq!((leader.leader_id.as_str(), follower.leader_id.as_str()), ("m1", "m1"));
    assert_eq!(
        leader.members,
        vec![
            JoinedMember {
                member_id: "m1".into(),
                group_instance_id: None,
                metadata: metadata("m1"),
            },
            JoinedMember {
                member_id: "m2".into(),
                group_instance_id: None,
                metadata: metadata("m2"),
            },
        ]
    );
    assert!(follower.members.is_empty());
    assert_eq!(follower.member_id, "m2");
}

#[test]
fn protocol_selection_picks_a_protocol_every_member_supports_by_vote() {
    let mut f = Fixture::new(config());
    let offer = |f: &mut Fixture, group: &str, id: &str, protocols: &[&str]| {
        let protocols: Vec<(String, Bytes)> = protocols
            .iter()
            .map(|p| (p.to_string(), Bytes::from(format!("{id}/{p}"))))
            .collect();
        let (reply, fx) = f.join(JoinRequest {
            protocols: protocols.clone(),
            ..join_req(group, "", id)
        });
        assert_eq!(join_result(&fx, reply).error, Some(ResponseError::MemberIdRequired));
        let (reply, fx) = f.join(JoinRequest {
            protocols,
            ..join_req(group, id, "unused")
        });
        assert!(fx.is_empty());
        reply
    };
    // The leader prefers range, the two others sticky: sticky wins 2 to 1.
    let leader = offer(&mut f, GROUP, "a", &["range", "sticky"]);
    offer(&mut f, GROUP, "b", &["sticky", "range"]);
    offer(&mut f, GROUP, "c", &["sticky", "range"]);
    // Both prefer range, but only roundrobin is supported by both.
    let other = offer(&mut f, OTHER, "x", &["range", "roundrobin"]);
    offer(&mut f, OTHER, "y", &["roundrobin"]);
    let fx = f.until_answered(&[leader, other]);
    let result = join_result(&fx, leader);
    assert_eq!(result.protocol_name.as_deref(), Some("sticky"));
    let chosen: Vec<&[u8]> = result.members.iter().map(|m| &m.metadata[..]).collect();
    assert_eq!(chosen, [&b"a/sticky"[..], b"b/sticky", b"c/sticky"]);
    assert_eq!(join_result(&fx, other).protocol_name.as_deref(), Some("roundrobin"));
}

// ---- SyncGroup ----

#[test]
fn sync_answers_wait_until_the_leaders_assignment_is_stored() {
    let mut f = Fixture::new(config());
    let generation = f.joined_group(GROUP, &["m1", "m2"]);
    // The follower comes first and waits.
    let (follower, fx) = f.sync(sync_req(GROUP, "m2", generation, Vec::new()));
    assert!(fx.is_empty());
    assert_eq!(f.heartbeat(GROUP, "m2", generation), Ok(()));
    let assignments = vec![
        ("m1".to_string(), Bytes::from_static(b"\x00\x01orders-0")),
        ("m2".to_string(), Bytes::from_static(b"\x00\x01orders-1")),
    ];
    let (leader, fx) = f.sync(sync_req(GROUP, "m1", generation, assignments));
    let [Effect::StoreGroup {
        partition,
        group_id,
        group,
        generation_id,
        then,
    }] = &fx[..]
    else {
        panic!("expected only the group's record: {fx:?}");
    };
    assert_eq!(
        (*partition, group_id.as_str(), *generation_id, then),
        (0, GROUP, generation, &AfterStore::CompleteSync)
    );
    assert_eq!(group.generation_id, generation);
    assert_eq!(group.leader_id.as_deref(), Some("m1"));
    let stored: Vec<(&str, &[u8], &[u8])> = group
        .members
        .iter()
        .map(|m| (m.member_id.as_str(), &m.subscription[..], &m.assignment[..]))
        .collect();
    assert_eq!(
        stored,
        [
            ("m1", &metadata("m1")[..], &b"\x00\x01orders-0"[..]),
            ("m2", &metadata("m2")[..], &b"\x00\x01orders-1"[..]),
        ]
    );
    assert_eq!(f.state(GROUP), Some(GroupState::CompletingRebalance));

    // A store of another generation is ignored.
    assert!(f.stored(GROUP, generation - 1, Ok(())).is_empty());
    let fx = f.stored(GROUP, generation, Ok(()));
    assert_eq!(answers(&fx), 2);
    assert_eq!(
        sync_result(&fx, leader),
        &SyncResult {
            error: None,
            protocol_type: Some("consumer".into()),
            protocol_name: Some("range".into()),
            assignment: Bytes::from_static(b"\x00\x01orders-0"),
        }
    );
    assert_eq!(&sync_result(&fx, follower).assignment[..], b"\x00\x01orders-1");
    assert_eq!(f.state(GROUP), Some(GroupState::Stable));
    // A SyncGroup retried once Stable is answered at once with the same bytes.
    let (again, fx) = f.sync(sync_req(GROUP, "m2", generation, Vec::new()));
    assert_eq!(&sync_result(&fx, again).assignment[..], b"\x00\x01orders-1");
}

#[test]
fn a_failed_store_answers_the_error_and_the_group_rebalances() {
    let mut f = Fixture::new(config());
    let generation = f.joined_group(GROUP, &["m1", "m2"]);
    let (follower, _) = f.sync(sync_req(GROUP, "m2", generation, Vec::new()));
    let (leader, fx) = f.sync(sync_req(GROUP, "m1", generation, vec![("m1".into(), assignment("m1"))]));
    assert_eq!(fx.len(), 1);
    let fx = f.stored(GROUP, generation, Err(ResponseError::CoordinatorNotAvailable));
    assert_eq!(answers(&fx), 2);
    for reply in [leader, follower] {
        assert_eq!(
            sync_result(&fx, reply),
            &SyncResult::failed(ResponseError::CoordinatorNotAvailable)
        );
    }
    assert_eq!(f.state(GROUP), Some(GroupState::PreparingRebalance));
    assert_eq!(
        f.heartbeat(GROUP, "m2", generation),
        Err(ResponseError::RebalanceInProgress)
    );
    let (r1, fx) = f.join(join_req(GROUP, "m1", "unused"));
    assert!(fx.is_empty());
    let (_, fx) = f.join(join_req(GROUP, "m2", "unused"));
    assert_eq!(join_result(&fx, r1).generation_id, generation + 1);
}

#[test]
fn members_awaiting_their_assignment_get_a_fresh_session_when_it_arrives() {
    let mut f = Fixture::new(config());
    let generation = f.joined_group(GROUP, &["m1", "m2"]);
    let (follower, _) = f.sync(sync_req(GROUP, "m2", generation, Vec::new()));
    f.advance(9_000);
    f.sync(sync_req(GROUP, "m1", generation, Vec::new()));
    // The store is slow: m2 has waited longer than its session by the time it completes.
    f.advance(3_000);
    let fx = f.stored(GROUP, generation, Ok(()));
    assert_eq!(sync_result(&fx, follower).error, None);
    // Kafka restarts the session when the assignment is handed out.
    assert!(f.advance(1_000).is_empty());
    assert_eq!(f.heartbeat(GROUP, "m2", generation), Ok(()));
    assert_eq!(f.state(GROUP), Some(GroupState::Stable));
}

// ---- Heartbeat ----

#[test]
fn heartbeat_answers_follow_the_group_state_generation_and_membership() {
    let mut f = Fixture::new(config());
    let generation = f.stable_group(GROUP, &["m1", "m2"]);
    assert_eq!(f.heartbeat(GROUP, "m2", generation), Ok(()));
    assert_eq!(
        f.heartbeat(GROUP, "m2", generation - 1),
        Err(ResponseError::IllegalGeneration)
    );
    assert_eq!(
        f.heartbeat(GROUP, "ghost", generation),
        Err(ResponseError::UnknownMemberId)
    );
    assert_eq!(
        f.heartbeat(OTHER, "m2", generation),
        Err(ResponseError::UnknownMemberId)
    );
    f.join(join_req(GROUP, "m1", "unused"));
    assert_eq!(
        f.heartbeat(GROUP, "m2", generation),
        Err(ResponseError::RebalanceInProgress)
    );
}

#[test]
fn groups_of_partitions_not_loaded_here_get_not_coordinator_or_load_in_progress() {
    let mut c = GroupCoordinator::new(GroupConfig::default());
    // "orders-sink" is on partition 15 of 50, "payments-consumers" on partition 1.
    let (here, elsewhere) = ("orders-sink", "payments-consumers");
    assert_eq!((c.partition_for(here), c.partition_for(elsewhere)), (15, 1));
    c.begin_load(15, 1);
    assert!(c.complete_load(15, 1, Vec::new(), 0));

    let heartbeat = |c: &mut GroupCoordinator, group: &str| c.heartbeat(group, "m1", None, 1, 0);
    assert_eq!(heartbeat(&mut c, elsewhere), Err(ResponseError::NotCoordinator));
    let fx = c.join_group(join_req(elsewhere, "", "m1"), 7, 0);
    assert_eq!(join_result(&fx, 7).error, Some(ResponseError::NotCoordinator));
    assert_eq!(heartbeat(&mut c, here), Err(ResponseError::UnknownMemberId));

    c.begin_load(1, 4);
    assert_eq!(
        heartbeat(&mut c, elsewhere),
        Err(ResponseError::CoordinatorLoadInProgress)
    );
    let fx = c.join_group(join_req(elsewhere, "", "m1"), 8, 0);
    assert_eq!(
        join_result(&fx, 8).error,
        Some(ResponseError::CoordinatorLoadInProgress)
    );
    assert_eq!(
        c.validate_commit(elsewhere, "", None, -1, 0),
        Err(ResponseError::CoordinatorLoadInProgress)
    );
    assert_eq!(
        c.fetch_offsets(elsewhere, None),
        Err(ResponseError::CoordinatorLoadInProgress)
    );
    assert!(c.complete_load(1, 4, Vec::new(), 0));
    assert_eq!(heartbeat(&mut c, elsewhere), Err(ResponseError::UnknownMemberId));
}

// ---- timeouts ----

#[test]
fn a_member_that_stops_heartbeating_is_removed_after_its_session_timeout() {
    let mut f = Fixture::new(config());
    let generation = f.stable_group(GROUP, &["m1", "m2"]);
    // m1 heartbeats every 3 s, m2 has gone silent.
    for _ in 0..3 {
        assert!(f.advance(3_000).is_empty());
        assert_eq!(f.heartbeat(GROUP, "m1", generation), Ok(()));
    }
    assert!(f.advance(999).is_empty());
    assert_eq!(f.state(GROUP), Some(GroupState::Stable));
    assert!(f.advance(1).is_empty());
    assert_eq!(f.state(GROUP), Some(GroupState::PreparingRebalance));
    assert_eq!(
        f.heartbeat(GROUP, "m1", generation),
        Err(ResponseError::RebalanceInProgress)
    );
    assert_eq!(
        f.heartbeat(GROUP, "m2", generation),
        Err(ResponseError::UnknownMemberId)
    );
    let (reply, fx) = f.join(join_req(GROUP, "m1", "unused"));
    let result = join_result(&fx, reply);
    assert_eq!(result.generation_id, generation + 1);
    assert_eq!(member_ids(result), ["m1"]);
}

#[test]
fn a_member_that_does_not_rejoin_within_the_rebalance_timeout_is_dropped() {
    let mut f = Fixture::new(config());
    let generation = f.stable_group(GROUP, &["m1", "m2"]);
    let (r1, fx) = f.join(join_req(GROUP, "m1", "unused"));
    assert!(fx.is_empty());
    // m2 keeps heartbeating (so its session lives) but never rejoins.
    for _ in 0..5 {
        assert!(f.advance(5_000).is_empty());
        assert_eq!(
            f.heartbeat(GROUP, "m2", generation),
            Err(ResponseError::RebalanceInProgress)
        );
    }
    assert!(f.advance(4_999).is_empty());
    let fx = f.advance(1);
    let result = join_result(&fx, r1);
    assert_eq!(result.error, None);
    assert_eq!(result.generation_id, generation + 1);
    assert_eq!(member_ids(result), ["m1"]);
    assert_eq!(
        f.heartbeat(GROUP, "m2", generation),
        Err(ResponseError::UnknownMemberId)
    );
}

#[test]
fn a_member_that_never_sends_sync_group_is_removed_after_the_rebalance_timeout() {
    let mut f = Fixture::new(config());
    let generation = f.joined_group(GROUP, &["m1", "m2"]);
    let (leader, _) = f.sync(sync_req(GROUP, "m1", generation, vec![("m1".into(), assignment("m1"))]));
    let fx = f.stored(GROUP, generation, Ok(()));
    assert_eq!(sync_result(&fx, leader).assignment, assignment("m1"));
    assert_eq!(f.state(GROUP), Some(GroupState::Stable));
    // Both heartbeat; m2 never syncs.
    for _ in 0..5 {
        assert!(f.advance(5_000).is_empty());
        assert_eq!(f.heartbeat(GROUP, "m1", generation), Ok(()));
        assert_eq!(f.heartbeat(GROUP, "m2", generation), Ok(()));
    }
    assert!(f.advance(4_999).is_empty());
    assert_eq!(f.state(GROUP), Some(GroupState::Stable));
    f.advance(1);
    assert_eq!(f.state(GROUP), Some(GroupState::PreparingRebalance));
    assert_eq!(
        f.heartbeat(GROUP, "m2", generation),
        Err(ResponseError::UnknownMemberId)
    );
    assert_eq!(
        f.heartbeat(GROUP, "m1", generation),
        Err(ResponseError::RebalanceInProgress)
    );
    let (reply, fx) = f.join(join_req(GROUP, "m1", "unused"));
    assert_eq!(member_ids(join_result(&fx, reply)), ["m1"]);
}

#[test]
fn a_lapsed_member_id_from_member_id_required_does_not_hold_the_join_phase() {
    let mut f = Fixture::new(config());
    let generation = f.stable_group(GROUP, &["m1", "m2"]);
    // A third consumer gets its id and never comes back.
    let (reply, fx) = f.join(join_req(GROUP, "", "m3"));
    assert_eq!(join_result(&fx, reply).error, Some(ResponseError::MemberIdRequired));
    let (r1, fx) = f.join(join_req(GROUP, "m1", "unused"));
    assert!(fx.is_empty());
    let (r2, fx) = f.join(join_req(GROUP, "m2", "unused"));
    assert!(fx.is_empty(), "m3's id is still pending: {fx:?}");
    assert!(f.advance(i64::from(SESSION_MS) - 1).is_empty());
    // m3's id lapses after its session timeout; everyone else has joined.
    let fx = f.advance(1);
    assert_eq!(answers(&fx), 2);
    assert_eq!(member_ids(join_result(&fx, r1)), ["m1", "m2"]);
    assert_eq!(join_result(&fx, r2).generation_id, generation + 1);
}

// ---- LeaveGroup ----

#[test]
fn leaving_rebalances_the_rest_and_the_last_one_out_empties_the_group() {
    let mut f = Fixture::new(config());
    let generation = f.stable_group(GROUP, &["m1", "m2"]);
    let (errors, fx) = f.coordinator.leave_group(GROUP, &[("m2".into(), None)], f.now).unwrap();
    assert_eq!(errors, [None]);
    assert!(fx.is_empty());
    assert_eq!(
        f.heartbeat(GROUP, "m1", generation),
        Err(ResponseError::RebalanceInProgress)
    );
    let (reply, fx) = f.join(join_req(GROUP, "m1", "unused"));
    let result = join_result(&fx, reply);
    assert_eq!((result.generation_id, member_ids(result)), (generation + 1, vec!["m1"]));
    f.sync(sync_req(
        GROUP,
        "m1",
        generation + 1,
        vec![("m1".into(), assignment("m1"))],
    ));
    f.stored(GROUP, generation + 1, Ok(()));
    assert_eq!(f.state(GROUP), Some(GroupState::Stable));

    let leaving = [("m1".to_string(), None), ("ghost".to_string(), None)];
    let (errors, fx) = f.coordinator.leave_group(GROUP, &leaving, f.now).unwrap();
    assert_eq!(errors, [None, Some(ResponseError::UnknownMemberId)]);
    let [Effect::StoreGroup {
        group,
        generation_id,
        then: AfterStore::Nothing,
        ..
    }] = &fx[..]
    else {
        panic!("expected the empty group's record: {fx:?}");
    };
    assert_eq!(*generation_id, generation + 2);
    assert_eq!(group.generation_id, generation + 2);
    assert!(group.members.is_empty());
    assert_eq!(group.leader_id, None);
    assert_eq!(f.state(GROUP), Some(GroupState::Empty));
    assert_eq!(
        f.heartbeat(GROUP, "m1", generation + 1),
        Err(ResponseError::UnknownMemberId)
    );
}

// ---- static membership, rejoins ----

#[test]
fn a_static_member_restarting_keeps_its_assignment_without_a_rebalance_and_fences_its_old_id() {
    let mut f = Fixture::new(config());
    let static_join = |member_id: &str, new_member_id: &str| JoinRequest {
        group_instance_id: Some("instance-a".into()),
        protocols: vec![("range".into(), metadata("instance-a"))],
        ..join_req(GROUP, member_id, new_member_id)
    };
    // A static member needs no MEMBER_ID_REQUIRED round trip.
    let (a, fx) = f.join(static_join("", "a-1"));
    assert!(fx.is_empty());
    let (b, fx) = f.join_new(GROUP, "b");
    assert!(fx.is_empty());
    let fx = f.until_answered(&[a, b]);
    let generation = join_result(&fx, a).generation_id;
    assert_eq!(
        join_result(&fx, a).members[0].group_instance_id.as_deref(),
        Some("instance-a")
    );
    let assignments = vec![("a-1".into(), assignment("a")), ("b".into(), assignment("b"))];
    f.sync(SyncRequest {
        group_instance_id: Some("instance-a".into()),
        ..sync_req(GROUP, "a-1", generation, assignments)
    });
    f.sync(sync_req(GROUP, "b", generation, Vec::new()));
    f.stored(GROUP, generation, Ok(()));
    assert_eq!(f.state(GROUP), Some(GroupState::Stable));

    // The process restarts: same instance id, no member id, same protocols. It is answered
    // only once its new member id is stored (Kafka's order).
    f.now += 1_000;
    let (restart, fx) = f.join(static_join("", "a-2"));
    let [Effect::StoreGroup {
        group: stored,
        then: AfterStore::AnswerStaticJoin(join),
        ..
    }] = &fx[..]
    else {
        panic!("expected only the group's record, the answer waiting on it: {fx:?}");
    };
    let stored = stored.clone();
    let answered = f.coordinator.static_member_stored(GROUP, (**join).clone(), Ok(()));
    let result = join_result(&answered, restart);
    assert_eq!(result.error, None);
    assert_eq!(result.member_id, "a-2");
    assert_eq!(result.generation_id, generation);
    assert!(result.members.is_empty());
    // Kafka (JoinGroup < v9) names the old leader id so the new instance does not assign.
    assert_eq!(result.leader_id, "a-1");
    let ids: Vec<(&str, Option<&str>, &Bytes)> = stored
        .members
        .iter()
        .map(|m| (m.member_id.as_str(), m.group_instance_id.as_deref(), &m.assignment))
        .collect();
    assert_eq!(
        ids,
        [
            ("b", None, &assignment("b")),
            ("a-2", Some("instance-a"), &assignment("a"))
        ]
    );

    assert_eq!(f.state(GROUP), Some(GroupState::Stable));
    assert_eq!(f.heartbeat(GROUP, "b", generation), Ok(()));
    let hb = |f: &mut Fixture, member: &str| {
        f.coordinator
            .heartbeat(GROUP, member, Some("instance-a"), generation, f.now)
    };
    assert_eq!(hb(&mut f, "a-2"), Ok(()));
    assert_eq!(hb(&mut f, "a-1"), Err(ResponseError::FencedInstanceId));
    let static_sync = |member: &str| SyncRequest {
        group_instance_id: Some("instance-a".into()),
        ..sync_req(GROUP, member, generation, Vec::new())
    };
    let (old, fx) = f.sync(static_sync("a-1"));
    assert_eq!(sync_result(&fx, old).error, Some(ResponseError::FencedInstanceId));
    let (new, fx) = f.sync(static_sync("a-2"));
    assert_eq!(sync_result(&fx, new).assignment, assignment("a"));
    assert_eq!(
        f.coordinator
            .validate_commit(GROUP, "a-1", Some("instance-a"), generation, f.now),
        Err(ResponseError::FencedInstanceId)
    );
    assert_eq!(
        f.coordinator
            .validate_commit(GROUP, "a-2", Some("instance-a"), generation, f.now),
        Ok(0)
    );
    // KIP-447: the replaced instance's transactional producer is fenced the same way.
    assert_eq!(
        f.coordinator
            .validate_txn_commit(GROUP, "a-1", Some("instance-a"), generation, f.now),
        Err(ResponseError::FencedInstanceId)
    );
}

/// The coordinator could not store a replaced static member's new id (it lost its partition,
/// or the write failed): the JoinGroup gets the error, and the old instance's id is the
/// member again, so a coordinator that dies in that window cannot leave the group fencing
/// the member its log still names.
#[test]
fn a_static_member_replacement_that_cannot_be_stored_is_undone_and_answered_with_the_error() {
    let mut f = Fixture::new(config());
    let static_join = |member_id: &str, new_member_id: &str| JoinRequest {
        group_instance_id: Some("instance-a".into()),
        protocols: vec![("range".into(), metadata("instance-a"))],
        ..join_req(GROUP, member_id, new_member_id)
    };
    let (a, _) = f.join(static_join("", "a-1"));
    let fx = f.until_answered(&[a]);
    let generation = join_result(&fx, a).generation_id;
    f.sync(SyncRequest {
        group_instance_id: Some("instance-a".into()),
        ..sync_req(GROUP, "a-1", generation, vec![("a-1".into(), assignment("a"))])
    });
    f.stored(GROUP, generation, Ok(()));
    assert_eq!(f.state(GROUP), Some(GroupState::Stable));

    let (restart, fx) = f.join(static_join("", "a-2"));
    let [Effect::StoreGroup {
        then: AfterStore::AnswerStaticJoin(join),
        ..
    }] = &fx[..]
    else {
        panic!("expected the group's record with the answer waiting on it: {fx:?}");
    };
    let join = (**join).clone();
    // Meanwhile the new id is the member and the old one is fenced, as in Kafka.
    let hb = |f: &mut Fixture, member: &str| {
        f.coordinator
            .heartbeat(GROUP, member, Some("instance-a"), generation, f.now)
    };
    assert_eq!(hb(&mut f, "a-1"), Err(ResponseError::FencedInstanceId));
    let answered = f
        .coordinator
        .static_member_stored(GROUP, join, Err(ResponseError::NotCoordinator));
    let result = join_result(&answered, restart);
    assert_eq!(result.error, Some(ResponseError::NotCoordinator));
    assert_eq!(result.member_id, "", "the new member id is not handed out");
    assert_eq!(hb(&mut f, "a-1"), Ok(()), "the old instance is the member again");
    assert_eq!(
        hb(&mut f, "a-2"),
        Err(ResponseError::FencedInstanceId),
        "the instance is registered under its old id again"
    );
    let group = f.coordinator.describe_group(GROUP).unwrap().unwrap();
    assert_eq!(
        group.members.iter().map(|m| m.member_id.as_str()).collect::<Vec<_>>(),
        ["a-1"]
    );
    assert_eq!(f.state(GROUP), Some(GroupState::Stable));
}

#[test]
fn a_follower_rejoining_unchanged_keeps_the_generation_but_the_leader_rejoining_rebalances() {
    let mut f = Fixture::new(config());
    let generation = f.stable_group(GROUP, &["m1", "m2"]);
    let (reply, fx) = f.join(join_req(GROUP, "m2", "unused"));
    let result = join_result(&fx, reply);
    assert_eq!(result.error, None);
    assert_eq!(result.generation_id, generation);
    assert_eq!(result.leader_id, "m1");
    assert!(result.members.is_empty());
    assert_eq!(f.state(GROUP), Some(GroupState::Stable));
    assert_eq!(f.heartbeat(GROUP, "m1", generation), Ok(()));

    let (_, fx) = f.join(join_req(GROUP, "m1", "unused"));
    assert!(fx.is_empty());
    assert_eq!(f.state(GROUP), Some(GroupState::PreparingRebalance));
    assert_eq!(
        f.heartbeat(GROUP, "m2", generation),
        Err(ResponseError::RebalanceInProgress)
    );
}

#[test]
fn a_follower_rejoining_with_new_metadata_rebalances() {
    let mut f = Fixture::new(config());
    let generation = f.stable_group(GROUP, &["m1", "m2"]);
    let (_, fx) = f.join(JoinRequest {
        protocols: vec![("range".into(), Bytes::from_static(b"m2:orders,audit"))],
        ..join_req(GROUP, "m2", "unused")
    });
    assert!(fx.is_empty());
    assert_eq!(
        f.heartbeat(GROUP, "m1", generation),
        Err(ResponseError::RebalanceInProgress)
    );
}

// ---- join validation ----

#[test]
fn a_join_beyond_group_max_size_is_refused_and_members_are_undisturbed() {
    let mut f = Fixture::new(GroupConfig {
        max_size: 2,
        ..config()
    });
    let generation = f.stable_group(GROUP, &["m1", "m2"]);
    let (reply, fx) = f.join(join_req(GROUP, "", "m3"));
    assert_eq!(join_result(&fx, reply).error, Some(ResponseError::GroupMaxSizeReached));
    let (reply, fx) = f.join(JoinRequest {
        require_known_member_id: false,
        ..join_req(GROUP, "", "m4")
    });
    assert_eq!(answers(&fx), 1);
    assert_eq!(join_result(&fx, reply).error, Some(ResponseError::GroupMaxSizeReached));
    assert_eq!(f.state(GROUP), Some(GroupState::Stable));
    assert_eq!(f.heartbeat(GROUP, "m1", generation), Ok(()));
    assert_eq!(f.heartbeat(GROUP, "m2", generation), Ok(()));
    assert_eq!(f.coordinator.describe_group(GROUP).unwrap().unwrap().members.len(), 2);
}

#[test]
fn joins_with_bad_session_timeout_group_id_or_protocols_are_refused() {
    let mut f = Fixture::new(config());
    let error = |f: &mut Fixture, request: JoinRequest| {
        let (reply, fx) = f.join(request);
        assert_eq!(answers(&fx), 1);
        join_result(&fx, reply).error
    };
    let too_short = JoinRequest {
        session_timeout_ms: 5_999,
        ..join_req(GROUP, "", "m1")
    };
    assert_eq!(error(&mut f, too_short), Some(ResponseError::InvalidSessionTimeout));
    let too_long = JoinRequest {
        session_timeout_ms: 1_800_001,
        ..join_req(GROUP, "", "m1")
    };
    assert_eq!(error(&mut f, too_long), Some(ResponseError::InvalidSessionTimeout));
    assert_eq!(
        error(&mut f, join_req("", "", "m1")),
        Some(ResponseError::InvalidGroupId)
    );
    assert_eq!(f.state(GROUP), None, "no group was created");

    let generation = f.stable_group(GROUP, &["m1"]);
    let connect = JoinRequest {
        protocol_type: "connect".into(),
        ..join_req(GROUP, "", "m2")
    };
    assert_eq!(error(&mut f, connect), Some(ResponseError::InconsistentGroupProtocol));
    let no_common_protocol = JoinRequest {
        protocols: vec![("cooperative-sticky".into(), metadata("m2"))],
        ..join_req(GROUP, "", "m2")
    };
    assert_eq!(
        error(&mut f, no_common_protocol),
        Some(ResponseError::InconsistentGroupProtocol)
    );
    assert_eq!(f.heartbeat(GROUP, "m1", generation), Ok(()));
}

// ---- offsets ----

#[test]
fn a_commit_outside_group_management_creates_an_empty_group() {
    let mut f = Fixture::new(config());
    assert_eq!(f.commit("standalone", "", -1), Ok(0));
    let group = f.coordinator.describe_group("standalone").unwrap().unwrap();
    assert_eq!(group.state, GroupState::Empty);
    assert_eq!(group.protocol_type, "");
    assert!(group.members.is_empty());
    assert_eq!(f.commit("standalone", "", -1), Ok(0));
    // A generation on a group the coordinator does not know is stale.
    assert_eq!(f.commit("unknown", "m1", 3), Err(ResponseError::IllegalGeneration));
    assert_eq!(f.state("unknown"), None);
}

#[test]
fn commits_are_checked_against_the_member_generation_and_state() {
    let mut f = Fixture::new(config());
    let generation = f.stable_group(GROUP, &["m1", "m2"]);
    assert_eq!(f.commit(GROUP, "m1", generation), Ok(0));
    assert_eq!(
        f.commit(GROUP, "m1", generation - 1),
        Err(ResponseError::IllegalGeneration)
    );
    assert_eq!(
        f.commit(GROUP, "ghost", generation),
        Err(ResponseError::UnknownMemberId)
    );
    // Without a generation, only an empty group takes commits.
    assert_eq!(f.commit(GROUP, "", -1), Err(ResponseError::UnknownMemberId));

    let (r1, _) = f.join(join_req(GROUP, "m1", "unused"));
    let (_, fx) = f.join(join_req(GROUP, "m2", "unused"));
    let next = join_result(&fx, r1).generation_id;
    assert_eq!(f.state(GROUP), Some(GroupState::CompletingRebalance));
    assert_eq!(f.commit(GROUP, "m1", next), Err(ResponseError::RebalanceInProgress));
    // Kafka checks the member and its generation before the state.
    assert_eq!(f.commit(GROUP, "m1", generation), Err(ResponseError::IllegalGeneration));
    assert_eq!(f.commit(GROUP, "ghost", next), Err(ResponseError::UnknownMemberId));
}

#[test]
fn committed_offsets_are_fetched_back_and_unknown_partitions_have_none() {
    let mut f = Fixture::new(config());
    assert_eq!(f.commit(GROUP, "", -1), Ok(0));
    let commits = vec![
        (("orders".to_string(), 1), offset(11, 100)),
        (("orders".to_string(), 0), offset(10, 100)),
        (("audit".to_string(), 0), offset(5, 100)),
    ];
    f.coordinator.offsets_committed(GROUP, commits, 0, f.now);
    assert_eq!(
        f.coordinator.fetch_offsets(GROUP, None).unwrap(),
        vec![
            ("audit".to_string(), 0, Some(offset(5, 100))),
            ("orders".to_string(), 0, Some(offset(10, 100))),
            ("orders".to_string(), 1, Some(offset(11, 100))),
        ]
    );
    f.coordinator
        .offsets_committed(GROUP, vec![(("orders".into(), 0), offset(20, 200))], 100, f.now);
    let asked = [("orders".to_string(), vec![0, 2]), ("missing".to_string(), vec![0])];
    assert_eq!(
        f.coordinator.fetch_offsets(GROUP, Some(&asked)).unwrap(),
        vec![
            ("orders".to_string(), 0, Some(offset(20, 200))),
            ("orders".to_string(), 2, None),
            ("missing".to_string(), 0, None),
        ]
    );
    assert_eq!(
        f.coordinator.fetch_offsets(OTHER, Some(&asked[..1])).unwrap(),
        vec![("orders".to_string(), 0, None), ("orders".to_string(), 2, None)]
    );
    assert_eq!(f.coordinator.fetch_offsets(OTHER, None).unwrap(), Vec::new());
}

#[test]
fn offsets_expire_once_a_group_has_been_empty_for_the_retention_but_not_while_stable() {
    let retention_ms = 24 * 3_600_000;
    let mut f = Fixture::new(GroupConfig {
        offsets_retention_ms: retention_ms,
        ..config()
    });
    f.stable_group(GROUP, &["m1"]);
    f.stable_group(OTHER, &["o1"]);
    let committed_at = f.now;
    f.coordinator
        .offsets_committed(GROUP, vec![(("orders".into(), 0), offset(10, committed_at))], 0, f.now);
    f.coordinator
        .offsets_committed(OTHER, vec![(("orders".into(), 0), offset(7, committed_at))], 0, f.now);
    // GROUP empties ten hours after its commit.
    f.now += 10 * 3_600_000;
    let emptied_at = f.now;
    f.coordinator.leave_group(GROUP, &[("m1".into(), None)], f.now).unwrap();
    assert_eq!(f.state(GROUP), Some(GroupState::Empty));

    // A day after the commit, but not yet a day empty: kept (KIP-211).
    assert!(f.coordinator.expire_offsets(committed_at + retention_ms).is_empty());
    assert!(f.coordinator.expire_offsets(emptied_at + retention_ms - 1).is_empty());
    let fx = f.coordinator.expire_offsets(emptied_at + retention_ms);
    assert_eq!(
        fx,
        vec![Effect::Tombstones {
            partition: 0,
            group_id: GROUP.to_string(),
            offsets: vec![("orders".to_string(), 0)],
            group: true,
        }]
    );
    assert_eq!(f.state(GROUP), None);
    assert_eq!(
        f.coordinator.fetch_offsets(GROUP, None).unwrap(),
        Vec::new(),
        "the group and its offsets are gone"
    );
    assert_eq!(f.state(OTHER), Some(GroupState::Stable));
    assert_eq!(
        f.coordinator.fetch_offsets(OTHER, None).unwrap(),
        vec![("orders".to_string(), 0, Some(offset(7, committed_at)))]
    );
}

#[test]
fn standalone_offsets_expire_by_their_commit_time() {
    let mut f = Fixture::new(GroupConfig {
        offsets_retention_ms: 1_000_000,
        ..config()
    });
    assert_eq!(f.commit("standalone", "", -1), Ok(0));
    let commits = vec![
        (("orders".to_string(), 0), offset(1, 0)),
        (("orders".to_string(), 1), offset(2, 500_000)),
    ];
    f.coordinator.offsets_committed("standalone", commits, 0, 0);
    assert_eq!(
        f.coordinator.expire_offsets(1_000_000),
        vec![Effect::Tombstones {
            partition: 0,
            group_id: "standalone".into(),
            offsets: vec![("orders".into(), 0)],
            group: false,
        }]
    );
    assert_eq!(
        f.coordinator.fetch_offsets("standalone", None).unwrap(),
        vec![("orders".to_string(), 1, Some(offset(2, 500_000)))]
    );
}

// ---- admin ----

#[test]
fn delete_group_refuses_a_live_group_and_tombstones_an_empty_one() {
    let mut f = Fixture::new(config());
    f.stable_group(GROUP, &["m1"]);
    assert_eq!(f.coordinator.delete_group(GROUP), Err(ResponseError::NonEmptyGroup));
    assert_eq!(f.state(GROUP), Some(GroupState::Stable));

    assert_eq!(f.commit(OTHER, "", -1), Ok(0));
    let commits = vec![
        (("orders".to_string(), 3), offset(1, 0)),
        (("audit".to_string(), 0), offset(2, 0)),
    ];
    f.coordinator.offsets_committed(OTHER, commits, 0, f.now);
    assert_eq!(
        f.coordinator.delete_group(OTHER),
        Ok(vec![Effect::Tombstones {
            partition: 0,
            group_id: OTHER.into(),
            offsets: vec![("audit".into(), 0), ("orders".into(), 3)],
            group: true,
        }])
    );
    assert_eq!(f.coordinator.delete_group(OTHER), Err(ResponseError::GroupIdNotFound));
    assert_eq!(f.state(OTHER), None);
    let asked = [("orders".to_string(), vec![3])];
    assert_eq!(
        f.coordinator.fetch_offsets(OTHER, Some(&asked)).unwrap(),
        vec![("orders".to_string(), 3, None)]
    );
}

#[test]
fn delete_offsets_keeps_topics_an_active_consumer_group_subscribes_to() {
    let mut f = Fixture::new(config());
    f.stable_group(GROUP, &["m1", "m2"]);
    let commits = vec![
        (("orders".to_string(), 0), offset(10, 0)),
        (("audit".to_string(), 0), offset(3, 0)),
    ];
    f.coordinator.offsets_committed(GROUP, commits, 0, f.now);
    // Member metadata is "<member>:<topic>,...".
    let subscribed = |metadata: &Bytes, topic: &str| {
        let text = std::str::from_utf8(metadata).unwrap();
        text.split([':', ',']).skip(1).any(|t| t == topic)
    };
    let (errors, effect) = f
        .coordinator
        .delete_offsets(GROUP, &[("orders".into(), 0), ("audit".into(), 0)], subscribed)
        .unwrap();
    assert_eq!(errors, [Some(ResponseError::GroupSubscribedToTopic), None]);
    assert_eq!(
        effect,
        Some(Effect::Tombstones {
            partition: 0,
            group_id: GROUP.into(),
            offsets: vec![("audit".into(), 0)],
            group: false,
        })
    );
    assert_eq!(
        f.coordinator.fetch_offsets(GROUP, None).unwrap(),
        vec![("orders".to_string(), 0, Some(offset(10, 0)))]
    );
    assert_eq!(
        f.coordinator
            .delete_offsets(OTHER, &[("orders".into(), 0)], subscribed)
            .err(),
        Some(ResponseError::GroupIdNotFound)
    );
}

// ---- loading and unloading ----

fn stored_member(id: &str, instance: Option<&str>) -> StoredMember {
    StoredMember {
        member_id: id.into(),
        group_instance_id: instance.map(String::from),
        client_id: "consumer-1".into(),
        client_host: "/10.0.0.7".into(),
        rebalance_timeout_ms: REBALANCE_MS,
        session_timeout_ms: SESSION_MS,
        subscription: metadata(id),
        assignment: assignment(id),
    }
}

/// The partition's log as Kafka would have written it, read back through `records::decode`.
fn log_records() -> Vec<LoadedRecord> {
    let group = StoredGroup {
        protocol_type: "consumer".into(),
        generation_id: 5,
        protocol_name: Some("range".into()),
        leader_id: Some("m1".into()),
        current_state_timestamp_ms: 400,
        members: vec![stored_member("m1", None), stored_member("m2", Some("instance-2"))],
    };
    let gone = StoredGroup {
        members: Vec::new(),
        ..group.clone()
    };
    let log: Vec<(Bytes, Option<Bytes>)> = vec![
        (
            offset_commit_key(GROUP, "orders", 0),
            Some(offset_commit_value(&offset(10, 300))),
        ),
        (
            offset_commit_key(GROUP, "orders", 1),
            Some(offset_commit_value(&offset(11, 300))),
        ),
        (offset_commit_key(GROUP, "orders", 1), None),
        (group_metadata_key(GROUP), Some(group_metadata_value(&group))),
        (group_metadata_key("gone"), Some(group_metadata_value(&gone))),
        (
            offset_commit_key("gone", "orders", 0),
            Some(offset_commit_value(&offset(1, 300))),
        ),
        (offset_commit_key("gone", "orders", 0), None),
        (group_metadata_key("gone"), None),
    ];
    log.iter()
        .enumerate()
        .map(|(offset, (k, v))| LoadedRecord::Record {
            offset: offset as i64,
            producer_id: None,
            record: decode(Some(&k[..]), v.as_deref()).unwrap(),
        })
        .collect()
}

#[test]
fn loading_restores_offsets_and_a_stable_group_at_its_stored_generation() {
    let mut c = GroupCoordinator::new(config());
    assert!(c.begin_load(0, 3).is_empty());
    assert!(c.complete_load(0, 3, log_records(), 1_000));
    assert_eq!(c.owned_partitions(), HashMap::from([(0, 3)]));

    assert_eq!(
        c.fetch_offsets(GROUP, None).unwrap(),
        vec![("orders".to_string(), 0, Some(offset(10, 300)))]
    );
    let group = c.describe_group(GROUP).unwrap().unwrap();
    assert_eq!(group.state, GroupState::Stable);
    assert_eq!(group.protocol_name, "range");
    let members: Vec<(&str, &Bytes)> = group
        .members
        .iter()
        .map(|m| (m.member_id.as_str(), &m.assignment))
        .collect();
    assert_eq!(members, [("m1", &assignment("m1")), ("m2", &assignment("m2"))]);
    assert_eq!(c.heartbeat(GROUP, "m1", None, 5, 1_000), Ok(()));
    assert_eq!(c.heartbeat(GROUP, "m2", Some("instance-2"), 5, 1_000), Ok(()));
    assert_eq!(
        c.heartbeat(GROUP, "m1", None, 4, 1_000),
        Err(ResponseError::IllegalGeneration)
    );
    assert_eq!(
        c.heartbeat(GROUP, "m9", Some("instance-2"), 5, 1_000),
        Err(ResponseError::FencedInstanceId)
    );
    let fx = c.sync_group(sync_req(GROUP, "m2", 5, Vec::new()), 1, 1_000);
    assert_eq!(sync_result(&fx, 1).assignment, assignment("m2"));
    assert!(c.describe_group("gone").unwrap().is_none());
    // Restored members' sessions run from the load: m2 goes silent, m1 does not.
    assert_eq!(c.heartbeat(GROUP, "m1", None, 5, 6_000), Ok(()));
    assert!(c.tick(1_000 + i64::from(SESSION_MS) - 1).is_empty());
    c.tick(1_000 + i64::from(SESSION_MS));
    assert_eq!(
        c.heartbeat(GROUP, "m2", None, 5, 11_000),
        Err(ResponseError::UnknownMemberId)
    );
    assert_eq!(
        c.describe_group(GROUP).unwrap().unwrap().state,
        GroupState::PreparingRebalance
    );
}

#[test]
fn unloading_answers_waiting_requests_with_not_coordinator() {
    let mut f = Fixture::new(config());
    let generation = f.stable_group(GROUP, &["m1", "m2"]);
    let other_generation = f.joined_group(OTHER, &["o1", "o2"]);
    assert_eq!(f.heartbeat(GROUP, "m2", generation), Ok(()));
    let (join, fx) = f.join(join_req(GROUP, "m1", "unused"));
    assert!(fx.is_empty());
    let (sync, fx) = f.sync(sync_req(OTHER, "o2", other_generation, Vec::new()));
    assert!(fx.is_empty());

    let fx = f.coordinator.unload(0);
    assert_eq!(fx.len(), 2, "{fx:?}");
    assert_eq!(
        join_result(&fx, join),
        &JoinResult::failed("m1", ResponseError::NotCoordinator)
    );
    assert_eq!(
        sync_result(&fx, sync),
        &SyncResult::failed(ResponseError::NotCoordinator)
    );
    assert_eq!(f.heartbeat(GROUP, "m2", generation), Err(ResponseError::NotCoordinator));
    assert!(f.coordinator.owned_partitions().is_empty());
}

#[test]
fn a_load_overtaken_by_a_newer_leader_epoch_is_dropped() {
    let mut c = GroupCoordinator::new(config());
    c.begin_load(0, 1);
    c.begin_load(0, 2);
    assert!(!c.complete_load(0, 1, log_records(), 0));
    assert_eq!(
        c.heartbeat(GROUP, "m1", None, 5, 0),
        Err(ResponseError::CoordinatorLoadInProgress)
    );
    assert!(c.complete_load(0, 2, log_records(), 0));
    assert_eq!(c.heartbeat(GROUP, "m1", None, 5, 0), Ok(()));
    assert!(!c.complete_load(0, 2, log_records(), 0), "already loaded");
}

// ---- partition_for ----

#[test]
fn partition_for_matches_kafkas_abs_of_java_string_hash_code() {
    // Java's "orders-sink".hashCode(), h = 31 * h + c (int arithmetic, wrapping):
    //   'o' 111 -> 111, 'r' -> 3555, 'd' -> 110305, 'e' -> 3419556, 'r' -> 106006350,
    //   's' -> -1008770331, '-' -> -1207109144, 's' -> 1234322315, 'i' -> -390713794,
    //   'n' -> 772774384, 'k' -> -1813797765.
    // Utils.abs gives 1813797765, and 1813797765 % 50 = 15 (masking with 0x7fffffff would give 33).
    assert_eq!(partition_for("orders-sink", 50), 15);
    // "billing".hashCode() = -109829509: abs % 50 = 9 (masking: 39).
    assert_eq!(partition_for("billing", 50), 9);
    // "polygenelubricants".hashCode() = Integer.MIN_VALUE, which Utils.abs maps to 0.
    assert_eq!(partition_for("polygenelubricants", 50), 0);
    assert_eq!(partition_for("polygenelubricants", 7), 0);
    // 'g' = 103.
    assert_eq!(partition_for("g", 50), 3);
    // Java hashes UTF-16 code units: U+1F600 is 0xD83D 0xDE00, 55357 * 31 + 56832 = 1772899.
    assert_eq!(partition_for("\u{1F600}", 50), 1_772_899 % 50);
    assert_eq!(partition_for("\u{e9}", 50), 233 % 50);
    let c = GroupCoordinator::new(GroupConfig::default());
    assert_eq!(c.partition_for("orders-sink"), 15);
}

mod consumer;
mod migration;
mod share;
mod share_state;
mod txn;

/// The allowed predecessors are Kafka's (`GroupMetadata.validPreviousStates`, without Dead); every
/// scenario above runs through `Group::transition`, which fails a test on any other move.
#[test]
fn group_states_follow_only_the_states_kafka_allows() {
    use GroupState::*;
    let all = [Empty, PreparingRebalance, CompletingRebalance, Stable];
    let allowed = [
        (PreparingRebalance, Empty),
        (Empty, PreparingRebalance),
        (CompletingRebalance, PreparingRebalance),
        (Stable, PreparingRebalance),
        (PreparingRebalance, CompletingRebalance),
        (CompletingRebalance, Stable),
    ];
    for from in all {
        for to in all {
            assert_eq!(to.may_follow(from), allowed.contains(&(from, to)), "{from:?} -> {to:?}");
        }
    }
}

#[test]
#[should_panic(expected = "would move from Empty to Stable")]
fn a_move_the_table_does_not_allow_is_caught() {
    let mut group = Group::new(GROUP, 0, 0);
    group.transition(GroupState::Stable, 1);
}

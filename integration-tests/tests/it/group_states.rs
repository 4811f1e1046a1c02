//! The classic group protocol request by request, with the exact error codes Kafka 4.1 gives
//! (each expectation here was first observed against a real Kafka 4.1 broker): KIP-394's
//! MEMBER_ID_REQUIRED, the leader's member list, SyncGroup returning the assignment bytes as
//! sent, Heartbeat/OffsetCommit errors for unknown members, stale generations and a rebalance
//! in progress, OffsetCommit metadata returned by OffsetFetch, a second member triggering a
//! rebalance, DescribeGroups/ListGroups/DeleteGroups, static membership (a restarted static
//! member keeps its generation and fences its old member id), and offsets and group state
//! surviving a broker SIGKILL.
//!
//! A test file: one test per group state transition Kafka clients depend on, long because each
//! scenario is spelled out.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use bytes::Bytes;
use kafka_protocol::messages::describe_groups_response::DescribedGroup;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
use kafka_protocol::messages::offset_delete_request::{OffsetDeleteRequestPartition, OffsetDeleteRequestTopic};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    DeleteGroupsRequest, DescribeGroupsRequest, GroupId, HeartbeatRequest, JoinGroupRequest, JoinGroupResponse,
    LeaveGroupRequest, ListGroupsRequest, OffsetCommitRequest, OffsetDeleteRequest, OffsetFetchRequest,
    SyncGroupRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use sluice_integration_tests::clients::wait_until;
use sluice_integration_tests::groups::find_coordinator;
use sluice_integration_tests::{kafka_client, NodeOptions, SluiceNode};

// Kafka error codes.
const NONE: i16 = 0;
const ILLEGAL_GENERATION: i16 = 22;
const INCONSISTENT_GROUP_PROTOCOL: i16 = 23;
const INVALID_GROUP_ID: i16 = 24;
const UNKNOWN_MEMBER_ID: i16 = 25;
const INVALID_SESSION_TIMEOUT: i16 = 26;
const REBALANCE_IN_PROGRESS: i16 = 27;
const NON_EMPTY_GROUP: i16 = 68;
const MEMBER_ID_REQUIRED: i16 = 79;
const FENCED_INSTANCE_ID: i16 = 82;
const GROUP_SUBSCRIBED_TO_TOPIC: i16 = 86;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;

const TOPIC: &str = "group-protocol";
const TIMEOUT: Duration = Duration::from_secs(30);

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// Requests to one group on one broker, each on a fresh connection (a member is identified by
/// its member id, not its connection), at versions every Kafka 4.1 client still uses.
struct Group {
    addr: SocketAddr,
    id: String,
}

/// One partition's committed offset as OffsetFetch returns it: (offset, metadata, error code).
type Committed = (i64, Option<String>, i16);

struct Joined {
    member_id: String,
    generation: i32,
    response: JoinGroupResponse,
}

impl Group {
    fn join(
        &self,
        member_id: &str,
        instance: Option<&str>,
        session_ms: i32,
        metadata: &[u8],
    ) -> Result<JoinGroupResponse> {
        self.join_with(member_id, instance, session_ms, 20_000, metadata)
    }

    fn join_with(
        &self,
        member_id: &str,
        instance: Option<&str>,
        session_ms: i32,
        rebalance_ms: i32,
        metadata: &[u8],
    ) -> Result<JoinGroupResponse> {
        self.join_protocol(
            member_id,
            instance,
            session_ms,
            rebalance_ms,
            "consumer",
            "range",
            metadata,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn join_protocol(
        &self,
        member_id: &str,
        instance: Option<&str>,
        session_ms: i32,
        rebalance_ms: i32,
        protocol_type: &str,
        protocol: &str,
        metadata: &[u8],
    ) -> Result<JoinGroupResponse> {
        let request = JoinGroupRequest::default()
            .with_group_id(GroupId(s(&self.id)))
            .with_session_timeout_ms(session_ms)
            .with_rebalance_timeout_ms(rebalance_ms)
            .with_member_id(s(member_id))
            .with_group_instance_id(instance.map(s))
            .with_protocol_type(s(protocol_type))
            .with_protocols(vec![JoinGroupRequestProtocol::default()
                .with_name(s(protocol))
                .with_metadata(Bytes::copy_from_slice(metadata))]);
        kafka_client::call(self.addr, &request, 5, TIMEOUT).with_context(|| format!("JoinGroup {member_id:?}"))
    }

    /// JoinGroup as a new dynamic member: MEMBER_ID_REQUIRED with an id, then join with it.
    fn join_new(&self, session_ms: i32, metadata: &[u8]) -> Result<Joined> {
        self.join_new_with(session_ms, 20_000, metadata)
    }

    fn join_new_with(&self, session_ms: i32, rebalance_ms: i32, metadata: &[u8]) -> Result<Joined> {
        let first = self.join_with("", None, session_ms, rebalance_ms, metadata)?;
        ensure!(
            first.error_code == MEMBER_ID_REQUIRED && !first.member_id.is_empty(),
            "JoinGroup v5 without a member id: error {} member id {:?}; Kafka answers MEMBER_ID_REQUIRED (79) with \
             an id to rejoin with (KIP-394)",
            first.error_code,
            first.member_id
        );
        let member_id = first.member_id.to_string();
        let response = self.join_with(&member_id, None, session_ms, rebalance_ms, metadata)?;
        ensure!(
            response.error_code == NONE,
            "JoinGroup with the given member id: error {}",
            response.error_code
        );
        ensure!(
            response.member_id.as_str() == member_id,
            "JoinGroup answered member id {:?}",
            response.member_id
        );
        Ok(Joined {
            member_id,
            generation: response.generation_id,
            response,
        })
    }

    fn sync(
        &self,
        generation: i32,
        member_id: &str,
        instance: Option<&str>,
        assignments: &[(&str, &[u8])],
    ) -> Result<(i16, Bytes)> {
        let request = SyncGroupRequest::default()
            .with_group_id(GroupId(s(&self.id)))
            .with_generation_id(generation)
            .with_member_id(s(member_id))
            .with_group_instance_id(instance.map(s))
            .with_assignments(
                assignments
                    .iter()
                    .map(|(m, a)| {
                        SyncGroupRequestAssignment::default()
                            .with_member_id(s(m))
                            .with_assignment(Bytes::copy_from_slice(a))
                    })
                    .collect(),
            );
        let r = kafka_client::call(self.addr, &request, 3, TIMEOUT).context("SyncGroup")?;
        Ok((r.error_code, r.assignment))
    }

    fn heartbeat(&self, generation: i32, member_id: &str, instance: Option<&str>) -> Result<i16> {
        let request = HeartbeatRequest::default()
            .with_group_id(GroupId(s(&self.id)))
            .with_generation_id(generation)
            .with_member_id(s(member_id))
            .with_group_instance_id(instance.map(s));
        Ok(kafka_client::call(self.addr, &request, 3, TIMEOUT)
            .context("Heartbeat")?
            .error_code)
    }

    /// OffsetCommit v7 of (partition, offset, metadata); returns each partition's error code.
    fn commit(&self, generation: i32, member_id: &str, offsets: &[(i32, i64, &str)]) -> Result<Vec<i16>> {
        self.commit_to(TOPIC, generation, member_id, offsets)
    }

    fn commit_to(
        &self,
        topic: &str,
        generation: i32,
        member_id: &str,
        offsets: &[(i32, i64, &str)],
    ) -> Result<Vec<i16>> {
        let request = OffsetCommitRequest::default()
            .with_group_id(GroupId(s(&self.id)))
            .with_generation_id_or_member_epoch(generation)
            .with_member_id(s(member_id))
            .with_topics(vec![OffsetCommitRequestTopic::default()
                .with_name(TopicName(s(topic)))
                .with_partitions(
                    offsets
                        .iter()
                        .map(|(p, o, m)| {
                            OffsetCommitRequestPartition::default()
                                .with_partition_index(*p)
                                .with_committed_offset(*o)
                                .with_committed_leader_epoch(-1)
                                .with_committed_metadata(Some(s(m)))
                        })
                        .collect(),
                )]);
        let r = kafka_client::call(self.addr, &request, 7, TIMEOUT).context("OffsetCommit")?;
        Ok(r.topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
            .collect())
    }

    /// OffsetFetch v5 of partitions 0 and 1: (offset, metadata, error code) each.
    fn fetch(&self) -> Result<(i16, Vec<Committed>)> {
        let request = OffsetFetchRequest::default()
            .with_group_id(GroupId(s(&self.id)))
            .with_topics(Some(vec![OffsetFetchRequestTopic::default()
                .with_name(TopicName(s(TOPIC)))
                .with_partition_indexes(vec![0, 1])]));
        let r = kafka_client::call(self.addr, &request, 5, TIMEOUT).context("OffsetFetch")?;
        let mut partitions: Vec<_> = r.topics.iter().flat_map(|t| t.partitions.iter()).collect();
        partitions.sort_by_key(|p| p.partition_index);
        Ok((
            r.error_code,
            partitions
                .iter()
                .map(|p| {
                    (
                        p.committed_offset,
                        p.metadata.as_ref().map(|m| m.to_string()),
                        p.error_code,
                    )
                })
                .collect(),
        ))
    }

    /// OffsetDelete v0 of `partitions` of the test topic: (group error, per-partition errors).
    fn delete_offsets(&self, partitions: &[i32]) -> Result<(i16, Vec<i16>)> {
        let request = OffsetDeleteRequest::default()
            .with_group_id(GroupId(s(&self.id)))
            .with_topics(vec![OffsetDeleteRequestTopic::default()
                .with_name(TopicName(s(TOPIC)))
                .with_partitions(
                    partitions
                        .iter()
                        .map(|p| OffsetDeleteRequestPartition::default().with_partition_index(*p))
                        .collect(),
                )]);
        let r = kafka_client::call(self.addr, &request, 0, TIMEOUT).context("OffsetDelete")?;
        Ok((
            r.error_code,
            r.topics
                .iter()
                .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
                .collect(),
        ))
    }

    fn describe(&self) -> Result<DescribedGroup> {
        let request = DescribeGroupsRequest::default().with_groups(vec![GroupId(s(&self.id))]);
        let r = kafka_client::call(self.addr, &request, 4, TIMEOUT).context("DescribeGroups")?;
        r.groups
            .into_iter()
            .next()
            .context("DescribeGroups: no group in the response")
    }

    fn leave(&self, members: &[(&str, Option<&str>)]) -> Result<(i16, Vec<i16>)> {
        let request = LeaveGroupRequest::default()
            .with_group_id(GroupId(s(&self.id)))
            .with_members(
                members
                    .iter()
                    .map(|(m, i)| {
                        MemberIdentity::default()
                            .with_member_id(s(m))
                            .with_group_instance_id(i.map(s))
                    })
                    .collect(),
            );
        let r = kafka_client::call(self.addr, &request, 3, TIMEOUT).context("LeaveGroup")?;
        Ok((r.error_code, r.members.iter().map(|m| m.error_code).collect()))
    }

    fn delete(&self) -> Result<i16> {
        let request = DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s(&self.id))]);
        let r = kafka_client::call(self.addr, &request, 1, TIMEOUT).context("DeleteGroups")?;
        Ok(r.results.first().context("DeleteGroups: no result")?.error_code)
    }
}

/// A ConsumerProtocolSubscription v0 (what Kafka's consumers send as JoinGroup metadata):
/// version, topics, null user data, plus `tag` as the last topic name so members differ.
fn subscription(tag: &str) -> Vec<u8> {
    let mut b = vec![0, 0];
    b.extend(2i32.to_be_bytes());
    for t in [TOPIC, tag] {
        b.extend((t.len() as i16).to_be_bytes());
        b.extend(t.as_bytes());
    }
    b.extend((-1i32).to_be_bytes());
    b
}

/// A ConsumerProtocolAssignment v0 of `partitions` of the test topic, with `user_data`.
fn assignment_bytes(partitions: &[i32], user_data: &[u8]) -> Vec<u8> {
    let mut b = vec![0, 0];
    b.extend(1i32.to_be_bytes());
    b.extend((TOPIC.len() as i16).to_be_bytes());
    b.extend(TOPIC.as_bytes());
    b.extend((partitions.len() as i32).to_be_bytes());
    for p in partitions {
        b.extend(p.to_be_bytes());
    }
    b.extend((user_data.len() as i32).to_be_bytes());
    b.extend(user_data);
    b
}

fn members_of(d: &DescribedGroup) -> Vec<String> {
    let mut ids: Vec<String> = d.members.iter().map(|m| m.member_id.to_string()).collect();
    ids.sort();
    ids
}

/// A node with no initial rebalance delay, the test topic, and a coordinator for `group`.
fn start(group: &str) -> Result<(SluiceNode, Group)> {
    start_with(group, NodeOptions::default())
}

fn start_with(group: &str, opts: NodeOptions) -> Result<(SluiceNode, Group)> {
    let node = SluiceNode::start(opts.set("group.initial.rebalance.delay.ms", "0"))?;
    let code = kafka_client::create_topic(node.addr(), TOPIC, 2, TIMEOUT)?;
    ensure!(code == 0, "CreateTopics {TOPIC}: error {code}");
    let addr = node.addr();
    let coordinator = wait_until(TIMEOUT, "FindCoordinator to name this node", || {
        find_coordinator(addr, group).ok()?.ok()
    })?;
    ensure!(
        coordinator == node.node_id(),
        "FindCoordinator named node {coordinator}"
    );
    let g = Group {
        addr,
        id: group.to_string(),
    };
    // FindCoordinator may name this node before it has loaded the group's partition (Kafka
    // answers NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS meanwhile, and clients retry).
    wait_until(TIMEOUT, "the coordinator to answer DescribeGroups", || {
        g.describe().ok().filter(|d| d.error_code == NONE)
    })?;
    Ok((node, g))
}

#[test]
fn join_sync_heartbeat_commit_and_rebalance_answer_with_kafkas_error_codes() -> Result<()> {
    let (_node, g) = start("proto")?;
    let meta_a = subscription("a");
    let a = g.join_new(30_000, &meta_a)?;
    ensure!(a.generation == 1, "first generation is {}", a.generation);
    ensure!(a.response.leader.as_str() == a.member_id, "the only member leads");
    ensure!(a.response.protocol_name.as_ref().map(|p| p.as_str()) == Some("range"));
    let listed: Vec<(String, Bytes)> = a
        .response
        .members
        .iter()
        .map(|m| (m.member_id.to_string(), m.metadata.clone()))
        .collect();
    ensure!(
        listed == vec![(a.member_id.clone(), Bytes::from(meta_a.clone()))],
        "the leader's JoinGroup lists the members with their metadata: {listed:?}"
    );

    // Joined but not synced (CompletingRebalance): commits wait for the assignment.
    let early = g.commit(a.generation, &a.member_id, &[(0, 1, "")])?;
    ensure!(
        early == vec![REBALANCE_IN_PROGRESS],
        "OffsetCommit before SyncGroup: {early:?}"
    );

    let assignment = assignment_bytes(&[0, 1], b"\x00\x01opaque user data \xff");
    let (code, got) = g.sync(a.generation, &a.member_id, None, &[(&a.member_id, &assignment)])?;
    ensure!(
        code == NONE && got == assignment,
        "SyncGroup: error {code}, assignment {got:?}"
    );

    ensure!(g.heartbeat(a.generation, &a.member_id, None)? == NONE);
    let stale = g.heartbeat(a.generation - 1, &a.member_id, None)?;
    ensure!(stale == ILLEGAL_GENERATION, "Heartbeat with an old generation: {stale}");
    let unknown = g.heartbeat(a.generation, "no-such-member", None)?;
    ensure!(
        unknown == UNKNOWN_MEMBER_ID,
        "Heartbeat of an unknown member: {unknown}"
    );

    let ok = g.commit(a.generation, &a.member_id, &[(0, 42, "meta-0"), (1, 7, "")])?;
    ensure!(ok == vec![NONE, NONE], "OffsetCommit: {ok:?}");
    let stale = g.commit(a.generation + 5, &a.member_id, &[(0, 50, "")])?;
    ensure!(
        stale == vec![ILLEGAL_GENERATION],
        "OffsetCommit with a wrong generation: {stale:?}"
    );
    let unknown = g.commit(a.generation, "no-such-member", &[(0, 50, "")])?;
    ensure!(
        unknown == vec![UNKNOWN_MEMBER_ID],
        "OffsetCommit of an unknown member: {unknown:?}"
    );
    // A non-member commit (generation -1, no member id: what admin tools send) is only for
    // groups without members.
    let outsider = g.commit(-1, "", &[(0, 99, "")])?;
    ensure!(
        outsider == vec![UNKNOWN_MEMBER_ID],
        "OffsetCommit of a non-member to an active group: {outsider:?}"
    );
    // The members subscribe to the topic (their JoinGroup metadata says so): its offsets stay.
    let (code, per_partition) = g.delete_offsets(&[1])?;
    ensure!(
        code == NONE && per_partition == vec![GROUP_SUBSCRIBED_TO_TOPIC],
        "OffsetDelete of a subscribed topic: {code} {per_partition:?}"
    );
    let (code, fetched) = g.fetch()?;
    ensure!(
        code == NONE && fetched == vec![(42, Some("meta-0".into()), NONE), (7, Some(String::new()), NONE)],
        "OffsetFetch after committing 42 \"meta-0\" and 7 \"\": error {code}, {fetched:?}"
    );

    let d = g.describe()?;
    ensure!(
        (
            d.error_code,
            d.group_state.as_str(),
            d.protocol_type.as_str(),
            d.protocol_data.as_str()
        ) == (NONE, "Stable", "consumer", "range"),
        "DescribeGroups: {d:?}"
    );
    let m = d.members.first().context("no member described")?;
    ensure!(
        d.members.len() == 1
            && m.member_id.as_str() == a.member_id
            && m.client_id.as_str() == "sluice-it"
            && m.member_metadata == meta_a
            && m.member_assignment == assignment,
        "DescribeGroups member: {m:?}"
    );
    let listed = kafka_client::call(g.addr, &ListGroupsRequest::default(), 3, TIMEOUT)?;
    ensure!(
        listed
            .groups
            .iter()
            .any(|l| l.group_id.0.as_str() == "proto" && l.protocol_type.as_str() == "consumer"),
        "ListGroups: {:?}",
        listed.groups
    );

    // A second member joins: its JoinGroup waits for the first to rejoin, which the first
    // learns from its heartbeat.
    let addr = g.addr;
    let meta_b = subscription("b");
    let b_join = std::thread::spawn(move || {
        Group {
            addr,
            id: "proto".into(),
        }
        .join_new(30_000, &meta_b)
    });
    let signalled = wait_until(
        TIMEOUT,
        "REBALANCE_IN_PROGRESS on the first member's heartbeat",
        || match g.heartbeat(a.generation, &a.member_id, None) {
            Ok(REBALANCE_IN_PROGRESS) => Some(()),
            _ => {
                std::thread::sleep(Duration::from_millis(100));
                None
            }
        },
    );
    signalled?;
    // While the group prepares the rebalance, a member of the current generation may still commit.
    let during = g.commit(a.generation, &a.member_id, &[(0, 43, "")])?;
    ensure!(
        during == vec![NONE],
        "OffsetCommit while preparing a rebalance: {during:?}"
    );
    let a2 = g.join(&a.member_id, None, 30_000, &meta_a)?;
    let b = b_join.join().expect("join thread")?;
    ensure!(
        a2.error_code == NONE && a2.generation_id == a.generation + 1 && b.generation == a2.generation_id,
        "rejoin: first member error {} generation {}, second member generation {}",
        a2.error_code,
        a2.generation_id,
        b.generation
    );
    let (leader, follower) = if a2.leader.as_str() == a.member_id {
        (&a2, &b.response)
    } else {
        (&b.response, &a2)
    };
    let mut leader_sees: Vec<String> = leader.members.iter().map(|m| m.member_id.to_string()).collect();
    leader_sees.sort();
    let mut both = vec![a.member_id.clone(), b.member_id.clone()];
    both.sort();
    ensure!(
        leader_sees == both && follower.members.is_empty() && follower.leader == leader.leader,
        "generation 2: the leader sees {leader_sees:?} (want {both:?}); the follower sees {} members",
        follower.members.len()
    );
    let deleted = g.delete()?;
    ensure!(deleted == NON_EMPTY_GROUP, "DeleteGroups with members: {deleted}");

    // Both leave: the group is Empty, its offsets stay; then it can be deleted, offsets and all.
    let (code, per_member) = g.leave(&[(&a.member_id, None), (&b.member_id, None)])?;
    ensure!(
        code == NONE && per_member == vec![NONE, NONE],
        "LeaveGroup: {code} {per_member:?}"
    );
    let d = g.describe()?;
    ensure!(
        d.group_state.as_str() == "Empty" && d.members.is_empty(),
        "after LeaveGroup: {d:?}"
    );
    let (_, fetched) = g.fetch()?;
    ensure!(
        fetched[0].0 == 43 && fetched[1].0 == 7,
        "offsets after everyone left: {fetched:?}"
    );
    let (code, per_partition) = g.delete_offsets(&[1])?;
    ensure!(
        code == NONE && per_partition == vec![NONE],
        "OffsetDelete in an empty group: {code} {per_partition:?}"
    );
    let (_, fetched) = g.fetch()?;
    ensure!(
        fetched[0].0 == 43 && fetched[1].0 == -1,
        "offsets after OffsetDelete of partition 1: {fetched:?}"
    );
    ensure!(g.delete()? == NONE, "DeleteGroups of the empty group failed");
    let (_, fetched) = g.fetch()?;
    ensure!(
        fetched.iter().all(|(o, _, e)| *o == -1 && *e == NONE),
        "OffsetFetch after DeleteGroups: {fetched:?}"
    );
    let d = g.describe()?;
    ensure!(
        (d.error_code, d.group_state.as_str(), d.members.len()) == (NONE, "Dead", 0),
        "DescribeGroups of a deleted group: {d:?}"
    );
    Ok(())
}

#[test]
fn a_member_that_does_not_rejoin_within_the_rebalance_timeout_is_removed() -> Result<()> {
    let (_node, g) = start("rebalance-timeout")?;
    let a = g.join_new_with(30_000, 3_000, &subscription("a"))?;
    let (code, _) = g.sync(
        a.generation,
        &a.member_id,
        None,
        &[(&a.member_id, &assignment_bytes(&[0, 1], b""))],
    )?;
    ensure!(code == NONE, "SyncGroup: {code}");
    // B joins; A (alive as far as its session goes) never rejoins. After the rebalance timeout
    // (3 s) the join completes without A, and A is no longer a member.
    let started = Instant::now();
    let b = g.join_new_with(30_000, 3_000, &subscription("b"))?;
    let waited = started.elapsed();
    ensure!(
        b.generation == a.generation + 1
            && b.response.leader.as_str() == b.member_id
            && b.response.members.iter().map(|m| m.member_id.to_string()).collect::<Vec<_>>() == vec![b.member_id.clone()],
        "the join completed as generation {} led by {:?} with members {:?}; expected generation {} with only the new member",
        b.generation,
        b.response.leader,
        b.response.members.iter().map(|m| m.member_id.to_string()).collect::<Vec<_>>(),
        a.generation + 1
    );
    ensure!(
        waited >= Duration::from_millis(2_500) && waited < Duration::from_secs(15),
        "the join completed after {waited:?}; the rebalance timeout is 3 s"
    );
    let hb = g.heartbeat(a.generation, &a.member_id, None)?;
    ensure!(
        hb == UNKNOWN_MEMBER_ID,
        "Heartbeat of the member dropped by the rebalance: {hb}"
    );
    Ok(())
}

#[test]
fn a_restarted_static_member_keeps_its_generation_and_its_old_member_id_is_fenced() -> Result<()> {
    let (_node, g) = start("static")?;
    let instance = Some("instance-1");
    // A static member needs no MEMBER_ID_REQUIRED round.
    let first = g.join("", instance, 30_000, &subscription("s"))?;
    ensure!(
        first.error_code == NONE && !first.member_id.is_empty() && first.generation_id == 1,
        "static JoinGroup: error {} member {:?} generation {}",
        first.error_code,
        first.member_id,
        first.generation_id
    );
    let old_id = first.member_id.to_string();
    let assigned = assignment_bytes(&[0, 1], b"");
    let (code, _) = g.sync(1, &old_id, instance, &[(&old_id, &assigned)])?;
    ensure!(code == NONE, "SyncGroup: {code}");

    // The same instance restarts (new process, no member id): same generation, a new member
    // id, no rebalance; its assignment is still there.
    let again = g.join("", instance, 30_000, &subscription("s"))?;
    ensure!(
        again.error_code == NONE && again.generation_id == 1 && again.member_id.as_str() != old_id,
        "static rejoin: error {} generation {} member {:?} (old {old_id})",
        again.error_code,
        again.generation_id,
        again.member_id
    );
    let new_id = again.member_id.to_string();
    let (code, assignment) = g.sync(1, &new_id, instance, &[])?;
    ensure!(
        code == NONE && assignment == assigned,
        "SyncGroup after rejoin: {code} {assignment:?}"
    );
    ensure!(g.heartbeat(1, &new_id, instance)? == NONE);
    let fenced = g.heartbeat(1, &old_id, instance)?;
    ensure!(
        fenced == FENCED_INSTANCE_ID,
        "Heartbeat with the replaced member id: {fenced}"
    );
    let d = g.describe()?;
    ensure!(
        d.group_state.as_str() == "Stable"
            && members_of(&d) == vec![new_id.clone()]
            && d.members[0].group_instance_id.as_ref().map(|i| i.as_str()) == instance,
        "DescribeGroups: {d:?}"
    );
    Ok(())
}

/// A replaced static member is answered only once its new member id is stored (Kafka's
/// order): a coordinator killed between the JoinGroup and that write never told the member an
/// id the restarted coordinator does not know, so the member is not fenced when it rejoins.
/// The failpoint holds the write open for 3 s so the kill lands inside that window.
#[test]
fn a_coordinator_killed_before_a_static_member_replacement_is_stored_answers_nothing_and_fences_no_one() -> Result<()> {
    let mut opts = NodeOptions::default();
    // Not a secret; the harness's way to set a variable for the broker process only.
    opts.secret_env
        .push(("SLUICE_FAILPOINTS".to_string(), "stall_static_member_store".to_string()));
    let (mut node, g) = start_with("static-window", opts)?;
    let instance = Some("instance-1");
    let first = g.join("", instance, 60_000, &subscription("w"))?;
    ensure!(first.error_code == NONE, "static JoinGroup: error {}", first.error_code);
    let old_id = first.member_id.to_string();
    let assigned = assignment_bytes(&[0, 1], b"");
    let (code, _) = g.sync(first.generation_id, &old_id, instance, &[(&old_id, &assigned)])?;
    ensure!(code == NONE, "SyncGroup: {code}");

    // The same instance restarts; its JoinGroup replaces the member, whose write is held.
    let rejoin = {
        let g = Group {
            addr: g.addr,
            id: g.id.clone(),
        };
        std::thread::spawn(move || g.join("", instance, 60_000, &subscription("w")))
    };
    let log_path = node.log_path().to_path_buf();
    wait_until(TIMEOUT, "the coordinator to hold the replacement's write", || {
        std::fs::read_to_string(&log_path)
            .ok()
            .filter(|log| log.contains("failpoint stall_static_member_store"))
    })?;
    node.kill()?;
    let answered = rejoin.join().expect("the rejoining thread panicked");
    ensure!(
        answered.is_err(),
        "the coordinator answered the replacing JoinGroup before storing it: {answered:?}"
    );

    node.restart()?;
    // The restarted coordinator loads the group as stored: the old member id, no replacement.
    let d = wait_until(TIMEOUT, "the restarted coordinator to answer DescribeGroups", || {
        g.describe().ok().filter(|d| d.error_code == NONE)
    })?;
    ensure!(
        members_of(&d) == vec![old_id.clone()],
        "members after the restart: {:?}, expected only the stored {old_id}",
        members_of(&d)
    );
    // The member's retry replaces it for real: answered once stored, in the same generation,
    // with its assignment, and its new id is not fenced.
    let again = wait_until(TIMEOUT, "the rejoin to be answered", || {
        g.join("", instance, 60_000, &subscription("w")).ok().filter(|r| r.error_code == NONE)
    })?;
    let new_id = again.member_id.to_string();
    ensure!(
        again.generation_id == first.generation_id && new_id != old_id,
        "static rejoin after the restart: generation {} member {new_id:?} (first {} {old_id:?})",
        again.generation_id,
        first.generation_id
    );
    let (code, assignment) = g.sync(again.generation_id, &new_id, instance, &[])?;
    ensure!(
        code == NONE && assignment == assigned,
        "SyncGroup after the rejoin: {code} {assignment:?}"
    );
    let hb = g.heartbeat(again.generation_id, &new_id, instance)?;
    ensure!(hb == NONE, "Heartbeat of the rejoined member: {hb}");
    let fenced = g.heartbeat(first.generation_id, &old_id, instance)?;
    ensure!(fenced == FENCED_INSTANCE_ID, "Heartbeat with the replaced member id: {fenced}");
    Ok(())
}

#[test]
fn commits_and_the_group_survive_a_broker_sigkill() -> Result<()> {
    let (mut node, g) = start("durable")?;
    let a = g.join_new(60_000, &subscription("d"))?;
    let (code, _) = g.sync(
        a.generation,
        &a.member_id,
        None,
        &[(&a.member_id, &assignment_bytes(&[0, 1], b""))],
    )?;
    ensure!(code == NONE, "SyncGroup: {code}");
    let ok = g.commit(a.generation, &a.member_id, &[(0, 1234, "before-kill"), (1, 5, "")])?;
    ensure!(ok == vec![NONE, NONE], "OffsetCommit: {ok:?}");

    node.kill()?;
    node.restart()?;
    let restarted = Instant::now();
    // The coordinator reloads the group from __consumer_offsets: the acknowledged offsets and
    // the member (its session has not expired) are back.
    let fetched = wait_until(TIMEOUT, "OffsetFetch to answer after the restart", || {
        let (code, f) = g.fetch().ok()?;
        (code == NONE && f.iter().all(|(_, _, e)| *e == NONE)).then_some(f)
    })?;
    ensure!(
        fetched == vec![(1234, Some("before-kill".into()), NONE), (5, Some(String::new()), NONE)],
        "offsets after the broker restart: {fetched:?}"
    );
    let hb = g.heartbeat(a.generation, &a.member_id, None)?;
    ensure!(
        hb == NONE,
        "Heartbeat of the member after the restart ({:?} later): {hb}",
        restarted.elapsed()
    );
    let d = g.describe()?;
    ensure!(
        d.group_state.as_str() == "Stable" && members_of(&d) == vec![a.member_id.clone()],
        "DescribeGroups after the restart: {d:?}"
    );
    Ok(())
}

#[test]
fn joins_are_validated_and_followers_get_their_assignment_once_the_leader_syncs() -> Result<()> {
    let (_node, g) = start("validate")?;
    let sub = subscription("v");
    let bad_session = g.join("", None, 1_000, &sub)?;
    ensure!(
        bad_session.error_code == INVALID_SESSION_TIMEOUT,
        "JoinGroup with session.timeout.ms 1000 (below group.min.session.timeout.ms 6000): {}",
        bad_session.error_code
    );
    let no_id = Group {
        addr: g.addr,
        id: String::new(),
    }
    .join("", None, 30_000, &sub)?;
    ensure!(
        no_id.error_code == INVALID_GROUP_ID,
        "JoinGroup with an empty group id: {}",
        no_id.error_code
    );

    let a = g.join_new(30_000, &sub)?;
    let (code, _) = g.sync(
        a.generation,
        &a.member_id,
        None,
        &[(&a.member_id, &assignment_bytes(&[0, 1], b""))],
    )?;
    ensure!(code == NONE, "SyncGroup: {code}");
    // A member with no protocol in common with the group, or of another protocol type.
    let other = g.join_protocol("", None, 30_000, 20_000, "consumer", "roundrobin", &sub)?;
    ensure!(
        other.error_code == INCONSISTENT_GROUP_PROTOCOL,
        "JoinGroup with only a protocol the group does not support: {}",
        other.error_code
    );
    let connect = g.join_protocol("", None, 30_000, 20_000, "connect", "range", &sub)?;
    ensure!(
        connect.error_code == INCONSISTENT_GROUP_PROTOCOL,
        "JoinGroup with another protocol type: {}",
        connect.error_code
    );
    ensure!(
        g.heartbeat(a.generation, &a.member_id, None)? == NONE,
        "the group was disturbed by the refused joins"
    );

    // Generation 2 with a second member; the follower's SyncGroup waits for the leader's.
    let addr = g.addr;
    let b_join = std::thread::spawn(move || {
        Group {
            addr,
            id: "validate".into(),
        }
        .join_new(30_000, &subscription("w"))
    });
    wait_until(TIMEOUT, "REBALANCE_IN_PROGRESS", || {
        (g.heartbeat(a.generation, &a.member_id, None).ok()? == REBALANCE_IN_PROGRESS).then_some(())
    })?;
    let a2 = g.join(&a.member_id, None, 30_000, &sub)?;
    let b = b_join.join().expect("join thread")?;
    let generation = a2.generation_id;
    let (leader, follower) = if a2.leader.as_str() == a.member_id {
        (a.member_id.clone(), b.member_id.clone())
    } else {
        (b.member_id.clone(), a.member_id.clone())
    };
    let stale = g.sync(generation - 1, &follower, None, &[])?.0;
    ensure!(
        stale == ILLEGAL_GENERATION,
        "SyncGroup with the previous generation: {stale}"
    );
    let follower_sync = {
        let (addr, follower) = (g.addr, follower.clone());
        std::thread::spawn(move || {
            Group {
                addr,
                id: "validate".into(),
            }
            .sync(generation, &follower, None, &[])
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    ensure!(
        !follower_sync.is_finished(),
        "the follower's SyncGroup returned before the leader sent the assignments"
    );
    let to_leader = assignment_bytes(&[0], b"leader");
    let to_follower = assignment_bytes(&[1], b"follower \x00\xff");
    let (code, got) = g.sync(
        generation,
        &leader,
        None,
        &[(&leader, &to_leader), (&follower, &to_follower)],
    )?;
    ensure!(
        code == NONE && got == to_leader,
        "the leader's SyncGroup: {code} {got:?}"
    );
    let (code, got) = follower_sync.join().expect("sync thread")?;
    ensure!(
        code == NONE && got == to_follower,
        "the follower's SyncGroup: {code}, assignment {got:?}"
    );
    Ok(())
}

#[test]
fn commits_to_unknown_partitions_are_refused_and_list_groups_filters_by_state() -> Result<()> {
    let (_node, g) = start("listed-stable")?;
    let empty = Group {
        addr: g.addr,
        id: "listed-empty".into(),
    };
    // Its offsets partition may be another one, still loading (COORDINATOR_LOAD_IN_PROGRESS).
    wait_until(
        TIMEOUT,
        "the coordinator to answer DescribeGroups for listed-empty",
        || empty.describe().ok().filter(|d| d.error_code == NONE),
    )?;
    // A group with offsets only (commits from a non-member): Empty.
    let codes = empty.commit(-1, "", &[(0, 3, "")])?;
    ensure!(codes == vec![NONE], "non-member OffsetCommit to a new group: {codes:?}");
    let unknown_topic = empty.commit_to("no-such-topic", -1, "", &[(0, 3, "")])?;
    ensure!(
        unknown_topic == vec![UNKNOWN_TOPIC_OR_PARTITION],
        "OffsetCommit for a topic that does not exist: {unknown_topic:?}"
    );
    let unknown_partition = empty.commit(-1, "", &[(7, 3, "")])?;
    ensure!(
        unknown_partition == vec![UNKNOWN_TOPIC_OR_PARTITION],
        "OffsetCommit for partition 7 of a 2-partition topic: {unknown_partition:?}"
    );
    let a = g.join_new(30_000, &subscription("l"))?;
    let (code, _) = g.sync(
        a.generation,
        &a.member_id,
        None,
        &[(&a.member_id, &assignment_bytes(&[0, 1], b""))],
    )?;
    ensure!(code == NONE, "SyncGroup: {code}");

    let listed = |states: &[&str]| -> Result<Vec<(String, String)>> {
        let request = ListGroupsRequest::default().with_states_filter(states.iter().map(|st| s(st)).collect());
        let r = kafka_client::call(g.addr, &request, 4, TIMEOUT).context("ListGroups")?;
        ensure!(r.error_code == NONE, "ListGroups: error {}", r.error_code);
        let mut groups: Vec<(String, String)> = r
            .groups
            .iter()
            .map(|l| (l.group_id.0.to_string(), l.group_state.to_string()))
            .collect();
        groups.sort();
        Ok(groups)
    };
    let all = listed(&[])?;
    ensure!(
        all == vec![
            ("listed-empty".to_string(), "Empty".to_string()),
            ("listed-stable".to_string(), "Stable".to_string())
        ],
        "ListGroups v4 without a filter: {all:?}"
    );
    let stable = listed(&["Stable"])?;
    ensure!(
        stable == vec![("listed-stable".to_string(), "Stable".to_string())],
        "ListGroups Stable: {stable:?}"
    );
    let empty_listed = listed(&["Empty"])?;
    ensure!(
        empty_listed == vec![("listed-empty".to_string(), "Empty".to_string())],
        "ListGroups Empty: {empty_listed:?}"
    );
    Ok(())
}

#[test]
fn deleted_groups_and_offsets_stay_deleted_after_a_broker_sigkill() -> Result<()> {
    let (mut node, g) = start("deleted")?;
    let kept = Group {
        addr: g.addr,
        id: "kept".into(),
    };
    for group in [&g, &kept] {
        let codes = group.commit(-1, "", &[(0, 11, "a"), (1, 22, "b")])?;
        ensure!(codes == vec![NONE, NONE], "OffsetCommit for {}: {codes:?}", group.id);
    }
    ensure!(g.delete()? == NONE, "DeleteGroups failed");
    let (code, per_partition) = kept.delete_offsets(&[1])?;
    ensure!(
        code == NONE && per_partition == vec![NONE],
        "OffsetDelete: {code} {per_partition:?}"
    );

    node.kill()?;
    node.restart()?;
    // Reloaded from __consumer_offsets: the tombstones win over the commits before them.
    let fetched = wait_until(TIMEOUT, "OffsetFetch to answer after the restart", || {
        let (code, f) = kept.fetch().ok()?;
        (code == NONE && f.iter().all(|(_, _, e)| *e == NONE)).then_some(f)
    })?;
    ensure!(
        (fetched[0].0, fetched[0].1.as_deref(), fetched[1].0) == (11, Some("a"), -1),
        "kept group after the restart (partition 1's offset was deleted): {fetched:?}"
    );
    let (_, fetched) = g.fetch()?;
    ensure!(
        fetched.iter().all(|(o, _, e)| *o == -1 && *e == NONE),
        "the deleted group's offsets came back after the restart: {fetched:?}"
    );
    let d = g.describe()?;
    ensure!(
        d.group_state.as_str() == "Dead",
        "the deleted group after the restart: {d:?}"
    );
    let listed = kafka_client::call(g.addr, &ListGroupsRequest::default(), 3, TIMEOUT)?;
    let names: Vec<String> = listed.groups.iter().map(|l| l.group_id.0.to_string()).collect();
    ensure!(
        names == vec!["kept".to_string()],
        "ListGroups after the restart: {names:?}"
    );
    Ok(())
}

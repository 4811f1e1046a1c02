//! The classic group protocol at the wire level, with typed requests, against a real broker:
//! the exact error codes clients act on (a stale generation, an unknown member, a wrong
//! coordinator, oversized metadata) and that a misbehaving member disturbs no other member.

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
use kafka_protocol::messages::offset_fetch_request::{OffsetFetchRequestGroup, OffsetFetchRequestTopics};
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    DeleteGroupsRequest, DescribeGroupsRequest, FindCoordinatorRequest, GroupId, HeartbeatRequest, JoinGroupRequest,
    JoinGroupResponse, LeaveGroupRequest, OffsetCommitRequest, OffsetFetchRequest, SyncGroupRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use sluice_integration_tests::{kafka_client, Cluster, NodeOptions, SluiceNode};
use std::net::SocketAddr;

const TIMEOUT: Duration = Duration::from_secs(20);

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn code(e: ResponseError) -> i16 {
    e.code()
}

/// JoinGroup v9 for `group` as `member_id` ("" for a first join) with `metadata`.
fn join(addr: SocketAddr, group: &str, member_id: &str, metadata: Bytes, session_ms: i32) -> Result<JoinGroupResponse> {
    let request = JoinGroupRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_session_timeout_ms(session_ms)
        .with_rebalance_timeout_ms(10_000)
        .with_member_id(s(member_id))
        .with_protocol_type(s("consumer"))
        .with_protocols(vec![JoinGroupRequestProtocol::default()
            .with_name(s("range"))
            .with_metadata(metadata)]);
    kafka_client::call(addr, &request, 9, TIMEOUT)
}

/// First join (MEMBER_ID_REQUIRED) and the rejoin with the id it hands out.
fn join_new_member(addr: SocketAddr, group: &str) -> Result<JoinGroupResponse> {
    let first = join_when_loaded(addr, group)?;
    ensure!(
        first.error_code == code(ResponseError::MemberIdRequired),
        "a first JoinGroup v9 must get MEMBER_ID_REQUIRED, got {}",
        first.error_code
    );
    ensure!(
        !first.member_id.is_empty(),
        "MEMBER_ID_REQUIRED carries the member id to use"
    );
    join(addr, group, &first.member_id, Bytes::from_static(b"sub"), 10_000)
}

fn sync(addr: SocketAddr, group: &str, generation: i32, member_id: &str, assignment: &[u8]) -> Result<(i16, Bytes)> {
    let request = SyncGroupRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_generation_id(generation)
        .with_member_id(s(member_id))
        .with_protocol_type(Some(s("consumer")))
        .with_protocol_name(Some(s("range")))
        .with_assignments(vec![SyncGroupRequestAssignment::default()
            .with_member_id(s(member_id))
            .with_assignment(Bytes::copy_from_slice(assignment))]);
    let response = kafka_client::call(addr, &request, 5, TIMEOUT)?;
    Ok((response.error_code, response.assignment))
}

fn heartbeat(addr: SocketAddr, group: &str, generation: i32, member_id: &str) -> Result<i16> {
    let request = HeartbeatRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_generation_id(generation)
        .with_member_id(s(member_id));
    Ok(kafka_client::call(addr, &request, 4, TIMEOUT)?.error_code)
}

fn commit(addr: SocketAddr, group: &str, generation: i32, member_id: &str, offset: i64, metadata: &str) -> Result<i16> {
    let partition = OffsetCommitRequestPartition::default()
        .with_partition_index(0)
        .with_committed_offset(offset)
        .with_committed_leader_epoch(-1)
        .with_committed_metadata(Some(s(metadata)));
    let request = OffsetCommitRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_generation_id_or_member_epoch(generation)
        .with_member_id(s(member_id))
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(TopicName(s("orders")))
            .with_partitions(vec![partition])]);
    let response = kafka_client::call(addr, &request, 8, TIMEOUT)?;
    Ok(response.topics[0].partitions[0].error_code)
}

/// OffsetFetch v8 of partition 0 of `orders`: (group error, offset, metadata).
fn fetch_offset(addr: SocketAddr, group: &str) -> Result<(i16, i64, String)> {
    let request = OffsetFetchRequest::default().with_groups(vec![OffsetFetchRequestGroup::default()
        .with_group_id(GroupId(s(group)))
        .with_topics(Some(vec![OffsetFetchRequestTopics::default()
            .with_name(TopicName(s("orders")))
            .with_partition_indexes(vec![0])]))]);
    let response = kafka_client::call(addr, &request, 8, TIMEOUT)?;
    let g = response.groups.first().context("no group in OffsetFetch response")?;
    if g.error_code != 0 {
        return Ok((g.error_code, -1, String::new()));
    }
    let p = &g.topics.first().context("no topic")?.partitions[0];
    Ok((
        p.error_code,
        p.committed_offset,
        p.metadata.as_deref().unwrap_or_default().to_string(),
    ))
}

/// Asks `addr` for the group's coordinator until one is named (the first FindCoordinator
/// creates `__consumer_offsets`; its leaders appear shortly after), as clients do.
fn find_coordinator(addr: SocketAddr, group: &str) -> Result<i32> {
    let find = FindCoordinatorRequest::default()
        .with_key_type(0)
        .with_coordinator_keys(vec![s(group)]);
    let deadline = std::time::Instant::now() + TIMEOUT;
    loop {
        let response = kafka_client::call(addr, &find, 4, TIMEOUT)?;
        let c = &response.coordinators[0];
        if c.error_code == 0 {
            return Ok(c.node_id.0);
        }
        ensure!(
            std::time::Instant::now() < deadline,
            "no coordinator for {group}: {c:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A first join, repeated while the coordinator has not yet applied its leadership of the
/// group's partition (NOT_COORDINATOR) or is still loading it, as clients retry.
fn join_when_loaded(addr: SocketAddr, group: &str) -> Result<JoinGroupResponse> {
    let deadline = std::time::Instant::now() + TIMEOUT;
    let retriable = [ResponseError::CoordinatorLoadInProgress, ResponseError::NotCoordinator].map(code);
    loop {
        let r = join(addr, group, "", Bytes::from_static(b"sub"), 10_000)?;
        if !retriable.contains(&r.error_code) {
            return Ok(r);
        }
        ensure!(
            std::time::Instant::now() < deadline,
            "the coordinator never finished loading"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_joins_syncs_commits_and_misbehaving_requests_get_kafkas_error_codes() -> Result<()> {
    let mut node = SluiceNode::start(NodeOptions::default().set("group.initial.rebalance.delay.ms", "0"))?;
    let addr = node.addr();
    ensure!(
        kafka_client::create_topic(addr, "orders", 1, TIMEOUT)? == 0,
        "create orders"
    );
    let group = "wire-group";
    ensure!(
        find_coordinator(addr, group)? == 1,
        "the only node coordinates every group"
    );

    let joined = join_new_member(addr, group)?;
    ensure!(
        joined.error_code == 0,
        "rejoin with the handed-out id: error {}",
        joined.error_code
    );
    ensure!(
        joined.generation_id == 1,
        "first generation is 1, got {}",
        joined.generation_id
    );
    ensure!(joined.leader == joined.member_id, "the only member leads");
    ensure!(
        joined.members.len() == 1 && joined.members[0].metadata == Bytes::from_static(b"sub"),
        "the leader gets every member's metadata: {:?}",
        joined.members
    );
    let (member, generation) = (joined.member_id.to_string(), joined.generation_id);

    // The assignment comes back byte for byte.
    let (error, assignment) = sync(addr, group, generation, &member, b"\x00\x01assignment-bytes")?;
    ensure!(error == 0, "SyncGroup error {error}");
    ensure!(
        &assignment[..] == b"\x00\x01assignment-bytes",
        "assignment changed: {assignment:?}"
    );

    ensure!(
        heartbeat(addr, group, generation, &member)? == 0,
        "heartbeat of a stable member"
    );
    ensure!(
        heartbeat(addr, group, generation - 1, &member)? == code(ResponseError::IllegalGeneration),
        "a stale generation is ILLEGAL_GENERATION"
    );
    ensure!(
        heartbeat(addr, group, generation, "nobody")? == code(ResponseError::UnknownMemberId),
        "an unknown member is UNKNOWN_MEMBER_ID"
    );

    // Commits: a stale generation is refused and changes nothing; metadata is returned as stored.
    ensure!(commit(addr, group, generation, &member, 42, "meta-42")? == 0, "commit");
    ensure!(
        commit(addr, group, generation + 5, &member, 7, "")? == code(ResponseError::IllegalGeneration),
        "commit with a generation from the future is ILLEGAL_GENERATION"
    );
    let too_large = "x".repeat(5000);
    ensure!(
        commit(addr, group, generation, &member, 8, &too_large)? == code(ResponseError::OffsetMetadataTooLarge),
        "metadata over offset.metadata.max.bytes (4096) is OFFSET_METADATA_TOO_LARGE"
    );
    ensure!(
        fetch_offset(addr, group)? == (0, 42, "meta-42".to_string()),
        "OffsetFetch returns the acknowledged commit only: {:?}",
        fetch_offset(addr, group)?
    );

    // Bad joins: the member already in the group is not disturbed by any of them.
    let huge = Bytes::from(vec![7u8; 2 * 1024 * 1024]);
    let response = join(addr, group, "", huge, 10_000)?;
    ensure!(
        response.error_code == code(ResponseError::GroupMaxSizeReached),
        "2 MB of member metadata (the group could never be stored) is GROUP_MAX_SIZE_REACHED, got {}",
        response.error_code
    );
    let response = join(addr, group, "", Bytes::from_static(b"sub"), 1_000)?;
    ensure!(
        response.error_code == code(ResponseError::InvalidSessionTimeout),
        "a session timeout below group.min.session.timeout.ms is INVALID_SESSION_TIMEOUT, got {}",
        response.error_code
    );
    let response = join(addr, "", "", Bytes::from_static(b"sub"), 10_000)?;
    ensure!(
        response.error_code == code(ResponseError::InvalidGroupId),
        "an empty group id is INVALID_GROUP_ID, got {}",
        response.error_code
    );
    let response = join(addr, group, "made-up-member", Bytes::from_static(b"sub"), 10_000)?;
    ensure!(
        response.error_code == code(ResponseError::UnknownMemberId),
        "a made-up member id is UNKNOWN_MEMBER_ID, got {}",
        response.error_code
    );
    ensure!(
        heartbeat(addr, group, generation, &member)? == 0,
        "the existing member is still stable"
    );

    // A group with members cannot be deleted; after the member leaves it can, with its offsets.
    let delete = || -> Result<i16> {
        let request = DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s(group))]);
        Ok(kafka_client::call(addr, &request, 2, TIMEOUT)?.results[0].error_code)
    };
    ensure!(
        delete()? == code(ResponseError::NonEmptyGroup),
        "deleting a live group is NON_EMPTY_GROUP"
    );
    let leave = LeaveGroupRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_members(vec![MemberIdentity::default().with_member_id(s(&member))]);
    let left = kafka_client::call(addr, &leave, 5, TIMEOUT)?;
    ensure!(
        left.error_code == 0 && left.members[0].error_code == 0,
        "LeaveGroup: {left:?}"
    );
    ensure!(
        heartbeat(addr, group, generation, &member)? == code(ResponseError::UnknownMemberId),
        "a member that left is unknown"
    );
    ensure!(delete()? == 0, "an empty group is deleted");
    ensure!(
        delete()? == code(ResponseError::GroupIdNotFound),
        "a deleted group is not found"
    );
    ensure!(fetch_offset(addr, group)?.1 == -1, "a deleted group's offsets are gone");

    // DescribeGroups of an unknown group: "Dead" before v6, GROUP_ID_NOT_FOUND from v6 (KIP-1043).
    let describe = DescribeGroupsRequest::default().with_groups(vec![GroupId(s("never-seen"))]);
    let v5 = kafka_client::call(addr, &describe, 5, TIMEOUT)?;
    ensure!(
        v5.groups[0].error_code == 0 && v5.groups[0].group_state.as_str() == "Dead",
        "v5: {:?}",
        v5.groups[0]
    );
    let v6 = kafka_client::call(addr, &describe, 6, TIMEOUT)?;
    ensure!(
        v6.groups[0].error_code == code(ResponseError::GroupIdNotFound),
        "v6: {:?}",
        v6.groups[0]
    );
    node.assert_running()
}

#[test]
fn a_share_coordinator_lookup_is_refused_at_once_saying_where_share_state_lives() -> Result<()> {
    let node = SluiceNode::start(NodeOptions::default())?;
    let find = FindCoordinatorRequest::default()
        .with_key_type(2)
        .with_coordinator_keys(vec![s("queue-workers")]);
    let response = kafka_client::call(node.addr(), &find, 6, TIMEOUT)?;
    let c = &response.coordinators[0];
    // INVALID_REQUEST is not retriable: a caller stops instead of retrying
    // COORDINATOR_NOT_AVAILABLE for minutes.
    ensure!(c.error_code == code(ResponseError::InvalidRequest), "{c:?}");
    let message = c.error_message.as_deref().unwrap_or_default();
    ensure!(message.contains("no share coordinator (KIP-932"), "{message}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_of_the_groups_offsets_partition_coordinates_it() -> Result<()> {
    let cluster = Cluster::start(3, &[("group.initial.rebalance.delay.ms", "0")])?;
    let group = "who-coordinates";
    let coordinator = find_coordinator(cluster.addr(1), group)?;
    ensure!(
        cluster.ids().contains(&coordinator),
        "coordinator {coordinator} is a cluster node"
    );
    let other = cluster
        .ids()
        .into_iter()
        .find(|id| *id != coordinator)
        .context("a second node")?;
    let response = join(cluster.addr(other), group, "", Bytes::from_static(b"sub"), 10_000)?;
    ensure!(
        response.error_code == code(ResponseError::NotCoordinator),
        "node {other} does not coordinate {group}: expected NOT_COORDINATOR, got {}",
        response.error_code
    );
    let joined = join_new_member(cluster.addr(coordinator), group)?;
    ensure!(
        joined.error_code == 0,
        "the coordinator admits the member: error {}",
        joined.error_code
    );
    Ok(())
}

//! `sluice group list | describe`: consumer groups, their members and how far each partition
//! lags, as `kafka-consumer-groups.sh --list / --describe` shows them.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use kafka_protocol::messages::{
    DescribeGroupsRequest, FindCoordinatorRequest, GroupId, ListGroupsRequest, OffsetFetchRequest,
};
use kafka_protocol::protocol::StrBytes;
use serde_json::{json, Value};

use super::client::{CliError, Client, LATEST};
use super::output::{Report, Table};
use super::GroupCommand;

const LIST_GROUPS_VERSION: i16 = 4;
const FIND_COORDINATOR_VERSION: i16 = 3;
const DESCRIBE_GROUPS_VERSION: i16 = 5;
/// The last OffsetFetch version with one group per request (v8 batches groups).
const OFFSET_FETCH_VERSION: i16 = 7;

/// FindCoordinator's key type of a consumer group.
const GROUP_KEY: i8 = 0;

pub async fn run(client: &mut Client, command: &GroupCommand) -> Result<Report, CliError> {
    match command {
        GroupCommand::List => list(client).await,
        GroupCommand::Describe { group } => describe(client, group).await,
    }
}

/// Each broker lists the groups it coordinates, so every live broker is asked.
async fn list(client: &mut Client) -> Result<Report, CliError> {
    let mut groups = BTreeMap::new();
    let brokers: Vec<i32> = client.brokers.keys().copied().collect();
    for broker in brokers {
        let response = client
            .call(broker, &ListGroupsRequest::default(), LIST_GROUPS_VERSION)
            .await?;
        client.check(broker, "ListGroups", response.error_code, None)?;
        for g in response.groups {
            groups.insert(
                g.group_id.0.to_string(),
                (g.group_state.to_string(), g.protocol_type.to_string(), broker),
            );
        }
    }
    let mut table = Table::new("groups", &["GROUP", "STATE", "PROTOCOL-TYPE", "COORDINATOR"]);
    for (group, (state, protocol_type, coordinator)) in groups {
        table.push(vec![
            json!(group),
            json!(state),
            json!(protocol_type),
            json!(coordinator),
        ]);
    }
    Ok(Report::default().table(table))
}

/// The broker coordinating `group`.
pub(super) async fn coordinator(client: &mut Client, group: &str) -> Result<i32, CliError> {
    let request = FindCoordinatorRequest::default()
        .with_key(StrBytes::from_string(group.to_owned()))
        .with_key_type(GROUP_KEY);
    let broker = client.any_broker();
    let response = client.call(broker, &request, FIND_COORDINATOR_VERSION).await?;
    client.check(
        broker,
        &format!("FindCoordinator for group {group:?}"),
        response.error_code,
        response.error_message.as_deref(),
    )?;
    Ok(response.node_id.0)
}

/// The group's committed offset of every partition it has one for, from its coordinator.
pub(super) async fn committed_offsets(
    client: &mut Client,
    coordinator: i32,
    group: &str,
) -> Result<BTreeMap<(String, i32), i64>, CliError> {
    let request = OffsetFetchRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.to_owned())))
        .with_topics(None);
    let fetched = client.call(coordinator, &request, OFFSET_FETCH_VERSION).await?;
    client.check(
        coordinator,
        &format!("OffsetFetch for {group:?}"),
        fetched.error_code,
        None,
    )?;
    let mut committed = BTreeMap::new();
    for topic in &fetched.topics {
        for p in topic
            .partitions
            .iter()
            .filter(|p| p.error_code == 0 && p.committed_offset >= 0)
        {
            committed.insert((topic.name.0.to_string(), p.partition_index), p.committed_offset);
        }
    }
    Ok(committed)
}

/// One member of the group and the partitions assigned to it.
struct Member {
    id: String,
    instance_id: Option<String>,
    client_id: String,
    host: String,
    assignment: Vec<(String, Vec<i32>)>,
}

async fn describe(client: &mut Client, group: &str) -> Result<Report, CliError> {
    let coordinator = coordinator(client, group).await?;
    let request = DescribeGroupsRequest::default().with_groups(vec![GroupId(StrBytes::from_string(group.to_owned()))]);
    let response = client.call(coordinator, &request, DESCRIBE_GROUPS_VERSION).await?;
    let described = response
        .groups
        .into_iter()
        .next()
        .ok_or_else(|| CliError::Usage(format!("the coordinator answered nothing about group {group:?}")))?;
    client.check(
        coordinator,
        &format!("DescribeGroups for {group:?}"),
        described.error_code,
        described.error_message.as_deref(),
    )?;
    let consumer = described.protocol_type.as_str() == "consumer";
    let members: Vec<Member> = described
        .members
        .iter()
        .map(|m| Member {
            id: m.member_id.to_string(),
            instance_id: m.group_instance_id.as_ref().map(|i| i.to_string()),
            client_id: m.client_id.to_string(),
            host: m.client_host.to_string(),
            assignment: if consumer {
                crate::group::consumer_assignment(&Bytes::clone(&m.member_assignment))
            } else {
                Vec::new()
            },
        })
        .collect();

    let committed = committed_offsets(client, coordinator, group).await?;

    // Every partition the group commits to or is assigned, with its owner.
    let mut owner: BTreeMap<(String, i32), &Member> = BTreeMap::new();
    for member in &members {
        for (topic, partitions) in &member.assignment {
            for p in partitions {
                owner.insert((topic.clone(), *p), member);
            }
        }
    }
    let partitions: BTreeSet<(String, i32)> = committed.keys().chain(owner.keys()).cloned().collect();
    let topics: BTreeSet<String> = partitions.iter().map(|(t, _)| t.clone()).collect();
    let metadata = client.metadata(Some(topics.into_iter().collect())).await?;
    let leaders: Vec<(String, i32, i32)> = metadata
        .topics
        .iter()
        .filter_map(|t| Some((t.name.as_ref()?.0.to_string(), &t.partitions)))
        .flat_map(|(name, ps)| ps.iter().map(move |p| (name.clone(), p.partition_index, p.leader_id.0)))
        .filter(|(t, p, _)| partitions.contains(&(t.clone(), *p)))
        .collect();
    let ends = client.offsets(&leaders, LATEST).await?;

    let mut offsets = Table::new(
        "offsets",
        &[
            "TOPIC",
            "PARTITION",
            "CURRENT-OFFSET",
            "LOG-END-OFFSET",
            "LAG",
            "CONSUMER-ID",
            "HOST",
            "CLIENT-ID",
        ],
    );
    let mut total_lag = 0;
    for key in &partitions {
        let current = committed.get(key).copied();
        let end = ends.get(key).copied();
        let lag = match (current, end) {
            (Some(c), Some(e)) => Some((e - c).max(0)),
            _ => None,
        };
        total_lag += lag.unwrap_or(0);
        let member = owner.get(key);
        let opt = |v: Option<i64>| v.map_or(Value::Null, |v| json!(v));
        offsets.push(vec![
            json!(key.0),
            json!(key.1),
            opt(current),
            opt(end),
            opt(lag),
            member.map_or(Value::Null, |m| json!(m.id)),
            member.map_or(Value::Null, |m| json!(m.host)),
            member.map_or(Value::Null, |m| json!(m.client_id)),
        ]);
    }
    let mut member_table = Table::new(
        "members",
        &["MEMBER-ID", "INSTANCE-ID", "CLIENT-ID", "HOST", "ASSIGNMENT"],
    );
    for m in &members {
        let assignment: Vec<String> = m
            .assignment
            .iter()
            .flat_map(|(t, ps)| ps.iter().map(move |p| format!("{t}-{p}")))
            .collect();
        member_table.push(vec![
            json!(m.id),
            m.instance_id.as_ref().map_or(Value::Null, |i| json!(i)),
            json!(m.client_id),
            json!(m.host),
            json!(assignment),
        ]);
    }
    Ok(Report::default()
        .field("group", group)
        .field("coordinator", coordinator)
        .field("state", described.group_state.to_string())
        .field("protocol_type", described.protocol_type.to_string())
        .field("assignor", described.protocol_data.to_string())
        .field("total_lag", total_lag)
        .table(member_table)
        .table(offsets))
}

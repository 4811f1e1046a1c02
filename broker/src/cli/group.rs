//! `sluice group list | describe`: consumer groups, their members and how far each partition
//! lags, as `kafka-consumer-groups.sh --list / --describe` shows them.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::describe_groups_response::DescribedGroup;
use kafka_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
use kafka_protocol::messages::{
    DeleteGroupsRequest, DescribeGroupsRequest, FindCoordinatorRequest, GroupId, ListGroupsRequest,
    OffsetCommitRequest, OffsetFetchRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use serde_json::{json, Value};

use super::client::{CliError, Client, EARLIEST, LATEST};
use super::output::{Report, Table};
use super::{GroupCommand, ResetOffsetsArgs};

const LIST_GROUPS_VERSION: i16 = 4;
const FIND_COORDINATOR_VERSION: i16 = 3;
const DESCRIBE_GROUPS_VERSION: i16 = 5;
/// The last OffsetFetch version with one group per request (v8 batches groups).
const OFFSET_FETCH_VERSION: i16 = 7;
const OFFSET_COMMIT_VERSION: i16 = 8;
const DELETE_GROUPS_VERSION: i16 = 2;

/// FindCoordinator's key type of a consumer group.
const GROUP_KEY: i8 = 0;

/// A coordinator still loading its groups, not elected yet or moved (COORDINATOR_LOAD_IN_PROGRESS,
/// COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR): Kafka's clients ask again, and so does this,
/// within the command's `--timeout-ms`. A fresh cluster answers so until `__consumer_offsets`
/// is up.
const COORDINATOR_BUSY: [i16; 3] = [14, 15, 16];
const COORDINATOR_RETRY_BACKOFF: Duration = Duration::from_millis(200);

/// After a busy answer: waits, then finds the group's coordinator anew. `None` once the
/// command's timeout has passed since `started` (the caller then reports the answer).
async fn ask_again(client: &mut Client, group: &str, started: Instant) -> Result<Option<i32>, CliError> {
    if started.elapsed() >= client.timeout() {
        return Ok(None);
    }
    tokio::time::sleep(COORDINATOR_RETRY_BACKOFF).await;
    coordinator(client, group).await.map(Some)
}

pub async fn run(client: &mut Client, command: &GroupCommand) -> Result<Report, CliError> {
    match command {
        GroupCommand::List => list(client).await,
        GroupCommand::Describe { group } => describe(client, group).await,
        GroupCommand::ResetOffsets(args) => reset_offsets(client, args).await,
        GroupCommand::Delete { groups } => delete(client, groups).await,
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
    let started = Instant::now();
    let (broker, response) = loop {
        let broker = client.any_broker();
        let response = client.call(broker, &request, FIND_COORDINATOR_VERSION).await?;
        if !COORDINATOR_BUSY.contains(&response.error_code) || started.elapsed() >= client.timeout() {
            break (broker, response);
        }
        tokio::time::sleep(COORDINATOR_RETRY_BACKOFF).await;
    };
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
    mut coordinator: i32,
    group: &str,
) -> Result<BTreeMap<(String, i32), i64>, CliError> {
    let request = OffsetFetchRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.to_owned())))
        .with_topics(None);
    let started = Instant::now();
    let fetched = loop {
        let fetched = client.call(coordinator, &request, OFFSET_FETCH_VERSION).await?;
        if COORDINATOR_BUSY.contains(&fetched.error_code) {
            if let Some(found) = ask_again(client, group, started).await? {
                coordinator = found;
                continue;
            }
        }
        break fetched;
    };
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

/// Commits `offsets` for `group` as a client outside the group (generation -1, no member id),
/// which Kafka accepts while the group has no members.
pub(super) async fn commit_offsets(
    client: &mut Client,
    mut coordinator: i32,
    group: &str,
    offsets: &BTreeMap<(String, i32), i64>,
) -> Result<(), CliError> {
    let mut topics: BTreeMap<&str, Vec<OffsetCommitRequestPartition>> = BTreeMap::new();
    for ((topic, partition), offset) in offsets {
        topics.entry(topic).or_default().push(
            OffsetCommitRequestPartition::default()
                .with_partition_index(*partition)
                .with_committed_offset(*offset)
                .with_committed_leader_epoch(-1),
        );
    }
    let request = OffsetCommitRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.to_owned())))
        .with_generation_id_or_member_epoch(-1)
        .with_member_id(StrBytes::from_static_str(""))
        .with_topics(
            topics
                .into_iter()
                .map(|(topic, partitions)| {
                    OffsetCommitRequestTopic::default()
                        .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                        .with_partitions(partitions)
                })
                .collect(),
        );
    let started = Instant::now();
    let response = loop {
        let response = client.call(coordinator, &request, OFFSET_COMMIT_VERSION).await?;
        let busy = response
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .any(|p| COORDINATOR_BUSY.contains(&p.error_code));
        if busy {
            if let Some(found) = ask_again(client, group, started).await? {
                coordinator = found;
                continue;
            }
        }
        break response;
    };
    for p in response.topics.iter().flat_map(|t| &t.partitions) {
        client.check(
            coordinator,
            &format!("OffsetCommit for group {group:?}"),
            p.error_code,
            Some("a group with active members takes commits from its members only"),
        )?;
    }
    Ok(())
}

/// The group as its coordinator describes it (state `Dead`: no such group).
async fn described(client: &mut Client, mut coordinator: i32, group: &str) -> Result<DescribedGroup, CliError> {
    let request = DescribeGroupsRequest::default().with_groups(vec![GroupId(StrBytes::from_string(group.to_owned()))]);
    let started = Instant::now();
    let described = loop {
        let response = client.call(coordinator, &request, DESCRIBE_GROUPS_VERSION).await?;
        let described = response
            .groups
            .into_iter()
            .next()
            .ok_or_else(|| CliError::Usage(format!("the coordinator answered nothing about group {group:?}")))?;
        if COORDINATOR_BUSY.contains(&described.error_code) {
            if let Some(found) = ask_again(client, group, started).await? {
                coordinator = found;
                continue;
            }
        }
        break described;
    };
    client.check(
        coordinator,
        &format!("DescribeGroups for {group:?}"),
        described.error_code,
        described.error_message.as_deref(),
    )?;
    Ok(described)
}

async fn reset_offsets(client: &mut Client, args: &ResetOffsetsArgs) -> Result<Report, CliError> {
    let group = args.group.as_str();
    let coordinator = coordinator(client, group).await?;
    let state = described(client, coordinator, group).await?.group_state.to_string();
    if !matches!(state.as_str(), "Empty" | "Dead") {
        return Err(CliError::Usage(format!(
            "group {group} is {state}: its offsets can be reset only while it has no active members; stop its consumers first"
        )));
    }
    let committed = committed_offsets(client, coordinator, group).await?;
    let topics: BTreeSet<String> = if args.all_topics {
        committed.keys().map(|(t, _)| t.clone()).collect()
    } else {
        args.topic.iter().cloned().collect()
    };
    let mut leaders = Vec::new();
    for topic in &topics {
        for (partition, leader) in client.partition_leaders(topic).await? {
            leaders.push((topic.clone(), partition, leader));
        }
    }
    let starts = client.offsets(&leaders, EARLIEST).await?;
    let ends = client.offsets(&leaders, LATEST).await?;
    let at_time = match &args.to_datetime {
        Some(time) => {
            let ms = parse_time(time).ok_or_else(|| {
                CliError::Usage(format!(
                    "--to-datetime {time:?} is not a UTC time such as 2026-12-05T10:00:00Z or milliseconds since 1970"
                ))
            })?;
            client.offsets(&leaders, ms).await?
        }
        None => BTreeMap::new(),
    };
    let mut plan = BTreeMap::new();
    let mut table = Table::new("offsets", &["TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"]);
    for (topic, partition, _) in &leaders {
        let key = (topic.clone(), *partition);
        let (Some(&start), Some(&end)) = (starts.get(&key), ends.get(&key)) else {
            return Err(CliError::Usage(format!(
                "the leader of {topic}-{partition} did not give its offsets; is it online? (`sluice topic describe {topic}`)"
            )));
        };
        let current = committed.get(&key).copied();
        let target = if args.to_earliest {
            start
        } else if args.to_latest {
            end
        } else if let Some(offset) = args.to_offset {
            offset
        } else if let Some(shift) = args.shift_by {
            current.unwrap_or(end).saturating_add(shift)
        } else {
            // --to-datetime: no record at or after that time means the end.
            at_time.get(&key).copied().unwrap_or(end)
        };
        let target = target.clamp(start, end);
        table.push(vec![
            json!(topic),
            json!(partition),
            current.map_or(Value::Null, |c| json!(c)),
            json!(target),
        ]);
        plan.insert(key, target);
    }
    if args.execute {
        commit_offsets(client, coordinator, group, &plan).await?;
    }
    let message = if args.execute {
        format!("committed new offsets for group {group}")
    } else {
        "dry run: nothing was committed; add --execute to commit these offsets".to_owned()
    };
    Ok(Report::message(message)
        .field("group", group)
        .field("executed", args.execute)
        .table(table))
}

async fn delete(client: &mut Client, groups: &[String]) -> Result<Report, CliError> {
    let mut deleted = Vec::new();
    for group in groups {
        let coordinator = coordinator(client, group).await?;
        let request =
            DeleteGroupsRequest::default().with_groups_names(vec![GroupId(StrBytes::from_string(group.clone()))]);
        let response = client.call(coordinator, &request, DELETE_GROUPS_VERSION).await?;
        for result in &response.results {
            client.check(
                coordinator,
                &format!("DeleteGroups for {group:?}"),
                result.error_code,
                None,
            )?;
        }
        deleted.push(group.clone());
    }
    Ok(Report::message(format!("deleted {}", deleted.join(", "))).field("deleted", deleted))
}

/// `2026-12-05T10:00:00Z` (optionally with a fraction of a second, `Z` optional) or a count of
/// milliseconds since 1970, as milliseconds since 1970 (UTC).
fn parse_time(text: &str) -> Option<i64> {
    if let Ok(ms) = text.parse::<i64>() {
        return (ms >= 0).then_some(ms);
    }
    let text = text.strip_suffix('Z').unwrap_or(text);
    let (date, time) = text.split_once('T')?;
    let mut date = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (year, month, day) = (date.next()??, date.next()??, date.next()??);
    let (time, fraction) = time.split_once('.').unwrap_or((time, ""));
    let mut time = time.splitn(3, ':').map(|p| p.parse::<i64>().ok());
    let (hour, minute, second) = (time.next()??, time.next()??, time.next()??);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let millis = match fraction {
        "" => 0,
        f if f.len() <= 9 && f.bytes().all(|b| b.is_ascii_digit()) => format!("{f:0<3}")[..3].parse::<i64>().ok()?,
        _ => return None,
    };
    // Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (month + if month > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000 + millis)
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
    let described = described(client, coordinator, group).await?;
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

#[cfg(test)]
mod tests {
    use super::parse_time;

    #[test]
    fn times_read_as_utc_milliseconds() {
        assert_eq!(parse_time("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_time("2026-12-05T10:00:00Z"), Some(1_796_464_800_000));
        assert_eq!(parse_time("2000-02-29T23:59:59.5"), Some(951_868_799_500));
        assert_eq!(parse_time("1796464800000"), Some(1_796_464_800_000));
        for bad in [
            "2026-13-01T00:00:00Z",
            "yesterday",
            "2026-12-05",
            "2026-12-05T10:00:00.x",
            "-5",
        ] {
            assert_eq!(parse_time(bad), None, "{bad}");
        }
    }
}

//! `sluice partition elect-leaders | reassign | move-to-broker | reassignments`: Kafka's
//! ElectLeaders, AlterPartitionReassignments and ListPartitionReassignments, as
//! `kafka-leader-election.sh` and `kafka-reassign-partitions.sh` use them.

use std::collections::BTreeMap;

use kafka_protocol::messages::alter_partition_reassignments_request::{ReassignablePartition, ReassignableTopic};
use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, BrokerId, ElectLeadersRequest, ListPartitionReassignmentsRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use serde_json::json;

use super::client::{CliError, Client};
use super::output::{Report, Table};
use super::PartitionCommand;

const ELECT_LEADERS_VERSION: i16 = 2;
const ALTER_REASSIGNMENTS_VERSION: i16 = 0;
const LIST_REASSIGNMENTS_VERSION: i16 = 0;

/// How long the controller may take before answering.
const ADMIN_TIMEOUT_MS: i32 = 30_000;

/// ElectLeaders' election types.
const PREFERRED: i8 = 0;
const UNCLEAN: i8 = 1;

/// ELECTION_NOT_NEEDED: the partition already has the leader asked for.
const ELECTION_NOT_NEEDED: i16 = 84;

pub async fn run(client: &mut Client, command: &PartitionCommand) -> Result<Report, CliError> {
    match command {
        PartitionCommand::ElectLeaders {
            topic,
            partitions,
            unclean,
        } => elect_leaders(client, topic.as_deref(), partitions, *unclean).await,
        PartitionCommand::Reassign {
            partition,
            replicas,
            cancel,
        } => {
            let (topic, index) = partition
                .rsplit_once(':')
                .and_then(|(t, p)| Some((t.to_owned(), p.parse::<i32>().ok()?)))
                .ok_or_else(|| CliError::Usage(format!("{partition:?} is not TOPIC:PARTITION, e.g. orders:3")))?;
            let target = (!cancel).then(|| replicas.clone());
            reassign(client, BTreeMap::from([((topic, index), target)])).await
        }
        PartitionCommand::MoveToBroker { from, to, topic } => {
            move_to_broker(client, *from, *to, topic.as_deref()).await
        }
        PartitionCommand::Reassignments => reassignments(client).await,
    }
}

fn name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_owned()))
}

async fn elect_leaders(
    client: &mut Client,
    topic: Option<&str>,
    partitions: &[i32],
    unclean: bool,
) -> Result<Report, CliError> {
    let scope = match topic {
        None => None,
        Some(topic) => {
            let partitions = if partitions.is_empty() {
                client.partition_leaders(topic).await?.into_keys().collect()
            } else {
                partitions.to_vec()
            };
            Some(vec![TopicPartitions::default()
                .with_topic(name(topic))
                .with_partitions(partitions)])
        }
    };
    let request = ElectLeadersRequest::default()
        .with_election_type(if unclean { UNCLEAN } else { PREFERRED })
        .with_topic_partitions(scope)
        .with_timeout_ms(ADMIN_TIMEOUT_MS);
    let broker = client.any_broker();
    let response = client.call(broker, &request, ELECT_LEADERS_VERSION).await?;
    client.check(broker, "ElectLeaders", response.error_code, None)?;
    let mut table = Table::new("partitions", &["TOPIC", "PARTITION", "RESULT"]);
    let (mut elected, mut failed) = (0, 0);
    for result in &response.replica_election_results {
        for p in &result.partition_result {
            let outcome = match p.error_code {
                0 => {
                    elected += 1;
                    "elected".to_owned()
                }
                ELECTION_NOT_NEEDED => "already led by that replica".to_owned(),
                code => {
                    failed += 1;
                    client
                        .error(broker, "ElectLeaders", code, p.error_message.as_deref())
                        .to_string()
                }
            };
            table.push(vec![
                json!(result.topic.0.to_string()),
                json!(p.partition_id),
                json!(outcome),
            ]);
        }
    }
    let mut report = Report::message(format!("{elected} leaders elected, {failed} partitions failed"))
        .field("elected", elected)
        .field("failed", failed)
        .table(table);
    report.healthy = failed == 0;
    Ok(report)
}

/// Starts (replicas given) or cancels (`None`) the reassignment of each partition.
async fn reassign(client: &mut Client, moves: BTreeMap<(String, i32), Option<Vec<i32>>>) -> Result<Report, CliError> {
    let mut topics: BTreeMap<&str, Vec<ReassignablePartition>> = BTreeMap::new();
    for ((topic, partition), replicas) in &moves {
        topics.entry(topic).or_default().push(
            ReassignablePartition::default()
                .with_partition_index(*partition)
                .with_replicas(replicas.as_ref().map(|r| r.iter().map(|b| BrokerId(*b)).collect())),
        );
    }
    let request = AlterPartitionReassignmentsRequest::default()
        .with_timeout_ms(ADMIN_TIMEOUT_MS)
        .with_topics(
            topics
                .into_iter()
                .map(|(topic, partitions)| {
                    ReassignableTopic::default()
                        .with_name(name(topic))
                        .with_partitions(partitions)
                })
                .collect(),
        );
    let broker = client.any_broker();
    let response = client.call(broker, &request, ALTER_REASSIGNMENTS_VERSION).await?;
    client.check(
        broker,
        "AlterPartitionReassignments",
        response.error_code,
        response.error_message.as_deref(),
    )?;
    let mut table = Table::new("partitions", &["TOPIC", "PARTITION", "REPLICAS", "RESULT"]);
    let mut failed = 0;
    for topic in &response.responses {
        for p in &topic.partitions {
            let key = (topic.name.0.to_string(), p.partition_index);
            let target = moves.get(&key).cloned().flatten();
            let outcome = match (p.error_code, &target) {
                (0, Some(_)) => "moving".to_owned(),
                (0, None) => "cancelled".to_owned(),
                (code, _) => {
                    failed += 1;
                    client
                        .error(broker, "AlterPartitionReassignments", code, p.error_message.as_deref())
                        .to_string()
                }
            };
            table.push(vec![json!(key.0), json!(key.1), json!(target), json!(outcome)]);
        }
    }
    let mut report = Report::message(format!(
        "{} partitions submitted, {failed} refused; `sluice partition reassignments` shows the moves in progress",
        moves.len()
    ))
    .field("failed", failed)
    .table(table);
    report.healthy = failed == 0;
    Ok(report)
}

/// Every partition (of `topic`, or all) with a replica on `from` gets `to` in its place.
async fn move_to_broker(client: &mut Client, from: i32, to: i32, topic: Option<&str>) -> Result<Report, CliError> {
    if !client.brokers.contains_key(&to) {
        return Err(CliError::Usage(format!(
            "broker {to} is not among the live brokers {:?}",
            client.brokers.keys().collect::<Vec<_>>()
        )));
    }
    let metadata = client.metadata(topic.map(|t| vec![t.to_owned()])).await?;
    let mut moves = BTreeMap::new();
    for t in metadata.topics.iter().filter(|t| t.error_code == 0 && !t.is_internal) {
        let topic_name = t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default();
        for p in &t.partitions {
            let replicas: Vec<i32> = p.replica_nodes.iter().map(|b| b.0).collect();
            if replicas.contains(&from) && !replicas.contains(&to) {
                let target = replicas.iter().map(|r| if *r == from { to } else { *r }).collect();
                moves.insert((topic_name.clone(), p.partition_index), Some(target));
            }
        }
    }
    if moves.is_empty() {
        return Ok(Report::message(format!(
            "no partition has a replica on broker {from} to move"
        )));
    }
    reassign(client, moves).await
}

async fn reassignments(client: &mut Client) -> Result<Report, CliError> {
    let request = ListPartitionReassignmentsRequest::default()
        .with_timeout_ms(ADMIN_TIMEOUT_MS)
        .with_topics(None);
    let broker = client.any_broker();
    let response = client.call(broker, &request, LIST_REASSIGNMENTS_VERSION).await?;
    client.check(
        broker,
        "ListPartitionReassignments",
        response.error_code,
        response.error_message.as_deref(),
    )?;
    let mut table = Table::new(
        "reassignments",
        &["TOPIC", "PARTITION", "REPLICAS", "ADDING", "REMOVING"],
    );
    let ids = |v: &[BrokerId]| json!(v.iter().map(|b| b.0).collect::<Vec<_>>());
    for topic in &response.topics {
        for p in &topic.partitions {
            table.push(vec![
                json!(topic.name.0.to_string()),
                json!(p.partition_index),
                ids(&p.replicas),
                ids(&p.adding_replicas),
                ids(&p.removing_replicas),
            ]);
        }
    }
    Ok(Report::default().table(table))
}

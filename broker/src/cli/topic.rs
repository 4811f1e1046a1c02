//! `sluice topic list | describe | create | alter-config | add-partitions | delete`.

use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
use kafka_protocol::messages::{
    CreatePartitionsRequest, CreateTopicsRequest, DeleteTopicsRequest, DescribeConfigsRequest,
    IncrementalAlterConfigsRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use serde_json::{json, Value};

use super::client::{CliError, Client, EARLIEST, LATEST};
use super::output::{Report, Table};
use super::TopicCommand;

const CREATE_TOPICS_VERSION: i16 = 7;
const DELETE_TOPICS_VERSION: i16 = 6;
const CREATE_PARTITIONS_VERSION: i16 = 3;
const DESCRIBE_CONFIGS_VERSION: i16 = 4;
const INCREMENTAL_ALTER_CONFIGS_VERSION: i16 = 1;

/// How long the brokers may take to create or delete a topic before answering.
const ADMIN_TIMEOUT_MS: i32 = 30_000;

/// DescribeConfigs' and IncrementalAlterConfigs' resource type of a topic.
pub const TOPIC_RESOURCE: i8 = 2;

/// DescribeConfigs' config sources: set on the topic itself.
const DYNAMIC_TOPIC_CONFIG: i8 = 1;

/// IncrementalAlterConfigs operations.
const SET: i8 = 0;
const DELETE: i8 = 1;

pub async fn run(client: &mut Client, command: &TopicCommand) -> Result<Report, CliError> {
    match command {
        TopicCommand::List => list(client).await,
        TopicCommand::Describe { topic } => describe(client, topic).await,
        TopicCommand::Create {
            topic,
            partitions,
            replication_factor,
            configs,
        } => create(client, topic, *partitions, *replication_factor, configs).await,
        TopicCommand::AlterConfig { topic, set, delete } => alter_config(client, topic, set, delete).await,
        TopicCommand::AddPartitions { topic, total } => add_partitions(client, topic, *total).await,
        TopicCommand::Delete { topics } => delete(client, topics).await,
    }
}

fn name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_owned()))
}

fn key_value(entry: &str, flag: &str) -> Result<(String, String), CliError> {
    entry
        .split_once('=')
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| CliError::Usage(format!("{flag} expects KEY=VALUE, got {entry:?}")))
}

/// IncrementalAlterConfigs entries: each `KEY=VALUE` of `set` (given with `flag`) set, each
/// key of `delete` removed; refused when both are empty.
pub(super) fn alterable_configs(
    set: &[String],
    delete: &[String],
    flag: &str,
) -> Result<Vec<AlterableConfig>, CliError> {
    if set.is_empty() && delete.is_empty() {
        return Err(CliError::Usage(format!(
            "nothing to change: give {flag} KEY=VALUE or --delete KEY"
        )));
    }
    let mut configs = Vec::with_capacity(set.len() + delete.len());
    for entry in set {
        let (key, value) = key_value(entry, flag)?;
        configs.push(
            AlterableConfig::default()
                .with_name(StrBytes::from_string(key))
                .with_config_operation(SET)
                .with_value(Some(StrBytes::from_string(value))),
        );
    }
    for key in delete {
        configs.push(
            AlterableConfig::default()
                .with_name(StrBytes::from_string(key.clone()))
                .with_config_operation(DELETE),
        );
    }
    Ok(configs)
}

async fn list(client: &mut Client) -> Result<Report, CliError> {
    let metadata = client.metadata(None).await?;
    let mut topics: Vec<_> = metadata.topics.iter().filter(|t| t.error_code == 0).collect();
    topics.sort_by(|a, b| a.name.cmp(&b.name));
    let mut table = Table::new("topics", &["NAME", "PARTITIONS", "REPLICAS", "INTERNAL"]);
    for topic in topics {
        let replicas = topic.partitions.first().map_or(0, |p| p.replica_nodes.len());
        table.push(vec![
            json!(topic.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default()),
            json!(topic.partitions.len()),
            json!(replicas),
            json!(topic.is_internal),
        ]);
    }
    Ok(Report::default().table(table))
}

async fn describe(client: &mut Client, topic: &str) -> Result<Report, CliError> {
    let found = client.topic(topic).await?;
    let mut partitions: Vec<_> = found.partitions.iter().collect();
    partitions.sort_by_key(|p| p.partition_index);
    let leaders: Vec<(String, i32, i32)> = partitions
        .iter()
        .map(|p| (topic.to_owned(), p.partition_index, p.leader_id.0))
        .collect();
    let starts = client.offsets(&leaders, EARLIEST).await?;
    let ends = client.offsets(&leaders, LATEST).await?;
    let mut table = Table::new(
        "partitions",
        &[
            "PARTITION",
            "LEADER",
            "EPOCH",
            "REPLICAS",
            "ISR",
            "OFFLINE",
            "LOG-START",
            "HIGH-WATERMARK",
        ],
    );
    for p in &partitions {
        let key = (topic.to_owned(), p.partition_index);
        let ids = |v: &[kafka_protocol::messages::BrokerId]| json!(v.iter().map(|b| b.0).collect::<Vec<_>>());
        table.push(vec![
            json!(p.partition_index),
            if p.leader_id.0 >= 0 {
                json!(p.leader_id.0)
            } else {
                Value::Null
            },
            json!(p.leader_epoch),
            ids(&p.replica_nodes),
            ids(&p.isr_nodes),
            ids(&p.offline_replicas),
            starts.get(&key).map_or(Value::Null, |o| json!(o)),
            ends.get(&key).map_or(Value::Null, |o| json!(o)),
        ]);
    }
    let configs = topic_overrides(client, topic).await?;
    let replication_factor = partitions.first().map_or(0, |p| p.replica_nodes.len());
    Ok(Report::default()
        .field("topic", topic)
        .field("topic_id", found.topic_id.to_string())
        .field("internal", found.is_internal)
        .field("partition_count", partitions.len())
        .field("replication_factor", replication_factor)
        .field(
            "configs",
            Value::Object(configs.into_iter().map(|(k, v)| (k, json!(v))).collect()),
        )
        .table(table))
}

/// The topic's settings set on it (not defaults), `key → value`; sensitive values as `null`.
async fn topic_overrides(client: &mut Client, topic: &str) -> Result<Vec<(String, Option<String>)>, CliError> {
    let request = DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
        .with_resource_type(TOPIC_RESOURCE)
        .with_resource_name(StrBytes::from_string(topic.to_owned()))
        .with_configuration_keys(None)]);
    let broker = client.any_broker();
    let response = client.call(broker, &request, DESCRIBE_CONFIGS_VERSION).await?;
    let mut out = Vec::new();
    for result in &response.results {
        client.check(
            broker,
            &format!("DescribeConfigs for topic {topic:?}"),
            result.error_code,
            result.error_message.as_deref(),
        )?;
        for config in result
            .configs
            .iter()
            .filter(|c| c.config_source == DYNAMIC_TOPIC_CONFIG)
        {
            let value = if config.is_sensitive {
                None
            } else {
                config.value.as_ref().map(|v| v.to_string())
            };
            out.push((config.name.to_string(), value));
        }
    }
    out.sort();
    Ok(out)
}

async fn create(
    client: &mut Client,
    topic: &str,
    partitions: Option<i32>,
    replication_factor: Option<i16>,
    configs: &[String],
) -> Result<Report, CliError> {
    let configs = configs
        .iter()
        .map(|c| key_value(c, "--config"))
        .collect::<Result<Vec<_>, _>>()?;
    let request = CreateTopicsRequest::default()
        .with_timeout_ms(ADMIN_TIMEOUT_MS)
        .with_topics(vec![CreatableTopic::default()
            .with_name(name(topic))
            .with_num_partitions(partitions.unwrap_or(-1))
            .with_replication_factor(replication_factor.unwrap_or(-1))
            .with_configs(
                configs
                    .into_iter()
                    .map(|(k, v)| {
                        CreatableTopicConfig::default()
                            .with_name(StrBytes::from_string(k))
                            .with_value(Some(StrBytes::from_string(v)))
                    })
                    .collect(),
            )]);
    let broker = client.any_broker();
    let response = client.call(broker, &request, CREATE_TOPICS_VERSION).await?;
    let result = response
        .topics
        .first()
        .ok_or_else(|| CliError::Usage(format!("the cluster answered nothing about creating {topic:?}")))?;
    client.check(
        broker,
        &format!("CreateTopics for {topic:?}"),
        result.error_code,
        result.error_message.as_deref(),
    )?;
    Ok(Report::message(format!(
        "created topic {topic} with {} partitions and replication factor {}",
        result.num_partitions, result.replication_factor
    ))
    .field("topic", topic)
    .field("topic_id", result.topic_id.to_string())
    .field("partitions", result.num_partitions)
    .field("replication_factor", result.replication_factor))
}

async fn alter_config(client: &mut Client, topic: &str, set: &[String], delete: &[String]) -> Result<Report, CliError> {
    let configs = alterable_configs(set, delete, "--set")?;
    let request = IncrementalAlterConfigsRequest::default().with_resources(vec![AlterConfigsResource::default()
        .with_resource_type(TOPIC_RESOURCE)
        .with_resource_name(StrBytes::from_string(topic.to_owned()))
        .with_configs(configs)]);
    let broker = client.any_broker();
    let response = client.call(broker, &request, INCREMENTAL_ALTER_CONFIGS_VERSION).await?;
    for result in &response.responses {
        client.check(
            broker,
            &format!("IncrementalAlterConfigs for topic {topic:?}"),
            result.error_code,
            result.error_message.as_deref(),
        )?;
    }
    let configs = topic_overrides(client, topic).await?;
    Ok(Report::message(format!("updated the settings of topic {topic}"))
        .field("topic", topic)
        .field(
            "configs",
            Value::Object(configs.into_iter().map(|(k, v)| (k, json!(v))).collect()),
        ))
}

async fn add_partitions(client: &mut Client, topic: &str, total: i32) -> Result<Report, CliError> {
    let request = CreatePartitionsRequest::default()
        .with_timeout_ms(ADMIN_TIMEOUT_MS)
        .with_topics(vec![CreatePartitionsTopic::default()
            .with_name(name(topic))
            .with_count(total)
            .with_assignments(None)]);
    let broker = client.any_broker();
    let response = client.call(broker, &request, CREATE_PARTITIONS_VERSION).await?;
    for result in &response.results {
        client.check(
            broker,
            &format!("CreatePartitions for {topic:?}"),
            result.error_code,
            result.error_message.as_deref(),
        )?;
    }
    Ok(Report::message(format!("topic {topic} now has {total} partitions"))
        .field("topic", topic)
        .field("partitions", total))
}

async fn delete(client: &mut Client, topics: &[String]) -> Result<Report, CliError> {
    let request = DeleteTopicsRequest::default()
        .with_timeout_ms(ADMIN_TIMEOUT_MS)
        .with_topics(
            topics
                .iter()
                .map(|t| DeleteTopicState::default().with_name(Some(name(t))))
                .collect(),
        );
    let broker = client.any_broker();
    let response = client.call(broker, &request, DELETE_TOPICS_VERSION).await?;
    let mut deleted = Vec::new();
    for result in &response.responses {
        let topic = result.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default();
        client.check(
            broker,
            &format!("DeleteTopics for {topic:?}"),
            result.error_code,
            result.error_message.as_deref(),
        )?;
        deleted.push(topic);
    }
    Ok(Report::message(format!("deleted {}", deleted.join(", "))).field("deleted", deleted))
}

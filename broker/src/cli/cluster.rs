//! `sluice cluster info | health`: the brokers (fenced ones too), the controller, the metadata
//! quorum's voters and how far each lags, and the partitions that need attention.

use kafka_protocol::messages::describe_quorum_request::{PartitionData, TopicData};
use kafka_protocol::messages::{DescribeClusterRequest, DescribeQuorumRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use serde_json::{json, Value};

use super::client::{CliError, Client};
use super::output::{Report, Table};
use super::{ClusterCommand, ClusterConfigCommand};

/// DescribeCluster v2 lists fenced brokers too (KIP-1073, Kafka 4.0).
const DESCRIBE_CLUSTER_VERSION: i16 = 2;
const DESCRIBE_QUORUM_VERSION: i16 = 1;

/// The metadata log's topic, whose one partition DescribeQuorum describes.
const METADATA_TOPIC: &str = "__cluster_metadata";

pub async fn run(client: &mut Client, command: &ClusterCommand) -> Result<Report, CliError> {
    match command {
        ClusterCommand::Info => Ok(ClusterState::read(client).await?.info()),
        ClusterCommand::Health => Ok(ClusterState::read(client).await?.health()),
        ClusterCommand::Config(ClusterConfigCommand::Get {
            keys,
            broker,
            cluster_default,
        }) => {
            let name = match (broker, cluster_default) {
                (_, true) => String::new(),
                (Some(id), false) => id.to_string(),
                (None, false) => client.brokers.keys().next().map(i32::to_string).unwrap_or_default(),
            };
            config_get(client, &name, keys).await
        }
        ClusterCommand::Config(ClusterConfigCommand::Set {
            settings,
            delete,
            broker,
        }) => config_set(client, *broker, settings, delete).await,
    }
}

/// DescribeConfigs' and IncrementalAlterConfigs' resource type of a broker.
const BROKER_RESOURCE: i8 = 4;
const DESCRIBE_CONFIGS_VERSION: i16 = 4;
const INCREMENTAL_ALTER_CONFIGS_VERSION: i16 = 1;

/// Kafka's names of DescribeConfigs' config sources.
fn source_name(source: i8) -> &'static str {
    match source {
        1 => "DYNAMIC_TOPIC_CONFIG",
        2 => "DYNAMIC_BROKER_CONFIG",
        3 => "DYNAMIC_DEFAULT_BROKER_CONFIG",
        4 => "STATIC_BROKER_CONFIG",
        5 => "DEFAULT_CONFIG",
        6 => "DYNAMIC_BROKER_LOGGER_CONFIG",
        _ => "UNKNOWN",
    }
}

/// Broker `name`'s settings (`""`: the cluster-wide dynamic ones), asked of that broker.
async fn config_get(client: &mut Client, name: &str, keys: &[String]) -> Result<Report, CliError> {
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    use kafka_protocol::messages::DescribeConfigsRequest;
    let target = name.parse::<i32>().unwrap_or_else(|_| client.any_broker());
    let request = DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
        .with_resource_type(BROKER_RESOURCE)
        .with_resource_name(StrBytes::from_string(name.to_owned()))
        .with_configuration_keys(
            (!keys.is_empty()).then(|| keys.iter().map(|k| StrBytes::from_string(k.clone())).collect()),
        )]);
    let response = client.call(target, &request, DESCRIBE_CONFIGS_VERSION).await?;
    let mut table = Table::new("configs", &["NAME", "VALUE", "SOURCE", "READ-ONLY"]);
    for result in &response.results {
        client.check(
            target,
            "DescribeConfigs for a broker",
            result.error_code,
            result.error_message.as_deref(),
        )?;
        let mut configs: Vec<_> = result.configs.iter().collect();
        configs.sort_by(|a, b| a.name.cmp(&b.name));
        for c in configs {
            let value = match (&c.value, c.is_sensitive) {
                (_, true) => json!("(sensitive)"),
                (Some(v), false) => json!(v.to_string()),
                (None, false) => Value::Null,
            };
            table.push(vec![
                json!(c.name.to_string()),
                value,
                json!(source_name(c.config_source)),
                json!(c.read_only),
            ]);
        }
    }
    let scope = if name.is_empty() {
        "cluster-wide".to_owned()
    } else {
        format!("broker {name}")
    };
    Ok(Report::default().field("settings_of", scope).table(table))
}

/// Sets and removes dynamic broker settings, cluster-wide or on `broker`.
async fn config_set(
    client: &mut Client,
    broker: Option<i32>,
    settings: &[String],
    delete: &[String],
) -> Result<Report, CliError> {
    use kafka_protocol::messages::incremental_alter_configs_request::AlterConfigsResource;
    use kafka_protocol::messages::IncrementalAlterConfigsRequest;
    let configs = super::topic::alterable_configs(settings, delete, "a setting")?;
    let name = broker.map(|b| b.to_string()).unwrap_or_default();
    let request = IncrementalAlterConfigsRequest::default().with_resources(vec![AlterConfigsResource::default()
        .with_resource_type(BROKER_RESOURCE)
        .with_resource_name(StrBytes::from_string(name.clone()))
        .with_configs(configs)]);
    let target = broker.unwrap_or_else(|| client.any_broker());
    let response = client.call(target, &request, INCREMENTAL_ALTER_CONFIGS_VERSION).await?;
    for result in &response.responses {
        client.check(
            target,
            "IncrementalAlterConfigs for brokers",
            result.error_code,
            result.error_message.as_deref(),
        )?;
    }
    let mut keys: Vec<String> = settings
        .iter()
        .filter_map(|s| s.split_once('=').map(|(k, _)| k.trim().to_owned()))
        .collect();
    keys.extend(delete.iter().cloned());
    let scope = if name.is_empty() {
        "cluster-wide".to_owned()
    } else {
        format!("on broker {name}")
    };
    Ok(Report::message(format!("updated {} {scope}", keys.join(", "))).field("updated", keys))
}

struct Broker {
    id: i32,
    host: String,
    port: i32,
    rack: Option<String>,
    fenced: bool,
}

struct Voter {
    id: i32,
    log_end_offset: i64,
    last_caught_up_ms: i64,
}

/// A partition that is offline (no leader) or under-replicated (ISR smaller than replicas).
struct Troubled {
    topic: String,
    partition: i32,
    leader: i32,
    replicas: Vec<i32>,
    isr: Vec<i32>,
}

struct ClusterState {
    cluster_id: String,
    controller: i32,
    brokers: Vec<Broker>,
    /// `None` when the brokers would not describe the quorum (an older Kafka, or no leader).
    quorum: Option<(i32, i32, i64, Vec<Voter>)>,
    quorum_error: Option<String>,
    partitions: usize,
    troubled: Vec<Troubled>,
}

impl ClusterState {
    async fn read(client: &mut Client) -> Result<ClusterState, CliError> {
        let broker = client.any_broker();
        let request = DescribeClusterRequest::default().with_include_fenced_brokers(true);
        let cluster = client.call(broker, &request, DESCRIBE_CLUSTER_VERSION).await?;
        client.check(
            broker,
            "DescribeCluster",
            cluster.error_code,
            cluster.error_message.as_deref(),
        )?;
        let mut brokers: Vec<Broker> = cluster
            .brokers
            .iter()
            .map(|b| Broker {
                id: b.broker_id.0,
                host: b.host.to_string(),
                port: b.port,
                rack: b.rack.as_ref().map(|r| r.to_string()),
                fenced: b.is_fenced,
            })
            .collect();
        brokers.sort_by_key(|b| b.id);

        let request = DescribeQuorumRequest::default().with_topics(vec![TopicData::default()
            .with_topic_name(TopicName(StrBytes::from_static_str(METADATA_TOPIC)))
            .with_partitions(vec![PartitionData::default().with_partition_index(0)])]);
        let (quorum, quorum_error) = match client.call(broker, &request, DESCRIBE_QUORUM_VERSION).await {
            Err(e) => (None, Some(e.to_string())),
            Ok(response) => {
                let partition = response.topics.first().and_then(|t| t.partitions.first());
                let refused = |code, message: &Option<StrBytes>| {
                    let error = client.error(broker, "DescribeQuorum", code, message.as_deref());
                    (None, Some(error.to_string()))
                };
                match partition {
                    _ if response.error_code != 0 => refused(response.error_code, &response.error_message),
                    None => (None, Some("DescribeQuorum answered no partition".to_owned())),
                    Some(p) if p.error_code != 0 => refused(p.error_code, &p.error_message),
                    Some(p) => {
                        let mut voters: Vec<Voter> = p
                            .current_voters
                            .iter()
                            .map(|v| Voter {
                                id: v.replica_id.0,
                                log_end_offset: v.log_end_offset,
                                last_caught_up_ms: v.last_caught_up_timestamp,
                            })
                            .collect();
                        voters.sort_by_key(|v| v.id);
                        (Some((p.leader_id.0, p.leader_epoch, p.high_watermark, voters)), None)
                    }
                }
            }
        };

        let metadata = client.metadata(None).await?;
        let mut partitions = 0;
        let mut troubled = Vec::new();
        for topic in metadata.topics.iter().filter(|t| t.error_code == 0) {
            let name = topic.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default();
            for p in &topic.partitions {
                partitions += 1;
                if p.leader_id.0 < 0 || p.isr_nodes.len() < p.replica_nodes.len() {
                    troubled.push(Troubled {
                        topic: name.clone(),
                        partition: p.partition_index,
                        leader: p.leader_id.0,
                        replicas: p.replica_nodes.iter().map(|b| b.0).collect(),
                        isr: p.isr_nodes.iter().map(|b| b.0).collect(),
                    });
                }
            }
        }
        troubled.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        Ok(ClusterState {
            cluster_id: cluster.cluster_id.to_string(),
            controller: cluster.controller_id.0,
            brokers,
            quorum,
            quorum_error,
            partitions,
            troubled,
        })
    }

    fn offline(&self) -> impl Iterator<Item = &Troubled> {
        self.troubled.iter().filter(|t| t.leader < 0)
    }

    fn under_replicated(&self) -> impl Iterator<Item = &Troubled> {
        self.troubled.iter().filter(|t| t.leader >= 0)
    }

    /// Brokers that hold replicas but are fenced or not registered at all (down).
    fn down_brokers(&self) -> Vec<i32> {
        let mut down: Vec<i32> = self.brokers.iter().filter(|b| b.fenced).map(|b| b.id).collect();
        for t in &self.troubled {
            for r in &t.replicas {
                if !self.brokers.iter().any(|b| b.id == *r) {
                    down.push(*r);
                }
            }
        }
        down.sort();
        down.dedup();
        down
    }

    /// Sentences saying what is wrong; empty when the cluster is healthy.
    fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let down = self.down_brokers();
        if !down.is_empty() {
            problems.push(format!("brokers down or fenced: {down:?}"));
        }
        let offline = self.offline().count();
        if offline > 0 {
            problems.push(format!("{offline} partitions have no leader (offline)"));
        }
        let under = self.under_replicated().count();
        if under > 0 {
            problems.push(format!(
                "{under} partitions are under-replicated (ISR smaller than the replicas)"
            ));
        }
        match (&self.quorum, &self.quorum_error) {
            (Some((leader, ..)), _) if *leader < 0 => problems.push("the metadata quorum has no leader".into()),
            (None, Some(error)) => problems.push(format!("the metadata quorum could not be described: {error}")),
            _ => {}
        }
        problems
    }

    fn brokers_table(&self) -> Table {
        let mut table = Table::new("brokers", &["ID", "HOST", "PORT", "RACK", "FENCED", "CONTROLLER"]);
        for b in &self.brokers {
            table.push(vec![
                json!(b.id),
                json!(b.host),
                json!(b.port),
                b.rack.as_ref().map_or(Value::Null, |r| json!(r)),
                json!(b.fenced),
                json!(b.id == self.controller),
            ]);
        }
        table
    }

    fn troubled_table(&self) -> Table {
        let mut table = Table::new(
            "partitions_needing_attention",
            &["TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR", "PROBLEM"],
        );
        for t in &self.troubled {
            table.push(vec![
                json!(t.topic),
                json!(t.partition),
                if t.leader >= 0 { json!(t.leader) } else { Value::Null },
                json!(t.replicas),
                json!(t.isr),
                json!(if t.leader < 0 { "offline" } else { "under-replicated" }),
            ]);
        }
        table
    }

    fn info(&self) -> Report {
        let mut report = Report::default()
            .field("cluster_id", self.cluster_id.clone())
            .field("controller", self.controller)
            .field("partitions", self.partitions);
        match &self.quorum {
            Some((leader, epoch, high_watermark, voters)) => {
                report = report
                    .field("quorum_leader", *leader)
                    .field("quorum_epoch", *epoch)
                    .field("quorum_high_watermark", *high_watermark);
                report = report.table(self.brokers_table());
                let mut table = Table::new("quorum_voters", &["ID", "LOG-END-OFFSET", "LAG", "CAUGHT-UP-MS-AGO"]);
                let now_ms = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as i64);
                for v in voters {
                    table.push(vec![
                        json!(v.id),
                        json!(v.log_end_offset),
                        json!((high_watermark - v.log_end_offset).max(0)),
                        if v.last_caught_up_ms >= 0 {
                            json!((now_ms - v.last_caught_up_ms).max(0))
                        } else {
                            Value::Null
                        },
                    ]);
                }
                report = report.table(table);
            }
            None => {
                report = report
                    .field("quorum", self.quorum_error.clone().unwrap_or_default())
                    .table(self.brokers_table());
            }
        }
        report.table(self.troubled_table())
    }

    fn health(&self) -> Report {
        let problems = self.problems();
        let healthy = problems.is_empty();
        let mut report = Report::default()
            .field("healthy", healthy)
            .field("controller", self.controller)
            .field(
                "brokers",
                json!(self
                    .brokers
                    .iter()
                    .filter(|b| !b.fenced)
                    .map(|b| b.id)
                    .collect::<Vec<_>>()),
            )
            .field("brokers_down", json!(self.down_brokers()))
            .field("offline_partitions", self.offline().count())
            .field("under_replicated_partitions", self.under_replicated().count())
            .field(
                "quorum_leader",
                self.quorum.as_ref().map_or(Value::Null, |(leader, ..)| json!(leader)),
            )
            .field("problems", json!(problems));
        if !healthy {
            report = report.table(self.troubled_table());
        }
        report.healthy = healthy;
        report
    }
}

//! The client commands' view of a cluster: connections to its brokers (found through the
//! bootstrap list and Metadata), logged in as a Kafka client properties file says, and errors
//! that name the broker and the Kafka error.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::metadata_response::MetadataResponseTopic;
use kafka_protocol::messages::{MetadataRequest, MetadataResponse};
use kafka_protocol::protocol::Request;
use kafka_protocol::ResponseError;

use super::ClientArgs;
use crate::config::SaslMechanism;
use crate::replication::client::{BrokerConnection, ClientError};

/// Metadata at this version: topic ids, and no fields Kafka 4 has removed.
pub const METADATA_VERSION: i16 = 12;

const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;

/// The id the bootstrap connection is known by before Metadata names the broker.
const BOOTSTRAP: i32 = -1;

/// The client id the brokers see (in their logs, quotas and ACL principals' connections).
const CLIENT_ID: &str = "sluice-cli";

/// A properties file larger than this is refused (a real one is a few hundred bytes).
const MAX_PROPERTIES_BYTES: u64 = 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("cannot reach any bootstrap broker ({tried}): {last}. Is the cluster running, and are --bootstrap and the security settings right?")]
    NoBootstrap { tried: String, last: String },
    #[error("{0}")]
    Connection(#[from] ClientError),
    #[error("broker {broker} answered {request} with {error}{message}", message = .message.as_deref().map(|m| format!(": {m}")).unwrap_or_default())]
    Kafka {
        broker: String,
        request: String,
        error: KafkaError,
        message: Option<String>,
    },
    #[error("{0}")]
    Usage(String),
}

/// A Kafka error code, shown by its protocol name (`TOPIC_ALREADY_EXISTS`) as Kafka's tools do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KafkaError(pub i16);

impl fmt::Display for KafkaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match ResponseError::try_from_code(self.0) {
            None | Some(ResponseError::Unknown(_)) => write!(f, "error {}", self.0),
            Some(error) => write!(f, "{} (error {})", screaming_snake(&format!("{error:?}")), self.0),
        }
    }
}

/// `TopicAlreadyExists` → `TOPIC_ALREADY_EXISTS`.
fn screaming_snake(camel: &str) -> String {
    let mut out = String::with_capacity(camel.len() + 8);
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

/// How to reach and log in to the brokers: the properties file's settings, with Kafka's names.
#[derive(Default)]
struct Login {
    tls: Option<Arc<rustls::ClientConfig>>,
    sasl: Option<(SaslMechanism, String, String)>,
}

/// A broker's advertised address, from Metadata.
#[derive(Debug, Clone)]
pub struct BrokerAddress {
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
}

pub struct Client {
    login: Login,
    timeout: Duration,
    connections: HashMap<i32, BrokerConnection>,
    /// Where the bootstrap connection went (`host:port`), for messages before Metadata.
    bootstrap_addr: String,
    pub brokers: BTreeMap<i32, BrokerAddress>,
    pub controller_id: i32,
    pub cluster_id: Option<String>,
}

impl Client {
    /// Connects to the first bootstrap broker that answers and reads the cluster's brokers.
    pub async fn connect(args: &ClientArgs, timeout: Duration) -> Result<Client, CliError> {
        let properties = match &args.command_config {
            Some(path) => read_properties(path)?,
            None => BTreeMap::new(),
        };
        let login = login(&properties)?;
        let bootstrap = args
            .bootstrap
            .clone()
            .or_else(|| properties.get("bootstrap.servers").cloned())
            .unwrap_or_else(|| crate::config::client::DEFAULT_BOOTSTRAP.to_owned());
        let mut last = String::from("no address given");
        for addr in bootstrap.split(',').map(str::trim).filter(|a| !a.is_empty()) {
            let Some((host, port)) = addr
                .rsplit_once(':')
                .and_then(|(h, p)| Some((h, p.parse::<i32>().ok()?)))
            else {
                return Err(CliError::Usage(format!(
                    "--bootstrap entry {addr:?} is not host:port; give e.g. 127.0.0.1:9092"
                )));
            };
            match dial(&login, BOOTSTRAP, host, port).await {
                Ok(connection) => {
                    let mut client = Client {
                        login,
                        timeout,
                        connections: HashMap::from([(BOOTSTRAP, connection)]),
                        bootstrap_addr: addr.to_owned(),
                        brokers: BTreeMap::new(),
                        controller_id: -1,
                        cluster_id: None,
                    };
                    client.metadata(Some(Vec::new())).await?;
                    return Ok(client);
                }
                Err(ClientError::Connect { addr, source, .. }) => last = format!("{addr}: {source}"),
                Err(e) => last = e.to_string(),
            }
        }
        Err(CliError::NoBootstrap { tried: bootstrap, last })
    }

    /// Metadata for `topics` (`None`: every topic), remembering the brokers and controller.
    pub async fn metadata(&mut self, topics: Option<Vec<String>>) -> Result<MetadataResponse, CliError> {
        use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
        use kafka_protocol::messages::TopicName;
        use kafka_protocol::protocol::StrBytes;
        let request = MetadataRequest::default()
            .with_allow_auto_topic_creation(false)
            .with_topics(topics.map(|names| {
                names
                    .into_iter()
                    .map(|n| MetadataRequestTopic::default().with_name(Some(TopicName(StrBytes::from_string(n)))))
                    .collect()
            }));
        let response = self.call_any(&request, METADATA_VERSION).await?;
        self.brokers = response
            .brokers
            .iter()
            .map(|b| {
                let address = BrokerAddress {
                    host: b.host.to_string(),
                    port: b.port,
                    rack: b.rack.as_ref().map(|r| r.to_string()),
                };
                (b.node_id.0, address)
            })
            .collect();
        self.controller_id = response.controller_id.0;
        self.cluster_id = response.cluster_id.as_ref().map(|c| c.to_string());
        Ok(response)
    }

    /// Metadata of one topic, or the cluster's refusal (an unknown topic says how to create it).
    pub async fn topic(&mut self, topic: &str) -> Result<MetadataResponseTopic, CliError> {
        let metadata = self.metadata(Some(vec![topic.to_owned()])).await?;
        let found = metadata
            .topics
            .into_iter()
            .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == topic))
            .ok_or_else(|| CliError::Usage(format!("the cluster answered nothing about topic {topic:?}")))?;
        let hint = (found.error_code == UNKNOWN_TOPIC_OR_PARTITION).then_some("create it with `sluice topic create`");
        self.check(
            self.any_broker(),
            &format!("Metadata for topic {topic:?}"),
            found.error_code,
            hint,
        )?;
        Ok(found)
    }

    /// Each partition of `topic` and its leader (-1: none right now).
    pub async fn partition_leaders(&mut self, topic: &str) -> Result<BTreeMap<i32, i32>, CliError> {
        let found = self.topic(topic).await?;
        Ok(found
            .partitions
            .iter()
            .map(|p| (p.partition_index, p.leader_id.0))
            .collect())
    }

    /// Sends `request` to whichever broker this client is connected to.
    /// How long one request may take (`--timeout-ms`); also how long a command keeps asking a
    /// coordinator that is still loading.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    pub async fn call_any<R: Request>(&mut self, request: &R, version: i16) -> Result<R::Response, CliError> {
        let id = *self.connections.keys().next().unwrap_or(&BOOTSTRAP);
        self.call(id, request, version).await
    }

    /// Sends `request` to broker `id` (connecting to it first if needed).
    pub async fn call<R: Request>(&mut self, id: i32, request: &R, version: i16) -> Result<R::Response, CliError> {
        if !self.connections.contains_key(&id) {
            let address = self.brokers.get(&id).cloned().ok_or_else(|| {
                CliError::Usage(format!(
                    "broker {id} is not among the cluster's live brokers {:?}; it may be down or fenced",
                    self.brokers.keys().collect::<Vec<_>>()
                ))
            })?;
            let connection = dial(&self.login, id, &address.host, address.port).await?;
            self.connections.insert(id, connection);
        }
        let connection = self.connections.get_mut(&id).expect("connected above");
        match connection.call(request, version, self.timeout).await {
            Ok(response) => Ok(response),
            Err(e) => {
                // A broken connection is dialled again by the next call.
                self.connections.remove(&id);
                Err(e.into())
            }
        }
    }

    /// `broker 2 (host:port)`, for messages.
    pub fn describe_broker(&self, id: i32) -> String {
        match self.brokers.get(&id) {
            Some(a) => format!("{id} ({}:{})", a.host, a.port),
            None if id == BOOTSTRAP => self.bootstrap_addr.clone(),
            None => id.to_string(),
        }
    }

    /// `Err` naming broker `id`, the request and the error when `code` is not 0.
    pub fn check(&self, id: i32, request: &str, code: i16, message: Option<&str>) -> Result<(), CliError> {
        match code {
            0 => Ok(()),
            _ => Err(self.error(id, request, code, message)),
        }
    }

    /// Broker `id`'s answer to `request` was error `code`.
    pub fn error(&self, id: i32, request: &str, code: i16, message: Option<&str>) -> CliError {
        CliError::Kafka {
            broker: self.describe_broker(id),
            request: request.to_owned(),
            error: KafkaError(code),
            message: message.filter(|m| !m.is_empty()).map(str::to_owned),
        }
    }

    /// The broker the bootstrap connection reached, once Metadata named the brokers: the first
    /// broker id (requests that any broker answers go there).
    pub fn any_broker(&self) -> i32 {
        self.connections.keys().copied().next().unwrap_or(BOOTSTRAP)
    }
}

/// ListOffsets at this version (isolation level, leader epochs; Kafka 4 serves v1 and up).
pub const LIST_OFFSETS_VERSION: i16 = 7;

/// ListOffsets' special timestamps: the log end (high watermark) and the log start.
pub const LATEST: i64 = -1;
pub const EARLIEST: i64 = -2;

impl Client {
    /// The offset at `timestamp` ([`LATEST`], [`EARLIEST`], or milliseconds) of each partition,
    /// asked of its leader (`partitions`: topic, partition, leader); a partition whose leader
    /// is unknown or refuses is left out, so callers show it as unknown.
    pub async fn offsets(
        &mut self,
        partitions: &[(String, i32, i32)],
        timestamp: i64,
    ) -> Result<BTreeMap<(String, i32), i64>, CliError> {
        use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
        use kafka_protocol::messages::{BrokerId, ListOffsetsRequest, TopicName};
        use kafka_protocol::protocol::StrBytes;
        let mut by_leader: BTreeMap<i32, BTreeMap<&str, Vec<i32>>> = BTreeMap::new();
        for (topic, partition, leader) in partitions.iter().filter(|p| p.2 >= 0) {
            by_leader
                .entry(*leader)
                .or_default()
                .entry(topic)
                .or_default()
                .push(*partition);
        }
        let mut offsets = BTreeMap::new();
        for (leader, topics) in by_leader {
            let request = ListOffsetsRequest::default().with_replica_id(BrokerId(-1)).with_topics(
                topics
                    .into_iter()
                    .map(|(topic, partitions)| {
                        ListOffsetsTopic::default()
                            .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                            .with_partitions(
                                partitions
                                    .into_iter()
                                    .map(|p| {
                                        ListOffsetsPartition::default()
                                            .with_partition_index(p)
                                            .with_current_leader_epoch(-1)
                                            .with_timestamp(timestamp)
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            );
            let Ok(response) = self.call(leader, &request, LIST_OFFSETS_VERSION).await else {
                continue;
            };
            for topic in response.topics {
                for p in topic
                    .partitions
                    .into_iter()
                    .filter(|p| p.error_code == 0 && p.offset >= 0)
                {
                    offsets.insert((topic.name.0.to_string(), p.partition_index), p.offset);
                }
            }
        }
        Ok(offsets)
    }
}

async fn dial(login: &Login, id: i32, host: &str, port: i32) -> Result<BrokerConnection, ClientError> {
    let mut connection = BrokerConnection::connect(id, host, port, CLIENT_ID.to_owned(), login.tls.clone()).await?;
    if let Some((mechanism, user, password)) = &login.sasl {
        connection
            .login(*mechanism, user, password)
            .await
            .map_err(|e| match e {
                ClientError::Login(broker, message) => ClientError::Login(
                    broker,
                    format!("{message} (logging in as {user:?} with {mechanism}; check the --command-config file)"),
                ),
                other => other,
            })?;
    }
    Ok(connection)
}

/// A Java-style properties file: `key=value` (or `key: value`) lines, `#`/`!` comments.
fn read_properties(path: &std::path::Path) -> Result<BTreeMap<String, String>, CliError> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_PROPERTIES_BYTES).read_to_string(&mut text))
        .map_err(|e| CliError::Usage(format!("cannot read --command-config {}: {e}", path.display())))?;
    Ok(parse_properties(&text))
}

fn parse_properties(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with('!'))
        .filter_map(|l| {
            let at = l.find(['=', ':'])?;
            Some((l[..at].trim().to_owned(), l[at + 1..].trim().to_owned()))
        })
        .collect()
}

fn login(properties: &BTreeMap<String, String>) -> Result<Login, CliError> {
    let protocol = properties
        .get("security.protocol")
        .map(|p| p.to_ascii_uppercase())
        .unwrap_or_else(|| "PLAINTEXT".into());
    let (tls, sasl) = match protocol.as_str() {
        "PLAINTEXT" => (false, false),
        "SSL" => (true, false),
        "SASL_PLAINTEXT" => (false, true),
        "SASL_SSL" => (true, true),
        other => {
            return Err(CliError::Usage(format!(
                "security.protocol {other:?} is not one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"
            )))
        }
    };
    let mut login = Login::default();
    if tls {
        let ca = match properties.get("ssl.ca.location") {
            Some(path) => Some(
                std::fs::read(path).map_err(|e| CliError::Usage(format!("cannot read ssl.ca.location {path}: {e}")))?,
            ),
            None => None,
        };
        let read = |setting: &str| -> Result<Option<Vec<u8>>, CliError> {
            properties
                .get(setting)
                .map(|path| {
                    std::fs::read(path).map_err(|e| CliError::Usage(format!("cannot read {setting} {path}: {e}")))
                })
                .transpose()
        };
        // Mutual TLS: librdkafka's names for the client's certificate and key (PEM files).
        let identity = match (read("ssl.certificate.location")?, read("ssl.key.location")?) {
            (Some(certificate), Some(key)) => Some((certificate, key)),
            (None, None) => None,
            _ => {
                return Err(CliError::Usage(
                    "set both ssl.certificate.location and ssl.key.location (PEM files) for a client certificate, or neither"
                        .into(),
                ))
            }
        };
        let identity = identity.as_ref().map(|(c, k)| (c.as_slice(), k.as_slice()));
        login.tls = Some(
            crate::security::tls::operator_client_config(ca.as_deref(), identity).map_err(CliError::Usage)?,
        );
    }
    if sasl {
        let name = properties.get("sasl.mechanism").map(String::as_str).unwrap_or("GSSAPI");
        let mechanism = SaslMechanism::parse(name)
            .filter(|m| *m != SaslMechanism::OAuthBearer)
            .ok_or_else(|| {
                CliError::Usage(format!(
                    "sasl.mechanism {name:?} is not one the client commands speak; use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"
                ))
            })?;
        let jaas = properties.get("sasl.jaas.config").map(String::as_str).unwrap_or("");
        let user = properties
            .get("sasl.username")
            .cloned()
            .or_else(|| jaas_option(jaas, "username"));
        let password = properties
            .get("sasl.password")
            .cloned()
            .or_else(|| jaas_option(jaas, "password"));
        let (Some(user), Some(password)) = (user, password) else {
            return Err(CliError::Usage(
                "SASL needs a user and password: set sasl.username and sasl.password (or sasl.jaas.config) in the --command-config file".into(),
            ));
        };
        login.sasl = Some((mechanism, user, password));
    }
    Ok(login)
}

/// `name="value"` from a JAAS line such as
/// `org.apache.kafka.common.security.scram.ScramLoginModule required username="a" password="b";`.
fn jaas_option(jaas: &str, name: &str) -> Option<String> {
    let start = jaas.find(&format!("{name}=\""))? + name.len() + 2;
    let end = jaas[start..].find('"')?;
    Some(jaas[start..start + end].to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_files_read_as_java_reads_them() {
        let p = parse_properties(
            "# comment\n! other comment\nsecurity.protocol = SASL_SSL\nsasl.mechanism:SCRAM-SHA-512\n\nsasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"admin\" password=\"a=b\";\n",
        );
        assert_eq!(p["security.protocol"], "SASL_SSL");
        assert_eq!(p["sasl.mechanism"], "SCRAM-SHA-512");
        assert_eq!(
            jaas_option(&p["sasl.jaas.config"], "username").as_deref(),
            Some("admin")
        );
        assert_eq!(jaas_option(&p["sasl.jaas.config"], "password").as_deref(), Some("a=b"));
        assert_eq!(p.len(), 3);
    }

    #[test]
    fn sasl_without_credentials_or_with_an_unknown_protocol_is_refused_with_what_to_set() {
        let p = parse_properties("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n");
        let err = login(&p).err().unwrap().to_string();
        assert!(err.contains("sasl.username"), "{err}");
        let err = login(&parse_properties("security.protocol=TLS\n"))
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("PLAINTEXT, SSL"), "{err}");
    }

    #[test]
    fn kafka_errors_read_as_their_protocol_names() {
        assert_eq!(KafkaError(36).to_string(), "TOPIC_ALREADY_EXISTS (error 36)");
        assert_eq!(KafkaError(-999).to_string(), "error -999");
    }
}

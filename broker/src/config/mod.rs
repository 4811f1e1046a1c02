//! Broker configuration: command-line flags plus `--set key=value` using Kafka's own
//! property names, resolved once at start-up into typed settings.
//!
//! This file holds the flags, the broker-level `--set` settings (`BROKER_SETTINGS`) and their
//! parsing into [`BrokerConfig`], with its unit tests; the settings of larger areas are parsed
//! in the submodules beside it (the `mod` lines below).

use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
use sluice_raft_meta::{ClusterSecret, CREATE_SECRET_HINT};

use crate::log::CleanerConfig;
use crate::topic_config::{self, ConfigType};
use group::group_config;
pub use group::{Assignor, GroupConfig, MigrationPolicy, OffsetsSettings, ShareGroupConfig};
pub use listeners::{Listener, Listeners, DEFAULT_LISTENER_NAME};
use quota::quota_config;
pub use quota::QuotaConfig;
pub use security::{SaslMechanism, SecurityProtocol, SecuritySettings};
use txn::txn_config;
pub use txn::TxnConfig;

pub mod client;
mod group;
pub mod group_configs;
pub mod listeners;
pub mod open_files;
pub mod principal_rules;
mod quota;
pub mod security;
mod txn;

/// Command-line interface of the `sluice` binary.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "sluice",
    version,
    about = "Sluice: a Kafka-wire-compatible message broker.\n\nWith no arguments it runs a single-node cluster on 127.0.0.1:9092 with its data in ./data.",
    after_help = "`sluice settings` lists every --set name with its default and meaning.\nLogs go to stderr; RUST_LOG filters them (default info,raft=warn), NO_COLOR or a non-terminal turns colours off.",
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,

    /// This node's id: the broker id clients see in Metadata, and its id in the metadata quorum.
    #[arg(long, default_value_t = 1)]
    pub node_id: i32,

    /// Directory holding the partition logs and the metadata log. Created if missing.
    #[arg(long, default_value = "./data")]
    pub data_dir: PathBuf,

    /// Address the Kafka listener binds to [default: 127.0.0.1:9092]. Shorthand for
    /// `--set listeners=PLAINTEXT://ADDR`; several named listeners (an internal and an external
    /// one) are given with `--set listeners=...` and `--set advertised.listeners=...`.
    #[arg(long)]
    pub listen: Option<SocketAddr>,

    /// host:port advertised to clients in Metadata (defaults to --listen). Set it when clients
    /// reach this node through another name or address.
    #[arg(long)]
    pub advertise: Option<String>,

    /// Address the metadata-quorum (controller) listener binds to. Defaults to this node's
    /// entry in --voters; a single node with no --voters uses an ephemeral loopback port.
    #[arg(long)]
    pub controller_listen: Option<SocketAddr>,

    /// The metadata quorum's voters as `id@host:port,...` (their controller listeners),
    /// identical on every node. Empty: this node is the only voter.
    #[arg(long, value_delimiter = ',')]
    pub voters: Vec<String>,

    /// The cluster's id. Defaults to one derived from --voters (so nodes started with the same
    /// voters agree), or a random one for a single node. Stored in meta.properties on first start.
    #[arg(long)]
    pub cluster_id: Option<String>,

    /// File holding the secret the metadata quorum's members authenticate each other with
    /// (its contents, trimmed; at least 16 bytes). Required when --voters names more than one
    /// node, and the same on every node. Create it with
    /// `head -c 32 /dev/urandom | base64 > cluster-secret`.
    #[arg(long, value_name = "PATH")]
    pub cluster_secret_file: Option<PathBuf>,

    /// The cluster secret itself, instead of --cluster-secret-file. Prefer setting it through
    /// the environment: a value on the command line is visible to other users of the machine.
    #[arg(long, env = "SLUICE_CLUSTER_SECRET", hide_env_values = true, value_name = "SECRET")]
    pub cluster_secret: Option<SecretText>,

    /// Whether `cluster_secret` came from SLUICE_CLUSTER_SECRET rather than the command line
    /// (set by [`Cli::from_env_args`]): an explicit --cluster-secret-file then wins over it.
    #[arg(skip)]
    pub cluster_secret_from_env: bool,

    /// A SCRAM user to create when the cluster's metadata has none of that name, in Kafka's
    /// `kafka-storage format --add-scram` syntax:
    /// `SCRAM-SHA-512=[name=admin,password=admin-secret]`. Repeat for several. Prefer the
    /// SLUICE_ADD_SCRAM environment variable (entries separated by spaces), which keeps the
    /// password off the command line.
    #[arg(long = "add-scram", value_name = "MECHANISM=[name=...,password=...]")]
    pub add_scram: Vec<SecretText>,

    /// Any broker setting by its Kafka property name, e.g. `--set num.partitions=3`.
    /// Repeat for several. Unknown names are refused so that typos do not go unnoticed.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub settings: Vec<String>,
}

impl Cli {
    /// The command line of this process, parsed (exiting with clap's message when it does not
    /// parse), remembering which values came from the environment.
    pub fn from_env_args() -> Cli {
        Self::from_args(std::env::args_os()).unwrap_or_else(|e| e.exit())
    }

    /// `args` (the program name first) parsed as [`Cli::from_env_args`] does.
    pub fn from_args<I, T>(args: I) -> Result<Cli, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        use clap::{CommandFactory, FromArgMatches};
        let matches = Cli::command().try_get_matches_from(args)?;
        let mut cli = Cli::from_arg_matches(&matches)?;
        cli.cluster_secret_from_env =
            matches.value_source("cluster_secret") == Some(clap::parser::ValueSource::EnvVariable);
        Ok(cli)
    }
}

/// What `sluice` does instead of running a broker.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum Command {
    /// List every setting `--set` accepts, with its default and meaning.
    Settings,
    /// Plan disk, network, page cache and partitions for a workload (no cluster contacted),
    /// e.g. `sluice plan --rate 20000 --size 2048 --rf 3 --retention 168h --groups 2 --brokers 6`.
    Plan(crate::plan::PlanArgs),
    #[command(flatten)]
    Client(client::ClientCommand),
    /// Prints a completion script for a shell: `source <(sluice completion bash)`, or save it
    /// where the shell looks for completions.
    Completion {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// Text that must not show up in logs or `Debug` output (the cluster secret).
#[derive(Clone)]
pub struct SecretText(String);

impl std::str::FromStr for SecretText {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(SecretText(s.to_owned()))
    }
}

impl fmt::Debug for SecretText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl From<String> for SecretText {
    fn from(s: String) -> Self {
        SecretText(s)
    }
}

impl SecretText {
    /// The secret itself, for the one place that uses it (never for a log line).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

/// A secret file larger than this is refused (32 random bytes in base64 are 45).
const MAX_CLUSTER_SECRET_FILE_BYTES: u64 = 4096;

/// A configuration problem found at start-up; the message says what to change.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("--set expects KEY=VALUE, got {0:?}")]
    NotKeyValue(String),
    #[error("unknown setting {0:?}; use a Kafka broker property name (see `sluice --help`)")]
    UnknownKey(String),
    #[error("setting {key}={value:?} is invalid: {reason}")]
    InvalidValue { key: String, value: String, reason: String },
    #[error("--advertise {0:?} must be host:port")]
    BadAdvertise(String),
    #[error("--node-id must be >= 0, got {0}")]
    BadNodeId(i32),
    #[error("--voters entry {0:?} must be id@host:port")]
    BadVoter(String),
    #[error("node {0} is not in --voters; every node must currently be a voter (add it to --voters on all nodes)")]
    NotAVoter(i32),
    #[error("controller address {0:?} for this node cannot be resolved; give --controller-listen as ip:port")]
    BadControllerListen(String),
    #[error("--voters names {0} nodes, so the metadata quorum's members must authenticate each other, but no cluster secret was given: {hint}", hint = CREATE_SECRET_HINT)]
    NoClusterSecret(usize),
    #[error("cannot read --cluster-secret-file {path}: {source}. Check the path and its permissions; {hint}", path = .path.display(), hint = CREATE_SECRET_HINT)]
    SecretFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("both --cluster-secret-file and --cluster-secret were given; give one of them")]
    TwoClusterSecrets,
    #[error("the cluster secret from {from} is unusable: {reason}")]
    BadClusterSecret { from: String, reason: String },
}

/// A broker-level setting that is not a topic-config default: its Kafka name, default, type
/// and what it means (`sluice settings` lists them).
pub struct BrokerSetting {
    pub name: &'static str,
    pub default: &'static str,
    pub ty: ConfigType,
    pub doc: &'static str,
}

macro_rules! broker_settings {
    ($( $name:literal, $default:expr, $ty:ident, $doc:literal; )*) => {
        /// Every broker-level setting `--set` accepts besides the topic-config defaults.
        pub const BROKER_SETTINGS: &[BrokerSetting] = &[$(BrokerSetting {
            name: $name, default: $default, ty: ConfigType::$ty, doc: $doc,
        },)*];
    };
}

broker_settings! {
    "listeners", "", String, "Named listeners to bind, NAME://host:port,... (default PLAINTEXT://127.0.0.1:9092, or --listen).";
    "advertised.listeners", "", String, "What each listener tells clients to dial, NAME://host:port,... (default: what it binds, or --advertise).";
    "listener.security.protocol.map", listeners::DEFAULT_SECURITY_PROTOCOL_MAP, String, "NAME:PROTOCOL for every listener: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.";
    "inter.broker.listener.name", "", String, "The listener followers fetch from leaders through (default: the only listener, or PLAINTEXT).";
    "controller.listener.names", "CONTROLLER", List, "The metadata quorum's listener name (--controller-listen); mapped to SSL in listener.security.protocol.map, quorum members use mutual TLS pinned to their --voters hosts.";
    "num.partitions", "1", Int, "Partitions of an auto-created topic or one created without a count.";
    "default.replication.factor", "3", Short, "Replicas of a topic created without a factor (lowered to the live brokers).";
    "auto.create.topics.enable", "true", Boolean, "Create a topic when a client asks Metadata for one that does not exist.";
    "socket.request.max.bytes", "104857600", Int, "Largest request accepted; a larger one closes the connection.";
    "queued.max.request.bytes", "536870912", Long, "Request bytes held at once across all connections.";
    "max.in.flight.requests.per.connection", "64", Int, "Requests read from one connection and not yet answered, at most (Sluice's own); the next waits in the socket.";
    "max.in.flight.request.bytes.per.connection", "4194304", Int, "Bytes of the requests read from one connection and not yet answered, at most (Sluice's own): each request holds its bytes until its response is written, so this bounds what a pipelining producer makes the broker hold; a larger request waits until it is the only one.";
    "max.connections", "10000", Int, "Client connections open at once, over all listeners; more are refused.";
    "connections.max.idle.ms", "600000", Long, "A connection silent this long with no response owed is closed.";
    "socket.request.read.timeout.ms", "30000", Long, "How long a started request may take to arrive whole (Sluice's own).";
    "log.retention.check.interval.ms", "300000", Long, "How often retention and time-based segment rolls run.";
    "log.retention.hours", "168", Int, "Retention in hours when log.retention.ms is not set.";
    "log.retention.minutes", "", Int, "Retention in minutes when log.retention.ms is not set (wins over hours).";
    "log.roll.hours", "168", Int, "Segment roll time in hours when log.roll.ms is not set.";
    "log.cleaner.enable", "true", Boolean, "Run the log cleaner that compacts topics with cleanup.policy=compact.";
    "log.cleaner.backoff.ms", "15000", Long, "How long the cleaner sleeps when no log needs cleaning.";
    "log.cleaner.dedupe.buffer.size", "134217728", Long, "Memory for the cleaner's key-to-offset map.";
    "delete.topic.enable", "true", Boolean, "Allow DeleteTopics.";
    "broker.rack", "", String, "This broker's rack; replicas of a partition are spread over racks.";
    "replica.selector.class", "", String, "Which replica a consumer reads from: empty or org.apache.kafka.common.replica.LeaderSelector for the leader, org.apache.kafka.common.replica.RackAwareReplicaSelector for one in the consumer's client.rack (KIP-392).";
    "broker.session.timeout.ms", "9000", Int, "A broker the controller has not heard from for this long is fenced.";
    "broker.heartbeat.interval.ms", "2000", Int, "How often a broker tells the controller it is alive.";
    "replica.lag.time.max.ms", "30000", Long, "A follower not caught up for this long leaves the ISR.";
    "replica.fetch.wait.max.ms", "500", Int, "How long a follower's fetch waits at the leader for new data.";
    "replica.fetch.max.bytes", "1048576", Int, "Bytes a follower asks per partition in one fetch.";
    "replica.fetch.response.max.bytes", "10485760", Int, "Record bytes in one follower fetch response.";
    "replica.high.watermark.checkpoint.interval.ms", "5000", Long, "How often high watermarks are written to disk.";
    "auto.leader.rebalance.enable", "true", Boolean, "Move leadership back to preferred replicas when they are in sync.";
    "leader.imbalance.check.interval.seconds", "300", Long, "How often the preferred-leader check runs.";
    "controlled.shutdown.enable", "true", Boolean, "On SIGTERM, move leadership away before stopping.";
    "fetch.max.bytes", "57671680", Int, "Record bytes in one consumer fetch response, whatever the client asks.";
    "num.io.threads", "8", Int, "Fetch disk reads running at once.";
    "log.tail.cache.bytes", "1048576", Int, "Bytes of a leader partition's newest appends kept in memory to answer fetches without a disk read (Sluice's own; 0 turns it off).";
    "log.tail.cache.total.bytes", "16777216", Long, "Bytes of all partitions' log tail caches together (Sluice's own); a partition not appended to for about 10 s gives its share back.";
    "num.recovery.threads.per.data.dir", "8", Int, "Partition logs opened (created or recovered) at once on the blocking pool; concurrent fsyncs share journal commits.";
    "max.request.partition.size.limit", "2000", Int, "Partitions in one DescribeTopicPartitions response.";
    "offsets.topic.num.partitions", "50", Int, "Partitions of __consumer_offsets (fixed once it exists).";
    "offsets.topic.replication.factor", "3", Short, "Replicas of __consumer_offsets (lowered to the live brokers).";
    "offsets.topic.segment.bytes", "104857600", Int, "Segment size of __consumer_offsets.";
    "offsets.retention.minutes", "10080", Int, "Committed offsets of an empty group are kept this long.";
    "offsets.retention.check.interval.ms", "600000", Long, "How often expired offsets are removed.";
    "offsets.commit.timeout.ms", "5000", Int, "How long an offset commit waits for the in-sync replicas.";
    "offsets.load.buffer.size", "5242880", Int, "Bytes read at a time when loading groups from __consumer_offsets.";
    "offset.metadata.max.bytes", "4096", Int, "Largest metadata string of a committed offset.";
    "transaction.state.log.num.partitions", "50", Int, "Partitions of __transaction_state (fixed once it exists).";
    "transaction.state.log.replication.factor", "3", Short, "Replicas of __transaction_state (lowered to the live brokers).";
    "transaction.state.log.min.isr", "2", Int, "min.insync.replicas of __transaction_state.";
    "transaction.state.log.segment.bytes", "104857600", Int, "Segment size of __transaction_state.";
    "transaction.state.log.load.buffer.size", "5242880", Int, "Bytes read at a time when loading transactions from __transaction_state.";
    "transaction.max.timeout.ms", "900000", Int, "Largest transaction.timeout.ms a producer may ask for.";
    "transactional.id.expiration.ms", "604800000", Int, "A transactional id with no transaction for this long is forgotten.";
    "transaction.abort.timed.out.transaction.cleanup.interval.ms", "10000", Int, "How often transactions open past their timeout are aborted.";
    "transaction.remove.expired.transaction.cleanup.interval.ms", "3600000", Int, "How often expired transactional ids are removed.";
    "producer.id.expiration.ms", "86400000", Int, "A partition forgets an idempotent producer that has not written to it for this long (none with an open transaction).";
    "producer.id.expiration.check.interval.ms", "600000", Int, "How often partitions look for expired producer ids.";
    "transaction.version", "2", Int, "The transaction.version feature finalized in ApiVersions (0-2; set the same on every node): 2 lets clients use transactions v2 (KIP-890 part 2: an epoch bump at every commit or abort, partitions added by their leaders), 0 keeps them on v1.";
    "add.partitions.to.txn.retry.backoff.ms", "20", Int, "How long a partition leader waits before asking the coordinator again to add a partition for a transactions v2 producer when the transaction is busy (CONCURRENT_TRANSACTIONS).";
    "add.partitions.to.txn.retry.backoff.max.ms", "100", Int, "How long a partition leader keeps asking the coordinator to add a partition for a transactions v2 producer while the transaction is busy, before the producer is told to retry.";
    "transaction.partition.verification.enable", "true", Boolean, "Partition leaders ask the coordinator before a producer's first transactional write (KIP-890), so a late write cannot leave a transaction hanging.";
    "group.initial.rebalance.delay.ms", "3000", Int, "How long a new group waits for more members before its first rebalance.";
    "group.min.session.timeout.ms", "6000", Int, "Smallest session timeout a group member may ask for.";
    "group.max.session.timeout.ms", "1800000", Int, "Largest session timeout a group member may ask for.";
    "group.max.size", "2147483647", Int, "Members a group may have.";
    "group.coordinator.rebalance.protocols", "classic,consumer", List, "Group protocols served: classic (JoinGroup/SyncGroup) and consumer (KIP-848's ConsumerGroupHeartbeat, group.protocol=consumer in clients).";
    "group.consumer.session.timeout.ms", "45000", Int, "A KIP-848 consumer group member not heard from for this long is removed.";
    "group.consumer.min.session.timeout.ms", "45000", Int, "Smallest group.consumer.session.timeout.ms.";
    "group.consumer.max.session.timeout.ms", "60000", Int, "Largest group.consumer.session.timeout.ms.";
    "group.consumer.heartbeat.interval.ms", "5000", Int, "How often KIP-848 consumer group members are told to heartbeat.";
    "group.consumer.min.heartbeat.interval.ms", "5000", Int, "Smallest group.consumer.heartbeat.interval.ms.";
    "group.consumer.max.heartbeat.interval.ms", "15000", Int, "Largest group.consumer.heartbeat.interval.ms.";
    "group.consumer.assignors", "uniform,range", List, "Server-side assignors of KIP-848 consumer groups, the first the default (Kafka's class names are accepted).";
    "group.consumer.migration.policy", "bidirectional", String, "Whether a group with members converts online between the classic and consumer protocols as its members switch: bidirectional, upgrade (classic to consumer only), downgrade (consumer to classic only) or disabled.";
    "group.share.session.timeout.ms", "45000", Int, "A KIP-932 share group member not heard from for this long is removed.";
    "group.share.min.session.timeout.ms", "45000", Int, "Smallest group.share.session.timeout.ms.";
    "group.share.max.session.timeout.ms", "60000", Int, "Largest group.share.session.timeout.ms.";
    "group.share.heartbeat.interval.ms", "5000", Int, "How often share group members are told to heartbeat.";
    "group.share.min.heartbeat.interval.ms", "5000", Int, "Smallest group.share.heartbeat.interval.ms.";
    "group.share.max.heartbeat.interval.ms", "15000", Int, "Largest group.share.heartbeat.interval.ms.";
    "group.share.max.size", "200", Int, "Most members a share group takes; one more is refused with GROUP_MAX_SIZE_REACHED.";
    "group.share.record.lock.duration.ms", "30000", Int, "How long a share group member holds records it fetched before they go to another member.";
    "group.share.min.record.lock.duration.ms", "15000", Int, "Smallest group.share.record.lock.duration.ms.";
    "group.share.max.record.lock.duration.ms", "60000", Int, "Largest group.share.record.lock.duration.ms.";
    "group.share.delivery.count.limit", "5", Int, "Deliveries of a record to share group members after which it is archived rather than delivered again.";
    "group.share.min.delivery.count.limit", "2", Int, "Smallest group.share.delivery.count.limit.";
    "group.share.max.delivery.count.limit", "10", Int, "Largest group.share.delivery.count.limit.";
    "group.share.partition.max.record.locks", "2000", Int, "Records of one share-partition in flight at most: no more are handed out until these are acknowledged.";
    "group.share.min.partition.max.record.locks", "100", Int, "Smallest group.share.partition.max.record.locks.";
    "group.share.max.partition.max.record.locks", "10000", Int, "Largest group.share.partition.max.record.locks.";
    "group.share.max.share.sessions", "2000", Int, "Share sessions (ShareFetch) a broker keeps at most; one more is refused with SHARE_SESSION_LIMIT_REACHED.";
    "quota.window.num", "11", Int, "Samples a client quota's byte rate is measured over.";
    "quota.window.size.seconds", "1", Int, "Length of one client quota sample.";
    "quota.max.tracked.entities", "10000", Int, "Client quota entities tracked at once, per quota type (Sluice's own).";
    "replication.quota.window.num", "11", Int, "Samples a replication throttle's rate is measured over.";
    "replication.quota.window.size.seconds", "1", Int, "Length of one replication throttle sample.";
    "max.incremental.fetch.session.cache.slots", "1000", Int, "Incremental fetch sessions (KIP-227) kept at once; more clients fetch in full.";
    "min.incremental.fetch.session.eviction.ms", "120000", Int, "A fetch session unused this long may give its slot to a new one.";
    "fetch.session.cache.max.partitions", "1000000", Int, "Partitions held over all fetch sessions (Sluice's own); a session past it is dropped.";
    "ssl.keystore.type", "", String, "PEM or PKCS12 (JKS is refused: convert it with keytool); empty: told by the file's contents.";
    "ssl.keystore.location", "", String, "File with this broker's certificate chain and private key: PEM, or a PKCS12 store.";
    "ssl.keystore.password", "", Password, "Password of a PKCS12 keystore.";
    "ssl.key.password", "", Password, "Password of the private key when it differs from the keystore's.";
    "ssl.keystore.certificate.chain", "", Password, "The certificate chain as PEM text, instead of ssl.keystore.location (KIP-651).";
    "ssl.keystore.key", "", Password, "The unencrypted private key as PEM text, with ssl.keystore.certificate.chain.";
    "ssl.truststore.type", "", String, "PEM or PKCS12; empty: told by the file's contents.";
    "ssl.truststore.location", "", String, "CA certificates that client certificates (and other brokers') must chain to.";
    "ssl.truststore.password", "", Password, "Password of a PKCS12 truststore.";
    "ssl.truststore.certificates", "", Password, "Trusted CA certificates as PEM text, instead of ssl.truststore.location.";
    "ssl.client.auth", "none", String, "none, requested or required: whether TLS clients present a certificate (mutual TLS).";
    "ssl.enabled.protocols", "TLSv1.2,TLSv1.3", List, "TLS versions offered.";
    "ssl.protocol", "TLSv1.3", String, "Accepted for Kafka configurations; ssl.enabled.protocols decides.";
    "ssl.cipher.suites", "", List, "IANA names of the cipher suites offered (empty: rustls's safe defaults).";
    "ssl.principal.mapping.rules", "DEFAULT", String, "How a client certificate's distinguished name becomes its principal name.";
    "ssl.endpoint.identification.algorithm", "https", String, "As a client of another broker, check its certificate names the host dialled (empty: do not).";
    "ssl.reload.check.interval.ms", "5000", Long, "How often certificate and key files are checked for changes, which take effect without a restart (Sluice's own).";
    "sasl.enabled.mechanisms", "SCRAM-SHA-256,SCRAM-SHA-512", List, "Mechanisms SASL listeners offer: SCRAM-SHA-256, SCRAM-SHA-512, PLAIN, OAUTHBEARER (Kafka's default GSSAPI is not served).";
    "sasl.mechanism.inter.broker.protocol", "", String, "Mechanism brokers log in to each other's SASL listener with, using listener.name.<l>.<mech>.sasl.jaas.config (empty: the cluster secret).";
    "sasl.server.max.receive.size", "524288", Int, "Largest frame accepted from a connection before it has authenticated.";
    "connections.max.reauth.ms", "0", Long, "Lifetime of a SASL session; clients re-authenticate before it ends, or are disconnected (0: no limit).";
    "connection.failed.authentication.delay.ms", "100", Int, "How long a failed authentication waits before its answer and the close.";
    "sasl.oauthbearer.jwks.endpoint.url", "", String, "JWKS that OAUTHBEARER tokens are checked against: file:///path, a path, or http(s):// URL.";
    "sasl.oauthbearer.expected.audience", "", List, "Audiences a token must name one of (empty: not checked).";
    "sasl.oauthbearer.expected.issuer", "", String, "Issuer a token must name (empty: not checked).";
    "sasl.oauthbearer.sub.claim.name", "sub", String, "Claim naming the principal.";
    "sasl.oauthbearer.scope.claim.name", "scope", String, "Claim holding the token's scopes.";
    "sasl.oauthbearer.clock.skew.seconds", "30", Int, "Clock difference allowed when checking a token's times.";
    "sasl.oauthbearer.jwks.endpoint.refresh.ms", "3600000", Long, "How often the JWKS is read again.";
    "authorizer.class.name", "", String, "Set (to org.apache.kafka.metadata.authorizer.StandardAuthorizer) to enforce ACLs.";
    "super.users", "", String, "Principals allowed everything, separated by ; (e.g. User:admin).";
    "allow.everyone.if.no.acl.found", "false", Boolean, "With an authorizer, allow an operation on a resource no ACL names.";
    "metrics.listen", "", String, "IP:PORT of the HTTP server for Prometheus at /metrics and the console at / (off when empty).";
    "metrics.ssl.enable", "false", Boolean, "Serve metrics.listen over TLS with the broker-wide ssl.keystore.* settings (Sluice's own).";
    "metrics.authentication", "none", String, "none, or scram: metrics.listen asks for HTTP Basic credentials of a SCRAM user, who needs DESCRIBE on the cluster when an authorizer is on (Sluice's own).";
    "metrics.max.connections", "32", Int, "HTTP connections served at once on metrics.listen; more wait in the backlog (Sluice's own).";
}

/// `metrics.listen`: empty is off; otherwise an IP address and port.
fn parse_metrics_listen(value: &str) -> Result<Option<SocketAddr>, ConfigError> {
    if value.trim().is_empty() {
        return Ok(None);
    }
    value.trim().parse().map(Some).map_err(|_| ConfigError::InvalidValue {
        key: "metrics.listen".into(),
        value: value.into(),
        reason: "write an IP address and port, e.g. 127.0.0.1:9644, or 0.0.0.0:9644 for every interface".into(),
    })
}

/// `replica.selector.class`: which replica a partition leader tells a consumer to read from
/// (KIP-392). Kafka takes any class; Sluice offers Kafka's two built-in selectors by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplicaSelector {
    /// Always the leader (Kafka's default, and `LeaderSelector`).
    Leader,
    /// An in-sync replica in the consumer's `client.rack`, the leader when it is one of them.
    RackAware,
}

pub const RACK_AWARE_REPLICA_SELECTOR: &str = "org.apache.kafka.common.replica.RackAwareReplicaSelector";
const LEADER_SELECTOR: &str = "org.apache.kafka.common.replica.LeaderSelector";

fn parse_replica_selector(value: &str) -> Result<ReplicaSelector, ConfigError> {
    match value.trim() {
        "" | LEADER_SELECTOR => Ok(ReplicaSelector::Leader),
        RACK_AWARE_REPLICA_SELECTOR => Ok(ReplicaSelector::RackAware),
        _ => Err(ConfigError::InvalidValue {
            key: "replica.selector.class".into(),
            value: value.into(),
            reason: format!(
                "Sluice offers Kafka's built-in selectors: {RACK_AWARE_REPLICA_SELECTOR} (consumers read from a replica in their client.rack) or {LEADER_SELECTOR} (the leader, as when unset)"
            ),
        }),
    }
}

/// Resolved configuration of one broker.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    pub node_id: i32,
    pub data_dir: PathBuf,
    /// The Kafka listeners: what each binds and advertises, and the inter-broker one.
    pub listeners: Listeners,
    /// Each listener's TLS and SASL settings, the authorizer, `--add-scram` users.
    pub security: SecuritySettings,
    pub num_partitions: i32,
    /// Replicas of a topic created without an explicit factor, lowered by the controller to
    /// the number of live brokers (so a single node still creates topics).
    pub default_replication_factor: i16,
    pub auto_create_topics_enable: bool,
    pub delete_topic_enable: bool,
    pub socket_request_max_bytes: usize,
    pub queued_max_request_bytes: usize,
    pub max_in_flight_requests_per_connection: usize,
    /// `max.in.flight.request.bytes.per.connection` (Sluice's own): bytes of one connection's
    /// requests held until their responses are written.
    pub max_in_flight_request_bytes_per_connection: usize,
    /// Client connections open at once; more are refused at accept.
    pub max_connections: usize,
    pub fetch_sessions: SessionSettings,
    /// Where `/metrics` and the console are served (`metrics.listen`), if anywhere.
    pub metrics_listen: Option<SocketAddr>,
    pub metrics_max_connections: usize,
    /// A connection with nothing in flight that sends nothing for this long is closed.
    pub connections_max_idle_ms: u64,
    /// A request whose first bytes arrived must arrive whole within this long (Sluice's own
    /// setting; Kafka has none), so a slow sender cannot hold request memory indefinitely.
    pub socket_request_read_timeout_ms: u64,
    pub log_retention_check_interval_ms: u64,
    /// `producer.id.expiration.ms`: producers idle this long are forgotten by each partition.
    pub producer_id_expiration_ms: i64,
    /// `producer.id.expiration.check.interval.ms`
    pub producer_id_expiration_check_interval_ms: u64,
    pub rack: Option<String>,
    /// `replica.selector.class`: whether consumers are sent to a replica in their rack.
    pub replica_selector: ReplicaSelector,
    /// Metadata quorum voters by node id, with their controller listener addresses.
    pub voters: BTreeMap<i32, String>,
    pub controller_listen: SocketAddr,
    /// Explicit or derived cluster id; `None` lets a single node pick a random one.
    pub cluster_id: Option<String>,
    /// What quorum members prove to each other; `None` only for a single-node cluster.
    pub cluster_secret: Option<ClusterSecret>,
    /// Where `cluster_secret` came from, for the start-up log (never the secret itself).
    pub cluster_secret_source: Option<String>,
    /// A broker the controller has not heard from for this long is fenced.
    pub broker_session_timeout_ms: u64,
    pub broker_heartbeat_interval_ms: u64,
    /// A follower that has not caught up for this long leaves the ISR.
    pub replica_lag_time_max_ms: u64,
    pub replica_fetch_wait_max_ms: u64,
    pub replica_fetch_max_bytes: i32,
    pub replica_fetch_response_max_bytes: i32,
    pub replica_high_watermark_checkpoint_interval_ms: u64,
    pub auto_leader_rebalance_enable: bool,
    pub leader_imbalance_check_interval_seconds: u64,
    pub controlled_shutdown_enable: bool,
    /// `fetch.max.bytes`: a consumer's Fetch response carries at most this many record bytes,
    /// whatever the request asks (a first batch larger than it still goes whole, KIP-74).
    pub fetch_max_bytes: i32,
    /// `num.io.threads`: fetch disk reads running at once; more wait for a turn.
    pub num_io_threads: usize,
    /// `log.tail.cache.bytes` (Sluice's own): a leader partition keeps this many of its newest
    /// appended bytes in memory, so fetches of what was just appended read no file.
    pub log_tail_cache_bytes: usize,
    /// `log.tail.cache.total.bytes` (Sluice's own): the tail caches of all partitions together.
    pub log_tail_cache_total_bytes: usize,
    /// `max.request.partition.size.limit`: a DescribeTopicPartitions response describes at
    /// most this many partitions; the client pages on with the cursor it is given.
    pub max_request_partition_size_limit: i32,
    /// `num.recovery.threads.per.data.dir`: partition logs being opened at once (Kafka's
    /// default is 2; 8 here, since concurrent fsyncs on one file system share journal commits).
    pub num_recovery_threads_per_data_dir: usize,
    /// This process's open-files limit (`RLIMIT_NOFILE`), once `main` has raised the soft limit
    /// to the hard one; `None` when unknown (then no partition-replica capacity is enforced).
    /// Not a `--set` setting: it is read from the process (`ulimit -n`).
    pub open_files_limit: Option<u64>,
    /// Consumer-group settings (`group.*`, `offsets.retention.minutes`, ...).
    pub group: GroupConfig,
    pub offsets: OffsetsSettings,
    /// `offsets.topic.replication.factor`, lowered to the live brokers like other defaults.
    pub offsets_topic_replication_factor: i16,
    /// `offsets.topic.segment.bytes`
    pub offsets_topic_segment_bytes: i32,
    /// Transaction coordinator settings (`transaction.*`, `transactional.id.expiration.ms`).
    pub txn: TxnConfig,
    /// Client quota measurement (`quota.window.*`).
    pub quota: QuotaConfig,
    /// Every `--set` value, by Kafka name: broker-level defaults for topic configs live here.
    /// Sensitive settings are not among them (see `secret_keys`).
    pub overrides: BTreeMap<String, String>,
    /// The names of the sensitive settings given (passwords, keys): DescribeConfigs lists them
    /// as set, without a value.
    pub secret_keys: Vec<String>,
}

impl BrokerConfig {
    pub fn from_cli(cli: &Cli) -> Result<BrokerConfig, ConfigError> {
        if cli.node_id < 0 {
            return Err(ConfigError::BadNodeId(cli.node_id));
        }
        let ParsedSettings {
            plain: overrides,
            secrets,
        } = parse_settings(&cli.settings)?;
        let get = |key: &str| broker_value(&overrides, key);
        let listeners = Listeners::resolve(&listeners::ListenerSettings {
            listen: cli.listen,
            advertise: cli.advertise.as_deref(),
            listeners: &get("listeners"),
            advertised_listeners: &get("advertised.listeners"),
            security_protocol_map: &get("listener.security.protocol.map"),
            inter_broker_listener_name: &get("inter.broker.listener.name"),
        })?;
        let mut add_scram = Vec::new();
        for given in &cli.add_scram {
            add_scram.extend(security::parse_add_scram(given.expose())?);
        }
        if let Ok(from_env) = std::env::var("SLUICE_ADD_SCRAM") {
            add_scram.extend(security::parse_add_scram(&from_env)?);
        }
        let protocols: Vec<(String, SecurityProtocol)> =
            listeners.all.iter().map(|l| (l.name.clone(), l.protocol)).collect();
        let controller_name = get("controller.listener.names")
            .split(',')
            .map(|n| n.trim().to_ascii_uppercase())
            .find(|n| !n.is_empty())
            .unwrap_or_else(|| "CONTROLLER".to_string());
        let controller_protocol = listeners::protocol_in_map(&get("listener.security.protocol.map"), &controller_name)?
            .unwrap_or(SecurityProtocol::Plaintext);
        let security = security::resolve(
            &security::SettingsView {
                value: &|key| broker_value(&overrides, key),
                is_set: &|key| overrides.contains_key(key) || secrets.contains_key(key),
                secret: &|key| secrets.get(key).cloned(),
            },
            &protocols,
            &listeners.inter_broker,
            (&controller_name, controller_protocol),
            add_scram,
        )?;
        let (voters, controller_listen) = quorum_membership(cli)?;
        let (cluster_secret, cluster_secret_source) = cluster_secret(cli, voters.len())?.unzip();
        let cluster_id = cli
            .cluster_id
            .clone()
            .or_else(|| (!cli.voters.is_empty()).then(|| crate::cluster_id::cluster_id_for_voters(&voters)));
        Ok(BrokerConfig {
            voters,
            controller_listen,
            cluster_id,
            cluster_secret,
            cluster_secret_source,
            broker_session_timeout_ms: parse_num("broker.session.timeout.ms", &get("broker.session.timeout.ms"))?,
            broker_heartbeat_interval_ms: parse_num(
                "broker.heartbeat.interval.ms",
                &get("broker.heartbeat.interval.ms"),
            )?,
            replica_lag_time_max_ms: parse_num("replica.lag.time.max.ms", &get("replica.lag.time.max.ms"))?,
            replica_fetch_wait_max_ms: parse_num("replica.fetch.wait.max.ms", &get("replica.fetch.wait.max.ms"))?,
            replica_fetch_max_bytes: parse_num("replica.fetch.max.bytes", &get("replica.fetch.max.bytes"))?,
            replica_fetch_response_max_bytes: parse_num(
                "replica.fetch.response.max.bytes",
                &get("replica.fetch.response.max.bytes"),
            )?,
            replica_high_watermark_checkpoint_interval_ms: parse_num(
                "replica.high.watermark.checkpoint.interval.ms",
                &get("replica.high.watermark.checkpoint.interval.ms"),
            )?,
            auto_leader_rebalance_enable: get("auto.leader.rebalance.enable") == "true",
            leader_imbalance_check_interval_seconds: parse_num(
                "leader.imbalance.check.interval.seconds",
                &get("leader.imbalance.check.interval.seconds"),
            )?,
            controlled_shutdown_enable: get("controlled.shutdown.enable") == "true",
            fetch_max_bytes: parse_at_least("fetch.max.bytes", &get("fetch.max.bytes"), 0)?,
            num_io_threads: parse_at_least("num.io.threads", &get("num.io.threads"), 1)?,
            log_tail_cache_bytes: parse_num("log.tail.cache.bytes", &get("log.tail.cache.bytes"))?,
            log_tail_cache_total_bytes: parse_num("log.tail.cache.total.bytes", &get("log.tail.cache.total.bytes"))?,
            num_recovery_threads_per_data_dir: parse_at_least(
                "num.recovery.threads.per.data.dir",
                &get("num.recovery.threads.per.data.dir"),
                1,
            )?,
            open_files_limit: None,
            max_request_partition_size_limit: parse_at_least(
                "max.request.partition.size.limit",
                &get("max.request.partition.size.limit"),
                1,
            )?,
            node_id: cli.node_id,
            data_dir: cli.data_dir.clone(),
            listeners,
            security,
            num_partitions: parse_num("num.partitions", &get("num.partitions"))?,
            default_replication_factor: parse_num("default.replication.factor", &get("default.replication.factor"))?,
            auto_create_topics_enable: get("auto.create.topics.enable") == "true",
            delete_topic_enable: get("delete.topic.enable") == "true",
            socket_request_max_bytes: parse_num("socket.request.max.bytes", &get("socket.request.max.bytes"))?,
            queued_max_request_bytes: parse_num("queued.max.request.bytes", &get("queued.max.request.bytes"))?,
            max_in_flight_requests_per_connection: parse_num(
                "max.in.flight.requests.per.connection",
                &get("max.in.flight.requests.per.connection"),
            )?,
            max_in_flight_request_bytes_per_connection: parse_at_least(
                "max.in.flight.request.bytes.per.connection",
                &get("max.in.flight.request.bytes.per.connection"),
                1,
            )?,
            max_connections: parse_at_least("max.connections", &get("max.connections"), 1)?,
            fetch_sessions: SessionSettings {
                max_slots: parse_num(
                    "max.incremental.fetch.session.cache.slots",
                    &get("max.incremental.fetch.session.cache.slots"),
                )?,
                eviction_ms: parse_num(
                    "min.incremental.fetch.session.eviction.ms",
                    &get("min.incremental.fetch.session.eviction.ms"),
                )?,
                max_partitions: parse_num(
                    "fetch.session.cache.max.partitions",
                    &get("fetch.session.cache.max.partitions"),
                )?,
            },
            metrics_listen: parse_metrics_listen(&get("metrics.listen"))?,
            metrics_max_connections: parse_at_least("metrics.max.connections", &get("metrics.max.connections"), 1)?,
            connections_max_idle_ms: parse_num("connections.max.idle.ms", &get("connections.max.idle.ms"))?,
            socket_request_read_timeout_ms: parse_num(
                "socket.request.read.timeout.ms",
                &get("socket.request.read.timeout.ms"),
            )?,
            log_retention_check_interval_ms: parse_num(
                "log.retention.check.interval.ms",
                &get("log.retention.check.interval.ms"),
            )?,
            producer_id_expiration_ms: parse_num("producer.id.expiration.ms", &get("producer.id.expiration.ms"))?,
            producer_id_expiration_check_interval_ms: parse_num(
                "producer.id.expiration.check.interval.ms",
                &get("producer.id.expiration.check.interval.ms"),
            )?,
            rack: Some(get("broker.rack")).filter(|r| !r.is_empty()),
            replica_selector: parse_replica_selector(&get("replica.selector.class"))?,
            group: group_config(&get)?,
            offsets: OffsetsSettings {
                commit_timeout_ms: parse_num("offsets.commit.timeout.ms", &get("offsets.commit.timeout.ms"))?,
                load_buffer_size: parse_num("offsets.load.buffer.size", &get("offsets.load.buffer.size"))?,
                retention_check_interval_ms: parse_num(
                    "offsets.retention.check.interval.ms",
                    &get("offsets.retention.check.interval.ms"),
                )?,
            },
            offsets_topic_replication_factor: parse_num(
                "offsets.topic.replication.factor",
                &get("offsets.topic.replication.factor"),
            )?,
            offsets_topic_segment_bytes: parse_num("offsets.topic.segment.bytes", &get("offsets.topic.segment.bytes"))?,
            quota: quota_config(&get)?,
            txn: txn_config(&get)?,
            secret_keys: secrets.keys().cloned().collect(),
            overrides,
        })
    }

    /// The broker-wide value of a topic config's broker synonym, if set with `--set`.
    pub fn static_override(&self, broker_key: &str) -> Option<&str> {
        self.overrides.get(broker_key).map(String::as_str)
    }

    /// Every broker-level setting with its value and whether it was set explicitly:
    /// what DescribeConfigs shows for the broker resource.
    pub fn describe(&self) -> Vec<(String, String, bool)> {
        let mut out = vec![
            ("node.id".to_string(), self.node_id.to_string(), true),
            ("broker.id".to_string(), self.node_id.to_string(), true),
            ("log.dirs".to_string(), self.data_dir.display().to_string(), true),
            ("listeners".to_string(), self.listeners.describe_bound(), true),
            (
                "advertised.listeners".to_string(),
                self.listeners.describe_advertised(),
                true,
            ),
            (
                "inter.broker.listener.name".to_string(),
                self.listeners.inter_broker.clone(),
                true,
            ),
        ];
        let derived = ["listeners", "advertised.listeners", "inter.broker.listener.name"];
        for setting in BROKER_SETTINGS.iter().filter(|s| !derived.contains(&s.name)) {
            match self.overrides.get(setting.name) {
                Some(v) => out.push((setting.name.to_string(), v.clone(), true)),
                None if self.secret_keys.iter().any(|k| k == setting.name) => {
                    out.push((setting.name.to_string(), String::new(), true))
                }
                None => out.push((setting.name.to_string(), setting.default.to_string(), false)),
            }
        }
        for key in self.overrides.keys().filter(|k| k.starts_with("listener.name.")) {
            out.push((key.clone(), self.overrides[key].clone(), true));
        }
        for key in self.secret_keys.iter().filter(|k| k.starts_with("listener.name.")) {
            out.push((key.clone(), String::new(), true));
        }
        for def in topic_config::DEFS {
            let Some(broker_key) = def.broker_synonym else { continue };
            match self.overrides.get(broker_key) {
                Some(v) => out.push((broker_key.to_string(), v.clone(), true)),
                None => out.push((broker_key.to_string(), def.default.to_string(), false)),
            }
        }
        out
    }
}

/// The secret from --cluster-secret-file, --cluster-secret or SLUICE_CLUSTER_SECRET
/// (trimmed), with where it came from; required when the quorum has more than one voter.
/// Refusing to start without one is deliberate: node ids, the cluster id and addresses are all
/// public, so without a secret anyone who can reach a controller port could join the quorum's
/// conversation. An explicit --cluster-secret-file wins over the environment variable, as a
/// command-line option does in other tools; both options on the command line are refused.
fn cluster_secret(cli: &Cli, voters: usize) -> Result<Option<(ClusterSecret, String)>, ConfigError> {
    let (bytes, from) = match (&cli.cluster_secret_file, &cli.cluster_secret) {
        (Some(_), Some(_)) if !cli.cluster_secret_from_env => return Err(ConfigError::TwoClusterSecrets),
        (Some(path), env) => {
            let ignored = if env.is_some() {
                " (SLUICE_CLUSTER_SECRET is set but ignored)"
            } else {
                ""
            };
            (
                read_secret_file(path)?,
                format!("--cluster-secret-file {}{ignored}", path.display()),
            )
        }
        (None, Some(text)) if cli.cluster_secret_from_env => {
            (text.0.clone().into_bytes(), "SLUICE_CLUSTER_SECRET".to_owned())
        }
        (None, Some(text)) => (text.0.clone().into_bytes(), "--cluster-secret".to_owned()),
        (None, None) if voters > 1 => return Err(ConfigError::NoClusterSecret(voters)),
        (None, None) => return Ok(None),
    };
    match ClusterSecret::new(bytes.trim_ascii()) {
        Ok(secret) => Ok(Some((secret, from))),
        Err(e) => Err(ConfigError::BadClusterSecret {
            from,
            reason: e.to_string(),
        }),
    }
}

fn read_secret_file(path: &std::path::Path) -> Result<Vec<u8>, ConfigError> {
    let io = |source| ConfigError::SecretFile {
        path: path.to_path_buf(),
        source,
    };
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_CLUSTER_SECRET_FILE_BYTES + 1).read_to_end(&mut bytes))
        .map_err(io)?;
    if bytes.len() as u64 > MAX_CLUSTER_SECRET_FILE_BYTES {
        return Err(ConfigError::BadClusterSecret {
            from: format!("--cluster-secret-file {}", path.display()),
            reason: format!(
                "the file is larger than {MAX_CLUSTER_SECRET_FILE_BYTES} bytes; is it the right file? {CREATE_SECRET_HINT}"
            ),
        });
    }
    Ok(bytes)
}

/// The voter set and this node's controller listener. A node alone (no --voters) is a
/// one-voter quorum on an ephemeral loopback port nobody else needs to reach.
fn quorum_membership(cli: &Cli) -> Result<(BTreeMap<i32, String>, SocketAddr), ConfigError> {
    let mut voters = BTreeMap::new();
    for entry in cli.voters.iter().filter(|v| !v.trim().is_empty()) {
        let (id, addr) = entry
            .trim()
            .split_once('@')
            .ok_or_else(|| ConfigError::BadVoter(entry.clone()))?;
        let id: i32 = id.parse().map_err(|_| ConfigError::BadVoter(entry.clone()))?;
        split_host_port(addr).map_err(|_| ConfigError::BadVoter(entry.clone()))?;
        voters.insert(id, addr.to_string());
    }
    if voters.is_empty() {
        let listen = cli
            .controller_listen
            .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)));
        voters.insert(cli.node_id, listen.to_string());
        return Ok((voters, listen));
    }
    let own = voters.get(&cli.node_id).ok_or(ConfigError::NotAVoter(cli.node_id))?;
    let listen = match cli.controller_listen {
        Some(listen) => listen,
        None => std::net::ToSocketAddrs::to_socket_addrs(own.as_str())
            .ok()
            .and_then(|mut addrs| addrs.next())
            .ok_or_else(|| ConfigError::BadControllerListen(own.clone()))?,
    };
    Ok((voters, listen))
}

impl BrokerConfig {
    /// The log cleaner's settings: `log.cleaner.enable`, `log.cleaner.backoff.ms` and
    /// `log.cleaner.dedupe.buffer.size` (types checked when `--set` was parsed).
    pub fn log_cleaner_config(&self) -> CleanerConfig {
        let get = |key: &str| broker_value(&self.overrides, key);
        let defaults = CleanerConfig::default();
        CleanerConfig {
            enable: get("log.cleaner.enable") == "true",
            backoff_ms: get("log.cleaner.backoff.ms")
                .parse::<i64>()
                .map_or(defaults.backoff_ms, |ms| ms.max(1) as u64),
            dedupe_buffer_size: get("log.cleaner.dedupe.buffer.size")
                .parse::<i64>()
                .map_or(defaults.dedupe_buffer_size, |bytes| bytes.max(1) as u64),
        }
    }
}

fn broker_value(overrides: &BTreeMap<String, String>, key: &str) -> String {
    overrides.get(key).cloned().unwrap_or_else(|| {
        BROKER_SETTINGS
            .iter()
            .find(|s| s.name == key)
            .map(|s| s.default.to_string())
            .unwrap_or_default()
    })
}

/// `--set` values by key, the sensitive ones (passwords, keys, JAAS lines) kept apart so
/// that nothing that lists settings can show them.
#[derive(Debug, Default)]
struct ParsedSettings {
    plain: BTreeMap<String, String>,
    secrets: BTreeMap<String, SecretText>,
}

fn parse_settings(settings: &[String]) -> Result<ParsedSettings, ConfigError> {
    let mut out = ParsedSettings::default();
    for setting in settings {
        let (key, value) = setting
            .split_once('=')
            .ok_or_else(|| ConfigError::NotKeyValue(setting.chars().take_while(|c| *c != ' ').take(80).collect()))?;
        let (key, value) = (key.trim(), value.trim());
        let per_listener = security::is_per_listener_key(key);
        let ty = BROKER_SETTINGS
            .iter()
            .find(|s| s.name == key)
            .map(|s| s.ty)
            .or_else(|| topic_config::by_broker_synonym(key).map(|d| d.ty))
            .or_else(|| per_listener.then_some(ConfigType::String))
            .ok_or_else(|| ConfigError::UnknownKey(key.to_string()))?;
        if security::is_sensitive(key) {
            out.secrets.insert(key.to_string(), SecretText(value.to_string()));
            continue;
        }
        ty.validate(value).map_err(|reason| ConfigError::InvalidValue {
            key: key.to_string(),
            value: value.to_string(),
            reason,
        })?;
        // A topic default (`log.segment.bytes`, ...) has its topic config's range.
        if let Some(def) = topic_config::by_broker_synonym(key) {
            topic_config::validate(def.name, value).map_err(|e| ConfigError::InvalidValue {
                key: key.to_string(),
                value: value.to_string(),
                reason: match e {
                    topic_config::TopicConfigError::Invalid { reason, .. } => reason,
                    other => other.to_string(),
                },
            })?;
        }
        out.plain.insert(key.to_string(), value.to_string());
    }
    Ok(out)
}

fn parse_num<T: std::str::FromStr>(key: &str, value: &str) -> Result<T, ConfigError> {
    value.parse().map_err(|_| ConfigError::InvalidValue {
        key: key.to_string(),
        value: value.to_string(),
        reason: "not a number in range".to_string(),
    })
}

/// A number that must be at least `min` (Kafka's `atLeast` validator).
fn parse_at_least<T: std::str::FromStr + PartialOrd + std::fmt::Display>(
    key: &str,
    value: &str,
    min: T,
) -> Result<T, ConfigError> {
    let n: T = parse_num(key, value)?;
    if n < min {
        return Err(ConfigError::InvalidValue {
            key: key.to_string(),
            value: value.to_string(),
            reason: format!("must be at least {min}"),
        });
    }
    Ok(n)
}

/// What `sluice settings` prints: every name `--set` accepts with its default and meaning,
/// the broker settings first, then the broker-wide defaults of topic configs.
pub fn settings_table() -> String {
    let mut rows: Vec<(&str, &str, &str)> = BROKER_SETTINGS.iter().map(|s| (s.name, s.default, s.doc)).collect();
    let topic_defaults = topic_config::DEFS
        .iter()
        .filter_map(|d| d.broker_synonym.map(|name| (name, d.default, d.doc)));
    let first_topic_default = rows.len();
    rows.extend(topic_defaults);
    let width = rows.iter().map(|(name, _, _)| name.len()).max().unwrap_or(0);
    let mut out = String::from("Broker settings (--set NAME=VALUE), with their defaults:\n\n");
    for (i, (name, default, doc)) in rows.iter().enumerate() {
        if i == first_topic_default {
            out.push_str(
                "\nBroker-wide defaults of topic configs (also dynamic: kafka-configs --alter --entity-type brokers):\n\n",
            );
        }
        let default = if default.is_empty() { "(none)" } else { default };
        out.push_str(&format!("  {name:<width$}  {doc} [default: {default}]\n"));
    }
    out
}

fn split_host_port(addr: &str) -> Result<(String, i32), ConfigError> {
    let (host, port) = addr
        .rsplit_once(':')
        .ok_or_else(|| ConfigError::BadAdvertise(addr.to_string()))?;
    let port: u16 = port.parse().map_err(|_| ConfigError::BadAdvertise(addr.to_string()))?;
    if host.is_empty() {
        return Err(ConfigError::BadAdvertise(addr.to_string()));
    }
    Ok((host.trim_matches(['[', ']']).to_string(), i32::from(port)))
}

/// The fetch session cache's bounds (`fetch_session`): `max.incremental.fetch.session.cache.slots`,
/// `min.incremental.fetch.session.eviction.ms`, `fetch.session.cache.max.partitions`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionSettings {
    pub max_slots: usize,
    pub eviction_ms: i64,
    pub max_partitions: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cli(args: &[&str]) -> Cli {
        Cli::from_args(std::iter::once("sluice").chain(args.iter().copied())).unwrap()
    }

    #[test]
    fn every_accepted_setting_is_listed_with_a_meaning() {
        let table = settings_table();
        for setting in BROKER_SETTINGS {
            assert!(!setting.doc.is_empty(), "{} has no meaning", setting.name);
            assert!(
                table.contains(&format!("  {} ", setting.name)),
                "{} is not listed",
                setting.name
            );
            if !setting.default.is_empty() && setting.ty != ConfigType::Password {
                parse_settings(&[format!("{}={}", setting.name, setting.default)])
                    .unwrap_or_else(|e| panic!("{}'s default is refused: {e}", setting.name));
            }
        }
        for def in topic_config::DEFS.iter().filter(|d| d.broker_synonym.is_some()) {
            assert!(table.contains(&format!("  {} ", def.broker_synonym.unwrap())));
        }
        assert!(table.contains("log.retention.ms"));
    }

    #[test]
    fn defaults_match_the_readme() {
        let config = BrokerConfig::from_cli(&cli(&[])).unwrap();
        assert_eq!(config.node_id, 1);
        assert_eq!(config.listeners.describe_bound(), "PLAINTEXT://127.0.0.1:9092");
        assert_eq!(config.listeners.describe_advertised(), "PLAINTEXT://127.0.0.1:9092");
        assert_eq!(config.num_partitions, 1);
        assert_eq!(config.default_replication_factor, 3);
        assert!(config.auto_create_topics_enable);
        assert_eq!(config.socket_request_max_bytes, 104_857_600);
    }

    #[test]
    fn quota_windows_default_to_kafkas_and_refuse_zero() {
        let config = BrokerConfig::from_cli(&cli(&[])).unwrap();
        assert_eq!(config.quota, QuotaConfig::default());
        assert_eq!((config.quota.window_num, config.quota.window_ms()), (11, 1000));
        let set = BrokerConfig::from_cli(&cli(&["--set", "quota.window.size.seconds=2"])).unwrap();
        assert_eq!(set.quota.window_ms(), 2000);
        assert!(matches!(
            BrokerConfig::from_cli(&cli(&["--set", "quota.window.num=0"])),
            Err(ConfigError::InvalidValue { .. })
        ));
    }

    #[test]
    fn set_uses_kafka_names_and_rejects_typos_and_bad_values() {
        let config =
            BrokerConfig::from_cli(&cli(&["--set", "num.partitions=3", "--set", "log.retention.ms=1000"])).unwrap();
        assert_eq!(config.num_partitions, 3);
        assert_eq!(config.static_override("log.retention.ms"), Some("1000"));
        assert!(matches!(
            BrokerConfig::from_cli(&cli(&["--set", "num.partitons=3"])),
            Err(ConfigError::UnknownKey(_))
        ));
        assert!(matches!(
            BrokerConfig::from_cli(&cli(&["--set", "num.partitions=lots"])),
            Err(ConfigError::InvalidValue { .. })
        ));
        assert!(matches!(
            BrokerConfig::from_cli(&cli(&["--set", "oops"])),
            Err(ConfigError::NotKeyValue(_))
        ));
    }

    #[test]
    fn voters_give_the_controller_listener_and_a_shared_cluster_id() {
        let voters = "1@127.0.0.1:9093,2@127.0.0.1:9193,3@127.0.0.1:9293";
        let secret = "a-test-secret-of-enough-bytes";
        let one = BrokerConfig::from_cli(&cli(&[
            "--node-id",
            "1",
            "--voters",
            voters,
            "--cluster-secret",
            secret,
        ]))
        .unwrap();
        let two = BrokerConfig::from_cli(&cli(&[
            "--node-id",
            "2",
            "--voters",
            voters,
            "--cluster-secret",
            secret,
        ]))
        .unwrap();
        assert_eq!(one.controller_listen.to_string(), "127.0.0.1:9093");
        assert_eq!(two.controller_listen.to_string(), "127.0.0.1:9193");
        assert_eq!(one.voters.len(), 3);
        assert!(one.cluster_id.is_some());
        assert_eq!(one.cluster_id, two.cluster_id);
        assert!(matches!(
            BrokerConfig::from_cli(&cli(&[
                "--node-id",
                "4",
                "--voters",
                voters,
                "--cluster-secret",
                secret
            ])),
            Err(ConfigError::NotAVoter(4))
        ));
        assert!(matches!(
            BrokerConfig::from_cli(&cli(&["--voters", "1-127.0.0.1:9093"])),
            Err(ConfigError::BadVoter(_))
        ));
    }

    #[test]
    fn a_multi_voter_cluster_needs_a_cluster_secret_of_at_least_16_bytes() {
        let voters = "1@127.0.0.1:9093,2@127.0.0.1:9193";
        let err = BrokerConfig::from_cli(&cli(&["--voters", voters])).unwrap_err();
        assert!(matches!(err, ConfigError::NoClusterSecret(2)), "{err}");
        assert!(err.to_string().contains("head -c 32 /dev/urandom"), "{err}");

        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("cluster-secret");
        std::fs::write(&file, "  short\n").unwrap();
        let path = file.to_str().unwrap();
        let err = BrokerConfig::from_cli(&cli(&["--voters", voters, "--cluster-secret-file", path])).unwrap_err();
        assert!(err.to_string().contains("5 bytes long"), "{err}");

        std::fs::write(&file, "c2x1aWNlLWNsdXN0ZXItc2VjcmV0LXRlc3Q=\n").unwrap();
        let config = BrokerConfig::from_cli(&cli(&["--voters", voters, "--cluster-secret-file", path])).unwrap();
        let shown = format!("{config:?}");
        assert!(config.cluster_secret.is_some());
        assert!(!shown.contains("c2x1aWNl"), "the secret leaked into Debug output");

        let err = BrokerConfig::from_cli(&cli(&[
            "--voters",
            voters,
            "--cluster-secret-file",
            "/nonexistent/secret",
        ]))
        .unwrap_err();
        assert!(matches!(err, ConfigError::SecretFile { .. }), "{err}");
        // A single node needs none.
        assert!(BrokerConfig::from_cli(&cli(&[])).unwrap().cluster_secret.is_none());
    }

    #[test]
    fn a_cluster_secret_file_on_the_command_line_wins_over_the_environment_but_not_over_another_option() {
        let voters = "1@127.0.0.1:9093,2@127.0.0.1:9193";
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("cluster-secret");
        std::fs::write(&file, "c2x1aWNlLWNsdXN0ZXItc2VjcmV0LXRlc3Q=\n").unwrap();
        let path = file.to_str().unwrap();

        // As clap fills it from SLUICE_CLUSTER_SECRET (the variable itself is not set here:
        // tests share the process environment).
        let mut from_env = cli(&["--voters", voters, "--cluster-secret-file", path]);
        from_env.cluster_secret = Some(SecretText("an-environment-secret-long-enough".into()));
        from_env.cluster_secret_from_env = true;
        let config = BrokerConfig::from_cli(&from_env).unwrap();
        let source = config.cluster_secret_source.unwrap();
        assert!(source.starts_with(&format!("--cluster-secret-file {path}")), "{source}");
        assert!(source.contains("SLUICE_CLUSTER_SECRET is set but ignored"), "{source}");
        assert!(!source.contains("an-environment-secret"), "the secret leaked: {source}");

        let both = cli(&[
            "--voters",
            voters,
            "--cluster-secret-file",
            path,
            "--cluster-secret",
            "a-command-line-secret-long-enough",
        ]);
        assert!(!both.cluster_secret_from_env);
        let err = BrokerConfig::from_cli(&both).unwrap_err();
        assert!(matches!(err, ConfigError::TwoClusterSecrets), "{err}");

        let option = cli(&[
            "--voters",
            voters,
            "--cluster-secret",
            "a-command-line-secret-long-enough",
        ]);
        let config = BrokerConfig::from_cli(&option).unwrap();
        assert_eq!(config.cluster_secret_source.as_deref(), Some("--cluster-secret"));
    }

    #[test]
    fn log_cleaner_settings_use_kafkas_names_and_defaults() {
        let defaults = BrokerConfig::from_cli(&cli(&[])).unwrap().log_cleaner_config();
        assert_eq!(defaults, CleanerConfig::default());
        assert_eq!(
            (defaults.enable, defaults.backoff_ms, defaults.dedupe_buffer_size),
            (true, 15_000, 134_217_728)
        );
        let set = BrokerConfig::from_cli(&cli(&[
            "--set",
            "log.cleaner.enable=false",
            "--set",
            "log.cleaner.backoff.ms=200",
            "--set",
            "log.cleaner.dedupe.buffer.size=1048576",
        ]))
        .unwrap()
        .log_cleaner_config();
        assert_eq!(
            (set.enable, set.backoff_ms, set.dedupe_buffer_size),
            (false, 200, 1_048_576)
        );
    }

    #[test]
    fn log_tail_cache_bounds_default_and_can_be_set() {
        let defaults = BrokerConfig::from_cli(&cli(&[])).unwrap();
        assert_eq!(
            (defaults.log_tail_cache_bytes, defaults.log_tail_cache_total_bytes),
            (1 << 20, 16 << 20)
        );
        let set = BrokerConfig::from_cli(&cli(&[
            "--set",
            "log.tail.cache.bytes=0",
            "--set",
            "log.tail.cache.total.bytes=4096",
        ]))
        .unwrap();
        assert_eq!((set.log_tail_cache_bytes, set.log_tail_cache_total_bytes), (0, 4096));
        assert!(matches!(
            BrokerConfig::from_cli(&cli(&["--set", "log.tail.cache.bytes=-1"])),
            Err(ConfigError::InvalidValue { .. })
        ));
    }

    #[test]
    fn fetch_caps_use_kafkas_names_and_defaults() {
        let defaults = BrokerConfig::from_cli(&cli(&[])).unwrap();
        assert_eq!(defaults.fetch_max_bytes, 57_671_680, "Kafka's 55 MiB");
        assert_eq!(defaults.num_io_threads, 8);
        assert_eq!(defaults.replica_fetch_response_max_bytes, 10_485_760);
        let set =
            BrokerConfig::from_cli(&cli(&["--set", "fetch.max.bytes=1048576", "--set", "num.io.threads=2"])).unwrap();
        assert_eq!((set.fetch_max_bytes, set.num_io_threads), (1_048_576, 2));
        assert!(matches!(
            BrokerConfig::from_cli(&cli(&["--set", "num.io.threads=0"])),
            Err(ConfigError::InvalidValue { .. })
        ));
        assert!(matches!(
            BrokerConfig::from_cli(&cli(&["--set", "fetch.max.bytes=-1"])),
            Err(ConfigError::InvalidValue { .. })
        ));
    }

    #[test]
    fn a_single_node_is_its_own_voter() {
        let config = BrokerConfig::from_cli(&cli(&[])).unwrap();
        assert_eq!(config.voters.keys().copied().collect::<Vec<_>>(), vec![1]);
        assert_eq!(config.controller_listen.port(), 0);
        assert!(config.cluster_id.is_none());
    }

    #[test]
    fn advertise_overrides_listen() {
        let config = BrokerConfig::from_cli(&cli(&["--advertise", "broker1.example:19092"])).unwrap();
        assert_eq!(
            config.listeners.describe_advertised(),
            "PLAINTEXT://broker1.example:19092"
        );
        assert!(BrokerConfig::from_cli(&cli(&["--advertise", "nohost"])).is_err());
    }

    #[test]
    fn named_listeners_come_from_set() {
        let config = BrokerConfig::from_cli(&cli(&[
            "--set",
            "listeners=INTERNAL://127.0.0.1:9092,EXTERNAL://127.0.0.1:19092",
            "--set",
            "advertised.listeners=INTERNAL://sluice1:9092,EXTERNAL://localhost:19092",
            "--set",
            "listener.security.protocol.map=INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
            "--set",
            "inter.broker.listener.name=INTERNAL",
        ]))
        .unwrap();
        assert_eq!(config.listeners.inter_broker, "INTERNAL");
        let described = config.describe();
        let value = |key: &str| described.iter().find(|(k, _, _)| k == key).map(|(_, v, _)| v.clone());
        assert_eq!(
            value("advertised.listeners").as_deref(),
            Some("INTERNAL://sluice1:9092,EXTERNAL://localhost:19092")
        );
        assert_eq!(
            value("listener.security.protocol.map").as_deref(),
            Some("INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT")
        );
        assert_eq!(described.iter().filter(|(k, _, _)| k == "listeners").count(), 1);
    }

    #[test]
    fn security_settings_use_kafkas_names_per_listener() {
        let config = BrokerConfig::from_cli(&cli(&[
            "--set",
            "listeners=SASL_SSL://127.0.0.1:9093,INTERNAL://127.0.0.1:9092",
            "--set",
            "listener.security.protocol.map=SASL_SSL:SASL_SSL,INTERNAL:SSL",
            "--set",
            "inter.broker.listener.name=INTERNAL",
            "--set",
            "ssl.keystore.location=/etc/sluice/broker.pem",
            "--set",
            "ssl.keystore.password=hunter2",
            "--set",
            "listener.name.internal.ssl.client.auth=required",
            "--set",
            "listener.name.internal.ssl.truststore.location=/etc/sluice/ca.pem",
            "--set",
            "sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN",
            "--set",
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "--set",
            "super.users=User:admin;User:ops",
        ]))
        .unwrap();
        let sasl = config.security.listener("SASL_SSL").unwrap();
        assert_eq!(sasl.protocol, SecurityProtocol::SaslSsl);
        assert_eq!(
            sasl.sasl_mechanisms,
            vec![SaslMechanism::ScramSha512, SaslMechanism::Plain]
        );
        assert_eq!(sasl.tls.as_ref().unwrap().client_auth, security::ClientAuth::None);
        let internal = config.security.listener("INTERNAL").unwrap();
        let tls = internal.tls.as_ref().unwrap();
        assert_eq!(
            tls.client_auth,
            security::ClientAuth::Required,
            "the listener's own value wins"
        );
        assert!(internal.sasl_mechanisms.is_empty());
        assert_eq!(
            config.security.authorizer.as_ref().unwrap().super_users,
            vec!["User:admin", "User:ops"]
        );
        assert!(
            !format!("{config:?}").contains("hunter2"),
            "a password leaked into Debug output"
        );
        let described = config.describe();
        let password = described.iter().find(|(k, _, _)| k == "ssl.keystore.password").unwrap();
        assert_eq!(
            (password.1.as_str(), password.2),
            ("", true),
            "listed as set, without its value"
        );
    }

    #[test]
    fn the_replica_selector_is_one_of_kafkas_two_by_class_name() {
        let selector = |value: &str| {
            BrokerConfig::from_cli(&cli(&["--set", &format!("replica.selector.class={value}")]))
                .map(|c| c.replica_selector)
                .map_err(|e| e.to_string())
        };
        assert_eq!(
            BrokerConfig::from_cli(&cli(&[])).unwrap().replica_selector,
            ReplicaSelector::Leader
        );
        assert_eq!(selector(RACK_AWARE_REPLICA_SELECTOR), Ok(ReplicaSelector::RackAware));
        assert_eq!(selector(LEADER_SELECTOR), Ok(ReplicaSelector::Leader));
        let refused = selector("com.example.NearestSelector").unwrap_err();
        assert!(
            refused.contains("com.example.NearestSelector") && refused.contains(RACK_AWARE_REPLICA_SELECTOR),
            "{refused}"
        );
    }

    #[test]
    fn security_settings_that_cannot_work_are_refused_with_what_to_do() {
        let error = |args: &[&str]| BrokerConfig::from_cli(&cli(args)).unwrap_err().to_string();
        let sasl = ["--set", "listener.security.protocol.map=PLAINTEXT:SASL_PLAINTEXT"];
        let with = |extra: &[&'static str]| -> Vec<&'static str> { sasl.iter().chain(extra).copied().collect() };
        assert!(
            error(&with(&["--set", "sasl.enabled.mechanisms=GSSAPI"])).contains("GSSAPI (Kerberos) is not supported")
        );
        assert!(error(&with(&["--set", "sasl.enabled.mechanisms=OAUTHBEARER"]))
            .contains("sasl.oauthbearer.jwks.endpoint.url"));
        assert!(
            error(&with(&["--set", "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512"]))
                .contains("set listener.name.plaintext.scram-sha-512.sasl.jaas.config")
        );
        let ssl = ["--set", "listener.security.protocol.map=PLAINTEXT:SSL"];
        assert!(error(&ssl).contains("has no certificate"));
        let jks: Vec<&str> = ssl
            .iter()
            .copied()
            .chain([
                "--set",
                "ssl.keystore.location=/k.jks",
                "--set",
                "ssl.keystore.type=JKS",
            ])
            .collect();
        let refusal = error(&jks);
        assert!(
            refusal.contains("keytool -importkeystore") && refusal.contains("-deststoretype PKCS12"),
            "{refusal}"
        );
        let bad_protocol: Vec<&str> = ssl
            .iter()
            .copied()
            .chain([
                "--set",
                "ssl.keystore.location=/k.pem",
                "--set",
                "ssl.enabled.protocols=TLSv1.1",
            ])
            .collect();
        assert!(error(&bad_protocol).contains("TLSv1.2 and TLSv1.3"));
        assert!(error(&["--set", "authorizer.class.name=com.example.Custom"]).contains("StandardAuthorizer"));
        assert!(error(&[
            "--set",
            "authorizer.class.name=x.StandardAuthorizer",
            "--set",
            "super.users=admin"
        ])
        .contains("StandardAuthorizer"));
        assert!(error(&[
            "--set",
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "--set",
            "super.users=admin"
        ])
        .contains("Type:name"));
    }

    #[test]
    fn the_controller_listener_mapped_to_ssl_gives_the_quorum_mutual_tls() {
        let voters = [
            "--voters",
            "1@127.0.0.1:9093,2@127.0.0.1:9193",
            "--cluster-secret",
            "a-test-secret-of-enough-bytes",
        ];
        let with = |extra: &[&'static str]| -> Vec<&'static str> { voters.iter().chain(extra).copied().collect() };
        let config = BrokerConfig::from_cli(&cli(&with(&[
            "--set",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:SSL",
            "--set",
            "listener.name.controller.ssl.keystore.location=/q.pem",
            "--set",
            "ssl.truststore.location=/ca.pem",
        ])))
        .unwrap();
        let tls = config.security.controller_tls.as_ref().unwrap();
        assert_eq!(
            tls.client_auth,
            security::ClientAuth::Required,
            "quorum members always show a certificate"
        );
        assert_eq!(tls.keystore_location.as_deref(), Some(std::path::Path::new("/q.pem")));
        assert!(BrokerConfig::from_cli(&cli(&voters))
            .unwrap()
            .security
            .controller_tls
            .is_none());
        let error = |extra: &[&'static str]| BrokerConfig::from_cli(&cli(&with(extra))).unwrap_err().to_string();
        assert!(error(&[
            "--set",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:SSL",
            "--set",
            "ssl.keystore.location=/q.pem"
        ])
        .contains("needs a truststore"));
        assert!(error(&[
            "--set",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_SSL"
        ])
        .contains("PLAINTEXT or SSL"));
    }
}

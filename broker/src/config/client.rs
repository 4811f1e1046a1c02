//! The command line of the operator's client commands (`sluice topic | cluster | group`):
//! their flags and subcommands only; `crate::cli` carries them out.

use std::path::PathBuf;

use clap::{Args, Subcommand};

/// Where the client commands look for a broker when nothing says otherwise: the address a
/// plain `sluice` listens on.
pub const DEFAULT_BOOTSTRAP: &str = "127.0.0.1:9092";

/// How a client command prints its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Aligned tables for people.
    Table,
    /// One JSON document for scripts (one per record for `consume` and `produce -v`).
    Json,
}

/// `--format`: `table`, `json`, or for `consume` a template of kcat's placeholders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutputFormat {
    Report(Format),
    /// `%t` topic, `%p` partition, `%o` offset, `%T` timestamp (ms), `%k` key, `%K` key length,
    /// `%s` value, `%S` value length, `%h` headers (`k=v,...`), `%%`, and `\n`, `\t`, `\\`.
    Template(String),
}

impl std::str::FromStr for OutputFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "table" => Ok(OutputFormat::Report(Format::Table)),
            "json" => Ok(OutputFormat::Report(Format::Json)),
            t if t.contains('%') => Ok(OutputFormat::Template(t.to_owned())),
            other => Err(format!(
                "{other:?} is not table, json, or a consume template with placeholders such as '%k %s\\n'"
            )),
        }
    }
}

/// Where and how the client commands reach the cluster. Every flag works after the
/// subcommand too (`sluice topic list --bootstrap host:9092`).
#[derive(Debug, Clone, Args)]
pub struct ClientArgs {
    /// Brokers to ask first, `host:port,...`; the rest of the cluster is found through them.
    /// Without it: `bootstrap.servers` from --command-config, else 127.0.0.1:9092.
    #[arg(
        long,
        short = 'b',
        global = true,
        env = "SLUICE_BOOTSTRAP",
        value_name = "HOST:PORT,..."
    )]
    pub bootstrap: Option<String>,

    /// A Kafka client properties file (`bootstrap.servers`, `security.protocol`,
    /// `sasl.mechanism`, `sasl.username`/`sasl.password` or `sasl.jaas.config`,
    /// `ssl.ca.location`, and `ssl.certificate.location` with `ssl.key.location` for mutual
    /// TLS): the file `kafka-topics.sh --command-config` takes.
    #[arg(long, global = true, value_name = "PATH")]
    pub command_config: Option<PathBuf>,

    /// `table` for people, `json` for scripts; `consume` also takes a template of kcat's
    /// placeholders: `%t` topic, `%p` partition, `%o` offset, `%T` timestamp, `%k` key,
    /// `%s` value, `%h` headers, `%K`/`%S` key/value length (e.g. `'%p:%o %k=%s\n'`).
    #[arg(long, global = true, default_value = "table", value_name = "table|json|TEMPLATE")]
    pub format: OutputFormat,

    /// How long one request may take before the command gives up on it.
    #[arg(long, global = true, default_value_t = 15_000, value_name = "MS")]
    pub timeout_ms: u64,
}

#[derive(Debug, Clone, Subcommand)]
pub enum TopicCommand {
    /// Every topic with its partition count and replication factor.
    List,
    /// A topic's partitions (leader, replicas, ISR, offsets) and its settings that differ from
    /// the defaults.
    Describe { topic: String },
    /// Creates a topic; partitions and replication factor default to the brokers'
    /// `num.partitions` and `default.replication.factor`.
    Create {
        topic: String,
        #[arg(long, short = 'p')]
        partitions: Option<i32>,
        #[arg(long, short = 'r')]
        replication_factor: Option<i16>,
        /// A topic setting, `key=value` (e.g. `cleanup.policy=compact`); repeat for several.
        #[arg(long = "config", short = 'c', value_name = "KEY=VALUE")]
        configs: Vec<String>,
    },
    /// Sets (`--set key=value`) or removes (`--delete key`, back to the default) topic settings.
    AlterConfig {
        topic: String,
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
        #[arg(long = "delete", value_name = "KEY")]
        delete: Vec<String>,
    },
    /// Raises a topic's partition count to `--total`.
    AddPartitions {
        topic: String,
        /// The partition count afterwards (as `kafka-topics.sh --alter --partitions`).
        #[arg(long)]
        total: i32,
    },
    /// Deletes topics and all their records.
    Delete {
        #[arg(required = true)]
        topics: Vec<String>,
    },
}

#[derive(Debug, Clone, Subcommand)]
pub enum ClusterCommand {
    /// Brokers, the controller, the metadata quorum and partitions that need attention.
    Info,
    /// Checks that every broker is up, every partition has a leader and a full ISR, and the
    /// quorum has a leader; exits 1 when anything is wrong (for scripts and probes).
    Health,
    /// Broker settings: `get` describes them, `set` changes the ones brokers take at runtime.
    #[command(subcommand)]
    Config(ClusterConfigCommand),
}

#[derive(Debug, Clone, Subcommand)]
pub enum ClusterConfigCommand {
    /// A broker's settings with their values and where each comes from (all, or KEYs).
    Get {
        keys: Vec<String>,
        /// The broker to describe (default: the first broker the cluster lists).
        #[arg(long)]
        broker: Option<i32>,
        /// Only the cluster-wide dynamic settings (Kafka's `--entity-default`).
        #[arg(long, conflicts_with = "broker")]
        cluster_default: bool,
    },
    /// Sets (`KEY=VALUE`) or removes (`--delete KEY`) dynamic settings, cluster-wide unless
    /// --broker names one broker.
    Set {
        #[arg(value_name = "KEY=VALUE")]
        settings: Vec<String>,
        #[arg(long = "delete", value_name = "KEY")]
        delete: Vec<String>,
        #[arg(long)]
        broker: Option<i32>,
    },
}

#[derive(Debug, Clone, Subcommand)]
pub enum GroupCommand {
    /// Every consumer group with its state.
    List,
    /// A group's state and members, and per partition its committed offset, log end and lag.
    Describe { group: String },
    /// Moves a group's committed offsets (a dry run that prints the plan unless --execute);
    /// the group must have no active members, as with kafka-consumer-groups.sh.
    ResetOffsets(ResetOffsetsArgs),
    /// Deletes groups that have no active members, with their committed offsets.
    Delete {
        #[arg(required = true)]
        groups: Vec<String>,
    },
}

/// `sluice group reset-offsets`: which partitions, and where to.
#[derive(Debug, Clone, Args)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["to_earliest", "to_latest", "to_offset", "to_datetime", "shift_by"])))]
#[command(group(clap::ArgGroup::new("scope").required(true).args(["topic", "all_topics"])))]
pub struct ResetOffsetsArgs {
    pub group: String,
    /// Reset this topic's partitions (repeat for several).
    #[arg(long)]
    pub topic: Vec<String>,
    /// Reset every topic the group has committed offsets for.
    #[arg(long)]
    pub all_topics: bool,
    /// To each partition's log start.
    #[arg(long)]
    pub to_earliest: bool,
    /// To each partition's end (skipping everything not yet read).
    #[arg(long)]
    pub to_latest: bool,
    /// To this offset (clamped to the log's start and end).
    #[arg(long, value_name = "OFFSET")]
    pub to_offset: Option<i64>,
    /// To the first record at or after this time: `2026-12-05T10:00:00Z` (UTC, optional
    /// fraction) or milliseconds since 1970.
    #[arg(long, value_name = "TIME")]
    pub to_datetime: Option<String>,
    /// By this many records from the committed offset (negative: back), clamped to the log.
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    pub shift_by: Option<i64>,
    /// Commit the new offsets; without it the plan is only printed.
    #[arg(long)]
    pub execute: bool,
}

#[derive(Debug, Clone, Subcommand)]
pub enum PartitionCommand {
    /// Moves leadership to each partition's preferred replica (the first of its replicas), or
    /// with --unclean to any live replica of a partition whose in-sync ones are all down.
    ElectLeaders {
        /// Only this topic's partitions (default: every partition).
        #[arg(long)]
        topic: Option<String>,
        /// Only these partitions of --topic.
        #[arg(long = "partition", requires = "topic")]
        partitions: Vec<i32>,
        /// Unclean election: may lose acknowledged records; use only to bring back an offline
        /// partition.
        #[arg(long)]
        unclean: bool,
    },
    /// Moves a partition to other brokers: `TOPIC:PARTITION --replicas 1,2,3` (the first is
    /// the preferred leader), or `--cancel` an ongoing move.
    Reassign {
        #[arg(value_name = "TOPIC:PARTITION")]
        partition: String,
        #[arg(long, value_delimiter = ',', required_unless_present = "cancel")]
        replicas: Vec<i32>,
        #[arg(long, conflicts_with = "replicas")]
        cancel: bool,
    },
    /// Moves every replica on broker --from (of --topic, or of every topic) to broker --to,
    /// e.g. to empty a broker before it leaves.
    MoveToBroker {
        #[arg(long)]
        from: i32,
        #[arg(long)]
        to: i32,
        #[arg(long)]
        topic: Option<String>,
    },
    /// The reassignments in progress, with the replicas being added and removed.
    Reassignments,
}

/// `sluice produce`: records from stdin, one per line.
#[derive(Debug, Clone, Args)]
pub struct ProduceArgs {
    pub topic: String,
    /// Split each line at the first DELIM into key and value (no DELIM in a line: no key).
    #[arg(long, short = 'K', value_name = "DELIM")]
    pub key_delimiter: Option<String>,
    /// `all` (every in-sync replica, the default as in Kafka 3+) or `1` (the leader alone).
    #[arg(long, default_value = "all", value_parser = ["all", "-1", "1"])]
    pub acks: String,
    /// Compress each batch: none, gzip, snappy, lz4 or zstd.
    #[arg(long, short = 'z', default_value = "none", value_parser = ["none", "gzip", "snappy", "lz4", "zstd"])]
    pub compression: String,
    /// Write every record to this partition (default: by key as Kafka's Java client does,
    /// keyless records spread batch by batch).
    #[arg(long, short = 'p')]
    pub partition: Option<i32>,
    /// A header `key=value` on every record; repeat for several.
    #[arg(long = "header", short = 'H', value_name = "KEY=VALUE")]
    pub headers: Vec<String>,
    /// Print each record's partition and offset once acknowledged.
    #[arg(long, short = 'v')]
    pub verbose: bool,
}

/// `sluice consume`: records to stdout.
#[derive(Debug, Clone, Args)]
pub struct ConsumeArgs {
    pub topic: String,
    /// Read only these partitions (repeat; default all).
    #[arg(long = "partition", short = 'p')]
    pub partitions: Vec<i32>,
    /// Where to start: `beginning`, `end`, `offset:N`, or `timestamp:MS` (the first record at
    /// or after that time). With --group, only partitions without a committed offset.
    #[arg(long, short = 'o', default_value = "beginning")]
    pub from: String,
    /// Stop after this many records.
    #[arg(long, short = 'c')]
    pub count: Option<u64>,
    /// Stop once every partition is read to its end instead of waiting for more.
    #[arg(long, short = 'e')]
    pub exit_at_end: bool,
    /// Start at the group's committed offsets and commit what was printed (the group's
    /// offsets, without joining it: a group that has active members refuses the commits).
    #[arg(long, short = 'G')]
    pub group: Option<String>,
    /// With `table` output, print KEY DELIM VALUE per record instead of the value alone.
    #[arg(long, short = 'K', value_name = "DELIM")]
    pub key_delimiter: Option<String>,
    /// `read_committed` (records of aborted transactions skipped; librdkafka's default) or
    /// `read_uncommitted`.
    #[arg(long, default_value = "read_committed", value_parser = ["read_committed", "read_uncommitted"])]
    pub isolation: String,
}

/// The client subcommands of `sluice`, each with the flags they share.
#[derive(Debug, Clone, Subcommand)]
pub enum ClientCommand {
    /// Lists, describes, creates, alters and deletes topics.
    Topic {
        #[command(flatten)]
        client: ClientArgs,
        #[command(subcommand)]
        command: TopicCommand,
    },
    /// The cluster's brokers, controller and quorum; `health` for probes.
    Cluster {
        #[command(flatten)]
        client: ClientArgs,
        #[command(subcommand)]
        command: ClusterCommand,
    },
    /// Consumer groups: list, describe with lag.
    Group {
        #[command(flatten)]
        client: ClientArgs,
        #[command(subcommand)]
        command: GroupCommand,
    },
    /// Leader elections and reassignments of partitions.
    Partition {
        #[command(flatten)]
        client: ClientArgs,
        #[command(subcommand)]
        command: PartitionCommand,
    },
    /// Writes lines from stdin to a topic, one record each (as `kcat -P`).
    Produce {
        #[command(flatten)]
        client: ClientArgs,
        #[command(flatten)]
        produce: ProduceArgs,
    },
    /// Prints a topic's records (as `kcat -C`, `-G` with --group).
    Consume {
        #[command(flatten)]
        client: ClientArgs,
        #[command(flatten)]
        consume: ConsumeArgs,
    },
}

impl ClientCommand {
    /// The flags every client command shares.
    pub fn args(&self) -> &ClientArgs {
        match self {
            ClientCommand::Topic { client, .. }
            | ClientCommand::Cluster { client, .. }
            | ClientCommand::Group { client, .. }
            | ClientCommand::Partition { client, .. }
            | ClientCommand::Produce { client, .. }
            | ClientCommand::Consume { client, .. } => client,
        }
    }
}

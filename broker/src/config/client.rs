//! The command line of the operator's client commands (`sluice topic | cluster | group`):
//! their flags and subcommands only; `crate::cli` carries them out.

use std::path::PathBuf;

use clap::{Args, Subcommand};

/// Where the client commands look for a broker when nothing says otherwise: the address a
/// plain `sluice` listens on.
pub const DEFAULT_BOOTSTRAP: &str = "127.0.0.1:9092";

/// How a client command prints its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned tables for people.
    Table,
    /// One JSON document for scripts.
    Json,
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
    /// `ssl.ca.location`): the file `kafka-topics.sh --command-config` takes.
    #[arg(long, global = true, value_name = "PATH")]
    pub command_config: Option<PathBuf>,

    /// `table` for people, `json` for scripts.
    #[arg(long, global = true, value_enum, default_value_t = Format::Table)]
    pub format: Format,

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
}

#[derive(Debug, Clone, Subcommand)]
pub enum GroupCommand {
    /// Every consumer group with its state.
    List,
    /// A group's state and members, and per partition its committed offset, log end and lag.
    Describe { group: String },
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
}

impl ClientCommand {
    /// The flags every client command shares.
    pub fn args(&self) -> &ClientArgs {
        match self {
            ClientCommand::Topic { client, .. }
            | ClientCommand::Cluster { client, .. }
            | ClientCommand::Group { client, .. } => client,
        }
    }
}

//! The open-files budget: how many partition replicas this broker can host within its
//! open-files limit (`RLIMIT_NOFILE`) once a fixed allowance is kept for everything else.
//!
//! Every hosted replica holds files open, so an unbounded number of replicas would end in
//! EMFILE, and the metadata quorum, which creates and fsyncs files on every change, would be
//! the first to fail. The broker therefore registers its capacity with the quorum; the
//! controller refuses a CreateTopics or CreatePartitions that would place more replicas on a
//! broker than that (POLICY_VIOLATION), and a broker never opens more than that (the extra
//! replicas stay offline), so the reserve below is always there for the quorum and the sockets.

use super::BrokerConfig;

/// Files an idle partition replica keeps open, the count the capacity is reckoned in: the log
/// layer's own figure (its active segment's log file; index files are opened only to be written or
/// read, then closed). A replica with sealed segments holds one more per sealed segment; the
/// reserve absorbs a few.
pub use crate::log::FILES_PER_IDLE_REPLICA;

/// The metadata quorum's storage: the raft log, hard state, snapshot, their temporary files
/// and the directory handles they are fsynced through, with room to spare.
const QUORUM_STORAGE_FILES: u64 = 16;
/// Quorum peers that may connect to the controller listener at once (raft-meta's inbound cap).
const QUORUM_INBOUND_CONNECTIONS: u64 = 64;
/// Brokers this one fetches from (one connection each) and whose consoles it asks.
const REPLICATION_FILES: u64 = 64;
/// Everything else a process holds: standard streams, the runtime's epoll and event fds,
/// signal handlers, checkpoint files being replaced, the log cleaner's files.
const PROCESS_FILES: u64 = 64;
/// Files one partition open may hold beyond the replica's own while it runs (the directory
/// being listed, `partition.metadata` being written, a segment being recovered).
const FILES_PER_OPENING_REPLICA: u64 = 4;

/// The open-files limit split into the reserve and the replicas' share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFilesBudget {
    /// The process's limit; `None` when unknown (nothing is enforced).
    pub limit: Option<u64>,
    /// Kept for the quorum (storage and peer connections).
    pub quorum: u64,
    /// Kept for client connections (`max.connections`) and the listening sockets.
    pub connections: u64,
    /// Kept for replication and peer brokers.
    pub replication: u64,
    /// Kept for the HTTP server (`metrics.max.connections` and its socket), 0 when off.
    pub http: u64,
    /// Kept for the process itself and for logs being opened (`num.recovery.threads.per.data.dir`).
    pub process: u64,
}

impl OpenFilesBudget {
    /// The budget of a broker configured as `config`, under its `open_files_limit`.
    pub fn of(config: &BrokerConfig) -> OpenFilesBudget {
        OpenFilesBudget {
            limit: config.open_files_limit,
            quorum: QUORUM_STORAGE_FILES + QUORUM_INBOUND_CONNECTIONS + 1 + config.voters.len() as u64,
            connections: config.max_connections as u64 + config.listeners.all.len() as u64,
            replication: REPLICATION_FILES,
            http: match config.metrics_listen {
                Some(_) => config.metrics_max_connections as u64 + 1,
                None => 0,
            },
            process: PROCESS_FILES + FILES_PER_OPENING_REPLICA * config.num_recovery_threads_per_data_dir as u64,
        }
    }

    /// Files kept for everything but the partition replicas.
    pub fn reserved(&self) -> u64 {
        self.quorum + self.connections + self.replication + self.http + self.process
    }

    /// Partition replicas this broker can host: what the limit leaves after the reserve,
    /// divided by [`FILES_PER_IDLE_REPLICA`]; `None` (no limit) when the limit is unknown.
    pub fn replica_capacity(&self) -> Option<u32> {
        let limit = self.limit?;
        let replicas = limit.saturating_sub(self.reserved()) / FILES_PER_IDLE_REPLICA;
        Some(u32::try_from(replicas).unwrap_or(u32::MAX))
    }

    /// One line for the start-up log: the limit, the reserve's parts and the capacity.
    pub fn describe(&self) -> String {
        let Some(limit) = self.limit else {
            return "open-files limit unknown; partition replicas are not limited".to_string();
        };
        format!(
            "open-files limit {limit}: {} kept for the metadata quorum, {} for client connections (max.connections), \
             {} for replication, {} for the HTTP server, {} for the process and logs being opened; \
             room for {} partition replicas at {FILES_PER_IDLE_REPLICA} files each",
            self.quorum,
            self.connections,
            self.replication,
            self.http,
            self.process,
            self.replica_capacity().unwrap_or(u32::MAX),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Cli;
    use clap::Parser;

    fn config(args: &[&str], limit: Option<u64>) -> BrokerConfig {
        let mut argv = vec!["sluice"];
        argv.extend_from_slice(args);
        let mut config = BrokerConfig::from_cli(&Cli::parse_from(argv)).unwrap();
        config.open_files_limit = limit;
        config
    }

    #[test]
    fn capacity_is_what_the_reserve_leaves_divided_by_files_per_replica() {
        let config = config(
            &[
                "--set",
                "max.connections=1000",
                "--set",
                "num.recovery.threads.per.data.dir=2",
            ],
            Some(20_000),
        );
        let budget = OpenFilesBudget::of(&config);
        // One voter (itself), one listener, no HTTP server.
        assert_eq!(budget.quorum, 16 + 64 + 1 + 1);
        assert_eq!(budget.connections, 1000 + 1);
        assert_eq!(budget.http, 0);
        assert_eq!(budget.process, 64 + 4 * 2);
        assert_eq!(budget.reserved(), 82 + 1001 + 64 + 72);
        assert_eq!(budget.replica_capacity(), Some(20_000 - 1219));
        assert!(
            budget.describe().contains("room for 18781 partition replicas"),
            "{}",
            budget.describe()
        );
    }

    #[test]
    fn the_http_server_and_more_connections_take_from_the_replicas() {
        let plain = OpenFilesBudget::of(&config(&[], Some(20_000)));
        let http = OpenFilesBudget::of(&config(&["--set", "metrics.listen=127.0.0.1:0"], Some(20_000)));
        assert_eq!(http.http, 32 + 1);
        assert_eq!(http.reserved(), plain.reserved() + 33);
        let fewer = OpenFilesBudget::of(&config(&["--set", "max.connections=100"], Some(20_000)));
        assert!(fewer.replica_capacity() > plain.replica_capacity());
    }

    #[test]
    fn a_limit_below_the_reserve_hosts_nothing_and_an_unknown_one_everything() {
        let low = OpenFilesBudget::of(&config(&["--set", "max.connections=1000"], Some(400)));
        assert_eq!(low.replica_capacity(), Some(0));
        let unknown = OpenFilesBudget::of(&config(&[], None));
        assert_eq!(unknown.replica_capacity(), None);
        assert!(unknown.describe().contains("not limited"));
        let huge = OpenFilesBudget::of(&config(&[], Some(u64::MAX)));
        assert_eq!(huge.replica_capacity(), Some(u32::MAX));
    }
}

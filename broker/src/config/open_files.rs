//! The open-files budget: how many segment files the partition logs may hold open at once
//! within this process's open-files limit (`RLIMIT_NOFILE`), once a fixed allowance is kept
//! for everything else.
//!
//! Segment files go through the log's file cache (`log/file_cache.rs`), which closes the least
//! recently used when more than this are open and reopens them on demand, so a broker hosts
//! any number of partition replicas under any limit: the reserve below is always there for the
//! metadata quorum (which creates and fsyncs files on every change) and the sockets.

use super::BrokerConfig;

/// The fewest segment files the cache keeps open, even under a limit the reserve exhausts:
/// below this every fetch and append would reopen its file.
pub const MIN_SEGMENT_FILES: u64 = 64;

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
    /// Kept for the process itself, for logs being opened (`num.recovery.threads.per.data.dir`)
    /// and for reads in flight through files the cache has closed meanwhile.
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

    /// Segment files the partition logs may hold open at once: what the limit leaves after
    /// the reserve, at least [`MIN_SEGMENT_FILES`]; `None` (no bound) when the limit is unknown.
    pub fn segment_files(&self) -> Option<usize> {
        let limit = self.limit?;
        let files = limit.saturating_sub(self.reserved()).max(MIN_SEGMENT_FILES);
        Some(usize::try_from(files).unwrap_or(usize::MAX))
    }

    /// Whether the limit leaves less than [`MIN_SEGMENT_FILES`] after the reserve, so that the
    /// segment files' minimum eats into it.
    pub fn is_short(&self) -> bool {
        self.limit
            .is_some_and(|limit| limit.saturating_sub(self.reserved()) < MIN_SEGMENT_FILES)
    }

    /// One line for the start-up log: the limit, the reserve's parts and the segment files.
    pub fn describe(&self) -> String {
        let Some(limit) = self.limit else {
            return "open-files limit unknown; segment files are kept open without a bound".to_string();
        };
        format!(
            "open-files limit {limit}: {} kept for the metadata quorum, {} for client connections (max.connections), \
             {} for replication, {} for the HTTP server, {} for the process and logs being opened; \
             up to {} segment files open at once, the least recently used closed beyond that \
             (partition replicas are not limited by it)",
            self.quorum,
            self.connections,
            self.replication,
            self.http,
            self.process,
            self.segment_files().unwrap_or(usize::MAX),
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
        assert_eq!(budget.segment_files(), Some(20_000 - 1219));
        assert!(!budget.is_short());
        assert!(
            budget.describe().contains("up to 18781 segment files open at once"),
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
        assert!(fewer.segment_files() > plain.segment_files());
    }

    #[test]
    fn a_limit_below_the_reserve_keeps_the_minimum_and_an_unknown_one_has_no_bound() {
        let low = OpenFilesBudget::of(&config(&["--set", "max.connections=1000"], Some(400)));
        assert_eq!(low.segment_files(), Some(MIN_SEGMENT_FILES as usize));
        assert!(low.is_short());
        let unknown = OpenFilesBudget::of(&config(&[], None));
        assert_eq!(unknown.segment_files(), None);
        assert!(!unknown.is_short());
        assert!(unknown.describe().contains("without a bound"));
        let huge = OpenFilesBudget::of(&config(&[], Some(u64::MAX)));
        assert_eq!(huge.segment_files(), Some((u64::MAX - huge.reserved()) as usize));
    }
}

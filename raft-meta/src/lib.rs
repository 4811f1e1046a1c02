#![forbid(unsafe_code)]
// raft-rs's protobuf types are built field by field (as in raft-rs's own examples), which keeps
// the code independent of the codec's struct layout.
#![allow(clippy::field_reassign_with_default)]
//! Sluice's metadata quorum: a replicated, durable log on tikv's raft-rs, like Kafka's KRaft.
//!
//! The broker embeds a [`Quorum`] and supplies the [`StateMachine`] (its metadata image). The
//! quorum orders proposals into a log every member stores (`storage.rs`), ships it over TCP
//! (`transport.rs`), and applies committed entries to the state machine in log order on every
//! member (`node.rs` is the driver owning the Raft state).
//!
//! * The nodes in [`QuorumConfig::voters`] form a static voter set (every node gets the same
//!   list, like KRaft's static quorum). Other nodes start as learners and wait for the leader to
//!   add them with [`Quorum::add_learner`]; they then receive a snapshot and the log.
//! * [`Quorum::propose`] works on any member (followers forward to the leader) and returns once
//!   the entry is applied locally, so the caller can read its own write. A forwarded proposal
//!   that a leader lost with its term fails with [`ProposeError::LeaderChanged`] as soon as a new
//!   leader is seen and this member's log lacks it, rather than at its timeout.
//! * A single voter is a one-member quorum that elects itself: the same code path as a cluster.
//! * Members authenticate each other with a shared [`ClusterSecret`] (`handshake.rs`), and every
//!   message from a peer is validated before raft-rs steps it (`validate.rs`).
//! * [`Quorum::stopped`] tells the embedding process when the driver ends (a storage failure,
//!   the state machine refusing an entry or snapshot, or a panic it caught), so it can exit
//!   instead of serving frozen state.

mod frame;
pub mod handshake;
mod logger;
mod node;
mod snapshot_data;
mod storage;
mod transport;
mod validate;

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use raft::eraftpb::ConfState;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch};

pub use crate::handshake::{ClusterSecret, CREATE_SECRET_HINT, MIN_CLUSTER_SECRET_BYTES};
use crate::node::{Command, Driver, DriverStatus};
use crate::storage::{Bootstrap, DiskStorage};
pub use crate::transport::PeerConnection;

/// raft-rs's message types, for [`PeerConnection`] users.
pub mod eraftpb {
    pub use raft::eraftpb::{ConfState, Entry, EntryType, Message, MessageType, Snapshot, SnapshotMetadata};
}

/// raft-rs reserves raft id 0 while Kafka node ids start at 0, so a node's raft id is its node
/// id + 1. Only raft-rs sees raft ids: every log line and error of this crate names node ids,
/// and raft-rs's own log lines have theirs translated (`logger.rs`).
pub fn raft_id(node_id: i32) -> u64 {
    node_id as u64 + 1
}

/// The node id of a raft id (one from the wire may be anything, so it is not narrowed to i32).
pub fn node_id_of(raft_id: u64) -> i64 {
    raft_id as i64 - 1
}

pub(crate) fn node_ids(raft_ids: &[u64]) -> Vec<i64> {
    raft_ids.iter().map(|&id| node_id_of(id)).collect()
}

/// Largest payload [`Quorum::propose`] accepts. Metadata records are small; this keeps one
/// entry far below the transport's frame limit.
pub const MAX_PROPOSAL_BYTES: usize = 1 << 20;
/// Commands (proposals, learner additions) queued for the driver before `Busy`.
const COMMAND_QUEUE_DEPTH: usize = 1024;

/// What the quorum replicates into. Implemented by the broker (its metadata image).
pub trait StateMachine: Send + 'static {
    /// Apply one committed entry's payload, in log order. Must be deterministic.
    ///
    /// An `Err` (an entry this build cannot read, say) stops this member with
    /// [`QuorumExit::Failed`] carrying the message, which should tell the operator what to do:
    /// an entry is never skipped, since a member that skipped one would silently diverge from
    /// those that applied it. The entry stays in the log and is refused again on restart.
    fn apply(&mut self, index: u64, data: &[u8]) -> Result<(), String>;
    /// Serialize the whole applied state (for raft snapshots / log compaction). An error means
    /// no snapshot is taken; it must never be reported as an empty state, which a restart
    /// would take for a fresh cluster.
    fn snapshot(&self) -> Result<Vec<u8>, String>;
    /// Replace the state with a snapshot's: on a member that fell behind the leader's log start,
    /// and on restart before replaying the log after the snapshot. `data` is always something
    /// [`StateMachine::snapshot`] produced (possibly on another member, possibly another build).
    /// An `Err` stops this member, as for [`StateMachine::apply`]; on start it is returned by
    /// [`Quorum::start`] as [`QuorumError::StateMachine`].
    fn restore(&mut self, data: &[u8]) -> Result<(), String>;
}

/// How to run one quorum member.
#[derive(Debug, Clone)]
pub struct QuorumConfig {
    /// This node's id (non-zero, unique in the cluster).
    pub node_id: u64,
    /// The voters and the `host:port` of their controller listeners. Identical on every node.
    pub voters: BTreeMap<u64, String>,
    /// This node's controller listener (the Raft transport).
    pub listen: SocketAddr,
    /// E.g. `<data-dir>/__cluster_metadata-0`; the quorum owns its contents.
    pub data_dir: PathBuf,
    /// Length of one Raft tick, e.g. 100.
    pub tick_ms: u64,
    /// Ticks without a leader before a follower campaigns, e.g. 10 (1 s at 100 ms ticks).
    pub election_tick: usize,
    /// Ticks between leader heartbeats, 1..=3; must be below `election_tick`.
    pub heartbeat_tick: usize,
    /// Snapshot the state machine and compact the log after this many applied entries.
    pub snapshot_every_entries: u64,
    /// Persisted on first start; a data directory from another cluster is refused.
    pub cluster_id: String,
    /// Shared by every member; peers prove they know it before any message is read. Required
    /// unless this node is the only voter (then, without one, it accepts no peer connections).
    pub secret: Option<ClusterSecret>,
    /// Mutual TLS between members, on top of the secret: connections are encrypted, and each
    /// side's certificate must name the host its `voters` entry gives (pinned to the voters).
    pub tls: Option<QuorumTls>,
}

/// The TLS configurations of the controller listener, asked for at every new connection so
/// that certificates the broker reloads take effect without a restart. The server side must
/// require client certificates; the client side presents this node's certificate.
#[derive(Clone)]
pub struct QuorumTls {
    pub configs: Arc<dyn Fn() -> (Arc<rustls::ServerConfig>, Arc<rustls::ClientConfig>) + Send + Sync>,
}

impl std::fmt::Debug for QuorumTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("QuorumTls")
    }
}

/// A member's Raft role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Leader,
    Follower,
    /// Campaigning (including Raft's pre-vote phase).
    Candidate,
    /// Not a voter: replicates the log but never votes or leads.
    Learner,
}

/// Replication state of one member, as seen from this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaState {
    pub id: u64,
    /// Highest log index known to be stored on the replica. Only the leader knows (`None` elsewhere).
    pub match_index: Option<u64>,
    /// Time since the leader last heard from the replica. Only the leader knows (`None` elsewhere).
    pub last_contact_ms_ago: Option<u64>,
}

/// This member's view of the quorum, for DescribeQuorum and the broker's controller role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuorumStatus {
    pub node_id: u64,
    pub leader_id: Option<u64>,
    /// Raft term (Kafka's leader epoch of the metadata log).
    pub term: u64,
    pub commit_index: u64,
    /// Index of the last entry in this member's log (Kafka's log end offset of the metadata log, less one).
    pub last_index: u64,
    pub applied_index: u64,
    /// Index of the latest snapshot; the log holds only the entries after it (its log start).
    pub snapshot_index: u64,
    pub role: Role,
    pub voters: Vec<ReplicaState>,
    pub learners: Vec<ReplicaState>,
}

/// Why a quorum member cannot start.
#[derive(Debug, thiserror::Error)]
pub enum QuorumError {
    #[error("invalid metadata quorum configuration: {0}")]
    InvalidConfig(String),
    #[error("cannot {op} {path}: {source}. Check that the metadata directory is writable and its disk is not full")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path} is corrupt ({detail}). It cannot be repaired automatically: restore the directory from a backup, or, if a majority of the other voters is healthy, move it aside so this node starts empty and catches up from the leader")]
    Corrupt { path: PathBuf, detail: String },
    #[error("a record for {path} is {bytes} bytes, more than the {max}-byte limit; the metadata state has outgrown what one quorum snapshot can carry")]
    RecordTooLarge { path: PathBuf, bytes: usize, max: usize },
    #[error("{dir} uses on-disk format version {found} but this build reads version {expected}; run the Sluice version that wrote it")]
    FormatVersion { dir: PathBuf, found: u32, expected: u32 },
    #[error("{dir} belongs to cluster {found:?}, not {expected:?}; point the data directory at this cluster's metadata, or remove it if this node should join cluster {expected:?} fresh")]
    ClusterIdMismatch {
        dir: PathBuf,
        found: String,
        expected: String,
    },
    #[error("{dir} belongs to node {}, not node {}; start with --node-id {} or give this node its own data directory", node_id_of(*.found), node_id_of(*.expected), node_id_of(*.found))]
    NodeIdMismatch { dir: PathBuf, found: u64, expected: u64 },
    #[error("--voters {configured} disagrees with the quorum's voters {recorded} recorded in {dir}; start every node with the voter set the quorum was created with")]
    VotersMismatch {
        dir: PathBuf,
        configured: String,
        recorded: String,
    },
    #[error("cannot listen for controller connections on {addr}: {source}. Choose a free --controller-listen address")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
    #[error("raft-rs refused to start: {0}")]
    Raft(#[from] raft::Error),
    #[error("the metadata state could not be encoded for a snapshot: {0}; this is a bug, please report it")]
    Snapshot(String),
    /// The state machine refused a committed entry or a snapshot; the message says what to do.
    #[error("{0}")]
    StateMachine(String),
    #[error("the metadata quorum stopped while starting; see the preceding log lines")]
    Stopped,
}

/// Why a proposal did not complete.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProposeError {
    #[error(
        "the metadata quorum has no leader right now (election in progress or no majority reachable); retry shortly"
    )]
    NoLeader,
    #[error("the proposal was not applied within {0:?}; it may still commit later, so retry idempotently")]
    Timeout(Duration),
    #[error("the metadata quorum's leader changed before the proposal reached its log; retry with the new leader")]
    LeaderChanged,
    #[error("too many proposals are pending on this node; retry shortly")]
    Busy,
    #[error("the metadata quorum member is shut down")]
    Stopped,
    #[error("the proposal is {bytes} bytes, more than the {max}-byte limit; split it into smaller records")]
    TooLarge { bytes: usize, max: usize },
    #[error("cannot add node {} as a learner: {reason}", node_id_of(*.id))]
    InvalidLearner { id: u64, reason: String },
}

/// How a member's driver ended (see [`Quorum::stopped`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuorumExit {
    /// [`Quorum::shutdown`] was called, or every handle was dropped.
    Shutdown,
    /// A storage failure, a state machine refusing an entry or snapshot, or a panic in the
    /// driver stopped it (the string says why and what to do): this member no longer takes
    /// part in the quorum and its state machine no longer changes.
    Failed(String),
}

/// Cloneable handle to a running quorum member. The member stops on [`Quorum::shutdown`], or
/// once every handle is dropped.
#[derive(Clone)]
pub struct Quorum {
    commands: mpsc::Sender<Command>,
    status: watch::Receiver<DriverStatus>,
    leader: watch::Receiver<Option<u64>>,
    /// Set by [`supervise`] once the driver task has ended, however it ended.
    exit: watch::Receiver<Option<QuorumExit>>,
}

impl Quorum {
    /// Starts (or restarts from disk) this member: opens storage, restores the latest snapshot
    /// into `sm` and replays committed entries after it, binds the transport on `config.listen`,
    /// and starts the driver on a thread of its own (`sluice-quorum`). Returns once the replay is done,
    /// so `sm` reflects everything this node had committed before.
    pub async fn start(config: QuorumConfig, sm: impl StateMachine) -> Result<Quorum, QuorumError> {
        let listener = TcpListener::bind(config.listen)
            .await
            .map_err(|source| QuorumError::Bind {
                addr: config.listen,
                source,
            })?;
        Self::start_with_listener(config, listener, sm).await
    }

    /// Like [`Quorum::start`], on an already bound listener (`config.listen` is then unused).
    /// Lets a caller reserve the port before starting, e.g. to learn an ephemeral port.
    pub async fn start_with_listener(
        config: QuorumConfig,
        listener: TcpListener,
        mut sm: impl StateMachine,
    ) -> Result<Quorum, QuorumError> {
        validate(&config)?;
        let is_voter = config.voters.contains_key(&config.node_id);
        // The state a fresh directory starts from (the state machine has applied nothing yet).
        let initial_state = sm.snapshot().map_err(QuorumError::Snapshot)?;
        let initial_data = || snapshot_data::encode_snapshot_data(&BTreeMap::new(), &initial_state);
        let bootstrap = if is_voter {
            let mut conf_state = ConfState::default();
            conf_state.voters = config.voters.keys().copied().collect();
            Bootstrap::Voter {
                conf_state,
                initial_data: &initial_data,
            }
        } else {
            Bootstrap::Learner
        };
        let dir = config.data_dir.clone();
        // Blocking file I/O on a small directory, once per start.
        let storage = DiskStorage::open(&dir, &config.cluster_id, config.node_id, bootstrap)?;
        check_voters(&config, &storage)?;
        let learner_addrs = node::restore_state_machine(&storage, &mut sm)?;

        let (commands_tx, commands_rx) = mpsc::channel(COMMAND_QUEUE_DEPTH);
        let (replayed_tx, replayed_rx) = oneshot::channel();
        let (exit_tx, exit) = watch::channel(None);
        let (prepared_tx, prepared_rx) = oneshot::channel();
        let listen_addr = config.listen;
        let bind_error = move |source| QuorumError::Bind {
            addr: listen_addr,
            source,
        };
        // The driver and its transport run on their own thread and runtime, so that however
        // busy the broker's runtime is (a reconciliation round over 100,000 partitions, a
        // flood of requests), this member keeps answering its peers and ticking: a starved
        // member would miss heartbeats and be fenced for the broker's load.
        let listener = listener.into_std().map_err(bind_error)?;
        let driver_thread = move || {
            let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(runtime) => runtime,
                Err(source) => {
                    let _ = prepared_tx.send(Err(bind_error(source)));
                    return;
                }
            };
            runtime.block_on(async move {
                let prepared = TcpListener::from_std(listener)
                    .map_err(bind_error)
                    .and_then(|listener| Driver::prepare(config, storage, sm, learner_addrs, listener, replayed_tx));
                match prepared {
                    Ok(parts) => {
                        let _ = prepared_tx.send(Ok((parts.status.clone(), parts.leader.clone())));
                        supervise(tokio::spawn(parts.driver.run(commands_rx)), exit_tx).await;
                    }
                    Err(e) => {
                        let _ = prepared_tx.send(Err(e));
                    }
                }
            });
        };
        std::thread::Builder::new()
            .name("sluice-quorum".into())
            .spawn(driver_thread)
            .map_err(|source| QuorumError::Io {
                op: "start the metadata quorum's thread for",
                path: dir,
                source,
            })?;
        let (status, leader) = prepared_rx.await.map_err(|_| QuorumError::Stopped)??;
        let handle = Quorum {
            commands: commands_tx,
            status,
            leader,
            exit,
        };
        match replayed_rx.await {
            Ok(Ok(())) => Ok(handle),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(QuorumError::Stopped),
        }
    }

    /// Proposes `data`; resolves once the entry is committed AND applied to this node's state
    /// machine, with the entry's index. Works on any member: a follower forwards to the leader.
    ///
    /// `Timeout` does not mean the entry was discarded: it may still commit and apply later.
    /// Make payloads safe to apply twice (or check state first) before retrying.
    pub async fn propose(&self, data: Vec<u8>, timeout: Duration) -> Result<u64, ProposeError> {
        if data.len() > MAX_PROPOSAL_BYTES {
            return Err(ProposeError::TooLarge {
                bytes: data.len(),
                max: MAX_PROPOSAL_BYTES,
            });
        }
        let (reply, rx) = oneshot::channel();
        self.submit(Command::Propose { data, reply }, rx, timeout).await
    }

    /// Adds a non-voting learner (a broker not in the voter set) that will receive the log;
    /// resolves once the configuration change is applied on this node. Idempotent; calling it
    /// again with a new address updates the address. Works on any member (forwarded to the
    /// leader, like `propose`).
    pub async fn add_learner(&self, id: u64, addr: String, timeout: Duration) -> Result<(), ProposeError> {
        let (reply, rx) = oneshot::channel();
        self.submit(Command::AddLearner { id, addr, reply }, rx, timeout).await
    }

    async fn submit<T>(
        &self,
        command: Command,
        rx: oneshot::Receiver<Result<T, ProposeError>>,
        timeout: Duration,
    ) -> Result<T, ProposeError> {
        match self.commands.try_send(command) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => return Err(ProposeError::Busy),
            Err(mpsc::error::TrySendError::Closed(_)) => return Err(ProposeError::Stopped),
        }
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(result)) => result,
            // The driver dropped the reply: it stopped.
            Ok(Err(_)) => Err(ProposeError::Stopped),
            Err(_) => Err(ProposeError::Timeout(timeout)),
        }
    }

    /// Current view for DescribeQuorum and for the broker's controller role.
    pub fn status(&self) -> QuorumStatus {
        self.status.borrow().to_public(tokio::time::Instant::now())
    }

    /// Changes whenever this node's idea of the leader changes.
    pub fn leader_watch(&self) -> watch::Receiver<Option<u64>> {
        self.leader.clone()
    }

    /// Whether the driver is still running (it stops on shutdown, a storage failure or a panic).
    pub fn is_running(&self) -> bool {
        self.exit.borrow().is_none()
    }

    /// Resolves once the driver has stopped, saying how. An embedding process that did not ask
    /// for the stop should exit: its state machine no longer follows the quorum.
    pub async fn stopped(&self) -> QuorumExit {
        let mut exit = self.exit.clone();
        let reported = match exit.wait_for(Option::is_some).await {
            Ok(reported) => reported.clone(),
            // The supervisor always reports before it drops the sender.
            Err(_) => None,
        };
        reported.unwrap_or_else(|| QuorumExit::Failed("the metadata quorum's supervisor ended without a report".into()))
    }

    /// Stops the driver and transport; returns when storage is closed and the listener released.
    pub async fn shutdown(self) {
        let _ = self.commands.send(Command::Shutdown).await;
        self.stopped().await;
    }
}

/// Waits for the driver task and publishes how it ended; a panic becomes
/// [`QuorumExit::Failed`] (tokio caught it; the driver's transport and storage were dropped
/// while unwinding).
async fn supervise(driver: tokio::task::JoinHandle<Result<(), String>>, exit: watch::Sender<Option<QuorumExit>>) {
    let outcome = match driver.await {
        Ok(Ok(())) => QuorumExit::Shutdown,
        Ok(Err(reason)) => QuorumExit::Failed(reason),
        Err(e) => {
            let reason = match e.try_into_panic() {
                Ok(panic) => panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_else(|| "a panic without a message".to_owned()),
                Err(e) => e.to_string(),
            };
            tracing::error!(%reason, "the metadata quorum driver panicked; this member has stopped");
            QuorumExit::Failed(format!("the metadata quorum driver panicked: {reason}"))
        }
    };
    exit.send_replace(Some(outcome));
}

fn validate(config: &QuorumConfig) -> Result<(), QuorumError> {
    let bad = |msg: String| Err(QuorumError::InvalidConfig(msg));
    if config.node_id == 0 {
        return bad("node id 0 is reserved; use a positive --node-id".into());
    }
    if config.voters.is_empty() {
        return bad("--voters is empty; name at least one voter as id@host:port".into());
    }
    if config.voters.contains_key(&0) {
        return bad("--voters contains node id 0, which is reserved".into());
    }
    if config.tick_ms == 0 {
        return bad("tick_ms must be positive".into());
    }
    if config.heartbeat_tick == 0 || config.election_tick <= config.heartbeat_tick {
        return bad(format!(
            "election_tick ({}) must exceed heartbeat_tick ({}), which must be positive",
            config.election_tick, config.heartbeat_tick
        ));
    }
    if config.snapshot_every_entries == 0 {
        return bad("snapshot_every_entries must be positive".into());
    }
    let id = &config.cluster_id;
    if id.is_empty() || id.len() > 255 || id.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return bad(format!("cluster id {id:?} must be 1-255 characters without whitespace"));
    }
    let alone = config.voters.len() == 1 && config.voters.contains_key(&config.node_id);
    if config.secret.is_none() && !alone {
        return bad(format!(
            "the quorum has {} voters (this node {}a voter), so its members must authenticate each other with a cluster secret, and none was given: {CREATE_SECRET_HINT}",
            config.voters.len(),
            if config.voters.contains_key(&config.node_id) { "" } else { "not " },
        ));
    }
    Ok(())
}

/// Refuses to start when `--voters` differs from the voter set the quorum was created with:
/// changing it by editing flags would let two disjoint majorities elect two leaders.
fn check_voters(config: &QuorumConfig, storage: &DiskStorage) -> Result<(), QuorumError> {
    let recorded = &storage.latest_snapshot().get_metadata().get_conf_state().voters;
    if recorded.is_empty() {
        return Ok(()); // a learner that has not been added yet
    }
    let mut recorded = recorded.clone();
    recorded.sort_unstable();
    let configured: Vec<u64> = config.voters.keys().copied().collect();
    if recorded != configured {
        return Err(QuorumError::VotersMismatch {
            dir: config.data_dir.clone(),
            configured: format!("{:?}", node_ids(&configured)),
            recorded: format!("{:?}", node_ids(&recorded)),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests;

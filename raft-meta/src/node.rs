//! The driver: one tokio task that owns the `RawNode`, its storage and the state machine.
//!
//! It wakes on a tick, an inbound message, a command (proposal, learner addition, shutdown) or
//! a transport event, feeds it to raft-rs, then drains raft-rs's `Ready`s in the documented
//! order (see [`Driver::handle_ready`]). Nothing is shared with other tasks except through
//! channels: the handle sends commands, the driver publishes status and leader changes on
//! `watch` channels. Storage writes (fsync) block this task briefly, which is fine at metadata
//! scale and keeps every durability step in one place, in order.
//!
//! Proposals are tracked by a proposal id (node id, incarnation, sequence) carried in the
//! entry's `context`. Raft-rs forwards a follower's proposal to the leader with the context
//! intact, so the proposer recognizes its entry when it applies it locally, whichever member
//! appended it. The incarnation (bumped on every start, persisted) keeps a sequence number
//! from a previous run from matching a new proposal.
//!
//! Long on purpose: the driver is one event loop over one `RawNode`, and raft-rs's `Ready` handling
//! must be read in its documented order in one place; the snapshot data format, frames and
//! validation live in their own files.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::Duration;

use prost::Message as _;
use raft::eraftpb::{ConfChange, ConfChangeType, ConfChangeV2, Entry, EntryType, Message, Snapshot};
use raft::{GetEntriesContext, RawNode, StateRole, INVALID_ID};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::{Instant, MissedTickBehavior};

use crate::snapshot_data::{decode_snapshot_data, encode_snapshot_data};
use crate::storage::DiskStorage;
use crate::transport::{is_snapshot, Inbound, SendOutcome, Transport, TransportEvent};
use crate::validate::{check_peer_message, Receiver};
use crate::{node_id_of, ProposeError, QuorumConfig, QuorumError, QuorumStatus, ReplicaState, Role, StateMachine};

/// Proposals in flight on this node (waiting to be applied) before `Busy`.
const MAX_PENDING_PROPOSALS: usize = 1024;
/// Inbound raft messages queued for the driver; beyond this the transport drops them.
const INBOUND_QUEUE_MESSAGES: usize = 4096;
/// Transport events queued for the driver; beyond this they are dropped (they are advisory).
const EVENT_QUEUE_DEPTH: usize = 1024;
/// Inbound messages stepped per wake-up before handling the resulting `Ready`.
const STEP_BATCH_MESSAGES: usize = 256;
/// `Ready`s handled per wake-up; more wait for the next one so commands are not starved.
const MAX_READY_ROUNDS: usize = 64;
/// Raft's limit on one append message; keeps messages well under the frame limit.
const MAX_APPEND_BYTES: u64 = 1 << 20;
const MAX_INFLIGHT_APPENDS: usize = 256;
/// Uncommitted bytes the leader accepts before dropping proposals (`Busy`).
const MAX_UNCOMMITTED_BYTES: u64 = 64 << 20;
const MAX_COMMITTED_BYTES_PER_READY: u64 = 16 << 20;
const PROPOSAL_ID_BYTES: usize = 24;
/// Refused peer messages logged per [`REFUSAL_LOG_WINDOW`]; the rest are counted and the count
/// logged with the next line, so a misbehaving peer cannot flood the log.
const REFUSAL_LOG_BURST: u32 = 20;
const REFUSAL_LOG_WINDOW: Duration = Duration::from_secs(10);

/// Requests from [`crate::Quorum`] handles.
pub(crate) enum Command {
    Propose {
        data: Vec<u8>,
        reply: oneshot::Sender<Result<u64, ProposeError>>,
    },
    AddLearner {
        id: u64,
        addr: String,
        reply: oneshot::Sender<Result<(), ProposeError>>,
    },
    Shutdown,
}

/// A local caller waiting for its entry to be applied.
enum Pending {
    /// An entry proposed while `leader` led (this node's view then).
    Entry {
        reply: oneshot::Sender<Result<u64, ProposeError>>,
        leader: u64,
    },
    Learner(oneshot::Sender<Result<(), ProposeError>>),
}

impl Pending {
    /// The caller gave up (timed out or was dropped).
    fn is_abandoned(&self) -> bool {
        match self {
            Pending::Entry { reply, .. } => reply.is_closed(),
            Pending::Learner(tx) => tx.is_closed(),
        }
    }
}

/// Identifies a proposal across the cluster; stored in the entry's `context`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ProposalId {
    node_id: u64,
    incarnation: u64,
    seq: u64,
}

impl ProposalId {
    fn encode(self) -> Vec<u8> {
        let mut buf = Vec::with_capacity(PROPOSAL_ID_BYTES);
        buf.extend_from_slice(&self.node_id.to_be_bytes());
        buf.extend_from_slice(&self.incarnation.to_be_bytes());
        buf.extend_from_slice(&self.seq.to_be_bytes());
        buf
    }

    fn decode(ctx: &[u8]) -> Option<ProposalId> {
        let ctx: &[u8; PROPOSAL_ID_BYTES] = ctx.try_into().ok()?;
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&ctx[i * 8..i * 8 + 8]);
            u64::from_be_bytes(w)
        };
        Some(ProposalId {
            node_id: word(0),
            incarnation: word(1),
            seq: word(2),
        })
    }
}

/// The driver's published view; converted to [`QuorumStatus`] on read.
#[derive(Debug, Clone)]
pub(crate) struct DriverStatus {
    node_id: u64,
    leader_id: Option<u64>,
    term: u64,
    commit_index: u64,
    last_index: u64,
    applied_index: u64,
    snapshot_index: u64,
    role: Role,
    voters: Vec<ReplicaView>,
    learners: Vec<ReplicaView>,
}

#[derive(Debug, Clone)]
struct ReplicaView {
    id: u64,
    match_index: Option<u64>,
    last_contact: Option<Instant>,
}

impl DriverStatus {
    pub(crate) fn to_public(&self, now: Instant) -> QuorumStatus {
        let replica = |v: &ReplicaView| ReplicaState {
            id: v.id,
            match_index: v.match_index,
            last_contact_ms_ago: v
                .last_contact
                .map(|t| now.saturating_duration_since(t).as_millis() as u64),
        };
        QuorumStatus {
            node_id: self.node_id,
            leader_id: self.leader_id,
            term: self.term,
            commit_index: self.commit_index,
            last_index: self.last_index,
            applied_index: self.applied_index,
            snapshot_index: self.snapshot_index,
            role: self.role,
            voters: self.voters.iter().map(replica).collect(),
            learners: self.learners.iter().map(replica).collect(),
        }
    }
}

/// A constructed driver plus the receivers the handle keeps.
pub(crate) struct DriverParts<S> {
    pub(crate) driver: Driver<S>,
    pub(crate) status: watch::Receiver<DriverStatus>,
    pub(crate) leader: watch::Receiver<Option<u64>>,
}

pub(crate) struct Driver<S> {
    node_id: u64,
    incarnation: u64,
    raw: RawNode<DiskStorage>,
    sm: S,
    /// Voters' controller addresses, from `--voters`.
    voter_addrs: BTreeMap<u64, String>,
    /// Learners' controller addresses, replicated in their `AddLearnerNode` entries and snapshots.
    learner_addrs: BTreeMap<u64, String>,
    transport: Transport,
    inbound: mpsc::Receiver<Inbound>,
    events: mpsc::Receiver<TransportEvent>,
    tick: Duration,
    snapshot_every_entries: u64,
    applied_index: u64,
    /// A configuration change was applied since the last snapshot: snapshot now, so the stored
    /// snapshot (what a new member receives) always contains every current member.
    conf_changed: bool,
    pending: HashMap<u64, Pending>,
    next_seq: u64,
    /// Delivery failures found while handling a `Ready`; reported to raft-rs after `advance`.
    deferred: Vec<TransportEvent>,
    last_contact: HashMap<u64, Instant>,
    status_tx: watch::Sender<DriverStatus>,
    leader_tx: watch::Sender<Option<u64>>,
    refusals: RefusalLog,
    /// Fired once the entries committed before this start are applied (see `Quorum::start`),
    /// or with the error that stopped the driver before that.
    replayed: Option<oneshot::Sender<Result<(), QuorumError>>>,
    replay_target: u64,
}

impl<S: StateMachine> Driver<S> {
    /// Builds the `RawNode` over `storage` and starts the transport; `run` drives it.
    pub(crate) fn prepare(
        config: QuorumConfig,
        storage: DiskStorage,
        sm: S,
        learner_addrs: BTreeMap<u64, String>,
        listener: TcpListener,
        replayed: oneshot::Sender<Result<(), QuorumError>>,
    ) -> Result<DriverParts<S>, QuorumError> {
        let node_id = config.node_id;
        let applied_index = storage.snapshot_index();
        let replay_target = storage.hard_state().commit;
        let incarnation = storage.incarnation();
        let raft_config = raft::Config {
            id: node_id,
            election_tick: config.election_tick,
            heartbeat_tick: config.heartbeat_tick,
            applied: applied_index,
            max_size_per_msg: MAX_APPEND_BYTES,
            max_inflight_msgs: MAX_INFLIGHT_APPENDS,
            // A leader cut off from a majority steps down after an election timeout, so a
            // partitioned old controller stops acting as one.
            check_quorum: true,
            // A rejoining node cannot force an election by bumping the term.
            pre_vote: true,
            max_uncommitted_size: MAX_UNCOMMITTED_BYTES,
            max_committed_size_per_ready: MAX_COMMITTED_BYTES_PER_READY,
            ..Default::default()
        };
        let mut raw = RawNode::new(&raft_config, storage, &crate::logger::raft_logger())?;
        // A lone voter needs nobody's vote: lead at once instead of after an election timeout,
        // so a single node serves metadata changes as soon as it starts.
        if config.voters.len() == 1 && config.voters.contains_key(&node_id) {
            raw.campaign()?;
        }

        let (inbound_tx, inbound) = mpsc::channel(INBOUND_QUEUE_MESSAGES);
        let (events_tx, events) = mpsc::channel(EVENT_QUEUE_DEPTH);
        let transport = Transport::start(
            listener,
            node_id,
            &config.cluster_id,
            config.secret.clone(),
            config.tls.clone(),
            config.voters.clone(),
            inbound_tx,
            events_tx,
        );
        let (status_tx, status) = watch::channel(DriverStatus {
            node_id,
            leader_id: None,
            term: 0,
            commit_index: 0,
            last_index: 0,
            applied_index,
            snapshot_index: applied_index,
            role: Role::Follower,
            voters: Vec::new(),
            learners: Vec::new(),
        });
        let (leader_tx, leader) = watch::channel(None);
        let mut driver = Driver {
            node_id,
            incarnation,
            raw,
            sm,
            voter_addrs: config.voters,
            learner_addrs,
            transport,
            inbound,
            events,
            tick: Duration::from_millis(config.tick_ms),
            snapshot_every_entries: config.snapshot_every_entries,
            applied_index,
            conf_changed: false,
            pending: HashMap::new(),
            next_seq: 0,
            deferred: Vec::new(),
            last_contact: HashMap::new(),
            status_tx,
            leader_tx,
            refusals: RefusalLog::default(),
            replayed: Some(replayed),
            replay_target,
        };
        driver.publish_status();
        Ok(DriverParts { driver, status, leader })
    }

    /// Runs until shutdown, all handles are dropped, or a storage failure (after which it is not
    /// safe to keep participating: the member stops, like a crash, and callers get `Stopped`).
    /// Returns the failure, if any, once the transport and storage are closed.
    pub(crate) async fn run(mut self, mut commands: mpsc::Receiver<Command>) -> Result<(), String> {
        let outcome = match self.serve(&mut commands).await {
            Ok(()) => {
                tracing::info!(node_id = node_id_of(self.node_id), "metadata quorum member stopped");
                Ok(())
            }
            Err(e) => {
                tracing::error!(node_id = node_id_of(self.node_id), error = %e, "metadata quorum member stopped after a failure");
                let reason = e.to_string();
                // Still starting: `Quorum::start` returns the error itself.
                if let Some(replayed) = self.replayed.take() {
                    let _ = replayed.send(Err(e));
                }
                Err(reason)
            }
        };
        // Dropping the reply senders tells every waiting caller `Stopped`.
        self.pending.clear();
        commands.close();
        while commands.try_recv().is_ok() {}
        let Driver { transport, raw, .. } = self;
        transport.shutdown().await;
        drop(raw); // closes the storage files
        outcome
    }

    async fn serve(&mut self, commands: &mut mpsc::Receiver<Command>) -> Result<(), QuorumError> {
        // Replays the entries committed before this start (they are in the first `Ready`s).
        self.process_ready()?;
        let mut ticker = tokio::time::interval(self.tick);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticker.tick() => {
                    self.raw.tick();
                    self.pending.retain(|_, p| !p.is_abandoned());
                    self.transport.reap();
                }
                Some(inbound) = self.inbound.recv() => {
                    self.step(inbound);
                    for _ in 1..STEP_BATCH_MESSAGES {
                        match self.inbound.try_recv() {
                            Ok(inbound) => self.step(inbound),
                            Err(_) => break,
                        }
                    }
                }
                command = commands.recv() => match command {
                    Some(Command::Shutdown) | None => return Ok(()),
                    Some(command) => self.handle_command(command),
                },
                Some(event) = self.events.recv() => self.report(event),
            }
            self.process_ready()?;
        }
    }

    /// Steps a peer's message into raft-rs, unless `validate.rs` finds it forged or malformed.
    fn step(&mut self, inbound: Inbound) {
        let Inbound { peer_id, msg } = inbound;
        let receiver = Receiver {
            node_id: self.node_id,
            voters: &self.voter_addrs,
            learners: &self.learner_addrs,
            last_index: self.raw.raft.raft_log.last_index(),
            is_leader: self.raw.raft.state == StateRole::Leader,
        };
        if let Err(reason) = check_peer_message(&msg, peer_id, &receiver) {
            self.refusals.refused(peer_id, msg.get_msg_type(), &reason);
            return;
        }
        let from = msg.from;
        self.last_contact.insert(from, Instant::now());
        if let Err(e) = self.raw.step(msg) {
            tracing::debug!(from = node_id_of(from), error = %e, "raft ignored a message");
        }
    }

    fn handle_command(&mut self, command: Command) {
        match command {
            Command::Propose { data, reply } => {
                if let Err(e) = self.check_can_propose() {
                    let _ = reply.send(Err(e));
                    return;
                }
                let id = self.next_proposal_id();
                match self.raw.propose(id.encode(), data) {
                    Ok(()) => {
                        let leader = self.raw.raft.leader_id;
                        self.pending.insert(id.seq, Pending::Entry { reply, leader });
                    }
                    Err(e) => {
                        let _ = reply.send(Err(self.refused(e)));
                    }
                }
            }
            Command::AddLearner { id, addr, reply } => match self.learner_change(id, addr) {
                Ok(None) => {
                    let _ = reply.send(Ok(()));
                }
                Ok(Some(change)) => {
                    let pid = self.next_proposal_id();
                    match self.raw.propose_conf_change(pid.encode(), change) {
                        Ok(()) => {
                            self.pending.insert(pid.seq, Pending::Learner(reply));
                        }
                        Err(e) => {
                            let _ = reply.send(Err(self.refused(e)));
                        }
                    }
                }
                Err(e) => {
                    let _ = reply.send(Err(e));
                }
            },
            Command::Shutdown => {}
        }
    }

    fn check_can_propose(&self) -> Result<(), ProposeError> {
        if self.pending.len() >= MAX_PENDING_PROPOSALS {
            return Err(ProposeError::Busy);
        }
        if self.raw.raft.leader_id == INVALID_ID {
            return Err(ProposeError::NoLeader);
        }
        Ok(())
    }

    /// The configuration change adding learner `id` at `addr`, or `None` if it is already there.
    fn learner_change(&self, id: u64, addr: String) -> Result<Option<ConfChange>, ProposeError> {
        let invalid = |reason: &str| ProposeError::InvalidLearner {
            id,
            reason: reason.to_owned(),
        };
        if id == 0 {
            return Err(invalid("node id 0 is reserved"));
        }
        if addr.is_empty() || addr.len() > 255 {
            return Err(invalid("its address must be host:port, at most 255 bytes"));
        }
        let conf = self.raw.raft.prs().conf();
        if conf.voters().contains(id) {
            return Err(invalid("it is a voter; voters replicate the log already"));
        }
        if conf.learners().contains(&id) && self.learner_addrs.get(&id) == Some(&addr) {
            return Ok(None);
        }
        self.check_can_propose()?;
        let mut change = ConfChange::default();
        change.set_change_type(ConfChangeType::AddLearnerNode);
        change.node_id = id;
        change.context = addr.into_bytes().into();
        Ok(Some(change))
    }

    fn next_proposal_id(&mut self) -> ProposalId {
        self.next_seq += 1;
        ProposalId {
            node_id: self.node_id,
            incarnation: self.incarnation,
            seq: self.next_seq,
        }
    }

    /// Maps raft-rs refusing a proposal to what the caller should do.
    fn refused(&self, e: raft::Error) -> ProposeError {
        if self.raw.raft.leader_id == INVALID_ID {
            ProposeError::NoLeader
        } else {
            // Leader transfer in progress or the uncommitted-bytes limit reached.
            tracing::debug!(error = %e, "raft dropped a proposal");
            ProposeError::Busy
        }
    }

    fn report(&mut self, event: TransportEvent) {
        match event {
            TransportEvent::Unreachable(id) => self.raw.report_unreachable(id),
            TransportEvent::Snapshot(id, status) => self.raw.report_snapshot(id, status),
        }
    }

    /// Handles `Ready`s until raft-rs has nothing more (bounded), then publishes status.
    fn process_ready(&mut self) -> Result<(), QuorumError> {
        for _ in 0..MAX_READY_ROUNDS {
            if !self.raw.has_ready() {
                break;
            }
            self.handle_ready()?;
            for event in std::mem::take(&mut self.deferred) {
                self.report(event);
            }
            self.maybe_snapshot()?;
        }
        if self.applied_index >= self.replay_target {
            if let Some(replayed) = self.replayed.take() {
                let _ = replayed.send(Ok(()));
            }
        }
        self.publish_status();
        Ok(())
    }

    /// One `Ready`, in the order raft-rs 0.7 documents (`RawNode::ready`, `five_mem_node`):
    ///
    /// 1. `messages()`: sendable before persisting. raft-rs only fills it on the leader, whose
    ///    appends may go out concurrently with its own write (Raft thesis 10.2.1): the leader
    ///    counts itself towards a commit only once its write is persisted.
    /// 2. Install a received snapshot (storage + state machine).
    /// 3. Apply `committed_entries` (these are already durable).
    /// 4. Append `entries` and persist the hard state, with fsync.
    /// 5. `persisted_messages()`: votes and append acknowledgements promise durable state, so
    ///    they leave only now.
    /// 6. `advance`, then the `LightReady`: persist the new commit index, send its messages,
    ///    apply its committed entries, `advance_apply`.
    fn handle_ready(&mut self) -> Result<(), QuorumError> {
        let mut ready = self.raw.ready();
        self.send_all(ready.take_messages());
        if !ready.snapshot().is_empty() {
            self.install_snapshot(ready.snapshot().clone())?;
        }
        self.apply_committed(ready.take_committed_entries())?;
        if !ready.entries().is_empty() {
            self.raw.mut_store().append(ready.entries())?;
        }
        if let Some(hs) = ready.hs() {
            self.raw.mut_store().set_hard_state(hs.clone())?;
        }
        self.send_all(ready.take_persisted_messages());

        let mut light = self.raw.advance(ready);
        if let Some(commit) = light.commit_index() {
            // Not required for safety; lets a restart replay everything it had applied.
            self.raw.mut_store().set_commit(commit)?;
        }
        self.send_all(light.take_messages());
        self.apply_committed(light.take_committed_entries())?;
        self.raw.advance_apply();
        Ok(())
    }

    fn send_all(&mut self, messages: Vec<Message>) {
        for msg in messages {
            let to = msg.to;
            let snapshot = is_snapshot(&msg);
            let addr = self.voter_addrs.get(&to).or_else(|| self.learner_addrs.get(&to));
            let outcome = match addr {
                Some(addr) => self.transport.send(msg, addr),
                None => {
                    tracing::warn!(to, "no controller address known for quorum member; message dropped");
                    SendOutcome::Dropped
                }
            };
            if outcome == SendOutcome::Dropped {
                self.deferred.push(TransportEvent::Unreachable(to));
                if snapshot {
                    self.deferred
                        .push(TransportEvent::Snapshot(to, raft::SnapshotStatus::Failure));
                }
            }
        }
    }

    /// A snapshot from the leader replaces the state machine and the log.
    fn install_snapshot(&mut self, snapshot: Snapshot) -> Result<(), QuorumError> {
        let index = snapshot.get_metadata().index;
        let data = snapshot.data.clone();
        let (learner_addrs, sm_data) = decode_snapshot_data(&data).map_err(|detail| QuorumError::Corrupt {
            path: "snapshot received from the leader".into(),
            detail,
        })?;
        self.raw.mut_store().apply_snapshot(snapshot)?;
        self.sm.restore(sm_data).map_err(QuorumError::StateMachine)?;
        self.learner_addrs = learner_addrs;
        self.applied_index = index;
        tracing::info!(
            node_id = self.node_id,
            index,
            "installed metadata snapshot from the leader"
        );
        Ok(())
    }

    fn apply_committed(&mut self, entries: Vec<Entry>) -> Result<(), QuorumError> {
        for entry in entries {
            match entry.get_entry_type() {
                EntryType::EntryNormal => self.apply_normal(&entry)?,
                EntryType::EntryConfChange => self.apply_conf_change(&entry)?,
                EntryType::EntryConfChangeV2 => self.apply_conf_change_v2(&entry)?,
            }
            self.applied_index = entry.index;
        }
        Ok(())
    }

    fn apply_normal(&mut self, entry: &Entry) -> Result<(), QuorumError> {
        // A new leader's empty entry, or a conf change the leader refused (raft-rs blanks it).
        if entry.data.is_empty() && entry.context.is_empty() {
            return Ok(());
        }
        self.sm
            .apply(entry.index, &entry.data)
            .map_err(QuorumError::StateMachine)?;
        match self.take_pending(&entry.context) {
            Some(Pending::Entry { reply, .. }) => {
                let _ = reply.send(Ok(entry.index));
            }
            // The leader turned our conf change into a no-op (another one was in progress).
            Some(Pending::Learner(reply)) => {
                let _ = reply.send(Err(ProposeError::Busy));
            }
            None => {}
        }
        Ok(())
    }

    fn apply_conf_change(&mut self, entry: &Entry) -> Result<(), QuorumError> {
        if entry.data.is_empty() {
            return Ok(());
        }
        let change = ConfChange::decode(entry.data.as_ref()).map_err(|e| corrupt_entry(entry, &e))?;
        self.raw.apply_conf_change(&change)?;
        let id = change.node_id;
        match change.get_change_type() {
            ConfChangeType::AddLearnerNode => {
                let addr = String::from_utf8(change.context.to_vec()).map_err(|e| corrupt_entry(entry, &e))?;
                tracing::info!(node_id = node_id_of(self.node_id), learner = node_id_of(id), %addr, index = entry.index, "learner added to the metadata quorum");
                self.learner_addrs.insert(id, addr);
            }
            ConfChangeType::RemoveNode => {
                self.learner_addrs.remove(&id);
            }
            ConfChangeType::AddNode => {}
        }
        self.conf_changed = true;
        self.resolve_conf_change(&entry.context);
        Ok(())
    }

    /// Not proposed by Sluice; applied so a log containing one stays replayable.
    fn apply_conf_change_v2(&mut self, entry: &Entry) -> Result<(), QuorumError> {
        let change = ConfChangeV2::decode(entry.data.as_ref()).map_err(|e| corrupt_entry(entry, &e))?;
        self.raw.apply_conf_change(&change)?;
        self.conf_changed = true;
        self.resolve_conf_change(&entry.context);
        Ok(())
    }

    fn resolve_conf_change(&mut self, context: &[u8]) {
        match self.take_pending(context) {
            Some(Pending::Learner(reply)) => {
                let _ = reply.send(Ok(()));
            }
            Some(Pending::Entry { reply, .. }) => {
                let _ = reply.send(Err(ProposeError::Stopped));
            }
            None => {}
        }
    }

    /// After the leader changed: entries proposed under another leader that are not in this
    /// node's log were lost with that leader's term (a forwarded proposal the old leader never
    /// appended), so their callers are told at once rather than at their timeout, as Kafka
    /// answers NOT_CONTROLLER. An entry this node holds may still commit, and keeps waiting.
    fn fail_proposals_lost_with_the_leader(&mut self) {
        let leader = self.raw.raft.leader_id;
        if !self
            .pending
            .values()
            .any(|p| matches!(p, Pending::Entry { leader: then, .. } if *then != leader))
        {
            return;
        }
        let log = &self.raw.raft.raft_log;
        let held: HashSet<u64> = log
            .entries(self.applied_index + 1, None, GetEntriesContext::empty(false))
            .unwrap_or_default()
            .iter()
            .filter_map(|e| ProposalId::decode(&e.context))
            .filter(|id| id.node_id == self.node_id && id.incarnation == self.incarnation)
            .map(|id| id.seq)
            .collect();
        let lost: Vec<u64> = self
            .pending
            .iter()
            .filter(|(seq, p)| matches!(p, Pending::Entry { leader: then, .. } if *then != leader) && !held.contains(seq))
            .map(|(seq, _)| *seq)
            .collect();
        for seq in lost {
            if let Some(Pending::Entry { reply, .. }) = self.pending.remove(&seq) {
                let _ = reply.send(Err(ProposeError::LeaderChanged));
            }
        }
    }

    /// The local caller waiting for the entry with this context, if it was proposed here.
    fn take_pending(&mut self, context: &[u8]) -> Option<Pending> {
        let id = ProposalId::decode(context)?;
        if id.node_id != self.node_id || id.incarnation != self.incarnation {
            return None;
        }
        self.pending.remove(&id.seq)
    }

    /// Snapshots the state machine and compacts the log after `snapshot_every_entries` applied
    /// entries, and after every configuration change.
    fn maybe_snapshot(&mut self) -> Result<(), QuorumError> {
        let last = self.raw.store().snapshot_index();
        if self.applied_index <= last {
            return Ok(());
        }
        if !self.conf_changed && self.applied_index - last < self.snapshot_every_entries {
            return Ok(());
        }
        let state = match self.sm.snapshot() {
            Ok(state) => state,
            Err(e) => {
                // Keep the log instead: it still holds every entry since the last snapshot.
                tracing::error!(node_id = node_id_of(self.node_id), error = %e,
                    "cannot encode the metadata state; no snapshot taken and the log is not compacted");
                return Ok(());
            }
        };
        let data = encode_snapshot_data(&self.learner_addrs, &state);
        let conf_state = self.raw.raft.prs().conf().to_conf_state();
        let index = self.applied_index;
        self.raw.mut_store().create_snapshot(index, conf_state, data)?;
        self.conf_changed = false;
        tracing::info!(
            node_id = node_id_of(self.node_id),
            index,
            "metadata snapshot taken; log compacted"
        );
        Ok(())
    }

    fn publish_status(&mut self) {
        let now = Instant::now();
        let raft = &self.raw.raft;
        let is_leader = raft.state == StateRole::Leader;
        let conf = raft.prs().conf();
        let role = if !conf.voters().contains(self.node_id) {
            Role::Learner
        } else {
            match raft.state {
                StateRole::Leader => Role::Leader,
                StateRole::Follower => Role::Follower,
                StateRole::Candidate | StateRole::PreCandidate => Role::Candidate,
            }
        };
        let view = |id: u64| ReplicaView {
            id,
            match_index: if is_leader {
                raft.prs().get(id).map(|p| p.matched)
            } else {
                None
            },
            last_contact: match (is_leader, id == self.node_id) {
                (false, _) => None,
                (true, true) => Some(now),
                (true, false) => self.last_contact.get(&id).copied(),
            },
        };
        let voters: BTreeSet<u64> = conf.voters().ids().iter().collect();
        let learners: BTreeSet<u64> = conf.learners().iter().copied().collect();
        let leader_id = (raft.leader_id != INVALID_ID).then_some(raft.leader_id);
        self.status_tx.send_replace(DriverStatus {
            node_id: self.node_id,
            leader_id,
            term: raft.term,
            commit_index: raft.raft_log.committed,
            last_index: raft.raft_log.last_index(),
            applied_index: self.applied_index,
            snapshot_index: self.raw.store().snapshot_index(),
            role,
            voters: voters.into_iter().map(view).collect(),
            learners: learners.into_iter().map(view).collect(),
        });
        let leader_changed = self.leader_tx.send_if_modified(|current| {
            let changed = *current != leader_id;
            *current = leader_id;
            changed
        });
        if leader_changed {
            self.fail_proposals_lost_with_the_leader();
        }
    }
}

/// Logs refused peer messages at warn, at most [`REFUSAL_LOG_BURST`] per [`REFUSAL_LOG_WINDOW`].
#[derive(Default)]
struct RefusalLog {
    window_start: Option<Instant>,
    logged_in_window: u32,
    suppressed: u64,
}

impl RefusalLog {
    fn refused(&mut self, peer_id: u64, msg_type: raft::eraftpb::MessageType, reason: &str) {
        let now = Instant::now();
        if self
            .window_start
            .is_none_or(|start| now.duration_since(start) >= REFUSAL_LOG_WINDOW)
        {
            self.window_start = Some(now);
            self.logged_in_window = 0;
        }
        if self.logged_in_window >= REFUSAL_LOG_BURST {
            self.suppressed += 1;
            return;
        }
        self.logged_in_window += 1;
        let node = node_id_of(peer_id);
        tracing::warn!(
            node,
            ?msg_type,
            earlier_refusals_not_logged = std::mem::take(&mut self.suppressed),
            "refused a raft message from node {node}: {reason}. The message was dropped; if this repeats, check that node's version and health"
        );
    }
}

fn corrupt_entry(entry: &Entry, e: &dyn std::fmt::Display) -> QuorumError {
    QuorumError::Corrupt {
        path: "committed configuration change".into(),
        detail: format!("entry {}: {e}", entry.index),
    }
}

/// Restores `sm` (and the learner address book) from the stored snapshot, if any.
pub(crate) fn restore_state_machine(
    storage: &DiskStorage,
    sm: &mut impl StateMachine,
) -> Result<BTreeMap<u64, String>, QuorumError> {
    let snapshot = storage.latest_snapshot();
    if snapshot.is_empty() {
        return Ok(BTreeMap::new());
    }
    let (learner_addrs, sm_data) = decode_snapshot_data(&snapshot.data).map_err(|detail| QuorumError::Corrupt {
        path: "stored snapshot".into(),
        detail,
    })?;
    sm.restore(sm_data).map_err(QuorumError::StateMachine)?;
    Ok(learner_addrs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proposal_id_round_trips_and_rejects_foreign_contexts() {
        let id = ProposalId {
            node_id: 3,
            incarnation: 7,
            seq: 42,
        };
        assert_eq!(ProposalId::decode(&id.encode()), Some(id));
        assert_eq!(ProposalId::decode(b""), None);
        assert_eq!(ProposalId::decode(&[0u8; 23]), None);
    }
}

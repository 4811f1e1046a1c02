//! The transaction coordinator's state machine (Kafka's `TransactionCoordinator` and
//! `TransactionStateManager`), pure: requests, loaded records and `now` in; the state to
//! write to `__transaction_state` ([`Transition`]) and the markers to write to partitions
//! ([`MarkerJob`]) out. No I/O, no clock.
//!
//! Every change is written ahead: an operation marks the id's metadata with the transition it
//! wants (`pending`) and returns it; the glue appends it and reports back with
//! [`TransactionCoordinator::transition_written`] (or `transition_failed`). While a transition
//! is pending, or a transaction is being completed (PrepareCommit, PrepareAbort), requests for
//! the id get CONCURRENT_TRANSACTIONS, which clients retry.
//!
//! States are Kafka's (`TxnState` in `records.rs`): Empty, Ongoing, PrepareCommit, PrepareAbort,
//! CompleteCommit, CompleteAbort, PrepareEpochFence (an open transaction aborted because a new
//! producer or the timeout fenced it) and Dead (an expired id, written as a tombstone).
//! Transactions v1 keep the producer epoch across transactions; transactions v2 (KIP-890 part
//! 2, EndTxn v5+) bump it at every EndTxn ([`TransactionCoordinator::end_txn`]).
//!
//! A transactional id lives in partition `abs(hashCode(id)) % transaction.state.log.num.partitions`
//! of `__transaction_state`; this coordinator serves the ids of the partitions it leads, at the
//! partition's leader epoch (the coordinator epoch every marker carries).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use kafka_protocol::error::ResponseError;

use super::records::{StoredTxn, TxnState};

/// Kafka's `RecordBatch.NO_PRODUCER_EPOCH` / the last epoch before a producer id is exhausted.
const MAX_EPOCH_BEFORE_NEW_ID: i16 = i16::MAX - 1;
/// The client transaction version of KIP-890 part 2 (the `transaction.version` feature level).
pub const TV2: i16 = 2;

/// The coordinator's settings.
#[derive(Debug, Clone)]
pub struct TxnCoordinatorConfig {
    pub num_partitions: i32,
    pub max_timeout_ms: i32,
    pub id_expiration_ms: i64,
}

/// One transactional id (Kafka's `TransactionMetadata`).
#[derive(Debug, Clone)]
struct TxnMetadata {
    partition: i32,
    producer_id: i64,
    /// The producer id and epoch before the last InitProducerId, which a retry may name (KIP-360).
    last_producer_id: i64,
    last_producer_epoch: i16,
    producer_epoch: i16,
    timeout_ms: i32,
    state: TxnState,
    partitions: BTreeSet<(String, i32)>,
    start_ms: i64,
    last_update_ms: i64,
    /// The state being written; nothing else may change the id meanwhile.
    pending: Option<StoredTxn>,
    /// Transactions v2: the producer id the completion moves to because the epoch is
    /// exhausted (-1: none).
    next_producer_id: i64,
    /// Whether the producer's last transaction used transactions v2 (an epoch bump at each
    /// EndTxn, partitions added by their leaders).
    client_tv2: bool,
}

impl TxnMetadata {
    fn stored(&self) -> StoredTxn {
        StoredTxn {
            producer_id: self.producer_id,
            producer_epoch: self.producer_epoch,
            timeout_ms: self.timeout_ms,
            state: self.state,
            partitions: group_partitions(&self.partitions),
            last_update_ms: self.last_update_ms,
            start_ms: self.start_ms,
            prev_producer_id: if self.client_tv2 { self.last_producer_id } else { -1 },
            next_producer_id: self.next_producer_id,
            client_transaction_version: if self.client_tv2 { TV2 } else { 0 },
        }
    }

    fn apply(&mut self, stored: &StoredTxn) {
        if stored.producer_id != self.producer_id || stored.producer_epoch != self.producer_epoch {
            debug_assert!(
                stored.producer_id != self.producer_id || stored.producer_epoch >= self.producer_epoch,
                "a producer epoch never goes back"
            );
            self.last_producer_id = self.producer_id;
            self.last_producer_epoch = self.producer_epoch;
        }
        self.producer_id = stored.producer_id;
        self.producer_epoch = stored.producer_epoch;
        self.timeout_ms = stored.timeout_ms;
        self.state = stored.state;
        self.partitions = stored
            .partitions
            .iter()
            .flat_map(|(t, ps)| ps.iter().map(move |p| (t.clone(), *p)))
            .collect();
        self.start_ms = stored.start_ms;
        self.last_update_ms = stored.last_update_ms;
        self.next_producer_id = stored.next_producer_id;
        self.client_tv2 = stored.client_transaction_version >= TV2;
    }

    fn check_producer(&self, producer_id: i64, producer_epoch: i16) -> Result<(), ResponseError> {
        if producer_id != self.producer_id {
            return Err(ResponseError::InvalidProducerIdMapping);
        }
        if producer_epoch != self.producer_epoch {
            return Err(ResponseError::ProducerFenced);
        }
        Ok(())
    }

    /// Kafka's CONCURRENT_TRANSACTIONS: a write is in flight or the transaction is completing.
    fn busy(&self) -> bool {
        self.pending.is_some() || self.state.is_preparing()
    }
}

/// The partitions as stored: by topic, partitions ascending.
fn group_partitions(partitions: &BTreeSet<(String, i32)>) -> Vec<(String, Vec<i32>)> {
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (topic, p) in partitions {
        by_topic.entry(topic).or_default().push(*p);
    }
    by_topic.into_iter().map(|(t, ps)| (t.to_string(), ps)).collect()
}

/// A state to write to `__transaction_state` for one id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    pub transactional_id: String,
    /// The `__transaction_state` partition.
    pub partition: i32,
    pub coordinator_epoch: i32,
    pub target: StoredTxn,
}

/// Markers owed to a transaction's partitions once its PrepareCommit/PrepareAbort is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkerJob {
    pub transactional_id: String,
    pub partition: i32,
    pub coordinator_epoch: i32,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub commit: bool,
    pub partitions: Vec<(String, i32)>,
}

/// Per partition of a verification, the error refusing it (`None`: in the transaction).
pub type PartitionErrors = Vec<((String, i32), Option<ResponseError>)>;

/// An EndTxn as the coordinator judges it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndRequest {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub commit: bool,
    /// Transactions v2 (EndTxn v5+).
    pub tv2: bool,
}

/// What an EndTxn asks the glue to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndOutcome {
    /// Nothing to write (a retried EndTxn that already took effect): answer success with the
    /// producer id and epoch the client continues with.
    Done { producer_id: i64, producer_epoch: i16 },
    /// Write this; once written, answer with `producer_id` and `producer_epoch`.
    Write {
        transition: Transition,
        producer_id: i64,
        producer_epoch: i16,
    },
    /// Transactions v2 with an exhausted epoch: call again with a new producer id.
    NeedProducerId,
}

/// What an InitProducerId asks the glue to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitOutcome {
    /// Write this; once written, answer with its producer id and epoch.
    Write(Transition),
    /// The id needs a new producer id (a new id, or its epochs are exhausted): call again with one.
    NeedProducerId,
    /// An open transaction is being aborted to fence its producer: write this, complete the
    /// abort, and answer CONCURRENT_TRANSACTIONS (the client retries).
    Fence(Transition),
}

/// A transaction as DescribeTransactions and ListTransactions report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnView {
    pub transactional_id: String,
    pub state: TxnState,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub timeout_ms: i32,
    pub start_ms: i64,
    pub partitions: Vec<(String, Vec<i32>)>,
}

/// ListTransactions' filters (empty lists match everything).
#[derive(Debug, Default, Clone)]
pub struct ListFilter {
    pub states: Vec<TxnState>,
    pub producer_ids: Vec<i64>,
    /// Only transactions running at least this long (v1's `DurationFilter`; -1: any).
    pub min_duration_ms: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PartitionStatus {
    Loading(i32),
    Loaded(i32),
}

pub struct TransactionCoordinator {
    config: TxnCoordinatorConfig,
    txns: HashMap<String, TxnMetadata>,
    partitions: HashMap<i32, PartitionStatus>,
}

/// Kafka's `Utils.abs(transactionalId.hashCode) % partitions`, Java's `String.hashCode` over UTF-16.
pub fn partition_for(transactional_id: &str, num_partitions: i32) -> i32 {
    let mut h: i32 = 0;
    for unit in transactional_id.encode_utf16() {
        h = h.wrapping_mul(31).wrapping_add(i32::from(unit));
    }
    let abs = if h == i32::MIN { 0 } else { h.abs() };
    abs % num_partitions.max(1)
}

impl TransactionCoordinator {
    pub fn new(config: TxnCoordinatorConfig) -> Self {
        TransactionCoordinator {
            config,
            txns: HashMap::new(),
            partitions: HashMap::new(),
        }
    }

    pub fn partition_for(&self, transactional_id: &str) -> i32 {
        partition_for(transactional_id, self.config.num_partitions)
    }

    /// The `__transaction_state` partitions this coordinator holds (loading or loaded) and
    /// the leader epoch it holds each at.
    pub fn owned_partitions(&self) -> HashMap<i32, i32> {
        self.partitions
            .iter()
            .map(|(p, s)| match s {
                PartitionStatus::Loading(e) | PartitionStatus::Loaded(e) => (*p, *e),
            })
            .collect()
    }

    /// Starts loading `partition` as its leader at `epoch`: its ids answer
    /// COORDINATOR_LOAD_IN_PROGRESS until [`TransactionCoordinator::complete_load`].
    pub fn begin_load(&mut self, partition: i32, epoch: i32) {
        self.unload(partition);
        self.partitions.insert(partition, PartitionStatus::Loading(epoch));
    }

    /// Installs a partition's ids from its records in log order (the last record of an id
    /// wins; a tombstone removes it) and returns the markers owed by transactions that were
    /// being completed when the previous coordinator stopped. Ignored (empty) when the load is
    /// stale: the partition was unloaded or reloaded at another epoch meanwhile.
    pub fn complete_load(
        &mut self,
        partition: i32,
        epoch: i32,
        records: Vec<(String, Option<StoredTxn>)>,
    ) -> Vec<MarkerJob> {
        if self.partitions.get(&partition) != Some(&PartitionStatus::Loading(epoch)) {
            return Vec::new();
        }
        let mut latest: HashMap<String, Option<StoredTxn>> = HashMap::new();
        for (id, value) in records {
            latest.insert(id, value);
        }
        let mut jobs = Vec::new();
        for (id, stored) in latest {
            let Some(stored) = stored else { continue };
            if stored.state == TxnState::Dead {
                continue;
            }
            let mut meta = TxnMetadata {
                partition,
                producer_id: stored.producer_id,
                last_producer_id: -1,
                last_producer_epoch: -1,
                producer_epoch: stored.producer_epoch,
                timeout_ms: stored.timeout_ms,
                state: stored.state,
                partitions: BTreeSet::new(),
                start_ms: stored.start_ms,
                last_update_ms: stored.last_update_ms,
                pending: None,
                next_producer_id: -1,
                client_tv2: false,
            };
            meta.apply(&stored);
            if stored.prev_producer_id >= 0 {
                meta.last_producer_id = stored.prev_producer_id;
            }
            if let Some(job) = marker_job(&id, &meta, epoch) {
                jobs.push(job);
            }
            self.txns.insert(id, meta);
        }
        self.partitions.insert(partition, PartitionStatus::Loaded(epoch));
        jobs.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
        jobs
    }

    /// Forgets a partition's ids (leadership moved).
    pub fn unload(&mut self, partition: i32) {
        self.partitions.remove(&partition);
        self.txns.retain(|_, m| m.partition != partition);
    }

    /// The coordinator epoch `transactional_id` is served at, or why this coordinator does not serve it.
    fn serving(&self, transactional_id: &str) -> Result<(i32, i32), ResponseError> {
        if transactional_id.is_empty() {
            return Err(ResponseError::InvalidRequest);
        }
        let partition = self.partition_for(transactional_id);
        match self.partitions.get(&partition) {
            Some(PartitionStatus::Loaded(epoch)) => Ok((partition, *epoch)),
            Some(PartitionStatus::Loading(_)) => Err(ResponseError::CoordinatorLoadInProgress),
            None => Err(ResponseError::NotCoordinator),
        }
    }

    /// The id's metadata, served here, with the coordinator's (partition, epoch), once the
    /// request's producer id and epoch are its current ones (Kafka's checks, in its order).
    fn producer_of(
        &mut self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
    ) -> Result<(i32, i32, &mut TxnMetadata), ResponseError> {
        let (partition, coordinator_epoch) = self.serving(transactional_id)?;
        let meta = self
            .txns
            .get_mut(transactional_id)
            .ok_or(ResponseError::InvalidProducerIdMapping)?;
        meta.check_producer(producer_id, producer_epoch)?;
        Ok((partition, coordinator_epoch, meta))
    }

    /// InitProducerId for a transactional id (Kafka's `handleInitProducerId`). `expected` is
    /// the producer id and epoch a producer recovering from an error names (KIP-360);
    /// `fresh_producer_id` a newly allocated id, given when a call asked for one.
    pub fn init_producer_id(
        &mut self,
        transactional_id: &str,
        timeout_ms: i32,
        expected: Option<(i64, i16)>,
        fresh_producer_id: Option<i64>,
        now: i64,
    ) -> Result<InitOutcome, ResponseError> {
        if timeout_ms <= 0 || timeout_ms > self.config.max_timeout_ms {
            return Err(ResponseError::InvalidTransactionTimeout);
        }
        let (partition, coordinator_epoch) = self.serving(transactional_id)?;
        let transition = |target: StoredTxn| Transition {
            transactional_id: transactional_id.to_string(),
            partition,
            coordinator_epoch,
            target,
        };
        let Some(meta) = self.txns.get_mut(transactional_id) else {
            let Some(producer_id) = fresh_producer_id else {
                return Ok(InitOutcome::NeedProducerId);
            };
            let target = StoredTxn {
                producer_id,
                producer_epoch: 0,
                timeout_ms,
                state: TxnState::Empty,
                partitions: Vec::new(),
                last_update_ms: now,
                start_ms: -1,
                prev_producer_id: -1,
                next_producer_id: -1,
                client_transaction_version: 0,
            };
            let mut meta = TxnMetadata {
                partition,
                producer_id,
                last_producer_id: -1,
                last_producer_epoch: -1,
                producer_epoch: -1,
                timeout_ms,
                state: TxnState::Empty,
                partitions: BTreeSet::new(),
                start_ms: -1,
                last_update_ms: now,
                pending: None,
                next_producer_id: -1,
                client_tv2: false,
            };
            meta.pending = Some(target.clone());
            self.txns.insert(transactional_id.to_string(), meta);
            return Ok(InitOutcome::Write(transition(target)));
        };
        if let Some((producer_id, epoch)) = expected {
            let current = producer_id == meta.producer_id && epoch == meta.producer_epoch;
            let retried = producer_id == meta.last_producer_id && epoch == meta.last_producer_epoch;
            if !current && !retried {
                return Err(ResponseError::ProducerFenced);
            }
        }
        if meta.busy() {
            return Err(ResponseError::ConcurrentTransactions);
        }
        match meta.state {
            TxnState::Ongoing => {
                // Fence the producer: abort its transaction under a new epoch, so its late
                // writes and its EndTxn are refused; the new producer retries meanwhile.
                let target = abort_target(meta, now);
                meta.pending = Some(target.clone());
                Ok(InitOutcome::Fence(transition(target)))
            }
            _ => {
                let (producer_id, producer_epoch) = if meta.producer_epoch >= MAX_EPOCH_BEFORE_NEW_ID {
                    match fresh_producer_id {
                        Some(id) => (id, 0),
                        None => return Ok(InitOutcome::NeedProducerId),
                    }
                } else {
                    (meta.producer_id, meta.producer_epoch + 1)
                };
                let target = StoredTxn {
                    producer_id,
                    producer_epoch,
                    timeout_ms,
                    state: TxnState::Empty,
                    partitions: Vec::new(),
                    last_update_ms: now,
                    start_ms: -1,
                    ..meta.stored()
                };
                meta.pending = Some(target.clone());
                Ok(InitOutcome::Write(transition(target)))
            }
        }
    }

    /// AddPartitionsToTxn and AddOffsetsToTxn (Kafka's `handleAddPartitionsToTransaction`):
    /// `None` when every partition is already in the open transaction (nothing to write).
    /// `tv2`: a partition leader adds them for a transactions v2 producer (its Produce or
    /// TxnOffsetCommit), which starts a transaction as a v1 producer's own request does.
    pub fn add_partitions(
        &mut self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[(String, i32)],
        tv2: bool,
        now: i64,
    ) -> Result<Option<Transition>, ResponseError> {
        let (partition, coordinator_epoch, meta) = self.producer_of(transactional_id, producer_id, producer_epoch)?;
        if meta.busy() {
            return Err(ResponseError::ConcurrentTransactions);
        }
        if meta.state == TxnState::Ongoing && partitions.iter().all(|p| meta.partitions.contains(p)) {
            return Ok(None);
        }
        let mut target = meta.stored();
        let mut all = if meta.state == TxnState::Ongoing {
            meta.partitions.clone()
        } else {
            target.start_ms = now;
            BTreeSet::new()
        };
        all.extend(partitions.iter().cloned());
        target.partitions = group_partitions(&all);
        target.state = TxnState::Ongoing;
        target.last_update_ms = now;
        target.client_transaction_version = if tv2 { TV2 } else { 0 };
        target.prev_producer_id = if tv2 { meta.last_producer_id } else { -1 };
        meta.pending = Some(target.clone());
        Ok(Some(Transition {
            transactional_id: transactional_id.to_string(),
            partition,
            coordinator_epoch,
            target,
        }))
    }

    /// KIP-890 part 1: a partition leader asks whether these partitions are in the producer's
    /// open transaction before it appends the producer's first transactional batch to them.
    /// Each partition not in it (as written: an add still being replicated does not count) is
    /// INVALID_TXN_STATE; a wrong producer fails them all, and so does a transaction that is
    /// completing (CONCURRENT_TRANSACTIONS: the producer retries once it has completed). A
    /// transition pending otherwise does not matter: the leader's verification guard refuses
    /// the append if the transaction's marker reaches the partition first.
    pub fn verify_partitions(
        &self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[(String, i32)],
    ) -> Result<PartitionErrors, ResponseError> {
        self.serving(transactional_id)?;
        let meta = self
            .txns
            .get(transactional_id)
            .ok_or(ResponseError::InvalidProducerIdMapping)?;
        meta.check_producer(producer_id, producer_epoch)?;
        if matches!(meta.state, TxnState::PrepareCommit | TxnState::PrepareAbort) {
            return Err(ResponseError::ConcurrentTransactions);
        }
        let open = meta.state == TxnState::Ongoing;
        Ok(partitions
            .iter()
            .map(|p| {
                let ok = open && meta.partitions.contains(p);
                (p.clone(), (!ok).then_some(ResponseError::InvalidTxnState))
            })
            .collect())
    }

    /// EndTxn (Kafka's `handleEndTransaction`). Transactions v1 (`tv2` false): `Done` when the
    /// transaction already ended the way asked (a retried EndTxn), else the
    /// PrepareCommit/PrepareAbort to write; its markers follow from
    /// [`TransactionCoordinator::transition_written`].
    ///
    /// Transactions v2 (KIP-890 part 2, EndTxn v5+): every EndTxn bumps the producer epoch,
    /// and the markers carry the bumped epoch, so a late write of the finished transaction is
    /// fenced. A retry is recognised by its epoch being one below the current one (or, after
    /// the epoch was exhausted and the producer id changed, by the previous id at the last
    /// epoch). An abort with nothing in the transaction is written too (the client cannot know
    /// whether its sends reached a partition leader), with no partitions to mark.
    pub fn end_txn(
        &mut self,
        transactional_id: &str,
        request: EndRequest,
        fresh_producer_id: Option<i64>,
        now: i64,
    ) -> Result<EndOutcome, ResponseError> {
        let EndRequest {
            producer_id,
            producer_epoch,
            commit,
            tv2,
        } = request;
        if tv2 {
            return self.end_txn_v2(
                transactional_id,
                producer_id,
                producer_epoch,
                commit,
                fresh_producer_id,
                now,
            );
        }
        let (partition, coordinator_epoch, meta) = self.producer_of(transactional_id, producer_id, producer_epoch)?;
        if meta.pending.is_some() {
            return Err(ResponseError::ConcurrentTransactions);
        }
        let done = EndOutcome::Done {
            producer_id: meta.producer_id,
            producer_epoch: meta.producer_epoch,
        };
        let target = match (meta.state, commit) {
            (TxnState::Ongoing, _) => {
                let mut target = meta.stored();
                target.state = if commit {
                    TxnState::PrepareCommit
                } else {
                    TxnState::PrepareAbort
                };
                target.last_update_ms = now;
                target
            }
            (TxnState::CompleteCommit, true) | (TxnState::CompleteAbort, false) => return Ok(done),
            (TxnState::PrepareCommit, true) | (TxnState::PrepareAbort, false) => {
                return Err(ResponseError::ConcurrentTransactions)
            }
            (TxnState::PrepareEpochFence, _) => return Err(ResponseError::InvalidProducerEpoch),
            _ => return Err(ResponseError::InvalidTxnState),
        };
        meta.pending = Some(target.clone());
        Ok(EndOutcome::Write {
            producer_id: target.producer_id,
            producer_epoch: target.producer_epoch,
            transition: Transition {
                transactional_id: transactional_id.to_string(),
                partition,
                coordinator_epoch,
                target,
            },
        })
    }

    fn end_txn_v2(
        &mut self,
        transactional_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
        fresh_producer_id: Option<i64>,
        now: i64,
    ) -> Result<EndOutcome, ResponseError> {
        let (partition, coordinator_epoch) = self.serving(transactional_id)?;
        let meta = self
            .txns
            .get_mut(transactional_id)
            .ok_or(ResponseError::InvalidProducerIdMapping)?;
        let same = meta.producer_id == producer_id && meta.producer_epoch == producer_epoch;
        let retry_on_bump =
            meta.producer_id == producer_id && i32::from(meta.producer_epoch) == i32::from(producer_epoch) + 1;
        let retry_on_overflow = meta.producer_id != producer_id
            && meta.last_producer_id == producer_id
            && producer_epoch == MAX_EPOCH_BEFORE_NEW_ID
            && meta.producer_epoch == 0;
        let retry = retry_on_bump || retry_on_overflow;
        if meta.pending.is_some() {
            return Err(ResponseError::ConcurrentTransactions);
        }
        if meta.producer_id != producer_id && !retry_on_overflow {
            return Err(ResponseError::InvalidProducerIdMapping);
        }
        let valid = match meta.state {
            TxnState::Ongoing | TxnState::Empty | TxnState::Dead | TxnState::PrepareEpochFence => same,
            // The epoch this end gave the producer: its next end raced the markers of this one.
            // Kafka answers PRODUCER_FENCED, which is fatal to a producer that did nothing wrong;
            // it may retry once the transaction is complete.
            TxnState::PrepareCommit | TxnState::PrepareAbort if same => {
                return Err(ResponseError::ConcurrentTransactions)
            }
            TxnState::PrepareCommit | TxnState::PrepareAbort => retry_on_bump,
            TxnState::CompleteCommit | TxnState::CompleteAbort => retry || same,
        };
        if !valid {
            return Err(ResponseError::ProducerFenced);
        }
        let done = EndOutcome::Done {
            producer_id: meta.producer_id,
            producer_epoch: meta.producer_epoch,
        };
        let empty_abort = match (meta.state, commit) {
            (TxnState::Ongoing, _) => false,
            (TxnState::CompleteCommit, true) if retry => return Ok(done),
            (TxnState::CompleteAbort, false) if retry => return Ok(done),
            (TxnState::CompleteCommit | TxnState::CompleteAbort | TxnState::Empty, false) if !retry => true,
            (TxnState::PrepareCommit, true) | (TxnState::PrepareAbort, false) => {
                return Err(ResponseError::ConcurrentTransactions)
            }
            _ => return Err(ResponseError::InvalidTxnState),
        };
        let next_producer_id = if meta.producer_epoch >= MAX_EPOCH_BEFORE_NEW_ID {
            match fresh_producer_id {
                Some(id) => id,
                None => return Ok(EndOutcome::NeedProducerId),
            }
        } else {
            -1
        };
        let mut target = meta.stored();
        target.state = if commit {
            TxnState::PrepareCommit
        } else {
            TxnState::PrepareAbort
        };
        target.producer_epoch = meta.producer_epoch.saturating_add(1);
        target.prev_producer_id = meta.producer_id;
        target.next_producer_id = next_producer_id;
        target.client_transaction_version = TV2;
        target.last_update_ms = now;
        if empty_abort {
            target.partitions = Vec::new();
            target.start_ms = now;
        }
        let (answer_id, answer_epoch) = if next_producer_id >= 0 {
            (next_producer_id, 0)
        } else {
            (target.producer_id, target.producer_epoch)
        };
        meta.pending = Some(target.clone());
        Ok(EndOutcome::Write {
            producer_id: answer_id,
            producer_epoch: answer_epoch,
            transition: Transition {
                transactional_id: transactional_id.to_string(),
                partition,
                coordinator_epoch,
                target,
            },
        })
    }

    /// The transition was written and replicated: it takes effect. A PrepareCommit or
    /// PrepareAbort returns the markers it owes. Stale reports (the partition moved or was
    /// reloaded, or the id has another transition pending) change nothing.
    pub fn transition_written(&mut self, transition: &Transition) -> Option<MarkerJob> {
        if !self.current(transition) {
            return None;
        }
        let id = &transition.transactional_id;
        if transition.target.state == TxnState::Dead {
            self.txns.remove(id);
            return None;
        }
        let meta = self.txns.get_mut(id)?;
        meta.pending = None;
        meta.apply(&transition.target);
        marker_job(id, meta, transition.coordinator_epoch)
    }

    /// The transition could not be written: the id is as it was (a new id is forgotten).
    pub fn transition_failed(&mut self, transition: &Transition) {
        if !self.current(transition) {
            return;
        }
        let id = &transition.transactional_id;
        if let Some(meta) = self.txns.get_mut(id) {
            meta.pending = None;
            if meta.producer_epoch < 0 {
                self.txns.remove(id);
            }
        }
    }

    fn current(&self, transition: &Transition) -> bool {
        self.partitions.get(&transition.partition) == Some(&PartitionStatus::Loaded(transition.coordinator_epoch))
            && self
                .txns
                .get(&transition.transactional_id)
                .is_some_and(|m| m.pending.as_ref() == Some(&transition.target))
    }

    /// Every marker of `job` is written: the CompleteCommit/CompleteAbort to write, unless the
    /// job is stale (the coordinator moved, or the transaction is no longer the job's).
    pub fn markers_written(&mut self, job: &MarkerJob, now: i64) -> Option<Transition> {
        if self.partitions.get(&job.partition) != Some(&PartitionStatus::Loaded(job.coordinator_epoch)) {
            return None;
        }
        let meta = self.txns.get_mut(&job.transactional_id)?;
        let expected = if job.commit {
            TxnState::PrepareCommit
        } else {
            TxnState::PrepareAbort
        };
        if meta.pending.is_some()
            || meta.state != expected
            || meta.producer_id != job.producer_id
            || meta.producer_epoch != job.producer_epoch
        {
            return None;
        }
        let mut target = meta.stored();
        target.state = if job.commit {
            TxnState::CompleteCommit
        } else {
            TxnState::CompleteAbort
        };
        target.partitions = Vec::new();
        target.last_update_ms = now;
        if meta.next_producer_id >= 0 {
            // Transactions v2 with an exhausted epoch: the producer continues under a new id.
            target.prev_producer_id = meta.producer_id;
            target.producer_id = meta.next_producer_id;
            target.producer_epoch = 0;
            target.next_producer_id = -1;
        }
        meta.pending = Some(target.clone());
        Some(Transition {
            transactional_id: job.transactional_id.clone(),
            partition: job.partition,
            coordinator_epoch: job.coordinator_epoch,
            target,
        })
    }

    /// Kafka's `abortTimedOutTransactions`: every open transaction past its timeout is aborted
    /// under a new epoch, so its producer is fenced (it re-initialises, KIP-360).
    pub fn expired_transactions(&mut self, now: i64) -> Vec<Transition> {
        self.transitions_where(|meta| {
            let expired =
                meta.state == TxnState::Ongoing && now.saturating_sub(meta.start_ms) > i64::from(meta.timeout_ms);
            expired.then(|| abort_target(meta, now))
        })
    }

    /// Kafka's `removeExpiredTransactionalIds`: ids without a transaction for
    /// `transactional.id.expiration.ms` are written as tombstones and forgotten.
    pub fn expired_ids(&mut self, now: i64) -> Vec<Transition> {
        let expiration_ms = self.config.id_expiration_ms;
        self.transitions_where(|meta| {
            let idle = matches!(
                meta.state,
                TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
            ) && now.saturating_sub(meta.last_update_ms) > expiration_ms;
            idle.then(|| StoredTxn {
                state: TxnState::Dead,
                ..meta.stored()
            })
        })
    }

    /// The transitions `target` asks for, for loaded ids with none pending, each marked
    /// pending; in id order.
    fn transitions_where(&mut self, target: impl Fn(&TxnMetadata) -> Option<StoredTxn>) -> Vec<Transition> {
        let mut out = Vec::new();
        for (id, meta) in self.txns.iter_mut() {
            let Some(PartitionStatus::Loaded(epoch)) = self.partitions.get(&meta.partition) else {
                continue;
            };
            if meta.pending.is_some() {
                continue;
            }
            if let Some(target) = target(meta) {
                meta.pending = Some(target.clone());
                out.push(Transition {
                    transactional_id: id.clone(),
                    partition: meta.partition,
                    coordinator_epoch: *epoch,
                    target,
                });
            }
        }
        out.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
        out
    }

    /// DescribeTransactions: the id's state, TRANSACTIONAL_ID_NOT_FOUND when unknown.
    pub fn describe(&self, transactional_id: &str) -> Result<TxnView, ResponseError> {
        self.serving(transactional_id)?;
        let meta = self
            .txns
            .get(transactional_id)
            .ok_or(ResponseError::TransactionalIdNotFound)?;
        Ok(view(transactional_id, meta))
    }

    /// ListTransactions over the loaded partitions, and whether some are still loading
    /// (answered COORDINATOR_LOAD_IN_PROGRESS, as Kafka).
    pub fn list(&self, filter: &ListFilter, now: i64) -> (Vec<TxnView>, bool) {
        let loading = self
            .partitions
            .values()
            .any(|s| matches!(s, PartitionStatus::Loading(_)));
        let mut out: Vec<TxnView> = self
            .txns
            .iter()
            .filter(|(_, m)| filter.states.is_empty() || filter.states.contains(&m.state))
            .filter(|(_, m)| filter.producer_ids.is_empty() || filter.producer_ids.contains(&m.producer_id))
            .filter(|(_, m)| {
                filter.min_duration_ms < 0
                    || (m.state == TxnState::Ongoing && now.saturating_sub(m.start_ms) >= filter.min_duration_ms)
            })
            .map(|(id, m)| view(id, m))
            .collect();
        out.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
        (out, loading)
    }
}

/// The abort of an open transaction under a new epoch (fencing its producer), unless the
/// epoch is exhausted (then at the same one, as Kafka).
fn abort_target(meta: &TxnMetadata, now: i64) -> StoredTxn {
    let mut target = meta.stored();
    if target.producer_epoch < MAX_EPOCH_BEFORE_NEW_ID {
        target.producer_epoch += 1;
    }
    target.state = TxnState::PrepareAbort;
    target.last_update_ms = now;
    target
}

fn marker_job(id: &str, meta: &TxnMetadata, coordinator_epoch: i32) -> Option<MarkerJob> {
    let commit = match meta.state {
        TxnState::PrepareCommit => true,
        TxnState::PrepareAbort | TxnState::PrepareEpochFence => false,
        _ => return None,
    };
    Some(MarkerJob {
        transactional_id: id.to_string(),
        partition: meta.partition,
        coordinator_epoch,
        producer_id: meta.producer_id,
        producer_epoch: meta.producer_epoch,
        commit,
        partitions: meta.partitions.iter().cloned().collect(),
    })
}

fn view(id: &str, meta: &TxnMetadata) -> TxnView {
    TxnView {
        transactional_id: id.to_string(),
        state: meta.state,
        producer_id: meta.producer_id,
        producer_epoch: meta.producer_epoch,
        timeout_ms: meta.timeout_ms,
        start_ms: meta.start_ms,
        partitions: group_partitions(&meta.partitions),
    }
}

#[cfg(test)]
mod tests;

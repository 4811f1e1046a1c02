//! The soak's consume-transform-produce stage (`--transactions`) and its checker. Two workers
//! in one consumer group ([`STAGE_GROUP`], `isolation.level=read_committed`, no auto-commit)
//! read the transactional workload's topic ([`TXN_TOPIC`]) and copy each record to the
//! partition of the same number of [`STAGE_OUTPUT`], in transactions whose consumed offsets
//! are committed with them (`send_offsets_to_transaction`, so TxnOffsetCommit with the
//! consumer's group metadata: KIP-447 fences a worker of an old generation). That is the
//! standard exactly-once loop: poll a batch, begin, send the copies, send the offsets, commit;
//! on an abortable error abort and rewind to the committed offsets; on a fatal one (fenced,
//! or an outcome left unknown) replace the producer and the consumer, which start again from
//! the committed offsets. A tenth of the transactions are aborted on purpose (seeded), so
//! rewinding is exercised without faults too. Each copy names the transaction that wrote it
//! and where its input was read: `copy s{worker}-t{txn} {partition}:{offset} {input value}`.
//!
//! The checker ([`judge`]) reads the output with `read_committed` once the group's committed
//! offsets have passed every committed input record ([`await_caught_up`]), and counts:
//!
//! - **lost**: committed input records below the group's committed offset with no visible copy,
//!   and copies of a transaction whose commit was acknowledged that are not visible;
//! - **duplicates**: committed input records copied more than once;
//! - **aborted reads** (G1a through the stage): copies of input records that are not committed
//!   (their transaction aborted), and visible copies of a stage transaction that was aborted;
//! - **torn**: stage transactions whose outcome the worker does not know with some but not all
//!   of their copies visible;
//! - **non-monotonic**: copies of one input partition out of input-offset order in the output
//!   (a send order the stage did not make), and a stage transaction's reads of one partition
//!   going back or skipping a committed record (a poll that is not monotonic);
//! - **unexplained**: visible copies that no stage transaction sent, in a partition other than
//!   their input's, or naming an input position where the final input log does not hold it;
//! - **cycles** (G1c): strongly connected components of more than one stage transaction in the
//!   graph whose edges are, for each input partition, "consumed the records just before" (the
//!   later transaction read from the offset the earlier one committed: a write-read dependency
//!   through `__consumer_offsets`) and, for each output partition, "wrote the records just
//!   before" (log order, a write-write dependency). Every edge means the earlier transaction
//!   committed before the later one wrote, so a correct run has no cycle.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::producer::{BaseRecord, Producer};
use rdkafka::{ClientContext, Message, Offset, TopicPartitionList};

use super::transactions::{
    abort_written, end_abort, end_commit, new_transactional_producer, next, send, AnomalyNotes, CommittedLog, TxnEnd,
    TxnProducer, CALL_TIMEOUT, TXN_TOPIC,
};
use crate::groups::committed_offsets_as;
use crate::ClientSecurity;

/// The topic the stage copies [`TXN_TOPIC`] to.
pub const STAGE_OUTPUT: &str = "soak-tx-out";
/// The stage's consumer group; its workers' transactional ids are `{STAGE_GROUP}-{worker}`.
pub const STAGE_GROUP: &str = "soak-tx-copier";
/// Workers in the group: two, so faults and replaced workers cause rebalances.
pub const STAGE_WORKERS: usize = 2;
/// Most records one transaction copies.
const BATCH_RECORDS: usize = 50;
/// Longest a worker polls for one batch.
const BATCH_WAIT: Duration = Duration::from_millis(100);
/// Per mille of transactions a worker aborts on purpose.
const ABORT_PER_MILLE: u64 = 100;
/// Longest a worker waits for `send_offsets_to_transaction` (given [`CALL_TIMEOUT`]) before
/// giving its producer up ([`send_offsets`]).
const SEND_OFFSETS_DEADLINE: Duration = Duration::from_secs(25);
/// The workers' producers close connections idle this long, so librdkafka's coordinator
/// requests are woken up (see [`send_offsets`]).
const IDLE_CONNECTION_MS: &str = "5000";
/// Longest [`CopyStage::stop`] waits for the workers to finish their transactions.
const STOP_TIMEOUT: Duration = Duration::from_secs(60);
/// A worker that stops heartbeating leaves the group this soon (broker minimum: 6 s).
const SESSION_TIMEOUT_MS: &str = "10000";

/// Worker `worker`'s transactional id.
pub fn transactional_id(worker: usize) -> String {
    format!("{STAGE_GROUP}-{worker}")
}

/// Every worker's transactional id.
pub fn transactional_ids() -> impl Iterator<Item = String> {
    (0..STAGE_WORKERS).map(transactional_id)
}

/// One input record as a worker read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Read {
    pub partition: i32,
    pub offset: i64,
    pub value: String,
}

/// One stage transaction as its worker recorded it: what it read and copied, in that order,
/// and how it ended.
#[derive(Debug, Clone)]
pub struct StageTxn {
    pub worker: usize,
    pub txn: u64,
    pub reads: Vec<Read>,
    pub end: TxnEnd,
}

impl StageTxn {
    /// Names the transaction in its copies.
    pub fn tag(&self) -> String {
        format!("s{}-t{}", self.worker, self.txn)
    }
}

/// The output value a transaction tagged `tag` writes for `read`.
pub fn copy_value(tag: &str, read: &Read) -> String {
    format!("copy {tag} {}:{} {}", read.partition, read.offset, read.value)
}

/// A copy's parts: the tag of the transaction that wrote it and the input it was made from.
struct ParsedCopy<'a> {
    tag: &'a str,
    partition: i32,
    offset: i64,
    input: &'a str,
}

fn parse_copy(value: &str) -> Option<ParsedCopy<'_>> {
    let rest = value.strip_prefix("copy ")?;
    let (tag, rest) = rest.split_once(' ')?;
    let (position, input) = rest.split_once(' ')?;
    let (partition, offset) = position.split_once(':')?;
    Some(ParsedCopy {
        tag,
        partition: partition.parse().ok()?,
        offset: offset.parse().ok()?,
        input,
    })
}

/// The stage's figures: its transactions by how they ended, and its anomalies.
#[derive(Debug, Default, Clone, Copy)]
pub struct StageReport {
    pub committed: u64,
    pub aborted: u64,
    pub unknown: u64,
    pub lost: u64,
    pub duplicates: u64,
    pub aborted_reads: u64,
    pub torn: u64,
    pub non_monotonic: u64,
    pub unexplained: u64,
    pub cycles: u64,
    /// `send_offsets_to_transaction` calls that never returned ([`send_offsets`]): a
    /// librdkafka hang, not an anomaly; the worker replaced its producer each time.
    pub hung_calls: u64,
    /// Positions the workers' consumers reset by `auto.offset.reset` after an error (an
    /// offset out of range, a failed offset validation). With no unclean election and no
    /// retention none is expected; each is named in the notes, since a reset to the earliest
    /// offset is how a consumer comes to copy records twice.
    pub offset_resets: u64,
}

impl StageReport {
    pub fn anomalies(&self) -> u64 {
        self.lost
            + self.duplicates
            + self.aborted_reads
            + self.torn
            + self.non_monotonic
            + self.unexplained
            + self.cycles
    }

    pub fn add(&mut self, o: &StageReport) {
        self.committed += o.committed;
        self.aborted += o.aborted;
        self.unknown += o.unknown;
        self.lost += o.lost;
        self.duplicates += o.duplicates;
        self.aborted_reads += o.aborted_reads;
        self.torn += o.torn;
        self.non_monotonic += o.non_monotonic;
        self.unexplained += o.unexplained;
        self.cycles += o.cycles;
        self.hung_calls += o.hung_calls;
        self.offset_resets += o.offset_resets;
    }

    pub fn line(&self) -> String {
        let hung = match self.hung_calls {
            0 => String::new(),
            n => format!(" ({n} hung librdkafka calls, producers replaced)"),
        };
        let resets = match self.offset_resets {
            0 => String::new(),
            n => format!(" ({n} consumer offset resets)"),
        };
        format!(
            "copy stage: {} committed, {} aborted, {} unknown{hung}{resets}; {} lost, {} duplicates, {} aborted reads, {} torn, {} non-monotonic, {} unexplained, {} G1c cycles",
            self.committed,
            self.aborted,
            self.unknown,
            self.lost,
            self.duplicates,
            self.aborted_reads,
            self.torn,
            self.non_monotonic,
            self.unexplained,
            self.cycles
        )
    }
}

// ---- the workers ---------------------------------------------------------------------------

/// The running workers.
pub struct CopyStage {
    stop: Arc<AtomicBool>,
    hung_calls: Arc<AtomicU64>,
    resets: Arc<OffsetResets>,
    /// Each worker's thread and its record, shared so that a worker stuck in a client call
    /// can be left behind with what it did so far.
    workers: Vec<(JoinHandle<()>, Arc<Mutex<Vec<StageTxn>>>)>,
}

/// What the workers did, as [`CopyStage::stop`] found it.
pub struct StageRecord {
    pub txns: Vec<StageTxn>,
    /// Workers that had not finished within [`STOP_TIMEOUT`] (stuck in a client call).
    pub stuck: usize,
    /// Calls given up as hung ([`send_offsets`]).
    pub hung_calls: u64,
    /// The workers' consumers' offset resets after an error.
    pub offset_resets: u64,
    /// The first of them as librdkafka logged them.
    pub offset_reset_lines: Vec<String>,
}

impl CopyStage {
    /// Starts the workers: `producer_config` for their transactional producers, and
    /// `consumer_config` (bootstrap and login) for their consumers; seeded by `seed`.
    pub fn start(producer_config: ClientConfig, consumer_config: ClientConfig, seed: u64) -> CopyStage {
        let stop = Arc::new(AtomicBool::new(false));
        let hung_calls = Arc::new(AtomicU64::new(0));
        let resets = Arc::new(OffsetResets::default());
        let workers = (0..STAGE_WORKERS)
            .map(|worker| {
                let stop = stop.clone();
                let hung = hung_calls.clone();
                let resets = resets.clone();
                let mut producer_config = producer_config.clone();
                producer_config.set("connections.max.idle.ms", IDLE_CONNECTION_MS);
                let consumer_config = stage_consumer_config(consumer_config.clone(), worker);
                let rng = seed.wrapping_mul(0xD1B5_4A32_D192_ED03).wrapping_add(worker as u64 + 1);
                let done = Arc::new(Mutex::new(Vec::new()));
                let record = done.clone();
                let thread = std::thread::spawn(move || {
                    let clients = ClientConfigs {
                        producer: producer_config,
                        consumer: consumer_config,
                        resets,
                    };
                    copy(worker, &clients, rng, &stop, &record, &hung)
                });
                (thread, done)
            })
            .collect();
        CopyStage {
            stop,
            hung_calls,
            resets,
            workers,
        }
    }

    /// Transactions the workers have committed so far.
    pub fn committed(&self) -> usize {
        self.workers
            .iter()
            .map(|(_, done)| {
                let done = done.lock().expect("stage record lock");
                done.iter().filter(|t| t.end == TxnEnd::Committed).count()
            })
            .sum()
    }

    /// Stops the workers after their current transaction and returns what they recorded
    /// (a transaction a worker is still in counts as one whose outcome it does not know).
    pub fn stop(self) -> StageRecord {
        self.stop.store(true, Ordering::Relaxed);
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline && !self.workers.iter().all(|(t, _)| t.is_finished()) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let stuck = self.workers.iter().filter(|(t, _)| !t.is_finished()).count();
        let txns = self
            .workers
            .iter()
            .flat_map(|(_, done)| done.lock().expect("stage record lock").clone())
            .collect();
        StageRecord {
            txns,
            stuck,
            hung_calls: self.hung_calls.load(Ordering::Relaxed),
            offset_resets: self.resets.count.load(Ordering::Relaxed),
            offset_reset_lines: self.resets.kept.lock().expect("offset resets lock").clone(),
        }
    }
}

/// A group member's settings: read_committed, offsets only through the transactions, a new
/// group starting from the beginning.
fn stage_consumer_config(mut c: ClientConfig, worker: usize) -> ClientConfig {
    c.set("group.id", STAGE_GROUP)
        .set("client.id", format!("{STAGE_GROUP}-{worker}"))
        .set("isolation.level", "read_committed")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "false")
        .set("auto.offset.reset", "earliest")
        .set("session.timeout.ms", SESSION_TIMEOUT_MS)
        .set("heartbeat.interval.ms", "1000")
        .set("fetch.wait.max.ms", "100")
        // Warnings: librdkafka logs a position reset after an error at this level.
        .set("log_level", "4");
    c
}

/// Notes each rebalance, so a batch polled across one is dropped: its records belong to the
/// old assignment, and the new one starts from the committed offsets. Keeps the consumer's
/// position resets in `resets`.
struct StageContext {
    rebalanced: AtomicBool,
    worker: usize,
    resets: Arc<OffsetResets>,
}

/// librdkafka's "offset reset" warnings of every worker's consumer: how many, and the first
/// [`OFFSET_RESETS_KEPT`] in full.
#[derive(Default)]
struct OffsetResets {
    count: AtomicU64,
    kept: Mutex<Vec<String>>,
}

/// Offset resets a stage keeps word for word.
const OFFSET_RESETS_KEPT: usize = 50;

impl ClientContext for StageContext {
    /// Only the offset resets: the soak has no logger for the rest (as with the default).
    fn log(&self, _level: rdkafka::config::RDKafkaLogLevel, fac: &str, message: &str) {
        if fac == "OFFSET" && message.contains("offset reset") {
            self.resets.count.fetch_add(1, Ordering::Relaxed);
            let mut resets = self.resets.kept.lock().expect("offset resets lock");
            if resets.len() < OFFSET_RESETS_KEPT {
                resets.push(format!("{STAGE_GROUP}-{}: {message}", self.worker));
            }
        }
    }
}

impl ConsumerContext for StageContext {
    fn pre_rebalance(&self, _consumer: &BaseConsumer<Self>, _rebalance: &Rebalance<'_>) {
        self.rebalanced.store(true, Ordering::Relaxed);
    }
}

type StageConsumer = BaseConsumer<StageContext>;

/// A worker's producer and consumer, replaced together.
struct Clients {
    /// Shared with a [`send_offsets`] call that may outlive the worker's use of it.
    producer: Arc<TxnProducer>,
    consumer: StageConsumer,
}

/// Drops clients on a thread of their own: closing a consumer or producer can wait on the
/// cluster, and the worker goes on at once with new ones.
fn retire(clients: Clients) {
    std::thread::spawn(move || drop(clients));
}

/// The producer first: initialising it fences the previous one and settles its open
/// transaction, so the consumer's first OffsetFetch sees the offsets as they are.
fn new_clients(worker: usize, configs: &ClientConfigs) -> Option<Clients> {
    let producer = new_transactional_producer(&configs.producer, &transactional_id(worker))?;
    let context = StageContext {
        rebalanced: AtomicBool::new(false),
        worker,
        resets: configs.resets.clone(),
    };
    let consumer = configs
        .consumer
        .create_with_context::<_, StageConsumer>(context)
        .and_then(|c| c.subscribe(&[TXN_TOPIC]).map(|()| c));
    match consumer {
        Ok(consumer) => Some(Clients {
            producer: Arc::new(producer),
            consumer,
        }),
        Err(e) => {
            eprintln!("{}: no consumer yet: {e}", transactional_id(worker));
            None
        }
    }
}

/// How a worker makes its clients.
struct ClientConfigs {
    producer: ClientConfig,
    consumer: ClientConfig,
    /// Where its consumers' offset resets go.
    resets: Arc<OffsetResets>,
}

/// A worker's loop until `stop`: poll a batch, copy it in a transaction, record it in `done`.
fn copy(
    worker: usize,
    configs: &ClientConfigs,
    mut rng: u64,
    stop: &AtomicBool,
    done: &Mutex<Vec<StageTxn>>,
    hung_calls: &AtomicU64,
) {
    let mut clients: Option<Clients> = None;
    let mut txn = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let Some(c) = clients.take().or_else(|| new_clients(worker, configs)) else {
            std::thread::sleep(Duration::from_millis(200));
            continue;
        };
        // None: polled across a rebalance, and the new assignment starts from the committed
        // offsets by itself.
        let batch = poll_batch(&c.consumer).unwrap_or_default();
        if batch.is_empty() {
            clients = Some(c);
            continue;
        }
        let abort = next(&mut rng) % 1000 < ABORT_PER_MILLE;
        let t = StageTxn {
            worker,
            txn,
            reads: batch,
            end: TxnEnd::Unknown,
        };
        txn += 1;
        // Recorded before it begins: if the worker never returns, its outcome is unknown.
        done.lock().expect("stage record lock").push(t.clone());
        let Some((end, keep)) = copy_batch(&c, &t, abort, hung_calls) else {
            done.lock().expect("stage record lock").pop();
            retire(c); // no transaction began: new clients
            continue;
        };
        if let Some(last) = done.lock().expect("stage record lock").last_mut() {
            last.end = end;
        }
        match keep && (end == TxnEnd::Committed || rewind(&c.consumer).is_ok()) {
            true => clients = Some(c),
            false => retire(c),
        }
    }
    if let Some(c) = clients {
        retire(c);
    }
}

/// Up to [`BATCH_RECORDS`] records polled within [`BATCH_WAIT`]; `None` if a rebalance
/// happened meanwhile.
fn poll_batch(consumer: &StageConsumer) -> Option<Vec<Read>> {
    consumer.context().rebalanced.store(false, Ordering::Relaxed);
    let deadline = Instant::now() + BATCH_WAIT;
    let mut batch = Vec::new();
    while batch.len() < BATCH_RECORDS {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        match consumer.poll(left) {
            Some(Ok(m)) => batch.push(Read {
                partition: m.partition(),
                offset: m.offset(),
                value: String::from_utf8_lossy(m.payload().unwrap_or_default()).to_string(),
            }),
            // A rebalance (rdkafka answers it with None) or a transient error.
            Some(Err(_)) | None => break,
        }
    }
    match consumer.context().rebalanced.load(Ordering::Relaxed) {
        true => None,
        false => Some(batch),
    }
}

/// One transaction copying `t.reads`, their offsets committed with it; aborted instead if
/// `abort` or anything fails. `None` if no transaction could begin.
fn copy_batch(c: &Clients, t: &StageTxn, abort: bool, hung_calls: &AtomicU64) -> Option<(TxnEnd, bool)> {
    c.producer.begin_transaction().ok()?;
    let tag = t.tag();
    let mut failed = false;
    let mut next_offsets: BTreeMap<i32, i64> = BTreeMap::new();
    for read in &t.reads {
        let value = copy_value(&tag, read);
        let record = BaseRecord::<(), str>::to(STAGE_OUTPUT)
            .partition(read.partition)
            .payload(&value);
        if send(&c.producer, record).is_err() {
            failed = true;
            break;
        }
        next_offsets.insert(read.partition, read.offset + 1);
    }
    if !failed && !abort {
        match send_offsets(c, &next_offsets) {
            SendOffsets::Sent => {}
            SendOffsets::Failed => failed = true,
            SendOffsets::Hung => {
                hung_calls.fetch_add(1, Ordering::Relaxed);
                return Some((TxnEnd::Unknown, false));
            }
        }
    }
    Some(match (abort, failed) {
        (_, true) => end_abort(&c.producer),
        (true, false) => abort_written(&c.producer),
        (false, false) => end_commit(&c.producer),
    })
}

enum SendOffsets {
    Sent,
    Failed,
    /// No answer within [`SEND_OFFSETS_DEADLINE`]: the producer is left to its call.
    Hung,
}

/// The consumed offsets into the transaction, with the consumer's group metadata.
///
/// librdkafka 2.12's `send_offsets_to_transaction` can block for ever: its TxnOffsetCommit
/// goes through `rd_kafka_coord_req`, which, while the cached group coordinator is not up,
/// waits for the next broker state change (any broker's connection going up or down) and
/// never checks its own timeout. If the coordinator has meanwhile left the cluster's metadata
/// (a node shut down or killed, and fenced), librdkafka decommissions it, and in a cluster
/// that has settled no state change may come again (seed 100: SIGTERM of node 3, the group's
/// coordinator; the call sat in `rd_kafka_txn_op_req0` until the process was killed). Two
/// things keep a worker going: its producer closes connections idle for
/// [`IDLE_CONNECTION_MS`], so a state change does come (calls then return within seconds);
/// and the call runs on a thread of its own, given up after [`SEND_OFFSETS_DEADLINE`], when
/// the worker replaces its producer (a new one with the same transactional id fences it and
/// has its transaction aborted). A producer given up on is freed when its call returns; until
/// then it may reach a later schedule's cluster on reused ports (a schedule once found
/// `soak-tx-out` auto-created by one), which the idle closing makes rare.
fn send_offsets(c: &Clients, next_offsets: &BTreeMap<i32, i64>) -> SendOffsets {
    let mut tpl = TopicPartitionList::new();
    for (p, o) in next_offsets {
        if tpl.add_partition_offset(TXN_TOPIC, *p, Offset::Offset(*o)).is_err() {
            return SendOffsets::Failed;
        }
    }
    let Some(metadata) = c.consumer.group_metadata() else {
        return SendOffsets::Failed;
    };
    let producer = c.producer.clone();
    let (sent, answer) = mpsc::channel();
    std::thread::spawn(move || {
        let result = producer.send_offsets_to_transaction(&tpl, &metadata, CALL_TIMEOUT);
        let _ = sent.send(result.is_ok());
    });
    match answer.recv_timeout(SEND_OFFSETS_DEADLINE) {
        Ok(true) => SendOffsets::Sent,
        Ok(false) => SendOffsets::Failed,
        Err(_) => SendOffsets::Hung,
    }
}

/// Moves every assigned partition back to the group's committed offset (the beginning if
/// there is none), as after an aborted transaction.
fn rewind(consumer: &StageConsumer) -> Result<()> {
    let committed = consumer.committed(CALL_TIMEOUT)?;
    let mut tpl = TopicPartitionList::new();
    for e in committed.elements() {
        let offset = match e.offset() {
            Offset::Offset(o) => Offset::Offset(o),
            _ => Offset::Beginning,
        };
        tpl.add_partition_offset(e.topic(), e.partition(), offset)?;
    }
    if tpl.count() == 0 {
        return Ok(());
    }
    for e in consumer.seek_partitions(tpl, CALL_TIMEOUT)?.elements() {
        e.error()
            .with_context(|| format!("seeking {}-{}", e.topic(), e.partition()))?;
    }
    Ok(())
}

// ---- the checker ---------------------------------------------------------------------------

/// The group's committed offsets on the input topic (`None`: none committed).
pub fn committed_offsets(
    bootstrap: &str,
    security: &ClientSecurity,
    partitions: i32,
) -> Result<BTreeMap<i32, Option<i64>>> {
    committed_offsets_as(bootstrap, security, STAGE_GROUP, TXN_TOPIC, partitions)
}

/// Waits until the group has committed, on every partition, an offset past the last record
/// `input` holds there: every committed input record has been copied.
pub fn await_caught_up(
    bootstrap: &str,
    security: &ClientSecurity,
    input: &CommittedLog,
    partitions: i32,
    timeout: Duration,
) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let committed = committed_offsets(bootstrap, security, partitions)?;
        let behind: Vec<String> = input
            .iter()
            .filter_map(|(p, records)| {
                let last = records.last()?.0;
                let at = committed.get(p).copied().flatten().unwrap_or(0);
                (at <= last).then(|| format!("p{p}: committed {at}, last record at {last}"))
            })
            .collect();
        if behind.is_empty() {
            return Ok(());
        }
        ensure!(
            Instant::now() < deadline,
            "the copy stage did not catch up within {timeout:?}: {}",
            behind.join(", ")
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The stage's anomalies, with examples in `notes`. `input`: [`TXN_TOPIC`] read with
/// `read_committed`; `sent`: every value the producers sent; `committed`: the group's final
/// committed offsets; `stage`: what the workers recorded; `output`: [`STAGE_OUTPUT`] read with
/// `read_committed`.
pub fn judge(
    input: &CommittedLog,
    sent: &HashSet<&str>,
    committed: &BTreeMap<i32, Option<i64>>,
    stage: &[StageTxn],
    output: &CommittedLog,
    notes: &mut AnomalyNotes,
) -> StageReport {
    let mut r = StageReport::default();
    let input_at: HashMap<&str, (i32, i64)> = input
        .iter()
        .flat_map(|(p, records)| records.iter().map(move |(o, v)| (v.as_str(), (*p, *o))))
        .collect();
    let mut sent_by: HashMap<String, usize> = HashMap::new();
    for (i, t) in stage.iter().enumerate() {
        match t.end {
            TxnEnd::Committed => r.committed += 1,
            TxnEnd::Aborted => r.aborted += 1,
            TxnEnd::Unknown => r.unknown += 1,
        }
        let tag = t.tag();
        sent_by.extend(t.reads.iter().map(|read| (copy_value(&tag, read), i)));
    }

    let mut visible: HashMap<&str, u32> = HashMap::new();
    // Per input value: (output partition, output offset, tag) of each visible copy.
    let mut copies_of: HashMap<&str, Vec<(i32, i64, &str)>> = HashMap::new();
    let mut aborted_reads: BTreeMap<&str, String> = BTreeMap::new();
    // Per output partition, in log order: (input partition, input offset, tag).
    let mut written: BTreeMap<i32, Vec<(i32, i64, &str)>> = BTreeMap::new();
    let mut unexplained = |value: &str, why: &str, notes: &mut AnomalyNotes| {
        r.unexplained += 1;
        notes.add("copy stage unexplained", || format!("{value:?}: {why}"));
    };
    for (out_partition, records) in output {
        for (out_offset, value) in records {
            *visible.entry(value).or_default() += 1;
            let Some(c) = parse_copy(value) else {
                unexplained(value, "not a copy", notes);
                continue;
            };
            match sent_by.get(value.as_str()).map(|i| stage[*i].end) {
                None => unexplained(value, "no stage transaction wrote it", notes),
                Some(TxnEnd::Aborted) => {
                    let why =
                        format!("at {STAGE_OUTPUT}-{out_partition}@{out_offset}, written by an aborted transaction");
                    aborted_reads.insert(value, why);
                }
                Some(_) => {}
            }
            if c.partition != *out_partition {
                unexplained(value, &format!("in {STAGE_OUTPUT}-{out_partition}"), notes);
            }
            match input_at.get(c.input) {
                Some(at) => {
                    if *at != (c.partition, c.offset) {
                        let why = format!("{TXN_TOPIC} holds the input at {}@{}", at.0, at.1);
                        unexplained(value, &why, notes);
                    }
                    copies_of
                        .entry(c.input)
                        .or_default()
                        .push((*out_partition, *out_offset, c.tag));
                }
                None if sent.contains(c.input) => {
                    let why = format!("at {STAGE_OUTPUT}-{out_partition}@{out_offset}, its input is not committed");
                    aborted_reads.insert(value, why);
                }
                None => unexplained(value, "its input was never sent", notes),
            }
            written
                .entry(*out_partition)
                .or_default()
                .push((c.partition, c.offset, c.tag));
        }
    }

    let mut lost: BTreeMap<&str, String> = BTreeMap::new();
    for (p, records) in input {
        let below = committed.get(p).copied().flatten().unwrap_or(0);
        for (o, v) in records
            .iter()
            .filter(|(o, v)| *o < below && !copies_of.contains_key(v.as_str()))
        {
            let why = format!("{TXN_TOPIC}-{p}@{o}, below the committed offset {below}, has no copy");
            lost.entry(v.as_str()).or_insert(why);
        }
    }
    for t in stage {
        let tag = t.tag();
        let missing: Vec<&Read> = t
            .reads
            .iter()
            .filter(|read| !visible.contains_key(copy_value(&tag, read).as_str()))
            .collect();
        match t.end {
            TxnEnd::Committed => {
                for read in &missing {
                    let why = format!("{tag} committed (acknowledged) its copy, which is not visible");
                    lost.entry(read.value.as_str()).or_insert(why);
                }
            }
            TxnEnd::Unknown if !missing.is_empty() && missing.len() != t.reads.len() => {
                r.torn += 1;
                notes.add("copy stage torn", || {
                    format!(
                        "{tag}: {} of {} copies visible",
                        t.reads.len() - missing.len(),
                        t.reads.len()
                    )
                });
            }
            _ => {}
        }
        r.non_monotonic += poll_anomalies(t, input, notes);
    }
    r.lost = lost.len() as u64;
    for (v, why) in &lost {
        notes.add("copy stage lost", || format!("{v}: {why}"));
    }
    for (input, copies) in copies_of.iter().filter(|(_, copies)| copies.len() > 1) {
        r.duplicates += 1;
        notes.add("copy stage duplicates", || {
            format!("{input} copied to (partition, offset, by) {copies:?}")
        });
    }
    r.aborted_reads = aborted_reads.len() as u64;
    for (v, why) in &aborted_reads {
        notes.add("copy stage aborted reads", || format!("{v:?} {why}"));
    }
    for (out_partition, copies) in &written {
        for w in copies.windows(2).filter(|w| w[0].0 == w[1].0 && w[1].1 <= w[0].1) {
            r.non_monotonic += 1;
            notes.add("copy stage non-monotonic", || {
                format!(
                    "in {STAGE_OUTPUT}-{out_partition}, {}'s copy of input offset {} after {}'s of {}",
                    w[1].2, w[1].1, w[0].2, w[0].1
                )
            });
        }
    }
    let cycles = g1c_cycles(&written);
    r.cycles = cycles.len() as u64;
    for cycle in cycles {
        notes.add("copy stage G1c cycles", || format!("among {cycle:?}"));
    }
    r
}

/// Within one transaction, per input partition, reads that go back or skip a record the final
/// input log holds between them.
fn poll_anomalies(t: &StageTxn, input: &CommittedLog, notes: &mut AnomalyNotes) -> u64 {
    let mut last: BTreeMap<i32, i64> = BTreeMap::new();
    let mut anomalies = 0;
    for read in &t.reads {
        if let Some(prev) = last.insert(read.partition, read.offset) {
            let skipped: Vec<i64> = input.get(&read.partition).map_or(Vec::new(), |records| {
                records
                    .iter()
                    .map(|(o, _)| *o)
                    .filter(|o| *o > prev && *o < read.offset)
                    .collect()
            });
            if read.offset <= prev || !skipped.is_empty() {
                anomalies += 1;
                notes.add("copy stage non-monotonic", || {
                    let order: Vec<i64> = t
                        .reads
                        .iter()
                        .filter(|r| r.partition == read.partition)
                        .map(|r| r.offset)
                        .collect();
                    format!(
                        "{} read {TXN_TOPIC}-{}@{} after @{prev} (committed offsets skipped: {skipped:?}; its reads of the partition in order: {order:?}; it ended {:?})",
                        t.tag(),
                        read.partition,
                        read.offset,
                        t.end
                    )
                });
            }
        }
    }
    anomalies
}

/// Cycles among the stage's visible transactions (module header): strongly connected
/// components of more than one transaction, over "consumed just before" edges per input
/// partition and "wrote just before" edges per output partition; each as its tags.
fn g1c_cycles<'a>(written: &BTreeMap<i32, Vec<(i32, i64, &'a str)>>) -> Vec<Vec<&'a str>> {
    fn id<'a>(tag: &'a str, ids: &mut HashMap<&'a str, usize>) -> usize {
        let n = ids.len();
        *ids.entry(tag).or_insert(n)
    }
    let mut ids: HashMap<&str, usize> = HashMap::new();
    let mut edges = Vec::new();
    let mut consumed: BTreeMap<i32, Vec<(i64, &str)>> = BTreeMap::new();
    for copies in written.values() {
        for w in copies.windows(2) {
            edges.push((id(w[0].2, &mut ids), id(w[1].2, &mut ids)));
        }
        for (p, o, tag) in copies {
            id(tag, &mut ids);
            consumed.entry(*p).or_default().push((*o, *tag));
        }
    }
    for reads in consumed.values_mut() {
        reads.sort();
        for w in reads.windows(2) {
            edges.push((id(w[0].1, &mut ids), id(w[1].1, &mut ids)));
        }
    }
    let mut tags = vec![""; ids.len()];
    for (tag, i) in &ids {
        tags[*i] = tag;
    }
    cyclic_components(ids.len(), &edges)
        .into_iter()
        .map(|component| {
            let mut members: Vec<&str> = component.iter().map(|i| tags[*i]).collect();
            members.sort();
            members
        })
        .collect()
}

/// Strongly connected components of more than one node in the directed graph over `0..n`
/// (Kosaraju, iterative: the graph can be a chain thousands of transactions long).
fn cyclic_components(n: usize, edges: &[(usize, usize)]) -> Vec<Vec<usize>> {
    let mut out = vec![Vec::new(); n];
    let mut into = vec![Vec::new(); n];
    for &(a, b) in edges.iter().filter(|(a, b)| a != b) {
        out[a].push(b);
        into[b].push(a);
    }
    let mut seen = vec![false; n];
    let mut finished = Vec::with_capacity(n);
    for start in 0..n {
        if seen[start] {
            continue;
        }
        seen[start] = true;
        let mut stack = vec![(start, 0usize)];
        while let Some(top) = stack.last_mut() {
            let v = top.0;
            match out[v].get(top.1) {
                Some(&w) => {
                    top.1 += 1;
                    if !seen[w] {
                        seen[w] = true;
                        stack.push((w, 0));
                    }
                }
                None => {
                    finished.push(v);
                    stack.pop();
                }
            }
        }
    }
    let mut component = vec![usize::MAX; n];
    let mut cyclic = Vec::new();
    for &root in finished.iter().rev() {
        if component[root] != usize::MAX {
            continue;
        }
        component[root] = root;
        let (mut members, mut stack) = (Vec::new(), vec![root]);
        while let Some(v) = stack.pop() {
            members.push(v);
            for &w in &into[v] {
                if component[w] == usize::MAX {
                    component[w] = root;
                    stack.push(w);
                }
            }
        }
        if members.len() > 1 {
            cyclic.push(members);
        }
    }
    cyclic
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(partition: i32, offset: i64, value: &str) -> Read {
        Read {
            partition,
            offset,
            value: value.to_string(),
        }
    }

    fn txn(worker: usize, txn: u64, reads: Vec<Read>, end: TxnEnd) -> StageTxn {
        StageTxn {
            worker,
            txn,
            reads,
            end,
        }
    }

    /// The output as the stage's transactions that committed would leave it.
    fn output_of(stage: &[StageTxn]) -> CommittedLog {
        let mut out = CommittedLog::new();
        for t in stage.iter().filter(|t| t.end == TxnEnd::Committed) {
            for r in &t.reads {
                let records = out.entry(r.partition).or_default();
                let offset = records.len() as i64;
                records.push((offset, copy_value(&t.tag(), r)));
            }
        }
        out
    }

    fn input() -> CommittedLog {
        // p0: a@0, (aborted x@1), b@2, c@3; p1: d@0
        CommittedLog::from([
            (0, vec![(0, "a".into()), (2, "b".into()), (3, "c".into())]),
            (1, vec![(0, "d".into())]),
        ])
    }

    fn all_committed() -> BTreeMap<i32, Option<i64>> {
        BTreeMap::from([(0, Some(4)), (1, Some(1))])
    }

    #[test]
    fn a_clean_copy_has_no_anomalies() {
        let stage = vec![
            txn(0, 0, vec![read(0, 0, "a"), read(1, 0, "d")], TxnEnd::Committed),
            txn(0, 1, vec![read(0, 2, "b")], TxnEnd::Aborted),
            txn(1, 0, vec![read(0, 2, "b"), read(0, 3, "c")], TxnEnd::Committed),
        ];
        let sent = HashSet::from(["a", "b", "c", "d", "x"]);
        let mut notes = AnomalyNotes::default();
        let r = judge(
            &input(),
            &sent,
            &all_committed(),
            &stage,
            &output_of(&stage),
            &mut notes,
        );
        assert_eq!((r.committed, r.aborted, r.unknown), (2, 1, 0));
        assert_eq!(r.anomalies(), 0, "{r:?}");
        assert!(notes.is_empty(), "{notes:?}");
        let c = copy_value("s1-t0", &read(0, 3, "c"));
        let parsed = parse_copy(&c).expect("parses");
        assert_eq!(
            (parsed.tag, parsed.partition, parsed.offset, parsed.input),
            ("s1-t0", 0, 3, "c")
        );
    }

    #[test]
    fn each_stage_anomaly_is_counted() {
        let stage = vec![
            // copies the aborted x: an aborted read through the stage; skips b: a poll anomaly
            txn(
                0,
                0,
                vec![read(0, 0, "a"), read(0, 1, "x"), read(0, 3, "c")],
                TxnEnd::Committed,
            ),
            // copies c again: a duplicate
            txn(1, 0, vec![read(0, 3, "c")], TxnEnd::Committed),
            // d's copy, acknowledged, is missing below (lost); b never copied (lost)
            txn(1, 1, vec![read(1, 0, "d")], TxnEnd::Committed),
            // aborted yet visible below
            txn(1, 2, vec![read(0, 2, "b")], TxnEnd::Aborted),
        ];
        let sent = HashSet::from(["a", "b", "c", "d", "x"]);
        let mut output = output_of(&stage[..2]);
        output
            .get_mut(&0)
            .expect("p0")
            .push((9, copy_value("s1-t2", &read(0, 2, "b"))));
        output.get_mut(&0).expect("p0").push((10, "garbage".into()));
        let mut notes = AnomalyNotes::default();
        let r = judge(&input(), &sent, &all_committed(), &stage, &output, &mut notes);
        assert_eq!(r.aborted_reads, 2, "x copied, s1-t2 visible: {r:?}");
        assert_eq!(r.duplicates, 1, "c twice: {r:?}");
        assert_eq!(
            r.lost, 1,
            "d's acknowledged copy missing; b has an aborted copy only: {r:?}"
        );
        assert_eq!(r.unexplained, 1, "garbage: {r:?}");
        // In p0's output: a@0, x@1, c@3, c@3 (not increasing), b@2 (back): two; s0-t0 skipped b@2: one.
        assert_eq!(r.non_monotonic, 3, "{r:?}");
        // s1-t2 consumed b@2 between s0-t0's x@1 and c@3: each before the other.
        assert_eq!(r.cycles, 1, "{r:?}");
        assert_eq!(notes.lines().len(), 6, "every kind but torn noted: {notes:?}");
    }

    #[test]
    fn a_record_not_yet_consumed_is_not_lost_and_an_unknown_outcome_must_be_all_or_nothing() {
        let stage = vec![txn(0, 0, vec![read(0, 0, "a"), read(0, 2, "b")], TxnEnd::Unknown)];
        let sent = HashSet::from(["a", "b", "c", "d"]);
        let mut output = output_of(&[txn(0, 0, stage[0].reads[..1].to_vec(), TxnEnd::Committed)]);
        output.insert(1, Vec::new());
        let committed = BTreeMap::from([(0, Some(1)), (1, None)]);
        let mut notes = AnomalyNotes::default();
        let r = judge(&input(), &sent, &committed, &stage, &output, &mut notes);
        assert_eq!((r.lost, r.torn), (0, 1), "{r:?}");
    }

    #[test]
    fn transactions_ordered_one_way_on_one_partition_and_the_other_way_on_another_form_a_cycle() {
        // s0-t0 consumed p0 before s1-t0, but s1-t0 consumed p1 before s0-t0.
        let written = BTreeMap::from([
            (0, vec![(0, 0, "s0-t0"), (0, 1, "s1-t0")]),
            (1, vec![(1, 0, "s1-t0"), (1, 1, "s0-t0")]),
            (2, vec![(2, 0, "s0-t1"), (2, 1, "s1-t1")]),
        ]);
        assert_eq!(g1c_cycles(&written), vec![vec!["s0-t0", "s1-t0"]]);
        let consistent = BTreeMap::from([
            (0, vec![(0, 0, "s0-t0"), (0, 1, "s1-t0")]),
            (1, vec![(1, 0, "s0-t0"), (1, 1, "s1-t0")]),
        ]);
        assert!(g1c_cycles(&consistent).is_empty());
        // Output order that disagrees with the input order it was consumed in, on one partition.
        let swapped = BTreeMap::from([(0, vec![(0, 1, "s1-t0"), (0, 0, "s0-t0")])]);
        assert_eq!(g1c_cycles(&swapped).len(), 1);
        let chain: Vec<(usize, usize)> = (0..100_000).map(|i| (i, i + 1)).collect();
        assert!(cyclic_components(100_001, &chain).is_empty());
        assert_eq!(cyclic_components(3, &[(0, 1), (1, 2), (2, 0)]).len(), 1);
    }
}

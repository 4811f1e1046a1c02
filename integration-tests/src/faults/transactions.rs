//! The soak's transactional workload (`scripts/soak.sh --transactions`): transactional
//! producers (librdkafka, each its own `transactional.id`) that commit or abort at random
//! while the schedule's faults hit the cluster, recording what each transaction held and how
//! it ended as the client saw it; and the checker, which reads the topic afterwards with a
//! `read_committed` consumer and counts Jepsen's anomalies for Kafka-like systems:
//!
//! - **lost writes**: a record of a transaction whose commit was acknowledged is not visible;
//! - **duplicates**: a record is visible more than once;
//! - **aborted reads**: a record of a transaction that was aborted (acknowledged) is visible;
//! - **torn transactions**: some but not all of a transaction's records are visible (for one
//!   whose outcome the client does not know, after a fault, all or none must be);
//! - **non-monotonic**: a producer's visible records in one partition are out of the order it
//!   sent them (its transactions are sequential);
//! - anything visible that no producer sent.
//!
//! The consume-transform-produce stage that copies this topic to another in transactions, and
//! its own checks (including G1c cycles), are in [`super::consume_transform_produce`];
//! [`TxnReport`] holds both sets of figures.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Message, Offset};

use super::consume_transform_produce::{self, StageReport, STAGE_WORKERS};
use crate::clients;

/// The transactional workload's topic.
pub const TXN_TOPIC: &str = "soak-tx";
/// Concurrent transactional producers.
const PRODUCERS: usize = 2;
/// Transactional ids in use: the producers' (`soak-tx-0`, ...), then the consume-transform-produce
/// stage's (`soak-tx-copier-0`, ...). A schedule's [`super::schedule::Target::TxnCoordinator`]
/// names one by its number.
pub const TRANSACTIONAL_IDS: usize = PRODUCERS + STAGE_WORKERS;
/// Records per transaction: 1 to this many.
const MAX_RECORDS_PER_TXN: u64 = 8;
/// Per mille of transactions the producer aborts on purpose.
const ABORT_PER_MILLE: u64 = 300;
/// A producer's transaction timeout: one abandoned by a failed client is aborted this soon.
pub(super) const TRANSACTION_TIMEOUT_MS: &str = "10000";
pub(super) const CALL_TIMEOUT: Duration = Duration::from_secs(20);
/// The group the checker's consumer names (it assigns partitions, never joins it).
pub const CHECKER_GROUP: &str = "soak-tx-checker";
/// How long the checker waits for every partition's last stable offset to reach its end.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(90);

/// How a transaction ended, as its producer saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnEnd {
    Committed,
    Aborted,
    /// The commit or abort failed in a way that leaves the outcome to the coordinator.
    Unknown,
}

/// One transaction as its producer recorded it.
#[derive(Debug, Clone)]
pub struct TxnRecord {
    pub producer: usize,
    pub txn: u64,
    /// (partition, value) in send order.
    pub records: Vec<(i32, String)>,
    pub end: TxnEnd,
}

/// The producers' transactional ids.
pub fn producer_transactional_ids() -> impl Iterator<Item = String> {
    (0..PRODUCERS).map(|k| transactional_id(k as u8))
}

/// Transactional id number `k` ([`TRANSACTIONAL_IDS`]): a producer's, then a stage worker's.
pub fn transactional_id(k: u8) -> String {
    let k = usize::from(k);
    match k < PRODUCERS {
        true => format!("soak-tx-{k}"),
        false => consume_transform_produce::transactional_id(k - PRODUCERS),
    }
}

/// Counts of each anomaly, and of transactions by how they ended: the producers' on
/// [`TXN_TOPIC`], and the consume-transform-produce stage's (`stage`).
#[derive(Debug, Default, Clone, Copy)]
pub struct TxnReport {
    pub committed: u64,
    pub aborted: u64,
    pub unknown: u64,
    pub lost_writes: u64,
    pub duplicates: u64,
    pub aborted_reads: u64,
    pub torn: u64,
    pub non_monotonic: u64,
    pub unexplained: u64,
    pub stage: StageReport,
}

impl TxnReport {
    pub fn anomalies(&self) -> u64 {
        self.lost_writes
            + self.duplicates
            + self.aborted_reads
            + self.torn
            + self.non_monotonic
            + self.unexplained
            + self.stage.anomalies()
    }

    pub fn add(&mut self, o: &TxnReport) {
        self.committed += o.committed;
        self.aborted += o.aborted;
        self.unknown += o.unknown;
        self.lost_writes += o.lost_writes;
        self.duplicates += o.duplicates;
        self.aborted_reads += o.aborted_reads;
        self.torn += o.torn;
        self.non_monotonic += o.non_monotonic;
        self.unexplained += o.unexplained;
        self.stage.add(&o.stage);
    }

    /// The figures as the soak prints them.
    pub fn line(&self) -> String {
        format!(
            "transactions: {} committed, {} aborted, {} unknown; {} lost writes, {} duplicates, {} aborted reads, {} torn, {} non-monotonic, {} unexplained; {}",
            self.committed,
            self.aborted,
            self.unknown,
            self.lost_writes,
            self.duplicates,
            self.aborted_reads,
            self.torn,
            self.non_monotonic,
            self.unexplained,
            self.stage.line()
        )
    }
}

/// Examples of each anomaly found (at most [`NOTES_PER_KIND`] of a kind), for the report of a
/// failed schedule: which record, where.
#[derive(Debug, Default, Clone)]
pub struct AnomalyNotes(BTreeMap<String, Vec<String>>);

/// Examples kept per kind of anomaly.
const NOTES_PER_KIND: usize = 5;

impl AnomalyNotes {
    /// Notes an example of `kind` (described only if fewer than [`NOTES_PER_KIND`] are kept).
    pub fn add(&mut self, kind: &str, detail: impl FnOnce() -> String) {
        let kept = self.0.entry(kind.to_string()).or_default();
        if kept.len() < NOTES_PER_KIND {
            kept.push(detail());
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// One line per kind: `kind: example; example; ...`.
    pub fn lines(&self) -> Vec<String> {
        self.0
            .iter()
            .map(|(kind, examples)| format!("{kind}: {}", examples.join("; ")))
            .collect()
    }
}

/// The running producers.
pub struct TxnWorkload {
    stop: Arc<AtomicBool>,
    ends: Arc<EndCounts>,
    threads: Vec<JoinHandle<Vec<TxnRecord>>>,
}

/// How many transactions the producers have committed and aborted so far, as they saw it.
#[derive(Default)]
struct EndCounts {
    committed: AtomicU64,
    aborted: AtomicU64,
}

impl TxnWorkload {
    /// Starts the producers on `topic` (`partitions` partitions), seeded by `seed`.
    pub fn start(config: ClientConfig, topic: &str, partitions: i32, seed: u64) -> TxnWorkload {
        let stop = Arc::new(AtomicBool::new(false));
        let ends = Arc::new(EndCounts::default());
        let threads = (0..PRODUCERS)
            .map(|id| {
                let stop = stop.clone();
                let ends = ends.clone();
                let config = config.clone();
                let topic = topic.to_string();
                let rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(id as u64 + 1);
                std::thread::spawn(move || produce(id, config, &topic, partitions, rng, &stop, &ends))
            })
            .collect();
        TxnWorkload { stop, ends, threads }
    }

    /// (committed, aborted) transactions so far, as the producers saw their ends.
    pub fn ended(&self) -> (u64, u64) {
        (
            self.ends.committed.load(Ordering::Relaxed),
            self.ends.aborted.load(Ordering::Relaxed),
        )
    }

    /// Stops the producers after their current transaction and returns what they recorded.
    pub fn stop(self) -> Vec<TxnRecord> {
        self.stop.store(true, Ordering::Relaxed);
        self.threads
            .into_iter()
            .flat_map(|t| t.join().unwrap_or_default())
            .collect()
    }
}

/// xorshift64*: the workload's choices, reproducible from the seed.
pub(super) fn next(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_F491_4F6C_DD1D)
}

/// A producer with its own polling thread: commits and aborts return as soon as librdkafka
/// has its answers (a `BaseProducer` would wait for the caller's next poll, and an abort for
/// its delivery reports, which nobody would serve).
pub(super) type TxnProducer = ThreadedProducer<DefaultProducerContext>;

fn new_producer(config: &ClientConfig, id: usize) -> Option<TxnProducer> {
    new_transactional_producer(config, &transactional_id(id as u8))
}

/// A producer for `transactional_id`, initialised (fencing its predecessors); `None` after
/// saying why on stderr.
pub(super) fn new_transactional_producer(config: &ClientConfig, transactional_id: &str) -> Option<TxnProducer> {
    let created = config
        .clone()
        .set("transactional.id", transactional_id)
        .set("transaction.timeout.ms", TRANSACTION_TIMEOUT_MS)
        .create::<TxnProducer>()
        .and_then(|p| p.init_transactions(CALL_TIMEOUT).map(|()| p));
    match created {
        Ok(p) => Some(p),
        Err(e) => {
            eprintln!("{transactional_id}: no transactional producer yet: {e}");
            None
        }
    }
}

fn produce(
    id: usize,
    config: ClientConfig,
    topic: &str,
    partitions: i32,
    mut rng: u64,
    stop: &AtomicBool,
    ends: &EndCounts,
) -> Vec<TxnRecord> {
    let mut done = Vec::new();
    let mut producer = None;
    let mut txn = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let Some(p) = producer.take().or_else(|| new_producer(&config, id)) else {
            std::thread::sleep(Duration::from_millis(200));
            continue;
        };
        if p.begin_transaction().is_err() {
            continue; // a new producer (fencing and aborting whatever is open)
        }
        let count = 1 + next(&mut rng) % MAX_RECORDS_PER_TXN;
        let mut records = Vec::new();
        let mut sent_all = true;
        for k in 0..count {
            let partition = (next(&mut rng) % partitions as u64) as i32;
            let value = format!("p{id}-t{txn}-r{k}");
            let record = BaseRecord::<(), str>::to(topic).partition(partition).payload(&value);
            if send(&p, record).is_err() {
                sent_all = false;
                break;
            }
            records.push((partition, value));
        }
        let abort = !sent_all || next(&mut rng) % 1000 < ABORT_PER_MILLE;
        let (end, keep) = match (abort, sent_all) {
            (true, true) => abort_written(&p),
            (true, false) => end_abort(&p),
            (false, _) => end_commit(&p),
        };
        match end {
            TxnEnd::Committed => ends.committed.fetch_add(1, Ordering::Relaxed),
            TxnEnd::Aborted => ends.aborted.fetch_add(1, Ordering::Relaxed),
            TxnEnd::Unknown => 0,
        };
        done.push(TxnRecord {
            producer: id,
            txn,
            records,
            end,
        });
        txn += 1;
        if keep {
            producer = Some(p);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    done
}

/// Enqueues a record, waiting while librdkafka's queue is full.
pub(super) fn send(p: &TxnProducer, mut record: BaseRecord<'_, (), str>) -> Result<()> {
    use rdkafka::types::RDKafkaErrorCode;
    let deadline = Instant::now() + CALL_TIMEOUT;
    loop {
        match p.send(record) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) if Instant::now() < deadline => {
                record = r;
                std::thread::sleep(Duration::from_millis(5));
            }
            Err((e, _)) => anyhow::bail!("send: {e}"),
        }
    }
}

/// Commits, retrying what librdkafka says to retry; aborts when it says the transaction
/// must be. Returns how it ended and whether the producer is still usable.
pub(super) fn end_commit(p: &TxnProducer) -> (TxnEnd, bool) {
    for _ in 0..5 {
        match p.commit_transaction(CALL_TIMEOUT) {
            Ok(()) => return (TxnEnd::Committed, true),
            Err(KafkaError::Transaction(e)) if e.is_retriable() => continue,
            Err(KafkaError::Transaction(e)) if e.txn_requires_abort() => return end_abort(p),
            Err(_) => return (TxnEnd::Unknown, false),
        }
    }
    (TxnEnd::Unknown, false)
}

/// Aborts on purpose once the transaction's records are written: without the flush librdkafka
/// would mostly drop them from its queue (`linger.ms`) before they reached a broker, and the
/// log would hold no aborted records for a `read_committed` reader to skip (a run of 100
/// schedules once left not a single ABORT marker in `soak-tx`).
pub(super) fn abort_written(p: &TxnProducer) -> (TxnEnd, bool) {
    let _ = p.flush(CALL_TIMEOUT); // if it fails, the abort still decides the transaction
    end_abort(p)
}

pub(super) fn end_abort(p: &TxnProducer) -> (TxnEnd, bool) {
    for _ in 0..5 {
        match p.abort_transaction(CALL_TIMEOUT) {
            Ok(()) => return (TxnEnd::Aborted, true),
            Err(KafkaError::Transaction(e)) if e.is_retriable() => continue,
            Err(_) => return (TxnEnd::Unknown, false),
        }
    }
    (TxnEnd::Unknown, false)
}

/// What a `read_committed` consumer sees of a topic: per partition, (offset, value) in
/// offset order.
pub type CommittedLog = BTreeMap<i32, Vec<(i64, String)>>;

/// Reads every partition of `topic` with `read_committed` up to its high watermark, which
/// needs every transaction decided (the last stable offset must reach it).
///
/// A leader elected a moment ago reports the high watermark it had as a follower until its
/// followers fetch again (as Kafka's does), which can be below records already committed and
/// served; the check starts right after healing, when preferred leaders move back. So the high
/// watermarks are taken in passes until one brings nothing higher, and again once the reader
/// has reached them, until they hold still: otherwise a partition's last records go unread
/// (seed 2005 once reported 4 lost writes that every replica held, committed, at the end of
/// their partitions).
pub fn read_committed(consumer_config: ClientConfig, topic: &str, partitions: i32) -> Result<CommittedLog> {
    let consumer: BaseConsumer = consumer_config
        .clone()
        .set("isolation.level", "read_committed")
        .set("group.id", CHECKER_GROUP)
        .create()?;
    let all: Vec<i32> = (0..partitions).collect();
    clients::assign(&consumer, topic, &all, Offset::Beginning)?;
    let mut log: CommittedLog = all.iter().map(|p| (*p, Vec::new())).collect();
    let deadline = Instant::now() + SETTLE_TIMEOUT;
    let mut ends = settled_high_watermarks(&consumer, topic, &all, BTreeMap::new(), deadline)?;
    loop {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
            let value = String::from_utf8_lossy(m.payload().unwrap_or_default()).to_string();
            log.entry(m.partition()).or_default().push((m.offset(), value));
        }
        let caught_up = consumer.position().ok().is_some_and(|pos| {
            ends.iter()
                .all(|(p, end)| match pos.find_partition(topic, *p).map(|e| e.offset()) {
                    Some(Offset::Offset(o)) => o >= *end,
                    _ => *end == 0,
                })
        });
        if caught_up {
            let again = settled_high_watermarks(&consumer, topic, &all, ends.clone(), deadline)?;
            if again == ends {
                break;
            }
            ends = again;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "read_committed did not reach the high watermark of every partition of {topic} within {SETTLE_TIMEOUT:?} (a transaction left undecided?)"
        );
    }
    Ok(log)
}

/// The highest high watermark of each partition over passes half a second apart, starting
/// from `known`, until a pass brings nothing higher (or 10 s have passed).
fn settled_high_watermarks(
    consumer: &BaseConsumer,
    topic: &str,
    partitions: &[i32],
    mut known: BTreeMap<i32, i64>,
    deadline: Instant,
) -> Result<BTreeMap<i32, i64>> {
    let settle_deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut raised = known.is_empty();
        for p in partitions {
            let hw = high_watermark(consumer, topic, *p, deadline)?;
            let highest = known.entry(*p).or_insert(hw);
            if hw > *highest {
                *highest = hw;
                raised = true;
            }
        }
        if !raised || Instant::now() >= settle_deadline {
            return Ok(known);
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// A partition's high watermark, asked again while its leadership moves (the check starts
/// right after healing, when preferred leaders are being restored) until `deadline`.
fn high_watermark(consumer: &BaseConsumer, topic: &str, partition: i32, deadline: Instant) -> Result<i64> {
    loop {
        match consumer.fetch_watermarks(topic, partition, CALL_TIMEOUT) {
            Ok((_, high)) => return Ok(high),
            Err(e) if Instant::now() < deadline => {
                eprintln!("high watermark of {topic}-{partition}: {e}; asking again");
                std::thread::sleep(Duration::from_millis(500));
            }
            Err(e) => return Err(e).with_context(|| format!("high watermark of {topic}-{partition}")),
        }
    }
}

/// The producers' anomalies in `log` ([`TXN_TOPIC`] read with [`read_committed`]), with
/// examples in `notes`.
pub fn judge_log(txns: &[TxnRecord], log: &CommittedLog, notes: &mut AnomalyNotes) -> TxnReport {
    let mut seen: HashMap<String, Vec<(i32, i64)>> = HashMap::new();
    let mut order: BTreeMap<(usize, i32), Vec<(u64, u64)>> = BTreeMap::new();
    for (partition, records) in log {
        for (offset, value) in records {
            if let Some((producer, txn, k)) = parse(value) {
                order.entry((producer, *partition)).or_default().push((txn, k));
            }
            seen.entry(value.clone()).or_default().push((*partition, *offset));
        }
    }
    judge(txns, &seen, &order, notes)
}

/// Every value the producers sent, whatever became of it.
pub fn sent_values(txns: &[TxnRecord]) -> HashSet<&str> {
    txns.iter()
        .flat_map(|t| t.records.iter().map(|(_, v)| v.as_str()))
        .collect()
}

/// `p{producer}-t{txn}-r{k}` back into its numbers.
fn parse(value: &str) -> Option<(usize, u64, u64)> {
    let rest = value.strip_prefix('p')?;
    let (producer, rest) = rest.split_once("-t")?;
    let (txn, k) = rest.split_once("-r")?;
    Some((producer.parse().ok()?, txn.parse().ok()?, k.parse().ok()?))
}

/// The anomaly counts of what was seen (each value with the partitions and offsets it was
/// seen at) against what was sent.
fn judge(
    txns: &[TxnRecord],
    seen: &HashMap<String, Vec<(i32, i64)>>,
    order: &BTreeMap<(usize, i32), Vec<(u64, u64)>>,
    notes: &mut AnomalyNotes,
) -> TxnReport {
    let mut report = TxnReport::default();
    let at = |v: &str| format!("{:?}", seen.get(v).map(Vec::as_slice).unwrap_or_default());
    for t in txns {
        let visible = t.records.iter().filter(|(_, v)| seen.contains_key(v)).count();
        for (_, v) in t
            .records
            .iter()
            .filter(|(_, v)| seen.get(v).is_some_and(|at| at.len() > 1))
        {
            report.duplicates += 1;
            notes.add("duplicates", || format!("{v} at (partition, offset) {}", at(v)));
        }
        match t.end {
            TxnEnd::Committed => {
                report.committed += 1;
                for (p, v) in t.records.iter().filter(|(_, v)| !seen.contains_key(v)) {
                    report.lost_writes += 1;
                    notes.add("lost writes", || {
                        format!("{v} (sent to {TXN_TOPIC}-{p}, commit acknowledged)")
                    });
                }
            }
            TxnEnd::Aborted => {
                report.aborted += 1;
                for (_, v) in t.records.iter().filter(|(_, v)| seen.contains_key(v)) {
                    report.aborted_reads += 1;
                    notes.add("aborted reads", || format!("{v} at (partition, offset) {}", at(v)));
                }
            }
            TxnEnd::Unknown => {
                report.unknown += 1;
                if visible != 0 && visible != t.records.len() {
                    report.torn += 1;
                    notes.add("torn", || {
                        format!(
                            "p{}-t{}: {visible} of {} records visible",
                            t.producer,
                            t.txn,
                            t.records.len()
                        )
                    });
                }
            }
        }
    }
    let sent = sent_values(txns);
    for v in seen.keys().filter(|v| !sent.contains(v.as_str())) {
        report.unexplained += 1;
        notes.add("unexplained", || format!("{v} at (partition, offset) {}", at(v)));
    }
    for ((producer, partition), records) in order {
        for w in records.windows(2).filter(|w| w[1] <= w[0]) {
            report.non_monotonic += 1;
            notes.add("non-monotonic", || {
                format!(
                    "in {TXN_TOPIC}-{partition}, p{producer}-t{}-r{} after p{producer}-t{}-r{}",
                    w[1].0, w[1].1, w[0].0, w[0].1
                )
            });
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    fn txn(producer: usize, txn: u64, n: u64, end: TxnEnd) -> TxnRecord {
        TxnRecord {
            producer,
            txn,
            records: (0..n).map(|k| (0, format!("p{producer}-t{txn}-r{k}"))).collect(),
            end,
        }
    }

    #[test]
    fn each_anomaly_is_counted() {
        let txns = vec![
            txn(0, 0, 2, TxnEnd::Committed),
            txn(0, 1, 2, TxnEnd::Aborted),
            txn(0, 2, 2, TxnEnd::Unknown),
            txn(1, 0, 2, TxnEnd::Committed),
        ];
        let mut seen: HashMap<String, Vec<(i32, i64)>> = HashMap::new();
        for (o, v) in [
            "p0-t0-r0", "p0-t1-r1", "p0-t2-r0", "p1-t0-r0", "p1-t0-r1", "p1-t0-r1", "p9-t9-r9",
        ]
        .iter()
        .enumerate()
        {
            seen.entry(v.to_string()).or_default().push((0, o as i64));
        }
        let order = BTreeMap::from([((1, 0), vec![(0, 1), (0, 0)])]);
        let mut notes = AnomalyNotes::default();
        let r = judge(&txns, &seen, &order, &mut notes);
        assert_eq!((r.committed, r.aborted, r.unknown), (2, 1, 1));
        assert_eq!(r.lost_writes, 1, "p0-t0-r1 missing");
        assert_eq!(r.aborted_reads, 1, "p0-t1-r1 visible");
        assert_eq!(r.torn, 1, "half of p0-t2 visible");
        assert_eq!(r.duplicates, 1, "p1-t0-r1 twice");
        assert_eq!(r.unexplained, 1, "p9-t9-r9 never sent");
        assert_eq!(r.non_monotonic, 1);
        assert_eq!(r.anomalies(), 6);
        assert_eq!(notes.lines().len(), 6, "{notes:?}");
        assert!(
            notes
                .lines()
                .contains(&"lost writes: p0-t0-r1 (sent to soak-tx-0, commit acknowledged)".to_string()),
            "{notes:?}"
        );
    }

    #[test]
    fn a_clean_history_has_no_anomalies() {
        let txns = vec![
            txn(0, 0, 3, TxnEnd::Committed),
            txn(0, 1, 3, TxnEnd::Aborted),
            txn(0, 2, 1, TxnEnd::Unknown),
        ];
        let seen: HashMap<String, Vec<(i32, i64)>> = ["p0-t0-r0", "p0-t0-r1", "p0-t0-r2", "p0-t2-r0"]
            .iter()
            .enumerate()
            .map(|(o, v)| (v.to_string(), vec![(0, o as i64)]))
            .collect();
        let order = BTreeMap::from([((0, 0), vec![(0, 0), (0, 1), (0, 2), (2, 0)])]);
        let mut notes = AnomalyNotes::default();
        assert_eq!(judge(&txns, &seen, &order, &mut notes).anomalies(), 0);
        assert!(notes.is_empty());
        assert_eq!(parse("p12-t345-r6"), Some((12, 345, 6)));
        assert_eq!(parse("x"), None);
    }
}

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
//! Not yet here: a consume-transform-produce stage and G1a/G1c cycle detection.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer, DefaultProducerContext};
use rdkafka::{Message, Offset};

use crate::clients;

/// The transactional workload's topic.
pub const TXN_TOPIC: &str = "soak-tx";
/// Concurrent transactional producers.
const PRODUCERS: usize = 2;
/// Records per transaction: 1 to this many.
const MAX_RECORDS_PER_TXN: u64 = 8;
/// Per mille of transactions the producer aborts on purpose.
const ABORT_PER_MILLE: u64 = 300;
/// A producer's transaction timeout: one abandoned by a failed client is aborted this soon.
const TRANSACTION_TIMEOUT_MS: &str = "10000";
const CALL_TIMEOUT: Duration = Duration::from_secs(20);
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

/// Counts of each anomaly, and of transactions by how they ended.
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
}

impl TxnReport {
    pub fn anomalies(&self) -> u64 {
        self.lost_writes + self.duplicates + self.aborted_reads + self.torn + self.non_monotonic + self.unexplained
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
    }

    /// The figures as the soak prints them.
    pub fn line(&self) -> String {
        format!(
            "transactions: {} committed, {} aborted, {} unknown; {} lost writes, {} duplicates, {} aborted reads, {} torn, {} non-monotonic, {} unexplained",
            self.committed,
            self.aborted,
            self.unknown,
            self.lost_writes,
            self.duplicates,
            self.aborted_reads,
            self.torn,
            self.non_monotonic,
            self.unexplained
        )
    }
}

/// The running producers.
pub struct TxnWorkload {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<Vec<TxnRecord>>>,
}

impl TxnWorkload {
    /// Starts the producers on `topic` (`partitions` partitions), seeded by `seed`.
    pub fn start(config: ClientConfig, topic: &str, partitions: i32, seed: u64) -> TxnWorkload {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..PRODUCERS)
            .map(|id| {
                let stop = stop.clone();
                let config = config.clone();
                let topic = topic.to_string();
                let rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(id as u64 + 1);
                std::thread::spawn(move || produce(id, config, &topic, partitions, rng, &stop))
            })
            .collect();
        TxnWorkload { stop, threads }
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
fn next(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_F491_4F6C_DD1D)
}

/// A producer with its own polling thread: commits and aborts return as soon as librdkafka
/// has its answers (a `BaseProducer` would wait for the caller's next poll, and an abort for
/// its delivery reports, which nobody would serve).
type TxnProducer = ThreadedProducer<DefaultProducerContext>;

fn new_producer(config: &ClientConfig, id: usize) -> Option<TxnProducer> {
    let created = config
        .clone()
        .set("transactional.id", format!("soak-tx-{id}"))
        .set("transaction.timeout.ms", TRANSACTION_TIMEOUT_MS)
        .create::<TxnProducer>()
        .and_then(|p| p.init_transactions(CALL_TIMEOUT).map(|()| p));
    match created {
        Ok(p) => Some(p),
        Err(e) => {
            eprintln!("soak-tx-{id}: no transactional producer yet: {e}");
            None
        }
    }
}

fn produce(id: usize, config: ClientConfig, topic: &str, partitions: i32, mut rng: u64, stop: &AtomicBool) -> Vec<TxnRecord> {
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
        let (end, keep) = if abort { end_abort(&p) } else { end_commit(&p) };
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
fn send(p: &TxnProducer, mut record: BaseRecord<'_, (), str>) -> Result<()> {
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
fn end_commit(p: &TxnProducer) -> (TxnEnd, bool) {
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

fn end_abort(p: &TxnProducer) -> (TxnEnd, bool) {
    for _ in 0..5 {
        match p.abort_transaction(CALL_TIMEOUT) {
            Ok(()) => return (TxnEnd::Aborted, true),
            Err(KafkaError::Transaction(e)) if e.is_retriable() => continue,
            Err(_) => return (TxnEnd::Unknown, false),
        }
    }
    (TxnEnd::Unknown, false)
}

/// Reads every partition of `topic` with `read_committed` once each partition's last stable
/// offset has reached its high watermark (every transaction decided), and checks `txns`.
pub fn check(consumer_config: ClientConfig, topic: &str, partitions: i32, txns: &[TxnRecord]) -> Result<TxnReport> {
    let consumer: BaseConsumer = consumer_config
        .clone()
        .set("isolation.level", "read_committed")
        .set("group.id", "soak-tx-checker")
        .create()?;
    let all: Vec<i32> = (0..partitions).collect();
    clients::assign(&consumer, topic, &all, Offset::Beginning)?;
    let mut seen: HashMap<String, u32> = HashMap::new();
    let mut order: BTreeMap<(usize, i32), Vec<(u64, u64)>> = BTreeMap::new();
    let deadline = Instant::now() + SETTLE_TIMEOUT;
    let ends: Vec<i64> = all
        .iter()
        .map(|p| {
            consumer
                .fetch_watermarks(topic, *p, CALL_TIMEOUT)
                .map(|(_, high)| high)
                .context("high watermark")
        })
        .collect::<Result<_>>()?;
    loop {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
            let value = String::from_utf8_lossy(m.payload().unwrap_or_default()).to_string();
            if let Some((producer, txn, k)) = parse(&value) {
                order.entry((producer, m.partition())).or_default().push((txn, k));
            }
            *seen.entry(value).or_default() += 1;
        }
        let caught_up = consumer.position().ok().is_some_and(|pos| {
            all.iter().zip(&ends).all(|(p, end)| match pos.find_partition(topic, *p).map(|e| e.offset()) {
                Some(Offset::Offset(o)) => o >= *end,
                _ => *end == 0,
            })
        });
        if caught_up {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "read_committed did not reach the high watermark of every partition of {topic} within {SETTLE_TIMEOUT:?} (a transaction left undecided?)"
        );
    }
    Ok(judge(txns, &seen, &order))
}

/// `p{producer}-t{txn}-r{k}` back into its numbers.
fn parse(value: &str) -> Option<(usize, u64, u64)> {
    let rest = value.strip_prefix('p')?;
    let (producer, rest) = rest.split_once("-t")?;
    let (txn, k) = rest.split_once("-r")?;
    Some((producer.parse().ok()?, txn.parse().ok()?, k.parse().ok()?))
}

/// The anomaly counts of what was seen against what was sent.
fn judge(txns: &[TxnRecord], seen: &HashMap<String, u32>, order: &BTreeMap<(usize, i32), Vec<(u64, u64)>>) -> TxnReport {
    let mut report = TxnReport::default();
    for t in txns {
        let visible = t.records.iter().filter(|(_, v)| seen.contains_key(v)).count();
        report.duplicates += t.records.iter().filter(|(_, v)| seen.get(v).is_some_and(|n| *n > 1)).count() as u64;
        match t.end {
            TxnEnd::Committed => {
                report.committed += 1;
                report.lost_writes += (t.records.len() - visible) as u64;
            }
            TxnEnd::Aborted => {
                report.aborted += 1;
                report.aborted_reads += visible as u64;
            }
            TxnEnd::Unknown => {
                report.unknown += 1;
                if visible != 0 && visible != t.records.len() {
                    report.torn += 1;
                }
            }
        }
    }
    let sent: std::collections::HashSet<&String> = txns.iter().flat_map(|t| t.records.iter().map(|(_, v)| v)).collect();
    report.unexplained = seen.keys().filter(|v| !sent.contains(v)).count() as u64;
    for records in order.values() {
        report.non_monotonic += records.windows(2).filter(|w| w[1] <= w[0]).count() as u64;
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
        let mut seen: HashMap<String, u32> = HashMap::new();
        for v in ["p0-t0-r0", "p0-t1-r1", "p0-t2-r0", "p1-t0-r0", "p1-t0-r1", "p1-t0-r1", "p9-t9-r9"] {
            *seen.entry(v.to_string()).or_default() += 1;
        }
        let order = BTreeMap::from([((1, 0), vec![(0, 1), (0, 0)])]);
        let r = judge(&txns, &seen, &order);
        assert_eq!((r.committed, r.aborted, r.unknown), (2, 1, 1));
        assert_eq!(r.lost_writes, 1, "p0-t0-r1 missing");
        assert_eq!(r.aborted_reads, 1, "p0-t1-r1 visible");
        assert_eq!(r.torn, 1, "half of p0-t2 visible");
        assert_eq!(r.duplicates, 1, "p1-t0-r1 twice");
        assert_eq!(r.unexplained, 1, "p9-t9-r9 never sent");
        assert_eq!(r.non_monotonic, 1);
        assert_eq!(r.anomalies(), 6);
    }

    #[test]
    fn a_clean_history_has_no_anomalies() {
        let txns = vec![txn(0, 0, 3, TxnEnd::Committed), txn(0, 1, 3, TxnEnd::Aborted), txn(0, 2, 1, TxnEnd::Unknown)];
        let seen: HashMap<String, u32> = ["p0-t0-r0", "p0-t0-r1", "p0-t0-r2", "p0-t2-r0"]
            .iter()
            .map(|v| (v.to_string(), 1))
            .collect();
        let order = BTreeMap::from([((0, 0), vec![(0, 0), (0, 1), (0, 2), (2, 0)])]);
        assert_eq!(judge(&txns, &seen, &order).anomalies(), 0);
        assert_eq!(parse("p12-t345-r6"), Some((12, 345, 6)));
        assert_eq!(parse("x"), None);
    }
}

//! Fault injection for replication tests: a workload that records what the cluster promised
//! (an idempotent `acks=all` producer's delivery reports) and what it showed (a concurrent
//! consumer's reads), and the invariant checks run once the fault is healed:
//!
//! 1. every acknowledged record is in the final log exactly once, at the offset it was acked at;
//! 2. every record the consumer saw is in the final log where it saw it, and per partition the
//!    consumer's offsets only increase;
//! 3. the cluster returns to full ISR ([`Cluster::await_full_isr`]);
//! 4. every replica of a partition holds the same bytes.
//!
//! The final log is read with a fresh consumer from offset 0 to each partition's high watermark,
//! so it is what any client would see, not what happens to be in the files.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::{CreateTopicsRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use crate::clients::{self, wait_until};
use crate::{kafka_client, Cluster};

/// Cluster settings that make failover take seconds: fencing after 3 s without a heartbeat, ISR
/// shrink after 3 s without catching up, preferred-leader rebalance checked every 2 s.
pub const FAST_FAILOVER: &[(&str, &str)] = &[
    ("broker.session.timeout.ms", "3000"),
    ("replica.lag.time.max.ms", "3000"),
    ("leader.imbalance.check.interval.seconds", "2"),
];

/// How many violations of one invariant are spelled out in a failure message.
const VIOLATIONS_SHOWN: usize = 25;

/// Creates `topic` with `replication_factor` and `configs` (e.g. `min.insync.replicas`) through
/// node `via`, failing with the broker's error code and message.
pub fn create_topic(
    cluster: &Cluster,
    via: i32,
    topic: &str,
    partitions: i32,
    replication_factor: i16,
    configs: &[(&str, &str)],
) -> Result<()> {
    let configs = configs
        .iter()
        .map(|(k, v)| {
            CreatableTopicConfig::default()
                .with_name(StrBytes::from_string(k.to_string()))
                .with_value(Some(StrBytes::from_string(v.to_string())))
        })
        .collect();
    let request = CreateTopicsRequest::default()
        .with_topics(vec![CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_num_partitions(partitions)
            .with_replication_factor(replication_factor)
            .with_configs(configs)])
        .with_timeout_ms(30_000);
    let response = kafka_client::call(cluster.addr(via), &request, 7, Duration::from_secs(35))?;
    let result = response.topics.first().context("CreateTopics: no topic result")?;
    if result.error_code != 0 {
        bail!(
            "CreateTopics {topic} ({partitions} partitions, replication factor {replication_factor}) via node {via}: \
             error code {} ({:?})",
            result.error_code,
            result.error_message.as_ref().map(|m| m.as_str())
        );
    }
    Ok(())
}

/// One record the workload producer enqueued and, once reported, what became of it.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub seq: u64,
    pub partition: i32,
    pub enqueued_at: Instant,
    /// `None` until the delivery report arrives; then the acked offset or the error.
    pub outcome: Option<std::result::Result<i64, String>>,
    /// When the delivery report arrived.
    pub reported_at: Option<Instant>,
}

impl Delivery {
    pub fn value(&self) -> String {
        record_value(self.seq)
    }
    pub fn acked_offset(&self) -> Option<i64> {
        match self.outcome {
            Some(Ok(offset)) => Some(offset),
            _ => None,
        }
    }
}

/// The value of the workload's record number `seq`: unique, so duplicates are detectable.
pub fn record_value(seq: u64) -> String {
    format!("rec-{seq}")
}

/// Delivery reports, indexed by sequence number; shared between the producer thread (which
/// appends and fills in outcomes from its poll loop) and the test thread (which watches progress).
#[derive(Default)]
struct DeliveryLog {
    deliveries: Mutex<Vec<Delivery>>,
    client_errors: Mutex<Vec<String>>,
}

struct RecordingContext(Arc<DeliveryLog>);

impl ClientContext for RecordingContext {
    fn error(&self, error: KafkaError, reason: &str) {
        push_capped(&self.0.client_errors, format!("{error}: {reason}"));
    }
}

impl ProducerContext for RecordingContext {
    type DeliveryOpaque = usize;
    fn delivery(&self, result: &DeliveryResult<'_>, seq: usize) {
        let outcome = match result {
            Ok(m) => Ok(m.offset()),
            Err((e, _)) => Err(e.to_string()),
        };
        let mut deliveries = self.0.deliveries.lock().expect("delivery log lock");
        if let Some(d) = deliveries.get_mut(seq) {
            d.outcome = Some(outcome);
            d.reported_at = Some(Instant::now());
        }
    }
}

/// Keeps the latest 200 lines: the errors around a failure matter more than the first ones.
fn push_capped(list: &Mutex<Vec<String>>, line: String) {
    let mut list = list.lock().expect("error list lock");
    if list.len() >= 200 {
        list.remove(0);
    }
    list.push(line);
}

/// One record the workload consumer received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub partition: i32,
    pub offset: i64,
    pub value: String,
}

/// What the producer thread did, after it stopped and flushed.
#[derive(Debug)]
pub struct ProducerOutcome {
    pub deliveries: Vec<Delivery>,
    /// Errors librdkafka reported outside delivery reports (fatal idempotence errors, ...).
    pub client_errors: Vec<String>,
    /// Why the producer stopped before it was asked to, if it did.
    pub stopped_early: Option<String>,
}

impl ProducerOutcome {
    pub fn acked(&self) -> impl Iterator<Item = &Delivery> {
        self.deliveries.iter().filter(|d| d.acked_offset().is_some())
    }
    pub fn failed(&self) -> impl Iterator<Item = &Delivery> {
        self.deliveries.iter().filter(|d| matches!(d.outcome, Some(Err(_))))
    }
    pub fn unreported(&self) -> impl Iterator<Item = &Delivery> {
        self.deliveries.iter().filter(|d| d.outcome.is_none())
    }
    pub fn summary(&self) -> String {
        let failed: Vec<String> = self
            .failed()
            .take(5)
            .map(|d| format!("{} to p{}: {:?}", d.value(), d.partition, d.outcome))
            .collect();
        // Connection refusals from a killed broker are expected; anything else is worth reading.
        let (transport, other): (Vec<&String>, Vec<&String>) = self
            .client_errors
            .iter()
            .partition(|e| e.contains("BrokerTransportFailure"));
        format!(
            "producer: {} enqueued, {} acked, {} failed {failed:?}, {} unreported; stopped early: {:?}; \
             {} broker transport errors; other client errors: {:?}",
            self.deliveries.len(),
            self.acked().count(),
            self.failed().count(),
            self.unreported().count(),
            self.stopped_early,
            transport.len(),
            other.iter().take(10).collect::<Vec<_>>()
        )
    }
}

/// What the workload consumer saw, after it stopped.
#[derive(Debug)]
pub struct ConsumerOutcome {
    pub seen: Vec<Seen>,
    pub errors: Vec<String>,
    /// Why the consumer did not reach the final high watermarks, if it did not.
    pub not_caught_up: Option<String>,
}

/// An idempotent `acks=all` producer sending unique values round-robin over the partitions at a
/// fixed rate, and a consumer reading every partition from the beginning, each on its own thread.
pub struct Workload {
    topic: String,
    partitions: i32,
    stop_producer: Arc<AtomicBool>,
    stop_consumer: Arc<AtomicBool>,
    log: Arc<DeliveryLog>,
    seen: Arc<Mutex<Vec<Seen>>>,
    consumer_errors: Arc<Mutex<Vec<String>>>,
    producer: Option<JoinHandle<Option<String>>>,
    consumer: Option<JoinHandle<Option<String>>>,
}

/// Producer settings for the workload: retried through failover for up to a minute, and quick
/// to notice a leader that stopped answering.
pub fn workload_producer_config(bootstrap: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap)
        .set("client.id", "sluice-faults-producer")
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .set("message.timeout.ms", "60000")
        .set("request.timeout.ms", "5000")
        .set("topic.metadata.refresh.interval.ms", "2000")
        .set("queue.buffering.max.messages", "200000")
        .set("log_level", "4");
    c
}

impl Workload {
    /// Starts producing `rate_per_s` records per second to `topic` and consuming all of its
    /// `partitions` from the beginning.
    pub fn start(bootstrap: &str, topic: &str, partitions: i32, rate_per_s: u64) -> Result<Workload> {
        Self::start_with(
            bootstrap,
            topic,
            partitions,
            rate_per_s,
            workload_producer_config(bootstrap),
        )
    }

    /// [`Self::start`] with another producer configuration (e.g. `acks=1`, which makes the
    /// leader acknowledge records its followers may never get).
    pub fn start_with(
        bootstrap: &str,
        topic: &str,
        partitions: i32,
        rate_per_s: u64,
        producer_config: ClientConfig,
    ) -> Result<Workload> {
        let log = Arc::new(DeliveryLog::default());
        let producer: BaseProducer<RecordingContext> =
            producer_config.create_with_context(RecordingContext(log.clone()))?;
        let consumer: BaseConsumer = clients::consumer_config(bootstrap)
            .set("client.id", "sluice-faults-consumer")
            .set("group.id", "sluice-faults-workload")
            .set("topic.metadata.refresh.interval.ms", "2000")
            .create()?;
        let all: Vec<i32> = (0..partitions).collect();
        clients::assign(&consumer, topic, &all, Offset::Beginning)?;

        let stop_producer = Arc::new(AtomicBool::new(false));
        let stop_consumer = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let consumer_errors = Arc::new(Mutex::new(Vec::new()));
        let producer = {
            let (stop, log, topic) = (stop_producer.clone(), log.clone(), topic.to_string());
            std::thread::Builder::new()
                .name("faults-producer".into())
                .spawn(move || produce_loop(&producer, &topic, partitions, rate_per_s, &stop, &log))?
        };
        let consumer = {
            let (stop, seen, errors) = (stop_consumer.clone(), seen.clone(), consumer_errors.clone());
            std::thread::Builder::new()
                .name("faults-consumer".into())
                .spawn(move || consume_loop(&consumer, &stop, &seen, &errors))?
        };
        Ok(Workload {
            topic: topic.to_string(),
            partitions,
            stop_producer,
            stop_consumer,
            log,
            seen,
            consumer_errors,
            producer: Some(producer),
            consumer: Some(consumer),
        })
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }
    pub fn partitions(&self) -> i32 {
        self.partitions
    }

    /// Acknowledged records per partition among those enqueued at or after `since`.
    pub fn acked_since(&self, since: Instant) -> BTreeMap<i32, u64> {
        let deliveries = self.log.deliveries.lock().expect("delivery log lock");
        let mut per_partition: BTreeMap<i32, u64> = (0..self.partitions).map(|p| (p, 0)).collect();
        // Deliveries are in enqueue order: scan back only as far as `since`.
        for d in deliveries.iter().rev().take_while(|d| d.enqueued_at >= since) {
            if d.acked_offset().is_some() {
                *per_partition.entry(d.partition).or_default() += 1;
            }
        }
        per_partition
    }

    /// Waits until at least `min` records enqueued at or after `since` are acked on every
    /// partition: the producer makes progress everywhere (e.g. after a leader moved).
    pub fn await_progress_since(&self, since: Instant, min: u64, timeout: Duration) -> Result<Duration> {
        let mut last = BTreeMap::new();
        let waited = wait_until(timeout, "", || {
            last = self.acked_since(since);
            last.values().all(|n| *n >= min).then(|| since.elapsed())
        });
        waited.map_err(|_| {
            anyhow!(
                "producer made no progress on every partition within {timeout:?}: acked per partition since then \
                 {last:?} (wanted >= {min} each); last client errors: {:?}",
                self.log
                    .client_errors
                    .lock()
                    .expect("lock")
                    .iter()
                    .rev()
                    .take(10)
                    .collect::<Vec<_>>()
            )
        })
    }

    /// Stops producing, flushes outstanding records (waiting for their delivery reports) and
    /// returns every delivery. The consumer keeps running.
    pub fn stop_producing(&mut self) -> Result<ProducerOutcome> {
        self.stop_producer.store(true, Ordering::SeqCst);
        let stopped_early = self
            .producer
            .take()
            .context("producer already stopped")?
            .join()
            .map_err(|_| anyhow!("producer thread panicked"))?;
        Ok(ProducerOutcome {
            deliveries: std::mem::take(&mut *self.log.deliveries.lock().expect("delivery log lock")),
            client_errors: self.log.client_errors.lock().expect("lock").clone(),
            stopped_early,
        })
    }

    /// Waits until the consumer has read up to `high_watermarks` (next offset per partition),
    /// then stops it. If it does not get there within `timeout`, `not_caught_up` says so: a
    /// consumer that is stuck (say, on an offset the new leader no longer has) would otherwise
    /// pass the checks trivially.
    pub fn stop_consuming(
        &mut self,
        high_watermarks: &BTreeMap<i32, i64>,
        timeout: Duration,
    ) -> Result<ConsumerOutcome> {
        let mut positions = BTreeMap::new();
        let reached = wait_until(timeout, "", || {
            positions = self.consumer_positions();
            high_watermarks
                .iter()
                .all(|(p, hw)| *hw == 0 || positions.get(p).is_some_and(|next| next >= hw))
                .then_some(())
        });
        self.stop_consumer.store(true, Ordering::SeqCst);
        let stopped_early = match self.consumer.take() {
            Some(handle) => handle.join().map_err(|_| anyhow!("consumer thread panicked"))?,
            None => None,
        };
        let errors = self.consumer_errors.lock().expect("lock").clone();
        let not_caught_up = reached.is_err().then(|| {
            format!(
                "the workload consumer did not reach the high watermarks {high_watermarks:?} within {timeout:?}: \
                 next offsets {positions:?}; stopped early: {stopped_early:?}; last errors: {:?}",
                errors.iter().rev().take(5).collect::<Vec<_>>()
            )
        });
        Ok(ConsumerOutcome {
            seen: std::mem::take(&mut *self.seen.lock().expect("seen lock")),
            errors,
            not_caught_up,
        })
    }

    /// Next offset the consumer will read per partition (one past the last record it saw).
    fn consumer_positions(&self) -> BTreeMap<i32, i64> {
        let seen = self.seen.lock().expect("seen lock");
        let mut next = BTreeMap::new();
        for s in seen.iter() {
            let e = next.entry(s.partition).or_insert(0);
            *e = (*e).max(s.offset + 1);
        }
        next
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        self.stop_producer.store(true, Ordering::SeqCst);
        self.stop_consumer.store(true, Ordering::SeqCst);
    }
}

/// Sends `rate_per_s` records per second until `stop`, then flushes. Returns why it stopped
/// early, if it did (a fatal producer error).
fn produce_loop(
    producer: &BaseProducer<RecordingContext>,
    topic: &str,
    partitions: i32,
    rate_per_s: u64,
    stop: &AtomicBool,
    log: &DeliveryLog,
) -> Option<String> {
    let start = Instant::now();
    let mut seq: u64 = 0;
    let mut stopped_early = None;
    'outer: while !stop.load(Ordering::SeqCst) {
        let due = (start.elapsed().as_secs_f64() * rate_per_s as f64) as u64;
        while seq < due {
            let partition = (seq % partitions as u64) as i32;
            let value = record_value(seq);
            log.deliveries.lock().expect("delivery log lock").push(Delivery {
                seq,
                partition,
                enqueued_at: Instant::now(),
                outcome: None,
                reported_at: None,
            });
            let mut record = BaseRecord::<[u8], [u8], usize>::with_opaque_to(topic, seq as usize)
                .partition(partition)
                .payload(value.as_bytes());
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                        record = r;
                        producer.poll(Duration::from_millis(10));
                    }
                    Err((e, _)) => {
                        let mut deliveries = log.deliveries.lock().expect("delivery log lock");
                        deliveries.pop();
                        stopped_early = Some(format!("enqueue of {value} failed: {e}"));
                        break 'outer;
                    }
                }
            }
            seq += 1;
        }
        producer.poll(Duration::from_millis(2));
    }
    if let Err(e) = producer.flush(Duration::from_secs(90)) {
        stopped_early.get_or_insert(format!("flush: {e}"));
    }
    producer.poll(Duration::ZERO);
    stopped_early
}

/// Reads until `stop`, recording every record and every error the client surfaces.
fn consume_loop(
    consumer: &BaseConsumer,
    stop: &AtomicBool,
    seen: &Mutex<Vec<Seen>>,
    errors: &Mutex<Vec<String>>,
) -> Option<String> {
    while !stop.load(Ordering::SeqCst) {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                let s = Seen {
                    partition: m.partition(),
                    offset: m.offset(),
                    value: String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned(),
                };
                seen.lock().expect("seen lock").push(s);
            }
            Some(Err(e)) => push_capped(errors, e.to_string()),
            None => {}
        }
    }
    None
}

/// Every partition's records from offset 0 to its high watermark, read by a fresh consumer.
#[derive(Debug)]
pub struct FinalLog {
    pub high_watermarks: BTreeMap<i32, i64>,
    /// Per partition, (offset, value) in offset order.
    pub records: BTreeMap<i32, Vec<(i64, String)>>,
}

impl FinalLog {
    pub fn value_at(&self, partition: i32, offset: i64) -> Option<&str> {
        let records = self.records.get(&partition)?;
        let i = records.binary_search_by_key(&offset, |(o, _)| *o).ok()?;
        Some(records[i].1.as_str())
    }
    pub fn len(&self) -> usize {
        self.records.values().map(Vec::len).sum()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Reads `topic` from offset 0 to each partition's high watermark with a fresh consumer.
pub fn read_final_log(bootstrap: &str, topic: &str, partitions: i32, timeout: Duration) -> Result<FinalLog> {
    let deadline = Instant::now() + timeout;
    let consumer: BaseConsumer = clients::consumer_config(bootstrap)
        .set("client.id", "sluice-faults-final-reader")
        .set("group.id", "sluice-faults-final-reader")
        .create()?;
    let mut high_watermarks = BTreeMap::new();
    for p in 0..partitions {
        let mut last = String::new();
        let hw = wait_until(Duration::from_secs(15), "", || {
            match consumer.fetch_watermarks(topic, p, Duration::from_secs(5)) {
                Ok((_, high)) => Some(high),
                Err(e) => {
                    last = e.to_string();
                    None
                }
            }
        })
        .map_err(|_| anyhow!("no high watermark for {topic}-{p}: {last}"))?;
        high_watermarks.insert(p, hw);
    }
    let mut tpl = TopicPartitionList::new();
    for (p, hw) in &high_watermarks {
        if *hw > 0 {
            tpl.add_partition_offset(topic, *p, Offset::Offset(0))?;
        }
    }
    consumer.assign(&tpl)?;
    let mut records: BTreeMap<i32, Vec<(i64, String)>> = (0..partitions).map(|p| (p, Vec::new())).collect();
    let done = |records: &BTreeMap<i32, Vec<(i64, String)>>| {
        high_watermarks
            .iter()
            .all(|(p, hw)| records[p].last().map_or(0, |(o, _)| o + 1) >= *hw)
    };
    let mut errors = Vec::new();
    while !done(&records) {
        if Instant::now() >= deadline {
            let reached: BTreeMap<i32, i64> = records
                .iter()
                .map(|(p, r)| (*p, r.last().map_or(0, |(o, _)| o + 1)))
                .collect();
            bail!(
                "reading the final log of {topic}: reached {reached:?} of high watermarks {high_watermarks:?} \
                 within {timeout:?}; errors: {errors:?}"
            );
        }
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                let hw = high_watermarks[&m.partition()];
                if m.offset() < hw {
                    let value = String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned();
                    records.entry(m.partition()).or_default().push((m.offset(), value));
                }
            }
            Some(Err(e)) if errors.len() < 20 => errors.push(e.to_string()),
            _ => {}
        }
    }
    Ok(FinalLog {
        high_watermarks,
        records,
    })
}

/// Collects violations of one invariant and fails with the first few spelled out.
struct Violations {
    invariant: &'static str,
    shown: Vec<String>,
    total: usize,
}

impl Violations {
    fn new(invariant: &'static str) -> Self {
        Self {
            invariant,
            shown: Vec::new(),
            total: 0,
        }
    }
    fn push(&mut self, what: String) {
        self.total += 1;
        if self.shown.len() < VIOLATIONS_SHOWN {
            self.shown.push(what);
        }
    }
    fn into_result(self) -> Result<()> {
        if self.total == 0 {
            return Ok(());
        }
        bail!(
            "{}: {} violation(s), first {}:\n  {}",
            self.invariant,
            self.total,
            self.shown.len(),
            self.shown.join("\n  ")
        )
    }
}

/// Invariant 1: the final log has no gaps and no value twice, and every acked record is in it
/// at the partition and offset its delivery report gave.
pub fn check_acked_records_exactly_once(log: &FinalLog, producer: &ProducerOutcome) -> Result<()> {
    let mut v = Violations::new("acked records must appear exactly once, at their acked offset");
    let mut positions: HashMap<&str, Vec<(i32, i64)>> = HashMap::new();
    for (p, records) in &log.records {
        for (i, (offset, value)) in records.iter().enumerate() {
            if *offset != i as i64 {
                v.push(format!(
                    "partition {p}: record #{i} has offset {offset} (gap or reordering)"
                ));
            }
            positions.entry(value.as_str()).or_default().push((*p, *offset));
        }
    }
    for (value, at) in &positions {
        if at.len() > 1 {
            v.push(format!(
                "value {value} appears {} times: {at:?} (partition, offset)",
                at.len()
            ));
        }
    }
    for d in producer.acked() {
        let offset = d.acked_offset().expect("acked");
        let value = d.value();
        match log.value_at(d.partition, offset) {
            Some(found) if found == value => {}
            found => v.push(format!(
                "{value} acked at partition {} offset {offset}, but the final log has {found:?} there \
                 (high watermark {:?}); {value} is at {:?}",
                d.partition,
                log.high_watermarks.get(&d.partition),
                positions.get(value.as_str())
            )),
        }
    }
    v.into_result()
}

/// Invariant 2: everything the consumer saw is in the final log at the same place, and per
/// partition its offsets strictly increase.
pub fn check_consumed_records_in_final_log(log: &FinalLog, consumer: &ConsumerOutcome) -> Result<()> {
    let mut v = Violations::new("consumed records must stay in the log, in increasing offset order");
    let mut last: HashMap<i32, i64> = HashMap::new();
    for s in &consumer.seen {
        if let Some(prev) = last.insert(s.partition, s.offset) {
            if s.offset <= prev {
                v.push(format!(
                    "partition {}: consumer went from offset {prev} back to {} ({})",
                    s.partition, s.offset, s.value
                ));
            }
        }
        match log.value_at(s.partition, s.offset) {
            Some(found) if found == s.value => {}
            found => v.push(format!(
                "partition {} offset {}: consumer saw {}, the final log has {found:?} (high watermark {:?})",
                s.partition,
                s.offset,
                s.value,
                log.high_watermarks.get(&s.partition)
            )),
        }
    }
    v.into_result()
}

/// The bytes of a partition's `.log` segments on one node, concatenated in base-offset order
/// (segment file names are zero-padded base offsets, so name order is offset order).
pub fn partition_log_bytes(data_dir: &Path, topic: &str, partition: i32) -> Result<Vec<u8>> {
    let dir = data_dir.join(format!("{topic}-{partition}"));
    let mut segments: Vec<_> = std::fs::read_dir(&dir)
        .with_context(|| format!("read {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    segments.sort();
    let mut bytes = Vec::new();
    for s in segments {
        bytes.extend(std::fs::read(&s).with_context(|| format!("read {}", s.display()))?);
    }
    Ok(bytes)
}

/// Invariant 4: once no records are being produced, every node's copy of every partition holds
/// the same bytes. Waits (up to `timeout`) for followers still fetching the tail. Returns the
/// size in bytes of each partition's (identical) copies.
pub fn await_identical_replicas(
    cluster: &Cluster,
    topic: &str,
    partitions: i32,
    timeout: Duration,
) -> Result<BTreeMap<i32, usize>> {
    let deadline = Instant::now() + timeout;
    let mut sizes = BTreeMap::new();
    for p in 0..partitions {
        loop {
            let copies: Vec<(i32, Result<Vec<u8>>)> = cluster
                .ids()
                .into_iter()
                .map(|id| (id, partition_log_bytes(&cluster.data_dir(id), topic, p)))
                .collect();
            let difference = compare_copies(&copies);
            match difference {
                None => {
                    let size = copies.first().and_then(|(_, c)| c.as_ref().ok()).map_or(0, Vec::len);
                    sizes.insert(p, size);
                    break;
                }
                Some(what) if Instant::now() >= deadline => {
                    bail!("replicas of {topic}-{p} differ after {timeout:?}: {what}")
                }
                Some(_) => std::thread::sleep(Duration::from_millis(200)),
            }
        }
    }
    Ok(sizes)
}

/// `None` if every copy read and all are equal; otherwise what differs.
fn compare_copies(copies: &[(i32, Result<Vec<u8>>)]) -> Option<String> {
    let mut ok = Vec::new();
    for (id, copy) in copies {
        match copy {
            Ok(bytes) => ok.push((*id, bytes)),
            Err(e) => return Some(format!("node {id}: {e:#}")),
        }
    }
    let (first_id, first) = ok[0];
    let lengths: Vec<(i32, usize)> = ok.iter().map(|(id, b)| (*id, b.len())).collect();
    if lengths.iter().any(|(_, len)| *len != first.len()) {
        return Some(format!("lengths in bytes per node {lengths:?}"));
    }
    for (id, bytes) in &ok[1..] {
        if let Some(at) = first.iter().zip(bytes.iter()).position(|(a, b)| a != b) {
            return Some(format!(
                "equal lengths {} but node {first_id} and node {id} differ from byte {at}: {:02x?} vs {:02x?}",
                first.len(),
                &first[at..(at + 16).min(first.len())],
                &bytes[at..(at + 16).min(bytes.len())]
            ));
        }
    }
    None
}

/// Per partition, whether some record enqueued after `since` was acked.
pub fn check_progress_after(producer: &ProducerOutcome, partitions: i32, since: Instant) -> Result<()> {
    let mut acked: BTreeMap<i32, u64> = (0..partitions).map(|p| (p, 0)).collect();
    for d in producer.acked().filter(|d| d.enqueued_at >= since) {
        *acked.entry(d.partition).or_default() += 1;
    }
    if acked.values().any(|n| *n == 0) {
        bail!(
            "no acked records enqueued after the fault on some partition: acked per partition {acked:?}; {}",
            producer.summary()
        );
    }
    Ok(())
}

/// Everything gathered once the workload stopped.
#[derive(Debug)]
pub struct Settled {
    pub producer: ProducerOutcome,
    pub consumer: Option<ConsumerOutcome>,
    pub log: Option<FinalLog>,
}

/// Acked records that are not in the final log where their delivery report put them: with
/// `acks=1`, what a leader acknowledged and lost with its unreplicated tail.
pub fn acked_but_missing(log: &FinalLog, producer: &ProducerOutcome) -> Vec<Delivery> {
    producer
        .acked()
        .filter(|d| log.value_at(d.partition, d.acked_offset().expect("acked")) != Some(d.value().as_str()))
        .cloned()
        .collect()
}

/// What the producer was promised, and so which invariants apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acks {
    /// `acks=all` with idempotence: every acked record exactly once (invariant 1).
    AllIdempotent,
    /// `acks=1`: acked records may be lost with a failed leader's tail; invariants 2-4 only.
    Leader,
}

/// Stops the workload and checks invariants 1-4: the cluster must be back to full ISR by
/// `full_isr_by`. Runs every check it can and fails with all their messages together.
pub fn stop_and_check(cluster: &Cluster, workload: Workload, full_isr_by: Instant) -> Result<Settled> {
    stop_and_check_with(cluster, workload, full_isr_by, Acks::AllIdempotent)
}

/// [`stop_and_check`] for a workload whose producer used `acks`.
pub fn stop_and_check_with(
    cluster: &Cluster,
    mut workload: Workload,
    full_isr_by: Instant,
    acks: Acks,
) -> Result<Settled> {
    let topic = workload.topic().to_string();
    let partitions = workload.partitions();
    let mut failures: Vec<String> = Vec::new();
    let producer = workload.stop_producing()?;
    if let Some(why) = &producer.stopped_early {
        failures.push(format!("the producer stopped early: {why}"));
    }
    let isr_timeout = full_isr_by.saturating_duration_since(Instant::now());
    if let Err(e) = cluster.await_full_isr(&topic, isr_timeout) {
        failures.push(format!("invariant 3 (full ISR after the fault): {e:#}"));
    }
    let log = match read_final_log(&cluster.bootstrap(), &topic, partitions, Duration::from_secs(30)) {
        Ok(log) => Some(log),
        Err(e) => {
            failures.push(format!("reading the final log: {e:#}"));
            None
        }
    };
    let mut consumer = None;
    if let Some(log) = &log {
        if acks == Acks::AllIdempotent {
            if let Err(e) = check_acked_records_exactly_once(log, &producer) {
                failures.push(format!("invariant 1: {e:#}"));
            }
        }
        let c = workload.stop_consuming(&log.high_watermarks, Duration::from_secs(20))?;
        if let Err(e) = check_consumed_records_in_final_log(log, &c) {
            failures.push(format!("invariant 2: {e:#}"));
        }
        if let Some(why) = &c.not_caught_up {
            failures.push(format!("invariant 2: {why}"));
        }
        consumer = Some(c);
    }
    let replica_bytes = match await_identical_replicas(cluster, &topic, partitions, Duration::from_secs(20)) {
        Ok(sizes) => sizes,
        Err(e) => {
            failures.push(format!("invariant 4 (identical replicas): {e:#}"));
            BTreeMap::new()
        }
    };
    if let Some(log) = &log {
        // Equal copies must also be non-empty copies: a partition with records has log bytes.
        for (p, hw) in &log.high_watermarks {
            if *hw > 0 && replica_bytes.get(p) == Some(&0) {
                failures.push(format!(
                    "invariant 4: partition {p} has high watermark {hw} but no .log bytes"
                ));
            }
        }
    }
    eprintln!(
        "[faults] {}; consumer saw {:?} records; final log (high watermarks) {:?}; replica bytes {replica_bytes:?}",
        producer.summary(),
        consumer.as_ref().map(|c| c.seen.len()),
        log.as_ref().map(|l| &l.high_watermarks)
    );
    if !failures.is_empty() {
        bail!("{} check(s) failed:\n{}", failures.len(), failures.join("\n"));
    }
    Ok(Settled {
        producer,
        consumer,
        log,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log_of(partitions: &[&[&str]]) -> FinalLog {
        let mut records = BTreeMap::new();
        let mut high_watermarks = BTreeMap::new();
        for (p, values) in partitions.iter().enumerate() {
            let r: Vec<(i64, String)> = values
                .iter()
                .enumerate()
                .map(|(o, v)| (o as i64, v.to_string()))
                .collect();
            high_watermarks.insert(p as i32, r.len() as i64);
            records.insert(p as i32, r);
        }
        FinalLog {
            high_watermarks,
            records,
        }
    }

    fn acked(seq: u64, partition: i32, offset: i64) -> Delivery {
        Delivery {
            seq,
            partition,
            enqueued_at: Instant::now(),
            outcome: Some(Ok(offset)),
            reported_at: Some(Instant::now()),
        }
    }

    fn producer(deliveries: Vec<Delivery>) -> ProducerOutcome {
        ProducerOutcome {
            deliveries,
            client_errors: Vec::new(),
            stopped_early: None,
        }
    }

    fn seen(partition: i32, offset: i64, value: &str) -> Seen {
        Seen {
            partition,
            offset,
            value: value.to_string(),
        }
    }

    #[test]
    fn acked_records_at_their_offsets_pass() {
        let log = log_of(&[&["rec-0", "rec-2"], &["rec-1"]]);
        let p = producer(vec![acked(0, 0, 0), acked(1, 1, 0), acked(2, 0, 1)]);
        check_acked_records_exactly_once(&log, &p).unwrap();
    }

    #[test]
    fn a_lost_acked_record_a_moved_one_and_a_duplicate_are_each_reported() {
        let log = log_of(&[&["rec-0", "rec-0"], &["rec-2"]]);
        let p = producer(vec![acked(0, 0, 0), acked(1, 1, 0), acked(2, 0, 1)]);
        let e = check_acked_records_exactly_once(&log, &p).unwrap_err().to_string();
        assert!(e.contains("3 violation(s)"), "{e}");
        assert!(e.contains("rec-0 appears 2 times"), "{e}");
        assert!(e.contains("rec-1 acked at partition 1 offset 0"), "{e}");
        assert!(e.contains("rec-2 acked at partition 0 offset 1"), "{e}");
    }

    #[test]
    fn a_gap_in_the_final_log_is_reported() {
        let mut log = log_of(&[&["rec-0", "rec-1"]]);
        log.records.get_mut(&0).unwrap()[1].0 = 2;
        let e = check_acked_records_exactly_once(&log, &producer(Vec::new()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("record #1 has offset 2"), "{e}");
    }

    #[test]
    fn consumed_records_that_vanished_or_went_backwards_are_reported() {
        let log = log_of(&[&["rec-0", "rec-3"]]);
        let ok = ConsumerOutcome {
            seen: vec![seen(0, 0, "rec-0"), seen(0, 1, "rec-3")],
            errors: Vec::new(),
            not_caught_up: None,
        };
        check_consumed_records_in_final_log(&log, &ok).unwrap();
        let bad = ConsumerOutcome {
            seen: vec![seen(0, 1, "rec-1"), seen(0, 0, "rec-0"), seen(0, 2, "rec-2")],
            errors: Vec::new(),
            not_caught_up: None,
        };
        let e = check_consumed_records_in_final_log(&log, &bad).unwrap_err().to_string();
        assert!(e.contains("3 violation(s)"), "{e}");
        assert!(
            e.contains("consumer saw rec-1, the final log has Some(\"rec-3\")"),
            "{e}"
        );
        assert!(e.contains("from offset 1 back to 0"), "{e}");
        assert!(e.contains("consumer saw rec-2, the final log has None"), "{e}");
    }

    #[test]
    fn copies_of_different_length_or_content_differ() {
        let same = [(1, Ok(vec![1, 2, 3])), (2, Ok(vec![1, 2, 3]))];
        assert_eq!(compare_copies(&same), None);
        let shorter = [(1, Ok(vec![1, 2, 3])), (2, Ok(vec![1, 2]))];
        assert!(compare_copies(&shorter).unwrap().contains("lengths"));
        let flipped = [(1, Ok(vec![1, 2, 3])), (2, Ok(vec![1, 9, 3]))];
        assert!(compare_copies(&flipped).unwrap().contains("differ from byte 1"));
    }
}

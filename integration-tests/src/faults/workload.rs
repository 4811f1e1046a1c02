//! The workload: an idempotent `acks=all` producer and a consumer on their own threads, each
//! recording what the cluster told it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::{CreateTopicsRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::BaseConsumer;
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::{ClientContext, Offset};

use crate::clients::{self, wait_until};
use crate::{ClientSecurity, Cluster};

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
    let response = cluster.call(via, &request, 7, Duration::from_secs(35))?;
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
    epoch_events: Mutex<Vec<String>>,
}

/// librdkafka's debug facilities (`debug=eos`) for idempotence state changes: a drain before
/// an epoch bump, a producer id or epoch taken on, a sequence reset, sequence errors.
const EPOCH_FACILITIES: [&str; 6] = ["DRAIN", "NEWPID", "RESETSEQ", "ERRSEQ", "UNKPID", "IDEMPSTATE"];

struct RecordingContext(Arc<DeliveryLog>);

impl ClientContext for RecordingContext {
    fn error(&self, error: KafkaError, reason: &str) {
        push_capped(&self.0.client_errors, format!("{error}: {reason}"));
    }

    fn log(&self, _level: rdkafka::config::RDKafkaLogLevel, fac: &str, message: &str) {
        if EPOCH_FACILITIES.contains(&fac) {
            push_capped(&self.0.epoch_events, format!("{fac}: {message}"));
        }
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
    /// librdkafka's idempotence events (the latest 200): drains, epoch bumps, sequence resets.
    pub epoch_events: Vec<String>,
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
    /// The latest idempotence events, one per line, for a failure message or a resend report.
    pub fn epoch_events_tail(&self, n: usize) -> String {
        let from = self.epoch_events.len().saturating_sub(n);
        self.epoch_events[from..].join("\n    ")
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
        .set("log_level", "4")
        // Idempotence state changes, recorded by RecordingContext::log and not printed. They are
        // debug-level logs, and rdkafka sets the client's level itself (from the `log` crate's,
        // Error when no logger is installed) once it is created.
        .set("debug", "eos")
        .set_log_level(rdkafka::config::RDKafkaLogLevel::Debug);
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
        Self::start_secured(
            bootstrap,
            topic,
            partitions,
            rate_per_s,
            producer_config,
            &ClientSecurity::default(),
        )
    }

    /// [`Self::start_with`] on a secured listener: the producer configuration carries its own
    /// login ([`clients::secured`]), the consumer logs in as `consumer_security` says.
    pub fn start_secured(
        bootstrap: &str,
        topic: &str,
        partitions: i32,
        rate_per_s: u64,
        producer_config: ClientConfig,
        consumer_security: &ClientSecurity,
    ) -> Result<Workload> {
        let log = Arc::new(DeliveryLog::default());
        let producer: BaseProducer<RecordingContext> =
            producer_config.create_with_context(RecordingContext(log.clone()))?;
        let consumer: BaseConsumer = clients::secured(clients::consumer_config(bootstrap), consumer_security)
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
            epoch_events: self.log.epoch_events.lock().expect("lock").clone(),
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
            let record = BaseRecord::<[u8], [u8], usize>::with_opaque_to(topic, seq as usize)
                .partition(partition)
                .payload(value.as_bytes());
            if let Err(e) = clients::send_when_room(producer, record, Duration::from_millis(10)) {
                let mut deliveries = log.deliveries.lock().expect("delivery log lock");
                deliveries.pop();
                stopped_early = Some(format!("enqueue of {value} failed: {e}"));
                break 'outer;
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

//! The order service: idempotent, `acks=all`, keyed by customer id, paced to a target rate.
//!
//! Every order's id is `<run uuid>-<sequence>`, so ids never repeat across runs. An order
//! counts as acknowledged only when its delivery report says the whole ISR has it; with
//! `--acked-log` each acknowledged id is appended to a file the moment its report arrives.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use rand::Rng;
use rdkafka::config::ClientConfig;
use rdkafka::error::KafkaError;
use rdkafka::message::DeliveryResult;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientContext;

use crate::order::Order;
use crate::security::{ClientSecurity, SecurityArgs};
use crate::topic::ensure_topic;

#[derive(Debug, Clone, clap::Args)]
pub struct ProducerArgs {
    /// Kafka bootstrap servers, `host:port,...`.
    #[arg(long)]
    pub bootstrap: String,
    #[arg(long, default_value = "orders")]
    pub topic: String,
    /// Orders per second.
    #[arg(long, default_value_t = 20_000.0)]
    pub rate: f64,
    /// Approximate size of each order's JSON in bytes.
    #[arg(long, default_value_t = 2048)]
    pub size: usize,
    /// Stop after this many orders; exit 0 once every one is acknowledged.
    #[arg(long)]
    pub count: Option<u64>,
    /// Append each acknowledged order id to this file, one a line.
    #[arg(long)]
    pub acked_log: Option<PathBuf>,
    /// Partitions of the topic, if it has to be created.
    #[arg(long, default_value_t = 12)]
    pub partitions: i32,
    /// Replication factor of the topic, if it has to be created.
    #[arg(long, default_value_t = 3)]
    pub replication_factor: i32,
    /// Distinct customer ids (the record keys).
    #[arg(long, default_value_t = 10_000)]
    pub customers: u32,
    #[command(flatten)]
    pub security: SecurityArgs,
}

/// How long librdkafka keeps retrying an order (through leader changes and broker restarts)
/// before reporting it failed.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a stop (signal or `--count` reached) waits for outstanding acknowledgements.
const FLUSH_TIMEOUT_ON_SIGNAL: Duration = Duration::from_secs(10);
/// Orders buffered in the client before `send` pushes back (the bound on producer memory
/// is this times `--size`, or the kbytes limit below, whichever is reached first).
const QUEUE_MAX_MESSAGES: &str = "100000";
const QUEUE_MAX_KBYTES: &str = "262144";

/// Counts delivery reports and appends acknowledged ids to the acked log.
struct Deliveries {
    run_id: String,
    acked_log: Option<File>,
    acked: AtomicU64,
    failed: AtomicU64,
    log_write_failed: AtomicBool,
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    /// The order's sequence number within this run.
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, seq: usize) {
        match result {
            Ok(_) => {
                self.acked.fetch_add(1, Ordering::Relaxed);
                if let Some(mut log) = self.acked_log.as_ref() {
                    // One write(2) per line on an O_APPEND file: in the page cache, and so
                    // readable by others, as soon as it returns, even if we are then killed.
                    if let Err(e) = log.write_all(format!("{}-{seq}\n", self.run_id).as_bytes()) {
                        if !self.log_write_failed.swap(true, Ordering::Relaxed) {
                            tracing::error!("cannot append to the acked log: {e}; check the disk");
                        }
                    }
                }
            }
            Err((e, _)) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                tracing::error!(order_id = %format!("{}-{seq}", self.run_id), "order not acknowledged: {e}");
            }
        }
    }
}

fn producer_config(bootstrap: &str, security: &ClientSecurity) -> ClientConfig {
    let mut c = ClientConfig::new();
    security.apply(&mut c);
    c.set("bootstrap.servers", bootstrap)
        .set("client.id", "sluice-demo-producer")
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "5")
        .set("message.timeout.ms", DELIVERY_TIMEOUT.as_millis().to_string())
        .set("queue.buffering.max.messages", QUEUE_MAX_MESSAGES)
        .set("queue.buffering.max.kbytes", QUEUE_MAX_KBYTES);
    c
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Produces until `stop`, or until `--count` orders are produced; returns once every order
/// is acknowledged or failed (or the flush timeout passed), failing unless all were acknowledged.
pub fn run(args: &ProducerArgs, stop: &AtomicBool) -> Result<()> {
    if !(args.rate > 0.0 && args.rate.is_finite()) {
        bail!(
            "--rate must be a positive number of orders per second, not {}",
            args.rate
        );
    }
    if args.customers == 0 {
        bail!("--customers must be at least 1");
    }
    let security = args.security.load()?;
    ensure_topic(
        &args.bootstrap,
        &security,
        &args.topic,
        args.partitions,
        args.replication_factor,
    )?;
    let acked_log = match &args.acked_log {
        Some(path) => Some(
            OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .with_context(|| format!("cannot open the acked log {}; check the path", path.display()))?,
        ),
        None => None,
    };
    let run_id = uuid::Uuid::new_v4().to_string();
    tracing::info!(%run_id, rate = args.rate, size = args.size, count = ?args.count, "producing orders");
    let context = Deliveries {
        run_id: run_id.clone(),
        acked_log,
        acked: AtomicU64::new(0),
        failed: AtomicU64::new(0),
        log_write_failed: AtomicBool::new(false),
    };
    let producer: BaseProducer<Deliveries> = producer_config(&args.bootstrap, &security)
        .create_with_context(context)
        .context("cannot create the producer; check --bootstrap")?;
    let produced = produce_paced(&producer, args, &run_id, stop)?;
    let flush_timeout = if stop.load(Ordering::Relaxed) {
        FLUSH_TIMEOUT_ON_SIGNAL
    } else {
        DELIVERY_TIMEOUT
    };
    if let Err(e) = producer.flush(flush_timeout) {
        tracing::warn!("not every order was acknowledged within {flush_timeout:?}: {e}");
    }
    let ctx = producer.context();
    let (acked, failed) = (ctx.acked.load(Ordering::Relaxed), ctx.failed.load(Ordering::Relaxed));
    tracing::info!(produced, acked, failed, "producer stopped");
    if ctx.log_write_failed.load(Ordering::Relaxed) {
        bail!("the acked log is incomplete (a write failed; see above); check the disk");
    }
    if acked != produced {
        bail!(
            "{} of {produced} orders were not acknowledged ({failed} failed, the rest still pending); \
             check that the brokers are up and the topic's ISR is at least min.insync.replicas",
            produced - acked
        );
    }
    Ok(())
}

/// Sends orders at `args.rate` until `stop` or `args.count`; returns how many were sent.
fn produce_paced(
    producer: &BaseProducer<Deliveries>,
    args: &ProducerArgs,
    run_id: &str,
    stop: &AtomicBool,
) -> Result<u64> {
    let limit = args.count.unwrap_or(u64::MAX);
    let started = Instant::now();
    let mut last_report = Instant::now();
    let mut rng = rand::thread_rng();
    let mut seq: u64 = 0;
    while seq < limit && !stop.load(Ordering::Relaxed) {
        let due = ((started.elapsed().as_secs_f64() * args.rate) as u64).min(limit);
        while seq < due && !stop.load(Ordering::Relaxed) {
            let order = Order {
                order_id: format!("{run_id}-{seq}"),
                customer: format!("customer-{:05}", rng.gen_range(0..args.customers)),
                amount_cents: rng.gen_range(100..50_000),
                created_ms: now_ms(),
            };
            let value = order.to_padded_json(args.size);
            let mut record = BaseRecord::with_opaque_to(&args.topic, seq as usize)
                .key(order.customer.as_str())
                .payload(value.as_slice());
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), returned)) => {
                        // The client buffer is full: serve delivery reports until there is room.
                        if stop.load(Ordering::Relaxed) {
                            return Ok(seq);
                        }
                        record = returned;
                        producer.poll(Duration::from_millis(10));
                    }
                    Err((e, _)) => bail!("cannot send order {}: {e}", order.order_id),
                }
            }
            seq += 1;
        }
        producer.poll(Duration::from_millis(1));
        if last_report.elapsed() >= Duration::from_secs(5) {
            let ctx = producer.context();
            tracing::info!(
                produced = seq,
                acked = ctx.acked.load(Ordering::Relaxed),
                failed = ctx.failed.load(Ordering::Relaxed),
                in_flight = producer.in_flight_count(),
                "progress"
            );
            last_report = Instant::now();
        }
    }
    Ok(seq)
}

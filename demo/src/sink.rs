//! The `orders-sink` group member: every order into SQLite exactly once.
//!
//! Records are gathered into a bounded batch; the batch and the next offset of each of its
//! partitions are stored in one SQLite transaction ([`SinkDb::store`]); only then is the group
//! offset committed. Assigned partitions resume at the offsets in the database
//! ([`ResumeContext`]), so a member killed at any point neither loses nor repeats an order.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;

use crate::order::Order;
use crate::resume::{group_config, ResumeContext, StoredOffsets};
use crate::security::SecurityArgs;
use crate::sink_db::{Pending, SinkDb};

#[derive(Debug, Clone, clap::Args)]
pub struct SinkArgs {
    /// Kafka bootstrap servers, `host:port,...`.
    #[arg(long)]
    pub bootstrap: String,
    #[arg(long, default_value = "orders")]
    pub topic: String,
    /// The SQLite database file (created if missing).
    #[arg(long)]
    pub db: PathBuf,
    #[arg(long, default_value = "orders-sink")]
    pub group: String,
    /// Static group membership (`group.instance.id`): a restarted member with the same id takes
    /// its partitions back at once instead of waiting out the old one's session.
    #[arg(long)]
    pub instance_id: Option<String>,
    /// Orders per database transaction, at most.
    #[arg(long, default_value_t = 1000)]
    pub batch_max: usize,
    /// A batch is stored at the latest this long after its first record arrived.
    #[arg(long, default_value_t = 200)]
    pub batch_max_ms: u64,
    #[command(flatten)]
    pub security: SecurityArgs,
}

/// The database and the batch not yet stored, behind one lock: the poll loop fills the batch,
/// and the rebalance callback (which runs inside `poll`) stores it before a revoke.
struct Sink {
    db: SinkDb,
    batch: Vec<Pending>,
    batch_started: Option<Instant>,
}

impl Sink {
    fn flush(&mut self) -> Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let added = self.db.store(&self.batch)?;
        tracing::debug!(records = self.batch.len(), ?added, "stored a batch");
        if added.replays_skipped > 0 {
            tracing::info!(
                added.replays_skipped,
                "records already in the table were read again and skipped"
            );
        }
        self.batch.clear();
        self.batch_started = None;
        Ok(())
    }
}

struct SharedSink(Mutex<Sink>);

impl SharedSink {
    fn lock(&self) -> std::sync::MutexGuard<'_, Sink> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl StoredOffsets for SharedSink {
    fn next_offsets(&self) -> Result<BTreeMap<i32, i64>> {
        self.lock().db.next_offsets()
    }

    fn before_revoke(&self) -> Result<()> {
        self.lock().flush()
    }
}

/// Consumes until `stop`, then stores the last batch and leaves the group.
pub fn run(args: &SinkArgs, stop: &AtomicBool) -> Result<()> {
    if args.batch_max == 0 {
        bail!("--batch-max must be at least 1");
    }
    let security = args.security.load()?;
    let db = SinkDb::open(&args.db, &args.topic)?;
    tracing::info!(db = %args.db.display(), stored_offsets = ?db.next_offsets()?, "sink database open");
    let sink = SharedSink(Mutex::new(Sink {
        db,
        batch: Vec::with_capacity(args.batch_max),
        batch_started: None,
    }));
    let mut config = group_config(&args.bootstrap, &security, &args.group, "sluice-demo-sink");
    if let Some(id) = &args.instance_id {
        config.set("group.instance.id", id);
    }
    let consumer: BaseConsumer<ResumeContext<SharedSink>> = config
        .create_with_context(ResumeContext::new(&args.topic, sink))
        .context("cannot create the sink's consumer; check --bootstrap")?;
    consumer
        .subscribe(&[&args.topic])
        .with_context(|| format!("cannot subscribe to {}", args.topic))?;
    let max_wait = Duration::from_millis(args.batch_max_ms);
    while !stop.load(Ordering::Relaxed) {
        consumer.context().check(&consumer)?;
        let pending = match consumer.poll(Duration::from_millis(50)) {
            Some(Ok(m)) => Some(Pending {
                partition: m.partition(),
                offset: m.offset(),
                order: Order::parse(m.payload()),
            }),
            Some(Err(e)) => {
                tracing::warn!("consumer error: {e}");
                None
            }
            None => None,
        };
        let mut sink = consumer.context().store.lock();
        if let Some(p) = pending {
            if p.order.is_none() {
                tracing::warn!(
                    partition = p.partition,
                    offset = p.offset,
                    "skipping a record that is not an order"
                );
            }
            sink.batch_started.get_or_insert_with(Instant::now);
            sink.batch.push(p);
        }
        let due = sink.batch.len() >= args.batch_max || sink.batch_started.is_some_and(|t| t.elapsed() >= max_wait);
        if due {
            sink.flush()?;
            drop(sink);
            consumer.context().commit(&consumer, CommitMode::Async);
        }
    }
    consumer.context().store.lock().flush()?;
    consumer.context().commit(&consumer, CommitMode::Sync);
    tracing::info!("sink stopped");
    Ok(())
}

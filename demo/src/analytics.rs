//! The `analytics` group member: order counts and revenue per minute of `created_ms`, served
//! as JSON at `GET /stats`.
//!
//! Exactly once within the life of the process: the figures are kept with the next offset of
//! each partition they cover, a record below it is not counted again, and an assigned
//! partition resumes there ([`ResumeContext`]); a partition never counted starts at the
//! beginning of the log. The figures live in memory only, so a restarted member recounts
//! what the log retains.

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use serde::{Deserialize, Serialize};

use crate::http::{self, Response};
use crate::order::Order;
use crate::resume::{group_config, ResumeContext, StoredOffsets};
use crate::security::SecurityArgs;

#[derive(Debug, Clone, clap::Args)]
pub struct AnalyticsArgs {
    /// Kafka bootstrap servers, `host:port,...`.
    #[arg(long)]
    pub bootstrap: String,
    #[arg(long, default_value = "orders")]
    pub topic: String,
    /// Address to serve `GET /stats` on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    #[arg(long, default_value = "analytics")]
    pub group: String,
    /// Minutes kept and served (the newest ones); older minutes remain in the totals.
    #[arg(long, default_value_t = 15)]
    pub minutes: usize,
    #[command(flatten)]
    pub security: SecurityArgs,
}

/// How often the covered offsets are committed to the group (for lag display only).
const COMMIT_INTERVAL: Duration = Duration::from_secs(1);

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Figures {
    pub orders: u64,
    pub revenue_cents: i64,
}

impl Figures {
    fn add(&mut self, order: &Order) {
        self.orders += 1;
        self.revenue_cents = self.revenue_cents.saturating_add(order.amount_cents);
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Minute {
    pub minute_start_ms: i64,
    #[serde(flatten)]
    pub figures: Figures,
}

/// The `GET /stats` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// The newest minutes, oldest first.
    pub minutes: Vec<Minute>,
    pub totals: Figures,
    /// Records that were not orders (skipped).
    pub malformed: u64,
}

/// The figures and the offsets they cover.
struct Counts {
    minutes: BTreeMap<i64, Figures>,
    minutes_kept: usize,
    totals: Figures,
    malformed: u64,
    next_offsets: BTreeMap<i32, i64>,
}

impl Counts {
    fn new(minutes_kept: usize) -> Self {
        Counts {
            minutes: BTreeMap::new(),
            minutes_kept,
            totals: Figures::default(),
            malformed: 0,
            next_offsets: BTreeMap::new(),
        }
    }

    /// Counts the record at `partition`/`offset` unless it was counted already.
    fn record(&mut self, partition: i32, offset: i64, order: Option<&Order>) {
        let next = self.next_offsets.entry(partition).or_insert(0);
        if offset < *next {
            return;
        }
        *next = offset + 1;
        let Some(order) = order else {
            self.malformed += 1;
            return;
        };
        self.totals.add(order);
        let minute = order.created_ms.div_euclid(60_000) * 60_000;
        self.minutes.entry(minute).or_default().add(order);
        while self.minutes.len() > self.minutes_kept {
            self.minutes.pop_first();
        }
    }

    fn stats(&self) -> Stats {
        Stats {
            minutes: self
                .minutes
                .iter()
                .map(|(start, figures)| Minute {
                    minute_start_ms: *start,
                    figures: *figures,
                })
                .collect(),
            totals: self.totals,
            malformed: self.malformed,
        }
    }
}

struct SharedCounts(Arc<Mutex<Counts>>);

impl SharedCounts {
    fn lock(&self) -> MutexGuard<'_, Counts> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl StoredOffsets for SharedCounts {
    fn next_offsets(&self) -> Result<BTreeMap<i32, i64>> {
        Ok(self.lock().next_offsets.clone())
    }

    /// Every record is counted as it arrives: nothing is in progress.
    fn before_revoke(&self) -> Result<()> {
        Ok(())
    }
}

/// Serves `/stats` and consumes until `stop`.
pub fn run(args: &AnalyticsArgs, stop: &AtomicBool) -> Result<()> {
    if args.minutes == 0 {
        bail!("--minutes must be at least 1");
    }
    let security = args.security.load()?;
    let counts = Arc::new(Mutex::new(Counts::new(args.minutes)));
    let listener = TcpListener::bind(args.listen)
        .with_context(|| format!("cannot listen on {}; pick another address with --listen", args.listen))?;
    tracing::info!(listen = %args.listen, "serving GET /stats");
    {
        let counts = SharedCounts(counts.clone());
        std::thread::spawn(move || {
            let served = http::serve(listener, |path| {
                (path == "/stats").then(|| Response::json(stats_json(&counts.lock().stats())))
            });
            if let Err(e) = served {
                tracing::error!("the /stats server stopped: {e:#}");
            }
        });
    }
    let consumer: BaseConsumer<ResumeContext<SharedCounts>> =
        group_config(&args.bootstrap, &security, &args.group, "sluice-demo-analytics")
            .create_with_context(ResumeContext::new(&args.topic, SharedCounts(counts.clone())))
            .context("cannot create the analytics consumer; check --bootstrap")?;
    consumer
        .subscribe(&[&args.topic])
        .with_context(|| format!("cannot subscribe to {}", args.topic))?;
    let mut last_commit = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        consumer.context().check(&consumer)?;
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                let order = Order::parse(m.payload());
                if order.is_none() {
                    tracing::warn!(
                        partition = m.partition(),
                        offset = m.offset(),
                        "skipping a record that is not an order"
                    );
                }
                consumer
                    .context()
                    .store
                    .lock()
                    .record(m.partition(), m.offset(), order.as_ref());
            }
            Some(Err(e)) => tracing::warn!("consumer error: {e}"),
            None => {}
        }
        if last_commit.elapsed() >= COMMIT_INTERVAL {
            consumer.context().commit(&consumer, CommitMode::Async);
            last_commit = Instant::now();
        }
    }
    consumer.context().commit(&consumer, CommitMode::Sync);
    tracing::info!("analytics stopped");
    Ok(())
}

fn stats_json(stats: &Stats) -> String {
    serde_json::to_string(stats).expect("Stats always serializes")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(id: &str, created_ms: i64, amount_cents: i64) -> Order {
        Order {
            order_id: id.into(),
            customer: "c".into(),
            amount_cents,
            created_ms,
        }
    }

    #[test]
    fn counts_each_offset_once_per_minute_and_keeps_the_newest_minutes() {
        let mut c = Counts::new(2);
        c.record(0, 0, Some(&order("a", 60_000, 100)));
        c.record(0, 1, Some(&order("b", 119_999, 50)));
        c.record(0, 1, Some(&order("b", 119_999, 50))); // read again: not counted
        c.record(1, 0, None);
        c.record(1, 1, Some(&order("c", 120_000, 7)));
        c.record(1, 2, Some(&order("d", 180_000, 1)));
        let stats = c.stats();
        assert_eq!(
            stats.totals,
            Figures {
                orders: 4,
                revenue_cents: 158
            }
        );
        assert_eq!(stats.malformed, 1);
        let minutes: Vec<(i64, u64)> = stats
            .minutes
            .iter()
            .map(|m| (m.minute_start_ms, m.figures.orders))
            .collect();
        assert_eq!(minutes, vec![(120_000, 1), (180_000, 1)]);
        assert_eq!(c.next_offsets, BTreeMap::from([(0, 2), (1, 3)]));
    }
}

//! Feeds the console's history (`metrics::history`): a sample of this broker's counters every
//! interval, on wall-clock multiples of it so the brokers' samples line up.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::snapshot;
use crate::broker::Broker;
use crate::clock::now_ms;
use crate::metrics::history::{sample, Reading, SAMPLE_INTERVAL_MS};

/// Takes a sample every interval until shutdown.
pub async fn run(broker: Arc<Broker>, mut shutdown: watch::Receiver<bool>) {
    let mut last = Reading::of(&broker.metrics);
    loop {
        let next = (now_ms() / SAMPLE_INTERVAL_MS + 1) * SAMPLE_INTERVAL_MS;
        let wait = Duration::from_millis((next - now_ms()).max(1) as u64);
        tokio::select! {
            _ = shutdown.changed() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        let now = Reading::of(&broker.metrics);
        let total_lag = snapshot::take(&broker).groups.iter().map(|g| g.total_lag).sum();
        broker.history.push(sample(&last, &now, next, total_lag));
        last = now;
    }
}

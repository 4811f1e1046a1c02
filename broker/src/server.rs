//! The accept loop, the background log housekeeping, and graceful shutdown through one
//! `watch` signal that every task listens to.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::broker::{now_ms, Broker};
use crate::connection;

/// Upper bound on concurrently open client connections.
const MAX_CONNECTIONS: usize = 10_000;

/// Serves clients until `shutdown` turns true, then waits (bounded) for connections to end.
pub async fn run(broker: Arc<Broker>, listener: TcpListener, mut shutdown: watch::Receiver<bool>) {
    // Connections wait in the listen backlog until this broker is registered and its
    // partitions are open.
    tokio::select! {
        _ = shutdown.changed() => return,
        _ = broker.wait_until_serving() => tracing::info!("serving clients"),
    }
    let mut connections = JoinSet::new();
    let housekeeping = tokio::spawn(run_housekeeping(broker.clone(), shutdown.clone()));
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let Ok(slot) = slots.clone().try_acquire_owned() else {
                        tracing::warn!(%peer, "refusing a connection: {MAX_CONNECTIONS} connections are already open");
                        continue;
                    };
                    let _ = stream.set_nodelay(true);
                    let (broker, shutdown) = (broker.clone(), shutdown.clone());
                    connections.spawn(async move {
                        connection::serve(broker, stream, peer, shutdown).await;
                        drop(slot);
                    });
                }
                Err(e) => {
                    // Typically EMFILE: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed; retrying shortly (check the open-file limit)");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
        }
    }
    tracing::info!(open = connections.len(), "shutting down: closing client connections");
    let drained = tokio::time::timeout(Duration::from_secs(5), async {
        while connections.join_next().await.is_some() {}
    });
    if drained.await.is_err() {
        connections.abort_all();
    }
    let _ = housekeeping.await;
}

/// Time-based segment rolls and retention, every `log.retention.check.interval.ms`.
async fn run_housekeeping(broker: Arc<Broker>, mut shutdown: watch::Receiver<bool>) {
    let period = Duration::from_millis(broker.config.log_retention_check_interval_ms.max(10));
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.changed() => return,
            _ = ticker.tick() => {}
        }
        let now = now_ms();
        for partition in broker.replicas.all() {
            match partition.run_retention(now) {
                Ok(0) => {}
                Ok(deleted) => tracing::info!(
                    topic = %partition.topic, partition = partition.index, deleted,
                    log_start_offset = partition.log_start_offset(), "retention deleted old segments"
                ),
                Err(e) => tracing::warn!(
                    topic = %partition.topic, partition = partition.index, error = %e,
                    "log housekeeping failed; will retry at the next interval"
                ),
            }
        }
    }
}

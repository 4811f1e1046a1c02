//! The accept loops (one per Kafka listener), the background log housekeeping and log
//! cleaner, and graceful shutdown through one `watch` signal that every task listens to.
//!
//! Accepting starts only once the broker serves ([`Broker::wait_until_serving`]); until then
//! connections wait in the listen backlog. `max.connections` counts every listener together.
//!
//! Background tasks:
//!
//! - housekeeping: time rolls and retention every `log.retention.check.interval.ms`, idle
//!   producers forgotten every `producer.id.expiration.check.interval.ms`;
//! - writeback, every second, on the blocking pool: active segments that grew by 1 MiB get
//!   `fs::start_writeback`, their buffered index entries are written, and the seals that rolls
//!   left to it are done, so a roll need not fsync; every tenth pass gives free heap back
//!   (`heap::release_free_memory`);
//! - the log cleaner, on the blocking pool: compacts the dirtiest compacted log, records the
//!   cleaned offset in `cleaner-offset-checkpoint`, and sleeps `log.cleaner.backoff.ms` when no
//!   log needs it.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::api::Session;
use crate::broker::Broker;
use crate::clock::now_ms;
use crate::connection;
use crate::log::{read_cleaner_checkpoint, write_cleaner_checkpoint, CleanerConfig, LogCleaner, LogError};

/// Serves clients on every listener (its name and bound socket) until `shutdown` turns true,
/// then waits (bounded) for connections to end.
pub async fn run(broker: Arc<Broker>, listeners: Vec<(Arc<str>, TcpListener)>, mut shutdown: watch::Receiver<bool>) {
    // Connections wait in the listen backlog until this broker is registered and its
    // partitions are open.
    tokio::select! {
        _ = shutdown.changed() => return,
        _ = broker.wait_until_serving() => tracing::info!("serving clients"),
    }
    let housekeeping = tokio::spawn(run_housekeeping(broker.clone(), shutdown.clone()));
    let writeback = tokio::spawn(run_writeback(broker.clone(), shutdown.clone()));
    let log_cleaner = tokio::spawn(run_log_cleaner(broker.clone(), shutdown.clone()));
    // `max.connections` counts the connections of every listener together.
    let slots = Arc::new(ConnectionSlots::default());
    let accepting: Vec<_> = listeners
        .into_iter()
        .map(|(name, listener)| tokio::spawn(accept(broker.clone(), name, listener, slots.clone(), shutdown.clone())))
        .collect();
    for task in accepting {
        let _ = task.await;
    }
    let _ = housekeeping.await;
    let _ = writeback.await;
    let _ = log_cleaner.await;
}

/// One listener's accept loop; on shutdown it waits up to 5 s for its connections to end.
async fn accept(
    broker: Arc<Broker>,
    name: Arc<str>,
    listener: TcpListener,
    slots: Arc<ConnectionSlots>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    // Dynamic: read at each accept, so a lowered limit refuses new
                    // connections at once and leaves the open ones be.
                    let max_connections = broker.dynamic_setting("max.connections", broker.config.max_connections);
                    let Some(slot) = slots.take(max_connections) else {
                        tracing::warn!(%peer, "refusing a connection: max.connections={max_connections} connections are already open");
                        continue;
                    };
                    let _ = stream.set_nodelay(true);
                    let (broker, shutdown) = (broker.clone(), shutdown.clone());
                    let session = Session::new(peer, name.clone());
                    let counted = broker.metrics.connection_opened(&name, session.principal.clone());
                    connections.spawn(async move {
                        connection::accept(broker, stream, session, counted, shutdown).await;
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
    tracing::info!(listener = %name, open = connections.len(), "shutting down: closing client connections");
    let drained = tokio::time::timeout(Duration::from_secs(5), async {
        while connections.join_next().await.is_some() {}
    });
    if drained.await.is_err() {
        connections.abort_all();
    }
}

/// Client connections open over all listeners, against `max.connections` (which may change
/// while they are open).
#[derive(Default)]
struct ConnectionSlots {
    open: std::sync::atomic::AtomicUsize,
}

/// One open connection's place in [`ConnectionSlots`]; given back when dropped.
struct ConnectionSlot(Arc<ConnectionSlots>);

impl ConnectionSlots {
    /// A place for one more connection, if fewer than `limit` are open.
    fn take(self: &Arc<Self>, limit: usize) -> Option<ConnectionSlot> {
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| {
                (open < limit).then_some(open + 1)
            })
            .ok()
            .map(|_| ConnectionSlot(self.clone()))
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Time-based segment rolls and retention, every `log.retention.check.interval.ms`; idle
/// producers forgotten, every `producer.id.expiration.check.interval.ms`.
async fn run_housekeeping(broker: Arc<Broker>, mut shutdown: watch::Receiver<bool>) {
    let period = Duration::from_millis(broker.config.log_retention_check_interval_ms.max(10));
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let producer_period = Duration::from_millis(broker.config.producer_id_expiration_check_interval_ms.max(10));
    // First check one interval after start, as Kafka schedules it: a restarted broker keeps
    // the producers it rebuilt until then.
    let mut producer_ticker = tokio::time::interval_at(tokio::time::Instant::now() + producer_period, producer_period);
    producer_ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.changed() => return,
            _ = producer_ticker.tick() => {
                expire_producers(&broker);
                continue;
            }
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

fn expire_producers(broker: &Broker) {
    let now = now_ms();
    let expiration_ms = broker.dynamic_setting("producer.id.expiration.ms", broker.config.producer_id_expiration_ms);
    for partition in broker.replicas.all() {
        let expired = partition.expire_producers(now, expiration_ms);
        if expired > 0 {
            tracing::debug!(topic = %partition.topic, partition = partition.index, expired,
                "forgot producers idle longer than producer.id.expiration.ms");
        }
    }
}

/// How often active segments' new bytes are handed to the disk, and how many new bytes make a
/// segment worth it.
const WRITEBACK_INTERVAL: Duration = Duration::from_secs(1);
const WRITEBACK_MIN_BYTES: u64 = 1 << 20;
/// Every this many writeback passes (seconds) partitions not appended to since the last such
/// pass drop their tail caches and their active segments' index copies
/// (`PartitionLog::release_idle_memory`), and then the allocator's free pages go back to the
/// kernel (`heap::release_free_memory`).
const IDLE_PASSES: u64 = 10;

/// Starts writeback of what each active segment gained since the last pass (on a blocking
/// thread, no lock held), so the fsync that seals a segment after it rolls finds at most about
/// a second of data still to write rather than the ~30 s the kernel leaves dirty. Durability is
/// unchanged: this only starts writes early. The same pass writes each such segment's buffered
/// index entries to their files (one write per index instead of one per entry), and does the
/// seals that rolls left to it (`PartitionLog::pending_seal`), so no fsync runs on the produce
/// or replication path. A pass looks only at partitions whose log changed since the last one
/// (`Partition::take_writeback_due`): idle partitions cost it nothing.
async fn run_writeback(broker: Arc<Broker>, mut shutdown: watch::Receiver<bool>) {
    // Per hosted partition: the active segment it last saw and how far it was written back.
    let mut written: HashMap<(uuid::Uuid, i32), (i64, u64)> = HashMap::new();
    let mut ticker = tokio::time::interval(WRITEBACK_INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut passes = 0u64;
    loop {
        tokio::select! {
            _ = shutdown.changed() => return,
            _ = ticker.tick() => {}
        }
        passes += 1;
        if passes % IDLE_PASSES == 0 {
            let partitions = broker.replicas.all();
            let _ = tokio::task::spawn_blocking(move || {
                for partition in &partitions {
                    partition.release_idle_memory();
                }
                crate::heap::release_free_memory();
            })
            .await;
        }
        // Only partitions appended to, rolled or truncated since the last look.
        let partitions = broker.replicas.picked(crate::partition::Partition::take_writeback_due);
        let mut due = Vec::new();
        let mut seals = Vec::new();
        for partition in &partitions {
            let key = (partition.topic_id, partition.index);
            let active = partition.active_segment();
            if active.seal_pending {
                seals.push(partition.clone());
            }
            let (segment, size) = (active.base_offset, active.size_bytes);
            let done = match written.get(&key) {
                Some(&(seen, done)) if seen == segment && done <= size => done,
                _ => 0,
            };
            if size - done >= WRITEBACK_MIN_BYTES {
                due.push((partition.clone(), segment, done, size - done));
                written.insert(key, (segment, size));
            } else if done == 0 {
                // Nothing written back of this segment yet: no entry says the same, and a
                // partition created or opened idle costs the map nothing.
                written.remove(&key);
            }
        }
        if passes % IDLE_PASSES == 0 {
            written.retain(|key, _| broker.replicas.hosts(key));
            written.shrink_to_fit();
        }
        if due.is_empty() && seals.is_empty() {
            continue;
        }
        let started = tokio::task::spawn_blocking(move || {
            for partition in seals {
                if let Err(e) = partition.finish_pending_seal() {
                    partition.writeback_again();
                    tracing::warn!(topic = %partition.topic, partition = partition.index, error = %e,
                        "fsyncing a sealed log segment failed; writeback tries again each second and the partition's next roll waits for it");
                }
            }
            for (partition, segment, offset, len) in due {
                // The index entries buffered since the last pass go to their files in bulk too.
                if let Err(e) = partition.write_index_entries() {
                    tracing::warn!(topic = %partition.topic, partition = partition.index, error = %e,
                        "writing buffered index entries failed; they are written again at the next flush or roll");
                }
                // A segment rolled meanwhile was sealed (fsynced) by the roll or is in `seals`.
                let started = match partition.active_segment_file(segment) {
                    Some(Ok(file)) => crate::fs::start_writeback(&file, offset, len),
                    Some(Err(e)) => Err(std::io::Error::other(e.to_string())),
                    None => Ok(()),
                };
                if let Err(e) = started {
                    tracing::debug!(error = %e, "starting writeback of a log segment failed; its fsync at roll does the work");
                }
            }
        });
        let _ = started.await;
    }
}

/// Kafka's log cleaner thread: repeatedly compacts the dirtiest log whose `cleanup.policy`
/// includes `compact` (dirty ratio at least `min.cleanable.dirty.ratio`, or holding tombstones
/// whose `delete.retention.ms` has run out), on a blocking thread, and sleeps
/// `log.cleaner.backoff.ms` whenever no log needed it. Shutdown stops a pass between segments.
async fn run_log_cleaner(broker: Arc<Broker>, mut shutdown: watch::Receiver<bool>) {
    let config = broker.config.log_cleaner_config();
    if !config.enable {
        tracing::info!("log.cleaner.enable=false: compacted topics will not be cleaned");
        return;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let mut state = Some(CleanerState::new(&broker, &config, stop.clone()));
    let mut images = broker.metadata.subscribe();
    loop {
        // Dynamic (Kafka reconfigures its cleaner too): read before each pass.
        let dedupe_bytes = broker.dynamic_setting("log.cleaner.dedupe.buffer.size", config.dedupe_buffer_size);
        if let Some(s) = state.as_mut() {
            s.cleaner.set_dedupe_buffer_size(dedupe_bytes);
        }
        let (pass_broker, mut pass_state) = (broker.clone(), state.take());
        let mut pass = tokio::task::spawn_blocking(move || {
            let cleaned = pass_state
                .as_mut()
                .is_some_and(|s| s.clean_dirtiest_log(&pass_broker, now_ms()));
            (pass_state, cleaned)
        });
        let cleaned = tokio::select! {
            _ = shutdown.changed() => {
                stop.store(true, Ordering::Relaxed);
                let _ = pass.await;
                return;
            }
            finished = &mut pass => match finished {
                Ok((returned, cleaned)) => {
                    state = returned;
                    cleaned
                }
                Err(e) => {
                    tracing::error!(error = %e, "the log cleaner failed; compaction stops until the broker restarts");
                    return;
                }
            },
        };
        if !cleaned && cleaner_backoff(&broker, config.backoff_ms, &mut images, &mut shutdown).await {
            return;
        }
    }
}

/// Sleeps `log.cleaner.backoff.ms` from now, as it is at each metadata change (it is
/// dynamic: a shorter one set meanwhile ends the sleep sooner). True on shutdown.
async fn cleaner_backoff(
    broker: &Broker,
    static_backoff_ms: u64,
    images: &mut watch::Receiver<Arc<crate::metadata::image::MetadataImage>>,
    shutdown: &mut watch::Receiver<bool>,
) -> bool {
    let idle_since = tokio::time::Instant::now();
    let mut watching = true;
    loop {
        let backoff = Duration::from_millis(broker.dynamic_setting("log.cleaner.backoff.ms", static_backoff_ms));
        tokio::select! {
            _ = shutdown.changed() => return true,
            _ = tokio::time::sleep_until(idle_since + backoff) => return false,
            changed = images.changed(), if watching => watching = changed.is_ok(),
        }
    }
}

/// The cleaner's memory between passes: its offset map, the checkpoint, and when kept
/// tombstones come due.
struct CleanerState {
    cleaner: LogCleaner,
    /// First dirty offset per (topic, partition), as in `cleaner-offset-checkpoint`.
    checkpoints: HashMap<(String, i32), i64>,
    tombstone_deadlines_ms: HashMap<(String, i32), i64>,
    /// Partitions holding a batch the cleaner cannot decode (Kafka's uncleanable partitions):
    /// skipped until the broker restarts, so that one bad batch, failing the same way on every
    /// pass, does not stop the compaction of every other log.
    uncleanable: HashSet<(String, i32)>,
}

impl CleanerState {
    fn new(broker: &Broker, config: &CleanerConfig, stop: Arc<AtomicBool>) -> CleanerState {
        CleanerState {
            cleaner: LogCleaner::new(config, stop),
            checkpoints: read_cleaner_checkpoint(&broker.config.data_dir),
            tombstone_deadlines_ms: HashMap::new(),
            uncleanable: HashSet::new(),
        }
    }

    /// Cleans the log that needs it most; false when none needed it (or the pass failed).
    fn clean_dirtiest_log(&mut self, broker: &Broker, now: i64) -> bool {
        let mut dirtiest = None;
        for partition in broker.replicas.all() {
            let key = (partition.topic.to_string(), partition.index);
            if self.uncleanable.contains(&key) {
                continue;
            }
            let to_clean = match partition.log_to_clean(self.checkpoints.get(&key).copied(), now) {
                Ok(Some(to_clean)) => to_clean,
                Ok(None) => continue,
                Err(e) => {
                    tracing::warn!(topic = %partition.topic, partition = partition.index, error = %e,
                        "cannot inspect the log for cleaning; will retry");
                    continue;
                }
            };
            let tombstones_due = self.tombstone_deadlines_ms.get(&key).is_some_and(|d| now >= *d);
            if to_clean.is_empty() || !(to_clean.needs_cleaning() || tombstones_due) {
                continue;
            }
            let ratio = to_clean.dirty_ratio();
            if dirtiest.as_ref().is_none_or(|(best, _, _)| ratio > *best) {
                dirtiest = Some((ratio, partition, to_clean));
            }
        }
        let Some((ratio, partition, to_clean)) = dirtiest else {
            return false;
        };
        let key = (partition.topic.to_string(), partition.index);
        let stats = match partition.clean_log(&mut self.cleaner, &to_clean, now) {
            Ok(stats) => stats,
            Err(e @ LogError::UncleanableBatch { .. }) => {
                tracing::warn!(topic = %partition.topic, partition = partition.index, error = %e,
                    "log cleaning failed; the partition's log is unchanged");
                self.uncleanable.insert(key);
                return false;
            }
            Err(e) => {
                tracing::warn!(topic = %partition.topic, partition = partition.index, error = %e,
                    "log cleaning failed; will retry after log.cleaner.backoff.ms");
                return false;
            }
        };
        if stats.abandoned {
            return false;
        }
        match stats.tombstone_deadline_ms {
            Some(deadline) => self.tombstone_deadlines_ms.insert(key.clone(), deadline),
            None => self.tombstone_deadlines_ms.remove(&key),
        };
        self.checkpoints.insert(key, stats.end_offset);
        if let Err(e) = write_cleaner_checkpoint(&broker.config.data_dir, &self.checkpoints) {
            tracing::warn!(error = %e, "could not write cleaner-offset-checkpoint; check the data dir's disk");
        }
        tracing::info!(
            topic = %partition.topic, partition = partition.index, dirty_ratio = ratio,
            first_dirty_offset = to_clean.first_dirty_offset(), cleaned_to = stats.end_offset,
            segments = stats.segments_replaced, records_removed = stats.records_removed,
            bytes_read = stats.bytes_read, bytes_written = stats.bytes_written, "cleaned log"
        );
        true
    }
}

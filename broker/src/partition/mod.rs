//! One partition replica hosted by this broker (Kafka's `Partition`): its log, its role in
//! the replica set, and the offsets clients are served by.
//!
//! As leader it tracks each follower's log end offset (reported by the follower's fetch
//! offset) and when it last caught up; the high watermark is the lowest log end offset over
//! the ISR and only moves forward. As follower it appends the leader's batches byte for byte.
//!
//! Locks are never held across an await; the order is `replica` → `log` → `producers`.
//! The high watermark, the log end offset, the leader epoch, the low watermark and the first
//! unstable offset are published through one [`PartitionWatch`] (atomics and a single
//! `Notify`), so waiting fetches, `acks=all` produces and DeleteRecords are woken by changes,
//! not by polling.
//!
//! Transactions (KIP-98): every append, leader's or follower's, updates producer state under
//! the log lock, so a marker closes its producer's transaction in the same step and an abort
//! is indexed in the log's `.txnindex`. The last stable offset, min(high watermark, first
//! unstable offset), is kept on leader and follower alike; `ReadBound::LastStable` bounds
//! `read_committed` reads by it and collects the aborted transactions they overlap from memory.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use parking_lot::Mutex;
use uuid::Uuid;

use sluice_protocol::batch::BatchIter;
use sluice_protocol::control::end_txn_marker;

use crate::log::{
    AbortedTxn, AppendInfo, CleanStats, FileCache, LogCleaner, LogConfig, LogError, LogToClean, PartitionLog,
    PlannedRead, TailCacheBudget,
};
use crate::metadata::image::{PartitionRegistration, ReplicaIds};
use crate::producer_state::{snapshot, ActiveProducer, ProducerStateManager};
pub use leader::ReadCandidate;
use leader::{FollowerProgress, LeaderState};
pub use watch::{PartitionWatch, WatchKey, WatchSet, Watched};

mod follower;
mod leader;
mod watch;

const REBUILD_READ_BYTES: usize = 8 * 1024 * 1024;

pub struct Partition {
    /// Shared by the topic's partitions opened in one reconciliation round.
    pub topic: Arc<str>,
    pub topic_id: Uuid,
    pub index: i32,
    /// This broker's id: which member of the replica set this replica is.
    node_id: i32,
    replica: Mutex<ReplicaState>,
    log: Mutex<PartitionLog>,
    /// Idempotent producers' recent batches; locked only while `log` is held, so the sequence
    /// check and the append are one atomic step. Followers keep it too, to dedup after failover.
    producers: Mutex<ProducerStateManager>,
    /// The high watermark (offsets below it are committed on every ISR member and visible to
    /// consumers), the log end offset (followers' long polls wait on it), the leader epoch
    /// (`acks=all` waiters fail when it moves) and the low watermark (DeleteRecords).
    watch: PartitionWatch,
    log_start_offset: AtomicI64,
    /// The log changed since the writeback pass last looked (`server::run_writeback`).
    writeback_due: AtomicBool,
}

/// The replica set as this broker last applied it, and this replica's role in it.
struct ReplicaState {
    role: Role,
    leader_epoch: i32,
    partition_epoch: i32,
    replicas: ReplicaIds,
    isr: ReplicaIds,
}

enum Role {
    Leader(LeaderState),
    /// Following `leader` (-1: the partition has no leader and this replica waits).
    Follower {
        leader: i32,
    },
}

/// How this replica's role changed when a registration was applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoleChange {
    Unchanged,
    BecameLeader,
    /// Now following `leader` (-1: none) at `leader_epoch`.
    BecameFollower {
        leader: i32,
        leader_epoch: i32,
    },
}

/// The upper bound of a read: consumers see committed records only (`read_committed` ones
/// only what no open transaction makes unstable), followers everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadBound {
    HighWatermark,
    /// Kafka's last stable offset: min(high watermark, first unstable offset).
    LastStable,
    LogEnd,
}

/// Result of a leader append.
pub enum AppendOutcome {
    Appended(AppendInfo),
    /// An idempotent producer's retry of batches already in the log at this offset.
    Duplicate {
        base_offset: i64,
    },
}

/// A refused append: the Kafka error for the client and a sentence for the log.
pub type AppendError = (ResponseError, String);

/// What a read returned, with the offsets the fetch response reports beside it.
pub struct ReadOutcome {
    pub records: Bytes,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    /// For a read bounded by the last stable offset: the aborted transactions overlapping the
    /// records returned, by first offset (Fetch's `aborted_transactions`). None otherwise.
    pub aborted_transactions: Option<Vec<AbortedTxn>>,
}

/// A read planned under the partition's lock ([`Partition::plan_read`]), to be done without it
/// ([`PartitionRead::read`]). The high watermark is the one the plan was bounded by, so the
/// response reports the state the bytes were chosen from.
pub struct PartitionRead {
    planned: PlannedRead,
    high_watermark: i64,
    last_stable_offset: i64,
    log_start_offset: i64,
    fetch_offset: i64,
    /// `read_committed` only: the aborted transactions that may overlap the read, collected
    /// from memory under the lock, narrowed to the returned records after the read.
    aborted_candidates: Option<Vec<AbortedTxn>>,
}

impl PartitionRead {
    /// The planned bytes, at most `max_bytes` (but the first batch whole if `min_one_message`),
    /// `max_bytes` no more than planned. Blocking positional reads when [`PartitionRead::reads_disk`]:
    /// run it on a blocking thread then.
    pub fn read(&self, max_bytes: usize, min_one_message: bool) -> Result<ReadOutcome, LogError> {
        let result = self.planned.read(max_bytes, min_one_message)?;
        let aborted_transactions = self.aborted_candidates.as_ref().map(|candidates| {
            let last_returned = BatchIter::new(&result.records).last().map(|(h, _)| h.last_offset());
            crate::log::txn_index::aborted_in_read(candidates, self.fetch_offset, last_returned)
        });
        Ok(ReadOutcome {
            records: result.records,
            high_watermark: self.high_watermark,
            last_stable_offset: self.last_stable_offset,
            log_start_offset: self.log_start_offset,
            aborted_transactions,
        })
    }

    /// Whether [`PartitionRead::read`] reads files; when false (the tail cache answers, or the
    /// offset is the log end) it is a memory read, fine on an async worker.
    pub fn reads_disk(&self) -> bool {
        self.planned.reads_disk()
    }
}

impl Partition {
    /// Opens the replica's log. It starts as a follower of no one; the registration applied
    /// next (see [`Partition::apply_registration`]) gives it its role. `checkpointed_hw` is the
    /// high watermark recorded before the last stop, if any. The log's tail cache takes its
    /// memory from `tail_cache`, and its segment files are opened through `file_cache`.
    #[allow(clippy::too_many_arguments)]
    pub fn open(
        dir: &Path,
        topic: impl Into<Arc<str>>,
        topic_id: Uuid,
        index: i32,
        node_id: i32,
        config: impl Into<Arc<LogConfig>>,
        checkpointed_hw: Option<i64>,
        tail_cache: &Arc<TailCacheBudget>,
        file_cache: &Arc<FileCache>,
        now_ms: i64,
    ) -> Result<Partition, LogError> {
        let mut log = PartitionLog::open(dir, config, file_cache, now_ms)?;
        log.enable_tail_cache(tail_cache.clone());
        let producers = rebuild_producer_state(&mut log)?;
        let end = log.log_end_offset();
        let hw = checkpointed_hw.unwrap_or(0).clamp(log.log_start_offset(), end);
        let watch = PartitionWatch::new(Watched {
            high_watermark: hw,
            log_end_offset: end,
            leader_epoch: -1,
            low_watermark: log.log_start_offset(),
        });
        watch.set_first_unstable_offset(producers.first_unstable_offset());
        Ok(Partition {
            topic: topic.into(),
            topic_id,
            index,
            node_id,
            replica: Mutex::new(ReplicaState {
                role: Role::Follower { leader: -1 },
                leader_epoch: -1,
                partition_epoch: -1,
                replicas: ReplicaIds::new(),
                isr: ReplicaIds::new(),
            }),
            log_start_offset: AtomicI64::new(log.log_start_offset()),
            writeback_due: AtomicBool::new(true),
            watch,
            log: Mutex::new(log),
            producers: Mutex::new(producers),
        })
    }

    /// Applies the partition's registration from the metadata image: becomes leader or
    /// follower when the leader or its epoch changed, and takes on the committed ISR.
    pub fn apply_registration(&self, registration: &PartitionRegistration, now_ms: i64) -> RoleChange {
        let mut state = self.replica.lock();
        let new_epoch = registration.leader_epoch != state.leader_epoch;
        let isr_changed = registration.partition_epoch != state.partition_epoch;
        state.replicas.clone_from(&registration.replicas);
        state.isr.clone_from(&registration.isr);
        state.partition_epoch = registration.partition_epoch;
        let change = if registration.leader == self.node_id {
            if new_epoch || !matches!(state.role, Role::Leader(_)) {
                let followers = registration
                    .replicas
                    .iter()
                    .filter(|id| **id != self.node_id)
                    .map(|id| {
                        // ISR members get a full lag period to show up before they can be dropped.
                        let caught_up = if registration.isr.contains(id) { now_ms } else { 0 };
                        (*id, FollowerProgress::unknown(caught_up))
                    })
                    .collect();
                state.role = Role::Leader(LeaderState {
                    epoch_start_offset: self.log_end_offset(),
                    followers,
                    pending_isr: None,
                });
                RoleChange::BecameLeader
            } else {
                if let Role::Leader(leader) = &mut state.role {
                    if isr_changed {
                        leader.pending_isr = None;
                    }
                    for id in registration.replicas.iter().filter(|id| **id != self.node_id) {
                        leader.followers.insert_if_missing(*id, FollowerProgress::unknown(0));
                    }
                }
                RoleChange::Unchanged
            }
        } else {
            let same = matches!(state.role, Role::Follower { leader } if leader == registration.leader);
            state.role = Role::Follower {
                leader: registration.leader,
            };
            if new_epoch || !same {
                RoleChange::BecameFollower {
                    leader: registration.leader,
                    leader_epoch: registration.leader_epoch,
                }
            } else {
                RoleChange::Unchanged
            }
        };
        state.leader_epoch = registration.leader_epoch;
        let epoch_moved = self.watch.set_leader_epoch(registration.leader_epoch);
        if isr_changed && !epoch_moved {
            // A follower's fetch session re-reads it: a follower just left out of the ISR
            // rejoins through its fetches of the partition, idle or not.
            self.watch.touch();
        }
        self.maybe_advance_high_watermark(&state);
        self.update_low_watermark(&state);
        change
    }

    /// The idempotent producers this replica remembers (DescribeProducers). Takes only the
    /// producer-state lock, the last in the lock order, and copies out before returning.
    pub fn active_producers(&self) -> Vec<ActiveProducer> {
        self.producers.lock().active_producers()
    }

    /// Whether this leader's high watermark is still below the log end it started its epoch
    /// at: it may not yet know what the previous leader committed, so a client's latest
    /// offset or timestamp lookup gets OFFSET_NOT_AVAILABLE (Kafka's `fetchOffsetForTimestamp`)
    /// until its followers have caught it up. False for a follower.
    pub fn high_watermark_behind_epoch_start(&self) -> bool {
        let state = self.replica.lock();
        match &state.role {
            Role::Leader(leader) => self.high_watermark() < leader.epoch_start_offset,
            _ => false,
        }
    }

    pub fn is_leader(&self) -> bool {
        matches!(self.replica.lock().role, Role::Leader(_))
    }

    /// Size of the committed ISR as this broker last applied it.
    pub fn isr_size(&self) -> usize {
        self.replica.lock().isr.len()
    }

    pub fn log_end_offset(&self) -> i64 {
        self.watch.log_end_offset()
    }

    /// The newest leader epoch in this replica's log, which a new follower asks its leader about.
    pub fn latest_log_epoch(&self) -> Option<i32> {
        self.log.lock().latest_epoch()
    }

    /// Reads up to `max_bytes` from `offset`, up to the high watermark or the log end:
    /// [`Partition::plan_read`] then [`PartitionRead::read`], the disk read after the lock is
    /// released. Blocking: for callers already off the async workers.
    pub fn read(
        &self,
        offset: i64,
        max_bytes: usize,
        min_one_message: bool,
        bound: ReadBound,
    ) -> Result<ReadOutcome, LogError> {
        self.plan_read(offset, max_bytes, bound)?
            .read(max_bytes, min_one_message)
    }

    /// Plans a read of about `max_bytes` from `offset` under the log's lock, which is held only
    /// to take the segments' shared file handles and sizes (no disk I/O): concurrent fetches of
    /// this partition do not serialize on it while the disk is read, nor hold up appends.
    pub fn plan_read(&self, offset: i64, max_bytes: usize, bound: ReadBound) -> Result<PartitionRead, LogError> {
        // The HW (and LSO) before the log: neither passes the log end, so the plan stays below.
        let high_watermark = self.high_watermark();
        let last_stable_offset = self.last_stable_offset();
        let log = self.log.lock();
        let max_offset = match bound {
            ReadBound::HighWatermark => high_watermark,
            ReadBound::LastStable => last_stable_offset,
            ReadBound::LogEnd => i64::MAX,
        };
        let planned = log.plan_read(offset, max_offset, max_bytes)?;
        let aborted_candidates =
            (bound == ReadBound::LastStable).then(|| log.collect_aborted_txns(offset, last_stable_offset));
        Ok(PartitionRead {
            planned,
            high_watermark,
            last_stable_offset,
            log_start_offset: log.log_start_offset(),
            fetch_offset: offset,
            aborted_candidates,
        })
    }

    /// Bytes of this replica's log on disk (DescribeLogDirs).
    /// What background writeback works on (see `PartitionLog::active_segment`).
    pub fn active_segment(&self) -> crate::log::ActiveSegment {
        self.log.lock().active_segment()
    }

    /// The active segment's file while it is the one based at `base_offset` (see
    /// `PartitionLog::active_segment_file`); blocking, since it may reopen the file.
    pub fn active_segment_file(&self, base_offset: i64) -> Option<Result<Arc<std::fs::File>, LogError>> {
        self.log.lock().active_segment_file(base_offset)
    }

    /// Writes the active segment's buffered index entries to their files (background writeback).
    pub fn write_index_entries(&self) -> Result<(), LogError> {
        self.log.lock().write_index_entries()
    }

    /// Finishes the seal the last roll left to background writeback (see
    /// `PartitionLog::pending_seal`), fsyncing the sealed segment without the log's lock.
    /// Blocks: for writeback's thread.
    pub fn finish_pending_seal(&self) -> Result<(), LogError> {
        let Some(seal) = self.log.lock().pending_seal()? else {
            return Ok(());
        };
        seal.sync()?;
        let (completed, dir) = {
            let mut log = self.log.lock();
            (log.complete_seal(&seal)?, log.dir().to_path_buf())
        };
        if completed {
            crate::fs::sync_dir(&dir)?;
        }
        Ok(())
    }

    pub fn size_bytes(&self) -> u64 {
        self.log.lock().size_bytes()
    }

    pub fn high_watermark(&self) -> i64 {
        self.watch.high_watermark()
    }

    /// Moves the high watermark forward to `candidate` (never back). Invariant: never past the
    /// log end offset; a candidate beyond it is a bug, reported and not taken.
    fn advance_high_watermark(&self, candidate: i64) {
        let end = self.watch.log_end_offset();
        if candidate > end {
            crate::invariant::broken(format!(
                "{}-{}: the high watermark would move to {candidate}, past the log end offset {end} (now {})",
                self.topic,
                self.index,
                self.watch.high_watermark()
            ));
            return;
        }
        self.watch.advance_high_watermark(candidate);
    }

    /// Kafka's last stable offset: the high watermark, or the first offset of the oldest open
    /// transaction if lower. `read_committed` consumers read below it; leader and follower alike.
    pub fn last_stable_offset(&self) -> i64 {
        self.watch.last_stable_offset()
    }

    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset.load(Ordering::Acquire)
    }

    /// Called after each change to the log (append, roll, truncation, log start move) with its
    /// log start offset: stores it (a move is told to the partition's waiters and fetch
    /// sessions, as fetch answers carry it) and marks the log for the next writeback pass.
    fn after_log_change(&self, log_start_offset: i64) {
        self.writeback_due.store(true, Ordering::Release);
        if self.log_start_offset.swap(log_start_offset, Ordering::AcqRel) != log_start_offset {
            self.watch.touch();
        }
    }

    /// Whether the log changed since the last call (true at first): the writeback pass looks
    /// only at those, so idle partitions cost it nothing.
    pub fn take_writeback_due(&self) -> bool {
        // Read first: an idle partition's cache line is then only read, never written.
        self.writeback_due.load(Ordering::Acquire) && self.writeback_due.swap(false, Ordering::AcqRel)
    }

    /// The writeback pass could not finish this log's work (a failed seal): look again next pass.
    pub fn writeback_again(&self) {
        self.writeback_due.store(true, Ordering::Release);
    }

    pub fn leader_epoch(&self) -> i32 {
        self.watch.leader_epoch()
    }

    /// Kafka's check of a client's `current_leader_epoch` (-1 = not checked): an older epoch
    /// is fenced, a newer one means this broker has not caught up with the metadata yet.
    pub fn check_leader_epoch(&self, requested: i32) -> Result<(), ResponseError> {
        let epoch = self.leader_epoch();
        match requested {
            r if r < 0 || r == epoch => Ok(()),
            r if r < epoch => Err(ResponseError::FencedLeaderEpoch),
            _ => Err(ResponseError::UnknownLeaderEpoch),
        }
    }

    /// The published offsets and epoch, and the notification of their changes, which
    /// `purgatory`'s waiters (consumer and follower fetches, `acks=all`, DeleteRecords) use.
    pub fn watch(&self) -> &PartitionWatch {
        &self.watch
    }

    /// ListOffsets by timestamp: the first record whose timestamp reaches `timestamp_ms`, as
    /// (offset, timestamp), when it lies below `bound` (Kafka's last fetchable offset). A
    /// consumer cannot read past the HW, so a first match at or past it means no record it
    /// may read has reached the time: `None`, which Kafka answers as offset -1.
    pub fn offset_for_timestamp(&self, timestamp_ms: i64, bound: ReadBound) -> Result<Option<(i64, i64)>, LogError> {
        let last_fetchable = self.last_fetchable_offset(bound);
        let found = self.log.lock().offset_for_timestamp(timestamp_ms)?;
        Ok(found.filter(|(offset, _)| *offset < last_fetchable))
    }

    /// The offset a reader bounded by `bound` cannot reach: the HW for consumers, the log end
    /// for replicas. The HW is read before the log, so a lookup after it is never judged
    /// against a bound newer than the log it searched.
    pub fn last_fetchable_offset(&self, bound: ReadBound) -> i64 {
        match bound {
            ReadBound::HighWatermark => self.high_watermark(),
            ReadBound::LastStable => self.last_stable_offset(),
            ReadBound::LogEnd => self.log_end_offset(),
        }
    }

    /// Kafka's OffsetForLeaderEpoch answer: the largest epoch <= `epoch` in this log and the
    /// offset where it ends.
    pub fn end_offset_for_epoch(&self, epoch: i32) -> (i32, i64) {
        self.log.lock().end_offset_for_epoch(epoch)
    }

    /// ListOffsets MAX_TIMESTAMP: (offset, timestamp) of the largest timestamp, when that offset
    /// lies below `bound`, as Kafka filters it (else `None`, answered as offset -1).
    pub fn max_timestamp_offset(&self, bound: ReadBound) -> Option<(i64, i64)> {
        let last_fetchable = self.last_fetchable_offset(bound);
        let found = self.log.lock().max_timestamp_offset();
        found.filter(|(offset, _)| *offset < last_fetchable)
    }

    /// Gives back the memory an idle log holds (see [`PartitionLog::release_idle_memory`]) if
    /// nothing was appended since the last call.
    pub fn release_idle_memory(&self) {
        if let Err(e) = self.log.lock().release_idle_memory() {
            tracing::warn!(
                topic = %self.topic, partition = self.index, error = %e,
                "could not write an idle partition's index entries to their files; they stay in memory and the next pass tries again"
            );
        }
    }

    pub fn update_config(&self, config: impl Into<Arc<LogConfig>>) {
        self.log.lock().update_config(config);
    }

    /// The log's `max.message.bytes` (its topic's setting, else the broker's default).
    pub fn max_message_bytes(&self) -> u32 {
        self.log.lock().config().max_message_bytes
    }

    /// Periodic housekeeping: time-based roll and retention.
    pub fn run_retention(&self, now_ms: i64) -> Result<usize, LogError> {
        let mut log = self.log.lock();
        let active_before = log.active_segment().base_offset;
        log.maybe_roll(now_ms)?;
        snapshot_if_rolled(&log, &self.producers.lock(), active_before);
        let deleted = log.delete_retained_segments(now_ms, self.high_watermark())?;
        self.after_log_change(log.log_start_offset());
        Ok(deleted)
    }

    pub fn flush(&self) -> Result<(), LogError> {
        self.log.lock().flush()
    }

    /// What the log cleaner may compact in this replica's log below its high watermark, `None`
    /// unless `cleanup.policy` includes `compact`. `first_dirty_offset` is the cleaner checkpoint.
    pub fn log_to_clean(&self, first_dirty_offset: Option<i64>, now_ms: i64) -> Result<Option<LogToClean>, LogError> {
        let last_stable = self.last_stable_offset();
        let log = self.log.lock();
        if !log.config().cleanup_policy_compact {
            return Ok(None);
        }
        log.log_to_clean(first_dirty_offset, last_stable, now_ms).map(Some)
    }

    /// One compaction pass over `to_clean` (from [`Partition::log_to_clean`]). The log's lock is
    /// taken only to swap each cleaned segment in, never while segments are read or written.
    pub fn clean_log(
        &self,
        cleaner: &mut LogCleaner,
        to_clean: &LogToClean,
        now_ms: i64,
    ) -> Result<CleanStats, LogError> {
        cleaner.clean(&self.log, to_clean, now_ms)
    }

    /// Consumes the partition, closing (`delete == false`, with a durable producer snapshot at
    /// the log end, so the next open scans nothing) or removing its log.
    pub fn shutdown(self, delete: bool) -> Result<(), LogError> {
        let log = self.log.into_inner();
        if delete {
            return log.delete();
        }
        let entries = self.producers.into_inner().snapshot_entries();
        snapshot::write(log.dir(), log.log_end_offset(), &entries, true)?;
        log.close()
    }
}

/// The Kafka error for a failed log operation; storage failures are logged for the operator.
pub fn log_error(e: &LogError) -> AppendError {
    let error = e.response_error();
    if error == ResponseError::KafkaStorageError {
        tracing::error!(error = %e, "partition log operation failed");
    }
    (error, e.to_string())
}

/// After an append or a time roll: when the active segment changed (`active_before` was its
/// base), snapshots producer state for the new segment's base offset, as it stood before
/// anything in that segment was recorded, and drops snapshots below the first segment. A
/// failure is only logged: the next open falls back to an older snapshot or a longer scan.
fn snapshot_if_rolled(log: &PartitionLog, producers: &ProducerStateManager, active_before: i64) {
    let active = log.active_segment().base_offset;
    if active == active_before {
        return;
    }
    let first_base = log.segment_base_offsets().next().unwrap_or(active);
    let written = snapshot::write(log.dir(), active, &producers.snapshot_entries(), false)
        .and_then(|()| snapshot::delete_outside(log.dir(), first_base, i64::MAX));
    if let Err(e) = written {
        tracing::warn!(dir = %log.dir().display(), error = %e, "could not write a producer snapshot");
    }
}

/// Updates producer state with appended (stamped) batches: sequences, open transactions, and
/// for each marker the transaction it ends; an aborted one is indexed in the log (Kafka's
/// `updateProducers` then `completeTxn` with the last stable offset at the abort). Called
/// under the log and producer locks, as one step with the append.
fn record_appended(
    producers: &mut ProducerStateManager,
    log: &mut PartitionLog,
    records: &[u8],
) -> Result<(), LogError> {
    for (header, range) in BatchIter::new(records) {
        let completed = if header.is_control() {
            let batch = records.get(range).unwrap_or_default();
            match end_txn_marker(batch) {
                Some(marker) => producers.record_marker(&header, marker),
                None => producers.record(&header, sluice_protocol::control::control_type(batch)),
            }
        } else {
            producers.record(&header, None)
        };
        if let Some(txn) = completed.filter(|t| t.aborted) {
            log.append_aborted_txn(AbortedTxn {
                producer_id: txn.producer_id,
                first_offset: txn.first_offset,
                last_offset: txn.last_offset,
                last_stable_offset: producers.last_stable_offset_after(&txn),
            })?;
        }
    }
    Ok(())
}

/// Rebuilds producer state (and the aborted-transaction index entries of what it rescans):
/// from the newest producer snapshot at or below the log end that checks, then batch headers
/// from its offset on (Kafka's `loadProducerState`). Without one, as Kafka does for a log
/// written before snapshots existed, only the last two segments are scanned. Snapshots past
/// the log end (a truncated tail) or below the first segment go.
fn rebuild_producer_state(log: &mut PartitionLog) -> Result<ProducerStateManager, LogError> {
    let end = log.log_end_offset();
    let start = log.log_start_offset();
    let bases: Vec<i64> = log.segment_base_offsets().collect();
    let first_base = bases.first().copied().unwrap_or(start);
    snapshot::delete_outside(log.dir(), first_base, end)?;
    let (mut state, mut offset) = match snapshot::load_latest(log.dir(), end)? {
        Some((at, entries)) => (ProducerStateManager::from_snapshot(&entries), at.max(start)),
        None => {
            let second_last = bases.len().checked_sub(2).and_then(|i| bases.get(i)).copied();
            (ProducerStateManager::default(), second_last.unwrap_or(start).max(start))
        }
    };
    while offset < end {
        let read = log.read(offset, REBUILD_READ_BYTES, end, true)?;
        let mut next = offset;
        record_appended(&mut state, log, &read.records)?;
        if let Some((header, _)) = BatchIter::new(&read.records).last() {
            next = header.last_offset() + 1;
        }
        if next <= offset {
            break; // no whole batch came back: nothing more to learn
        }
        offset = next;
    }
    Ok(state)
}

#[cfg(test)]
pub(crate) mod tests;
#[cfg(test)]
mod txn_tests;

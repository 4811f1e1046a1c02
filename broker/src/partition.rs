//! One partition replica hosted by this broker (Kafka's `Partition`): its log, its role in
//! the replica set, and the offsets clients are served by.
//!
//! As leader it tracks each follower's log end offset (reported by the follower's fetch
//! offset) and when it last caught up; the high watermark is the lowest log end offset over
//! the ISR and only moves forward. As follower it appends the leader's batches byte for byte.
//!
//! Locks are never held across an await; the order is `replica` → `log` → `producers`.
//! The high watermark, the log end offset and the leader epoch are published through `watch`
//! channels, so waiting fetches and `acks=all` produces are woken by changes, not by polling.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use parking_lot::Mutex;
use tokio::sync::watch;
use uuid::Uuid;

use sluice_protocol::batch::BatchIter;

use crate::log::{AppendInfo, CleanStats, LogCleaner, LogConfig, LogError, LogToClean, PartitionLog, PlannedRead};
use crate::metadata::image::PartitionRegistration;
use crate::metadata::records::MetadataCommand;
use crate::producer_state::{ProducerStateManager, SequenceCheck};

/// Offsets of the log tail scanned on open to rebuild idempotent-producer state: retries
/// concern only the last few batches of each producer.
const PRODUCER_STATE_REBUILD_OFFSETS: i64 = 10_000;
const REBUILD_READ_BYTES: usize = 8 * 1024 * 1024;

pub struct Partition {
    pub topic: String,
    pub topic_id: Uuid,
    pub index: i32,
    /// This broker's id: which member of the replica set this replica is.
    node_id: i32,
    replica: Mutex<ReplicaState>,
    log: Mutex<PartitionLog>,
    /// Idempotent producers' recent batches; locked only while `log` is held, so the sequence
    /// check and the append are one atomic step. Followers keep it too, to dedup after failover.
    producers: Mutex<ProducerStateManager>,
    /// Offsets below this are committed (on every ISR member) and visible to consumers.
    high_watermark: watch::Sender<i64>,
    /// Wakes followers' long-polling fetches when the leader appends.
    log_end_offset: watch::Sender<i64>,
    /// Wakes `acks=all` waiters when leadership moves.
    leader_epoch: watch::Sender<i32>,
    log_start_offset: AtomicI64,
}

/// The replica set as this broker last applied it, and this replica's role in it.
struct ReplicaState {
    role: Role,
    leader_epoch: i32,
    partition_epoch: i32,
    replicas: Vec<i32>,
    isr: Vec<i32>,
}

enum Role {
    Leader(LeaderState),
    /// Following `leader` (-1: the partition has no leader and this replica waits).
    Follower {
        leader: i32,
    },
}

struct LeaderState {
    /// Log end offset when this leadership began: a follower rejoins the ISR only once it
    /// holds everything up to here (Kafka's leader-epoch start offset rule).
    epoch_start_offset: i64,
    followers: HashMap<i32, FollowerProgress>,
    /// The ISR of an AlterPartition on its way through the quorum. Until it is decided the
    /// high watermark counts the union of both ISRs (Kafka's "maximal ISR"): a joining follower
    /// is waited for before it is committed as a member, and a leaving one until it is gone.
    pending_isr: Option<Vec<i32>>,
}

/// What the leader knows of one follower (Kafka's `Replica` state).
#[derive(Debug, Clone, Copy)]
struct FollowerProgress {
    /// The follower's last fetch offset; -1 until it fetches from this leader.
    log_end_offset: i64,
    /// When the follower last had everything the leader had (ms since the epoch).
    last_caught_up_ms: i64,
    last_fetch_ms: i64,
    /// The leader's log end offset at the follower's last fetch.
    leader_end_at_last_fetch: i64,
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

/// The upper bound of a read: consumers see committed records only, followers everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadBound {
    HighWatermark,
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
    pub log_start_offset: i64,
}

/// A read planned under the partition's lock ([`Partition::plan_read`]), to be done without it
/// ([`PartitionRead::read`]). The high watermark is the one the plan was bounded by, so the
/// response reports the state the bytes were chosen from.
pub struct PartitionRead {
    planned: PlannedRead,
    high_watermark: i64,
    log_start_offset: i64,
}

impl PartitionRead {
    /// The planned bytes, at most `max_bytes` (but the first batch whole if `min_one_message`).
    /// Blocking positional reads: run it on a blocking thread.
    pub fn read(&self, max_bytes: usize, min_one_message: bool) -> Result<ReadOutcome, LogError> {
        let result = self.planned.read(max_bytes, min_one_message)?;
        Ok(ReadOutcome {
            records: result.records,
            high_watermark: self.high_watermark,
            log_start_offset: self.log_start_offset,
        })
    }
}

impl Partition {
    /// Opens the replica's log. It starts as a follower of no one; the registration applied
    /// next (see [`Partition::apply_registration`]) gives it its role. `checkpointed_hw` is the
    /// high watermark recorded before the last stop, if any.
    #[allow(clippy::too_many_arguments)]
    pub fn open(
        dir: &Path,
        topic: &str,
        topic_id: Uuid,
        index: i32,
        node_id: i32,
        config: LogConfig,
        checkpointed_hw: Option<i64>,
        now_ms: i64,
    ) -> Result<Partition, LogError> {
        let log = PartitionLog::open(dir, config, now_ms)?;
        let producers = rebuild_producer_state(&log)?;
        let end = log.log_end_offset();
        let hw = checkpointed_hw.unwrap_or(0).clamp(log.log_start_offset(), end);
        Ok(Partition {
            topic: topic.to_string(),
            topic_id,
            index,
            node_id,
            replica: Mutex::new(ReplicaState {
                role: Role::Follower { leader: -1 },
                leader_epoch: -1,
                partition_epoch: -1,
                replicas: Vec::new(),
                isr: Vec::new(),
            }),
            log_start_offset: AtomicI64::new(log.log_start_offset()),
            log: Mutex::new(log),
            producers: Mutex::new(producers),
            high_watermark: watch::channel(hw).0,
            log_end_offset: watch::channel(end).0,
            leader_epoch: watch::channel(-1).0,
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
                        leader.followers.entry(*id).or_insert(FollowerProgress::unknown(0));
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
        self.leader_epoch.send_if_modified(|e| {
            let changed = *e != registration.leader_epoch;
            *e = registration.leader_epoch;
            changed
        });
        self.maybe_advance_high_watermark(&state);
        change
    }

    pub fn is_leader(&self) -> bool {
        matches!(self.replica.lock().role, Role::Leader(_))
    }

    /// Size of the committed ISR as this broker last applied it.
    pub fn isr_size(&self) -> usize {
        self.replica.lock().isr.len()
    }

    /// Appends validated batches as leader and advances the high watermark as far as the ISR
    /// allows (at once when this replica is the whole ISR). Idempotent producers' batches are
    /// checked against their sequence first; a retry of batches already appended is answered
    /// with their original offset and not appended again.
    pub fn append_as_leader(&self, records: &mut [u8], now_ms: i64) -> Result<AppendOutcome, AppendError> {
        let state = self.replica.lock();
        if !matches!(state.role, Role::Leader(_)) {
            return Err((
                ResponseError::NotLeaderOrFollower,
                "this broker is no longer the partition leader".into(),
            ));
        }
        let info = {
            let mut log = self.log.lock();
            let mut producers = self.producers.lock();
            let mut duplicate = None;
            for (header, _) in BatchIter::new(records) {
                match producers.check(&header)? {
                    SequenceCheck::Append if duplicate.is_some() => {
                        return Err((
                            ResponseError::OutOfOrderSequenceNumber,
                            "a request mixed retried and new batches".into(),
                        ))
                    }
                    SequenceCheck::Append => {}
                    SequenceCheck::Duplicate { base_offset } => duplicate = duplicate.or(Some(base_offset)),
                }
            }
            if let Some(base_offset) = duplicate {
                return Ok(AppendOutcome::Duplicate { base_offset });
            }
            let info = log
                .append_as_leader(records, state.leader_epoch, now_ms)
                .map_err(|e| log_error(&e))?;
            for (header, _) in BatchIter::new(records) {
                producers.record(&header);
            }
            self.log_start_offset.store(log.log_start_offset(), Ordering::Release);
            info
        };
        self.log_end_offset.send_replace(info.last_offset + 1);
        self.maybe_advance_high_watermark(&state);
        Ok(AppendOutcome::Appended(info))
    }

    /// A follower fetched from `fetch_offset`: that is its log end offset. Updates its
    /// progress (Kafka's `updateFetchState`), advances the high watermark, and returns the
    /// AlterPartition that adds the follower back to the ISR once it has caught up.
    ///
    /// The caller has checked the fetch's replica identity (broker epoch); here the replica
    /// must also be in the applied replica set. A broker that is not is refused as Kafka
    /// refuses it (KAFKA-13837): UNKNOWN_LEADER_EPOCH when the fetch named a leader epoch (the
    /// pair is not one this leader knows yet; the follower retries), NOT_LEADER_OR_FOLLOWER
    /// otherwise. A refused fetch changes no follower's progress, ISR or high watermark.
    pub fn record_follower_fetch(
        &self,
        replica_id: i32,
        fetch_offset: i64,
        current_leader_epoch: i32,
        now_ms: i64,
    ) -> Result<Option<MetadataCommand>, ResponseError> {
        let mut guard = self.replica.lock();
        let state = &mut *guard;
        let leader_end = self.log_end_offset();
        let high_watermark = self.high_watermark();
        let Role::Leader(leader) = &mut state.role else {
            return Err(ResponseError::NotLeaderOrFollower);
        };
        let progress = match leader.followers.get_mut(&replica_id) {
            Some(progress) if replica_id != self.node_id && state.replicas.contains(&replica_id) => progress,
            _ if current_leader_epoch >= 0 => return Err(ResponseError::UnknownLeaderEpoch),
            _ => return Err(ResponseError::NotLeaderOrFollower),
        };
        if fetch_offset > leader_end {
            return Ok(None); // the read answers OFFSET_OUT_OF_RANGE; nothing to learn
        }
        if fetch_offset >= leader_end {
            progress.last_caught_up_ms = progress.last_caught_up_ms.max(now_ms);
        } else if fetch_offset >= progress.leader_end_at_last_fetch {
            progress.last_caught_up_ms = progress.last_caught_up_ms.max(progress.last_fetch_ms);
        }
        progress.log_end_offset = fetch_offset;
        progress.last_fetch_ms = now_ms;
        progress.leader_end_at_last_fetch = leader_end;
        let rejoin = !state.isr.contains(&replica_id)
            && leader.pending_isr.is_none()
            && fetch_offset >= high_watermark
            && fetch_offset >= leader.epoch_start_offset;
        let command = rejoin.then(|| {
            let mut new_isr = state.isr.clone();
            new_isr.push(replica_id);
            self.propose_isr(state, new_isr)
        });
        self.maybe_advance_high_watermark(state);
        Ok(command)
    }

    /// The AlterPartition that drops ISR members that have not caught up for `lag_ms`
    /// (`replica.lag.time.max.ms`), if any; the change takes effect once committed.
    pub fn isr_shrink(&self, now_ms: i64, lag_ms: i64) -> Option<MetadataCommand> {
        let mut guard = self.replica.lock();
        let state = &mut *guard;
        let Role::Leader(leader) = &state.role else { return None };
        if leader.pending_isr.is_some() {
            return None;
        }
        let lagging = |id: &i32| {
            *id != self.node_id
                && leader
                    .followers
                    .get(id)
                    .is_none_or(|p| now_ms.saturating_sub(p.last_caught_up_ms) > lag_ms)
        };
        if !state.isr.iter().any(lagging) {
            return None;
        }
        let new_isr: Vec<i32> = state.isr.iter().copied().filter(|id| !lagging(id)).collect();
        tracing::info!(
            topic = %self.topic, partition = self.index, old_isr = ?state.isr, ?new_isr,
            "shrinking the ISR: followers have not caught up within replica.lag.time.max.ms"
        );
        Some(self.propose_isr(state, new_isr))
    }

    /// An AlterPartition this leader proposed has been decided (either way): the next one
    /// may go out. A committed change also arrives through [`Partition::apply_registration`].
    pub fn isr_change_finished(&self) {
        if let Role::Leader(leader) = &mut self.replica.lock().role {
            leader.pending_isr = None;
        }
    }

    /// Marks `new_isr` pending (see `LeaderState::pending_isr`) and returns the AlterPartition
    /// that asks the controller for it, at this leader's epochs.
    fn propose_isr(&self, state: &mut ReplicaState, new_isr: Vec<i32>) -> MetadataCommand {
        if let Role::Leader(leader) = &mut state.role {
            leader.pending_isr = Some(new_isr.clone());
        }
        MetadataCommand::AlterPartition {
            topic_id: self.topic_id,
            partition: self.index,
            leader_id: self.node_id,
            leader_epoch: state.leader_epoch,
            partition_epoch: state.partition_epoch,
            new_isr,
        }
    }

    /// Kafka's `maybeIncrementLeaderHW`: the lowest log end offset over the (maximal) ISR,
    /// never moving backwards. A follower whose position this leader has not yet heard holds it where it is.
    fn maybe_advance_high_watermark(&self, state: &ReplicaState) {
        let Role::Leader(leader) = &state.role else { return };
        let own_end = self.log_end_offset();
        let candidate = state
            .isr
            .iter()
            .chain(leader.pending_isr.iter().flatten())
            .filter(|id| **id != self.node_id)
            .map(|id| leader.followers.get(id).map_or(-1, |p| p.log_end_offset))
            .fold(own_end, i64::min);
        debug_assert!(candidate <= own_end, "HW {candidate} beyond the log end {own_end}");
        self.high_watermark.send_if_modified(|hw| {
            let advance = candidate > *hw;
            if advance {
                *hw = candidate;
            }
            advance
        });
    }

    /// Appends the leader's batches byte for byte, if this replica still follows at
    /// `leader_epoch` (a fetch answered after a leadership change is dropped). Returns the new
    /// log end offset.
    pub fn append_as_follower(&self, records: &[u8], leader_epoch: i32, now_ms: i64) -> Result<i64, AppendError> {
        let state = self.replica.lock();
        self.check_following(&state, leader_epoch)?;
        let mut log = self.log.lock();
        let mut producers = self.producers.lock();
        log.append_as_follower(records, now_ms).map_err(|e| log_error(&e))?;
        for (header, _) in BatchIter::new(records) {
            producers.record(&header);
        }
        self.log_start_offset.store(log.log_start_offset(), Ordering::Release);
        let end = log.log_end_offset();
        self.log_end_offset.send_replace(end);
        Ok(end)
    }

    /// A follower's high watermark: the leader's, as far as this replica's log reaches. Like
    /// Kafka's `maybeUpdateHighWatermark` it only moves forward (a new leader may report a
    /// lower one until it catches up); only truncating the log lowers it.
    pub fn update_follower_high_watermark(&self, leader_high_watermark: i64) {
        let hw = leader_high_watermark.min(self.log_end_offset());
        self.high_watermark.send_if_modified(|current| {
            let advance = hw > *current;
            if advance {
                *current = hw;
            }
            advance
        });
    }

    /// Drops everything from `offset` on, as a follower at `leader_epoch` reconciling its log
    /// with the leader's. `start_over` empties the log and restarts it at `offset` (the leader
    /// no longer has anything this replica holds).
    pub fn truncate_as_follower(&self, offset: i64, leader_epoch: i32, start_over: bool) -> Result<(), AppendError> {
        let state = self.replica.lock();
        self.check_following(&state, leader_epoch)?;
        let mut log = self.log.lock();
        let before = log.log_end_offset();
        if start_over {
            log.truncate_fully_and_start_at(offset)
        } else {
            log.truncate_to(offset)
        }
        .map_err(|e| log_error(&e))?;
        let end = log.log_end_offset();
        if end != before || start_over {
            *self.producers.lock() = rebuild_producer_state(&log).map_err(|e| log_error(&e))?;
        }
        self.log_start_offset.store(log.log_start_offset(), Ordering::Release);
        self.log_end_offset.send_replace(end);
        self.high_watermark.send_if_modified(|hw| {
            let lower = (*hw).clamp(log.log_start_offset(), end);
            let changed = lower != *hw;
            *hw = lower;
            changed
        });
        Ok(())
    }

    fn check_following(&self, state: &ReplicaState, leader_epoch: i32) -> Result<(), AppendError> {
        match state.role {
            Role::Follower { .. } if state.leader_epoch == leader_epoch => Ok(()),
            _ => Err((
                ResponseError::FencedLeaderEpoch,
                format!(
                    "replica moved on from leader epoch {leader_epoch} (now {})",
                    state.leader_epoch
                ),
            )),
        }
    }

    pub fn log_end_offset(&self) -> i64 {
        *self.log_end_offset.borrow()
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
        // The HW before the log: it never passes the log end, so the plan stays below both.
        let high_watermark = self.high_watermark();
        let log = self.log.lock();
        let max_offset = match bound {
            ReadBound::HighWatermark => high_watermark,
            ReadBound::LogEnd => i64::MAX,
        };
        let planned = log.plan_read(offset, max_offset, max_bytes)?;
        Ok(PartitionRead {
            planned,
            high_watermark,
            log_start_offset: log.log_start_offset(),
        })
    }

    pub fn high_watermark(&self) -> i64 {
        *self.high_watermark.borrow()
    }

    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset.load(Ordering::Acquire)
    }

    pub fn leader_epoch(&self) -> i32 {
        *self.leader_epoch.borrow()
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

    /// A receiver that changes whenever the high watermark moves (consumer fetches and
    /// `acks=all` produces wait on it).
    pub fn watch_high_watermark(&self) -> watch::Receiver<i64> {
        self.high_watermark.subscribe()
    }

    /// A receiver that changes whenever the log grows (followers' fetches wait on it).
    pub fn watch_log_end_offset(&self) -> watch::Receiver<i64> {
        self.log_end_offset.subscribe()
    }

    /// A receiver that changes whenever leadership moves.
    pub fn watch_leader_epoch(&self) -> watch::Receiver<i32> {
        self.leader_epoch.subscribe()
    }

    pub fn offset_for_timestamp(&self, timestamp_ms: i64) -> Result<Option<(i64, i64)>, LogError> {
        self.log.lock().offset_for_timestamp(timestamp_ms)
    }

    /// Kafka's OffsetForLeaderEpoch answer: the largest epoch <= `epoch` in this log and the
    /// offset where it ends.
    pub fn end_offset_for_epoch(&self, epoch: i32) -> (i32, i64) {
        self.log.lock().end_offset_for_epoch(epoch)
    }

    pub fn max_timestamp_offset(&self) -> Option<(i64, i64)> {
        self.log.lock().max_timestamp_offset()
    }

    pub fn update_config(&self, config: LogConfig) {
        self.log.lock().update_config(config);
    }

    /// The log's `max.message.bytes` (its topic's setting, else the broker's default).
    pub fn max_message_bytes(&self) -> u32 {
        self.log.lock().config().max_message_bytes
    }

    /// Periodic housekeeping: time-based roll and retention.
    pub fn run_retention(&self, now_ms: i64) -> Result<usize, LogError> {
        let mut log = self.log.lock();
        log.maybe_roll(now_ms)?;
        let deleted = log.delete_retained_segments(now_ms, self.high_watermark())?;
        self.log_start_offset.store(log.log_start_offset(), Ordering::Release);
        Ok(deleted)
    }

    pub fn flush(&self) -> Result<(), LogError> {
        self.log.lock().flush()
    }

    /// What the log cleaner may compact in this replica's log below its high watermark, `None`
    /// unless `cleanup.policy` includes `compact`. `first_dirty_offset` is the cleaner checkpoint.
    pub fn log_to_clean(&self, first_dirty_offset: Option<i64>, now_ms: i64) -> Result<Option<LogToClean>, LogError> {
        let high_watermark = self.high_watermark();
        let log = self.log.lock();
        if !log.config().cleanup_policy_compact {
            return Ok(None);
        }
        log.log_to_clean(first_dirty_offset, high_watermark, now_ms).map(Some)
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

    /// Consumes the partition, closing (`delete == false`) or removing its log.
    pub fn shutdown(self, delete: bool) -> Result<(), LogError> {
        let log = self.log.into_inner();
        if delete {
            log.delete()
        } else {
            log.close()
        }
    }
}

/// An append waiting for the high watermark to pass `required_offset` (Kafka's
/// `DelayedProduce`, used by `acks=all` produces and by offset commits).
pub struct AwaitReplication {
    pub partition: Arc<Partition>,
    pub required_offset: i64,
    pub leader_epoch: i32,
    pub min_insync_replicas: usize,
}

impl AwaitReplication {
    /// Done when the high watermark reaches `required_offset` (with
    /// `NOT_ENOUGH_REPLICAS_AFTER_APPEND` if the ISR shrank below the minimum meanwhile),
    /// failed if leadership moves or the deadline passes first. Woken by high-watermark and
    /// leader-epoch changes, never by polling.
    pub async fn wait(self, deadline: tokio::time::Instant) -> Result<(), AppendError> {
        let mut high_watermark = self.partition.watch_high_watermark();
        let mut leader_epoch = self.partition.watch_leader_epoch();
        let moved = || {
            (
                ResponseError::NotLeaderOrFollower,
                "leadership moved before the records were replicated; retry against the new leader".to_string(),
            )
        };
        loop {
            if *leader_epoch.borrow_and_update() != self.leader_epoch || !self.partition.is_leader() {
                return Err(moved());
            }
            if *high_watermark.borrow_and_update() >= self.required_offset {
                let isr = self.partition.isr_size();
                if isr < self.min_insync_replicas {
                    return Err((
                        ResponseError::NotEnoughReplicasAfterAppend,
                        format!(
                            "the records were written, but the ISR shrank to {isr}, below min.insync.replicas={}",
                            self.min_insync_replicas
                        ),
                    ));
                }
                return Ok(());
            }
            tokio::select! {
                changed = high_watermark.changed() => if changed.is_err() { return Err(moved()) },
                changed = leader_epoch.changed() => if changed.is_err() { return Err(moved()) },
                _ = tokio::time::sleep_until(deadline) => return Err((
                    ResponseError::RequestTimedOut,
                    "the in-sync replicas did not confirm the records within the request timeout".to_string(),
                )),
            }
        }
    }
}

/// The Kafka error for a failed log operation; storage failures are logged for the operator.
pub fn log_error(e: &LogError) -> AppendError {
    let error = ResponseError::try_from_code(e.kafka_error_code()).unwrap_or(ResponseError::KafkaStorageError);
    if error == ResponseError::KafkaStorageError {
        tracing::error!(error = %e, "partition log operation failed");
    }
    (error, e.to_string())
}

impl FollowerProgress {
    fn unknown(last_caught_up_ms: i64) -> Self {
        FollowerProgress {
            log_end_offset: -1,
            last_caught_up_ms,
            last_fetch_ms: 0,
            leader_end_at_last_fetch: -1,
        }
    }
}

/// Rebuilds idempotent-producer state from the headers of the log's last batches.
fn rebuild_producer_state(log: &PartitionLog) -> Result<ProducerStateManager, LogError> {
    let mut state = ProducerStateManager::default();
    let end = log.log_end_offset();
    let mut offset = log.log_start_offset().max(end - PRODUCER_STATE_REBUILD_OFFSETS);
    while offset < end {
        let read = log.read(offset, REBUILD_READ_BYTES, end, true)?;
        let mut next = offset;
        for (header, _) in BatchIter::new(&read.records) {
            state.record(&header);
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
mod tests {
    use super::*;
    use sluice_protocol::batch::test_support::encode_simple_batch;

    const NOW: i64 = 1_800_000_000_000;
    const LAG_MS: i64 = 30_000;

    fn registration(leader: i32, leader_epoch: i32, partition_epoch: i32, isr: &[i32]) -> PartitionRegistration {
        PartitionRegistration {
            replicas: vec![1, 2, 3],
            isr: isr.to_vec(),
            leader,
            leader_epoch,
            partition_epoch,
        }
    }

    fn open(dir: &Path, node_id: i32) -> Partition {
        Partition::open(dir, "t", Uuid::nil(), 0, node_id, LogConfig::default(), None, NOW).unwrap()
    }

    /// Makes broker 1 the only replica, leader at epoch 0.
    fn lead_alone(p: &Partition) {
        let single = PartitionRegistration {
            replicas: vec![1],
            isr: vec![1],
            leader: 1,
            leader_epoch: 0,
            partition_epoch: 0,
        };
        p.apply_registration(&single, NOW);
    }

    fn append(p: &Partition, records: usize) -> i64 {
        let mut batch = encode_simple_batch(records, 10, NOW);
        match p.append_as_leader(&mut batch, NOW).unwrap() {
            AppendOutcome::Appended(info) => info.last_offset + 1,
            AppendOutcome::Duplicate { .. } => panic!("not a retry"),
        }
    }

    fn new_isr(command: Option<MetadataCommand>) -> Vec<i32> {
        match command {
            Some(MetadataCommand::AlterPartition { new_isr, .. }) => new_isr,
            other => panic!("expected an AlterPartition, got {other:?}"),
        }
    }

    #[test]
    fn the_high_watermark_is_the_lowest_log_end_over_the_isr() {
        let dir = tempfile::tempdir().unwrap();
        let p = open(dir.path(), 1);
        assert_eq!(
            p.apply_registration(&registration(1, 0, 0, &[1, 2, 3]), NOW),
            RoleChange::BecameLeader
        );
        assert_eq!(append(&p, 5), 5);
        assert_eq!(p.high_watermark(), 0, "no follower has confirmed anything yet");
        assert_eq!(p.record_follower_fetch(2, 5, -1, NOW).unwrap(), None);
        assert_eq!(p.high_watermark(), 0, "follower 3 has not fetched from this leader yet");
        p.record_follower_fetch(3, 3, -1, NOW).unwrap();
        assert_eq!(p.high_watermark(), 3);
        p.record_follower_fetch(3, 5, -1, NOW).unwrap();
        assert_eq!(p.high_watermark(), 5);
        // A follower that reports less later (it truncated) never moves the HW backwards.
        p.record_follower_fetch(3, 4, -1, NOW).unwrap();
        assert_eq!(p.high_watermark(), 5);
        // Consumers read only below it; followers read to the log end.
        append(&p, 2);
        let consumer = p.read(5, 1 << 20, true, ReadBound::HighWatermark).unwrap();
        assert!(consumer.records.is_empty());
        let follower = p.read(5, 1 << 20, true, ReadBound::LogEnd).unwrap();
        assert_eq!(BatchIter::new(&follower.records).count(), 1);
    }

    #[test]
    fn a_lagging_follower_leaves_the_isr_once_committed_and_rejoins_when_caught_up() {
        let dir = tempfile::tempdir().unwrap();
        let p = open(dir.path(), 1);
        p.apply_registration(&registration(1, 0, 0, &[1, 2, 3]), NOW);
        append(&p, 10);
        p.record_follower_fetch(2, 10, -1, NOW + 1_000).unwrap();
        assert_eq!(
            p.isr_shrink(NOW + LAG_MS, LAG_MS),
            None,
            "everyone is within the lag time"
        );
        assert_eq!(new_isr(p.isr_shrink(NOW + LAG_MS + 1, LAG_MS)), vec![1, 2]);
        assert_eq!(p.isr_shrink(NOW + LAG_MS + 2, LAG_MS), None, "one change at a time");
        assert_eq!(p.high_watermark(), 0, "the shrink takes effect only once committed");
        p.apply_registration(&registration(1, 0, 1, &[1, 2]), NOW + LAG_MS + 3);
        assert_eq!(p.high_watermark(), 10);
        // Follower 3 returns: behind the HW it stays out; at the HW it asks to rejoin.
        assert_eq!(p.record_follower_fetch(3, 4, -1, NOW + LAG_MS + 4).unwrap(), None);
        let rejoin = p.record_follower_fetch(3, 10, -1, NOW + LAG_MS + 5).unwrap();
        match rejoin {
            Some(MetadataCommand::AlterPartition {
                leader_id,
                leader_epoch,
                partition_epoch,
                new_isr,
                ..
            }) => {
                assert_eq!((leader_id, leader_epoch, partition_epoch), (1, 0, 1));
                assert_eq!(new_isr, vec![1, 2, 3]);
            }
            other => panic!("expected an ISR expansion, got {other:?}"),
        }
        // While the expansion is decided the joining follower already holds the HW back, so
        // the HW never passes what a member-to-be has.
        append(&p, 5);
        p.record_follower_fetch(2, 15, -1, NOW + LAG_MS + 6).unwrap();
        assert_eq!(p.high_watermark(), 10);
        p.record_follower_fetch(3, 15, -1, NOW + LAG_MS + 7).unwrap();
        assert_eq!(p.high_watermark(), 15);
    }

    #[test]
    fn a_single_replica_commits_on_append_and_unknown_replicas_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = open(dir.path(), 1);
        lead_alone(&p);
        assert_eq!(append(&p, 3), 3);
        assert_eq!(p.high_watermark(), 3);
        assert_eq!(
            p.record_follower_fetch(7, 0, -1, NOW),
            Err(ResponseError::NotLeaderOrFollower)
        );
    }

    #[test]
    fn a_follower_copies_the_leaders_batches_and_drops_fetches_from_an_old_epoch() {
        let leader_dir = tempfile::tempdir().unwrap();
        let follower_dir = tempfile::tempdir().unwrap();
        let leader = open(leader_dir.path(), 1);
        let follower = open(follower_dir.path(), 2);
        leader.apply_registration(&registration(1, 4, 0, &[1, 2, 3]), NOW);
        let change = follower.apply_registration(&registration(1, 4, 0, &[1, 2, 3]), NOW);
        assert_eq!(
            change,
            RoleChange::BecameFollower {
                leader: 1,
                leader_epoch: 4
            }
        );
        append(&leader, 3);
        append(&leader, 2);
        let batches = leader.read(0, 1 << 20, true, ReadBound::LogEnd).unwrap().records;
        assert_eq!(follower.append_as_follower(&batches, 4, NOW).unwrap(), 5);
        assert_eq!(follower.latest_log_epoch(), Some(4));
        follower.update_follower_high_watermark(3);
        assert_eq!(follower.high_watermark(), 3);
        follower.update_follower_high_watermark(9);
        assert_eq!(follower.high_watermark(), 5, "never past the follower's log end");
        follower.update_follower_high_watermark(1);
        assert_eq!(follower.high_watermark(), 5, "never back, whatever the leader reports");
        let copied = follower.read(0, 1 << 20, true, ReadBound::LogEnd).unwrap().records;
        assert_eq!(copied, batches, "replicas hold identical bytes");
        // Appending as leader is refused to a follower, and so is a fetch from an older epoch.
        let mut batch = encode_simple_batch(1, 10, NOW);
        assert_eq!(
            follower.append_as_leader(&mut batch, NOW).err().map(|e| e.0),
            Some(ResponseError::NotLeaderOrFollower)
        );
        follower.apply_registration(&registration(3, 5, 1, &[2, 3]), NOW);
        let err = follower.append_as_follower(&batches, 4, NOW).unwrap_err();
        assert_eq!(err.0, ResponseError::FencedLeaderEpoch);
        // Truncation to the new leader's history drops the tail and lowers the HW with it.
        follower.truncate_as_follower(3, 5, false).unwrap();
        assert_eq!(follower.log_end_offset(), 3);
        assert_eq!(follower.high_watermark(), 3);
        follower.truncate_as_follower(2, 5, false).unwrap();
        assert_eq!(follower.log_end_offset(), 0, "a batch straddling the point goes whole");
        assert_eq!(follower.high_watermark(), 0);
    }

    #[test]
    fn a_fetch_from_outside_the_replica_set_is_refused_and_moves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let p = open(dir.path(), 1);
        p.apply_registration(&registration(1, 0, 0, &[1, 2, 3]), NOW);
        append(&p, 5);
        p.record_follower_fetch(2, 5, 0, NOW).unwrap();
        p.record_follower_fetch(3, 3, 0, NOW).unwrap();
        assert_eq!(p.high_watermark(), 3);
        // Broker 3 is reassigned away; broker 2 drops out of the ISR meanwhile.
        let moved = PartitionRegistration {
            replicas: vec![1, 2],
            isr: vec![1, 2],
            leader: 1,
            leader_epoch: 0,
            partition_epoch: 1,
        };
        p.apply_registration(&moved, NOW);
        append(&p, 5);
        let hw = p.high_watermark();
        assert_eq!(hw, 5, "the ISR {{1, 2}} holds offsets below 5");
        assert_eq!(
            p.record_follower_fetch(3, 10, 0, NOW),
            Err(ResponseError::UnknownLeaderEpoch),
            "a leader epoch was named: Kafka's answer is UNKNOWN_LEADER_EPOCH"
        );
        assert_eq!(
            p.record_follower_fetch(3, 10, -1, NOW),
            Err(ResponseError::NotLeaderOrFollower)
        );
        assert_eq!(
            p.record_follower_fetch(1, 10, -1, NOW),
            Err(ResponseError::NotLeaderOrFollower),
            "the leader never fetches from itself"
        );
        assert_eq!(p.high_watermark(), hw, "refused fetches move no high watermark");
        // Nothing was recorded for broker 3: a later legitimate fetch still starts from scratch.
        assert_eq!(p.record_follower_fetch(2, 10, 0, NOW).unwrap(), None);
        assert_eq!(p.high_watermark(), 10);
    }

    #[test]
    fn a_planned_read_holds_no_lock_and_reads_what_was_there_when_planned() {
        let dir = tempfile::tempdir().unwrap();
        let p = open(dir.path(), 1);
        lead_alone(&p);
        append(&p, 3);
        let planned = p.plan_read(0, i32::MAX as usize, ReadBound::HighWatermark).unwrap();
        let second = p.plan_read(0, i32::MAX as usize, ReadBound::HighWatermark).unwrap();
        // Appends and other plans go ahead while plans are outstanding (the lock is not held).
        assert_eq!(append(&p, 2), 5);
        let read = planned.read(i32::MAX as usize, true).unwrap();
        assert_eq!(BatchIter::new(&read.records).count(), 1);
        assert_eq!(read.high_watermark, 3, "the HW the plan was bounded by");
        assert_eq!(second.read(i32::MAX as usize, true).unwrap().records, read.records);
        let now = p.read(0, i32::MAX as usize, true, ReadBound::HighWatermark).unwrap();
        assert_eq!(BatchIter::new(&now.records).count(), 2);
    }
}

//! The leader side of a partition replica: each follower's progress (Kafka's `Replica` state,
//! reported by its fetch offsets), the high watermark (the lowest log end offset over the ISR,
//! never moving back), and the ISR changes (AlterPartition) the leader asks the controller for:
//! expand when a follower catches up, shrink when one lags past `replica.lag.time.max.ms`. The
//! ISR itself changes only when the controller's decision is applied
//! ([`Partition::apply_registration`]).

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use sluice_protocol::batch::BatchIter;

use sluice_protocol::control::{encode_control_batch, ControlType};

use super::{
    log_error, record_appended, snapshot_if_rolled, AppendError, AppendOutcome, Partition, ReplicaState, Role,
};
use crate::log::{AppendInfo, PartitionLog};
use crate::metadata::image::ReplicaIds;
use crate::metadata::records::IsrChangeRequest;
use crate::producer_state::{ProducerStateManager, SequenceCheck, TxnVerification, VerificationGuard};

pub(super) struct LeaderState {
    /// Log end offset when this leadership began: a follower rejoins the ISR only once it
    /// holds everything up to here (Kafka's leader-epoch start offset rule).
    pub(super) epoch_start_offset: i64,
    pub(super) followers: Followers,
    /// The ISR of an AlterPartition on its way through the quorum. Until it is decided the
    /// high watermark counts the union of both ISRs (Kafka's "maximal ISR"): a joining follower
    /// is waited for before it is committed as a member, and a leaving one until it is gone.
    pub(super) pending_isr: Option<Vec<i32>>,
}

/// The leader's view of each follower, by broker id: a replica set has a handful of members,
/// so a vector sized to them, searched linearly, rather than a hash map's buckets (every
/// partition this node leads keeps one).
#[derive(Default)]
pub(super) struct Followers(Vec<(i32, FollowerProgress)>);

impl Followers {
    pub(super) fn get(&self, id: &i32) -> Option<&FollowerProgress> {
        self.0.iter().find(|(f, _)| f == id).map(|(_, p)| p)
    }

    pub(super) fn get_mut(&mut self, id: &i32) -> Option<&mut FollowerProgress> {
        self.0.iter_mut().find(|(f, _)| f == id).map(|(_, p)| p)
    }

    pub(super) fn values_mut(&mut self) -> impl Iterator<Item = &mut FollowerProgress> {
        self.0.iter_mut().map(|(_, p)| p)
    }

    /// Adds `id` with `progress` unless it is already there.
    pub(super) fn insert_if_missing(&mut self, id: i32, progress: FollowerProgress) {
        if self.get(&id).is_none() {
            self.0.reserve_exact(1);
            self.0.push((id, progress));
        }
    }
}

impl FromIterator<(i32, FollowerProgress)> for Followers {
    fn from_iter<I: IntoIterator<Item = (i32, FollowerProgress)>>(iter: I) -> Self {
        let mut followers = Followers::default();
        for (id, progress) in iter {
            followers.insert_if_missing(id, progress);
        }
        followers.0.shrink_to_fit();
        followers
    }
}

/// A replica a consumer could read from, as its leader sees it (Kafka's `ReplicaView`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadCandidate {
    pub broker_id: i32,
    pub log_end_offset: i64,
    /// How long ago it last had everything the leader had (0 for the leader).
    pub since_caught_up_ms: i64,
}

/// What the leader knows of one follower (Kafka's `Replica` state).
#[derive(Debug, Clone)]
pub(super) struct FollowerProgress {
    /// The follower's last fetch offset; -1 until it fetches from this leader.
    log_end_offset: i64,
    /// When the follower last had everything the leader had (ms since the epoch).
    last_caught_up_ms: i64,
    last_fetch_ms: i64,
    /// The leader's log end offset at the follower's last fetch.
    leader_end_at_last_fetch: i64,
    /// The follower's log start offset as its last fetch reported it; -1 until then.
    log_start_offset: i64,
    /// The fetch session this partition is in: when the follower last fetched in it (see
    /// [`FollowerProgress::caught_up_ms`]). None outside a session or once it left it.
    session_clock: Option<Arc<AtomicI64>>,
}

impl FollowerProgress {
    pub(super) fn unknown(last_caught_up_ms: i64) -> Self {
        FollowerProgress {
            log_end_offset: -1,
            last_caught_up_ms,
            last_fetch_ms: 0,
            leader_end_at_last_fetch: -1,
            log_start_offset: -1,
            session_clock: None,
        }
    }

    /// When the follower last had everything the leader had. A follower's fetch session
    /// names a partition only when its position moves, so an idle one it holds at the log
    /// end is not in its fetches: it was caught up at each fetch of the session, as its
    /// position there was this one and the log end never moves back.
    fn caught_up_ms(&self, leader_end: i64) -> i64 {
        match &self.session_clock {
            Some(clock) if self.log_end_offset >= leader_end => {
                self.last_caught_up_ms.max(clock.load(Ordering::Acquire))
            }
            _ => self.last_caught_up_ms,
        }
    }
}

/// Checks every batch's sequence before any is appended: Some(base offset) when the request
/// is a retry of batches already in the log; a request mixing retried and new batches is
/// refused.
fn check_sequences(
    producers: &ProducerStateManager,
    records: &[u8],
    verification: TxnVerification,
) -> Result<Option<i64>, AppendError> {
    let mut duplicate = None;
    for (header, _) in BatchIter::new(records) {
        let check = producers.check(&header)?;
        if check == SequenceCheck::Append {
            producers.check_verified(&header, verification)?;
        }
        match check {
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
    Ok(duplicate)
}

fn no_longer_leader() -> AppendError {
    (
        ResponseError::NotLeaderOrFollower,
        "this broker is no longer the partition leader".into(),
    )
}

impl Partition {
    /// Appends validated batches as leader and advances the high watermark as far as the ISR
    /// allows (at once when this replica is the whole ISR). Idempotent producers' batches are
    /// checked against their sequence first; a retry of batches already appended is answered
    /// with their original offset and not appended again.
    pub fn append_as_leader(&self, records: &mut [u8], now_ms: i64) -> Result<AppendOutcome, AppendError> {
        self.append_as_leader_verified(records, now_ms, TxnVerification::Unchecked)
    }

    /// [`Partition::append_as_leader`] for a client's batches: a transactional batch that
    /// would open its producer's transaction here is refused (INVALID_TXN_STATE) unless
    /// `verification` presents the guard of a coordinator's answer still current (KIP-890).
    pub fn append_as_leader_verified(
        &self,
        records: &mut [u8],
        now_ms: i64,
        verification: TxnVerification,
    ) -> Result<AppendOutcome, AppendError> {
        let mut state = self.replica.lock();
        if !matches!(state.role, Role::Leader(_)) {
            return Err(no_longer_leader());
        }
        self.credit_session_catch_up(&mut state);
        let outcome = {
            let mut log = self.log.lock();
            let mut producers = self.producers.lock();
            if let Some(base_offset) = check_sequences(&producers, records, verification)? {
                return Ok(AppendOutcome::Duplicate { base_offset });
            }
            self.append_and_record(&state, &mut log, &mut producers, records, now_ms)?
        };
        self.after_leader_append(&state, &outcome);
        Ok(AppendOutcome::Appended(outcome))
    }

    /// Forgets producers idle for `expiration_ms` (`producer.id.expiration.ms`); returns how many.
    pub fn expire_producers(&self, now_ms: i64, expiration_ms: i64) -> usize {
        self.producers.lock().expire(now_ms, expiration_ms)
    }

    /// Starts verifying `producer_id`'s first transactional write here (KIP-890 part 1):
    /// `None` when it has a transaction open here already, else the guard to append with once
    /// its coordinator confirms the partition is in its transaction.
    pub fn start_txn_verification(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        sequence: i32,
        bumped_epoch: bool,
    ) -> Option<VerificationGuard> {
        self.producers
            .lock()
            .start_verification(producer_id, producer_epoch, sequence, bumped_epoch)
    }

    /// Appends a transaction marker (KIP-98) for `producer_id` as leader, for the transaction
    /// coordinator's WriteTxnMarkers: the same path as [`Partition::append_as_leader`] (leader
    /// epoch stamped, tail cache, producer state, high watermark), after Kafka's marker checks
    /// (INVALID_PRODUCER_EPOCH for an older producer epoch, TRANSACTION_COORDINATOR_FENCED for
    /// an older coordinator epoch). Returns the marker's offset; the caller waits for the high
    /// watermark to pass it (`purgatory::DelayedProduce`), as `acks=all` does.
    pub fn append_control_batch(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        coordinator_epoch: i32,
        kind: ControlType,
        now_ms: i64,
    ) -> Result<i64, AppendError> {
        let mut marker = encode_control_batch(producer_id, producer_epoch, coordinator_epoch, kind, now_ms);
        let mut state = self.replica.lock();
        if !matches!(state.role, Role::Leader(_)) {
            return Err(no_longer_leader());
        }
        self.credit_session_catch_up(&mut state);
        let info = {
            let mut log = self.log.lock();
            let mut producers = self.producers.lock();
            producers.check_marker(producer_id, producer_epoch, coordinator_epoch)?;
            self.append_and_record(&state, &mut log, &mut producers, &mut marker, now_ms)?
        };
        self.after_leader_append(&state, &info);
        Ok(info.base_offset)
    }

    /// Before the log end moves: each follower holding it in a fetch session was caught up
    /// at that session's last fetch, which [`FollowerProgress::caught_up_ms`] can no longer
    /// tell once the log has grown past the follower's position.
    fn credit_session_catch_up(&self, state: &mut ReplicaState) {
        let Role::Leader(leader) = &mut state.role else { return };
        let leader_end = self.log_end_offset();
        for progress in leader.followers.values_mut() {
            progress.last_caught_up_ms = progress.caught_up_ms(leader_end);
        }
    }

    /// The append itself and the producer-state update, as one step under both locks.
    fn append_and_record(
        &self,
        state: &ReplicaState,
        log: &mut PartitionLog,
        producers: &mut ProducerStateManager,
        records: &mut [u8],
        now_ms: i64,
    ) -> Result<AppendInfo, AppendError> {
        let active_before = log.active_segment().base_offset;
        let info = log
            .append_as_leader(records, state.leader_epoch, now_ms)
            .map_err(|e| log_error(&e))?;
        snapshot_if_rolled(log, producers, active_before);
        record_appended(producers, log, records).map_err(|e| log_error(&e))?;
        self.watch.set_first_unstable_offset(producers.first_unstable_offset());
        self.after_log_change(log.log_start_offset());
        Ok(info)
    }

    fn after_leader_append(&self, state: &ReplicaState, info: &AppendInfo) {
        self.watch.set_log_end_offset(info.last_offset + 1);
        self.maybe_advance_high_watermark(state);
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
        follower_log_start_offset: i64,
        current_leader_epoch: i32,
        now_ms: i64,
    ) -> Result<Option<IsrChangeRequest>, ResponseError> {
        self.record_follower_session_fetch(
            replica_id,
            fetch_offset,
            follower_log_start_offset,
            current_leader_epoch,
            now_ms,
            None,
        )
    }

    /// [`Partition::record_follower_fetch`] for a fetch in a session whose fetches are
    /// clocked by `session_clock` ([`super::WatchSet::fetch_clock`]): until the follower
    /// names the partition again, each fetch of the session counts as one at this position.
    pub fn record_follower_session_fetch(
        &self,
        replica_id: i32,
        fetch_offset: i64,
        follower_log_start_offset: i64,
        current_leader_epoch: i32,
        now_ms: i64,
        session_clock: Option<&Arc<AtomicI64>>,
    ) -> Result<Option<IsrChangeRequest>, ResponseError> {
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
        progress.log_start_offset = follower_log_start_offset;
        progress.last_fetch_ms = now_ms;
        progress.leader_end_at_last_fetch = leader_end;
        match (session_clock, &progress.session_clock) {
            (Some(clock), Some(held)) if Arc::ptr_eq(clock, held) => {}
            (clock, _) => progress.session_clock = clock.cloned(),
        }
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
        self.update_low_watermark(state);
        Ok(command)
    }

    /// The follower's fetch session no longer holds this partition: its fetches no longer
    /// say where the follower is here.
    pub fn forget_follower_session(&self, replica_id: i32, session_clock: &Arc<AtomicI64>) {
        if let Role::Leader(leader) = &mut self.replica.lock().role {
            if let Some(progress) = leader.followers.get_mut(&replica_id) {
                if progress
                    .session_clock
                    .as_ref()
                    .is_some_and(|c| Arc::ptr_eq(c, session_clock))
                {
                    progress.session_clock = None;
                }
            }
        }
    }

    /// Whether `replica_id` is in the ISR this replica applied.
    pub fn isr_contains(&self, replica_id: i32) -> bool {
        self.replica.lock().isr.contains(&replica_id)
    }

    /// DeleteRecords on the leader (Kafka's `deleteRecordsOnLeader`): moves the log start
    /// offset to `offset` (-1: the high watermark), which may not pass the high watermark, so
    /// only committed records are ever deleted. Returns the new log start offset; followers
    /// copy it from their next fetch response, and the low watermark ([`Partition::watch`]) says when
    /// the whole ISR has.
    pub fn delete_records(&self, offset: i64) -> Result<i64, AppendError> {
        let state = self.replica.lock();
        if !matches!(state.role, Role::Leader(_)) {
            return Err(no_longer_leader());
        }
        let high_watermark = self.high_watermark();
        let target = if offset == -1 { high_watermark } else { offset };
        if target < 0 || target > high_watermark {
            return Err((
                ResponseError::OffsetOutOfRange,
                format!(
                    "cannot delete records before offset {offset}: it is beyond the high watermark {high_watermark}; pass an offset up to the high watermark, or -1 for the high watermark"
                ),
            ));
        }
        let new_start = {
            let mut log = self.log.lock();
            log.advance_log_start_offset(target).map_err(|e| log_error(&e))?;
            let start = log.log_start_offset();
            self.after_log_change(start);
            start
        };
        debug_assert!(
            new_start <= high_watermark,
            "log start {new_start} beyond the HW {high_watermark}"
        );
        self.update_low_watermark(&state);
        Ok(new_start)
    }

    /// Kafka's low watermark, as a leader sees it: the lowest log start offset over this replica
    /// and the ISR's followers (one not yet heard from counts as -1). DeleteRecords waits for it.
    pub(super) fn update_low_watermark(&self, state: &ReplicaState) {
        let Role::Leader(leader) = &state.role else { return };
        let own_start = self.log_start_offset();
        let low = state
            .isr
            .iter()
            .filter(|id| **id != self.node_id)
            .map(|id| leader.followers.get(id).map_or(-1, |p| p.log_start_offset))
            .fold(own_start, i64::min);
        self.watch.set_low_watermark(low);
    }

    /// The replicas a consumer reading `fetch_offset` could be sent to (KIP-392, Kafka's
    /// `ReplicaView`s): this leader, and each in-sync follower whose log holds the offset by
    /// its last fetch. `None` when this replica does not lead.
    pub fn read_candidates(&self, fetch_offset: i64, now_ms: i64) -> Option<Vec<ReadCandidate>> {
        let state = self.replica.lock();
        let Role::Leader(leader) = &state.role else { return None };
        let own = ReadCandidate {
            broker_id: self.node_id,
            log_end_offset: self.log_end_offset(),
            since_caught_up_ms: 0,
        };
        let followers = state.isr.iter().filter(|id| **id != self.node_id).filter_map(|id| {
            let progress = leader.followers.get(id)?;
            let holds = progress.log_start_offset <= fetch_offset && fetch_offset <= progress.log_end_offset;
            holds.then_some(ReadCandidate {
                broker_id: *id,
                log_end_offset: progress.log_end_offset,
                since_caught_up_ms: now_ms.saturating_sub(progress.caught_up_ms(own.log_end_offset)),
            })
        });
        Some(std::iter::once(own).chain(followers).collect())
    }

    /// The AlterPartition that drops ISR members that have not caught up for `lag_ms`
    /// (`replica.lag.time.max.ms`), if any; the change takes effect once committed.
    pub fn isr_shrink(&self, now_ms: i64, lag_ms: i64) -> Option<IsrChangeRequest> {
        let mut guard = self.replica.lock();
        let state = &mut *guard;
        let Role::Leader(leader) = &state.role else { return None };
        if leader.pending_isr.is_some() {
            return None;
        }
        let leader_end = self.log_end_offset();
        let lagging = |id: &i32| {
            *id != self.node_id
                && leader
                    .followers
                    .get(id)
                    .is_none_or(|p| now_ms.saturating_sub(p.caught_up_ms(leader_end)) > lag_ms)
        };
        if !state.isr.iter().any(lagging) {
            return None;
        }
        let new_isr: ReplicaIds = state.isr.iter().copied().filter(|id| !lagging(id)).collect();
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
            // A refused expansion is proposed again at the follower's next fetch of it.
            self.watch.touch();
        }
    }

    /// Marks `new_isr` pending (see `LeaderState::pending_isr`) and returns the AlterPartition
    /// change that asks the controller for it, at this leader's epochs (this broker leads).
    fn propose_isr(&self, state: &mut ReplicaState, new_isr: ReplicaIds) -> IsrChangeRequest {
        if let Role::Leader(leader) = &mut state.role {
            leader.pending_isr = Some(new_isr.to_vec());
        }
        IsrChangeRequest {
            topic_id: self.topic_id,
            partition: self.index,
            leader_epoch: state.leader_epoch,
            partition_epoch: state.partition_epoch,
            new_isr: new_isr.to_vec(),
        }
    }

    /// Kafka's `maybeIncrementLeaderHW`: the lowest log end offset over the (maximal) ISR,
    /// never moving backwards. A follower whose position this leader has not yet heard holds it where it is.
    pub(super) fn maybe_advance_high_watermark(&self, state: &ReplicaState) {
        let Role::Leader(leader) = &state.role else { return };
        let own_end = self.log_end_offset();
        let candidate = state
            .isr
            .iter()
            .chain(leader.pending_isr.iter().flatten())
            .filter(|id| **id != self.node_id)
            .map(|id| leader.followers.get(id).map_or(-1, |p| p.log_end_offset))
            .fold(own_end, i64::min);
        let candidate = candidate + i64::from(*crate::invariant::HW_PAST_LOG_END);
        self.advance_high_watermark(candidate);
    }
}

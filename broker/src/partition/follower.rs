//! The follower side of a partition replica: appending the leader's batches byte for byte,
//! taking the leader's high watermark (forward only), and truncating to the leader's history
//! (after OffsetForLeaderEpoch) — each only while this replica still follows at the leader
//! epoch the replica fetcher worked from. The fetching itself is `replication/fetcher.rs`.

use kafka_protocol::error::ResponseError;

use super::{
    log_error, rebuild_producer_state, record_appended, snapshot_if_rolled, AppendError, Partition, ReplicaState, Role,
};

impl Partition {
    /// Appends the leader's batches byte for byte, if this replica still follows at
    /// `leader_epoch` (a fetch answered after a leadership change is dropped). Returns the new
    /// log end offset.
    pub fn append_as_follower(&self, records: &[u8], leader_epoch: i32, now_ms: i64) -> Result<i64, AppendError> {
        let state = self.replica.lock();
        self.check_following(&state, leader_epoch)?;
        let mut log = self.log.lock();
        let mut producers = self.producers.lock();
        let active_before = log.active_segment().base_offset;
        log.append_as_follower(records, now_ms).map_err(|e| log_error(&e))?;
        snapshot_if_rolled(&log, &producers, active_before);
        record_appended(&mut producers, &mut log, records).map_err(|e| log_error(&e))?;
        self.watch.set_first_unstable_offset(producers.first_unstable_offset());
        self.after_log_change(log.log_start_offset());
        let end = log.log_end_offset();
        self.watch.set_log_end_offset(end);
        Ok(end)
    }

    /// A follower's high watermark: the leader's, as far as this replica's log reaches, if this
    /// replica still follows at `leader_epoch` (a fetcher answered by a previous leader must
    /// not move it after the new one's fetcher truncated the log). Like Kafka's
    /// `maybeUpdateHighWatermark` it only moves forward (a new leader may report a lower one
    /// until it catches up); only truncating the log lowers it.
    pub fn update_follower_high_watermark(&self, leader_high_watermark: i64, leader_epoch: i32) {
        let state = self.replica.lock();
        if self.check_following(&state, leader_epoch).is_err() {
            return;
        }
        self.advance_high_watermark(leader_high_watermark.min(self.log_end_offset()));
    }

    /// Copies the leader's log start offset (DeleteRecords), as far as this replica's high
    /// watermark reaches so it never passes committed data; forward only. Cheap when unchanged.
    pub fn update_follower_log_start_offset(&self, leader_log_start_offset: i64) -> Result<(), AppendError> {
        if leader_log_start_offset <= self.log_start_offset() {
            return Ok(());
        }
        let mut log = self.log.lock();
        let target = leader_log_start_offset
            .min(self.high_watermark())
            .min(log.log_end_offset());
        log.advance_log_start_offset(target).map_err(|e| log_error(&e))?;
        self.after_log_change(log.log_start_offset());
        Ok(())
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
        if start_over {
            crate::producer_state::snapshot::delete_all(log.dir()).map_err(|e| log_error(&e.into()))?;
        }
        if end != before || start_over {
            let rebuilt = rebuild_producer_state(&mut log).map_err(|e| log_error(&e))?;
            self.watch.set_first_unstable_offset(rebuilt.first_unstable_offset());
            *self.producers.lock() = rebuilt;
        }
        self.after_log_change(log.log_start_offset());
        // The high watermark first, so that it is never past the log end offset, even briefly.
        self.watch.clamp_high_watermark(log.log_start_offset(), end);
        self.watch.set_log_end_offset(end);
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
}

//! Appending to a partition log: a leader's batches get consecutive offsets and its epoch
//! stamped in place, a follower's are checked to continue the log exactly; either may roll
//! the active segment first and flush after (`flush.messages` / `flush.ms`). A leader's
//! appends are kept in the tail cache as written (`log/tail.rs`); a follower's log is read by
//! no fetch, so its appends only clear it.

use sluice_protocol::batch::{self, BatchError, BatchHeader, BatchIter, BatchesInfo, NO_TIMESTAMP};

use super::{AppendInfo, PartitionLog};
use crate::fs::sync_dir;
use crate::log::segment::LogSegment;
use crate::log::LogError;

impl PartitionLog {
    /// Appends a produce request's batches (validated by `validate_batches`), keeping the leader
    /// epoch the producer wrote (recorded in the epoch cache like a follower's, if >= 0). See
    /// [`PartitionLog::append_as_leader`].
    pub fn append(&mut self, records: &mut [u8], now_ms: i64) -> Result<AppendInfo, LogError> {
        self.append_stamped(records, None, now_ms)
    }

    /// Kafka's `appendAsLeader`: assigns offsets from the log end offset by patching each batch's
    /// base offset, stamps `leader_epoch`, applies LogAppendTime if configured, rolls if needed,
    /// and writes the bytes as received. Each batch must fit `max.message.bytes`. A new epoch is
    /// recorded (and checkpointed) at the first offset it writes; an epoch below the log's latest
    /// is a bug in the caller's leadership tracking: refused with `LeaderEpochRegression`, and
    /// reported as a broken invariant (the node stops).
    pub fn append_as_leader(
        &mut self,
        records: &mut [u8],
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<AppendInfo, LogError> {
        self.append_stamped(records, Some(leader_epoch), now_ms)
    }

    /// Kafka's `appendAsFollower`: batches that already carry offsets, from the leader. Validates
    /// them fully (they crossed the network), and requires them to continue the log: the first
    /// offset must not be below the log end offset (gaps are legal, as after compaction) and
    /// offsets must increase. Each batch keeps the leader's `partitionLeaderEpoch`, and epochs it
    /// has not seen are recorded; an epoch going backwards means this replica diverged from the
    /// leader, and the append is refused with `LeaderEpochRegression` before anything is written.
    pub fn append_as_follower(&mut self, records: &[u8], now_ms: i64) -> Result<AppendInfo, LogError> {
        self.clock_ms = now_ms;
        self.tail.follower_append();
        let info = batch::validate_stored_batches(records)?;
        let append = self.check_follower_offsets(records)?;
        let new_epochs = self.leader_epoch_cache.new_entries(stored_epochs(records))?;
        let records_len = records.len() as u64;
        self.maybe_roll_for(
            records_len,
            append.base_offset,
            append.last_offset,
            append.max_timestamp,
            now_ms,
        )?;
        self.leader_epoch_cache.assign(&new_epochs)?;
        if let Err(e) = self.active.append(records, self.config.index_interval_bytes) {
            self.tail.poison();
            return Err(e);
        }
        self.log_end_offset = append.last_offset + 1;
        self.maybe_flush_after(info.record_count, now_ms)?;
        Ok(append)
    }

    pub(super) fn append_stamped(
        &mut self,
        records: &mut [u8],
        leader_epoch: Option<i32>,
        now_ms: i64,
    ) -> Result<AppendInfo, LogError> {
        self.clock_ms = now_ms;
        let info = self.check_leader_append(records)?;
        let first_offset = self.log_end_offset;
        let last_offset = first_offset + info.record_count - 1;
        debug_assert!(last_offset >= first_offset, "every v2 batch spans at least one offset");
        let log_append_time_ms = if self.config.message_timestamp_log_append {
            now_ms
        } else {
            NO_TIMESTAMP
        };
        let max_timestamp = if log_append_time_ms == NO_TIMESTAMP {
            info.max_timestamp
        } else {
            now_ms
        };
        let next_offset = stamp_batches(records, first_offset, leader_epoch, log_append_time_ms)?;
        // Invariant: an append covers exactly the offsets after the log end, with no gap.
        if next_offset != last_offset + 1 {
            let broken = format!(
                "{}: an append stamped offsets {first_offset}..{next_offset} but was validated as {first_offset}..={last_offset}; nothing was written",
                self.name()
            );
            crate::invariant::broken(broken.clone());
            return Err(LogError::Internal(broken));
        }
        let new_epochs = match leader_epoch {
            Some(epoch) => self.leader_epoch_cache.new_entries([(epoch, first_offset)]),
            None => self.leader_epoch_cache.new_entries(stored_epochs(records)),
        };
        // Invariant: a leader's epoch never goes back in its log (its leadership tracking is
        // behind if it does). A producer's own epochs (`append`) are input, refused as such.
        if let (Some(epoch), Err(e)) = (leader_epoch, &new_epochs) {
            crate::invariant::broken(format!(
                "{}: a leader append at epoch {epoch} was refused: {e}",
                self.name()
            ));
        }
        let new_epochs = new_epochs?;
        self.maybe_roll_for(records.len() as u64, first_offset, last_offset, max_timestamp, now_ms)?;
        self.leader_epoch_cache.assign(&new_epochs)?;
        let position = self.active.size_bytes();
        if let Err(e) = self.active.append(records, self.config.index_interval_bytes) {
            self.tail.poison();
            return Err(e);
        }
        self.tail.push(records, position, first_offset, last_offset + 1);
        self.log_end_offset = last_offset + 1;
        self.maybe_flush_after(info.record_count, now_ms)?;
        // Under LogAppendTime every batch has the max timestamp: the first one holds it.
        let offset_of_max_timestamp = match log_append_time_ms {
            NO_TIMESTAMP => first_offset + info.offset_delta_of_max_timestamp,
            _ => BatchHeader::parse(records)?.last_offset(),
        };
        Ok(AppendInfo {
            base_offset: first_offset,
            last_offset,
            log_append_time_ms,
            log_start_offset: self.log_start_offset,
            max_timestamp,
            offset_of_max_timestamp,
        })
    }

    /// The header checks an append needs without a second CRC pass: whole batches, sane fields,
    /// each batch within `max.message.bytes` and `segment.bytes` (Kafka checks per batch).
    pub(super) fn check_leader_append(&self, records: &[u8]) -> Result<BatchesInfo, LogError> {
        let info = batch::inspect_batches(records)?;
        let batch_bytes = info.max_batch_bytes;
        if batch_bytes > self.config.max_message_bytes as usize {
            return Err(LogError::MessageTooLarge {
                batch_bytes,
                max: self.config.max_message_bytes,
            });
        }
        let segment_bytes = self.config.effective_segment_bytes();
        if batch_bytes as u64 > segment_bytes {
            return Err(LogError::RecordBatchTooLarge {
                batch_bytes,
                segment_bytes,
            });
        }
        Ok(info)
    }

    /// Checks that a follower append continues the log with increasing offsets, and describes it.
    pub(super) fn check_follower_offsets(&self, records: &[u8]) -> Result<AppendInfo, LogError> {
        let mut batches = BatchIter::new(records);
        let Some((first, _)) = batches.next() else {
            return Err(BatchError::NoBatches.into());
        };
        if first.base_offset < self.log_end_offset {
            return Err(LogError::UnexpectedAppendOffset {
                first_offset: first.base_offset,
                log_end: self.log_end_offset,
            });
        }
        // Keeps `last_offset + 1` (the next log end offset) from overflowing on hostile input.
        let too_large = |header: &BatchHeader| header.last_offset() == i64::MAX;
        if too_large(&first) {
            return Err(LogError::Corrupt(format!(
                "follower append reaches offset {}",
                i64::MAX
            )));
        }
        let mut append = AppendInfo {
            base_offset: first.base_offset,
            last_offset: first.last_offset(),
            log_append_time_ms: NO_TIMESTAMP,
            log_start_offset: self.log_start_offset,
            max_timestamp: first.max_timestamp,
            offset_of_max_timestamp: first.last_offset(),
        };
        for (header, _) in batches {
            if header.base_offset <= append.last_offset || too_large(&header) {
                return Err(LogError::Corrupt(format!(
                    "follower append has batch base offset {} after offset {}",
                    header.base_offset, append.last_offset
                )));
            }
            if header.max_timestamp > append.max_timestamp {
                append.max_timestamp = header.max_timestamp;
                append.offset_of_max_timestamp = header.last_offset();
            }
            append.last_offset = header.last_offset();
        }
        Ok(append)
    }

    /// Kafka's `maybeRoll`: a new segment when this append would push the active one past
    /// `segment.bytes`, when it is older than `segment.ms`, or when the offsets would not fit the
    /// indexes' relative u32 offsets.
    pub(super) fn maybe_roll_for(
        &mut self,
        append_bytes: u64,
        first_offset: i64,
        last_offset: i64,
        max_timestamp_ms: i64,
        now_ms: i64,
    ) -> Result<(), LogError> {
        let active = &self.active;
        let offsets_overflow = last_offset - active.base_offset() > i64::from(i32::MAX);
        let full = active.size_bytes() + append_bytes > self.config.effective_segment_bytes();
        let old = active.time_waited_for_roll_ms(now_ms, max_timestamp_ms) > self.config.segment_ms;
        if offsets_overflow || (!active.is_empty() && (full || old)) {
            self.roll(first_offset, now_ms)?;
        }
        Ok(())
    }

    /// Seals the active segment and starts a new one at `base_offset`. An empty active segment
    /// is replaced instead.
    ///
    /// The sealed segment's fsync is left to background writeback ([`PartitionLog::pending_seal`]),
    /// so an append that rolls does no fsync of its own, except the first roll after a new
    /// leader epoch, which makes the leader-epoch checkpoint durable (see `leader_epoch.rs`). Until it happens the new segment's `.log` carries
    /// a pending name with the sealed segment's size, and an open after a crash checks the
    /// sealed segment against it, so recovery still only needs to trust what is durable. At most
    /// one seal is in flight: a roll that finds the previous one not yet done does it here.
    pub(super) fn roll(&mut self, base_offset: i64, now_ms: i64) -> Result<(), LogError> {
        if self.active.is_empty() && self.active.base_offset() == base_offset {
            return Ok(());
        }
        self.tail.reset(); // the cached chunks are the active segment's last bytes
        self.finish_pending_seal_now()?;
        if self.active.is_empty() {
            let new_segment = LogSegment::create(&self.dir, base_offset, &self.file_cache, now_ms)?;
            sync_dir(&self.dir)?;
            std::mem::replace(&mut self.active, new_segment).delete()?;
            if self.inactive.is_empty() {
                self.log_start_offset = base_offset;
                self.leader_epoch_cache.truncate_from_start(base_offset)?;
            }
        } else {
            // An epoch whose first batch is in the segment being sealed must be durable in the
            // checkpoint: after a crash only the new active segment is rescanned for epochs.
            self.leader_epoch_cache.sync()?;
            self.active.append_final_time_index_entry()?;
            let sealed_bytes = self.active.size_bytes();
            let new_segment =
                LogSegment::create_after_unsynced(&self.dir, base_offset, sealed_bytes, &self.file_cache, now_ms)?;
            let previous = std::mem::replace(&mut self.active, new_segment);
            self.inactive.push_back(previous);
            self.deferred_seals += 1;
        }
        tracing::info!(partition = %self.name(), base_offset, "rolled new log segment");
        Ok(())
    }

    pub(super) fn maybe_flush_after(&mut self, records: i64, now_ms: i64) -> Result<(), LogError> {
        self.unflushed_records = self.unflushed_records.saturating_add(records.max(0) as u64);
        if self.unflushed_records >= self.config.flush_interval_messages {
            self.last_flush_ms = now_ms;
            return self.flush();
        }
        self.maybe_flush(now_ms)
    }
}

/// Patches each batch in place: consecutive offsets from `first_offset`, the leader epoch if
/// given, LogAppendTime if `log_append_time_ms` is set. Only LogAppendTime rewrites the CRC.
/// Returns the offset after the last batch.
pub(super) fn stamp_batches(
    records: &mut [u8],
    first_offset: i64,
    leader_epoch: Option<i32>,
    log_append_time_ms: i64,
) -> Result<i64, BatchError> {
    let mut next_offset = first_offset;
    let mut rest = records;
    while !rest.is_empty() {
        let header = BatchHeader::parse(rest)?;
        let len = header.total_len().min(rest.len());
        let (batch, tail) = rest.split_at_mut(len);
        batch::set_base_offset(batch, next_offset)?;
        if let Some(epoch) = leader_epoch {
            batch::set_partition_leader_epoch(batch, epoch)?;
        }
        if log_append_time_ms != NO_TIMESTAMP {
            batch::set_log_append_time(batch, log_append_time_ms)?;
        }
        next_offset += header.offset_count();
        rest = tail;
    }
    Ok(next_offset)
}

/// `(partitionLeaderEpoch, baseOffset)` of each batch, for the epoch cache.
pub(super) fn stored_epochs(records: &[u8]) -> impl Iterator<Item = (i32, i64)> + '_ {
    BatchIter::new(records).map(|(header, _)| (header.partition_leader_epoch, header.base_offset))
}

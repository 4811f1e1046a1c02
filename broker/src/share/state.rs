//! A share-partition's durable state (KIP-932's `ShareSnapshot`): the share-partition start
//! offset and the in-flight ranges whose state must survive the leader, that is those done
//! with (Acknowledged, Archived) and those delivered at least once (their delivery count).
//! The leader writes it to the group's coordinator after every acknowledgement and answers
//! the member only once it is stored; a new leader reads it back, so no acknowledgement is
//! lost and only records that were in flight are delivered again.
//!
//! The state epoch fences a leader whose state was replaced behind its back: an admin reset
//! (AlterShareGroupOffsets) stores the new start offset at the next epoch, and a write at an
//! older epoch is refused with FENCED_STATE_EPOCH, after which the leader reads the state
//! afresh.

/// Kafka's `RecordState` ids as `WriteShareGroupState` carries them.
pub const DELIVERY_AVAILABLE: i8 = 0;
pub const DELIVERY_ACKNOWLEDGED: i8 = 2;
pub const DELIVERY_ARCHIVED: i8 = 4;

/// One stored range: offsets `first_offset..=last_offset`, all in one state, delivered
/// `delivery_count` times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateBatch {
    pub first_offset: i64,
    pub last_offset: i64,
    pub delivery_state: i8,
    pub delivery_count: i16,
}

/// What the group coordinator keeps for one share-partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareState {
    pub state_epoch: i32,
    /// The partition's leader epoch when the leader wrote it (-1 for an admin's reset).
    pub leader_epoch: i32,
    pub start_offset: i64,
    /// Ranges in offset order, not overlapping, none below `start_offset`.
    pub batches: Vec<StateBatch>,
}

impl ShareState {
    /// Records from the start offset up to `high_watermark` not yet done with (KIP-1226's
    /// lag): those stored as Acknowledged or Archived are done.
    pub fn lag(&self, high_watermark: i64) -> i64 {
        let done: i64 = self
            .batches
            .iter()
            .filter(|b| matches!(b.delivery_state, DELIVERY_ACKNOWLEDGED | DELIVERY_ARCHIVED))
            .map(|b| {
                let last = b.last_offset.min(high_watermark - 1);
                let first = b.first_offset.max(self.start_offset);
                (last - first + 1).max(0)
            })
            .sum();
        (high_watermark - self.start_offset - done).max(0)
    }

    /// Why this state cannot be taken (from the wire or the disk), if so: ranges out of order
    /// or overlapping, below the start offset, more than `max_batches`, or an unknown state.
    pub fn problem(&self, max_batches: usize) -> Option<String> {
        if self.start_offset < 0 {
            return Some(format!("the start offset {} is negative", self.start_offset));
        }
        if self.batches.len() > max_batches {
            return Some(format!(
                "{} state batches is more than the {max_batches} a share-partition can have in flight",
                self.batches.len()
            ));
        }
        let mut next = self.start_offset;
        for b in &self.batches {
            if b.first_offset < next || b.last_offset < b.first_offset {
                return Some(format!(
                    "state batch {}-{} overlaps the one before or starts before the start offset {}",
                    b.first_offset, b.last_offset, self.start_offset
                ));
            }
            if !matches!(
                b.delivery_state,
                DELIVERY_AVAILABLE | DELIVERY_ACKNOWLEDGED | DELIVERY_ARCHIVED
            ) {
                return Some(format!("delivery state {} is not one Sluice stores", b.delivery_state));
            }
            if b.delivery_count < 0 {
                return Some(format!("delivery count {} is negative", b.delivery_count));
            }
            next = b.last_offset.saturating_add(1);
        }
        None
    }
}

/// Conversions between [`StateBatch`] and the wire's state batches of ReadShareGroupState and
/// WriteShareGroupState, which carry the same four fields.
macro_rules! wire_state_batch {
    ($($wire:path),*) => {$(
        impl From<&$wire> for StateBatch {
            fn from(b: &$wire) -> StateBatch {
                StateBatch {
                    first_offset: b.first_offset,
                    last_offset: b.last_offset,
                    delivery_state: b.delivery_state,
                    delivery_count: b.delivery_count,
                }
            }
        }

        impl From<&StateBatch> for $wire {
            fn from(b: &StateBatch) -> $wire {
                <$wire>::default()
                    .with_first_offset(b.first_offset)
                    .with_last_offset(b.last_offset)
                    .with_delivery_state(b.delivery_state)
                    .with_delivery_count(b.delivery_count)
            }
        }
    )*};
}

wire_state_batch!(
    kafka_protocol::messages::read_share_group_state_response::StateBatch,
    kafka_protocol::messages::write_share_group_state_request::StateBatch
);

//! One share-partition (KIP-932): what a share group knows about one topic partition, kept by
//! the partition's leader. Records from the share-partition start offset (SPSO) up to the
//! share-partition end offset (SPEO) are *in flight*: each is Available (to be handed out),
//! Acquired by one member until its acquisition lock runs out, Acknowledged, or Archived
//! (rejected, a gap, a transaction marker, or delivered `delivery.count.limit` times). Below the
//! SPSO everything is done; from the SPEO on nothing has been handed out yet.
//!
//! The state is a map of offset *ranges* tiling [SPSO, SPEO) exactly, as Kafka's in-flight
//! batches: a fetch of whole batches takes one range per batch, and only an acknowledgement
//! that treats a batch's records differently splits it (or a fetch in the `record_limit` acquire
//! mode, KIP-1206, which never hands out more than asked). A renewal (KIP-1222) leaves records
//! with their member and starts their lock over. The number of in-flight records, and
//! so of ranges, is capped by `max_record_locks` (`group.share.partition.max.record.locks`).
//!
//! Everything here is synchronous and takes the time as an argument, so the transitions are
//! unit-tested on a fake clock (`tests`).

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::error::ResponseError;

use super::state::{ShareState, StateBatch, DELIVERY_ACKNOWLEDGED, DELIVERY_ARCHIVED, DELIVERY_AVAILABLE};
use crate::invariant;

/// Where a record is in its delivery to the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordState {
    Available,
    Acquired,
    Acknowledged,
    Archived,
}

/// What a member says about records it acquired (ShareFetch/ShareAcknowledge
/// `AcknowledgeTypes`, Kafka's `AcknowledgeType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acknowledgement {
    /// An offset with no record (compacted away, a transaction marker): done with.
    Gap,
    Accept,
    /// Hand it out again (to anyone), unless it reached the delivery count limit.
    Release,
    /// Never again: archived.
    Reject,
    /// Still working on it: the member keeps the records and their lock starts over
    /// (KIP-1222, ShareFetch/ShareAcknowledge v2 with `IsRenewAck`).
    Renew,
}

/// The wire value of [`Acknowledgement::Renew`].
pub const RENEW: i8 = 4;

impl Acknowledgement {
    /// The wire value's meaning; `None` for a value Kafka does not define.
    pub fn from_wire(value: i8) -> Option<Acknowledgement> {
        match value {
            0 => Some(Acknowledgement::Gap),
            1 => Some(Acknowledgement::Accept),
            2 => Some(Acknowledgement::Release),
            3 => Some(Acknowledgement::Reject),
            RENEW => Some(Acknowledgement::Renew),
            _ => None,
        }
    }
}

/// The share group's limits on one partition, from the broker's (or the group's) settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareLimits {
    /// How long an acquired record stays with its member unacknowledged
    /// (`group.share.record.lock.duration.ms`).
    pub record_lock_duration_ms: i64,
    /// Deliveries after which a record released or timed out is archived instead
    /// (`group.share.delivery.count.limit`).
    pub delivery_count_limit: u16,
    /// In-flight records at most (`group.share.partition.max.record.locks`): no new record is
    /// acquired while SPEO - SPSO is this many.
    pub max_record_locks: i64,
}

/// Records handed to a member by one acquisition: ShareFetch's `AcquiredRecords`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acquired {
    pub first_offset: i64,
    pub last_offset: i64,
    pub delivery_count: u16,
}

/// One stored batch as the log returned it: the offsets it spans and whether it is never to be
/// delivered to a member (a transaction marker, or with `share.isolation.level=read_committed`
/// a batch of an aborted transaction): such offsets are archived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchSpan {
    pub first_offset: i64,
    pub last_offset: i64,
    pub is_control: bool,
}

/// A refused acknowledgement: the Kafka error the member is answered with and why.
pub type AckError = (ResponseError, String);

#[derive(Debug, Clone, PartialEq, Eq)]
struct InFlight {
    last_offset: i64,
    state: RecordState,
    delivery_count: u16,
    /// The member holding the records while Acquired.
    owner: Option<Arc<str>>,
    /// When an Acquired range's lock runs out (ms).
    lock_deadline_ms: i64,
}

impl InFlight {
    fn done(&self) -> bool {
        matches!(self.state, RecordState::Acknowledged | RecordState::Archived)
    }
}

#[derive(Debug)]
pub struct SharePartition {
    start_offset: i64,
    end_offset: i64,
    /// Ranges by first offset, tiling [start_offset, end_offset) exactly.
    in_flight: BTreeMap<i64, InFlight>,
    limits: ShareLimits,
}

impl SharePartition {
    /// A share-partition whose first record to deliver is at `start_offset` (from
    /// `share.auto.offset.reset`, or an offset an admin reset it to).
    pub fn new(start_offset: i64, limits: ShareLimits) -> SharePartition {
        SharePartition {
            start_offset,
            end_offset: start_offset,
            in_flight: BTreeMap::new(),
            limits,
        }
    }

    pub fn start_offset(&self) -> i64 {
        self.start_offset
    }

    pub fn end_offset(&self) -> i64 {
        self.end_offset
    }

    pub fn limits(&self) -> ShareLimits {
        self.limits
    }

    /// Where the next read of the log starts: the first Available record, else the SPEO.
    pub fn next_fetch_offset(&self) -> i64 {
        self.in_flight
            .iter()
            .find(|(_, r)| r.state == RecordState::Available)
            .map_or(self.end_offset, |(first, _)| *first)
    }

    /// Whether an acquisition could hand anything out: a record Available again, or room for
    /// new records below the in-flight cap.
    pub fn can_acquire(&self) -> bool {
        self.end_offset - self.start_offset < self.limits.max_record_locks
            || self.in_flight.values().any(|r| r.state == RecordState::Available)
    }

    /// The earliest acquisition lock deadline, if any record is Acquired: a fetch waiting for
    /// records wakes then, as a lapsed lock makes records Available again.
    pub fn next_lock_deadline_ms(&self) -> Option<i64> {
        self.in_flight
            .values()
            .filter(|r| r.state == RecordState::Acquired)
            .map(|r| r.lock_deadline_ms)
            .min()
    }

    /// Records in flight by state (Available, Acquired, Acknowledged, Archived): what the tests
    /// check the transitions by.
    #[cfg(test)]
    pub fn counts(&self) -> [i64; 4] {
        let mut counts = [0; 4];
        for (first, r) in &self.in_flight {
            let slot = match r.state {
                RecordState::Available => 0,
                RecordState::Acquired => 1,
                RecordState::Acknowledged => 2,
                RecordState::Archived => 3,
            };
            counts[slot] += r.last_offset - first + 1;
        }
        counts
    }

    /// Hands `member` up to about `max_records` records of `batches` (in log order, as read from
    /// `next_fetch_offset`): first those Available again, then new records, a new batch whole
    /// (ShareFetch's default `batch_optimized` acquire mode). Control batches and offsets
    /// skipped between batches are archived on the way.
    pub fn acquire(
        &mut self,
        member: &Arc<str>,
        batches: &[BatchSpan],
        max_records: usize,
        now_ms: i64,
    ) -> Vec<Acquired> {
        self.acquire_in(member, batches, max_records, false, now_ms)
    }

    /// [`SharePartition::acquire`] with never more than `max_records` records, a new batch
    /// split if need be (ShareFetch v2's `record_limit` acquire mode, KIP-1206).
    pub fn acquire_record_limit(
        &mut self,
        member: &Arc<str>,
        batches: &[BatchSpan],
        max_records: usize,
        now_ms: i64,
    ) -> Vec<Acquired> {
        self.acquire_in(member, batches, max_records, true, now_ms)
    }

    fn acquire_in(
        &mut self,
        member: &Arc<str>,
        batches: &[BatchSpan],
        max_records: usize,
        record_limit: bool,
        now_ms: i64,
    ) -> Vec<Acquired> {
        self.expire_locks(now_ms);
        let deadline_ms = now_ms.saturating_add(self.limits.record_lock_duration_ms);
        let mut acquired = Vec::new();
        let mut count = 0usize;
        let mut next = self.next_fetch_offset();
        for batch in batches {
            if count >= max_records {
                break;
            }
            // Offsets in flight that no batch holds (a state restored by a new leader covers
            // the log's offsets, not its batches): no member can get them.
            if batch.first_offset > next {
                self.archive_available(next, batch.first_offset - 1);
            }
            next = next.max(batch.last_offset.saturating_add(1));
            let first = batch.first_offset.max(self.start_offset);
            if batch.last_offset < first {
                continue;
            }
            if batch.is_control && first < self.end_offset {
                self.archive_available(first, batch.last_offset);
            }
            // Records in flight already: those Available are handed out again.
            if first < self.end_offset && !batch.is_control {
                let last = batch.last_offset.min(self.end_offset - 1);
                count += self.acquire_available(member, first, last, max_records - count, deadline_ms, &mut acquired);
            }
            // Records never handed out: the batch from the SPEO on.
            if batch.last_offset >= self.end_offset && count < max_records {
                if first > self.end_offset {
                    // Offsets no batch holds (compacted, or below a moved log start).
                    self.push(first - 1, RecordState::Archived, 0, None, 0);
                }
                if batch.is_control {
                    self.push(batch.last_offset, RecordState::Archived, 0, None, 0);
                } else if self.end_offset - self.start_offset < self.limits.max_record_locks {
                    let from = self.end_offset;
                    let mut last = batch.last_offset;
                    if record_limit {
                        let room = i64::try_from(max_records - count).unwrap_or(i64::MAX);
                        last = last.min(from.saturating_add(room - 1));
                    }
                    self.push(last, RecordState::Acquired, 1, Some(member.clone()), deadline_ms);
                    acquired.push(Acquired {
                        first_offset: from,
                        last_offset: last,
                        delivery_count: 1,
                    });
                    count += usize::try_from(last - from + 1).unwrap_or(usize::MAX);
                } else {
                    break;
                }
            }
        }
        self.advance_start();
        self.check();
        acquired
    }

    /// Archives the Available records in [first, last] that are in flight.
    fn archive_available(&mut self, first: i64, last: i64) {
        let last = last.min(self.end_offset - 1);
        let first = first.max(self.start_offset);
        if last < first {
            return;
        }
        self.split_at(first);
        self.split_at(last + 1);
        for (_, range) in self.in_flight.range_mut(first..=last) {
            if range.state == RecordState::Available {
                range.state = RecordState::Archived;
            }
        }
    }

    /// Takes the Available records in [first, last] for `member`, at most `budget` of them.
    fn acquire_available(
        &mut self,
        member: &Arc<str>,
        first: i64,
        last: i64,
        budget: usize,
        deadline_ms: i64,
        acquired: &mut Vec<Acquired>,
    ) -> usize {
        let candidates: Vec<(i64, i64)> = self
            .in_flight
            .range(..=last)
            .filter(|(f, r)| r.last_offset >= first && r.state == RecordState::Available && **f <= last)
            .map(|(f, r)| ((*f).max(first), r.last_offset.min(last)))
            .collect();
        let mut taken = 0usize;
        for (from, to) in candidates {
            let room = i64::try_from(budget - taken).unwrap_or(i64::MAX);
            if room == 0 {
                break;
            }
            let to = to.min(from + room - 1);
            self.split_at(from);
            self.split_at(to + 1);
            let range = self.in_flight.get_mut(&from).expect("split at from");
            range.state = RecordState::Acquired;
            range.delivery_count = range.delivery_count.saturating_add(1);
            range.owner = Some(member.clone());
            range.lock_deadline_ms = deadline_ms;
            acquired.push(Acquired {
                first_offset: from,
                last_offset: to,
                delivery_count: range.delivery_count,
            });
            taken += usize::try_from(to - from + 1).unwrap_or(usize::MAX);
        }
        taken
    }

    /// Applies `member`'s acknowledgement of [first, last]: one type for all, or one per offset.
    /// Every offset must be Acquired by `member` (its lock not run out), else nothing changes
    /// and the answer is INVALID_RECORD_STATE, as Kafka.
    pub fn acknowledge(
        &mut self,
        member: &str,
        first: i64,
        last: i64,
        types: &[i8],
        now_ms: i64,
    ) -> Result<(), AckError> {
        let span = last
            .checked_sub(first)
            .and_then(|d| d.checked_add(1))
            .filter(|n| *n > 0);
        let Some(span) = span else {
            return Err((
                ResponseError::InvalidRequest,
                format!("The acknowledgement batch {first}-{last} ends before it starts."),
            ));
        };
        let kinds: Vec<Acknowledgement> = match types.iter().map(|t| Acknowledgement::from_wire(*t)).collect() {
            Some(kinds) => kinds,
            None => {
                return Err((
                    ResponseError::InvalidRequest,
                    format!("Acknowledge types must be 0 (gap) to 4 (renew); got {types:?}."),
                ))
            }
        };
        if !(kinds.len() == 1 || i64::try_from(kinds.len()) == Ok(span)) {
            return Err((
                ResponseError::InvalidRequest,
                format!(
                    "An acknowledgement of offsets {first}-{last} needs one type or {span}; it had {}.",
                    kinds.len()
                ),
            ));
        }
        self.expire_locks(now_ms);
        if first < self.start_offset || last >= self.end_offset || !self.held_by(member, first, last) {
            return Err((
                ResponseError::InvalidRecordState,
                format!(
                    "Records {first}-{last} are not all held by this member; their acquisition lock may have run out."
                ),
            ));
        }
        let renewed_until = now_ms.saturating_add(self.limits.record_lock_duration_ms);
        if kinds.len() == 1 {
            self.settle(first, last, kinds[0], renewed_until);
        } else {
            // Runs of one type, so a batch acknowledged alike stays one range.
            let mut run_start = 0usize;
            for i in 1..=kinds.len() {
                if i == kinds.len() || kinds[i] != kinds[run_start] {
                    let (from, to) = (first + run_start as i64, first + i as i64 - 1);
                    self.settle(from, to, kinds[run_start], renewed_until);
                    run_start = i;
                }
            }
        }
        self.advance_start();
        self.check();
        Ok(())
    }

    /// Whether every offset in [first, last] is Acquired by `member`.
    fn held_by(&self, member: &str, first: i64, last: i64) -> bool {
        let mut next = first;
        for (f, r) in self.in_flight.range(..=last) {
            if r.last_offset < first {
                continue;
            }
            if *f > next || r.state != RecordState::Acquired || r.owner.as_deref() != Some(member) {
                return false;
            }
            next = r.last_offset + 1;
        }
        next > last
    }

    /// Applies one acknowledgement type to [first, last]; a renewal's lock runs to
    /// `renewed_until`.
    fn settle(&mut self, first: i64, last: i64, kind: Acknowledgement, renewed_until: i64) {
        self.split_at(first);
        self.split_at(last + 1);
        let limit = self.limits.delivery_count_limit;
        for (_, range) in self.in_flight.range_mut(first..=last) {
            if kind == Acknowledgement::Renew {
                range.lock_deadline_ms = renewed_until;
                continue;
            }
            range.state = match kind {
                Acknowledgement::Accept => RecordState::Acknowledged,
                Acknowledgement::Gap | Acknowledgement::Reject => RecordState::Archived,
                Acknowledgement::Release if range.delivery_count >= limit => RecordState::Archived,
                Acknowledgement::Release => RecordState::Available,
                Acknowledgement::Renew => RecordState::Acquired,
            };
            range.owner = None;
        }
    }

    /// Makes the records whose lock ran out by `now_ms` Available again (or Archived at the
    /// delivery count limit). Returns how many records were released.
    pub fn expire_locks(&mut self, now_ms: i64) -> i64 {
        let limit = self.limits.delivery_count_limit;
        let mut released = 0;
        for (first, range) in self.in_flight.iter_mut() {
            if range.state == RecordState::Acquired && range.lock_deadline_ms <= now_ms {
                release(range, limit);
                released += range.last_offset - first + 1;
            }
        }
        if released > 0 {
            self.advance_start();
        }
        released
    }

    /// Releases every record `member` holds: it left the group or closed its share session.
    pub fn release_member(&mut self, member: &str) -> i64 {
        let limit = self.limits.delivery_count_limit;
        let mut released = 0;
        for (first, range) in self.in_flight.iter_mut() {
            if range.state == RecordState::Acquired && range.owner.as_deref() == Some(member) {
                release(range, limit);
                released += range.last_offset - first + 1;
            }
        }
        if released > 0 {
            self.advance_start();
        }
        released
    }

    /// The log's start moved past records in flight (retention, DeleteRecords): they are gone,
    /// whatever their state.
    pub fn log_start_moved(&mut self, log_start_offset: i64) {
        if log_start_offset <= self.start_offset {
            return;
        }
        self.split_at(log_start_offset);
        self.in_flight = self.in_flight.split_off(&log_start_offset);
        self.start_offset = log_start_offset;
        self.end_offset = self.end_offset.max(log_start_offset);
        self.check();
    }

    /// Moves the start to `offset` (kafka-share-groups --reset-offsets), forgetting everything in
    /// flight: refused while a member holds records.
    pub fn reset(&mut self, offset: i64) -> Result<(), AckError> {
        if self.in_flight.values().any(|r| r.state == RecordState::Acquired) {
            return Err((
                ResponseError::NonEmptyGroup,
                "Records of this share-partition are still acquired by a member; stop the group's consumers first."
                    .into(),
            ));
        }
        self.in_flight.clear();
        self.start_offset = offset;
        self.end_offset = offset;
        Ok(())
    }

    /// The state to store (`state.rs`): the SPSO, and the ranges done with or delivered at
    /// least once. An Acquired range is stored as Available with its delivery count: should
    /// this leader go, the records go to a member again, counted.
    pub fn snapshot(&self) -> (i64, Vec<StateBatch>) {
        let batches = self
            .in_flight
            .iter()
            .filter(|(_, r)| r.done() || r.delivery_count > 0)
            .map(|(first, r)| StateBatch {
                first_offset: *first,
                last_offset: r.last_offset,
                delivery_state: match r.state {
                    RecordState::Acknowledged => DELIVERY_ACKNOWLEDGED,
                    RecordState::Archived => DELIVERY_ARCHIVED,
                    RecordState::Available | RecordState::Acquired => DELIVERY_AVAILABLE,
                },
                delivery_count: i16::try_from(r.delivery_count).unwrap_or(i16::MAX),
            })
            .collect();
        (self.start_offset, batches)
    }

    /// The share-partition a stored state describes (checked with [`ShareState::problem`]
    /// first): its ranges in flight again, nothing Acquired, the offsets between them
    /// Available and never delivered.
    pub fn restore(state: &ShareState, limits: ShareLimits) -> SharePartition {
        let mut sp = SharePartition::new(state.start_offset, limits);
        for b in &state.batches {
            if b.last_offset < sp.end_offset {
                continue;
            }
            if b.first_offset > sp.end_offset {
                sp.push(b.first_offset - 1, RecordState::Available, 0, None, 0);
            }
            let (state, count) = match b.delivery_state {
                DELIVERY_ACKNOWLEDGED => (RecordState::Acknowledged, b.delivery_count),
                DELIVERY_ARCHIVED => (RecordState::Archived, b.delivery_count),
                _ => (RecordState::Available, b.delivery_count),
            };
            let count = u16::try_from(count.max(0)).unwrap_or(0);
            let mut range_state = state;
            if range_state == RecordState::Available && count >= limits.delivery_count_limit {
                range_state = RecordState::Archived;
            }
            sp.push(b.last_offset, range_state, count, None, 0);
        }
        sp.advance_start();
        sp.check();
        sp
    }

    /// Appends a range from the SPEO through `last_offset`.
    fn push(
        &mut self,
        last_offset: i64,
        state: RecordState,
        delivery_count: u16,
        owner: Option<Arc<str>>,
        deadline_ms: i64,
    ) {
        self.in_flight.insert(
            self.end_offset,
            InFlight {
                last_offset,
                state,
                delivery_count,
                owner,
                lock_deadline_ms: deadline_ms,
            },
        );
        self.end_offset = last_offset + 1;
    }

    /// Makes `offset` the first offset of a range, if a range holds it past its first.
    fn split_at(&mut self, offset: i64) {
        let Some((&first, range)) = self.in_flight.range_mut(..offset).next_back() else {
            return;
        };
        if range.last_offset < offset {
            return;
        }
        let mut tail = range.clone();
        range.last_offset = offset - 1;
        tail.last_offset = tail.last_offset.max(offset);
        debug_assert!(first < offset);
        self.in_flight.insert(offset, tail);
    }

    /// Drops the done ranges at the front: the SPSO moves past them.
    fn advance_start(&mut self) {
        while let Some(entry) = self.in_flight.first_entry() {
            if !entry.get().done() {
                break;
            }
            let (_, range) = entry.remove_entry();
            self.start_offset = range.last_offset + 1;
        }
        if self.in_flight.is_empty() {
            self.start_offset = self.end_offset;
        }
    }

    /// The ranges tile [start, end) with no gap or overlap and only Acquired ranges have an
    /// owner; a violation is a bug here (`invariant::broken`), never bad input.
    fn check(&self) {
        if let Some(what) = self.violation() {
            let what = format!("share-partition {}-{}: {what}", self.start_offset, self.end_offset);
            if cfg!(test) {
                panic!("{what}");
            }
            invariant::broken(what);
        }
    }

    fn violation(&self) -> Option<String> {
        let mut next = self.start_offset;
        for (first, range) in &self.in_flight {
            if *first != next || range.last_offset < *first {
                return Some(format!("range {first}-{} does not follow {next}", range.last_offset));
            }
            if range.owner.is_some() != (range.state == RecordState::Acquired) {
                return Some(format!(
                    "range {first}-{} is {:?} with owner {:?}",
                    range.last_offset, range.state, range.owner
                ));
            }
            next = range.last_offset + 1;
        }
        (next != self.end_offset).then(|| format!("the ranges end at {next}, not at the SPEO"))
    }
}

fn release(range: &mut InFlight, delivery_count_limit: u16) {
    range.state = if range.delivery_count >= delivery_count_limit {
        RecordState::Archived
    } else {
        RecordState::Available
    };
    range.owner = None;
}

#[cfg(test)]
#[path = "tests/partition.rs"]
mod tests;

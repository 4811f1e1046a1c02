//! Idempotent and transactional producer state of one partition (Kafka's
//! `ProducerStateManager`): per producer id, its epoch and the last few batches' sequence
//! ranges and offsets, so a retried batch is recognised and answered with its original offset
//! instead of being appended twice; and its open transaction (KIP-98), so the partition knows
//! its first unstable offset (where `read_committed` consumers must stop) and, when a marker
//! ends a transaction, which offsets it spanned (an abort goes into the aborted-transaction
//! index that Fetch hands to `read_committed` consumers).
//!
//! Only batch headers are read (producer id, epoch, base sequence, last offset delta), plus
//! the one record of a marker: no data record is decoded. Kept in memory and rebuilt from the
//! log tail when a partition opens.
//!
//! A transaction opens with the producer's first transactional data batch while none is open
//! (base sequence -1 included: TxnOffsetCommit's batches to `__consumer_offsets` carry no
//! sequence but belong to the transaction all the same) and closes with its marker.
//!
//! KIP-890 part 1: a producer's first transactional batch on a partition is appended only once
//! its coordinator has said the partition is in its open transaction, so a late write (a
//! retry that arrives after the transaction's marker) cannot open a transaction the
//! coordinator knows nothing of, one that would hold the last stable offset forever. The
//! leader takes a [`VerificationGuard`] before it asks and presents it with the append; any
//! transactional append or marker of that producer in between drops the guard, so an answer
//! about a transaction that has since ended (the ABA case) no longer admits the batch.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::LazyLock;

use kafka_protocol::error::ResponseError;
use sluice_protocol::batch::BatchHeader;
use sluice_protocol::control::{ControlType, EndTxnMarker};

pub mod snapshot;
use snapshot::{SnapshotBatch, SnapshotEntry};

/// Batches remembered per producer: the Java client keeps at most 5 in flight per partition.
pub const BATCHES_PER_PRODUCER: usize = 5;
/// Producers remembered per partition before the least recently written is forgotten.
pub const MAX_PRODUCERS_PER_PARTITION: usize = 10_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct BatchMetadata {
    first_seq: i32,
    last_seq: i32,
    base_offset: i64,
    last_offset: i64,
}

/// Verifications in progress remembered per partition before the oldest is dropped (its
/// append is then refused and the producer retries).
pub const MAX_VERIFICATIONS_PER_PARTITION: usize = MAX_PRODUCERS_PER_PARTITION;

/// A verification of a producer's first transactional write here, as the leader started it
/// (Kafka's `VerificationGuard`): unique per partition, so an old answer never matches a new
/// verification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerificationGuard(u64);

/// What a leader append presents for its transactional batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnVerification {
    /// Not checked: the broker's own appends (its coordinators'), and clients' when
    /// `transaction.partition.verification.enable` is off.
    Unchecked,
    /// A producer's batch may open a transaction here only with the guard its coordinator's
    /// answer was for (`None`: no verification was made, so it may only join an open one).
    Checked(Option<VerificationGuard>),
}

/// Kafka's "no coordinator epoch seen yet".
pub const NO_COORDINATOR_EPOCH: i32 = -1;

#[derive(Debug)]
struct ProducerEntry {
    epoch: i16,
    batches: VecDeque<BatchMetadata>,
    last_write: u64,
    /// The max timestamp of the producer's last batch (what DescribeProducers reports).
    last_timestamp: i64,
    /// The epoch of the coordinator that wrote this producer's last marker: a marker from an
    /// older coordinator is fenced (TRANSACTION_COORDINATOR_FENCED).
    coordinator_epoch: i32,
    /// Offset of the first batch of the producer's open transaction, if one is open.
    current_txn_first_offset: Option<i64>,
}

impl Default for ProducerEntry {
    fn default() -> Self {
        ProducerEntry {
            epoch: 0,
            batches: VecDeque::new(),
            last_write: 0,
            last_timestamp: -1,
            coordinator_epoch: NO_COORDINATOR_EPOCH,
            current_txn_first_offset: None,
        }
    }
}

impl ProducerEntry {
    /// A new producer epoch forgets the old epoch's sequences (Kafka's `maybeUpdateProducerEpoch`).
    fn update_epoch(&mut self, epoch: i16) {
        if epoch != self.epoch {
            self.epoch = epoch;
            self.batches.clear();
        }
    }
}

/// One producer as DescribeProducers reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActiveProducer {
    pub producer_id: i64,
    pub epoch: i16,
    /// -1 when the producer wrote only unsequenced (transactional offset commit) batches.
    pub last_sequence: i32,
    pub last_timestamp: i64,
    /// Offset where the producer's open transaction starts, -1 when none is open.
    pub current_txn_start_offset: i64,
    /// The coordinator epoch of the producer's last marker, -1 before any.
    pub coordinator_epoch: i32,
}

/// A transaction a marker ended (Kafka's `CompletedTxn`): the producer, the offset of its
/// first batch and the marker's own offset. An aborted one goes into the aborted-transaction
/// index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompletedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    /// The marker's offset.
    pub last_offset: i64,
    pub aborted: bool,
}

/// What to do with an incoming batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SequenceCheck {
    /// Not idempotent, or the next in sequence: append it.
    Append,
    /// Already appended at this base offset: answer success without appending.
    Duplicate { base_offset: i64 },
}

/// A verification in progress (Kafka's `VerificationStateEntry`): its guard, and the lowest
/// sequence a batch waiting on it carries at the epoch it was asked for. A later batch of the
/// producer may not open the transaction ahead of an earlier one still waiting (a client with
/// several requests in flight retries the earlier one when its verification fails).
#[derive(Debug, Clone, Copy)]
struct Verifying {
    guard: VerificationGuard,
    epoch: i16,
    lowest_sequence: i32,
    /// Transactions v2 (the coordinator adds the partition): the producer's epoch was bumped
    /// by the EndTxn of its previous transaction, whose marker, at this same epoch, may reach
    /// the partition while this verification waits; it does not end this transaction.
    bumped_epoch: bool,
}

#[derive(Debug, Default)]
pub struct ProducerStateManager {
    /// None until an idempotent or transactional producer first writes here: most partitions
    /// never see one, and every hosted replica keeps a manager.
    tables: Option<Box<ProducerTables>>,
    clock: u64,
    next_guard: u64,
}

#[derive(Debug, Default)]
struct ProducerTables {
    producers: HashMap<i64, ProducerEntry>,
    /// Open transactions by first offset → producer id (Kafka's `ongoingTxns`): the first key
    /// is the first unstable offset.
    ongoing: BTreeMap<i64, i64>,
    /// Producers whose first transactional write here is being verified, with their guard.
    verifications: HashMap<i64, Verifying>,
}

/// What a manager without tables reads.
static NO_PRODUCERS: LazyLock<ProducerTables> = LazyLock::new(ProducerTables::default);

/// INVALID_PRODUCER_EPOCH for a batch or marker from an epoch older than the producer's.
fn check_not_older(producer_id: i64, epoch: i16, current: i16) -> Result<(), (ResponseError, String)> {
    if epoch < current {
        return Err((
            ResponseError::InvalidProducerEpoch,
            format!("producer {producer_id} epoch {epoch} is older than the current epoch {current}"),
        ));
    }
    Ok(())
}

/// The sequence after `seq`, wrapping as Kafka's does.
fn next_seq(seq: i32) -> i32 {
    if seq == i32::MAX {
        0
    } else {
        seq + 1
    }
}

fn last_seq(header: &BatchHeader) -> i32 {
    let last = i64::from(header.base_sequence) + i64::from(header.last_offset_delta);
    (last % (i64::from(i32::MAX) + 1)) as i32
}

impl ProducerStateManager {
    fn tables(&self) -> &ProducerTables {
        self.tables.as_deref().unwrap_or(&NO_PRODUCERS)
    }

    /// Checks a batch from the network before it is appended.
    pub fn check(&self, header: &BatchHeader) -> Result<SequenceCheck, (ResponseError, String)> {
        if header.producer_id >= 0 && header.base_sequence < 0 && header.is_transactional() {
            // Unsequenced transactional batches (TxnOffsetCommit) are still fenced by epoch.
            if let Some(entry) = self.tables().producers.get(&header.producer_id) {
                check_not_older(header.producer_id, header.producer_epoch, entry.epoch)?;
            }
            return Ok(SequenceCheck::Append);
        }
        if header.producer_id < 0 || header.base_sequence < 0 {
            return Ok(SequenceCheck::Append);
        }
        let Some(entry) = self.tables().producers.get(&header.producer_id) else {
            // Unknown producer: new, or its state aged out with the log. Accept, as Kafka does.
            return Ok(SequenceCheck::Append);
        };
        check_not_older(header.producer_id, header.producer_epoch, entry.epoch)?;
        if header.producer_epoch > entry.epoch {
            return if header.base_sequence == 0 {
                Ok(SequenceCheck::Append)
            } else {
                Err((
                    ResponseError::OutOfOrderSequenceNumber,
                    format!(
                        "a new epoch of producer {} must start at sequence 0, not {}",
                        header.producer_id, header.base_sequence
                    ),
                ))
            };
        }
        let last = last_seq(header);
        if let Some(dup) = entry
            .batches
            .iter()
            .find(|b| b.first_seq == header.base_sequence && b.last_seq == last)
        {
            return Ok(SequenceCheck::Duplicate {
                base_offset: dup.base_offset,
            });
        }
        match entry.batches.back() {
            Some(prev) if next_seq(prev.last_seq) != header.base_sequence => Err((
                ResponseError::OutOfOrderSequenceNumber,
                format!(
                    "producer {} sent sequence {} after {}; expected {}",
                    header.producer_id,
                    header.base_sequence,
                    prev.last_seq,
                    next_seq(prev.last_seq)
                ),
            )),
            _ => Ok(SequenceCheck::Append),
        }
    }

    /// Whether `producer_id` has a transaction open on this partition at `producer_epoch`
    /// (Kafka's `hasOngoingTransaction`). A transactions v2 producer bumps its
    /// epoch at every EndTxn, so its next transaction's first write may arrive before the
    /// previous one's marker; it must be verified (the coordinator refuses it until the marker
    /// is written), not taken as part of the transaction still open here.
    pub fn has_ongoing_txn(&self, producer_id: i64, producer_epoch: i16) -> bool {
        self.tables()
            .producers
            .get(&producer_id)
            .is_some_and(|e| e.current_txn_first_offset.is_some() && e.epoch == producer_epoch)
    }

    /// Starts (or joins) the verification of `producer_id`'s first transactional write here:
    /// `None` when it has a transaction open (nothing to verify), else the guard the append
    /// must present once the coordinator has answered.
    pub fn start_verification(
        &mut self,
        producer_id: i64,
        producer_epoch: i16,
        sequence: i32,
        bumped_epoch: bool,
    ) -> Option<VerificationGuard> {
        if self.has_ongoing_txn(producer_id, producer_epoch) {
            return None;
        }
        let tables = self.tables.get_or_insert_with(Box::default);
        if let Some(v) = tables.verifications.get_mut(&producer_id) {
            if producer_epoch > v.epoch {
                v.epoch = producer_epoch;
                v.lowest_sequence = sequence;
                v.bumped_epoch = bumped_epoch;
            } else if producer_epoch == v.epoch {
                v.lowest_sequence = v.lowest_sequence.min(sequence);
            }
            return Some(v.guard);
        }
        if tables.verifications.len() >= MAX_VERIFICATIONS_PER_PARTITION {
            if let Some(oldest) = tables
                .verifications
                .iter()
                .min_by_key(|(_, v)| v.guard.0)
                .map(|(id, _)| *id)
            {
                tables.verifications.remove(&oldest);
            }
        }
        self.next_guard += 1;
        let guard = VerificationGuard(self.next_guard);
        tables.verifications.insert(
            producer_id,
            Verifying {
                guard,
                epoch: producer_epoch,
                lowest_sequence: sequence,
                bumped_epoch,
            },
        );
        Some(guard)
    }

    /// Refuses a transactional data batch that would open a transaction here without the
    /// guard of a verification still current (Kafka's `batchMissingRequiredVerification`).
    pub fn check_verified(
        &self,
        header: &BatchHeader,
        verification: TxnVerification,
    ) -> Result<(), (ResponseError, String)> {
        let TxnVerification::Checked(presented) = verification else {
            return Ok(());
        };
        if !header.is_transactional()
            || header.is_control()
            || self.has_ongoing_txn(header.producer_id, header.producer_epoch)
        {
            return Ok(());
        }
        match (presented, self.tables().verifications.get(&header.producer_id)) {
            (Some(presented), Some(current))
                if presented == current.guard
                    && header.producer_epoch == current.epoch
                    && header.base_sequence > current.lowest_sequence =>
            {
                Err((
                    ResponseError::OutOfOrderSequenceNumber,
                    format!(
                        "producer {} sent sequence {} while its batch at sequence {} still waits to open the \
                         transaction here; retry after it",
                        header.producer_id, header.base_sequence, current.lowest_sequence
                    ),
                ))
            }
            (Some(presented), Some(current)) if presented == current.guard => Ok(()),
            _ => Err((
                ResponseError::InvalidTxnState,
                format!(
                    "producer {} has no open transaction on this partition that its coordinator confirmed; \
                     add the partition to the transaction (or retry) before writing to it",
                    header.producer_id
                ),
            )),
        }
    }

    /// Checks a transaction marker before the leader appends it (Kafka's `appendEndTxnMarker`
    /// checks): a marker from an older producer epoch is INVALID_PRODUCER_EPOCH, one from a
    /// coordinator older than the last that wrote a marker for this producer is
    /// TRANSACTION_COORDINATOR_FENCED.
    pub fn check_marker(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        coordinator_epoch: i32,
    ) -> Result<(), (ResponseError, String)> {
        let Some(entry) = self.tables().producers.get(&producer_id) else {
            return Ok(());
        };
        check_not_older(producer_id, producer_epoch, entry.epoch)?;
        if coordinator_epoch < entry.coordinator_epoch {
            return Err((
                ResponseError::TransactionCoordinatorFenced,
                format!(
                    "marker for producer {producer_id} from coordinator epoch {coordinator_epoch}, older than {}",
                    entry.coordinator_epoch
                ),
            ));
        }
        Ok(())
    }

    /// Records an appended batch (`header` as stored, with its assigned base offset). For a
    /// control batch, `control` is its marker type (None for a malformed one, which changes
    /// nothing); a marker closes the producer's open transaction and returns it. The marker's
    /// coordinator epoch is not known here: see [`ProducerStateManager::record_marker`].
    pub fn record(&mut self, header: &BatchHeader, control: Option<ControlType>) -> Option<CompletedTxn> {
        match (header.is_control(), control) {
            (true, Some(kind)) => self.record_end_txn(header, kind, None),
            (true, None) => None,
            (false, _) => {
                self.record_data(header);
                None
            }
        }
    }

    /// [`ProducerStateManager::record`] for a control batch whose marker was read whole: the
    /// coordinator epoch is remembered for fencing and DescribeProducers.
    pub fn record_marker(&mut self, header: &BatchHeader, marker: EndTxnMarker) -> Option<CompletedTxn> {
        self.record_end_txn(header, marker.kind, Some(marker.coordinator_epoch))
    }

    fn record_data(&mut self, header: &BatchHeader) {
        if header.is_transactional() {
            // The transaction is open here now (or this was the coordinator's own write).
            if let Some(tables) = self.tables.as_deref_mut() {
                tables.verifications.remove(&header.producer_id);
            }
        }
        let sequenced = header.base_sequence >= 0;
        if header.producer_id < 0 || !(sequenced || header.is_transactional()) {
            return;
        }
        let entry = self.entry(header.producer_id);
        entry.update_epoch(header.producer_epoch);
        if sequenced {
            if entry.batches.len() == BATCHES_PER_PRODUCER {
                entry.batches.pop_front();
            }
            entry.batches.push_back(BatchMetadata {
                first_seq: header.base_sequence,
                last_seq: last_seq(header),
                base_offset: header.base_offset,
                last_offset: header.last_offset(),
            });
        }
        entry.last_timestamp = header.max_timestamp;
        if header.is_transactional() && entry.current_txn_first_offset.is_none() {
            entry.current_txn_first_offset = Some(header.base_offset);
            self.tables
                .get_or_insert_with(Box::default)
                .ongoing
                .insert(header.base_offset, header.producer_id);
        }
    }

    fn record_end_txn(
        &mut self,
        header: &BatchHeader,
        kind: ControlType,
        coordinator_epoch: Option<i32>,
    ) -> Option<CompletedTxn> {
        if header.producer_id < 0 {
            return None;
        }
        // A verification started before this marker was about the transaction it ends, unless
        // it is a transactions v2 one at the marker's (bumped) epoch: that is the next
        // transaction's, which its coordinator confirms only once this one is complete.
        if let Some(tables) = self.tables.as_deref_mut() {
            if tables
                .verifications
                .get(&header.producer_id)
                .is_some_and(|v| !v.bumped_epoch || v.epoch < header.producer_epoch)
            {
                tables.verifications.remove(&header.producer_id);
            }
        }
        let entry = self.entry(header.producer_id);
        entry.update_epoch(header.producer_epoch);
        if let Some(epoch) = coordinator_epoch {
            entry.coordinator_epoch = entry.coordinator_epoch.max(epoch);
        }
        entry.last_timestamp = header.max_timestamp;
        let first_offset = entry.current_txn_first_offset.take()?;
        self.tables
            .get_or_insert_with(Box::default)
            .ongoing
            .remove(&first_offset);
        Some(CompletedTxn {
            producer_id: header.producer_id,
            first_offset,
            last_offset: header.base_offset,
            aborted: kind == ControlType::Abort,
        })
    }

    /// The producer's entry, created (evicting the least recently written producer without an
    /// open transaction when the partition is full) if new, and marked as just written.
    fn entry(&mut self, producer_id: i64) -> &mut ProducerEntry {
        self.clock += 1;
        let tables = self.tables.get_or_insert_with(Box::default);
        if !tables.producers.contains_key(&producer_id) && tables.producers.len() >= MAX_PRODUCERS_PER_PARTITION {
            tables.evict_oldest();
        }
        let entry = tables.producers.entry(producer_id).or_default();
        entry.last_write = self.clock;
        entry
    }

    /// Kafka's `firstUnstableOffset`: the first offset of the oldest open transaction.
    /// `read_committed` consumers read no further (the last stable offset is the lower of
    /// this and the high watermark).
    pub fn first_unstable_offset(&self) -> Option<i64> {
        self.tables().ongoing.keys().next().copied()
    }

    /// Kafka's `lastStableOffset(completedTxn)` for the aborted-transaction index, called
    /// after `completed` was recorded: the first offset of the oldest transaction still open,
    /// else just past the marker.
    pub fn last_stable_offset_after(&self, completed: &CompletedTxn) -> i64 {
        self.first_unstable_offset().unwrap_or(completed.last_offset + 1)
    }

    /// Every producer as a snapshot stores it (its last batch, and the earlier ones it still
    /// remembers for duplicate detection), by producer id.
    pub fn snapshot_entries(&self) -> Vec<SnapshotEntry> {
        let mut entries: Vec<SnapshotEntry> = self
            .tables()
            .producers
            .iter()
            .map(|(&producer_id, entry)| {
                let last = entry.batches.back();
                SnapshotEntry {
                    producer_id,
                    epoch: entry.epoch,
                    last_sequence: last.map_or(-1, |b| b.last_seq),
                    last_offset: last.map_or(-1, |b| b.last_offset),
                    offset_delta: last.map_or(0, |b| {
                        (b.last_offset - b.base_offset).clamp(0, i64::from(i32::MAX)) as i32
                    }),
                    timestamp: entry.last_timestamp,
                    coordinator_epoch: entry.coordinator_epoch,
                    current_txn_first_offset: entry.current_txn_first_offset.unwrap_or(-1),
                    earlier: entry
                        .batches
                        .iter()
                        .take(entry.batches.len().saturating_sub(1))
                        .map(|b| SnapshotBatch {
                            first_seq: b.first_seq,
                            last_seq: b.last_seq,
                            base_offset: b.base_offset,
                            last_offset: b.last_offset,
                        })
                        .collect(),
                }
            })
            .collect();
        entries.sort_unstable_by_key(|e| e.producer_id);
        entries
    }

    /// Producer state as a snapshot recorded it. Entries beyond [`MAX_PRODUCERS_PER_PARTITION`]
    /// are dropped (those without an open transaction first).
    pub fn from_snapshot(entries: &[SnapshotEntry]) -> ProducerStateManager {
        let mut state = ProducerStateManager::default();
        let (open, idle): (Vec<&SnapshotEntry>, Vec<&SnapshotEntry>) =
            entries.iter().partition(|e| e.current_txn_first_offset >= 0);
        for e in open.into_iter().chain(idle) {
            if state.len() >= MAX_PRODUCERS_PER_PARTITION && e.current_txn_first_offset < 0 {
                break;
            }
            state.restore(e);
        }
        state
    }

    fn restore(&mut self, e: &SnapshotEntry) {
        self.clock += 1;
        let mut batches = VecDeque::new();
        if e.last_sequence >= 0 && e.last_offset >= 0 {
            // Earlier batches are kept only if they come before the last one, as the log had
            // them; anything else in the file is ignored.
            let mut next_offset = i64::MIN;
            for b in &e.earlier[e.earlier.len().saturating_sub(BATCHES_PER_PRODUCER - 1)..] {
                if b.base_offset >= next_offset && b.base_offset <= b.last_offset && b.last_offset < e.last_offset {
                    batches.push_back(BatchMetadata {
                        first_seq: b.first_seq,
                        last_seq: b.last_seq,
                        base_offset: b.base_offset,
                        last_offset: b.last_offset,
                    });
                    next_offset = b.last_offset + 1;
                }
            }
            let delta = e.offset_delta.max(0);
            batches.push_back(BatchMetadata {
                first_seq: e.last_sequence.saturating_sub(delta).max(0),
                last_seq: e.last_sequence,
                base_offset: e.last_offset - i64::from(delta),
                last_offset: e.last_offset,
            });
        }
        let current_txn_first_offset = (e.current_txn_first_offset >= 0).then_some(e.current_txn_first_offset);
        let tables = self.tables.get_or_insert_with(Box::default);
        if let Some(first) = current_txn_first_offset {
            tables.ongoing.insert(first, e.producer_id);
        }
        tables.producers.insert(
            e.producer_id,
            ProducerEntry {
                epoch: e.epoch,
                batches,
                last_write: self.clock,
                last_timestamp: e.timestamp,
                coordinator_epoch: e.coordinator_epoch,
                current_txn_first_offset,
            },
        );
    }

    /// The producers remembered, by producer id: at most [`MAX_PRODUCERS_PER_PARTITION`].
    pub fn active_producers(&self) -> Vec<ActiveProducer> {
        let mut producers: Vec<ActiveProducer> = self
            .tables()
            .producers
            .iter()
            .map(|(&producer_id, entry)| ActiveProducer {
                producer_id,
                epoch: entry.epoch,
                last_sequence: entry.batches.back().map_or(-1, |b| b.last_seq),
                last_timestamp: entry.last_timestamp,
                current_txn_start_offset: entry.current_txn_first_offset.unwrap_or(-1),
                coordinator_epoch: entry.coordinator_epoch,
            })
            .collect();
        producers.sort_unstable_by_key(|p| p.producer_id);
        producers
    }
}

impl ProducerTables {
    /// Forgets the least recently written producer that has no open transaction: forgetting
    /// an open transaction would let the last stable offset pass it. Producers with open
    /// transactions are bounded by the coordinator, which aborts them at their timeout.
    fn evict_oldest(&mut self) {
        if let Some(oldest) = self
            .producers
            .iter()
            .filter(|(_, e)| e.current_txn_first_offset.is_none())
            .min_by_key(|(_, e)| e.last_write)
            .map(|(id, _)| *id)
        {
            self.producers.remove(&oldest);
        }
    }
}

impl ProducerStateManager {
    /// Forgets producers that wrote nothing for `expiration_ms` (by their last batch's
    /// timestamp, as Kafka's `producer.id.expiration.ms`) and have no open transaction; returns
    /// how many. A retry from one of them after this is taken as a new producer's batch.
    pub fn expire(&mut self, now_ms: i64, expiration_ms: i64) -> usize {
        let Some(tables) = self.tables.as_deref_mut() else {
            return 0;
        };
        let before = tables.producers.len();
        tables.producers.retain(|_, e| {
            e.current_txn_first_offset.is_some() || now_ms.saturating_sub(e.last_timestamp) < expiration_ms
        });
        let expired = before - tables.producers.len();
        if tables.producers.is_empty() && tables.ongoing.is_empty() && tables.verifications.is_empty() {
            // The last producer went: the partition is back to costing nothing for them.
            self.tables = None;
        }
        expired
    }

    pub fn len(&self) -> usize {
        self.tables().producers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tables().producers.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(pid: i64, epoch: i16, seq: i32, records: i32, base_offset: i64) -> BatchHeader {
        BatchHeader {
            base_offset,
            batch_length: 0,
            partition_leader_epoch: 0,
            magic: 2,
            crc: 0,
            attributes: 0,
            last_offset_delta: records - 1,
            base_timestamp: 0,
            max_timestamp: 0,
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: seq,
            records_count: records,
        }
    }

    #[test]
    fn in_sequence_batches_append_and_a_retry_is_a_duplicate_with_its_original_offset() {
        let mut state = ProducerStateManager::default();
        assert_eq!(state.check(&batch(7, 0, 0, 10, 0)), Ok(SequenceCheck::Append));
        state.record(&batch(7, 0, 0, 10, 100), None);
        assert_eq!(state.check(&batch(7, 0, 10, 5, 0)), Ok(SequenceCheck::Append));
        state.record(&batch(7, 0, 10, 5, 110), None);
        assert_eq!(
            state.check(&batch(7, 0, 0, 10, 0)),
            Ok(SequenceCheck::Duplicate { base_offset: 100 })
        );
        assert_eq!(
            state.check(&batch(7, 0, 10, 5, 0)),
            Ok(SequenceCheck::Duplicate { base_offset: 110 })
        );
    }

    #[test]
    fn gaps_old_epochs_and_bad_new_epochs_are_refused() {
        let mut state = ProducerStateManager::default();
        state.record(&batch(7, 3, 0, 10, 0), None);
        assert_eq!(
            state.check(&batch(7, 3, 20, 1, 0)).unwrap_err().0,
            ResponseError::OutOfOrderSequenceNumber
        );
        assert_eq!(
            state.check(&batch(7, 2, 10, 1, 0)).unwrap_err().0,
            ResponseError::InvalidProducerEpoch
        );
        assert_eq!(
            state.check(&batch(7, 4, 5, 1, 0)).unwrap_err().0,
            ResponseError::OutOfOrderSequenceNumber
        );
        assert_eq!(state.check(&batch(7, 4, 0, 1, 0)), Ok(SequenceCheck::Append));
    }

    #[test]
    fn active_producers_report_their_epoch_last_sequence_and_last_timestamp() {
        let mut state = ProducerStateManager::default();
        assert!(state.active_producers().is_empty());
        let mut first = batch(9, 1, 0, 4, 0);
        first.max_timestamp = 1_000;
        state.record(&first, None);
        let mut second = batch(9, 1, 4, 3, 4);
        second.max_timestamp = 2_000;
        state.record(&second, None);
        state.record(&batch(-1, -1, -1, 5, 7), None);
        state.record(&batch(3, 0, 0, 1, 12), None);
        let expected = vec![
            ActiveProducer {
                producer_id: 3,
                epoch: 0,
                last_sequence: 0,
                last_timestamp: 0,
                current_txn_start_offset: -1,
                coordinator_epoch: -1,
            },
            ActiveProducer {
                producer_id: 9,
                epoch: 1,
                last_sequence: 6,
                last_timestamp: 2_000,
                current_txn_start_offset: -1,
                coordinator_epoch: -1,
            },
        ];
        assert_eq!(state.active_producers(), expected);
    }

    #[test]
    fn non_idempotent_batches_and_unknown_producers_are_accepted() {
        let state = ProducerStateManager::default();
        assert_eq!(state.check(&batch(-1, -1, -1, 3, 0)), Ok(SequenceCheck::Append));
        assert_eq!(state.check(&batch(9, 0, 42, 3, 0)), Ok(SequenceCheck::Append));
    }

    #[test]
    fn only_the_last_five_batches_are_remembered_and_sequences_wrap() {
        let mut state = ProducerStateManager::default();
        for i in 0..7 {
            state.record(&batch(1, 0, i, 1, i64::from(i)), None);
        }
        assert_eq!(
            state.check(&batch(1, 0, 6, 1, 0)),
            Ok(SequenceCheck::Duplicate { base_offset: 6 })
        );
        assert!(
            state.check(&batch(1, 0, 0, 1, 0)).is_err(),
            "evicted batch is out of order, not a duplicate"
        );
        let mut wrap = ProducerStateManager::default();
        wrap.record(&batch(2, 0, i32::MAX, 1, 0), None);
        assert_eq!(wrap.check(&batch(2, 0, 0, 1, 0)), Ok(SequenceCheck::Append));
    }

    const TXN: i16 = 0x10;
    const CONTROL: i16 = 0x20;

    fn txn_batch(pid: i64, epoch: i16, seq: i32, records: i32, base_offset: i64) -> BatchHeader {
        let mut header = batch(pid, epoch, seq, records, base_offset);
        header.attributes = TXN;
        header
    }

    fn marker(pid: i64, epoch: i16, offset: i64) -> BatchHeader {
        let mut header = batch(pid, epoch, -1, 1, offset);
        header.attributes = TXN | CONTROL;
        header
    }

    fn end(kind: ControlType, coordinator_epoch: i32) -> EndTxnMarker {
        EndTxnMarker {
            kind,
            coordinator_epoch,
        }
    }

    #[test]
    fn a_transaction_begins_at_its_first_batch_and_a_commit_closes_it() {
        let mut state = ProducerStateManager::default();
        state.record(&txn_batch(5, 0, 0, 3, 10), None);
        state.record(&txn_batch(5, 0, 3, 2, 13), None);
        assert_eq!(state.first_unstable_offset(), Some(10));
        assert_eq!(state.active_producers()[0].current_txn_start_offset, 10);
        let done = state.record_marker(&marker(5, 0, 15), end(ControlType::Commit, 4));
        assert_eq!(
            done,
            Some(CompletedTxn {
                producer_id: 5,
                first_offset: 10,
                last_offset: 15,
                aborted: false
            })
        );
        assert_eq!(state.first_unstable_offset(), None);
        let described = state.active_producers()[0];
        assert_eq!(
            (described.current_txn_start_offset, described.coordinator_epoch),
            (-1, 4)
        );
    }

    #[test]
    fn an_abort_reports_the_aborted_range_and_the_next_transaction_starts_afresh() {
        let mut state = ProducerStateManager::default();
        state.record(&txn_batch(5, 0, 0, 1, 0), None);
        let done = state
            .record(&marker(5, 0, 1), Some(ControlType::Abort))
            .expect("closed");
        assert!(done.aborted);
        assert_eq!((done.first_offset, done.last_offset), (0, 1));
        assert_eq!(state.last_stable_offset_after(&done), 2);
        state.record(&txn_batch(5, 0, 1, 1, 2), None);
        assert_eq!(state.first_unstable_offset(), Some(2));
    }

    #[test]
    fn a_first_transactional_write_needs_the_guard_of_a_current_verification() {
        let mut state = ProducerStateManager::default();
        let first = txn_batch(5, 0, 0, 1, 10);
        let unverified = state.check_verified(&first, TxnVerification::Checked(None));
        assert_eq!(unverified.unwrap_err().0, ResponseError::InvalidTxnState);
        // The broker's own appends are not checked.
        assert!(state.check_verified(&first, TxnVerification::Unchecked).is_ok());
        // Plain and idempotent batches need no verification.
        assert!(state
            .check_verified(&batch(5, 0, 0, 1, 10), TxnVerification::Checked(None))
            .is_ok());

        let guard = state.start_verification(5, 0, 0, false).expect("no transaction open");
        assert_eq!(
            state.start_verification(5, 0, 0, false),
            Some(guard),
            "a second request joins the verification"
        );
        assert!(state
            .check_verified(&first, TxnVerification::Checked(Some(guard)))
            .is_ok());
        state.record(&first, None);
        // Open now: later batches need no guard, and no new verification starts.
        assert!(state
            .check_verified(&txn_batch(5, 0, 1, 1, 11), TxnVerification::Checked(None))
            .is_ok());
        assert_eq!(state.start_verification(5, 0, 0, false), None);
    }

    #[test]
    fn a_marker_between_verification_and_append_voids_the_guard() {
        // Kafka's ABA case: verified for transaction 1, which then aborts; the late append
        // must not open a transaction the coordinator does not know.
        let mut state = ProducerStateManager::default();
        state.record(&txn_batch(5, 0, 0, 1, 0), None);
        state.record(&marker(5, 0, 1), Some(ControlType::Abort));
        let stale = state.start_verification(5, 0, 0, false).expect("closed");
        state.record(&marker(5, 0, 2), Some(ControlType::Abort));
        let late = txn_batch(5, 0, 1, 1, 3);
        let refused = state.check_verified(&late, TxnVerification::Checked(Some(stale)));
        assert_eq!(refused.unwrap_err().0, ResponseError::InvalidTxnState);
        let fresh = state.start_verification(5, 0, 1, false).expect("closed");
        assert_ne!(fresh, stale);
        assert!(state
            .check_verified(&late, TxnVerification::Checked(Some(fresh)))
            .is_ok());
    }

    #[test]
    fn verifications_in_progress_are_bounded() {
        let mut state = ProducerStateManager::default();
        let first = state.start_verification(0, 0, 0, false).unwrap();
        for pid in 1..=MAX_VERIFICATIONS_PER_PARTITION as i64 {
            state.start_verification(pid, 0, 0, false).unwrap();
        }
        assert_eq!(state.tables().verifications.len(), MAX_VERIFICATIONS_PER_PARTITION);
        let refused = state.check_verified(&txn_batch(0, 0, 0, 1, 0), TxnVerification::Checked(Some(first)));
        assert!(refused.is_err(), "the oldest verification was dropped");
    }

    #[test]
    fn a_partition_only_plain_producers_write_to_keeps_no_tables_and_the_last_expiry_frees_them() {
        let mut state = ProducerStateManager::default();
        state.record(&batch(-1, -1, -1, 3, 0), None);
        assert!(
            state.tables.is_none(),
            "a non-idempotent batch allocated producer tables"
        );
        assert_eq!(state.expire(i64::MAX, 1), 0);
        assert_eq!(state.check(&batch(-1, -1, -1, 1, 3)), Ok(SequenceCheck::Append));
        state.record(&batch(7, 0, 0, 2, 3), None);
        assert!(state.tables.is_some());
        assert_eq!(
            state.check(&batch(7, 0, 0, 2, 5)),
            Ok(SequenceCheck::Duplicate { base_offset: 3 })
        );
        assert_eq!(state.expire(10_000, 5_000), 1);
        assert!(
            state.tables.is_none(),
            "the last producer expired but its tables stayed"
        );
        assert_eq!(state.check(&batch(7, 0, 9, 1, 5)), Ok(SequenceCheck::Append));
    }

    #[test]
    fn idle_producers_expire_unless_a_transaction_is_open() {
        let mut state = ProducerStateManager::default();
        let mut idle = batch(1, 0, 0, 1, 0);
        idle.max_timestamp = 1_000;
        state.record(&idle, None);
        let mut open = txn_batch(2, 0, 0, 1, 1);
        open.max_timestamp = 1_000;
        state.record(&open, None);
        let mut recent = batch(3, 0, 0, 1, 2);
        recent.max_timestamp = 9_000;
        state.record(&recent, None);
        assert_eq!(state.expire(10_000, 5_000), 1);
        let left: Vec<i64> = state.active_producers().iter().map(|p| p.producer_id).collect();
        assert_eq!(left, vec![2, 3]);
        // Forgotten: its next batch is a new producer's, whatever its sequence.
        assert_eq!(state.check(&batch(1, 0, 7, 1, 3)), Ok(SequenceCheck::Append));
    }

    #[test]
    fn markers_without_an_open_transaction_index_nothing() {
        let mut state = ProducerStateManager::default();
        assert_eq!(state.record(&marker(8, 0, 0), Some(ControlType::Abort)), None);
        assert_eq!(state.record(&marker(8, 0, 1), Some(ControlType::Commit)), None);
        // A malformed control batch (no type) changes nothing either.
        state.record(&txn_batch(8, 0, 0, 1, 2), None);
        assert_eq!(state.record(&marker(8, 0, 3), None), None);
        assert_eq!(state.first_unstable_offset(), Some(2));
    }

    #[test]
    fn unsequenced_transactional_batches_open_a_transaction_too() {
        // TxnOffsetCommit's batches to __consumer_offsets: producer set, base sequence -1.
        let mut state = ProducerStateManager::default();
        state.record(&txn_batch(9, 2, -1, 1, 40), None);
        assert_eq!(state.first_unstable_offset(), Some(40));
        let described = state.active_producers()[0];
        assert_eq!((described.epoch, described.last_sequence), (2, -1));
        assert_eq!(
            state.check(&txn_batch(9, 1, -1, 1, 0)).unwrap_err().0,
            ResponseError::InvalidProducerEpoch
        );
        let done = state
            .record(&marker(9, 2, 41), Some(ControlType::Commit))
            .expect("closed");
        assert_eq!(done.first_offset, 40);
        // A non-transactional unsequenced batch is no producer's.
        state.record(&batch(10, 0, -1, 1, 42), None);
        assert_eq!(state.len(), 1);
    }

    #[test]
    fn markers_are_fenced_by_producer_epoch_and_by_coordinator_epoch() {
        let mut state = ProducerStateManager::default();
        state.record(&txn_batch(5, 3, 0, 1, 0), None);
        state.record_marker(&marker(5, 3, 1), end(ControlType::Commit, 7));
        assert_eq!(
            state.check_marker(5, 2, 7).unwrap_err().0,
            ResponseError::InvalidProducerEpoch
        );
        assert_eq!(
            state.check_marker(5, 3, 6).unwrap_err().0,
            ResponseError::TransactionCoordinatorFenced
        );
        assert_eq!(state.check_marker(5, 3, 7), Ok(()));
        assert_eq!(state.check_marker(5, 4, 8), Ok(()));
        assert_eq!(
            state.check_marker(99, 0, 0),
            Ok(()),
            "an unknown producer is not fenced"
        );
        // A data batch from the old epoch stays fenced too.
        assert_eq!(
            state.check(&txn_batch(5, 2, 1, 1, 0)).unwrap_err().0,
            ResponseError::InvalidProducerEpoch
        );
    }

    #[test]
    fn a_marker_with_a_bumped_epoch_aborts_and_resets_the_sequences() {
        let mut state = ProducerStateManager::default();
        state.record(&txn_batch(5, 0, 0, 2, 0), None);
        let done = state
            .record_marker(&marker(5, 1, 2), end(ControlType::Abort, 0))
            .expect("closed");
        assert!(done.aborted);
        assert_eq!(state.active_producers()[0].epoch, 1);
        assert_eq!(state.check(&txn_batch(5, 1, 0, 1, 0)), Ok(SequenceCheck::Append));
    }

    #[test]
    fn the_first_unstable_offset_follows_the_oldest_open_transaction_of_interleaved_producers() {
        let mut state = ProducerStateManager::default();
        state.record(&txn_batch(1, 0, 0, 1, 0), None);
        state.record(&txn_batch(2, 0, 0, 1, 1), None);
        state.record(&batch(3, 0, 0, 1, 2), None); // idempotent, not transactional
        state.record(&txn_batch(1, 0, 1, 1, 3), None);
        state.record(&txn_batch(3, 0, 1, 1, 4), None);
        assert_eq!(state.first_unstable_offset(), Some(0));
        let first = state
            .record(&marker(1, 0, 5), Some(ControlType::Abort))
            .expect("closed");
        assert_eq!(state.first_unstable_offset(), Some(1));
        assert_eq!(state.last_stable_offset_after(&first), 1);
        state.record(&marker(3, 0, 6), Some(ControlType::Commit));
        assert_eq!(state.first_unstable_offset(), Some(1));
        state.record(&marker(2, 0, 7), Some(ControlType::Commit));
        assert_eq!(state.first_unstable_offset(), None);
    }

    #[test]
    fn producers_with_open_transactions_are_never_evicted() {
        let mut state = ProducerStateManager::default();
        state.record(&txn_batch(0, 0, 0, 1, 0), None);
        for pid in 1..=MAX_PRODUCERS_PER_PARTITION as i64 {
            state.record(&batch(pid, 0, 0, 1, pid), None);
        }
        assert_eq!(state.first_unstable_offset(), Some(0));
        assert_eq!(state.len(), MAX_PRODUCERS_PER_PARTITION);
        assert!(state.active_producers().iter().any(|p| p.producer_id == 0));
    }

    #[test]
    fn a_snapshot_restores_epochs_last_batches_and_open_transactions() {
        let mut state = ProducerStateManager::default();
        state.record(&batch(1, 2, 0, 5, 0), None);
        state.record(&txn_batch(2, 0, 0, 2, 5), None);
        state.record_marker(&marker(3, 1, 7), end(ControlType::Commit, 9));
        let restored = ProducerStateManager::from_snapshot(&state.snapshot_entries());
        assert_eq!(restored.active_producers(), state.active_producers());
        assert_eq!(restored.first_unstable_offset(), Some(5));
        assert_eq!(
            restored.check(&batch(1, 2, 0, 5, 0)),
            Ok(SequenceCheck::Duplicate { base_offset: 0 }),
            "the last batch is still recognised as a retry"
        );
        assert_eq!(restored.check(&batch(1, 2, 5, 1, 0)), Ok(SequenceCheck::Append));
        assert_eq!(
            restored.check_marker(3, 1, 8).unwrap_err().0,
            ResponseError::TransactionCoordinatorFenced
        );
    }

    #[test]
    fn a_snapshot_keeps_the_last_five_batches_so_a_retry_of_any_is_a_duplicate_after_a_restart() {
        let mut state = ProducerStateManager::default();
        for i in 0..7 {
            state.record(&batch(1, 0, i * 2, 2, i64::from(i) * 2), None);
        }
        let restored = ProducerStateManager::from_snapshot(&state.snapshot_entries());
        for i in 2..7 {
            assert_eq!(
                restored.check(&batch(1, 0, i * 2, 2, 0)),
                Ok(SequenceCheck::Duplicate {
                    base_offset: i64::from(i) * 2
                }),
                "batch {i} is one of the last five and its retry a duplicate"
            );
        }
        assert_eq!(
            restored.check(&batch(1, 0, 2, 2, 0)).unwrap_err().0,
            ResponseError::OutOfOrderSequenceNumber,
            "the sixth-last batch is forgotten, as in Kafka"
        );
        assert_eq!(restored.check(&batch(1, 0, 14, 1, 0)), Ok(SequenceCheck::Append));
    }

    #[test]
    fn a_write_at_a_bumped_epoch_is_verified_even_while_the_last_epochs_transaction_is_open() {
        let mut state = ProducerStateManager::default();
        state.record(&txn_batch(5, 0, 0, 1, 0), None);
        assert_eq!(
            state.start_verification(5, 0, 0, false),
            None,
            "open at epoch 0: nothing to verify"
        );
        // Transactions v2: the next transaction (epoch 1) may write before epoch 0's marker.
        let guard = state
            .start_verification(5, 1, 0, false)
            .expect("a new transaction to verify");
        assert!(state
            .check_verified(&txn_batch(5, 1, 0, 1, 1), TxnVerification::Checked(None))
            .is_err());
        assert_eq!(
            state.check_verified(&txn_batch(5, 1, 0, 1, 1), TxnVerification::Checked(Some(guard))),
            Ok(())
        );
    }

    #[test]
    fn a_later_batch_may_not_open_the_transaction_ahead_of_an_earlier_one_still_waiting() {
        let mut state = ProducerStateManager::default();
        let first = state.start_verification(7, 0, 0, false).expect("to verify");
        // The request with sequence 0 is refused (its verification failed); the next one, at
        // sequence 5, joins the same verification and must not be appended first.
        let second = state.start_verification(7, 0, 5, false).expect("to verify");
        assert_eq!(first, second);
        let refused = state
            .check_verified(&txn_batch(7, 0, 5, 1, 0), TxnVerification::Checked(Some(second)))
            .unwrap_err();
        assert_eq!(refused.0, ResponseError::OutOfOrderSequenceNumber);
        assert_eq!(
            state.check_verified(&txn_batch(7, 0, 0, 5, 0), TxnVerification::Checked(Some(second))),
            Ok(())
        );
        // A bumped epoch starts the lowest sequence afresh.
        let bumped = state.start_verification(7, 1, 3, false).unwrap();
        assert_eq!(
            state.check_verified(&txn_batch(7, 1, 3, 1, 0), TxnVerification::Checked(Some(bumped))),
            Ok(())
        );
    }

    #[test]
    fn the_previous_transactions_marker_at_the_bumped_epoch_leaves_a_v2_verification_standing() {
        let mut state = ProducerStateManager::default();
        state.record(&txn_batch(5, 0, 0, 1, 0), None);
        // Transactions v2: EndTxn bumped the epoch to 1; the next transaction's first write is
        // being added while the commit marker (epoch 1) of the previous one is written.
        let guard = state.start_verification(5, 1, 0, true).expect("to add");
        state.record(&marker(5, 1, 1), Some(ControlType::Commit));
        assert_eq!(
            state.check_verified(&txn_batch(5, 1, 0, 1, 2), TxnVerification::Checked(Some(guard))),
            Ok(())
        );
        // Its own marker (epoch 2) would end it.
        state.record(&marker(5, 2, 2), Some(ControlType::Abort));
        assert!(state
            .check_verified(&txn_batch(5, 2, 0, 1, 3), TxnVerification::Checked(Some(guard)))
            .is_err());
    }
}

//! Idempotent-producer state of one partition (Kafka's `ProducerStateManager`): per producer
//! id, its epoch and the last few batches' sequence ranges and offsets, so a retried batch is
//! recognised and answered with its original offset instead of being appended twice.
//!
//! Only batch headers are read (producer id, epoch, base sequence, last offset delta): no
//! record is decoded. Kept in memory and rebuilt from the log tail when a partition opens.

use std::collections::{HashMap, VecDeque};

use kafka_protocol::error::ResponseError;
use sluice_protocol::batch::BatchHeader;

/// Batches remembered per producer: the Java client keeps at most 5 in flight per partition.
pub const BATCHES_PER_PRODUCER: usize = 5;
/// Producers remembered per partition before the least recently written is forgotten.
pub const MAX_PRODUCERS_PER_PARTITION: usize = 10_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct BatchMetadata {
    first_seq: i32,
    last_seq: i32,
    base_offset: i64,
}

#[derive(Debug, Default)]
struct ProducerEntry {
    epoch: i16,
    batches: VecDeque<BatchMetadata>,
    last_write: u64,
    /// The max timestamp of the producer's last batch (what DescribeProducers reports).
    last_timestamp: i64,
}

/// One idempotent producer as DescribeProducers reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActiveProducer {
    pub producer_id: i64,
    pub epoch: i16,
    pub last_sequence: i32,
    pub last_timestamp: i64,
}

/// What to do with an incoming batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SequenceCheck {
    /// Not idempotent, or the next in sequence: append it.
    Append,
    /// Already appended at this base offset: answer success without appending.
    Duplicate { base_offset: i64 },
}

#[derive(Debug, Default)]
pub struct ProducerStateManager {
    producers: HashMap<i64, ProducerEntry>,
    clock: u64,
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
    /// Checks a batch from the network before it is appended.
    pub fn check(&self, header: &BatchHeader) -> Result<SequenceCheck, (ResponseError, String)> {
        if header.producer_id < 0 || header.base_sequence < 0 {
            return Ok(SequenceCheck::Append);
        }
        let Some(entry) = self.producers.get(&header.producer_id) else {
            // Unknown producer: new, or its state aged out with the log. Accept, as Kafka does.
            return Ok(SequenceCheck::Append);
        };
        if header.producer_epoch < entry.epoch {
            return Err((
                ResponseError::InvalidProducerEpoch,
                format!(
                    "producer {} epoch {} is older than the current epoch {}",
                    header.producer_id, header.producer_epoch, entry.epoch
                ),
            ));
        }
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

    /// Records an appended batch (`header` as stored, with its assigned base offset).
    pub fn record(&mut self, header: &BatchHeader) {
        if header.producer_id < 0 || header.base_sequence < 0 {
            return;
        }
        self.clock += 1;
        if !self.producers.contains_key(&header.producer_id) && self.producers.len() >= MAX_PRODUCERS_PER_PARTITION {
            self.evict_oldest();
        }
        let entry = self.producers.entry(header.producer_id).or_default();
        if header.producer_epoch != entry.epoch {
            entry.epoch = header.producer_epoch;
            entry.batches.clear();
        }
        if entry.batches.len() == BATCHES_PER_PRODUCER {
            entry.batches.pop_front();
        }
        entry.batches.push_back(BatchMetadata {
            first_seq: header.base_sequence,
            last_seq: last_seq(header),
            base_offset: header.base_offset,
        });
        entry.last_write = self.clock;
        entry.last_timestamp = header.max_timestamp;
    }

    /// The producers remembered, by producer id: at most [`MAX_PRODUCERS_PER_PARTITION`].
    pub fn active_producers(&self) -> Vec<ActiveProducer> {
        let mut producers: Vec<ActiveProducer> = self
            .producers
            .iter()
            .filter_map(|(&producer_id, entry)| {
                Some(ActiveProducer {
                    producer_id,
                    epoch: entry.epoch,
                    last_sequence: entry.batches.back()?.last_seq,
                    last_timestamp: entry.last_timestamp,
                })
            })
            .collect();
        producers.sort_unstable_by_key(|p| p.producer_id);
        producers
    }

    fn evict_oldest(&mut self) {
        if let Some(oldest) = self
            .producers
            .iter()
            .min_by_key(|(_, e)| e.last_write)
            .map(|(id, _)| *id)
        {
            self.producers.remove(&oldest);
        }
    }

    pub fn len(&self) -> usize {
        self.producers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
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
        state.record(&batch(7, 0, 0, 10, 100));
        assert_eq!(state.check(&batch(7, 0, 10, 5, 0)), Ok(SequenceCheck::Append));
        state.record(&batch(7, 0, 10, 5, 110));
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
        state.record(&batch(7, 3, 0, 10, 0));
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
        state.record(&first);
        let mut second = batch(9, 1, 4, 3, 4);
        second.max_timestamp = 2_000;
        state.record(&second);
        state.record(&batch(-1, -1, -1, 5, 7));
        state.record(&batch(3, 0, 0, 1, 12));
        let expected = vec![
            ActiveProducer {
                producer_id: 3,
                epoch: 0,
                last_sequence: 0,
                last_timestamp: 0,
            },
            ActiveProducer {
                producer_id: 9,
                epoch: 1,
                last_sequence: 6,
                last_timestamp: 2_000,
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
            state.record(&batch(1, 0, i, 1, i64::from(i)));
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
        wrap.record(&batch(2, 0, i32::MAX, 1, 0));
        assert_eq!(wrap.check(&batch(2, 0, 0, 1, 0)), Ok(SequenceCheck::Append));
    }
}

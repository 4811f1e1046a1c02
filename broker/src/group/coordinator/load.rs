//! Replaying a `__consumer_offsets` partition into groups, as Kafka does when it becomes a
//! partition's leader: the latest record per key wins, and records of transactional batches
//! (TxnOffsetCommit, KIP-98) wait under their producer id until that producer's next marker
//! in the log commits or drops them. A transaction still open at the end of the log stays
//! pending in the coordinator until `complete_transaction` ends it.

use std::collections::HashMap;

use super::consumer::StoredConsumerGroup;
use super::group::{CommittedOffset, TopicPartition};
use super::share_state::ShareStates;
use crate::group::records::{GroupRecord, StoredGroup};

/// One entry of a `__consumer_offsets` partition, in log order, as loading hands it over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadedRecord {
    /// The record at log offset `offset`; `producer_id` is set when its batch is
    /// transactional.
    Record {
        offset: i64,
        producer_id: Option<i64>,
        record: GroupRecord,
    },
    /// A transaction marker (a COMMIT or ABORT control batch) of `producer_id`.
    Marker { producer_id: i64, commit: bool },
}

/// Offsets by group.
pub(super) type GroupOffsets = HashMap<String, HashMap<TopicPartition, CommittedOffset>>;

/// What the records replayed so far say.
#[derive(Default)]
pub(super) struct Replay {
    pub(super) groups: HashMap<String, StoredGroup>,
    pub(super) offsets: GroupOffsets,
    /// Open transactions: producer id → their offsets by group.
    pub(super) pending: HashMap<i64, GroupOffsets>,
    /// KIP-848 consumer groups' records by group.
    pub(super) consumer: HashMap<String, StoredConsumerGroup>,
    /// KIP-932 share-partition states (`share_state.rs`).
    pub(super) share_states: ShareStates,
}

impl Replay {
    pub(super) fn apply(&mut self, entry: LoadedRecord) {
        match entry {
            LoadedRecord::Record {
                offset,
                producer_id,
                record,
            } => self.record(offset, producer_id, record),
            LoadedRecord::Marker { producer_id, commit } => {
                let Some(txn) = self.pending.remove(&producer_id) else {
                    return;
                };
                if !commit {
                    return;
                }
                for (group_id, offsets) in txn {
                    let committed = self.offsets.entry(group_id).or_default();
                    for (tp, offset) in offsets {
                        CommittedOffset::keep_latest(committed, tp, offset);
                    }
                }
            }
        }
    }

    fn record(&mut self, offset: i64, producer_id: Option<i64>, record: GroupRecord) {
        match record {
            GroupRecord::Offset {
                group_id,
                topic,
                partition,
                value: Some(value),
            } => {
                let committed = CommittedOffset {
                    value,
                    record_offset: offset,
                };
                let offsets = match producer_id {
                    Some(pid) => self.pending.entry(pid).or_default().entry(group_id).or_default(),
                    None => self.offsets.entry(group_id).or_default(),
                };
                offsets.insert((topic, partition), committed);
            }
            // A tombstone removes the offset and any open transaction's offset for the same
            // partition (Kafka 4.x), whichever batch carries it.
            GroupRecord::Offset {
                group_id,
                topic,
                partition,
                value: None,
            } => {
                let tp = (topic, partition);
                if let Some(offsets) = self.offsets.get_mut(&group_id) {
                    offsets.remove(&tp);
                }
                for txn in self.pending.values_mut() {
                    if let Some(offsets) = txn.get_mut(&group_id) {
                        offsets.remove(&tp);
                    }
                }
            }
            GroupRecord::ShareState {
                group_id,
                topic_id,
                partition,
                value,
            } => {
                let key = (group_id, topic_id, partition);
                match value {
                    Some(state) => super::share_state::keep_newer(&mut self.share_states, key, state),
                    None => {
                        self.share_states.remove(&key);
                    }
                }
            }
            GroupRecord::Consumer(record) => {
                let group_id = record.group_id().to_string();
                let group = self.consumer.entry(group_id.clone()).or_default();
                group.apply(record);
            }
            // Group records are never transactional in meaning; applied as they come.
            GroupRecord::Group { group_id, value } => match value {
                Some(v) => {
                    self.groups.insert(group_id, v);
                }
                None => {
                    self.groups.remove(&group_id);
                }
            },
        }
    }

    /// The open transactions' offsets regrouped by group, then producer id.
    pub(super) fn pending_by_group(
        &mut self,
    ) -> HashMap<String, HashMap<i64, HashMap<TopicPartition, CommittedOffset>>> {
        let mut by_group: HashMap<String, HashMap<i64, HashMap<TopicPartition, CommittedOffset>>> = HashMap::new();
        for (pid, groups) in self.pending.drain() {
            for (group_id, offsets) in groups {
                if !offsets.is_empty() {
                    by_group.entry(group_id).or_default().insert(pid, offsets);
                }
            }
        }
        by_group
    }
}

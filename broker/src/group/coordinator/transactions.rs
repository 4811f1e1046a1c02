//! Transactional offset commits (KIP-98, with KIP-447's member fencing): a TxnOffsetCommit's
//! offsets are appended to `__consumer_offsets` in a transactional batch and held pending
//! under the producer id, invisible to OffsetFetch, until the transaction's marker reaches
//! the same partition: COMMIT makes them committed, ABORT drops them. Split from
//! `offsets.rs` because what is pending, and when it ends, is a concern of its own.

use std::collections::HashSet;

use kafka_protocol::error::ResponseError;

use super::group::CommittedOffset;
use super::{GroupCoordinator, Load};
use crate::group::records::OffsetAndMetadata;

impl GroupCoordinator {
    /// Kafka's checks before a TxnOffsetCommit is written (see `validate_commit_as`).
    /// Returns the group's partition.
    pub fn validate_txn_commit(
        &mut self,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation_id: i32,
        now: i64,
    ) -> Result<i32, ResponseError> {
        self.validate_commit_as(group_id, member_id, instance_id, generation_id, true, now)
    }

    /// A TxnOffsetCommit's batch was appended at `base_offset` (records in `offsets`' order):
    /// its offsets are pending under `producer_id` from now on, whether or not the append is
    /// replicated yet, because that is what a reload of the log would find.
    pub fn txn_offsets_appended(
        &mut self,
        group_id: &str,
        producer_id: i64,
        offsets: Vec<((String, i32), OffsetAndMetadata)>,
        base_offset: i64,
    ) {
        let Some(group) = self.groups.get_mut(group_id) else {
            return;
        };
        let pending = group.pending_txn_offsets.entry(producer_id).or_default();
        for (record_offset, (tp, value)) in (base_offset..).zip(offsets) {
            pending.insert(tp, CommittedOffset { value, record_offset });
        }
    }

    /// A COMMIT (`commit`) or ABORT marker of `producer_id` is in `__consumer_offsets`
    /// partition `partition`: that producer's pending offsets of every group there become
    /// committed (each unless the committed one was appended later) or are dropped. While the
    /// partition loads, the marker waits for the load to finish.
    pub fn complete_transaction(&mut self, partition: i32, producer_id: i64, commit: bool) {
        match self.partitions.get(&partition) {
            Some(Load::Loaded { .. }) => {}
            Some(Load::Loading { .. }) => {
                self.txn_ends_while_loading
                    .entry(partition)
                    .or_default()
                    .insert(producer_id, commit);
                return;
            }
            None => return,
        }
        let groups = self
            .groups
            .values_mut()
            .filter(|g| g.partition == partition && !g.pending_txn_offsets.is_empty());
        for group in groups {
            let Some(offsets) = group.pending_txn_offsets.remove(&producer_id) else {
                continue;
            };
            if commit {
                for (tp, offset) in offsets {
                    CommittedOffset::keep_latest(&mut group.offsets, tp, offset);
                }
            }
        }
    }

    /// The partitions of a group that an open transaction holds offsets for: OffsetFetch
    /// with `require_stable` answers them UNSTABLE_OFFSET_COMMIT.
    pub fn pending_txn_partitions(&self, group_id: &str) -> HashSet<(String, i32)> {
        self.groups
            .get(group_id)
            .into_iter()
            .flat_map(|g| g.pending_txn_offsets.values())
            .flat_map(|o| o.keys().cloned())
            .collect()
    }
}

//! The group coordinator's side of KIP-932's share-partition state, with its I/O: a leader's
//! read, a leader's write (appended to the group's `__consumer_offsets` partition and
//! answered once the ISR has it, as an offset commit), and an admin's reset. The rules are
//! the state machine's (`coordinator/share_state.rs`).

use uuid::Uuid;

use super::records::GroupRecord;
use super::{append, commit_error, GroupMetadataManager, HeartbeatError};
use crate::clock::now_ms;
use crate::producer_state::TxnVerification;
use crate::share::state::ShareState;

impl GroupMetadataManager {
    /// ReadShareGroupState: the stored state of one share-partition, `None` if it has none.
    pub fn read_share_state(
        &self,
        group_id: &str,
        topic_id: Uuid,
        partition: i32,
    ) -> Result<Option<ShareState>, HeartbeatError> {
        self.inner
            .lock()
            .coordinator
            .read_share_state(group_id, topic_id, partition)
            .map_err(|e| (e, String::new()))
    }

    /// WriteShareGroupState: checked, appended, and answered once the ISR has it.
    pub async fn write_share_state(
        &self,
        group_id: &str,
        topic_id: Uuid,
        partition: i32,
        state: ShareState,
    ) -> Result<(), HeartbeatError> {
        self.store_share_state(group_id, topic_id, partition, |coordinator| {
            let offsets_partition = coordinator.check_share_write(group_id, topic_id, partition, &state)?;
            Ok((offsets_partition, state))
        })
        .await
    }

    /// kafka-share-groups --reset-offsets for one share-partition: its state starts over at
    /// `offset` at the next state epoch (the leader, fenced on its next write, reads it anew).
    /// The caller checked the group is an empty share group.
    pub async fn reset_share_state(
        &self,
        group_id: &str,
        topic_id: Uuid,
        partition: i32,
        offset: i64,
    ) -> Result<(), HeartbeatError> {
        self.store_share_state(group_id, topic_id, partition, |coordinator| {
            coordinator
                .reset_share_state(group_id, topic_id, partition, offset)
                .map_err(|e| (e, String::new()))
        })
        .await
    }

    /// DeleteShareGroupOffsets: the empty share group's states of `topic_ids` are tombstoned;
    /// answered once the ISR has the tombstones.
    pub async fn delete_share_offsets(&self, group_id: &str, topic_ids: &[Uuid]) -> Result<(), HeartbeatError> {
        let stores = {
            let mut inner = self.inner.lock();
            let fx = inner.coordinator.delete_share_offsets(group_id, topic_ids)?;
            inner.apply(fx)
        };
        self.store_and_wait(stores).await.map_err(|e| (e, String::new()))
    }

    /// The stored states of a group's share-partitions: DescribeShareGroupOffsets.
    pub fn share_states_of(&self, group_id: &str) -> Vec<((Uuid, i32), ShareState)> {
        self.inner.lock().coordinator.share_states_of(group_id)
    }

    /// Appends the state `decide` returns (with its `__consumer_offsets` partition), decided
    /// under the coordinator's lock; once the ISR has it, later reads see it.
    async fn store_share_state(
        &self,
        group_id: &str,
        topic_id: Uuid,
        partition: i32,
        decide: impl FnOnce(&super::coordinator::GroupCoordinator) -> Result<(i32, ShareState), HeartbeatError>,
    ) -> Result<(), HeartbeatError> {
        let (state, appended) = {
            let inner = self.inner.lock();
            let (offsets_partition, state) = decide(&inner.coordinator)?;
            let record = GroupRecord::ShareState {
                group_id: group_id.to_string(),
                topic_id,
                partition,
                value: Some(state.clone()),
            };
            let appended = append(
                self,
                offsets_partition,
                &[record.encode()],
                None,
                TxnVerification::Unchecked,
                now_ms(),
            )
            .map_err(|e| (commit_error(e), String::new()))?;
            (state, appended)
        };
        self.await_appended(appended).await?;
        self.inner
            .lock()
            .coordinator
            .share_state_written(group_id, topic_id, partition, state);
        Ok(())
    }
}

//! KIP-932 share groups on the partition leader: each share-partition's in-flight records
//! (`partition.rs`) and the share sessions of ShareFetch/ShareAcknowledge (`session.rs`).
//! The group's membership is the group coordinator's (`group::coordinator::share`); a member
//! fetches from the leaders of the partitions it was assigned, and acquisition there decides
//! who gets which record, so two members sharing a partition never get the same record at
//! once.
//!
//! The state lives in memory on the leader and is stored with the group's coordinator
//! (`state.rs`, `share_persister.rs`): a share-partition is read from there when the leader
//! first needs it, written back after each acknowledgement before the member is answered,
//! and dropped here when no share session of its group is left on this node or its leader
//! epoch moved on, so the next fetch reads it afresh.

pub mod partition;
pub mod session;
pub mod state;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};
use tokio::sync::Notify;
use uuid::Uuid;

use crate::config::ShareGroupConfig;
use partition::{ShareLimits, SharePartition};
use session::ShareSessions;

/// A share-partition: the group's state for one topic partition.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SharePartitionKey {
    pub group_id: String,
    pub topic_id: Uuid,
    pub partition: i32,
}

/// A share-partition with what wakes the fetches waiting on it: records released or
/// acknowledged (which may free room under the in-flight cap) notify them.
pub struct ShareSlot {
    state: Mutex<SharePartition>,
    changed: Arc<Notify>,
    /// The state epoch the stored state had when this leader read it (`state.rs`).
    pub state_epoch: i32,
    /// The partition's leader epoch when this leader read it: a slot of an older epoch is
    /// stale (the partition moved away and back) and is read afresh.
    pub leader_epoch: i32,
    /// Changes that must be stored (acknowledgements), counted; and how many are stored.
    version: AtomicU64,
    stored: AtomicU64,
    /// One write of this share-partition's state at a time: a writer stores the newest state,
    /// which covers every change made before it, so acknowledgements waiting together share
    /// one write.
    writer: tokio::sync::Mutex<()>,
}

impl ShareSlot {
    fn new(state: SharePartition, state_epoch: i32, leader_epoch: i32) -> ShareSlot {
        ShareSlot {
            state: Mutex::new(state),
            changed: Arc::new(Notify::new()),
            state_epoch,
            leader_epoch,
            version: AtomicU64::new(0),
            stored: AtomicU64::new(0),
            writer: tokio::sync::Mutex::new(()),
        }
    }

    /// Counts a change to store; returns its number, for [`ShareSlot::is_stored`].
    pub fn changed_state(&self) -> u64 {
        self.version.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// Whether change `version` is stored.
    pub fn is_stored(&self, version: u64) -> bool {
        self.stored.load(Ordering::Acquire) >= version
    }

    /// Takes the writer's turn: with it, the state and the number of the last change it
    /// holds ([`ShareSlot::snapshot`]), then [`ShareSlot::mark_stored`] once written.
    pub async fn writer_turn(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.writer.lock().await
    }

    /// The state to store and the number of the last change in it.
    pub fn snapshot(&self) -> (state::ShareState, u64) {
        let sp = self.state.lock();
        let version = self.version.load(Ordering::Acquire);
        let (start_offset, batches) = sp.snapshot();
        (
            state::ShareState {
                state_epoch: self.state_epoch,
                leader_epoch: self.leader_epoch,
                start_offset,
                batches,
            },
            version,
        )
    }

    pub fn mark_stored(&self, version: u64) {
        self.stored.fetch_max(version, Ordering::AcqRel);
    }

    pub fn lock(&self) -> MutexGuard<'_, SharePartition> {
        self.state.lock()
    }

    /// Wakes the fetches waiting on this share-partition: records became Available or left
    /// the in-flight window.
    pub fn notify(&self) {
        self.changed.notify_waiters();
    }

    /// Resolves at the next [`ShareSlot::notify`] once enabled (or polled): a fetch enables it
    /// before it looks at the state, so no notification between the look and the wait is lost.
    pub fn changed(&self) -> tokio::sync::futures::OwnedNotified {
        self.changed.clone().notified_owned()
    }
}

pub struct ShareManager {
    config: ShareGroupConfig,
    partitions: Mutex<HashMap<SharePartitionKey, Arc<ShareSlot>>>,
    pub sessions: ShareSessions,
}

impl ShareManager {
    pub fn new(config: ShareGroupConfig) -> ShareManager {
        ShareManager {
            config,
            partitions: Mutex::new(HashMap::new()),
            sessions: ShareSessions::new(config.max_share_sessions),
        }
    }

    pub fn config(&self) -> ShareGroupConfig {
        self.config
    }

    pub fn limits(&self, record_lock_duration_ms: Option<i64>) -> ShareLimits {
        ShareLimits {
            record_lock_duration_ms: record_lock_duration_ms.unwrap_or(i64::from(self.config.record_lock_duration_ms)),
            delivery_count_limit: self.config.delivery_count_limit,
            max_record_locks: i64::from(self.config.partition_max_record_locks),
        }
    }

    /// The share-partition, if this leader has one.
    pub fn get(&self, key: &SharePartitionKey) -> Option<Arc<ShareSlot>> {
        self.partitions.lock().get(key).cloned()
    }

    /// Takes the share-partition `key` read from its stored state (or started afresh) at
    /// `state_epoch` and the partition's `leader_epoch`; if another fetch took one meanwhile,
    /// that one stays and is returned.
    pub fn insert(
        &self,
        key: &SharePartitionKey,
        state: SharePartition,
        state_epoch: i32,
        leader_epoch: i32,
    ) -> Arc<ShareSlot> {
        let mut partitions = self.partitions.lock();
        if let Some(found) = partitions.get(key) {
            return found.clone();
        }
        tracing::info!(group = %key.group_id, topic_id = %key.topic_id, partition = key.partition,
            start_offset = state.start_offset(), state_epoch, "share-partition starts on this leader");
        let created = Arc::new(ShareSlot::new(state, state_epoch, leader_epoch));
        partitions.insert(key.clone(), created.clone());
        created
    }

    /// Drops `slot` if it is still `key`'s: its state is stale (fenced, or of an older leader
    /// epoch) and the next fetch reads it afresh. Fetches waiting on it wake.
    pub fn forget(&self, key: &SharePartitionKey, slot: &Arc<ShareSlot>) {
        let mut partitions = self.partitions.lock();
        if partitions.get(key).is_some_and(|found| Arc::ptr_eq(found, slot)) {
            partitions.remove(key);
        }
        drop(partitions);
        slot.notify();
    }

    /// Releases every record `member_id` holds in `group_id`'s share-partitions here (its
    /// share session closed); returns the share-partitions it held records of, each with the
    /// change to store (the records' delivery counts).
    pub fn release_member(&self, group_id: &str, member_id: &str) -> Vec<(SharePartitionKey, Arc<ShareSlot>, u64)> {
        let held: Vec<(SharePartitionKey, Arc<ShareSlot>)> = self
            .partitions
            .lock()
            .iter()
            .filter(|(k, _)| k.group_id == group_id)
            .map(|(k, p)| (k.clone(), p.clone()))
            .collect();
        let mut released = Vec::new();
        for (key, slot) in held {
            if slot.lock().release_member(member_id) > 0 {
                slot.notify();
                let version = slot.changed_state();
                released.push((key, slot, version));
            }
        }
        released
    }

    /// Connection `connection_id` closed: its share sessions go; returns their (group,
    /// member), whose records the caller releases at once rather than when the locks run out.
    pub fn connection_closed(&self, connection_id: u64) -> Vec<(String, String)> {
        self.sessions.connection_closed(connection_id)
    }

    /// Drops `group_id`'s share-partitions from memory when no share session of the group is
    /// left here (their state is stored; a member coming back reads it, and sees an admin's
    /// reset done meanwhile).
    pub fn forget_if_idle(&self, group_id: &str) {
        if !self.sessions.has_group(group_id) {
            self.forget_group(group_id);
        }
    }

    /// Forgets every share-partition of `group_id` (the group was deleted).
    pub fn forget_group(&self, group_id: &str) {
        self.partitions.lock().retain(|k, _| k.group_id != group_id);
    }
}

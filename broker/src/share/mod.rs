//! KIP-932 share groups on the partition leader: each share-partition's in-flight records
//! (`partition.rs`) and the share sessions of ShareFetch/ShareAcknowledge (`session.rs`).
//! The group's membership is the group coordinator's (`group::coordinator::share`); a member
//! fetches from the leaders of the partitions it was assigned, and acquisition there decides
//! who gets which record, so two members sharing a partition never get the same record at
//! once.
//!
//! The state lives in memory on the leader: a new leader starts each share-partition afresh
//! from `share.auto.offset.reset`.

pub mod partition;
pub mod session;

use std::collections::HashMap;
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
}

impl ShareSlot {
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

    /// The share-partition, created starting at `start_offset()` if this leader has none.
    pub fn get_or_init(
        &self,
        key: &SharePartitionKey,
        limits: ShareLimits,
        start_offset: impl FnOnce() -> i64,
    ) -> Arc<ShareSlot> {
        let mut partitions = self.partitions.lock();
        if let Some(found) = partitions.get(key) {
            return found.clone();
        }
        let start = start_offset();
        tracing::info!(group = %key.group_id, topic_id = %key.topic_id, partition = key.partition, start_offset = start,
            "share-partition starts");
        let created = Arc::new(ShareSlot {
            state: Mutex::new(SharePartition::new(start, limits)),
            changed: Arc::new(Notify::new()),
        });
        partitions.insert(key.clone(), created.clone());
        created
    }

    /// Releases every record `member_id` holds in `group_id`'s share-partitions here: its share
    /// session closed.
    pub fn release_member(&self, group_id: &str, member_id: &str) {
        let held: Vec<Arc<ShareSlot>> = self
            .partitions
            .lock()
            .iter()
            .filter(|(k, _)| k.group_id == group_id)
            .map(|(_, p)| p.clone())
            .collect();
        for partition in held {
            if partition.lock().release_member(member_id) > 0 {
                partition.notify();
            }
        }
    }

    /// Connection `connection_id` closed: its share sessions go, and what their members hold
    /// here is released at once rather than when the locks run out.
    pub fn connection_closed(&self, connection_id: u64) {
        for (group_id, member_id) in self.sessions.connection_closed(connection_id) {
            tracing::debug!(group = %group_id, member = %member_id, "share session closed with its connection; releasing the member's records");
            self.release_member(&group_id, &member_id);
        }
    }

    /// Forgets every share-partition of `group_id` (the group was deleted).
    pub fn forget_group(&self, group_id: &str) {
        self.partitions.lock().retain(|k, _| k.group_id != group_id);
    }

    /// Each share-partition of `group_id` here: DescribeShareGroupOffsets without topics.
    pub fn partitions_of(&self, group_id: &str) -> Vec<(Uuid, i32)> {
        let partitions = self.partitions.lock();
        let mut out: Vec<(Uuid, i32)> = partitions
            .keys()
            .filter(|k| k.group_id == group_id)
            .map(|k| (k.topic_id, k.partition))
            .collect();
        out.sort();
        out
    }

    /// Starts the share-partition over at `offset` (kafka-share-groups --reset-offsets).
    pub fn reset(
        &self,
        key: &SharePartitionKey,
        limits: ShareLimits,
        offset: i64,
    ) -> Result<(), (kafka_protocol::error::ResponseError, String)> {
        let slot = self.get_or_init(key, limits, || offset);
        let reset = slot.lock().reset(offset);
        slot.notify();
        reset
    }
}

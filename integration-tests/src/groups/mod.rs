//! Consumer-group members and checks for the group tests (`tests/it/groups.rs`).
//!
//! A [`GroupMember`] is an rdkafka `BaseConsumer` that subscribes with a `group.id` (Kafka's
//! classic group protocol: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, OffsetCommit,
//! OffsetFetch, LeaveGroup) and commits *after processing*: every record it receives is recorded
//! first, then its offset is committed synchronously, every `commit_interval` and before its
//! partitions are revoked in a rebalance. So with no faults a group sees each record exactly
//! once, and a commit the member logged was acknowledged by the coordinator.
//!
//! [`MemberProcess`] runs the same member in a child process (`sluice-group-member`), so a test
//! can SIGKILL it: an in-process librdkafka client keeps heartbeating from its own threads even
//! when the application stops polling, so only a killed process stops heartbeating for real.
//!
//! - `member_log.rs`: [`MemberLog`], what a member did;
//! - `member.rs`: [`GroupMember`] and [`MemberProcess`], the members themselves;
//! - `offsets.rs`: the coordinator and the committed offsets, seen from outside the group;
//! - `coverage.rs`: producing the records and checking the group received them.

mod coverage;
mod member;
mod member_log;
mod offsets;

pub use coverage::{await_balanced, check_group_received, distinct_received, produce_all};
pub use member::{member_config, run_member, GroupMember, MemberProcess, COMMIT_INTERVAL};
pub use member_log::{AckedCommit, Assigned, FirstAfterAssign, MemberLog, Received};
pub use offsets::{
    commit_as_admin, committed_offsets, committed_offsets_as, find_coordinator, java_string_hash, offsets_partition,
    OFFSETS_TOPIC_PARTITIONS,
};

//! Fault injection for replication tests: a workload that records what the cluster promised
//! (an idempotent `acks=all` producer's delivery reports) and what it showed (a concurrent
//! consumer's reads), and the invariant checks run once the fault is healed:
//!
//! 1. every acknowledged record is in the final log exactly once, at the offset it was acked at;
//! 2. every record the consumer saw is in the final log where it saw it, and per partition the
//!    consumer's offsets only increase;
//! 3. the cluster returns to full ISR ([`Cluster::await_full_isr`]);
//! 4. every replica of a partition holds the same bytes.
//!
//! The final log is read with a fresh consumer from offset 0 to each partition's high watermark,
//! so it is what any client would see, not what happens to be in the files.
//!
//! - `workload.rs`: the topic, and the producer and consumer threads that record what happened;
//! - `final_log.rs`: what the cluster holds afterwards, as a client reads it and as the files are;
//! - `invariants.rs`: the checks 1-4 above, and [`stop_and_check`], which runs them all;
//! - `schedule.rs`: seeded random fault schedules (kill, restart, freeze, graceful restart,
//!   network partitions) for the soak;
//! - `secure.rs`: the secured soak's cluster (SASL_SSL only, SCRAM users with their ACLs, a
//!   certificate per node) and its two faults, certificate rotation and SCRAM changes;
//! - `soak.rs`: one schedule run against the workload and two consumer groups on a fresh
//!   cluster, with the checks as an outcome instead of a failure (`sluice-soak`, `docs/soak.md`);
//! - `transactions.rs`: the soak's transactional workload (`--transactions`) and its checker of
//!   Jepsen's anomalies (lost writes, duplicates, aborted reads, torn transactions, order);
//! - `consume_transform_produce.rs`: the transactional soak's stage copying that topic to another
//!   in exactly-once transactions (consumer group, offsets in the transaction), and its checker
//!   (copies lost, duplicated, made from aborted records, out of order; G1c cycles);
//! - `net.rs`: network partitions ([`Net`]): each node of a cluster started with
//!   [`Cluster::start_partitionable`] in its own network namespace, and nftables rules that drop
//!   packets between them (isolate, split, one way, one port) until healed;
//! - `power.rs`: power loss, a node's data dir on a `sluice-lazyfs` mount and [`power_cut`].

pub mod consume_transform_produce;
mod final_log;
mod invariants;
mod net;
mod power;
pub mod schedule;
pub mod secure;
pub mod soak;
pub mod transactions;
mod workload;

pub use final_log::{
    is_segment_log_file, mark_resent_by_client, partition_log_bytes, read_final_log, read_final_log_as, stored_as,
    FinalLog, StoredAs,
};
pub use invariants::{
    acked_but_missing, acked_records, await_identical_replicas, check_acked_records_exactly_once,
    check_consumed_records_in_final_log, check_progress_after, mark_client_resends, report_resent_by_client,
    stop_and_check, stop_and_check_with, Acks, Settled,
};
pub use net::{Net, Port, KAFKA_PORT, QUORUM_PORT};
pub use power::{lazyfs_binary, power_cut, LazyFsMount};
pub use schedule::{Schedule, ScheduleOptions};
pub use soak::{run_schedule, ScheduleOutcome, SoakOptions};
pub use workload::{
    create_topic, record_value, workload_producer_config, ConsumerOutcome, Delivery, ProducerOutcome, Seen, Workload,
};

/// Cluster settings that make failover take seconds: fencing after 3 s without a heartbeat, ISR
/// shrink after 3 s without catching up, preferred-leader rebalance checked every 2 s.
pub const FAST_FAILOVER: &[(&str, &str)] = &[
    ("broker.session.timeout.ms", "3000"),
    ("replica.lag.time.max.ms", "3000"),
    ("leader.imbalance.check.interval.seconds", "2"),
];

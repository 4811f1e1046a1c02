//! The integration tests, one module per area, built as one test binary: each `tests/*.rs` file
//! would be linked on its own (rdkafka and the broker crates, with LTO), which cost CI more
//! than running them. Run one area with `cargo test --release --test it -- replication::`.

mod acks_all;
mod admin;
mod admin_elect;
mod bad_input;
mod bad_input_batches;
mod bad_input_fetch;
mod bad_input_quorum;
mod broker_configs;
mod cli;
mod cluster;
mod compaction;
mod crash_recovery;
mod delete_records;
mod fetch_from_follower;
mod fetch_sessions;
mod follower_sessions;
mod group_protocol;
mod group_states;
mod groups;
mod idempotent_producer;
mod incarnation;
mod internal_topics;
mod invariants;
mod leader_epoch;
mod metadata_versions;
mod offsets_topic;
mod open_files;
mod open_files_budget;
mod partitions;
mod power_loss;
mod quotas;
mod rdkafka_roundtrip;
mod reassignment;
mod replication;
mod security;
mod soak;
mod transactions;

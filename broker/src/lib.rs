//! Sluice broker: a Kafka-wire-compatible broker. See ARCHITECTURE.md for the map.

pub mod api;
pub mod broker;
pub mod clock;
pub mod cluster_id;
pub mod config;
pub mod connection;
pub mod controller;
pub mod fetch_session;
pub mod fs;
pub mod group;
pub mod heap;
pub mod http;
pub mod log;
pub mod metadata;
pub mod metrics;
pub mod partition;
pub mod plan;
pub mod producer_state;
pub mod purgatory;
pub mod quota;
pub mod replica_manager;
pub mod replication;
pub mod security;
pub mod server;
pub mod topic_config;
pub mod txn;

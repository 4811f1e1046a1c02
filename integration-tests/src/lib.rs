//! Test harness for Sluice: starts real `sluice` broker processes on loopback ports and gives
//! tests ready-made rdkafka clients and raw wire-protocol helpers.
//!
//! - [`SluiceNode`]: one broker process (free port, temporary data dir, captured log, readiness
//!   awaited by a real ApiVersions + Metadata round-trip, SIGKILL/SIGTERM/restart).
//! - [`node_spec`]: how a test node is started (command line, settings, work dir, readiness
//!   probe, cluster flags), read from `integration-tests/node.json`, which the Python harness
//!   (`python/sluice_node.py`) reads too.
//! - [`clients`]: rdkafka configurations (manual assignment, idempotence off) and helpers.
//! - [`wire`]: hand-encoded requests for tests that send hostile or exact bytes.
//! - [`security`]: how the harness reaches a TLS and/or SASL listener ([`ClientSecurity`]:
//!   rustls, SASL PLAIN and SCRAM), for the readiness probe and typed requests alike.
//! - [`pki`]: a test CA issuing X.509 v3 broker and client certificates as PEM files.
//! - [`canary::Canary`]: proof that a broker fed hostile input still serves other clients.
//! - [`Cluster`]: several nodes forming one cluster (`--voters`), started together.
//! - [`kafka_client`]: typed requests for fields client libraries hide (controller id, quorum).
//! - [`groups`]: consumer-group members (in-process and as killable child processes) that commit
//!   after processing, and the checks that a group received every record (exactly once).
//! - [`faults`]: a recorded produce/consume workload and the replication invariants checked
//!   after a fault (acked records exactly once, nothing seen then lost, full ISR, equal replicas).
//!
//! The binary comes from `$SLUICE_BIN`, else `<target>/release/sluice`, else
//! `<target>/debug/sluice`, where `<target>` is `$CARGO_TARGET_DIR` or `<workspace>/target`
//! (`binary` in `node.json`).

pub mod canary;
pub mod clients;
pub mod cluster;
pub mod faults;
pub mod groups;
pub mod kafka_client;
pub mod node;
pub mod node_spec;
pub mod pki;
pub mod procstat;
pub mod security;
pub mod sluice_cli;
pub mod wire;

pub use cluster::{retry_port_races, Cluster};
pub use node::{free_loopback_port, sluice_binary, workspace_root, NodeOptions, SluiceNode};
pub use security::ClientSecurity;

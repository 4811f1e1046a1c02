//! The seed workload: an order service producing to `orders`, an `orders-sink` group writing
//! every order to SQLite exactly once, and an `analytics` group serving per-minute figures.
//!
//! - [`order`]: the order record and its JSON form on the topic;
//! - [`producer`]: the paced, idempotent order producer (`sluice-demo producer`);
//! - [`resume`]: the consumer context both groups share: each assigned partition resumes at
//!   the offset the application itself stored with its results, not at the group's commit;
//! - [`sink`], [`sink_db`]: the exactly-once SQLite sink (`sluice-demo sink`);
//! - [`analytics`], [`http`]: per-minute counts and revenue over HTTP (`sluice-demo analytics`);
//! - [`run`], [`cluster`], [`process`]: the one command that starts a 3-node cluster and the
//!   three programs as child processes (`sluice-demo run`);
//! - [`security`]: the programs' `--security-config` (librdkafka's security properties);
//! - [`secure`], [`certs`]: `run --secure`'s test CA, node certificates and users;
//! - [`acls`], [`admin`], [`scram`]: each user's ACLs (`sluice-demo acls`), created over the
//!   wire protocol after a SCRAM-SHA-512 login, as rdkafka has no ACL API;
//! - [`shutdown`]: SIGINT/SIGTERM as a flag every loop checks.

pub mod acls;
pub mod admin;
pub mod analytics;
pub mod certs;
pub mod cluster;
pub mod http;
pub mod order;
pub mod process;
pub mod producer;
pub mod resume;
pub mod run;
pub mod scram;
pub mod secure;
pub mod security;
pub mod shutdown;
pub mod sink;
pub mod sink_db;
pub mod topic;

//! The secured soak (`sluice-soak --secure`): every node's only listener speaks SASL_SSL
//! (SCRAM-SHA-512, the authorizer on, `super.users=User:admin`), with a certificate of its own
//! from a test CA in the schedule's work dir, and the workload's clients each log in as their
//! own principal with only the ACLs it needs:
//!
//! | principal        | who                                   | ACLs                                   |
//! |------------------|---------------------------------------|----------------------------------------|
//! | `soak-producer`  | the idempotent `acks=all` producer    | WRITE, DESCRIBE on topic `soak`        |
//! | `soak-reader`    | the workload consumer                 | READ on topic `soak` and its group     |
//! | `soak-sink`      | group `soak-sink`'s members           | READ on topic `soak` and group `soak-sink` |
//! | `soak-analytics` | group `soak-analytics`'s members      | READ on topic `soak` and group `soak-analytics` |
//!
//! With `--transactions`, also (transactional ids `soak-tx-0`, `soak-tx-1`; the stage's
//! `soak-tx-copier-0`, `soak-tx-copier-1`):
//!
//! | principal        | who                                   | ACLs                                   |
//! |------------------|---------------------------------------|----------------------------------------|
//! | `soak-producer`  | the transactional producers           | WRITE, DESCRIBE on topic `soak-tx` and on their transactional ids |
//! | `soak-copier`    | the consume-transform-produce stage   | READ on topic `soak-tx` and group `soak-tx-copier`; WRITE, DESCRIBE on topic `soak-tx-out` and on its transactional ids |
//! | `soak-reader`    | the transactions' checker             | READ on topics `soak-tx`, `soak-tx-out` and group `soak-tx-checker` |
//!
//! Users come from `SLUICE_ADD_SCRAM` at start, ACLs from CreateAcls through the harness's admin
//! login. The harness itself (topic creation, Metadata, the final reader, OffsetFetch) logs in
//! as `admin`. The two security faults of [`super::schedule`] act here:
//! [`SecureSoak::rotate_certificates`] replaces every node's keystore file with a new
//! certificate from the same CA and [`SecureSoak::check_certificates`] then requires every node
//! to present it and the connections made before to be served still;
//! [`SecureSoak::change_scram`] gives the workload's users a new salt and iteration count with
//! the same password and the admin a new password, and [`SecureSoak::check_scram`] requires
//! every node to log them in with the new credentials only.

use std::collections::BTreeMap;
use std::io::Read;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, ensure, Context, Result};
use kafka_protocol::messages::alter_user_scram_credentials_request::ScramCredentialUpsertion;
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, ApiVersionsRequest, CreateAclsRequest, DescribeAclsRequest,
};
use kafka_protocol::protocol::StrBytes;
use tempfile::TempDir;

use super::consume_transform_produce::{self as ctp, STAGE_GROUP, STAGE_OUTPUT};
use super::transactions::{producer_transactional_ids, CHECKER_GROUP, TXN_TOPIC};
use crate::kafka_client::KafkaConnection;
use crate::node::NodeOptions;
use crate::pki::{write_atomically, TestCa};
use crate::security::{
    first_certificate, salted_password, sasl_login_reporting_iterations, served_certificate, ClientSecurity, SaslLogin,
    SaslMechanism, TlsClient,
};
use crate::{wire, Cluster};

/// The super user the harness logs in as.
pub const ADMIN: &str = "admin";
const ADMIN_FIRST_PASSWORD: &str = "admin-secret";
const MECHANISM: SaslMechanism = SaslMechanism::ScramSha512;
/// AlterUserScramCredentials' code for SCRAM-SHA-512.
const MECHANISM_CODE: i8 = 2;
/// What `--add-scram` gives a user that names no iteration count (Kafka's default).
const FIRST_ITERATIONS: u32 = 4096;
const AUTHORIZER: &str = "org.apache.kafka.metadata.authorizer.StandardAuthorizer";
/// How often the brokers look at their certificate files: a rotation is in force within this.
pub const RELOAD_CHECK_INTERVAL_MS: u64 = 500;
/// Longest a node may take to present a rotated certificate or to hold changed credentials
/// once the fault's duration is over (it usually has them long before).
const CHECK_TIMEOUT: Duration = Duration::from_secs(10);
const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// The workload producer's principal.
pub const PRODUCER: &str = "soak-producer";
/// The workload consumer's principal (manual assignment; its group only names it).
pub const READER: &str = "soak-reader";
/// The consume-transform-produce stage's principal (`--transactions`).
pub const COPIER: &str = "soak-copier";
/// The group the workload consumer names (`faults::Workload`).
pub const READER_GROUP: &str = "sluice-faults-workload";

/// Kafka's ACL codes used here.
mod acl {
    pub const TOPIC: i8 = 2;
    pub const GROUP: i8 = 3;
    pub const TRANSACTIONAL_ID: i8 = 5;
    pub const ANY: i8 = 1;
    pub const LITERAL: i8 = 3;
    pub const READ: i8 = 3;
    pub const WRITE: i8 = 4;
    pub const DESCRIBE: i8 = 8;
    pub const ALLOW: i8 = 3;
}

/// A connection made before a certificate rotation, to be served after it.
struct Held {
    node: i32,
    pid: Option<u32>,
    connection: KafkaConnection,
}

/// The secured cluster's certificates, users and the state of the two security faults.
pub struct SecureSoak {
    /// The schedule's work dir: `ca.pem` and each node's `node-<id>.pem` keystore.
    dir: TempDir,
    ca: TestCa,
    ca_pem: PathBuf,
    /// Per node id, the address its certificate names (known once the node's host is).
    hosts: Mutex<BTreeMap<i32, IpAddr>>,
    /// Errors met while issuing the first certificates (inside a node's start-up hook).
    issue_errors: Mutex<Vec<String>>,
    /// Certificates issued to each node so far, counting the first.
    generation: u32,
    /// The workload's users and their (unchanging) passwords.
    users: Vec<(String, String)>,
    /// The workload's users' iteration count in force.
    iterations: u32,
    admin_password: String,
    /// The admin password before the last change, which must no longer log in.
    old_admin_password: Option<String>,
    /// Admin password changes so far (the next password is numbered from this).
    admin_changes: u32,
    held: Vec<Held>,
}

impl SecureSoak {
    /// The CA and work dir for a schedule; the workload users are `PRODUCER`, `READER`, one
    /// per group in `groups` (named as the group) and, with `transactions`, `COPIER`.
    pub fn new(seed: u64, groups: &[&str], transactions: bool) -> Result<SecureSoak> {
        let dir = tempfile::Builder::new()
            .prefix(&format!("sluice-soak-{seed}-"))
            .tempdir()?;
        let ca = TestCa::new(&format!("sluice-soak CA (seed {seed})"))?;
        let ca_pem = dir.path().join("ca.pem");
        std::fs::write(&ca_pem, ca.certificate_pem())?;
        let copier: &[&str] = if transactions { &[COPIER] } else { &[] };
        let users = [PRODUCER, READER]
            .iter()
            .chain(groups)
            .chain(copier)
            .map(|u| (u.to_string(), format!("{u}-secret")))
            .collect();
        Ok(SecureSoak {
            dir,
            ca,
            ca_pem,
            hosts: Mutex::new(BTreeMap::new()),
            issue_errors: Mutex::new(Vec::new()),
            generation: 1,
            users,
            iterations: FIRST_ITERATIONS,
            admin_password: ADMIN_FIRST_PASSWORD.to_string(),
            old_admin_password: None,
            admin_changes: 0,
            held: Vec::new(),
        })
    }

    /// Settings every node gets: the SASL_SSL listener's SCRAM-SHA-512, the authorizer, the
    /// CA as truststore (followers check leaders' certificates with it), and a certificate
    /// check every [`RELOAD_CHECK_INTERVAL_MS`]. Each node's keystore comes from [`Self::customise`].
    pub fn settings(&self) -> Vec<(String, String)> {
        let ca = self.ca_pem.display().to_string();
        [
            ("ssl.keystore.type", "PEM".to_string()),
            ("ssl.truststore.type", "PEM".to_string()),
            ("ssl.truststore.location", ca),
            ("ssl.reload.check.interval.ms", RELOAD_CHECK_INTERVAL_MS.to_string()),
            ("sasl.enabled.mechanisms", MECHANISM.name().to_string()),
            ("authorizer.class.name", AUTHORIZER.to_string()),
            ("super.users", format!("User:{ADMIN}")),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    /// A node's start-up hook: its first certificate (naming its host), its keystore, the one
    /// SASL_SSL listener, the users (`SLUICE_ADD_SCRAM`, read as `--add-scram`), and the
    /// harness's admin login.
    pub fn customise(&self, id: i32, opts: &mut NodeOptions) {
        let host = opts.host.unwrap_or_else(|| crate::node::loopback_addr(0).ip());
        self.hosts.lock().expect("hosts lock").insert(id, host);
        if let Err(e) = self.issue(id, host, 1) {
            self.issue_errors
                .lock()
                .expect("errors lock")
                .push(format!("node {id}: {e:#}"));
        }
        opts.settings
            .push(("ssl.keystore.location".into(), self.keystore(id).display().to_string()));
        opts.listener = Some("SASL_SSL".into());
        opts.client_security = self.admin_security();
        // SLUICE_ADD_SCRAM rather than --add-scram: the passwords stay out of the logged command.
        let mut users = vec![(ADMIN.to_string(), ADMIN_FIRST_PASSWORD.to_string())];
        users.extend(self.users.iter().cloned());
        let entries: Vec<String> = users
            .iter()
            .map(|(user, password)| format!("{}=[name={user},password={password}]", MECHANISM.name()))
            .collect();
        opts.secret_env.push(("SLUICE_ADD_SCRAM".into(), entries.join(" ")));
    }

    /// Fails if a node's first certificate could not be issued.
    pub fn check_issued(&self) -> Result<()> {
        let errors = self.issue_errors.lock().expect("errors lock");
        ensure!(errors.is_empty(), "issuing the nodes' certificates: {errors:?}");
        Ok(())
    }

    fn keystore(&self, id: i32) -> PathBuf {
        self.dir.path().join(format!("node-{id}.pem"))
    }

    /// Writes certificate number `generation` for node `id` (subject and serial of its own).
    fn issue(&self, id: i32, host: IpAddr, generation: u32) -> Result<u64> {
        let issued = self.ca.issue_broker(
            &format!("sluice-soak node {id} certificate {generation}"),
            &[host.to_string(), "localhost".to_string()],
        )?;
        write_atomically(&self.keystore(id), &issued.keystore_pem())?;
        Ok(issued.serial)
    }

    fn tls(&self) -> TlsClient {
        TlsClient {
            ca_pem: self.ca_pem.clone(),
            identity: None,
        }
    }

    fn login(&self, user: &str, password: &str) -> ClientSecurity {
        ClientSecurity::default()
            .tls(self.tls())
            .sasl(SaslLogin::new(MECHANISM, user, password))
    }

    /// How the harness logs in: as `admin`, with the password in force.
    pub fn admin_security(&self) -> ClientSecurity {
        self.login(ADMIN, &self.admin_password)
    }

    /// How the workload principal `user` (a group's members: the group's name) logs in.
    pub fn user_security(&self, user: &str) -> ClientSecurity {
        let password = self
            .users
            .iter()
            .find(|(u, _)| u == user)
            .map(|(_, p)| p.as_str())
            .unwrap_or("no such user");
        self.login(user, password)
    }

    /// The ACLs of the tables in the module header (the second with `transactions`), created
    /// through node `via`; waits until every node lists them and logs every workload user in.
    pub fn grant(&self, cluster: &Cluster, via: i32, topic: &str, transactions: bool) -> Result<()> {
        let allow = |user: &str, resource_type: i8, resource: &str, operation: i8| {
            AclCreation::default()
                .with_resource_type(resource_type)
                .with_resource_name(StrBytes::from_string(resource.to_string()))
                .with_resource_pattern_type(acl::LITERAL)
                .with_principal(StrBytes::from_string(format!("User:{user}")))
                .with_host(StrBytes::from_static_str("*"))
                .with_operation(operation)
                .with_permission_type(acl::ALLOW)
        };
        let mut creations = vec![
            allow(PRODUCER, acl::TOPIC, topic, acl::WRITE),
            allow(PRODUCER, acl::TOPIC, topic, acl::DESCRIBE),
        ];
        for (user, _) in self.users.iter().filter(|(u, _)| u != PRODUCER && u != COPIER) {
            let group = if user == READER { READER_GROUP } else { user.as_str() };
            creations.push(allow(user, acl::TOPIC, topic, acl::READ));
            creations.push(allow(user, acl::GROUP, group, acl::READ));
        }
        if transactions {
            let write = |user: &str, resource_type: i8, resource: &str| {
                [acl::WRITE, acl::DESCRIBE].map(|op| allow(user, resource_type, resource, op))
            };
            creations.extend(write(PRODUCER, acl::TOPIC, TXN_TOPIC));
            for id in producer_transactional_ids() {
                creations.extend(write(PRODUCER, acl::TRANSACTIONAL_ID, &id));
            }
            creations.push(allow(COPIER, acl::TOPIC, TXN_TOPIC, acl::READ));
            creations.push(allow(COPIER, acl::GROUP, STAGE_GROUP, acl::READ));
            creations.extend(write(COPIER, acl::TOPIC, STAGE_OUTPUT));
            for id in ctp::transactional_ids() {
                creations.extend(write(COPIER, acl::TRANSACTIONAL_ID, &id));
            }
            for t in [TXN_TOPIC, STAGE_OUTPUT] {
                creations.push(allow(READER, acl::TOPIC, t, acl::READ));
            }
            creations.push(allow(READER, acl::GROUP, CHECKER_GROUP, acl::READ));
        }
        let expected = creations.len();
        let request = CreateAclsRequest::default().with_creations(creations);
        let response = cluster.call(via, &request, 3, Duration::from_secs(35))?;
        for r in &response.results {
            ensure!(
                r.error_code == 0,
                "CreateAcls via node {via}: error code {} ({:?})",
                r.error_code,
                r.error_message
            );
        }
        // kafka-protocol's defaults filter on empty names: null means any.
        let describe = DescribeAclsRequest::default()
            .with_resource_type_filter(acl::ANY)
            .with_resource_name_filter(None)
            .with_principal_filter(None)
            .with_host_filter(None)
            .with_pattern_type_filter(acl::ANY)
            .with_operation(acl::ANY)
            .with_permission_type(acl::ANY);
        for id in cluster.ids() {
            let mut last = String::new();
            retry(CHECK_TIMEOUT, &mut last, || {
                let response = cluster.call(id, &describe, 3, IO_TIMEOUT)?;
                let listed: usize = response.resources.iter().map(|r| r.acls.len()).sum();
                ensure!(listed >= expected, "node {id} lists {listed} of {expected} ACLs");
                Ok(())
            })?;
        }
        self.check_logins(cluster, &cluster.ids(), false)
    }

    /// Rotation, first half: opens a connection to each of `nodes` (logged in, answering), then
    /// replaces every node's keystore file with a new certificate from the same CA.
    pub fn rotate_certificates(&mut self, cluster: &mut Cluster, nodes: &[i32]) -> Result<String> {
        self.held.clear();
        for &id in nodes {
            let addr = cluster.addr(id);
            let mut connection =
                KafkaConnection::connect_secured(addr, cluster.client_security(id), "sluice-soak-held", IO_TIMEOUT)
                    .with_context(|| format!("a connection to node {id} before the rotation"))?;
            connection.call(&ApiVersionsRequest::default(), 0)?;
            let pid = cluster.node(id).pid();
            self.held.push(Held {
                node: id,
                pid,
                connection,
            });
        }
        self.generation += 1;
        let hosts = self.hosts.lock().expect("hosts lock").clone();
        let mut serials = Vec::new();
        for (id, host) in hosts {
            serials.push(format!("node {id} serial {}", self.issue(id, host, self.generation)?));
        }
        Ok(format!(
            "certificate {} written: {}",
            self.generation,
            serials.join(", ")
        ))
    }

    /// Rotation, second half: each of `nodes` presents the certificate its keystore holds now
    /// (within [`CHECK_TIMEOUT`]), and each connection made before the rotation to a node that
    /// has run throughout (same process) still answers.
    pub fn check_certificates(&mut self, cluster: &mut Cluster, nodes: &[i32]) -> Result<String> {
        let tls = self.tls();
        for &id in nodes {
            let expected = first_certificate(&self.keystore(id))?;
            let addr = cluster.addr(id);
            let mut last = String::new();
            retry(CHECK_TIMEOUT, &mut last, || {
                let served = served_certificate(&tls, addr, IO_TIMEOUT)?;
                ensure!(served == expected, "node {id} still presents an older certificate");
                Ok(())
            })
            .with_context(|| format!("node {id} within {CHECK_TIMEOUT:?} of the rotation"))?;
        }
        let mut served = 0;
        for mut held in std::mem::take(&mut self.held) {
            let same_process = cluster.node(held.node).pid() == held.pid;
            if !same_process || !nodes.contains(&held.node) {
                continue;
            }
            held.connection
                .call(&ApiVersionsRequest::default(), 0)
                .with_context(|| {
                    format!(
                        "node {}: a connection made before the rotation is no longer served",
                        held.node
                    )
                })?;
            served += 1;
        }
        Ok(format!(
            "nodes {nodes:?} present certificate {}; {served} connections from before still served",
            self.generation
        ))
    }

    /// Changes credentials through node `via`: each workload user gets a new salt and
    /// `iterations` (one more if that is the count in force) with the same password, the
    /// admin a new password (and salt) that the harness logs in with from now on.
    pub fn change_scram(&mut self, cluster: &mut Cluster, via: i32, iterations: u32) -> Result<String> {
        let iterations = if iterations == self.iterations {
            iterations + 1
        } else {
            iterations
        };
        self.admin_changes += 1;
        let admin_password = format!("{ADMIN_FIRST_PASSWORD}-{}", self.admin_changes);
        let admin_password = admin_password.as_str();
        let upsert = |user: &str, password: &str| -> Result<ScramCredentialUpsertion> {
            let salt = random_bytes(32)?;
            let salted = salted_password(MECHANISM, password, &salt, iterations);
            Ok(ScramCredentialUpsertion::default()
                .with_name(StrBytes::from_string(user.to_string()))
                .with_mechanism(MECHANISM_CODE)
                .with_iterations(iterations as i32)
                .with_salt(salt.into())
                .with_salted_password(salted.into()))
        };
        let mut upsertions = self
            .users
            .iter()
            .map(|(u, p)| upsert(u, p))
            .collect::<Result<Vec<_>>>()?;
        upsertions.push(upsert(ADMIN, admin_password)?);
        let request = AlterUserScramCredentialsRequest::default().with_upsertions(upsertions);
        let response = cluster.call(via, &request, 0, Duration::from_secs(35))?;
        for r in &response.results {
            ensure!(
                r.error_code == 0,
                "AlterUserScramCredentials for {} via node {via}: error code {} ({:?})",
                r.user.as_str(),
                r.error_code,
                r.error_message
            );
        }
        self.iterations = iterations;
        self.old_admin_password = Some(std::mem::replace(&mut self.admin_password, admin_password.to_string()));
        cluster.set_client_security(&self.admin_security());
        Ok(format!(
            "{} users at {iterations} iterations, admin password changed (via node {via})",
            self.users.len()
        ))
    }

    /// Every one of `nodes` logs each workload user in with the new salt and iteration count
    /// and the admin with the new password, and refuses the admin's old one.
    pub fn check_scram(&self, cluster: &Cluster, nodes: &[i32]) -> Result<String> {
        self.check_logins(cluster, nodes, true)?;
        Ok(format!(
            "nodes {nodes:?} log {} users in at {} iterations and only the admin's new password",
            self.users.len(),
            self.iterations
        ))
    }

    /// Every workload user and the admin log in on each of `nodes` (waiting up to
    /// [`CHECK_TIMEOUT`] for a node to catch up); with `exact`, at the iteration count in force,
    /// and the admin's previous password is refused.
    fn check_logins(&self, cluster: &Cluster, nodes: &[i32], exact: bool) -> Result<()> {
        for &id in nodes {
            let addr = cluster.addr(id);
            let mut last = String::new();
            retry(CHECK_TIMEOUT, &mut last, || {
                for (user, password) in &self.users {
                    let iterations = login(&self.login(user, password), addr)?;
                    ensure!(
                        !exact || iterations == Some(self.iterations),
                        "node {id} holds {user}'s credential with {iterations:?} iterations, not {}",
                        self.iterations
                    );
                }
                login(&self.admin_security(), addr).context("the admin's current password")?;
                Ok(())
            })
            .with_context(|| format!("logins on node {id}"))?;
            if let (true, Some(old)) = (exact, &self.old_admin_password) {
                if login(&self.login(ADMIN, old), addr).is_ok() {
                    bail!("node {id} still logs the admin in with the previous password");
                }
            }
        }
        Ok(())
    }
}

/// A TLS connection to `addr` logged in as `security` says; the iteration count SCRAM named.
fn login(security: &ClientSecurity, addr: SocketAddr) -> Result<Option<u32>> {
    let tls = security.tls.as_ref().context("a TLS client")?;
    let login = security.sasl.as_ref().context("a SASL login")?;
    let tcp = wire::connect(addr, IO_TIMEOUT)?;
    let mut stream = ClientSecurity::default().tls(tls.clone()).secure(tcp, addr)?;
    sasl_login_reporting_iterations(&mut stream, login).with_context(|| format!("{} on {addr}", login.username))
}

/// Runs `check` until it passes or `timeout` is over; the last failure is the error.
fn retry(timeout: Duration, last: &mut String, mut check: impl FnMut() -> Result<()>) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        match check() {
            Ok(()) => return Ok(()),
            Err(e) => *last = format!("{e:#}"),
        }
        if Instant::now() >= deadline {
            return Err(anyhow!("{last} (for {timeout:?})"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn random_bytes(n: usize) -> Result<Vec<u8>> {
    let mut bytes = vec![0u8; n];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .context("reading /dev/urandom")?;
    Ok(bytes)
}

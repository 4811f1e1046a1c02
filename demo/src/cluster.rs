//! The local 3-node cluster `run` starts: every node a broker and a metadata-quorum voter, as
//! `scripts/cluster.sh` starts them, on ports clear of a default single node
//! (Kafka 19092/29092/39092, quorum 19093/29093/39093). Secured (`run --secure`), each node's
//! one Kafka listener speaks SASL_SSL, to clients and to the other brokers alike, and the
//! brokers create the demo's SCRAM users ([`SecureFiles`]).

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rand::RngCore;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};

use crate::acls::ADMIN;
use crate::process::ChildProcess;
use crate::secure::SecureFiles;
use crate::security::ClientSecurity;

pub const NODES: u16 = 3;
/// Until every node is listed in Metadata.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Controlled shutdown of one node, after SIGTERM.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// Kafka listener port of node `id` (1-based).
fn kafka_port(id: u16) -> u16 {
    id * 10_000 + 9092
}

/// Where node `id` serves Prometheus metrics and the console (as docker-compose.yml publishes them).
pub fn console_address(id: u16) -> String {
    format!("127.0.0.1:{}", console_port(id))
}

fn console_port(id: u16) -> u16 {
    id * 10_000 + 9644
}

/// How long [`LocalCluster::start`] waits for its fixed ports while another process holds one.
/// They lie in Linux's ephemeral range (32768-60999), where another program's connection or
/// short-lived listener can take one for a moment.
const PORTS_FREE_TIMEOUT: Duration = Duration::from_secs(30);

/// Until every port the nodes bind (Kafka, quorum and console of each) is free on 127.0.0.1.
fn await_ports_free() -> Result<()> {
    let ports: Vec<u16> = (1..=NODES)
        .flat_map(|id| [kafka_port(id), kafka_port(id) + 1, console_port(id)])
        .collect();
    let deadline = Instant::now() + PORTS_FREE_TIMEOUT;
    loop {
        let busy: Vec<u16> = ports
            .iter()
            .copied()
            .filter(|port| std::net::TcpListener::bind(("127.0.0.1", *port)).is_err())
            .collect();
        if busy.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!(
                "127.0.0.1 ports {busy:?} stayed in use for {PORTS_FREE_TIMEOUT:?}, and the demo cluster binds them; stop the process holding them (`ss -ltnp` names it) and run again"
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

pub struct LocalCluster {
    nodes: Vec<ChildProcess>,
    bootstrap: String,
    /// How the demo itself logs in (as `admin` when secured) to watch the cluster.
    observer: ClientSecurity,
}

/// The broker binary: `$SLUICE_BIN`, else `sluice` beside this binary (both are built into
/// `target/release` by `cargo build --release -p sluice-broker -p sluice-demo`), or one
/// directory up from a test binary in `target/release/deps`.
pub fn broker_binary() -> Result<PathBuf> {
    let path = match std::env::var_os("SLUICE_BIN") {
        Some(bin) => PathBuf::from(bin),
        None => {
            let me = std::env::current_exe()?;
            let beside = me.with_file_name("sluice");
            match me
                .parent()
                .filter(|dir| dir.ends_with("deps"))
                .and_then(|deps| deps.parent())
            {
                Some(profile) if !beside.is_file() => profile.join("sluice"),
                _ => beside,
            }
        }
    };
    if !path.is_file() {
        bail!(
            "no sluice broker binary at {}; build it with `cargo build --release -p sluice-broker` or set SLUICE_BIN",
            path.display()
        );
    }
    Ok(path)
}

/// The cluster secret file in `dir`, made (32 random bytes, hex, mode 0600) on first use.
fn cluster_secret(dir: &Path) -> Result<PathBuf> {
    let path = dir.join("cluster-secret");
    if !path.exists() {
        let mut bytes = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut bytes);
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .with_context(|| format!("cannot create the cluster secret {}", path.display()))?;
        writeln!(f, "{hex}")?;
    }
    Ok(path)
}

impl LocalCluster {
    /// Starts the nodes with data and logs under `dir/node-N/`, secured with `secure` if given,
    /// and waits until each is listed in Metadata (or `stop` is set).
    pub fn start(binary: &Path, dir: &Path, secure: Option<&SecureFiles>, stop: &AtomicBool) -> Result<LocalCluster> {
        await_ports_free()?;
        let secret = cluster_secret(dir)?;
        let voters: Vec<String> = (1..=NODES)
            .map(|id| format!("{id}@127.0.0.1:{}", kafka_port(id) + 1))
            .collect();
        let voters = voters.join(",");
        let mut nodes = Vec::new();
        for id in 1..=NODES {
            let node_dir = dir.join(format!("node-{id}"));
            std::fs::create_dir_all(&node_dir)?;
            let listener = format!("127.0.0.1:{}", kafka_port(id));
            let mut cmd = Command::new(binary);
            cmd.arg("--node-id")
                .arg(id.to_string())
                .arg("--data-dir")
                .arg(node_dir.join("data"));
            match secure {
                None => {
                    cmd.arg("--listen").arg(&listener);
                }
                Some(secure) => {
                    for setting in secure.broker_settings(id, &listener)? {
                        cmd.arg("--set").arg(setting);
                    }
                    // In the environment, not the command line, which every user can list.
                    cmd.env("SLUICE_ADD_SCRAM", secure.add_scram());
                }
            }
            cmd.arg("--controller-listen")
                .arg(format!("127.0.0.1:{}", kafka_port(id) + 1))
                .arg("--voters")
                .arg(&voters)
                .arg("--cluster-secret-file")
                .arg(&secret)
                .arg("--set")
                .arg(format!("metrics.listen={}", console_address(id)))
                .env("NO_COLOR", "1");
            nodes.push(ChildProcess::spawn(
                &format!("broker {id}"),
                cmd,
                &node_dir.join("sluice.log"),
            )?);
        }
        let bootstrap = (1..=NODES)
            .map(|id| format!("127.0.0.1:{}", kafka_port(id)))
            .collect::<Vec<_>>()
            .join(",");
        let observer = match secure {
            Some(secure) => secure.client_security(ADMIN)?,
            None => ClientSecurity::default(),
        };
        let mut cluster = LocalCluster {
            nodes,
            bootstrap,
            observer,
        };
        cluster.await_ready(stop)?;
        Ok(cluster)
    }

    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    /// A client that only reads metadata and watermarks (never joins a group), logged in as
    /// the administrator when the cluster is secured.
    pub fn observer(&self) -> Result<BaseConsumer> {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", &self.bootstrap)
            .set("client.id", "sluice-demo-run");
        self.observer.apply(&mut config);
        Ok(config.create()?)
    }

    /// Fails, naming the log, if a node has exited.
    pub fn check_running(&mut self) -> Result<()> {
        self.nodes.iter_mut().try_for_each(ChildProcess::check_running)
    }

    fn await_ready(&mut self, stop: &AtomicBool) -> Result<()> {
        let client = self.observer()?;
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            self.check_running()?;
            if stop.load(Ordering::Relaxed) {
                bail!("stopped before the cluster was ready");
            }
            let listed = client
                .fetch_metadata(None, Duration::from_secs(1))
                .map(|m| m.brokers().len())
                .unwrap_or(0);
            if listed == usize::from(NODES) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let secured = if self.observer == ClientSecurity::default() {
                    ""
                } else {
                    " (secured: the demo logs in as admin, whom the brokers create at start from SLUICE_ADD_SCRAM; \
                     a cluster made with other passwords refuses it: delete --data-dir to start over)"
                };
                bail!(
                    "only {listed} of {NODES} brokers were up after {READY_TIMEOUT:?}{secured}; see the logs in {}",
                    self.nodes[0]
                        .log()
                        .parent()
                        .and_then(Path::parent)
                        .unwrap_or(Path::new("."))
                        .display()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// SIGTERM to every node at once (each shuts down in a controlled way), then waits for
    /// each; one still running after [`STOP_TIMEOUT`] is killed.
    pub fn stop(mut self) -> Result<()> {
        let mut failures = Vec::new();
        for node in &mut self.nodes {
            node.send_sigterm()?;
        }
        for node in &mut self.nodes {
            if let Err(e) = node.terminate(STOP_TIMEOUT) {
                failures.push(format!("{e:#}"));
            }
        }
        if !failures.is_empty() {
            bail!("{}", failures.join("; "));
        }
        Ok(())
    }
}

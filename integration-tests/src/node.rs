//! One real `sluice` broker process on a loopback port (or on its own address inside a network
//! namespace, see [`crate::faults::Net`]), started as `node.json` describes ([`crate::node_spec`]).

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use tempfile::TempDir;

use crate::faults::LazyFsMount;
use crate::node_spec::{fill, fill_all, node_spec};
use crate::security::{ClientSecurity, KafkaStream};
use crate::wire;

/// How to start a node. `Default` gives node 1 on a fresh temporary data dir and a free port.
#[derive(Debug, Clone)]
pub struct NodeOptions {
    pub node_id: i32,
    /// Data directory to use; `None` creates one inside the node's temporary work dir.
    pub data_dir: Option<PathBuf>,
    /// Port to listen on; `None` picks a free loopback port.
    pub port: Option<u16>,
    /// Extra `--set key=value` broker settings (Kafka property names).
    pub settings: Vec<(String, String)>,
    /// Any further command-line arguments (e.g. `--voters` for a cluster, later).
    pub extra_args: Vec<String>,
    /// How long to wait for the broker to answer ApiVersions and Metadata after spawning
    /// (`ready.timeout_ms` in `node.json` by default).
    pub ready_timeout: Duration,
    /// On drop, save the broker log and print its tail (captured by libtest, so shown only for
    /// failing tests). Off for non-test users such as the benchmark.
    pub report_on_drop: bool,
    /// Start the broker with this open-files limit (`RLIMIT_NOFILE`, soft and hard), as
    /// `ulimit -n` would; `None` inherits the harness's.
    pub open_files_limit: Option<u64>,
    /// Run the broker inside this network namespace (`ip netns exec NAME sluice ...`); `None`
    /// runs it in the harness's.
    pub netns: Option<String>,
    /// Address to listen on and advertise; `None` is `host` in `node.json` (loopback).
    pub host: Option<IpAddr>,
    /// Put the data dir on a `sluice-lazyfs` mount over `<work dir>/lazyfs-backing`, which
    /// loses unsynced writes on [`crate::faults::power_cut`].
    pub lazyfs: bool,
    /// Start with one listener of this name (`listeners=NAME://addr`, `named_listeners` in
    /// `node.json`) instead of `--listen`/`--advertise`, e.g. `SASL_SSL`, whose security
    /// protocol Kafka's default `listener.security.protocol.map` makes SASL_SSL.
    pub listener: Option<String>,
    /// How the readiness probe and the harness's typed requests reach the listener (TLS,
    /// SASL); plaintext by default.
    pub client_security: ClientSecurity,
    /// Environment variables holding secrets (e.g. `SLUICE_ADD_SCRAM`'s passwords): set after
    /// the command line is written to the node's log, so they appear in no log.
    pub secret_env: Vec<(String, String)>,
}

impl Default for NodeOptions {
    fn default() -> Self {
        Self {
            node_id: 1,
            data_dir: None,
            port: None,
            settings: Vec::new(),
            extra_args: Vec::new(),
            ready_timeout: node_spec().ready.timeout(),
            report_on_drop: true,
            open_files_limit: None,
            netns: None,
            host: None,
            lazyfs: false,
            listener: None,
            client_security: ClientSecurity::default(),
            secret_env: Vec::new(),
        }
    }
}

impl NodeOptions {
    /// Adds a `--set key=value` broker setting.
    pub fn set(mut self, key: &str, value: impl ToString) -> Self {
        self.settings.push((key.to_string(), value.to_string()));
        self
    }
    pub fn data_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.data_dir = Some(dir.into());
        self
    }
    pub fn port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }
    /// Starts the broker under an open-files limit of `limit` (soft and hard).
    pub fn open_files_limit(mut self, limit: u64) -> Self {
        self.open_files_limit = Some(limit);
        self
    }
    /// Starts the broker with the one listener `listeners=NAME://addr` ([`Self::listener`]).
    pub fn listener(mut self, name: &str) -> Self {
        self.listener = Some(name.to_string());
        self
    }
    /// Reaches the listener over TLS and/or SASL ([`Self::client_security`]).
    pub fn client_security(mut self, security: ClientSecurity) -> Self {
        self.client_security = security;
        self
    }
}

/// A running (or stopped) broker process. Dropping it kills the process; if the thread is
/// panicking (a failed test), the work dir is kept and the tail of the broker log is printed.
/// `SLUICE_IT_KEEP=1` keeps every work dir (data and `sluice.log`) for inspection.
pub struct SluiceNode {
    opts: NodeOptions,
    binary: PathBuf,
    /// Before `work_dir`: unmounted before the work dir is removed.
    lazyfs: Option<LazyFsMount>,
    work_dir: Option<TempDir>,
    work_path: PathBuf,
    data_dir: PathBuf,
    log_path: PathBuf,
    addr: SocketAddr,
    child: Option<Child>,
}

impl SluiceNode {
    /// Spawns the broker and waits until it answers ApiVersions and Metadata.
    pub fn start(opts: NodeOptions) -> Result<Self> {
        let mut node = Self::unstarted(opts, 0)?;
        let fixed_port = node.opts.port;
        let mut last_err = None;
        // Another process may take the port between our probe and the broker's bind.
        for _ in 0..node_spec().start_attempts {
            let port = match fixed_port {
                Some(p) => p,
                None => free_loopback_port()?,
            };
            node.addr = node.addr_on(port);
            match node.spawn_and_await_ready() {
                Ok(()) => return Ok(node),
                Err(e) => {
                    // Only an early exit can be a lost race for the port; a broker that runs but
                    // never becomes ready would not do better on another port.
                    let exited = node.child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(Some(_))));
                    node.kill_quietly();
                    if fixed_port.is_some() || !exited {
                        return Err(e.context(node.failure_context()));
                    }
                    last_err = Some(e);
                }
            }
        }
        let e = last_err.expect("at least one attempt");
        Err(e.context(node.failure_context()))
    }

    /// Spawns the broker on `opts.port` without waiting for it to be ready: members of a
    /// cluster become ready only together, once a quorum of them runs. Pair with [`Self::wait_ready`].
    pub fn spawn(opts: NodeOptions) -> Result<Self> {
        let port = opts.port.context("spawn needs a fixed port (NodeOptions::port)")?;
        let mut node = Self::unstarted(opts, port)?;
        node.spawn_process()?;
        Ok(node)
    }

    /// A node with its work dir and paths laid out, not yet running.
    fn unstarted(opts: NodeOptions, port: u16) -> Result<Self> {
        let spec = &node_spec().work_dir;
        let binary = sluice_binary()?;
        let work_dir = tempfile::Builder::new().prefix(&spec.prefix).tempdir()?;
        let work_path = work_dir.path().to_path_buf();
        let data_dir = opts.data_dir.clone().unwrap_or_else(|| work_path.join(&spec.data_dir));
        let log_path = work_path.join(&spec.log_file);
        let addr = SocketAddr::new(opts.host.unwrap_or_else(|| loopback_addr(0).ip()), port);
        Ok(Self {
            opts,
            binary,
            lazyfs: None,
            work_dir: Some(work_dir),
            work_path,
            data_dir,
            log_path,
            addr,
            child: None,
        })
    }

    /// `port` on this node's host.
    fn addr_on(&self, port: u16) -> SocketAddr {
        SocketAddr::new(self.addr.ip(), port)
    }

    /// Waits until a spawned broker answers ApiVersions and lists itself in Metadata.
    pub fn wait_ready(&mut self) -> Result<()> {
        self.await_ready().map_err(|e| e.context(self.failure_context()))
    }

    /// Starts a killed or terminated broker again on the same port and data dir, without
    /// waiting (a cluster member may need its peers to become ready).
    pub fn respawn(&mut self) -> Result<()> {
        self.kill()?;
        self.spawn_process()
    }

    /// `host:port` for client `bootstrap.servers`.
    pub fn bootstrap(&self) -> String {
        self.addr.to_string()
    }
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
    pub fn node_id(&self) -> i32 {
        self.opts.node_id
    }
    /// How clients reach this node's listener (TLS, SASL), as it was started.
    pub fn client_security(&self) -> &ClientSecurity {
        &self.opts.client_security
    }
    /// Reaches the node as `security` says from now on (the readiness probe of a restart
    /// included), e.g. after the password the harness logs in with was changed.
    pub fn set_client_security(&mut self, security: ClientSecurity) {
        self.opts.client_security = security;
    }
    /// A connection to the node's listener, over TLS and logged in as [`Self::client_security`]
    /// says, with read/write timeouts `io_timeout`.
    pub fn connect(&self, io_timeout: Duration) -> Result<KafkaStream> {
        self.opts.client_security.connect(self.addr, io_timeout)
    }
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }
    /// The data dir's lazyfs mount, if started with [`NodeOptions::lazyfs`] (and spawned once).
    pub fn lazyfs(&self) -> Option<&LazyFsMount> {
        self.lazyfs.as_ref()
    }
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// Whether the process is still running (reaps it if it has exited).
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// How the process ended, or `None` while it runs (reaps it if it has exited).
    pub fn exit_status(&mut self) -> Result<Option<ExitStatus>> {
        match self.child.as_mut() {
            Some(c) => Ok(c.try_wait()?),
            None => bail!("broker is not started"),
        }
    }

    /// Fails with the log tail if the broker process has exited.
    pub fn assert_running(&mut self) -> Result<()> {
        if let Some(c) = self.child.as_mut() {
            if let Some(status) = c.try_wait()? {
                bail!("broker exited with {status}\n{}", self.failure_context());
            }
            return Ok(());
        }
        bail!("broker is not started")
    }

    /// SIGKILL: the process gets no chance to flush or clean up. Waits until it is reaped.
    pub fn kill(&mut self) -> Result<()> {
        if let Some(mut c) = self.child.take() {
            c.kill()
                .or_else(|e| if c.try_wait()?.is_some() { Ok(()) } else { Err(e) })?;
            c.wait()?;
            self.note("SIGKILL sent, process reaped")?;
        }
        Ok(())
    }

    /// SIGTERM, then waits up to `timeout` for a graceful exit. If the broker is still running at
    /// the deadline it is killed and an error is returned.
    pub fn terminate(&mut self, timeout: Duration) -> Result<ExitStatus> {
        let Some(mut c) = self.child.take() else {
            bail!("broker is not running")
        };
        // SAFETY: plain kill(2) on a pid we spawned and have not reaped yet.
        let rc = unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGTERM) };
        if rc != 0 {
            bail!("kill(SIGTERM): {}", std::io::Error::last_os_error());
        }
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = c.try_wait()? {
                self.note(&format!("exited after SIGTERM with {status}"))?;
                return Ok(status);
            }
            if Instant::now() >= deadline {
                let _ = c.kill();
                let _ = c.wait();
                bail!(
                    "broker did not exit within {timeout:?} of SIGTERM\n{}",
                    self.failure_context()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGSTOP: the process stays alive but runs no code (no heartbeats, no fetches, no answers),
    /// like a long GC pause or a frozen VM. Pair with [`Self::resume`].
    pub fn pause(&mut self) -> Result<()> {
        self.signal(libc::SIGSTOP, "SIGSTOP")
    }

    /// SIGCONT after [`Self::pause`].
    pub fn resume(&mut self) -> Result<()> {
        self.signal(libc::SIGCONT, "SIGCONT")
    }

    fn signal(&mut self, signal: libc::c_int, name: &str) -> Result<()> {
        let Some(c) = self.child.as_mut() else {
            bail!("broker is not running")
        };
        if let Some(status) = c.try_wait()? {
            bail!("broker already exited with {status}");
        }
        // SAFETY: plain kill(2) on a pid we spawned and have not reaped yet.
        let rc = unsafe { libc::kill(c.id() as libc::pid_t, signal) };
        if rc != 0 {
            bail!("kill({name}): {}", std::io::Error::last_os_error());
        }
        self.note(&format!("{name} sent"))
    }

    /// Starts the broker again on the same data dir and port (killing it first if it still runs).
    pub fn restart(&mut self) -> Result<()> {
        self.kill()?;
        self.spawn_and_await_ready().map_err(|e| {
            self.kill_quietly();
            e.context(self.failure_context())
        })
    }

    /// The last `lines` lines of the broker's captured stdout/stderr.
    pub fn log_tail(&self, lines: usize) -> String {
        let mut text = String::new();
        if let Ok(mut f) = File::open(&self.log_path) {
            let len = f.metadata().map(|m| m.len()).unwrap_or(0);
            let _ = f.seek(SeekFrom::Start(len.saturating_sub(256 * 1024)));
            let _ = f.read_to_string(&mut text);
        }
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    fn failure_context(&self) -> String {
        format!(
            "sluice node {} at {}{} (binary {}, log {}):\n--- last broker log lines ---\n{}\n---",
            self.opts.node_id,
            self.addr,
            self.opts
                .netns
                .as_ref()
                .map(|ns| format!(" in namespace {ns}"))
                .unwrap_or_default(),
            self.binary.display(),
            self.log_path.display(),
            self.log_tail(40)
        )
    }

    fn note(&self, line: &str) -> Result<()> {
        let mut f = OpenOptions::new().create(true).append(true).open(&self.log_path)?;
        writeln!(f, "{}", fill(&node_spec().log_note, &[("note", line)])?)?;
        Ok(())
    }

    fn spawn_and_await_ready(&mut self) -> Result<()> {
        self.spawn_process()?;
        self.await_ready()
    }

    fn spawn_process(&mut self) -> Result<()> {
        let spec = node_spec();
        std::fs::create_dir_all(&self.data_dir)?;
        if self.opts.lazyfs && self.lazyfs.is_none() {
            let w = &self.work_path;
            let mount = LazyFsMount::mount(
                &w.join("lazyfs-backing"),
                &self.data_dir,
                &w.join("lazyfs.sock"),
                &w.join("lazyfs.log"),
            )?;
            self.lazyfs = Some(mount);
        }
        // `ip netns exec` enters the namespace and execs the broker in place (it forks only in
        // batch mode), so the child's pid is the broker's and signals reach it; `await_ready`
        // checks that.
        let mut cmd = match &self.opts.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(&self.binary);
                c
            }
            None => Command::new(&self.binary),
        };
        let (node_id, data_dir, addr) = (
            self.opts.node_id.to_string(),
            self.data_dir.display().to_string(),
            self.addr.to_string(),
        );
        let node = [("node_id", node_id.as_str()), ("data_dir", &data_dir), ("addr", &addr)];
        let mut listener = Vec::new();
        match &self.opts.listener {
            None => cmd.args(fill_all(&spec.args, &node)?),
            Some(name) => {
                // One listener named for its protocol, on the node's address.
                let named = &spec.named_listeners;
                let (host, port) = (self.addr.ip().to_string(), self.addr.port().to_string());
                let listeners = fill(&named.listener, &[("name", name), ("host", &host), ("port", &port)])?;
                let protocol_map = fill(&named.protocol, &[("name", name), ("protocol", name)])?;
                let values = [
                    ("listeners", listeners.as_str()),
                    ("protocol_map", protocol_map.as_str()),
                ];
                for (key, value) in &named.settings {
                    listener.push((key.clone(), fill(value, &values)?));
                }
                cmd.args(fill_all(&named.args, &node)?)
            }
        };
        // Every test node's settings first, so the node's own can override them.
        let named = listener.iter().map(|(k, v)| (k.as_str(), v.as_str()));
        let defaults = spec.settings.iter().map(|(k, v)| (k.as_str(), v.as_str()));
        let own = self.opts.settings.iter().map(|(k, v)| (k.as_str(), v.as_str()));
        for (k, v) in named.chain(defaults).chain(own) {
            cmd.arg(&spec.setting_flag)
                .arg(fill(&spec.setting, &[("key", k), ("value", v)])?);
        }
        cmd.args(&self.opts.extra_args);
        for (k, v) in &spec.env_if_unset {
            if std::env::var_os(k).is_none() {
                cmd.env(k, v);
            }
        }
        cmd.envs(&spec.env);
        self.note(&format!("starting {cmd:?}"))?;
        cmd.envs(self.opts.secret_env.iter().map(|(k, v)| (k, v)));
        let log = OpenOptions::new().create(true).append(true).open(&self.log_path)?;
        cmd.stdin(Stdio::null()).stdout(log.try_clone()?).stderr(log);
        if let Some(limit) = self.opts.open_files_limit {
            use std::os::unix::process::CommandExt;
            let rlimit = libc::rlimit {
                rlim_cur: limit as libc::rlim_t,
                rlim_max: limit as libc::rlim_t,
            };
            // SAFETY: between fork and exec only setrlimit runs, an async-signal-safe call
            // that touches no memory but the rlimit copied into the closure.
            unsafe {
                cmd.pre_exec(move || {
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &rlimit) == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                });
            }
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("spawn {}", self.binary.display()))?;
        self.child = Some(child);
        Ok(())
    }

    /// Ready = the process is alive, accepts TCP (and, on a secured listener, completes the TLS
    /// handshake and the SASL login of [`NodeOptions::client_security`]), answers ApiVersions v0
    /// without error, and lists itself at the expected port in a Metadata response. A SASL
    /// login fails until the node has created its `--add-scram` users, which it does once
    /// registered, so this also waits for them. The probe is hand-encoded on purpose:
    /// readiness must not depend on one client library's quirks, so a client incompatibility
    /// fails the tests that use that client, with that client's error.
    fn await_ready(&mut self) -> Result<()> {
        let deadline = Instant::now() + self.opts.ready_timeout;
        let mut last = String::from("not attempted");
        while Instant::now() < deadline {
            if let Some(status) = self.child.as_mut().expect("spawned").try_wait()? {
                bail!("broker exited during start-up with {status} (last probe: {last})");
            }
            match self.probe_once() {
                Ok(()) => return self.check_child_is_the_broker(),
                Err(e) => last = format!("{e:#}"),
            }
            std::thread::sleep(node_spec().ready.poll_interval());
        }
        bail!("broker not ready within {:?}: {last}", self.opts.ready_timeout)
    }

    /// The child process runs the broker binary itself, not a wrapper (`ip netns exec`) that
    /// would take the signals meant for the broker.
    fn check_child_is_the_broker(&self) -> Result<()> {
        if self.opts.netns.is_none() {
            return Ok(());
        }
        let Some(pid) = self.pid() else {
            bail!("broker is not started")
        };
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).with_context(|| format!("/proc/{pid}/exe"))?;
        let binary = std::fs::canonicalize(&self.binary).unwrap_or_else(|_| self.binary.clone());
        let name = |p: &Path| {
            p.file_name()
                .map(|n| n.to_string_lossy().trim_end_matches(" (deleted)").to_string())
        };
        if name(&exe) != name(&binary) {
            bail!(
                "process {pid} runs {} instead of the broker {}: signals to it would not reach the broker",
                exe.display(),
                self.binary.display()
            );
        }
        Ok(())
    }

    fn probe_once(&self) -> Result<()> {
        let spec = &node_spec().ready;
        if spec.api_versions_version != 0 {
            bail!(
                "the readiness probe speaks ApiVersions v0 only, node.json asks for v{}",
                spec.api_versions_version
            );
        }
        let mut stream = self.connect(spec.connect_timeout())?;
        let versions = wire::api_versions_v0(&mut stream, 1)?;
        if versions.error_code != wire::ERROR_NONE {
            bail!("ApiVersions v0 error code {}", versions.error_code);
        }
        let range = versions
            .range(wire::API_KEY_METADATA)
            .context("Metadata not advertised")?;
        let [lowest, highest] = spec.metadata_versions;
        let version = range.min_version.max(lowest);
        if version > range.max_version.min(highest) {
            bail!(
                "no Metadata version of {lowest}..={highest} in the advertised {}..={}",
                range.min_version,
                range.max_version
            );
        }
        let brokers = wire::metadata_brokers(&mut stream, version, 2)?;
        match brokers.iter().find(|b| b.node_id == self.opts.node_id) {
            Some(b) if b.port == i32::from(self.addr.port()) => Ok(()),
            Some(b) => bail!("Metadata advertises {}:{}, expected {}", b.host, b.port, self.addr),
            None => bail!("Metadata does not list broker {}: {brokers:?}", self.opts.node_id),
        }
    }

    fn kill_quietly(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for SluiceNode {
    fn drop(&mut self) {
        self.kill_quietly();
        let keep_requested = std::env::var_os("SLUICE_IT_KEEP").is_some_and(|v| v == "1");
        if keep_requested || std::thread::panicking() {
            if let Some(dir) = self.work_dir.take() {
                let kept = dir.keep();
                eprintln!(
                    "\n[sluice harness] kept work dir {} (data {}, log {})\n{}",
                    kept.display(),
                    self.data_dir.display(),
                    self.log_path.display(),
                    self.failure_context()
                );
            }
        } else if self.opts.report_on_drop {
            // A test that fails by returning Err drops its node without panicking, so there is
            // no way to tell failure from success here. Save the log and print its tail anyway:
            // libtest shows a test's captured output only when the test fails.
            let saved = self.save_log_copy();
            eprintln!(
                "\n[sluice harness] node {} at {} (binary {}) stopped; full broker log: {}\n\
                 --- last broker log lines ---\n{}\n---",
                self.opts.node_id,
                self.addr,
                self.binary.display(),
                saved.as_deref().unwrap_or(&self.log_path).display(),
                self.log_tail(40)
            );
        }
        let _ = &self.work_path;
    }
}

impl SluiceNode {
    /// Copies the broker log to `$TMPDIR/sluice-it-logs/<test name>-node<id>.log` (one file per
    /// test and node, overwritten by the next run) so it outlives the work dir.
    fn save_log_copy(&self) -> Option<PathBuf> {
        let thread = std::thread::current();
        let test = thread.name().unwrap_or("unnamed").replace("::", "-");
        let dir = std::env::temp_dir().join("sluice-it-logs");
        let dest = dir.join(format!("{test}-node{}.log", self.opts.node_id));
        std::fs::create_dir_all(&dir).ok()?;
        std::fs::copy(&self.log_path, &dest).ok()?;
        Some(dest)
    }
}

/// Ports test brokers listen on: below the kernel's ephemeral range (32768-60999 by default),
/// so that the source port of an outgoing connection from any test can never take a killed
/// node's port before it is respawned there, and clear of the demo's fixed ports (x9092 ...).
const TEST_PORTS: std::ops::Range<u16> = 21_000..29_000;

/// `GET /metrics` from a node's `metrics.listen` address: each unlabelled sample's value by
/// name (a labelled sample keeps its labels in the name).
pub fn scrape_metrics(addr: SocketAddr) -> Result<std::collections::BTreeMap<String, f64>> {
    let mut stream = std::net::TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(stream, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut text = String::new();
    stream.read_to_string(&mut text)?;
    let body = text.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    Ok(body
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once(' '))
        .filter_map(|(name, value)| Some((name.to_string(), value.trim().parse().ok()?)))
        .collect())
}

/// Ports this process handed out lately, not handed out again: a test that kills a node and
/// respawns it on the same ports would otherwise lose them to another test of the same run
/// drawing them while the node is down (seen: "Address already in use" on a respawn).
const RECENT_PORTS: usize = 4_000;

/// Picks a loopback port in [`TEST_PORTS`] that is free right now (bound, then released) and
/// not among the last [`RECENT_PORTS`] this process handed out.
pub fn free_loopback_port() -> Result<u16> {
    use std::collections::{HashSet, VecDeque};
    use std::hash::{BuildHasher, Hasher};
    use std::sync::Mutex;
    static HANDED_OUT: Mutex<(VecDeque<u16>, Option<HashSet<u16>>)> = Mutex::new((VecDeque::new(), None));
    let span = u64::from(TEST_PORTS.end - TEST_PORTS.start);
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let (order, set) = &mut *handed_out;
    let set = set.get_or_insert_with(HashSet::new);
    for _ in 0..1_000 {
        // Each `RandomState` is freshly keyed, so this is a random draw without a crate.
        let draw = std::collections::hash_map::RandomState::new().build_hasher().finish();
        let port = TEST_PORTS.start + (draw % span) as u16;
        if set.contains(&port) || TcpListener::bind(loopback_addr(port)).is_err() {
            continue;
        }
        if order.len() == RECENT_PORTS {
            if let Some(oldest) = order.pop_front() {
                set.remove(&oldest);
            }
        }
        order.push_back(port);
        set.insert(port);
        return Ok(port);
    }
    bail!("no free loopback port in {TEST_PORTS:?} after 1000 tries")
}

/// `port` on the loopback host test nodes listen on (`host` in `node.json`).
pub fn loopback_addr(port: u16) -> SocketAddr {
    let host: std::net::IpAddr = node_spec().host.parse().expect("node.json host is an IP address");
    SocketAddr::new(host, port)
}

/// The broker binary, looked up as `binary` in `node.json` says: `$SLUICE_BIN`, else
/// `<target>/release/sluice`, else `<target>/debug/sluice`, where `<target>` is
/// `$CARGO_TARGET_DIR` (cargo builds there when it is set) or `<workspace>/target`.
pub fn sluice_binary() -> Result<PathBuf> {
    node_spec().binary.locate(&workspace_root())
}

/// The cargo workspace root (the parent of this crate's directory).
pub fn workspace_root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(Path::to_path_buf).unwrap_or(manifest)
}

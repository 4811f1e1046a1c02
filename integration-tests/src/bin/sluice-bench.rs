//! Benchmark of release `sluice` brokers with rdkafka clients on loopback: one node (the
//! default) or a cluster of `--nodes N` with every topic at replication factor N:
//! (a) maximum produce throughput with acks=all for 2 KB and 100-byte records,
//! (b) produce-to-consume latency at a fixed rate, each of `--consumers` consumers in a consumer
//!     group of its own (subscribed, committing offsets with librdkafka's default auto commit,
//!     or not at all with `--no-commit`) reading every partition and measuring its own latency;
//!     the measured phase starts once every consumer has received the warm-up record of every
//!     partition, so group joins and connection set-up are not measured,
//!     and the producer's ack latency (send to delivery report) of the same records,
//! (c) CPU seconds and peak RSS of every broker over each phase (from /proc),
//! (d) produce throughput of 2 KB records in transactions (`--records-txn N`, default 100,000;
//!     0 skips it): one transactional producer (`transactional.id`, idempotent, acks=all)
//!     committing a transaction every `--txn-ms` (default 100), as Kafka's ProducerPerformance
//!     `--transaction-duration-ms` does, so its cost shows beside the idempotent-free phase (a).
//!
//! Usage: sluice-bench [--nodes N] [--records-2k N] [--records-100b N] [--rate MSGS_PER_S]
//!                     [--duration-s S] [--partitions P] [--consumers C]
//!                     [--phase all|throughput|latency] [--no-commit] [--set key=value]...
//!                     [--json PATH] [--label NAME] [--linger-ms MS] [--records-txn N] [--txn-ms MS]
//!                     [--bootstrap HOST:PORT --broker-pids ID:PID,... [--replication-factor R]]
//!                     [--create-topics NAME,...]
//!                     [--security PLAINTEXT|SASL_SSL [--ssl-ca PEM --sasl-username U --sasl-password-file F]]
//!                     [--racks]
//! `--linger-ms` is the latency phase's producer's `linger.ms` (default 5, librdkafka's own
//! default, which the throughput phases always use); with
//! another value the latency phase uses the topic `bench-latency-linger<MS>`, so one cluster
//! can be measured with both. `--records-100b 0` skips that phase. `--consumers` defaults to 1 on one node and 2 on a
//! cluster. The broker binary is found like the tests find it ($SLUICE_BIN first).
//! `--json` writes every figure of the printed table, machine-readable, with `--label` in it.
//! `--bootstrap` measures brokers someone else started (e.g. Apache Kafka, by
//! scripts/bench_against_kafka.py): `--broker-pids` names their processes for CPU and RSS, and
//! topics get `--replication-factor` replicas (default: one per pid). `--create-topics` creates
//! more topics like the bench's own (same partitions and replicas, full ISR awaited) for other
//! clients to use after this run.
//! `--security SASL_SSL` measures brokers whose only listener speaks TLS and SASL with
//! SCRAM-SHA-512, every client logging in over TLS: brokers the bench starts get a certificate
//! from a test CA made for the run and the user `admin` (`SLUICE_ADD_SCRAM`); for `--bootstrap`
//! brokers, `--ssl-ca` is the CA their certificates chain to and `--sasl-username` /
//! `--sasl-password-file` (a file holding the password, so it is in no command line or log)
//! the SCRAM-SHA-512 login. The default, `PLAINTEXT`, is no security at all.
//! `--racks` (brokers the bench starts, `--nodes` > 1) puts node N in `broker.rack=rack-N`
//! and latency consumer C (its group) in `client.rack=rack-(C mod nodes + 1)`, and prints how
//! many of the bytes consumers read in the latency phase crossed racks (each broker's
//! `sluice_consumer_fetch_bytes_total`); add `--set
//! replica.selector.class=org.apache.kafka.common.replica.RackAwareReplicaSelector` to have
//! them read in their own rack (KIP-392).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use rdkafka::admin::{AdminClient, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::{ClientConfig, FromClientConfigAndContext};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::ClientContext;
use serde_json::{json, Value};
use sluice_integration_tests::node::{free_loopback_port, loopback_addr, scrape_metrics};
use sluice_integration_tests::pki::{pem_store_settings, TestCa};
use sluice_integration_tests::security::{SaslLogin, SaslMechanism, TlsClient};
use sluice_integration_tests::{clients, procstat, retry_port_races, ClientSecurity, Cluster, NodeOptions, SluiceNode};
use std::net::SocketAddr;
use tempfile::TempDir;

struct Args {
    nodes: usize,
    /// `--racks`: each node in a rack of its own, each latency consumer naming one.
    racks: bool,
    consumers: Option<usize>,
    records_2k: u64,
    records_100b: u64,
    /// 2 KB records produced in transactions of `txn_ms` (0: no transactional phase).
    records_txn: u64,
    txn_ms: u64,
    rate: u64,
    duration_s: u64,
    partitions: i32,
    phase: String,
    commit: bool,
    settings: Vec<(String, String)>,
    json: Option<PathBuf>,
    label: String,
    /// Brokers started by someone else: bootstrap address and (node id, pid) of each.
    external: Option<(String, Vec<(i32, u32)>)>,
    replication_factor: Option<i16>,
    create_topics: Vec<String>,
    linger_ms: u32,
    /// `PLAINTEXT` or `SASL_SSL` (`--security`).
    security: String,
    /// For `--bootstrap` brokers with `SASL_SSL`: the CA, user and password.
    ssl_ca: Option<PathBuf>,
    sasl_login: Option<(String, String)>,
}

fn parse_args() -> Result<Args> {
    let mut a = Args {
        nodes: 1,
        consumers: None,
        records_2k: 200_000,
        records_100b: 1_000_000,
        records_txn: 100_000,
        txn_ms: 100,
        rate: 20_000,
        duration_s: 20,
        partitions: 3,
        phase: "all".into(),
        racks: false,
        commit: true,
        settings: Vec::new(),
        json: None,
        label: "sluice-bench".into(),
        external: None,
        replication_factor: None,
        create_topics: Vec::new(),
        linger_ms: 5,
        security: "PLAINTEXT".into(),
        ssl_ca: None,
        sasl_login: None,
    };
    let (mut sasl_username, mut sasl_password) = (None, None);
    let mut bootstrap = None;
    let mut broker_pids = Vec::new();
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--nodes" => a.nodes = val()?.parse()?,
            "--consumers" => a.consumers = Some(val()?.parse()?),
            "--records-2k" => a.records_2k = val()?.parse()?,
            "--records-100b" => a.records_100b = val()?.parse()?,
            "--records-txn" => a.records_txn = val()?.parse()?,
            "--txn-ms" => a.txn_ms = val()?.parse()?,
            "--rate" => a.rate = val()?.parse()?,
            "--duration-s" => a.duration_s = val()?.parse()?,
            "--partitions" => a.partitions = val()?.parse()?,
            "--phase" => a.phase = val()?,
            "--no-commit" => a.commit = false,
            "--racks" => a.racks = true,
            "--json" => a.json = Some(val()?.into()),
            "--label" => a.label = val()?,
            "--bootstrap" => bootstrap = Some(val()?),
            "--broker-pids" => {
                for entry in val()?.split(',') {
                    let (id, pid) = entry.split_once(':').context("--broker-pids expects ID:PID,...")?;
                    broker_pids.push((id.parse()?, pid.parse()?));
                }
            }
            "--replication-factor" => a.replication_factor = Some(val()?.parse()?),
            "--linger-ms" => a.linger_ms = val()?.parse()?,
            "--create-topics" => a.create_topics.extend(val()?.split(',').map(String::from)),
            "--security" => a.security = val()?.to_uppercase(),
            "--ssl-ca" => a.ssl_ca = Some(val()?.into()),
            "--sasl-username" => sasl_username = Some(val()?),
            "--sasl-password-file" => {
                let path = val()?;
                let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
                sasl_password = Some(text.trim_end_matches(['\r', '\n']).to_string());
            }
            "--set" => {
                let kv = val()?;
                let (k, v) = kv.split_once('=').context("--set expects key=value")?;
                a.settings.push((k.into(), v.into()));
            }
            "-h" | "--help" => {
                println!("see the header of integration-tests/src/bin/sluice-bench.rs");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other}"),
        }
    }
    ensure!(
        ["all", "throughput", "latency"].contains(&a.phase.as_str()),
        "bad --phase"
    );
    ensure!(a.nodes >= 1, "--nodes must be at least 1");
    ensure!(
        !a.racks || (a.nodes > 1 && bootstrap.is_none()),
        "--racks needs a cluster the bench starts (--nodes 2 or more, no --bootstrap)"
    );
    match bootstrap {
        Some(b) => {
            ensure!(!broker_pids.is_empty(), "--bootstrap needs --broker-pids");
            a.external = Some((b, broker_pids));
        }
        None => ensure!(
            broker_pids.is_empty() && a.replication_factor.is_none(),
            "--broker-pids and --replication-factor go with --bootstrap"
        ),
    }
    ensure!(a.consumers != Some(0), "--consumers must be at least 1");
    ensure!(a.txn_ms >= 1, "--txn-ms must be at least 1");
    ensure!(
        ["PLAINTEXT", "SASL_SSL"].contains(&a.security.as_str()),
        "--security is PLAINTEXT or SASL_SSL, not {}",
        a.security
    );
    let client_settings = a.ssl_ca.is_some() || sasl_username.is_some() || sasl_password.is_some();
    match (&a.external, a.security.as_str()) {
        (Some(_), "SASL_SSL") => {
            ensure!(
                a.ssl_ca.is_some() && sasl_username.is_some() && sasl_password.is_some(),
                "--security SASL_SSL with --bootstrap needs --ssl-ca, --sasl-username and --sasl-password-file"
            );
            a.sasl_login = sasl_username.zip(sasl_password);
        }
        _ => ensure!(
            !client_settings,
            "--ssl-ca, --sasl-username and --sasl-password-file go with --bootstrap and --security SASL_SSL"
        ),
    }
    Ok(a)
}

/// Delivery opaque of a record whose ack latency is not measured; the others carry their
/// scheduled send time (ns since [`Delivery::epoch`]).
const UNTIMED: usize = usize::MAX;

/// Counts delivery reports and keeps the ack latency (send to delivery report) of timed
/// records in a buffer sized up front, so the hot loop allocates nothing per message.
struct Delivery {
    ok: AtomicU64,
    failed: AtomicU64,
    epoch: Instant,
    /// Reports arrive on the thread that polls the producer: the lock is never contended.
    ack_ns: Mutex<Vec<u64>>,
}

impl Delivery {
    fn take_ack_ns(&self) -> Vec<u64> {
        std::mem::take(&mut *self.ack_ns.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

struct DeliveryContext(Arc<Delivery>);
impl ClientContext for DeliveryContext {}
impl ProducerContext for DeliveryContext {
    type DeliveryOpaque = usize;
    fn delivery(&self, r: &DeliveryResult<'_>, sent_ns: usize) {
        if r.is_err() {
            self.0.failed.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.0.ok.fetch_add(1, Ordering::Relaxed);
        if sent_ns != UNTIMED {
            let now_ns = self.0.epoch.elapsed().as_nanos() as u64;
            let mut acks = self.0.ack_ns.lock().unwrap_or_else(|e| e.into_inner());
            // Never grow past the reserved capacity (no reallocation under load).
            if acks.len() < acks.capacity() {
                acks.push(now_ns.saturating_sub(sent_ns as u64));
            }
        }
    }
}

/// An acks=all producer whose context keeps the ack latency of up to `timed_records` records.
fn producer<P: FromClientConfigAndContext<DeliveryContext>>(
    target: &Target,
    timed_records: u64,
    linger_ms: u32,
) -> Result<(P, Arc<Delivery>)> {
    let delivery = Arc::new(Delivery {
        ok: AtomicU64::new(0),
        failed: AtomicU64::new(0),
        epoch: Instant::now(),
        ack_ns: Mutex::new(Vec::with_capacity(usize::try_from(timed_records)?)),
    });
    let mut cfg = target.client_config();
    cfg.set("acks", "all")
        .set("enable.idempotence", "false")
        .set("linger.ms", linger_ms.to_string())
        .set("batch.size", "1048576")
        .set("queue.buffering.max.messages", "500000")
        .set("queue.buffering.max.kbytes", "1048576")
        .set("compression.type", "none")
        .set("message.timeout.ms", "60000");
    Ok((cfg.create_with_context(DeliveryContext(delivery.clone()))?, delivery))
}

/// Enqueues one record on a producer whose own thread serves delivery reports (so an ack is
/// timed when it arrives, not when the sender next polls), waiting while the queue is full.
fn send_threaded(
    p: &ThreadedProducer<DeliveryContext>,
    topic: &str,
    key: &[u8],
    payload: &[u8],
    sent_ns: usize,
) -> Result<()> {
    let mut rec = BaseRecord::with_opaque_to(topic, sent_ns).key(key).payload(payload);
    loop {
        match p.send(rec) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                rec = r;
                std::thread::sleep(Duration::from_millis(1));
            }
            Err((e, _)) => bail!("send: {e}"),
        }
    }
}

/// Enqueues one record, serving delivery reports while librdkafka's queue is full.
fn send(p: &BaseProducer<DeliveryContext>, topic: &str, key: &[u8], payload: &[u8], sent_ns: usize) -> Result<()> {
    let rec = BaseRecord::with_opaque_to(topic, sent_ns).key(key).payload(payload);
    clients::send_when_room(p, rec, Duration::from_millis(5)).context("send")
}

/// The bench's own brokers with `--security SASL_SSL`: one listener, SASL_SSL, SCRAM-SHA-512
/// only, a certificate from a test CA made for the run (every node presents the same one,
/// naming 127.0.0.1), the user `admin` from `SLUICE_ADD_SCRAM`. No authorizer: the figures are what
/// TLS and SASL cost, not ACL checks.
struct SecuredBrokers {
    settings: Vec<(String, String)>,
    security: ClientSecurity,
}

const BENCH_USER: &str = "admin";
const BENCH_PASSWORD: &str = "admin-secret";

impl SecuredBrokers {
    fn new() -> Result<(TempDir, SecuredBrokers)> {
        let dir = tempfile::Builder::new().prefix("sluice-bench-pki-").tempdir()?;
        let ca = TestCa::new("sluice-bench test CA")?;
        let broker = ca.issue_broker("sluice-bench broker", &["127.0.0.1".into(), "localhost".into()])?;
        let (ca_pem, keystore) = (dir.path().join("ca.pem"), dir.path().join("broker.pem"));
        std::fs::write(&ca_pem, ca.certificate_pem())?;
        std::fs::write(&keystore, broker.keystore_pem())?;
        let mut settings = pem_store_settings(&keystore, &ca_pem);
        settings.push((
            "sasl.enabled.mechanisms".into(),
            SaslMechanism::ScramSha512.name().into(),
        ));
        let security = secured_login(ca_pem, BENCH_USER, BENCH_PASSWORD);
        Ok((dir, SecuredBrokers { settings, security }))
    }

    /// One SASL_SSL listener, the bench's user, and the harness's readiness probe logging in.
    fn customise(&self, opts: &mut NodeOptions) {
        opts.listener = Some("SASL_SSL".into());
        opts.client_security = self.security.clone();
        // Not --add-scram: the password stays out of the node's logged command line.
        opts.secret_env.push((
            "SLUICE_ADD_SCRAM".to_string(),
            format!("SCRAM-SHA-512=[name={BENCH_USER},password={BENCH_PASSWORD}]"),
        ));
    }
}

/// TLS trusting `ca` and a SCRAM-SHA-512 login as `user`.
fn secured_login(ca: PathBuf, user: &str, password: &str) -> ClientSecurity {
    ClientSecurity::default()
        .tls(TlsClient {
            ca_pem: ca,
            identity: None,
        })
        .sasl(SaslLogin::new(SaslMechanism::ScramSha512, user, password))
}

/// The brokers under test, kept alive for the whole run.
enum Brokers {
    Single(Box<SluiceNode>),
    Cluster(Cluster),
    /// Started by someone else (`--bootstrap`); only measured.
    External,
}

struct Target {
    brokers: Brokers,
    bootstrap: String,
    /// (node id, pid) of every broker.
    pids: Vec<(i32, u32)>,
    replication_factor: i16,
    /// How every client reaches the brokers (TLS and SCRAM with `--security SASL_SSL`).
    security: ClientSecurity,
    /// The test CA's files for brokers the bench started secured; dropped after them.
    _pki: Option<TempDir>,
    /// With `--racks`: each node's `metrics.listen`, by node id.
    metrics: Vec<(i32, SocketAddr)>,
}

impl Target {
    fn start(args: &Args) -> Result<Target> {
        let nodes = args.nodes;
        if let Some((bootstrap, pids)) = &args.external {
            let rf = match args.replication_factor {
                Some(rf) => rf,
                None => i16::try_from(pids.len()).context("too many --broker-pids")?,
            };
            let security = match (&args.ssl_ca, &args.sasl_login) {
                (Some(ca), Some((user, password))) => secured_login(ca.clone(), user, password),
                _ => ClientSecurity::default(),
            };
            return Ok(Target {
                brokers: Brokers::External,
                bootstrap: bootstrap.clone(),
                pids: pids.clone(),
                replication_factor: rf,
                security,
                _pki: None,
                metrics: Vec::new(),
            });
        }
        let (pki, secured) = match args.security.as_str() {
            "SASL_SSL" => {
                let (dir, secured) = SecuredBrokers::new()?;
                (Some(dir), Some(secured))
            }
            _ => (None, None),
        };
        let mut settings = args.settings.clone();
        if let Some(s) = &secured {
            // The bench's own --set come last, so they can override these.
            settings.splice(0..0, s.settings.clone());
        }
        let customise = |opts: &mut NodeOptions| {
            if let Some(s) = &secured {
                s.customise(opts);
            }
        };
        let security = secured.as_ref().map(|s| s.security.clone()).unwrap_or_default();
        if nodes == 1 {
            let mut opts = NodeOptions {
                report_on_drop: false,
                ..NodeOptions::default()
            };
            for (k, v) in &settings {
                opts = opts.set(k, v);
            }
            customise(&mut opts);
            let node = SluiceNode::start(opts)?;
            let pids = vec![(node.node_id(), node.pid().context("broker not running")?)];
            return Ok(Target {
                bootstrap: node.bootstrap(),
                brokers: Brokers::Single(Box::new(node)),
                pids,
                replication_factor: 1,
                security,
                _pki: pki,
                metrics: Vec::new(),
            });
        }
        let settings: Vec<(&str, &str)> = settings.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let metrics: Vec<(i32, SocketAddr)> = match args.racks {
            true => (1..=nodes as i32)
                .map(|id| Ok((id, loopback_addr(free_loopback_port()?))))
                .collect::<Result<_>>()?,
            false => Vec::new(),
        };
        let per_node = |id: i32| match metrics.iter().find(|(n, _)| *n == id) {
            Some((_, addr)) => vec![
                ("broker.rack".to_string(), format!("rack-{id}")),
                ("metrics.listen".to_string(), addr.to_string()),
            ],
            None => Vec::new(),
        };
        let mut cluster =
            retry_port_races(|| Cluster::start_custom(nodes, &settings, false, per_node, |_, opts| customise(opts)))?;
        let mut pids = Vec::new();
        for id in cluster.ids() {
            pids.push((id, cluster.node(id).pid().context("broker not running")?));
        }
        Ok(Target {
            bootstrap: cluster.bootstrap(),
            brokers: Brokers::Cluster(cluster),
            pids,
            replication_factor: i16::try_from(nodes).context("--nodes too large")?,
            security,
            _pki: pki,
            metrics,
        })
    }

    /// A client configuration reaching the brokers: the bootstrap servers, and TLS and the SASL
    /// login when they are secured.
    fn client_config(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.bootstrap);
        if self.security.tls.is_some() || self.security.sasl.is_some() {
            c = clients::secured(c, &self.security);
        }
        c
    }

    /// `PLAINTEXT` or `SASL_SSL`, as the clients connect.
    fn security_protocol(&self) -> &'static str {
        self.security.protocol()
    }

    fn describe(&self) -> String {
        match &self.brokers {
            Brokers::Single(node) => format!(
                "sluice node at {} (pid {:?}, log {})",
                node.bootstrap(),
                node.pid(),
                node.log_path().display()
            ),
            Brokers::Cluster(_) => format!(
                "sluice cluster of {} nodes at {} (node, pid): {:?}; topics at replication factor {}",
                self.pids.len(),
                self.bootstrap,
                self.pids,
                self.replication_factor
            ),
            Brokers::External => format!(
                "brokers at {} (node, pid): {:?}, started elsewhere; topics at replication factor {}",
                self.bootstrap, self.pids, self.replication_factor
            ),
        }
    }

    fn kind(&self) -> &'static str {
        match self.brokers {
            Brokers::Single(_) => "single sluice node",
            Brokers::Cluster(_) => "sluice cluster",
            Brokers::External => "external",
        }
    }

    /// Creates `name` at the target's replication factor and, on a cluster, waits until every
    /// replica is in sync so the phase measures replication, not catch-up.
    async fn create_topic(&self, admin: &AdminClient<DefaultClientContext>, name: &str, partitions: i32) -> Result<()> {
        let topic = NewTopic::new(
            name,
            partitions,
            TopicReplication::Fixed(i32::from(self.replication_factor)),
        );
        let results = admin.create_topics([&topic], &clients::admin_options()).await?;
        match results.first() {
            Some(Ok(_)) => {}
            Some(Err((t, code))) => bail!("CreateTopics {t}: {code:?}"),
            None => bail!("CreateTopics returned no result for {name}"),
        }
        match &self.brokers {
            Brokers::Cluster(cluster) => {
                cluster.await_full_isr(name, Duration::from_secs(30))?;
            }
            Brokers::External => self.await_full_isr_metadata(admin, name, partitions)?,
            Brokers::Single(_) => {}
        }
        Ok(())
    }

    /// Waits until every partition of `name` has a leader and all its replicas in sync, as a
    /// client's Metadata shows it (for brokers the harness does not own).
    fn await_full_isr_metadata(
        &self,
        admin: &AdminClient<DefaultClientContext>,
        name: &str,
        partitions: i32,
    ) -> Result<()> {
        let rf = usize::try_from(self.replication_factor)?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let md = admin.inner().fetch_metadata(Some(name), Duration::from_secs(5))?;
            let full = md.topics().iter().find(|t| t.name() == name).is_some_and(|t| {
                t.error().is_none()
                    && t.partitions().len() == partitions as usize
                    && t.partitions()
                        .iter()
                        .all(|p| p.leader() >= 0 && p.replicas().len() == rf && p.isr().len() == rf)
            });
            if full {
                return Ok(());
            }
            ensure!(
                Instant::now() < deadline,
                "{name}: not every partition has {rf} replicas in sync after 30 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// One broker's resource use over one phase.
struct NodeUsage {
    node_id: i32,
    cpu_s: f64,
    peak_rss_mb: f64,
    peak_is_since_start: bool,
}

/// Every broker's resource use over one phase.
struct Usage(Vec<NodeUsage>);

impl Usage {
    fn cpu_s(&self) -> f64 {
        self.0.iter().map(|n| n.cpu_s).sum()
    }
    fn peak_is_since_start(&self) -> bool {
        self.0.iter().any(|n| n.peak_is_since_start)
    }
}

struct Meter(Vec<(i32, u32, f64, bool)>);

impl Meter {
    fn start(pids: &[(i32, u32)]) -> Result<Self> {
        let mut nodes = Vec::new();
        for &(id, pid) in pids {
            let reset_ok = procstat::reset_peak_rss(pid);
            nodes.push((id, pid, procstat::cpu_seconds(pid)?, reset_ok));
        }
        Ok(Self(nodes))
    }
    fn stop(self) -> Result<Usage> {
        let mut usage = Vec::new();
        for (node_id, pid, cpu0, reset_ok) in self.0 {
            usage.push(NodeUsage {
                node_id,
                cpu_s: procstat::cpu_seconds(pid)? - cpu0,
                peak_rss_mb: procstat::status_kib(pid, "VmHWM")? as f64 / 1024.0,
                peak_is_since_start: !reset_ok,
            });
        }
        Ok(Usage(usage))
    }
}

/// The throughput phases' `linger.ms`: librdkafka's default, whatever `--linger-ms` says.
const THROUGHPUT_LINGER_MS: u32 = 5;

struct ThroughputRow {
    name: String,
    topic: String,
    record_bytes: usize,
    records: u64,
    secs: f64,
    bytes: u64,
    usage: Usage,
    /// Produced in transactions (`transactional_phase`).
    transactional: bool,
}

fn throughput_phase(target: &Target, name: &str, topic: &str, records: u64, size: usize) -> Result<ThroughputRow> {
    let (p, counts): (BaseProducer<DeliveryContext>, _) = producer(target, 0, THROUGHPUT_LINGER_MS)?;
    let payload = vec![b'x'; size];
    let meter = Meter::start(&target.pids)?;
    let start = Instant::now();
    for i in 0..records {
        send(&p, topic, &i.to_be_bytes(), &payload, UNTIMED)?;
        if i % 1024 == 0 {
            p.poll(Duration::ZERO);
        }
    }
    p.flush(Duration::from_secs(120))?;
    let secs = start.elapsed().as_secs_f64();
    let usage = meter.stop()?;
    let ok = counts.ok.load(Ordering::Relaxed);
    let failed = counts.failed.load(Ordering::Relaxed);
    ensure!(
        ok == records && failed == 0,
        "{name}: {ok} delivered, {failed} failed of {records}"
    );
    Ok(ThroughputRow {
        name: name.into(),
        topic: topic.into(),
        record_bytes: size,
        records,
        secs,
        bytes: records * size as u64,
        usage,
        transactional: false,
    })
}

/// 2 KB records from one transactional producer committing every `txn_ms`: the phase's
/// throughput includes every commit (EndTxn and the markers it waits for).
fn transactional_phase(target: &Target, name: &str, topic: &str, records: u64, txn_ms: u64) -> Result<ThroughputRow> {
    const SIZE: usize = 2048;
    let delivery = Arc::new(Delivery {
        ok: AtomicU64::new(0),
        failed: AtomicU64::new(0),
        epoch: Instant::now(),
        ack_ns: Mutex::new(Vec::new()),
    });
    let mut cfg = target.client_config();
    cfg.set("acks", "all")
        .set("enable.idempotence", "true")
        .set("transactional.id", format!("sluice-bench-{}", std::process::id()))
        .set("linger.ms", THROUGHPUT_LINGER_MS.to_string())
        .set("batch.size", "1048576")
        .set("queue.buffering.max.messages", "500000")
        // The Java client's buffer.memory: enqueuing keeps pace with the brokers, so a
        // transaction holds about `txn_ms` of their throughput (a 1 GB queue would take the
        // whole run into its first transaction).
        .set("queue.buffering.max.kbytes", "32768")
        .set("compression.type", "none")
        .set("message.timeout.ms", "60000");
    // Its own polling thread: a commit returns when librdkafka has the answer, not at the
    // next poll of the sending loop (a BaseProducer adds up to 100 ms to every commit).
    let p: ThreadedProducer<DeliveryContext> = cfg.create_with_context(DeliveryContext(delivery.clone()))?;
    let timeout = Duration::from_secs(60);
    p.init_transactions(timeout)?;
    let payload = vec![b'x'; SIZE];
    let every = Duration::from_millis(txn_ms);
    let meter = Meter::start(&target.pids)?;
    let start = Instant::now();
    let mut commits = CommitTimes::default();
    p.begin_transaction()?;
    let mut opened = Instant::now();
    for i in 0..records {
        send_threaded(&p, topic, &i.to_be_bytes(), &payload, UNTIMED)?;
        if opened.elapsed() >= every {
            commits.commit(&p, timeout)?;
            p.begin_transaction()?;
            opened = Instant::now();
        }
    }
    commits.commit(&p, timeout)?;
    let secs = start.elapsed().as_secs_f64();
    let usage = meter.stop()?;
    let ok = delivery.ok.load(Ordering::Relaxed);
    let failed = delivery.failed.load(Ordering::Relaxed);
    ensure!(
        ok == records && failed == 0,
        "{name}: {ok} delivered, {failed} failed of {records}"
    );
    println!("{name}: {}", commits.summary());
    Ok(ThroughputRow {
        name: name.into(),
        topic: topic.into(),
        record_bytes: SIZE,
        records,
        secs,
        bytes: records * SIZE as u64,
        usage,
        transactional: true,
    })
}

/// How long each `commit_transaction` of the transactional phase took: the flush of the
/// transaction's records (their acknowledgements) and EndTxn. Not split by an explicit
/// `flush` first: rdkafka's `flush` polls in 100 ms steps on a threaded producer, which
/// would hold every commit up to 100 ms.
#[derive(Default)]
struct CommitTimes(Vec<u64>);

impl CommitTimes {
    fn commit(&mut self, p: &ThreadedProducer<DeliveryContext>, timeout: Duration) -> Result<()> {
        let start = Instant::now();
        p.commit_transaction(timeout)?;
        self.0.push(start.elapsed().as_nanos() as u64);
        Ok(())
    }

    fn summary(&self) -> String {
        let q = quantiles_ms(self.0.clone());
        format!(
            "{} transactions committed; commit p50 {:.1} ms, p99 {:.1} ms",
            self.0.len(),
            q[0],
            q[1]
        )
    }
}

struct LatencyRow {
    sent: u64,
    /// Per consumer: records received and [p50, p99, p99.9, max] latency in ms.
    consumers: Vec<(u64, [f64; 4])>,
    /// Producer: records acknowledged with a measured ack latency, and its [p50, p99, p99.9, max] in ms.
    acks: (u64, [f64; 4]),
    achieved_rate: f64,
    /// From the first send until every consumer was done (the span `usage` covers).
    secs: f64,
    usage: Usage,
}

/// A consumer in group `sluice-bench-group-<index>`, subscribed to `topic` from the beginning,
/// that records each record's produce-to-consume latency until it has `total` or the deadline
/// passes. Once it has seen the warm-up record (keyless) of every partition it counts itself
/// in `warmed`.
#[allow(clippy::too_many_arguments)]
fn spawn_latency_reader(
    target: &Target,
    topic: &str,
    partitions: i32,
    index: usize,
    total: u64,
    commit: bool,
    warmed: Arc<AtomicU64>,
    epoch: Instant,
    deadline: Instant,
) -> Result<std::thread::JoinHandle<Result<Vec<u64>>>> {
    // librdkafka's defaults otherwise (fetch.wait.max.ms 500, auto commit every 5 s):
    // measure what clients get.
    let mut config = target.client_config();
    if !target.metrics.is_empty() {
        config.set("client.rack", format!("rack-{}", index % target.metrics.len() + 1));
    }
    let consumer: BaseConsumer = config
        .set("client.id", format!("sluice-bench-consumer-{index}"))
        .set("group.id", format!("sluice-bench-group-{index}"))
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", if commit { "true" } else { "false" })
        .set("log_level", "4")
        .create()?;
    consumer.subscribe(&[topic])?;
    Ok(std::thread::spawn(move || -> Result<Vec<u64>> {
        let mut lat_ns = Vec::with_capacity(total as usize);
        let mut warm_partitions = std::collections::HashSet::new();
        while (lat_ns.len() as u64) < total && Instant::now() < deadline {
            let Some(m) = consumer.poll(Duration::from_millis(100)) else {
                continue;
            };
            let m = m?;
            if m.key().is_none() {
                if warm_partitions.insert(m.partition()) && warm_partitions.len() == partitions as usize {
                    warmed.fetch_add(1, Ordering::Release);
                }
                continue;
            }
            let now = epoch.elapsed().as_nanos() as u64;
            let sent = u64::from_be_bytes(m.payload().context("no payload")?[..8].try_into()?);
            lat_ns.push(now.saturating_sub(sent));
        }
        Ok(lat_ns)
    }))
}

/// [p50, p99, p99.9, max] of `lat_ns`, in ms.
fn quantiles_ms(mut lat_ns: Vec<u64>) -> [f64; 4] {
    lat_ns.sort_unstable();
    let q = |f: f64| -> f64 {
        if lat_ns.is_empty() {
            return f64::NAN;
        }
        let i = ((lat_ns.len() as f64 * f).ceil() as usize).clamp(1, lat_ns.len()) - 1;
        lat_ns[i] as f64 / 1e6
    };
    [
        q(0.50),
        q(0.99),
        q(0.999),
        lat_ns.last().map_or(f64::NAN, |v| *v as f64 / 1e6),
    ]
}

/// Record size of the latency phase (the seed load's 2 KB).
const LATENCY_RECORD_BYTES: usize = 2048;

fn latency_phase(target: &Target, topic: &str, args: &Args, consumers: usize) -> Result<LatencyRow> {
    let (partitions, rate) = (args.partitions, args.rate);
    let total = rate * args.duration_s;
    let (p, counts): (ThreadedProducer<DeliveryContext>, _) = producer(target, total, args.linger_ms)?;
    // Warm-up: one acknowledged record per partition, so the measurement starts with every
    // follower fetching and the producer connected (steady state, not topic creation), and
    // every consumer has joined its group and fetched it.
    for partition in 0..partitions {
        let rec: BaseRecord<'_, [u8], [u8], usize> = BaseRecord::with_opaque_to(topic, UNTIMED)
            .partition(partition)
            .payload(&[0u8; 8]);
        p.send(rec).map_err(|(e, _)| anyhow::anyhow!("warm-up send: {e}"))?;
    }
    p.flush(Duration::from_secs(30))?;
    ensure!(
        counts.failed.load(Ordering::Relaxed) == 0,
        "the warm-up records were not acknowledged"
    );
    // Producer and consumers stamp times against the producer context's clock.
    let epoch = counts.epoch;
    let deadline = Instant::now() + Duration::from_secs(args.duration_s + 90);
    let warmed = Arc::new(AtomicU64::new(0));
    let readers = (0..consumers)
        .map(|i| {
            let warmed = warmed.clone();
            spawn_latency_reader(
                target,
                topic,
                partitions,
                i,
                total,
                args.commit,
                warmed,
                epoch,
                deadline,
            )
        })
        .collect::<Result<Vec<_>>>()?;
    let warm_deadline = Instant::now() + Duration::from_secs(60);
    while warmed.load(Ordering::Acquire) < consumers as u64 {
        ensure!(
            Instant::now() < warm_deadline,
            "only {} of {consumers} consumers joined their groups and read the warm-up records within 60 s",
            warmed.load(Ordering::Acquire)
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    let mut payload = vec![b'l'; LATENCY_RECORD_BYTES];
    let racks_before = consumer_bytes_by_rack(target)?;
    let meter = Meter::start(&target.pids)?;
    let start = Instant::now();
    let interval_ns = 1_000_000_000 / rate;
    for i in 0..total {
        // Stamp the scheduled send time, not the actual one: a stalled producer then shows up
        // as latency instead of silently sending later (coordinated omission).
        let due = start + Duration::from_nanos(i * interval_ns);
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        let stamp = (due - epoch).as_nanos() as u64;
        payload[..8].copy_from_slice(&stamp.to_be_bytes());
        send_threaded(&p, topic, &i.to_be_bytes(), &payload, stamp as usize)?;
    }
    let send_secs = start.elapsed().as_secs_f64();
    p.flush(Duration::from_secs(60))?;
    let mut per_consumer = Vec::new();
    for reader in readers {
        let lat = reader.join().map_err(|_| anyhow::anyhow!("reader panicked"))??;
        per_consumer.push((lat.len() as u64, quantiles_ms(lat)));
    }
    let secs = start.elapsed().as_secs_f64();
    let usage = meter.stop()?;
    if let (Some(before), Some(after)) = (racks_before, consumer_bytes_by_rack(target)?) {
        let (same, other) = (after.0 - before.0, after.1 - before.1);
        println!(
            "consumer bytes in the latency phase: {:.1} MB read in the consumer's rack, {:.1} MB from another rack ({:.1} % crossed racks)",
            same as f64 / 1e6,
            other as f64 / 1e6,
            100.0 * other as f64 / (same + other).max(1) as f64
        );
    }
    let failed = counts.failed.load(Ordering::Relaxed);
    ensure!(failed == 0, "latency phase: {failed} deliveries failed");
    let ack_ns = counts.take_ack_ns();
    Ok(LatencyRow {
        sent: total,
        consumers: per_consumer,
        acks: (ack_ns.len() as u64, quantiles_ms(ack_ns)),
        achieved_rate: total as f64 / send_secs,
        secs,
        usage,
    })
}

/// (same rack, other rack) record bytes all brokers have sent to consumers, with `--racks`.
fn consumer_bytes_by_rack(target: &Target) -> Result<Option<(u64, u64)>> {
    if target.metrics.is_empty() {
        return Ok(None);
    }
    let (mut same, mut other) = (0, 0);
    for (id, addr) in &target.metrics {
        let scraped = scrape_metrics(*addr).with_context(|| format!("scraping node {id}'s /metrics"))?;
        let get = |rack: &str| {
            scraped
                .get(&format!("sluice_consumer_fetch_bytes_total{{rack=\"{rack}\"}}"))
                .copied()
        };
        same += get("same").with_context(|| format!("node {id} exports no sluice_consumer_fetch_bytes_total"))? as u64;
        other += get("other").unwrap_or(0.0) as u64;
    }
    Ok(Some((same, other)))
}

fn rss_cell(n: &NodeUsage) -> String {
    format!("{:.0}{}", n.peak_rss_mb, if n.peak_is_since_start { "*" } else { "" })
}

/// Peak RSS of the largest broker (single node: that node).
fn max_rss_cell(u: &Usage) -> String {
    u.0.iter()
        .max_by(|a, b| a.peak_rss_mb.total_cmp(&b.peak_rss_mb))
        .map_or_else(|| "-".into(), rss_cell)
}

/// One line per broker when there are several: CPU seconds, CPU% over `secs`, peak RSS.
fn print_per_node(u: &Usage, secs: f64) {
    if u.0.len() < 2 {
        return;
    }
    for n in &u.0 {
        println!(
            "{:<32} {:>9} {:>7} {:>10} {:>8} {:>9.2}s {:>5.0}% {:>8}",
            format!("  node {}", n.node_id),
            "",
            "",
            "",
            "",
            n.cpu_s,
            100.0 * n.cpu_s / secs,
            rss_cell(n)
        );
    }
}

fn usage_json(u: &Usage) -> Value {
    let nodes: Vec<Value> =
        u.0.iter()
            .map(|n| {
                json!({
                    "node_id": n.node_id,
                    "cpu_s": n.cpu_s,
                    "peak_rss_mb": n.peak_rss_mb,
                    "peak_rss_since_start": n.peak_is_since_start,
                })
            })
            .collect();
    json!({
        "broker_cpu_s": u.cpu_s(),
        "peak_rss_mb_max": u.0.iter().map(|n| n.peak_rss_mb).fold(0.0, f64::max),
        "nodes": nodes,
    })
}

/// `usage_json` plus this phase's rates; `bytes` is the payload bytes produced.
fn phase_json(records: u64, bytes: u64, secs: f64, u: &Usage) -> Value {
    let mut v = usage_json(u);
    let extra = json!({
        "records": records,
        "bytes": bytes,
        "secs": secs,
        "msgs_per_s": records as f64 / secs,
        "mb_per_s": bytes as f64 / secs / 1e6,
        "broker_cpu_s_per_gb": if bytes == 0 { f64::NAN } else { u.cpu_s() / (bytes as f64 / 1e9) },
    });
    if let (Value::Object(v), Value::Object(extra)) = (&mut v, extra) {
        v.extend(extra);
    }
    v
}

fn quantiles_json(count: u64, q: &[f64; 4]) -> Value {
    json!({ "count": count, "p50_ms": q[0], "p99_ms": q[1], "p99_9_ms": q[2], "max_ms": q[3] })
}

/// Every figure of the run, for `--json` (NaN, e.g. a percentile of nothing, becomes null).
fn report_json(
    args: &Args,
    target: &Target,
    consumers: usize,
    rows: &[ThroughputRow],
    latency: Option<&LatencyRow>,
) -> Value {
    let throughput: Vec<Value> = rows
        .iter()
        .map(|r| {
            let mut v = phase_json(r.records, r.bytes, r.secs, &r.usage);
            if let Value::Object(m) = &mut v {
                m.insert("name".into(), json!(r.name));
                m.insert("topic".into(), json!(r.topic));
                m.insert("record_bytes".into(), json!(r.record_bytes));
                m.insert("transactional".into(), json!(r.transactional));
                if r.transactional {
                    m.insert("transaction_ms".into(), json!(args.txn_ms));
                }
            }
            v
        })
        .collect();
    let latency = latency.map(|l| {
        let mut v = phase_json(l.sent, l.sent * LATENCY_RECORD_BYTES as u64, l.secs, &l.usage);
        let groups: Vec<Value> = l
            .consumers
            .iter()
            .enumerate()
            .map(|(i, (received, q))| {
                let mut g = quantiles_json(*received, q);
                if let Value::Object(m) = &mut g {
                    m.insert("group".into(), json!(format!("sluice-bench-group-{i}")));
                    m.insert("received".into(), json!(received));
                }
                g
            })
            .collect();
        if let Value::Object(m) = &mut v {
            m.insert("target_rate".into(), json!(args.rate));
            m.insert("achieved_send_rate".into(), json!(l.achieved_rate));
            m.insert("record_bytes".into(), json!(LATENCY_RECORD_BYTES));
            m.insert("duration_s".into(), json!(args.duration_s));
            m.insert("sent".into(), json!(l.sent));
            m.insert("producer_ack".into(), quantiles_json(l.acks.0, &l.acks.1));
            m.insert("end_to_end".into(), json!(groups));
        }
        v
    });
    let settings: serde_json::Map<String, Value> = args.settings.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
    json!({
        "tool": "sluice-bench",
        "schema": 1,
        "label": args.label,
        "librdkafka": rdkafka::util::get_rdkafka_version().1,
        "brokers": {
            "kind": target.kind(),
            "security_protocol": target.security_protocol(),
            "sasl_mechanism": target.security.sasl.as_ref().map(|l| l.mechanism.name()),
            "bootstrap": target.bootstrap,
            "nodes": target.pids.len(),
            "replication_factor": target.replication_factor,
            "pids": target.pids.iter().map(|(id, pid)| json!({"node_id": id, "pid": pid})).collect::<Vec<_>>(),
        },
        "config": {
            "acks": "all",
            "security": target.security_protocol(),
            "linger_ms": args.linger_ms,
            "partitions": args.partitions,
            "consumer_groups": consumers,
            "commit": args.commit,
            "rate": args.rate,
            "duration_s": args.duration_s,
            "phase": args.phase,
            "set": settings,
        },
        "throughput": throughput,
        "latency": latency,
    })
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let args = parse_args()?;
    let consumers = args.consumers.unwrap_or(if args.nodes > 1 || args.external.is_some() {
        2
    } else {
        1
    });
    let target = Target::start(&args)?;
    println!("{}", target.describe());
    if target.security_protocol() != "PLAINTEXT" {
        println!(
            "clients connect with {} ({}), over TLS to every listener",
            target.security_protocol(),
            target.security.sasl.as_ref().map_or("no SASL", |l| l.mechanism.name())
        );
    }
    let admin: AdminClient<DefaultClientContext> = target
        .client_config()
        .set("client.id", "sluice-bench-admin")
        .set("log_level", "4")
        .create()?;
    for topic in &args.create_topics {
        target.create_topic(&admin, topic, args.partitions).await?;
    }
    let mut rows = Vec::new();
    let rf = target.replication_factor;
    if args.phase != "latency" {
        let phases = [
            ("bench-2k", args.records_2k, 2048, "2 KB"),
            ("bench-100b", args.records_100b, 100, "100 B"),
        ];
        for (topic, records, size, label) in phases {
            if records == 0 {
                continue;
            }
            target.create_topic(&admin, topic, args.partitions).await?;
            let name = format!("produce {label}, acks=all, RF {rf}");
            rows.push(throughput_phase(&target, &name, topic, records, size)?);
        }
        if args.records_txn > 0 {
            let topic = "bench-txn-2k";
            target.create_topic(&admin, topic, args.partitions).await?;
            let name = format!("2 KB, {} ms transactions, RF {rf}", args.txn_ms);
            rows.push(transactional_phase(
                &target,
                &name,
                topic,
                args.records_txn,
                args.txn_ms,
            )?);
        }
    }
    let latency = if args.phase != "throughput" {
        let topic = match args.linger_ms {
            5 => "bench-latency".to_string(),
            ms => format!("bench-latency-linger{ms}"),
        };
        target.create_topic(&admin, &topic, args.partitions).await?;
        Some(latency_phase(&target, &topic, &args, consumers)?)
    } else {
        None
    };

    print_table(&args, rf, &rows, latency.as_ref());
    if let Some(path) = &args.json {
        let report = report_json(&args, &target, consumers, &rows, latency.as_ref());
        std::fs::write(path, serde_json::to_string_pretty(&report)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    if let Some(l) = &latency {
        for (i, (received, _)) in l.consumers.iter().enumerate() {
            ensure!(
                *received == l.sent,
                "group {} received {received} of {} records",
                i + 1,
                l.sent
            );
        }
    }
    Ok(())
}

fn print_table(args: &Args, rf: i16, rows: &[ThroughputRow], latency: Option<&LatencyRow>) {
    println!();
    println!(
        "{:<32} {:>9} {:>7} {:>10} {:>8} {:>10} {:>6} {:>8}",
        "phase", "records", "secs", "msgs/s", "MB/s", "broker cpu", "cpu%", "peak MB"
    );
    for r in rows {
        println!(
            "{:<32} {:>9} {:>7.2} {:>10.0} {:>8.1} {:>9.2}s {:>5.0}% {:>8}",
            r.name,
            r.records,
            r.secs,
            r.records as f64 / r.secs,
            r.bytes as f64 / r.secs / 1e6,
            r.usage.cpu_s(),
            100.0 * r.usage.cpu_s() / r.secs,
            max_rss_cell(&r.usage)
        );
        print_per_node(&r.usage, r.secs);
    }
    if let Some(l) = latency {
        println!();
        println!(
            "latency @ {} msgs/s x 2 KB for {} s ({} partitions, RF {}, {} consumer groups, {}): sent {} (achieved {:.0}/s)",
            args.rate,
            args.duration_s,
            args.partitions,
            rf,
            l.consumers.len(),
            if args.commit { "auto commit every 5 s" } else { "no commits" },
            l.sent,
            l.achieved_rate
        );
        println!(
            "{:>8} {:>10} {:>10} {:>10} {:>10} {:>10}",
            "group", "received", "p50 ms", "p99 ms", "p99.9 ms", "max ms"
        );
        for (i, (received, lat_ms)) in l.consumers.iter().enumerate() {
            println!(
                "{:>8} {:>10} {:>10.2} {:>10.2} {:>10.2} {:>10.2}",
                i + 1,
                received,
                lat_ms[0],
                lat_ms[1],
                lat_ms[2],
                lat_ms[3]
            );
        }
        let (acked, ack_ms) = &l.acks;
        println!(
            "{:>8} {:>10} {:>10.2} {:>10.2} {:>10.2} {:>10.2}   (producer: send to delivery report)",
            "acks", acked, ack_ms[0], ack_ms[1], ack_ms[2], ack_ms[3]
        );
        println!("{:>8} {:>11} {:>8}", "broker", "cpu", "peak MB");
        for n in &l.usage.0 {
            println!("{:>8} {:>10.2}s {:>8}", n.node_id, n.cpu_s, rss_cell(n));
        }
    }
    if rows.iter().any(|r| r.usage.peak_is_since_start()) || latency.is_some_and(|l| l.usage.peak_is_since_start()) {
        println!("* peak RSS since broker start (could not reset VmHWM via /proc/<pid>/clear_refs)");
    }
}

//! Benchmark of release `sluice` brokers with rdkafka clients on loopback: one node (the
//! default) or a cluster of `--nodes N` with every topic at replication factor N:
//! (a) maximum produce throughput with acks=all for 2 KB and 100-byte records,
//! (b) produce-to-consume latency at a fixed rate, each of `--consumers` consumers in a consumer
//!     group of its own (subscribed, committing offsets with librdkafka's default auto commit,
//!     or not at all with `--no-commit`) reading every partition and measuring its own latency;
//!     the measured phase starts once every consumer has received the warm-up record of every
//!     partition, so group joins and connection set-up are not measured,
//! (c) CPU seconds and peak RSS of every broker over each phase (from /proc).
//!
//! Usage: sluice-bench [--nodes N] [--records-2k N] [--records-100b N] [--rate MSGS_PER_S]
//!                     [--duration-s S] [--partitions P] [--consumers C]
//!                     [--phase all|throughput|latency] [--no-commit] [--set key=value]...
//! `--records-100b 0` skips that phase. `--consumers` defaults to 1 on one node and 2 on a
//! cluster. The broker binary is found like the tests find it ($SLUICE_BIN first).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use rdkafka::admin::{AdminClient, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::ClientContext;
use sluice_integration_tests::{clients, procstat, Cluster, NodeOptions, SluiceNode};

struct Args {
    nodes: usize,
    consumers: Option<usize>,
    records_2k: u64,
    records_100b: u64,
    rate: u64,
    duration_s: u64,
    partitions: i32,
    phase: String,
    commit: bool,
    settings: Vec<(String, String)>,
}

fn parse_args() -> Result<Args> {
    let mut a = Args {
        nodes: 1,
        consumers: None,
        records_2k: 200_000,
        records_100b: 1_000_000,
        rate: 20_000,
        duration_s: 20,
        partitions: 3,
        phase: "all".into(),
        commit: true,
        settings: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--nodes" => a.nodes = val()?.parse()?,
            "--consumers" => a.consumers = Some(val()?.parse()?),
            "--records-2k" => a.records_2k = val()?.parse()?,
            "--records-100b" => a.records_100b = val()?.parse()?,
            "--rate" => a.rate = val()?.parse()?,
            "--duration-s" => a.duration_s = val()?.parse()?,
            "--partitions" => a.partitions = val()?.parse()?,
            "--phase" => a.phase = val()?,
            "--no-commit" => a.commit = false,
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
    ensure!(a.consumers != Some(0), "--consumers must be at least 1");
    Ok(a)
}

/// Counts delivery reports without per-message allocation.
#[derive(Default)]
struct Counting {
    ok: AtomicU64,
    failed: AtomicU64,
}
struct CountingContext(Arc<Counting>);
impl ClientContext for CountingContext {}
impl ProducerContext for CountingContext {
    type DeliveryOpaque = ();
    fn delivery(&self, r: &DeliveryResult<'_>, _: ()) {
        match r {
            Ok(_) => self.0.ok.fetch_add(1, Ordering::Relaxed),
            Err(_) => self.0.failed.fetch_add(1, Ordering::Relaxed),
        };
    }
}

fn producer(bootstrap: &str) -> Result<(BaseProducer<CountingContext>, Arc<Counting>)> {
    let counts = Arc::new(Counting::default());
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", bootstrap)
        .set("acks", "all")
        .set("enable.idempotence", "false")
        .set("linger.ms", "5")
        .set("batch.size", "1048576")
        .set("queue.buffering.max.messages", "500000")
        .set("queue.buffering.max.kbytes", "1048576")
        .set("compression.type", "none")
        .set("message.timeout.ms", "60000");
    Ok((cfg.create_with_context(CountingContext(counts.clone()))?, counts))
}

/// Enqueues one record, serving delivery reports while librdkafka's queue is full.
fn send(p: &BaseProducer<CountingContext>, topic: &str, key: &[u8], payload: &[u8]) -> Result<()> {
    let rec = BaseRecord::to(topic).key(key).payload(payload);
    clients::send_when_room(p, rec, Duration::from_millis(5)).context("send")
}

/// The brokers under test, kept alive for the whole run.
enum Brokers {
    Single(Box<SluiceNode>),
    Cluster(Cluster),
}

struct Target {
    brokers: Brokers,
    bootstrap: String,
    /// (node id, pid) of every broker.
    pids: Vec<(i32, u32)>,
    replication_factor: i16,
}

impl Target {
    fn start(nodes: usize, settings: &[(String, String)]) -> Result<Target> {
        if nodes == 1 {
            let mut opts = NodeOptions {
                report_on_drop: false,
                ..NodeOptions::default()
            };
            for (k, v) in settings {
                opts = opts.set(k, v);
            }
            let node = SluiceNode::start(opts)?;
            let pids = vec![(node.node_id(), node.pid().context("broker not running")?)];
            return Ok(Target {
                bootstrap: node.bootstrap(),
                brokers: Brokers::Single(Box::new(node)),
                pids,
                replication_factor: 1,
            });
        }
        let settings: Vec<(&str, &str)> = settings.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let mut cluster = Cluster::start_with(nodes, &settings, false)?;
        let mut pids = Vec::new();
        for id in cluster.ids() {
            pids.push((id, cluster.node(id).pid().context("broker not running")?));
        }
        Ok(Target {
            bootstrap: cluster.bootstrap(),
            brokers: Brokers::Cluster(cluster),
            pids,
            replication_factor: i16::try_from(nodes).context("--nodes too large")?,
        })
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
        if let Brokers::Cluster(cluster) = &self.brokers {
            cluster.await_full_isr(name, Duration::from_secs(30))?;
        }
        Ok(())
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

struct ThroughputRow {
    name: String,
    records: u64,
    secs: f64,
    bytes: u64,
    usage: Usage,
}

fn throughput_phase(target: &Target, name: &str, topic: &str, records: u64, size: usize) -> Result<ThroughputRow> {
    let (p, counts) = producer(&target.bootstrap)?;
    let payload = vec![b'x'; size];
    let meter = Meter::start(&target.pids)?;
    let start = Instant::now();
    for i in 0..records {
        send(&p, topic, &i.to_be_bytes(), &payload)?;
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
        records,
        secs,
        bytes: records * size as u64,
        usage,
    })
}

struct LatencyRow {
    sent: u64,
    /// Per consumer: records received and [p50, p99, p99.9, max] latency in ms.
    consumers: Vec<(u64, [f64; 4])>,
    achieved_rate: f64,
    usage: Usage,
}

/// A consumer in group `sluice-bench-group-<index>`, subscribed to `topic` from the beginning,
/// that records each record's produce-to-consume latency until it has `total` or the deadline
/// passes. Once it has seen the warm-up record (keyless) of every partition it counts itself
/// in `warmed`.
#[allow(clippy::too_many_arguments)]
fn spawn_latency_reader(
    bootstrap: &str,
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
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
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

fn latency_phase(target: &Target, topic: &str, args: &Args, consumers: usize) -> Result<LatencyRow> {
    let (partitions, rate) = (args.partitions, args.rate);
    let total = rate * args.duration_s;
    let (p, counts) = producer(&target.bootstrap)?;
    // Warm-up: one acknowledged record per partition, so the measurement starts with every
    // follower fetching and the producer connected (steady state, not topic creation), and
    // every consumer has joined its group and fetched it.
    for partition in 0..partitions {
        let rec: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(topic).partition(partition).payload(&[0u8; 8]);
        p.send(rec).map_err(|(e, _)| anyhow::anyhow!("warm-up send: {e}"))?;
    }
    p.flush(Duration::from_secs(30))?;
    ensure!(
        counts.failed.load(Ordering::Relaxed) == 0,
        "the warm-up records were not acknowledged"
    );
    let epoch = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(args.duration_s + 90);
    let warmed = Arc::new(AtomicU64::new(0));
    let readers = (0..consumers)
        .map(|i| {
            let warmed = warmed.clone();
            spawn_latency_reader(
                &target.bootstrap,
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

    let mut payload = vec![b'l'; 2048];
    let meter = Meter::start(&target.pids)?;
    let start = Instant::now();
    let interval_ns = 1_000_000_000 / rate;
    for i in 0..total {
        // Stamp the scheduled send time, not the actual one: a stalled producer then shows up
        // as latency instead of silently sending later (coordinated omission).
        let due = start + Duration::from_nanos(i * interval_ns);
        let now = Instant::now();
        if due > now {
            p.poll(Duration::ZERO);
            std::thread::sleep(due - now);
        }
        let stamp = (due - epoch).as_nanos() as u64;
        payload[..8].copy_from_slice(&stamp.to_be_bytes());
        send(&p, topic, &i.to_be_bytes(), &payload)?;
    }
    let send_secs = start.elapsed().as_secs_f64();
    p.flush(Duration::from_secs(60))?;
    let mut per_consumer = Vec::new();
    for reader in readers {
        let lat = reader.join().map_err(|_| anyhow::anyhow!("reader panicked"))??;
        per_consumer.push((lat.len() as u64, quantiles_ms(lat)));
    }
    let usage = meter.stop()?;
    let failed = counts.failed.load(Ordering::Relaxed);
    ensure!(failed == 0, "latency phase: {failed} deliveries failed");
    Ok(LatencyRow {
        sent: total,
        consumers: per_consumer,
        achieved_rate: total as f64 / send_secs,
        usage,
    })
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

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let args = parse_args()?;
    let consumers = args.consumers.unwrap_or(if args.nodes > 1 { 2 } else { 1 });
    let target = Target::start(args.nodes, &args.settings)?;
    println!("{}", target.describe());
    let admin = clients::admin_client(&target.bootstrap)?;
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
    }
    let latency = if args.phase != "throughput" {
        target.create_topic(&admin, "bench-latency", args.partitions).await?;
        Some(latency_phase(&target, "bench-latency", &args, consumers)?)
    } else {
        None
    };

    println!();
    println!(
        "{:<32} {:>9} {:>7} {:>10} {:>8} {:>10} {:>6} {:>8}",
        "phase", "records", "secs", "msgs/s", "MB/s", "broker cpu", "cpu%", "peak MB"
    );
    for r in &rows {
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
    if let Some(l) = &latency {
        println!();
        println!(
            "latency @ {} msgs/s x 2 KB for {} s ({} partitions, RF {rf}, {} consumer groups, {}): sent {} (achieved {:.0}/s)",
            args.rate,
            args.duration_s,
            args.partitions,
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
        println!("{:>8} {:>11} {:>8}", "broker", "cpu", "peak MB");
        for n in &l.usage.0 {
            println!("{:>8} {:>10.2}s {:>8}", n.node_id, n.cpu_s, rss_cell(n));
        }
        for (i, (received, _)) in l.consumers.iter().enumerate() {
            ensure!(
                *received == l.sent,
                "group {} received {received} of {} records",
                i + 1,
                l.sent
            );
        }
    }
    if rows.iter().any(|r| r.usage.peak_is_since_start())
        || latency.as_ref().is_some_and(|l| l.usage.peak_is_since_start())
    {
        println!("* peak RSS since broker start (could not reset VmHWM via /proc/<pid>/clear_refs)");
    }
    Ok(())
}

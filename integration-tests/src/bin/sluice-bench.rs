//! Benchmark of one release `sluice` node with rdkafka clients on loopback:
//! (a) maximum produce throughput with acks=all for 2 KB and 100-byte records,
//! (b) produce-to-consume latency at a fixed rate with a concurrent consumer,
//! (c) broker CPU seconds and peak RSS over each phase (from /proc).
//!
//! Usage: sluice-bench [--records-2k N] [--records-100b N] [--rate MSGS_PER_S] [--duration-s S]
//!                     [--partitions P] [--phase all|throughput|latency] [--set key=value]...
//! The broker binary is found like the tests find it ($SLUICE_BIN first).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::BaseConsumer;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::{ClientContext, Offset};
use sluice_integration_tests::{clients, procstat, NodeOptions, SluiceNode};

struct Args {
    records_2k: u64,
    records_100b: u64,
    rate: u64,
    duration_s: u64,
    partitions: i32,
    phase: String,
    settings: Vec<(String, String)>,
}

fn parse_args() -> Result<Args> {
    let mut a = Args {
        records_2k: 200_000,
        records_100b: 1_000_000,
        rate: 20_000,
        duration_s: 20,
        partitions: 3,
        phase: "all".into(),
        settings: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--records-2k" => a.records_2k = val()?.parse()?,
            "--records-100b" => a.records_100b = val()?.parse()?,
            "--rate" => a.rate = val()?.parse()?,
            "--duration-s" => a.duration_s = val()?.parse()?,
            "--partitions" => a.partitions = val()?.parse()?,
            "--phase" => a.phase = val()?,
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
    let mut rec = BaseRecord::to(topic).key(key).payload(payload);
    loop {
        match p.send(rec) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                rec = r;
                p.poll(Duration::from_millis(5));
            }
            Err((e, _)) => bail!("send: {e}"),
        }
    }
}

/// Broker resource use over one phase.
struct Usage {
    cpu_s: f64,
    peak_rss_mb: f64,
    peak_is_since_start: bool,
}

struct Meter {
    pid: u32,
    cpu0: f64,
    reset_ok: bool,
}
impl Meter {
    fn start(pid: u32) -> Result<Self> {
        let reset_ok = procstat::reset_peak_rss(pid);
        Ok(Self {
            pid,
            cpu0: procstat::cpu_seconds(pid)?,
            reset_ok,
        })
    }
    fn stop(self) -> Result<Usage> {
        Ok(Usage {
            cpu_s: procstat::cpu_seconds(self.pid)? - self.cpu0,
            peak_rss_mb: procstat::status_kib(self.pid, "VmHWM")? as f64 / 1024.0,
            peak_is_since_start: !self.reset_ok,
        })
    }
}

struct ThroughputRow {
    name: String,
    records: u64,
    secs: f64,
    bytes: u64,
    usage: Usage,
}

fn throughput_phase(node: &SluiceNode, name: &str, topic: &str, records: u64, size: usize) -> Result<ThroughputRow> {
    let (p, counts) = producer(&node.bootstrap())?;
    let payload = vec![b'x'; size];
    let meter = Meter::start(node.pid().context("broker not running")?)?;
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
    received: u64,
    lat_ms: [f64; 4],
    achieved_rate: f64,
    usage: Usage,
}

fn latency_phase(node: &SluiceNode, topic: &str, partitions: i32, rate: u64, duration_s: u64) -> Result<LatencyRow> {
    let total = rate * duration_s;
    let epoch = Instant::now();
    let consumer: BaseConsumer = clients::consumer_config(&node.bootstrap())
        .set("fetch.wait.max.ms", "500") // librdkafka's default: measure what clients get
        .create()?;
    clients::assign(
        &consumer,
        topic,
        &(0..partitions).collect::<Vec<_>>(),
        Offset::Offset(0),
    )?;
    let reader = std::thread::spawn(move || -> Result<Vec<u64>> {
        let mut lat_ns = Vec::with_capacity(total as usize);
        let deadline = Instant::now() + Duration::from_secs(duration_s + 60);
        while (lat_ns.len() as u64) < total && Instant::now() < deadline {
            if let Some(m) = consumer.poll(Duration::from_millis(100)) {
                let m = m?;
                let now = epoch.elapsed().as_nanos() as u64;
                let sent = u64::from_be_bytes(m.payload().context("no payload")?[..8].try_into()?);
                lat_ns.push(now.saturating_sub(sent));
            }
        }
        Ok(lat_ns)
    });

    let (p, counts) = producer(&node.bootstrap())?;
    let mut payload = vec![b'l'; 2048];
    let meter = Meter::start(node.pid().context("broker not running")?)?;
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
    let mut lat = reader.join().map_err(|_| anyhow::anyhow!("reader panicked"))??;
    let usage = meter.stop()?;
    let failed = counts.failed.load(Ordering::Relaxed);
    ensure!(failed == 0, "latency phase: {failed} deliveries failed");
    lat.sort_unstable();
    let q = |f: f64| -> f64 {
        if lat.is_empty() {
            return f64::NAN;
        }
        let i = ((lat.len() as f64 * f).ceil() as usize).clamp(1, lat.len()) - 1;
        lat[i] as f64 / 1e6
    };
    Ok(LatencyRow {
        sent: total,
        received: lat.len() as u64,
        lat_ms: [
            q(0.50),
            q(0.99),
            q(0.999),
            lat.last().map_or(f64::NAN, |v| *v as f64 / 1e6),
        ],
        achieved_rate: total as f64 / send_secs,
        usage,
    })
}

fn rss_cell(u: &Usage) -> String {
    format!("{:.0}{}", u.peak_rss_mb, if u.peak_is_since_start { "*" } else { "" })
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let args = parse_args()?;
    let mut opts = NodeOptions {
        report_on_drop: false,
        ..NodeOptions::default()
    };
    for (k, v) in &args.settings {
        opts = opts.set(k, v);
    }
    let node = SluiceNode::start(opts)?;
    println!(
        "sluice node at {} (pid {:?}, log {})",
        node.bootstrap(),
        node.pid(),
        node.log_path().display()
    );
    let admin = clients::admin_client(&node.bootstrap())?;
    let mut rows = Vec::new();
    if args.phase != "latency" {
        clients::create_topic(&admin, "bench-2k", args.partitions, &[]).await?;
        clients::create_topic(&admin, "bench-100b", args.partitions, &[]).await?;
        rows.push(throughput_phase(
            &node,
            "produce 2 KB, acks=all",
            "bench-2k",
            args.records_2k,
            2048,
        )?);
        rows.push(throughput_phase(
            &node,
            "produce 100 B, acks=all",
            "bench-100b",
            args.records_100b,
            100,
        )?);
    }
    let latency = if args.phase != "throughput" {
        clients::create_topic(&admin, "bench-latency", args.partitions, &[]).await?;
        Some(latency_phase(
            &node,
            "bench-latency",
            args.partitions,
            args.rate,
            args.duration_s,
        )?)
    } else {
        None
    };

    println!();
    println!(
        "{:<26} {:>9} {:>7} {:>10} {:>8} {:>10} {:>6} {:>8}",
        "phase", "records", "secs", "msgs/s", "MB/s", "broker cpu", "cpu%", "peak MB"
    );
    for r in &rows {
        println!(
            "{:<26} {:>9} {:>7.2} {:>10.0} {:>8.1} {:>9.2}s {:>5.0}% {:>8}",
            r.name,
            r.records,
            r.secs,
            r.records as f64 / r.secs,
            r.bytes as f64 / r.secs / 1e6,
            r.usage.cpu_s,
            100.0 * r.usage.cpu_s / r.secs,
            rss_cell(&r.usage)
        );
    }
    if let Some(l) = &latency {
        println!();
        println!(
            "latency @ {} msgs/s x 2 KB for {} s ({} partitions): sent {} (achieved {:.0}/s), received {}",
            args.rate, args.duration_s, args.partitions, l.sent, l.achieved_rate, l.received
        );
        println!(
            "{:>10} {:>10} {:>10} {:>10} {:>12} {:>8}",
            "p50 ms", "p99 ms", "p99.9 ms", "max ms", "broker cpu", "peak MB"
        );
        println!(
            "{:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>11.2}s {:>8}",
            l.lat_ms[0],
            l.lat_ms[1],
            l.lat_ms[2],
            l.lat_ms[3],
            l.usage.cpu_s,
            rss_cell(&l.usage)
        );
        ensure!(
            l.received == l.sent,
            "consumer received {} of {} records",
            l.received,
            l.sent
        );
    }
    if rows.iter().any(|r| r.usage.peak_is_since_start) || latency.as_ref().is_some_and(|l| l.usage.peak_is_since_start)
    {
        println!("* peak RSS since broker start (could not reset VmHWM via /proc/<pid>/clear_refs)");
    }
    Ok(())
}

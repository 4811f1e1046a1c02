//! `sluice-demo run`: a local 3-node cluster, then the producer, the sink and analytics as child
//! processes (this binary re-executed with their subcommands), and a summary every 2 s.
//! Stops on SIGINT/SIGTERM or after `--duration-s`: producer first (its orders acknowledged),
//! then the consumers, then the brokers.
//!
//! With `--secure` the cluster speaks only SASL_SSL and enforces ACLs ([`SecureFiles`]); the
//! demo grants each program's user what it needs ([`acls`]) before starting the programs,
//! each with its own login, and watches the cluster as `admin`.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rdkafka::consumer::{BaseConsumer, Consumer};

use crate::acls::{self, ADMIN, ANALYTICS, PRODUCER, SINK};
use crate::analytics::Stats;
use crate::cluster::{broker_binary, console_address, LocalCluster, NODES};
use crate::http;
use crate::process::ChildProcess;
use crate::secure::SecureFiles;
use crate::sink_db::{read_next_offsets, SinkCounters};

const TOPIC: &str = "orders";
const PARTITIONS: i32 = 12;
/// The sink's and analytics' groups (their programs' defaults), named in the ACLs.
const SINK_GROUP: &str = "orders-sink";
const ANALYTICS_GROUP: &str = "analytics";
const SUMMARY_INTERVAL: Duration = Duration::from_secs(2);
/// The producer gets this long after SIGTERM to have its last orders acknowledged.
const PRODUCER_STOP_TIMEOUT: Duration = Duration::from_secs(20);
const CONSUMER_STOP_TIMEOUT: Duration = Duration::from_secs(15);
/// Until the producer has created the topic and every partition has a leader.
const TOPIC_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// Orders per second, before --scale.
    #[arg(long, default_value_t = 20_000.0)]
    pub rate: f64,
    /// Approximate size of each order in bytes.
    #[arg(long, default_value_t = 2048)]
    pub size: usize,
    /// Multiplies --rate (e.g. 0.05 on a small machine).
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
    /// Stop after this many seconds (default: run until Ctrl-C).
    #[arg(long)]
    pub duration_s: Option<u64>,
    /// Broker data and logs, the sink database, the acked log and every program's log.
    #[arg(long, default_value = "./demo-data")]
    pub data_dir: PathBuf,
    /// Where analytics serves GET /stats.
    #[arg(long, default_value = "127.0.0.1:18080")]
    pub analytics_listen: SocketAddr,
    /// Secure the cluster: SASL_SSL listeners (a test CA made in --data-dir), SCRAM-SHA-512
    /// logins and ACLs; the producer, the sink and analytics each log in as their own user,
    /// allowed only what it needs.
    #[arg(long)]
    pub secure: bool,
}

/// The demo's files under `--data-dir`.
struct Paths {
    db: PathBuf,
    acked_log: PathBuf,
    dir: PathBuf,
}

impl Paths {
    fn log(&self, program: &str) -> PathBuf {
        self.dir.join(format!("{program}.log"))
    }
}

pub fn run(args: &RunArgs, stop: &AtomicBool) -> Result<()> {
    let rate = args.rate * args.scale;
    if !(rate > 0.0 && rate.is_finite()) {
        bail!("--rate times --scale must be a positive number of orders per second, not {rate}");
    }
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("cannot create --data-dir {}", args.data_dir.display()))?;
    let dir = args.data_dir.canonicalize()?;
    let paths = Paths {
        db: dir.join("orders.db"),
        acked_log: dir.join("acked.log"),
        dir,
    };
    let broker = broker_binary()?;
    let secure = args
        .secure
        .then(|| SecureFiles::prepare(&paths.dir, NODES))
        .transpose()?;
    println!(
        "starting {NODES} {}brokers ({}), data and logs in {}",
        if secure.is_some() { "secured " } else { "" },
        broker.display(),
        paths.dir.display()
    );
    let mut cluster = LocalCluster::start(&broker, &paths.dir, secure.as_ref(), stop)?;
    println!(
        "cluster up at {}; console at http://{}/ (Prometheus metrics at /metrics on each node)",
        cluster.bootstrap(),
        console_address(1)
    );
    // The acked log counts this run's acknowledgements (the sink database keeps every run's).
    File::create(&paths.acked_log).with_context(|| format!("cannot create {}", paths.acked_log.display()))?;
    let programs = grant(secure.as_ref(), cluster.bootstrap())
        .and_then(|()| start_programs(args, rate, &paths, &cluster, secure.as_ref(), stop));
    let result = programs.and_then(|mut programs| {
        let watched = watch(args, &paths, &mut cluster, &mut programs, stop);
        let stopped = stop_programs(programs);
        watched.and(stopped)
    });
    println!("stopping the brokers");
    let brokers = cluster.stop();
    result.and(brokers)?;
    println!("stopped; the orders are in {}", paths.db.display());
    Ok(())
}

/// The three programs, in the order they are stopped.
struct Programs {
    producer: ChildProcess,
    sink: ChildProcess,
    analytics: ChildProcess,
}

/// Secured: the ACLs that let each program's user do its work, created as `admin`.
fn grant(secure: Option<&SecureFiles>, bootstrap: &str) -> Result<()> {
    let Some(secure) = secure else { return Ok(()) };
    let acls = acls::workload_acls(TOPIC, SINK_GROUP, ANALYTICS_GROUP);
    acls::grant(bootstrap, &secure.client_security(ADMIN)?, &acls)?;
    println!(
        "secured: SASL_SSL, SCRAM-SHA-512 and ACLs; {} ACLs for {PRODUCER}, {SINK} and {ANALYTICS}; \
         each user's login is in {}/<user>.properties (e.g. kcat -b {bootstrap} -F {}/{ADMIN}.properties -L)",
        acls.len(),
        secure.dir().display(),
        secure.dir().display()
    );
    Ok(())
}

fn start_programs(
    args: &RunArgs,
    rate: f64,
    paths: &Paths,
    cluster: &LocalCluster,
    secure: Option<&SecureFiles>,
    stop: &AtomicBool,
) -> Result<Programs> {
    let me = std::env::current_exe().context("cannot find this program's own binary to start the demo programs")?;
    // Each program logs in as its own user when secured (its password stays in the file).
    let program = |subcommand: &str, user: &str| {
        let mut cmd = Command::new(&me);
        cmd.arg(subcommand).arg("--bootstrap").arg(cluster.bootstrap());
        if let Some(secure) = secure {
            cmd.arg("--security-config").arg(secure.client_config(user));
        }
        cmd
    };
    let mut cmd = program("producer", PRODUCER);
    cmd.arg("--rate")
        .arg(rate.to_string())
        .arg("--size")
        .arg(args.size.to_string())
        .arg("--partitions")
        .arg(PARTITIONS.to_string())
        .arg("--acked-log")
        .arg(&paths.acked_log);
    let mut producer = ChildProcess::spawn("producer", cmd, &paths.log("producer"))?;
    await_topic(&cluster.observer()?, &mut producer, stop)?;
    let mut cmd = program("sink", SINK);
    cmd.arg("--db").arg(&paths.db);
    let sink = ChildProcess::spawn("sink", cmd, &paths.log("sink"))?;
    let mut cmd = program("analytics", ANALYTICS);
    cmd.arg("--listen").arg(args.analytics_listen.to_string());
    let analytics = ChildProcess::spawn("analytics", cmd, &paths.log("analytics"))?;
    println!(
        "producer, sink and analytics started (logs {}/{{producer,sink,analytics}}.log; GET http://{}/stats)",
        paths.dir.display(),
        args.analytics_listen
    );
    Ok(Programs {
        producer,
        sink,
        analytics,
    })
}

/// Waits until the producer has created the topic and each partition has a leader.
fn await_topic(client: &BaseConsumer, producer: &mut ChildProcess, stop: &AtomicBool) -> Result<()> {
    let deadline = Instant::now() + TOPIC_TIMEOUT;
    while !stop.load(Ordering::Relaxed) {
        producer.check_running()?;
        let ready = client
            .fetch_metadata(Some(TOPIC), Duration::from_secs(1))
            .is_ok_and(|m| {
                m.topics().iter().any(|t| {
                    t.error().is_none()
                        && t.partitions().len() == PARTITIONS as usize
                        && t.partitions().iter().all(|p| p.leader() >= 0)
                })
            });
        if ready {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!(
                "topic {TOPIC} was not ready after {TOPIC_TIMEOUT:?}; see {}",
                producer.log().display()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(())
}

/// Prints the summary every [`SUMMARY_INTERVAL`] until `stop`, the duration ends, or a
/// program or broker exits (an error).
fn watch(
    args: &RunArgs,
    paths: &Paths,
    cluster: &mut LocalCluster,
    programs: &mut Programs,
    stop: &AtomicBool,
) -> Result<()> {
    let client = cluster.observer()?;
    let started = Instant::now();
    let mut acked = AckedLog::new(&paths.acked_log);
    let mut last = (Instant::now(), log_end_offsets(&client));
    let duration = args.duration_s.map(Duration::from_secs);
    while !stop.load(Ordering::Relaxed) && duration.is_none_or(|d| started.elapsed() < d) {
        let next_summary = Instant::now() + SUMMARY_INTERVAL;
        while Instant::now() < next_summary && !stop.load(Ordering::Relaxed) {
            cluster.check_running()?;
            programs.producer.check_running()?;
            programs.sink.check_running()?;
            programs.analytics.check_running()?;
            std::thread::sleep(Duration::from_millis(100));
        }
        let now = (Instant::now(), log_end_offsets(&client));
        println!(
            "{}",
            summary(
                started.elapsed(),
                &last,
                &now,
                acked.count(),
                paths,
                args.analytics_listen
            )
        );
        last = now;
    }
    Ok(())
}

/// One summary line; a figure that cannot be read right now (a broker restarting, a program
/// starting) shows as `?`.
fn summary(
    elapsed: Duration,
    last: &(Instant, Option<i64>),
    now: &(Instant, Option<i64>),
    acked: Result<u64>,
    paths: &Paths,
    analytics: SocketAddr,
) -> String {
    let unknown = || "?".to_string();
    let produced_per_s = match (last.1, now.1) {
        (Some(a), Some(b)) => format!("{:.0}", (b - a) as f64 / now.0.duration_since(last.0).as_secs_f64()),
        _ => unknown(),
    };
    let acked = acked.map_or_else(|_| unknown(), |n| n.to_string());
    let counters = SinkCounters::read(&paths.db).ok();
    let rows = counters.map_or_else(unknown, |c| c.rows.to_string());
    let covered: Option<i64> = read_next_offsets(&paths.db, TOPIC).ok().map(|o| o.values().sum());
    let lag = match (now.1, covered) {
        (Some(end), Some(covered)) => (end - covered).to_string(),
        _ => unknown(),
    };
    let figures = http::get(analytics, "/stats")
        .ok()
        .and_then(|body| serde_json::from_str::<Stats>(&body).ok())
        .and_then(|s| s.minutes.last().cloned())
        .map_or_else(unknown, |m| {
            let minute_of_day = m.minute_start_ms.div_euclid(60_000).rem_euclid(24 * 60);
            format!(
                "{} orders, ${:.2} in {:02}:{:02} UTC",
                m.figures.orders,
                m.figures.revenue_cents as f64 / 100.0,
                minute_of_day / 60,
                minute_of_day % 60
            )
        });
    format!(
        "[{:>5}s] produced/s {produced_per_s} | acked {acked} | sink rows {rows}, lag {lag} | analytics last minute {figures}",
        elapsed.as_secs()
    )
}

/// Sum of the topic's log end offsets (high watermarks), or `None` if one cannot be read.
fn log_end_offsets(client: &BaseConsumer) -> Option<i64> {
    (0..PARTITIONS)
        .map(|p| {
            client
                .fetch_watermarks(TOPIC, p, Duration::from_secs(1))
                .ok()
                .map(|(_, high)| high)
        })
        .sum()
}

/// Counts the lines of the acked log, reading only what was appended since the last count.
struct AckedLog<'a> {
    path: &'a Path,
    read_bytes: u64,
    lines: u64,
}

impl<'a> AckedLog<'a> {
    fn new(path: &'a Path) -> Self {
        AckedLog {
            path,
            read_bytes: 0,
            lines: 0,
        }
    }

    fn count(&mut self) -> Result<u64> {
        let mut f = File::open(self.path)?;
        f.seek(SeekFrom::Start(self.read_bytes))?;
        let mut buf = [0u8; 64 * 1024];
        loop {
            let n = f.read(&mut buf)?;
            if n == 0 {
                return Ok(self.lines);
            }
            self.read_bytes += n as u64;
            self.lines += buf[..n].iter().filter(|b| **b == b'\n').count() as u64;
        }
    }
}

/// Stops the producer first (so its last orders are acknowledged while the consumers still
/// run), then the consumers; reports the first program that did not stop cleanly.
fn stop_programs(programs: Programs) -> Result<()> {
    let Programs {
        mut producer,
        mut sink,
        mut analytics,
    } = programs;
    println!("stopping the producer, then the sink and analytics");
    let mut failures = Vec::new();
    let mut check = |p: &mut ChildProcess, timeout: Duration| match p.terminate(timeout) {
        Ok(status) if status.success() => {}
        Ok(status) => failures.push(format!(
            "the {} exited with {status}; see {}",
            p.name(),
            p.log().display()
        )),
        Err(e) => failures.push(format!("{e:#}")),
    };
    check(&mut producer, PRODUCER_STOP_TIMEOUT);
    sink.send_sigterm()?;
    analytics.send_sigterm()?;
    check(&mut sink, CONSUMER_STOP_TIMEOUT);
    check(&mut analytics, CONSUMER_STOP_TIMEOUT);
    if !failures.is_empty() {
        bail!("{}", failures.join("; "));
    }
    Ok(())
}

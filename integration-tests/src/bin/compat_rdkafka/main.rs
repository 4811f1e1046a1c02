//! The compatibility-matrix adapter for rust-rdkafka (issue 11 §3, driven by compat/run.py).
//!
//! Usage: `compat_rdkafka --bootstrap HOST:PORT[,...] --brokers N --prefix P --security FILE
//! --scenarios s1,s2,...`
//!
//! Runs each requested scenario against a running cluster with the client's default settings
//! (unless the scenario names one) and prints one JSON line per scenario on stdout as soon as it
//! finishes; everything else goes to stderr. Each scenario has its own deadline, so one hang
//! cannot eat the driver's per-client timeout.

mod client;
mod groups;
mod scenarios;
mod secure;
mod tx;

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// What every scenario gets: where the cluster is, how to name what it creates, and the
/// secured listeners' logins (the --security file, `{"scenarios": {id: {...}}}`).
#[derive(Clone)]
pub struct Opts {
    pub bootstrap: String,
    pub brokers: usize,
    pub prefix: String,
    pub security: Arc<serde_json::Value>,
}

/// A scenario that cannot be expressed with this client; the text is the reason.
#[derive(Debug)]
pub struct NotApplicable(pub String);

impl std::fmt::Display for NotApplicable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NotApplicable {}

const DEFAULT_DEADLINE: Duration = Duration::from_secs(40);

fn deadline(id: &str) -> Duration {
    match id {
        "many_topics" | "idempotent_produce" => Duration::from_secs(70),
        _ => DEFAULT_DEADLINE,
    }
}

fn parse_args() -> Result<(Opts, Vec<String>)> {
    let mut args = std::env::args().skip(1);
    let (mut bootstrap, mut brokers, mut prefix, mut scenarios) = (None, None, None, None);
    let mut security = serde_json::json!({ "error": "no --security file given" });
    while let Some(flag) = args.next() {
        let value = args.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--bootstrap" => bootstrap = Some(value),
            "--brokers" => brokers = Some(value.parse().context("--brokers must be a number")?),
            "--prefix" => prefix = Some(value),
            "--security" => {
                let text = std::fs::read_to_string(&value).with_context(|| format!("--security {value}"))?;
                security = serde_json::from_str(&text).with_context(|| format!("--security {value}"))?;
            }
            "--scenarios" => scenarios = Some(value.split(',').map(str::to_owned).collect()),
            _ => bail!("unknown flag {flag}"),
        }
    }
    let usage = "usage: compat_rdkafka --bootstrap HOST:PORT[,...] --brokers N --prefix P --security FILE \
                 --scenarios s1,s2,...";
    Ok((
        Opts {
            bootstrap: bootstrap.context(usage)?,
            brokers: brokers.context(usage)?,
            prefix: prefix.context(usage)?,
            security: Arc::new(security),
        },
        scenarios.context(usage)?,
    ))
}

/// Writes librdkafka's log lines (rust-rdkafka forwards them to the `log` crate) to stderr:
/// warnings always, everything when $COMPAT_RDKAFKA_DEBUG asks for debug contexts.
struct StderrLog;

impl log::Log for StderrLog {
    fn enabled(&self, _: &log::Metadata) -> bool {
        true
    }
    fn log(&self, record: &log::Record) {
        eprintln!("[rdkafka-rust {}] {}", record.level(), record.args());
    }
    fn flush(&self) {}
}

fn main() -> Result<()> {
    let (opts, ids) = parse_args()?;
    let level = match std::env::var_os("COMPAT_RDKAFKA_DEBUG") {
        Some(_) => log::LevelFilter::Debug,
        None => log::LevelFilter::Warn,
    };
    log::set_logger(&StderrLog).map(|()| log::set_max_level(level)).ok();
    let runtime = tokio::runtime::Runtime::new()?;
    let (side_by_side, in_turn): (Vec<String>, Vec<String>) =
        ids.into_iter().partition(|id| SECURITY_ROWS.contains(&id.as_str()));
    for id in in_turn {
        let outcome = runtime.block_on(run(&id, &opts));
        report(&id, outcome)?;
    }
    runtime.block_on(async {
        let mut rows = tokio::task::JoinSet::new();
        for id in side_by_side {
            let opts = opts.clone();
            rows.spawn(async move {
                let outcome = run(&id, &opts).await;
                (id, outcome)
            });
        }
        while let Some(done) = rows.join_next().await {
            let (id, outcome) = done.context("a security row's task panicked")?;
            report(&id, outcome)?;
        }
        anyhow::Ok(())
    })?;
    // Clients still closing in the background (a hung scenario's) must not hold the exit.
    runtime.shutdown_timeout(Duration::from_secs(1));
    Ok(())
}

/// The security rows run side by side, after the others: each has its own topic, group and
/// login, and spends most of its time in its group's first join (the broker's
/// group.initial.rebalance.delay.ms), so in turn they would only add up waits.
const SECURITY_ROWS: &[&str] = &[
    "sasl_ssl_scram512",
    "sasl_ssl_plain",
    "sasl_plaintext_scram256",
    "ssl_mtls",
    "oauthbearer",
    "sasl_wrong_password",
];

fn report(id: &str, (result, detail): (&'static str, String)) -> Result<()> {
    let line = serde_json::json!({ "scenario": id, "result": result, "detail": detail });
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()?;
    Ok(())
}

async fn run(id: &str, opts: &Opts) -> (&'static str, String) {
    if id.starts_with("tool_") {
        return ("n/a", "not a client-library feature".into());
    }
    let limit = deadline(id);
    let start = Instant::now();
    // A task of its own, so a panic fails this scenario only, and a hang can be aborted.
    let (task_id, task_opts) = (id.to_owned(), opts.clone());
    let mut task = tokio::spawn(async move { scenarios::run(&task_id, &task_opts).await });
    let outcome = match tokio::time::timeout(limit, &mut task).await {
        Ok(Ok(outcome)) => outcome,
        Ok(Err(join)) => Err(anyhow::anyhow!("scenario panicked: {join}")),
        Err(_) => {
            task.abort();
            Err(anyhow::anyhow!("scenario did not finish within {limit:?}"))
        }
    };
    let shown = outcome.as_ref().map_err(|e| format!("{e:#}"));
    eprintln!("[rdkafka-rust] {id} finished in {:?}: {shown:?}", start.elapsed());
    match outcome {
        Ok(note) => ("pass", note),
        Err(e) => match e.downcast_ref::<NotApplicable>() {
            Some(na) => ("n/a", na.0.clone()),
            None => ("fail", format!("{e:#}")),
        },
    }
}

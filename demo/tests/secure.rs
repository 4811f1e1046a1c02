//! The seed workload on a secured cluster (`sluice-demo run --secure`): SASL_SSL listeners,
//! SCRAM-SHA-512 logins and ACLs, each program logged in as its own user. Orders flow end to
//! end through all three users, and each user is refused what its ACLs do not grant, with
//! Kafka's error codes.
//!
//! `run` binds fixed ports (19092/29092/39092, consoles 19644/...), so the tests here take
//! turns.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::DeliveryResult;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use sluice_demo::acls::{self, ADMIN, ANALYTICS, PRODUCER, SINK, USERS};
use sluice_demo::admin::{self, Acl, Operation, ResourceType};
use sluice_demo::analytics::Stats;
use sluice_demo::cluster::{broker_binary, console_address, LocalCluster, NODES};
use sluice_demo::http;
use sluice_demo::process::ChildProcess;
use sluice_demo::secure::SecureFiles;
use sluice_demo::security::ClientSecurity;
use sluice_demo::sink_db::SinkCounters;
use sluice_demo::topic::ensure_topic;
use sluice_integration_tests::clients::wait_until;
use sluice_integration_tests::free_loopback_port;

const TOPIC: &str = "orders";
/// Orders each consumer must have processed while the run goes on.
const ORDERS_SEEN: u64 = 300;

/// `run`'s fixed ports: one test at a time.
static PORTS: Mutex<()> = Mutex::new(());

fn take_ports() -> std::sync::MutexGuard<'static, ()> {
    PORTS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `test` in a fresh directory, kept (and named) if it fails.
fn in_temp_dir(prefix: &str, test: impl FnOnce(&Path) -> Result<()>) -> Result<()> {
    let work = tempfile::Builder::new().prefix(prefix).tempdir()?;
    let result = test(work.path());
    if result.is_err() {
        eprintln!("[secure test] kept the logs and data in {}", work.keep().display());
    }
    result
}

#[test]
fn a_secured_run_moves_orders_end_to_end_through_three_users() -> Result<()> {
    let _ports = take_ports();
    in_temp_dir("sluice-demo-secure-run-", secured_run)
}

fn secured_run(dir: &Path) -> Result<()> {
    let analytics: SocketAddr = format!("127.0.0.1:{}", free_loopback_port()?).parse()?;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sluice-demo"));
    cmd.args(["run", "--secure", "--scale", "0.01", "--duration-s", "20"])
        .arg("--data-dir")
        .arg(dir)
        .arg("--analytics-listen")
        .arg(analytics.to_string())
        .env("RUST_LOG", "info");
    let started = Instant::now();
    let mut run = ChildProcess::spawn("sluice-demo run --secure", cmd, &dir.join("run.log"))?;

    // While it runs: both groups consume, and the console shows each program's user connected.
    let console: SocketAddr = console_address(1).parse()?;
    let mut seen = (0, 0, Vec::new());
    let flowing = wait_until(Duration::from_secs(90), "orders through the sink and analytics", || {
        if run.try_wait().ok()?.is_some() {
            return Some(false);
        }
        let rows = SinkCounters::read(&dir.join("orders.db")).map_or(0, |c| c.rows as u64);
        let counted = http::get(analytics, "/stats")
            .ok()
            .and_then(|body| serde_json::from_str::<Stats>(&body).ok())
            .map_or(0, |s| s.totals.orders);
        let principals = connected_principals(console).unwrap_or_default();
        let users = [PRODUCER, SINK, ANALYTICS]
            .iter()
            .all(|u| principals.contains(&format!("User:{u}")));
        seen = (rows, counted, principals);
        (rows >= ORDERS_SEEN && counted >= ORDERS_SEEN && users).then_some(true)
    });
    ensure!(
        flowing.as_ref().is_ok_and(|f| *f),
        "sink rows {}, analytics {} orders, connected {:?}; {}",
        seen.0,
        seen.1,
        seen.2,
        flowing.err().map_or_else(
            || format!("the run ended; see {}", run.log().display()),
            |e| e.to_string()
        )
    );
    eprintln!(
        "[secure test] sink {} rows, analytics {} orders, connected {:?}",
        seen.0, seen.1, seen.2
    );

    let status = run
        .wait_for_exit(Duration::from_secs(120))?
        .context("the secured run did not stop after --duration-s")?;
    ensure!(
        status.success(),
        "the secured run failed ({status}); see {}",
        run.log().display()
    );
    eprintln!("[secure test] the run took {:.0?}", started.elapsed());

    // Every row is an acknowledged order, once.
    let acked: HashSet<String> = std::fs::read_to_string(dir.join("acked.log"))?
        .lines()
        .map(str::to_string)
        .collect();
    let rows = table_ids(dir)?;
    ensure!(rows.len() as u64 >= ORDERS_SEEN, "{} rows", rows.len());
    let distinct: HashSet<&String> = rows.iter().collect();
    ensure!(distinct.len() == rows.len(), "the sink table names an order twice");
    let unknown: Vec<&&String> = distinct.iter().filter(|id| !acked.contains(**id)).take(5).collect();
    ensure!(
        unknown.is_empty(),
        "rows that were never acknowledged, e.g. {unknown:?}"
    );
    let counters = SinkCounters::read(&dir.join("orders.db"))?;
    ensure!(counters.duplicates == 0 && counters.malformed == 0, "{counters:?}");

    secrets_stay_private(dir)
}

/// `User:...` of every open client connection the cluster's console lists.
fn connected_principals(console: SocketAddr) -> Result<Vec<String>> {
    let cluster: serde_json::Value = serde_json::from_str(&http::get(console, "/api/cluster")?)?;
    let mut principals: Vec<String> = cluster["clients"]
        .as_array()
        .context("no clients in /api/cluster")?
        .iter()
        .filter_map(|c| c["principal"].as_str().map(str::to_string))
        .collect();
    principals.sort();
    principals.dedup();
    Ok(principals)
}

fn table_ids(dir: &Path) -> Result<Vec<String>> {
    let conn =
        rusqlite::Connection::open_with_flags(dir.join("orders.db"), rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let mut stmt = conn.prepare("SELECT order_id FROM orders")?;
    let ids = stmt.query_map([], |r| r.get(0))?;
    Ok(ids.collect::<rusqlite::Result<_>>()?)
}

/// The logins and keys are readable by their owner only, and no password appears in any log.
fn secrets_stay_private(dir: &Path) -> Result<()> {
    let secure = dir.join("secure");
    let mut passwords = Vec::new();
    for user in USERS {
        let path = secure.join(format!("{user}.properties"));
        ensure_private(&path)?;
        let login = ClientSecurity::load(&path)?;
        passwords.push(login.get("sasl.password").context("no password")?.to_string());
    }
    for id in 1..=NODES {
        ensure_private(&secure.join(format!("node-{id}.pem")))?;
    }
    let mut logs: Vec<PathBuf> = ["run", "producer", "sink", "analytics"]
        .iter()
        .map(|p| dir.join(format!("{p}.log")))
        .collect();
    logs.extend((1..=NODES).map(|id| dir.join(format!("node-{id}/sluice.log"))));
    for log in logs {
        let text = std::fs::read_to_string(&log).with_context(|| format!("{}", log.display()))?;
        for password in &passwords {
            ensure!(!text.contains(password.as_str()), "{} shows a password", log.display());
        }
    }
    Ok(())
}

fn ensure_private(path: &Path) -> Result<()> {
    let mode = std::fs::metadata(path)
        .with_context(|| format!("{}", path.display()))?
        .permissions()
        .mode();
    ensure!(mode & 0o077 == 0, "{} has mode {mode:o}", path.display());
    Ok(())
}

#[test]
fn each_user_is_refused_what_its_acls_do_not_grant() -> Result<()> {
    let _ports = take_ports();
    in_temp_dir("sluice-demo-secure-acls-", |dir| {
        let secure = SecureFiles::prepare(dir, NODES)?;
        let stop = AtomicBool::new(false);
        let cluster = LocalCluster::start(&broker_binary()?, dir, Some(&secure), &stop)?;
        let result = refusals(cluster.bootstrap(), &secure);
        let stopped = cluster.stop();
        result.and(stopped)
    })
}

/// Every check runs, and all that fail are reported together.
fn refusals(bootstrap: &str, secure: &SecureFiles) -> Result<()> {
    acls::grant(
        bootstrap,
        &secure.client_security(ADMIN)?,
        &acls::workload_acls(TOPIC, "orders-sink", "analytics"),
    )?;
    // The producer's user creates the topic, as in the demo (CREATE on it).
    ensure_topic(bootstrap, &secure.client_security(PRODUCER)?, TOPIC, 3, 3)?;
    let login = |user: &str| secure.client_security(user);
    let checks: Vec<(&str, Result<()>)> = vec![
        (
            "a wrong password is refused",
            wrong_password_is_refused(bootstrap, secure),
        ),
        (
            "orders-producer may not create ACLs (CLUSTER_AUTHORIZATION_FAILED)",
            login(PRODUCER).and_then(|l| may_not_create_acls(bootstrap, &l)),
        ),
        (
            "analytics may not write to orders (TOPIC_AUTHORIZATION_FAILED)",
            login(ANALYTICS).and_then(|l| produce_is_refused(bootstrap, &l)),
        ),
        (
            "analytics may not read in group orders-sink (GROUP_AUTHORIZATION_FAILED)",
            login(ANALYTICS).and_then(|l| group_is_refused(bootstrap, &l, "orders-sink")),
        ),
        (
            "orders-sink may not read in group analytics (GROUP_AUTHORIZATION_FAILED)",
            login(SINK).and_then(|l| group_is_refused(bootstrap, &l, "analytics")),
        ),
        (
            "orders-producer may not read orders (TOPIC_AUTHORIZATION_FAILED)",
            login(PRODUCER).and_then(|l| fetch_is_refused(bootstrap, &l)),
        ),
    ];
    let failed: Vec<String> = checks
        .into_iter()
        .filter_map(|(what, result)| result.err().map(|e| format!("{what}: {e:#}")))
        .collect();
    if !failed.is_empty() {
        bail!("{} refusal checks failed:\n  {}", failed.len(), failed.join("\n  "));
    }
    Ok(())
}

fn wrong_password_is_refused(bootstrap: &str, secure: &SecureFiles) -> Result<()> {
    let wrong = ClientSecurity::scram_sha512(ANALYTICS, "not-the-password", secure.ca());
    match admin::connect_any(bootstrap, &wrong) {
        Ok(_) => bail!("logged in with a wrong password"),
        Err(e) => {
            let message = format!("{e:#}");
            ensure!(message.contains("SaslAuthenticationFailed"), "{message}");
            Ok(())
        }
    }
}

fn may_not_create_acls(bootstrap: &str, login: &ClientSecurity) -> Result<()> {
    let mut connection = admin::connect_any(bootstrap, login)?;
    let grab = Acl {
        principal: format!("User:{PRODUCER}"),
        operation: Operation::Read,
        resource_type: ResourceType::Group,
        resource_name: "orders-sink".into(),
    };
    match connection.create_acls(&[grab]) {
        Ok(()) => bail!("it granted itself READ on group orders-sink"),
        Err(e) => {
            let message = format!("{e:#}");
            ensure!(message.contains("ClusterAuthorizationFailed"), "{message}");
            Ok(())
        }
    }
}

fn client(bootstrap: &str, login: &ClientSecurity) -> ClientConfig {
    let mut config = ClientConfig::new();
    login.apply(&mut config);
    config.set("bootstrap.servers", bootstrap);
    config
}

/// The delivery report of the one record sent.
#[derive(Default)]
struct Delivery(Mutex<Option<Result<(), Option<RDKafkaErrorCode>>>>);

impl ClientContext for Delivery {}

impl ProducerContext for Delivery {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        let outcome = match result {
            Ok(_) => Ok(()),
            Err((e, _)) => Err(e.rdkafka_error_code()),
        };
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(outcome);
    }
}

fn produce_is_refused(bootstrap: &str, login: &ClientSecurity) -> Result<()> {
    let producer: BaseProducer<Delivery> = client(bootstrap, login)
        .set("acks", "all")
        .set("message.timeout.ms", "15000")
        .create_with_context(Delivery::default())?;
    producer
        .send(BaseRecord::<str, str>::to(TOPIC).payload("not an order"))
        .map_err(|(e, _)| e)?;
    let outcome = wait_until(Duration::from_secs(20), "the delivery report", || {
        producer.poll(Duration::from_millis(100));
        *producer.context().0.lock().unwrap_or_else(|e| e.into_inner())
    })?;
    match outcome {
        Err(Some(RDKafkaErrorCode::TopicAuthorizationFailed)) => Ok(()),
        Ok(()) => bail!("the record was acknowledged: Produce does not check WRITE on the topic"),
        Err(code) => bail!("refused with {code:?}, not TOPIC_AUTHORIZATION_FAILED"),
    }
}

/// Polls `consumer` until it reports `expected`, for up to 15 s.
fn consumer_error(consumer: &BaseConsumer, expected: RDKafkaErrorCode) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut other = Vec::new();
    while Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Err(e)) if e.rdkafka_error_code() == Some(expected) => return Ok(()),
            Some(Err(e)) => other.push(e.to_string()),
            Some(Ok(_)) => bail!("it read a record"),
            None => {}
        }
    }
    bail!("no {expected:?} within 15 s (other errors: {other:?})")
}

fn group_is_refused(bootstrap: &str, login: &ClientSecurity, group: &str) -> Result<()> {
    let consumer: BaseConsumer = client(bootstrap, login)
        .set("group.id", group)
        .set("auto.offset.reset", "earliest")
        .create()?;
    consumer.subscribe(&[TOPIC])?;
    consumer_error(&consumer, RDKafkaErrorCode::GroupAuthorizationFailed)
}

fn fetch_is_refused(bootstrap: &str, login: &ClientSecurity) -> Result<()> {
    // librdkafka assigns only with a group.id; this one is never joined (its refusal, as the
    // producer may read no group, is another error the check passes over).
    let consumer: BaseConsumer = client(bootstrap, login)
        .set("group.id", "orders-producer-probe")
        .set("enable.auto.commit", "false")
        .create()?;
    let mut assignment = TopicPartitionList::new();
    assignment.add_partition_offset(TOPIC, 0, Offset::Beginning)?;
    consumer.assign(&assignment)?;
    consumer_error(&consumer, RDKafkaErrorCode::TopicAuthorizationFailed)
}

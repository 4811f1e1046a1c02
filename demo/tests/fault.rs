//! The seed workload under faults, with real processes: a 3-node cluster, the producer, the
//! sink and analytics as `sluice-demo` child processes. Mid-run the sink is SIGKILLed and
//! restarted, then the sink group's coordinator broker is SIGKILLed and restarted. Afterwards
//! the sink table holds every acknowledged order exactly once and nothing else, and analytics
//! counted each exactly once.

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use sluice_demo::analytics::Stats;
use sluice_demo::http;
use sluice_demo::process::ChildProcess;
use sluice_demo::sink_db::{read_next_offsets, SinkCounters};
use sluice_integration_tests::clients::wait_until;
use sluice_integration_tests::faults::FAST_FAILOVER;
use sluice_integration_tests::groups::{committed_offsets, find_coordinator};
use sluice_integration_tests::{free_loopback_port, Cluster};

const TOPIC: &str = "orders";
const PARTITIONS: i32 = 12;
const ORDERS: usize = 8000;
const RATE: &str = "400";
const SINK_GROUP: &str = "orders-sink";

fn demo(subcommand: &str, bootstrap: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sluice-demo"));
    cmd.arg(subcommand)
        .arg("--bootstrap")
        .arg(bootstrap)
        .env("RUST_LOG", "info");
    cmd
}

fn start_sink(bootstrap: &str, dir: &Path) -> Result<ChildProcess> {
    let mut cmd = demo("sink", bootstrap);
    cmd.arg("--db").arg(dir.join("orders.db"));
    ChildProcess::spawn("sink", cmd, &dir.join("sink.log"))
}

/// Orders the sink has stored so far (0 before its database exists).
fn sink_rows(dir: &Path) -> i64 {
    SinkCounters::read(&dir.join("orders.db")).map_or(0, |c| c.rows)
}

/// The acknowledged order ids, in the order the producer logged them.
fn acked_ids(dir: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(dir.join("acked.log")).unwrap_or_default();
    text.lines().map(str::to_string).collect()
}

/// (order id, topic_partition, kafka_offset) of every row in the sink table.
fn table_rows(dir: &Path) -> Result<Vec<(String, String, i64)>> {
    let conn =
        rusqlite::Connection::open_with_flags(dir.join("orders.db"), rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let mut stmt = conn.prepare("SELECT order_id, topic_partition, kafka_offset FROM orders")?;
    let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// Waits for `child` to exit and fails unless it exited 0, naming its log.
fn exits_cleanly(child: &mut ChildProcess, timeout: Duration, what: &str) -> Result<()> {
    let status = child
        .wait_for_exit(timeout)?
        .with_context(|| format!("{what} did not finish within {timeout:?}"))?;
    ensure!(
        status.success(),
        "{what} failed ({status}); see {}",
        child.log().display()
    );
    Ok(())
}

fn analytics_stats(addr: SocketAddr) -> Result<Stats> {
    Ok(serde_json::from_str(&http::get(addr, "/stats")?)?)
}

#[test]
fn every_acked_order_reaches_the_sink_exactly_once_across_sink_and_coordinator_kills() -> Result<()> {
    let work = tempfile::Builder::new().prefix("sluice-demo-fault-").tempdir()?;
    let result = sink_and_coordinator_kills(work.path());
    if result.is_err() {
        eprintln!(
            "[fault test] kept the programs' logs and the database in {}",
            work.keep().display()
        );
    }
    result
}

fn sink_and_coordinator_kills(dir: &Path) -> Result<()> {
    // Fast failover: the killed coordinator's partitions move within seconds, and its restart
    // (refused until its previous session is fenced) comes back within the producer's run.
    let mut settings: Vec<(&str, &str)> = FAST_FAILOVER.to_vec();
    settings.push(("group.initial.rebalance.delay.ms", "0"));
    let mut cluster = Cluster::start(3, &settings)?;
    let bootstrap = cluster.bootstrap();

    // `--count 0` only creates the topic (12 partitions, RF 3 by default) and exits.
    let mut create = ChildProcess::spawn(
        "topic creation",
        {
            let mut cmd = demo("producer", &bootstrap);
            cmd.arg("--count").arg("0");
            cmd
        },
        &dir.join("create-topic.log"),
    )?;
    exits_cleanly(&mut create, Duration::from_secs(60), "topic creation")?;
    let partitions = cluster.await_full_isr(TOPIC, Duration::from_secs(60))?;
    ensure!(
        partitions.len() == PARTITIONS as usize,
        "{TOPIC} has {} partitions",
        partitions.len()
    );
    ensure!(
        partitions.iter().all(|p| p.replicas.len() == 3),
        "{TOPIC} is not RF 3: {partitions:?}"
    );

    let mut sink = start_sink(&bootstrap, dir)?;
    let analytics_addr: SocketAddr = format!("127.0.0.1:{}", free_loopback_port()?).parse()?;
    let mut analytics = ChildProcess::spawn(
        "analytics",
        {
            let mut cmd = demo("analytics", &bootstrap);
            cmd.arg("--listen").arg(analytics_addr.to_string());
            cmd
        },
        &dir.join("analytics.log"),
    )?;
    let mut producer = ChildProcess::spawn(
        "producer",
        {
            let mut cmd = demo("producer", &bootstrap);
            cmd.args(["--rate", RATE, "--size", "2048", "--count", &ORDERS.to_string()])
                .arg("--acked-log")
                .arg(dir.join("acked.log"));
            cmd
        },
        &dir.join("producer.log"),
    )?;

    // Fault 1: SIGKILL the sink mid-batch, restart it on the same database (its partitions
    // come back once the killed member's session expires).
    wait_until(Duration::from_secs(60), "the sink storing 1000 orders", || {
        (sink_rows(dir) >= 1000).then_some(())
    })?;
    sink.kill()?;
    eprintln!("[fault test] sink SIGKILLed at {} rows", sink_rows(dir));
    sink = start_sink(&bootstrap, dir)?;

    // Fault 2, keyed to the producer's progress (not to the sink's recovery, so both faults
    // fall within the run): SIGKILL the sink group's coordinator (a partition leader too),
    // produce on without it, then restart it.
    wait_until(Duration::from_secs(60), "2500 acknowledged orders", || {
        (acked_ids(dir).len() >= 2500).then_some(())
    })?;
    let coordinator = find_coordinator(cluster.addr(1), SINK_GROUP)?
        .map_err(|(code, message)| anyhow::anyhow!("FindCoordinator: error {code} {message}"))?;
    ensure!(
        producer.try_wait()?.is_none(),
        "the producer finished before the broker kill; raise ORDERS"
    );
    cluster.node(coordinator).kill()?;
    let acked_at_kill = acked_ids(dir).len();
    eprintln!("[fault test] broker {coordinator} (the sink's coordinator) SIGKILLed at {acked_at_kill} acked orders");
    wait_until(
        Duration::from_secs(60),
        "400 more acknowledged orders with a broker down",
        || (acked_ids(dir).len() >= acked_at_kill + 400).then_some(()),
    )?;
    ensure!(
        producer.try_wait()?.is_none(),
        "the producer finished while broker {coordinator} was down; raise ORDERS"
    );
    cluster.node(coordinator).restart()?;
    eprintln!(
        "[fault test] broker {coordinator} restarted at {} acked orders",
        acked_ids(dir).len()
    );

    exits_cleanly(&mut producer, Duration::from_secs(120), "the producer")?;
    let acked = acked_ids(dir);
    let acked_set: HashSet<&str> = acked.iter().map(String::as_str).collect();
    ensure!(
        acked.len() == ORDERS,
        "{} orders acknowledged, {ORDERS} produced",
        acked.len()
    );
    ensure!(acked_set.len() == acked.len(), "the acked log names an order twice");

    wait_until(
        Duration::from_secs(60),
        "the sink table holding every acknowledged order",
        || (sink_rows(dir) >= acked.len() as i64).then_some(()),
    )?;
    sink.check_running()?;
    analytics.check_running()?;

    let rows = table_rows(dir)?;
    let in_table: HashSet<&str> = rows.iter().map(|(id, _, _)| id.as_str()).collect();
    let missing: Vec<&&str> = acked_set.difference(&in_table).take(5).collect();
    ensure!(
        missing.is_empty(),
        "acknowledged orders missing from the table, e.g. {missing:?}"
    );
    let unknown: Vec<&&str> = in_table.difference(&acked_set).take(5).collect();
    ensure!(
        unknown.is_empty(),
        "orders in the table that were never produced, e.g. {unknown:?}"
    );
    ensure!(
        rows.len() == acked.len(),
        "{} rows for {} acknowledged orders",
        rows.len(),
        acked.len()
    );
    let positions: HashSet<(&str, i64)> = rows.iter().map(|(_, tp, offset)| (tp.as_str(), *offset)).collect();
    ensure!(positions.len() == rows.len(), "two rows claim the same topic position");
    let counters = SinkCounters::read(&dir.join("orders.db"))?;
    ensure!(
        counters.duplicates == 0,
        "the sink reported {} duplicate orders",
        counters.duplicates
    );
    ensure!(
        counters.malformed == 0,
        "the sink skipped {} records that were not orders",
        counters.malformed
    );
    ensure!(
        counters.rows == rows.len() as i64,
        "sink_stats says {} rows, the table has {}",
        counters.rows,
        rows.len()
    );

    // The group's committed offsets catch up with the database's (what `--describe` shows).
    let stored = read_next_offsets(&dir.join("orders.db"), TOPIC)?;
    ensure!(
        stored.values().sum::<i64>() == acked.len() as i64,
        "stored offsets {stored:?} do not cover {} orders",
        acked.len()
    );
    let expected: BTreeMap<i32, Option<i64>> = (0..PARTITIONS).map(|p| (p, stored.get(&p).copied())).collect();
    let mut committed = BTreeMap::new();
    let caught_up = wait_until(
        Duration::from_secs(30),
        "the sink's group commits matching its database",
        || {
            committed = committed_offsets(&bootstrap, SINK_GROUP, TOPIC, PARTITIONS).ok()?;
            (committed == expected).then_some(())
        },
    );
    ensure!(caught_up.is_ok(), "committed {committed:?}, database {expected:?}");

    // Analytics is exactly once within its process: it ignores records below the offsets its
    // counts cover, so its total is exactly the acknowledged count.
    let mut last = None;
    let counted = wait_until(
        Duration::from_secs(60),
        "analytics counting every acknowledged order",
        || {
            last = analytics_stats(analytics_addr).ok();
            last.as_ref()
                .filter(|s| s.totals.orders >= acked.len() as u64)
                .map(|_| ())
        },
    );
    ensure!(counted.is_ok(), "analytics stats: {last:?}");
    let stats = last.context("no stats")?;
    ensure!(
        stats.totals.orders == acked.len() as u64,
        "analytics counted {} orders, {} acknowledged",
        stats.totals.orders,
        acked.len()
    );
    ensure!(stats.malformed == 0, "analytics skipped {} records", stats.malformed);
    let revenue: i64 = {
        let conn =
            rusqlite::Connection::open_with_flags(dir.join("orders.db"), rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
        conn.query_row("SELECT SUM(amount_cents) FROM orders", [], |r| r.get(0))?
    };
    ensure!(
        stats.totals.revenue_cents == revenue,
        "analytics revenue {} != the table's {revenue}",
        stats.totals.revenue_cents
    );
    Ok(())
}

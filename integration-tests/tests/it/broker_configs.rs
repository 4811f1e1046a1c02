//! Settings as Kafka 4 takes them, driven with the `sluice` client commands: values outside
//! Kafka 4's ranges refused with Kafka's messages (topic configs, dynamic and static broker
//! settings), `internal.segment.bytes` for small segments, and the dynamic broker settings that
//! are not topic defaults (`max.connections`, `log.cleaner.backoff.ms`) applied by a running
//! broker without a restart.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use kafka_protocol::messages::ApiVersionsRequest;
use sluice_integration_tests::clients::wait_until;
use sluice_integration_tests::kafka_client::KafkaConnection;
use sluice_integration_tests::sluice_cli::{sluice, sluice_with_stdin, Run};
use sluice_integration_tests::{sluice_binary, NodeOptions, SluiceNode};

const TIMEOUT: Duration = Duration::from_secs(60);

/// The command must fail, and say `message`.
fn refused(run: Run, what: &str, message: &str) -> Result<()> {
    ensure!(
        !run.ok && run.stderr.contains(message),
        "{what}: expected a refusal saying {message:?}, got ok={} stdout={} stderr={}",
        run.ok,
        run.stdout,
        run.stderr
    );
    Ok(())
}

/// Files named `*.log` in a partition directory.
fn segment_count(partition_dir: &Path) -> Result<usize> {
    let entries = std::fs::read_dir(partition_dir).with_context(|| format!("reading {}", partition_dir.display()))?;
    Ok(entries
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
        .count())
}

#[test]
fn settings_outside_kafka_4s_ranges_are_refused_with_kafkas_messages() -> Result<()> {
    let node = SluiceNode::start(NodeOptions::default())?;
    let b = node.bootstrap();
    let b = b.as_str();

    let small = sluice(b, &["topic", "create", "small", "-r", "1", "-c", "segment.bytes=200"])?;
    refused(
        small,
        "segment.bytes=200",
        "Invalid value 200 for configuration segment.bytes: Value must be at least 1048576",
    )?;
    let lag = sluice(
        b,
        &[
            "topic",
            "create",
            "lag",
            "-r",
            "1",
            "-c",
            "min.compaction.lag.ms=200",
            "-c",
            "max.compaction.lag.ms=100",
        ],
    )?;
    refused(
        lag,
        "min above max compaction lag",
        "conflict topic config setting min.compaction.lag.ms (200) > max.compaction.lag.ms (100)",
    )?;
    let topics = sluice(b, &["topic", "list", "--format", "json"])?.json()?;
    ensure!(
        !topics.to_string().contains("\"small\"") && !topics.to_string().contains("\"lag\""),
        "a refused topic was created: {topics}"
    );

    // Kafka's internal setting gives small segments; it is not listed among the topic's configs.
    let tiny = sluice(
        b,
        &[
            "topic",
            "create",
            "tiny",
            "-r",
            "1",
            "-c",
            "internal.segment.bytes=4096",
        ],
    )?;
    ensure!(tiny.ok, "internal.segment.bytes=4096 was refused: {}", tiny.stderr);
    // One batch per command, each under a segment: 8 of ~3 KB.
    for round in 0..8 {
        let lines: String = (0..3)
            .map(|i| format!("record-{round}-{i}-{}\n", "x".repeat(1000)))
            .collect();
        let produced = sluice_with_stdin(b, &["produce", "tiny"], &lines)?;
        ensure!(produced.ok, "producing to tiny: {}", produced.stderr);
    }
    let segments = segment_count(&node.data_dir().join("tiny-0"))?;
    ensure!(segments >= 4, "~24 KB in 4 KiB segments made {segments} segment files");
    let described = sluice(b, &["topic", "describe", "tiny", "--format", "json"])?.json()?;
    ensure!(
        !described.to_string().contains("internal.segment.bytes"),
        "DescribeConfigs listed an internal config: {described}"
    );

    let alter = sluice(b, &["topic", "alter-config", "tiny", "--set", "segment.ms=0"])?;
    refused(
        alter,
        "segment.ms=0",
        "Invalid value 0 for configuration segment.ms: Value must be at least 1",
    )?;
    let dynamic = sluice(b, &["cluster", "config", "set", "log.segment.bytes=1000"])?;
    refused(
        dynamic,
        "dynamic log.segment.bytes=1000",
        "Invalid value 1000 for configuration log.segment.bytes: Value must be at least 1048576",
    )?;
    let dynamic = sluice(b, &["cluster", "config", "set", "max.connections=-1"])?;
    refused(
        dynamic,
        "max.connections=-1",
        "Invalid value -1 for configuration max.connections: Value must be at least 0",
    )?;

    // At start too, before anything is opened.
    let dir = tempfile::tempdir()?;
    let started = Command::new(sluice_binary()?)
        .args([
            "--data-dir",
            &dir.path().display().to_string(),
            "--set",
            "log.segment.bytes=1000",
        ])
        .output()?;
    let stderr = String::from_utf8_lossy(&started.stderr);
    ensure!(
        !started.status.success()
            && stderr.contains("log.segment.bytes")
            && stderr.contains("Value must be at least 1048576"),
        "a broker with --set log.segment.bytes=1000: {} {stderr}",
        started.status
    );
    Ok(())
}

/// Whether a new connection is served: ApiVersions answered, not closed unanswered.
fn served(addr: std::net::SocketAddr) -> Result<KafkaConnection> {
    let mut connection = KafkaConnection::connect(addr, "probe", Duration::from_secs(5))?;
    connection.call(&ApiVersionsRequest::default(), 3)?;
    Ok(connection)
}

#[test]
fn dynamic_broker_settings_apply_without_a_restart() -> Result<()> {
    // A cleaner that, once idle, would sleep ten minutes unless told otherwise.
    let node = SluiceNode::start(
        NodeOptions::default()
            .set("log.cleaner.backoff.ms", 600_000)
            .set("log.retention.check.interval.ms", 200),
    )?;
    let b = node.bootstrap();
    let b = b.as_str();
    let addr = node.addr();

    // max.connections lowered to three: two probes held, the command itself the third.
    let held: Vec<KafkaConnection> = (0..2).map(|_| served(addr)).collect::<Result<_>>()?;
    let set = sluice(b, &["cluster", "config", "set", "max.connections=3"])?;
    ensure!(set.ok, "setting max.connections: {}", set.stderr);
    // Once the command's connection is gone, one more is served and the next is refused.
    let third = wait_until(TIMEOUT, "a third connection to be served", || served(addr).ok())?;
    ensure!(
        served(addr).is_err(),
        "a fourth connection was served with max.connections=3 and three open"
    );
    drop(third);
    let reset = wait_until(TIMEOUT, "max.connections to be removed", || {
        sluice(b, &["cluster", "config", "set", "--delete", "max.connections"])
            .ok()
            .filter(|r| r.ok)
    })?;
    ensure!(reset.ok);
    let many: Vec<KafkaConnection> = (0..6).map(|_| served(addr)).collect::<Result<_>>()?;
    drop((held, many));

    // A compacted topic written after the cleaner went idle is cleaned once the backoff is
    // shortened: with the static ten minutes it would not be within the wait below.
    let created = sluice(
        b,
        &[
            "topic",
            "create",
            "compacted",
            "-r",
            "1",
            "-c",
            "cleanup.policy=compact",
            "-c",
            "internal.segment.bytes=16384",
            "-c",
            "segment.ms=500",
            "-c",
            "min.cleanable.dirty.ratio=0.01",
        ],
    )?;
    ensure!(created.ok, "creating the compacted topic: {}", created.stderr);
    // Ten batches of ~11 KB (one per command, each under a segment), 20 keys over and over.
    for round in 0..10 {
        let lines: String = (0..150)
            .map(|i| format!("key-{}:value-{round}-{i}-{}\n", i % 20, "v".repeat(50)))
            .collect();
        let produced = sluice_with_stdin(b, &["produce", "compacted", "-K", ":"], &lines)?;
        ensure!(produced.ok, "producing: {}", produced.stderr);
    }
    // Every key of every record, read from the beginning to the end.
    let keys = || -> Result<Vec<String>> {
        let read = sluice(
            b,
            &["consume", "compacted", "-o", "beginning", "-e", "--format", "%k\n"],
        )?;
        ensure!(read.ok, "consuming: {}", read.stderr);
        Ok(read.stdout.lines().map(String::from).collect())
    };
    let before = keys()?;
    ensure!(
        before.len() == 1500,
        "read {} of 1500 records before cleaning",
        before.len()
    );
    let set = sluice(b, &["cluster", "config", "set", "log.cleaner.backoff.ms=100"])?;
    ensure!(set.ok, "setting log.cleaner.backoff.ms: {}", set.stderr);
    let partition_dir = node.data_dir().join("compacted-0");
    wait_until(TIMEOUT, "the compacted topic to be cleaned", || {
        let after = keys().ok()?;
        let distinct: std::collections::BTreeSet<&String> = after.iter().collect();
        (distinct.len() == 20 && after.len() <= 40).then_some(())
    })
    .with_context(|| {
        format!(
            "segments: {:?}; broker log:\n{}",
            segment_count(&partition_dir),
            node.log_tail(30)
        )
    })?;
    let described = sluice(
        b,
        &["cluster", "config", "get", "log.cleaner.backoff.ms", "--format", "json"],
    )?;
    ensure!(
        described.ok && described.stdout.contains("100"),
        "cluster config get after the change: {} {}",
        described.stdout,
        described.stderr
    );
    Ok(())
}

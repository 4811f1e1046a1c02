//! The operator's client commands (`sluice topic | cluster | group | completion`) run as a user
//! runs them, as processes against a real 3-node cluster: their JSON parsed, their tables
//! read, their exit statuses and error sentences checked.

use std::collections::{BTreeMap, HashMap};
use std::process::Command;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, StreamConsumer};
use rdkafka::{Offset, TopicPartitionList};
use serde_json::Value;
use sluice_integration_tests::clients::{self, wait_until};
use sluice_integration_tests::sluice_cli::{json_lines, sluice, sluice_with_stdin};
use sluice_integration_tests::{sluice_binary, Cluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_commands_create_describe_alter_grow_and_delete_topics_and_refuse_with_kafkas_error() -> Result<()> {
    let cluster = Cluster::start(3, &[])?;
    let bootstrap = cluster.bootstrap();
    let b = bootstrap.as_str();

    let created = sluice(
        b,
        &[
            "topic",
            "create",
            "orders",
            "-p",
            "3",
            "-r",
            "3",
            "-c",
            "retention.ms=3600000",
            "--format",
            "json",
        ],
    )?
    .json()?;
    ensure!(
        created["partitions"] == 3 && created["replication_factor"] == 3,
        "{created}"
    );
    cluster.await_full_isr("orders", Duration::from_secs(20))?;

    let listed = sluice(b, &["topic", "list", "--format", "json"])?.json()?;
    let orders = listed["topics"]
        .as_array()
        .and_then(|ts| ts.iter().find(|t| t["name"] == "orders"))
        .with_context(|| format!("orders not listed: {listed}"))?;
    ensure!(
        orders["partitions"] == 3 && orders["replicas"] == 3 && orders["internal"] == false,
        "{orders}"
    );
    // The table for people: a header and one aligned row per topic.
    let table = sluice(b, &["topic", "list"])?;
    ensure!(table.ok, "{}", table.stderr);
    let mut lines = table.stdout.lines();
    ensure!(
        lines.next() == Some("NAME    PARTITIONS  REPLICAS  INTERNAL"),
        "{}",
        table.stdout
    );
    ensure!(
        lines.any(|l| l == "orders  3           3         false"),
        "{}",
        table.stdout
    );

    clients::produce_numbered(b, "orders", 25).await?;
    let described = sluice(b, &["topic", "describe", "orders", "--format", "json"])?.json()?;
    ensure!(described["configs"]["retention.ms"] == "3600000", "{described}");
    let partitions = described["partitions"].as_array().context("partitions")?;
    ensure!(partitions.len() == 3, "{described}");
    let p0 = &partitions[0];
    ensure!(
        p0["partition"] == 0 && p0["high_watermark"] == 25 && p0["log_start"] == 0,
        "{p0}"
    );
    ensure!(
        p0["isr"].as_array().map(Vec::len) == Some(3) && p0["leader"].is_i64(),
        "{p0}"
    );

    let altered = sluice(
        b,
        &[
            "topic",
            "alter-config",
            "orders",
            "--set",
            "cleanup.policy=compact",
            "--delete",
            "retention.ms",
            "--format",
            "json",
        ],
    )?
    .json()?;
    ensure!(altered["configs"]["cleanup.policy"] == "compact", "{altered}");
    ensure!(altered["configs"].get("retention.ms").is_none(), "{altered}");

    ensure!(sluice(b, &["topic", "add-partitions", "orders", "--total", "5"])?.ok);
    let described = sluice(b, &["topic", "describe", "orders", "--format", "json"])?.json()?;
    ensure!(described["partition_count"] == 5, "{described}");

    // Refusals name the broker and Kafka's error, and exit 1.
    let again = sluice(b, &["topic", "create", "orders"])?;
    ensure!(!again.ok, "creating an existing topic succeeded: {}", again.stdout);
    ensure!(
        again.stderr.contains("TOPIC_ALREADY_EXISTS") && again.stderr.contains("broker "),
        "{}",
        again.stderr
    );
    let bad = sluice(b, &["topic", "alter-config", "orders", "--set", "retention.ms=soon"])?;
    ensure!(!bad.ok && bad.stderr.contains("INVALID_CONFIG"), "{}", bad.stderr);
    let missing = sluice(b, &["topic", "describe", "no-such-topic"])?;
    ensure!(
        !missing.ok && missing.stderr.contains("UNKNOWN_TOPIC_OR_PARTITION"),
        "{}",
        missing.stderr
    );

    let deleted = sluice(b, &["topic", "delete", "orders", "--format", "json"])?.json()?;
    ensure!(deleted["deleted"] == serde_json::json!(["orders"]), "{deleted}");
    // Every broker learns of the deletion from the metadata log, a moment after the answer.
    wait_until(Duration::from_secs(10), "orders to leave the listing", || {
        let listed = sluice(b, &["topic", "list", "--format", "json"]).ok()?.json().ok()?;
        let topics = listed["topics"].as_array()?.clone();
        (!topics.iter().any(|t| t["name"] == "orders")).then_some(())
    })?;

    let unreachable = sluice("127.0.0.1:1", &["topic", "list"])?;
    ensure!(
        !unreachable.ok
            && unreachable
                .stderr
                .contains("cannot reach any bootstrap broker (127.0.0.1:1)"),
        "{}",
        unreachable.stderr
    );
    Ok(())
}

#[test]
fn cluster_info_shows_brokers_and_quorum_health_fails_while_a_broker_is_down_and_config_sets_dynamic_settings(
) -> Result<()> {
    let mut cluster = Cluster::start(
        3,
        &[
            ("broker.session.timeout.ms", "2000"),
            ("broker.heartbeat.interval.ms", "500"),
        ],
    )?;
    let bootstrap = cluster.bootstrap();
    let b = bootstrap.as_str();
    ensure!(sluice(b, &["topic", "create", "replicated", "-p", "2", "-r", "3"])?.ok);
    cluster.await_full_isr("replicated", Duration::from_secs(20))?;

    let info = sluice(b, &["cluster", "info", "--format", "json"])?.json()?;
    let brokers: Vec<i64> = info["brokers"]
        .as_array()
        .context("brokers")?
        .iter()
        .filter_map(|b| b["id"].as_i64())
        .collect();
    ensure!(brokers == [1, 2, 3], "{info}");
    let voters = info["quorum_voters"].as_array().context("quorum_voters")?;
    ensure!(
        voters.len() == 3 && info["quorum_leader"].as_i64().is_some_and(|l| l >= 1),
        "{info}"
    );
    ensure!(
        sluice(b, &["cluster", "health"])?.ok,
        "a healthy cluster reported unhealthy"
    );

    let victim = 3;
    cluster.node(victim).kill()?;
    let survivors = format!("{},{}", cluster.addr(1), cluster.addr(2));
    // Unhealthy at once (the victim may have led the quorum, which then has no leader for a
    // moment), and once the controller has fenced it: the victim down, both partitions short.
    let health = wait_until(
        Duration::from_secs(20),
        "cluster health to name the killed broker",
        || {
            let run = sluice(&survivors, &["cluster", "health", "--format", "json"]).ok()?;
            let health: Value = serde_json::from_str(&run.stdout).ok()?;
            let settled =
                health["brokers_down"] == serde_json::json!([victim]) && health["under_replicated_partitions"] == 2;
            (!run.ok && settled).then_some(health)
        },
    )?;
    ensure!(
        health["healthy"] == false && health["offline_partitions"] == 0,
        "{health}"
    );

    cluster.node(victim).respawn()?;
    cluster.node(victim).wait_ready()?;
    wait_until(Duration::from_secs(30), "cluster health to pass again", || {
        sluice(b, &["cluster", "health"]).ok().filter(|run| run.ok)
    })?;

    // Dynamic broker settings: set cluster-wide, seen on every broker, removed again.
    ensure!(sluice(b, &["cluster", "config", "set", "log.retention.ms=7200000"])?.ok);
    // Each broker applies the change from the metadata log, a moment after the answer.
    let setting = |broker: &str| -> Option<Value> {
        let args = [
            "cluster",
            "config",
            "get",
            "log.retention.ms",
            "--broker",
            broker,
            "--format",
            "json",
        ];
        let got = sluice(b, &args).ok()?.json().ok()?;
        Some(got["configs"][0].clone())
    };
    for broker in ["1", "2", "3"] {
        wait_until(
            Duration::from_secs(10),
            "the cluster-wide setting on every broker",
            || {
                let entry = setting(broker)?;
                (entry["value"] == "7200000" && entry["source"] == "DYNAMIC_DEFAULT_BROKER_CONFIG").then_some(())
            },
        )?;
    }
    let static_setting = sluice(b, &["cluster", "config", "set", "num.partitions=4"])?;
    ensure!(
        !static_setting.ok && static_setting.stderr.contains("not a dynamic broker config"),
        "{}",
        static_setting.stderr
    );
    ensure!(sluice(b, &["cluster", "config", "set", "--delete", "log.retention.ms"])?.ok);
    for broker in ["1", "2", "3"] {
        wait_until(Duration::from_secs(10), "the setting removed on every broker", || {
            let entry = setting(broker)?;
            (entry["value"] == "604800000" && entry["source"] == "DEFAULT_CONFIG").then_some(())
        })?;
    }

    let completion = Command::new(sluice_binary()?).args(["completion", "bash"]).output()?;
    let script = String::from_utf8_lossy(&completion.stdout);
    ensure!(
        completion.status.success() && script.contains("_sluice") && script.contains("add-partitions"),
        "{script}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_commands_list_describe_with_lag_reset_offsets_only_when_empty_and_delete_groups() -> Result<()> {
    let cluster = Cluster::start(3, &[])?;
    let bootstrap = cluster.bootstrap();
    let b = bootstrap.as_str();
    ensure!(sluice(b, &["topic", "create", "events", "-p", "1", "-r", "3"])?.ok);
    cluster.await_full_isr("events", Duration::from_secs(20))?;
    clients::produce_numbered(b, "events", 40).await?;

    let consumer: BaseConsumer = clients::consumer_config(b)
        .set("group.id", "billing")
        .set("client.id", "billing-1")
        .set("auto.offset.reset", "earliest")
        .create()?;
    consumer.subscribe(&["events"])?;
    wait_until(Duration::from_secs(30), "the member's assignment", || {
        let _ = consumer.poll(Duration::from_millis(100));
        consumer.assignment().ok().filter(|a| a.count() == 1)
    })?;
    let mut commit = TopicPartitionList::new();
    commit.add_partition_offset("events", 0, Offset::Offset(15))?;
    consumer.commit(&commit, CommitMode::Sync)?;

    let listed = sluice(b, &["group", "list", "--format", "json"])?.json()?;
    let billing = listed["groups"]
        .as_array()
        .and_then(|gs| gs.iter().find(|g| g["group"] == "billing"))
        .with_context(|| format!("billing not listed: {listed}"))?;
    ensure!(billing["protocol_type"] == "consumer", "{billing}");

    let described = sluice(b, &["group", "describe", "billing", "--format", "json"])?.json()?;
    ensure!(
        described["state"] == "Stable" && described["total_lag"] == 25,
        "{described}"
    );
    let members = described["members"].as_array().context("members")?;
    ensure!(
        members.len() == 1 && members[0]["client_id"] == "billing-1",
        "{described}"
    );
    ensure!(
        members[0]["assignment"] == serde_json::json!(["events-0"]),
        "{described}"
    );
    let row = &described["offsets"][0];
    ensure!(
        row["topic"] == "events"
            && row["current_offset"] == 15
            && row["log_end_offset"] == 40
            && row["lag"] == 25
            && row["client_id"] == "billing-1",
        "{row}"
    );

    let unknown = sluice(b, &["group", "describe", "nobody", "--format", "json"])?.json()?;
    ensure!(unknown["state"] == "Dead" && unknown["total_lag"] == 0, "{unknown}");

    // Offsets move only while the group has no members, and only with --execute.
    let busy = sluice(
        b,
        &[
            "group",
            "reset-offsets",
            "billing",
            "--topic",
            "events",
            "--to-earliest",
            "--execute",
        ],
    )?;
    ensure!(
        !busy.ok && busy.stderr.contains("stop its consumers first"),
        "{}",
        busy.stderr
    );
    drop(consumer);
    wait_until(Duration::from_secs(20), "the group to empty", || {
        let d = sluice(b, &["group", "describe", "billing", "--format", "json"])
            .ok()?
            .json()
            .ok()?;
        (d["state"] == "Empty").then_some(())
    })?;
    let planned = sluice(
        b,
        &[
            "group",
            "reset-offsets",
            "billing",
            "--all-topics",
            "--shift-by",
            "-10",
            "--format",
            "json",
        ],
    )?
    .json()?;
    ensure!(
        planned["executed"] == false
            && planned["offsets"][0]["new_offset"] == 5
            && planned["offsets"][0]["current_offset"] == 15,
        "{planned}"
    );
    let still = sluice(b, &["group", "describe", "billing", "--format", "json"])?.json()?;
    ensure!(
        still["offsets"][0]["current_offset"] == 15,
        "a dry run committed: {still}"
    );
    let executed = sluice(
        b,
        &[
            "group",
            "reset-offsets",
            "billing",
            "--topic",
            "events",
            "--to-earliest",
            "--execute",
            "--format",
            "json",
        ],
    )?
    .json()?;
    ensure!(
        executed["executed"] == true && executed["offsets"][0]["new_offset"] == 0,
        "{executed}"
    );
    let reset = sluice(b, &["group", "describe", "billing", "--format", "json"])?.json()?;
    ensure!(
        reset["offsets"][0]["current_offset"] == 0 && reset["total_lag"] == 40,
        "{reset}"
    );

    ensure!(sluice(b, &["group", "delete", "billing"])?.ok);
    let listed = sluice(b, &["group", "list", "--format", "json"])?.json()?;
    ensure!(
        !listed["groups"]
            .as_array()
            .context("groups")?
            .iter()
            .any(|g| g["group"] == "billing"),
        "{listed}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_and_consume_carry_keys_headers_and_a_groups_offsets_and_other_clients_read_the_same_records(
) -> Result<()> {
    let cluster = Cluster::start(3, &[])?;
    let bootstrap = cluster.bootstrap();
    let b = bootstrap.as_str();
    ensure!(sluice(b, &["topic", "create", "lines", "-p", "3", "-r", "3"])?.ok);
    cluster.await_full_isr("lines", Duration::from_secs(20))?;

    // 90 keyed lines (9 customers), gzip-compressed, each with a header; -v says where each went.
    let input: String = (0..90).map(|i| format!("customer-{}:order-{i}\n", i % 9)).collect();
    let produced = json_lines(&sluice_with_stdin(
        b,
        &[
            "produce",
            "lines",
            "-K",
            ":",
            "-z",
            "gzip",
            "-H",
            "source=cli",
            "-v",
            "--format",
            "json",
        ],
        &input,
    )?)?;
    ensure!(produced.len() == 90, "{} acknowledgements", produced.len());
    let mut partition_of_key: HashMap<String, i64> = HashMap::new();
    let mut per_partition: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for (i, ack) in produced.iter().enumerate() {
        let partition = ack["partition"].as_i64().context("partition")?;
        let key = format!("customer-{}", i % 9);
        let first = *partition_of_key.entry(key.clone()).or_insert(partition);
        ensure!(first == partition, "{key} went to partitions {first} and {partition}");
        per_partition
            .entry(partition)
            .or_default()
            .push(ack["offset"].as_i64().context("offset")?);
    }
    for (partition, offsets) in &per_partition {
        ensure!(
            *offsets == (0..offsets.len() as i64).collect::<Vec<_>>(),
            "partition {partition}: offsets {offsets:?}"
        );
    }

    // The CLI reads them back with keys and headers ...
    let consumed = json_lines(&sluice(b, &["consume", "lines", "-e", "--format", "json"])?)?;
    ensure!(consumed.len() == 90, "consumed {}", consumed.len());
    for record in &consumed {
        let value = record["value"].as_str().context("value")?;
        let i: usize = value.trim_start_matches("order-").parse()?;
        ensure!(record["key"] == format!("customer-{}", i % 9), "{record}");
        ensure!(
            record["headers"] == serde_json::json!([{"key": "source", "value": "cli"}]),
            "{record}"
        );
        ensure!(
            partition_of_key[&format!("customer-{}", i % 9)] == record["partition"].as_i64().unwrap_or(-1),
            "{record}"
        );
    }
    let template = sluice(
        b,
        &[
            "consume",
            "lines",
            "-p",
            "0",
            "-c",
            "1",
            "--format",
            "%t/%p/%o %k=%s %h\\n",
        ],
    )?;
    ensure!(template.ok, "{}", template.stderr);
    ensure!(
        template.stdout.starts_with("lines/0/0 customer-") && template.stdout.ends_with(" source=cli\n"),
        "{:?}",
        template.stdout
    );

    // ... and so does librdkafka.
    let expected: HashMap<i32, usize> = per_partition.iter().map(|(p, o)| (*p as i32, o.len())).collect();
    let reader: StreamConsumer = clients::consumer_config(b).create()?;
    clients::assign(&reader, "lines", &[0, 1, 2], Offset::Beginning)?;
    let got = clients::consume_exact(&reader, &expected, Duration::from_secs(20)).await?;
    for records in got.values() {
        for r in records {
            ensure!(
                r.headers == vec![("source".to_string(), Some(b"cli".to_vec()))],
                "{r:?}"
            );
            let key = String::from_utf8(r.key.clone().unwrap_or_default())?;
            ensure!(partition_of_key[&key] == i64::from(r.partition), "{r:?}");
        }
    }

    // A group's offsets: the first run commits 40, the second prints only the other 50.
    let first = sluice(
        b,
        &["consume", "lines", "-G", "audit", "-c", "40", "--format", "%p:%o\\n"],
    )?;
    ensure!(
        first.ok && first.stdout.lines().count() == 40,
        "{} / {}",
        first.stdout,
        first.stderr
    );
    let rest = sluice(b, &["consume", "lines", "-G", "audit", "-e", "--format", "%p:%o\\n"])?;
    ensure!(
        rest.ok && rest.stdout.lines().count() == 50,
        "{} / {}",
        rest.stdout,
        rest.stderr
    );
    let seen: std::collections::BTreeSet<&str> = first.stdout.lines().chain(rest.stdout.lines()).collect();
    ensure!(seen.len() == 90, "the two runs overlapped: {} distinct", seen.len());
    let described = sluice(b, &["group", "describe", "audit", "--format", "json"])?.json()?;
    ensure!(
        described["total_lag"] == 0 && described["state"] == "Empty",
        "{described}"
    );

    let missing = sluice_with_stdin(b, &["produce", "no-such-topic"], "x\n")?;
    ensure!(
        !missing.ok
            && missing.stderr.contains("UNKNOWN_TOPIC_OR_PARTITION")
            && missing.stderr.contains("sluice topic create"),
        "{}",
        missing.stderr
    );
    let bad_from = sluice(b, &["consume", "lines", "--from", "yesterday"])?;
    ensure!(
        !bad_from.ok && bad_from.stderr.contains("beginning, end, offset:N or timestamp:MS"),
        "{}",
        bad_from.stderr
    );
    Ok(())
}

#[test]
fn partition_commands_move_replicas_off_a_broker_reassign_and_elect_preferred_leaders() -> Result<()> {
    let cluster = Cluster::start(3, &[])?;
    let bootstrap = cluster.bootstrap();
    let b = bootstrap.as_str();
    ensure!(sluice(b, &["topic", "create", "moving", "-p", "3", "-r", "2"])?.ok);
    let replicas_of = |json: &Value| -> Vec<Vec<i64>> {
        json["partitions"]
            .as_array()
            .map(|ps| {
                ps.iter()
                    .map(|p| {
                        p["replicas"]
                            .as_array()
                            .map(|r| r.iter().filter_map(Value::as_i64).collect())
                            .unwrap_or_default()
                    })
                    .collect()
            })
            .unwrap_or_default()
    };

    // Move this topic's replicas off broker 1 onto broker 2, where a partition lacks broker 2.
    let before = replicas_of(&sluice(b, &["topic", "describe", "moving", "--format", "json"])?.json()?);
    let expected: Vec<Vec<i64>> = before
        .iter()
        .map(|r| match r.contains(&2) {
            true => r.clone(),
            false => r.iter().map(|b| if *b == 1 { 2 } else { *b }).collect(),
        })
        .collect();
    ensure!(expected != before, "no partition to move in {before:?}");
    let moved = sluice(
        b,
        &[
            "partition",
            "move-to-broker",
            "--from",
            "1",
            "--to",
            "2",
            "--topic",
            "moving",
        ],
    )?;
    ensure!(moved.ok, "{}", moved.stderr);
    wait_until(Duration::from_secs(30), "the moves to finish", || {
        let d = sluice(b, &["topic", "describe", "moving", "--format", "json"])
            .ok()?
            .json()
            .ok()?;
        let listed = sluice(b, &["partition", "reassignments", "--format", "json"])
            .ok()?
            .json()
            .ok()?;
        let idle = listed["reassignments"].as_array().is_some_and(Vec::is_empty);
        (idle && replicas_of(&d) == expected).then_some(())
    })?;

    // Reassign partition 0 to [1, 3] and make 1, its preferred replica, lead.
    let reassigned = sluice(
        b,
        &[
            "partition",
            "reassign",
            "moving:0",
            "--replicas",
            "1,3",
            "--format",
            "json",
        ],
    )?
    .json()?;
    ensure!(reassigned["failed"] == 0, "{reassigned}");
    wait_until(Duration::from_secs(30), "moving-0 on brokers 1 and 3", || {
        let d = sluice(b, &["topic", "describe", "moving", "--format", "json"])
            .ok()?
            .json()
            .ok()?;
        let p0 = &d["partitions"][0];
        (p0["replicas"] == serde_json::json!([1, 3]) && p0["isr"].as_array()?.len() == 2).then_some(())
    })?;
    wait_until(Duration::from_secs(30), "broker 1 to lead moving-0", || {
        let run = sluice(
            b,
            &["partition", "elect-leaders", "--topic", "moving", "--partition", "0"],
        )
        .ok()?;
        let d = sluice(b, &["topic", "describe", "moving", "--format", "json"])
            .ok()?
            .json()
            .ok()?;
        (run.ok && d["partitions"][0]["leader"] == 1).then_some(())
    })?;

    let bad = sluice(b, &["partition", "reassign", "moving:0", "--replicas", "1,9"])?;
    ensure!(
        !bad.ok || bad.stdout.contains("error"),
        "a move onto broker 9 was accepted: {}",
        bad.stdout
    );
    let malformed = sluice(b, &["partition", "reassign", "moving", "--replicas", "1,2"])?;
    ensure!(
        !malformed.ok && malformed.stderr.contains("TOPIC:PARTITION"),
        "{}",
        malformed.stderr
    );
    Ok(())
}

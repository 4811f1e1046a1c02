//! The rows of KIP-848 groups, group migration and reading from a follower (compat/README.md):
//! `group_kip848`, `group_migration`, `fetch_from_follower`; `share_group` is n/a (rust-rdkafka
//! has no share consumer).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::time::Duration;

use anyhow::{anyhow, ensure, Context, Result};
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::message::Message;
use rdkafka::producer::FutureRecord;
use rdkafka::{Offset, TopicPartitionList};

use crate::client::*;
use crate::{NotApplicable, Opts};

/// Partitions of the group rows' topics; each record's value is `<topic>-<partition>-<i>`.
const SPREAD_PARTITIONS: i32 = 3;
/// Records fetch_from_follower reads.
const FOLLOWER_RECORDS: usize = 100;
const WITHIN: Duration = Duration::from_secs(30);

pub async fn share_group() -> Result<String> {
    Err(NotApplicable("rust-rdkafka 0.39 has no share consumer (KIP-932) API".into()).into())
}

/// Produces `<topic>-<p>-<i>` for i in start..end to every partition p.
async fn produce_spread(opts: &Opts, topic: &str, start: usize, end: usize) -> Result<()> {
    let producer = producer(opts, &[("acks", "all")])?;
    let mut deliveries = Vec::new();
    for p in 0..SPREAD_PARTITIONS {
        for i in start..end {
            let value = format!("{topic}-{p}-{i}");
            let record = FutureRecord::<(), _>::to(topic).partition(p).payload(&value);
            deliveries.push(producer.send_result(record).map_err(|(e, _)| e).context("enqueue a record")?);
        }
    }
    for d in deliveries {
        d.await
            .context("producer dropped a delivery report")?
            .map_err(|(e, _)| e)
            .context("a delivery")?;
    }
    Ok(())
}

/// A member of `group` on `topic` speaking `protocol` ("classic" or "consumer"), starting at
/// the earliest offset, committing only when told.
fn group_member(opts: &Opts, group: &str, topic: &str, protocol: &str) -> Result<StreamConsumer> {
    let c: StreamConsumer = config(
        opts,
        &[
            ("group.id", group),
            ("group.protocol", protocol),
            ("auto.offset.reset", "earliest"),
            ("enable.auto.commit", "false"),
        ],
    )
    .create()
    .context("cannot create the group consumer")?;
    c.subscribe(&[topic]).context("subscribe")?;
    Ok(c)
}

/// Reads `n` records across `members`, failing on an error or a (partition, offset) read
/// twice; returns each partition's offsets in the order read and how many each member got.
async fn drain(members: &[&StreamConsumer], n: usize, topic: &str) -> Result<(BTreeMap<i32, Vec<i64>>, Vec<usize>)> {
    let mut offsets: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
    let mut per_member = vec![0; members.len()];
    let mut total = 0;
    let deadline = tokio::time::Instant::now() + WITHIN;
    while total < n {
        ensure!(
            tokio::time::Instant::now() < deadline,
            "read {total} of {n} records within {WITHIN:?}"
        );
        for (i, c) in members.iter().enumerate() {
            let Ok(got) = tokio::time::timeout(Duration::from_millis(100), c.recv()).await else {
                continue;
            };
            let m = got.context("consumer error")?;
            let (p, o) = (m.partition(), m.offset());
            let value = String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned();
            ensure!(value == format!("{topic}-{p}-{o}"), "partition {p} offset {o} holds {value:?}");
            let seen = offsets.entry(p).or_default();
            ensure!(!seen.contains(&o), "partition {p} offset {o} was read twice");
            seen.push(o);
            per_member[i] += 1;
            total += 1;
        }
    }
    Ok((offsets, per_member))
}

fn expect_offsets(offsets: &BTreeMap<i32, Vec<i64>>, start: i64, end: i64) -> Result<()> {
    for p in 0..SPREAD_PARTITIONS {
        let got = offsets.get(&p).cloned().unwrap_or_default();
        ensure!(
            got == (start..end).collect::<Vec<_>>(),
            "partition {p} read offsets {got:?}, expected {start}..{}",
            end - 1
        );
    }
    Ok(())
}

/// Commits what `c` consumed and closes it (leaving the group) off the async threads.
async fn commit_and_close(c: StreamConsumer) -> Result<()> {
    c.commit_consumer_state(CommitMode::Sync).context("commit")?;
    tokio::task::spawn_blocking(move || drop(c))
        .await
        .context("closing the consumer panicked")
}

/// Two KIP-848 members split a 3-partition topic and read 20 records of each partition between
/// them, each once, committing; both close; a new member resumes at the commits.
pub async fn group_kip848(opts: &Opts) -> Result<String> {
    let (topic, group) = (format!("{}kip848", opts.prefix), format!("{}kip848-group", opts.prefix));
    create_topic(opts, &topic, SPREAD_PARTITIONS).await?;
    let a = group_member(opts, &group, &topic, "consumer")?;
    let b = group_member(opts, &group, &topic, "consumer")?;
    // The topic is empty: receiving only drives the heartbeats until the coordinator split it.
    let deadline = tokio::time::Instant::now() + WITHIN;
    let split = loop {
        for c in [&a, &b] {
            let _ = tokio::time::timeout(Duration::from_millis(100), c.recv()).await;
        }
        let owned: Vec<BTreeSet<i32>> = [&a, &b]
            .iter()
            .map(|c| c.assignment().map(|l| l.elements().iter().map(|e| e.partition()).collect()))
            .collect::<Result<_, _>>()?;
        if owned.iter().all(|o| !o.is_empty()) && owned[0].is_disjoint(&owned[1]) && owned[0].len() + owned[1].len() == 3 {
            break owned;
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "the coordinator did not split the 3 partitions between the two members within {WITHIN:?}: {owned:?}"
        );
    };
    produce_spread(opts, &topic, 0, 20).await?;
    let (offsets, per_member) = drain(&[&a, &b], 20 * SPREAD_PARTITIONS as usize, &topic).await?;
    expect_offsets(&offsets, 0, 20)?;
    ensure!(per_member.iter().all(|n| *n > 0), "one member read everything: {per_member:?}");
    commit_and_close(a).await?;
    commit_and_close(b).await?;
    produce_spread(opts, &topic, 20, 30).await?;
    let again = group_member(opts, &group, &topic, "consumer")?;
    let (offsets, _) = drain(&[&again], 10 * SPREAD_PARTITIONS as usize, &topic).await?;
    expect_offsets(&offsets, 20, 30)?;
    commit_and_close(again).await?;
    Ok(format!(
        "two members: {}+{} partitions, records read {per_member:?}",
        split[0].len(),
        split[1].len()
    ))
}

/// Members of one group in turn, classic, consumer, classic: each joins the group the last one
/// left empty (converting it) and resumes at its commits.
pub async fn group_migration(opts: &Opts) -> Result<String> {
    let (topic, group) = (format!("{}migration", opts.prefix), format!("{}migration-group", opts.prefix));
    create_topic(opts, &topic, SPREAD_PARTITIONS).await?;
    for (n, protocol) in ["classic", "consumer", "classic"].into_iter().enumerate() {
        let n = n as i64;
        produce_spread(opts, &topic, (10 * n) as usize, (10 * n + 10) as usize).await?;
        let c = group_member(opts, &group, &topic, protocol)?;
        let (offsets, _) = drain(&[&c], 10 * SPREAD_PARTITIONS as usize, &topic)
            .await
            .with_context(|| format!("the {protocol} member"))?;
        expect_offsets(&offsets, 10 * n, 10 * n + 10).with_context(|| format!("the {protocol} member"))?;
        commit_and_close(c).await?;
    }
    Ok("classic -> consumer -> classic, each resuming at the last one's commits".into())
}

/// A consumer with `client.rack` set to a follower's rack reads every record, and the nodes'
/// /metrics show the follower sent them and the leader none (KIP-392).
pub async fn fetch_from_follower(opts: &Opts) -> Result<String> {
    if opts.brokers < 2 {
        return Err(NotApplicable("one node has no followers".into()).into());
    }
    let entry = opts
        .security
        .get("scenarios")
        .and_then(|s| s.get("fetch_from_follower"))
        .cloned()
        .context("the --security file has no fetch_from_follower entry (racks and /metrics URLs)")?;
    let topic = format!("{}follower", opts.prefix);
    create_topic(opts, &topic, 1).await?;
    let sent = test_records(FOLLOWER_RECORDS);
    produce(&producer(opts, &[("acks", "all")])?, &topic, &sent).await?;
    let md = admin(opts)?
        .inner()
        .fetch_metadata(Some(&topic), CALL)
        .context("metadata")?;
    let p = md
        .topics()
        .first()
        .and_then(|t| t.partitions().first())
        .context("no partition 0 in metadata")?;
    let leader = p.leader();
    let follower = *p.replicas().iter().find(|r| **r != leader).context("the partition has no follower")?;
    let rack = entry["racks"][follower.to_string()]
        .as_str()
        .with_context(|| format!("no rack for node {follower} in {entry}"))?
        .to_string();
    let c: StreamConsumer = config(
        opts,
        &[
            ("group.id", &format!("{}follower-reader", opts.prefix)),
            ("enable.auto.commit", "false"),
            ("client.rack", &rack),
        ],
    )
    .create()
    .context("cannot create the consumer")?;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(&topic, 0, Offset::Beginning)?;
    c.assign(&tpl)?;
    let got = receive(&c, FOLLOWER_RECORDS, WITHIN).await?;
    same_records(&sent, &got)?;
    let metrics = entry["metrics"].clone();
    let topic_label = format!("topic=\"{topic}\"");
    let by_node = tokio::task::spawn_blocking(move || sent_by_node(&metrics, &topic_label))
        .await
        .context("reading /metrics panicked")??;
    let (from_follower, from_leader) = (
        by_node.get(&follower).copied().unwrap_or(0),
        by_node.get(&leader).copied().unwrap_or(0),
    );
    ensure!(
        from_follower >= FOLLOWER_RECORDS as u64 && from_leader == 0,
        "records sent to consumers by node {by_node:?}: expected all {FOLLOWER_RECORDS} from follower {follower} \
         ({rack}) and none from leader {leader}"
    );
    Ok(format!(
        "client.rack={rack}: follower {follower} sent the records, leader {leader} none"
    ))
}

/// Records of a topic each node sent to consumers (`kafka_server_brokertopicmetrics_messagesout`
/// lines carrying `topic_label`), from the /metrics URLs by node id.
fn sent_by_node(urls: &serde_json::Value, topic_label: &str) -> Result<BTreeMap<i32, u64>> {
    let mut out = BTreeMap::new();
    for (node, url) in urls.as_object().context("metrics is not an object")? {
        let url = url.as_str().context("a metrics URL is not a string")?;
        let body = http_get(url)?;
        let sent: u64 = body
            .lines()
            .filter(|l| l.starts_with("kafka_server_brokertopicmetrics_messagesout") && l.contains(topic_label))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .map(|v| v as u64)
            .sum();
        out.insert(node.parse().context("a node id")?, sent);
    }
    Ok(out)
}

/// The body of a plain `http://host:port/path` GET (the nodes' /metrics listener).
fn http_get(url: &str) -> Result<String> {
    let rest = url.strip_prefix("http://").ok_or_else(|| anyhow!("{url} is not http://"))?;
    let (host, path) = rest.split_once('/').map_or((rest, "/".to_string()), |(h, p)| (h, format!("/{p}")));
    let mut s = std::net::TcpStream::connect(host).with_context(|| format!("connect {host}"))?;
    s.set_read_timeout(Some(CALL))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n")?;
    let mut response = String::new();
    s.read_to_string(&mut response)?;
    let (head, body) = response.split_once("\r\n\r\n").context("no HTTP header end")?;
    ensure!(head.starts_with("HTTP/1.") && head.contains(" 200"), "GET {url}: {}", head.lines().next().unwrap_or(""));
    Ok(body.to_string())
}

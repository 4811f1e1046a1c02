//! Clients with librdkafka's defaults, the scenarios' test records, and reading them back.

use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};

use crate::Opts;

/// Timeout of one blocking metadata/offset call; scenario deadlines bound the whole.
pub const CALL: Duration = Duration::from_secs(10);

/// A config with only the bootstrap list and the scenario's own settings (plus librdkafka's
/// `debug` contexts from $COMPAT_RDKAFKA_DEBUG, when investigating by hand).
pub fn config(opts: &Opts, settings: &[(&str, &str)]) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &opts.bootstrap);
    if let Ok(debug) = std::env::var("COMPAT_RDKAFKA_DEBUG") {
        c.set("debug", debug);
    }
    for (k, v) in settings {
        c.set(*k, *v);
    }
    c
}

pub fn admin(opts: &Opts) -> Result<AdminClient<DefaultClientContext>> {
    config(opts, &[]).create().context("cannot create the admin client")
}

pub fn admin_options() -> AdminOptions {
    AdminOptions::new().operation_timeout(Some(CALL))
}

/// Creates topics (RF = cluster size) in one CreateTopics request, failing on any per-topic
/// error.
pub async fn send_create_topics(opts: &Opts, names: &[String], partitions: i32) -> Result<()> {
    let admin = admin(opts)?;
    let topics: Vec<NewTopic> = names
        .iter()
        .map(|n| NewTopic::new(n, partitions, TopicReplication::Fixed(opts.brokers as i32)))
        .collect();
    let results = admin
        .create_topics(&topics, &admin_options())
        .await
        .context("create topics")?;
    ensure!(
        results.len() == names.len(),
        "create topics: {} results for {} topics",
        results.len(),
        names.len()
    );
    for r in results {
        if let Err((topic, code)) = r {
            bail!("create topic {topic}: {code:?}");
        }
    }
    Ok(())
}

/// Creates topics, then waits until each partition has a leader so the scenario starts from
/// usable topics.
pub async fn create_topics(opts: &Opts, names: &[String], partitions: i32) -> Result<()> {
    send_create_topics(opts, names, partitions).await?;
    await_leaders(opts, names, partitions as usize).await
}

pub async fn create_topic(opts: &Opts, name: &str, partitions: i32) -> Result<()> {
    create_topics(opts, &[name.to_owned()], partitions).await
}

/// Waits until metadata (one request for all topics) shows each topic with `partitions`
/// partitions, each with a leader.
pub async fn await_leaders(opts: &Opts, names: &[String], partitions: usize) -> Result<()> {
    let admin = admin(opts)?;
    let mut last = String::new();
    for _ in 0..100 {
        let md = admin.inner().fetch_metadata(None, CALL).context("metadata")?;
        last = match names.iter().find_map(|n| not_ready(&md, n, partitions)) {
            None => return Ok(()),
            Some(why) => why,
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("topics never all had {partitions} partitions with leaders (last: {last})")
}

fn not_ready(md: &rdkafka::metadata::Metadata, name: &str, partitions: usize) -> Option<String> {
    let Some(t) = md.topics().iter().find(|t| t.name() == name) else {
        return Some(format!("{name} missing from metadata"));
    };
    if let Some(e) = t.error() {
        return Some(format!("{name}: {e:?}"));
    }
    if t.partitions().len() != partitions {
        return Some(format!("{name} has {} partitions", t.partitions().len()));
    }
    t.partitions()
        .iter()
        .find(|p| p.leader() < 0 || p.error().is_some())
        .map(|p| format!("{name}/{}: leader {} error {:?}", p.id(), p.leader(), p.error()))
}

/// One test record as sent: key, value, two headers (one binary) and a CreateTime.
#[derive(Clone, Debug, PartialEq)]
pub struct TestRecord {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub headers: Vec<(String, Vec<u8>)>,
    pub timestamp: i64,
    pub offset: i64,
}

/// `n` records at offsets 0.., timestamps a minute in the past and one millisecond apart.
pub fn test_records(n: usize) -> Vec<TestRecord> {
    let t0 = now_ms() - 60_000;
    (0..n)
        .map(|i| TestRecord {
            key: format!("key-{i}").into_bytes(),
            value: format!("value-{i}-{}", "x".repeat(i % 7)).into_bytes(),
            headers: vec![
                ("text".into(), format!("h-{i}").into_bytes()),
                ("binary".into(), vec![0x00, 0xff, i as u8, 0x80, 0x00]),
            ],
            timestamp: t0 + i as i64,
            offset: i as i64,
        })
        .collect()
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as i64
}

/// Produces `records` to partition 0 of `topic` and waits for every delivery report.
pub async fn produce(producer: &FutureProducer, topic: &str, records: &[TestRecord]) -> Result<()> {
    let mut deliveries = Vec::with_capacity(records.len());
    for r in records {
        let mut headers = OwnedHeaders::new();
        for (k, v) in &r.headers {
            headers = headers.insert(Header { key: k, value: Some(v) });
        }
        let record = FutureRecord::to(topic)
            .partition(0)
            .key(&r.key)
            .payload(&r.value)
            .headers(headers)
            .timestamp(r.timestamp);
        let delivery = producer
            .send_result(record)
            .map_err(|(e, _)| e)
            .context("enqueue a record")?;
        deliveries.push(delivery);
    }
    for (i, d) in deliveries.into_iter().enumerate() {
        d.await
            .context("producer dropped a delivery report")?
            .map_err(|(e, _)| e)
            .with_context(|| format!("delivery of record {i}"))?;
    }
    Ok(())
}

pub fn producer(opts: &Opts, settings: &[(&str, &str)]) -> Result<FutureProducer> {
    config(opts, settings).create().context("cannot create the producer")
}

/// Creates a 1-partition topic and produces `records` to it with a default producer.
pub async fn topic_with(opts: &Opts, topic: &str, records: &[TestRecord]) -> Result<()> {
    create_topic(opts, topic, 1).await?;
    produce(&producer(opts, &[])?, topic, records).await
}

/// A consumer assigned to partition 0 of `topic` at `offset`. librdkafka wants a group.id even
/// for assign(); nothing is committed to it.
pub fn assigned_consumer(opts: &Opts, topic: &str, offset: Offset) -> Result<StreamConsumer> {
    let group = format!("{}reader", opts.prefix);
    let c: StreamConsumer = config(opts, &[("group.id", &group), ("enable.auto.commit", "false")])
        .create()
        .context("cannot create the consumer")?;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, offset)?;
    c.assign(&tpl)?;
    Ok(c)
}

/// Receives `n` messages, failing on a consumer error or when `within` passes first.
pub async fn receive(consumer: &StreamConsumer, n: usize, within: Duration) -> Result<Vec<TestRecord>> {
    receive_ignoring(consumer, n, within, |_| false).await
}

/// As [`receive`], skipping the consumer errors `ignore` accepts (logged to stderr).
pub async fn receive_ignoring(
    consumer: &StreamConsumer,
    n: usize,
    within: Duration,
    ignore: impl Fn(&KafkaError) -> bool,
) -> Result<Vec<TestRecord>> {
    let mut got = Vec::with_capacity(n);
    let deadline = tokio::time::Instant::now() + within;
    while got.len() < n {
        match tokio::time::timeout_at(deadline, consumer.recv()).await {
            Err(_) => bail!("received {} of {n} records within {within:?}", got.len()),
            Ok(Err(e)) if ignore(&e) => eprintln!("[rdkafka-rust] ignored consumer error: {e}"),
            Ok(Err(e)) => bail!("consumer error after {} records: {e}", got.len()),
            Ok(Ok(m)) => got.push(from_message(&m)?),
        }
    }
    Ok(got)
}

fn from_message(m: &BorrowedMessage<'_>) -> Result<TestRecord> {
    let timestamp = match m.timestamp() {
        rdkafka::Timestamp::CreateTime(t) => t,
        other => bail!(
            "record at offset {} has timestamp {other:?}, want CreateTime",
            m.offset()
        ),
    };
    let headers = m
        .headers()
        .map(|hs| {
            hs.iter()
                .map(|h| (h.key.to_owned(), h.value.unwrap_or_default().to_vec()))
                .collect()
        })
        .unwrap_or_default();
    Ok(TestRecord {
        key: m.key().unwrap_or_default().to_vec(),
        value: m.payload().unwrap_or_default().to_vec(),
        headers,
        timestamp,
        offset: m.offset(),
    })
}

/// Reads partition 0 of `topic` from `from` until `sent.len()` records arrived, and checks
/// they are exactly `sent` (offsets included).
pub async fn read_back(opts: &Opts, topic: &str, from: Offset, sent: &[TestRecord]) -> Result<()> {
    let consumer = assigned_consumer(opts, topic, from)?;
    let got = receive(&consumer, sent.len(), Duration::from_secs(20)).await?;
    same_records(sent, &got)
}

pub fn same_records(sent: &[TestRecord], got: &[TestRecord]) -> Result<()> {
    ensure!(
        got.len() == sent.len(),
        "read {} records, sent {}",
        got.len(),
        sent.len()
    );
    for (s, g) in sent.iter().zip(got) {
        ensure!(s == g, "read back {g:?}, sent {s:?}");
    }
    Ok(())
}

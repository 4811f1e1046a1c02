//! rdkafka client configurations and small helpers shared by the tests.
//!
//! Consumers here use manual partition assignment (they never join their group) and producers
//! keep idempotence off, so tests using them do not depend on the group coordinator or
//! InitProducerId. Group members that subscribe and commit are in [`crate::groups`].
//! [`secured`] adds librdkafka's TLS and SASL settings for a secured listener.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Message, ToBytes};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryFuture, FutureProducer, FutureRecord, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;

use rdkafka::{Offset, TopicPartitionList};

use crate::security::ClientSecurity;

/// Producer: `acks=all`, idempotence off, small linger, bounded delivery time.
pub fn producer_config(bootstrap: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap)
        .set("client.id", "sluice-it-producer")
        .set("acks", "all")
        .set("enable.idempotence", "false")
        .set("linger.ms", "5")
        .set("message.timeout.ms", "30000")
        .set("request.timeout.ms", "10000")
        .set("queue.buffering.max.messages", "200000")
        .set("queue.buffering.max.kbytes", "1048576")
        .set("log_level", "4");
    c
}

/// Consumer for manual assignment: never subscribes or commits, reads from the offsets it is
/// given. librdkafka's `assign` needs a `group.id` to exist ("Local: Unknown group" otherwise),
/// but without subscribe/commit the group is never joined.
pub fn consumer_config(bootstrap: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap)
        .set("client.id", "sluice-it-consumer")
        .set("group.id", "sluice-it-manual-assignment")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "false")
        .set("auto.offset.reset", "error")
        .set("fetch.wait.max.ms", "100")
        .set("log_level", "4");
    c
}

/// `config` set up to connect as `security` says: librdkafka's `security.protocol`, the CA to
/// trust and the client certificate (`ssl.*`, PEM files), the SASL mechanism and login
/// (`sasl.*`). librdkafka checks that the broker's certificate names the host it dials
/// (`ssl.endpoint.identification.algorithm=https`, its default), so test certificates carry
/// SAN IP 127.0.0.1.
pub fn secured(mut config: ClientConfig, security: &ClientSecurity) -> ClientConfig {
    config.set("security.protocol", security.protocol());
    if let Some(tls) = &security.tls {
        config
            .set("ssl.ca.location", tls.ca_pem.display().to_string())
            .set("ssl.endpoint.identification.algorithm", "https");
        if let Some((chain, key)) = &tls.identity {
            config
                .set("ssl.certificate.location", chain.display().to_string())
                .set("ssl.key.location", key.display().to_string());
        }
    }
    if let Some(login) = &security.sasl {
        config
            .set("sasl.mechanisms", login.mechanism.name())
            .set("sasl.username", &login.username)
            .set("sasl.password", &login.password);
    }
    config
}

/// [`producer_config`] for a secured listener ([`secured`]).
pub fn secured_producer_config(bootstrap: &str, security: &ClientSecurity) -> ClientConfig {
    secured(producer_config(bootstrap), security)
}

/// [`consumer_config`] for a secured listener ([`secured`]).
pub fn secured_consumer_config(bootstrap: &str, security: &ClientSecurity) -> ClientConfig {
    secured(consumer_config(bootstrap), security)
}

pub fn admin_client(bootstrap: &str) -> Result<AdminClient<DefaultClientContext>> {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap)
        .set("client.id", "sluice-it-admin")
        .set("log_level", "4");
    Ok(c.create()?)
}

pub fn admin_options() -> AdminOptions {
    AdminOptions::new()
        .request_timeout(Some(Duration::from_secs(15)))
        .operation_timeout(Some(Duration::from_secs(10)))
}

/// Creates a topic (replication factor 1) with `configs`, failing on any per-topic error.
pub async fn create_topic(
    admin: &AdminClient<DefaultClientContext>,
    name: &str,
    partitions: i32,
    configs: &[(&str, &str)],
) -> Result<()> {
    let mut topic = NewTopic::new(name, partitions, TopicReplication::Fixed(1));
    for (k, v) in configs {
        topic = topic.set(k, v);
    }
    let results = admin.create_topics([&topic], &admin_options()).await?;
    if results.len() != 1 {
        bail!(
            "CreateTopics returned {} results for 1 topic: {results:?}",
            results.len()
        );
    }
    match &results[0] {
        Ok(t) if t == name => Ok(()),
        Ok(t) => bail!("CreateTopics result names {t:?}, expected {name:?}"),
        Err((t, code)) => bail!("CreateTopics {t}: {code:?}"),
    }
}

/// Assigns `consumer` to `partitions` of `topic`, each starting at `offset`.
pub fn assign<C: Consumer>(consumer: &C, topic: &str, partitions: &[i32], offset: Offset) -> Result<()> {
    let mut tpl = TopicPartitionList::new();
    for &p in partitions {
        tpl.add_partition_offset(topic, p, offset)?;
    }
    consumer.assign(&tpl)?;
    Ok(())
}

pub fn stream_consumer(bootstrap: &str) -> Result<StreamConsumer> {
    Ok(consumer_config(bootstrap).create()?)
}

pub fn base_consumer(bootstrap: &str) -> Result<BaseConsumer> {
    Ok(consumer_config(bootstrap).create()?)
}

pub fn future_producer(bootstrap: &str) -> Result<FutureProducer> {
    Ok(producer_config(bootstrap).create()?)
}

/// Produces `n` records `record-0` .. `record-{n-1}` to partition 0 of `topic` (acks=all), one
/// at a time, so record `i` lands at offset `i` of an empty partition.
pub async fn produce_numbered(bootstrap: &str, topic: &str, n: usize) -> Result<()> {
    let producer = future_producer(bootstrap)?;
    for i in 0..n {
        let payload = format!("record-{i}");
        producer
            .send(
                FutureRecord::<str, str>::to(topic).partition(0).payload(&payload),
                Duration::from_secs(15),
            )
            .await
            .map_err(|(e, _)| anyhow::anyhow!("produce record {i}: {e}"))?;
    }
    Ok(())
}

/// Enqueues a record, waiting for queue space by awaiting the oldest outstanding delivery when
/// librdkafka's queue is full. `outstanding` holds deliveries not yet awaited, oldest first.
pub async fn enqueue<T>(
    producer: &FutureProducer,
    mut record: FutureRecord<'_, [u8], [u8]>,
    outstanding: &mut std::collections::VecDeque<(T, DeliveryFuture)>,
    done: &mut Vec<(T, rdkafka::producer::future_producer::OwnedDeliveryResult)>,
    tag: T,
) -> Result<()> {
    loop {
        match producer.send_result(record) {
            Ok(fut) => {
                outstanding.push_back((tag, fut));
                return Ok(());
            }
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                record = r;
                let Some((t, fut)) = outstanding.pop_front() else {
                    bail!("producer queue full with nothing outstanding");
                };
                done.push((t, fut.await.context("delivery future cancelled")?));
            }
            Err((e, _)) => bail!("enqueue failed: {e}"),
        }
    }
}

/// Enqueues `record` on a polled producer; while librdkafka's queue is full, serves delivery
/// reports for `poll` and tries again, so a fast sender waits for room instead of failing.
pub fn send_when_room<'a, C, K, P>(
    producer: &BaseProducer<C>,
    mut record: BaseRecord<'a, K, P, C::DeliveryOpaque>,
    poll: Duration,
) -> std::result::Result<(), KafkaError>
where
    C: ProducerContext,
    K: ToBytes + ?Sized,
    P: ToBytes + ?Sized,
{
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                record = r;
                producer.poll(poll);
            }
            Err((e, _)) => return Err(e),
        }
    }
}

/// Polls `f` until it returns `Some`, at most until `timeout`; `what` names the condition.
pub fn wait_until<T>(timeout: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> Result<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Ok(v);
        }
        if Instant::now() >= deadline {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Partition count of `topic` from a Metadata request for all topics (which never auto-creates),
/// or `None` if the broker does not list it.
pub fn partition_count<C: Consumer>(client: &C, topic: &str) -> Result<Option<usize>> {
    let md = client.fetch_metadata(None, Duration::from_secs(5))?;
    Ok(md
        .topics()
        .iter()
        .find(|t| t.name() == topic)
        .map(|t| t.partitions().len()))
}

/// Reads until `expected` messages per partition have arrived (or the deadline passes) and
/// returns them grouped by partition, in arrival order, as (offset, key, value, timestamp, headers).
pub async fn consume_exact(
    consumer: &StreamConsumer,
    expected: &HashMap<i32, usize>,
    timeout: Duration,
) -> Result<HashMap<i32, Vec<Consumed>>> {
    let deadline = tokio::time::Instant::now() + timeout;
    let total: usize = expected.values().sum();
    let mut got: HashMap<i32, Vec<Consumed>> = HashMap::new();
    let mut n = 0;
    while n < total {
        let msg = tokio::time::timeout_at(deadline, consumer.recv()).await.map_err(|_| {
            let counts: HashMap<i32, usize> = got.iter().map(|(p, v)| (*p, v.len())).collect();
            anyhow::anyhow!("timed out after {timeout:?}: consumed {counts:?} of {expected:?}")
        })??;
        let c = Consumed::from_message(&msg);
        let list = got.entry(c.partition).or_default();
        if list.len() >= *expected.get(&c.partition).unwrap_or(&0) {
            bail!(
                "unexpected extra message on partition {} at offset {}",
                c.partition,
                c.offset
            );
        }
        list.push(c);
        n += 1;
    }
    Ok(got)
}

/// An owned copy of a consumed record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consumed {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub timestamp: rdkafka::Timestamp,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
}

impl Consumed {
    pub fn from_message(m: &BorrowedMessage<'_>) -> Self {
        use rdkafka::message::Headers;
        let headers = m
            .headers()
            .map(|h| {
                h.iter()
                    .map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec)))
                    .collect()
            })
            .unwrap_or_default();
        Self {
            partition: m.partition(),
            offset: m.offset(),
            key: m.key().map(<[u8]>::to_vec),
            value: m.payload().map(<[u8]>::to_vec),
            timestamp: m.timestamp(),
            headers,
        }
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as i64
}

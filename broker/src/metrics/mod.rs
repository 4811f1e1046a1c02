//! What the broker counts as it works, shown by the HTTP server on `metrics.listen`
//! (`crate::http`: Prometheus text at `/metrics`, the console at `/`).
//!
//! Counters here are plain atomics bumped on the produce, fetch and replication paths (no lock
//! and no allocation per request once a topic has been seen), and request time histograms of
//! atomics. Everything else (partition offsets and sizes, ISR health, group lag, quorum state)
//! is read from the broker's state at scrape time (`http/snapshot.rs`), so a figure is never
//! stale and nothing is kept twice. This module imports nothing above it: the hot paths and
//! the broker depend on it, not the other way round.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use kafka_protocol::messages::ApiKey;
use parking_lot::RwLock;
use sluice_protocol::batch::BatchIter;

pub mod histogram;
pub mod history;

pub use histogram::LatencyHistogram;

/// One topic's traffic through this broker (Kafka's `BrokerTopicMetrics`).
#[derive(Debug, Default)]
pub struct TopicCounters {
    /// Records appended by Produce while leading.
    pub messages_in: AtomicU64,
    /// Batch bytes appended by Produce while leading.
    pub bytes_in: AtomicU64,
    /// Records sent to consumers (Kafka counts only bytes; the console plots both).
    pub messages_out: AtomicU64,
    /// Record bytes sent to consumers, not to follower replicas.
    pub bytes_out: AtomicU64,
    pub produce_requests: AtomicU64,
    pub fetch_requests: AtomicU64,
}

impl TopicCounters {
    fn load(&self) -> TopicTotals {
        TopicTotals {
            messages_in: self.messages_in.load(Ordering::Relaxed),
            bytes_in: self.bytes_in.load(Ordering::Relaxed),
            messages_out: self.messages_out.load(Ordering::Relaxed),
            bytes_out: self.bytes_out.load(Ordering::Relaxed),
            produce_requests: self.produce_requests.load(Ordering::Relaxed),
            fetch_requests: self.fetch_requests.load(Ordering::Relaxed),
        }
    }
}

/// A [`TopicCounters`] read at one moment.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TopicTotals {
    pub messages_in: u64,
    pub bytes_in: u64,
    pub messages_out: u64,
    pub bytes_out: u64,
    pub produce_requests: u64,
    pub fetch_requests: u64,
}

/// One Kafka API's requests: how many, and how long each took from arrival to response sent.
#[derive(Debug)]
pub struct RequestMetrics {
    /// Kafka's name for the API (`Produce`, `OffsetCommit`, ...), the `request` label.
    pub name: String,
    pub total_time_ms: LatencyHistogram,
}

/// Everything the broker counts. One per process, shared by every connection.
#[derive(Debug)]
pub struct BrokerMetrics {
    all_topics: TopicCounters,
    topics: RwLock<HashMap<String, Arc<TopicCounters>>>,
    /// Indexed by API key; `None` for keys Kafka does not define.
    requests: Vec<Option<RequestMetrics>>,
    pub isr_shrinks: AtomicU64,
    pub isr_expands: AtomicU64,
    /// Record bytes this broker appended as a follower.
    pub replication_bytes_in: AtomicU64,
    /// Record bytes this broker sent to its followers.
    pub replication_bytes_out: AtomicU64,
    /// Followers' fetches this broker answered as leader, and the partitions those answers
    /// read: with fetch sessions, only partitions named or changed are read.
    pub follower_fetches: AtomicU64,
    pub follower_fetch_partitions_read: AtomicU64,
    /// Record bytes sent to consumers by where they are (KIP-392): in this broker's rack, in
    /// another, or unknown (the consumer or this broker names no rack, or Fetch below v11).
    pub consumer_bytes_by_rack: [AtomicU64; 3],
    /// Open client connections per Kafka listener, in configuration order.
    connections: Vec<(Arc<str>, AtomicI64)>,
    /// Open client connections per listener and principal (the console's "who is connected"):
    /// bounded by the open connections, an entry going when its count reaches zero.
    principals: parking_lot::Mutex<HashMap<(Arc<str>, Arc<str>), i64>>,
}

/// Where a consumer is against the broker serving it (KIP-392's `client.rack`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RackLocality {
    SameRack = 0,
    OtherRack = 1,
    Unknown = 2,
}

impl RackLocality {
    pub const ALL: [(RackLocality, &'static str); 3] = [
        (RackLocality::SameRack, "same"),
        (RackLocality::OtherRack, "other"),
        (RackLocality::Unknown, "unknown"),
    ];

    /// A consumer naming `client_rack` (empty: none) served by a broker in `broker_rack`.
    pub fn of(client_rack: &str, broker_rack: Option<&str>) -> RackLocality {
        match broker_rack {
            _ if client_rack.is_empty() => RackLocality::Unknown,
            None => RackLocality::Unknown,
            Some(rack) if rack == client_rack => RackLocality::SameRack,
            Some(_) => RackLocality::OtherRack,
        }
    }
}

impl BrokerMetrics {
    pub fn new(listeners: impl IntoIterator<Item = Arc<str>>) -> BrokerMetrics {
        let max_key = ApiKey::iter().map(|k| k as i16).max().unwrap_or(0).max(0) as usize;
        let mut requests: Vec<Option<RequestMetrics>> = (0..=max_key).map(|_| None).collect();
        for key in ApiKey::iter() {
            requests[key as i16 as usize] = Some(RequestMetrics {
                name: format!("{key:?}"),
                total_time_ms: LatencyHistogram::default(),
            });
        }
        BrokerMetrics {
            all_topics: TopicCounters::default(),
            topics: RwLock::new(HashMap::new()),
            requests,
            isr_shrinks: AtomicU64::new(0),
            isr_expands: AtomicU64::new(0),
            replication_bytes_in: AtomicU64::new(0),
            replication_bytes_out: AtomicU64::new(0),
            follower_fetches: AtomicU64::new(0),
            follower_fetch_partitions_read: AtomicU64::new(0),
            consumer_bytes_by_rack: Default::default(),
            connections: listeners.into_iter().map(|l| (l, AtomicI64::new(0))).collect(),
            principals: parking_lot::Mutex::new(HashMap::new()),
        }
    }

    /// Runs `f` on the all-topics counters and on `topic`'s (created on first use).
    fn count(&self, topic: &str, f: impl Fn(&TopicCounters)) {
        f(&self.all_topics);
        if let Some(counters) = self.topics.read().get(topic) {
            f(counters);
            return;
        }
        let counters = self.topics.write().entry(topic.to_string()).or_default().clone();
        f(&counters);
    }

    /// A produce to one partition of `topic` was handled; `appended` is its records and batch
    /// bytes when it was appended.
    pub fn record_produce(&self, topic: &str, appended: Option<(u64, u64)>) {
        self.count(topic, |c| {
            c.produce_requests.fetch_add(1, Ordering::Relaxed);
            if let Some((records, bytes)) = appended {
                c.messages_in.fetch_add(records, Ordering::Relaxed);
                c.bytes_in.fetch_add(bytes, Ordering::Relaxed);
            }
        });
    }

    /// A consumer's fetch answered `records` (stored batches) for one partition of `topic`.
    pub fn record_consumer_fetch(&self, topic: &str, records: &[u8]) {
        let messages = records_in(records);
        let bytes = records.len() as u64;
        self.count(topic, |c| {
            c.fetch_requests.fetch_add(1, Ordering::Relaxed);
            c.messages_out.fetch_add(messages, Ordering::Relaxed);
            c.bytes_out.fetch_add(bytes, Ordering::Relaxed);
        });
    }

    /// Record bytes a consumer's fetch response carried, by where the consumer is.
    pub fn record_consumer_rack(&self, locality: RackLocality, bytes: u64) {
        self.consumer_bytes_by_rack[locality as usize].fetch_add(bytes, Ordering::Relaxed);
    }

    /// Forgets the counters of topics that no longer exist, as Kafka removes their metrics.
    pub fn retain_topics(&self, exists: impl Fn(&str) -> bool) {
        let stale = self.topics.read().keys().any(|t| !exists(t));
        if stale {
            self.topics.write().retain(|t, _| exists(t));
        }
    }

    pub fn all_topics(&self) -> TopicTotals {
        self.all_topics.load()
    }

    /// Each topic's counters, by name.
    pub fn topics(&self) -> Vec<(String, TopicTotals)> {
        let mut topics: Vec<_> = self.topics.read().iter().map(|(t, c)| (t.clone(), c.load())).collect();
        topics.sort_by(|a, b| a.0.cmp(&b.0));
        topics
    }

    /// The request metrics of API `key`, if Kafka defines it.
    pub fn request(&self, key: i16) -> Option<&RequestMetrics> {
        usize::try_from(key)
            .ok()
            .and_then(|k| self.requests.get(k))
            .and_then(Option::as_ref)
    }

    /// The APIs that have served at least one request.
    pub fn requests(&self) -> impl Iterator<Item = &RequestMetrics> {
        self.requests.iter().flatten().filter(|r| r.total_time_ms.count() > 0)
    }

    /// A connection on `listener` opened, as `principal` (ANONYMOUS until it authenticates);
    /// the guard counts it until dropped.
    pub fn connection_opened(self: &Arc<Self>, listener: &str, principal: Arc<str>) -> ConnectionGuard {
        let index = self.connections.iter().position(|(l, _)| &**l == listener);
        if let Some(i) = index {
            self.connections[i].1.fetch_add(1, Ordering::Relaxed);
        }
        let listener: Arc<str> = match index {
            Some(i) => self.connections[i].0.clone(),
            None => Arc::from(listener),
        };
        self.count_principal(&listener, &principal, 1);
        ConnectionGuard {
            metrics: self.clone(),
            index,
            listener,
            principal,
        }
    }

    fn count_principal(&self, listener: &Arc<str>, principal: &Arc<str>, delta: i64) {
        let mut principals = self.principals.lock();
        let key = (listener.clone(), principal.clone());
        let count = principals.entry(key.clone()).or_insert(0);
        *count += delta;
        if *count <= 0 {
            principals.remove(&key);
        }
    }

    /// Open connections per (listener, principal).
    pub fn principals(&self) -> Vec<(String, String, i64)> {
        let mut out: Vec<_> = self
            .principals
            .lock()
            .iter()
            .map(|((l, p), n)| (l.to_string(), p.to_string(), *n))
            .collect();
        out.sort();
        out
    }

    /// Open connections per listener.
    pub fn connections(&self) -> impl Iterator<Item = (&str, i64)> {
        self.connections.iter().map(|(l, n)| (&**l, n.load(Ordering::Relaxed)))
    }
}

/// Counts one open connection (see [`BrokerMetrics::connection_opened`]).
pub struct ConnectionGuard {
    metrics: Arc<BrokerMetrics>,
    index: Option<usize>,
    listener: Arc<str>,
    principal: Arc<str>,
}

impl ConnectionGuard {
    /// The connection authenticated (or re-authenticated) as `principal`.
    pub fn set_principal(&mut self, principal: &Arc<str>) {
        if *principal == self.principal {
            return;
        }
        self.metrics.count_principal(&self.listener, &self.principal, -1);
        self.metrics.count_principal(&self.listener, principal, 1);
        self.principal = principal.clone();
    }
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        if let Some(i) = self.index {
            self.metrics.connections[i].1.fetch_sub(1, Ordering::Relaxed);
        }
        self.metrics.count_principal(&self.listener, &self.principal, -1);
    }
}

/// Records in the complete batches of `records`, from their headers only.
pub fn records_in(records: &[u8]) -> u64 {
    BatchIter::new(records)
        .map(|(h, _)| h.records_count.max(0) as u64)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_consumer_is_in_this_brokers_rack_another_or_unknown() {
        assert_eq!(RackLocality::of("a", Some("a")), RackLocality::SameRack);
        assert_eq!(RackLocality::of("a", Some("b")), RackLocality::OtherRack);
        assert_eq!(RackLocality::of("", Some("a")), RackLocality::Unknown, "no client.rack");
        assert_eq!(RackLocality::of("a", None), RackLocality::Unknown, "no broker.rack");
    }
    use sluice_protocol::batch::test_support::encode_simple_batch;

    #[test]
    fn produce_and_fetch_count_per_topic_and_in_total() {
        let metrics = BrokerMetrics::new([Arc::from("PLAINTEXT")]);
        metrics.record_produce("a", Some((3, 300)));
        metrics.record_produce("a", None);
        metrics.record_produce("b", Some((1, 100)));
        let mut two_batches = encode_simple_batch(4, 10, 0);
        two_batches.extend(encode_simple_batch(2, 10, 0));
        metrics.record_consumer_fetch("a", &two_batches);
        let all = metrics.all_topics();
        assert_eq!((all.messages_in, all.bytes_in, all.produce_requests), (4, 400, 3));
        let topics = metrics.topics();
        assert_eq!(topics.len(), 2);
        let a = topics[0].1;
        assert_eq!((a.messages_in, a.produce_requests, a.messages_out), (3, 2, 6));
        assert_eq!(a.bytes_out, two_batches.len() as u64);
        metrics.retain_topics(|t| t == "b");
        assert_eq!(metrics.topics().iter().map(|t| t.0.as_str()).collect::<Vec<_>>(), ["b"]);
        assert_eq!(
            metrics.all_topics().messages_in,
            4,
            "the total outlives a deleted topic"
        );
    }

    #[test]
    fn a_torn_tail_batch_is_not_counted() {
        let batch = encode_simple_batch(5, 10, 0);
        assert_eq!(records_in(&batch), 5);
        assert_eq!(records_in(&batch[..batch.len() - 1]), 0);
    }

    #[test]
    fn connections_are_counted_per_listener_until_closed() {
        let metrics = Arc::new(BrokerMetrics::new([Arc::from("INTERNAL"), Arc::from("EXTERNAL")]));
        let anonymous: Arc<str> = Arc::from("User:ANONYMOUS");
        let first = metrics.connection_opened("EXTERNAL", anonymous.clone());
        let _second = metrics.connection_opened("EXTERNAL", anonymous.clone());
        let counts = |m: &BrokerMetrics| m.connections().map(|(_, n)| n).collect::<Vec<_>>();
        assert_eq!(counts(&metrics), [0, 2]);
        drop(first);
        assert_eq!(counts(&metrics), [0, 1]);
    }

    #[test]
    fn connections_are_counted_per_principal_as_they_authenticate() {
        let metrics = Arc::new(BrokerMetrics::new([Arc::from("SASL_SSL")]));
        let mut first = metrics.connection_opened("SASL_SSL", Arc::from("User:ANONYMOUS"));
        let second = metrics.connection_opened("SASL_SSL", Arc::from("User:ANONYMOUS"));
        first.set_principal(&Arc::from("User:alice"));
        assert_eq!(
            metrics.principals(),
            vec![
                ("SASL_SSL".to_string(), "User:ANONYMOUS".to_string(), 1),
                ("SASL_SSL".to_string(), "User:alice".to_string(), 1)
            ]
        );
        drop((first, second));
        assert!(metrics.principals().is_empty(), "entries go with their last connection");
    }

    #[test]
    fn every_kafka_api_has_request_metrics_under_its_kafka_name() {
        let metrics = BrokerMetrics::new([]);
        assert_eq!(metrics.request(0).map(|r| r.name.as_str()), Some("Produce"));
        assert_eq!(metrics.request(8).map(|r| r.name.as_str()), Some("OffsetCommit"));
        assert!(metrics.request(-1).is_none() && metrics.request(i16::MAX).is_none());
    }
}

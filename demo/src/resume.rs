//! The consumer context the sink and analytics share. Both keep, with their results, the next
//! offset of every partition they processed; that stored offset, not the group's committed
//! offset, is where an assigned partition resumes. So results and position can never
//! disagree, whatever was killed when.
//!
//! The group's committed offsets are still written (after the results are stored) so that
//! `kafka-consumer-groups --describe` shows each group's lag; nothing reads them back.

use std::collections::BTreeMap;
use std::sync::Mutex;

use anyhow::{bail, Result};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use crate::security::ClientSecurity;

/// Where an application keeps, with its results, the next offset to read per partition.
pub trait StoredOffsets: Send + Sync + 'static {
    /// The next offset of every partition of the topic the application has results for. A
    /// partition it has none for is read from the beginning of the log.
    fn next_offsets(&self) -> Result<BTreeMap<i32, i64>>;

    /// Partitions are about to be revoked: store what was processed of them.
    fn before_revoke(&self) -> Result<()>;
}

/// Subscriber settings for a group whose members resume at [`StoredOffsets`]. The eager
/// assignors only: [`ResumeContext`] assigns the whole assignment at once.
pub fn group_config(bootstrap: &str, security: &ClientSecurity, group: &str, client_id: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    security.apply(&mut c);
    c.set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("client.id", client_id)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("partition.assignment.strategy", "range,roundrobin")
        // A member that dies is replaced after this long (librdkafka's default is 45 s).
        .set("session.timeout.ms", "10000")
        // A topic created after subscribing is noticed within this long (default 5 min).
        .set("topic.metadata.refresh.interval.ms", "10000");
    // KIP-392: the rack (zone) this consumer runs in, so brokers with
    // replica.selector.class set send it to a replica there (docker-compose.yml sets it).
    if let Some(rack) = std::env::var("CLIENT_RACK").ok().filter(|r| !r.is_empty()) {
        c.set("client.rack", rack);
    }
    c
}

/// Assigns partitions at the application's stored offsets and lets it store its work before
/// a revoke. A failure to read or store is kept in `fatal` for the poll loop to act on.
pub struct ResumeContext<S> {
    pub topic: String,
    pub store: S,
    fatal: Mutex<Option<String>>,
}

impl<S: StoredOffsets> ResumeContext<S> {
    pub fn new(topic: &str, store: S) -> Self {
        Self {
            topic: topic.to_string(),
            store,
            fatal: Mutex::new(None),
        }
    }

    /// Fails if the rebalance callback could not read or store the offsets, or the client hit a
    /// fatal error (e.g. fenced by another member with the same `group.instance.id`): the
    /// member cannot go on safely.
    pub fn check(&self, consumer: &BaseConsumer<Self>) -> Result<()> {
        if let Some(message) = self.fatal.lock().unwrap_or_else(|e| e.into_inner()).clone() {
            bail!("{message}; restart this member once the cause is fixed");
        }
        if let Some((code, reason)) = consumer.client().fatal_error() {
            bail!("the consumer hit a fatal error ({code}: {reason}); restart this member");
        }
        Ok(())
    }

    fn fail(&self, message: String) {
        tracing::error!("{message}");
        self.fatal
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert(message);
    }

    /// Commits the stored offsets of the assigned partitions to the group (for lag display).
    pub fn commit(&self, consumer: &BaseConsumer<Self>, mode: CommitMode) {
        let result = (|| -> Result<()> {
            let offsets = self.store.next_offsets()?;
            let mut tpl = TopicPartitionList::new();
            for elem in consumer.assignment()?.elements_for_topic(&self.topic) {
                if let Some(offset) = offsets.get(&elem.partition()) {
                    tpl.add_partition_offset(&self.topic, elem.partition(), Offset::Offset(*offset))?;
                }
            }
            if tpl.count() > 0 {
                consumer.commit(&tpl, mode)?;
            }
            Ok(())
        })();
        if let Err(e) = result {
            // Only the lag display depends on it; the next commit catches up.
            tracing::warn!("committing offsets to the group failed: {e:#}");
        }
    }

    fn assign(&self, consumer: &BaseConsumer<Self>, tpl: &mut TopicPartitionList) {
        let offsets = match self.store.next_offsets() {
            Ok(offsets) => offsets,
            Err(e) => {
                self.fail(format!("cannot read the stored offsets to resume from: {e:#}"));
                let _ = consumer.unassign();
                return;
            }
        };
        let assigned: Vec<(String, i32)> = tpl
            .elements()
            .iter()
            .map(|e| (e.topic().to_string(), e.partition()))
            .collect();
        for (topic, partition) in assigned {
            let offset = offsets
                .get(&partition)
                .map_or(Offset::Beginning, |o| Offset::Offset(*o));
            if let Err(e) = tpl.set_partition_offset(&topic, partition, offset) {
                self.fail(format!("cannot set the start offset of {topic}-{partition}: {e}"));
            }
        }
        tracing::info!(partitions = ?offsets_of(tpl), "assigned; resuming at the stored offsets");
        if let Err(e) = consumer.assign(tpl) {
            self.fail(format!("cannot take the assigned partitions: {e}"));
        }
    }
}

/// `partition@offset` of each entry, for the log.
fn offsets_of(tpl: &TopicPartitionList) -> Vec<String> {
    tpl.elements()
        .iter()
        .map(|e| format!("{}@{:?}", e.partition(), e.offset()))
        .collect()
}

impl<S: StoredOffsets> ClientContext for ResumeContext<S> {}

impl<S: StoredOffsets> ConsumerContext for ResumeContext<S> {
    /// Replaces rdkafka's default: partitions are assigned at the stored offsets, which
    /// librdkafka applies before it fetches (a seek after `assign` would race the first fetch).
    fn rebalance(&self, consumer: &BaseConsumer<Self>, err: RDKafkaRespErr, tpl: &mut TopicPartitionList) {
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => self.assign(consumer, tpl),
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                if let Err(e) = self.store.before_revoke() {
                    self.fail(format!("cannot store the work in progress before a rebalance: {e:#}"));
                }
                self.commit(consumer, CommitMode::Sync);
                tracing::info!(partitions = ?offsets_of(tpl), "revoked");
                let _ = consumer.unassign();
            }
            other => {
                tracing::warn!("rebalance error {other:?}; dropping the assignment until the next one");
                let _ = consumer.unassign();
            }
        }
    }
}

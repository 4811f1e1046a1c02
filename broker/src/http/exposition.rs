//! `/metrics`: the broker's figures in Prometheus' text format, encoded by `prometheus-client`.
//!
//! Names follow Kafka's MBeans as the Prometheus JMX exporter's Kafka rules write them
//! (`kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec,topic=T` is
//! `kafka_server_brokertopicmetrics_messagesin_total{topic="T"}`), so dashboards built for
//! Kafka read Sluice; group lag and partition offsets follow kafka-exporter's names. Which
//! broker reports what is Kafka's rule too: per-topic traffic by the leader that took or
//! served it, partition health by the leader, cluster counts by the active controller only,
//! group lag by the group's coordinator. `docs/metrics.md` lists every family.

use std::fmt::Write as _;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use super::snapshot::{self, ClusterView};
use crate::broker::Broker;
use crate::metrics::histogram::HistogramReading;
use crate::metrics::{RackLocality, TopicTotals};

/// The `Content-Type` of what [`render`] returns.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Everything one scrape reports, read from the broker first and encoded after.
#[derive(Debug)]
struct Scrape {
    view: ClusterView,
    all_topics: TopicTotals,
    topics: Vec<(String, TopicTotals)>,
    requests: Vec<(String, HistogramReading)>,
    isr_shrinks: u64,
    isr_expands: u64,
    replication_bytes_in: u64,
    replication_bytes_out: u64,
    follower_fetches: u64,
    follower_fetch_partitions_read: u64,
    consumer_bytes_by_rack: [u64; 3],
    connections: Vec<(String, i64)>,
    /// Per listener: successful and failed authentications since start.
    authentications: Vec<(String, u64, u64)>,
    request_memory_available: u64,
    request_memory_total: u64,
    fetch_sessions: usize,
    fetch_session_partitions: usize,
    segment_files: crate::log::FileCacheStats,
}

/// The Prometheus text of `broker`'s metrics now.
pub fn render(broker: &Broker) -> String {
    let view = snapshot::take(broker);
    let metrics = &broker.metrics;
    metrics.retain_topics(|t| view.topics.iter().any(|v| v.name == t));
    let ordering = std::sync::atomic::Ordering::Relaxed;
    let scrape = Scrape {
        all_topics: metrics.all_topics(),
        topics: metrics.topics(),
        requests: metrics
            .requests()
            .map(|r| (r.name.clone(), r.total_time_ms.read()))
            .collect(),
        isr_shrinks: metrics.isr_shrinks.load(ordering),
        isr_expands: metrics.isr_expands.load(ordering),
        replication_bytes_in: metrics.replication_bytes_in.load(ordering),
        replication_bytes_out: metrics.replication_bytes_out.load(ordering),
        follower_fetches: metrics.follower_fetches.load(ordering),
        follower_fetch_partitions_read: metrics.follower_fetch_partitions_read.load(ordering),
        consumer_bytes_by_rack: [0, 1, 2].map(|i| metrics.consumer_bytes_by_rack[i].load(ordering)),
        connections: metrics.connections().map(|(l, n)| (l.to_string(), n)).collect(),
        authentications: {
            let mut counts: Vec<(String, u64, u64)> = broker
                .security
                .counts
                .iter()
                .map(|(l, c)| (l.clone(), c.successful.load(ordering), c.failed.load(ordering)))
                .collect();
            counts.sort();
            counts
        },
        request_memory_available: broker.request_memory.available_permits() as u64,
        request_memory_total: broker.request_memory_budget() as u64,
        fetch_sessions: broker.fetch_sessions.len(),
        fetch_session_partitions: broker.fetch_sessions.partitions_held(),
        segment_files: broker.replicas.file_cache_stats(),
        view,
    };
    let mut registry = Registry::default();
    registry.register_collector(Box::new(scrape));
    let mut text = String::new();
    if let Err(e) = prometheus_client::encoding::prometheus_text::encode(&mut text, &registry) {
        // Writing to a String cannot fail; say so rather than serve a truncated scrape silently.
        let _ = writeln!(text, "# encoding failed: {e}");
    }
    text
}

type Result = std::result::Result<(), std::fmt::Error>;

/// One metric family: its `# HELP`/`# TYPE` lines, then each series in turn.
struct Family<'e, 'd> {
    encoder: prometheus_client::encoding::MetricEncoder<'e>,
    _descriptor: std::marker::PhantomData<&'d ()>,
}

fn family<'e>(
    encoder: &'e mut DescriptorEncoder<'_>,
    name: &'e str,
    help: &str,
    metric_type: MetricType,
) -> std::result::Result<Family<'e, 'e>, std::fmt::Error> {
    Ok(Family {
        encoder: encoder.encode_descriptor(name, help, None, metric_type)?,
        _descriptor: std::marker::PhantomData,
    })
}

impl Family<'_, '_> {
    fn counter(&mut self, value: u64) -> Result {
        self.encoder.encode_counter::<NoLabelSet, _, u64>(&value, None)
    }

    fn labelled_counter(&mut self, labels: &impl EncodeLabelSet, value: u64) -> Result {
        self.encoder
            .encode_family(labels)?
            .encode_counter::<NoLabelSet, _, u64>(&value, None)
    }

    fn gauge(&mut self, value: i64) -> Result {
        self.encoder.encode_gauge(&value)
    }

    fn labelled_gauge(&mut self, labels: &impl EncodeLabelSet, value: i64) -> Result {
        self.encoder.encode_family(labels)?.encode_gauge(&value)
    }

    fn labelled_histogram(&mut self, labels: &impl EncodeLabelSet, reading: &HistogramReading) -> Result {
        self.encoder.encode_family(labels)?.encode_histogram::<NoLabelSet>(
            reading.sum_ms,
            reading.count(),
            &reading.buckets(),
            None,
        )
    }
}

fn gauge(encoder: &mut DescriptorEncoder<'_>, name: &str, help: &str, value: i64) -> Result {
    family(encoder, name, help, MetricType::Gauge)?.gauge(value)
}

fn counter(encoder: &mut DescriptorEncoder<'_>, name: &str, help: &str, value: u64) -> Result {
    family(encoder, name, help, MetricType::Counter)?.counter(value)
}

impl Collector for Scrape {
    fn encode(&self, mut e: DescriptorEncoder) -> Result {
        self.topic_traffic(&mut e)?;
        self.requests(&mut e)?;
        self.replication(&mut e)?;
        self.controller(&mut e)?;
        self.logs(&mut e)?;
        self.groups(&mut e)?;
        self.quorum(&mut e)?;
        self.network(&mut e)
    }
}

impl Scrape {
    fn topic_traffic(&self, e: &mut DescriptorEncoder) -> Result {
        let per_topic: [(&str, &str, fn(&TopicTotals) -> u64); 6] = [
            (
                "kafka_server_brokertopicmetrics_messagesin",
                "Records appended by Produce while leading (MessagesInPerSec).",
                |t| t.messages_in,
            ),
            (
                "kafka_server_brokertopicmetrics_bytesin",
                "Record batch bytes appended by Produce while leading (BytesInPerSec).",
                |t| t.bytes_in,
            ),
            (
                "kafka_server_brokertopicmetrics_bytesout",
                "Record bytes sent to consumers, not to follower replicas (BytesOutPerSec).",
                |t| t.bytes_out,
            ),
            (
                "kafka_server_brokertopicmetrics_messagesout",
                "Records sent to consumers (Sluice's addition beside BytesOutPerSec).",
                |t| t.messages_out,
            ),
            (
                "kafka_server_brokertopicmetrics_totalproducerequests",
                "Produce requests to a partition of the topic (TotalProduceRequestsPerSec).",
                |t| t.produce_requests,
            ),
            (
                "kafka_server_brokertopicmetrics_totalfetchrequests",
                "Consumer fetches of a partition of the topic (TotalFetchRequestsPerSec).",
                |t| t.fetch_requests,
            ),
        ];
        for (name, help, value) in per_topic {
            let mut f = family(e, name, help, MetricType::Counter)?;
            f.counter(value(&self.all_topics))?;
            for (topic, totals) in &self.topics {
                f.labelled_counter(&[("topic", topic.as_str())], value(totals))?;
            }
        }
        counter(
            e,
            "kafka_server_brokertopicmetrics_replicationbytesin",
            "Record bytes appended as a follower (ReplicationBytesInPerSec).",
            self.replication_bytes_in,
        )?;
        counter(
            e,
            "kafka_server_brokertopicmetrics_replicationbytesout",
            "Record bytes sent to followers (ReplicationBytesOutPerSec).",
            self.replication_bytes_out,
        )?;
        counter(
            e,
            "sluice_follower_fetches",
            "Followers' fetches answered as leader.",
            self.follower_fetches,
        )?;
        counter(
            e,
            "sluice_follower_fetch_partitions_read",
            "Partitions read to answer followers' fetches: in a follower's fetch session, only those it named, that changed, or that the last answer left data in.",
            self.follower_fetch_partitions_read,
        )?;
        let mut f = family(
            e,
            "sluice_consumer_fetch_bytes",
            "Record bytes sent to consumers, by whether the consumer's client.rack (Fetch v11+) is this broker's broker.rack (same, other; unknown when either is unset): what crosses racks (KIP-392).",
            MetricType::Counter,
        )?;
        for (locality, label) in RackLocality::ALL {
            f.labelled_counter(&[("rack", label)], self.consumer_bytes_by_rack[locality as usize])?;
        }
        Ok(())
    }

    fn requests(&self, e: &mut DescriptorEncoder) -> Result {
        let mut f = family(
            e,
            "kafka_network_requestmetrics_requests",
            "Requests handled, by Kafka API (RequestsPerSec).",
            MetricType::Counter,
        )?;
        for (name, reading) in &self.requests {
            f.labelled_counter(&[("request", name.as_str())], reading.count())?;
        }
        let mut f = family(
            e,
            "kafka_network_requestmetrics_totaltimems",
            "Milliseconds from a request fully read to its response written (TotalTimeMs), by Kafka API.",
            MetricType::Histogram,
        )?;
        for (name, reading) in &self.requests {
            f.labelled_histogram(&[("request", name.as_str())], reading)?;
        }
        Ok(())
    }

    fn replication(&self, e: &mut DescriptorEncoder) -> Result {
        let led = || {
            self.view
                .topics
                .iter()
                .flat_map(|t| t.partitions.iter())
                .filter(|p| p.led_here)
        };
        let hosted = self
            .view
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter())
            .filter(|p| p.log_end_offset.is_some())
            .count();
        gauge(
            e,
            "kafka_server_replicamanager_underreplicatedpartitions",
            "Partitions this broker leads whose ISR is smaller than their replica set.",
            led().filter(|p| p.under_replicated).count() as i64,
        )?;
        gauge(
            e,
            "kafka_server_replicamanager_underminisrpartitioncount",
            "Partitions this broker leads with fewer in-sync replicas than min.insync.replicas.",
            led().filter(|p| p.under_min_isr).count() as i64,
        )?;
        gauge(
            e,
            "kafka_server_replicamanager_leadercount",
            "Partitions this broker leads.",
            led().count() as i64,
        )?;
        gauge(
            e,
            "kafka_server_replicamanager_partitioncount",
            "Partition replicas this broker hosts.",
            hosted as i64,
        )?;
        counter(
            e,
            "kafka_server_replicamanager_isrshrinks",
            "Committed ISR shrinks of partitions this broker leads (IsrShrinksPerSec).",
            self.isr_shrinks,
        )?;
        counter(
            e,
            "kafka_server_replicamanager_isrexpands",
            "Committed ISR expansions of partitions this broker leads (IsrExpandsPerSec).",
            self.isr_expands,
        )?;
        let mut f = family(
            e,
            "kafka_cluster_partition_underreplicated",
            "1 when the partition (led here) has fewer in-sync replicas than replicas.",
            MetricType::Gauge,
        )?;
        for topic in &self.view.topics {
            for p in topic.partitions.iter().filter(|p| p.led_here) {
                let partition = p.partition.to_string();
                let labels = [("topic", topic.name.as_str()), ("partition", partition.as_str())];
                f.labelled_gauge(&labels, p.under_replicated as i64)?;
            }
        }
        Ok(())
    }

    fn controller(&self, e: &mut DescriptorEncoder) -> Result {
        let active = self.view.controller_id == self.view.node_id;
        let partitions = || self.view.topics.iter().flat_map(|t| t.partitions.iter());
        let only_active = |n: usize| if active { n as i64 } else { 0 };
        gauge(
            e,
            "kafka_controller_kafkacontroller_activecontrollercount",
            "1 on the active controller (the metadata quorum's leader), else 0.",
            active as i64,
        )?;
        gauge(
            e,
            "kafka_controller_kafkacontroller_offlinepartitionscount",
            "Partitions without a leader (reported by the active controller only).",
            only_active(partitions().filter(|p| p.leader < 0).count()),
        )?;
        gauge(
            e,
            "kafka_controller_kafkacontroller_globalpartitioncount",
            "Partitions in the cluster (reported by the active controller only).",
            only_active(partitions().count()),
        )?;
        gauge(
            e,
            "kafka_controller_kafkacontroller_globaltopiccount",
            "Topics in the cluster (reported by the active controller only).",
            only_active(self.view.topics.len()),
        )
    }

    fn logs(&self, e: &mut DescriptorEncoder) -> Result {
        type Pick = fn(&snapshot::PartitionView) -> Option<i64>;
        let every_replica: [(&str, &str, Pick); 3] = [
            (
                "kafka_log_log_size",
                "Bytes of the partition's log on this broker.",
                |p| p.size_bytes.map(|s| s as i64),
            ),
            (
                "kafka_log_log_logendoffset",
                "The partition's log end offset on this broker.",
                |p| p.log_end_offset,
            ),
            (
                "kafka_log_log_logstartoffset",
                "The partition's log start offset on this broker.",
                |p| p.log_start_offset,
            ),
        ];
        let leader_only: [(&str, &str, Pick); 2] = [
            (
                "kafka_topic_partition_current_offset",
                "The partition's high watermark (reported by its leader).",
                |p| p.high_watermark,
            ),
            (
                "kafka_topic_partition_oldest_offset",
                "The partition's log start offset (reported by its leader).",
                |p| p.log_start_offset,
            ),
        ];
        let families = every_replica
            .iter()
            .map(|f| (f, false))
            .chain(leader_only.iter().map(|f| (f, true)));
        for ((name, help, pick), leaders) in families {
            let mut f = family(e, name, help, MetricType::Gauge)?;
            for topic in &self.view.topics {
                for p in topic.partitions.iter().filter(|p| !leaders || p.led_here) {
                    let Some(value) = pick(p) else { continue };
                    let partition = p.partition.to_string();
                    f.labelled_gauge(
                        &[("topic", topic.name.as_str()), ("partition", partition.as_str())],
                        value,
                    )?;
                }
            }
        }
        let files = &self.segment_files;
        gauge(
            e,
            "sluice_segment_files_open",
            "Log segment files held open now, through the file cache.",
            i64::try_from(files.open).unwrap_or(i64::MAX),
        )?;
        gauge(
            e,
            "sluice_segment_files_open_max",
            "Log segment files the cache holds open at most: what the open-files limit leaves after the reserve.",
            i64::try_from(files.capacity).unwrap_or(i64::MAX),
        )?;
        counter(
            e,
            "sluice_segment_files_reopened",
            "Log segment files opened again after the cache closed them.",
            files.reopened,
        )?;
        counter(
            e,
            "sluice_segment_files_closed",
            "Log segment files the cache closed to stay within its bound, least recently used first.",
            files.closed,
        )
    }

    fn groups(&self, e: &mut DescriptorEncoder) -> Result {
        type Pick = fn(&snapshot::OffsetView) -> Option<i64>;
        let per_partition: [(&str, &str, Pick); 2] = [
            (
                "kafka_consumergroup_current_offset",
                "The group's committed offset (reported by its coordinator).",
                |o| Some(o.committed),
            ),
            (
                "kafka_consumergroup_lag",
                "High watermark minus the group's committed offset (reported by its coordinator).",
                |o| o.lag,
            ),
        ];
        for (name, help, pick) in per_partition {
            let mut f = family(e, name, help, MetricType::Gauge)?;
            for group in &self.view.groups {
                for o in &group.offsets {
                    let Some(value) = pick(o) else { continue };
                    let partition = o.partition.to_string();
                    let labels = [
                        ("consumergroup", group.group_id.as_str()),
                        ("topic", o.topic.as_str()),
                        ("partition", partition.as_str()),
                    ];
                    f.labelled_gauge(&labels, value)?;
                }
            }
        }
        let mut f = family(
            e,
            "kafka_consumergroup_lag_sum",
            "The group's lag summed over a topic's partitions (reported by its coordinator).",
            MetricType::Gauge,
        )?;
        for group in &self.view.groups {
            let mut sums: Vec<(&str, i64)> = Vec::new();
            for o in &group.offsets {
                let Some(lag) = o.lag else { continue };
                match sums.iter_mut().find(|(t, _)| *t == o.topic) {
                    Some((_, sum)) => *sum += lag,
                    None => sums.push((&o.topic, lag)),
                }
            }
            for (topic, sum) in sums {
                f.labelled_gauge(&[("consumergroup", group.group_id.as_str()), ("topic", topic)], sum)?;
            }
        }
        let mut f = family(
            e,
            "kafka_consumergroup_members",
            "Members of the group (reported by its coordinator).",
            MetricType::Gauge,
        )?;
        for group in &self.view.groups {
            f.labelled_gauge(
                &[("consumergroup", group.group_id.as_str())],
                group.members.len() as i64,
            )?;
        }
        Ok(())
    }

    fn quorum(&self, e: &mut DescriptorEncoder) -> Result {
        let q = &self.view.quorum;
        gauge(
            e,
            "kafka_server_raftmetrics_current_leader",
            "Node id of the metadata quorum's leader, -1 when none.",
            q.leader_id as i64,
        )?;
        gauge(
            e,
            "kafka_server_raftmetrics_current_epoch",
            "The metadata log's leader epoch (Raft term).",
            q.epoch as i64,
        )?;
        gauge(
            e,
            "kafka_server_raftmetrics_high_watermark",
            "The metadata log's committed index.",
            q.commit_index as i64,
        )?;
        gauge(
            e,
            "kafka_server_raftmetrics_log_end_offset",
            "The index after this member's last metadata log entry.",
            q.last_index as i64 + 1,
        )?;
        let mut f = family(
            e,
            "kafka_server_raftmetrics_current_state",
            "1 for this member's role in the metadata quorum.",
            MetricType::Gauge,
        )?;
        f.labelled_gauge(&[("state", q.role)], 1)?;
        let mut f = family(
            e,
            "sluice_build_info",
            "1, labelled with this build's version.",
            MetricType::Gauge,
        )?;
        f.labelled_gauge(&[("version", self.view.version)], 1)
    }

    fn network(&self, e: &mut DescriptorEncoder) -> Result {
        let mut f = family(
            e,
            "kafka_server_socket_server_metrics_connection_count",
            "Open client connections, by listener.",
            MetricType::Gauge,
        )?;
        for (listener, open) in &self.connections {
            f.labelled_gauge(&[("listener", listener.as_str())], *open)?;
        }
        let mut f = family(
            e,
            "kafka_server_socket_server_metrics_successful_authentication",
            "Connections that authenticated (SASL, or a TLS client certificate), by listener.",
            MetricType::Counter,
        )?;
        for (listener, successful, _) in &self.authentications {
            f.labelled_counter(&[("listener", listener.as_str())], *successful)?;
        }
        let mut f = family(
            e,
            "kafka_server_socket_server_metrics_failed_authentication",
            "Connections whose authentication failed (wrong credentials, refused certificates), by listener.",
            MetricType::Counter,
        )?;
        for (listener, _, failed) in &self.authentications {
            f.labelled_counter(&[("listener", listener.as_str())], *failed)?;
        }
        let available = self.request_memory_available.min(self.request_memory_total);
        gauge(
            e,
            "kafka_network_socketserver_memorypoolused",
            "Bytes of queued.max.request.bytes held by requests being read or handled.",
            (self.request_memory_total - available) as i64,
        )?;
        gauge(
            e,
            "kafka_network_socketserver_memorypoolavailable",
            "Bytes of queued.max.request.bytes free for requests.",
            available as i64,
        )?;
        gauge(
            e,
            "kafka_server_fetchsessioncache_numincrementalfetchsessions",
            "Incremental fetch sessions (KIP-227) held.",
            self.fetch_sessions as i64,
        )?;
        gauge(
            e,
            "kafka_server_fetchsessioncache_numincrementalfetchpartitionscached",
            "Partitions held over all incremental fetch sessions.",
            self.fetch_session_partitions as i64,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::LatencyHistogram;
    use std::time::Duration;

    #[derive(Debug)]
    struct OneHistogram(HistogramReading);

    impl Collector for OneHistogram {
        fn encode(&self, mut e: DescriptorEncoder) -> Result {
            let mut f = family(&mut e, "t_totaltimems", "help", MetricType::Histogram)?;
            f.labelled_histogram(&[("request", "Produce")], &self.0)
        }
    }

    #[test]
    fn histogram_buckets_are_written_cumulatively_ending_at_the_count() {
        let h = LatencyHistogram::default();
        for ms in [0.1, 0.1, 2.5, 40.0] {
            h.record(Duration::from_secs_f64(ms / 1000.0));
        }
        let mut registry = Registry::default();
        registry.register_collector(Box::new(OneHistogram(h.read())));
        let mut text = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut text, &registry).unwrap();
        let bucket = |le: &str| -> u64 {
            let prefix = format!("t_totaltimems_bucket{{request=\"Produce\",le=\"{le}\"}} ");
            let line = text
                .lines()
                .find(|l| l.starts_with(&prefix))
                .unwrap_or_else(|| panic!("no {prefix} in {text}"));
            line[prefix.len()..].parse().unwrap()
        };
        assert_eq!(
            (bucket("0.25"), bucket("3"), bucket("50"), bucket("+Inf")),
            (2, 3, 4, 4),
            "{text}"
        );
        assert!(text.contains("t_totaltimems_count{request=\"Produce\"} 4"), "{text}");
    }
}

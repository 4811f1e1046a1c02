//! The final log: what the cluster holds once the workload stopped, read as a client sees it
//! (to the high watermark) and as each node stores it (segment bytes).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use crate::clients::{self, wait_until};
use crate::ClientSecurity;

/// Every partition's records from offset 0 to its high watermark, read by a fresh consumer.
#[derive(Debug)]
pub struct FinalLog {
    pub high_watermarks: BTreeMap<i32, i64>,
    /// Per partition, (offset, value) in offset order.
    pub records: BTreeMap<i32, Vec<(i64, String)>>,
    /// Values stored more than once, every copy in one partition under a producer epoch of
    /// its own: the client resent them after bumping its epoch ([`mark_resent_by_client`]).
    pub resent_by_client: BTreeSet<String>,
}

impl FinalLog {
    pub fn value_at(&self, partition: i32, offset: i64) -> Option<&str> {
        let records = self.records.get(&partition)?;
        let i = records.binary_search_by_key(&offset, |(o, _)| *o).ok()?;
        Some(records[i].1.as_str())
    }
    /// Where `value` is in `partition`, if it is there.
    pub fn offset_of(&self, partition: i32, value: &str) -> Option<i64> {
        let records = self.records.get(&partition)?;
        records.iter().find(|(_, v)| v == value).map(|(o, _)| *o)
    }
    pub fn len(&self) -> usize {
        self.records.values().map(Vec::len).sum()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Reads `topic` from offset 0 to each partition's high watermark with a fresh consumer.
pub fn read_final_log(bootstrap: &str, topic: &str, partitions: i32, timeout: Duration) -> Result<FinalLog> {
    read_final_log_as(bootstrap, &ClientSecurity::default(), topic, partitions, timeout)
}

/// [`read_final_log`] by a consumer that connects as `security` says (TLS, SASL login).
pub fn read_final_log_as(
    bootstrap: &str,
    security: &ClientSecurity,
    topic: &str,
    partitions: i32,
    timeout: Duration,
) -> Result<FinalLog> {
    let deadline = Instant::now() + timeout;
    let consumer: BaseConsumer = clients::secured(clients::consumer_config(bootstrap), security)
        .set("client.id", "sluice-faults-final-reader")
        .set("group.id", "sluice-faults-final-reader")
        .create()?;
    // A leader elected a moment ago reports the high watermark it had as a follower until its
    // followers' next fetches (as in Kafka), which can be below one already served. Read every
    // partition's until a pass half a second after the last brings nothing higher, and keep
    // the highest: every offset below a high watermark ever reported is committed.
    let mut high_watermarks: BTreeMap<i32, i64> = BTreeMap::new();
    let settle_deadline = Instant::now() + Duration::from_secs(10);
    for pass in 0.. {
        let mut raised = pass == 0;
        for p in 0..partitions {
            let mut last = String::new();
            let hw = wait_until(Duration::from_secs(15), "", || {
                match consumer.fetch_watermarks(topic, p, Duration::from_secs(5)) {
                    Ok((_, high)) => Some(high),
                    Err(e) => {
                        last = e.to_string();
                        None
                    }
                }
            })
            .map_err(|_| anyhow!("no high watermark for {topic}-{p}: {last}"))?;
            let known = high_watermarks.entry(p).or_insert(hw);
            if hw > *known {
                *known = hw;
                raised = true;
            }
        }
        if !raised || Instant::now() >= settle_deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let mut tpl = TopicPartitionList::new();
    for (p, hw) in &high_watermarks {
        if *hw > 0 {
            tpl.add_partition_offset(topic, *p, Offset::Offset(0))?;
        }
    }
    consumer.assign(&tpl)?;
    let mut records: BTreeMap<i32, Vec<(i64, String)>> = (0..partitions).map(|p| (p, Vec::new())).collect();
    let done = |records: &BTreeMap<i32, Vec<(i64, String)>>| {
        high_watermarks
            .iter()
            .all(|(p, hw)| records[p].last().map_or(0, |(o, _)| o + 1) >= *hw)
    };
    let mut errors = Vec::new();
    while !done(&records) {
        if Instant::now() >= deadline {
            let reached: BTreeMap<i32, i64> = records
                .iter()
                .map(|(p, r)| (*p, r.last().map_or(0, |(o, _)| o + 1)))
                .collect();
            bail!(
                "reading the final log of {topic}: reached {reached:?} of high watermarks {high_watermarks:?} \
                 within {timeout:?}; errors: {errors:?}"
            );
        }
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                let hw = high_watermarks[&m.partition()];
                if m.offset() < hw {
                    let value = String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned();
                    records.entry(m.partition()).or_default().push((m.offset(), value));
                }
            }
            Some(Err(e)) if errors.len() < 20 => errors.push(e.to_string()),
            _ => {}
        }
    }
    Ok(FinalLog {
        high_watermarks,
        records,
        resent_by_client: BTreeSet::new(),
    })
}

/// The producer id, epoch and sequence a copy of a record was stored with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredAs {
    pub offset: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub sequence: i64,
}

/// What batch each of `offsets` of `partition` is in, from the segment bytes in `data_dir`
/// (`None` for an offset no batch there holds).
pub fn stored_as(data_dir: &Path, topic: &str, partition: i32, offsets: &[i64]) -> Vec<Option<StoredAs>> {
    let bytes = partition_log_bytes(data_dir, topic, partition).unwrap_or_default();
    let headers: Vec<_> = sluice_protocol::batch::BatchIter::new(&bytes).map(|(h, _)| h).collect();
    offsets
        .iter()
        .map(|&offset| {
            let h = headers
                .iter()
                .find(|h| h.base_offset <= offset && offset <= h.last_offset())?;
            Some(StoredAs {
                offset,
                producer_id: h.producer_id,
                producer_epoch: h.producer_epoch,
                sequence: i64::from(h.base_sequence) + (offset - h.base_offset),
            })
        })
        .collect()
}

/// Marks the duplicates the client made: values whose copies are all in one partition, from
/// one producer, each under a different epoch. librdkafka bumps its producer epoch after some
/// errors (an out-of-order sequence behind a failed request, KIP-360) and then numbers every
/// record it holds no acknowledgement for from sequence 0 of the new epoch, including records
/// whose earlier request timed out or lost its connection after the leader had stored them
/// (`rd_kafka_toppar_pid_change`). A broker cannot tell such a resend from a new record, and
/// Kafka stores it again too. Copies under one epoch remain the broker's duplicates. Reads the
/// batch headers from the first of `data_dirs` (the nodes' data directories) that holds every
/// copy. Returns, per marked value, how its copies were stored.
pub fn mark_resent_by_client(
    log: &mut FinalLog,
    data_dirs: &[std::path::PathBuf],
    topic: &str,
) -> Vec<(String, Vec<StoredAs>)> {
    let mut copies: BTreeMap<&str, Vec<(i32, i64)>> = BTreeMap::new();
    for (p, records) in &log.records {
        for (offset, value) in records {
            copies.entry(value.as_str()).or_default().push((*p, *offset));
        }
    }
    let mut marked = Vec::new();
    for (value, at) in copies.into_iter().filter(|(_, at)| at.len() > 1) {
        let partition = at[0].0;
        if at.iter().any(|(p, _)| *p != partition) {
            continue;
        }
        let offsets: Vec<i64> = at.iter().map(|(_, o)| *o).collect();
        let Some(stored) = data_dirs.iter().find_map(|dir| {
            stored_as(dir, topic, partition, &offsets)
                .into_iter()
                .collect::<Option<Vec<_>>>()
        }) else {
            continue;
        };
        let epochs: BTreeSet<(i64, i16)> = stored.iter().map(|s| (s.producer_id, s.producer_epoch)).collect();
        let one_producer = stored
            .iter()
            .all(|s| s.producer_id == stored[0].producer_id && s.producer_id >= 0);
        if one_producer && epochs.len() == stored.len() {
            marked.push((value.to_string(), stored));
        }
    }
    for (value, _) in &marked {
        log.resent_by_client.insert(value.clone());
    }
    marked
}

/// Whether `name` is a segment's `.log` file: `<base>.log`, or `<base>.log.pending-<bytes>` for
/// an active segment whose predecessor's fsync background writeback has not done yet.
pub fn is_segment_log_file(name: &str) -> bool {
    name.ends_with(".log") || name.contains(".log.pending-")
}

/// The bytes of a partition's `.log` segments on one node, concatenated in base-offset order
/// (segment file names start with zero-padded base offsets, so name order is offset order).
pub fn partition_log_bytes(data_dir: &Path, topic: &str, partition: i32) -> Result<Vec<u8>> {
    let dir = data_dir.join(format!("{topic}-{partition}"));
    let mut segments: Vec<_> = std::fs::read_dir(&dir)
        .with_context(|| format!("read {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.file_name().is_some_and(|n| is_segment_log_file(&n.to_string_lossy())))
        .collect();
    segments.sort();
    let mut bytes = Vec::new();
    for s in segments {
        bytes.extend(std::fs::read(&s).with_context(|| format!("read {}", s.display()))?);
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_protocol::batch::test_support::{encode_batch, TestRecord};
    use sluice_protocol::batch::{BASE_SEQUENCE_OFFSET, PRODUCER_EPOCH_OFFSET, PRODUCER_ID_OFFSET};

    /// A one-record batch at `offset` from producer 7, as a leader stores it.
    fn batch(offset: i64, value: &str, epoch: i16, sequence: i32) -> Vec<u8> {
        let mut b = encode_batch(
            offset,
            0,
            &[TestRecord {
                key: None,
                value: Some(value.as_bytes()),
                timestamp_delta_ms: 0,
            }],
        );
        b[PRODUCER_ID_OFFSET..PRODUCER_ID_OFFSET + 8].copy_from_slice(&7i64.to_be_bytes());
        b[PRODUCER_EPOCH_OFFSET..PRODUCER_EPOCH_OFFSET + 2].copy_from_slice(&epoch.to_be_bytes());
        b[BASE_SEQUENCE_OFFSET..BASE_SEQUENCE_OFFSET + 4].copy_from_slice(&sequence.to_be_bytes());
        b
    }

    #[test]
    fn only_copies_under_different_epochs_count_as_resent_by_the_client() {
        let dir = tempfile::tempdir().unwrap();
        let partition_dir = dir.path().join("soak-0");
        std::fs::create_dir_all(&partition_dir).unwrap();
        // "a" stored under epoch 0 and, renumbered, under epoch 1; "b" twice under epoch 0 with
        // the same sequence (a duplicate the broker should have refused).
        let stored = [
            batch(0, "a", 0, 0),
            batch(1, "b", 0, 1),
            batch(2, "a", 1, 0),
            batch(3, "b", 0, 1),
        ]
        .concat();
        std::fs::write(partition_dir.join("00000000000000000000.log"), stored).unwrap();
        let mut log = FinalLog {
            high_watermarks: BTreeMap::from([(0, 4)]),
            records: BTreeMap::from([(
                0,
                vec![(0, "a".into()), (1, "b".into()), (2, "a".into()), (3, "b".into())],
            )]),
            resent_by_client: BTreeSet::new(),
        };
        let missing_node = dir.path().join("no-such-node");
        let marked = mark_resent_by_client(&mut log, &[missing_node, dir.path().to_path_buf()], "soak");
        assert_eq!(log.resent_by_client, BTreeSet::from(["a".to_string()]));
        assert_eq!(
            marked,
            vec![(
                "a".to_string(),
                vec![
                    StoredAs {
                        offset: 0,
                        producer_id: 7,
                        producer_epoch: 0,
                        sequence: 0
                    },
                    StoredAs {
                        offset: 2,
                        producer_id: 7,
                        producer_epoch: 1,
                        sequence: 0
                    },
                ]
            )]
        );
        let producer = crate::faults::ProducerOutcome {
            deliveries: Vec::new(),
            client_errors: Vec::new(),
            epoch_events: Vec::new(),
            stopped_early: None,
        };
        let e = crate::faults::check_acked_records_exactly_once(&log, &producer)
            .unwrap_err()
            .to_string();
        assert!(e.contains("value b appears 2 times") && !e.contains("value a "), "{e}");
    }
}

//! The final log: what the cluster holds once the workload stopped, read as a client sees it
//! (to the high watermark) and as each node stores it (segment bytes).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use crate::clients::{self, wait_until};

/// Every partition's records from offset 0 to its high watermark, read by a fresh consumer.
#[derive(Debug)]
pub struct FinalLog {
    pub high_watermarks: BTreeMap<i32, i64>,
    /// Per partition, (offset, value) in offset order.
    pub records: BTreeMap<i32, Vec<(i64, String)>>,
}

impl FinalLog {
    pub fn value_at(&self, partition: i32, offset: i64) -> Option<&str> {
        let records = self.records.get(&partition)?;
        let i = records.binary_search_by_key(&offset, |(o, _)| *o).ok()?;
        Some(records[i].1.as_str())
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
    let deadline = Instant::now() + timeout;
    let consumer: BaseConsumer = clients::consumer_config(bootstrap)
        .set("client.id", "sluice-faults-final-reader")
        .set("group.id", "sluice-faults-final-reader")
        .create()?;
    let mut high_watermarks = BTreeMap::new();
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
        high_watermarks.insert(p, hw);
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
    })
}

/// The bytes of a partition's `.log` segments on one node, concatenated in base-offset order
/// (segment file names are zero-padded base offsets, so name order is offset order).
pub fn partition_log_bytes(data_dir: &Path, topic: &str, partition: i32) -> Result<Vec<u8>> {
    let dir = data_dir.join(format!("{topic}-{partition}"));
    let mut segments: Vec<_> = std::fs::read_dir(&dir)
        .with_context(|| format!("read {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    segments.sort();
    let mut bytes = Vec::new();
    for s in segments {
        bytes.extend(std::fs::read(&s).with_context(|| format!("read {}", s.display()))?);
    }
    Ok(bytes)
}

//! `sluice consume T`: a topic's records to stdout, as `kcat -C` (and with `--group`, starting
//! at and committing a group's offsets, as `kcat -G` without joining the group).
//!
//! Each round sends one Fetch to each leader for its partitions, prints what came back in
//! offset order per partition, and (with a group) commits the new positions. Under
//! `read_committed` the records of aborted transactions are skipped with the aborted list the
//! broker returns, as Kafka's consumer does; control batches are never printed. Compressed
//! batches are decompressed within [`MAX_DECOMPRESSED_BYTES`].

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{BrokerId, FetchRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use serde_json::{json, Value};
use sluice_protocol::batch::{BatchHeader, BATCH_HEADER_LEN, LOG_OVERHEAD};
use sluice_protocol::control::{control_type, ControlType};
use sluice_protocol::records::{BatchRecords, RecordView};

use super::client::{CliError, Client, EARLIEST, LATEST};
use super::{ConsumeArgs, Format, OutputFormat};

const FETCH_VERSION: i16 = 12;

/// How long a leader may hold a Fetch while it has nothing new.
const FETCH_MAX_WAIT_MS: i32 = 500;
/// At most this much per response, and per partition in it.
const FETCH_MAX_BYTES: i32 = 16 * 1024 * 1024;
const PARTITION_MAX_BYTES: i32 = 1024 * 1024;
/// A compressed batch may decompress to at most this (16x the largest default batch).
const MAX_DECOMPRESSED_BYTES: usize = 16 * 1024 * 1024;

/// Fetch errors after which the leader is looked up again: NOT_LEADER_OR_FOLLOWER,
/// LEADER_NOT_AVAILABLE, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, NOT_ENOUGH_REPLICAS.
const STALE_LEADER: [i16; 5] = [6, 5, 74, 75, 19];
const OFFSET_OUT_OF_RANGE: i16 = 1;

/// One partition being read.
struct Position {
    leader: i32,
    offset: i64,
    /// The offset the last response said the readable log ends at (HW or LSO).
    end: i64,
}

/// One record as printed.
struct Printed<'a> {
    topic: &'a str,
    partition: i32,
    offset: i64,
    timestamp: i64,
    view: &'a RecordView<'a>,
}

pub async fn run(client: &mut Client, args: &ConsumeArgs, format: &OutputFormat) -> Result<(), CliError> {
    let topic = args.topic.as_str();
    let read_committed = args.isolation == "read_committed";
    let mut positions = start(client, args).await?;
    let coordinator = match &args.group {
        Some(group) => Some(super::group::coordinator(client, group).await?),
        None => None,
    };
    let template = match format {
        OutputFormat::Template(t) => Some(unescape(t)),
        OutputFormat::Report(Format::Table) => Some(match &args.key_delimiter {
            Some(d) => format!("%k{d}%s\n"),
            None => "%s\n".to_owned(),
        }),
        OutputFormat::Report(Format::Json) => None,
    };
    let mut printed = 0u64;
    let mut out = std::io::stdout().lock();
    loop {
        if args.count.is_some_and(|c| printed >= c) {
            break;
        }
        if args.exit_at_end && positions.values().all(|p| p.offset >= p.end) {
            break;
        }
        let mut by_leader: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
        for (partition, position) in &positions {
            by_leader.entry(position.leader).or_default().push(*partition);
        }
        let mut stale = false;
        let mut advanced = BTreeSet::new();
        for (leader, partitions) in by_leader {
            if args.count.is_some_and(|c| printed >= c) {
                break;
            }
            if leader < 0 {
                stale = true;
                continue;
            }
            let request = fetch_request(topic, &partitions, &positions, read_committed);
            let response = match client.call(leader, &request, FETCH_VERSION).await {
                Ok(response) => response,
                Err(_) => {
                    stale = true;
                    continue;
                }
            };
            client.check(leader, &format!("Fetch from {topic}"), response.error_code, None)?;
            for data in response.responses.iter().flat_map(|t| &t.partitions) {
                let Some(position) = positions.get_mut(&data.partition_index) else {
                    continue;
                };
                match data.error_code {
                    0 => {}
                    code if STALE_LEADER.contains(&code) => {
                        stale = true;
                        continue;
                    }
                    OFFSET_OUT_OF_RANGE => {
                        eprintln!(
                            "offset {} of {topic}-{} is out of range; starting again from the beginning",
                            position.offset, data.partition_index
                        );
                        let reset = client
                            .offsets(&[(topic.to_owned(), data.partition_index, leader)], EARLIEST)
                            .await?;
                        position.offset = reset.values().copied().next().unwrap_or(0);
                        continue;
                    }
                    code => {
                        return Err(client.error(
                            leader,
                            &format!("Fetch from {topic}-{}", data.partition_index),
                            code,
                            None,
                        ))
                    }
                }
                position.end = if read_committed && data.last_stable_offset >= 0 {
                    data.last_stable_offset
                } else {
                    data.high_watermark
                };
                let records = data.records.as_deref().unwrap_or_default();
                let aborted: Vec<(i64, i64)> = data
                    .aborted_transactions
                    .iter()
                    .flatten()
                    .map(|a| (a.first_offset, a.producer_id.0))
                    .collect();
                let before = position.offset;
                let mut stop = false;
                let mut batches = AbortFilter::new(aborted, read_committed);
                for batch in split_batches(records) {
                    let Ok(header) = BatchHeader::parse(batch) else { break };
                    if header.last_offset() < position.offset {
                        continue;
                    }
                    if !batches.keep(&header, batch) {
                        position.offset = header.last_offset() + 1;
                        continue;
                    }
                    let decoded = BatchRecords::decode(batch, MAX_DECOMPRESSED_BYTES).map_err(|e| {
                        CliError::Usage(format!(
                            "a batch of {topic}-{} at offset {} does not decode: {e}",
                            data.partition_index, header.base_offset
                        ))
                    })?;
                    for view in decoded.iter() {
                        let offset = header.base_offset + i64::from(view.offset_delta);
                        if offset < position.offset {
                            continue;
                        }
                        let record = Printed {
                            topic,
                            partition: data.partition_index,
                            offset,
                            timestamp: header.base_timestamp + view.timestamp_delta,
                            view: &view,
                        };
                        let text = match &template {
                            Some(t) => render(t, &record),
                            None => format!("{}\n", as_json(&record)),
                        };
                        if out.write_all(text.as_bytes()).is_err() {
                            // The reader went away (`| head`): stop quietly, as kcat does.
                            return Ok(());
                        }
                        position.offset = offset + 1;
                        printed += 1;
                        if args.count.is_some_and(|c| printed >= c) {
                            stop = true;
                            break;
                        }
                    }
                    if stop {
                        break;
                    }
                    position.offset = position.offset.max(header.last_offset() + 1);
                }
                if position.offset > before {
                    advanced.insert(data.partition_index);
                }
                if stop {
                    break;
                }
            }
        }
        let _ = out.flush();
        if let (Some(group), Some(coordinator), false) = (&args.group, coordinator, advanced.is_empty()) {
            let offsets = advanced
                .iter()
                .map(|p| ((topic.to_owned(), *p), positions[p].offset))
                .collect();
            super::group::commit_offsets(client, coordinator, group, &offsets).await?;
        }
        if stale {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            let leaders = client.partition_leaders(topic).await?;
            for (partition, position) in positions.iter_mut() {
                position.leader = leaders.get(partition).copied().unwrap_or(-1);
            }
        }
    }
    Ok(())
}

/// The partitions to read, each with its leader and starting offset.
async fn start(client: &mut Client, args: &ConsumeArgs) -> Result<BTreeMap<i32, Position>, CliError> {
    let topic = args.topic.as_str();
    let leaders = client.partition_leaders(topic).await?;
    let chosen: Vec<i32> = if args.partitions.is_empty() {
        leaders.keys().copied().collect()
    } else {
        for p in &args.partitions {
            if !leaders.contains_key(p) {
                return Err(CliError::Usage(format!("topic {topic} has no partition {p}")));
            }
        }
        args.partitions.clone()
    };
    let mut committed = BTreeMap::new();
    if let Some(group) = &args.group {
        let coordinator = super::group::coordinator(client, group).await?;
        committed = super::group::committed_offsets(client, coordinator, group).await?;
    }
    let needs: Vec<(String, i32, i32)> = chosen
        .iter()
        .filter(|p| !committed.contains_key(&(topic.to_owned(), **p)))
        .map(|p| (topic.to_owned(), *p, leaders[p]))
        .collect();
    let from: BTreeMap<(String, i32), i64> = match args.from.as_str() {
        "beginning" => client.offsets(&needs, EARLIEST).await?,
        "end" => client.offsets(&needs, LATEST).await?,
        other => match other.split_once(':') {
            Some(("offset", n)) => {
                let n = n.parse::<i64>().ok().filter(|n| *n >= 0).ok_or_else(|| {
                    CliError::Usage(format!("--from offset:N needs an offset of 0 or more, got {n:?}"))
                })?;
                needs.iter().map(|(t, p, _)| ((t.clone(), *p), n)).collect()
            }
            Some(("timestamp", ms)) => {
                let ms = ms.parse::<i64>().ok().filter(|ms| *ms >= 0).ok_or_else(|| {
                    CliError::Usage(format!("--from timestamp:MS needs milliseconds since 1970, got {ms:?}"))
                })?;
                let mut at = client.offsets(&needs, ms).await?;
                // No record at or after that time: start at the end.
                for (key, end) in client.offsets(&needs, LATEST).await? {
                    at.entry(key).or_insert(end);
                }
                at
            }
            _ => {
                return Err(CliError::Usage(format!(
                    "--from {other:?} is not beginning, end, offset:N or timestamp:MS"
                )))
            }
        },
    };
    let mut positions = BTreeMap::new();
    for p in chosen {
        let key = (topic.to_owned(), p);
        let offset = committed.get(&key).or_else(|| from.get(&key)).copied().ok_or_else(|| {
            CliError::Usage(format!(
                "the leader of {topic}-{p} did not say where to start; is it online? (`sluice topic describe {topic}`)"
            ))
        })?;
        positions.insert(
            p,
            Position {
                leader: leaders[&p],
                offset,
                end: i64::MAX,
            },
        );
    }
    Ok(positions)
}

fn fetch_request(
    topic: &str,
    partitions: &[i32],
    positions: &BTreeMap<i32, Position>,
    read_committed: bool,
) -> FetchRequest {
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(FETCH_MAX_WAIT_MS)
        .with_min_bytes(1)
        .with_max_bytes(FETCH_MAX_BYTES)
        .with_isolation_level(i8::from(read_committed))
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_string(topic.to_owned())))
            .with_partitions(
                partitions
                    .iter()
                    .map(|p| {
                        FetchPartition::default()
                            .with_partition(*p)
                            .with_current_leader_epoch(-1)
                            .with_fetch_offset(positions[p].offset)
                            .with_last_fetched_epoch(-1)
                            .with_log_start_offset(-1)
                            .with_partition_max_bytes(PARTITION_MAX_BYTES)
                    })
                    .collect(),
            )])
}

/// The batches in a Fetch response's records, whole ones only (a response may end inside one).
fn split_batches(mut records: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::from_fn(move || {
        if records.len() < BATCH_HEADER_LEN {
            return None;
        }
        let length = i32::from_be_bytes(records[8..12].try_into().ok()?);
        let total = usize::try_from(length).ok()?.checked_add(LOG_OVERHEAD)?;
        if total < BATCH_HEADER_LEN || total > records.len() {
            return None;
        }
        let (batch, rest) = records.split_at(total);
        records = rest;
        Some(batch)
    })
}

/// Kafka's consumer-side filtering of aborted transactions under `read_committed`: a
/// transactional batch is skipped when its producer has an aborted transaction that started at
/// or before the batch and whose ABORT marker has not been passed yet; control batches are
/// always skipped.
struct AbortFilter {
    /// Aborted transactions not yet reached, (first offset, producer id), by first offset.
    upcoming: Vec<(i64, i64)>,
    /// Producers whose aborted transaction is open at the current batch.
    open: BTreeSet<i64>,
    read_committed: bool,
}

impl AbortFilter {
    fn new(mut aborted: Vec<(i64, i64)>, read_committed: bool) -> AbortFilter {
        aborted.sort_unstable_by(|a, b| b.cmp(a));
        AbortFilter {
            upcoming: aborted,
            open: BTreeSet::new(),
            read_committed,
        }
    }

    /// Whether the records of `batch` are to be printed.
    fn keep(&mut self, header: &BatchHeader, batch: &[u8]) -> bool {
        while self
            .upcoming
            .last()
            .is_some_and(|(first, _)| *first <= header.last_offset())
        {
            let (_, producer) = self.upcoming.pop().expect("checked");
            self.open.insert(producer);
        }
        if header.is_control() {
            if control_type(batch) == Some(ControlType::Abort) {
                self.open.remove(&header.producer_id);
            }
            return false;
        }
        !(self.read_committed && header.is_transactional() && self.open.contains(&header.producer_id))
    }
}

/// `\n`, `\t` and `\\` in a template as the characters they name.
fn unescape(template: &str) -> String {
    template.replace("\\n", "\n").replace("\\t", "\t").replace("\\\\", "\\")
}

fn lossy(bytes: Option<&[u8]>) -> String {
    bytes
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .unwrap_or_default()
}

/// kcat's `-f` placeholders filled in for `record`.
fn render(template: &str, record: &Printed<'_>) -> String {
    let mut out = String::with_capacity(template.len() + record.view.value.map_or(0, <[u8]>::len));
    let mut chars = template.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push_str(record.topic),
            Some('p') => out.push_str(&record.partition.to_string()),
            Some('o') => out.push_str(&record.offset.to_string()),
            Some('T') => out.push_str(&record.timestamp.to_string()),
            Some('k') => out.push_str(&lossy(record.view.key)),
            Some('K') => out.push_str(&record.view.key.map_or(-1, |k| k.len() as i64).to_string()),
            Some('s') => out.push_str(&lossy(record.view.value)),
            Some('S') => out.push_str(&record.view.value.map_or(-1, |v| v.len() as i64).to_string()),
            Some('h') => {
                let headers: Vec<String> = record
                    .view
                    .header_pairs()
                    .map(|(k, v)| format!("{}={}", String::from_utf8_lossy(k), lossy(v)))
                    .collect();
                out.push_str(&headers.join(","));
            }
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

fn as_json(record: &Printed<'_>) -> Value {
    let text = |b: Option<&[u8]>| b.map_or(Value::Null, |b| json!(String::from_utf8_lossy(b)));
    let headers: Vec<Value> = record
        .view
        .header_pairs()
        .map(|(k, v)| json!({"key": String::from_utf8_lossy(k), "value": text(v)}))
        .collect();
    json!({
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp,
        "key": text(record.view.key),
        "value": text(record.view.value),
        "headers": headers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_are_split_whole_and_a_partial_last_one_is_left_out() {
        let batch = |len: usize| {
            let mut b = vec![0u8; len];
            b[8..12].copy_from_slice(&((len - LOG_OVERHEAD) as i32).to_be_bytes());
            b
        };
        let mut records = batch(70);
        records.extend(batch(100));
        records.extend(&batch(90)[..80]);
        let lengths: Vec<usize> = split_batches(&records).map(<[u8]>::len).collect();
        assert_eq!(lengths, [70, 100]);
        let mut lying = batch(70);
        lying[8..12].copy_from_slice(&i32::MAX.to_be_bytes());
        assert_eq!(split_batches(&lying).count(), 0);
        lying[8..12].copy_from_slice(&(-5i32).to_be_bytes());
        assert_eq!(split_batches(&lying).count(), 0);
    }

    #[test]
    fn templates_fill_kcats_placeholders() {
        assert_eq!(unescape("%k\\t%s\\n"), "%k\t%s\n");
    }
}

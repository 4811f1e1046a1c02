//! `sluice produce T`: lines from stdin as records, batched per partition and sent to each
//! partition's leader, as `kcat -P` does. Keys choose partitions as Kafka's Java client does
//! (murmur2 of the key), so keyed records land where every other producer would put them.
//!
//! It is a plain producer (not idempotent): a batch is sent again only after an error that
//! says it was not written (a leader change, too few replicas in sync).

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::ProduceRequest;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{Compression, RecordBatchEncoder, RecordEncodeOptions};
use serde_json::json;
use sluice_protocol::records::producer_record;
use tokio::sync::mpsc;

use super::client::{CliError, Client};
use super::{Format, ProduceArgs};

const PRODUCE_VERSION: i16 = 9;

/// At most this many records, or this many bytes of lines, go into one round of batches.
const MAX_ROUND_RECORDS: usize = 10_000;
const MAX_ROUND_BYTES: usize = 1024 * 1024;

/// A line longer than this is refused (Kafka's default `max.message.bytes` is 1 MiB).
const MAX_LINE_BYTES: usize = 1024 * 1024;

/// Lines read ahead of the batch being sent.
const LINE_QUEUE: usize = 10_000;

/// How long the leaders may wait for replication before answering a produce.
const PRODUCE_TIMEOUT_MS: i32 = 30_000;

/// Attempts per batch when the answer says it was not written, and the pause between them.
const ATTEMPTS: u32 = 6;
const RETRY_BACKOFF: Duration = Duration::from_millis(250);

/// Errors after which a batch was certainly not appended: NOT_LEADER_OR_FOLLOWER,
/// LEADER_NOT_AVAILABLE, NOT_ENOUGH_REPLICAS.
const RETRIABLE: [i16; 3] = [6, 5, 19];

pub async fn run(client: &mut Client, args: &ProduceArgs, format: Format) -> Result<(), CliError> {
    let acks: i16 = if args.acks == "1" { 1 } else { -1 };
    let compression = match args.compression.as_str() {
        "gzip" => Compression::Gzip,
        "snappy" => Compression::Snappy,
        "lz4" => Compression::Lz4,
        "zstd" => Compression::Zstd,
        _ => Compression::None,
    };
    let headers = args
        .headers
        .iter()
        .map(|h| {
            h.split_once('=')
                .map(|(k, v)| (StrBytes::from_string(k.to_owned()), Some(Bytes::from(v.to_owned()))))
                .ok_or_else(|| CliError::Usage(format!("--header expects KEY=VALUE, got {h:?}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut leaders = leaders(client, &args.topic).await?;
    if let Some(p) = args.partition {
        if p < 0 || p as usize >= leaders.len() {
            return Err(CliError::Usage(format!(
                "topic {} has partitions 0 to {}; --partition {p} is not one of them",
                args.topic,
                leaders.len() - 1
            )));
        }
    }

    let (lines, mut queue) = mpsc::channel::<Result<Vec<u8>, String>>(LINE_QUEUE);
    std::thread::spawn(move || read_lines(lines));
    let mut keyless_round = 0usize;
    while let Some(first) = queue.recv().await {
        let mut round = vec![first.map_err(CliError::Usage)?];
        let mut bytes = round[0].len();
        while round.len() < MAX_ROUND_RECORDS && bytes < MAX_ROUND_BYTES {
            match queue.try_recv() {
                Ok(line) => {
                    let line = line.map_err(CliError::Usage)?;
                    bytes += line.len();
                    round.push(line);
                }
                Err(_) => break,
            }
        }
        // Each line's key, value and partition, in input order.
        let records: Vec<(Option<&[u8]>, &[u8], i32)> = round
            .iter()
            .map(|line| {
                let (key, value) = split_key(line, args.key_delimiter.as_deref());
                let partition = match (args.partition, key) {
                    (Some(p), _) => p,
                    (None, Some(key)) => key_partition(key, leaders.len()),
                    (None, None) => (keyless_round % leaders.len()) as i32,
                };
                (key, value, partition)
            })
            .collect();
        keyless_round = keyless_round.wrapping_add(1);
        let mut batches: BTreeMap<i32, Vec<kafka_protocol::records::Record>> = BTreeMap::new();
        let now = now_ms();
        for (key, value, partition) in &records {
            let batch = batches.entry(*partition).or_default();
            let mut record = producer_record(
                batch.len() as i64,
                now,
                key.map(Bytes::copy_from_slice),
                Some(Bytes::copy_from_slice(value)),
            );
            record.headers.extend(headers.iter().cloned());
            batch.push(record);
        }
        let mut encoded = BTreeMap::new();
        for (partition, batch) in &batches {
            let mut buf = BytesMut::new();
            let options = RecordEncodeOptions {
                version: 2,
                compression,
            };
            RecordBatchEncoder::encode(&mut buf, batch.iter(), &options)
                .map_err(|e| CliError::Usage(format!("cannot encode a batch for partition {partition}: {e}")))?;
            encoded.insert(*partition, buf.freeze());
        }
        let base_offsets = send(client, &args.topic, &mut leaders, encoded, acks).await?;
        if args.verbose {
            let mut next: BTreeMap<i32, i64> = base_offsets;
            let mut out = std::io::stdout().lock();
            for (_, _, partition) in &records {
                let offset = next.get_mut(partition).expect("every batch was answered");
                let line = match format {
                    Format::Json => json!({"topic": args.topic, "partition": partition, "offset": *offset}).to_string(),
                    Format::Table => format!("partition {partition} offset {offset}"),
                };
                *offset += 1;
                if writeln!(out, "{line}").is_err() {
                    return Ok(());
                }
            }
        }
    }
    Ok(())
}

/// Each partition's leader (-1: none right now), indexed by partition.
async fn leaders(client: &mut Client, topic: &str) -> Result<Vec<i32>, CliError> {
    let by_partition = client.partition_leaders(topic).await?;
    let mut leaders = vec![-1; by_partition.len()];
    for (partition, leader) in by_partition {
        if let Some(slot) = usize::try_from(partition).ok().and_then(|i| leaders.get_mut(i)) {
            *slot = leader;
        }
    }
    if leaders.is_empty() {
        return Err(CliError::Usage(format!("topic {topic:?} has no partitions")));
    }
    Ok(leaders)
}

/// Sends each partition's batch to its leader; the base offset each was written at.
async fn send(
    client: &mut Client,
    topic: &str,
    leaders: &mut Vec<i32>,
    mut pending: BTreeMap<i32, Bytes>,
    acks: i16,
) -> Result<BTreeMap<i32, i64>, CliError> {
    let mut written = BTreeMap::new();
    let mut last_error = None;
    for attempt in 0..ATTEMPTS {
        if attempt > 0 {
            tokio::time::sleep(RETRY_BACKOFF).await;
            *leaders = self::leaders(client, topic).await?;
        }
        let mut by_leader: BTreeMap<i32, Vec<(i32, Bytes)>> = BTreeMap::new();
        for (partition, batch) in &pending {
            let leader = leaders.get(*partition as usize).copied().unwrap_or(-1);
            by_leader.entry(leader).or_default().push((*partition, batch.clone()));
        }
        for (leader, batches) in by_leader {
            if leader < 0 {
                last_error = Some(format!(
                    "partitions {:?} have no leader",
                    batches.iter().map(|b| b.0).collect::<Vec<_>>()
                ));
                continue;
            }
            let request = ProduceRequest::default()
                .with_acks(acks)
                .with_timeout_ms(PRODUCE_TIMEOUT_MS)
                .with_topic_data(vec![TopicProduceData::default()
                    .with_name(kafka_protocol::messages::TopicName(StrBytes::from_string(
                        topic.to_owned(),
                    )))
                    .with_partition_data(
                        batches
                            .into_iter()
                            .map(|(p, records)| {
                                PartitionProduceData::default()
                                    .with_index(p)
                                    .with_records(Some(records))
                            })
                            .collect(),
                    )]);
            let response = match client.call(leader, &request, PRODUCE_VERSION).await {
                Ok(response) => response,
                Err(e) => {
                    last_error = Some(e.to_string());
                    continue;
                }
            };
            for answer in response.responses.iter().flat_map(|t| &t.partition_responses) {
                match answer.error_code {
                    0 => {
                        pending.remove(&answer.index);
                        written.insert(answer.index, answer.base_offset);
                    }
                    code if RETRIABLE.contains(&code) => {
                        let error = client.error(leader, &format!("Produce to {topic}-{}", answer.index), code, None);
                        last_error = Some(error.to_string());
                    }
                    code => {
                        return Err(client.error(
                            leader,
                            &format!("Produce to {topic}-{}", answer.index),
                            code,
                            answer.error_message.as_deref(),
                        ))
                    }
                }
            }
        }
        if pending.is_empty() {
            return Ok(written);
        }
    }
    Err(CliError::Usage(format!(
        "gave up on partitions {:?} of {topic} after {ATTEMPTS} attempts: {}",
        pending.keys().collect::<Vec<_>>(),
        last_error.unwrap_or_default()
    )))
}

/// Reads stdin line by line (without the newline) into `lines` until it ends; a line longer
/// than [`MAX_LINE_BYTES`] or a read error ends it with an error.
fn read_lines(lines: mpsc::Sender<Result<Vec<u8>, String>>) {
    let stdin = std::io::stdin();
    let mut reader = stdin.lock();
    loop {
        let mut line = Vec::new();
        let read = std::io::Read::take(&mut reader, MAX_LINE_BYTES as u64 + 1).read_until(b'\n', &mut line);
        let item = match read {
            Ok(0) => return,
            Ok(_) => {
                if line.last() == Some(&b'\n') {
                    line.pop();
                    Ok(line)
                } else if line.len() > MAX_LINE_BYTES {
                    Err(format!(
                        "a line of stdin is longer than {MAX_LINE_BYTES} bytes; records are at most that"
                    ))
                } else {
                    Ok(line)
                }
            }
            Err(e) => Err(format!("cannot read stdin: {e}")),
        };
        let stop = item.is_err();
        if lines.blocking_send(item).is_err() || stop {
            return;
        }
    }
}

/// `line` split at the first `delimiter` into key and value; no delimiter (or none found):
/// no key.
fn split_key<'a>(line: &'a [u8], delimiter: Option<&str>) -> (Option<&'a [u8]>, &'a [u8]) {
    let Some(delimiter) = delimiter.map(str::as_bytes).filter(|d| !d.is_empty()) else {
        return (None, line);
    };
    match line.windows(delimiter.len()).position(|w| w == delimiter) {
        Some(at) => (Some(&line[..at]), &line[at + delimiter.len()..]),
        None => (None, line),
    }
}

/// The partition Kafka's default partitioner gives `key`: murmur2, made positive, modulo.
fn key_partition(key: &[u8], partitions: usize) -> i32 {
    ((murmur2(key) & 0x7fff_ffff) as usize % partitions) as i32
}

/// Kafka's `Utils.murmur2` (seed 0x9747b28c), the hash its partitioner uses.
fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let mut h = SEED ^ data.len() as u32;
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let rest = chunks.remainder();
    if rest.len() >= 3 {
        h ^= u32::from(rest[2]) << 16;
    }
    if rest.len() >= 2 {
        h ^= u32::from(rest[1]) << 8;
    }
    if !rest.is_empty() {
        h ^= u32::from(rest[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_matches_kafkas_utils() {
        // Values from Kafka's UtilsTest.testMurmur2.
        assert_eq!(murmur2(b"21"), -973932308);
        assert_eq!(murmur2(b"foobar"), -790332482);
        assert_eq!(murmur2(b"a-little-bit-long-string"), -985981536);
        assert_eq!(murmur2(b"a-little-bit-longer-string"), -1486304829);
        assert_eq!(murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8"), -58897971);
        assert_eq!(murmur2(b"abc"), 479470107);
    }

    #[test]
    fn keys_split_at_the_first_delimiter_only() {
        assert_eq!(split_key(b"k1:v:1", Some(":")), (Some(&b"k1"[..]), &b"v:1"[..]));
        assert_eq!(split_key(b"no-key", Some(":")), (None, &b"no-key"[..]));
        assert_eq!(split_key(b"k::v", Some("::")), (Some(&b"k"[..]), &b"v"[..]));
        assert_eq!(split_key(b"a:b", None), (None, &b"a:b"[..]));
        assert!((0..12).contains(&key_partition(b"customer-7", 12)));
    }
}

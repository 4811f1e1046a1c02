//! Produce: validate each partition's record batches, stamp offsets, append them as received.
//! Records are decoded only for compacted topics (every record needs a key), and then within
//! the topic's `max.message.bytes`; the only copy is from the request buffer into the batch we
//! patch.
//!
//! With `acks=all` the response waits (Kafka's delayed produce) until the high watermark
//! passes every appended batch, woken by high-watermark and leadership changes, or until the
//! request's timeout.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::FutureExt;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse};
use sluice_protocol::batch::{validate_batches, BatchError, BatchIter};
use sluice_protocol::records::BatchRecords;
use sluice_protocol::ResponseBody;

use super::{str_bytes, Reply};
use crate::broker::Broker;
use crate::clock::now_ms;
use crate::metadata::image::TopicImage;
use crate::partition::AppendOutcome;
use crate::purgatory::DelayedProduce;
use crate::topic_config;

/// Produce v13 names topics by id; earlier versions by name.
const FIRST_VERSION_WITH_TOPIC_IDS: i16 = 13;

pub fn handle(broker: &Broker, request: ProduceRequest, version: i16) -> Reply {
    let image = broker.metadata.image();
    let now = now_ms();
    let acks = request.acks;
    let mut waits: Vec<(usize, usize, DelayedProduce)> = Vec::new();
    let responses: Vec<TopicProduceResponse> = request
        .topic_data
        .into_iter()
        .enumerate()
        .map(|(topic_index, topic_data)| {
            let topic = if version >= FIRST_VERSION_WITH_TOPIC_IDS {
                image.topic_by_id(&topic_data.topic_id)
            } else {
                image.topic(&topic_data.name.0)
            };
            let partition_responses = topic_data
                .partition_data
                .into_iter()
                .enumerate()
                .map(|(partition_index, data)| {
                    let result = match topic {
                        None if version >= FIRST_VERSION_WITH_TOPIC_IDS => {
                            Err((ResponseError::UnknownTopicId, "unknown topic id".to_string()))
                        }
                        None => Err((ResponseError::UnknownTopicOrPartition, "unknown topic".to_string())),
                        Some(_) if !(-1..=1).contains(&acks) => Err((
                            ResponseError::InvalidRequiredAcks,
                            format!("acks={acks} is invalid; use 0, 1 or -1 (all)"),
                        )),
                        Some(topic) => append(broker, topic, data.index, data.records, acks, now),
                    };
                    let result = result.map(|(appended, wait)| {
                        if let Some(wait) = wait {
                            waits.push((topic_index, partition_index, wait));
                        }
                        appended
                    });
                    partition_response(data.index, result)
                })
                .collect();
            TopicProduceResponse::default()
                .with_name(topic_data.name)
                .with_topic_id(topic_data.topic_id)
                .with_partition_responses(partition_responses)
        })
        .collect();
    if acks == 0 {
        return Reply::None;
    }
    if waits.is_empty() {
        return Reply::Now(ResponseBody::Produce(
            ProduceResponse::default().with_responses(responses),
        ));
    }
    let deadline = tokio::time::Instant::now() + Duration::from_millis(request.timeout_ms.max(0) as u64);
    let mut responses = responses;
    Reply::Later(
        async move {
            for (topic_index, partition_index, wait) in waits {
                if let Err(error) = wait.wait(deadline).await {
                    let response = &mut responses[topic_index].partition_responses[partition_index];
                    *response = partition_response(response.index, Err(error));
                }
            }
            ResponseBody::Produce(ProduceResponse::default().with_responses(responses))
        }
        .boxed(),
    )
}

/// Offsets assigned by a successful append.
struct Appended {
    base_offset: i64,
    log_append_time_ms: i64,
    log_start_offset: i64,
}

fn append(
    broker: &Broker,
    topic: &TopicImage,
    index: i32,
    records: Option<Bytes>,
    acks: i16,
    now: i64,
) -> Result<(Appended, Option<DelayedProduce>), (ResponseError, String)> {
    let (partition, registration) = broker.replicas.leader_partition(topic, index).map_err(|error| {
        let message = match error {
            ResponseError::UnknownTopicOrPartition => format!("{} has no partition {index}", topic.name),
            _ => "this broker is not the partition leader".to_string(),
        };
        (error, message)
    })?;
    let min_isr =
        topic_config::min_insync_replicas(&topic.configs, &broker.config.overrides, registration.replicas.len());
    if acks == -1 {
        let isr = partition.isr_size();
        if isr < min_isr {
            return Err((
                ResponseError::NotEnoughReplicas,
                format!("{isr} in-sync replica(s), fewer than min.insync.replicas={min_isr}; the write was refused"),
            ));
        }
    }
    let records = records.filter(|r| !r.is_empty()).ok_or_else(|| {
        (
            ResponseError::CorruptMessage,
            "the produce request carries no record batch".to_string(),
        )
    })?;
    validate_batches(&records).map_err(|e| batch_error(&e))?;
    check_batch_headers(&records, &timestamp_limits(broker, topic), now)?;
    let cleanup_policy = topic_config::effective_value("cleanup.policy", &topic.configs, &broker.config.overrides);
    if topic_config::cleanup_policy_includes(&cleanup_policy, "compact") {
        let max_message_bytes = topic_config::max_message_bytes(&topic.configs, &broker.config.overrides);
        reject_keyless_records(&records, max_message_bytes as usize)
            .map_err(|(error, message)| (error, format!("{message} (topic {} is compacted)", topic.name)))?;
    }
    let mut batches = BytesMut::from(&records[..]);
    let leader_epoch = partition.leader_epoch();
    let (appended, required_offset) = match partition.append_as_leader(&mut batches, now)? {
        AppendOutcome::Appended(info) => (
            Appended {
                base_offset: info.base_offset,
                log_append_time_ms: info.log_append_time_ms,
                log_start_offset: info.log_start_offset,
            },
            info.last_offset + 1,
        ),
        // The retried batch is committed once the high watermark passes its first offset
        // (followers copy whole batches).
        AppendOutcome::Duplicate { base_offset } => (
            Appended {
                base_offset,
                log_append_time_ms: -1,
                log_start_offset: partition.log_start_offset(),
            },
            base_offset + 1,
        ),
    };
    let wait = (acks == -1 && partition.high_watermark() < required_offset).then(|| DelayedProduce {
        partition,
        required_offset,
        leader_epoch,
        min_insync_replicas: min_isr,
    });
    Ok((appended, wait))
}

fn partition_response(index: i32, result: Result<Appended, (ResponseError, String)>) -> PartitionProduceResponse {
    let response = PartitionProduceResponse::default().with_index(index);
    match result {
        Ok(a) => response
            .with_base_offset(a.base_offset)
            .with_log_append_time_ms(a.log_append_time_ms)
            .with_log_start_offset(a.log_start_offset),
        Err((error, message)) => response
            .with_error_code(error.code())
            .with_base_offset(-1)
            .with_log_append_time_ms(-1)
            .with_log_start_offset(-1)
            .with_error_message(Some(str_bytes(message))),
    }
}

/// The Kafka error a refused batch is answered with, and its reason.
fn batch_error(error: &BatchError) -> (ResponseError, String) {
    (
        ResponseError::try_from_code(error.kafka_error_code()).unwrap_or(ResponseError::CorruptMessage),
        error.to_string(),
    )
}

/// Compaction keeps the latest record per key, so a compacted topic refuses records without
/// one, as Kafka does. This is the one produce path that decodes records, each batch's
/// decompressing to at most `max_decompressed_bytes` (the topic's `max.message.bytes`);
/// topics that are not compacted never pay for it. `records` passed [`validate_batches`].
fn reject_keyless_records(records: &[u8], max_decompressed_bytes: usize) -> Result<(), (ResponseError, String)> {
    for (_, range) in BatchIter::new(records) {
        let batch = BatchRecords::decode(&records[range], max_decompressed_bytes).map_err(|e| batch_error(&e))?;
        if batch.iter().any(|r| r.key.is_none()) {
            return Err((
                ResponseError::InvalidRecord,
                "a record has no key; compacted topics only accept keyed records".to_string(),
            ));
        }
    }
    Ok(())
}

/// How far CreateTime timestamps may stray from the broker's clock
/// (`message.timestamp.before.max.ms` / `message.timestamp.after.max.ms`); `None` for
/// LogAppendTime topics, whose timestamps the broker sets itself.
struct TimestampLimits {
    before_ms: i64,
    after_ms: i64,
}

fn timestamp_limits(broker: &Broker, topic: &TopicImage) -> Option<TimestampLimits> {
    let value = |name: &str| topic_config::effective_value(name, &topic.configs, &broker.config.overrides);
    if value("message.timestamp.type") == "LogAppendTime" {
        return None;
    }
    Some(TimestampLimits {
        before_ms: value("message.timestamp.before.max.ms").parse().unwrap_or(i64::MAX),
        after_ms: value("message.timestamp.after.max.ms").parse().unwrap_or(i64::MAX),
    })
}

/// Header-only checks of each batch: no control batches from clients, and CreateTime
/// timestamps within the topic's limits. Timestamps are judged by the batch's first and
/// largest timestamps, so no record is decoded.
fn check_batch_headers(
    records: &[u8],
    limits: &Option<TimestampLimits>,
    now: i64,
) -> Result<(), (ResponseError, String)> {
    for (header, _) in BatchIter::new(records) {
        if header.is_control() {
            return Err((
                ResponseError::InvalidRecord,
                "clients may not produce control batches".to_string(),
            ));
        }
        let Some(limits) = limits else { continue };
        let too_late = header.max_timestamp >= 0 && header.max_timestamp.saturating_sub(now) > limits.after_ms;
        let too_early = header.base_timestamp >= 0 && now.saturating_sub(header.base_timestamp) > limits.before_ms;
        if too_late || too_early {
            return Err((
                ResponseError::InvalidTimestamp,
                format!(
                    "batch timestamps {}..{} are outside message.timestamp.before.max.ms={} / after.max.ms={} of the broker clock {now}",
                    header.base_timestamp, header.max_timestamp, limits.before_ms, limits.after_ms
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions};
    use sluice_protocol::batch::test_support::encode_simple_batch;
    use sluice_protocol::batch::{CRC_COVERED_FROM, CRC_OFFSET, RECORDS_COUNT_OFFSET};
    use sluice_protocol::records::producer_record;

    /// One zstd batch of records with `keys` and 1000-byte values, as a client encodes it.
    fn zstd_batch(keys: &[Option<&str>]) -> Vec<u8> {
        let records: Vec<Record> = keys
            .iter()
            .enumerate()
            .map(|(i, key)| {
                let key = key.map(|k| Bytes::copy_from_slice(k.as_bytes()));
                producer_record(i as i64, NOW, key, Some(Bytes::from(vec![b'v'; 1000])))
            })
            .collect();
        let mut buf = BytesMut::new();
        let options = RecordEncodeOptions {
            version: 2,
            compression: Compression::Zstd,
        };
        RecordBatchEncoder::encode(&mut buf, records.iter(), &options).unwrap();
        buf.to_vec()
    }

    #[test]
    fn compacted_topic_checks_answer_with_kafkas_error_codes() {
        let keyed = zstd_batch(&[Some("a"), Some("b")]);
        assert!(reject_keyless_records(&keyed, 1_000_000).is_ok());
        let mut blob = keyed.clone();
        blob.extend_from_slice(&zstd_batch(&[Some("c"), None]));
        assert_eq!(
            reject_keyless_records(&blob, 1_000_000).unwrap_err().0,
            ResponseError::InvalidRecord
        );
        // Two 1000-byte values do not fit in 1500 bytes once decompressed.
        let (error, message) = reject_keyless_records(&keyed, 1_500).unwrap_err();
        assert_eq!(error, ResponseError::RecordListTooLarge, "{message}");
        // A record count the decompressed records do not hold.
        let mut lying = keyed.clone();
        lying[RECORDS_COUNT_OFFSET..RECORDS_COUNT_OFFSET + 4].copy_from_slice(&1i32.to_be_bytes());
        let crc = crc32c::crc32c(&lying[CRC_COVERED_FROM..]);
        lying[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
        assert_eq!(
            reject_keyless_records(&lying, 1_000_000).unwrap_err().0,
            ResponseError::CorruptMessage
        );
    }

    const NOW: i64 = 1_800_000_000_000;

    #[test]
    fn timestamps_beyond_the_topic_limits_are_invalid() {
        let limits = Some(TimestampLimits {
            before_ms: 60_000,
            after_ms: 3_600_000,
        });
        assert!(check_batch_headers(&encode_simple_batch(3, 10, NOW), &limits, NOW).is_ok());
        let future = check_batch_headers(&encode_simple_batch(3, 10, NOW + 3_700_000), &limits, NOW).unwrap_err();
        assert_eq!(future.0, ResponseError::InvalidTimestamp);
        let past = check_batch_headers(&encode_simple_batch(3, 10, NOW - 120_000), &limits, NOW).unwrap_err();
        assert_eq!(past.0, ResponseError::InvalidTimestamp);
        // LogAppendTime topics take any client timestamp.
        assert!(check_batch_headers(&encode_simple_batch(3, 10, NOW + 3_700_000), &None, NOW).is_ok());
    }
}

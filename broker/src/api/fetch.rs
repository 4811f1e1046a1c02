//! Fetch: stored batches served as stored, with Kafka's long poll. A fetch that finds fewer
//! than `min_bytes` waits until a partition's high watermark moves (never by polling) or
//! `max_wait_ms` passes, then reads again.
//!
//! A fetch with a replica id is a follower's: its fetch offset reports its log end offset to
//! the leader (which may advance the high watermark or bring it back into the ISR), it reads
//! up to the log end rather than the high watermark, and it waits for the log to grow.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::FutureExt;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::fetch_request::FetchPartition;
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::{FetchRequest, FetchResponse, TopicName};
use sluice_protocol::ResponseBody;
use tokio::sync::watch;
use tokio::time::Instant;
use uuid::Uuid;

use super::Reply;
use crate::broker::now_ms;
use crate::broker::Broker;
use crate::log::LogError;
use crate::partition::{Partition, ReadBound};

/// Fetch v13 names topics by id; earlier versions by name.
const FIRST_VERSION_WITH_TOPIC_IDS: i16 = 13;
/// Fetch v15 moved the replica id into `replica_state`.
const FIRST_VERSION_WITH_REPLICA_STATE: i16 = 15;
/// Kafka's `READ_COMMITTED` isolation level.
const READ_COMMITTED: i8 = 1;
/// Longest long-poll honoured, so a request cannot pin a connection indefinitely.
const MAX_WAIT_CAP: Duration = Duration::from_secs(60);

/// One requested partition, resolved against the image once per request.
struct Target {
    fetch_offset: i64,
    partition_max_bytes: usize,
    current_leader_epoch: i32,
    index: i32,
    partition: Result<Arc<Partition>, ResponseError>,
}

struct TopicTargets {
    name: TopicName,
    topic_id: Uuid,
    partitions: Vec<Target>,
}

/// The request, resolved, plus how to shape the response.
struct FetchPlan {
    topics: Vec<TopicTargets>,
    max_bytes: usize,
    min_bytes: usize,
    read_committed: bool,
    by_topic_id: bool,
    /// A follower's fetch: read to the log end.
    from_follower: bool,
}

pub fn handle(broker: &Arc<Broker>, request: FetchRequest, version: i16) -> Reply {
    let plan = resolve(broker, &request, version);
    // Subscribe before the first read so a write between the read and the wait is not missed.
    let mut watchers: Vec<watch::Receiver<i64>> = plan
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter())
        .filter_map(|p| p.partition.as_ref().ok())
        .map(|p| {
            if plan.from_follower {
                p.watch_log_end_offset()
            } else {
                p.watch_high_watermark()
            }
        })
        .collect();
    let (response, bytes, had_error) = read(&plan);
    let max_wait = Duration::from_millis(request.max_wait_ms.max(0) as u64).min(MAX_WAIT_CAP);
    if bytes >= plan.min_bytes || had_error || max_wait.is_zero() || watchers.is_empty() {
        return Reply::Now(ResponseBody::Fetch(response));
    }
    let deadline = Instant::now() + max_wait;
    Reply::Later(
        async move {
            loop {
                let changed = futures::future::select_all(watchers.iter_mut().map(|w| w.changed().boxed()));
                let woken = tokio::time::timeout_at(deadline, changed).await;
                let (response, bytes, had_error) = read(&plan);
                let partition_gone = matches!(woken, Ok((Err(_), _, _)));
                if woken.is_err() || bytes >= plan.min_bytes || had_error || partition_gone {
                    return ResponseBody::Fetch(response);
                }
            }
        }
        .boxed(),
    )
}

fn resolve(broker: &Arc<Broker>, request: &FetchRequest, version: i16) -> FetchPlan {
    let image = broker.metadata.image();
    let by_topic_id = version >= FIRST_VERSION_WITH_TOPIC_IDS;
    let replica_id = if version >= FIRST_VERSION_WITH_REPLICA_STATE {
        request.replica_state.replica_id.0
    } else {
        request.replica_id.0
    };
    let from_follower = replica_id >= 0;
    let now = now_ms();
    let topics = request
        .topics
        .iter()
        .map(|t| {
            let topic = if by_topic_id {
                image.topic_by_id(&t.topic_id)
            } else {
                image.topic(&t.topic.0)
            };
            let unknown = if by_topic_id {
                ResponseError::UnknownTopicId
            } else {
                ResponseError::UnknownTopicOrPartition
            };
            let partitions = t
                .partitions
                .iter()
                .map(|p: &FetchPartition| Target {
                    fetch_offset: p.fetch_offset,
                    partition_max_bytes: p.partition_max_bytes.max(0) as usize,
                    current_leader_epoch: p.current_leader_epoch,
                    index: p.partition,
                    partition: match topic {
                        None => Err(unknown),
                        Some(topic) => {
                            broker
                                .replicas
                                .leader_partition(topic, p.partition)
                                .and_then(|(partition, _)| {
                                    if from_follower {
                                        partition.check_leader_epoch(p.current_leader_epoch)?;
                                        let rejoin =
                                            partition.record_follower_fetch(replica_id, p.fetch_offset, now)?;
                                        if let Some(command) = rejoin {
                                            broker.propose_isr_change(partition.clone(), command);
                                        }
                                    }
                                    Ok(partition)
                                })
                        }
                    },
                })
                .collect();
            TopicTargets {
                name: t.topic.clone(),
                topic_id: t.topic_id,
                partitions,
            }
        })
        .collect();
    FetchPlan {
        topics,
        max_bytes: request.max_bytes.max(0) as usize,
        min_bytes: request.min_bytes.max(0) as usize,
        read_committed: request.isolation_level == READ_COMMITTED,
        by_topic_id,
        from_follower,
    }
}

/// Reads every partition of the plan; returns the response, its record bytes and whether
/// any partition reported an error (which, as in Kafka, ends the long poll).
fn read(plan: &FetchPlan) -> (FetchResponse, usize, bool) {
    let bound = if plan.from_follower {
        ReadBound::LogEnd
    } else {
        ReadBound::HighWatermark
    };
    let mut remaining = plan.max_bytes;
    let mut total = 0;
    let mut had_error = false;
    let responses = plan
        .topics
        .iter()
        .map(|topic| {
            let partitions = topic
                .partitions
                .iter()
                .map(|target| {
                    let data = read_partition(target, remaining, total == 0, plan.read_committed, bound);
                    let len = data.records.as_ref().map_or(0, Bytes::len);
                    remaining = remaining.saturating_sub(len);
                    total += len;
                    had_error |= data.error_code != 0;
                    data
                })
                .collect();
            let response = FetchableTopicResponse::default().with_partitions(partitions);
            if plan.by_topic_id {
                response.with_topic_id(topic.topic_id)
            } else {
                response.with_topic(topic.name.clone())
            }
        })
        .collect();
    (FetchResponse::default().with_responses(responses), total, had_error)
}

fn read_partition(
    target: &Target,
    remaining: usize,
    min_one_message: bool,
    read_committed: bool,
    bound: ReadBound,
) -> PartitionData {
    let data = PartitionData::default()
        .with_partition_index(target.index)
        .with_aborted_transactions(read_committed.then(Vec::new))
        .with_records(Some(Bytes::new()));
    let failed = |error: ResponseError, hw: i64, log_start: i64| {
        data.clone()
            .with_error_code(error.code())
            .with_high_watermark(hw)
            .with_last_stable_offset(hw)
            .with_log_start_offset(log_start)
    };
    let partition = match &target.partition {
        Ok(p) => p,
        Err(error) => return failed(*error, -1, -1),
    };
    if let Err(error) = partition.check_leader_epoch(target.current_leader_epoch) {
        return failed(error, partition.high_watermark(), partition.log_start_offset());
    }
    let max_bytes = target.partition_max_bytes.min(remaining);
    match partition.read(target.fetch_offset, max_bytes, min_one_message, bound) {
        Ok(outcome) => data
            .with_high_watermark(outcome.high_watermark)
            .with_last_stable_offset(outcome.high_watermark)
            .with_log_start_offset(outcome.log_start_offset)
            .with_records(Some(outcome.records)),
        Err(e) => {
            let error = match e {
                LogError::OffsetOutOfRange { .. } => ResponseError::OffsetOutOfRange,
                ref other => {
                    tracing::error!(topic = %partition.topic, partition = target.index, error = %other, "fetch read failed");
                    ResponseError::try_from_code(other.kafka_error_code()).unwrap_or(ResponseError::KafkaStorageError)
                }
            };
            failed(error, partition.high_watermark(), partition.log_start_offset())
        }
    }
}

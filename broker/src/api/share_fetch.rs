//! ShareFetch (KIP-932): a share group member's fetch. The request moves the member's share
//! session (`share/session.rs`), acknowledges records it holds, and acquires records for it
//! from each session partition this node leads (`share/partition.rs`): the stored batches are
//! returned as they are, with the offset ranges acquired (`AcquiredRecords`); the client
//! delivers only those. With nothing to hand out it waits up to MaxWaitMs for new records or a
//! lapsed lock.
//!
//! Needs READ on the group (GROUP_AUTHORIZATION_FAILED) and on each topic
//! (TOPIC_AUTHORIZATION_FAILED for its partitions).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::share_fetch_response::{
    AcquiredRecords, LeaderIdAndEpoch, NodeEndpoint, PartitionData, ShareFetchableTopicResponse,
};
use kafka_protocol::messages::BrokerId;
use kafka_protocol::messages::{ShareFetchRequest, ShareFetchResponse};
use kafka_protocol::protocol::StrBytes;
use sluice_protocol::batch::BatchIter;
use uuid::Uuid;

use super::{str_bytes, RequestContext};
use crate::broker::Broker;
use crate::clock::now_ms;
use crate::config::group_configs::{self, ShareAutoOffsetReset};
use crate::log::txn_index::AbortedTxn;
use crate::metadata::acls::{AclOperation, ResourceType};
use crate::metadata::image::MetadataImage;
use crate::partition::{Partition, ReadBound};
use crate::share::partition::{Acquired, BatchSpan, ShareLimits, SharePartition, RENEW};
use crate::share::session::SessionStep;
use crate::share::state::ShareState;
use crate::share::{SharePartitionKey, ShareSlot};

/// One partition's outcome in a ShareFetch or ShareAcknowledge answer.
#[derive(Default)]
pub(super) struct PartitionOutcome {
    pub error: Option<(ResponseError, String)>,
    pub ack_error: Option<(ResponseError, String)>,
    pub leader: Option<(i32, i32)>,
    pub records: Option<Bytes>,
    pub acquired: Vec<Acquired>,
    /// The request acknowledged records of this partition: answered even with nothing else.
    pub acked: bool,
}

impl PartitionOutcome {
    /// Whether the answer names this partition: an error, an acknowledgement, or records.
    pub fn to_answer(&self) -> bool {
        self.error.is_some() || self.ack_error.is_some() || self.acked || !self.acquired.is_empty()
    }
}

/// Per (topic id, partition): the acknowledgement batches of a request, as
/// (first offset, last offset, types).
pub(super) type Acks = BTreeMap<(Uuid, i32), Vec<(i64, i64, Vec<i8>)>>;

/// ShareFetch v2's `ShareAcquireMode` (KIP-1206): whole batches, about MaxRecords records (the
/// default), or never more than MaxRecords.
const BATCH_OPTIMIZED: i8 = 0;
const RECORD_LIMIT: i8 = 1;

pub async fn handle(ctx: RequestContext, request: ShareFetchRequest) -> ShareFetchResponse {
    let RequestContext { broker, session, .. } = &ctx;
    let image = broker.metadata.image();
    let group_configs = request.group_id.as_ref().and_then(|g| image.group_configs(&g.0));
    let limits = broker
        .share
        .limits(group_configs::share_record_lock_duration_ms(group_configs));
    let lock_ms = i32::try_from(limits.record_lock_duration_ms).unwrap_or(i32::MAX);
    let failed = |error: ResponseError, message: String| {
        ShareFetchResponse::default()
            .with_error_code(error.code())
            .with_error_message(Some(str_bytes(message)).filter(|m| !m.is_empty()))
            .with_acquisition_lock_timeout_ms(lock_ms)
    };
    let (Some(group_id), Some(member_id)) = (request.group_id.as_ref(), request.member_id.as_ref()) else {
        return failed(
            ResponseError::InvalidRequest,
            "ShareFetch needs a GroupId and a MemberId.".into(),
        );
    };
    let (group_id, member_id) = (group_id.0.to_string(), member_id.to_string());
    if group_id.is_empty() || member_id.is_empty() {
        return failed(
            ResponseError::InvalidRequest,
            "ShareFetch needs a GroupId and a MemberId.".into(),
        );
    }
    let access = session.access(&broker.security.authorizer, &image.acls);
    if !access.authorize(AclOperation::Read, ResourceType::Group, &group_id) {
        return failed(ResponseError::GroupAuthorizationFailed, String::new());
    }
    let mut added = Vec::new();
    let mut acks = Acks::new();
    for topic in &request.topics {
        for p in &topic.partitions {
            added.push((topic.topic_id, p.partition_index));
            let batches = p
                .acknowledgement_batches
                .iter()
                .map(|b| (b.first_offset, b.last_offset, b.acknowledge_types.clone()))
                .collect::<Vec<_>>();
            if !batches.is_empty() {
                acks.entry((topic.topic_id, p.partition_index))
                    .or_default()
                    .extend(batches);
            }
        }
    }
    let forgotten: Vec<(Uuid, i32)> = request
        .forgotten_topics_data
        .iter()
        .flat_map(|t| t.partitions.iter().map(move |p| (t.topic_id, *p)))
        .collect();
    let step = broker.share.sessions.step(
        &group_id,
        &member_id,
        request.share_session_epoch,
        &added,
        &forgotten,
        true,
        session.connection_id,
    );
    let fetching = match step {
        Ok(SessionStep::Open(partitions)) => partitions,
        Ok(SessionStep::Closed(_)) => Vec::new(),
        Err((error, message)) => return failed(error, message),
    };
    let record_limit = match request.share_acquire_mode {
        BATCH_OPTIMIZED => false,
        RECORD_LIMIT => true,
        mode => {
            return failed(
                ResponseError::InvalidRequest,
                format!("ShareAcquireMode {mode} is not one of 0 (batch_optimized) and 1 (record_limit)."),
            )
        }
    };
    let mut outcomes: BTreeMap<(Uuid, i32), PartitionOutcome> = BTreeMap::new();
    let renew = request.is_renew_ack;
    let stores = acknowledge(broker, &image, &group_id, &member_id, &access, acks, renew, &mut outcomes);
    store_acknowledgements(broker, stores, &mut outcomes).await;
    if request.share_session_epoch == crate::share::session::FINAL_EPOCH {
        broker
            .share_persister
            .close_session(&broker.share, &group_id, &member_id)
            .await;
        return respond(&session.listener, &image, lock_ms, outcomes);
    }
    if renew {
        // A request renewing locks is answered with its acknowledgements only: the member is
        // still busy with what it holds (KIP-1222).
        return respond(&session.listener, &image, lock_ms, outcomes);
    }
    let max_records = usize::try_from(request.max_records.max(1)).unwrap_or(usize::MAX);
    // Record bytes in the answer: the request's MaxBytes within `fetch.max.bytes`, as Fetch.
    let max_bytes = usize::try_from(request.max_bytes.clamp(1, broker.config.fetch_max_bytes.max(1))).unwrap_or(1);
    let deadline =
        tokio::time::Instant::now() + Duration::from_millis(u64::try_from(request.max_wait_ms.max(0)).unwrap_or(0));
    let member: Arc<str> = Arc::from(member_id.as_str());
    // `share.isolation.level`: read_committed stops at the last stable offset and archives the
    // records of aborted transactions.
    let bound = if group_configs::share_read_committed(group_configs) {
        ReadBound::LastStable
    } else {
        ReadBound::HighWatermark
    };
    loop {
        let mut waits: Vec<Arc<Partition>> = Vec::new();
        let mut released = Vec::new();
        let mut next_lock_ms: Option<i64> = None;
        let mut acquired_any = false;
        let mut budget = max_records;
        let mut bytes_left = max_bytes;
        for &(topic_id, index) in &fetching {
            let key = SharePartitionKey {
                group_id: group_id.clone(),
                topic_id,
                partition: index,
            };
            let outcome = outcomes.entry((topic_id, index)).or_default();
            if outcome.error.is_some() || budget == 0 || bytes_left == 0 {
                continue;
            }
            let partition = match leader_of(broker, &image, &access, topic_id, index) {
                Ok(p) => p,
                Err(error) => {
                    outcome.leader = current_leader(&image, topic_id, index);
                    outcome.error = Some(error);
                    continue;
                }
            };
            let share_partition = match slot(broker, &key, &partition, limits, group_configs, deadline).await {
                Ok(slot) => slot,
                Err(error) => {
                    outcome.error = Some(error);
                    continue;
                }
            };
            // Enabled before the state is read: an acknowledgement or release from here on wakes
            // the wait below.
            let mut notified = Box::pin(share_partition.changed());
            notified.as_mut().enable();
            released.push(notified);
            let limits = (budget, bytes_left, record_limit);
            match acquire(&partition, &share_partition, &member, limits, bound).await {
                Ok((records, acquired)) => {
                    let count: usize = acquired
                        .iter()
                        .map(|a| (a.last_offset - a.first_offset + 1) as usize)
                        .sum();
                    budget = budget.saturating_sub(count);
                    bytes_left = bytes_left.saturating_sub(records.len());
                    if !acquired.is_empty() {
                        acquired_any = true;
                        outcome.records = Some(records);
                        outcome.acquired = acquired;
                    }
                }
                Err(error) => outcome.error = Some(error),
            }
            let sp = share_partition.lock();
            if let Some(at) = sp.next_lock_deadline_ms() {
                next_lock_ms = Some(next_lock_ms.map_or(at, |n: i64| n.min(at)));
            }
            drop(sp);
            waits.push(partition);
        }
        let answered = acquired_any || outcomes.values().any(|o| o.error.is_some() || o.ack_error.is_some());
        if answered || tokio::time::Instant::now() >= deadline || waits.is_empty() {
            return respond(&session.listener, &image, lock_ms, outcomes);
        }
        let mut until = deadline;
        if let Some(at) = next_lock_ms {
            let wait_ms = u64::try_from(at.saturating_sub(now_ms()).max(1)).unwrap_or(1);
            until = until.min(tokio::time::Instant::now() + Duration::from_millis(wait_ms));
        }
        wait_for_new_records(&waits, released, until).await;
    }
}

/// The share-partition `key` on this leader: the one in memory if it is of the partition's
/// current leader epoch, else read from the group's coordinator (`share_persister.rs`), or,
/// when the coordinator has none, started from `share.auto.offset.reset` and stored first, so a
/// leader after this one starts where this one did.
async fn slot(
    broker: &Broker,
    key: &SharePartitionKey,
    partition: &Partition,
    limits: ShareLimits,
    group_configs: Option<&BTreeMap<String, String>>,
    deadline: tokio::time::Instant,
) -> Result<Arc<ShareSlot>, (ResponseError, String)> {
    let leader_epoch = partition.leader_epoch();
    if let Some(slot) = broker.share.get(key) {
        if slot.leader_epoch == leader_epoch {
            return Ok(slot);
        }
        broker.share.forget(key, &slot);
    }
    // A fetch that cannot reach the coordinator before its own deadline answers without this
    // partition's records rather than holding its others.
    let not_yet = |(error, message): (ResponseError, String)| {
        tracing::debug!(group = %key.group_id, partition = key.partition, ?error, %message,
            "could not read a share-partition's state from the group's coordinator yet");
        (
            ResponseError::UnknownServerError,
            format!("The share group's coordinator did not answer for this partition yet ({message}); the next fetch tries again."),
        )
    };
    let read_by = deadline.max(tokio::time::Instant::now() + Duration::from_millis(STATE_READ_MIN_MS));
    let stored = broker
        .share_persister
        .read(key, leader_epoch, read_by)
        .await
        .map_err(not_yet)?;
    let (state, state_epoch) = match stored {
        Some(stored) => {
            if let Some(problem) = stored.problem(usize::MAX) {
                return Err((
                    ResponseError::UnknownServerError,
                    format!("The share-partition's stored state cannot be used: {problem}."),
                ));
            }
            (SharePartition::restore(&stored, limits), stored.state_epoch)
        }
        None => {
            let start = initial_start_offset(partition, group_configs);
            let fresh = ShareState {
                state_epoch: 0,
                leader_epoch,
                start_offset: start,
                batches: Vec::new(),
            };
            broker.share_persister.write(key, fresh).await.map_err(not_yet)?;
            (SharePartition::new(start, limits), 0)
        }
    };
    Ok(broker.share.insert(key, state, state_epoch, leader_epoch))
}

/// How long a fetch waits at least for a share-partition's stored state, even with MaxWaitMs 0.
const STATE_READ_MIN_MS: u64 = 1_000;

/// Where a share-partition new on this leader starts: the group's `share.auto.offset.reset`
/// (Kafka's default `latest`: the high watermark).
fn initial_start_offset(partition: &Partition, configs: Option<&BTreeMap<String, String>>) -> i64 {
    match group_configs::share_auto_offset_reset(configs) {
        ShareAutoOffsetReset::Earliest => partition.log_start_offset(),
        ShareAutoOffsetReset::Latest => partition.high_watermark(),
        ShareAutoOffsetReset::ByDuration(ago) => {
            let since = now_ms().saturating_sub(i64::try_from(ago.as_millis()).unwrap_or(i64::MAX));
            match partition.offset_for_timestamp(since, ReadBound::HighWatermark) {
                Ok(Some((offset, _))) => offset,
                _ => partition.high_watermark(),
            }
        }
    }
}

/// The partition `index` of topic `topic_id` when this node leads it and the principal may
/// read it.
fn leader_of(
    broker: &Broker,
    image: &MetadataImage,
    access: &super::Access<'_>,
    topic_id: Uuid,
    index: i32,
) -> Result<Arc<Partition>, (ResponseError, String)> {
    let Some(topic) = image.topic_by_id(&topic_id) else {
        return Err((ResponseError::UnknownTopicId, format!("No topic has id {topic_id}.")));
    };
    if !access.authorize(AclOperation::Read, ResourceType::Topic, &topic.name) {
        return Err((ResponseError::TopicAuthorizationFailed, String::new()));
    }
    broker
        .replicas
        .leader_partition_or_explain(topic, index)
        .map(|(partition, _)| partition)
}

fn current_leader(image: &MetadataImage, topic_id: Uuid, index: i32) -> Option<(i32, i32)> {
    let topic = image.topic_by_id(&topic_id)?;
    let registration = topic.partitions.get(usize::try_from(index).ok()?)?;
    Some((registration.leader, registration.leader_epoch))
}

/// Log bytes one read of a share fetch takes at most: a fetch reads chunks of this size from
/// the share-partition's next fetch offset until it has acquired MaxRecords or MaxBytes, so a
/// long backlog is not copied whole for the few hundred records a member asks at a time.
const READ_CHUNK_BYTES: usize = 1 << 20;

/// Reads chunks from the share-partition's next fetch offset up to `bound` (the high
/// watermark, or the last stable offset for read_committed) and acquires what it may of the
/// batches read, up to `max_records` records and `max_bytes` bytes; returns the batches that
/// hold an acquired record, each once, in log order. Batches of aborted transactions (read
/// up to the last stable offset only) are archived, never handed out.
async fn acquire(
    partition: &Arc<Partition>,
    share_partition: &Arc<ShareSlot>,
    member: &Arc<str>,
    (max_records, max_bytes, record_limit): (usize, usize, bool),
    bound: ReadBound,
) -> Result<(Bytes, Vec<Acquired>), (ResponseError, String)> {
    let end = |p: &Partition| match bound {
        ReadBound::LastStable => p.last_stable_offset(),
        _ => p.high_watermark(),
    };
    let mut out = BytesMut::new();
    let mut acquired_all: Vec<Acquired> = Vec::new();
    let mut budget = max_records;
    // Each round acquires something (or stops), so the next starts further on; the cap only
    // guards against a bug looping.
    for _ in 0..64 {
        let offset = {
            let mut sp = share_partition.lock();
            sp.expire_locks(now_ms());
            sp.log_start_moved(partition.log_start_offset());
            if !sp.can_acquire() {
                break;
            }
            sp.next_fetch_offset()
        };
        if budget == 0 || out.len() >= max_bytes || offset >= end(partition) {
            break;
        }
        let chunk = (max_bytes - out.len()).min(READ_CHUNK_BYTES);
        let (records, aborted) = read(partition, offset, chunk, bound).await?;
        let spans: Vec<(BatchSpan, std::ops::Range<usize>)> = BatchIter::new(&records)
            .map(|(header, range)| {
                let aborted = header.is_transactional()
                    && aborted.iter().any(|a| {
                        a.producer_id == header.producer_id
                            && a.first_offset <= header.base_offset
                            && header.base_offset <= a.last_offset
                    });
                let span = BatchSpan {
                    first_offset: header.base_offset,
                    last_offset: header.last_offset(),
                    is_control: header.is_control() || aborted,
                };
                (span, range)
            })
            .collect();
        let batches: Vec<BatchSpan> = spans.iter().map(|(span, _)| *span).collect();
        let acquired = if record_limit {
            share_partition
                .lock()
                .acquire_record_limit(member, &batches, budget, now_ms())
        } else {
            share_partition.lock().acquire(member, &batches, budget, now_ms())
        };
        if acquired.is_empty() {
            break;
        }
        // The batches holding an acquired record and not already in the answer.
        let already = acquired_all.iter().map(|a| a.last_offset).max().unwrap_or(i64::MIN);
        let first = acquired.iter().map(|a| a.first_offset).min().unwrap_or(i64::MAX);
        let last = acquired.iter().map(|a| a.last_offset).max().unwrap_or(i64::MIN);
        for (span, range) in &spans {
            if span.last_offset >= first && span.first_offset <= last && span.last_offset > already {
                out.extend_from_slice(&records[range.clone()]);
            }
        }
        budget = budget.saturating_sub(
            acquired
                .iter()
                .map(|a| (a.last_offset - a.first_offset + 1) as usize)
                .sum(),
        );
        acquired_all.extend(acquired);
    }
    Ok((out.freeze(), acquired_all))
}

/// Up to `max_bytes` of whole batches from `offset` (the first batch whole even if larger), up
/// to `bound`, with the aborted transactions overlapping them when the bound is the last
/// stable offset; a read that needs the disk runs on the blocking pool.
async fn read(
    partition: &Arc<Partition>,
    offset: i64,
    max_bytes: usize,
    bound: ReadBound,
) -> Result<(Bytes, Vec<AbortedTxn>), (ResponseError, String)> {
    let planned = partition
        .plan_read(offset, max_bytes, bound)
        .map_err(|e| crate::partition::log_error(&e))?;
    let outcome = if planned.reads_disk() {
        tokio::task::spawn_blocking(move || planned.read(max_bytes, true))
            .await
            .map_err(|e| {
                (
                    ResponseError::UnknownServerError,
                    format!("a share fetch read task failed: {e}"),
                )
            })?
    } else {
        planned.read(max_bytes, true)
    };
    outcome
        .map(|o| (o.records, o.aborted_transactions.unwrap_or_default()))
        .map_err(|e| crate::partition::log_error(&e))
}

/// Waits until a partition's high watermark or log start moves, records of a share-partition
/// are acknowledged or released (`released`), or `until`.
async fn wait_for_new_records(
    partitions: &[Arc<Partition>],
    released: Vec<std::pin::Pin<Box<tokio::sync::futures::OwnedNotified>>>,
    until: tokio::time::Instant,
) {
    let changes: Vec<_> = partitions.iter().map(|p| Box::pin(p.watch().changed())).collect();
    // `select_all` wants at least one future.
    let moved = async {
        if changes.is_empty() {
            std::future::pending::<()>().await;
        }
        futures::future::select_all(changes).await;
    };
    let acknowledged = async {
        if released.is_empty() {
            std::future::pending::<()>().await;
        }
        futures::future::select_all(released).await;
    };
    tokio::select! {
        _ = moved => {}
        _ = acknowledged => {}
        _ = tokio::time::sleep_until(until) => {}
    }
}

/// Applies a request's acknowledgements, recording each partition's result in `outcomes`;
/// returns what must be stored before the member is answered ([`store_acknowledgements`]).
/// Renew acknowledgements (type 4) are taken only from a request that says it has them
/// (`IsRenewAck`, v2); a renewal alone changes nothing stored.
#[allow(clippy::too_many_arguments)]
pub(super) fn acknowledge(
    broker: &Broker,
    image: &MetadataImage,
    group_id: &str,
    member_id: &str,
    access: &super::Access<'_>,
    acks: Acks,
    renew: bool,
    outcomes: &mut BTreeMap<(Uuid, i32), PartitionOutcome>,
) -> PendingStores {
    let now = now_ms();
    let mut stores = PendingStores::new();
    for ((topic_id, index), batches) in acks {
        let outcome = outcomes.entry((topic_id, index)).or_default();
        outcome.acked = true;
        if let Err(error) = leader_of(broker, image, access, topic_id, index) {
            outcome.leader = current_leader(image, topic_id, index);
            outcome.ack_error = Some(error);
            continue;
        }
        let key = SharePartitionKey {
            group_id: group_id.to_string(),
            topic_id,
            partition: index,
        };
        let Some(share_partition) = broker.share.get(&key) else {
            outcome.ack_error = Some((
                ResponseError::InvalidRecordState,
                "This node holds no records of the share group on this partition; they were released.".into(),
            ));
            continue;
        };
        let applied = {
            let mut sp = share_partition.lock();
            let mut applied = false;
            for (first, last, types) in batches {
                if !renew && types.contains(&RENEW) {
                    outcome.ack_error.get_or_insert((
                        ResponseError::InvalidRequest,
                        "Renew acknowledgements (type 4) need IsRenewAck, in ShareFetch or ShareAcknowledge v2.".into(),
                    ));
                    continue;
                }
                match sp.acknowledge(member_id, first, last, &types, now) {
                    Ok(()) => applied |= types.iter().any(|t| *t != RENEW),
                    Err(error) => {
                        outcome.ack_error.get_or_insert(error);
                    }
                }
            }
            applied
        };
        share_partition.notify();
        if applied {
            let version = share_partition.changed_state();
            stores.push(((topic_id, index), key, share_partition, version));
        }
    }
    stores
}

/// Acknowledgements applied and waiting to be stored: (partition, share-partition, its slot,
/// the change to store).
pub(super) type PendingStores = Vec<((Uuid, i32), SharePartitionKey, Arc<ShareSlot>, u64)>;

/// Stores the acknowledged share-partitions' state at the group's coordinator, all at once;
/// an acknowledgement that could not be stored is answered with why (its records stay
/// acknowledged here and are stored with the next change). A fenced state is dropped so the
/// next fetch reads it afresh.
pub(super) async fn store_acknowledgements(
    broker: &Broker,
    stores: PendingStores,
    outcomes: &mut BTreeMap<(Uuid, i32), PartitionOutcome>,
) {
    let results = futures::future::join_all(
        stores
            .iter()
            .map(|(_, key, slot, version)| broker.share_persister.store(key, slot, *version)),
    )
    .await;
    for ((tp, key, slot, _), result) in stores.into_iter().zip(results) {
        let Err((error, message)) = result else { continue };
        tracing::warn!(group = %key.group_id, topic_id = %key.topic_id, partition = key.partition, ?error, %message,
            "could not store a share-partition's acknowledgements at the group's coordinator");
        let answer = match error {
            ResponseError::FencedStateEpoch | ResponseError::FencedLeaderEpoch => {
                broker.share.forget(&key, &slot);
                (
                    ResponseError::InvalidRecordState,
                    format!("The share-partition's state was replaced (reset, or a new leader): {message}"),
                )
            }
            other => (
                other,
                format!("The acknowledgement could not be stored at the share group's coordinator: {message}"),
            ),
        };
        outcomes.entry(tp).or_default().ack_error.get_or_insert(answer);
    }
}

fn respond(
    listener: &str,
    image: &MetadataImage,
    lock_ms: i32,
    outcomes: BTreeMap<(Uuid, i32), PartitionOutcome>,
) -> ShareFetchResponse {
    let mut topics: BTreeMap<Uuid, Vec<PartitionData>> = BTreeMap::new();
    let mut leaders = Vec::new();
    for ((topic_id, index), o) in outcomes {
        if !o.to_answer() {
            continue;
        }
        let (leader_id, leader_epoch) = o.leader.unwrap_or((-1, -1));
        if leader_id >= 0 {
            leaders.push(leader_id);
        }
        let (error_code, error_message) = code(o.error);
        let (ack_code, ack_message) = code(o.ack_error);
        topics.entry(topic_id).or_default().push(
            PartitionData::default()
                .with_partition_index(index)
                .with_error_code(error_code)
                .with_error_message(error_message)
                .with_acknowledge_error_code(ack_code)
                .with_acknowledge_error_message(ack_message)
                .with_current_leader(
                    LeaderIdAndEpoch::default()
                        .with_leader_id(leader_id)
                        .with_leader_epoch(leader_epoch),
                )
                .with_records(Some(o.records.unwrap_or_default()))
                .with_acquired_records(
                    o.acquired
                        .into_iter()
                        .map(|a| {
                            AcquiredRecords::default()
                                .with_first_offset(a.first_offset)
                                .with_last_offset(a.last_offset)
                                .with_delivery_count(i16::try_from(a.delivery_count).unwrap_or(i16::MAX))
                        })
                        .collect(),
                ),
        );
    }
    ShareFetchResponse::default()
        .with_acquisition_lock_timeout_ms(lock_ms)
        .with_responses(
            topics
                .into_iter()
                .map(|(topic_id, partitions)| {
                    ShareFetchableTopicResponse::default()
                        .with_topic_id(topic_id)
                        .with_partitions(partitions)
                })
                .collect(),
        )
        .with_node_endpoints(
            node_endpoints(image, listener, &leaders)
                .into_iter()
                .map(|(id, host, port, rack)| {
                    NodeEndpoint::default()
                        .with_node_id(BrokerId(id))
                        .with_host(host)
                        .with_port(port)
                        .with_rack(rack)
                })
                .collect(),
        )
}

/// The endpoints on `listener` of the `leaders` named in an answer's NOT_LEADER_OR_FOLLOWER
/// partitions, so the client moves there without a metadata round trip.
pub(super) fn node_endpoints(
    image: &MetadataImage,
    listener: &str,
    leaders: &[i32],
) -> Vec<(i32, StrBytes, i32, Option<StrBytes>)> {
    let mut ids = leaders.to_vec();
    ids.sort_unstable();
    ids.dedup();
    ids.into_iter()
        .filter_map(|id| {
            let broker = image.brokers.get(&id)?;
            let endpoint = broker.endpoint(listener)?;
            Some((
                id,
                str_bytes(endpoint.host.clone()),
                endpoint.port,
                broker.rack.clone().map(str_bytes),
            ))
        })
        .collect()
}

pub(super) fn code(error: Option<(ResponseError, String)>) -> (i16, Option<StrBytes>) {
    match error {
        None => (0, None),
        Some((e, message)) => (e.code(), Some(str_bytes(message)).filter(|m| !m.is_empty())),
    }
}

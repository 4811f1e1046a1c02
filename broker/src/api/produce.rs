//! Produce: validate each partition's record batches, stamp offsets, append them as received.
//! Records are decoded only when a rule needs them (compacted topics: every record needs a key;
//! a batch whose timestamps are out of range: which records are), and then within the topic's
//! `max.message.bytes`; the only copy is from the request buffer into the batch we patch.
//!
//! A topic whose `compression.type` names a codec stores every batch in it: batches written
//! otherwise are recompressed before the append, as Kafka does.
//!
//! The request's bytes count against the client's `producer_byte_rate` quota: past it, the
//! response carries the throttle time and the connection pauses reading (`quota/`).
//!
//! With an authorizer, a request naming a transactional id needs WRITE on it (else every
//! partition is answered TRANSACTIONAL_ID_AUTHORIZATION_FAILED), and each topic needs WRITE
//! (else its partitions get TOPIC_AUTHORIZATION_FAILED); refused records are never appended.
//! Each topic is authorized once per request, and not at all without an authorizer.
//!
//! With `acks=all` the response waits (Kafka's delayed produce) until the high watermark
//! passes every appended batch, woken by high-watermark and leadership changes, or until the
//! request's timeout.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::FutureExt;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse};
use sluice_protocol::batch::{validate_batches, BatchError, BatchIter};
use sluice_protocol::records::{recompress_batch, BatchRecords, Compressor};
use sluice_protocol::ResponseBody;
use tokio::sync::watch;

use super::{str_bytes, Access, Reply, RequestContext};
use crate::broker::Broker;
use crate::clock::now_ms;
use crate::controller;
use crate::metadata::acls::{AclOperation, ResourceType};
use crate::metadata::image::{MetadataImage, PartitionRegistration, TopicImage};
use crate::partition::{AppendError, AppendOutcome, Partition};
use crate::producer_state::{TxnVerification, VerificationGuard};
use crate::purgatory::DelayedProduce;
use crate::topic_config::{self, BrokerOverrides};
use crate::txn::verify;

/// Produce v13 names topics by id; earlier versions by name.
const FIRST_VERSION_WITH_TOPIC_IDS: i16 = 13;
/// The first version a transactions v2 producer sends (it adds no partitions itself).
const TV2_SINCE: i16 = 12;

pub fn handle(ctx: &RequestContext, request: ProduceRequest) -> Reply {
    let version = ctx.version;
    let client_id = ctx.client_id();
    let RequestContext { broker, session, .. } = ctx;
    let image = broker.metadata.image();
    let access = session.access(&broker.security.authorizer, &image.acls);
    let authorizing = access.is_enabled();
    let transactional_id = request.transactional_id.as_ref().map(|id| id.0.as_str());
    if transactional_id.is_none_or(str::is_empty) && has_transactional_records(&request) {
        // Kafka's answer too: transactional writes are only accepted under their id.
        let message = "a transactional batch needs the request's transactional id".to_string();
        return refuse_all(request, ResponseError::TransactionalIdAuthorizationFailed, message);
    }
    if authorizing {
        if let Some(message) = transactional_refusal(access, transactional_id) {
            return refuse_all(request, ResponseError::TransactionalIdAuthorizationFailed, message);
        }
    }
    let now = now_ms();
    let acks = request.acks;
    // Kafka counts the whole request against producer_byte_rate, appended or not.
    let produced_bytes: usize = request
        .topic_data
        .iter()
        .flat_map(|t| t.partition_data.iter())
        .map(|p| p.records.as_ref().map_or(0, Bytes::len))
        .sum();
    let throttle_time_ms = broker
        .produce_quotas
        .record(&image, session.quota_user(), client_id, produced_bytes, now);
    // A transactions v2 producer sends no AddPartitionsToTxn: its first write to a partition
    // has the leader add the partition, whatever `transaction.partition.verification.enable`.
    let tv2 = version >= TV2_SINCE && broker.tv2_enabled();
    let verifying = transactional_id
        .filter(|id| !id.is_empty() && acks != 0 && (broker.partition_verification() || tv2))
        .map(str::to_string);
    let timeout_ms = request.timeout_ms;
    let Some(transactional_id) = verifying else {
        let produced = produce(broker, &image, access, request, version, now, &Verification::Off);
        return reply(produced, acks, throttle_time_ms, timeout_ms);
    };
    let timing = (acks, throttle_time_ms, timeout_ms);
    if session.append_order.is_busy() {
        // Earlier produces of this connection still wait for their verification: this one
        // runs whole after their appends (a connection's deferred appends run in request
        // order), so no batch overtakes one sent before it.
        let mut turn = session.append_order.take_turn();
        let broker = broker.clone();
        let session = session.clone();
        return spawned(async move {
            turn.wait().await;
            let started = {
                let image = broker.metadata.image();
                let access = session.access(&broker.security.authorizer, &image.acls);
                verify_and_produce(&broker, &image, access, request, version, now_ms())
            };
            match started {
                Ok((produced, pending)) => finish(&broker, produced, pending, &transactional_id, timing, turn).await,
                Err(refused) => {
                    drop(turn);
                    body_of(refused, throttle_time_ms).await
                }
            }
        });
    }
    let (produced, pending) = match verify_and_produce(broker, &image, access, request, version, now) {
        Ok(started) => started,
        Err(refused) => return refused,
    };
    if produced.deferred.is_empty() {
        return reply(produced, acks, throttle_time_ms, timeout_ms);
    }
    // The partitions that open the producer's transaction wait for its coordinator; the
    // request's others were appended above, in connection order, and the connection's next
    // produces wait behind this one until its appends are done.
    let turn = session.append_order.take_turn();
    let broker = broker.clone();
    spawned(async move { finish(&broker, produced, pending, &transactional_id, timing, turn).await })
}

/// A deferred produce's reply, its work started at once on a task of its own rather than
/// when the connection's writer reaches it: the writer awaits responses in request order, so
/// a deferred append left to it would wait for every earlier produce's replication, and the
/// connection's produces behind it for its own (one replication round trip per request).
fn spawned(work: impl std::future::Future<Output = ResponseBody> + Send + 'static) -> Reply {
    let task = tokio::spawn(work);
    Reply::Later(
        async move {
            task.await.unwrap_or_else(|e| {
                tracing::error!(error = %e, "a deferred produce's task failed; answering it empty");
                ResponseBody::Produce(ProduceResponse::default())
            })
        }
        .boxed(),
    )
}

/// A transactional request's verification started and its appends made (those that wait for
/// the coordinator are left deferred), or the reply that refuses the whole request.
fn verify_and_produce(
    broker: &Broker,
    image: &MetadataImage,
    access: Access<'_>,
    request: ProduceRequest,
    version: i16,
    now: i64,
) -> Result<(Produced, PendingVerification), Reply> {
    match start_verification(broker, image, access, &request, version) {
        Ok(pending) => {
            let produced = produce(broker, image, access, request, version, now, &pending.verification());
            Ok((produced, pending))
        }
        Err(refusal) => Err(refuse_all(request, refusal.error, refusal.message)),
    }
}

/// The order of a connection's deferred transactional appends: each produce that defers
/// takes a turn, appends after the turn before it is over, and ends its own when its appends
/// are done (or it is dropped). While a turn is open the connection's next produces take
/// turns too, so none of their batches overtakes one sent before it.
#[derive(Debug, Default)]
pub struct AppendOrder(parking_lot::Mutex<Option<watch::Receiver<bool>>>);

impl AppendOrder {
    /// Whether the latest turn is still open.
    fn is_busy(&self) -> bool {
        self.0.lock().as_ref().is_some_and(|over| !*over.borrow())
    }

    /// The next turn, after the latest.
    fn take_turn(&self) -> AppendTurn {
        let (over, receiver) = watch::channel(false);
        let after = self.0.lock().replace(receiver);
        AppendTurn { after, over }
    }
}

/// One deferred produce's place in its connection's [`AppendOrder`]; over when dropped.
struct AppendTurn {
    after: Option<watch::Receiver<bool>>,
    over: watch::Sender<bool>,
}

impl AppendTurn {
    /// Until the turn before this one is over.
    async fn wait(&mut self) {
        if let Some(mut before) = self.after.take() {
            // An error is a sender gone: that turn is over too.
            let _ = before.wait_for(|over| *over).await;
        }
    }
}

impl Drop for AppendTurn {
    fn drop(&mut self) {
        self.over.send_replace(true);
    }
}

/// The deferred part of a verified produce: the coordinator asked, the deferred partitions
/// appended (or refused) with its verdicts, and the response once the ISR has the appends.
async fn finish(
    broker: &Broker,
    mut produced: Produced,
    pending: PendingVerification,
    transactional_id: &str,
    (acks, throttle_time_ms, timeout_ms): (i16, i32, i32),
    turn: AppendTurn,
) -> ResponseBody {
    if !produced.deferred.is_empty() {
        let verdicts = pending.verify(broker, transactional_id).await;
        let image = broker.metadata.image();
        for waiting in std::mem::take(&mut produced.deferred) {
            let verdict = verdicts
                .get(&(waiting.topic_index, waiting.partition_index))
                .copied()
                .unwrap_or(Err(ResponseError::UnknownServerError));
            let result = match image.topic(&waiting.topic) {
                None => Err(Refusal::new(
                    ResponseError::UnknownTopicOrPartition,
                    "the topic was deleted",
                )),
                Some(topic) => verified(verdict).and_then(|guard| {
                    let checked = TxnVerification::Checked(Some(guard));
                    let result = append(
                        broker,
                        &image,
                        topic,
                        waiting.index,
                        waiting.records,
                        acks,
                        checked,
                        now_ms(),
                    );
                    log_append(broker, topic, waiting.index, &result);
                    result
                }),
            };
            produced.settle(waiting.topic_index, waiting.partition_index, waiting.index, result);
        }
    }
    drop(turn);
    body_of(reply(produced, acks, throttle_time_ms, timeout_ms), throttle_time_ms).await
}

/// The response a reply carries (a verified produce always has one: acks=0 is never verified).
async fn body_of(reply: Reply, throttle_time_ms: i32) -> ResponseBody {
    match reply {
        Reply::Now(body) => body,
        Reply::Later(wait) => wait.await,
        Reply::None | Reply::Throttled(_) | Reply::Close(_) => {
            tracing::error!("a verified produce had no response to send; answering it empty");
            ResponseBody::Produce(ProduceResponse::default().with_throttle_time_ms(throttle_time_ms))
        }
    }
}

/// What a produce did so far: each partition's response (appended or refused), the
/// `acks=all` waits, and the partitions whose append waits for their verification.
struct Produced {
    responses: Vec<TopicProduceResponse>,
    waits: Vec<(usize, usize, DelayedProduce)>,
    deferred: Vec<DeferredAppend>,
}

/// A partition's batches to append once the coordinator has answered.
struct DeferredAppend {
    topic_index: usize,
    partition_index: usize,
    topic: String,
    index: i32,
    records: Option<Bytes>,
}

impl Produced {
    /// Records a partition's outcome: its response, and its wait when it has one.
    fn settle(
        &mut self,
        topic_index: usize,
        partition_index: usize,
        index: i32,
        result: Result<(Appended, Option<DelayedProduce>), Refusal>,
    ) {
        let result = result.map(|(appended, wait)| {
            if let Some(wait) = wait {
                self.waits.push((topic_index, partition_index, wait));
            }
            appended
        });
        self.responses[topic_index].partition_responses[partition_index] = partition_response(index, result);
    }
}

fn log_append(
    broker: &Broker,
    topic: &TopicImage,
    index: i32,
    result: &Result<(Appended, Option<DelayedProduce>), Refusal>,
) {
    match result {
        Err(refusal) => tracing::debug!(topic = %topic.name, partition = index,
            error = ?refusal.error, "produce refused: {}", refusal.message),
        Ok((appended, _)) if appended.stored.is_none() => tracing::debug!(
            topic = %topic.name, partition = index, base_offset = appended.base_offset,
            "produce: an idempotent retry already in the log, answered with its offset"),
        Ok(_) => {}
    }
    let stored = result.as_ref().ok().and_then(|(appended, _)| appended.stored);
    broker.metrics.record_produce(&topic.name, stored);
}

/// Each partition's batches checked and appended (or refused), except those whose
/// verification is pending: they are handed back in `deferred`.
fn produce(
    broker: &Broker,
    image: &MetadataImage,
    access: Access<'_>,
    request: ProduceRequest,
    version: i16,
    now: i64,
    verification: &Verification,
) -> Produced {
    let authorizing = access.is_enabled();
    let acks = request.acks;
    let mut produced = Produced {
        responses: Vec::with_capacity(request.topic_data.len()),
        waits: Vec::new(),
        deferred: Vec::new(),
    };
    for (topic_index, topic_data) in request.topic_data.into_iter().enumerate() {
        let topic = if version >= FIRST_VERSION_WITH_TOPIC_IDS {
            image.topic_by_id(&topic_data.topic_id)
        } else {
            image.topic(&topic_data.name.0)
        };
        // Kafka authorizes the name (an unknown id has none), before the topic's existence.
        let denied = if !authorizing {
            None
        } else if version >= FIRST_VERSION_WITH_TOPIC_IDS {
            topic.and_then(|t| write_refusal(access, &t.name))
        } else {
            write_refusal(access, &topic_data.name.0)
        };
        // Every partition answered first (a placeholder for the deferred ones).
        produced.responses.push(
            TopicProduceResponse::default()
                .with_name(topic_data.name)
                .with_topic_id(topic_data.topic_id)
                .with_partition_responses(
                    topic_data
                        .partition_data
                        .iter()
                        .map(|p| PartitionProduceResponse::default().with_index(p.index))
                        .collect(),
                ),
        );
        for (partition_index, data) in topic_data.partition_data.into_iter().enumerate() {
            let result = match (topic, &denied) {
                (_, Some(message)) => Err(Refusal::new(ResponseError::TopicAuthorizationFailed, message.clone())),
                (None, None) if version >= FIRST_VERSION_WITH_TOPIC_IDS => {
                    Err(Refusal::new(ResponseError::UnknownTopicId, "unknown topic id"))
                }
                (None, None) => Err(Refusal::new(ResponseError::UnknownTopicOrPartition, "unknown topic")),
                (Some(_), None) if !(-1..=1).contains(&acks) => Err(Refusal::new(
                    ResponseError::InvalidRequiredAcks,
                    format!("acks={acks} is invalid; use 0, 1 or -1 (all)"),
                )),
                // Kafka's ReplicaManager: only the broker itself writes these (the
                // group coordinator appends to the partition, not through Produce).
                (Some(topic), None) if controller::is_internal_topic(&topic.name) => Err(Refusal::new(
                    ResponseError::InvalidTopicException,
                    format!("Cannot append to internal topic {}", topic.name),
                )),
                (Some(topic), None) => match verification.of(topic_index, partition_index) {
                    None => {
                        produced.deferred.push(DeferredAppend {
                            topic_index,
                            partition_index,
                            topic: topic.name.clone(),
                            index: data.index,
                            records: data.records,
                        });
                        continue;
                    }
                    Some(verified) => {
                        let result = append(broker, image, topic, data.index, data.records, acks, verified, now);
                        log_append(broker, topic, data.index, &result);
                        result
                    }
                },
            };
            produced.settle(topic_index, partition_index, data.index, result);
        }
    }
    produced
}

/// The response to send for what was produced: none for acks=0 (or the connection closed,
/// when a partition failed), now, or once the ISR has every append (`acks=all`).
fn reply(produced: Produced, acks: i16, throttle_time_ms: i32, timeout_ms: i32) -> Reply {
    let Produced { responses, waits, .. } = produced;
    if acks == 0 {
        // Kafka closes the connection when an acks=0 produce fails, the one signal such a
        // producer gets: it reconnects and refreshes its metadata (a moved leader, say).
        let failed = responses.iter().find_map(|t| {
            t.partition_responses
                .iter()
                .find(|p| p.error_code != 0)
                .map(|p| (t.name.0.clone(), p.index, p.error_code))
        });
        if let Some((topic, partition, code)) = failed {
            let error = ResponseError::try_from_code(code).map_or_else(|| code.to_string(), |e| format!("{e:?}"));
            return Reply::Close(format!(
                "an acks=0 produce to {topic}-{partition} failed with {error}; closing the connection so the client \
                 refreshes its metadata, as Kafka does"
            ));
        }
        return if throttle_time_ms > 0 {
            Reply::Throttled(throttle_time_ms)
        } else {
            Reply::None
        };
    }
    if waits.is_empty() {
        return Reply::Now(ResponseBody::Produce(
            ProduceResponse::default()
                .with_responses(responses)
                .with_throttle_time_ms(throttle_time_ms),
        ));
    }
    let deadline = tokio::time::Instant::now() + Duration::from_millis(timeout_ms.max(0) as u64);
    let mut responses = responses;
    Reply::Later(
        async move {
            for (topic_index, partition_index, wait) in waits {
                if let Err(error) = wait.wait(deadline).await {
                    let response = &mut responses[topic_index].partition_responses[partition_index];
                    *response = partition_response(response.index, Err(error.into()));
                }
            }
            ResponseBody::Produce(
                ProduceResponse::default()
                    .with_responses(responses)
                    .with_throttle_time_ms(throttle_time_ms),
            )
        }
        .boxed(),
    )
}

/// KIP-890 verification of a transactional request, per partition by its place in the
/// request (topic index, partition index).
enum Verification {
    /// Not checked: no transactional id, or `transaction.partition.verification.enable` off.
    Off,
    /// The partitions whose verification is pending (their append is deferred); the others
    /// may only join a transaction already open on them.
    Checked(HashSet<(usize, usize)>),
}

impl Verification {
    /// What the partition's append presents, or `None` when it waits for its verification.
    fn of(&self, topic_index: usize, partition_index: usize) -> Option<TxnVerification> {
        match self {
            Verification::Off => Some(TxnVerification::Unchecked),
            Verification::Checked(pending) if pending.contains(&(topic_index, partition_index)) => None,
            Verification::Checked(_) => Some(TxnVerification::Checked(None)),
        }
    }
}

/// The coordinator's verdict on a deferred partition, as its append presents it or as the
/// producer is refused.
fn verified(verdict: Result<VerificationGuard, ResponseError>) -> Result<VerificationGuard, Refusal> {
    verdict.map_err(|error| {
        let produce_error = verify::produce_error(error);
        let message = match produce_error {
            ResponseError::InvalidTxnState => "the partition is not in the producer's open transaction (its \
                 coordinator says so); add it to the transaction before writing to it"
                .to_string(),
            ResponseError::NotEnoughReplicas => format!(
                "could not confirm with the transaction coordinator that the partition is in the transaction \
                 ({error:?}); retry"
            ),
            _ => format!("the transaction coordinator refused the producer: {error:?}"),
        };
        Refusal::new(produce_error, message)
    })
}

/// Partitions whose first transactional write of the producer is to be verified, each with
/// the guard its append will present.
struct PendingVerification {
    producer_id: i64,
    producer_epoch: i16,
    /// Transactions v2: the coordinator adds the partitions instead of only verifying them.
    add: bool,
    /// (topic index, partition index) in the request, topic name, partition, guard.
    partitions: Vec<(usize, usize, String, i32, VerificationGuard)>,
}

type Verdicts = HashMap<(usize, usize), Result<VerificationGuard, ResponseError>>;

impl PendingVerification {
    fn verification(&self) -> Verification {
        Verification::Checked(self.partitions.iter().map(|(t, p, ..)| (*t, *p)).collect())
    }

    async fn verify(&self, broker: &Broker, transactional_id: &str) -> Verdicts {
        let asked = self
            .partitions
            .iter()
            .map(|(_, _, topic, index, _)| (topic.clone(), *index))
            .collect();
        let verdicts = broker
            .txn
            .verify_for_produce(transactional_id, self.producer_id, self.producer_epoch, asked, self.add)
            .await;
        self.partitions
            .iter()
            .zip(verdicts)
            .map(|((topic_index, partition_index, _, _, guard), (_, verdict))| {
                ((*topic_index, *partition_index), verdict.map(|()| *guard))
            })
            .collect()
    }
}

/// Starts the verification of every partition of the request where this leader is to open
/// the producer's transaction. Partitions that will be refused anyway (unknown, internal,
/// not authorized, not led here) are left to the append, which refuses them. All
/// transactional batches of a request must be one producer's (Kafka's rule too).
fn start_verification(
    broker: &Broker,
    image: &MetadataImage,
    access: Access<'_>,
    request: &ProduceRequest,
    version: i16,
) -> Result<PendingVerification, Refusal> {
    let mut pending = PendingVerification {
        producer_id: -1,
        producer_epoch: -1,
        add: version >= TV2_SINCE && broker.tv2_enabled(),
        partitions: Vec::new(),
    };
    let mut producer: Option<(i64, i16)> = None;
    for (topic_index, topic_data) in request.topic_data.iter().enumerate() {
        let topic = if version >= FIRST_VERSION_WITH_TOPIC_IDS {
            image.topic_by_id(&topic_data.topic_id)
        } else {
            image.topic(&topic_data.name.0)
        };
        let Some(topic) = topic else { continue };
        if controller::is_internal_topic(&topic.name)
            || (access.is_enabled() && write_refusal(access, &topic.name).is_some())
        {
            continue;
        }
        for (partition_index, data) in topic_data.partition_data.iter().enumerate() {
            let Some((header, _)) = data.records.as_deref().and_then(|r| BatchIter::new(r).next()) else {
                continue;
            };
            if !header.is_transactional() || header.is_control() {
                continue;
            }
            let this = (header.producer_id, header.producer_epoch);
            if producer.is_some_and(|p| p != this) {
                return Err(Refusal::new(
                    ResponseError::InvalidProducerIdMapping,
                    "the request's transactional batches come from more than one producer id or epoch",
                ));
            }
            producer = Some(this);
            let Ok((partition, _)) = broker.replicas.leader_partition(topic, data.index) else {
                continue;
            };
            if let Some(guard) = partition.start_txn_verification(
                header.producer_id,
                header.producer_epoch,
                header.base_sequence,
                pending.add,
            ) {
                pending
                    .partitions
                    .push((topic_index, partition_index, topic.name.clone(), data.index, guard));
            }
        }
    }
    if let Some((producer_id, producer_epoch)) = producer {
        pending.producer_id = producer_id;
        pending.producer_epoch = producer_epoch;
    }
    Ok(pending)
}

/// Whether a partition's first batch is transactional (the attributes' bit 4), as Kafka's
/// `hasTransactionalRecords` looks at it; malformed data is judged later, per partition.
fn has_transactional_records(request: &ProduceRequest) -> bool {
    use sluice_protocol::batch::ATTRIBUTES_OFFSET;
    request
        .topic_data
        .iter()
        .flat_map(|t| t.partition_data.iter())
        .filter_map(|p| p.records.as_ref())
        .any(|records| records.get(ATTRIBUTES_OFFSET + 1).is_some_and(|low| low & 0x10 != 0))
}

/// Why a request naming `transactional_id` may not write under it, if it may not.
fn transactional_refusal(access: Access<'_>, transactional_id: Option<&str>) -> Option<String> {
    let id = transactional_id.filter(|id| !id.is_empty())?;
    let allowed = access.authorize(AclOperation::Write, ResourceType::TransactionalId, id);
    (!allowed).then(|| access.denied(AclOperation::Write, ResourceType::TransactionalId, id))
}

/// Why the principal may not write to the topic `name`, if it may not.
fn write_refusal(access: Access<'_>, name: &str) -> Option<String> {
    let allowed = access.authorize(AclOperation::Write, ResourceType::Topic, name);
    (!allowed).then(|| access.denied(AclOperation::Write, ResourceType::Topic, name))
}

/// The whole request refused: every partition answered `error`, nothing appended. An acks=0
/// producer gets no answer, so its connection closes, as Kafka does.
fn refuse_all(request: ProduceRequest, error: ResponseError, message: String) -> Reply {
    if request.acks == 0 {
        return Reply::Close(format!("an acks=0 produce was refused: {message}"));
    }
    let responses = request
        .topic_data
        .into_iter()
        .map(|topic| {
            let partitions = topic
                .partition_data
                .iter()
                .map(|p| partition_response(p.index, Err(Refusal::new(error, message.clone()))))
                .collect();
            TopicProduceResponse::default()
                .with_name(topic.name)
                .with_topic_id(topic.topic_id)
                .with_partition_responses(partitions)
        })
        .collect();
    Reply::Now(ResponseBody::Produce(
        ProduceResponse::default().with_responses(responses),
    ))
}

/// Offsets assigned by a successful append.
struct Appended {
    base_offset: i64,
    log_append_time_ms: i64,
    log_start_offset: i64,
    /// Records and bytes this append stored (none for a retry already in the log).
    stored: Option<(u64, u64)>,
}

#[allow(clippy::too_many_arguments)]
fn append(
    broker: &Broker,
    image: &MetadataImage,
    topic: &TopicImage,
    index: i32,
    records: Option<Bytes>,
    acks: i16,
    verified: TxnVerification,
    now: i64,
) -> Result<(Appended, Option<DelayedProduce>), Refusal> {
    let (partition, registration) = leader_replica(broker, topic, index)?;
    let defaults = broker.topic_defaults(image);
    let min_isr = topic_config::min_insync_replicas(&topic.configs, &defaults, registration.replicas.len());
    if acks == -1 {
        let isr = partition.isr_size();
        if isr < min_isr {
            return Err(Refusal::new(
                ResponseError::NotEnoughReplicas,
                format!("{isr} in-sync replica(s), fewer than min.insync.replicas={min_isr}; the write was refused"),
            ));
        }
    }
    let records = records.filter(|r| !r.is_empty()).ok_or_else(|| {
        Refusal::new(
            ResponseError::CorruptMessage,
            "the produce request carries no record batch",
        )
    })?;
    validate_batches(&records).map_err(|e| batch_error(&e))?;
    let cleanup_policy = topic_config::effective_value("cleanup.policy", &topic.configs, &defaults);
    let rules = RecordRules {
        timestamps: timestamp_limits(&defaults, topic),
        keys_required: topic_config::cleanup_policy_includes(&cleanup_policy, "compact"),
        max_decompressed_bytes: topic_config::max_message_bytes(&topic.configs, &defaults) as usize,
    };
    check_records(&records, &rules, now)?;
    let compressor = topic_config::compressor(&topic.configs, &defaults);
    let mut batches = batches_to_store(&records, compressor, rules.max_decompressed_bytes)?;
    let leader_epoch = partition.leader_epoch();
    let (appended, required_offset) = match partition.append_as_leader_verified(&mut batches, now, verified)? {
        AppendOutcome::Appended(info) => (
            Appended {
                base_offset: info.base_offset,
                log_append_time_ms: info.log_append_time_ms,
                log_start_offset: info.log_start_offset,
                stored: Some(((info.last_offset - info.base_offset + 1) as u64, batches.len() as u64)),
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
                stored: None,
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

/// The partition's leader replica here. When the image already names this broker leader but
/// its replica is not open or not leading yet (the hosted partitions are still catching up
/// with the image, e.g. opening a batch of new partitions one by one), this waits for that
/// catch-up inline rather than refusing: an acks=0 producer would lose the records, and
/// waiting here, on the connection's reader, keeps this request and the ones after it in order.
fn leader_replica<'a>(
    broker: &Broker,
    topic: &'a TopicImage,
    index: i32,
) -> Result<(Arc<Partition>, &'a PartitionRegistration), AppendError> {
    let found = broker.replicas.leader_partition_or_explain(topic, index);
    let leading = matches!(&found, Ok((partition, _)) if partition.is_leader());
    let led_here = usize::try_from(index)
        .ok()
        .and_then(|i| topic.partitions.get(i))
        .is_some_and(|r| r.leader == broker.config.node_id);
    if leading || !led_here {
        return found;
    }
    broker.catch_up_with_metadata();
    broker.replicas.leader_partition_or_explain(topic, index)
}

fn partition_response(index: i32, result: Result<Appended, Refusal>) -> PartitionProduceResponse {
    let response = PartitionProduceResponse::default().with_index(index);
    match result {
        Ok(a) => response
            .with_base_offset(a.base_offset)
            .with_log_append_time_ms(a.log_append_time_ms)
            .with_log_start_offset(a.log_start_offset),
        Err(refusal) => response
            .with_error_code(refusal.error.code())
            .with_base_offset(-1)
            .with_log_append_time_ms(-1)
            .with_log_start_offset(-1)
            .with_error_message(Some(str_bytes(refusal.message)))
            .with_record_errors(
                refusal
                    .record_errors
                    .into_iter()
                    .map(|(batch_index, message)| {
                        BatchIndexAndErrorMessage::default()
                            .with_batch_index(batch_index)
                            .with_batch_index_error_message(Some(str_bytes(message)))
                    })
                    .collect(),
            ),
    }
}

/// Why a partition's records were refused: the Kafka error and its reason, plus (KIP-467,
/// Produce v8+) the records at fault by their index in the partition's records, so the client
/// fails only those. An empty list fails the whole batch.
struct Refusal {
    error: ResponseError,
    message: String,
    record_errors: Vec<(i32, String)>,
}

impl Refusal {
    fn new(error: ResponseError, message: impl Into<String>) -> Refusal {
        Refusal {
            error,
            message: message.into(),
            record_errors: Vec::new(),
        }
    }
}

impl From<(ResponseError, String)> for Refusal {
    fn from((error, message): (ResponseError, String)) -> Refusal {
        Refusal::new(error, message)
    }
}

/// The Kafka error a refused batch is answered with, and its reason.
fn batch_error(error: &BatchError) -> Refusal {
    Refusal::new(error.response_error(), error.to_string())
}

/// The partition's batches as the leader stores them: as received when the topic's
/// `compression.type` is `producer` or a batch already uses its codec, else recompressed to it
/// (Kafka's LogValidator), decompressing within `max_decompressed_bytes` as every record decode
/// does. The rebuilt batch keeps its offsets, timestamps and producer fields, and the log checks
/// its new size against `max.message.bytes`. Done inline like the record checks above: appends
/// follow request order on the connection. `records` passed [`validate_batches`].
fn batches_to_store(
    records: &Bytes,
    compressor: Option<Compressor>,
    max_decompressed_bytes: usize,
) -> Result<BytesMut, Refusal> {
    let Some(compressor) = compressor else {
        return Ok(BytesMut::from(&records[..]));
    };
    let mut out = BytesMut::with_capacity(records.len());
    for (_, range) in BatchIter::new(records) {
        let batch = &records[range];
        match recompress_batch(batch, compressor, max_decompressed_bytes).map_err(|e| batch_error(&e))? {
            Some(rebuilt) => out.extend_from_slice(&rebuilt),
            None => out.extend_from_slice(batch),
        }
    }
    Ok(out)
}

/// The per-record rules a topic's records must meet.
struct RecordRules {
    /// CreateTime limits; `None` for LogAppendTime topics.
    timestamps: Option<TimestampLimits>,
    /// Compaction keeps the latest record per key, so a compacted topic refuses records
    /// without one, as Kafka does.
    keys_required: bool,
    /// A compressed batch may decompress to at most this (the topic's `max.message.bytes`).
    max_decompressed_bytes: usize,
}

/// How far CreateTime timestamps may stray from the broker's clock
/// (`message.timestamp.before.max.ms` / `message.timestamp.after.max.ms`).
struct TimestampLimits {
    before_ms: i64,
    after_ms: i64,
}

impl TimestampLimits {
    fn allows(&self, timestamp: i64, now: i64) -> bool {
        timestamp < 0
            || (timestamp.saturating_sub(now) <= self.after_ms && now.saturating_sub(timestamp) <= self.before_ms)
    }
}

fn timestamp_limits(defaults: &BrokerOverrides, topic: &TopicImage) -> Option<TimestampLimits> {
    let value = |name: &str| topic_config::effective_value(name, &topic.configs, defaults);
    if value("message.timestamp.type") == "LogAppendTime" {
        return None;
    }
    Some(TimestampLimits {
        before_ms: value("message.timestamp.before.max.ms").parse().unwrap_or(i64::MAX),
        after_ms: value("message.timestamp.after.max.ms").parse().unwrap_or(i64::MAX),
    })
}

/// Checks every batch against the topic's rules. Control batches from clients fail whole.
/// Records are decoded only when a rule needs them: on compacted topics (every record needs a
/// key) and when a batch's first or largest timestamp is out of range (to find which records
/// are); other batches are judged by their header alone. Offending records are reported by
/// index (KIP-467) with INVALID_TIMESTAMP if any timestamp is at fault, else INVALID_RECORD,
/// as Kafka's log validator answers. `records` passed [`validate_batches`].
fn check_records(records: &[u8], rules: &RecordRules, now: i64) -> Result<(), Refusal> {
    let mut record_errors: Vec<(i32, String)> = Vec::new();
    let mut any_timestamp_error = false;
    let mut first_index = 0i32;
    for (header, range) in BatchIter::new(records) {
        if header.is_control() {
            return Err(Refusal::new(
                ResponseError::InvalidRecord,
                "clients may not produce control batches",
            ));
        }
        let limits = rules.timestamps.as_ref();
        let timestamps_suspect =
            limits.is_some_and(|l| !l.allows(header.base_timestamp, now) || !l.allows(header.max_timestamp, now));
        if rules.keys_required || timestamps_suspect {
            let batch =
                BatchRecords::decode(&records[range], rules.max_decompressed_bytes).map_err(|e| batch_error(&e))?;
            for (i, record) in batch.iter().enumerate() {
                let index = first_index.saturating_add(i as i32);
                if rules.keys_required && record.key.is_none() {
                    record_errors.push((index, "compacted topics only accept records with a key".to_string()));
                }
                let timestamp = header.base_timestamp.saturating_add(record.timestamp_delta);
                if let Some(limits) = limits.filter(|l| !l.allows(timestamp, now)) {
                    any_timestamp_error = true;
                    record_errors.push((
                        index,
                        format!(
                            "timestamp {timestamp} is outside message.timestamp.before.max.ms={} / after.max.ms={} of the broker clock {now}",
                            limits.before_ms, limits.after_ms
                        ),
                    ));
                }
            }
        }
        first_index = first_index.saturating_add(header.records_count);
    }
    if record_errors.is_empty() {
        return Ok(());
    }
    let (error, what) = if any_timestamp_error {
        (ResponseError::InvalidTimestamp, "an invalid timestamp")
    } else {
        (ResponseError::InvalidRecord, "no key on a compacted topic")
    };
    let message = format!(
        "{} record(s) refused for {what}; the first at index {}: {}",
        record_errors.len(),
        record_errors[0].0,
        record_errors[0].1
    );
    Err(Refusal {
        error,
        message,
        record_errors,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions};
    use sluice_protocol::batch::test_support::encode_simple_batch;
    use sluice_protocol::batch::{CRC_COVERED_FROM, CRC_OFFSET, RECORDS_COUNT_OFFSET};
    use sluice_protocol::records::producer_record;

    const NOW: i64 = 1_800_000_000_000;

    /// One zstd batch of records with `keys`, 1000-byte values and `timestamps`, as a client
    /// encodes it.
    fn zstd_batch_at(keys: &[Option<&str>], timestamps: &[i64]) -> Vec<u8> {
        let records: Vec<Record> = keys
            .iter()
            .zip(timestamps)
            .enumerate()
            .map(|(i, (key, &timestamp))| {
                let key = key.map(|k| Bytes::copy_from_slice(k.as_bytes()));
                producer_record(i as i64, timestamp, key, Some(Bytes::from(vec![b'v'; 1000])))
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

    fn zstd_batch(keys: &[Option<&str>]) -> Vec<u8> {
        zstd_batch_at(keys, &vec![NOW; keys.len()])
    }

    fn compacted(max_decompressed_bytes: usize) -> RecordRules {
        RecordRules {
            timestamps: None,
            keys_required: true,
            max_decompressed_bytes,
        }
    }

    fn within(before_ms: i64, after_ms: i64) -> RecordRules {
        RecordRules {
            timestamps: Some(TimestampLimits { before_ms, after_ms }),
            keys_required: false,
            max_decompressed_bytes: 1_000_000,
        }
    }

    fn indexes(refusal: &Refusal) -> Vec<i32> {
        refusal.record_errors.iter().map(|(i, _)| *i).collect()
    }

    #[test]
    fn keyless_records_on_a_compacted_topic_are_listed_by_index() {
        let keyed = zstd_batch(&[Some("a"), Some("b")]);
        assert!(check_records(&keyed, &compacted(1_000_000), NOW).is_ok());
        // Indexes count across the batches of the partition's records.
        let mut blob = keyed.clone();
        blob.extend_from_slice(&zstd_batch(&[Some("c"), None, Some("d"), None]));
        let refusal = check_records(&blob, &compacted(1_000_000), NOW).unwrap_err();
        assert_eq!(refusal.error, ResponseError::InvalidRecord);
        assert_eq!(indexes(&refusal), vec![3, 5], "{}", refusal.message);
        // Not compacted: keyless records are fine and nothing is decoded.
        let plain = RecordRules {
            keys_required: false,
            ..compacted(1)
        };
        assert!(check_records(&blob, &plain, NOW).is_ok());
    }

    #[test]
    fn batches_that_cannot_be_decoded_fail_whole() {
        let keyed = zstd_batch(&[Some("a"), Some("b")]);
        // Two 1000-byte values do not fit in 1500 bytes once decompressed.
        let refusal = check_records(&keyed, &compacted(1_500), NOW).unwrap_err();
        assert_eq!(refusal.error, ResponseError::RecordListTooLarge, "{}", refusal.message);
        assert!(refusal.record_errors.is_empty());
        // A record count the decompressed records do not hold.
        let mut lying = keyed.clone();
        lying[RECORDS_COUNT_OFFSET..RECORDS_COUNT_OFFSET + 4].copy_from_slice(&1i32.to_be_bytes());
        let crc = crc32c::crc32c(&lying[CRC_COVERED_FROM..]);
        lying[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
        assert_eq!(
            check_records(&lying, &compacted(1_000_000), NOW).unwrap_err().error,
            ResponseError::CorruptMessage
        );
    }

    #[test]
    fn timestamps_beyond_the_topic_limits_are_listed_by_index() {
        let rules = within(60_000, 3_600_000);
        assert!(check_records(&encode_simple_batch(3, 10, NOW), &rules, NOW).is_ok());
        let future = check_records(&encode_simple_batch(3, 10, NOW + 3_700_000), &rules, NOW).unwrap_err();
        assert_eq!(future.error, ResponseError::InvalidTimestamp);
        assert_eq!(indexes(&future), vec![0, 1, 2]);
        let past = check_records(&encode_simple_batch(3, 10, NOW - 120_000), &rules, NOW).unwrap_err();
        assert_eq!(past.error, ResponseError::InvalidTimestamp);
        // Only the record out of range is at fault, not its batch.
        let mixed = zstd_batch_at(&[Some("a"), Some("b"), Some("c")], &[NOW, NOW + 7_200_000, NOW - 1]);
        let refusal = check_records(&mixed, &rules, NOW).unwrap_err();
        assert_eq!(refusal.error, ResponseError::InvalidTimestamp);
        assert_eq!(indexes(&refusal), vec![1], "{}", refusal.message);
        // LogAppendTime topics take any client timestamp.
        let log_append_time = RecordRules {
            timestamps: None,
            ..within(0, 0)
        };
        assert!(check_records(&encode_simple_batch(3, 10, NOW + 3_700_000), &log_append_time, NOW).is_ok());
    }

    #[test]
    fn batches_are_stored_in_the_topics_codec_or_as_received() {
        let zstd = zstd_batch(&[Some("a"), None]);
        let mut both = zstd.clone();
        both.extend_from_slice(&encode_simple_batch(3, 10, NOW));
        let both = Bytes::from(both);
        let as_received = batches_to_store(&both, None, 1 << 20).ok().unwrap();
        assert_eq!(&as_received[..], &both[..], "compression.type=producer");

        let stored = batches_to_store(&both, Some(Compressor::new(4)), 1 << 20).ok().unwrap();
        validate_batches(&stored).unwrap();
        let batches: Vec<_> = BatchIter::new(&stored).collect();
        assert_eq!(batches.len(), 2);
        assert_eq!(
            &stored[batches[0].1.clone()],
            &zstd[..],
            "already zstd: stored as received"
        );
        assert_eq!((batches[1].0.compression(), batches[1].0.records_count), (4, 3));

        // Two 1000-byte values do not fit in 1500 bytes once decompressed.
        let refusal = batches_to_store(&both, Some(Compressor::new(1)), 1_500).err().unwrap();
        assert_eq!(refusal.error, ResponseError::RecordListTooLarge, "{}", refusal.message);
    }

    #[test]
    fn a_timestamp_error_outranks_a_missing_key() {
        let rules = RecordRules {
            keys_required: true,
            ..within(60_000, 60_000)
        };
        let batch = zstd_batch_at(&[None, Some("b")], &[NOW, NOW + 120_000]);
        let refusal = check_records(&batch, &rules, NOW).unwrap_err();
        assert_eq!(refusal.error, ResponseError::InvalidTimestamp);
        assert_eq!(indexes(&refusal), vec![0, 1]);
    }

    mod authorization {
        use super::super::*;
        use crate::api::testing::Acls;
        use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
        use kafka_protocol::messages::{TopicName, TransactionalId};

        #[test]
        fn writing_to_a_topic_needs_write_on_it() {
            let acls = Acls::none().allow(ResourceType::Topic, "orders", AclOperation::Write);
            assert_eq!(write_refusal(acls.access(), "orders"), None);
            let refusal = write_refusal(acls.access(), "payments").expect("no WRITE on payments");
            assert!(refusal.contains("WRITE") && refusal.contains("payments"), "{refusal}");
            // DESCRIBE or READ does not let a principal write.
            let readers = Acls::none().allow(ResourceType::Topic, "orders", AclOperation::Read);
            assert!(write_refusal(readers.access(), "orders").is_some());
            assert_eq!(write_refusal(Acls::disabled().access(), "orders"), None);
            let denied = Acls::none()
                .allow(ResourceType::Topic, "orders", AclOperation::All)
                .deny(ResourceType::Topic, "orders", AclOperation::Write);
            assert!(write_refusal(denied.access(), "orders").is_some(), "a DENY wins");
        }

        #[test]
        fn a_transactional_id_needs_write_on_it_and_its_refusal_fails_every_partition() {
            let acls = Acls::none().allow(ResourceType::TransactionalId, "tx-1", AclOperation::Write);
            assert_eq!(transactional_refusal(acls.access(), Some("tx-1")), None);
            assert_eq!(transactional_refusal(acls.access(), None), None, "not transactional");
            let message = transactional_refusal(acls.access(), Some("tx-2")).expect("no WRITE on tx-2");
            let partition = |index| PartitionProduceData::default().with_index(index);
            let request = |acks| {
                ProduceRequest::default()
                    .with_acks(acks)
                    .with_transactional_id(Some(TransactionalId(str_bytes("tx-2"))))
                    .with_topic_data(vec![TopicProduceData::default()
                        .with_name(TopicName(str_bytes("orders")))
                        .with_partition_data(vec![partition(0), partition(1)])])
            };
            let Reply::Now(ResponseBody::Produce(response)) = refuse_all(
                request(-1),
                ResponseError::TransactionalIdAuthorizationFailed,
                message.clone(),
            ) else {
                panic!("acks=all is answered");
            };
            let codes: Vec<i16> = response.responses[0]
                .partition_responses
                .iter()
                .map(|p| p.error_code)
                .collect();
            let refused = ResponseError::TransactionalIdAuthorizationFailed.code();
            assert_eq!(codes, vec![refused, refused]);
            assert!(matches!(
                refuse_all(request(0), ResponseError::TransactionalIdAuthorizationFailed, message),
                Reply::Close(_)
            ));
        }
    }

    #[tokio::test]
    async fn deferred_appends_take_turns_in_request_order_whatever_order_their_tasks_run() {
        let order = Arc::new(AppendOrder::default());
        assert!(!order.is_busy(), "a new connection has no open turn");
        let appended = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let first = order.take_turn();
        assert!(order.is_busy());
        // The second and third start before the first is over, the third's task first.
        let tasks: Vec<_> = [order.take_turn(), order.take_turn()]
            .into_iter()
            .enumerate()
            .rev()
            .map(|(i, mut turn)| {
                let appended = appended.clone();
                tokio::spawn(async move {
                    turn.wait().await;
                    appended.lock().push(i + 2);
                })
            })
            .collect();
        tokio::task::yield_now().await;
        assert!(appended.lock().is_empty(), "no turn may pass the open first one");
        appended.lock().push(1);
        drop(first);
        for task in tasks {
            task.await.expect("turn task");
        }
        assert_eq!(*appended.lock(), vec![1, 2, 3]);
        assert!(!order.is_busy(), "every turn is over");
    }

    #[tokio::test]
    async fn a_turn_dropped_without_appending_lets_the_next_go() {
        let order = AppendOrder::default();
        let abandoned = order.take_turn();
        let mut next = order.take_turn();
        drop(abandoned);
        tokio::time::timeout(Duration::from_secs(5), next.wait())
            .await
            .expect("the turn after an abandoned one goes");
    }
}

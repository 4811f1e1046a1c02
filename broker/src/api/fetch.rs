//! Fetch: stored batches served as stored, with Kafka's long poll. A fetch that finds fewer
//! than `min_bytes` waits until a partition's high watermark moves (never by polling) or
//! `max_wait_ms` passes, then reads again.
//!
//! A fetch with a replica id (>= 0) is a follower's only if it passes Kafka's replica identity
//! check (KIP-903: v15+, the broker's current broker epoch, a member of the replica set). Then
//! the replica manager records its fetch offset as its log end offset
//! (`ReplicaManager::partition_for_fetch`, which may advance the high watermark or bring it
//! back into the ISR), it reads up to the log end rather than the high watermark, and it waits
//! for the log to grow. A claim that fails the check is answered with per-partition errors
//! and changes nothing. The long poll itself is `purgatory::DelayedFetch`.
//!
//! With an authorizer, a follower's fetch needs CLUSTER_ACTION on the cluster (else, as Kafka
//! answers, every partition it names gets TOPIC_AUTHORIZATION_FAILED, before any session, read
//! or follower state is touched), and a consumer's needs READ on each topic: a refused topic's
//! partitions are answered TOPIC_AUTHORIZATION_FAILED (in a fetch session too) and are not
//! read. Each topic is authorized once per request, and not at all without an authorizer.
//!
//! A consumer's response counts against its `consumer_byte_rate` quota: past it, the answer
//! is empty with the throttle time, the bytes are not counted, and the connection pauses
//! reading; a consumer never gets more in one response than its quota over the window.
//!
//! Responses are capped: at most min(`max_bytes`, `fetch.max.bytes`) record bytes for a
//! consumer, min(`max_bytes`, `replica.fetch.response.max.bytes`) for a follower, and at most
//! `partition_max_bytes` per partition, except that the first batch of the first partition with
//! data goes whole (KIP-74). Each read pass is planned under the partitions' locks in the
//! handler (request order, no disk I/O). A pass whose every read lies in the partitions' tail
//! caches (what was just appended: caught-up followers and consumers) is answered from memory
//! on the spot; any other is read on the blocking pool, at most `num.io.threads` at once.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::FutureExt;
use kafka_protocol::error::ResponseError;
use parking_lot::Mutex;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::fetch_response::{AbortedTransaction, FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse, ProducerId, TopicName};
use sluice_protocol::ResponseBody;
use tokio::sync::Semaphore;
use tokio::time::Instant;
use uuid::Uuid;

use super::{Access, Reply, RequestContext, Session};
use crate::broker::Broker;
use crate::clock::now_ms;
use crate::config::ReplicaSelector;
use crate::fetch_session::{self, FetchSession, SessionFetch, SessionKey, TopicRef};
use crate::log::{AbortedTxn, LogError};
use crate::metadata::acls::{AclOperation, ResourceType};
use crate::metrics::{BrokerMetrics, RackLocality};
use crate::partition::{Partition, PartitionRead, ReadBound, WatchSet};
use crate::purgatory::{DelayedFetch, FetchWake};
use crate::quota::ReplicationQuota;
use crate::replica_manager::{check_follower_identity, preferred_read_replica, FetchParty};
use crate::replication::FIRST_FETCH_VERSION_WITH_REPLICA_STATE;

/// Fetch v7 brings incremental fetch sessions (KIP-227).
const FIRST_VERSION_WITH_SESSIONS: i16 = 7;
/// Fetch v11 names the consumer's rack (KIP-392): from it on, a consumer may read from a
/// follower, and a leader may name the replica it should read from.
const FIRST_VERSION_WITH_RACK: i16 = 11;
/// Fetch v13 names topics by id; earlier versions by name.
const FIRST_VERSION_WITH_TOPIC_IDS: i16 = 13;
/// Kafka's `READ_COMMITTED` isolation level.
const READ_COMMITTED: i8 = 1;
/// Longest long-poll honoured, so a request cannot pin a connection indefinitely.
const MAX_WAIT_CAP: Duration = Duration::from_secs(60);

/// One requested partition, resolved against the image once per request.
#[derive(Clone)]
struct Target {
    fetch_offset: i64,
    /// `partition_max_bytes`, already clamped to the response cap.
    partition_max_bytes: usize,
    current_leader_epoch: i32,
    index: i32,
    partition: Result<Arc<Partition>, ResponseError>,
    /// An out-of-sync follower's read of a replica the leader throttles.
    throttled: bool,
    /// The follower this leader sends the consumer to instead of reading (KIP-392).
    preferred_read_replica: Option<i32>,
}

#[derive(Clone)]
struct TopicTargets {
    name: TopicName,
    /// How the request's session (if any) names the topic.
    session_ref: TopicRef,
    /// The topic's name when it exists (v13+ requests name topics by id only).
    known_as: Option<String>,
    topic_id: Uuid,
    partitions: Vec<Target>,
}

/// The request, resolved, plus how to shape the response.
#[derive(Clone)]
struct FetchPlan {
    topics: Vec<TopicTargets>,
    /// Record bytes the response may carry: the request's `max_bytes` within the broker's cap.
    max_bytes: usize,
    min_bytes: usize,
    read_committed: bool,
    by_topic_id: bool,
    /// A verified follower's fetch: read to the log end.
    from_follower: bool,
    /// The leader's replication throttle and its bound (bytes/s), when one is set and this
    /// is a follower's fetch.
    throttle: Option<(Arc<ReplicationQuota>, f64)>,
    /// A consumer's rack against this broker's, for the bytes it is sent.
    locality: RackLocality,
}

/// One partition of a read pass: its answer already (an error), or its read, planned.
enum PartitionPass {
    Answered(PartitionData),
    Planned {
        read: PartitionRead,
        partition: Arc<Partition>,
    },
}

/// A read pass over the plan: one entry per requested partition, in request order.
type ReadPass = Vec<PartitionPass>;

pub fn handle(ctx: &RequestContext, request: FetchRequest) -> Reply {
    let version = ctx.version;
    let client_id = ctx.client_id();
    let (broker, who) = (&ctx.broker, &ctx.session);
    if broker.security.authorizer.is_enabled() && replica_id(&request, version) >= 0 {
        let image = broker.metadata.image();
        if !follower_may_fetch(who.access(&broker.security.authorizer, &image.acls)) {
            return Reply::Now(ResponseBody::Fetch(follower_refused(&request)));
        }
    }
    let claimed = replica_id(&request, version);
    let session = if version >= FIRST_VERSION_WITH_SESSIONS {
        let begun = broker.fetch_sessions.begin(
            request.session_id,
            request.session_epoch,
            version >= FIRST_VERSION_WITH_TOPIC_IDS,
            (claimed >= 0).then_some(claimed),
            &request.topics,
            &request.forgotten_topics_data,
            now_ms(),
        );
        match begun {
            Ok(session) => session,
            // The client starts over with a full fetch.
            Err(error) => {
                return Reply::Now(ResponseBody::Fetch(
                    FetchResponse::default().with_error_code(error.code()),
                ))
            }
        }
    } else {
        SessionFetch::Sessionless
    };
    let topics = match &session {
        SessionFetch::Incremental { topics, .. } => topics.as_slice(),
        _ => request.topics.as_slice(),
    };
    let tracked = watch_set(&session);
    let plan = Arc::new(resolve(
        broker,
        &request,
        topics,
        version,
        client_id,
        who,
        tracked.as_ref(),
    ));
    let max_wait = Duration::from_millis(request.max_wait_ms.max(0) as u64).min(MAX_WAIT_CAP);
    if let Some(set) = tracked {
        return answer_tracked(ctx, request, session, set, plan, max_wait);
    }
    // Watching starts before the first read so a write between the read and the wait is not missed.
    let mut delayed = DelayedFetch::new(
        plan.topics
            .iter()
            .flat_map(|t| t.partitions.iter())
            .filter_map(|p| p.partition.as_ref().ok()),
        read_bound(&plan),
        Instant::now() + max_wait,
    );
    // Where consumers read from followers (`replica.selector.class`), a follower's fetch also
    // ends when a high watermark moves, and one in a session is answered at once when it was
    // told an older one than the partition has now: consumers it serves read only below the
    // one it knows. Elsewhere this would only cost follower round trips (a quarter more
    // broker CPU at the seed load).
    let tell_followers = plan.from_follower && broker.config.replica_selector != ReplicaSelector::Leader;
    if tell_followers {
        delayed.wake_on_high_watermark();
    }
    if let (true, SessionFetch::Incremental { session, .. }) = (tell_followers, &session) {
        let session = session.lock();
        let known = plan.topics.iter().flat_map(|topic| {
            topic
                .partitions
                .iter()
                .filter(|p| p.partition.is_ok())
                .map(|p| session.high_watermark_sent(&(topic.session_ref.clone(), p.index)))
        });
        delayed.known_high_watermarks(known);
    }
    // Planned here, in request order (a produce read after this fetch is not in its answer);
    // read below, off the async workers.
    let first_pass = plan_pass(&plan);
    let permits = broker.replicas.fetch_read_permits().clone();
    // Followers are never client-throttled.
    let quota = (!plan.from_follower).then(|| (broker.clone(), who.quota_user().to_string(), client_id.to_string()));
    let metrics = broker.metrics.clone();
    Reply::Later(
        async move {
            let (response, bytes) = async {
                let (response, bytes, had_error) = read_pass(&permits, &plan, first_pass).await;
                if bytes >= plan.min_bytes || had_error || max_wait.is_zero() || delayed.is_empty() {
                    return (response, bytes);
                }
                loop {
                    let woken = delayed.wait().await;
                    let (response, bytes, had_error) = read_pass(&permits, &plan, plan_pass(&plan)).await;
                    if woken != FetchWake::Changed || bytes >= plan.min_bytes || had_error {
                        return (response, bytes);
                    }
                }
            }
            .await;
            let response = match quota {
                Some((broker, user, client_id)) => apply_quota(&broker, &user, &client_id, response, bytes),
                None => response,
            };
            let response = answer_in_session(&session, &plan, response);
            count_sent(&metrics, &plan, &response);
            ResponseBody::Fetch(response)
        }
        .boxed(),
    )
}

/// The watch set of a follower's session (see `fetch_session`), if the request has one.
fn watch_set(session: &SessionFetch) -> Option<Arc<WatchSet>> {
    match session {
        SessionFetch::Full { session: Some(session) } | SessionFetch::Incremental { session, .. } => {
            session.lock().watch_set().cloned()
        }
        _ => None,
    }
}

/// Subscribes a follower's session to each partition the plan resolved (before any is read,
/// so no change after the read goes unseen); one that resolved to an error is read again at
/// the next fetch.
fn watch_targets(session: &Mutex<FetchSession>, plan: &FetchPlan) {
    let mut session = session.lock();
    for topic in &plan.topics {
        for target in &topic.partitions {
            let key = (topic.session_ref.clone(), target.index);
            session.watch(&key, target.partition.as_ref().map_err(|_| ()));
        }
    }
}

/// A follower's fetch in a session by topic id: reads what the request named and what changed
/// since the last fetch, and long-polls on the session's watch set, adding each partition that
/// changes meanwhile to what it reads. No work for a partition that did not change.
fn answer_tracked(
    ctx: &RequestContext,
    request: FetchRequest,
    session: SessionFetch,
    set: Arc<WatchSet>,
    plan: Arc<FetchPlan>,
    max_wait: Duration,
) -> Reply {
    let (broker, who, version) = (ctx.broker.clone(), ctx.session.clone(), ctx.version);
    let client_id = ctx.client_id().to_string();
    let tracked_session = match &session {
        SessionFetch::Full { session: Some(s) } | SessionFetch::Incremental { session: s, .. } => s.clone(),
        _ => unreachable!("only a session has a watch set"),
    };
    watch_targets(&tracked_session, &plan);
    let deadline = Instant::now() + max_wait;
    let tell_followers = plan.from_follower && broker.config.replica_selector != ReplicaSelector::Leader;
    let first_pass = plan_pass(&plan);
    let permits = broker.replicas.fetch_read_permits().clone();
    let metrics = broker.metrics.clone();
    Reply::Later(
        async move {
            let mut plan = plan;
            let (mut response, mut bytes, mut had_error) = read_pass(&permits, &plan, first_pass).await;
            let mut done = bytes >= plan.min_bytes || had_error || max_wait.is_zero();
            if !done && tell_followers {
                done = high_watermark_news(&tracked_session, &plan);
            }
            while !done {
                let expired = tokio::time::timeout_at(deadline, set.changed()).await.is_err();
                let planned: HashSet<SessionKey> = plan
                    .topics
                    .iter()
                    .flat_map(|t| t.partitions.iter().map(|p| (t.session_ref.clone(), p.index)))
                    .collect();
                let (any_changed, extra) = tracked_session.lock().changed_beyond(&planned);
                if !any_changed && !expired {
                    continue; // a wake-up left from before the last look
                }
                if !extra.is_empty() {
                    let more = resolve(&broker, &request, &extra, version, &client_id, &who, Some(&set));
                    watch_targets(&tracked_session, &more);
                    plan = Arc::new(merged(plan, more));
                }
                (response, bytes, had_error) = read_pass(&permits, &plan, plan_pass(&plan)).await;
                done = expired || bytes >= plan.min_bytes || had_error;
                if !done && tell_followers {
                    done = high_watermark_news(&tracked_session, &plan);
                }
            }
            let response = answer_in_session(&session, &plan, response);
            count_sent(&metrics, &plan, &response);
            ResponseBody::Fetch(response)
        }
        .boxed(),
    )
}

/// Whether a planned partition's high watermark is past the one the follower was last told
/// (where consumers read from followers, a follower is told it at once).
fn high_watermark_news(session: &Mutex<FetchSession>, plan: &FetchPlan) -> bool {
    let session = session.lock();
    plan.topics.iter().any(|topic| {
        topic.partitions.iter().any(|target| {
            let Ok(partition) = &target.partition else { return false };
            let key = (topic.session_ref.clone(), target.index);
            session
                .high_watermark_sent(&key)
                .is_none_or(|sent| partition.high_watermark() > sent)
        })
    })
}

/// `plan` with `more`'s partitions added (to their topic's entry where it has one).
fn merged(plan: Arc<FetchPlan>, more: FetchPlan) -> FetchPlan {
    let mut plan = Arc::try_unwrap(plan).unwrap_or_else(|shared| (*shared).clone());
    for topic in more.topics {
        match plan.topics.iter_mut().find(|t| t.session_ref == topic.session_ref) {
            Some(existing) => existing.partitions.extend(topic.partitions),
            None => plan.topics.push(topic),
        }
    }
    plan
}

/// Shapes the response by the request's session: a full fetch that opened one names it and
/// records what the client was told; an incremental one keeps only partitions with news
/// (records, an error, a moved high watermark or log start offset), so unchanged partitions
/// cost nothing on the wire.
fn answer_in_session(session: &SessionFetch, plan: &FetchPlan, mut response: FetchResponse) -> FetchResponse {
    match session {
        SessionFetch::Sessionless | SessionFetch::Full { session: None } => response,
        SessionFetch::Full { session: Some(session) } => {
            let mut session = session.lock();
            settle(&mut session, plan, &response);
            for (topic, sent) in plan.topics.iter().zip(&response.responses) {
                for data in &sent.partitions {
                    let key = (topic.session_ref.clone(), data.partition_index);
                    session.sent_in_full(&key, data.high_watermark, data.log_start_offset);
                }
            }
            response.session_id = session.id();
            response
        }
        SessionFetch::Incremental { session, .. } => {
            let mut session = session.lock();
            settle(&mut session, plan, &response);
            let mut returned_records = Vec::new();
            for (topic, sent) in plan.topics.iter().zip(response.responses.iter_mut()) {
                sent.partitions.retain(|data| {
                    let key = (topic.session_ref.clone(), data.partition_index);
                    let has_records = data.records.as_ref().is_some_and(|r| !r.is_empty());
                    let send = session.must_send(
                        &key,
                        has_records || data.preferred_read_replica.0 >= 0,
                        data.error_code,
                        data.high_watermark,
                        data.log_start_offset,
                    );
                    if has_records {
                        returned_records.push(key);
                    }
                    send
                });
            }
            response.responses.retain(|t| !t.partitions.is_empty());
            session.rotate(&returned_records);
            response.session_id = session.id();
            response
        }
    }
}

/// A follower's session, as a fetch is answered: the partitions the next fetch reads again
/// whatever changes. Those with data the answer did not carry (cut by `max_bytes`, throttled),
/// an error, or a follower outside the ISR (its rejoining is decided on its fetches).
fn settle(session: &mut FetchSession, plan: &FetchPlan, response: &FetchResponse) {
    let Some(replica_id) = session.follower() else { return };
    for (topic, sent) in plan.topics.iter().zip(&response.responses) {
        for (target, data) in topic.partitions.iter().zip(&sent.partitions) {
            let again = match &target.partition {
                Err(_) => true,
                Ok(partition) => {
                    data.error_code != 0
                        || target.fetch_offset < partition.log_end_offset()
                        || !partition.isr_contains(replica_id)
                }
            };
            if again {
                session.carry_over((topic.session_ref.clone(), target.index));
            }
        }
    }
}

/// Counts what the response carries: per topic for a consumer (BytesOutPerSec) and by the
/// consumer's rack, as replication bytes for a follower.
fn count_sent(metrics: &BrokerMetrics, plan: &FetchPlan, response: &FetchResponse) {
    if plan.from_follower {
        let read: usize = plan.topics.iter().map(|t| t.partitions.len()).sum();
        metrics.follower_fetches.fetch_add(1, Ordering::Relaxed);
        metrics
            .follower_fetch_partitions_read
            .fetch_add(read as u64, Ordering::Relaxed);
    }
    let mut consumer_bytes = 0;
    for (topic, sent) in plan.topics.iter().zip(&response.responses) {
        for data in &sent.partitions {
            let records = data.records.as_deref().unwrap_or_default();
            if plan.from_follower {
                metrics
                    .replication_bytes_out
                    .fetch_add(records.len() as u64, Ordering::Relaxed);
            } else if let (Some(name), 0) = (&topic.known_as, data.error_code) {
                metrics.record_consumer_fetch(name, records);
                consumer_bytes += records.len() as u64;
            }
        }
    }
    if consumer_bytes > 0 {
        metrics.record_consumer_rack(plan.locality, consumer_bytes);
    }
}

/// Counts a consumer's response against its `consumer_byte_rate`. Past the quota the bytes
/// are taken back and the answer is empty, with the throttle time (as Kafka answers).
fn apply_quota(broker: &Broker, user: &str, client_id: &str, response: FetchResponse, bytes: usize) -> FetchResponse {
    let image = broker.metadata.image();
    let now = now_ms();
    let throttle_time_ms = broker.fetch_quotas.record(&image, user, client_id, bytes, now);
    if throttle_time_ms == 0 {
        return response;
    }
    broker.fetch_quotas.unrecord(&image, user, client_id, bytes, now);
    FetchResponse::default().with_throttle_time_ms(throttle_time_ms)
}

/// The replica id a fetch claims (-1 for a consumer).
fn replica_id(request: &FetchRequest, version: i16) -> i32 {
    if version >= FIRST_FETCH_VERSION_WITH_REPLICA_STATE {
        request.replica_state.replica_id.0
    } else {
        request.replica_id.0
    }
}

/// Whether a fetch claiming a replica id may fetch as a follower: CLUSTER_ACTION on the
/// cluster, which the brokers' own principal has.
fn follower_may_fetch(access: Access<'_>) -> bool {
    access.authorize_cluster(AclOperation::ClusterAction)
}

/// A follower's fetch without CLUSTER_ACTION on the cluster: every partition it names is
/// answered TOPIC_AUTHORIZATION_FAILED, as Kafka answers it, and nothing is read.
fn follower_refused(request: &FetchRequest) -> FetchResponse {
    let responses = request
        .topics
        .iter()
        .map(|t| {
            FetchableTopicResponse::default()
                .with_topic(t.topic.clone())
                .with_topic_id(t.topic_id)
                .with_partitions(
                    t.partitions
                        .iter()
                        .map(|p| {
                            PartitionData::default()
                                .with_partition_index(p.partition)
                                .with_error_code(ResponseError::TopicAuthorizationFailed.code())
                                .with_high_watermark(-1)
                        })
                        .collect(),
                )
        })
        .collect();
    FetchResponse::default().with_responses(responses)
}

/// Whether a consumer may read the topic `name`. Only asked with an authorizer on.
fn may_read(access: Access<'_>, name: &str) -> bool {
    access.authorize(AclOperation::Read, ResourceType::Topic, name)
}

/// The plan for `topics`: the request's own, or for an incremental fetch its session's.
fn resolve(
    broker: &Arc<Broker>,
    request: &FetchRequest,
    topics: &[FetchTopic],
    version: i16,
    client_id: &str,
    who: &Session,
    tracked: Option<&Arc<WatchSet>>,
) -> FetchPlan {
    let image = broker.metadata.image();
    let by_topic_id = version >= FIRST_VERSION_WITH_TOPIC_IDS;
    let replica_id = replica_id(request, version);
    let broker_epoch =
        (version >= FIRST_FETCH_VERSION_WITH_REPLICA_STATE).then_some(request.replica_state.replica_epoch);
    let from_follower = replica_id >= 0;
    // A follower passed its CLUSTER_ACTION check in `handle`; a consumer reads per topic.
    let access = who.access(&broker.security.authorizer, &image.acls);
    let authorizing = access.is_enabled() && !from_follower;
    let party = if from_follower {
        FetchParty::Follower {
            replica_id,
            identity: check_follower_identity(&image, replica_id, broker_epoch),
        }
    } else {
        // A follower serves a consumer only where leaders send consumers to followers
        // (`replica.selector.class`): without a selector a consumer at a follower has stale
        // metadata, and NOT_LEADER_OR_FOLLOWER sends it to the leader rather than letting a
        // replica that just lost its unsynced tail (a power cut) answer OFFSET_OUT_OF_RANGE.
        FetchParty::Consumer {
            any_replica: version >= FIRST_VERSION_WITH_RACK && broker.config.replica_selector != ReplicaSelector::Leader,
        }
    };
    // Only a consumer naming its rack is sent to a replica in it.
    let client_rack = match from_follower || version < FIRST_VERSION_WITH_RACK {
        true => "",
        false => request.rack_id.as_str(),
    };
    if let FetchParty::Follower { identity: Err(_), .. } = party {
        tracing::debug!(
            replica_id,
            ?broker_epoch,
            version,
            "refused a fetch claiming a replica id: no current broker epoch of that broker (Fetch v15+ replica_state) was given"
        );
    }
    let max_bytes = {
        let cap = if from_follower {
            broker.config.replica_fetch_response_max_bytes
        } else {
            broker.config.fetch_max_bytes
        };
        let within_cap = request.max_bytes.clamp(0, cap.max(0)) as usize;
        // Kafka's getMaxValueInQuotaWindow: a consumer never gets more in one response than
        // its quota allows over the window, so one fetch is not certain to be throttled.
        match from_follower {
            false => broker
                .fetch_quotas
                .max_bytes_in_window(&image, who.quota_user(), client_id)
                .map_or(within_cap, |quota_bytes| within_cap.min(quota_bytes)),
            true => within_cap,
        }
    };
    let now = now_ms();
    // A follower's session: each fetch says where the follower is in every partition of it.
    let session_clock = match party {
        FetchParty::Follower { identity: Ok(()), .. } => tracked.map(|set| {
            set.fetched(now);
            set.fetch_clock()
        }),
        _ => None,
    };
    let throttle = match party {
        FetchParty::Follower { identity: Ok(()), .. } => {
            let quota = broker.replicas.leader_quota();
            quota
                .bound(&broker.topic_defaults(&image))
                .map(|bound| (quota.clone(), bound))
        }
        _ => None,
    };
    let node_id = broker.config.node_id;
    let topics = topics
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
            // Kafka authorizes the name (an unknown id has none), before the topic's existence.
            let refused = authorizing
                && match (by_topic_id, topic) {
                    (true, Some(topic)) => !may_read(access, &topic.name),
                    (true, None) => false,
                    (false, _) => !may_read(access, &t.topic.0),
                };
            let partitions = t
                .partitions
                .iter()
                .map(|p: &FetchPartition| {
                    let partition = match topic {
                        _ if refused => Err(ResponseError::TopicAuthorizationFailed),
                        None => Err(unknown),
                        Some(topic) => broker.replicas.partition_for_fetch(
                            topic,
                            p.partition,
                            p.fetch_offset,
                            p.log_start_offset,
                            p.current_leader_epoch,
                            party,
                            now,
                            session_clock,
                        ),
                    };
                    let preferred_read_replica = partition.as_ref().ok().and_then(|partition| {
                        preferred_read_replica(
                            broker.config.replica_selector,
                            partition,
                            &image,
                            &who.listener,
                            client_rack,
                            p.fetch_offset,
                            now,
                        )
                    });
                    Target {
                        fetch_offset: p.fetch_offset,
                        partition_max_bytes: (p.partition_max_bytes.max(0) as usize).min(max_bytes),
                        current_leader_epoch: p.current_leader_epoch,
                        index: p.partition,
                        throttled: throttle.as_ref().is_some_and(|(quota, _)| {
                            topic.is_some_and(|topic| quota.applies_to(topic, p.partition, node_id, replica_id))
                        }),
                        partition,
                        preferred_read_replica,
                    }
                })
                .collect();
            TopicTargets {
                session_ref: fetch_session::topic_ref(t, by_topic_id),
                name: t.topic.clone(),
                known_as: topic.map(|topic| topic.name.clone()),
                topic_id: t.topic_id,
                partitions,
            }
        })
        .collect();
    FetchPlan {
        topics,
        max_bytes,
        min_bytes: request.min_bytes.max(0) as usize,
        read_committed: request.isolation_level == READ_COMMITTED,
        by_topic_id,
        from_follower,
        throttle,
        locality: RackLocality::of(client_rack, broker.config.rack.as_deref()),
    }
}

/// How far this fetch may read: a follower to the log end, a `read_committed` consumer to
/// the last stable offset, any other consumer to the high watermark.
fn read_bound(plan: &FetchPlan) -> ReadBound {
    if plan.from_follower {
        ReadBound::LogEnd
    } else if plan.read_committed {
        ReadBound::LastStable
    } else {
        ReadBound::HighWatermark
    }
}

/// Plans one read pass: each partition's read under its lock (no disk I/O), or its error.
fn plan_pass(plan: &FetchPlan) -> ReadPass {
    let bound = read_bound(plan);
    plan.topics
        .iter()
        .flat_map(|topic| topic.partitions.iter())
        .map(|target| plan_partition(plan, target, bound))
        .collect()
}

fn plan_partition(plan: &FetchPlan, target: &Target, bound: ReadBound) -> PartitionPass {
    let partition = match &target.partition {
        Ok(p) => p,
        Err(error) => return PartitionPass::Answered(failed(plan, target, *error, -1, -1)),
    };
    if let Err(error) = partition.check_leader_epoch(target.current_leader_epoch) {
        return PartitionPass::Answered(failed_at(plan, target, partition, error));
    }
    if let Some(replica) = target.preferred_read_replica {
        // As Kafka: no read, only where to read and the offsets the consumer checks against.
        return PartitionPass::Answered(
            empty(plan, target)
                .with_high_watermark(partition.high_watermark())
                .with_last_stable_offset(partition.last_stable_offset())
                .with_log_start_offset(partition.log_start_offset())
                .with_preferred_read_replica(BrokerId(replica)),
        );
    }
    match partition.plan_read(target.fetch_offset, target.partition_max_bytes, bound) {
        Ok(read) => PartitionPass::Planned {
            read,
            partition: partition.clone(),
        },
        Err(e) => PartitionPass::Answered(failed_at(plan, target, partition, read_error(partition, target, &e))),
    }
}

/// Reads a planned pass: from memory here when no partition's read needs the disk, else on
/// the blocking pool once a `num.io.threads` turn is free. Returns the response, its record
/// bytes and whether any partition reported an error (which, as in Kafka, ends the long poll).
async fn read_pass(permits: &Arc<Semaphore>, plan: &Arc<FetchPlan>, pass: ReadPass) -> (FetchResponse, usize, bool) {
    if !pass_reads_disk(&pass) {
        return read_planned(plan, pass);
    }
    // The semaphore is never closed; without a turn the read still goes ahead.
    let turn = permits.clone().acquire_owned().await.ok();
    let for_read = plan.clone();
    let read = tokio::task::spawn_blocking(move || {
        let _turn = turn;
        read_planned(&for_read, pass)
    });
    match read.await {
        Ok(result) => result,
        Err(e) => {
            tracing::error!(error = %e, "a fetch read task failed; the client is answered UNKNOWN_SERVER_ERROR and retries");
            let response = build_response(plan, |target| {
                failed(plan, target, ResponseError::UnknownServerError, -1, -1)
            });
            (response, 0, true)
        }
    }
}

/// Whether any partition of the pass reads files (a memory read costs no syscall and no wait).
fn pass_reads_disk(pass: &ReadPass) -> bool {
    pass.iter().any(|p| match p {
        PartitionPass::Answered(_) => false,
        PartitionPass::Planned { read, .. } => read.reads_disk(),
    })
}

/// Does the reads of a planned pass, within the response's and each partition's caps.
fn read_planned(plan: &FetchPlan, pass: ReadPass) -> (FetchResponse, usize, bool) {
    let mut remaining = plan.max_bytes;
    let mut total = 0;
    let mut had_error = false;
    let mut passes = pass.into_iter();
    let response = build_response(plan, |target| {
        let data = match passes.next() {
            Some(pass) => read_partition(
                plan,
                target,
                pass,
                target.partition_max_bytes.min(remaining),
                total == 0,
            ),
            None => failed(plan, target, ResponseError::UnknownServerError, -1, -1), // one pass per target
        };
        let len = data.records.as_ref().map_or(0, Bytes::len);
        remaining = remaining.saturating_sub(len);
        total += len;
        // As in Kafka, a refused partition does not end the others' long poll; an error or a
        // consumer sent to another replica does.
        had_error |= data.error_code != 0 && !matches!(target.partition, Err(ResponseError::TopicAuthorizationFailed));
        had_error |= target.preferred_read_replica.is_some();
        data
    });
    (response, total, had_error)
}

fn read_partition(
    plan: &FetchPlan,
    target: &Target,
    pass: PartitionPass,
    max_bytes: usize,
    min_one_message: bool,
) -> PartitionData {
    let (read, partition) = match pass {
        PartitionPass::Answered(data) => return data,
        PartitionPass::Planned { read, partition } => (read, partition),
    };
    let throttle = plan.throttle.as_ref().filter(|_| target.throttled);
    if let Some((quota, bound)) = throttle {
        if quota.is_exceeded(*bound, now_ms()) {
            // Kafka's leader throttle: no records for this replica until the rate falls back.
            return empty(plan, target)
                .with_high_watermark(partition.high_watermark())
                .with_last_stable_offset(partition.last_stable_offset())
                .with_log_start_offset(partition.log_start_offset());
        }
    }
    match read.read(max_bytes, min_one_message) {
        Ok(outcome) => {
            if let Some((quota, _)) = throttle {
                quota.record(outcome.records.len(), now_ms());
            }
            let aborted = outcome.aborted_transactions.as_deref().map(aborted_transactions);
            empty(plan, target)
                .with_high_watermark(outcome.high_watermark)
                .with_last_stable_offset(outcome.last_stable_offset)
                .with_log_start_offset(outcome.log_start_offset)
                .with_aborted_transactions(aborted.or_else(|| plan.read_committed.then(Vec::new)))
                .with_records(Some(outcome.records))
        }
        Err(e) => failed_at(plan, target, &partition, read_error(&partition, target, &e)),
    }
}

/// The Kafka error for a failed read; failures other than a client's bad offset are logged.
fn read_error(partition: &Partition, target: &Target, e: &LogError) -> ResponseError {
    match e {
        LogError::OffsetOutOfRange { .. } => ResponseError::OffsetOutOfRange,
        LogError::TruncatedDuringRead { .. } | LogError::RemovedDuringRead { .. } => {
            tracing::info!(topic = %partition.topic, partition = target.index, error = %e, "fetch raced a log truncation or a segment's removal");
            ResponseError::NotLeaderOrFollower
        }
        other => {
            tracing::error!(topic = %partition.topic, partition = target.index, error = %other, "fetch read failed");
            other.response_error()
        }
    }
}

fn empty(plan: &FetchPlan, target: &Target) -> PartitionData {
    PartitionData::default()
        .with_partition_index(target.index)
        .with_aborted_transactions(plan.read_committed.then(Vec::new))
        .with_records(Some(Bytes::new()))
}

fn failed(plan: &FetchPlan, target: &Target, error: ResponseError, hw: i64, log_start: i64) -> PartitionData {
    empty(plan, target)
        .with_error_code(error.code())
        .with_high_watermark(hw)
        .with_last_stable_offset(hw)
        .with_log_start_offset(log_start)
}

fn failed_at(plan: &FetchPlan, target: &Target, partition: &Partition, error: ResponseError) -> PartitionData {
    failed(
        plan,
        target,
        error,
        partition.high_watermark(),
        partition.log_start_offset(),
    )
    .with_last_stable_offset(partition.last_stable_offset())
}

/// The wire form of the aborted transactions a `read_committed` read returned (already in
/// first-offset order, which clients such as franz-go rely on).
fn aborted_transactions(aborted: &[AbortedTxn]) -> Vec<AbortedTransaction> {
    aborted
        .iter()
        .map(|t| {
            AbortedTransaction::default()
                .with_producer_id(ProducerId(t.producer_id))
                .with_first_offset(t.first_offset)
        })
        .collect()
}

/// The response with each requested partition's data from `partition`, in request order.
fn build_response(plan: &FetchPlan, mut partition: impl FnMut(&Target) -> PartitionData) -> FetchResponse {
    let responses = plan
        .topics
        .iter()
        .map(|topic| {
            let response = FetchableTopicResponse::default()
                .with_partitions(topic.partitions.iter().map(&mut partition).collect());
            if plan.by_topic_id {
                response.with_topic_id(topic.topic_id)
            } else {
                response.with_topic(topic.name.clone())
            }
        })
        .collect();
    FetchResponse::default().with_responses(responses)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::testing::Acls;
    use kafka_protocol::messages::fetch_request::ReplicaState;
    use kafka_protocol::messages::BrokerId;

    #[test]
    fn a_consumer_reads_only_topics_it_has_read_on() {
        let acls = Acls::none()
            .allow(ResourceType::Topic, "orders", AclOperation::Read)
            .allow(ResourceType::Topic, "audit", AclOperation::Describe);
        assert!(may_read(acls.access(), "orders"));
        assert!(!may_read(acls.access(), "audit"), "DESCRIBE does not allow READ");
        assert!(!may_read(acls.access(), "payments"));
    }

    #[test]
    fn a_follower_is_known_by_its_replica_id_and_refused_per_partition() {
        let follower = FetchRequest::default().with_replica_state(ReplicaState::default().with_replica_id(BrokerId(2)));
        assert_eq!(replica_id(&follower, 15), 2);
        let consumer = FetchRequest::default().with_replica_id(BrokerId(-1));
        assert_eq!(replica_id(&consumer, 12), -1);
        assert!(!follower_may_fetch(
            Acls::none().allow_cluster(AclOperation::Describe).access()
        ));
        assert!(follower_may_fetch(
            Acls::none().allow_cluster(AclOperation::ClusterAction).access()
        ));
        let asked = FetchRequest::default().with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(kafka_protocol::protocol::StrBytes::from_static_str("orders")))
            .with_partitions(vec![FetchPartition::default().with_partition(3)])]);
        let refused = follower_refused(&asked);
        assert_eq!(refused.error_code, 0);
        let partition = &refused.responses[0].partitions[0];
        assert_eq!(
            (
                partition.partition_index,
                partition.error_code,
                partition.records.as_ref().is_none_or(|r| r.is_empty())
            ),
            (3, ResponseError::TopicAuthorizationFailed.code(), true),
            "every named partition refused, nothing read"
        );
    }
}

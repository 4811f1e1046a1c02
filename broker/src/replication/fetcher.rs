//! Replica fetchers (Kafka's `ReplicaFetcherManager`/`ReplicaFetcherThread`): one task per
//! source broker fetches every partition this broker follows from it over one connection.
//!
//! A partition joins its leader's fetcher whenever it becomes a follower (or its leader epoch
//! changes). It first truncates its log to where the leader's history for its latest epoch
//! ends (OffsetForLeaderEpoch), so replicas never diverge, then fetches from its log end
//! offset. Its fetch offset is its log end offset: that is how the leader learns its progress.
//!
//! Each fetcher fetches in an incremental fetch session (KIP-227, `session.rs`): once the
//! session is open, a fetch names only the partitions whose position changed, and the leader
//! answers only those with news, so an idle fetcher's requests and answers are nearly empty
//! however many partitions it follows. A round looks only at the partitions whose position
//! moved since the last one: a `WatchSet` follows each followed partition's watch (appends,
//! truncations, log start moves mark it). A round walks every followed partition (under the
//! fetcher's lock, atomic loads, no `Arc` clones) when partitions joined or left or changed
//! state (truncation, retry), a retry comes due, the session starts over, and every
//! `WALK_ALL_EVERY` (10 s) as a safety net, which no change is known to need: at 10,000
//! partitions a walk a second was a third of an idle node's CPU. Only partitions the answer
//! carries, or that need truncating, are taken out of it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::fetch_request::ReplicaState;
use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::offset_for_leader_epoch_request::{OffsetForLeaderPartition, OffsetForLeaderTopic};
use kafka_protocol::messages::{BrokerId, FetchRequest, OffsetForLeaderEpochRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use parking_lot::Mutex;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use uuid::Uuid;

use super::client::{BrokerConnection, ClientError};
use super::session::{FetchSessionHandler, PartitionFetch, SessionRequest};
use crate::clock::now_ms;
use crate::config::BrokerConfig;
use crate::metadata::image::MetadataImage;
use crate::metrics::BrokerMetrics;
use crate::partition::{Partition, WatchSet};
use crate::quota::ReplicationQuota;
use crate::security::Security;
use crate::topic_config;

type PartitionKey = (Uuid, i32);

/// Fetch v15: topics by id, and `replica_state` carrying this broker's id and broker epoch,
/// without which the leader does not take the fetch for a follower's (KIP-903).
const FETCH_VERSION: i16 = super::FIRST_FETCH_VERSION_WITH_REPLICA_STATE;
/// OffsetForLeaderEpoch v4: `replica_id` and `current_leader_epoch`.
const OFFSET_FOR_LEADER_EPOCH_VERSION: i16 = 4;
/// Pause before retrying a partition the leader could not serve yet (it has not applied the
/// metadata that makes it leader, say).
const PARTITION_RETRY: Duration = Duration::from_millis(50);
/// Pause before reconnecting to a source broker.
const RECONNECT_BACKOFF: Duration = Duration::from_millis(500);
/// Slack beyond the fetch's own wait before a silent leader is given up on.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause when every partition of a fetcher waits on the follower replication throttle.
const THROTTLE_PAUSE: Duration = Duration::from_millis(100);
/// Longest a fetcher goes without walking all its partitions (see the module comment); well
/// inside `replica.lag.time.max.ms` (30 s), so even a missed watch would not cost the ISR.
const WALK_ALL_EVERY: Duration = Duration::from_secs(10);

/// One followed partition as its fetcher sees it.
struct FetchState {
    partition: Arc<Partition>,
    leader_epoch: i32,
    /// Truncated to the leader's history for this epoch; fetching from the log end.
    truncated: bool,
    retry_at: Option<Instant>,
    /// Its bytes count against the follower replication throttle (set for each fetch).
    throttled: bool,
}

/// What one round of a fetcher does, taken from its partitions under their lock.
#[derive(Default)]
struct Round {
    /// Partitions to truncate before they fetch (this round does only that).
    truncate: Vec<(PartitionKey, Arc<Partition>, i32)>,
    fetch: Vec<(PartitionKey, PartitionFetch)>,
    /// Some partitions were ready but wait on the follower throttle.
    held_back: bool,
    next_retry: Option<Instant>,
    /// A follower replication throttle is set: every round walks all partitions.
    throttle_set: bool,
}

struct Shared {
    partitions: Mutex<HashMap<PartitionKey, FetchState>>,
    wake: Notify,
    /// The followed partitions whose position (or high watermark) moved since the last round.
    moved: Arc<WatchSet>,
    /// A partition joined, left, or changed state: the next round walks them all.
    walk_all: AtomicBool,
}

impl Shared {
    fn new() -> Shared {
        Shared {
            partitions: Mutex::default(),
            wake: Notify::new(),
            moved: WatchSet::new(),
            walk_all: AtomicBool::new(true),
        }
    }
}

struct Fetcher {
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

pub struct ReplicaFetcherManager {
    config: Arc<BrokerConfig>,
    /// How fetchers reach and log in to leaders (TLS, SASL or the brokers' own credential).
    security: Arc<Security>,
    images: watch::Receiver<Arc<MetadataImage>>,
    fetchers: Mutex<HashMap<i32, Fetcher>>,
    /// The follower side of the replication throttle, shared by every fetcher of this broker.
    quota: Arc<ReplicationQuota>,
    metrics: Arc<BrokerMetrics>,
}

impl ReplicaFetcherManager {
    pub fn new(
        config: Arc<BrokerConfig>,
        security: Arc<Security>,
        images: watch::Receiver<Arc<MetadataImage>>,
        quota: ReplicationQuota,
        metrics: Arc<BrokerMetrics>,
    ) -> Self {
        ReplicaFetcherManager {
            config,
            security,
            images,
            fetchers: Mutex::default(),
            quota: Arc::new(quota),
            metrics,
        }
    }

    /// Makes `partition` follow `leader` at `leader_epoch` (truncating first), moving it off
    /// any other fetcher; `leader` -1 only stops fetching.
    pub fn follow(&self, partition: Arc<Partition>, leader: i32, leader_epoch: i32) {
        let key = (partition.topic_id, partition.index);
        self.remove(key);
        if leader < 0 {
            return;
        }
        let mut fetchers = self.fetchers.lock();
        let fetcher = fetchers.entry(leader).or_insert_with(|| {
            let shared = Arc::new(Shared::new());
            let task = tokio::spawn(run_fetcher(
                leader,
                shared.clone(),
                self.config.clone(),
                self.security.clone(),
                self.images.clone(),
                self.quota.clone(),
                self.metrics.clone(),
            ));
            Fetcher { shared, task }
        });
        partition.watch().subscribe(&fetcher.shared.moved, key);
        fetcher.shared.partitions.lock().insert(
            key,
            FetchState {
                partition,
                leader_epoch,
                truncated: false,
                retry_at: None,
                throttled: false,
            },
        );
        fetcher.shared.walk_all.store(true, Ordering::Release);
        fetcher.shared.wake.notify_one();
    }

    /// Stops fetching a partition (it became leader, or is gone). A fetcher left with nothing
    /// to fetch ends.
    pub fn remove(&self, key: PartitionKey) {
        let mut fetchers = self.fetchers.lock();
        fetchers.retain(|_, fetcher| {
            let mut partitions = fetcher.shared.partitions.lock();
            if let Some(gone) = partitions.remove(&key) {
                gone.partition.watch().unsubscribe(&fetcher.shared.moved);
                fetcher.shared.walk_all.store(true, Ordering::Release);
            }
            if partitions.is_empty() {
                fetcher.task.abort();
                false
            } else {
                true
            }
        });
    }

    pub fn shutdown(&self) {
        for (_, fetcher) in self.fetchers.lock().drain() {
            fetcher.task.abort();
        }
    }
}

async fn run_fetcher(
    leader: i32,
    shared: Arc<Shared>,
    config: Arc<BrokerConfig>,
    security: Arc<Security>,
    images: watch::Receiver<Arc<MetadataImage>>,
    quota: Arc<ReplicationQuota>,
    metrics: Arc<BrokerMetrics>,
) {
    let mut connection: Option<BrokerConnection> = None;
    let mut session = FetchSessionHandler::default();
    let mut failures = 0u32;
    // From the last walk over every partition: when, the next retry due, whether a follower
    // throttle is set (its per-partition flags are set by walks).
    let mut walked = Instant::now();
    let mut next_retry: Option<Instant> = None;
    let mut throttle_set = false;
    loop {
        let now = Instant::now();
        let walk_all = shared.walk_all.swap(false, Ordering::AcqRel)
            || session.next_is_full()
            || throttle_set
            || now >= walked + WALK_ALL_EVERY
            || next_retry.is_some_and(|at| at <= now);
        // Taken before the walk: a move during it is seen by the walk or the next round.
        let moved = shared.moved.take_changed();
        let round = if walk_all {
            let image = images.borrow().clone();
            let round = collect_round(&shared, &config, &image, &quota, now);
            (walked, next_retry, throttle_set) = (now, round.next_retry, round.throttle_set);
            round
        } else {
            collect_moved(&shared, &config, moved, now)
        };
        // Between walks, a round with nothing moved still long-polls the session's partitions.
        let idle_session = !walk_all && session.is_open();
        if round.truncate.is_empty() && round.fetch.is_empty() && !idle_session {
            if round.held_back {
                // Every ready partition waits on the follower throttle.
                tokio::time::sleep(THROTTLE_PAUSE).await;
                continue;
            }
            let wait = round.next_retry.unwrap_or(now + Duration::from_secs(1));
            tokio::select! {
                _ = shared.wake.notified() => {}
                _ = tokio::time::sleep_until(wait) => {}
            }
            continue;
        }
        if connection.is_none() {
            match connect(leader, &config, &security, &images).await {
                Ok(c) => connection = Some(c),
                Err(e) => {
                    failures += 1;
                    if failures % 20 == 1 {
                        tracing::warn!(leader, error = %e, "replica fetcher cannot connect to the partition leader; retrying");
                    }
                    tokio::time::sleep(RECONNECT_BACKOFF).await;
                    continue;
                }
            }
        }
        let Some(conn) = connection.as_mut() else { continue };
        let result = if !round.truncate.is_empty() {
            truncate(conn, &config, &shared, round.truncate).await
        } else {
            let context = FetchContext {
                config: &config,
                broker_epoch: own_broker_epoch(&config, &images),
                shared: &shared,
                quota: &quota,
                metrics: &metrics,
            };
            fetch(conn, &context, &mut session, round.fetch, !walk_all).await
        };
        match result {
            Ok(()) => failures = 0,
            Err(e) => {
                failures += 1;
                if failures % 20 == 1 {
                    tracing::warn!(leader, error = %e, "replica fetch failed; reconnecting");
                }
                // The next fetch, on a new connection, is a full one in a new session.
                session.handle_error();
                connection = None;
                tokio::time::sleep(RECONNECT_BACKOFF).await;
            }
        }
    }
}

/// Sorts the fetcher's partitions for this round, under its lock and without cloning an
/// `Arc` but for partitions to truncate: those due to fetch with their fetch positions (and
/// their throttle flag set), those waiting out a retry, those to truncate first.
fn collect_round(
    shared: &Shared,
    config: &BrokerConfig,
    image: &MetadataImage,
    quota: &ReplicationQuota,
    now: Instant,
) -> Round {
    let defaults = topic_config::broker_defaults(&config.overrides, &image.broker_configs, config.node_id);
    // The throttle's bound, when one is set, and whether the rate is above it.
    let exceeded = quota.bound(&defaults).map(|bound| quota.is_exceeded(bound, now_ms()));
    let mut round = Round {
        throttle_set: exceeded.is_some(),
        ..Round::default()
    };
    let mut partitions = shared.partitions.lock();
    for (key, state) in partitions.iter_mut() {
        if let Some(at) = state.retry_at.filter(|at| *at > now) {
            round.next_retry = Some(round.next_retry.map_or(at, |t| t.min(at)));
            continue;
        }
        if !state.truncated {
            round.truncate.push((*key, state.partition.clone(), state.leader_epoch));
            continue;
        }
        state.throttled = exceeded.is_some()
            && image
                .topic_by_id(&key.0)
                .is_some_and(|topic| quota.applies_to(topic, key.1, config.node_id, config.node_id));
        if state.throttled && exceeded == Some(true) {
            round.held_back = true;
            continue;
        }
        round.fetch.push((*key, position(state, config)));
    }
    round
}

/// A round between walks: only the partitions whose position moved (`moved`), each as the
/// walk would list it. A partition waiting on a retry or a truncation is in no such round: the
/// change of state that put it there makes the next round a walk.
fn collect_moved(shared: &Shared, config: &BrokerConfig, moved: Vec<PartitionKey>, now: Instant) -> Round {
    let mut round = Round::default();
    let partitions = shared.partitions.lock();
    for key in moved {
        let Some(state) = partitions.get(&key) else { continue };
        // A retry's time stays set once it has passed (as the walk reads it).
        if state.truncated && state.retry_at.is_none_or(|at| at <= now) {
            round.fetch.push((key, position(state, config)));
        }
    }
    round
}

/// Where a partition fetches from: its log end, with its epochs and log start.
fn position(state: &FetchState, config: &BrokerConfig) -> PartitionFetch {
    let p = &state.partition;
    PartitionFetch {
        fetch_offset: p.log_end_offset(),
        current_leader_epoch: state.leader_epoch,
        last_fetched_epoch: p.latest_log_epoch().unwrap_or(-1),
        log_start_offset: p.log_start_offset(),
        partition_max_bytes: config.replica_fetch_max_bytes,
    }
}

async fn connect(
    leader: i32,
    config: &BrokerConfig,
    security: &Security,
    images: &watch::Receiver<Arc<MetadataImage>>,
) -> Result<BrokerConnection, ClientError> {
    let image = images.borrow().clone();
    BrokerConnection::dial_broker(leader, "sluice-replica-fetcher", &image, config, security).await
}

/// This broker's epoch in the applied metadata (its current registration), which its fetches
/// name; -1 if it is not registered, which no leader accepts.
fn own_broker_epoch(config: &BrokerConfig, images: &watch::Receiver<Arc<MetadataImage>>) -> i64 {
    images
        .borrow()
        .brokers
        .get(&config.node_id)
        .map_or(-1, |b| b.broker_epoch)
}

/// Updates a partition's fetch state if it is still the one this round worked on (the
/// partition may have moved to another leader or epoch meanwhile).
/// Changes a partition's state (truncated, retry) if it is still at `epoch`; the next round
/// walks all partitions.
fn update(shared: &Shared, key: PartitionKey, epoch: i32, f: impl FnOnce(&mut FetchState)) {
    if let Some(state) = shared.partitions.lock().get_mut(&key) {
        if state.leader_epoch == epoch {
            f(state);
            shared.walk_all.store(true, Ordering::Release);
        }
    }
}

fn retry_later(shared: &Shared, key: PartitionKey, epoch: i32) {
    update(shared, key, epoch, |s| {
        s.retry_at = Some(Instant::now() + PARTITION_RETRY)
    });
}

/// A follower's Fetch in its session: this broker's id and current broker epoch in
/// `replica_state`, capped by `replica.fetch.response.max.bytes` (and
/// `replica.fetch.max.bytes` per partition).
fn follower_fetch_request(
    config: &BrokerConfig,
    broker_epoch: i64,
    wait: Duration,
    session: SessionRequest,
) -> FetchRequest {
    FetchRequest::default()
        .with_replica_state(
            ReplicaState::default()
                .with_replica_id(BrokerId(config.node_id))
                .with_replica_epoch(broker_epoch),
        )
        .with_max_wait_ms(wait.as_millis().min(i32::MAX as u128) as i32)
        .with_min_bytes(1)
        .with_max_bytes(config.replica_fetch_response_max_bytes)
        .with_session_id(session.session_id)
        .with_session_epoch(session.session_epoch)
        .with_topics(session.topics)
        .with_forgotten_topics_data(session.forgotten_topics_data)
}

/// A partition asked about in a truncation round.
struct TruncateState {
    partition: Arc<Partition>,
    leader_epoch: i32,
}

/// Kafka's truncation on becoming follower: ask the leader where our latest epoch ends in its
/// log and drop anything beyond that.
async fn truncate(
    conn: &mut BrokerConnection,
    config: &BrokerConfig,
    shared: &Shared,
    states: Vec<(PartitionKey, Arc<Partition>, i32)>,
) -> Result<(), ClientError> {
    let mut by_topic: HashMap<String, Vec<OffsetForLeaderPartition>> = HashMap::new();
    let mut asked: HashMap<(String, i32), (PartitionKey, TruncateState)> = HashMap::new();
    for (key, partition, leader_epoch) in states {
        let p = &partition;
        let Some(latest) = p.latest_log_epoch() else {
            // Nothing with an epoch in the log: nothing can diverge beyond the high watermark.
            let hw = p.high_watermark();
            match p.truncate_as_follower(hw, leader_epoch, false) {
                Ok(()) => update(shared, key, leader_epoch, |s| s.truncated = true),
                Err((error, message)) => {
                    tracing::debug!(topic = %p.topic, partition = p.index, ?error, %message, "truncation skipped");
                    retry_later(shared, key, leader_epoch);
                }
            }
            continue;
        };
        by_topic.entry(p.topic.to_string()).or_default().push(
            OffsetForLeaderPartition::default()
                .with_partition(p.index)
                .with_current_leader_epoch(leader_epoch)
                .with_leader_epoch(latest),
        );
        asked.insert(
            (p.topic.to_string(), p.index),
            (
                key,
                TruncateState {
                    partition,
                    leader_epoch,
                },
            ),
        );
    }
    if by_topic.is_empty() {
        return Ok(());
    }
    let request = OffsetForLeaderEpochRequest::default()
        .with_replica_id(BrokerId(config.node_id))
        .with_topics(
            by_topic
                .into_iter()
                .map(|(topic, partitions)| {
                    OffsetForLeaderTopic::default()
                        .with_topic(TopicName(StrBytes::from_string(topic)))
                        .with_partitions(partitions)
                })
                .collect(),
        );
    let response = conn
        .call(&request, OFFSET_FOR_LEADER_EPOCH_VERSION, RESPONSE_TIMEOUT)
        .await?;
    for topic in response.topics {
        for result in topic.partitions {
            let Some((key, state)) = asked.remove(&(topic.topic.0.to_string(), result.partition)) else {
                continue;
            };
            let p = &state.partition;
            if result.error_code != 0 {
                retry_later(shared, key, state.leader_epoch);
                continue;
            }
            let target = if result.leader_epoch < 0 {
                p.high_watermark()
            } else {
                // Our own end for the epoch the leader answered with: where our histories agree.
                result.end_offset.min(p.end_offset_for_epoch(result.leader_epoch).1)
            };
            let end = p.log_end_offset();
            match p.truncate_as_follower(target.min(end), state.leader_epoch, false) {
                Ok(()) => {
                    if target < end {
                        tracing::info!(
                            topic = %p.topic, partition = p.index, from = end, to = target,
                            leader_epoch = state.leader_epoch, "follower truncated its log to the leader's history"
                        );
                    }
                    update(shared, key, state.leader_epoch, |s| s.truncated = true);
                }
                Err((error, message)) => {
                    tracing::warn!(topic = %p.topic, partition = p.index, ?error, %message, "follower truncation failed; will retry");
                    retry_later(shared, key, state.leader_epoch);
                }
            }
        }
    }
    for (_, (key, state)) in asked {
        retry_later(shared, key, state.leader_epoch);
    }
    Ok(())
}

/// What a fetch round needs beyond the connection and the session.
struct FetchContext<'a> {
    config: &'a BrokerConfig,
    broker_epoch: i64,
    shared: &'a Shared,
    quota: &'a ReplicationQuota,
    metrics: &'a BrokerMetrics,
}

/// One fetch in the session: names what changed of `partitions` (all of them when the
/// session starts over; `only_moved`: the round listed only partitions that moved, and the
/// session's others stay as they are) and applies what the leader answered, which in an
/// incremental session is only the partitions with news.
async fn fetch(
    conn: &mut BrokerConnection,
    cx: &FetchContext<'_>,
    session: &mut FetchSessionHandler,
    partitions: Vec<(PartitionKey, PartitionFetch)>,
    only_moved: bool,
) -> Result<(), ClientError> {
    let request = match only_moved {
        // Between walks the round lists only what moved; the session's others are unchanged.
        true => session.build_moved(partitions),
        false => session.build(partitions),
    };
    let full = request.is_full();
    let wait = Duration::from_millis(cx.config.replica_fetch_wait_max_ms);
    let request = follower_fetch_request(cx.config, cx.broker_epoch, wait, request);
    let response = conn.call(&request, FETCH_VERSION, wait + RESPONSE_TIMEOUT).await?;
    if !session.handle_response(response.error_code, response.session_id) {
        let error = ResponseError::try_from_code(response.error_code);
        if full {
            // Not a session problem that a full fetch would fix: back off and reconnect.
            return Err(ClientError::Protocol(
                conn.broker(),
                format!("the leader refused a full fetch with {error:?}"),
            ));
        }
        tracing::debug!(?error, "the leader refused the fetch session; fetching in full");
        return Ok(());
    }
    let now = now_ms();
    for topic in response.responses {
        for data in topic.partitions {
            let key = (topic.topic_id, data.partition_index);
            // The position the leader read from: the one the session holds for the partition.
            let Some(sent) = session.sent(&key) else { continue };
            let state = cx.shared.partitions.lock().get(&key).and_then(|s| {
                (s.leader_epoch == sent.current_leader_epoch && s.truncated).then(|| (s.partition.clone(), s.throttled))
            });
            let Some((partition, throttled)) = state else {
                continue; // moved to another leader or epoch meanwhile
            };
            apply_partition(cx, key, &partition, sent, throttled, data, now);
        }
    }
    Ok(())
}

/// Applies one partition's answer: appends its records, takes the leader's high watermark and
/// log start offset, or handles its error.
fn apply_partition(
    cx: &FetchContext<'_>,
    key: PartitionKey,
    p: &Partition,
    sent: PartitionFetch,
    throttled: bool,
    data: PartitionData,
    now: i64,
) {
    let (shared, epoch, fetch_offset) = (cx.shared, sent.current_leader_epoch, sent.fetch_offset);
    match ResponseError::try_from_code(data.error_code) {
        None => {
            let records = data.records.unwrap_or_default();
            if !records.is_empty() {
                if p.log_end_offset() != fetch_offset {
                    return; // the log moved meanwhile (truncation); fetch again
                }
                if let Err((error, message)) = p.append_as_follower(&records, epoch, now) {
                    if error != ResponseError::FencedLeaderEpoch {
                        tracing::warn!(topic = %p.topic, partition = p.index, ?error, %message,
                            "could not append the leader's batches; truncating to the leader's history again");
                        update(shared, key, epoch, |s| s.truncated = false);
                    }
                    return;
                }
                cx.metrics
                    .replication_bytes_in
                    .fetch_add(records.len() as u64, Ordering::Relaxed);
                if throttled {
                    cx.quota.record(records.len(), now);
                }
            }
            p.update_follower_high_watermark(data.high_watermark, epoch);
            if let Err((_, message)) = p.update_follower_log_start_offset(data.log_start_offset) {
                tracing::warn!(topic = %p.topic, partition = p.index, %message,
                    "could not move the log start offset to the leader's; retrying on the next fetch");
            }
        }
        Some(ResponseError::OffsetOutOfRange) if fetch_offset < data.log_start_offset => {
            // The leader deleted (retention) everything we have: start over at its log start.
            match p.truncate_as_follower(data.log_start_offset, epoch, true) {
                Ok(()) => tracing::info!(topic = %p.topic, partition = p.index, offset = data.log_start_offset,
                    "follower restarted its log at the leader's log start offset"),
                Err(_) => retry_later(shared, key, epoch),
            }
        }
        Some(ResponseError::OffsetOutOfRange) => update(shared, key, epoch, |s| s.truncated = false),
        Some(error) => {
            tracing::debug!(topic = %p.topic, partition = p.index, ?error, "leader could not serve a replica fetch yet");
            retry_later(shared, key, epoch);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::protocol::{Decodable, Encodable};

    #[test]
    fn between_walks_a_round_lists_the_moved_partitions_that_may_fetch_even_after_a_retry() {
        let config =
            crate::config::BrokerConfig::from_cli(&clap::Parser::parse_from(["sluice", "--node-id", "2"])).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let partition = Arc::new(crate::partition::tests::open(dir.path(), 2));
        let key = (partition.topic_id, partition.index);
        let shared = Shared::new();
        let now = Instant::now();
        let state = |truncated, retry_at| FetchState {
            partition: partition.clone(),
            leader_epoch: 0,
            truncated,
            retry_at,
            throttled: false,
        };
        let listed = |shared: &Shared| collect_moved(shared, &config, vec![key, (Uuid::from_u128(9), 0)], now).fetch;
        shared
            .partitions
            .lock()
            .insert(key, state(true, Some(now - Duration::from_millis(1))));
        assert_eq!(
            listed(&shared).len(),
            1,
            "a retry whose time has passed no longer holds it back"
        );
        shared
            .partitions
            .lock()
            .insert(key, state(true, Some(now + PARTITION_RETRY)));
        assert!(listed(&shared).is_empty(), "waiting out a retry");
        shared.partitions.lock().insert(key, state(false, None));
        assert!(listed(&shared).is_empty(), "to truncate first");
    }

    #[test]
    fn a_follower_fetch_names_its_broker_epoch_and_session_at_v15() {
        let config =
            crate::config::BrokerConfig::from_cli(&clap::Parser::parse_from(["sluice", "--node-id", "2"])).unwrap();
        let topic = Uuid::from_u128(7);
        let mut session = FetchSessionHandler::default();
        let at = |fetch_offset| PartitionFetch {
            fetch_offset,
            current_leader_epoch: 1,
            last_fetched_epoch: 1,
            log_start_offset: 0,
            partition_max_bytes: 1024,
        };
        session.build([((topic, 0), at(0)), ((topic, 1), at(0))]);
        session.handle_response(0, 9);
        let incremental = session.build([((topic, 0), at(4))]);
        let request = follower_fetch_request(&config, 41, Duration::from_millis(500), incremental);
        let mut buf = BytesMut::new();
        request.encode(&mut buf, FETCH_VERSION).unwrap();
        let decoded = FetchRequest::decode(&mut buf.freeze(), FETCH_VERSION).unwrap();
        assert_eq!(FETCH_VERSION, 15);
        assert_eq!(decoded.replica_state.replica_id, BrokerId(2));
        assert_eq!(decoded.replica_state.replica_epoch, 41);
        assert_eq!(decoded.max_bytes, config.replica_fetch_response_max_bytes);
        assert_eq!(decoded.topics[0].topic_id, topic);
        assert_eq!((decoded.session_id, decoded.session_epoch), (9, 1));
        assert_eq!(decoded.topics[0].partitions[0].fetch_offset, 4);
        assert_eq!(decoded.forgotten_topics_data[0].topic_id, topic);
        assert_eq!(decoded.forgotten_topics_data[0].partitions, [1]);
    }
}

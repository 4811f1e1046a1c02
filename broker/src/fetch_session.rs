//! Incremental fetch sessions (KIP-227, Kafka's `FetchSession`/`FetchSessionCache`). A client
//! that fetches the same partitions over and over opens a session with a full fetch (epoch 0);
//! after that it sends only the partitions whose fetch position changed (epoch 1, 2, ...) and
//! the partitions it no longer wants, and the broker answers only partitions with something
//! new: records, an error, or a moved high watermark or log start offset. With many partitions
//! that is most of a fetch request and response not sent.
//!
//! Bounded as Kafka bounds it: at most `max.incremental.fetch.session.cache.slots` sessions. A
//! new session takes the slot of one unused for `min.incremental.fetch.session.eviction.ms`,
//! else of the smallest session if it is larger than that one; else it gets no session (id 0)
//! and the client goes on with full fetches. Sluice also caps the partitions held over all
//! sessions (`fetch.session.cache.max.partitions`), as a count of partitions in the requests
//! that opened or grew the sessions is otherwise unbounded.
//!
//! A follower's session (Fetch v13+ names topics by id) does no work per idle partition: it
//! subscribes a [`WatchSet`] to each partition's watch, and an incremental fetch reads only
//! the partitions the request names, those that changed since the last fetch (appends, high
//! watermark, log start, leader epoch, removal) and those left over by the last one (data it
//! did not carry, errors, a follower outside the ISR); its long poll waits on the set, not on
//! every partition. A consumer's session reads every partition of the session, as Kafka does.
//!
//! The handler holds a session's lock only while it reads or updates it, never across an await.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use indexmap::IndexMap;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
use kafka_protocol::messages::TopicName;
use kafka_protocol::protocol::StrBytes;
use parking_lot::Mutex;
use uuid::Uuid;

use crate::partition::{Partition, WatchSet};

/// `session_epoch` of a full fetch that opens a session.
pub const INITIAL_EPOCH: i32 = 0;
/// `session_epoch` of a fetch outside any session (and of one that closes `session_id`).
pub const FINAL_EPOCH: i32 = -1;
/// `session_id` meaning "no session".
pub const INVALID_SESSION_ID: i32 = 0;

/// How a session names topics: by id from Fetch v13, by name before.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TopicRef {
    Id(Uuid),
    /// The request's bytes of the name: cloning it allocates nothing.
    Name(StrBytes),
}

/// A partition in a session.
pub type SessionKey = (TopicRef, i32);

pub use crate::config::SessionSettings;

/// What the broker last told the client about a partition, to answer only what changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Sent {
    high_watermark: i64,
    log_start_offset: i64,
}

/// Nothing sent yet: the first answer includes the partition.
const NOTHING_SENT: Sent = Sent {
    high_watermark: i64::MIN,
    log_start_offset: i64::MIN,
};

/// What a fetch asks of one partition: the request fields a fetch reads, not the protocol's
/// struct with its tagged fields. A leader's session keeps one per partition (one per follower
/// per partition it leads); a follower's session sends one again only when it changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionFetch {
    pub fetch_offset: i64,
    pub current_leader_epoch: i32,
    pub last_fetched_epoch: i32,
    pub log_start_offset: i64,
    pub partition_max_bytes: i32,
}

impl PartitionFetch {
    fn of(p: &FetchPartition) -> PartitionFetch {
        PartitionFetch {
            fetch_offset: p.fetch_offset,
            current_leader_epoch: p.current_leader_epoch,
            last_fetched_epoch: p.last_fetched_epoch,
            log_start_offset: p.log_start_offset,
            partition_max_bytes: p.partition_max_bytes,
        }
    }

    /// The request for partition `index`.
    pub fn to_request(self, index: i32) -> FetchPartition {
        FetchPartition::default()
            .with_partition(index)
            .with_current_leader_epoch(self.current_leader_epoch)
            .with_fetch_offset(self.fetch_offset)
            .with_last_fetched_epoch(self.last_fetched_epoch)
            .with_log_start_offset(self.log_start_offset)
            .with_partition_max_bytes(self.partition_max_bytes)
    }
}

struct SessionPartition {
    /// The client's latest fetch position and limits for the partition.
    request: PartitionFetch,
    sent: Sent,
    /// A follower's session: the replica whose watch it is subscribed to.
    watched: Option<Arc<Partition>>,
    /// Place in the fetch order: lower goes first (see `FetchSession::partitions`).
    order: u64,
}

impl std::fmt::Debug for SessionPartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionPartition")
            .field("request", &self.request)
            .field("sent", &self.sent)
            .field("watched", &self.watched.is_some())
            .finish()
    }
}

impl SessionPartition {
    fn new(request: PartitionFetch, order: u64) -> SessionPartition {
        SessionPartition {
            request,
            sent: NOTHING_SENT,
            watched: None,
            order,
        }
    }
}

/// What a follower's session keeps to read only what changed.
#[derive(Debug)]
struct Tracked {
    replica_id: i32,
    set: Arc<WatchSet>,
    /// Partitions the next fetch reads whatever changes (see [`FetchSession::carry_over`]).
    again: HashSet<SessionKey>,
}

impl Tracked {
    fn new(replica_id: i32) -> Tracked {
        Tracked {
            replica_id,
            set: WatchSet::new(),
            again: HashSet::new(),
        }
    }

    /// The session's partitions that changed since the last look, as the session names them.
    fn take_changed(&self) -> impl Iterator<Item = SessionKey> {
        self.set
            .take_changed()
            .into_iter()
            .map(|(id, index)| (TopicRef::Id(id), index))
    }

    fn stop_watching(&self, p: &mut SessionPartition) {
        if let Some(partition) = p.watched.take() {
            partition.watch().unsubscribe(&self.set);
            partition.forget_follower_session(self.replica_id, self.set.fetch_clock());
        }
    }
}

#[derive(Debug)]
pub struct FetchSession {
    id: i32,
    /// The epoch the client's next incremental fetch must carry.
    next_epoch: i32,
    by_topic_id: bool,
    /// The fetch order is each partition's `order`: partitions that just returned records move
    /// to the end (a fresh `order`), so a response cut short by `max_bytes` does not always
    /// favour the same ones. Moving one is O(1), as in Kafka's `ImplicitLinkedHashCollection`:
    /// the map is sorted by `order` only when the whole session is listed, and a follower's
    /// fetch sorts just the partitions it reads. Moving entries inside the map instead cost
    /// O(partitions) each, which at 100,000 partitions a session was most of a leader's CPU.
    partitions: IndexMap<SessionKey, SessionPartition>,
    /// The `order` the next partition added or moved to the end gets.
    next_order: u64,
    /// Whether `partitions` is in fetch order as it stands.
    in_order: bool,
    last_used_ms: i64,
    /// A follower's session: fetches read only what changed.
    tracked: Option<Tracked>,
}

impl Drop for FetchSession {
    fn drop(&mut self) {
        if let Some(tracked) = &self.tracked {
            for p in self.partitions.values_mut() {
                tracked.stop_watching(p);
            }
        }
    }
}

impl FetchSession {
    pub fn id(&self) -> i32 {
        self.id
    }

    /// A follower's session's watch set: its fetches read and wait on what changed.
    pub fn watch_set(&self) -> Option<&Arc<WatchSet>> {
        self.tracked.as_ref().map(|t| &t.set)
    }

    /// The partitions an incremental fetch of a follower's session reads, in fetch order:
    /// those `named` by the request, those changed since the last fetch and those left over.
    fn tracked_fetch_topics(&mut self, named: Vec<SessionKey>) -> Vec<FetchTopic> {
        let Some(tracked) = &mut self.tracked else {
            return self.fetch_topics();
        };
        let mut wanted: HashSet<SessionKey> = named.into_iter().collect();
        wanted.extend(tracked.again.drain());
        wanted.extend(tracked.take_changed());
        self.topics_of(wanted)
    }

    /// Whether any partition of the session changed since the last look, and those that did
    /// and are not in `planned`, as a fetch request lists them, in fetch order.
    pub fn changed_beyond(&mut self, planned: &HashSet<SessionKey>) -> (bool, Vec<FetchTopic>) {
        let Some(tracked) = &self.tracked else {
            return (false, Vec::new());
        };
        let changed: Vec<SessionKey> = tracked
            .take_changed()
            .filter(|key| self.partitions.contains_key(key))
            .collect();
        let any = !changed.is_empty();
        let beyond = changed.into_iter().filter(|key| !planned.contains(key)).collect();
        (any, self.topics_of(beyond))
    }

    /// The replica id of a follower's session.
    pub fn follower(&self) -> Option<i32> {
        self.tracked.as_ref().map(|t| t.replica_id)
    }

    fn topics_of(&self, keys: HashSet<SessionKey>) -> Vec<FetchTopic> {
        let mut wanted: Vec<(&SessionKey, &SessionPartition)> =
            keys.iter().filter_map(|k| self.partitions.get_key_value(k)).collect();
        wanted.sort_unstable_by_key(|(_, p)| p.order);
        let mut topics: Vec<FetchTopic> = Vec::new();
        for ((topic, index), p) in wanted {
            push_partition(
                &mut topics,
                topic,
                self.by_topic_id,
                p.request.to_request(*index),
            );
        }
        topics
    }

    /// A follower's session: follows `partition` (what `key` resolved to) from now on, or
    /// reads `key` again at the next fetch when it resolved to an error. Call it before the
    /// partition is read, so no change after the read goes unseen.
    pub fn watch(&mut self, key: &SessionKey, partition: Result<&Arc<Partition>, ()>) {
        let Some(tracked) = &mut self.tracked else { return };
        let Some(p) = self.partitions.get_mut(key) else { return };
        match partition {
            Ok(partition) => {
                if !p.watched.as_ref().is_some_and(|w| Arc::ptr_eq(w, partition)) {
                    tracked.stop_watching(p);
                    partition
                        .watch()
                        .subscribe(&tracked.set, (partition.topic_id, partition.index));
                    p.watched = Some(partition.clone());
                }
            }
            Err(()) => {
                tracked.stop_watching(p);
                tracked.again.insert(key.clone());
            }
        }
    }

    /// A follower's session, as its fetch is answered: `key` is read again at the next fetch
    /// whatever changes (data the answer did not carry, the follower outside the ISR).
    pub fn carry_over(&mut self, key: SessionKey) {
        if let Some(tracked) = &mut self.tracked {
            tracked.again.insert(key);
        }
    }

    /// The session's partitions as a fetch request lists them, in fetch order.
    pub fn fetch_topics(&mut self) -> Vec<FetchTopic> {
        if !self.in_order {
            self.partitions.sort_unstable_by(|_, a, _, b| a.order.cmp(&b.order));
            self.in_order = true;
        }
        let mut topics: Vec<FetchTopic> = Vec::new();
        for ((topic, index), p) in &self.partitions {
            push_partition(
                &mut topics,
                topic,
                self.by_topic_id,
                p.request.to_request(*index),
            );
        }
        topics
    }

    /// Whether an incremental response must carry this partition, given what it would say;
    /// records what it says when it does. An unknown partition (dropped meanwhile) is sent.
    pub fn must_send(&mut self, key: &SessionKey, has_records: bool, error_code: i16, hw: i64, log_start: i64) -> bool {
        let Some(p) = self.partitions.get_mut(key) else {
            return true;
        };
        let now = Sent {
            high_watermark: hw,
            log_start_offset: log_start,
        };
        let send = has_records || error_code != 0 || p.sent != now;
        if send {
            p.sent = now;
        }
        send
    }

    /// The high watermark the client was last told for this partition, if any.
    pub fn high_watermark_sent(&self, key: &SessionKey) -> Option<i64> {
        self.partitions
            .get(key)
            .map(|p| p.sent.high_watermark)
            .filter(|hw| *hw != NOTHING_SENT.high_watermark)
    }

    /// Records what a full response told the client.
    pub fn sent_in_full(&mut self, key: &SessionKey, hw: i64, log_start: i64) {
        if let Some(p) = self.partitions.get_mut(key) {
            p.sent = Sent {
                high_watermark: hw,
                log_start_offset: log_start,
            };
        }
    }

    /// Moves the partitions that returned records to the end of the fetch order: O(1) each.
    pub fn rotate(&mut self, returned_records: &[SessionKey]) {
        for key in returned_records {
            if let Some(p) = self.partitions.get_mut(key) {
                p.order = self.next_order;
                self.next_order += 1;
                self.in_order = false;
            }
        }
    }

    /// Adds a partition at the end of the fetch order.
    fn add(&mut self, key: SessionKey, request: PartitionFetch) {
        self.partitions
            .insert(key, SessionPartition::new(request, self.next_order));
        self.next_order += 1;
    }
}

/// How a fetch request relates to sessions (Kafka's `FetchContext`).
pub enum SessionFetch {
    /// Outside any session: answer every requested partition, session id 0.
    Sessionless,
    /// A full fetch: answer every requested partition; `session` is the one it opened, if a
    /// slot was free.
    Full { session: Option<Arc<Mutex<FetchSession>>> },
    /// An incremental fetch: read every partition of the session (`topics`, in fetch order)
    /// and answer only those with something new.
    Incremental {
        session: Arc<Mutex<FetchSession>>,
        topics: Vec<FetchTopic>,
    },
}

#[derive(Debug)]
pub struct FetchSessionCache {
    settings: SessionSettings,
    sessions: Mutex<Sessions>,
    /// Partitions held over all sessions.
    partitions: AtomicUsize,
}

#[derive(Debug)]
struct Sessions {
    by_id: HashMap<i32, Arc<Mutex<FetchSession>>>,
    next_id: i32,
}

impl FetchSessionCache {
    pub fn new(settings: SessionSettings) -> FetchSessionCache {
        FetchSessionCache {
            settings,
            sessions: Mutex::new(Sessions {
                by_id: HashMap::new(),
                // Ids differ across restarts, so a client's id from before a restart is unknown.
                next_id: (Uuid::new_v4().as_u128() as i32 & i32::MAX).max(1),
            }),
            partitions: AtomicUsize::new(0),
        }
    }

    pub fn len(&self) -> usize {
        self.sessions.lock().by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Decides a request's session: closes, opens or advances one. `by_topic_id` is whether
    /// this request version names topics by id; `follower` the replica id a follower's fetch
    /// claims (its session, by topic id, reads only what changed).
    #[allow(clippy::too_many_arguments)]
    pub fn begin(
        &self,
        session_id: i32,
        epoch: i32,
        by_topic_id: bool,
        follower: Option<i32>,
        topics: &[FetchTopic],
        forgotten: &[ForgottenTopic],
        now_ms: i64,
    ) -> Result<SessionFetch, ResponseError> {
        if epoch == INITIAL_EPOCH || epoch == FINAL_EPOCH {
            if session_id != INVALID_SESSION_ID {
                self.remove(session_id);
            }
            if epoch == FINAL_EPOCH {
                return Ok(SessionFetch::Sessionless);
            }
            let tracked = follower.filter(|_| by_topic_id).map(Tracked::new);
            return Ok(SessionFetch::Full {
                session: self.open(by_topic_id, tracked, topics, now_ms),
            });
        }
        // The cache's lock is held while the session changes size, so its count stays exact.
        let mut sessions = self.sessions.lock();
        let session = sessions
            .by_id
            .get(&session_id)
            .cloned()
            .ok_or(ResponseError::FetchSessionIdNotFound)?;
        let mut guard = session.lock();
        let s = &mut *guard;
        if s.next_epoch != epoch {
            return Err(ResponseError::InvalidFetchSessionEpoch);
        }
        if s.by_topic_id != by_topic_id {
            return Err(ResponseError::FetchSessionTopicIdError);
        }
        let before = s.partitions.len();
        for topic in forgotten {
            let name = forgotten_ref(topic, by_topic_id);
            for &p in &topic.partitions {
                // O(1): the fetch order is in `order`, not in the map's positions.
                if let Some(mut gone) = s.partitions.swap_remove(&(name.clone(), p)) {
                    s.in_order = false;
                    if let Some(tracked) = &s.tracked {
                        tracked.stop_watching(&mut gone);
                    }
                }
            }
        }
        let mut named = Vec::new();
        for topic in topics {
            let name = topic_ref(topic, by_topic_id);
            for p in &topic.partitions {
                let key = (name.clone(), p.partition);
                match s.partitions.get_mut(&key) {
                    Some(existing) => existing.request = PartitionFetch::of(p),
                    None => s.add(key.clone(), PartitionFetch::of(p)),
                }
                if s.tracked.is_some() {
                    named.push(key);
                }
            }
        }
        let after = s.partitions.len();
        if !self.account(before, after) {
            // Grown past the cap: the client starts over with a full fetch, which may get a
            // session again once others have gone.
            sessions.by_id.remove(&session_id);
            self.partitions.fetch_sub(before, Ordering::Relaxed);
            return Err(ResponseError::FetchSessionIdNotFound);
        }
        s.next_epoch = next_epoch(epoch);
        s.last_used_ms = now_ms;
        let topics = s.tracked_fetch_topics(named);
        drop(guard);
        drop(sessions);
        Ok(SessionFetch::Incremental { session, topics })
    }

    /// A new session over the request's partitions, if a slot is free or can be freed.
    fn open(
        &self,
        by_topic_id: bool,
        tracked: Option<Tracked>,
        topics: &[FetchTopic],
        now_ms: i64,
    ) -> Option<Arc<Mutex<FetchSession>>> {
        let mut partitions = IndexMap::new();
        for topic in topics {
            let name = topic_ref(topic, by_topic_id);
            for p in &topic.partitions {
                let order = partitions.len() as u64;
                partitions.insert(
                    (name.clone(), p.partition),
                    SessionPartition::new(PartitionFetch::of(p), order),
                );
            }
        }
        let size = partitions.len();
        let mut sessions = self.sessions.lock();
        if sessions.by_id.len() >= self.settings.max_slots && !self.evict_one(&mut sessions, size, now_ms) {
            return None;
        }
        if !self.account(0, size) {
            return None;
        }
        let mut id = sessions.next_id;
        while id == INVALID_SESSION_ID || sessions.by_id.contains_key(&id) {
            id = id.checked_add(1).unwrap_or(1);
        }
        sessions.next_id = id.checked_add(1).unwrap_or(1);
        let session = Arc::new(Mutex::new(FetchSession {
            id,
            next_epoch: next_epoch(INITIAL_EPOCH),
            by_topic_id,
            next_order: size as u64,
            in_order: true,
            partitions,
            last_used_ms: now_ms,
            tracked,
        }));
        sessions.by_id.insert(id, session.clone());
        Some(session)
    }

    /// Frees a slot for a session of `size` partitions: the least recently used session if it
    /// has been idle for the eviction time, else the smallest one if it is smaller.
    fn evict_one(&self, sessions: &mut Sessions, size: usize, now_ms: i64) -> bool {
        let summaries: Vec<(i32, i64, usize)> = sessions
            .by_id
            .iter()
            .filter_map(|(id, s)| s.try_lock().map(|s| (*id, s.last_used_ms, s.partitions.len())))
            .collect();
        let stale = summaries
            .iter()
            .filter(|(_, used, _)| now_ms - used >= self.settings.eviction_ms)
            .min_by_key(|(_, used, _)| *used);
        let smaller = summaries
            .iter()
            .filter(|(_, _, n)| *n < size)
            .min_by_key(|(_, used, n)| (*n, *used));
        let Some(&(id, _, n)) = stale.or(smaller) else {
            return false;
        };
        sessions.by_id.remove(&id);
        self.partitions.fetch_sub(n, Ordering::Relaxed);
        true
    }

    /// Counts a session going from `before` to `after` partitions; false (nothing counted)
    /// when that would pass the cap.
    fn account(&self, before: usize, after: usize) -> bool {
        if after <= before {
            self.partitions.fetch_sub(before - after, Ordering::Relaxed);
            return true;
        }
        let grow = after - before;
        self.partitions
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                (held + grow <= self.settings.max_partitions).then_some(held + grow)
            })
            .is_ok()
    }

    fn remove(&self, id: i32) {
        let mut sessions = self.sessions.lock();
        if let Some(session) = sessions.by_id.remove(&id) {
            let n = session.lock().partitions.len();
            self.partitions.fetch_sub(n, Ordering::Relaxed);
        }
    }

    /// Partitions held over all sessions.
    pub fn partitions_held(&self) -> usize {
        self.partitions.load(Ordering::Relaxed)
    }
}

/// Adds a partition to a fetch request's topics, in a new topic entry unless it is the last one's.
fn push_partition(topics: &mut Vec<FetchTopic>, topic: &TopicRef, by_topic_id: bool, partition: FetchPartition) {
    let same = topics.last().is_some_and(|t| topic_ref(t, by_topic_id) == *topic);
    if !same {
        let t = FetchTopic::default();
        topics.push(match topic {
            TopicRef::Id(id) => t.with_topic_id(*id),
            TopicRef::Name(name) => t.with_topic(TopicName(name.clone())),
        });
    }
    if let Some(last) = topics.last_mut() {
        last.partitions.push(partition);
    }
}

/// Kafka's `nextEpoch`: after `i32::MAX` comes 1 (0 opens a session, -1 closes one).
fn next_epoch(epoch: i32) -> i32 {
    match epoch {
        i32::MAX => 1,
        e if e < 0 => e,
        e => e + 1,
    }
}

/// How a session names the topic of a request's `FetchTopic`.
pub fn topic_ref(topic: &FetchTopic, by_topic_id: bool) -> TopicRef {
    if by_topic_id {
        TopicRef::Id(topic.topic_id)
    } else {
        TopicRef::Name(topic.topic.0.clone())
    }
}

fn forgotten_ref(topic: &ForgottenTopic, by_topic_id: bool) -> TopicRef {
    if by_topic_id {
        TopicRef::Id(topic.topic_id)
    } else {
        TopicRef::Name(topic.topic.0.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SETTINGS: SessionSettings = SessionSettings {
        max_slots: 2,
        eviction_ms: 1_000,
        max_partitions: 10,
    };

    fn topic(name: &str, partitions: &[(i32, i64)]) -> FetchTopic {
        FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_string(name.to_string())))
            .with_partitions(
                partitions
                    .iter()
                    .map(|&(p, offset)| FetchPartition::default().with_partition(p).with_fetch_offset(offset))
                    .collect(),
            )
    }

    fn forget(name: &str, partitions: &[i32]) -> ForgottenTopic {
        ForgottenTopic::default()
            .with_topic(TopicName(StrBytes::from_string(name.to_string())))
            .with_partitions(partitions.to_vec())
    }

    fn open(cache: &FetchSessionCache, topics: &[FetchTopic], now: i64) -> Option<Arc<Mutex<FetchSession>>> {
        match cache.begin(0, INITIAL_EPOCH, false, None, topics, &[], now).unwrap() {
            SessionFetch::Full { session } => session,
            _ => panic!("epoch 0 is a full fetch"),
        }
    }

    fn offsets(topics: &[FetchTopic]) -> Vec<(String, i32, i64)> {
        topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(move |p| (t.topic.0.to_string(), p.partition, p.fetch_offset))
            })
            .collect()
    }

    #[test]
    fn an_incremental_fetch_updates_positions_adds_and_forgets_partitions() {
        let cache = FetchSessionCache::new(SETTINGS);
        let session = open(&cache, &[topic("a", &[(0, 5), (1, 7)])], 0).unwrap();
        let id = session.lock().id();
        let SessionFetch::Incremental { topics, .. } = cache
            .begin(
                id,
                1,
                false,
                None,
                &[topic("a", &[(1, 9)]), topic("b", &[(0, 0)])],
                &[forget("a", &[0])],
                10,
            )
            .unwrap()
        else {
            panic!("epoch 1 of a known session is incremental")
        };
        assert_eq!(offsets(&topics), [("a".into(), 1, 9), ("b".into(), 0, 0)]);
        assert_eq!(cache.partitions_held(), 2);
    }

    #[test]
    fn the_fetch_order_survives_forgetting_rotating_and_adding_partitions() {
        let cache = FetchSessionCache::new(SETTINGS);
        let partitions: Vec<(i32, i64)> = (0..6).map(|p| (p, 0)).collect();
        let session = open(&cache, &[topic("a", &partitions)], 0).unwrap();
        let id = session.lock().id();
        let key = |p| (TopicRef::Name(StrBytes::from_static_str("a")), p);
        let order = |session: &Arc<Mutex<FetchSession>>| -> Vec<i32> {
            let topics = session.lock().fetch_topics();
            topics
                .iter()
                .flat_map(|t| t.partitions.iter().map(|p| p.partition))
                .collect()
        };
        session.lock().rotate(&[key(2), key(0)]);
        assert_eq!(order(&session), [1, 3, 4, 5, 2, 0]);
        // Forgetting 1 must not move 0 (the last in the map) into its place in the order.
        let SessionFetch::Incremental { topics, .. } = cache
            .begin(id, 1, false, None, &[topic("a", &[(6, 0)])], &[forget("a", &[1])], 1)
            .unwrap()
        else {
            panic!("an incremental fetch")
        };
        let listed: Vec<i32> = topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| p.partition))
            .collect();
        assert_eq!(listed, [3, 4, 5, 2, 0, 6], "a new partition goes last");
        session.lock().rotate(&[key(3), key(9)]);
        assert_eq!(order(&session), [4, 5, 2, 0, 6, 3]);
    }

    #[test]
    fn epochs_must_follow_in_order_and_unknown_sessions_are_refused() {
        let cache = FetchSessionCache::new(SETTINGS);
        let id = open(&cache, &[topic("a", &[(0, 0)])], 0).unwrap().lock().id();
        assert!(matches!(
            cache.begin(id, 2, false, None, &[], &[], 1),
            Err(ResponseError::InvalidFetchSessionEpoch)
        ));
        assert!(cache.begin(id, 1, false, None, &[], &[], 1).is_ok());
        assert!(matches!(
            cache.begin(id, 1, false, None, &[], &[], 1),
            Err(ResponseError::InvalidFetchSessionEpoch)
        ));
        assert!(cache.begin(id, 2, false, None, &[], &[], 1).is_ok());
        assert!(matches!(
            cache.begin(id, 3, true, None, &[], &[], 1),
            Err(ResponseError::FetchSessionTopicIdError)
        ));
        assert!(matches!(
            cache.begin(id + 1, 1, false, None, &[], &[], 1),
            Err(ResponseError::FetchSessionIdNotFound)
        ));
        assert_eq!(next_epoch(i32::MAX), 1);
    }

    #[test]
    fn the_final_epoch_closes_the_session_and_fetches_without_one() {
        let cache = FetchSessionCache::new(SETTINGS);
        let id = open(&cache, &[topic("a", &[(0, 0), (1, 0)])], 0).unwrap().lock().id();
        assert!(matches!(
            cache.begin(id, FINAL_EPOCH, false, None, &[], &[], 1),
            Ok(SessionFetch::Sessionless)
        ));
        assert!(cache.is_empty());
        assert_eq!(cache.partitions_held(), 0);
        assert!(matches!(
            cache.begin(id, 1, false, None, &[], &[], 1),
            Err(ResponseError::FetchSessionIdNotFound)
        ));
    }

    #[test]
    fn a_full_cache_evicts_a_stale_session_then_a_smaller_one_else_gives_none() {
        let cache = FetchSessionCache::new(SETTINGS);
        let first = open(&cache, &[topic("a", &[(0, 0), (1, 0)])], 0).unwrap().lock().id();
        let second = open(&cache, &[topic("b", &[(0, 0)])], 500).unwrap().lock().id();
        // Neither is stale at 600 and a one-partition session is larger than neither.
        assert!(open(&cache, &[topic("c", &[(0, 0)])], 600).is_none());
        // Three partitions outweigh the one-partition session.
        let third = open(&cache, &[topic("d", &[(0, 0), (1, 0), (2, 0)])], 700)
            .unwrap()
            .lock()
            .id();
        assert!(matches!(
            cache.begin(second, 1, false, None, &[], &[], 700),
            Err(ResponseError::FetchSessionIdNotFound)
        ));
        // At 1,200 the first (last used at 0) is stale and makes room for any session.
        assert!(open(&cache, &[topic("e", &[(0, 0)])], 1_200).is_some());
        assert!(matches!(
            cache.begin(first, 1, false, None, &[], &[], 1_200),
            Err(ResponseError::FetchSessionIdNotFound)
        ));
        assert!(cache.begin(third, 1, false, None, &[], &[], 1_200).is_ok());
        assert_eq!((cache.len(), cache.partitions_held()), (2, 4));
    }

    #[test]
    fn sessions_never_hold_more_partitions_than_the_cap() {
        let cache = FetchSessionCache::new(SETTINGS);
        let many: Vec<(i32, i64)> = (0..11).map(|p| (p, 0)).collect();
        assert!(
            open(&cache, &[topic("a", &many)], 0).is_none(),
            "11 partitions pass the cap of 10"
        );
        let id = open(&cache, &[topic("a", &many[..8])], 0).unwrap().lock().id();
        let grow = [topic("b", &many[..3])];
        assert!(matches!(
            cache.begin(id, 1, false, None, &grow, &[], 1),
            Err(ResponseError::FetchSessionIdNotFound)
        ));
        assert_eq!(
            (cache.len(), cache.partitions_held()),
            (0, 0),
            "the overgrown session is gone"
        );
    }

    #[test]
    fn only_partitions_with_news_are_sent_and_those_with_records_move_last() {
        let cache = FetchSessionCache::new(SETTINGS);
        let session = open(&cache, &[topic("a", &[(0, 0), (1, 0), (2, 0)])], 0).unwrap();
        let mut s = session.lock();
        let key = |p| (TopicRef::Name(StrBytes::from_static_str("a")), p);
        for p in 0..3 {
            s.sent_in_full(&key(p), 10, 0);
        }
        assert!(!s.must_send(&key(0), false, 0, 10, 0), "nothing new");
        assert!(s.must_send(&key(1), false, 0, 11, 0), "the high watermark moved");
        assert!(!s.must_send(&key(1), false, 0, 11, 0), "and was sent");
        assert!(s.must_send(&key(2), true, 0, 10, 0), "records");
        assert!(s.must_send(&key(0), false, 6, 10, 0), "an error");
        assert!(s.must_send(&key(0), false, 0, 10, 3), "the log start moved");
        s.rotate(&[key(0)]);
        let order: Vec<i32> = s.fetch_topics()[0].partitions.iter().map(|p| p.partition).collect();
        assert_eq!(order, [1, 2, 0]);
    }

    #[test]
    fn a_followers_session_reads_only_what_it_names_what_changed_and_what_was_left_over() {
        const TOPIC: Uuid = Uuid::from_u128(7);
        let dir = tempfile::tempdir().unwrap();
        let tail_cache = crate::log::TailCacheBudget::new(1 << 20, 64 << 20);
        let files = crate::log::FileCache::unbounded();
        let partitions: Vec<Arc<Partition>> = (0..3)
            .map(|index| {
                let path = dir.path().join(index.to_string());
                let log = crate::log::LogConfig::default();
                Arc::new(Partition::open(&path, "t", TOPIC, index, 1, log, None, &tail_cache, &files, 0).unwrap())
            })
            .collect();
        let by_id = |positions: &[(i32, i64)]| {
            FetchTopic::default().with_topic_id(TOPIC).with_partitions(
                positions
                    .iter()
                    .map(|&(p, offset)| FetchPartition::default().with_partition(p).with_fetch_offset(offset))
                    .collect(),
            )
        };
        let key = |p: i32| (TopicRef::Id(TOPIC), p);
        let cache = FetchSessionCache::new(SETTINGS);
        let all = [by_id(&[(0, 0), (1, 0), (2, 0)])];
        let SessionFetch::Full { session: Some(session) } =
            cache.begin(0, INITIAL_EPOCH, true, Some(2), &all, &[], 0).unwrap()
        else {
            panic!("a full fetch with a free slot opens a session")
        };
        let id = session.lock().id();
        for (p, partition) in partitions.iter().enumerate() {
            session.lock().watch(&key(p as i32), Ok(partition));
        }
        let mut epoch = 0;
        let mut fetch = |named: &[FetchTopic], forgotten: &[ForgottenTopic]| {
            epoch += 1;
            match cache.begin(id, epoch, true, Some(2), named, forgotten, 0).unwrap() {
                SessionFetch::Incremental { topics, .. } => topics
                    .iter()
                    .flat_map(|t| t.partitions.iter().map(|p| (p.partition, p.fetch_offset)))
                    .collect::<Vec<_>>(),
                _ => panic!("an incremental fetch"),
            }
        };
        assert_eq!(fetch(&[], &[]), [], "nothing named, nothing changed");
        assert!(partitions[1].watch().set_log_end_offset(5));
        assert_eq!(fetch(&[], &[]), [(1, 0)], "only the partition that changed");
        assert_eq!(fetch(&[], &[]), [], "and only once");
        let forget_0 = ForgottenTopic::default().with_topic_id(TOPIC).with_partitions(vec![0]);
        assert_eq!(
            fetch(&[by_id(&[(2, 3)])], &[forget_0]),
            [(2, 3)],
            "what the request names"
        );
        assert!(partitions[0].watch().set_log_end_offset(1));
        assert_eq!(fetch(&[], &[]), [], "a forgotten partition is no longer followed");
        session.lock().carry_over(key(1));
        assert_eq!(fetch(&[], &[]), [(1, 0)], "what the last answer left over");
        session.lock().watch(&key(2), Err(()));
        assert_eq!(fetch(&[], &[]), [(2, 3)], "a partition that resolved to an error");
        assert_eq!(session.lock().follower(), Some(2));
    }
}

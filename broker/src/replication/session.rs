//! The client side of an incremental fetch session (KIP-227, Kafka's `FetchSessionHandler`),
//! for a replica fetcher: the leader side is `fetch_session.rs`.
//!
//! A full fetch (epoch 0) names every partition and opens a session. After that a fetch names
//! only the partitions whose fetch position or limits changed since the last request, and in
//! `forgotten_topics_data` those no longer fetched; the leader reads every partition of the
//! session and answers only those with news (records, an error, a moved high watermark or log
//! start offset), so a partition missing from an incremental answer has none. The epoch
//! counts up (after `i32::MAX` comes 1); any error, a session id that does not match, or a
//! failed connection makes the next fetch a full one that replaces the session.
//!
//! Sessions name topics by id (Fetch v13+), as the fetcher's Fetch v15 does.

use std::collections::HashMap;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
use uuid::Uuid;

pub use crate::fetch_session::PartitionFetch;
use crate::fetch_session::{INITIAL_EPOCH, INVALID_SESSION_ID};

pub type PartitionKey = (Uuid, i32);

/// A partition of the session, as the leader holds it.
#[derive(Debug, Clone, Copy)]
struct InSession {
    fetch: PartitionFetch,
    /// The last request that named or kept it ([`FetchSessionHandler::round`]).
    round: u64,
}

/// The session part of the next Fetch request.
#[derive(Debug, Default)]
pub struct SessionRequest {
    pub session_id: i32,
    pub session_epoch: i32,
    pub topics: Vec<FetchTopic>,
    pub forgotten_topics_data: Vec<ForgottenTopic>,
}

impl SessionRequest {
    pub fn is_full(&self) -> bool {
        self.session_epoch == INITIAL_EPOCH
    }
}

#[derive(Debug, Default)]
pub struct FetchSessionHandler {
    /// The session the leader gave us; 0 for none.
    session_id: i32,
    /// The epoch of the next request: 0 is a full fetch that opens a session (closing
    /// `session_id`'s if set).
    next_epoch: i32,
    /// What the leader's session holds for each partition, as of the last request built.
    partitions: HashMap<PartitionKey, InSession>,
    /// Counts requests built, to find the session's partitions a request left out.
    round: u64,
}

impl FetchSessionHandler {
    /// Whether the next request will be a full one.
    pub fn next_is_full(&self) -> bool {
        self.next_epoch == INITIAL_EPOCH
    }

    /// What the leader last heard from us about `key` in this session (the position it reads
    /// from when the request leaves the partition out).
    pub fn sent(&self, key: &PartitionKey) -> Option<PartitionFetch> {
        self.partitions.get(key).map(|p| p.fetch)
    }

    /// Whether a session is open and holds partitions: an incremental fetch naming nothing
    /// still long-polls them.
    pub fn is_open(&self) -> bool {
        !self.next_is_full() && self.session_id != INVALID_SESSION_ID && !self.partitions.is_empty()
    }

    /// The next incremental request when `fetch` lists only partitions that may have moved:
    /// it names those that did (or are new), and keeps every other partition of the session as
    /// it is (nothing is forgotten). Call it only while [`Self::is_open`].
    pub fn build_moved(&mut self, fetch: impl IntoIterator<Item = (PartitionKey, PartitionFetch)>) -> SessionRequest {
        debug_assert!(!self.next_is_full(), "a full request lists every partition (build)");
        let mut topics: HashMap<Uuid, Vec<FetchPartition>> = HashMap::new();
        for (key, next) in fetch {
            if self.hold(key, next, false) {
                topics.entry(key.0).or_default().push(next.to_request(key.1));
            }
        }
        self.request(topics, HashMap::new())
    }

    /// Holds `next` as `key`'s position (a newcomer joins at the current round; `keep`: the
    /// current request lists it, so it is not forgotten) and says whether it changed.
    fn hold(&mut self, key: PartitionKey, next: PartitionFetch, keep: bool) -> bool {
        let round = self.round;
        match self.partitions.get_mut(&key) {
            Some(held) => {
                if keep {
                    held.round = round;
                }
                let changed = held.fetch != next;
                held.fetch = next;
                changed
            }
            None => {
                self.partitions.insert(key, InSession { fetch: next, round });
                true
            }
        }
    }

    fn request(
        &self,
        topics: HashMap<Uuid, Vec<FetchPartition>>,
        forgotten: HashMap<Uuid, Vec<i32>>,
    ) -> SessionRequest {
        SessionRequest {
            session_id: self.session_id,
            session_epoch: self.next_epoch,
            topics: topics
                .into_iter()
                .map(|(id, partitions)| FetchTopic::default().with_topic_id(id).with_partitions(partitions))
                .collect(),
            forgotten_topics_data: forgotten
                .into_iter()
                .map(|(id, partitions)| ForgottenTopic::default().with_topic_id(id).with_partitions(partitions))
                .collect(),
        }
    }

    /// The next request for exactly the partitions `fetch` lists (each once). A full request
    /// lists them all; an incremental one those added or changed, and forgets the others.
    pub fn build(&mut self, fetch: impl IntoIterator<Item = (PartitionKey, PartitionFetch)>) -> SessionRequest {
        self.round += 1;
        let round = self.round;
        let full = self.next_is_full();
        if full {
            self.partitions.clear();
        }
        let mut topics: HashMap<Uuid, Vec<FetchPartition>> = HashMap::new();
        for (key, next) in fetch {
            if self.hold(key, next, true) || full {
                topics.entry(key.0).or_default().push(next.to_request(key.1));
            }
        }
        let mut forgotten: HashMap<Uuid, Vec<i32>> = HashMap::new();
        self.partitions.retain(|key, held| {
            let kept = held.round == round;
            if !kept {
                forgotten.entry(key.0).or_default().push(key.1);
            }
            kept
        });
        self.request(topics, forgotten)
    }

    /// Takes the answer to the last request built: its top-level error and session id. False
    /// when the answer carries no partition data to apply (an error): the next request is
    /// then full.
    pub fn handle_response(&mut self, error_code: i16, session_id: i32) -> bool {
        if error_code != 0 {
            if ResponseError::try_from_code(error_code) == Some(ResponseError::FetchSessionIdNotFound) {
                self.session_id = INVALID_SESSION_ID;
            }
            // Otherwise the next full fetch names the old session, which closes it.
            self.next_epoch = INITIAL_EPOCH;
            return false;
        }
        if self.next_is_full() {
            // A session, or none when the leader had no slot: then full fetches go on, each
            // asking again.
            self.session_id = session_id;
            if session_id != INVALID_SESSION_ID {
                self.next_epoch = next_epoch(INITIAL_EPOCH);
            }
        } else if session_id == self.session_id {
            self.next_epoch = next_epoch(self.next_epoch);
        } else {
            tracing::debug!(
                expected = self.session_id,
                got = session_id,
                "the leader answered an incremental fetch in another session; fetching in full"
            );
            self.session_id = session_id;
            self.next_epoch = INITIAL_EPOCH;
        }
        true
    }

    /// The last request got no answer (connection failure, timeout): the next is full, and
    /// closes the session in case the leader still holds it.
    pub fn handle_error(&mut self) {
        self.next_epoch = INITIAL_EPOCH;
    }
}

/// Kafka's `FetchMetadata.nextEpoch`: after `i32::MAX` comes 1, as 0 opens a session.
fn next_epoch(epoch: i32) -> i32 {
    if epoch == i32::MAX {
        1
    } else {
        epoch + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOPIC: Uuid = Uuid::from_u128(1);
    const OTHER: Uuid = Uuid::from_u128(2);

    fn at(offset: i64) -> PartitionFetch {
        PartitionFetch {
            fetch_offset: offset,
            current_leader_epoch: 3,
            last_fetched_epoch: 3,
            log_start_offset: 0,
            partition_max_bytes: 1 << 20,
        }
    }

    /// (topic, partition, fetch offset) of each partition the request names, sorted.
    fn named(request: &SessionRequest) -> Vec<(Uuid, i32, i64)> {
        let mut named: Vec<_> = request
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(move |p| (t.topic_id, p.partition, p.fetch_offset))
            })
            .collect();
        named.sort();
        named
    }

    fn forgotten(request: &SessionRequest) -> Vec<(Uuid, i32)> {
        let mut forgotten: Vec<_> = request
            .forgotten_topics_data
            .iter()
            .flat_map(|t| t.partitions.iter().map(move |p| (t.topic_id, *p)))
            .collect();
        forgotten.sort();
        forgotten
    }

    const NOT_FOUND: i16 = 70;
    const INVALID_EPOCH: i16 = 71;

    #[test]
    fn a_session_goes_full_then_incremental_with_changes_additions_and_removals() {
        let mut handler = FetchSessionHandler::default();
        let full = handler.build([((TOPIC, 0), at(5)), ((TOPIC, 1), at(7))]);
        assert_eq!((full.session_id, full.session_epoch), (0, 0));
        assert!(full.is_full() && full.forgotten_topics_data.is_empty());
        assert_eq!(named(&full), [(TOPIC, 0, 5), (TOPIC, 1, 7)]);
        assert!(handler.handle_response(0, 42));

        // Nothing changed: an empty incremental fetch in session 42.
        let idle = handler.build([((TOPIC, 0), at(5)), ((TOPIC, 1), at(7))]);
        assert_eq!((idle.session_id, idle.session_epoch), (42, 1));
        assert!(named(&idle).is_empty() && idle.forgotten_topics_data.is_empty());
        assert!(handler.handle_response(0, 42));

        // Partition 0 moved, partition 1 is gone, another topic's partition joins.
        let next = handler.build([((TOPIC, 0), at(9)), ((OTHER, 4), at(0))]);
        assert_eq!(next.session_epoch, 2);
        assert_eq!(named(&next), [(TOPIC, 0, 9), (OTHER, 4, 0)]);
        assert_eq!(forgotten(&next), [(TOPIC, 1)]);
        assert!(handler.handle_response(0, 42));
        assert_eq!(handler.sent(&(TOPIC, 0)), Some(at(9)));
        assert_eq!(handler.sent(&(TOPIC, 1)), None);

        // A changed leader epoch counts as a change too.
        let mut epoch = at(9);
        epoch.current_leader_epoch = 4;
        let next = handler.build([((TOPIC, 0), epoch), ((OTHER, 4), at(0))]);
        assert_eq!((next.session_epoch, named(&next)), (3, vec![(TOPIC, 0, 9)]));
    }

    #[test]
    fn between_walks_a_fetch_names_what_moved_and_forgets_nothing() {
        let mut handler = FetchSessionHandler::default();
        assert!(!handler.is_open(), "no session before the first answer");
        handler.build([((TOPIC, 0), at(5)), ((TOPIC, 1), at(7))]);
        assert!(handler.handle_response(0, 42));
        assert!(handler.is_open());
        // Partition 0 moved, partition 1 was marked but sits where it was, 1 of OTHER joins;
        // partition 1 stays in the session although the round did not list it as moved.
        let moved = handler.build_moved([((TOPIC, 0), at(9)), ((TOPIC, 1), at(7)), ((OTHER, 1), at(0))]);
        assert_eq!((moved.session_id, moved.session_epoch), (42, 1));
        assert_eq!(named(&moved), [(TOPIC, 0, 9), (OTHER, 1, 0)]);
        assert!(moved.forgotten_topics_data.is_empty());
        assert!(handler.handle_response(0, 42));
        let idle = handler.build_moved([]);
        assert_eq!((idle.session_epoch, named(&idle).len()), (2, 0));
        assert!(handler.handle_response(0, 42));
        // The next walk lists every partition and forgets only what it leaves out.
        let walk = handler.build([((TOPIC, 0), at(9)), ((OTHER, 1), at(0))]);
        assert_eq!((named(&walk).len(), forgotten(&walk)), (0, vec![(TOPIC, 1)]));
        handler.handle_error();
        assert!(!handler.is_open(), "after a failed fetch the next is full");
    }

    #[test]
    fn an_error_makes_the_next_fetch_full_and_a_new_session() {
        let mut handler = FetchSessionHandler::default();
        handler.build([((TOPIC, 0), at(0))]);
        handler.handle_response(0, 42);
        handler.build([((TOPIC, 0), at(1))]);
        // The leader lost track of the epoch: the next full fetch closes session 42.
        assert!(!handler.handle_response(INVALID_EPOCH, 0));
        let full = handler.build([((TOPIC, 0), at(1)), ((TOPIC, 1), at(0))]);
        assert_eq!((full.session_id, full.session_epoch), (42, 0));
        assert_eq!(named(&full), [(TOPIC, 0, 1), (TOPIC, 1, 0)]);
        assert!(handler.handle_response(0, 43));
        let next = handler.build([((TOPIC, 0), at(1)), ((TOPIC, 1), at(0))]);
        assert_eq!((next.session_id, next.session_epoch), (43, 1));
        assert!(named(&next).is_empty());

        // The leader no longer knows the session (it restarted): a new one from scratch.
        assert!(!handler.handle_response(NOT_FOUND, 0));
        let full = handler.build([((TOPIC, 0), at(1))]);
        assert_eq!((full.session_id, full.session_epoch), (0, 0));
        assert_eq!(named(&full), [(TOPIC, 0, 1)]);
        assert!(full.forgotten_topics_data.is_empty(), "a full fetch forgets nothing");

        // No slot on the leader: full fetches go on, each asking for a session.
        assert!(handler.handle_response(0, 0));
        assert!(handler.build([((TOPIC, 0), at(2))]).is_full());
        assert!(handler.handle_response(0, 44));

        // A lost connection: the next fetch is full and closes session 44.
        handler.build([((TOPIC, 0), at(2))]);
        handler.handle_error();
        let full = handler.build([((TOPIC, 0), at(2))]);
        assert_eq!((full.session_id, full.session_epoch, named(&full).len()), (44, 0, 1));
    }

    #[test]
    fn an_answer_in_another_session_starts_over() {
        let mut handler = FetchSessionHandler::default();
        handler.build([((TOPIC, 0), at(0))]);
        handler.handle_response(0, 42);
        handler.build([((TOPIC, 0), at(0))]);
        assert!(handler.handle_response(0, 0), "partition data, if any, still applies");
        assert!(handler.next_is_full());
    }

    #[test]
    fn the_epoch_wraps_past_i32_max_to_1() {
        let mut handler = FetchSessionHandler {
            session_id: 42,
            next_epoch: i32::MAX,
            ..Default::default()
        };
        assert_eq!(handler.build([((TOPIC, 0), at(0))]).session_epoch, i32::MAX);
        handler.handle_response(0, 42);
        assert_eq!(handler.build([((TOPIC, 0), at(0))]).session_epoch, 1);
        assert_eq!(next_epoch(0), 1);
    }
}

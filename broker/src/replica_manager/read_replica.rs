//! Fetching from the nearest replica (KIP-392). A consumer that names its `client.rack` in
//! Fetch (v11+) may read from any replica; the partition leader tells it which one through
//! the response's `preferred_read_replica` when `replica.selector.class` is Kafka's
//! `RackAwareReplicaSelector`:
//!
//! - candidates are the leader and the in-sync followers whose log holds the fetch offset
//!   (Kafka leaves out replicas outside the ISR, which could keep a consumer behind forever),
//!   on live brokers that have an endpoint on the consumer's listener;
//! - among those in the consumer's rack the leader wins, then the one with the highest log
//!   end offset, then the one caught up most recently; with none in its rack, the leader;
//! - the leader itself is never named: the consumer just reads on.
//!
//! A follower serves a consumer up to its own high watermark (or last stable offset), which
//! it learns from the leader, so it never shows a record the leader has not committed.

use crate::config::ReplicaSelector;
use crate::metadata::image::MetadataImage;
use crate::partition::{Partition, ReadCandidate};

/// Kafka's `RackAwareReplicaSelector.select`: the candidate in `client_rack` to read from,
/// `leader` when it is in that rack or none is.
fn select_in_rack<'a>(
    client_rack: &str,
    leader: i32,
    candidates: &[ReadCandidate],
    rack_of: impl Fn(i32) -> Option<&'a str>,
) -> i32 {
    let in_rack = || candidates.iter().filter(|c| rack_of(c.broker_id) == Some(client_rack));
    if client_rack.is_empty() || in_rack().any(|c| c.broker_id == leader) {
        return leader;
    }
    in_rack()
        .max_by(|a, b| {
            a.log_end_offset
                .cmp(&b.log_end_offset)
                .then(b.since_caught_up_ms.cmp(&a.since_caught_up_ms))
        })
        .map_or(leader, |c| c.broker_id)
}

/// The follower a consumer in `client_rack` reading `fetch_offset` from this leader replica
/// should fetch from instead, on the consumer's `listener`; `None` to read here (this replica
/// does not lead, the selector is the leader's, or the leader is the best choice).
pub fn preferred_read_replica(
    selector: ReplicaSelector,
    partition: &Partition,
    image: &MetadataImage,
    listener: &str,
    client_rack: &str,
    fetch_offset: i64,
    now_ms: i64,
) -> Option<i32> {
    if selector == ReplicaSelector::Leader || client_rack.is_empty() {
        return None;
    }
    let mut candidates = partition.read_candidates(fetch_offset, now_ms)?;
    let own_id = candidates.first()?.broker_id;
    candidates.retain(|c| {
        c.broker_id == own_id
            || image
                .brokers
                .get(&c.broker_id)
                .is_some_and(|b| b.is_live() && b.endpoint(listener).is_some())
    });
    let rack_of = |id: i32| image.brokers.get(&id).and_then(|b| b.rack.as_deref());
    let chosen = select_in_rack(client_rack, own_id, &candidates, rack_of);
    (chosen != own_id).then_some(chosen)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(broker_id: i32, log_end_offset: i64, since_caught_up_ms: i64) -> ReadCandidate {
        ReadCandidate {
            broker_id,
            log_end_offset,
            since_caught_up_ms,
        }
    }

    /// Brokers 1 and 2 in rack a, 3 and 4 in b, 5 in c.
    fn rack_of(id: i32) -> Option<&'static str> {
        match id {
            1 | 2 => Some("a"),
            3 | 4 => Some("b"),
            5 => Some("c"),
            _ => None,
        }
    }

    #[test]
    fn the_leader_is_chosen_when_it_is_in_the_consumers_rack_or_no_candidate_is() {
        let all = [candidate(1, 100, 0), candidate(2, 100, 0), candidate(3, 100, 0)];
        assert_eq!(select_in_rack("a", 1, &all, rack_of), 1, "leader in the rack");
        assert_eq!(select_in_rack("c", 1, &all, rack_of), 1, "no replica in rack c");
        assert_eq!(select_in_rack("", 1, &all, rack_of), 1, "no client rack");
        assert_eq!(select_in_rack("b", 1, &all, rack_of), 3, "the only replica in rack b");
    }

    #[test]
    fn in_the_rack_the_replica_furthest_ahead_then_most_recently_caught_up_wins() {
        let behind = [candidate(1, 100, 0), candidate(3, 90, 0), candidate(4, 95, 500)];
        assert_eq!(select_in_rack("b", 1, &behind, rack_of), 4, "highest log end offset");
        let even = [candidate(1, 100, 0), candidate(3, 100, 800), candidate(4, 100, 200)];
        assert_eq!(select_in_rack("b", 1, &even, rack_of), 4, "caught up more recently");
        let unknown_rack = [candidate(1, 100, 0), candidate(9, 100, 0)];
        assert_eq!(
            select_in_rack("b", 1, &unknown_rack, rack_of),
            1,
            "a broker without a rack is in none"
        );
    }
}

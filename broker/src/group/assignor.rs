//! KIP-848's server-side assignors (`group.consumer.assignors`): the coordinator, not a
//! member, turns a consumer group's subscriptions into a target assignment.
//!
//! - `uniform` (the default, Kafka's `UniformAssignor`): every member gets as many partitions as
//!   any other it could swap with, within one; a partition stays with the member that had it in
//!   the previous target whenever balance allows, so a member joining or leaving moves only the
//!   partitions it must.
//! - `range` (Kafka's `RangeAssignor`): per topic, the subscribed members in id order each take a
//!   contiguous range, the first ones one more, so members of co-partitioned topics get the
//!   same partition numbers of each.
//!
//! Pure functions of the members, their subscriptions and the topics' partition counts: the
//! same input gives the same assignment on every coordinator.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use uuid::Uuid;

pub use crate::config::Assignor;

/// Partitions by topic id, as ConsumerGroupHeartbeat carries them.
pub type Assignment = BTreeMap<Uuid, BTreeSet<i32>>;

/// Partition counts of the topics some member subscribes to, by topic id.
pub type TopicPartitionCounts = BTreeMap<Uuid, i32>;

/// One member as an assignor sees it.
pub struct AssignorMember<'a> {
    pub id: &'a str,
    /// Ids of the existing topics it subscribes to.
    pub topics: &'a BTreeSet<Uuid>,
    /// Its partitions in the previous target assignment (stickiness).
    pub previous: Option<&'a Assignment>,
}

impl Assignor {
    /// The target assignment: every member's partitions, each partition of a subscribed
    /// topic given to exactly one member subscribed to it.
    pub fn assign(self, members: &[AssignorMember<'_>], topics: &TopicPartitionCounts) -> BTreeMap<String, Assignment> {
        match self {
            Assignor::Uniform => uniform(members, topics),
            Assignor::Range => range(members, topics),
        }
    }
}

fn range(members: &[AssignorMember<'_>], topics: &TopicPartitionCounts) -> BTreeMap<String, Assignment> {
    let mut out: BTreeMap<String, Assignment> = members.iter().map(|m| (m.id.to_string(), Assignment::new())).collect();
    for (topic, &count) in topics {
        let mut subscribed: Vec<&str> = members
            .iter()
            .filter(|m| m.topics.contains(topic))
            .map(|m| m.id)
            .collect();
        if subscribed.is_empty() || count <= 0 {
            continue;
        }
        subscribed.sort_unstable();
        let n = subscribed.len() as i32;
        let (each, extra) = (count / n, count % n);
        let mut next = 0;
        for (i, member) in subscribed.into_iter().enumerate() {
            let take = each + i32::from((i as i32) < extra);
            if take > 0 {
                out.entry(member.to_string())
                    .or_default()
                    .insert(*topic, (next..next + take).collect());
            }
            next += take;
        }
    }
    out
}

type Tp = (Uuid, i32);

fn uniform(members: &[AssignorMember<'_>], topics: &TopicPartitionCounts) -> BTreeMap<String, Assignment> {
    let mut sorted: Vec<&AssignorMember<'_>> = members.iter().collect();
    sorted.sort_unstable_by_key(|m| m.id);
    let index: HashMap<&str, usize> = sorted.iter().enumerate().map(|(i, m)| (m.id, i)).collect();
    let mut owned: Vec<BTreeSet<Tp>> = vec![BTreeSet::new(); sorted.len()];
    let mut owner: HashMap<Tp, usize> = HashMap::new();
    let valid = |tp: &Tp| topics.get(&tp.0).is_some_and(|&count| tp.1 >= 0 && tp.1 < count);

    // Sticky: a partition stays where the previous target put it if that member still wants it.
    for (i, member) in sorted.iter().enumerate() {
        for (topic, partitions) in member.previous.into_iter().flatten() {
            if !member.topics.contains(topic) {
                continue;
            }
            for &p in partitions {
                let tp = (*topic, p);
                if valid(&tp) && !owner.contains_key(&tp) {
                    owner.insert(tp, i);
                    owned[i].insert(tp);
                }
            }
        }
    }

    // The rest go to the least loaded member that may take them, topics with the fewest
    // subscribers first, so members with narrow subscriptions are served before others fill up.
    let eligible: BTreeMap<Uuid, Vec<usize>> = topics
        .keys()
        .map(|t| {
            (
                *t,
                (0..sorted.len()).filter(|&i| sorted[i].topics.contains(t)).collect(),
            )
        })
        .collect();
    let mut order: Vec<(&Uuid, &i32)> = topics.iter().collect();
    order.sort_by_key(|(t, _)| (eligible[*t].len(), **t));
    for (topic, &count) in order {
        let candidates = &eligible[topic];
        if candidates.is_empty() {
            continue;
        }
        for p in 0..count.max(0) {
            let tp = (*topic, p);
            if owner.contains_key(&tp) {
                continue;
            }
            let Some(&least) = candidates.iter().min_by_key(|&&i| (owned[i].len(), i)) else {
                continue;
            };
            owner.insert(tp, least);
            owned[least].insert(tp);
        }
    }

    // Balance: move a partition from a member to one that may take it and has at least two
    // fewer, until none can move. Each move lowers the sum of squared counts, so this ends.
    let mut moved = true;
    while moved {
        moved = false;
        let mut by_load: Vec<usize> = (0..sorted.len()).collect();
        by_load.sort_by_key(|&i| (std::cmp::Reverse(owned[i].len()), i));
        'members: for from in by_load {
            let load = owned[from].len();
            // The highest partitions move first, keeping the low ones where they were.
            for tp in owned[from].iter().rev() {
                let target = eligible[&tp.0]
                    .iter()
                    .copied()
                    .filter(|&to| owned[to].len() + 1 < load)
                    .min_by_key(|&to| (owned[to].len(), to));
                if let Some(to) = target {
                    let tp = *tp;
                    owned[from].remove(&tp);
                    owned[to].insert(tp);
                    moved = true;
                    break 'members;
                }
            }
        }
    }

    let mut out = BTreeMap::new();
    for (id, i) in index {
        let mut assignment = Assignment::new();
        for (topic, p) in &owned[i] {
            assignment.entry(*topic).or_default().insert(*p);
        }
        out.insert(id.to_string(), assignment);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(n: u8) -> Uuid {
        Uuid::from_bytes([n; 16])
    }

    fn member<'a>(id: &'a str, topics: &'a BTreeSet<Uuid>, previous: Option<&'a Assignment>) -> AssignorMember<'a> {
        AssignorMember { id, topics, previous }
    }

    fn count(a: &Assignment) -> usize {
        a.values().map(BTreeSet::len).sum()
    }

    /// Every partition of every subscribed topic is assigned exactly once, to a subscriber.
    fn assert_complete(
        members: &[AssignorMember<'_>],
        topics: &TopicPartitionCounts,
        out: &BTreeMap<String, Assignment>,
    ) {
        let mut seen = BTreeSet::new();
        for m in members {
            for (t, ps) in &out[m.id] {
                assert!(m.topics.contains(t), "{} got a topic it does not subscribe to", m.id);
                for p in ps {
                    assert!(seen.insert((*t, *p)), "partition {t}-{p} assigned twice");
                }
            }
        }
        let wanted: usize = topics
            .iter()
            .filter(|(t, _)| members.iter().any(|m| m.topics.contains(t)))
            .map(|(_, c)| *c as usize)
            .sum();
        assert_eq!(seen.len(), wanted);
    }

    #[test]
    fn uniform_balances_within_one_and_keeps_partitions_where_they_were() {
        let subs: BTreeSet<Uuid> = [topic(1), topic(2)].into();
        let topics: TopicPartitionCounts = [(topic(1), 7), (topic(2), 5)].into();
        let members = [member("a", &subs, None), member("b", &subs, None)];
        let first = Assignor::Uniform.assign(&members, &topics);
        assert_complete(&members, &topics, &first);
        assert_eq!((count(&first["a"]), count(&first["b"])), (6, 6));

        // A third member joins: each of the others gives up exactly two, keeping the rest.
        let members = [
            member("a", &subs, Some(&first["a"])),
            member("b", &subs, Some(&first["b"])),
            member("c", &subs, None),
        ];
        let second = Assignor::Uniform.assign(&members, &topics);
        assert_complete(&members, &topics, &second);
        for id in ["a", "b"] {
            assert_eq!(count(&second[id]), 4);
            let kept = second[id]
                .iter()
                .flat_map(|(t, ps)| ps.iter().map(move |p| (*t, *p)))
                .filter(|(t, p)| first[id].get(t).is_some_and(|ps| ps.contains(p)))
                .count();
            assert_eq!(kept, 4, "{id} lost a partition it could have kept");
        }
        assert_eq!(count(&second["c"]), 4);
    }

    #[test]
    fn uniform_serves_narrow_subscriptions_first() {
        let both: BTreeSet<Uuid> = [topic(1), topic(2)].into();
        let only_two: BTreeSet<Uuid> = [topic(2)].into();
        let topics: TopicPartitionCounts = [(topic(1), 4), (topic(2), 4)].into();
        let members = [member("a", &both, None), member("b", &only_two, None)];
        let out = Assignor::Uniform.assign(&members, &topics);
        assert_complete(&members, &topics, &out);
        assert_eq!((count(&out["a"]), count(&out["b"])), (4, 4));
        assert_eq!(out["b"][&topic(2)].len(), 4);
    }

    #[test]
    fn uniform_drops_partitions_of_topics_gone_or_unsubscribed() {
        let subs: BTreeSet<Uuid> = [topic(1)].into();
        let topics: TopicPartitionCounts = [(topic(1), 2)].into();
        let previous: Assignment = [(topic(1), [0, 1, 5].into()), (topic(9), [0].into())].into();
        let members = [member("a", &subs, Some(&previous))];
        let out = Assignor::Uniform.assign(&members, &topics);
        assert_eq!(out["a"], [(topic(1), [0, 1].into())].into());
    }

    #[test]
    fn range_gives_co_partitioned_topics_the_same_numbers() {
        let subs: BTreeSet<Uuid> = [topic(1), topic(2)].into();
        let topics: TopicPartitionCounts = [(topic(1), 5), (topic(2), 5)].into();
        let members = [member("b", &subs, None), member("a", &subs, None)];
        let out = Assignor::Range.assign(&members, &topics);
        assert_complete(&members, &topics, &out);
        let a: BTreeSet<i32> = [0, 1, 2].into();
        let b: BTreeSet<i32> = [3, 4].into();
        assert_eq!(out["a"], [(topic(1), a.clone()), (topic(2), a)].into());
        assert_eq!(out["b"], [(topic(1), b.clone()), (topic(2), b)].into());
    }

    #[test]
    fn more_members_than_partitions_leaves_some_empty() {
        let subs: BTreeSet<Uuid> = [topic(1)].into();
        let topics: TopicPartitionCounts = [(topic(1), 1)].into();
        for assignor in Assignor::ALL {
            let members = [member("a", &subs, None), member("b", &subs, None)];
            let out = assignor.assign(&members, &topics);
            assert_complete(&members, &topics, &out);
            assert_eq!(count(&out["a"]) + count(&out["b"]), 1, "{}", assignor.name());
        }
        assert_eq!(Assignor::by_name("range"), Some(Assignor::Range));
        assert_eq!(Assignor::by_name("sticky"), None);
    }
}

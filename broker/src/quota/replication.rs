//! Replication throttles (Kafka's `ReplicationQuotaManager`, KIP-73): while partitions move,
//! `kafka-reassign-partitions --throttle` caps the bytes a leader serves to, and a follower
//! fetches for, replicas that are catching up, so a move does not starve producers and
//! consumers of disk and network.
//!
//! A replica is throttled when its topic's `leader.replication.throttled.replicas` (read on
//! the leader, naming the leader's replica) or `follower.replication.throttled.replicas` (read
//! on the follower, naming its own) lists it as `partition:broker` or `*`, and the follower is
//! not in the ISR: in-sync followers are never held back, so `acks=all` never waits on a
//! throttle. Throttled bytes go into one sampled rate per direction
//! (`replication.quota.window.*`); while that rate is above the broker's
//! `leader.replication.throttled.rate` or `follower.replication.throttled.rate`, throttled
//! partitions get no records (leader) or are left out of the fetch (follower).

use parking_lot::Mutex;

use super::rate::{RateWindow, SampledRate};
use crate::metadata::image::TopicImage;
use crate::topic_config::{self, BrokerOverrides};

/// One direction's throttle on one broker.
#[derive(Debug)]
pub struct ReplicationQuota {
    /// The broker config holding the bound (bytes/s).
    rate_key: &'static str,
    /// The topic config listing the throttled replicas.
    replicas_key: &'static str,
    window: RateWindow,
    rate: Mutex<SampledRate>,
}

impl ReplicationQuota {
    /// The leader side: bytes served to out-of-sync followers.
    pub fn leader(samples: u32, sample_ms: i64) -> Self {
        Self::new(
            topic_config::LEADER_THROTTLED_RATE,
            "leader.replication.throttled.replicas",
            samples,
            sample_ms,
        )
    }

    /// The follower side: bytes fetched while out of sync.
    pub fn follower(samples: u32, sample_ms: i64) -> Self {
        Self::new(
            topic_config::FOLLOWER_THROTTLED_RATE,
            "follower.replication.throttled.replicas",
            samples,
            sample_ms,
        )
    }

    fn new(rate_key: &'static str, replicas_key: &'static str, samples: u32, sample_ms: i64) -> Self {
        ReplicationQuota {
            rate_key,
            replicas_key,
            window: RateWindow {
                samples: samples.max(1),
                sample_ms: sample_ms.max(1),
            },
            rate: Mutex::new(SampledRate::default()),
        }
    }

    /// The broker's bound in bytes/s (its static and dynamic configs in `defaults`), or `None`
    /// when no throttle is set.
    pub fn bound(&self, defaults: &BrokerOverrides) -> Option<f64> {
        defaults
            .get(self.rate_key)
            .and_then(|v| v.parse::<i64>().ok())
            .filter(|&v| v >= 0 && v < i64::MAX)
            .map(|v| v as f64)
    }

    /// Whether `follower`'s copying of `partition` of `topic` counts against this throttle: the
    /// topic lists the replica on `broker` (the leader's own on the leader side, the
    /// follower's on the follower side) and `follower` is not in the partition's ISR.
    pub fn applies_to(&self, topic: &TopicImage, partition: i32, broker: i32, follower: i32) -> bool {
        let in_sync = usize::try_from(partition)
            .ok()
            .and_then(|p| topic.partitions.get(p))
            .is_some_and(|r| r.isr.contains(&follower));
        !in_sync
            && topic
                .configs
                .get(self.replicas_key)
                .is_some_and(|list| topic_config::throttled_replicas_include(list, partition, broker))
    }

    /// Whether throttled replicas must wait: the measured rate is above `bound`.
    pub fn is_exceeded(&self, bound: f64, now_ms: i64) -> bool {
        self.rate.lock().measure(self.window, now_ms) > bound
    }

    /// Counts `bytes` moved for throttled replicas.
    pub fn record(&self, bytes: usize, now_ms: i64) {
        if bytes > 0 {
            self.rate.lock().record(self.window, bytes as f64, now_ms);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::metadata::image::PartitionRegistration;

    fn configs(key: &str, value: &str) -> BTreeMap<String, String> {
        BTreeMap::from([(key.to_string(), value.to_string())])
    }

    /// A topic of 8 partitions whose ISR is broker 1 alone, with `configs`.
    fn topic(configs: BTreeMap<String, String>) -> TopicImage {
        let registration = PartitionRegistration {
            replicas: vec![1, 2, 3].into(),
            isr: vec![1].into(),
            leader: 1,
            ..Default::default()
        };
        TopicImage {
            name: "t".into(),
            topic_id: uuid::Uuid::from_u128(1),
            partitions: vec![registration; 8],
            configs,
        }
    }

    #[test]
    fn only_listed_out_of_sync_replicas_are_throttled() {
        let quota = ReplicationQuota::leader(11, 1000);
        let listed = topic(configs("leader.replication.throttled.replicas", "0:1,1:2"));
        assert!(quota.applies_to(&listed, 0, 1, 2));
        assert!(quota.applies_to(&listed, 1, 2, 3));
        assert!(!quota.applies_to(&listed, 0, 2, 3));
        assert!(
            !quota.applies_to(&listed, 0, 1, 1),
            "an in-sync follower is never throttled"
        );
        let every = topic(configs("leader.replication.throttled.replicas", "*"));
        assert!(quota.applies_to(&every, 7, 3, 2));
        let follower_list = topic(configs("follower.replication.throttled.replicas", "*"));
        assert!(
            !quota.applies_to(&follower_list, 0, 1, 2),
            "the leader reads its own list only"
        );
    }

    #[test]
    fn the_bound_comes_from_the_broker_config_and_the_rate_from_recorded_bytes() {
        let quota = ReplicationQuota::follower(11, 1000);
        assert_eq!(quota.bound(&BTreeMap::new()), None);
        let set = configs("follower.replication.throttled.rate", "1000");
        assert_eq!(quota.bound(&set), Some(1000.0));
        // A first burst is measured over ten samples: 10,000 bytes is exactly 1000 B/s.
        quota.record(10_000, 0);
        assert!(!quota.is_exceeded(1000.0, 0));
        quota.record(1, 0);
        assert!(quota.is_exceeded(1000.0, 0));
        // Once the window has passed, the bytes have expired.
        assert!(!quota.is_exceeded(1000.0, 60_000));
    }
}

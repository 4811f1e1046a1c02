//! Client quota settings (Kafka's `ClientQuotaManagerConfig`): how the byte rate of each quota
//! entity is measured, and how many entities are tracked at once; and how the replication
//! throttles measure theirs (`ReplicationQuotaManagerConfig`).

use super::{parse_at_least, ConfigError};

/// How produce and fetch byte rates are measured, by Kafka property name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaConfig {
    /// `quota.window.num`: samples the rate is measured over.
    pub window_num: u32,
    /// `quota.window.size.seconds`: the length of one sample.
    pub window_size_seconds: u32,
    /// `quota.max.tracked.entities` (Sluice's own setting): quota entities whose rate is tracked
    /// at once, per quota type. Entities idle for a whole quota window are dropped first (their
    /// rate is zero anyway), then the least recently used, so client ids chosen by a client
    /// cannot grow memory without bound.
    pub max_tracked_entities: usize,
    /// `replication.quota.window.num` and `replication.quota.window.size.seconds`: the same for
    /// the replication throttles.
    pub replication_window_num: u32,
    pub replication_window_size_seconds: u32,
}

impl Default for QuotaConfig {
    fn default() -> Self {
        QuotaConfig {
            window_num: 11,
            window_size_seconds: 1,
            max_tracked_entities: 10_000,
            replication_window_num: 11,
            replication_window_size_seconds: 1,
        }
    }
}

impl QuotaConfig {
    /// A sample's length in ms.
    pub fn window_ms(&self) -> i64 {
        i64::from(self.window_size_seconds) * 1000
    }

    /// A replication throttle sample's length in ms.
    pub fn replication_window_ms(&self) -> i64 {
        i64::from(self.replication_window_size_seconds) * 1000
    }
}

pub(super) fn quota_config(get: &dyn Fn(&str) -> String) -> Result<QuotaConfig, ConfigError> {
    let at_least_one = |key: &str| parse_at_least::<u32>(key, &get(key), 1);
    Ok(QuotaConfig {
        window_num: at_least_one("quota.window.num")?,
        window_size_seconds: at_least_one("quota.window.size.seconds")?,
        max_tracked_entities: parse_at_least("quota.max.tracked.entities", &get("quota.max.tracked.entities"), 1)?,
        replication_window_num: at_least_one("replication.quota.window.num")?,
        replication_window_size_seconds: at_least_one("replication.quota.window.size.seconds")?,
    })
}

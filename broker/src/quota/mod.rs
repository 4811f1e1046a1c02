//! Client byte-rate quotas (Kafka's `ClientQuotaManager`): one manager for produce
//! (`producer_byte_rate`, bytes appended) and one for fetch (`consumer_byte_rate`, bytes
//! returned to consumers; followers are never throttled).
//!
//! A request's (user, client-id) resolves to the most specific quota entity configured
//! (`precedence.rs`); the bytes are recorded in that entity's sampled rate (`rate.rs`), and
//! when the rate passes the quota the answer carries Kafka's throttle time. The connection then
//! stops reading from the client for that long (KIP-219: respond at once, then mute).
//!
//! `replication.rs` holds the replication throttles, which use the same sampled rate.
//!
//! No quota configured costs one emptiness check of the image's quotas. Rates live under a
//! mutex never held across an await, capped at `quota.max.tracked.entities` entities.

mod precedence;
mod rate;
mod replication;

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use crate::config::QuotaConfig;
use crate::controller::quotas::{CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE};
use crate::metadata::image::MetadataImage;
pub use precedence::QuotaTable;
use rate::{throttle_time_ms, RateWindow, SampledRate};
pub use replication::ReplicationQuota;

/// The user of a connection that has not authenticated (Kafka's unauthenticated principal
/// name); an authenticated one's `user` quotas apply to its principal's name.
pub const ANONYMOUS: &str = "ANONYMOUS";

/// The rate of one quota entity: Kafka's metric tags (`user`, `client-id`; empty when the
/// matched entity lacks that dimension).
type SensorKey = (String, String);

struct Sensor {
    rate: SampledRate,
    last_used_ms: i64,
}

/// One quota type's enforcement.
pub struct ClientQuotaManager {
    /// The quota key this manager enforces (`producer_byte_rate` or `consumer_byte_rate`).
    key: &'static str,
    window: RateWindow,
    max_tracked_entities: usize,
    /// The quotas of this type, rebuilt when the image changes (tagged with its offset).
    table: RwLock<Arc<QuotaTable>>,
    sensors: Mutex<HashMap<SensorKey, Sensor>>,
}

impl ClientQuotaManager {
    pub fn produce(config: &QuotaConfig) -> ClientQuotaManager {
        ClientQuotaManager::new(PRODUCER_BYTE_RATE, config)
    }

    pub fn fetch(config: &QuotaConfig) -> ClientQuotaManager {
        ClientQuotaManager::new(CONSUMER_BYTE_RATE, config)
    }

    fn new(key: &'static str, config: &QuotaConfig) -> ClientQuotaManager {
        ClientQuotaManager {
            key,
            window: RateWindow {
                samples: config.window_num,
                sample_ms: config.window_ms(),
            },
            max_tracked_entities: config.max_tracked_entities.max(1),
            table: RwLock::new(Arc::new(QuotaTable::default())),
            sensors: Mutex::new(HashMap::new()),
        }
    }

    /// This type's quota for (user, client-id) and the rate key it is measured under, or
    /// `None` when no quota applies (the fast path when none is configured).
    fn quota_for(&self, image: &MetadataImage, user: &str, client_id: &str) -> Option<(SensorKey, f64)> {
        if image.client_quotas.is_empty() {
            return None;
        }
        let table = {
            let current = self.table.read().clone();
            if current.offset() == image.last_offset {
                current
            } else {
                let rebuilt = Arc::new(QuotaTable::build(image, self.key));
                let mut table = self.table.write();
                // A request holding an older image must not replace a newer table.
                if table.offset() < rebuilt.offset() {
                    *table = rebuilt.clone();
                }
                rebuilt
            }
        };
        table.resolve(user, client_id)
    }

    /// Records `bytes` for (user, client-id) at `now_ms` and returns the throttle time in ms
    /// (0 within the quota, or when no quota applies).
    pub fn record(&self, image: &MetadataImage, user: &str, client_id: &str, bytes: usize, now_ms: i64) -> i32 {
        let Some((key, bound)) = self.quota_for(image, user, client_id) else {
            return 0;
        };
        let mut sensors = self.sensors.lock();
        if !sensors.contains_key(&key) {
            self.make_room(&mut sensors, now_ms);
        }
        let sensor = sensors.entry(key).or_insert_with(|| Sensor {
            rate: SampledRate::default(),
            last_used_ms: now_ms,
        });
        sensor.last_used_ms = now_ms;
        sensor.rate.record(self.window, bytes as f64, now_ms);
        let rate = sensor.rate.measure(self.window, now_ms);
        throttle_time_ms(
            rate,
            bound,
            sensor.rate.window_size_ms(self.window, now_ms),
            self.window,
        )
    }

    /// Takes back bytes recorded for a response that was not sent (a throttled fetch answers
    /// empty, as Kafka's does).
    pub fn unrecord(&self, image: &MetadataImage, user: &str, client_id: &str, bytes: usize, now_ms: i64) {
        let Some((key, _)) = self.quota_for(image, user, client_id) else {
            return;
        };
        if let Some(sensor) = self.sensors.lock().get_mut(&key) {
            sensor.rate.record(self.window, -(bytes as f64), now_ms);
        }
    }

    /// The most bytes one response may carry without being throttled for certain (Kafka's
    /// `getMaxValueInQuotaWindow`: the quota over `window_num - 1` samples), or `None`.
    pub fn max_bytes_in_window(&self, image: &MetadataImage, user: &str, client_id: &str) -> Option<usize> {
        let (_, bound) = self.quota_for(image, user, client_id)?;
        let seconds = f64::from(self.window.samples.saturating_sub(1)) * self.window.sample_ms as f64 / 1000.0;
        Some((bound * seconds).clamp(0.0, usize::MAX as f64) as usize)
    }

    /// Makes room for one more entity: first drops every entity idle for a whole window (its
    /// rate is zero, so nothing is lost), then, if still full, the least recently used.
    fn make_room(&self, sensors: &mut HashMap<SensorKey, Sensor>, now_ms: i64) {
        if sensors.len() < self.max_tracked_entities {
            return;
        }
        let expiry = self.window.full_ms();
        sensors.retain(|_, s| now_ms - s.last_used_ms < expiry);
        if sensors.len() >= self.max_tracked_entities {
            let oldest = sensors
                .iter()
                .min_by_key(|(_, s)| s.last_used_ms)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                tracing::debug!(user = %oldest.0, client_id = %oldest.1,
                    "quota.max.tracked.entities reached; forgetting the least recently used entity's rate");
                sensors.remove(&oldest);
            }
        }
    }

    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.sensors.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::records::{MetadataRecord, QuotaEntity, QuotaName, QuotaValue};

    fn image_with(entity: QuotaEntity, key: &str, value: f64) -> MetadataImage {
        let mut image = MetadataImage::new("c".into());
        image.apply(&MetadataRecord::ClientQuota {
            entity,
            key: key.into(),
            value: Some(QuotaValue(value)),
        });
        image
    }

    fn client(name: Option<&str>) -> QuotaEntity {
        QuotaEntity {
            user: None,
            client_id: Some(QuotaName::from_wire(name)),
        }
    }

    #[test]
    fn within_quota_is_not_throttled_and_past_it_is() {
        let config = QuotaConfig::default();
        let manager = ClientQuotaManager::produce(&config);
        let image = image_with(client(Some("app")), PRODUCER_BYTE_RATE, 1000.0);
        // 10 s of quota may go at once (the rate is measured over at least 10 samples).
        assert_eq!(manager.record(&image, ANONYMOUS, "app", 10_000, 0), 0);
        // 2000 more: 12000 B over 10 s = 1200 B/s, 20% over: 2 s to fall back.
        assert_eq!(manager.record(&image, ANONYMOUS, "app", 2_000, 0), 2_000);
        // Other clients and the other quota type are unaffected.
        assert_eq!(manager.record(&image, ANONYMOUS, "other", 1_000_000, 0), 0);
        let fetch = ClientQuotaManager::fetch(&config);
        assert_eq!(fetch.record(&image, ANONYMOUS, "app", 1_000_000, 0), 0);
        assert_eq!(manager.max_bytes_in_window(&image, ANONYMOUS, "app"), Some(10_000));
        assert_eq!(fetch.max_bytes_in_window(&image, ANONYMOUS, "app"), None);
    }

    #[test]
    fn unrecord_takes_a_throttled_response_back() {
        let manager = ClientQuotaManager::fetch(&QuotaConfig::default());
        let image = image_with(client(None), CONSUMER_BYTE_RATE, 100.0);
        assert!(manager.record(&image, ANONYMOUS, "c1", 5_000, 0) > 0);
        manager.unrecord(&image, ANONYMOUS, "c1", 5_000, 0);
        assert_eq!(manager.record(&image, ANONYMOUS, "c1", 500, 1), 0);
    }

    #[test]
    fn default_client_quota_gives_each_client_id_its_own_rate() {
        let manager = ClientQuotaManager::produce(&QuotaConfig::default());
        let image = image_with(client(None), PRODUCER_BYTE_RATE, 100.0);
        assert_eq!(manager.record(&image, ANONYMOUS, "a", 1_000, 0), 0);
        assert_eq!(manager.record(&image, ANONYMOUS, "b", 1_000, 0), 0);
        assert!(manager.record(&image, ANONYMOUS, "a", 1, 0) > 0);
    }

    #[test]
    fn tracked_entities_are_capped_dropping_idle_then_least_recently_used() {
        let config = QuotaConfig {
            max_tracked_entities: 3,
            ..QuotaConfig::default()
        };
        let manager = ClientQuotaManager::produce(&config);
        let image = image_with(client(None), PRODUCER_BYTE_RATE, 100.0);
        for (i, id) in ["a", "b", "c"].iter().enumerate() {
            manager.record(&image, ANONYMOUS, id, 10, i as i64);
        }
        manager.record(&image, ANONYMOUS, "d", 10, 3);
        assert_eq!(manager.tracked(), 3);
        // "a" was the least recently used: it starts afresh, the others keep their rates.
        for i in 0..1000 {
            manager.record(&image, ANONYMOUS, &format!("hostile-{i}"), 1, 4);
        }
        assert_eq!(manager.tracked(), 3);
        // Idle for a whole window, everything is dropped before anything active.
        manager.record(&image, ANONYMOUS, "late", 10, 60_000);
        assert_eq!(manager.tracked(), 1);
    }

    #[test]
    fn no_quota_configured_records_nothing() {
        let manager = ClientQuotaManager::produce(&QuotaConfig::default());
        let image = MetadataImage::new("c".into());
        assert_eq!(manager.record(&image, ANONYMOUS, "app", usize::MAX, 0), 0);
        assert_eq!(manager.tracked(), 0);
    }
}

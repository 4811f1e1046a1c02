//! The group coordinator's settings (Kafka's `GroupCoordinatorConfig` and the offsets topic's
//! `offsets.*` settings), parsed with the rest of the broker config. They live here, not in
//! `group/`, so that the configuration sits below every module that reads it.

use super::{parse_num, ConfigError};

/// A KIP-848 server-side assignor (`group.consumer.assignors`); the algorithms are in
/// `group::assignor`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Assignor {
    Uniform,
    Range,
}

impl Assignor {
    /// Every assignor by the name clients ask for it (`group.remote.assignor`).
    pub const ALL: [Assignor; 2] = [Assignor::Uniform, Assignor::Range];

    pub fn name(self) -> &'static str {
        match self {
            Assignor::Uniform => "uniform",
            Assignor::Range => "range",
        }
    }

    pub fn by_name(name: &str) -> Option<Assignor> {
        Assignor::ALL.into_iter().find(|a| a.name() == name)
    }
}

/// `group.consumer.migration.policy`: whether a group with members converts between the
/// classic and the consumer protocol as its members switch (Kafka's
/// `ConsumerGroupMigrationPolicy`). Empty groups convert either way whatever it says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MigrationPolicy {
    Bidirectional,
    Upgrade,
    Downgrade,
    Disabled,
}

impl MigrationPolicy {
    /// A classic group may become a consumer group when a KIP-848 member joins it.
    pub fn upgrade(self) -> bool {
        matches!(self, MigrationPolicy::Bidirectional | MigrationPolicy::Upgrade)
    }

    /// A consumer group whose last KIP-848 member leaves may become classic again.
    pub fn downgrade(self) -> bool {
        matches!(self, MigrationPolicy::Bidirectional | MigrationPolicy::Downgrade)
    }

    fn parse(value: &str) -> Option<MigrationPolicy> {
        match value.trim().to_ascii_lowercase().as_str() {
            "bidirectional" => Some(MigrationPolicy::Bidirectional),
            "upgrade" => Some(MigrationPolicy::Upgrade),
            "downgrade" => Some(MigrationPolicy::Downgrade),
            "disabled" => Some(MigrationPolicy::Disabled),
            _ => None,
        }
    }
}

/// Group settings, by their Kafka broker property names.
#[derive(Debug, Clone)]
pub struct GroupConfig {
    /// `offsets.topic.num.partitions`
    pub num_partitions: i32,
    /// `group.min.session.timeout.ms` / `group.max.session.timeout.ms`
    pub min_session_timeout_ms: i32,
    pub max_session_timeout_ms: i32,
    /// `group.initial.rebalance.delay.ms`
    pub initial_rebalance_delay_ms: i64,
    /// `group.max.size`
    pub max_size: usize,
    /// `offset.metadata.max.bytes`
    pub offset_metadata_max_bytes: usize,
    /// `offsets.retention.minutes`, in ms
    pub offsets_retention_ms: i64,
    /// The largest group record `__consumer_offsets` takes (its `max.message.bytes`): a join
    /// whose metadata would make the group's record larger is refused, since the group could
    /// never be stored.
    pub max_group_record_bytes: usize,
    /// `group.coordinator.rebalance.protocols` includes `consumer`: KIP-848 groups are served.
    pub consumer_protocol_enabled: bool,
    /// `group.consumer.session.timeout.ms`
    pub consumer_session_timeout_ms: i32,
    /// `group.consumer.heartbeat.interval.ms`
    pub consumer_heartbeat_interval_ms: i32,
    /// `group.consumer.min.session.timeout.ms` and `group.consumer.max.session.timeout.ms`:
    /// the range a group's `consumer.session.timeout.ms` config must lie within.
    pub consumer_session_timeout_range_ms: (i32, i32),
    /// `group.consumer.min.heartbeat.interval.ms` and `group.consumer.max.heartbeat.interval.ms`.
    pub consumer_heartbeat_interval_range_ms: (i32, i32),
    /// `group.consumer.assignors`, the first the default.
    pub consumer_assignors: Vec<Assignor>,
    /// `group.consumer.migration.policy`
    pub migration_policy: MigrationPolicy,
    /// KIP-932 share groups' settings (`group.share.*`).
    pub share: ShareGroupConfig,
}

/// Share group settings, by their Kafka broker property names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareGroupConfig {
    /// `group.share.session.timeout.ms`
    pub session_timeout_ms: i32,
    /// `group.share.heartbeat.interval.ms`
    pub heartbeat_interval_ms: i32,
    /// `group.share.max.size`
    pub max_size: usize,
    /// `group.share.record.lock.duration.ms`
    pub record_lock_duration_ms: i32,
    /// `group.share.delivery.count.limit`
    pub delivery_count_limit: u16,
    /// `group.share.partition.max.record.locks`
    pub partition_max_record_locks: i32,
    /// `group.share.max.share.sessions`
    pub max_share_sessions: usize,
}

impl Default for ShareGroupConfig {
    fn default() -> Self {
        ShareGroupConfig {
            session_timeout_ms: 45_000,
            heartbeat_interval_ms: 5_000,
            max_size: 200,
            record_lock_duration_ms: 30_000,
            delivery_count_limit: 5,
            partition_max_record_locks: 2_000,
            max_share_sessions: 2_000,
        }
    }
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            num_partitions: 50,
            min_session_timeout_ms: 6_000,
            max_session_timeout_ms: 1_800_000,
            initial_rebalance_delay_ms: 3_000,
            max_size: i32::MAX as usize,
            offset_metadata_max_bytes: 4096,
            offsets_retention_ms: 7 * 24 * 3_600_000,
            max_group_record_bytes: 1_048_588,
            consumer_protocol_enabled: true,
            consumer_session_timeout_ms: 45_000,
            consumer_heartbeat_interval_ms: 5_000,
            consumer_session_timeout_range_ms: (45_000, 60_000),
            consumer_heartbeat_interval_range_ms: (5_000, 15_000),
            consumer_assignors: Assignor::ALL.to_vec(),
            migration_policy: MigrationPolicy::Bidirectional,
            share: ShareGroupConfig::default(),
        }
    }
}

/// Settings of the group metadata manager (`__consumer_offsets` I/O), by Kafka property name.
#[derive(Debug, Clone)]
pub struct OffsetsSettings {
    /// `offsets.commit.timeout.ms`: how long a commit waits for the ISR.
    pub commit_timeout_ms: u64,
    /// `offsets.load.buffer.size`: bytes read per step while loading a partition.
    pub load_buffer_size: usize,
    /// `offsets.retention.check.interval.ms`
    pub retention_check_interval_ms: u64,
}

/// The group coordinator's settings from their Kafka property names.
pub(super) fn group_config(get: &dyn Fn(&str) -> String) -> Result<GroupConfig, ConfigError> {
    let num = |key: &str| parse_num::<i64>(key, &get(key));
    let partitions = num("offsets.topic.num.partitions")?;
    if !(1..=crate::topic_config::MAX_PARTITIONS_PER_TOPIC as i64).contains(&partitions) {
        return Err(ConfigError::InvalidValue {
            key: "offsets.topic.num.partitions".into(),
            value: partitions.to_string(),
            reason: "must be between 1 and 10000".into(),
        });
    }
    let protocols: Vec<String> = get("group.coordinator.rebalance.protocols")
        .split(',')
        .map(|p| p.trim().to_ascii_lowercase())
        .filter(|p| !p.is_empty())
        .collect();
    // Share groups are turned on and off by the `share.version` feature, as in Kafka 4.1+;
    // `share` in this list is taken for the configurations written for Kafka 4.0.
    if let Some(unknown) = protocols
        .iter()
        .find(|p| !["classic", "consumer", "share"].contains(&p.as_str()))
    {
        return Err(ConfigError::InvalidValue {
            key: "group.coordinator.rebalance.protocols".into(),
            value: unknown.clone(),
            reason: "the protocols are classic, consumer and share (streams groups are not served yet)".into(),
        });
    }
    // The value, and its range (which also bounds the group configs that override it).
    let bounded = |key: &str, min_key: &str, max_key: &str| -> Result<(i32, (i32, i32)), ConfigError> {
        let (value, min, max) = (num(key)?, num(min_key)?, num(max_key)?);
        if min > max || value < min || value > max {
            return Err(ConfigError::InvalidValue {
                key: key.into(),
                value: value.to_string(),
                reason: format!("must lie between {min_key} ({min}) and {max_key} ({max})"),
            });
        }
        let int = |n: i64| n.clamp(1, i32::MAX as i64) as i32;
        Ok((int(value), (int(min), int(max))))
    };
    let (session, session_range) = bounded(
        "group.consumer.session.timeout.ms",
        "group.consumer.min.session.timeout.ms",
        "group.consumer.max.session.timeout.ms",
    )?;
    let (interval, interval_range) = bounded(
        "group.consumer.heartbeat.interval.ms",
        "group.consumer.min.heartbeat.interval.ms",
        "group.consumer.max.heartbeat.interval.ms",
    )?;
    if interval >= session {
        return Err(ConfigError::InvalidValue {
            key: "group.consumer.heartbeat.interval.ms".into(),
            value: interval.to_string(),
            reason: format!("must be less than group.consumer.session.timeout.ms ({session})"),
        });
    }
    let share = share_group_config(&num, &|key: &str, min: &str, max: &str| bounded(key, min, max).map(|(value, _)| value))?;
    let mut assignors = Vec::new();
    for name in get("group.consumer.assignors").split(',').map(str::trim).filter(|n| !n.is_empty()) {
        // Kafka's class names are taken for the built-in assignors they name.
        let short = name.rsplit('.').next().unwrap_or(name);
        let short = short.strip_suffix("Assignor").unwrap_or(short).to_ascii_lowercase();
        let Some(assignor) = Assignor::by_name(&short) else {
            return Err(ConfigError::InvalidValue {
                key: "group.consumer.assignors".into(),
                value: name.into(),
                reason: "the server-side assignors are uniform and range".into(),
            });
        };
        assignors.push(assignor);
    }
    if assignors.is_empty() {
        return Err(ConfigError::InvalidValue {
            key: "group.consumer.assignors".into(),
            value: String::new(),
            reason: "name at least one of uniform, range".into(),
        });
    }
    let policy = get("group.consumer.migration.policy");
    let Some(migration_policy) = MigrationPolicy::parse(&policy) else {
        return Err(ConfigError::InvalidValue {
            key: "group.consumer.migration.policy".into(),
            value: policy,
            reason: "the policies are bidirectional, upgrade, downgrade and disabled".into(),
        });
    };
    Ok(GroupConfig {
        migration_policy,
        consumer_protocol_enabled: protocols.iter().any(|p| p == "consumer"),
        consumer_session_timeout_ms: session,
        consumer_heartbeat_interval_ms: interval,
        consumer_session_timeout_range_ms: session_range,
        consumer_heartbeat_interval_range_ms: interval_range,
        consumer_assignors: assignors,
        share,
        num_partitions: partitions as i32,
        min_session_timeout_ms: num("group.min.session.timeout.ms")?.clamp(0, i32::MAX as i64) as i32,
        max_session_timeout_ms: num("group.max.session.timeout.ms")?.clamp(0, i32::MAX as i64) as i32,
        initial_rebalance_delay_ms: num("group.initial.rebalance.delay.ms")?.max(0),
        max_size: num("group.max.size")?.max(1) as usize,
        offset_metadata_max_bytes: num("offset.metadata.max.bytes")?.max(0) as usize,
        offsets_retention_ms: num("offsets.retention.minutes")?.max(1).saturating_mul(60_000),
        // Set from the offsets topic's max.message.bytes once the broker config is complete.
        max_group_record_bytes: GroupConfig::default().max_group_record_bytes,
    })
}

/// The `group.share.*` settings, each within its bounds (Kafka's).
fn share_group_config(
    num: &dyn Fn(&str) -> Result<i64, ConfigError>,
    bounded: &dyn Fn(&str, &str, &str) -> Result<i32, ConfigError>,
) -> Result<ShareGroupConfig, ConfigError> {
    let session_timeout_ms = bounded(
        "group.share.session.timeout.ms",
        "group.share.min.session.timeout.ms",
        "group.share.max.session.timeout.ms",
    )?;
    let heartbeat_interval_ms = bounded(
        "group.share.heartbeat.interval.ms",
        "group.share.min.heartbeat.interval.ms",
        "group.share.max.heartbeat.interval.ms",
    )?;
    if heartbeat_interval_ms >= session_timeout_ms {
        return Err(ConfigError::InvalidValue {
            key: "group.share.heartbeat.interval.ms".into(),
            value: heartbeat_interval_ms.to_string(),
            reason: format!("must be less than group.share.session.timeout.ms ({session_timeout_ms})"),
        });
    }
    let within = |key: &str, min: i64, max: i64| -> Result<i64, ConfigError> {
        let value = num(key)?;
        if !(min..=max).contains(&value) {
            return Err(ConfigError::InvalidValue {
                key: key.into(),
                value: value.to_string(),
                reason: format!("must lie between {min} and {max}"),
            });
        }
        Ok(value)
    };
    Ok(ShareGroupConfig {
        session_timeout_ms,
        heartbeat_interval_ms,
        max_size: within("group.share.max.size", 10, 1000)? as usize,
        record_lock_duration_ms: bounded(
            "group.share.record.lock.duration.ms",
            "group.share.min.record.lock.duration.ms",
            "group.share.max.record.lock.duration.ms",
        )?,
        delivery_count_limit: bounded(
            "group.share.delivery.count.limit",
            "group.share.min.delivery.count.limit",
            "group.share.max.delivery.count.limit",
        )?
        .clamp(1, i32::from(u16::MAX)) as u16,
        partition_max_record_locks: bounded(
            "group.share.partition.max.record.locks",
            "group.share.min.partition.max.record.locks",
            "group.share.max.partition.max.record.locks",
        )?,
        max_share_sessions: within("group.share.max.share.sessions", 1, 1_000_000)? as usize,
    })
}

#[cfg(test)]
mod tests {
    use crate::config::{BrokerConfig, Cli, ConfigError};

    fn config(sets: &[&str]) -> Result<BrokerConfig, ConfigError> {
        let mut args = vec!["sluice"];
        for set in sets {
            args.extend(["--set", set]);
        }
        BrokerConfig::from_cli(&Cli::from_args(args.into_iter()).unwrap())
    }

    fn refused_key(sets: &[&str]) -> String {
        match config(sets) {
            Err(ConfigError::InvalidValue { key, .. }) => key,
            other => panic!("{sets:?} accepted or refused otherwise: {:?}", other.map(|_| ())),
        }
    }

    #[test]
    fn consumer_group_settings_default_to_kafkas_and_keep_their_bounds() {
        let group = config(&[]).unwrap().group;
        assert!(group.consumer_protocol_enabled);
        assert_eq!((group.consumer_session_timeout_ms, group.consumer_heartbeat_interval_ms), (45_000, 5_000));
        assert_eq!(group.consumer_assignors, super::Assignor::ALL.to_vec());
        assert_eq!(group.migration_policy, super::MigrationPolicy::Bidirectional);
        assert_eq!(
            (group.consumer_session_timeout_range_ms, group.consumer_heartbeat_interval_range_ms),
            ((45_000, 60_000), (5_000, 15_000)),
            "Kafka's ranges, which also bound the group configs"
        );

        let set = config(&[
            "group.consumer.assignors=org.apache.kafka.coordinator.group.assignor.RangeAssignor",
            "group.coordinator.rebalance.protocols=classic",
            "group.consumer.session.timeout.ms=50000",
        ])
        .unwrap()
        .group;
        assert_eq!(set.consumer_assignors, vec![super::Assignor::Range]);
        assert!(!set.consumer_protocol_enabled);
        assert_eq!(set.consumer_session_timeout_ms, 50_000);

        for (sets, key) in [
            (&["group.consumer.session.timeout.ms=30000"][..], "group.consumer.session.timeout.ms"),
            (&["group.consumer.heartbeat.interval.ms=20000"][..], "group.consumer.heartbeat.interval.ms"),
            (
                &["group.consumer.min.session.timeout.ms=5000", "group.consumer.session.timeout.ms=5000"][..],
                "group.consumer.heartbeat.interval.ms",
            ),
            (&["group.consumer.assignors=sticky"][..], "group.consumer.assignors"),
            (&["group.consumer.migration.policy=sideways"][..], "group.consumer.migration.policy"),
            (&["group.consumer.assignors="][..], "group.consumer.assignors"),
            (&["group.coordinator.rebalance.protocols=classic,streams"][..], "group.coordinator.rebalance.protocols"),
        ] {
            assert_eq!(refused_key(sets), key, "{sets:?}");
        }
    }

    #[test]
    fn share_group_settings_default_to_kafkas_and_keep_their_bounds() {
        let share = config(&[]).unwrap().group.share;
        assert_eq!(share, super::ShareGroupConfig::default());
        assert_eq!(
            (share.record_lock_duration_ms, share.delivery_count_limit, share.partition_max_record_locks),
            (30_000, 5, 2_000)
        );
        let set = config(&[
            "group.share.min.record.lock.duration.ms=1000",
            "group.share.record.lock.duration.ms=5000",
            "group.share.delivery.count.limit=2",
            "group.coordinator.rebalance.protocols=classic,consumer,share",
        ])
        .unwrap()
        .group
        .share;
        assert_eq!((set.record_lock_duration_ms, set.delivery_count_limit), (5_000, 2));
        for (sets, key) in [
            (&["group.share.record.lock.duration.ms=5000"][..], "group.share.record.lock.duration.ms"),
            (&["group.share.delivery.count.limit=1"][..], "group.share.delivery.count.limit"),
            (&["group.share.delivery.count.limit=11"][..], "group.share.delivery.count.limit"),
            (&["group.share.partition.max.record.locks=99"][..], "group.share.partition.max.record.locks"),
            (&["group.share.heartbeat.interval.ms=16000"][..], "group.share.heartbeat.interval.ms"),
            (&["group.share.session.timeout.ms=30000"][..], "group.share.session.timeout.ms"),
            (&["group.share.max.size=5"][..], "group.share.max.size"),
            (&["group.share.max.share.sessions=0"][..], "group.share.max.share.sessions"),
        ] {
            assert_eq!(refused_key(sets), key, "{sets:?}");
        }
    }
}

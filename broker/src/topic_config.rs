//! Topic-level configuration: the keys Kafka defines, their defaults, their broker-level
//! synonyms (`retention.ms` ← `log.retention.ms`), validation, and resolution into the
//! [`LogConfig`] a partition log runs with.
//!
//! Resolution order is Kafka's: a topic override, else the broker-level value of the synonym,
//! else the built-in default. The broker-level value is, in turn, this broker's dynamic config,
//! else the cluster-wide dynamic one (`BROKER_DEFAULT`), else its `--set` value
//! ([`broker_defaults`]). DescribeConfigs reports which one applied.

use std::borrow::Cow;
use std::collections::BTreeMap;

use sluice_protocol::records::{self, Compressor};

use crate::log::LogConfig;

/// The broker's own settings (`--set key=value`, Kafka's names), where a topic config without an
/// override finds its broker synonym (`retention.ms` ← `log.retention.ms`). Topic configs need
/// only these, not the whole broker config.
pub type BrokerOverrides = BTreeMap<String, String>;

/// The broker-level values topic configs of broker `broker_id` fall back to, in Kafka's order:
/// its own dynamic configs, then the cluster-wide dynamic ones (`dynamic[BROKER_DEFAULT]`,
/// id -1), then its static `--set` values. Borrowed when no dynamic broker config is set.
pub fn broker_defaults<'a>(
    static_overrides: &'a BrokerOverrides,
    dynamic: &BTreeMap<i32, BTreeMap<String, String>>,
    broker_id: i32,
) -> Cow<'a, BrokerOverrides> {
    let layers = [dynamic.get(&-1), dynamic.get(&broker_id)];
    if layers.iter().all(|l| l.is_none_or(BTreeMap::is_empty)) {
        return Cow::Borrowed(static_overrides);
    }
    let mut merged = static_overrides.clone();
    for layer in layers.into_iter().flatten() {
        merged.extend(layer.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    Cow::Owned(merged)
}

/// Upper bound on partitions per topic and per request, so one request cannot exhaust file
/// handles (also bounds `offsets.topic.num.partitions`).
pub const MAX_PARTITIONS_PER_TOPIC: i32 = 10_000;

/// Value types, with Kafka's DescribeConfigs `config_type` codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigType {
    Boolean = 1,
    String = 2,
    Int = 3,
    Short = 4,
    Long = 5,
    Double = 6,
    List = 7,
    /// A secret (Kafka's PASSWORD): DescribeConfigs marks it sensitive and shows no value.
    Password = 9,
}

impl ConfigType {
    /// Checks that `value` parses as this type; the error is a phrase for a sentence.
    pub fn validate(self, value: &str) -> Result<(), String> {
        let ok = match self {
            ConfigType::Boolean => matches!(value, "true" | "false"),
            ConfigType::String | ConfigType::List | ConfigType::Password => true,
            ConfigType::Int => value.parse::<i32>().is_ok(),
            ConfigType::Short => value.parse::<i16>().is_ok(),
            ConfigType::Long => value.parse::<i64>().is_ok(),
            ConfigType::Double => value.parse::<f64>().is_ok(),
        };
        match (ok, self) {
            (true, _) => Ok(()),
            (false, ConfigType::Boolean) => Err("Expected value to be either true or false".to_string()),
            (false, ty) => Err(format!("Not a number of type {}", format!("{ty:?}").to_uppercase())),
        }
    }
}

/// Where a config value came from (DescribeConfigs `config_source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigSource {
    DynamicTopic = 1,
    DynamicBroker = 2,
    DynamicDefaultBroker = 3,
    StaticBroker = 4,
    Default = 5,
    /// A group config set for the group id (Kafka's `GROUP_CONFIG`; `DYNAMIC_GROUP_CONFIG` in
    /// the Admin client, which `kafka-configs --describe` lists).
    Group = 8,
}

/// One topic config key.
#[derive(Debug)]
pub struct ConfigDef {
    pub name: &'static str,
    pub default: &'static str,
    pub ty: ConfigType,
    pub broker_synonym: Option<&'static str>,
    /// Allowed values for enumerated string configs.
    pub one_of: &'static [&'static str],
    pub doc: &'static str,
}

const LONG_MAX: &str = "9223372036854775807";

macro_rules! defs {
    ($( $name:literal, $default:expr, $ty:ident, $syn:expr, [$($v:literal),*], $doc:literal; )*) => {
        /// Every topic config Sluice accepts, in Kafka's names.
        pub const DEFS: &[ConfigDef] = &[$(ConfigDef {
            name: $name, default: $default, ty: ConfigType::$ty, broker_synonym: $syn,
            one_of: &[$($v),*], doc: $doc,
        },)*];
    };
}

defs! {
    "cleanup.policy", "delete", List, Some("log.cleanup.policy"), [], "delete and/or compact: how old segments are discarded.";
    "compression.gzip.level", "-1", Int, Some("compression.gzip.level"), [], "gzip level (1-9, -1 for the codec default) when compression.type is gzip.";
    "compression.lz4.level", "9", Int, Some("compression.lz4.level"), [], "lz4 level (1-17) when compression.type is lz4.";
    "compression.type", "producer", String, Some("compression.type"), ["producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"], "Compression of stored batches: producer keeps the producer's; a codec recompresses batches written otherwise.";
    "compression.zstd.level", "3", Int, Some("compression.zstd.level"), [], "zstd level (-131072 to 22) when compression.type is zstd.";
    "delete.retention.ms", "86400000", Long, Some("log.cleaner.delete.retention.ms"), [], "How long delete tombstones are kept on compacted topics.";
    "file.delete.delay.ms", "60000", Long, Some("log.segment.delete.delay.ms"), [], "Delay before a deleted segment's files are removed.";
    "flush.messages", LONG_MAX, Long, Some("log.flush.interval.messages"), [], "fsync after this many messages (durability normally comes from replication).";
    "flush.ms", LONG_MAX, Long, Some("log.flush.interval.ms"), [], "fsync after this many milliseconds.";
    "follower.replication.throttled.replicas", "", List, None, [], "Replicas (partition:broker, or *) whose follower fetches count against follower.replication.throttled.rate.";
    "index.interval.bytes", "4096", Int, Some("log.index.interval.bytes"), [], "Bytes between offset-index entries.";
    "leader.replication.throttled.replicas", "", List, None, [], "Replicas (partition:broker, or *) whose reads by followers count against leader.replication.throttled.rate.";
    "max.compaction.lag.ms", LONG_MAX, Long, Some("log.cleaner.max.compaction.lag.ms"), [], "Longest time a record stays uncompacted.";
    "max.message.bytes", "1048588", Int, Some("message.max.bytes"), [], "Largest record batch accepted.";
    "message.timestamp.after.max.ms", "3600000", Long, Some("log.message.timestamp.after.max.ms"), [], "Largest allowed future skew of a CreateTime timestamp.";
    "message.timestamp.before.max.ms", LONG_MAX, Long, Some("log.message.timestamp.before.max.ms"), [], "Largest allowed past skew of a CreateTime timestamp.";
    "message.timestamp.type", "CreateTime", String, Some("log.message.timestamp.type"), ["CreateTime", "LogAppendTime"], "CreateTime keeps the producer's timestamp; LogAppendTime stamps the broker's.";
    "min.cleanable.dirty.ratio", "0.5", Double, Some("log.cleaner.min.cleanable.ratio"), [], "Dirty ratio that triggers compaction.";
    "min.compaction.lag.ms", "0", Long, Some("log.cleaner.min.compaction.lag.ms"), [], "Shortest time a record stays uncompacted.";
    "min.insync.replicas", "1", Int, Some("min.insync.replicas"), [], "In-sync replicas needed to acknowledge an acks=all write.";
    "preallocate", "false", Boolean, Some("log.preallocate"), [], "Preallocate segment files.";
    "retention.bytes", "-1", Long, Some("log.retention.bytes"), [], "Largest size of a partition before old segments are deleted; -1 for no limit.";
    "retention.ms", "604800000", Long, Some("log.retention.ms"), [], "How long records are kept; -1 for ever.";
    "segment.bytes", "1073741824", Int, Some("log.segment.bytes"), [], "Size at which a segment is rolled.";
    "segment.index.bytes", "10485760", Int, Some("log.index.size.max.bytes"), [], "Largest size of an offset index.";
    "segment.jitter.ms", "0", Long, Some("log.roll.jitter.ms"), [], "Random jitter subtracted from segment.ms.";
    "segment.ms", "604800000", Long, Some("log.roll.ms"), [], "Age at which a segment is rolled.";
    "unclean.leader.election.enable", "false", Boolean, Some("unclean.leader.election.enable"), [], "Allow an out-of-sync replica to become leader (may lose data).";
}

/// The definition of topic config `name`, if Kafka has one by that name.
pub fn def(name: &str) -> Option<&'static ConfigDef> {
    DEFS.iter().find(|d| d.name == name)
}

/// The topic config whose broker-level synonym is `broker_key`.
pub fn by_broker_synonym(broker_key: &str) -> Option<&'static ConfigDef> {
    DEFS.iter().find(|d| d.broker_synonym == Some(broker_key))
}

/// Why a topic config value was refused (Kafka's INVALID_CONFIG).
/// The messages are Kafka 4's, which tools and users match on.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TopicConfigError {
    #[error("Unknown topic config name: {0}")]
    Unknown(String),
    #[error("Invalid value {value} for configuration {name}: {reason}")]
    Invalid {
        name: String,
        value: String,
        reason: String,
    },
    /// Two settings that contradict each other.
    #[error("conflict topic config setting {0}")]
    Conflict(String),
}

/// Kafka's internal topic config (`LogConfig.INTERNAL_SEGMENT_BYTES_CONFIG`): a segment size
/// below `segment.bytes`' 1 MiB minimum, for tests and internal topics that need many small
/// segments. It wins over `segment.bytes` and, like Kafka's internal configs, DescribeConfigs
/// does not list it.
pub const INTERNAL_SEGMENT_BYTES: &str = "internal.segment.bytes";

/// The smallest `segment.bytes` Kafka 4 accepts (topic and `log.segment.bytes`).
pub const MIN_SEGMENT_BYTES: i64 = 1024 * 1024;

/// The config entry that gives an internal topic (`__consumer_offsets`, `__transaction_state`)
/// segments of `bytes`: `segment.bytes`, or [`INTERNAL_SEGMENT_BYTES`] below its minimum
/// (`offsets.topic.segment.bytes` may be as small as 1, as in Kafka).
pub fn segment_bytes_entry(bytes: i64) -> (String, String) {
    let name = match bytes < MIN_SEGMENT_BYTES {
        true => INTERNAL_SEGMENT_BYTES,
        false => "segment.bytes",
    };
    (name.to_string(), bytes.to_string())
}

/// Kafka 4's lower bound (`ConfigDef.Range.atLeast`) of each numeric topic config that has one.
fn lower_bound(name: &str) -> Option<i64> {
    Some(match name {
        "segment.bytes" => MIN_SEGMENT_BYTES,
        "segment.ms" | "flush.messages" | "max.compaction.lag.ms" | "min.insync.replicas" => 1,
        "segment.index.bytes" => 4,
        "retention.ms" => -1,
        "segment.jitter.ms"
        | "flush.ms"
        | "max.message.bytes"
        | "index.interval.bytes"
        | "delete.retention.ms"
        | "min.compaction.lag.ms"
        | "file.delete.delay.ms"
        | "message.timestamp.before.max.ms"
        | "message.timestamp.after.max.ms" => 0,
        INTERNAL_SEGMENT_BYTES => 1,
        _ => return None,
    })
}

/// Validates one topic config override.
pub fn validate(name: &str, value: &str) -> Result<(), TopicConfigError> {
    let invalid = |reason: String| TopicConfigError::Invalid {
        name: name.to_string(),
        value: value.to_string(),
        reason,
    };
    let ty = match name {
        INTERNAL_SEGMENT_BYTES => ConfigType::Int,
        _ => def(name).ok_or_else(|| TopicConfigError::Unknown(name.to_string()))?.ty,
    };
    ty.validate(value).map_err(invalid)?;
    if let (Some(low), Ok(v)) = (lower_bound(name), value.parse::<i64>()) {
        if v < low {
            return Err(invalid(format!("Value must be at least {low}")));
        }
    }
    let Some(def) = def(name) else {
        return Ok(());
    };
    if !def.one_of.is_empty() && !def.one_of.contains(&value) {
        return Err(invalid(format!("String must be one of: {}", def.one_of.join(", "))));
    }
    if name == "cleanup.policy" && value.split(',').any(|p| !matches!(p.trim(), "delete" | "compact")) {
        return Err(invalid("must be a list of delete and compact".to_string()));
    }
    if name.ends_with(".replication.throttled.replicas") && !valid_throttled_replicas(value) {
        return Err(invalid(
            "must be * or a list of partition:broker pairs such as 0:1,0:2".to_string(),
        ));
    }
    if name == "min.cleanable.dirty.ratio" {
        match value.parse::<f64>() {
            Ok(r) if r < 0.0 => return Err(invalid("Value must be at least 0".to_string())),
            Ok(r) if r > 1.0 => return Err(invalid("Value must be no more than 1".to_string())),
            Ok(r) if r.is_nan() => return Err(invalid("Value must be a number".to_string())),
            _ => {}
        }
    }
    if let Some((low, high)) = compression_level_range(name) {
        let level = value.parse::<i32>().unwrap_or(i32::MIN);
        let codec_default = name == "compression.gzip.level" && level == -1;
        if !codec_default && !(low..=high).contains(&level) {
            return Err(invalid(format!("must be between {low} and {high}")));
        }
    }
    Ok(())
}

/// Checks what single values cannot: a topic's settings against each other once `changes`
/// apply to its `overrides` (`None` removes one). Kafka's only such rule outside tiered storage:
/// `min.compaction.lag.ms` may not exceed `max.compaction.lag.ms`.
pub fn validate_together<'a>(
    overrides: &BTreeMap<String, String>,
    changes: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
) -> Result<(), TopicConfigError> {
    let mut merged = overrides.clone();
    for (name, value) in changes {
        match value {
            Some(v) => merged.insert(name.to_string(), v.to_string()),
            None => merged.remove(name),
        };
    }
    let long = |name: &str| {
        merged
            .get(name)
            .map(String::as_str)
            .or_else(|| def(name).map(|d| d.default))
            .and_then(|v| v.parse::<i64>().ok())
    };
    if let (Some(min), Some(max)) = (long("min.compaction.lag.ms"), long("max.compaction.lag.ms")) {
        if min > max {
            return Err(TopicConfigError::Conflict(format!(
                "min.compaction.lag.ms ({min}) > max.compaction.lag.ms ({max})"
            )));
        }
    }
    Ok(())
}

/// The levels Kafka allows for a codec's `compression.<codec>.level` (KIP-390).
fn compression_level_range(name: &str) -> Option<(i32, i32)> {
    match name {
        "compression.gzip.level" => Some((1, 9)),
        "compression.lz4.level" => Some((1, 17)),
        "compression.zstd.level" => Some((-131_072, 22)),
        _ => None,
    }
}

/// How the leader stores a topic's batches: `None` for `compression.type=producer` (as
/// received), else the codec it names at its `compression.<codec>.level`, which batches in any
/// other codec are recompressed to (Kafka's LogValidator).
pub fn compressor(overrides: &BTreeMap<String, String>, broker: &BrokerOverrides) -> Option<Compressor> {
    let codec = records::codec_by_name(&effective_value("compression.type", overrides, broker))?;
    let level_config = match codec {
        records::CODEC_GZIP => "compression.gzip.level",
        records::CODEC_LZ4 => "compression.lz4.level",
        records::CODEC_ZSTD => "compression.zstd.level",
        _ => return Some(Compressor::new(codec)),
    };
    let level = effective_value(level_config, overrides, broker).parse::<i32>().ok();
    Some(Compressor {
        codec,
        level: level.filter(|&l| l != -1),
    })
}

fn valid_throttled_replicas(value: &str) -> bool {
    let value = value.trim();
    value.is_empty()
        || value == "*"
        || value.split(',').all(|pair| {
            pair.trim()
                .split_once(':')
                .is_some_and(|(p, b)| p.trim().parse::<u32>().is_ok() && b.trim().parse::<u32>().is_ok())
        })
}

/// Whether a `*.replication.throttled.replicas` list names the replica of `partition` on
/// `broker` (`*` names every replica).
pub fn throttled_replicas_include(list: &str, partition: i32, broker: i32) -> bool {
    list.trim() == "*"
        || list.split(',').any(|pair| {
            pair.trim()
                .split_once(':')
                .is_some_and(|(p, b)| p.trim().parse::<i32>() == Ok(partition) && b.trim().parse::<i32>() == Ok(broker))
        })
}

/// The broker configs Kafka's replication throttle is set with (bytes/s, per broker; unset or
/// no `*.replication.throttled.replicas` named on a topic: no throttle).
pub const LEADER_THROTTLED_RATE: &str = "leader.replication.throttled.rate";
pub const FOLLOWER_THROTTLED_RATE: &str = "follower.replication.throttled.rate";

/// Broker settings of Kafka's dynamic ones (its `DynamicBrokerConfig` reconfigurables) that
/// are not topic defaults, as Sluice has them: each is read where it is used from the newest
/// metadata image (`Broker::dynamic_setting`), so a change applies without a restart. With
/// its type and Kafka's lower bound.
pub const LIVE_BROKER_SETTINGS: &[(&str, ConfigType, i64)] = &[
    ("log.cleaner.backoff.ms", ConfigType::Long, 0),
    ("log.cleaner.dedupe.buffer.size", ConfigType::Long, 1),
    ("max.connections", ConfigType::Int, 0),
    ("producer.id.expiration.ms", ConfigType::Int, 1),
    ("transaction.partition.verification.enable", ConfigType::Boolean, 0),
];

/// Whether brokers take `name` while they run (see [`validate_dynamic_broker_config`]).
pub fn is_dynamic_broker_config(name: &str) -> bool {
    name == LEADER_THROTTLED_RATE
        || name == FOLLOWER_THROTTLED_RATE
        || by_broker_synonym(name).is_some()
        || LIVE_BROKER_SETTINGS.iter().any(|(n, ..)| *n == name)
}

/// Validates a dynamic broker config (IncrementalAlterConfigs on a broker resource): a topic
/// config's broker synonym (`log.retention.ms`, ...) or a replication throttle rate. Other
/// broker settings are static: the error says so, as a phrase for a sentence.
pub fn validate_dynamic_broker_config(name: &str, value: &str) -> Result<(), String> {
    if name == LEADER_THROTTLED_RATE || name == FOLLOWER_THROTTLED_RATE {
        return match value.parse::<i64>() {
            Ok(v) if v >= 0 => Ok(()),
            _ => Err(format!("{name} must be a byte rate of 0 or more, not {value:?}")),
        };
    }
    if let Some((_, ty, low)) = LIVE_BROKER_SETTINGS.iter().find(|(n, ..)| *n == name) {
        let invalid = |reason: String| format!("Invalid value {value} for configuration {name}: {reason}");
        ty.validate(value).map_err(invalid)?;
        return match value.parse::<i64>() {
            Ok(v) if v < *low => Err(invalid(format!("Value must be at least {low}"))),
            _ => Ok(()),
        };
    }
    let def = by_broker_synonym(name).ok_or_else(|| {
        let live: Vec<&str> = LIVE_BROKER_SETTINGS.iter().map(|(n, ..)| *n).collect();
        format!(
            "{name} is not a dynamic broker config: set it at start with --set {name}=VALUE \
             (dynamic ones are the topic defaults such as log.retention.ms, the replication throttle rates and {})",
            live.join(", ")
        )
    })?;
    validate(def.name, value).map_err(|e| match e {
        TopicConfigError::Invalid { reason, .. } => format!("Invalid value {value} for configuration {name}: {reason}"),
        other => other.to_string(),
    })
}

/// The broker-level value that applies to `def` when the topic has no override.
fn broker_default(def: &ConfigDef, broker: &BrokerOverrides) -> (String, ConfigSource) {
    if let Some(v) = def.broker_synonym.and_then(|k| broker.get(k).map(String::as_str)) {
        return (v.to_string(), ConfigSource::StaticBroker);
    }
    // Kafka derives the ms settings from their coarser-grained siblings.
    let derived = match def.name {
        "retention.ms" => broker
            .get("log.retention.minutes")
            .and_then(|m| m.parse::<i64>().ok().map(|m| m * 60_000))
            .or_else(|| {
                broker
                    .get("log.retention.hours")
                    .and_then(|h| h.parse::<i64>().ok().map(|h| h * 3_600_000))
            }),
        "segment.ms" => broker
            .get("log.roll.hours")
            .and_then(|h| h.parse::<i64>().ok().map(|h| h * 3_600_000)),
        _ => None,
    };
    match derived {
        Some(v) => (v.to_string(), ConfigSource::StaticBroker),
        None => (def.default.to_string(), ConfigSource::Default),
    }
}

/// Effective value and source of every topic config for a topic with `overrides`.
pub fn describe(
    overrides: &BTreeMap<String, String>,
    broker: &BrokerOverrides,
) -> Vec<(&'static ConfigDef, String, ConfigSource)> {
    DEFS.iter()
        .map(|def| match overrides.get(def.name) {
            Some(v) => (def, v.clone(), ConfigSource::DynamicTopic),
            None => {
                let (v, source) = broker_default(def, broker);
                (def, v, source)
            }
        })
        .collect()
}

/// The effective value of one topic config (empty for a name Kafka does not define).
pub fn effective_value(name: &str, overrides: &BTreeMap<String, String>, broker: &BrokerOverrides) -> String {
    match (overrides.get(name), def(name)) {
        (Some(v), _) => v.clone(),
        (None, Some(d)) => broker_default(d, broker).0,
        (None, None) => String::new(),
    }
}

/// `max.message.bytes` in effect for a topic with `overrides`: the largest batch it accepts, and
/// the most its batches' records may decompress to where they are decoded.
pub fn max_message_bytes(overrides: &BTreeMap<String, String>, broker: &BrokerOverrides) -> u32 {
    effective_value("max.message.bytes", overrides, broker)
        .parse::<i64>()
        .unwrap_or(i64::from(LogConfig::default().max_message_bytes))
        .clamp(1, i64::from(u32::MAX)) as u32
}

/// In-sync replicas an `acks=all` write needs. An explicit setting (the topic's override, else
/// the broker's `--set min.insync.replicas`) wins; otherwise Sluice derives it from the
/// replication factor, 2 from three replicas up and 1 below, so that with the default
/// replication factor of 3 an acknowledged write survives the loss of one broker while a
/// single node or a two-replica topic still accepts writes with one replica down.
pub fn min_insync_replicas(
    overrides: &BTreeMap<String, String>,
    broker: &BrokerOverrides,
    replica_count: usize,
) -> usize {
    const NAME: &str = "min.insync.replicas";
    let explicit = match (overrides.get(NAME), def(NAME)) {
        (Some(v), _) => Some(v.clone()),
        (None, Some(d)) => match broker_default(d, broker) {
            (v, ConfigSource::StaticBroker) => Some(v),
            _ => None,
        },
        (None, None) => None,
    };
    match explicit.and_then(|v| v.parse::<usize>().ok()) {
        Some(n) => n.max(1),
        None if replica_count >= 3 => 2,
        None => 1,
    }
}

/// The partition-log settings for a topic with `overrides`.
pub fn log_config(overrides: &BTreeMap<String, String>, broker: &BrokerOverrides) -> LogConfig {
    let value = |name: &str| effective_value(name, overrides, broker);
    let long = |name: &str, fallback: i64| value(name).parse::<i64>().unwrap_or(fallback);
    let defaults = LogConfig::default();
    LogConfig {
        segment_bytes: overrides
            .get(INTERNAL_SEGMENT_BYTES)
            .and_then(|v| v.parse::<i64>().ok())
            .unwrap_or_else(|| long("segment.bytes", defaults.segment_bytes as i64))
            .max(1) as u64,
        segment_ms: long("segment.ms", defaults.segment_ms),
        retention_ms: long("retention.ms", defaults.retention_ms),
        retention_bytes: long("retention.bytes", defaults.retention_bytes),
        index_interval_bytes: long("index.interval.bytes", i64::from(defaults.index_interval_bytes))
            .clamp(1, i64::from(u32::MAX)) as u32,
        max_message_bytes: max_message_bytes(overrides, broker),
        message_timestamp_log_append: value("message.timestamp.type") == "LogAppendTime",
        flush_interval_messages: long("flush.messages", i64::MAX).max(1) as u64,
        flush_interval_ms: long("flush.ms", i64::MAX),
        cleanup_policy_delete: cleanup_policy_includes(&value("cleanup.policy"), "delete"),
        cleanup_policy_compact: cleanup_policy_includes(&value("cleanup.policy"), "compact"),
        min_cleanable_dirty_ratio: value("min.cleanable.dirty.ratio")
            .parse::<f64>()
            .ok()
            .filter(|r| r.is_finite())
            .map_or(defaults.min_cleanable_dirty_ratio, |r| r.clamp(0.0, 1.0)),
        min_compaction_lag_ms: long("min.compaction.lag.ms", defaults.min_compaction_lag_ms).max(0),
        delete_retention_ms: long("delete.retention.ms", defaults.delete_retention_ms).max(0),
    }
}

/// Whether a `cleanup.policy` list (`delete`, `compact`, `compact,delete`) names `policy`.
pub fn cleanup_policy_includes(list: &str, policy: &str) -> bool {
    list.split(',').any(|p| p.trim() == policy)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The broker overrides `sluice --set k=v ...` would give.
    fn broker(args: &[&str]) -> BrokerOverrides {
        args.iter()
            .filter(|a| **a != "--set")
            .map(|kv| kv.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())).unwrap())
            .collect()
    }

    #[test]
    fn override_beats_broker_setting_beats_default() {
        let b = broker(&["--set", "log.retention.ms=5000"]);
        let mut overrides = BTreeMap::new();
        let find = |rows: &[(&ConfigDef, String, ConfigSource)], n: &str| {
            rows.iter()
                .find(|(d, _, _)| d.name == n)
                .map(|(_, v, s)| (v.clone(), *s))
                .unwrap()
        };
        let rows = describe(&overrides, &b);
        assert_eq!(
            find(&rows, "retention.ms"),
            ("5000".to_string(), ConfigSource::StaticBroker)
        );
        assert_eq!(
            find(&rows, "segment.bytes"),
            ("1073741824".to_string(), ConfigSource::Default)
        );
        overrides.insert("retention.ms".to_string(), "42".to_string());
        let rows = describe(&overrides, &b);
        assert_eq!(
            find(&rows, "retention.ms"),
            ("42".to_string(), ConfigSource::DynamicTopic)
        );
        assert_eq!(log_config(&overrides, &b).retention_ms, 42);
    }

    #[test]
    fn compression_type_names_the_codec_batches_are_stored_in_at_its_level() {
        let none = BTreeMap::new();
        let at = |codec, level| Some(Compressor { codec, level });
        assert_eq!(compressor(&none, &broker(&[])), None, "producer: as received");
        let zstd = broker(&["compression.type=zstd", "compression.zstd.level=7"]);
        assert_eq!(compressor(&none, &zstd), at(4, Some(7)));
        let topic = BTreeMap::from([
            ("compression.type".to_string(), "gzip".to_string()),
            ("compression.gzip.level".to_string(), "-1".to_string()),
        ]);
        assert_eq!(compressor(&topic, &zstd), at(1, None));
        let topic = BTreeMap::from([("compression.type".to_string(), "uncompressed".to_string())]);
        assert_eq!(compressor(&topic, &zstd), at(0, None));
        let topic = BTreeMap::from([("compression.type".to_string(), "lz4".to_string())]);
        assert_eq!(compressor(&topic, &zstd), at(3, Some(9)));
        for (name, good, bad) in [
            ("compression.gzip.level", ["1", "9", "-1"], ["0", "10", "-2"]),
            ("compression.lz4.level", ["1", "17", "9"], ["0", "18", "-1"]),
            ("compression.zstd.level", ["-131072", "22", "0"], ["-131073", "23", "x"]),
        ] {
            for value in good {
                assert_eq!(validate(name, value), Ok(()), "{name}={value}");
            }
            for value in bad {
                assert!(validate(name, value).is_err(), "{name}={value}");
            }
        }
    }

    #[test]
    fn retention_hours_derives_retention_ms() {
        let b = broker(&["--set", "log.retention.hours=1"]);
        assert_eq!(log_config(&BTreeMap::new(), &b).retention_ms, 3_600_000);
    }

    #[test]
    fn validation_rejects_unknown_keys_and_bad_values() {
        assert!(validate("retention.ms", "100").is_ok());
        assert!(matches!(
            validate("retention.msx", "1"),
            Err(TopicConfigError::Unknown(_))
        ));
        assert!(validate("retention.ms", "soon").is_err());
        assert!(validate("message.timestamp.type", "Whenever").is_err());
        assert!(validate("cleanup.policy", "compact,delete").is_ok());
        assert!(validate("cleanup.policy", "shred").is_err());
        assert!(validate("max.message.bytes", "-1").is_err());
        assert!(validate("min.insync.replicas", "0").is_err());
        assert!(validate("min.cleanable.dirty.ratio", "0.01").is_ok());
        assert!(validate("min.cleanable.dirty.ratio", "1.5").is_err());
        assert!(validate("min.cleanable.dirty.ratio", "NaN").is_err());
    }

    #[test]
    fn ranges_are_kafka_4s_with_its_messages() {
        let refused = |name: &str, value: &str| validate(name, value).unwrap_err().to_string();
        assert_eq!(
            refused("segment.bytes", "200"),
            "Invalid value 200 for configuration segment.bytes: Value must be at least 1048576"
        );
        assert!(validate("segment.bytes", "1048576").is_ok());
        assert_eq!(
            refused("segment.ms", "0"),
            "Invalid value 0 for configuration segment.ms: Value must be at least 1"
        );
        assert_eq!(
            refused("retention.ms", "soon"),
            "Invalid value soon for configuration retention.ms: Not a number of type LONG"
        );
        assert_eq!(
            refused("preallocate", "yes"),
            "Invalid value yes for configuration preallocate: Expected value to be either true or false"
        );
        assert!(validate("retention.ms", "-1").is_ok() && validate("retention.ms", "-2").is_err());
        assert!(validate("retention.bytes", "-5").is_ok(), "Kafka leaves retention.bytes unbounded");
        assert!(validate("segment.index.bytes", "3").is_err() && validate("segment.index.bytes", "4").is_ok());
        assert!(validate("flush.messages", "0").is_err() && validate("max.compaction.lag.ms", "0").is_err());
        assert!(validate("max.message.bytes", "0").is_ok(), "Kafka allows 0");
        assert_eq!(refused("no.such.thing", "1"), "Unknown topic config name: no.such.thing");
    }

    #[test]
    fn internal_segment_bytes_allows_small_segments_and_wins_over_segment_bytes() {
        assert!(validate(INTERNAL_SEGMENT_BYTES, "4096").is_ok());
        assert!(validate(INTERNAL_SEGMENT_BYTES, "0").is_err());
        let overrides = BTreeMap::from([
            ("segment.bytes".to_string(), "2097152".to_string()),
            (INTERNAL_SEGMENT_BYTES.to_string(), "4096".to_string()),
        ]);
        assert_eq!(log_config(&overrides, &broker(&[])).segment_bytes, 4096);
        let rows = describe(&overrides, &broker(&[]));
        assert!(rows.iter().all(|(d, ..)| d.name != INTERNAL_SEGMENT_BYTES), "internal configs are not described");
        assert_eq!(segment_bytes_entry(65_536).0, INTERNAL_SEGMENT_BYTES);
        assert_eq!(segment_bytes_entry(104_857_600).0, "segment.bytes");
    }

    #[test]
    fn min_compaction_lag_may_not_exceed_max_compaction_lag() {
        let set = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
        };
        let conflict = set(&[("min.compaction.lag.ms", "200"), ("max.compaction.lag.ms", "100")]);
        assert_eq!(
            validate_together(&conflict, []).unwrap_err().to_string(),
            "conflict topic config setting min.compaction.lag.ms (200) > max.compaction.lag.ms (100)"
        );
        let max_only = set(&[("max.compaction.lag.ms", "100")]);
        assert!(validate_together(&max_only, []).is_ok());
        assert!(validate_together(&max_only, [("min.compaction.lag.ms", Some("101"))]).is_err());
        assert!(validate_together(&conflict, [("min.compaction.lag.ms", None)]).is_ok());
    }

    #[test]
    fn cleanup_policy_and_compaction_settings_resolve_into_the_log_config() {
        let plain = broker(&[]);
        let defaults = log_config(&BTreeMap::new(), &plain);
        assert!(defaults.cleanup_policy_delete && !defaults.cleanup_policy_compact);
        assert_eq!(defaults.min_cleanable_dirty_ratio, 0.5);
        assert_eq!(defaults.delete_retention_ms, 86_400_000);
        let b = broker(&[
            "--set",
            "log.cleanup.policy=compact",
            "--set",
            "log.cleaner.min.cleanable.ratio=0.2",
        ]);
        let config = log_config(&BTreeMap::new(), &b);
        assert!(!config.cleanup_policy_delete && config.cleanup_policy_compact);
        assert_eq!(config.min_cleanable_dirty_ratio, 0.2);
        let overrides = BTreeMap::from([
            ("cleanup.policy".to_string(), "compact,delete".to_string()),
            ("min.compaction.lag.ms".to_string(), "5000".to_string()),
            ("delete.retention.ms".to_string(), "100".to_string()),
        ]);
        let config = log_config(&overrides, &b);
        assert!(config.cleanup_policy_delete && config.cleanup_policy_compact);
        assert_eq!((config.min_compaction_lag_ms, config.delete_retention_ms), (5000, 100));
    }

    #[test]
    fn min_insync_replicas_is_explicit_or_follows_the_replication_factor() {
        let none = BTreeMap::new();
        let plain = broker(&[]);
        let counts = [1, 2, 3, 5].map(|n| min_insync_replicas(&none, &plain, n));
        assert_eq!(counts, [1, 1, 2, 2]);
        let set = broker(&["--set", "min.insync.replicas=1"]);
        assert_eq!(min_insync_replicas(&none, &set, 3), 1);
        let overrides = BTreeMap::from([("min.insync.replicas".to_string(), "3".to_string())]);
        assert_eq!(min_insync_replicas(&overrides, &set, 3), 3);
        assert_eq!(min_insync_replicas(&overrides, &plain, 1), 3);
    }
}

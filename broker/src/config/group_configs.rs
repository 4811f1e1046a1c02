//! Kafka's group configs (KIP-848, KIP-932; config resource type GROUP, 32): per-group
//! overrides of the group coordinator's settings, set with `kafka-configs --entity-type groups`
//! and kept in the metadata image (`MetadataImage::group_configs`), so every broker that may
//! coordinate the group reads the same ones.
//!
//! A group config names a group id, not a group: it may be set before the group exists and
//! outlives it, as in Kafka.
//!
//! Validation comes in two parts, as the controller must decide from the image alone:
//! [`validate`] (the name is known, the value parses, Kafka's fixed minima and value sets) is
//! a pure function of the change and runs in the controller's decision; [`validate_within`]
//! (Kafka's checks against the broker's `group.consumer.min.*`/`max.*` ranges) needs this
//! broker's settings, so the broker that receives the request runs it before proposing.
//! The names, defaults, minima and messages are Kafka 4.4's (`GroupConfig`); Kafka's other
//! group configs (`streams.*`, `share.delivery.count.limit`, the assignment intervals, ...)
//! are not served yet and are refused as unknown.

use std::collections::BTreeMap;
use std::time::Duration;

use super::GroupConfig;
use crate::topic_config::ConfigType;

pub const CONSUMER_SESSION_TIMEOUT_MS: &str = "consumer.session.timeout.ms";
pub const CONSUMER_HEARTBEAT_INTERVAL_MS: &str = "consumer.heartbeat.interval.ms";
pub const SHARE_SESSION_TIMEOUT_MS: &str = "share.session.timeout.ms";
pub const SHARE_HEARTBEAT_INTERVAL_MS: &str = "share.heartbeat.interval.ms";
pub const SHARE_RECORD_LOCK_DURATION_MS: &str = "share.record.lock.duration.ms";
pub const SHARE_AUTO_OFFSET_RESET: &str = "share.auto.offset.reset";
pub const SHARE_ISOLATION_LEVEL: &str = "share.isolation.level";

/// How a group config's value is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// An int of at least this (Kafka's `atLeast`).
    IntAtLeast(i32),
    /// `latest`, `earliest` or `by_duration:<ISO-8601 duration>`.
    AutoOffsetReset,
    /// One of these strings, exactly (Kafka's `ValidString` is case-sensitive).
    OneOf(&'static [&'static str]),
}

/// One group config: its name, Kafka's default, type and meaning, and the broker setting that
/// gives the value a group without an override gets (none: Kafka's default applies).
#[derive(Debug)]
pub struct GroupConfigDef {
    pub name: &'static str,
    pub default: &'static str,
    pub ty: ConfigType,
    pub rule: Rule,
    pub broker_synonym: Option<&'static str>,
    pub doc: &'static str,
}

/// Every group config Sluice knows, in Kafka's order.
pub const GROUP_CONFIGS: &[GroupConfigDef] = &[
    GroupConfigDef {
        name: CONSUMER_SESSION_TIMEOUT_MS,
        default: "45000",
        ty: ConfigType::Int,
        rule: Rule::IntAtLeast(1),
        broker_synonym: Some("group.consumer.session.timeout.ms"),
        doc: "The timeout to detect client failures when using the consumer group protocol.",
    },
    GroupConfigDef {
        name: CONSUMER_HEARTBEAT_INTERVAL_MS,
        default: "5000",
        ty: ConfigType::Int,
        rule: Rule::IntAtLeast(1),
        broker_synonym: Some("group.consumer.heartbeat.interval.ms"),
        doc: "The heartbeat interval given to the members of a consumer group.",
    },
    GroupConfigDef {
        name: SHARE_SESSION_TIMEOUT_MS,
        default: "45000",
        ty: ConfigType::Int,
        rule: Rule::IntAtLeast(1),
        broker_synonym: Some("group.share.session.timeout.ms"),
        doc: "The timeout to detect client failures when using the share group protocol.",
    },
    GroupConfigDef {
        name: SHARE_HEARTBEAT_INTERVAL_MS,
        default: "5000",
        ty: ConfigType::Int,
        rule: Rule::IntAtLeast(1),
        broker_synonym: Some("group.share.heartbeat.interval.ms"),
        doc: "The heartbeat interval given to the members of a share group.",
    },
    GroupConfigDef {
        name: SHARE_RECORD_LOCK_DURATION_MS,
        default: "30000",
        ty: ConfigType::Int,
        rule: Rule::IntAtLeast(1000),
        broker_synonym: Some("group.share.record.lock.duration.ms"),
        doc: "The record acquisition lock duration in milliseconds for share groups.",
    },
    GroupConfigDef {
        name: SHARE_AUTO_OFFSET_RESET,
        default: "latest",
        ty: ConfigType::String,
        rule: Rule::AutoOffsetReset,
        broker_synonym: None,
        doc: "The strategy to initialize the share-partition start offset: earliest, latest, or by_duration:<duration> (ISO-8601, PnDTnHnMn.nS, not negative) to start that long before now.",
    },
    GroupConfigDef {
        name: SHARE_ISOLATION_LEVEL,
        default: "read_uncommitted",
        ty: ConfigType::String,
        rule: Rule::OneOf(&["read_committed", "read_uncommitted"]),
        broker_synonym: None,
        doc: "Controls how to read records written transactionally: read_committed delivers only committed transactional records, read_uncommitted all of them.",
    },
];

pub fn def(name: &str) -> Option<&'static GroupConfigDef> {
    GROUP_CONFIGS.iter().find(|d| d.name == name)
}

/// Why a group config change was refused; displayed as the error message the client shows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GroupConfigError {
    #[error("unknown group config name {0:?}: the group configs are {names}", names = known_names())]
    Unknown(String),
    #[error("invalid value {value:?} for group config {name}: {reason}")]
    Invalid {
        name: String,
        value: String,
        reason: String,
    },
}

fn known_names() -> String {
    GROUP_CONFIGS.iter().map(|d| d.name).collect::<Vec<_>>().join(", ")
}

/// Checks one config as the controller does: the name is a group config, and the value parses
/// and keeps Kafka's fixed rules (a minimum, a value set). Values are trimmed first, as
/// Kafka's `ConfigDef` trims them.
pub fn validate(name: &str, value: &str) -> Result<(), GroupConfigError> {
    let def = def(name).ok_or_else(|| GroupConfigError::Unknown(name.to_string()))?;
    let invalid = |reason: String| GroupConfigError::Invalid {
        name: name.to_string(),
        value: value.to_string(),
        reason,
    };
    let trimmed = value.trim();
    match def.rule {
        Rule::IntAtLeast(min) => {
            let n: i32 = trimmed
                .parse()
                .map_err(|_| invalid(format!("give a whole number of milliseconds, at least {min}")))?;
            if n < min {
                return Err(invalid(format!("the value must be at least {min}")));
            }
        }
        Rule::AutoOffsetReset => {
            parse_auto_offset_reset(trimmed).ok_or_else(|| {
                invalid("use earliest, latest, or by_duration:<duration> with an ISO-8601 duration that is not negative (PnDTnHnMn.nS, such as by_duration:PT1H)".into())
            })?;
        }
        Rule::OneOf(allowed) => {
            if !allowed.contains(&trimmed) {
                return Err(invalid(format!("use one of {}", allowed.join(", "))));
            }
        }
    }
    Ok(())
}

/// The broker-wide ranges a group's timeouts must lie within, and the broker's values a group
/// without an override gets (Kafka's `group.consumer.*` and `group.share.*` settings).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupConfigBounds {
    /// Per bounded config: (name, smallest, largest, the broker setting naming each bound).
    pub ranges: Vec<(&'static str, i32, i32, &'static str, &'static str)>,
    /// The broker's value of each int config a group has no override for.
    pub defaults: BTreeMap<&'static str, i32>,
}

impl GroupConfigBounds {
    /// This broker's ranges. Sluice has no share group settings yet, so the share configs'
    /// ranges and defaults are Kafka's defaults for `group.share.*`.
    pub fn of(group: &GroupConfig) -> GroupConfigBounds {
        let (session_min, session_max) = group.consumer_session_timeout_range_ms;
        let (heartbeat_min, heartbeat_max) = group.consumer_heartbeat_interval_range_ms;
        GroupConfigBounds {
            ranges: vec![
                (
                    CONSUMER_SESSION_TIMEOUT_MS,
                    session_min,
                    session_max,
                    "group.consumer.min.session.timeout.ms",
                    "group.consumer.max.session.timeout.ms",
                ),
                (
                    CONSUMER_HEARTBEAT_INTERVAL_MS,
                    heartbeat_min,
                    heartbeat_max,
                    "group.consumer.min.heartbeat.interval.ms",
                    "group.consumer.max.heartbeat.interval.ms",
                ),
                (
                    SHARE_SESSION_TIMEOUT_MS,
                    45_000,
                    60_000,
                    "group.share.min.session.timeout.ms",
                    "group.share.max.session.timeout.ms",
                ),
                (
                    SHARE_HEARTBEAT_INTERVAL_MS,
                    5_000,
                    15_000,
                    "group.share.min.heartbeat.interval.ms",
                    "group.share.max.heartbeat.interval.ms",
                ),
                (
                    SHARE_RECORD_LOCK_DURATION_MS,
                    15_000,
                    60_000,
                    "group.share.min.record.lock.duration.ms",
                    "group.share.max.record.lock.duration.ms",
                ),
            ],
            defaults: BTreeMap::from([
                (CONSUMER_SESSION_TIMEOUT_MS, group.consumer_session_timeout_ms),
                (CONSUMER_HEARTBEAT_INTERVAL_MS, group.consumer_heartbeat_interval_ms),
                (SHARE_SESSION_TIMEOUT_MS, 45_000),
                (SHARE_HEARTBEAT_INTERVAL_MS, 5_000),
                (SHARE_RECORD_LOCK_DURATION_MS, 30_000),
            ]),
        }
    }

    /// The value a group without an override of `name` gets on this broker, as a string.
    pub fn default_value(&self, def: &GroupConfigDef) -> String {
        self.defaults
            .get(def.name)
            .map_or_else(|| def.default.to_string(), i32::to_string)
    }
}

/// Checks a group's whole config set, as a change would leave it, against the broker's ranges
/// (Kafka's `GroupConfig.validateValues`): each timeout within its range, and each session
/// timeout longer than its heartbeat interval (the broker's value standing in for one the
/// group does not set). Every value is assumed to pass [`validate`] already.
pub fn validate_within(configs: &BTreeMap<String, String>, bounds: &GroupConfigBounds) -> Result<(), GroupConfigError> {
    let int = |name: &str| configs.get(name).and_then(|v| v.trim().parse::<i32>().ok());
    for (name, min, max, min_key, max_key) in &bounds.ranges {
        if let Some(n) = int(name) {
            if n < *min || n > *max {
                return Err(GroupConfigError::Invalid {
                    name: name.to_string(),
                    value: n.to_string(),
                    reason: format!(
                        "the value must lie between {min} ({min_key}) and {max} ({max_key}), the broker's range"
                    ),
                });
            }
        }
    }
    for (session, heartbeat) in [
        (CONSUMER_SESSION_TIMEOUT_MS, CONSUMER_HEARTBEAT_INTERVAL_MS),
        (SHARE_SESSION_TIMEOUT_MS, SHARE_HEARTBEAT_INTERVAL_MS),
    ] {
        if int(session).is_none() && int(heartbeat).is_none() {
            continue;
        }
        let effective = |name: &str| int(name).or_else(|| bounds.defaults.get(name).copied());
        if let (Some(s), Some(h)) = (effective(session), effective(heartbeat)) {
            if s <= h {
                let (name, value) = if int(session).is_some() {
                    (session, s)
                } else {
                    (heartbeat, h)
                };
                return Err(GroupConfigError::Invalid {
                    name: name.to_string(),
                    value: value.to_string(),
                    reason: format!("{session} ({s}) must be greater than {heartbeat} ({h})"),
                });
            }
        }
    }
    Ok(())
}

/// Where a share group starts reading a partition it has no state for (`share.auto.offset.reset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShareAutoOffsetReset {
    Earliest,
    Latest,
    /// The first record at or after this long before now.
    ByDuration(Duration),
}

/// The group's `share.auto.offset.reset` (`configs`: its group configs, if it has any).
/// Latest when unset, and also for a stored value this build cannot parse: a validated value
/// always parses, so that happens only with one written by another build.
pub fn share_auto_offset_reset(configs: Option<&BTreeMap<String, String>>) -> ShareAutoOffsetReset {
    configs
        .and_then(|c| c.get(SHARE_AUTO_OFFSET_RESET))
        .and_then(|v| parse_auto_offset_reset(v.trim()))
        .unwrap_or(ShareAutoOffsetReset::Latest)
}

/// The group's value of the integer group config `name` (a session timeout or heartbeat
/// interval), or `None` to use the broker's.
pub fn group_int(configs: Option<&BTreeMap<String, String>>, name: &str) -> Option<i32> {
    configs
        .and_then(|c| c.get(name))
        .and_then(|v| v.trim().parse::<i32>().ok())
        .filter(|v| *v > 0)
}

/// The group's `share.record.lock.duration.ms`, or `None` to use the broker's
/// `group.share.record.lock.duration.ms`.
pub fn share_record_lock_duration_ms(configs: Option<&BTreeMap<String, String>>) -> Option<i64> {
    configs
        .and_then(|c| c.get(SHARE_RECORD_LOCK_DURATION_MS))
        .and_then(|v| v.trim().parse::<i32>().ok())
        .filter(|ms| *ms > 0)
        .map(i64::from)
}

/// `share.isolation.level` is `read_committed`: share fetches deliver up to the last stable
/// offset only, and never records of aborted transactions.
pub fn share_read_committed(configs: Option<&BTreeMap<String, String>>) -> bool {
    configs
        .and_then(|c| c.get(SHARE_ISOLATION_LEVEL))
        .is_some_and(|v| v.trim() == "read_committed")
}

fn parse_auto_offset_reset(value: &str) -> Option<ShareAutoOffsetReset> {
    match value {
        "earliest" => Some(ShareAutoOffsetReset::Earliest),
        "latest" => Some(ShareAutoOffsetReset::Latest),
        _ => value
            .strip_prefix("by_duration:")
            .and_then(parse_iso8601_duration)
            .map(ShareAutoOffsetReset::ByDuration),
    }
}

/// An ISO-8601 duration as Java's `Duration.parse` reads it (`PnDTnHnMn.nS`, letters in either
/// case, at most nine fraction digits), without signs: Kafka refuses negative durations, and
/// unsigned components cannot make one. `None` if it does not parse or does not fit.
fn parse_iso8601_duration(text: &str) -> Option<Duration> {
    let upper = text.to_ascii_uppercase();
    let rest = upper.strip_prefix('P')?;
    let (date, time) = match rest.split_once('T') {
        Some((date, time)) if !time.is_empty() => (date, Some(time)),
        Some(_) => return None,
        None => (rest, None),
    };
    let mut seconds: u64 = 0;
    let mut nanos: u32 = 0;
    let mut any = false;
    if !date.is_empty() {
        let days: u64 = digits(date.strip_suffix('D')?)?;
        seconds = days.checked_mul(86_400)?;
        any = true;
    }
    if let Some(mut time) = time {
        for (unit, scale) in [('H', 3_600u64), ('M', 60)] {
            if let Some(at) = time.find(unit) {
                let n: u64 = digits(&time[..at])?;
                seconds = seconds.checked_add(n.checked_mul(scale)?)?;
                time = &time[at + 1..];
                any = true;
            }
        }
        if !time.is_empty() {
            let number = time.strip_suffix('S')?;
            let (whole, fraction) = match number.split_once(['.', ',']) {
                Some((whole, fraction)) => (whole, fraction),
                None => (number, ""),
            };
            seconds = seconds.checked_add(digits(whole)?)?;
            if fraction.len() > 9 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            nanos = format!("{fraction:0<9}").parse().ok()?;
            any = true;
        }
    }
    // Java's Duration holds a signed 64-bit count of seconds.
    (any && seconds <= i64::MAX as u64).then(|| Duration::new(seconds, nanos))
}

/// A run of one or more ASCII digits as a number.
fn digits(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(name: &str, value: &str) -> String {
        match validate(name, value) {
            Err(e) => e.to_string(),
            Ok(()) => panic!("{name}={value:?} was accepted"),
        }
    }

    #[test]
    fn kafkas_values_are_accepted() {
        for (name, value) in [
            (CONSUMER_SESSION_TIMEOUT_MS, "50000"),
            (CONSUMER_HEARTBEAT_INTERVAL_MS, " 6000 "),
            (SHARE_SESSION_TIMEOUT_MS, "1"),
            (SHARE_RECORD_LOCK_DURATION_MS, "1000"),
            (SHARE_AUTO_OFFSET_RESET, "earliest"),
            (SHARE_AUTO_OFFSET_RESET, "latest"),
            (SHARE_AUTO_OFFSET_RESET, "by_duration:PT1H"),
            (SHARE_AUTO_OFFSET_RESET, "by_duration:pt1h"),
            (SHARE_AUTO_OFFSET_RESET, "by_duration:P1DT2H3M4.5S"),
            (SHARE_AUTO_OFFSET_RESET, " earliest "),
            (SHARE_ISOLATION_LEVEL, "read_committed"),
            (SHARE_ISOLATION_LEVEL, "read_uncommitted"),
        ] {
            assert_eq!(validate(name, value), Ok(()), "{name}={value:?}");
        }
    }

    #[test]
    fn what_kafka_refuses_is_refused_with_a_sentence_naming_the_config() {
        assert!(refused("no.such.config", "1").contains("unknown group config name \"no.such.config\""));
        assert!(
            refused("no.such.config", "1").contains(SHARE_AUTO_OFFSET_RESET),
            "lists the known names"
        );
        assert!(refused(CONSUMER_SESSION_TIMEOUT_MS, "0").contains("at least 1"));
        assert!(refused(CONSUMER_SESSION_TIMEOUT_MS, "soon").contains("whole number"));
        assert!(refused(CONSUMER_SESSION_TIMEOUT_MS, "3000000000").contains("whole number"));
        assert!(refused(SHARE_RECORD_LOCK_DURATION_MS, "500").contains("at least 1000"));
        for bad in [
            "sometimes",
            "EARLIEST",
            "BY_DURATION:PT1H",
            "by_duration:",
            "by_duration:-PT1H",
            "by_duration:PT-1H",
            "by_duration:P1Y",
            "by_duration:P",
            "by_duration:PT",
            "by_duration:P1DT",
            "by_duration:PT1.1234567890S",
            "by_duration:PT1H2H",
        ] {
            let message = refused(SHARE_AUTO_OFFSET_RESET, bad);
            assert!(message.contains("by_duration:PT1H"), "{bad}: {message}");
        }
        assert!(refused(SHARE_ISOLATION_LEVEL, "READ_COMMITTED").contains("read_committed, read_uncommitted"));
    }

    #[test]
    fn durations_parse_as_javas_duration_does() {
        let parse = |s| parse_iso8601_duration(s);
        assert_eq!(parse("PT1H"), Some(Duration::from_secs(3_600)));
        assert_eq!(parse("P2D"), Some(Duration::from_secs(172_800)));
        assert_eq!(parse("PT1M30S"), Some(Duration::from_secs(90)));
        assert_eq!(parse("PT0.25S"), Some(Duration::from_millis(250)));
        assert_eq!(parse("PT1,5S"), Some(Duration::from_millis(1_500)));
        assert_eq!(parse("P1DT1H1M1S"), Some(Duration::from_secs(90_061)));
        assert_eq!(parse("PT0S"), Some(Duration::ZERO));
        assert_eq!(parse("PT1S1M"), None, "units in order only");
        assert_eq!(parse("P99999999999999999999D"), None, "does not fit");
    }

    #[test]
    fn the_typed_accessors_default_and_fall_back_to_latest() {
        let configs = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
        };
        assert_eq!(share_auto_offset_reset(None), ShareAutoOffsetReset::Latest);
        let set = configs(&[(SHARE_AUTO_OFFSET_RESET, "earliest")]);
        assert_eq!(share_auto_offset_reset(Some(&set)), ShareAutoOffsetReset::Earliest);
        let set = configs(&[(SHARE_AUTO_OFFSET_RESET, "by_duration:PT15M")]);
        assert_eq!(
            share_auto_offset_reset(Some(&set)),
            ShareAutoOffsetReset::ByDuration(Duration::from_secs(900))
        );
        let garbled = configs(&[(SHARE_AUTO_OFFSET_RESET, "sometimes")]);
        assert_eq!(share_auto_offset_reset(Some(&garbled)), ShareAutoOffsetReset::Latest);

        assert_eq!(share_record_lock_duration_ms(None), None);
        let set = configs(&[(SHARE_RECORD_LOCK_DURATION_MS, "20000")]);
        assert_eq!(share_record_lock_duration_ms(Some(&set)), Some(20_000));
        let garbled = configs(&[(SHARE_RECORD_LOCK_DURATION_MS, "later")]);
        assert_eq!(share_record_lock_duration_ms(Some(&garbled)), None);
    }

    #[test]
    fn values_must_lie_within_the_brokers_ranges() {
        let bounds = GroupConfigBounds::of(&GroupConfig::default());
        let check = |pairs: &[(&str, &str)]| {
            let configs = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            validate_within(&configs, &bounds).map_err(|e| e.to_string())
        };
        assert_eq!(check(&[(CONSUMER_SESSION_TIMEOUT_MS, "50000")]), Ok(()));
        assert_eq!(check(&[(SHARE_RECORD_LOCK_DURATION_MS, "20000")]), Ok(()));
        let low = check(&[(CONSUMER_SESSION_TIMEOUT_MS, "1000")]).unwrap_err();
        assert!(low.contains("group.consumer.min.session.timeout.ms"), "{low}");
        let high = check(&[(CONSUMER_HEARTBEAT_INTERVAL_MS, "20000")]).unwrap_err();
        assert!(high.contains("group.consumer.max.heartbeat.interval.ms"), "{high}");
        assert!(check(&[(SHARE_RECORD_LOCK_DURATION_MS, "5000")]).is_err());

        let wide = GroupConfig {
            consumer_session_timeout_range_ms: (1_000, 60_000),
            ..GroupConfig::default()
        };
        let bounds = GroupConfigBounds::of(&wide);
        let configs = BTreeMap::from([(CONSUMER_SESSION_TIMEOUT_MS.to_string(), "4000".to_string())]);
        let err = validate_within(&configs, &bounds).unwrap_err().to_string();
        assert!(
            err.contains("must be greater than consumer.heartbeat.interval.ms (5000)"),
            "{err}"
        );
    }
}

//! The transaction coordinator's settings (Kafka's `TransactionStateManagerConfig`,
//! `TransactionLogConfig` and `transaction.*`), parsed with the rest of the broker config and
//! kept here, below every module that reads them.

use super::{parse_num, ConfigError};

/// Transaction settings, by their Kafka broker property names.
#[derive(Debug, Clone)]
pub struct TxnConfig {
    /// `transaction.state.log.num.partitions`
    pub num_partitions: i32,
    /// `transaction.state.log.replication.factor`, lowered to the live brokers.
    pub replication_factor: i16,
    /// `transaction.state.log.min.isr`
    pub min_isr: i32,
    /// `transaction.state.log.segment.bytes`
    pub segment_bytes: i32,
    /// `transaction.max.timeout.ms`: a producer asking for a longer `transaction.timeout.ms`
    /// is refused with INVALID_TRANSACTION_TIMEOUT.
    pub max_timeout_ms: i32,
    /// `transactional.id.expiration.ms`: an idle transactional id is forgotten after this.
    pub id_expiration_ms: i64,
    /// `transaction.abort.timed.out.transaction.cleanup.interval.ms`
    pub abort_check_interval_ms: u64,
    /// `transaction.remove.expired.transaction.cleanup.interval.ms`
    pub expiration_check_interval_ms: u64,
    /// How long a write to `__transaction_state` waits for the in-sync replicas (Kafka's
    /// `transaction.state.log.*` appends use the request timeout; `offsets.commit.timeout.ms`'s
    /// default here).
    pub append_timeout_ms: u64,
    /// `transaction.state.log.load.buffer.size`
    pub load_buffer_size: usize,
    /// `transaction.partition.verification.enable` (KIP-890 part 1).
    pub partition_verification: bool,
    /// `transaction.version`: the feature level ApiVersions reports as finalized (2: clients
    /// may use transactions v2, KIP-890 part 2).
    pub transaction_version: i16,
    /// `add.partitions.to.txn.retry.backoff.ms`
    pub add_partitions_retry_backoff_ms: u64,
    /// `add.partitions.to.txn.retry.backoff.max.ms`
    pub add_partitions_retry_backoff_max_ms: u64,
}

impl Default for TxnConfig {
    fn default() -> Self {
        TxnConfig {
            num_partitions: 50,
            replication_factor: 3,
            min_isr: 2,
            segment_bytes: 104_857_600,
            max_timeout_ms: 900_000,
            id_expiration_ms: 604_800_000,
            abort_check_interval_ms: 10_000,
            expiration_check_interval_ms: 3_600_000,
            append_timeout_ms: 5_000,
            load_buffer_size: 5_242_880,
            partition_verification: true,
            transaction_version: 2,
            add_partitions_retry_backoff_ms: 20,
            add_partitions_retry_backoff_max_ms: 100,
        }
    }
}

/// The transaction settings from their Kafka property names.
pub(super) fn txn_config(get: &dyn Fn(&str) -> String) -> Result<TxnConfig, ConfigError> {
    let num = |key: &str| parse_num::<i64>(key, &get(key));
    let partitions = num("transaction.state.log.num.partitions")?;
    if !(1..=crate::topic_config::MAX_PARTITIONS_PER_TOPIC as i64).contains(&partitions) {
        return Err(ConfigError::InvalidValue {
            key: "transaction.state.log.num.partitions".into(),
            value: partitions.to_string(),
            reason: "must be between 1 and 10000".into(),
        });
    }
    let positive = |key: &str| -> Result<i64, ConfigError> {
        let value = num(key)?;
        if value < 1 {
            return Err(ConfigError::InvalidValue {
                key: key.into(),
                value: value.to_string(),
                reason: "must be at least 1".into(),
            });
        }
        Ok(value)
    };
    Ok(TxnConfig {
        num_partitions: partitions as i32,
        replication_factor: positive("transaction.state.log.replication.factor")?.min(i16::MAX as i64) as i16,
        min_isr: positive("transaction.state.log.min.isr")?.min(i32::MAX as i64) as i32,
        segment_bytes: positive("transaction.state.log.segment.bytes")?.min(i32::MAX as i64) as i32,
        max_timeout_ms: positive("transaction.max.timeout.ms")?.min(i32::MAX as i64) as i32,
        id_expiration_ms: positive("transactional.id.expiration.ms")?,
        abort_check_interval_ms: positive("transaction.abort.timed.out.transaction.cleanup.interval.ms")? as u64,
        expiration_check_interval_ms: positive("transaction.remove.expired.transaction.cleanup.interval.ms")? as u64,
        append_timeout_ms: TxnConfig::default().append_timeout_ms,
        load_buffer_size: positive("transaction.state.log.load.buffer.size")? as usize,
        partition_verification: get("transaction.partition.verification.enable") == "true",
        transaction_version: {
            let level = num("transaction.version")?;
            if !(0..=2).contains(&level) {
                return Err(ConfigError::InvalidValue {
                    key: "transaction.version".into(),
                    value: level.to_string(),
                    reason: "must be 0, 1 or 2".into(),
                });
            }
            level as i16
        },
        add_partitions_retry_backoff_ms: positive("add.partitions.to.txn.retry.backoff.ms")? as u64,
        add_partitions_retry_backoff_max_ms: positive("add.partitions.to.txn.retry.backoff.max.ms")? as u64,
    })
}

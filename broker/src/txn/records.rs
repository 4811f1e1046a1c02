//! The records a transaction coordinator keeps in `__transaction_state`, in Kafka's layout
//! (`TransactionLogKey` v0, `TransactionLogValue` v0 or v1), one per transactional id; a null
//! value is a tombstone (the id expired). Version 1 is flexible and carries, as tagged fields,
//! what transactions v2 (KIP-890 part 2) needs to survive a coordinator failover: the
//! previous and next producer ids and the client's transaction version. It is written only
//! when one of them is set, so a log of v1 transactions reads in earlier builds. Everything
//! decoded came from disk and is checked: no count or length allocates beyond the bytes
//! present.

use bytes::{BufMut, Bytes, BytesMut};

use crate::group::record_codec::{compact_len, put_string, put_uvarint, skip_tagged_fields, uvarint, Reader, RecordError};

const KEY_VERSION: i16 = 0;
const VALUE_VERSION: i16 = 0;
/// The flexible version with the tagged fields of transactions v2.
const FLEXIBLE_VALUE_VERSION: i16 = 1;
const TAG_PREVIOUS_PRODUCER_ID: u32 = 0;
const TAG_NEXT_PRODUCER_ID: u32 = 1;
const TAG_CLIENT_TRANSACTION_VERSION: u32 = 2;

/// Kafka's `TransactionState`, with its stored ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxnState {
    /// No transaction open (a new id, or a producer that just initialised).
    Empty,
    Ongoing,
    PrepareCommit,
    PrepareAbort,
    CompleteCommit,
    CompleteAbort,
    /// The id expired; written as a tombstone, never kept.
    Dead,
    /// An open transaction being aborted because a new producer (or the timeout) fenced it.
    PrepareEpochFence,
}

impl TxnState {
    pub fn id(self) -> i8 {
        match self {
            TxnState::Empty => 0,
            TxnState::Ongoing => 1,
            TxnState::PrepareCommit => 2,
            TxnState::PrepareAbort => 3,
            TxnState::CompleteCommit => 4,
            TxnState::CompleteAbort => 5,
            TxnState::Dead => 6,
            TxnState::PrepareEpochFence => 7,
        }
    }

    pub fn from_id(id: i8) -> Option<TxnState> {
        Some(match id {
            0 => TxnState::Empty,
            1 => TxnState::Ongoing,
            2 => TxnState::PrepareCommit,
            3 => TxnState::PrepareAbort,
            4 => TxnState::CompleteCommit,
            5 => TxnState::CompleteAbort,
            6 => TxnState::Dead,
            7 => TxnState::PrepareEpochFence,
            _ => return None,
        })
    }

    /// The name DescribeTransactions and ListTransactions report (Kafka's `TransactionState.name`).
    pub fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
            TxnState::Dead => "Dead",
            TxnState::PrepareEpochFence => "PrepareEpochFence",
        }
    }

    /// The state ListTransactions' filter names, case-insensitively as Kafka's `fromName`.
    pub fn from_name(name: &str) -> Option<TxnState> {
        (0..=7)
            .filter_map(TxnState::from_id)
            .find(|s| s.name().eq_ignore_ascii_case(name))
    }

    /// Whether a transaction is being completed (markers owed to its partitions).
    pub fn is_preparing(self) -> bool {
        matches!(
            self,
            TxnState::PrepareCommit | TxnState::PrepareAbort | TxnState::PrepareEpochFence
        )
    }
}

/// One transactional id's state as stored (Kafka's `TransactionLogValue`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredTxn {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub timeout_ms: i32,
    pub state: TxnState,
    /// The partitions in the transaction, by topic, partitions ascending.
    pub partitions: Vec<(String, Vec<i32>)>,
    pub last_update_ms: i64,
    pub start_ms: i64,
    /// The producer id before the last change of producer id (-1: none). A transactions v2
    /// producer whose epoch overflowed retries its EndTxn with it.
    pub prev_producer_id: i64,
    /// The producer id a transactions v2 completion moves to because the epoch is exhausted
    /// (-1: none).
    pub next_producer_id: i64,
    /// The transaction version of the client's last transaction (0, or 2 for KIP-890 part 2).
    pub client_transaction_version: i16,
}

impl StoredTxn {
    /// Whether the record needs the flexible version (a v0 record cannot say it).
    fn needs_flexible(&self) -> bool {
        self.prev_producer_id >= 0 || self.next_producer_id >= 0 || self.client_transaction_version != 0
    }
}

pub fn key(transactional_id: &str) -> Bytes {
    let mut buf = BytesMut::with_capacity(4 + transactional_id.len());
    buf.put_i16(KEY_VERSION);
    put_string(&mut buf, transactional_id);
    buf.freeze()
}

pub fn value(txn: &StoredTxn) -> Bytes {
    let flexible = txn.needs_flexible();
    let mut buf = BytesMut::with_capacity(64);
    buf.put_i16(if flexible {
        FLEXIBLE_VALUE_VERSION
    } else {
        VALUE_VERSION
    });
    buf.put_i64(txn.producer_id);
    buf.put_i16(txn.producer_epoch);
    buf.put_i32(txn.timeout_ms);
    buf.put_i8(txn.state.id());
    if flexible {
        put_uvarint(&mut buf, txn.partitions.len() as u32 + 1);
    } else {
        buf.put_i32(txn.partitions.len() as i32);
    }
    for (topic, partitions) in &txn.partitions {
        if flexible {
            put_uvarint(&mut buf, topic.len() as u32 + 1);
            buf.put_slice(topic.as_bytes());
            put_uvarint(&mut buf, partitions.len() as u32 + 1);
        } else {
            put_string(&mut buf, topic);
            buf.put_i32(partitions.len() as i32);
        }
        for p in partitions {
            buf.put_i32(*p);
        }
        if flexible {
            put_uvarint(&mut buf, 0); // the partition entry's tagged fields: none
        }
    }
    buf.put_i64(txn.last_update_ms);
    buf.put_i64(txn.start_ms);
    if flexible {
        let mut tags: Vec<(u32, Vec<u8>)> = Vec::new();
        if txn.prev_producer_id != -1 {
            tags.push((TAG_PREVIOUS_PRODUCER_ID, txn.prev_producer_id.to_be_bytes().to_vec()));
        }
        if txn.next_producer_id != -1 {
            tags.push((TAG_NEXT_PRODUCER_ID, txn.next_producer_id.to_be_bytes().to_vec()));
        }
        if txn.client_transaction_version != 0 {
            tags.push((
                TAG_CLIENT_TRANSACTION_VERSION,
                txn.client_transaction_version.to_be_bytes().to_vec(),
            ));
        }
        put_uvarint(&mut buf, tags.len() as u32);
        for (tag, data) in tags {
            put_uvarint(&mut buf, tag);
            put_uvarint(&mut buf, data.len() as u32);
            buf.put_slice(&data);
        }
    }
    buf.freeze()
}

/// A decoded record: the transactional id and its state, `None` for a tombstone.
pub fn decode(key: Option<&[u8]>, value: Option<&[u8]>) -> Result<(String, Option<StoredTxn>), RecordError> {
    let mut k = Reader(key.ok_or(RecordError::NoKey)?);
    let version = k.i16("key version")?;
    if version != KEY_VERSION {
        return Err(RecordError::UnknownKeyVersion(version));
    }
    let transactional_id = k.string("transactional id")?;
    let Some(value) = value else {
        return Ok((transactional_id, None));
    };
    Ok((transactional_id, Some(decode_value(value)?)))
}

fn decode_value(value: &[u8]) -> Result<StoredTxn, RecordError> {
    let mut r = Reader(value);
    let version = r.i16("value version")?;
    if version != VALUE_VERSION && version != FLEXIBLE_VALUE_VERSION {
        return Err(RecordError::UnknownValueVersion(version));
    }
    let flexible = version == FLEXIBLE_VALUE_VERSION;
    let producer_id = r.i64("producer id")?;
    let producer_epoch = r.i16("producer epoch")?;
    let timeout_ms = r.i32("timeout")?;
    let state_id = r.take(1, "state")?[0] as i8;
    let state = TxnState::from_id(state_id).ok_or(RecordError::Truncated("a known transaction state"))?;
    let topics = if flexible {
        compact_len(&mut r, 3, "topic count")?
    } else {
        r.i32("topic count")?.max(0) as usize
    };
    // A topic takes at least 3 bytes: never reserve more than the bytes can hold.
    let mut partitions = Vec::with_capacity(topics.min(r.0.len() / 3));
    for _ in 0..topics {
        let (topic, count) = if flexible {
            let len = compact_len(&mut r, 1, "topic")?;
            let topic = String::from_utf8(r.take(len, "topic")?.to_vec())
                .map_err(|_| RecordError::Truncated("a UTF-8 topic"))?;
            (topic, compact_len(&mut r, 4, "partition count")?)
        } else {
            (r.string("topic")?, r.i32("partition count")?.max(0) as usize)
        };
        let mut ids = Vec::with_capacity(count.min(r.0.len() / 4));
        for _ in 0..count {
            ids.push(r.i32("partition")?);
        }
        if flexible {
            skip_tagged_fields(&mut r)?;
        }
        partitions.push((topic, ids));
    }
    let last_update_ms = r.i64("last update")?;
    let start_ms = r.i64("start")?;
    let mut txn = StoredTxn {
        producer_id,
        producer_epoch,
        timeout_ms,
        state,
        partitions,
        last_update_ms,
        start_ms,
        prev_producer_id: -1,
        next_producer_id: -1,
        client_transaction_version: 0,
    };
    if flexible {
        let count = uvarint(&mut r, "tagged field count")?;
        for _ in 0..count {
            let tag = uvarint(&mut r, "tag")?;
            let size = uvarint(&mut r, "tag size")? as usize;
            let data = r.take(size, "tagged field")?;
            let mut field = Reader(data);
            match tag {
                TAG_PREVIOUS_PRODUCER_ID => txn.prev_producer_id = field.i64("previous producer id")?,
                TAG_NEXT_PRODUCER_ID => txn.next_producer_id = field.i64("next producer id")?,
                TAG_CLIENT_TRANSACTION_VERSION => {
                    txn.client_transaction_version = field.i16("client transaction version")?
                }
                _ => {} // a field of a later version: skipped
            }
        }
    }
    Ok(txn)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> StoredTxn {
        StoredTxn {
            producer_id: 4001,
            producer_epoch: 7,
            timeout_ms: 60_000,
            state: TxnState::PrepareCommit,
            partitions: vec![("orders".into(), vec![0, 2]), ("__consumer_offsets".into(), vec![13])],
            last_update_ms: 1_700_000_000_500,
            start_ms: 1_700_000_000_000,
            prev_producer_id: -1,
            next_producer_id: -1,
            client_transaction_version: 0,
        }
    }

    #[test]
    fn transactions_v2_fields_round_trip_in_the_flexible_version() {
        let txn = StoredTxn {
            prev_producer_id: 3999,
            next_producer_id: 4002,
            client_transaction_version: 2,
            ..sample()
        };
        let v = value(&txn);
        assert_eq!(&v[..2], &[0, 1], "version 1");
        assert_eq!(decode(Some(&key("tx-2")), Some(&v)).unwrap().1, Some(txn.clone()));
        for cut in 0..v.len() {
            assert!(decode(Some(&key("t")), Some(&v[..cut])).is_err(), "cut at {cut}");
        }
        // An unknown tag (a later version's field) is skipped.
        let mut later = v.to_vec();
        let tags_at = later.len() - (1 + 2 * 10 + 1 + 1 + 2);
        assert_eq!(later[tags_at], 3, "three tagged fields");
        later[tags_at] = 4;
        later.extend_from_slice(&[9, 1, 0x7f]);
        assert_eq!(decode(Some(&key("t")), Some(&later)).unwrap().1, Some(txn));
    }

    #[test]
    fn records_round_trip_in_kafkas_layout() {
        let k = key("tx-1");
        assert_eq!(&k[..], b"\x00\x00\x00\x04tx-1");
        let v = value(&sample());
        // version 0, producer id, epoch, timeout, state 2, then the partitions.
        assert_eq!(&v[..2], &[0, 0]);
        assert_eq!(&v[2..10], &4001i64.to_be_bytes());
        assert_eq!(v[16], 2);
        assert_eq!(
            decode(Some(&k), Some(&v)).unwrap(),
            ("tx-1".to_string(), Some(sample()))
        );
        assert_eq!(decode(Some(&k), None).unwrap(), ("tx-1".to_string(), None));
    }

    #[test]
    fn damaged_records_are_refused_not_panicked_on() {
        let v = value(&sample());
        for cut in 0..v.len() {
            assert!(decode(Some(&key("t")), Some(&v[..cut])).is_err(), "cut at {cut}");
        }
        let mut huge = v.to_vec();
        huge[17..21].copy_from_slice(&i32::MAX.to_be_bytes());
        assert!(decode(Some(&key("t")), Some(&huge)).is_err());
        let mut bad_state = v.to_vec();
        bad_state[16] = 42;
        assert!(decode(Some(&key("t")), Some(&bad_state)).is_err());
        assert!(decode(None, Some(&v)).is_err());
        assert!(decode(Some(b"\x00\x01\x00\x01t"), Some(&v)).is_err());
    }

    #[test]
    fn state_names_are_kafkas() {
        assert_eq!(TxnState::from_name("ongoing"), Some(TxnState::Ongoing));
        assert_eq!(TxnState::from_name("CompleteAbort"), Some(TxnState::CompleteAbort));
        assert_eq!(TxnState::from_name("nope"), None);
        for id in 0..=7 {
            assert_eq!(TxnState::from_id(id).unwrap().id(), id);
        }
    }
}

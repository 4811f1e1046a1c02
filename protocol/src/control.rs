//! Transaction markers (KIP-98): the control batches a transaction coordinator has each
//! partition leader append to end a transaction, as Kafka's
//! `MemoryRecords.withEndTransactionMarker` writes them.
//!
//! A marker is one uncompressed v2 batch with the transactional (0x10) and control (0x20)
//! attribute bits, base sequence -1, and one record whose key is `i16 version 0, i16 type`
//! (0 abort, 1 commit) and whose value is `i16 version 0, i32 coordinator epoch`. Consumers
//! reading `read_committed` use the marker to end a producer's transaction; the broker uses it
//! to close the producer's open transaction and, for an abort, to index the aborted range.
//!
//! Reading the type back ([`control_type`]) decodes only the first record's key, with every
//! varint and length checked against the bytes present: the batch came from disk or a leader.

use bytes::{BufMut, BytesMut};

use crate::batch::{
    BatchHeader, BATCH_HEADER_LEN, CRC_COVERED_FROM, CRC_OFFSET, LOG_OVERHEAD, MAGIC_V2, NO_PARTITION_LEADER_EPOCH,
};

/// Attributes of a marker batch: transactional | control, no codec, CreateTime.
const MARKER_ATTRIBUTES: i16 = 0x10 | 0x20;
/// Kafka's `ControlRecordType` key and `EndTransactionMarker` value schema version.
const CONTROL_RECORD_VERSION: i16 = 0;
/// The one record of a marker: attributes, timestamp delta, offset delta (one byte each as
/// varints of 0), key length (varint 4) + 4 key bytes, value length (varint 6) + 6 value
/// bytes, header count (varint 0).
const MARKER_RECORD_BODY_LEN: usize = 1 + 1 + 1 + 1 + 4 + 1 + 6 + 1;

/// What a transaction marker ends a transaction with (Kafka's `ControlRecordType`; only the
/// two end-of-transaction types are markers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ControlType {
    Abort = 0,
    Commit = 1,
}

impl ControlType {
    fn from_i16(value: i16) -> Option<ControlType> {
        match value {
            0 => Some(ControlType::Abort),
            1 => Some(ControlType::Commit),
            _ => None,
        }
    }
}

/// Encodes a transaction marker batch at base offset 0 with no partition leader epoch: the
/// leader's append stamps both. `timestamp_ms` is the batch's base and max timestamp.
pub fn encode_control_batch(
    producer_id: i64,
    producer_epoch: i16,
    coordinator_epoch: i32,
    kind: ControlType,
    timestamp_ms: i64,
) -> BytesMut {
    let total_len = BATCH_HEADER_LEN + 1 + MARKER_RECORD_BODY_LEN;
    let mut batch = BytesMut::with_capacity(total_len);
    batch.put_i64(0); // base offset
    batch.put_i32((total_len - LOG_OVERHEAD) as i32);
    batch.put_i32(NO_PARTITION_LEADER_EPOCH);
    batch.put_i8(MAGIC_V2);
    batch.put_u32(0); // CRC, filled below
    batch.put_i16(MARKER_ATTRIBUTES);
    batch.put_i32(0); // last offset delta
    batch.put_i64(timestamp_ms);
    batch.put_i64(timestamp_ms);
    batch.put_i64(producer_id);
    batch.put_i16(producer_epoch);
    batch.put_i32(-1); // base sequence: markers are not sequenced
    batch.put_i32(1); // records count
    put_marker_record(&mut batch, kind, coordinator_epoch);
    debug_assert_eq!(batch.len(), total_len);
    let crc = crc32c::crc32c(&batch[CRC_COVERED_FROM..]);
    batch[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
    batch
}

/// The marker's single record. Every varint here is small enough to be one byte, so they are
/// written as their zigzag bytes directly (zigzag(n) = 2n for n >= 0).
fn put_marker_record(batch: &mut BytesMut, kind: ControlType, coordinator_epoch: i32) {
    batch.put_u8((MARKER_RECORD_BODY_LEN * 2) as u8); // record length
    batch.put_u8(0); // attributes
    batch.put_u8(0); // timestamp delta
    batch.put_u8(0); // offset delta
    batch.put_u8(4 * 2); // key length
    batch.put_i16(CONTROL_RECORD_VERSION);
    batch.put_i16(kind as i16);
    batch.put_u8(6 * 2); // value length
    batch.put_i16(CONTROL_RECORD_VERSION);
    batch.put_i32(coordinator_epoch);
    batch.put_u8(0); // header count
}

/// A transaction marker as read back from a stored batch: its type and the coordinator epoch
/// of the coordinator that wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EndTxnMarker {
    pub kind: ControlType,
    pub coordinator_epoch: i32,
}

/// The type of a control batch's first record (its key's `type`), or None when `batch` is not
/// a complete uncompressed control batch, its first record is malformed, or the type is not
/// a transaction marker's. Kafka never compresses control batches.
pub fn control_type(batch: &[u8]) -> Option<ControlType> {
    let mut record = first_control_record(batch)?;
    let key_len = usize::try_from(record.varint()?).ok()?;
    let key = record.take(key_len)?;
    let version = i16::from_be_bytes(key.get(0..2)?.try_into().ok()?);
    let kind = i16::from_be_bytes(key.get(2..4)?.try_into().ok()?);
    // Kafka reads newer key versions by their version-0 prefix, and so do we.
    if version < 0 {
        return None;
    }
    ControlType::from_i16(kind)
}

/// The whole marker of a control batch: [`control_type`] plus the coordinator epoch from the
/// record's value (`i16 version, i32 coordinator epoch`). None on anything malformed.
pub fn end_txn_marker(batch: &[u8]) -> Option<EndTxnMarker> {
    let kind = control_type(batch)?;
    let mut record = first_control_record(batch)?;
    let key_len = usize::try_from(record.varint()?).ok()?;
    record.take(key_len)?;
    let value_len = usize::try_from(record.varint()?).ok()?;
    let value = record.take(value_len)?;
    let version = i16::from_be_bytes(value.get(0..2)?.try_into().ok()?);
    if version < 0 {
        return None;
    }
    let coordinator_epoch = i32::from_be_bytes(value.get(2..6)?.try_into().ok()?);
    Some(EndTxnMarker {
        kind,
        coordinator_epoch,
    })
}

/// The first record of an uncompressed control batch, positioned at its key length.
fn first_control_record(batch: &[u8]) -> Option<Reader<'_>> {
    let header = BatchHeader::parse(batch).ok()?;
    if !header.is_control() || header.compression() != 0 || header.records_count < 1 {
        return None;
    }
    let mut reader = Reader {
        buf: batch.get(BATCH_HEADER_LEN..header.total_len())?,
    };
    let record_len = usize::try_from(reader.varint()?).ok()?;
    let mut record = Reader {
        buf: reader.take(record_len)?,
    };
    record.take(1)?; // attributes
    record.varint()?; // timestamp delta
    record.varint()?; // offset delta
    Some(record)
}

/// A bounded cursor over a record: every read checks the bytes left.
struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize) -> Option<&'a [u8]> {
        if len > self.buf.len() {
            return None;
        }
        let (head, rest) = self.buf.split_at(len);
        self.buf = rest;
        Some(head)
    }

    /// A zigzag varint of at most 5 bytes (Kafka's `ByteUtils.readVarint`).
    fn varint(&mut self) -> Option<i32> {
        let mut raw: u32 = 0;
        for i in 0..5 {
            let byte = *self.take(1)?.first()?;
            raw |= u32::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return Some(((raw >> 1) as i32) ^ -((raw & 1) as i32));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{validate_batch, BatchIter};
    use crate::records::BatchRecords;

    #[test]
    fn a_marker_is_a_valid_transactional_control_batch_of_one_record() {
        let batch = encode_control_batch(42, 7, 3, ControlType::Commit, 1_700_000_000_000);
        let header = validate_batch(&batch).expect("CRC and fields valid");
        assert!(header.is_control() && header.is_transactional());
        assert_eq!(header.producer_id, 42);
        assert_eq!(header.producer_epoch, 7);
        assert_eq!(header.base_sequence, -1);
        assert_eq!(header.last_offset_delta, 0);
        assert_eq!(header.records_count, 1);
        assert_eq!(header.base_timestamp, 1_700_000_000_000);
        assert_eq!(header.max_timestamp, 1_700_000_000_000);
        assert_eq!(header.compression(), 0);
        assert_eq!(BatchIter::new(&batch).count(), 1);
    }

    #[test]
    fn the_record_decodes_as_kafka_s_control_key_and_end_txn_marker_value() {
        let batch = encode_control_batch(1, 0, 0x0102_0304, ControlType::Abort, 5);
        let records = BatchRecords::decode(&batch, 1 << 20).expect("decodes");
        let record = records.iter().next().expect("one record");
        assert_eq!(record.key, Some(&[0u8, 0, 0, 0][..]));
        assert_eq!(record.value, Some(&[0u8, 0, 1, 2, 3, 4][..]));
        assert_eq!(record.offset_delta, 0);
    }

    #[test]
    fn control_type_reads_back_what_was_encoded() {
        for kind in [ControlType::Abort, ControlType::Commit] {
            let batch = encode_control_batch(9, 1, 2, kind, 0);
            assert_eq!(control_type(&batch), Some(kind));
            assert_eq!(
                end_txn_marker(&batch),
                Some(EndTxnMarker {
                    kind,
                    coordinator_epoch: 2
                })
            );
        }
    }

    #[test]
    fn control_type_is_none_for_data_batches_unknown_types_and_every_truncation() {
        let data = crate::batch::test_support::encode_simple_batch(1, 3, 0);
        assert_eq!(control_type(&data), None);
        let mut unknown = encode_control_batch(9, 1, 2, ControlType::Commit, 0).to_vec();
        // The key's type is the last two of the four key bytes: header + len, attrs, ts, off, klen.
        let type_at = BATCH_HEADER_LEN + 5 + 2;
        unknown[type_at..type_at + 2].copy_from_slice(&5i16.to_be_bytes());
        assert_eq!(control_type(&unknown), None);
        let good = encode_control_batch(9, 1, 2, ControlType::Commit, 0);
        for len in 0..good.len() {
            assert_eq!(control_type(&good[..len]), None, "truncated at {len}");
            assert_eq!(end_txn_marker(&good[..len]), None, "truncated at {len}");
        }
    }

    #[test]
    fn control_type_never_panics_on_garbled_records() {
        let good = encode_control_batch(9, 1, 2, ControlType::Abort, 0).to_vec();
        for at in BATCH_HEADER_LEN..good.len() {
            for byte in [0x00, 0x7f, 0x80, 0xff] {
                let mut bad = good.clone();
                bad[at] = byte;
                let _ = control_type(&bad);
                let _ = end_txn_marker(&bad);
            }
        }
    }
}

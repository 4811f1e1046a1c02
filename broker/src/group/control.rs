//! Reading a control batch's type (COMMIT or ABORT) while loading `__consumer_offsets`.
//!
//! A stand-in, named and shaped like `sluice_protocol::control::control_type`, which is
//! being written elsewhere: when that lands, this file goes and its one caller imports that.

use sluice_protocol::records::BatchRecords;

/// The control records Kafka writes to data partitions (`ControlRecordType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlType {
    Abort,
    Commit,
}

/// A control record's key is an int16 version and an int16 type; the batch is tiny, so
/// decompression (control batches are written uncompressed anyway) is capped well below it.
const MAX_CONTROL_BATCH_BYTES: usize = 4096;

/// The marker a control batch carries: `None` if the batch is not a control batch, its
/// first record cannot be read, or it is another control type (Kafka's LEADER_CHANGE and
/// snapshot records never end a transaction). The CRC is the caller's to check.
pub fn control_type(batch: &[u8]) -> Option<ControlType> {
    let records = BatchRecords::decode(batch, MAX_CONTROL_BATCH_BYTES).ok()?;
    if !records.header().is_control() {
        return None;
    }
    let record = records.iter().next()?;
    let key = record.key?;
    let version = i16::from_be_bytes([*key.first()?, *key.get(1)?]);
    if version < 0 {
        return None;
    }
    match i16::from_be_bytes([*key.get(2)?, *key.get(3)?]) {
        0 => Some(ControlType::Abort),
        1 => Some(ControlType::Commit),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{Bytes, BytesMut};
    use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};

    /// A control batch as Kafka writes one: a single record whose key is (version, type) and
    /// whose value is the marker's (version, coordinator epoch).
    fn marker_batch(producer_id: i64, type_id: i16, control: bool) -> BytesMut {
        let mut key = Vec::new();
        key.extend_from_slice(&0i16.to_be_bytes());
        key.extend_from_slice(&type_id.to_be_bytes());
        let record = Record {
            transactional: true,
            control,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id,
            producer_epoch: 0,
            timestamp_type: TimestampType::Creation,
            offset: 0,
            sequence: -1,
            timestamp: 0,
            key: Some(Bytes::from(key)),
            value: Some(Bytes::from_static(&[0, 0, 0, 0, 0, 7])),
            headers: Default::default(),
        };
        let mut buf = BytesMut::new();
        let options = RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        };
        RecordBatchEncoder::encode(&mut buf, [record].iter(), &options).expect("encodes");
        buf
    }

    #[test]
    fn commit_and_abort_markers_are_told_apart() {
        assert_eq!(control_type(&marker_batch(7, 1, true)), Some(ControlType::Commit));
        assert_eq!(control_type(&marker_batch(7, 0, true)), Some(ControlType::Abort));
    }

    #[test]
    fn other_control_types_plain_batches_and_cut_batches_are_not_markers() {
        assert_eq!(control_type(&marker_batch(7, 2, true)), None, "LEADER_CHANGE");
        assert_eq!(control_type(&marker_batch(7, 1, false)), None, "not a control batch");
        let batch = marker_batch(7, 1, true);
        for len in 0..batch.len() {
            assert_eq!(control_type(&batch[..len]), None, "cut at {len}");
        }
    }
}

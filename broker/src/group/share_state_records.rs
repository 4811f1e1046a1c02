//! The share-partition state records (KIP-932) the group coordinator keeps in
//! `__consumer_offsets` beside its groups: one record per (group, topic id, partition), the
//! latest state winning, a tombstone when the group is deleted. Kafka keeps the same state in
//! a `__share_group_state` topic with its own share coordinator; Sluice keeps it with the
//! group, which already fails over with its partition, so the key type is Sluice's own
//! (`SHARE_STATE_TYPE`, beyond Kafka's coordinator record types).
//!
//! Value v0: state epoch, leader epoch, start offset, then the state batches as an int32
//! count of (first offset, last offset, delivery state, delivery count). Everything decoded
//! here came from disk and is checked before anything is sized by it.

use bytes::{BufMut, Bytes, BytesMut};
use uuid::Uuid;

use super::record_codec::{put_string, Reader, RecordError};
use crate::share::state::{ShareState, StateBatch};

/// The key type of a share-partition state record: Sluice's own, far above Kafka's.
pub const SHARE_STATE_TYPE: i16 = 1000;
const VALUE_VERSION: i16 = 0;
/// Bytes of one state batch in the value.
const BATCH_BYTES: usize = 8 + 8 + 1 + 2;

pub fn key(group_id: &str, topic_id: Uuid, partition: i32) -> Bytes {
    let mut buf = BytesMut::with_capacity(24 + group_id.len());
    buf.put_i16(SHARE_STATE_TYPE);
    put_string(&mut buf, group_id);
    buf.put_slice(topic_id.as_bytes());
    buf.put_i32(partition);
    buf.freeze()
}

pub fn value(state: &ShareState) -> Bytes {
    let mut buf = BytesMut::with_capacity(24 + state.batches.len() * BATCH_BYTES);
    buf.put_i16(VALUE_VERSION);
    buf.put_i32(state.state_epoch);
    buf.put_i32(state.leader_epoch);
    buf.put_i64(state.start_offset);
    buf.put_i32(i32::try_from(state.batches.len()).unwrap_or(i32::MAX));
    for b in &state.batches {
        buf.put_i64(b.first_offset);
        buf.put_i64(b.last_offset);
        buf.put_i8(b.delivery_state);
        buf.put_i16(b.delivery_count);
    }
    buf.freeze()
}

/// The rest of a key whose type `k` has read: group, topic id, partition.
pub(crate) fn decode_key(k: &mut Reader<'_>) -> Result<(String, Uuid, i32), RecordError> {
    let group_id = k.string("group")?;
    let id = k.take(16, "topic id")?;
    let topic_id = Uuid::from_slice(id).map_err(|_| RecordError::Truncated("topic id"))?;
    let partition = k.i32("partition")?;
    Ok((group_id, topic_id, partition))
}

pub fn decode_value(value: &[u8]) -> Result<ShareState, RecordError> {
    let mut r = Reader(value);
    match r.i16("value version")? {
        VALUE_VERSION => {}
        v => return Err(RecordError::UnknownValueVersion(v)),
    }
    let state_epoch = r.i32("state epoch")?;
    let leader_epoch = r.i32("leader epoch")?;
    let start_offset = r.i64("start offset")?;
    let count = usize::try_from(r.i32("state batch count")?).unwrap_or(0);
    if count.saturating_mul(BATCH_BYTES) > r.0.len() {
        return Err(RecordError::Truncated("state batches"));
    }
    let mut batches = Vec::with_capacity(count);
    for _ in 0..count {
        let first_offset = r.i64("first offset")?;
        let last_offset = r.i64("last offset")?;
        let state = r.take(1, "delivery state")?[0] as i8;
        let delivery_count = r.i16("delivery count")?;
        batches.push(StateBatch {
            first_offset,
            last_offset,
            delivery_state: state,
            delivery_count,
        });
    }
    Ok(ShareState {
        state_epoch,
        leader_epoch,
        start_offset,
        batches,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::share::state::{DELIVERY_ACKNOWLEDGED, DELIVERY_AVAILABLE};

    #[test]
    fn a_state_record_reads_back_as_written_and_a_short_one_is_refused() {
        let topic_id = Uuid::from_u128(7);
        let state = ShareState {
            state_epoch: 3,
            leader_epoch: 9,
            start_offset: 100,
            batches: vec![
                StateBatch {
                    first_offset: 100,
                    last_offset: 104,
                    delivery_state: DELIVERY_AVAILABLE,
                    delivery_count: 2,
                },
                StateBatch {
                    first_offset: 105,
                    last_offset: 200,
                    delivery_state: DELIVERY_ACKNOWLEDGED,
                    delivery_count: 1,
                },
            ],
        };
        let k = key("g", topic_id, 4);
        let mut r = Reader(&k);
        assert_eq!(r.i16("type").unwrap(), SHARE_STATE_TYPE);
        assert_eq!(decode_key(&mut r).unwrap(), ("g".to_string(), topic_id, 4));
        let v = value(&state);
        assert_eq!(decode_value(&v).unwrap(), state);
        assert!(decode_value(&v[..v.len() - 1]).is_err());
        // A count claiming more batches than the bytes hold allocates nothing and fails.
        let mut lying = BytesMut::from(&v[..22]);
        lying.put_i32(i32::MAX);
        assert!(matches!(decode_value(&lying), Err(RecordError::Truncated(_))));
    }
}

//! The coordinators' own logs: how the group coordinator (`__consumer_offsets`) and the
//! transaction coordinator (`__transaction_state`) append their records as partition leader
//! and read a partition back when they take it over. Both write small uncompressed v2
//! batches of key/value records and wait for the ISR before answering, as a produce with
//! `acks=all` would.

use bytes::{Bytes, BytesMut};
use kafka_protocol::error::ResponseError;
use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions};

use sluice_protocol::batch::{BatchHeader, BatchIter};
use sluice_protocol::records::producer_record;

use crate::log::LogError;
use crate::metadata::image::TopicImage;
use crate::partition::{AppendOutcome, Partition, ReadBound};
use crate::producer_state::TxnVerification;
use crate::purgatory::DelayedProduce;
use crate::replica_manager::ReplicaManager;
use crate::topic_config::{self, BrokerOverrides};

/// A batch appended to a coordinator's partition: where it starts, and the wait for its
/// replication.
pub struct Appended {
    pub base_offset: i64,
    pub wait: DelayedProduce,
}

/// Where and as whom a coordinator appends.
pub struct Target<'a> {
    pub replicas: &'a ReplicaManager,
    pub topic: &'a TopicImage,
    pub broker_overrides: &'a BrokerOverrides,
    pub index: i32,
    /// The leader epoch the coordinator loaded the partition at: an append under any other
    /// (leadership moved and perhaps came back) is refused with FENCED_LEADER_EPOCH, so a
    /// coordinator never writes on behalf of state it no longer owns.
    pub expected_leader_epoch: Option<i32>,
}

/// Appends `entries` (key, value or tombstone) to the target partition as its leader,
/// refusing with NOT_ENOUGH_REPLICAS, as `acks=all` would, when the ISR is below
/// `min.insync.replicas`; returns the wait for their replication. With `producer`
/// (id, epoch) the batch is transactional, as Kafka's coordinator writes a TxnOffsetCommit,
/// and `verification` is what it presents (KIP-890: the TxnOffsetCommit's verification).
pub fn append(
    target: &Target<'_>,
    entries: &[(Bytes, Option<Bytes>)],
    producer: Option<(i64, i16)>,
    verification: TxnVerification,
    now: i64,
) -> Result<Appended, ResponseError> {
    let (partition, registration) = target.replicas.leader_partition(target.topic, target.index)?;
    let leader_epoch = partition.leader_epoch();
    if let Some(expected) = target.expected_leader_epoch {
        if registration.leader_epoch != expected || leader_epoch != expected {
            return Err(ResponseError::FencedLeaderEpoch);
        }
    }
    let min_isr = topic_config::min_insync_replicas(
        &target.topic.configs,
        target.broker_overrides,
        registration.replicas.len(),
    );
    if partition.isr_size() < min_isr {
        return Err(ResponseError::NotEnoughReplicas);
    }
    let mut batch = encode_batch(entries, producer, now).map_err(|e| {
        tracing::error!(topic = %target.topic.name, error = %e, "could not encode a coordinator's records");
        ResponseError::UnknownServerError
    })?;
    // No sequence numbers, so the producer state never answers Duplicate; handled anyway.
    let (base_offset, required_offset) = match partition
        .append_as_leader_verified(&mut batch, now, verification)
        .map_err(|(e, _)| e)?
    {
        AppendOutcome::Appended(info) => (info.base_offset, info.last_offset + 1),
        AppendOutcome::Duplicate { base_offset } => (base_offset, base_offset + 1),
    };
    Ok(Appended {
        base_offset,
        wait: DelayedProduce {
            partition,
            required_offset,
            leader_epoch,
            min_insync_replicas: min_isr,
        },
    })
}

/// One uncompressed v2 batch holding `entries` (offsets are assigned on append). With
/// `producer` (id, epoch) it is a transactional batch of that producer with base sequence -1
/// (NO_SEQUENCE: the coordinator's own append, never a retry to deduplicate).
pub fn encode_batch(
    entries: &[(Bytes, Option<Bytes>)],
    producer: Option<(i64, i16)>,
    now: i64,
) -> anyhow::Result<BytesMut> {
    let records: Vec<Record> = entries
        .iter()
        .enumerate()
        .map(|(i, (key, value))| {
            // `producer_record` numbers sequences from -1, so the batch's base sequence is -1.
            let mut record = producer_record(i as i64, now, Some(key.clone()), value.clone());
            if let Some((producer_id, producer_epoch)) = producer {
                record.transactional = true;
                record.producer_id = producer_id;
                record.producer_epoch = producer_epoch;
            }
            record
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        records.iter(),
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )?;
    Ok(buf)
}

/// Reads `partition` from its log start to its end in chunks of about `buffer` bytes and
/// hands each batch to `visit` once, in log order, with the offset the chunk was read from
/// (a batch that starts before it was partly handed over by the previous chunk: its records
/// below that offset are not to be taken again).
pub fn scan(
    partition: &Partition,
    buffer: usize,
    mut visit: impl FnMut(&BatchHeader, &[u8], i64),
) -> Result<(), LogError> {
    let end = partition.log_end_offset();
    let mut offset = partition.log_start_offset();
    while offset < end {
        let chunk = partition.read(offset, buffer.max(1024), true, ReadBound::LogEnd)?;
        let mut next = offset;
        for (header, range) in BatchIter::new(&chunk.records) {
            next = header.last_offset() + 1;
            visit(&header, &chunk.records[range], offset);
        }
        if next <= offset {
            break;
        }
        offset = next;
    }
    Ok(())
}

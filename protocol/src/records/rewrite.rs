//! Writing a batch anew around a records section: the log cleaner's thinned batches and the
//! leader's recompression to a topic's `compression.type`, both built by [`rebuild_batch`].
//! Records are copied byte for byte (their deltas are relative to the header, which keeps its
//! base offset, timestamps and producer fields), so a rebuilt batch decodes to the same records.

use bytes::BufMut;

use super::{codec_name, BatchRecords, CODEC_GZIP, CODEC_LZ4, CODEC_NONE, CODEC_SNAPPY, CODEC_ZSTD};
use crate::batch::{
    BatchError, BatchHeader, ATTRIBUTES_OFFSET, BATCH_HEADER_LEN, BATCH_LENGTH_OFFSET, CRC_COVERED_FROM, CRC_OFFSET,
    LOG_OVERHEAD, RECORDS_COUNT_OFFSET,
};

/// The codec bits of a batch's attributes.
const CODEC_MASK: i16 = 0x07;

/// A codec to write records with, at a level (Kafka's `compression.<codec>.level`, KIP-390;
/// `None` is the codec's default: gzip 6, lz4 9, zstd 3, as in Kafka). Snappy and none have no
/// level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compressor {
    pub codec: u8,
    pub level: Option<i32>,
}

/// Kafka's default `compression.lz4.level`.
pub const LZ4_DEFAULT_LEVEL: i32 = 9;
/// Kafka's default `compression.zstd.level`.
pub const ZSTD_DEFAULT_LEVEL: i32 = 3;

impl Compressor {
    /// `codec` at its default level.
    pub fn new(codec: u8) -> Compressor {
        Compressor { codec, level: None }
    }

    /// Appends `section` to `out`, compressed. Snappy is written in snappy-java's framing, as
    /// Kafka's Java producer writes it; lz4 as one LZ4 frame of independent blocks.
    pub fn compress(&self, section: &[u8], out: &mut Vec<u8>) -> Result<(), BatchError> {
        let failed = |reason: String| BatchError::Compression {
            codec: codec_name(self.codec),
            reason,
        };
        match self.codec {
            CODEC_NONE => out.extend_from_slice(section),
            CODEC_GZIP => {
                let level = match self.level {
                    Some(level @ 1..=9) => flate2::Compression::new(level as u32),
                    _ => flate2::Compression::default(),
                };
                let mut encoder = flate2::write::GzEncoder::new(out, level);
                std::io::Write::write_all(&mut encoder, section).map_err(|e| failed(e.to_string()))?;
                encoder.finish().map_err(|e| failed(e.to_string()))?;
            }
            CODEC_SNAPPY => {
                use kafka_protocol::compression::{Compressor as _, Snappy};
                Snappy::compress(out, |buf: &mut bytes::BytesMut| {
                    buf.put_slice(section);
                    Ok(())
                })
                .map_err(|e| failed(format!("{e:#}")))?;
            }
            CODEC_LZ4 => {
                let level = self.level.unwrap_or(LZ4_DEFAULT_LEVEL).max(1) as u32;
                let mut encoder = lz4::EncoderBuilder::new()
                    .level(level)
                    .block_mode(lz4::BlockMode::Independent)
                    .build(out)
                    .map_err(|e| failed(e.to_string()))?;
                std::io::Write::write_all(&mut encoder, section).map_err(|e| failed(e.to_string()))?;
                encoder.finish().1.map_err(|e| failed(e.to_string()))?;
            }
            CODEC_ZSTD => {
                // One frame with its content size, which lets every client size its output.
                let frame = zstd::bulk::compress(section, self.level.unwrap_or(ZSTD_DEFAULT_LEVEL))
                    .map_err(|e| failed(e.to_string()))?;
                out.extend_from_slice(&frame);
            }
            codec => return Err(BatchError::UnknownCompression { codec }),
        }
        Ok(())
    }
}

/// `original`'s header around a new records section of `records_count` records, compressed by
/// `compressor`: the codec bits of the attributes, the length, the count and the CRC are new;
/// base offset, last offset delta, timestamps, timestamp type, transactional and control flags,
/// producer id, epoch, base sequence and partition leader epoch stay.
pub fn rebuild_batch(
    original: &[u8],
    compressor: Compressor,
    section: &[u8],
    records_count: i32,
) -> Result<Vec<u8>, BatchError> {
    let header = BatchHeader::parse(original)?;
    let mut out = Vec::with_capacity(BATCH_HEADER_LEN + section.len());
    out.extend_from_slice(&original[..BATCH_HEADER_LEN]);
    compressor.compress(section, &mut out)?;
    let batch_length = i32::try_from(out.len() - LOG_OVERHEAD).map_err(|_| BatchError::Compression {
        codec: codec_name(compressor.codec),
        reason: "the rebuilt batch would be larger than 2 GiB".to_string(),
    })?;
    let attributes = (header.attributes & !CODEC_MASK) | i16::from(compressor.codec);
    out[ATTRIBUTES_OFFSET..ATTRIBUTES_OFFSET + 2].copy_from_slice(&attributes.to_be_bytes());
    out[BATCH_LENGTH_OFFSET..BATCH_LENGTH_OFFSET + 4].copy_from_slice(&batch_length.to_be_bytes());
    out[RECORDS_COUNT_OFFSET..RECORDS_COUNT_OFFSET + 4].copy_from_slice(&records_count.to_be_bytes());
    let crc = crc32c::crc32c(&out[CRC_COVERED_FROM..]);
    out[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(out)
}

/// Kafka's recompression on append when a topic's `compression.type` names a codec: `batch`
/// (exactly one checked v2 batch) decompressed within `max_decompressed_bytes` (the topic's
/// `max.message.bytes`, as everywhere records are decoded) and written with `compressor`.
/// `None` when the batch already uses that codec: it is stored as received.
pub fn recompress_batch(
    batch: &[u8],
    compressor: Compressor,
    max_decompressed_bytes: usize,
) -> Result<Option<Vec<u8>>, BatchError> {
    let header = BatchHeader::parse(batch)?;
    if header.compression() == compressor.codec {
        return Ok(None);
    }
    let records = BatchRecords::decode(batch, max_decompressed_bytes)?;
    rebuild_batch(batch, compressor, records.section(), header.records_count).map(Some)
}

#[cfg(test)]
mod tests {
    use bytes::{Bytes, BytesMut};
    use kafka_protocol::records::{
        Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };

    use super::*;
    use crate::batch::validate_batch;
    use kafka_protocol::error::ResponseError;

    /// Every codec, none included.
    fn all_codecs() -> impl Iterator<Item = (Compression, u8)> {
        std::iter::once((Compression::None, CODEC_NONE)).chain(super::super::tests::CODECS)
    }

    /// One batch of an idempotent producer (id 42, epoch 3, base sequence 7) at offset 1000,
    /// leader epoch 5, with keys, values, headers and rising timestamps, as a client encodes it.
    fn producer_batch(compression: Compression, timestamp_type: TimestampType) -> Vec<u8> {
        let records: Vec<Record> = (0..50i64)
            .map(|i| Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: 5,
                producer_id: 42,
                producer_epoch: 3,
                timestamp_type,
                offset: 1000 + i,
                sequence: 7 + i as i32,
                timestamp: 1_700_000_000_000 + 10 * i,
                key: Some(Bytes::from(format!("key-{i}"))),
                value: (i % 7 != 3).then(|| Bytes::from(format!("value {i} ").repeat(20))),
                headers: [(
                    kafka_protocol::protocol::StrBytes::from_static_str("h"),
                    Some(Bytes::from(vec![i as u8; 3])),
                )]
                .into_iter()
                .collect(),
            })
            .collect();
        let mut buf = BytesMut::new();
        let options = RecordEncodeOptions {
            version: 2,
            compression,
        };
        RecordBatchEncoder::encode(&mut buf, records.iter(), &options).unwrap();
        buf.to_vec()
    }

    fn decoded(batch: &[u8]) -> Vec<Record> {
        let mut bytes = Bytes::copy_from_slice(batch);
        let set = RecordBatchDecoder::decode(&mut bytes).unwrap();
        assert!(bytes.is_empty(), "one batch, nothing after it");
        set.records
    }

    #[test]
    fn recompressing_keeps_every_header_field_and_record_and_writes_a_valid_crc() {
        for timestamp_type in [TimestampType::Creation, TimestampType::LogAppend] {
            for (from, from_codec) in all_codecs() {
                let original = producer_batch(from, timestamp_type);
                let before = BatchHeader::parse(&original).unwrap();
                for (_, to_codec) in all_codecs() {
                    let what = format!(
                        "{timestamp_type:?} {} -> {}",
                        codec_name(from_codec),
                        codec_name(to_codec)
                    );
                    let rebuilt = recompress_batch(&original, Compressor::new(to_codec), 1 << 20).unwrap();
                    let Some(rebuilt) = rebuilt else {
                        assert_eq!(
                            from_codec, to_codec,
                            "{what}: only a batch in the target codec stays as is"
                        );
                        continue;
                    };
                    assert_ne!(from_codec, to_codec, "{what}");
                    let after = validate_batch(&rebuilt).unwrap_or_else(|e| panic!("{what}: {e}"));
                    assert_eq!(after.compression(), to_codec, "{what}");
                    let unchanged = |h: &BatchHeader| {
                        (
                            h.base_offset,
                            h.partition_leader_epoch,
                            h.attributes & !CODEC_MASK,
                            h.last_offset_delta,
                            h.base_timestamp,
                            h.max_timestamp,
                            (h.producer_id, h.producer_epoch, h.base_sequence),
                            h.records_count,
                        )
                    };
                    assert_eq!(unchanged(&after), unchanged(&before), "{what}");
                    assert_eq!(after.total_len(), rebuilt.len(), "{what}");
                    assert_eq!(decoded(&rebuilt), decoded(&original), "{what}");
                }
            }
        }
    }

    #[test]
    fn every_level_kafka_allows_writes_records_that_read_back() {
        let original = producer_batch(Compression::None, TimestampType::Creation);
        let levels = [
            (CODEC_GZIP, [1, 9, -1]),
            (CODEC_LZ4, [1, 17, 9]),
            (CODEC_ZSTD, [-5, 19, 3]),
        ];
        for (codec, codec_levels) in levels {
            for level in codec_levels {
                let compressor = Compressor {
                    codec,
                    level: Some(level),
                };
                let rebuilt = recompress_batch(&original, compressor, 1 << 20).unwrap().unwrap();
                validate_batch(&rebuilt).unwrap();
                assert_eq!(
                    decoded(&rebuilt),
                    decoded(&original),
                    "{} level {level}",
                    codec_name(codec)
                );
            }
        }
    }

    #[test]
    fn recompression_decompresses_within_the_limit_it_is_given() {
        let original = producer_batch(Compression::Zstd, TimestampType::Creation);
        let section = BatchRecords::decode(&original, 1 << 20).unwrap().section().len();
        let err = recompress_batch(&original, Compressor::new(CODEC_GZIP), section - 1).unwrap_err();
        assert_eq!(err.response_error(), ResponseError::RecordListTooLarge, "{err}");
        assert!(recompress_batch(&original, Compressor::new(CODEC_GZIP), section)
            .unwrap()
            .is_some());
    }

    #[test]
    fn codec_names_are_kafkas_compression_types() {
        for (name, codec) in [("uncompressed", 0), ("gzip", 1), ("snappy", 2), ("lz4", 3), ("zstd", 4)] {
            assert_eq!(super::super::codec_by_name(name), Some(codec));
        }
        assert_eq!(super::super::codec_by_name("producer"), None);
        assert_eq!(super::super::codec_by_name("none"), None);
    }
}

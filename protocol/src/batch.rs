//! A view of Kafka v2 record batches (message format v2, magic 2) that reads the fixed 61-byte
//! header and never decodes records.
//!
//! Produce validates and stamps batches and the log stores them as received; fetch returns the
//! stored bytes. So everything here costs one CRC32C pass per batch at most and allocates nothing.
//! Every read is bounds-checked: the bytes come from the network or the disk.
//!
//! Layout, all big-endian (Kafka's `DefaultRecordBatch`):
//!
//! ```text
//!  0 baseOffset int64            27 baseTimestamp int64
//!  8 batchLength int32           35 maxTimestamp int64
//! 12 partitionLeaderEpoch int32  43 producerId int64
//! 16 magic int8 (= 2)            51 producerEpoch int16
//! 17 crc uint32                  53 baseSequence int32
//! 21 attributes int16            57 recordsCount int32
//! 23 lastOffsetDelta int32       61 records...
//! ```
//!
//! `batchLength` counts the bytes after itself, so a batch occupies `batchLength + 12` bytes. The
//! CRC32C (Castagnoli) covers `attributes` to the end of the batch, which is why `baseOffset` and
//! `partitionLeaderEpoch` can be patched in place without touching it.
//!
//! Errors: every [`BatchError`] is answered with `CORRUPT_MESSAGE` (2) except an old message format
//! (magic 0 or 1), answered with `UNSUPPORTED_FOR_MESSAGE_FORMAT` (43), and records that
//! decompress past their limit (see [`crate::records`]), answered with `RECORD_LIST_TOO_LARGE`
//! (18); see [`BatchError::response_error`].
//!
//! Over 700 lines only because the header parser's tests (every field, every corruption) sit beside
//! it.

use std::ops::Range;

use kafka_protocol::error::ResponseError;

pub const BASE_OFFSET_OFFSET: usize = 0;
pub const BATCH_LENGTH_OFFSET: usize = 8;
pub const PARTITION_LEADER_EPOCH_OFFSET: usize = 12;
pub const MAGIC_OFFSET: usize = 16;
pub const CRC_OFFSET: usize = 17;
pub const ATTRIBUTES_OFFSET: usize = 21;
pub const LAST_OFFSET_DELTA_OFFSET: usize = 23;
pub const BASE_TIMESTAMP_OFFSET: usize = 27;
pub const MAX_TIMESTAMP_OFFSET: usize = 35;
pub const PRODUCER_ID_OFFSET: usize = 43;
pub const PRODUCER_EPOCH_OFFSET: usize = 51;
pub const BASE_SEQUENCE_OFFSET: usize = 53;
pub const RECORDS_COUNT_OFFSET: usize = 57;
/// Size of the v2 header; the records follow it (Kafka's `RECORD_BATCH_OVERHEAD`).
pub const BATCH_HEADER_LEN: usize = 61;
/// Bytes not counted by `batchLength`: baseOffset and batchLength themselves (Kafka's `LOG_OVERHEAD`).
pub const LOG_OVERHEAD: usize = 12;
/// Smallest legal `batchLength`: a header with no records.
pub const MIN_BATCH_LENGTH: i32 = (BATCH_HEADER_LEN - LOG_OVERHEAD) as i32;
/// The CRC covers the batch from here to its end.
pub const CRC_COVERED_FROM: usize = ATTRIBUTES_OFFSET;
/// The only message format Sluice accepts.
pub const MAGIC_V2: i8 = 2;
/// What producers put in `partitionLeaderEpoch`; the leader stamps the real epoch.
pub const NO_PARTITION_LEADER_EPOCH: i32 = -1;
/// Kafka's `RecordBatch.NO_TIMESTAMP`.
pub const NO_TIMESTAMP: i64 = -1;
/// Highest codec id Kafka defines: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.
pub const MAX_COMPRESSION_CODEC: u8 = 4;
/// The smallest v2 record: one byte each for its length, attributes, timestamp delta, offset
/// delta, key length (-1), value length (-1) and header count.
pub const MIN_RECORD_BYTES: usize = 7;


const COMPRESSION_CODEC_MASK: i16 = 0x07;
const TIMESTAMP_TYPE_MASK: i16 = 0x08;
const TRANSACTIONAL_FLAG_MASK: i16 = 0x10;
const CONTROL_FLAG_MASK: i16 = 0x20;

/// Why a record batch was refused. Display strings are sentences for the operator's log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    #[error("record batch is truncated: it needs {needed} bytes but only {available} are present")]
    Truncated { needed: usize, available: usize },
    #[error("record batch length field says {declared} bytes but the batch given is {actual} bytes")]
    LengthMismatch { declared: usize, actual: usize },
    #[error("record batch length {batch_length} is below the 49-byte minimum of a v2 batch")]
    InvalidBatchLength { batch_length: i32 },
    #[error(
        "record batch uses message format v{magic}, which is not supported; \
         use a client that writes message format v2 (Kafka 0.11 or later)"
    )]
    UnsupportedMagic { magic: i8 },
    #[error("record batch has unknown magic byte {magic}; only 0, 1 and 2 exist")]
    InvalidMagic { magic: i8 },
    #[error("record batch CRC mismatch: expected {expected:#010x}, computed {computed:#010x}")]
    CrcMismatch { expected: u32, computed: u32 },
    #[error(
        "record batch declares {records_count} records with lastOffsetDelta {last_offset_delta}; \
         a v2 batch needs lastOffsetDelta >= 0 and, when it has records, \
         lastOffsetDelta = recordsCount - 1"
    )]
    InvalidRecordCount { records_count: i32, last_offset_delta: i32 },
    #[error("record batch uses unknown compression codec {codec}; known codecs are 0 (none) to 4 (zstd)")]
    UnknownCompression { codec: u8 },
    #[error("records hold no record batch")]
    NoBatches,
    #[error(
        "record batch declares {records_count} records but its {section_bytes}-byte records section \
         can hold at most {} (a record takes at least 7 bytes); the client wrote an invalid batch",
        section_bytes / MIN_RECORD_BYTES
    )]
    RecordCountExceedsBytes { records_count: i32, section_bytes: usize },
    #[error(
        "record batch's {codec} records decompress to more than {max_bytes} bytes, the topic's \
         max.message.bytes; send smaller batches (lower the producer's batch.size or linger.ms) \
         or raise the topic's max.message.bytes"
    )]
    RecordsTooLarge { codec: &'static str, max_bytes: usize },
    #[error(
        "record batch's {codec} records cannot be decompressed ({reason}); the client's \
         compression library wrote invalid data or the batch was damaged on the way"
    )]
    Decompression { codec: &'static str, reason: String },
    #[error("record {index} of the batch is malformed: {reason}; the client wrote an invalid record")]
    MalformedRecord { index: usize, reason: &'static str },
    #[error(
        "record batch declares {records_count} records but {trailing} bytes follow the last of \
         them; the client wrote an invalid batch"
    )]
    TrailingRecordBytes { records_count: i32, trailing: usize },
    #[error("the broker could not write {codec} records: {reason}")]
    Compression { codec: &'static str, reason: String },
}

impl BatchError {
    /// The Kafka error code to answer a producer with: `CORRUPT_MESSAGE` for everything except
    /// an old message format (v0/v1), which Kafka answers with `UNSUPPORTED_FOR_MESSAGE_FORMAT`,
    /// and records decompressing past their limit, answered with `RECORD_LIST_TOO_LARGE`.
    pub fn response_error(&self) -> ResponseError {
        match self {
            BatchError::UnsupportedMagic { .. } => ResponseError::UnsupportedForMessageFormat,
            BatchError::RecordsTooLarge { .. } => ResponseError::RecordListTooLarge,
            // The broker's own compressor failed: not the client's fault.
            BatchError::Compression { .. } => ResponseError::UnknownServerError,
            _ => ResponseError::CorruptMessage,
        }
    }
}

/// The decoded 61-byte header of a v2 record batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    pub batch_length: i32,
    pub partition_leader_epoch: i32,
    pub magic: i8,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub records_count: i32,
}

impl BatchHeader {
    /// Reads the header at the start of `buf`. Checks only that 61 bytes are there: use
    /// [`validate_batch`] for data from a producer, [`BatchHeader::validate_fields`] for a
    /// header-only check.
    pub fn parse(buf: &[u8]) -> Result<BatchHeader, BatchError> {
        let header = header_bytes(buf)?;
        Ok(BatchHeader {
            base_offset: read_i64(header, BASE_OFFSET_OFFSET),
            batch_length: read_i32(header, BATCH_LENGTH_OFFSET),
            partition_leader_epoch: read_i32(header, PARTITION_LEADER_EPOCH_OFFSET),
            magic: i8::from_be_bytes(read_bytes(header, MAGIC_OFFSET)),
            crc: u32::from_be_bytes(read_bytes(header, CRC_OFFSET)),
            attributes: read_i16(header, ATTRIBUTES_OFFSET),
            last_offset_delta: read_i32(header, LAST_OFFSET_DELTA_OFFSET),
            base_timestamp: read_i64(header, BASE_TIMESTAMP_OFFSET),
            max_timestamp: read_i64(header, MAX_TIMESTAMP_OFFSET),
            producer_id: read_i64(header, PRODUCER_ID_OFFSET),
            producer_epoch: read_i16(header, PRODUCER_EPOCH_OFFSET),
            base_sequence: read_i32(header, BASE_SEQUENCE_OFFSET),
            records_count: read_i32(header, RECORDS_COUNT_OFFSET),
        })
    }

    /// Bytes the whole batch occupies (`batchLength + 12`). A negative `batchLength` counts as 0;
    /// [`BatchHeader::validate_fields`] rejects anything below 49.
    pub fn total_len(&self) -> usize {
        usize::try_from(self.batch_length).unwrap_or(0) + LOG_OVERHEAD
    }

    /// Offset of the batch's last record (saturating, so a hostile header cannot overflow).
    pub fn last_offset(&self) -> i64 {
        self.base_offset.saturating_add(i64::from(self.last_offset_delta))
    }

    /// How many offsets the batch spans once stamped: `lastOffsetDelta + 1`.
    pub fn offset_count(&self) -> i64 {
        i64::from(self.last_offset_delta) + 1
    }

    /// Compression codec id: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.
    pub fn compression(&self) -> u8 {
        (self.attributes & COMPRESSION_CODEC_MASK) as u8
    }

    /// Bytes after the 61-byte header: the records section, compressed or not.
    pub fn records_section_len(&self) -> usize {
        self.total_len().saturating_sub(BATCH_HEADER_LEN)
    }

    /// True when the timestamps are the broker's LogAppendTime rather than the producer's CreateTime.
    pub fn timestamp_type_is_log_append(&self) -> bool {
        self.attributes & TIMESTAMP_TYPE_MASK != 0
    }

    pub fn is_transactional(&self) -> bool {
        self.attributes & TRANSACTIONAL_FLAG_MASK != 0
    }

    /// Control batches carry transaction markers, not user records.
    pub fn is_control(&self) -> bool {
        self.attributes & CONTROL_FLAG_MASK != 0
    }

    /// The checks of [`validate_batch`] that need only the header: magic, length, record count and
    /// codec. The log's crash recovery uses it and streams the CRC over the batch itself.
    pub fn validate_fields(&self) -> Result<(), BatchError> {
        self.check_fields(false)
    }

    /// [`BatchHeader::validate_fields`] for a batch already in a log (crash recovery, a
    /// follower's copy of the leader's log): log compaction removes records from a batch but
    /// keeps its offset range (Kafka preserves `lastOffsetDelta` so producer sequences stay
    /// valid), so the record count may be below the offsets the batch spans.
    pub fn validate_stored_fields(&self) -> Result<(), BatchError> {
        self.check_fields(true)
    }

    fn check_fields(&self, compacted: bool) -> Result<(), BatchError> {
        check_magic(self.magic)?;
        if self.batch_length < MIN_BATCH_LENGTH {
            return Err(BatchError::InvalidBatchLength {
                batch_length: self.batch_length,
            });
        }
        // Kafka's LogValidator: the offset range must be non-empty and match the record count.
        let count = i64::from(self.records_count);
        let count_ok = count == 0 || count == self.offset_count() || (compacted && count < self.offset_count());
        if self.last_offset_delta < 0 || self.records_count < 0 || !count_ok {
            return Err(BatchError::InvalidRecordCount {
                records_count: self.records_count,
                last_offset_delta: self.last_offset_delta,
            });
        }
        if self.compression() > MAX_COMPRESSION_CODEC {
            return Err(BatchError::UnknownCompression {
                codec: self.compression(),
            });
        }
        Ok(())
    }
}

/// Fully validates one complete batch as received from a producer or a leader: `batch` must be
/// exactly one batch. Checks magic, length, header fields and CRC32C.
pub fn validate_batch(batch: &[u8]) -> Result<BatchHeader, BatchError> {
    validate_one(batch, false)
}

/// [`validate_batch`] for a batch copied from another replica's log, which compaction may have
/// thinned (see [`BatchHeader::validate_stored_fields`]).
pub fn validate_stored_batch(batch: &[u8]) -> Result<BatchHeader, BatchError> {
    validate_one(batch, true)
}

fn validate_one(batch: &[u8], compacted: bool) -> Result<BatchHeader, BatchError> {
    // Magic sits at the same offset in every message format, so check it before anything that
    // assumes v2: an old client then gets UNSUPPORTED_FOR_MESSAGE_FORMAT, not CORRUPT_MESSAGE.
    if let Some(&magic) = batch.get(MAGIC_OFFSET) {
        check_magic(magic as i8)?;
    }
    let header = BatchHeader::parse(batch)?;
    header.check_fields(compacted)?;
    if header.total_len() != batch.len() {
        return Err(BatchError::LengthMismatch {
            declared: header.total_len(),
            actual: batch.len(),
        });
    }
    // Uncompressed records are the section itself, so a count its bytes cannot hold is a lie
    // found without decoding; compressed counts are checked when records are decoded.
    if header.compression() == 0 {
        check_records_fit(header.records_count, header.records_section_len())?;
    }
    let computed = crc32c::crc32c(batch.get(CRC_COVERED_FROM..).unwrap_or_default());
    if computed != header.crc {
        return Err(BatchError::CrcMismatch {
            expected: header.crc,
            computed,
        });
    }
    Ok(header)
}

/// What the produce path needs from a records blob: how many offsets to assign, timestamps, and
/// sizes to check against `max.message.bytes` (Kafka compares each batch, not the blob).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchesInfo {
    pub batch_count: usize,
    /// Offsets the batches span: the sum of `lastOffsetDelta + 1`. Batches are stamped back to
    /// back, so the log end offset advances by exactly this.
    pub record_count: i64,
    /// `baseTimestamp` of the first batch.
    pub first_timestamp: i64,
    /// Largest `maxTimestamp` over the batches, [`NO_TIMESTAMP`] if none has one.
    pub max_timestamp: i64,
    /// Offset of the last record of the first batch holding `max_timestamp`, relative to the first
    /// offset the blob will be assigned (Kafka's shallow offset of max timestamp).
    pub offset_delta_of_max_timestamp: i64,
    pub total_bytes: usize,
    pub max_batch_bytes: usize,
}

/// Validates a produce request's records: one or more complete batches back to back, each passing
/// [`validate_batch`], ending exactly at a batch boundary.
pub fn validate_batches(records: &[u8]) -> Result<BatchesInfo, BatchError> {
    walk_batches(records, validate_batch)
}

/// [`validate_batches`] for batches copied from another replica's log (the follower's fetch):
/// compacted batches pass.
pub fn validate_stored_batches(records: &[u8]) -> Result<BatchesInfo, BatchError> {
    walk_batches(records, validate_stored_batch)
}

/// [`validate_batches`] without the CRC pass, for bytes that were already validated (the log's
/// append path): proves the blob is whole batches with sane headers and sums them.
pub fn inspect_batches(records: &[u8]) -> Result<BatchesInfo, BatchError> {
    walk_batches(records, BatchHeader::parse)
}

fn walk_batches(
    records: &[u8],
    check: impl Fn(&[u8]) -> Result<BatchHeader, BatchError>,
) -> Result<BatchesInfo, BatchError> {
    let mut info = BatchesInfo {
        batch_count: 0,
        record_count: 0,
        first_timestamp: NO_TIMESTAMP,
        max_timestamp: NO_TIMESTAMP,
        offset_delta_of_max_timestamp: -1,
        total_bytes: 0,
        max_batch_bytes: 0,
    };
    let mut rest = records;
    while !rest.is_empty() {
        let len = next_batch_len(rest)?;
        let (batch, tail) = rest.split_at(len);
        info.add(&check(batch)?, len);
        rest = tail;
    }
    if info.batch_count == 0 {
        return Err(BatchError::NoBatches);
    }
    Ok(info)
}

impl BatchesInfo {
    fn add(&mut self, header: &BatchHeader, len: usize) {
        if self.batch_count == 0 {
            self.first_timestamp = header.base_timestamp;
        }
        if header.max_timestamp > self.max_timestamp {
            self.max_timestamp = header.max_timestamp;
            self.offset_delta_of_max_timestamp = self.record_count + i64::from(header.last_offset_delta);
        }
        self.batch_count += 1;
        self.record_count += header.offset_count();
        self.total_bytes += len;
        self.max_batch_bytes = self.max_batch_bytes.max(len);
    }
}

/// Writes `baseOffset` (outside the CRC). Fails only if `batch` is shorter than a header.
pub fn set_base_offset(batch: &mut [u8], base_offset: i64) -> Result<(), BatchError> {
    write_field(batch, BASE_OFFSET_OFFSET, &base_offset.to_be_bytes())
}

/// Writes `partitionLeaderEpoch` (outside the CRC). Fails only if `batch` is shorter than a header.
pub fn set_partition_leader_epoch(batch: &mut [u8], epoch: i32) -> Result<(), BatchError> {
    write_field(batch, PARTITION_LEADER_EPOCH_OFFSET, &epoch.to_be_bytes())
}

/// Kafka's LogAppendTime: marks the timestamps as the broker's, sets `maxTimestamp` to `ts_ms` and
/// recomputes the CRC, since both fields are inside it. `batch` must be exactly one batch.
pub fn set_log_append_time(batch: &mut [u8], ts_ms: i64) -> Result<(), BatchError> {
    let header = BatchHeader::parse(batch)?;
    if header.total_len() != batch.len() {
        return Err(BatchError::LengthMismatch {
            declared: header.total_len(),
            actual: batch.len(),
        });
    }
    let attributes = header.attributes | TIMESTAMP_TYPE_MASK;
    write_field(batch, ATTRIBUTES_OFFSET, &attributes.to_be_bytes())?;
    write_field(batch, MAX_TIMESTAMP_OFFSET, &ts_ms.to_be_bytes())?;
    let crc = crc32c::crc32c(batch.get(CRC_COVERED_FROM..).unwrap_or_default());
    write_field(batch, CRC_OFFSET, &crc.to_be_bytes())
}

/// Walks the complete batches of a buffer, parsing headers only (no CRC). Stops, and keeps
/// returning `None`, at a truncated tail batch — normal at the end of a fetch response or of a
/// segment after a crash — or at a header whose length cannot be a batch.
/// [`BatchIter::position`] then tells where the complete batches end.
#[derive(Debug, Clone)]
pub struct BatchIter<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> BatchIter<'a> {
    pub fn new(buf: &'a [u8]) -> BatchIter<'a> {
        BatchIter { buf, pos: 0 }
    }

    /// Where the next batch would start: the end of the complete batches returned so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// True when the batches returned so far cover the whole buffer.
    pub fn at_end(&self) -> bool {
        self.pos == self.buf.len()
    }
}

impl Iterator for BatchIter<'_> {
    type Item = (BatchHeader, Range<usize>);

    fn next(&mut self) -> Option<Self::Item> {
        let rest = self.buf.get(self.pos..)?;
        let header = BatchHeader::parse(rest).ok()?;
        if header.batch_length < MIN_BATCH_LENGTH || header.total_len() > rest.len() {
            return None;
        }
        let range = self.pos..self.pos + header.total_len();
        self.pos = range.end;
        Some((header, range))
    }
}

impl std::iter::FusedIterator for BatchIter<'_> {}

/// Length of the batch starting `rest`, once its header proves it is a whole v2 batch.
fn next_batch_len(rest: &[u8]) -> Result<usize, BatchError> {
    if let Some(&magic) = rest.get(MAGIC_OFFSET) {
        check_magic(magic as i8)?;
    }
    let header = BatchHeader::parse(rest)?;
    // Framing only: the caller's check decides whether a compacted batch is acceptable.
    header.validate_stored_fields()?;
    let len = header.total_len();
    if len > rest.len() {
        return Err(BatchError::Truncated {
            needed: len,
            available: rest.len(),
        });
    }
    Ok(len)
}

/// Refuses a record count that `section_bytes` of (uncompressed) records cannot hold. A negative
/// count is refused by [`BatchHeader::validate_fields`], and counts as zero here.
pub(crate) fn check_records_fit(records_count: i32, section_bytes: usize) -> Result<(), BatchError> {
    let needed = usize::try_from(records_count)
        .unwrap_or(0)
        .saturating_mul(MIN_RECORD_BYTES);
    if needed > section_bytes {
        return Err(BatchError::RecordCountExceedsBytes {
            records_count,
            section_bytes,
        });
    }
    Ok(())
}

fn check_magic(magic: i8) -> Result<(), BatchError> {
    match magic {
        MAGIC_V2 => Ok(()),
        0 | 1 => Err(BatchError::UnsupportedMagic { magic }),
        _ => Err(BatchError::InvalidMagic { magic }),
    }
}

fn header_bytes(buf: &[u8]) -> Result<&[u8; BATCH_HEADER_LEN], BatchError> {
    buf.get(..BATCH_HEADER_LEN)
        .and_then(|h| h.try_into().ok())
        .ok_or(BatchError::Truncated {
            needed: BATCH_HEADER_LEN,
            available: buf.len(),
        })
}

fn write_field(batch: &mut [u8], at: usize, bytes: &[u8]) -> Result<(), BatchError> {
    let available = batch.len();
    if available < BATCH_HEADER_LEN {
        return Err(BatchError::Truncated {
            needed: BATCH_HEADER_LEN,
            available,
        });
    }
    batch
        .get_mut(at..at + bytes.len())
        .ok_or(BatchError::Truncated {
            needed: BATCH_HEADER_LEN,
            available,
        })?
        .copy_from_slice(bytes);
    Ok(())
}

// Field offsets are constants inside the 61-byte array, so these reads cannot go out of bounds.
fn read_bytes<const N: usize>(header: &[u8; BATCH_HEADER_LEN], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&header[at..at + N]);
    out
}

fn read_i16(header: &[u8; BATCH_HEADER_LEN], at: usize) -> i16 {
    i16::from_be_bytes(read_bytes(header, at))
}

fn read_i32(header: &[u8; BATCH_HEADER_LEN], at: usize) -> i32 {
    i32::from_be_bytes(read_bytes(header, at))
}

fn read_i64(header: &[u8; BATCH_HEADER_LEN], at: usize) -> i64 {
    i64::from_be_bytes(read_bytes(header, at))
}

/// Builds real v2 batches by hand, for tests and benchmarks in this and other crates (Cargo
/// features cannot gate it without manifest changes). Not for production paths: it allocates
/// per record.
pub mod test_support {
    use super::*;

    /// One uncompressed record to encode. `timestamp_delta_ms` is relative to the batch's base
    /// timestamp.
    #[derive(Debug, Clone, Copy)]
    pub struct TestRecord<'a> {
        pub key: Option<&'a [u8]>,
        pub value: Option<&'a [u8]>,
        pub timestamp_delta_ms: i64,
    }

    /// Encodes a v2 batch as a producer would (producer id, epoch, sequence and leader epoch -1,
    /// CreateTime, no compression), with a correct CRC. Record `i` gets offset delta `i`.
    /// An empty `records` yields a zero-record batch with lastOffsetDelta 0.
    pub fn encode_batch(base_offset: i64, base_timestamp_ms: i64, records: &[TestRecord<'_>]) -> Vec<u8> {
        let mut body = Vec::new();
        for (i, record) in records.iter().enumerate() {
            encode_record(&mut body, i as i32, record);
        }
        let max_delta = records.iter().map(|r| r.timestamp_delta_ms).max().unwrap_or(0);
        let last_offset_delta = records.len().saturating_sub(1) as i32;
        let batch_length = (BATCH_HEADER_LEN - LOG_OVERHEAD + body.len()) as i32;

        let mut batch = Vec::with_capacity(BATCH_HEADER_LEN + body.len());
        batch.extend_from_slice(&base_offset.to_be_bytes());
        batch.extend_from_slice(&batch_length.to_be_bytes());
        batch.extend_from_slice(&NO_PARTITION_LEADER_EPOCH.to_be_bytes());
        batch.push(MAGIC_V2 as u8);
        batch.extend_from_slice(&0u32.to_be_bytes()); // CRC, filled below
        batch.extend_from_slice(&0i16.to_be_bytes()); // attributes
        batch.extend_from_slice(&last_offset_delta.to_be_bytes());
        batch.extend_from_slice(&base_timestamp_ms.to_be_bytes());
        batch.extend_from_slice(&(base_timestamp_ms + max_delta).to_be_bytes());
        batch.extend_from_slice(&(-1i64).to_be_bytes()); // producerId
        batch.extend_from_slice(&(-1i16).to_be_bytes()); // producerEpoch
        batch.extend_from_slice(&(-1i32).to_be_bytes()); // baseSequence
        batch.extend_from_slice(&(records.len() as i32).to_be_bytes());
        batch.extend_from_slice(&body);
        let crc = crc32c::crc32c(&batch[CRC_COVERED_FROM..]);
        batch[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
        batch
    }

    /// `template`'s header over a new records section: `section` as stored (compressed with
    /// `codec`, or not), `records_count` records spanning offset deltas `0..records_count`,
    /// with the batch length and CRC made to match. For hostile batches that are otherwise valid.
    pub fn with_records_section(template: &[u8], codec: u8, section: &[u8], records_count: i32) -> Vec<u8> {
        let mut batch = template[..BATCH_HEADER_LEN].to_vec();
        batch.extend_from_slice(section);
        let batch_length = (batch.len() - LOG_OVERHEAD) as i32;
        batch[BATCH_LENGTH_OFFSET..BATCH_LENGTH_OFFSET + 4].copy_from_slice(&batch_length.to_be_bytes());
        let attributes = (read_i16(header_bytes(&batch).expect("61-byte header"), ATTRIBUTES_OFFSET)
            & !COMPRESSION_CODEC_MASK)
            | i16::from(codec);
        batch[ATTRIBUTES_OFFSET..ATTRIBUTES_OFFSET + 2].copy_from_slice(&attributes.to_be_bytes());
        let last_offset_delta = (records_count - 1).max(0);
        batch[LAST_OFFSET_DELTA_OFFSET..LAST_OFFSET_DELTA_OFFSET + 4].copy_from_slice(&last_offset_delta.to_be_bytes());
        batch[RECORDS_COUNT_OFFSET..RECORDS_COUNT_OFFSET + 4].copy_from_slice(&records_count.to_be_bytes());
        let crc = crc32c::crc32c(&batch[CRC_COVERED_FROM..]);
        batch[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
        batch
    }

    /// A batch of `record_count` keyless records with `value_len`-byte values, record `i`
    /// timestamped `base_timestamp_ms + i`.
    pub fn encode_simple_batch(record_count: usize, value_len: usize, base_timestamp_ms: i64) -> Vec<u8> {
        let value = vec![b'v'; value_len];
        let records: Vec<TestRecord<'_>> = (0..record_count)
            .map(|i| TestRecord {
                key: None,
                value: Some(&value),
                timestamp_delta_ms: i as i64,
            })
            .collect();
        encode_batch(0, base_timestamp_ms, &records)
    }

    fn encode_record(out: &mut Vec<u8>, offset_delta: i32, record: &TestRecord<'_>) {
        let mut body = Vec::new();
        body.push(0); // attributes
        put_varlong(&mut body, record.timestamp_delta_ms);
        put_varlong(&mut body, i64::from(offset_delta));
        put_bytes(&mut body, record.key);
        put_bytes(&mut body, record.value);
        put_varlong(&mut body, 0); // headers count
        put_varlong(out, body.len() as i64);
        out.extend_from_slice(&body);
    }

    fn put_bytes(out: &mut Vec<u8>, bytes: Option<&[u8]>) {
        match bytes {
            Some(b) => {
                put_varlong(out, b.len() as i64);
                out.extend_from_slice(b);
            }
            None => put_varlong(out, -1),
        }
    }

    /// Zigzag varint, as Kafka encodes record fields (varint and varlong agree on i32 values).
    fn put_varlong(out: &mut Vec<u8>, value: i64) {
        let mut zigzag = ((value << 1) ^ (value >> 63)) as u64;
        while zigzag >= 0x80 {
            out.push((zigzag as u8) | 0x80);
            zigzag >>= 7;
        }
        out.push(zigzag as u8);
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::{encode_batch, encode_simple_batch, TestRecord};
    use super::*;

    fn two_record_batch() -> Vec<u8> {
        let records = [
            TestRecord {
                key: Some(b"k1"),
                value: Some(b"hello"),
                timestamp_delta_ms: 0,
            },
            TestRecord {
                key: None,
                value: Some(b"world"),
                timestamp_delta_ms: 7,
            },
        ];
        encode_batch(0, 1_700_000_000_000, &records)
    }

    #[test]
    fn a_compacted_batch_passes_stored_validation_only() {
        // Compaction keeps lastOffsetDelta but drops records: 1 record spanning 2 offsets.
        let mut batch = two_record_batch();
        batch[RECORDS_COUNT_OFFSET..RECORDS_COUNT_OFFSET + 4].copy_from_slice(&1i32.to_be_bytes());
        let crc = crc32c::crc32c(&batch[CRC_COVERED_FROM..]);
        batch[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
        assert!(matches!(
            validate_batch(&batch),
            Err(BatchError::InvalidRecordCount { .. })
        ));
        assert_eq!(validate_stored_batch(&batch).unwrap().records_count, 1);
        assert_eq!(
            validate_stored_batches(&batch).unwrap().record_count,
            2,
            "offsets spanned"
        );
        // More records than offsets is never valid.
        batch[RECORDS_COUNT_OFFSET..RECORDS_COUNT_OFFSET + 4].copy_from_slice(&3i32.to_be_bytes());
        let crc = crc32c::crc32c(&batch[CRC_COVERED_FROM..]);
        batch[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
        assert!(validate_stored_batch(&batch).is_err());
    }

    #[test]
    fn parse_reads_every_header_field() {
        let batch = two_record_batch();
        let header = BatchHeader::parse(&batch).unwrap();
        assert_eq!(header.base_offset, 0);
        assert_eq!(header.total_len(), batch.len());
        assert_eq!(header.partition_leader_epoch, NO_PARTITION_LEADER_EPOCH);
        assert_eq!(header.magic, 2);
        assert_eq!(header.attributes, 0);
        assert_eq!(header.last_offset_delta, 1);
        assert_eq!(header.base_timestamp, 1_700_000_000_000);
        assert_eq!(header.max_timestamp, 1_700_000_000_007);
        assert_eq!(
            (header.producer_id, header.producer_epoch, header.base_sequence),
            (-1, -1, -1)
        );
        assert_eq!(header.records_count, 2);
        assert_eq!(header.last_offset(), 1);
        assert_eq!(header.compression(), 0);
        assert!(!header.timestamp_type_is_log_append());
        assert!(!header.is_transactional());
        assert!(!header.is_control());
    }

    #[test]
    fn attribute_bits_decode() {
        let mut batch = two_record_batch();
        batch[ATTRIBUTES_OFFSET..ATTRIBUTES_OFFSET + 2].copy_from_slice(&0x003Bi16.to_be_bytes());
        let header = BatchHeader::parse(&batch).unwrap();
        assert_eq!(header.compression(), 3);
        assert!(header.timestamp_type_is_log_append());
        assert!(header.is_transactional());
        assert!(header.is_control());
    }

    #[test]
    fn parse_refuses_fewer_than_61_bytes() {
        let batch = two_record_batch();
        assert_eq!(
            BatchHeader::parse(&batch[..60]),
            Err(BatchError::Truncated {
                needed: 61,
                available: 60
            })
        );
    }

    #[test]
    fn validate_accepts_a_producer_batch() {
        let batch = two_record_batch();
        let header = validate_batch(&batch).unwrap();
        assert_eq!(header.records_count, 2);
        assert!(
            validate_batch(&encode_batch(0, 5, &[])).is_ok(),
            "an empty batch is legal"
        );
    }

    #[test]
    fn validate_detects_any_flipped_byte_under_the_crc() {
        let batch = two_record_batch();
        for i in CRC_COVERED_FROM..batch.len() {
            let mut corrupt = batch.clone();
            corrupt[i] ^= 0x40;
            let err = validate_batch(&corrupt).unwrap_err();
            assert_eq!(err.response_error(), ResponseError::CorruptMessage, "byte {i}: {err}");
        }
        let mut corrupt = batch.clone();
        *corrupt.last_mut().unwrap() ^= 1;
        assert!(matches!(validate_batch(&corrupt), Err(BatchError::CrcMismatch { .. })));
    }

    #[test]
    fn validate_refuses_truncated_and_overlong_slices() {
        let batch = two_record_batch();
        for len in 0..batch.len() {
            assert!(validate_batch(&batch[..len]).is_err(), "len {len}");
        }
        let mut longer = batch.clone();
        longer.push(0);
        assert_eq!(
            validate_batch(&longer),
            Err(BatchError::LengthMismatch {
                declared: batch.len(),
                actual: batch.len() + 1
            })
        );
    }

    #[test]
    fn old_message_format_maps_to_unsupported_for_message_format() {
        let mut batch = two_record_batch();
        batch[MAGIC_OFFSET] = 1;
        let err = validate_batch(&batch).unwrap_err();
        assert_eq!(err, BatchError::UnsupportedMagic { magic: 1 });
        assert_eq!(err.response_error(), ResponseError::UnsupportedForMessageFormat);
        // A short v0 message is still recognised by its magic byte.
        assert_eq!(
            validate_batch(&batch[..30]),
            Err(BatchError::UnsupportedMagic { magic: 1 })
        );
        batch[MAGIC_OFFSET] = 7;
        assert_eq!(validate_batch(&batch).unwrap_err().response_error(), ResponseError::CorruptMessage);
    }

    #[test]
    fn validate_checks_record_count_against_last_offset_delta() {
        let mut batch = two_record_batch();
        batch[RECORDS_COUNT_OFFSET..RECORDS_COUNT_OFFSET + 4].copy_from_slice(&3i32.to_be_bytes());
        recompute_crc(&mut batch);
        assert!(matches!(
            validate_batch(&batch),
            Err(BatchError::InvalidRecordCount { .. })
        ));
    }

    #[test]
    fn an_uncompressed_record_count_its_bytes_cannot_hold_is_corrupt() {
        // 2 records take 7 + 7 bytes at least; claim 1000 over the same bytes.
        let mut batch = two_record_batch();
        let section_bytes = batch.len() - BATCH_HEADER_LEN;
        batch[RECORDS_COUNT_OFFSET..RECORDS_COUNT_OFFSET + 4].copy_from_slice(&1000i32.to_be_bytes());
        batch[LAST_OFFSET_DELTA_OFFSET..LAST_OFFSET_DELTA_OFFSET + 4].copy_from_slice(&999i32.to_be_bytes());
        recompute_crc(&mut batch);
        let err = validate_batch(&batch).unwrap_err();
        assert_eq!(
            err,
            BatchError::RecordCountExceedsBytes {
                records_count: 1000,
                section_bytes
            }
        );
        assert_eq!(err.response_error(), ResponseError::CorruptMessage);
        assert_eq!(validate_stored_batch(&batch), Err(err));
        // The header-only check (crash recovery) leaves stored bytes to the record decoder.
        assert!(BatchHeader::parse(&batch).unwrap().validate_fields().is_ok());

        // A count the bytes could hold passes here; the record walk (records.rs) catches it.
        let mut batch = two_record_batch();
        let fits = (section_bytes / MIN_RECORD_BYTES) as i32;
        batch[RECORDS_COUNT_OFFSET..RECORDS_COUNT_OFFSET + 4].copy_from_slice(&fits.to_be_bytes());
        batch[LAST_OFFSET_DELTA_OFFSET..LAST_OFFSET_DELTA_OFFSET + 4].copy_from_slice(&(fits - 1).to_be_bytes());
        recompute_crc(&mut batch);
        assert!(validate_batch(&batch).is_ok());
    }

    #[test]
    fn a_compressed_batch_needs_a_non_negative_consistent_record_count() {
        let mut batch = two_record_batch();
        batch[ATTRIBUTES_OFFSET + 1] = 4; // zstd: its count is checked once decompressed
        batch[RECORDS_COUNT_OFFSET..RECORDS_COUNT_OFFSET + 4].copy_from_slice(&1000i32.to_be_bytes());
        batch[LAST_OFFSET_DELTA_OFFSET..LAST_OFFSET_DELTA_OFFSET + 4].copy_from_slice(&999i32.to_be_bytes());
        recompute_crc(&mut batch);
        assert!(validate_batch(&batch).is_ok());
        for (count, last_offset_delta) in [(-1, 999), (-5, -6), (1000, 5)] {
            batch[RECORDS_COUNT_OFFSET..RECORDS_COUNT_OFFSET + 4].copy_from_slice(&i32::to_be_bytes(count));
            batch[LAST_OFFSET_DELTA_OFFSET..LAST_OFFSET_DELTA_OFFSET + 4]
                .copy_from_slice(&i32::to_be_bytes(last_offset_delta));
            recompute_crc(&mut batch);
            assert!(
                matches!(validate_batch(&batch), Err(BatchError::InvalidRecordCount { .. })),
                "count {count}, lastOffsetDelta {last_offset_delta}"
            );
        }
    }

    #[test]
    fn validate_refuses_unknown_codec_and_short_length() {
        let mut batch = two_record_batch();
        batch[ATTRIBUTES_OFFSET + 1] = 5;
        recompute_crc(&mut batch);
        assert_eq!(validate_batch(&batch), Err(BatchError::UnknownCompression { codec: 5 }));

        let mut batch = two_record_batch();
        batch[BATCH_LENGTH_OFFSET..BATCH_LENGTH_OFFSET + 4].copy_from_slice(&48i32.to_be_bytes());
        assert_eq!(
            validate_batch(&batch),
            Err(BatchError::InvalidBatchLength { batch_length: 48 })
        );
    }

    #[test]
    fn validate_batches_sums_back_to_back_batches() {
        let mut blob = encode_simple_batch(3, 10, 1_000);
        let second = encode_simple_batch(5, 100, 900);
        blob.extend_from_slice(&second);
        let info = validate_batches(&blob).unwrap();
        assert_eq!(info.batch_count, 2);
        assert_eq!(info.record_count, 8);
        assert_eq!(info.first_timestamp, 1_000);
        assert_eq!(info.max_timestamp, 1_002);
        assert_eq!(info.offset_delta_of_max_timestamp, 2);
        assert_eq!(info.total_bytes, blob.len());
        assert_eq!(info.max_batch_bytes, second.len());
    }

    #[test]
    fn validate_batches_requires_a_whole_last_batch_and_at_least_one() {
        let mut blob = encode_simple_batch(3, 10, 1_000);
        blob.extend_from_slice(&encode_simple_batch(1, 10, 1_000));
        assert!(matches!(
            validate_batches(&blob[..blob.len() - 1]),
            Err(BatchError::Truncated { .. })
        ));
        assert!(validate_batches(&blob[..blob.len() - 30]).is_err());
        assert_eq!(validate_batches(&[]), Err(BatchError::NoBatches));
    }

    #[test]
    fn inspect_batches_checks_headers_but_not_the_crc() {
        let mut blob = encode_simple_batch(3, 10, 1_000);
        *blob.last_mut().unwrap() ^= 1;
        assert!(matches!(validate_batches(&blob), Err(BatchError::CrcMismatch { .. })));
        assert_eq!(inspect_batches(&blob).unwrap().record_count, 3);
        blob[MAGIC_OFFSET] = 1;
        assert_eq!(inspect_batches(&blob), Err(BatchError::UnsupportedMagic { magic: 1 }));
    }

    #[test]
    fn patching_base_offset_and_leader_epoch_keeps_the_crc_valid() {
        let mut batch = two_record_batch();
        set_base_offset(&mut batch, 1_234_567).unwrap();
        set_partition_leader_epoch(&mut batch, 42).unwrap();
        let header = validate_batch(&batch).unwrap();
        assert_eq!(header.base_offset, 1_234_567);
        assert_eq!(header.last_offset(), 1_234_568);
        assert_eq!(header.partition_leader_epoch, 42);
        assert!(set_base_offset(&mut batch[..60], 1).is_err());
    }

    #[test]
    fn set_log_append_time_stamps_and_recomputes_the_crc() {
        let mut batch = two_record_batch();
        set_log_append_time(&mut batch, 1_800_000_000_000).unwrap();
        let header = validate_batch(&batch).unwrap();
        assert!(header.timestamp_type_is_log_append());
        assert_eq!(header.max_timestamp, 1_800_000_000_000);
        assert_eq!(header.base_timestamp, 1_700_000_000_000, "Kafka leaves baseTimestamp");
        let len = batch.len();
        assert!(set_log_append_time(&mut batch[..len - 1], 1).is_err());
    }

    #[test]
    fn batch_iter_stops_at_a_torn_tail() {
        let first = encode_simple_batch(2, 10, 1);
        let second = encode_simple_batch(3, 10, 2);
        let mut buf = first.clone();
        buf.extend_from_slice(&second);
        let whole: Vec<_> = BatchIter::new(&buf).map(|(h, r)| (h.records_count, r)).collect();
        assert_eq!(whole, vec![(2, 0..first.len()), (3, first.len()..buf.len())]);

        for cut in first.len()..buf.len() {
            let mut iter = BatchIter::new(&buf[..cut]);
            assert_eq!(iter.next().map(|(_, r)| r), Some(0..first.len()));
            assert_eq!(iter.next(), None, "cut at {cut}");
            assert_eq!(iter.next(), None);
            assert_eq!(iter.position(), first.len());
            assert_eq!(iter.at_end(), cut == first.len());
        }
    }

    #[test]
    fn batch_iter_stops_at_an_impossible_length() {
        let mut buf = encode_simple_batch(2, 10, 1);
        buf[BATCH_LENGTH_OFFSET..BATCH_LENGTH_OFFSET + 4].copy_from_slice(&(-5i32).to_be_bytes());
        assert_eq!(BatchIter::new(&buf).next(), None);
    }

    #[test]
    fn no_input_makes_validation_panic() {
        // Every prefix and every single-byte mutation of a valid blob, through every entry point.
        let mut blob = encode_simple_batch(3, 20, 1);
        blob.extend_from_slice(&encode_simple_batch(1, 0, 1));
        for len in 0..=blob.len() {
            let _ = validate_batches(&blob[..len]);
            let _ = BatchIter::new(&blob[..len]).count();
        }
        for i in 0..blob.len() {
            for bit in [0x01, 0x80] {
                let mut mutated = blob.clone();
                mutated[i] ^= bit;
                let _ = validate_batches(&mutated);
                let _ = BatchIter::new(&mutated).count();
                let _ = set_log_append_time(&mut mutated, 5);
            }
        }
    }

    fn recompute_crc(batch: &mut [u8]) {
        let crc = crc32c::crc32c(&batch[CRC_COVERED_FROM..]);
        batch[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
    }
}

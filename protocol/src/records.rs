//! The records inside a v2 batch, for the few features that must look at them: the keyless-record
//! check on compacted topics, naming the records whose timestamps are out of range, log
//! compaction, loading groups from `__consumer_offsets` and transactional ids from
//! `__transaction_state`, a ListOffsets timestamp lookup (the one batch holding the target), and
//! recompression to a topic's `compression.type` (writing is in [`rewrite`]). Produce and fetch
//! otherwise never decode records (see [`crate::batch`]).
//!
//! The bytes come from producers or from the disk, so nothing here trusts them:
//!
//! - Decompression streams into a buffer that never grows past the caller's limit (the topic's
//!   `max.message.bytes`) and stops with [`BatchError::RecordsTooLarge`]
//!   (`RECORD_LIST_TOO_LARGE`) as soon as the output would pass it. A size the sender wrote
//!   (snappy's length preamble, zstd's frame content size, the record count) never decides an
//!   allocation beyond that limit. Besides the output, a decoder holds at most a codec-defined
//!   constant: flate2's 32 KiB input buffer, lz4's largest frame block (4 MiB), zstd's context.
//! - The record walk is zero-copy and checks every varint and length against the bytes present,
//!   the record count against the section size (a record takes at least
//!   [`crate::batch::MIN_RECORD_BYTES`]) and that exactly `recordsCount` records fill the section.
//!
//! Every failure is a [`BatchError`]: `CORRUPT_MESSAGE` for garbled data, `RECORD_LIST_TOO_LARGE`
//! for output over the limit.

use std::borrow::Cow;
use std::io::Read;

use bytes::Bytes;
use kafka_protocol::records::{Record, TimestampType};

use crate::batch::{check_records_fit, BatchError, BatchHeader, BATCH_HEADER_LEN};

mod rewrite;
pub use rewrite::{rebuild_batch, recompress_batch, Compressor, LZ4_DEFAULT_LEVEL, ZSTD_DEFAULT_LEVEL};

/// Compression codec ids, as in a batch's attributes (bits 0-2).
pub const CODEC_NONE: u8 = 0;
pub const CODEC_GZIP: u8 = 1;
pub const CODEC_SNAPPY: u8 = 2;
pub const CODEC_LZ4: u8 = 3;
pub const CODEC_ZSTD: u8 = 4;

/// What snappy-java's `SnappyOutputStream` (Kafka's Java client) writes first: magic, version 1,
/// compatible version 1. Blocks follow, each a big-endian u32 length and a raw snappy block.
/// Anything else is read as one raw snappy block, as snappy-java and kafka-protocol do.
const XERIAL_SNAPPY_HEADER: &[u8; 16] = b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01";
/// The most output a raw snappy block can hold per input byte: its densest element is a 3-byte
/// copy of 64 bytes (21.3x), so a length preamble claiming more than this is a lie.
const SNAPPY_MAX_EXPANSION: usize = 22;
/// gzip and lz4 output is read through a buffer of this size.
const READ_CHUNK_BYTES: usize = 16 * 1024;
/// zstd decodes in one call into a buffer that must hold the whole output; the first try gets
/// this much (or the limit, if smaller) and each retry twice as much, up to the limit.
const ZSTD_FIRST_OUTPUT_BYTES: usize = 64 * 1024;

/// Kafka's name for a codec id, for messages.
pub fn codec_name(codec: u8) -> &'static str {
    match codec {
        CODEC_NONE => "uncompressed",
        CODEC_GZIP => "gzip",
        CODEC_SNAPPY => "snappy",
        CODEC_LZ4 => "lz4",
        CODEC_ZSTD => "zstd",
        _ => "unknown-codec",
    }
}

/// The codec id Kafka's `compression.type` value `name` names (`uncompressed`, `gzip`,
/// `snappy`, `lz4`, `zstd`); `None` for `producer` or anything else.
pub fn codec_by_name(name: &str) -> Option<u8> {
    (CODEC_NONE..=CODEC_ZSTD).find(|&codec| codec_name(codec) == name)
}

/// Decompresses a records section written with `codec` into at most `max_bytes` bytes.
/// [`CODEC_NONE`] copies `compressed` (refused, like any codec, if longer than `max_bytes`).
pub fn decompress(codec: u8, compressed: &[u8], max_bytes: usize) -> Result<Vec<u8>, BatchError> {
    let result = match codec {
        // Every compressor writes at least a header, and an empty zstd input would pass as no frames.
        CODEC_GZIP..=CODEC_ZSTD if compressed.is_empty() => Err(corrupt("the compressed records are empty")),
        CODEC_NONE if compressed.len() > max_bytes => Err(Failure::TooLarge),
        CODEC_NONE => Ok(compressed.to_vec()),
        CODEC_GZIP => read_bounded(flate2::read::MultiGzDecoder::new(compressed), max_bytes),
        CODEC_SNAPPY => decompress_snappy(compressed, max_bytes),
        CODEC_LZ4 => decompress_lz4(compressed, max_bytes),
        CODEC_ZSTD => decompress_zstd(compressed, max_bytes),
        codec => return Err(BatchError::UnknownCompression { codec }),
    };
    result.map_err(|failure| match failure {
        Failure::TooLarge => BatchError::RecordsTooLarge {
            codec: codec_name(codec),
            max_bytes,
        },
        Failure::Corrupt(reason) => BatchError::Decompression {
            codec: codec_name(codec),
            reason,
        },
    })
}

/// A record as a plain (not idempotent, not transactional) producer writes it, for
/// kafka-protocol's `RecordBatchEncoder`: records `0..n` made by this stay in one batch (their
/// offset - sequence is constant, so the base sequence is -1). Offsets are assigned on append.
pub fn producer_record(offset: i64, timestamp_ms: i64, key: Option<Bytes>, value: Option<Bytes>) -> Record {
    Record {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: -1,
        producer_id: -1,
        producer_epoch: -1,
        timestamp_type: TimestampType::Creation,
        offset,
        sequence: (offset as i32).wrapping_sub(1),
        timestamp: timestamp_ms,
        key,
        value,
        headers: Default::default(),
    }
}

/// One record of a v2 batch, borrowed from its (decompressed) records section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordView<'a> {
    /// The whole encoded record, length prefix included: what a rebuilt batch copies.
    pub bytes: &'a [u8],
    pub attributes: i8,
    pub timestamp_delta: i64,
    /// Within `0..=lastOffsetDelta` of the batch.
    pub offset_delta: i32,
    pub key: Option<&'a [u8]>,
    /// `None` is a tombstone.
    pub value: Option<&'a [u8]>,
    pub header_count: usize,
    /// The encoded headers after their count; every key and value in it was bounds-checked.
    pub headers: &'a [u8],
}

impl<'a> RecordView<'a> {
    /// The record's headers in order, as key and value (`None`: a null value). The walk that
    /// made this view checked every one, so iteration cannot fail.
    pub fn header_pairs(&self) -> impl Iterator<Item = (&'a [u8], Option<&'a [u8]>)> + 'a {
        let mut reader = Reader::at(self.headers, 0);
        (0..self.header_count).map_while(move |_| {
            let key = reader.nullable_bytes()??;
            let value = reader.nullable_bytes()?;
            Some((key, value))
        })
    }
}

/// The checked records of one batch: decompressed (if needed) within a limit and walked once, so
/// [`BatchRecords::iter`] yields every record and cannot fail.
#[derive(Debug)]
pub struct BatchRecords<'a> {
    header: BatchHeader,
    section: Cow<'a, [u8]>,
}

impl<'a> BatchRecords<'a> {
    /// Checks `batch` (exactly one v2 batch; header fields as for a stored batch, so a compacted
    /// batch's count below its offset range passes; the CRC is the caller's to check) and its
    /// records. A compressed section may decompress to at most `max_decompressed_bytes`; an
    /// uncompressed one is used in place.
    pub fn decode(batch: &'a [u8], max_decompressed_bytes: usize) -> Result<BatchRecords<'a>, BatchError> {
        let header = BatchHeader::parse(batch)?;
        header.validate_stored_fields()?;
        if header.total_len() != batch.len() {
            return Err(BatchError::LengthMismatch {
                declared: header.total_len(),
                actual: batch.len(),
            });
        }
        let stored = batch.get(BATCH_HEADER_LEN..).unwrap_or_default();
        let section = match header.compression() {
            CODEC_NONE => Cow::Borrowed(stored),
            codec => Cow::Owned(decompress(codec, stored, max_decompressed_bytes)?),
        };
        check_records_fit(header.records_count, section.len())?;
        let mut walk = RecordWalk::new(&section, &header);
        while walk.remaining > 0 {
            walk.next_record()?;
        }
        if walk.pos != section.len() {
            return Err(BatchError::TrailingRecordBytes {
                records_count: header.records_count,
                trailing: section.len() - walk.pos,
            });
        }
        Ok(BatchRecords { header, section })
    }

    pub fn header(&self) -> &BatchHeader {
        &self.header
    }

    /// The records section, decompressed.
    pub fn section(&self) -> &[u8] {
        &self.section
    }

    /// The batch's records in order (`recordsCount` of them).
    pub fn iter(&self) -> RecordIter<'_> {
        RecordIter {
            walk: RecordWalk::new(&self.section, &self.header),
        }
    }
}

/// Iterator over a [`BatchRecords`].
pub struct RecordIter<'a> {
    walk: RecordWalk<'a>,
}

impl<'a> Iterator for RecordIter<'a> {
    type Item = RecordView<'a>;

    fn next(&mut self) -> Option<RecordView<'a>> {
        if self.walk.remaining == 0 {
            return None;
        }
        // `BatchRecords::decode` walked these same bytes without error, so this never fails;
        // if it did, iteration would end rather than panic.
        self.walk.next_record().ok()
    }
}

/// The position of a walk over a records section.
struct RecordWalk<'a> {
    section: &'a [u8],
    pos: usize,
    index: usize,
    remaining: usize,
    last_offset_delta: i32,
}

impl<'a> RecordWalk<'a> {
    fn new(section: &'a [u8], header: &BatchHeader) -> RecordWalk<'a> {
        RecordWalk {
            section,
            pos: 0,
            index: 0,
            remaining: usize::try_from(header.records_count).unwrap_or(0),
            last_offset_delta: header.last_offset_delta,
        }
    }

    /// Kafka's `DefaultRecord` layout: length varint, then attributes int8, timestampDelta
    /// varlong, offsetDelta varint, key and value (varint length, -1 for null), header count
    /// varint and headers (key: varint length and bytes, never null; value: like a value).
    fn next_record(&mut self) -> Result<RecordView<'a>, BatchError> {
        let malformed = |reason| BatchError::MalformedRecord {
            index: self.index,
            reason,
        };
        let start = self.pos;
        let mut outer = Reader::at(self.section, start);
        let len = outer
            .varint()
            .ok_or_else(|| malformed("its length is not a valid varint"))?;
        let len = usize::try_from(len).map_err(|_| malformed("its length is negative"))?;
        let end = outer
            .pos
            .checked_add(len)
            .filter(|&end| end <= self.section.len())
            .ok_or_else(|| malformed("its length runs past the end of the records"))?;
        let mut body = Reader::at(&self.section[..end], outer.pos);
        let attributes = body.i8().ok_or_else(|| malformed("it ends before its attributes"))?;
        let timestamp_delta = body
            .varlong()
            .ok_or_else(|| malformed("its timestamp delta is not a valid varlong"))?;
        let offset_delta = body
            .varint()
            .ok_or_else(|| malformed("its offset delta is not a valid varint"))?;
        if !(0..=self.last_offset_delta).contains(&offset_delta) {
            return Err(malformed("its offset delta is outside the batch's offset range"));
        }
        let key = body
            .nullable_bytes()
            .ok_or_else(|| malformed("its key length is invalid or overruns the record"))?;
        let value = body
            .nullable_bytes()
            .ok_or_else(|| malformed("its value length is invalid or overruns the record"))?;
        let header_count = body
            .varint()
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| malformed("its header count is not a valid count"))?;
        let headers_start = body.pos;
        // Each header takes at least 2 bytes, so a lying count runs out of bytes quickly.
        for _ in 0..header_count {
            body.nullable_bytes()
                .flatten()
                .ok_or_else(|| malformed("a header key is null or overruns the record"))?;
            body.nullable_bytes()
                .ok_or_else(|| malformed("a header value overruns the record"))?;
        }
        if body.pos != end {
            return Err(malformed("its length does not match its fields"));
        }
        self.pos = end;
        self.index += 1;
        self.remaining -= 1;
        Ok(RecordView {
            bytes: &self.section[start..end],
            attributes,
            timestamp_delta,
            offset_delta,
            key,
            value,
            header_count,
            headers: &self.section[headers_start..end],
        })
    }
}

/// Bounds-checked reads of Kafka's record fields; `None` when the bytes run out or a varint is
/// longer than its type allows.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn at(buf: &'a [u8], pos: usize) -> Reader<'a> {
        Reader { buf, pos }
    }

    fn i8(&mut self) -> Option<i8> {
        let byte = *self.buf.get(self.pos)?;
        self.pos += 1;
        Some(byte as i8)
    }

    /// Kafka's zigzag varint: at most 5 bytes, and its value must fit 32 bits.
    fn varint(&mut self) -> Option<i32> {
        let raw = u32::try_from(self.unsigned_varint(5)?).ok()?;
        Some((raw >> 1) as i32 ^ -((raw & 1) as i32))
    }

    /// Kafka's zigzag varlong: at most 10 bytes.
    fn varlong(&mut self) -> Option<i64> {
        let raw = self.unsigned_varint(10)?;
        Some((raw >> 1) as i64 ^ -((raw & 1) as i64))
    }

    fn unsigned_varint(&mut self, max_len: usize) -> Option<u64> {
        let mut value = 0u64;
        for i in 0..max_len {
            let byte = self.i8()? as u8;
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }

    /// A varint length and that many bytes; length -1 is null, any other negative is invalid.
    fn nullable_bytes(&mut self) -> Option<Option<&'a [u8]>> {
        let len = self.varint()?;
        if len == -1 {
            return Some(None);
        }
        let end = self.pos.checked_add(usize::try_from(len).ok()?)?;
        let bytes = self.buf.get(self.pos..end)?;
        self.pos = end;
        Some(Some(bytes))
    }
}

/// Why decompression stopped.
enum Failure {
    /// The output would pass the limit.
    TooLarge,
    /// The decoder refused the input; the reason is the decoder's own words.
    Corrupt(String),
}

fn corrupt(reason: impl ToString) -> Failure {
    Failure::Corrupt(reason.to_string())
}

/// Reads `decoder` to its end into a buffer of at most `max_bytes`, stopping as soon as more
/// arrives.
fn read_bounded(mut decoder: impl Read, max_bytes: usize) -> Result<Vec<u8>, Failure> {
    let mut out = Vec::new();
    let mut chunk = [0u8; READ_CHUNK_BYTES];
    loop {
        let n = decoder.read(&mut chunk).map_err(corrupt)?;
        if n == 0 {
            return Ok(out);
        }
        let len = out.len() + n;
        if len > max_bytes {
            return Err(Failure::TooLarge);
        }
        reserve_within(&mut out, len, max_bytes);
        out.extend_from_slice(&chunk[..n]);
    }
}

/// Makes room in `out` for `len` bytes (`len <= max_bytes`), doubling as a `Vec` does but never
/// past `max_bytes`, so the buffer stays within the limit.
fn reserve_within(out: &mut Vec<u8>, len: usize, max_bytes: usize) {
    if len > out.capacity() {
        let target = out.capacity().saturating_mul(2).clamp(len, max_bytes.max(len));
        out.reserve_exact(target - out.len());
    }
}

/// Kafka's lz4 codec is the LZ4 frame format (one frame; bytes after it are ignored, as Kafka's
/// `KafkaLZ4BlockInputStream` does).
fn decompress_lz4(compressed: &[u8], max_bytes: usize) -> Result<Vec<u8>, Failure> {
    let mut decoder = lz4::Decoder::new(compressed).map_err(corrupt)?;
    let out = read_bounded(&mut decoder, max_bytes)?;
    // The decoder reports a frame cut short as a clean end; only `finish` tells.
    decoder
        .finish()
        .1
        .map_err(|_| corrupt("the lz4 frame ends before its end mark"))?;
    Ok(out)
}

fn decompress_snappy(compressed: &[u8], max_bytes: usize) -> Result<Vec<u8>, Failure> {
    let mut out = Vec::new();
    let Some(mut blocks) = compressed.strip_prefix(XERIAL_SNAPPY_HEADER) else {
        snappy_block(compressed, max_bytes, &mut out)?;
        return Ok(out);
    };
    while !blocks.is_empty() {
        let (len, rest) = blocks
            .split_first_chunk::<4>()
            .ok_or_else(|| corrupt("a block length is cut short"))?;
        let len = u32::from_be_bytes(*len) as usize;
        let block = rest.get(..len).ok_or_else(|| corrupt("a block is cut short"))?;
        snappy_block(block, max_bytes, &mut out)?;
        blocks = &rest[len..];
    }
    Ok(out)
}

/// Appends one raw snappy block to `out`. Its length preamble sizes the output only after it is
/// checked against the limit and against what the block's bytes can possibly hold.
fn snappy_block(block: &[u8], max_bytes: usize, out: &mut Vec<u8>) -> Result<(), Failure> {
    if block.is_empty() {
        return Err(corrupt("a block is empty"));
    }
    let claimed = snap::raw::decompress_len(block).map_err(corrupt)?;
    let start = out.len();
    if claimed > max_bytes - start {
        return Err(Failure::TooLarge);
    }
    if claimed > block.len().saturating_mul(SNAPPY_MAX_EXPANSION) {
        return Err(corrupt("a block's length preamble claims more than the block can hold"));
    }
    reserve_within(out, start + claimed, max_bytes);
    out.resize(start + claimed, 0);
    // Fails unless the block fills exactly the length it claimed.
    snap::raw::Decoder::new()
        .decompress(block, &mut out[start..])
        .map_err(corrupt)?;
    Ok(())
}

/// zstd in one call per try into a buffer of fixed capacity: the decoder writes straight into it
/// (no window buffer sized by the frame header) and fails when it is full. A full buffer below
/// the limit is doubled and the frame decoded again, so the work stays within twice the limit.
fn decompress_zstd(compressed: &[u8], max_bytes: usize) -> Result<Vec<u8>, Failure> {
    use zstd::zstd_safe::{get_error_name, zstd_sys::ZSTD_ErrorCode, DCtx};
    // zstd returns error `e` as the size_t `-e`.
    let destination_full =
        |code: usize| 0usize.wrapping_sub(code) == ZSTD_ErrorCode::ZSTD_error_dstSize_tooSmall as usize;
    let mut context = DCtx::try_create().ok_or_else(|| corrupt("no memory for a zstd decoder"))?;
    let mut capacity = ZSTD_FIRST_OUTPUT_BYTES.min(max_bytes);
    loop {
        let mut out = Vec::with_capacity(capacity);
        match context.decompress(&mut out, compressed) {
            Ok(_) if out.len() > max_bytes => return Err(Failure::TooLarge),
            Ok(_) => return Ok(out),
            Err(code) if destination_full(code) && capacity >= max_bytes => return Err(Failure::TooLarge),
            Err(code) if destination_full(code) => capacity = capacity.saturating_mul(2).min(max_bytes),
            Err(code) => return Err(corrupt(get_error_name(code))),
        }
    }
}

#[cfg(test)]
mod tests;

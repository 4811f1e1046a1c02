//! Real batches come from kafka-protocol's `RecordBatchEncoder` (the encoder Kafka clients in
//! Rust use), hostile ones are built from them by hand. Allocation is measured by a counting
//! allocator: what this crate and its Rust decoders allocate on the test's thread.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use bytes::{Bytes, BytesMut};
use kafka_protocol::error::ResponseError;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions};

use super::*;
use crate::batch::test_support::{encode_batch, with_records_section, TestRecord};
use crate::batch::{
    validate_batch, BatchIter, MIN_RECORD_BYTES, RECORDS_COUNT_OFFSET,
};

pub(super) const CODECS: [(Compression, u8); 4] = [
    (Compression::Gzip, CODEC_GZIP),
    (Compression::Snappy, CODEC_SNAPPY),
    (Compression::Lz4, CODEC_LZ4),
    (Compression::Zstd, CODEC_ZSTD),
];

/// A limit far above anything these tests decompress legitimately.
const GENEROUS_LIMIT: usize = 16 * 1024 * 1024;

// ---- a counting allocator: live and peak bytes per thread ----

struct CountingAllocator;

thread_local! {
    static LIVE_BYTES: Cell<usize> = const { Cell::new(0) };
    static PEAK_BYTES: Cell<usize> = const { Cell::new(0) };
}

fn note_alloc(size: usize) {
    let _ = LIVE_BYTES.try_with(|live| {
        live.set(live.get() + size);
        let _ = PEAK_BYTES.try_with(|peak| peak.set(peak.get().max(live.get())));
    });
}

fn note_free(size: usize) {
    let _ = LIVE_BYTES.try_with(|live| live.set(live.get().saturating_sub(size)));
}

// SAFETY: every call is passed to the system allocator unchanged; the bookkeeping only touches
// const-initialised thread-locals, which never allocate.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            note_alloc(layout.size());
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            note_alloc(layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        note_free(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            note_free(layout.size());
            note_alloc(new_size);
        }
        new
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// Runs `f` and returns its result with the most bytes it held allocated at once on this thread.
fn peak_allocation<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = LIVE_BYTES.with(Cell::get);
    PEAK_BYTES.with(|peak| peak.set(base));
    let result = f();
    let peak = PEAK_BYTES.with(Cell::get);
    (result, peak - base)
}

// ---- batches ----

fn record(offset: i64, key: Option<&[u8]>, value: Option<&[u8]>, headers: &[(&str, Option<&[u8]>)]) -> Record {
    let mut record = producer_record(
        offset,
        1_700_000_000_000 + offset * 3,
        key.map(Bytes::copy_from_slice),
        value.map(Bytes::copy_from_slice),
    );
    for (name, value) in headers {
        record.headers.insert(
            StrBytes::from_string(name.to_string()),
            value.map(Bytes::copy_from_slice),
        );
    }
    record
}

/// One v2 batch of `records` as kafka-protocol encodes it.
fn encode(compression: Compression, records: &[Record]) -> Vec<u8> {
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression,
    };
    RecordBatchEncoder::encode(&mut buf, records.iter(), &options).expect("encodable records");
    assert_eq!(BatchIter::new(&buf).count(), 1, "the encoder wrote one batch");
    buf.to_vec()
}

fn sample_records() -> Vec<Record> {
    vec![
        record(0, Some(b"k0"), Some(b"first value"), &[]),
        record(1, None, Some(b"keyless"), &[("trace", Some(b"abc")), ("empty", None)]),
        record(2, Some(b"k2"), None, &[]),
        record(3, Some(b""), Some(&[7u8; 300]), &[("h", Some(b""))]),
    ]
}

/// `template` (uncompressed or with its codec) over `section`, `records_count` records.
fn with_section(template: &[u8], section: &[u8], records_count: i32) -> Vec<u8> {
    let codec = BatchHeader::parse(template).unwrap().compression();
    with_records_section(template, codec, section, records_count)
}

fn assert_matches_records(decoded: &BatchRecords<'_>, expected: &[Record]) {
    let views: Vec<RecordView<'_>> = decoded.iter().collect();
    assert_eq!(views.len(), expected.len());
    for (view, record) in views.iter().zip(expected) {
        assert_eq!(i64::from(view.offset_delta), record.offset);
        assert_eq!(view.timestamp_delta, record.timestamp - 1_700_000_000_000);
        assert_eq!(view.key, record.key.as_deref());
        assert_eq!(view.value, record.value.as_deref());
        assert_eq!(view.header_count, record.headers.len());
        assert!(view.headers.len() >= 2 * record.headers.len());
        let headers: Vec<(&[u8], Option<&[u8]>)> = view.header_pairs().collect();
        let expected_headers: Vec<(&[u8], Option<&[u8]>)> = record
            .headers
            .iter()
            .map(|(k, v)| (k.as_bytes(), v.as_deref()))
            .collect();
        assert_eq!(headers, expected_headers, "headers of record {}", record.offset);
    }
    let rebuilt: Vec<u8> = views.iter().flat_map(|v| v.bytes.iter().copied()).collect();
    assert_eq!(rebuilt, decoded.section(), "record bytes tile the section");
}

// ---- round trips ----

#[test]
fn every_codec_round_trips_a_kafka_protocol_batch() {
    let records = sample_records();
    for (compression, codec) in [(Compression::None, CODEC_NONE)].into_iter().chain(CODECS) {
        let batch = encode(compression, &records);
        validate_batch(&batch).unwrap();
        let decoded = BatchRecords::decode(&batch, GENEROUS_LIMIT).unwrap();
        assert_eq!(decoded.header().compression(), codec, "{}", codec_name(codec));
        assert_matches_records(&decoded, &records);
    }
}

#[test]
fn a_batch_of_many_records_round_trips_in_every_codec() {
    let values: Vec<Vec<u8>> = (0..500)
        .map(|i| format!("value-{i}-").repeat(i % 40).into_bytes())
        .collect();
    let records: Vec<Record> = values
        .iter()
        .enumerate()
        .map(|(i, v)| record(i as i64, Some(format!("key-{}", i % 37).as_bytes()), Some(v), &[]))
        .collect();
    for (compression, codec) in CODECS {
        let batch = encode(compression, &records);
        let decoded = BatchRecords::decode(&batch, GENEROUS_LIMIT).unwrap();
        assert_matches_records(&decoded, &records);
        assert!(
            decoded.section().len() > batch.len(),
            "{} compressed the records",
            codec_name(codec)
        );
    }
}

#[test]
fn the_test_support_encoder_round_trips_uncompressed() {
    let batch = encode_batch(
        5,
        0,
        &[
            TestRecord {
                key: Some(b"a"),
                value: None,
                timestamp_delta_ms: 4,
            },
            TestRecord {
                key: None,
                value: Some(b"b"),
                timestamp_delta_ms: 9,
            },
        ],
    );
    let decoded = BatchRecords::decode(&batch, 0).unwrap();
    let views: Vec<_> = decoded
        .iter()
        .map(|r| (r.offset_delta, r.timestamp_delta, r.key, r.value))
        .collect();
    assert_eq!(
        views,
        vec![(0, 4, Some(&b"a"[..]), None), (1, 9, None, Some(&b"b"[..]))],
        "uncompressed records are used in place: the limit does not apply"
    );
}

#[test]
fn raw_snappy_without_xerial_framing_is_accepted() {
    // librdkafka may write one raw snappy block; kafka-protocol and snappy-java accept it.
    let records = sample_records();
    let plain = encode(Compression::None, &records);
    let raw = snap::raw::Encoder::new()
        .compress_vec(&plain[BATCH_HEADER_LEN..])
        .unwrap();
    let batch = with_records_section(&plain, CODEC_SNAPPY, &raw, records.len() as i32);
    let decoded = BatchRecords::decode(&batch, GENEROUS_LIMIT).unwrap();
    assert_eq!(decoded.header().compression(), CODEC_SNAPPY);
    assert_matches_records(&decoded, &records);
}

#[test]
fn xerial_snappy_with_several_blocks_is_accepted() {
    // snappy-java writes 32 KiB blocks: 100 KB of input takes four.
    let input = varied_bytes(100_000);
    let mut framed = XERIAL_SNAPPY_HEADER.to_vec();
    for block in input.chunks(32 * 1024) {
        let compressed = snap::raw::Encoder::new().compress_vec(block).unwrap();
        framed.extend_from_slice(&(compressed.len() as u32).to_be_bytes());
        framed.extend_from_slice(&compressed);
    }
    assert_eq!(decompress(CODEC_SNAPPY, &framed, GENEROUS_LIMIT).unwrap(), input);
    assert_eq!(
        decompress(CODEC_SNAPPY, XERIAL_SNAPPY_HEADER, 10).unwrap(),
        Vec::<u8>::new()
    );
}

/// Bytes that compress somewhat but not to nothing.
fn varied_bytes(len: usize) -> Vec<u8> {
    (0..len).map(|i| ((i * 7919) % 251) as u8 ^ (i / 1000) as u8).collect()
}

// ---- limits ----

#[test]
fn output_of_exactly_the_limit_is_accepted_and_one_byte_more_refused() {
    let input = varied_bytes(200_000);
    for (compression, codec) in CODECS {
        let batch = encode(compression, &[record(0, Some(b"k"), Some(&input), &[])]);
        let section_len = BatchRecords::decode(&batch, GENEROUS_LIMIT).unwrap().section().len();
        assert!(
            BatchRecords::decode(&batch, section_len).is_ok(),
            "{}",
            codec_name(codec)
        );
        let err = BatchRecords::decode(&batch, section_len - 1).unwrap_err();
        assert_eq!(
            err,
            BatchError::RecordsTooLarge {
                codec: codec_name(codec),
                max_bytes: section_len - 1
            }
        );
        assert_eq!(err.response_error(), ResponseError::RecordListTooLarge);
    }
}

#[test]
fn a_megabyte_of_zeros_is_refused_under_a_small_limit_without_being_allocated() {
    const BOMB_BYTES: usize = 1024 * 1024;
    const LIMIT: usize = 64 * 1024;
    // The decoders' own state (flate2's buffers and inflate window) comes on top of the limit.
    const DECODER_STATE_BYTES: usize = 192 * 1024;
    let zeros = vec![0u8; BOMB_BYTES];
    for (compression, codec) in CODECS {
        let batch = encode(compression, &[record(0, Some(b"k"), Some(&zeros), &[])]);
        assert!(batch.len() < BOMB_BYTES / 10, "{} compresses zeros", codec_name(codec));
        let (result, peak) = peak_allocation(|| BatchRecords::decode(&batch, LIMIT).map(|_| ()));
        let err = result.unwrap_err();
        assert_eq!(
            err.response_error(),
            ResponseError::RecordListTooLarge,
            "{}: {err}",
            codec_name(codec)
        );
        assert!(
            peak <= LIMIT + DECODER_STATE_BYTES,
            "{} allocated {peak} bytes for a {LIMIT}-byte limit",
            codec_name(codec)
        );
        // The same batch under a generous limit does allocate the megabyte: the counter sees it.
        let (decoded, full_peak) = peak_allocation(|| BatchRecords::decode(&batch, GENEROUS_LIMIT).map(|_| ()));
        assert!(
            decoded.is_ok() && full_peak >= BOMB_BYTES,
            "{}: {full_peak}",
            codec_name(codec)
        );
        println!(
            "{}: bomb of {BOMB_BYTES} bytes in {} refused, peak allocation {peak} bytes",
            codec_name(codec),
            batch.len()
        );
    }
}

#[test]
fn a_snappy_length_preamble_decides_no_allocation() {
    // A 6-byte raw block claiming 100 MB: over the limit, or impossible for its size.
    let mut lying = Vec::new();
    let mut claimed: u64 = 100_000_000;
    while claimed >= 0x80 {
        lying.push((claimed as u8) | 0x80);
        claimed >>= 7;
    }
    lying.push(claimed as u8);
    lying.extend_from_slice(&[0x00, b'x']); // one literal byte
    let (result, peak) = peak_allocation(|| decompress(CODEC_SNAPPY, &lying, 1024));
    assert!(matches!(result, Err(BatchError::RecordsTooLarge { .. })), "{result:?}");
    assert!(peak < 1024, "allocated {peak} bytes");
    let (result, peak) = peak_allocation(|| decompress(CODEC_SNAPPY, &lying, 200_000_000));
    assert!(matches!(result, Err(BatchError::Decompression { .. })), "{result:?}");
    assert!(peak < 1024, "allocated {peak} bytes");

    // A preamble within both bounds that the block does not fill is refused too.
    let short = [20u8, 0x00, b'x'];
    assert!(matches!(
        decompress(CODEC_SNAPPY, &short, 1024),
        Err(BatchError::Decompression { .. })
    ));
}

#[test]
fn a_zstd_frame_claiming_a_huge_content_size_is_refused_within_the_limit() {
    // zstd of 100 KB written with its content size, then the size field raised to 2^40.
    let input = vec![1u8; 100_000];
    let mut frame = zstd::bulk::compress(&input, 3).unwrap();
    // Frame header: magic (4), descriptor (1), [window (1)], content size (1/2/4/8 bytes).
    let descriptor = frame[4];
    assert_eq!(descriptor >> 6, 2, "a 4-byte content size field");
    let at = 5 + usize::from(descriptor & 0x20 == 0);
    frame[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    let (result, peak) = peak_allocation(|| decompress(CODEC_ZSTD, &frame, 256 * 1024));
    let err = result.unwrap_err();
    assert!(
        matches!(
            err,
            BatchError::Decompression { .. } | BatchError::RecordsTooLarge { .. }
        ),
        "{err}"
    );
    assert!(peak <= 256 * 1024 + 4096, "allocated {peak} bytes");
}

// ---- truncated and garbled input ----

#[test]
fn truncated_compressed_sections_are_corrupt() {
    let records = sample_records();
    for (compression, codec) in CODECS {
        let batch = encode(compression, &records);
        let section = &batch[BATCH_HEADER_LEN..];
        for cut in 0..section.len() {
            let truncated = with_section(&batch, &section[..cut], records.len() as i32);
            let err = BatchRecords::decode(&truncated, GENEROUS_LIMIT).unwrap_err();
            assert_eq!(
                err.response_error(),
                ResponseError::CorruptMessage,
                "{} cut at {cut}: {err}",
                codec_name(codec)
            );
        }
    }
}

#[test]
fn garbled_compressed_sections_never_panic_and_fail_as_corrupt_or_too_large() {
    let records = sample_records();
    for (compression, codec) in CODECS {
        let batch = encode(compression, &records);
        let mut refused = 0;
        for i in BATCH_HEADER_LEN..batch.len() {
            for bit in [0x01u8, 0x10, 0x80] {
                let mut garbled = batch.clone();
                garbled[i] ^= bit;
                match BatchRecords::decode(&garbled, 1024 * 1024) {
                    Ok(decoded) => assert_eq!(decoded.iter().count(), records.len()),
                    Err(err) => {
                        assert!(
                            [ResponseError::CorruptMessage, ResponseError::RecordListTooLarge].contains(&err.response_error()),
                            "{err}"
                        );
                        refused += 1;
                    }
                }
            }
        }
        assert!(refused > 0, "{}: some garbling is noticed", codec_name(codec));
    }
    // gzip's trailer holds a CRC32 and the length of the output: every flip there is caught.
    let batch = encode(Compression::Gzip, &records);
    for i in batch.len() - 8..batch.len() {
        let mut garbled = batch.clone();
        garbled[i] ^= 0x04;
        assert!(
            BatchRecords::decode(&garbled, GENEROUS_LIMIT).is_err(),
            "gzip trailer byte {i}"
        );
    }
}

#[test]
fn unknown_codecs_and_empty_sections_are_corrupt() {
    assert_eq!(
        decompress(5, b"abc", 100).unwrap_err(),
        BatchError::UnknownCompression { codec: 5 }
    );
    for (_, codec) in CODECS {
        let err = decompress(codec, &[], 100).unwrap_err();
        assert_eq!(err.response_error(), ResponseError::CorruptMessage, "{}: {err}", codec_name(codec));
    }
}

// ---- record counts and record fields ----

#[test]
fn a_record_count_beyond_the_section_bytes_is_refused_before_walking() {
    let records = sample_records();
    for (compression, _) in [(Compression::None, CODEC_NONE)].into_iter().chain(CODECS) {
        let batch = encode(compression, &records);
        let lying = with_section(&batch, &batch[BATCH_HEADER_LEN..], 1_000_000);
        let err = BatchRecords::decode(&lying, GENEROUS_LIMIT).unwrap_err();
        assert!(
            matches!(
                err,
                BatchError::RecordCountExceedsBytes {
                    records_count: 1_000_000,
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(err.response_error(), ResponseError::CorruptMessage);
    }
}

#[test]
fn a_record_count_that_the_bytes_could_hold_but_do_not_is_refused() {
    let records = sample_records();
    for (compression, _) in [(Compression::None, CODEC_NONE)].into_iter().chain(CODECS) {
        let batch = encode(compression, &records);
        // One more record than present: the walk runs out of bytes.
        let more = with_section(&batch, &batch[BATCH_HEADER_LEN..], records.len() as i32 + 1);
        assert!(matches!(
            BatchRecords::decode(&more, GENEROUS_LIMIT),
            Err(BatchError::MalformedRecord { index: 4, .. })
        ));
        // One fewer (offset range unchanged, as compaction leaves it): a record is left over.
        let mut fewer = batch.clone();
        fewer[RECORDS_COUNT_OFFSET..RECORDS_COUNT_OFFSET + 4].copy_from_slice(&3i32.to_be_bytes());
        assert!(matches!(
            BatchRecords::decode(&fewer, GENEROUS_LIMIT),
            Err(BatchError::TrailingRecordBytes { records_count: 3, .. })
        ));
    }
}

/// One uncompressed record with `body` (everything after the length varint) in a batch of one.
fn single_record_batch(body: &[u8]) -> Vec<u8> {
    let template = encode(Compression::None, &[record(0, Some(b"k"), Some(b"v"), &[])]);
    let mut section = vec![(body.len() as u8) << 1]; // zigzag length, body < 64 bytes
    section.extend_from_slice(body);
    with_section(&template, &section, 1)
}

#[test]
fn malformed_record_fields_are_named_in_the_error() {
    let cases: [(&[u8], &str); 9] = [
        (&[0, 0, 0, 1, 1, 0, 9], "its length does not match its fields"),
        (
            &[0, 0, 0, 6, b'k', 0],
            "its key length is invalid or overruns the record",
        ),
        (&[0, 0, 0, 3, 1, 0], "its key length is invalid or overruns the record"), // length -2
        (
            &[0, 0, 2, 1, 1, 0],
            "its offset delta is outside the batch's offset range",
        ),
        (
            &[0, 0, 1, 1, 1, 0],
            "its offset delta is outside the batch's offset range",
        ), // -1
        (
            &[0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0],
            "its timestamp delta is not a valid varlong",
        ),
        (
            &[0, 0, 0xff, 0xff, 0xff, 0xff, 0x7f, 1, 1, 0],
            "its offset delta is not a valid varint",
        ),
        (&[0, 0, 0, 1, 1, 2, 1, 1], "a header key is null or overruns the record"),
        (&[0, 0, 0, 1, 1, 1], "its header count is not a valid count"),
    ];
    for (body, reason) in cases {
        let err = BatchRecords::decode(&single_record_batch(body), GENEROUS_LIMIT).unwrap_err();
        assert_eq!(err, BatchError::MalformedRecord { index: 0, reason }, "body {body:?}");
        assert_eq!(err.response_error(), ResponseError::CorruptMessage);
    }
    // The minimal record: 7 bytes with its length.
    let minimal = single_record_batch(&[0, 0, 0, 1, 1, 0]);
    let decoded = BatchRecords::decode(&minimal, 0).unwrap();
    assert_eq!(decoded.section().len(), MIN_RECORD_BYTES);
    let record = decoded.iter().next().unwrap();
    assert_eq!((record.key, record.value, record.header_count), (None, None, 0));
}

#[test]
fn a_record_length_past_the_section_or_negative_is_refused() {
    let template = encode(Compression::None, &[record(0, None, None, &[])]);
    for section in [&[40u8, 0, 0, 0, 1, 1, 0, 0][..], &[3, 0, 0, 0, 1, 1, 0, 0]] {
        let batch = with_section(&template, section, 1);
        assert!(matches!(
            BatchRecords::decode(&batch, GENEROUS_LIMIT),
            Err(BatchError::MalformedRecord { index: 0, .. })
        ));
    }
}

#[test]
fn no_prefix_or_mutation_of_a_batch_makes_decoding_panic() {
    for compression in [Compression::None, Compression::Snappy, Compression::Zstd] {
        let batch = encode(compression, &sample_records());
        for len in 0..=batch.len() {
            let _ = BatchRecords::decode(&batch[..len], 4096);
        }
        for i in 0..batch.len() {
            for bit in [0x01u8, 0x40, 0x80] {
                let mut mutated = batch.clone();
                mutated[i] ^= bit;
                if let Ok(decoded) = BatchRecords::decode(&mutated, 4096) {
                    let _ = decoded.iter().count();
                }
            }
        }
    }
}

//! The bodies of the fuzz targets in `fuzz/fuzz_targets/`, shared with the corpus replay test
//! (`protocol/tests/fuzz_corpus.rs`), so CI on stable runs exactly what the fuzzer runs on nightly.
//!
//! Each entry point takes arbitrary bytes and must return normally for every input. Besides "no
//! panic, no abort, no oversized allocation" each asserts properties that hold for *every* input
//! (one validator agreeing with another, a stamped batch still validating); a violated one is a
//! bug the fuzzer reports as a crash. Not for production paths: it copies and formats its input.

use std::fmt::{self, Write as _};

use bytes::Bytes;

use crate::batch::{self, BatchError, BatchHeader, BatchIter, BatchesInfo};
use crate::records;
use crate::request::{self, Request, RequestError};
use crate::RequestBody;

/// Fuzz target `decode_request`: `data` is a frame body without its size prefix, as the
/// connection hands it to [`request::decode_request`]. A decoded request is formatted with
/// `Debug` (every field, every nested collection is visited) and the records of a Produce
/// request go through [`validate_batch`], as the produce handler would send them.
pub fn decode_request(data: &[u8]) -> Result<Request, RequestError> {
    let result = request::decode_request(Bytes::copy_from_slice(data));
    if let Ok(request) = &result {
        let mut sink = DiscardWriter::default();
        // A Debug impl never fails on its own; only the writer could, and this one does not.
        let _ = write!(sink, "{request:?}");
        assert!(sink.chars > 0, "a decoded request formats to something");
        if let RequestBody::Produce(produce) = &request.body {
            for partition in produce.topic_data.iter().flat_map(|t| &t.partition_data) {
                if let Some(records) = &partition.records {
                    validate_batch(records);
                }
            }
        }
    }
    result
}

/// What [`validate_batch`] found, for the replay test to assert on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchOutcome {
    /// [`batch::validate_batches`]: the produce path's verdict.
    pub produce: Result<BatchesInfo, BatchError>,
    /// [`batch::validate_stored_batches`]: the follower's verdict.
    pub stored: Result<BatchesInfo, BatchError>,
    /// Complete batches [`BatchIter`] walked before it stopped.
    pub iterated_batches: usize,
}

/// Fuzz target `validate_batch`: `data` is a records blob as a Produce request carries it (or as
/// a follower fetches it). Runs both validators and the header-only walker over it, checks that
/// they agree, and checks every batch the walker returns with [`check_one_batch`].
pub fn validate_batch(data: &[u8]) -> BatchOutcome {
    let produce = batch::validate_batches(data);
    let stored = batch::validate_stored_batches(data);
    let iterated_batches = walk(data);

    // The stored check only relaxes the record count, so whatever a producer may send a
    // follower may copy, with the same totals; and the log's CRC-less append check agrees too.
    if let Ok(info) = &produce {
        assert_eq!(
            stored.as_ref(),
            Ok(info),
            "validate_stored_batches rejects what validate_batches accepts"
        );
        assert_eq!(
            batch::inspect_batches(data).as_ref(),
            Ok(info),
            "inspect_batches disagrees"
        );
        check_stamping(data, info);
    }
    if let Ok(info) = &stored {
        assert_eq!(
            iterated_batches, info.batch_count,
            "BatchIter and the validator count different batches"
        );
        assert_eq!(info.total_bytes, data.len(), "validated batches do not cover the blob");
    }
    BatchOutcome {
        produce,
        stored,
        iterated_batches,
    }
}

/// Walks `data` with [`BatchIter`], checking that its ranges tile the buffer from the start, and
/// runs [`check_one_batch`] on each batch. Returns how many batches it walked.
fn walk(data: &[u8]) -> usize {
    let mut iter = BatchIter::new(data);
    let mut count = 0;
    let mut expected_start = 0;
    for (header, range) in iter.by_ref() {
        assert_eq!(range.start, expected_start, "BatchIter ranges are not contiguous");
        assert_eq!(
            range.len(),
            header.total_len(),
            "BatchIter range is not the header's length"
        );
        let Some(bytes) = data.get(range.clone()) else {
            panic!(
                "BatchIter returned {range:?} past the end of a {}-byte buffer",
                data.len()
            );
        };
        check_one_batch(bytes, &header);
        expected_start = range.end;
        count += 1;
    }
    assert_eq!(
        iter.position(),
        expected_start,
        "BatchIter::position is not the end of its last batch"
    );
    assert_eq!(iter.at_end(), iter.position() == data.len());
    assert!(iter.next().is_none(), "BatchIter yields again after stopping");
    count
}

/// Decompression limit for the record walk: the default `max.message.bytes`, as the broker
/// passes it for a topic that does not override it.
const MAX_DECOMPRESSED_BYTES: usize = 1_048_588;

/// Checks one complete batch as [`BatchIter`] cut it out of the input, then decodes its records
/// (bounded decompression and the record walker), as the keyless check, the cleaner and group
/// loading do.
fn check_one_batch(batch: &[u8], header: &BatchHeader) {
    if let Ok(decoded) = records::BatchRecords::decode(batch, MAX_DECOMPRESSED_BYTES) {
        if header.compression() != 0 {
            assert!(
                decoded.section().len() <= MAX_DECOMPRESSED_BYTES,
                "decompressed past the limit"
            );
        }
        let walked = decoded.iter().count();
        assert_eq!(
            walked as i64,
            i64::from(header.records_count),
            "a decoded batch walks a different number of records than it declares"
        );
    }
    assert_eq!(
        BatchHeader::parse(batch).as_ref(),
        Ok(header),
        "re-parsing a batch changes its header"
    );
    let produce = batch::validate_batch(batch);
    let stored = batch::validate_stored_batch(batch);
    if let Ok(validated) = &produce {
        assert_eq!(validated, header);
        assert_eq!(
            stored.as_ref(),
            Ok(header),
            "validate_stored_batch rejects what validate_batch accepts"
        );
    }
}

/// Stamps a copy of an accepted blob the way the produce path does (base offset, leader epoch,
/// LogAppendTime, which rewrites the CRC) and checks that it still validates, spanning the
/// same offsets.
fn check_stamping(data: &[u8], info: &BatchesInfo) {
    let mut stamped = data.to_vec();
    let ranges: Vec<_> = BatchIter::new(data).map(|(_, range)| range).collect();
    let mut next_offset = 1_000;
    for range in ranges {
        let Some(batch) = stamped.get_mut(range) else {
            panic!("BatchIter returned a range outside the blob it walked");
        };
        let header = BatchHeader::parse(batch).expect("a validated batch has a header");
        batch::set_base_offset(batch, next_offset).expect("stamping a validated batch");
        batch::set_partition_leader_epoch(batch, 7).expect("stamping a validated batch");
        batch::set_log_append_time(batch, 1_700_000_000_000).expect("stamping a validated batch");
        next_offset += header.offset_count();
    }
    let restamped = batch::validate_batches(&stamped).expect("a stamped batch no longer validates");
    assert_eq!(
        (restamped.batch_count, restamped.record_count, restamped.total_bytes),
        (info.batch_count, info.record_count, info.total_bytes),
        "stamping changed what the batches span"
    );
    assert_eq!(restamped.max_timestamp, 1_700_000_000_000);
}

/// A `fmt::Write` that keeps nothing, so formatting a request costs no memory.
#[derive(Default)]
struct DiscardWriter {
    chars: usize,
}

impl fmt::Write for DiscardWriter {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.chars += s.len();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::test_support::encode_simple_batch;

    #[test]
    fn two_valid_batches_pass_every_check() {
        let mut blob = encode_simple_batch(3, 10, 1_000);
        blob.extend(encode_simple_batch(2, 5, 2_000));
        let outcome = validate_batch(&blob);
        assert_eq!(outcome.produce.map(|i| (i.batch_count, i.record_count)), Ok((2, 5)));
        assert_eq!(outcome.iterated_batches, 2);
    }

    #[test]
    fn a_torn_tail_is_refused_but_walked_up_to() {
        let mut blob = encode_simple_batch(3, 10, 1_000);
        let whole = blob.len();
        blob.extend_from_slice(&encode_simple_batch(1, 5, 2_000)[..40]);
        let outcome = validate_batch(&blob);
        assert!(matches!(outcome.produce, Err(BatchError::Truncated { .. })));
        assert_eq!(outcome.iterated_batches, 1);
        assert!(whole < blob.len());
    }

    #[test]
    fn garbage_is_refused_without_panicking() {
        for data in [&[][..], &[0xff; 7][..], &[0; 61][..], &[2; 200][..]] {
            assert!(validate_batch(data).produce.is_err());
            assert!(decode_request(data).is_err());
        }
    }
}

//! A response frame whose large record sections are not copied: the frame is a list of
//! chunks, the encoded fields in owned buffers and each record set the broker read from a
//! segment as the very `Bytes` it read. Written chunk after chunk, a fetch response costs no
//! copy of its records between the read and the socket.
//!
//! The `kafka-protocol` encoders write a records field with one `put_slice` of the `Bytes`
//! they were given, so [`ChunkedBuf`] recognises a record set by its address: the record sets
//! of a response, in encoding order, are the candidates, and a `put_slice` of exactly the next
//! candidate's bytes becomes a reference to it. Anything else is copied as usual. An encoder
//! that seeks back or rewrites a range (none does for responses) makes the buffer flatten
//! itself first, so the result is always byte-for-byte what a plain buffer would hold.

use std::ops::Range;

use bytes::buf::UninitSlice;
use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::protocol::buf::ByteBufMut;

/// Record sets smaller than this are copied: a chunk of their own would cost more than the copy.
pub const MIN_SHARED_BYTES: usize = 4096;

/// The chunks of one encoded response, in wire order.
#[derive(Debug, Default)]
pub struct ResponseFrame {
    pub chunks: Vec<Bytes>,
}

impl ResponseFrame {
    pub fn len(&self) -> usize {
        self.chunks.iter().map(Bytes::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The frame in one buffer (a copy; for tests and callers that need contiguous bytes).
    pub fn to_bytes(&self) -> BytesMut {
        let mut out = BytesMut::with_capacity(self.len());
        for chunk in &self.chunks {
            out.extend_from_slice(chunk);
        }
        out
    }
}

enum Segment {
    Owned(BytesMut),
    Shared(Bytes),
}

impl Segment {
    fn len(&self) -> usize {
        match self {
            Segment::Owned(b) => b.len(),
            Segment::Shared(b) => b.len(),
        }
    }
}

/// A `ByteBufMut` that keeps the candidate record sets by reference (see the module docs).
pub struct ChunkedBuf {
    done: Vec<Segment>,
    /// Logical offset where `current` starts.
    base: usize,
    current: BytesMut,
    candidates: Vec<Bytes>,
    next_candidate: usize,
}

impl ChunkedBuf {
    /// `candidates`: the record sets the encoder will write, in the order it writes them
    /// (those under [`MIN_SHARED_BYTES`] may be left out; any not met are simply copied).
    pub fn new(capacity: usize, candidates: Vec<Bytes>) -> ChunkedBuf {
        ChunkedBuf {
            done: Vec::new(),
            base: 0,
            current: BytesMut::with_capacity(capacity),
            candidates,
            next_candidate: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.base + self.current.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Overwrites bytes at `at` (which must lie in an owned part, as the size prefix written
    /// first does).
    pub fn patch(&mut self, at: usize, bytes: &[u8]) {
        self.range(at..at + bytes.len()).copy_from_slice(bytes);
    }

    pub fn finish(mut self) -> ResponseFrame {
        if !self.current.is_empty() {
            self.done.push(Segment::Owned(self.current));
        }
        ResponseFrame {
            chunks: self
                .done
                .into_iter()
                .map(|s| match s {
                    Segment::Owned(b) => b.freeze(),
                    Segment::Shared(b) => b,
                })
                .filter(|b| !b.is_empty())
                .collect(),
        }
    }

    /// Copies everything into `current`, so any offset can be reached (the rare path).
    fn flatten(&mut self) {
        if self.done.is_empty() {
            return;
        }
        let mut all = BytesMut::with_capacity(self.len());
        for segment in self.done.drain(..) {
            match segment {
                Segment::Owned(b) => all.extend_from_slice(&b),
                Segment::Shared(b) => all.extend_from_slice(&b),
            }
        }
        all.extend_from_slice(&self.current);
        self.current = all;
        self.base = 0;
    }

    /// Where `r` lies when it is within one owned segment: `None` for `current`'s own index.
    fn locate(&self, r: &Range<usize>) -> Option<Location> {
        if r.start >= self.base {
            return Some(Location::Current(r.start - self.base..r.end - self.base));
        }
        let mut start = 0;
        for (i, segment) in self.done.iter().enumerate() {
            let len = segment.len();
            if r.start >= start && r.end <= start + len {
                return match segment {
                    Segment::Owned(_) => Some(Location::Done(i, r.start - start..r.end - start)),
                    Segment::Shared(_) => None,
                };
            }
            start += len;
        }
        None
    }
}

/// An owned place in a [`ChunkedBuf`].
enum Location {
    Current(Range<usize>),
    Done(usize, Range<usize>),
}

unsafe impl BufMut for ChunkedBuf {
    fn remaining_mut(&self) -> usize {
        self.current.remaining_mut()
    }

    unsafe fn advance_mut(&mut self, cnt: usize) {
        // SAFETY: the caller initialised `cnt` bytes of the chunk `chunk_mut` returned, which
        // is `current`'s.
        unsafe { self.current.advance_mut(cnt) }
    }

    fn chunk_mut(&mut self) -> &mut UninitSlice {
        self.current.chunk_mut()
    }

    fn put_slice(&mut self, src: &[u8]) {
        let shared = self
            .candidates
            .get(self.next_candidate)
            .filter(|c| src.len() >= MIN_SHARED_BYTES && c.as_ptr() == src.as_ptr() && c.len() == src.len())
            .cloned();
        match shared {
            Some(records) => {
                self.next_candidate += 1;
                let owned = std::mem::take(&mut self.current);
                self.base += owned.len() + records.len();
                self.done.push(Segment::Owned(owned));
                self.done.push(Segment::Shared(records));
            }
            None => self.current.extend_from_slice(src),
        }
    }
}

impl ByteBufMut for ChunkedBuf {
    fn offset(&self) -> usize {
        self.len()
    }

    fn seek(&mut self, offset: usize) {
        if offset < self.base {
            self.flatten();
        }
        self.current.resize(offset - self.base, 0);
    }

    fn range(&mut self, r: Range<usize>) -> &mut [u8] {
        let location = match self.locate(&r) {
            Some(location) => location,
            None => {
                self.flatten();
                Location::Current(r)
            }
        };
        match location {
            Location::Current(within) => &mut self.current[within],
            Location::Done(i, within) => match &mut self.done[i] {
                Segment::Owned(b) => &mut b[within],
                Segment::Shared(_) => unreachable!("locate names owned segments only"),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_candidate_is_kept_by_reference_and_everything_else_copied() {
        let big = Bytes::from(vec![7u8; MIN_SHARED_BYTES]);
        let other = Bytes::from(vec![9u8; MIN_SHARED_BYTES]);
        let mut buf = ChunkedBuf::new(64, vec![big.clone()]);
        buf.put_i32(0);
        buf.put_slice(&other); // not a candidate: copied
        buf.put_slice(&big);
        buf.put_slice(b"tail");
        buf.patch(0, &42i32.to_be_bytes());
        let expected_len = 4 + other.len() + big.len() + 4;
        assert_eq!(buf.len(), expected_len);
        let frame = buf.finish();
        assert_eq!(frame.chunks.len(), 3);
        assert_eq!(
            frame.chunks[1].as_ptr(),
            big.as_ptr(),
            "the record set itself, not a copy"
        );
        let flat = frame.to_bytes();
        assert_eq!(&flat[..4], &42i32.to_be_bytes());
        assert_eq!(flat.len(), expected_len);
        assert_eq!(&flat[expected_len - 4..], b"tail");
    }

    #[test]
    fn small_or_out_of_order_record_sets_are_copied() {
        let small = Bytes::from_static(b"tiny");
        let big = Bytes::from(vec![1u8; MIN_SHARED_BYTES]);
        let mut buf = ChunkedBuf::new(16, vec![small.clone(), big.clone()]);
        buf.put_slice(&big); // the next candidate is `small`: copy
        buf.put_slice(&small); // candidate, but under the threshold: copy
        assert_eq!(buf.finish().chunks.len(), 1);
    }

    #[test]
    fn reaching_back_into_a_shared_part_flattens_and_stays_exact() {
        let big = Bytes::from(vec![3u8; MIN_SHARED_BYTES]);
        let mut buf = ChunkedBuf::new(16, vec![big.clone()]);
        buf.put_slice(b"ab");
        buf.put_slice(&big);
        buf.range(2..4).copy_from_slice(b"XY"); // inside the shared record set
        buf.seek(1);
        buf.put_slice(b"Z");
        let flat = buf.finish().to_bytes();
        assert_eq!(&flat[..], b"aZ");
        assert_eq!(big[0], 3, "the shared bytes themselves are never written");
    }
}

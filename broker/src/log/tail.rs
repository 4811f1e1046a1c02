//! The log tail cache: the bytes a leader most recently appended to its active segment, kept in
//! memory exactly as written to the file (after stamping), so that a fetch of what was just
//! appended — caught-up followers and consumers, nearly every fetch under steady load — is
//! answered without a disk read and without a trip to the blocking pool.
//!
//! Coherence rests on one invariant, kept under the log's lock: the cached chunks are the last
//! bytes of the active segment, contiguous, ending at the log end offset. Every append either
//! adds its chunk or clears the cache (a follower's append, an append that failed), and every
//! change to the log other than an append clears it (roll, truncation, a cleaner swap). A read
//! is answered from the cache only if the batch holding its offset is cached, and then it is
//! byte for byte what [`super::PlannedRead`] reads from the file: whole batches from the one
//! holding the offset, within `max_bytes` (the first one whole under KIP-74's
//! `min_one_message`), none at or past `max_offset`.
//!
//! Bounded twice: `log.tail.cache.bytes` per partition (the oldest chunks go first) and
//! `log.tail.cache.total.bytes` over the broker ([`TailCacheBudget`], an atomic count). Over
//! the total, a partition makes room from its own oldest chunks, or stops caching until its
//! next append finds room. A partition with no append between two of the writeback task's
//! idle passes (every 10 s, `server::run_writeback`) gives its memory back, so the caches of
//! topics written in a burst make way for the next ones. A fetch answer shares the cached
//! buffers (`Bytes`), so a chunk evicted while a response is in flight lives until that
//! response is written.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use sluice_protocol::batch::BatchIter;

/// The broker-wide bound of the tail caches and the bytes they hold now.
#[derive(Debug)]
pub struct TailCacheBudget {
    /// `log.tail.cache.bytes`: most a partition keeps.
    partition_bytes: usize,
    /// `log.tail.cache.total.bytes`: most all partitions keep together.
    total_bytes: usize,
    used_bytes: AtomicUsize,
}

impl TailCacheBudget {
    pub fn new(partition_bytes: usize, total_bytes: usize) -> Arc<TailCacheBudget> {
        Arc::new(TailCacheBudget {
            partition_bytes: partition_bytes.min(total_bytes),
            total_bytes,
            used_bytes: AtomicUsize::new(0),
        })
    }

    /// Bytes held over all partitions.
    pub fn used_bytes(&self) -> usize {
        self.used_bytes.load(Ordering::Relaxed)
    }

    fn try_reserve(&self, bytes: usize) -> bool {
        self.used_bytes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                used.checked_add(bytes).filter(|after| *after <= self.total_bytes)
            })
            .is_ok()
    }

    fn release(&self, bytes: usize) {
        let before = self.used_bytes.fetch_sub(bytes, Ordering::Relaxed);
        debug_assert!(before >= bytes, "tail cache released {bytes} bytes of {before} held");
    }
}

/// One append, as written to the active segment.
#[derive(Debug)]
struct Chunk {
    /// The log end offset before the append: a read from here on finds its batch in this chunk
    /// or a later one (compaction or a leader's gaps may start the first batch above it).
    start_offset: i64,
    /// The log end offset after it: the last batch's last offset + 1.
    end_offset: i64,
    /// Where the chunk starts in the active segment's file.
    position: u64,
    bytes: Bytes,
}

/// One partition's cached tail (see the module docs). Lives in the `PartitionLog`, so every
/// call is made under the partition's log lock.
#[derive(Debug, Default)]
pub(crate) struct TailCache {
    /// `None`: caching is off (the log was opened without a budget).
    budget: Option<Arc<TailCacheBudget>>,
    chunks: VecDeque<Chunk>,
    bytes: usize,
    /// An append failed part-way: the file may hold bytes the log does not account for, so
    /// nothing is cached until a roll or truncation resets the active segment's state.
    poisoned: bool,
    /// The log was appended to (a follower's appends too) since the last
    /// [`TailCache::release_if_idle`].
    touched: bool,
}

/// A read answered from the cache, planned under the log's lock: the chunk holding the batch
/// of the fetch offset (sliced from that batch on) and the chunks after it that `max_bytes`
/// may reach. Shares the cached buffers; touches no file.
#[derive(Debug)]
pub(crate) struct TailRead {
    first: Bytes,
    rest: Vec<Bytes>,
    /// The `max_bytes` the read was planned for: the chunks taken cover it.
    planned_max_bytes: usize,
}

impl TailCache {
    pub fn new(budget: Arc<TailCacheBudget>) -> TailCache {
        TailCache {
            budget: Some(budget),
            chunks: VecDeque::new(),
            bytes: 0,
            poisoned: false,
            touched: false,
        }
    }

    /// Bytes this partition holds.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Drops every chunk: the log changed other than by an append.
    pub fn clear(&mut self) {
        self.chunks.clear();
        self.release(self.bytes);
        self.bytes = 0;
    }

    /// A follower's append is about to write: the cache holds only a leader's own appends, so it
    /// is cleared, and the log counts as used (see `touched`).
    pub fn follower_append(&mut self) {
        self.clear();
        self.touched = true;
    }

    /// The active segment started over (roll, truncation): caching may resume.
    pub fn reset(&mut self) {
        self.clear();
        self.poisoned = false;
    }

    /// An append failed after it may have written to the file (see `poisoned`).
    pub fn poison(&mut self) {
        self.clear();
        self.poisoned = true;
    }

    /// Keeps a copy of `records`, just written at `position` of the active segment, which took
    /// the log end from `start_offset` to `end_offset`. An append the bounds cannot hold
    /// clears the cache instead: the cached chunks must reach the log end.
    pub fn push(&mut self, records: &[u8], position: u64, start_offset: i64, end_offset: i64) {
        self.touched = true;
        let Some(budget) = self.budget.clone() else { return };
        let contiguous = self
            .chunks
            .back()
            .is_none_or(|last| last.end_offset == start_offset && last.position + last.bytes.len() as u64 == position);
        let len = records.len();
        if self.poisoned || !contiguous || len == 0 || len > budget.partition_bytes {
            debug_assert!(contiguous, "tail cache append not contiguous with the cached tail");
            self.clear();
            return;
        }
        while self.bytes + len > budget.partition_bytes {
            self.pop_oldest();
        }
        while !budget.try_reserve(len) {
            if !self.pop_oldest() {
                return; // nothing of ours to give up, so nothing cached; the next append retries
            }
        }
        self.chunks.push_back(Chunk {
            start_offset,
            end_offset,
            position,
            bytes: Bytes::copy_from_slice(records),
        });
        self.bytes += len;
    }

    /// Drops chunks wholly below the log start offset: no fetch may read them.
    pub fn trim_below(&mut self, log_start_offset: i64) {
        while self.chunks.front().is_some_and(|c| c.end_offset <= log_start_offset) {
            self.pop_oldest();
        }
    }

    /// Housekeeping: gives the memory back if nothing was appended since the last call, the
    /// chunk list's own buffer included (an idle replica keeps no allocation here). Returns
    /// whether the log was idle.
    pub fn release_if_idle(&mut self) -> bool {
        let idle = !self.touched;
        if idle {
            self.clear();
            self.chunks = VecDeque::new();
        }
        self.touched = false;
        idle
    }

    /// Plans a read from `offset` (below `log_end_offset`) of about `max_bytes` from the cache,
    /// if it holds the batch of `offset` and ends where the log and its active segment
    /// (`active_size_bytes`) end. `None` sends the read to the disk.
    pub fn plan(&self, offset: i64, max_bytes: usize, log_end_offset: i64, active_size_bytes: u64) -> Option<TailRead> {
        let (front, back) = (self.chunks.front()?, self.chunks.back()?);
        let ends_at_log_end =
            back.end_offset == log_end_offset && back.position + back.bytes.len() as u64 == active_size_bytes;
        if offset < front.start_offset || offset >= log_end_offset || !ends_at_log_end {
            return None;
        }
        // The first chunk reaching past `offset` holds the first batch whose last offset is at
        // least `offset`: every batch before it ends below its start.
        let index = self.chunks.partition_point(|c| c.end_offset <= offset);
        let chunk = self.chunks.get(index)?;
        let start = BatchIter::new(&chunk.bytes)
            .find(|(header, _)| header.last_offset() >= offset)
            .map(|(_, range)| range.start)?;
        let first = chunk.bytes.slice(start..);
        let mut reach = first.len();
        let mut rest = Vec::new();
        for chunk in self.chunks.range(index + 1..) {
            if reach >= max_bytes {
                break;
            }
            reach += chunk.bytes.len();
            rest.push(chunk.bytes.clone());
        }
        Some(TailRead {
            first,
            rest,
            planned_max_bytes: max_bytes,
        })
    }

    fn pop_oldest(&mut self) -> bool {
        let Some(chunk) = self.chunks.pop_front() else {
            return false;
        };
        self.bytes -= chunk.bytes.len();
        self.release(chunk.bytes.len());
        true
    }

    fn release(&self, bytes: usize) {
        if let (Some(budget), true) = (&self.budget, bytes > 0) {
            budget.release(bytes);
        }
    }
}

impl Drop for TailCache {
    fn drop(&mut self) {
        self.clear();
    }
}

impl TailRead {
    /// What [`super::PlannedRead::read`] would read from the file: whole batches from the first,
    /// at most `max_bytes` (the first whole if `min_one_message`), none at or past
    /// `max_offset`. A slice of the cached chunk when the answer lies in one, else one copy.
    pub fn read(&self, max_bytes: usize, min_one_message: bool, max_offset: i64) -> Bytes {
        debug_assert!(max_bytes <= self.planned_max_bytes, "tail read past its plan");
        let max_bytes = max_bytes.min(self.planned_max_bytes);
        let Some((first, range)) = BatchIter::new(&self.first).next() else {
            return Bytes::new();
        };
        if first.base_offset >= max_offset || (range.len() > max_bytes && !min_one_message) {
            return Bytes::new();
        }
        let budget = max_bytes.max(range.len());
        let (first_len, whole) = prefix_len(&self.first, budget, max_offset);
        if !whole || self.rest.is_empty() {
            return self.first.slice(..first_len);
        }
        // Spans chunks: find where it ends, then copy once.
        let mut total = first_len;
        for chunk in &self.rest {
            let (len, whole) = prefix_len(chunk, budget - total, max_offset);
            total += len;
            if !whole {
                break;
            }
        }
        if total == first_len {
            return self.first.slice(..first_len);
        }
        let mut out = Vec::with_capacity(total);
        out.extend_from_slice(&self.first[..first_len]);
        for chunk in &self.rest {
            let take = (total - out.len()).min(chunk.len());
            if take == 0 {
                break;
            }
            out.extend_from_slice(&chunk[..take]);
        }
        Bytes::from(out)
    }
}

/// Length of the leading whole batches of `chunk` that fit `budget` and start below
/// `max_offset`, and whether that is all of it.
fn prefix_len(chunk: &[u8], budget: usize, max_offset: i64) -> (usize, bool) {
    let mut end = 0;
    for (header, range) in BatchIter::new(chunk) {
        if header.base_offset >= max_offset || range.end > budget {
            return (end, false);
        }
        end = range.end;
    }
    (end, end == chunk.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 33: an idle replica's tail keeps no allocation, not even the emptied chunk list's
    /// buffer (every replica that was ever written to would keep one otherwise).
    #[test]
    fn an_idle_tail_gives_back_its_chunk_list_too() {
        let budget = TailCacheBudget::new(1 << 20, 1 << 20);
        let mut tail = TailCache::new(budget.clone());
        let mut position = 0;
        for offset in 0..8 {
            tail.push(&[0u8; 100], position, offset, offset + 1);
            position += 100;
        }
        assert_eq!(tail.bytes(), 800);
        tail.release_if_idle(); // appended to since the last pass: kept
        assert_eq!(tail.bytes(), 800);
        assert!(tail.chunks.capacity() >= 8);
        tail.release_if_idle();
        assert_eq!((tail.bytes(), budget.used_bytes()), (0, 0));
        assert_eq!(tail.chunks.capacity(), 0, "the idle tail kept its chunk list's buffer");
    }
}

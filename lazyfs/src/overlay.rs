//! The unsynced state of one file: what writes and truncates since its last fsync changed,
//! kept apart from the backing file so that a power cut can drop it.
//!
//! The file as the mount shows it is: the backing file's first `base_len` bytes, zeros after
//! them up to `size`, and the unsynced extents laid over that. A truncate shrinks `base_len`
//! (the backing bytes past it are gone as far as readers know) without touching the backing
//! file; [`Overlay::apply`] makes the backing file equal to that view.

use std::collections::BTreeMap;
use std::io;

/// The backing file, as the overlay needs it (a `File` in the mount, a `Vec<u8>` in tests).
pub trait Backing {
    /// Reads at `offset` into `buf`; fewer bytes than asked (0 at end of file) is not an error.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    fn write_all_at(&self, data: &[u8], offset: u64) -> io::Result<()>;
    fn set_len(&self, len: u64) -> io::Result<()>;
}

impl Backing for std::fs::File {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        std::os::unix::fs::FileExt::read_at(self, buf, offset)
    }
    fn write_all_at(&self, data: &[u8], offset: u64) -> io::Result<()> {
        std::os::unix::fs::FileExt::write_all_at(self, data, offset)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        std::fs::File::set_len(self, len)
    }
}

#[derive(Debug, Clone)]
pub struct Overlay {
    /// The file's size as the mount shows it.
    size: u64,
    /// How much of the backing file is still part of the file (shrunk by unsynced truncates).
    base_len: u64,
    /// Unsynced data by offset; extents neither overlap nor touch (touching ones are merged).
    extents: BTreeMap<u64, Vec<u8>>,
    /// Sum of the extents' lengths.
    unsynced_bytes: u64,
}

impl Overlay {
    /// An overlay with no changes over a backing file of `backing_len` bytes.
    pub fn new(backing_len: u64) -> Self {
        Self {
            size: backing_len,
            base_len: backing_len,
            extents: BTreeMap::new(),
            unsynced_bytes: 0,
        }
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    /// Bytes of written data held in memory only.
    pub fn unsynced_bytes(&self) -> u64 {
        self.unsynced_bytes
    }

    /// Records a write of `data` at `offset`.
    pub fn write(&mut self, offset: u64, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let end = offset + data.len() as u64;
        // Extents overlapping or touching [offset, end), highest first.
        let touching: Vec<u64> = self
            .extents
            .range(..=end)
            .rev()
            .take_while(|(start, bytes)| *start + bytes.len() as u64 >= offset)
            .map(|(start, _)| *start)
            .collect();
        let merged_start = touching.last().map_or(offset, |&s| s.min(offset));
        let merged_end = touching
            .first()
            .map_or(end, |&s| (s + self.extents[&s].len() as u64).max(end));
        // Reuse the lowest extent's buffer when it starts the merged range (appends do).
        let mut merged = match touching.last() {
            Some(&s) if s == merged_start => self.remove_extent(s),
            _ => Vec::new(),
        };
        merged.resize((merged_end - merged_start) as usize, 0);
        for &s in &touching {
            if s != merged_start {
                let bytes = self.remove_extent(s);
                let at = (s - merged_start) as usize;
                merged[at..at + bytes.len()].copy_from_slice(&bytes);
            }
        }
        let at = (offset - merged_start) as usize;
        merged[at..at + data.len()].copy_from_slice(data);
        self.unsynced_bytes += merged.len() as u64;
        self.extents.insert(merged_start, merged);
        self.size = self.size.max(end);
    }

    /// Records a truncate (or extension) of the file to `len` bytes.
    pub fn set_len(&mut self, len: u64) {
        let cut: Vec<u64> = self.extents.range(len..).map(|(s, _)| *s).collect();
        for s in cut {
            self.remove_extent(s);
        }
        if let Some((&s, bytes)) = self.extents.range_mut(..len).next_back() {
            let keep = (len - s) as usize;
            if bytes.len() > keep {
                self.unsynced_bytes -= (bytes.len() - keep) as u64;
                bytes.truncate(keep);
            }
        }
        self.base_len = self.base_len.min(len);
        self.size = len;
    }

    /// Reads up to `len` bytes at `offset` of the file as the mount shows it.
    pub fn read(&self, backing: &impl Backing, offset: u64, len: u32) -> io::Result<Vec<u8>> {
        let end = self.size.min(offset.saturating_add(u64::from(len)));
        if offset >= end {
            return Ok(Vec::new());
        }
        let mut buf = vec![0u8; (end - offset) as usize];
        let from_backing = self.base_len.min(end).saturating_sub(offset) as usize;
        let mut filled = 0;
        while filled < from_backing {
            let n = backing.read_at(&mut buf[filled..from_backing], offset + filled as u64)?;
            if n == 0 {
                break; // The backing file is shorter than it was: the rest reads as zeros.
            }
            filled += n;
        }
        for (&s, bytes) in self.extents.range(..end).rev() {
            let e = s + bytes.len() as u64;
            if e <= offset {
                break;
            }
            let (from, to) = (s.max(offset), e.min(end));
            buf[(from - offset) as usize..(to - offset) as usize]
                .copy_from_slice(&bytes[(from - s) as usize..(to - s) as usize]);
        }
        Ok(buf)
    }

    /// Makes the backing file what the mount shows (an fsync, or writeback under memory
    /// pressure), after which the overlay is empty over a backing file of `size()` bytes.
    pub fn apply(&mut self, backing: &impl Backing, backing_len: u64) -> io::Result<()> {
        if self.base_len < backing_len {
            backing.set_len(self.base_len)?;
        }
        for (&s, bytes) in &self.extents {
            backing.write_all_at(bytes, s)?;
        }
        backing.set_len(self.size)?;
        *self = Self::new(self.size);
        Ok(())
    }

    fn remove_extent(&mut self, start: u64) -> Vec<u8> {
        let bytes = self.extents.remove(&start).unwrap_or_default();
        self.unsynced_bytes -= bytes.len() as u64;
        bytes
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;

    /// An in-memory backing file.
    struct Mem(RefCell<Vec<u8>>);

    impl Backing for Mem {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
            let data = self.0.borrow();
            let start = (offset as usize).min(data.len());
            let n = buf.len().min(data.len() - start);
            buf[..n].copy_from_slice(&data[start..start + n]);
            Ok(n)
        }
        fn write_all_at(&self, data: &[u8], offset: u64) -> io::Result<()> {
            let mut d = self.0.borrow_mut();
            let end = offset as usize + data.len();
            if d.len() < end {
                d.resize(end, 0);
            }
            d[offset as usize..end].copy_from_slice(data);
            Ok(())
        }
        fn set_len(&self, len: u64) -> io::Result<()> {
            self.0.borrow_mut().resize(len as usize, 0);
            Ok(())
        }
    }

    /// The file under test: a backing file, its overlay, and a model of what a reader must
    /// see (`view`) and what a power cut must leave (`durable`).
    struct Case {
        backing: Mem,
        overlay: Overlay,
        view: Vec<u8>,
        durable: Vec<u8>,
    }

    impl Case {
        fn new(initial: &[u8]) -> Self {
            Self {
                backing: Mem(RefCell::new(initial.to_vec())),
                overlay: Overlay::new(initial.len() as u64),
                view: initial.to_vec(),
                durable: initial.to_vec(),
            }
        }
        fn write(&mut self, offset: usize, data: &[u8]) {
            self.overlay.write(offset as u64, data);
            if self.view.len() < offset + data.len() {
                self.view.resize(offset + data.len(), 0);
            }
            self.view[offset..offset + data.len()].copy_from_slice(data);
            self.check();
        }
        fn truncate(&mut self, len: usize) {
            self.overlay.set_len(len as u64);
            self.view.resize(len, 0);
            self.check();
        }
        fn fsync(&mut self) {
            let len = self.backing.0.borrow().len() as u64;
            self.overlay.apply(&self.backing, len).unwrap();
            self.durable = self.view.clone();
            assert_eq!(*self.backing.0.borrow(), self.view);
            self.check();
        }
        fn cut(&mut self) {
            self.overlay = Overlay::new(self.backing.0.borrow().len() as u64);
            self.view = self.durable.clone();
            assert_eq!(
                *self.backing.0.borrow(),
                self.durable,
                "unsynced data reached the backing file"
            );
            self.check();
        }
        /// Every read window, and the size, match the model.
        fn check(&self) {
            assert_eq!(self.overlay.size(), self.view.len() as u64);
            let n = self.view.len() + 3;
            for offset in 0..n {
                for len in [1usize, 2, 5, n] {
                    let got = self.overlay.read(&self.backing, offset as u64, len as u32).unwrap();
                    let end = (offset + len).min(self.view.len());
                    let want = if offset >= end {
                        &[][..]
                    } else {
                        &self.view[offset..end]
                    };
                    assert_eq!(got, want, "read({offset}, {len})");
                }
            }
        }
    }

    #[test]
    fn appends_are_read_back_and_lost_on_cut() {
        let mut c = Case::new(b"abc");
        c.write(3, b"def");
        c.write(6, b"gh");
        assert_eq!(c.overlay.unsynced_bytes(), 5);
        assert_eq!(c.overlay.extents.len(), 1, "touching appends merge into one extent");
        c.cut();
        assert_eq!(c.view, b"abc");
    }

    #[test]
    fn fsync_makes_writes_survive_a_cut() {
        let mut c = Case::new(b"");
        c.write(0, b"hello");
        c.fsync();
        c.write(5, b" world");
        c.cut();
        assert_eq!(c.view, b"hello");
    }

    #[test]
    fn overlapping_writes_merge_in_write_order() {
        let mut c = Case::new(b"0123456789");
        c.write(2, b"aa");
        c.write(6, b"bb");
        c.write(1, b"XXXXXXX");
        c.write(12, b"far");
        c.write(9, b"yyy");
        assert_eq!(
            c.overlay.unsynced_bytes(),
            c.overlay.extents.values().map(|e| e.len() as u64).sum::<u64>()
        );
        c.fsync();
        c.cut();
    }

    #[test]
    fn truncate_hides_backing_bytes_until_cut() {
        let mut c = Case::new(b"0123456789");
        c.truncate(4);
        c.write(6, b"zz");
        c.truncate(7);
        c.cut();
        assert_eq!(c.view, b"0123456789", "an unsynced truncate is undone by a cut");
        c.truncate(2);
        c.truncate(8);
        c.fsync();
        assert_eq!(c.view, b"01\0\0\0\0\0\0");
    }

    #[test]
    fn truncate_trims_unsynced_extents() {
        let mut c = Case::new(b"");
        c.write(0, b"abcdef");
        c.write(10, b"gh");
        c.truncate(3);
        assert_eq!(c.overlay.unsynced_bytes(), 3);
        c.write(5, b"i");
        c.fsync();
        c.write(0, b"j");
        c.cut();
        assert_eq!(c.view, b"abc\0\0i");
    }

    #[test]
    fn random_sequences_match_the_model() {
        // A small deterministic generator: the same sequences on every run.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move |bound: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % bound
        };
        for _ in 0..200 {
            let initial: Vec<u8> = (0..next(12)).map(|i| b'A' + i as u8).collect();
            let mut c = Case::new(&initial);
            for step in 0..12u8 {
                match next(10) {
                    0..=4 => {
                        let data: Vec<u8> = (0..1 + next(6)).map(|i| b'a' + step + i as u8).collect();
                        c.write(next(16) as usize, &data);
                    }
                    5 | 6 => c.truncate(next(18) as usize),
                    7 | 8 => c.fsync(),
                    _ => c.cut(),
                }
            }
        }
    }
}

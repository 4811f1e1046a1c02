//! The segment files a node holds open: at most [`FileCache::capacity`] at once, however many
//! segments its partitions have, so a node hosts more partition replicas than its open-files
//! limit allows descriptors.
//!
//! Every segment's `.log` is a [`CachedFile`]: open while it is used, closed by the cache when
//! more than its capacity are open and it is the one least recently used, and reopened by the
//! next read or append. Index files were never held open (`index.rs`), so an idle replica holds
//! no descriptor once its file is closed.
//!
//! The cache is a CLOCK: a use sets the file's `referenced` bit (no shared lock); admitting a
//! file past the capacity sweeps the ring of open files, clearing set bits and closing the
//! first file whose bit was clear. Only opening a closed file takes the cache's lock, so files
//! in use cost one uncontended lock of their own and an atomic store per access.
//!
//! A closed file is reopened under the name the segment has then: the one rename of a live
//! segment (its pending name, see `segment.rs`) happens under the same lock as a reopen. A
//! segment removed from its log retires its file: a reader still holding it reads on through the
//! open file if there is one, and is told the segment is gone otherwise, never reopening another
//! file that took the same name (a cleaned segment, a log truncated and refilled).
//!
//! Reads take the file when they start and drop it when they end, so a file closed by the cache
//! mid-read stays open until that read ends: the descriptors in use are the capacity plus the
//! reads running (`num.io.threads`), whatever a fetch planned.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

/// The node's bound on open segment files, shared by every partition log.
#[derive(Debug)]
pub struct FileCache {
    capacity: usize,
    ring: Mutex<Ring>,
    /// Files opened again after the cache closed them.
    reopened: AtomicU64,
    /// Files the cache closed to stay within its capacity.
    closed: AtomicU64,
}

/// The files the cache holds open, in admission order, and the CLOCK's hand.
#[derive(Debug, Default)]
struct Ring {
    entries: Vec<Weak<Shared>>,
    hand: usize,
}

/// What [`FileCache::stats`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileCacheStats {
    /// Segment files held open by the cache now (dropped segments not yet swept included).
    pub open: usize,
    pub capacity: usize,
    pub reopened: u64,
    pub closed: u64,
}

impl FileCache {
    /// A cache holding at most `capacity` files open (at least one).
    pub fn new(capacity: usize) -> Arc<FileCache> {
        Arc::new(FileCache {
            capacity: capacity.max(1),
            ring: Mutex::new(Ring::default()),
            reopened: AtomicU64::new(0),
            closed: AtomicU64::new(0),
        })
    }

    /// A cache that never closes a file: for tools and tests that open a few logs.
    pub fn unbounded() -> Arc<FileCache> {
        FileCache::new(usize::MAX)
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn stats(&self) -> FileCacheStats {
        FileCacheStats {
            open: self.ring.lock().entries.len(),
            capacity: self.capacity,
            reopened: self.reopened.load(Ordering::Relaxed),
            closed: self.closed.load(Ordering::Relaxed),
        }
    }

    /// Counts `shared`, just opened, among the open files, and closes files least recently
    /// used until no more than the capacity are open. The closed files are dropped after the
    /// cache's lock is released.
    fn admit(&self, shared: &Arc<Shared>) {
        let mut evicted: Vec<Arc<File>> = Vec::new();
        {
            let mut ring = self.ring.lock();
            ring.entries.push(Arc::downgrade(shared));
            // Two turns of the hand clear every bit set before the sweep; a file whose lock is
            // held (in use right now) is passed over, so the sweep ends even if all are busy,
            // leaving the ring over capacity until the next admission.
            let mut steps = 2 * ring.entries.len() + 1;
            while ring.entries.len() > self.capacity && steps > 0 {
                steps -= 1;
                let i = ring.hand % ring.entries.len();
                let Some(entry) = ring.entries[i].upgrade() else {
                    ring.entries.swap_remove(i); // its segment was dropped, and its file with it
                    continue;
                };
                if entry.referenced.swap(false, Ordering::Relaxed) {
                    ring.hand = i + 1;
                    continue;
                }
                let Some(mut state) = entry.state.try_lock() else {
                    ring.hand = i + 1;
                    continue;
                };
                if let Some(file) = state.file.take() {
                    evicted.push(file);
                }
                drop(state);
                ring.entries.swap_remove(i);
            }
        }
        self.closed.fetch_add(evicted.len() as u64, Ordering::Relaxed);
    }
}

/// One segment's `.log` file through the cache: open on demand. Clones share the file.
#[derive(Debug, Clone)]
pub(super) struct CachedFile {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    cache: Arc<FileCache>,
    /// Set by every use, cleared by the CLOCK's hand.
    referenced: AtomicBool,
    state: Mutex<FileState>,
}

#[derive(Debug)]
struct FileState {
    /// The file's directory (the partition's, shared with its log and segments) and current
    /// name: reopens use them. The name is boxed to its length and the directory not copied:
    /// every segment of every hosted replica keeps one.
    dir: Arc<Path>,
    name: Box<str>,
    /// `None` while the cache has it closed.
    file: Option<Arc<File>>,
    /// The segment left its log: a closed file is not reopened (see [`CachedFile::retire`]).
    retired: bool,
}

impl FileState {
    fn path(&self) -> PathBuf {
        self.dir.join(&*self.name)
    }
}

impl CachedFile {
    /// Opens `dir`/`name` with `options` and admits it to `cache`.
    pub fn open(
        cache: &Arc<FileCache>,
        dir: &Arc<Path>,
        name: String,
        options: &OpenOptions,
    ) -> io::Result<CachedFile> {
        let file = Arc::new(options.open(dir.join(&name))?);
        let shared = Arc::new(Shared {
            cache: cache.clone(),
            referenced: AtomicBool::new(true),
            state: Mutex::new(FileState {
                dir: dir.clone(),
                name: name.into_boxed_str(),
                file: Some(file),
                retired: false,
            }),
        });
        cache.admit(&shared);
        Ok(CachedFile { shared })
    }

    /// The open file, reopened (read and write) if the cache had closed it. `NotFound` once
    /// the segment is retired and its file closed.
    pub fn get(&self) -> io::Result<Arc<File>> {
        self.shared.referenced.store(true, Ordering::Relaxed);
        let mut state = self.shared.state.lock();
        if let Some(file) = &state.file {
            return Ok(file.clone());
        }
        if state.retired {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{} was removed from its log", state.path().display()),
            ));
        }
        let file = Arc::new(OpenOptions::new().read(true).write(true).open(state.path())?);
        state.file = Some(file.clone());
        drop(state);
        self.shared.cache.reopened.fetch_add(1, Ordering::Relaxed);
        self.shared.cache.admit(&self.shared);
        Ok(file)
    }

    /// The file's metadata, without opening it when the cache has it closed (retention asks
    /// every segment's modification time; that must not churn the cache).
    pub fn metadata(&self) -> io::Result<std::fs::Metadata> {
        let state = self.shared.state.lock();
        match &state.file {
            Some(file) => file.metadata(),
            None => std::fs::metadata(state.path()),
        }
    }

    /// Renames the file to `to` in its directory; a later reopen uses the new name.
    pub fn rename(&self, to: String) -> io::Result<()> {
        let mut state = self.shared.state.lock();
        std::fs::rename(state.path(), state.dir.join(&to))?;
        state.name = to.into_boxed_str();
        Ok(())
    }

    /// The file's current path.
    pub fn path(&self) -> PathBuf {
        self.shared.state.lock().path()
    }

    /// The segment left its log (deleted, replaced, or the log closed): from now on a closed
    /// file is never reopened, since its name may be another segment's by then. Clones held by
    /// reads keep the file while it is open.
    pub fn retire(&self) {
        self.shared.state.lock().retired = true;
    }

    /// Whether the file is open now (the cache has not closed it).
    #[cfg(test)]
    pub fn is_open(&self) -> bool {
        self.shared.state.lock().file.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    fn create(cache: &Arc<FileCache>, dir: &Path, name: &str) -> CachedFile {
        let mut options = OpenOptions::new();
        options.read(true).write(true).create(true).truncate(true);
        CachedFile::open(cache, &Arc::from(dir), name.to_string(), &options).unwrap()
    }

    #[test]
    fn no_more_than_the_capacity_stay_open_and_a_closed_file_reopens_with_its_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let cache = FileCache::new(2);
        let files: Vec<CachedFile> = (0..5)
            .map(|i| create(&cache, dir.path(), &format!("{i}.log")))
            .collect();
        for (i, f) in files.iter().enumerate() {
            f.get()
                .unwrap()
                .write_all_at(format!("file {i}").as_bytes(), 0)
                .unwrap();
        }
        let stats = cache.stats();
        assert!(stats.open <= 2, "{stats:?}");
        assert_eq!(files.iter().filter(|f| f.is_open()).count(), stats.open);
        assert!(stats.closed >= 3, "{stats:?}");
        for (i, f) in files.iter().enumerate() {
            let mut buf = vec![0; 6];
            f.get().unwrap().read_exact_at(&mut buf, 0).unwrap();
            assert_eq!(buf, format!("file {i}").as_bytes());
            assert!(cache.stats().open <= 2);
        }
        assert!(cache.stats().reopened >= 3);
    }

    #[test]
    fn a_file_used_since_the_last_sweep_outlives_one_that_was_not() {
        let dir = tempfile::tempdir().unwrap();
        let cache = FileCache::new(2);
        let a = create(&cache, dir.path(), "a.log");
        let b = create(&cache, dir.path(), "b.log");
        // A sweep clears both bits and closes one; `a` is used after, `b` is not.
        let c = create(&cache, dir.path(), "c.log");
        assert!(!a.is_open() && b.is_open() && c.is_open());
        b.get().unwrap();
        let _d = create(&cache, dir.path(), "d.log");
        assert!(b.is_open(), "the file used since the last sweep was closed");
        assert!(!c.is_open(), "the file unused since the last sweep stayed open");
        assert_eq!(cache.stats().open, 2);
    }

    #[test]
    fn a_renamed_file_reopens_under_its_new_name_and_dropped_files_leave_the_ring() {
        let dir = tempfile::tempdir().unwrap();
        let cache = FileCache::new(1);
        let a = create(&cache, dir.path(), "a.log.pending-7");
        a.get().unwrap().write_all_at(b"kept", 0).unwrap();
        let b = create(&cache, dir.path(), "b.log");
        assert!(!a.is_open());
        a.rename("a.log".to_string()).unwrap();
        assert_eq!(a.metadata().unwrap().len(), 4, "metadata of a closed file by its name");
        let mut buf = [0; 4];
        a.get().unwrap().read_exact_at(&mut buf, 0).unwrap();
        assert_eq!(&buf, b"kept");
        assert_eq!(a.path(), dir.path().join("a.log"));
        drop(a);
        drop(b);
        let _c = create(&cache, dir.path(), "c.log");
        assert_eq!(cache.stats().open, 1, "dropped files are swept out of the ring");
    }

    #[test]
    fn a_retired_file_reads_on_while_open_and_never_reopens_a_namesake() {
        let dir = tempfile::tempdir().unwrap();
        let cache = FileCache::new(1);
        let old = create(&cache, dir.path(), "0.log");
        old.get().unwrap().write_all_at(b"old", 0).unwrap();
        let reader = old.clone();
        old.retire();
        drop(old);
        std::fs::remove_file(dir.path().join("0.log")).unwrap();
        let mut buf = [0; 3];
        reader.get().unwrap().read_exact_at(&mut buf, 0).unwrap();
        assert_eq!(&buf, b"old", "a retired file still open reads on");
        // A new segment takes the name, and pushes the old file out of the cache.
        let new = create(&cache, dir.path(), "0.log");
        new.get().unwrap().write_all_at(b"new", 0).unwrap();
        create(&cache, dir.path(), "1.log");
        assert!(!reader.is_open());
        let err = reader.get().unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound, "{err}");
    }

    #[test]
    fn an_unbounded_cache_closes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let cache = FileCache::unbounded();
        let files: Vec<CachedFile> = (0..20).map(|i| create(&cache, dir.path(), &format!("{i}"))).collect();
        assert!(files.iter().all(CachedFile::is_open));
        assert_eq!(cache.stats().closed, 0);
    }
}

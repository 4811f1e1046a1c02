//! The FUSE file system: a pass-through to a backing directory, except that file data written
//! stays in memory ([`Overlay`]) until the file is fsynced, so that [`LazyFs::cut`] can drop it
//! as a power loss would.
//!
//! Simplifications, on purpose: metadata operations (create, mkdir, rename, unlink, rmdir,
//! chmod) reach the backing directory at once, as on a file system that journals metadata
//! before data; times and ownership are the backing file's; symlinks, hard links, xattrs and
//! fallocate are not supported. Every open uses direct I/O so the kernel caches no file data
//! that a cut would make stale, and attributes are never cached for the same reason.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner, Notifier, OpenFlags,
    RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs,
    ReplyWrite, Request, TimeOrNow, WriteFlags,
};
use parking_lot::Mutex;

use crate::overlay::Overlay;

/// Attributes and entries are not cached: a cut changes sizes behind the kernel's back.
const TTL: Duration = Duration::ZERO;

/// A clone shares the same file system (the FUSE session and the control socket both hold one).
#[derive(Clone)]
pub struct LazyFs(Arc<Inner>);

struct Inner {
    root: PathBuf,
    /// The most unsynced data held; past it the oldest dirty file is written back.
    max_unsynced_bytes: u64,
    state: Mutex<State>,
    /// Set once mounted; used to drop the kernel's view of files a cut changed.
    notifier: OnceLock<Notifier>,
}

struct State {
    nodes: HashMap<u64, Node>,
    by_path: HashMap<PathBuf, u64>,
    next_ino: u64,
    unsynced_bytes: u64,
    /// Orders dirty files by their first unsynced change, for writeback under the limit.
    next_dirty_seq: u64,
}

struct Node {
    /// Relative to the backing root; `None` once unlinked (open handles may still use it).
    path: Option<PathBuf>,
    lookups: u64,
    open_handles: u64,
    /// The backing file, opened read-write while the file is open or dirty.
    file: Option<Arc<File>>,
    overlay: Option<Overlay>,
    dirty_seq: u64,
}

impl Node {
    fn new(path: PathBuf) -> Self {
        Self {
            path: Some(path),
            lookups: 0,
            open_handles: 0,
            file: None,
            overlay: None,
            dirty_seq: 0,
        }
    }
}

fn errno(e: io::Error) -> Errno {
    Errno::from(e)
}

impl LazyFs {
    pub fn new(root: PathBuf, max_unsynced_bytes: u64) -> Self {
        let mut state = State {
            nodes: HashMap::new(),
            by_path: HashMap::new(),
            next_ino: INodeNo::ROOT.0 + 1,
            unsynced_bytes: 0,
            next_dirty_seq: 0,
        };
        let mut root_node = Node::new(PathBuf::new());
        root_node.lookups = 1;
        state.nodes.insert(INodeNo::ROOT.0, root_node);
        state.by_path.insert(PathBuf::new(), INodeNo::ROOT.0);
        Self(Arc::new(Inner {
            root,
            max_unsynced_bytes,
            state: Mutex::new(state),
            notifier: OnceLock::new(),
        }))
    }

    pub fn set_notifier(&self, notifier: Notifier) {
        let _ = self.0.notifier.set(notifier);
    }

    /// Bytes of written data held in memory, not yet in the backing directory.
    pub fn unsynced_bytes(&self) -> u64 {
        self.0.state.lock().unsynced_bytes
    }

    /// Power cut: drops every unsynced write and truncate; returns the bytes of data dropped.
    pub fn cut(&self) -> u64 {
        let (dropped, changed) = {
            let mut st = self.0.state.lock();
            let mut changed = Vec::new();
            for (&ino, node) in st.nodes.iter_mut() {
                if node.overlay.take().is_some() {
                    changed.push(ino);
                }
                if node.open_handles == 0 {
                    node.file = None;
                }
            }
            (std::mem::take(&mut st.unsynced_bytes), changed)
        };
        // Outside the lock: the kernel may call back into the file system.
        if let Some(notifier) = self.0.notifier.get() {
            for ino in changed {
                let _ = notifier.inval_inode(INodeNo(ino), 0, 0);
            }
        }
        tracing::info!(dropped_bytes = dropped, "power cut: unsynced writes dropped");
        dropped
    }

    fn full_path(&self, rel: &Path) -> PathBuf {
        self.0.root.join(rel)
    }
}

impl State {
    fn path(&self, ino: INodeNo) -> Result<PathBuf, Errno> {
        self.nodes.get(&ino.0).and_then(|n| n.path.clone()).ok_or(Errno::ENOENT)
    }

    fn intern(&mut self, path: PathBuf) -> u64 {
        if let Some(&ino) = self.by_path.get(&path) {
            return ino;
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        self.by_path.insert(path.clone(), ino);
        self.nodes.insert(ino, Node::new(path));
        ino
    }

    /// The file at `path` is gone (unlinked or replaced by a rename): its unsynced data with it.
    fn detach(&mut self, path: &Path) {
        if let Some(ino) = self.by_path.remove(path) {
            if let Some(node) = self.nodes.get_mut(&ino) {
                node.path = None;
                if let Some(o) = node.overlay.take() {
                    self.unsynced_bytes -= o.unsynced_bytes();
                }
            }
            self.maybe_forget(ino);
        }
    }

    fn maybe_forget(&mut self, ino: u64) {
        let Some(node) = self.nodes.get(&ino) else { return };
        if ino != INodeNo::ROOT.0 && node.lookups == 0 && node.open_handles == 0 && node.overlay.is_none() {
            if let Some(p) = &node.path {
                self.by_path.remove(p);
            }
            self.nodes.remove(&ino);
        }
    }

    fn backing(&mut self, root: &Path, ino: INodeNo) -> Result<Arc<File>, Errno> {
        let node = self.nodes.get_mut(&ino.0).ok_or(Errno::ENOENT)?;
        if let Some(f) = &node.file {
            return Ok(f.clone());
        }
        let path = node.path.as_ref().ok_or(Errno::ENOENT)?;
        let f = Arc::new(
            OpenOptions::new()
                .read(true)
                .write(true)
                .open(root.join(path))
                .map_err(errno)?,
        );
        node.file = Some(f.clone());
        Ok(f)
    }

    /// Writes the file's overlay to the backing file (fsync, or writeback past the limit).
    fn write_back(&mut self, ino: u64) -> io::Result<()> {
        let Some(node) = self.nodes.get_mut(&ino) else {
            return Ok(());
        };
        let (Some(overlay), Some(file)) = (node.overlay.as_mut(), node.file.as_ref()) else {
            return Ok(());
        };
        let held = overlay.unsynced_bytes();
        let backing_len = file.metadata()?.len();
        overlay.apply(file.as_ref(), backing_len)?;
        node.overlay = None;
        self.unsynced_bytes -= held;
        Ok(())
    }

    fn enforce_limit(&mut self, max_unsynced_bytes: u64) -> io::Result<()> {
        while self.unsynced_bytes > max_unsynced_bytes {
            let oldest = self
                .nodes
                .iter()
                .filter(|(_, n)| n.overlay.as_ref().is_some_and(|o| o.unsynced_bytes() > 0))
                .min_by_key(|(_, n)| n.dirty_seq)
                .map(|(&ino, _)| ino);
            match oldest {
                Some(ino) => self.write_back(ino)?,
                None => break,
            }
        }
        Ok(())
    }
}

fn kind_of(meta: &Metadata) -> FileType {
    let t = meta.file_type();
    if t.is_dir() {
        FileType::Directory
    } else if t.is_symlink() {
        FileType::Symlink
    } else if t.is_fifo() {
        FileType::NamedPipe
    } else if t.is_socket() {
        FileType::Socket
    } else if t.is_char_device() {
        FileType::CharDevice
    } else if t.is_block_device() {
        FileType::BlockDevice
    } else {
        FileType::RegularFile
    }
}

fn time(secs: i64, nsecs: i64) -> SystemTime {
    if secs >= 0 {
        UNIX_EPOCH + Duration::new(secs as u64, nsecs.clamp(0, 999_999_999) as u32)
    } else {
        UNIX_EPOCH
    }
}

fn attr(ino: u64, meta: &Metadata, overlay: Option<&Overlay>) -> FileAttr {
    let size = overlay.map_or(meta.len(), Overlay::size);
    FileAttr {
        ino: INodeNo(ino),
        size,
        blocks: size.div_ceil(512),
        atime: time(meta.atime(), meta.atime_nsec()),
        mtime: time(meta.mtime(), meta.mtime_nsec()),
        ctime: time(meta.ctime(), meta.ctime_nsec()),
        crtime: UNIX_EPOCH,
        kind: kind_of(meta),
        perm: (meta.mode() & 0o7777) as u16,
        nlink: meta.nlink() as u32,
        uid: meta.uid(),
        gid: meta.gid(),
        rdev: meta.rdev() as u32,
        blksize: 4096,
        flags: 0,
    }
}

impl LazyFs {
    fn attr_of(&self, st: &State, ino: INodeNo) -> Result<FileAttr, Errno> {
        let node = st.nodes.get(&ino.0).ok_or(Errno::ENOENT)?;
        let meta = match (&node.file, &node.path) {
            (Some(f), _) => f.metadata(),
            (None, Some(p)) => std::fs::symlink_metadata(self.full_path(p)),
            (None, None) => return Err(Errno::ENOENT),
        }
        .map_err(errno)?;
        Ok(attr(ino.0, &meta, node.overlay.as_ref()))
    }

    /// Looks `path` up after it was created or found: one more kernel reference to it.
    fn entry(&self, st: &mut State, path: PathBuf) -> Result<FileAttr, Errno> {
        std::fs::symlink_metadata(self.full_path(&path)).map_err(errno)?;
        let ino = st.intern(path);
        if let Some(n) = st.nodes.get_mut(&ino) {
            n.lookups += 1;
        }
        self.attr_of(st, INodeNo(ino))
    }

    fn child(st: &State, parent: INodeNo, name: &OsStr) -> Result<PathBuf, Errno> {
        Ok(st.path(parent)?.join(name))
    }

    /// Unlink and rmdir: `remove` takes the entry off the backing directory, then its node
    /// forgets the path.
    fn remove(
        &self,
        parent: INodeNo,
        name: &OsStr,
        reply: ReplyEmpty,
        remove: impl FnOnce(&Path) -> std::io::Result<()>,
    ) {
        let mut st = self.0.state.lock();
        let result = Self::child(&st, parent, name).and_then(|p| {
            remove(&self.full_path(&p)).map_err(errno)?;
            st.detach(&p);
            Ok(())
        });
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn open_node(&self, st: &mut State, ino: INodeNo) -> Result<(), Errno> {
        st.backing(&self.0.root, ino)?;
        if let Some(n) = st.nodes.get_mut(&ino.0) {
            n.open_handles += 1;
        }
        Ok(())
    }

    fn set_len(&self, st: &mut State, ino: INodeNo, len: u64) -> Result<(), Errno> {
        let file = st.backing(&self.0.root, ino)?;
        let backing_len = file.metadata().map_err(errno)?.len();
        let seq = st.next_dirty_seq;
        let node = st.nodes.get_mut(&ino.0).ok_or(Errno::ENOENT)?;
        let overlay = node.overlay.get_or_insert_with(|| Overlay::new(backing_len));
        let before = overlay.unsynced_bytes();
        overlay.set_len(len);
        let after = overlay.unsynced_bytes();
        if before == 0 {
            node.dirty_seq = seq;
            st.next_dirty_seq += 1;
        }
        st.unsynced_bytes = st.unsynced_bytes + after - before;
        Ok(())
    }
}

impl Filesystem for LazyFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let mut st = self.0.state.lock();
        match Self::child(&st, parent, name).and_then(|p| self.entry(&mut st, p)) {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        let mut st = self.0.state.lock();
        if let Some(n) = st.nodes.get_mut(&ino.0) {
            n.lookups = n.lookups.saturating_sub(nlookup);
        }
        st.maybe_forget(ino.0);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let st = self.0.state.lock();
        match self.attr_of(&st, ino) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mut st = self.0.state.lock();
        let result = (|| {
            if let Some(mode) = mode {
                let path = self.full_path(&st.path(ino)?);
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & 0o7777)).map_err(errno)?;
            }
            if let Some(len) = size {
                self.set_len(&mut st, ino, len)?;
                st.enforce_limit(self.0.max_unsynced_bytes).map_err(errno)?;
            }
            self.attr_of(&st, ino)
        })();
        match result {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        let mut st = self.0.state.lock();
        let result = Self::child(&st, parent, name).and_then(|p| {
            let full = self.full_path(&p);
            std::fs::create_dir(&full).map_err(errno)?;
            std::fs::set_permissions(&full, std::fs::Permissions::from_mode(mode & !umask & 0o7777)).map_err(errno)?;
            self.entry(&mut st, p)
        });
        match result {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.remove(parent, name, reply, |path| std::fs::remove_file(path));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.remove(parent, name, reply, |path| std::fs::remove_dir(path));
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if !flags.is_empty() {
            return reply.error(Errno::EINVAL);
        }
        let mut st = self.0.state.lock();
        let result = (|| {
            let from = Self::child(&st, parent, name)?;
            let to = Self::child(&st, newparent, newname)?;
            std::fs::rename(self.full_path(&from), self.full_path(&to)).map_err(errno)?;
            st.detach(&to);
            // The renamed entry and everything under it (a directory) move to the new path.
            let moved: Vec<(PathBuf, u64)> = st
                .by_path
                .iter()
                .filter(|(p, _)| p.starts_with(&from))
                .map(|(p, &ino)| (p.clone(), ino))
                .collect();
            for (old, ino) in moved {
                st.by_path.remove(&old);
                let new = match old.strip_prefix(&from) {
                    Ok(rest) if rest.as_os_str().is_empty() => to.clone(),
                    Ok(rest) => to.join(rest),
                    Err(_) => continue,
                };
                st.by_path.insert(new.clone(), ino);
                if let Some(n) = st.nodes.get_mut(&ino) {
                    n.path = Some(new);
                }
            }
            Ok(())
        })();
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let mut st = self.0.state.lock();
        match self.open_node(&mut st, ino) {
            Ok(()) => reply.opened(FileHandle(ino.0), FopenFlags::FOPEN_DIRECT_IO),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let mut st = self.0.state.lock();
        let result = (|| {
            let path = Self::child(&st, parent, name)?;
            let mut opts = OpenOptions::new();
            opts.read(true).write(true).mode(mode & !umask & 0o7777);
            if flags & libc::O_EXCL != 0 {
                opts.create_new(true);
            } else {
                opts.create(true);
            }
            let file = opts.open(self.full_path(&path)).map_err(errno)?;
            let a = self.entry(&mut st, path)?;
            if let Some(n) = st.nodes.get_mut(&a.ino.0) {
                n.file = Some(Arc::new(file));
                n.open_handles += 1;
            }
            if flags & libc::O_TRUNC != 0 {
                self.set_len(&mut st, a.ino, 0)?;
            }
            self.attr_of(&st, a.ino)
        })();
        match result {
            Ok(a) => reply.created(
                &TTL,
                &a,
                Generation(0),
                FileHandle(a.ino.0),
                FopenFlags::FOPEN_DIRECT_IO,
            ),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let mut st = self.0.state.lock();
        let result = (|| {
            let file = st.backing(&self.0.root, ino)?;
            let node = st.nodes.get(&ino.0).ok_or(Errno::ENOENT)?;
            match &node.overlay {
                Some(o) => o.read(file.as_ref(), offset, size),
                None => Overlay::new(file.metadata().map_err(errno)?.len()).read(file.as_ref(), offset, size),
            }
            .map_err(errno)
        })();
        match result {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let mut st = self.0.state.lock();
        let result = (|| {
            let file = st.backing(&self.0.root, ino)?;
            let backing_len = file.metadata().map_err(errno)?.len();
            let seq = st.next_dirty_seq;
            let node = st.nodes.get_mut(&ino.0).ok_or(Errno::ENOENT)?;
            let overlay = node.overlay.get_or_insert_with(|| Overlay::new(backing_len));
            let before = overlay.unsynced_bytes();
            overlay.write(offset, data);
            let after = overlay.unsynced_bytes();
            if before == 0 {
                node.dirty_seq = seq;
                st.next_dirty_seq += 1;
            }
            st.unsynced_bytes = st.unsynced_bytes + after - before;
            st.enforce_limit(self.0.max_unsynced_bytes).map_err(errno)?;
            Ok(data.len() as u32)
        })();
        match result {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let mut st = self.0.state.lock();
        if let Some(n) = st.nodes.get_mut(&ino.0) {
            n.open_handles = n.open_handles.saturating_sub(1);
            // A closed file keeps its unsynced data (as the page cache would) and so its handle.
            if n.open_handles == 0 && n.overlay.is_none() {
                n.file = None;
            }
        }
        st.maybe_forget(ino.0);
        reply.ok();
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        let mut st = self.0.state.lock();
        match st.write_back(ino.0) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let path = match self.0.state.lock().path(ino) {
            Ok(p) => p,
            Err(e) => return reply.error(e),
        };
        let entries = match std::fs::read_dir(self.full_path(&path)) {
            Ok(e) => e,
            Err(e) => return reply.error(errno(e)),
        };
        let dots = [
            (ino.0, FileType::Directory, OsStr::new(".").to_owned()),
            (ino.0, FileType::Directory, "..".into()),
        ];
        let rest = entries.filter_map(Result::ok).filter_map(|e| {
            let meta = e.metadata().ok()?;
            Some((meta.ino().max(2), kind_of(&meta), e.file_name()))
        });
        for (i, (entry_ino, kind, name)) in dots.into_iter().chain(rest).enumerate().skip(offset as usize) {
            if reply.add(INodeNo(entry_ino), i as u64 + 1, kind, &name) {
                break;
            }
        }
        reply.ok();
    }

    fn fsyncdir(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        reply.ok(); // Metadata reaches the backing directory at once.
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
        let Ok(root) = std::ffi::CString::new(self.0.root.as_os_str().as_encoded_bytes()) else {
            return reply.error(Errno::EINVAL);
        };
        // SAFETY: statvfs(3) fills the struct we own from a NUL-terminated path.
        if unsafe { libc::statvfs(root.as_ptr(), &mut s) } != 0 {
            return reply.error(errno(io::Error::last_os_error()));
        }
        reply.statfs(
            s.f_blocks,
            s.f_bfree,
            s.f_bavail,
            s.f_files,
            s.f_ffree,
            s.f_bsize as u32,
            s.f_namemax as u32,
            s.f_frsize as u32,
        );
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        reply.ok();
    }
}

//! File-system idioms every durable file in the broker relies on, in one leaf module (it
//! imports nothing from the crate): replacing a file atomically and durably, making a
//! directory's entries durable, and removing a file that may already be gone.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::Path;

/// Replaces `path` with `contents` atomically and durably (temp file, fsync, rename, fsync of the
/// directory). The temporary file is `<name>.tmp` in the same directory, so the rename never
/// crosses file systems; a leftover one from a crash is simply overwritten next time.
pub fn write_atomically(path: &Path, contents: &[u8]) -> io::Result<()> {
    replace_file(path, contents)?;
    sync_dir(parent_dir(path))
}

/// [`write_atomically`] without the directory fsync: after a crash `path` holds either its old
/// contents (or is absent) or all of `contents`, never a part. For a caller that fsyncs the
/// directory itself, later, before anything depends on the new file.
pub fn replace_file(path: &Path, contents: &[u8]) -> io::Result<()> {
    let tmp = tmp_path(path)?;
    let mut file = File::create(&tmp)?;
    file.write_all(contents)?;
    file.sync_all()?;
    drop(file);
    fs::rename(&tmp, path)
}

/// Replaces `path` with `contents` by a rename, with no fsync at all: after a process crash
/// `path` holds the old contents or all of the new ones; after power loss it may also be empty
/// or absent, so a caller must be able to rebuild what it holds (the leader-epoch checkpoint).
pub fn replace_file_unsynced(path: &Path, contents: &[u8]) -> io::Result<()> {
    let tmp = tmp_path(path)?;
    fs::write(&tmp, contents)?;
    fs::rename(&tmp, path)
}

/// `<name>.tmp` beside `path`.
fn tmp_path(path: &Path) -> io::Result<std::path::PathBuf> {
    let file_name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "checkpoint path has no file name"))?;
    let mut tmp_name = file_name.to_os_string();
    tmp_name.push(".tmp");
    Ok(parent_dir(path).join(tmp_name))
}

fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

/// Makes file creations, renames and deletions in `dir` durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    #[cfg(test)]
    test_support::DIR_SYNCS.with(|n| n.set(n.get() + 1));
    File::open(dir)?.sync_all()
}

/// Directory fsyncs are counted per thread in unit tests, which assert how many an operation
/// costs (each test runs on its own thread).
#[cfg(test)]
pub mod test_support {
    use std::cell::Cell;

    thread_local! {
        pub(super) static DIR_SYNCS: Cell<u64> = const { Cell::new(0) };
    }

    /// Directory fsyncs this thread has done so far.
    pub fn dir_syncs() -> u64 {
        DIR_SYNCS.with(Cell::get)
    }
}

/// Starts writing `len` bytes of `file` from `offset` back to disk without waiting for it and
/// without a journal commit (Linux `sync_file_range(SYNC_FILE_RANGE_WRITE)`), so a later fsync
/// finds little left to do. Elsewhere it does nothing: the fsync then does all the work.
pub fn start_writeback(file: &File, offset: u64, len: u64) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
            return Ok(());
        };
        // SAFETY: the descriptor belongs to `file`, open for the whole call; the call only
        // schedules I/O on it and touches no memory of ours.
        let rc = unsafe { libc::sync_file_range(file.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (file, offset, len);
    Ok(())
}

/// Creates `dir` and any missing parents. Returns whether `dir` was created, in which case its
/// entry in the parent directory is not yet durable (fsync the parent).
pub fn create_dir_if_missing(dir: &Path) -> io::Result<bool> {
    match fs::create_dir(dir) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(false),
        Err(e) if e.kind() == io::ErrorKind::NotFound => fs::create_dir_all(dir).map(|()| true),
        Err(e) => Err(e),
    }
}

/// Removes `path`; a file that is already gone is not an error.
pub fn remove_if_exists(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_atomically_replaces_the_file_and_leaves_no_temporary_behind() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("some-checkpoint");
        write_atomically(&path, b"first\n").unwrap();
        write_atomically(&path, b"second\n").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"second\n");
        let names: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec!["some-checkpoint".to_string()]);
    }

    #[test]
    fn write_atomically_fails_when_the_directory_is_missing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gone").join("checkpoint");
        assert!(write_atomically(&path, b"x").is_err());
    }
}

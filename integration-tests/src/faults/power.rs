//! Power loss: a node's data dir on a `sluice-lazyfs` mount (see `lazyfs/`), which keeps file
//! data in memory until it is fsynced; [`power_cut`] kills the node and drops every unsynced
//! write, as losing power would.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::node::workspace_root;
use crate::Cluster;

/// How long a mount may take to answer on its control socket after the process starts.
const MOUNT_TIMEOUT: Duration = Duration::from_secs(15);
/// How long an unmount (SIGTERM to the lazyfs process) may take before it is killed.
const UNMOUNT_TIMEOUT: Duration = Duration::from_secs(10);

/// A running `sluice-lazyfs` mount. Dropping it unmounts (the backing dir keeps what was synced).
pub struct LazyFsMount {
    child: Option<Child>,
    mount: PathBuf,
    control: PathBuf,
}

impl LazyFsMount {
    /// Mounts a lazyfs showing `backing` at `mount` (both created if missing); its control
    /// socket is `control`, its log `log`.
    pub fn mount(backing: &Path, mount: &Path, control: &Path, log: &Path) -> Result<Self> {
        std::fs::create_dir_all(backing)?;
        std::fs::create_dir_all(mount)?;
        let binary = lazyfs_binary()?;
        let log = std::fs::OpenOptions::new().create(true).append(true).open(log)?;
        let child = Command::new(&binary)
            .arg("--backing")
            .arg(backing)
            .arg("--mount")
            .arg(mount)
            .arg("--control")
            .arg(control)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("spawn {}", binary.display()))?;
        let mut fs = Self {
            child: Some(child),
            mount: mount.to_path_buf(),
            control: control.to_path_buf(),
        };
        let deadline = Instant::now() + MOUNT_TIMEOUT;
        loop {
            if let Some(status) = fs.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                bail!(
                    "sluice-lazyfs exited with {status} before mounting {} (see its log)",
                    mount.display()
                );
            }
            match fs.command("unsynced") {
                Ok(_) => return Ok(fs),
                Err(e) if Instant::now() >= deadline => {
                    return Err(e.context(format!(
                        "lazyfs at {} not ready within {MOUNT_TIMEOUT:?}",
                        mount.display()
                    )))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }

    /// Drops every unsynced write (the power cut); returns the bytes of data lost.
    pub fn cut(&self) -> Result<u64> {
        self.command("cut")
    }

    /// Bytes of written data held unsynced right now.
    pub fn unsynced_bytes(&self) -> Result<u64> {
        self.command("unsynced")
    }

    fn command(&self, command: &str) -> Result<u64> {
        let mut stream = UnixStream::connect(&self.control)
            .with_context(|| format!("connect to lazyfs control socket {}", self.control.display()))?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        writeln!(stream, "{command}")?;
        let mut answer = String::new();
        BufReader::new(stream).read_line(&mut answer)?;
        answer
            .trim()
            .strip_prefix("ok ")
            .and_then(|n| n.parse().ok())
            .with_context(|| format!("lazyfs answered {answer:?} to {command:?}"))
    }
}

impl Drop for LazyFsMount {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: plain kill(2) on a pid we spawned and have not reaped yet.
            unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGTERM) };
            let deadline = Instant::now() + UNMOUNT_TIMEOUT;
            while matches!(c.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        // A lazyfs that died without unmounting leaves a dead mount the work dir cannot be
        // removed through: detach it.
        if let Ok(path) = std::ffi::CString::new(self.mount.as_os_str().as_encoded_bytes()) {
            // SAFETY: umount2(2) with a NUL-terminated path; failing (not mounted) is fine.
            unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) };
        }
    }
}

/// `$SLUICE_LAZYFS_BIN`, else `sluice-lazyfs` beside the broker binary the tests use, else
/// `<workspace>/target/release/sluice-lazyfs`.
pub fn lazyfs_binary() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("SLUICE_LAZYFS_BIN") {
        return Ok(PathBuf::from(p));
    }
    let mut candidates = Vec::new();
    if let Ok(sluice) = crate::node::sluice_binary() {
        if let Some(dir) = sluice.parent() {
            candidates.push(dir.join("sluice-lazyfs"));
        }
    }
    candidates.push(workspace_root().join("target/release/sluice-lazyfs"));
    candidates.into_iter().find(|p| p.is_file()).with_context(|| {
        "sluice-lazyfs not found: build it with `cargo build --release -p sluice-lazyfs` or set SLUICE_LAZYFS_BIN"
            .to_string()
    })
}

/// Power loss on node `id` (started with `NodeOptions::lazyfs`): SIGKILL, then every write it
/// had not fsynced is dropped. Returns the bytes of data lost. Restart the node afterwards.
pub fn power_cut(cluster: &mut Cluster, id: i32) -> Result<u64> {
    let node = cluster.node(id);
    node.kill()?;
    node.lazyfs()
        .with_context(|| format!("node {id} has no lazyfs mount (NodeOptions::lazyfs)"))?
        .cut()
}

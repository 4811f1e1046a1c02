//! `sluice-lazyfs`: mounts a pass-through FUSE file system over a backing directory that keeps
//! file data written in memory until the file is fsynced, and drops it on command, as a power
//! loss would (after Jepsen's LazyFS). Used by the power-loss integration tests.
//!
//! Control: a Unix socket (`--control`) taking one command per line, each answered with one
//! line:
//!
//! - `cut`: drop every unsynced write and truncate; answers `ok <bytes of data dropped>`;
//! - `unsynced`: answers `ok <bytes of data held unsynced>`;
//! - anything else: `error ...`.
//!
//! SIGTERM or SIGINT unmounts and exits; unsynced data is then lost, as in a cut.

mod fs;
mod overlay;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Parser;
use fuser::{Config, MountOption, Session};

use crate::fs::LazyFs;

#[derive(Parser, Debug)]
#[command(about = "Pass-through FUSE mount that loses unsynced writes on a simulated power cut")]
struct Args {
    /// Directory whose contents the mount shows and where synced data goes.
    #[arg(long)]
    backing: PathBuf,
    /// Empty directory to mount over.
    #[arg(long)]
    mount: PathBuf,
    /// Unix socket to create for the control commands (`cut`, `unsynced`).
    #[arg(long)]
    control: PathBuf,
    /// max.unsynced.bytes: the most unsynced data held in memory; past it the file with the
    /// oldest unsynced change is written to the backing directory, as kernel writeback would.
    #[arg(long, default_value_t = 256 * 1024 * 1024)]
    max_unsynced_bytes: u64,
}

/// The longest control command read; longer lines are refused.
const MAX_COMMAND_BYTES: u64 = 64;

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let args = Args::parse();
    if !args.backing.is_dir() {
        bail!(
            "backing directory {} does not exist: create it first",
            args.backing.display()
        );
    }
    let signals = block_exit_signals()?;
    let fs = LazyFs::new(args.backing.clone(), args.max_unsynced_bytes);
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName("sluice-lazyfs".into()),
        MountOption::Subtype("lazyfs".into()),
    ];
    let session = Session::new(fs.clone(), &args.mount, &config).with_context(|| {
        format!(
            "mount FUSE at {} (is /dev/fuse there and are we root?)",
            args.mount.display()
        )
    })?;
    let session = session.spawn().context("start the FUSE session thread")?;
    fs.set_notifier(session.notifier());

    let _ = std::fs::remove_file(&args.control);
    let listener =
        UnixListener::bind(&args.control).with_context(|| format!("bind control socket {}", args.control.display()))?;
    let control_fs = fs.clone();
    std::thread::Builder::new().name("control".into()).spawn(move || {
        for stream in listener.incoming().flatten() {
            if let Err(e) = serve(&control_fs, stream) {
                tracing::warn!("control connection: {e:#}");
            }
        }
    })?;
    tracing::info!(mount = %args.mount.display(), backing = %args.backing.display(), "lazyfs mounted");

    wait_for_exit_signal(&signals);
    tracing::info!(unsynced_bytes = fs.unsynced_bytes(), "unmounting");
    drop(session);
    let _ = std::fs::remove_file(&args.control);
    Ok(())
}

fn serve(fs: &LazyFs, stream: UnixStream) -> Result<()> {
    let mut out = stream.try_clone()?;
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = String::new();
        if reader.by_ref().take(MAX_COMMAND_BYTES).read_line(&mut line)? == 0 {
            return Ok(());
        }
        let answer = match line.trim() {
            "cut" => format!("ok {}", fs.cut()),
            "unsynced" => format!("ok {}", fs.unsynced_bytes()),
            other => format!("error unknown command {other:?}: send `cut` or `unsynced`"),
        };
        writeln!(out, "{answer}")?;
    }
}

/// Blocks SIGTERM and SIGINT in every thread (called before any is spawned), so that the main
/// thread can wait for them and unmount cleanly.
fn block_exit_signals() -> Result<libc::sigset_t> {
    // SAFETY: sigset manipulation on a set we own; pthread_sigmask on the calling thread.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        if libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
            bail!("pthread_sigmask failed");
        }
        Ok(set)
    }
}

fn wait_for_exit_signal(set: &libc::sigset_t) {
    let mut sig = 0;
    // SAFETY: sigwait on a set of signals blocked in every thread.
    while unsafe { libc::sigwait(set, &mut sig) } != 0 {}
}

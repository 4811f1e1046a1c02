//! A child process with its output in a log file, in its own process group (a Ctrl-C at the
//! terminal reaches only its parent, which stops children in order), and sent SIGKILL if the
//! thread that started it dies (so a killed `run` leaves no brokers behind).

use std::fs::OpenOptions;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

pub struct ChildProcess {
    name: String,
    child: Option<Child>,
    log: PathBuf,
}

impl ChildProcess {
    /// Starts `cmd`, appending its stdout and stderr to `log`.
    pub fn spawn(name: &str, mut cmd: Command, log: &Path) -> Result<ChildProcess> {
        let out = OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("cannot open the log file {}", log.display()))?;
        cmd.stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .process_group(0);
        // SAFETY: prctl(2) is async-signal-safe and touches no memory of the parent.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        // The program and its arguments only: `{cmd:?}` would show the environment we set,
        // which may hold passwords (SLUICE_ADD_SCRAM).
        let child = cmd.spawn().with_context(|| {
            let args: Vec<_> = cmd.get_args().map(|a| a.to_string_lossy()).collect();
            format!(
                "cannot start the {name}: {} {}",
                cmd.get_program().to_string_lossy(),
                args.join(" ")
            )
        })?;
        tracing::debug!(name, pid = child.id(), log = %log.display(), "started");
        Ok(ChildProcess {
            name: name.to_string(),
            child: Some(child),
            log: log.to_path_buf(),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn log(&self) -> &Path {
        &self.log
    }

    /// How the process ended, or `None` while it runs.
    pub fn try_wait(&mut self) -> Result<Option<ExitStatus>> {
        match self.child.as_mut() {
            Some(c) => Ok(c.try_wait()?),
            None => bail!("the {} was already stopped", self.name),
        }
    }

    /// Fails, naming the log, if the process has exited.
    pub fn check_running(&mut self) -> Result<()> {
        match self.try_wait()? {
            None => Ok(()),
            Some(status) => bail!("the {} exited ({status}); see {}", self.name, self.log.display()),
        }
    }

    /// SIGKILL, and reap it.
    pub fn kill(&mut self) -> Result<()> {
        if let Some(mut c) = self.child.take() {
            c.kill()
                .or_else(|e| if c.try_wait()?.is_some() { Ok(()) } else { Err(e) })?;
            c.wait()?;
        }
        Ok(())
    }

    /// SIGTERM, then waits up to `timeout` for it to exit; SIGKILL after that (an error).
    pub fn terminate(&mut self, timeout: Duration) -> Result<ExitStatus> {
        self.send_sigterm()?;
        match self.wait_for_exit(timeout)? {
            Some(status) => {
                self.child = None;
                Ok(status)
            }
            None => {
                self.kill()?;
                bail!(
                    "the {} did not stop within {timeout:?} of SIGTERM; killed it",
                    self.name
                )
            }
        }
    }

    /// Asks the process to stop (SIGTERM), unless it has exited already.
    pub fn send_sigterm(&mut self) -> Result<()> {
        let Some(c) = self.child.as_mut() else {
            bail!("the {} was already stopped", self.name)
        };
        if c.try_wait()?.is_none() {
            // SAFETY: kill(2) on a child we have not reaped, so the pid is still ours.
            unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGTERM) };
        }
        Ok(())
    }

    /// Waits up to `timeout` for the process to exit; `None` if it still runs.
    pub fn wait_for_exit(&mut self, timeout: Duration) -> Result<Option<ExitStatus>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_wait()? {
                return Ok(Some(status));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}

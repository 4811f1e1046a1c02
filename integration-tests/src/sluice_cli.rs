//! The `sluice` client commands run as a user runs them: a process against a running cluster,
//! what it printed and how it exited (`tests/it/cli.rs`, `tests/it/broker_configs.rs`).

use std::io::Write;
use std::process::{Command, Stdio};

use anyhow::{ensure, Context, Result};
use serde_json::Value;

use crate::sluice_binary;

/// What a `sluice` client command printed, and how it exited.
pub struct Run {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn json(&self) -> Result<Value> {
        ensure!(self.ok, "the command failed: {}", self.stderr);
        serde_json::from_str(&self.stdout).with_context(|| format!("not JSON: {}", self.stdout))
    }
}

pub fn sluice(bootstrap: &str, args: &[&str]) -> Result<Run> {
    sluice_with_stdin(bootstrap, args, "")
}

/// `sluice ARGS --bootstrap BOOTSTRAP` with `stdin` as its standard input.
pub fn sluice_with_stdin(bootstrap: &str, args: &[&str], stdin: &str) -> Result<Run> {
    let mut child = Command::new(sluice_binary()?)
        .args(args)
        .args(["--bootstrap", bootstrap, "--timeout-ms", "10000"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("running sluice")?;
    let mut input = child.stdin.take().context("stdin")?;
    let text = stdin.to_owned();
    let writer = std::thread::spawn(move || input.write_all(text.as_bytes()));
    let output = child.wait_with_output()?;
    writer.join().expect("stdin writer")?;
    Ok(Run {
        ok: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    })
}

/// One JSON document per line.
pub fn json_lines(run: &Run) -> Result<Vec<Value>> {
    ensure!(run.ok, "the command failed: {}", run.stderr);
    run.stdout
        .lines()
        .map(|l| serde_json::from_str(l).with_context(|| format!("not JSON: {l}")))
        .collect()
}

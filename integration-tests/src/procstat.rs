//! Resource usage of a process from /proc (Linux), for the benchmark.

use anyhow::{bail, Context, Result};

/// CPU time (user + system) consumed by `pid` so far, in seconds.
pub fn cpu_seconds(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name (which may contain spaces) start after the last ')'.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .context("malformed /proc/pid/stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest[0] is field 3 (state); utime is field 14, stime field 15.
    if fields.len() < 13 {
        bail!("short /proc/pid/stat");
    }
    let utime: u64 = fields[11].parse()?;
    let stime: u64 = fields[12].parse()?;
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    Ok((utime + stime) as f64 / ticks.max(1) as f64)
}

/// A field of /proc/<pid>/status in KiB (e.g. "VmHWM", "VmRSS").
pub fn status_kib(pid: u32, field: &str) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    for line in status.lines() {
        if let Some(v) = line.strip_prefix(field).and_then(|r| r.strip_prefix(':')) {
            return Ok(v.trim().trim_end_matches("kB").trim().parse()?);
        }
    }
    bail!("{field} not in /proc/{pid}/status")
}

/// Resets the peak-RSS counter (VmHWM) of `pid` so a phase's peak can be measured on its own.
/// Returns false if the kernel refused (then VmHWM is the peak since process start).
pub fn reset_peak_rss(pid: u32) -> bool {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok()
}

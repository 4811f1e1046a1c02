//! SIGINT and SIGTERM set one flag; every long-running loop checks it and winds down cleanly.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::{Context, Result};

/// A flag that becomes true on the first SIGINT or SIGTERM.
pub fn stop_flag() -> Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, stop.clone()).context("cannot install the SIGINT/SIGTERM handler")?;
    }
    Ok(stop)
}

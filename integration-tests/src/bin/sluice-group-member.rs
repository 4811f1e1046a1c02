//! One consumer-group member as its own process, for tests that must kill a member outright
//! (`tests/it/groups.rs`): an in-process librdkafka client keeps heartbeating from its own threads,
//! so only a killed process stops heartbeating for real.
//!
//! Usage: `sluice-group-member <bootstrap> <group> <topic> <client-id> [librdkafka-key=value ...]`
//!
//! Runs [`sluice_integration_tests::groups::run_member`] and writes every event (record,
//! assignment, revocation, acknowledged commit, error) to stdout as one line. Closing its stdin
//! makes it commit, leave the group and exit 0.

use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use sluice_integration_tests::groups::{member_config, run_member, MemberLog, COMMIT_INTERVAL};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 4 {
        bail!("usage: sluice-group-member <bootstrap> <group> <topic> <client-id> [key=value ...]");
    }
    let mut config = member_config(&args[0], &args[1], &args[3]);
    for kv in &args[4..] {
        let (k, v) = kv
            .split_once('=')
            .with_context(|| format!("expected key=value, got {kv:?}"))?;
        config.set(k, v);
    }
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut sink = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut sink);
            stop.store(true, Ordering::SeqCst);
        });
    }
    run_member(
        &config,
        &args[2],
        Arc::new(MemberLog::new(true)),
        &stop,
        COMMIT_INTERVAL,
    )
}

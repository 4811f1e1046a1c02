//! A broken invariant stops the node (`invariant` in the broker): a failpoint makes a real
//! check see a violating value in a real process, and the node logs the values, refuses the
//! step, and exits with a failure instead of serving on.

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use sluice_integration_tests::clients::wait_until;
use sluice_integration_tests::{kafka_client, NodeOptions, SluiceNode};

const TIMEOUT: Duration = Duration::from_secs(30);

#[test]
fn a_high_watermark_past_the_log_end_stops_the_node_with_the_values() -> Result<()> {
    let mut opts = NodeOptions::default();
    // Not a secret; the harness's way to set a variable for the broker process only.
    opts.secret_env
        .push(("SLUICE_FAILPOINTS".to_string(), "hw_past_log_end".to_string()));
    let mut node = SluiceNode::start(opts)?;
    let addr = node.addr();
    ensure!(kafka_client::create_topic(addr, "guarded", 1, TIMEOUT)? == 0);
    // Becoming the partition's leader computes its first high watermark: one past the (empty)
    // log is the bug.
    let status = wait_until(TIMEOUT, "the node to stop on the broken invariant", || {
        node.exit_status().ok().flatten()
    })?;
    ensure!(!status.success(), "the node exited with {status}, not a failure");
    let log = std::fs::read_to_string(node.log_path()).context("the node's log")?;
    ensure!(
        log.contains("guarded-0: the high watermark would move to 1, past the log end offset 0"),
        "the log does not name the partition and values:\n{}",
        node.log_tail(40)
    );
    ensure!(
        log.contains("an invariant sluice relies on does not hold")
            && log.contains("stopped because an invariant does not hold"),
        "the log does not say why the node stopped:\n{}",
        node.log_tail(40)
    );
    ensure!(
        log.contains("shutdown complete"),
        "the node did not shut down cleanly:\n{}",
        node.log_tail(40)
    );
    Ok(())
}

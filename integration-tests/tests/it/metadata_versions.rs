//! A node whose metadata log holds an entry it cannot read refuses to start, saying what to do,
//! instead of skipping the entry and serving metadata that differs from its peers'.
//!
//! The entry is appended the way a newer (or older) build would: through the quorum's public
//! API on the stopped node's own data directory, so it is committed like any other entry.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use sluice_integration_tests::{NodeOptions, SluiceNode};
use sluice_raft_meta::{Quorum, QuorumConfig, StateMachine};

/// Accepts whatever the log holds: the tool only appends an entry, it interprets nothing.
struct Appender;

impl StateMachine for Appender {
    fn apply(&mut self, _index: u64, _data: &[u8]) -> Result<(), String> {
        Ok(())
    }
    fn snapshot(&self) -> Result<Vec<u8>, String> {
        Ok(Vec::new())
    }
    fn restore(&mut self, _data: &[u8]) -> Result<(), String> {
        Ok(())
    }
}

/// Commits `entry` to the metadata log in `data_dir` of stopped single-node `node_id`.
async fn append_entry(data_dir: &Path, node_id: i32, entry: Vec<u8>) -> Result<()> {
    let properties = std::fs::read_to_string(data_dir.join("meta.properties"))?;
    let cluster_id = properties
        .lines()
        .find_map(|l| l.strip_prefix("cluster.id="))
        .context("meta.properties names no cluster.id")?
        .to_owned();
    // The broker runs quorum member `node_id + 1` (Raft ids are non-zero).
    let raft_id = node_id as u64 + 1;
    let config = QuorumConfig {
        node_id: raft_id,
        voters: BTreeMap::from([(raft_id, "127.0.0.1:0".to_owned())]),
        listen: "127.0.0.1:0".parse()?,
        data_dir: data_dir.join("__cluster_metadata-0"),
        tick_ms: 50,
        election_tick: 10,
        heartbeat_tick: 2,
        // Never snapshot: this state machine's (empty) state must not replace the broker's.
        snapshot_every_entries: u64::MAX,
        cluster_id,
        secret: None,
        tls: None,
    };
    let quorum = Quorum::start(config, Appender).await?;
    let deadline = Instant::now() + Duration::from_secs(10);
    let result = loop {
        match quorum.propose(entry.clone(), Duration::from_secs(2)).await {
            Ok(index) => break Ok(index),
            // The lone voter is still electing itself.
            Err(e) if Instant::now() < deadline => {
                eprintln!("retrying the append: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => break Err(e),
        }
    };
    quorum.shutdown().await;
    result.context("append the crafted entry")?;
    Ok(())
}

/// Starts a node, stops it, appends `entry` to its metadata log, starts it again and returns
/// its log once it has exited (it must exit, non-zero, within 20 s).
async fn restart_with_entry(entry: Vec<u8>) -> Result<String> {
    let mut node = SluiceNode::start(NodeOptions::default())?;
    let port = node.addr().port();
    node.terminate(Duration::from_secs(20))?;
    append_entry(node.data_dir(), node.node_id(), entry).await?;

    let data_dir = node.data_dir().to_path_buf();
    let mut restarted = SluiceNode::spawn(NodeOptions::default().data_dir(data_dir).port(port))?;
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = restarted.exit_status()? {
            break status;
        }
        if Instant::now() >= deadline {
            bail!("the node kept running with an unreadable metadata entry in its log");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let log = std::fs::read_to_string(restarted.log_path())?;
    if status.success() {
        bail!("the node exited successfully despite an unreadable metadata entry:\n{log}");
    }
    Ok(log)
}

/// An envelope (`metadata.proto`): field 1 varint `version`, field 2 bytes `payload`.
fn envelope(version: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![0x08, version, 0x12, payload.len() as u8];
    out.extend_from_slice(payload);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_of_a_newer_metadata_version_stops_the_node_with_what_to_do() -> Result<()> {
    // Far past any version this build writes, so the next bump of METADATA_VERSION keeps it new.
    let log = restart_with_entry(envelope(99, b"a command from the future")).await?;
    let said = "was written with metadata version 99, but this build of sluice understands versions up to ";
    let what_to_do = ": upgrade sluice on this node to the version the rest of the cluster runs";
    let line = log.lines().find(|l| l.contains(said) && l.contains(what_to_do));
    let Some(line) = line else {
        bail!("the log does not say {said:?}...{what_to_do:?}:\n{log}");
    };
    let newest = line.split(said).nth(1).and_then(|rest| rest.split(':').next()).unwrap_or_default();
    if !newest.parse::<u32>().is_ok_and(|v| (1..99).contains(&v)) {
        bail!("the log names {newest:?} as this build's newest version:\n{line}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_in_the_json_of_earlier_builds_stops_the_node_with_what_to_do() -> Result<()> {
    let old =
        br#"{"proposer":1,"incarnation":"00000000-0000-0000-0000-000000000000","command":"ElectPreferredLeaders"}"#;
    let log = restart_with_entry(old.to_vec()).await?;
    let expected = "was written by an earlier Sluice build in an unversioned format that this build no longer reads: start this node with a fresh data directory (or use the previous build)";
    if !log.contains(expected) {
        bail!("the log does not say {expected:?}:\n{log}");
    }
    Ok(())
}

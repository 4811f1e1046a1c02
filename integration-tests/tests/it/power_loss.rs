//! Power loss: node 1's data dir is on a `sluice-lazyfs` mount, which keeps file data in memory
//! until it is fsynced. Power is cut on it (SIGKILL, then every unsynced write dropped, as the
//! broker fsyncs only as `flush.messages`/`flush.ms` say and relies on replication otherwise)
//! while an idempotent acks=all workload runs, and it is restarted at once. Afterwards no
//! acknowledged record is lost and every replica holds the same bytes: the node that lost its
//! tail must not lead on data it no longer has, nor keep a suffix the others do not have.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use sluice_integration_tests::faults::{self, Workload, FAST_FAILOVER};
use sluice_integration_tests::{kafka_client, retry_port_races, Cluster};

/// The node whose data dir is on the lazyfs mount.
const LAZY: i32 = 1;
/// Records per second, spread round-robin over the partitions.
const RATE_PER_S: u64 = 1000;
/// How long the workload runs before the cut, and again after the node is back.
const STEADY: Duration = Duration::from_secs(3);
/// Acked records each partition must gain to count as progress.
const PROGRESS: u64 = 50;
/// Longest the restarted node may take to be back in every ISR.
const REJOIN_TIMEOUT: Duration = Duration::from_secs(30);

/// One case at a time: each starts three brokers and two clients.
static SERIAL: Mutex<()> = Mutex::new(());

/// Three nodes with fast failover, node [`LAZY`] on lazyfs.
fn start_cluster() -> Result<Cluster> {
    retry_port_races(|| Cluster::start_custom(3, FAST_FAILOVER, true, |_| Vec::new(), |id, o| o.lazyfs = id == LAZY))
}

/// Creates `topic` with one partition per replica list in `assignments` (the first replica is
/// the preferred leader), min.insync.replicas=2 and any further `configs`.
fn create_topic(cluster: &Cluster, topic: &str, assignments: &[[i32; 3]], configs: &[(&str, &str)]) -> Result<()> {
    let assignments: Vec<&[i32]> = assignments.iter().map(|a| &a[..]).collect();
    let mut all = vec![("min.insync.replicas", "2")];
    all.extend_from_slice(configs);
    kafka_client::create_topic_with_configs(cluster.addr(2), topic, &assignments, &all)
}

/// Runs the workload on `topic`, cuts power on [`LAZY`] after [`STEADY`], restarts it at once,
/// and checks every invariant. `lazy_leads` says whether [`LAZY`] leads the partitions.
fn cut_power_and_check(cluster: &mut Cluster, topic: &str, partitions: i32, lazy_leads: bool) -> Result<()> {
    cluster.await_full_isr(topic, Duration::from_secs(15))?;
    for p in 0..partitions {
        let leader = cluster.partition_leader(2, topic, p, Duration::from_secs(10))?;
        ensure!(
            (leader == LAZY) == lazy_leads,
            "{topic}-{p} is led by {leader}, expected lazy-leads={lazy_leads}"
        );
    }
    let workload = Workload::start(&cluster.bootstrap(), topic, partitions, RATE_PER_S)?;
    workload.await_progress_since(Instant::now(), PROGRESS, Duration::from_secs(15))?;
    std::thread::sleep(STEADY);

    let lost = faults::power_cut(cluster, LAZY)?;
    let fault_at = Instant::now();
    ensure!(
        lost > 0,
        "the power cut dropped no unsynced bytes: the fault was not real"
    );
    cluster.node(LAZY).restart()?;
    let returned_at = Instant::now();
    eprintln!("{topic}: power cut on node {LAZY} dropped {lost} unsynced bytes; restarted at once");

    std::thread::sleep(STEADY);
    let settled = faults::stop_and_check(cluster, workload, returned_at + REJOIN_TIMEOUT)?;
    faults::check_progress_after(&settled.producer, partitions, fault_at)?;
    eprintln!("{topic}: {}", settled.producer.summary());
    Ok(())
}

#[test]
fn acked_records_survive_a_power_cut_on_the_leader_restarted_at_once() -> Result<()> {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut cluster = start_cluster()?;
    create_topic(&cluster, "power-leader", &[[LAZY, 2, 3], [LAZY, 3, 2]], &[])?;
    cut_power_and_check(&mut cluster, "power-leader", 2, true)
}

#[test]
fn acked_records_survive_a_power_cut_on_a_follower_restarted_at_once() -> Result<()> {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut cluster = start_cluster()?;
    create_topic(&cluster, "power-follower", &[[2, LAZY, 3], [3, LAZY, 2]], &[])?;
    cut_power_and_check(&mut cluster, "power-follower", 2, false)
}

/// Segments of 4 KiB roll several times a second, so the cut finds a sealed segment whose
/// fsync background writeback has not done yet, and its successor under the pending name: the
/// restarted node must find the sealed segment short and drop what follows it.
#[test]
fn acked_records_survive_a_power_cut_on_a_leader_rolling_segments() -> Result<()> {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut cluster = start_cluster()?;
    let topic = "power-rolling";
    create_topic(
        &cluster,
        topic,
        &[[LAZY, 2, 3], [LAZY, 3, 2]],
        &[("internal.segment.bytes", "4096")],
    )?;
    cut_power_and_check(&mut cluster, topic, 2, true)?;
    let dir = cluster.data_dir(2).join(format!("{topic}-0"));
    let segments = std::fs::read_dir(&dir)?
        .filter_map(|e| e.ok())
        .filter(|e| faults::is_segment_log_file(&e.file_name().to_string_lossy()))
        .count();
    ensure!(
        segments >= 5,
        "{topic}-0 has only {segments} segments on node 2: the test rolled too little"
    );
    Ok(())
}

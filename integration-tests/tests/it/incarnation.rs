//! A broker killed and restarted well before its session timeout is a new incarnation, as in
//! Kafka: the controller refuses its registration (DUPLICATE_BROKER_REGISTRATION) while the
//! previous process's session is live, fences that process once a session timeout has passed,
//! which moves its partitions to another leader at a higher leader epoch, and only then
//! accepts the new process, which comes back as a follower and rejoins the ISR once caught up.
//! It never leads on the strength of metadata from before its restart. Meanwhile the recorded
//! `acks=all` workload keeps running, and afterwards no acknowledged record is lost and the
//! replicas are identical.

use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use sluice_integration_tests::clients::wait_until;
use sluice_integration_tests::faults::{self, Workload, FAST_FAILOVER};
use sluice_integration_tests::{retry_port_races, Cluster};

const TOPIC: &str = "incarnation";
const PARTITIONS: i32 = 3;
const RATE_PER_S: u64 = 1000;
/// Acked records each partition must gain to count as progress.
const PROGRESS: u64 = 50;
/// How long the workload runs before the fault, and again once the node is back.
const STEADY: Duration = Duration::from_secs(2);
/// What the restarted broker logs when its registration is refused.
const REFUSED: &str =
    "this node's previous process is still registered and its session has not expired: waiting for it to expire";

/// Ports are picked free up front, so another process can take one before its broker binds
/// it; such a start is retried on fresh ports.
fn start_cluster() -> Result<Cluster> {
    retry_port_races(|| Cluster::start(3, FAST_FAILOVER))
}

/// The log of node `id`'s current process: what follows the harness's note of its last kill.
fn current_process_log(cluster: &mut Cluster, id: i32) -> Result<String> {
    let path = cluster.node(id).log_path().to_path_buf();
    let log = std::fs::read_to_string(&path).with_context(|| format!("read {}", path.display()))?;
    let start = log.rfind("SIGKILL sent").unwrap_or(0);
    Ok(log[start..].to_string())
}

/// The leader epochs at which the log says this process became leader of `TOPIC`-0.
fn leader_epochs_taken(log: &str) -> Vec<i32> {
    log.lines()
        .filter(|l| l.contains("became partition leader") && l.contains(&format!("topic={TOPIC} partition=0 ")))
        .filter_map(|l| l.split("leader_epoch=").nth(1)?.split_whitespace().next()?.parse().ok())
        .collect()
}

/// The leader and leader epoch this process first followed in `TOPIC`-0, from its log.
fn first_followed(log: &str) -> Option<(i32, i32)> {
    let line = log
        .lines()
        .find(|l| l.contains("became follower") && l.contains(&format!("topic={TOPIC} partition=0 ")))?;
    let field = |name: &str| line.split(name).nth(1)?.split_whitespace().next()?.parse().ok();
    Some((field("leader=")?, field("leader_epoch=")?))
}

#[test]
fn a_leader_restarted_within_its_session_is_refused_until_fenced_and_returns_as_a_follower() -> Result<()> {
    let mut cluster = start_cluster()?;
    faults::create_topic(&cluster, 1, TOPIC, PARTITIONS, 3, &[("min.insync.replicas", "2")])?;
    cluster.await_full_isr(TOPIC, Duration::from_secs(15))?;
    let workload = Workload::start(&cluster.bootstrap(), TOPIC, PARTITIONS, RATE_PER_S)?;
    workload.await_progress_since(Instant::now(), PROGRESS, Duration::from_secs(15))?;
    std::thread::sleep(STEADY);

    let before = cluster.partition_0(1, TOPIC)?;
    let victim = before.leader;
    let survivors: Vec<i32> = cluster.ids().into_iter().filter(|id| *id != victim).collect();
    // SIGKILL and start again at once: the new process asks to register long before the 3 s
    // session of the old one could have run out.
    cluster.node(victim).respawn()?;
    let fault_at = Instant::now();

    wait_until(
        Duration::from_secs(15),
        "the restarted node to say it is refused",
        || {
            current_process_log(&mut cluster, victim)
                .ok()
                .filter(|log| log.contains(REFUSED))
        },
    )?;
    let moved = cluster.await_partition_0(
        &survivors,
        TOPIC,
        "partition 0 led by another node at a higher leader epoch",
        Duration::from_secs(20),
        // Epochs bump only when leadership moves: the victim leading again two epochs on means
        // leadership moved away and came back (preferred-leader rebalance) between polls.
        |p| {
            let newer = p.leader_epoch > before.leader_epoch;
            p.leader >= 0 && newer && (p.leader != victim || p.leader_epoch > before.leader_epoch + 1)
        },
    )?;
    eprintln!("node {victim} restarted at once; partition 0 before {before:?}, after {moved:?}");
    // The survivor that took over says why, from the record that made it leader.
    let took_over = |log: &str| {
        log.lines().any(|l| {
            l.contains("became partition leader")
                && l.contains(&format!("topic={TOPIC} partition=0 "))
                && l.contains("election=") && l.contains("replica was elected (a broker left service)")
        })
    };
    let mut logs = Vec::new();
    for id in &survivors {
        let path = cluster.node(*id).log_path().to_path_buf();
        logs.push(std::fs::read_to_string(&path).with_context(|| format!("read {}", path.display()))?);
    }
    ensure!(
        logs.iter().any(|log| took_over(log)),
        "no survivor logged taking over partition 0, elected after a broker left service"
    );
    cluster.node(victim).wait_ready()?;
    let returned_at = Instant::now();
    eprintln!(
        "node {victim} registered and serving {:?} after the kill",
        fault_at.elapsed()
    );
    cluster.await_full_isr(TOPIC, Duration::from_secs(25))?;

    std::thread::sleep(STEADY);
    let settled = faults::stop_and_check(&cluster, workload, returned_at + Duration::from_secs(25))?;
    faults::check_progress_after(&settled.producer, PARTITIONS, fault_at)?;
    let log = current_process_log(&mut cluster, victim)?;
    let (leader, epoch) =
        first_followed(&log).context("the restarted node's log shows it following no leader of partition 0")?;
    ensure!(
        leader != victim && epoch > before.leader_epoch,
        "the restarted node first followed leader {leader} at epoch {epoch} (it led at epoch {} before the kill)",
        before.leader_epoch
    );
    let taken = leader_epochs_taken(&log);
    ensure!(
        taken.iter().all(|epoch| *epoch > before.leader_epoch),
        "the restarted node led partition 0 at epochs {taken:?}, not all after the epoch {} it led at before the kill",
        before.leader_epoch
    );
    Ok(())
}

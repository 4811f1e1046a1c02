//! Partition replication under faults: a 3-node cluster with replication factor 3 and
//! min.insync.replicas=2 keeps an idempotent acks=all producer and a concurrent consumer
//! running while nodes are killed, paused or shut down, and afterwards every acked record is
//! there exactly once, nothing the consumer saw is lost, the ISR is whole again and every
//! replica holds the same bytes (see `faults.rs` for the invariants).
//!
//! Faults: SIGKILL of a leader (with a kcat producer during the failover), of a follower, of
//! the active controller, of three leaders in a row, and of a leader after the ISR shrank;
//! SIGSTOP of a leader past replica.lag.time.max.ms; SIGTERM (controlled shutdown) and the
//! return to preferred leadership; and both followers frozen while the leader acks alone
//! (acks=1: its tail is truncated; acks=all: nothing is acked until they resume).
//!
//! The cases share the machine's cores with three brokers each, so they run one at a time.

use std::collections::BTreeSet;
use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use rdkafka::config::ClientConfig;
use sluice_integration_tests::clients::wait_until;
use sluice_integration_tests::faults::{self, Acks, Settled, Workload, FAST_FAILOVER};
use sluice_integration_tests::{retry_port_races, Cluster};

const TOPIC: &str = "replicated";
const PARTITIONS: i32 = 3;
const REPLICATION_FACTOR: i16 = 3;
/// Records per second, spread round-robin over the partitions.
const RATE_PER_S: u64 = 2000;
/// How long the workload runs before the fault, and again after the node is back.
const STEADY: Duration = Duration::from_secs(4);
/// Acked records each partition must gain after a fault to count as progress.
const PROGRESS: u64 = 50;
/// Longest a failover (fencing after 3 s, then a new leader) may take to show in acks.
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(20);
/// Longest the returning node may take to be back in every ISR.
const REJOIN_TIMEOUT: Duration = Duration::from_secs(25);

/// One case at a time: each starts three brokers and two clients.
static SERIAL: Mutex<()> = Mutex::new(());

/// A 3-node cluster with fast failover settings and the replicated topic, full ISR, with the
/// workload already producing for [`STEADY`].
fn start_case(partitions: i32) -> Result<(Cluster, Workload)> {
    start_case_with(partitions, faults::workload_producer_config)
}

/// [`start_case`] with the workload producer configured by `producer_config(bootstrap)`.
fn start_case_with(partitions: i32, producer_config: impl Fn(&str) -> ClientConfig) -> Result<(Cluster, Workload)> {
    let cluster = start_cluster()?;
    faults::create_topic(
        &cluster,
        1,
        TOPIC,
        partitions,
        REPLICATION_FACTOR,
        &[("min.insync.replicas", "2")],
    )?;
    cluster.await_full_isr(TOPIC, Duration::from_secs(15))?;
    let bootstrap = cluster.bootstrap();
    let workload = Workload::start_with(&bootstrap, TOPIC, partitions, RATE_PER_S, producer_config(&bootstrap))?;
    let started = Instant::now();
    workload.await_progress_since(started, PROGRESS, Duration::from_secs(15))?;
    std::thread::sleep(STEADY);
    Ok((cluster, workload))
}

/// Ports are picked free up front, so another process can take one before its broker binds
/// it; such a start is retried on fresh ports.
fn start_cluster() -> Result<Cluster> {
    retry_port_races(|| Cluster::start(3, FAST_FAILOVER))
}

fn other_nodes(cluster: &Cluster, except: i32) -> Vec<i32> {
    cluster.ids().into_iter().filter(|id| *id != except).collect()
}

/// Waits until the nodes in `asking` report `node` in no ISR of `topic`.
fn await_out_of_every_isr(cluster: &Cluster, asking: &[i32], node: i32, timeout: Duration) -> Result<Duration> {
    let since = Instant::now();
    let mut last = Vec::new();
    let waited = wait_until(timeout, "", || {
        last.clear();
        for &id in asking {
            match cluster.partitions(id, TOPIC) {
                Ok(ps) => last.extend(ps.into_iter().filter(|p| p.isr.contains(&node)).map(|p| (id, p))),
                Err(_) => return None,
            }
        }
        last.is_empty().then(|| since.elapsed())
    });
    waited.map_err(|_| anyhow::anyhow!("node {node} still in the ISR after {timeout:?} (asker, partition): {last:?}"))
}

/// Waits for every partition to have its full ISR again after node `victim` returned.
fn await_rejoin(cluster: &Cluster, victim: i32, returned_at: Instant) -> Result<()> {
    let rejoin = cluster.await_full_isr(TOPIC, REJOIN_TIMEOUT)?;
    eprintln!(
        "node {victim} back in every ISR after {:?}: {rejoin:?}",
        returned_at.elapsed()
    );
    Ok(())
}

/// Lets the workload run in steady state, then stops it and checks every invariant, and that
/// each partition acknowledged records after the fault.
fn settle_and_check(
    cluster: &Cluster,
    workload: Workload,
    returned_at: Instant,
    partitions: i32,
    fault_at: Instant,
) -> Result<Settled> {
    std::thread::sleep(STEADY);
    let settled = faults::stop_and_check(cluster, workload, returned_at + REJOIN_TIMEOUT)?;
    faults::check_progress_after(&settled.producer, partitions, fault_at)?;
    Ok(settled)
}

#[test]
fn acked_records_survive_leader_kill_and_the_leader_rejoins() -> Result<()> {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (mut cluster, workload) = start_case(PARTITIONS)?;
    let before = cluster.partitions(1, TOPIC)?.remove(0);
    let victim = before.leader;
    let survivor = other_nodes(&cluster, victim)[0];

    cluster.node(victim).kill()?;
    let fault_at = Instant::now();
    let kcat = KcatProducer::start(&cluster.bootstrap(), TOPIC, 0, 300)?;
    let failover = workload.await_progress_since(fault_at, PROGRESS, FAILOVER_TIMEOUT)?;
    let after = cluster.partitions(survivor, TOPIC)?.remove(0);
    ensure!(
        after.leader != victim && after.leader >= 0 && after.leader_epoch > before.leader_epoch,
        "partition 0 after killing its leader {victim}: {after:?} (before: {before:?}); expected a new leader \
         and a higher leader epoch"
    );
    eprintln!("leader {victim} of partition 0 killed; producing on every partition again after {failover:?}");
    kcat.finish(Duration::from_secs(60))?;

    cluster.node(victim).restart()?;
    let returned_at = Instant::now();
    settle_and_check(&cluster, workload, returned_at, PARTITIONS, fault_at)?;
    kcat_lines_exactly_once(&cluster.bootstrap(), TOPIC, 0, 300)?;
    Ok(())
}

#[test]
fn a_killed_follower_leaves_the_isr_and_rejoins_after_restart() -> Result<()> {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // Two partitions over three nodes: placement balances leaders, so one node leads none and
    // killing it is a pure follower failure.
    let partitions = 2;
    let (mut cluster, workload) = start_case(partitions)?;
    let leaders: BTreeSet<i32> = cluster.partitions(1, TOPIC)?.iter().map(|p| p.leader).collect();
    let victim = cluster
        .ids()
        .into_iter()
        .find(|id| !leaders.contains(id))
        .context("every node leads a partition")?;
    let asking = other_nodes(&cluster, victim);

    cluster.node(victim).kill()?;
    let fault_at = Instant::now();
    let shrink = await_out_of_every_isr(&cluster, &asking, victim, Duration::from_secs(15))?;
    workload.await_progress_since(Instant::now(), PROGRESS, FAILOVER_TIMEOUT)?;
    eprintln!("follower {victim} killed; out of every ISR after {shrink:?}; producing continues");
    let leaders_after: BTreeSet<i32> = cluster.partitions(asking[0], TOPIC)?.iter().map(|p| p.leader).collect();
    ensure!(
        leaders_after == leaders,
        "leaders changed from {leaders:?} to {leaders_after:?} although only a follower died"
    );

    cluster.node(victim).restart()?;
    let returned_at = Instant::now();
    await_rejoin(&cluster, victim, returned_at)?;
    settle_and_check(&cluster, workload, returned_at, partitions, fault_at)?;
    Ok(())
}

#[test]
fn acked_records_survive_killing_the_active_controller() -> Result<()> {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (mut cluster, workload) = start_case(PARTITIONS)?;
    let controller = cluster.controller(1, Duration::from_secs(10))?;
    let survivors = other_nodes(&cluster, controller);

    cluster.node(controller).kill()?;
    let fault_at = Instant::now();
    let new_controller = wait_until(FAILOVER_TIMEOUT, "a new controller", || {
        cluster
            .controller(survivors[0], Duration::from_secs(1))
            .ok()
            .filter(|id| survivors.contains(id))
    })?;
    let failover = workload.await_progress_since(fault_at, PROGRESS, FAILOVER_TIMEOUT)?;
    eprintln!("controller {controller} killed; {new_controller} took over; producing everywhere after {failover:?}");

    cluster.node(controller).restart()?;
    let returned_at = Instant::now();
    settle_and_check(&cluster, workload, returned_at, PARTITIONS, fault_at)?;
    Ok(())
}

#[test]
fn a_paused_leader_drops_out_of_the_isr_and_rejoins_after_resume() -> Result<()> {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    const PAUSE: Duration = Duration::from_secs(8);
    let (mut cluster, workload) = start_case(PARTITIONS)?;
    let victim = cluster.partition_leader(1, TOPIC, 0, Duration::from_secs(5))?;
    let asking = other_nodes(&cluster, victim);

    cluster.node(victim).pause()?;
    let fault_at = Instant::now();
    // The paused node answers nothing, so only the others are asked while it is stopped.
    let dropped = await_out_of_every_isr(&cluster, &asking, victim, PAUSE);
    let during_pause = workload.acked_since(fault_at);
    if let Some(rest) = PAUSE.checked_sub(fault_at.elapsed()) {
        std::thread::sleep(rest);
    }
    cluster.node(victim).resume()?;
    let returned_at = Instant::now();
    let dropped = dropped.map_err(|e| e.context(format!("while node {victim} was paused for {PAUSE:?}")))?;
    eprintln!("node {victim} paused: out of every ISR after {dropped:?}; acked while paused {during_pause:?}");

    workload.await_progress_since(returned_at, PROGRESS, FAILOVER_TIMEOUT)?;
    // librdkafka's idempotent producer waits for requests in flight to the frozen leader to time
    // out before it moves on, so that partition may only resume once the node does.
    let resumed = workload.await_progress_since(fault_at, PROGRESS, FAILOVER_TIMEOUT)?;
    eprintln!("producing on every partition again {resumed:?} after the pause began");
    await_rejoin(&cluster, victim, returned_at)?;
    settle_and_check(&cluster, workload, returned_at, PARTITIONS, fault_at)?;
    Ok(())
}

#[test]
fn controlled_shutdown_of_a_leader_fails_no_delivery_and_it_becomes_preferred_leader_again() -> Result<()> {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (mut cluster, workload) = start_case(PARTITIONS)?;
    let victim = cluster.partition_leader(1, TOPIC, 0, Duration::from_secs(5))?;
    let preferred: Vec<i32> = cluster
        .partitions(1, TOPIC)?
        .iter()
        .filter(|p| p.preferred_leader() == Some(victim))
        .map(|p| p.partition)
        .collect();
    let survivor = other_nodes(&cluster, victim)[0];

    let status = cluster.node(victim).terminate(Duration::from_secs(30))?;
    let fault_at = Instant::now();
    ensure!(status.success(), "node {victim} exited with {status} after SIGTERM");
    let failover = workload.await_progress_since(fault_at, PROGRESS, FAILOVER_TIMEOUT)?;
    let moved: Vec<i32> = cluster.partitions(survivor, TOPIC)?.iter().map(|p| p.leader).collect();
    ensure!(
        !moved.contains(&victim),
        "node {victim} shut down but still leads: leaders {moved:?}"
    );
    eprintln!("leader {victim} shut down; producing everywhere after {failover:?}; leaders {moved:?}");

    cluster.node(victim).restart()?;
    let returned_at = Instant::now();
    let mut last = Vec::new();
    let regained = wait_until(Duration::from_secs(15), "", || {
        last.clear();
        for id in cluster.ids() {
            let ps = cluster.partitions(id, TOPIC).ok()?;
            last.extend(
                ps.into_iter()
                    .filter(|p| preferred.contains(&p.partition))
                    .map(|p| (id, p)),
            );
        }
        last.iter()
            .all(|(_, p)| p.leader == victim)
            .then(|| returned_at.elapsed())
    })
    .map_err(|_| {
        anyhow::anyhow!(
            "node {victim} did not lead its preferred partitions {preferred:?} within 15 s of restarting, \
             per node asked: {last:?}"
        )
    })?;
    eprintln!("node {victim} leads its preferred partitions {preferred:?} again after {regained:?}");
    let settled = settle_and_check(&cluster, workload, returned_at, PARTITIONS, fault_at)?;
    let failed: Vec<String> = settled
        .producer
        .failed()
        .take(10)
        .map(|d| format!("{} to partition {}: {:?}", d.value(), d.partition, d.outcome))
        .collect();
    ensure!(
        failed.is_empty(),
        "controlled shutdown failed {} deliveries, e.g. {failed:?}",
        settled.producer.failed().count()
    );
    Ok(())
}

#[test]
fn acked_records_survive_losing_the_leader_after_the_isr_shrank_and_the_stale_replica_does_not_lead() -> Result<()> {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (mut cluster, workload) = start_case(PARTITIONS)?;
    let p0 = cluster.partitions(1, TOPIC)?.remove(0);
    let leader = p0.leader;
    let followers: Vec<i32> = p0.replicas.iter().copied().filter(|r| *r != leader).collect();
    let (stale, survivor) = (followers[0], followers[1]);

    // The stale replica dies; records are then acked by the leader and the survivor alone.
    cluster.node(stale).kill()?;
    let fault_at = Instant::now();
    await_out_of_every_isr(&cluster, &[leader, survivor], stale, Duration::from_secs(15))?;
    workload.await_progress_since(Instant::now(), PROGRESS, FAILOVER_TIMEOUT)?;
    std::thread::sleep(Duration::from_secs(2));

    // The leader dies too; the stale replica returns (restoring the metadata quorum). Only the
    // survivor has every acked record, so it must lead; the stale one catches up from it.
    cluster.node(leader).kill()?;
    cluster.node(stale).respawn()?;
    cluster.node(stale).wait_ready()?;
    let stale_back_at = Instant::now();
    let mut last = None;
    let new_leader = wait_until(FAILOVER_TIMEOUT, "", || {
        last = cluster.partitions(survivor, TOPIC).ok().map(|mut ps| ps.remove(0));
        last.as_ref().map(|p| p.leader).filter(|l| *l >= 0 && *l != leader)
    })
    .map_err(|_| anyhow::anyhow!("partition 0 did not move off the killed leader {leader}: {last:?}"))?;
    ensure!(
        new_leader == survivor,
        "partition 0 is led by node {new_leader}, but only node {survivor} was in sync (node {stale} was out of \
         the ISR, node {leader} is down)"
    );
    let resumed = workload.await_progress_since(stale_back_at, PROGRESS, FAILOVER_TIMEOUT)?;
    eprintln!(
        "node {stale} killed, then leader {leader}; {stale} back and {survivor} leads partition 0; \
         producing on every partition {resumed:?} after {stale} returned"
    );

    cluster.node(leader).restart()?;
    let returned_at = Instant::now();
    settle_and_check(&cluster, workload, returned_at, PARTITIONS, fault_at)?;
    Ok(())
}

#[test]
fn acked_records_survive_three_leader_kills_in_a_row() -> Result<()> {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (mut cluster, workload) = start_case(PARTITIONS)?;
    let first_fault_at = Instant::now();
    let mut returned_at = Instant::now();
    let mut victims = Vec::new();
    // Each round kills whoever leads partition 0 now, so every node's log is truncated and
    // refilled under a new leader epoch at least once.
    for round in 1..=3 {
        let before = cluster.partitions(1, TOPIC)?.remove(0);
        let victim = before.leader;
        let asking = other_nodes(&cluster, victim)[0];
        cluster.node(victim).kill()?;
        let fault_at = Instant::now();
        let failover = workload.await_progress_since(fault_at, PROGRESS, FAILOVER_TIMEOUT)?;
        let after = cluster.partitions(asking, TOPIC)?.remove(0);
        ensure!(
            after.leader != victim && after.leader_epoch > before.leader_epoch,
            "round {round}: partition 0 after killing its leader {victim}: {after:?} (before: {before:?})"
        );
        cluster.node(victim).restart()?;
        returned_at = Instant::now();
        let rejoined = cluster.await_full_isr(TOPIC, REJOIN_TIMEOUT)?;
        eprintln!(
            "round {round}: leader {victim} killed, producing everywhere after {failover:?}; back in full ISR after \
             {:?}; partition 0 now led by {} at epoch {}",
            returned_at.elapsed(),
            rejoined[0].leader,
            rejoined[0].leader_epoch
        );
        victims.push(victim);
    }
    settle_and_check(&cluster, workload, returned_at, PARTITIONS, first_fault_at)?;
    eprintln!("killed in turn: {victims:?}");
    Ok(())
}

#[test]
fn a_leader_that_acked_records_alone_truncates_them_after_failover_and_consumers_never_saw_them() -> Result<()> {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let lost = freeze_followers_then_kill_leader(Acks::Leader)?;
    ensure!(
        !lost.is_empty(),
        "no acks=1 record was lost, so the old leader never had a divergent tail to truncate: the case did not \
         exercise truncation"
    );
    Ok(())
}

#[test]
fn acks_all_waits_for_frozen_followers_and_loses_nothing_when_the_leader_then_dies() -> Result<()> {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let lost = freeze_followers_then_kill_leader(Acks::AllIdempotent)?;
    ensure!(lost.is_empty(), "acks=all records lost: {lost:?}");
    Ok(())
}

/// Both followers of partition 0 freeze for a second while the workload produces with `acks`,
/// then the leader is SIGKILLed and the followers resume. With acks=1 the leader acknowledges
/// records only it has; with acks=all it must not acknowledge anything it appended during the
/// freeze. Either way the high watermark cannot pass what the followers have, so the consumer
/// never sees that tail, and the old leader truncates it when it returns (OffsetForLeaderEpoch;
/// invariant 4 compares the bytes). Returns the acked records missing from the final log.
fn freeze_followers_then_kill_leader(acks: Acks) -> Result<Vec<faults::Delivery>> {
    let producer_config = move |bootstrap: &str| {
        let mut c = faults::workload_producer_config(bootstrap);
        if acks == Acks::Leader {
            c.set("acks", "1").set("enable.idempotence", "false");
        }
        c
    };
    let (mut cluster, workload) = start_case_with(PARTITIONS, producer_config)?;
    let before = cluster.partitions(1, TOPIC)?.remove(0);
    let leader = before.leader;
    let followers = other_nodes(&cluster, leader);

    for &f in &followers {
        cluster.node(f).pause()?;
    }
    let fault_at = Instant::now();
    std::thread::sleep(Duration::from_secs(1));
    cluster.node(leader).kill()?;
    for &f in &followers {
        cluster.node(f).resume()?;
    }
    let resumed_at = Instant::now();
    let mut last = None;
    wait_until(FAILOVER_TIMEOUT, "", || {
        last = cluster.partitions(followers[0], TOPIC).ok().map(|mut ps| ps.remove(0));
        last.as_ref()
            .filter(|p| p.leader >= 0 && p.leader != leader && p.leader_epoch > before.leader_epoch)
            .map(|_| ())
    })
    .map_err(|_| anyhow::anyhow!("partition 0 did not fail over from node {leader}: {last:?}"))?;
    workload.await_progress_since(resumed_at, PROGRESS, FAILOVER_TIMEOUT)?;

    cluster.node(leader).restart()?;
    let returned_at = Instant::now();
    std::thread::sleep(STEADY);
    let settled = faults::stop_and_check_with(&cluster, workload, returned_at + REJOIN_TIMEOUT, acks)?;
    faults::check_progress_after(&settled.producer, PARTITIONS, fault_at)?;

    // Nothing produced to partition 0 after the freeze began can have been acked by all
    // in-sync replicas before they resumed.
    let early: Vec<String> = settled
        .producer
        .acked()
        .filter(|d| d.partition == 0 && d.enqueued_at > fault_at)
        .filter(|d| d.reported_at.is_some_and(|t| t < resumed_at))
        .take(10)
        .map(|d| format!("{} at offset {:?}", d.value(), d.acked_offset()))
        .collect();
    if acks == Acks::AllIdempotent {
        ensure!(
            early.is_empty(),
            "acks=all records of partition 0 enqueued while both followers were frozen were acked before they \
             resumed: {early:?}"
        );
    }
    let log = settled.log.as_ref().context("final log")?;
    let lost = faults::acked_but_missing(log, &settled.producer);
    eprintln!(
        "{acks:?}: node {leader} acked {} partition-0 records during the freeze; {} acked records are not in the \
         final log, e.g. {:?}",
        early.len(),
        lost.len(),
        lost.iter()
            .take(3)
            .map(|d| (d.value(), d.acked_offset()))
            .collect::<Vec<_>>()
    );
    ensure!(
        lost.iter()
            .all(|d| d.partition == 0 && d.enqueued_at >= fault_at - Duration::from_secs(1)),
        "records lost outside partition 0 or from well before the followers froze: {:?}",
        lost.iter().take(10).collect::<Vec<_>>()
    );
    Ok(lost)
}

/// `kcat -P` (Debian's librdkafka) producing numbered lines with acks=all and idempotence,
/// started while a failover is in progress.
struct KcatProducer {
    child: Child,
}

impl KcatProducer {
    fn start(bootstrap: &str, topic: &str, partition: i32, lines: usize) -> Result<Self> {
        let mut child = Command::new(kcat_binary()?)
            .args(["-b", bootstrap, "-P", "-t", topic, "-p", &partition.to_string()])
            .args([
                "-X",
                "acks=all",
                "-X",
                "enable.idempotence=true",
                "-X",
                "message.timeout.ms=60000",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("spawn kcat -P")?;
        let mut stdin = child.stdin.take().context("kcat stdin")?;
        for i in 0..lines {
            writeln!(stdin, "kcat-{i}")?;
        }
        drop(stdin);
        Ok(Self { child })
    }

    /// Waits for kcat to deliver everything and exit successfully.
    fn finish(mut self, timeout: Duration) -> Result<()> {
        let status = wait_until(timeout, "kcat -P to exit", || self.child.try_wait().ok().flatten());
        if status.is_err() {
            let _ = self.child.kill();
        }
        let status = status?;
        let output = self.child.wait_with_output()?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        // Connection errors to the killed broker are expected on stderr; what counts is the
        // exit status and, later, reading every line back.
        ensure!(status.success(), "kcat -P exited with {status}: {stderr}");
        ensure!(
            !stderr.contains("Delivery failed") && !stderr.to_lowercase().contains("fatal"),
            "kcat -P failed deliveries: {stderr}"
        );
        Ok(())
    }
}

/// Reads `partition` to its end with `kcat -C -e` and checks every `kcat-<i>` line is there once.
fn kcat_lines_exactly_once(bootstrap: &str, topic: &str, partition: i32, lines: usize) -> Result<()> {
    let output = Command::new(kcat_binary()?)
        .args(["-b", bootstrap, "-C", "-t", topic, "-p", &partition.to_string()])
        .args(["-o", "beginning", "-e", "-q", "-f", "%o %s\\n"])
        .output()
        .context("run kcat -C")?;
    ensure!(
        output.status.success(),
        "kcat -C exited with {}: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let mut counts = vec![Vec::new(); lines];
    for line in stdout.lines() {
        let Some((offset, value)) = line.split_once(' ') else {
            bail!("unexpected kcat output line {line:?}");
        };
        if let Some(i) = value.strip_prefix("kcat-").and_then(|n| n.parse::<usize>().ok()) {
            if i < lines {
                counts[i].push(offset.to_string());
            }
        }
    }
    let wrong: Vec<String> = counts
        .iter()
        .enumerate()
        .filter(|(_, offsets)| offsets.len() != 1)
        .map(|(i, offsets)| format!("kcat-{i} at offsets {offsets:?}"))
        .collect();
    ensure!(
        wrong.is_empty(),
        "{} of {lines} kcat lines not present exactly once in partition {partition}, e.g. {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(10)]
    );
    Ok(())
}

fn kcat_binary() -> Result<&'static str> {
    for name in ["kcat", "kafkacat"] {
        let found = Command::new(name)
            .arg("-V")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if found.is_ok() {
            return Ok(name);
        }
    }
    bail!("kcat is not installed (apt-get install kcat)")
}

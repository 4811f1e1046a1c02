//! Network partitions (`faults::Net`): a 3-node cluster whose nodes each run in their own
//! network namespace, with links between them cut by nftables rules that drop packets, while an
//! idempotent `acks=all` producer, a consumer reading every partition and two consumer groups
//! that commit after processing keep running. After each fault heals, every acked record is in
//! the final log exactly once, nothing the consumer or a group saw is gone from it, the ISR is
//! whole again, every replica holds the same bytes, each group received every acked record and
//! no commit the coordinator acknowledged is lost (the checks of `faults::stop_and_check`, and
//! the groups' on top).
//!
//! Faults: the active controller isolated; a partition leader cut off by a 2|1 split, where an
//! `acks=all` produce sent to it directly after `replica.lag.time.max.ms` +
//! `broker.session.timeout.ms` does not succeed; a 1|1|1 split (no record sent during it is
//! acknowledged before the heal); one-way loss from a leader to its followers; only the quorum
//! port of a leader cut; only its Kafka port cut.
//!
//! Each test runs two faults in sequence on one cluster, on a fresh topic and fresh groups
//! each, since every fault heals fully before the next begins. The tests start three brokers
//! each, so they run one at a time.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use bytes::Bytes;
use sluice_integration_tests::clients::{now_ms, wait_until};
use sluice_integration_tests::faults::{self, Net, Port, Settled, Workload, FAST_FAILOVER};
use sluice_integration_tests::groups::{
    await_balanced, check_group_received, committed_offsets, member_config, GroupMember, MemberLog, Received,
};
use sluice_integration_tests::{kafka_client, wire, Cluster};

const PARTITIONS: i32 = 3;
const REPLICATION_FACTOR: i16 = 3;
/// Records per second, spread round-robin over the partitions.
const RATE_PER_S: u64 = 1000;
/// How long the workload runs before a fault, and again after the heal.
const STEADY: Duration = Duration::from_secs(1);
/// Acked records each partition must gain before a fault (the workload is under way).
const PROGRESS: u64 = 20;
/// Longest the majority may take to move leadership away from a node it cannot hear.
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(20);
/// Longest the cluster may take to be back to full ISR after a heal.
const REJOIN_TIMEOUT: Duration = Duration::from_secs(30);
/// Slack on top of `replica.lag.time.max.ms` + `broker.session.timeout.ms` before a cut-off
/// leader must have stopped acknowledging.
const MINORITY_MARGIN: Duration = Duration::from_secs(2);
/// The consumer groups of every fault, each one member committing after processing.
const GROUPS: [&str; 2] = ["orders-sink", "analytics"];

/// One test at a time: each starts three brokers and a handful of clients.
static SERIAL: Mutex<()> = Mutex::new(());

fn setting_ms(key: &str) -> Duration {
    let ms = FAST_FAILOVER
        .iter()
        .find(|(k, _)| *k == key)
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or_else(|| panic!("FAST_FAILOVER sets {key} in ms"));
    Duration::from_millis(ms)
}

/// `replica.lag.time.max.ms` + `broker.session.timeout.ms` + [`MINORITY_MARGIN`]: by then a
/// leader cut off from the others is out of the ISR and fenced on the majority side.
fn minority_deadline() -> Duration {
    setting_ms("replica.lag.time.max.ms") + setting_ms("broker.session.timeout.ms") + MINORITY_MARGIN
}

fn start_cluster() -> Result<Cluster> {
    let mut settings: Vec<(&str, &str)> = FAST_FAILOVER.to_vec();
    settings.push(("group.initial.rebalance.delay.ms", "0"));
    Cluster::start_partitionable(3, &settings)
}

fn net(cluster: &Cluster) -> &Net {
    cluster.net().expect("started partitionable")
}

fn others(cluster: &Cluster, except: i32) -> Vec<i32> {
    cluster.ids().into_iter().filter(|id| *id != except).collect()
}

/// One fault's topic, workload and groups.
struct Scenario {
    name: &'static str,
    topic: String,
    workload: Workload,
    members: Vec<(&'static str, GroupMember)>,
}

/// A fresh topic with full ISR, the workload producing and consuming it, and both groups
/// consuming it with their partitions assigned, for [`STEADY`].
fn begin(cluster: &Cluster, name: &'static str) -> Result<Scenario> {
    let topic = format!("partitions-{name}");
    faults::create_topic(
        cluster,
        1,
        &topic,
        PARTITIONS,
        REPLICATION_FACTOR,
        &[("min.insync.replicas", "2")],
    )?;
    cluster.await_full_isr(&topic, Duration::from_secs(20))?;
    let bootstrap = cluster.bootstrap();
    let started = Instant::now();
    let workload = Workload::start(&bootstrap, &topic, PARTITIONS, RATE_PER_S)?;
    let mut members = Vec::new();
    for group in GROUPS {
        let group_id = format!("{group}-{name}");
        let member = GroupMember::start(member_config(&bootstrap, &group_id, "unused"), &topic, &group_id)?;
        members.push((group, member));
    }
    for (group, member) in &members {
        await_balanced(&[member.log()], PARTITIONS, Duration::from_secs(30))
            .with_context(|| format!("group {group} of {name}"))?;
    }
    workload.await_progress_since(started, PROGRESS, Duration::from_secs(15))?;
    std::thread::sleep(STEADY);
    Ok(Scenario {
        name,
        topic,
        workload,
        members,
    })
}

/// After the heal: the workload runs for [`STEADY`] more, then every check. `fault_at` is when
/// the fault began: records enqueued after it must have been acked on every partition.
fn finish(cluster: &Cluster, scenario: Scenario, fault_at: Instant, healed_at: Instant) -> Result<Settled> {
    let Scenario {
        name,
        topic,
        workload,
        members,
    } = scenario;
    ensure!(
        net(cluster).in_force().is_empty(),
        "{name}: faults still in force: {:?}",
        net(cluster).in_force()
    );
    std::thread::sleep(STEADY);
    let checked = faults::stop_and_check(cluster, workload, healed_at + REJOIN_TIMEOUT)
        .and_then(|settled| {
            faults::check_progress_after(&settled.producer, PARTITIONS, fault_at)?;
            check_groups(cluster, &topic, name, &settled, members)?;
            Ok(settled)
        })
        .with_context(|| format!("after fault {name}"))?;
    eprintln!(
        "[partitions] {name}: healed after {:?}, checked {:?} after the heal",
        healed_at - fault_at,
        healed_at.elapsed()
    );
    Ok(checked)
}

/// Each group received every acked record, saw nothing that is not in the final log, and its
/// committed offsets are at least every offset a commit of it was acknowledged for.
fn check_groups(
    cluster: &Cluster,
    topic: &str,
    name: &str,
    settled: &Settled,
    members: Vec<(&'static str, GroupMember)>,
) -> Result<()> {
    let log = settled.log.as_ref().context("no final log")?;
    let acked: Vec<Received> = faults::acked_records(log, &settled.producer);
    let mut ends: BTreeMap<i32, i64> = BTreeMap::new();
    for a in &acked {
        let e = ends.entry(a.partition).or_insert(0);
        *e = (*e).max(a.offset + 1);
    }
    for (group, member) in members {
        let reached = |l: &MemberLog| {
            let mut next: BTreeMap<i32, i64> = BTreeMap::new();
            for r in l.received.lock().expect("lock").iter() {
                let e = next.entry(r.partition).or_insert(0);
                *e = (*e).max(r.offset + 1);
            }
            next
        };
        let caught_up = wait_until(Duration::from_secs(30), "", || {
            let next = reached(member.log());
            ends.iter()
                .all(|(p, end)| next.get(p).is_some_and(|n| n >= end))
                .then_some(())
        });
        if caught_up.is_err() {
            bail!(
                "group {group} of {name} did not reach the acked ends {ends:?} within 30 s: reached {:?}; errors {:?}",
                reached(member.log()),
                member.log().errors_tail(5)
            );
        }
        let member_log: Arc<MemberLog> = member.stop()?;
        let group_id = format!("{group}-{name}");
        check_group_received(&group_id, &[&member_log], &acked, false)?;
        let mut truncated = Vec::new();
        for r in member_log.received.lock().expect("lock").iter() {
            if log.value_at(r.partition, r.offset) != Some(r.value.as_str()) {
                truncated.push(format!(
                    "{} at {}-{} (final log: {:?})",
                    r.value,
                    r.partition,
                    r.offset,
                    log.value_at(r.partition, r.offset)
                ));
            }
        }
        ensure!(
            truncated.is_empty(),
            "group {group_id} received {} records that are not in the final log where it saw them: {:?}",
            truncated.len(),
            &truncated[..truncated.len().min(10)]
        );
        let acked_commits = member_log.acked_commits_before(i64::MAX);
        ensure!(!acked_commits.is_empty(), "group {group_id} had no commit acknowledged");
        let committed = committed_offsets(&cluster.bootstrap(), &group_id, topic, PARTITIONS)?;
        for (p, c) in &acked_commits {
            let now = committed.get(p).copied().flatten();
            ensure!(
                now.is_some_and(|n| n >= *c),
                "group {group_id}: a commit of offset {c} on partition {p} was acknowledged, but OffsetFetch now gives \
                 {now:?}"
            );
        }
    }
    Ok(())
}

/// Waits until every node in `asking` reports a leader other than `old` for every partition of
/// `topic` that `old` led in `before`, each at a higher leader epoch.
fn await_leadership_moved(
    cluster: &Cluster,
    asking: &[i32],
    topic: &str,
    old: i32,
    before: &[sluice_integration_tests::cluster::PartitionState],
) -> Result<Duration> {
    let since = Instant::now();
    let mut last = Vec::new();
    wait_until(FAILOVER_TIMEOUT, "", || {
        last.clear();
        for &id in asking {
            let Ok(now) = cluster.partitions(id, topic) else {
                last.push(format!("node {id}: no metadata"));
                continue;
            };
            for b in before.iter().filter(|b| b.leader == old) {
                match now.iter().find(|p| p.partition == b.partition) {
                    Some(p) if p.leader != old && p.leader >= 0 && p.leader_epoch > b.leader_epoch => {}
                    p => last.push(format!("node {id}: {p:?}")),
                }
            }
        }
        last.is_empty().then(|| since.elapsed())
    })
    .map_err(|_| {
        anyhow::anyhow!(
            "the partitions node {old} led ({before:?}) did not get another leader within {FAILOVER_TIMEOUT:?}: {last:?}; \
             faults in force: {:?}",
            net(cluster).in_force()
        )
    })
}

/// The leader of partition 0 of `topic` and the state of every partition, as node 1 reports it.
fn leader_of_partition_0(
    cluster: &Cluster,
    topic: &str,
) -> Result<(i32, Vec<sluice_integration_tests::cluster::PartitionState>)> {
    let leader = cluster.partition_leader(1, topic, 0, Duration::from_secs(10))?;
    Ok((leader, cluster.partitions(1, topic)?))
}

#[test]
fn isolating_the_controller_then_a_leader_loses_no_acked_record_and_the_cut_off_leader_stops_acknowledging(
) -> Result<()> {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = start_cluster()?;

    // The active controller, cut off from both other nodes.
    let scenario = begin(&cluster, "isolate-controller")?;
    let controller = cluster.controller(1, Duration::from_secs(10))?;
    let survivors = others(&cluster, controller);
    net(&cluster).isolate(controller)?;
    let fault_at = Instant::now();
    let new_controller = wait_until(FAILOVER_TIMEOUT, "a new controller on the majority side", || {
        cluster
            .controller(survivors[0], Duration::from_secs(1))
            .ok()
            .filter(|id| survivors.contains(id))
    })?;
    wait_until(FAILOVER_TIMEOUT, "the majority fencing the isolated controller", || {
        survivors
            .iter()
            .all(|id| cluster.listed_brokers(*id).is_ok_and(|b| !b.contains(&controller)))
            .then_some(())
    })?;
    eprintln!(
        "controller {controller} isolated; node {new_controller} took over and fenced it after {:?}; acked since {:?}",
        fault_at.elapsed(),
        scenario.workload.acked_since(fault_at)
    );
    net(&cluster).heal()?;
    finish(&cluster, scenario, fault_at, Instant::now())?;

    // A partition leader on the minority side of a 2|1 split.
    let scenario = begin(&cluster, "split-leader")?;
    let (victim, before) = leader_of_partition_0(&cluster, &scenario.topic)?;
    let majority = others(&cluster, victim);
    const PROBE_TOPIC: &str = "partitions-probe";
    kafka_client::create_topic_on(cluster.addr(1), PROBE_TOPIC, &[&[victim, majority[0], majority[1]]])?;
    cluster.await_full_isr(PROBE_TOPIC, Duration::from_secs(20))?;
    let probe_before = cluster.partition_0(victim, PROBE_TOPIC)?;
    ensure!(
        probe_before.leader == victim,
        "{PROBE_TOPIC} is led by {probe_before:?}, not node {victim}"
    );
    let acked_probe = probe(
        &cluster,
        victim,
        PROBE_TOPIC,
        "probe-before-the-cut",
        Duration::from_secs(10),
    )?;
    ensure!(
        acked_probe.0 == 0,
        "an acks=all produce to {PROBE_TOPIC} on node {victim} before any fault failed: {acked_probe:?}"
    );

    net(&cluster).split(&[&majority, &[victim]])?;
    let fault_at = Instant::now();
    let moved = await_leadership_moved(&cluster, &majority, &scenario.topic, victim, &before)?;
    await_leadership_moved(
        &cluster,
        &majority,
        PROBE_TOPIC,
        victim,
        std::slice::from_ref(&probe_before),
    )?;
    if let Some(rest) = minority_deadline().checked_sub(fault_at.elapsed()) {
        std::thread::sleep(rest);
    }
    let probed_at = fault_at.elapsed();
    let answer = probe(
        &cluster,
        victim,
        PROBE_TOPIC,
        "probe-on-the-minority-side",
        Duration::from_secs(3),
    );
    eprintln!(
        "leader {victim} cut off by split {:?}: the majority moved its partitions after {moved:?}; an acks=all produce \
         sent to it {probed_at:?} after the cut got {answer:?}",
        net(&cluster).in_force()
    );
    if let Ok((0, offset)) = answer {
        bail!(
            "node {victim}, cut off from the others for {probed_at:?} (replica.lag.time.max.ms + \
             broker.session.timeout.ms + {MINORITY_MARGIN:?} = {:?}), acknowledged an acks=all produce at offset \
             {offset}",
            minority_deadline()
        );
    }
    net(&cluster).heal()?;
    let healed_at = Instant::now();
    finish(&cluster, scenario, fault_at, healed_at)?;
    cluster.await_full_isr(PROBE_TOPIC, REJOIN_TIMEOUT)?;
    let probe_log = faults::read_final_log(&cluster.bootstrap(), PROBE_TOPIC, 1, Duration::from_secs(30))?;
    let values: Vec<&str> = probe_log.records[&0].iter().map(|(_, v)| v.as_str()).collect();
    ensure!(
        values == ["probe-before-the-cut"],
        "{PROBE_TOPIC} should hold only the record acked before the cut, not the one the cut-off leader was sent: \
         {:?}",
        probe_log.records
    );
    faults::await_identical_replicas(&cluster, PROBE_TOPIC, 1, Duration::from_secs(20))?;
    Ok(())
}

/// An `acks=all` produce of one record `value` to partition 0 of `topic`, sent to node `to`
/// with the request timeout `timeout`: the error code and base offset, or an error if no
/// answer came.
fn probe(cluster: &Cluster, to: i32, topic: &str, value: &str, timeout: Duration) -> Result<(i16, i64)> {
    let batch = wire::record_batch_v2(
        now_ms(),
        &[wire::RawRecord {
            key: None,
            value: Some(value.as_bytes()),
        }],
    );
    let answer = kafka_client::produce_to_partition_0(cluster.addr(to), topic, -1, Bytes::from(batch), timeout)?;
    Ok((answer.error_code, answer.base_offset))
}

#[test]
fn a_1_1_1_split_and_one_way_loss_from_a_leader_lose_no_acked_record() -> Result<()> {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = start_cluster()?;

    // No two nodes can talk: there is no majority anywhere, so nothing new can be acknowledged.
    let scenario = begin(&cluster, "split-1-1-1")?;
    net(&cluster).split(&[&[1], &[2], &[3]])?;
    let fault_at = Instant::now();
    std::thread::sleep(minority_deadline());
    net(&cluster).heal()?;
    let healed_at = Instant::now();
    let settled = finish(&cluster, scenario, fault_at, healed_at)?;
    let acked_while_split: Vec<String> = settled
        .producer
        .acked()
        .filter(|d| d.enqueued_at >= fault_at && d.reported_at.is_some_and(|at| at < healed_at))
        .take(10)
        .map(|d| format!("{} at {}-{:?}", d.value(), d.partition, d.acked_offset()))
        .collect();
    ensure!(
        acked_while_split.is_empty(),
        "records sent during the 1|1|1 split were acknowledged before the heal (first: {acked_while_split:?})"
    );

    // The leader's packets to its followers are lost; theirs to it arrive.
    let scenario = begin(&cluster, "one-way-from-leader")?;
    let (victim, before) = leader_of_partition_0(&cluster, &scenario.topic)?;
    let followers = others(&cluster, victim);
    for f in &followers {
        net(&cluster).one_way(victim, *f)?;
    }
    let fault_at = Instant::now();
    let moved = await_leadership_moved(&cluster, &followers, &scenario.topic, victim, &before)?;
    eprintln!("node {victim}'s packets to {followers:?} dropped: its partitions moved after {moved:?}");
    net(&cluster).heal()?;
    finish(&cluster, scenario, fault_at, Instant::now())?;
    Ok(())
}

#[test]
fn cutting_only_the_quorum_port_or_only_the_kafka_port_of_a_leader_loses_no_acked_record() -> Result<()> {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = start_cluster()?;

    // Only the quorum port: the leader's Kafka listener still serves its followers, but the
    // controller hears no heartbeat from it, fences it and moves its partitions.
    let scenario = begin(&cluster, "quorum-port")?;
    let (victim, before) = leader_of_partition_0(&cluster, &scenario.topic)?;
    let peers = others(&cluster, victim);
    for p in &peers {
        net(&cluster).cut_port(victim, *p, Port::Quorum)?;
    }
    let fault_at = Instant::now();
    let moved = await_leadership_moved(&cluster, &peers, &scenario.topic, victim, &before)?;
    eprintln!("node {victim}'s quorum port cut from {peers:?}: its partitions moved after {moved:?}");
    net(&cluster).heal()?;
    finish(&cluster, scenario, fault_at, Instant::now())?;

    // Only the Kafka port: the leader still heartbeats, but nobody can fetch from it or it from
    // them, so it drops out of the ISR of the partitions it follows.
    let scenario = begin(&cluster, "kafka-port")?;
    let (victim, before) = leader_of_partition_0(&cluster, &scenario.topic)?;
    let peers = others(&cluster, victim);
    for p in &peers {
        net(&cluster).cut_port(victim, *p, Port::Kafka)?;
    }
    let fault_at = Instant::now();
    let followed: Vec<i32> = before
        .iter()
        .filter(|p| p.leader != victim)
        .map(|p| p.partition)
        .collect();
    let mut last = Vec::new();
    wait_until(FAILOVER_TIMEOUT, "", || {
        last = cluster
            .partitions(peers[0], &scenario.topic)
            .ok()?
            .into_iter()
            .filter(|p| followed.contains(&p.partition))
            .collect::<Vec<_>>();
        last.iter().all(|p| !p.isr.contains(&victim)).then_some(())
    })
    .map_err(|_| {
        anyhow::anyhow!(
            "node {victim}, whose Kafka port is cut from {peers:?}, is still in the ISR of partitions it follows: \
             {last:?}"
        )
    })?;
    eprintln!(
        "node {victim}'s Kafka port cut from {peers:?}: out of the ISRs it follows after {:?}: {last:?}",
        fault_at.elapsed()
    );
    net(&cluster).heal()?;
    finish(&cluster, scenario, fault_at, Instant::now())?;
    Ok(())
}

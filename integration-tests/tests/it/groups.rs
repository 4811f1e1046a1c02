//! Kafka's classic consumer-group protocol on a 3-node cluster, with rdkafka group members that
//! subscribe and commit after processing (`src/groups.rs`): two groups of three over a
//! 12-partition RF-3 topic each receive all 200,000 records exactly once; a SIGKILLed member is
//! expired after its session timeout and the survivors take over its partitions; a group that
//! was closed resumes at its committed offsets; and SIGKILL, SIGTERM or SIGSTOP (until another
//! node took over) of the node coordinating a group (leader of its `__consumer_offsets`
//! partition) loses no acknowledged commit.
//!
//! The brokers run with `group.initial.rebalance.delay.ms=0` (no test here is about the delay)
//! and fast failover settings. Each case starts three brokers, so they run one at a time.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use sluice_integration_tests::clients::{now_ms, wait_until};
use sluice_integration_tests::faults::{self, Workload, FAST_FAILOVER};
use sluice_integration_tests::groups::{
    self, await_balanced, check_group_received, committed_offsets, distinct_received, find_coordinator, member_config,
    offsets_partition, GroupMember, MemberLog, MemberProcess, Received, OFFSETS_TOPIC_PARTITIONS,
};
use sluice_integration_tests::{retry_port_races, Cluster};

static SERIAL: Mutex<()> = Mutex::new(());

const MEMBER_BIN: &str = env!("CARGO_BIN_EXE_sluice-group-member");

/// Three nodes, fast failover, no initial rebalance delay; a start that lost a port race is
/// retried on fresh ports.
fn start_cluster() -> Result<Cluster> {
    let mut settings: Vec<(&str, &str)> = FAST_FAILOVER.to_vec();
    settings.push(("group.initial.rebalance.delay.ms", "0"));
    retry_port_races(|| Cluster::start(3, &settings))
}

/// A topic with replication factor 3 and min.insync.replicas=2, with every replica in sync.
fn create_replicated_topic(cluster: &Cluster, topic: &str, partitions: i32) -> Result<()> {
    faults::create_topic(cluster, 1, topic, partitions, 3, &[("min.insync.replicas", "2")])?;
    cluster.await_full_isr(topic, Duration::from_secs(20))?;
    Ok(())
}

fn start_members(bootstrap: &str, group: &str, topic: &str, n: usize) -> Result<Vec<GroupMember>> {
    (0..n)
        .map(|i| {
            GroupMember::start(
                member_config(bootstrap, group, "unused"),
                topic,
                &format!("{group}-{i}"),
            )
        })
        .collect()
}

fn logs(members: &[GroupMember]) -> Vec<&Arc<MemberLog>> {
    members.iter().map(GroupMember::log).collect()
}

/// Waits until the members together received `n` distinct offsets.
fn await_distinct(group: &str, logs: &[&Arc<MemberLog>], n: usize, timeout: Duration) -> Result<Duration> {
    let since = Instant::now();
    let mut got = 0;
    wait_until(timeout, "", || {
        got = distinct_received(logs);
        (got >= n).then(|| since.elapsed())
    })
    .map_err(|_| {
        anyhow::anyhow!(
            "group {group} received {got} of {n} records within {timeout:?}; assignments {:?}; member errors {:?}",
            logs.iter().map(|l| l.current_assignment()).collect::<Vec<_>>(),
            logs.iter().map(|l| l.errors_tail(5)).collect::<Vec<_>>()
        )
    })
}

fn end_offsets(acked: &[Received], partitions: i32) -> BTreeMap<i32, i64> {
    let mut ends: BTreeMap<i32, i64> = (0..partitions).map(|p| (p, 0)).collect();
    for r in acked {
        let e = ends.entry(r.partition).or_default();
        *e = (*e).max(r.offset + 1);
    }
    ends
}

#[test]
fn two_groups_of_three_each_receive_all_200k_records_exactly_once() -> Result<()> {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    const TOPIC: &str = "groups-two-groups";
    const PARTITIONS: i32 = 12;
    const RECORDS: u64 = 200_000;
    let cluster = start_cluster()?;
    create_replicated_topic(&cluster, TOPIC, PARTITIONS)?;
    let bootstrap = cluster.bootstrap();

    // Members join while records arrive: rebalances happen under load, and the members' commit
    // before revocation keeps delivery exactly once per group.
    let sink = start_members(&bootstrap, "orders-sink", TOPIC, 3)?;
    let analytics = start_members(&bootstrap, "analytics", TOPIC, 3)?;
    let started = Instant::now();
    let acked = groups::produce_all(&bootstrap, TOPIC, PARTITIONS, 0..RECORDS)?;
    eprintln!("{RECORDS} records acknowledged after {:?}", started.elapsed());

    for (group, members) in [("orders-sink", &sink), ("analytics", &analytics)] {
        let took = await_distinct(group, &logs(members), RECORDS as usize, Duration::from_secs(120))?;
        eprintln!("group {group} received every record {took:?} after the producer finished");
        let split = await_balanced(&logs(members), PARTITIONS, Duration::from_secs(10))?;
        eprintln!("group {group} assignment: {split:?}");
    }
    let ends = end_offsets(&acked, PARTITIONS);
    for (group, members) in [("orders-sink", sink), ("analytics", analytics)] {
        let logs: Vec<Arc<MemberLog>> = members.into_iter().map(GroupMember::stop).collect::<Result<_>>()?;
        let refs: Vec<&Arc<MemberLog>> = logs.iter().collect();
        check_group_received(group, &refs, &acked, true)?;
        // Closing members commit what they processed: the group's committed offsets are the ends.
        let committed = committed_offsets(&bootstrap, group, TOPIC, PARTITIONS)?;
        let want: BTreeMap<i32, Option<i64>> = ends.iter().map(|(p, o)| (*p, Some(*o))).collect();
        ensure!(
            committed == want,
            "group {group}: committed offsets {committed:?}, log end offsets {want:?}"
        );
    }
    Ok(())
}

#[test]
fn a_killed_member_is_expired_after_its_session_timeout_and_the_group_still_gets_every_record() -> Result<()> {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    const TOPIC: &str = "groups-member-kill";
    const GROUP: &str = "member-kill";
    const PARTITIONS: i32 = 6;
    const SESSION_TIMEOUT_MS: i64 = 6000;
    let cluster = start_cluster()?;
    create_replicated_topic(&cluster, TOPIC, PARTITIONS)?;
    let bootstrap = cluster.bootstrap();
    let session = SESSION_TIMEOUT_MS.to_string();
    let mut members: Vec<MemberProcess> = (0..3)
        .map(|i| {
            MemberProcess::start(
                Path::new(MEMBER_BIN),
                &bootstrap,
                GROUP,
                TOPIC,
                &format!("{GROUP}-{i}"),
                &[("session.timeout.ms", &session)],
            )
        })
        .collect::<Result<_>>()?;
    let all_logs: Vec<Arc<MemberLog>> = members.iter().map(|m| m.log().clone()).collect();
    let all: Vec<&Arc<MemberLog>> = all_logs.iter().collect();
    await_balanced(&all, PARTITIONS, Duration::from_secs(30))?;

    let mut acked = groups::produce_all(&bootstrap, TOPIC, PARTITIONS, 0..6000)?;
    await_distinct(GROUP, &all, 6000, Duration::from_secs(30))?;

    let (_, victim_partitions) = all[0].current_assignment();
    members[0].kill()?;
    let killed_ms = now_ms();
    eprintln!(
        "member {} (partitions {victim_partitions:?}) SIGKILLed",
        members[0].client_id
    );
    acked.extend(groups::produce_all(&bootstrap, TOPIC, PARTITIONS, 6000..12000)?);

    let survivors = &all[1..];
    await_balanced(survivors, PARTITIONS, Duration::from_secs(45))?;
    let rebalanced_ms = survivors.iter().map(|l| l.current_assignment().0).max().unwrap_or(0);
    let after_ms = rebalanced_ms - killed_ms;
    eprintln!("survivors took over every partition {after_ms} ms after the kill");
    // The coordinator expires the member once its session times out (its last heartbeat was at
    // most heartbeat.interval.ms = 3 s before the kill), not on the closed connection; the
    // survivors rejoin at their next heartbeat.
    ensure!(
        after_ms >= 2000,
        "the survivors got the killed member's partitions {after_ms} ms after the kill, before its \
         {SESSION_TIMEOUT_MS} ms session could have expired"
    );
    ensure!(
        after_ms <= SESSION_TIMEOUT_MS + 10_000,
        "the group rebalanced {after_ms} ms after the kill; session.timeout.ms is {SESSION_TIMEOUT_MS}"
    );
    await_distinct(GROUP, &all, 12_000, Duration::from_secs(30))?;
    check_group_received(GROUP, &all, &acked, false)?;

    // The survivors start the victim's partitions at or after its last acknowledged commit.
    let victim_commits = all[0].acked_commits_before(i64::MAX);
    for log in survivors {
        for f in log.firsts.lock().expect("lock").iter().filter(|f| f.at_ms > killed_ms) {
            if let Some(c) = victim_commits.get(&f.partition) {
                ensure!(
                    f.offset >= *c,
                    "partition {} restarted at {} after the kill, below the killed member's acknowledged commit {c}",
                    f.partition,
                    f.offset
                );
            }
        }
    }
    for m in &mut members[1..] {
        m.stop(Duration::from_secs(30))?;
    }
    Ok(())
}

#[test]
fn a_closed_and_restarted_group_resumes_at_its_committed_offsets() -> Result<()> {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    const TOPIC: &str = "groups-resume";
    const GROUP: &str = "resume";
    const PARTITIONS: i32 = 6;
    let cluster = start_cluster()?;
    create_replicated_topic(&cluster, TOPIC, PARTITIONS)?;
    let bootstrap = cluster.bootstrap();

    let first = start_members(&bootstrap, GROUP, TOPIC, 3)?;
    let acked1 = groups::produce_all(&bootstrap, TOPIC, PARTITIONS, 0..6000)?;
    await_distinct(GROUP, &logs(&first), 6000, Duration::from_secs(60))?;
    for m in first {
        m.stop()?;
    }
    let ends1 = end_offsets(&acked1, PARTITIONS);
    let committed = committed_offsets(&bootstrap, GROUP, TOPIC, PARTITIONS)?;
    let want: BTreeMap<i32, Option<i64>> = ends1.iter().map(|(p, o)| (*p, Some(*o))).collect();
    ensure!(
        committed == want,
        "after closing every member, OffsetFetch gives {committed:?}; they processed up to {want:?}"
    );

    let acked2 = groups::produce_all(&bootstrap, TOPIC, PARTITIONS, 6000..9000)?;
    let second = start_members(&bootstrap, GROUP, TOPIC, 3)?;
    await_distinct(GROUP, &logs(&second), 3000, Duration::from_secs(60))?;
    await_balanced(&logs(&second), PARTITIONS, Duration::from_secs(10))?;
    let second: Vec<Arc<MemberLog>> = second.into_iter().map(GroupMember::stop).collect::<Result<_>>()?;
    let refs: Vec<&Arc<MemberLog>> = second.iter().collect();

    // Per partition, the first record after the restart is the one at the committed offset:
    // not the beginning (0), not the end (nothing would arrive).
    let mut first_offsets: BTreeMap<i32, i64> = BTreeMap::new();
    for log in &refs {
        let mut firsts = log.firsts.lock().expect("lock").clone();
        firsts.sort_by_key(|f| f.at_ms);
        for f in firsts {
            first_offsets.entry(f.partition).or_insert(f.offset);
        }
    }
    let want_first: BTreeMap<i32, i64> = ends1.clone();
    ensure!(
        first_offsets == want_first,
        "first offset per partition after the restart {first_offsets:?}; committed before it {want_first:?}"
    );
    let old: Vec<String> = refs
        .iter()
        .flat_map(|l| l.received.lock().expect("lock").clone())
        .filter(|r| r.offset < ends1[&r.partition])
        .take(5)
        .map(|r| format!("{} at {}-{}", r.value, r.partition, r.offset))
        .collect();
    ensure!(
        old.is_empty(),
        "the restarted group re-read records below its committed offsets: {old:?}"
    );
    check_group_received(GROUP, &refs, &acked2, true)?;
    Ok(())
}

/// How the coordinator node goes away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// SIGKILL: fenced after broker.session.timeout.ms, leadership moves then.
    Kill,
    /// SIGTERM: controlled shutdown moves leadership first.
    Terminate,
    /// SIGSTOP until another node coordinates the group, then SIGCONT: the old coordinator
    /// comes back believing it still leads, with client requests queued on its sockets.
    Pause,
}

#[test]
fn killing_the_group_coordinator_loses_no_acknowledged_commit_and_both_groups_finish() -> Result<()> {
    coordinator_goes_away(Stop::Kill)
}

#[test]
fn a_controlled_shutdown_of_the_group_coordinator_loses_no_acknowledged_commit() -> Result<()> {
    coordinator_goes_away(Stop::Terminate)
}

#[test]
fn a_frozen_coordinator_that_resumes_after_the_failover_loses_no_acknowledged_commit() -> Result<()> {
    coordinator_goes_away(Stop::Pause)
}

/// Two groups of three consume a topic while an idempotent producer writes to it; the node
/// coordinating orders-sink (and a witness group whose offsets nobody changes) stops; later it
/// returns and becomes the coordinator again.
fn coordinator_goes_away(stop: Stop) -> Result<()> {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    const TOPIC: &str = "groups-coordinator-stop";
    const PARTITIONS: i32 = 6;
    let mut cluster = start_cluster()?;
    create_replicated_topic(&cluster, TOPIC, PARTITIONS)?;
    let bootstrap = cluster.bootstrap();
    let mut workload = Workload::start(&bootstrap, TOPIC, PARTITIONS, 2000)?;
    let sink = start_members(&bootstrap, "orders-sink", TOPIC, 3)?;
    let analytics = start_members(&bootstrap, "analytics", TOPIC, 3)?;
    await_balanced(&logs(&sink), PARTITIONS, Duration::from_secs(30))?;
    await_balanced(&logs(&analytics), PARTITIONS, Duration::from_secs(30))?;

    // The coordinator of orders-sink: FindCoordinator names the leader of the group's
    // __consumer_offsets partition, which is internal, has 50 partitions and 3 replicas.
    let coordinator = match find_coordinator(cluster.addr(1), "orders-sink")? {
        Ok(id) => id,
        Err((code, msg)) => bail!("FindCoordinator(orders-sink) failed with error {code}: {msg}"),
    };
    let offsets_topic = cluster.await_full_isr("__consumer_offsets", Duration::from_secs(30))?;
    ensure!(
        offsets_topic.len() == OFFSETS_TOPIC_PARTITIONS as usize,
        "__consumer_offsets has {} partitions",
        offsets_topic.len()
    );
    let group_partition = &offsets_topic[offsets_partition("orders-sink") as usize];
    ensure!(
        group_partition.leader == coordinator && group_partition.replicas.len() == 3,
        "FindCoordinator(orders-sink) = node {coordinator}, but its __consumer_offsets partition is {group_partition:?}"
    );
    let internal = sluice_integration_tests::kafka_client::metadata(cluster.addr(1))?
        .topics
        .iter()
        .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == "__consumer_offsets"))
        .map(|t| t.is_internal);
    ensure!(
        internal == Some(true),
        "Metadata lists __consumer_offsets with is_internal {internal:?}"
    );

    // A witness group on the same coordinator, with offsets committed (acknowledged) right
    // before the stop and nobody committing after it: OffsetFetch must return exactly them.
    let witness = (0..)
        .map(|i| format!("witness-{i}"))
        .find(|g| offsets_topic[offsets_partition(g) as usize].leader == coordinator)
        .context("a witness group name")?;
    let witness_offsets: BTreeMap<i32, i64> = (0..PARTITIONS).map(|p| (p, 100 + p as i64)).collect();
    groups::commit_as_admin(&bootstrap, &witness, TOPIC, &witness_offsets)?;

    std::thread::sleep(Duration::from_secs(2)); // members keep consuming and committing
    match stop {
        Stop::Kill => cluster.node(coordinator).kill()?,
        Stop::Terminate => {
            let status = cluster.node(coordinator).terminate(Duration::from_secs(30))?;
            // 0, or 143 = 128 + SIGTERM as a JVM broker reports a graceful shutdown.
            ensure!(
                status.success() || status.code() == Some(143),
                "node {coordinator} exited with {status} after SIGTERM"
            );
        }
        Stop::Pause => cluster.node(coordinator).pause()?,
    }
    let stopped_ms = now_ms();
    let survivors: Vec<i32> = cluster.ids().into_iter().filter(|id| *id != coordinator).collect();
    eprintln!("coordinator node {coordinator} of orders-sink and {witness} stopped ({stop:?})");

    let new_coordinator =
        wait_until(
            Duration::from_secs(30),
            "a new coordinator for orders-sink",
            || match find_coordinator(cluster.addr(survivors[0]), "orders-sink") {
                Ok(Ok(id)) if id != coordinator => Some(id),
                _ => None,
            },
        )?;
    ensure!(
        survivors.contains(&new_coordinator),
        "new coordinator {new_coordinator} is not a live node"
    );
    // Asked through the live nodes only: a frozen node accepts connections but never answers.
    let live_bootstrap = survivors
        .iter()
        .map(|id| cluster.addr(*id).to_string())
        .collect::<Vec<_>>()
        .join(",");
    let fetched = committed_offsets(&live_bootstrap, &witness, TOPIC, PARTITIONS)?;
    let want: BTreeMap<i32, Option<i64>> = witness_offsets.iter().map(|(p, o)| (*p, Some(*o))).collect();
    ensure!(
        fetched == want,
        "{witness} committed {want:?} before its coordinator stopped; OffsetFetch now gives {fetched:?}"
    );
    if stop == Stop::Pause {
        cluster.node(coordinator).resume()?;
        eprintln!("node {coordinator} resumed after node {new_coordinator} took over orders-sink");
    }

    std::thread::sleep(Duration::from_secs(3)); // keep producing and consuming after the failover
    let producer = workload.stop_producing()?;
    let acked: Vec<Received> = producer
        .acked()
        .map(|d| Received {
            partition: d.partition,
            offset: d.acked_offset().expect("acked"),
            value: d.value(),
        })
        .collect();
    eprintln!("{}", producer.summary());
    drop(workload);

    let mut final_committed = Vec::new();
    for (group, members) in [("orders-sink", sink), ("analytics", analytics)] {
        let member_logs = logs(&members);
        // Every acked record, by (partition, offset): wait for the group to have read them all.
        let ends = end_offsets(&acked, PARTITIONS);
        let mut last = BTreeMap::new();
        wait_until(Duration::from_secs(60), "", || {
            last = BTreeMap::new();
            for l in &member_logs {
                for r in l.received.lock().expect("lock").iter() {
                    let e = last.entry(r.partition).or_insert(0);
                    *e = (*e).max(r.offset + 1);
                }
            }
            ends.iter()
                .all(|(p, end)| last.get(p).copied().unwrap_or(0) >= *end)
                .then_some(())
        })
        .map_err(|_| {
            anyhow::anyhow!(
                "group {group} did not reach the acked ends {ends:?} within 60 s after the coordinator stopped: \
                 reached {last:?}; member errors {:?}",
                member_logs.iter().map(|l| l.errors_tail(5)).collect::<Vec<_>>()
            )
        })?;
        // Commits acknowledged before the stop, per partition (the highest over all members).
        let mut acked_before: BTreeMap<i32, i64> = BTreeMap::new();
        for l in &member_logs {
            for (p, o) in l.acked_commits_before(stopped_ms) {
                let e = acked_before.entry(p).or_insert(o);
                *e = (*e).max(o);
            }
        }
        // Whoever (re)started a partition after the stop started at or after those commits.
        for l in &member_logs {
            for f in l.firsts.lock().expect("lock").iter().filter(|f| f.at_ms > stopped_ms) {
                if let Some(c) = acked_before.get(&f.partition) {
                    ensure!(
                        f.offset >= *c,
                        "group {group}: partition {} restarted at offset {} after the coordinator stopped, below the \
                         commit {c} acknowledged before it",
                        f.partition,
                        f.offset
                    );
                }
            }
        }
        let logs: Vec<Arc<MemberLog>> = members.into_iter().map(GroupMember::stop).collect::<Result<_>>()?;
        let refs: Vec<&Arc<MemberLog>> = logs.iter().collect();
        check_group_received(group, &refs, &acked, false)?;
        let committed = committed_offsets(&bootstrap, group, TOPIC, PARTITIONS)?;
        for (p, c) in &acked_before {
            let now = committed.get(p).copied().flatten();
            ensure!(
                now.is_some_and(|n| n >= *c),
                "group {group}: partition {p} committed {c} (acknowledged) before the stop; OffsetFetch now gives {now:?}"
            );
        }
        ensure!(
            !acked_before.is_empty(),
            "group {group} acknowledged no commit before the stop"
        );
        eprintln!("group {group}: commits acknowledged before the stop {acked_before:?}; committed now {committed:?}");
        final_committed.push((group, committed));
    }

    // The stopped node returns, catches up on __consumer_offsets and becomes the preferred
    // leader (and so the coordinator) again: it must serve the commits made while it was away.
    let preferred = group_partition.preferred_leader().context("no replicas")?;
    if stop != Stop::Pause {
        cluster.node(coordinator).restart()?;
    }
    cluster.await_full_isr("__consumer_offsets", Duration::from_secs(60))?;
    let back = wait_until(
        Duration::from_secs(30),
        "the preferred coordinator of orders-sink back",
        || match find_coordinator(cluster.addr(survivors[0]), "orders-sink") {
            Ok(Ok(id)) if id == preferred => Some(id),
            _ => None,
        },
    );
    eprintln!("node {coordinator} back ({stop:?}); coordinator of orders-sink now {back:?} (preferred {preferred})");
    back?;
    let bootstrap = cluster.bootstrap();
    for (group, committed) in &final_committed {
        let now = committed_offsets(&bootstrap, group, TOPIC, PARTITIONS)?;
        ensure!(
            &now == committed,
            "group {group}: committed {committed:?} before node {coordinator} returned; OffsetFetch now gives {now:?}"
        );
    }
    let fetched = committed_offsets(&bootstrap, &witness, TOPIC, PARTITIONS)?;
    ensure!(
        fetched == want,
        "{witness}: OffsetFetch after node {coordinator} returned gives {fetched:?}, want {want:?}"
    );
    Ok(())
}

//! Replica fetchers fetch in incremental fetch sessions (KIP-227): in a 3-node cluster with a
//! few hundred partitions at replication factor 3, every leader holds one session per
//! follower, over exactly the partitions it leads (read from its
//! `kafka_server_fetchsessioncache_*` gauges on `/metrics`); while the partitions are idle the
//! leaders' answers to those fetches read no partition (`sluice_follower_fetch_partitions_read`)
//! and, over several `replica.lag.time.max.ms`, no follower leaves an ISR; and records produced
//! afterwards to every partition with `acks=all` are acknowledged and reach every replica byte
//! for byte.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rdkafka::producer::FutureRecord;
use sluice_integration_tests::clients::{future_producer, wait_until};
use sluice_integration_tests::faults;
use sluice_integration_tests::node::{loopback_addr, scrape_metrics};
use sluice_integration_tests::{free_loopback_port, Cluster};

const TOPIC: &str = "followed-in-sessions";
const PARTITIONS: i32 = 300;
const NODES: usize = 3;
const TIMEOUT: Duration = Duration::from_secs(90);
/// Short, so that an idle window of a few seconds spans several of it.
const LAG_MS: u64 = 2_000;

/// (follower fetches answered, partitions those answers read, ISR shrinks) of a node.
fn follower_reads(addr: SocketAddr) -> Result<(f64, f64, f64)> {
    let metrics = scrape_metrics(addr)?;
    let get = |name: &str| {
        metrics
            .get(name)
            .copied()
            .with_context(|| format!("/metrics on {addr} has no {name}"))
    };
    Ok((
        get("sluice_follower_fetches_total")?,
        get("sluice_follower_fetch_partitions_read_total")?,
        get("kafka_server_replicamanager_isrshrinks_total")?,
    ))
}

/// (sessions, partitions cached) of a node's fetch session cache.
fn session_cache(addr: SocketAddr) -> Result<(u64, u64)> {
    let metrics = scrape_metrics(addr)?;
    let get = |name: &str| {
        metrics
            .get(name)
            .map(|v| *v as u64)
            .with_context(|| format!("/metrics on {addr} has no {name}"))
    };
    Ok((
        get("kafka_server_fetchsessioncache_numincrementalfetchsessions")?,
        get("kafka_server_fetchsessioncache_numincrementalfetchpartitionscached")?,
    ))
}

#[tokio::test(flavor = "multi_thread")]
async fn followers_fetch_in_sessions_and_still_replicate_every_partition() -> Result<()> {
    let metrics: Vec<SocketAddr> = (0..NODES)
        .map(|_| free_loopback_port().map(loopback_addr))
        .collect::<Result<_>>()?;
    let cluster = Cluster::start_each(NODES, &[], true, |id| {
        vec![
            ("metrics.listen".to_string(), metrics[id as usize - 1].to_string()),
            ("replica.lag.time.max.ms".to_string(), LAG_MS.to_string()),
        ]
    })?;
    faults::create_topic(&cluster, 1, TOPIC, PARTITIONS, NODES as i16, &[])?;
    let partitions = cluster.await_full_isr(TOPIC, TIMEOUT)?;
    let mut led: BTreeMap<i32, u64> = cluster.ids().into_iter().map(|id| (id, 0)).collect();
    for p in &partitions {
        *led.entry(p.leader).or_default() += 1;
    }

    // Each leader: one session per follower (the two other nodes), each over every partition
    // it leads. Nothing else fetches in a session here.
    let expected = |id: i32| ((NODES as u64 - 1), (NODES as u64 - 1) * led[&id]);
    let mut last = BTreeMap::new();
    let held = wait_until(
        TIMEOUT,
        "every follower to hold a fetch session with every leader",
        || {
            let all = cluster.ids().into_iter().all(|id| {
                let cache = session_cache(metrics[id as usize - 1]);
                let ok = cache.as_ref().is_ok_and(|c| *c == expected(id));
                last.insert(id, format!("{cache:?}, expected {:?}", expected(id)));
                ok
            });
            all.then_some(())
        },
    );
    if held.is_err() {
        bail!("fetch session caches per node: {last:?}");
    }

    // Idle, the partitions cost the followers' fetches nothing: over three lag periods and
    // at least 20 fetches per leader, the leaders read almost no partition for them (without
    // sessions that track changes, each fetch reads every partition the leader leads), and no
    // follower leaves an ISR for not naming a partition it holds at the log end.
    // The window starts once each leader has answered 10 fetches in its sessions: the first
    // ones still carry the partitions' first high watermarks and log start offsets.
    let opened: Vec<(f64, f64, f64)> = metrics.iter().map(|m| follower_reads(*m)).collect::<Result<_>>()?;
    let before = wait_until(TIMEOUT, "10 follower fetches per leader in the sessions", || {
        let now: Vec<(f64, f64, f64)> = metrics.iter().map(|m| follower_reads(*m)).collect::<Result<_>>().ok()?;
        now.iter().zip(&opened).all(|(n, o)| n.0 - o.0 >= 10.0).then_some(now)
    })?;
    let idle_from = Instant::now();
    let mut now = before.clone();
    wait_until(TIMEOUT, "three lag periods and 20 follower fetches per leader", || {
        now = metrics.iter().map(|m| follower_reads(*m)).collect::<Result<_>>().ok()?;
        let fetched = now.iter().zip(&before).all(|(n, b)| n.0 - b.0 >= 20.0);
        (fetched && idle_from.elapsed() >= Duration::from_millis(3 * LAG_MS)).then_some(())
    })?;
    for (id, (n, b)) in cluster.ids().into_iter().zip(now.iter().zip(&before)) {
        let (fetches, read) = (n.0 - b.0, n.1 - b.1);
        if read / fetches > 1.0 {
            bail!("node {id}: idle, its {fetches} follower fetches read {read} partitions (at most one per fetch expected)");
        }
        if n.2 != b.2 {
            bail!("node {id}: {} ISR shrinks while every follower was fetching", n.2 - b.2);
        }
    }

    // Records written now reach every replica of every partition through those sessions.
    let producer = future_producer(&cluster.bootstrap())?;
    for p in 0..PARTITIONS {
        let payload = format!("after-sessions-{p}");
        producer
            .send(
                FutureRecord::<str, str>::to(TOPIC).partition(p).payload(&payload),
                Duration::from_secs(30),
            )
            .await
            .map_err(|(e, _)| anyhow::anyhow!("acks=all produce to partition {p}: {e}"))?;
    }
    let sizes = faults::await_identical_replicas(&cluster, TOPIC, PARTITIONS, TIMEOUT)?;
    let empty: Vec<i32> = sizes.iter().filter(|(_, size)| **size == 0).map(|(p, _)| *p).collect();
    if !empty.is_empty() {
        bail!("partitions with no records on any replica: {empty:?}");
    }
    // And each leader still holds one session per follower, over all it leads.
    for id in cluster.ids() {
        let cache = session_cache(metrics[id as usize - 1])?;
        if cache != expected(id) {
            bail!(
                "node {id}: fetch session cache {cache:?} after producing, expected {:?}",
                expected(id)
            );
        }
    }
    Ok(())
}

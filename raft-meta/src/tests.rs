//! Quorum tests over real TCP on 127.0.0.1 with on-disk storage in temp dirs.
//!
//! Conditions are awaited with bounded polling of `status()` / the recorded state; a deadline
//! turns a hang into a failure that says what was awaited.
//!
//! A test file: the quorum's scenario tests (elections, restarts, snapshots, learners, refused
//! entries), long because each scenario is spelled out.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tempfile::TempDir;
use tokio::net::TcpListener;
use tokio::time::Instant;

use super::*;

const PROPOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// Applied `(index, payload)` pairs in apply order.
type Applied = Vec<(u64, Vec<u8>)>;

/// Test state machine: the applied entries, shared with the test.
#[derive(Clone, Default)]
struct Recorder {
    applied: Arc<Mutex<Applied>>,
    restores: Arc<AtomicUsize>,
}

impl Recorder {
    fn entries(&self) -> Applied {
        self.applied.lock().unwrap().clone()
    }

    fn payloads(&self) -> Vec<String> {
        self.entries()
            .into_iter()
            .map(|(_, p)| String::from_utf8(p).unwrap())
            .collect()
    }

    /// Applied indices must strictly increase: an entry applied twice or out of order shows here.
    fn assert_applied_in_order(&self) {
        let entries = self.entries();
        for pair in entries.windows(2) {
            assert!(pair[0].0 < pair[1].0, "entry {} applied after {}", pair[1].0, pair[0].0);
        }
    }
}

impl StateMachine for Recorder {
    fn apply(&mut self, index: u64, data: &[u8]) -> Result<(), String> {
        self.applied.lock().unwrap().push((index, data.to_vec()));
        Ok(())
    }

    fn snapshot(&self) -> Result<Vec<u8>, String> {
        let mut buf = Vec::new();
        for (index, payload) in self.applied.lock().unwrap().iter() {
            buf.extend_from_slice(&index.to_be_bytes());
            buf.extend_from_slice(&(payload.len() as u32).to_be_bytes());
            buf.extend_from_slice(payload);
        }
        Ok(buf)
    }

    fn restore(&mut self, mut data: &[u8]) -> Result<(), String> {
        let mut entries = Vec::new();
        while !data.is_empty() {
            let index = u64::from_be_bytes(data[..8].try_into().unwrap());
            let len = u32::from_be_bytes(data[8..12].try_into().unwrap()) as usize;
            entries.push((index, data[12..12 + len].to_vec()));
            data = &data[12 + len..];
        }
        *self.applied.lock().unwrap() = entries;
        self.restores.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// One member: its config (to restart it), its handle while running, and its state machine.
struct Member {
    config: QuorumConfig,
    quorum: Option<Quorum>,
    sm: Recorder,
    _dir: TempDir,
}

impl Member {
    fn quorum(&self) -> &Quorum {
        self.quorum.as_ref().expect("member is running")
    }

    fn status(&self) -> QuorumStatus {
        self.quorum().status()
    }

    async fn stop(&mut self) {
        if let Some(q) = self.quorum.take() {
            q.shutdown().await;
        }
    }

    /// Restarts from the same directory and address with a fresh state machine.
    async fn restart(&mut self) {
        assert!(self.quorum.is_none(), "stop the member first");
        self.sm = Recorder::default();
        let q = Quorum::start(self.config.clone(), self.sm.clone())
            .await
            .expect("member restarts from its directory");
        self.quorum = Some(q);
    }
}

struct Cluster {
    members: BTreeMap<u64, Member>,
}

fn config(
    node_id: u64,
    voters: &BTreeMap<u64, String>,
    listen: SocketAddr,
    dir: &TempDir,
    snapshot_every: u64,
) -> QuorumConfig {
    QuorumConfig {
        node_id,
        voters: voters.clone(),
        listen,
        data_dir: dir.path().join("__cluster_metadata-0"),
        tick_ms: 50,
        election_tick: 10,
        heartbeat_tick: 2,
        snapshot_every_entries: snapshot_every,
        cluster_id: "test-cluster".to_owned(),
        secret: Some(test_secret()),
        tls: None,
    }
}

fn test_secret() -> ClusterSecret {
    ClusterSecret::new(b"raft-meta-test-cluster-secret".to_vec()).unwrap()
}

async fn bind() -> (TcpListener, SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    (listener, addr)
}

impl Cluster {
    /// Starts `voters` voting members (ids 1..=voters) on ephemeral ports.
    async fn start(voters: u64, snapshot_every: u64) -> Cluster {
        let mut listeners = Vec::new();
        let mut voter_addrs = BTreeMap::new();
        for id in 1..=voters {
            let (listener, addr) = bind().await;
            voter_addrs.insert(id, addr.to_string());
            listeners.push((id, listener, addr));
        }
        let mut members = BTreeMap::new();
        for (id, listener, addr) in listeners {
            let dir = tempfile::tempdir().unwrap();
            let config = config(id, &voter_addrs, addr, &dir, snapshot_every);
            let sm = Recorder::default();
            let quorum = Quorum::start_with_listener(config.clone(), listener, sm.clone())
                .await
                .expect("member starts");
            members.insert(
                id,
                Member {
                    config,
                    quorum: Some(quorum),
                    sm,
                    _dir: dir,
                },
            );
        }
        Cluster { members }
    }

    fn member(&self, id: u64) -> &Member {
        &self.members[&id]
    }

    fn member_mut(&mut self, id: u64) -> &mut Member {
        self.members.get_mut(&id).unwrap()
    }

    fn running(&self) -> impl Iterator<Item = &Member> {
        self.members.values().filter(|m| m.quorum.is_some())
    }

    /// Proposes `{prefix}-0` .. `{prefix}-{count - 1}` on member `id`, one after another.
    async fn propose_numbered(&self, id: u64, prefix: &str, count: usize) {
        for i in 0..count {
            self.member(id)
                .quorum()
                .propose(format!("{prefix}-{i}").into_bytes(), PROPOSE_TIMEOUT)
                .await
                .unwrap_or_else(|e| panic!("proposal {prefix}-{i} on node {id}: {e}"));
        }
    }

    /// Waits until every running voter names the same leader, which is itself running.
    async fn agreed_leader(&self, within: Duration) -> u64 {
        wait_for("an agreed leader", within, || {
            let views: Vec<Option<u64>> = self
                .running()
                .filter(|m| m.config.voters.contains_key(&m.config.node_id))
                .map(|m| m.status().leader_id)
                .collect();
            let leader = views.first().copied().flatten()?;
            let running = self.members.get(&leader)?.quorum.as_ref()?;
            (views.iter().all(|v| *v == Some(leader)) && running.status().role == Role::Leader).then_some(leader)
        })
        .await
    }

    /// Waits until every running member has applied exactly the same entries as `reference`
    /// and at least `min_payloads` of them; returns the payloads.
    async fn converged(&self, min_payloads: usize, within: Duration) -> Vec<String> {
        let result = wait_for("all members to apply the same entries", within, || {
            let mut logs = self.running().map(|m| m.sm.entries());
            let first = logs.next()?;
            (first.len() >= min_payloads && logs.all(|l| l == first)).then_some(first)
        })
        .await;
        for m in self.running() {
            m.sm.assert_applied_in_order();
        }
        result.into_iter().map(|(_, p)| String::from_utf8(p).unwrap()).collect()
    }
}

/// Node 1 alone, on an ephemeral port, with its data in `dir`.
async fn start_single_voter(dir: &TempDir, sm: impl StateMachine) -> Quorum {
    let (listener, addr) = bind().await;
    let config = config(1, &BTreeMap::from([(1, addr.to_string())]), addr, dir, 100);
    Quorum::start_with_listener(config, listener, sm).await.unwrap()
}

/// Routes `tracing` (including raft-rs's lines) to the test output; `RUST_LOG` filters.
fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

async fn wait_for<T>(what: &str, within: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Retries a proposal through elections (`NoLeader`) and lost forwards (`Timeout`) until it
/// succeeds. A timed-out attempt may still commit, so callers tolerate duplicates.
async fn propose_until_ok<F, Fut>(what: &str, within: Duration, mut attempt: F) -> u64
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<u64, ProposeError>>,
{
    let deadline = Instant::now() + within;
    loop {
        match attempt().await {
            Ok(index) => return index,
            Err(e @ (ProposeError::NoLeader | ProposeError::LeaderChanged | ProposeError::Timeout(_) | ProposeError::Busy)) => {
                assert!(Instant::now() < deadline, "{what} kept failing for {within:?}: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("{what} failed: {e}"),
        }
    }
}

fn dedup_keep_order(payloads: &[String]) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    payloads.iter().filter(|p| seen.insert(p.as_str())).cloned().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_voter_elects_itself_and_restart_replays_snapshot_and_log_without_duplicates() {
    init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let (listener, addr) = bind().await;
    let voters = BTreeMap::from([(1, addr.to_string())]);
    let mut config = config(1, &voters, addr, &dir, 5);
    // The production defaults: 100 ms ticks, 1 s election timeout.
    config.tick_ms = 100;
    let sm = Recorder::default();
    let started = Instant::now();
    let quorum = Quorum::start_with_listener(config.clone(), listener, sm.clone())
        .await
        .unwrap();
    let mut leader_watch = quorum.leader_watch();
    tokio::time::timeout(Duration::from_secs(3), leader_watch.wait_for(|l| *l == Some(1)))
        .await
        .expect("single voter elects itself within 3 s")
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(quorum.status().role, Role::Leader);

    let mut indices = Vec::new();
    for i in 0..12 {
        let payload = format!("p{i}");
        let index = quorum
            .propose(payload.clone().into_bytes(), PROPOSE_TIMEOUT)
            .await
            .unwrap();
        // Read-your-write: applied locally before propose returns.
        assert_eq!(sm.entries().last(), Some(&(index, payload.into_bytes())));
        indices.push(index);
    }
    let expected: Vec<String> = (0..12).map(|i| format!("p{i}")).collect();
    assert_eq!(sm.payloads(), expected);
    let status = quorum.status();
    assert!(status.snapshot_index >= 10, "snapshots every 5 entries: {status:?}");
    assert!(
        status.snapshot_index < *indices.last().unwrap(),
        "some entries left to replay: {status:?}"
    );
    assert_eq!(status.voters.len(), 1);
    assert_eq!(status.voters[0].match_index, Some(status.commit_index));

    let stale_handle = quorum.clone();
    quorum.shutdown().await;
    assert_eq!(
        stale_handle.propose(b"late".to_vec(), PROPOSE_TIMEOUT).await,
        Err(ProposeError::Stopped)
    );
    assert!(!stale_handle.is_running());

    // Restart: snapshot restored, the entries after it replayed, nothing applied twice.
    let restarted_sm = Recorder::default();
    let quorum = Quorum::start(config, restarted_sm.clone()).await.unwrap();
    assert_eq!(
        restarted_sm.payloads(),
        expected,
        "state after restart, before any new entry"
    );
    assert_eq!(restarted_sm.restores.load(Ordering::SeqCst), 1);
    restarted_sm.assert_applied_in_order();
    let index = propose_until_ok("proposal after restart", Duration::from_secs(5), || {
        quorum.propose(b"after".to_vec(), Duration::from_secs(1))
    })
    .await;
    assert!(index > *indices.last().unwrap());
    let mut expected_after = expected.clone();
    expected_after.push("after".to_owned());
    assert_eq!(restarted_sm.payloads(), expected_after);
    quorum.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_voters_apply_proposals_from_every_member_in_the_same_order() {
    init_tracing();
    let cluster = Cluster::start(3, 1000).await;
    let leader = cluster.agreed_leader(Duration::from_secs(10)).await;

    let mut tasks = Vec::new();
    for (id, member) in &cluster.members {
        let quorum = member.quorum().clone();
        let id = *id;
        tasks.push(tokio::spawn(async move {
            for i in 0..10 {
                quorum
                    .propose(format!("n{id}-{i}").into_bytes(), PROPOSE_TIMEOUT)
                    .await
                    .unwrap_or_else(|e| panic!("proposal n{id}-{i} on node {id}: {e}"));
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let payloads = cluster.converged(30, Duration::from_secs(10)).await;
    assert_eq!(payloads.len(), 30, "each proposal applied exactly once: {payloads:?}");
    for id in 1..=3 {
        // Each node's own proposals keep their order (sequential per proposer).
        let own: Vec<&String> = payloads.iter().filter(|p| p.starts_with(&format!("n{id}-"))).collect();
        let expected: Vec<String> = (0..10).map(|i| format!("n{id}-{i}")).collect();
        assert_eq!(own, expected.iter().collect::<Vec<_>>());
    }

    let status = cluster.member(leader).status();
    assert_eq!(status.role, Role::Leader);
    assert_eq!(status.voters.iter().map(|v| v.id).collect::<Vec<_>>(), vec![1, 2, 3]);
    for v in &status.voters {
        assert!(
            v.match_index.is_some(),
            "leader knows every voter's match index: {status:?}"
        );
        assert!(v.last_contact_ms_ago.is_some_and(|ms| ms < 5_000), "{status:?}");
    }
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    let follower_status = cluster.member(follower).status();
    assert_eq!(follower_status.role, Role::Follower);
    assert_eq!(follower_status.leader_id, Some(leader));
    assert!(follower_status.voters.iter().all(|v| v.match_index.is_none()));

    for mut member in cluster.members.into_values() {
        member.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_shutdown_elects_new_leader_and_restarted_node_catches_up() {
    init_tracing();
    let mut cluster = Cluster::start(3, 1000).await;
    let old_leader = cluster.agreed_leader(Duration::from_secs(10)).await;
    cluster.propose_numbered(old_leader, "before", 5).await;
    cluster.converged(5, Duration::from_secs(10)).await;

    cluster.member_mut(old_leader).stop().await;
    let stopped_at = Instant::now();
    let new_leader = cluster.agreed_leader(Duration::from_secs(5)).await;
    assert_ne!(new_leader, old_leader);
    tracing::info!(elapsed = ?stopped_at.elapsed(), new_leader, "new leader elected");

    let survivor = (1..=3).find(|id| *id != old_leader && *id != new_leader).unwrap();
    for i in 0..5 {
        let quorum = cluster.member(survivor).quorum().clone();
        let payload = format!("after-{i}");
        propose_until_ok(&payload, Duration::from_secs(10), || {
            quorum.propose(payload.clone().into_bytes(), Duration::from_secs(2))
        })
        .await;
    }

    cluster.member_mut(old_leader).restart().await;
    let payloads = cluster.converged(10, Duration::from_secs(10)).await;
    let unique = dedup_keep_order(&payloads);
    let expected: Vec<String> = (0..5)
        .map(|i| format!("before-{i}"))
        .chain((0..5).map(|i| format!("after-{i}")))
        .collect();
    assert_eq!(unique, expected);

    for mut member in cluster.members.into_values() {
        member.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proposals_fail_within_timeout_without_a_majority_and_resume_after_it_returns() {
    init_tracing();
    let mut cluster = Cluster::start(3, 1000).await;
    let leader = cluster.agreed_leader(Duration::from_secs(10)).await;
    cluster
        .member(leader)
        .quorum()
        .propose(b"with-majority".to_vec(), PROPOSE_TIMEOUT)
        .await
        .unwrap();

    // Keep the leader: it still believes it leads for an election timeout, so the proposal is
    // appended but cannot commit (Timeout); once check_quorum steps it down, NoLeader.
    let down: Vec<u64> = (1..=3).filter(|id| *id != leader).collect();
    for id in &down {
        cluster.member_mut(*id).stop().await;
    }
    let alone = cluster.member(leader).quorum().clone();
    for _ in 0..2 {
        let timeout = Duration::from_millis(1500);
        let started = Instant::now();
        let result = alone.propose(b"no-majority".to_vec(), timeout).await;
        assert!(
            matches!(result, Err(ProposeError::Timeout(_) | ProposeError::NoLeader)),
            "{result:?}"
        );
        assert!(
            started.elapsed() < timeout + Duration::from_millis(500),
            "took {:?}",
            started.elapsed()
        );
    }
    wait_for("the isolated leader to step down", Duration::from_secs(5), || {
        (alone.status().role != Role::Leader).then_some(())
    })
    .await;
    assert_eq!(
        alone.propose(b"no-leader".to_vec(), PROPOSE_TIMEOUT).await,
        Err(ProposeError::NoLeader)
    );

    for id in &down {
        cluster.member_mut(*id).restart().await;
    }
    propose_until_ok("proposal after the majority returned", Duration::from_secs(10), || {
        alone.propose(b"majority-back".to_vec(), Duration::from_secs(2))
    })
    .await;
    let payloads = cluster.converged(2, Duration::from_secs(10)).await;
    assert_eq!(payloads.first().map(String::as_str), Some("with-majority"));
    assert_eq!(payloads.last().map(String::as_str), Some("majority-back"));
    assert!(!payloads.iter().any(|p| p == "no-leader"));

    for mut member in cluster.members.into_values() {
        member.stop().await;
    }
}

/// A follower forwards a proposal to a leader that has just died: the proposal never reaches a
/// log, and the caller is told as soon as the follower sees another leader (Kafka answers
/// NOT_CONTROLLER), not at its timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proposal_forwarded_to_a_dead_leader_fails_when_the_leader_changes() {
    init_tracing();
    let mut cluster = Cluster::start(3, 1000).await;
    let leader = cluster.agreed_leader(Duration::from_secs(10)).await;
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    cluster.member_mut(leader).stop().await;
    let quorum = cluster.member(follower).quorum().clone();
    assert_eq!(
        quorum.status().leader_id,
        Some(leader),
        "the follower has not noticed the leader's death yet"
    );
    let result = quorum.propose(b"lost-with-the-leader".to_vec(), Duration::from_secs(60)).await;
    assert_eq!(result, Err(ProposeError::LeaderChanged));
    propose_until_ok("a proposal under the new leader", Duration::from_secs(10), || {
        quorum.propose(b"after".to_vec(), Duration::from_secs(2))
    })
    .await;
    let payloads = cluster.converged(1, Duration::from_secs(10)).await;
    assert!(payloads.iter().any(|p| p == "after"), "{payloads:?}");
    assert!(!payloads.iter().any(|p| p == "lost-with-the-leader"), "{payloads:?}");
    for mut member in cluster.members.into_values() {
        member.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_down_during_compaction_catches_up_by_snapshot() {
    init_tracing();
    let mut cluster = Cluster::start(3, 10).await;
    let leader = cluster.agreed_leader(Duration::from_secs(10)).await;
    let lagging = (1..=3).find(|id| *id != leader).unwrap();
    cluster.member_mut(lagging).stop().await;

    for i in 0..35 {
        let quorum = cluster.member(leader).quorum().clone();
        let payload = format!("e{i}");
        propose_until_ok(&payload, Duration::from_secs(10), || {
            quorum.propose(payload.clone().into_bytes(), Duration::from_secs(2))
        })
        .await;
    }
    let leader_now = cluster.agreed_leader(Duration::from_secs(10)).await;
    let snapshot_index = cluster.member(leader_now).status().snapshot_index;
    assert!(
        snapshot_index >= 30,
        "leader compacted its log: snapshot at {snapshot_index}"
    );

    cluster.member_mut(lagging).restart().await;
    let local_restores = cluster.member(lagging).sm.restores.load(Ordering::SeqCst);
    let payloads = cluster.converged(35, Duration::from_secs(15)).await;
    let expected: Vec<String> = (0..35).map(|i| format!("e{i}")).collect();
    assert_eq!(dedup_keep_order(&payloads), expected);
    let lagging_member = cluster.member(lagging);
    assert!(
        lagging_member.sm.restores.load(Ordering::SeqCst) > local_restores,
        "the lagging member installed the leader's snapshot"
    );
    assert!(lagging_member.status().snapshot_index >= snapshot_index);

    for mut member in cluster.members.into_values() {
        member.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn learner_added_with_add_learner_receives_all_entries() {
    init_tracing();
    let mut cluster = Cluster::start(3, 1000).await;
    let leader = cluster.agreed_leader(Duration::from_secs(10)).await;
    for i in 0..5 {
        cluster
            .member(leader)
            .quorum()
            .propose(format!("early-{i}").into_bytes(), PROPOSE_TIMEOUT)
            .await
            .unwrap();
    }

    // Node 4 is not in --voters: it starts empty and waits.
    let voters = cluster.member(1).config.voters.clone();
    let dir = tempfile::tempdir().unwrap();
    let (listener, addr) = bind().await;
    let learner_config = config(4, &voters, addr, &dir, 1000);
    let learner_sm = Recorder::default();
    let learner = Quorum::start_with_listener(learner_config.clone(), listener, learner_sm.clone())
        .await
        .unwrap();
    assert_eq!(learner.status().role, Role::Learner);
    assert!(learner_sm.entries().is_empty());

    // Added through a follower: the conf change is forwarded to the leader like any proposal.
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    let follower_quorum = cluster.member(follower).quorum().clone();
    follower_quorum
        .add_learner(4, addr.to_string(), PROPOSE_TIMEOUT)
        .await
        .unwrap();
    // Idempotent.
    follower_quorum
        .add_learner(4, addr.to_string(), PROPOSE_TIMEOUT)
        .await
        .unwrap();
    assert!(matches!(
        follower_quorum
            .add_learner(2, "127.0.0.1:1".into(), PROPOSE_TIMEOUT)
            .await,
        Err(ProposeError::InvalidLearner { id: 2, .. })
    ));
    cluster.members.insert(
        4,
        Member {
            config: learner_config,
            quorum: Some(learner),
            sm: learner_sm,
            _dir: dir,
        },
    );

    for i in 0..5 {
        cluster
            .member(leader)
            .quorum()
            .propose(format!("late-{i}").into_bytes(), PROPOSE_TIMEOUT)
            .await
            .unwrap();
    }
    // A learner's proposal is forwarded too.
    cluster
        .member(4)
        .quorum()
        .propose(b"from-learner".to_vec(), PROPOSE_TIMEOUT)
        .await
        .unwrap();
    let payloads = cluster.converged(11, Duration::from_secs(10)).await;
    let expected: Vec<String> = (0..5)
        .map(|i| format!("early-{i}"))
        .chain((0..5).map(|i| format!("late-{i}")))
        .chain(std::iter::once("from-learner".to_owned()))
        .collect();
    assert_eq!(payloads, expected);

    let learner_status = cluster.member(4).status();
    assert_eq!(learner_status.role, Role::Learner);
    assert_eq!(learner_status.leader_id, Some(leader));
    assert_eq!(
        learner_status.learners.iter().map(|l| l.id).collect::<Vec<_>>(),
        vec![4]
    );
    // The learner's state machine can apply an entry before its append response reaches the
    // leader, so the leader's view of its progress is awaited, not read once.
    wait_for(
        "the leader to see the learner matching its commit index",
        Duration::from_secs(10),
        || {
            let status = cluster.member(leader).status();
            assert_eq!(status.learners.len(), 1);
            status.learners[0]
                .match_index
                .is_some_and(|m| m >= status.commit_index)
                .then_some(())
        },
    )
    .await;

    // The learner survives a restart and stays a learner.
    cluster.member_mut(4).stop().await;
    cluster.member_mut(4).restart().await;
    cluster
        .member(leader)
        .quorum()
        .propose(b"after-learner-restart".to_vec(), PROPOSE_TIMEOUT)
        .await
        .unwrap();
    let payloads = cluster.converged(12, Duration::from_secs(10)).await;
    assert_eq!(payloads.last().map(String::as_str), Some("after-learner-restart"));
    assert_eq!(cluster.member(4).status().role, Role::Learner);

    for mut member in cluster.members.into_values() {
        member.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mismatched_voters_cluster_id_or_node_id_refuse_to_start() {
    init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let (listener, addr) = bind().await;
    let voters = BTreeMap::from([(1, addr.to_string())]);
    let good = config(1, &voters, addr, &dir, 100);
    Quorum::start_with_listener(good.clone(), listener, Recorder::default())
        .await
        .unwrap()
        .shutdown()
        .await;

    let mut more_voters = good.clone();
    more_voters.voters.insert(2, "127.0.0.1:1".to_owned());
    let err = Quorum::start(more_voters, Recorder::default())
        .await
        .err()
        .expect("refused");
    assert!(matches!(err, QuorumError::VotersMismatch { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("--voters [0, 1] disagrees with the quorum's voters [0]"),
        "{err}"
    );

    let mut other_cluster = good.clone();
    other_cluster.cluster_id = "another-cluster".to_owned();
    let err = Quorum::start(other_cluster, Recorder::default())
        .await
        .err()
        .expect("refused");
    assert!(matches!(err, QuorumError::ClusterIdMismatch { .. }), "{err}");

    let mut other_node = good.clone();
    other_node.node_id = 2;
    other_node.voters = BTreeMap::from([(2, addr.to_string())]);
    let err = Quorum::start(other_node, Recorder::default())
        .await
        .err()
        .expect("refused");
    assert!(matches!(err, QuorumError::NodeIdMismatch { .. }), "{err}");

    // The refusals left the directory usable by its rightful owner.
    Quorum::start(good, Recorder::default()).await.unwrap().shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_configuration_is_refused_with_a_reason() {
    init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let (listener, addr) = bind().await;
    let mut bad = config(1, &BTreeMap::from([(1, addr.to_string())]), addr, &dir, 100);
    bad.heartbeat_tick = bad.election_tick;
    let err = Quorum::start_with_listener(bad, listener, Recorder::default())
        .await
        .err()
        .expect("refused");
    assert!(matches!(err, QuorumError::InvalidConfig(_)), "{err}");
    assert!(err.to_string().contains("election_tick"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_proposal_is_rejected_without_reaching_raft() {
    init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let quorum = start_single_voter(&dir, Recorder::default()).await;
    let result = quorum.propose(vec![0; MAX_PROPOSAL_BYTES + 1], PROPOSE_TIMEOUT).await;
    assert!(matches!(result, Err(ProposeError::TooLarge { .. })), "{result:?}");
    quorum.shutdown().await;
}

/// A state machine whose state cannot be encoded.
struct Unencodable;

impl StateMachine for Unencodable {
    fn apply(&mut self, _index: u64, _data: &[u8]) -> Result<(), String> {
        Ok(())
    }
    fn snapshot(&self) -> Result<Vec<u8>, String> {
        Err("a value has no encoding".to_owned())
    }
    fn restore(&mut self, _data: &[u8]) -> Result<(), String> {
        Ok(())
    }
}

/// Panics when it applies `trigger`, as a buggy state machine would.
struct PanicsOn(&'static [u8]);

impl StateMachine for PanicsOn {
    fn apply(&mut self, _index: u64, data: &[u8]) -> Result<(), String> {
        assert!(
            data != self.0,
            "state machine cannot apply {:?}",
            String::from_utf8_lossy(data)
        );
        Ok(())
    }

    fn snapshot(&self) -> Result<Vec<u8>, String> {
        Ok(Vec::new())
    }

    fn restore(&mut self, _data: &[u8]) -> Result<(), String> {
        Ok(())
    }
}

/// Refuses to apply `trigger`, as a state machine does with an entry it cannot read.
struct RefusesOn(&'static [u8]);

impl StateMachine for RefusesOn {
    fn apply(&mut self, index: u64, data: &[u8]) -> Result<(), String> {
        if data == self.0 {
            return Err(format!("entry {index} is unreadable: upgrade this node"));
        }
        Ok(())
    }

    fn snapshot(&self) -> Result<Vec<u8>, String> {
        Ok(Vec::new())
    }

    fn restore(&mut self, _data: &[u8]) -> Result<(), String> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_that_cannot_be_encoded_is_an_error_never_an_empty_snapshot() {
    init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let (listener, addr) = bind().await;
    let config = config(1, &BTreeMap::from([(1, addr.to_string())]), addr, &dir, 100);
    let err = Quorum::start_with_listener(config.clone(), listener, Unencodable)
        .await
        .err()
        .expect("refused");
    assert!(matches!(err, QuorumError::Snapshot(_)), "{err}");
    // Nothing was initialized, so a later start is not mistaken for an existing cluster.
    assert!(!config.data_dir.join("meta.properties").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_the_driver_is_reported_by_stopped_instead_of_freezing_the_member() {
    init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let quorum = start_single_voter(&dir, PanicsOn(b"boom")).await;
    quorum.propose(b"fine".to_vec(), PROPOSE_TIMEOUT).await.unwrap();
    assert!(quorum.is_running());

    let result = quorum.propose(b"boom".to_vec(), PROPOSE_TIMEOUT).await;
    assert_eq!(
        result,
        Err(ProposeError::Stopped),
        "the waiting proposer learns the member stopped"
    );
    let exit = tokio::time::timeout(Duration::from_secs(5), quorum.stopped())
        .await
        .expect("the supervisor reports within 5 s");
    match exit {
        QuorumExit::Failed(reason) => assert!(reason.contains("cannot apply \"boom\""), "{reason}"),
        QuorumExit::Shutdown => panic!("a panic was reported as a clean shutdown"),
    }
    assert!(!quorum.is_running());
    assert_eq!(
        quorum.propose(b"after".to_vec(), PROPOSE_TIMEOUT).await,
        Err(ProposeError::Stopped)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_the_state_machine_refuses_stops_the_member_and_is_refused_again_on_restart() {
    init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let quorum = start_single_voter(&dir, RefusesOn(b"v9")).await;
    quorum.propose(b"v1".to_vec(), PROPOSE_TIMEOUT).await.unwrap();
    let result = quorum.propose(b"v9".to_vec(), PROPOSE_TIMEOUT).await;
    assert_eq!(result, Err(ProposeError::Stopped), "the entry was not applied");
    let exit = tokio::time::timeout(Duration::from_secs(5), quorum.stopped())
        .await
        .expect("the supervisor reports within 5 s");
    assert_eq!(
        exit,
        QuorumExit::Failed("entry 4 is unreadable: upgrade this node".to_owned()),
        "the state machine's sentence reaches the embedding process unchanged"
    );
    assert!(!quorum.is_running());

    // Not skipped: the committed entry is replayed on restart and refused again.
    let (listener, addr) = bind().await;
    let config = config(1, &BTreeMap::from([(1, addr.to_string())]), addr, &dir, 100);
    let err = Quorum::start_with_listener(config, listener, RefusesOn(b"v9"))
        .await
        .err()
        .expect("the restart refuses the entry too");
    assert!(
        matches!(&err, QuorumError::StateMachine(m) if m == "entry 4 is unreadable: upgrade this node"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_messages_from_an_authenticated_peer_are_dropped_and_the_follower_keeps_following() {
    init_tracing();
    let cluster = Cluster::start(3, 1000).await;
    let leader = cluster.agreed_leader(Duration::from_secs(10)).await;
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    let other = (1..=3).find(|id| *id != leader && *id != follower).unwrap();
    cluster.propose_numbered(leader, "before", 3).await;
    cluster.converged(3, Duration::from_secs(10)).await;
    let before = cluster.member(follower).status();

    // Speak to the follower as its leader would, with the cluster's secret.
    let follower_addr = cluster.member(follower).config.listen.to_string();
    let mut conn = PeerConnection::connect(&follower_addr, leader, follower, "test-cluster", &test_secret())
        .await
        .expect("the right secret authenticates");
    let forged = |kind: eraftpb::MessageType, from: u64| {
        let mut m = eraftpb::Message::default();
        m.set_msg_type(kind);
        m.from = from;
        m.to = follower;
        m.term = before.term;
        m
    };
    let mut heartbeat = forged(eraftpb::MessageType::MsgHeartbeat, leader);
    heartbeat.commit = before.commit_index + 1_000_000;
    let mut append = forged(eraftpb::MessageType::MsgAppend, leader);
    append.index = before.commit_index + 500;
    append.log_term = 0;
    append.commit = u64::MAX;
    let mut impostor = forged(eraftpb::MessageType::MsgRequestVote, other);
    impostor.term = before.term + 5;
    impostor.index = u64::MAX;
    impostor.log_term = u64::MAX;
    for msg in [heartbeat, append, impostor] {
        conn.send(&msg).await.unwrap();
    }
    // Refused messages leave the (authenticated) connection open; they are only dropped.
    assert!(!conn.closed_within(Duration::from_millis(300)).await);

    let after = cluster.member(follower).status();
    assert!(
        cluster.member(follower).quorum().is_running(),
        "the follower's driver survived"
    );
    assert_eq!(
        after.term, before.term,
        "the impostor's vote request moved no term: {after:?}"
    );
    assert_eq!(after.leader_id, Some(leader));
    assert!(after.commit_index < before.commit_index + 1_000, "{after:?}");
    let quorum = cluster.member(follower).quorum().clone();
    propose_until_ok("a proposal through the follower", Duration::from_secs(10), || {
        quorum.propose(b"after".to_vec(), Duration::from_secs(2))
    })
    .await;
    let payloads = cluster.converged(4, Duration::from_secs(10)).await;
    assert_eq!(payloads.last().map(String::as_str), Some("after"));

    for mut member in cluster.members.into_values() {
        member.stop().await;
    }
}

//! Consumer-group members and checks for the group tests (`tests/groups.rs`).
//!
//! A [`GroupMember`] is an rdkafka `BaseConsumer` that subscribes with a `group.id` (Kafka's
//! classic group protocol: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, OffsetCommit,
//! OffsetFetch, LeaveGroup) and commits *after processing*: every record it receives is recorded
//! first, then its offset is committed synchronously, every `commit_interval` and before its
//! partitions are revoked in a rebalance. So with no faults a group sees each record exactly
//! once, and a commit the member logged was acknowledged by the coordinator.
//!
//! [`MemberProcess`] runs the same member in a child process (`sluice-group-member`), so a test
//! can SIGKILL it: an in-process librdkafka client keeps heartbeating from its own threads even
//! when the application stops polling, so only a killed process stops heartbeating for real.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use kafka_protocol::messages::FindCoordinatorRequest;
use kafka_protocol::protocol::StrBytes;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use crate::clients::now_ms;
use crate::kafka_client;

/// Partitions of `__consumer_offsets` (Kafka's `offsets.topic.num.partitions` default).
pub const OFFSETS_TOPIC_PARTITIONS: i32 = 50;

/// Java's `String.hashCode` (UTF-16 code units, wrapping arithmetic).
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(c as i32))
}

/// The `__consumer_offsets` partition whose leader coordinates `group`. Kafka:
/// `Utils.abs(groupId.hashCode) % offsets.topic.num.partitions`, where `Utils.abs` is
/// `Math.abs` with `Integer.MIN_VALUE` mapped to 0 -- not `& 0x7fffffff` (the producer's
/// `toPositive`), which gives another partition for every negative hash.
pub fn offsets_partition(group: &str) -> i32 {
    let h = java_string_hash(group);
    let abs = if h == i32::MIN { 0 } else { h.abs() };
    abs % OFFSETS_TOPIC_PARTITIONS
}

/// The coordinator a node names for `group` (FindCoordinator v3, key type 0 = group):
/// `Ok(node id)` or the error code and message it answered with.
pub fn find_coordinator(addr: SocketAddr, group: &str) -> Result<std::result::Result<i32, (i16, String)>> {
    let request = FindCoordinatorRequest::default()
        .with_key(StrBytes::from_string(group.to_string()))
        .with_key_type(0);
    let response = kafka_client::call(addr, &request, 3, Duration::from_secs(10))?;
    if response.error_code != 0 {
        let message = response.error_message.map(|m| m.to_string()).unwrap_or_default();
        return Ok(Err((response.error_code, message)));
    }
    Ok(Ok(response.node_id.0))
}

/// One record a member received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    pub partition: i32,
    pub offset: i64,
    pub value: String,
}

/// A commit the coordinator acknowledged (a synchronous commit that returned Ok).
#[derive(Debug, Clone)]
pub struct AckedCommit {
    pub at_ms: i64,
    /// (partition, next offset to read)
    pub offsets: Vec<(i32, i64)>,
}

/// A partition assignment the member got from a rebalance.
#[derive(Debug, Clone)]
pub struct Assigned {
    pub at_ms: i64,
    pub partitions: Vec<i32>,
}

/// The first record a member received on a partition after an assignment.
#[derive(Debug, Clone)]
pub struct FirstAfterAssign {
    pub at_ms: i64,
    pub partition: i32,
    pub offset: i64,
}

/// Everything a member did, as the test sees it. In a child process each event is also written
/// to stdout as one line ([`MemberLog::to_line`]) and parsed back by the parent.
#[derive(Default)]
pub struct MemberLog {
    pub received: Mutex<Vec<Received>>,
    pub assignments: Mutex<Vec<Assigned>>,
    pub revocations: Mutex<Vec<i64>>,
    pub commits: Mutex<Vec<AckedCommit>>,
    pub firsts: Mutex<Vec<FirstAfterAssign>>,
    pub errors: Mutex<Vec<String>>,
    current: Mutex<(i64, Vec<i32>)>,
    /// Print each event to stdout (child-process mode).
    echo: bool,
    received_count: AtomicU64,
}

impl MemberLog {
    pub fn new(echo: bool) -> Self {
        Self {
            echo,
            ..Self::default()
        }
    }

    fn emit(&self, line: impl FnOnce() -> String) {
        if self.echo {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{}", line());
            let _ = out.flush();
        }
    }

    pub fn record(&self, r: Received) {
        self.emit(|| format!("record {} {} {}", r.partition, r.offset, r.value));
        self.received.lock().expect("lock").push(r);
        self.received_count.fetch_add(1, Ordering::Relaxed);
    }
    pub fn assigned(&self, a: Assigned) {
        self.emit(|| format!("assigned {} {}", a.at_ms, join(a.partitions.iter())));
        *self.current.lock().expect("lock") = (a.at_ms, a.partitions.clone());
        self.assignments.lock().expect("lock").push(a);
    }
    pub fn revoked(&self, at_ms: i64) {
        self.emit(|| format!("revoked {at_ms}"));
        *self.current.lock().expect("lock") = (at_ms, Vec::new());
        self.revocations.lock().expect("lock").push(at_ms);
    }
    pub fn committed(&self, c: AckedCommit) {
        self.emit(|| {
            format!(
                "committed {} {}",
                c.at_ms,
                join(c.offsets.iter().map(|(p, o)| format!("{p}:{o}")))
            )
        });
        self.commits.lock().expect("lock").push(c);
    }
    pub fn first(&self, f: FirstAfterAssign) {
        self.emit(|| format!("first {} {} {}", f.at_ms, f.partition, f.offset));
        self.firsts.lock().expect("lock").push(f);
    }
    pub fn error(&self, e: String) {
        self.emit(|| format!("error {}", e.replace('\n', " ")));
        let mut errors = self.errors.lock().expect("lock");
        if errors.len() >= 200 {
            errors.remove(0);
        }
        errors.push(e);
    }

    /// Applies one line written by a child process's [`MemberLog`].
    pub fn apply_line(&self, line: &str) -> Result<()> {
        let (kind, rest) = line.split_once(' ').unwrap_or((line, ""));
        let fields: Vec<&str> = rest.split(' ').collect();
        let int = |i: usize| -> Result<i64> {
            fields
                .get(i)
                .context("missing field")?
                .parse::<i64>()
                .with_context(|| format!("field {i} of {line:?}"))
        };
        let list = |i: usize| -> Vec<&str> {
            fields
                .get(i)
                .map_or(Vec::new(), |f| f.split(',').filter(|s| !s.is_empty()).collect())
        };
        match kind {
            "record" => self.record(Received {
                partition: int(0)? as i32,
                offset: int(1)?,
                value: fields.get(2).context("value")?.to_string(),
            }),
            "assigned" => self.assigned(Assigned {
                at_ms: int(0)?,
                partitions: list(1).iter().map(|p| p.parse()).collect::<Result<_, _>>()?,
            }),
            "revoked" => self.revoked(int(0)?),
            "committed" => self.committed(AckedCommit {
                at_ms: int(0)?,
                offsets: list(1)
                    .iter()
                    .map(|po| {
                        let (p, o) = po.split_once(':').context("p:o")?;
                        Ok((p.parse()?, o.parse()?))
                    })
                    .collect::<Result<_>>()?,
            }),
            "first" => self.first(FirstAfterAssign {
                at_ms: int(0)?,
                partition: int(1)? as i32,
                offset: int(2)?,
            }),
            "error" => self.error(rest.to_string()),
            _ => bail!("unknown member event line {line:?}"),
        }
        Ok(())
    }

    pub fn received_count(&self) -> u64 {
        self.received_count.load(Ordering::Relaxed)
    }
    /// The partitions of the latest assignment, unless revoked since (empty if none), and when
    /// that assignment or revocation happened.
    pub fn current_assignment(&self) -> (i64, Vec<i32>) {
        self.current.lock().expect("lock").clone()
    }
    pub fn errors_tail(&self, n: usize) -> Vec<String> {
        let errors = self.errors.lock().expect("lock");
        errors.iter().rev().take(n).rev().cloned().collect()
    }
    /// Highest acknowledged commit per partition among commits acknowledged before `before_ms`.
    pub fn acked_commits_before(&self, before_ms: i64) -> BTreeMap<i32, i64> {
        let mut best = BTreeMap::new();
        for c in self
            .commits
            .lock()
            .expect("lock")
            .iter()
            .filter(|c| c.at_ms < before_ms)
        {
            for (p, o) in &c.offsets {
                let e = best.entry(*p).or_insert(*o);
                *e = (*e).max(*o);
            }
        }
        best
    }
}

fn join<T: ToString>(items: impl Iterator<Item = T>) -> String {
    items.map(|i| i.to_string()).collect::<Vec<_>>().join(",")
}

/// Consumer settings for a group member: librdkafka defaults (session.timeout.ms 45000,
/// heartbeat 3000, range/roundrobin assignors, eager protocol) except auto-commit off (the
/// member commits after processing) and `auto.offset.reset=earliest` (a new group reads the
/// records produced before it joined).
pub fn member_config(bootstrap: &str, group: &str, client_id: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("client.id", client_id)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("log_level", "4");
    c
}

/// Records assignment changes and commits the processed offsets synchronously before the
/// partitions are revoked, so the next owner starts right after the last processed record.
struct MemberContext {
    log: Arc<MemberLog>,
    topic: String,
    /// Next offset per partition, processed but not yet committed.
    pending: Mutex<BTreeMap<i32, i64>>,
    /// Partitions assigned whose first record has not arrived yet.
    awaiting_first: Mutex<BTreeSet<i32>>,
}

impl ClientContext for MemberContext {
    fn error(&self, error: KafkaError, reason: &str) {
        self.log.error(format!("client error {error}: {reason}"));
    }
}

impl ConsumerContext for MemberContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Revoke(_) => {
                self.commit_pending(consumer);
                // What could not be committed now belongs to the next owner.
                self.pending.lock().expect("lock").clear();
                self.awaiting_first.lock().expect("lock").clear();
                self.log.revoked(now_ms());
            }
            Rebalance::Error(e) => self.log.error(format!("rebalance error: {e}")),
            Rebalance::Assign(_) => {}
        }
    }

    fn post_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            let partitions: Vec<i32> = tpl
                .elements_for_topic(&self.topic)
                .iter()
                .map(|e| e.partition())
                .collect();
            *self.awaiting_first.lock().expect("lock") = partitions.iter().copied().collect();
            self.log.assigned(Assigned {
                at_ms: now_ms(),
                partitions,
            });
        }
    }
}

impl MemberContext {
    /// Commits the pending offsets synchronously; logs the commit once the coordinator
    /// acknowledged it, or the error (the offsets stay pending and are retried).
    fn commit_pending(&self, consumer: &BaseConsumer<Self>) {
        let pending: Vec<(i32, i64)> = self
            .pending
            .lock()
            .expect("lock")
            .iter()
            .map(|(p, o)| (*p, *o))
            .collect();
        if pending.is_empty() {
            return;
        }
        let mut tpl = TopicPartitionList::new();
        for (p, o) in &pending {
            if let Err(e) = tpl.add_partition_offset(&self.topic, *p, Offset::Offset(*o)) {
                self.log.error(format!("building commit list: {e}"));
                return;
            }
        }
        match consumer.commit(&tpl, CommitMode::Sync) {
            Ok(()) => {
                let mut current = self.pending.lock().expect("lock");
                for (p, o) in &pending {
                    if current.get(p) == Some(o) {
                        current.remove(p);
                    }
                }
                drop(current);
                self.log.committed(AckedCommit {
                    at_ms: now_ms(),
                    offsets: pending,
                });
            }
            Err(e) => self.log.error(format!("commit {pending:?} failed: {e}")),
        }
    }
}

/// Subscribes to `topic` with `config` and consumes until `stop`: records each record, then
/// commits synchronously every `commit_interval`; on stop commits once more and closes (which
/// leaves the group).
pub fn run_member(
    config: &ClientConfig,
    topic: &str,
    log: Arc<MemberLog>,
    stop: &AtomicBool,
    commit_interval: Duration,
) -> Result<()> {
    let context = MemberContext {
        log: log.clone(),
        topic: topic.to_string(),
        pending: Mutex::new(BTreeMap::new()),
        awaiting_first: Mutex::new(BTreeSet::new()),
    };
    let consumer: BaseConsumer<MemberContext> = config.create_with_context(context)?;
    consumer.subscribe(&[topic])?;
    let mut last_commit = Instant::now();
    while !stop.load(Ordering::SeqCst) {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                let value = m
                    .payload()
                    .map(|v| String::from_utf8_lossy(v).into_owned())
                    .unwrap_or_default();
                let (partition, offset) = (m.partition(), m.offset());
                drop(m);
                let ctx = consumer.context();
                if ctx.awaiting_first.lock().expect("lock").remove(&partition) {
                    log.first(FirstAfterAssign {
                        at_ms: now_ms(),
                        partition,
                        offset,
                    });
                }
                log.record(Received {
                    partition,
                    offset,
                    value,
                });
                ctx.pending.lock().expect("lock").insert(partition, offset + 1);
            }
            Some(Err(e)) => log.error(format!("poll: {e}")),
            None => {}
        }
        if last_commit.elapsed() >= commit_interval {
            consumer.context().commit_pending(&consumer);
            last_commit = Instant::now();
        }
    }
    consumer.context().commit_pending(&consumer);
    drop(consumer);
    Ok(())
}

/// A group member on its own thread.
pub struct GroupMember {
    pub client_id: String,
    log: Arc<MemberLog>,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Result<()>>>,
}

/// How often members commit what they processed.
pub const COMMIT_INTERVAL: Duration = Duration::from_millis(200);

impl GroupMember {
    pub fn start(config: ClientConfig, topic: &str, client_id: &str) -> Result<Self> {
        let log = Arc::new(MemberLog::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let mut config = config;
        config.set("client.id", client_id);
        let handle = {
            let (log, stop, topic) = (log.clone(), stop.clone(), topic.to_string());
            std::thread::Builder::new()
                .name(format!("member-{client_id}"))
                .spawn(move || run_member(&config, &topic, log, &stop, COMMIT_INTERVAL))?
        };
        Ok(Self {
            client_id: client_id.to_string(),
            log,
            stop,
            handle: Some(handle),
        })
    }

    pub fn log(&self) -> &Arc<MemberLog> {
        &self.log
    }

    /// Commits, closes (LeaveGroup) and joins the thread.
    pub fn stop(mut self) -> Result<Arc<MemberLog>> {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            h.join()
                .map_err(|_| anyhow!("member {} panicked", self.client_id))?
                .with_context(|| format!("member {}", self.client_id))?;
        }
        Ok(self.log.clone())
    }
}

impl Drop for GroupMember {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// A group member in a child process (`sluice-group-member`), its events parsed from stdout.
pub struct MemberProcess {
    pub client_id: String,
    child: Option<Child>,
    stdin: Option<ChildStdin>,
    log: Arc<MemberLog>,
    reader: Option<JoinHandle<()>>,
}

impl MemberProcess {
    /// Starts `binary` (the `sluice-group-member` executable) as a member of `group`;
    /// `settings` are extra librdkafka properties (e.g. `session.timeout.ms`).
    pub fn start(
        binary: &Path,
        bootstrap: &str,
        group: &str,
        topic: &str,
        client_id: &str,
        settings: &[(&str, &str)],
    ) -> Result<Self> {
        let mut cmd = Command::new(binary);
        cmd.args([bootstrap, group, topic, client_id]);
        for (k, v) in settings {
            cmd.arg(format!("{k}={v}"));
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("spawn {}", binary.display()))?;
        let stdout = child.stdout.take().context("child stdout")?;
        let stdin = child.stdin.take();
        let log = Arc::new(MemberLog::new(false));
        let reader = {
            let log = log.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if let Err(e) = log.apply_line(&line) {
                        log.error(format!("unparsable member line: {e:#}"));
                    }
                }
            })
        };
        Ok(Self {
            client_id: client_id.to_string(),
            child: Some(child),
            stdin,
            log,
            reader: Some(reader),
        })
    }

    pub fn log(&self) -> &Arc<MemberLog> {
        &self.log
    }

    /// SIGKILL: no commit, no LeaveGroup, no more heartbeats. Waits until reaped and until the
    /// events it wrote before dying are read.
    pub fn kill(&mut self) -> Result<()> {
        if let Some(mut c) = self.child.take() {
            c.kill()?;
            c.wait()?;
        }
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        Ok(())
    }

    /// Closes its stdin, which makes it commit, leave the group and exit; waits up to `timeout`.
    pub fn stop(&mut self, timeout: Duration) -> Result<()> {
        drop(self.stdin.take());
        if let Some(mut c) = self.child.take() {
            let deadline = Instant::now() + timeout;
            loop {
                if let Some(status) = c.try_wait()? {
                    if !status.success() {
                        bail!("member {} exited with {status}", self.client_id);
                    }
                    break;
                }
                if Instant::now() >= deadline {
                    let _ = c.kill();
                    let _ = c.wait();
                    bail!(
                        "member {} did not exit within {timeout:?} of closing its stdin",
                        self.client_id
                    );
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        Ok(())
    }
}

impl Drop for MemberProcess {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Counts acks and keeps the first failures of an idempotent `acks=all` producer.
#[derive(Default)]
struct AckCounter {
    acked: Mutex<Vec<Received>>,
    failed: Mutex<Vec<String>>,
}

struct AckContext(Arc<AckCounter>);
impl ClientContext for AckContext {}
impl ProducerContext for AckContext {
    type DeliveryOpaque = usize;
    fn delivery(&self, result: &DeliveryResult<'_>, seq: usize) {
        match result {
            Ok(m) => self.0.acked.lock().expect("lock").push(Received {
                partition: m.partition(),
                offset: m.offset(),
                value: crate::faults::record_value(seq as u64),
            }),
            Err((e, _)) => {
                let mut failed = self.0.failed.lock().expect("lock");
                if failed.len() < 20 {
                    failed.push(format!("rec-{seq}: {e}"));
                }
            }
        }
    }
}

/// Produces the values `rec-<seq>` for `seqs` round-robin over `partitions` with librdkafka's
/// idempotent producer (`acks=all`) and returns each acknowledged (partition, offset, value).
/// Fails if any record is not acknowledged.
pub fn produce_all(bootstrap: &str, topic: &str, partitions: i32, seqs: std::ops::Range<u64>) -> Result<Vec<Received>> {
    let counter = Arc::new(AckCounter::default());
    let producer: BaseProducer<AckContext> = crate::faults::workload_producer_config(bootstrap)
        .set("client.id", "sluice-groups-producer")
        .set("linger.ms", "20")
        .create_with_context(AckContext(counter.clone()))?;
    let expected = seqs.end - seqs.start;
    for seq in seqs {
        let value = crate::faults::record_value(seq);
        let mut record = BaseRecord::<[u8], [u8], usize>::with_opaque_to(topic, seq as usize)
            .partition((seq % partitions as u64) as i32)
            .payload(value.as_bytes());
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    record = r;
                    producer.poll(Duration::from_millis(5));
                }
                Err((e, _)) => bail!("enqueue {value}: {e}"),
            }
        }
        producer.poll(Duration::ZERO);
    }
    producer.flush(Duration::from_secs(120)).context("flush")?;
    producer.poll(Duration::ZERO);
    let failed = counter.failed.lock().expect("lock").clone();
    let acked = std::mem::take(&mut *counter.acked.lock().expect("lock"));
    if !failed.is_empty() || acked.len() as u64 != expected {
        bail!(
            "{} of {expected} records acknowledged; failures: {failed:?}",
            acked.len()
        );
    }
    Ok(acked)
}

/// The committed offsets of `group` for `partitions` of `topic`, through OffsetFetch by a
/// client that never joins the group (`None`: no committed offset). Retried for up to 30 s on
/// errors, as clients do while a coordinator moves (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS).
pub fn committed_offsets(
    bootstrap: &str,
    group: &str,
    topic: &str,
    partitions: i32,
) -> Result<BTreeMap<i32, Option<i64>>> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match fetch_committed_once(bootstrap, group, topic, partitions) {
            Ok(offsets) => return Ok(offsets),
            Err(e) if Instant::now() < deadline => {
                eprintln!("OffsetFetch for {group} failed ({e:#}); retrying");
                std::thread::sleep(Duration::from_millis(500));
            }
            Err(e) => return Err(e.context("OffsetFetch, retried for 30 s")),
        }
    }
}

fn fetch_committed_once(
    bootstrap: &str,
    group: &str,
    topic: &str,
    partitions: i32,
) -> Result<BTreeMap<i32, Option<i64>>> {
    let consumer: BaseConsumer = member_config(bootstrap, group, "sluice-groups-offset-fetch").create()?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition(topic, p);
    }
    let committed = consumer
        .committed_offsets(tpl, Duration::from_secs(10))
        .with_context(|| format!("OffsetFetch for group {group}"))?;
    let mut out = BTreeMap::new();
    for e in committed.elements_for_topic(topic) {
        if let Some(err) = e.error().err() {
            bail!("OffsetFetch {group} {topic}-{}: {err}", e.partition());
        }
        let offset = match e.offset() {
            Offset::Offset(o) => Some(o),
            Offset::Invalid => None,
            other => bail!("OffsetFetch {group} {topic}-{}: unexpected {other:?}", e.partition()),
        };
        out.insert(e.partition(), offset);
    }
    Ok(out)
}

/// Commits `offsets` for `group` from a client that is not a member (generation -1, as
/// `kafka-consumer-groups --reset-offsets` does); the group must have no active members.
pub fn commit_as_admin(bootstrap: &str, group: &str, topic: &str, offsets: &BTreeMap<i32, i64>) -> Result<()> {
    let consumer: BaseConsumer = member_config(bootstrap, group, "sluice-groups-committer").create()?;
    let mut tpl = TopicPartitionList::new();
    for (p, o) in offsets {
        tpl.add_partition_offset(topic, *p, Offset::Offset(*o))?;
    }
    consumer
        .commit(&tpl, CommitMode::Sync)
        .with_context(|| format!("OffsetCommit {offsets:?} for group {group}"))?;
    Ok(())
}

/// Every acknowledged record must have been received by some member of the group, with the
/// value the producer sent at that offset; with `exactly_once`, no offset twice either.
pub fn check_group_received(
    group: &str,
    logs: &[&Arc<MemberLog>],
    acked: &[Received],
    exactly_once: bool,
) -> Result<()> {
    let mut seen: HashMap<(i32, i64), (String, u32)> = HashMap::new();
    for log in logs {
        for r in log.received.lock().expect("lock").iter() {
            let e = seen.entry((r.partition, r.offset)).or_insert((r.value.clone(), 0));
            e.1 += 1;
            if e.0 != r.value {
                bail!(
                    "group {group}: {}-{} was received as {:?} and as {:?}",
                    r.partition,
                    r.offset,
                    e.0,
                    r.value
                );
            }
        }
    }
    let mut missing = Vec::new();
    let mut wrong = Vec::new();
    for a in acked {
        match seen.get(&(a.partition, a.offset)) {
            None => missing.push(format!("{} at {}-{}", a.value, a.partition, a.offset)),
            Some((v, _)) if *v != a.value => {
                wrong.push(format!("{}-{}: acked {} received {v}", a.partition, a.offset, a.value))
            }
            Some(_) => {}
        }
    }
    let duplicates: Vec<String> = seen
        .iter()
        .filter(|(_, (_, n))| *n > 1)
        .take(10)
        .map(|((p, o), (v, n))| format!("{v} at {p}-{o} x{n}"))
        .collect();
    let n_dup = seen.values().filter(|(_, n)| *n > 1).count();
    if !missing.is_empty() || !wrong.is_empty() || (exactly_once && n_dup > 0) {
        missing.sort();
        bail!(
            "group {group}: {} of {} acknowledged records never received (first: {:?}); {} received with another value \
             ({:?}); {n_dup} offsets received more than once{} ({duplicates:?})",
            missing.len(),
            acked.len(),
            missing.iter().take(10).collect::<Vec<_>>(),
            wrong.len(),
            wrong.iter().take(5).collect::<Vec<_>>(),
            if exactly_once { " (expected exactly once)" } else { "" }
        );
    }
    Ok(())
}

/// Distinct (partition, offset) pairs received by the members together.
pub fn distinct_received(logs: &[&Arc<MemberLog>]) -> usize {
    let mut set = BTreeSet::new();
    for log in logs {
        for r in log.received.lock().expect("lock").iter() {
            set.insert((r.partition, r.offset));
        }
    }
    set.len()
}

/// Waits until the members' current assignments are disjoint, non-empty for each member, and
/// cover partitions 0..`partitions`; returns them.
pub fn await_balanced(logs: &[&Arc<MemberLog>], partitions: i32, timeout: Duration) -> Result<Vec<Vec<i32>>> {
    let mut last = Vec::new();
    crate::clients::wait_until(timeout, "", || {
        last = logs.iter().map(|l| l.current_assignment().1).collect::<Vec<_>>();
        let mut all: Vec<i32> = last.iter().flatten().copied().collect();
        all.sort();
        let covered = all == (0..partitions).collect::<Vec<_>>();
        (covered && last.iter().all(|a| !a.is_empty())).then(|| last.clone())
    })
    .map_err(|_| {
        anyhow!(
            "members never held a complete, disjoint assignment of {partitions} partitions within {timeout:?}: {last:?}; \
             member errors: {:?}",
            logs.iter().map(|l| l.errors_tail(3)).collect::<Vec<_>>()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_partition_matches_kafka_utils_abs_of_the_java_hash() {
        assert_eq!(java_string_hash("orders-sink"), -1_813_797_765);
        // Kafka 4.1 (checked against a real broker): orders-sink -> 15, analytics -> 10.
        assert_eq!(offsets_partition("orders-sink"), 15);
        assert_eq!(offsets_partition("analytics"), 10);
        assert_eq!(offsets_partition("witness-0"), 46);
    }
}

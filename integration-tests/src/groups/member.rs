//! A group member that commits after processing: in this process ([`GroupMember`]) or as a
//! killable child process ([`MemberProcess`]).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use super::member_log::{AckedCommit, Assigned, FirstAfterAssign, MemberLog, Received};
use crate::clients::now_ms;

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

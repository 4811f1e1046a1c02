//! One soak schedule end to end: a fresh 3-node cluster with `FAST_FAILOVER` settings, the
//! recorded `acks=all` idempotent [`Workload`] and two consumer groups committing after
//! processing (one of classic members, one of KIP-848 members), the seeded [`Schedule`]
//! executed against it, everything healed, and then the
//! invariants checked. [`run_schedule`] returns a [`ScheduleOutcome`] instead of failing, so a
//! soak (`sluice-soak`, `scripts/soak.sh`) goes on to the next seed and a test can assert on it.
//!
//! Checked after healing: the producer acknowledges again on every partition (the cluster
//! recovered), every node still runs, full ISR, every acknowledged record exactly once at its
//! offset (the records that are not are counted as lost), nothing the workload consumer or a
//! group member read is missing from the final log (consumed-then-truncated), each group
//! received every acknowledged record and committed no offset past the high watermark, and
//! every replica holds the same bytes. Each failed check is one violation.
//!
//! With [`ScheduleOptions::secure`] the cluster is secured ([`SecureSoak`]: SASL_SSL only, each
//! client its own SCRAM user and ACLs, the harness the admin) and the schedule may rotate
//! certificates and change SCRAM credentials; the checks are the same.
//!
//! With [`ScheduleOptions::transactions`] the transactional workload
//! ([`super::transactions`]) and the consume-transform-produce stage copying its topic
//! ([`super::consume_transform_produce`]) run too, the schedule may aim at their coordinators
//! and leaders, and their anomalies are counted once the schedule has healed.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use kafka_protocol::messages::FindCoordinatorRequest;
use kafka_protocol::protocol::StrBytes;
use rdkafka::config::ClientConfig;

use super::consume_transform_produce::{self as ctp, CopyStage, STAGE_GROUP, STAGE_OUTPUT};
use super::schedule::{Action, FaultKind, NetFault, Port, Schedule, ScheduleOptions, Target, NODES};
use super::secure::{SecureSoak, COPIER, PRODUCER, READER};
use super::transactions::{self, transactional_id, AnomalyNotes, TxnReport, TxnWorkload, TXN_TOPIC};
use super::{
    acked_but_missing, acked_records, await_identical_replicas, check_acked_records_exactly_once,
    check_consumed_records_in_final_log, create_topic, mark_client_resends, read_final_log_as, report_resent_by_client,
    workload_producer_config, Workload, FAST_FAILOVER,
};
use crate::clients::{self, wait_until};
use crate::groups::{check_group_received, committed_offsets_as, member_config, GroupMember, MemberLog, Received};
use crate::{retry_port_races, ClientSecurity, Cluster};

const TOPIC: &str = "soak";
const GROUPS: [&str; 2] = ["soak-sink", "soak-analytics"];
/// The group of the two whose members speak KIP-848 (`group.protocol=consumer`); the other's
/// speak the classic protocol.
const KIP848_GROUP: &str = "soak-analytics";
const MEMBERS_PER_GROUP: usize = 2;
/// Acked records every partition must gain to count as progress (before faults, after healing).
const PROGRESS: u64 = 20;
/// Longest the cluster may take after the last heal to acknowledge on every partition again.
const RECOVERY_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest the cluster may take after the last heal to be back to full ISR.
const FULL_ISR_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest a graceful shutdown (SIGTERM) may take before it counts as a violation.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(20);
/// Longest the copy stage may take after the producers stop to have copied every committed
/// record (its group's committed offsets past each partition's last one).
const STAGE_CATCH_UP_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest resolving a target (asking who leads or controls) may take.
/// Longest to wait after healing, on a slow machine, for the transactional producers to have
/// committed and aborted a transaction each and the copy stage to have committed one, so that
/// every schedule checks both ends and the copy whatever the machine's speed.
const TXN_OUTCOMES_TIMEOUT: Duration = Duration::from_secs(60);
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);
/// Broker log lines kept per node when a schedule fails.
const LOG_TAIL_LINES: usize = 40;

/// How each schedule runs.
#[derive(Debug, Clone)]
pub struct SoakOptions {
    pub schedule: ScheduleOptions,
    /// Records per second of the workload producer.
    pub rate_per_s: u64,
    /// Print the nodes' log tails when the cluster is dropped (tests); off for the soak binary,
    /// which keeps them in the outcome of a failed schedule instead.
    pub report_on_drop: bool,
}

impl Default for SoakOptions {
    fn default() -> Self {
        Self {
            schedule: ScheduleOptions::default(),
            rate_per_s: 1000,
            report_on_drop: false,
        }
    }
}

/// What one schedule did and found.
#[derive(Debug)]
pub struct ScheduleOutcome {
    pub schedule: Schedule,
    /// Faults actually injected (a fault whose inject failed is a violation, not counted).
    pub injected: usize,
    /// Certificate rotations whose check passed: every running node presented the new
    /// certificate and the connections made before it were still served.
    pub certificate_checks: usize,
    /// SCRAM credential changes whose check passed: every running node logged the users in
    /// with the new credentials only.
    pub scram_checks: usize,
    /// Each step as executed: when (from the first step's reference time), what, on which node.
    pub executed: Vec<String>,
    pub acknowledged: u64,
    /// Acknowledged records not in the final log where their delivery report put them.
    pub lost: u64,
    /// Records stored twice because the client resent them under a new producer epoch
    /// (`FinalLog::resent_by_client`): reported, not violations.
    pub resent_by_client: u64,
    /// One message per failed check.
    pub violations: Vec<String>,
    /// Per node, the last broker log lines, if the schedule failed.
    pub log_tails: Vec<String>,
    pub elapsed: Duration,
    /// The transactional workload's figures and anomalies (`--transactions`).
    pub txn: Option<TxnReport>,
    /// Examples of each transaction anomaly found: which record, where.
    pub txn_notes: AnomalyNotes,
}

impl ScheduleOutcome {
    pub fn seed(&self) -> u64 {
        self.schedule.seed
    }
    pub fn passed(&self) -> bool {
        self.lost == 0 && self.violations.is_empty() && self.txn.is_none_or(|t| t.anomalies() == 0)
    }
    /// One line: seed, faults and figures.
    pub fn line(&self) -> String {
        let resent = match self.resent_by_client {
            0 => String::new(),
            n => format!(" ({n} resent by the client under a new producer epoch)"),
        };
        let checks = match self.schedule.options.secure {
            false => String::new(),
            true => format!(
                " ({} certificate checks, {} SCRAM checks passed)",
                self.certificate_checks, self.scram_checks
            ),
        };
        let txn = self.txn.map(|t| format!("; {}", t.line())).unwrap_or_default();
        format!(
            "seed {}: {} faults injected [{}]{checks}; {} acknowledged, {} lost, {} invariant violations{resent}{txn}; {:.1} s",
            self.seed(),
            self.injected,
            self.schedule.summary(),
            self.acknowledged,
            self.lost,
            self.violations.len(),
            self.elapsed.as_secs_f64()
        )
    }
    /// Everything needed to understand a failure: the schedule, the steps as run, the
    /// violations and the broker log tails.
    pub fn details(&self) -> String {
        let anomalies = match self.txn_notes.is_empty() {
            true => String::new(),
            false => format!("transaction anomalies:\n  {}\n", self.txn_notes.lines().join("\n  ")),
        };
        format!(
            "{}executed:\n  {}\nviolations:\n  {}\n{anomalies}{}",
            self.schedule,
            self.executed.join("\n  "),
            self.violations.join("\n  "),
            self.log_tails.join("\n")
        )
    }
}

/// Runs the schedule for `seed` on a fresh cluster and checks the invariants. Never panics on
/// what the cluster does: every failure becomes a violation in the outcome.
pub fn run_schedule(seed: u64, options: &SoakOptions) -> ScheduleOutcome {
    let started = Instant::now();
    let mut out = ScheduleOutcome {
        schedule: Schedule::generate(seed, options.schedule.clone()),
        injected: 0,
        certificate_checks: 0,
        scram_checks: 0,
        executed: Vec::new(),
        acknowledged: 0,
        lost: 0,
        resent_by_client: 0,
        violations: Vec::new(),
        log_tails: Vec::new(),
        elapsed: Duration::ZERO,
        txn: None,
        txn_notes: AnomalyNotes::default(),
    };
    let mut secure = match options.schedule.secure {
        false => None,
        true => match SecureSoak::new(seed, &GROUPS, options.schedule.transactions) {
            Ok(secure) => Some(secure),
            Err(e) => {
                out.violations.push(format!("the test CA and users: {e:#}"));
                out.elapsed = started.elapsed();
                return out;
            }
        },
    };
    match start_cluster(options, secure.as_ref()) {
        Ok(mut cluster) => {
            if let Err(e) = run_on(&mut cluster, &mut secure, options, &mut out) {
                out.violations.push(format!("{e:#}"));
            }
            if !out.passed() {
                out.log_tails = cluster
                    .ids()
                    .into_iter()
                    .map(|id| {
                        format!(
                            "--- node {id} log tail ---\n{}",
                            cluster.node(id).log_tail(LOG_TAIL_LINES)
                        )
                    })
                    .collect();
            }
        }
        Err(e) => out.violations.push(format!("the cluster did not start: {e:#}")),
    }
    out.elapsed = started.elapsed();
    out
}

/// Fast failover, no initial rebalance delay, secured if `secure` is given; a start that lost
/// a port race is retried.
fn start_cluster(options: &SoakOptions, secure: Option<&SecureSoak>) -> Result<Cluster> {
    let secure_settings = secure.map(SecureSoak::settings).unwrap_or_default();
    let mut settings: Vec<(&str, &str)> = FAST_FAILOVER.to_vec();
    settings.push(("group.initial.rebalance.delay.ms", "0"));
    settings.extend(secure_settings.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let size = NODES as usize;
    let cluster = retry_port_races(|| match (options.schedule.partitions, secure) {
        (true, None) => net_start(&settings, options.report_on_drop),
        (true, Some(s)) => Cluster::start_partitionable_custom(size, &settings, |id, o| s.customise(id, o)),
        (false, None) => Cluster::start_with(size, &settings, options.report_on_drop),
        (false, Some(s)) => Cluster::start_custom(
            size,
            &settings,
            options.report_on_drop,
            |_| Vec::new(),
            |id, o| s.customise(id, o),
        ),
    });
    if let Some(s) = secure {
        s.check_issued()?;
    }
    cluster
}

/// Workload and groups started, the schedule executed, everything healed, then every check;
/// an `Err` is a step that made the rest meaningless (the outcome holds what ran before it).
fn run_on(
    cluster: &mut Cluster,
    secure: &mut Option<SecureSoak>,
    options: &SoakOptions,
    out: &mut ScheduleOutcome,
) -> Result<()> {
    let partitions = options.schedule.topic_partitions;
    create_topic(cluster, 1, TOPIC, partitions, 3, &[("min.insync.replicas", "2")])?;
    cluster.await_full_isr(TOPIC, Duration::from_secs(20))?;
    if let Some(s) = secure.as_ref() {
        s.grant(cluster, 1, TOPIC, options.schedule.transactions)
            .context("granting the workload's ACLs")?;
    }
    let bootstrap = cluster.bootstrap();
    // Each client logs in as its own principal on a secured cluster.
    let login = |user: &str| -> ClientSecurity { secure.as_ref().map(|s| s.user_security(user)).unwrap_or_default() };
    let groups: Vec<Vec<GroupMember>> = GROUPS
        .iter()
        .map(|group| {
            (0..MEMBERS_PER_GROUP)
                .map(|i| {
                    let mut config = clients::secured(member_config(&bootstrap, group, "unused"), &login(group));
                    if *group == KIP848_GROUP {
                        config.set("group.protocol", "consumer");
                    }
                    GroupMember::start(config, TOPIC, &format!("{group}-{i}"))
                })
                .collect::<Result<Vec<_>>>()
        })
        .collect::<Result<_>>()?;
    let producer_config: ClientConfig = clients::secured(workload_producer_config(&bootstrap), &login(PRODUCER));
    let workload = Workload::start_secured(
        &bootstrap,
        TOPIC,
        partitions,
        options.rate_per_s,
        producer_config,
        &login(READER),
    )?;
    let txn_run = match options.schedule.transactions {
        false => None,
        true => {
            for topic in [TXN_TOPIC, STAGE_OUTPUT] {
                create_topic(cluster, 1, topic, partitions, 3, &[("min.insync.replicas", "2")])?;
                cluster.await_full_isr(topic, Duration::from_secs(20))?;
            }
            let config = clients::secured(txn_producer_config(&bootstrap), &login(PRODUCER));
            let workload = TxnWorkload::start(config, TXN_TOPIC, partitions, out.schedule.seed);
            let stage = CopyStage::start(
                clients::secured(txn_producer_config(&bootstrap), &login(COPIER)),
                clients::secured(bootstrap_config(&bootstrap), &login(COPIER)),
                out.schedule.seed,
            );
            Some((workload, stage))
        }
    };
    let txn_reader = login(READER);
    let started = Instant::now();
    workload
        .await_progress_since(started, PROGRESS, Duration::from_secs(20))
        .context("before any fault")?;

    execute(cluster, secure, &out.schedule.clone(), out);
    let healed_at = Instant::now();

    if let Err(e) = workload.await_progress_since(healed_at, PROGRESS, RECOVERY_TIMEOUT) {
        out.violations.push(format!("recovery after healing: {e:#}"));
    }
    if let Some((txn_workload, stage)) = txn_run {
        // Not a violation by itself: the checks below say what was missing.
        let _ = wait_until(TXN_OUTCOMES_TIMEOUT, "a commit and an abort, and a commit of the copy stage", || {
            let (committed, aborted) = txn_workload.ended();
            (committed > 0 && aborted > 0 && stage.committed() > 0).then_some(())
        });
        let reader = clients::secured(clients::consumer_config(&bootstrap), &txn_reader);
        let harness = cluster.client_security(1).clone();
        check_transactions(&bootstrap, reader, &harness, txn_workload, stage, partitions, out);
    }
    check_all(cluster, workload, groups, healed_at, partitions, out)
}

/// Stops the transactional producers and judges what `read_committed` shows of their topic;
/// waits for the copy stage to copy every committed record, stops it, and judges the copy.
/// A step that cannot be done is a violation, and the figures found so far are kept.
fn check_transactions(
    bootstrap: &str,
    reader: ClientConfig,
    harness: &ClientSecurity,
    workload: TxnWorkload,
    stage: CopyStage,
    partitions: i32,
    out: &mut ScheduleOutcome,
) {
    let v = &mut out.violations;
    let txns = workload.stop();
    if txns.is_empty() {
        v.push("the transactional workload completed no transaction: nothing was checked".to_string());
    }
    let input = match transactions::read_committed(reader.clone(), TXN_TOPIC, partitions) {
        Ok(input) => input,
        Err(e) => {
            v.push(format!("checking the transactions: {e:#}"));
            stage.stop();
            return;
        }
    };
    let mut report = transactions::judge_log(&txns, &input, &mut out.txn_notes);
    if let Err(e) = ctp::await_caught_up(bootstrap, harness, &input, partitions, STAGE_CATCH_UP_TIMEOUT) {
        v.push(format!("{e:#}"));
    }
    let copies = stage.stop();
    if copies.stuck > 0 {
        v.push(format!(
            "{} copy stage workers did not stop within a minute (stuck in a client call)",
            copies.stuck
        ));
    }
    let output = ctp::committed_offsets(bootstrap, harness, partitions).and_then(|committed| {
        let output = transactions::read_committed(reader, STAGE_OUTPUT, partitions)?;
        Ok((committed, output))
    });
    match output {
        Ok((committed, output)) => {
            let sent = transactions::sent_values(&txns);
            report.stage = ctp::judge(&input, &sent, &committed, &copies.txns, &output, &mut out.txn_notes);
            report.stage.hung_calls = copies.hung_calls;
            report.stage.offset_resets = copies.offset_resets;
            for reset in &copies.offset_reset_lines {
                out.txn_notes.add("copy stage consumer offset resets", || reset.clone());
            }
            if report.stage.committed == 0 {
                v.push(format!("the copy stage ({STAGE_GROUP}) committed no transaction"));
            }
        }
        Err(e) => v.push(format!("checking the copy stage: {e:#}")),
    }
    out.txn = Some(report);
}

/// Only where the cluster is: the copy stage's consumers add their group settings.
fn bootstrap_config(bootstrap: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap);
    c
}

/// The transactional producers' settings: idempotent, `acks=all`, bounded retries of each call.
fn txn_producer_config(bootstrap: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap)
        .set("client.id", "soak-tx")
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "5")
        // librdkafka requires it no longer than transaction.timeout.ms.
        .set("message.timeout.ms", "10000")
        .set("log_level", "3");
    c
}

/// The nodes a fault currently holds (down, frozen or cut off), and by whom.
#[derive(Default)]
struct Faulted {
    /// Per fault index, the node it hit (process faults) or the nodes of its partition.
    hit: BTreeMap<usize, Vec<i32>>,
    net_active: bool,
}

impl Faulted {
    fn nodes(&self) -> BTreeSet<i32> {
        self.hit.values().flatten().copied().collect()
    }
}

/// Runs the steps at their times (late if a previous step took longer, e.g. a restart waiting
/// for readiness), recording each; failures become violations and the schedule goes on.
fn execute(cluster: &mut Cluster, secure: &mut Option<SecureSoak>, schedule: &Schedule, out: &mut ScheduleOutcome) {
    let t0 = Instant::now();
    let mut faulted = Faulted::default();
    for step in schedule.steps() {
        if let Some(wait) = (t0 + step.at).checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let fault = schedule.faults[step.fault];
        let at = t0.elapsed().as_secs_f64();
        // A security fault's heal is its check; it only counts if the change was made.
        let checks_a_change = step.action == Action::Heal && faulted.hit.contains_key(&step.fault);
        let result = match step.action {
            Action::Inject => inject(cluster, secure, fault.kind, step.fault, &mut faulted),
            Action::Heal => heal(cluster, secure, fault.kind, step.fault, &mut faulted),
        };
        let verb = if step.action == Action::Inject { "" } else { "heal: " };
        match result {
            Ok(what) => {
                out.injected += usize::from(step.action == Action::Inject);
                if checks_a_change {
                    match fault.kind {
                        FaultKind::RotateCertificates => out.certificate_checks += 1,
                        FaultKind::RotateScram { .. } => out.scram_checks += 1,
                        _ => {}
                    }
                }
                out.executed.push(format!("+{at:.2}s #{} {verb}{what}", step.fault + 1));
            }
            Err(e) => {
                let line = format!("+{at:.2}s #{} {verb}{} failed: {e:#}", step.fault + 1, fault.kind);
                out.executed.push(line.clone());
                out.violations.push(line);
            }
        }
    }
    // Every fault heals in the schedule; anything a failed heal left behind is undone here so
    // the checks see a whole cluster.
    for id in faulted.nodes() {
        let node = cluster.node(id);
        let _ = node.resume();
        if !node.is_running() {
            if let Err(e) = node.restart() {
                out.violations
                    .push(format!("node {id} did not come back after the schedule: {e:#}"));
            }
        }
    }
    if faulted.net_active {
        if let Err(e) = net_apply(cluster, &NetStep::Heal) {
            out.violations
                .push(format!("healing the network after the schedule: {e:#}"));
        }
    }
}

/// A node to ask about the cluster: one no fault holds (a frozen node would not answer).
fn healthy_node(faulted: &Faulted) -> i32 {
    let held = faulted.nodes();
    (1..=NODES).find(|id| !held.contains(id)).unwrap_or(1)
}

/// Every node that runs and no fault holds: those a certificate or credential change must
/// reach while it lasts.
fn healthy_nodes(cluster: &mut Cluster, faulted: &Faulted) -> Vec<i32> {
    let held = faulted.nodes();
    (1..=NODES)
        .filter(|id| !held.contains(id) && cluster.node(*id).is_running())
        .collect()
}

/// The node `target` names now; if a fault already holds it (overlapping faults, or stale
/// metadata), the lowest node no fault holds instead, said so in the returned note.
fn resolve(cluster: &Cluster, target: Target, faulted: &Faulted) -> Result<(i32, String)> {
    let asking = healthy_node(faulted);
    let node = match target {
        Target::Node(id) => id,
        Target::Controller => cluster.controller(asking, RESOLVE_TIMEOUT)?,
        Target::Leader(p) => cluster.partition_leader(asking, TOPIC, p, RESOLVE_TIMEOUT)?,
        Target::TxnLeader(p) => cluster.partition_leader(asking, TXN_TOPIC, p, RESOLVE_TIMEOUT)?,
        Target::TxnCoordinator(k) => coordinator(cluster, asking, TRANSACTION_KEY, &transactional_id(k))?,
        Target::StageGroupCoordinator => coordinator(cluster, asking, GROUP_KEY, STAGE_GROUP)?,
    };
    if faulted.nodes().contains(&node) {
        let instead = healthy_node(faulted);
        return Ok((instead, format!("node {instead} (node {node} already faulted)")));
    }
    Ok((node, format!("node {node}")))
}

/// FindCoordinator's key types.
const GROUP_KEY: i8 = 0;
const TRANSACTION_KEY: i8 = 1;

/// The coordinator node `asking` names for `key` (a group or a transactional id), waiting
/// while it has none (a coordinator moving after a fault).
fn coordinator(cluster: &Cluster, asking: i32, key_type: i8, key: &str) -> Result<i32> {
    let request = FindCoordinatorRequest::default()
        .with_key(StrBytes::from_string(key.to_string()))
        .with_key_type(key_type);
    let mut last = String::new();
    wait_until(
        RESOLVE_TIMEOUT,
        &format!("the coordinator of {key}"),
        || match cluster.call(asking, &request, 3, RESOLVE_TIMEOUT) {
            Ok(r) if r.error_code == 0 && r.node_id.0 > 0 => Some(r.node_id.0),
            Ok(r) => {
                last = format!("error code {} ({:?})", r.error_code, r.error_message);
                None
            }
            Err(e) => {
                last = format!("{e:#}");
                None
            }
        },
    )
    .with_context(|| format!("node {asking} named no coordinator for {key}: {last}"))
}

fn inject(
    cluster: &mut Cluster,
    secure: &mut Option<SecureSoak>,
    kind: FaultKind,
    index: usize,
    faulted: &mut Faulted,
) -> Result<String> {
    let (target, what) = match kind {
        FaultKind::Kill(t) | FaultKind::Restart(t) | FaultKind::Freeze(t) | FaultKind::GracefulRestart(t) => {
            (t, kind.to_string())
        }
        FaultKind::RotateCertificates | FaultKind::RotateScram { .. } => {
            let s = secure
                .as_mut()
                .context("a security fault needs a secured cluster (--secure)")?;
            let done = match kind {
                FaultKind::RotateScram { iterations } => s.change_scram(cluster, healthy_node(faulted), iterations)?,
                _ => {
                    let nodes = healthy_nodes(cluster, faulted);
                    s.rotate_certificates(cluster, &nodes)?
                }
            };
            // Holds no node: only its heal, the check, is pending.
            faulted.hit.insert(index, Vec::new());
            return Ok(format!("{kind}: {done}"));
        }
        FaultKind::Net(net) => {
            let (step, what) = resolve_net(cluster, net, faulted)?;
            net_apply(cluster, &step)?;
            faulted.net_active = true;
            faulted.hit.insert(index, step.nodes());
            return Ok(format!("{kind}: {what}"));
        }
    };
    let (id, on) = resolve(cluster, target, faulted)?;
    let node = cluster.node(id);
    match kind {
        FaultKind::Kill(_) | FaultKind::Restart(_) => node.kill()?,
        FaultKind::Freeze(_) => node.pause()?,
        FaultKind::GracefulRestart(_) => {
            // Hold the node first: a shutdown that times out has still taken it down.
            faulted.hit.insert(index, vec![id]);
            node.terminate(SHUTDOWN_TIMEOUT)?;
        }
        FaultKind::Net(_) | FaultKind::RotateCertificates | FaultKind::RotateScram { .. } => {
            unreachable!("handled above")
        }
    }
    faulted.hit.insert(index, vec![id]);
    Ok(format!("{what}: {on}"))
}

fn heal(
    cluster: &mut Cluster,
    secure: &mut Option<SecureSoak>,
    kind: FaultKind,
    index: usize,
    faulted: &mut Faulted,
) -> Result<String> {
    let Some(nodes) = faulted.hit.remove(&index) else {
        return Ok("nothing to undo (the fault was not injected)".to_string());
    };
    if kind.is_security() {
        let s = secure
            .as_mut()
            .context("a security fault needs a secured cluster (--secure)")?;
        let healthy = healthy_nodes(cluster, faulted);
        return match kind {
            FaultKind::RotateCertificates => s.check_certificates(cluster, &healthy),
            _ => s.check_scram(cluster, &healthy),
        };
    }
    if kind.is_net() {
        net_apply(cluster, &NetStep::Heal)?;
        faulted.net_active = false;
        return Ok("network healed".to_string());
    }
    let id = nodes[0];
    let node = cluster.node(id);
    if matches!(kind, FaultKind::Freeze(_)) {
        node.resume()?;
        return Ok(format!("node {id} thawed"));
    }
    node.restart().with_context(|| format!("restarting node {id}"))?;
    Ok(format!("node {id} restarted"))
}

/// A network fault with its nodes resolved: what the net harness is asked to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetStep {
    Isolate(i32),
    Split(Vec<Vec<i32>>),
    OneWay { from: i32, to: i32 },
    CutPort { a: i32, b: i32, port: Port },
    Heal,
}

impl NetStep {
    fn nodes(&self) -> Vec<i32> {
        match self {
            NetStep::Isolate(n) => vec![*n],
            NetStep::Split(groups) => groups.iter().flatten().copied().collect(),
            NetStep::OneWay { from, to } => vec![*from, *to],
            NetStep::CutPort { a, b, .. } => vec![*a, *b],
            NetStep::Heal => Vec::new(),
        }
    }
}

fn resolve_net(cluster: &Cluster, net: NetFault, faulted: &Faulted) -> Result<(NetStep, String)> {
    let others = |n: i32| -> Vec<i32> { (1..=NODES).filter(|id| *id != n).collect() };
    let pick = |n: i32, other: u8| others(n)[usize::from(other).min(1)];
    let step = match net {
        NetFault::Isolate(t) => NetStep::Isolate(resolve(cluster, t, faulted)?.0),
        NetFault::SplitOff(t) => {
            let n = resolve(cluster, t, faulted)?.0;
            NetStep::Split(vec![vec![n], others(n)])
        }
        NetFault::SplitAll => NetStep::Split((1..=NODES).map(|id| vec![id]).collect()),
        NetFault::OneWay { from, other } => {
            let n = resolve(cluster, from, faulted)?.0;
            NetStep::OneWay {
                from: n,
                to: pick(n, other),
            }
        }
        NetFault::CutPort { a, other, port } => {
            let n = resolve(cluster, a, faulted)?.0;
            NetStep::CutPort {
                a: n,
                b: pick(n, other),
                port,
            }
        }
    };
    let what = format!("{step:?}");
    Ok((step, what))
}

// ---- network partitions: the partitionable cluster and its `Net` ---------------------------

/// Starts a cluster whose nodes can be partitioned from each other (each in its own network
/// namespace; needs root, `ip` and `nft`).
fn net_start(settings: &[(&str, &str)], _report_on_drop: bool) -> Result<Cluster> {
    Cluster::start_partitionable(NODES as usize, settings)
}

/// Applies one network step to a cluster from [`net_start`].
fn net_apply(cluster: &Cluster, step: &NetStep) -> Result<()> {
    let net = cluster
        .net()
        .context("a network partition fault needs a cluster started with Cluster::start_partitionable")?;
    match step {
        NetStep::Isolate(n) => net.isolate(*n),
        NetStep::Split(groups) => {
            let groups: Vec<&[i32]> = groups.iter().map(Vec::as_slice).collect();
            net.split(&groups)
        }
        NetStep::OneWay { from, to } => net.one_way(*from, *to),
        NetStep::CutPort { a, b, port } => net.cut_port(
            *a,
            *b,
            match port {
                Port::Quorum => super::net::Port::Quorum,
                Port::Kafka => super::net::Port::Kafka,
            },
        ),
        NetStep::Heal => net.heal(),
    }
}

/// Stops the workload and groups and runs every check, each failure one violation.
/// The start of the line a broker logs when an invariant does not hold (`invariant::LOG_MESSAGE`).
const BROKEN_INVARIANT_LOG: &str = "an invariant sluice relies on does not hold";

fn check_all(
    cluster: &mut Cluster,
    mut workload: Workload,
    groups: Vec<Vec<GroupMember>>,
    healed_at: Instant,
    partitions: i32,
    out: &mut ScheduleOutcome,
) -> Result<()> {
    let v = &mut out.violations;
    let producer = workload.stop_producing()?;
    out.acknowledged = producer.acked().count() as u64;
    if let Some(why) = &producer.stopped_early {
        v.push(format!("the producer stopped early: {why}"));
    }
    for id in cluster.ids() {
        if let Err(e) = cluster.node(id).assert_running() {
            v.push(format!("node {id} is not running after healing: {e:#}"));
        }
        // A node that found a broken invariant says so and stops; a restart may hide the stop.
        let log = std::fs::read_to_string(cluster.node(id).log_path()).unwrap_or_default();
        for line in log.lines().filter(|l| l.contains(BROKEN_INVARIANT_LOG)) {
            v.push(format!("node {id} found a broken invariant: {line}"));
        }
    }
    let isr_timeout = (healed_at + FULL_ISR_TIMEOUT).saturating_duration_since(Instant::now());
    if let Err(e) = cluster.await_full_isr(TOPIC, isr_timeout) {
        v.push(format!("full ISR after healing: {e:#}"));
    }
    // The harness's own login (the admin, with the password in force, on a secured cluster).
    let harness = cluster.client_security(1).clone();
    let mut log = read_final_log_as(
        &cluster.bootstrap(),
        &harness,
        TOPIC,
        partitions,
        Duration::from_secs(30),
    )
    .context("reading the final log")?;
    let resent = mark_client_resends(cluster, TOPIC, &mut log);
    report_resent_by_client(&resent);
    if !resent.is_empty() {
        eprintln!(
            "[faults] the producer's idempotence events:\n    {}",
            producer.epoch_events_tail(40)
        );
    }
    out.resent_by_client = resent.len() as u64;
    out.lost = acked_but_missing(&log, &producer).len() as u64;
    if let Err(e) = check_acked_records_exactly_once(&log, &producer) {
        v.push(format!(
            "acknowledged records: {e:#}; {}; idempotence events:\n    {}",
            producer.summary(),
            producer.epoch_events_tail(40)
        ));
    }
    let consumer = workload.stop_consuming(&log.high_watermarks, Duration::from_secs(20))?;
    if let Err(e) = check_consumed_records_in_final_log(&log, &consumer) {
        v.push(format!("workload consumer: {e:#}"));
    }
    if let Some(why) = &consumer.not_caught_up {
        v.push(format!("workload consumer: {why}"));
    }
    let acked: Vec<Received> = acked_records(&log, &producer);
    let bootstrap = cluster.bootstrap();
    for (group, members) in GROUPS.iter().zip(groups) {
        v.extend(check_group(
            &bootstrap, &harness, group, members, &acked, &log, partitions,
        ));
    }
    if let Err(e) = await_identical_replicas(cluster, TOPIC, partitions, Duration::from_secs(20)) {
        v.push(format!("identical replicas: {e:#}"));
    }
    Ok(())
}

/// A group received every acknowledged record (waiting for it to catch up), everything it
/// received is in the final log at that offset, and it committed no offset past the high
/// watermark.
fn check_group(
    bootstrap: &str,
    harness: &ClientSecurity,
    group: &str,
    members: Vec<GroupMember>,
    acked: &[Received],
    log: &super::FinalLog,
    partitions: i32,
) -> Vec<String> {
    let mut v = Vec::new();
    let caught_up = {
        let logs: Vec<&Arc<MemberLog>> = members.iter().map(GroupMember::log).collect();
        let mut last = String::new();
        wait_until(Duration::from_secs(30), "", || {
            match check_group_received(group, &logs, acked, false) {
                Ok(()) => Some(()),
                Err(e) => {
                    last = format!("{e:#}");
                    None
                }
            }
        })
        .map_err(|_| last)
    };
    if let Err(why) = caught_up {
        v.push(format!("group {group} within 30 s of the end: {why}"));
    }
    let mut logs = Vec::new();
    for m in members {
        match m.stop() {
            Ok(log) => logs.push(log),
            Err(e) => v.push(format!("group {group}: stopping a member: {e:#}")),
        }
    }
    let mut truncated = Vec::new();
    for member in &logs {
        for r in member.received.lock().expect("member log lock").iter() {
            if log.value_at(r.partition, r.offset) != Some(r.value.as_str()) {
                truncated.push(format!(
                    "{} at {}-{} (the final log has {:?})",
                    r.value,
                    r.partition,
                    r.offset,
                    log.value_at(r.partition, r.offset)
                ));
            }
        }
    }
    if !truncated.is_empty() {
        v.push(format!(
            "group {group} received {} records the final log does not hold there, first: {:?}",
            truncated.len(),
            &truncated[..truncated.len().min(10)]
        ));
    }
    match committed_offsets_as(bootstrap, harness, group, TOPIC, partitions) {
        Ok(committed) => {
            let past: Vec<String> = committed
                .iter()
                .filter_map(|(p, c)| {
                    let hw = log.high_watermarks.get(p).copied().unwrap_or(0);
                    c.filter(|c| *c > hw)
                        .map(|c| format!("p{p}: committed {c}, high watermark {hw}"))
                })
                .collect();
            if !past.is_empty() {
                v.push(format!(
                    "group {group} committed offsets past the high watermark: {past:?}"
                ));
            }
        }
        Err(e) => v.push(format!("group {group}: reading committed offsets: {e:#}")),
    }
    v
}

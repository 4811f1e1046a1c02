//! Seeded random fault schedules for the soak (`faults/soak.rs`, `sluice-soak`): from a `u64`
//! seed, a [`Schedule`] of timed faults on a 3-node cluster, each healed after a random
//! duration. The same seed gives the same schedule on every machine: the generator is a
//! SplitMix64 of its own (no dependency whose stream could change between versions).
//!
//! Targets are named by role ([`Target`]: a node id, the active controller, a partition's
//! leader) and resolved when the fault is injected, since which node leads what depends on the
//! faults before it. By default at most one fault is active at a time, so a 3-node cluster with
//! replication factor 3 and `min.insync.replicas=2` always keeps a quorum and an ISR majority;
//! [`ScheduleOptions::overlap`] lets two process faults overlap (never a partition with
//! anything, since healing a network heals all of it). [`ScheduleOptions::secure`] (a cluster
//! whose only listener is SASL_SSL) adds two security faults: a certificate rotation and a
//! SCRAM credential change; without it the generator draws exactly what it drew before.
//! [`ScheduleOptions::transactions`] (the transactional workload runs) adds three targets: the
//! transaction coordinator of one of the workload's transactional ids, the leader of a
//! partition of its input topic, and the coordinator of the consume-transform-produce stage's
//! group; without it the targets are drawn as before.

use std::fmt;
use std::time::Duration;

use super::consume_transform_produce::STAGE_GROUP;
use super::transactions::{transactional_id, TRANSACTIONAL_IDS, TXN_TOPIC};

/// The nodes a schedule's faults are drawn for (node ids `1..=NODES`).
pub const NODES: i32 = 3;

/// How a generated schedule may look.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleOptions {
    /// Faults start within this span after the schedule starts (each then lasts its duration).
    pub span: Duration,
    /// Partitions of the workload topic, for [`Target::Leader`].
    pub topic_partitions: i32,
    /// Include network partition faults ([`FaultKind::Net`]).
    pub partitions: bool,
    /// Let two process faults be active at once (on different nodes).
    pub overlap: bool,
    /// The cluster is secured (SASL_SSL only): include [`FaultKind::RotateCertificates`] and
    /// [`FaultKind::RotateScram`].
    pub secure: bool,
    /// The transactional workload runs (`--transactions`): include the targets
    /// [`Target::TxnCoordinator`], [`Target::TxnLeader`] and [`Target::StageGroupCoordinator`].
    pub transactions: bool,
}

impl Default for ScheduleOptions {
    fn default() -> Self {
        Self {
            span: Duration::from_secs(12),
            topic_partitions: 6,
            partitions: false,
            overlap: false,
            secure: false,
            transactions: false,
        }
    }
}

/// Whom a fault hits, resolved when it is injected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Node(i32),
    /// The active controller of the metadata quorum.
    Controller,
    /// The leader of this partition of the workload topic.
    Leader(i32),
    /// The transaction coordinator (the leader of its `__transaction_state` partition) of the
    /// transactional workload's transactional id number `k` ([`transactional_id`]).
    TxnCoordinator(u8),
    /// The leader of this partition of the transactional workload's input topic (`soak-tx`).
    TxnLeader(i32),
    /// The group coordinator of the consume-transform-produce stage's group, which holds the
    /// offsets its transactions commit (TxnOffsetCommit).
    StageGroupCoordinator,
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Node(id) => write!(f, "node {id}"),
            Target::Controller => write!(f, "the controller"),
            Target::Leader(p) => write!(f, "the leader of p{p}"),
            Target::TxnCoordinator(k) => write!(f, "the transaction coordinator of {}", transactional_id(*k)),
            Target::TxnLeader(p) => write!(f, "the leader of {TXN_TOPIC} p{p}"),
            Target::StageGroupCoordinator => write!(f, "the group coordinator of {STAGE_GROUP}"),
        }
    }
}

/// Which listener a [`NetFault::CutPort`] cuts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Port {
    /// The metadata quorum (controller) port.
    Quorum,
    /// The Kafka port (clients and replica fetches).
    Kafka,
}

/// A network partition fault. `other` picks one of the two nodes besides the resolved target
/// (0: the lower id, 1: the higher), so the pair is known only once the target is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetFault {
    /// The target can reach no one and no one can reach it.
    Isolate(Target),
    /// Two groups: the target alone, the other two together (2|1).
    SplitOff(Target),
    /// Every node alone (1|1|1): no quorum until healed.
    SplitAll,
    /// Packets from the target to `other` are dropped; the reverse direction still works.
    OneWay { from: Target, other: u8 },
    /// Only `port` between the target and `other` is cut.
    CutPort { a: Target, other: u8, port: Port },
}

/// What a fault does; each is undone when its duration is over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// SIGKILL; restarted after the duration.
    Kill(Target),
    /// SIGKILL and an immediate restart (duration zero): back before its session expires.
    Restart(Target),
    /// SIGSTOP; SIGCONT after the duration.
    Freeze(Target),
    /// SIGTERM (controlled shutdown); restarted after the duration.
    GracefulRestart(Target),
    /// A network partition; healed after the duration.
    Net(NetFault),
    /// Every node's keystore file replaced by a new certificate (new serial and subject) from
    /// the same CA. After the duration every node must present it to new connections, and
    /// connections made before the change must still be served.
    RotateCertificates,
    /// SCRAM credentials changed with AlterUserScramCredentials: the workload's users get a
    /// new salt and `iterations` with the same password (their clients keep logging in), the
    /// admin a new password the harness logs in with from then on. After the duration every
    /// node must hold the new credentials.
    RotateScram { iterations: u32 },
}

impl FaultKind {
    pub fn is_net(&self) -> bool {
        matches!(self, FaultKind::Net(_))
    }
    /// A certificate or credential change rather than a process or network fault.
    pub fn is_security(&self) -> bool {
        matches!(self, FaultKind::RotateCertificates | FaultKind::RotateScram { .. })
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FaultKind::Kill(t) => write!(f, "kill {t}"),
            FaultKind::Restart(t) => write!(f, "restart {t}"),
            FaultKind::Freeze(t) => write!(f, "freeze {t}"),
            FaultKind::GracefulRestart(t) => write!(f, "stop {t} (SIGTERM)"),
            FaultKind::Net(NetFault::Isolate(t)) => write!(f, "isolate {t}"),
            FaultKind::Net(NetFault::SplitOff(t)) => write!(f, "split {t} from the others"),
            FaultKind::Net(NetFault::SplitAll) => write!(f, "split every node from the others"),
            FaultKind::Net(NetFault::OneWay { from, other }) => write!(f, "drop packets from {from} to other #{other}"),
            FaultKind::Net(NetFault::CutPort { a, other, port }) => {
                write!(f, "cut the {port:?} port between {a} and other #{other}")
            }
            FaultKind::RotateCertificates => write!(f, "rotate every node's certificate"),
            FaultKind::RotateScram { iterations } => write!(
                f,
                "change SCRAM credentials (users: new salt, {iterations} iterations; admin: new password)"
            ),
        }
    }
}

/// One fault: injected at `start` (from the schedule's start), undone at `start + duration`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    pub start: Duration,
    pub duration: Duration,
    pub kind: FaultKind,
}

impl Fault {
    pub fn end(&self) -> Duration {
        self.start + self.duration
    }
}

/// Injecting or undoing fault number `fault` of a schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Inject,
    Heal,
}

/// One timed step of a schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    pub at: Duration,
    pub fault: usize,
    pub action: Action,
}

/// A seeded list of faults, in start order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    pub seed: u64,
    pub options: ScheduleOptions,
    pub faults: Vec<Fault>,
}

/// Bounds that keep a 3-node cluster with `FAST_FAILOVER` settings recoverable and the schedule
/// interesting: durations on both sides of the 3 s session and lag timeouts.
const FIRST_GAP_MS: (u64, u64) = (300, 1500);
const GAP_MS: (u64, u64) = (300, 2500);
const DOWN_MS: (u64, u64) = (500, 6000);
const NET_MS: (u64, u64) = (1000, 6000);
/// How long a certificate or credential change has to reach every node before it is checked:
/// above the secured cluster's 500 ms `ssl.reload.check.interval.ms`.
const ROTATION_MS: (u64, u64) = (1000, 3000);
/// Iteration counts a SCRAM change draws: within Kafka's bounds (4096-16384), kept low enough
/// that a login's PBKDF2 stays a few milliseconds.
const SCRAM_ITERATIONS: (u64, u64) = (4096, 10000);
/// In overlap mode, the chance that the next fault starts while this one is still active.
const OVERLAP_PERCENT: u64 = 40;

/// SplitMix64 (Steele, Lea, Flood 2014): tiny, fast, and fully determined by its seed.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `lo..=hi` (the modulo bias is irrelevant at these ranges).
    fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }
    fn millis(&mut self, (lo, hi): (u64, u64)) -> Duration {
        Duration::from_millis(self.between(lo, hi))
    }
    fn percent(&mut self, p: u64) -> bool {
        self.between(0, 99) < p
    }
}

impl Schedule {
    /// The schedule for `seed`: faults starting one after another (a random gap after each one
    /// ends, or with `overlap` sometimes before) until `options.span` is used up; at least one.
    pub fn generate(seed: u64, options: ScheduleOptions) -> Schedule {
        let mut rng = SplitMix64(seed);
        let mut faults: Vec<Fault> = Vec::new();
        let mut start = rng.millis(FIRST_GAP_MS);
        // Whether the last fault started inside the one before it: then the next may not, so
        // never more than two are active at once.
        let mut overlapped = false;
        while faults.is_empty() || start < options.span {
            let kind = random_kind(&mut rng, &options);
            let duration = match kind {
                FaultKind::Restart(_) => Duration::ZERO,
                FaultKind::Net(_) => rng.millis(NET_MS),
                FaultKind::RotateCertificates | FaultKind::RotateScram { .. } => rng.millis(ROTATION_MS),
                _ => rng.millis(DOWN_MS),
            };
            let fault = Fault { start, duration, kind };
            let overlapping = options.overlap
                && !overlapped
                && !kind.is_net()
                && duration > Duration::ZERO
                && rng.percent(OVERLAP_PERCENT);
            overlapped = overlapping;
            start = if overlapping {
                // The next fault starts while this one is active.
                start + Duration::from_millis(rng.between(0, duration.as_millis() as u64))
            } else {
                latest_end(&faults, fault.end()) + rng.millis(GAP_MS)
            };
            faults.push(fault);
        }
        if options.overlap {
            separate_net_faults(&mut faults);
        }
        Schedule { seed, options, faults }
    }

    /// Every inject and heal in time order; on a tie, heals first, except that an immediate
    /// restart's heal comes after its inject.
    pub fn steps(&self) -> Vec<Step> {
        let mut steps: Vec<Step> = self
            .faults
            .iter()
            .enumerate()
            .flat_map(|(i, f)| {
                [
                    Step {
                        at: f.start,
                        fault: i,
                        action: Action::Inject,
                    },
                    Step {
                        at: f.end(),
                        fault: i,
                        action: Action::Heal,
                    },
                ]
            })
            .collect();
        let rank = |s: &Step| match s.action {
            Action::Heal if self.faults[s.fault].duration > Duration::ZERO => 0,
            Action::Inject => 1,
            Action::Heal => 2,
        };
        steps.sort_by_key(|s| (s.at, rank(s), s.fault));
        steps
    }

    /// When the last fault is undone.
    pub fn end(&self) -> Duration {
        self.faults.iter().map(Fault::end).max().unwrap_or_default()
    }

    /// One line: the faults in order with their durations.
    pub fn summary(&self) -> String {
        self.faults
            .iter()
            .map(|f| match f.kind {
                FaultKind::Restart(_) => f.kind.to_string(),
                _ => format!("{} {:.1}s", f.kind, f.duration.as_secs_f64()),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The latest end among `faults` and `end`.
fn latest_end(faults: &[Fault], end: Duration) -> Duration {
    faults.iter().map(Fault::end).fold(end, Duration::max)
}

/// With overlap, a process fault may have been scheduled to start inside the previous one; a
/// network fault must not overlap anything (healing the network heals all of it), so it and
/// everything after it move later until it stands alone.
fn separate_net_faults(faults: &mut [Fault]) {
    for i in 1..faults.len() {
        let prev_end = latest_end(&faults[..i], Duration::ZERO);
        let needs_gap = faults[i].kind.is_net() || faults[i - 1].kind.is_net();
        if needs_gap && faults[i].start <= prev_end {
            let shift = prev_end + Duration::from_millis(GAP_MS.0) - faults[i].start;
            for f in &mut faults[i..] {
                f.start += shift;
            }
        }
    }
}

/// A node, the controller or a leader; with `transactions` also a transaction coordinator, a
/// leader of the transactional topic or the stage's group coordinator (half the draws). Without
/// `transactions` the draws are the ones made before those targets existed.
fn random_target(rng: &mut SplitMix64, options: &ScheduleOptions) -> Target {
    let roles = if options.transactions { 6 } else { 3 };
    let partition = |rng: &mut SplitMix64| rng.between(0, options.topic_partitions.max(1) as u64 - 1) as i32;
    match rng.between(0, roles - 1) {
        0 => Target::Node(rng.between(1, NODES as u64) as i32),
        1 => Target::Controller,
        2 => Target::Leader(partition(rng)),
        3 => Target::TxnCoordinator(rng.between(0, TRANSACTIONAL_IDS as u64 - 1) as u8),
        4 => Target::TxnLeader(partition(rng)),
        _ => Target::StageGroupCoordinator,
    }
}

/// Draws a fault: four process kinds, then a network partition with `partitions`, then the
/// two security faults with `secure`. Without `secure` the draws are the ones made before the
/// security faults existed, so old seeds replay unchanged.
fn random_kind(rng: &mut SplitMix64, options: &ScheduleOptions) -> FaultKind {
    let net_kinds = u64::from(options.partitions);
    let kinds = 4 + net_kinds + 2 * u64::from(options.secure);
    let target = random_target(rng, options);
    match rng.between(0, kinds - 1) {
        0 => FaultKind::Kill(target),
        1 => FaultKind::Restart(target),
        2 => FaultKind::Freeze(target),
        3 => FaultKind::GracefulRestart(target),
        k if k == 4 + net_kinds => FaultKind::RotateCertificates,
        k if k == 5 + net_kinds => FaultKind::RotateScram {
            iterations: rng.between(SCRAM_ITERATIONS.0, SCRAM_ITERATIONS.1) as u32,
        },
        _ => FaultKind::Net(match rng.between(0, 4) {
            0 => NetFault::Isolate(target),
            1 => NetFault::SplitOff(target),
            2 => NetFault::SplitAll,
            3 => NetFault::OneWay {
                from: target,
                other: rng.between(0, 1) as u8,
            },
            _ => NetFault::CutPort {
                a: target,
                other: rng.between(0, 1) as u8,
                port: if rng.percent(50) { Port::Quorum } else { Port::Kafka },
            },
        }),
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "schedule seed {} ({} faults over {:.1} s{}{}{}{}):",
            self.seed,
            self.faults.len(),
            self.end().as_secs_f64(),
            if self.options.partitions {
                ", with partitions"
            } else {
                ""
            },
            if self.options.overlap { ", overlapping" } else { "" },
            if self.options.secure { ", secured" } else { "" },
            if self.options.transactions {
                ", with transactions"
            } else {
                ""
            },
        )?;
        for step in self.steps() {
            let fault = &self.faults[step.fault];
            let what = match (step.action, fault.kind) {
                (Action::Inject, kind) => kind.to_string(),
                (Action::Heal, FaultKind::Kill(_) | FaultKind::Restart(_) | FaultKind::GracefulRestart(_)) => {
                    "restart it".to_string()
                }
                (Action::Heal, FaultKind::Freeze(_)) => "thaw it (SIGCONT)".to_string(),
                (Action::Heal, FaultKind::Net(_)) => "heal the network".to_string(),
                (Action::Heal, FaultKind::RotateCertificates) => {
                    "check every node serves the new certificate".to_string()
                }
                (Action::Heal, FaultKind::RotateScram { .. }) => {
                    "check every node holds the new credentials".to_string()
                }
            };
            writeln!(f, "  +{:>6.2}s  #{:<2} {what}", step.at.as_secs_f64(), step.fault + 1)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(partitions: bool, overlap: bool) -> ScheduleOptions {
        ScheduleOptions {
            partitions,
            overlap,
            ..ScheduleOptions::default()
        }
    }

    fn secure(partitions: bool, overlap: bool) -> ScheduleOptions {
        ScheduleOptions {
            secure: true,
            ..options(partitions, overlap)
        }
    }

    /// The most faults active at once while the steps run in order, and how many are active at
    /// the end; also fails if a fault is healed before it was injected.
    fn replay(s: &Schedule) -> (usize, usize, bool) {
        let mut active = vec![false; s.faults.len()];
        let (mut most, mut net_with_other) = (0, false);
        for step in s.steps() {
            match step.action {
                Action::Inject => {
                    assert!(!active[step.fault], "seed {}: #{} injected twice", s.seed, step.fault);
                    active[step.fault] = true;
                }
                Action::Heal => {
                    assert!(
                        active[step.fault],
                        "seed {}: #{} healed before injected",
                        s.seed, step.fault
                    );
                    active[step.fault] = false;
                }
            }
            let now: Vec<usize> = (0..active.len()).filter(|i| active[*i]).collect();
            most = most.max(now.len());
            net_with_other |= now.len() > 1 && now.iter().any(|i| s.faults[*i].kind.is_net());
        }
        (most, active.iter().filter(|a| **a).count(), net_with_other)
    }

    #[test]
    fn the_same_seed_gives_the_same_schedule_and_another_seed_another() {
        for seed in [0, 1, 42, u64::MAX] {
            let a = Schedule::generate(seed, options(true, true));
            let b = Schedule::generate(seed, options(true, true));
            assert_eq!(a, b);
            assert_eq!(a.to_string(), b.to_string());
        }
        assert_ne!(
            Schedule::generate(1, ScheduleOptions::default()).faults,
            Schedule::generate(2, ScheduleOptions::default()).faults
        );
    }

    #[test]
    fn seed_42_gives_this_schedule_on_every_machine() {
        // Pins the generator's output: a change here replays old seeds differently.
        let s = Schedule::generate(42, ScheduleOptions::default());
        assert_eq!(SplitMix64(42).next_u64(), 0xbdd7_3226_2feb_6e95);
        assert_eq!(s, Schedule::generate(42, ScheduleOptions::default()));
        assert!(!s.faults.is_empty());
        assert_eq!(
            s.faults[0].start,
            Duration::from_millis(300 + 0xbdd7_3226_2feb_6e95 % 1201)
        );
    }

    #[test]
    fn without_overlap_one_fault_at_a_time_and_every_fault_healed() {
        for seed in 0..2000 {
            for partitions in [false, true] {
                let s = Schedule::generate(seed, options(partitions, false));
                let (most, left, _) = replay(&s);
                assert_eq!(most, 1, "seed {seed}:\n{s}");
                assert_eq!(left, 0, "seed {seed}:\n{s}");
                assert!(!s.faults.is_empty());
                assert!(s.faults.iter().all(|f| f.start < s.options.span), "seed {seed}:\n{s}");
                assert!(
                    partitions || !s.faults.iter().any(|f| f.kind.is_net()),
                    "seed {seed}:\n{s}"
                );
            }
        }
    }

    #[test]
    fn with_overlap_at_most_two_at_a_time_never_a_partition_with_another_fault() {
        let mut overlapped = 0;
        for seed in 0..2000 {
            let s = Schedule::generate(seed, options(true, true));
            let (most, left, net_with_other) = replay(&s);
            assert!(most <= 2, "seed {seed}: {most} faults at once:\n{s}");
            assert_eq!(left, 0, "seed {seed}:\n{s}");
            assert!(!net_with_other, "seed {seed}:\n{s}");
            overlapped += usize::from(most == 2);
        }
        assert!(overlapped > 100, "only {overlapped} of 2000 schedules overlap faults");
    }

    #[test]
    fn durations_stay_in_bounds_and_every_kind_and_target_occurs() {
        let mut seen = std::collections::BTreeSet::new();
        for seed in 0..500 {
            let s = Schedule::generate(seed, options(true, false));
            for f in &s.faults {
                let ms = f.duration.as_millis() as u64;
                let (kind, ok) = match f.kind {
                    FaultKind::Restart(_) => ("restart", ms == 0),
                    FaultKind::Net(_) => ("net", (NET_MS.0..=NET_MS.1).contains(&ms)),
                    FaultKind::Kill(_) => ("kill", (DOWN_MS.0..=DOWN_MS.1).contains(&ms)),
                    FaultKind::Freeze(_) => ("freeze", (DOWN_MS.0..=DOWN_MS.1).contains(&ms)),
                    FaultKind::GracefulRestart(_) => ("graceful", (DOWN_MS.0..=DOWN_MS.1).contains(&ms)),
                    k => panic!("seed {seed}: {k} drawn without secure"),
                };
                assert!(ok, "seed {seed}: {} lasts {ms} ms", f.kind);
                seen.insert(kind);
                if let FaultKind::Kill(t) = f.kind {
                    seen.insert(match t {
                        Target::Node(id) if (1..=NODES).contains(&id) => "node",
                        Target::Controller => "controller",
                        Target::Leader(p) if (0..s.options.topic_partitions).contains(&p) => "leader",
                        t => panic!("seed {seed}: target {t:?} out of range"),
                    });
                }
            }
        }
        assert_eq!(seen.len(), 8, "{seen:?}");
    }

    #[test]
    fn secure_adds_certificate_rotations_and_scram_changes_and_leaves_the_rest_as_it_was() {
        let (mut rotations, mut scram) = (0, 0);
        for seed in 0..500 {
            for (partitions, overlap) in [(false, false), (true, false), (true, true)] {
                let s = Schedule::generate(seed, secure(partitions, overlap));
                let (most, left, net_with_other) = replay(&s);
                assert!(most <= if overlap { 2 } else { 1 }, "seed {seed}:\n{s}");
                assert_eq!(left, 0, "seed {seed}:\n{s}");
                assert!(!net_with_other, "seed {seed}:\n{s}");
                for f in &s.faults {
                    let ms = f.duration.as_millis() as u64;
                    match f.kind {
                        FaultKind::RotateCertificates => rotations += 1,
                        FaultKind::RotateScram { iterations } => {
                            scram += 1;
                            let n = u64::from(iterations);
                            assert!((SCRAM_ITERATIONS.0..=SCRAM_ITERATIONS.1).contains(&n), "{n}");
                        }
                        _ => continue,
                    }
                    assert!(
                        (ROTATION_MS.0..=ROTATION_MS.1).contains(&ms),
                        "seed {seed}: {} {ms} ms",
                        f.kind
                    );
                }
            }
            // Without --secure, the same seed gives what it always gave.
            let plain = Schedule::generate(seed, options(true, false));
            assert!(
                !plain.faults.iter().any(|f| f.kind.is_security()),
                "seed {seed}:\n{plain}"
            );
        }
        assert!(
            rotations > 200 && scram > 200,
            "{rotations} rotations, {scram} SCRAM changes"
        );
    }

    #[test]
    fn transactions_add_the_transactional_targets_and_leave_the_rest_as_it_was() {
        let mut seen = std::collections::BTreeSet::new();
        for seed in 0..500 {
            let with = Schedule::generate(
                seed,
                ScheduleOptions {
                    transactions: true,
                    ..options(false, false)
                },
            );
            let (most, left, _) = replay(&with);
            assert_eq!((most, left), (1, 0), "seed {seed}:\n{with}");
            for f in &with.faults {
                if let FaultKind::Kill(t)
                | FaultKind::Restart(t)
                | FaultKind::Freeze(t)
                | FaultKind::GracefulRestart(t) = f.kind
                {
                    seen.insert(match t {
                        Target::TxnCoordinator(k) if usize::from(k) < TRANSACTIONAL_IDS => "coordinator",
                        Target::TxnLeader(p) if (0..with.options.topic_partitions).contains(&p) => "txn leader",
                        Target::StageGroupCoordinator => "group coordinator",
                        Target::Node(_) | Target::Controller | Target::Leader(_) => "other",
                        t => panic!("seed {seed}: target {t:?} out of range"),
                    });
                }
            }
            let without = Schedule::generate(seed, options(false, false));
            assert!(
                without.faults.iter().all(|f| !f.kind.to_string().contains("soak-tx")),
                "seed {seed}:\n{without}"
            );
        }
        assert_eq!(seen.len(), 4, "{seen:?}");
    }

    #[test]
    fn display_lists_each_inject_and_heal_in_time_order() {
        let s = Schedule {
            seed: 7,
            options: ScheduleOptions::default(),
            faults: vec![
                Fault {
                    start: Duration::from_millis(500),
                    duration: Duration::from_millis(2500),
                    kind: FaultKind::Kill(Target::Leader(2)),
                },
                Fault {
                    start: Duration::from_millis(4000),
                    duration: Duration::ZERO,
                    kind: FaultKind::Restart(Target::Controller),
                },
            ],
        };
        let text = s.to_string();
        assert_eq!(
            text,
            "schedule seed 7 (2 faults over 4.0 s):\n\
             \x20 +  0.50s  #1  kill the leader of p2\n\
             \x20 +  3.00s  #1  restart it\n\
             \x20 +  4.00s  #2  restart the controller\n\
             \x20 +  4.00s  #2  restart it\n"
        );
        assert_eq!(s.summary(), "kill the leader of p2 2.5s, restart the controller");
    }
}

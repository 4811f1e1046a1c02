//! The soak's code path in CI: three fixed seeds (`faults::soak::run_schedule`, as
//! `scripts/soak.sh` runs them), each a fresh 3-node cluster with the acks=all workload and two
//! consumer groups under a seeded schedule of kills, restarts, freezes and graceful restarts.
//! Each must inject faults, lose no acknowledged record and violate no invariant. One more seed
//! runs secured (`--secure`): SASL_SSL only, the workload's clients each their own SCRAM user
//! with its ACLs, under a SCRAM credential change, a certificate rotation and a controlled
//! restart. One runs the transactional workload and its copy stage too (`--transactions`)
//! and must show no anomaly. The spans are short to fit CI; `scripts/soak.sh --schedules N`
//! runs many longer ones (docs/soak.md). The nodes' log tails are in a failed schedule's
//! outcome, so the clusters do not print them when dropped: a failure's message comes first.

use std::time::Duration;

use anyhow::{ensure, Result};
use sluice_integration_tests::faults::schedule::FaultKind;
use sluice_integration_tests::faults::{run_schedule, ScheduleOptions, SoakOptions};

/// Seeds whose 6 s schedules together hit every process fault kind and every kind of target:
/// 11 restarts the controller, kills a leader, then kills the controller; 21 restarts three
/// leaders and the controller in quick succession (each back before its session expires), then
/// freezes a leader; 29 stops the controller (SIGTERM), kills a leader, freezes node 1. Replay
/// one with `scripts/soak.sh --schedules 1 --seed <seed> --duration-s 6`.
const SEEDS: [u64; 3] = [11, 21, 29];

#[test]
fn fixed_seed_schedules_inject_faults_and_lose_no_acknowledged_record() -> Result<()> {
    let options = SoakOptions {
        schedule: ScheduleOptions {
            span: Duration::from_secs(6),
            ..ScheduleOptions::default()
        },
        ..SoakOptions::default()
    };
    let mut failures = Vec::new();
    for seed in SEEDS {
        let outcome = run_schedule(seed, &options);
        eprintln!("{}\n{}", outcome.line(), outcome.schedule);
        if outcome.injected == 0 || outcome.acknowledged == 0 || !outcome.passed() {
            failures.push(format!("{}\n{}", outcome.line(), outcome.details()));
        }
    }
    ensure!(
        failures.is_empty(),
        "{} of {} schedules failed:\n{}",
        failures.len(),
        SEEDS.len(),
        failures.join("\n")
    );
    Ok(())
}

/// Seed 5's secured 6 s schedule: change the SCRAM credentials (the workload's users to a new
/// salt and iteration count, the admin to a new password), rotate every node's certificate,
/// then stop the controller with SIGTERM and restart it, which the harness must reach with the
/// new certificates and the admin's new password. Replay it with
/// `scripts/soak.sh --schedules 1 --seed 5 --duration-s 6 --secure`.
const SECURE_SEED: u64 = 5;

#[test]
fn a_fixed_secure_seed_changes_credentials_and_certificates_and_loses_no_acknowledged_record() -> Result<()> {
    let options = SoakOptions {
        schedule: ScheduleOptions {
            span: Duration::from_secs(6),
            secure: true,
            ..ScheduleOptions::default()
        },
        ..SoakOptions::default()
    };
    let outcome = run_schedule(SECURE_SEED, &options);
    eprintln!("{}\n{}", outcome.line(), outcome.schedule);
    let kinds: Vec<FaultKind> = outcome.schedule.faults.iter().map(|f| f.kind).collect();
    ensure!(
        kinds.iter().any(|k| matches!(k, FaultKind::RotateScram { .. }))
            && kinds.contains(&FaultKind::RotateCertificates)
            && kinds.iter().any(|k| matches!(k, FaultKind::GracefulRestart(_))),
        "seed {SECURE_SEED} no longer draws a SCRAM change, a certificate rotation and a graceful restart: {}",
        outcome.schedule
    );
    ensure!(
        outcome.injected == kinds.len() && outcome.acknowledged > 0 && outcome.passed(),
        "{}\n{}",
        outcome.line(),
        outcome.details()
    );
    let rotations = kinds.iter().filter(|k| **k == FaultKind::RotateCertificates).count();
    let changes = kinds
        .iter()
        .filter(|k| matches!(k, FaultKind::RotateScram { .. }))
        .count();
    ensure!(
        outcome.certificate_checks == rotations && outcome.scram_checks == changes,
        "checks passed: {} of {rotations} certificate rotations, {} of {changes} SCRAM changes\n{}",
        outcome.certificate_checks,
        outcome.scram_checks,
        outcome.details()
    );
    Ok(())
}

/// Seed 47's 6 s schedule with the transactional workload and its consume-transform-produce
/// stage (`--transactions`): the stage's group coordinator killed for a second, the
/// transaction coordinator of the stage's `soak-tx-copier-1` killed and restarted at once, then
/// a leader frozen, while transactions are committed and aborted (the producers' seeded choices
/// abort early: their first transactions are aborts). Then read back with read_committed with
/// no anomaly (lost write, duplicate, aborted read, torn transaction, order, unexplained
/// record), and the stage's copy likewise (and no G1c cycle). On a loaded machine six seconds
/// may end only one transaction, so the workload runs on after healing until it has committed
/// and aborted one and the stage has committed one (`TXN_OUTCOMES_TIMEOUT`). Replay it with
/// `scripts/soak.sh --schedules 1 --seed 47 --duration-s 6 --transactions`.
const TRANSACTIONS_SEED: u64 = 47;

#[test]
fn a_fixed_seed_with_transactions_shows_no_anomaly() -> Result<()> {
    let options = SoakOptions {
        schedule: ScheduleOptions {
            span: Duration::from_secs(6),
            transactions: true,
            ..ScheduleOptions::default()
        },
        ..SoakOptions::default()
    };
    let outcome = run_schedule(TRANSACTIONS_SEED, &options);
    eprintln!("{}\n{}", outcome.line(), outcome.schedule);
    let txn = outcome.txn.unwrap_or_default();
    ensure!(
        outcome.injected > 0 && txn.committed > 0 && txn.aborted > 0 && txn.stage.committed > 0 && outcome.passed(),
        "{}\n{}",
        outcome.line(),
        outcome.details()
    );
    Ok(())
}

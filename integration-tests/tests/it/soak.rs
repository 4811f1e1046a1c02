//! The soak's code path in CI: three fixed seeds (`faults::soak::run_schedule`, as
//! `scripts/soak.sh` runs them), each a fresh 3-node cluster with the acks=all workload and two
//! consumer groups under a seeded schedule of kills, restarts, freezes and graceful restarts.
//! Each must inject faults, lose no acknowledged record and violate no invariant. The spans are
//! short to fit CI; `scripts/soak.sh --schedules N` runs many longer ones (docs/soak.md).

use std::time::Duration;

use anyhow::{ensure, Result};
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
        report_on_drop: true,
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

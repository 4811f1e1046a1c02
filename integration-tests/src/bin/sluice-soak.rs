//! The soak: N seeded random fault schedules, one after another, each on a fresh 3-node cluster
//! with the recorded acks=all workload and two consumer groups (`faults::soak`), the invariants
//! checked after each. Prints one line per schedule, the full schedule and what went wrong for a
//! failed one with the command that replays it, and last
//! `soak: N schedules, A acknowledged, L lost, V invariant violations`. Exits 1 if L or V > 0.
//!
//! Usage: sluice-soak --schedules N [--seed S] [--duration-s D] [--rate MSGS_PER_S]
//!                    [--partitions] [--overlap] [--secure] [--transactions]
//! Schedule i uses seed S+i; S defaults to the clock (printed). `--duration-s` is the span in
//! which faults start (default 12); `--partitions` adds network partition faults (needs the
//! partitionable cluster); `--overlap` lets two process faults overlap; `--secure` runs every
//! schedule on a SASL_SSL-only cluster (SCRAM users, ACLs, a test CA) and adds certificate
//! rotations and SCRAM credential changes to the faults; `--transactions` adds transactional
//! producers committing and aborting at random and a consume-transform-produce stage copying
//! their topic in transactions, aims faults at their coordinators and leaders, and checks
//! Jepsen's anomalies for both (`faults::transactions`, `faults::consume_transform_produce`),
//! reported per schedule and in the last line (with `--secure` too). Run it through
//! `scripts/soak.sh`, which builds the release binaries first (see docs/soak.md).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, ensure, Context, Result};
use sluice_integration_tests::faults::{run_schedule, ScheduleOptions, SoakOptions};

struct Args {
    schedules: u64,
    seed: Option<u64>,
    options: SoakOptions,
}

fn parse_args() -> Result<Args> {
    let mut schedules = None;
    let mut seed = None;
    let mut options = SoakOptions {
        schedule: ScheduleOptions::default(),
        ..SoakOptions::default()
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--schedules" => schedules = Some(val()?.parse().context("--schedules expects a count")?),
            "--seed" => seed = Some(val()?.parse().context("--seed expects an unsigned 64-bit number")?),
            "--duration-s" => {
                let s: f64 = val()?.parse().context("--duration-s expects seconds")?;
                ensure!(
                    s > 0.0 && s <= 3600.0,
                    "--duration-s must be between 0 and 3600 seconds"
                );
                options.schedule.span = Duration::from_secs_f64(s);
            }
            "--rate" => options.rate_per_s = val()?.parse().context("--rate expects records per second")?,
            "--partitions" => options.schedule.partitions = true,
            "--overlap" => options.schedule.overlap = true,
            "--secure" => options.schedule.secure = true,
            "--transactions" => options.schedule.transactions = true,
            "-h" | "--help" => {
                println!("see the header of integration-tests/src/bin/sluice-soak.rs and docs/soak.md");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other}: see docs/soak.md"),
        }
    }
    let schedules = schedules.context("--schedules N is required: how many schedules to run")?;
    ensure!(schedules >= 1, "--schedules must be at least 1");
    ensure!(options.rate_per_s >= 1, "--rate must be at least 1");
    Ok(Args {
        schedules,
        seed,
        options,
    })
}

fn main() -> Result<()> {
    let args = parse_args()?;
    let first = args.seed.unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or_default()
    });
    let mut flags = String::new();
    if args.options.schedule.partitions {
        flags.push_str(" --partitions");
    }
    if args.options.schedule.overlap {
        flags.push_str(" --overlap");
    }
    if args.options.schedule.secure {
        flags.push_str(" --secure");
    }
    if args.options.schedule.transactions {
        flags.push_str(" --transactions");
    }
    let span = args.options.schedule.span.as_secs_f64();
    flags.push_str(&format!(" --duration-s {span}"));
    println!(
        "soak: {} schedules from seed {first} ({span} s of faults each, {} records/s){flags}",
        args.schedules, args.options.rate_per_s
    );
    let (mut acknowledged, mut lost, mut violations) = (0u64, 0u64, 0u64);
    let mut txn = sluice_integration_tests::faults::transactions::TxnReport::default();
    let mut failed = Vec::new();
    for i in 0..args.schedules {
        let seed = first.wrapping_add(i);
        let outcome = run_schedule(seed, &args.options);
        println!("[{}/{}] {}", i + 1, args.schedules, outcome.line());
        acknowledged += outcome.acknowledged;
        lost += outcome.lost;
        violations += outcome.violations.len() as u64;
        if let Some(t) = &outcome.txn {
            txn.add(t);
        }
        if !outcome.passed() {
            println!("{}", outcome.details());
            println!("replay: scripts/soak.sh --schedules 1 --seed {seed}{flags}");
            failed.push(seed);
        }
    }
    if !failed.is_empty() {
        println!("failed seeds: {failed:?}");
    }
    let txn_line = match args.options.schedule.transactions {
        true => format!("; {}", txn.line()),
        false => String::new(),
    };
    println!(
        "soak: {} schedules, {acknowledged} acknowledged, {lost} lost, {violations} invariant violations{txn_line}",
        args.schedules
    );
    if lost > 0 || violations > 0 || txn.anomalies() > 0 {
        std::process::exit(1);
    }
    Ok(())
}

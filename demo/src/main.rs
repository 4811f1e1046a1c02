//! `sluice-demo`: the seed workload's programs, one subcommand each, and `run`, which starts
//! a local cluster and all of them. See `demo/README.md`.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use sluice_demo::{acls, analytics, producer, run, shutdown, sink};

#[derive(Parser)]
#[command(
    name = "sluice-demo",
    version,
    about = "The seed workload for Sluice: an order producer, an exactly-once SQLite sink and real-time analytics"
)]
struct Cli {
    #[command(subcommand)]
    command: Program,
}

#[derive(Subcommand)]
enum Program {
    /// Produce orders (idempotent, acks=all, keyed by customer) at a steady rate.
    Producer(producer::ProducerArgs),
    /// Write every order into a SQLite table exactly once (group `orders-sink`).
    Sink(sink::SinkArgs),
    /// Count orders and revenue per minute and serve them at GET /stats (group `analytics`).
    Analytics(analytics::AnalyticsArgs),
    /// Start a local 3-node cluster and all three programs, and print a summary every 2 s.
    Run(run::RunArgs),
    /// Grant the producer's, the sink's and analytics' users what each needs, as an administrator.
    Acls(acls::AclsArgs),
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let cli = Cli::parse();
    let result = shutdown::stop_flag().and_then(|stop| match &cli.command {
        Program::Producer(args) => producer::run(args, &stop),
        Program::Sink(args) => sink::run(args, &stop),
        Program::Analytics(args) => analytics::run(args, &stop),
        Program::Run(args) => run::run(args, &stop),
        Program::Acls(args) => acls::run(args),
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

//! The operator's client: `sluice topic | group | cluster | completion`, commands that talk to a
//! running cluster (Sluice or Apache Kafka) over the Kafka protocol, so that one binary runs
//! a cluster and inspects it with nothing else installed.
//!
//! Each command is a short async function that sends requests through [`client::Client`]
//! (bootstrap, then the broker that owns what is asked: a partition's leader, a group's
//! coordinator) and returns an [`output::Report`], printed as aligned tables for people or as
//! JSON (`--format json`) for scripts. Requests use fixed versions that Kafka 4.x and Sluice
//! both serve. A failure is a [`CliError`], printed as one sentence naming the broker and the
//! Kafka error, with exit status 1.

use std::process::ExitCode;
use std::time::Duration;

pub use crate::config::client::{ClientArgs, ClientCommand, ClusterCommand, Format, GroupCommand, TopicCommand};

pub mod client;
mod cluster;
mod group;
pub mod output;
mod topic;

use client::Client;
use output::Report;

pub use client::CliError;

/// Runs a client command and prints its report; the exit status says whether it worked
/// (and, for `cluster health`, whether the cluster is healthy).
pub fn run(command: &ClientCommand) -> ExitCode {
    let args = command.args();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(execute(args, command)) {
        Ok(report) => {
            print!("{}", report.render(args.format));
            if report.healthy {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn execute(args: &ClientArgs, command: &ClientCommand) -> Result<Report, CliError> {
    let mut client = Client::connect(args, Duration::from_millis(args.timeout_ms)).await?;
    match command {
        ClientCommand::Topic { command, .. } => topic::run(&mut client, command).await,
        ClientCommand::Cluster { command, .. } => cluster::run(&mut client, command).await,
        ClientCommand::Group { command, .. } => group::run(&mut client, command).await,
    }
}

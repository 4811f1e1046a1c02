//! The operator's client: `sluice topic | group | cluster | produce | consume`, commands that talk to a
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

pub use crate::config::client::{
    ClientArgs, ClientCommand, ClusterCommand, ClusterConfigCommand, ConsumeArgs, Format, GroupCommand, OutputFormat,
    PartitionCommand, ProduceArgs, ResetOffsetsArgs, TopicCommand,
};

pub mod client;
mod cluster;
mod consume;
mod group;
pub mod output;
mod partition;
mod produce;
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
    let outcome = runtime.block_on(execute(args, command));
    // The stdin reader of `produce` may still wait for a line; it must not hold the exit.
    runtime.shutdown_background();
    match outcome {
        Ok(None) => ExitCode::SUCCESS,
        Ok(Some((report, format))) => {
            print!("{}", report.render(format));
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

/// The command's report and how to print it, or `None` when it printed as it went
/// (`produce`, `consume`).
async fn execute(args: &ClientArgs, command: &ClientCommand) -> Result<Option<(Report, Format)>, CliError> {
    let report_format = match &args.format {
        OutputFormat::Report(format) => *format,
        OutputFormat::Template(_) if matches!(command, ClientCommand::Consume { .. }) => Format::Table,
        OutputFormat::Template(_) => {
            return Err(CliError::Usage(
                "a --format template applies to `sluice consume` only; use table or json".into(),
            ))
        }
    };
    let mut client = Client::connect(args, Duration::from_millis(args.timeout_ms)).await?;
    let report = match command {
        ClientCommand::Topic { command, .. } => topic::run(&mut client, command).await?,
        ClientCommand::Cluster { command, .. } => cluster::run(&mut client, command).await?,
        ClientCommand::Group { command, .. } => group::run(&mut client, command).await?,
        ClientCommand::Partition { command, .. } => partition::run(&mut client, command).await?,
        ClientCommand::Produce { produce, .. } => {
            produce::run(&mut client, produce, report_format).await?;
            return Ok(None);
        }
        ClientCommand::Consume { consume, .. } => {
            consume::run(&mut client, consume, &args.format).await?;
            return Ok(None);
        }
    };
    Ok(Some((report, report_format)))
}

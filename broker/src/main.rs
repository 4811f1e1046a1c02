//! The `sluice` binary: parse flags, open the broker, serve until SIGINT/SIGTERM.
//!
//! `sluice settings` prints every `--set` name with its default and meaning; `sluice plan` runs
//! the capacity planner. Otherwise it raises the soft open-files limit to the hard one (the
//! open-files budget divides it), binds every listener (and `metrics.listen`), and logs to
//! stderr, filtered by `RUST_LOG`, in colour only at a terminal without `NO_COLOR`.
//!
//! The node stops on SIGINT/SIGTERM, on a broken invariant (`invariant::stop_requested`), or
//! when its metadata quorum member stops on its own (storage failure, a refused entry, a
//! panic): it would otherwise serve metadata that no longer changes. The first two commit a
//! controlled shutdown first, so leadership moves to other replicas; the last two exit non-zero.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use sluice_broker::broker::Broker;
use sluice_broker::config::open_files::OpenFilesBudget;
use sluice_broker::config::{settings_table, BrokerConfig, Cli, Command};
use sluice_broker::server;
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;

/// After a fatal error, how long blocking work (log cleaner, checkpoint writes) may finish
/// before the process exits anyway.
const FAILURE_EXIT_GRACE: Duration = Duration::from_secs(5);

fn main() -> ExitCode {
    let cli = Cli::from_env_args();
    if let Some(command) = &cli.command {
        return match command {
            Command::Settings => {
                print!("{}", settings_table());
                ExitCode::SUCCESS
            }
            Command::Plan(args) => sluice_broker::plan::run(args),
            Command::Client(command) => sluice_broker::cli::run(command),
            Command::Completion { shell } => {
                use clap::CommandFactory;
                clap_complete::generate(*shell, &mut Cli::command(), "sluice", &mut std::io::stdout());
                ExitCode::SUCCESS
            }
        };
    }
    // Colour codes only for a person at a terminal (https://no-color.org: any non-empty NO_COLOR).
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info,raft=warn".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(colour)
        .init();
    let mut config = match BrokerConfig::from_cli(&cli) {
        Ok(config) => config,
        Err(e) => {
            tracing::error!("{e}");
            return ExitCode::from(2);
        }
    };
    if let Some(source) = &config.cluster_secret_source {
        tracing::info!("the metadata quorum's members authenticate with the cluster secret from {source}");
    }
    config.open_files_limit = raise_open_files_limit();
    let budget = OpenFilesBudget::of(&config);
    if budget.is_short() {
        tracing::warn!(
            "{}; the reserve leaves too few files for the partition logs, so they may run out of descriptors: raise the open-files limit (ulimit -n) or lower max.connections",
            budget.describe()
        );
    } else {
        tracing::info!("{}", budget.describe());
    }
    limit_malloc_arenas();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!("cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            tracing::error!("{message}");
            runtime.shutdown_timeout(FAILURE_EXIT_GRACE);
            ExitCode::FAILURE
        }
    }
}

/// Segment files stay open as far as the open-files limit allows (`config::open_files`); under
/// the usual soft limit of 1024 a few hundred partitions would already be reopening theirs. As
/// Kafka's packagings do with `ulimit`, take the hard limit. Returns the limit in force
/// (`None`: unlimited or unknown), which the open-files budget divides between the segment
/// files and everything else.
fn raise_open_files_limit() -> Option<u64> {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    let (soft, hard) = (limit.current?, limit.maximum);
    let Some(hard) = hard else {
        return Some(soft);
    };
    if soft < hard {
        if let Err(e) = setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(hard),
                maximum: Some(hard),
            },
        ) {
            tracing::warn!(soft, hard, error = %e, "could not raise the open-files limit to the hard limit");
            return Some(soft);
        }
    }
    Some(hard)
}

/// glibc's malloc gives each thread that contends for it an arena of its own (up to 8 per
/// core) and rarely returns their free memory, so the blocking pool's readers and the async
/// workers together held 2-3x the live heap: peak RSS 110-126 MB per node in the 2 KB
/// throughput benchmark, 40-100 MB with one arena, at the same throughput and latency (the
/// per-thread caches take the small allocations without the arena lock). `MALLOC_ARENA_MAX`
/// in the environment still wins.
fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets an allocator parameter; it is called before the runtime
        // starts any thread, and touches no memory of ours.
        if unsafe { libc::mallopt(libc::M_ARENA_MAX, 1) } != 1 {
            tracing::warn!("could not limit malloc to one arena; memory use may be higher than documented");
        }
    }
}

async fn run(mut config: BrokerConfig) -> Result<(), String> {
    let mut listeners = Vec::new();
    for listener in &config.listeners.all {
        let bind = listener.bind;
        let socket = TcpListener::bind(bind).await.map_err(|e| {
            format!(
                "cannot listen on {bind} (listener {}): {e}; is another broker running there? Use --listen or --set listeners=... to pick another address",
                listener.name
            )
        })?;
        listeners.push((std::sync::Arc::<str>::from(listener.name.as_str()), socket));
    }
    let metrics_listener = match config.metrics_listen {
        Some(bind) => {
            let socket = TcpListener::bind(bind).await.map_err(|e| {
                format!("cannot serve metrics on {bind}: {e}; is another process using it? Pick another address with --set metrics.listen=IP:PORT")
            })?;
            // The bound port (for :0), which is also what the broker registers for other consoles.
            config.metrics_listen = socket.local_addr().ok().or(config.metrics_listen);
            Some(socket)
        }
        None => None,
    };
    let security = sluice_broker::security::Security::load(&config)?;
    let broker = Broker::open(config, security.clone())
        .await
        .map_err(|e| e.to_string())?;
    tracing::info!(
        node_id = broker.config.node_id,
        listeners = %broker.config.listeners.describe_bound(),
        advertised = %broker.config.listeners.describe_advertised(),
        inter_broker_listener = %broker.config.listeners.inter_broker,
        data_dir = %broker.config.data_dir.display(),
        cluster_id = %broker.metadata.image().cluster_id,
        controller_listen = %broker.config.controller_listen,
        "sluice started; serving clients once registered with the metadata quorum"
    );
    let (stop, stopped) = watch::channel(false);
    let mut sigterm =
        signal(SignalKind::terminate()).map_err(|e| format!("cannot install the SIGTERM handler: {e}"))?;
    let mut sigint = signal(SignalKind::interrupt()).map_err(|e| format!("cannot install the SIGINT handler: {e}"))?;
    let mut background = broker.spawn_background(stopped.clone());
    background.push(tokio::spawn(security.run_reloads(stopped.clone())));
    if let Some(socket) = metrics_listener {
        tracing::info!(address = %broker.config.metrics_listen.map(|a| a.to_string()).unwrap_or_default(),
            "serving Prometheus metrics at /metrics and the console at /");
        background.push(tokio::spawn(sluice_broker::http::serve(
            broker.clone(),
            socket,
            stopped.clone(),
        )));
        background.push(tokio::spawn(sluice_broker::http::sampler::run(
            broker.clone(),
            stopped.clone(),
        )));
    }
    let serving = tokio::spawn(server::run(broker.clone(), listeners, stopped));
    let mut failure = None;
    tokio::select! {
        _ = sigterm.recv() => tracing::info!("SIGTERM received; shutting down"),
        _ = sigint.recv() => tracing::info!("SIGINT received; shutting down"),
        broken = sluice_broker::invariant::stop_requested() => {
            tracing::error!("shutting down: {broken}");
            failure = Some(format!(
                "stopped because an invariant does not hold ({broken}); this is a bug in sluice: report it with this log, then restart the node"
            ));
        }
        // Without its quorum member this node's metadata no longer changes: serving it would
        // hand clients a frozen view (stale leaders, missing topics), so stop instead.
        exit = broker.metadata.quorum_stopped() => {
            let reason = match exit {
                sluice_raft_meta::QuorumExit::Failed(reason) => reason,
                sluice_raft_meta::QuorumExit::Shutdown => "it shut down unexpectedly".to_owned(),
            };
            return Err(format!(
                "the metadata quorum member stopped ({reason}); this node exits instead of serving metadata that no longer changes. Fix the cause reported above and restart it; the other nodes carry on meanwhile"
            ));
        }
    }
    // Leadership moves away while this broker still serves, so clients fail over at once.
    broker.controlled_shutdown().await;
    broker.replicas.stop_fetching();
    let _ = stop.send(true);
    let _ = serving.await;
    for task in background {
        let _ = task.await;
    }
    broker.replicas.stop_isr_proposals().await;
    broker.replicas.shutdown();
    let metadata = match std::sync::Arc::try_unwrap(broker) {
        // The replica manager shares the metadata store (it proposes ISR changes); it is done.
        Ok(broker) => {
            let metadata = broker.metadata;
            drop(broker.replicas);
            std::sync::Arc::try_unwrap(metadata).ok()
        }
        Err(_) => None,
    };
    match metadata {
        Some(metadata) => metadata.shutdown().await,
        None => tracing::warn!("requests still hold the broker; the metadata quorum stops with the process"),
    }
    tracing::info!("shutdown complete");
    failure.map_or(Ok(()), Err)
}

//! canaryd: the canary daemon and its command line.
//!
//! `main.rs` only parses the command line and calls [`run`]; everything else lives here so
//! end-to-end tests can drive the same code paths.
//!
//! Commands: `run` (the daemon: scheduled replays, verdicts, baselines, status endpoint),
//! `check-config`, `replay` (one replay against a server), `analyze-trace` (what a trace
//! holds), `sim` (the simulated inference server), `demo` (the simulator and the bundled
//! trace, in one process).

pub mod baseline;
mod bundled;
pub mod cadence;
pub mod config;
mod demo;
mod doctor;
mod duration;
pub mod export;
pub mod history;
pub mod kernel;
mod notify;
pub mod observe;
mod otlp;
pub mod recovery;
mod replay;
mod report;
pub mod runner;
mod service;
mod size;
mod state_lock;
pub mod status;
pub mod verdict;

pub use bundled::BUNDLED_TRACE_NAME;
pub use duration::parse as parse_duration;
pub use replay::{ReplayArgs, ShapeArgs};

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use tokio_util::sync::CancellationToken;

/// canaryd — replays production LLM traces against inference servers and measures every request.
#[derive(Debug, Parser)]
#[command(name = "canaryd", version, about, propagate_version = true)]
pub struct Cli {
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

/// How logs are written to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines (without timestamps under journald).
    Text,
    /// One JSON object per line.
    Json,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Replay a trace against an OpenAI-compatible server, once.
    Replay(Box<ReplayArgs>),
    /// Describe a trace: rate, bursts, lengths, sessions, ideal prefix-cache hit rate.
    AnalyzeTrace(AnalyzeArgs),
    /// Serve the simulated OpenAI-compatible inference server.
    Sim(Box<canary_sim::Args>),
    /// Replay the bundled Mooncake slice against the built-in simulator.
    Demo(Box<demo::DemoArgs>),
    /// Say what this host and a target offer: the target, its /metrics, NVML, DCGM.
    Doctor(doctor::DoctorArgs),
    /// Run as a daemon: scheduled replays with verdicts, baselines and a status endpoint.
    Run(service::RunArgs),
    /// Validate a daemon config file and say what it schedules.
    CheckConfig(CheckConfigArgs),
}

/// Flags of `canaryd check-config`.
#[derive(Debug, clap::Args)]
pub struct CheckConfigArgs {
    /// The config file.
    #[arg(default_value = config::DEFAULT_PATH)]
    pub path: PathBuf,
}

/// Flags of `canaryd analyze-trace`.
#[derive(Debug, clap::Args)]
pub struct AnalyzeArgs {
    /// The trace file.
    pub file: PathBuf,
    /// Trace format; detected when omitted.
    #[arg(long)]
    pub format: Option<canary_replay::TraceFormat>,
    /// Keep going past bad rows, counting them.
    #[arg(long)]
    pub skip_invalid: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs a parsed command line; returns the process exit code.
pub fn run(cli: Cli) -> Result<i32> {
    match cli.command {
        Command::Sim(args) => {
            canary_sim::run_blocking(*args)?;
            Ok(0)
        }
        Command::AnalyzeTrace(args) => analyze(&args),
        Command::Replay(args) => runtime()?.block_on(async move {
            let shutdown = shutdown_on_signal();
            let loaded = replay::load_trace(&args.trace, &args.shape, args.format)?;
            let target = replay::target(&args.url, args.endpoint_type, &args.model, &args.shape)?;
            let prompts = replay::prompts(&args.shape)?;
            let outcome = replay::replay(loaded, target, &args.shape, prompts, shutdown).await?;
            Ok(if outcome.interrupted { 130 } else { 0 })
        }),
        Command::Doctor(args) => runtime()?.block_on(doctor::doctor(args)),
        Command::Run(args) => runtime()?.block_on(service::run(args)),
        Command::CheckConfig(args) => check_config(&args.path),
        Command::Demo(args) => {
            runtime()?.block_on(async move { demo::demo(*args, shutdown_on_signal()).await })
        }
    }
}

fn check_config(path: &std::path::Path) -> Result<i32> {
    let c = config::Config::load(path)?;
    println!(
        "{}: ok: {} target(s), {} workload(s); status on {}; artifacts in {}",
        path.display(),
        c.targets.len(),
        c.workloads.len(),
        c.status_listen,
        c.artifacts_dir.display()
    );
    if let Some(otlp) = c.otlp.describe() {
        println!("  {otlp}");
    }
    for w in &c.workloads {
        println!(
            "  {}: {} against {}",
            w.name,
            w.cadence.describe(),
            w.target
        );
    }
    for warning in c.warnings() {
        println!("  warning: {warning}");
    }
    Ok(0)
}

fn analyze(args: &AnalyzeArgs) -> Result<i32> {
    let opts = canary_replay::LoadOptions {
        format: args.format,
        skip_invalid: args.skip_invalid,
        ..Default::default()
    };
    let trace = canary_replay::load(&args.file, &opts)?;
    let analysis = canary_replay::analyze(&trace);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&analysis)?);
    } else {
        println!("{analysis}");
    }
    Ok(0)
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// A token cancelled by the first SIGINT or SIGTERM; a second SIGINT exits at once.
fn shutdown_on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let t = token.clone();
    tokio::spawn(async move {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        let term = async {
            match &mut term {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term => {}
        }
        tracing::warn!("stopping: no new requests; in-flight ones get the grace period (Ctrl-C again to quit now)");
        t.cancel();
        let _ = tokio::signal::ctrl_c().await;
        std::process::exit(130);
    });
    token
}

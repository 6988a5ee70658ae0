//! canaryd: the canary daemon and its command line.
//!
//! `main.rs` only parses the command line and calls [`run`]; everything else lives here so
//! end-to-end tests can drive the same code paths.
//!
//! Commands: `run` (the daemon: scheduled replays, verdicts, baselines, status endpoint),
//! `check-config`, `replay` (one replay against a server), `analyze-trace` (what a trace
//! holds), `sweep` (a series of runs: knee, Pareto front, capacity at an SLO), `sim` (the
//! simulated inference server), `demo` (the simulator and the bundled
//! trace, in one process), `report` and `compare` (HTML reports of run artifacts).

/// `println!` that returns write errors instead of panicking, and takes a closed stdout
/// (`canaryd check-config | head -1`) as no error at all: the rest of the output is dropped
/// and the command's own exit status stands, as with ripgrep. Use as `outln!(…)?`.
macro_rules! outln {
    () => {
        $crate::stdout_line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::stdout_line(format_args!($($arg)*))
    };
}

mod bundled;
pub mod capacity;
mod cli;
pub mod config;
mod context_fit;
pub mod execute;
pub mod file_limit;
mod instant;
pub mod judge;
pub mod malloc_arenas;
pub mod run_deadline;
pub mod service;

pub use bundled::BUNDLED_TRACE_NAME;
pub use cli::profile::ProfileArgs;
pub use cli::replay::{ReplayArgs, ShapeArgs};
pub use config::duration::parse as parse_duration;

use cli::{demo, doctor, profile, synthesize};

use anyhow::{Context, Result};
use canary_replay::workers::RealtimeWorkers;
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
    /// Measure a server under any load shape, with aiperf's flags: a trace (`--trace`), an
    /// open-loop rate (`--request-rate`) or a closed loop of users (`--concurrency`).
    Profile(Box<ProfileArgs>),
    /// Run one load shape at several points (`--concurrency 1,4,16`, `--request-rate …`,
    /// `--speedup …`) and find the knee and the Pareto front, or search for the highest rate
    /// meeting an SLO (`--find-max-rate`).
    Sweep(Box<cli::sweep::SweepArgs>),
    /// Describe a trace: rate, bursts, lengths, sessions, ideal prefix-cache hit rate.
    AnalyzeTrace(AnalyzeArgs),
    /// Write a new trace from one: prefixes and prompts scaled, roots multiplied, lengths
    /// capped, time sped up (as `aiperf synthesize`).
    Synthesize(synthesize::SynthesizeArgs),
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
    /// Write one self-contained HTML report of run folders (several: a series).
    Report(canary_report::cli::ReportArgs),
    /// Compare run B against run A, metric by metric: is each change real?
    Compare(canary_report::cli::CompareArgs),
    /// Merge the artifacts of the shards of one replay (`--shard I/N`) into one run's,
    /// checking that they cover the trace exactly once.
    Merge(cli::merge::MergeArgs),
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
    #[command(flatten)]
    pub trace_limits: cli::replay::TraceLimits,
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
        Command::Synthesize(args) => synthesize::synthesize(&args),
        Command::Replay(args) => {
            interruptible(runtime(args.shape.workers())?, |shutdown| async move {
                let plan = canary_replay::Plan::try_from(&*args)?;
                profile::run_plan(plan, &args.shape, shutdown).await
            })
        }
        Command::Profile(args) => {
            interruptible(runtime(args.shape.workers())?, |shutdown| async move {
                profile::profile(&args, shutdown).await
            })
        }
        Command::Sweep(args) => interruptible(
            runtime(args.profile.shape.workers())?,
            |shutdown| async move { cli::sweep::sweep(&args, shutdown).await },
        ),
        Command::Doctor(args) => {
            let rt = runtime(ordinary())?;
            let code = rt.block_on(doctor::doctor(args));
            // A probe left hung (a wedged GPU driver, a name lookup that never ends) must not
            // hold the exit: dropping the runtime would wait for its blocking threads.
            rt.shutdown_background();
            code
        }
        Command::Run(args) => {
            // Ordinary until the config asks otherwise (`realtime_workers`), reload included.
            let workers = ordinary();
            runtime(workers.clone())?.block_on(service::run(args, workers))
        }
        Command::CheckConfig(args) => interruptible(runtime(ordinary())?, |shutdown| async move {
            check_config(&args.path, shutdown).await
        }),
        // The simulator runs in the demo's own process: real-time workers would serve it too.
        Command::Demo(args) => {
            interruptible(runtime(ordinary())?, |shutdown| demo::demo(*args, shutdown))
        }
        Command::Report(args) => {
            outln!("{}", canary_report::cli::report(&args)?)?;
            Ok(0)
        }
        Command::Merge(args) => cli::merge::merge(&args),
        Command::Compare(args) => {
            outln!("{}", canary_report::cli::compare(&args)?)?;
            Ok(0)
        }
    }
}

/// The exit status of a command stopped by SIGINT or SIGTERM (128 + SIGINT, as shells
/// report it).
pub const INTERRUPTED: i32 = 130;

/// Writes one line to stdout; see `outln!`.
fn stdout_line(args: std::fmt::Arguments<'_>) -> std::io::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_fmt(args).and_then(|()| out.write_all(b"\n")) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// Validates the file, then loads and selects each workload's trace as its runs will, so a
/// bad row (`file:line: field`), a scale taking lengths over the limit or a speedup that
/// would never end is found now, not at the first run.
async fn check_config(path: &std::path::Path, shutdown: CancellationToken) -> Result<i32> {
    let c = config::Config::load(path)?;
    // Every workload's trace is checked, and every one that fails is said (one: as before).
    let Some(traces) = service::check_traces(path, &c, &shutdown).await? else {
        return Ok(INTERRUPTED);
    };
    outln!(
        "{}: ok: {} target(s), {} workload(s); status on {}; artifacts in {}",
        path.display(),
        c.targets.len(),
        c.workloads.len(),
        c.status_listen,
        c.artifacts_dir.display()
    )?;
    if let Some(otlp) = c.otlp.describe() {
        outln!("  {otlp}")?;
    }
    // Read as the daemon reads it at start (the `OTEL_*` variables, header values): what
    // it cannot use there, the daemon logs once and runs without export, so a warning here.
    let warnings = c.warnings();
    // Said once: a header value that cannot be read here is among the warnings already
    // (each of them, and that export stays off), so no "export off" line repeats it.
    let export_off = c.otlp.exporter_config().err().filter(|e| {
        let key = e.split_once(": ").map_or(e.as_str(), |(key, _)| key);
        !warnings.iter().any(|w| w.starts_with(&format!("{key}: ")))
    });
    let mut trace_warnings = Vec::new();
    for (w, trace) in c.workloads.iter().zip(traces) {
        outln!(
            "  {}: {} against {}",
            w.name,
            w.cadence.describe(),
            w.target
        )?;
        // With the file's own warnings, below.
        trace_warnings.extend(trace.warning().map(str::to_string));
        match trace {
            service::workload::TraceCheck::Ok(what, _) => outln!("    trace: {what}")?,
            // It was printed as a trace too (`trace: 5 req/s, poisson arrivals`).
            service::workload::TraceCheck::Synthetic(what, _) => outln!("    synthetic: {what}")?,
            // A missing trace is among the warnings.
            _ => {}
        }
        if let Some(s) = &w.capacity {
            outln!(
                "    capacity search: at most {} probes, bracket precision {}, floor {} req/s; \
                 fails below the baseline's lower end by more than {}%",
                s.max_probes,
                s.precision,
                s.min_rate,
                s.tolerance * 100.0
            )?;
        }
        if let Some(s) = &w.sweep {
            let points: Vec<String> = s.values.iter().map(|v| s.axis.label(*v)).collect();
            outln!(
                "    sweep: {} ({}), cooldown {:?}; fails when the knee is below the baseline's \
                 lower end by more than {}%",
                points.join(", "),
                s.axis.flag().trim_start_matches("--"),
                s.cooldown,
                s.tolerance * 100.0
            )?;
        }
        if let Some(s) = &w.start_at {
            outln!(
                "    on the grid from start_at {} (each run at its grid instant)",
                s.text
            )?;
        }
    }
    if let Some(e) = export_off {
        outln!("  warning: OTLP export off: {e}; the daemon would run without export")?;
    }
    for warning in warnings.iter().chain(&trace_warnings) {
        outln!("  warning: {warning}")?;
    }
    for warning in disk_warnings(&c) {
        outln!("  warning: {warning}")?;
    }
    Ok(0)
}

/// The state and artifacts folders on a full or read-only file system: a warning, not an
/// error (space may be freed, a mount made writable before the daemon starts), each file
/// system said once (the artifacts are under `state_dir` by default).
fn disk_warnings(c: &config::Config) -> Vec<String> {
    use service::history::open_error::space_warning;
    let state = space_warning(
        "state_dir",
        &c.state_dir,
        "the daemon exits 1 at start (its history cannot be opened there)",
    );
    let artifacts = space_warning(
        "export.artifacts_dir",
        &c.artifacts_dir,
        "each run's verdict is an error (its files cannot be written there)",
    );
    let same_mount = |a: &Option<(Option<String>, String)>| {
        a.as_ref()
            .zip(state.as_ref())
            .is_some_and(|(a, s)| a.0.is_some() && a.0 == s.0)
    };
    let artifacts = if same_mount(&artifacts) {
        None
    } else {
        artifacts
    };
    state.into_iter().chain(artifacts).map(|(_, w)| w).collect()
}

fn analyze(args: &AnalyzeArgs) -> Result<i32> {
    // No figure reads a prompt: checked, not kept.
    let opts = args
        .trace_limits
        .load_options(args.format, args.skip_invalid);
    let trace = canary_replay::load(&args.file, &opts)?;
    let analysis = canary_replay::analyze(&trace);
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&analysis)?)?;
    } else {
        outln!("{analysis}")?;
    }
    Ok(0)
}

/// tokio's multi-thread default, for the daemon and every command. A run's requests go on a
/// runtime of the run's own, sized by its planned load (canary_replay's `request_runtime`;
/// bench/RESULTS.md "The run's own runtime"), which takes `workers`: whether its worker threads
/// run real-time (`--realtime-workers`, the daemon's `realtime_workers`; bench/RESULTS.md
/// "Real-time workers"). This runtime's own threads stay ordinary.
fn runtime(workers: RealtimeWorkers) -> Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    let rt = builder.build().context("starting the async runtime")?;
    workers.register(rt.handle());
    Ok(rt)
}

/// Ordinary worker threads.
fn ordinary() -> RealtimeWorkers {
    RealtimeWorkers::new(false)
}

/// Runs a one-shot command on `rt`, handing it a token the first SIGINT or SIGTERM cancels
/// (no new requests; in-flight ones get the grace period). A second SIGINT returns
/// [`INTERRUPTED`] at once, for `main` to exit with, without waiting for the command.
fn interruptible<F, Fut>(rt: tokio::runtime::Runtime, command: F) -> Result<i32>
where
    F: FnOnce(CancellationToken) -> Fut,
    Fut: std::future::Future<Output = Result<i32>>,
{
    let finished = rt.block_on(async move {
        let (shutdown, quit_now) = shutdown_on_signal();
        let mut command = Box::pin(command(shutdown));
        let finished = tokio::select! {
            r = &mut command => Some(r),
            Ok(()) = quit_now => None,
        };
        if finished.is_none() {
            // Not dropped: a run's drop may wait (an exporter's flush), and the user asked
            // to quit now. The process exits right after.
            std::mem::forget(command);
        }
        finished
    });
    match finished {
        Some(r) => r,
        None => {
            // Likewise the runtime: its tasks are not waited for.
            std::mem::forget(rt);
            Ok(INTERRUPTED)
        }
    }
}

/// A token cancelled by the first SIGINT or SIGTERM, and a receiver that resolves on the
/// second SIGINT. The signal task only reports: what to do is the caller's (see
/// [`interruptible`]).
fn shutdown_on_signal() -> (CancellationToken, tokio::sync::oneshot::Receiver<()>) {
    use tokio::signal::unix::{signal, SignalKind};
    let token = CancellationToken::new();
    let (quit, quit_now) = tokio::sync::oneshot::channel();
    let t = token.clone();
    // Installed here, before the command starts, not in the task: a SIGTERM in the moment
    // before the task first ran took the default action and killed the process.
    let mut term = signal(SignalKind::terminate()).ok();
    let mut int = signal(SignalKind::interrupt()).ok();
    tokio::spawn(async move {
        tokio::select! {
            _ = recv(&mut int) => {}
            _ = recv(&mut term) => {}
        }
        tracing::warn!("stopping: no new requests; in-flight ones get the grace period (Ctrl-C again to quit now)");
        t.cancel();
        recv(&mut int).await;
        let _ = quit.send(());
    });
    (token, quit_now)
}

/// The next delivery of a signal, never when it could not be installed.
async fn recv(signal: &mut Option<tokio::signal::unix::Signal>) {
    match signal {
        Some(s) => {
            s.recv().await;
        }
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::CommandFactory;

    /// The help of `canaryd SUB --FLAG` (its `id`), as `--help` prints it.
    fn help(sub: &str, id: &str) -> String {
        let mut cli = Cli::command();
        let sub = cli.find_subcommand_mut(sub).expect("subcommand");
        let arg = sub
            .get_arguments()
            .find(|a| a.get_id() == id)
            .expect("flag");
        arg.get_help().expect("help").to_string()
    }

    /// `replay`'s gates set its exit status; a sweep's do not, and its help said they did.
    #[test]
    fn the_gates_say_what_they_do_to_each_commands_exit_status() {
        for id in ["min_good_fraction", "max_error_rate"] {
            assert!(
                help("replay", id).contains("exit with status 3"),
                "replay {id}"
            );
            let h = help("sweep", id);
            assert!(!h.contains("status 3"), "sweep {id}: {h}");
            assert!(
                h.contains("does not change the sweep's exit status")
                    && h.contains("no rate passed exits with status 6"),
                "{h}"
            );
        }
    }

    #[test]
    fn help_names_what_the_code_reads() {
        // Runs have their own runtime: tokio's variable no longer sizes their workers.
        let h = help("replay", "realtime_workers");
        assert!(h.contains("CANARYD_REQUEST_WORKERS=1"), "{h}");
        assert!(!h.contains("TOKIO_WORKER_THREADS"), "{h}");
        let h = help("demo", "profile");
        for name in canary_sim::Profile::NAMES {
            assert!(h.contains(&format!("`{name}`")), "{name}: {h}");
        }
    }
}

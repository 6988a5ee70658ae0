//! `canaryd run`: the long-running daemon. Load the config, lock the state directory, open the
//! history, bind the status endpoint, record the runs a killed process left without a verdict,
//! schedule every workload, tell systemd it is ready, then wait for signals:
//! SIGHUP reloads the config (a bad one is logged and the running one kept), SIGTERM or
//! SIGINT stop dispatching, give in-flight requests their grace period, record the partial
//! runs as `error: interrupted`, flush the sinks and exit 0.
//!
//! Runs of one workload never overlap: a run due while the previous one is still going (or
//! waiting for its target) is skipped and counted. Two workloads on one target take turns
//! unless the target sets `allow_concurrent_runs`.

use crate::baseline;
use crate::cadence::{Cadence, Ticker};
use crate::config::{self, Config, Workload};
use crate::export::{RunSink, Sinks};
use crate::history::{History, RunRow};
use crate::notify::Notifier;
use crate::runner::{new_run_id, RunContext, RunResult};
use crate::status::{self, StatusMetrics};
use crate::verdict::Verdict;
use anyhow::{Context, Result};
use canary_replay::Progress;
use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::signal::unix::{signal, SignalKind};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Flags of `canaryd run`.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// The config file (default: /etc/canaryd/canaryd.toml; without one, the embedded
    /// default runs: the built-in simulator and the bundled trace).
    #[arg(long, short = 'c', value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Listen address of the status endpoint, overriding the config's.
    #[arg(long, value_name = "ADDR")]
    pub status_listen: Option<SocketAddr>,
}

/// The embedded default: one workload against the in-process simulator. State goes to
/// `./canaryd-data`, or to systemd's `$STATE_DIRECTORY` when there is one.
const EMBEDDED: &str = r#"
[targets.sim]
url = "SIM_URL"
model = "canary-sim"

[workloads.demo]
target = "sim"
trace = "bundled"
every = "1m"
speedup = 5
scale_lengths = 0.125
slos = "time_to_first_token:2000 inter_token_latency:100"
min_good_fraction = 0.9
"#;

/// Runs the daemon until SIGTERM or SIGINT; returns the exit code.
pub async fn run(args: RunArgs) -> Result<i32> {
    // Handlers first: a SIGTERM during start-up is then a clean stop, not a kill.
    let mut hup = signal(SignalKind::hangup()).context("installing the SIGHUP handler")?;
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let (config_path, mut config, sim) = resolve(&args).await?;
    if let Some(addr) = args.status_listen {
        config.status_listen = addr;
    }
    // Before the history is opened or anything is scheduled: a second daemon on this
    // state_dir stops here, naming the first.
    let state_lock = crate::state_lock::StateLock::acquire(&config.state_dir, "state_dir")?;
    tracing::debug!("holding {}", state_lock.path().display());
    // Artifacts elsewhere are as much this daemon's: another one would take its runs in
    // progress for runs whose process died.
    let artifacts_lock = match config.artifacts_dir.starts_with(&config.state_dir) {
        true => None,
        false => Some(crate::state_lock::StateLock::acquire(
            &config.artifacts_dir,
            "artifacts_dir",
        )?),
    };
    let history = Arc::new(History::open(&config.state_dir.join("history.sqlite"))?);
    let metrics = Arc::new(StatusMetrics::default());
    metrics.seed(&history);
    let listener = status::bind(config.status_listen).await?;
    let status_addr = listener.local_addr()?;
    let stop_status = CancellationToken::new();
    let status_task = tokio::spawn(status::serve(
        listener,
        metrics.clone(),
        history.clone(),
        stop_status.clone(),
    ));
    tracing::info!("status endpoint on http://{status_addr} (/healthz /readyz /metrics /api/runs)");
    if sim.is_some() {
        // A daemon goes on whatever its stdout is.
        if let Err(e) = print_embedded_banner(status_addr, &config) {
            tracing::warn!("printing the banner: {e}");
        }
    }

    // Every finished run goes to each sink: the status metrics, and OTLP when configured
    // (one exporter for the process; `[otlp]` changes take effect at restart).
    let otlp = crate::export::otlp::OtlpSink::start(&config, metrics.clone());
    let mut sink_list = vec![metrics.clone() as Arc<dyn RunSink>];
    sink_list.extend(otlp.clone().map(|o| o as Arc<dyn RunSink>));
    let sinks: Arc<Sinks> = Arc::new(Sinks(sink_list));
    let daemon = Arc::new(Daemon {
        history,
        metrics: metrics.clone(),
        sinks: sinks.clone(),
        ctx: RunContext::with_otlp(otlp),
        shutdown: CancellationToken::new(),
        target_locks: Mutex::default(),
        tasks: Mutex::default(),
        previous_due: Mutex::default(),
        progress: Mutex::default(),
        runner: replay_run,
    });
    // Before the first run: a run folder of this workload could otherwise be mistaken for
    // one the previous process left behind.
    daemon.recover_orphans(&config);
    let mut schedulers = daemon.schedule(Arc::new(config.clone()));

    let notifier = Notifier::from_env();
    notifier.send("READY=1");
    metrics.set_ready(true);
    let watchdog = Notifier::watchdog_interval();
    let mut watchdog_tick = tokio::time::interval(watchdog.unwrap_or(Duration::from_secs(3600)));
    let mut status_tick = tokio::time::interval(Duration::from_secs(5));
    loop {
        tokio::select! {
            _ = hup.recv() => match &config_path {
                None => tracing::warn!("SIGHUP: running the embedded default, no config file to reload"),
                Some(path) => match reload(path, &args, &config) {
                    Ok(new) => {
                        schedulers.cancel();
                        schedulers = daemon.schedule(Arc::new(new.clone()));
                        config = new;
                        metrics.reloaded(true);
                    }
                    Err(e) => {
                        metrics.reloaded(false);
                        tracing::error!("SIGHUP: config rejected, the running config stays: {e}");
                    }
                },
            },
            _ = term.recv() => break,
            _ = int.recv() => break,
            _ = watchdog_tick.tick(), if watchdog.is_some() => notifier.send("WATCHDOG=1"),
            _ = status_tick.tick() => notifier.status(&daemon.status_line()),
        }
    }

    tracing::info!("stopping: no new runs; in-flight requests get their grace period");
    notifier.send("STOPPING=1");
    metrics.set_ready(false);
    schedulers.cancel();
    daemon.shutdown.cancel();
    let drain = async {
        loop {
            let task = daemon.tasks.lock().unwrap().pop();
            match task {
                Some(t) => {
                    let _ = t.await;
                }
                None => break,
            }
        }
    };
    tokio::select! {
        _ = drain => {}
        _ = int.recv() => {
            tracing::warn!("second SIGINT: quitting without waiting for runs");
            return Ok(130);
        }
    }
    // Flushing blocks (exporters send with a deadline): off the async workers.
    let flushing = sinks.clone();
    let _ = tokio::task::spawn_blocking(move || flushing.flush()).await;
    stop_status.cancel();
    let _ = status_task.await;
    if let Some(sim) = sim {
        let _ = sim.shutdown().await;
    }
    tracing::info!("stopped");
    drop((state_lock, artifacts_lock));
    Ok(0)
}

/// Loads `path` again for SIGHUP. Runs in flight finish under the config they started with.
fn reload(path: &Path, args: &RunArgs, running: &Config) -> Result<Config, config::ConfigError> {
    let mut new = Config::load(path)?;
    if let Some(addr) = args.status_listen {
        new.status_listen = addr;
    }
    if new.status_listen != running.status_listen || new.state_dir != running.state_dir {
        tracing::warn!("SIGHUP: status.listen and state_dir changes take effect at restart");
    }
    if new.otlp != running.otlp {
        tracing::warn!("SIGHUP: [otlp] changes take effect at restart");
    }
    for warning in new.warnings() {
        tracing::warn!("{warning}");
    }
    tracing::info!(
        "SIGHUP: reloaded {} ({} workloads)",
        path.display(),
        new.workloads.len()
    );
    Ok(new)
}

/// The config file given, the default path when it exists, or the embedded default (which
/// starts the simulator in this process).
async fn resolve(
    args: &RunArgs,
) -> Result<(Option<PathBuf>, Config, Option<canary_sim::SimHandle>)> {
    let path = match &args.config {
        Some(p) => Some(p.clone()),
        None => Some(PathBuf::from(config::DEFAULT_PATH)).filter(|p| p.exists()),
    };
    if let Some(path) = path {
        let c = Config::load(&path)?;
        tracing::info!(
            "config {} loaded: {} workload(s)",
            path.display(),
            c.workloads.len()
        );
        for warning in c.warnings() {
            tracing::warn!("{warning}");
        }
        return Ok((Some(path), c, None));
    }
    // The bundled trace is scaled by 1/8: its 512-token blocks become 64-token ones, and the
    // simulator's prefix cache must cut prompts the same way for reuse to show.
    let sim_config = canary_sim::Config {
        block_size: 64,
        profile: canary_sim::Profile::illustrative(),
        ..Default::default()
    };
    let sim = canary_sim::spawn(sim_config)
        .await
        .context("starting the built-in simulator")?;
    let mut text = EMBEDDED.replace("SIM_URL", &sim.url());
    if std::env::var_os("STATE_DIRECTORY").is_none() {
        text.insert_str(0, "state_dir = \"canaryd-data\"\n");
    }
    let c = Config::parse(&text, Path::new("<embedded default>"), Path::new("."))?;
    Ok((None, c, Some(sim)))
}

fn print_embedded_banner(status: SocketAddr, c: &Config) -> std::io::Result<()> {
    outln!(
        "canaryd: no config file (--config, or {}): running the embedded default.\n  \
         target:    the built-in simulator at {} (illustrative profile)\n  \
         workload:  `demo`, the bundled Mooncake slice (300 requests at 5x, lengths x1/8), every minute\n  \
         status:    http://{status}/api/runs   (also /metrics, /healthz, /readyz)\n  \
         artifacts: {}/demo/<run-id>/   history: {}/history.sqlite\n\
         Stop with Ctrl-C.",
        config::DEFAULT_PATH,
        c.targets["sim"].url,
        c.artifacts_dir.display(),
        c.state_dir.display(),
    )
}

/// Shared state of the scheduler and its runs; survives reloads.
struct Daemon {
    history: Arc<History>,
    metrics: Arc<StatusMetrics>,
    sinks: Arc<Sinks>,
    ctx: RunContext,
    /// Cancelled on SIGTERM: runs stop dispatching and finish within their grace period.
    shutdown: CancellationToken,
    target_locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// Each workload's last due time, kept across reloads so a SIGHUP does not re-run it.
    previous_due: Mutex<HashMap<String, (Cadence, SystemTime)>>,
    progress: Mutex<HashMap<String, Arc<Progress>>>,
    /// Carries out one run: [`replay_run`]; tests put a stand-in here.
    runner: Runner,
}

/// A run in progress, boxed so the runner can be swapped.
type RunFuture = Pin<Box<dyn Future<Output = RunResult> + Send>>;

/// What carries out one run, given its id and progress counters.
type Runner = fn(Arc<Daemon>, Arc<Config>, Workload, String, Arc<Progress>) -> RunFuture;

/// The daemon's runner: the workload's replay, with telemetry and export.
fn replay_run(
    d: Arc<Daemon>,
    config: Arc<Config>,
    w: Workload,
    id: String,
    progress: Arc<Progress>,
) -> RunFuture {
    Box::pin(async move {
        let shutdown = d.shutdown.clone();
        d.ctx.run(&config, &w, id, shutdown, progress).await
    })
}

/// Marks a workload as running until dropped, however its run ends (a panic included):
/// a flag left set would have every later run of the workload skipped.
struct RunningGuard {
    daemon: Arc<Daemon>,
    workload: String,
}

impl RunningGuard {
    fn new(daemon: &Arc<Daemon>, workload: &str) -> RunningGuard {
        daemon.metrics.set_running(workload, true);
        RunningGuard {
            daemon: daemon.clone(),
            workload: workload.to_string(),
        }
    }
}

impl Drop for RunningGuard {
    fn drop(&mut self) {
        // A lock poisoned by a panic elsewhere must not turn this drop into an abort.
        self.daemon
            .progress
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.workload);
        self.daemon.metrics.set_running(&self.workload, false);
    }
}

/// What a panic said, when it said it with a string.
fn panic_message(e: tokio::task::JoinError) -> String {
    if !e.is_panic() {
        return format!("the run's task ended abnormally: {e}");
    }
    let payload = e.into_panic();
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".into())
}

impl Daemon {
    /// Starts one scheduler per workload; cancel the token to stop them (runs go on).
    fn schedule(self: &Arc<Self>, config: Arc<Config>) -> CancellationToken {
        let stop = CancellationToken::new();
        for w in &config.workloads {
            tracing::info!(
                workload = %w.name,
                "scheduled {} against {}",
                w.cadence.describe(),
                w.target
            );
            let (d, c, w, s) = (self.clone(), config.clone(), w.clone(), stop.clone());
            tokio::spawn(async move { d.schedule_loop(c, w, s).await });
        }
        stop
    }

    async fn schedule_loop(
        self: Arc<Self>,
        config: Arc<Config>,
        w: Workload,
        stop: CancellationToken,
    ) {
        let previous = self
            .previous_due
            .lock()
            .unwrap()
            .get(&w.name)
            .filter(|(c, _)| *c == w.cadence)
            .map(|(_, t)| *t);
        let mut ticker = Ticker::resume(w.cadence.clone(), previous);
        while ticker.tick(&stop).await.is_some() {
            if let Some(due) = ticker.previous() {
                self.previous_due
                    .lock()
                    .unwrap()
                    .insert(w.name.clone(), (w.cadence.clone(), due));
            }
            if self.metrics.running().contains(&w.name) {
                tracing::warn!(workload = %w.name, "due again while the previous run is still going: skipped");
                self.sinks.run_skipped(&w.name);
                continue;
            }
            let task = self.start_run(config.clone(), w.clone());
            let mut tasks = self.tasks.lock().unwrap();
            tasks.retain(|t| !t.is_finished());
            tasks.push(task);
        }
    }

    /// Marks the workload running and runs it once in a task of its own.
    fn start_run(self: &Arc<Self>, config: Arc<Config>, w: Workload) -> JoinHandle<()> {
        let running = RunningGuard::new(self, &w.name);
        let d = self.clone();
        tokio::spawn(async move {
            let _running = running;
            d.run_once(config, w).await
        })
    }

    /// Waits for the target's turn, runs, records. Whatever happens is recorded: a run that
    /// panics becomes an `error` verdict with the panic's message, a stop while waiting for
    /// the target an `error: interrupted` one.
    async fn run_once(self: Arc<Self>, config: Arc<Config>, w: Workload) {
        let target = &config.targets[&w.target];
        let lock = (!target.allow_concurrent_runs).then(|| {
            self.target_locks
                .lock()
                .unwrap()
                .entry(target.name.clone())
                .or_default()
                .clone()
        });
        let _turn = match lock {
            None => None,
            Some(lock) => tokio::select! {
                g = lock.lock_owned() => Some(g),
                _ = self.shutdown.cancelled() => {
                    // Never started, so not a failed run (a restart would raise error alerts
                    // for every queued workload): a skip, counted and logged.
                    tracing::info!(
                        workload = %w.name,
                        "not started: the daemon stopped while the run waited for its turn on target {}",
                        target.name
                    );
                    self.sinks.run_skipped(&w.name);
                    return;
                }
            },
        };
        let progress = Arc::new(Progress::default());
        self.progress
            .lock()
            .unwrap()
            .insert(w.name.clone(), progress.clone());
        // The id says when the run started, so it is drawn once the target is ours.
        let id = new_run_id();
        // In a task of its own, so a panic ends this run only, and is recorded.
        let started = RunResult::new(&config, &w, id.clone());
        let run = (self.runner)(self.clone(), config.clone(), w.clone(), id, progress);
        let result = match tokio::spawn(run).await {
            Ok(result) => result,
            Err(e) => {
                let mut result = started;
                result.verdict = Verdict::error(format!("the run panicked: {}", panic_message(e)));
                result.finished_unix_ms = crate::history::now_unix_ms();
                result
            }
        };
        self.finish(&config, &w.name, result);
    }

    /// Records the runs a process that died left without a verdict (see
    /// [`crate::recovery`]): `error: interrupted (process died)`, never in a baseline.
    fn recover_orphans(&self, config: &Config) {
        for orphan in crate::recovery::find(&config.artifacts_dir, &self.history) {
            match crate::recovery::recover(config, &orphan) {
                Ok(result) => self.finish(config, &orphan.workload, result),
                Err(e) => tracing::error!(
                    workload = %orphan.workload,
                    run = %orphan.id,
                    "recovering a run whose process died: {e:#}"
                ),
            }
        }
    }

    /// Records a finished run of `workload` and hands it to the sinks.
    fn finish(&self, config: &Config, workload: &str, mut result: RunResult) {
        if let Err(e) = self.record(config, workload, &mut result) {
            tracing::error!(workload = %workload, run = %result.id, "recording the run: {e:#}");
        }
        self.sinks.run_finished(workload, &result);
    }

    /// Compares with the baseline, writes `verdict.json`, stores the run, applies retention.
    fn record(&self, config: &Config, workload: &str, result: &mut RunResult) -> Result<()> {
        if let Some(samples) = &result.samples {
            // A baseline that cannot be read leaves this run uncompared, not unrecorded.
            match self.history.baseline(workload, config.baseline.runs) {
                Ok(base) => {
                    result.comparison = Some(baseline::compare(&config.baseline, &base, samples))
                }
                Err(e) => tracing::error!(workload = %workload, "reading the baseline: {e:#}"),
            }
        }
        let trend = result.comparison.as_ref().map(|c| c.trend.as_str());
        // The figures the verdict rests on and the bars they met or missed, so the log line
        // says more than `pass`.
        let w = config.workloads.iter().find(|w| w.name == workload);
        let figures = result
            .outcome
            .as_ref()
            .zip(w)
            .map(|(o, w)| crate::verdict::Criteria::of(w).figures(&o.summary));
        let line = format!(
            "{}: {}{}{}",
            result.id,
            result.verdict,
            figures.map(|f| format!(" [{f}]")).unwrap_or_default(),
            trend
                .map(|t| format!("; baseline: {t}"))
                .unwrap_or_default()
        );
        match result.verdict.kind {
            crate::verdict::VerdictKind::Pass => tracing::info!(workload = %workload, "{line}"),
            _ => tracing::warn!(workload = %workload, "{line}"),
        }
        std::fs::create_dir_all(&result.artifacts)
            .with_context(|| format!("creating {}", result.artifacts.display()))?;
        let verdict = serde_json::json!({
            "id": result.id,
            "workload": result.workload,
            "target": result.target,
            "verdict": result.verdict.to_string(),
            "verdict_kind": result.verdict.kind,
            "reasons": result.verdict.reasons,
            "trend": trend,
            "comparison": result.comparison,
            "started_unix_ms": result.started_unix_ms,
            "finished_unix_ms": result.finished_unix_ms,
        });
        let path = result.artifacts.join("verdict.json");
        std::fs::write(&path, serde_json::to_vec_pretty(&verdict)?)
            .with_context(|| format!("writing {}", path.display()))?;
        self.history.insert(&RunRow::from(&*result))?;
        // A workload gone from the config keeps its history until it ages out (it may come
        // back); the count limit applies only to configured ones.
        let mut doomed =
            self.history
                .prune(workload, config.retention_runs, config.retention_age)?;
        for name in self.history.workloads()? {
            if !config.workloads.iter().any(|c| c.name == name) {
                doomed.extend(
                    self.history
                        .prune(&name, usize::MAX, config.retention_age)?,
                );
            }
        }
        for dir in doomed {
            // Only ever delete inside the artifacts tree.
            if dir.starts_with(&config.artifacts_dir) && dir.exists() {
                if let Err(e) = std::fs::remove_dir_all(&dir) {
                    tracing::warn!("retention: removing {}: {e}", dir.display());
                }
            }
        }
        Ok(())
    }

    /// What runs now, for systemd's STATUS= line.
    fn status_line(&self) -> String {
        let progress = self.progress.lock().unwrap();
        if progress.is_empty() {
            let last = self.metrics.last_verdicts();
            return match last.is_empty() {
                true => "idle; waiting for the first scheduled run".into(),
                false => format!("idle; last runs: {}", last.join(", ")),
            };
        }
        let parts: Vec<String> = progress
            .iter()
            .map(|(w, p)| {
                format!(
                    "{w} ({}/{} done)",
                    p.done.load(Ordering::Relaxed),
                    p.total.load(Ordering::Relaxed)
                )
            })
            .collect();
        format!("running {}", parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A daemon over a history in `dir`, with one workload `w` on target `t`, whose runs
    /// are carried out by `runner`.
    fn daemon(dir: &Path, runner: Runner) -> (Arc<Daemon>, Arc<Config>) {
        let text = format!(
            "state_dir = {:?}\n[targets.t]\nurl = \"http://127.0.0.1:9\"\nmodel = \"m\"\n\
             [workloads.w]\ntarget = \"t\"\ntrace = \"bundled\"\nevery = \"1h\"\n",
            dir.display().to_string()
        );
        let config = Config::parse(&text, Path::new("test.toml"), dir).unwrap();
        let metrics = Arc::new(StatusMetrics::default());
        let d = Arc::new(Daemon {
            history: Arc::new(History::open(&dir.join("history.sqlite")).unwrap()),
            metrics: metrics.clone(),
            sinks: Arc::new(Sinks(vec![metrics as Arc<dyn RunSink>])),
            ctx: RunContext::default(),
            shutdown: CancellationToken::new(),
            target_locks: Mutex::default(),
            tasks: Mutex::default(),
            previous_due: Mutex::default(),
            progress: Mutex::default(),
            runner,
        });
        (d, Arc::new(config))
    }

    fn panicking(
        _: Arc<Daemon>,
        _: Arc<Config>,
        _: Workload,
        _: String,
        _: Arc<Progress>,
    ) -> RunFuture {
        Box::pin(async { panic!("replay blew up: index 3 of 2") })
    }

    fn unreachable_run(
        _: Arc<Daemon>,
        _: Arc<Config>,
        _: Workload,
        _: String,
        _: Arc<Progress>,
    ) -> RunFuture {
        Box::pin(async { unreachable!("the run must not start") })
    }

    #[tokio::test]
    async fn a_panicking_run_is_an_error_verdict_and_the_workload_runs_again() {
        let dir = tempfile::tempdir().unwrap();
        let (d, c) = daemon(dir.path(), panicking);
        let w = c.workloads[0].clone();
        for _ in 0..2 {
            d.start_run(c.clone(), w.clone()).await.unwrap();
            // Not left "running": the next due time runs it instead of skipping it.
            assert!(d.metrics.running().is_empty(), "{:?}", d.metrics.running());
            assert!(d.progress.lock().unwrap().is_empty());
        }
        let runs = d.history.recent(Some("w"), 10).unwrap();
        assert_eq!(runs.len(), 2);
        for r in &runs {
            assert_eq!(
                r.verdict.to_string(),
                "error: the run panicked: replay blew up: index 3 of 2"
            );
            assert!(r.artifacts.join("verdict.json").exists());
        }
    }

    #[tokio::test]
    async fn a_stop_while_waiting_for_the_target_is_a_skip_not_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let (d, c) = daemon(dir.path(), unreachable_run);
        // Another workload's run holds the target.
        let lock = Arc::new(tokio::sync::Mutex::new(()));
        d.target_locks
            .lock()
            .unwrap()
            .insert("t".into(), lock.clone());
        let _turn = lock.lock().await;
        let task = d.start_run(c.clone(), c.workloads[0].clone());
        d.shutdown.cancel();
        task.await.unwrap();
        assert!(d.metrics.running().is_empty());
        assert!(d.history.recent(Some("w"), 10).unwrap().is_empty());
        assert!(
            d.metrics
                .render()
                .contains("canaryd_skips_total{workload=\"w\"} 1"),
            "{}",
            d.metrics.render()
        );
    }
}

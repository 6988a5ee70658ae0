//! `canaryd run`: the long-running daemon. Load the config, lock the state directory, open the
//! history, bind the status endpoint, record the runs a killed process left without a verdict,
//! schedule every workload, tell systemd it is ready, then wait for signals:
//! SIGHUP reloads the config (a bad one is logged and the running one kept), SIGTERM or
//! SIGINT stop dispatching, give in-flight requests their grace period, record the partial
//! runs as `interrupted`, flush the sinks and exit 0.
//!
//! Runs of one workload never overlap: a run due while the previous one is still going (or
//! waiting for its target) is skipped and counted. Two workloads on one target take turns
//! unless the target sets `allow_concurrent_runs`.

pub mod history;
mod notify;
pub mod recovery;
pub mod run_result;
mod scheduler;
pub mod sinks;
pub(crate) mod state_lock;
pub mod status;
pub mod workload;

use crate::config::{self, Config};
use anyhow::{Context, Result};
use canary_replay::workers::RealtimeWorkers;
use history::History;
use notify::Notifier;
use scheduler::{Daemon, Schedulers};
use sinks::{RunSink, Sinks};
use state_lock::StateLock;
use status::StatusMetrics;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use workload::RunContext;

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

/// Runs the daemon until SIGTERM or SIGINT; returns the exit code. `workers` is the
/// runtime's: the config's `realtime_workers` sets it, at start and on reload.
pub async fn run(args: RunArgs, workers: RealtimeWorkers) -> Result<i32> {
    // Handlers first: a SIGTERM during start-up is then a clean stop, not a kill.
    let mut signals = Signals::install()?;
    let (config_path, mut config, sim) = resolve(&args).await?;
    // What check-config calls an error is one here too (as a bad file is): a trace with a bad
    // row would otherwise make every run of its workload an error, unseen until the first.
    if let Some(path) = &config_path {
        let stop = CancellationToken::new();
        tokio::select! {
            checked = check_traces(path, &config, &stop) => {
                for warning in checked?.iter().flatten().filter_map(|c| c.warning()) {
                    tracing::warn!("{warning}");
                }
            }
            _ = signals.stop() => {
                stop.cancel();
                tracing::info!(
                    "stopping: the stop came while the traces were checked; nothing was scheduled"
                );
                return Ok(0);
            }
        }
    }
    workers.set(config.realtime_workers);
    if let Some(addr) = args.status_listen {
        config.status_listen = addr;
    }
    let mut locks = StateLocks::acquire(&config)?;
    let history = Arc::new(History::open(&config.state_dir.join("history.sqlite"))?);
    let metrics = Arc::new(StatusMetrics::default());
    // Read once: /metrics and the OTLP export seed their last runs from the same runs.
    let latest = sinks::last_run::stored(&history);
    metrics.seed(&latest);
    let status = StatusEndpoint::start(&config, &metrics, &history).await?;
    if sim.is_some() {
        // A daemon goes on whatever its stdout is.
        if let Err(e) = print_embedded_banner(status.addr, &config) {
            tracing::warn!("printing the banner: {e}");
        }
    }
    let (daemon, sinks) = start_daemon(&config, history, &metrics, &latest);
    // Before the first run: a run folder of this workload could otherwise be mistaken for
    // one the previous process left behind.
    daemon.recover_orphans(&config);
    // A restart resumes each cadence from the last run's start rather than running at once.
    daemon.resume_cadences();
    let notifier = Notifier::from_env();
    // A SIGTERM during start-up (recovery can take a while) waited until here: stop now,
    // before READY and before a run starts only to be cut short.
    if signals.stop_pending().await {
        tracing::info!("stopping: the stop came during start-up; nothing was scheduled");
        notifier.send("STOPPING=1");
    } else {
        // Ready before the first run can start: whoever sees a run going (`canaryd_running
        // 1`) then never finds `/readyz` still 503 (seen under load when this came after).
        notifier.send("READY=1");
        metrics.set_ready(true);
        let schedulers = daemon.schedule(Arc::new(config.clone()));
        let running = Running {
            args: &args,
            config_path: config_path.as_deref(),
            daemon: &daemon,
            metrics: &metrics,
            notifier: &notifier,
            workers: &workers,
        };
        let schedulers = running
            .until_stopped(&mut signals, config, schedulers, &mut locks)
            .await;
        tracing::info!("stopping: no new runs; in-flight requests get their grace period");
        notifier.send("STOPPING=1");
        metrics.set_ready(false);
        schedulers.cancel();
    }
    daemon.stop_runs();
    // A second stop signal quits at once, whichever it is (`kill` and `systemctl kill` send
    // SIGTERM; a second one used to be ignored while a second Ctrl-C quit).
    tokio::select! {
        _ = daemon.drain() => {}
        _ = signals.int.recv() => {
            tracing::warn!("second SIGINT: quitting without waiting for runs");
            return Ok(130);
        }
        _ = signals.term.recv() => {
            tracing::warn!("second SIGTERM: quitting without waiting for runs");
            return Ok(143);
        }
    }
    // Flushing blocks (exporters send with a deadline): off the async workers.
    let flushing = sinks.clone();
    let _ = tokio::task::spawn_blocking(move || flushing.flush()).await;
    status.stop().await;
    if let Some(sim) = sim {
        let _ = sim.shutdown().await;
    }
    tracing::info!("stopped");
    drop(locks);
    Ok(0)
}

/// The signals the daemon acts on.
struct Signals {
    hup: Signal,
    term: Signal,
    int: Signal,
}

impl Signals {
    fn install() -> Result<Signals> {
        Ok(Signals {
            hup: signal(SignalKind::hangup()).context("installing the SIGHUP handler")?,
            term: signal(SignalKind::terminate()).context("installing the SIGTERM handler")?,
            int: signal(SignalKind::interrupt()).context("installing the SIGINT handler")?,
        })
    }

    /// The next SIGTERM or SIGINT.
    async fn stop(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }

    /// Whether a SIGTERM or SIGINT came already (taken if so); never waits.
    async fn stop_pending(&mut self) -> bool {
        tokio::select! {
            biased;
            _ = self.term.recv() => true,
            _ = self.int.recv() => true,
            () = std::future::ready(()) => false,
        }
    }
}

/// The state directory's lock and the artifacts directory's: held until dropped, at the end
/// of [`run`].
struct StateLocks {
    state: StateLock,
    artifacts: Option<StateLock>,
}

impl StateLocks {
    /// Before the history is opened or anything is scheduled: a second daemon on this
    /// state_dir (or artifacts_dir) stops here, naming the first.
    fn acquire(config: &Config) -> Result<StateLocks> {
        let state = StateLock::acquire(&config.state_dir, "state_dir")?;
        tracing::debug!("holding {}", state.path().display());
        // The artifacts are as much this daemon's, wherever they are (the default is inside
        // the state_dir, and another daemon's state_dir may point its artifacts_dir there):
        // another one would take its runs in progress for runs whose process died, write in
        // their folders and apply its retention to them. One lock file serves a shared folder.
        let artifacts = match config.artifacts_dir == config.state_dir {
            true => None,
            false => Some(StateLock::acquire(&config.artifacts_dir, "artifacts_dir")?),
        };
        Ok(StateLocks { state, artifacts })
    }

    /// Takes a lock again whose file was removed while it was held (a second daemon could
    /// otherwise start on the same folders). When another process took it first, the daemon
    /// is unhealthy (`/healthz` 503, no watchdog pings) until it holds the lock again, which
    /// it tries at every call; each loss is said once, and its end too.
    fn keep(&mut self, metrics: &StatusMetrics) {
        for lock in std::iter::once(&mut self.state).chain(self.artifacts.as_mut()) {
            let path = lock.path().display().to_string();
            match lock.keep() {
                Ok(false) => {}
                Ok(true) if metrics.lock_held(&path) => tracing::warn!(
                    "the lock {path} is held again (its other holder let go): healthy again \
                     unless something else is wrong"
                ),
                Ok(true) => tracing::warn!(
                    "the lock file {path} was removed or replaced while canaryd ran: taken again"
                ),
                Err(e) => {
                    let why = format!("lost the lock {path}: {e:#}");
                    if metrics.lock_lost(&path, why.clone()) {
                        tracing::error!(
                            "{why}; /healthz says unhealthy and the watchdog stops until \
                             canaryd holds it again"
                        );
                    }
                }
            }
        }
    }
}

/// The status endpoint, served in a task of its own until stopped.
struct StatusEndpoint {
    addr: SocketAddr,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl StatusEndpoint {
    async fn start(
        config: &Config,
        metrics: &Arc<StatusMetrics>,
        history: &Arc<History>,
    ) -> Result<StatusEndpoint> {
        let listener = status::bind(config.status_listen).await?;
        let addr = listener.local_addr()?;
        let stop = CancellationToken::new();
        let task = tokio::spawn(status::serve(
            listener,
            metrics.clone(),
            history.clone(),
            stop.clone(),
        ));
        tracing::info!("status endpoint on http://{addr} (/healthz /readyz /metrics /api/runs)");
        Ok(StatusEndpoint { addr, stop, task })
    }

    async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

/// The scheduler and the sinks every finished run goes to: the status metrics, and OTLP
/// when configured (one exporter for the process; `[otlp]` changes take effect at restart).
fn start_daemon(
    config: &Config,
    history: Arc<History>,
    metrics: &Arc<StatusMetrics>,
    latest: &[history::ListedRow],
) -> (Arc<Daemon>, Arc<Sinks>) {
    let otlp = sinks::otlp::OtlpSink::start(config, metrics.clone(), latest);
    let mut sink_list = vec![metrics.clone() as Arc<dyn RunSink>];
    sink_list.extend(otlp.clone().map(|o| o as Arc<dyn RunSink>));
    let sinks: Arc<Sinks> = Arc::new(Sinks(sink_list));
    let daemon = Daemon::new(
        history,
        metrics.clone(),
        sinks.clone(),
        RunContext::with_otlp(otlp),
    );
    (daemon, sinks)
}

/// The running daemon, between READY and the stop signal.
struct Running<'a> {
    args: &'a RunArgs,
    config_path: Option<&'a Path>,
    daemon: &'a Arc<Daemon>,
    metrics: &'a StatusMetrics,
    notifier: &'a Notifier,
    workers: &'a RealtimeWorkers,
}

impl Running<'_> {
    /// Serves SIGHUP (reload), systemd's watchdog and status line until SIGTERM or SIGINT;
    /// returns the schedulers running then. A scheduler that ends unasked makes the daemon
    /// unhealthy: `/healthz` 503 and no more watchdog pings, so systemd (or a liveness
    /// probe) restarts it, rather than a workload never running again unseen. A lost lock
    /// stops the pings too; a failing history write is said but does not.
    async fn until_stopped(
        &self,
        signals: &mut Signals,
        mut config: Config,
        mut schedulers: Schedulers,
        locks: &mut StateLocks,
    ) -> Schedulers {
        let watchdog = Notifier::watchdog_interval();
        let mut watchdog_tick =
            tokio::time::interval(watchdog.unwrap_or(Duration::from_secs(3600)));
        let mut status_tick = tokio::time::interval(Duration::from_secs(5));
        let mut checking: Option<Checking> = None;
        loop {
            while let Some(why) = schedulers.ended().await {
                tracing::error!("{why}; /healthz now says unhealthy and the watchdog stops");
                self.metrics.set_unhealthy(why);
            }
            tokio::select! {
                _ = signals.hup.recv() => match self.config_path {
                    None => tracing::warn!("SIGHUP: running the embedded default, no config file to reload"),
                    // A check still under way is dropped (and its load stopped): the file as
                    // it is now is the one wanted.
                    Some(path) => checking = Some(Checking::start(path, self.args, &config)),
                },
                checked = Checking::finished(&mut checking) => {
                    checking = None;
                    match checked {
                        Ok(Some(new)) => {
                            self.workers.set(new.realtime_workers);
                            schedulers.cancel();
                            schedulers = self.daemon.schedule(Arc::new(new.clone()));
                            // The schedulers' reasons alone: a lost lock or a failing
                            // history is not cured by a reload.
                            self.metrics.clear_unhealthy();
                            config = new;
                            self.metrics.reloaded(true);
                        }
                        Ok(None) => {}
                        Err(e) => {
                            self.metrics.reloaded(false);
                            tracing::error!(
                                "SIGHUP: config rejected, the running config stays: {e:#}"
                            );
                        }
                    }
                },
                _ = signals.term.recv() => return schedulers,
                _ = signals.int.recv() => return schedulers,
                // Withheld for what a restart cures alone: a history that cannot be written
                // is said (`/healthz`, `STATUS=`), but systemd killing the daemon would only
                // take its runs in flight with it.
                _ = watchdog_tick.tick(), if watchdog.is_some() => {
                    if self.metrics.restart_cures().is_empty() {
                        self.notifier.send("WATCHDOG=1");
                    }
                }
                _ = status_tick.tick() => {
                    locks.keep(self.metrics);
                    let line = self.daemon.status_line();
                    match self.metrics.unhealthy() {
                        why if why.is_empty() => self.notifier.status(&line),
                        why => self.notifier.status(&format!("unhealthy: {}; {line}", why.join("; "))),
                    }
                }
            }
        }
    }
}

/// A SIGHUP's reload being checked, in a task of its own: loading a large trace may take a
/// while, and stops, the watchdog and the status line go on meanwhile. Dropped, it stops.
struct Checking {
    stop: CancellationToken,
    task: JoinHandle<Result<Option<Config>>>,
}

impl Checking {
    fn start(path: &Path, args: &RunArgs, running: &Config) -> Checking {
        let stop = CancellationToken::new();
        let task = tokio::spawn(reload(
            path.to_owned(),
            args.status_listen,
            running.clone(),
            stop.clone(),
        ));
        Checking { stop, task }
    }

    /// The reload's outcome (`None`: it was stopped); never ready while none is checked.
    async fn finished(checking: &mut Option<Checking>) -> Result<Option<Config>> {
        match checking {
            Some(c) => (&mut c.task)
                .await
                .unwrap_or_else(|e| Err(anyhow::anyhow!("checking the file failed: {e}"))),
            None => std::future::pending().await,
        }
    }
}

impl Drop for Checking {
    fn drop(&mut self) {
        self.stop.cancel();
        self.task.abort();
    }
}

/// Loads `path` again for SIGHUP, with what check-config checks: the file, then each
/// workload's trace loaded as its runs will load it (a bad row is refused here, naming its
/// file, line and field, rather than failing every run). Runs in flight finish under the
/// config they started with. `None`: `stop` ended the check.
async fn reload(
    path: PathBuf,
    status_listen: Option<SocketAddr>,
    running: Config,
    stop: CancellationToken,
) -> Result<Option<Config>> {
    let mut new = Config::load(&path)?;
    if let Some(addr) = status_listen {
        new.status_listen = addr;
    }
    let Some(checked) = check_traces(&path, &new, &stop).await? else {
        return Ok(None);
    };
    for warning in checked.iter().filter_map(|c| c.warning()) {
        tracing::warn!("{warning}");
    }
    // These are held open from the start (the status socket, the state lock, the history, the
    // exporters): the running values stay until a restart, and a later SIGHUP warns again.
    // Runs written under another artifacts_dir than the history's would never be pruned.
    let shown = |p: &Path| p.display().to_string();
    for (field, old, now) in [
        (
            "status.listen",
            running.status_listen.to_string(),
            new.status_listen.to_string(),
        ),
        (
            "state_dir",
            shown(&running.state_dir),
            shown(&new.state_dir),
        ),
        (
            "artifacts_dir",
            shown(&running.artifacts_dir),
            shown(&new.artifacts_dir),
        ),
    ] {
        if old != now {
            tracing::warn!(
                "SIGHUP: {field} changes take effect at restart ({old} → {now}): {old} stays \
                 until then"
            );
        }
    }
    new.status_listen = running.status_listen;
    new.state_dir = running.state_dir.clone();
    new.artifacts_dir = running.artifacts_dir.clone();
    if new.otlp != running.otlp {
        let off = || "export off".to_owned();
        let (old, now) = (
            running.otlp.describe().unwrap_or_else(off),
            new.otlp.describe().unwrap_or_else(off),
        );
        // Same endpoints and headers: another of its settings (a timeout, an interval).
        let what = match old == now {
            true => format!("{old}; another of its settings changed"),
            false => format!("{old} → {now}"),
        };
        tracing::warn!("SIGHUP: [otlp] changes take effect at restart ({what})");
        new.otlp = running.otlp.clone();
    }
    for warning in new.warnings() {
        tracing::warn!("{warning}");
    }
    tracing::info!(
        "SIGHUP: reloaded {} ({} workloads)",
        path.display(),
        new.workloads.len()
    );
    Ok(Some(new))
}

/// Loads and selects each workload's trace as its runs will, sending nothing (`check-config`,
/// the daemon's start and its reloads): every workload whose trace fails is said, at the line
/// of its `trace` key. `None`: `stop` ended it first.
pub(crate) async fn check_traces(
    path: &Path,
    c: &Config,
    stop: &CancellationToken,
) -> Result<Option<Vec<workload::TraceCheck>>> {
    let mut traces = Vec::new();
    let mut failed = Vec::new();
    for w in &c.workloads {
        let at = |line: Option<usize>| match line {
            Some(line) => format!("{}:{line}", path.display()),
            None => path.display().to_string(),
        };
        match workload::check_workload(c, w, stop).await {
            Ok(workload::TraceCheck::Stopped) => return Ok(None),
            Ok(mut checked) => {
                // At the line of its schedule (`every`), as the file's own warnings.
                if let workload::TraceCheck::Ok(_, Some(warning))
                | workload::TraceCheck::Synthetic(_, Some(warning)) = &mut checked
                {
                    *warning = format!("{}: {warning}", at(w.schedule_line));
                }
                traces.push(checked)
            }
            // An error about another key than `trace` (a sweep's points) is at that key's line.
            Err(e) => {
                let key = e.downcast_ref::<config::run_length::AtKey>();
                let line = key.map_or(w.trace_line, |k| k.line);
                failed.push(e.context(at(line)))
            }
        }
    }
    if failed.len() > 1 {
        let each: Vec<String> = failed.iter().map(|e| format!("{e:#}")).collect();
        anyhow::bail!(
            "{}: {} errors:\n  {}",
            path.display(),
            failed.len(),
            each.join("\n  ")
        );
    }
    match failed.pop() {
        Some(e) => Err(e),
        None => Ok(Some(traces)),
    }
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
    let state_directory = std::env::var_os("STATE_DIRECTORY");
    if !config::state_directory_given(state_directory.as_deref()) {
        if state_directory.is_some() {
            tracing::warn!(
                "STATE_DIRECTORY is set but empty; state goes to ./canaryd-data, as with no \
                 STATE_DIRECTORY"
            );
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A SIGTERM that came during start-up is seen before READY and the first schedule.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stop_during_start_up_is_seen_before_anything_is_scheduled() {
        let mut signals = Signals::install().unwrap();
        assert!(!signals.stop_pending().await);
        // SAFETY: raise(3) of a signal this process handles (installed above).
        assert_eq!(unsafe { libc::raise(libc::SIGTERM) }, 0);
        // The runtime's signal driver hands it on from another thread: polled, bounded.
        let mut seen = false;
        for _ in 0..200 {
            if signals.stop_pending().await {
                seen = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(seen, "the SIGTERM was never seen");
        // Taken: not seen twice.
        assert!(!signals.stop_pending().await);
    }

    /// The default artifacts_dir is inside the state_dir: a second daemon with a state_dir of
    /// its own pointing its artifacts_dir there is refused all the same (it would take the
    /// first one's run in progress for one whose process died, and prune its folders).
    #[test]
    fn an_artifacts_dir_inside_another_daemons_state_dir_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let config = |lines: &str, export: &str| {
            let text = format!(
                "{lines}\n[targets.t]\nurl = \"http://127.0.0.1:9\"\nmodel = \"m\"\n\
                 [workloads.w]\ntarget = \"t\"\ntrace = \"bundled\"\nevery = \"1h\"\n{export}"
            );
            Config::parse(&text, Path::new("test.toml"), dir.path()).unwrap()
        };
        let first = config(
            &format!(
                "state_dir = {:?}",
                dir.path().join("state2").display().to_string()
            ),
            "",
        );
        assert!(first.artifacts_dir.starts_with(&first.state_dir));
        let _held = StateLocks::acquire(&first).unwrap();
        let second = config(
            &format!(
                "state_dir = {:?}",
                dir.path().join("stateB").display().to_string()
            ),
            &format!(
                "[export]\nartifacts_dir = {:?}\n",
                first.artifacts_dir.display().to_string()
            ),
        );
        let e = format!("{:#}", StateLocks::acquire(&second).err().expect("refused"));
        assert!(
            e.contains("is running with artifacts_dir") && e.contains("state2/artifacts"),
            "{e}"
        );
    }
}

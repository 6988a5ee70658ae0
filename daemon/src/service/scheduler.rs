//! The scheduler: one loop per workload, its runs (one at a time per workload, in turn per
//! target unless it allows concurrent runs), and what happens to each finished run —
//! compared with the baseline, its verdict written and logged, stored, retention applied,
//! handed to the sinks.

mod announce;
mod grid;
mod wall;

use super::history::{History, RunRow};
use super::run_result::{new_run_id, Ran, RunResult};
use super::sinks::{RunSink, Sinks, SkipReason};
use super::status::StatusMetrics;
use super::workload::RunContext;
use crate::config::cadence::{OnOverrun, Ticker, WallClock};
use crate::config::{Config, Workload};
use crate::judge::baseline;
use crate::judge::capacity::CapacityBaseline;
use crate::judge::verdict::Verdict;
use anyhow::Result;
use canary_replay::Progress;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Runs recorded late placed in one pass at start: each row holds its whole summary (up to
/// 64 MiB of JSON), so a history replaced under a running daemon, which leaves every run late,
/// is placed a chunk at a time rather than all held at once.
const LATE_RUNS_PER_PASS: usize = 64;

/// Shared state of the scheduler and its runs; survives reloads.
pub(super) struct Daemon {
    history: Arc<History>,
    metrics: Arc<StatusMetrics>,
    sinks: Arc<Sinks>,
    ctx: RunContext,
    /// Cancelled on SIGTERM: runs stop dispatching and finish within their grace period.
    shutdown: CancellationToken,
    /// One turn at a time per server, by its URL: two targets naming one server share it.
    target_locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Workloads with a run in progress (waiting for the target's turn included).
    running: Mutex<HashSet<String>>,
    /// Told each time a workload's run ends ([`RunningGuard`]'s drop): a due run waiting for
    /// it (`on_overrun = "start_when_free"`) starts then.
    freed: tokio::sync::Notify,
    /// Turns taken: the server (a key of `target_locks`) and the workload whose run holds it.
    turns: Mutex<HashMap<String, String>>,
    /// Runs waiting for a turn: the workload and the server it waits for.
    waiting: Mutex<HashMap<String, String>>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// Each workload's last due time, kept across reloads so a SIGHUP does not re-run it;
    /// seeded at start from its last run's due time, or its start when that is not known
    /// ([`Daemon::resume_cadences`]).
    previous_due: Mutex<HashMap<String, SystemTime>>,
    progress: Mutex<HashMap<String, Arc<Progress>>>,
    /// Carries out one run: [`replay_run`]; tests put a stand-in here.
    runner: Runner,
    /// The wall clock the schedules follow: `SystemTime::now`; tests step it back.
    wall: WallClock,
}

/// A run in progress, boxed so the runner can be swapped.
type RunFuture = Pin<Box<dyn Future<Output = Ran> + Send>>;

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
        // The run's context is compared with its newest baseline run's, read before it
        // starts (no other run of the workload can finish meanwhile).
        // The history is SQLite behind a mutex a status query may hold a while: read off
        // the async threads.
        let (history, name) = (d.history.clone(), w.name.clone());
        let read = tokio::task::spawn_blocking(move || history.baseline_context(&name)).await;
        let baseline = match read {
            Ok(Ok(b)) => b,
            Ok(Err(e)) => {
                tracing::error!(workload = %w.name, "reading the baseline run's context: {e:#}");
                None
            }
            Err(e) => {
                tracing::error!(workload = %w.name, "reading the baseline run's context: {e}");
                None
            }
        };
        d.ctx
            .run(&config, &w, id, baseline, shutdown, progress)
            .await
    })
}

/// Marks a workload as running until dropped, however its run ends (a panic included):
/// a flag left set would have every later run of the workload skipped.
struct RunningGuard {
    daemon: Arc<Daemon>,
    workload: String,
}

impl RunningGuard {
    /// Marks `workload` running; `None` when a run of it already is. The check and the mark
    /// are one step: two schedulers of one workload (a reload's old and new, due at the same
    /// instant) cannot both start a run.
    fn take(daemon: &Arc<Daemon>, workload: &str) -> Option<RunningGuard> {
        if !daemon.running.lock().unwrap().insert(workload.to_string()) {
            return None;
        }
        daemon.metrics.set_running(workload, true);
        Some(RunningGuard {
            daemon: daemon.clone(),
            workload: workload.to_string(),
        })
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
        self.daemon
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.workload);
        // After the removal: a waiter told now finds the workload free.
        self.daemon.freed.notify_waiters();
    }
}

/// How a run came to start: the due time its schedule gave it (before jitter; `None` for a
/// run no cadence started, a `start_at` grid's) and, for a run that waited for its previous
/// run to end (`on_overrun = "start_when_free"`), how long after its tick it started.
#[derive(Debug, Clone, Copy, Default)]
struct Start {
    due: Option<SystemTime>,
    late: Option<std::time::Duration>,
}

/// What a run waited for before it started, written to its `verdict.json`.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Waits {
    /// For its turn on its servers (0: every turn was free).
    pub(super) turn: std::time::Duration,
    /// For its previous run to end, after its tick (`None`: it did not wait).
    pub(super) late: Option<std::time::Duration>,
}

/// The workloads' schedulers, one task each, until cancelled.
pub(super) struct Schedulers {
    stop: CancellationToken,
    tasks: Vec<(String, JoinHandle<()>)>,
}

impl Schedulers {
    /// Stops every scheduler (runs in progress go on).
    pub(super) fn cancel(&self) {
        self.stop.cancel();
    }

    /// Why a scheduler died without being stopped (a bug: a panic in its loop), naming its
    /// workload; each is told once. Its workload would otherwise never run again while
    /// `/healthz` and systemd's watchdog went on saying all is well. One that returned has
    /// no more runs to start (a calendar that ends): logged, not a failure.
    pub(super) async fn ended(&mut self) -> Option<String> {
        while !self.stop.is_cancelled() {
            let i = self.tasks.iter().position(|(_, t)| t.is_finished())?;
            let (workload, task) = self.tasks.swap_remove(i);
            let why = match task.await {
                Ok(()) => {
                    tracing::info!(workload = %workload, "its schedule has no more runs");
                    continue;
                }
                Err(e) if e.is_panic() => format!("panicked: {}", panic_message(e)),
                Err(e) => e.to_string(),
            };
            return Some(format!(
                "the scheduler of workload {workload} ended ({why}): it runs no more"
            ));
        }
        None
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
    /// A daemon whose runs are the workloads' replays, recorded in `history` and handed to
    /// `sinks`.
    pub(super) fn new(
        history: Arc<History>,
        metrics: Arc<StatusMetrics>,
        sinks: Arc<Sinks>,
        ctx: RunContext,
    ) -> Arc<Daemon> {
        Arc::new(Daemon {
            history,
            metrics,
            sinks,
            ctx,
            shutdown: CancellationToken::new(),
            target_locks: Mutex::default(),
            tasks: Mutex::default(),
            running: Mutex::default(),
            freed: tokio::sync::Notify::new(),
            turns: Mutex::default(),
            waiting: Mutex::default(),
            previous_due: Mutex::default(),
            progress: Mutex::default(),
            runner: replay_run,
            wall: SystemTime::now,
        })
    }

    /// Stops the runs: no new requests; in-flight ones get their grace period.
    pub(super) fn stop_runs(&self) {
        self.shutdown.cancel();
    }

    /// Waits for every run task to end.
    pub(super) async fn drain(&self) {
        loop {
            let task = self.tasks.lock().unwrap().pop();
            match task {
                Some(t) => {
                    let _ = t.await;
                }
                None => break,
            }
        }
    }

    /// Starts one scheduler per workload; [`Schedulers::cancel`] stops them (runs go on).
    pub(super) fn schedule(self: &Arc<Self>, config: Arc<Config>) -> Schedulers {
        let stop = CancellationToken::new();
        let mut tasks = Vec::new();
        // A workload the config no longer has stops showing, in the status metrics and OTLP.
        let names: Vec<String> = config.workloads.iter().map(|w| w.name.clone()).collect();
        self.metrics.retain_workloads(&names);
        self.ctx.retain_workloads(&config);
        self.previous_due
            .lock()
            .unwrap()
            .retain(|w, _| names.contains(w));
        // The turns of servers no target names any more go, unless a run holds or waits for
        // one (it holds a clone of its lock).
        let servers: HashSet<String> = config.targets.values().flat_map(servers).collect();
        self.target_locks
            .lock()
            .unwrap()
            .retain(|k, lock| servers.contains(k) || Arc::strong_count(lock) > 1);
        for w in &config.workloads {
            tracing::info!(
                workload = %w.name,
                "scheduled {} against {}{}",
                w.cadence.describe(),
                w.target,
                self.next_run_said(w)
            );
            if let Some(why) = unbounded_run(&config, w) {
                tracing::warn!(workload = %w.name, "{why}");
            }
            let (d, c, w, s) = (self.clone(), config.clone(), w.clone(), stop.clone());
            let name = w.name.clone();
            tasks.push((
                name,
                tokio::spawn(async move { d.schedule_loop(c, w, s).await }),
            ));
        }
        Schedulers { stop, tasks }
    }

    async fn schedule_loop(
        self: Arc<Self>,
        config: Arc<Config>,
        w: Workload,
        stop: CancellationToken,
    ) {
        if let Some(start) = w.start_at.clone() {
            return self.grid_loop(config, w, start, stop).await;
        }
        // Kept across a reload even when the cadence changed: the next run follows the last
        // one by the new cadence, where starting afresh would run it at once.
        let mut previous = self.previous_due.lock().unwrap().get(&w.name).copied();
        let mut ticker = Ticker::resume(w.cadence.clone(), previous, self.wall);
        let mut watch = wall::WallWatch::new(self.wall, &w.name);
        // Said once per spell of overlapping runs (and again when its reason changes), not at
        // every tick (`every = "1s"` and a minute-long run logged a warning a second);
        // canaryd_skips_total counts them all.
        let mut overlapping: Option<SkipReason> = None;
        loop {
            // Before jitter: what the ticker waits for next.
            let next = w.cadence.next_due((self.wall)(), previous);
            self.metrics.set_next_run(&w.name, next);
            tokio::select! {
                tick = ticker.tick(&stop) => {
                    if tick.is_none() {
                        return;
                    }
                }
                () = watch.stepped_back() => {
                    // The tick waited for was computed before the step: again, from now.
                    ticker = Ticker::resume(w.cadence.clone(), previous, self.wall);
                    let next = w.cadence.next_due((self.wall)(), previous);
                    tracing::info!(workload = %w.name, "rescheduled after the clock stepped back{}", said_next(next, &w));
                    continue;
                }
            }
            previous = ticker.previous();
            if let Some(due) = previous {
                self.previous_due
                    .lock()
                    .unwrap()
                    .insert(w.name.clone(), due);
            }
            let start = Start {
                due: previous,
                late: None,
            };
            let mut started = self.start_run_for(config.clone(), w.clone(), start);
            if started.is_none() && w.on_overrun == OnOverrun::StartWhenFree {
                started = self.start_when_free(&config, &w, previous, &stop).await;
            }
            let Some(task) = started else {
                if stop.is_cancelled() {
                    // A reload or a shutdown while the run waited to start late: it does not
                    // start (a reload's new schedule goes on from the next due time), and is
                    // counted as `stopping`, not as an overrun.
                    tracing::info!(
                        workload = %w.name,
                        "a reload or a stop came while the run due waited for the one before: \
                         skipped (canaryd_skips_total{{reason=\"stopping\"}})"
                    );
                    self.sinks.run_skipped(&w.name, SkipReason::Stopping);
                    continue;
                }
                let (reason, why) = self.why_busy(&w.name);
                match overlapping.replace(reason) == Some(reason) {
                    false => tracing::warn!(
                        workload = %w.name,
                        "due again while {why}: skipped (said once until a run starts again or \
                         the reason changes; canaryd_skips_total{{reason=\"{}\"}} counts every skip)",
                        reason.as_str()
                    ),
                    true => tracing::debug!(workload = %w.name, "due again while {why}: skipped"),
                }
                self.sinks.run_skipped(&w.name, reason);
                continue;
            };
            overlapping = None;
            let mut tasks = self.tasks.lock().unwrap();
            tasks.retain(|t| !t.is_finished());
            tasks.push(task);
        }
    }

    /// Marks the workload running and runs it once in a task of its own; `None` when a run
    /// of it is still going.
    fn start_run(self: &Arc<Self>, config: Arc<Config>, w: Workload) -> Option<JoinHandle<()>> {
        self.start_run_for(config, w, Start::default())
    }

    /// [`Self::start_run`] for a run started as `start` says.
    fn start_run_for(
        self: &Arc<Self>,
        config: Arc<Config>,
        w: Workload,
        start: Start,
    ) -> Option<JoinHandle<()>> {
        let running = RunningGuard::take(self, &w.name)?;
        let d = self.clone();
        Some(tokio::spawn(async move {
            let _running = running;
            d.run_once(config, w, start).await
        }))
    }

    /// `on_overrun = "start_when_free"`: the run due at `due` found the previous one still
    /// going; it starts as soon as that one ends, if that is before the next due time (one
    /// waits at most: the scheduler's loop waits here, its next tick not yet taken). `None`
    /// when the next due time (measured on the monotonic clock from now, so a clock step does
    /// not stretch it) or a stop comes first: a skip, as with `skip`.
    async fn start_when_free(
        self: &Arc<Self>,
        config: &Arc<Config>,
        w: &Workload,
        due: Option<SystemTime>,
        stop: &CancellationToken,
    ) -> Option<JoinHandle<()>> {
        let due = due?;
        let next = w.cadence.next_due(due, Some(due));
        let left = next.duration_since((self.wall)()).ok()?;
        let asked = std::time::Instant::now();
        let deadline = tokio::time::Instant::now() + left;
        loop {
            // Listening before looking: a run that ends between the two is not missed.
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            let start = Start {
                due: Some(due),
                late: Some(asked.elapsed()),
            };
            if let Some(task) = self.start_run_for(config.clone(), w.clone(), start) {
                return Some(task);
            }
            tokio::select! {
                () = &mut freed => {}
                () = tokio::time::sleep_until(deadline) => return None,
                () = stop.cancelled() => return None,
            }
        }
    }

    /// Waits for the target's turn, runs, records. Whatever ran is recorded: a run that
    /// panics becomes an `error` verdict with the panic's message; a stop while waiting for
    /// the target, or before the run's first measured request, is a skip.
    async fn run_once(self: Arc<Self>, config: Arc<Config>, w: Workload, start: Start) {
        let target = &config.targets[&w.target];
        // One turn per server, on every server the target's URLs reach, taken in one order
        // (the keys sorted) so that two targets sharing servers cannot each hold one.
        let locks: Vec<(String, Arc<tokio::sync::Mutex<()>>)> = match target.allow_concurrent_runs {
            true => Vec::new(),
            false => {
                let mut all = self.target_locks.lock().unwrap();
                servers(target)
                    .into_iter()
                    .map(|k| {
                        let lock = all.entry(k.clone()).or_default().clone();
                        (k, lock)
                    })
                    .collect()
            }
        };
        let mut _turns = Vec::with_capacity(locks.len());
        // Let go of (and forgotten as holder) when the run ends, however it ends.
        let mut held = TurnsHeld {
            daemon: self.clone(),
            workload: w.name.clone(),
            servers: Vec::new(),
        };
        let asked = std::time::Instant::now();
        let mut waited_for = None;
        for (server, lock) in locks {
            let guard = match lock.clone().try_lock_owned() {
                Ok(g) => g,
                Err(_) => {
                    let holder = self.turns.lock().unwrap().get(&server).cloned();
                    waited_for = Some((server.clone(), holder));
                    self.waiting
                        .lock()
                        .unwrap()
                        .insert(w.name.clone(), server.clone());
                    let got = tokio::select! {
                        g = lock.lock_owned() => Some(g),
                        _ = self.shutdown.cancelled() => None,
                    };
                    self.waiting.lock().unwrap().remove(&w.name);
                    let Some(g) = got else {
                        // Never started, so not a failed run (a restart would raise error
                        // alerts for every queued workload): a skip, counted and logged.
                        tracing::info!(
                            workload = %w.name,
                            "not started: the daemon stopped while the run waited for its turn on server {server} (target {})",
                            target.name
                        );
                        self.sinks.run_skipped(&w.name, SkipReason::Stopping);
                        return;
                    };
                    g
                }
            };
            _turns.push(guard);
            self.turns
                .lock()
                .unwrap()
                .insert(server.clone(), w.name.clone());
            held.servers.push(server);
        }
        // Measured on the monotonic clock: 0 when every turn was free.
        let turn_wait = match waited_for {
            Some(_) => asked.elapsed(),
            None => std::time::Duration::ZERO,
        };
        self.metrics.set_turn_wait(&w.name, turn_wait);
        self.metrics
            .set_start_late(&w.name, start.late.unwrap_or_default());
        if let Some(late) = start.late {
            tracing::info!(
                workload = %w.name,
                "started {:.3} s after its tick: its previous run was still going when it was \
                 due (on_overrun = \"start_when_free\": a late start, not a skip)",
                late.as_secs_f64()
            );
        }
        if let Some((server, holder)) = &waited_for {
            tracing::info!(
                workload = %w.name,
                "starts {:.3} s late: it waited for its turn on server {server}{}",
                turn_wait.as_secs_f64(),
                holder
                    .as_ref()
                    .map(|h| format!(" (held by workload {h} when it asked)"))
                    .unwrap_or_default()
            );
        }
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
        let mut result = match tokio::spawn(run).await {
            Ok(Ran::Finished(result)) => result,
            Ok(Ran::NotStarted { result, why }) => return self.not_started(&config, &result, why),
            Err(e) => {
                let mut result = started;
                result.run.verdict =
                    Verdict::error(format!("the run panicked: {}", panic_message(e)));
                result.run.finished_unix_ms = crate::service::history::now_unix_ms();
                result
            }
        };
        result.run.due_unix_ms = start.due.map(unix_ms);
        // Comparing, storing and pruning touch SQLite and the disk: off the async threads,
        // where a slow history would stall every run's measurement and the watchdog.
        let (d, name) = (self.clone(), w.name.clone());
        let waits = Waits {
            turn: turn_wait,
            late: start.late,
        };
        let recorded = move || d.finish_waited(&config, &name, result, Some(waits));
        if let Err(e) = tokio::task::spawn_blocking(recorded).await {
            tracing::error!(workload = %w.name, "recording the run: {e}");
        }
    }

    /// A run a stop caught before its first measured request (see [`Ran::NotStarted`]): a
    /// skip, logged and counted, not recorded. Its folder, if the warm-up made one, goes: the
    /// next start would take it for a run whose process died.
    fn not_started(&self, config: &Config, result: &RunResult, why: &str) {
        let run = &result.run;
        tracing::info!(
            workload = %run.workload,
            run = %run.id,
            "not started: the daemon stopped {why}, before the first measured request (a skip, not recorded)"
        );
        if is_run_folder(&config.artifacts_dir, &run.artifacts) && run.artifacts.exists() {
            if let Err(e) = std::fs::remove_dir_all(&run.artifacts) {
                tracing::warn!(
                    "removing {}, the folder of a run that never started: {e}",
                    run.artifacts.display()
                );
            }
        }
        self.sinks.run_skipped(&run.workload, SkipReason::Stopping);
    }

    /// Records the runs left without a verdict (see [`crate::service::recovery`]): `error: no
    /// verdict.json: …`, each in its place by start, never in a baseline.
    pub(super) fn recover_orphans(&self, config: &Config) {
        // The export knows each workload's labels before a recovered run goes out with them
        // (it had none until the first schedule, and sent the run under empty ones).
        self.ctx.retain_workloads(config);
        self.record_unrecorded(config);
        for orphan in crate::service::recovery::find(&config.artifacts_dir, &self.history) {
            match crate::service::recovery::recover(config, &orphan) {
                Ok(result) => {
                    // Its start counts even when the history cannot take the run.
                    self.note_started(&orphan.workload, result.run.started_unix_ms);
                    self.finish(config, &orphan.workload, result)
                }
                Err(e) => tracing::error!(
                    workload = %orphan.workload,
                    run = %orphan.id,
                    "recovering a run whose process died: {e:#}"
                ),
            }
        }
    }

    /// Seeds each workload's previous due time from the due time of its newest stored run
    /// (its start when the row has none: older rows, recovered runs), so that a restart
    /// resumes the cadence: a workload whose run is not yet due waits for it, one that is
    /// overdue runs once at start. Without it every restart ran every workload at once, and a
    /// daemon restarted after a crash during a heavy run (systemd's `Restart=on-failure`)
    /// loaded the target again every few seconds. From the due time, not the start: the
    /// start comes after the jitter and any wait for a turn, and resuming from it moved the
    /// cadence's phase by those at each restart.
    pub(super) fn resume_cadences(&self) {
        let latest = crate::service::sinks::last_run::stored(&self.history);
        for row in &latest {
            let due = row.run.due_unix_ms.unwrap_or(row.run.started_unix_ms);
            self.note_started(&row.run.workload, due);
        }
    }

    /// Takes a run of `workload` due (or, not known, started) at `started_unix_ms` as its
    /// previous due time, unless a later one is known.
    fn note_started(&self, workload: &str, started_unix_ms: i64) {
        let Ok(ms) = u64::try_from(started_unix_ms) else {
            return;
        };
        let started = SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(ms);
        let mut due = self.previous_due.lock().unwrap();
        let previous = due.entry(workload.to_string()).or_insert(started);
        *previous = (*previous).max(started);
    }

    /// Stores the runs that wrote their verdict but not their history row (see
    /// [`crate::service::recovery::unrecorded`]). Not handed to the sinks: they were when
    /// they finished.
    fn record_unrecorded(&self, config: &Config) {
        use crate::service::recovery::unrecorded;
        // Each chunk in one pass: each run placed by its start, the rows after it moved once.
        let dirs = unrecorded::find(&config.artifacts_dir, &self.history);
        let mut recorded = 0;
        for chunk in dirs.chunks(LATE_RUNS_PER_PASS) {
            recorded += self.record_late(chunk);
        }
        // A history found empty (or gone) beside the runs it had recorded lost their rows, and
        // with them their samples: said once, as the loss it is, not left to one INFO line
        // per run.
        if let (Some(how), true) = (self.history.new_at_open(), recorded > 0) {
            tracing::warn!(
                "history {}: the database file {how} at start, yet {recorded} run folder(s) \
                 hold a verdict.json: those runs were recorded again from it, without their \
                 latency samples, so latency baselines start again from the next runs",
                self.history.path().display()
            );
        }
        // The last runs /metrics and OTLP show were seeded before these were recorded: one of
        // them may be its workload's newest run.
        if recorded > 0 {
            let latest = crate::service::sinks::last_run::stored(&self.history);
            self.metrics.seed(&latest);
            self.ctx.seed_last_runs(config, &latest);
        }
    }

    /// Stores the late runs of `dirs` in one pass; how many were stored.
    fn record_late(&self, dirs: &[std::path::PathBuf]) -> usize {
        use crate::service::recovery::unrecorded;
        let mut rows = Vec::new();
        for dir in dirs {
            match unrecorded::row(dir) {
                Ok(row) => rows.push(row),
                Err(e) => tracing::warn!(
                    "{}: a run with a verdict but no history row, not recorded: {e:#}",
                    dir.display()
                ),
            }
        }
        let why = match self.history.new_at_open() {
            Some(how) => format!("not in the history (its database file {how} at start)"),
            None => "not in the history (it could not be written when the run finished)".into(),
        };
        match self.history.insert_late(&rows) {
            Ok(()) => {
                for row in &rows {
                    tracing::info!(
                        workload = %row.run.workload,
                        run = %row.run.id,
                        "recorded from its verdict.json ({}): {why}",
                        row.run.verdict
                    );
                }
                rows.len()
            }
            Err(e) => {
                tracing::warn!(
                    "history {}: {} runs with a verdict but no history row, none recorded (the \
                     next start tries again): {e:#}",
                    self.history.path().display(),
                    rows.len()
                );
                0
            }
        }
    }

    /// Records a finished run of `workload` and hands it to the sinks.
    fn finish(&self, config: &Config, workload: &str, result: RunResult) {
        self.finish_waited(config, workload, result, None)
    }

    /// [`Self::finish`] for a run that waited as `waits` says before it started (written to
    /// its `verdict.json`; `None`: not known, a recovered run).
    fn finish_waited(
        &self,
        config: &Config,
        workload: &str,
        mut result: RunResult,
        waits: Option<Waits>,
    ) {
        if let Err(e) = self.record(config, workload, &mut result, waits) {
            tracing::error!(workload = %workload, run = %result.run.id, "recording the run: {e:#}");
        }
        self.sinks.run_finished(workload, &result);
    }

    /// Compares with the baseline, writes `verdict.json`, stores the run, applies retention.
    /// Both are attempted whatever the other did: a run whose verdict could not be written (a
    /// full disk) is still known by its row, shown and in time removed (retention deletes by
    /// the history); a history that cannot be written (full, read-only, damaged) must not lose
    /// what was measured, nor have the next start take the run for one whose process died.
    /// The verdict comes first so that a run the history (and `/api/runs`) shows has its
    /// verdict.json; a stop between the two leaves a folder the next start records.
    fn record(
        &self,
        config: &Config,
        workload: &str,
        result: &mut RunResult,
        waits: Option<Waits>,
    ) -> Result<()> {
        self.compare_with_baseline(config, workload, result);
        self.compare_capacity(config, workload, result);
        self.compare_knee(config, workload, result);
        announce::log_verdict(config, workload, result);
        let row = RunRow::from(&*result);
        let written = announce::write_verdict(result, waits);
        // A run recovered at start (it left no verdict.json) takes its place by start among
        // the runs recorded since, as a run recorded late does, not the newest.
        let stored = match result.recovered {
            Some(_) => self.history.insert_late(std::slice::from_ref(&row)),
            None => self.history.insert(&row),
        };
        match stored {
            Ok(()) => {
                if self.metrics.history_written() {
                    tracing::info!(
                        "history {}: runs are recorded again",
                        self.history.path().display()
                    );
                }
                self.apply_retention(config, workload, &result.run.id)?;
                written
            }
            Err(e) => {
                let why = format!(
                    "history {}: a run could not be written ({e:#})",
                    self.history.path().display()
                );
                if self.metrics.history_write_failed(why) {
                    tracing::warn!("{}", history_failing_warning(self.history.path(), &e));
                }
                // Retention deletes by the history: not while it cannot be written.
                written?;
                Err(e.context("not in the history (its verdict.json is written)"))
            }
        }
    }

    /// Fills in the run's comparison with the rolling baseline, when it has samples.
    fn compare_with_baseline(&self, config: &Config, workload: &str, result: &mut RunResult) {
        let Some(samples) = &result.run.samples else {
            return;
        };
        // A baseline that cannot be read leaves this run uncompared, not unrecorded.
        let load = result.run.load.as_ref();
        match self.history.baseline(workload, config.baseline.runs, load) {
            Ok(base) => {
                let mut c = baseline::compare(&config.baseline, &base, samples);
                if base.is_empty() {
                    c.new_load = self.new_load(workload, super::history::BaselineOf::Latency, load);
                }
                result.run.comparison = Some(c);
            }
            Err(e) => tracing::error!(workload = %workload, "reading the baseline: {e:#}"),
        }
    }

    /// A capacity run that passed its search: compared with the capacity of the last passing
    /// runs (read before this one is stored), `fail` when it dropped (the rule in
    /// [`crate::judge::capacity`]).
    fn compare_capacity(&self, config: &Config, workload: &str, result: &mut RunResult) {
        let Some(run) = &mut result.run.capacity else {
            return;
        };
        if result.run.verdict.kind != crate::judge::verdict::VerdictKind::Pass {
            return;
        }
        let Some(tolerance) = config
            .workloads
            .iter()
            .find(|w| w.name == workload)
            .and_then(|w| w.capacity)
            .map(|c| c.tolerance)
        else {
            return;
        };
        let base = match self
            .history
            .capacity_baseline(workload, config.baseline.runs, run)
        {
            Ok(base) => base,
            Err(e) => {
                tracing::error!(workload = %workload, "reading the capacity baseline: {e:#}");
                return;
            }
        };
        if base.is_empty() {
            run.new_load = self.new_load(
                workload,
                super::history::BaselineOf::Capacity,
                run.load.as_ref(),
            );
        }
        run.baseline = CapacityBaseline::of(&base, config.baseline.min_runs, tolerance);
        if let Some(why) = run.baseline.as_ref().and_then(|b| b.judge(&run.found)) {
            result.run.verdict = crate::judge::verdict::Verdict {
                kind: crate::judge::verdict::VerdictKind::Fail,
                reasons: vec![why],
            };
        }
    }

    /// A sweep run that ran every point: its knee compared with the knees of the last passing
    /// sweep runs whose knee its rule found ([`crate::judge::knee`]).
    fn compare_knee(&self, config: &Config, workload: &str, result: &mut RunResult) {
        let Some(run) = &mut result.run.sweep else {
            return;
        };
        if result.run.verdict.kind != crate::judge::verdict::VerdictKind::Pass {
            return;
        }
        let Some(tolerance) = config
            .workloads
            .iter()
            .find(|w| w.name == workload)
            .and_then(|w| w.sweep.as_ref())
            .map(|s| s.tolerance)
        else {
            return;
        };
        let load = result.run.load.as_ref();
        let knees = match self
            .history
            .knee_baseline(workload, config.baseline.runs, run, load)
        {
            Ok(k) => k,
            Err(e) => {
                tracing::error!(workload = %workload, "reading the knee baseline: {e:#}");
                return;
            }
        };
        if knees.is_empty() {
            // A new load says so first; the same load's knees by an older rule (the first
            // runs after an upgrade) start the baseline again too, and say why.
            run.new_load = self
                .new_load(workload, super::history::BaselineOf::Knee, load)
                .or_else(|| {
                    let rule = self.history.new_knee_rule(workload, run, load);
                    rule.unwrap_or_else(|e| {
                        tracing::error!(workload = %workload, "reading the baseline's knee rule: {e:#}");
                        None
                    })
                });
        }
        run.baseline =
            crate::judge::knee::KneeBaseline::of(&knees, config.baseline.min_runs, tolerance);
        if let Some(why) = run.baseline.as_ref().and_then(|b| b.judge(run)) {
            result.run.verdict = crate::judge::verdict::Verdict {
                kind: crate::judge::verdict::VerdictKind::Fail,
                reasons: vec![why],
            };
        }
    }

    /// Why a run of `load` found no baseline of its kind `of`, when its load changed
    /// ([`History::new_load`]); a history that cannot say is logged, and says nothing.
    fn new_load(
        &self,
        workload: &str,
        of: super::history::BaselineOf,
        load: Option<&serde_json::Value>,
    ) -> Option<String> {
        self.history
            .new_load(workload, of, load)
            .unwrap_or_else(|e| {
                tracing::error!(workload = %workload, "reading the newest baseline run: {e:#}");
                None
            })
    }

    /// Deletes the runs retention drops, artifact folders and history rows. Each folder is
    /// first renamed to a dot-name ([`hidden`]) that the start's recovery passes over, then
    /// its row deleted, then the folder removed: a removal cut short (a kill, a file that
    /// would not go) leaves no folder the next start takes for a run whose process died (a
    /// pruned pass came back as an `error` run), and a kill before the row went leaves a row
    /// whose folder is gone (its report says so), pruned again next time.
    fn apply_retention(&self, config: &Config, workload: &str, just: &str) -> Result<()> {
        let artifacts = &config.artifacts_dir;
        let mut take_away = |dir: &Path| hide_run_folder(artifacts, dir);
        // A workload gone from the config keeps its history until it ages out (it may come
        // back); the count limit applies only to configured ones.
        let mut doomed = self.history.prune(
            workload,
            config.retention_runs,
            config.retention_age,
            config.baseline.runs,
            just,
            &mut take_away,
        )?;
        for name in self.history.workloads()? {
            if !config.workloads.iter().any(|c| c.name == name) {
                doomed.extend(self.history.prune(
                    &name,
                    usize::MAX,
                    config.retention_age,
                    0,
                    just,
                    &mut take_away,
                )?);
            }
        }
        for dir in doomed.iter().filter(|d| is_run_folder(artifacts, d)) {
            remove_hidden(&hidden(dir));
        }
        // Those a removal cut short before.
        if let Ok(entries) = std::fs::read_dir(artifacts.join(workload)) {
            for entry in entries.flatten() {
                if entry
                    .file_name()
                    .to_string_lossy()
                    .starts_with(HIDDEN_PREFIX)
                {
                    remove_hidden(&entry.path());
                }
            }
        }
        Ok(())
    }

    /// What runs now, for systemd's STATUS= line.
    pub(super) fn status_line(&self) -> String {
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

/// The turns a run holds, by server: forgotten as their holder when it ends.
struct TurnsHeld {
    daemon: Arc<Daemon>,
    workload: String,
    servers: Vec<String>,
}

impl Drop for TurnsHeld {
    fn drop(&mut self) {
        let mut turns = self.daemon.turns.lock().unwrap_or_else(|e| e.into_inner());
        for s in &self.servers {
            if turns.get(s) == Some(&self.workload) {
                turns.remove(s);
            }
        }
    }
}

impl Daemon {
    /// Why `workload` cannot start a run now (a run of it is in progress): the skip's reason
    /// and the words for it.
    fn why_busy(&self, workload: &str) -> (SkipReason, String) {
        let waits = self.waiting.lock().unwrap().get(workload).cloned();
        match waits {
            Some(server) => {
                let holder = self.turns.lock().unwrap().get(&server).cloned();
                let by = holder
                    .map(|h| format!(", held by workload {h}"))
                    .unwrap_or_default();
                (
                    SkipReason::Turn,
                    format!(
                        "its previous run is still waiting for its turn on server {server}{by}"
                    ),
                )
            }
            None => (
                SkipReason::Overrun,
                "the previous run is still going".to_string(),
            ),
        }
    }

    /// `; next run at …` for the log line of a workload just scheduled, when known.
    fn next_run_said(&self, w: &Workload) -> String {
        if w.start_at.is_some() {
            // The grid's loop says its first instant.
            return String::new();
        }
        let previous = self.previous_due.lock().unwrap().get(&w.name).copied();
        said_next(w.cadence.next_due((self.wall)(), previous), w)
    }
}

/// Why a run of `w` can last far longer than its period against a target that accepts
/// requests and answers too few of them to trip the unresponsive cut-off, its run deadline said
/// ([`crate::config::run_length::unanswered_warning`]).
fn unbounded_run(config: &Config, w: &Workload) -> Option<String> {
    let timeout = config.targets.get(&w.target)?.request_timeout;
    crate::config::run_length::unanswered_warning(w, timeout)
}

/// `t` in Unix ms (0 before the epoch, as [`crate::service::history::now_unix_ms`]).
fn unix_ms(t: SystemTime) -> i64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// `; next run at <time>` (UTC), with the jitter that may come on top.
fn said_next(next: SystemTime, w: &Workload) -> String {
    let at = chrono::DateTime::<chrono::Utc>::from(next)
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let jitter = match &w.cadence {
        crate::config::cadence::Cadence::Every {
            jitter: Some(j), ..
        }
        | crate::config::cadence::Cadence::Cron {
            jitter: Some(j), ..
        } => {
            format!(" (plus up to {j:?} of jitter)")
        }
        _ => String::new(),
    };
    format!("; next run at {at}{jitter}")
}

/// The servers a target's runs load, each as `scheme://host:port` however its URLs were
/// written (`gpu:8000`, `http://gpu:8000/v1`), replicas included: runs take turns on each.
fn servers(target: &crate::config::Target) -> std::collections::BTreeSet<String> {
    std::iter::once(&target.url)
        .chain(&target.replica_urls)
        .map(|url| match canary_replay::Target::root_of(url) {
            Ok(t) => {
                let scheme = if t.tls { "https" } else { "http" };
                // Host names are case-blind (`GPU` and `gpu` are one server).
                format!("{scheme}://{}:{}", t.host.to_ascii_lowercase(), t.port)
            }
            Err(_) => url.trim_end_matches('/').to_string(),
        })
        .collect()
}

/// The first warning of a spell of runs the history at `path` cannot take (`e`). The same
/// cause (a full disk) may fail each run's verdict.json too, so it is promised only as far as
/// the disk allows.
fn history_failing_warning(path: &Path, e: &anyhow::Error) -> String {
    format!(
        "history {}: runs cannot be recorded ({e:#}); each run's verdict.json is still written \
         when the disk allows (the next start records it; a run that could not write it is \
         recovered from its records as one left without a verdict), /healthz says unhealthy \
         until a write succeeds, canaryd_history_write_errors_total counts them",
        path.display()
    )
}

/// What a run folder retention removes is renamed to first: a dot-name, which no run id
/// has, so the start's recovery never takes what is left of it for a run.
const HIDDEN_PREFIX: &str = ".removing-";

/// Where retention moves the run folder `dir` before deleting its row.
fn hidden(dir: &Path) -> std::path::PathBuf {
    let name = dir.file_name().unwrap_or_default().to_string_lossy();
    dir.with_file_name(format!("{HIDDEN_PREFIX}{name}"))
}

/// Moves the run folder `dir` out of recovery's way ([`hidden`]); whether its row may go. Only
/// a run's own folder is ever touched, whatever the history row says: another path's row just
/// goes. A folder already gone lets its row go; one that cannot be moved keeps it (said), for
/// the next pass.
fn hide_run_folder(artifacts: &Path, dir: &Path) -> bool {
    if !is_run_folder(artifacts, dir) {
        return true;
    }
    match std::fs::rename(dir, hidden(dir)) {
        Ok(()) => true,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
        Err(e) => {
            tracing::warn!(
                "retention: moving {} out of the way before removing it: {e}; its run is kept \
                 until the next pass",
                dir.display()
            );
            false
        }
    }
}

/// Removes a folder retention moved out of the way; what will not go is said and left (no
/// start takes it for a run, and the next pass tries again).
fn remove_hidden(dir: &Path) {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!("retention: removing {}: {e}", dir.display()),
    }
}

/// Whether `dir` is a run's folder in the artifacts tree: `ARTIFACTS/WORKLOAD/RUN`, plainly
/// named. Retention deletes what the history names, and a damaged or hand-edited row (the
/// tree itself, `…/chat/..`) must not take the tree, a workload's runs or the state with it.
fn is_run_folder(artifacts: &Path, dir: &Path) -> bool {
    use std::path::Component;
    let plain = |p: &Path| {
        p.components()
            .all(|c| !matches!(c, Component::ParentDir | Component::CurDir))
    };
    plain(dir)
        && dir.strip_prefix(artifacts).is_ok_and(|rest| {
            rest.components().count() == 2
                && rest.components().all(|c| matches!(c, Component::Normal(_)))
        })
}

#[cfg(test)]
mod tests;

//! One replay run: schedule → prepare → release → exchange → record.
//!
//! A planner walks the sessions in deadline order and starts each one shortly before its
//! first turn is due, every session due within a few milliseconds at one wake-up. A session
//! task prepares a turn (prompt, body, connection) ahead of its deadline, hands it to its
//! connection, whose gate holds the bytes, and registers it with the [`Dispatcher`], whose
//! thread writes them at the deadline (a request that has to wait for a concurrency slot or
//! its previous turn is woken instead, and sends itself). Every record keeps both the
//! scheduled and the actual send time, so lateness — ours or the server's — is always
//! visible.
//!
//! [`run_work`] reads as the run's steps; each lives in a submodule: `setup` (checks,
//! connection pools, the record-writing thread, the grace timer, the in-flight ceilings, the
//! start), `planner` (which sessions to start at each wake-up), `sessions` (warm-up, the
//! planner's loop, sessions and closed-loop users), `send` (one request: build, connect,
//! release, exchange), `record` (the outcome in the record) and `finish` (summary, telemetry,
//! context, diagnosis, artifacts).

use crate::dispatch::Dispatcher;
use crate::exchange::Gaps;
use crate::in_flight::in_flight_cap;
use crate::plan::{RunInfo, Setting, SettingError};
use crate::prompt::PromptBuilder;
use crate::results::{ArtifactError, ResultsWriter};
use crate::schedule::{Schedule, Timing};
use canary_core::{ClockReport, MonoTime, Observer, RequestRecord, RunOutcome, WallAnchor};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;

mod cancel;
mod config;
mod finish;
mod planner;
mod record;
mod replicas;
mod request_runtime;
mod send;
mod sessions;
mod setup;
mod work;
pub use cancel::Cancellation;
pub use config::{CapHook, Config, StopReason, MAX_WARMUP_REQUESTS};
pub use replicas::Balance;
use replicas::Replicas;
use request_runtime::RequestRuntime;
pub use work::{ClosedLoopWork, Pace, PlannedLoad, RateWork, Work};

/// Live counters, for progress display.
#[derive(Debug, Default)]
pub struct Progress {
    /// Requests in the schedule (warm-up excluded).
    pub total: AtomicU64,
    /// Whether `total` is an estimate (rate × duration for a rate bounded by time only), not a
    /// count that will be sent.
    pub total_estimated: std::sync::atomic::AtomicBool,
    /// Requests sent so far.
    pub sent: AtomicU64,
    /// Requests finished (ok or error).
    pub done: AtomicU64,
    /// Requests that failed.
    pub errors: AtomicU64,
    /// Measured requests that waited past their deadline for a place under the in-flight
    /// ceiling.
    pub ceiling_waits: AtomicU64,
}

/// A run that could not be carried out.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// TLS configuration failed.
    #[error(transparent)]
    Tls(#[from] canary_tls::TlsError),
    /// The target's host name is unusable for TLS.
    #[error(transparent)]
    Connect(#[from] crate::connection::ConnectError),
    /// The release thread could not start.
    // Causes are sources, never repeated in the message (`{:#}` prints each once).
    #[error("starting the dispatch thread")]
    Dispatcher(#[source] std::io::Error),
    /// The run's own runtime could not start.
    #[error("starting the run's worker threads")]
    Runtime(#[source] std::io::Error),
    /// An artifact could not be written.
    #[error("writing results")]
    Artifact(#[from] ArtifactError),
    /// A setting is out of range (see [`Config::validate`]).
    #[error("invalid replay setting {0}")]
    Invalid(#[from] SettingError),
}

impl ReplayError {
    /// The message with the setting of an [`ReplayError::Invalid`] named by `spell` (the
    /// front end's words: `--concurrency`, `workloads.chat.concurrency`).
    pub fn spelled(&self, spell: impl Fn(Setting) -> String) -> String {
        match self {
            ReplayError::Invalid(e) => {
                format!("invalid replay setting {}", e.spelled(&spell(e.setting)))
            }
            other => other.to_string(),
        }
    }
}

struct Ctx {
    config: Config,
    timing: Timing,
    prompts: Arc<PromptBuilder>,
    /// The URLs requests go to, each with its connection pool.
    replicas: Replicas,
    dispatcher: Dispatcher,
    /// The concurrency setting: a request takes a permit when it is due, then its connection.
    permits: Option<Semaphore>,
    /// The open-file ceiling, when lower than the setting: a request takes a slot before it
    /// opens its connection, ahead of its deadline as usual.
    slots: Option<Semaphore>,
    records: mpsc::Sender<(RequestRecord, Gaps)>,
    progress: Arc<Progress>,
    t0: MonoTime,
    stop: CancellationToken,
    hard_stop: CancellationToken,
    unsent: AtomicU64,
    /// Some of `unsent` is estimated, not counted ([`planner::Left`]).
    unsent_estimated: std::sync::atomic::AtomicBool,
    /// Why `unsent` cannot be known, when it cannot (a closed loop bounded by time).
    unsent_unknown: std::sync::OnceLock<String>,
    /// What every response in flight holds, against the target's `max_held_bytes`.
    held: Arc<crate::limits::HeldBytes>,
    /// The target's secrets, in every form a server may quote them: found once, taken out
    /// of every server's text a record keeps.
    secrets: Arc<crate::secrets::Secrets>,
}

/// Replays `schedule` against the configured target: prepares each request ahead, releases
/// it at its deadline, measures it, and hands each record to `observer` (what other sources
/// saw: GPU, server metrics, kernel, exporters) before it is written. `info` is `summary.json`'s
/// `run` block. Stopping `shutdown` ends dispatching; in-flight requests then get the grace
/// period. Artifacts are written in every case.
pub async fn run(
    config: Config,
    schedule: Schedule,
    prompts: Arc<PromptBuilder>,
    info: RunInfo,
    observer: Option<Arc<dyn Observer>>,
    shutdown: CancellationToken,
    progress: Arc<Progress>,
) -> Result<RunOutcome, ReplayError> {
    let work = Work::Schedule(schedule);
    run_work(config, work, prompts, info, observer, shutdown, progress).await
}

/// [`run()`] for any [`Work`]: a trace's schedule, an open-loop rate (its deadlines released
/// by the same dispatcher, a concurrency ceiling recorded as hold) or a closed loop of users.
///
/// The run goes on a runtime of its own, its workers sized by the load it plans
/// (`request_runtime`), unless [`Config::own_runtime`] is false.
pub async fn run_work(
    config: Config,
    work: Work,
    prompts: Arc<PromptBuilder>,
    info: RunInfo,
    observer: Option<Arc<dyn Observer>>,
    shutdown: CancellationToken,
    progress: Arc<Progress>,
) -> Result<RunOutcome, ReplayError> {
    if !config.own_runtime {
        return run_here(config, work, prompts, info, observer, shutdown, progress).await;
    }
    let sizing = request_runtime::sizing_here(work.pace());
    let runtime = RequestRuntime::start(sizing).map_err(ReplayError::Runtime)?;
    let run = run_here(config, work, prompts, info, observer, shutdown, progress);
    runtime.run(run).await
}

/// [`run_work`] on the runtime it is polled on.
async fn run_here(
    config: Config,
    work: Work,
    prompts: Arc<PromptBuilder>,
    info: RunInfo,
    observer: Option<Arc<dyn Observer>>,
    shutdown: CancellationToken,
    progress: Arc<Progress>,
) -> Result<RunOutcome, ReplayError> {
    let placed = setup::check(&config, &work)?;
    let replicas = setup::replicas(&config)?;
    let dispatcher = Dispatcher::start().map_err(ReplayError::Dispatcher)?;
    let writer = ResultsWriter::new(config.output_dir.as_deref(), config.goodput.clone())?
        .with_timeslices(config.slice_duration);
    // Before the run opens anything else: the ceiling counts the files open at its start.
    let in_flight_cap = in_flight_cap(config.concurrency);
    if let Some(hook) = &config.on_in_flight_cap {
        (hook.0)(&in_flight_cap);
    }
    // Held to the end of the run, warm-up included; not when its descriptor could be one a
    // request needs (a low open-file limit).
    let _stamping = match crate::in_flight::file_to_spare(&in_flight_cap) {
        true => setup::stamping_hold(&config).await,
        false => None,
    };
    let workload = setup::workload_context(&config, &work);
    progress
        .total_estimated
        .store(work.expected_is_estimate(), Ordering::Relaxed);
    progress
        .total
        .store(work.expected_requests(), Ordering::Relaxed);
    // Warm-up requests are timed from here; the run's own t0 is set once they are over.
    let warmup_t0 = MonoTime::now();
    let (collector, records) = setup::Collector::spawn(writer, observer.clone(), warmup_t0);
    let stop = shutdown.child_token();
    let (hard_stop, grace) = setup::grace_timer(&stop, config.grace_period);
    let (permits, slots) = setup::in_flight_limits(&in_flight_cap);
    let held = crate::limits::HeldBytes::new(config.target.limits.held_bytes);
    let secrets =
        crate::secrets::Secrets::of(std::iter::once(&config.target).chain(&config.replicas));
    let mut ctx = Ctx {
        permits,
        slots,
        config,
        timing: work.timing(),
        prompts,
        replicas,
        dispatcher,
        records,
        progress,
        t0: warmup_t0,
        stop: stop.clone(),
        hard_stop,
        unsent: AtomicU64::new(0),
        unsent_estimated: Default::default(),
        unsent_unknown: Default::default(),
        held,
        secrets: Arc::new(secrets),
    };

    sessions::warmup(&ctx, &work.shapes(ctx.config.warmup_requests)).await;
    // Observers that measure over a window (the server's histogram deltas) start it now, so
    // warm-up stays outside it.
    if let Some(o) = &observer {
        o.measured_phase(ctx.config.warmup_requests).await;
    }
    let clock = match setup::start_clock(&mut ctx, placed.as_ref()) {
        Ok(clock) => clock,
        Err(e) => {
            stop.cancel();
            grace.abort();
            drop(ctx);
            let _ = collector.join();
            return Err(e);
        }
    };
    collector.set_t0(ctx.t0);
    let started_unix_ns = WallAnchor::now().unix_nanos_at(ctx.t0);

    let ctx = Arc::new(ctx);
    // The planner runs as a task of its own: on a multi-thread runtime the thread that called
    // `run` is not one of the runtime's workers, and every session it started was a wake-up
    // from a worker (its timer) to it and one back (the spawn).
    let planner = tokio::spawn({
        let ctx = ctx.clone();
        async move { sessions::send_all(&ctx, work).await }
    });
    // Dropped unfinished (the caller gave up on the run), it takes the planner with it.
    let _abort = AbortOnDrop(planner.abort_handle());
    if let Err(e) = planner.await {
        if e.is_panic() {
            std::panic::resume_unwind(e.into_panic());
        }
    }
    grace.abort();

    let ended = finish::Ended {
        interrupted: stop.is_cancelled(),
        in_flight_cap,
        workload,
        clock: ClockReport {
            release: Some(ctx.dispatcher.report()),
            ..clock
        },
        started_unix_ns,
    };
    let ctx = Arc::into_inner(ctx).expect("all session tasks have finished");
    finish::finish(ctx, collector, observer, ended, &info).await
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// How a request's wait for its deadline ended.
struct Released {
    /// When its hold ended, if it was held back past its deadline.
    hold_end: Option<MonoTime>,
}

/// Waits for `scheduled`, when the dispatcher thread releases the request; one held back by
/// its previous turn (`not_before` past its deadline) goes as soon as it is ready instead.
/// `None` if the run stopped first.
async fn release(ctx: &Ctx, scheduled: MonoTime, not_before: Option<MonoTime>) -> Option<Released> {
    // Held back by the previous turn: released as soon as it is ready, the wait is hold.
    let mut hold_end = None;
    let release = match not_before {
        // The hold ends with the previous turn: what came after (opening a connection,
        // canaryd's own work) is connect_wait or dispatch, not the trace's order.
        Some(end) if end > scheduled => {
            hold_end = Some(end);
            None
        }
        _ => Some(ctx.dispatcher.at(scheduled)),
    };
    if let Some(release) = release {
        // An error (the dispatch thread is gone) means "go now".
        let _ = unless_stopped(&ctx.stop, release).await?;
    }
    Some(Released { hold_end })
}

/// Sleeps until `t` on the monotonic clock; false if `stop` fired first.
async fn sleep_until(t: MonoTime, stop: &CancellationToken) -> bool {
    let now = MonoTime::now();
    if t <= now {
        return !stop.is_cancelled();
    }
    let until = tokio::time::Instant::now() + t.since(now);
    tokio::select! {
        _ = tokio::time::sleep_until(until) => true,
        _ = stop.cancelled() => false,
    }
}

/// `fut`'s output, or `None` if `stop` fires first.
async fn unless_stopped<T>(
    stop: &CancellationToken,
    fut: impl std::future::Future<Output = T>,
) -> Option<T> {
    tokio::select! {
        v = fut => Some(v),
        _ = stop.cancelled() => None,
    }
}

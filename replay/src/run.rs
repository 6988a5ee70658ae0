//! One replay run: schedule → prepare → release → exchange → record.
//!
//! A planner walks the sessions in deadline order and starts each one shortly before its
//! first turn is due. A session task prepares a turn (prompt, body, connection) ahead of its
//! deadline, registers it with the [`Dispatcher`], and sends the moment it is released. Every
//! record keeps both the scheduled and the actual send time, so lateness — ours or the
//! server's — is always visible.

use crate::connection::{Connection, Connector};
use crate::dispatch::Dispatcher;
use crate::exchange::{duplicate, exchange, Gaps, Measurement, ReadLimits};
use crate::ids::TraceContext;
use crate::in_flight::in_flight_cap;
use crate::plan::{RunInfo, Setting, SettingError};
use crate::prompt::PromptBuilder;
use crate::results::{ArtifactError, ResultsWriter, SummaryFile};
use crate::rx_stamp::Stamp;
use crate::schedule::{Schedule, Session, Timing, TurnDue};
use crate::start::{Placed, StartAt};
use crate::target::Target;
use canary_core::{
    CapSource, ClockReport, DiagnosisInput, ErrorKind, Goodput, MonoTime, Observer, RealtimeMap,
    RequestError, RequestRecord, RunContext, RunOutcome, RunSummary, RunTelemetry, StartReport,
    Status, TraceRequest, WallAnchor,
};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

mod cancel;
mod replicas;
mod work;
pub use cancel::Cancellation;
pub use replicas::Balance;
use replicas::Replicas;
pub use work::{ClosedLoopWork, RateWork, Work};

/// The dispatcher's settings of one run: the target, and how the run goes. The speedup is
/// the schedule's ([`Schedule::new`]); the observers are given to [`run()`].
#[derive(Debug, Clone)]
pub struct Config {
    /// The server.
    pub target: Target,
    /// More URLs of the same service (`--url` repeated): the same settings as `target` but
    /// the URL; requests are spread over `target` and these by `balance`.
    pub replicas: Vec<Target>,
    /// How requests are spread when there are replicas.
    pub balance: Balance,
    /// At most this many requests in flight; the rest wait (and the wait is recorded as hold).
    pub concurrency: Option<usize>,
    /// Requests sent, one at a time, before the measured phase; left out of statistics.
    pub warmup_requests: usize,
    /// After a stop, in-flight requests get this long to finish.
    pub grace_period: Duration,
    /// SLOs for goodput.
    pub goodput: Goodput,
    /// Where artifacts go; `None` keeps results in memory only.
    pub output_dir: Option<PathBuf>,
    /// Add every inter-chunk gap to each record.
    pub record_chunks: bool,
    /// How long before its deadline a request is prepared (prompt built, connection opened).
    pub prepare_ahead: Duration,
    /// Prefix of `x-request-id` values.
    pub run_id: String,
    /// Share of requests whose `traceparent` is flagged sampled (decided on the trace id, as
    /// the exporter decides which spans to send).
    pub trace_sample_ratio: f64,
    /// Mixed into the text of prompt blocks no hash id covers (rows without hash ids, tokens
    /// past a row's last id, warm-up requests), so that text is new to the server on every
    /// run. Blocks of hash ids never depend on it: they stay equal across runs (and shards)
    /// so the trace's prefix sharing is replayed. [`Config::new`] draws a fresh one; set it to
    /// repeat a run's exact prompts (it is reported as `prompt_salt` in `summary.json`).
    pub prompt_salt: u64,
    /// [`run()`] refuses a schedule with a row asking for more input or output tokens than
    /// this: prompts and response caps are sized by those numbers. Default
    /// [`DEFAULT_LENGTH_LIMIT`](crate::trace::DEFAULT_LENGTH_LIMIT), as when loading.
    pub length_limit: u32,
    /// Requests cancelled on purpose (never warm-up ones); `None`: none.
    pub cancellation: Option<Cancellation>,
    /// Start the schedule at this wall-clock instant (shared by every shard) instead of as
    /// soon as the run is ready; see [`StartAt`] for a run that begins after it.
    pub start_at: Option<StartAt>,
    /// Keep the run's figures in slices of this duration from its start (issue 18).
    pub slice_duration: Option<Duration>,
}

impl Config {
    /// Defaults for everything but the target.
    pub fn new(target: Target) -> Config {
        Config {
            target,
            replicas: Vec::new(),
            balance: Balance::default(),
            concurrency: None,
            warmup_requests: crate::Plan::WARMUP_REQUESTS,
            grace_period: crate::Plan::GRACE_PERIOD,
            goodput: Goodput::default(),
            output_dir: None,
            record_chunks: false,
            prepare_ahead: Duration::from_millis(50),
            run_id: format!("run-{:08x}", crate::ids::next_u64() as u32),
            trace_sample_ratio: 1.0,
            // 53 bits: exact in every JSON reader (summary.json reports it).
            prompt_salt: crate::ids::next_u64() >> 11,
            length_limit: crate::trace::DEFAULT_LENGTH_LIMIT,
            cancellation: None,
            start_at: None,
            slice_duration: None,
        }
    }
}

impl Config {
    /// Checks the settings [`run()`] would otherwise trip on: a concurrency ceiling of 0 (no
    /// request could ever be sent), a zero connect timeout (no connection could ever open),
    /// extra headers that frame the request, and `extra_inputs` replacing fields canaryd
    /// sets itself.
    /// [`run()`] calls it first; callers may call it earlier to fail before starting anything.
    pub fn validate(&self) -> Result<(), SettingError> {
        let positive = |setting, d: Duration| match d.is_zero() {
            true => Err(SettingError::new(
                setting,
                "expected a positive duration, found 0",
            )),
            false => Ok(()),
        };
        positive(Setting::ConnectTimeout, self.target.connect_timeout)?;
        positive(Setting::RequestTimeout, self.target.timeout)?;
        self.target.limits.validate()?;
        if let Some(c) = &self.cancellation {
            c.validate()?;
        }
        if self.concurrency == Some(0) {
            return Err(SettingError::new(
                Setting::Concurrency,
                "expected at least 1 request in flight, found 0",
            ));
        }
        if let Some(start) = &self.start_at {
            start.place()?;
        }
        if let Some(d) = self.slice_duration {
            positive(Setting::SliceDuration, d)?;
        }
        self.target
            .check_headers()
            .map_err(|reason| SettingError::new(Setting::Headers, reason))?;
        self.target
            .check_extra_inputs()
            .map_err(|reason| SettingError::new(Setting::ExtraInputs, reason))
    }

    /// Checks what [`run()`] would be asked to do with `schedule`: every length within
    /// [`Config::length_limit`] (a prompt is sized by it), and an end within
    /// [`MAX_SPAN`](crate::trace::MAX_SPAN) (a speedup of 1e-12 never ends).
    pub fn check_schedule(&self, schedule: &Schedule) -> Result<(), SettingError> {
        let limit = self.length_limit;
        let mut rows = schedule.sessions().iter().flat_map(|s| &s.turns);
        if let Some(r) = rows.find(|r| r.input_tokens > limit || r.output_tokens > limit) {
            return Err(SettingError::new(
                Setting::LengthLimit,
                format!(
                    "line {} asks for {} input and {} output tokens, over the limit of {limit}",
                    r.line, r.input_tokens, r.output_tokens
                ),
            ));
        }
        let max = crate::trace::MAX_SPAN;
        if schedule.min_duration() > max {
            return Err(SettingError::new(
                Setting::Speedup,
                format!(
                    "at {}x the schedule would take more than {} days",
                    crate::trace::Number(schedule.timing().speedup()),
                    max.as_secs() / 86_400
                ),
            ));
        }
        Ok(())
    }
}

/// Live counters, for progress display.
#[derive(Debug, Default)]
pub struct Progress {
    /// Requests in the schedule (warm-up excluded).
    pub total: AtomicU64,
    /// Requests sent so far.
    pub sent: AtomicU64,
    /// Requests finished (ok or error).
    pub done: AtomicU64,
    /// Requests that failed.
    pub errors: AtomicU64,
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
pub async fn run_work(
    config: Config,
    work: Work,
    prompts: Arc<PromptBuilder>,
    info: RunInfo,
    observer: Option<Arc<dyn Observer>>,
    shutdown: CancellationToken,
    progress: Arc<Progress>,
) -> Result<RunOutcome, ReplayError> {
    if let Work::Schedule(schedule) = &work {
        config.check_schedule(schedule)?;
    }
    // The common start is mapped onto the monotonic clock once, here (validate() places it
    // too, so a shard launched too late is refused before it opens anything).
    config.validate()?;
    let placed = config.start_at.as_ref().map(StartAt::place).transpose()?;
    let any_tls = config.target.tls || config.replicas.iter().any(|t| t.tls);
    let tls = if any_tls {
        Some(canary_tls::client_config(
            config.target.ca_bundle.as_deref(),
        )?)
    } else {
        None
    };
    let targets = std::iter::once(config.target.clone()).chain(config.replicas.iter().cloned());
    let replicas = Replicas::new(targets, config.balance, |t| {
        Connector::new(
            &t.host,
            t.port,
            t.tls.then(|| tls.clone()).flatten(),
            t.connect_timeout.min(t.timeout),
            t.limits.header_bytes,
            t.kernel_timestamps,
        )
    })?;
    let dispatcher = Dispatcher::start().map_err(ReplayError::Dispatcher)?;
    let mut writer = ResultsWriter::new(config.output_dir.as_deref(), config.goodput.clone())?
        .with_timeslices(config.slice_duration);
    // Before the run opens anything else: the ceiling counts the files open at its start.
    let in_flight_cap = in_flight_cap(config.concurrency);
    let workload = match &work {
        Work::Schedule(schedule) => {
            crate::workload::workload_context(&config.target, schedule, config.concurrency)
        }
        Work::Rate(_) => {
            crate::workload::synthetic_context(&config.target, "rate", &work, config.concurrency)
        }
        Work::ClosedLoop(_) => crate::workload::synthetic_context(
            &config.target,
            "closed_loop",
            &work,
            config.concurrency,
        ),
    };
    progress
        .total
        .store(work.expected_requests(), Ordering::Relaxed);

    // Records go to a plain thread: file writes never stall the runtime's workers.
    let (tx, mut rx) = mpsc::channel::<(RequestRecord, Gaps)>(4096);
    let t0_shared = Arc::new(AtomicU64::new(0));
    let collector = {
        let t0_shared = t0_shared.clone();
        let observer = observer.clone();
        std::thread::spawn(move || {
            while let Some((mut rec, gaps)) = rx.blocking_recv() {
                if let Some(o) = &observer {
                    let t0 = MonoTime(t0_shared.load(Ordering::Relaxed));
                    o.annotate_chunks(&mut rec, gaps.read.kept(), t0);
                }
                writer.record(&rec, &gaps.at);
            }
            writer
        })
    };

    let hard_stop = CancellationToken::new();
    let stop = shutdown.child_token();
    let grace = {
        let (stop, hard_stop, grace) = (stop.clone(), hard_stop.clone(), config.grace_period);
        tokio::spawn(async move {
            stop.cancelled().await;
            tokio::time::sleep(grace).await;
            hard_stop.cancel();
        })
    };

    let (permits, slots) = match (in_flight_cap.source, in_flight_cap.limit) {
        (CapSource::Concurrency, Some(n)) => (Some(Semaphore::new(n)), None),
        (_, Some(n)) => (None, Some(Semaphore::new(n.min(Semaphore::MAX_PERMITS)))),
        (_, None) => (None, None),
    };
    if in_flight_cap.source == CapSource::OpenFiles {
        tracing::debug!(?in_flight_cap, "in-flight ceiling from the open-file limit");
    }
    let mut ctx = Ctx {
        permits,
        slots,
        config,
        timing: work.timing(),
        prompts,
        replicas,
        dispatcher,
        records: tx,
        progress,
        t0: MonoTime::now(),
        stop: stop.clone(),
        hard_stop,
        unsent: AtomicU64::new(0),
    };
    t0_shared.store(ctx.t0.as_nanos(), Ordering::Relaxed);
    warmup(&ctx, &work.shapes(ctx.config.warmup_requests)).await;
    // Observers that measure over a window (the server's histogram deltas) start it now, so
    // warm-up stays outside it.
    if let Some(o) = &observer {
        o.measured_phase(ctx.config.warmup_requests).await;
    }

    // Leave room to prepare the first burst before it is due; or start at the common
    // instant, which a long warm-up may have overrun.
    let clock = match (&ctx.config.start_at, &placed) {
        (Some(start), Some(placed)) => {
            let now = MonoTime::now();
            if let Err(e) = start.check_late(placed, now) {
                stop.cancel();
                grace.abort();
                drop(ctx);
                let _ = collector.join();
                return Err(e.into());
            }
            ctx.t0 = placed.t0;
            start_report(start, placed, now)
        }
        _ => {
            ctx.t0 = MonoTime::now() + ctx.config.prepare_ahead + Duration::from_millis(20);
            let at = MonoTime::now();
            ClockReport::new(&RealtimeMap::measure(), at)
        }
    };
    warn_unsynchronized(&clock);
    t0_shared.store(ctx.t0.as_nanos(), Ordering::Relaxed);
    let anchor = WallAnchor::now();
    let started_unix_ns = anchor.unix_nanos_at(ctx.t0);
    let ctx = Arc::new(ctx);
    let mut tasks = JoinSet::new();
    let mut sessions: Box<dyn Iterator<Item = Session> + Send> = match work {
        Work::Schedule(s) => Box::new(s.into_sessions().into_iter()),
        Work::Rate(r) => Box::new(r.into_sessions()),
        Work::ClosedLoop(users) => {
            let users = Arc::new(users);
            for _ in 0..users.users {
                tasks.spawn(run_user(ctx.clone(), users.clone()));
            }
            while tasks.join_next().await.is_some() {}
            ctx.unsent.fetch_add(users.unclaimed(), Ordering::Relaxed);
            Box::new(std::iter::empty())
        }
    };
    while let Some(session) = sessions.next() {
        let first_due = ctx.t0 + ctx.timing.offset(&session.turns[0]);
        if !sleep_until(first_due - ctx.config.prepare_ahead, &ctx.stop).await {
            // This session and every later one are never sent.
            let left = session.turns.len() + sessions.map(|s| s.turns.len()).sum::<usize>();
            ctx.unsent.fetch_add(left as u64, Ordering::Relaxed);
            break;
        }
        tasks.spawn(run_session(ctx.clone(), session));
        // Reap finished sessions as we go so the set stays small on long traces.
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
    grace.abort();

    let interrupted = stop.is_cancelled();
    let unsent = ctx.unsent.load(Ordering::Relaxed);
    let t0 = ctx.t0;
    let ctx = Arc::into_inner(ctx).expect("all session tasks have finished");
    drop(ctx.records);
    let writer = collector.join().expect("collector thread does not panic");
    let mut summary = writer.summary();
    let (state, reason) = ctx.replicas.rx_state();
    summary.receive_timestamps.state = Some(state.to_string());
    summary.receive_timestamps.reason = reason;
    let end = MonoTime::now();
    let mut telemetry = match &observer {
        Some(o) => o.finish(t0, end, &summary).await,
        None => RunTelemetry::default(),
    };
    telemetry
        .context
        .get_or_insert_with(Default::default)
        .merge(RunContext {
            canaryd: crate::host::canaryd_context(),
            host: crate::host::host_context(),
            workload,
            ..Default::default()
        });
    let diagnosis = canary_core::diagnose(&DiagnosisInput {
        summary: &summary,
        telemetry: &telemetry,
        timeline: Some(writer.timeline()),
    });
    let client_bottleneck = bottleneck(&summary);
    if let Some(b) = &client_bottleneck {
        tracing::warn!("{b}");
    }
    let outcome = RunOutcome {
        interrupted,
        unsent,
        in_flight_cap,
        client_bottleneck,
        prompt_salt: ctx.config.prompt_salt,
        started_unix_ns,
        t0_monotonic_ns: t0.as_nanos(),
        clock: ClockReport {
            release: Some(ctx.dispatcher.report()),
            ..clock
        },
        diagnosis,
        telemetry,
        summary,
    };
    writer.finish(&SummaryFile::new(&info, &outcome), &outcome.summary)?;
    Ok(outcome)
}

/// The clock block of a run started at `start`, placed as `placed`, beginning at `now`.
fn start_report(start: &StartAt, placed: &Placed, now: MonoTime) -> ClockReport {
    let late = placed.late_by(now);
    if !late.is_zero() {
        tracing::warn!(
            "started {:.3} s after --start-at {}: requests due before now leave at once, late \
             by up to that much (their schedule_lag_ms says how much)",
            late.as_secs_f64(),
            start.text
        );
    }
    ClockReport {
        start_at: Some(StartReport {
            requested: start.text.clone(),
            unix_ns: start.unix_ns,
            monotonic_ns: placed.t0.as_nanos(),
            lead_ms: placed.t0.ms_since(placed.at),
            late_by_ms: late.as_secs_f64() * 1e3,
            max_late_ms: start.max_late.as_secs_f64() * 1e3,
        }),
        ..ClockReport::new(&placed.map, placed.at)
    }
}

/// Says once per process, loudly, that the wall clock is not known to be synchronized (every
/// run's `summary.json` says it in `clock.warning`).
fn warn_unsynchronized(clock: &ClockReport) {
    static WARNED: std::sync::Once = std::sync::Once::new();
    if let Some(w) = &clock.warning {
        WARNED.call_once(|| tracing::warn!("{w}"));
    }
}

/// What a run where canaryd ran out of its own resources says about it.
fn bottleneck(s: &RunSummary) -> Option<String> {
    (s.client_errors > 0).then(|| {
        format!(
            "canaryd was the bottleneck: {} of {} requests failed for lack of its own resources \
             (open files, memory or local ports), not counted against the target; raise the \
             open-file limit (ulimit -n, LimitNOFILE=) or lower --concurrency",
            s.client_errors, s.requests
        )
    })
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

async fn warmup(ctx: &Ctx, shapes: &[TraceRequest]) {
    for i in 0..ctx.config.warmup_requests {
        if ctx.stop.is_cancelled() || shapes.is_empty() {
            return;
        }
        // Same lengths as real rows, but unique prompts: warm-up must not pre-fill the
        // server's prefix cache with the measured requests' blocks.
        let mut req = shapes[i % shapes.len()].clone();
        req.hash_ids.clear();
        req.index = u32::MAX - i as u32;
        req.line = 0;
        req.session = None;
        let now = MonoTime::now();
        let Some(rec) = send_one(ctx, &req, now, None, true).await else {
            return; // stopped before it was sent
        };
        let _ = ctx.records.send(rec).await;
    }
}

async fn run_session(ctx: Arc<Ctx>, session: Session) {
    let mut prev_end: Option<MonoTime> = None;
    let turns = session.turns.len();
    for (k, req) in session.turns.into_iter().enumerate() {
        let (scheduled, not_before) = match (prev_end, ctx.timing.turn_due(&req)) {
            (None, _) => (ctx.t0 + ctx.timing.offset(&req), None),
            (Some(_), TurnDue::At(off)) => (ctx.t0 + off, prev_end),
            (Some(end), TurnDue::AfterPrevious(d)) => (end + d, None),
        };
        if !sleep_until(scheduled - ctx.config.prepare_ahead, &ctx.stop).await {
            ctx.unsent.fetch_add((turns - k) as u64, Ordering::Relaxed);
            return;
        }
        let Some((rec, gaps)) = send_one(&ctx, &req, scheduled, not_before, false).await else {
            // Stopped before it was sent.
            ctx.unsent.fetch_add((turns - k) as u64, Ordering::Relaxed);
            return;
        };
        prev_end = Some(ctx.t0 + Duration::from_nanos((rec.ended_at_ms.max(0.0) * 1e6) as u64));
        let _ = ctx.records.send((rec, gaps)).await;
    }
}

/// One user of a closed loop: sends a request, and its next one when that ends, until the
/// loop's count or duration is reached or the run stops. Each request is due when the
/// previous one ended, so any delay of canaryd's shows as schedule lag.
async fn run_user(ctx: Arc<Ctx>, users: Arc<ClosedLoopWork>) {
    let mut due = ctx.t0;
    while !ctx.stop.is_cancelled() {
        let Some(req) = users.next(due.since(ctx.t0)) else {
            return;
        };
        if !sleep_until(due - ctx.config.prepare_ahead, &ctx.stop).await {
            ctx.unsent.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let Some((rec, gaps)) = send_one(&ctx, &req, due, None, false).await else {
            ctx.unsent.fetch_add(1, Ordering::Relaxed);
            return;
        };
        due = ctx.t0 + Duration::from_nanos((rec.ended_at_ms.max(0.0) * 1e6) as u64);
        let _ = ctx.records.send((rec, gaps)).await;
    }
}

fn stopped() -> Measurement {
    Measurement {
        sent: MonoTime::now(),
        end: Stamp::read(MonoTime::now()),
        error: Some(RequestError {
            kind: ErrorKind::Cancelled,
            http_status: None,
            message: "run stopped; grace period over".into(),
        }),
        ..Default::default()
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

/// Prepares, releases and measures one request. `not_before`: a previous turn's end that
/// may hold this one back past its deadline. `None` when the run stopped before the request
/// was sent: every wait before sending (connection, deadline, concurrency slot) gives way to
/// the stop, so a stopped run sends nothing more and counts the rest as unsent.
async fn send_one(
    ctx: &Ctx,
    req: &TraceRequest,
    scheduled: MonoTime,
    not_before: Option<MonoTime>,
    warmup: bool,
) -> Option<(RequestRecord, Gaps)> {
    let t0 = ctx.t0;
    let trace = TraceContext::new();
    let pick = ctx.replicas.pick();
    let (target, connector) = (&pick.replica.target, &pick.replica.connector);
    let mut rec = RequestRecord {
        url: Some(pick.replica.url.to_string()),
        id: req.index,
        trace_line: req.line,
        session: req.session,
        turn: req.turn,
        warmup,
        scheduled_at_ms: scheduled.ms_since(t0),
        input_tokens: req.input_tokens,
        output_tokens: req.output_tokens,
        trace_id: trace.trace_id.clone(),
        span_id: trace.span_id.clone(),
        ..Default::default()
    };

    let prompt = ctx.prompts.build(req, ctx.config.prompt_salt);
    rec.prompt_tokens_synthesized = prompt.tokens;
    let body = target.body(&prompt.body, req.output_tokens, req.extra.as_deref());
    drop(prompt);
    let request_id = format!("{}-{}", ctx.config.run_id, req.index);
    let traceparent = trace.traceparent_sampled(trace.is_sampled(ctx.config.trace_sample_ratio));
    let request = target.request(&body, &traceparent, &request_id);
    drop(body);
    // Under the open-file ceiling a request holds a slot from before it opens its
    // connection to its end; waiting for one past the deadline is held time.
    let mut slot_free_at = None;
    let _slot = match &ctx.slots {
        None => None,
        Some(sem) => match sem.try_acquire() {
            Ok(p) => Some(p),
            Err(_) => {
                let p = unless_stopped(&ctx.stop, sem.acquire()).await?.ok();
                slot_free_at = Some(MonoTime::now());
                p
            }
        },
    };
    // Open (or take) the connection ahead of the deadline, so a burst never waits on setup.
    // Under a concurrency ceiling the request may wait for a slot: it takes one only then,
    // from the pool the ceiling keeps warm, instead of holding an idle socket meanwhile.
    let mut conn = match ctx.permits {
        None => Some(unless_stopped(&ctx.stop, connector.acquire()).await?),
        Some(_) => None,
    };

    // Held back by the previous turn: released as soon as it is ready, the wait is hold.
    let mut hold_end = None;
    let release = match not_before {
        Some(end) if end > scheduled => {
            hold_end = Some(MonoTime::now());
            None
        }
        _ => Some(ctx.dispatcher.at(scheduled)),
    };
    if let Some(release) = release {
        // An error (the dispatch thread is gone) means "go now".
        let _ = unless_stopped(&ctx.stop, release).await?;
    }
    let _permit = match &ctx.permits {
        None => None,
        Some(sem) => match sem.try_acquire() {
            Ok(p) => Some(p),
            Err(_) => {
                let p = unless_stopped(&ctx.stop, sem.acquire()).await?.ok();
                hold_end = Some(MonoTime::now());
                p
            }
        },
    };
    let hold_end = hold_end.max(slot_free_at);
    if let Some(h) = hold_end {
        rec.hold_ms = h.ms_since(scheduled).max(0.0);
    }

    let conn = match conn.take() {
        Some(c) => c,
        None => unless_stopped(&ctx.stop, connector.acquire()).await?,
    };
    // A stop that came while this request was being released is not in flight yet.
    if ctx.stop.is_cancelled() {
        return None;
    }
    let mut conn: Connection = match conn {
        Ok(c) => c,
        Err(e) => {
            let now = MonoTime::now();
            rec.sent_at_ms = now.ms_since(t0);
            rec.ended_at_ms = rec.sent_at_ms;
            rec.schedule_lag_ms = (rec.sent_at_ms - rec.scheduled_at_ms).max(0.0);
            rec.status = Status::Error;
            rec.error = Some(connect_error(&e));
            if !warmup {
                ctx.progress.done.fetch_add(1, Ordering::Relaxed);
                ctx.progress.errors.fetch_add(1, Ordering::Relaxed);
            }
            return Some((rec, Gaps::default()));
        }
    };
    rec.connect_ms = conn.connect_time.map(|d| d.as_secs_f64() * 1e3);
    rec.socket_cookie = conn.cookie;
    if !warmup {
        ctx.progress.sent.fetch_add(1, Ordering::Relaxed);
    }
    let deadline = tokio::time::Instant::now() + ctx.config.target.timeout;
    let streaming = ctx.config.target.streaming;
    let max_tokens = target.max_tokens_sent(req.output_tokens);
    let limits = ReadLimits {
        caps: target.limits,
        max_chunks: target.limits.max_output_chunks(max_tokens),
        max_tokens,
        cancel_after: ctx
            .config
            .cancellation
            .filter(|c| !warmup && c.cancels(req.index))
            .map(|c| c.delay),
    };
    // A pooled connection may have been closed by the server just as it was taken (llama.cpp
    // closes after each stream, its FIN racing the next request): then the request never
    // reached the server, and it is sent once more on a new connection. The record's send
    // time is the second attempt's, so the lost time shows as schedule lag; later requests
    // stop reusing connections to this server.
    let reused = conn.connect_time.is_none();
    let second_try = reused.then(|| duplicate(&request));
    let mut m = tokio::select! {
        m = exchange(&mut conn, request, streaming, deadline, &limits) => m,
        _ = ctx.hard_stop.cancelled() => stopped(),
    };
    if let (true, Some(request)) = (m.unanswered, second_try) {
        connector.stop_reuse();
        match unless_stopped(&ctx.hard_stop, connector.open()).await {
            None => m = stopped(),
            Some(Ok(fresh)) => {
                conn = fresh;
                rec.connect_ms = conn.connect_time.map(|d| d.as_secs_f64() * 1e3);
                rec.socket_cookie = conn.cookie;
                m = tokio::select! {
                    m = exchange(&mut conn, request, streaming, deadline, &limits) => m,
                    _ = ctx.hard_stop.cancelled() => stopped(),
                };
            }
            // The request never reached the server, and no connection could be opened to
            // send it again: that is a failure to connect.
            Some(Err(e)) => {
                m.error = Some(connect_error(&e));
                m.end = Stamp::read(MonoTime::now());
            }
        }
    }
    fill(&mut rec, &m, t0);
    if m.error.is_none() && m.reusable {
        connector.release(conn);
    }
    if !warmup {
        ctx.progress.done.fetch_add(1, Ordering::Relaxed);
        if m.error.is_some() {
            ctx.progress.errors.fetch_add(1, Ordering::Relaxed);
        }
    }
    if ctx.config.record_chunks {
        rec.chunk_gaps_ms = Some(m.gaps.at.kept().to_vec());
        if let Some(rx) = &mut rec.rx {
            rx.userspace.chunk_gaps_ms = Some(m.gaps.read.kept().to_vec());
        }
    }
    Some((rec, m.gaps))
}

fn connect_error(e: &crate::connection::ConnectError) -> RequestError {
    match e.client_exhausted {
        true => RequestError {
            kind: ErrorKind::ClientResources,
            http_status: None,
            message: format!("canaryd is out of resources, the target is not at fault: {e}"),
        },
        false => RequestError {
            kind: ErrorKind::Connect,
            http_status: None,
            message: e.to_string(),
        },
    }
}

/// Derives a record's metrics from a measurement.
fn fill(rec: &mut RequestRecord, m: &Measurement, t0: MonoTime) {
    rec.sent_at_ms = m.sent.ms_since(t0);
    rec.ended_at_ms = m.end.read.ms_since(t0);
    rec.schedule_lag_ms = (rec.sent_at_ms - rec.scheduled_at_ms).max(0.0);
    rec.chunks = m.chunks;
    rec.usage.clone_from(&m.usage);
    rec.server_timings.clone_from(&m.timings);
    match &m.error {
        Some(e) => {
            rec.status = Status::Error;
            rec.error = Some(e.clone());
        }
        // What arrived before the close stays; there is no end-to-end latency.
        None if m.cancelled => rec.status = Status::Cancelled,
        None => {}
    }
    crate::figures::fill_response_times(rec, m);
}

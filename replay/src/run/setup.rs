//! What a run opens before its first request, in the order [`run_work`](super::run_work())
//! opens it: the checks, one connection pool per URL, the thread that writes records, the
//! grace timer, the in-flight ceilings, and the clock the schedule starts on.

use super::replicas::Replicas;
use super::{Config, Ctx, ReplayError, Work};
use crate::connection::Connector;
use crate::exchange::Gaps;
use crate::results::ResultsWriter;
use crate::start::{Placed, StartAt};
use canary_core::{
    CapSource, ClockReport, InFlightCap, MonoTime, Observer, RealtimeMap, RequestRecord,
    StartReport, WorkloadContext,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Checks the settings and `work` against them; the common start, placed on the monotonic
/// clock, when there is one.
pub(super) fn check(config: &Config, work: &Work) -> Result<Option<Placed>, ReplayError> {
    if let Work::Schedule(schedule) = work {
        config.check_schedule(schedule)?;
    }
    // The common start is mapped onto the monotonic clock once, here (validate() places it
    // too, so a shard launched too late is refused before it opens anything).
    config.validate()?;
    Ok(config.start_at.as_ref().map(StartAt::place).transpose()?)
}

/// One connection pool per URL, with TLS where a URL asks for it.
pub(super) fn replicas(config: &Config) -> Result<Replicas, ReplayError> {
    let any_tls = config.target.tls || config.replicas.iter().any(|t| t.tls);
    let tls = if any_tls {
        Some(canary_tls::client_config(
            config.target.ca_bundle.as_deref(),
            config.target.client_identity.as_ref(),
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
    Ok(replicas)
}

/// Longest wait at a run's start for the kernel to begin stamping received packets.
const STAMPING_WAIT: Duration = Duration::from_secs(1);

/// Keeps the kernel stamping received packets for the run, when any URL reads with receive
/// timestamps: the switch is host-wide and flips a moment after the first socket asks, so on a
/// host where nothing else wants stamps a run's first responses came back unstamped. `None`
/// when no URL wants stamps, or the kernel refused (the connections report that themselves).
pub(super) async fn stamping_hold(config: &Config) -> Option<canary_rxstamp::StampingHold> {
    let wanted = std::iter::once(&config.target)
        .chain(&config.replicas)
        .any(|t| t.kernel_timestamps);
    if !wanted {
        return None;
    }
    match canary_rxstamp::StampingHold::take(STAMPING_WAIT).await {
        Ok((hold, true)) => Some(hold),
        Ok((hold, false)) => {
            tracing::warn!(
                "the kernel did not stamp received packets within {} ms of turning receive \
                 timestamps on; responses until it does are timed by canaryd's reads (bounds)",
                STAMPING_WAIT.as_millis()
            );
            Some(hold)
        }
        Err(e) => {
            tracing::debug!("receive timestamps: no stamping hold: {e}");
            None
        }
    }
}

/// The request shape and load pattern of `work`, for `summary.json`'s `context.workload`.
pub(super) fn workload_context(config: &Config, work: &Work) -> WorkloadContext {
    match work {
        Work::Schedule(schedule) => {
            crate::workload::workload_context(&config.target, schedule, config.concurrency)
        }
        Work::Rate(_) => {
            crate::workload::synthetic_context(&config.target, "rate", work, config.concurrency)
        }
        Work::ClosedLoop(_) => crate::workload::synthetic_context(
            &config.target,
            "closed_loop",
            work,
            config.concurrency,
        ),
    }
}

/// How often at most the record-writing thread wakes while records come fast. At 10 ms it
/// slept 0.4 times per request at 500 req/s, at 50 ms 0.09 (perf, issue 21). Records wait up
/// to that long in the channel (200 of them at 4,000 req/s), and a run's end as long for its
/// last ones.
const BATCH: Duration = Duration::from_millis(50);

/// The thread records go to: file writes never stall the runtime's thread.
pub(super) struct Collector {
    thread: std::thread::JoinHandle<ResultsWriter>,
    /// The run's start, for the observer's chunk annotations (set once it is known).
    t0: Arc<AtomicU64>,
}

impl Collector {
    /// Starts the thread: each record is annotated by `observer`, then written by `writer`.
    /// Warm-up records are measured from `warmup_t0`, and wait for the run's start
    /// ([`Collector::set_t0`]) to be written from it ([`WarmupRecords`]).
    pub fn spawn(
        mut writer: ResultsWriter,
        observer: Option<Arc<dyn Observer>>,
        warmup_t0: MonoTime,
    ) -> (Collector, mpsc::Sender<(RequestRecord, Gaps)>) {
        let (tx, mut rx) = mpsc::channel::<(RequestRecord, Gaps)>(4096);
        let t0 = Arc::new(AtomicU64::new(warmup_t0.as_nanos()));
        let t0_shared = t0.clone();
        let thread = std::thread::spawn(move || {
            let mut woke = MonoTime::default();
            let mut warmups = WarmupRecords::default();
            while let Some(first) = rx.blocking_recv() {
                let mut next = Some(first);
                while let Some((mut rec, gaps)) = next {
                    // A warm-up record may be taken after the run's start is set: it was
                    // measured from the warm-up's t0 all the same.
                    let t0 = match rec.warmup {
                        true => warmup_t0,
                        false => MonoTime(t0_shared.load(Ordering::Relaxed)),
                    };
                    if let Some(o) = &observer {
                        o.annotate_chunks(&mut rec, gaps.read.kept(), t0);
                    }
                    match rec.warmup {
                        true => warmups.hold(rec, t0),
                        // The first measured record comes after the run's start is set.
                        false => {
                            warmups.write(&mut writer, t0);
                            writer.record(&rec, &gaps.at);
                        }
                    }
                    next = rx.try_recv().ok();
                }
                // On disk once per batch: a run that dies loses at most this batch.
                writer.flush();
                // Records come as fast as requests end: waking for each one cost a context
                // switch per request (issue 21). Woken again within `BATCH`, wait out the
                // rest of it and take what came meanwhile together; a slow run still has
                // each record written as it comes.
                let now = MonoTime::now();
                let since = now.since(woke);
                woke = now;
                if since < BATCH {
                    std::thread::sleep(BATCH - since);
                }
            }
            // A run stopped before any measured record: its start was set all the same.
            warmups.write(&mut writer, MonoTime(t0_shared.load(Ordering::Relaxed)));
            writer.flush();
            writer
        });
        (Collector { thread, t0 }, tx)
    }

    /// The run's start, once the warm-up is over: measured records are timed from it, and
    /// warm-up records are written from it.
    pub fn set_t0(&self, t0: MonoTime) {
        self.t0.store(t0.as_nanos(), Ordering::Relaxed);
    }

    /// The writer, once every sender is gone and the thread has written all it was sent.
    pub fn join(self) -> std::thread::Result<ResultsWriter> {
        self.thread.join()
    }
}

/// Warm-up records, held until the run's start is final. A record's times count from the t0
/// it was measured against, and the warm-up runs before the run's start is set (when ready,
/// or at `--start-at`): written at once, warm-up records counted from a t0 the measured ones
/// do not share, and overlapped them in `records.jsonl` (a closed loop of 3 seemed to have 4
/// in flight). Held, they are written with times from the run's own t0, negative, once it is
/// known. They take memory till then (a record, about 1 KB, each; `warmup_requests` is
/// capped), and their observers' annotations were made against the t0 they were measured
/// against, so those stay right.
#[derive(Default)]
pub(super) struct WarmupRecords {
    held: Vec<RequestRecord>,
    /// The t0 the held records' times count from.
    from: MonoTime,
}

impl WarmupRecords {
    /// Holds `rec`, timed from `t0`.
    pub fn hold(&mut self, rec: RequestRecord, t0: MonoTime) {
        self.from = t0;
        self.held.push(rec);
    }

    /// Writes every held record with its times counted from `t0` instead.
    pub fn write(&mut self, writer: &mut ResultsWriter, t0: MonoTime) {
        // ms from `t0` = ms from `from` + (from - t0).
        let shift = (self.from.as_nanos() as f64 - t0.as_nanos() as f64) / 1e6;
        for mut rec in self.held.drain(..) {
            rebase(&mut rec, shift);
            // Warm-up records stay out of every statistic, their chunk gaps too.
            writer.record(&rec, &canary_core::ChunkGaps::new());
        }
    }
}

/// Moves a record's times (those counted from t0) by `shift_ms`; its durations stay.
fn rebase(rec: &mut RequestRecord, shift_ms: f64) {
    rec.scheduled_at_ms += shift_ms;
    rec.sent_at_ms += shift_ms;
    rec.ended_at_ms += shift_ms;
}

/// The hard stop that ends in-flight requests `grace` after `stop`, and the task that
/// fires it (aborted when the run ends first).
pub(super) fn grace_timer(
    stop: &CancellationToken,
    grace: Duration,
) -> (CancellationToken, JoinHandle<()>) {
    let hard_stop = CancellationToken::new();
    let timer = {
        let (stop, hard_stop) = (stop.clone(), hard_stop.clone());
        tokio::spawn(async move {
            stop.cancelled().await;
            tokio::time::sleep(grace).await;
            hard_stop.cancel();
        })
    };
    (hard_stop, timer)
}

/// The concurrency setting's permits and the open-file ceiling's slots (see [`Ctx`]).
pub(super) fn in_flight_limits(cap: &InFlightCap) -> (Option<Semaphore>, Option<Semaphore>) {
    if cap.source == CapSource::OpenFiles {
        tracing::debug!(in_flight_cap = ?cap, "in-flight ceiling from the open-file limit");
    }
    // tokio panics past its most permits; no ceiling that high differs from it in practice.
    let permits = |n: usize| Semaphore::new(n.min(Semaphore::MAX_PERMITS));
    match (cap.source, cap.limit) {
        (CapSource::Concurrency, Some(n)) => (Some(permits(n)), None),
        (_, Some(n)) => (None, Some(permits(n))),
        (_, None) => (None, None),
    }
}

/// Sets the run's start in `ctx` and says how it was placed: at the common instant, unless
/// a long warm-up overran it past what the run may be late by; else soon enough to prepare
/// the first burst before it is due.
pub(super) fn start_clock(
    ctx: &mut Ctx,
    placed: Option<&Placed>,
) -> Result<ClockReport, ReplayError> {
    let clock = match (&ctx.config.start_at, placed) {
        (Some(start), Some(placed)) => {
            let now = MonoTime::now();
            start.check_late(placed, now)?;
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
    Ok(clock)
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

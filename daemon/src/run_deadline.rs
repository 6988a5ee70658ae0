//! How long one run may go on: a run deadline, and a cut-off for a target that takes requests
//! and never answers them. Either stops the run the way a SIGTERM does (dispatching ends,
//! in-flight requests get the `grace_period`, everything measured is kept and written), and
//! the run's verdict says which: `error: run deadline … passed` or `error: target
//! unresponsive: …`, not `interrupted`.
//!
//! Without them a target that accepts connections and never answers holds a closed-loop run
//! for `request_count × request_timeout` (100 min with the defaults), with no verdict and every
//! tick of its workload skipped meanwhile.

use crate::cli::sweep::point::Axis;
use crate::config::{run_length, Synthetic, Workload};
use canary_core::{ErrorKind, MonoTime, Observer, RequestRecord, Status};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Consecutive requests that got nothing back (a connect that timed out, or a request timeout
/// with no response head) after which the daemon stops a run as `target unresponsive`. Each
/// of them waited its whole timeout; a server that answers anything (a status, a token) in
/// between, however slowly, resets the count, and so does any other outcome. A refused
/// connection fails at once and is not counted (the run ends soon by itself, as `target
/// unusable`), nor are requests cut by a stop or cancelled on purpose.
pub const UNRESPONSIVE_AFTER: u32 = 5;

/// The default deadline is never below this.
pub const DEFAULT_FLOOR: Duration = Duration::from_secs(3600);

/// The default deadline is this many times the workload's period (`every`, or its cron's
/// shortest gap) and this many times its planned length (plus its `grace_period`), where
/// those are longer than [`DEFAULT_FLOOR`].
pub const DEFAULT_FACTOR: u32 = 2;

/// What may stop a run before its end, besides a signal.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Limits {
    /// Stop the run this long after its dispatch starts (its warm-up included, the loading of
    /// its trace not).
    pub deadline: Option<Duration>,
    /// Stop it after this many consecutive requests got nothing back.
    pub unresponsive_after: Option<u32>,
}

/// A daemon workload's deadline when it gives none; `None`: no deadline (the unresponsive
/// cut-off still applies). A default never cuts a run that could still end by itself:
///
/// - where the run's planned length is known before it runs (`replay`: the trace's schedule
///   at its speedup; a synthetic load's `benchmark_duration` or `request_count` over its
///   rate), the largest of [`DEFAULT_FLOOR`], [`DEFAULT_FACTOR`] × its period (`every`, or its
///   cron's shortest gap) and [`DEFAULT_FACTOR`] × that length plus its `grace_period`;
/// - where it is not (a closed loop of a `request_count`: the server's pace), the largest of
///   those first two and [`settings_bound`], the longest such a run can take by its own
///   settings; where that bound has no finite value, no deadline.
///
/// `request_timeout`: the target's.
pub fn default_for(
    w: &Workload,
    replay: Option<Duration>,
    request_timeout: Duration,
) -> Option<Duration> {
    let period = w.cadence.shortest_gap().unwrap_or_default();
    let floor = DEFAULT_FLOOR.max(period.saturating_mul(DEFAULT_FACTOR));
    match run_length::run_length(w, replay) {
        Some(l) => {
            // Its warm-up and the last answers after the last send, each request over within
            // `one_request`: at most this much besides the length, where no `concurrency`
            // ceiling holds requests back.
            let one = one_request(request_timeout);
            let besides = u32::try_from(w.warmup_requests.saturating_add(1))
                .map_or(Duration::MAX, |n| one.saturating_mul(n));
            let longest = l
                .length
                .saturating_mul(DEFAULT_FACTOR)
                .max(l.length.saturating_add(besides));
            Some(floor.max(longest.saturating_add(w.grace_period)))
        }
        None => settings_bound(w, request_timeout).map(|b| floor.max(b)),
    }
}

/// The longest one run of a closed loop of a `request_count` can take by its own settings:
/// each user sends its requests one after the other, each of them over after at most
/// `connect_timeout` (10 s, or `request_timeout` if shorter) plus `request_timeout`; so
/// `(warmup_requests + ceil(request_count / concurrency)) × that + grace_period` (with a
/// `benchmark_duration` too, at most that duration plus one request). In a sweep over
/// concurrency, its smallest point's. `None` for any other load, or past any duration.
/// Not counted: a lower ceiling on requests in flight than `concurrency`, which the daemon
/// says at the run's start when the open-file limit sets one.
pub fn settings_bound(w: &Workload, request_timeout: Duration) -> Option<Duration> {
    let Some(Synthetic::ClosedLoop(c)) = &w.synthetic else {
        return None;
    };
    let n = c.extent.count()?;
    let users = match &w.sweep {
        Some(s) if s.axis == Axis::Concurrency => {
            s.values.iter().fold(f64::INFINITY, |m, &v| m.min(v)) as u64
        }
        _ => c.users as u64,
    }
    .max(1);
    let one = one_request(request_timeout);
    let rounds = n.div_ceil(users).checked_add(w.warmup_requests as u64)?;
    let mut sending = one.checked_mul(u32::try_from(rounds).ok()?)?;
    if let Some(d) = c.extent.duration {
        sending = sending.min(d.saturating_add(one));
    }
    sending.checked_add(w.grace_period)
}

/// The longest one request can take: its connect (`connect_timeout`, 10 s, or
/// `request_timeout` if shorter), then `request_timeout`.
fn one_request(request_timeout: Duration) -> Duration {
    canary_replay::DEFAULT_CONNECT_TIMEOUT
        .min(request_timeout)
        .saturating_add(request_timeout)
}

/// `15m`, `2h`, `90s`, `1.5s`: durations as the config writes them (one function, the
/// cadence's).
pub use crate::config::cadence::human;

/// Stops one run when its [`Limits`] say so, and says why: the run's stop token (a child of
/// the shutdown's, so a signal stops it too), the observer that counts requests that got
/// nothing back, and the deadline's timer ([`Cutoff::arm`]).
pub struct Cutoff {
    stop: CancellationToken,
    unresponsive_after: Option<u32>,
    silent: AtomicU32,
    why: Mutex<Option<String>>,
}

impl Cutoff {
    /// A cut-off for a run stopped by `shutdown` too.
    pub fn new(shutdown: &CancellationToken, limits: Limits) -> Arc<Cutoff> {
        Arc::new(Cutoff {
            stop: shutdown.child_token(),
            unresponsive_after: limits.unresponsive_after.filter(|&n| n > 0),
            silent: AtomicU32::new(0),
            why: Mutex::new(None),
        })
    }

    /// The run's stop: fired by the shutdown, the deadline or the cut-off.
    pub fn stop(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// Starts the deadline's timer, `deadline` from now. The timer stops when the returned
    /// guard is aborted or dropped: a run that ends first, or whose future is dropped, leaves
    /// no timer behind holding the cut-off until the deadline.
    pub fn arm(self: &Arc<Self>, deadline: Option<Duration>) -> Option<Timer> {
        let deadline = deadline?;
        let cut = self.clone();
        Some(Timer(tokio::spawn(async move {
            tokio::select! {
                () = tokio::time::sleep(deadline) => cut.trip(format!(
                    "run deadline {} passed; the run was stopped there, what it measured kept",
                    human(deadline)
                )),
                () = cut.stop.cancelled() => {}
            }
        })))
    }

    /// Why the run was stopped by its limits; `None`: it was not (it ended, or a signal
    /// stopped it first).
    pub fn why(&self) -> Option<String> {
        self.why.lock().unwrap().clone()
    }

    /// Stops the run for `why`, unless it is stopped already; logged once.
    fn trip(&self, why: String) {
        let mut said = self.why.lock().unwrap();
        if said.is_some() || self.stop.is_cancelled() {
            return;
        }
        tracing::warn!("{why}: stopping the run");
        *said = Some(why);
        self.stop.cancel();
    }

    /// What `record` heard from the target ([`Heard`]).
    fn heard(record: &RequestRecord) -> Heard<'_> {
        if record.status == Status::Cancelled {
            return Heard::Neutral;
        }
        let Some(e) = record
            .error
            .as_ref()
            .filter(|_| record.status == Status::Error)
        else {
            return Heard::Answered;
        };
        match e.kind {
            ErrorKind::Timeout if record.ttfb_ms.is_none() => Heard::Nothing(&e.message),
            // A connect that timed out (canaryd's `connect_timeout`, or the kernel's);
            // a refusal or a reset fails at once.
            ErrorKind::Connect if e.message.contains("timed out") => Heard::Nothing(&e.message),
            ErrorKind::Connect | ErrorKind::Cancelled | ErrorKind::ClientResources => {
                Heard::Neutral
            }
            _ => Heard::Answered,
        }
    }
}

/// A deadline's timer ([`Cutoff::arm`]), aborted when dropped.
pub struct Timer(tokio::task::JoinHandle<()>);

impl Timer {
    /// Stops the timer (as dropping it does).
    pub fn abort(&self) {
        self.0.abort();
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What one request heard from the target.
enum Heard<'a> {
    /// Something, or a failure that says the target is there (a status, a cut stream).
    Answered,
    /// Nothing within its timeout; the error's message.
    Nothing(&'a str),
    /// Neither: it says nothing of the target.
    Neutral,
}

impl Observer for Cutoff {
    fn annotate(&self, record: &mut RequestRecord, _t0: MonoTime) {
        let Some(n) = self.unresponsive_after else {
            return;
        };
        match Cutoff::heard(record) {
            Heard::Answered => self.silent.store(0, Ordering::Relaxed),
            Heard::Neutral => {}
            Heard::Nothing(cause) => {
                let silent = self.silent.fetch_add(1, Ordering::Relaxed) + 1;
                if silent >= n {
                    self.trip(format!(
                        "target unresponsive: {silent} consecutive requests got nothing back \
                         within their timeout (last: {cause})"
                    ));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use canary_core::RequestError;

    fn failed(kind: ErrorKind, message: &str, ttfb_ms: Option<f64>) -> RequestRecord {
        RequestRecord {
            status: Status::Error,
            error: Some(RequestError {
                kind,
                http_status: None,
                message: message.into(),
            }),
            ttfb_ms,
            ..RequestRecord::default()
        }
    }

    fn see(cut: &Cutoff, mut r: RequestRecord) {
        cut.annotate(&mut r, MonoTime::now());
    }

    #[test]
    fn only_consecutive_silent_requests_stop_the_run() {
        let shutdown = CancellationToken::new();
        let limits = Limits {
            deadline: None,
            unresponsive_after: Some(3),
        };
        let cut = Cutoff::new(&shutdown, limits);
        let timeout = || {
            failed(
                ErrorKind::Timeout,
                "no complete response within 300 ms",
                None,
            )
        };
        see(&cut, timeout());
        see(&cut, timeout());
        // A slow answer in between (a head, then the timeout) resets the count.
        see(&cut, failed(ErrorKind::Timeout, "slow", Some(250.0)));
        see(&cut, timeout());
        // Refused connections and requests a stop cut say nothing either way.
        see(&cut, failed(ErrorKind::Connect, "Connection refused", None));
        see(&cut, failed(ErrorKind::Cancelled, "grace over", None));
        see(&cut, timeout());
        assert!(!cut.stop().is_cancelled() && cut.why().is_none());
        see(
            &cut,
            failed(ErrorKind::Connect, "connecting: timed out after 1s", None),
        );
        assert!(cut.stop().is_cancelled());
        let why = cut.why().unwrap();
        assert!(
            why.starts_with("target unresponsive: 3 consecutive"),
            "{why}"
        );
        assert!(why.contains("timed out after 1s"), "{why}");
        // The shutdown was not touched: only this run stops.
        assert!(!shutdown.is_cancelled());
    }

    #[test]
    fn a_signal_first_is_not_called_a_cut() {
        let shutdown = CancellationToken::new();
        let limits = Limits {
            deadline: None,
            unresponsive_after: Some(1),
        };
        let cut = Cutoff::new(&shutdown, limits);
        shutdown.cancel();
        see(&cut, failed(ErrorKind::Timeout, "t", None));
        assert!(cut.why().is_none());
    }

    /// The one workload of a config of `keys` (a synthetic load, every 15 min).
    fn workload(keys: &str) -> Workload {
        let text = format!(
            "state_dir = \"/tmp/canaryd-state\"\n[targets.local]\nurl = \"http://127.0.0.1:8000\"\n\
             model = \"m\"\n[workloads.w]\ntarget = \"local\"\n{keys}\n"
        );
        let c = crate::config::Config::parse(
            &text,
            std::path::Path::new("canaryd.toml"),
            std::path::Path::new("/etc/canaryd"),
        )
        .unwrap();
        c.workloads[0].clone()
    }

    const TEN_MIN: Duration = Duration::from_secs(600);
    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn a_closed_loop_of_a_count_gets_what_its_settings_allow() {
        // 2000 requests over 4 users every 15 min: each user sends 500, one after the other,
        // each over within 10 s of connect plus 10 min. A healthy run of 70 min (8.4 s a
        // request) is not cut: the old default (1 h, twice the period) cut it.
        let w = workload("every = \"15m\"\nrequest_count = 2000\nconcurrency = 4");
        let d = default_for(&w, None, TEN_MIN).unwrap();
        assert_eq!(d, S(500 * 610 + 30));
        assert!(d > S(70 * 60));
        // Warm-up requests are sent one at a time before: each adds one request's bound.
        let w =
            workload("every = \"15m\"\nrequest_count = 2000\nconcurrency = 4\nwarmup_requests = 2");
        assert_eq!(default_for(&w, None, TEN_MIN), Some(S(502 * 610 + 30)));
        // A short request timeout: the connect is bounded by it too; the floor still holds.
        let w = workload("every = \"15m\"\nrequest_count = 8\nconcurrency = 4");
        assert_eq!(default_for(&w, None, S(5)), Some(S(3600)));
        // With a benchmark_duration too, it ends at the first: that duration and one request.
        let w = workload(
            "every = \"6h\"\nrequest_count = 2000000\nconcurrency = 4\n\
             benchmark_duration = \"3h\"",
        );
        assert_eq!(
            default_for(&w, None, TEN_MIN),
            Some(S(3 * 3600 + 610 + 30).max(S(12 * 3600)))
        );
    }

    #[test]
    fn a_sweep_over_concurrency_is_bounded_by_its_smallest_point() {
        let w = workload(
            "kind = \"sweep\"\ncron = \"0 3 * * *\"\nsweep_concurrency = [64, 2, 16]\n\
             request_count = 100000",
        );
        // The base's users stand aside: its points' smallest, 2, sends 50000 each.
        assert_eq!(default_for(&w, None, TEN_MIN), Some(S(50_000 * 610 + 30)));
    }

    #[test]
    fn a_known_length_gets_twice_it_or_what_its_last_request_needs() {
        // An open loop of 1000 requests at 2 req/s (about 500 s) every 15 min: the floor.
        let w = workload("every = \"15m\"\nrequest_rate = 2\nrequest_count = 1000");
        assert_eq!(default_for(&w, None, TEN_MIN), Some(S(3600)));
        // A 3 h benchmark_duration: twice it, plus the grace period.
        let w = workload("every = \"1d\"\nrequest_rate = 2\nbenchmark_duration = \"3h\"");
        assert_eq!(default_for(&w, None, TEN_MIN), Some(S(2 * 86_400)));
        let w = workload("every = \"15m\"\nrequest_rate = 2\nbenchmark_duration = \"3h\"");
        assert_eq!(default_for(&w, None, TEN_MIN), Some(S(6 * 3600 + 30)));
        // A 2 h timeout: the last request sent may take it, after the 1 h of sending.
        let w = workload("every = \"15m\"\nrequest_rate = 2\nbenchmark_duration = \"1h\"");
        assert_eq!(
            default_for(&w, None, S(7200)),
            Some(S(3600 + 10 + 7200 + 30))
        );
        // A closed loop of a duration: its length is known.
        let w = workload("every = \"15m\"\nconcurrency = 4\nbenchmark_duration = \"2h\"");
        assert_eq!(default_for(&w, None, TEN_MIN), Some(S(4 * 3600 + 30)));
    }

    #[test]
    fn a_trace_of_unknown_length_gets_no_default_deadline() {
        let w = workload("every = \"15m\"\ntrace = \"t.jsonl\"");
        assert_eq!(default_for(&w, None, TEN_MIN), None);
        assert_eq!(default_for(&w, Some(S(60)), TEN_MIN), Some(S(3600)));
    }

    /// A timer whose run's future is dropped stops with it (review 3, finding 16): the old
    /// detached task held the cut-off until its deadline.
    #[tokio::test]
    async fn a_dropped_timer_lets_go_of_its_cutoff() {
        let cut = Cutoff::new(&CancellationToken::new(), Limits::default());
        let timer = cut.arm(Some(Duration::from_secs(3600))).unwrap();
        tokio::task::yield_now().await;
        assert_eq!(Arc::strong_count(&cut), 2);
        drop(timer);
        for _ in 0..100 {
            if Arc::strong_count(&cut) == 1 {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(
            Arc::strong_count(&cut),
            1,
            "the timer's task still holds it"
        );
        assert!(cut.why().is_none());
    }

    #[test]
    fn human_durations() {
        assert_eq!(human(Duration::from_secs(1200)), "20m");
        assert_eq!(human(Duration::from_secs(90)), "90s");
        assert_eq!(human(Duration::from_millis(1500)), "1.5s");
    }
}

//! How long one run of a workload takes, where that is known before it runs, checked against
//! its schedule: runs of one workload never overlap, so a run longer than the gap to its next
//! start skips that start (on a `start_at` grid, its instant is missed; README "Running as a
//! daemon"), and the `every` written never holds. Found where the trace is loaded
//! (check-config, the daemon's start and reloads: `service::check_traces`), since a trace's
//! length is its schedule's.

use super::shape::Synthetic;
use super::Workload;
use crate::cli::sweep::point::Axis;
use std::time::Duration;

/// An error of a workload found against its trace, at the line of the key it is about (not
/// the `trace` key's).
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct AtKey {
    /// 1-based line of the key, when known.
    pub line: Option<usize>,
    /// `workloads.NAME.KEY: …`.
    pub message: String,
}

/// One run's length: at least `length` (`bound`: the trace's last send at its speedup, a
/// `benchmark_duration`), or about it (an estimate: requests over a rate); `how` says which.
///
/// What a run spends besides (read from `canary_replay::run`): its `warmup_requests`, sent
/// one at a time before its schedule starts (each point of a sweep and each probe of a
/// capacity search has its own), and the answers still in flight after its last send (the
/// drain); both at the server's pace, so not in `length`, only said. A sweep's cooldowns are
/// in it. The `grace_period` is not: it is spent only after a stop (SIGTERM, Ctrl-C), never
/// by a run that ends by itself.
#[derive(Debug, Clone, PartialEq)]
pub struct RunLength {
    /// The length.
    pub length: Duration,
    /// A lower bound (else an estimate).
    pub bound: bool,
    /// Where it comes from, for a message.
    pub how: String,
    /// Warm-up requests the run sends besides, one at a time (exact; their time is not in
    /// `length`).
    pub warmup_requests: usize,
}

/// A sweep over a trace's speedups whose point would take more than a year to replay (a
/// speedup of 1e-12): the base workload's check passed it, and every run of the sweep was an
/// error at that point. `replay`: the selected requests' schedule at `w.speedup` (at least
/// this long, [`canary_replay::Schedule::min_duration`]).
pub fn check_sweep_points(w: &Workload, replay: Duration) -> Result<(), AtKey> {
    let Some(spec) = w.sweep.as_ref().filter(|s| s.axis == Axis::Speedup) else {
        return Ok(());
    };
    let max = canary_replay::trace::MAX_SPAN;
    for &v in &spec.values {
        let takes = at_speedup(replay, w.speedup, v);
        if takes.is_none_or(|t| t > max) {
            let days = |d: Duration| format!("{:.0}", d.as_secs_f64() / 86_400.0);
            return Err(AtKey {
                line: w.sweep_line,
                message: format!(
                    "workloads.{}.sweep_speedup: point {}: replaying the selected requests would \
                     take at least {} days, more than the {} days allowed; no run could take it",
                    w.name,
                    spec.axis.label(v),
                    takes.map_or_else(|| "∞".to_string(), days),
                    days(max),
                ),
            });
        }
    }
    Ok(())
}

/// `replay` (a schedule at speedup `from`) at speedup `to`; `None` past any duration.
fn at_speedup(replay: Duration, from: f64, to: f64) -> Option<Duration> {
    Duration::try_from_secs_f64(replay.as_secs_f64() * from / to).ok()
}

/// One run's length, where it is known: a trace's schedule (`replay`, at `w.speedup`), a
/// synthetic load's `benchmark_duration` or `request_count` over `request_rate`, a sweep's
/// points and cooldowns, a capacity search's first probe. `None`: it is the server's pace (a
/// closed loop of a request count).
pub fn run_length(w: &Workload, replay: Option<Duration>) -> Option<RunLength> {
    if let Some(spec) = &w.sweep {
        let mut total = RunLength {
            length: Duration::ZERO,
            bound: true,
            how: String::new(),
            warmup_requests: 0,
        };
        for &v in &spec.values {
            let mut point = w.clone();
            let replay = match spec.axis {
                Axis::Speedup => replay.map(|r| at_speedup(r, w.speedup, v))?,
                _ => replay,
            };
            match (spec.axis, &mut point.synthetic) {
                (Axis::RequestRate, Some(Synthetic::Rate(r))) => r.rate = v,
                (Axis::Concurrency, Some(Synthetic::ClosedLoop(c))) => c.users = v as usize,
                _ => {}
            }
            point.sweep = None;
            let one = one_run(&point, replay)?;
            total.length = total.length.saturating_add(one.length);
            total.bound &= one.bound;
            total.warmup_requests = total.warmup_requests.saturating_add(one.warmup_requests);
        }
        let pauses = spec.values.len().saturating_sub(1) as u32;
        total.length = total
            .length
            .saturating_add(spec.cooldown.saturating_mul(pauses));
        total.how = format!(
            "its {} points{}",
            spec.values.len(),
            match spec.cooldown.is_zero() {
                true => String::new(),
                false => format!(" and {pauses} cooldowns"),
            }
        );
        return Some(total);
    }
    let mut one = one_run(w, replay)?;
    if w.capacity.is_some() {
        one.how = format!("its first probe: {}", one.how);
    }
    Some(one)
}

/// One plain run of `w` (a sweep's point, a capacity probe), its warm-up counted.
fn one_run(w: &Workload, replay: Option<Duration>) -> Option<RunLength> {
    let mut one = measured_phase(w, replay)?;
    one.warmup_requests = w.warmup_requests;
    Some(one)
}

/// [`one_run`]'s measured phase: from the schedule's start to its last send.
fn measured_phase(w: &Workload, replay: Option<Duration>) -> Option<RunLength> {
    if w.trace.is_some() {
        return replay.map(|length| RunLength {
            length,
            bound: true,
            how: "the selected requests' schedule".into(),
            warmup_requests: 0,
        });
    }
    let seconds = |d: Duration| canary_core::rate_text::number(d.as_secs_f64());
    match w.synthetic.as_ref()? {
        Synthetic::Rate(r) => {
            let by_count = r.extent.count().and_then(|n| {
                Duration::try_from_secs_f64(n as f64 / r.rate)
                    .ok()
                    .map(|d| (n, d))
            });
            match (r.extent.duration, by_count) {
                (d, Some((n, c))) if d.is_none_or(|d| c < d) => Some(RunLength {
                    length: c,
                    bound: false,
                    how: format!(
                        "{n} requests at {} req/s",
                        canary_core::rate_text::number(r.rate)
                    ),
                    warmup_requests: 0,
                }),
                (Some(d), _) => Some(RunLength {
                    length: d,
                    bound: true,
                    how: format!("benchmark_duration {} s", seconds(d)),
                    warmup_requests: 0,
                }),
                (None, _) => None,
            }
        }
        // A request count's length is the server's pace: not known.
        Synthetic::ClosedLoop(c) => match (c.extent.count(), c.extent.duration) {
            (None, Some(d)) => Some(RunLength {
                length: d,
                bound: true,
                how: format!("benchmark_duration {} s", seconds(d)),
                warmup_requests: 0,
            }),
            _ => None,
        },
    }
}

/// The warning for a run of `w` (see [`run_length`]) as long as the shortest gap between two
/// of its starts, or longer: `workloads.NAME.every: …` (or `.cron`), for the line of that key.
pub fn overrun_warning(w: &Workload, replay: Option<Duration>) -> Option<String> {
    let gap = w.cadence.shortest_gap()?;
    let run = run_length(w, replay)?;
    if run.length < gap {
        return None;
    }
    let s = |d: Duration| canary_core::rate_text::number((d.as_secs_f64() * 10.0).round() / 10.0);
    let (key, between) = match w.cadence {
        super::Cadence::Every { .. } => ("every", "its period"),
        super::Cadence::Cron { .. } => ("cron", "the shortest gap between two of its firings"),
    };
    // What the figure leaves out, at the server's pace: said, so "at least" reads as one.
    let besides = match run.warmup_requests {
        0 => "; not counted: the answers still in flight after the last send, at the \
              server's pace"
            .to_string(),
        n => format!(
            "; not counted: {n} warm-up request{} sent one at a time before {}, and the \
             answers still in flight after the last send, at the server's pace",
            if n == 1 { "" } else { "s" },
            match &w.sweep {
                Some(_) => format!("each point ({} each)", w.warmup_requests),
                None => "it".to_string(),
            },
        ),
    };
    let then = match (w.on_overrun, &w.start_at) {
        (super::cadence::OnOverrun::StartWhenFree, _) => format!(
            "so each run starts late, when the one before ends (on_overrun = \"start_when_free\"), \
             later each time, until one ends past the next due time and that run is skipped: the \
             workload runs less often than written; lengthen {key} or shorten the run"
        ),
        (_, Some(_)) => format!(
            "so each run skips the start after it (on a start_at grid, that grid instant) and the \
             workload runs less often than written; lengthen {key} or shorten the run"
        ),
        (_, None) => format!(
            "so each run skips the start after it (on a start_at grid, that grid instant) and the \
             workload runs less often than written; lengthen {key} or shorten the run (or, when a \
             run is only a little longer, on_overrun = \"start_when_free\" starts it late instead)"
        ),
    };
    Some(format!(
        "workloads.{}.{key}: one run takes {} {} s ({}{}{besides}), not less than {between}, {} s: runs \
         never overlap, {then}",
        w.name,
        match run.bound {
            true => "at least",
            false => "about",
        },
        s(run.length),
        run.how,
        match run.bound {
            true => "",
            false => ", an estimate",
        },
        s(gap),
    ))
}

/// How far past its period a closed loop of a request count can run against a target that
/// accepts requests and answers too few of them to trip the unresponsive cut-off, before
/// [`unanswered_warning`] says so.
pub const UNANSWERED_PERIODS: u32 = 3;

/// Why a run of `w` (its target's `request_timeout` `timeout`) can last far longer than its
/// period against a target that accepts requests and answers too few of them to trip the
/// unresponsive cut-off ([`crate::run_deadline::UNRESPONSIVE_AFTER`] in a row): a closed loop
/// of a request count, its users each sending their share one after another, each waiting the
/// whole `timeout` (audit finding 2). Its run deadline (`run_deadline`, or the default,
/// [`crate::run_deadline::default_for`]) bounds it: the bound said is the lesser of the two
/// (both upper bounds, the grace period after a deadline aside).
pub fn unanswered_warning(w: &Workload, timeout: Duration) -> Option<String> {
    let Some(Synthetic::ClosedLoop(c)) = &w.synthetic else {
        return None;
    };
    // One bounded by a duration too ends then, but for the requests in flight.
    let (Some(count), None) = (c.extent.count, c.extent.duration) else {
        return None;
    };
    let period = w.cadence.shortest_gap()?;
    let users = c.users.max(1) as u64;
    let rounds = u32::try_from(count.div_ceil(users)).unwrap_or(u32::MAX);
    let worst = timeout.saturating_mul(rounds);
    let (deadline, which) = match w.run_deadline {
        Some(d) => (Some(d), "run_deadline"),
        None => (
            crate::run_deadline::default_for(w, None, timeout),
            "the default run deadline",
        ),
    };
    let bound = deadline.map_or(worst, |d| worst.min(d));
    if bound <= period.saturating_mul(UNANSWERED_PERIODS) {
        return None;
    }
    let requests = format!(
        "{count} requests by {users} user(s), one after another, each waiting request_timeout \
         {timeout:?}"
    );
    let how = match deadline {
        Some(d) if d < worst => format!(
            "an upper bound: {which} {} stops it there; {requests} would take {worst:?}",
            crate::run_deadline::human(d)
        ),
        Some(d) => format!(
            "an upper bound: {requests}; within {which} {}",
            crate::run_deadline::human(d)
        ),
        None => format!("an upper bound: {requests}"),
    };
    Some(format!(
        "a run can last up to {bound:?} ({how}) against a target that accepts requests and \
         answers too few of them to trip the unresponsive cut-off ({} in a row that got nothing \
         back), more than {UNANSWERED_PERIODS} times its period {period:?}: its due runs are \
         skipped meanwhile (canaryd_skips_total{{reason=\"overrun\"}}); a shorter \
         request_timeout on target {} or a shorter run_deadline bounds it",
        crate::run_deadline::UNRESPONSIVE_AFTER,
        w.target
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workload(keys: &str) -> Workload {
        let text = format!(
            "[targets.t]\nurl = \"http://127.0.0.1:1\"\nmodel = \"m\"\n[workloads.w]\n\
             target = \"t\"\nevery = \"1m\"\n{keys}"
        );
        let (file, base) = (
            std::path::Path::new("canaryd.toml"),
            std::path::Path::new("/"),
        );
        crate::config::Config::parse(&text, file, base)
            .unwrap()
            .workloads
            .remove(0)
    }

    /// 10 requests by 2 users, 10 min each: 50 min, under the default deadline (1 h, the
    /// floor for a 1 min period), said with it; 100 requests: 500 min, within the default
    /// deadline (what the settings allow: 50 rounds of 610 s, plus the 30 s grace), said with
    /// it; a run_deadline given under it is the bound; one under 3 periods, nothing.
    #[test]
    fn the_unanswered_warning_says_the_run_deadline_that_bounds_it() {
        let timeout = Duration::from_secs(600);
        let w = workload("request_count = 10\nconcurrency = 2\n");
        let got = unanswered_warning(&w, timeout).unwrap();
        assert!(
            got.starts_with(
                "a run can last up to 3000s (an upper bound: 10 requests by 2 user(s), one after \
                 another, each waiting request_timeout 600s; within the default run deadline 1h)"
            ),
            "{got}"
        );
        let w = workload("request_count = 100\nconcurrency = 2\n");
        let got = unanswered_warning(&w, timeout).unwrap();
        assert!(
            got.starts_with(
                "a run can last up to 30000s (an upper bound: 100 requests by 2 user(s), one \
                 after another, each waiting request_timeout 600s; within the default run \
                 deadline 30530s)"
            ),
            "{got}"
        );
        let w = workload("request_count = 100\nconcurrency = 2\nrun_deadline = \"20m\"\n");
        let got = unanswered_warning(&w, timeout).unwrap();
        assert!(
            got.starts_with("a run can last up to 1200s (an upper bound: run_deadline 20m stops"),
            "{got}"
        );
        assert!(got.contains("more than 3 times its period 60s"), "{got}");
        // Bounded under 3 periods by its deadline: nothing to say.
        let w = workload("request_count = 100\nconcurrency = 2\nrun_deadline = \"3m\"\n");
        assert_eq!(unanswered_warning(&w, timeout), None);
    }
}

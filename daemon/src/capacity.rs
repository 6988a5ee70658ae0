//! The capacity search as `canaryd sweep --find-max-rate` and the daemon's `capacity`
//! workloads both carry it out: [`canary_core::RateSearch`] asks for rates, a [`Prober`] runs
//! each one (a full run through [`crate::execute::execute`]) and says whether it met the SLOs,
//! and [`search`] keeps going until the search is done, a run cannot be made, or a signal
//! comes. The answer is a [`Capacity`]: the bracket and why the search stopped.

use anyhow::Result;
use canary_core::{RateBracket, RateSearch};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

/// A probe's sends may achieve this share of its schedule's rate at least (over the measured
/// phase, first to last send against first to last scheduled send) for the rate to count as
/// offered: under it, the client could not offer the rate, and the probe fails.
pub const MIN_OFFERED_SHARE: f64 = 0.9;

/// ... and fall behind the schedule's span by more than this before that counts: in a probe of
/// half a second, one send late by a scheduling hiccup is not a rate the client could not
/// offer.
pub const SEND_SLACK_S: f64 = 0.05;

/// Why the client did not offer the rate the schedule of `outcome`'s run asked for, or `None`
/// when it did. A probe that passed on its verdict alone could pass a rate the server never
/// saw: TTFT is timed from the send, so time a request spent waiting in canaryd is not in it.
/// Two signs, both exact: a request held for a free slot under the run's in-flight ceiling
/// (`schedule_hold` above 0; the ceiling was reached), or sends spread over a span longer than
/// the schedule's by more than [`SEND_SLACK_S`] and by enough to bring the achieved rate under
/// [`MIN_OFFERED_SHARE`] of the offered one.
pub fn not_offered(outcome: &canary_core::RunOutcome) -> Option<String> {
    let s = &outcome.summary;
    let cap = &outcome.in_flight_cap;
    let held = s.metrics.get("schedule_hold").filter(|h| h.count > 0);
    if let (Some(limit), Some(h)) = (cap.limit, held.filter(|h| h.max > 0.0)) {
        return Some(format!(
            "the client could not offer the rate: requests waited in canaryd for one of its \
             {limit} in-flight slots (set by {}), up to {:.1} ms (schedule_hold p99 {:.1} ms), \
             which TTFT, timed from the send, leaves out",
            cap.source.as_str(),
            h.max,
            h.p99
        ));
    }
    sent_short(s.sends?)
}

/// Why `sends` fell short of their schedule's rate, or `None` when they kept to it.
fn sent_short(sends: canary_core::SendSpans) -> Option<String> {
    let late = sends.sent_s - sends.scheduled_s;
    (late > SEND_SLACK_S && sends.scheduled_s < MIN_OFFERED_SHARE * sends.sent_s).then(|| {
        format!(
            "the client could not offer the rate: it sent over {:.3} s what the schedule spread \
             over {:.3} s, {:.0}% of the offered rate (under {:.0}%)",
            sends.sent_s,
            sends.scheduled_s,
            100.0 * sends.scheduled_s / sends.sent_s,
            100.0 * MIN_OFFERED_SHARE
        )
    })
}

/// A probe's server must be known to take requests in at under this share of the rate sent
/// (from TTFT's growth through the probe, [`canary_core::TtftTrend::served_share`]) for the
/// rate to count as not served: a queue growing by 1 % of the rate adds 10.1 ms of TTFT per
/// second of sending. Measured on a 2-core host at load 7 against `canaryd sim --profile
/// capacity` (107.3 req/s), 2 s constant-rate probes: 80–95 % of the capacity gave slopes of
/// −1.2 to 0.5 ms/s, 99 % gave 0 to 14, 102 % (109.4 req/s) 20 to 131 and 105 % 59 to 76;
/// at load 13, one of 12 probes at 80–94 % rose 21.6 ± 1.4 as the starved simulator served
/// 96.7 of its 101 req/s (a queue, rightly failed). The cut was 0.97 (31 ms/s): 109.4 req/s
/// passed at 20 and 26 ms/s, and a 6 s run at that rate met a 100 ms TTFT on 82 %.
pub const MIN_SERVED_SHARE: f64 = 0.99;

/// ... where "known" is the slope less this many of its standard errors
/// ([`canary_core::TtftTrend::slope_se_ms_per_s`], widened for neighbouring requests'
/// correlation): a stall of the host mid-probe raises TTFT for a while and lets it fall, and
/// the slope of its bump, large but not steady, is not a queue. One-sided, 3 rather than 2
/// because the widening is an approximation. Measured as above: a stall at 84 % gave 27.2
/// ± 12.3 ms/s (lower end −9.6: served), the slowest rise over capacity 32.9 ± 0.7.
pub const SLOPE_SIGMAS: f64 = 3.0;

/// Why the server did not keep up with the rate `outcome`'s run sent at, or `None` when it
/// did (or too few requests completed to tell). Under even arrivals a server that serves C of
/// R requests per second queues the rest, and each request's TTFT is longer than the last's
/// by R/C − 1 seconds per second: a two-second probe at 2 % over capacity ends with 40 ms of
/// queue and can meet a TTFT SLO of 100 ms on every request, passing a rate the server
/// cannot sustain.
pub fn not_served(outcome: &canary_core::RunOutcome) -> Option<String> {
    queue_grew(outcome.summary.ttft_trend?)
}

/// TTFT's growth per second of sending, ms/s, that [`MIN_SERVED_SHARE`] is: 1000·(1/s − 1).
fn max_served_slope_ms_per_s() -> f64 {
    1000.0 * (1.0 / MIN_SERVED_SHARE - 1.0)
}

/// Why TTFT's trend `t` says the server's queue grew, or `None` when it did not: the slope's
/// lower end, [`SLOPE_SIGMAS`] standard errors under it, is a share under
/// [`MIN_SERVED_SHARE`]. A trend without a standard error (its points on a line) is taken
/// at its slope.
fn queue_grew(t: canary_core::TtftTrend) -> Option<String> {
    let se = t.slope_se_ms_per_s.unwrap_or(0.0);
    let low = t.slope_ms_per_s - SLOPE_SIGMAS * se;
    let share = t.served_share();
    (low > max_served_slope_ms_per_s()).then(|| {
        format!(
            "the server did not keep up: TTFT rose {:.1} ± {:.1} ms per second of sending \
             ({:.0} ms over {:.2} s, a least-squares estimate over {} requests, ± one standard \
             error), so it took requests in at about {:.1}% of the rate sent (under {:.0}% \
             even at {} standard errors under the slope) and its queue grew; a longer probe \
             would wait longer",
            t.slope_ms_per_s,
            se,
            t.growth_ms(),
            t.span_s,
            t.requests,
            100.0 * share,
            100.0 * MIN_SERVED_SHARE,
            SLOPE_SIGMAS
        )
    })
}

/// Why a probe at a rate does not bound the capacity from below whatever its SLO verdict:
/// the client did not offer the rate ([`not_offered`]), or the server did not keep up with
/// it ([`not_served`]).
pub fn rate_not_held(outcome: &canary_core::RunOutcome) -> Option<String> {
    not_offered(outcome).or_else(|| not_served(outcome))
}

/// How far a search may go.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SearchBounds {
    /// The first rate tried, requests/s.
    pub start: f64,
    /// The lowest rate tried.
    pub min_rate: f64,
    /// Stop when the bracket is narrower than this share of its passing end.
    pub precision: f64,
    /// Most runs.
    pub max_runs: usize,
}

/// One probe's answer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Probed {
    /// It met the SLOs (and the error budget).
    pub passed: bool,
    /// A signal stopped it.
    pub interrupted: bool,
}

/// Runs one rate of the search.
pub trait Prober {
    /// Runs `rate` requests/s as the search's `index`-th run (from 1). An error: the run
    /// could not be made at all (its plan, its folder); the search stops there.
    fn probe(
        &mut self,
        rate: f64,
        index: usize,
    ) -> impl std::future::Future<Output = Result<Probed>> + Send;

    /// Waits between two runs (a cooldown); by default not at all.
    fn pause(&mut self) -> impl std::future::Future<Output = ()> + Send {
        async {}
    }
}

/// A finished (or stopped) search.
pub struct Searched {
    /// The rates run and their verdicts.
    pub search: RateSearch,
    /// What it found.
    pub capacity: Capacity,
    /// A signal stopped it.
    pub interrupted: bool,
    /// The run that could not be made, when one could not.
    pub failed: Option<anyhow::Error>,
}

/// Searches from `bounds.start` with `prober`, under the SLOs `slo` and `min_good_fraction`
/// (recorded in the answer; the prober judges by them).
pub async fn search<P: Prober + Send>(
    bounds: SearchBounds,
    slo: String,
    min_good_fraction: f64,
    prober: &mut P,
    shutdown: &CancellationToken,
) -> Searched {
    // Within the rates a run may have: past them a probe would only fail to start.
    let rates = canary_replay::REQUEST_RATES;
    let mut search = RateSearch::new(
        bounds.start,
        bounds.min_rate.max(*rates.start()),
        *rates.end(),
        bounds.precision,
        bounds.max_runs,
    );
    let mut interrupted = false;
    let mut failed = None;
    while let Some(rate) = search.next_rate() {
        if !search.runs().is_empty() {
            prober.pause().await;
        }
        if shutdown.is_cancelled() {
            interrupted = true;
            break;
        }
        match prober.probe(rate, search.runs().len() + 1).await {
            // A probe a signal cut short says nothing about the rate: it is not recorded.
            Ok(p) if p.interrupted => {
                interrupted = true;
                break;
            }
            Ok(p) => search.record(rate, p.passed),
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    let b = search.bracket();
    // The search's own rule first: a search that reached its floor, its ceiling (the highest
    // rate a run may have passed: the capacity is at least that) or its precision on its last
    // run was done, and said `max_runs`.
    let stopped_by = if interrupted {
        "interrupted"
    } else if failed.is_some() {
        "point_failed"
    } else {
        search.finished_by().unwrap_or("max_runs")
    };
    Searched {
        capacity: Capacity::of(b, slo, min_good_fraction, stopped_by),
        search,
        interrupted,
        failed,
    }
}

/// The outcome of a capacity search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Capacity {
    /// The SLOs (aiperf's syntax).
    pub slo: String,
    /// The share of requests that had to meet them.
    pub min_good_fraction: f64,
    /// The highest offered rate that passed, requests/s: a lower bound of the capacity at the
    /// SLO. Absent when no rate passed.
    pub max_passing_rate: Option<f64>,
    /// The lowest offered rate above it that failed: the capacity is below it. Absent when no
    /// rate failed (the search ran out of runs while still passing).
    pub min_failing_rate: Option<f64>,
    /// Half the bracket's width relative to its midpoint, when both ends are known.
    pub relative_uncertainty: Option<f64>,
    /// Why the search stopped: `precision`, `max_runs`, `floor`, `ceiling`, `point_failed`
    /// or `interrupted`.
    pub stopped_by: String,
    /// The bracket's ends not established: their probe's pass or fail rests on goodput
    /// judgements made on bounds and could go the other way within them (a fail whose good
    /// count at most would pass, a pass whose good count at least would fail). The decision
    /// stands (one answer per probe); absent when both ends hold at both ends of the bounds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_established: Vec<EndOnBounds>,
}

/// A bracket end whose probe's decision rests on bounds: the one type, with its wording, that
/// `sweep.json`, `verdict.json`, the history and the report share.
pub use canary_core::{BracketEnd, EndOnBounds};

impl Capacity {
    /// The answer of bracket `b`.
    pub fn of(b: RateBracket, slo: String, min_good_fraction: f64, stopped_by: &str) -> Capacity {
        Capacity {
            slo,
            min_good_fraction,
            max_passing_rate: b.passed,
            min_failing_rate: b.failed,
            relative_uncertainty: b.passed.zip(b.failed).map(|(p, f)| (f - p) / (f + p)),
            stopped_by: stopped_by.to_string(),
            not_established: Vec::new(),
        }
    }

    /// Notes which bracket ends rest on bounds, from the probes' `(rate, verdict)`: the
    /// probe at an end whose verdict says [`crate::judge::verdict::ON_BOUNDS`].
    pub fn note_bounds<'a>(&mut self, probes: impl IntoIterator<Item = (f64, &'a str)>) {
        let probes: Vec<(f64, &str)> = probes.into_iter().collect();
        let mut ends = Vec::new();
        for end in BracketEnd::ALL {
            let Some(rate) = self.rate_of(end) else {
                continue;
            };
            let why = probes
                .iter()
                .filter(|(r, _)| *r == rate)
                .find_map(|(_, v)| on_bounds(v));
            if let Some(why) = why {
                ends.push(EndOnBounds { end, rate, why });
            }
        }
        self.not_established = ends;
    }

    /// The rate at end `end` of the bracket, when there is one.
    pub fn rate_of(&self, end: BracketEnd) -> Option<f64> {
        match end {
            BracketEnd::Passed => self.max_passing_rate,
            BracketEnd::Failed => self.min_failing_rate,
        }
    }

    /// `canary.capacity.not_established` by end: 1 for an end whose probe's decision rests
    /// on bounds ([`Capacity::not_established`]), 0 for one established, `None` for an end
    /// the bracket does not have (its series ends), as `/metrics'`
    /// `canaryd_last_run_capacity_not_established`.
    pub fn not_established_gauge(&self) -> [(&'static str, Option<f64>); 2] {
        BracketEnd::ALL.map(|end| {
            let on_bounds = EndOnBounds::find(&self.not_established, end).is_some();
            let rate = self.rate_of(end);
            (end.as_str(), rate.map(|_| f64::from(u8::from(on_bounds))))
        })
    }

    /// `; not established: the fail at 1600 req/s rests on bounds: up to 98.8 % may be good
    /// (…)` for the ends in [`Capacity::not_established`] ([`EndOnBounds::all_said`]), empty
    /// when there is none.
    pub fn bounds_said(&self) -> String {
        EndOnBounds::all_said(&self.not_established).map_or(String::new(), |s| format!("; {s}"))
    }
}

/// The words from [`crate::judge::verdict::ON_BOUNDS`] to the end of its reason in
/// `verdict`, when it has them.
fn on_bounds(verdict: &str) -> Option<String> {
    let at = verdict.find(crate::judge::verdict::ON_BOUNDS)?;
    let rest = &verdict[at..];
    // The reason ends at the next `; ` outside its parentheses.
    let mut depth = 0i32;
    for (i, c) in rest.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ';' if depth <= 0 => return Some(rest[..i].to_string()),
            _ => {}
        }
    }
    Some(rest.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Passes at or under `capacity` requests/s; the `cut`-th probe is stopped by a signal,
    /// the `broken`-th cannot be made.
    struct Scripted {
        capacity: f64,
        cut: usize,
        broken: usize,
        probed: Vec<f64>,
    }

    impl Prober for Scripted {
        async fn probe(&mut self, rate: f64, index: usize) -> Result<Probed> {
            self.probed.push(rate);
            anyhow::ensure!(index != self.broken, "probe {index}: no folder");
            Ok(Probed {
                passed: rate <= self.capacity && index != self.cut,
                interrupted: index == self.cut,
            })
        }
    }

    async fn run(cut: usize, broken: usize) -> (Searched, Vec<f64>) {
        let bounds = SearchBounds {
            start: 10.0,
            min_rate: 1.0,
            precision: 0.05,
            max_runs: 12,
        };
        let mut p = Scripted {
            capacity: 25.0,
            cut,
            broken,
            probed: Vec::new(),
        };
        let found = search(
            bounds,
            "time_to_first_token:400".into(),
            0.95,
            &mut p,
            &CancellationToken::new(),
        )
        .await;
        (found, p.probed)
    }

    #[tokio::test]
    async fn a_probe_cut_short_or_not_made_bounds_nothing() {
        let (whole, rates) = run(0, 0).await;
        let c = &whole.capacity;
        assert!(c.max_passing_rate.unwrap() <= 25.0, "{c:?}");
        assert!(c.min_failing_rate.unwrap() > 25.0, "{c:?}");
        assert!(rates.len() >= 3, "{rates:?}");
        // The second probe (above 10 req/s, under the capacity) is stopped by a signal: its
        // rate is neither a pass nor a failure.
        let (cut, rates) = run(2, 0).await;
        assert_eq!(cut.capacity.stopped_by, "interrupted");
        assert_eq!(cut.capacity.max_passing_rate, Some(rates[0]));
        assert_eq!(cut.capacity.min_failing_rate, None, "{:?}", cut.capacity);
        assert_eq!(cut.search.runs().len(), 1);
        // The second cannot be made: the search ends, bounded by the first alone.
        let (broken, _) = run(0, 2).await;
        assert_eq!(broken.capacity.stopped_by, "point_failed");
        assert!(broken.failed.is_some());
        assert_eq!(broken.capacity.min_failing_rate, None);
    }

    // A search that reached its precision, or its floor, on its last run said it stopped by
    // max_runs: given exactly the runs it needs, it is stopped by its own rule.
    #[tokio::test]
    async fn a_search_done_on_its_last_run_is_stopped_by_its_rule_not_the_budget() {
        for (capacity, rule) in [(25.0, "precision"), (0.0, "floor")] {
            let go = |max_runs| async move {
                let bounds = SearchBounds {
                    start: 10.0,
                    min_rate: 1.0,
                    precision: 0.05,
                    max_runs,
                };
                let mut p = Scripted {
                    capacity,
                    cut: 0,
                    broken: 0,
                    probed: Vec::new(),
                };
                let shutdown = CancellationToken::new();
                search(bounds, "e2e:1".into(), 0.95, &mut p, &shutdown).await
            };
            let free = go(40).await;
            assert_eq!(free.capacity.stopped_by, rule);
            let needed = free.search.runs().len();
            assert_eq!(go(needed).await.capacity.stopped_by, rule, "{needed} runs");
            assert_eq!(go(needed - 1).await.capacity.stopped_by, "max_runs");
        }
    }

    // Sends spread over a longer span than their schedule's are a rate the client did not
    // offer, once they are late by more than a hiccup; the tail of responses is not counted.
    #[test]
    fn sends_under_ninety_percent_of_the_schedules_rate_are_not_an_offered_rate() {
        let spans = |scheduled_s, sent_s| canary_core::SendSpans {
            scheduled_s,
            sent_s,
        };
        // 200 requests scheduled over 0.5 s, sent over 1.9 s: 26 % of the rate.
        let why = sent_short(spans(0.5, 1.9)).unwrap();
        assert!(why.contains("26% of the offered rate"), "{why}");
        // 5 % late over 10 s: offered.
        assert_eq!(sent_short(spans(10.0, 10.5)), None);
        // 20 % late, but by 40 ms in a 0.2 s probe: one late send, not a rate.
        assert_eq!(sent_short(spans(0.2, 0.24)), None);
        // 20 % late by 200 ms: not offered.
        assert!(sent_short(spans(1.0, 1.2)).is_some());
    }

    // TTFT rising through a probe is the server's queue growing: once its slope, 3 standard
    // errors down, is over 1 % of the rate sent (10.1 ms/s), the rate was not served,
    // whatever the SLOs said. The figures are probes' summary.json ttft_trend, 2 s at a
    // constant rate against `canaryd sim --profile capacity` (107.3 req/s) on a 2-core host.
    #[test]
    fn ttft_rising_through_a_probe_is_a_rate_the_server_did_not_serve() {
        let trend = |requests, span_s, slope_ms_per_s, se| canary_core::TtftTrend {
            requests,
            span_s,
            slope_ms_per_s,
            slope_se_ms_per_s: Some(se),
        };
        // 112.5 req/s at load 13: 48.8 ± 0.1 ms/s, 97 ms in all; every request met 100 ms.
        let why = queue_grew(trend(225, 1.991, 48.814, 0.121)).unwrap();
        assert!(why.contains("about 95.3% of the rate sent"), "{why}");
        assert!(why.contains("97 ms over 1.99 s"), "{why}");
        assert!(why.contains("48.8 ± 0.1 ms per second"), "{why}");
        // 106.25 req/s (99 % of the closed form) on the same loaded host, which served 102:
        // 18.3 ± 0.9, a steady rise the old 0.97 cut (31 ms/s) passed.
        let why = queue_grew(trend(213, 1.995, 18.336, 0.919)).unwrap();
        assert!(why.contains("about 98.2% of the rate sent"), "{why}");
        // 101 req/s (94 %): 4.2 ± 0.7, a rise, but under 1 % of the rate: served.
        assert_eq!(queue_grew(trend(204, 1.99, 4.2, 0.7)), None);
        // 90 req/s (84 %) with the host stalled for its last half second: 27.2 ± 12.3 (ρ
        // 0.91, from its records.jsonl), a bump, not a steady rise: served.
        assert_eq!(queue_grew(trend(180, 1.989, 27.192, 12.268)), None);
        // Falling TTFT (a stall draining, 103 req/s at load 13): no queue.
        assert_eq!(queue_grew(trend(207, 1.998, -8.209, 9.928)), None);
        // Just over the cut at 3 standard errors (10.1 + 3 × 1.0): not served; just under: served.
        let cut = max_served_slope_ms_per_s();
        assert!((cut - 10.101).abs() < 1e-3, "{cut}");
        assert!(queue_grew(trend(200, 2.0, cut + 3.01, 1.0)).is_some());
        assert_eq!(queue_grew(trend(200, 2.0, cut + 2.99, 1.0)), None);
        // A trend whose points lie on its line has no error: taken at its slope.
        let line = canary_core::TtftTrend {
            slope_se_ms_per_s: None,
            ..trend(200, 2.0, 12.0, 0.0)
        };
        assert!(queue_grew(line).is_some());
    }

    // A rate past the range a run may have fails to start: the search asked for 1.6e6 req/s
    // after a pass at 8e5 (and 1e-9 under a failure) and ended "point_failed".
    #[tokio::test]
    async fn the_search_keeps_to_the_rates_a_run_may_have() {
        let (lowest, highest) = canary_replay::REQUEST_RATES.into_inner();
        for (start, capacity, stopped_by, bound) in [
            (1e5, f64::INFINITY, "ceiling", highest),
            (1e-5, 0.0, "floor", lowest),
        ] {
            let bounds = SearchBounds {
                start,
                min_rate: 1e-9,
                precision: 0.05,
                max_runs: 40,
            };
            let mut p = Scripted {
                capacity,
                cut: 0,
                broken: 0,
                probed: Vec::new(),
            };
            let shutdown = CancellationToken::new();
            let found = search(bounds, "e2e:1".into(), 0.95, &mut p, &shutdown).await;
            let probed = &p.probed;
            assert!(
                probed.iter().all(|r| (lowest..=highest).contains(r)),
                "{probed:?}"
            );
            assert_eq!(probed.last(), Some(&bound), "{probed:?}");
            assert_eq!(found.capacity.stopped_by, stopped_by, "{probed:?}");
        }
    }

    use canary_testkit::json::compact;

    // sweep.json's `capacity` as `canaryd sweep --find-max-rate` wrote it before its
    // `not_established` was canary_core's type (core/tests/data/SOURCES.md), with an end on
    // bounds and without: it reads, and is written back byte for byte (the verdict.json and
    // history rows of a capacity workload are this type too).
    #[test]
    fn a_capacity_written_before_reads_and_writes_back_the_same_bytes() {
        #[derive(Deserialize)]
        struct Doc<'a> {
            #[serde(borrow)]
            capacity: &'a serde_json::value::RawValue,
        }
        let data = concat!(env!("CARGO_MANIFEST_DIR"), "/../core/tests/data/");
        for (file, ends) in [
            ("sweep_capacity_on_bounds.json", 1),
            ("sweep_capacity_established.json", 0),
        ] {
            let text = std::fs::read_to_string(format!("{data}{file}")).unwrap();
            let raw = serde_json::from_str::<Doc>(&text).unwrap().capacity.get();
            let c: Capacity = serde_json::from_str(raw).unwrap();
            assert_eq!(c.not_established.len(), ends, "{file}: {c:?}");
            assert_eq!(serde_json::to_string(&c).unwrap(), compact(raw), "{file}");
        }
    }
}

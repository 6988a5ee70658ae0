//! The summary of `--runs N`: each headline figure's mean over the runs with its confidence
//! interval, typed here and written as `summary.json` (`$defs/repeats_summary` of
//! `core/summary.schema.json`), `repeats.csv` and the table.

use crate::execute::Judged;
use crate::judge::verdict::GoodRange;
use canary_core::{MeanInterval, RunSummary};
use serde::Serialize;

/// The confidence level of every interval.
pub const CONFIDENCE: f64 = 0.95;

/// Runs under which a table says its intervals are wide ([`few_runs_line`]).
pub const FEW_RUNS: u64 = 5;

/// The line under a table whose intervals are over `n` runs, 2 to [`FEW_RUNS`] − 1 (else
/// `None`): Student's t on n − 1 degrees of freedom makes `whose` half-width `t·s/√n`, 8.98
/// times the runs' standard deviation with 2 runs, so its ± can exceed the figure itself. One
/// sentence for `--runs N`'s table and the sweep's.
pub fn few_runs_line(n: u64, whose: &str) -> Option<String> {
    if !(2..FEW_RUNS).contains(&n) {
        return None;
    }
    let q = 1.0 - (1.0 - CONFIDENCE) / 2.0;
    let t = |n: u64| canary_core::t_quantile(q, (n - 1) as f64);
    let per_sd = |n: u64| t(n) / (n as f64).sqrt();
    Some(format!(
        "few runs: with {n} runs {whose} {:.0}% half-width is Student's t on {} degree{} of \
         freedom ({:.2}) times s/√{n}, {:.2} times the runs' standard deviation s: a wide \
         interval, its ± larger than the figure once s is over {:.0}% of it (5 runs: {:.2} s, \
         10 runs: {:.2} s)",
        CONFIDENCE * 100.0,
        n - 1,
        if n == 2 { "" } else { "s" },
        t(n),
        per_sd(n),
        100.0 / per_sd(n),
        per_sd(5),
        per_sd(10),
    ))
}

/// The headline figures, in table order: (metric, statistic, unit, table label).
const HEADLINE: [(&str, &str, &str, &str); 11] = [
    ("time_to_first_token", "p50", "ms", "TTFT p50"),
    ("time_to_first_token", "p99", "ms", "TTFT p99"),
    ("inter_token_latency", "p50", "ms", "ITL p50"),
    ("inter_token_latency", "p99", "ms", "ITL p99"),
    ("request_latency", "p50", "ms", "e2e p50"),
    ("request_latency", "p99", "ms", "e2e p99"),
    ("request_throughput", "value", "requests/s", "throughput"),
    (
        "output_token_throughput",
        "value",
        "tokens/s",
        "output tokens/s",
    ),
    ("goodput", "value", "requests/s", "goodput"),
    (
        "good_request_fraction",
        "value",
        "fraction",
        "good fraction",
    ),
    ("schedule_lag", "p99", "ms", "schedule lag p99"),
];

/// Whether `metric` of one run is not exact, by the run's rule for its client times; goodput
/// and the good fraction when some of its judgements rest on a bound (a TTFT miss on a time
/// read late may be a meet: `summary.json`'s `uncertain_misses`, `uncertain_meets`).
fn is_bound(s: &RunSummary, metric: &str) -> bool {
    match metric {
        "goodput" | "good_request_fraction" => GoodRange::of(s).is_some_and(|r| r.uncertain()),
        _ => s.receive_timestamps.bounds().is_bound(metric),
    }
}

/// Goodput's (or the good fraction's) judgements that rest on a bound over the runs its mean
/// is over, with each run's good count and the range they leave it in (`summary.json`'s
/// `good_requests`, `good_requests_at_least`, `good_requests_at_most`), in the order of
/// `values`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GoodBounds {
    /// Judgements on a bound, summed over the runs.
    pub judgements_on_bound: u64,
    /// Each run's requests judged good: exact as a count of judgements.
    pub good_requests: Vec<u64>,
    /// Each run's truly good requests, at least.
    pub good_requests_at_least: Vec<u64>,
    /// And at most.
    pub good_requests_at_most: Vec<u64>,
    /// The mean over the runs of their figure had the at-least count been good: goodput,
    /// requests/s (the count over the run's duration), or the good fraction (over the
    /// requests judged).
    pub mean_at_least: f64,
    /// And had the at-most count been.
    pub mean_at_most: f64,
}

impl GoodBounds {
    /// Of the runs `each` (their summaries, the runs `metric`'s mean is over: `goodput`, whose
    /// counts are over each run's duration, or `good_request_fraction`, over its requests
    /// judged); `None` when no judgement rests on a bound or a run states no range.
    fn of(each: &[&RunSummary], metric: &str) -> Option<GoodBounds> {
        let ranges: Vec<(GoodRange, f64)> = each
            .iter()
            .map(|s| {
                let r = GoodRange::of(s)?;
                let over = match metric {
                    "good_request_fraction" => r.judged as f64,
                    _ => s.duration_s,
                };
                Some((r, over)).filter(|_| over > 0.0)
            })
            .collect::<Option<_>>()?;
        if !ranges.iter().any(|(r, _)| r.uncertain()) || ranges.is_empty() {
            return None;
        }
        let mean = |get: &dyn Fn(&GoodRange) -> u64| {
            ranges.iter().map(|(r, d)| get(r) as f64 / d).sum::<f64>() / ranges.len() as f64
        };
        Some(GoodBounds {
            judgements_on_bound: ranges.iter().map(|(r, _)| r.on_bound).sum(),
            good_requests: ranges.iter().map(|(r, _)| r.good).collect(),
            good_requests_at_least: ranges.iter().map(|(r, _)| r.at_least).collect(),
            good_requests_at_most: ranges.iter().map(|(r, _)| r.at_most).collect(),
            mean_at_least: mean(&|r| r.at_least),
            mean_at_most: mean(&|r| r.at_most),
        })
    }

    /// The line under the good fraction: `193 judgements rest on a bound, as goodput's: the
    /// mean had the truth been at either end: 0.330 to 0.921` (each run's range is under
    /// goodput's line).
    pub fn said_of_fraction(&self) -> String {
        format!(
            "{} judgement{} {ON_BOUNDS_SAID}, as goodput's: the mean had the truth been at \
             either end: {} to {}",
            self.judgements_on_bound,
            if self.judgements_on_bound == 1 {
                ""
            } else {
                "s"
            },
            number(self.mean_at_least),
            number(self.mean_at_most)
        )
    }

    /// `193 goodput judgements rest on a bound (…): each run truly good 41 to 115 (62 judged
    /// good), 62 to 134 (75 judged good); the mean had the truth been at either end: 12.1 to
    /// 31.0 requests/s`.
    pub fn said(&self) -> String {
        let runs: Vec<String> = self
            .good_requests_at_least
            .iter()
            .zip(&self.good_requests_at_most)
            .zip(&self.good_requests)
            .map(|((l, h), g)| format!("{l} to {h} ({g} judged good)"))
            .collect();
        format!(
            "{} goodput judgement{} {ON_BOUNDS_SAID} (a time read late: a TTFT miss may be a \
             meet, an ITL meet a miss): each run truly good {}; the mean had the truth been at \
             either end: {} to {} requests/s",
            self.judgements_on_bound,
            if self.judgements_on_bound == 1 {
                ""
            } else {
                "s"
            },
            runs.join(", "),
            number(self.mean_at_least),
            number(self.mean_at_most)
        )
    }
}

/// `rest on a bound`, as the run table and page say it.
const ON_BOUNDS_SAID: &str = "rest on a bound";

/// The figure `metric`/`statistic` of one run, if it has one.
fn figure(s: &RunSummary, metric: &str, statistic: &str) -> Option<f64> {
    match metric {
        "request_throughput" => s.request_throughput,
        "output_token_throughput" => s.output_token_throughput,
        "goodput" => s.goodput.as_ref().and_then(|g| g.goodput),
        "good_request_fraction" => s.goodput.as_ref().and_then(|g| g.good_request_fraction),
        _ => {
            let st = s.metrics.get(metric).filter(|st| st.count > 0)?;
            match statistic {
                "p50" => Some(st.p50),
                "p99" => Some(st.p99),
                _ => None,
            }
        }
    }
}

/// One complete run's `metric`/`statistic`: its figure, or why it has none (`Err`: a run too
/// short for a rate, no request with the value); `None` when the run was not asked for it
/// (goodput without SLOs).
fn figure_or_why(s: &RunSummary, metric: &str, statistic: &str) -> Option<Result<f64, String>> {
    if let Some(v) = figure(s, metric, statistic) {
        return Some(Ok(v));
    }
    let no_rate = || {
        s.rate_unavailable
            .clone()
            .unwrap_or_else(|| "no rate".into())
    };
    Some(Err(match metric {
        "request_throughput" | "output_token_throughput" => no_rate(),
        "goodput" => {
            s.goodput.as_ref()?;
            no_rate()
        }
        "good_request_fraction" => {
            s.goodput.as_ref()?;
            "no request judged against the SLOs".to_string()
        }
        // In compare's words for the same gap (report/src/compare.rs).
        latency => {
            let name = match latency {
                "time_to_first_token" => "TTFT",
                "inter_token_latency" => "ITL",
                "request_latency" => "e2e",
                "schedule_lag" => "schedule lag",
                other => other,
            };
            format!("no {name} among its completed requests")
        }
    }))
}

/// `summary.json` of `--runs N`.
#[derive(Debug, Serialize)]
pub struct RepeatsFile<'a> {
    /// [`canary_core::SUMMARY_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The experiment.
    pub repeats: &'a RepeatsSummary,
}

impl<'a> RepeatsFile<'a> {
    /// The file of `repeats`.
    pub fn new(repeats: &'a RepeatsSummary) -> RepeatsFile<'a> {
        RepeatsFile {
            schema_version: canary_core::SUMMARY_SCHEMA_VERSION,
            repeats,
        }
    }
}

/// The experiment's figures.
#[derive(Debug, Clone, Serialize)]
pub struct RepeatsSummary {
    /// `--runs`.
    pub runs_asked: u32,
    /// Runs carried out (fewer when a signal stopped the experiment).
    pub runs: u64,
    /// The intervals' confidence level.
    pub confidence: f64,
    /// How the intervals are computed (they are estimates).
    pub method: &'static str,
    /// The command's exit status: the worst run's (130 when a signal stopped it).
    pub exit_status: i32,
    /// True when a signal stopped the experiment.
    pub interrupted: bool,
    /// Each run: its folder, run id, exit status and verdict.
    pub per_run: Vec<RunEntry>,
    /// The headline figures that at least one run gave.
    pub metrics: Vec<Figure>,
    /// The headline figures that no run in the estimates gave, each with every run's reason
    /// (all too short for a rate, say); absent when there are none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unavailable: Vec<NoFigure>,
}

/// A run in the estimates that gave no figure for one of them, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Without {
    /// Its folder (`run-2`).
    pub dir: String,
    /// Why it has no figure (`1 measured request: a rate needs at least 2`).
    pub why: String,
}

/// A headline figure no run in the estimates gave.
#[derive(Debug, Clone, Serialize)]
pub struct NoFigure {
    /// The metric (`summary.json`'s name).
    pub metric: &'static str,
    /// `p50`, `p99`, or `value` for a rate.
    pub statistic: &'static str,
    /// Each run and why it has no figure.
    pub without: Vec<Without>,
    #[serde(skip)]
    label: &'static str,
}

/// One run of the experiment.
#[derive(Debug, Clone, Serialize)]
pub struct RunEntry {
    /// Its folder under the output directory (`run-1`).
    pub dir: String,
    /// Its run id (`x-request-id` prefix, OTLP `canary.run.id`).
    pub run_id: String,
    /// Its exit status as a single run.
    pub exit_status: i32,
    /// Its verdict.
    pub verdict: Option<String>,
    /// True when a signal cut it short (left out of the estimates).
    pub interrupted: bool,
    /// Why it is left out of the estimates, when it is ([`left_out`]); absent when it is in
    /// them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub left_out: Option<String>,
}

/// Why `run` is left out of the experiment's estimates, or `None` when it is in them: a
/// signal cut it short (its figures are partial), its verdict is an error (the target was
/// unusable, canaryd itself was the bottleneck), or it completed no request. A run against a
/// dead server counted as 0 requests/s beside the others' throughput while its latencies, which
/// it has none of, were over the rest: `68.5 ± 147.4 requests/s` of [102.7, 102.8, 0.0].
pub fn left_out(run: &Judged) -> Option<String> {
    let verdict = run.verdict.as_ref();
    if run.outcome.interrupted {
        Some("interrupted: a signal cut it short".to_string())
    } else if let Some(v) = verdict.filter(|v| v.kind == crate::judge::verdict::VerdictKind::Error)
    {
        Some(v.to_string())
    } else if run.outcome.summary.completed == 0 {
        Some("it completed no request".to_string())
    } else {
        None
    }
}

/// One headline figure over the runs.
#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    /// The metric (`summary.json`'s name).
    pub metric: &'static str,
    /// `p50`, `p99`, or `value` for a rate.
    pub statistic: &'static str,
    /// Its unit.
    pub unit: &'static str,
    /// Each complete run's figure, in run order.
    pub values: Vec<f64>,
    /// The mean and its interval, its ends kept within what the figure can be
    /// ([`clip`]).
    #[serde(flatten)]
    pub interval: MeanInterval,
    /// True when an end of the interval fell outside what the figure can be (below 0 for a
    /// latency or a rate, above 1 for a fraction) and was moved to that limit: `low`/`high`
    /// are then not `mean ∓ half_width`, and the interval is lopsided.
    pub clipped: bool,
    /// True when two or more runs all gave the same figure: the half-width is 0, and the
    /// interval cannot be estimated from the runs' spread
    /// ([`canary_core::MeanInterval::no_spread`]). Absent when false.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub no_spread: bool,
    /// True when some run's figure is not exact, by each run's own rule
    /// ([`canary_core::RxBounds::is_bound`] of its `receive_timestamps`): a mean of upper
    /// bounds (TTFT, e2e) is an upper bound, and ITL's is exact in neither direction. For
    /// goodput, when some run's goodput judgements rest on a bound (see `good_bounds`).
    pub bound: bool,
    /// Goodput only, when some of its runs' judgements rest on a bound: how many, and each
    /// run's good count with the range the truth lies in. Absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub good_bounds: Option<GoodBounds>,
    /// The runs in the estimates that gave no figure for it (too short for a rate), each with
    /// why: the mean is over the other `n`. Absent when every run gave one.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub without: Vec<Without>,
    #[serde(skip)]
    label: &'static str,
}

/// Each run's figure (`dir`, its figure or why it has none), split into the values the mean
/// is over and the runs left out of it.
fn split(each: Vec<(&str, Result<f64, String>)>) -> (Vec<f64>, Vec<Without>) {
    let mut values = Vec::new();
    let mut without = Vec::new();
    for (dir, figure) in each {
        match figure {
            Ok(v) => values.push(v),
            Err(why) => without.push(Without {
                dir: dir.to_string(),
                why,
            }),
        }
    }
    (values, without)
}

/// Each run without a figure as (folder, why), for [`canary_core::runs_without`]'s wording.
fn pairs(without: &[Without]) -> Vec<(&str, &str)> {
    without
        .iter()
        .map(|w| (w.dir.as_str(), w.why.as_str()))
        .collect()
}

/// `run-3 (1 measured request: a rate needs at least 2); run-4 (…)`.
#[cfg(test)]
fn listed(without: &[Without]) -> String {
    canary_core::runs_without::listed(pairs(without))
}

/// `interval` with its ends moved inside what a figure in `unit` can be: never below 0 (every
/// headline figure is a latency, a rate or a fraction), never above 1 for a fraction. True
/// when an end moved. Student's t is symmetric, so few runs with one slow tail gave
/// `TTFT p99 3.20 ms ± 4.67 ms`, a low end of −1.48 ms.
fn clip(mut interval: MeanInterval, unit: &str) -> (MeanInterval, bool) {
    let ceiling = if unit == "fraction" {
        1.0
    } else {
        f64::INFINITY
    };
    let mut clipped = false;
    if let Some(low) = interval.low.filter(|&l| l < 0.0) {
        interval.low = Some(low.max(0.0));
        clipped = true;
    }
    if let Some(high) = interval.high.filter(|&h| h > ceiling) {
        interval.high = Some(high.min(ceiling));
        clipped = true;
    }
    (interval, clipped)
}

/// Under the table when a figure is marked `(bound)`.
const BOUND_NOTE: &str = "(bound): not exact: some runs' times were a later segment's stamp or \
                          canaryd's read (their summary.json's receive_timestamps), so the mean \
                          of TTFT and e2e is an upper bound, and of ITL exact in neither \
                          direction (summary.json's metrics[].bound)";

/// The method, as `summary.json` states it. Every run repeats one plan with one seed, so the
/// same lengths on the same arrival schedule: the interval is conditional on that schedule
/// (another `--random-seed` gave 41.4 req/s where seed 0's three runs gave 44.5 ± 0.04).
const METHOD: &str = "estimate: mean of the runs' figures, two-sided 95% confidence interval \
                      from Student's t on n-1 degrees of freedom (runs taken as independent); \
                      every run sends the same requests on the same arrival schedule (one \
                      --random-seed, or the trace's times), so the interval covers the \
                      server's run-to-run variation, not the load's randomness";

impl RepeatsSummary {
    /// The summary of `runs` ((folder, run, exit status), in order) of `asked`.
    pub fn of(
        asked: u32,
        runs: &[(String, Judged, i32)],
        exit_status: i32,
        interrupted: bool,
    ) -> RepeatsSummary {
        // A run cut short measured part of the plan, and one that errored measured nothing of
        // the target: their figures would bias the mean.
        let complete: Vec<(&str, &RunSummary)> = runs
            .iter()
            .filter(|r| left_out(&r.1).is_none())
            .map(|r| (r.0.as_str(), &r.1.outcome.summary))
            .collect();
        let mut metrics = Vec::new();
        let mut unavailable = Vec::new();
        for &(metric, statistic, unit, label) in &HEADLINE {
            // A run without the figure (one too short for a rate) is named with why, never
            // dropped from the mean unsaid.
            let (values, without) = split(
                complete
                    .iter()
                    .filter_map(|&(dir, s)| Some((dir, figure_or_why(s, metric, statistic)?)))
                    .collect(),
            );
            // Bound when any run whose figure is in the mean had it bound.
            let bound = complete
                .iter()
                .any(|(_, s)| figure(s, metric, statistic).is_some() && is_bound(s, metric));
            let Some(figure) = Figure::of((metric, statistic, unit, label), values, bound) else {
                if !without.is_empty() {
                    unavailable.push(NoFigure {
                        metric,
                        statistic,
                        without,
                        label,
                    });
                }
                continue;
            };
            let good_bounds = match metric {
                "goodput" | "good_request_fraction" => {
                    let over: Vec<&RunSummary> = complete
                        .iter()
                        .filter(|(_, s)| self::figure(s, metric, statistic).is_some())
                        .map(|(_, s)| *s)
                        .collect();
                    GoodBounds::of(&over, metric)
                }
                _ => None,
            };
            metrics.push(Figure {
                without,
                good_bounds,
                ..figure
            });
        }
        RepeatsSummary {
            runs_asked: asked,
            runs: runs.len() as u64,
            confidence: CONFIDENCE,
            method: METHOD,
            exit_status,
            interrupted,
            per_run: runs
                .iter()
                .map(|(dir, run, status)| RunEntry {
                    dir: dir.clone(),
                    run_id: run.info.run_id.clone(),
                    exit_status: *status,
                    verdict: run.verdict.as_ref().map(|v| v.to_string()),
                    interrupted: run.outcome.interrupted,
                    left_out: left_out(run),
                })
                .collect(),
            metrics,
            unavailable,
        }
    }

    /// Complete runs the intervals are over.
    pub fn metrics_runs(&self) -> u64 {
        self.metrics.iter().map(|f| f.interval.n).max().unwrap_or(0)
    }

    /// The interval's half-width of `metric`/`statistic`, when the runs gave one.
    pub fn half_width(&self, metric: &str, statistic: &str) -> Option<f64> {
        self.metrics
            .iter()
            .find(|f| f.metric == metric && f.statistic == statistic)?
            .interval
            .half_width
    }

    /// Whether every run gave `metric`/`statistic` alike: its interval is zero-wide and says
    /// nothing of its uncertainty ([`canary_core::MeanInterval::no_spread`]).
    pub fn no_spread(&self, metric: &str, statistic: &str) -> bool {
        self.metrics
            .iter()
            .any(|f| f.metric == metric && f.statistic == statistic && f.no_spread)
    }

    /// The ends of `metric`/`statistic`'s interval when it was clipped (a symmetric ± would
    /// reach below 0, or past 1 for a fraction).
    pub fn clipped_ends(&self, metric: &str, statistic: &str) -> Option<(f64, f64)> {
        let f = self
            .metrics
            .iter()
            .find(|f| f.metric == metric && f.statistic == statistic)?;
        let i = &f.interval;
        f.clipped.then_some((i.low?, i.high?))
    }

    /// The table.
    pub fn print(&self) -> std::io::Result<()> {
        outln!()?;
        let left = self.per_run.iter().filter(|r| r.left_out.is_some()).count();
        let left = match left {
            0 => String::new(),
            n => format!(" ({n} left out, below)"),
        };
        if self.metrics.is_empty() {
            // Said, not left to an empty list under a heading that promised estimates.
            let why = match self.per_run.iter().all(|r| r.left_out.is_some()) {
                true if self.runs > 0 => "every run is left out of them",
                _ => "no run gave a headline figure",
            };
            outln!(
                "{} of {} runs{left}: no estimates: {why}",
                self.runs,
                self.runs_asked
            )?;
        } else {
            outln!(
                "{} of {} runs{left}: estimates, mean over runs ± half-width of its 95% \
                 confidence interval (Student's t, n-1 degrees of freedom; the runs share one \
                 arrival schedule and seed, so it covers the server's run-to-run variation, \
                 not the load's randomness)",
                self.runs,
                self.runs_asked
            )?;
        }
        for f in &self.metrics {
            outln!("  {}", f.line())?;
            if let Some(b) = &f.good_bounds {
                let said = match f.metric {
                    "good_request_fraction" => b.said_of_fraction(),
                    _ => b.said(),
                };
                outln!("  {:<18} {said}", "")?;
            }
            if !f.without.is_empty() {
                outln!(
                    "  {:<18} {}",
                    "",
                    canary_core::runs_without::over_some(f.interval.n, &pairs(&f.without))
                )?;
            }
        }
        for u in &self.unavailable {
            outln!(
                "  {:<18} {}",
                u.label,
                canary_core::runs_without::none_gave(&pairs(&u.without))
            )?;
        }
        if self
            .metrics
            .iter()
            .any(|f| f.bound && f.good_bounds.is_none())
        {
            outln!("  {BOUND_NOTE}")?;
        }
        // The fewest runs any interval is over: its width is the table's widest warning.
        let fewest = self
            .metrics
            .iter()
            .map(|f| f.interval.n)
            .filter(|&n| n >= 2)
            .min();
        if let Some(line) = fewest.and_then(|n| few_runs_line(n, "a figure's")) {
            outln!("  {line}")?;
        }
        for r in &self.per_run {
            if let Some(why) = &r.left_out {
                outln!("  left out of the estimates: {} ({why})", r.dir)?;
            }
        }
        outln!(
            "exit status {}: the worst run's{}",
            self.exit_status,
            if self.interrupted {
                " (stopped by a signal)"
            } else {
                ""
            }
        )?;
        Ok(())
    }

    /// `repeats.csv`: one row per figure.
    pub fn csv(&self) -> String {
        let mut out = String::from(
            "metric,statistic,unit,n,mean,std,confidence,half_width,low,high,clipped,bound\n",
        );
        let cell = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.6}"));
        for f in &self.metrics {
            let i = &f.interval;
            out.push_str(&format!(
                "{},{},{},{},{:.6},{},{},{},{},{},{},{}\n",
                f.metric,
                f.statistic,
                f.unit,
                i.n,
                i.mean,
                cell(i.std),
                i.confidence,
                cell(i.half_width),
                cell(i.low),
                cell(i.high),
                f.clipped,
                f.bound
            ));
        }
        out
    }
}

impl Figure {
    /// The figure `(metric, statistic, unit, label)` of the runs' `values`, its interval
    /// clipped ([`clip`]); `None` without a value.
    pub fn of(
        (metric, statistic, unit, label): (&'static str, &'static str, &'static str, &'static str),
        values: Vec<f64>,
        bound: bool,
    ) -> Option<Figure> {
        let (interval, clipped) = clip(MeanInterval::of(&values, CONFIDENCE)?, unit);
        Some(Figure {
            no_spread: interval.no_spread(),
            metric,
            statistic,
            unit,
            values,
            interval,
            clipped,
            bound,
            good_bounds: None,
            without: Vec::new(),
            label,
        })
    }

    /// `TTFT p50 45.2 ms ± 2.1 ms (95% CI, 5 runs)`, or `… (1 run: no interval)`; a
    /// clipped interval gives its ends: `TTFT p99 3.20 ms, 95% CI 0 to 7.87 ms (clipped at 0,
    /// a latency cannot be negative; 3 runs)`.
    pub fn line(&self) -> String {
        let i = &self.interval;
        // A fraction is a bare number (`good fraction 0.950 ± 0.012`).
        let with = |v: f64| match self.unit {
            "fraction" => number(v),
            unit => format!("{} {unit}", number(v)),
        };
        let label = match self.bound {
            true => format!("{} (bound)", self.label),
            false => self.label.to_string(),
        };
        match i.half_width {
            Some(_) if self.clipped => {
                let (low, high) = (i.low.unwrap_or(0.0), i.high.unwrap_or(0.0));
                let why = if low <= 0.0 {
                    "clipped at 0, it cannot be negative"
                } else {
                    "clipped at 1, a fraction cannot exceed it"
                };
                format!(
                    "{label:<18} {}, 95% CI {} to {} ({why}; {} runs)",
                    with(i.mean),
                    number(low),
                    with(high),
                    i.n
                )
            }
            // Not `± 0`: every run gave the same figure, which bounds nothing.
            Some(_) if i.no_spread() => format!(
                "{label:<18} {} (no spread: all {} runs gave it; 95% CI not estimable \
                 from the runs' spread)",
                with(i.mean),
                i.n
            ),
            Some(h) => format!(
                "{label:<18} {} ± {} (95% CI, {} runs)",
                with(i.mean),
                with(h),
                i.n
            ),
            None => format!("{label:<18} {} (1 run: no interval)", with(i.mean)),
        }
    }
}

/// Three significant figures or one decimal, whichever is longer.
fn number(v: f64) -> String {
    match v.abs() {
        a if a >= 10.0 => format!("{v:.1}"),
        a if a >= 1.0 => format!("{v:.2}"),
        _ => format!("{v:.3}"),
    }
}

/// One run in a line: `20 requests, 0 errors, TTFT p50 12.3 ms, exit 0 (pass)`.
pub fn one_line(run: &Judged, status: i32) -> String {
    let s = &run.outcome.summary;
    let ttft = figure(s, "time_to_first_token", "p50")
        .map_or(String::new(), |v| format!(", TTFT p50 {} ms", number(v)));
    let verdict = run
        .verdict
        .as_ref()
        .map_or(String::new(), |v| format!(" ({v})"));
    format!(
        "{} requests, {} errors{ttft}, exit {status}{verdict}",
        s.requests, s.errors
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_say_the_interval_or_that_there_is_none() {
        let f = |values: &[f64]| {
            let (interval, clipped) = clip(MeanInterval::of(values, CONFIDENCE).unwrap(), "ms");
            Figure {
                metric: "time_to_first_token",
                statistic: "p50",
                unit: "ms",
                values: values.to_vec(),
                no_spread: interval.no_spread(),
                interval,
                clipped,
                bound: false,
                good_bounds: None,
                without: Vec::new(),
                label: "TTFT p50",
            }
        };
        // Mean 45.2, s = 1.9235, t(0.975, 4) = 2.776: ± 2.39.
        let line = f(&[43.0, 44.0, 45.0, 46.0, 48.0]).line();
        assert_eq!(
            line,
            "TTFT p50           45.2 ms ± 2.39 ms (95% CI, 5 runs)"
        );
        assert_eq!(
            f(&[45.2]).line(),
            "TTFT p50           45.2 ms (1 run: no interval)"
        );
        // Audit F11: every run gave the same figure, printed as a 95% CI of ± 0.000.
        let same = f(&[2.915, 2.915, 2.915]);
        assert_eq!(
            same.line(),
            "TTFT p50           2.92 ms (no spread: all 3 runs gave it; 95% CI not estimable \
             from the runs' spread)"
        );
        assert_eq!(serde_json::to_value(&same).unwrap()["no_spread"], true);
        assert!(serde_json::to_value(f(&[1.0, 2.0]))
            .unwrap()
            .get("no_spread")
            .is_none());
    }

    // Three runs, one with a slow tail: mean 3.20 ms ± 4.67 ms gave a TTFT of −1.48 ms at the
    // interval's low end, in the table, summary.json and repeats.csv.
    #[test]
    fn an_interval_below_zero_is_clipped_and_says_so() {
        let values = [0.5, 0.6, 8.5];
        let (interval, clipped) = clip(MeanInterval::of(&values, CONFIDENCE).unwrap(), "ms");
        assert!(clipped);
        assert_eq!(interval.low, Some(0.0));
        let h = interval.half_width.unwrap();
        assert!((interval.high.unwrap() - (interval.mean + h)).abs() < 1e-12);
        let f = Figure {
            metric: "time_to_first_token",
            statistic: "p99",
            unit: "ms",
            values: values.to_vec(),
            interval,
            clipped,
            no_spread: false,
            bound: false,
            good_bounds: None,
            without: Vec::new(),
            label: "TTFT p99",
        };
        assert_eq!(
            f.line(),
            "TTFT p99           3.20 ms, 95% CI 0.000 to 14.6 ms (clipped at 0, it cannot be \
             negative; 3 runs)"
        );
        let summary = RepeatsSummary {
            runs_asked: 3,
            runs: 3,
            confidence: CONFIDENCE,
            method: METHOD,
            exit_status: 0,
            interrupted: false,
            per_run: Vec::new(),
            metrics: vec![f.clone()],
            unavailable: Vec::new(),
        };
        let csv = summary.csv();
        let row = csv.lines().nth(1).unwrap();
        assert!(row.contains(",0.000000,"), "{row}");
        assert!(row.ends_with(",true,false"), "{row}");
        let json = serde_json::to_value(&f).unwrap();
        assert_eq!(
            (json["low"].as_f64(), json["clipped"].as_bool()),
            (Some(0.0), Some(true))
        );

        // A fraction's high end stops at 1; an interval inside the limits is left alone.
        let (frac, clipped) = clip(
            MeanInterval::of(&[0.9, 0.99, 1.0], CONFIDENCE).unwrap(),
            "fraction",
        );
        assert!(clipped && frac.high == Some(1.0), "{frac:?}");
        let (same, clipped) = clip(
            MeanInterval::of(&[43.0, 45.0, 47.0], CONFIDENCE).unwrap(),
            "ms",
        );
        assert!(!clipped);
        assert_eq!(
            same,
            MeanInterval::of(&[43.0, 45.0, 47.0], CONFIDENCE).unwrap()
        );
    }

    // A run too short for a rate has no throughput: the mean was over the others and nothing
    // said so. It is named with why, and the mean is over the runs that gave one.
    #[test]
    fn a_run_without_a_figure_is_named_with_why_not_dropped() {
        let why = canary_core::rate_unavailable(1, 0.05).unwrap();
        let (values, without) = split(vec![
            ("run-1", Ok(10.0)),
            ("run-2", Err(why.clone())),
            ("run-3", Ok(12.0)),
        ]);
        assert_eq!(values, [10.0, 12.0]);
        assert_eq!(
            without,
            [Without {
                dir: "run-2".into(),
                why: why.clone()
            }]
        );
        assert_eq!(
            listed(&without),
            "run-2 (1 measured request: a rate needs at least 2)"
        );
    }
}

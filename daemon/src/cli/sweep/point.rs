//! One point of a sweep: the figures `sweep.json`, `sweep.csv` and the table show, read from
//! the point's measured run.

use crate::cli::repeats::RepeatsSummary;
use crate::execute::Judged;
use canary_core::{GaugeStats, RunSummary, Stats};
use serde::{Deserialize, Serialize};

/// A point whose target error rate is above this is left out of the knee and the Pareto
/// front (the daemon's default `max_error_rate`): its throughput and latencies are of the
/// requests that were served, not of the load offered.
pub const EVIDENCE_MAX_ERROR_RATE: f64 = 0.05;

/// What a sweep varies from point to point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Axis {
    /// Users of a closed loop (or, with a trace or a rate, the in-flight ceiling).
    Concurrency,
    /// Requests per second of an open loop.
    RequestRate,
    /// A trace's speedup.
    Speedup,
}

impl Axis {
    /// The point's short label: `c16`, `r50`, `x2`.
    pub fn label(self, value: f64) -> String {
        let prefix = match self {
            Axis::Concurrency => "c",
            Axis::RequestRate => "r",
            Axis::Speedup => "x",
        };
        // Compact for a nonsense value quoted back (`r1e308`, not 309 digits); every value a
        // sweep can run prints as `{}` does, so folder names are unchanged.
        format!("{prefix}{}", canary_core::rate_text::number(value))
    }

    /// The flag that sets it.
    pub fn flag(self) -> &'static str {
        match self {
            Axis::Concurrency => "--concurrency",
            Axis::RequestRate => "--request-rate",
            Axis::Speedup => "--speedup",
        }
    }
}

/// The first value `values` holds twice, if any: a sweep's points are distinct loads (a step
/// between two runs of one load is noise, never a knee), and repeats are `--runs N`'s.
pub fn repeated_value(values: &[f64]) -> Option<f64> {
    values
        .iter()
        .enumerate()
        .find(|(i, v)| values[..*i].contains(v))
        .map(|(_, v)| *v)
}

/// Why the knee and the Pareto front leave a point out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Exclusion {
    /// A signal cut its figures short, or stopped it before anything was sent.
    CutShort,
    /// The open-file limit held it under its nominal load ([`Point::capped`]).
    Capped,
    /// Its verdict (a run's, with `--runs N`) is an error: nothing completed, or canaryd
    /// itself was the bottleneck.
    ErrorVerdict,
    /// More than [`EVIDENCE_MAX_ERROR_RATE`] of its requests failed at the target.
    TargetErrors,
    /// It has no request throughput or no TTFT p99 to compare (too few requests, or too
    /// short a span for a rate): left out of the knee only.
    NoFigures,
}

/// A point the knee leaves out, and why: `sweep.json`'s `left_out`, and a daemon sweep run's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeftOut {
    /// `c16`, `r50`, `x2`.
    pub label: String,
    /// Its axis value.
    pub value: f64,
    /// Why.
    pub why: Exclusion,
    /// Its target error rate (measured), for `target_errors`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_rate: Option<f64>,
    /// For `no_figures`: which figure is missing and why (`no request rate: the run spanned
    /// 89.0 ms, under the 100 ms a rate needs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missing: Option<String>,
}

impl LeftOut {
    /// `c16 (20.0% of its requests failed at the target)`.
    pub fn said(&self) -> String {
        let why = match self.why {
            Exclusion::CutShort => "cut short by a signal".to_string(),
            Exclusion::Capped => "capped by the open-file limit".to_string(),
            Exclusion::ErrorVerdict => "its verdict is an error".to_string(),
            Exclusion::TargetErrors => match self.error_rate {
                Some(r) => format!("{:.1}% of its requests failed at the target", r * 100.0),
                None => "its requests failed at the target".to_string(),
            },
            Exclusion::NoFigures => self
                .missing
                .clone()
                .unwrap_or_else(|| "no request throughput or TTFT p99".to_string()),
        };
        format!("{} ({why})", self.label)
    }

    /// Every one of `left` said, in order: `c16 (…), c64 (…)`.
    pub fn all_said(left: &[LeftOut]) -> String {
        left.iter()
            .map(LeftOut::said)
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// How a knee line of a series of `points` says the points `left` out of it: how many
    /// are evidence, ` among the 2 points that are evidence`, and `; left out: c16 (…), …`
    /// (both empty when none was left out). The sweep's table and the daemon's log say it
    /// alike.
    pub fn knee_words(points: usize, left: &[LeftOut]) -> (usize, String, String) {
        let evidence = points.saturating_sub(left.len());
        if left.is_empty() {
            return (evidence, String::new(), String::new());
        }
        (
            evidence,
            format!(" among the {evidence} points that are evidence"),
            format!("; left out: {}", LeftOut::all_said(left)),
        )
    }
}

/// p50, p90 and p99 of a latency, ms.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Percentiles {
    /// Median.
    pub p50: Option<f64>,
    /// 90th percentile.
    pub p90: Option<f64>,
    /// 99th percentile.
    pub p99: Option<f64>,
}

impl Percentiles {
    fn of(s: Option<&Stats>) -> Percentiles {
        match s.filter(|s| s.count > 0) {
            Some(s) => Percentiles {
                p50: Some(s.p50),
                p90: Some(s.p90),
                p99: Some(s.p99),
            },
            None => Percentiles::default(),
        }
    }
}

/// What the server's `/metrics` said during the point (gauges sampled at each scrape).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ServerFigures {
    /// Requests waiting: mean over scrapes.
    pub queue_depth_mean: Option<f64>,
    /// Requests waiting: most seen.
    pub queue_depth_max: Option<f64>,
    /// Requests running: mean over scrapes.
    pub running_mean: Option<f64>,
    /// KV-cache usage (0 to 1): mean over scrapes.
    pub kv_cache_usage_mean: Option<f64>,
    /// KV-cache usage: most seen.
    pub kv_cache_usage_max: Option<f64>,
    /// Requests preempted during the point (a counter's delta).
    pub preemptions: Option<f64>,
}

/// One point's figures. Rates are per second of the point's measured phase; percentiles are
/// exact per request, within the histogram's precision (0.1 %).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PointFigures {
    /// Requests sent in the measured phase.
    pub requests: u64,
    /// Requests completed.
    pub completed: u64,
    /// Requests that failed.
    pub errors: u64,
    /// Share of the requests judged that the target failed; null when none was judged (every
    /// request cancelled on purpose or failed by canaryd itself).
    pub error_rate: Option<f64>,
    /// Seconds of the measured phase.
    pub duration_s: f64,
    /// Completed requests per second.
    pub request_throughput: Option<f64>,
    /// Output tokens per second, all users.
    pub output_tokens_per_s: Option<f64>,
    /// Output tokens per second of one user: the median request's, of the requests that have
    /// one (`per_user_requests`).
    pub output_tokens_per_s_per_user: Option<f64>,
    /// Completed requests with a per-user rate: the requests that median is over. Summed over
    /// the runs with `--runs N`.
    pub per_user_requests: u64,
    /// Completed requests with more than one output token but no per-user rate: every token
    /// came in one read, so the first token and the end share a time and no span between them
    /// was measured (its rate is only a lower bound, (tokens − 1) / e2e). Left out of the
    /// median, counted here and said in the point's notes. Summed over the runs.
    pub per_user_unmeasured: u64,
    /// Why the point has no rates (request throughput, tokens/s, goodput), as its
    /// `summary.json`'s `rate_unavailable` says (the first run's, with `--runs N`, when none
    /// of its runs had one): absent when it has them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_unavailable: Option<String>,
    /// Output tokens per second per GPU: absent when the GPU count is unknown.
    pub output_tokens_per_s_per_gpu: Option<f64>,
    /// GPUs the per-GPU figure divides by.
    pub gpus: Option<u64>,
    /// Where that count comes from: `nvml`/`dcgm` (measured during the point) or `--gpus`.
    pub gpus_from: Option<String>,
    /// Time to first token, ms.
    pub time_to_first_token_ms: Percentiles,
    /// Inter-token latency, ms.
    pub inter_token_latency_ms: Percentiles,
    /// End-to-end latency, ms.
    pub request_latency_ms: Percentiles,
    /// Good requests per second by the SLOs, when SLOs were given.
    pub goodput: Option<f64>,
    /// Share of the requests judged meeting the SLOs; null without SLOs or when none was
    /// judged.
    pub good_fraction: Option<f64>,
    /// Requests judged good (summed over the runs with `--runs N`): exact as a count of
    /// judgements. Absent without SLOs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub good_requests: Option<u64>,
    /// How many requests were truly good at least and at most, given the judgements that rest
    /// on a bound (summed over the runs; each run's `summary.json` `good_requests_at_least`,
    /// `good_requests_at_most`). Absent without SLOs or from a summary that does not count
    /// them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub good_requests_at_least: Option<u64>,
    /// See [`PointFigures::good_requests_at_least`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub good_requests_at_most: Option<u64>,
    /// Goodput judgements that rest on a bound (`uncertain_misses` and `uncertain_meets`,
    /// summed): while above 0, `goodput` and `good_fraction` are in `bounds` and the truth is
    /// anywhere from the at-least to the at-most count. Absent when 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub good_judged_on_bound: u64,
    /// The server's queue and KV figures: absent without `/metrics`.
    pub server: Option<ServerFigures>,
    /// The run's in-flight ceiling (`summary.json`'s `in_flight_cap.limit`; the lowest of its
    /// runs', with `--runs N`); null: none.
    pub in_flight_cap: Option<usize>,
    /// What set it: `concurrency` or `open_files`; null without one.
    pub in_flight_cap_source: Option<&'static str>,
    /// A request waited in canaryd for a slot under that ceiling (`schedule_hold` above 0).
    #[serde(skip)]
    pub held: bool,
    /// The figures above that are not exact, as `summary.json` metric names (of
    /// [`BOUND_FIGURES`]): some of the point's times were a later segment's stamp or
    /// canaryd's read, so TTFT and e2e are upper bounds and ITL and tokens/s per user exact
    /// in neither direction. With `--runs N`, those of any run.
    pub bounds: Vec<&'static str>,
}

/// The figures of a point whose times can be bounds rather than exact, in column order;
/// `goodput` (and with it the good fraction) when some goodput judgement rests on a bound.
pub const BOUND_FIGURES: [&str; 5] = [
    "output_token_throughput_per_user",
    "time_to_first_token",
    "inter_token_latency",
    "request_latency",
    GOODPUT,
];

/// `goodput` in [`PointFigures::bounds`]: goodput and the good fraction rest on judgements
/// made on bounds ([`PointFigures::good_judged_on_bound`]).
pub const GOODPUT: &str = "goodput";

/// For serde's `skip_serializing_if`.
pub fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl PointFigures {
    /// One point's figures from its repeats' (at least one): counts and durations summed;
    /// rates, shares, percentiles and the server's means averaged over the runs that have
    /// them (an estimate of the point's figure, never a percentile of pooled requests); the
    /// server's maxima the largest; the GPU count the first run's.
    pub fn mean(all: &[PointFigures]) -> PointFigures {
        let mean = |get: &dyn Fn(&PointFigures) -> Option<f64>| {
            let v: Vec<f64> = all.iter().filter_map(get).collect();
            (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
        };
        let pct = |get: &dyn Fn(&PointFigures) -> &Percentiles| Percentiles {
            p50: mean(&|f| get(f).p50),
            p90: mean(&|f| get(f).p90),
            p99: mean(&|f| get(f).p99),
        };
        let sum = |get: &dyn Fn(&PointFigures) -> u64| all.iter().map(get).sum::<u64>();
        let (requests, errors) = (sum(&|f| f.requests), sum(&|f| f.errors));
        let servers: Vec<&ServerFigures> = all.iter().filter_map(|f| f.server.as_ref()).collect();
        let server = (!servers.is_empty()).then(|| {
            let s_mean = |get: &dyn Fn(&ServerFigures) -> Option<f64>| {
                let v: Vec<f64> = servers.iter().filter_map(|s| get(s)).collect();
                (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
            };
            let s_max = |get: &dyn Fn(&ServerFigures) -> Option<f64>| {
                servers.iter().filter_map(|s| get(s)).reduce(f64::max)
            };
            let preempted: Vec<f64> = servers.iter().filter_map(|s| s.preemptions).collect();
            ServerFigures {
                queue_depth_mean: s_mean(&|s| s.queue_depth_mean),
                queue_depth_max: s_max(&|s| s.queue_depth_max),
                running_mean: s_mean(&|s| s.running_mean),
                kv_cache_usage_mean: s_mean(&|s| s.kv_cache_usage_mean),
                kv_cache_usage_max: s_max(&|s| s.kv_cache_usage_max),
                preemptions: (!preempted.is_empty()).then(|| preempted.iter().sum()),
            }
        });
        let first = all.first();
        let request_throughput = mean(&|f| f.request_throughput);
        let cap = all
            .iter()
            .filter_map(|f| Some((f.in_flight_cap?, f.in_flight_cap_source)))
            .min_by_key(|c| c.0);
        PointFigures {
            requests,
            completed: sum(&|f| f.completed),
            errors,
            // A share, averaged as the doc above says: the runs' own (target errors over the
            // requests judged); pooling errors over requests counted cancels and canaryd's
            // own failures as the target's. Runs that judged nothing have none to average.
            error_rate: mean(&|f| f.error_rate),
            duration_s: all.iter().map(|f| f.duration_s).sum(),
            request_throughput,
            rate_unavailable: match request_throughput {
                Some(_) => None,
                None => all.iter().find_map(|f| f.rate_unavailable.clone()),
            },
            output_tokens_per_s: mean(&|f| f.output_tokens_per_s),
            output_tokens_per_s_per_user: mean(&|f| f.output_tokens_per_s_per_user),
            per_user_requests: sum(&|f| f.per_user_requests),
            per_user_unmeasured: sum(&|f| f.per_user_unmeasured),
            output_tokens_per_s_per_gpu: mean(&|f| f.output_tokens_per_s_per_gpu),
            gpus: first.and_then(|f| f.gpus),
            gpus_from: first.and_then(|f| f.gpus_from.clone()),
            time_to_first_token_ms: pct(&|f| &f.time_to_first_token_ms),
            inter_token_latency_ms: pct(&|f| &f.inter_token_latency_ms),
            request_latency_ms: pct(&|f| &f.request_latency_ms),
            goodput: mean(&|f| f.goodput),
            good_fraction: mean(&|f| f.good_fraction),
            good_requests: all.iter().map(|f| f.good_requests).sum(),
            good_requests_at_least: all.iter().map(|f| f.good_requests_at_least).sum(),
            good_requests_at_most: all.iter().map(|f| f.good_requests_at_most).sum(),
            good_judged_on_bound: sum(&|f| f.good_judged_on_bound),
            server,
            in_flight_cap: cap.map(|c| c.0),
            in_flight_cap_source: cap.and_then(|c| c.1),
            held: all.iter().any(|f| f.held),
            bounds: BOUND_FIGURES
                .into_iter()
                .filter(|k| all.iter().any(|f| f.bounds.contains(k)))
                .collect(),
        }
    }

    /// What the per-user median leaves out, when it leaves out some requests: those whose
    /// tokens all came in one read have no per-user rate.
    pub fn per_user_note(&self) -> Option<String> {
        canary_core::per_user_note(self.per_user_unmeasured, self.per_user_requests)
    }

    /// The figures of `run`; `gpus_flag` is `--gpus`, used when no GPU was measured.
    pub fn of(run: &Judged, gpus_flag: Option<u64>) -> PointFigures {
        let s: &RunSummary = &run.outcome.summary;
        let measured = run.outcome.telemetry.gpu.as_ref().filter(|g| g.gpus > 0);
        let (gpus, gpus_from) = match (measured, gpus_flag) {
            (Some(g), _) => {
                let from = g.sources.iter().map(|s| format!("{s:?}").to_lowercase());
                (
                    Some(g.gpus as u64),
                    Some(from.collect::<Vec<_>>().join("+")),
                )
            }
            (None, Some(n)) => (Some(n), Some("--gpus".to_string())),
            (None, None) => (None, None),
        };
        let tokens = s.output_token_throughput;
        let good = crate::judge::verdict::GoodRange::of(s);
        let server = run.outcome.telemetry.server.as_ref().map(|v| {
            let mean = |g: &Option<GaugeStats>| g.as_ref().map(|g| g.mean);
            let max = |g: &Option<GaugeStats>| g.as_ref().map(|g| g.max);
            ServerFigures {
                queue_depth_mean: mean(&v.queue_depth),
                queue_depth_max: max(&v.queue_depth),
                running_mean: mean(&v.running_requests),
                kv_cache_usage_mean: mean(&v.kv_cache_usage),
                kv_cache_usage_max: max(&v.kv_cache_usage),
                preemptions: v.preemptions,
            }
        });
        PointFigures {
            requests: s.requests,
            completed: s.completed,
            errors: s.errors,
            error_rate: s.error_rate,
            duration_s: s.duration_s,
            request_throughput: s.request_throughput,
            rate_unavailable: s.rate_unavailable.clone(),
            output_tokens_per_s: tokens,
            output_tokens_per_s_per_user: s
                .metrics
                .get("output_token_throughput_per_user")
                .filter(|m| m.count > 0)
                .map(|m| m.p50),
            per_user_requests: s.per_user_requests,
            per_user_unmeasured: s.per_user_unmeasured,
            output_tokens_per_s_per_gpu: tokens.zip(gpus).map(|(t, n)| t / n as f64),
            gpus,
            gpus_from,
            time_to_first_token_ms: Percentiles::of(s.metrics.get("time_to_first_token")),
            inter_token_latency_ms: Percentiles::of(s.metrics.get("inter_token_latency")),
            request_latency_ms: Percentiles::of(s.metrics.get("request_latency")),
            goodput: s.goodput.as_ref().and_then(|g| g.goodput),
            good_fraction: s.goodput.as_ref().and_then(|g| g.good_request_fraction),
            good_requests: s.goodput.as_ref().map(|g| g.good_requests),
            good_requests_at_least: s.goodput.as_ref().and_then(|g| g.good_requests_at_least),
            good_requests_at_most: s.goodput.as_ref().and_then(|g| g.good_requests_at_most),
            good_judged_on_bound: good.map_or(0, |r| r.on_bound),
            server,
            in_flight_cap: run.outcome.in_flight_cap.limit,
            in_flight_cap_source: run
                .outcome
                .in_flight_cap
                .limit
                .map(|_| run.outcome.in_flight_cap.source.as_str()),
            // Only waits for the ceiling: a session's turn held for its previous turn is
            // held too, by the trace, not by the client.
            held: run.outcome.in_flight_cap.waited > 0,
            bounds: {
                let rx = s.receive_timestamps.bounds();
                let on_bound = good.is_some_and(|r| r.uncertain());
                BOUND_FIGURES
                    .into_iter()
                    .filter(|&k| match k {
                        GOODPUT => on_bound,
                        k => rx.is_bound(k),
                    })
                    .collect()
            },
        }
    }
}

/// One point of the sweep as `sweep.json` holds it.
#[derive(Debug, Clone, Serialize)]
pub struct Point {
    /// Position in run order, from 1 (the folder's `NN`).
    pub index: usize,
    /// `c16`, `r50`, `x2`.
    pub label: String,
    /// The axis value the point ran at.
    pub value: f64,
    /// Its artifacts folder, relative to the sweep's.
    pub dir: String,
    /// `pass`, `fail: …` by the gates (`--min-good-fraction`, `--max-error-rate`), or
    /// `error: …` when the point measured nothing or could not run.
    pub verdict: String,
    /// Whether the verdict is a pass.
    pub passed: bool,
    /// The figures; absent when the point could not run.
    #[serde(flatten)]
    pub figures: Option<PointFigures>,
    /// With `--runs N`: each run's verdict and each headline figure's mean with its 95%
    /// confidence interval (the point's `summary.json`); the figures above are then the mean
    /// of the point's complete runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repeats: Option<RepeatsSummary>,
    /// Set on the knee.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub knee: bool,
    /// Set on the Pareto-optimal points.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub pareto: bool,
    /// Set when the open-file limit held the point under its nominal load: a ceiling below
    /// its users (`c64` run with 15 in flight), or requests of a rate or a trace held for a
    /// slot. Its figures are of a lighter load than its label says, so the knee and the Pareto
    /// front leave it out, and its notes say so.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub capped: bool,
    /// A signal cut its figures short (every run's, with `--runs N`): they are partial, so
    /// the knee, the Pareto front and a capacity bracket leave the point out (its verdict
    /// says `interrupted`).
    #[serde(skip)]
    pub cut_short: bool,
    /// Its verdict (a run's, with `--runs N`) is an error: nothing completed, or canaryd
    /// itself was the bottleneck. Not the target missing its gates.
    #[serde(skip)]
    pub errored: bool,
    /// Why its rate was not held (a run's, with `--runs N`;
    /// [`crate::capacity::rate_not_held`]): the client did not offer the load its schedule
    /// asked for, or the server's queue grew through it.
    #[serde(skip)]
    pub rate_not_held: Option<String>,
    /// What to know about the point beyond its figures (its rate was not held).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl Point {
    /// Point `index` (from 1) at `value`, its artifacts in `dir`, from its judged `run`
    /// (`None`: a signal stopped it before anything was sent); `gpus_flag` as in
    /// [`PointFigures::of`]. `canaryd sweep` and the daemon's `kind = "sweep"` workloads both
    /// make their points here.
    pub fn of_run(
        index: usize,
        label: String,
        value: f64,
        dir: String,
        run: Option<&Judged>,
        gpus_flag: Option<u64>,
    ) -> Point {
        let mut point = Point {
            index,
            label,
            value,
            dir,
            verdict: String::new(),
            passed: false,
            figures: None,
            repeats: None,
            knee: false,
            pareto: false,
            capped: false,
            cut_short: true,
            errored: true,
            rate_not_held: None,
            notes: Vec::new(),
        };
        let Some(run) = run else {
            point.verdict =
                crate::judge::verdict::Verdict::error("interrupted before anything was sent")
                    .to_string();
            return point;
        };
        let verdict = run
            .verdict
            .clone()
            .unwrap_or(crate::judge::verdict::Verdict {
                kind: crate::judge::verdict::VerdictKind::Pass,
                reasons: Vec::new(),
            });
        point.passed = verdict.kind == crate::judge::verdict::VerdictKind::Pass;
        point.verdict = verdict.to_string();
        point.figures = Some(PointFigures::of(run, gpus_flag));
        point.cut_short = run.outcome.interrupted;
        point.errored = verdict.kind == crate::judge::verdict::VerdictKind::Error;
        point.rate_not_held = crate::capacity::rate_not_held(&run.outcome);
        point
    }

    /// A probe of the capacity search: it passes only when the client offered its rate and
    /// the server kept up with it. A rate the client could not offer (it held requests for a
    /// slot, or sent too slowly), or one under which TTFT kept rising (the server's queue
    /// grew), fails whatever the SLOs said of the requests sent, and the notes say why.
    pub fn require_rate_held(&mut self) {
        let Some(why) = self.rate_not_held.clone() else {
            return;
        };
        if self.passed {
            self.passed = false;
            self.verdict = crate::judge::verdict::Verdict {
                kind: crate::judge::verdict::VerdictKind::Fail,
                reasons: vec![why.clone()],
            }
            .to_string();
        }
        self.notes.push(why);
    }

    /// A point of a plain rate sweep: its notes say when its rate was not held (the client
    /// did not offer it, or the server's queue grew through it: past the knee), its verdict
    /// stays the gates'.
    pub fn note_rate_not_held(&mut self) {
        if let Some(why) = self.rate_not_held.clone() {
            self.notes.push(why);
        }
    }

    /// Point `index` of `--runs N`: `runs` ((folder, run, exit status), in order) in `dir`,
    /// `summary` their experiment's. Its figures are the mean of the complete runs' (of every
    /// run's when a signal cut each short); its verdict the first run's that did not pass,
    /// named, or `pass`.
    pub fn of_runs(
        index: usize,
        label: String,
        value: f64,
        dir: String,
        runs: &[(String, Judged, i32)],
        summary: RepeatsSummary,
        gpus_flag: Option<u64>,
    ) -> Point {
        let Some((_, first, _)) = runs.first() else {
            return Point::of_run(index, label, value, dir, None, gpus_flag);
        };
        let mut point = Point::of_run(index, label, value, dir, Some(first), gpus_flag);
        // The runs the experiment's estimates are over: not cut short, not errored.
        let complete: Vec<&Judged> = runs
            .iter()
            .map(|r| &r.1)
            .filter(|r| crate::cli::repeats::left_out(r).is_none())
            .collect();
        point.cut_short = runs.iter().all(|r| r.1.outcome.interrupted);
        let pool = if complete.is_empty() {
            runs.iter().map(|r| &r.1).collect()
        } else {
            complete
        };
        let figures: Vec<PointFigures> = pool
            .iter()
            .map(|r| PointFigures::of(r, gpus_flag))
            .collect();
        point.figures = Some(PointFigures::mean(&figures));
        let judged: Vec<Point> = runs
            .iter()
            .map(|(d, r, _)| Point::of_run(index, String::new(), value, d.clone(), Some(r), None))
            .collect();
        point.passed = judged.iter().all(|p| p.passed);
        point.errored = judged.iter().any(|p| p.errored);
        point.rate_not_held = judged.iter().find_map(|p| {
            let why = p.rate_not_held.as_ref()?;
            Some(format!("{}: {why}", p.dir))
        });
        if let Some(p) = judged.iter().find(|p| !p.passed) {
            point.verdict = format!("{}: {}", p.dir, p.verdict);
        } else if runs.len() < summary.runs_asked as usize {
            // Every run that ran passed, but a signal stopped the rest: not a pass.
            point.passed = false;
            point.verdict = crate::judge::verdict::Verdict::error(format!(
                "interrupted after {} of {} runs",
                runs.len(),
                summary.runs_asked
            ))
            .to_string();
        }
        point.repeats = Some(summary);
        point
    }

    /// Whether the open-file limit held the point under its nominal load on `axis` (see
    /// [`Point::capped`]); the note that says so.
    pub fn open_files_cap(&self, axis: Axis) -> Option<String> {
        let f = self.figures.as_ref()?;
        let limit = f
            .in_flight_cap
            .filter(|_| f.in_flight_cap_source == Some("open_files"))?;
        match axis {
            Axis::Concurrency => ((limit as f64) < self.value).then(|| {
                format!(
                    "capped by the open-file limit at {limit} requests in flight, below its {} \
                     users: its figures are of a lighter load than its label (left out of the \
                     knee and the Pareto front)",
                    self.value
                )
            }),
            Axis::RequestRate | Axis::Speedup => f.held.then(|| {
                format!(
                    "capped by the open-file limit at {limit} requests in flight: requests \
                     waited in canaryd for a slot, so the server saw a lighter load than the \
                     point's (left out of the knee and the Pareto front)"
                )
            }),
        }
    }

    /// Why the point's errors leave it out of the knee and the Pareto front, when they do: its
    /// verdict (a run's, with `--runs N`) is an error (nothing completed, canaryd itself was
    /// the bottleneck), or more than [`EVIDENCE_MAX_ERROR_RATE`] of its requests failed at the
    /// target. Its throughput and latencies are then of the few requests that were served,
    /// and a dead server's point made a knee of the step before it. A point a signal cut short
    /// is left out already (its verdict says `interrupted`).
    pub fn errors_note(&self) -> Option<String> {
        if self.cut_short {
            return None;
        }
        if self.errored {
            return Some(format!(
                "left out of the knee and the Pareto front: its verdict is an error ({})",
                self.verdict
            ));
        }
        let rate = self.figures.as_ref()?.error_rate?;
        (rate > EVIDENCE_MAX_ERROR_RATE).then(|| {
            format!(
                "left out of the knee and the Pareto front: {:.1}% of its requests failed at \
                 the target (over {:.0}%), so its figures are of the requests that were served",
                rate * 100.0,
                EVIDENCE_MAX_ERROR_RATE * 100.0
            )
        })
    }

    /// Whether the point failed: its verdict (a run's, with `--runs N`) is an error (nothing
    /// completed, or canaryd itself was the bottleneck) and no signal cut it short (the typed
    /// fact, not the verdict's text: a server's error body quoted there can say
    /// "interrupted"). One rule for `canaryd sweep`'s exit status and the daemon's sweep.
    pub fn failed(&self) -> bool {
        self.errored && !self.cut_short
    }

    /// Why the knee and the Pareto front leave the point out, if they do: cut short by a
    /// signal, held under its load by the open-file limit, errored ([`Point::errors_note`]).
    pub fn exclusion(&self) -> Option<Exclusion> {
        if self.cut_short {
            Some(Exclusion::CutShort)
        } else if self.capped {
            Some(Exclusion::Capped)
        } else if self.errored {
            Some(Exclusion::ErrorVerdict)
        } else if self.errors_note().is_some() {
            Some(Exclusion::TargetErrors)
        } else {
            None
        }
    }

    /// The point as the knee's list of points left out holds it, when the knee leaves it
    /// out: for a reason of [`Point::exclusion`], or for want of figures to compare.
    pub fn left_out(&self) -> Option<LeftOut> {
        let why = self.exclusion().or_else(|| {
            let step = self.step();
            (!step.is_evidence()).then_some(Exclusion::NoFigures)
        })?;
        Some(LeftOut {
            label: self.label.clone(),
            value: self.value,
            why,
            error_rate: self
                .figures
                .as_ref()
                .and_then(|f| f.error_rate)
                .filter(|_| why == Exclusion::TargetErrors),
            missing: (why == Exclusion::NoFigures).then(|| self.missing_figures()),
        })
    }

    /// Which of the knee's figures the point lacks, and why: `no request rate: the run
    /// spanned 89.0 ms, under the 100 ms a rate needs`, `no TTFT p99: no request completed
    /// with a first token`. A point too short for a rate had a TTFT p99, and was said to have
    /// neither.
    fn missing_figures(&self) -> String {
        let f = self.figures.clone().unwrap_or_default();
        let mut missing = Vec::new();
        if f.request_throughput.is_none() {
            missing.push(match &f.rate_unavailable {
                Some(why) => format!("no request rate: {why}"),
                None => "no request rate".to_string(),
            });
        }
        if f.time_to_first_token_ms.p99.is_none() {
            missing.push("no TTFT p99: no request completed with a first token".to_string());
        }
        match missing.is_empty() {
            true => "no request throughput or TTFT p99".to_string(),
            false => missing.join("; "),
        }
    }

    /// Whether the point is evidence for the knee and the Pareto front
    /// ([`Point::exclusion`]).
    fn evidence(&self) -> bool {
        self.exclusion().is_none()
    }

    /// The knee's view of the point: NaN figures where it measured nothing. Its offered load
    /// is its axis value: requests/s, users (or the in-flight ceiling), a trace's speedup, each
    /// proportional to the load it offered.
    pub fn step(&self) -> canary_core::series::LoadStep {
        let f = self.figures.as_ref().filter(|_| self.evidence());
        canary_core::series::LoadStep {
            throughput: f.and_then(|f| f.request_throughput).unwrap_or(f64::NAN),
            ttft_p99_ms: f
                .and_then(|f| f.time_to_first_token_ms.p99)
                .unwrap_or(f64::NAN),
            offered_load: Some(self.value),
        }
    }

    /// The Pareto front's view: per GPU when every point knows its GPU count, else in all.
    pub fn rates(&self, per_gpu_known: bool) -> canary_core::series::TokenRates {
        let f = self.figures.as_ref().filter(|_| self.evidence());
        let per_gpu = if per_gpu_known {
            f.and_then(|f| f.output_tokens_per_s_per_gpu)
        } else {
            f.and_then(|f| f.output_tokens_per_s)
        };
        canary_core::series::TokenRates {
            per_gpu: per_gpu.unwrap_or(f64::NAN),
            per_user: f
                .and_then(|f| f.output_tokens_per_s_per_user)
                .unwrap_or(f64::NAN),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A point's label names its folder and is quoted back in errors: a nonsense rate printed
    // its 309 digits (`r1000…000`), every real one prints as `{}` does.
    #[test]
    fn a_label_is_compact_and_unchanged_for_real_values() {
        assert_eq!(Axis::RequestRate.label(1e308), "r1e308");
        assert_eq!(Axis::RequestRate.label(62.5), "r62.5");
        assert_eq!(Axis::Concurrency.label(16.0), "c16");
        assert_eq!(Axis::Speedup.label(0.000001), "x0.000001");
    }

    // The runs' own shares, averaged: a run's cancels and canaryd's own failures are not
    // the target's errors, and pooling errors over requests counted them.
    #[test]
    fn a_repeated_points_error_rate_is_the_mean_of_its_runs() {
        let run = |requests, errors, error_rate| PointFigures {
            requests,
            errors,
            error_rate,
            ..Default::default()
        };
        // The second run: 3 failures, one of them canaryd's own; 2 of 9 judged.
        let m = PointFigures::mean(&[run(10, 0, Some(0.0)), run(10, 3, Some(2.0 / 9.0))]);
        assert_eq!((m.requests, m.errors), (20, 3));
        let rate = m.error_rate.unwrap();
        assert!((rate - 1.0 / 9.0).abs() < 1e-12, "{rate}");
        // A run that judged nothing (every request cancelled) has no share to average: not
        // a 0 that halves the others'.
        let m = PointFigures::mean(&[run(10, 0, None), run(10, 2, Some(0.2))]);
        assert_eq!(m.error_rate, Some(0.2));
        assert_eq!(PointFigures::mean(&[run(10, 0, None)]).error_rate, None);
    }

    // A repeated point's figures are bounds where any run's were: a mean over runs some of
    // whose times are bounds is not exact either.
    #[test]
    fn a_repeated_points_bounds_are_those_of_any_run() {
        let run = |bounds: Vec<&'static str>| PointFigures {
            bounds,
            ..Default::default()
        };
        let m = PointFigures::mean(&[
            run(vec!["request_latency"]),
            run(vec![]),
            run(vec!["inter_token_latency", "time_to_first_token"]),
        ]);
        assert_eq!(
            m.bounds,
            [
                "time_to_first_token",
                "inter_token_latency",
                "request_latency"
            ]
        );
        assert!(PointFigures::mean(&[run(vec![])]).bounds.is_empty());
    }

    // A point the open-file limit held under its load is marked on every axis: below its
    // users on a concurrency sweep, requests held for a slot on a rate or speedup sweep. The
    // user's own ceiling (`concurrency`) is no cap of that kind.
    #[test]
    fn the_open_file_limit_caps_a_point_below_its_users_or_when_it_held_requests() {
        let point = |value: f64, limit: usize, source: &'static str, held: bool| Point {
            value,
            figures: Some(PointFigures {
                in_flight_cap: Some(limit),
                in_flight_cap_source: Some(source),
                held,
                ..Default::default()
            }),
            ..Point::of_run(1, String::new(), value, String::new(), None, None)
        };
        let capped = |p: Point, axis| p.open_files_cap(axis).is_some();
        assert!(capped(
            point(64.0, 15, "open_files", false),
            Axis::Concurrency
        ));
        assert!(!capped(
            point(8.0, 15, "open_files", false),
            Axis::Concurrency
        ));
        assert!(!capped(
            point(64.0, 15, "concurrency", true),
            Axis::Concurrency
        ));
        assert!(capped(
            point(400.0, 15, "open_files", true),
            Axis::RequestRate
        ));
        assert!(!capped(
            point(400.0, 15, "open_files", false),
            Axis::RequestRate
        ));
        assert!(!capped(
            point(400.0, 8, "concurrency", true),
            Axis::RequestRate
        ));
        assert!(capped(point(4.0, 15, "open_files", true), Axis::Speedup));
    }

    // A point a signal stopped 0.2 s in has partial figures: it is not a step of the knee.
    #[test]
    fn a_point_cut_short_is_not_the_knees_evidence() {
        let point = |value: f64, throughput: f64, ttft_p99: f64| Point {
            index: value as usize,
            label: Axis::Concurrency.label(value),
            value,
            dir: String::new(),
            verdict: "pass".into(),
            passed: true,
            figures: Some(PointFigures {
                request_throughput: Some(throughput),
                time_to_first_token_ms: Percentiles {
                    p99: Some(ttft_p99),
                    ..Default::default()
                },
                ..Default::default()
            }),
            repeats: None,
            knee: false,
            pareto: false,
            capped: false,
            cut_short: false,
            errored: false,
            rate_not_held: None,
            notes: Vec::new(),
        };
        let points = || {
            vec![
                point(1.0, 10.0, 50.0),
                point(8.0, 80.0, 55.0),
                point(16.0, 40.0, 90.0),
            ]
        };
        let whole = super::super::document::SweepDoc::new("sweep", Axis::Concurrency, points());
        assert_eq!(whole.knee.map(|k| k.label), Some("c8".to_string()));
        let mut cut = points();
        cut[2].cut_short = true;
        let cut = super::super::document::SweepDoc::new("sweep", Axis::Concurrency, cut);
        assert!(cut.knee.is_none(), "{:?}", cut.knee);
        assert!(!cut.points[2].pareto);
        // A dead server (an error verdict), or a point whose requests largely failed at the
        // target: its throughput is of the few served, and it made a knee of the step before.
        let mut dead = points();
        dead[2].errored = true;
        dead[2].verdict = "run-3: error: target unusable".into();
        let dead = super::super::document::SweepDoc::new("sweep", Axis::Concurrency, dead);
        assert!(dead.knee.is_none(), "{:?}", dead.knee);
        assert!(!dead.points[2].pareto);
        let note = &dead.points[2].notes[0];
        assert!(
            note.contains("its verdict is an error (run-3: error"),
            "{note}"
        );
        let mut failing = points();
        failing[2].figures.as_mut().unwrap().error_rate = Some(0.2);
        let failing = super::super::document::SweepDoc::new("sweep", Axis::Concurrency, failing);
        assert!(failing.knee.is_none(), "{:?}", failing.knee);
        let note = &failing.points[2].notes[0];
        assert!(note.contains("20.0% of its requests failed"), "{note}");
        // Within 5 %: still evidence.
        let mut few = points();
        few[2].figures.as_mut().unwrap().error_rate = Some(0.05);
        let few = super::super::document::SweepDoc::new("sweep", Axis::Concurrency, few);
        assert_eq!(few.knee.map(|k| k.label), Some("c8".to_string()));
        assert!(few.left_out.is_empty(), "{:?}", few.left_out);
        // Each point left out is listed, in order of increasing load, with why.
        assert_eq!(
            failing.left_out,
            [LeftOut {
                label: "c16".into(),
                value: 16.0,
                why: Exclusion::TargetErrors,
                error_rate: Some(0.2),
                missing: None,
            }]
        );
        assert_eq!(dead.left_out[0].why, Exclusion::ErrorVerdict);
        assert_eq!(cut.left_out[0].why, Exclusion::CutShort);

        // A point left out between two broke the series: c8 and c32 were never compared, and
        // the knee at c8 was missed. The knee steps over it.
        let mut gap = points();
        gap[2].errored = true;
        gap.push(point(32.0, 82.0, 200.0));
        let gap = super::super::document::SweepDoc::new("sweep", Axis::Concurrency, gap);
        assert_eq!(gap.knee.map(|k| k.label), Some("c8".to_string()));
        assert_eq!(gap.left_out.len(), 1);
        assert_eq!(gap.left_out[0].label, "c16");
    }
}

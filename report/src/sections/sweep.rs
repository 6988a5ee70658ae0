//! A series of runs (a sweep, or runs named together): throughput against latency with the
//! saturation knee, and the Pareto front of total against per-user token throughput.
//!
//! A sweep's folder has its verdict in `sweep.json`: the knee, the front and the points left
//! out of them are taken from it, so the page agrees with the sweep's table and with `canaryd
//! compare`. Runs named together have none: the knee and the front are then found here with
//! `canary_core::series`, as `canaryd sweep` finds them, leaving out what it would
//! ([`evidence`]): walking the runs in series order, the first step whose completed-request
//! throughput grows by less than 10 % while TTFT p99 rises by more than 20 % marks saturation;
//! the knee is the run before that step, the last one that still scaled. The runs' offered
//! loads are unknown here, so no step is weighed against its load increase as a sweep's steps
//! are (`canary_core::series::gain_floor`): a series of small steps can show a knee of noise,
//! and the page says the loads were unknown.
//!
//! A figure some of whose times were a later segment's stamp or canaryd's read is marked as
//! the sweep's table marks it (`sweep.json`'s `bounds`, else [`super::bounds::of_run`]): a
//! latency `≤` (an upper bound), a per-user rate `*` (exact in neither direction). A capacity
//! search's page leads with its answer, as the sweep's last line gives it.

mod evidence;

use super::bounds::{self, E2E, PER_USER, TTFT};
use super::{ms, num, pct};
use crate::artifacts::{Metric, Run, SweepFile};
use crate::html::{esc, table};
use crate::plot::{Axis, Colour, Mark, Plot, HALF};
use crate::sample::{quantile, sorted};
use crate::ReportError;
use canary_core::series::{LoadStep, TokenRates};

pub use evidence::LeftOut;
use evidence::{whys, LEFT_OUT_LAYER};

/// One run's point in the series.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// The run's label.
    pub label: String,
    /// Completed requests per second.
    pub throughput: f64,
    /// Output tokens per second, all users.
    pub tokens_per_s: f64,
    /// Median output tokens per second of one user.
    pub tokens_per_user: f64,
    /// TTFT p50, ms.
    pub ttft_p50: f64,
    /// TTFT p99, ms.
    pub ttft_p99: f64,
    /// e2e p99, ms.
    pub e2e_p99: f64,
    /// The target's error rate; `None` when the run judged no request (every one cancelled on
    /// purpose, or canaryd's own failure).
    pub error_rate: Option<f64>,
    /// GPUs the run measured (NVML / DCGM, `summary.json`'s `gpu.gpus`), when it did.
    pub gpus: Option<u64>,
    /// Why it is neither the knee's nor the front's evidence, when it is not (as in
    /// `sweep.json`).
    pub left_out: Option<LeftOut>,
    /// `sweep.json`'s notes on the point.
    pub notes: Vec<String>,
    /// Its figures that are not exact, as `summary.json` names them ([`super::bounds`]):
    /// `sweep.json`'s `bounds` for a point it lists, else the run's (any run's, for a mean).
    pub bounds: Vec<&'static str>,
    /// A capacity search's probe: whether it passed (`sweep.json`'s `passed`).
    pub passed: Option<bool>,
    /// Good requests over the requests judged, with SLOs (the mean of the runs', for a mean).
    pub good_fraction: Option<f64>,
    /// Goodput judgements that rest on a bound (`summary.json`'s `uncertain_misses` and
    /// `uncertain_meets`, summed over the runs): the good share is then exact only as a
    /// count of judgements.
    pub good_on_bound: u64,
    /// The requests truly good at least and at most, given those judgements, and the requests
    /// judged good (summed over the runs); `None` when a run does not count them.
    pub good_range: Option<(u64, u64, u64)>,
}

impl Point {
    /// The figures of `run` (exact, from its records).
    pub fn of(run: &Run) -> Point {
        let f = run.figures();
        let ttft = sorted(run.values(Metric::Ttft));
        let e2e = sorted(run.values(Metric::E2e));
        let per_user = sorted(
            run.measured()
                .filter(|r| r.ok)
                .filter_map(|r| r.tokens_per_s)
                .collect(),
        );
        Point {
            label: run.label.clone(),
            // A run without a rate (too short) has none to draw, as a missing percentile.
            throughput: f.request_throughput.unwrap_or(f64::NAN),
            tokens_per_s: f.output_token_throughput.unwrap_or(f64::NAN),
            tokens_per_user: quantile(&per_user, 0.5),
            ttft_p50: quantile(&ttft, 0.5),
            ttft_p99: quantile(&ttft, 0.99),
            e2e_p99: quantile(&e2e, 0.99),
            error_rate: f.error_rate,
            gpus: run
                .summary
                .as_ref()
                .and_then(|s| s.doc.get("gpu")?.get("gpus")?.as_u64())
                .filter(|&n| n > 0),
            left_out: evidence::of_run(run, &f),
            notes: Vec::new(),
            bounds: bounds::of_run(run),
            passed: None,
            good_fraction: f.good_fraction,
            good_on_bound: f.uncertain_misses.values().sum::<u64>()
                + f.uncertain_meets.values().sum::<u64>(),
            good_range: f
                .good_range
                .zip(f.good_requests)
                .map(|((low, high), good)| (low, high, good)),
        }
    }

    /// One point from the runs that repeat it (at least one): each figure the mean of the
    /// runs' own (an estimate, as `canaryd sweep --runs N` gives it in `sweep.json`).
    pub fn mean(label: String, runs: &[Point]) -> Point {
        let mean = |f: fn(&Point) -> f64| runs.iter().map(f).sum::<f64>() / runs.len() as f64;
        let each: Vec<(&str, Option<&LeftOut>)> = runs
            .iter()
            .map(|p| (p.label.as_str(), p.left_out.as_ref()))
            .collect();
        // Over the runs that have one, as sweep.json's mean: a run that judged nothing has no
        // share, not a 0 that lowers the others'.
        let rates: Vec<f64> = runs.iter().filter_map(|p| p.error_rate).collect();
        let error_rate =
            (!rates.is_empty()).then(|| rates.iter().sum::<f64>() / rates.len() as f64);
        Point {
            label,
            throughput: mean(|p| p.throughput),
            tokens_per_s: mean(|p| p.tokens_per_s),
            tokens_per_user: mean(|p| p.tokens_per_user),
            ttft_p50: mean(|p| p.ttft_p50),
            ttft_p99: mean(|p| p.ttft_p99),
            e2e_p99: mean(|p| p.e2e_p99),
            error_rate,
            gpus: runs.first().and_then(|p| p.gpus),
            left_out: evidence::of_mean(&each, error_rate),
            notes: Vec::new(),
            bounds: bounds::union(runs.iter().map(|p| p.bounds.as_slice())),
            passed: None,
            good_fraction: {
                let good: Vec<f64> = runs.iter().filter_map(|p| p.good_fraction).collect();
                (!good.is_empty()).then(|| good.iter().sum::<f64>() / good.len() as f64)
            },
            good_on_bound: runs.iter().map(|p| p.good_on_bound).sum(),
            good_range: runs.iter().try_fold((0, 0, 0), |(l, h, g), p| {
                let (low, high, good) = p.good_range?;
                Some((l + low, h + high, g + good))
            }),
        }
    }

    /// Output tokens/s per GPU when every point of `series` knows its GPU count; else the
    /// total, which orders the runs the same when they all ran on the same GPUs.
    pub fn per_gpu(&self, series: &[Point]) -> f64 {
        match self.gpus {
            Some(n) if series.iter().all(|p| p.gpus.is_some()) => self.tokens_per_s / n as f64,
            _ => self.tokens_per_s,
        }
    }
}

/// The index of the knee in `points` (series order), if the series saturates.
pub fn knee(points: &[Point]) -> Option<usize> {
    let steps: Vec<LoadStep> = points
        .iter()
        .map(|p| match p.left_out.is_some() {
            true => LoadStep {
                throughput: f64::NAN,
                ttft_p99_ms: f64::NAN,
                offered_load: None,
            },
            // Runs named together say no load the knee could weigh a step against.
            false => LoadStep {
                throughput: p.throughput,
                ttft_p99_ms: p.ttft_p99,
                offered_load: None,
            },
        })
        .collect();
    canary_core::series::knee(&steps)
}

/// Indices of the Pareto-optimal points: no other point has at least as much per-GPU (or,
/// without a GPU count in every run, total) and per-user token throughput and more of one.
pub fn pareto(points: &[Point]) -> Vec<usize> {
    let rates: Vec<TokenRates> = points
        .iter()
        .map(|p| match p.left_out.is_some() {
            true => TokenRates {
                per_gpu: f64::NAN,
                per_user: f64::NAN,
            },
            false => TokenRates {
                per_gpu: p.per_gpu(points),
                per_user: p.tokens_per_user,
            },
        })
        .collect();
    canary_core::series::pareto(&rates)
}

/// The series' points: one per run, or for a sweep whose points repeat (`--runs N`) one per
/// point, the mean of its runs (runs of one point are consecutive).
pub fn points(runs: &[Run]) -> Vec<Point> {
    let mut points: Vec<Point> = Vec::new();
    let mut i = 0;
    while i < runs.len() {
        let Some(point) = &runs[i].point else {
            points.push(Point::of(&runs[i]));
            i += 1;
            continue;
        };
        let n = runs[i..]
            .iter()
            .take_while(|r| r.point.as_ref() == Some(point))
            .count();
        let each: Vec<Point> = runs[i..i + n].iter().map(Point::of).collect();
        points.push(Point::mean(point.clone(), &each));
        i += n;
    }
    points
}

/// Where each point sits on the Pareto plot, per-user against all users' tokens/s: per GPU
/// (`true`) when every point knows its GPU count, as the front was found; runs on different
/// GPU counts order differently per GPU than in all, and the front drawn on totals passed
/// through runs it dominated.
fn front_axes(points: &[Point]) -> (bool, Vec<(f64, f64)>) {
    let per_gpu = points.iter().all(|p| p.gpus.is_some());
    let at = points
        .iter()
        .map(|p| (p.tokens_per_user, p.per_gpu(points)))
        .collect();
    (per_gpu, at)
}

/// The knee and the front of `points`, and which points are left out of them: `sweep.json`'s
/// when the series is a sweep's folder (its points matched by folder), else found here. The
/// knee's label as `sweep.json` names it, when its point is not on the page.
fn verdict(points: &mut [Point], sweep: Option<&SweepFile>) -> (Option<usize>, Vec<usize>) {
    let Some(s) = sweep else {
        return (knee(points), pareto(points));
    };
    for p in points.iter_mut() {
        let listed = s.point(&p.label);
        p.left_out = listed.and_then(|q| q.left_out()).map(LeftOut::Sweep);
        p.notes = listed.map(|q| q.notes.clone()).unwrap_or_default();
        p.passed = listed.and_then(|q| q.passed);
        // The sweep's own marks, so the page's agree with its table's `*`.
        if let Some(said) = listed.and_then(|q| q.bounds.as_ref()) {
            p.bounds = said.iter().filter_map(|b| bounds::known(b)).collect();
        }
    }
    let at = |label: &str| {
        let dir = &s.points.iter().find(|q| q.label == label)?.dir;
        points.iter().position(|p| &p.label == dir)
    };
    let knee = s.knee.as_deref().and_then(at);
    let mut front: Vec<usize> = s.pareto.iter().filter_map(|l| at(l)).collect();
    front.sort_unstable();
    (knee, front)
}

/// The series section's body; `sweep`: the series' `sweep.json`, when it is a sweep's folder.
pub fn render(runs: &[Run], sweep: Option<&SweepFile>) -> Result<String, ReportError> {
    let mut points = points(runs);
    let repeated = runs.iter().any(|r| r.point.is_some());
    let (knee, front) = verdict(&mut points, sweep);
    let left_out: Vec<usize> = (0..points.len())
        .filter(|&i| points[i].left_out.is_some())
        .collect();
    let mut html = sweep.and_then(capacity).unwrap_or_default();
    html.push_str("<div class=\"grid\">\n");

    let xy = |f: fn(&Point) -> f64| -> Vec<(f64, f64)> {
        points
            .iter()
            .map(|p| (p.throughput, f(p)))
            .filter(|q| q.0.is_finite() && q.1.is_finite())
            .collect()
    };
    let mut lat = Plot::new(
        "sweep-latency",
        "Throughput against latency",
        Axis::linear("completed requests per second"),
        Axis::linear("ms"),
        HALF,
    );
    for (i, (name, f)) in [
        ("TTFT p50", (|p: &Point| p.ttft_p50) as fn(&Point) -> f64),
        ("TTFT p99", |p: &Point| p.ttft_p99),
        ("e2e p99", |p: &Point| p.e2e_p99),
    ]
    .into_iter()
    .enumerate()
    {
        lat.layer(name, Colour::nth(i), Mark::LinePoints(xy(f)));
    }
    let crossed: Vec<(f64, f64)> = left_out
        .iter()
        .map(|&i| (points[i].throughput, points[i].ttft_p99))
        .filter(|q| q.0.is_finite() && q.1.is_finite())
        .collect();
    if !crossed.is_empty() {
        lat.layer(LEFT_OUT_LAYER, Colour::ERROR, Mark::Crosses(crossed));
    }
    let joined = if repeated {
        "Lines join the points (each the mean of its runs) in series order."
    } else {
        "Lines join the runs in series order."
    };
    let (whose, knee_whose) = match sweep {
        Some(_) => (" (sweep.json's)", ", as sweep.json states it"),
        None => ("", ""),
    };
    let crosses = match left_out.len() {
        0 => String::new(),
        _ => " A cross on TTFT p99 marks a point left out of the knee and the front (why: \
              under the table)."
            .to_string(),
    };
    match (knee, sweep.and_then(|s| s.knee.as_deref())) {
        (Some(k), _) => {
            lat.layer(
                &format!("knee: {}", points[k].label),
                Colour::RULE,
                Mark::VRule(points[k].throughput),
            );
            lat.note(format!(
                "{joined} Knee at {} ({} req/s{knee_whose}): the next step {}.{crosses}",
                points[k].label,
                num(points[k].throughput),
                rule_words(sweep.is_some())
            ));
        }
        (None, Some(label)) => {
            lat.note(format!(
                "{joined} Knee at {label}, as sweep.json states it; its run is not on this \
                 page.{crosses}"
            ));
        }
        (None, None) => {
            lat.note(format!(
                "{joined} {}{crosses}",
                no_knee(&points, sweep, whose)
            ));
        }
    }
    html.push_str(&lat.to_html()?);

    let (per_gpu, at) = front_axes(&points);
    let mut par = Plot::new(
        "sweep-pareto",
        "Pareto front: total against per-user token throughput",
        Axis::linear("output tokens/s per user (median)"),
        Axis::linear(match per_gpu {
            true => "output tokens/s per GPU, all users",
            false => "output tokens/s, all users",
        }),
        HALF,
    );
    let finite = |i: &usize| at[*i].0.is_finite() && at[*i].1.is_finite();
    let all: Vec<(f64, f64)> = (0..at.len()).filter(finite).map(|i| at[i]).collect();
    par.layer("runs", Colour::nth(0), Mark::Points(all));
    let mut line: Vec<(f64, f64)> = front.iter().map(|&i| at[i]).collect();
    line.sort_by(|a, b| a.0.total_cmp(&b.0));
    par.layer("Pareto front", Colour::nth(1), Mark::Line(line));
    let crossed: Vec<(f64, f64)> = left_out
        .iter()
        .copied()
        .filter(finite)
        .map(|i| at[i])
        .collect();
    if !crossed.is_empty() {
        par.layer(LEFT_OUT_LAYER, Colour::ERROR, Mark::Crosses(crossed));
    }
    par.note(format!(
        "{}{}",
        match per_gpu {
            true => {
                "Tokens/s per GPU (every run knows its GPU count), as in sweep.json; a run is \
                 on the front when no other has at least as much of both and more of one."
            }
            false => {
                "Total tokens/s (a run without a GPU count: the order is the same when every \
                 run used the same GPUs); a run is on the front when no other has at least as \
                 much of both and more of one."
            }
        },
        match (sweep, left_out.is_empty()) {
            (Some(_), _) => " The front is sweep.json's; a cross marks a point left out of it.",
            (None, false) => " A cross marks a run left out of it.",
            (None, true) => "",
        }
    ));
    html.push_str(&par.to_html()?);
    html.push_str("</div>\n");

    let searched = sweep.is_some_and(|s| s.capacity.is_some());
    let rows: Vec<Vec<String>> = points
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut tags = Vec::new();
            if knee == Some(i) {
                tags.push("knee".to_string());
            }
            if front.contains(&i) {
                tags.push("Pareto".to_string());
            }
            if let Some(why) = &p.left_out {
                tags.push(format!("left out: {}", why.short()));
            }
            // A capacity search's probes, as its bracket was made of them.
            if let (Some(passed), true) = (p.passed, searched) {
                tags.push(
                    if passed {
                        "probe passed"
                    } else {
                        "probe failed"
                    }
                    .to_string(),
                );
            }
            vec![
                esc(&p.label),
                num(p.throughput),
                num(p.tokens_per_s),
                marked(p, PER_USER, p.tokens_per_user, num),
                marked(p, TTFT, p.ttft_p50, ms),
                marked(p, TTFT, p.ttft_p99, ms),
                marked(p, E2E, p.e2e_p99, ms),
                p.error_rate.map_or_else(|| "–".to_string(), pct),
                // With SLOs: marked * where some judgement rests on a bound.
                match (p.good_fraction, p.good_on_bound) {
                    (None, _) => "–".to_string(),
                    (Some(g), 0) => pct(g),
                    (Some(g), _) => format!("{}*", pct(g)),
                },
                esc(&tags.join(", ")),
            ]
        })
        .collect();
    // The good column only for a series judged by SLOs.
    let judged = points.iter().any(|p| p.good_fraction.is_some());
    let rows: Vec<Vec<String>> = rows
        .into_iter()
        .map(|mut r| {
            if !judged {
                r.remove(r.len() - 2);
            }
            r
        })
        .collect();
    let mut head = vec![
        if repeated { "point" } else { "run" },
        "req/s",
        "tok/s",
        "tok/s per user (p50)",
        "TTFT p50",
        "TTFT p99",
        "e2e p99",
        "error rate",
    ];
    if judged {
        head.push("good");
    }
    head.push("");
    html.push_str(&table("sweep", &head, &rows));
    html.push_str(&exactness(&points, repeated, sweep.is_some()));
    if let Some(note) = good_note(&points) {
        html.push_str(&note);
    }
    html.push_str(&whys(&points, sweep));
    Ok(html)
}

/// A cell of `metric`'s figure `v`: `≤ 12.3 ms` for an upper bound (TTFT, e2e), as the
/// timeslice table marks one, `84.1*` for a figure exact in neither direction (tokens/s per
/// user), as the sweep's table marks it; unmarked when exact.
fn marked(p: &Point, metric: &str, v: f64, show: fn(f64) -> String) -> String {
    match (
        p.bounds.contains(&metric) && v.is_finite(),
        bounds::is_upper(metric),
    ) {
        (false, _) => show(v),
        (true, true) => format!("≤ {}", show(v)),
        (true, false) => format!("{}*", show(v)),
    }
}

/// Under the table when some point's good share rests on goodput judgements made on bounds
/// (its cell marked `*`): each such point's truly-good range.
fn good_note(points: &[Point]) -> Option<String> {
    let each: Vec<String> = points
        .iter()
        .filter(|p| p.good_fraction.is_some() && p.good_on_bound > 0)
        .map(|p| {
            let range = p.good_range.map_or(String::new(), |(low, high, good)| {
                format!(": truly {low} to {high} good, {good} judged good")
            });
            format!("{}{range} ({} on a bound)", p.label, p.good_on_bound)
        })
        .collect();
    (!each.is_empty()).then(|| {
        format!(
            "<p class=\"note\">good: the share of the requests judged that met every SLO, \
             exact as a count of judgements. One marked * rests on judgements made on a bound \
             (a time read late: a TTFT miss may be a meet, an ITL meet a miss; summary.json's \
             uncertain_misses and uncertain_meets), so the truth lies in a range: {}.</p>\n",
            esc(&each.join("; "))
        )
    })
}

/// What the table's figures are: exact only when no cell is marked; else which marks mean
/// what, and where they come from.
fn exactness(points: &[Point], repeated: bool, sweep: bool) -> String {
    // The table's columns that can be bounds: TTFT and e2e (upper), tok/s per user (neither).
    let any = |of: &[&str]| {
        points
            .iter()
            .any(|p| p.bounds.iter().any(|m| of.contains(m)))
    };
    let (upper, neither) = (any(&[TTFT, E2E]), any(&[PER_USER]));
    let whose = if sweep {
        "Marked as sweep.json's bounds say (the sweep's table marks these cells *)."
    } else {
        "Marked by each run's summary.json (receive_timestamps), as canaryd sweep marks them."
    };
    let mut marks = Vec::new();
    if upper {
        marks.push(format!(
            "a latency marked ≤ is an upper bound (some of {} first tokens or ends were timed \
             at a later segment's stamp or canaryd's read, never before the event){}",
            if repeated { "a run's" } else { "the run's" },
            if repeated {
                ", and a mean of upper bounds is one too"
            } else {
                ""
            }
        ));
    }
    if neither {
        marks.push(
            "a tok/s per user marked * is exact in neither direction (a rate over such times)"
                .to_string(),
        );
    }
    let marks = match marks.is_empty() {
        true => String::new(),
        false => format!(" {}; the others exact. {whose}", marks.join("; ")),
    };
    let html = match (repeated, upper || neither) {
        (true, false) => {
            "Estimates: each figure the mean of the point's runs' own, each exact from that \
             run's records (the points ran --runs times; each point's summary.json has each \
             figure's confidence interval). The knee and the front are the means'."
                .to_string()
        }
        (true, true) => format!(
            "Estimates: each figure the mean of the point's runs' own, each from that run's \
             records (the points ran --runs times; each point's summary.json has each figure's \
             confidence interval). The knee and the front are the means'.{marks}"
        ),
        (false, false) => "Exact: each figure from the run's records.".to_string(),
        (false, true) => format!("Each figure from the run's records;{marks}"),
    };
    format!("<p class=\"note\">{}</p>\n", esc(&html))
}

/// The step rule in words: a sweep's (`sweep.json`'s knee, each step weighed against its load
/// increase), or, for runs named together, the fixed floor and that their loads are unknown.
fn rule_words(sweep: bool) -> String {
    match sweep {
        true => canary_core::series::step_words(true, " %"),
        false => format!(
            "{} (the runs' loads unknown, no step is weighed against its load increase)",
            canary_core::series::step_words(false, " %")
        ),
    }
}

/// Why there is no knee: the knee rule, among the points that are evidence; when fewer than
/// two are (the others left out), that, and which and why, as the sweep's own knee line says
/// it: a step was never tested, which is not a series that kept scaling.
fn no_knee(points: &[Point], sweep: Option<&SweepFile>, whose: &str) -> String {
    let (total, left): (usize, Vec<String>) = match sweep.filter(|s| !s.points.is_empty()) {
        Some(s) => (
            s.points.len(),
            s.left_out.iter().map(|l| l.said()).collect(),
        ),
        None => (
            points.len(),
            points
                .iter()
                .filter_map(|p| match &p.left_out {
                    Some(why) => Some(format!("{} ({})", p.label, why.short())),
                    None if !p.throughput.is_finite() || !p.ttft_p99.is_finite() => {
                        Some(format!("{} (no request throughput or TTFT p99)", p.label))
                    }
                    None => None,
                })
                .collect(),
        ),
    };
    let evidence = total.saturating_sub(left.len());
    let rule = format!("no step {}", rule_words(sweep.is_some()));
    match (left.is_empty(), evidence < 2) {
        (true, _) => format!("No knee{whose}: {rule}."),
        (false, true) => format!(
            "No knee{whose}: {evidence} of the {total} points {} evidence, and a knee is a \
             step between two; left out: {}.",
            if evidence == 1 { "is" } else { "are" },
            left.join(", ")
        ),
        (false, false) => format!(
            "No knee{whose} among the {evidence} points that are evidence: {rule}; left out: \
             {}.",
            left.join(", ")
        ),
    }
}

/// A capacity search's answer, as the sweep's last line gives it: its bounds rounded outward
/// (`canary_core::rate_text`, as the sweep table rounds them) so what is printed still holds.
fn capacity(s: &SweepFile) -> Option<String> {
    use canary_core::rate_text::{rate_at_least, rate_below};
    let c = s.capacity.as_ref()?;
    let runs = s.points.len();
    // The share with the digits it was given (99.5, not 100).
    let good = c.min_good_fraction.map_or(String::new(), |g| {
        format!(", {}% good", (g * 100.0 * 1e6).round() / 1e6)
    });
    let slo = &c.slo;
    // A bracket end whose probe's pass or fail rests on goodput judgements made on bounds,
    // as sweep.json's `capacity.not_established` states it: the decision stands, but the end
    // is not established.
    let unsettled = canary_core::EndOnBounds::all_said(&c.not_established);
    let line = match (c.passed, c.failed) {
        (Some(p), Some(f)) => format!(
            "capacity at SLO ({slo}{good}): at least {} req/s (passed), below {} req/s \
             (failed); \
             {runs} rates tried, stopped by {}",
            rate_at_least(p),
            rate_below(f),
            c.stopped_by
        ),
        (Some(p), None) => format!(
            "capacity at SLO ({slo}{good}): at least {} req/s (a lower bound: no rate failed \
             of {runs} tried, stopped by {})",
            rate_at_least(p),
            c.stopped_by
        ),
        (None, f) => format!(
            "capacity at SLO ({slo}{good}): no rate passed (lowest tried, failed: {} req/s, the \
             capacity below it); {runs} rates tried, stopped by {}",
            f.map_or("–".into(), rate_below),
            c.stopped_by
        ),
    };
    let line = match &unsettled {
        None => line,
        Some(said) => format!("{line}; {said}"),
    };
    let held = match unsettled {
        None => "so they still hold",
        Some(_) => {
            "so they hold as the probes were decided; an end marked not established rests on \
             goodput judgements made on bounds (times read late), and the truth could decide \
             its probe the other way"
        }
    };
    Some(format!(
        "<p class=\"verdict\" id=\"capacity\">{}</p>\n<p class=\"note\">The capacity \
         search's answer (sweep.json's capacity): bounds, each a probe's offered rate, rounded \
         outward, {held}; the table marks each probe passed or failed.</p>\n",
        esc(&line)
    ))
}

#[cfg(test)]
mod tests;

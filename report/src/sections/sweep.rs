//! A series of runs (a sweep, or runs named together): throughput against latency with the
//! saturation knee, and the Pareto front of total against per-user token throughput.
//!
//! The knee and the front are `canary_core::series`'s, the same `canaryd sweep` writes into
//! `sweep.json`: walking the runs in series order (the sweep's order of increasing load), the
//! first step whose completed-request throughput grows by less than [`KNEE_GAIN`] while TTFT
//! p99 rises by more than [`KNEE_RISE`] marks saturation; the knee is the run before that step,
//! the last one that still scaled.

use super::{ms, num, pct};
use crate::artifacts::{Metric, Run};
use crate::html::{esc, table};
use crate::plot::{Axis, Colour, Mark, Plot, HALF};
use crate::sample::{quantile, sorted};
use crate::ReportError;
use canary_core::series::{LoadStep, TokenRates};

pub use canary_core::series::{KNEE_GAIN, KNEE_RISE};

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
    /// A signal cut its run short (every run's, for a mean): its figures are partial, so it
    /// is neither the knee's nor the front's evidence, as in `sweep.json`.
    pub cut_short: bool,
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
            cut_short: run
                .summary
                .as_ref()
                .and_then(|s| s.doc.get("interrupted")?.as_bool())
                == Some(true),
        }
    }

    /// One point from the runs that repeat it (at least one): each figure the mean of the
    /// runs' own (an estimate, as `canaryd sweep --runs N` gives it in `sweep.json`).
    pub fn mean(label: String, runs: &[Point]) -> Point {
        let mean = |f: fn(&Point) -> f64| runs.iter().map(f).sum::<f64>() / runs.len() as f64;
        // Over the runs that have one, as sweep.json's mean: a run that judged nothing has no
        // share, not a 0 that lowers the others'.
        let rates: Vec<f64> = runs.iter().filter_map(|p| p.error_rate).collect();
        Point {
            label,
            throughput: mean(|p| p.throughput),
            tokens_per_s: mean(|p| p.tokens_per_s),
            tokens_per_user: mean(|p| p.tokens_per_user),
            ttft_p50: mean(|p| p.ttft_p50),
            ttft_p99: mean(|p| p.ttft_p99),
            e2e_p99: mean(|p| p.e2e_p99),
            error_rate: (!rates.is_empty()).then(|| rates.iter().sum::<f64>() / rates.len() as f64),
            gpus: runs.first().and_then(|p| p.gpus),
            cut_short: runs.iter().all(|p| p.cut_short),
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
        .map(|p| match p.cut_short {
            true => LoadStep {
                throughput: f64::NAN,
                ttft_p99_ms: f64::NAN,
            },
            false => LoadStep {
                throughput: p.throughput,
                ttft_p99_ms: p.ttft_p99,
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
        .map(|p| match p.cut_short {
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

/// The series section's body.
pub fn render(runs: &[Run]) -> Result<String, ReportError> {
    let points = points(runs);
    let repeated = runs.iter().any(|r| r.point.is_some());
    let knee = knee(&points);
    let front = pareto(&points);
    let mut html = String::from("<div class=\"grid\">\n");

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
    let joined = if repeated {
        "Lines join the points (each the mean of its runs) in series order."
    } else {
        "Lines join the runs in series order."
    };
    match knee {
        Some(k) => {
            lat.layer(
                &format!("knee: {}", points[k].label),
                Colour::RULE,
                Mark::VRule(points[k].throughput),
            );
            lat.note(format!(
                "{joined} Knee at {} ({} req/s): the next step gained under {:.0} % throughput \
                 while TTFT p99 rose over {:.0} %.",
                points[k].label,
                num(points[k].throughput),
                KNEE_GAIN * 100.0,
                KNEE_RISE * 100.0
            ));
        }
        None => {
            lat.note(format!(
                "{joined} No knee: no step gained under {:.0} % throughput while TTFT p99 rose \
                 over {:.0} %.",
                KNEE_GAIN * 100.0,
                KNEE_RISE * 100.0
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
    let all: Vec<(f64, f64)> = at
        .iter()
        .copied()
        .filter(|q| q.0.is_finite() && q.1.is_finite())
        .collect();
    par.layer("runs", Colour::nth(0), Mark::Points(all));
    let mut line: Vec<(f64, f64)> = front.iter().map(|&i| at[i]).collect();
    line.sort_by(|a, b| a.0.total_cmp(&b.0));
    par.layer("Pareto front", Colour::nth(1), Mark::Line(line));
    par.note(match per_gpu {
        true => {
            "Tokens/s per GPU (every run knows its GPU count), as in sweep.json; a run is \
                 on the front when no other has at least as much of both and more of one."
        }
        false => {
            "Total tokens/s (a run without a GPU count: the order is the same when every \
                  run used the same GPUs); a run is on the front when no other has at least as \
                  much of both and more of one."
        }
    });
    html.push_str(&par.to_html()?);
    html.push_str("</div>\n");

    let rows: Vec<Vec<String>> = points
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut tags = Vec::new();
            if knee == Some(i) {
                tags.push("knee");
            }
            if front.contains(&i) {
                tags.push("Pareto");
            }
            vec![
                esc(&p.label),
                num(p.throughput),
                num(p.tokens_per_s),
                num(p.tokens_per_user),
                ms(p.ttft_p50),
                ms(p.ttft_p99),
                ms(p.e2e_p99),
                p.error_rate.map_or_else(|| "–".to_string(), pct),
                tags.join(", "),
            ]
        })
        .collect();
    html.push_str(&table(
        "sweep",
        &[
            if repeated { "point" } else { "run" },
            "req/s",
            "tok/s",
            "tok/s per user (p50)",
            "TTFT p50",
            "TTFT p99",
            "e2e p99",
            "error rate",
            "",
        ],
        &rows,
    ));
    html.push_str(if repeated {
        "<p class=\"note\">Estimates: each figure the mean of the point's runs' own, each \
         exact from that run's records (the points ran --runs times; sweep.json has each \
         figure's confidence interval). The knee and the front are found on the means.</p>\n"
    } else {
        "<p class=\"note\">Exact: each figure from the run's records.</p>\n"
    });
    Ok(html)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(throughput: f64, ttft_p99: f64, per_user: f64) -> Point {
        Point {
            label: format!("{throughput}"),
            throughput,
            tokens_per_s: throughput * 10.0,
            tokens_per_user: per_user,
            ttft_p50: ttft_p99 / 2.0,
            ttft_p99,
            e2e_p99: ttft_p99 * 4.0,
            error_rate: Some(0.0),
            gpus: None,
            cut_short: false,
        }
    }

    #[test]
    fn the_knee_is_the_last_run_that_still_scaled() {
        // Linear, then a plateau with latency climbing.
        let s = [
            p(10.0, 50.0, 90.0),
            p(20.0, 52.0, 80.0),
            p(40.0, 60.0, 70.0),
            p(42.0, 200.0, 30.0),
            p(43.0, 900.0, 10.0),
        ];
        assert_eq!(knee(&s), Some(2));
        // Still scaling: no knee.
        assert_eq!(knee(&s[..3]), None);
        // Latency up but throughput still growing: not a knee.
        assert_eq!(knee(&[p(10.0, 50.0, 1.0), p(20.0, 100.0, 1.0)]), None);
        // The plateau's first run cut short by a signal: its partial figures are not the
        // knee's evidence (as sweep.json leaves such a point out), nor on the front.
        let mut cut = s[..4].to_vec();
        cut[3].cut_short = true;
        assert_eq!(knee(&cut), None);
        assert!(!pareto(&cut).contains(&3));
    }

    // A run that judged no request has no error rate: the point's mean is over the runs that
    // have one, and a point of such runs only has none.
    #[test]
    fn a_repeated_points_error_rate_skips_runs_that_judged_nothing() {
        let with = |rate| Point {
            error_rate: rate,
            ..p(10.0, 50.0, 90.0)
        };
        let m = Point::mean("c1".into(), &[with(None), with(Some(0.2)), with(Some(0.1))]);
        assert!((m.error_rate.unwrap() - 0.15).abs() < 1e-12, "{m:?}");
        assert_eq!(Point::mean("c1".into(), &[with(None)]).error_rate, None);
    }

    #[test]
    fn the_pareto_front_drops_dominated_runs() {
        let s = [
            p(10.0, 50.0, 90.0),
            p(20.0, 52.0, 80.0),
            p(15.0, 60.0, 70.0),
            p(40.0, 60.0, 70.0),
        ];
        // Run 2 (150 tok/s, 70 per user) is dominated by run 1 (200, 80) and run 3 (400, 70).
        assert_eq!(pareto(&s), vec![0, 1, 3]);
        // On 1 and 4 GPUs: run 3's 400 tok/s are 100 per GPU, under run 1's 200 on one GPU.
        let mut gpus = s.to_vec();
        for (p, n) in gpus.iter_mut().zip([1, 1, 1, 4]) {
            p.gpus = Some(n);
        }
        assert_eq!(pareto(&gpus), vec![0, 1]);
        // Drawn where the front was found: per GPU.
        let (per_gpu, at) = front_axes(&gpus);
        assert!(per_gpu);
        assert_eq!((at[1].1, at[3].1), (200.0, 100.0));
        let (per_gpu, at) = front_axes(&s);
        assert!(!per_gpu);
        assert_eq!(at[3].1, 400.0);
    }
}

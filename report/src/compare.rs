//! `canaryd compare A B`: run B against run A, metric by metric, with the daemon's baseline
//! rule deciding whether a latency shift is real ([`canary_core::compare::shift`]: a
//! Mann-Whitney U test on every request's value and a median shift beyond noise).
//!
//! With one run per side the spread of run medians is unknown, so the rule's MAD term falls
//! to its floor (0.1 % of A's median) and the relative (`min_shift`, 5 %) and absolute
//! (`min_shift_ms`, 1 ms) floors decide with the rank test. Rates (errors, good requests) are
//! judged by the same rank test on each request's 0/1 outcome; a 0/1 outcome has no median to
//! shift, so the MAD rule does not apply to them. Throughputs are one figure per run: judging
//! them needs repeated runs, whose confidence intervals (issue 18) have their slot in [`Row`].

mod page;
mod text;

use crate::artifacts::{Metric, Run};
use crate::sample::{quantile, sorted};
use canary_core::compare::{mann_whitney, shift, MetricShift, ShiftRules, Trend};
use serde::Serialize;

/// The percentiles compared for each latency metric.
const PERCENTILES: [(&str, f64); 3] = [("p50", 0.5), ("p90", 0.9), ("p99", 0.99)];

/// Two runs compared.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// Run A (the reference): its name and folder.
    pub a: Side,
    /// Run B (compared against A).
    pub b: Side,
    /// The thresholds of the rule, as the daemon's `[baseline]` defaults.
    pub rules: Rules,
    /// One row per headline figure.
    pub rows: Vec<Row>,
    /// Per latency metric, the distribution test behind its rows.
    pub shifts: Vec<(String, Option<MetricShift>)>,
    /// Run-context fields that differ: (field, A, B).
    pub context_diff: Vec<(String, String, String)>,
    #[serde(skip)]
    values: Vec<(Metric, Vec<f64>, Vec<f64>)>,
}

/// One side of a comparison.
#[derive(Debug, Clone, Serialize)]
pub struct Side {
    /// The run's id (or folder name).
    pub name: String,
    /// Its folder.
    pub dir: String,
    /// Requests measured.
    pub requests: u64,
}

/// The thresholds used (serializable copy of [`ShiftRules`]).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Rules {
    /// Significance level of the rank test.
    pub alpha: f64,
    /// Shift beyond k × MAD of run medians.
    pub k_mad: f64,
    /// … and this fraction of A's median.
    pub min_shift: f64,
    /// … and this many ms.
    pub min_shift_ms: f64,
}

/// One headline figure of both runs.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// What (`TTFT p99`, `error rate`).
    pub metric: String,
    /// Its unit (`ms`, `req/s`, `fraction`).
    pub unit: &'static str,
    /// A's value.
    pub a: Option<f64>,
    /// B's value.
    pub b: Option<f64>,
    /// B relative to A (`b / a − 1`), when both exist and A is not 0.
    pub change: Option<f64>,
    /// Whether the change is real.
    pub verdict: Verdict,
    /// Which way is better for this figure.
    pub higher_is_better: bool,
    /// 95 % confidence intervals of A and B, once runs are repeated (issue 18); always
    /// `None` until then.
    pub ci: Option<((f64, f64), (f64, f64))>,
}

/// Whether a row's change is real.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Verdict {
    /// Judged: the trend (B against A) and the test's p-value.
    Judged {
        /// `regressed`, `improved`, `steady`.
        trend: Trend,
        /// The rank test's two-sided p-value.
        p_value: f64,
        /// Why a change is not real: the test or the floor that held it back.
        why_not: Option<String>,
        /// How it was judged.
        how: String,
    },
    /// Not judged, and why.
    NotJudged {
        /// Why.
        why: String,
    },
}

impl Verdict {
    /// The trend, when judged.
    pub fn trend(&self) -> Option<Trend> {
        match self {
            Verdict::Judged { trend, .. } => Some(*trend),
            Verdict::NotJudged { .. } => None,
        }
    }
}

/// Compares run `b` against run `a` under `rules` (the daemon's defaults:
/// `ShiftRules::default()`).
pub fn compare(a: &Run, b: &Run, rules: &ShiftRules) -> Comparison {
    let mut rows = Vec::new();
    let mut shifts = Vec::new();
    let mut values = Vec::new();
    for m in Metric::ALL {
        let (va, vb) = (sorted(a.values(m)), sorted(b.values(m)));
        let s = shift(&vb, &[&va], rules);
        let verdict = match &s {
            Some(s) => Verdict::Judged {
                trend: s.trend,
                p_value: s.p_value,
                why_not: why_not(s, rules),
                how: format!(
                    "whole distribution: Mann-Whitney p {}, median shift {:+.1} % ({:+.1} MADs), \
                     rank-biserial {:+.2}",
                    p_text(s.p_value),
                    s.shift_ratio * 100.0,
                    s.shift_in_mads,
                    s.rank_biserial
                ),
            },
            None => Verdict::NotJudged {
                why: "no values on one side".into(),
            },
        };
        for (name, q) in PERCENTILES {
            let (pa, pb) = (quantile(&va, q), quantile(&vb, q));
            rows.push(row(
                format!("{} {name}", m.label()),
                "ms",
                pa,
                pb,
                verdict.clone(),
                false,
            ));
        }
        shifts.push((m.label().to_string(), s));
        values.push((m, va, vb));
    }
    let (fa, fb) = (a.figures(), b.figures());
    let one_figure = || Verdict::NotJudged {
        why: "one figure per run: needs repeated runs (confidence intervals, issue 18)".into(),
    };
    rows.push(row(
        "throughput".into(),
        "req/s",
        fa.request_throughput,
        fb.request_throughput,
        one_figure(),
        true,
    ));
    rows.push(row(
        "output tokens/s".into(),
        "tok/s",
        fa.output_token_throughput,
        fb.output_token_throughput,
        one_figure(),
        true,
    ));
    if let (Some(ga), Some(gb)) = (fa.goodput, fb.goodput) {
        let good = |r: &Run| outcomes(r, |q| q.good == Some(true));
        rows.push(row(
            "goodput".into(),
            "req/s",
            ga,
            gb,
            rate_verdict(&good(a), &good(b), rules, true),
            true,
        ));
    }
    let failed = |r: &Run| outcomes(r, |q| !q.ok);
    rows.push(row(
        "error rate".into(),
        "fraction",
        fa.error_rate,
        fb.error_rate,
        rate_verdict(&failed(a), &failed(b), rules, false),
        false,
    ));
    Comparison {
        a: side(a),
        b: side(b),
        rules: Rules {
            alpha: rules.alpha,
            k_mad: rules.k_mad,
            min_shift: rules.min_shift,
            min_shift_ms: rules.min_shift_ms,
        },
        rows,
        shifts,
        context_diff: context_diff(a, b),
        values,
    }
}

fn side(r: &Run) -> Side {
    Side {
        name: r.name().to_string(),
        dir: r.dir.display().to_string(),
        requests: r.figures().requests,
    }
}

fn row(metric: String, unit: &'static str, a: f64, b: f64, verdict: Verdict, hib: bool) -> Row {
    let fin = |v: f64| v.is_finite().then_some(v);
    let (a, b) = (fin(a), fin(b));
    Row {
        metric,
        unit,
        change: match (a, b) {
            (Some(a), Some(b)) if a != 0.0 => Some(b / a - 1.0),
            _ => None,
        },
        a,
        b,
        verdict,
        higher_is_better: hib,
        ci: None,
    }
}

/// Each measured request the target was sent (canaryd's own failures left out) as 1 when
/// `hit`, else 0.
fn outcomes(run: &Run, hit: impl Fn(&crate::artifacts::Request) -> bool) -> Vec<f64> {
    run.measured()
        .filter(|r| r.error_kind.as_deref() != Some("client_resources"))
        .map(|r| f64::from(u8::from(hit(r))))
        .collect()
}

/// A rate judged by the rank test on per-request 0/1 outcomes: real when p < alpha.
fn rate_verdict(a: &[f64], b: &[f64], rules: &ShiftRules, higher_is_better: bool) -> Verdict {
    if a.is_empty() || b.is_empty() {
        return Verdict::NotJudged {
            why: "no requests on one side".into(),
        };
    }
    let (_, p) = mann_whitney(b, a);
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let up = mean(b) > mean(a);
    let trend = if p >= rules.alpha || mean(b) == mean(a) {
        Trend::Steady
    } else if up == higher_is_better {
        Trend::Improved
    } else {
        Trend::Regressed
    };
    Verdict::Judged {
        trend,
        p_value: p,
        why_not: (trend == Trend::Steady).then(|| "not significant".to_string()),
        how: format!(
            "Mann-Whitney on each request's 0/1 outcome, p {}",
            p_text(p)
        ),
    }
}

/// For a steady latency metric, which part of the rule held the change back.
fn why_not(s: &MetricShift, rules: &ShiftRules) -> Option<String> {
    if s.trend != Trend::Steady {
        return None;
    }
    let delta = (s.median - s.baseline_median).abs();
    Some(if s.p_value >= rules.alpha {
        "not significant".into()
    } else if s.shift_ratio.abs() < rules.min_shift {
        format!(
            "median shift {:.1} % under {} %",
            s.shift_ratio.abs() * 100.0,
            rules.min_shift * 100.0
        )
    } else if delta < rules.min_shift_ms {
        format!("median shift {delta:.3} ms under {} ms", rules.min_shift_ms)
    } else {
        format!("median shift within {} MADs", rules.k_mad)
    })
}

fn p_text(p: f64) -> String {
    if p < 1e-4 {
        format!("{p:.1e}")
    } else {
        format!("{p:.4}")
    }
}

/// The `run` blocks' fields that differ: every difference, so a changed setting is never
/// hidden.
fn context_diff(a: &Run, b: &Run) -> Vec<(String, String, String)> {
    use crate::sections::context::flatten;
    let block = |r: &Run| {
        r.summary
            .as_ref()
            .and_then(|s| s.section("run"))
            .map(flatten)
            .unwrap_or_default()
    };
    let (fa, fb) = (block(a), block(b));
    let mut keys: Vec<&String> = fa.iter().chain(fb.iter()).map(|(k, _)| k).collect();
    keys.sort();
    keys.dedup();
    let get = |f: &[(String, String)], k: &str| {
        f.iter()
            .find(|(key, _)| key == k)
            .map_or("–".to_string(), |(_, v)| v.clone())
    };
    keys.into_iter()
        .map(|k| (k.clone(), get(&fa, k), get(&fb, k)))
        .filter(|(_, x, y)| x != y)
        .collect()
}

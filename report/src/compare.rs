//! `canaryd compare A B`: B against A, metric by metric. A side is one run's folder, or the
//! runs of a `--runs N` experiment ([`Experiment`]).
//!
//! * **One run per side.** The daemon's baseline rule decides whether a latency shift is real
//!   ([`canary_core::compare::shift`]: a Mann-Whitney U test on every request's value and a
//!   median shift beyond noise). The spread of run medians is unknown, so the rule's MAD term
//!   falls to its floor (0.1 % of A's median) and the relative (`min_shift`, 5 %) and
//!   absolute (`min_shift_ms`, 1 ms) floors decide with the rank test. That rule judges the
//!   p50 rows; a p90 or p99 row is judged on its own tail (Mood's quantile test, with the same
//!   floors on the percentile's move), so a slower tail under a steady median is seen. Rates
//!   (errors, the good fraction) are judged by the same rank test on each request's 0/1
//!   outcome. Throughputs and goodput are one figure per run and are not judged.
//! * **At least two runs per side.** Every row is a figure per run (a run's TTFT p99, its
//!   throughput), so every row, throughputs included, is judged by Welch's t-test on the two
//!   sets of run figures, p < [`RUNS_ALPHA`] (the level of the 95 % intervals shown beside
//!   each mean), with the same 5 % and 1 ms floors for a change to count. Each latency's whole
//!   distribution, pooled over the runs, is still judged by the baseline rule below the
//!   table, now with A's runs as its reference runs (their medians' MAD is known).
//! * **Several runs on one side only.** Latencies as with one run each (A's runs are the
//!   rule's reference runs when A is the repeated side); throughputs are not judged.

mod first_token;
mod page;
mod requests;
mod sweeps;
mod text;

pub use sweeps::{compare_sweeps, Sweep, SweepComparison};

use crate::artifacts::{Metric, Run};
use crate::sample::{quantile, sorted};
use crate::Experiment;
use canary_core::compare::{mann_whitney, shift, MetricShift, ShiftRules, Trend};
use canary_core::{MeanInterval, WelchTest};
use serde::Serialize;

/// The percentiles compared for each latency metric.
const PERCENTILES: [(&str, f64); 3] = [("p50", 0.5), ("p90", 0.9), ("p99", 0.99)];

/// Significance level of Welch's test on run figures: the 95 % intervals' own level.
pub const RUNS_ALPHA: f64 = 0.05;

/// Confidence level of the intervals shown beside repeated runs' means.
const CONFIDENCE: f64 = 0.95;

/// Two sides compared.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// Side A (the reference): its name and folder.
    pub a: Side,
    /// Side B (compared against A).
    pub b: Side,
    /// The thresholds of the rules.
    pub rules: Rules,
    /// One row per headline figure.
    pub rows: Vec<Row>,
    /// Per latency metric, the distribution test behind its rows (pooled over the runs).
    pub shifts: Vec<(String, Option<MetricShift>)>,
    /// Run-context fields that differ between A's first run and B's: (field, A, B).
    pub context_diff: Vec<(String, String, String)>,
    /// Set when the sides did not send the same requests (another trace, window, shard,
    /// load or seed), or a side does not say what it sent: said above the table, since every
    /// row then compares different work. `null` when they sent the same.
    pub different_requests: Option<requests::DifferentRequests>,
    /// Each side's diagnosis (issue 19), and whether the dominant bottleneck changed.
    pub diagnosis: DiagnosisChange,
    /// What was left out of either side's artifacts when read (records past the report's cap,
    /// a last line cut short), as each run's notes say it: the rows are over what was read.
    pub notes: Vec<String>,
    #[serde(skip)]
    values: Vec<(Metric, Vec<f64>, Vec<f64>)>,
}

/// The two sides' diagnoses: why each was slow, and whether that changed.
#[derive(Debug, Clone, Serialize)]
pub struct DiagnosisChange {
    /// A's runs' classes with their confidence (`queueing (high)`), one per run that has a
    /// readable diagnosis, in run order.
    pub a: Vec<String>,
    /// B's.
    pub b: Vec<String>,
    /// True when the classes B's runs were given are not the ones A's were (confidence
    /// aside); false when they are, or a side has none.
    pub changed: bool,
}

impl DiagnosisChange {
    fn of(a: &Experiment, b: &Experiment) -> DiagnosisChange {
        let read = |e: &Experiment| -> Vec<(String, String)> {
            e.runs
                .iter()
                .filter_map(|r| r.summary.as_ref()?.diagnosis()?.ok())
                .map(|d| (d.class, d.confidence))
                .collect()
        };
        let (da, db) = (read(a), read(b));
        let classes = |d: &[(String, String)]| -> Vec<String> {
            let mut c: Vec<String> = d.iter().map(|(class, _)| class.clone()).collect();
            c.sort_unstable();
            c.dedup();
            c
        };
        let shown = |d: &[(String, String)]| -> Vec<String> {
            d.iter().map(|(c, conf)| format!("{c} ({conf})")).collect()
        };
        DiagnosisChange {
            changed: !da.is_empty() && !db.is_empty() && classes(&da) != classes(&db),
            a: shown(&da),
            b: shown(&db),
        }
    }
}

/// One side of a comparison.
#[derive(Debug, Clone, Serialize)]
pub struct Side {
    /// The run's id, or the experiment folder's name.
    pub name: String,
    /// Its folder.
    pub dir: String,
    /// Requests measured, over all its runs.
    pub requests: u64,
    /// Its runs (1 for a run's folder).
    pub runs: u64,
    /// Of those, completed (the latency rows are over these alone).
    pub completed: u64,
    /// Runs a signal cut short (an experiment leaves them out; a single run is compared as
    /// it is, and said to be cut short).
    pub interrupted: u64,
    /// The experiment's runs left out of this side (not counted in `runs` or `requests`):
    /// errored (its summary's `left_out`) or cut short by a signal, as its own estimates
    /// leave them out. A note says so.
    pub left_out: Vec<crate::experiment::LeftOutRun>,
    /// Its first tokens, ends and token events by how their time was taken (summed over its
    /// runs' summaries; `first_tokens`, `ends`, `token_events` in JSON): `bound` of `of` are
    /// upper bounds, and TTFT, e2e or ITL is said to be one when any are.
    #[serde(flatten)]
    pub times: first_token::SideTimes,
}

/// The thresholds used (serializable copy of [`ShiftRules`], and the runs' test level).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Rules {
    /// Significance level of the rank test.
    pub alpha: f64,
    /// Shift beyond k × MAD of run medians.
    pub k_mad: f64,
    /// … and this fraction of A's median (of A's mean, for run figures).
    pub min_shift: f64,
    /// … and this many ms.
    pub min_shift_ms: f64,
    /// Significance level of Welch's test on run figures.
    pub runs_alpha: f64,
}

/// One headline figure of both sides.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// What (`TTFT p99`, `error rate`).
    pub metric: String,
    /// Its unit (`ms`, `req/s`, `fraction`).
    pub unit: &'static str,
    /// A's value (the mean of its runs' values when it has several).
    pub a: Option<f64>,
    /// B's value (likewise).
    pub b: Option<f64>,
    /// B relative to A (`b / a − 1`), when both exist and A is not 0.
    pub change: Option<f64>,
    /// Whether the change is real.
    pub verdict: Verdict,
    /// Which way is better for this figure.
    pub higher_is_better: bool,
    /// Each run's figure and each side's 95 % confidence interval of the mean (estimates),
    /// when both sides have several runs.
    pub runs: Option<RunFigures>,
}

/// A figure of every run of both sides.
#[derive(Debug, Clone, Serialize)]
pub struct RunFigures {
    /// A's runs' values, in run order; `None` (JSON `null`) for a run without a value of
    /// this figure (one that completed no request has no latency). The interval's `n`
    /// counts the runs that have one: it is over those only.
    pub a_values: Vec<Option<f64>>,
    /// B's.
    pub b_values: Vec<Option<f64>>,
    /// A's mean with its interval.
    pub a_interval: MeanInterval,
    /// B's.
    pub b_interval: MeanInterval,
}

/// Whether a row's change is real.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Verdict {
    /// Judged: the trend (B against A) and the test's p-value.
    Judged {
        /// `regressed`, `improved`, `steady`.
        trend: Trend,
        /// The test's two-sided p-value.
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

impl Comparison {
    /// True when both sides have several runs, so rows are judged on run figures.
    pub fn repeated(&self) -> bool {
        self.a.runs >= 2 && self.b.runs >= 2
    }
}

/// Compares side `b` against side `a` under `rules` (the daemon's defaults:
/// `ShiftRules::default()`).
pub fn compare(a: &Experiment, b: &Experiment, rules: &ShiftRules) -> Comparison {
    let repeated = a.runs.len() >= 2 && b.runs.len() >= 2;
    let mut rows = Vec::new();
    let mut shifts = Vec::new();
    let mut values = Vec::new();
    for m in Metric::ALL {
        let per_run = |e: &Experiment| -> Vec<Vec<f64>> {
            e.runs.iter().map(|r| sorted(r.values(m))).collect()
        };
        let (ra, rb) = (per_run(a), per_run(b));
        let pooled = |runs: &[Vec<f64>]| sorted(runs.concat());
        let (va, vb) = (pooled(&ra), pooled(&rb));
        let reference: Vec<&[f64]> = ra.iter().map(Vec::as_slice).collect();
        let s = shift(&vb, &reference, rules);
        let verdict = match &s {
            Some(s) => Verdict::Judged {
                trend: s.trend,
                p_value: s.p_value,
                why_not: why_not(s, rules),
                how: format!(
                    "whole distribution: Mann-Whitney p {}, median shift {} ({}), \
                     rank-biserial {:+.2}",
                    p_text(s.p_value),
                    median_shift_text(s),
                    mads_text(s),
                    s.rank_biserial
                ),
            },
            None => Verdict::NotJudged {
                why: "no values on one side".into(),
            },
        };
        for (name, q) in PERCENTILES {
            let at_q =
                |runs: &[Vec<f64>]| -> Vec<f64> { runs.iter().map(|v| quantile(v, q)).collect() };
            let label = format!("{} {name}", m.label());
            let (fa, fb) = (at_q(&ra), at_q(&rb));
            rows.push(if repeated {
                runs_row(label, "ms", &fa, &fb, false, rules)
            } else if q == 0.5 {
                row(label, "ms", mean(&fa), mean(&fb), verdict.clone(), false)
            } else {
                let tail = quantile_verdict(&va, &vb, name, q, rules);
                row(label, "ms", mean(&fa), mean(&fb), tail, false)
            });
        }
        shifts.push((m.label().to_string(), s));
        values.push((m, va, vb));
    }
    let figures =
        |e: &Experiment| -> Vec<crate::Figures> { e.runs.iter().map(Run::figures).collect() };
    let (fa, fb) = (figures(a), figures(b));
    let of =
        |f: &[crate::Figures], get: FigureOf| -> Vec<f64> { f.iter().filter_map(get).collect() };
    let throughputs: [(&str, &'static str, FigureOf); 2] = [
        ("throughput", "req/s", |f| f.request_throughput),
        ("output tokens/s", "tok/s", |f| f.output_token_throughput),
    ];
    for (label, unit, get) in throughputs {
        let (xa, xb) = (of(&fa, get), of(&fb, get));
        rows.push(if repeated {
            runs_row(label.into(), unit, &xa, &xb, true, rules)
        } else {
            let why = format!(
                "one figure per run: needs at least 2 runs per side (--runs N; A has {}, B has {})",
                a.runs.len(),
                b.runs.len()
            );
            row(
                label.into(),
                unit,
                mean(&xa),
                mean(&xb),
                Verdict::NotJudged { why },
                true,
            )
        });
    }
    let every_run_has_slos = fa.iter().chain(&fb).all(|f| f.slos);
    if every_run_has_slos {
        let (ga, gb) = (of(&fa, |f| f.goodput), of(&fb, |f| f.goodput));
        rows.push(if repeated {
            runs_row("goodput".into(), "req/s", &ga, &gb, true, rules)
        } else {
            // A rate, one figure per run, as throughput: its good fraction is judged below.
            let why = format!(
                "one figure per run: needs at least 2 runs per side (--runs N; A has {}, B has \
                 {}); the good fraction is judged on each request",
                a.runs.len(),
                b.runs.len()
            );
            row(
                "goodput".into(),
                "req/s",
                mean(&ga),
                mean(&gb),
                Verdict::NotJudged { why },
                true,
            )
        });
        let (fa_good, fb_good) = (
            of(&fa, |f| share_or_nan(f.good_fraction)),
            of(&fb, |f| share_or_nan(f.good_fraction)),
        );
        rows.push(if repeated {
            runs_row(
                "good fraction".into(),
                "fraction",
                &fa_good,
                &fb_good,
                true,
                rules,
            )
        } else {
            let good = |e: &Experiment| outcomes(e, |q| q.good == Some(true));
            let verdict = rate_verdict(&good(a), &good(b), rules, true);
            row(
                "good fraction".into(),
                "fraction",
                mean(&fa_good),
                mean(&fb_good),
                verdict,
                true,
            )
        });
    }
    let (ea, eb) = (
        of(&fa, |f| share_or_nan(f.error_rate)),
        of(&fb, |f| share_or_nan(f.error_rate)),
    );
    rows.push(if repeated {
        runs_row("error rate".into(), "fraction", &ea, &eb, false, rules)
    } else {
        let failed = |e: &Experiment| outcomes(e, |q| q.is_error());
        let verdict = rate_verdict(&failed(a), &failed(b), rules, false);
        row(
            "error rate".into(),
            "fraction",
            mean(&ea),
            mean(&eb),
            verdict,
            false,
        )
    });
    let (side_a, side_b) = (side(a), side(b));
    let notes = completion_note(&side_a, &side_b)
        .into_iter()
        .chain(left_out_note("A", &side_a))
        .chain(left_out_note("B", &side_b))
        .chain(
            a.runs
                .iter()
                .chain(&b.runs)
                .flat_map(|r| r.notes.iter().cloned()),
        )
        .collect();
    Comparison {
        a: side_a,
        b: side_b,
        rules: Rules {
            alpha: rules.alpha,
            k_mad: rules.k_mad,
            min_shift: rules.min_shift,
            min_shift_ms: rules.min_shift_ms,
            runs_alpha: RUNS_ALPHA,
        },
        rows,
        shifts,
        context_diff: context_diff(&a.runs[0], &b.runs[0]),
        different_requests: requests::different_requests(&a.runs[0], &b.runs[0]),
        diagnosis: DiagnosisChange::of(a, b),
        notes,
        values,
    }
}

/// The gap in completed shares past which the latency rows are said to be over different
/// requests: a point, so a stray timeout or two does not raise it.
const COMPLETION_GAP: f64 = 0.01;

/// When the sides completed different shares of their requests, the latency rows (over
/// completed requests only) compare different requests: a B whose slowest requests timed out
/// reads as faster. Said, with both shares (exact counts).
fn completion_note(a: &Side, b: &Side) -> Option<String> {
    let share = |s: &Side| (s.requests > 0).then(|| s.completed as f64 / s.requests as f64);
    let (sa, sb) = (share(a)?, share(b)?);
    ((sa - sb).abs() > COMPLETION_GAP).then(|| {
        let (fewer, more) = if sa < sb { ("A", "B") } else { ("B", "A") };
        format!(
            "the latency rows are over completed requests only, and the sides completed \
             different shares (A {:.1} %, {} of {}; B {:.1} %, {} of {}): {fewer}'s figures \
             leave out more of its requests than {more}'s, and the ones that failed or timed \
             out are often the slowest, so {fewer} may read faster than it was",
            sa * 100.0,
            a.completed,
            a.requests,
            sb * 100.0,
            b.completed,
            b.requests
        )
    })
}

/// When an experiment's side leaves runs out (an errored run, one cut short), every row of
/// that side is over its other runs: an error rate over the runs that worked is not the
/// experiment's. Said, naming each run and why.
fn left_out_note(which: &str, s: &Side) -> Option<String> {
    if s.left_out.is_empty() {
        return None;
    }
    let n = s.left_out.len();
    let named: Vec<String> = s
        .left_out
        .iter()
        .map(|l| format!("{} ({})", l.dir, l.why))
        .collect();
    Some(format!(
        "{which} leaves out {n} of its {} runs, as its own estimates do, so every {which} \
         figure (the error rate too) is over the other {} and none of {}: {}",
        s.runs + n as u64,
        s.runs,
        if n == 1 {
            "that run's requests"
        } else {
            "those runs' requests"
        },
        named.join("; ")
    ))
}

/// Reads one figure of a run's [`crate::Figures`].
type FigureOf = fn(&crate::Figures) -> Option<f64>;

/// A run's share, or NaN when it judged no request (summary.json's null), as a run without a
/// percentile: its side's figure is over the runs that have one and says how many.
fn share_or_nan(v: Option<f64>) -> Option<f64> {
    Some(v.unwrap_or(f64::NAN))
}

fn side(e: &Experiment) -> Side {
    let cut_short = |r: &&Run| {
        r.summary
            .as_ref()
            .and_then(|s| s.doc.get("interrupted"))
            .and_then(serde_json::Value::as_bool)
            == Some(true)
    };
    Side {
        name: e.name.clone(),
        dir: e.dir.display().to_string(),
        requests: e.requests(),
        runs: e.runs.len() as u64,
        completed: e.runs.iter().map(|r| r.figures().completed).sum(),
        interrupted: e.runs.iter().filter(cut_short).count() as u64,
        left_out: e.left_out.clone(),
        times: first_token::SideTimes::of(&e.runs),
    }
}

/// The mean of finite values; NaN for none.
fn mean(v: &[f64]) -> f64 {
    let xs: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    xs.iter().sum::<f64>() / xs.len() as f64
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
        runs: None,
    }
}

/// A row of run figures (`fa`, `fb`: one per run), judged by Welch's t-test, with each side's
/// interval.
fn runs_row(
    metric: String,
    unit: &'static str,
    fa: &[f64],
    fb: &[f64],
    higher_is_better: bool,
    rules: &ShiftRules,
) -> Row {
    let verdict = runs_verdict(fa, fb, unit, higher_is_better, rules);
    let mut r = row(metric, unit, mean(fa), mean(fb), verdict, higher_is_better);
    if let (Some(ia), Some(ib)) = (
        MeanInterval::of(fa, CONFIDENCE),
        MeanInterval::of(fb, CONFIDENCE),
    ) {
        let values = |f: &[f64]| f.iter().map(|v| v.is_finite().then_some(*v)).collect();
        r.runs = Some(RunFigures {
            a_values: values(fa),
            b_values: values(fb),
            a_interval: ia,
            b_interval: ib,
        });
    }
    r
}

/// Welch's t-test on the runs' figures: real when p < [`RUNS_ALPHA`] and the change of the
/// means passes the rule's floors (5 % of A's mean, and 1 ms for a latency; a fraction has
/// no floor, as the per-request rank test on it has none).
fn runs_verdict(
    fa: &[f64],
    fb: &[f64],
    unit: &str,
    higher_is_better: bool,
    rules: &ShiftRules,
) -> Verdict {
    let Some(w) = WelchTest::of(fa, fb) else {
        return Verdict::NotJudged {
            why: "fewer than 2 runs with this figure on one side".into(),
        };
    };
    let finite = |f: &[f64]| f.iter().filter(|x| x.is_finite()).count();
    let (na, nb) = (finite(fa), finite(fb));
    // Each side's figures all one value (compared as values: the float mean of three 0.99s
    // is not 0.99, so a variance came out 1e-32 and p about 0).
    let flat = |f: &[f64]| {
        let mut v = f.iter().filter(|x| x.is_finite());
        let first = v.next();
        v.all(|x| Some(x) == first)
    };
    if flat(fa) && flat(fb) && mean(fa) != mean(fb) {
        // Neither side's runs vary: there is no spread to judge a difference against (three
        // runs with one error each are not certain evidence against three with none).
        return Verdict::NotJudged {
            why: format!(
                "the runs' figures do not vary on either side ({na} and {nb} runs): no spread \
                 to test against"
            ),
        };
    }
    let (ma, mb) = (mean(fa), mean(fb));
    let delta = mb - ma;
    let ratio = if ma != 0.0 { delta / ma } else { f64::INFINITY };
    let why_not = if w.p_value >= RUNS_ALPHA || delta == 0.0 {
        Some("not significant".to_string())
    } else {
        let relative = (unit != "fraction").then_some(ratio);
        under_floors("change", relative, (unit == "ms").then_some(delta), rules)
    };
    let trend = match why_not {
        Some(_) => Trend::Steady,
        None if (delta > 0.0) == higher_is_better => Trend::Improved,
        None => Trend::Regressed,
    };
    Verdict::Judged {
        trend,
        p_value: w.p_value,
        why_not,
        how: format!(
            "Welch's t-test on the runs' figures ({na} and {nb} runs): t {:+.2}, {:.1} df, p {}",
            w.t,
            w.df,
            p_text(w.p_value)
        ),
    }
}

/// Which of the rule's floors holds a change (`what`) back: under `min_shift` of A's figure
/// (`ratio`, when the relative floor applies), or under `min_shift_ms` (`delta_ms`, for a
/// latency); `None` when it passes both.
fn under_floors(
    what: &str,
    ratio: Option<f64>,
    delta_ms: Option<f64>,
    rules: &ShiftRules,
) -> Option<String> {
    if let Some(r) = ratio.filter(|r| r.abs() < rules.min_shift) {
        return Some(format!(
            "{what} {:.1} % under {} %",
            r.abs() * 100.0,
            rules.min_shift * 100.0
        ));
    }
    delta_ms
        .filter(|d| d.abs() < rules.min_shift_ms)
        .map(|d| format!("{what} {:.3} ms under {} ms", d.abs(), rules.min_shift_ms))
}

/// Values each side needs beyond a percentile, and within it, for [`quantile_verdict`]'s
/// normal approximation to hold.
const QUANTILE_TEST_MIN_CELL: f64 = 5.0;

/// A tail percentile (`q`, named `name`) judged on its own, not by the median's rule: Mood's
/// quantile test. Both sides' values (`a`, `b`, sorted) are pooled, and the fractions of each
/// side above the pooled percentile compared by a two-proportion z-test. Real when p < alpha
/// and the percentile moved past the rule's floors (5 % of A's, 1 ms). Not judged when a side
/// expects fewer than 5 values beyond it (a p99 needs about 500 requests a side).
fn quantile_verdict(a: &[f64], b: &[f64], name: &str, q: f64, rules: &ShiftRules) -> Verdict {
    let (na, nb) = (a.len() as f64, b.len() as f64);
    let pooled = sorted([a, b].concat());
    let cut = quantile(&pooled, q);
    // Values tied at the cut go to whichever side of it leaves the pooled share beyond it
    // nearest 1 − q, among the splits the test can use (ties are rare at 1 µs, but a plateau
    // must not hide a tail).
    let beyond = |v: &[f64], with_ties: bool| {
        let within = v.partition_point(|x| if with_ties { *x < cut } else { *x <= cut });
        (v.len() - within) as f64
    };
    let split = |with_ties: bool| {
        let (ka, kb) = (beyond(a, with_ties), beyond(b, with_ties));
        let p = (ka + kb) / (na + nb);
        let cells = [na * p, na * (1.0 - p), nb * p, nb * (1.0 - p)];
        let usable = cells.iter().all(|c| *c >= QUANTILE_TEST_MIN_CELL);
        (usable, (p - (1.0 - q)).abs(), with_ties, ka, kb, p)
    };
    let best = [split(false), split(true)]
        .into_iter()
        .filter(|s| s.0)
        .min_by(|x, y| x.1.total_cmp(&y.1));
    let (true, Some((_, _, with_ties, ka, kb, p))) = (cut.is_finite(), best) else {
        return Verdict::NotJudged {
            why: format!(
                "too few requests for a {name} test (about {:.0} a side; A has {na}, B has \
                 {nb})",
                (QUANTILE_TEST_MIN_CELL / (1.0 - q)).round()
            ),
        };
    };
    let se = (p * (1.0 - p) * (1.0 / na + 1.0 / nb)).sqrt();
    let z = (kb / nb - ka / na) / se;
    let p_value = canary_core::compare::erfc(z.abs() / std::f64::consts::SQRT_2).min(1.0);
    let (qa, qb) = (quantile(a, q), quantile(b, q));
    let delta = qb - qa;
    let ratio = if qa != 0.0 { delta / qa } else { f64::INFINITY };
    let why_not = if p_value >= rules.alpha {
        Some("not significant".to_string())
    } else if delta == 0.0 || (delta > 0.0) != (z > 0.0) {
        Some(format!("the {name} itself did not move that way"))
    } else {
        under_floors(&format!("{name} shift"), Some(ratio), Some(delta), rules)
    };
    let trend = match why_not {
        Some(_) => Trend::Steady,
        None if delta > 0.0 => Trend::Regressed,
        None => Trend::Improved,
    };
    Verdict::Judged {
        trend,
        p_value,
        why_not,
        how: format!(
            "Mood's quantile test: {:.2} % of A and {:.2} % of B {} the pooled {name} \
             ({cut:.3} ms), p {}",
            ka / na * 100.0,
            kb / nb * 100.0,
            if with_ties { "at or above" } else { "above" },
            p_text(p_value)
        ),
    }
}

/// Each measured request of every run that the target was sent and answered for (canaryd's
/// own failures and its cancels left out) as 1 when `hit`, else 0.
fn outcomes(e: &Experiment, hit: impl Fn(&crate::artifacts::Request) -> bool) -> Vec<f64> {
    e.runs
        .iter()
        .flat_map(Run::measured)
        .filter(|r| r.error_kind.as_deref() != Some("client_resources") && !r.cancelled)
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
    } else if let Some(r) = s.shift_ratio.filter(|r| r.abs() < rules.min_shift) {
        format!(
            "median shift {:.1} % under {} %",
            r.abs() * 100.0,
            rules.min_shift * 100.0
        )
    } else if delta < rules.min_shift_ms {
        format!("median shift {delta:.3} ms under {} ms", rules.min_shift_ms)
    } else {
        format!("median shift within {} MADs", rules.k_mad)
    })
}

/// A median's move as a percentage of A's, or, from a zero median (which no percentage
/// measures), the move itself: `+12.3 %`, `from 0 ms (+8.560 ms)`.
fn median_shift_text(s: &MetricShift) -> String {
    match s.shift_ratio {
        Some(r) => format!("{:+.1} %", r * 100.0),
        None => format!(
            "from {} ms ({:+.3} ms)",
            s.baseline_median,
            s.median - s.baseline_median
        ),
    }
}

/// The median shift in MADs of the reference runs' medians, or why there is no such figure.
fn mads_text(s: &MetricShift) -> String {
    match s.shift_in_mads {
        Some(m) => format!("{m:+.1} MADs"),
        None => "no MADs: the reference medians do not spread and their median is 0".into(),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_without_a_value_is_null_in_its_row_and_the_interval_says_over_how_many() {
        // A's second run completed nothing, so it has no TTFT percentile (NaN from `quantile`).
        let rules = ShiftRules::default();
        let r = runs_row(
            "TTFT p50".into(),
            "ms",
            &[10.0, f64::NAN, 11.0],
            &[20.0, 21.0, 22.0],
            false,
            &rules,
        );
        let f = r.runs.as_ref().expect("run figures");
        assert_eq!(f.a_values, [Some(10.0), None, Some(11.0)]);
        assert_eq!((f.a_interval.n, f.b_interval.n), (2, 3));
        assert_eq!(r.a, Some(10.5));
        let json = serde_json::to_value(f).unwrap();
        assert_eq!(json["a_values"], serde_json::json!([10.0, null, 11.0]));
        let shown = text::value_with_interval(&r, r.a, text::Side::A);
        assert!(shown.ends_with(" (2 of 3 runs)"), "{shown}");
        let shown = text::value_with_interval(&r, r.b, text::Side::B);
        assert!(!shown.contains("runs)"), "{shown}");
    }

    /// A ± that would reach below 0 (TTFT p99 of 0.5, 0.6 and 8.5 ms: 3.2 ± 11.4) is shown
    /// by its ends, clipped at 0, as the `--runs` table and the report show it.
    #[test]
    fn an_interval_below_zero_is_shown_clipped() {
        let rules = ShiftRules::default();
        let r = runs_row(
            "TTFT p99".into(),
            "ms",
            &[0.5, 0.6, 8.5],
            &[20.0, 21.0, 22.0],
            false,
            &rules,
        );
        let shown = text::value_with_interval(&r, r.a, text::Side::A);
        assert!(
            shown.contains("(95 % CI 0 ms to ") && shown.ends_with(", clipped)"),
            "{shown}"
        );
        assert!(!shown.contains('±'), "{shown}");
        let shown = text::value_with_interval(&r, r.b, text::Side::B);
        assert!(shown.contains(" ± "), "{shown}");
    }

    #[test]
    fn sides_that_completed_different_shares_are_said_to_compare_different_requests() {
        let side = |requests, completed| Side {
            name: "x".into(),
            dir: "x".into(),
            requests,
            runs: 1,
            completed,
            interrupted: 0,
            left_out: Vec::new(),
            times: Default::default(),
        };
        // B lost a fifth of its requests (its slowest, say): its latencies are not A's peers.
        let note = completion_note(&side(1000, 1000), &side(1000, 800)).expect("a note");
        assert!(
            note.contains("(A 100.0 %, 1000 of 1000; B 80.0 %, 800 of 1000)")
                && note.contains("B's figures leave out more of its requests than A's")
                && note.contains("so B may read faster"),
            "{note}"
        );
        let note = completion_note(&side(500, 450), &side(1000, 1000)).expect("a note");
        assert!(note.contains("so A may read faster"), "{note}");
        // A stray timeout is not a different set of requests.
        assert_eq!(completion_note(&side(1000, 1000), &side(1000, 995)), None);
        assert_eq!(completion_note(&side(0, 0), &side(10, 5)), None);
    }

    #[test]
    fn a_median_that_moved_from_zero_is_shown_as_the_move_not_as_zero_percent() {
        let rules = ShiftRules::default();
        let (zero, eight) = (vec![0.0; 400], vec![8.56; 400]);
        let s = shift(&eight, &[&zero], &rules).unwrap();
        assert_eq!(median_shift_text(&s), "from 0 ms (+8.560 ms)");
        assert_eq!((s.trend, why_not(&s, &rules)), (Trend::Regressed, None));
        let s = shift(&[11.0; 10], &[&[10.0; 10]], &rules).unwrap();
        assert_eq!(median_shift_text(&s), "+10.0 %");
    }

    /// Writes a `--runs` experiment at `at`: one run folder per value (two requests each),
    /// and `left`, listed in its summary as left out with why.
    fn experiment(at: &std::path::Path, values: &[f64], left: Option<(&str, &str)>) {
        let mut per_run = Vec::new();
        for (i, v) in values.iter().enumerate() {
            let dir = at.join(format!("run-{}", i + 1));
            std::fs::create_dir_all(&dir).unwrap();
            let line = |t: usize| {
                format!(
                    "{{\"sent_at_ms\":{t},\"ended_at_ms\":{},\"status\":\"ok\",\"ttft_ms\":{v},\
                     \"e2e_ms\":{v}}}\n",
                    t as f64 + v
                )
            };
            std::fs::write(dir.join("records.jsonl"), line(0) + &line(1)).unwrap();
            per_run.push(serde_json::json!({"dir": format!("run-{}", i + 1)}));
        }
        if let Some((dir, why)) = left {
            per_run.push(serde_json::json!({"dir": dir, "left_out": why}));
        }
        let summary = serde_json::json!({"schema_version": 1, "repeats": {"per_run": per_run}});
        std::fs::write(at.join("summary.json"), summary.to_string()).unwrap();
    }

    #[test]
    fn an_experiments_left_out_runs_are_counted_and_named() {
        let tmp = tempfile::tempdir().unwrap();
        let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
        experiment(&a, &[10.0, 11.0, 12.0], None);
        experiment(&b, &[10.0, 11.0], Some(("run-3", "error: target unusable")));
        let (ea, eb) = (Experiment::load(&a).unwrap(), Experiment::load(&b).unwrap());
        let c = compare(&ea, &eb, &ShiftRules::default());
        let note = c
            .notes
            .iter()
            .find(|n| n.starts_with("B leaves out"))
            .unwrap_or_else(|| panic!("no note: {:?}", c.notes));
        assert!(
            note.contains("B leaves out 1 of its 3 runs")
                && note.contains("over the other 2")
                && note.ends_with(": run-3 (error: target unusable)"),
            "{note}"
        );
        assert!(!c.notes.iter().any(|n| n.starts_with("A leaves out")));
        let json = serde_json::to_value(&c).unwrap();
        assert_eq!(
            json["b"]["left_out"],
            serde_json::json!([{"dir": "run-3", "why": "error: target unusable"}])
        );
        assert_eq!(json["a"]["left_out"], serde_json::json!([]));
        let text = c.to_text();
        assert!(text.contains("1 more left out: run-3)"), "{text}");
        assert!(
            text.contains("note: B leaves out 1 of its 3 runs"),
            "{text}"
        );
    }

    fn trend_of(v: &Verdict) -> Option<Trend> {
        v.trend()
    }

    #[test]
    fn a_tail_percentile_is_judged_on_its_tail_not_on_the_median() {
        let rules = ShiftRules::default();
        let repeat = |v: f64, n: usize| vec![v; n];
        // A's tail is slow (2 % at 500 ms), B's is not, while B's median is 20 % slower.
        let a = sorted([repeat(10.0, 980), repeat(500.0, 20)].concat());
        let b = repeat(12.0, 1000);
        let tail = quantile_verdict(&a, &b, "p99", 0.99, &rules);
        assert_eq!(trend_of(&tail), Some(Trend::Improved), "{tail:?}");
        // A steady median over a tail 200 times slower: the p99 row says so.
        let a = repeat(10.0, 1000);
        let b = sorted([repeat(10.0, 970), repeat(2000.0, 30)].concat());
        let tail = quantile_verdict(&a, &b, "p99", 0.99, &rules);
        assert_eq!(trend_of(&tail), Some(Trend::Regressed), "{tail:?}");
        // The same values on both sides: nothing real.
        let same = quantile_verdict(&b, &b, "p99", 0.99, &rules);
        assert_eq!(trend_of(&same), Some(Trend::Steady), "{same:?}");
        // 100 requests a side cannot bound a p99 (all 100 fall under it 37 % of the time).
        let few = quantile_verdict(&a[..100], &b[..100], "p99", 0.99, &rules);
        match few {
            Verdict::NotJudged { why } => assert!(why.contains("about 500 a side"), "{why}"),
            judged => panic!("{judged:?}"),
        }
    }

    #[test]
    fn runs_that_do_not_vary_are_not_certain_evidence() {
        let rules = ShiftRules::default();
        // One error in 100 in each of B's three runs, none in A's: no spread, no verdict.
        for (a, b) in [(0.0, 0.01), (1.0, 0.99), (0.9, 0.95)] {
            match runs_verdict(&[a; 3], &[b; 3], "fraction", false, &rules) {
                Verdict::NotJudged { why } => assert!(why.contains("do not vary"), "{why}"),
                judged => panic!("{a} against {b}: {judged:?}"),
            }
        }
        // The test's run counts are those with a value.
        let v = runs_verdict(&[1.0, f64::NAN, 1.2], &[2.0, 2.2, 2.1], "ms", false, &rules);
        match v {
            Verdict::Judged { how, .. } => assert!(how.contains("(2 and 3 runs)"), "{how}"),
            other => panic!("{other:?}"),
        }
    }
}

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
//!   outcome. Throughputs and goodput are one figure per run and are not judged. These tests
//!   are over requests and take them as independent, but requests of one run share its
//!   batches and its moment on the server: two runs of one setup differ by more than such a
//!   p-value allows (a TTFT median 25 % apart at p 3e-6, audit F10). So with one run a side
//!   a difference they find is [`Verdict::Unconfirmed`] ([`Caveat::OneRun`]), never `yes`.
//! * **At least two runs per side.** Every row is a figure per run (a run's TTFT p99, its
//!   throughput), so every row, throughputs included, is judged by Welch's t-test on the two
//!   sets of run figures, p < [`RUNS_ALPHA`] (the level of the 95 % intervals shown beside
//!   each mean), with the same 5 % and 1 ms floors for a change to count. Each latency's whole
//!   distribution, pooled over the runs, is still judged by the baseline rule below the
//!   table, now with A's runs as its reference runs (their medians' MAD is known).
//! * **Several runs on one side only.** Latencies as with one run each (A's runs are the
//!   rule's reference runs when A is the repeated side, and from
//!   [`canary_core::compare::SPREAD_MIN_RUNS`] (3) of them the p50's MAD term is measured, so
//!   its verdict stands; against 2 it is half their one difference, so the p50 reads
//!   `unconfirmed` with `reference is 2 runs`; the tails and rates stay unconfirmed);
//!   throughputs are not judged. The pooled distribution lines of repeated sides follow the
//!   same rule; the rows of repeated sides do not: Welch's t-test weighs 2 runs' spread by its
//!   own few degrees of freedom.
//!
//! When the sides did not send the same requests (another trace, selection, load or seed), a
//! difference may be the workload's: every row's `yes` is [`Verdict::Unconfirmed`]
//! ([`Caveat::DifferentRequests`]) too.

mod bounds;
mod context;
mod diagnosis;
mod first_token;
mod page;
mod requests;
mod row;
mod side;
mod slos;
mod sweeps;
mod text;
mod verdict;

pub use diagnosis::DiagnosisChange;
pub use row::Row;
pub use side::Side;
pub use slos::DifferentSlos;
pub use sweeps::{compare_sweeps, Sweep, SweepComparison};
pub use verdict::{Caveat, Verdict};

use crate::artifacts::{Metric, Run};
use crate::sample::{quantile, sorted};
use crate::Experiment;
use canary_core::compare::{shift, MetricShift, ShiftRules};
use row::{mean, row, runs_row};
use serde::Serialize;
use verdict::{
    mads_text, median_shift_text, outcomes, p_text, quantile_verdict, rate_verdict, why_not,
};

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
    /// Set when the sides judged their requests against different SLOs (or a side's runs
    /// against several): goodput and the good fraction are shown, `not_comparable`.
    pub different_slos: Option<DifferentSlos>,
    /// Set when some request of a side was judged good or not on a bound that could turn it
    /// (summary.json's `uncertain_misses`, `uncertain_meets`): the goodput rows rest on
    /// bounds (`(bound)`, and a difference is `unconfirmed`). `null` when every judgement
    /// was exact.
    pub goodput_on_bounds: Option<String>,
    /// Each side's diagnosis (issue 19), and whether the dominant bottleneck changed.
    pub diagnosis: DiagnosisChange,
    /// What was left out of either side's artifacts when read (records past the report's cap,
    /// a last line cut short), as each run's notes say it: the rows are over what was read.
    pub notes: Vec<String>,
    #[serde(skip)]
    values: Vec<(Metric, Vec<f64>, Vec<f64>)>,
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
    let different_requests = requests::different_requests(&a.runs[0], &b.runs[0]);
    // What a test's `yes` cannot be told from: a per-request test with a side of one run
    // (`per_request`), and requests that differ (known to: a side that does not say what it
    // sent is noted above the table, not taken as different).
    let one = verdict::one_run_said(a.runs.len() as u64, b.runs.len() as u64);
    let caveats = |per_request: bool| -> Vec<Caveat> {
        let mut c = Vec::new();
        if per_request {
            c.push(Caveat::OneRun);
        }
        if different_requests
            .as_ref()
            .is_some_and(|d| !d.fields.is_empty())
        {
            c.push(Caveat::DifferentRequests);
        }
        c
    };
    let mut rows = Vec::new();
    let mut shifts = Vec::new();
    let mut values = Vec::new();
    let mut without_latencies = Vec::new();
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
            let mut r = if repeated {
                runs_row(label, "ms", &fa, &fb, false, rules)
            } else if q == 0.5 {
                row(label, "ms", mean(&fa), mean(&fb), verdict.clone(), false)
            } else {
                let tail = quantile_verdict(&va, &vb, name, q, rules);
                row(label, "ms", mean(&fa), mean(&fb), tail, false)
            };
            // The p50's rule measured run-to-run spread when A has at least
            // SPREAD_MIN_RUNS runs (its MAD term); a tail's test never does. A p50 against 2
            // runs of A says so: their MAD is half their one difference.
            let per_request = match (repeated, &s) {
                (true, _) => false,
                (false, Some(s)) if q == 0.5 => !s.spread_measured(),
                (false, _) => true,
            };
            let thin = match (&s, q == 0.5) {
                (Some(s), true) => s.reference_runs.filter(|&n| n >= 2),
                _ => None,
            };
            let words = thin.map(|n| format!("reference is {n} runs"));
            r.verdict = r
                .verdict
                .unless(&caveats(per_request), words.as_deref().unwrap_or(one));
            rows.push(r);
        }
        // A run without the metric's values has none of its percentiles: one note for the
        // three rows, as the rates' below.
        for (which, e, runs) in [("A", a, &ra), ("B", b, &rb)] {
            let why = format!("no {} among its completed requests", m.label());
            let lacks = |i: usize| runs[i].is_empty().then(|| why.clone());
            let label = format!("{} p50, p90 and p99", m.label());
            without_latencies.extend(runs_without(which, &label, e, lacks));
        }
        shifts.push((m.label().to_string(), s));
        values.push((m, va, vb));
    }
    let figures =
        |e: &Experiment| -> Vec<crate::Figures> { e.runs.iter().map(Run::figures).collect() };
    let (fa, fb) = (figures(a), figures(b));
    let of =
        |f: &[crate::Figures], get: FigureOf| -> Vec<f64> { f.iter().filter_map(get).collect() };
    // A run without a rate (too short for one) keeps its place as NaN, so the row says over
    // how many runs its mean is, and a note names it with why, as the experiment's own table.
    let rate_of = |f: &[crate::Figures], get: FigureOf| -> Vec<f64> {
        f.iter().map(|x| get(x).unwrap_or(f64::NAN)).collect()
    };
    // Every row kind says which runs lack its figure, in the row order.
    let mut without = without_latencies;
    let mut say_without = |label: &str, get: FigureOf, why: fn(&crate::Figures) -> String| {
        for (which, e, f) in [("A", a, &fa), ("B", b, &fb)] {
            let lacks = |i: usize| get(&f[i]).is_none().then(|| why(&f[i]));
            without.extend(runs_without(which, label, e, lacks));
        }
    };
    let throughputs: [(&str, &'static str, FigureOf); 2] = [
        ("throughput", "req/s", |f| f.request_throughput),
        ("output tokens/s", "tok/s", |f| f.output_token_throughput),
    ];
    for (label, unit, get) in throughputs {
        let (xa, xb) = (rate_of(&fa, get), rate_of(&fb, get));
        say_without(label, get, no_rate);
        rows.push(if repeated {
            let mut r = runs_row(label.into(), unit, &xa, &xb, true, rules);
            r.verdict = r.verdict.unless(&caveats(false), one);
            r
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
    let different_slos = slos::different(a, b);
    let goodput_on_bounds = slos::on_bounds(&fa, &fb);
    let rows_before_goodput = rows.len();
    if every_run_has_slos {
        let (ga, gb) = (rate_of(&fa, |f| f.goodput), rate_of(&fb, |f| f.goodput));
        say_without("goodput", |f| f.goodput, no_rate);
        rows.push(if repeated {
            let mut r = runs_row("goodput".into(), "req/s", &ga, &gb, true, rules);
            r.verdict = r.verdict.unless(&caveats(false), one);
            r
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
        say_without("good fraction", |f| f.good_fraction, judged_none);
        rows.push(if repeated {
            let mut r = runs_row(
                "good fraction".into(),
                "fraction",
                &fa_good,
                &fb_good,
                true,
                rules,
            );
            r.verdict = r.verdict.unless(&caveats(false), one);
            r
        } else {
            let good = |e: &Experiment| outcomes(e, |q| q.good == Some(true));
            let verdict = rate_verdict(&good(a), &good(b), rules, true).unless(&caveats(true), one);
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
    for r in &mut rows[rows_before_goodput..] {
        r.verdict = match (&different_slos, &goodput_on_bounds) {
            (Some(d), _) => Verdict::NotComparable { why: d.why.clone() },
            (None, Some(words)) => r.verdict.clone().on_bounds(words),
            (None, None) => continue,
        };
    }
    let (ea, eb) = (
        of(&fa, |f| share_or_nan(f.error_rate)),
        of(&fb, |f| share_or_nan(f.error_rate)),
    );
    say_without("error rate", |f| f.error_rate, judged_none);
    rows.push(if repeated {
        let mut r = runs_row("error rate".into(), "fraction", &ea, &eb, false, rules);
        r.verdict = r.verdict.unless(&caveats(false), one);
        r
    } else {
        let failed = |e: &Experiment| outcomes(e, |q| q.is_error());
        let verdict =
            rate_verdict(&failed(a), &failed(b), rules, false).unless(&caveats(true), one);
        row(
            "error rate".into(),
            "fraction",
            mean(&ea),
            mean(&eb),
            verdict,
            false,
        )
    });
    let (side_a, side_b) = (Side::of(a), Side::of(b));
    let notes = side::completion_note(&side_a, &side_b)
        .into_iter()
        .chain(side::left_out_note("A", &side_a))
        .chain(side::left_out_note("B", &side_b))
        .chain(without)
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
        context_diff: context::context_diff(&a.runs[0], &b.runs[0]),
        different_requests,
        different_slos: every_run_has_slos.then_some(different_slos).flatten(),
        goodput_on_bounds: every_run_has_slos.then_some(goodput_on_bounds).flatten(),
        diagnosis: DiagnosisChange::of(a, b),
        notes,
        values,
    }
}

/// Reads one figure of a run's [`crate::Figures`].
type FigureOf = fn(&crate::Figures) -> Option<f64>;

/// Why a run has no rate: its `rate_unavailable` (too short for one).
fn no_rate(f: &crate::Figures) -> String {
    f.rate_unavailable
        .clone()
        .unwrap_or_else(|| "no rate".into())
}

/// Why a run has no share (error rate, good fraction): it judged no request.
fn judged_none(_: &crate::Figures) -> String {
    "it judged no request: every one cancelled on purpose or failed by canaryd itself".into()
}

/// `A's throughput: over 1 of 2 runs; without a figure: run-2 (…)`, or `… no figure: none of
/// the 2 runs gave one: …`, when some of the runs of side `which` (`e`) lack the figure of
/// the rows `label`: `lacks(i)` is why run `i` has none, `None` when it has one. `None` when
/// every run has one, or the side is one run (its row's `–` says it). One wording for every
/// row kind: latency percentiles, rates, shares.
fn runs_without(
    which: &str,
    label: &str,
    e: &Experiment,
    lacks: impl Fn(usize) -> Option<String>,
) -> Option<String> {
    if e.runs.len() < 2 {
        return None;
    }
    let whys: Vec<(usize, String)> = (0..e.runs.len())
        .filter_map(|i| Some((i, lacks(i)?)))
        .collect();
    let without: Vec<(&str, &str)> = whys
        .iter()
        .map(|(i, why)| {
            let r = &e.runs[*i];
            let dir = r.dir.file_name().and_then(|d| d.to_str());
            (dir.unwrap_or(&r.label), why.as_str())
        })
        .collect();
    let with = (e.runs.len() - without.len()) as u64;
    let said = match (without.is_empty(), with) {
        (true, _) => return None,
        (false, 0) => canary_core::runs_without::none_gave(&without),
        (false, n) => canary_core::runs_without::over_some(n, &without),
    };
    Some(format!("{which}'s {label}: {said}"))
}

/// A run's share, or NaN when it judged no request (summary.json's null), as a run without a
/// percentile: its side's figure is over the runs that have one and says how many.
fn share_or_nan(v: Option<f64>) -> Option<f64> {
    Some(v.unwrap_or(f64::NAN))
}

#[cfg(test)]
mod tests {
    use super::*;

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
}

//! The comparison as a terminal table.

use super::{Comparison, Row, Verdict};
use crate::sections::num;
use canary_core::compare::{Trend, SPREAD_MIN_RUNS};

impl Comparison {
    /// The comparison as aligned text for a terminal.
    pub fn to_text(&self) -> String {
        let mut out = format!("A: {}\nB: {}\n\n", side(&self.a), side(&self.b));
        if let Some(d) = &self.different_requests {
            out.push_str(&format!("{}\n\n", d.note));
        }
        if let Some(d) = &self.different_slos {
            out.push_str(&format!("{}\n\n", super::slos::note(d)));
        }
        let cells: Vec<[String; 5]> = self
            .rows
            .iter()
            .map(|r| {
                [
                    self.metric_shown(r),
                    value_with_interval(r, r.a, Side::A),
                    value_with_interval(r, r.b, Side::B),
                    change(r),
                    verdict(&r.verdict),
                ]
            })
            .collect();
        let head = ["metric", "A", "B", "B vs A", "real?"];
        let mut width = head.map(str::len);
        for c in &cells {
            for (w, s) in width.iter_mut().zip(c) {
                *w = (*w).max(s.chars().count());
            }
        }
        let line = |c: [&str; 5]| {
            let pad = |s: &str, w: usize, right: bool| {
                let n = w.saturating_sub(s.chars().count());
                if right {
                    format!("{}{s}", " ".repeat(n))
                } else {
                    format!("{s}{}", " ".repeat(n))
                }
            };
            format!(
                "{}  {}  {}  {}  {}\n",
                pad(c[0], width[0], false),
                pad(c[1], width[1], true),
                pad(c[2], width[2], true),
                pad(c[3], width[3], true),
                c[4]
            )
        };
        out.push_str(&line(head));
        for c in &cells {
            out.push_str(&line([&c[0], &c[1], &c[2], &c[3], &c[4]]));
        }
        out.push('\n');
        for (metric, s) in &self.shifts {
            if let Some(s) = s {
                out.push_str(&format!(
                    "{metric}: {} (Mann-Whitney p {:.2e}, median {}, {}, rank-biserial {:+.2})\n",
                    self.shift_said(s),
                    s.p_value,
                    super::median_shift_text(s),
                    super::mads_text(s),
                    s.rank_biserial
                ));
            }
        }
        out.push('\n');
        out.push_str(&self.rule_text());
        out.push('\n');
        out.push_str(&format!("\n{}\n", self.diagnosis.to_text()));
        if !self.context_diff.is_empty() {
            out.push_str("\nRun context that differs:\n");
            for (k, a, b) in &self.context_diff {
                out.push_str(&format!("  {k}: {a} → {b}\n"));
            }
        }
        for n in &self.notes {
            out.push_str(&format!("\nnote: {n}"));
        }
        if !self.notes.is_empty() {
            out.push('\n');
        }
        out
    }
}

impl super::DiagnosisChange {
    /// One line: each side's diagnoses, and whether the bottleneck changed.
    pub(super) fn to_text(&self) -> String {
        let side = |d: &[String]| {
            if d.is_empty() {
                "none (no diagnosis in its summary)".to_string()
            } else {
                d.join(", ")
            }
        };
        let verdict = if self.changed {
            "the bottleneck changed"
        } else if self.a.is_empty() || self.b.is_empty() {
            "not compared"
        } else {
            "the same class"
        };
        format!(
            "diagnosis: A {}; B {}: {verdict}",
            side(&self.a),
            side(&self.b)
        )
    }
}

/// Which side of a row.
#[derive(Clone, Copy)]
pub(super) enum Side {
    A,
    B,
}

/// A side as the header names it: `name (dir, N requests, C completed)`, with its runs when
/// several, a run a signal cut short said to be, and the runs an experiment left out named.
pub(super) fn side(s: &super::Side) -> String {
    let mut cut = match s.interrupted {
        0 => String::new(),
        _ if s.runs == 1 => ", cut short by a signal".to_string(),
        n => format!(", {n} cut short by a signal"),
    };
    if !s.left_out.is_empty() {
        let dirs: Vec<&str> = s.left_out.iter().map(|l| l.dir.as_str()).collect();
        cut.push_str(&format!(
            "; {} more left out: {}",
            dirs.len(),
            dirs.join(", ")
        ));
    }
    if s.runs > 1 || !s.left_out.is_empty() {
        format!(
            "{} ({}, {} runs, {} requests, {} completed{cut})",
            s.name, s.dir, s.runs, s.requests, s.completed
        )
    } else {
        format!(
            "{} ({}, {} requests, {} completed{cut})",
            s.name, s.dir, s.requests, s.completed
        )
    }
}

impl Comparison {
    /// A distribution line's trend: `regressed`, or `unconfirmed: regressed (…)` when the rule
    /// had fewer than [`SPREAD_MIN_RUNS`] reference runs (its MAD term at its floor, or half
    /// of two medians' one difference: the rank test alone, taking requests as independent)
    /// or the sides sent different requests, as the rows say it; the daemon's baseline words
    /// it the same (`reference is 2 runs: run-to-run variation not measured`).
    pub(super) fn shift_said(&self, s: &canary_core::compare::MetricShift) -> String {
        let mut why = Vec::new();
        if !s.spread_measured() {
            why.push(match s.reference_runs {
                Some(n) => canary_core::compare::spread_unmeasured_said(n),
                None => "reference runs not counted: run-to-run variation not measured".into(),
            });
        }
        if self
            .different_requests
            .as_ref()
            .is_some_and(|d| !d.fields.is_empty())
        {
            why.push("not the same requests".into());
        }
        match s.trend {
            Trend::Regressed | Trend::Improved if !why.is_empty() => {
                format!("unconfirmed: {} ({})", s.trend.as_str(), why.join("; "))
            }
            t => t.as_str().to_string(),
        }
    }

    /// What "real" meant in this comparison, in a few sentences, and how exact the figures
    /// are.
    pub(super) fn rule_text(&self) -> String {
        // A side's value with several runs is their mean: an estimate, whatever each run's.
        let exact = match (self.a.runs > 1, self.b.runs > 1) {
            (true, true) => {
                "The values are the means of each side's runs, estimates (± their 95 % \
                 intervals); each run's figures are exact, from its records"
            }
            (true, false) => {
                "A's values are the means of its runs, estimates; each run's figures are \
                 exact, from its records"
            }
            (false, true) => {
                "B's values are the means of its runs, estimates; each run's figures are \
                 exact, from its records"
            }
            (false, false) => "Figures are exact, from each run's records",
        };
        format!(
            "{} {}",
            self.rule(),
            super::first_token::exactness(&self.a.times, &self.b.times, exact)
        )
    }

    /// A row's metric as the table shows it: a TTFT row is marked `(bound)` when any first
    /// token of either side is an upper bound, an e2e row when any end is, an ITL row when
    /// any token event is, and each when a run does not say how those were timed.
    pub(super) fn metric_shown(&self, r: &Row) -> String {
        let bound = super::bounds::name_of(&r.metric).is_some_and(|m| {
            super::bounds::of(&self.a.times).contains(&m)
                || super::bounds::of(&self.b.times).contains(&m)
        }) || (matches!(r.metric.as_str(), "goodput" | "good fraction")
            && self.goodput_on_bounds.is_some());
        if bound {
            format!("{} (bound)", r.metric)
        } else {
            r.metric.clone()
        }
    }

    /// What "real" meant in this comparison, in a few sentences.
    pub(super) fn rule(&self) -> String {
        let r = &self.rules;
        let floors = format!("{} % and {} ms", r.min_shift * 100.0, r.min_shift_ms);
        let tested = self
            .rows
            .iter()
            .filter(|r| {
                !matches!(
                    r.verdict,
                    Verdict::NotJudged { .. } | Verdict::NotComparable { .. }
                )
            })
            .count();
        // Each row's test keeps its own level: with many rows, some `yes` by chance is likelier
        // than any one level says (rows of one metric move together, so no correction is
        // applied; the level is said instead).
        let per_row = match tested {
            0 => String::new(),
            _ => format!(
                " Each row is tested at its own level, not corrected for the {tested} rows \
                 tested: among many rows a chance `yes` is likelier than that level."
            ),
        };
        let other_requests = match &self.different_requests {
            Some(d) if !d.fields.is_empty() => {
                " The sides did not send the same requests (above the table), so a difference \
                 may be the workload's: no row says `yes`, one the test finds is `unconfirmed`."
            }
            _ => "",
        };
        let rule = if self.repeated() {
            format!(
                "Real means: Welch's t-test on the runs' figures, p < {}, and a change of the \
                 means of at least {} % ({} ms for a latency; none for a fraction). ± is the \
                 half-width of each side's 95 % confidence interval of the mean (Student's t: \
                 estimates, taking the runs as independent; a side's runs repeat one plan, the \
                 same requests on the same schedule, so it covers the server's run-to-run \
                 variation, not the load's randomness). Each distribution line pools the \
                 runs and applies the daemon's baseline rule with A's runs as its reference \
                 runs: Mann-Whitney p < {} on every request's value, and the median shift beyond \
                 {} MADs of A's run medians, {floors}{thin}.",
                r.runs_alpha,
                r.min_shift * 100.0,
                r.min_shift_ms,
                r.alpha,
                r.k_mad,
                thin = if self.a.runs < SPREAD_MIN_RUNS as u64 {
                    format!(
                        "; with {} runs on A that MAD is half their one difference, no measure \
                         of their spread (it takes {SPREAD_MIN_RUNS}), so a line's difference is \
                         `unconfirmed`",
                        self.a.runs
                    )
                } else {
                    String::new()
                }
            )
        } else {
            let measured = self.a.runs >= SPREAD_MIN_RUNS as u64;
            let mad = match self.a.runs {
                _ if measured => "the MAD of A's run medians".to_string(),
                1 => "the MAD at its floor (one run on A's side)".to_string(),
                n => format!(
                    "the MAD of A's {n} run medians, half their one difference: no measure of \
                     their spread below {SPREAD_MIN_RUNS} runs"
                ),
            };
            format!(
                "Real means: Mann-Whitney p < {} on every request's value, and the median shift \
                 beyond {} MADs, {floors} (the daemon's baseline rule; {mad}) for a p50; a p90 \
                 or p99 on its own tail: Mood's quantile test, p < {}, and the percentile moved \
                 {floors} (not judged below about 50 requests a side for a p90, 500 for a p99). \
                 Rates (errors, the good fraction) are judged by the rank test on each \
                 request's outcome; throughputs and goodput need at least 2 runs per side \
                 (--runs N). These tests are over requests and take them as independent, but \
                 requests of one run share its batches and its moment on the server, so two \
                 runs of one setup differ by more than such a p-value allows: with {one} a \
                 difference they find is `unconfirmed`, not real (run-to-run variation is not \
                 measured; --runs N on both sides judges on the runs' figures){p50}; a `no` \
                 holds. Values of a side with several runs are the means of its runs' figures.",
                r.alpha,
                r.k_mad,
                r.alpha,
                one = super::verdict::one_run_said(self.a.runs, self.b.runs),
                p50 = if measured {
                    ", but for a p50, whose rule measures it by the MAD of A's run medians"
                } else {
                    ""
                },
            )
        };
        format!("{rule}{per_row}{other_requests}")
    }
}

/// A row's value with its unit, and `± half-width` of its interval when runs are repeated.
/// When some runs have no value of the figure, how many of them the mean is over.
pub(super) fn value_with_interval(r: &Row, v: Option<f64>, side: Side) -> String {
    let runs = r.runs.as_ref().map(|f| match side {
        Side::A => (&f.a_interval, f.a_values.len()),
        Side::B => (&f.b_interval, f.b_values.len()),
    });
    let half = runs.and_then(|(i, _)| i.half_width);
    // A figure here is never below 0, nor a fraction above 1: an interval a ± would take past
    // that is given by its ends, clipped there (as `--runs` tables do).
    let ceiling = match r.unit {
        "fraction" => 1.0,
        _ => f64::INFINITY,
    };
    let clipped = runs
        .and_then(|(i, _)| i.low.zip(i.high))
        .filter(|&(low, high)| low < 0.0 || high > ceiling);
    // Runs that all gave the same figure have a zero-wide interval, which says nothing of its
    // uncertainty: said as such, never `± 0.00`.
    let no_spread = runs.is_some_and(|(i, _)| i.no_spread());
    let shown = match (v, half, clipped) {
        (Some(_), Some(_), _) if no_spread => format!("{} (no spread)", value(r, v)),
        (Some(_), Some(_), Some((low, high))) => format!(
            "{} (95 % CI {} to {}, clipped)",
            value(r, v),
            value(r, Some(low.max(0.0))),
            value(r, Some(high.min(ceiling)))
        ),
        // The ± in the value's unit: percentage points for a fraction shown in %.
        (Some(_), Some(h), None) if r.unit == "fraction" => {
            format!("{} ± {:.2} pt", value(r, v), h * 100.0)
        }
        (Some(_), Some(h), None) => format!("{} ± {} {}", value(r, v), num(h), r.unit),
        _ => value(r, v),
    };
    match runs {
        Some((i, all)) if (i.n as usize) < all => format!("{shown} ({} of {all} runs)", i.n),
        _ => shown,
    }
}

/// A row's value with its unit.
pub(super) fn value(r: &Row, v: Option<f64>) -> String {
    match v {
        None => "–".into(),
        Some(v) if r.unit == "fraction" => format!("{:.2} %", v * 100.0),
        Some(v) => format!("{} {}", num(v), r.unit),
    }
}

/// B against A: relative, or in percentage points for fractions.
pub(super) fn change(r: &Row) -> String {
    match (r.unit, r.a, r.b, r.change) {
        ("fraction", Some(a), Some(b), _) => format!("{:+.2} pt", (b - a) * 100.0),
        (_, _, _, Some(c)) => format!("{:+.1} %", c * 100.0),
        _ => "–".into(),
    }
}

/// The verdict in a few words.
pub(super) fn verdict(v: &Verdict) -> String {
    match v {
        Verdict::Judged {
            trend,
            p_value,
            why_not,
            ..
        } => match trend {
            Trend::Regressed => format!("yes: worse (p {p_value:.1e})"),
            Trend::Improved => format!("yes: better (p {p_value:.1e})"),
            _ => format!(
                "no: {} (p {})",
                why_not.as_deref().unwrap_or("within noise"),
                super::p_text(*p_value)
            ),
        },
        Verdict::NotJudged { why } => format!("not judged: {why}"),
        Verdict::NotComparable { why } => format!("not comparable: {why}"),
        Verdict::Unconfirmed {
            direction,
            p_value,
            why,
            ..
        } => format!(
            "unconfirmed: {} (p {p_value:.1e}; {why})",
            direction_word(*direction)
        ),
    }
}

/// The verdict in fewer words, for a narrow cell (a sweep's table, whose lines under it say
/// why a difference is unconfirmed).
pub(super) fn verdict_brief(v: &Verdict) -> String {
    match v {
        Verdict::Unconfirmed {
            direction, p_value, ..
        } => format!(
            "unconfirmed: {} (p {p_value:.1e})",
            direction_word(*direction)
        ),
        other => verdict(other),
    }
}

/// `worse` or `better`.
fn direction_word(t: Trend) -> &'static str {
    match t {
        Trend::Improved => "better",
        _ => "worse",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_side_says_what_its_latency_rows_cover_and_a_cut_short_run() {
        let mut s = crate::compare::Side {
            name: "a".into(),
            dir: "runs/a".into(),
            requests: 100,
            runs: 1,
            completed: 97,
            interrupted: 0,
            left_out: Vec::new(),
            times: Default::default(),
        };
        assert_eq!(side(&s), "a (runs/a, 100 requests, 97 completed)");
        s.interrupted = 1;
        assert_eq!(
            side(&s),
            "a (runs/a, 100 requests, 97 completed, cut short by a signal)"
        );
        s.runs = 3;
        assert_eq!(
            side(&s),
            "a (runs/a, 3 runs, 100 requests, 97 completed, 1 cut short by a signal)"
        );
        // An experiment's errored run is not in its figures: the header names it.
        s.interrupted = 0;
        s.runs = 2;
        s.left_out = vec![crate::experiment::LeftOutRun {
            dir: "run-3".into(),
            why: "error: target unusable".into(),
        }];
        assert_eq!(
            side(&s),
            "a (runs/a, 2 runs, 100 requests, 97 completed; 1 more left out: run-3)"
        );
    }
}

//! One headline figure of both sides: a row's values, its change, and, when both sides are
//! repeated, each run's figure with each side's interval of the mean.

use super::verdict::{runs_verdict, Verdict};
use super::CONFIDENCE;
use canary_core::compare::ShiftRules;
use canary_core::MeanInterval;
use serde::Serialize;

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

/// The mean of finite values; NaN for none.
pub(super) fn mean(v: &[f64]) -> f64 {
    let xs: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    xs.iter().sum::<f64>() / xs.len() as f64
}

pub(super) fn row(
    metric: String,
    unit: &'static str,
    a: f64,
    b: f64,
    verdict: Verdict,
    hib: bool,
) -> Row {
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
pub(super) fn runs_row(
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

#[cfg(test)]
mod tests {
    use super::super::text;
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
        // The ± in the figure's unit (audit F8: `± 0.148` with no unit).
        assert!(shown.contains(" ± ") && shown.ends_with(" ms"), "{shown}");
    }

    /// Runs that all gave the same share (0 errors in each) have a zero-wide interval: said
    /// as no spread, never `± 0.00` (audit F11).
    #[test]
    fn runs_without_spread_are_said_so_not_given_a_zero_interval() {
        let rules = ShiftRules::default();
        let r = runs_row(
            "error rate".into(),
            "fraction",
            &[0.0, 0.0, 0.0],
            &[0.01, 0.02, 0.01],
            false,
            &rules,
        );
        let shown = text::value_with_interval(&r, r.a, text::Side::A);
        assert!(
            shown.ends_with(" (no spread)") && !shown.contains('±'),
            "{shown}"
        );
        let shown = text::value_with_interval(&r, r.b, text::Side::B);
        assert!(
            shown.contains("95 % CI") && !shown.contains("no spread"),
            "{shown}"
        );
        // A fraction's ± is in percentage points.
        let r = runs_row(
            "good fraction".into(),
            "fraction",
            &[0.5, 0.6, 0.55],
            &[0.5, 0.51, 0.52],
            true,
            &rules,
        );
        let shown = text::value_with_interval(&r, r.b, text::Side::B);
        assert!(shown.contains(" ± ") && shown.ends_with(" pt"), "{shown}");
    }
}

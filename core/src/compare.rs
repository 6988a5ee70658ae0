//! Is a change in a latency distribution real? The statistics the daemon's rolling baseline
//! and `canaryd compare` share, so both judge a shift by one rule.
//!
//! A shift is real when two tests agree:
//!
//! 1. *Is the shift real?* A two-sided Mann-Whitney U test of the current values against the
//!    reference values (normal approximation with tie and continuity corrections), p < `alpha`.
//!    It compares whole distributions by rank, so a few huge outliers cannot make or hide a
//!    change.
//! 2. *Is it bigger than normal run-to-run noise?* The median shift exceeds `k_mad` × the MAD
//!    of the reference runs' own medians (scaled to σ), `min_shift` of the reference median
//!    and `min_shift_ms` in absolute terms. With thousands of requests the U test finds
//!    differences too small to matter; this keeps only those that stand out from how much
//!    runs usually vary. Below [`SPREAD_MIN_RUNS`] reference runs the spread of run medians is
//!    not measured: the MAD of one median is 0 (the floor, 0.1 % of the reference median,
//!    stands in) and of two is half their one difference, whatever the runs' spread. The rule
//!    then rests on the rank test, which takes a run's requests as independent, while requests
//!    of one run share its batches and its moment on the server, so two runs of one setup can
//!    differ by more than any p-value over their requests allows.
//!    [`MetricShift::spread_measured`] says so, for a caller to weigh (the daemon's baseline
//!    and `canaryd compare` both call such a shift `unconfirmed`, not real).
//!
//! Effect sizes reported: the relative median shift and the rank-biserial correlation
//! (P(current slower) − P(current faster), −1…1). Pure functions, no I/O.

use serde::{Deserialize, Serialize};

/// The fewest reference runs whose medians measure run-to-run variation: the MAD of one
/// median is 0 and of two is half their one difference; of three it is the middle of three
/// deviations, which one odd run cannot set. The daemon's baseline and `canaryd compare`
/// share it.
pub const SPREAD_MIN_RUNS: usize = 3;

/// `reference is 1 run: run-to-run variation not measured` (or `2 runs`): the words for a
/// shift judged against fewer than [`SPREAD_MIN_RUNS`] reference runs.
pub fn spread_unmeasured_said(runs: usize) -> String {
    let s = if runs == 1 { "" } else { "s" };
    format!("reference is {runs} run{s}: run-to-run variation not measured")
}

/// The thresholds of [`shift`] (the daemon's `[baseline]` section holds the same).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ShiftRules {
    /// Significance level of the Mann-Whitney U test.
    pub alpha: f64,
    /// A shift counts only beyond k × MAD of the reference runs' medians.
    pub k_mad: f64,
    /// … and beyond this fraction of the reference median.
    pub min_shift: f64,
    /// … and beyond this many milliseconds.
    pub min_shift_ms: f64,
}

impl Default for ShiftRules {
    /// The daemon's defaults: alpha 0.001, k 3, 5 %, 1 ms.
    fn default() -> ShiftRules {
        ShiftRules {
            alpha: 0.001,
            k_mad: 3.0,
            min_shift: 0.05,
            min_shift_ms: 1.0,
        }
    }
}

/// Where a run stands against its reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trend {
    /// Slower than the reference, beyond noise.
    Regressed,
    /// Faster than the reference, beyond noise.
    Improved,
    /// Within normal variation.
    Steady,
    /// Too few runs or values to judge.
    Insufficient,
}

impl Trend {
    /// Every state, in report order.
    pub const ALL: [Trend; 4] = [
        Trend::Regressed,
        Trend::Improved,
        Trend::Steady,
        Trend::Insufficient,
    ];

    /// snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Trend::Regressed => "regressed",
            Trend::Improved => "improved",
            Trend::Steady => "steady",
            Trend::Insufficient => "insufficient",
        }
    }
}

/// One metric's comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricShift {
    /// Median of the pooled reference values.
    pub baseline_median: f64,
    /// Median of the current values.
    pub median: f64,
    /// `median / baseline_median − 1`; `None` (JSON `null`) when the reference median is 0 and
    /// the current one is not: a change from zero has no relative size, and the rule's
    /// relative floor counts it as passed (as if infinite), leaving the absolute floor and the
    /// tests to decide.
    pub shift_ratio: Option<f64>,
    /// The shift in units of the reference runs' median spread (scaled MAD, floored at 0.1 %
    /// of the reference median); `None` (JSON `null`) when both are 0 (the reference runs'
    /// medians do not spread and the pooled median is 0, as an ITL of 0 ms): no spread to
    /// measure a shift in.
    pub shift_in_mads: Option<f64>,
    /// Mann-Whitney U two-sided p-value.
    pub p_value: f64,
    /// Rank-biserial correlation: + means the current values are larger (slower).
    pub rank_biserial: f64,
    /// This metric's verdict.
    pub trend: Trend,
    /// The reference runs whose medians gave the spread (those with values). Below
    /// [`SPREAD_MIN_RUNS`] the spread of run medians was not measured (the MAD term is at its
    /// floor, or half of two medians' one difference), so a `trend` other than `steady` rests
    /// on the rank test alone, which takes requests as independent.
    /// `None` (absent) in a comparison stored before it was recorded.
    #[serde(default)]
    pub reference_runs: Option<usize>,
}

impl MetricShift {
    /// Whether the reference runs' medians measured the run-to-run spread (at least
    /// [`SPREAD_MIN_RUNS`] of them): when not, the rule's MAD term stood at its floor (one
    /// run) or was half of two medians' one difference, which measures no spread.
    pub fn spread_measured(&self) -> bool {
        self.reference_runs.is_some_and(|n| n >= SPREAD_MIN_RUNS)
    }
}

/// Compares `current` with the reference runs' values (`per_run`, one slice per run, none
/// empty) under `rules`; `None` when either side has no values.
pub fn shift(current: &[f64], per_run: &[&[f64]], rules: &ShiftRules) -> Option<MetricShift> {
    let per_run: Vec<&[f64]> = per_run.iter().copied().filter(|v| !v.is_empty()).collect();
    if current.is_empty() || per_run.is_empty() {
        return None;
    }
    let pooled: Vec<f64> = per_run.iter().flat_map(|v| v.iter().copied()).collect();
    let base_median = median(&pooled);
    let cur_median = median(current);
    let run_medians: Vec<f64> = per_run.iter().map(|v| median(v)).collect();
    // MAD scaled to σ for a normal; floored so identical runs do not make any change huge.
    let spread = (1.4826 * mad(&run_medians)).max(1e-3 * base_median.abs());
    let mad = spread.max(1e-9);
    let shift = cur_median - base_median;
    let (u, p) = mann_whitney(current, &pooled);
    let rank_biserial = 2.0 * u / (current.len() as f64 * pooled.len() as f64) - 1.0;
    // From a zero median any move is an unbounded relative change: the relative floor cannot
    // hold it back (a 0 ms → 8 ms ITL median is not "0 %"), the absolute floor still can.
    let shift_ratio = if base_median != 0.0 {
        Some(shift / base_median)
    } else if shift == 0.0 {
        Some(0.0)
    } else {
        None
    };
    let beyond_noise = p < rules.alpha
        && shift.abs() > rules.k_mad * mad
        && shift_ratio.is_none_or(|r| r.abs() >= rules.min_shift)
        && shift.abs() >= rules.min_shift_ms;
    let trend = match (beyond_noise, shift > 0.0) {
        (true, true) => Trend::Regressed,
        (true, false) => Trend::Improved,
        (false, _) => Trend::Steady,
    };
    Some(MetricShift {
        baseline_median: base_median,
        median: cur_median,
        shift_ratio,
        shift_in_mads: (spread > 0.0).then_some(shift / spread),
        p_value: p,
        rank_biserial,
        trend,
        reference_runs: Some(per_run.len()),
    })
}

/// The median (mean of the middle two for an even count); NaN for no values.
pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// Median absolute deviation from the median (unscaled).
pub fn mad(v: &[f64]) -> f64 {
    let m = median(v);
    median(&v.iter().map(|x| (x - m).abs()).collect::<Vec<_>>())
}

/// Mann-Whitney U of `a` against `b`: returns `U_a` (the number of pairs where `a` is larger,
/// ties counting half) and the two-sided p-value from the normal approximation with tie
/// correction and continuity correction.
pub fn mann_whitney(a: &[f64], b: &[f64]) -> (f64, f64) {
    let (n1, n2) = (a.len() as f64, b.len() as f64);
    let mut all: Vec<(f64, bool)> = a
        .iter()
        .map(|&x| (x, true))
        .chain(b.iter().map(|&x| (x, false)))
        .collect();
    all.sort_by(|x, y| x.0.total_cmp(&y.0));
    let n = all.len();
    let (mut rank_sum_a, mut tie_term) = (0.0, 0.0);
    let mut i = 0;
    while i < n {
        let mut j = i;
        while j + 1 < n && all[j + 1].0 == all[i].0 {
            j += 1;
        }
        // Ranks i+1 ..= j+1 share their average.
        let rank = (i + j + 2) as f64 / 2.0;
        let t = (j - i + 1) as f64;
        tie_term += t * t * t - t;
        rank_sum_a += rank * all[i..=j].iter().filter(|x| x.1).count() as f64;
        i = j + 1;
    }
    let u = rank_sum_a - n1 * (n1 + 1.0) / 2.0;
    let nf = n as f64;
    let var = n1 * n2 / 12.0 * ((nf + 1.0) - tie_term / (nf * (nf - 1.0)));
    if var.is_nan() || var <= 0.0 {
        return (u, 1.0);
    }
    let diff = (u - n1 * n2 / 2.0).abs();
    let z = (diff - 0.5).max(0.0) / var.sqrt();
    (u, erfc(z / std::f64::consts::SQRT_2).min(1.0))
}

/// Complementary error function (Numerical Recipes' Chebyshev fit, relative error < 1.2e-7).
pub fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t
        * (-z * z - 1.265_512_23
            + t * (1.000_023_68
                + t * (0.374_091_96
                    + t * (0.096_784_18
                        + t * (-0.186_288_06
                            + t * (0.278_868_07
                                + t * (-1.135_203_98
                                    + t * (1.488_515_87
                                        + t * (-0.822_152_23 + t * 0.170_872_77)))))))))
            .exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erfc_matches_tabulated_values() {
        for (x, want) in [
            (0.0, 1.0),
            (0.5, 0.479_500_122),
            (1.0, 0.157_299_207),
            (2.0, 0.004_677_735),
            (-1.0, 1.842_700_793),
        ] {
            assert!((erfc(x) - want).abs() < 1e-6, "erfc({x}) = {}", erfc(x));
        }
    }

    #[test]
    fn mann_whitney_u_and_p_on_textbook_cases() {
        // Fully separated: U = 0 one way, n1·n2 the other.
        assert_eq!(mann_whitney(&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]).0, 0.0);
        assert_eq!(mann_whitney(&[4.0, 5.0, 6.0], &[1.0, 2.0, 3.0]).0, 9.0);
        // Ties count half.
        assert_eq!(mann_whitney(&[2.0], &[2.0]).0, 0.5);
        // 20 vs 20 fully separated: z ≈ 5.4, p ≈ 7e-8 (scipy: 6.8e-8 with continuity).
        let a: Vec<f64> = (0..20).map(f64::from).collect();
        let b: Vec<f64> = (100..120).map(f64::from).collect();
        let p = mann_whitney(&a, &b).1;
        assert!((5e-8..9e-8).contains(&p), "{p}");
        // Identical samples: nothing to see.
        assert_eq!(mann_whitney(&[3.0; 10], &[3.0; 10]).1, 1.0);
    }

    #[test]
    fn median_and_mad_of_small_samples() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
        // |x - 2| = 1, 1, 0, 2, 7 → median 1.
        assert_eq!(mad(&[1.0, 3.0, 2.0, 4.0, 9.0]), 1.0);
    }

    #[test]
    fn one_reference_run_uses_the_mad_floor_and_the_absolute_rules() {
        let base: Vec<f64> = (0..200).map(|i| 100.0 + f64::from(i % 10)).collect();
        // 30 % slower, every value: real.
        let slower: Vec<f64> = base.iter().map(|v| v * 1.3).collect();
        let s = shift(&slower, &[&base], &ShiftRules::default()).unwrap();
        assert_eq!(s.trend, Trend::Regressed, "{s:?}");
        assert!((s.shift_ratio.unwrap() - 0.3).abs() < 0.01, "{s:?}");
        // 2 % slower: significant by rank, but under min_shift.
        let nudged: Vec<f64> = base.iter().map(|v| v * 1.02).collect();
        let s = shift(&nudged, &[&base], &ShiftRules::default()).unwrap();
        assert!(s.p_value < 0.001, "{s:?}");
        assert_eq!(s.trend, Trend::Steady, "{s:?}");
        // … and says its spread was not measured: one run's requests are not independent
        // draws, so that trend is the rank test's alone.
        assert_eq!(s.reference_runs, Some(1));
        assert!(!s.spread_measured());
        // Two reference runs: the MAD of their medians is half their one difference, no
        // measure of the spread either; three measure it.
        let again: Vec<f64> = base.iter().map(|v| v * 1.01).collect();
        let s = shift(&slower, &[&base, &again], &ShiftRules::default()).unwrap();
        assert_eq!(s.reference_runs, Some(2));
        assert!(!s.spread_measured(), "{s:?}");
        let third: Vec<f64> = base.iter().map(|v| v * 0.99).collect();
        let s = shift(&slower, &[&base, &again, &third], &ShiftRules::default()).unwrap();
        assert!(s.spread_measured(), "{s:?}");
        assert_eq!(
            spread_unmeasured_said(1),
            "reference is 1 run: run-to-run variation not measured"
        );
        assert_eq!(
            spread_unmeasured_said(2),
            "reference is 2 runs: run-to-run variation not measured"
        );
        assert!(shift(&[], &[&base], &ShiftRules::default()).is_none());
        assert!(shift(&base, &[&[]], &ShiftRules::default()).is_none());
    }

    /// A zero reference median (ITL of one-token answers, all 0 ms) moving to 8 ms is a real
    /// change: the relative floor must not read it as a 0 % shift.
    #[test]
    fn a_shift_from_a_zero_median_passes_the_relative_floor() {
        let zero = vec![0.0; 400];
        let eight: Vec<f64> = (0..400).map(|i| 8.0 + f64::from(i % 10) / 10.0).collect();
        let s = shift(&eight, &[&zero], &ShiftRules::default()).unwrap();
        assert_eq!(s.shift_ratio, None, "{s:?}");
        assert_eq!(s.trend, Trend::Regressed, "{s:?}");
        // Reference medians all 0 have no spread: no figure in MADs (it was 8e9, from the
        // rule's 1e-9 guard).
        assert_eq!(s.shift_in_mads, None, "{s:?}");
        // … and still stops at the absolute floor: 0 → 0.5 ms is under 1 ms.
        let half = vec![0.5; 400];
        let s = shift(&half, &[&zero], &ShiftRules::default()).unwrap();
        assert_eq!(s.trend, Trend::Steady, "{s:?}");
        // 0 → 0 is no change at all, of size 0.
        let s = shift(&zero, &[&zero], &ShiftRules::default()).unwrap();
        assert_eq!((s.shift_ratio, s.trend), (Some(0.0), Trend::Steady));
        // The stored comparison reads back (an infinite ratio would write JSON null as f64).
        let s = shift(&eight, &[&zero], &ShiftRules::default()).unwrap();
        let back: MetricShift = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!((back.shift_ratio, back.trend), (None, Trend::Regressed));
        assert_eq!(back.shift_in_mads, None);
        // From a non-zero median the figure is there, in the floored MADs.
        let one = vec![1.0; 400];
        let s = shift(&eight, &[&one], &ShiftRules::default()).unwrap();
        let m = s.shift_in_mads.unwrap();
        assert!((m - 7.45 / 1e-3).abs() < 1.0, "{s:?}");
    }
}

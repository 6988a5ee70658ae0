//! The rolling baseline: does this run's latency distribution differ from the last N passing
//! runs of the same workload?
//!
//! Per metric (TTFT, ITL, e2e) two questions must both say yes before a run is `regressed` or
//! `improved`:
//!
//! 1. *Is the shift real?* A two-sided Mann-Whitney U test of this run's per-request values
//!    against the baseline runs' pooled values (normal approximation with tie correction),
//!    p < `alpha`. It compares whole distributions by rank, so a few huge outliers cannot
//!    make or hide a regression.
//! 2. *Is it bigger than normal run-to-run noise?* The median shift exceeds `k_mad` × the MAD
//!    of the baseline runs' own medians (scaled to σ), `min_shift` of the baseline median and
//!    `min_shift_ms` in absolute terms.
//!    With thousands of requests the U test finds differences too small to matter; this keeps
//!    only those that stand out from how much runs usually vary.
//!
//! Effect sizes reported: the relative median shift and the rank-biserial correlation
//! (P(this run slower) − P(this run faster), −1…1).

use crate::config::BaselineConfig;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The per-request values of one run kept for comparisons (bounded by [`Samples::CAP`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Samples {
    /// Time to first token, ms.
    pub ttft_ms: Vec<f64>,
    /// Inter-token latency, ms.
    pub itl_ms: Vec<f64>,
    /// End-to-end latency, ms.
    pub e2e_ms: Vec<f64>,
}

impl Samples {
    /// At most this many values per metric and run: plenty for a rank test, and bounded
    /// storage in the history database.
    pub const CAP: usize = 2000;

    /// The metrics, by aiperf name.
    pub fn metrics(&self) -> [(&'static str, &[f64]); 3] {
        [
            ("time_to_first_token", &self.ttft_ms),
            ("inter_token_latency", &self.itl_ms),
            ("request_latency", &self.e2e_ms),
        ]
    }
}

/// Where a run stands against its baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trend {
    /// Slower than the baseline, beyond noise.
    Regressed,
    /// Faster than the baseline, beyond noise.
    Improved,
    /// Within normal variation.
    Steady,
    /// Too few passing runs yet to judge.
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
    /// Median of the pooled baseline values.
    pub baseline_median: f64,
    /// Median of this run's values.
    pub median: f64,
    /// `median / baseline_median − 1`.
    pub shift_ratio: f64,
    /// The shift in units of the baseline runs' median spread (scaled MAD).
    pub shift_in_mads: f64,
    /// Mann-Whitney U two-sided p-value.
    pub p_value: f64,
    /// Rank-biserial correlation: + means this run is slower.
    pub rank_biserial: f64,
    /// This metric's verdict.
    pub trend: Trend,
}

/// A run against its baseline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// `regressed` if any metric regressed, else `improved` if any improved, else `steady`.
    pub trend: Trend,
    /// Passing runs the baseline was built from.
    pub baseline_runs: usize,
    /// Per metric, by aiperf name (metrics without values on either side are left out).
    pub metrics: BTreeMap<String, MetricShift>,
}

/// Compares `current` with `baseline` (the last passing runs, newest first or any order).
pub fn compare(cfg: &BaselineConfig, baseline: &[Samples], current: &Samples) -> Comparison {
    let runs = baseline.len().min(cfg.runs);
    let baseline = &baseline[..runs];
    if runs < cfg.min_runs {
        return Comparison {
            trend: Trend::Insufficient,
            baseline_runs: runs,
            metrics: BTreeMap::new(),
        };
    }
    let mut metrics = BTreeMap::new();
    for (i, (name, values)) in current.metrics().into_iter().enumerate() {
        let per_run: Vec<&[f64]> = baseline
            .iter()
            .map(|s| s.metrics()[i].1)
            .filter(|v| !v.is_empty())
            .collect();
        if values.is_empty() || per_run.len() < cfg.min_runs {
            continue;
        }
        let pooled: Vec<f64> = per_run.iter().flat_map(|v| v.iter().copied()).collect();
        let base_median = median(&pooled);
        let cur_median = median(values);
        let run_medians: Vec<f64> = per_run.iter().map(|v| median(v)).collect();
        // MAD scaled to σ for a normal; floored so identical runs do not make any change huge.
        let mad = (1.4826 * mad(&run_medians))
            .max(1e-3 * base_median.abs())
            .max(1e-9);
        let shift = cur_median - base_median;
        let (u, p) = mann_whitney(values, &pooled);
        let rank_biserial = 2.0 * u / (values.len() as f64 * pooled.len() as f64) - 1.0;
        let shift_ratio = if base_median != 0.0 {
            shift / base_median
        } else {
            0.0
        };
        let beyond_noise = p < cfg.alpha
            && shift.abs() > cfg.k_mad * mad
            && shift_ratio.abs() >= cfg.min_shift
            && shift.abs() >= cfg.min_shift_ms;
        let trend = match (beyond_noise, shift > 0.0) {
            (true, true) => Trend::Regressed,
            (true, false) => Trend::Improved,
            (false, _) => Trend::Steady,
        };
        metrics.insert(
            name.to_string(),
            MetricShift {
                baseline_median: base_median,
                median: cur_median,
                shift_ratio,
                shift_in_mads: shift / mad,
                p_value: p,
                rank_biserial,
                trend,
            },
        );
    }
    let any = |t: Trend| metrics.values().any(|m| m.trend == t);
    let trend = if metrics.is_empty() {
        Trend::Insufficient
    } else if any(Trend::Regressed) {
        Trend::Regressed
    } else if any(Trend::Improved) {
        Trend::Improved
    } else {
        Trend::Steady
    };
    Comparison {
        trend,
        baseline_runs: runs,
        metrics,
    }
}

fn median(v: &[f64]) -> f64 {
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

fn mad(v: &[f64]) -> f64 {
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
fn erfc(x: f64) -> f64 {
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

    /// Deterministic log-normal latencies (the usual shape of TTFT and e2e: a body and a long
    /// right tail), from a SplitMix64 stream and Box-Muller.
    fn lognormal(seed: u64, n: usize, median_ms: f64, sigma: f64) -> Vec<f64> {
        let mut state = seed;
        let mut next = || {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
        };
        (0..n)
            .map(|_| {
                let (u1, u2) = (next().max(1e-12), next());
                let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
                median_ms * (sigma * z).exp()
            })
            .collect()
    }

    fn run(seed: u64, scale: f64) -> Samples {
        Samples {
            ttft_ms: lognormal(seed, 300, 80.0 * scale, 0.6),
            itl_ms: lognormal(seed + 1000, 300, 12.0 * scale, 0.2),
            e2e_ms: lognormal(seed + 2000, 300, 900.0 * scale, 0.5),
        }
    }

    fn cfg() -> BaselineConfig {
        BaselineConfig {
            runs: 10,
            min_runs: 3,
            alpha: 0.001,
            k_mad: 3.0,
            min_shift: 0.05,
            min_shift_ms: 1.0,
        }
    }

    fn baseline() -> Vec<Samples> {
        (0..10).map(|i| run(i * 7919, 1.0)).collect()
    }

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
    fn a_run_from_the_same_distribution_is_steady() {
        for seed in [1, 2, 3, 4, 5] {
            let c = compare(&cfg(), &baseline(), &run(seed * 104_729, 1.0));
            assert_eq!(c.trend, Trend::Steady, "seed {seed}: {c:#?}");
            assert_eq!(c.baseline_runs, 10);
            assert_eq!(c.metrics.len(), 3);
        }
    }

    #[test]
    fn a_slower_run_regresses_and_a_faster_one_improves_with_effect_sizes() {
        let c = compare(&cfg(), &baseline(), &run(42, 1.5));
        assert_eq!(c.trend, Trend::Regressed, "{c:#?}");
        let ttft = &c.metrics["time_to_first_token"];
        assert_eq!(ttft.trend, Trend::Regressed);
        assert!((0.3..0.7).contains(&ttft.shift_ratio), "{ttft:?}");
        assert!(ttft.rank_biserial > 0.2 && ttft.p_value < 1e-6, "{ttft:?}");
        assert!(ttft.shift_in_mads > 3.0, "{ttft:?}");

        let c = compare(&cfg(), &baseline(), &run(43, 0.6));
        assert_eq!(c.trend, Trend::Improved, "{c:#?}");
        assert!(c.metrics["inter_token_latency"].rank_biserial < -0.5);
    }

    #[test]
    fn a_shift_within_run_to_run_noise_is_steady() {
        // Baseline runs whose medians wander ±20% (a busy shared server); a run 10% slower
        // is significant by rank with 3000 pooled values, but not beyond k·MAD.
        let noisy: Vec<Samples> = (0..10)
            .map(|i| run(i * 31, [0.8, 1.2, 0.9, 1.1, 1.0][i as usize % 5]))
            .collect();
        let c = compare(&cfg(), &noisy, &run(99, 1.1));
        assert_eq!(c.trend, Trend::Steady, "{c:#?}");
    }

    #[test]
    fn a_consistent_but_tiny_absolute_shift_is_steady() {
        // Sub-millisecond ITLs doubling (0.07 → 0.14 ms): significant and far beyond k·MAD,
        // but below min_shift_ms: noise of the client host, not a server regression.
        let tiny = |seed, scale| Samples {
            itl_ms: lognormal(seed, 300, 0.07 * scale, 0.2),
            ..Default::default()
        };
        let base: Vec<Samples> = (0..10).map(|i| tiny(i * 13, 1.0)).collect();
        let c = compare(&cfg(), &base, &tiny(5, 2.0));
        let itl = &c.metrics["inter_token_latency"];
        assert!(itl.p_value < 1e-6 && itl.shift_in_mads > 3.0, "{itl:?}");
        assert_eq!(c.trend, Trend::Steady, "{c:#?}");
    }

    #[test]
    fn too_few_runs_is_insufficient() {
        let c = compare(&cfg(), &baseline()[..2], &run(42, 3.0));
        assert_eq!(c.trend, Trend::Insufficient);
        assert_eq!(c.baseline_runs, 2);
        assert!(c.metrics.is_empty());
    }
}

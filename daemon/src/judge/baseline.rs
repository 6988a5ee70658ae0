//! The rolling baseline: does this run's latency distribution differ from the last N passing
//! runs of the same workload?
//!
//! Per metric (TTFT, ITL, e2e) this run's per-request values are judged against the baseline
//! runs' pooled values by [`canary_core::compare::shift`]: a Mann-Whitney U test (p < `alpha`)
//! and a median shift beyond `k_mad` × the MAD of the baseline runs' own medians, `min_shift`
//! of the baseline median and `min_shift_ms`. `canaryd compare` judges two runs by the same
//! rule.
//!
//! Below [`SPREAD_MIN_RUNS`] baseline runs (`min_runs` 1 or 2) the MAD term measures no
//! run-to-run variation: the MAD of one median is 0 (the rule's floor, 0.1 % of the median,
//! stands in), and of two it is half their one difference, whatever the runs' spread. A
//! regression or improvement found against such a baseline then rests on the rank test alone,
//! which takes one run's requests as independent (they share its batches and its moment on
//! the server): the trend reads `insufficient`, the direction found kept as `unconfirmed`,
//! as `canaryd compare` calls such a difference `unconfirmed`. A `steady` stands (as
//! `compare`'s `no` does), said to rest on N run(s).

use crate::config::BaselineConfig;
use canary_core::compare::{self, spread_unmeasured_said, ShiftRules};
pub use canary_core::compare::{MetricShift, Trend, SPREAD_MIN_RUNS};
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

/// A run against its baseline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// `regressed` if any metric regressed, else `improved` if any improved, else `steady`;
    /// `insufficient` below `min_runs`, and when what a metric showed is
    /// [`Self::unconfirmed`].
    pub trend: Trend,
    /// Passing runs the baseline was built from.
    pub baseline_runs: usize,
    /// Per metric, by aiperf name (metrics without values on either side are left out).
    pub metrics: BTreeMap<String, MetricShift>,
    /// Set when the baseline started again because the run's load is not the newest
    /// baseline run's: `new load: baseline starts again (load.osl.mean 16 → 64)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_load: Option<String>,
    /// Set when a metric was judged against fewer than [`SPREAD_MIN_RUNS`] runs: `reference
    /// is 1 run: run-to-run variation not measured`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spread_unmeasured: Option<String>,
    /// The direction a metric judged against such a reference moved (`regressed`,
    /// `improved`), not called real: the trend then reads `insufficient`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unconfirmed: Option<Trend>,
}

impl Comparison {
    /// The trend as the log says it: `steady`, or `insufficient (unconfirmed: regressed;
    /// reference is 1 run: run-to-run variation not measured)`.
    pub fn said(&self) -> String {
        let notes: Vec<String> = self
            .unconfirmed
            .map(|t| format!("unconfirmed: {}", t.as_str()))
            .into_iter()
            .chain(self.spread_unmeasured.clone())
            .collect();
        match notes.is_empty() {
            true => self.trend.as_str().to_string(),
            false => format!("{} ({})", self.trend.as_str(), notes.join("; ")),
        }
    }
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
            new_load: None,
            spread_unmeasured: None,
            unconfirmed: None,
        };
    }
    let rules = ShiftRules {
        alpha: cfg.alpha,
        k_mad: cfg.k_mad,
        min_shift: cfg.min_shift,
        min_shift_ms: cfg.min_shift_ms,
    };
    let mut metrics = BTreeMap::new();
    for (i, (name, values)) in current.metrics().into_iter().enumerate() {
        let per_run: Vec<&[f64]> = baseline
            .iter()
            .map(|s| s.metrics()[i].1)
            .filter(|v| !v.is_empty())
            .collect();
        if per_run.len() < cfg.min_runs {
            continue;
        }
        if let Some(shift) = compare::shift(values, &per_run, &rules) {
            metrics.insert(name.to_string(), shift);
        }
    }
    // A metric judged against fewer runs than measure their spread: its `steady` stands,
    // its `regressed` or `improved` is not confirmed.
    let thin = |m: &MetricShift| !m.spread_measured();
    let any = |t: Trend, unmeasured: bool| {
        metrics
            .values()
            .any(|m| m.trend == t && thin(m) == unmeasured)
    };
    let unconfirmed = [Trend::Regressed, Trend::Improved]
        .into_iter()
        .find(|&t| any(t, true));
    let trend = if metrics.is_empty() {
        Trend::Insufficient
    } else if any(Trend::Regressed, false) {
        Trend::Regressed
    } else if any(Trend::Improved, false) {
        Trend::Improved
    } else if unconfirmed.is_some() {
        Trend::Insufficient
    } else {
        Trend::Steady
    };
    let fewest = metrics
        .values()
        .filter(|m| thin(m))
        .filter_map(|m| m.reference_runs)
        .min();
    Comparison {
        trend,
        baseline_runs: runs,
        metrics,
        new_load: None,
        spread_unmeasured: fewest.map(spread_unmeasured_said),
        // Only when it is what the trend holds back: a confirmed regression says itself.
        unconfirmed: unconfirmed.filter(|_| trend == Trend::Insufficient),
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
        assert!((0.3..0.7).contains(&ttft.shift_ratio.unwrap()), "{ttft:?}");
        assert!(ttft.rank_biserial > 0.2 && ttft.p_value < 1e-6, "{ttft:?}");
        assert!(ttft.shift_in_mads.unwrap() > 3.0, "{ttft:?}");

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
        assert!(
            itl.p_value < 1e-6 && itl.shift_in_mads.unwrap() > 3.0,
            "{itl:?}"
        );
        assert_eq!(c.trend, Trend::Steady, "{c:#?}");
    }

    #[test]
    fn too_few_runs_is_insufficient() {
        let c = compare(&cfg(), &baseline()[..2], &run(42, 3.0));
        assert_eq!(c.trend, Trend::Insufficient);
        assert_eq!(c.baseline_runs, 2);
        assert!(c.metrics.is_empty());
    }

    /// `min_runs = 1`: a 50 % slower run against one baseline run was `regressed`, though
    /// the MAD of one run's median is the rule's floor (no run-to-run variation measured).
    #[test]
    fn a_shift_against_one_or_two_runs_is_unconfirmed_and_steady_stands() {
        let cfg = BaselineConfig {
            min_runs: 1,
            ..cfg()
        };
        for n in [1, 2] {
            let c = compare(&cfg, &baseline()[..n], &run(42, 1.5));
            assert_eq!(c.trend, Trend::Insufficient, "{n}: {c:#?}");
            assert_eq!(c.unconfirmed, Some(Trend::Regressed), "{n}: {c:#?}");
            // The rule's answer per metric is kept, with its reference runs.
            let ttft = &c.metrics["time_to_first_token"];
            assert_eq!(ttft.trend, Trend::Regressed);
            assert_eq!(ttft.reference_runs, Some(n));
            let runs = if n == 1 { "1 run" } else { "2 runs" };
            assert_eq!(
                c.said(),
                format!(
                    "insufficient (unconfirmed: regressed; reference is {runs}: run-to-run \
                     variation not measured)"
                )
            );
            let c = compare(&cfg, &baseline()[..n], &run(43, 0.6));
            assert_eq!(
                (c.trend, c.unconfirmed),
                (Trend::Insufficient, Some(Trend::Improved))
            );
            // The same distribution: steady stands, saying what it rests on.
            let c = compare(&cfg, &baseline()[..n], &run(7, 1.0));
            assert_eq!((c.trend, c.unconfirmed), (Trend::Steady, None), "{c:#?}");
            assert!(
                c.said().starts_with("steady (reference is "),
                "{}",
                c.said()
            );
        }
        // From 3 runs on the spread is measured: a regression is one.
        let c = compare(&cfg, &baseline()[..3], &run(42, 1.5));
        assert_eq!((c.trend, c.unconfirmed), (Trend::Regressed, None));
        assert_eq!(c.spread_unmeasured, None);
        assert_eq!(c.said(), "regressed");
    }
}

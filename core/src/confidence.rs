//! Confidence intervals of a mean over a few repeated runs (issue 18): the mean of each run's
//! figure, with the interval Student's t-distribution gives on n − 1 degrees of freedom; and
//! Welch's test of whether two such sets of runs differ (`canaryd compare` of two `--runs N`
//! experiments).
//!
//! The t quantile is computed here rather than taken from a statistics crate: it needs only
//! the regularized incomplete beta function (Lentz's continued fraction, as in Numerical
//! Recipes §6.4) and a bisection, about sixty lines, where `statrs` would bring `nalgebra`
//! and its own dependency tree for one function. The tests check it against the printed
//! tables.

use serde::{Deserialize, Serialize};

/// The mean of one figure over runs, with its confidence interval. An estimate: it assumes
/// the runs are independent draws of a normally distributed figure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeanInterval {
    /// Runs that gave the figure.
    pub n: u64,
    /// Their mean.
    pub mean: f64,
    /// Their sample standard deviation (n − 1 in the denominator); `None` for one run.
    pub std: Option<f64>,
    /// Confidence level of the interval (0.95).
    pub confidence: f64,
    /// Half the interval's width: `t(1 − (1 − confidence)/2, n − 1) · std / √n`; `None`
    /// for one run (no interval can be stated).
    pub half_width: Option<f64>,
    /// `mean − half_width`.
    pub low: Option<f64>,
    /// `mean + half_width`.
    pub high: Option<f64>,
}

impl MeanInterval {
    /// The mean of `values` (NaN and infinite values left out) with its two-sided interval at
    /// `confidence` (0 < confidence < 1); `None` without any value.
    pub fn of(values: &[f64], confidence: f64) -> Option<MeanInterval> {
        let xs: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        let n = xs.len();
        if n == 0 {
            return None;
        }
        let mean = xs.iter().sum::<f64>() / n as f64;
        let (std, half_width) = if n < 2 {
            (None, None)
        } else {
            let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
            let std = var.sqrt();
            let t = t_quantile(1.0 - (1.0 - confidence) / 2.0, (n - 1) as f64);
            (Some(std), Some(t * std / (n as f64).sqrt()))
        };
        Some(MeanInterval {
            n: n as u64,
            mean,
            std,
            confidence,
            half_width,
            low: half_width.map(|h| mean - h),
            high: half_width.map(|h| mean + h),
        })
    }
}

impl MeanInterval {
    /// True when two or more runs all gave the same value: Student's t then makes a
    /// zero-wide interval, which is no evidence that the figure is certain (every run counted
    /// 0 errors of its 100, or their spread was below the precision each was measured to).
    /// The interval cannot be estimated from the runs' spread, and a table must say so
    /// rather than print `± 0`.
    pub fn no_spread(&self) -> bool {
        // Equal values can leave a few ulps of spread (2.915 three times: s = 5e-16), never
        // a real one this small: figures are stored to 1 µs or counted.
        self.n >= 2 && self.std.is_some_and(|s| s <= 1e-12 * self.mean.abs())
    }
}

/// Welch's two-sample t-test of two sets of runs' figures: do their means differ? An
/// estimate, under the same assumption as [`MeanInterval`] (independent, normally
/// distributed figures), without assuming equal variances.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WelchTest {
    /// `(mean(b) − mean(a)) / √(s²a/na + s²b/nb)`; ±infinity when neither set varies but
    /// their means differ.
    pub t: f64,
    /// Welch–Satterthwaite degrees of freedom (`na + nb − 2` when neither set varies).
    pub df: f64,
    /// Two-sided p-value.
    pub p_value: f64,
}

impl WelchTest {
    /// The test of `b` against `a` (NaN and infinite values left out); `None` unless each
    /// side has at least two values.
    pub fn of(a: &[f64], b: &[f64]) -> Option<WelchTest> {
        let stats = |v: &[f64]| {
            let xs: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
            let n = xs.len() as f64;
            let mean = xs.iter().sum::<f64>() / n;
            let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
            (xs.len() >= 2).then_some((n, mean, var))
        };
        let ((na, ma, va), (nb, mb, vb)) = (stats(a)?, stats(b)?);
        let (ea, eb) = (va / na, vb / nb);
        let se2 = ea + eb;
        if se2 == 0.0 {
            // Neither set varies: equal means are no evidence of a difference, different
            // ones are certain evidence.
            let (t, p_value) = if ma == mb {
                (0.0, 1.0)
            } else {
                ((mb - ma).signum() * f64::INFINITY, 0.0)
            };
            return Some(WelchTest {
                t,
                df: na + nb - 2.0,
                p_value,
            });
        }
        let t = (mb - ma) / se2.sqrt();
        let df = se2 * se2 / (ea * ea / (na - 1.0) + eb * eb / (nb - 1.0));
        // Both tails at once, I_x(df/2, ½) with x = df / (df + t²): no 1 − (1 − p) rounding
        // for a small p.
        let p_value = beta_inc(df / 2.0, 0.5, df / (df + t * t)).clamp(0.0, 1.0);
        Some(WelchTest { t, df, p_value })
    }
}

/// The `p` quantile (0 < p < 1) of Student's t-distribution with `df` degrees of freedom.
pub fn t_quantile(p: f64, df: f64) -> f64 {
    assert!(p > 0.0 && p < 1.0 && df > 0.0, "t_quantile({p}, {df})");
    if p < 0.5 {
        return -t_quantile(1.0 - p, df);
    }
    // The CDF rises monotonically: bracket the quantile, then halve the bracket until it
    // stops shrinking (≈ 60 steps to f64 precision).
    let mut hi = 1.0;
    while t_cdf(hi, df) < p {
        hi *= 2.0;
    }
    let mut lo = 0.0;
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if mid <= lo || mid >= hi {
            break;
        }
        if t_cdf(mid, df) < p {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

/// Student's t CDF: `1 − ½·I_x(df/2, ½)` with `x = df / (df + t²)`, for `t ≥ 0`.
pub fn t_cdf(t: f64, df: f64) -> f64 {
    let tail = 0.5 * beta_inc(df / 2.0, 0.5, df / (df + t * t));
    if t >= 0.0 {
        1.0 - tail
    } else {
        tail
    }
}

/// The regularized incomplete beta function `I_x(a, b)`.
fn beta_inc(a: f64, b: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let front =
        (ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln()).exp();
    // The continued fraction converges fast for x < (a + 1)/(a + b + 2); use the symmetry
    // I_x(a, b) = 1 − I_{1−x}(b, a) elsewhere.
    if x < (a + 1.0) / (a + b + 2.0) {
        front * beta_cf(a, b, x) / a
    } else {
        1.0 - front * beta_cf(b, a, 1.0 - x) / b
    }
}

/// The continued fraction of the incomplete beta function (modified Lentz).
fn beta_cf(a: f64, b: f64, x: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let (qab, qap, qam) = (a + b, a + 1.0, a - 1.0);
    let mut c = 1.0;
    let mut d = 1.0 - qab * x / qap;
    if d.abs() < TINY {
        d = TINY;
    }
    d = 1.0 / d;
    let mut h = d;
    for m in 1..1000 {
        let m = m as f64;
        let m2 = 2.0 * m;
        let aa = m * (b - m) * x / ((qam + m2) * (a + m2));
        d = 1.0 + aa * d;
        d = if d.abs() < TINY { TINY } else { d };
        c = 1.0 + aa / c;
        c = if c.abs() < TINY { TINY } else { c };
        d = 1.0 / d;
        h *= d * c;
        let aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
        d = 1.0 + aa * d;
        d = if d.abs() < TINY { TINY } else { d };
        c = 1.0 + aa / c;
        c = if c.abs() < TINY { TINY } else { c };
        d = 1.0 / d;
        let del = d * c;
        h *= del;
        if (del - 1.0).abs() < 1e-15 {
            break;
        }
    }
    h
}

/// `ln Γ(x)` for `x > 0` (Lanczos, g = 7, nine coefficients: about 15 significant digits).
fn ln_gamma(x: f64) -> f64 {
    const G: f64 = 7.0;
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection: Γ(x)Γ(1 − x) = π / sin(πx).
        return (std::f64::consts::PI / (std::f64::consts::PI * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut a = C[0];
    let t = x + G + 0.5;
    for (i, c) in C.iter().enumerate().skip(1) {
        a += c / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two-sided 95% critical values, t(0.975, df), as printed in every statistics table
    /// (e.g. NIST/SEMATECH e-Handbook §1.3.6.7.2), to their printed three decimals.
    #[test]
    fn t_quantiles_match_the_printed_table() {
        let table = [
            (1.0, 12.706),
            (2.0, 4.303),
            (3.0, 3.182),
            (4.0, 2.776),
            (5.0, 2.571),
            (9.0, 2.262),
            (10.0, 2.228),
            (29.0, 2.045),
            (100.0, 1.984),
        ];
        for (df, want) in table {
            let got = t_quantile(0.975, df);
            assert!(
                (got - want).abs() < 5e-4,
                "t(0.975, {df}) = {got}, want {want}"
            );
        }
        // Other levels: t(0.95, 1) = 6.314, t(0.995, 4) = 4.604, t(0.9, 10) = 1.372.
        for (p, df, want) in [(0.95, 1.0, 6.314), (0.995, 4.0, 4.604), (0.9, 10.0, 1.372)] {
            let got = t_quantile(p, df);
            assert!(
                (got - want).abs() < 5e-4,
                "t({p}, {df}) = {got}, want {want}"
            );
        }
        // Symmetry, and the normal limit (z(0.975) = 1.95996).
        assert!((t_quantile(0.025, 4.0) + t_quantile(0.975, 4.0)).abs() < 1e-9);
        assert!((t_quantile(0.975, 1e7) - 1.959_96).abs() < 1e-4);
        // One degree of freedom is the Cauchy distribution: its quantile is tan(π(p − ½)).
        let cauchy = (std::f64::consts::PI * (0.975 - 0.5)).tan();
        assert!((t_quantile(0.975, 1.0) - cauchy).abs() < 1e-9);
    }

    #[test]
    fn interval_of_known_values() {
        // 10, 12, 14: mean 12, s = 2, t(0.975, 2) = 4.3027, half width 4.3027·2/√3 = 4.9683.
        let ci = MeanInterval::of(&[10.0, 12.0, 14.0], 0.95).unwrap();
        assert_eq!(ci.n, 3);
        assert_eq!(ci.mean, 12.0);
        assert!((ci.std.unwrap() - 2.0).abs() < 1e-12);
        let h = ci.half_width.unwrap();
        assert!((h - 4.968_3).abs() < 1e-3, "{h}");
        assert!((ci.low.unwrap() - (12.0 - h)).abs() < 1e-12);
        assert!((ci.high.unwrap() - (12.0 + h)).abs() < 1e-12);
        // Five runs of 45.2 ± noise: 43, 44, 45, 46, 48 → mean 45.2, s = 1.9235,
        // t(0.975, 4) = 2.7764, half width 2.388.
        let ci = MeanInterval::of(&[43.0, 44.0, 45.0, 46.0, 48.0], 0.95).unwrap();
        assert!((ci.mean - 45.2).abs() < 1e-12);
        assert!((ci.half_width.unwrap() - 2.388).abs() < 1e-3);
    }

    #[test]
    fn one_run_has_no_interval_and_none_has_no_mean() {
        let ci = MeanInterval::of(&[7.5, f64::NAN], 0.95).unwrap();
        assert_eq!((ci.n, ci.mean), (1, 7.5));
        assert_eq!(
            (ci.std, ci.half_width, ci.low, ci.high),
            (None, None, None, None)
        );
        assert_eq!(MeanInterval::of(&[], 0.95), None);
        // Equal values: a zero-width interval, not NaN, and said to have no spread (audit
        // F11: printed as a 95% interval of ± 0.00).
        let ci = MeanInterval::of(&[3.0, 3.0], 0.95).unwrap();
        assert_eq!(ci.half_width, Some(0.0));
        assert!(ci.no_spread());
        assert!(!MeanInterval::of(&[3.0, 3.1], 0.95).unwrap().no_spread());
        assert!(!MeanInterval::of(&[3.0], 0.95).unwrap().no_spread());
        let ci = MeanInterval::of(&[2.915, 2.915, 2.915], 0.95).unwrap();
        assert!(ci.no_spread(), "{ci:?}");
        assert!(MeanInterval::of(&[0.0, 0.0], 0.95).unwrap().no_spread());
    }

    /// Against scipy 1.x `stats.ttest_ind(a, b, equal_var=False)` (b − a here, so t's sign
    /// is scipy's flipped).
    #[test]
    fn welch_matches_scipy() {
        for (a, b, t, df, p) in [
            (
                &[10.0, 12.0, 14.0][..],
                &[15.0, 16.0, 17.0, 19.0][..],
                3.307_475_463,
                3.990_093_636,
                0.029_834_761,
            ),
            (
                &[43.0, 44.0, 45.0, 46.0, 48.0],
                &[44.0, 45.0, 46.0, 47.0, 49.0],
                0.821_994_937,
                8.0,
                0.434_892_298,
            ),
            (
                &[1.0, 1.1, 0.9],
                &[2.0, 2.5, 1.5, 2.2, 1.9],
                5.818_289_661,
                4.887_759_385,
                0.002_283_777,
            ),
        ] {
            let w = WelchTest::of(a, b).unwrap();
            assert!((w.t - t).abs() < 1e-6, "t {} want {t}", w.t);
            assert!((w.df - df).abs() < 1e-6, "df {} want {df}", w.df);
            assert!((w.p_value - p).abs() < 1e-6, "p {} want {p}", w.p_value);
        }
        // Swapping the sides flips t, not p.
        let (x, y) = (
            WelchTest::of(&[1.0, 2.0, 4.0], &[3.0, 5.0]).unwrap(),
            WelchTest::of(&[3.0, 5.0], &[1.0, 2.0, 4.0]).unwrap(),
        );
        assert_eq!(x.t, -y.t);
        assert!((x.p_value - y.p_value).abs() < 1e-12);
    }

    #[test]
    fn welch_needs_two_runs_a_side_and_copes_with_no_spread() {
        assert_eq!(WelchTest::of(&[1.0], &[2.0, 3.0]), None);
        assert_eq!(WelchTest::of(&[1.0, f64::NAN], &[2.0, 3.0]), None);
        let same = WelchTest::of(&[5.0, 5.0], &[5.0, 5.0, 5.0]).unwrap();
        assert_eq!((same.t, same.p_value), (0.0, 1.0));
        let apart = WelchTest::of(&[5.0, 5.0], &[6.0, 6.0]).unwrap();
        assert_eq!((apart.t, apart.p_value), (f64::INFINITY, 0.0));
    }
}

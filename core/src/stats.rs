//! Fixed-size, mergeable distributions and the statistics reported for each metric.
//!
//! Percentiles come from a log-linear histogram with three significant digits (relative error
//! at most 0.1%) of values stored to 1 µs (so below 0.5 ms the error is up to 0.5 µs, more
//! than 0.1 %), and memory stays bounded however long a run is. Mean, min, max and standard
//! deviation are tracked exactly alongside it (of values clamped to [0, [`MAX_VALUE`]]), so
//! every statistic is a finite number: JSON has no infinity (serde_json writes `null`).

mod snapshot;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

pub use snapshot::{DistributionSnapshot, SnapshotError};

/// Quantum of stored values: a value `v` is recorded as `round(v * SCALE)`. With values in
/// milliseconds that is microsecond resolution before the histogram's own 0.1% bucketing.
const SCALE: f64 = 1000.0;

/// The largest value recorded as it is (about 4.6e15: in ms, 146,000 years); a larger one,
/// or an infinity, is recorded as this. It is the histogram's own ceiling, and it keeps the
/// sum of squared deviations finite: a value of 1e200 (a hostile server's time) squared was
/// infinite, and `std` with it.
pub const MAX_VALUE: f64 = u64::MAX as f64 / 4.0 / SCALE;

/// How close a percentile of a [`Distribution::new`] is (three significant digits of values
/// stored to 1 µs), as tables and pages say it. Written once per spelling the output has,
/// "0.1%" and "0.1 %" ([`PERCENTILE_PRECISION_SPACED`]), so that it stays as it was.
pub const PERCENTILE_PRECISION: &str = "0.1% or 0.5 µs, whichever is larger";

/// [`PERCENTILE_PRECISION`] spelled "0.1 %".
pub const PERCENTILE_PRECISION_SPACED: &str = "0.1 % or 0.5 µs, whichever is larger";

/// A streaming distribution of non-negative values in one unit.
#[derive(Clone)]
pub struct Distribution {
    hist: Histogram<u64>,
    count: u64,
    min: f64,
    max: f64,
    // Welford's running mean and sum of squared deviations.
    mean: f64,
    m2: f64,
}

impl std::fmt::Debug for Distribution {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Distribution")
            .field("count", &self.count)
            .field("mean", &self.mean)
            .finish()
    }
}

impl Default for Distribution {
    fn default() -> Self {
        Distribution::new()
    }
}

impl Distribution {
    /// An empty distribution.
    pub fn new() -> Distribution {
        // 3 significant digits, auto-resizing: it grows with the largest value, never with count.
        Distribution::with_digits(3)
    }

    /// An empty distribution keeping `digits` (1 to 5) significant digits: its percentiles
    /// are within 10^−digits of the truth, relative (3: 0.1%, 2: 1%), and each digit fewer
    /// takes about a sixth of the memory (a run's many timeslices keep 2: 2 kB empty, 18 kB
    /// with values up to 10 s).
    pub fn with_digits(digits: u8) -> Distribution {
        Distribution {
            hist: Histogram::new(digits.clamp(1, 5))
                .expect("1 to 5 significant digits is a valid histogram precision"),
            count: 0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
            mean: 0.0,
            m2: 0.0,
        }
    }

    /// Records one value. Negative values are clamped to zero, values above the histogram's
    /// ceiling (`MAX_VALUE`, about 4.6e15; infinity too) to it; NaN is ignored.
    pub fn record(&mut self, value: f64) {
        if value.is_nan() {
            return;
        }
        let value = value.clamp(0.0, MAX_VALUE);
        let q = (value * SCALE).round() as u64;
        // Auto-resize makes this infallible for any u64 below the type's limit.
        let _ = self.hist.record(q);
        self.count += 1;
        self.min = self.min.min(value);
        self.max = self.max.max(value);
        let delta = value - self.mean;
        self.mean += delta / self.count as f64;
        self.m2 += delta * (value - self.mean);
    }

    /// Adds every value of `other` to this distribution.
    pub fn merge(&mut self, other: &Distribution) {
        if other.count == 0 {
            return;
        }
        let _ = self.hist.add(&other.hist);
        let n = self.count.saturating_add(other.count);
        let delta = other.mean - self.mean;
        self.mean += delta * other.count as f64 / n as f64;
        self.m2 += other.m2 + delta * delta * self.count as f64 * other.count as f64 / n as f64;
        self.count = n;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
    }

    /// Number of values recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The value at percentile `p` (0–100); exact at 0 and 100, within 0.1% or 0.5 µs (whichever is larger) elsewhere.
    pub fn percentile(&self, p: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        if p <= 0.0 {
            return Some(self.min);
        }
        if p >= 100.0 {
            return Some(self.max);
        }
        let v = self.hist.value_at_quantile(p / 100.0) as f64 / SCALE;
        // The histogram reports a bucket's upper edge; never outside the exact range (and
        // never a panic, as `clamp` would give were min ever above max).
        Some(v.min(self.max).max(self.min))
    }

    /// [`Distribution::stats`] labelled with a unit.
    pub fn stats_in(&self, unit: &str) -> Option<Stats> {
        self.stats().map(|mut s| {
            s.unit = unit.to_string();
            s
        })
    }

    /// The statistics block reported for this metric, or `None` if nothing was recorded.
    pub fn stats(&self) -> Option<Stats> {
        if self.count == 0 {
            return None;
        }
        let p = |q| self.percentile(q).unwrap_or(0.0);
        // Rounding can leave `m2` a hair below 0 over equal values: its root would be NaN.
        let std = if self.count > 1 {
            (self.m2.max(0.0) / self.count as f64).sqrt()
        } else {
            0.0
        };
        Some(Stats {
            unit: String::new(),
            count: self.count,
            avg: self.mean,
            min: self.min,
            max: self.max,
            std,
            p1: p(1.0),
            p5: p(5.0),
            p10: p(10.0),
            p25: p(25.0),
            p50: p(50.0),
            p75: p(75.0),
            p90: p(90.0),
            p95: p(95.0),
            p99: p(99.0),
            p99_9: p(99.9),
        })
    }
}

/// Summary statistics of one metric, named as aiperf names them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct Stats {
    /// Unit of every value below (`ms`, `tokens`, `tokens/s`).
    pub unit: String,
    pub count: u64,
    pub avg: f64,
    pub min: f64,
    pub max: f64,
    /// Population standard deviation.
    pub std: f64,
    pub p1: f64,
    pub p5: f64,
    pub p10: f64,
    pub p25: f64,
    pub p50: f64,
    pub p75: f64,
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
    pub p99_9: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_uniform_values() {
        let mut d = Distribution::new();
        for v in 1..=1000 {
            d.record(v as f64);
        }
        let s = d.stats().unwrap();
        assert_eq!(s.count, 1000);
        assert_eq!(s.min, 1.0);
        assert_eq!(s.max, 1000.0);
        assert!((s.avg - 500.5).abs() < 1e-9);
        assert!((s.p50 - 500.0).abs() <= 0.5, "{}", s.p50);
        assert!((s.p99 - 990.0).abs() <= 1.0, "{}", s.p99);
        // population std of 1..=1000
        assert!((s.std - 288.6749).abs() < 1e-3, "{}", s.std);
    }

    #[test]
    fn merge_equals_recording_everything() {
        let (mut a, mut b, mut all) = (
            Distribution::new(),
            Distribution::new(),
            Distribution::new(),
        );
        for v in 0..500 {
            let x = (v as f64 * 0.37).sin().abs() * 100.0;
            if v % 3 == 0 {
                a.record(x)
            } else {
                b.record(x)
            }
            all.record(x);
        }
        a.merge(&b);
        let (sa, sall) = (a.stats().unwrap(), all.stats().unwrap());
        assert_eq!(sa.count, sall.count);
        assert!((sa.avg - sall.avg).abs() < 1e-9);
        assert!((sa.std - sall.std).abs() < 1e-9);
        assert_eq!(sa.p90, sall.p90);
        assert_eq!(sa.max, sall.max);
    }

    #[test]
    fn empty_has_no_stats_and_nan_is_ignored() {
        let mut d = Distribution::new();
        assert!(d.stats().is_none());
        d.record(f64::NAN);
        assert!(d.stats().is_none());
        d.record(-3.0);
        assert_eq!(d.stats().unwrap().max, 0.0);
    }

    // A hostile server's prompt time of -1e200 made a TTFT gap of 1e200: its square beside a
    // normal value overflowed, `std` was infinite, written `null` in summary.json (and `m2`
    // in histograms.json, which `canaryd merge` then could not read).
    #[test]
    fn a_huge_or_infinite_value_leaves_every_statistic_finite() {
        let mut d = Distribution::new();
        for v in [5.0, 1e200, 3.0, f64::INFINITY, 7.0] {
            d.record(v);
        }
        let s = d.stats().unwrap();
        assert_eq!(s.count, 5);
        assert_eq!(s.max, MAX_VALUE);
        for v in [s.avg, s.std, s.min, s.max, s.p50, s.p99] {
            assert!(v.is_finite(), "{s:?}");
        }
        let mut merged = Distribution::new();
        merged.merge(&d);
        merged.merge(&d);
        assert!(merged.stats().unwrap().std.is_finite());
        let json = serde_json::to_string(&s).unwrap();
        assert!(!json.contains("null"), "{json}");
    }

    #[test]
    fn sub_millisecond_values_keep_resolution() {
        let mut d = Distribution::new();
        for _ in 0..10 {
            d.record(0.012);
        }
        d.record(0.950);
        let s = d.stats().unwrap();
        assert_eq!(s.p50, 0.012);
        assert_eq!(s.max, 0.95);
    }
}

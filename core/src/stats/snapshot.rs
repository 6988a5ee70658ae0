//! [`DistributionSnapshot`]: a [`Distribution`] written out whole, so the runs of several
//! processes (the shards of one replay) can be merged into the distribution one process would
//! have built. Percentiles cannot be averaged; histograms can be added.
//!
//! The histogram is kept as its non-empty buckets, each as the highest value it holds and its
//! count: recording that value again lands in the same bucket, so a snapshot read back has the
//! very buckets it was written from. Its size is bounded by the histogram's (a few thousand
//! buckets at most for any range of values), never by the number of values.

use super::{Distribution, SCALE};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// A distribution as written to `histograms.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DistributionSnapshot {
    /// Values recorded.
    pub count: u64,
    /// Smallest value (exact); absent when empty.
    pub min: Option<f64>,
    /// Largest value (exact); absent when empty.
    pub max: Option<f64>,
    /// Mean (exact).
    pub mean: f64,
    /// Sum of squared deviations from the mean (Welford's `M2`).
    pub m2: f64,
    /// Stored values per unit (values are kept as `round(v * scale)`).
    pub scale: f64,
    /// Non-empty buckets: `[highest stored value of the bucket, count]`, ascending.
    pub buckets: Vec<(u64, u64)>,
}

/// A snapshot that cannot be a distribution's.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SnapshotError {
    /// Written with another quantum.
    #[error("scale {0} (expected {SCALE})")]
    Scale(f64),
    /// Bucket counts that do not add up to `count`.
    #[error("buckets hold {buckets} values, count says {count}")]
    Count {
        /// Sum of the bucket counts.
        buckets: u64,
        /// `count`.
        count: u64,
    },
    /// min/max missing on a non-empty one, or a value that is not finite.
    #[error("{0}")]
    Invalid(&'static str),
}

/// The most values a snapshot may say it holds: what an f64 counts exactly, and far from
/// u64's end however many shards are merged.
const MAX_COUNT: u64 = 1 << 53;

impl Distribution {
    /// This distribution, whole, for [`Distribution::from_snapshot`] elsewhere.
    pub fn snapshot(&self) -> DistributionSnapshot {
        let empty = self.count == 0;
        DistributionSnapshot {
            count: self.count,
            min: (!empty).then_some(self.min),
            max: (!empty).then_some(self.max),
            mean: self.mean,
            m2: self.m2,
            scale: SCALE,
            buckets: self
                .hist
                .iter_recorded()
                .map(|v| (v.value_iterated_to(), v.count_at_value()))
                .collect(),
        }
    }

    /// The distribution `s` was taken of.
    pub fn from_snapshot(s: &DistributionSnapshot) -> Result<Distribution, SnapshotError> {
        if s.scale != SCALE {
            return Err(SnapshotError::Scale(s.scale));
        }
        // A crafted file's counts could overflow the sum (a panic in debug builds, a wrapped
        // total that passes in release) or, merged, the distribution's own count.
        let buckets = s
            .buckets
            .iter()
            .try_fold(0u64, |sum, &(_, n)| sum.checked_add(n))
            .filter(|&sum| sum <= MAX_COUNT)
            .ok_or(SnapshotError::Invalid("bucket counts past 2^53"))?;
        if buckets != s.count {
            return Err(SnapshotError::Count {
                buckets,
                count: s.count,
            });
        }
        let mut d = Distribution::new();
        if s.count == 0 {
            return Ok(d);
        }
        let (Some(min), Some(max)) = (s.min, s.max) else {
            return Err(SnapshotError::Invalid("min and max missing"));
        };
        if ![min, max, s.mean, s.m2].iter().all(|v| v.is_finite()) {
            return Err(SnapshotError::Invalid("min, max, mean or m2 not finite"));
        }
        // What no distribution has: a standard deviation from them would be NaN. (A running
        // mean may round a hair past an extreme: allowed.)
        let slack = 1e-9 * (min.abs() + max.abs() + 1.0);
        if min > max || !(min - slack <= s.mean && s.mean <= max + slack) || s.m2 < 0.0 {
            return Err(SnapshotError::Invalid(
                "not min <= mean <= max, or m2 (the sum of squared deviations) negative",
            ));
        }
        let mut hist: Histogram<u64> = d.hist.clone();
        for &(v, n) in &s.buckets {
            hist.record_n(v.min(u64::MAX / 4), n)
                .map_err(|_| SnapshotError::Invalid("a bucket out of range"))?;
        }
        d.hist = hist;
        d.count = s.count;
        d.min = min;
        d.max = max;
        d.mean = s.mean;
        d.m2 = s.m2;
        Ok(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_read_back_is_the_same_distribution_and_merges_exactly() {
        let (mut a, mut b, mut all) = (
            Distribution::new(),
            Distribution::new(),
            Distribution::new(),
        );
        for v in 0..2000 {
            let x = (v as f64 * 0.37).sin().abs() * 3000.0 + 0.001 * v as f64;
            if v % 3 == 0 { &mut a } else { &mut b }.record(x);
            all.record(x);
        }
        let back = Distribution::from_snapshot(&a.snapshot()).unwrap();
        assert_eq!(back.stats(), a.stats());
        let json = serde_json::to_string(&b.snapshot()).unwrap();
        let b2 = Distribution::from_snapshot(&serde_json::from_str(&json).unwrap()).unwrap();
        let mut merged = back;
        merged.merge(&b2);
        let (m, e) = (merged.stats().unwrap(), all.stats().unwrap());
        assert_eq!((m.count, m.min, m.max), (e.count, e.min, e.max));
        // Every percentile from the same buckets as one distribution of everything.
        for (x, y) in [
            (m.p1, e.p1),
            (m.p50, e.p50),
            (m.p99, e.p99),
            (m.p99_9, e.p99_9),
        ] {
            assert_eq!(x, y);
        }
        assert!((m.avg - e.avg).abs() < 1e-9 && (m.std - e.std).abs() < 1e-9);
        assert_eq!(
            Distribution::from_snapshot(&Distribution::new().snapshot())
                .unwrap()
                .count(),
            0
        );
    }

    #[test]
    fn a_snapshot_that_does_not_add_up_is_refused() {
        let mut d = Distribution::new();
        d.record(4.0);
        let mut s = d.snapshot();
        s.count = 2;
        assert!(matches!(
            Distribution::from_snapshot(&s),
            Err(SnapshotError::Count { .. })
        ));
        let mut s = d.snapshot();
        s.scale = 1.0;
        assert!(Distribution::from_snapshot(&s).is_err());
        let mut s = d.snapshot();
        s.max = None;
        assert!(Distribution::from_snapshot(&s).is_err());
        // Finite but impossible: the merged summary's `std` was NaN (`null`).
        let mut s = d.snapshot();
        s.m2 = -1.0;
        assert!(matches!(
            Distribution::from_snapshot(&s),
            Err(SnapshotError::Invalid(_))
        ));
        let mut s = d.snapshot();
        s.mean = 5.0;
        assert!(
            Distribution::from_snapshot(&s).is_err(),
            "a mean above the max"
        );
        // A min above the max, within the mean's rounding slack of both: percentiles clamped
        // to [min, max] panicked.
        let mut s = d.snapshot();
        (s.min, s.max, s.mean) = (Some(1e12 + 1000.0), Some(1e12), 1e12);
        assert!(
            Distribution::from_snapshot(&s).is_err(),
            "a min above the max"
        );
        // Counts that overflow u64 when summed: wrapped, they used to add up to `count`.
        let mut s = d.snapshot();
        s.buckets = vec![(4_000, u64::MAX), (4_001, 2)];
        s.count = 1;
        assert!(matches!(
            Distribution::from_snapshot(&s),
            Err(SnapshotError::Invalid(m)) if m.contains("2^53")
        ));
    }
}

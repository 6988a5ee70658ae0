//! Cumulative histogram snapshots: per-run deltas, merging label sets, and quantile estimates
//! by linear interpolation inside buckets, the way PromQL's `histogram_quantile` does.

use super::{Family, Labels};
use canary_core::BucketQuantile;
use std::collections::HashMap;

/// Buckets one histogram may have, per label set and merged over its label sets. Real servers
/// expose tens (vLLM's finest has about 25). Past this a page is not a histogram canaryd uses:
/// merging and subtracting them would cost time and memory that grow with what a server
/// sends, and every sample in the scraper's ring (7,200 by default) keeps up to six.
pub const MAX_BUCKETS: usize = 128;

/// Label sets (without `le`) one histogram family may have: one per model or engine on real
/// servers, a few hundred with many adapters.
pub const MAX_LABEL_SETS: usize = 1024;

/// A histogram family on a page past [`MAX_BUCKETS`] or [`MAX_LABEL_SETS`]: not used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Oversized {
    /// More than [`MAX_BUCKETS`] buckets in one label set, or in all of them merged.
    Buckets,
    /// More than [`MAX_LABEL_SETS`] label sets.
    LabelSets,
}

impl std::fmt::Display for Oversized {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Oversized::Buckets => write!(f, "over {MAX_BUCKETS} buckets"),
            Oversized::LabelSets => write!(f, "over {MAX_LABEL_SETS} label sets"),
        }
    }
}

impl Family {
    /// Builds a snapshot per label set (without `le`) from `_bucket`, `_sum`/`_gsum` and
    /// `_count`/`_gcount` samples. Works on truncated expositions: a histogram without `+Inf`
    /// or `_count` takes its count from its last bucket. Linear in the family's samples.
    pub fn histograms(&self) -> Result<Vec<(Labels, HistogramSnapshot)>, Oversized> {
        let mut out: Vec<(Labels, HistogramSnapshot)> = Vec::new();
        let mut index: HashMap<Labels, usize> = HashMap::new();
        let mut slot = |labels: Labels, out: &mut Vec<(Labels, HistogramSnapshot)>| {
            if let Some(&i) = index.get(&labels) {
                return Ok(i);
            }
            if out.len() == MAX_LABEL_SETS {
                return Err(Oversized::LabelSets);
            }
            index.insert(labels.clone(), out.len());
            out.push((labels, HistogramSnapshot::default()));
            Ok(out.len() - 1)
        };
        let base = &self.name;
        for s in &self.samples {
            let Some(suffix) = s.name.strip_prefix(base.as_str()) else {
                continue;
            };
            match suffix {
                "_bucket" => {
                    let Some(le) = s.labels.get("le").and_then(super::line::parse_value) else {
                        continue;
                    };
                    let i = slot(s.labels.without(&["le"]), &mut out)?;
                    let buckets = &mut out[i].1.buckets;
                    if buckets.len() == MAX_BUCKETS {
                        return Err(Oversized::Buckets);
                    }
                    buckets.push((le, s.value));
                }
                "_sum" | "_gsum" => {
                    let i = slot(s.labels.clone(), &mut out)?;
                    out[i].1.sum = Some(s.value);
                }
                "_count" | "_gcount" => {
                    let i = slot(s.labels.clone(), &mut out)?;
                    out[i].1.count = Some(s.value);
                }
                _ => {}
            }
        }
        out.retain(|(_, h)| !h.buckets.is_empty() || h.count.is_some());
        for (_, h) in &mut out {
            h.normalize();
        }
        Ok(out)
    }

    /// The family's histograms merged over their label sets.
    pub fn merged_histogram(&self) -> Result<Option<HistogramSnapshot>, Oversized> {
        let mut merged: Option<HistogramSnapshot> = None;
        for (_, h) in self.histograms()? {
            let m = match merged {
                Some(m) => m.merge(&h),
                None => h,
            };
            if m.buckets.len() > MAX_BUCKETS {
                return Err(Oversized::Buckets);
            }
            merged = Some(m);
        }
        Ok(merged)
    }
}

/// How a histogram of durations or sizes contradicts itself ([`HistogramSnapshot::fault`]).
/// None of these come from a real client library: each is a broken or hostile exporter, and
/// any figure made from such a histogram (a negative mean time to first token) is wrong.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fault {
    /// `_sum` negative or not finite: durations and sizes are never negative.
    Sum(f64),
    /// A count, of a bucket (its `le`) or `_count` (`None`), negative or not finite.
    Count(Option<f64>, f64),
    /// `_count` differs from the `+Inf` bucket's count (the same count by definition).
    CountNotInf {
        /// `_count`.
        count: f64,
        /// The `+Inf` bucket's count.
        inf: f64,
    },
    /// Cumulative counts fall as the bound rises: `(le, count)` of the lower bucket, then of
    /// the higher one.
    Falls((f64, f64), (f64, f64)),
}

/// A bucket bound as the exposition writes it (`+Inf`, not Rust's `inf`).
fn le(bound: f64) -> String {
    if bound == f64::INFINITY {
        "+Inf".to_owned()
    } else {
        bound.to_string()
    }
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Fault::Sum(v) => write!(f, "_sum = {v}, a duration or size below 0 or not finite"),
            Fault::Count(Some(b), v) => {
                write!(f, "bucket le=\"{}\" = {v}, not a count", le(b))
            }
            Fault::Count(None, v) => write!(f, "_count = {v}, not a count"),
            Fault::CountNotInf { count, inf } => {
                write!(f, "_count = {count} but the +Inf bucket = {inf}")
            }
            Fault::Falls((lo, a), (hi, b)) => write!(
                f,
                "cumulative bucket counts fall as the bound rises (le=\"{}\" = {a}, \
                 le=\"{}\" = {b})",
                le(lo),
                le(hi)
            ),
        }
    }
}

/// One histogram (one label set, or several merged) at one scrape.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct HistogramSnapshot {
    /// `(le, cumulative count)`, sorted by `le`; the last is `+Inf` in a complete exposition.
    pub buckets: Vec<(f64, f64)>,
    /// `_sum`, when the exposition had it.
    pub sum: Option<f64>,
    /// `_count` (or the `+Inf` bucket), when the exposition had either.
    pub count: Option<f64>,
}

impl HistogramSnapshot {
    /// Sorts buckets, drops duplicate bounds and fills `count` from `+Inf` when missing.
    pub(crate) fn normalize(&mut self) {
        self.buckets.retain(|(le, _)| !le.is_nan());
        self.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        self.buckets.dedup_by(|later, earlier| {
            if later.0 == earlier.0 {
                earlier.1 = later.1;
                true
            } else {
                false
            }
        });
        if self.count.is_none() {
            self.count = self
                .buckets
                .last()
                .filter(|(le, _)| *le == f64::INFINITY)
                .map(|b| b.1);
        }
    }

    /// How this histogram of durations or sizes (one label set, normalized) contradicts
    /// itself, the first fault found; `None` when its numbers hang together. A truncated
    /// exposition (no `+Inf`, no `_count`) is not at fault.
    pub fn fault(&self) -> Option<Fault> {
        let not_count = |v: f64| !v.is_finite() || v < 0.0;
        if let Some(&(le, c)) = self.buckets.iter().find(|b| not_count(b.1)) {
            return Some(Fault::Count(Some(le), c));
        }
        if let Some(c) = self.count.filter(|&c| not_count(c)) {
            return Some(Fault::Count(None, c));
        }
        if let Some(s) = self.sum.filter(|s| !s.is_finite() || *s < 0.0) {
            return Some(Fault::Sum(s));
        }
        if let Some(w) = self.buckets.windows(2).find(|w| w[1].1 < w[0].1) {
            return Some(Fault::Falls(w[0], w[1]));
        }
        match (self.count, self.buckets.last()) {
            (Some(count), Some(&(le, inf))) if le == f64::INFINITY && count != inf => {
                Some(Fault::CountNotInf { count, inf })
            }
            _ => None,
        }
    }

    /// Whether the `+Inf` bucket is present (false for a truncated exposition).
    pub fn is_complete(&self) -> bool {
        self.buckets.last().is_some_and(|b| b.0 == f64::INFINITY)
    }

    /// Number of observations: `count`, else the last bucket.
    pub fn total(&self) -> f64 {
        self.count
            .or_else(|| self.buckets.last().map(|b| b.1))
            .unwrap_or(0.0)
    }

    /// Whether cumulative counts never decrease with `le`.
    pub fn is_monotone(&self) -> bool {
        self.buckets.windows(2).all(|w| w[0].1 <= w[1].1)
    }

    /// Mean observation (`sum / count`), when both are known and the count is positive.
    pub fn mean(&self) -> Option<f64> {
        let n = self.total();
        self.sum.filter(|_| n > 0.0).map(|s| s / n)
    }

    /// Cumulative count of observations `<= le`, reading the step function of the buckets.
    fn cumulative_at(&self, le: f64) -> f64 {
        // Buckets are sorted by bound (`normalize`, `merge`), so a binary search finds it.
        match self.buckets.partition_point(|b| b.0 <= le) {
            0 => 0.0,
            n => self.buckets[n - 1].1,
        }
    }

    /// Adds two histograms (e.g. two label sets). Bucket bounds are the union; where one side
    /// lacks a bound, its cumulative count at the next lower bound is used.
    pub fn merge(&self, other: &HistogramSnapshot) -> HistogramSnapshot {
        let mut les: Vec<f64> = self
            .buckets
            .iter()
            .chain(&other.buckets)
            .map(|b| b.0)
            .collect();
        les.sort_by(f64::total_cmp);
        les.dedup();
        let add = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) => Some(a + b),
            (x, None) | (None, x) => x,
        };
        HistogramSnapshot {
            buckets: les
                .into_iter()
                .map(|le| (le, self.cumulative_at(le) + other.cumulative_at(le)))
                .collect(),
            sum: add(self.sum, other.sum),
            count: add(self.count, other.count),
        }
    }

    /// `self - earlier`, bucket by bucket: what was observed between two scrapes. A decrease
    /// anywhere means the server restarted (counters reset), so the delta counts from zero and
    /// `self` is returned unchanged.
    pub fn delta(&self, earlier: &HistogramSnapshot) -> HistogramSnapshot {
        if self.is_reset_from(earlier) {
            return self.clone();
        }
        HistogramSnapshot {
            buckets: self
                .buckets
                .iter()
                .map(|&(le, c)| (le, c - earlier.cumulative_at(le)))
                .collect(),
            sum: self.sum.map(|s| s - earlier.sum.unwrap_or(0.0)),
            count: self.count.map(|c| c - earlier.count.unwrap_or(0.0)),
        }
    }

    /// Whether some count, or the sum, went down from `earlier`: the server restarted (see
    /// [`HistogramSnapshot::delta`]). A sum of durations or sizes only grows; a delta of one
    /// that fell would give a negative mean.
    pub fn is_reset_from(&self, earlier: &HistogramSnapshot) -> bool {
        self.total() < earlier.total()
            || matches!((self.sum, earlier.sum), (Some(s), Some(e)) if s < e)
            || self
                .buckets
                .iter()
                .any(|&(le, c)| c < earlier.cumulative_at(le))
    }

    /// Estimates the `q`-quantile (0..=1) like PromQL `histogram_quantile`: find the bucket
    /// holding rank `q * total` and interpolate linearly between its bounds (the lowest bucket
    /// starts at 0 when its bound is positive). A rank in the `+Inf` bucket gives the highest
    /// finite bound. `None` with no observations or no buckets.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        self.quantile_bucket(q).map(|b| b.estimate)
    }

    /// The `q`-quantile (0..=1) as what the buckets know of it: the bucket holding rank
    /// `q * total` bounds it, and [`BucketQuantile::estimate`] interpolates inside that bucket
    /// as [`HistogramSnapshot::quantile`] does. `None` with no observations or no buckets.
    pub fn quantile_bucket(&self, q: f64) -> Option<BucketQuantile> {
        if !(0.0..=1.0).contains(&q) || self.buckets.is_empty() {
            return None;
        }
        // Like Prometheus, repair non-monotone input by carrying the running maximum.
        let mut running = 0.0f64;
        let cum: Vec<(f64, f64)> = self
            .buckets
            .iter()
            .map(|&(le, c)| {
                running = running.max(c);
                (le, running)
            })
            .collect();
        let total = cum.last().map_or(0.0, |b| b.1);
        if total <= 0.0 {
            return None;
        }
        let rank = q * total;
        let i = cum
            .iter()
            .position(|b| b.1 >= rank)
            .unwrap_or(cum.len() - 1);
        let (upper, count) = cum[i];
        // Latencies and sizes are never negative: the lowest bucket starts at 0 (or at its
        // own bound, when that is not positive).
        let (lower, below) = match i {
            0 => (upper.min(0.0), 0.0),
            _ => cum[i - 1],
        };
        if upper == f64::INFINITY {
            return Some(BucketQuantile {
                lower_bound: if i == 0 { 0.0 } else { lower },
                upper_bound: None,
                estimate: if i == 0 { 0.0 } else { lower },
            });
        }
        let estimate = if count <= below || upper <= lower {
            upper
        } else {
            lower + (upper - lower) * (rank - below) / (count - below)
        };
        Some(BucketQuantile {
            lower_bound: lower,
            upper_bound: Some(upper),
            estimate,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(buckets: &[(f64, f64)], sum: f64) -> HistogramSnapshot {
        let mut h = HistogramSnapshot {
            buckets: buckets.to_vec(),
            sum: Some(sum),
            count: None,
        };
        h.normalize();
        h
    }

    #[test]
    fn quantile_interpolates_inside_buckets() {
        let x = h(
            &[(0.1, 10.0), (0.5, 30.0), (1.0, 40.0), (f64::INFINITY, 40.0)],
            12.0,
        );
        assert_eq!(x.count, Some(40.0));
        // rank 20 lies halfway through (0.1, 0.5].
        assert!((x.quantile(0.5).unwrap() - 0.3).abs() < 1e-12);
        // rank 4 in the first bucket, interpolated from 0.
        assert!((x.quantile(0.1).unwrap() - 0.04).abs() < 1e-12);
        assert_eq!(x.quantile(1.0), Some(1.0));
        assert!((x.mean().unwrap() - 0.3).abs() < 1e-12);
    }

    #[test]
    fn rank_in_inf_bucket_gives_highest_finite_bound() {
        let x = h(&[(1.0, 1.0), (2.0, 2.0), (f64::INFINITY, 10.0)], 100.0);
        assert_eq!(x.quantile(0.99), Some(2.0));
        let b = x.quantile_bucket(0.99).unwrap();
        assert_eq!((b.lower_bound, b.upper_bound), (2.0, None));
    }

    // Issue 16, item 3: a percentile inside a bucket printed as if it were exact.
    #[test]
    fn quantile_bucket_bounds_the_value_by_its_bucket() {
        let x = h(
            &[(0.1, 10.0), (0.5, 30.0), (1.0, 40.0), (f64::INFINITY, 40.0)],
            12.0,
        );
        let p50 = x.quantile_bucket(0.5).unwrap();
        assert_eq!((p50.lower_bound, p50.upper_bound), (0.1, Some(0.5)));
        assert!((p50.estimate - 0.3).abs() < 1e-12);
        let p10 = x.quantile_bucket(0.1).unwrap();
        assert_eq!((p10.lower_bound, p10.upper_bound), (0.0, Some(0.1)));
        let p100 = x.quantile_bucket(1.0).unwrap();
        assert_eq!((p100.lower_bound, p100.upper_bound), (0.5, Some(1.0)));
    }

    #[test]
    fn empty_histogram_has_no_quantile() {
        let x = h(&[(1.0, 0.0), (f64::INFINITY, 0.0)], 0.0);
        assert_eq!(x.quantile(0.5), None);
        assert_eq!(HistogramSnapshot::default().quantile(0.5), None);
        assert_eq!(x.quantile(1.5), None);
    }

    #[test]
    fn delta_subtracts_and_handles_reset() {
        let a = h(&[(1.0, 5.0), (f64::INFINITY, 8.0)], 10.0);
        let b = h(&[(1.0, 7.0), (f64::INFINITY, 13.0)], 25.0);
        let d = b.delta(&a);
        assert_eq!(d.buckets, vec![(1.0, 2.0), (f64::INFINITY, 5.0)]);
        assert_eq!(d.sum, Some(15.0));
        assert_eq!(d.count, Some(5.0));
        // Server restarted between the scrapes: counts went down, start from zero.
        let r = h(&[(1.0, 1.0), (f64::INFINITY, 2.0)], 1.0);
        assert_eq!(r.delta(&b), r);
    }

    // Audit (hostile servers), finding 4: counts that grew while the sum fell gave a run
    // delta with a negative sum, so a negative mean.
    #[test]
    fn a_sum_that_falls_is_a_reset_not_a_negative_delta() {
        let a = h(&[(1.0, 5.0), (f64::INFINITY, 8.0)], 10.0);
        let b = h(&[(1.0, 7.0), (f64::INFINITY, 13.0)], 4.0);
        assert!(b.is_reset_from(&a));
        assert_eq!(b.delta(&a), b);
        assert_eq!(a.fault(), None);
        assert_eq!(h(&[(1.0, 5.0)], -1.0).fault(), Some(Fault::Sum(-1.0)));
        let nan = h(&[(1.0, f64::NAN), (f64::INFINITY, 8.0)], 1.0).fault();
        assert!(
            matches!(nan, Some(Fault::Count(Some(le), v)) if le == 1.0 && v.is_nan()),
            "{nan:?}"
        );
    }

    #[test]
    fn merge_adds_matching_and_steps_missing_bounds() {
        let a = h(&[(1.0, 1.0), (f64::INFINITY, 2.0)], 3.0);
        let b = h(&[(0.5, 1.0), (1.0, 3.0), (f64::INFINITY, 3.0)], 2.0);
        let m = a.merge(&b);
        assert_eq!(
            m.buckets,
            vec![(0.5, 1.0), (1.0, 4.0), (f64::INFINITY, 5.0)]
        );
        assert_eq!(m.count, Some(5.0));
        assert_eq!(m.sum, Some(5.0));
    }

    #[test]
    fn truncated_histogram_uses_last_bucket() {
        let x = h(&[(1.0, 3.0), (2.0, 5.0)], 4.0);
        assert!(!x.is_complete());
        assert_eq!(x.count, None);
        assert_eq!(x.total(), 5.0);
        assert!(x.quantile(0.5).is_some());
    }
}

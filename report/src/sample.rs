//! Downsampling that keeps the tails: a 100,000-request run must draw in a few hundred KB,
//! and its p99.9 and maximum must still be on the page.
//!
//! * CDFs keep exact points (real values at their real ranks): evenly spaced ranks through the
//!   body and every rank of the top tail, the maximum always included.
//! * Time series fold into buckets that keep each bucket's count, minimum, median, p99 and
//!   maximum.
//! * Histograms bin the body and count what lies beyond, saying so.

/// The value at quantile `q` (0–1) of `sorted` by nearest rank (always an observed value);
/// NaN when empty.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Sorts finite values ascending (NaN and infinities dropped).
pub fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.retain(|x| x.is_finite());
    v.sort_by(f64::total_cmp);
    v
}

/// Points `(value, fraction ≤ value)` of the empirical CDF of `sorted`: every point when there
/// are at most `body + tail`, else `body` evenly spaced ranks and each of the top `tail` ranks.
pub fn cdf_points(sorted: &[f64], body: usize, tail: usize) -> Vec<(f64, f64)> {
    let n = sorted.len();
    let at = |i: usize| (sorted[i], (i + 1) as f64 / n as f64);
    if n <= body + tail {
        return (0..n).map(at).collect();
    }
    let tail_start = n - tail;
    let mut out: Vec<(f64, f64)> = (0..body).map(|k| at(k * tail_start / body)).collect();
    out.extend((tail_start..n).map(at));
    out
}

/// Histogram bins of the body of a distribution, and what lies beyond them.
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    /// `(low, high, count)` per bin; the last bin includes its high edge.
    pub bins: Vec<(f64, f64, u64)>,
    /// Values above the last bin (beyond the cut).
    pub above: u64,
    /// Where the bins end, when values lie beyond them.
    pub cut: Option<Cut>,
    /// The largest value in the bins.
    pub top: f64,
}

/// Why a histogram's bins end before its maximum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// At p99.9 (more than 1,000 values).
    P999,
    /// At the largest value within [`FAR`] interquartile ranges above the upper quartile:
    /// the values beyond would squash the body into one bar (one 1e9 ms TTFT among values of
    /// a few ms), at any count.
    Far,
}

/// How many interquartile ranges above the upper quartile a value lies to be left out of a
/// histogram's bins ([`Cut::Far`]). Far beyond Tukey's 3: a long tail of real latencies stays
/// in the bins; only values that would leave the body a single bar are cut.
pub const FAR: f64 = 50.0;

/// `bins` equal bins from the minimum to the maximum, or to p99.9 when more than 1,000 values
/// (so one outlier does not squash the body into one bar; the rest is counted in `above`), or
/// to the largest value not far beyond the body ([`Cut::Far`]), whichever is lower. Any finite
/// values: the bins' edges stay finite.
pub fn histogram(sorted: &[f64], bins: usize) -> Histogram {
    let Some(&lo) = sorted.first() else {
        return Histogram {
            bins: Vec::new(),
            above: 0,
            cut: None,
            top: f64::NAN,
        };
    };
    let max = sorted[sorted.len() - 1];
    let mut hi = max;
    let mut cut = None;
    if sorted.len() > 1000 {
        hi = quantile(sorted, 0.999);
        cut = (hi < max).then_some(Cut::P999);
    }
    let (q1, q3) = (quantile(sorted, 0.25), quantile(sorted, 0.75));
    // A body of equal values (ITLs of 0 ms) has no spread to measure against: no cut.
    let fence = q3 + FAR * (q3 - q1);
    if q3 > q1 && hi > fence {
        // The largest value within the fence (q3 at least, so never empty).
        hi = sorted[sorted.partition_point(|v| *v <= fence) - 1];
        cut = Some(Cut::Far);
    }
    let bins = bins.max(1);
    let spans = hi > lo && (hi - lo).is_finite();
    let width = if spans { (hi - lo) / bins as f64 } else { 1.0 };
    let mut counts = vec![0u64; bins];
    let mut above = 0;
    for &v in sorted {
        if v > hi {
            above += 1;
        } else {
            let i = (((v - lo) / width) as usize).min(bins - 1);
            counts[i] += 1;
        }
    }
    Histogram {
        bins: counts
            .into_iter()
            .enumerate()
            .map(|(i, c)| {
                // The last edge is the cut itself, not a sum rounded off it.
                let high = if i + 1 == bins && spans {
                    hi
                } else {
                    lo + (i + 1) as f64 * width
                };
                (lo + i as f64 * width, high, c)
            })
            .collect(),
        above,
        cut,
        top: hi,
    }
}

/// One time bucket's distribution.
#[derive(Debug, Clone, PartialEq)]
pub struct Bucket {
    /// Bucket start (the x axis unit, s).
    pub t0: f64,
    /// Bucket end.
    pub t1: f64,
    /// Values in it.
    pub count: usize,
    /// Smallest.
    pub min: f64,
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

/// Folds `(t, value)` points into `buckets` equal buckets over `[t0, t1]`; empty buckets
/// are left out.
pub fn buckets(points: &[(f64, f64)], t0: f64, t1: f64, buckets: usize) -> Vec<Bucket> {
    let buckets = buckets.max(1);
    let width = if t1 > t0 {
        (t1 - t0) / buckets as f64
    } else {
        1.0
    };
    let mut by: Vec<Vec<f64>> = vec![Vec::new(); buckets];
    for &(t, v) in points {
        if t.is_finite() && v.is_finite() {
            let i = (((t - t0) / width).max(0.0) as usize).min(buckets - 1);
            by[i].push(v);
        }
    }
    by.into_iter()
        .enumerate()
        .filter(|(_, v)| !v.is_empty())
        .map(|(i, v)| {
            let s = sorted(v);
            Bucket {
                t0: t0 + i as f64 * width,
                t1: t0 + (i + 1) as f64 * width,
                count: s.len(),
                min: s[0],
                p50: quantile(&s, 0.5),
                p99: quantile(&s, 0.99),
                max: s[s.len() - 1],
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_quantiles_are_observed_values() {
        let s: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&s, 0.5), 50.0);
        assert_eq!(quantile(&s, 0.99), 99.0);
        assert_eq!(quantile(&s, 1.0), 100.0);
        assert_eq!(quantile(&s, 0.0), 1.0);
        assert!(quantile(&[], 0.5).is_nan());
    }

    #[test]
    fn a_large_cdf_keeps_every_tail_point_and_the_maximum() {
        let s: Vec<f64> = (0..100_000).map(f64::from).collect();
        let pts = cdf_points(&s, 1000, 1000);
        assert_eq!(pts.len(), 2000);
        // The top 1 % is exact, point for point, up to the maximum at fraction 1.
        assert_eq!(pts[1000], (99_000.0, 0.99001));
        assert_eq!(*pts.last().unwrap(), (99_999.0, 1.0));
        assert!(pts.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1));
        // A small one is drawn whole.
        assert_eq!(cdf_points(&s[..10], 1000, 1000).len(), 10);
    }

    #[test]
    fn histogram_cuts_at_p99_9_and_counts_the_rest() {
        let mut v: Vec<f64> = (0..10_000).map(|i| f64::from(i % 100)).collect();
        v.extend([1e6; 5]);
        let h = histogram(&sorted(v), 10);
        assert_eq!(h.bins.len(), 10);
        assert_eq!(h.above, 5);
        assert_eq!(h.bins.iter().map(|b| b.2).sum::<u64>(), 10_000);
        assert_eq!(h.bins[9].1, 99.0);
        assert_eq!(h.cut, Some(Cut::P999));
    }

    #[test]
    fn one_huge_value_among_few_is_counted_beyond_the_bins() {
        // 20 values of a few ms and one of 1e9 ms (or canaryd's clamp, or near the largest
        // float): the bins span the few ms, the huge one is counted above them.
        for huge in [1e9, 4.6e15, 1e308] {
            let mut v: Vec<f64> = (0..20).map(|i| 1.0 + f64::from(i) / 10.0).collect();
            v.push(huge);
            let h = histogram(&sorted(v), 60);
            assert_eq!((h.above, h.cut), (1, Some(Cut::Far)), "{huge}");
            assert_eq!(h.bins.last().unwrap().1, 2.9, "{huge}");
            assert_eq!(h.bins.iter().map(|b| b.2).sum::<u64>(), 20);
        }
        // A long tail of real latencies stays in the bins.
        let v: Vec<f64> = (1..=100).map(|i| f64::from(i) * f64::from(i)).collect();
        let h = histogram(&sorted(v), 60);
        assert_eq!((h.above, h.cut), (0, None));
        // Zeros (ITLs of one read) and one huge value: no spread to judge far by, all binned.
        let mut v = vec![0.0; 30];
        v.push(1e9);
        let h = histogram(&sorted(v), 60);
        assert_eq!((h.above, h.cut, h.top), (0, None, 1e9));
        assert!(h.bins.iter().all(|b| b.0.is_finite() && b.1.is_finite()));
    }

    #[test]
    fn buckets_keep_min_and_max() {
        let pts: Vec<(f64, f64)> = (0..1000).map(|i| (f64::from(i) / 100.0, 1.0)).collect();
        let mut pts = pts;
        pts.push((5.0, 500.0));
        pts.push((5.01, 0.001));
        let b = buckets(&pts, 0.0, 10.0, 10);
        assert_eq!(b.len(), 10);
        assert_eq!(b[5].max, 500.0);
        assert_eq!(b[5].min, 0.001);
        assert_eq!(b.iter().map(|b| b.count).sum::<usize>(), 1002);
    }
}

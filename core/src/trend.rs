//! How TTFT moved through a run: the least-squares slope of each measured request's TTFT
//! against its send time. A server that takes requests in slower than they are sent queues
//! the rest, and each one waits longer than the one before: under even arrivals at rate R to
//! a server that serves C < R, TTFT grows by R/C − 1 seconds per second of sending. A short
//! probe can meet its SLO while that queue is still small, so the capacity search reads the
//! slope as well as the verdict (`canaryd sweep --find-max-rate`).

use serde::{Deserialize, Serialize};

/// Running sums for the fit, O(1) in memory whatever the run's length. Besides the fit's
/// own sums they keep those of neighbours in the order requests are added (as they
/// complete: near send order for a first-come server), for the residuals' lag-1
/// autocorrelation that widens the slope's standard error.
#[derive(Debug, Clone, Default)]
pub(crate) struct TrendSums {
    /// The first send, ms, and the first TTFT: taken from both so the sums stay small.
    origin: Option<(f64, f64)>,
    n: u64,
    sx: f64,
    sy: f64,
    sxx: f64,
    sxy: f64,
    syy: f64,
    /// Σ x_i·x_{i+1}, Σ y_i·y_{i+1}, Σ x_i·y_{i+1}, Σ y_i·x_{i+1} over neighbours.
    lag_xx: f64,
    lag_yy: f64,
    lag_xy: f64,
    lag_yx: f64,
    /// The first and the last point added, (x, y).
    first: (f64, f64),
    last: (f64, f64),
    first_s: f64,
    last_s: f64,
}

impl TrendSums {
    /// One request sent at `sent_ms` whose first token came `ttft_ms` later.
    pub fn add(&mut self, sent_ms: f64, ttft_ms: f64) {
        if !sent_ms.is_finite() || !ttft_ms.is_finite() {
            return;
        }
        let (origin_ms, origin_ttft) = *self.origin.get_or_insert((sent_ms, ttft_ms));
        let x = (sent_ms - origin_ms) / 1000.0;
        let y = ttft_ms - origin_ttft;
        if self.n == 0 {
            (self.first_s, self.last_s) = (x, x);
            self.first = (x, y);
        } else {
            let (px, py) = self.last;
            self.lag_xx += px * x;
            self.lag_yy += py * y;
            self.lag_xy += px * y;
            self.lag_yx += py * x;
        }
        self.last = (x, y);
        self.first_s = self.first_s.min(x);
        self.last_s = self.last_s.max(x);
        self.n += 1;
        self.sx += x;
        self.sy += y;
        self.sxx += x * x;
        self.sxy += x * y;
        self.syy += y * y;
    }

    /// The fit, when there are at least [`TtftTrend::MIN_REQUESTS`] requests sent over a
    /// span of [`TtftTrend::MIN_SPAN_S`] or more.
    pub fn trend(&self) -> Option<TtftTrend> {
        let n = self.n as f64;
        let span_s = self.last_s - self.first_s;
        if self.n < TtftTrend::MIN_REQUESTS || span_s < TtftTrend::MIN_SPAN_S {
            return None;
        }
        let var = self.sxx - self.sx * self.sx / n;
        let cov = self.sxy - self.sx * self.sy / n;
        (var > 0.0).then(|| {
            let slope = cov / var;
            TtftTrend {
                requests: self.n,
                span_s,
                slope_ms_per_s: slope,
                slope_se_ms_per_s: self.slope_se(slope, var, cov),
            }
        })
    }

    /// The slope's standard error: the least-squares one, σ̂/√Sxx with σ̂² the residuals'
    /// mean square over n − 2, times √((1 + ρ)/(1 − ρ)) for ρ their lag-1 autocorrelation
    /// (0 when negative, at most [`TtftTrend::MAX_LAG1`]): neighbouring requests share a
    /// batch and a stall, so n requests carry the information of n(1 − ρ)/(1 + ρ)
    /// independent ones (the effective sample size of a trend under AR(1) noise; Santer et
    /// al. 2000, J. Geophys. Res. 105(D6)). `None` when the residuals are all zero.
    fn slope_se(&self, slope: f64, var: f64, cov: f64) -> Option<f64> {
        let n = self.n as f64;
        let mean_y = self.sy / n;
        let a = mean_y - slope * self.sx / n;
        // Σ e_i² = Syy − b·Sxy over centred sums; clamped: rounding can take it under 0.
        let ss = (self.syy - self.sy * mean_y - slope * cov).max(0.0);
        if ss <= 0.0 {
            return None;
        }
        // Σ e_i·e_{i+1} with e = y − a − b·x, expanded over the neighbour sums: the heads
        // (i = 1..n−1) leave out the last point, the tails (i = 2..n) the first.
        let ((x1, y1), (xn, yn)) = (self.first, self.last);
        let (head_x, head_y) = (self.sx - xn, self.sy - yn);
        let (tail_x, tail_y) = (self.sx - x1, self.sy - y1);
        let b = slope;
        let lag = self.lag_yy - a * (head_y + tail_y) - b * (self.lag_yx + self.lag_xy)
            + (n - 1.0) * a * a
            + a * b * (head_x + tail_x)
            + b * b * self.lag_xx;
        let rho = (lag / ss).clamp(0.0, TtftTrend::MAX_LAG1);
        let plain = (ss / (n - 2.0) / var).sqrt();
        Some(plain * ((1.0 + rho) / (1.0 - rho)).sqrt())
    }
}

/// The measured completed requests' TTFT against their send times, fitted by least squares:
/// an estimate (a line through noisy points), from each request's exact times.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TtftTrend {
    /// Requests in the fit: measured, with a first token.
    pub requests: u64,
    /// Their first to last send, seconds.
    pub span_s: f64,
    /// TTFT's growth per second of sending, ms/s (negative: it fell).
    pub slope_ms_per_s: f64,
    /// The slope's standard error, ms/s, widened for neighbouring requests' correlation
    /// (an estimate of an estimate's spread). Absent when the points lie on the line, and
    /// in summaries written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slope_se_ms_per_s: Option<f64>,
}

impl TtftTrend {
    /// Fewer points than this fit noise.
    pub const MIN_REQUESTS: u64 = 10;
    /// Over a shorter span a slope is extrapolated too far to mean a rate.
    pub const MIN_SPAN_S: f64 = 0.1;
    /// The lag-1 autocorrelation the standard error allows for at most (a factor of 14):
    /// at 1 it would be infinite.
    pub const MAX_LAG1: f64 = 0.99;

    /// TTFT's rise over the span the fit covers, ms.
    pub fn growth_ms(&self) -> f64 {
        self.slope_ms_per_s * self.span_s
    }

    /// The share of the sending rate the server took requests in at, if the rise is its
    /// queue growing: C/R = 1 / (1 + slope), with the slope in seconds per second. 1 or more
    /// when TTFT did not rise.
    pub fn served_share(&self) -> f64 {
        1.0 / (1.0 + self.slope_ms_per_s.max(0.0) / 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Even arrivals at `rate` to a server that serves `capacity` per second, one at a time
    /// in order, each first token `base_ms` after its turn starts.
    fn queue(rate: f64, capacity: f64, n: u32, base_ms: f64) -> TrendSums {
        let mut sums = TrendSums::default();
        let mut free_at_ms = 0.0_f64;
        for i in 0..n {
            let sent = 5_000.0 + i as f64 * 1000.0 / rate;
            let start = sent.max(free_at_ms);
            free_at_ms = start + 1000.0 / capacity;
            sums.add(sent, start - sent + base_ms);
        }
        sums
    }

    #[test]
    fn a_server_slower_than_the_sends_shows_its_share_and_a_faster_one_none() {
        // 112.5 req/s sent to a server of 107.3: TTFT grows 48.5 ms per second sent.
        let t = queue(112.5, 107.3, 225, 7.0).trend().unwrap();
        assert!(
            (t.slope_ms_per_s - 1000.0 * (112.5 / 107.3 - 1.0)).abs() < 1.0,
            "{t:?}"
        );
        assert!((t.served_share() - 107.3 / 112.5).abs() < 1e-3, "{t:?}");
        assert!((t.span_s - 224.0 / 112.5).abs() < 1e-9, "{t:?}");
        assert!((t.growth_ms() - t.slope_ms_per_s * t.span_s).abs() < 1e-9);
        // Under its capacity nothing queues: no rise, the whole rate served.
        let t = queue(100.0, 107.3, 200, 7.0).trend().unwrap();
        assert!(t.slope_ms_per_s.abs() < 1e-9, "{t:?}");
        assert_eq!(t.served_share(), 1.0);
    }

    #[test]
    fn too_few_requests_or_too_short_a_span_fit_nothing() {
        assert_eq!(queue(100.0, 50.0, 9, 1.0).trend(), None);
        // 10 requests in 9 ms.
        assert_eq!(queue(1000.0, 50.0, 10, 1.0).trend(), None);
        assert!(queue(100.0, 50.0, 11, 1.0).trend().is_some());
        let mut sums = TrendSums::default();
        sums.add(f64::NAN, 1.0);
        sums.add(1.0, f64::INFINITY);
        assert_eq!(sums.trend(), None);
    }

    /// The slope and its widened standard error computed directly, two passes over the
    /// points in the order given.
    fn two_pass(points: &[(f64, f64)]) -> (f64, f64) {
        let n = points.len() as f64;
        let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
        let my = points.iter().map(|p| p.1).sum::<f64>() / n;
        let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
        let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
        let b = sxy / sxx;
        let e: Vec<f64> = points.iter().map(|p| p.1 - my - b * (p.0 - mx)).collect();
        let ss: f64 = e.iter().map(|e| e * e).sum();
        let lag: f64 = e.windows(2).map(|w| w[0] * w[1]).sum();
        let rho = (lag / ss).clamp(0.0, TtftTrend::MAX_LAG1);
        (
            b,
            (ss / (n - 2.0) / sxx).sqrt() * ((1.0 + rho) / (1.0 - rho)).sqrt(),
        )
    }

    /// Even arrivals at `rate` for `n` requests to a server that serves `capacity` per
    /// second in batches of 8 (a request's first token later by its place in the batch, 0.4
    /// ms a place) and stops for `stall_ms` at `stall_at_s` of sending: (send s, TTFT ms).
    fn batched(
        rate: f64,
        capacity: f64,
        n: u32,
        stall_at_s: f64,
        stall_ms: f64,
    ) -> Vec<(f64, f64)> {
        let mut free_at_ms = 0.0_f64;
        let mut stalled = false;
        (0..n)
            .map(|i| {
                let sent = i as f64 * 1000.0 / rate;
                if !stalled && sent >= 1000.0 * stall_at_s {
                    stalled = true;
                    free_at_ms = free_at_ms.max(sent) + stall_ms;
                }
                let start = sent.max(free_at_ms);
                free_at_ms = start + 1000.0 / capacity;
                (sent / 1000.0, start - sent + 7.0 + 0.4 * (i % 8) as f64)
            })
            .collect()
    }

    fn sums(points: &[(f64, f64)]) -> TrendSums {
        let mut sums = TrendSums::default();
        for &(x, y) in points {
            sums.add(5_000.0 + 1000.0 * x, y);
        }
        sums
    }

    // The running sums give the slope and the standard error the points give directly,
    // whatever the shape: flat with batch jitter, a queue, a stall and its drain.
    #[test]
    fn the_slopes_error_is_the_least_squares_one_widened_for_neighbours() {
        for (rate, stall_ms) in [(90.0, 0.0), (109.4, 0.0), (90.0, 150.0), (112.5, 150.0)] {
            let points = batched(rate, 107.3, (2.0 * rate) as u32, 1.5, stall_ms);
            let t = sums(&points).trend().unwrap();
            let (slope, se) = two_pass(&points);
            let got = t.slope_se_ms_per_s.unwrap();
            assert!((t.slope_ms_per_s - slope).abs() < 1e-6, "{t:?} vs {slope}");
            assert!((got - se).abs() < 1e-6 * se.max(1.0), "{t:?} vs {se}");
        }
        // Batch jitter alternates, its neighbours anti-correlated: the error is not narrowed
        // for that (ρ is taken as 0), only widened when neighbours move together.
        let flat = batched(90.0, 107.3, 180, 1.5, 0.0);
        let t = sums(&flat).trend().unwrap();
        assert!(t.slope_ms_per_s.abs() < 1.0, "{t:?}");
        // A stall's bump moves neighbours together: its error is wider than the error of
        // the same points in an order that breaks the runs up.
        let stall = batched(90.0, 107.3, 180, 1.5, 150.0);
        let bump = sums(&stall).trend().unwrap();
        // 67 is prime to 180: each point's neighbour was sent 67 places away.
        let dealt: Vec<(f64, f64)> = (0..stall.len()).map(|i| stall[i * 67 % 180]).collect();
        let shuffled = sums(&dealt).trend().unwrap();
        assert!((bump.slope_ms_per_s - shuffled.slope_ms_per_s).abs() < 1e-6);
        assert!(
            bump.slope_se_ms_per_s.unwrap() > 3.0 * shuffled.slope_se_ms_per_s.unwrap(),
            "{bump:?} vs {shuffled:?}"
        );
        // Points on a line have no spread to give.
        let t = queue(100.0, 107.3, 200, 7.0).trend().unwrap();
        assert_eq!(t.slope_se_ms_per_s, None, "{t:?}");
    }
}

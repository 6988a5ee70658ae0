//! How TTFT moved through a run: the least-squares slope of each measured request's TTFT
//! against its send time. A server that takes requests in slower than they are sent queues
//! the rest, and each one waits longer than the one before: under even arrivals at rate R to
//! a server that serves C < R, TTFT grows by R/C − 1 seconds per second of sending. A short
//! probe can meet its SLO while that queue is still small, so the capacity search reads the
//! slope as well as the verdict (`canaryd sweep --find-max-rate`).

use serde::{Deserialize, Serialize};

/// Running sums for the fit, O(1) in memory whatever the run's length.
#[derive(Debug, Clone, Default)]
pub(crate) struct TrendSums {
    /// The first send, ms: times are taken from it so the sums stay small.
    origin_ms: Option<f64>,
    n: u64,
    sx: f64,
    sy: f64,
    sxx: f64,
    sxy: f64,
    first_s: f64,
    last_s: f64,
}

impl TrendSums {
    /// One request sent at `sent_ms` whose first token came `ttft_ms` later.
    pub fn add(&mut self, sent_ms: f64, ttft_ms: f64) {
        if !sent_ms.is_finite() || !ttft_ms.is_finite() {
            return;
        }
        let origin = *self.origin_ms.get_or_insert(sent_ms);
        let x = (sent_ms - origin) / 1000.0;
        if self.n == 0 {
            (self.first_s, self.last_s) = (x, x);
        }
        self.first_s = self.first_s.min(x);
        self.last_s = self.last_s.max(x);
        self.n += 1;
        self.sx += x;
        self.sy += ttft_ms;
        self.sxx += x * x;
        self.sxy += x * ttft_ms;
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
        (var > 0.0).then(|| TtftTrend {
            requests: self.n,
            span_s,
            slope_ms_per_s: cov / var,
        })
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
}

impl TtftTrend {
    /// Fewer points than this fit noise.
    pub const MIN_REQUESTS: u64 = 10;
    /// Over a shorter span a slope is extrapolated too far to mean a rate.
    pub const MIN_SPAN_S: f64 = 0.1;

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
}

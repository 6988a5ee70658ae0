//! The search for the highest request rate that meets an SLO, as a pure state machine: the
//! caller runs each rate it is given and says whether the run passed.
//!
//! Bracketing, then bisection. From the first rate, the search doubles after a pass and halves
//! after a fail until it holds a passing rate below a failing one; then it tries the midpoint
//! of that bracket, narrowing it, until the bracket is narrower than the precision (relative to
//! its passing end) or the runs are spent. The answer is the bracket: the capacity at the SLO
//! is at least its passing end and below its failing end, as far as each run's verdict holds
//! (a run near the capacity can pass or fail by chance; a longer run narrows that).

/// Where a search stands.
#[derive(Debug, Clone, PartialEq)]
pub struct RateSearch {
    start: f64,
    min_rate: f64,
    max_rate: f64,
    precision: f64,
    max_runs: usize,
    runs: Vec<(f64, bool)>,
}

/// What a finished (or stopped) search found.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateBracket {
    /// The highest rate that passed, if any did.
    pub passed: Option<f64>,
    /// The lowest rate above it that failed, if any did: the capacity is below it.
    pub failed: Option<f64>,
}

impl RateSearch {
    /// Starts at `start` requests/s, never goes below `min_rate` nor above `max_rate`, stops
    /// when the bracket's width is at most `precision` of its passing end or after `max_runs`
    /// runs.
    pub fn new(
        start: f64,
        min_rate: f64,
        max_rate: f64,
        precision: f64,
        max_runs: usize,
    ) -> RateSearch {
        RateSearch {
            start,
            min_rate,
            max_rate,
            precision,
            max_runs,
            runs: Vec::new(),
        }
    }

    /// The runs so far: each rate and whether it passed.
    pub fn runs(&self) -> &[(f64, bool)] {
        &self.runs
    }

    /// Records the verdict of the run at `rate`.
    pub fn record(&mut self, rate: f64, passed: bool) {
        self.runs.push((rate, passed));
    }

    /// The bracket so far: the highest pass, and the lowest fail above it (or the lowest fail
    /// at all when nothing passed).
    pub fn bracket(&self) -> RateBracket {
        let passed = self
            .runs
            .iter()
            .filter(|r| r.1)
            .map(|r| r.0)
            .max_by(f64::total_cmp);
        let failed = self
            .runs
            .iter()
            .filter(|r| !r.1 && passed.is_none_or(|p| r.0 > p))
            .map(|r| r.0)
            .min_by(f64::total_cmp);
        RateBracket { passed, failed }
    }

    /// The rule that ended the search, whatever runs are left: `floor` (even `min_rate`
    /// failed), `ceiling` (`max_rate` passed) or `precision` (the bracket is narrow enough);
    /// `None` while it would go on. A search that ends on its last run ended by its rule, not
    /// by running out of runs.
    pub fn finished_by(&self) -> Option<&'static str> {
        let b = self.bracket();
        match (b.passed, b.failed) {
            (None, Some(f)) if f <= self.min_rate => Some("floor"),
            (Some(p), None) if p >= self.max_rate => Some("ceiling"),
            (Some(p), Some(f)) if f - p <= self.precision * p => Some("precision"),
            _ => None,
        }
    }

    /// The next rate to run, or `None` when the search is done: the bracket is narrow enough,
    /// the runs are spent, even `min_rate` failed, or `max_rate` passed.
    pub fn next_rate(&self) -> Option<f64> {
        if self.runs.len() >= self.max_runs || self.finished_by().is_some() {
            return None;
        }
        let b = self.bracket();
        match (b.passed, b.failed) {
            (None, None) => Some(self.start),
            // Doubling past the highest rate a run may have would only fail to start.
            (Some(p), None) => (p < self.max_rate).then(|| (p * 2.0).min(self.max_rate)),
            (None, Some(f)) => (f > self.min_rate).then(|| (f / 2.0).max(self.min_rate)),
            (Some(p), Some(f)) => (f - p > self.precision * p).then_some((p + f) / 2.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a search against a server whose true capacity is `capacity`.
    fn search(capacity: f64, start: f64, max_runs: usize) -> RateSearch {
        let mut s = RateSearch::new(start, 0.1, 1e6, 0.05, max_runs);
        while let Some(rate) = s.next_rate() {
            s.record(rate, rate <= capacity);
        }
        s
    }

    #[test]
    fn brackets_up_then_bisects_to_the_precision() {
        let s = search(107.0, 10.0, 20);
        let rates: Vec<f64> = s.runs().iter().map(|r| r.0).collect();
        // 10, 20, 40, 80 pass; 160 fails; then the midpoints.
        assert_eq!(&rates[..5], &[10.0, 20.0, 40.0, 80.0, 160.0]);
        assert_eq!(rates[5], 120.0);
        let b = s.bracket();
        let (p, f) = (b.passed.unwrap(), b.failed.unwrap());
        assert!(p <= 107.0 && 107.0 < f, "{b:?}");
        assert!(f - p <= 0.05 * p, "{b:?}");
    }

    #[test]
    fn brackets_down_from_a_failing_start() {
        let s = search(30.0, 100.0, 20);
        assert_eq!(s.runs()[..3], [(100.0, false), (50.0, false), (25.0, true)]);
        let b = s.bracket();
        assert!(b.passed.unwrap() <= 30.0 && 30.0 < b.failed.unwrap());
    }

    #[test]
    fn stops_at_the_run_budget_and_at_the_floor() {
        let s = search(107.0, 10.0, 3);
        assert_eq!(s.runs().len(), 3);
        assert_eq!(
            s.bracket(),
            RateBracket {
                passed: Some(40.0),
                failed: None
            }
        );
        // Nothing passes: halves down to the floor, runs it once, stops.
        let s = search(0.0, 1.0, 50);
        let rates: Vec<f64> = s.runs().iter().map(|r| r.0).collect();
        assert_eq!(rates, vec![1.0, 0.5, 0.25, 0.125, 0.1]);
        assert_eq!(s.bracket().passed, None);
        assert_eq!(s.bracket().failed, Some(0.1));
        // Everything passes: doubles up to the ceiling, runs it once, stops.
        let s = search(f64::INFINITY, 1e5, 50);
        let rates: Vec<f64> = s.runs().iter().map(|r| r.0).collect();
        assert_eq!(rates, vec![1e5, 2e5, 4e5, 8e5, 1e6]);
        assert_eq!(s.next_rate(), None);
    }

    #[test]
    fn a_noisy_fail_below_a_pass_does_not_hide_the_pass() {
        let mut s = RateSearch::new(10.0, 0.1, 1e6, 0.05, 20);
        s.record(10.0, true);
        s.record(20.0, false);
        s.record(15.0, true);
        s.record(12.0, false); // noise: below a pass
        let b = s.bracket();
        assert_eq!(b.passed, Some(15.0));
        assert_eq!(b.failed, Some(20.0));
        assert_eq!(s.next_rate(), Some(17.5));
    }
}

//! The shards' runs on the merged time axis, and the time between them when no shard was
//! running. The union's duration runs from the first shard's first send to the last end, and
//! its rates spread every request over it: shards run one after another leave gaps in it that
//! read as a low rate unless said.
//!
//! Whether shards ran together is judged by when each started (its t0) and when its last
//! request ended, not by gaps in their sending: shards started on one `--start-at` keep the
//! trace's own idle stretches, which one process replaying every row has too (audit M1).

/// Milliseconds within the union of `runs` (each shard's t0 and its last request's end, ms on
/// the merged axis) that no run covers, counting only gaps wider than `slack` (the alignment
/// bound: a narrower one may be the clocks', not the shards'). 0 when the runs overlap.
pub fn idle_between(runs: &[(f64, f64)], slack: f64) -> f64 {
    let mut runs: Vec<(f64, f64)> = runs.to_vec();
    runs.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut idle = 0.0;
    let mut reached = f64::NEG_INFINITY;
    for (start, end) in runs {
        if reached.is_finite() && start - reached > slack {
            idle += start - reached;
        }
        reached = reached.max(end);
    }
    idle
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_time_no_run_covers_is_idle() {
        // Overlapping, as shards started together: none.
        assert_eq!(idle_between(&[(0.0, 100.0), (50.0, 150.0)], 0.0), 0.0);
        // One after another, in any order: the gaps between them.
        assert_eq!(
            idle_between(&[(300.0, 400.0), (0.0, 100.0), (150.0, 200.0)], 0.0),
            150.0
        );
        // A run inside another's leaves no gap of its own.
        assert_eq!(
            idle_between(&[(0.0, 100.0), (10.0, 20.0), (130.0, 140.0)], 0.0),
            30.0
        );
        assert_eq!(idle_between(&[], 0.0), 0.0);
        // A gap within the alignment bound may be the clocks': not counted.
        assert_eq!(idle_between(&[(0.0, 100.0), (102.0, 200.0)], 3.0), 0.0);
        assert_eq!(idle_between(&[(0.0, 100.0), (104.0, 200.0)], 3.0), 4.0);
    }
}

//! The shards' sending spans on the merged time axis, and the time between them when no shard
//! was sending. The union's duration runs from the first shard's first send to the last end,
//! and its rates spread every request over it: shards run one after another leave gaps in
//! it that read as a low rate unless said.

/// Milliseconds within the union of `spans` (each shard's first and last send, ms on the
/// merged axis) that no span covers: from the earliest start to the latest end, less the
/// time some shard was sending. Exact from the send times; 0 when the spans overlap or touch.
pub fn idle_between(spans: &[(f64, f64)]) -> f64 {
    let mut spans: Vec<(f64, f64)> = spans.to_vec();
    spans.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut idle = 0.0;
    let mut reached = f64::NEG_INFINITY;
    for (start, end) in spans {
        if reached.is_finite() && start > reached {
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
    fn only_the_time_no_span_covers_is_idle() {
        // Overlapping, as shards started together: none.
        assert_eq!(idle_between(&[(0.0, 100.0), (50.0, 150.0)]), 0.0);
        // One after another, in any order: the gaps between them.
        assert_eq!(
            idle_between(&[(300.0, 400.0), (0.0, 100.0), (150.0, 200.0)]),
            150.0
        );
        // A span inside another's leaves no gap of its own.
        assert_eq!(
            idle_between(&[(0.0, 100.0), (10.0, 20.0), (130.0, 140.0)]),
            30.0
        );
        assert_eq!(idle_between(&[]), 0.0);
    }
}

//! The request shape and load pattern of a run, for `summary.json`'s `context.workload`:
//! what was asked of the server, from the schedule and the target, before any response.

use crate::run::Work;
use crate::schedule::Schedule;
use crate::target::Target;
use canary_core::{Known, LengthStats, LoadPattern, WorkloadContext};

/// What `schedule` asks of `target`, at most `concurrency` in flight.
pub fn workload_context(
    target: &Target,
    schedule: &Schedule,
    concurrency: Option<usize>,
) -> WorkloadContext {
    let rows = schedule.rows();
    let input = token_stats(|| (0..rows.len()).map(|i| rows.row(i).input_tokens()));
    let output = token_stats(|| (0..rows.len()).map(|i| rows.row(i).output_tokens()));
    let empty = "the schedule holds no request";
    let span_s = schedule.span().as_secs_f64();
    let requests = schedule.len() as u64;
    WorkloadContext {
        endpoint: Known::Value(target.endpoint.operation().to_string()),
        streaming: Known::Value(target.streaming),
        input_tokens: Known::from_option(input, empty),
        output_tokens: Known::from_option(output, empty),
        load: Known::Value(LoadPattern {
            kind: "trace".into(),
            speedup: schedule.timing().speedup(),
            concurrency,
            requests,
            sessions: schedule.session_count() as u64,
            span_s,
            offered_rate_per_s: (span_s > 0.0).then(|| requests as f64 / span_s),
        }),
    }
}

/// [`LengthStats::of`] the lengths (`lengths()` gives them, twice), exact, without a copy of
/// them: the median by two counting passes, on the high 16 bits, then on the low 16 bits of
/// the values in the median's bucket. 512 KB of counts whatever the trace, where a sorted
/// copy took 4 MB at 1M rows, at the moment a run's memory peaks (issue 21). The figures
/// are the same (a sum of integers below 2^53 is exact in either order).
fn token_stats<I: Iterator<Item = u32>>(lengths: impl Fn() -> I) -> Option<LengthStats> {
    let mut high = vec![0u32; 1 << 16];
    let (mut n, mut sum, mut max) = (0usize, 0u64, 0u32);
    for x in lengths() {
        high[(x >> 16) as usize] += 1;
        n += 1;
        sum += u64::from(x);
        max = max.max(x);
    }
    if n == 0 {
        return None;
    }
    // The median is the value of 0-based rank n / 2 in sorted order.
    let (bucket, below) = bucket_of(&high, n / 2);
    let mut low = high; // reused: the high counts are no longer needed
    low.fill(0);
    for x in lengths().filter(|x| x >> 16 == bucket) {
        low[(x & 0xffff) as usize] += 1;
    }
    let (low_bits, _) = bucket_of(&low, n / 2 - below);
    Some(LengthStats {
        mean: sum as f64 / n as f64,
        p50: f64::from(bucket << 16 | low_bits),
        max: f64::from(max),
    })
}

/// The bucket that holds the value of 0-based rank `rank` (below the total count), and how
/// many values the buckets before it hold.
fn bucket_of(counts: &[u32], rank: usize) -> (u32, usize) {
    let mut below = 0;
    for (b, &c) in counts.iter().enumerate() {
        if rank < below + c as usize {
            return (b as u32, below);
        }
        below += c as usize;
    }
    unreachable!("rank {rank} is below the count {below}")
}

/// What a synthetic load (`kind`: `rate` or `closed_loop`) asks of `target`: its lengths are
/// drawn as each request is sent, so only the load pattern is known before the run.
pub fn synthetic_context(
    target: &Target,
    kind: &str,
    work: &Work,
    concurrency: Option<usize>,
) -> WorkloadContext {
    let drawn = "synthetic: lengths are drawn as each request is sent";
    let requests = work.expected_requests();
    WorkloadContext {
        endpoint: Known::Value(target.endpoint.operation().to_string()),
        streaming: Known::Value(target.streaming),
        input_tokens: Known::unavailable(drawn.to_string()),
        output_tokens: Known::unavailable(drawn.to_string()),
        load: Known::Value(LoadPattern {
            kind: kind.into(),
            speedup: 1.0,
            concurrency,
            requests,
            sessions: requests,
            span_s: 0.0,
            offered_rate_per_s: None,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_stats_are_length_stats() {
        let mut x = 0x9e37_79b9u64;
        for n in [0usize, 1, 2, 3, 10, 999, 4096, 70_000] {
            let v: Vec<u32> = (0..n)
                .map(|i| {
                    x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                    match i % 3 {
                        0 => (x >> 33) as u32,
                        1 => u32::MAX - (x >> 60) as u32,
                        _ => (x >> 50) as u32,
                    }
                })
                .collect();
            let mut f: Vec<f64> = v.iter().map(|&x| f64::from(x)).collect();
            assert_eq!(
                token_stats(|| v.iter().copied()),
                LengthStats::of(&mut f),
                "{n}"
            );
        }
        // Ties across the median, values either side of a 16-bit bucket's edge.
        for v in [
            vec![7u32; 5],
            vec![65_535, 65_536, 65_536, 65_535, 0],
            vec![u32::MAX, u32::MAX, 0, 1],
        ] {
            let mut f: Vec<f64> = v.iter().map(|&x| f64::from(x)).collect();
            assert_eq!(
                token_stats(|| v.iter().copied()),
                LengthStats::of(&mut f),
                "{v:?}"
            );
        }
    }
}

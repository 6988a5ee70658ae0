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
    let input = token_stats((0..rows.len()).map(|i| rows.row(i).input_tokens()));
    let output = token_stats((0..rows.len()).map(|i| rows.row(i).output_tokens()));
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

/// [`LengthStats::of`] the lengths, from 4 bytes a request instead of an `f64` each: the
/// figures are the same (a sum of integers below 2^53 is exact in either order).
fn token_stats(lengths: impl Iterator<Item = u32>) -> Option<LengthStats> {
    let mut v: Vec<u32> = lengths.collect();
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    let n = v.len();
    let sum: u64 = v.iter().map(|&x| u64::from(x)).sum();
    Some(LengthStats {
        mean: sum as f64 / n as f64,
        p50: f64::from(v[n / 2]),
        max: f64::from(v[n - 1]),
    })
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
        for n in [0usize, 1, 2, 3, 10, 999, 4096] {
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
            assert_eq!(token_stats(v.into_iter()), LengthStats::of(&mut f), "{n}");
        }
    }
}

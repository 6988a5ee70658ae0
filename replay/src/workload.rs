//! The request shape and load pattern of a run, for `summary.json`'s `context.workload`:
//! what was asked of the server, from the schedule and the target, before any response.

use crate::run::Work;
use crate::schedule::Schedule;
use crate::target::Target;
use canary_core::{Figure, Known, LengthStats, LoadPattern, WorkloadContext};

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
    // A turn sent a delay after its previous turn ends is due no sooner than the previous
    // turn's send plus the delay: the span counts that much, the server's time is unknown.
    let delay_turns = schedule.delay_turns();
    let why = || {
        format!(
            "{delay_turns} turns are sent a delay after their previous turn ends: counted from \
             its send, server time not counted"
        )
    };
    let (span, rate) = match delay_turns {
        0 => (
            Figure::Exact(span_s),
            Figure::Exact(requests as f64 / span_s),
        ),
        _ => (
            Figure::AtLeast {
                at_least: span_s,
                why: why(),
            },
            Figure::AtMost {
                at_most: requests as f64 / span_s,
                why: why(),
            },
        ),
    };
    let rate = match span_s > 0.0 {
        true => Known::Value(rate),
        false => Known::unavailable("every request is due at the run's start: no span"),
    };
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
            span_s: span,
            offered_rate_per_s: rate,
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
            span_s: Figure::Exact(0.0),
            offered_rate_per_s: Known::unavailable("not computed for synthetic loads"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A schedule whose later turns go a `delay` after their previous turn spans at least
    // the delays, and offers at most its requests over that: it spanned the last timestamp
    // alone (a delay turn has its previous turn's), 0 s here, and offered no rate at all.
    #[test]
    fn the_offered_load_counts_delays_and_says_it_is_a_bound() {
        // Generated, in the aiperf superset of the Mooncake format.
        let text = r#"{"session_id": "a", "timestamp": 0, "input_length": 10, "output_length": 2}
{"session_id": "a", "delay": 4000, "input_length": 20, "output_length": 2}
{"session_id": "a", "delay": 4000, "input_length": 30, "output_length": 2}
"#;
        let opts = crate::trace::LoadOptions::default();
        let trace =
            crate::trace::parse(text.as_bytes(), std::path::Path::new("d.jsonl"), &opts).unwrap();
        let target = Target::new("http://127.0.0.1:1", crate::Endpoint::Chat, "m").unwrap();
        let load = |speedup| {
            let schedule = Schedule::new(trace.requests.clone(), speedup);
            let context = workload_context(&target, &schedule, None);
            serde_json::to_value(context.load).unwrap()
        };
        let l = load(2.0);
        assert_eq!(l["span_s"]["at_least"], 4.0, "{l}");
        assert_eq!(l["offered_rate_per_s"]["at_most"], 0.75, "{l}");
        assert!(l["span_s"]["why"]
            .as_str()
            .unwrap()
            .starts_with("2 turns are sent a delay"));
        // Without delays: exact, plain numbers.
        let plain = Schedule::new(
            crate::trace::parse(
                &br#"{"timestamp": 0, "input_length": 10, "output_length": 2}
{"timestamp": 2000, "input_length": 10, "output_length": 2}
"#[..],
                std::path::Path::new("p.jsonl"),
                &opts,
            )
            .unwrap()
            .requests,
            1.0,
        );
        let l = serde_json::to_value(workload_context(&target, &plain, None).load).unwrap();
        assert_eq!(
            (l["span_s"].as_f64(), l["offered_rate_per_s"].as_f64()),
            (Some(2.0), Some(1.0))
        );
    }

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

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
    // The offered rate is one over the mean gap between sends, `(requests - 1)` over the time
    // from the first send to the last, as analyze-trace's mean rate and a rate run's rate
    // (it was `requests / span_s`, without saying which, and a shard's span runs from the
    // whole trace's origin, before its own first send).
    let sends_s = span_s - schedule.first_due().as_secs_f64();
    let per_s = requests.saturating_sub(1) as f64 / sends_s;
    let (span, rate) = match delay_turns {
        0 => (Figure::Exact(span_s), Figure::Exact(per_s)),
        _ => (
            Figure::AtLeast {
                at_least: span_s,
                why: why(),
            },
            Figure::AtMost {
                at_most: per_s,
                why: why(),
            },
        ),
    };
    let rate = match (requests, sends_s > 0.0) {
        (0 | 1, _) => Known::unavailable("fewer than 2 requests: no gap between sends"),
        (_, false) => Known::unavailable("every request is due at one instant: no gap"),
        (_, true) => Known::Value(rate),
    };
    WorkloadContext {
        endpoint: Known::Value(target.endpoint.operation().to_string()),
        streaming: Known::Value(target.streaming),
        input_tokens: Known::from_option(input, empty),
        output_tokens: Known::from_option(output, empty),
        load: Known::Value(LoadPattern {
            kind: "trace".into(),
            speedup: Known::Value(schedule.timing().speedup()),
            concurrency,
            requests: Known::Value(Figure::Exact(requests)),
            sessions: Known::Value(Figure::Exact(schedule.session_count() as u64)),
            span_s: Known::Value(span),
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
/// drawn as each request is sent, so only the load pattern is known before the run, and of
/// it only what the settings fix. Each figure says whether it is exact, a bound or an
/// estimate, or why it is unknown: they were placeholders (a closed loop bounded by time said
/// 0 requests, every synthetic load a span of 0 s at a speedup of 1) and estimates that did
/// not say so (a rate's requests over a duration), with no offered rate though the rate's is
/// known.
pub fn synthetic_context(
    target: &Target,
    kind: &str,
    work: &Work,
    concurrency: Option<usize>,
) -> WorkloadContext {
    let drawn = "synthetic: lengths are drawn as each request is sent";
    let (requests, span_s, offered_rate_per_s) = match work {
        Work::Rate(r) => rate_figures(r),
        Work::ClosedLoop(c) => closed_loop_figures(c),
        Work::Schedule(_) => unreachable!("a schedule's context is workload_context's"),
    };
    WorkloadContext {
        endpoint: Known::Value(target.endpoint.operation().to_string()),
        streaming: Known::Value(target.streaming),
        input_tokens: Known::unavailable(drawn.to_string()),
        output_tokens: Known::unavailable(drawn.to_string()),
        load: Known::Value(LoadPattern {
            kind: kind.into(),
            speedup: Known::unavailable(
                "synthetic: deadlines are generated in run time, there is no trace clock",
            ),
            concurrency,
            // Each synthetic request is a session of its own.
            sessions: requests.clone(),
            requests,
            span_s,
            offered_rate_per_s,
        }),
    }
}

/// A load figure's requests, span and offered rate.
type LoadFigures = (Known<Figure<u64>>, Known<Figure<f64>>, Known<Figure<f64>>);

/// A rate's figures. The first arrival is at 0 and the gaps average `1 / rate`: even gaps
/// put the count's last at `(count - 1) / rate`, random ones only on average; a duration
/// bounds the last arrival, and holds the rate times it of them (even gaps: to within one,
/// as the gaps are summed in floating point; random ones: on average). The offered rate is
/// the rate asked: exact for even gaps, the average for random ones.
fn rate_figures(r: &crate::run::RateWork) -> LoadFigures {
    let (rate, pattern, count, until) = r.shape();
    let even = pattern == crate::ArrivalPattern::Constant;
    let approx = |what: &str| match even {
        true => format!("{what}, to within one arrival (even gaps summed in floating point)"),
        false => format!("{what}, on average ({pattern} arrivals)"),
    };
    let by_count = count.map(|n| {
        let span = n.saturating_sub(1) as f64 / rate;
        match even {
            true => Figure::Exact(span),
            false => Figure::Estimate {
                estimate: span,
                why: approx("the last of the count's arrivals, (count - 1) / rate"),
            },
        }
    });
    let by_time = until.map(|d| (rate * d.as_secs_f64()).ceil() as u64);
    let requests = match (count, by_time) {
        (Some(n), None) => Figure::Exact(n),
        (None, Some(m)) => Figure::Estimate {
            estimate: m,
            why: approx("the rate times the duration"),
        },
        (Some(n), Some(m)) => Figure::Estimate {
            estimate: n.min(m),
            why: approx(&format!(
                "the rate times the duration, or the count ({n}) if fewer"
            )),
        },
        (None, None) => unreachable!("a rate is bounded by a count or a duration"),
    };
    let span = match (by_count, until) {
        (Some(s), Some(d)) if *s.value() < d.as_secs_f64() => s,
        (_, Some(d)) => Figure::AtMost {
            at_most: d.as_secs_f64(),
            why: "every arrival is before the duration's end".into(),
        },
        (Some(s), None) => s,
        (None, None) => unreachable!("a rate is bounded by a count or a duration"),
    };
    let offered = match even {
        true => Figure::Exact(rate),
        false => Figure::Estimate {
            estimate: rate,
            why: approx("the rate asked"),
        },
    };
    (
        Known::Value(requests),
        Known::Value(span),
        Known::Value(offered),
    )
}

/// A closed loop's figures: its users send as fast as the server answers, so only a count
/// and a duration bound anything.
fn closed_loop_figures(c: &crate::run::ClosedLoopWork) -> LoadFigures {
    let pace = "a closed loop sends as fast as the server answers its users";
    let (count, until) = c.extent();
    let requests = match (count, until) {
        (Some(n), None) => Known::Value(Figure::Exact(n)),
        (Some(n), Some(_)) => Known::Value(Figure::AtMost {
            at_most: n,
            why: format!("the count, unless the duration ends first: {pace}"),
        }),
        (None, _) => Known::unavailable(format!("bounded by time alone: {pace}")),
    };
    let span = match until {
        Some(d) => Known::Value(Figure::AtMost {
            at_most: d.as_secs_f64(),
            why: "every request is sent before the duration's end".into(),
        }),
        None => Known::unavailable(format!("bounded by a count alone: {pace}")),
    };
    (requests, span, Known::unavailable(pace))
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
        // 3 requests, 2 gaps over the 4 s from the first send to the last.
        assert_eq!(l["offered_rate_per_s"]["at_most"], 0.5, "{l}");
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
        // 2 requests 2 s apart: one gap of 2 s, 0.5 a second (it said 1, requests / span).
        let l = serde_json::to_value(workload_context(&target, &plain, None).load).unwrap();
        assert_eq!(
            (l["span_s"].as_f64(), l["offered_rate_per_s"].as_f64()),
            (Some(2.0), Some(0.5))
        );
    }

    // A shard counts from the whole trace's origin: its span runs from before its own first
    // send, and its offered rate is over its own sends only.
    #[test]
    fn a_shards_offered_rate_is_over_its_own_sends() {
        let text = r#"{"timestamp": 10000, "input_length": 10, "output_length": 2}
{"timestamp": 12000, "input_length": 10, "output_length": 2}
{"timestamp": 14000, "input_length": 10, "output_length": 2}
"#;
        let opts = crate::trace::LoadOptions::default();
        let rows = crate::trace::parse(text.as_bytes(), std::path::Path::new("s.jsonl"), &opts)
            .unwrap()
            .requests;
        let schedule = Schedule::with_origin(rows, 1.0, Some(0));
        assert_eq!(schedule.first_due(), std::time::Duration::from_secs(10));
        let target = Target::new("http://127.0.0.1:1", crate::Endpoint::Chat, "m").unwrap();
        let l = serde_json::to_value(workload_context(&target, &schedule, None).load).unwrap();
        assert_eq!(
            (l["span_s"].as_f64(), l["offered_rate_per_s"].as_f64()),
            (Some(14.0), Some(0.5))
        );
    }

    // A synthetic load's pattern says what its settings fix, and how: a closed loop bounded
    // by time said 0 requests and 0 sessions, every synthetic load a span of 0 s at a speedup
    // of 1, a rate over a duration its rate times the duration unlabelled, and no offered
    // rate at all.
    #[test]
    fn synthetic_load_figures_say_what_they_are() {
        use crate::plan::{ClosedLoopPlan, Extent, RatePlan};
        use crate::synthetic::SyntheticRequests;
        use crate::ArrivalPattern::{Constant, Poisson};
        let target = Target::new("http://127.0.0.1:1", crate::Endpoint::Chat, "m").unwrap();
        let secs = |s: u64| Some(std::time::Duration::from_secs(s));
        let rate = |arrival, count, duration| {
            let plan = RatePlan {
                requests: SyntheticRequests::fixed(16, 4),
                rate: 10.0,
                arrival,
                extent: Extent { count, duration },
            };
            let work = Work::rate(&plan, 1000);
            serde_json::to_value(synthetic_context(&target, "rate", &work, None).load).unwrap()
        };
        let users = |count, duration| {
            let plan = ClosedLoopPlan {
                requests: SyntheticRequests::fixed(16, 4),
                users: 2,
                extent: Extent { count, duration },
            };
            let work = Work::closed_loop(&plan, 1000);
            let c = synthetic_context(&target, "closed_loop", &work, Some(2));
            serde_json::to_value(c.load).unwrap()
        };

        let l = rate(Poisson, None, secs(60));
        assert!(l["speedup"]["unavailable"].is_string(), "{l}");
        assert_eq!(l["requests"]["estimate"], 600, "{l}");
        assert!(l["requests"]["why"]
            .as_str()
            .unwrap()
            .contains("on average"));
        assert_eq!(l["sessions"], l["requests"]);
        assert_eq!(l["span_s"]["at_most"], 60.0, "{l}");
        assert_eq!(l["offered_rate_per_s"]["estimate"], 10.0, "{l}");
        // Even gaps and a count: every figure exact, plain numbers.
        let l = rate(Constant, Some(21), None);
        assert_eq!(
            (&l["requests"], &l["span_s"], &l["offered_rate_per_s"]),
            (&21.into(), &2.0.into(), &10.0.into()),
            "{l}"
        );

        let l = users(None, secs(60));
        assert!(l["requests"]["unavailable"].is_string(), "{l}");
        assert!(l["sessions"]["unavailable"].is_string(), "{l}");
        assert_eq!(l["span_s"]["at_most"], 60.0, "{l}");
        assert!(l["offered_rate_per_s"]["unavailable"].is_string(), "{l}");
        let l = users(Some(40), None);
        assert_eq!(l["requests"], 40, "{l}");
        assert!(l["span_s"]["unavailable"].is_string(), "{l}");
        let l = users(Some(40), secs(60));
        assert_eq!(l["requests"]["at_most"], 40, "{l}");
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

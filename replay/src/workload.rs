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
    let turns = || schedule.sessions().iter().flat_map(|s| s.turns.iter());
    let mut input: Vec<f64> = turns().map(|r| f64::from(r.input_tokens)).collect();
    let mut output: Vec<f64> = turns().map(|r| f64::from(r.output_tokens)).collect();
    let empty = "the schedule holds no request";
    let span_s = schedule.span().as_secs_f64();
    let requests = schedule.len() as u64;
    WorkloadContext {
        endpoint: Known::Value(target.endpoint.operation().to_string()),
        streaming: Known::Value(target.streaming),
        input_tokens: Known::from_option(LengthStats::of(&mut input), empty),
        output_tokens: Known::from_option(LengthStats::of(&mut output), empty),
        load: Known::Value(LoadPattern {
            kind: "trace".into(),
            speedup: schedule.timing().speedup(),
            concurrency,
            requests,
            sessions: schedule.sessions().len() as u64,
            span_s,
            offered_rate_per_s: (span_s > 0.0).then(|| requests as f64 / span_s),
        }),
    }
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

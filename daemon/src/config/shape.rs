//! A workload's load shape beyond a trace: without `trace`, synthetic requests at a
//! `request_rate` (open loop) or from `concurrency` users (closed loop), and on any workload
//! requests cancelled on purpose. The keys mirror `canaryd profile`'s flags; the same
//! combinations are refused, each error naming the file's line and the key path.

use super::{raw, ConfigError};
use canary_replay::{
    ArrivalPattern, Cancellation, ClosedLoopPlan, Extent, Length, LoadShape, RatePlan, Setting,
    SyntheticRequests,
};
use std::collections::HashMap;

/// Default synthetic input length (aiperf's, as `canaryd profile`).
const DEFAULT_ISL: u32 = 550;
/// Default synthetic output length.
const DEFAULT_OSL: u32 = 150;

/// A synthetic load: an open-loop rate or a closed loop of users.
#[derive(Debug, Clone, PartialEq)]
pub enum Synthetic {
    /// Open loop (`request_rate`).
    Rate(RatePlan),
    /// Closed loop of `concurrency` users.
    ClosedLoop(ClosedLoopPlan),
}

impl Synthetic {
    /// The plan's load shape.
    pub fn load(&self) -> LoadShape {
        match self {
            Synthetic::Rate(r) => LoadShape::Rate(r.clone()),
            Synthetic::ClosedLoop(c) => LoadShape::ClosedLoop(c.clone()),
        }
    }
}

/// What a workload sends beside (or instead of) a trace.
#[derive(Debug, Clone, Default)]
pub(super) struct Shape {
    /// The synthetic load, when the workload has no trace.
    pub synthetic: Option<Synthetic>,
    /// Requests cancelled on purpose.
    pub cancellation: Option<Cancellation>,
}

/// Reads the shape keys of workload `name`. `at`: the workload's own position, for errors of
/// keys that carry none; `length_limit` and `concurrency`: its values of those keys.
pub(super) fn shape(
    name: &str,
    w: &raw::Workload,
    at: Option<usize>,
    length_limit: u32,
    concurrency: Option<usize>,
    err: impl Fn(Option<usize>, String) -> ConfigError,
) -> Result<Shape, ConfigError> {
    let pos = |s: &Option<toml::Spanned<_>>| s.as_ref().map(|s: &toml::Spanned<_>| s.span().start);
    // Where each synthetic key sits, in the order `canaryd profile` checks its flags.
    let synthetic_keys: [(&str, Option<usize>); 10] = [
        ("isl", w.isl.as_ref().map(|s| s.span().start)),
        ("isl_stddev", pos(&w.isl_stddev)),
        ("osl", w.osl.as_ref().map(|s| s.span().start)),
        ("osl_stddev", pos(&w.osl_stddev)),
        (
            "shared_system_prompt_length",
            w.shared_system_prompt_length
                .as_ref()
                .map(|s| s.span().start),
        ),
        (
            "request_count",
            w.request_count.as_ref().map(|s| s.span().start),
        ),
        (
            "benchmark_duration",
            w.benchmark_duration.as_ref().map(|s| s.span().start),
        ),
        ("request_rate", pos(&w.request_rate)),
        (
            "arrival_pattern",
            w.arrival_pattern.as_ref().map(|s| s.span().start),
        ),
        ("arrival_smoothness", pos(&w.arrival_smoothness)),
    ];
    let given = |keys: &[(&'static str, Option<usize>)]| {
        keys.iter().find_map(|(k, p)| p.map(|p| (*k, Some(p))))
    };
    let key = |k: &str| format!("workloads.{name}.{k}");
    let cancellation = cancellation(w, &key, &err)?;
    if w.trace.is_some() {
        if let Some((k, p)) = given(&synthetic_keys) {
            return Err(err(
                p,
                format!(
                    "{}: shapes synthetic requests; a trace brings its own lengths and schedule \
                     (leave out trace to send synthetic requests)",
                    key(k)
                ),
            ));
        }
        return Ok(Shape {
            synthetic: None,
            cancellation,
        });
    }
    let trace_keys = [
        ("format", w.format.is_some()),
        ("start_offset", w.start_offset.is_some()),
        ("end_offset", w.end_offset.is_some()),
        ("max_requests", w.max_requests.is_some()),
        ("speedup", w.speedup.is_some()),
        ("scale_lengths", w.scale_lengths.is_some()),
        ("max_line_bytes", w.max_line_bytes.is_some()),
    ];
    if let Some((k, _)) = trace_keys.iter().find(|k| k.1) {
        return Err(err(
            at,
            format!(
                "{}: applies to a trace, and workloads.{name} has none (synthetic requests)",
                key(k)
            ),
        ));
    }
    if w.request_rate.is_none() {
        if let Some((k, p)) = given(&synthetic_keys[8..]) {
            return Err(err(
                p,
                format!(
                    "{}: shapes the arrivals of request_rate, which is not set",
                    key(k)
                ),
            ));
        }
    }
    let arrival = match &w.arrival_pattern {
        None => ArrivalPattern::Poisson,
        Some(p) => p.get_ref().parse::<ArrivalPattern>().map_err(|e| {
            err(
                Some(p.span().start),
                format!("{}: {e}", key("arrival_pattern")),
            )
        })?,
    };
    let arrival = match (arrival, &w.arrival_smoothness) {
        (ArrivalPattern::Gamma(_), Some(k)) => ArrivalPattern::Gamma(*k.get_ref()),
        (_, Some(k)) => {
            return Err(err(
                Some(k.span().start),
                format!(
                    "{}: is the shape of arrival_pattern = \"gamma\"",
                    key("arrival_smoothness")
                ),
            ))
        }
        (a, None) => a,
    };
    let requests = SyntheticRequests {
        isl: Length {
            mean: w.isl.as_ref().map_or(DEFAULT_ISL, |s| *s.get_ref()),
            stddev: w.isl_stddev.as_ref().map_or(0.0, |s| *s.get_ref()),
        },
        osl: Length {
            mean: w.osl.as_ref().map_or(DEFAULT_OSL, |s| *s.get_ref()),
            stddev: w.osl_stddev.as_ref().map_or(0.0, |s| *s.get_ref()),
        },
        shared_prefix: w
            .shared_system_prompt_length
            .as_ref()
            .map_or(0, |s| *s.get_ref()),
        seed: w.random_seed.unwrap_or(0),
    };
    let extent = Extent {
        count: w.request_count.as_ref().map(|s| *s.get_ref()),
        duration: w.benchmark_duration.as_ref().map(|s| s.get_ref().0),
    };
    let synthetic = match &w.request_rate {
        Some(rate) => Synthetic::Rate(RatePlan {
            requests,
            rate: *rate.get_ref(),
            arrival,
            extent,
        }),
        None => Synthetic::ClosedLoop(ClosedLoopPlan {
            requests,
            users: concurrency.unwrap_or(1),
            extent,
        }),
    };
    // The library's checks, each error placed at its key (a closed loop's users are its
    // `concurrency`: more of them than requests was placed at the workload's header).
    let mut positions: HashMap<&str, Option<usize>> = synthetic_keys.into_iter().collect();
    positions.insert(
        "concurrency",
        w.concurrency.as_ref().map(|c| c.span().start),
    );
    synthetic.load().validate(length_limit).map_err(|e| {
        let p = positions.get(e.setting.name()).copied().flatten().or(at);
        err(p, e.spelled(&key(e.setting.name())))
    })?;
    Ok(Shape {
        synthetic: Some(synthetic),
        cancellation,
    })
}

fn cancellation(
    w: &raw::Workload,
    key: &impl Fn(&str) -> String,
    err: &impl Fn(Option<usize>, String) -> ConfigError,
) -> Result<Option<Cancellation>, ConfigError> {
    let delay = w.request_cancellation_delay.as_ref();
    let Some(rate) = &w.request_cancellation_rate else {
        return match delay {
            Some(d) => Err(err(
                Some(d.span().start),
                format!(
                    "{}: says when cancelled requests close; request_cancellation_rate, which \
                     picks them, is not set",
                    key("request_cancellation_delay")
                ),
            )),
            None => Ok(None),
        };
    };
    let c = Cancellation {
        rate_percent: *rate.get_ref(),
        delay: delay.map_or(std::time::Duration::ZERO, |d| d.get_ref().0),
        seed: w.random_seed.unwrap_or(0),
    };
    c.validate().map_err(|e| {
        let p = match e.setting {
            Setting::RequestCancellationDelay => delay.map(|d| d.span().start),
            _ => Some(rate.span().start),
        };
        err(p, e.spelled(&key(e.setting.name())))
    })?;
    Ok(Some(c))
}

#[cfg(test)]
mod tests;

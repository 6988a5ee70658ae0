//! Value parsers for the numeric flags that have a range of their own: clap refuses a value
//! outside it, exit 2 as for any flag clap refuses (`--speedup 0` and `--request-rate 0` alike),
//! in the words the library's check of the same setting gives a config file. A value that is
//! wrong only beside another flag or the trace (`--isl` over `--length-limit`) is the plan's
//! to refuse, exit 1.

use crate::config::{duration, size};
use canary_replay::{
    check_stddev, Cancellation, Config, Extent, RatePlan, ResponseLimits, Setting, SettingError,
};
use std::str::FromStr;
use std::time::Duration;

/// `s` read as a `T` (`what` it must be), then checked by the library's `check`.
fn checked<T: FromStr + Copy>(
    s: &str,
    what: &str,
    check: impl Fn(T) -> Result<(), SettingError>,
) -> Result<T, String> {
    let v = s
        .trim()
        .parse::<T>()
        .map_err(|_| format!("expected {what}, found {s:?}"))?;
    check(v).map(|()| v).map_err(|e| e.reason)
}

/// `--request-rate`: requests per second within `REQUEST_RATES`.
pub(crate) fn request_rate(s: &str) -> Result<f64, String> {
    checked(s, "a number", RatePlan::check_rate)
}

/// `--arrival-smoothness`: a gamma shape within `ARRIVAL_SMOOTHNESS`.
pub(crate) fn arrival_smoothness(s: &str) -> Result<f64, String> {
    checked(s, "a number", RatePlan::check_smoothness)
}

/// `--request-count`: 1 to `MAX_REQUEST_COUNT` requests.
pub(crate) fn request_count(s: &str) -> Result<u64, String> {
    checked(s, "a whole number", Extent::check_count)
}

/// `--isl-stddev`: 0 or a positive number of tokens.
pub(crate) fn isl_stddev(s: &str) -> Result<f64, String> {
    checked(s, "a number", |x| check_stddev(Setting::IslStddev, x))
}

/// `--osl-stddev`: 0 or a positive number of tokens.
pub(crate) fn osl_stddev(s: &str) -> Result<f64, String> {
    checked(s, "a number", |x| check_stddev(Setting::OslStddev, x))
}

/// `--request-cancellation-rate`: a percentage.
pub(crate) fn cancellation_rate(s: &str) -> Result<f64, String> {
    checked(s, "a number", Cancellation::check_rate)
}

/// `--request-cancellation-delay`: a duration of at most a day.
pub(crate) fn cancellation_delay(s: &str) -> Result<Duration, String> {
    let d = duration::parse(s)?;
    Cancellation::check_delay(d)
        .map(|()| d)
        .map_err(|e| e.reason)
}

/// `--warmup-requests`: at most `MAX_WARMUP_REQUESTS`.
pub(crate) fn warmup_requests(s: &str) -> Result<usize, String> {
    checked(s, "a whole number", Config::check_warmup_requests)
}

/// `--max-output-ratio`: a number of 1 or more.
pub(crate) fn output_ratio(s: &str) -> Result<f64, String> {
    checked(s, "a number", ResponseLimits::check_output_ratio)
}

/// A byte cap (`--max-header-bytes` …): a size of at least 1 KiB.
fn bytes(s: &str, setting: Setting) -> Result<usize, String> {
    let v = size::parse(s)?;
    ResponseLimits::check_bytes(setting, v)
        .map(|()| v)
        .map_err(|e| e.reason)
}

/// `--max-header-bytes`.
pub(crate) fn header_bytes(s: &str) -> Result<usize, String> {
    bytes(s, Setting::MaxHeaderBytes)
}

/// `--max-event-bytes`.
pub(crate) fn event_bytes(s: &str) -> Result<usize, String> {
    bytes(s, Setting::MaxEventBytes)
}

/// `--max-body-bytes`.
pub(crate) fn body_bytes(s: &str) -> Result<usize, String> {
    bytes(s, Setting::MaxBodyBytes)
}

/// `--max-held-bytes`.
pub(crate) fn held_bytes(s: &str) -> Result<usize, String> {
    bytes(s, Setting::MaxHeldBytes)
}

/// A count or cap in tokens (`--isl`, `--max-input-tokens`, the synthesis caps): a whole
/// number of 1 or more.
pub(crate) fn at_least_one(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("expected 1 or more, found {s:?}")),
    }
}

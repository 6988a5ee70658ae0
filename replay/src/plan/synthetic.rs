//! The synthetic load shapes of a plan: an open-loop rate ([`RatePlan`]) and a closed loop
//! of users ([`ClosedLoopPlan`]), both sending [`SyntheticRequests`] until a count or a
//! duration ([`Extent`]) is reached, and checked here so that every front end refuses the
//! same nonsense with the same setting named.

use super::setting::{Setting, SettingError};
use crate::arrival::ArrivalPattern;
use crate::synthetic::{Length, SyntheticRequests};
use canary_core::rate_text::number;
use serde::Serialize;
use std::time::Duration;

/// The most requests one synthetic run may send (request indices must stay clear of the
/// warm-up's).
pub const MAX_REQUEST_COUNT: u64 = 1_000_000_000;

/// The request rates an open loop may ask for, per second. Above the top, gaps fall below
/// what the arrival clock (seconds in an `f64`) can add over a long run, so arrivals stop
/// advancing and the planner never gets past them; one process sends thousands a second, not
/// a million. Below the bottom, the first gap is past any duration a run may have.
pub const REQUEST_RATES: std::ops::RangeInclusive<f64> = 1e-6..=1e6;

/// The arrival smoothness (gamma shape) an open loop may ask for. Below the bottom, most gaps
/// round to zero and a run's arrivals never advance; above the top, arrivals are even to
/// within rounding, which `--arrival-pattern constant` says better.
pub const ARRIVAL_SMOOTHNESS: std::ops::RangeInclusive<f64> = 0.01..=1e6;

/// Users a closed loop may have: each is a task for the whole run.
pub const MAX_USERS: usize = 100_000;

/// When a synthetic load stops: after `count` requests, after `duration`, whichever comes
/// first. With neither, [`Extent::DEFAULT_COUNT`] requests (aiperf's default).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Extent {
    /// Requests to send.
    pub count: Option<u64>,
    /// How long to keep sending (requests in flight at the end still finish).
    pub duration: Option<Duration>,
}

impl Extent {
    /// Requests sent when neither a count nor a duration is given.
    pub const DEFAULT_COUNT: u64 = 10;

    /// The count to stop at: the one given, none with only a duration, else the default.
    pub fn count(&self) -> Option<u64> {
        match (self.count, self.duration) {
            (Some(n), _) => Some(n),
            (None, Some(_)) => None,
            (None, None) => Some(Extent::DEFAULT_COUNT),
        }
    }

    /// Checks a request count is within 1 to [`MAX_REQUEST_COUNT`] (a front end may check a
    /// flag's value with it before building a plan).
    pub fn check_count(n: u64) -> Result<(), SettingError> {
        if n == 0 || n > MAX_REQUEST_COUNT {
            return Err(SettingError::new(
                Setting::RequestCount,
                format!("expected 1 to {MAX_REQUEST_COUNT} requests, found {n}"),
            ));
        }
        Ok(())
    }

    fn validate(&self) -> Result<(), SettingError> {
        if let Some(n) = self.count {
            Self::check_count(n)?;
        }
        if self.duration == Some(Duration::ZERO) {
            return Err(SettingError::new(
                Setting::BenchmarkDuration,
                "expected a positive duration, found 0",
            ));
        }
        Ok(())
    }
}

/// An open loop: requests arrive at `rate` per second with gaps drawn by `arrival`, whatever
/// the server does; a concurrency ceiling (the plan's `concurrency`) holds them, recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct RatePlan {
    /// What each request looks like.
    pub requests: SyntheticRequests,
    /// Requests per second.
    pub rate: f64,
    /// How gaps are drawn.
    pub arrival: ArrivalPattern,
    /// When to stop.
    pub extent: Extent,
}

/// A closed loop: `users` users, each sending its next request when its previous one ends.
#[derive(Debug, Clone, PartialEq)]
pub struct ClosedLoopPlan {
    /// What each request looks like.
    pub requests: SyntheticRequests,
    /// Users, so requests in flight: never more.
    pub users: usize,
    /// When to stop.
    pub extent: Extent,
}

/// `summary.json`'s `load` block: the shape a run had.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "shape", rename_all = "snake_case")]
pub enum LoadInfo {
    /// A trace on its own schedule (see the `trace` block).
    Trace,
    /// An open-loop rate.
    Rate {
        /// Requests per second asked for.
        request_rate: f64,
        /// `constant`, `poisson` or `gamma`.
        arrival_pattern: &'static str,
        /// The gamma shape; absent for the others.
        #[serde(skip_serializing_if = "Option::is_none")]
        arrival_smoothness: Option<f64>,
        /// The synthetic requests and when they stop.
        #[serde(flatten)]
        requests: SyntheticInfo,
    },
    /// A closed loop of users.
    ClosedLoop {
        /// Users.
        users: usize,
        /// The synthetic requests and when they stop.
        #[serde(flatten)]
        requests: SyntheticInfo,
    },
}

/// The synthetic requests of a run and when they stop.
#[derive(Debug, Clone, Serialize)]
pub struct SyntheticInfo {
    /// Input length after the shared prefix.
    pub isl: Length,
    /// Output length.
    pub osl: Length,
    /// The shared prefix, in tokens.
    pub shared_system_prompt_length: u32,
    /// The seed of lengths and arrivals.
    pub random_seed: u64,
    /// Requests to send (`null`: until the duration ends).
    pub request_count: Option<u64>,
    /// Seconds to keep sending (`null`: until the count is sent).
    pub benchmark_duration_s: Option<f64>,
    /// The target's context length (tokens), read before the run; absent when not known or
    /// the requests were not counted against it (as a trace's `selection.context_limit`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_limit: Option<u64>,
    /// Where [`SyntheticInfo::context_limit`] was read (`/v1/models max_model_len`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_limit_source: Option<String>,
    /// Planned requests the server will likely refuse against it (exact count of the plan's
    /// requests, whose token counts estimate the server's tokenizer).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub over_context: Option<u64>,
    /// Of [`SyntheticInfo::over_context`], those refused by their prompt alone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_over_context: Option<u64>,
}

impl SyntheticInfo {
    fn new(r: &SyntheticRequests, extent: &Extent) -> SyntheticInfo {
        SyntheticInfo {
            isl: r.isl,
            osl: r.osl,
            shared_system_prompt_length: r.shared_prefix,
            random_seed: r.seed,
            request_count: extent.count(),
            benchmark_duration_s: extent.duration.map(|d| d.as_secs_f64()),
            context_limit: None,
            context_limit_source: None,
            over_context: None,
            prompt_over_context: None,
        }
    }
}

impl LoadInfo {
    /// The synthetic requests counted against the target's context (a trace's counts are in
    /// its `selection`: nothing here).
    pub fn note_context(&mut self, counted: &crate::trace::SelectionReport) {
        let (LoadInfo::Rate { requests, .. } | LoadInfo::ClosedLoop { requests, .. }) = self else {
            return;
        };
        requests.context_limit = counted.context_limit;
        requests.context_limit_source = counted.context_limit_source.clone();
        requests.over_context = counted.over_context;
        requests.prompt_over_context = counted.prompt_over_context;
    }
}

impl RatePlan {
    /// Checks a request rate is within [`REQUEST_RATES`] (a front end may check a flag's
    /// value with it before building a plan).
    pub fn check_rate(rate: f64) -> Result<(), SettingError> {
        if !REQUEST_RATES.contains(&rate) {
            return Err(SettingError::new(
                Setting::RequestRate,
                format!(
                    "expected {} to {} requests per second, found {}",
                    REQUEST_RATES.start(),
                    REQUEST_RATES.end(),
                    number(rate)
                ),
            ));
        }
        Ok(())
    }

    /// Checks a gamma shape is within `ARRIVAL_SMOOTHNESS`.
    pub fn check_smoothness(k: f64) -> Result<(), SettingError> {
        if !ARRIVAL_SMOOTHNESS.contains(&k) {
            return Err(SettingError::new(
                Setting::ArrivalSmoothness,
                format!(
                    "expected {} to {}, found {}",
                    ARRIVAL_SMOOTHNESS.start(),
                    ARRIVAL_SMOOTHNESS.end(),
                    number(k)
                ),
            ));
        }
        Ok(())
    }

    /// Checks the rate, the arrival pattern, the lengths and the extent.
    pub fn validate(&self, length_limit: u32) -> Result<(), SettingError> {
        Self::check_rate(self.rate)?;
        if let ArrivalPattern::Gamma(k) = self.arrival {
            Self::check_smoothness(k)?;
        }
        validate_requests(&self.requests, length_limit)?;
        self.extent.validate()
    }

    /// Its `load` block.
    pub fn info(&self) -> LoadInfo {
        LoadInfo::Rate {
            request_rate: self.rate,
            arrival_pattern: self.arrival.name(),
            arrival_smoothness: match self.arrival {
                ArrivalPattern::Gamma(k) => Some(k),
                _ => None,
            },
            requests: SyntheticInfo::new(&self.requests, &self.extent),
        }
    }
}

impl ClosedLoopPlan {
    /// Checks the users, the lengths and the extent: at least one user, and no more users
    /// than requests (the extra ones would never send).
    pub fn validate(&self, length_limit: u32) -> Result<(), SettingError> {
        if !(1..=MAX_USERS).contains(&self.users) {
            return Err(SettingError::new(
                Setting::Concurrency,
                format!("expected 1 to {MAX_USERS} users, found {}", self.users),
            ));
        }
        validate_requests(&self.requests, length_limit)?;
        self.extent.validate()?;
        match self.extent.count() {
            Some(n) if (self.users as u64) > n => Err(SettingError::new(
                Setting::Concurrency,
                format!(
                    "{} users for {n} requests: the last {} would never send one; lower the \
                     concurrency or raise the request count",
                    self.users,
                    self.users as u64 - n
                ),
            )),
            _ => Ok(()),
        }
    }

    /// Its `load` block.
    pub fn info(&self) -> LoadInfo {
        LoadInfo::ClosedLoop {
            users: self.users,
            requests: SyntheticInfo::new(&self.requests, &self.extent),
        }
    }
}

/// Checks a length's standard deviation (`isl_stddev`, `osl_stddev`) is 0 or a positive
/// number (a front end may check a flag's value with it; the bound by the mean is the plan's).
pub fn check_stddev(setting: Setting, stddev: f64) -> Result<(), SettingError> {
    if !(stddev >= 0.0 && stddev.is_finite()) {
        return Err(SettingError::new(
            setting,
            format!(
                "expected 0 or a positive number of tokens, found {}",
                number(stddev)
            ),
        ));
    }
    Ok(())
}

fn validate_requests(r: &SyntheticRequests, limit: u32) -> Result<(), SettingError> {
    for (setting, stddev_setting, len) in [
        (Setting::Isl, Setting::IslStddev, r.isl),
        (Setting::Osl, Setting::OslStddev, r.osl),
    ] {
        if len.mean == 0 || len.mean > limit {
            return Err(SettingError::new(
                setting,
                format!(
                    "expected 1 to {limit} tokens (the length limit), found {}",
                    len.mean
                ),
            ));
        }
        check_stddev(stddev_setting, len.stddev)?;
        // Draws are kept within 1 and the limit: with a spread wider than the mean, about one
        // draw in six or more lands below 1 token and is moved there, and with 1e300 every request
        // was 1 token or the limit while the summary said "normal around the mean".
        if len.stddev > f64::from(len.mean) {
            return Err(SettingError::new(
                stddev_setting,
                format!(
                    "expected 0 to {mean} tokens (at most the mean, {mean}: a wider spread puts \
                     about one draw in six or more below 1 token, where it is clamped), found {}",
                    number(len.stddev),
                    mean = len.mean
                ),
            ));
        }
    }
    if r.shared_prefix > limit {
        return Err(SettingError::new(
            Setting::SharedPrefix,
            format!(
                "expected at most {limit} tokens (the length limit), found {}",
                r.shared_prefix
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(rate: f64, arrival: ArrivalPattern) -> RatePlan {
        RatePlan {
            requests: SyntheticRequests::fixed(100, 10),
            rate,
            arrival,
            extent: Extent::default(),
        }
    }

    fn refused(r: Result<(), SettingError>) -> Setting {
        r.expect_err("refused").setting
    }

    #[test]
    fn nonsense_is_refused_naming_the_setting() {
        assert!(rate(10.0, ArrivalPattern::Poisson).validate(1000).is_ok());
        assert_eq!(
            refused(rate(0.0, ArrivalPattern::Poisson).validate(1000)),
            Setting::RequestRate
        );
        assert_eq!(
            refused(rate(f64::NAN, ArrivalPattern::Constant).validate(1000)),
            Setting::RequestRate
        );
        assert_eq!(
            refused(rate(1.0, ArrivalPattern::Gamma(0.0)).validate(1000)),
            Setting::ArrivalSmoothness
        );
        // Values whose arrivals never advance (every gap rounds to zero): the run hung.
        for r in [1e15, 1e-300, f64::INFINITY] {
            let e = rate(r, ArrivalPattern::Constant)
                .validate(1000)
                .unwrap_err();
            assert_eq!(e.setting, Setting::RequestRate);
        }
        for k in [1e-20, 1e300] {
            let e = rate(10.0, ArrivalPattern::Gamma(k))
                .validate(1000)
                .unwrap_err();
            assert_eq!(e.setting, Setting::ArrivalSmoothness);
        }
        // Quoted compactly: `{}` printed 1e308 as 309 digits (audit L4).
        let e = rate(1e308, ArrivalPattern::Poisson)
            .validate(1000)
            .unwrap_err();
        assert_eq!(
            e.reason,
            "expected 0.000001 to 1000000 requests per second, found 1e308"
        );
        let e = rate(10.0, ArrivalPattern::Gamma(1e300))
            .validate(1000)
            .unwrap_err();
        assert!(e.reason.ends_with("found 1e300"), "{}", e.reason);
        assert!(rate(1e6, ArrivalPattern::Gamma(0.01))
            .validate(1000)
            .is_ok());
        let mut long = rate(1.0, ArrivalPattern::Constant);
        long.requests.isl.mean = 2000;
        assert_eq!(refused(long.validate(1000)), Setting::Isl);
        let mut bad = rate(1.0, ArrivalPattern::Constant);
        bad.requests.osl.stddev = -1.0;
        assert_eq!(refused(bad.validate(1000)), Setting::OslStddev);
        // A spread wider than the mean: most draws would be clamped to 1 token or the limit.
        for stddev in [1e300, 10.01] {
            bad.requests.osl = Length { mean: 10, stddev };
            assert_eq!(refused(bad.validate(1000)), Setting::OslStddev);
        }
        bad.requests.osl = Length {
            mean: 10,
            stddev: 10.0,
        };
        assert!(bad.validate(1000).is_ok());
        bad.requests.isl = Length {
            mean: 100,
            stddev: 1e300,
        };
        assert_eq!(refused(bad.validate(1000)), Setting::IslStddev);
        bad.requests.isl = Length::fixed(100);
        bad.requests.osl = Length::fixed(0);
        assert_eq!(refused(bad.validate(1000)), Setting::Osl);
        let mut none = rate(1.0, ArrivalPattern::Constant);
        none.extent.count = Some(0);
        assert_eq!(refused(none.validate(1000)), Setting::RequestCount);
        none.extent = Extent {
            count: None,
            duration: Some(Duration::ZERO),
        };
        assert_eq!(refused(none.validate(1000)), Setting::BenchmarkDuration);
    }

    #[test]
    fn more_users_than_requests_is_refused() {
        let mut users = ClosedLoopPlan {
            requests: SyntheticRequests::fixed(100, 10),
            users: 11,
            extent: Extent::default(),
        };
        // The default count is 10.
        assert_eq!(refused(users.validate(1000)), Setting::Concurrency);
        users.extent.duration = Some(Duration::from_secs(1));
        assert!(
            users.validate(1000).is_ok(),
            "a duration has no count to exceed"
        );
        users.users = 0;
        assert_eq!(refused(users.validate(1000)), Setting::Concurrency);
        // With only a duration nothing bounded the users: 1e8 tasks ran the host out of memory.
        users.users = 100_000_000;
        assert_eq!(refused(users.validate(1000)), Setting::Concurrency);
        users.users = MAX_USERS;
        assert!(users.validate(1000).is_ok());
    }

    #[test]
    fn the_extent_defaults_to_aiperfs_count() {
        assert_eq!(Extent::default().count(), Some(10));
        let d = Extent {
            count: None,
            duration: Some(Duration::from_secs(5)),
        };
        assert_eq!(d.count(), None);
    }
}

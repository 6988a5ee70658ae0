//! Cancellation on purpose (`--request-cancellation-rate P --request-cancellation-delay D`, as
//! aiperf spells it): a share of requests closes its connection D after it was sent, as a
//! user who gives up mid-stream. The record keeps what arrived before the close and says
//! `cancelled`; the server should see the disconnect and free the sequence.

use crate::plan::{Setting, SettingError};
use canary_core::splitmix64;
use std::time::Duration;

/// Which requests are cancelled, and when.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cancellation {
    /// Percentage of requests cancelled, 0 to 100 (aiperf's unit).
    pub rate_percent: f64,
    /// Time from sending a request to closing it.
    pub delay: Duration,
    /// Picks which requests: the same seed cancels the same request indexes.
    pub seed: u64,
}

impl Cancellation {
    /// The longest delay accepted: a day (a longer one can never fire before a timeout).
    pub const MAX_DELAY: Duration = Duration::from_secs(86_400);

    /// Checks the rate is a percentage and the delay is bounded.
    pub fn validate(&self) -> Result<(), SettingError> {
        Self::check_rate(self.rate_percent)?;
        Self::check_delay(self.delay)
    }

    /// Checks a cancellation rate is a percentage (a front end may check a flag's value with
    /// it before building a plan).
    pub fn check_rate(p: f64) -> Result<(), SettingError> {
        if !(0.0..=100.0).contains(&p) {
            return Err(SettingError::new(
                Setting::RequestCancellationRate,
                "expected a percentage from 0 to 100",
            )
            .with_value(canary_core::rate_text::number(p)));
        }
        Ok(())
    }

    /// Checks a cancellation delay is at most [`MAX_DELAY`](Self::MAX_DELAY).
    pub fn check_delay(delay: Duration) -> Result<(), SettingError> {
        if delay > Self::MAX_DELAY {
            return Err(SettingError::new(
                Setting::RequestCancellationDelay,
                "expected at most 86400 seconds",
            )
            .with_value(format!("{}", delay.as_secs_f64())));
        }
        Ok(())
    }

    /// True when the request of this index is one of those cancelled: a hash of seed and
    /// index under the rate, so the choice is independent of the URL or user it goes to and
    /// the same on every run with the same seed.
    pub fn cancels(&self, index: u32) -> bool {
        let draw = splitmix64(splitmix64(self.seed) ^ u64::from(index));
        // 53 bits: a uniform f64 in [0, 1).
        let u = (draw >> 11) as f64 / (1u64 << 53) as f64;
        u * 100.0 < self.rate_percent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(rate_percent: f64, seed: u64) -> Cancellation {
        Cancellation {
            rate_percent,
            delay: Duration::from_millis(10),
            seed,
        }
    }

    #[test]
    fn the_share_cancelled_follows_the_rate_and_the_seed() {
        let count = |c: Cancellation| (0..100_000).filter(|&i| c.cancels(i)).count();
        assert_eq!(count(at(0.0, 1)), 0);
        assert_eq!(count(at(100.0, 1)), 100_000);
        let quarter = count(at(25.0, 1));
        assert!((24_000..26_000).contains(&quarter), "{quarter}");
        let picked = |c: Cancellation| (0..64).filter(|&i| c.cancels(i)).collect::<Vec<_>>();
        assert_eq!(picked(at(50.0, 7)), picked(at(50.0, 7)));
        assert_ne!(picked(at(50.0, 7)), picked(at(50.0, 8)));
    }

    #[test]
    fn a_rate_outside_a_percentage_or_an_endless_delay_is_refused() {
        let e = at(101.0, 0).validate().unwrap_err();
        assert_eq!(e.setting, Setting::RequestCancellationRate);
        assert!(at(f64::NAN, 0).validate().is_err());
        assert!(at(-1.0, 0).validate().is_err());
        // Quoted compactly, not as 301 digits (audit L4).
        let e = at(1e300, 0).validate().unwrap_err();
        assert_eq!(e.value.as_deref(), Some("1e300"));
        let mut long = at(10.0, 0);
        long.delay = Duration::from_secs(86_401);
        let e = long.validate().unwrap_err();
        assert_eq!(e.setting, Setting::RequestCancellationDelay);
        assert!(at(100.0, 0).validate().is_ok());
    }
}

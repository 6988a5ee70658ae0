//! [`StartAt`]: a wall-clock instant every shard of a replay starts its schedule from.
//!
//! Each shard maps the instant onto its own CLOCK_MONOTONIC once, when the run starts
//! ([`RealtimeMap`]), and schedules from there: a later step of the wall clock moves nothing.
//! A shard that reaches the instant late would send its first requests late and the union
//! of the shards would not be the trace's arrival pattern, so it refuses unless lateness is
//! allowed ([`StartAt::max_late`]); then it keeps the common origin (its later requests stay
//! aligned with the other shards), sends what is already due at once, and says how late.

use crate::plan::{Setting, SettingError};
use canary_core::{MonoTime, RealtimeMap};
use std::time::Duration;

/// An instant further ahead than this is refused: a typo in the year would otherwise hold
/// a shard idle for years.
pub const MAX_LEAD: Duration = Duration::from_secs(7 * 86_400);

/// A common start instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartAt {
    /// The instant as the user gave it (RFC 3339), for messages and `summary.json`.
    pub text: String,
    /// The instant in Unix ns.
    pub unix_ns: i64,
    /// How late the run may begin after the instant and still go ahead (default 0: refuse).
    pub max_late: Duration,
}

/// Where a [`StartAt`] fell on this host's monotonic clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placed {
    /// The instant on CLOCK_MONOTONIC: the run's t0.
    pub t0: MonoTime,
    /// The mapping it was placed with.
    pub map: RealtimeMap,
    /// When the mapping was taken.
    pub at: MonoTime,
}

impl Placed {
    /// How far `now` is past the instant (zero when it is still ahead).
    pub fn late_by(&self, now: MonoTime) -> Duration {
        now.since(self.t0)
    }
}

impl StartAt {
    /// Maps the instant onto the monotonic clock now, refusing it when it is more than
    /// [`MAX_LEAD`] ahead or already more than [`StartAt::max_late`] past.
    pub fn place(&self) -> Result<Placed, SettingError> {
        let map = RealtimeMap::measure();
        let at = MonoTime::now();
        let t0 = MonoTime((self.unix_ns as i128 - map.offset_ns as i128).max(0) as u64);
        let placed = Placed { t0, map, at };
        if t0.since(at) > MAX_LEAD {
            return Err(self.error(format!(
                "{:.0} s ahead, more than the {} days allowed",
                t0.since(at).as_secs_f64(),
                MAX_LEAD.as_secs() / 86_400
            )));
        }
        self.check_late(&placed, at)?;
        Ok(placed)
    }

    /// Refuses a run that begins at `now`, more than [`StartAt::max_late`] after the instant.
    pub fn check_late(&self, placed: &Placed, now: MonoTime) -> Result<(), SettingError> {
        let late = placed.late_by(now);
        if late > self.max_late {
            return Err(self.error(format!(
                "the instant passed {:.3} s ago (this shard started too late to keep the \
                 trace's timing with the others; allowed lateness {:.3} s, set with \
                 max_late_start / --max-late-start)",
                late.as_secs_f64(),
                self.max_late.as_secs_f64()
            )));
        }
        Ok(())
    }

    fn error(&self, reason: String) -> SettingError {
        SettingError::new(Setting::StartAt, reason).with_value(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{SystemTime, UNIX_EPOCH};

    fn in_ms(ms: i64, max_late: Duration) -> StartAt {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        StartAt {
            text: format!("now{ms:+}ms"),
            unix_ns: now.as_nanos() as i64 + ms * 1_000_000,
            max_late,
        }
    }

    #[test]
    fn an_instant_ahead_lands_ahead_on_the_monotonic_clock() {
        let p = in_ms(60_000, Duration::ZERO).place().unwrap();
        // Ordering only: the instant a minute ahead is more than 50 s ahead of the mapping.
        assert!(p.t0 > p.at + Duration::from_secs(50), "{p:?}");
        assert_eq!(p.late_by(p.at), Duration::ZERO);
    }

    #[test]
    fn a_past_instant_is_refused_unless_lateness_is_allowed() {
        let e = in_ms(-5_000, Duration::ZERO).place().unwrap_err();
        assert_eq!(e.setting, Setting::StartAt);
        assert!(e.reason.contains("passed"), "{e}");
        assert!(e.to_string().starts_with("start_at now-5000ms:"), "{e}");
        let p = in_ms(-5_000, Duration::from_secs(3600)).place().unwrap();
        assert!(
            p.late_by(MonoTime::now()) >= Duration::from_secs(4),
            "{p:?}"
        );
    }

    #[test]
    fn an_instant_years_ahead_is_refused() {
        let e = in_ms(400 * 86_400_000, Duration::ZERO).place().unwrap_err();
        assert!(e.reason.contains("ahead"), "{e}");
    }
}

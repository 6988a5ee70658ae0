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
        self.place_with(map, MonoTime::now())
    }

    /// [`StartAt::place`] with the mapping `map`, taken at `at` (tests give their own clocks).
    ///
    /// The instant's place on the monotonic clock is signed: one before this host booted lies
    /// before CLOCK_MONOTONIC's zero. Its lateness is the whole gap (clamping it at boot made
    /// an instant three days back read as late by the uptime, and go ahead under
    /// `--max-late-start 1d`), and even when that lateness is allowed it is refused: the run
    /// has no monotonic t0 to keep the common origin from.
    pub fn place_with(&self, map: RealtimeMap, at: MonoTime) -> Result<Placed, SettingError> {
        let t0_ns = self.unix_ns as i128 - map.offset_ns as i128;
        let at_ns = at.as_nanos() as i128;
        let lead_ns = t0_ns - at_ns;
        if lead_ns > MAX_LEAD.as_nanos() as i128 {
            return Err(self.error(format!(
                "{:.0} s ahead, more than the {} days allowed",
                lead_ns as f64 / 1e9,
                MAX_LEAD.as_secs() / 86_400
            )));
        }
        if t0_ns < 0 {
            let late = Duration::from_nanos(u64::try_from(-lead_ns).unwrap_or(u64::MAX));
            self.refuse_late(late)?;
            return Err(self.error(format!(
                "the instant passed {:.3} s ago, {:.3} s before this host booted: it has no \
                 place on this host's monotonic clock to keep the common start from, whatever \
                 lateness --max-late-start allows; give an instant after boot",
                late.as_secs_f64(),
                (-t0_ns) as f64 / 1e9
            )));
        }
        let placed = Placed {
            t0: MonoTime(t0_ns as u64),
            map,
            at,
        };
        self.check_late(&placed, at)?;
        Ok(placed)
    }

    /// Refuses a run that begins at `now`, more than [`StartAt::max_late`] after the instant.
    pub fn check_late(&self, placed: &Placed, now: MonoTime) -> Result<(), SettingError> {
        self.refuse_late(placed.late_by(now))
    }

    fn refuse_late(&self, late: Duration) -> Result<(), SettingError> {
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

    /// A host booted 73,496 s ago (an audit's): instants before its boot used to be placed at
    /// boot, so their lateness read as the uptime whatever the instant, and three days back
    /// went ahead under `--max-late-start 1d`.
    #[test]
    fn an_instant_before_boot_is_as_late_as_it_is_and_never_placed() {
        const S: i64 = 1_000_000_000;
        let uptime = 73_496 * S;
        let at = MonoTime(uptime as u64);
        let map = RealtimeMap {
            offset_ns: 1_700_000_000 * S, // the wall clock at boot
            uncertainty_ns: 0,
        };
        let now_unix = map.offset_ns + uptime;
        let start = |ago: i64, max_late: Duration| StartAt {
            text: format!("now-{ago}s"),
            unix_ns: now_unix - ago * S,
            max_late,
        };
        let day = Duration::from_secs(86_400);
        for ago in [86_400, 3 * 86_400, 7 * 365 * 86_400] {
            let e = start(ago, Duration::ZERO).place_with(map, at).unwrap_err();
            assert!(e.reason.contains(&format!("passed {ago}.000 s ago")), "{e}");
        }
        let e = start(3 * 86_400, day).place_with(map, at).unwrap_err();
        assert!(e.reason.contains("passed 259200.000 s ago"), "{e}");
        assert!(e.reason.contains("allowed lateness 86400.000 s"), "{e}");
        // Lateness allowed, but the instant has no monotonic place: said, not placed at 0.
        let e = start(3 * 86_400, 4 * day).place_with(map, at).unwrap_err();
        assert!(
            e.reason
                .contains("passed 259200.000 s ago, 185704.000 s before this host booted"),
            "{e}"
        );
        // An instant after boot keeps its true lateness.
        let p = start(3_600, day).place_with(map, at).unwrap();
        assert_eq!(p.t0, MonoTime((uptime - 3_600 * S) as u64));
        assert_eq!(p.late_by(at), Duration::from_secs(3_600));
    }

    #[test]
    fn an_instant_years_ahead_is_refused() {
        let e = in_ms(400 * 86_400_000, Duration::ZERO).place().unwrap_err();
        assert!(e.reason.contains("ahead"), "{e}");
    }
}

//! The one clock every measurement comes from.
//!
//! `CLOCK_MONOTONIC` in nanoseconds: the clock `bpf_ktime_get_ns` uses and the one behind
//! `std::time::Instant` on Linux, so kernel events, telemetry samples and request records can be
//! subtracted from each other. Wall-clock time only labels exports (see [`WallAnchor`]).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A point on `CLOCK_MONOTONIC`, in nanoseconds since boot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct MonoTime(pub u64);

impl MonoTime {
    /// Reads `CLOCK_MONOTONIC` now.
    pub fn now() -> MonoTime {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid out-pointer; CLOCK_MONOTONIC always exists on Linux.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        MonoTime(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
    }

    /// Nanoseconds since boot.
    pub fn as_nanos(self) -> u64 {
        self.0
    }

    /// `self - earlier`, saturating at zero.
    pub fn since(self, earlier: MonoTime) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// `self - earlier` in signed nanoseconds (negative when `self` is earlier).
    pub fn signed_nanos_since(self, earlier: MonoTime) -> i64 {
        self.0 as i64 - earlier.0 as i64
    }

    /// Milliseconds (fractional) since `origin`; negative if before it.
    pub fn ms_since(self, origin: MonoTime) -> f64 {
        self.signed_nanos_since(origin) as f64 / 1e6
    }
}

impl MonoTime {
    /// `self + d`, or `None` past the end of the clock (about 584 years after boot).
    pub fn checked_add(self, d: Duration) -> Option<MonoTime> {
        u64::try_from(d.as_nanos())
            .ok()
            .and_then(|n| self.0.checked_add(n))
            .map(MonoTime)
    }
}

impl std::ops::Add<Duration> for MonoTime {
    type Output = MonoTime;

    /// Saturates at the end of the clock: a deadline computed from a bad trace (a timestamp
    /// in the wrong unit, a huge delay) lies in the far future instead of panicking.
    fn add(self, d: Duration) -> MonoTime {
        self.checked_add(d).unwrap_or(MonoTime(u64::MAX))
    }
}

impl std::ops::Sub<Duration> for MonoTime {
    type Output = MonoTime;

    /// Saturates at zero.
    fn sub(self, d: Duration) -> MonoTime {
        MonoTime(self.0.saturating_sub(d.as_nanos() as u64))
    }
}

/// Pairs one monotonic reading with the wall clock, once per run, to label exports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WallAnchor {
    /// The monotonic reading.
    pub mono: MonoTime,
    /// Unix time in nanoseconds taken right after `mono`.
    pub unix_nanos: u64,
}

impl WallAnchor {
    /// Takes the anchor now.
    pub fn now() -> WallAnchor {
        let mono = MonoTime::now();
        let unix_nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        WallAnchor { mono, unix_nanos }
    }

    /// The wall-clock label (Unix nanoseconds) for a monotonic time.
    pub fn unix_nanos_at(&self, t: MonoTime) -> u64 {
        (self.unix_nanos as i64 + t.signed_nanos_since(self.mono)) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// `Instant`'s own `CLOCK_MONOTONIC` reading in ns, from its `Debug` form (`Instant {
    /// tv_sec: S, tv_nsec: N }` on Linux), the only place std shows it. Should std ever print
    /// it differently, this fails saying so rather than checking nothing.
    fn instant_nanos(i: Instant) -> u64 {
        let text = format!("{i:?}");
        let field = |name: &str| -> u64 {
            text.split(&format!("{name}: "))
                .nth(1)
                .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("no {name} in {text}"))
        };
        field("tv_sec") * 1_000_000_000 + field("tv_nsec")
    }

    // Order only, no durations: an `Instant` read between two `MonoTime` readings lies
    // between them on the same clock, however long the machine paused in between.
    #[test]
    fn monotonic_and_same_clock_as_instant() {
        let a = MonoTime::now();
        let i = Instant::now();
        let b = MonoTime::now();
        let n = instant_nanos(i);
        assert!(a <= b, "{a:?} then {b:?}");
        assert!(
            a.as_nanos() <= n && n <= b.as_nanos(),
            "Instant at {n} ns, not between MonoTime readings {a:?} and {b:?}"
        );
    }

    #[test]
    fn adding_past_the_end_saturates() {
        let late = MonoTime(u64::MAX - 5);
        assert_eq!(late + Duration::from_secs(1), MonoTime(u64::MAX));
        assert_eq!(late + Duration::MAX, MonoTime(u64::MAX));
        assert_eq!(late.checked_add(Duration::from_nanos(6)), None);
        assert_eq!(
            late.checked_add(Duration::from_nanos(5)),
            Some(MonoTime(u64::MAX))
        );
        assert_eq!(MonoTime(1) + Duration::from_nanos(2), MonoTime(3));
    }

    #[test]
    fn wall_anchor_maps_forward() {
        let anchor = WallAnchor::now();
        let later = anchor.mono + Duration::from_secs(2);
        assert_eq!(
            anchor.unix_nanos_at(later),
            anchor.unix_nanos + 2_000_000_000
        );
        assert_eq!(later.ms_since(anchor.mono), 2000.0);
        assert_eq!(anchor.mono.ms_since(later), -2000.0);
    }
}

//! The one clock every measurement comes from.
//!
//! `CLOCK_MONOTONIC` in nanoseconds: the clock `bpf_ktime_get_ns` uses and the one behind
//! `std::time::Instant` on Linux, so kernel events, telemetry samples and request records can be
//! subtracted from each other. Wall-clock time only labels exports (see [`WallAnchor`]).

mod quality;
mod release;

pub use quality::{ClockReport, KernelSync, StartReport};
pub use release::ReleaseReport;

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

/// How `CLOCK_REALTIME` maps onto the monotonic clock, from readings of both taken together.
///
/// The kernel stamps received packets on `CLOCK_REALTIME` (`SO_TIMESTAMPING`), which NTP or an
/// operator may step; the two clocks otherwise run at the same rate, so one offset, measured close
/// to the stamps it maps, turns a stamp into a [`MonoTime`] (DESIGN.md, "Clocks and honest
/// timestamps").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RealtimeMap {
    /// `CLOCK_REALTIME − CLOCK_MONOTONIC`, in nanoseconds.
    pub offset_ns: i64,
    /// How far the mapping may be off, in nanoseconds: half the width of the tightest
    /// monotonic bracket around a realtime reading.
    pub uncertainty_ns: u64,
}

impl RealtimeMap {
    /// Brackets taken by [`RealtimeMap::measure`]; the tightest wins (one may be stretched by
    /// an interrupt or a preemption).
    pub const BRACKETS: usize = 4;

    /// Measures the offset now: the tightest of [`RealtimeMap::BRACKETS`] monotonic brackets
    /// around a realtime reading.
    pub fn measure() -> RealtimeMap {
        (0..Self::BRACKETS)
            .map(|_| {
                let before = MonoTime::now();
                let realtime = realtime_nanos();
                let after = MonoTime::now();
                RealtimeMap::from_bracket(before, realtime, after)
            })
            .min_by_key(|m| m.uncertainty_ns)
            .expect("at least one bracket")
    }

    /// The map from one realtime reading taken between two monotonic ones.
    pub fn from_bracket(before: MonoTime, realtime_ns: u64, after: MonoTime) -> RealtimeMap {
        let half = after.since(before).as_nanos() as u64 / 2;
        let mid = before.0 + half;
        RealtimeMap {
            offset_ns: realtime_ns as i64 - mid as i64,
            uncertainty_ns: half,
        }
    }

    /// A `CLOCK_REALTIME` time (ns since the Unix epoch) on the monotonic clock.
    pub fn to_mono(&self, realtime_ns: u64) -> MonoTime {
        MonoTime((realtime_ns as i64 - self.offset_ns).max(0) as u64)
    }

    /// How far this map and `later` disagree, beyond what their uncertainties allow (0 when
    /// they agree): nonzero when the realtime clock was stepped between the two.
    pub fn step_since(&self, earlier: &RealtimeMap) -> u64 {
        let diff = self.offset_ns.abs_diff(earlier.offset_ns);
        diff.saturating_sub(self.uncertainty_ns + earlier.uncertainty_ns)
    }
}

/// `CLOCK_REALTIME` now, in nanoseconds since the Unix epoch.
fn realtime_nanos() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; CLOCK_REALTIME always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
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
    #[test]
    fn realtime_map_puts_a_realtime_reading_inside_its_monotonic_bracket() {
        let map = RealtimeMap::measure();
        for _ in 0..100 {
            let before = MonoTime::now();
            let realtime = realtime_nanos();
            let after = MonoTime::now();
            let mapped = map.to_mono(realtime);
            let u = Duration::from_nanos(map.uncertainty_ns);
            assert!(
                mapped + u >= before && mapped <= after + u,
                "{mapped:?} outside {before:?}..{after:?} ± {u:?}"
            );
        }
        assert_eq!(map.step_since(&RealtimeMap::measure()), 0);
    }

    #[test]
    fn a_step_of_the_realtime_clock_shows_between_two_maps() {
        let a = RealtimeMap::from_bracket(MonoTime(1_000), 5_000_500, MonoTime(2_000));
        assert_eq!((a.offset_ns, a.uncertainty_ns), (4_999_000, 500));
        assert_eq!(a.to_mono(5_000_500), MonoTime(1_500));
        let stepped = RealtimeMap {
            offset_ns: a.offset_ns + 10_000,
            uncertainty_ns: 100,
        };
        assert_eq!(stepped.step_since(&a), 10_000 - 600);
        let same = RealtimeMap {
            offset_ns: a.offset_ns - 400,
            uncertainty_ns: 100,
        };
        assert_eq!(same.step_since(&a), 0);
    }
}

//! How late the timer wakes the release thread, measured online, and so how early it must ask
//! to be woken: the spin before a deadline lasts only as long as this host's wake-ups need.

use std::time::Duration;

/// Wake-ups remembered: enough for a stable high quantile, few enough to follow a change of
/// load within a fraction of a second at the rates that cost CPU.
const WINDOW: usize = 64;
/// Wake-ups measured before the estimate replaces the conservative start.
pub(crate) const WARM_UP: usize = 16;
/// The margin before anything is measured, and the most ever spun per wake-up: the fixed
/// spin canaryd used before it measured (a loaded host's ms-long wake-ups are preemption,
/// which spinning does not beat, only pays for).
pub(crate) const MAX_MARGIN: Duration = Duration::from_micros(200);
/// Added to the quantile: the clock reads and the syscall around the sleep.
const PAD: Duration = Duration::from_micros(2);
/// The share of wake-ups the margin covers (the rest are late by what exceeds it).
const QUANTILE: f64 = 0.95;

/// A sliding window of wake-up errors (how far past the instant asked the thread woke) and
/// the margin derived from it.
#[derive(Debug, Clone)]
pub(crate) struct WakeError {
    samples: [u32; WINDOW],
    len: usize,
    next: usize,
    margin: Duration,
    /// Every wake-up measured (exact count).
    pub(crate) wakeups: u64,
}

impl Default for WakeError {
    fn default() -> Self {
        WakeError {
            samples: [0; WINDOW],
            len: 0,
            next: 0,
            margin: MAX_MARGIN,
            wakeups: 0,
        }
    }
}

impl WakeError {
    /// Records one timer wake-up `late` past the instant asked.
    pub(crate) fn record(&mut self, late: Duration) {
        self.samples[self.next] = u32::try_from(late.as_nanos()).unwrap_or(u32::MAX);
        self.next = (self.next + 1) % WINDOW;
        self.len = (self.len + 1).min(WINDOW);
        self.wakeups += 1;
        if self.len >= WARM_UP {
            let q = self.quantile(QUANTILE).unwrap_or(MAX_MARGIN);
            self.margin = (q + PAD).min(MAX_MARGIN);
        }
    }

    /// How long before a deadline to ask to be woken (and then spin).
    pub(crate) fn margin(&self) -> Duration {
        self.margin
    }

    /// The `q` quantile (nearest rank) of the wake-ups in the window; `None` before any.
    pub(crate) fn quantile(&self, q: f64) -> Option<Duration> {
        if self.len == 0 {
            return None;
        }
        let mut v = self.samples;
        let v = &mut v[..self.len];
        let rank = ((q * self.len as f64).ceil() as usize).clamp(1, self.len) - 1;
        let (_, x, _) = v.select_nth_unstable(rank);
        Some(Duration::from_nanos(u64::from(*x)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    #[test]
    fn starts_at_the_old_fixed_spin_until_enough_wakeups_are_measured() {
        let mut w = WakeError::default();
        assert_eq!(w.margin(), MAX_MARGIN);
        assert_eq!(w.quantile(0.5), None);
        for _ in 0..WARM_UP - 1 {
            w.record(us(20));
        }
        assert_eq!(w.margin(), MAX_MARGIN);
        w.record(us(20));
        assert_eq!(w.margin(), us(22));
        assert_eq!(w.wakeups, WARM_UP as u64);
    }

    #[test]
    fn the_margin_covers_95_percent_of_recent_wakeups() {
        let mut w = WakeError::default();
        // 1..=64 µs, shuffled: the nearest-rank p95 of 64 values is the 61st.
        for i in 0..64u64 {
            w.record(us((i * 37) % 64 + 1));
        }
        assert_eq!(w.quantile(QUANTILE), Some(us(61)));
        assert_eq!(w.margin(), us(61) + PAD);
        assert_eq!(w.quantile(0.5), Some(us(32)));
    }

    #[test]
    fn a_rare_late_wakeup_does_not_inflate_the_margin() {
        let mut w = WakeError::default();
        for i in 0..64 {
            w.record(if i == 10 { us(5_000) } else { us(30) });
        }
        assert_eq!(w.margin(), us(32));
    }

    #[test]
    fn the_margin_follows_the_host_down_and_back_up() {
        let mut w = WakeError::default();
        for _ in 0..64 {
            w.record(us(150));
        }
        assert_eq!(w.margin(), us(152));
        // A quieter host: once the old wake-ups leave the window, so does their margin.
        for _ in 0..64 {
            w.record(us(10));
        }
        assert_eq!(w.margin(), us(12));
        for _ in 0..8 {
            w.record(us(80));
        }
        assert_eq!(w.margin(), us(82), "8 of 64 late wake-ups are above p95");
    }

    #[test]
    fn never_spins_longer_than_the_cap_on_a_preempted_host() {
        let mut w = WakeError::default();
        for _ in 0..64 {
            w.record(Duration::from_millis(3));
        }
        assert_eq!(w.margin(), MAX_MARGIN);
        // And an absurd wake-up (seconds) is held, not wrapped.
        w.record(Duration::from_secs(10));
        assert_eq!(
            w.quantile(1.0),
            Some(Duration::from_nanos(u64::from(u32::MAX)))
        );
    }
}

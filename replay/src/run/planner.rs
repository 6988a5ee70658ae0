//! Which sessions to start, and when: each at its prepare time, shortly before its first turn
//! is due; every session whose prepare time has passed at one wake-up.
//!
//! Starting every session due within the next 10 ms at one wake-up (so a session was prepared
//! up to 60 ms ahead instead of 50) saved the planner's wake-ups on even and Poisson arrivals,
//! but it made the server's own arrival times later at 4,000 req/s (the simulator's referee
//! lag p99 6–22 ms against main's 0.4–0.6, quiet host; bench/RESULTS.md, "One runtime
//! thread"), so it was not kept (issue 21). Re-judged with repeats (bench/RESULTS.md, "Fewer
//! wake-ups per request"): wake-ups on a 5 ms grid, a wake-up's sessions started one after
//! another so they did not wake the other worker, cost 0.75–1.13 × this planner's CPU per
//! request at 2,000–4,000 req/s (medians per window and pattern), but at 4,000 req/s 34 of 68 runs had the server's arrivals p99 over 3 ms against
//! 21 of 68 for this planner; plain batching on the grid woke the other worker per session and
//! cost more switches than the timers it saved. Not kept either.

use crate::schedule::{Session, Timing};
use canary_core::MonoTime;
use std::time::Duration;

/// A run's sessions in first-deadline order, which can count the requests of those not yet
/// taken without building them: a stop of a long run (a rate for 24 hours) must not build
/// every request it will never send just to count them.
pub(crate) trait Sessions: Iterator<Item = Session> {
    /// Requests of the sessions not yet taken; none is left to take after.
    fn requests_left(&mut self) -> Left;
}

/// Requests a stop left unsent: how many, and whether counted or estimated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Left {
    pub requests: u64,
    /// Estimated, not counted (a rate run stopped with more arrivals left than a stop may
    /// draw: `work::EXACT_DRAWS`).
    pub estimated: bool,
}

impl Left {
    /// `requests`, counted.
    pub fn exact(requests: u64) -> Left {
        Left {
            requests,
            estimated: false,
        }
    }
}

impl<S: Sessions + ?Sized> Sessions for Box<S> {
    fn requests_left(&mut self) -> Left {
        (**self).requests_left()
    }
}

/// Sessions in first-deadline order, handed out as their prepare times pass.
pub(super) struct Planner<I: Sessions> {
    sessions: I,
    /// The next session, taken to see its prepare time.
    peeked: Option<Session>,
    t0: MonoTime,
    timing: Timing,
    prepare_ahead: Duration,
}

impl<I: Sessions> Planner<I> {
    /// The sessions of a run started at `t0`, each prepared `prepare_ahead` before its first
    /// deadline.
    pub fn new(mut sessions: I, t0: MonoTime, timing: Timing, prepare_ahead: Duration) -> Self {
        Planner {
            peeked: sessions.next(),
            sessions,
            t0,
            timing,
            prepare_ahead,
        }
    }

    /// When the next session is to be prepared; `None` when every session has started.
    pub fn next_wake(&mut self) -> Option<MonoTime> {
        let prepare_at = self.prepare_at();
        self.peeked.as_ref().map(prepare_at)
    }

    /// Every session to be prepared by `now`, in order.
    pub fn due(&mut self, now: MonoTime) -> Vec<Session> {
        let prepare_at = self.prepare_at();
        let mut due = Vec::new();
        while let Some(s) = self.peeked.take_if(|s| prepare_at(s) <= now) {
            due.push(s);
            self.peeked = self.sessions.next();
        }
        due
    }

    /// A session's prepare time: `prepare_ahead` before its first deadline.
    fn prepare_at(&self) -> impl Fn(&Session) -> MonoTime {
        let (t0, timing, ahead) = (self.t0, self.timing, self.prepare_ahead);
        move |s| t0 + timing.offset(&s.turns[0]) - ahead
    }

    /// Requests of the sessions never started (a stop came first).
    pub fn unstarted(mut self) -> Left {
        let peeked = self.peeked.map_or(0, |s| s.turns.len() as u64);
        let left = self.sessions.requests_left();
        Left {
            requests: peeked + left.requests,
            ..left
        }
    }
}

impl Sessions for crate::schedule::IntoSessions {
    fn requests_left(&mut self) -> Left {
        Left::exact(crate::schedule::IntoSessions::requests_left(self))
    }
}

impl Sessions for super::work::RateSessions {
    fn requests_left(&mut self) -> Left {
        super::work::RateSessions::requests_left(self, super::work::EXACT_DRAWS)
    }
}

/// A closed loop's users claim their requests themselves: the planner starts none.
impl Sessions for std::iter::Empty<Session> {
    fn requests_left(&mut self) -> Left {
        Left::exact(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synthetic::SyntheticRequests;

    /// Made-up sessions, counted by building them (as nothing in the product may).
    struct Listed<I>(I);

    impl<I: Iterator<Item = Session>> Iterator for Listed<I> {
        type Item = Session;
        fn next(&mut self) -> Option<Session> {
            self.0.next()
        }
    }

    impl<I: Iterator<Item = Session>> Sessions for Listed<I> {
        fn requests_left(&mut self) -> Left {
            Left::exact(self.0.by_ref().map(|s| s.turns.len() as u64).sum())
        }
    }

    fn session(at_ms: u64, turns: usize) -> Session {
        let mut req = SyntheticRequests::fixed(64, 8).request(0, 1024);
        req.timestamp_us = at_ms * 1000;
        Session {
            turns: vec![req; turns],
        }
    }

    // On made-up times: nothing here depends on how fast this machine runs.
    #[test]
    fn a_wake_up_starts_every_session_whose_prepare_time_passed_and_no_later_one() {
        let t0 = MonoTime(1_000_000_000);
        let ms = Duration::from_millis;
        // Even arrivals every 2 ms (500 req/s), prepared 50 ms ahead.
        let sessions = (0..20).map(|i| session(2 * i, 1));
        let mut p = Planner::new(Listed(sessions), t0, Timing::real_time(), ms(50));
        let first = p.next_wake().unwrap();
        assert_eq!(first, t0 - ms(50));
        // Woken at the first session's prepare time: it alone, not the one 2 ms later.
        let due = p.due(first);
        let offsets: Vec<u64> = due.iter().map(|s| s.turns[0].timestamp_us).collect();
        assert_eq!(offsets, [0]);
        assert_eq!(p.next_wake(), Some(t0 + ms(2) - ms(50)));
        // A late wake-up takes every session it passed, in order, and no later one.
        let due = p.due(t0 + ms(7) - ms(50));
        let offsets: Vec<u64> = due.iter().map(|s| s.turns[0].timestamp_us).collect();
        assert_eq!(offsets, [2000, 4000, 6000]);
        assert_eq!(p.due(t0).len(), 16, "8 .. 38 ms: every one left");
        assert_eq!(p.next_wake(), None);
        assert_eq!(p.unstarted(), Left::exact(0));
    }

    #[test]
    fn sessions_never_started_count_all_their_turns() {
        let t0 = MonoTime(1_000_000_000);
        let ms = Duration::from_millis;
        let sessions = vec![session(0, 3), session(100, 2), session(200, 4)].into_iter();
        let mut p = Planner::new(Listed(sessions), t0, Timing::real_time(), ms(50));
        let wake = p.next_wake().unwrap();
        assert_eq!(p.due(wake).len(), 1, "the others are 100 ms later");
        assert_eq!(p.unstarted(), Left::exact(6));
    }
}

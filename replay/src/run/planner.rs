//! Which sessions to start, and when: each shortly before its first turn is due, several at
//! one wake-up.
//!
//! Starting each session at its own prepare time woke the planner once per session, and on
//! an even or Poisson schedule that is once per request: a context switch each, the largest
//! cost canaryd paid per request after the response itself (issue 21). One wake-up now
//! starts every session to be prepared within the next [`Planner::batch`], so a session is
//! prepared between `prepare_ahead` and `prepare_ahead + batch` before its first deadline
//! and the planner wakes at most once per batch, however dense the schedule.

use crate::schedule::{Session, Timing};
use canary_core::MonoTime;
use std::iter::Peekable;
use std::time::Duration;

/// Sessions in first-deadline order, handed out in batches.
pub(super) struct Planner<I: Iterator<Item = Session>> {
    sessions: Peekable<I>,
    t0: MonoTime,
    timing: Timing,
    prepare_ahead: Duration,
    batch: Duration,
}

impl<I: Iterator<Item = Session>> Planner<I> {
    /// The sessions of a run started at `t0`, each prepared `prepare_ahead` before its first
    /// deadline (and up to [`Planner::batch`] more).
    pub fn new(sessions: I, t0: MonoTime, timing: Timing, prepare_ahead: Duration) -> Self {
        Planner {
            sessions: sessions.peekable(),
            t0,
            timing,
            prepare_ahead,
            batch: Self::batch(prepare_ahead),
        }
    }

    /// How much earlier than `prepare_ahead` a session may be started so that it shares a
    /// wake-up with an earlier one: a fifth of it (10 ms by default). Holding a prepared
    /// request that much longer costs a connection and its bytes; waking per session cost a
    /// context switch per request.
    pub fn batch(prepare_ahead: Duration) -> Duration {
        prepare_ahead / 5
    }

    /// When the next session is to be prepared; `None` when every session has started.
    pub fn next_wake(&mut self) -> Option<MonoTime> {
        let (t0, timing, ahead) = (self.t0, self.timing, self.prepare_ahead);
        self.sessions
            .peek()
            .map(|s| t0 + timing.offset(&s.turns[0]) - ahead)
    }

    /// Every session to be prepared by `now` plus the batch, in order.
    pub fn due(&mut self, now: MonoTime) -> Vec<Session> {
        let (t0, timing, ahead) = (self.t0, self.timing, self.prepare_ahead);
        let horizon = now + self.batch;
        let mut due = Vec::new();
        while let Some(s) = self
            .sessions
            .next_if(|s| t0 + timing.offset(&s.turns[0]) - ahead <= horizon)
        {
            due.push(s);
        }
        due
    }

    /// Requests of the sessions never started (a stop came first).
    pub fn unstarted(self) -> u64 {
        self.sessions.map(|s| s.turns.len() as u64).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synthetic::SyntheticRequests;

    fn session(at_ms: u64, turns: usize) -> Session {
        let mut req = SyntheticRequests::fixed(64, 8).request(0, 1024);
        req.timestamp_us = at_ms * 1000;
        Session {
            turns: vec![req; turns],
        }
    }

    // On made-up times: nothing here depends on how fast this machine runs.
    #[test]
    fn one_wake_up_starts_every_session_due_within_the_batch_and_no_later_one() {
        let t0 = MonoTime(1_000_000_000);
        let ms = Duration::from_millis;
        // Even arrivals every 2 ms (500 req/s), prepared 50 ms ahead: batch 10 ms.
        let sessions = (0..20).map(|i| session(2 * i, 1));
        let mut p = Planner::new(sessions, t0, Timing::real_time(), ms(50));
        assert_eq!(
            Planner::<std::vec::IntoIter<Session>>::batch(ms(50)),
            ms(10)
        );
        let first = p.next_wake().unwrap();
        assert_eq!(first, t0 - ms(50));
        // Woken at the first session's prepare time: it and the five due within 10 ms.
        let due = p.due(first);
        let offsets: Vec<u64> = due.iter().map(|s| s.turns[0].timestamp_us).collect();
        assert_eq!(offsets, [0, 2000, 4000, 6000, 8000, 10000]);
        // The next wake-up is the first session left's prepare time, not earlier.
        assert_eq!(p.next_wake(), Some(t0 + ms(12) - ms(50)));
        // A late wake-up takes everything it passed, and the batch after it.
        let due = p.due(t0);
        assert_eq!(due.len(), 14, "12 .. 38 ms: every one left");
        assert_eq!(p.next_wake(), None);
        assert_eq!(p.unstarted(), 0);
    }

    #[test]
    fn sessions_never_started_count_all_their_turns() {
        let t0 = MonoTime(1_000_000_000);
        let ms = Duration::from_millis;
        let sessions = vec![session(0, 3), session(100, 2), session(200, 4)].into_iter();
        let mut p = Planner::new(sessions, t0, Timing::real_time(), ms(50));
        let wake = p.next_wake().unwrap();
        assert_eq!(p.due(wake).len(), 1, "the others are 100 ms later");
        assert_eq!(p.unstarted(), 6);
    }
}

//! [`Work`]: what one run sends, in the form the dispatcher walks. A trace's schedule and an
//! open-loop rate are both sessions on absolute deadlines (a rate's are single requests,
//! generated as they come due, so a long run holds no list of them); a closed loop is users
//! whose next deadline is their previous request's end.

use super::planner::Left;
use crate::arrival::{ArrivalPattern, Arrivals};
// A run bounded by time alone still ends at the count's own ceiling: request indices are
// u32 (prompts and ids are keyed by them), and past it they would repeat.
use crate::plan::{ClosedLoopPlan, RatePlan, MAX_REQUEST_COUNT};
use crate::schedule::{Schedule, Session, Timing};
use crate::synthetic::SyntheticRequests;
use canary_core::TraceRequest;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// What a run sends.
#[derive(Debug)]
pub enum Work {
    /// Sessions of a trace on its own schedule.
    Schedule(Schedule),
    /// Synthetic requests arriving at a rate.
    Rate(RateWork),
    /// Synthetic requests sent by a closed loop of users.
    ClosedLoop(ClosedLoopWork),
}

/// How fast a run means to send (see [`Work::pace`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pace {
    /// A schedule or a rate: what it plans per second.
    Planned(PlannedLoad),
    /// A closed loop of this many users: as fast as the server answers them.
    ClosedLoop {
        /// Users, each with at most one request in flight.
        users: usize,
    },
}

/// What a run plans to send per second, on average over its schedule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlannedLoad {
    /// Requests per second (infinite when every deadline is the same instant).
    pub requests_per_s: f64,
    /// Tokens in and out per second, as planned (the server may stop a stream sooner).
    pub tokens_per_s: f64,
}

/// An open-loop rate's requests, generated in deadline order.
#[derive(Debug)]
pub struct RateWork {
    requests: SyntheticRequests,
    arrivals: Arrivals,
    pattern: ArrivalPattern,
    count: Option<u64>,
    until: Option<Duration>,
    rate: f64,
    limit: u32,
}

/// A closed loop's users and the requests they share out.
#[derive(Debug)]
pub struct ClosedLoopWork {
    requests: SyntheticRequests,
    /// Users.
    pub(super) users: usize,
    count: Option<u64>,
    until: Option<Duration>,
    limit: u32,
    /// Requests claimed so far (the next one's index).
    claimed: AtomicU64,
    /// The earliest time (ns from the run start) a user stopped by the run's stop had its
    /// next request due, or `u64::MAX` while no user was stopped with more to send.
    cut_at_ns: AtomicU64,
}

/// What a stop left a closed loop's users unsent, besides the requests they had claimed and
/// not sent (counted one by one as they stop).
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Unclaimed {
    /// Counted: the rest of the count (0 when no user had more to send).
    Exact(u64),
    /// Nobody can know: bounded by time, the loop was stopped before its end, and how many
    /// more requests its users would have sent in the time left was the server's pace.
    Unknown {
        /// Time left of the duration when the first user was stopped.
        time_left: Duration,
        /// At most this many more, when a count bounds the loop too.
        at_most: Option<u64>,
    },
}

impl Work {
    /// The arrivals of `plan`, lengths kept within `limit` tokens.
    pub fn rate(plan: &RatePlan, limit: u32) -> Work {
        Work::Rate(RateWork {
            requests: plan.requests.clone(),
            arrivals: Arrivals::new(plan.rate, plan.arrival, plan.requests.seed),
            pattern: plan.arrival,
            count: plan.extent.count(),
            until: plan.extent.duration,
            rate: plan.rate,
            limit,
        })
    }

    /// The users of `plan`, lengths kept within `limit` tokens.
    pub fn closed_loop(plan: &ClosedLoopPlan, limit: u32) -> Work {
        Work::ClosedLoop(ClosedLoopWork {
            requests: plan.requests.clone(),
            users: plan.users,
            count: plan.extent.count(),
            until: plan.extent.duration,
            limit,
            claimed: AtomicU64::new(0),
            cut_at_ns: AtomicU64::new(u64::MAX),
        })
    }

    /// Requests it will send: exact for a schedule and a count, an estimate (rate × duration)
    /// for a rate bounded by time only, 0 when unknown (a closed loop bounded by time).
    pub fn expected_requests(&self) -> u64 {
        match self {
            Work::Schedule(s) => s.len() as u64,
            Work::Rate(r) => r.count.unwrap_or_else(|| {
                (r.rate * r.until.unwrap_or_default().as_secs_f64()).round() as u64
            }),
            Work::ClosedLoop(c) => c.count.unwrap_or(0),
        }
    }

    /// Whether [`Self::expected_requests`] is an estimate: a rate bounded by time only.
    pub fn expected_is_estimate(&self) -> bool {
        matches!(self, Work::Rate(r) if r.count.is_none())
    }

    /// [`Self::expected_requests`] as a log says it: `100`, `~100` for an estimate, none when
    /// unknown (a closed loop bounded by time logged `requests=0`).
    pub fn expected_text(&self) -> Option<String> {
        match self.expected_requests() {
            0 => None,
            n if self.expected_is_estimate() => Some(format!("~{n}")),
            n => Some(n.to_string()),
        }
    }

    /// The trace-to-run time mapping (real time for generated deadlines).
    pub fn timing(&self) -> Timing {
        match self {
            Work::Schedule(s) => s.timing(),
            _ => Timing::real_time(),
        }
    }

    /// How fast it means to send, for sizing the run's runtime: the load it plans on
    /// average, or a closed loop's users, whose pace is the server's.
    pub fn pace(&self) -> Pace {
        match self {
            Work::Schedule(s) => {
                let secs = s.span().as_secs_f64();
                let per_s = |n: f64| if secs > 0.0 { n / secs } else { f64::INFINITY };
                Pace::Planned(PlannedLoad {
                    requests_per_s: per_s(s.len() as f64),
                    tokens_per_s: per_s(s.tokens() as f64),
                })
            }
            Work::Rate(r) => {
                let q = &r.requests;
                let tokens = q.shared_prefix as f64 + q.isl.mean as f64 + q.osl.mean as f64;
                Pace::Planned(PlannedLoad {
                    requests_per_s: r.rate,
                    tokens_per_s: r.rate * tokens,
                })
            }
            Work::ClosedLoop(c) => Pace::ClosedLoop { users: c.users },
        }
    }

    /// The first `n` requests' shapes, for warm-up requests of the same lengths.
    pub fn shapes(&self, n: usize) -> Vec<TraceRequest> {
        let synthetic = |r: &SyntheticRequests, limit| {
            (0..n.min(1024) as u32)
                .map(|i| r.request(i, limit))
                .collect()
        };
        match self {
            Work::Schedule(s) => s.sessions().take(n).map(|s| s.turns[0].clone()).collect(),
            Work::Rate(r) => synthetic(&r.requests, r.limit),
            Work::ClosedLoop(c) => synthetic(&c.requests, c.limit),
        }
    }
}

impl RateWork {
    /// The rate asked (per second), its arrival pattern, and the count and duration that
    /// bound it.
    pub(crate) fn shape(&self) -> (f64, ArrivalPattern, Option<u64>, Option<Duration>) {
        (self.rate, self.pattern, self.count, self.until)
    }

    /// Its requests as single-request sessions, each stamped with its arrival, in order.
    pub fn into_sessions(self) -> RateSessions {
        RateSessions {
            work: self,
            taken: 0,
        }
    }
}

/// Arrivals a stop draws at most to count a rate run's unsent requests (well under a second
/// in a release build); past them the rest is estimated from the rate.
pub(crate) const EXACT_DRAWS: u64 = 10_000_000;

/// A rate's requests as single-request sessions, built as they are taken.
#[derive(Debug)]
pub struct RateSessions {
    work: RateWork,
    /// Sessions taken so far (the next request's index).
    taken: u64,
}

impl RateSessions {
    /// The next arrival within the count and the duration.
    fn next_arrival(&mut self) -> Option<Duration> {
        let w = &mut self.work;
        if self.taken >= w.count.unwrap_or(MAX_REQUEST_COUNT) {
            return None;
        }
        let at = w
            .arrivals
            .next()
            .filter(|at| w.until.is_none_or(|u| *at < u))?;
        self.taken += 1;
        Some(at)
    }

    /// Requests not yet taken; none is left after. Without a duration, the rest of the
    /// count. With one, counted by drawing their arrivals (the same draws sending them would
    /// make) without building the requests, `draws` of them at most; past those, the rest is
    /// estimated from the rate over the time left (within the count).
    pub(crate) fn requests_left(&mut self, draws: u64) -> Left {
        let w = &self.work;
        let of_count = w.count.map(|n| n.saturating_sub(self.taken));
        let Some(until) = w.until else {
            self.taken += of_count.unwrap_or(0);
            return Left::exact(of_count.unwrap_or(0));
        };
        let (rate, before) = (w.rate, self.taken);
        let mut last = Duration::ZERO;
        for _ in 0..draws {
            match self.next_arrival() {
                Some(at) => last = at,
                None => return Left::exact(self.taken - before),
            }
        }
        let drawn = self.taken - before;
        let rest = (until.saturating_sub(last).as_secs_f64() * rate) as u64;
        let cap = of_count.unwrap_or(MAX_REQUEST_COUNT.saturating_sub(before));
        let requests = cap.min(drawn + rest);
        // Nothing more is taken from these sessions.
        self.work.count = Some(self.taken);
        Left {
            requests,
            estimated: true,
        }
    }
}

impl Iterator for RateSessions {
    type Item = Session;

    fn next(&mut self) -> Option<Session> {
        let at = self.next_arrival()?;
        let w = &self.work;
        let mut req = w.requests.request((self.taken - 1) as u32, w.limit);
        req.timestamp_us = at.as_micros() as u64;
        Some(Session { turns: vec![req] })
    }
}

impl ClosedLoopWork {
    /// The count and the duration that bound it.
    pub(crate) fn extent(&self) -> (Option<u64>, Option<Duration>) {
        (self.count, self.until)
    }

    /// The next request for a user whose turn is due at `due` (from the run start): `None`
    /// once the count is sent or the duration is over.
    pub(super) fn next(&self, due: Duration) -> Option<TraceRequest> {
        if self.until.is_some_and(|u| due >= u) {
            return None;
        }
        let i = self.claimed.fetch_add(1, Ordering::Relaxed);
        if i >= self.count.unwrap_or(MAX_REQUEST_COUNT) {
            return None;
        }
        Some(self.requests.request(i as u32, self.limit))
    }

    /// Notes that the run's stop ended a user whose next request was due at `due` (from the
    /// run start): the loop was not done.
    pub(super) fn cut(&self, due: Duration) {
        let ns = u64::try_from(due.as_nanos()).unwrap_or(u64::MAX - 1);
        self.cut_at_ns.fetch_min(ns, Ordering::Relaxed);
    }

    /// Requests never claimed because a stop came first, once every user has ended. No user
    /// stopped with more to send: none. Bounded by a count alone: the rest of the count.
    /// Bounded by time, stopped before its end: unknown (see [`Unclaimed::Unknown`]); until
    /// this was said, a stopped closed loop bounded by time reported 0 as if counted.
    pub(super) fn unclaimed(&self) -> Unclaimed {
        let cut_at = match self.cut_at_ns.load(Ordering::Relaxed) {
            u64::MAX => return Unclaimed::Exact(0),
            ns => Duration::from_nanos(ns),
        };
        let rest = self
            .count
            .map(|n| n.saturating_sub(self.claimed.load(Ordering::Relaxed)));
        match self.until {
            // A user stopped with its next request due past the end would not have sent it.
            Some(until) if cut_at >= until => Unclaimed::Exact(0),
            Some(until) => Unclaimed::Unknown {
                time_left: until - cut_at,
                at_most: rest,
            },
            None => Unclaimed::Exact(rest.unwrap_or(0)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arrival::ArrivalPattern;
    use crate::plan::{Extent, RatePlan};
    use crate::synthetic::SyntheticRequests;

    fn rate_work(count: Option<u64>, duration: Option<Duration>) -> RateWork {
        let plan = RatePlan {
            requests: SyntheticRequests::fixed(16, 4),
            rate: 1000.0,
            arrival: ArrivalPattern::Poisson,
            extent: Extent { count, duration },
        };
        match Work::rate(&plan, 1_000_000) {
            Work::Rate(r) => r,
            _ => unreachable!(),
        }
    }

    // What a stop counts as unsent is what the run would have sent, drawn the same way but
    // never built: the rest of the count, or the arrivals before the end of the duration.
    #[test]
    fn the_requests_left_are_those_the_sessions_would_have_been() {
        for (count, duration) in [
            (Some(500), None),
            (None, Some(Duration::from_millis(700))),
            (Some(500), Some(Duration::from_millis(300))),
        ] {
            let all: Vec<u64> = rate_work(count, duration)
                .into_sessions()
                .map(|s| s.turns[0].timestamp_us)
                .collect();
            assert!(all.len() > 100, "{count:?} {duration:?}: {}", all.len());
            let mut sessions = rate_work(count, duration).into_sessions();
            let taken: Vec<u64> = sessions
                .by_ref()
                .take(42)
                .map(|s| s.turns[0].timestamp_us)
                .collect();
            assert_eq!(taken, all[..42]);
            let left = sessions.requests_left(EXACT_DRAWS);
            assert_eq!(left, Left::exact(all.len() as u64 - 42));
            assert_eq!(sessions.requests_left(EXACT_DRAWS), Left::exact(0));
            assert!(sessions.next().is_none());
        }
    }

    // Bounded by time alone, a run still ends at the count's ceiling (1e9): its u32 request
    // indices used to wrap at 2^32, repeating prompts and ids (and overflowing `index + 1`).
    #[test]
    fn a_run_bounded_by_time_alone_ends_at_the_count_ceiling() {
        let mut sessions =
            rate_work(None, Some(Duration::from_secs(3600 * 24 * 365))).into_sessions();
        sessions.taken = MAX_REQUEST_COUNT - 2;
        let ids: Vec<u32> = sessions.by_ref().map(|s| s.turns[0].index).collect();
        let last = (MAX_REQUEST_COUNT - 1) as u32;
        assert_eq!(ids, [last - 1, last]);
        assert_eq!(sessions.requests_left(1000), Left::exact(0));

        let plan = ClosedLoopPlan {
            requests: SyntheticRequests::fixed(16, 4),
            users: 4,
            extent: Extent {
                count: None,
                duration: Some(Duration::from_secs(3600)),
            },
        };
        let Work::ClosedLoop(users) = Work::closed_loop(&plan, 1_000_000) else {
            unreachable!()
        };
        users
            .claimed
            .store(MAX_REQUEST_COUNT - 1, Ordering::Relaxed);
        assert_eq!(users.next(Duration::ZERO).map(|r| r.index), Some(last));
        assert!(users.next(Duration::ZERO).is_none());
    }

    // What a stop leaves a closed loop unsent: counted for a count alone; for a duration,
    // unknown when a user was stopped with time left (with the count's rest as the most),
    // none when every user's next request was due past the end or no user was stopped.
    #[test]
    fn a_closed_loop_counts_its_unclaimed_requests_only_where_it_can() {
        let users = |count, secs: Option<u64>| {
            let plan = ClosedLoopPlan {
                requests: SyntheticRequests::fixed(16, 4),
                users: 2,
                extent: Extent {
                    count,
                    duration: secs.map(Duration::from_secs),
                },
            };
            let Work::ClosedLoop(users) = Work::closed_loop(&plan, 1_000_000) else {
                unreachable!()
            };
            users.next(Duration::ZERO);
            users
        };
        let s = Duration::from_secs;
        let stopped = |u: ClosedLoopWork, at: Duration| {
            u.cut(at);
            u.unclaimed()
        };
        assert_eq!(users(Some(10), None).unclaimed(), Unclaimed::Exact(0));
        assert_eq!(stopped(users(Some(10), None), s(1)), Unclaimed::Exact(9));
        assert_eq!(users(None, Some(60)).unclaimed(), Unclaimed::Exact(0));
        assert_eq!(
            stopped(users(None, Some(60)), s(20)),
            Unclaimed::Unknown {
                time_left: s(40),
                at_most: None
            }
        );
        assert_eq!(
            stopped(users(Some(10), Some(60)), s(20)),
            Unclaimed::Unknown {
                time_left: s(40),
                at_most: Some(9)
            }
        );
        assert_eq!(
            stopped(users(Some(10), Some(60)), s(61)),
            Unclaimed::Exact(0)
        );
    }

    // A stop of a long run at a high rate drew every arrival left, for hours (1e9 req/s for
    // an hour: 3.6e12 draws). Past a budget of draws the rest is estimated from the rate,
    // and said to be.
    #[test]
    fn past_the_draws_a_stop_may_make_the_rest_is_estimated_and_said_to_be() {
        let long = || rate_work(None, Some(Duration::from_secs(3600)));
        let mut sessions = long().into_sessions();
        sessions.by_ref().take(10).for_each(drop);
        let left = sessions.requests_left(1000);
        assert!(left.estimated);
        // 1,000 a second for an hour, less the 10 taken: Poisson, so within a few per cent.
        let expected = 3_600_000.0 - 10.0;
        assert!(
            (left.requests as f64 - expected).abs() < expected * 0.02,
            "{left:?}"
        );
        assert_eq!(
            sessions.requests_left(1000),
            Left::exact(0),
            "nothing is left after"
        );
        assert!(sessions.next().is_none());
        // Within the budget it is counted, as before.
        let mut short = rate_work(None, Some(Duration::from_millis(500))).into_sessions();
        assert!(!short.requests_left(1000).estimated);
        // A count and a long duration: the estimate never passes the count.
        let mut both = rate_work(Some(50_000), Some(Duration::from_secs(3600))).into_sessions();
        assert_eq!(
            both.requests_left(1000),
            Left {
                requests: 50_000,
                estimated: true
            }
        );
    }
}

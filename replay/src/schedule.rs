//! The fixed schedule: when each request is due, relative to the start of the run.
//!
//! Request *i* is due at `(ts_i − ts_first) / speedup`. Deadlines are absolute offsets from one
//! origin, so lateness never accumulates. First turns are open-loop; later turns of a session
//! wait for the previous turn and then follow their `delay` (if the trace gives one) or their
//! timestamp, whichever the row carries.

use canary_core::TraceRequest;
use std::collections::HashMap;
use std::time::Duration;

/// One session's turns, in order.
#[derive(Debug, Clone)]
pub struct Session {
    /// The turns; `turns[0]` is open-loop.
    pub turns: Vec<TraceRequest>,
}

/// All requests of a run grouped into sessions, ordered by first-turn deadline.
#[derive(Debug, Clone)]
pub struct Schedule {
    sessions: Vec<Session>,
    timing: Timing,
    requests: usize,
}

/// Maps trace time to run time: the trace's origin and the speedup.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    origin_us: u64,
    speedup: f64,
}

/// When a later turn is due.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TurnDue {
    /// At this offset from the run start (the trace's timestamp), but not before the
    /// previous turn ends.
    At(Duration),
    /// This long after the previous turn ends (Mooncake `delay`).
    AfterPrevious(Duration),
}

impl Schedule {
    /// Groups `requests` (sorted by timestamp) into sessions. `speedup` must be positive.
    pub fn new(requests: Vec<TraceRequest>, speedup: f64) -> Schedule {
        Schedule::with_origin(requests, speedup, None)
    }

    /// The same, with deadlines counted from trace time `origin_us` (when earlier than the
    /// first request) rather than from the first request: a shard's schedule keeps the
    /// whole trace's origin.
    pub fn with_origin(
        requests: Vec<TraceRequest>,
        speedup: f64,
        origin_us: Option<u64>,
    ) -> Schedule {
        assert!(
            speedup > 0.0 && speedup.is_finite(),
            "speedup must be positive"
        );
        let first = requests.iter().map(|r| r.timestamp_us).min().unwrap_or(0);
        let origin_us = origin_us.map_or(first, |o| o.min(first));
        let count = requests.len();
        let mut sessions: Vec<Session> = Vec::new();
        let mut by_key: HashMap<u64, usize> = HashMap::new();
        for r in requests {
            match r.session {
                Some(key) => match by_key.get(&key) {
                    Some(&i) => sessions[i].turns.push(r),
                    None => {
                        by_key.insert(key, sessions.len());
                        sessions.push(Session { turns: vec![r] });
                    }
                },
                None => sessions.push(Session { turns: vec![r] }),
            }
        }
        for s in &mut sessions {
            s.turns.sort_by_key(|t| t.turn);
        }
        let timing = Timing { origin_us, speedup };
        sessions.sort_by_key(|s| timing.offset(&s.turns[0]));
        Schedule {
            sessions,
            timing,
            requests: count,
        }
    }

    /// The trace-to-run time mapping.
    pub fn timing(&self) -> Timing {
        self.timing
    }

    /// Sessions in first-turn order.
    pub fn sessions(&self) -> &[Session] {
        &self.sessions
    }

    /// Consumes the schedule, yielding its sessions in first-turn order.
    pub fn into_sessions(self) -> Vec<Session> {
        self.sessions
    }

    /// Number of requests.
    pub fn len(&self) -> usize {
        self.requests
    }

    /// True when there is nothing to send.
    pub fn is_empty(&self) -> bool {
        self.requests == 0
    }

    /// When `req` is due by its timestamp, from the run start.
    pub fn offset(&self, req: &TraceRequest) -> Duration {
        self.timing.offset(req)
    }

    /// When a later turn is due.
    pub fn turn_due(&self, req: &TraceRequest) -> TurnDue {
        self.timing.turn_due(req)
    }

    /// The least time replaying the schedule takes, server time not counted: the last
    /// deadline by timestamp, or a session's first deadline plus the `delay`s of its later
    /// turns where that ends later. Saturates at `Duration::MAX` (a speedup of 1e-12).
    pub fn min_duration(&self) -> Duration {
        let mut longest = 0f64; // trace seconds
        for s in &self.sessions {
            let mut end = 0f64;
            for (k, r) in s.turns.iter().enumerate() {
                let at = r.timestamp_us.saturating_sub(self.timing.origin_us) as f64 / 1e6;
                end = match r.delay_us {
                    Some(d) if k > 0 => end + d as f64 / 1e6,
                    _ => end.max(at),
                };
            }
            longest = longest.max(end);
        }
        Duration::try_from_secs_f64(longest / self.timing.speedup).unwrap_or(Duration::MAX)
    }

    /// The time the whole schedule spans (last deadline by timestamp).
    pub fn span(&self) -> Duration {
        self.sessions
            .iter()
            .flat_map(|s| s.turns.iter())
            .map(|r| self.offset(r))
            .max()
            .unwrap_or_default()
    }
}

impl Timing {
    /// Run time itself: timestamps are microseconds from the run start (generated arrivals).
    pub(crate) fn real_time() -> Timing {
        Timing {
            origin_us: 0,
            speedup: 1.0,
        }
    }

    /// The trace-time divisor.
    pub fn speedup(&self) -> f64 {
        self.speedup
    }

    /// When `req` is due by its timestamp, from the run start.
    pub fn offset(&self, req: &TraceRequest) -> Duration {
        let us = req.timestamp_us.saturating_sub(self.origin_us) as f64 / self.speedup;
        Duration::from_nanos((us * 1000.0).round() as u64)
    }

    /// When a later turn is due.
    pub fn turn_due(&self, req: &TraceRequest) -> TurnDue {
        match req.delay_us {
            Some(d) => TurnDue::AfterPrevious(Duration::from_nanos(
                (d as f64 * 1000.0 / self.speedup).round() as u64,
            )),
            None => TurnDue::At(self.offset(req)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(index: u32, ts_ms: u64, session: Option<u64>, turn: u32) -> TraceRequest {
        TraceRequest {
            index,
            line: index + 1,
            timestamp_us: ts_ms * 1000,
            session,
            turn,
            delay_us: None,
            input_tokens: 10,
            output_tokens: 5,
            hash_ids: vec![],
            block_size: 512,
            prompt: None,
            extra: None,
        }
    }

    #[test]
    fn offsets_are_relative_to_the_first_timestamp_and_scaled() {
        let s = Schedule::new(
            vec![
                req(0, 1000, None, 0),
                req(1, 1000, None, 0),
                req(2, 4000, None, 0),
            ],
            20.0,
        );
        let offs: Vec<_> = s.sessions().iter().map(|x| s.offset(&x.turns[0])).collect();
        assert_eq!(
            offs,
            [Duration::ZERO, Duration::ZERO, Duration::from_millis(150)]
        );
        assert_eq!(s.span(), Duration::from_millis(150));
        assert_eq!(s.len(), 3);
    }

    #[test]
    fn no_drift_for_long_traces() {
        // 669 s of trace at 20x: the last deadline is exact, not a sum of rounded gaps.
        let reqs = (0..=669u64)
            .map(|i| req(i as u32, i * 1000, None, 0))
            .collect();
        let s = Schedule::new(reqs, 20.0);
        assert_eq!(s.span(), Duration::from_millis(33_450));
    }

    #[test]
    fn min_duration_counts_delays_and_saturates() {
        let mut t1 = req(2, 500, Some(7), 1);
        t1.delay_us = Some(10_000_000);
        let reqs = vec![req(0, 100, Some(7), 0), req(1, 4000, None, 0), t1];
        // Session 7: first turn at 0 s, then 10 s of delay; the other request at 3.9 s.
        let s = Schedule::new(reqs.clone(), 2.0);
        assert_eq!(s.min_duration(), Duration::from_secs(5));
        assert_eq!(s.span(), Duration::from_millis(1950));
        let s = Schedule::new(reqs, 1e-300);
        assert_eq!(s.min_duration(), Duration::MAX);
    }

    #[test]
    fn sessions_group_turns_and_keep_order() {
        let mut t1 = req(2, 500, Some(7), 1);
        t1.delay_us = Some(2_000_000);
        let s = Schedule::new(vec![req(0, 100, Some(7), 0), req(1, 200, None, 0), t1], 2.0);
        assert_eq!(s.sessions().len(), 2);
        let sess = &s.sessions()[0];
        assert_eq!(
            sess.turns.iter().map(|t| t.index).collect::<Vec<_>>(),
            [0, 2]
        );
        assert_eq!(
            s.turn_due(&sess.turns[1]),
            TurnDue::AfterPrevious(Duration::from_secs(1))
        );
        assert_eq!(s.turn_due(&sess.turns[0]), TurnDue::At(Duration::ZERO));
    }
}

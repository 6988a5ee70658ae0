//! The fixed schedule: when each request is due, relative to the start of the run.
//!
//! Request *i* is due at `(ts_i − ts_first) / speedup`. Deadlines are absolute offsets from one
//! origin, so lateness never accumulates. First turns are open-loop; later turns of a session
//! wait for the previous turn and then follow their `delay` (if the trace gives one) or their
//! timestamp, whichever the row carries.

use canary_core::{RowRef, TraceRequest, TraceRows};
use std::time::Duration;

/// One session's turns, in order, as the dispatcher takes it.
#[derive(Debug, Clone)]
pub struct Session {
    /// The turns; `turns[0]` is open-loop.
    pub turns: Vec<TraceRequest>,
}

/// All requests of a run grouped into sessions, ordered by first-turn deadline.
///
/// The rows stay packed ([`TraceRows`], in trace order) until a session is taken: its turns
/// are built then ([`Schedule::into_sessions`]), so a run holds 32 bytes a row and its ids,
/// not a [`TraceRequest`] each. Where the schedule's order is not the trace's (sessions whose
/// turns interleave with other requests) it keeps that order, 4 bytes a row; a trace whose
/// sessions are single requests, or follow one another, needs none. Session boundaries are
/// not stored: a session's turns are consecutive in the order, so a row starts a session
/// when it has none or a session other than the row before.
#[derive(Debug, Clone)]
pub struct Schedule {
    /// Every request, in trace order (a row's position is its `index`).
    rows: TraceRows,
    /// The positions of the rows in schedule order; `None`: trace order.
    order: Option<Vec<u32>>,
    timing: Timing,
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
    /// Groups `rows` (sorted by timestamp) into sessions. `speedup` must be positive.
    pub fn new(rows: TraceRows, speedup: f64) -> Schedule {
        Schedule::with_origin(rows, speedup, None)
    }

    /// The same, with deadlines counted from trace time `origin_us` (when earlier than the
    /// first request) rather than from the first request: a shard's schedule keeps the
    /// whole trace's origin.
    ///
    /// Sessions are numbered in order of first appearance (a row without a session is one
    /// of its own), each session's turns are ordered by `turn` (ties: as given), and the
    /// sessions by the deadline of their first turn (ties: by number).
    pub fn with_origin(rows: TraceRows, speedup: f64, origin_us: Option<u64>) -> Schedule {
        assert!(
            speedup > 0.0 && speedup.is_finite(),
            "speedup must be positive"
        );
        let n = rows.len();
        let first = (0..n)
            .map(|i| rows.row(i).timestamp_us())
            .min()
            .unwrap_or(0);
        let origin_us = origin_us.map_or(first, |o| o.min(first));
        let timing = Timing { origin_us, speedup };
        // By session number: where the session first appears (what orders sessions of one
        // deadline, as their numbers did) and its first turn (lowest `turn`, first given
        // among equals). 8 bytes a session, none for rows without one.
        const UNSET: u32 = u32::MAX;
        let mut appears = vec![UNSET; rows.session_numbers()];
        let mut lead = vec![UNSET; rows.session_numbers()];
        for i in 0..n {
            let r = rows.row(i);
            if let Some(s) = r.session_number() {
                let s = s as usize;
                if appears[s] == UNSET {
                    appears[s] = i as u32;
                    lead[s] = i as u32;
                } else if r.turn() < rows.row(lead[s] as usize).turn() {
                    lead[s] = i as u32;
                }
            }
        }
        // The schedule order: by session deadline, session, turn; stable.
        let key = |i: usize| {
            let r = rows.row(i);
            let (lead, appears) = match r.session_number() {
                Some(s) => (lead[s as usize] as usize, appears[s as usize]),
                None => (i, i as u32),
            };
            let due = timing.offset_ns(rows.row(lead).timestamp_us());
            (due, appears, r.turn())
        };
        let order = match (0..n).map(key).is_sorted() {
            true => None,
            false => {
                let mut order: Vec<u32> = (0..n as u32).collect();
                // Not `sort_by_cached_key`: its cache would take 32 bytes a row.
                order.sort_by_key(|&i| key(i as usize));
                Some(order)
            }
        };
        drop((appears, lead));
        Schedule {
            rows,
            order,
            timing,
        }
    }

    /// The trace-to-run time mapping.
    pub fn timing(&self) -> Timing {
        self.timing
    }

    /// The position in the rows of the `j`-th request in schedule order.
    fn at(&self, j: usize) -> usize {
        match &self.order {
            Some(order) => order[j] as usize,
            None => j,
        }
    }

    /// True when the `j`-th request in schedule order starts a session.
    fn starts_session(&self, j: usize) -> bool {
        let session = |j| self.rows.row(self.at(j)).session_number();
        j == 0 || session(j).is_none() || session(j) != session(j - 1)
    }

    /// The session that starts at `j` in schedule order, built, and where the next starts.
    fn session_at(&self, j: usize) -> (Session, usize) {
        let end = (j + 1..self.len())
            .find(|&k| self.starts_session(k))
            .unwrap_or(self.len());
        let turns = (j..end).map(|k| self.rows.row(self.at(k)).to_request());
        (
            Session {
                turns: turns.collect(),
            },
            end,
        )
    }

    /// Sessions in first-turn order, each built as it is reached.
    pub fn sessions(&self) -> impl Iterator<Item = Session> + '_ {
        let mut next = 0;
        std::iter::from_fn(move || {
            (next < self.len()).then(|| {
                let (session, end) = self.session_at(next);
                next = end;
                session
            })
        })
    }

    /// Every request, session after session (each session's turns in order), read in place.
    pub fn rows_in_order(&self) -> impl Iterator<Item = RowRef<'_>> + '_ {
        (0..self.len()).map(|j| self.rows.row(self.at(j)))
    }

    /// Every request, session after session (each session's turns in order), each built
    /// as it is reached.
    pub fn requests(&self) -> impl Iterator<Item = TraceRequest> + '_ {
        self.rows_in_order().map(|r| r.to_request())
    }

    /// The rows, in trace order: for figures that do not depend on the order.
    pub fn rows(&self) -> &TraceRows {
        &self.rows
    }

    /// Number of sessions.
    pub fn session_count(&self) -> usize {
        (0..self.len()).filter(|&j| self.starts_session(j)).count()
    }

    /// Consumes the schedule, yielding its sessions in first-turn order. Each session's
    /// turns are built as it is taken, so only the sessions taken and not yet dropped hold
    /// [`TraceRequest`]s.
    pub fn into_sessions(self) -> IntoSessions {
        IntoSessions {
            schedule: self,
            next: 0,
        }
    }

    /// Number of requests.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// True when there is nothing to send.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// When `req` is due by its timestamp, from the run start.
    pub fn offset(&self, req: &TraceRequest) -> Duration {
        self.timing.offset(req)
    }

    /// When a later turn is due.
    pub fn turn_due(&self, req: &TraceRequest) -> TurnDue {
        self.timing.turn_due(req)
    }

    /// The least time replaying the schedule takes, server time not counted: its
    /// [`span`](Schedule::span), saturating at `Duration::MAX` (a speedup of 1e-12).
    pub fn min_duration(&self) -> Duration {
        let last = self.last_send_us().saturating_sub(self.timing.origin_us);
        Duration::try_from_secs_f64(last as f64 / 1e6 / self.timing.speedup)
            .unwrap_or(Duration::MAX)
    }

    /// The trace time (µs) of the last send, server time not counted: the last deadline by
    /// timestamp, or a session's first deadline plus the `delay`s of its later turns where
    /// that ends later.
    fn last_send_us(&self) -> u64 {
        let mut last = 0u64;
        let mut end = 0u64; // of the session so far
        for j in 0..self.len() {
            let r = self.rows.row(self.at(j));
            let at = r.timestamp_us();
            end = match (self.starts_session(j), r.delay_us()) {
                (true, _) => at,
                (false, Some(d)) => end.saturating_add(d),
                (false, None) => end.max(at),
            };
            last = last.max(end);
        }
        last
    }

    /// When the first request is due, from the run's start: 0 unless the schedule counts
    /// from an earlier origin (a shard's, the whole trace's).
    pub fn first_due(&self) -> Duration {
        let first = (0..self.len())
            .map(|i| self.rows.row(i).timestamp_us())
            .min();
        Duration::from_nanos(first.map_or(0, |t| self.timing.offset_ns(t)))
    }

    /// Later turns sent a `delay` after their previous turn ends (Mooncake): where the
    /// schedule has any, its [`span`](Schedule::span) is a lower bound.
    pub fn delay_turns(&self) -> usize {
        (0..self.len())
            .filter(|&j| !self.starts_session(j) && self.rows.row(self.at(j)).delay_us().is_some())
            .count()
    }

    /// Tokens in and out over every request, as the trace plans them.
    pub fn tokens(&self) -> u64 {
        (0..self.len())
            .map(|i| {
                let r = self.rows.row(i);
                u64::from(r.input_tokens()) + u64::from(r.output_tokens())
            })
            .sum()
    }

    /// The time the whole schedule spans, from the run's start to its last send, server
    /// time not counted: the last deadline by timestamp, or a session's first deadline plus
    /// the `delay`s of its later turns (each shortened by the speedup) where that ends later.
    /// Exact without delays; with them, a lower bound (each delay runs from its previous
    /// turn's end). It was the last timestamp alone, and a Mooncake turn that carries only a
    /// `delay` has its previous turn's: a session of delays seemed to end as it started.
    pub fn span(&self) -> Duration {
        match self.is_empty() {
            true => Duration::ZERO,
            false => Duration::from_nanos(self.timing.offset_ns(self.last_send_us())),
        }
    }
}

/// A [`Schedule`]'s sessions, taken in first-turn order (see [`Schedule::into_sessions`]).
#[derive(Debug)]
pub struct IntoSessions {
    schedule: Schedule,
    /// Where the next session starts, in schedule order.
    next: usize,
}

impl IntoSessions {
    /// Requests of the sessions not yet taken (a session is a run of consecutive rows in
    /// schedule order, so every row from the next session's start on); none is left after.
    pub(crate) fn requests_left(&mut self) -> u64 {
        let left = self.schedule.len().saturating_sub(self.next);
        self.next = self.schedule.len();
        left as u64
    }
}

impl Iterator for IntoSessions {
    type Item = Session;

    fn next(&mut self) -> Option<Session> {
        if self.next >= self.schedule.len() {
            return None;
        }
        let (session, end) = self.schedule.session_at(self.next);
        self.next = end;
        Some(session)
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
        Duration::from_nanos(self.offset_ns(req.timestamp_us))
    }

    /// When a request at trace time `timestamp_us` is due, in nanoseconds from the run start.
    fn offset_ns(&self, timestamp_us: u64) -> u64 {
        let us = timestamp_us.saturating_sub(self.origin_us) as f64 / self.speedup;
        (us * 1000.0).round() as u64
    }

    /// When a later turn is due.
    pub fn turn_due(&self, req: &TraceRequest) -> TurnDue {
        match req.delay_us() {
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
    use std::collections::HashMap;

    fn req(index: u32, ts_ms: u64, session: Option<u64>, turn: u32) -> TraceRequest {
        TraceRequest::new(
            index,
            index + 1,
            ts_ms * 1000,
            session,
            turn,
            10,
            5,
            Default::default(),
            512,
        )
    }

    fn schedule(rows: Vec<TraceRequest>, speedup: f64) -> Schedule {
        Schedule::new(rows.into_iter().collect(), speedup)
    }

    #[test]
    fn offsets_are_relative_to_the_first_timestamp_and_scaled() {
        let s = schedule(
            vec![
                req(0, 1000, None, 0),
                req(1, 1000, None, 0),
                req(2, 4000, None, 0),
            ],
            20.0,
        );
        let offs: Vec<_> = s.sessions().map(|x| s.offset(&x.turns[0])).collect();
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
        let s = schedule(reqs, 20.0);
        assert_eq!(s.span(), Duration::from_millis(33_450));
    }

    #[test]
    fn min_duration_counts_delays_and_saturates() {
        let mut t1 = req(2, 500, Some(7), 1);
        t1.set_delay_us(Some(10_000_000));
        let reqs = vec![req(0, 100, Some(7), 0), req(1, 4000, None, 0), t1];
        // Session 7: first turn at 0 s, then 10 s of delay; the other request at 3.9 s.
        let s = schedule(reqs.clone(), 2.0);
        assert_eq!(s.min_duration(), Duration::from_secs(5));
        // The span counts the delay too (it read 1.95 s, the last timestamp's deadline).
        assert_eq!(s.span(), Duration::from_secs(5));
        let s = schedule(reqs, 1e-300);
        assert_eq!(s.min_duration(), Duration::MAX);
    }

    #[test]
    fn sessions_group_turns_and_keep_order() {
        let mut t1 = req(2, 500, Some(7), 1);
        t1.set_delay_us(Some(2_000_000));
        let s = schedule(vec![req(0, 100, Some(7), 0), req(1, 200, None, 0), t1], 2.0);
        assert_eq!(s.sessions().count(), 2);
        let sess = s.sessions().next().unwrap();
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

    /// The grouping as it was before the rows were held in one `Vec`: a `Vec` per session,
    /// turns sorted by `turn`, sessions by first-turn deadline (both stable).
    fn reference(requests: Vec<TraceRequest>, speedup: f64) -> Vec<Vec<TraceRequest>> {
        let timing = schedule(requests.clone(), speedup).timing();
        let mut sessions: Vec<Vec<TraceRequest>> = Vec::new();
        let mut by_key: HashMap<u64, usize> = HashMap::new();
        for r in requests {
            match r.session.and_then(|k| by_key.get(&k).map(|&i| (k, i))) {
                Some((_, i)) => sessions[i].push(r),
                None => {
                    if let Some(k) = r.session {
                        by_key.insert(k, sessions.len());
                    }
                    sessions.push(vec![r]);
                }
            }
        }
        for s in &mut sessions {
            s.sort_by_key(|t| t.turn);
        }
        sessions.sort_by_key(|s| timing.offset(&s[0]));
        sessions
    }

    fn check_against_reference(requests: Vec<TraceRequest>, speedup: f64, what: &str) {
        let want = reference(requests.clone(), speedup);
        let s = schedule(requests, speedup);
        let got: Vec<Vec<TraceRequest>> = s.sessions().map(|x| x.turns).collect();
        assert_eq!(got.len(), want.len(), "{what}: sessions");
        assert!(got == want, "{what}: session or turn order changed");
        let taken: Vec<Vec<TraceRequest>> = s.clone().into_sessions().map(|x| x.turns).collect();
        assert!(taken == want, "{what}: into_sessions differs");
        assert_eq!(s.session_count(), want.len());
        assert_eq!(s.len(), want.iter().map(Vec::len).sum::<usize>());
        assert!(s.requests().eq(want.concat()), "{what}: requests() differs");
    }

    #[test]
    fn a_schedule_in_trace_order_holds_no_order() {
        // Single-request sessions, and sessions that follow one another: trace order.
        let s = schedule(
            vec![
                req(0, 100, None, 0),
                req(1, 200, Some(3), 0),
                req(2, 300, Some(3), 1),
                req(3, 300, None, 0),
            ],
            2.0,
        );
        assert!(s.order.is_none());
        assert_eq!(s.session_count(), 3);
        // A session whose later turn comes after another request: that one goes first.
        let s = schedule(
            vec![
                req(0, 100, Some(3), 0),
                req(1, 200, None, 0),
                req(2, 300, Some(3), 1),
            ],
            2.0,
        );
        assert_eq!(s.order, Some(vec![0, 2, 1]));
        let lines: Vec<u32> = s.requests().map(|r| r.line).collect();
        assert_eq!(lines, [1, 3, 2]);
    }

    #[test]
    fn grouping_matches_the_per_session_vecs_on_real_traces() {
        use crate::trace::{load, LoadOptions};
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/traces");
        let mut checked = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if !matches!(
                path.extension().and_then(|e| e.to_str()),
                Some("jsonl" | "csv")
            ) {
                continue;
            }
            let trace = load(&path, &LoadOptions::default()).unwrap();
            for speedup in [1.0, 37.0] {
                check_against_reference(
                    trace.requests.to_vec(),
                    speedup,
                    &path.display().to_string(),
                );
            }
            checked += 1;
        }
        assert!(
            checked >= 4,
            "only {checked} real traces found in {}",
            dir.display()
        );
    }

    #[test]
    fn grouping_matches_with_sessions_out_of_order_and_ties() {
        // Turns given out of order, equal turns, equal deadlines across sessions, rows
        // without a session between them: every case the stable sorts decide.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for n in [0usize, 1, 2, 7, 50, 400] {
            let rows: Vec<TraceRequest> = (0..n)
                .map(|i| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let session = (x % 3 != 0).then_some(x % 11);
                    let mut r = req(
                        i as u32,
                        (x >> 8) % 5 * 100,
                        session,
                        ((x >> 16) % 4) as u32,
                    );
                    if x % 5 == 0 {
                        r.set_delay_us(Some(1_000));
                    }
                    r
                })
                .collect();
            check_against_reference(rows, 3.0, &format!("{n} rows"));
        }
    }
}

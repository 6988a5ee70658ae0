//! The fixed schedule: when each request is due, relative to the start of the run.
//!
//! Request *i* is due at `(ts_i − ts_first) / speedup`. Deadlines are absolute offsets from one
//! origin, so lateness never accumulates. First turns are open-loop; later turns of a session
//! wait for the previous turn and then follow their `delay` (if the trace gives one) or their
//! timestamp, whichever the row carries.

use canary_core::TraceRequest;
use std::collections::HashMap;
use std::time::Duration;

/// One session's turns, in order, as the dispatcher takes it.
#[derive(Debug, Clone)]
pub struct Session {
    /// The turns; `turns[0]` is open-loop.
    pub turns: Vec<TraceRequest>,
}

/// One session's turns, in order, inside a [`Schedule`].
#[derive(Debug, Clone, Copy)]
pub struct SessionRef<'a> {
    /// The turns; `turns[0]` is open-loop.
    pub turns: &'a [TraceRequest],
}

/// All requests of a run grouped into sessions, ordered by first-turn deadline.
///
/// The requests are held in one `Vec`, session after session, with where each session
/// starts: no allocation per session, so a million single-request sessions cost the rows
/// and 4 bytes each (a `Vec` per session cost an allocation and a 24-byte header each).
#[derive(Debug, Clone)]
pub struct Schedule {
    /// Every request, session after session, each session's turns in order.
    rows: Vec<TraceRequest>,
    /// Where each session starts in `rows`, in first-turn order.
    starts: Vec<u32>,
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
    /// Groups `requests` (sorted by timestamp) into sessions. `speedup` must be positive.
    pub fn new(requests: Vec<TraceRequest>, speedup: f64) -> Schedule {
        Schedule::with_origin(requests, speedup, None)
    }

    /// The same, with deadlines counted from trace time `origin_us` (when earlier than the
    /// first request) rather than from the first request: a shard's schedule keeps the
    /// whole trace's origin.
    ///
    /// Sessions are numbered in order of first appearance (a row without a session is one
    /// of its own), each session's turns are ordered by `turn` (ties: as given), and the
    /// sessions by the deadline of their first turn (ties: by number).
    pub fn with_origin(
        mut rows: Vec<TraceRequest>,
        speedup: f64,
        origin_us: Option<u64>,
    ) -> Schedule {
        assert!(
            speedup > 0.0 && speedup.is_finite(),
            "speedup must be positive"
        );
        assert!(
            u32::try_from(rows.len()).is_ok(),
            "at most 2^32 - 1 requests"
        );
        let first = rows.iter().map(|r| r.timestamp_us).min().unwrap_or(0);
        let origin_us = origin_us.map_or(first, |o| o.min(first));
        let timing = Timing { origin_us, speedup };
        // Each row's session number, and each session's first turn (lowest `turn`, first
        // given among equals).
        let mut group: Vec<u32> = Vec::with_capacity(rows.len());
        let mut first_turn: Vec<u32> = Vec::new();
        let mut by_key: HashMap<u64, u32> = HashMap::new();
        for (i, r) in rows.iter().enumerate() {
            let g = match r.session {
                Some(key) => *by_key.entry(key).or_insert(first_turn.len() as u32),
                None => first_turn.len() as u32,
            };
            if g as usize == first_turn.len() {
                first_turn.push(i as u32);
            } else if r.turn < rows[first_turn[g as usize] as usize].turn {
                first_turn[g as usize] = i as u32;
            }
            group.push(g);
        }
        drop(by_key);
        // The new order of the rows: by session deadline, session, turn; stable.
        let mut order: Vec<u32> = (0..rows.len() as u32).collect();
        let key = |i: &u32| {
            let g = group[*i as usize];
            let lead = &rows[first_turn[g as usize] as usize];
            (timing.offset(lead), g, rows[*i as usize].turn)
        };
        // Not `sort_by_cached_key`: its cache would take 32 bytes a row.
        order.sort_by_key(key);
        let mut starts = Vec::with_capacity(first_turn.len());
        let mut last = None;
        for (pos, &i) in order.iter().enumerate() {
            let g = group[i as usize];
            if last != Some(g) {
                starts.push(pos as u32);
                last = Some(g);
            }
        }
        drop((group, first_turn));
        permute(&mut rows, order);
        Schedule {
            rows,
            starts,
            timing,
        }
    }

    /// The trace-to-run time mapping.
    pub fn timing(&self) -> Timing {
        self.timing
    }

    /// Sessions in first-turn order.
    pub fn sessions(&self) -> impl ExactSizeIterator<Item = SessionRef<'_>> + Clone + '_ {
        (0..self.starts.len()).map(|k| SessionRef {
            turns: &self.rows[self.range(k)],
        })
    }

    /// Every request, session after session (each session's turns in order).
    pub fn requests(&self) -> &[TraceRequest] {
        &self.rows
    }

    /// Number of sessions.
    pub fn session_count(&self) -> usize {
        self.starts.len()
    }

    fn range(&self, k: usize) -> std::ops::Range<usize> {
        let end = self
            .starts
            .get(k + 1)
            .map_or(self.rows.len(), |&e| e as usize);
        self.starts[k] as usize..end
    }

    /// Consumes the schedule, yielding its sessions in first-turn order. Each session's
    /// `Vec` is made as it is taken, so only the sessions taken and not yet dropped hold one.
    pub fn into_sessions(self) -> IntoSessions {
        IntoSessions {
            sizes: self
                .starts
                .iter()
                .enumerate()
                .map(|(k, &s)| {
                    let end = self
                        .starts
                        .get(k + 1)
                        .map_or(self.rows.len(), |&e| e as usize);
                    (end - s as usize) as u32
                })
                .collect::<Vec<u32>>()
                .into_iter(),
            rows: self.rows.into_iter(),
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

    /// The least time replaying the schedule takes, server time not counted: the last
    /// deadline by timestamp, or a session's first deadline plus the `delay`s of its later
    /// turns where that ends later. Saturates at `Duration::MAX` (a speedup of 1e-12).
    pub fn min_duration(&self) -> Duration {
        let mut longest = 0f64; // trace seconds
        for s in self.sessions() {
            let mut end = 0f64;
            for (k, r) in s.turns.iter().enumerate() {
                let at = r.timestamp_us.saturating_sub(self.timing.origin_us) as f64 / 1e6;
                end = match r.delay_us() {
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
        self.rows
            .iter()
            .map(|r| self.offset(r))
            .max()
            .unwrap_or_default()
    }
}

/// A [`Schedule`]'s sessions, taken in first-turn order (see [`Schedule::into_sessions`]).
#[derive(Debug)]
pub struct IntoSessions {
    rows: std::vec::IntoIter<TraceRequest>,
    sizes: std::vec::IntoIter<u32>,
}

impl Iterator for IntoSessions {
    type Item = Session;

    fn next(&mut self) -> Option<Session> {
        let n = self.sizes.next()? as usize;
        Some(Session {
            turns: self.rows.by_ref().take(n).collect(),
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.sizes.size_hint()
    }
}

impl ExactSizeIterator for IntoSessions {}

/// Puts `rows[order[j]]` at `j` for every `j`, in place (`order` is a permutation).
fn permute<T>(rows: &mut [T], mut order: Vec<u32>) {
    const DONE: u32 = u32::MAX;
    for start in 0..rows.len() {
        let mut j = start;
        while order[j] != DONE {
            let src = order[j] as usize;
            order[j] = DONE;
            if src == start {
                break;
            }
            rows.swap(j, src);
            j = src;
        }
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
        let s = Schedule::new(reqs, 20.0);
        assert_eq!(s.span(), Duration::from_millis(33_450));
    }

    #[test]
    fn min_duration_counts_delays_and_saturates() {
        let mut t1 = req(2, 500, Some(7), 1);
        t1.set_delay_us(Some(10_000_000));
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
        t1.set_delay_us(Some(2_000_000));
        let s = Schedule::new(vec![req(0, 100, Some(7), 0), req(1, 200, None, 0), t1], 2.0);
        assert_eq!(s.sessions().len(), 2);
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
        let timing = Schedule::new(requests.clone(), speedup).timing();
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
        let s = Schedule::new(requests, speedup);
        let got: Vec<Vec<TraceRequest>> = s.sessions().map(|x| x.turns.to_vec()).collect();
        assert_eq!(got.len(), want.len(), "{what}: sessions");
        assert!(got == want, "{what}: session or turn order changed");
        let taken: Vec<Vec<TraceRequest>> = s.clone().into_sessions().map(|x| x.turns).collect();
        assert!(taken == want, "{what}: into_sessions differs");
        assert_eq!(s.session_count(), want.len());
        assert_eq!(s.len(), want.iter().map(Vec::len).sum::<usize>());
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
                    trace.requests.clone(),
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

    #[test]
    fn permute_puts_each_row_where_the_order_says() {
        let rows: Vec<u32> = (0..9).collect();
        for order in [
            vec![0u32, 1, 2, 3, 4, 5, 6, 7, 8],
            vec![8, 7, 6, 5, 4, 3, 2, 1, 0],
            vec![1, 2, 0, 4, 3, 5, 8, 6, 7],
        ] {
            let mut got = rows.clone();
            permute(&mut got, order.clone());
            let want: Vec<u32> = order.iter().map(|&i| rows[i as usize]).collect();
            assert_eq!(got, want);
        }
    }
}

//! A capacity search's bracket ends that are not established: the end (the highest rate that
//! passed, the lowest above it that failed) whose probe's pass or fail rests on goodput
//! judgements made on bounds, so the truth could decide it the other way. One type for every
//! place that carries them (`sweep.json`'s and `verdict.json`'s `capacity.not_established`,
//! the daemon's history, `/api/runs`, the status page, `/metrics`, the report and `canaryd
//! compare`), and one wording for them ([`EndOnBounds::said`]).
//!
//! On disk each is `{"end": "passed" | "failed", "rate": 10.0, "why": "rests on bounds: …"}`,
//! in that order.

use crate::rate_text::{rate_at_least, rate_below};
use serde::{Deserialize, Serialize};

/// Which end of a capacity bracket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BracketEnd {
    /// The highest offered rate that passed: the capacity is at least it.
    Passed,
    /// The lowest offered rate above it that failed: the capacity is below it.
    Failed,
}

impl BracketEnd {
    /// Both ends, the passing one first.
    pub const ALL: [BracketEnd; 2] = [BracketEnd::Passed, BracketEnd::Failed];

    /// `passed` or `failed`, as the JSON and `/metrics`' `end` label name it.
    pub fn as_str(self) -> &'static str {
        match self {
            BracketEnd::Passed => "passed",
            BracketEnd::Failed => "failed",
        }
    }

    /// `at least 40` or `below 10`: the end's rate `rate` as a bound, rounded outward so the
    /// printed bound still holds ([`crate::rate_text`]).
    pub fn bound(self, rate: f64) -> String {
        match self {
            BracketEnd::Passed => format!("at least {}", rate_at_least(rate)),
            BracketEnd::Failed => format!("below {}", rate_below(rate)),
        }
    }
}

/// A bracket end whose probe's decision rests on bounds. The decision stands (one answer per
/// probe); this says it is not established.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EndOnBounds {
    /// Which end.
    pub end: BracketEnd,
    /// Its rate, requests/s (exact: the rate the probe offered).
    pub rate: f64,
    /// From the probe's verdict: `rests on bounds: up to 98.8 % may be good (…)`. Empty when
    /// an artifact gave none.
    #[serde(default)]
    pub why: String,
}

impl EndOnBounds {
    /// `the fail at 1600 req/s rests on bounds: up to 98.8 % may be good (…)` (`the pass at
    /// …`), its rate rounded outward as the capacity line's.
    pub fn said(&self) -> String {
        self.said_of("the")
    }

    /// [`EndOnBounds::said`] of `whose` end: `B's fail at 1600 req/s rests on bounds: …`.
    pub fn said_of(&self, whose: &str) -> String {
        let (what, rate) = match self.end {
            BracketEnd::Passed => ("pass", rate_at_least(self.rate)),
            BracketEnd::Failed => ("fail", rate_below(self.rate)),
        };
        let why = match self.why.is_empty() {
            true => String::new(),
            false => format!(" {}", self.why),
        };
        format!("{whose} {what} at {rate} req/s{why}")
    }

    /// `the failing end (below 20 req/s)` (`the passing end (at least 40 req/s)`): the end
    /// alone, where the reason is shown apart from it (on hover on the status page).
    pub fn end_said(&self) -> String {
        let which = match self.end {
            BracketEnd::Passed => "passing",
            BracketEnd::Failed => "failing",
        };
        format!("the {which} end ({} req/s)", self.end.bound(self.rate))
    }

    /// `not established: the fail at 1600 req/s rests on bounds: …; the pass at …` for
    /// `ends`, `None` when there is none: what a capacity line adds after `; `.
    pub fn all_said(ends: &[EndOnBounds]) -> Option<String> {
        (!ends.is_empty()).then(|| {
            let said: Vec<String> = ends.iter().map(EndOnBounds::said).collect();
            format!("not established: {}", said.join("; "))
        })
    }

    /// The end `end` among `ends`, when it is there.
    pub fn find(ends: &[EndOnBounds], end: BracketEnd) -> Option<&EndOnBounds> {
        ends.iter().find(|e| e.end == end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fail_at(rate: f64) -> EndOnBounds {
        EndOnBounds {
            end: BracketEnd::Failed,
            rate,
            why: "rests on bounds: up to 98.8 % may be good (276 judgements rest on a bound)"
                .into(),
        }
    }

    // The one wording: each end's rate rounded outward (a failing end up, a passing one down),
    // so the printed bound still holds.
    #[test]
    fn an_end_on_bounds_is_said_with_its_rate_rounded_outward() {
        let f = fail_at(112.5);
        assert_eq!(
            f.said(),
            "the fail at 113 req/s rests on bounds: up to 98.8 % may be good (276 judgements \
             rest on a bound)"
        );
        assert!(f
            .said_of("B's")
            .starts_with("B's fail at 113 req/s rests on"));
        assert_eq!(f.end_said(), "the failing end (below 113 req/s)");
        let p = EndOnBounds {
            end: BracketEnd::Passed,
            rate: 109.375,
            why: String::new(),
        };
        assert_eq!(p.said(), "the pass at 109 req/s");
        assert_eq!(p.end_said(), "the passing end (at least 109 req/s)");
        assert_eq!(EndOnBounds::all_said(&[]), None);
        assert_eq!(
            EndOnBounds::all_said(&[p.clone(), f.clone()]).unwrap(),
            format!("not established: {}; {}", p.said(), f.said())
        );
        assert_eq!(
            EndOnBounds::find(&[p, f.clone()], BracketEnd::Failed),
            Some(&f)
        );
    }

    use canary_testkit::json::compact;

    // A sweep.json written by `canaryd sweep --find-max-rate` before the type moved here
    // (tests/data/SOURCES.md): its ends read, and written back are the same bytes.
    #[test]
    fn the_ends_of_a_sweep_json_written_before_read_and_write_back_the_same_bytes() {
        #[derive(Deserialize)]
        struct Doc<'a> {
            #[serde(borrow)]
            capacity: Capacity<'a>,
        }
        #[derive(Deserialize)]
        struct Capacity<'a> {
            #[serde(borrow)]
            not_established: &'a serde_json::value::RawValue,
        }
        let text = include_str!("../tests/data/sweep_capacity_on_bounds.json");
        let doc: Doc = serde_json::from_str(text).unwrap();
        let raw = doc.capacity.not_established.get();
        let ends: Vec<EndOnBounds> = serde_json::from_str(raw).unwrap();
        assert_eq!(ends.len(), 1, "{ends:?}");
        assert_eq!((ends[0].end, ends[0].rate), (BracketEnd::Failed, 10.0));
        assert!(ends[0].why.starts_with("rests on bounds: up to 100.0 %"));
        assert_eq!(serde_json::to_string(&ends).unwrap(), compact(raw));
        assert_eq!(
            ends[0].said(),
            "the fail at 10 req/s rests on bounds: up to 100.0 % may be good (10 judgements \
             rest on a bound; truly good 0 to 10 of 10)"
        );
    }
}

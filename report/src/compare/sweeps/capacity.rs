//! A capacity search's answer (`--find-max-rate`) as bounds, and two sweeps' answers told
//! apart only where their brackets do not overlap.

use canary_core::rate_text::{rate_at_least, rate_below};
use canary_core::{BracketEnd, EndOnBounds};
use serde::Serialize;

/// A capacity search's answer: at least `passed`, below `failed` (bounds).
#[derive(Debug, Clone, Serialize)]
pub struct Bracket {
    /// The highest rate that passed.
    pub passed: Option<f64>,
    /// The lowest rate above it that failed.
    pub failed: Option<f64>,
    /// The SLOs it was searched under (aiperf's syntax), as its `sweep.json` says.
    pub slo: Option<String>,
    /// The share of requests that had to meet them.
    pub min_good_fraction: Option<f64>,
    /// Its ends not established, as its `sweep.json` names them (`capacity.not_established`):
    /// their probe's pass or fail rests on goodput judgements made on bounds.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_established: Vec<EndOnBounds>,
}

impl Bracket {
    /// Its end `end` (`passed`, `failed`) when that end is not established.
    fn on_bounds(&self, end: BracketEnd) -> Option<&EndOnBounds> {
        EndOnBounds::find(&self.not_established, end)
    }

    /// `at least 109, below 113 req/s`: each bound rounded outward (`canary_core::rate_text`, as
    /// `canaryd sweep` and the daemon's verdicts print them), so what is printed still holds:
    /// rounded to the nearest, 109.375 .. 112.5 read "below 112", under the rate that failed.
    pub fn said(&self) -> String {
        match (self.passed, self.failed) {
            (Some(p), Some(f)) => format!(
                "at least {}, below {} req/s",
                rate_at_least(p),
                rate_below(f)
            ),
            (Some(p), None) => format!("at least {} req/s (no rate failed)", rate_at_least(p)),
            (None, Some(f)) => format!("below {} req/s (no rate passed)", rate_below(f)),
            (None, None) => "– (no rate tried)".into(),
        }
    }
}

/// The two capacity brackets.
#[derive(Debug, Serialize)]
pub struct CapacityComparison {
    /// A's bracket.
    pub a: Bracket,
    /// B's bracket.
    pub b: Bracket,
    /// `higher` (B's passing rate at or above A's failing one), `lower`, `not_told_apart`
    /// (the brackets overlap, or a bound is missing), or `not_comparable` (searched under
    /// different SLOs or good fractions).
    pub verdict: &'static str,
    /// The ends `higher` or `lower` rests on that are not established (`A's fail at 10
    /// req/s rests on bounds: …`): the verdict holds as the probes were decided, but the
    /// truth could decide one of them the other way. Absent when there is none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rests_on_bounds: Vec<String>,
}

impl CapacityComparison {
    /// B's bracket `y` against A's `x`.
    pub(super) fn of(x: Bracket, y: Bracket) -> CapacityComparison {
        let verdict = match (&x, &y) {
            // A capacity is at an SLO: two searched under different ones measure
            // different things.
            _ if (&x.slo, x.min_good_fraction) != (&y.slo, y.min_good_fraction) => "not_comparable",
            (
                Bracket {
                    failed: Some(f), ..
                },
                Bracket {
                    passed: Some(p), ..
                },
            ) if p >= f => "higher",
            (
                Bracket {
                    passed: Some(p), ..
                },
                Bracket {
                    failed: Some(f), ..
                },
            ) if f <= p => "lower",
            _ => "not_told_apart",
        };
        // B higher: A's failing end below B's passing end; lower: B's failing end below A's
        // passing end. Those two ends are what the verdict rests on.
        let leaned_on = match verdict {
            "higher" => vec![
                ("A", x.on_bounds(BracketEnd::Failed)),
                ("B", y.on_bounds(BracketEnd::Passed)),
            ],
            "lower" => vec![
                ("A", x.on_bounds(BracketEnd::Passed)),
                ("B", y.on_bounds(BracketEnd::Failed)),
            ],
            _ => Vec::new(),
        };
        CapacityComparison {
            rests_on_bounds: leaned_on
                .into_iter()
                .filter_map(|(side, e)| Some(e?.said_of(&format!("{side}'s"))))
                .collect(),
            verdict,
            a: x,
            b: y,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{compare_sweeps, Sweep};
    use super::*;
    use canary_core::compare::ShiftRules;
    use std::path::PathBuf;

    fn sweep(axis: &str, passed: Option<f64>, failed: Option<f64>) -> Sweep {
        Sweep {
            dir: PathBuf::from(axis),
            name: axis.into(),
            axis: axis.into(),
            points: Vec::new(),
            said: Vec::new(),
            knee: None,
            knee_left_out: Vec::new(),
            capacity: Some(Bracket {
                passed,
                failed,
                slo: Some("time_to_first_token:400".into()),
                min_good_fraction: Some(0.95),
                not_established: Vec::new(),
            }),
        }
    }

    // The audit's two searches: 109.375 .. 112.5 read "at least 109, below 112" (rounded to
    // the nearest, under the rate that failed), and 30.46875 .. 31.25 read "at least 30.5,
    // below 31.2" (both ends past what was measured). Outward, as `canaryd sweep` prints them.
    #[test]
    fn a_bracket_is_printed_rounded_outward_so_its_bounds_still_hold() {
        let b = |passed, failed| Bracket {
            passed,
            failed,
            slo: None,
            min_good_fraction: None,
            not_established: Vec::new(),
        };
        assert_eq!(
            b(Some(109.375), Some(112.5)).said(),
            "at least 109, below 113 req/s"
        );
        assert_eq!(
            b(Some(30.46875), Some(31.25)).said(),
            "at least 30.46, below 31.25 req/s"
        );
        assert_eq!(
            b(Some(106.9), None).said(),
            "at least 106 req/s (no rate failed)"
        );
        assert_eq!(
            b(None, Some(50.0)).said(),
            "below 50 req/s (no rate passed)"
        );
        // And so the compare's line under the table.
        let a = sweep("request_rate", Some(109.375), Some(112.5));
        let c = compare_sweeps(
            &a,
            &sweep("request_rate", Some(30.46875), Some(31.25)),
            &ShiftRules::default(),
        )
        .unwrap();
        let text = c.to_text();
        assert!(
            text.contains(
                "capacity at SLO: A at least 109, below 113 req/s, B at least 30.46, below 31.25 \
                 req/s: B lower"
            ),
            "{text}"
        );
    }

    // A capacity is at least its passing rate and below its failing one: two brackets tell
    // the capacities apart only when they do not overlap.
    #[test]
    fn capacity_brackets_are_told_apart_only_when_they_do_not_overlap() {
        let verdict = |a: Sweep, b: Sweep| {
            compare_sweeps(&a, &b, &ShiftRules::default())
                .unwrap()
                .capacity
                .unwrap()
                .verdict
        };
        let r = |p, f| sweep("request_rate", p, f);
        assert_eq!(
            verdict(r(Some(100.0), Some(110.0)), r(Some(110.0), Some(120.0))),
            "higher"
        );
        assert_eq!(
            verdict(r(Some(100.0), Some(110.0)), r(Some(50.0), Some(100.0))),
            "lower"
        );
        assert_eq!(
            verdict(r(Some(100.0), Some(110.0)), r(Some(105.0), Some(115.0))),
            "not_told_apart"
        );
        // Capacities at other SLOs, or other good fractions, are not compared.
        let at = |slo: &str, fraction: f64| {
            let mut s = r(Some(200.0), Some(210.0));
            let c = s.capacity.as_mut().unwrap();
            (c.slo, c.min_good_fraction) = (Some(slo.into()), Some(fraction));
            s
        };
        let low = || r(Some(100.0), Some(110.0));
        assert_eq!(
            verdict(low(), at("time_to_first_token:800", 0.95)),
            "not_comparable"
        );
        assert_eq!(
            verdict(low(), at("time_to_first_token:400", 0.9)),
            "not_comparable"
        );
        assert_eq!(
            verdict(low(), at("time_to_first_token:400", 0.95)),
            "higher"
        );
        // A search that never failed has no upper bound: nothing is known to lie above it.
        assert_eq!(
            verdict(r(Some(100.0), None), r(Some(120.0), None)),
            "not_told_apart"
        );
        assert_eq!(
            verdict(r(Some(100.0), None), r(Some(90.0), Some(95.0))),
            "lower"
        );
        assert_eq!(verdict(r(None, Some(50.0)), r(Some(50.0), None)), "higher");
        let e = compare_sweeps(
            &sweep("concurrency", None, None),
            &r(None, None),
            &ShiftRules::default(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("varies request_rate"), "{e}");
    }
}

//! How exact a side's TTFT is. A first token's time is exact only where the kernel stamped the
//! segment that completed it (`kernel`); where the read also carried later bytes it is the last
//! segment's stamp (`kernel_bound`), and without a stamp it is canaryd's read (`userspace`):
//! both upper bounds. At a high rate most first tokens are bounds, so a comparison that calls
//! TTFT exact would overstate it. Counted from each run's `summary.json`
//! (`receive_timestamps.first_token`).

use crate::artifacts::Run;
use serde::{Deserialize, Serialize};

/// A side's first tokens by how their time was taken, over its runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct FirstTokenTimes {
    /// First tokens whose time is an upper bound: every completed request's but those the
    /// kernel stamped (`kernel`). `kernel_bound` and `userspace` ones, and every one of a run
    /// with receive timestamps off or refused (canaryd's reads, no `rx`), whether or not its
    /// summary says `state` (a merged or recovered one does not).
    pub bound: u64,
    /// First tokens counted: the runs' completed requests.
    pub of: u64,
    /// Runs whose summary does not count them (none, or one from before they were counted):
    /// how exact their TTFT is, is not known.
    pub unknown_runs: u64,
}

/// A side's token events by how their time was taken, over its runs: TTST and the inter-chunk
/// gaps are over them, and are bounds where any is (ITL is not: see [`ItlTimes`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TokenEventTimes {
    /// Token events whose time is an upper bound (`receive_timestamps.token_events_bound`:
    /// several in one read).
    pub bound: u64,
    /// Token events counted (`receive_timestamps.token_events`).
    pub of: u64,
    /// Runs with receive timestamps off or refused, or that stamped none: every token event
    /// of theirs is canaryd's read, and not counted.
    pub read_runs: u64,
    /// Runs whose summary does not count them (none, or one from before receive timestamps
    /// were counted): how exact their ITL is, is not known.
    pub unknown_runs: u64,
}

impl TokenEventTimes {
    /// Summed over `runs`.
    pub(super) fn of(runs: &[Run]) -> TokenEventTimes {
        let mut t = TokenEventTimes::default();
        for r in runs {
            let Some(rx) = r
                .summary
                .as_ref()
                .and_then(|s| s.section("receive_timestamps"))
            else {
                t.unknown_runs += 1;
                continue;
            };
            let n = |k: &str| rx.get(k).and_then(|v| v.as_u64()).unwrap_or(0);
            let on = rx
                .get("state")
                .and_then(|v| v.as_str())
                .is_none_or(|s| s == "on");
            if on && n("requests") == 0 && rx.get("state").is_some() {
                // Receive timestamps on and no request: a run of no request timed nothing.
                continue;
            }
            if !on || n("requests") == 0 {
                t.read_runs += 1;
                continue;
            }
            t.bound += n("token_events_bound");
            t.of += n("token_events");
        }
        t
    }
}

/// A side's per-request ITLs by how exact they are, over its runs. ITL is over each request's
/// first token and end alone ([`canary_core::itl_is_bound`]), not the token events between.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ItlTimes {
    /// ITLs that are bounds (`receive_timestamps.itl_bound_requests`).
    pub bound: u64,
    /// ITLs counted (`receive_timestamps.itl_requests`).
    pub of: u64,
    /// Runs whose ITLs are bounds by the run's rule ([`canary_core::RxSummary::bounds`]) but
    /// not counted: receive timestamps off or refused (canaryd's reads), or a summary from
    /// before ITLs were counted with some first token or end a bound.
    pub uncounted_runs: u64,
    /// Runs whose summary does not say how its times were taken (no `receive_timestamps`):
    /// taken as bounds, as `canaryd sweep` takes them.
    pub unknown_runs: u64,
}

impl ItlTimes {
    /// Summed over `runs`.
    pub(super) fn of(runs: &[Run]) -> ItlTimes {
        let mut t = ItlTimes::default();
        for r in runs {
            let rx = r
                .summary
                .as_ref()
                .and_then(|s| s.section("receive_timestamps"))
                .and_then(|v| canary_core::RxSummary::deserialize(v).ok());
            match rx {
                // Receive timestamps on and no request: a run of no request timed nothing.
                Some(rx) if rx.requests == 0 && rx.state.as_deref() == Some("on") => {}
                Some(rx) if rx.itl_bound_requests.is_some() => {
                    t.bound += rx.itl_bound_requests.unwrap_or(0);
                    t.of += rx.itl_requests.unwrap_or(0);
                }
                Some(rx) if !rx.bounds().itl => {}
                Some(_) => t.uncounted_runs += 1,
                None => t.unknown_runs += 1,
            }
        }
        t
    }

    /// `3 of 52 ITLs are bounds`, or `None` when none is known to be.
    fn said(&self) -> Option<String> {
        let mut parts = Vec::new();
        if self.bound > 0 {
            parts.push(format!("{} of {} ITLs are bounds", self.bound, self.of));
        }
        if self.uncounted_runs > 0 {
            parts.push(format!(
                "{} run{} timed some first tokens or ends at canaryd's reads or a later \
                 segment's stamp (ITLs not counted)",
                self.uncounted_runs,
                if self.uncounted_runs == 1 { "" } else { "s" },
            ));
        }
        if self.unknown_runs > 0 {
            parts.push(does_not_say(self.unknown_runs, "ITLs"));
        }
        (!parts.is_empty()).then(|| parts.join(", "))
    }

    /// Some ITL is a bound.
    pub(super) fn any_bound(&self) -> bool {
        self.bound + self.uncounted_runs + self.unknown_runs > 0
    }
}

/// `1 run does not say how its first tokens were timed`.
fn does_not_say(runs: u64, what: &str) -> String {
    let one = runs == 1;
    format!(
        "{runs} run{} do{} not say how {} {what} were timed",
        if one { "" } else { "s" },
        if one { "es" } else { "" },
        if one { "its" } else { "their" },
    )
}

/// How a side's response times were taken: its first tokens (TTFT), ends (e2e), token events
/// and ITLs, each counted from its runs' `summary.json` `receive_timestamps`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SideTimes {
    /// Its first tokens (`receive_timestamps.first_token`).
    pub first_tokens: FirstTokenTimes,
    /// Its ends (`receive_timestamps.end`), counted as the first tokens are.
    pub ends: FirstTokenTimes,
    /// Its token events (TTST and the inter-chunk gaps are over them, not ITL).
    pub token_events: TokenEventTimes,
    /// Its ITLs.
    pub itl: ItlTimes,
}

impl SideTimes {
    /// Summed over `runs`.
    pub(super) fn of(runs: &[Run]) -> SideTimes {
        SideTimes {
            first_tokens: FirstTokenTimes::of(runs),
            ends: FirstTokenTimes::of_key(runs, "end"),
            token_events: TokenEventTimes::of(runs),
            itl: ItlTimes::of(runs),
        }
    }

    /// The two summed.
    pub(super) fn plus(self, o: SideTimes) -> SideTimes {
        let add = |a: FirstTokenTimes, b: FirstTokenTimes| FirstTokenTimes {
            bound: a.bound + b.bound,
            of: a.of + b.of,
            unknown_runs: a.unknown_runs + b.unknown_runs,
        };
        SideTimes {
            first_tokens: add(self.first_tokens, o.first_tokens),
            ends: add(self.ends, o.ends),
            token_events: TokenEventTimes {
                bound: self.token_events.bound + o.token_events.bound,
                of: self.token_events.of + o.token_events.of,
                read_runs: self.token_events.read_runs + o.token_events.read_runs,
                unknown_runs: self.token_events.unknown_runs + o.token_events.unknown_runs,
            },
            itl: ItlTimes {
                bound: self.itl.bound + o.itl.bound,
                of: self.itl.of + o.itl.of,
                uncounted_runs: self.itl.uncounted_runs + o.itl.uncounted_runs,
                unknown_runs: self.itl.unknown_runs + o.itl.unknown_runs,
            },
        }
    }
}

impl FirstTokenTimes {
    /// Summed over `runs`.
    pub(super) fn of(runs: &[Run]) -> FirstTokenTimes {
        FirstTokenTimes::of_key(runs, "first_token")
    }

    /// Summed over `runs`, from `receive_timestamps.<key>` (`first_token` or `end`).
    pub(super) fn of_key(runs: &[Run], key: &str) -> FirstTokenTimes {
        let mut t = FirstTokenTimes::default();
        for r in runs {
            let Some(s) = r.summary.as_ref() else {
                t.unknown_runs += 1;
                continue;
            };
            let Some(rx) = s.section("receive_timestamps") else {
                t.unknown_runs += 1;
                continue;
            };
            // Only a first token the kernel stamped (`kernel`) is exact: every other completed
            // request's is a bound, those of a run with receive timestamps off or refused
            // (no `rx` in its records, so none counted) and those of a merged or recovered
            // summary (no `state`: folded again from records) alike. Exact only on positive
            // evidence.
            let off = rx
                .get("state")
                .and_then(|v| v.as_str())
                .is_some_and(|s| s != "on");
            // A summary from before this event was counted (no `end`) does not say.
            if !off && rx.get(key).is_none() {
                t.unknown_runs += 1;
                continue;
            }
            let counts = rx.get(key).and_then(|v| v.as_object());
            let count = |kind: Option<&str>| -> u64 {
                counts
                    .into_iter()
                    .flatten()
                    .filter(|(k, _)| kind.is_none_or(|kind| k.as_str() == kind))
                    .map(|(_, n)| n.as_u64().unwrap_or(0))
                    .sum()
            };
            let kernel = if off { 0 } else { count(Some("kernel")) };
            let completed = s
                .number(&["completed"])
                .map_or_else(|| count(None), |n| n as u64);
            let of = completed.max(kernel);
            t.of += of;
            t.bound += of - kernel;
        }
        t
    }

    /// `692 of 800 first tokens are upper bounds` (of `what`: `first tokens`, `ends`) and what
    /// is not known, or `None` when every one counted is exact and every run counted them.
    fn said_of(&self, what: &str) -> Option<String> {
        let mut parts = Vec::new();
        if self.bound > 0 {
            parts.push(format!(
                "{} of {} {what} are upper bounds",
                self.bound, self.of
            ));
        }
        if self.unknown_runs > 0 {
            parts.push(does_not_say(self.unknown_runs, what));
        }
        (!parts.is_empty()).then(|| parts.join(", "))
    }

    /// Not known to be exact: some are bounds, or some run does not say how they were timed.
    pub(super) fn not_exact(&self) -> bool {
        self.bound + self.unknown_runs > 0
    }
}

/// `exact` (`Figures are exact, from each run's records`) as a sentence, qualified for TTFT,
/// e2e and ITL when a side's first tokens, ends or token events are bounds or not known to be
/// exact.
pub(super) fn exactness(a: &SideTimes, b: &SideTimes, exact: &str) -> String {
    let mut clauses = Vec::new();
    // A side that timed no first token (a run of no request, or none completed): nothing
    // to say of how its times were taken.
    let timed_none = |t: &SideTimes| {
        t.first_tokens.of == 0 && t.first_tokens.unknown_runs == 0 && t.first_tokens.bound == 0
    };
    let (a_none, b_none) = (timed_none(a), timed_none(b));
    let events = [
        (
            "TTFT",
            a.first_tokens,
            b.first_tokens,
            "first tokens",
            "first_token",
        ),
        ("e2e", a.ends, b.ends, "ends", "end"),
    ];
    for (metric, a, b, what, key) in events {
        if a.said_of(what).is_none() && b.said_of(what).is_none() {
            continue;
        }
        let side = |name: &str, t: &FirstTokenTimes, none: bool| {
            let said = match t.said_of(what) {
                Some(s) => s,
                None if none => "no request timed".to_string(),
                None => format!("all {} {what} exact", t.of),
            };
            format!("{name} {said}")
        };
        // A time canaryd took is never before the truth: one whose run does not say how it
        // was taken is at best exact, and is taken as a bound (as `canaryd sweep` takes it).
        let rows = if a.bound + b.bound > 0 {
            format!(", so the {metric} rows compare upper bounds")
        } else {
            format!(", so the {metric} rows are taken as upper bounds (not known to be exact)")
        };
        clauses.push(format!(
            "{metric}: {}; {} (summary.json receive_timestamps.{key}: a kernel_bound or \
             userspace time is a later segment's stamp or canaryd's read, never before the \
             truth){rows}",
            side("A:", &a, a_none),
            side("B:", &b, b_none)
        ));
    }
    if a.itl.any_bound() || b.itl.any_bound() {
        let side = |name: &str, t: &ItlTimes, none: bool| {
            // A summary from before ITLs were counted, exact by its first tokens and ends.
            let said = t.said().unwrap_or_else(|| match t.of {
                0 if none => "no request timed".to_string(),
                0 => "ITLs exact".to_string(),
                n => format!("all {n} ITLs exact"),
            });
            format!("{name} {said}")
        };
        clauses.push(format!(
            "ITL: {}; {} (receive_timestamps.itl_bound_requests: a request's ITL is over its \
             first token and end, and a bound where either is), so the ITL rows compare bounds",
            side("A:", &a.itl, a_none),
            side("B:", &b.itl, b_none)
        ));
    }
    if clauses.is_empty() {
        return format!("{exact}.");
    }
    format!("{exact}, but not {}.", clauses.join("; nor "))
}

#[cfg(test)]
mod tests_support {
    use super::{FirstTokenTimes, SideTimes};
    use crate::artifacts::Run;

    /// Only first tokens counted.
    pub(super) fn ft(first_tokens: FirstTokenTimes) -> SideTimes {
        SideTimes {
            first_tokens,
            ..Default::default()
        }
    }

    pub(super) fn run(dir: &std::path::Path, summary: Option<serde_json::Value>) -> Run {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(
            dir.join("records.jsonl"),
            "{\"sent_at_ms\":0,\"ended_at_ms\":5,\"status\":\"ok\",\"ttft_ms\":1,\"e2e_ms\":5}\n",
        )
        .unwrap();
        if let Some(s) = summary {
            std::fs::write(dir.join("summary.json"), s.to_string()).unwrap();
        }
        Run::load(dir).unwrap()
    }
}

#[cfg(test)]
mod tests {
    use super::tests_support::{ft, run};
    use super::*;

    // The audit's P1: first_token {kernel: 108, kernel_bound: 692}, and compare said "Figures
    // are exact".
    #[test]
    fn first_tokens_that_are_bounds_are_counted_and_said() {
        let tmp = tempfile::tempdir().unwrap();
        let rx = |kernel: u64, bound: u64| {
            serde_json::json!({"completed": kernel + bound, "receive_timestamps": {"state": "on",
                "requests": kernel + bound, "end": {"kernel": kernel + bound},
                "first_token": {"kernel": kernel, "kernel_bound": bound}}})
        };
        let p1 = [run(&tmp.path().join("p1"), Some(rx(108, 692)))];
        let t = FirstTokenTimes::of(&p1);
        assert_eq!((t.bound, t.of, t.unknown_runs), (692, 800, 0));
        let exact = [run(&tmp.path().join("i"), Some(rx(600, 0)))];
        let e = FirstTokenTimes::of(&exact);
        let exact = "Figures are exact, from each run's records";
        assert_eq!(exactness(&ft(e), &ft(e), exact), format!("{exact}."));
        let said = exactness(&ft(t), &ft(e), exact);
        assert!(
            said.starts_with(
                "Figures are exact, from each run's records, but not TTFT: A: 692 of 800 first \
                 tokens are upper bounds; B: all 600 first tokens exact"
            ) && said.ends_with(", so the TTFT rows compare upper bounds."),
            "{said}"
        );
        // The table marks TTFT a bound, and the rule line says how many.
        let load = |d: &str| crate::Experiment::load(&tmp.path().join(d)).unwrap();
        let c = super::super::compare(
            &load("p1"),
            &load("i"),
            &canary_core::compare::ShiftRules::default(),
        );
        let text = c.to_text();
        assert!(
            text.contains("TTFT p99 (bound)")
                && !text.contains("e2e p99 (bound)")
                && text.contains("but not TTFT: A: 692 of 800 first tokens are upper bounds"),
            "{text}"
        );
        assert_eq!(
            serde_json::to_value(&c).unwrap()["a"]["first_tokens"],
            serde_json::json!({"bound": 692, "of": 800, "unknown_runs": 0})
        );
        // Off: every time is canaryd's read. No summary: not known.
        let off = serde_json::json!({"completed": 40, "receive_timestamps": {"state": "off"}});
        let runs = [
            run(&tmp.path().join("off"), Some(off)),
            run(&tmp.path().join("bare"), None),
        ];
        let t = FirstTokenTimes::of(&runs);
        assert_eq!((t.bound, t.of, t.unknown_runs), (40, 40, 1));
        assert_eq!(
            t.said_of("first tokens").unwrap(),
            "40 of 40 first tokens are upper bounds, 1 run does not say how its first tokens \
             were timed"
        );
    }
}

#[cfg(test)]
mod no_state {
    use super::tests_support::{ft, run};
    use super::*;

    // The review's case: shards run with receive timestamps off, then merged. The merged
    // summary, folded again from records with no `rx`, has no `state` and counts no first
    // token; compare said "Figures are exact".
    #[test]
    fn a_summary_without_state_is_exact_only_for_kernel_stamped_first_tokens() {
        let tmp = tempfile::tempdir().unwrap();
        let merged = serde_json::json!({"completed": 40, "receive_timestamps": {
            "requests": 0, "first_token": {}, "token_events": 0, "token_events_bound": 0}});
        let m = [run(&tmp.path().join("m"), Some(merged))];
        let t = FirstTokenTimes::of(&m);
        assert_eq!((t.bound, t.of, t.unknown_runs), (40, 40, 0));
        let exact = "Figures are exact, from each run's records";
        assert_ne!(exactness(&ft(t), &ft(t), exact), format!("{exact}."));
        // Shards of which some stamped: the completed requests that were not stamped by the
        // kernel are bounds, whether counted as kernel_bound or not counted at all.
        let mixed = serde_json::json!({"completed": 50, "receive_timestamps": {
            "requests": 35, "first_token": {"kernel": 30, "kernel_bound": 5}}});
        let t = FirstTokenTimes::of(&[run(&tmp.path().join("x"), Some(mixed))]);
        assert_eq!((t.bound, t.of), (20, 50));
        // Every completed request stamped: exact, with or without `state`.
        let all = serde_json::json!({"completed": 9, "receive_timestamps": {
            "requests": 9, "first_token": {"kernel": 9}}});
        let t = FirstTokenTimes::of(&[run(&tmp.path().join("k"), Some(all))]);
        assert_eq!((t.bound, t.of), (0, 9));
        assert_eq!(exactness(&ft(t), &ft(t), exact), format!("{exact}."));
    }
}

#[cfg(test)]
mod ends {
    use super::tests_support::run;
    use super::*;

    // The audit: `canaryd compare r1 r2` said "Figures are exact … but not TTFT" though every
    // end of B (receive timestamps off) was canaryd's read, an upper bound, and A's token
    // events were bounds too.
    #[test]
    fn ends_and_token_events_that_are_bounds_are_counted_and_said() {
        let tmp = tempfile::tempdir().unwrap();
        let on = serde_json::json!({"completed": 300, "receive_timestamps": {"state": "on",
            "requests": 300, "first_token": {"kernel": 300}, "end": {"kernel": 300},
            "token_events": 3000, "token_events_bound": 0}});
        let off = serde_json::json!({"completed": 120, "receive_timestamps": {"state": "off",
            "requests": 0, "first_token": {}, "token_events": 0, "token_events_bound": 0}});
        let a = SideTimes::of(&[run(&tmp.path().join("a"), Some(on))]);
        let b = SideTimes::of(&[run(&tmp.path().join("b"), Some(off))]);
        assert_eq!((a.ends.bound, a.ends.of), (0, 300));
        assert_eq!((b.ends.bound, b.ends.of), (120, 120));
        assert_eq!(b.token_events.read_runs, 1);
        let exact = "Figures are exact, from each run's records";
        let said = exactness(&a, &b, exact);
        assert!(
            said.contains("nor e2e: A: all 300 ends exact; B: 120 of 120 ends are upper bounds")
                && said.contains("so the e2e rows compare upper bounds")
                && said.contains(
                    "ITL: A: ITLs exact; B: 1 run timed some first tokens or ends at \
                     canaryd's reads or a later segment's stamp (ITLs not counted)"
                ),
            "{said}"
        );
        let load = |d: &str| crate::Experiment::load(&tmp.path().join(d)).unwrap();
        let c = super::super::compare(
            &load("a"),
            &load("b"),
            &canary_core::compare::ShiftRules::default(),
        );
        let text = c.to_text();
        assert!(
            text.contains("e2e p50 (bound)") && text.contains("TTFT p50 (bound)"),
            "{text}"
        );
        let json = serde_json::to_value(&c).unwrap();
        assert_eq!(
            json["b"]["ends"],
            serde_json::json!({"bound": 120, "of": 120, "unknown_runs": 0})
        );
        assert_eq!(json["b"]["token_events"]["read_runs"], 1);
        // A summary from before the ends were counted does not say.
        let old = serde_json::json!({"completed": 9, "receive_timestamps": {"state": "on",
            "requests": 9, "first_token": {"kernel": 9}}});
        let t = SideTimes::of(&[run(&tmp.path().join("old"), Some(old))]);
        assert_eq!((t.ends.bound, t.ends.unknown_runs), (0, 1));
        // Its e2e rows are bounds, as `canaryd sweep` takes them: exact only on positive
        // evidence. They read as exact. Its ITLs too: each is over its request's end.
        assert_eq!(
            super::super::bounds::of(&t),
            [super::super::bounds::ITL, super::super::bounds::E2E]
        );
        let c = super::super::compare(
            &load("old"),
            &load("a"),
            &canary_core::compare::ShiftRules::default(),
        );
        let text = c.to_text();
        assert!(
            text.contains("e2e p50 (bound)")
                && !text.contains("TTFT p50 (bound)")
                && text.contains(
                    "but not e2e: A: 1 run does not say how its ends were timed; B: all 300 \
                     ends exact"
                )
                && text
                    .contains("so the e2e rows are taken as upper bounds (not known to be exact)"),
            "{text}"
        );
        // A summary from before receive timestamps were counted says nothing of any time:
        // TTFT, ITL and e2e alike.
        let older = serde_json::json!({"completed": 9});
        let t = SideTimes::of(&[run(&tmp.path().join("older"), Some(older))]);
        assert_eq!(t.token_events.unknown_runs, 1);
        assert_eq!(
            super::super::bounds::of(&t),
            [
                super::super::bounds::TTFT,
                super::super::bounds::ITL,
                super::super::bounds::E2E
            ]
        );
    }
}

#[cfg(test)]
mod itl {
    use super::tests_support::run;
    use super::*;

    // Audit (README walkthrough) finding 3: compare marked the ITL rows bounds whenever some
    // token events shared a read, though ITL is over each request's first token and end
    // alone; now by the ITLs `summary.json` counts as bounds.
    #[test]
    fn itl_rows_are_bounds_by_the_itls_counted_not_the_token_events() {
        let tmp = tempfile::tempdir().unwrap();
        let side = |dir: &str, itl_bound: u64| {
            let s = serde_json::json!({"completed": 20, "receive_timestamps": {"state": "on",
                "requests": 20, "first_token": {"kernel": 19, "kernel_bound": 1},
                "end": {"kernel": 20}, "token_events": 980, "token_events_bound": 21,
                "token_events_bound_requests": 20, "itl_requests": 19,
                "itl_bound_requests": itl_bound, "clock_map_uncertainty_max_us": 0.03}});
            SideTimes::of(&[run(&tmp.path().join(dir), Some(s))])
        };
        let (a, b) = (side("a", 0), side("b", 2));
        assert_eq!((a.itl.bound, a.itl.of), (0, 19));
        assert!(!super::super::bounds::of(&a).contains(&"inter_token_latency"));
        assert!(super::super::bounds::of(&b).contains(&"inter_token_latency"));
        let said = exactness(&a, &b, "Figures are exact");
        assert!(
            said.contains("ITL: A: all 19 ITLs exact; B: 2 of 19 ITLs are bounds"),
            "{said}"
        );
        assert!(!exactness(&a, &a, "Figures are exact").contains("ITL"));
    }
}

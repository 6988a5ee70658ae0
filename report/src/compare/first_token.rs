//! How exact a side's TTFT is. A first token's time is exact only where the kernel stamped the
//! segment that completed it (`kernel`); where the read also carried later bytes it is the last
//! segment's stamp (`kernel_bound`), and without a stamp it is canaryd's read (`userspace`):
//! both upper bounds. At a high rate most first tokens are bounds, so a comparison that calls
//! TTFT exact would overstate it. Counted from each run's `summary.json`
//! (`receive_timestamps.first_token`).

use crate::artifacts::Run;
use serde::Serialize;

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

impl FirstTokenTimes {
    /// Summed over `runs`.
    pub(super) fn of(runs: &[Run]) -> FirstTokenTimes {
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
            let counts = rx.get("first_token").and_then(|v| v.as_object());
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

    /// `692 of 800 first tokens are upper bounds` and what is not known, or `None` when every
    /// one counted is exact and every run counted them.
    pub(super) fn said(&self) -> Option<String> {
        let mut parts = Vec::new();
        if self.bound > 0 {
            parts.push(format!(
                "{} of {} first tokens are upper bounds",
                self.bound, self.of
            ));
        }
        if self.unknown_runs > 0 {
            parts.push(format!(
                "{} run{} do{} not say how {} first tokens were timed",
                self.unknown_runs,
                if self.unknown_runs == 1 { "" } else { "s" },
                if self.unknown_runs == 1 { "es" } else { "" },
                if self.unknown_runs == 1 {
                    "its"
                } else {
                    "their"
                },
            ));
        }
        (!parts.is_empty()).then(|| parts.join(", "))
    }
}

/// `exact` (`Figures are exact, from each run's records`) as a sentence, qualified for TTFT
/// when a side's first tokens are bounds or not known to be exact.
pub(super) fn exactness(a: &FirstTokenTimes, b: &FirstTokenTimes, exact: &str) -> String {
    if a.said().is_none() && b.said().is_none() {
        return format!("{exact}.");
    }
    let side = |name: &str, t: &FirstTokenTimes| {
        let said = t
            .said()
            .unwrap_or_else(|| format!("all {} first tokens exact", t.of));
        format!("{name} {said}")
    };
    let rows = if a.bound + b.bound > 0 {
        ", so the TTFT rows compare upper bounds"
    } else {
        ""
    };
    format!(
        "{exact}, but not TTFT: {}; {} (summary.json receive_timestamps.first_token: a \
         kernel_bound or userspace time is a later segment's stamp or canaryd's read, never \
         before the truth){rows}.",
        side("A:", a),
        side("B:", b)
    )
}

#[cfg(test)]
mod tests_support {
    use crate::artifacts::Run;

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
    use super::tests_support::run;
    use super::*;

    // The audit's P1: first_token {kernel: 108, kernel_bound: 692}, and compare said "Figures
    // are exact".
    #[test]
    fn first_tokens_that_are_bounds_are_counted_and_said() {
        let tmp = tempfile::tempdir().unwrap();
        let rx = |kernel: u64, bound: u64| {
            serde_json::json!({"completed": kernel + bound, "receive_timestamps": {"state": "on",
                "requests": kernel + bound,
                "first_token": {"kernel": kernel, "kernel_bound": bound}}})
        };
        let p1 = [run(&tmp.path().join("p1"), Some(rx(108, 692)))];
        let t = FirstTokenTimes::of(&p1);
        assert_eq!((t.bound, t.of, t.unknown_runs), (692, 800, 0));
        let exact = [run(&tmp.path().join("i"), Some(rx(600, 0)))];
        let e = FirstTokenTimes::of(&exact);
        let exact = "Figures are exact, from each run's records";
        assert_eq!(exactness(&e, &e, exact), format!("{exact}."));
        let said = exactness(&t, &e, exact);
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
            t.said().unwrap(),
            "40 of 40 first tokens are upper bounds, 1 run does not say how its first tokens \
             were timed"
        );
    }
}

#[cfg(test)]
mod no_state {
    use super::tests_support::run;
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
        assert_ne!(exactness(&t, &t, exact), format!("{exact}."));
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
        assert_eq!(exactness(&t, &t, exact), format!("{exact}."));
    }
}

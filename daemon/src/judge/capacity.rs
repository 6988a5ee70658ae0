//! A capacity run against its baseline: has the highest rate that meets the SLOs dropped?
//!
//! Each run's search ends in a bracket: the capacity at the SLO is at least its passing end
//! and below its failing end (as far as each probe's verdict holds). The baseline is the last
//! `baseline.runs` passing capacity runs (at least `baseline.min_runs`): its capacity is the
//! median of their passing ends, and its `±` the larger of half their median bracket width
//! and the MAD of their passing ends. The rule: a run **fails** when its failing end (the
//! capacity is below it) is at or under the baseline's lower end (capacity − ±) less
//! `capacity_tolerance` of it; a run with no failing end (every rate passed) or a bracket
//! reaching above that bar passes.

use crate::capacity::Capacity;
/// How rates print: shared with the report's status page.
pub use canary_core::rate_text::{rate, rate_at_least, rate_below};
use serde::{Deserialize, Serialize};

/// A capacity run as stored: the search's answer, its probes, and the baseline it met.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapacityRun {
    /// The search's answer.
    #[serde(flatten)]
    pub found: Capacity,
    /// Every probe in run order.
    pub probes: Vec<CapacityProbe>,
    /// The baseline it was compared with; `None` while fewer than `min_runs` passing runs
    /// exist.
    pub baseline: Option<CapacityBaseline>,
    /// The load the search ran ([`CapacityRun::load_of`]): a capacity is of one load shape,
    /// so its baseline is made of runs of the same one. Absent in runs stored before it was
    /// recorded, which then start no baseline of a run that has it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<serde_json::Value>,
    /// Set when the baseline started again because the run's load is not the newest
    /// baseline run's: `new load: baseline starts again (load.osl.mean 16 → 64)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_load: Option<String>,
}

impl CapacityRun {
    /// Notes which bracket ends rest on bounds ([`Capacity::not_established`]) from its
    /// probes' verdicts, those a signal cut short left out: the stored result says so as
    /// `sweep.json` does. A run stored before the field was kept (none said) is noted by the
    /// same rule once, as the history file it is in is opened and upgraded.
    pub fn note_bounds(&mut self) {
        self.found.note_bounds(
            self.probes
                .iter()
                .filter(|p| !p.interrupted)
                .map(|p| (p.rate, p.verdict.as_str())),
        );
    }

    /// The load of a search of `plan` (the workload's, at its first rate) against `target`
    /// (its name in the config and its settings) after `warmup_requests`: the target's URL
    /// (no query), model and API, and the load block `summary.json` states (`request_rate`,
    /// `arrival_pattern`, `isl`, `osl`, the seed, `request_count` or `benchmark_duration_s`).
    /// A reload that changes any of them compared the new load's capacity with the old one's
    /// and failed it (or passed a drop); now it starts a baseline of its own.
    pub fn load_of(
        target_name: &str,
        target: Option<&crate::config::Target>,
        plan: &canary_replay::RatePlan,
        warmup_requests: usize,
    ) -> serde_json::Value {
        serde_json::json!({
            "target": target_name,
            "url": target.map(|t| canary_core::redact_url(&t.url)),
            "model": target.map(|t| t.model.as_str()),
            "endpoint": target.map(|t| t.endpoint.operation()),
            "load": plan.info(),
            "warmup_requests": warmup_requests,
        })
    }
}

/// One probe of a search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapacityProbe {
    /// Offered rate, requests/s.
    pub rate: f64,
    /// Met the SLOs.
    pub passed: bool,
    /// Its verdict (`pass`, `fail: …`, `interrupted`).
    pub verdict: String,
    /// A signal cut it short: it says nothing about its rate, which is not in the bracket.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interrupted: bool,
}

/// The capacity of the last passing runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapacityBaseline {
    /// Passing runs it was built from.
    pub runs: usize,
    /// Median of their passing ends, requests/s.
    pub capacity: f64,
    /// The larger of half their median bracket width and the MAD of their passing ends.
    pub spread: f64,
    /// A run whose failing end is at or below this fails: `(capacity − spread) × (1 −
    /// tolerance)`.
    pub fail_at_or_below: f64,
}

impl CapacityBaseline {
    /// The baseline of `runs` (passing runs, any order); `None` below `min_runs`.
    pub fn of(runs: &[Capacity], min_runs: usize, tolerance: f64) -> Option<CapacityBaseline> {
        let ends: Vec<f64> = runs.iter().filter_map(|c| c.max_passing_rate).collect();
        if ends.is_empty() || ends.len() < min_runs {
            return None;
        }
        let capacity = median(&ends);
        let widths: Vec<f64> = runs
            .iter()
            .filter_map(|c| Some(c.min_failing_rate? - c.max_passing_rate?))
            .collect();
        let half_width = if widths.is_empty() {
            0.0
        } else {
            median(&widths) / 2.0
        };
        let mad = median(
            &ends
                .iter()
                .map(|e| (e - capacity).abs())
                .collect::<Vec<_>>(),
        );
        let spread = half_width.max(mad);
        Some(CapacityBaseline {
            runs: ends.len(),
            capacity,
            spread,
            fail_at_or_below: (capacity - spread) * (1.0 - tolerance),
        })
    }

    /// Why `found` fails against this baseline, or `None` when it passes.
    pub fn judge(&self, found: &Capacity) -> Option<String> {
        let below = found.min_failing_rate?;
        (below <= self.fail_at_or_below).then(|| {
            format!(
                "capacity at SLO {} req/s, baseline {} ± {} (below {} req/s, at or under {} \
                 req/s: the baseline's lower end less the tolerance)",
                rate_at_least(found.max_passing_rate.unwrap_or(0.0)),
                rate(self.capacity),
                rate(self.spread),
                rate_below(below),
                rate_below(self.fail_at_or_below),
            ) + &spread_unmeasured(self.runs)
        })
    }
}

/// What a baseline-only `fail` rests on when its baseline holds fewer than
/// [`crate::judge::baseline::SPREAD_MIN_RUNS`] runs: `; baseline of 1 run: run-to-run
/// variation not measured (its ± is the bracket's or 0, the tolerance alone stands for it)`.
/// The verdict stays `fail`: its bar is the user's tolerance below one figure per run, not a
/// rank test over one run's requests taken as independent.
pub fn spread_unmeasured(runs: usize) -> String {
    if runs >= crate::judge::baseline::SPREAD_MIN_RUNS {
        return String::new();
    }
    let s = if runs == 1 { "" } else { "s" };
    format!(
        "; baseline of {runs} run{s}: run-to-run variation not measured (the tolerance \
         stands for it)"
    )
}

/// The median of `v` (not empty).
pub(crate) fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n % 2 {
        1 => v[n / 2],
        _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cap(passed: Option<f64>, failed: Option<f64>) -> Capacity {
        Capacity::of(
            canary_core::RateBracket { passed, failed },
            "time_to_first_token:100".into(),
            0.95,
            "precision",
        )
    }

    #[test]
    fn a_drop_below_the_lower_end_less_the_tolerance_fails_and_says_so() {
        let base = [
            cap(Some(520.0), Some(560.0)),
            cap(Some(530.0), Some(554.0)),
            cap(Some(540.0), Some(560.0)),
        ];
        let b = CapacityBaseline::of(&base, 3, 0.1).unwrap();
        assert_eq!(b.capacity, 530.0);
        // Half the median width (24 / 2) beats the MAD (10).
        assert_eq!(b.spread, 12.0);
        assert!((b.fail_at_or_below - 518.0 * 0.9).abs() < 1e-9);
        let why = b.judge(&cap(Some(412.0), Some(440.0))).unwrap();
        assert!(
            why.starts_with("capacity at SLO 412 req/s, baseline 530 ± 12"),
            "{why}"
        );
        // Within the tolerance, or a bracket reaching above the bar: pass.
        assert_eq!(b.judge(&cap(Some(470.0), Some(500.0))), None);
        assert_eq!(b.judge(&cap(Some(300.0), None)), None);
        // Nothing passed at all, the floor failing well below: fail, capacity 0.
        let why = b.judge(&cap(None, Some(0.1))).unwrap();
        assert!(why.starts_with("capacity at SLO 0 req/s"), "{why}");
    }

    #[test]
    fn too_few_passing_runs_make_no_baseline() {
        let base = [cap(Some(100.0), Some(125.0)), cap(None, Some(0.1))];
        assert_eq!(CapacityBaseline::of(&base, 2, 0.1), None);
        let b = CapacityBaseline::of(&base, 1, 0.1).unwrap();
        assert_eq!((b.runs, b.capacity, b.spread), (1, 100.0, 12.5));
        // A fail against one run says its bar measured no run-to-run variation.
        let why = b.judge(&cap(Some(40.0), Some(50.0))).unwrap();
        assert!(
            why.ends_with(
                "; baseline of 1 run: run-to-run variation not measured (the tolerance stands \
                 for it)"
            ),
            "{why}"
        );
        let three = vec![cap(Some(100.0), Some(125.0)); 3];
        let b = CapacityBaseline::of(&three, 1, 0.1).unwrap();
        assert!(!b
            .judge(&cap(Some(40.0), Some(50.0)))
            .unwrap()
            .contains("baseline of"));
    }
}

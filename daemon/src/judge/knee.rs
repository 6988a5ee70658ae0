//! A sweep run against its baseline: has the knee moved down?
//!
//! The knee of a sweep (`canary_core::series::knee`, as `canaryd sweep` finds it) is the last
//! point that still scaled; its figure here is that point's completed requests per second
//! (measured). The baseline is the last `baseline.runs` passing sweep runs that found a knee
//! (at least `baseline.min_runs`): its knee is the median of theirs, and its `±` their MAD
//! (median absolute deviation), as the capacity rule takes the MAD of its passing ends. The
//! rule: a run **fails** when its knee is at or under the baseline's lower end (knee − ±)
//! less `knee_tolerance` of it; a run whose series did not saturate (no knee among its points,
//! none left out: the knee lies beyond its last point) passes, and says so. A run is compared
//! only when it passed its own rule first ([`crate::service::workload`]'s sweep: no point over
//! `max_error_rate`, and over rates with SLOs some rate passed).
//!
//! A knee is compared only with knees found by the same rule ([`KNEE_RULE`]): a rule change
//! moves knees by itself, and judged against the old rule's knees it would read as the server's.

use crate::capacity::Capacity;
use crate::cli::sweep::point::{Axis, LeftOut};
use crate::judge::capacity::{median, rate};
use serde::{Deserialize, Serialize};

/// The rule that finds a knee, as stored with each sweep run ([`SweepRun::knee_rule`]): 1
/// ended the series at the first point left out of the knee; 2 steps over points left out
/// and finds the knee among the others; 3 weighs a step's throughput gain against its load
/// step (under min(10 %, half the load increase), `canary_core::series::gain_floor`), where 2
/// took any gain under 10 %. Raise it whenever `canary_core::series::knee` finds other knees
/// for the same points, so the baseline starts again rather than judging the new rule's knees
/// against the old one's.
pub const KNEE_RULE: u32 = 3;

/// The rule of a run stored before the rule was recorded (rule 1 was the only one then).
fn knee_rule_before_recorded() -> u32 {
    1
}

/// `new knee rule: baseline starts again (rule 1 → 2)`: why a run found no knee baseline when
/// the passing runs of its load and grid found their knees by rule `before`.
pub fn new_rule_note(before: u32, now: u32) -> String {
    // What each change of rule did, said only for the change it describes.
    const STEPPED_OVER: &str = "points left out of the knee are stepped over, no longer the \
                                series' end";
    const LOAD_STEP: &str = "a step saturates when its throughput gains under min(10%, half \
                             its load increase), no longer under 10% alone";
    let what = match (before, now) {
        (1, 2) => format!(": {STEPPED_OVER}"),
        (1, 3) => format!(": {STEPPED_OVER}; {LOAD_STEP}"),
        (2, 3) => format!(": {LOAD_STEP}"),
        _ => String::new(),
    };
    format!("new knee rule: baseline starts again (rule {before} → {now}{what})")
}

/// A sweep run as stored: its knee, its capacity at the SLO, its points, and the baseline it
/// met.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepRun {
    /// What varied.
    pub axis: Axis,
    /// The knee, when the series saturated.
    pub knee: Option<SweepKnee>,
    /// The rule that found the knee ([`KNEE_RULE`] when this version stored the run; 1 for
    /// runs stored before it was recorded): only knees of one rule make a baseline.
    #[serde(default = "knee_rule_before_recorded")]
    pub knee_rule: u32,
    /// The points the knee left out, and why (`sweep.json`'s `left_out`): the knee is found
    /// among the others alone, so no knee with points left out is not "did not saturate".
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<LeftOut>,
    /// Set when a signal stopped the sweep (`sweep.json`'s `interrupted`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interrupted: bool,
    /// The points asked for that never ran (`sweep.json`'s `not_run`): a signal, or a point
    /// that failed, stopped the sweep before them, so no knee among the others is not "did
    /// not saturate" either.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_run: Vec<String>,
    /// Over request rates with SLOs: the highest passing rate and the lowest failing one
    /// above it (each point's verdict by the workload's SLOs and gates), as a capacity
    /// search's answer.
    pub capacity: Option<Capacity>,
    /// Every point in run order.
    pub points: Vec<SweepPointRow>,
    /// The baseline it was compared with; `None` while fewer than `min_runs` passing runs
    /// with a knee exist.
    pub baseline: Option<KneeBaseline>,
    /// Set when the baseline started again because the run's load (its grid among it) is not
    /// the newest baseline run's: `new load: baseline starts again (load.osl.mean 16 → 64)`,
    /// or its knee rule is not theirs: [`new_rule_note`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_load: Option<String>,
}

impl SweepRun {
    /// The knee in the sweep's own words: `knee at c8: 107 req/s`, or why there is none. With
    /// points left out of it, which and why (`no knee among the 2 points that are evidence;
    /// left out: c16 (…)`); with too few points that are evidence for a step, so; with points
    /// never run, which (`; not run: c32 (a signal stopped the sweep)`). "The series did not
    /// saturate" only when every point asked for ran and is evidence: a series cut short, or
    /// whose loaded points failed, never showed it. The daemon's log and its status page say
    /// it alike.
    pub fn knee_said(&self) -> String {
        let n = self.points.len();
        let (evidence, among, left) = LeftOut::knee_words(n, &self.left_out);
        let not_run = match (self.not_run.is_empty(), self.interrupted) {
            (true, _) => String::new(),
            (false, true) => format!(
                "; not run: {} (a signal stopped the sweep)",
                self.not_run.join(", ")
            ),
            (false, false) => format!(
                "; not run: {} (the sweep stopped at a point that failed)",
                self.not_run.join(", ")
            ),
        };
        let rule = canary_core::series::step_words(true, "%");
        match &self.knee {
            Some(k) => format!(
                "knee at {}: {} req/s{among}{left}{not_run}",
                k.label,
                rate(k.request_throughput)
            ),
            None if n == 0 => format!("no knee: no point ran{not_run}"),
            None if evidence < 2 => format!(
                "no knee: {evidence} of the {n} points {} evidence, and a knee is a step \
                 between two{left}{not_run}",
                if evidence == 1 { "is" } else { "are" },
            ),
            None if !left.is_empty() => format!("no knee{among}{left}{not_run}"),
            None if !not_run.is_empty() => format!("no knee among the {n} points run{not_run}"),
            None => format!("no knee: the series did not saturate (no step in load {rule})"),
        }
    }
}

/// The knee of a sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepKnee {
    /// The point's label (`c8`, `r120`, `x2`).
    pub label: String,
    /// Its axis value.
    pub value: f64,
    /// Its completed requests per second (measured): the figure compared.
    pub request_throughput: f64,
}

/// One point of a stored sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepPointRow {
    /// `c8`, `r120`, `x2`.
    pub label: String,
    /// The axis value.
    pub value: f64,
    /// Its verdict by the workload's SLOs and gates.
    pub verdict: String,
    /// Completed requests per second.
    pub request_throughput: Option<f64>,
    /// TTFT p99, ms.
    pub ttft_p99_ms: Option<f64>,
}

/// The knee of the last passing runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KneeBaseline {
    /// Passing runs with a knee it was built from.
    pub runs: usize,
    /// Median of their knees, requests/s.
    pub knee: f64,
    /// The MAD of their knees.
    pub spread: f64,
    /// A run whose knee is at or below this fails: `(knee − spread) × (1 − tolerance)`.
    pub fail_at_or_below: f64,
}

impl KneeBaseline {
    /// The baseline of the knees `knees` (requests/s, of passing runs); `None` below
    /// `min_runs`.
    pub fn of(knees: &[f64], min_runs: usize, tolerance: f64) -> Option<KneeBaseline> {
        if knees.is_empty() || knees.len() < min_runs {
            return None;
        }
        let knee = median(knees);
        let spread = median(&knees.iter().map(|k| (k - knee).abs()).collect::<Vec<_>>());
        Some(KneeBaseline {
            runs: knees.len(),
            knee,
            spread,
            fail_at_or_below: (knee - spread) * (1.0 - tolerance),
        })
    }

    /// Why `run` fails against this baseline, or `None` when it passes.
    pub fn judge(&self, run: &SweepRun) -> Option<String> {
        let k = run.knee.as_ref()?;
        (k.request_throughput <= self.fail_at_or_below).then(|| {
            format!(
                "knee at {} req/s, baseline {} ± {} (at {}; at or under {} req/s: the \
                 baseline's lower end less the tolerance)",
                rate(k.request_throughput),
                rate(self.knee),
                rate(self.spread),
                k.label,
                rate(self.fail_at_or_below),
            ) + &crate::judge::capacity::spread_unmeasured(self.runs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(knee: Option<f64>) -> SweepRun {
        SweepRun {
            axis: Axis::Concurrency,
            knee: knee.map(|k| SweepKnee {
                label: "c8".into(),
                value: 8.0,
                request_throughput: k,
            }),
            knee_rule: KNEE_RULE,
            left_out: Vec::new(),
            interrupted: false,
            not_run: Vec::new(),
            capacity: None,
            points: Vec::new(),
            baseline: None,
            new_load: None,
        }
    }

    #[test]
    fn a_knee_below_the_lower_end_less_the_tolerance_fails_and_says_so() {
        let b = KneeBaseline::of(&[260.0, 280.0, 300.0], 3, 0.1).unwrap();
        assert_eq!((b.knee, b.spread), (280.0, 20.0));
        assert!((b.fail_at_or_below - 234.0).abs() < 1e-9);
        let why = b.judge(&run(Some(140.0))).unwrap();
        assert!(
            why.starts_with("knee at 140 req/s, baseline 280 ± 20"),
            "{why}"
        );
        // Inside the tolerance: pass; no knee (did not saturate): pass.
        assert_eq!(b.judge(&run(Some(240.0))), None);
        assert_eq!(b.judge(&run(None)), None);
        assert!(b.judge(&run(Some(234.0))).is_some());
    }

    #[test]
    fn a_run_stored_before_the_rule_was_recorded_reads_as_rule_1() {
        let mut stored = serde_json::to_value(run(Some(100.0))).unwrap();
        assert_eq!(stored["knee_rule"], KNEE_RULE);
        stored.as_object_mut().unwrap().remove("knee_rule");
        let old: SweepRun = serde_json::from_value(stored).unwrap();
        assert_eq!(old.knee_rule, 1);
        assert_ne!(old.knee_rule, KNEE_RULE);
    }

    // "Did not saturate" was said of a run whose series never could show it: a point failed
    // and those after it never ran, or a signal stopped the sweep.
    #[test]
    fn a_run_says_the_series_did_not_saturate_only_when_every_point_ran_as_evidence() {
        let row = |label: &str, value| SweepPointRow {
            label: label.into(),
            value,
            verdict: "pass".into(),
            request_throughput: Some(10.0),
            ttft_p99_ms: Some(20.0),
        };
        let mut r = run(None);
        assert_eq!(r.knee_said(), "no knee: no point ran");
        r.points = vec![row("c2", 2.0), row("c8", 8.0)];
        assert!(r
            .knee_said()
            .starts_with("no knee: the series did not saturate"));
        r.not_run = vec!["c32".into()];
        assert_eq!(
            r.knee_said(),
            "no knee among the 2 points run; not run: c32 (the sweep stopped at a point that \
             failed)"
        );
        r.knee = run(Some(10.0)).knee;
        r.interrupted = true;
        assert_eq!(
            r.knee_said(),
            "knee at c8: 10 req/s; not run: c32 (a signal stopped the sweep)"
        );
    }

    // Rule 3 weighs a step's throughput against its load step: a baseline of rule 2's knees
    // (an r40 of a 2.5 % step among them) starts again, saying what changed.
    #[test]
    fn the_note_of_a_rule_change_says_what_changed() {
        assert_eq!(KNEE_RULE, 3);
        assert_eq!(
            new_rule_note(2, 3),
            "new knee rule: baseline starts again (rule 2 → 3: a step saturates when its \
             throughput gains under min(10%, half its load increase), no longer under 10% alone)"
        );
        let from_1 = new_rule_note(1, 3);
        assert!(
            from_1.contains("stepped over") && from_1.contains("half its load increase"),
            "{from_1}"
        );
        assert_eq!(
            new_rule_note(3, 4),
            "new knee rule: baseline starts again (rule 3 → 4)"
        );
    }

    #[test]
    fn too_few_runs_make_no_baseline() {
        assert_eq!(KneeBaseline::of(&[100.0], 2, 0.1), None);
        assert_eq!(KneeBaseline::of(&[], 0, 0.1), None);
        let b = KneeBaseline::of(&[100.0], 1, 0.1).unwrap();
        assert_eq!((b.runs, b.knee, b.spread), (1, 100.0, 0.0));
    }
}

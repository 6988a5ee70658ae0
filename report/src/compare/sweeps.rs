//! `canaryd compare A B` of two sweeps (`canaryd sweep` folders, issue 18: did the change move
//! the knee, the capacity at the SLO, the latency at each load?).
//!
//! Points are matched by their axis value (`c8` with `c8`); each pair is compared as two runs
//! are ([`super::compare`], one run a side: the baseline rule on every request's TTFT and e2e),
//! or, when both sweeps ran each point `--runs N` times, as two experiments are (Welch's test
//! on the runs' figures).
//! The knee is a point of each sweep's grid, found once per sweep, so its move is reported, not
//! judged against noise. A capacity search's answer is a bracket (at least the highest passing
//! rate, below the lowest failing one): two brackets that do not overlap tell the capacities
//! apart, as bounds; overlapping ones do not at that precision.

mod capacity;
mod findings;
mod knee;
mod point_said;
mod sweep;
mod table;

pub use capacity::{Bracket, CapacityComparison};
pub use knee::{KneeAt, LeftOutOfKnee};
pub use point_said::PointSaid;
pub use sweep::Sweep;

use super::Comparison;
use crate::error::ReportError;
use canary_core::compare::ShiftRules;
use serde::Serialize;

/// Two sweeps compared.
#[derive(Debug, Serialize)]
pub struct SweepComparison {
    /// Sweep A (the reference): name, folder, points.
    pub a: SweepSide,
    /// Sweep B.
    pub b: SweepSide,
    /// What varies in both.
    pub axis: String,
    /// Each axis value both sweeps ran, in order of increasing load: B's point against A's.
    pub points: Vec<PointComparison>,
    /// Axis values only one sweep ran (`A` or `B`, label).
    pub unmatched: Vec<(String, String)>,
    /// The knees, and how B's moved.
    pub knee: KneeComparison,
    /// The capacity brackets, when both sweeps searched for it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity: Option<CapacityComparison>,
}

/// One side of a sweep comparison.
#[derive(Debug, Serialize)]
pub struct SweepSide {
    /// The folder's name.
    pub name: String,
    /// The folder.
    pub dir: String,
    /// Its points.
    pub points: usize,
}

/// One axis value of both sweeps.
#[derive(Debug, Serialize)]
pub struct PointComparison {
    /// Its label (`c8`, `r100`).
    pub label: String,
    /// Its axis value.
    pub value: f64,
    /// The two points' runs compared, as `canaryd compare` compares two runs.
    pub comparison: Comparison,
    /// What A's `sweep.json` says of its point (capped, errored, its notes).
    pub a_said: PointSaid,
    /// B's.
    pub b_said: PointSaid,
    /// A's figures at this point that are not exact, as `sweep.json`'s `bounds` names them
    /// (`time_to_first_token`, `request_latency`: upper bounds; `inter_token_latency`: exact
    /// in neither direction): some of its times were a later segment's stamp or canaryd's
    /// read, or its summary does not say how they were taken. Marked `*` in the table.
    pub a_bounds: Vec<&'static str>,
    /// B's.
    pub b_bounds: Vec<&'static str>,
}

/// The two knees.
#[derive(Debug, Serialize)]
pub struct KneeComparison {
    /// A's knee.
    pub a: Option<KneeAt>,
    /// B's knee.
    pub b: Option<KneeAt>,
    /// The points A's knee left out, and why (A's `sweep.json`'s `left_out`): with no knee,
    /// too few points may have been evidence for one.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub a_left_out: Vec<LeftOutOfKnee>,
    /// B's.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub b_left_out: Vec<LeftOutOfKnee>,
    /// `earlier` (B's knee at a lower load), `later`, `same_point`, or `unknown` (a sweep
    /// without a knee).
    pub moved: &'static str,
}

/// Compares sweep `b` against sweep `a`; refused when they vary different things.
pub fn compare_sweeps(
    a: &Sweep,
    b: &Sweep,
    rules: &ShiftRules,
) -> Result<SweepComparison, ReportError> {
    if a.axis != b.axis {
        return Err(ReportError::NotComparable {
            path: b.dir.clone(),
            why: format!(
                "its sweep varies {}, {}'s varies {}: compare sweeps over one axis",
                b.axis,
                a.dir.display(),
                a.axis
            ),
        });
    }
    let mut points = Vec::new();
    let mut unmatched = Vec::new();
    let said = |s: &Sweep, label: &str| {
        s.said
            .iter()
            .find(|(l, _)| l == label)
            .map(|(_, said)| said.clone())
            .unwrap_or_default()
    };
    for (label, value, run) in &a.points {
        match b.points.iter().find(|p| p.1 == *value) {
            Some((b_label, _, other)) => {
                let comparison = super::compare(run, other, rules);
                points.push(PointComparison {
                    label: label.clone(),
                    value: *value,
                    a_bounds: super::bounds::of(&comparison.a.times),
                    b_bounds: super::bounds::of(&comparison.b.times),
                    comparison,
                    a_said: said(a, label),
                    b_said: said(b, b_label),
                })
            }
            None => unmatched.push(("A".to_string(), label.clone())),
        }
    }
    for (label, value, _) in &b.points {
        if !a.points.iter().any(|p| p.1 == *value) {
            unmatched.push(("B".to_string(), label.clone()));
        }
    }
    let moved = match (&a.knee, &b.knee) {
        (Some(x), Some(y)) if y.value < x.value => "earlier",
        (Some(x), Some(y)) if y.value > x.value => "later",
        (Some(_), Some(_)) => "same_point",
        _ => "unknown",
    };
    let capacity = match (a.capacity.clone(), b.capacity.clone()) {
        (Some(x), Some(y)) => Some(CapacityComparison::of(x, y)),
        _ => None,
    };
    let side = |s: &Sweep| SweepSide {
        name: s.name.clone(),
        dir: s.dir.display().to_string(),
        points: s.points.len(),
    };
    Ok(SweepComparison {
        a: side(a),
        b: side(b),
        axis: a.axis.clone(),
        points,
        unmatched,
        knee: KneeComparison {
            a: a.knee.clone(),
            b: b.knee.clone(),
            a_left_out: a.knee_left_out.clone(),
            b_left_out: b.knee_left_out.clone(),
            moved,
        },
        capacity,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;
    use std::path::Path;

    /// A sweep at `at` over concurrency 1 and 16: each point's run with `ok` of its 10
    /// requests completed, its `run` block with `seed`, and `point16` as sweep.json's c16.
    fn sweep_dir(at: &Path, ok: usize, seed: u64, point16: Value) {
        for (dir, users) in [("point-01-c1", 1), ("point-02-c16", 16)] {
            let d = at.join(dir);
            std::fs::create_dir_all(&d).unwrap();
            let lines: String = (0..10)
                .map(|i| {
                    let status = if users == 1 || i < ok {
                        "ok"
                    } else {
                        "timeout"
                    };
                    format!(
                        "{{\"sent_at_ms\":{i},\"ended_at_ms\":{},\"status\":\"{status}\",\
                         \"ttft_ms\":5,\"e2e_ms\":9}}\n",
                        i + 9
                    )
                })
                .collect();
            std::fs::write(d.join("records.jsonl"), lines).unwrap();
            let run = serde_json::json!({"run": {"load": {"shape": "closed_loop",
                "users": users, "random_seed": seed}, "speedup": 1.0, "prompt_seed": 0}});
            std::fs::write(d.join("summary.json"), run.to_string()).unwrap();
        }
        let mut c16 = serde_json::json!({"label": "c16", "value": 16, "dir": "point-02-c16",
            "verdict": "pass"});
        c16.as_object_mut()
            .unwrap()
            .extend(point16.as_object().unwrap().clone());
        let doc = serde_json::json!({"axis": "concurrency", "points": [
            {"label": "c1", "value": 1, "dir": "point-01-c1", "verdict": "pass"}, c16]});
        std::fs::write(at.join("sweep.json"), doc.to_string()).unwrap();
    }

    // The audit's SW1 against SW2: at c16 A completed 90 %, B was capped at 15 in flight; the
    // table showed +11.1 % req/s and the notes were only in --json.
    #[test]
    fn each_points_flags_and_notes_are_printed_and_other_requests_said_above_the_table() {
        let tmp = tempfile::tempdir().unwrap();
        let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
        let capped = "capped by the open-file limit at 15 requests in flight, below its 16 users";
        sweep_dir(
            &a,
            9,
            0,
            serde_json::json!({"notes": ["10.0% of its requests failed"]}),
        );
        sweep_dir(
            &b,
            10,
            1,
            serde_json::json!({"capped": true, "notes": [capped]}),
        );
        let load = |p: &Path| Sweep::load(p).unwrap().unwrap();
        let c = compare_sweeps(&load(&a), &load(&b), &ShiftRules::default()).unwrap();
        let text = c.to_text();
        assert!(
            text.contains("c16, A: 10.0% of its requests failed\n"),
            "{text}"
        );
        assert!(
            text.contains(&format!("c16, B [capped]: {capped}\n")),
            "{text}"
        );
        assert!(
            text.contains("c16: the latency rows are over completed requests only"),
            "{text}"
        );
        assert!(!text.contains("c1, A"), "{text}");
        // Another seed at every point: said once, above the table.
        let warn = "every point: not the same requests: the sides differ in their seed \
                    (load.random_seed 0 → 1)";
        let (at, table) = (text.find(warn), text.find("point "));
        assert!(at.is_some() && at < table, "{text}");
        let page = c.to_html();
        assert!(
            page.contains(&format!("<p class=\"warn\">{warn}")),
            "{page}"
        );
        assert!(page.contains("c16, B [capped]: capped by"), "{page}");
        let json = serde_json::to_value(&c).unwrap();
        assert_eq!(json["points"][1]["b_said"]["capped"], true, "{json:#}");
    }
}

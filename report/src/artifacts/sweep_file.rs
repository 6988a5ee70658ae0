//! `sweep.json`, `canaryd sweep`'s verdict on its points: the knee, the Pareto front, and each
//! point it left out of both (capped by the open-file limit, errored, over 5 % errors, cut
//! short by a signal) with its notes. A report of the sweep's folder shows these as written, so
//! it agrees with `sweep.json`, the sweep's table and `canaryd compare`. With
//! `--find-max-rate` it also holds the search's answer (`capacity`) and each probe's pass or
//! fail.

use crate::error::{io, ReportError};
use canary_core::EndOnBounds;
use serde::Deserialize;
use serde_json::Value;
use std::path::Path;

/// What a report takes from `sweep.json`, read tolerantly.
#[derive(Debug, Clone, Default)]
pub struct SweepFile {
    /// The knee's label (`c8`), when the sweep found one.
    pub knee: Option<String>,
    /// The Pareto-optimal points' labels.
    pub pareto: Vec<String>,
    /// The sweep's own notes (the GPU count unknown, say).
    pub notes: Vec<String>,
    /// Every point, in run order.
    pub points: Vec<SweepPoint>,
    /// The points the knee leaves out and why (`left_out`), in order of increasing load: the
    /// knee is found among the others alone.
    pub left_out: Vec<KneeLeftOut>,
    /// The capacity search's answer (`--find-max-rate`).
    pub capacity: Option<Capacity>,
}

/// A point the knee leaves out, as `sweep.json`'s `left_out` lists it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KneeLeftOut {
    /// `c16`, `r50`.
    pub label: String,
    /// Why: `cut_short`, `capped`, `error_verdict`, `target_errors`, `no_figures`.
    pub why: String,
    /// Its target error rate, for `target_errors`.
    pub error_rate: Option<f64>,
}

impl KneeLeftOut {
    /// `c16 (20.0% of its requests failed at the target)`, in the words of the sweep's own
    /// knee line; a reason this canaryd does not know is given by its name.
    pub fn said(&self) -> String {
        let why = match (self.why.as_str(), self.error_rate) {
            ("cut_short", _) => "cut short by a signal".to_string(),
            ("capped", _) => "capped by the open-file limit".to_string(),
            ("error_verdict", _) => "its verdict is an error".to_string(),
            ("target_errors", Some(r)) => {
                format!("{:.1}% of its requests failed at the target", r * 100.0)
            }
            ("target_errors", None) => "its requests failed at the target".to_string(),
            ("no_figures", _) => "no request throughput or TTFT p99".to_string(),
            (other, _) => other.to_string(),
        };
        format!("{} ({why})", self.label)
    }
}

/// A capacity search's answer (`sweep.json`'s `capacity`): the capacity at the SLOs is at
/// least `passed` and below `failed` (bounds).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Capacity {
    /// The SLOs it was searched under (aiperf's syntax).
    pub slo: String,
    /// The share of requests that had to meet them.
    pub min_good_fraction: Option<f64>,
    /// The highest offered rate that passed, requests/s.
    pub passed: Option<f64>,
    /// The lowest offered rate above it that failed.
    pub failed: Option<f64>,
    /// Why the search stopped (`precision`, `max_runs`, …).
    pub stopped_by: String,
    /// The bracket's ends not established (`capacity.not_established`): their probe's pass
    /// or fail rests on goodput judgements made on bounds and could go the other way.
    pub not_established: Vec<EndOnBounds>,
}

/// The ends `capacity` (`sweep.json`'s `capacity`) names in `not_established`; none when it
/// has no such list (a sweep written before it, or with every end established). Read
/// tolerantly, as the rest of the file: an entry this canaryd cannot read is passed over.
pub fn ends_on_bounds(capacity: &Value) -> Vec<EndOnBounds> {
    capacity
        .get("not_established")
        .and_then(Value::as_array)
        .map(|ends| {
            ends.iter()
                .filter_map(|e| EndOnBounds::deserialize(e).ok())
                .collect()
        })
        .unwrap_or_default()
}

/// One point as `sweep.json` lists it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SweepPoint {
    /// `c16`, `r50`, `x2`.
    pub label: String,
    /// Its folder beside `sweep.json`.
    pub dir: String,
    /// The load it ran at.
    pub value: Option<f64>,
    /// Its verdict (`pass`, `fail: …`, `error: …`).
    pub verdict: String,
    /// The open-file limit held it under its load.
    pub capped: bool,
    /// Whether its verdict is a pass (a capacity search's probe passed); `None` when the
    /// file does not say.
    pub passed: Option<bool>,
    /// Its figures that are not exact, as `summary.json` metric names (`sweep.json`'s
    /// `bounds`: `time_to_first_token` and `request_latency` upper bounds,
    /// `inter_token_latency` and `output_token_throughput_per_user` exact in neither
    /// direction); `None` when the file does not say.
    pub bounds: Option<Vec<String>>,
    /// Its notes: why it is left out, what the client could not offer.
    pub notes: Vec<String>,
}

impl SweepPoint {
    /// Why the sweep left the point out of the knee and the Pareto front, or `None` when it
    /// is their evidence: `sweep.json`'s own rule (`evidence()` in the daemon's sweep). It
    /// marks a capped point `capped` and says why in its notes, as it does for a point with an
    /// error verdict or over 5 % errors at the target; a point a signal cut short has only
    /// its verdict (`interrupted`, `point-03/run-1: interrupted`; before, `error: interrupted`)
    /// to say so. A
    /// point that failed a gate (`fail: error rate 0.020 above max_error_rate 0.01`) is
    /// evidence, and so is a `--runs N` point whose runs all passed before a signal stopped
    /// the rest (`error: interrupted after 2 of 3 runs`: its runs are whole).
    pub fn left_out(&self) -> Option<String> {
        let said = |needle: &str| self.notes.iter().find(|n| n.contains(needle)).cloned();
        if self.capped {
            return Some(said("capped by the open-file limit").unwrap_or_else(|| {
                "capped by the open-file limit: its figures are of a lighter load than its label"
                    .to_string()
            }));
        }
        if let Some(note) = said("left out of the knee") {
            return Some(note);
        }
        // A run a signal cut short: `interrupted`, alone or after its run's folder (an older
        // canaryd wrote `error: interrupted`, read below).
        if verdict_interrupted(&self.verdict) {
            return Some(format!("cut short by a signal ({})", self.verdict));
        }
        // Every other error verdict is noted above: what is left is a signal's (or, from a
        // canaryd that wrote no such notes, any error).
        let (reason, run) = verdict_error(&self.verdict)?;
        let whole_runs = run.is_none() && reason.starts_with("error: interrupted after ");
        (!whole_runs).then(|| format!("its verdict is an error ({})", self.verdict))
    }
}

/// Whether a point's verdict is `interrupted` (or `interrupted: …`), alone or after a run's
/// folder (`point-03/run-2: interrupted`). An older canaryd's `error: interrupted` is an error
/// verdict ([`verdict_error`]), as it was.
pub fn verdict_interrupted(verdict: &str) -> bool {
    let is = |v: &str| v == "interrupted" || v.starts_with("interrupted:");
    is(verdict)
        || verdict.split_once(": ").is_some_and(|(dir, rest)| {
            !dir.is_empty()
                && !dir.contains(char::is_whitespace)
                && !matches!(dir, "pass" | "fail" | "error")
                && is(rest)
        })
}

/// The error of a point's verdict and the run it is of (`point-03/run-2` with `--runs N`), or
/// `None` when the verdict is not an error. An error verdict is `error` or `error: …`, alone
/// or after a run's folder; `fail: error rate 0.020 above max_error_rate 0.01` is a failed
/// gate, not an error.
pub fn verdict_error(verdict: &str) -> Option<(&str, Option<&str>)> {
    let error = |v: &str| v == "error" || v.starts_with("error:");
    if error(verdict) {
        return Some((verdict, None));
    }
    let (dir, rest) = verdict.split_once(": ")?;
    let a_dir = !dir.is_empty()
        && !dir.contains(char::is_whitespace)
        && !matches!(dir, "pass" | "fail" | "error");
    (a_dir && error(rest)).then_some((rest, Some(dir)))
}

impl SweepFile {
    /// Reads `dir/sweep.json`; `Ok(None)` when there is none. A file that is not JSON is an
    /// error naming it; missing fields are absent.
    pub fn read(dir: &Path) -> Result<Option<SweepFile>, ReportError> {
        let path = dir.join("sweep.json");
        let text = match crate::artifacts::read_json_file(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(&path)(e)),
        };
        let doc: Value = serde_json::from_slice(&text).map_err(|e| ReportError::Summary {
            path: path.clone(),
            what: e.to_string(),
        })?;
        let text_at = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(String::from);
        let texts = |v: Option<&Value>| -> Vec<String> {
            v.and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(String::from)
                        .collect()
                })
                .unwrap_or_default()
        };
        let points = doc
            .get("points")
            .and_then(Value::as_array)
            .map(|points| {
                points
                    .iter()
                    .filter_map(|p| {
                        Some(SweepPoint {
                            label: text_at(p, "label")?,
                            dir: text_at(p, "dir")?,
                            value: p.get("value").and_then(Value::as_f64),
                            verdict: text_at(p, "verdict").unwrap_or_default(),
                            capped: p.get("capped").and_then(Value::as_bool) == Some(true),
                            passed: p.get("passed").and_then(Value::as_bool),
                            bounds: p.get("bounds").map(|b| texts(Some(b))),
                            notes: texts(p.get("notes")),
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        let left_out = doc
            .get("left_out")
            .and_then(Value::as_array)
            .map(|l| {
                l.iter()
                    .filter_map(|p| {
                        Some(KneeLeftOut {
                            label: text_at(p, "label")?,
                            why: text_at(p, "why").unwrap_or_default(),
                            error_rate: p.get("error_rate").and_then(Value::as_f64),
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        let capacity = doc
            .get("capacity")
            .filter(|c| c.is_object())
            .map(|c| Capacity {
                slo: text_at(c, "slo").unwrap_or_default(),
                min_good_fraction: c.get("min_good_fraction").and_then(Value::as_f64),
                passed: c.get("max_passing_rate").and_then(Value::as_f64),
                failed: c.get("min_failing_rate").and_then(Value::as_f64),
                stopped_by: text_at(c, "stopped_by").unwrap_or_default(),
                not_established: ends_on_bounds(c),
            });
        Ok(Some(SweepFile {
            knee: doc.get("knee").and_then(|k| text_at(k, "label")),
            pareto: texts(doc.get("pareto")),
            notes: texts(doc.get("notes")),
            points,
            left_out,
            capacity,
        }))
    }

    /// The point whose folder is `dir`.
    pub fn point(&self, dir: &str) -> Option<&SweepPoint> {
        self.points.iter().find(|p| p.dir == dir)
    }

    /// The load `sweep.json` gives the point in folder `dir`.
    pub fn load_of(&self, dir: &str) -> Option<f64> {
        self.point(dir)?.value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(verdict: &str, notes: &[&str]) -> SweepPoint {
        SweepPoint {
            label: "c8".into(),
            dir: "point-03".into(),
            value: Some(8.0),
            verdict: verdict.into(),
            capped: false,
            notes: notes.iter().map(|n| n.to_string()).collect(),
            ..SweepPoint::default()
        }
    }

    // The review's case: a point that failed only its error-rate gate was crossed out
    // (`contains("error")`), though sweep.json kept it as the knee's evidence (its own cut is
    // over 5 % errors).
    #[test]
    fn a_point_is_left_out_by_sweep_jsons_rule_not_by_the_word_error() {
        for kept in [
            "pass",
            "fail: error rate 0.020 above max_error_rate 0.01",
            "point-03/run-2: fail: error rate 0.020 above max_error_rate 0.01",
            "fail: ttft p99 812 ms above 500 ms; error rate 0.030 above max_error_rate 0.01",
            "error: interrupted after 2 of 3 runs",
        ] {
            assert_eq!(point(kept, &[]).left_out(), None, "{kept}");
        }
        for out in [
            "error: interrupted",
            "error: interrupted before anything was sent",
            "point-03/run-1: error: interrupted",
        ] {
            assert_eq!(
                point(out, &[]).left_out(),
                Some(format!("its verdict is an error ({out})")),
                "{out}"
            );
        }
        // A point a signal cut short, as a canaryd with the `interrupted` verdict writes it.
        for out in ["interrupted", "point-03/run-1: interrupted"] {
            assert_eq!(
                point(out, &[]).left_out(),
                Some(format!("cut short by a signal ({out})")),
                "{out}"
            );
        }
        assert_eq!(point("fail: interrupted stream", &[]).left_out(), None);
        // Errored, or over 5 % errors: sweep.json says so in its notes.
        let note = "left out of the knee and the Pareto front: 7.0% of its requests failed at                     the target (over 5%), so its figures are of the requests that were served";
        let p = point("fail: error rate 0.070 above max_error_rate 0.01", &[note]);
        assert_eq!(p.left_out().as_deref(), Some(note));
        assert_eq!(
            verdict_error("point-03/run-2: error: nothing completed"),
            Some(("error: nothing completed", Some("point-03/run-2")))
        );
        assert_eq!(verdict_error("fail: error: odd"), None);
    }

    // sweep.json as `canaryd sweep --find-max-rate` wrote it before the type of its
    // `capacity.not_established` moved to canary_core (core/tests/data/SOURCES.md), one with
    // the failing end on bounds and one with every end established (the shape from before the
    // field): both read, the first with its end, said in the one wording.
    #[test]
    fn a_sweep_json_written_before_reads_its_ends_on_bounds() {
        let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../core/tests/data");
        let read = |file: &str| {
            let dir = tempfile::tempdir().unwrap();
            std::fs::copy(data.join(file), dir.path().join("sweep.json")).unwrap();
            let s = SweepFile::read(dir.path()).unwrap().unwrap();
            s.capacity.unwrap_or_else(|| panic!("{file}: no capacity"))
        };
        let c = read("sweep_capacity_on_bounds.json");
        assert_eq!((c.passed, c.failed), (None, Some(10.0)));
        assert_eq!(c.not_established.len(), 1, "{c:?}");
        let e = &c.not_established[0];
        assert_eq!((e.end, e.rate), (canary_core::BracketEnd::Failed, 10.0));
        assert_eq!(
            EndOnBounds::all_said(&c.not_established).unwrap(),
            "not established: the fail at 10 req/s rests on bounds: up to 100.0 % may be good \
             (10 judgements rest on a bound; truly good 0 to 10 of 10)"
        );
        let c = read("sweep_capacity_established.json");
        assert_eq!((c.passed, c.failed), (Some(40.0), None));
        assert!(c.not_established.is_empty(), "{c:?}");
    }
}

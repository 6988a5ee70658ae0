//! A sweep's folder, read: its `sweep.json` (axis, points, knee and the points it left out,
//! capacity bracket) and each
//! point's run or experiment.

use super::{Bracket, KneeAt, LeftOutOfKnee, PointSaid};
use crate::error::{io, ReportError};
use crate::Experiment;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// A sweep's folder, loaded: its `sweep.json` and each point's run.
#[derive(Debug)]
pub struct Sweep {
    /// The folder.
    pub dir: PathBuf,
    /// Its name.
    pub name: String,
    /// What varies (`concurrency`, `request_rate`, `speedup`).
    pub axis: String,
    /// Each point: its label, axis value and run, in order of increasing load.
    pub points: Vec<(String, f64, Experiment)>,
    /// What `sweep.json` says of each point beyond its figures, by label.
    pub said: Vec<(String, PointSaid)>,
    /// The knee, when the sweep found one.
    pub knee: Option<KneeAt>,
    /// The points its knee left out, and why (`sweep.json`'s `left_out`).
    pub knee_left_out: Vec<LeftOutOfKnee>,
    /// The capacity search's bracket (`--find-max-rate`).
    pub capacity: Option<Bracket>,
}

impl Sweep {
    /// Loads `path` when it holds a `sweep.json`; `None` when it does not.
    pub fn load(path: &Path) -> Result<Option<Sweep>, ReportError> {
        let file = path.join("sweep.json");
        let text = match crate::artifacts::read_json_file(&file) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(&file)(e)),
        };
        let bad = |what: String| ReportError::Summary {
            path: file.clone(),
            what,
        };
        let doc: Value = serde_json::from_slice(&text).map_err(|e| bad(e.to_string()))?;
        let text_at = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(String::from);
        let axis = text_at(&doc, "axis").ok_or_else(|| bad("field \"axis\": missing".into()))?;
        let listed = doc
            .get("points")
            .and_then(Value::as_array)
            .ok_or_else(|| bad("field \"points\": missing".into()))?;
        let mut points = Vec::new();
        let mut said = Vec::new();
        let mut seen = std::collections::HashSet::new();
        // One side's records, over all its points.
        let budget = &mut crate::artifacts::records::RecordBudget::default();
        for (i, p) in listed.iter().enumerate() {
            let field = |key: &str| bad(format!("points[{i}].{key}: missing or of the wrong type"));
            let label = text_at(p, "label").ok_or_else(|| field("label"))?;
            let value = p
                .get("value")
                .and_then(Value::as_f64)
                .ok_or_else(|| field("value"))?;
            // A plain folder name beside sweep.json, never the sweep's own folder or above.
            let dir = text_at(p, "dir")
                .filter(|d| !d.is_empty() && !d.contains(['/', '\\']) && d != ".." && d != ".")
                .ok_or_else(|| field("dir"))?;
            // Once each: a folder listed twice would load twice and count twice.
            if !seen.insert(dir.clone()) {
                return Err(bad(format!("points[{i}].dir: {dir:?} is listed twice")));
            }
            // A point's folder is its run's, or with `canaryd sweep --runs N` its experiment's.
            points.push((
                label.clone(),
                value,
                Experiment::load_point(&path.join(dir), budget)?,
            ));
            said.push((label, PointSaid::of(p)));
        }
        points.sort_by(|a, b| a.1.total_cmp(&b.1));
        let knee = match doc.get("knee").filter(|k| !k.is_null()) {
            None => None,
            Some(k) => Some(KneeAt {
                label: text_at(k, "label").unwrap_or_default(),
                value: k
                    .get("value")
                    .and_then(Value::as_f64)
                    .ok_or_else(|| bad("knee.value: missing or not a number".into()))?,
                request_throughput: k.get("request_throughput").and_then(Value::as_f64),
            }),
        };
        let capacity = doc
            .get("capacity")
            .filter(|c| !c.is_null())
            .map(|c| Bracket {
                passed: c.get("max_passing_rate").and_then(Value::as_f64),
                failed: c.get("min_failing_rate").and_then(Value::as_f64),
                slo: c.get("slo").and_then(Value::as_str).map(str::to_owned),
                min_good_fraction: c.get("min_good_fraction").and_then(Value::as_f64),
                not_established: crate::artifacts::ends_on_bounds(c),
            });
        let name = crate::artifacts::folder_name(path);
        Ok(Some(Sweep {
            dir: path.to_path_buf(),
            name,
            axis,
            points,
            said,
            knee,
            knee_left_out: LeftOutOfKnee::all_of(&doc),
            capacity,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_knee_without_a_value_or_a_point_in_the_sweeps_own_folder_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let refused = |doc: &str| {
            std::fs::write(dir.path().join("sweep.json"), doc).unwrap();
            Sweep::load(dir.path()).unwrap_err().to_string()
        };
        let e = refused(r#"{"axis":"concurrency","points":[],"knee":{"label":"c8"}}"#);
        assert!(
            e.ends_with("sweep.json: knee.value: missing or not a number"),
            "{e}"
        );
        let e = refused(r#"{"axis":"concurrency","points":[],"knee":{"label":"c8","value":"8"}}"#);
        assert!(e.ends_with("knee.value: missing or not a number"), "{e}");
        let e = refused(r#"{"axis":"concurrency","points":[{"label":"c1","value":1,"dir":"."}]}"#);
        assert!(
            e.ends_with("points[0].dir: missing or of the wrong type"),
            "{e}"
        );
        // A point's folder listed twice would load (and count) twice.
        std::fs::create_dir_all(dir.path().join("p1")).unwrap();
        std::fs::write(dir.path().join("p1/records.jsonl"), "").unwrap();
        let e = refused(
            r#"{"axis":"concurrency","points":[{"label":"c1","value":1,"dir":"p1"},
                {"label":"c2","value":2,"dir":"p1"}]}"#,
        );
        assert!(e.ends_with("points[1].dir: \"p1\" is listed twice"), "{e}");
        // No knee at all is a sweep without one, not an error.
        std::fs::write(
            dir.path().join("sweep.json"),
            r#"{"axis":"concurrency","points":[],"knee":null}"#,
        )
        .unwrap();
        assert!(Sweep::load(dir.path()).unwrap().unwrap().knee.is_none());
    }
}

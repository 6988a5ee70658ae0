//! `sweep.json`, `canaryd sweep`'s verdict on its points: the knee, the Pareto front, and each
//! point it left out of both (capped by the open-file limit, errored, over 5 % errors, cut
//! short by a signal) with its notes. A report of the sweep's folder shows these as written, so
//! it agrees with `sweep.json`, the sweep's table and `canaryd compare`.

use crate::error::{io, ReportError};
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
    /// Its notes: why it is left out, what the client could not offer.
    pub notes: Vec<String>,
}

impl SweepPoint {
    /// Why the sweep left the point out of the knee and the Pareto front, or `None` when it
    /// is their evidence. `sweep.json` marks a capped point `capped` and says why in its
    /// notes, as it does for a point over 5 % errors or with an error verdict; a point a
    /// signal cut short has only its verdict (`error: interrupted`) to say so.
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
        // Every other error verdict is noted above: what is left is a signal's.
        self.verdict
            .contains("error")
            .then(|| format!("its verdict is an error ({})", self.verdict))
    }
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
                            notes: texts(p.get("notes")),
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(Some(SweepFile {
            knee: doc.get("knee").and_then(|k| text_at(k, "label")),
            pareto: texts(doc.get("pareto")),
            notes: texts(doc.get("notes")),
            points,
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

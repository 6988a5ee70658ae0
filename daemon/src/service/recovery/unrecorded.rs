//! Runs that finished, wrote their `verdict.json`, but have no history row: the history could
//! not be written when they ended (full, read-only, damaged, locked). At start they are
//! recorded from their `verdict.json` and `summary.json`, with the verdict they had: never
//! taken for runs whose process died. They keep no samples, so they join no latency baseline.

use super::{name, settled, started_unix_ms, subdirs, MAX_JSON_BYTES};
use crate::judge::baseline::Comparison;
use crate::judge::capacity::CapacityRun;
use crate::judge::knee::SweepRun;
use crate::judge::verdict::{Verdict, VerdictKind};
use crate::service::history::{History, RunFacts, RunRow};
use anyhow::{bail, Context, Result};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// Every `<artifacts_dir>/<workload>/<run-id>/` with a readable `verdict.json` and no history
/// row, oldest first.
pub fn find(artifacts_dir: &Path, history: &History) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for workload in subdirs(artifacts_dir) {
        for run in subdirs(&workload) {
            let Some(id) = name(&run).filter(|id| started_unix_ms(id).is_some()) else {
                continue;
            };
            if !settled(&run) {
                continue;
            }
            match history.get(&id) {
                Ok(None) => out.push(run),
                Ok(Some(_)) => {}
                Err(e) => tracing::warn!("looking up run {id} in the history: {e:#}"),
            }
        }
    }
    out.sort_by_key(|p| name(p));
    out
}

/// What `verdict.json` holds that the history keeps.
#[derive(Deserialize)]
struct VerdictFile {
    id: String,
    workload: String,
    target: String,
    verdict_kind: VerdictKind,
    #[serde(default)]
    reasons: Vec<String>,
    comparison: Option<Comparison>,
    capacity: Option<CapacityRun>,
    sweep: Option<SweepRun>,
    /// Absent from a verdict.json written before loads were kept: the run then joins no
    /// baseline.
    #[serde(default)]
    load: Option<serde_json::Value>,
    started_unix_ms: i64,
    /// Absent from a verdict.json written before due times were kept, and for runs not
    /// started by a cadence: the run then resumes its cadence from its start.
    #[serde(default)]
    due_unix_ms: Option<i64>,
    finished_unix_ms: i64,
}

/// The history row of the run in `dir`, from its `verdict.json` and `summary.json`.
pub fn row(dir: &Path) -> Result<RunRow> {
    let path = dir.join("verdict.json");
    let bytes = canary_files::read_small_file(&path, MAX_JSON_BYTES)
        .with_context(|| format!("reading {}", path.display()))?;
    let v: VerdictFile =
        serde_json::from_slice(&bytes).with_context(|| format!("reading {}", path.display()))?;
    let workload = dir.parent().and_then(name);
    if Some(&v.id) != name(dir).as_ref() || Some(&v.workload) != workload.as_ref() {
        bail!(
            "{}: run {} of workload {} is not this folder's",
            path.display(),
            v.id,
            v.workload
        );
    }
    Ok(RunRow {
        trend: v.comparison.as_ref().map(|c| c.trend),
        summary: summary(dir),
        run: RunFacts {
            id: v.id,
            workload: v.workload,
            target: v.target,
            started_unix_ms: v.started_unix_ms,
            due_unix_ms: v.due_unix_ms,
            finished_unix_ms: v.finished_unix_ms,
            // One an older canaryd wrote for an interrupted run (`error`, `interrupted`)
            // reads as `interrupted`.
            verdict: Verdict::read(v.verdict_kind, v.reasons),
            comparison: v.comparison,
            artifacts: dir.to_path_buf(),
            samples: None,
            capacity: v.capacity,
            sweep: v.sweep,
            load: v.load,
        },
    })
}

/// The run's `summary.json` as the history keeps it (without its header); none when it has
/// none that reads.
fn summary(dir: &Path) -> Option<serde_json::Value> {
    let bytes = canary_files::read_small_file(&dir.join("summary.json"), MAX_JSON_BYTES).ok()?;
    match serde_json::from_slice(&bytes).ok()? {
        serde_json::Value::Object(mut m) => {
            m.remove("schema_version");
            m.remove("run");
            Some(serde_json::Value::Object(m))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use crate::judge::verdict::{Verdict, VerdictKind};

    /// A `verdict.json` an older canaryd wrote for a run a signal cut short (`"verdict":
    /// "error: interrupted"`, `"verdict_kind": "error"`, `"reasons": ["interrupted"]`), recorded
    /// at a start because its history row is missing, is recorded as `interrupted`.
    #[test]
    fn an_old_interrupted_verdict_json_is_recorded_as_interrupted() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("w/20261201T001902Z-1a2b3c4d");
        std::fs::create_dir_all(&run).unwrap();
        // Every field the old `write_verdict` wrote, as it wrote them.
        let old = serde_json::json!({
            "id": "20261201T001902Z-1a2b3c4d",
            "workload": "w",
            "target": "t",
            "verdict": "error: interrupted",
            "verdict_kind": "error",
            "reasons": ["interrupted"],
            "trend": null,
            "comparison": null,
            "capacity": null,
            "sweep": null,
            "load": {"kind": "trace"},
            "context_changes": null,
            "started_unix_ms": 1_764_548_342_000_i64,
            "finished_unix_ms": 1_764_548_346_000_i64,
            "turn_wait_ms": 0.0,
        });
        std::fs::write(run.join("verdict.json"), old.to_string()).unwrap();
        let row = super::row(&run).unwrap();
        assert_eq!(row.run.verdict, Verdict::interrupted());
        assert_eq!(row.run.verdict.kind, VerdictKind::Interrupted);
        assert_eq!(row.run.verdict.to_string(), "interrupted");
    }
}

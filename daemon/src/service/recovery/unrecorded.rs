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
            verdict: Verdict {
                kind: v.verdict_kind,
                reasons: v.reasons,
            },
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

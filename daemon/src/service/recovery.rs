//! Runs whose process died (`kill -9`, the OOM killer, a power cut). Their folder holds every
//! record written so far (each is flushed as its request ends) but no summary, no verdict and
//! no history row. At start, before anything is scheduled, the daemon finds them under every
//! workload's folder, rebuilds their `summary.json` and `summary.csv` from `records.jsonl`,
//! and records them as `error: interrupted (process died)` with a `verdict.json`, like any
//! other run. They are never compared with the baseline and never join one: an error run
//! keeps no samples.

use crate::config::Config;
use crate::judge::verdict::Verdict;
use crate::service::history::{History, RunFacts};
use crate::service::run_result::RunResult;
use anyhow::{Context, Result};
use canary_replay::{RunInfo, SummaryFile};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// The verdict's reason for such a run.
pub const PROCESS_DIED: &str = "interrupted (process died)";

/// A run folder its process left without a verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct Orphan {
    /// The workload (its folder's name).
    pub workload: String,
    /// The run id (the run folder's name).
    pub id: String,
    /// The run folder.
    pub dir: PathBuf,
}

/// Every `<artifacts_dir>/<workload>/<run-id>/` holding a `records.jsonl` but neither a
/// `verdict.json` nor a history row, oldest first (run ids sort by start time). Folders that
/// cannot be read are logged and passed over.
pub fn find(artifacts_dir: &Path, history: &History) -> Vec<Orphan> {
    let mut out = Vec::new();
    for workload in subdirs(artifacts_dir) {
        for run in subdirs(&workload) {
            // verdict.json first: it settles every finished run without a database query.
            if run.join("verdict.json").exists() || !run.join("records.jsonl").is_file() {
                continue;
            }
            let (Some(w), Some(id)) = (name(&workload), name(&run)) else {
                continue;
            };
            match history.get(&id) {
                Ok(None) => out.push(Orphan {
                    workload: w,
                    id,
                    dir: run,
                }),
                Ok(Some(_)) => {}
                Err(e) => tracing::warn!("looking up run {id} in the history: {e:#}"),
            }
        }
    }
    out.sort_by(|a, b| a.id.cmp(&b.id));
    out
}

fn name(p: &Path) -> Option<String> {
    p.file_name()?.to_str().map(str::to_string)
}

/// The folders in `dir` (none when it does not exist yet).
fn subdirs(dir: &Path) -> Vec<PathBuf> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => {
            tracing::warn!(
                "looking for runs whose process died in {}: {e}",
                dir.display()
            );
            return Vec::new();
        }
    };
    entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect()
}

/// Rebuilds `o`'s summary from its records (a `summary.json` already written is kept: the
/// process died after it) and returns the run as `error: interrupted (process died)`, ready
/// to be recorded. The workload's SLOs and target are those configured now; a workload gone
/// from the config gets no SLOs and target `unknown`.
pub fn recover(config: &Config, o: &Orphan) -> Result<RunResult> {
    let workload = config.workloads.iter().find(|w| w.name == o.workload);
    let records = o.dir.join("records.jsonl");
    let summary_path = o.dir.join("summary.json");
    let summary = match std::fs::read(&summary_path) {
        Ok(bytes) => {
            let mut v: serde_json::Value = serde_json::from_slice(&bytes)
                .with_context(|| format!("reading {}", summary_path.display()))?;
            // As the history keeps a summary: what the run produced, without its header.
            if let Some(m) = v.as_object_mut() {
                m.remove("schema_version");
                m.remove("run");
            }
            v
        }
        Err(_) => rebuild(o, workload, &records)?,
    };
    let finished = std::fs::metadata(&records)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or_else(crate::service::history::now_unix_ms, |d| {
            d.as_millis() as i64
        });
    Ok(RunResult {
        run: RunFacts {
            id: o.id.clone(),
            workload: o.workload.clone(),
            target: workload.map_or_else(|| "unknown".into(), |w| w.target.clone()),
            started_unix_ms: started_unix_ms(&o.id).unwrap_or(finished).min(finished),
            finished_unix_ms: finished,
            verdict: Verdict::error(PROCESS_DIED),
            samples: None,
            comparison: None,
            capacity: None,
            sweep: None,
            artifacts: o.dir.clone(),
        },
        outcome: None,
        recovered: Some(summary),
    })
}

/// Folds `records` into `summary.json` and `summary.csv` in the run's folder; the summary
/// as the history keeps it.
fn rebuild(
    o: &Orphan,
    workload: Option<&crate::config::Workload>,
    records: &Path,
) -> Result<serde_json::Value> {
    let goodput = workload.map(|w| w.slos.clone()).unwrap_or_default();
    let folded = canary_replay::fold_records(records, goodput)?;
    let body = Rebuilt {
        interrupted: true,
        process_died: true,
        skipped_lines: folded.skipped_lines,
        summary: &folded.summary,
    };
    let how = format!(
        "the process died during this run; this summary was rebuilt from records.jsonl when \
         canaryd next started ({} records, {} unreadable lines skipped; requests never sent \
         are not known)",
        folded.records, folded.skipped_lines
    );
    let info = RunInfo::recovered(&o.id, &o.workload, how);
    canary_replay::write_summary(&o.dir, &SummaryFile::new(&info, &body), &folded.summary)?;
    tracing::warn!(
        workload = %o.workload,
        run = %o.id,
        "the process died during this run: its summary was rebuilt from {} records ({} unreadable lines skipped)",
        folded.records,
        folded.skipped_lines
    );
    Ok(serde_json::to_value(&body)?)
}

/// What `summary.json` holds for a run rebuilt from its records: the statistics, and that
/// the run was cut short by its process's death.
#[derive(Serialize)]
struct Rebuilt<'a> {
    interrupted: bool,
    process_died: bool,
    skipped_lines: u64,
    #[serde(flatten)]
    summary: &'a canary_core::RunSummary,
}

/// The start of run `id` (`20261123T112307Z-0a6a616f`), Unix ms.
fn started_unix_ms(id: &str) -> Option<i64> {
    let stamp = id.get(..16)?;
    let t = chrono::NaiveDateTime::parse_from_str(stamp, "%Y%m%dT%H%M%SZ").ok()?;
    Some(t.and_utc().timestamp_millis())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_give_their_start_time() {
        assert_eq!(
            started_unix_ms("20261123T112307Z-0a6a616f"),
            Some(1_795_432_987_000)
        );
        assert_eq!(started_unix_ms("not-a-run"), None);
        assert!(started_unix_ms(&crate::service::run_result::new_run_id()).is_some());
    }

    #[test]
    fn only_folders_with_records_and_no_verdict_or_row_are_orphans() {
        let dir = tempfile::tempdir().unwrap();
        let history = History::open(&dir.path().join("h.sqlite")).unwrap();
        let art = dir.path().join("artifacts");
        let mk = |w: &str, id: &str, files: &[&str]| {
            let d = art.join(w).join(id);
            std::fs::create_dir_all(&d).unwrap();
            for f in files {
                std::fs::write(d.join(f), "").unwrap();
            }
        };
        mk("a", "20260101T000002Z-2", &["records.jsonl"]);
        mk(
            "a",
            "20260101T000001Z-1",
            &["records.jsonl", "summary.json"],
        );
        mk(
            "a",
            "20260101T000003Z-3",
            &["records.jsonl", "verdict.json"],
        );
        mk("b", "20260101T000004Z-4", &[]);
        std::fs::write(art.join("b/stray-file"), "").unwrap();
        let found: Vec<String> = find(&art, &history).into_iter().map(|o| o.id).collect();
        assert_eq!(found, ["20260101T000001Z-1", "20260101T000002Z-2"]);
        assert!(find(&dir.path().join("none"), &history).is_empty());
    }
}

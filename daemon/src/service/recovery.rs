//! Runs whose process died (`kill -9`, the OOM killer, a power cut). Their folder holds every
//! record written so far (each is flushed as its request ends) but no summary, no verdict and
//! no history row. At start, before anything is scheduled, the daemon finds them under every
//! workload's folder, rebuilds their `summary.json` and `summary.csv` from `records.jsonl`,
//! and records them as `error: no verdict.json: the process died or its results could not be
//! written` (a full disk fails the verdict as it fails the records: the same folder is left)
//! with a `verdict.json`, like any other run, in its place by start among the runs recorded
//! since. They are never compared with the baseline and never join one: an error run
//! keeps no samples. A capacity search or a sweep keeps its records in one folder per probe or
//! point (`probe-NN-…`, `point-NN-…`): each such part without a summary gets one rebuilt, and
//! the run's summary is its last part's.

use crate::config::Config;
use crate::judge::verdict::Verdict;
use crate::service::history::{History, RunFacts};
use crate::service::run_result::RunResult;
use anyhow::{Context, Result};
use canary_replay::{RunInfo, SummaryFile};
use serde::Serialize;
use std::path::{Path, PathBuf};

pub mod unrecorded;

/// The verdict's reason for such a run.
pub const PROCESS_DIED: &str =
    "no verdict.json: the process died or its results could not be written";

/// A run folder its process left without a verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct Orphan {
    /// The workload (its folder's name).
    pub workload: String,
    /// The run id (the run folder's name).
    pub id: String,
    /// The run folder.
    pub dir: PathBuf,
    /// Why its `verdict.json` did not read, when there is one (torn: the process died
    /// writing it); `None` when there is none.
    pub unreadable_verdict: Option<String>,
}

/// Every `<artifacts_dir>/<workload>/<run-id>/` holding a `records.jsonl` (its own, or a
/// part's) but neither a readable `verdict.json` nor a history row, oldest first (run ids
/// sort by start time). Only folders named as the daemon names its runs: another tool's
/// folder put there (`canaryd replay -o ARTIFACTS/manual/x`) is not taken over, and so never
/// removed by retention. Folders that cannot be read are logged and passed over.
pub fn find(artifacts_dir: &Path, history: &History) -> Vec<Orphan> {
    let mut out = Vec::new();
    for workload in subdirs(artifacts_dir) {
        for run in subdirs(&workload) {
            // verdict.json first: it settles every finished run without a database query.
            let (Some(w), Some(id)) = (name(&workload), name(&run)) else {
                continue;
            };
            if started_unix_ms(&id).is_none() {
                continue;
            }
            let has_records = run.join("records.jsonl").is_file() || !parts(&run).is_empty();
            let unreadable_verdict = match verdict_read(&run) {
                Ok(()) => continue,
                Err(why) => why,
            };
            if !has_records {
                continue;
            }
            match history.get(&id) {
                Ok(None) => out.push(Orphan {
                    workload: w,
                    id,
                    dir: run,
                    unreadable_verdict,
                }),
                Ok(Some(_)) => {}
                Err(e) => tracing::warn!("looking up run {id} in the history: {e:#}"),
            }
        }
    }
    out.sort_by(|a, b| a.id.cmp(&b.id));
    out
}

/// The most of a run's `summary.json` or `verdict.json` read (they are tens of KB): a larger
/// file, or a device or pipe put there, is not canaryd's and is taken as damaged.
const MAX_JSON_BYTES: u64 = 64 << 20;

/// A readable `verdict.json`: the run was recorded. A torn one (the process died writing it,
/// before verdicts were written through a rename) is as good as none.
fn settled(run: &Path) -> bool {
    verdict_read(run).is_ok()
}

/// Whether the run's `verdict.json` reads; else `Err(None)` when there is none, `Err(Some(why))`
/// when there is one that does not (torn, damaged, not a file).
fn verdict_read(run: &Path) -> Result<(), Option<String>> {
    match canary_files::read_small_file(&run.join("verdict.json"), MAX_JSON_BYTES) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(None),
        Err(e) => Err(Some(e.to_string())),
        Ok(b) => match serde_json::from_slice::<serde_json::Value>(&b) {
            Ok(_) => Ok(()),
            Err(e) => Err(Some(e.to_string())),
        },
    }
}

/// The verdict's reason for a run whose `verdict.json` did not read (`why`).
fn unreadable_verdict(why: &str) -> String {
    format!(
        "unreadable verdict.json ({why}): the process died writing it or its results could not \
         be written"
    )
}

/// The folders of a run's parts, in order: a capacity search's probes (`probe-NN-<rate>rps`)
/// and a sweep's points (`point-NN-<label>`), each a run of its own, those with records.
fn parts(run: &Path) -> Vec<PathBuf> {
    let mut parts: Vec<PathBuf> = subdirs(run)
        .into_iter()
        .filter(|p| {
            name(p).is_some_and(|n| n.starts_with("probe-") || n.starts_with("point-"))
                && p.join("records.jsonl").is_file()
        })
        .collect();
    parts.sort();
    parts
}

/// A part's run id, as its run was given it: `<run id>-pNN` for `probe-NN-…` or `point-NN-…`.
fn part_id(run_id: &str, part: &Path) -> String {
    let index = name(part).and_then(|n| n.split('-').nth(1).map(str::to_string));
    format!("{run_id}-p{}", index.unwrap_or_default())
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
/// process died after it) and returns the run as `error: no verdict.json: …`, ready
/// to be recorded. A run of parts gets each part's summary rebuilt where it has none, and is
/// recorded with its last part's. The workload's SLOs and target are those configured now; a
/// workload gone from the config gets no SLOs and target `unknown`.
pub fn recover(config: &Config, o: &Orphan) -> Result<RunResult> {
    let workload = config.workloads.iter().find(|w| w.name == o.workload);
    let cause = match &o.unreadable_verdict {
        Some(why) => unreadable_verdict(why),
        None => PROCESS_DIED.to_string(),
    };
    let (summary, records) = if o.dir.join("records.jsonl").is_file() {
        (
            summary_of(&o.dir, &o.id, &o.workload, workload, &cause)?,
            o.dir.join("records.jsonl"),
        )
    } else {
        let mut last = None;
        for part in parts(&o.dir) {
            let id = part_id(&o.id, &part);
            let summary = summary_of(&part, &id, &o.workload, workload, &cause)?;
            last = Some((summary, part.join("records.jsonl")));
        }
        last.with_context(|| format!("{}: no records", o.dir.display()))?
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
            due_unix_ms: None,
            finished_unix_ms: finished,
            verdict: Verdict::error(cause),
            samples: None,
            comparison: None,
            capacity: None,
            sweep: None,
            load: None,
            artifacts: o.dir.clone(),
        },
        outcome: None,
        recovered: Some(summary),
    })
}

/// The summary of the run `id` in `dir`, as the history keeps it: its `summary.json` when the
/// run wrote one, else rebuilt from its `records.jsonl`.
fn summary_of(
    dir: &Path,
    id: &str,
    workload_name: &str,
    workload: Option<&crate::config::Workload>,
    cause: &str,
) -> Result<serde_json::Value> {
    let summary_path = dir.join("summary.json");
    let Ok(bytes) = canary_files::read_small_file(&summary_path, MAX_JSON_BYTES) else {
        return rebuild(dir, id, workload_name, workload, cause);
    };
    match serde_json::from_slice::<serde_json::Value>(&bytes) {
        Ok(serde_json::Value::Object(mut m)) => {
            // As the history keeps a summary: what the run produced, without its header.
            m.remove("schema_version");
            m.remove("run");
            Ok(serde_json::Value::Object(m))
        }
        // Torn or damaged (an older canaryd wrote it in place): the records still say what
        // was measured, and a run left without a verdict would be retried at every start.
        unreadable => {
            let why = unreadable.map_or_else(|e| e.to_string(), |_| "not an object".into());
            tracing::warn!(
                run = %id,
                "{} is unreadable ({why}): rebuilding it from records.jsonl",
                summary_path.display()
            );
            rebuild(dir, id, workload_name, workload, cause)
        }
    }
}

/// Folds the `records.jsonl` of the run `id` in `dir` into `summary.json` and `summary.csv`
/// there; the summary as the history keeps it. `cause`: the recovered run's verdict reason.
fn rebuild(
    dir: &Path,
    id: &str,
    workload_name: &str,
    workload: Option<&crate::config::Workload>,
    cause: &str,
) -> Result<serde_json::Value> {
    let goodput = workload.map(|w| w.slos.clone()).unwrap_or_default();
    let folded = canary_replay::fold_records(&dir.join("records.jsonl"), goodput)?;
    let body = Rebuilt {
        interrupted: true,
        process_died: true,
        skipped_lines: folded.skipped_lines,
        summary: &folded.summary,
    };
    let left = match cause.starts_with("unreadable") {
        true => "an unreadable verdict.json",
        false => "no verdict.json",
    };
    let how = format!(
        "the run left {left} (its process died, or its results could not be written); \
         this summary was rebuilt from records.jsonl when canaryd next started ({} records, {} unreadable lines skipped; requests never sent \
         are not known)",
        folded.records, folded.skipped_lines
    );
    let info = RunInfo::recovered(id, workload_name, how);
    canary_replay::write_summary(dir, &SummaryFile::new(&info, &body), &folded.summary)?;
    tracing::warn!(
        workload = %workload_name,
        run = %id,
        "{cause}: its summary was rebuilt from {} records ({} unreadable lines skipped)",
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
        std::fs::write(art.join("a/20260101T000003Z-3/verdict.json"), "{}").unwrap();
        // A torn verdict.json settles nothing.
        mk(
            "a",
            "20260101T000004Z-torn",
            &["records.jsonl", "verdict.json"],
        );
        // Another tool's run put among the daemon's: never taken over (retention would then
        // remove it).
        mk("manual", "base", &["records.jsonl"]);
        mk("b", "20260101T000004Z-4", &[]);
        std::fs::write(art.join("b/stray-file"), "").unwrap();
        // A capacity search's and a sweep's records are in their probes' and points' folders.
        mk("c", "20260101T000005Z-5/probe-01-50rps", &["records.jsonl"]);
        mk("c", "20260101T000006Z-6/point-02-c8", &["records.jsonl"]);
        mk("c", "20260101T000007Z-7/point-01-c2", &["records.jsonl"]);
        mk("c", "20260101T000007Z-7", &["verdict.json"]);
        std::fs::write(art.join("c/20260101T000007Z-7/verdict.json"), "{}").unwrap();
        mk("c", "20260101T000008Z-8/other-01", &["records.jsonl"]);
        mk("c", "20260101T000009Z-9/probe-01-50rps", &["summary.json"]);
        // A pipe where verdict.json should be settles nothing, and is not waited on.
        mk("d", "20260101T000010Z-10", &["records.jsonl"]);
        let fifo = art.join("d/20260101T000010Z-10/verdict.json");
        let path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
        let found: Vec<String> = find(&art, &history).into_iter().map(|o| o.id).collect();
        assert_eq!(
            found,
            [
                "20260101T000001Z-1",
                "20260101T000002Z-2",
                "20260101T000004Z-torn",
                "20260101T000005Z-5",
                "20260101T000006Z-6",
                "20260101T000010Z-10"
            ]
        );
        assert!(find(&dir.path().join("none"), &history).is_empty());
        // The torn verdict.json is said as such, not as none.
        let torn = find(&art, &history)
            .into_iter()
            .find(|o| o.id == "20260101T000004Z-torn")
            .unwrap();
        assert!(
            torn.unreadable_verdict
                .as_deref()
                .is_some_and(|why| why.contains("EOF")),
            "{torn:?}"
        );
        let none = find(&art, &history).into_iter().next().unwrap();
        assert_eq!(none.unreadable_verdict, None);
    }

    #[test]
    fn a_runs_parts_come_in_order_with_the_run_ids_their_runs_had() {
        let dir = tempfile::tempdir().unwrap();
        for part in ["point-10-c64", "point-02-c8", "point-01-c2", "point-03-c16"] {
            let d = dir.path().join(part);
            std::fs::create_dir_all(&d).unwrap();
            if part != "point-03-c16" {
                std::fs::write(d.join("records.jsonl"), "").unwrap();
            }
        }
        std::fs::write(dir.path().join("sweep.json"), "{}").unwrap();
        let ids: Vec<String> = parts(dir.path())
            .iter()
            .map(|p| part_id("20260101T000006Z-6", p))
            .collect();
        assert_eq!(
            ids,
            [
                "20260101T000006Z-6-p01",
                "20260101T000006Z-6-p02",
                "20260101T000006Z-6-p10"
            ]
        );
    }
}

//! A finished run as the history, the sinks and the status endpoint see it, and its id. Its
//! own module: the sinks read it and the workload run writes it, and neither imports the
//! other for it.

use crate::config::{Config, Workload};
use crate::judge::verdict::Verdict;
use crate::service::history::{RunFacts, RunRow};
use canary_core::RunOutcome;

/// What a run produced.
#[derive(Debug, Clone)]
pub struct RunResult {
    /// The run: id, workload, target, times, verdict, comparison, artifacts, samples.
    pub run: RunFacts,
    /// The replay's outcome, when it ran at all.
    pub outcome: Option<RunOutcome>,
    /// For a run whose process died (no outcome then): the summary rebuilt from its
    /// records at the next start, as written to its `summary.json`.
    pub recovered: Option<serde_json::Value>,
}

/// What came of one run the scheduler started.
#[derive(Debug)]
pub enum Ran {
    /// It ran, whatever its verdict (an `interrupted` one included).
    Finished(RunResult),
    /// A stop came before its first measured request was sent (its trace still loading, or
    /// its warm-up going): it never started, so it is a skip, logged and counted, not an
    /// `error` run (a restart would otherwise raise an error alert for every workload it
    /// caught loading). `result` names the run and its folder; `why` says when it stopped.
    NotStarted {
        /// The run as it was when it stopped.
        result: RunResult,
        /// When it stopped: `while loading the trace`, `during its warm-up`, `before its
        /// first request`.
        why: &'static str,
    },
}

impl Ran {
    /// The run, finished or not.
    pub fn result(&self) -> &RunResult {
        match self {
            Ran::Finished(result) | Ran::NotStarted { result, .. } => result,
        }
    }
}

impl RunResult {
    /// A run of `workload` starting now, not carried out yet (`error: not started`).
    pub fn new(config: &Config, workload: &Workload, id: String) -> RunResult {
        let started_unix_ms = crate::service::history::now_unix_ms();
        RunResult {
            run: RunFacts {
                artifacts: config.artifacts_dir.join(&workload.name).join(&id),
                id,
                workload: workload.name.clone(),
                target: workload.target.clone(),
                started_unix_ms,
                finished_unix_ms: started_unix_ms,
                due_unix_ms: None,
                verdict: Verdict::error("not started"),
                samples: None,
                comparison: None,
                capacity: None,
                sweep: None,
                load: None,
            },
            outcome: None,
            recovered: None,
        }
    }
}

/// The history row of a finished run: its facts, the trend of its comparison, and its
/// summary (the outcome's, or the one rebuilt after its process died).
impl From<&RunResult> for RunRow {
    fn from(r: &RunResult) -> RunRow {
        RunRow {
            run: r.run.clone(),
            trend: r.run.comparison.as_ref().map(|c| c.trend),
            summary: r
                .outcome
                .as_ref()
                .and_then(|o| serde_json::to_value(o).ok())
                .or_else(|| r.recovered.clone()),
        }
    }
}

/// A fresh run id: UTC start time and a random suffix, sortable and unique.
pub fn new_run_id() -> String {
    run_id_at(chrono::Utc::now())
}

/// The run id of a run started at `at`: sorts by start time to the second.
fn run_id_at(at: chrono::DateTime<chrono::Utc>) -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_i64(at.timestamp_nanos_opt().unwrap_or_default());
    format!("{}-{:08x}", at.format("%Y%m%dT%H%M%SZ"), h.finish() as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_sort_by_time_and_differ() {
        use chrono::TimeZone;
        // Start times across second, minute, day, month and year boundaries, and one year
        // with a ninth digit of seconds since the epoch: as strings they sort as in time.
        let times = [
            (2009, 9, 9, 1, 46, 39),
            (2009, 9, 9, 1, 46, 40),
            (2009, 9, 9, 1, 47, 0),
            (2026, 9, 30, 23, 59, 59),
            (2026, 10, 1, 0, 0, 0),
            (2026, 12, 31, 23, 59, 59),
            (2027, 1, 1, 0, 0, 0),
        ];
        let ids: Vec<String> = times
            .iter()
            .map(|&(y, mo, d, h, mi, s)| {
                run_id_at(chrono::Utc.with_ymd_and_hms(y, mo, d, h, mi, s).unwrap())
            })
            .collect();
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(sorted, ids);
        assert_eq!(
            ids[0].len(),
            "20261123T110512Z-3fa2c0de".len(),
            "{}",
            ids[0]
        );
        assert!(ids[4].starts_with("20261001T000000Z-"), "{}", ids[4]);
        // Two runs started in the same second still differ.
        let (a, b) = (new_run_id(), new_run_id());
        assert_ne!(a, b);
    }
}

//! Which finished run is its workload's last: the rule the status metrics (`/metrics`) and
//! the OTLP export share, and the stored runs both seed their last runs from, so that the two
//! never name different runs as a workload's last.

use crate::service::history::{History, ListedRow};
use crate::service::run_result::RunResult;

/// Each workload's last stored run: read once for `/metrics` and the OTLP export to seed
/// their last runs from. None when the history cannot be read (said once; runs go on).
pub fn stored(history: &History) -> Vec<ListedRow> {
    history.latest_per_workload().unwrap_or_else(|e| {
        tracing::warn!("the last runs are not seeded from the history: {e:#}");
        Vec::new()
    })
}

/// Whether `run` of a workload becomes its last run, given the start (Unix ms) of the last one
/// known (`None`: none yet). A run recovered at start may be older than runs recorded since
/// (the history places it by its start): it is counted, but the last run stays the newest.
/// Only a recovered one: a run that just finished is the last, whatever the wall clock did.
pub fn replaces_last(run: &RunResult, last_started_unix_ms: Option<i64>) -> bool {
    let older = run.recovered.is_some()
        && last_started_unix_ms.is_some_and(|last| last > run.run.started_unix_ms);
    !older
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::verdict::Verdict;
    use crate::service::history::RunFacts;

    fn run(started_unix_ms: i64, recovered: bool) -> RunResult {
        RunResult {
            run: RunFacts {
                id: "r".into(),
                workload: "w".into(),
                target: "t".into(),
                started_unix_ms,
                finished_unix_ms: started_unix_ms,
                due_unix_ms: None,
                verdict: Verdict::error("no verdict.json"),
                comparison: None,
                artifacts: "/a/r".into(),
                samples: None,
                capacity: None,
                sweep: None,
                load: None,
            },
            outcome: None,
            recovered: recovered.then(|| serde_json::json!({})),
        }
    }

    #[test]
    fn only_a_recovered_run_older_than_the_last_is_not_made_the_last() {
        assert!(!replaces_last(&run(1000, true), Some(2000)));
        assert!(replaces_last(&run(2000, true), Some(2000)));
        assert!(replaces_last(&run(3000, true), Some(2000)));
        assert!(replaces_last(&run(1000, true), None));
        // A run that just finished, however the wall clock stepped.
        assert!(replaces_last(&run(1000, false), Some(2000)));
    }
}

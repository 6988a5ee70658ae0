//! Run history in an embedded SQLite database: every run's verdict, baseline comparison,
//! summary and latency samples, so verdicts and baselines survive restarts. Retention (count
//! and age, per workload) deletes rows and returns the artifact folders to remove with them.

use crate::judge::baseline::{Comparison, Samples, Trend};
use crate::judge::verdict::{Verdict, VerdictKind};
use anyhow::{Context, Result};
use canary_core::{ContextBaseline, RunContext};
use rusqlite::{params, Connection, OptionalExtension};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

/// What every view of a finished run holds, declared once: [`RunRow`] (as the history
/// stores and serves it) and [`RunResult`](crate::service::run_result::RunResult) (as the
/// run produced it) each own one.
#[derive(Debug, Clone, Serialize)]
pub struct RunFacts {
    /// The run id (also its artifacts folder name).
    pub id: String,
    /// The workload.
    pub workload: String,
    /// The target's name.
    pub target: String,
    /// Wall-clock start, Unix ms.
    pub started_unix_ms: i64,
    /// Wall-clock end, Unix ms.
    pub finished_unix_ms: i64,
    /// The verdict.
    pub verdict: Verdict,
    /// Against the rolling baseline (absent for `error` runs and before it is compared).
    pub comparison: Option<Comparison>,
    /// The run's artifacts folder.
    pub artifacts: PathBuf,
    /// Per-request values kept for later baselines (completed, uninterrupted runs only; not
    /// served by the API).
    #[serde(skip)]
    pub samples: Option<Samples>,
}

/// One finished run as stored: its facts, and what the history keeps of its outcome.
#[derive(Debug, Clone, Serialize)]
pub struct RunRow {
    /// The run (its fields are served at the top level).
    #[serde(flatten)]
    pub run: RunFacts,
    /// Against the baseline (absent for `error` runs): the comparison's trend, stored in a
    /// column of its own so it reads even when the comparison does not.
    pub trend: Option<Trend>,
    /// The run's `summary.json` content (absent when the run never started).
    pub summary: Option<serde_json::Value>,
}

/// The history database.
pub struct History {
    conn: Mutex<Connection>,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    workload TEXT NOT NULL,
    target TEXT NOT NULL,
    started_unix_ms INTEGER NOT NULL,
    finished_unix_ms INTEGER NOT NULL,
    verdict TEXT NOT NULL,
    reasons TEXT NOT NULL,
    trend TEXT,
    comparison TEXT,
    summary TEXT,
    samples TEXT,
    artifacts TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_by_workload ON runs (workload, started_unix_ms);
";

const COLUMNS: &str = "id, workload, target, started_unix_ms, finished_unix_ms, verdict, \
                       reasons, trend, comparison, summary, artifacts";

impl History {
    /// Opens (creating if needed) the database at `path`.
    pub fn open(path: &Path) -> Result<History> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let conn = Connection::open(path)
            .with_context(|| format!("opening the history database {}", path.display()))?;
        // WAL: the status API reads while a run's row is written; a crash loses nothing
        // already committed.
        conn.pragma_update(None, "journal_mode", "WAL")
            .and_then(|_| conn.execute_batch(SCHEMA))
            .with_context(|| format!("preparing the history database {}", path.display()))?;
        Ok(History {
            conn: Mutex::new(conn),
        })
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stores a finished run.
    pub fn insert(&self, row: &RunRow) -> Result<()> {
        self.conn()
            .execute(
                "INSERT OR REPLACE INTO runs (id, workload, target, started_unix_ms, \
                 finished_unix_ms, verdict, reasons, trend, comparison, summary, samples, \
                 artifacts) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
                params![
                    row.run.id,
                    row.run.workload,
                    row.run.target,
                    row.run.started_unix_ms,
                    row.run.finished_unix_ms,
                    row.run.verdict.kind.as_str(),
                    json(&row.run.verdict.reasons),
                    row.trend.map(Trend::as_str),
                    row.run.comparison.as_ref().map(json),
                    row.summary.as_ref().map(json),
                    row.run.samples.as_ref().map(json),
                    row.run.artifacts.to_string_lossy(),
                ],
            )
            .context("writing the run to the history database")?;
        Ok(())
    }

    /// Samples of the last `n` passing runs of `workload`, newest first.
    pub fn baseline(&self, workload: &str, n: usize) -> Result<Vec<Samples>> {
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT samples FROM runs WHERE workload = ?1 AND verdict = 'pass' \
             AND samples IS NOT NULL ORDER BY started_unix_ms DESC LIMIT ?2",
        )?;
        let rows = stmt.query_map(params![workload, n as i64], |r| r.get::<_, String>(0))?;
        let mut out = Vec::new();
        for row in rows {
            out.push(serde_json::from_str(&row?).context("a stored sample set")?);
        }
        Ok(out)
    }

    /// The context of `workload`'s newest baseline run (the newest passing run with
    /// samples), as its stored summary recorded it; `None` when there is none, or its summary
    /// holds no context this version can read (a run from before contexts were recorded).
    pub fn baseline_context(&self, workload: &str) -> Result<Option<ContextBaseline>> {
        let conn = self.conn();
        let newest: Option<(String, Option<String>)> = conn
            .query_row(
                "SELECT id, summary FROM runs WHERE workload = ?1 AND verdict = 'pass' \
                 AND samples IS NOT NULL ORDER BY started_unix_ms DESC, id DESC LIMIT 1",
                params![workload],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        let Some((run, Some(summary))) = newest else {
            return Ok(None);
        };
        #[derive(serde::Deserialize)]
        struct Stored {
            context: Option<RunContext>,
        }
        let context = serde_json::from_str::<Stored>(&summary)
            .ok()
            .and_then(|s| s.context);
        Ok(context.map(|context| ContextBaseline { run, context }))
    }

    /// The most recent runs, newest first, optionally of one workload.
    pub fn recent(&self, workload: Option<&str>, limit: usize) -> Result<Vec<RunRow>> {
        let conn = self.conn();
        let sql = format!(
            "SELECT {COLUMNS} FROM runs WHERE (?1 IS NULL OR workload = ?1) \
             ORDER BY started_unix_ms DESC, id DESC LIMIT ?2"
        );
        let mut stmt = conn.prepare(&sql)?;
        let rows = stmt.query_map(params![workload, limit as i64], row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The latest run of each workload.
    pub fn latest_per_workload(&self) -> Result<Vec<RunRow>> {
        let conn = self.conn();
        let sql = format!(
            "SELECT {COLUMNS} FROM runs r WHERE started_unix_ms = \
             (SELECT MAX(started_unix_ms) FROM runs WHERE workload = r.workload) ORDER BY workload"
        );
        let mut stmt = conn.prepare(&sql)?;
        let rows = stmt.query_map([], row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// One run by id.
    pub fn get(&self, id: &str) -> Result<Option<RunRow>> {
        let conn = self.conn();
        let sql = format!("SELECT {COLUMNS} FROM runs WHERE id = ?1");
        Ok(conn.query_row(&sql, params![id], row).optional()?)
    }

    /// Workloads with runs stored, configured or not.
    pub fn workloads(&self) -> Result<Vec<String>> {
        let conn = self.conn();
        let mut stmt = conn.prepare("SELECT DISTINCT workload FROM runs ORDER BY workload")?;
        let rows = stmt.query_map([], |r| r.get(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Deletes `workload`'s runs beyond the newest `keep` and those older than `max_age`;
    /// returns their artifact folders.
    pub fn prune(&self, workload: &str, keep: usize, max_age: Duration) -> Result<Vec<PathBuf>> {
        let cutoff = now_unix_ms() - max_age.as_millis().min(i64::MAX as u128) as i64;
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let doomed: Vec<(String, String)> = {
            let mut stmt = tx.prepare(
                "SELECT id, artifacts FROM runs WHERE workload = ?1 AND (started_unix_ms < ?2 \
                 OR id NOT IN (SELECT id FROM runs WHERE workload = ?1 \
                 ORDER BY started_unix_ms DESC, id DESC LIMIT ?3))",
            )?;
            let rows = stmt.query_map(params![workload, cutoff, keep as i64], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })?;
            rows.collect::<Result<_, _>>()?
        };
        for (id, _) in &doomed {
            tx.execute("DELETE FROM runs WHERE id = ?1", params![id])?;
        }
        tx.commit()?;
        Ok(doomed.into_iter().map(|(_, a)| PathBuf::from(a)).collect())
    }
}

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RunRow> {
    let text = |i: usize| r.get::<_, Option<String>>(i);
    let parse = |i: usize| -> rusqlite::Result<Option<serde_json::Value>> {
        Ok(text(i)?.and_then(|s| serde_json::from_str(&s).ok()))
    };
    Ok(RunRow {
        run: RunFacts {
            id: r.get(0)?,
            workload: r.get(1)?,
            target: r.get(2)?,
            started_unix_ms: r.get(3)?,
            finished_unix_ms: r.get(4)?,
            verdict: Verdict {
                kind: VerdictKind::parse(&r.get::<_, String>(5)?).unwrap_or(VerdictKind::Error),
                reasons: parse(6)?
                    .and_then(|v| serde_json::from_value(v).ok())
                    .unwrap_or_default(),
            },
            comparison: parse(8)?.and_then(|v| serde_json::from_value(v).ok()),
            artifacts: PathBuf::from(r.get::<_, String>(10)?),
            samples: None,
        },
        trend: text(7)?.and_then(|t| Trend::ALL.into_iter().find(|x| x.as_str() == t)),
        summary: parse(9)?,
    })
}

/// Milliseconds since the Unix epoch.
pub fn now_unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn json<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).expect("history values always serialize")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(id: &str, workload: &str, started: i64, kind: VerdictKind, ttft: f64) -> RunRow {
        RunRow {
            run: RunFacts {
                id: id.into(),
                workload: workload.into(),
                target: "t".into(),
                started_unix_ms: started,
                finished_unix_ms: started + 1000,
                verdict: Verdict {
                    kind,
                    reasons: vec![],
                },
                comparison: None,
                artifacts: PathBuf::from(format!("/a/{workload}/{id}")),
                samples: Some(Samples {
                    ttft_ms: vec![ttft],
                    ..Default::default()
                }),
            },
            trend: Some(Trend::Steady),
            summary: Some(serde_json::json!({"requests": 3})),
        }
    }

    #[test]
    fn runs_and_baselines_survive_reopening_and_retention_prunes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.sqlite");
        // Runs an hour apart and age limits half an hour from any of them: the test may take
        // as long as it likes between taking `now` and pruning.
        let now = now_unix_ms();
        let hours = |h: i64| now - h * 3_600_000;
        {
            let h = History::open(&path).unwrap();
            h.insert(&run("r1", "w", hours(4), VerdictKind::Pass, 1.0))
                .unwrap();
            h.insert(&run("r2", "w", hours(3), VerdictKind::Fail, 2.0))
                .unwrap();
            h.insert(&run("r3", "w", hours(2), VerdictKind::Pass, 3.0))
                .unwrap();
            h.insert(&run("x1", "other", hours(1), VerdictKind::Error, 9.0))
                .unwrap();
        }
        let h = History::open(&path).unwrap();
        let b = h.baseline("w", 10).unwrap();
        assert_eq!(
            b.iter().map(|s| s.ttft_ms[0]).collect::<Vec<_>>(),
            vec![3.0, 1.0],
            "passing runs only, newest first"
        );
        assert_eq!(h.recent(None, 10).unwrap().len(), 4);
        let w = h.recent(Some("w"), 2).unwrap();
        assert_eq!(
            w.iter().map(|r| r.run.id.as_str()).collect::<Vec<_>>(),
            ["r3", "r2"]
        );
        let r2 = h.get("r2").unwrap().unwrap();
        assert_eq!(r2.run.verdict.kind, VerdictKind::Fail);
        assert_eq!(r2.summary.unwrap()["requests"], 3);
        assert!(h.get("nope").unwrap().is_none());
        let latest = h.latest_per_workload().unwrap();
        assert_eq!(
            latest.iter().map(|r| r.run.id.as_str()).collect::<Vec<_>>(),
            ["x1", "r3"]
        );

        // Keep 2 per workload: r1 goes. Then an age limit of 2.5 h: r2 goes too.
        let gone = h.prune("w", 2, Duration::from_secs(10 * 3600)).unwrap();
        assert_eq!(gone, [PathBuf::from("/a/w/r1")]);
        let gone = h.prune("w", 10, Duration::from_secs(9000)).unwrap();
        assert_eq!(gone, [PathBuf::from("/a/w/r2")]);
        assert_eq!(h.recent(Some("w"), 10).unwrap().len(), 1);
        assert_eq!(h.recent(Some("other"), 10).unwrap().len(), 1);
        assert_eq!(h.workloads().unwrap(), ["other", "w"]);

        // Age alone (a workload no longer configured): no count limit, old runs go.
        assert!(h
            .prune("w", usize::MAX, Duration::from_secs(10 * 3600))
            .unwrap()
            .is_empty());
        let gone = h
            .prune("other", usize::MAX, Duration::from_secs(1800))
            .unwrap();
        assert_eq!(gone, [PathBuf::from("/a/other/x1")]);
        assert_eq!(h.workloads().unwrap(), ["w"]);
    }

    /// A database as canaryd wrote it before a run's facts were declared once (and before a
    /// comparison said what changed in the run's context): the table and JSON of that
    /// version, written here by hand in that version's words, still reads.
    #[test]
    fn a_database_written_by_an_earlier_version_still_reads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.sqlite");
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(
                "CREATE TABLE runs (id TEXT PRIMARY KEY, workload TEXT NOT NULL, \
                 target TEXT NOT NULL, started_unix_ms INTEGER NOT NULL, \
                 finished_unix_ms INTEGER NOT NULL, verdict TEXT NOT NULL, \
                 reasons TEXT NOT NULL, trend TEXT, comparison TEXT, summary TEXT, \
                 samples TEXT, artifacts TEXT NOT NULL);",
            )
            .unwrap();
            conn.execute(
                "INSERT INTO runs VALUES ('20261120T101500Z-0a6a616f', 'chat', 'vllm', \
                 1795170900000, 1795170930000, 'fail', \
                 '[\"request_latency p99 812.0 ms > 500 ms\"]', 'regressed', \
                 '{\"trend\":\"regressed\",\"baseline_runs\":3,\"metrics\":{\"request_latency\":\
                 {\"baseline_median\":410.5,\"median\":612.25,\"shift_ratio\":1.49,\
                 \"shift_in_mads\":7.5,\"p_value\":0.0001,\"rank_biserial\":0.8,\
                 \"trend\":\"regressed\"}}}', \
                 '{\"requests\":40,\"completed\":40,\"errors\":0}', \
                 '{\"ttft_ms\":[12.5],\"itl_ms\":[3.0],\"e2e_ms\":[612.25]}', \
                 '/var/lib/canaryd/artifacts/chat/20261120T101500Z-0a6a616f')",
                [],
            )
            .unwrap();
        }
        let h = History::open(&path).unwrap();
        let row = h.get("20261120T101500Z-0a6a616f").unwrap().unwrap();
        assert_eq!(row.run.workload, "chat");
        assert_eq!(row.run.target, "vllm");
        assert_eq!(row.run.verdict.kind, VerdictKind::Fail);
        assert_eq!(
            row.run.verdict.reasons,
            ["request_latency p99 812.0 ms > 500 ms"]
        );
        assert_eq!(row.trend, Some(Trend::Regressed));
        let comparison = row.run.comparison.as_ref().expect("the stored comparison");
        assert_eq!(comparison.baseline_runs, 3);
        assert_eq!(comparison.metrics["request_latency"].median, 612.25);
        assert_eq!(row.summary.as_ref().unwrap()["requests"], 40);
        // Serialized as before: the run's fields at the top level, samples never.
        let served = serde_json::to_value(&row).unwrap();
        for key in ["id", "workload", "target", "verdict", "trend", "comparison"] {
            assert!(served.get(key).is_some(), "{key} missing: {served:#}");
        }
        assert!(served.get("samples").is_none() && served.get("run").is_none());
        assert_eq!(served["started_unix_ms"], 1_795_170_900_000_i64);
        // Its samples count in a baseline (a failed run's do not, so store a passing copy).
        let mut passing = row.clone();
        passing.run.id = "20261120T102000Z-1b2c3d4e".into();
        passing.run.verdict.kind = VerdictKind::Pass;
        passing.run.samples = Some(Samples {
            ttft_ms: vec![11.0],
            ..Default::default()
        });
        h.insert(&passing).unwrap();
        assert_eq!(h.baseline("chat", 10).unwrap()[0].ttft_ms, [11.0]);
    }
}

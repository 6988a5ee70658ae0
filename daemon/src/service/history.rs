//! Run history in an embedded SQLite database: every run's verdict, baseline comparison,
//! summary and latency samples, so verdicts and baselines survive restarts. Retention (count
//! and age, per workload) deletes rows and returns the artifact folders to remove with them.

use crate::capacity::Capacity;
use crate::judge::baseline::{Comparison, Samples, Trend};
use crate::judge::capacity::CapacityRun;
use crate::judge::verdict::{Verdict, VerdictKind};
use crate::service::status::SummaryBrief;
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
    /// The time its schedule had it due, Unix ms: before jitter, a wait for its turn on the
    /// target or for the previous run to end (`on_overrun = "start_when_free"`). A restart
    /// resumes the cadence from it. Absent for runs not started by a cadence (a `start_at`
    /// grid, a run recovered at start) and in rows from before it was recorded: those resume
    /// from their start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub due_unix_ms: Option<i64>,
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
    /// A capacity workload's search and the baseline it met (absent for other kinds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity: Option<CapacityRun>,
    /// A sweep workload's knee, points and the baseline it met (absent for other kinds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sweep: Option<crate::judge::knee::SweepRun>,
    /// The load the run asked for ([`crate::judge::load`]): its baseline is of runs of the
    /// same one. Absent for a run that never started, and in rows from before it was
    /// recorded (not read back: the history keys baselines by its hash).
    #[serde(skip)]
    pub load: Option<serde_json::Value>,
}

/// One finished run as stored: its facts, and what the history keeps of its outcome; its
/// summary whole (`S`: JSON), or in a listing only what a brief shows of it ([`ListedRow`]).
#[derive(Debug, Clone, Serialize)]
pub struct RunRow<S = serde_json::Value> {
    /// The run (its fields are served at the top level).
    #[serde(flatten)]
    pub run: RunFacts,
    /// Against the baseline (absent for `error` runs): the comparison's trend, stored in a
    /// column of its own so it reads even when the comparison does not.
    pub trend: Option<Trend>,
    /// The run's `summary.json` content (absent when the run never started).
    pub summary: Option<S>,
}

/// A run as listings ([`History::recent`], [`History::latest_per_workload`]) read it: of its
/// summary only what a brief shows.
pub type ListedRow = RunRow<SummaryBrief>;

/// The kind of a baseline, by what its runs store: latency samples, a capacity, a knee.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BaselineOf {
    /// The rolling latency baseline ([`History::baseline`]).
    Latency,
    /// A capacity workload's ([`History::capacity_baseline`]).
    Capacity,
    /// A sweep workload's knees ([`History::knee_baseline`]).
    Knee,
}

impl BaselineOf {
    /// The column its runs fill.
    fn column(self) -> &'static str {
        match self {
            BaselineOf::Latency => "samples",
            BaselineOf::Capacity => "capacity",
            BaselineOf::Knee => "sweep",
        }
    }
}

/// The history database.
pub struct History {
    conn: Mutex<Connection>,
    /// The database file, for messages.
    path: PathBuf,
    /// How the file was found when it opened, when it held no history
    /// ([`History::new_at_open`]).
    new_at_open: Option<&'static str>,
    /// The device and inode of the file opened: a file removed or replaced at `path` while
    /// the daemon runs is noticed before the next run is written (into a file no one would
    /// ever read again, and a second daemon could then start on the state directory).
    file_id: Mutex<Option<(u64, u64)>>,
    /// Whether an unreadable row was warned about (once per process).
    unreadable_warned: std::sync::atomic::AtomicBool,
    /// Whether re-creating a removed or replaced file failed, and was said (once until it
    /// succeeds).
    reopen_failed: std::sync::atomic::AtomicBool,
    /// The runs (and columns) whose stored samples, capacity or sweep did not read, each
    /// said once: baselines pass over them.
    unreadable_baseline_rows: Mutex<std::collections::HashSet<(String, &'static str)>>,
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

// "Newest", "latest" and "last" below mean recorded last: rowid order (the implicit one, which
// SQLite gives each insert above every row there). The wall-clock start is for display and
// age: after the clock steps back an hour, the runs recorded since start earlier than those
// before the step, and by start they would stay behind them for that hour.

/// Columns added after the first schema, each with its type: added to an older file when it
/// opens, so older history files stay readable (their rows have none).
const ADDED_COLUMNS: &[(&str, &str)] = &[
    ("capacity", "TEXT"),
    ("sweep", "TEXT"),
    ("load", "TEXT"),
    ("load_hash", "INTEGER"),
    ("due_unix_ms", "INTEGER"),
];

const COLUMNS: &str = "id, workload, target, started_unix_ms, finished_unix_ms, verdict, \
                       reasons, trend, comparison, summary, artifacts, capacity, sweep, \
                       due_unix_ms";

impl History {
    /// Opens (creating if needed) the database at `path`. A read-only file (an immutable
    /// one, a read-only mount) or one that fails SQLite's `quick_check` is refused, naming
    /// it: every run would otherwise be measured and then lost at its recording.
    pub fn open(path: &Path) -> Result<History> {
        // Before SQLite writes its header into an empty file: a file emptied (or removed)
        // beside run folders lost their rows, which the start then says.
        let new_at_open = match std::fs::metadata(path) {
            Ok(m) if m.len() == 0 => Some("was empty (0 bytes)"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some("did not exist"),
            _ => None,
        };
        let conn = connect(path)?;
        Ok(History {
            conn: Mutex::new(conn),
            new_at_open,
            path: path.to_path_buf(),
            file_id: Mutex::new(file_id(path)),
            unreadable_warned: Default::default(),
            reopen_failed: Default::default(),
            unreadable_baseline_rows: Default::default(),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How the file was found when it opened, when it held no history (`"was empty (0
    /// bytes)"`, `"did not exist"`): run folders beside it lost their rows.
    pub fn new_at_open(&self) -> Option<&'static str> {
        self.new_at_open
    }

    /// When the file at `path` is no longer the one opened (removed, or replaced), says so
    /// and opens the one there now, creating it: the runs recorded from then on are found
    /// at `path` again. The rows of the removed file are not carried over (its folders keep
    /// their `verdict.json`, and the next start records them again).
    ///
    /// When no file can be created there (the folder became read-only, or is gone), the old
    /// connection is kept: the runs recorded before are still listed and still make
    /// baselines, the run being recorded fails naming why (said once), and the next recording
    /// tries again. Should the new file then fail to open all the same, reads find an empty
    /// history (not "no such table") until a recording opens it.
    fn follow_path(&self, conn: &mut Connection) -> Result<()> {
        use std::sync::atomic::Ordering;
        let mut opened = self.file_id.lock().unwrap_or_else(|e| e.into_inner());
        let now = file_id(&self.path);
        if now.is_some() && now == *opened {
            return Ok(());
        }
        let failing = self.reopen_failed.load(Ordering::Relaxed);
        if !failing {
            let what = match now {
                None => "was removed",
                Some(_) => "was replaced",
            };
            tracing::warn!(
                "history {}: the database file {what} while canaryd ran; runs are recorded \
                 to a new one at that path from now on (the runs recorded before are not \
                 carried over)",
                self.path.display()
            );
        }
        // The old connection must go before the new one opens: its `-wal` file, named after
        // the path, must not be read as the new database's (and SQLite will not checkpoint it
        // out of WAL into a file no longer at its path). So whether a file can be created
        // there at all is asked first, and the old one kept, still serving the runs recorded
        // before, when it cannot.
        if let Err(e) = can_create(&self.path) {
            return Err(self.reopen_failed(e));
        }
        // The stand-in, until the new file opens, has the schema: reads find no runs rather
        // than fail with "no such table" until a recording reconnects.
        drop(std::mem::replace(conn, empty_history()?));
        match connect(&self.path) {
            Ok(new) => {
                *conn = new;
                *opened = file_id(&self.path);
                if failing {
                    tracing::info!(
                        "history {}: the database file is recorded to again",
                        self.path.display()
                    );
                }
                self.reopen_failed.store(false, Ordering::Relaxed);
                Ok(())
            }
            Err(e) => Err(self.reopen_failed(e)),
        }
    }

    /// Says once (until a new file opens) that the removed or replaced file could not be
    /// re-created; the error to return.
    fn reopen_failed(&self, e: anyhow::Error) -> anyhow::Error {
        if !self
            .reopen_failed
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            tracing::warn!(
                "history {}: a new database file cannot be created there ({e:#}); runs are \
                 not recorded until it can (each recording tries again); said once",
                self.path.display()
            );
        }
        e.context("re-creating the history database removed or replaced")
    }

    /// The rows that read, in order. A row that does not (a hand edit, a damaged file) is
    /// left out and said once, naming the file, instead of failing every listing with it.
    fn readable<S>(
        &self,
        rows: impl Iterator<Item = rusqlite::Result<RunRow<S>>>,
    ) -> Vec<RunRow<S>> {
        rows.filter_map(|r| match r {
            Ok(row) => Some(row),
            Err(e) => {
                if !self
                    .unreadable_warned
                    .swap(true, std::sync::atomic::Ordering::Relaxed)
                {
                    tracing::warn!(
                        "history {}: a run's row is unreadable and left out of listings ({e}); \
                         said once",
                        self.path.display()
                    );
                }
                None
            }
        })
        .collect()
    }

    /// A baseline's stored value `text` of run `id` (`what`: its column), parsed; `None`
    /// when it does not parse (a hand edit, a damaged file), said once per run, naming the
    /// file and the run: the baseline goes on with the other runs rather than failing, and
    /// every run of the workload going uncompared while that row is in its window.
    fn baseline_value<T: serde::de::DeserializeOwned>(
        &self,
        id: String,
        what: &'static str,
        text: &str,
    ) -> Option<T> {
        match serde_json::from_str(text) {
            Ok(v) => Some(v),
            Err(e) => {
                let mut warned = self
                    .unreadable_baseline_rows
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                if warned.len() < 10_000 && !warned.contains(&(id.clone(), what)) {
                    tracing::warn!(
                        "history {}: run {id}: its stored {what} is unreadable ({e}); left out \
                         of baselines (said once)",
                        self.path.display()
                    );
                    warned.insert((id, what));
                }
                None
            }
        }
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stores a finished run.
    pub fn insert(&self, row: &RunRow) -> Result<()> {
        let mut conn = self.conn();
        self.follow_path(&mut conn)?;
        insert_row(&conn, row, None).context("writing the run to the history database")?;
        Ok(())
    }

    /// Stores runs recorded late (from their `verdict.json` at a start: the history could not
    /// be written when they finished) each in its place among its workload's runs: just before
    /// the first run of its workload, in record order, that started after it (several before
    /// one run in order of start; after every row when none started after it). Inserted last,
    /// it read as the newest: listed first, its workload's latest, kept by count retention
    /// over a newer run, and the baseline's newest.
    ///
    /// One transaction, all or none: the rows from the first place taken on are numbered
    /// again once (their order kept), so the rowids grow by the runs placed, however many
    /// are placed and however often.
    pub fn insert_late(&self, rows: &[RunRow]) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let mut conn = self.conn();
        self.follow_path(&mut conn)?;
        place_late(&mut conn, rows)
            .context("placing runs recorded late among the runs that started after them")
    }

    /// Samples of the last `n` passing runs of `workload` of `load` ([`RunFacts::load`]),
    /// newest first: latencies are of one load, so a reload that changes it (`osl`, the rate,
    /// the trace) starts a baseline of its own. A run without a load (never started, or
    /// stored before loads were) joins no baseline and has none.
    pub fn baseline(
        &self,
        workload: &str,
        n: usize,
        load: Option<&serde_json::Value>,
    ) -> Result<Vec<Samples>> {
        let Some(load) = load else {
            return Ok(Vec::new());
        };
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT id, samples FROM runs WHERE workload = ?1 AND load_hash = ?2 \
             AND verdict = 'pass' AND samples IS NOT NULL ORDER BY rowid DESC",
        )?;
        let rows = stmt.query_map(params![workload, crate::judge::load::hash(load)], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
        })?;
        let mut out = Vec::new();
        for row in rows {
            if out.len() >= n {
                break;
            }
            let (id, text) = row?;
            out.extend(self.baseline_value(id, "sample set", &text));
        }
        Ok(out)
    }

    /// The capacity searches of the last `n` passing runs of `workload` made under `like`'s
    /// SLOs and good fraction and of its load (target, model, lengths, first rate, arrivals,
    /// extent: [`CapacityRun::load_of`]), newest first: a capacity is at an SLO and of one
    /// load, so one a reload changed starts a baseline of its own (the old capacities would
    /// fail every run until they aged out, or pass a drop). A stored run without a load (from
    /// before it was recorded) is of no known load and joins no baseline. Rows are read by
    /// the load's hash; those stored before the hash was (whose search still holds its load)
    /// are read too and kept when their load is the same.
    pub fn capacity_baseline(
        &self,
        workload: &str,
        n: usize,
        like: &CapacityRun,
    ) -> Result<Vec<Capacity>> {
        let (like_load, like) = (&like.load, &like.found);
        let Some(load) = like_load else {
            return Ok(Vec::new());
        };
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT id, capacity FROM runs WHERE workload = ?1 \
             AND (load_hash = ?2 OR load_hash IS NULL) AND verdict = 'pass' \
             AND capacity IS NOT NULL ORDER BY rowid DESC",
        )?;
        let rows = stmt.query_map(params![workload, crate::judge::load::hash(load)], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
        })?;
        let mut out = Vec::new();
        for row in rows {
            if out.len() >= n {
                break;
            }
            let (id, text) = row?;
            let Some(run) = self.baseline_value::<CapacityRun>(id, "capacity search", &text) else {
                continue;
            };
            let same_load = run.load.is_some() && run.load == *like_load;
            let f = run.found;
            if f.slo == like.slo && f.min_good_fraction == like.min_good_fraction && same_load {
                out.push(f);
            }
        }
        Ok(out)
    }

    /// The knees (requests/s) of the last `n` passing sweep runs of `workload` of `load`
    /// (which holds the axis and its values: [`crate::judge::load::of_sweep`]) that found
    /// one by `like`'s knee rule, newest first: another grid or another load has other knees,
    /// and so has another rule (a knee an older rule found is no baseline for this rule's). A
    /// run without a load (stored before loads were) joins no baseline.
    pub fn knee_baseline(
        &self,
        workload: &str,
        n: usize,
        like: &crate::judge::knee::SweepRun,
        load: Option<&serde_json::Value>,
    ) -> Result<Vec<f64>> {
        let mut out = Vec::new();
        self.sweeps_like(workload, like, load, |run| {
            if run.knee_rule == like.knee_rule {
                out.extend(run.knee.map(|k| k.request_throughput));
            }
            out.len() < n
        })?;
        Ok(out)
    }

    /// When a sweep run like `like` finds no knee baseline: `new knee rule: baseline starts
    /// again (rule 1 → 2 …)` if the newest passing run of its load and grid was stored by
    /// another rule; `None` when there is none, or it was by this rule. The newest run, knee
    /// or not: once one run of this rule is stored, the change has been said.
    pub fn new_knee_rule(
        &self,
        workload: &str,
        like: &crate::judge::knee::SweepRun,
        load: Option<&serde_json::Value>,
    ) -> Result<Option<String>> {
        let mut before = None;
        self.sweeps_like(workload, like, load, |run| {
            before = Some(run.knee_rule);
            false
        })?;
        Ok(before
            .filter(|&b| b != like.knee_rule)
            .map(|b| crate::judge::knee::new_rule_note(b, like.knee_rule)))
    }

    /// Hands `each` the passing sweep runs of `workload` of `load` over `like`'s axis and grid,
    /// newest first, while it returns true. The knee rule is inside the stored JSON, so it is
    /// for `each` to look at, not the query.
    fn sweeps_like(
        &self,
        workload: &str,
        like: &crate::judge::knee::SweepRun,
        load: Option<&serde_json::Value>,
        mut each: impl FnMut(crate::judge::knee::SweepRun) -> bool,
    ) -> Result<()> {
        let Some(load) = load else {
            return Ok(());
        };
        let grid = |r: &crate::judge::knee::SweepRun| -> Vec<f64> {
            r.points.iter().map(|p| p.value).collect()
        };
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT id, sweep FROM runs WHERE workload = ?1 AND load_hash = ?2 \
             AND verdict = 'pass' AND sweep IS NOT NULL ORDER BY rowid DESC",
        )?;
        let rows = stmt.query_map(params![workload, crate::judge::load::hash(load)], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
        })?;
        for row in rows {
            let (id, text) = row?;
            let Some(run) = self.baseline_value::<crate::judge::knee::SweepRun>(id, "sweep", &text)
            else {
                continue;
            };
            if run.axis != like.axis || grid(&run) != grid(like) {
                continue;
            }
            if !each(run) {
                break;
            }
        }
        Ok(())
    }

    /// When a run of `load` finds no baseline of its load: `new load: baseline starts again
    /// (what changed)` if `workload`'s newest passing run of the kind `of` was of another load
    /// (or of none recorded); `None` when there is no such run (the first runs) or it was of
    /// this load (a baseline still building, or another SLO).
    pub fn new_load(
        &self,
        workload: &str,
        of: BaselineOf,
        load: Option<&serde_json::Value>,
    ) -> Result<Option<String>> {
        let Some(load) = load else {
            return Ok(None);
        };
        let conn = self.conn();
        let sql = format!(
            "SELECT load_hash, load, capacity FROM runs WHERE workload = ?1 \
             AND verdict = 'pass' AND {} IS NOT NULL ORDER BY rowid DESC LIMIT 1",
            of.column()
        );
        type Newest = (Option<i64>, Option<String>, Option<String>);
        let newest: Option<Newest> = conn
            .query_row(&sql, params![workload], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .optional()?;
        let Some((hash, stored, capacity)) = newest else {
            return Ok(None);
        };
        if hash == Some(crate::judge::load::hash(load)) {
            return Ok(None);
        }
        // A capacity search stored before the load had a column of its own holds it.
        let before: Option<serde_json::Value> = match (stored, capacity) {
            (Some(s), _) => serde_json::from_str(&s).ok(),
            (None, Some(c)) => serde_json::from_str::<CapacityRun>(&c)
                .ok()
                .and_then(|c| c.load),
            (None, None) => None,
        };
        if before.as_ref() == Some(load) {
            return Ok(None);
        }
        Ok(Some(crate::judge::load::new_load_note(
            before.as_ref(),
            load,
        )))
    }

    /// The context of `workload`'s newest baseline run (the newest passing run with
    /// samples), as its stored summary recorded it; `None` when there is none, or its summary
    /// holds no context this version can read (a run from before contexts were recorded).
    pub fn baseline_context(&self, workload: &str) -> Result<Option<ContextBaseline>> {
        let conn = self.conn();
        let newest: Option<(String, Option<String>)> = conn
            .query_row(
                "SELECT id, summary FROM runs WHERE workload = ?1 AND verdict = 'pass' \
                 AND samples IS NOT NULL ORDER BY rowid DESC LIMIT 1",
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

    /// The most recent runs, newest first, optionally of one workload. Each row's summary
    /// holds only what a brief shows of it; [`History::get`] has all.
    pub fn recent(&self, workload: Option<&str>, limit: usize) -> Result<Vec<ListedRow>> {
        let conn = self.conn();
        let sql = format!(
            "SELECT {COLUMNS} FROM runs WHERE (?1 IS NULL OR workload = ?1) \
             ORDER BY rowid DESC LIMIT ?2"
        );
        let mut stmt = conn.prepare(&sql)?;
        let rows = stmt.query_map(params![workload, limit as i64], listed_row)?;
        Ok(self.readable(rows))
    }

    /// The latest run of each workload.
    pub fn latest_per_workload(&self) -> Result<Vec<ListedRow>> {
        let conn = self.conn();
        let mut stmt = conn.prepare(&latest_per_workload_sql())?;
        let rows = stmt.query_map([], listed_row)?;
        Ok(self.readable(rows))
    }

    /// One run by id.
    pub fn get(&self, id: &str) -> Result<Option<RunRow>> {
        let conn = self.conn();
        let sql = format!("SELECT {COLUMNS} FROM runs WHERE id = ?1");
        conn.query_row(&sql, params![id], row)
            .optional()
            .with_context(|| format!("history {}: run {id}", self.path.display()))
    }

    /// Workloads with runs stored, configured or not.
    pub fn workloads(&self) -> Result<Vec<String>> {
        let conn = self.conn();
        let mut stmt = conn.prepare("SELECT DISTINCT workload FROM runs ORDER BY workload")?;
        let rows = stmt.query_map([], |r| r.get(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Deletes `workload`'s runs beyond the newest `keep` and those older than `max_age`
    /// but for its newest `baseline` passing runs and the run `just` recorded (a run longer
    /// than the age limit is older than it as it finishes); returns their artifact folders.
    ///
    /// `take_away` is given each such run's folder while its row is still stored, and the row
    /// is deleted only when it says the folder is gone (or out of the way): a folder left
    /// behind without its row would be taken at the next start for a run whose process died,
    /// and a pruned pass come back as an `error` run.
    pub fn prune(
        &self,
        workload: &str,
        keep: usize,
        max_age: Duration,
        baseline: usize,
        just: &str,
        take_away: &mut dyn FnMut(&Path) -> bool,
    ) -> Result<Vec<PathBuf>> {
        let cutoff = now_unix_ms() - max_age.as_millis().min(i64::MAX as u128) as i64;
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let doomed: Vec<(String, String)> = {
            // Age spares the baseline's runs (the newest `baseline` passing ones with
            // something to compare: samples, a capacity, a knee): a clock far ahead at boot,
            // or a cadence slower than the age limit, would otherwise empty the baseline and
            // every later run would go uncompared.
            let mut stmt = tx.prepare(
                "SELECT id, artifacts FROM runs WHERE workload = ?1 AND ((started_unix_ms < ?2 \
                 AND id NOT IN (SELECT id FROM runs WHERE workload = ?1 AND verdict = 'pass' \
                 AND (samples IS NOT NULL OR capacity IS NOT NULL OR sweep IS NOT NULL) \
                 ORDER BY rowid DESC LIMIT ?4)) \
                 OR id NOT IN (SELECT id FROM runs WHERE workload = ?1 \
                 ORDER BY rowid DESC LIMIT ?3)) AND id != ?5",
            )?;
            let rows = stmt.query_map(
                params![workload, cutoff, keep as i64, baseline as i64, just],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?;
            rows.collect::<Result<_, _>>()?
        };
        let mut gone = Vec::new();
        for (id, artifacts) in doomed {
            let folder = PathBuf::from(artifacts);
            if take_away(&folder) {
                tx.execute("DELETE FROM runs WHERE id = ?1", params![id])?;
                gone.push(folder);
            }
        }
        tx.commit()?;
        Ok(gone)
    }
}

/// Inserts `row`, at `rowid` when given (else after every row).
fn insert_row(conn: &Connection, row: &RunRow, rowid: Option<i64>) -> rusqlite::Result<()> {
    conn.execute(
        "INSERT OR REPLACE INTO runs (rowid, id, workload, target, started_unix_ms, \
             finished_unix_ms, verdict, reasons, trend, comparison, summary, samples, \
             artifacts, capacity, sweep, load, load_hash, due_unix_ms) VALUES (?17, ?1, ?2, \
             ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?18)",
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
            row.run.capacity.as_ref().map(json),
            row.run.sweep.as_ref().map(json),
            row.run.load.as_ref().map(json),
            row.run.load.as_ref().map(crate::judge::load::hash),
            rowid,
            row.run.due_unix_ms,
        ],
    )?;
    Ok(())
}

/// [`History::insert_late`]'s work, in one transaction. The rows in record order, with the
/// late ones merged in, are numbered again from the first place a late one takes: each row
/// from there moves once, to a rowid below every other while the numbers are given out (no
/// two rows ever share one), then to its place.
fn place_late(conn: &mut Connection, late: &[RunRow]) -> rusqlite::Result<()> {
    let tx = conn.transaction()?;
    // A run stored already (none should be) is placed again, not kept twice.
    for row in late {
        tx.execute("DELETE FROM runs WHERE id = ?1", params![row.run.id])?;
    }
    let stored: Vec<(i64, String, i64)> = {
        let mut stmt =
            tx.prepare("SELECT rowid, workload, started_unix_ms FROM runs ORDER BY rowid")?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    // Each late run's place: before the first stored row of its workload that started after
    // it (its index in `stored`), or after them all.
    let mut placed: Vec<(usize, &RunRow)> = late
        .iter()
        .map(|row| {
            let before = stored
                .iter()
                .position(|(_, w, s)| *w == row.run.workload && *s > row.run.started_unix_ms)
                .unwrap_or(stored.len());
            (before, row)
        })
        .collect();
    placed.sort_by(|(a, x), (b, y)| {
        (a, x.run.started_unix_ms, &x.run.id).cmp(&(b, y.run.started_unix_ms, &y.run.id))
    });
    let first = placed[0].0;
    // The rowids from the first place on: from that stored row's (or past every row).
    let base = match stored.get(first) {
        Some((rowid, _, _)) => Some(*rowid),
        None => stored
            .last()
            .map_or(Some(1), |(rowid, _, _)| rowid.checked_add(1)),
    };
    let tail = &stored[first..];
    // Out of the way first: below every rowid there is (and below 0).
    let lowest: i64 = tx.query_row("SELECT MIN(IFNULL(MIN(rowid), 0), 0) FROM runs", [], |r| {
        r.get(0)
    })?;
    // A history whose rowids reach the ends of their range (the doubling of an earlier
    // version's placement left some near 2^63) is refused, never wrapped around.
    let room = (tail.len() + late.len()) as i64;
    let base = match base.filter(|b| b.checked_add(room).is_some() && lowest > i64::MIN + room) {
        Some(base) => base,
        None => {
            return Err(rusqlite::Error::ToSqlConversionFailure(
                "the history's row numbers are at the end of their range (an earlier version \
                 misnumbered runs recorded late): move the history away to start a new one"
                    .into(),
            ))
        }
    };
    {
        let mut moved = tx.prepare("UPDATE runs SET rowid = ?1 WHERE rowid = ?2")?;
        for (i, (rowid, _, _)) in tail.iter().enumerate() {
            moved.execute(params![lowest - 1 - i as i64, rowid])?;
        }
    }
    // Then each to its place, the late runs between them.
    let mut moved = tx.prepare("UPDATE runs SET rowid = ?1 WHERE rowid = ?2")?;
    let mut late_at = placed.iter().peekable();
    let mut next = base;
    for i in 0..=tail.len() {
        while let Some((_, row)) = late_at.next_if(|(at, _)| *at == first + i) {
            insert_row(&tx, row, Some(next))?;
            next += 1;
        }
        if i < tail.len() {
            moved.execute(params![next, lowest - 1 - i as i64])?;
            next += 1;
        }
    }
    drop(moved);
    tx.commit()
}

/// The latest run of each workload: the largest rowid of each, found in one pass over the
/// workload index (a subquery per row, correlated with its workload, made the start
/// quadratic in a workload's runs).
fn latest_per_workload_sql() -> String {
    format!(
        "SELECT {COLUMNS} FROM runs WHERE rowid IN \
         (SELECT MAX(rowid) FROM runs GROUP BY workload) ORDER BY workload"
    )
}

/// A run as stored, its whole summary read ([`History::get`]: one run's endpoint).
fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RunRow> {
    read_row(r, |text| serde_json::from_str(text).ok())
}

/// A run as listings read it: of its summary (tens of KB: timeslices, per-URL figures,
/// error causes) only what a brief shows, the rest skipped unparsed.
fn listed_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<ListedRow> {
    read_row(r, SummaryBrief::read)
}

fn read_row<S>(
    r: &rusqlite::Row<'_>,
    summary: impl Fn(&str) -> Option<S>,
) -> rusqlite::Result<RunRow<S>> {
    let text = |i: usize| r.get::<_, Option<String>>(i);
    fn parse<T: serde::de::DeserializeOwned>(text: Option<String>) -> Option<T> {
        text.and_then(|s| serde_json::from_str(&s).ok())
    }
    Ok(RunRow {
        run: RunFacts {
            id: r.get(0)?,
            workload: r.get(1)?,
            target: r.get(2)?,
            started_unix_ms: r.get(3)?,
            due_unix_ms: r.get(13)?,
            finished_unix_ms: r.get(4)?,
            // A row an older canaryd wrote for an interrupted run (`error`, `interrupted`)
            // reads as `interrupted`.
            verdict: Verdict::read(
                VerdictKind::parse(&r.get::<_, String>(5)?).unwrap_or(VerdictKind::Error),
                parse(text(6)?).unwrap_or_default(),
            ),
            comparison: parse(text(8)?),
            artifacts: PathBuf::from(r.get::<_, String>(10)?),
            samples: None,
            // As stored: a search stored before its ends on bounds were kept had them noted
            // once, as its file was upgraded ([`note_capacity_ends`]).
            capacity: parse(text(11)?),
            sweep: parse(text(12)?),
            load: None,
        },
        trend: text(7)?.and_then(|t| Trend::ALL.into_iter().find(|x| x.as_str() == t)),
        summary: text(9)?.and_then(|s| summary(&s)),
    })
}

/// Opens the database at `path` (creating it and its folder), refuses a read-only or a
/// damaged one, and prepares it: WAL, the schema, the columns added since.
fn connect(path: &Path) -> Result<Connection> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let conn = Connection::open(path).map_err(|e| not_opened(path, e))?;
    check_writable_and_sound(&conn, path)?;
    // WAL: the status API reads while a run's row is written; a crash loses nothing
    // already committed.
    conn.pragma_update(None, "journal_mode", "WAL")
        .and_then(|_| conn.execute_batch(SCHEMA))
        .and_then(|_| add_columns(&conn))
        .and_then(|_| note_capacity_ends(&conn))
        .map_err(|e| not_opened(path, e))?;
    Ok(conn)
}

/// Whether a file can be created (or written) at `path`: its folder made and the file opened
/// for writing, created empty when there is none (SQLite takes an empty file for a new
/// database).
fn can_create(path: &Path) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    Ok(())
}

/// An empty history in memory, with the schema.
fn empty_history() -> rusqlite::Result<Connection> {
    let conn = Connection::open_in_memory()?;
    conn.execute_batch(SCHEMA)?;
    add_columns(&conn)?;
    Ok(conn)
}

/// SQLite opens a file it cannot write read-only, without a word, and a damaged one opens
/// too: both then fail every run's recording. Refused here, at start, naming the file.
fn check_writable_and_sound(conn: &Connection, path: &Path) -> Result<()> {
    if conn.is_readonly(rusqlite::MAIN_DB).unwrap_or(false) {
        anyhow::bail!(
            "the history database {} cannot be written (read-only: its permissions, an \
             immutable attribute or a read-only mount): every run would be measured and then \
             not recorded; make it writable, or move it away to start a new history",
            path.display()
        );
    }
    // Only what quick_check finds, or SQLite's own "corrupt" and "not a database", is
    // damage: any other error (a full disk leaves SQLite unable to create its -wal and -shm
    // files beside an intact file) is the file system's, and moving the file away would lose
    // every baseline for nothing.
    let problems: Vec<String> = conn
        .prepare("PRAGMA quick_check")
        .and_then(|mut stmt| {
            stmt.query_map([], |r| r.get::<_, String>(0))
                .and_then(|rows| rows.collect())
        })
        .map_err(|e| not_opened(path, e))?;
    match problems.as_slice() {
        [ok] if ok == "ok" => Ok(()),
        _ => Err(damaged(
            path,
            &format!(
                "quick_check: {}",
                problems
                    .iter()
                    .take(3)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        )),
    }
}

/// The error for a history SQLite could not open or read: damaged when SQLite says so,
/// otherwise the file system's error ([`open_error::cannot_open`]).
fn not_opened(path: &Path, e: rusqlite::Error) -> anyhow::Error {
    match open_error::is_damage(&e) {
        true => damaged(path, &e.to_string()),
        false => open_error::cannot_open(path, &e),
    }
}

/// The error for a damaged history: moving it away is the cure.
fn damaged(path: &Path, why: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "the history database {} is damaged ({why}); move it away to start a new history (the \
         run folders keep their verdict.json files)",
        path.display()
    )
}

/// The device and inode of the file at `path`; `None` when there is none.
fn file_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Adds the [`ADDED_COLUMNS`] an older file lacks.
fn add_columns(conn: &Connection) -> rusqlite::Result<()> {
    let have: Vec<String> = conn
        .prepare("SELECT name FROM pragma_table_info('runs')")?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    for (name, kind) in ADDED_COLUMNS {
        if !have.iter().any(|h| h == name) {
            conn.execute_batch(&format!("ALTER TABLE runs ADD COLUMN {name} {kind}"))?;
        }
    }
    // Baselines are read by load: their N newest runs of one, in rowid order, from the index.
    conn.execute_batch("CREATE INDEX IF NOT EXISTS runs_by_load ON runs (workload, load_hash)")
}

/// The upgrades of its rows a history file has had, by name: each is made at the first open
/// that knows it, and not again.
const UPGRADES_SCHEMA: &str = "CREATE TABLE IF NOT EXISTS upgrades (name TEXT PRIMARY KEY)";

/// Notes the bracket ends on bounds ([`CapacityRun::note_bounds`]) of the capacity runs stored
/// before they were kept (their JSON has no `not_established`), by the rule a new run's are
/// noted, and stores them: once per file, so a read takes each row as stored. A row that
/// does not parse, or whose ends all hold, is left as it is.
fn note_capacity_ends(conn: &Connection) -> rusqlite::Result<()> {
    const NAME: &str = "capacity_not_established";
    conn.execute_batch(UPGRADES_SCHEMA)?;
    let done: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM upgrades WHERE name = ?1)",
        [NAME],
        |r| r.get(0),
    )?;
    if done {
        return Ok(());
    }
    let tx = conn.unchecked_transaction()?;
    let rows: Vec<(i64, String)> = tx
        .prepare(
            "SELECT rowid, capacity FROM runs WHERE capacity IS NOT NULL \
             AND instr(capacity, '\"not_established\"') = 0",
        )?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    for (rowid, text) in rows {
        let Ok(mut c) = serde_json::from_str::<CapacityRun>(&text) else {
            continue;
        };
        c.note_bounds();
        if !c.found.not_established.is_empty() {
            tx.execute(
                "UPDATE runs SET capacity = ?1 WHERE rowid = ?2",
                params![json(&c), rowid],
            )?;
        }
    }
    // OR IGNORE: another process that opened the file at the same moment may have noted it.
    tx.execute("INSERT OR IGNORE INTO upgrades (name) VALUES (?1)", [NAME])?;
    tx.commit()
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

pub(crate) mod open_error;

#[cfg(test)]
mod tests;

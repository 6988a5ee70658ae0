//! One side of `canaryd compare`: a run's folder, or the runs of a `--runs N` experiment,
//! whose `summary.json` lists them (`repeats.per_run`).

use crate::artifacts::records::RecordBudget;
use crate::artifacts::{Run, Summary};
use crate::error::ReportError;
use serde::Serialize;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// A run, or the complete runs of an experiment, loaded.
#[derive(Debug)]
pub struct Experiment {
    /// The folder named on the command line.
    pub dir: PathBuf,
    /// What to call it: the run's id, or the experiment folder's name.
    pub name: String,
    /// Its runs (one for a run's folder), in the experiment's order.
    pub runs: Vec<Run>,
    /// The runs its summary lists that are not in `runs` (cut short by a signal, or left out
    /// of its own estimates), in its order: a comparison says so, since every figure of this
    /// side is over the other runs.
    pub left_out: Vec<LeftOutRun>,
}

/// A run of an experiment left out of its figures, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LeftOutRun {
    /// Its folder, as the experiment's summary names it.
    pub dir: String,
    /// Why: the summary's `left_out` (its error), or `cut short by a signal`.
    pub why: String,
}

impl Experiment {
    /// One run on its own.
    pub fn single(run: Run) -> Experiment {
        Experiment {
            dir: run.dir.clone(),
            name: run.name().to_string(),
            runs: vec![run],
            left_out: Vec::new(),
        }
    }

    /// Loads `path`: a run's folder (`records.jsonl`), or an experiment's, whose
    /// `summary.json` (`repeats.per_run`) names its runs. Runs a signal cut short, or that its
    /// summary leaves out (`left_out`: an error, nothing completed), are left out, as the
    /// experiment's own estimates leave them out. A sweep's folder is refused:
    /// its points are different loads, not repeats.
    pub fn load(path: &Path) -> Result<Experiment, ReportError> {
        Experiment::load_keeping(path, false, &mut RecordBudget::default())
    }

    /// A sweep's point (`canaryd sweep --runs N`): as [`Experiment::load`], but a point whose
    /// every run a signal cut short keeps them, as a point of single runs keeps its one.
    pub fn load_point(path: &Path, budget: &mut RecordBudget) -> Result<Experiment, ReportError> {
        Experiment::load_keeping(path, true, budget)
    }

    fn load_keeping(
        path: &Path,
        cut_short_if_none: bool,
        budget: &mut RecordBudget,
    ) -> Result<Experiment, ReportError> {
        if path.join("records.jsonl").is_file() {
            return Ok(Experiment::single(Run::load_within(path, budget)?));
        }
        let refuse = |why: &str| ReportError::NotComparable {
            path: path.to_path_buf(),
            why: why.to_string(),
        };
        if path.join("sweep.json").is_file() {
            return Err(refuse(
                "a sweep's folder (sweep.json), and the other side is not one: compare two \
                 sweeps, or two of its points",
            ));
        }
        let summary_path = path.join("summary.json");
        let summary = Summary::read(&summary_path)?;
        let listed = summary.as_ref().and_then(|s| s.at(&["repeats", "per_run"]));
        // There but not a list: the file is damaged, not a folder of another kind.
        if let Some(other) = listed.filter(|v| !v.is_array()) {
            return Err(ReportError::Summary {
                path: summary_path,
                what: format!(
                    "repeats.per_run: expected an array (one entry per run), found {}",
                    json_kind(other)
                ),
            });
        }
        let Some(per_run) = listed.and_then(Value::as_array) else {
            return Err(if path.is_dir() {
                refuse(
                    "neither a run (records.jsonl) nor a --runs experiment (summary.json with \
                     repeats.per_run)",
                )
            } else {
                ReportError::NoRun {
                    path: path.to_path_buf(),
                }
            });
        };
        // Left out as the experiment's own estimates leave it out: cut short by a signal, or
        // errored (`left_out`: a dead server's run would count as 0 requests/s).
        let cut_short = |e: &Value| {
            e.get("interrupted").and_then(Value::as_bool) == Some(true)
                || e.get("left_out").is_some_and(|w| !w.is_null())
        };
        let keep_cut_short = cut_short_if_none && per_run.iter().all(cut_short);
        let mut runs = Vec::new();
        let mut left_out = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for (i, entry) in per_run.iter().enumerate() {
            if cut_short(entry) && !keep_cut_short {
                let why = match entry.get("left_out") {
                    Some(Value::String(w)) => w.clone(),
                    Some(w) if !w.is_null() => w.to_string(),
                    _ => "cut short by a signal".to_string(),
                };
                let dir = match entry.get("dir") {
                    Some(Value::String(d)) => d.clone(),
                    _ => format!("repeats.per_run[{i}]"),
                };
                left_out.push(LeftOutRun { dir, why });
                continue;
            }
            let dir = entry.get("dir").and_then(Value::as_str);
            // The experiment's own folders are plain names: anything else is not its.
            let Some(dir) = dir.filter(|d| is_plain_name(d)) else {
                return Err(ReportError::Summary {
                    path: summary_path,
                    what: format!(
                        "repeats.per_run[{i}].dir: {} is not a folder name",
                        entry.get("dir").unwrap_or(&Value::Null)
                    ),
                });
            };
            // Once each: a run listed twice would count twice in the interval and the test.
            if !seen.insert(dir) {
                return Err(ReportError::Summary {
                    path: summary_path,
                    what: format!("repeats.per_run[{i}].dir: {dir:?} is listed twice"),
                });
            }
            runs.push(Run::load_within(&path.join(dir), budget)?);
        }
        if runs.is_empty() {
            return Err(refuse("the experiment has no complete run"));
        }
        let name = crate::artifacts::folder_name(path);
        Ok(Experiment {
            dir: path.to_path_buf(),
            name,
            runs,
            left_out,
        })
    }

    /// Measured requests over all runs.
    pub fn requests(&self) -> u64 {
        self.runs.iter().map(|r| r.figures().requests).sum()
    }
}

fn is_plain_name(d: &str) -> bool {
    !d.is_empty() && d != "." && d != ".." && !d.contains(['/', '\\'])
}

/// A JSON value as an error names it: `string "x"`, `number 3`, `an object`, `null`; a long
/// one cut.
pub(crate) fn json_kind(v: &Value) -> String {
    let text = v.to_string();
    let text = match text.char_indices().nth(60) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text,
    };
    match v {
        Value::String(_) => format!("string {text}"),
        Value::Number(_) => format!("number {text}"),
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
        Value::Bool(_) | Value::Null => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_dir(at: &Path, ms: &[f64]) {
        std::fs::create_dir_all(at).unwrap();
        let lines: String = ms
            .iter()
            .enumerate()
            .map(|(i, v)| {
                format!(
                    "{{\"sent_at_ms\":{i},\"ended_at_ms\":{},\"status\":\"ok\",\"ttft_ms\":{v},\
                     \"e2e_ms\":{v}}}\n",
                    i as f64 + v
                )
            })
            .collect();
        std::fs::write(at.join("records.jsonl"), lines).unwrap();
    }

    #[test]
    fn an_experiment_is_its_complete_runs_in_its_order() {
        let tmp = tempfile::tempdir().unwrap();
        let exp = tmp.path().join("exp");
        for (d, v) in [
            ("run-1", 10.0),
            ("run-2", 20.0),
            ("run-3", 30.0),
            ("run-4", 40.0),
        ] {
            run_dir(&exp.join(d), &[v, v]);
        }
        std::fs::write(
            exp.join("summary.json"),
            r#"{"schema_version":1,"repeats":{"per_run":[
                {"dir":"run-2","interrupted":false},{"dir":"run-1","interrupted":false},
                {"dir":"run-3","interrupted":true},
                {"dir":"run-4","interrupted":false,"left_out":"it completed no request"}]}}"#,
        )
        .unwrap();
        let e = Experiment::load(&exp).unwrap();
        assert_eq!(e.name, "exp");
        let ttft: Vec<Vec<f64>> = e
            .runs
            .iter()
            .map(|r| r.values(crate::Metric::Ttft))
            .collect();
        assert_eq!(ttft, [vec![20.0, 20.0], vec![10.0, 10.0]]);
        assert_eq!(e.requests(), 4);
        // … and the runs it left out are named, with why, for the comparison to say.
        let named: Vec<(&str, &str)> = e
            .left_out
            .iter()
            .map(|l| (l.dir.as_str(), l.why.as_str()))
            .collect();
        assert_eq!(
            named,
            [
                ("run-3", "cut short by a signal"),
                ("run-4", "it completed no request")
            ]
        );
        // A run's own folder is a side of one run.
        assert_eq!(Experiment::load(&exp.join("run-3")).unwrap().runs.len(), 1);
    }

    #[test]
    fn what_is_not_an_experiment_is_refused_by_name() {
        let tmp = tempfile::tempdir().unwrap();
        let err = |p: &Path| Experiment::load(p).unwrap_err().to_string();
        let sweep = tmp.path().join("sweep");
        run_dir(&sweep.join("point-01-c1"), &[1.0]);
        std::fs::write(sweep.join("sweep.json"), "{}").unwrap();
        assert!(err(&sweep).contains("a sweep's folder"), "{}", err(&sweep));
        let plain = tmp.path().join("plain");
        run_dir(&plain.join("a"), &[1.0]);
        assert!(
            err(&plain).contains("nor a --runs experiment"),
            "{}",
            err(&plain)
        );
        assert!(err(&tmp.path().join("none")).contains("no run here"));
        let odd = tmp.path().join("odd");
        run_dir(&odd.join("run-1"), &[1.0]);
        std::fs::write(
            odd.join("summary.json"),
            r#"{"repeats":{"per_run":[{"dir":"../plain/a"}]}}"#,
        )
        .unwrap();
        assert!(
            err(&odd).contains("repeats.per_run[0].dir: \"../plain/a\" is not a folder name"),
            "{}",
            err(&odd)
        );
        std::fs::write(
            odd.join("summary.json"),
            r#"{"repeats":{"per_run":[{"dir":"run-1","interrupted":true}]}}"#,
        )
        .unwrap();
        assert!(err(&odd).contains("no complete run"), "{}", err(&odd));
        // `per_run` of the wrong type said "neither a run nor a --runs experiment (summary.json
        // with repeats.per_run)", though it has one (audit L4).
        for (per_run, found) in [
            ("\"x\"", "found string \"x\""),
            ("{\"dir\":\"run-1\"}", "found an object"),
            ("3", "found number 3"),
        ] {
            std::fs::write(
                odd.join("summary.json"),
                format!(r#"{{"repeats":{{"per_run":{per_run}}}}}"#),
            )
            .unwrap();
            let e = err(&odd);
            assert!(
                e.ends_with(&format!(
                    "summary.json: repeats.per_run: expected an array (one entry per run), {found}"
                )),
                "{e}"
            );
        }
        // A run listed twice would count twice in the interval and in Welch's test.
        std::fs::write(
            odd.join("summary.json"),
            r#"{"repeats":{"per_run":[{"dir":"run-1"},{"dir":"run-1"}]}}"#,
        )
        .unwrap();
        assert!(
            err(&odd).contains("repeats.per_run[1].dir: \"run-1\" is listed twice"),
            "{}",
            err(&odd)
        );
    }
}

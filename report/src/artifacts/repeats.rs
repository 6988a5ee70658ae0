//! A `--runs N` experiment's `summary.json` (`repeats`): its runs, which of them its estimates
//! leave out and why, and each headline figure's mean with its confidence interval. The report
//! shows these as the experiment states them, as `canaryd compare` and the command's own table
//! do: the runs repeat one load, so they are not a series.

use super::Summary;
use crate::error::ReportError;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// A `--runs N` experiment's summary, read tolerantly (missing optional fields absent).
#[derive(Debug, Clone, Default)]
pub struct Repeats {
    /// The experiment's folder.
    pub dir: PathBuf,
    /// Its `summary.json`.
    pub summary: Summary,
    /// `--runs`.
    pub runs_asked: Option<u64>,
    /// A signal stopped the experiment.
    pub interrupted: bool,
    /// The intervals' confidence level (0.95).
    pub confidence: Option<f64>,
    /// Each run, in the experiment's order.
    pub per_run: Vec<RepeatRun>,
    /// Each headline figure over the runs its estimates are over.
    pub estimates: Vec<Estimate>,
    /// The headline figures no run in the estimates gave (`repeats.unavailable`: all too
    /// short for a rate, say), each with every run's reason.
    pub unavailable: Vec<NoEstimate>,
}

/// A run in the estimates without a figure: its folder and why (`summary.json`'s
/// `without[]`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Without {
    /// Its folder (`run-2`).
    pub dir: String,
    /// Why it has no figure (`1 measured request: a rate needs at least 2`).
    pub why: String,
}

/// A headline figure no run in the estimates gave.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NoEstimate {
    /// `summary.json`'s name (`request_throughput`).
    pub metric: String,
    /// `p50`, `p99`, or `value` for a rate.
    pub statistic: String,
    /// Each run and why it has no figure.
    pub without: Vec<Without>,
}

/// `without` as (folder, why), for [`canary_core::runs_without`]'s wording.
pub fn pairs(without: &[Without]) -> Vec<(&str, &str)> {
    without
        .iter()
        .map(|w| (w.dir.as_str(), w.why.as_str()))
        .collect()
}

/// One run of an experiment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RepeatRun {
    /// Its folder under the experiment's (`run-1`).
    pub dir: String,
    /// Its run id.
    pub run_id: Option<String>,
    /// Its verdict.
    pub verdict: Option<String>,
    /// Why the estimates leave it out (an error, nothing completed, cut short by a signal);
    /// `None` when they are over it.
    pub left_out: Option<String>,
}

/// One headline figure: each run's value, their mean and its interval (an estimate).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Estimate {
    /// `summary.json`'s name (`time_to_first_token`).
    pub metric: String,
    /// `p50`, `p99`, or `value` for a rate.
    pub statistic: String,
    /// Its unit (`ms`, `requests/s`).
    pub unit: String,
    /// Each run's figure, in run order (the runs the estimates are over).
    pub values: Vec<f64>,
    /// The mean.
    pub mean: Option<f64>,
    /// The interval's half-width (none from one run).
    pub half_width: Option<f64>,
    /// The interval's ends when they were clipped at what the figure can be (0, or 1 for a
    /// fraction): a symmetric ± would reach past it.
    pub clipped: Option<(f64, f64)>,
    /// Every run gave the same figure (summary.json's `no_spread`): its `± 0` bounds nothing.
    pub no_spread: bool,
    /// The runs in the estimates that gave no figure for it, with why: the mean is over the
    /// others (`values`).
    pub without: Vec<Without>,
}

impl Repeats {
    /// Reads `dir/summary.json` when it is an experiment's (it has `repeats.per_run`);
    /// `Ok(None)` when there is none, or it is a run's. A `repeats.per_run` that is there but
    /// not a list is refused, naming it, as `canaryd compare` refuses it: the file is damaged,
    /// and its run folders read as a series would be a page of another kind.
    pub fn read(dir: &Path) -> Result<Option<Repeats>, ReportError> {
        let path = dir.join("summary.json");
        let Some(summary) = Summary::read(&path)? else {
            return Ok(None);
        };
        let bad = |what: String| ReportError::Summary {
            path: path.clone(),
            what,
        };
        let Some(listed) = summary.at(&["repeats", "per_run"]) else {
            return Ok(None);
        };
        let Some(listed) = listed.as_array() else {
            return Err(bad(format!(
                "repeats.per_run: expected an array (one entry per run), found {}",
                crate::experiment::json_kind(listed)
            )));
        };
        let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_string);
        let mut per_run = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for (i, e) in listed.iter().enumerate() {
            // The experiment's own folders are plain names: anything else is not its.
            let dir = text(e, "dir")
                .filter(|d| !d.is_empty() && d != "." && d != ".." && !d.contains(['/', '\\']))
                .ok_or_else(|| {
                    bad(format!(
                        "repeats.per_run[{i}].dir: {} is not a folder name",
                        e.get("dir").unwrap_or(&Value::Null)
                    ))
                })?;
            if !seen.insert(dir.clone()) {
                return Err(bad(format!(
                    "repeats.per_run[{i}].dir: {dir:?} is listed twice"
                )));
            }
            // Files before `left_out` was written say only `interrupted`.
            let left_out = text(e, "left_out").or_else(|| {
                (e.get("interrupted").and_then(Value::as_bool) == Some(true))
                    .then(|| "interrupted: a signal cut it short".to_string())
            });
            per_run.push(RepeatRun {
                dir,
                run_id: text(e, "run_id"),
                verdict: text(e, "verdict"),
                left_out,
            });
        }
        let estimates = summary
            .at(&["repeats", "metrics"])
            .and_then(Value::as_array)
            .map(|m| m.iter().filter_map(estimate).collect())
            .unwrap_or_default();
        let unavailable = summary
            .at(&["repeats", "unavailable"])
            .and_then(Value::as_array)
            .map(|u| {
                u.iter()
                    .filter_map(|v| {
                        Some(NoEstimate {
                            metric: v.get("metric")?.as_str()?.to_string(),
                            statistic: v
                                .get("statistic")
                                .and_then(Value::as_str)
                                .unwrap_or_default()
                                .to_string(),
                            without: without(v),
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(Some(Repeats {
            unavailable,
            dir: dir.to_path_buf(),
            runs_asked: summary
                .at(&["repeats", "runs_asked"])
                .and_then(Value::as_u64),
            interrupted: summary
                .at(&["repeats", "interrupted"])
                .and_then(Value::as_bool)
                == Some(true),
            confidence: summary.number(&["repeats", "confidence"]),
            per_run,
            estimates,
            summary,
        }))
    }

    /// The runs the estimates are over.
    pub fn complete(&self) -> usize {
        self.per_run.iter().filter(|r| r.left_out.is_none()).count()
    }

    /// The entry of the run in folder `dir`.
    pub fn run(&self, dir: &str) -> Option<&RepeatRun> {
        self.per_run.iter().find(|r| r.dir == dir)
    }
}

/// One entry of `repeats.metrics`; `None` when it names no metric.
fn estimate(v: &Value) -> Option<Estimate> {
    let text = |key: &str| v.get(key).and_then(Value::as_str).map(str::to_string);
    Some(Estimate {
        metric: text("metric")?,
        statistic: text("statistic").unwrap_or_default(),
        unit: text("unit").unwrap_or_default(),
        values: v
            .get("values")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_f64).collect())
            .unwrap_or_default(),
        mean: v.get("mean").and_then(Value::as_f64),
        half_width: v.get("half_width").and_then(Value::as_f64),
        clipped: match v.get("clipped").and_then(Value::as_bool) {
            Some(true) => v
                .get("low")
                .and_then(Value::as_f64)
                .zip(v.get("high").and_then(Value::as_f64)),
            _ => None,
        },
        no_spread: v.get("no_spread").and_then(Value::as_bool) == Some(true),
        without: without(v),
    })
}

/// An entry's `without[]`: the runs without its figure, each with why.
fn without(v: &Value) -> Vec<Without> {
    let text = |e: &Value, key: &str| e.get(key).and_then(Value::as_str).map(str::to_string);
    v.get("without")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|e| {
                    Some(Without {
                        dir: text(e, "dir")?,
                        why: text(e, "why").unwrap_or_default(),
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

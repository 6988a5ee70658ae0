//! One shard's folder as `canaryd merge` reads it: the parts of its `summary.json` that say
//! which shard of which trace it replayed and how its clock stood, and its `histograms.json`.

use super::MergeError;
use crate::histograms::Histograms;
use crate::trace::Shard;
use canary_core::{ClockReport, SUMMARY_SCHEMA_VERSION};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A shard run's folder, read.
#[derive(Debug, Clone)]
pub(super) struct ShardRun {
    pub dir: PathBuf,
    /// `None`: the run was not sharded (`--shard` not given).
    pub shard: Option<Shard>,
    pub run_id: String,
    /// The `run` block as written.
    pub run: Value,
    pub digest: Option<String>,
    pub trace_path: String,
    pub selection: SelectionCounts,
    pub max_requests: Option<u64>,
    pub goodput: String,
    pub interrupted: bool,
    pub unsent: u64,
    pub t0_monotonic_ns: Option<u64>,
    pub clock: Option<ClockReport>,
    pub histograms: Option<Histograms>,
    /// The slice duration it was run with (`--slice-duration`, its summary's
    /// `timeslices.requested_slice_duration_s`); `None` without slices.
    pub slice_duration: Option<Duration>,
    /// Its summary has a `merged` block: a merge's output, not a shard.
    pub merged: bool,
    /// Each metric's `count` as its `summary.json` states it, to check its `histograms.json`
    /// is of the same run metric by metric.
    pub metric_counts: BTreeMap<String, u64>,
}

/// `run.trace.selection`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub(super) struct SelectionCounts {
    pub requests_in: u64,
    pub requests_out: u64,
    pub dropped_outside_window: u64,
    pub dropped_other_shards: u64,
    pub dropped_orphan_turns: u64,
    pub dropped_over_limit: u64,
    pub input_capped: u64,
    pub output_capped: u64,
    pub outputs_raised_to_1: u64,
    pub inputs_clamped: u64,
    pub input_scale_effective: Option<f64>,
    pub output_scale_effective: Option<f64>,
    pub context_limit: Option<u64>,
    pub context_limit_source: Option<String>,
    pub over_context: Option<u64>,
    pub prompt_over_context: Option<u64>,
}

/// The `summary.json` versions whose shards merge. Version 2 differs from 3 only in the
/// shares it wrote as 0 where 3 writes null (`error_rate`, `good_request_fraction`), and the
/// merge reads neither: it folds the records again.
const MERGES: [u32; 2] = [2, SUMMARY_SCHEMA_VERSION];

#[derive(Deserialize)]
struct SummaryHead {
    schema_version: Option<u32>,
    run: Value,
    #[serde(default)]
    interrupted: bool,
    #[serde(default)]
    unsent: u64,
    t0_monotonic_ns: Option<u64>,
    clock: Option<ClockReport>,
    /// Only its duration is read: the merge slices the union's records again.
    #[serde(default)]
    timeslices: Option<Value>,
    /// Only whether it is there: a merge's output.
    #[serde(default)]
    merged: Option<Value>,
    /// The metrics (`{"unit": …, "count": …}`) among the rest.
    #[serde(flatten)]
    rest: BTreeMap<String, Value>,
}

impl ShardRun {
    /// Reads `dir`'s `summary.json` and `histograms.json`.
    pub fn read(dir: &Path) -> Result<ShardRun, MergeError> {
        let bad = |problem: String| MergeError::Shard {
            dir: dir.to_path_buf(),
            problem,
        };
        let path = dir.join("summary.json");
        let bytes =
            canary_files::read_small_file(&path, crate::MAX_ARTIFACT_BYTES).map_err(|e| {
                bad(match what_else(dir) {
                    Some(what) => what,
                    None if !dir.exists() => "does not exist".to_string(),
                    None => format!("summary.json cannot be read ({e}): not a run folder?"),
                })
            })?;
        let head: SummaryHead = serde_json::from_slice(&bytes).map_err(|e| {
            bad(match experiment(dir, &bytes) {
                Some(what) => what,
                None => format!("summary.json is not a run summary: {e}"),
            })
        })?;
        // Keys change meaning between versions: shards of another one are not merged as if
        // they were this one's.
        if let Some(v) = head.schema_version.filter(|v| !MERGES.contains(v)) {
            return Err(bad(format!(
                "summary.json has schema_version {v}; this canaryd merges versions {} (rerun \
                 the shards with this canaryd)",
                MERGES.map(|v| v.to_string()).join(" and ")
            )));
        }
        let run = head.run;
        let text = |v: &Value| v.as_str().map(str::to_string);
        let trace = run.get("trace").filter(|t| t.is_object()).ok_or_else(|| {
            bad(
                "summary.json has no run.trace: not a trace replay (or a run rebuilt from its \
                 records, which does not say which shard it was)"
                    .into(),
            )
        })?;
        let shard = match trace.pointer("/asked/shard") {
            Some(Value::String(s)) => Some(
                s.parse::<Shard>()
                    .map_err(|e| bad(format!("run.trace.asked.shard `{s}`: {e}")))?,
            ),
            _ => None,
        };
        let selection = serde_json::from_value(trace["selection"].clone())
            .map_err(|e| bad(format!("run.trace.selection: {e}")))?;
        // With its cause: `reading DIR/histograms.json` alone does not say what went wrong.
        let histograms = Histograms::read(dir).map_err(|e| bad(canary_core::error_chain(&e)))?;
        let slice_duration = match &head.timeslices {
            None | Some(Value::Null) => None,
            Some(t) => {
                let field = t.get("requested_slice_duration_s");
                let d = field
                    .and_then(Value::as_f64)
                    .and_then(|s| Duration::try_from_secs_f64(s).ok())
                    .filter(|d| *d >= canary_core::Timeslices::MIN_WIDTH);
                Some(d.ok_or_else(|| {
                    bad(format!(
                        "summary.json timeslices.requested_slice_duration_s: expected seconds, \
                         at least {} ms, found {}",
                        canary_core::Timeslices::MIN_WIDTH.as_millis(),
                        field.map_or("nothing".to_string(), Value::to_string)
                    ))
                })?)
            }
        };
        Ok(ShardRun {
            dir: dir.to_path_buf(),
            shard,
            run_id: run.get("run_id").and_then(text).unwrap_or_default(),
            digest: trace.get("digest").and_then(text),
            trace_path: trace.get("path").and_then(text).unwrap_or_default(),
            selection,
            max_requests: trace.pointer("/asked/max_requests").and_then(Value::as_u64),
            goodput: run.get("goodput").and_then(text).unwrap_or_default(),
            interrupted: head.interrupted,
            unsent: head.unsent,
            t0_monotonic_ns: head.t0_monotonic_ns,
            clock: head.clock,
            histograms,
            slice_duration,
            merged: head.merged.is_some(),
            metric_counts: head
                .rest
                .iter()
                .filter(|(_, v)| v.get("unit").is_some_and(Value::is_string))
                .filter_map(|(k, v)| Some((k.clone(), v.get("count")?.as_u64()?)))
                .collect(),
            run,
        })
    }

    /// `0/3 (path/to/dir)`.
    pub fn name(&self) -> String {
        match self.shard {
            Some(s) => format!("shard {s} ({})", self.dir.display()),
            None => self.dir.display().to_string(),
        }
    }

    /// The `run` block without what differs between shards of one replay by design: the run
    /// id, the trace's path (hosts mount it in different places; the digest says it is the
    /// same), the shard and what selecting it dropped.
    pub fn shared_settings(&self) -> Value {
        let mut run = self.run.clone();
        if let Some(m) = run.as_object_mut() {
            m.remove("run_id");
        }
        if let Some(t) = run.get_mut("trace").and_then(Value::as_object_mut) {
            t.remove("path");
            t.remove("selection");
            if let Some(a) = t.get_mut("asked").and_then(Value::as_object_mut) {
                a.remove("shard");
            }
        }
        run
    }
}

/// What a folder without a readable `summary.json` is instead, when it says: a sweep's
/// (`sweep.json`), whose points are the runs (audit L7).
fn what_else(dir: &Path) -> Option<String> {
    if !dir.join("sweep.json").is_file() {
        return None;
    }
    let mut points: Vec<String> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("point-"))
        .collect();
    points.sort();
    let first = points.first().map_or(String::new(), |p| {
        format!(": its points' folders are runs ({})", dir.join(p).display())
    });
    Some(format!(
        "is a sweep (sweep.json, canaryd sweep), not one run{first}"
    ))
}

/// What a `summary.json` that is not one run's is instead, when it says: a `--runs`
/// experiment's, whose runs are its folders `run-1` … (audit L7).
fn experiment(dir: &Path, bytes: &[u8]) -> Option<String> {
    let doc: Value = serde_json::from_slice(bytes).ok()?;
    let repeats = doc.get("repeats")?;
    let runs: Vec<String> = repeats
        .get("per_run")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|r| r.get("dir")?.as_str())
                .map(|d| dir.join(d).display().to_string())
                .collect()
        })
        .unwrap_or_default();
    let which = match runs.as_slice() {
        [] => String::new(),
        [one] => format!(": its run is {one}"),
        [first, .., last] => format!(": its runs are {first} … {last}"),
    };
    Some(format!(
        "is a --runs experiment (its summary.json holds repeats), not one run{which}"
    ))
}

/// The first key path where `a` and `b` differ, with both values: `run.speedup: 2 vs 4`.
pub(super) fn first_difference(path: &str, a: &Value, b: &Value) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter().find_map(|k| {
                let null = Value::Null;
                first_difference(
                    &format!("{path}.{k}"),
                    x.get(k).unwrap_or(&null),
                    y.get(k).unwrap_or(&null),
                )
            })
        }
        _ if a == b => None,
        _ => Some(format!("{path}: {a} vs {b}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_first_difference_is_named_by_its_key_path() {
        let a = json!({"speedup": 2, "target": {"url": "http://a", "model": "m"}});
        let b = json!({"speedup": 2, "target": {"url": "http://b", "model": "m"}});
        assert_eq!(
            first_difference("run", &a, &b).unwrap(),
            "run.target.url: \"http://a\" vs \"http://b\""
        );
        assert_eq!(first_difference("run", &a, &a), None);
        let c = json!({"speedup": 2, "target": {"url": "http://a", "model": "m"}, "x": 1});
        assert_eq!(first_difference("run", &a, &c).unwrap(), "run.x: null vs 1");
    }

    // Version 3 made shares of nothing null; the merge folds the records again and reads no
    // share, so version 2 shards still merge. Older ones are refused, naming what merges.
    #[test]
    fn shards_of_version_2_still_merge_and_older_ones_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let write = |v: u32| {
            let doc = json!({"schema_version": v, "error_rate": 0.0,
                             "run": {"run_id": "r", "trace": {"selection": {}}}});
            std::fs::write(dir.path().join("summary.json"), doc.to_string()).unwrap();
        };
        for v in [2, SUMMARY_SCHEMA_VERSION] {
            write(v);
            let run = ShardRun::read(dir.path()).unwrap_or_else(|e| panic!("{v}: {e}"));
            assert_eq!(run.run_id, "r");
        }
        write(1);
        let e = ShardRun::read(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("schema_version 1; this canaryd merges versions 2 and 3"),
            "{e}"
        );
    }
}

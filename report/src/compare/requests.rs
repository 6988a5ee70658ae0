//! Did the two sides send the same requests? Comparisons are made over the same requests, or
//! say that they are not: two replays of disjoint windows of one trace, or of one window at
//! another speed or seed, differ in their work as well as in their server, and a row cannot
//! tell the two apart. Read from each side's `summary.json` `run` block (its first run's, for
//! an experiment: its runs share their settings).

use crate::artifacts::Run;
use serde::Serialize;
use serde_json::Value;

/// Why the sides may not have sent the same requests.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DifferentRequests {
    /// `not the same requests: …`, or `not known to be the same requests: …` when a side's
    /// summary does not say what it sent.
    pub note: String,
    /// The settings that differ, A's value then B's (empty when not known).
    pub fields: Vec<RequestSetting>,
}

/// One setting that chose or paced the requests, on both sides.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RequestSetting {
    /// `trace` (its digest, format or transforms), `selection` (window, count, shard,
    /// lengths), `load` (speedup, rate, arrivals, users, concurrency, cancellation) or `seed`.
    pub kind: &'static str,
    /// The `run` block's field (`trace.asked.start_offset_s`).
    pub field: String,
    /// A's value (`–`: not set).
    pub a: String,
    /// B's.
    pub b: String,
}

/// The order kinds are told in.
const KINDS: [&str; 4] = ["trace", "selection", "load", "seed"];

/// Which kind of setting a flattened `run`-block field is, when it decides which requests
/// were sent or how fast; `None` for the others (the target, the tokenizer, the version: the
/// context diff shows those). A trace's path is left to its digest: one trace under another
/// name is the same requests.
fn kind_of(field: &str) -> Option<&'static str> {
    let under = |prefix: &str| field.starts_with(prefix);
    Some(match field {
        "trace.digest" | "trace.format" => "trace",
        _ if under("trace.synthesis.") => "trace",
        _ if under("trace.asked.") => "selection",
        "load.request_count" | "load.benchmark_duration_s" => "selection",
        _ if under("load.isl.") || under("load.osl.") => "selection",
        "load.shared_system_prompt_length" => "selection",
        "load.random_seed" | "prompt_seed" | "cancellation.seed" => "seed",
        "speedup" | "concurrency" => "load",
        _ if under("load.") || under("cancellation.") => "load",
        _ => return None,
    })
}

/// `a.b.c` paths of the leaves of `v` with their values, exact (not rounded for reading, so
/// two values that differ are never shown or judged alike).
fn leaves(v: &Value, key: String, out: &mut Vec<(String, Value)>) {
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                let key = if key.is_empty() {
                    k.clone()
                } else {
                    format!("{key}.{k}")
                };
                leaves(v, key, out);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                leaves(v, format!("{key}[{i}]"), out);
            }
        }
        _ => out.push((key, v.clone())),
    }
}

/// A leaf as the note shows it: `–` for unset, a string bare.
fn shown(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => "–".into(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// What differs between the requests `a` and `b` sent; `None` when they sent the same ones,
/// as far as their summaries say (or are one run).
pub(super) fn different_requests(a: &Run, b: &Run) -> Option<DifferentRequests> {
    if a.dir == b.dir {
        return None;
    }
    // A plan has a `load` block; a run rebuilt from its records, or without a summary, does
    // not say what it sent.
    let plan = |r: &Run| {
        r.summary
            .as_ref()
            .and_then(|s| s.section("run"))
            .filter(|run| run.get("load").is_some_and(|l| !l.is_null()))
            .map(|run| {
                let mut out = Vec::new();
                leaves(run, String::new(), &mut out);
                out
            })
    };
    let (pa, pb) = match (plan(a), plan(b)) {
        (Some(pa), Some(pb)) => (pa, pb),
        (pa, pb) => {
            let who = match (pa.is_some(), pb.is_some()) {
                (false, false) => "neither side's summary.json says",
                (false, true) => "A's summary.json does not say",
                _ => "B's summary.json does not say",
            };
            return Some(DifferentRequests {
                note: format!(
                    "not known to be the same requests: {who} what it sent (no run plan: no \
                     summary, or a run rebuilt from its records), so the rows may compare \
                     different requests"
                ),
                fields: Vec::new(),
            });
        }
    };
    let get = |f: &[(String, Value)], k: &str| -> Option<Value> {
        f.iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
            .filter(|v| !v.is_null())
    };
    let mut keys: Vec<&String> = pa.iter().chain(&pb).map(|(k, _)| k).collect();
    keys.sort();
    keys.dedup();
    let mut fields: Vec<RequestSetting> = keys
        .into_iter()
        .filter_map(|k| {
            let kind = kind_of(k)?;
            let (va, vb) = (get(&pa, k), get(&pb, k));
            // 50 and 50.0 are one speedup.
            let same = match (&va, &vb) {
                (Some(Value::Number(x)), Some(Value::Number(y))) => x.as_f64() == y.as_f64(),
                _ => va == vb,
            };
            (!same).then(|| RequestSetting {
                kind,
                field: k.clone(),
                a: shown(va.as_ref()),
                b: shown(vb.as_ref()),
            })
        })
        .collect();
    if fields.is_empty() {
        return None;
    }
    fields.sort_by_key(|f| KINDS.iter().position(|k| *k == f.kind));
    let told: Vec<String> = KINDS
        .iter()
        .filter_map(|kind| {
            let of: Vec<String> = fields
                .iter()
                .filter(|f| f.kind == *kind)
                .map(|f| format!("{} {} → {}", f.field, f.a, f.b))
                .collect();
            (!of.is_empty()).then(|| format!("{kind} ({})", of.join(", ")))
        })
        .collect();
    Some(DifferentRequests {
        note: format!(
            "not the same requests: the sides differ in their {}; each row compares different \
             work as well as the server, so a change may be the workload's",
            told.join("; ")
        ),
        fields,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run_with(dir: &std::path::Path, run: serde_json::Value) -> Run {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(
            dir.join("records.jsonl"),
            "{\"sent_at_ms\":0,\"ended_at_ms\":5,\"status\":\"ok\",\"ttft_ms\":1,\"e2e_ms\":5}\n",
        )
        .unwrap();
        if !run.is_null() {
            let summary = json!({"schema_version": 1, "run": run});
            std::fs::write(dir.join("summary.json"), summary.to_string()).unwrap();
        }
        Run::load(dir).unwrap()
    }

    fn trace_run(id: &str, start: Option<f64>, speedup: f64) -> serde_json::Value {
        json!({
            "run_id": id,
            "target": {"url": "http://127.0.0.1:1/v1/chat/completions"},
            "load": {"shape": "trace"},
            "trace": {
                "path": format!("/traces/{id}.jsonl"),
                "digest": "fnv1a64:4d5e33fce39f3d45",
                "selection": {"requests_out": 600},
                "asked": {"start_offset_s": start, "max_requests": 600, "shard": null}
            },
            "speedup": speedup,
            "concurrency": null,
            "prompt_seed": 0
        })
    }

    // The audit's TA and TB: one trace, disjoint windows (600 rows from the start, 250 from
    // 600 s), judged row by row with no word.
    #[test]
    fn two_windows_of_one_trace_are_not_the_same_requests() {
        let tmp = tempfile::tempdir().unwrap();
        let a = run_with(&tmp.path().join("a"), trace_run("a", None, 50.0));
        let b = run_with(&tmp.path().join("b"), trace_run("b", Some(600.0), 50.0));
        let d = different_requests(&a, &b).expect("a difference");
        assert_eq!(
            d.note,
            "not the same requests: the sides differ in their selection \
             (trace.asked.start_offset_s – → 600.0); each row compares different work as well \
             as the server, so a change may be the workload's"
        );
        assert_eq!(d.fields.len(), 1, "{d:?}");
        // Said above the table, in the page's lead and in the JSON.
        let single = |dir: &str| crate::Experiment::load(&tmp.path().join(dir)).unwrap();
        let rules = canary_core::compare::ShiftRules::default();
        let c = super::super::compare(&single("a"), &single("b"), &rules);
        let text = c.to_text();
        let (note, table) = (text.find("not the same requests"), text.find("metric"));
        assert!(note.is_some() && note < table, "{text}");
        let page = c.to_html().unwrap();
        assert!(
            page.contains("<p class=\"warn\">not the same requests: the sides differ"),
            "{page}"
        );
        let json = serde_json::to_value(&c).unwrap();
        assert_eq!(
            json["different_requests"]["fields"][0],
            json!({"kind": "selection", "field": "trace.asked.start_offset_s", "a": "–",
                   "b": "600.0"})
        );
        // The load and the seed are said too, by kind, in that order.
        let mut faster = trace_run("c", Some(600.0), 100.0);
        faster["prompt_seed"] = json!(7);
        let c = run_with(&tmp.path().join("c"), faster);
        let d = different_requests(&a, &c).unwrap();
        let kinds: Vec<&str> = d.fields.iter().map(|f| f.kind).collect();
        assert_eq!(kinds, ["selection", "load", "seed"], "{d:?}");
        assert!(d
            .note
            .contains("load (speedup 50.0 → 100.0); seed (prompt_seed 0 → 7)"));
        // Another id, path and selection result (what the trace held) are the same requests.
        let same = run_with(&tmp.path().join("same"), trace_run("same", None, 50.0));
        assert_eq!(different_requests(&a, &same), None);
        assert_eq!(different_requests(&a, &a), None);
    }

    #[test]
    fn a_side_that_does_not_say_what_it_sent_is_said_not_known() {
        let tmp = tempfile::tempdir().unwrap();
        let a = run_with(&tmp.path().join("a"), trace_run("a", None, 50.0));
        let bare = run_with(&tmp.path().join("bare"), serde_json::Value::Null);
        let d = different_requests(&a, &bare).unwrap();
        assert!(
            d.note.starts_with(
                "not known to be the same requests: B's summary.json does not say what it sent"
            ),
            "{}",
            d.note
        );
        let rate = |seed: u64, rate: f64| {
            json!({"load": {"shape": "rate", "request_rate": rate, "random_seed": seed,
                            "arrival_pattern": "poisson"}, "speedup": 1.0, "prompt_seed": 0})
        };
        let x = run_with(&tmp.path().join("x"), rate(0, 100.0));
        let y = run_with(&tmp.path().join("y"), rate(1, 200.0));
        let d = different_requests(&x, &y).unwrap();
        assert!(
            d.note
                .contains("load (load.request_rate 100.0 → 200.0); seed (load.random_seed 0 → 1)"),
            "{}",
            d.note
        );
    }
}

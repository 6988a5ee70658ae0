//! The load a run asked for, as a baseline keys it: a run is compared only with runs of the
//! same load. A reload that changed `osl` from 16 to 64 compared the new latencies (or knee)
//! with the old load's and failed every later run until retention took the old runs away.
//!
//! A load is JSON (the history stores it beside the run) and a stable 64-bit hash of its
//! canonical text (keys sorted), which the history indexes so a baseline is read in SQL and
//! stops at its N runs. The hash is FNV-1a then SplitMix64: fixed, unlike std's hasher,
//! because it is stored.

use crate::cli::sweep::point::Axis;
use canary_replay::PlanInfo;
use serde_json::{json, Value};
use std::fmt::Write;

/// The load of a replay (a trace, a rate, a closed loop) as `summary.json`'s `run` block
/// states it: the target (name, URL, model, endpoint, streaming), the `load` block (shape,
/// rate and arrivals or users, isl/osl, shared prefix, seed, count or duration), the trace's
/// digest, format, selection and synthesis as asked, the speedup, the concurrency, the
/// warm-up, the tokenizer and any cancellation. Not the SLOs (they judge, they do not load),
/// the trace's path (its digest says what it holds), the prompt seed or the version.
pub fn of_plan(plan: &PlanInfo) -> Value {
    let t = &plan.target;
    json!({
        "target": {
            "name": t.name,
            "url": t.url,
            "model": t.model,
            "endpoint": t.endpoint,
            "streaming": t.streaming,
        },
        "load": plan.load,
        "trace": plan.trace.as_ref().map(|t| json!({
            "format": t.format,
            "digest": t.digest,
            "asked": t.asked,
            "synthesis": t.synthesis,
        })),
        "speedup": plan.speedup,
        "concurrency": plan.concurrency,
        "warmup_requests": plan.warmup_requests,
        "tokenizer": plan.tokenizer,
        "cancellation": plan.cancellation,
    })
}

/// The load of a sweep from its first point's ([`of_plan`]): what the axis sets per point
/// taken out, and the axis and its values put in (another grid has other knees).
pub fn of_sweep(first_point: Value, axis: Axis, values: &[f64]) -> Value {
    let mut load = first_point;
    let pointers: &[&str] = match axis {
        Axis::Concurrency => &["/concurrency", "/load/users"],
        Axis::RequestRate => &["/load/request_rate"],
        Axis::Speedup => &["/speedup"],
    };
    for p in pointers {
        if let Some(v) = load.pointer_mut(p) {
            *v = Value::Null;
        }
    }
    if let Some(m) = load.as_object_mut() {
        m.insert("sweep".into(), json!({ "axis": axis, "values": values }));
    }
    load
}

/// The stable hash of `load`'s canonical text, as the history stores it (SQLite's integers
/// are signed: the bits as an `i64`).
pub fn hash(load: &Value) -> i64 {
    let mut text = String::new();
    canonical(load, &mut text);
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    canary_core::splitmix64(h) as i64
}

/// `v` as JSON with every object's keys sorted, whatever order the map keeps.
fn canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                canonical(&m[k], out);
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(x, out);
            }
            out.push(']');
        }
        leaf => out.push_str(&leaf.to_string()),
    }
}

/// What a run says when the baseline starts again because its load is not the newest
/// baseline run's (`before`; `None`: a run stored before loads were recorded): `new load:
/// baseline starts again (load.osl.mean 16 → 64)`, at most four settings named.
pub fn new_load_note(before: Option<&Value>, now: &Value) -> String {
    let Some(before) = before else {
        return "new load: baseline starts again (the earlier runs recorded no load)".into();
    };
    let (mut a, mut b) = (Vec::new(), Vec::new());
    leaves(before, String::new(), &mut a);
    leaves(now, String::new(), &mut b);
    let old: std::collections::BTreeMap<_, _> = a.into_iter().collect();
    let new: std::collections::BTreeMap<_, _> = b.into_iter().collect();
    let mut keys: Vec<&String> = old.keys().chain(new.keys()).collect();
    keys.sort();
    keys.dedup();
    let none = "none".to_string();
    let changed: Vec<String> = keys
        .into_iter()
        .filter(|k| old.get(*k) != new.get(*k))
        .map(|k| {
            format!(
                "{k} {} → {}",
                old.get(k).unwrap_or(&none),
                new.get(k).unwrap_or(&none)
            )
        })
        .collect();
    let mut said = changed
        .iter()
        .take(4)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if changed.len() > 4 {
        let _ = write!(said, " and {} more", changed.len() - 4);
    }
    format!("new load: baseline starts again ({said})")
}

/// `v`'s leaves by dotted path (`load.osl.mean`), nulls as absent.
fn leaves(v: &Value, path: String, out: &mut Vec<(String, String)>) {
    let join = |k: &str| {
        if path.is_empty() {
            k.to_string()
        } else {
            format!("{path}.{k}")
        }
    };
    match v {
        Value::Null => {}
        Value::Object(m) => {
            for (k, x) in m {
                leaves(x, join(k), out);
            }
        }
        Value::Array(a) if a.iter().all(|x| !x.is_object() && !x.is_array()) => {
            out.push((path, v.to_string()))
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                leaves(x, join(&i.to_string()), out);
            }
        }
        Value::String(s) => out.push((path, s.clone())),
        // `speedup 20 → 25`, not `20.0 → 25.0`.
        Value::Number(n) => match n.as_f64() {
            Some(x) if n.is_f64() && x.fract() == 0.0 && x.abs() < 1e15 => {
                out.push((path, format!("{x:.0}")))
            }
            _ => out.push((path, n.to_string())),
        },
        leaf => out.push((path, leaf.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_of_the_content_not_the_key_order_and_is_fixed() {
        let a = json!({"load": {"isl": {"mean": 32}, "osl": {"mean": 16}}, "target": "sim"});
        let b: Value = serde_json::from_str(
            r#"{"target": "sim", "load": {"osl": {"mean": 16}, "isl": {"mean": 32}}}"#,
        )
        .unwrap();
        assert_eq!(hash(&a), hash(&b));
        let c = json!({"load": {"isl": {"mean": 32}, "osl": {"mean": 64}}, "target": "sim"});
        assert_ne!(hash(&a), hash(&c));
        // Stored in history files: it must never change between builds or releases.
        // (FNV-1a of `{"a":[1,2.5,"x",null]}`, then SplitMix64.)
        assert_eq!(
            hash(&json!({"a": [1, 2.5, "x", null]})),
            5_509_895_633_622_889_014
        );
    }

    #[test]
    fn the_note_names_what_changed() {
        let old = json!({"load": {"osl": {"mean": 16, "stddev": 0.0}}, "speedup": 1.0});
        let faster = json!({"load": {"osl": {"mean": 16, "stddev": 0.0}}, "speedup": 2.5});
        assert_eq!(
            new_load_note(Some(&old), &faster),
            "new load: baseline starts again (speedup 1 → 2.5)"
        );
        let new = json!({"load": {"osl": {"mean": 64, "stddev": 0.0}}, "speedup": 1.0});
        assert_eq!(
            new_load_note(Some(&old), &new),
            "new load: baseline starts again (load.osl.mean 16 → 64)"
        );
        assert_eq!(
            new_load_note(None, &new),
            "new load: baseline starts again (the earlier runs recorded no load)"
        );
    }

    #[test]
    fn a_sweeps_load_is_without_its_axis_and_with_its_grid() {
        let point = json!({"concurrency": 2, "load": {"users": 2, "osl": 16}});
        let load = of_sweep(point, Axis::Concurrency, &[2.0, 8.0]);
        assert_eq!(
            load,
            json!({"concurrency": null, "load": {"users": null, "osl": 16},
                   "sweep": {"axis": "concurrency", "values": [2.0, 8.0]}})
        );
    }
}

//! The run context that differs between the sides: every field of their `run` blocks that is
//! not the same (but the run's id, which always is), so a changed setting is never hidden.

use crate::artifacts::Run;

/// The fields that name the run rather than how it ran: two runs always differ in them, and
/// the header names a run's side by its id.
const NAMES_THE_RUN: [&str; 1] = ["run_id"];

/// The `run` blocks' fields that differ: every difference but the run's id, so a changed
/// setting is never hidden. Values are compared as written (numbers as numbers: `10` and
/// `10.0` are the same speedup, `0.05` and `0.0501` are not), and shown in full (the shortest
/// spelling that reads back as the value), so a difference shows and equal values never read
/// as one.
pub(super) fn context_diff(a: &Run, b: &Run) -> Vec<(String, String, String)> {
    use serde_json::Value;
    let block = |r: &Run| {
        let mut out = Vec::new();
        if let Some(v) = r.summary.as_ref().and_then(|s| s.section("run")) {
            leaves(v, String::new(), &mut out);
        }
        out
    };
    let (fa, fb) = (block(a), block(b));
    let mut keys: Vec<&String> = fa.iter().chain(fb.iter()).map(|(k, _)| k).collect();
    keys.sort();
    keys.dedup();
    let get = |f: &[(String, Value)], k: &str| {
        f.iter()
            .find(|(key, _)| key == k)
            .map_or(Value::Null, |(_, v)| v.clone())
    };
    keys.into_iter()
        .filter(|k| !NAMES_THE_RUN.contains(&k.as_str()))
        .map(|k| (k.clone(), get(&fa, k), get(&fb, k)))
        .filter(|(_, x, y)| !same(x, y))
        .map(|(k, x, y)| (k, shown(&x), shown(&y)))
        .collect()
}

/// A JSON value's leaves by dotted key; an array of scalars is one leaf.
fn leaves(v: &serde_json::Value, key: String, out: &mut Vec<(String, serde_json::Value)>) {
    use serde_json::Value;
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
        Value::Array(items) if items.iter().any(|i| i.is_object() || i.is_array()) => {
            for (i, v) in items.iter().enumerate() {
                leaves(v, format!("{key}[{i}]"), out);
            }
        }
        _ => out.push((key, v.clone())),
    }
}

/// Equal as values: numbers by their value (`10` is `10.0`), arrays element by element.
fn same(x: &serde_json::Value, y: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (x, y) {
        (Value::Number(a), Value::Number(b)) => match (a.as_f64(), b.as_f64()) {
            (Some(p), Some(q)) if a.is_f64() || b.is_f64() => p == q,
            _ => a == b,
        },
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(p, q)| same(p, q))
        }
        _ => x == y,
    }
}

/// A leaf in full: `–` for unset, a string bare, a number in its shortest exact spelling
/// (`0.0501`, `10`), an array's items joined.
fn shown(v: &serde_json::Value) -> String {
    use serde_json::Value;
    match v {
        Value::Null => "–".into(),
        Value::String(s) => s.clone(),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.to_string(),
            (_, Some(u), _) => u.to_string(),
            (_, _, Some(f)) => f.to_string(),
            _ => n.to_string(),
        },
        Value::Array(items) => items.iter().map(shown).collect::<Vec<_>>().join(", "),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(dir: &std::path::Path, block: serde_json::Value) -> Run {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(
            dir.join("records.jsonl"),
            "{\"sent_at_ms\":0,\"ended_at_ms\":5,\"status\":\"ok\",\"ttft_ms\":1,\"e2e_ms\":5}\n",
        )
        .unwrap();
        let summary = serde_json::json!({ "run": block });
        std::fs::write(dir.join("summary.json"), summary.to_string()).unwrap();
        Run::load(dir).unwrap()
    }

    // The audit: `Run context that differs:` always began `run_id: run-112743ff →
    // run-334c2fd8`, two runs always differing in their ids, above what did differ.
    #[test]
    fn the_runs_ids_are_not_a_difference_in_context() {
        let tmp = tempfile::tempdir().unwrap();
        let a = run(
            &tmp.path().join("a"),
            serde_json::json!({"run_id": "run-112743ff", "speedup": 1.0}),
        );
        let b = run(
            &tmp.path().join("b"),
            serde_json::json!({"run_id": "run-334c2fd8", "speedup": 2.0}),
        );
        let diff = context_diff(&a, &b);
        let keys: Vec<&str> = diff.iter().map(|(k, _, _)| k.as_str()).collect();
        assert_eq!(keys, ["speedup"], "{diff:?}");
        // The header still names each side by its id.
        assert_eq!(a.name(), "run-112743ff");
    }

    // The audit (F4): a scale_lengths of 0.05 against 0.0501 was hidden (both shown rounded
    // to `0.050`), and a speedup of 10 against 10.004 read `10 → 10.0`.
    #[test]
    fn a_small_difference_shows_in_full_and_equal_values_never_differ() {
        let tmp = tempfile::tempdir().unwrap();
        let a = run(
            &tmp.path().join("a"),
            serde_json::json!({"speedup": 10, "trace": {"scale_lengths": 0.05}, "rate": 2.0,
                               "seeds": [1, 2]}),
        );
        let b = run(
            &tmp.path().join("b"),
            serde_json::json!({"speedup": 10.004, "trace": {"scale_lengths": 0.0501},
                               "rate": 2, "seeds": [1.0, 2]}),
        );
        let diff = context_diff(&a, &b);
        assert_eq!(
            diff,
            [
                (
                    "speedup".to_string(),
                    "10".to_string(),
                    "10.004".to_string()
                ),
                (
                    "trace.scale_lengths".to_string(),
                    "0.05".to_string(),
                    "0.0501".to_string()
                ),
            ],
            "{diff:?}"
        );
    }
}

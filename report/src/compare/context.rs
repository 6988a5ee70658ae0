//! The run context that differs between the sides: every field of their `run` blocks that is
//! not the same (but the run's id, which always is), so a changed setting is never hidden.

use crate::artifacts::Run;

/// The fields that name the run rather than how it ran: two runs always differ in them, and
/// the header names a run's side by its id.
const NAMES_THE_RUN: [&str; 1] = ["run_id"];

/// The `run` blocks' fields that differ: every difference but the run's id, so a changed
/// setting is never hidden.
pub(super) fn context_diff(a: &Run, b: &Run) -> Vec<(String, String, String)> {
    use crate::sections::context::flatten;
    let block = |r: &Run| {
        r.summary
            .as_ref()
            .and_then(|s| s.section("run"))
            .map(flatten)
            .unwrap_or_default()
    };
    let (fa, fb) = (block(a), block(b));
    let mut keys: Vec<&String> = fa.iter().chain(fb.iter()).map(|(k, _)| k).collect();
    keys.sort();
    keys.dedup();
    let get = |f: &[(String, String)], k: &str| {
        f.iter()
            .find(|(key, _)| key == k)
            .map_or("–".to_string(), |(_, v)| v.clone())
    };
    keys.into_iter()
        .map(|k| (k.clone(), get(&fa, k), get(&fb, k)))
        .filter(|(k, x, y)| x != y && !NAMES_THE_RUN.contains(&k.as_str()))
        .collect()
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
}

//! The run context that differs between the sides: every field of their `run` blocks that is
//! not the same, so a changed setting is never hidden.

use crate::artifacts::Run;

/// The `run` blocks' fields that differ: every difference, so a changed setting is never
/// hidden.
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
        .filter(|(_, x, y)| x != y)
        .collect()
}

//! Slots for what later issues add to a run's artifacts, drawn only when the data is there:
//! `timeslices` (issue 18, `--slice-duration`), per-slice statistics expected as an array of
//! objects in `summary.json`. Its format does not exist yet, so it is shown generically (a
//! table of its fields); when it lands, a dedicated section replaces this one, as
//! [`super::diagnosis`] replaced the diagnosis slot.

use super::context::flatten;
use crate::artifacts::Run;
use crate::html::{esc, table};
use serde_json::Value;

/// The timeslices table, when the summary has any.
pub fn timeslices(run: &Run) -> Option<String> {
    let Value::Array(slices) = run.summary.as_ref()?.section("timeslices")? else {
        return None;
    };
    if slices.is_empty() {
        return None;
    }
    let flat: Vec<Vec<(String, String)>> = slices.iter().map(flatten).collect();
    let mut head: Vec<String> = Vec::new();
    for (k, _) in flat.iter().flatten() {
        if !head.contains(k) {
            head.push(k.clone());
        }
    }
    let rows: Vec<Vec<String>> = flat
        .iter()
        .map(|slice| {
            head.iter()
                .map(|h| {
                    slice
                        .iter()
                        .find(|(k, _)| k == h)
                        .map_or("–".into(), |(_, v)| esc(v))
                })
                .collect()
        })
        .collect();
    let head: Vec<&str> = head.iter().map(String::as_str).collect();
    Some(format!(
        "<div class=\"slot\" data-slot=\"timeslices\">{}</div>\n",
        table("timeslices", &head, &rows)
    ))
}

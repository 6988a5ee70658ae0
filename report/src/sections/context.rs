//! The run's context (`summary.json`'s `run` block and the run-level facts around it), and
//! the generic JSON-to-table rendering the other sections share.

use super::num;
use crate::artifacts::{utc, Run};
use crate::html::{esc, table};
use serde_json::Value;

/// `a.b.c = value` pairs of a JSON value, leaves only; arrays of scalars joined.
pub fn flatten(v: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    walk(v, String::new(), &mut out);
    out
}

fn walk(v: &Value, key: String, out: &mut Vec<(String, String)>) {
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                let key = if key.is_empty() {
                    k.clone()
                } else {
                    format!("{key}.{k}")
                };
                walk(v, key, out);
            }
        }
        Value::Array(items) if items.iter().all(|i| !i.is_object() && !i.is_array()) => {
            let joined: Vec<String> = items.iter().map(scalar).collect();
            out.push((key, joined.join(", ")));
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                walk(v, format!("{key}[{i}]"), out);
            }
        }
        _ => out.push((key, scalar(v))),
    }
}

fn scalar(v: &Value) -> String {
    match v {
        Value::Null => "–".into(),
        Value::String(s) => s.clone(),
        Value::Number(n) => n.as_f64().map_or_else(|| n.to_string(), num),
        other => other.to_string(),
    }
}

/// A two-column table of `pairs`.
pub fn kv_table(pairs: &[(String, String)]) -> String {
    let rows: Vec<Vec<String>> = pairs.iter().map(|(k, v)| vec![esc(k), esc(v)]).collect();
    table("kv", &["field", "value"], &rows)
}

/// The run context section's body.
pub fn render(run: &Run) -> String {
    let mut pairs = vec![("folder".to_string(), run.dir.display().to_string())];
    let Some(s) = &run.summary else {
        let mut html = kv_table(&pairs);
        html.push_str(&notes(run));
        return html;
    };
    if let Some(ns) = s.started_unix_ns() {
        pairs.push(("started".into(), utc(ns)));
    }
    if let Some(run_block) = s.section("run") {
        pairs.extend(flatten(run_block));
    }
    // Run-level facts beside the run block (the trace's full load report stays in the file).
    for key in [
        "schema_version",
        "interrupted",
        "unsent",
        "warmup_requests",
        "client_bottleneck",
        "in_flight_cap",
    ] {
        if let Some(v) = s.doc.get(key) {
            for (k, val) in flatten(v) {
                let k = if k.is_empty() {
                    key.to_string()
                } else {
                    format!("{key}.{k}")
                };
                if !pairs.iter().any(|(have, _)| *have == k) {
                    pairs.push((k, val));
                }
            }
        }
    }
    let mut html = kv_table(&pairs);
    if let Some(Value::Object(kinds)) = s.section("errors_by_kind") {
        if !kinds.is_empty() {
            // An HTTP error's count with its statuses (`http_status (429 ×4, 503 ×3)`), as the
            // table says it; a damaged or older summary's kind stands alone.
            let statuses: std::collections::BTreeMap<u16, u64> = s
                .section("errors_by_http_status")
                .and_then(|v| serde_json::from_value(v.clone()).ok())
                .unwrap_or_default();
            let kind = |k: &str, v: &Value| {
                let n = v.as_u64().filter(|_| k == "http_status");
                match n.and_then(|n| canary_core::statuses_text(&statuses, n)) {
                    Some(st) => format!("{k} ({st})"),
                    None => k.to_string(),
                }
            };
            let rows: Vec<Vec<String>> = kinds
                .iter()
                .map(|(k, v)| vec![esc(&kind(k, v)), esc(&scalar(v))])
                .collect();
            html.push_str("<h3>Errors by kind</h3>\n");
            html.push_str(&table("errors", &["kind", "requests"], &rows));
        }
    }
    html.push_str(&causes(s.section("error_causes")));
    html.push_str(&notes(run));
    html
}

/// Why requests failed (`summary.json`'s `error_causes`: the most frequent kinds, statuses
/// and messages, as the run's table prints the first): a table, or nothing when the summary
/// lists none. Read field by field, so another version's cause still shows what it has.
fn causes(list: Option<&Value>) -> String {
    let Some(Value::Array(list)) = list else {
        return String::new();
    };
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|c| {
            let kind = c.get("kind").map_or("–".into(), scalar);
            let cause = match c.get("http_status").and_then(Value::as_u64) {
                Some(status) => format!("{kind} {status}"),
                None => kind,
            };
            let mut message = c.get("message").map_or("–".into(), scalar);
            if c.get("numbers_vary").and_then(Value::as_bool) == Some(true) {
                message.push_str(" (the first of these; the others differ in their numbers)");
            }
            let requests = c.get("requests").map_or("–".into(), scalar);
            vec![esc(&cause), esc(&message), esc(&requests)]
        })
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    let mut html = String::from("<h3>Why requests failed</h3>\n");
    html.push_str(&table(
        "error-causes",
        &["cause", "message", "requests"],
        &rows,
    ));
    html.push_str(&format!(
        "<p class=\"note\">The most frequent causes as summary.json lists them (kind, HTTP \
         status, the message as received, at most {} characters); each count is exact. \
         records.jsonl has every failed request's own.</p>\n",
        canary_core::ErrorCauses::MESSAGE_CHARS
    ));
    html
}

fn notes(run: &Run) -> String {
    if run.notes.is_empty() {
        return String::new();
    }
    let mut html = String::from("<h3>Notes on the artifacts</h3><ul>");
    for n in &run.notes {
        html.push_str(&format!("<li>{}</li>", esc(n)));
    }
    html.push_str("</ul>\n");
    html
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flatten_names_leaves_by_path() {
        let v: Value = serde_json::from_str(
            r#"{"target":{"url":"http://x","model":"m"},"speedup":2.5,"tags":["a","b"],"per_gpu":[{"util":50}]}"#,
        )
        .unwrap();
        let f = flatten(&v);
        assert!(
            f.contains(&("target.url".into(), "http://x".into())),
            "{f:?}"
        );
        assert!(f.contains(&("speedup".into(), "2.50".into())));
        assert!(f.contains(&("tags".into(), "a, b".into())));
        assert!(f.contains(&("per_gpu[0].util".into(), "50".into())));
    }

    #[test]
    fn a_crafted_summary_puts_no_markup_into_the_page() {
        // Someone else's artifacts: a string where a count belongs.
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("records.jsonl"), "").unwrap();
        let form = "<form action=https://evil><input name=p></form>";
        let summary = serde_json::json!({"errors_by_kind": {"timeout": form}});
        std::fs::write(dir.path().join("summary.json"), summary.to_string()).unwrap();
        let html = render(&Run::load(dir.path()).unwrap());
        assert!(!html.contains("<form"), "{html}");
        assert!(html.contains("&lt;form"), "{html}");
    }
}

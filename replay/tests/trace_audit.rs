//! Findings of the trace-reader audit (/work/audit-trace.md), each on a copy of a real trace
//! in `shared/traces/` (see its SOURCES.md) written to a temporary directory and damaged
//! there, the damage said where it is done.

use std::path::{Path, PathBuf};

use canary_replay::trace::{self, LoadOptions, Trace, TraceError};

fn real(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/traces")
        .join(name);
    std::fs::read_to_string(path).unwrap()
}

/// Writes `text` as `name` in `dir`.
fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn load(path: &Path, skip_invalid: bool) -> Result<Trace, TraceError> {
    let opts = LoadOptions {
        skip_invalid,
        ..LoadOptions::default()
    };
    trace::load(path, &opts)
}

fn lines(t: &Trace) -> Vec<u32> {
    let mut l: Vec<u32> = t.requests.iter().map(|r| r.line).collect();
    l.sort_unstable();
    l
}

/// The first `n` rows of the real Kimi conversation trace moved to epoch milliseconds
/// (+1732000000000 ms, 19 Nov 2024), as a trace exported with wall-clock times writes them.
fn epoch_rows(n: usize) -> Vec<serde_json::Value> {
    real("mooncake_conversation_first2000.jsonl")
        .lines()
        .take(n)
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            let t = v["timestamp"].as_u64().unwrap();
            v["timestamp"] = (t + 1_732_000_000_000).into();
            v
        })
        .collect()
}

fn jsonl(rows: &[serde_json::Value]) -> String {
    rows.iter().map(|r| format!("{r}\n")).collect()
}

#[test]
fn one_stray_early_timestamp_is_the_row_blamed_and_skipped() {
    let dir = tempfile::tempdir().unwrap();
    // Damage: row 51's timestamp set to 0 (a default written for a missing time).
    let mut rows = epoch_rows(100);
    rows[50]["timestamp"] = 0.into();
    let path = write(&dir, "stray.jsonl", &jsonl(&rows));

    let err = load(&path, false).unwrap_err().to_string();
    let at = format!(
        "{}:51: field \"timestamp\": expected a time no earlier than",
        path.display()
    );
    assert!(err.starts_with(&at), "{err}");
    assert!(
        err.contains("(line 1, 1732000000000 ms: 99 of the 100 rows lie within 365 days of it)"),
        "{err}"
    );
    assert!(err.ends_with("found 0 ms"), "{err}");

    // --skip-invalid drops the damaged row and keeps the 99 good ones.
    let t = load(&path, true).unwrap();
    let expected: Vec<u32> = (1..=100).filter(|&l| l != 51).collect();
    assert_eq!(lines(&t), expected);
    assert_eq!(t.report.invalid_skipped, 1);
    assert!(
        t.report.warnings[0].contains(":51: field \"timestamp\""),
        "{:?}",
        t.report.warnings
    );
}

#[test]
fn stray_times_on_both_sides_are_each_blamed() {
    let dir = tempfile::tempdir().unwrap();
    // Damage: row 3 stamped 0, row 80 stamped in microseconds (×1000).
    let mut rows = epoch_rows(100);
    rows[2]["timestamp"] = 0.into();
    let late = rows[79]["timestamp"].as_u64().unwrap() * 1000;
    rows[79]["timestamp"] = late.into();
    let path = write(&dir, "both.jsonl", &jsonl(&rows));
    let t = load(&path, true).unwrap();
    let expected: Vec<u32> = (1..=100).filter(|&l| l != 3 && l != 80).collect();
    assert_eq!(lines(&t), expected);
    assert_eq!(t.report.invalid_skipped, 2);
    // In file order; the late one quoted exactly as written, not rounded through a float.
    assert!(
        t.report.warnings[0].contains(":3: field \"timestamp\""),
        "{:?}",
        t.report.warnings
    );
    assert!(
        t.report.warnings[1]
            .contains(":80: field \"timestamp\": expected a time at most 365 days after"),
        "{:?}",
        t.report.warnings
    );
    assert!(
        t.report.warnings[1].contains(&format!("found {late} ms")),
        "{:?}",
        t.report.warnings
    );
}

#[test]
fn a_late_timestamp_is_quoted_as_written() {
    let dir = tempfile::tempdir().unwrap();
    // Damage: line 5 of the arXiv slice stamped 2^53 + 1 ms, which an f64 cannot hold.
    let text: String = real("mooncake_arxiv_first20.jsonl")
        .lines()
        .enumerate()
        .map(|(i, l)| {
            let l = if i == 4 {
                l.replacen("\"timestamp\": 0", "\"timestamp\": 9007199254740993", 1)
            } else {
                l.to_string()
            };
            l + "\n"
        })
        .collect();
    assert!(text.contains("9007199254740993"));
    let path = write(&dir, "late.jsonl", &text);
    let err = load(&path, false).unwrap_err().to_string();
    assert!(err.contains(":5: field \"timestamp\""), "{err}");
    assert!(err.ends_with("found 9007199254740993 ms"), "{err}");
}

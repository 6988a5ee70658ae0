//! Why requests failed, as a user reads it after a run against `canaryd sim` whose every
//! answer is an HTTP error: the status code is part of the cause, in the table, the verdict
//! and `summary.json`. A 429 (rate limit), a 503 (overload) and a 500 call for different
//! actions, and the simulator's bodies for them read the same.

use super::{canaryd, summary};
use crate::common::{sim, text};

#[test]
fn a_429_and_a_503_are_told_apart_in_the_table_the_verdict_and_the_summary() {
    let (_sim, port) = sim(&[]);
    let url = format!("http://127.0.0.1:{port}");
    for status in [429, 503] {
        let dir = tempfile::tempdir().unwrap();
        let fault = format!("x-sim-fault: status={status}");
        let args = [
            "profile",
            "--url",
            &url,
            "--model",
            "canary-sim",
            "--output-dir",
            "out",
            "--no-nvml",
            "--no-ebpf",
            "--request-count",
            "4",
            "-H",
            &fault,
        ];
        let out = canaryd(&args, dir.path());
        // Nothing completed: the run measured nothing of the target.
        assert_eq!(out.status.code(), Some(4), "{}", text(&out));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let cause = format!("4 × http_status {status}: ");
        assert!(
            stdout.contains(&format!("\ntop error cause: {cause}")),
            "{cause:?} not in {stdout}"
        );
        let verdict = stdout
            .lines()
            .find(|l| l.starts_with("verdict: error: target unusable"))
            .unwrap_or_else(|| panic!("no verdict in {stdout}"));
        assert!(
            verdict.contains(&format!("top cause: {cause}")),
            "{verdict}"
        );
        let s = summary(dir.path());
        let top = &s["error_causes"][0];
        assert_eq!(top["kind"], "http_status", "{s}");
        assert_eq!(top["http_status"], status, "{s}");
        assert_eq!(top["requests"], 4, "{s}");
    }
}

/// `429 ×a, 503 ×b` as records.jsonl has the run's failures (the status of each), and the
/// counts `(a, b)`.
fn statuses_in_records(dir: &std::path::Path) -> (String, u64, u64) {
    let records = std::fs::read_to_string(dir.join("out/records.jsonl")).unwrap();
    let (mut a, mut b) = (0, 0);
    for line in records.lines() {
        let r: serde_json::Value = serde_json::from_str(line).unwrap();
        match r["error"]["http_status"].as_u64() {
            Some(429) => a += 1,
            Some(503) => b += 1,
            _ => {}
        }
    }
    (format!("429 ×{a}, 503 ×{b}"), a, b)
}

// One run answered with 429s and 503s (the simulator's fault mix, deterministic under its
// seed): the table, the verdict and the diagnosis said `http_status 12` with no status.
#[test]
fn a_run_of_429s_and_503s_says_how_many_of_each() {
    // Every request fails, then about half: `target unusable`, and `error rate … above`
    // the gate (exit status 3).
    for (rate, code) in [("1", 4), ("0.5", 3)] {
        let (_sim, port) = sim(&[
            "--fault-rate",
            rate,
            "--fault",
            "status=429",
            "--fault",
            "status=503",
            "--seed",
            "7",
        ]);
        let url = format!("http://127.0.0.1:{port}");
        let dir = tempfile::tempdir().unwrap();
        let args = [
            "profile",
            "--url",
            &url,
            "--model",
            "canary-sim",
            "--output-dir",
            "out",
            "--no-nvml",
            "--no-ebpf",
            "--request-count",
            "12",
            "--max-error-rate",
            "0.05",
        ];
        let out = canaryd(&args, dir.path());
        assert_eq!(out.status.code(), Some(code), "{}", text(&out));
        let (statuses, a, b) = statuses_in_records(dir.path());
        assert!(a > 0 && b > 0, "pick another seed: {statuses}");
        let s = summary(dir.path());
        let n = a + b;
        assert_eq!(s["errors_by_kind"]["http_status"], n, "{s}");
        assert_eq!(
            s["errors_by_http_status"],
            serde_json::json!({"429": a, "503": b}),
            "{s}"
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        let table = format!(", errors {n}: http_status {n} ({statuses})), duration ");
        assert!(stdout.contains(&table), "{table:?} not in {stdout}");
        let verdict = stdout
            .lines()
            .find(|l| l.starts_with("verdict: "))
            .unwrap_or_else(|| panic!("no verdict in {stdout}"));
        assert!(
            verdict.contains(&format!("(http_status: {n} ({statuses}))")),
            "{verdict}"
        );
        let why = stdout
            .lines()
            .find(|l| l.starts_with("  why: error_rate "))
            .unwrap_or_else(|| panic!("no target-errors diagnosis in {stdout}"));
        assert!(why.contains(&format!("; http_status {statuses}")), "{why}");
        // The HTML report's errors by kind say them too.
        let report = canaryd(&["report", "out", "-o", "run.html"], dir.path());
        assert!(report.status.success(), "{}", text(&report));
        let html = std::fs::read_to_string(dir.path().join("run.html")).unwrap();
        let row = format!("<td>http_status ({statuses})</td><td class=\"n\">{n}</td>");
        assert!(
            html.contains(&row),
            "{row:?} not in the report's errors by kind"
        );
    }
}

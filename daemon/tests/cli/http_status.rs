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

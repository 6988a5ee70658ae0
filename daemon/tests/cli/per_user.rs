//! Tokens/s per user in one run, against `canaryd sim --profile fast`, whose zero-time decode
//! sends a short answer's tokens back to back, so some arrive in one read: such a request has
//! no time between its first token and its end, and so no per-user rate. The run's table,
//! `summary.json` and report page left those requests out of the figure without a word; they
//! now say how many, of how many, as the sweep does.

use super::canaryd;
use crate::common::{sim, text};
use crate::experiments::assert_valid;
use serde_json::Value;

#[test]
fn one_runs_table_summary_and_report_count_the_requests_without_a_per_user_rate() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (_sim, port) = sim(&[]);
    let url = format!("http://127.0.0.1:{port}");
    let out = canaryd(
        &[
            "profile",
            "--url",
            &url,
            "--model",
            "canary-sim",
            "--isl",
            "64",
            "--osl",
            "8",
            "--concurrency",
            "1",
            "--benchmark-duration",
            "1s",
            "--no-nvml",
            "--no-ebpf",
            "--output-dir",
            "out",
        ],
        dir,
    );
    assert!(out.status.success(), "{}", text(&out));
    let s: Value =
        serde_json::from_slice(&std::fs::read(dir.join("out/summary.json")).unwrap()).unwrap();
    assert_valid(&s, None);

    // Counted from the records themselves: a completed request with an ITL (more than one
    // token) but no rate had ITL 0 ms, every token in one read.
    let records = std::fs::read_to_string(dir.join("out/records.jsonl")).unwrap();
    let (mut rated, mut left) = (0u64, 0u64);
    for l in records.lines() {
        let r: Value = serde_json::from_str(l).unwrap();
        if r["warmup"] == true || r["status"] != "ok" {
            continue;
        }
        match (r["itl_ms"].as_f64(), r["output_tokens_per_s"].as_f64()) {
            (_, Some(_)) => rated += 1,
            (Some(itl), None) => {
                assert_eq!(itl, 0.0, "{r}");
                left += 1
            }
            (None, None) => {}
        }
    }
    assert_eq!(s["per_user_requests"].as_u64(), Some(rated), "{s}");
    assert_eq!(s["per_user_unmeasured"].as_u64(), Some(left), "{s}");
    assert_eq!(
        s["output_token_throughput_per_user"]["count"].as_u64(),
        Some(rated)
    );
    // What the test is for: some answer came in one read. Without any, the old code would
    // pass too.
    assert!(left > 0, "no one-read response: {s}");

    let said = format!(
        "{left} of the {} requests with more than one token had every token in one read",
        left + rated
    );
    // The table: under the per-user row.
    let table = text(&out);
    let row = table
        .lines()
        .position(|l| l.starts_with("output tokens/s per user"))
        .unwrap_or_else(|| panic!("no per-user row: {table}"));
    let next = table.lines().nth(row + 1).unwrap();
    assert!(
        next.starts_with("  note: ") && next.contains(&said),
        "{said}: {table}"
    );

    // The report page of the run.
    let report = canaryd(&["report", "out", "-o", "run.html"], dir);
    assert!(report.status.success(), "{}", text(&report));
    let html = std::fs::read_to_string(dir.join("run.html")).unwrap();
    assert!(html.contains(&said), "{said}: no such note in the page");
    // The page writes counts from 1,000 on with a thousands separator.
    let digits = rated.to_string();
    let shown: String = digits
        .chars()
        .enumerate()
        .flat_map(|(i, c)| {
            let comma = i > 0 && (digits.len() - i) % 3 == 0;
            comma.then_some(',').into_iter().chain([c])
        })
        .collect();
    assert!(
        html.contains(&format!("(median of {shown} requests, not all: see below)")),
        "no per-user tile over {shown} requests"
    );
}

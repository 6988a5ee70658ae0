//! The end-of-run table of `canaryd replay` on a real run (the 20-row Mooncake trace against
//! the simulator): its label column is as wide as its longest label, so every row's figures
//! sit in the header's columns, and the duration says it is an upper bound (audit findings 5
//! and 10: `canaryd's read delay (ms, lower bound)`, 38 characters in a 34-wide column, and
//! `duration … s (exact)` though the run ends at canaryd's read of the last end).
//!
//! What the table holds depends on the host: the read delay row only with the kernel's receive
//! timestamps, marked a lower bound only when some first token was not stamped exactly, and a
//! `note:` line among the rows when some response came in one read. So the run is made with the
//! stamps and without them (`--no-kernel-timestamps`), and what each table must show is read
//! from that run's own `summary.json`.

mod common;

use serde_json::Value;
use std::path::Path;

/// The label column's least width (daemon/src/cli/report.rs `LABEL_WIDTH`).
const LABEL_WIDTH: usize = 34;
/// Six figures follow the label, each 10 wide after a space.
const FIGURES: usize = 6 * 11;
/// The read delay's label, plain and marked a lower bound: 26 and 40 characters, the one
/// label that can pass the least width.
const READ_DELAY: &str = "  canaryd's read delay (ms)";
const READ_DELAY_BOUND: &str = "  canaryd's read delay (ms, lower bound)";
/// The rows' summary keys and labels (a bound's suffix goes inside the parentheses).
const ROWS: [(&str, &str); 17] = [
    ("time_to_first_byte", "TTFB (ms)"),
    ("time_to_first_token", "TTFT (ms)"),
    (
        "time_to_first_token_userspace",
        "  TTFT at canaryd's read (ms)",
    ),
    ("client_read_delay", READ_DELAY),
    ("time_to_second_token", "TTST (ms)"),
    ("time_to_first_output_token", "TTFO (ms)"),
    ("inter_token_latency", "ITL (ms, mean per request)"),
    ("inter_chunk_latency", "inter-chunk gap (ms)"),
    ("request_latency", "request latency (ms)"),
    (
        "output_token_throughput_per_user",
        "output tokens/s per user",
    ),
    ("input_sequence_length", "input length (tokens)"),
    ("output_sequence_length", "output length (tokens)"),
    ("schedule_lag", "schedule lag (ms)"),
    ("dispatch_lag", "  of which dispatch (ms)"),
    ("schedule_hold", "  of which held (ms)"),
    ("connect_wait", "  of which connecting (ms)"),
    (
        "ttft_minus_server_prompt_time",
        "TTFT - server prompt time (ms)",
    ),
];

/// The lines the table prints between its rows that are not rows: the per-user rate's note
/// and how the client times were taken.
const PROSE: [&str; 7] = [
    "  note:",
    "first tokens timed:",
    "ends timed:",
    "response heads timed:",
    "token events:",
    "ITL: a bound",
    "receive timestamps ",
];

/// `canaryd replay` of the 20-row trace into `DIR/OUT` with `extra` flags: its stdout.
fn replay(dir: &Path, url: &str, out: &str, extra: &[&str]) -> String {
    let trace = common::shared("traces/mooncake_arxiv_first20.jsonl");
    let mut args = vec!["replay", "--trace", trace.to_str().unwrap(), "--url", url];
    args.extend(["--model", "canary-sim", "--output-dir", out]);
    args.extend(["--no-nvml", "--no-ebpf"]);
    args.extend(["--speedup", "10", "--scale-lengths", "0.05"]);
    args.extend(extra);
    common::ok(&common::canaryd(&args, dir))
}

/// Whether the run's first tokens are not all the kernel's exact stamps, as its
/// `receive_timestamps` counts say (canary_core's `RxSummary::bounds`).
fn first_token_bound(rx: &Value) -> bool {
    let requests = rx["requests"].as_u64().unwrap_or(0);
    let by = rx["first_token"].as_object().cloned().unwrap_or_default();
    let kernel = by.get("kernel").and_then(Value::as_u64).unwrap_or(0);
    let other = by
        .iter()
        .any(|(k, n)| k != "kernel" && n.as_u64().unwrap_or(0) > 0);
    requests == 0 || other || kernel < requests
}

/// Checks one run's table against its own `summary.json`; `what` names the run.
fn check_table(table: &str, summary: &Value, what: &str) {
    let lines: Vec<&str> = table.lines().collect();
    let head = lines
        .iter()
        .position(|l| l.starts_with("metric "))
        .unwrap_or_else(|| panic!("{what}: no header: {table}"));
    // The table ends with the line that says how its times were taken.
    let tail = head
        + lines[head..]
            .iter()
            .position(|l| l.starts_with("(client: "))
            .unwrap_or_else(|| panic!("{what}: no closing line: {table}"));
    // The header's last column ends where each row's does (its figures right-aligned).
    let end = lines[head].chars().count();
    // Every line between is a row but the prose the table prints among them: a row after the
    // per-user note is checked as well as one before it.
    let rows: Vec<&str> = lines[head + 1..tail]
        .iter()
        .copied()
        .filter(|l| !PROSE.iter().any(|p| l.starts_with(p)))
        .collect();
    for row in &rows {
        assert_eq!(
            row.chars().count(),
            end,
            "{what}: row out of its columns: {row:?}\n{table}"
        );
    }
    // Each figure of the run has its row, the last ones too (after the note, when there is one).
    for (key, label) in ROWS {
        if summary[key].is_object() {
            let stem = label.strip_suffix(')').unwrap_or(label);
            assert!(
                rows.iter().any(|r| r.starts_with(stem)),
                "{what}: no row for {key}: {table}"
            );
        }
    }
    // The label column is as wide as its longest label, at least 34: the read delay's when the
    // run has it and some first token was not stamped exactly (a lower bound then), else 34.
    let read_delay = summary["client_read_delay"].is_object();
    let bound = first_token_bound(&summary["receive_timestamps"]);
    let expected = match (read_delay, bound) {
        (true, true) => READ_DELAY_BOUND,
        (true, false) => READ_DELAY,
        (false, _) => "",
    };
    if read_delay {
        let label = rows
            .iter()
            .find(|r| r.starts_with(READ_DELAY.strip_suffix(')').unwrap()))
            .map(|r| r.chars().take(end - FIGURES).collect::<String>())
            .unwrap_or_else(|| panic!("{what}: no read delay row: {table}"));
        assert_eq!(
            label.trim_end(),
            expected,
            "{what}: {}\n{table}",
            summary["receive_timestamps"]
        );
    }
    let widest = rows
        .iter()
        .map(|r| r.chars().take(end - FIGURES).collect::<String>())
        .map(|l| l.trim_end().chars().count())
        .max()
        .unwrap_or(0);
    assert_eq!(
        end - FIGURES,
        expected.chars().count().max(LABEL_WIDTH),
        "{what}: the label column (widest label {widest}): {table}"
    );
    assert!(widest <= end - FIGURES, "{what}: {table}");
    let duration = lines
        .iter()
        .find(|l| l.starts_with("requests "))
        .unwrap_or_else(|| panic!("{what}: {table}"));
    assert!(
        duration.contains(" s (an upper bound: to the last end as canaryd read it)"),
        "{what}: {duration}"
    );
    assert!(!duration.contains("(exact)"), "{what}: {duration}");
}

#[test]
fn every_row_of_the_table_is_aligned_and_the_duration_is_an_upper_bound() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (_sim, port) = common::sim(&[]);
    let url = format!("http://127.0.0.1:{port}");
    for (out, extra) in [("a", &[][..]), ("b", &["--no-kernel-timestamps"][..])] {
        let table = replay(dir, &url, out, extra);
        let summary = common::json(&dir.join(out).join("summary.json"));
        let what = format!("replay {extra:?}");
        eprintln!(
            "{what}: receive_timestamps {}, read delay row {}",
            summary["receive_timestamps"],
            summary["client_read_delay"].is_object()
        );
        check_table(&table, &summary, &what);
    }
}

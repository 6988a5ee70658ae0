//! The end-of-run table of `canaryd replay` on a real run (the 20-row Mooncake trace against
//! the simulator): its label column is as wide as its longest label, so every row's figures
//! sit in the header's columns, and the duration says it is an upper bound (audit findings 5
//! and 10: `canaryd's read delay (ms, lower bound)`, 38 characters in a 34-wide column, and
//! `duration … s (exact)` though the run ends at canaryd's read of the last end).

mod common;

use std::process::Command;

#[test]
fn every_row_of_the_table_is_aligned_and_the_duration_is_an_upper_bound() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (_sim, port) = common::sim(&[]);
    let url = format!("http://127.0.0.1:{port}");
    let trace = common::shared("traces/mooncake_arxiv_first20.jsonl");
    let o = Command::new(common::CANARYD)
        .args(["replay", "--trace", trace.to_str().unwrap(), "--url", &url])
        .args([
            "--model",
            "canary-sim",
            "--output-dir",
            "a",
            "--no-nvml",
            "--no-ebpf",
        ])
        .args(["--speedup", "10", "--scale-lengths", "0.05"])
        .current_dir(dir)
        .env("RUST_LOG", "warn")
        .output()
        .expect("canaryd runs");
    assert!(o.status.success(), "{}", common::text(&o));
    let table = String::from_utf8_lossy(&o.stdout).into_owned();
    let lines: Vec<&str> = table.lines().collect();
    let head = lines
        .iter()
        .position(|l| l.starts_with("metric "))
        .unwrap_or_else(|| panic!("no header: {table}"));
    // The header's last column ends where each row's does (its figures right-aligned).
    let end = lines[head].chars().count();
    // A row pads its label to the column with two or more spaces; the prose after the rows
    // (how times were taken, which hosts with kernel stamps print) has single spaces only.
    let rows: Vec<&&str> = lines[head + 1..]
        .iter()
        .take_while(|l| {
            !l.trim().is_empty() && !l.starts_with("  note:") && l.trim_start().contains("  ")
        })
        .collect();
    assert!(rows.len() > 5, "{table}");
    for row in &rows {
        assert_eq!(
            row.chars().count(),
            end,
            "row out of its columns: {row:?}\n{table}"
        );
    }
    // What the test is for: a label longer than the old 34-wide column (the read delay's,
    // marked a lower bound) widened it. Six 10-wide figures follow the label, each after a
    // space.
    assert!(end - 6 * 11 > 34, "no label past 34 characters: {table}");
    let duration = lines
        .iter()
        .find(|l| l.starts_with("requests "))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(
        duration.contains(" s (an upper bound: to the last end as canaryd read it)"),
        "{duration}"
    );
    assert!(!duration.contains("(exact)"), "{duration}");
}

//! `canaryd synthesize IN OUT` on the real Mooncake conversation trace, read back by
//! `canaryd analyze-trace` (issue 17).

use super::canaryd;
use crate::common::{shared, text};

fn analysis(dir: &std::path::Path, file: &str) -> serde_json::Value {
    let out = canaryd(&["analyze-trace", "--json", file], dir);
    assert!(out.status.success(), "{}", text(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn synthesize_writes_a_trace_analyze_trace_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let input = shared("traces/mooncake_conversation_first2000.jsonl");
    let input = input.to_str().unwrap();
    let out = canaryd(
        &[
            "synthesize",
            input,
            "out.jsonl",
            "--synthesis-speedup-ratio",
            "2",
            "--prefix-root-multiplier",
            "3",
            "--synthesis-max-isl",
            "4096",
            "--max-osl",
            "256",
        ],
        dir.path(),
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("wrote 2000 rows"), "{}", text(&out));
    let (a, b) = (
        analysis(dir.path(), input),
        analysis(dir.path(), "out.jsonl"),
    );
    assert_eq!(b["requests"], a["requests"]);
    assert_eq!(
        b["input_tokens"]["max"].as_u64().unwrap(),
        4096.min(a["input_tokens"]["max"].as_u64().unwrap())
    );
    assert!(b["output_tokens"]["max"].as_u64().unwrap() <= 256);
    let half = a["duration_s"].as_f64().unwrap() / 2.0;
    assert!(
        (b["duration_s"].as_f64().unwrap() - half).abs() < 1e-3,
        "{b}"
    );
    let reused = |v: &serde_json::Value| v["prefix_reuse"]["block_hit_rate"].as_f64().unwrap();
    assert!(reused(&b) < reused(&a), "three roots share less");

    // An existing file is never overwritten; a zero factor is refused before reading.
    let again = canaryd(&["synthesize", input, "out.jsonl"], dir.path());
    assert!(!again.status.success());
    assert!(text(&again).contains("out.jsonl"), "{}", text(&again));
    let zero = canaryd(
        &["synthesize", input, "other.jsonl", "--speedup-ratio", "0"],
        dir.path(),
    );
    assert!(!zero.status.success());
    assert!(
        text(&zero).contains("speedup ratio: expected a positive number"),
        "{}",
        text(&zero)
    );
    assert!(!dir.path().join("other.jsonl").exists());
}

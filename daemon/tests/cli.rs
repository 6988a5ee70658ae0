//! The `canaryd` binary run as a real process: the demo, analyze-trace, and clear errors on bad
//! input. The replay engine itself is tested in depth by `canary-replay` and `canary-e2e`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn canaryd(args: &[&str], cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_canaryd"))
        .args(args)
        .current_dir(cwd)
        .env("RUST_LOG", "warn")
        .env_remove("OPENAI_API_KEY")
        .output()
        .expect("canaryd runs")
}

fn shared(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared")
        .join(rel)
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn demo_replays_the_bundled_trace_against_the_simulator() {
    let dir = tempfile::tempdir().unwrap();
    let out = canaryd(
        &[
            "demo",
            "--profile",
            "fast",
            "--speedup",
            "100",
            "--max-requests",
            "60",
            "--output-dir",
            "demo-out",
        ],
        dir.path(),
    );
    assert!(out.status.success(), "{}", text(&out));
    let records = std::fs::read_to_string(dir.path().join("demo-out/records.jsonl")).unwrap();
    assert_eq!(records.lines().count(), 60);
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("demo-out/summary.json")).unwrap())
            .unwrap();
    assert_eq!(summary["requests"], 60);
    assert_eq!(summary["errors"], 0);
    assert!(summary["time_to_first_token"]["p50"].as_f64().unwrap() > 0.0);
    assert!(
        summary["total_cached_tokens"].as_u64().unwrap() > 0,
        "the Mooncake slice repeats prefixes"
    );
    assert!(dir.path().join("demo-out/summary.csv").exists());
    assert!(text(&out).contains("TTFT (ms)"), "{}", text(&out));
}

#[test]
fn analyze_trace_reports_the_real_mooncake_slice() {
    let dir = tempfile::tempdir().unwrap();
    let file = shared("traces/mooncake_conversation_first2000.jsonl");
    let out = canaryd(
        &["analyze-trace", "--json", file.to_str().unwrap()],
        dir.path(),
    );
    assert!(out.status.success(), "{}", text(&out));
    let a: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(a["requests"], 2000, "{a}");
    let human = canaryd(&["analyze-trace", file.to_str().unwrap()], dir.path());
    assert!(human.status.success());
    assert!(String::from_utf8_lossy(&human.stdout).contains("2000"));
}

#[test]
fn a_bad_trace_row_is_a_clear_error_naming_file_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(
        &bad,
        "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 5, \"hash_ids\": [1]}\n\
         {\"timestamp\": 5, \"input_length\": \"many\", \"output_length\": 5, \"hash_ids\": [2]}\n",
    )
    .unwrap();
    let out = canaryd(
        &[
            "replay",
            "--trace",
            "bad.jsonl",
            "--url",
            "http://127.0.0.1:9",
            "--model",
            "m",
        ],
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let msg = text(&out);
    assert!(msg.contains("bad.jsonl:2"), "{msg}");
    assert!(msg.contains("input_length"), "{msg}");
    assert!(!msg.contains("panicked"), "{msg}");
}

#[test]
fn an_unreachable_server_gives_connect_errors_not_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let trace = shared("traces/mooncake_arxiv_first20.jsonl");
    // Port 9 (discard) is closed on loopback: every request fails to connect.
    let out = canaryd(
        &[
            "replay",
            "--trace",
            trace.to_str().unwrap(),
            "--url",
            "http://127.0.0.1:9",
            "--model",
            "m",
            "--speedup",
            "1000",
            "--max-requests",
            "5",
            "--output-dir",
            "out",
        ],
        dir.path(),
    );
    assert!(out.status.success(), "{}", text(&out));
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("out/summary.json")).unwrap())
            .unwrap();
    assert_eq!(summary["requests"], 5);
    assert_eq!(summary["errors_by_kind"]["connect"], 5, "{summary}");
}

#[test]
fn api_key_comes_from_a_file_and_never_reaches_artifacts_or_output() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("key"), "sk-canary-SECRET-123\n").unwrap();
    let trace = shared("traces/mooncake_arxiv_first20.jsonl");
    let out = canaryd(
        &[
            "replay",
            "--trace",
            trace.to_str().unwrap(),
            "--url",
            "http://127.0.0.1:9",
            "--model",
            "m",
            "--speedup",
            "1000",
            "--max-requests",
            "2",
            "--output-dir",
            "out",
            "--api-key-file",
            "key",
        ],
        dir.path(),
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(!text(&out).contains("SECRET"));
    for f in ["records.jsonl", "summary.json", "summary.csv"] {
        let body = std::fs::read_to_string(dir.path().join("out").join(f)).unwrap();
        assert!(!body.contains("SECRET"), "{f} leaks the key");
    }
}

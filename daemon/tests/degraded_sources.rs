//! Telemetry endpoints that answer with the wrong page, over a real `canaryd replay --runs 3`
//! against a real `canaryd sim` on loopback: the DCGM URL given the server's own `/metrics`
//! (a common mix-up) is `unavailable`, saying what the page held, not `available: 0 GPU(s)`;
//! a server `/metrics` URL given the API's `/v1/models` (JSON, no Prometheus text) is warned
//! about once per process, not once per run.

mod common;

use common::{shared, text, CANARYD};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

fn summary(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

#[test]
fn wrong_pages_for_dcgm_and_server_metrics_are_said_once_over_a_commands_runs() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, port) = common::sim(&[]);
    let base = format!("http://127.0.0.1:{port}");
    let trace = shared("traces/mooncake_arxiv_first20.jsonl");
    let out = Command::new(CANARYD)
        .args(["replay", "--trace"])
        .arg(&trace)
        .args([
            "--url",
            &base,
            "--model",
            "canary-sim",
            "--output-dir",
            "out",
        ])
        .args(["--speedup", "5", "--runs", "3", "--no-nvml", "--no-ebpf"])
        .args(["--dcgm-url", &format!("{base}/metrics")])
        .args(["--server-metrics-url", &format!("{base}/v1/models")])
        .current_dir(dir.path())
        .env("RUST_LOG", "warn")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .output()
        .unwrap();
    let log = text(&out);
    assert!(out.status.success(), "{log}");
    let warnings = |what: &str| {
        log.lines()
            .filter(|l| l.contains("WARN") && l.contains(what))
            .count()
    };
    // A JSON page with no metric family is no metrics page: unavailable, said once.
    assert_eq!(
        warnings("server /metrics: unavailable: "),
        1,
        "said once over 3 runs: {log}"
    );
    assert_eq!(
        warnings("not a metrics page, no metric family read"),
        1,
        "{log}"
    );
    assert_eq!(
        warnings("dcgm-exporter: unavailable"),
        1,
        "said once over 3 runs: {log}"
    );
    for run in 1..=3 {
        let s = summary(&dir.path().join(format!("out/run-{run}/summary.json")));
        let dcgm = &s["telemetry_sources"]["dcgm"];
        assert_eq!(dcgm["state"], "unavailable", "run {run}: {dcgm}");
        let why = dcgm["reason"].as_str().unwrap();
        // The sim's page is vLLM's: its families are named, none DCGM_FI_*.
        assert!(
            why.starts_with(&format!(
                "{base}/metrics: not a dcgm-exporter page, no DCGM_FI_* metric: "
            )) && why.contains("metric families (first: vllm:"),
            "run {run}: {why}"
        );
        // Each run's own state says why it has no server figures.
        let server = &s["telemetry_sources"]["server_metrics"];
        assert_eq!(server["state"], "unavailable", "run {run}: {server}");
        assert!(
            server.to_string().contains("no metric family read"),
            "run {run}: {server}"
        );
    }
}

//! Which of a `/metrics` page's series the run's server figures are over, and what the
//! diagnosis may conclude from them (audit of the server telemetry, F1, F6, F7).
//!
//! The requests go to `canaryd sim`; the pages are the real captures in `shared/fixtures`,
//! served on loopback by the test, with a real label set duplicated for another model or
//! data-parallel rank (the names, HELP and TYPE lines kept), or with their counters grown.

mod common;

use common::{serve_metrics_pages, shared, text, Child, CANARYD};
use serde_json::Value;
use std::io::{Read, Write};
use std::path::Path;
use std::process::Command;

/// The model the vLLM capture's series are labelled with.
const QWEN: &str = "Qwen/Qwen2.5-Coder-1.5B-Instruct";

fn fixture(name: &str) -> String {
    std::fs::read_to_string(shared(&format!("fixtures/{name}"))).unwrap()
}

/// `canaryd sim` serving `model` with the profile `profile`.
fn sim(dir: &Path, profile: &str, model: &str) -> (Child, u16) {
    common::sim_with_profile(dir, profile, &["--model", model])
}

/// `canaryd replay` of the Mooncake conversation trace against `port` as `model`, with
/// `args`; writes to `dir/out`.
fn replay_cmd(dir: &Path, port: u16, model: &str, args: &[&str]) -> Command {
    let trace = shared("traces/mooncake_conversation_first2000.jsonl");
    let mut cmd = Command::new(CANARYD);
    cmd.args(["replay", "--trace"])
        .arg(&trace)
        .args(["--url", &format!("http://127.0.0.1:{port}")])
        .args(["--model", model, "--no-ebpf", "--no-nvml"])
        .args(["--max-input-tokens", "32", "--max-output-tokens", "16"])
        .args(["--server-metrics-interval", "100ms"])
        .args(args)
        .current_dir(dir)
        .env("RUST_LOG", "warn")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT");
    cmd
}

/// Runs a replay whose `/metrics` are `metrics`: `summary.json` and what it printed.
fn replay(dir: &Path, port: u16, model: &str, metrics: &str, requests: &str) -> (Value, String) {
    let args = [
        "--speedup",
        "60",
        "--max-requests",
        requests,
        "--server-metrics-url",
        metrics,
        "--output-dir",
        "out",
        "--overwrite",
    ];
    let out = replay_cmd(dir, port, model, &args)
        .output()
        .expect("canaryd replay runs");
    let printed = text(&out);
    let summary = dir.join("out/summary.json");
    match std::fs::read(&summary) {
        Ok(b) => (serde_json::from_slice(&b).unwrap(), printed),
        Err(e) => panic!("{}: {e}\n{printed}", summary.display()),
    }
}

/// The vLLM capture with each of its `model_name` series also given to `other`, at `value`'s
/// values where it says (`(name, value)`), else the capture's.
fn two_models(other: &str, values: &[(&str, &str)]) -> String {
    let label = format!("model_name=\"{QWEN}\"");
    let mut page = String::new();
    for line in fixture("vllm_metrics_v0_qwen2.5-coder-1.5b.prom").lines() {
        page += line;
        page += "\n";
        if line.starts_with('#') || !line.contains(&label) {
            continue;
        }
        let copy = line.replace(&label, &format!("model_name=\"{other}\""));
        let name = copy.split('{').next().unwrap();
        let copy = match values.iter().find(|(n, _)| *n == name) {
            Some((_, v)) => format!("{} {v}", copy.rsplit_once(' ').unwrap().0),
            None => copy,
        };
        page += &copy;
        page += "\n";
    }
    page
}

// Audit F1: the server's figures were summed over every `model_name` on the page, the run's
// `--model` never consulted: another model's queue of 20 and full KV cache were the run's.
// Of a page with several models' series, only the run's model's are read, and the source
// says so; when none is the run's, every series is read and the summary says that.
#[test]
fn only_the_runs_models_series_are_read_and_it_is_said() {
    let dir = tempfile::tempdir().unwrap();
    let other = [
        ("vllm:num_requests_waiting", "20.0"),
        ("vllm:num_requests_running", "64.0"),
        ("vllm:gpu_cache_usage_perc", "0.99"),
    ];
    let metrics = serve_metrics_pages(move |_| two_models("other", &other));
    let (_sim, port) = sim(dir.path(), r#"{"profile": "fast"}"#, QWEN);
    let (doc, printed) = replay(dir.path(), port, QWEN, &metrics, "60");
    let server = &doc["server"];
    // The capture's own series: nothing waiting or running, the cache empty.
    for gauge in ["queue_depth", "running_requests", "kv_cache_usage"] {
        assert_eq!(server[gauge]["max"], 0.0, "{gauge}: {server:#}\n{printed}");
    }
    let detail = doc["telemetry_sources"]["server_metrics"]["detail"]
        .as_str()
        .unwrap();
    assert!(
        detail.contains(&format!(
            "read only the series of model_name=\"{QWEN}\" (the run's model; the page has \
             series of 2 models)"
        )),
        "{detail}"
    );
    let class = doc["diagnosis"]["class"].as_str().unwrap();
    assert!(
        !["queueing", "kv-memory-bound"].contains(&class),
        "{:#}",
        doc["diagnosis"]
    );

    // A run of a model the page does not have: every series read, and said once.
    let dir = tempfile::tempdir().unwrap();
    let (_sim, port) = sim(dir.path(), r#"{"profile": "fast"}"#, "canary-sim");
    let (doc, printed) = replay(dir.path(), port, "canary-sim", &metrics, "60");
    let server = &doc["server"];
    assert_eq!(server["queue_depth"]["max"], 20.0, "{server:#}");
    let says = format!(
        "no series of model_name=\"canary-sim\" (the run's model) among the page's 2 models \
         (\"{QWEN}\", \"other\"): every model's series read, other models' traffic included"
    );
    assert_eq!(server["note"], says.as_str(), "{server:#}");
    let warned = format!("{says} (said once)");
    assert_eq!(printed.matches(&warned).count(), 1, "{printed}");
}

// Audit F6: KV-cache usage was the mean over data-parallel ranks, so one rank full at 0.95
// beside one at 0.05 read "max 0.5" and `kv-memory-bound` was clear. The max is the fullest
// rank's; the mean stays the pool's.
#[test]
fn a_full_rank_is_the_kv_max_and_kv_memory_bound() {
    let dir = tempfile::tempdir().unwrap();
    let label = format!("model_name=\"{QWEN}\"");
    let page = fixture("vllm_metrics_v0_qwen2.5-coder-1.5b.prom");
    let mut ranks = String::new();
    for line in page.lines() {
        match line.strip_prefix("vllm:gpu_cache_usage_perc{") {
            Some(rest) => {
                assert!(rest.starts_with(&label), "{line}");
                for (rank, usage) in [("0", "0.95"), ("1", "0.05")] {
                    ranks += &format!(
                        "vllm:gpu_cache_usage_perc{{engine=\"{rank}\",{label}}} {usage}\n"
                    );
                }
            }
            None => ranks += &format!("{line}\n"),
        }
    }
    let metrics = serve_metrics_pages(move |_| ranks.clone());
    let (_sim, port) = sim(dir.path(), r#"{"profile": "fast"}"#, QWEN);
    let (doc, printed) = replay(dir.path(), port, QWEN, &metrics, "150");
    let kv = &doc["server"]["kv_cache_usage"];
    assert_eq!(kv["max"], 0.95, "{kv:#}\n{printed}");
    assert_eq!(kv["mean"], 0.5, "{kv:#}");
    let findings = doc["diagnosis"]["findings"].as_array().unwrap();
    let kv_rule = findings
        .iter()
        .find(|f| f["class"] == "kv-memory-bound")
        .unwrap();
    assert_eq!(kv_rule["state"], "fired", "{kv_rule:#}");
}

// Audit F7: llama.cpp's `prompt_tokens_total` leaves cached tokens out ("excluding cached
// tokens", its HELP), vLLM's and SGLang's count them: `server.prompt_tokens` meant different
// things per engine. With the capture's cached counter beside it, llama.cpp's is cached +
// uncached too.
#[test]
fn llama_cpp_prompt_tokens_count_the_cached_ones() {
    let dir = tempfile::tempdir().unwrap();
    let capture = fixture("llamacpp_server_metrics.prom");
    assert!(capture.contains("excluding cached tokens"));
    // Each scrape, 10 more prompt tokens processed, 30 more reused from the cache, 16 more
    // predicted.
    let metrics = serve_metrics_pages(move |n| {
        let grown = |name: &str| match name {
            "llamacpp:prompt_tokens_total" => Some(42 + 10 * n),
            "llamacpp:prompt_tokens_cached_total" => Some(30 * n),
            "llamacpp:tokens_predicted_total" => Some(81 + 16 * n),
            _ => None,
        };
        capture
            .lines()
            .map(
                |l| match l.split_once(' ').and_then(|(k, _)| Some((k, grown(k)?))) {
                    Some((k, v)) => format!("{k} {v}\n"),
                    None => format!("{l}\n"),
                },
            )
            .collect()
    });
    let (_sim, port) = sim(dir.path(), r#"{"profile": "fast"}"#, "canary-sim");
    let (doc, printed) = replay(dir.path(), port, "canary-sim", &metrics, "60");
    let server = &doc["server"];
    assert_eq!(server["engine"], "llama_cpp", "{server:#}\n{printed}");
    let prompt = server["prompt_tokens"].as_f64().unwrap();
    let generated = server["generation_tokens"].as_f64().unwrap();
    assert!(generated >= 16.0, "{server:#}");
    // 40 prompt tokens (10 + 30 cached) for every 16 generated.
    assert_eq!(prompt / generated, 40.0 / 16.0, "{server:#}");
    assert_eq!(server["prefix_cache_hit_rate"], 0.75, "{server:#}");
}

/// Whether the sim at `port` has counted a finished request on its `/metrics`.
fn sim_counted_a_request(port: u16) -> bool {
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = write!(
        s,
        "GET /metrics HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n"
    );
    let mut page = String::new();
    let _ = s.read_to_string(&mut page);
    page.lines().any(|l| {
        l.starts_with("vllm:e2e_request_latency_seconds_count")
            && l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) > Some(0.0)
    })
}

// Audit F1: `queueing (high confidence)` was stated from server figures the same run had found
// to be over other requests than canaryd's (the client vs server comparison withheld for a
// count mismatch). Another client loads the same engine here: the engine queues, and says
// so, but its figures are every client's, so the diagnosis is not high-confidence and says
// why.
#[test]
fn server_figures_over_other_traffic_are_not_high_confidence() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, port) = sim(dir.path(), r#"{"profile": "capacity"}"#, "canary-sim");
    // The other client: a slower replay of the same trace, running through the measured one.
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    let background = replay_cmd(
        &other,
        port,
        "canary-sim",
        &[
            "--speedup",
            "10",
            "--max-requests",
            "1000",
            "--no-server-metrics",
            "--output-dir",
            "out",
        ],
    )
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null())
    .spawn()
    .unwrap();
    let _background = Child(background);
    common::eventually(60, "the other client's first request", || {
        sim_counted_a_request(port).then_some(())
    });
    let metrics = format!("http://127.0.0.1:{port}/metrics");
    let (doc, printed) = replay(dir.path(), port, "canary-sim", &metrics, "300");
    let comparison = &doc["server"]["comparison"];
    assert_eq!(comparison["state"], "withheld", "{comparison:#}\n{printed}");
    let (server_n, client_n) = (
        comparison["server_n"].clone(),
        comparison["client_n"].clone(),
    );
    let d = &doc["diagnosis"];
    assert_eq!(d["class"], "queueing", "{d:#}\n{printed}");
    assert_ne!(d["confidence"], "high", "{d:#}");
    let why = d["why"].as_str().unwrap();
    let says = format!(
        "the server counted {server_n} requests in the window, canaryd completed {client_n}: \
         its figures include other requests than canaryd's"
    );
    assert!(why.contains(&says), "{why}");
    assert!(printed.contains(&says), "{printed}");
}

//! The real-server tier: canaryd against llama.cpp's `llama-server` running SmolLM2-135M on this
//! CPU, with a slice of the real Mooncake conversation trace.
//!
//! Ignored in the fast tier; `scripts/test.sh` prepares the server, model and tokenizer with
//! `scripts/real-server.sh` and then runs `cargo test -p canaryd --test real_server -- --ignored`.
//! Reasoning and TTFO cannot be tested here: SmolLM2-135M emits no `reasoning_content`.

mod common;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use canary_telemetry::prometheus::parse as parse_metrics;
use common::{shared, Child};
use serde_json::Value;

const REQUESTS: usize = 24;
const SCALE: f64 = 0.0625;
const TRACE: &str = "traces/mooncake_conversation_first2000.jsonl";

fn env_path(var: &str) -> PathBuf {
    let p = std::env::var_os(var).map(PathBuf::from).unwrap_or_else(|| {
        panic!("{var} is not set: run this tier through scripts/test.sh (scripts/real-server.sh sets it)")
    });
    assert!(p.exists(), "{var}={} does not exist", p.display());
    p
}

/// `llama-server` as a child process, killed and reaped on drop.
struct LlamaServer {
    _child: Child,
    port: u16,
}

impl LlamaServer {
    /// On a port it binds itself (`--port 0`), read from its log line "listening on
    /// http://127.0.0.1:PORT" (written once the model is loaded): a port found free and let
    /// go could be taken by another test's server before llama-server binds it.
    fn start(log_path: &Path) -> LlamaServer {
        let log = std::fs::File::create(log_path).unwrap();
        let mut child = Child(
            Command::new(env_path("CANARYD_LLAMA_SERVER"))
                .arg("-m")
                .arg(env_path("CANARYD_LLAMA_MODEL"))
                .args(["--host", "127.0.0.1", "--port", "0"])
                .args(["-c", "8192", "-t", "2", "--metrics", "--alias", "smollm2"])
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("llama-server starts"),
        );
        let deadline = Instant::now() + Duration::from_secs(120);
        let said = "listening on http://127.0.0.1:";
        let mut port = None;
        while Instant::now() < deadline {
            if let Some(exit) = child.0.try_wait().unwrap() {
                let log = std::fs::read_to_string(log_path).unwrap_or_default();
                panic!("llama-server exited ({exit}) before it was healthy:\n{log}");
            }
            port = port.or_else(|| {
                let text = std::fs::read_to_string(log_path).ok()?;
                let rest = text.split(said).nth(1)?;
                rest[..rest.find(|c: char| !c.is_ascii_digit())?]
                    .parse()
                    .ok()
            });
            if let Some(port) = port {
                if http_get(port, "/health").is_some_and(|(status, _)| status == 200) {
                    return LlamaServer {
                        _child: child,
                        port,
                    };
                }
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!("llama-server did not become healthy (port {port:?})");
    }
}

/// A plain HTTP/1.0 GET on loopback: (status, body).
fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut raw = String::new();
    s.read_to_string(&mut raw).ok()?;
    let status = raw.split_whitespace().nth(1)?.parse().ok()?;
    let body = raw.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
    Some((status, body))
}

/// One counter from the server's `/metrics`.
fn counter(port: u16, name: &str) -> f64 {
    let (status, body) = http_get(port, "/metrics").expect("/metrics answers");
    assert_eq!(status, 200, "{body}");
    parse_metrics(&body)
        .sum(name)
        .unwrap_or_else(|| panic!("{name} missing from /metrics:\n{body}"))
}

/// The first-block hash id of each of the trace's first `n` rows.
fn trace_hash_ids(n: usize) -> Vec<Vec<u64>> {
    std::fs::read_to_string(shared(TRACE))
        .unwrap()
        .lines()
        .take(n)
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            v["hash_ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|h| h.as_u64().unwrap())
                .collect()
        })
        .collect()
}

#[test]
#[ignore = "real-server tier: run by scripts/test.sh after scripts/real-server.sh"]
fn mooncake_slice_against_llama_server() {
    let dir = tempfile::tempdir().unwrap();
    let server = LlamaServer::start(&dir.path().join("llama-server.log"));
    let port = server.port;
    let prompt_before = counter(port, "llamacpp:prompt_tokens_total");
    let predicted_before = counter(port, "llamacpp:tokens_predicted_total");

    let trace = shared(TRACE);
    let tokenizer = env_path("CANARYD_LLAMA_TOKENIZER");
    let url = format!("http://127.0.0.1:{port}");
    let out = Command::new(env!("CARGO_BIN_EXE_canaryd"))
        .args(["replay", "--trace", trace.to_str().unwrap(), "--url", &url])
        .args(["--model", "smollm2", "--endpoint-type", "completions"])
        .args(["--max-requests", &REQUESTS.to_string()])
        .args(["--scale-lengths", &SCALE.to_string()])
        .args(["--max-input-tokens", "1500", "--max-output-tokens", "48"])
        .args(["--speedup", "4", "--extra-inputs", r#"{"ignore_eos":true}"#])
        // One request per server slot: queueing happens in canaryd (recorded as `hold_ms`),
        // not inside llama-server, so TTFT minus the server's prompt time is the transport and
        // client share alone.
        .args(["--concurrency", "4"])
        .args(["--tokenizer", tokenizer.to_str().unwrap()])
        .args([
            "--use-server-token-count",
            "--server-metrics-interval",
            "500ms",
        ])
        .args(["--output-dir", "out", "--json"])
        .current_dir(dir.path())
        .env("RUST_LOG", "warn")
        .output()
        .expect("canaryd runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    let summary: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("out/summary.json")).unwrap())
            .unwrap();
    let records: Vec<Value> = std::fs::read_to_string(dir.path().join("out/records.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();

    // Every request completes.
    assert_eq!(records.len(), REQUESTS, "{text}");
    assert_eq!(summary["errors"], 0, "{summary}");

    let hash_ids = trace_hash_ids(2000);
    let mut seen_blocks = HashSet::new();
    let (mut repeated, mut repeated_hits) = (0, 0);
    let (mut prompt_processed, mut prompt_cached, mut predicted) = (0.0, 0.0, 0.0);
    let mut gaps = Vec::new();
    let (mut kernel_server_side, mut head_first) = (Vec::new(), 0);
    for r in &records {
        assert_eq!(r["status"], "ok", "{r}");
        let usage = &r["usage"];
        let timings = &r["server_timings"];
        // With ignore_eos the server generates exactly what was asked.
        assert_eq!(usage["completion_tokens"], r["output_tokens"], "{r}");
        // The prompt was sized with the model's own tokenizer; the server may add a BOS token.
        let asked = r["prompt_tokens_synthesized"]
            .as_u64()
            .unwrap_or_else(|| r["input_tokens"].as_u64().unwrap());
        let got = usage["prompt_tokens"].as_u64().unwrap();
        assert!(
            got.abs_diff(asked) <= 1,
            "asked {asked}, server counted {got}: {r}"
        );

        // Every response event carries the kernel's receive stamp, the run's first ones
        // included: llama-server does not ask for stamps, so on this host only canaryd keeps
        // the kernel's switch on, from before its first connection.
        let rx = &r["rx"];
        assert!(rx["events"].as_u64().unwrap() > 0, "{r}");
        assert_eq!(rx["stamped_events"], rx["events"], "{r}");

        // Prefix reuse where the trace repeats a block the server has already seen.
        let line = r["trace_line"].as_u64().unwrap() as usize;
        let ids = &hash_ids[line - 1];
        let cache_n = timings["cache_n"].as_u64().unwrap();
        // llama-server reports its reuse twice (usage.prompt_tokens_details.cached_tokens and
        // timings.cache_n, see shared/fixtures/llamacpp_server_chat_stream.sse): canaryd must
        // carry both, and they agree.
        let cached = usage["cached_tokens"]
            .as_u64()
            .unwrap_or_else(|| panic!("no usage.cached_tokens in the record: {r}"));
        assert_eq!(cached, cache_n, "{r}");
        if seen_blocks.contains(&ids[0]) {
            repeated += 1;
            repeated_hits += (cache_n > 0) as u32;
        }
        seen_blocks.extend(ids.iter().copied());

        // The client cannot see the first token before the server finished the prompt.
        let ttft = r["ttft_ms"].as_f64().unwrap();
        let prompt_ms = timings["prompt_ms"].as_f64().unwrap();
        assert!(
            ttft >= prompt_ms,
            "TTFT {ttft} ms < server prompt_ms {prompt_ms}: {r}"
        );
        gaps.push(ttft - prompt_ms);
        prompt_processed += timings["prompt_n"].as_f64().unwrap();
        prompt_cached += timings["cache_n"].as_f64().unwrap();
        predicted += usage["completion_tokens"].as_f64().unwrap();

        // eBPF, when this host allows it. llama-server sends its response head before the
        // prefill, so the kernel's first response byte (end of `server_wait`) is not the first
        // token: server wait plus the remainder up to the first-token bytes spans the prompt.
        let kernel = &r["kernel"];
        if let Some(wait) = kernel["server_wait_ms"].as_f64() {
            let server_side = wait + kernel["remainder_ms"].as_f64().unwrap_or(0.0);
            // eBPF's parts end at canaryd's read of the first token (`ttft_ms` is the
            // kernel's receive stamp of it, a few µs before eBPF's `sk_data_ready`).
            let read_ttft = r["rx"]["userspace"]["ttft_ms"].as_f64().unwrap_or(ttft);
            assert!(
                server_side >= prompt_ms && server_side <= read_ttft,
                "server_wait {wait} + remainder: {server_side} ms vs prompt_ms {prompt_ms}: {r}"
            );
            kernel_server_side.push(server_side - prompt_ms);
            head_first += (wait < prompt_ms) as u32;
        }
    }
    // Measured: 14 to 17 of 23. Slots are picked by llama.cpp, and a repeat landing on a
    // slot that never saw the prefix misses, so not all of them hit; a third is the floor.
    assert!(
        repeated > 0 && repeated_hits * 3 >= repeated,
        "{repeated_hits} of {repeated} requests that repeat a prefix hit the server's cache"
    );

    assert_eq!(summary["receive_timestamps"]["state"], "on", "{summary}");

    // The gap is reported, per request, in the summary.
    let gap = &summary["ttft_minus_server_prompt_time"];
    assert_eq!(
        gap["count"].as_u64().unwrap() as usize,
        REQUESTS,
        "{summary}"
    );
    assert!(gap["min"].as_f64().unwrap() >= 0.0, "{gap}");

    // Telemetry: llama.cpp's colon-named counters advance by exactly what the records account
    // for, both in canaryd's own scrape summary and in a direct before/after reading.
    let srv = &summary["server"];
    assert_eq!(srv["engine"], "llama_cpp", "{srv}");
    // The run's context says what the server is, as llama-server itself says it: the build
    // from `/props`, the model from `/v1/models` (the alias), the context length per slot.
    let (status, props) = http_get(port, "/props").expect("/props answers");
    assert_eq!(status, 200, "{props}");
    let props: Value = serde_json::from_str(&props).unwrap();
    let ctx = &summary["context"]["server"];
    assert_eq!(ctx["engine"], "llama_cpp", "{ctx}");
    let build = props["build_info"]
        .as_str()
        .expect("/props gives build_info");
    assert_eq!(ctx["version"], build, "{ctx}");
    assert_eq!(ctx["model"], "smollm2", "{ctx}");
    let n_ctx = &props["default_generation_settings"]["n_ctx"];
    assert!(n_ctx.as_u64().is_some_and(|n| n > 0), "{props}");
    // llama.cpp's /v1/models has no vLLM-style `max_model_len`: it comes from /props' n_ctx.
    assert_eq!(&ctx["max_model_len"], n_ctx, "{ctx}");
    assert_eq!(
        srv["generation_tokens"].as_f64().unwrap(),
        predicted,
        "{srv}"
    );
    // The server's prompt tokens, as vLLM's and SGLang's, count the cached ones too
    // (llama.cpp's prompt_tokens_total counts only those it processed).
    assert_eq!(
        srv["prompt_tokens"].as_f64().unwrap(),
        prompt_processed + prompt_cached,
        "{srv}"
    );
    assert_eq!(
        counter(port, "llamacpp:tokens_predicted_total") - predicted_before,
        predicted
    );
    assert_eq!(
        counter(port, "llamacpp:prompt_tokens_total") - prompt_before,
        prompt_processed
    );

    gaps.sort_by(f64::total_cmp);
    kernel_server_side.sort_by(f64::total_cmp);
    if !kernel_server_side.is_empty() {
        eprintln!(
            "real-server: eBPF on {} requests ({head_first} answered with a head before the prefill); \
             server wait + remainder - prompt_ms median {:.2} ms",
            kernel_server_side.len(),
            kernel_server_side[kernel_server_side.len() / 2]
        );
    }
    eprintln!(
        "real-server: {REQUESTS} requests, {repeated_hits}/{repeated} repeated prefixes hit the cache, \
         TTFT - prompt_ms min {:.2} / median {:.2} / max {:.2} ms, {} cached tokens",
        gaps[0],
        gaps[gaps.len() / 2],
        gaps[gaps.len() - 1],
        summary["total_cached_tokens"]
    );
}

/// Issue 17: a synthetic closed loop (`canaryd profile --isl --osl --concurrency`) against the
/// real server: exact lengths in the server's own counts, and never more requests in flight
/// than users.
#[test]
#[ignore = "real-server tier: run by scripts/test.sh after scripts/real-server.sh"]
fn synthetic_closed_loop_against_llama_server() {
    const USERS: usize = 3;
    const COUNT: usize = 12;
    let dir = tempfile::tempdir().unwrap();
    let server = LlamaServer::start(&dir.path().join("llama-server.log"));
    let port = server.port;
    let predicted_before = counter(port, "llamacpp:tokens_predicted_total");
    let tokenizer = env_path("CANARYD_LLAMA_TOKENIZER");
    let url = format!("http://127.0.0.1:{port}");
    let out = Command::new(env!("CARGO_BIN_EXE_canaryd"))
        .args(["profile", "--url", &url, "--model", "smollm2"])
        .args(["--endpoint-type", "completions"])
        .args(["--isl", "64", "--osl", "16", "--random-seed", "3"])
        .args(["--concurrency", &USERS.to_string()])
        .args(["--request-count", &COUNT.to_string()])
        .args(["--extra-inputs", r#"{"ignore_eos":true}"#])
        .args(["--tokenizer", tokenizer.to_str().unwrap()])
        .args(["--output-dir", "out", "--json"])
        .current_dir(dir.path())
        .env("RUST_LOG", "warn")
        .output()
        .expect("canaryd runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    let summary: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("out/summary.json")).unwrap())
            .unwrap();
    assert_eq!(summary["run"]["load"]["shape"], "closed_loop", "{summary}");
    assert_eq!(summary["errors"], 0, "{summary}");
    let records: Vec<Value> = std::fs::read_to_string(dir.path().join("out/records.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), COUNT, "{text}");
    let mut edges = Vec::new();
    for r in &records {
        assert_eq!(r["usage"]["completion_tokens"], 16, "{r}");
        // Sized with the model's own tokenizer; the server may add a BOS token.
        let got = r["usage"]["prompt_tokens"].as_u64().unwrap();
        assert!(got.abs_diff(64) <= 1, "{r}");
        edges.push((r["sent_at_ms"].as_f64().unwrap(), 1));
        edges.push((r["ended_at_ms"].as_f64().unwrap(), -1));
    }
    // An end sorts before a send at the same instant.
    edges.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let (mut now, mut most) = (0, 0);
    for (_, d) in edges {
        now += d;
        most = most.max(now);
    }
    assert!(most <= USERS as i32, "{most} in flight with {USERS} users");
    assert!(most >= 2, "the users never overlapped");
    // The server's own count of what it generated.
    let predicted = counter(port, "llamacpp:tokens_predicted_total") - predicted_before;
    assert_eq!(predicted, (COUNT * 16) as f64);
}

//! Engines without a real capture in `shared/fixtures` (TensorRT-LLM, SGLang, TGI, Dynamo):
//! `canaryd replay` sends its requests to `canaryd sim` while a loopback HTTP server started
//! here answers `/metrics` with the engine's page, and `summary.json` and the run table must say
//! what the engine's names truly measure (audit of server telemetry, F2–F5).
//!
//! The pages use the engines' own metric names, label names and units, as their sources write
//! them (each page cites where); only the values are chosen, to make what is measured plain.
//! The n-th scrape sees n steps of a steady load.

mod common;

use common::{serve_metrics_pages, shared, text, CANARYD};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// One sample line with its `# HELP` and `# TYPE` lines.
fn metric(name: &str, kind: &str, help: &str, labels: &str, value: f64) -> String {
    format!("# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{{{labels}}} {value}\n")
}

/// A histogram as prometheus_client writes it: cumulative `_bucket`s over `bounds` (seconds
/// or tokens) and `+Inf`, `_count` and `_sum`. `per_bucket` counts the observations in each
/// bucket, the `+Inf` one last.
fn histogram(
    name: &str,
    help: &str,
    labels: &str,
    bounds: &[f64],
    per_bucket: &[u64],
    sum: f64,
) -> String {
    let sep = if labels.is_empty() { "" } else { "," };
    let mut s = format!("# HELP {name} {help}\n# TYPE {name} histogram\n");
    let mut seen = 0;
    for (i, n) in per_bucket.iter().enumerate() {
        seen += n;
        let le = bounds.get(i).map_or("+Inf".to_owned(), |b| b.to_string());
        s += &format!("{name}_bucket{{{labels}{sep}le=\"{le}\"}} {seen}\n");
    }
    s += &format!("{name}_count{{{labels}}} {seen}\n{name}_sum{{{labels}}} {sum}\n");
    s
}

/// `canaryd replay` of 40 requests of the Mooncake conversation trace against the simulator,
/// `/metrics` read from `metrics_url` every 100 ms: `summary.json` (checked against the schema)
/// and what it printed.
fn replay(dir: &Path, metrics_url: &str) -> (Value, String) {
    let (_sim, port) = common::sim(&[]);
    let trace = shared("traces/mooncake_conversation_first2000.jsonl");
    let out = Command::new(CANARYD)
        .args(["replay", "--trace"])
        .arg(&trace)
        .args(["--url", &format!("http://127.0.0.1:{port}")])
        .args(["--model", "canary-sim", "--no-ebpf", "--no-nvml"])
        .args(["--max-requests", "40", "--speedup", "60"])
        .args(["--max-input-tokens", "32", "--max-output-tokens", "16"])
        .args(["--server-metrics-url", metrics_url])
        .args(["--server-metrics-interval", "100ms", "--output-dir", "out"])
        .current_dir(dir)
        .env("RUST_LOG", "warn")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .output()
        .expect("canaryd replay runs");
    let printed = text(&out);
    assert!(out.status.success(), "{printed}");
    let doc: Value =
        serde_json::from_slice(&std::fs::read(dir.join("out/summary.json")).unwrap()).unwrap();
    let schema = Path::new(env!("CARGO_MANIFEST_DIR")).join("../core/summary.schema.json");
    let schema: Value = serde_json::from_slice(&std::fs::read(schema).unwrap()).unwrap();
    let v = jsonschema::draft202012::new(&schema).unwrap();
    let errors: Vec<String> = v
        .iter_errors(&doc)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
    (doc, printed)
}

/// The line of the run table that starts with `label` (after its indent), and the line above.
fn row_and_above<'a>(printed: &'a str, label: &str) -> (&'a str, &'a str) {
    let lines: Vec<&str> = printed.lines().collect();
    let i = lines
        .iter()
        .position(|l| l.trim_start().starts_with(label))
        .unwrap_or_else(|| panic!("no row {label:?} in\n{printed}"));
    (lines[i], lines[i.saturating_sub(1)])
}

/// TensorRT-LLM's `trtllm-serve` page: NVIDIA/TensorRT-LLM `tensorrt_llm/metrics/collector.py`
/// (`MetricsCollector`, `metric_prefix = "trtllm_"`, labels `model_name` and `engine_type`; its
/// HELP texts). 10 requests finish per step, 32 prompt tokens each, 8 of them served from the
/// KV cache; 5 wait, 8 run, the KV cache is 97 % used.
fn trtllm_page(n: u64) -> String {
    let l = "model_name=\"canary-sim\",engine_type=\"trtllm\"";
    let r = 10 * n;
    let secs = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5];
    let mut p = String::new();
    p += &metric(
        "trtllm_num_requests_waiting",
        "gauge",
        "Number of queued requests",
        l,
        5.0,
    );
    p += &metric(
        "trtllm_num_requests_running",
        "gauge",
        "Number of active requests",
        l,
        8.0,
    );
    p += &metric(
        "trtllm_kv_cache_utilization",
        "gauge",
        "KV cache utilization",
        l,
        0.97,
    );
    // The executor's own reuse rate: not read (not the run's hit rate).
    p += &metric(
        "trtllm_kv_cache_hit_rate",
        "gauge",
        "KV cache hit rate",
        l,
        0.5,
    );
    p += &metric(
        "trtllm_prompt_tokens_total",
        "counter",
        "Cumulative number of prompt (input) tokens processed.",
        l,
        (32 * r) as f64,
    );
    p += &metric(
        "trtllm_prompt_cached_tokens_total",
        "counter",
        "Process-lifetime total prompt tokens served from KV cache.",
        l,
        (8 * r) as f64,
    );
    p += &metric(
        "trtllm_generation_tokens_total",
        "counter",
        "Cumulative number of generation (output) tokens produced.",
        l,
        (16 * r) as f64,
    );
    let one_bucket = |i: usize| {
        let mut b = vec![0; secs.len() + 1];
        b[i] = r;
        b
    };
    p += &histogram(
        "trtllm_time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        l,
        &secs,
        &one_bucket(4),
        0.03 * r as f64,
    );
    p += &histogram(
        "trtllm_request_queue_time_seconds",
        "Histogram of time spent in WAITING phase for request.",
        l,
        &secs,
        &one_bucket(3),
        0.015 * r as f64,
    );
    p += &histogram(
        "trtllm_time_per_output_token_seconds",
        "Histogram of time per output token in seconds.",
        l,
        &secs,
        &one_bucket(3),
        0.02 * r as f64,
    );
    p
}

// F5: `trtllm_*` was no engine: "engine not recognized … no server-side figures".
#[test]
fn tensorrt_llm_serve_is_an_engine_with_its_figures() {
    let dir = tempfile::tempdir().unwrap();
    let (doc, printed) = replay(dir.path(), &serve_metrics_pages(trtllm_page));
    let s = &doc["server"];
    assert_eq!(s["engine"], "tensorrt_llm", "{s:#}");
    assert!(s.get("note").is_none(), "{s:#}");
    assert_eq!(s["queue_depth"]["mean"], 5.0, "{s:#}");
    assert_eq!(s["running_requests"]["mean"], 8.0, "{s:#}");
    assert_eq!(s["running_requests_counts"], "in_batch", "{s:#}");
    assert_eq!(s["kv_cache_usage"]["max"], 0.97, "{s:#}");
    // 30 ms TTFT, 15 ms in queue: per request, in seconds.
    assert!(
        (s["ttft_s"]["mean"].as_f64().unwrap() - 0.03).abs() < 1e-9,
        "{s:#}"
    );
    assert!(
        (s["queue_time_s"]["mean"].as_f64().unwrap() - 0.015).abs() < 1e-9,
        "{s:#}"
    );
    // The counters' 8 cached of 32 prompt tokens, not the executor's 0.5 gauge.
    let hit = s["prefix_cache_hit_rate"].as_f64().unwrap();
    assert!((hit - 0.25).abs() < 1e-9, "{s:#}");
    assert_eq!(s["prefix_cache_hit_rate_kind"], "exact", "{s:#}");
    // Its TPOT is one mean per request, printed under the client's per-request ITL.
    assert_eq!(s["itl_observation"], "request_mean", "{s:#}");
    assert!(s.get("client_inter_chunk_latency_ms").is_none(), "{s:#}");
    let (_, above) = row_and_above(&printed, "server ITL (ms, request means)");
    assert!(above.starts_with("ITL (ms, mean per request"), "{printed}");
    assert!(printed.contains("server TTFT (ms, /metrics)"), "{printed}");
}

/// SGLang's page: sgl-project/sglang `python/sglang/srt/metrics/collector.py` (its names, HELP
/// texts and labels; `cached_tokens_total` with `cache_source`) and
/// `srt/managers/scheduler_metrics_mixin.py` (`cache_hit_rate`: the last prefill batch's rate,
/// 0.0 at every decode log). Per step 100 prompt tokens finish, 90 of them cached; one scrape in
/// four follows a prefill log.
fn sglang_page(n: u64) -> String {
    let l = "model_name=\"canary-sim\",engine_type=\"unified\",tp_rank=\"0\",pp_rank=\"0\"";
    let t = "model_name=\"canary-sim\"";
    let r = 10 * n;
    let gauge = if n % 4 == 0 { 0.9 } else { 0.0 };
    let mut p = String::new();
    p += &metric(
        "sglang:cache_hit_rate",
        "gauge",
        "The prefix cache hit rate.",
        l,
        gauge,
    );
    p += &metric(
        "sglang:num_queue_reqs",
        "gauge",
        "The number of requests in the waiting queue.",
        l,
        0.0,
    );
    p += &metric(
        "sglang:num_running_reqs",
        "gauge",
        "The number of running requests.",
        l,
        4.0,
    );
    p += &metric("sglang:token_usage", "gauge", "The token usage.", l, 0.3);
    p += &metric(
        "sglang:prompt_tokens_total",
        "counter",
        "Number of prefill tokens processed.",
        t,
        (100 * n) as f64,
    );
    p += &metric(
        "sglang:cached_tokens_total",
        "counter",
        "Number of cached prompt tokens.",
        &format!("{t},cache_source=\"device\""),
        (90 * n) as f64,
    );
    p += &metric(
        "sglang:generation_tokens_total",
        "counter",
        "Number of generation tokens processed.",
        t,
        (50 * n) as f64,
    );
    p += &histogram(
        "sglang:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        t,
        &[0.1, 0.2, 0.4],
        &[r, 0, 0, 0],
        0.05 * r as f64,
    );
    p
}

// F4: the hit rate was the mean of a gauge SGLang zeroes at every decode log (0.2 here), and
// said nowhere to be a gauge mean.
#[test]
fn sglang_hit_rate_is_its_counters_over_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let (doc, _) = replay(dir.path(), &serve_metrics_pages(sglang_page));
    let s = &doc["server"];
    assert_eq!(s["engine"], "sglang", "{s:#}");
    let hit = s["prefix_cache_hit_rate"].as_f64().unwrap();
    assert!((hit - 0.9).abs() < 1e-9, "{s:#}");
    assert_eq!(s["prefix_cache_hit_rate_kind"], "exact", "{s:#}");
}

/// TGI's page: huggingface/text-generation-inference `docs/source/reference/metrics.md` (names;
/// histograms in seconds, no labels). 10 requests finish per step, each with a 20 ms mean time
/// per token.
fn tgi_page(n: u64) -> String {
    let r = 10 * n;
    let secs = [0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1.0];
    let mut p = String::new();
    p += &metric("tgi_queue_size", "gauge", "Current queue size", "", 0.0);
    p += &metric(
        "tgi_batch_current_size",
        "gauge",
        "Current batch size",
        "",
        4.0,
    );
    p += &histogram(
        "tgi_request_mean_time_per_token_duration",
        "Mean time per token per request (inter-token latency)",
        "",
        &secs,
        &[0, 0, r, 0, 0, 0, 0, 0],
        0.02 * r as f64,
    );
    p += &histogram(
        "tgi_request_duration",
        "End-to-end request latency",
        "",
        &secs,
        &[0, 0, 0, 0, 0, r, 0, 0],
        0.3 * r as f64,
    );
    p += &histogram(
        "tgi_request_input_length",
        "Input token count per request",
        "",
        &[16.0, 32.0, 64.0],
        &[0, r, 0, 0],
        32.0 * r as f64,
    );
    p
}

// F3: TGI's per-request mean was paired with, and printed under, the client's inter-chunk gaps
// (one value per gap), and the README said it was one observation per gap.
#[test]
fn tgi_itl_is_a_mean_per_request_beside_the_clients_per_request_itl() {
    let dir = tempfile::tempdir().unwrap();
    let (doc, printed) = replay(dir.path(), &serve_metrics_pages(tgi_page));
    let s = &doc["server"];
    assert_eq!(s["engine"], "tgi", "{s:#}");
    assert_eq!(s["itl_observation"], "request_mean", "{s:#}");
    assert!(s.get("client_inter_chunk_latency_ms").is_none(), "{s:#}");
    let (_, above) = row_and_above(&printed, "server ITL (ms, request means)");
    assert!(above.starts_with("ITL (ms, mean per request"), "{printed}");
    let (_, above) = row_and_above(&printed, "server e2e (ms, /metrics)");
    assert!(!above.contains("server ITL"), "{printed}");
}

/// A Dynamo frontend's page: ai-dynamo/dynamo `lib/runtime/src/metrics/prometheus_names.rs`
/// (`dynamo_frontend_` + `queued_requests`, "Number of requests waiting in HTTP queue before
/// receiving the first response"; `inflight_requests`; the histograms; label `model`). Every
/// request's TTFT is a 40 ms prefill with nothing queued: the 4 "queued" are the requests
/// awaiting their first token.
fn dynamo_page(n: u64) -> String {
    let l = "model=\"canary-sim\"";
    let r = 20 * n;
    let secs = [0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1.0];
    let mut p = String::new();
    p += &metric(
        "dynamo_frontend_queued_requests",
        "gauge",
        "Number of requests waiting in HTTP queue before receiving the first response",
        l,
        4.0,
    );
    p += &metric(
        "dynamo_frontend_inflight_requests",
        "gauge",
        "Number of inflight requests",
        l,
        30.0,
    );
    p += &histogram(
        "dynamo_frontend_time_to_first_token_seconds",
        "Time to first token in seconds",
        l,
        &secs,
        &[0, 0, 0, r, 0, 0, 0, 0],
        0.04 * r as f64,
    );
    p += &histogram(
        "dynamo_frontend_inter_token_latency_seconds",
        "Inter-token latency in seconds",
        l,
        &secs,
        &[0, 0, 15 * r, 0, 0, 0, 0, 0],
        0.3 * r as f64,
    );
    p += &histogram(
        "dynamo_frontend_request_duration_seconds",
        "Duration of LLM requests",
        l,
        &secs,
        &[0, 0, 0, 0, 0, r, 0, 0],
        0.34 * r as f64,
    );
    p
}

// F2: `queued_requests` was read as queue depth, so pure prefill time was diagnosed
// `queueing` (Little's law over it gives the TTFT).
#[test]
fn dynamo_requests_awaiting_their_first_token_are_no_queue() {
    let dir = tempfile::tempdir().unwrap();
    let (doc, printed) = replay(dir.path(), &serve_metrics_pages(dynamo_page));
    let s = &doc["server"];
    assert_eq!(s["engine"], "dynamo", "{s:#}");
    assert!(s["queue_depth"].is_null(), "{s:#}");
    assert_eq!(s["running_requests"]["mean"], 30.0, "{s:#}");
    assert_eq!(s["running_requests_counts"], "in_flight", "{s:#}");
    assert_eq!(s["itl_observation"], "token_gap", "{s:#}");
    assert!(s["client_inter_chunk_latency_ms"].is_object(), "{s:#}");
    assert_ne!(doc["diagnosis"]["class"], "queueing", "{printed}");
    assert!(!printed.contains("diagnosis: queueing"), "{printed}");
}

/// [`dynamo_page`] with the KV router's scheduler queue, a queue proper
/// (`dynamo_frontend_` + `router_queue_pending_requests`, "Number of requests pending in the
/// router's scheduler queue (gauge per worker_type)"): 3 pending.
fn dynamo_router_page(n: u64) -> String {
    dynamo_page(n)
        + &metric(
            "dynamo_frontend_router_queue_pending_requests",
            "gauge",
            "Number of requests pending in the router's scheduler queue",
            "model=\"canary-sim\",worker_type=\"prefill\"",
            3.0,
        )
}

#[test]
fn dynamo_router_queue_is_its_queue_depth() {
    let dir = tempfile::tempdir().unwrap();
    let (doc, _) = replay(dir.path(), &serve_metrics_pages(dynamo_router_page));
    let s = &doc["server"];
    assert_eq!(s["engine"], "dynamo", "{s:#}");
    assert_eq!(s["queue_depth"]["mean"], 3.0, "{s:#}");
}

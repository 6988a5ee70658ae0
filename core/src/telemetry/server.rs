//! [`RunServerSummary`]: what the server itself saw during one run — its own latency
//! percentiles (estimated from histogram deltas), token counts, queue, batch and KV usage.
//! The telemetry crate computes it from `/metrics` scrapes.

use serde::Serialize;

/// The inference engine behind a `/metrics` endpoint, detected from its metric names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Engine {
    /// vLLM with the V1 engine (`vllm:kv_cache_usage_perc`, prefix-cache counters).
    VllmV1,
    /// vLLM with the V0 engine (`vllm:gpu_cache_usage_perc`, `vllm:num_requests_swapped`).
    VllmV0,
    /// SGLang (`sglang:*`).
    Sglang,
    /// NVIDIA Dynamo's HTTP frontend (`dynamo_frontend_*`), e.g. in front of TensorRT-LLM.
    Dynamo,
    /// Hugging Face text-generation-inference (`tgi_*`).
    Tgi,
    /// llama.cpp's `llama-server --metrics` (`llamacpp:*`).
    LlamaCpp,
    /// None of the above: raw samples only.
    Unknown,
}

/// Percentile estimates from one histogram's delta over a run, in the histogram's unit
/// (seconds for latencies).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LatencyEstimate {
    /// Observations during the run.
    pub count: f64,
    /// `sum / count`.
    pub mean: Option<f64>,
    /// Median, interpolated inside buckets.
    pub p50: Option<f64>,
    /// 90th percentile.
    pub p90: Option<f64>,
    /// 95th percentile.
    pub p95: Option<f64>,
    /// 99th percentile.
    pub p99: Option<f64>,
}

/// Mean and maximum of a gauge over the scrapes of a run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct GaugeStats {
    /// Mean over scrapes (not time-weighted; scrapes are evenly spaced).
    pub mean: f64,
    /// Maximum seen.
    pub max: f64,
    /// Scrapes that had the gauge.
    pub samples: usize,
}

/// Client TTFT minus the server's, ms: network, client overhead and queueing outside the
/// engine. Server percentiles are bucket estimates, so the mean is the firmer figure.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ClientMinusServer {
    /// Of the means.
    pub mean: Option<f64>,
    /// Of the medians.
    pub p50: Option<f64>,
    /// Of the 99th percentiles.
    pub p99: Option<f64>,
}

/// What the server's `/metrics` said about one run: `summary.json`'s `server` section.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RunServerSummary {
    /// The engine detected.
    pub engine: Option<Engine>,
    /// Metric families on the last scrape.
    pub metric_families: usize,
    /// Set when the engine was not recognized: none of the figures below can be filled, and
    /// this says so, with the number of metric families the server exposed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Scrapes in the window (including the bounding ones).
    pub scrapes: usize,
    /// Seconds from the first to the last scrape.
    pub window_s: f64,
    /// Server-side time to first token, seconds.
    pub ttft_s: Option<LatencyEstimate>,
    /// Server-side inter-token latency, seconds.
    pub itl_s: Option<LatencyEstimate>,
    /// Server-side end-to-end latency, seconds.
    pub e2e_s: Option<LatencyEstimate>,
    /// Server-side time in queue, seconds.
    pub queue_time_s: Option<LatencyEstimate>,
    /// Server-side prefill time (admitted → first token), seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefill_time_s: Option<LatencyEstimate>,
    /// Server-side decode time (first token → last token), seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode_time_s: Option<LatencyEstimate>,
    /// Requests the engine preempted during the run (vLLM's `num_preemptions_total`
    /// delta): KV-cache pressure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preemptions: Option<f64>,
    /// Requests swapped out to CPU memory (vLLM V0's `num_requests_swapped`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests_swapped: Option<GaugeStats>,
    /// Prompt tokens the server processed during the run.
    pub prompt_tokens: Option<f64>,
    /// Tokens the server generated during the run.
    pub generation_tokens: Option<f64>,
    /// Requests waiting.
    pub queue_depth: Option<GaugeStats>,
    /// Requests running.
    pub running_requests: Option<GaugeStats>,
    /// KV-cache usage, 0..=1.
    pub kv_cache_usage: Option<GaugeStats>,
    /// Prefix-cache hits / lookups over the run (from counters), else the mean of the
    /// engine's own hit-rate gauge.
    pub prefix_cache_hit_rate: Option<f64>,
    /// The client's TTFT against the server's, when both were measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_minus_server_ttft_ms: Option<ClientMinusServer>,
}

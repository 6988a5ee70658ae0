//! [`RunServerSummary`]: what the server itself saw during one run — its own latency
//! percentiles (bounded by histogram buckets), token counts, queue, batch and KV usage — and
//! whether its figures can be compared with the client's ([`Comparison`]).
//! The telemetry crate computes it from `/metrics` scrapes.

use crate::stats::Stats;
use crate::telemetry::comparison::Comparison;
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

/// What one histogram's delta over a run says, in the histogram's unit (seconds for
/// latencies). The count and mean are exact over the observations the server made in the
/// window (whatever requests those were); the percentiles are only known to the bucket.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LatencyEstimate {
    /// Observations during the window: exact (the `_count` delta).
    pub count: f64,
    /// `sum / count`: exact over those observations.
    pub mean: Option<f64>,
    /// Median: the bucket holding it.
    pub p50: Option<BucketQuantile>,
    /// 90th percentile: the bucket holding it.
    pub p90: Option<BucketQuantile>,
    /// 95th percentile: the bucket holding it.
    pub p95: Option<BucketQuantile>,
    /// 99th percentile: the bucket holding it.
    pub p99: Option<BucketQuantile>,
}

/// A percentile read from a Prometheus histogram: the true value is at least `lower_bound`
/// and at most `upper_bound`, the edges of the bucket holding its rank. `estimate`
/// interpolates inside that bucket as PromQL's `histogram_quantile` does: a guess, where the
/// bounds are not.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct BucketQuantile {
    /// The bucket's lower edge (the previous `le`, or 0): the value is above it.
    pub lower_bound: f64,
    /// The bucket's `le`: the value is at most this; `None` for the `+Inf` bucket.
    pub upper_bound: Option<f64>,
    /// Linear interpolation inside the bucket (the lower bound in the `+Inf` bucket).
    pub estimate: f64,
}

impl BucketQuantile {
    /// The bucket in milliseconds, for a latency in seconds: `100–150` (above 100, at most
    /// 150), `≤ 5` (the lowest bucket) or `> 2560000` (the `+Inf` bucket).
    pub fn range_ms(&self) -> String {
        let lo = self.lower_bound * 1e3;
        match self.upper_bound.map(|u| u * 1e3) {
            None => format!("> {}", short(lo)),
            Some(hi) if lo <= 0.0 => format!("≤ {}", short(hi)),
            Some(hi) => format!("{}–{}", short(lo), short(hi)),
        }
    }
}

/// A bucket edge as written: `150`, `2.5`, `0.001` (no float noise from the unit change).
fn short(v: f64) -> String {
    let s = format!("{v:.6}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

/// Mean and maximum of a gauge over the scrapes of a run. Serialized with what each is:
/// `mean_kind` `estimate` (of the gauge's mean over the run, from its values at the scrapes)
/// and `max_kind` `lower_bound` (the largest value scraped: the gauge may have peaked higher
/// between scrapes).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GaugeStats {
    /// Mean over scrapes (not time-weighted; scrapes are evenly spaced): an estimate.
    pub mean: f64,
    /// Maximum seen at a scrape: a lower bound of the gauge's maximum.
    pub max: f64,
    /// Scrapes that had the gauge.
    pub samples: usize,
}

impl Serialize for GaugeStats {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("GaugeStats", 5)?;
        st.serialize_field("mean", &self.mean)?;
        st.serialize_field("mean_kind", "estimate")?;
        st.serialize_field("max", &self.max)?;
        st.serialize_field("max_kind", "lower_bound")?;
        st.serialize_field("samples", &self.samples)?;
        st.end()
    }
}

/// What the server's `/metrics` said about one run: `summary.json`'s `server` section.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RunServerSummary {
    /// The engine detected.
    pub engine: Option<Engine>,
    /// Metric families on the last scrape.
    pub metric_families: usize,
    /// Set when the engine was not recognized (none of the figures below can be filled; this
    /// says so, with the number of metric families the server exposed), or when a counter went
    /// backwards more than once in the run (the URL likely reaches more than one server
    /// process; token counts, preemptions, the counters' prefix-cache hit rate and latency
    /// histograms are withheld, and this says so).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Scrapes in the window (including the bounding ones).
    pub scrapes: usize,
    /// Seconds from the first to the last scrape.
    pub window_s: f64,
    /// Server-side time to first token, seconds.
    pub ttft_s: Option<LatencyEstimate>,
    /// Server-side inter-token latency, seconds: one observation per token after the first.
    pub itl_s: Option<LatencyEstimate>,
    /// Beside it, the client's comparable figure, ms: every gap between token-bearing chunks
    /// (`inter_chunk_latency`), not the per-request ITL, which is a mean per request. Absent
    /// when the client saw no gap or the server exposed no ITL histogram.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_inter_chunk_latency_ms: Option<Stats>,
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
    /// The client's figures against the server's: made only over the same number of
    /// requests, else withheld with both counts. Absent until compared.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comparison: Option<Comparison>,
}

#[cfg(test)]
mod tests {
    use super::*;

    // summary.json's gauge maxima and means were bare numbers, though each was sampled at the
    // scrapes: the max a lower bound, the mean an estimate.
    #[test]
    fn a_gauge_says_its_max_is_a_lower_bound_and_its_mean_an_estimate() {
        let g = GaugeStats {
            mean: 1.5,
            max: 4.0,
            samples: 12,
        };
        assert_eq!(
            serde_json::to_value(g).unwrap(),
            serde_json::json!({"mean": 1.5, "mean_kind": "estimate", "max": 4.0,
                               "max_kind": "lower_bound", "samples": 12})
        );
    }

    #[test]
    fn buckets_print_as_their_edges_in_ms() {
        let q = |lower_bound, upper_bound| BucketQuantile {
            lower_bound,
            upper_bound,
            estimate: lower_bound,
        };
        assert_eq!(q(0.1, Some(0.15)).range_ms(), "100–150");
        assert_eq!(q(0.0, Some(0.005)).range_ms(), "≤ 5");
        assert_eq!(q(0.0025, Some(0.005)).range_ms(), "2.5–5");
        assert_eq!(q(2560.0, None).range_ms(), "> 2560000");
    }
}

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
    /// TensorRT-LLM's own `trtllm-serve` (`trtllm_*`), or a Dynamo worker passing its names on.
    TensorrtLlm,
    /// Hugging Face text-generation-inference (`tgi_*`).
    Tgi,
    /// llama.cpp's `llama-server --metrics` (`llamacpp:*`).
    LlamaCpp,
    /// None of the above: raw samples only.
    Unknown,
}

impl Engine {
    /// Whether the engine's server ITL histogram holds one observation per request, that
    /// request's mean time per output token (TGI's `tgi_request_mean_time_per_token_duration`,
    /// TensorRT-LLM's `trtllm_time_per_output_token_seconds`), not one per token gap. Its
    /// comparable client figure is then the per-request ITL, not the inter-chunk gaps, and its
    /// percentiles are of per-request means (a p99 far below the gaps' p99).
    pub fn itl_is_request_mean(self) -> bool {
        matches!(self, Engine::Tgi | Engine::TensorrtLlm)
    }

    /// Whether the run's prefix-cache hit rate comes from counters (hits and lookups, or cached
    /// and all prompt tokens): exact over the run's window. vLLM V0 has only a gauge of its hit
    /// rate since the server started, whose mean over the scrapes is an estimate.
    pub fn hit_rate_from_counters(self) -> bool {
        matches!(
            self,
            Engine::VllmV1 | Engine::Sglang | Engine::LlamaCpp | Engine::TensorrtLlm
        )
    }

    /// Whether the engine's running-requests gauge counts every request in flight, waiting and
    /// prefilling ones included (Dynamo's `dynamo_frontend_inflight_requests`): an upper bound
    /// of those in the running batch.
    pub fn running_is_in_flight(self) -> bool {
        matches!(self, Engine::Dynamo)
    }
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
/// Serialized with what the engine's figures are (`itl_observation`, `running_requests_counts`,
/// `prefix_cache_hit_rate_kind`), which depends on the engine, beside them.
#[derive(Debug, Clone, Default, PartialEq)]
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
    pub note: Option<String>,
    /// Scrapes in the window (including the bounding ones).
    pub scrapes: usize,
    /// Seconds from the first to the last scrape.
    pub window_s: f64,
    /// Server-side time to first token, seconds.
    pub ttft_s: Option<LatencyEstimate>,
    /// Server-side inter-token latency, seconds: one observation per token gap (vLLM, SGLang,
    /// Dynamo), or one per request, its mean time per token, where
    /// [`Engine::itl_is_request_mean`] (TGI, TensorRT-LLM). `itl_observation` says which.
    pub itl_s: Option<LatencyEstimate>,
    /// Beside a per-gap server ITL, the client's comparable figure, ms: every gap between
    /// token-bearing chunks (`inter_chunk_latency`), not the per-request ITL, which is a mean
    /// per request. Absent when the client saw no gap, the server exposed no ITL histogram, or
    /// its ITL is a mean per request (then the client's per-request ITL is the comparable one).
    pub client_inter_chunk_latency_ms: Option<Stats>,
    /// Server-side end-to-end latency, seconds.
    pub e2e_s: Option<LatencyEstimate>,
    /// Server-side time in queue, seconds.
    pub queue_time_s: Option<LatencyEstimate>,
    /// Server-side prefill time (admitted → first token), seconds.
    pub prefill_time_s: Option<LatencyEstimate>,
    /// Server-side decode time (first token → last token), seconds.
    pub decode_time_s: Option<LatencyEstimate>,
    /// Requests the engine preempted during the run (vLLM's `num_preemptions_total`
    /// delta): KV-cache pressure.
    pub preemptions: Option<f64>,
    /// Requests swapped out to CPU memory (vLLM V0's `num_requests_swapped`).
    pub requests_swapped: Option<GaugeStats>,
    /// Prompt tokens the server processed during the run.
    pub prompt_tokens: Option<f64>,
    /// Tokens the server generated during the run.
    pub generation_tokens: Option<f64>,
    /// Requests waiting in the engine's queue (for Dynamo, its KV router's queue: its
    /// `queued_requests` counts every request awaiting its first token, prefill included).
    pub queue_depth: Option<GaugeStats>,
    /// Requests running: in the running batch, or for Dynamo every request in flight
    /// ([`Engine::running_is_in_flight`]); `running_requests_counts` says which.
    pub running_requests: Option<GaugeStats>,
    /// KV-cache usage, 0..=1.
    pub kv_cache_usage: Option<GaugeStats>,
    /// Prefix-cache hits / lookups over the run (from counters: exact), else the mean of the
    /// engine's own hit-rate gauge (vLLM V0: an estimate); `prefix_cache_hit_rate_kind` says
    /// which ([`Engine::hit_rate_from_counters`]).
    pub prefix_cache_hit_rate: Option<f64>,
    /// The client's figures against the server's: made only over the same number of
    /// requests, else withheld with both counts. Absent until compared.
    pub comparison: Option<Comparison>,
}

impl RunServerSummary {
    /// Whether the server's ITL is one mean per request (see [`Engine::itl_is_request_mean`]).
    fn itl_is_request_mean(&self) -> bool {
        self.engine.is_some_and(Engine::itl_is_request_mean)
    }

    /// The client's figure (a `RunSummary::metrics` key) the server's ITL compares with: the
    /// gaps between token-bearing chunks (`inter_chunk_latency`) for a per-gap server ITL, the
    /// per-request ITL (`inter_token_latency`) for a per-request mean.
    pub fn itl_client_metric(&self) -> &'static str {
        match self.itl_is_request_mean() {
            true => "inter_token_latency",
            false => "inter_chunk_latency",
        }
    }

    /// The run table's label for the server's ITL, printed under [`Self::itl_client_metric`]'s row.
    pub fn itl_label(&self) -> &'static str {
        match self.itl_is_request_mean() {
            true => "  server ITL (ms, mean per request, /metrics)",
            false => "  server ITL (ms, /metrics)",
        }
    }
}

impl Serialize for RunServerSummary {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // Every field named: one added to the struct fails to build until it is written here.
        let RunServerSummary {
            engine,
            metric_families,
            note,
            scrapes,
            window_s,
            ttft_s,
            itl_s,
            client_inter_chunk_latency_ms,
            e2e_s,
            queue_time_s,
            prefill_time_s,
            decode_time_s,
            preemptions,
            requests_swapped,
            prompt_tokens,
            generation_tokens,
            queue_depth,
            running_requests,
            kv_cache_usage,
            prefix_cache_hit_rate,
            comparison,
        } = self;
        // What each engine-dependent figure is, said only beside a figure.
        let known = |present: bool| engine.filter(|e| present && *e != Engine::Unknown);
        let itl_observation = known(itl_s.is_some()).map(|e| match e.itl_is_request_mean() {
            true => "request_mean",
            false => "token_gap",
        });
        let running_requests_counts =
            known(running_requests.is_some()).map(|e| match e.running_is_in_flight() {
                true => "in_flight",
                false => "in_batch",
            });
        let prefix_cache_hit_rate_kind =
            known(prefix_cache_hit_rate.is_some()).map(|e| match e.hit_rate_from_counters() {
                true => "exact",
                false => "estimate",
            });
        #[derive(Serialize)]
        struct Out<'a> {
            engine: Option<&'a Engine>,
            metric_families: usize,
            #[serde(skip_serializing_if = "Option::is_none")]
            note: Option<&'a String>,
            scrapes: usize,
            window_s: f64,
            ttft_s: Option<&'a LatencyEstimate>,
            itl_s: Option<&'a LatencyEstimate>,
            #[serde(skip_serializing_if = "Option::is_none")]
            itl_observation: Option<&'static str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            client_inter_chunk_latency_ms: Option<&'a Stats>,
            e2e_s: Option<&'a LatencyEstimate>,
            queue_time_s: Option<&'a LatencyEstimate>,
            #[serde(skip_serializing_if = "Option::is_none")]
            prefill_time_s: Option<&'a LatencyEstimate>,
            #[serde(skip_serializing_if = "Option::is_none")]
            decode_time_s: Option<&'a LatencyEstimate>,
            #[serde(skip_serializing_if = "Option::is_none")]
            preemptions: Option<&'a f64>,
            #[serde(skip_serializing_if = "Option::is_none")]
            requests_swapped: Option<&'a GaugeStats>,
            prompt_tokens: Option<&'a f64>,
            generation_tokens: Option<&'a f64>,
            queue_depth: Option<&'a GaugeStats>,
            running_requests: Option<&'a GaugeStats>,
            #[serde(skip_serializing_if = "Option::is_none")]
            running_requests_counts: Option<&'static str>,
            kv_cache_usage: Option<&'a GaugeStats>,
            prefix_cache_hit_rate: Option<&'a f64>,
            #[serde(skip_serializing_if = "Option::is_none")]
            prefix_cache_hit_rate_kind: Option<&'static str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            comparison: Option<&'a Comparison>,
        }
        Out {
            engine: engine.as_ref(),
            metric_families: *metric_families,
            note: note.as_ref(),
            scrapes: *scrapes,
            window_s: *window_s,
            ttft_s: ttft_s.as_ref(),
            itl_s: itl_s.as_ref(),
            itl_observation,
            client_inter_chunk_latency_ms: client_inter_chunk_latency_ms.as_ref(),
            e2e_s: e2e_s.as_ref(),
            queue_time_s: queue_time_s.as_ref(),
            prefill_time_s: prefill_time_s.as_ref(),
            decode_time_s: decode_time_s.as_ref(),
            preemptions: preemptions.as_ref(),
            requests_swapped: requests_swapped.as_ref(),
            prompt_tokens: prompt_tokens.as_ref(),
            generation_tokens: generation_tokens.as_ref(),
            queue_depth: queue_depth.as_ref(),
            running_requests: running_requests.as_ref(),
            running_requests_counts,
            kv_cache_usage: kv_cache_usage.as_ref(),
            prefix_cache_hit_rate: prefix_cache_hit_rate.as_ref(),
            prefix_cache_hit_rate_kind,
            comparison: comparison.as_ref(),
        }
        .serialize(s)
    }
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

    // Audit F2-F4: summary.json said neither that TGI's ITL is one mean per request, nor that
    // Dynamo's running requests include waiting ones, nor whether a hit rate was exact.
    #[test]
    fn the_server_section_says_what_the_engines_figures_are() {
        let est = LatencyEstimate {
            count: 3.0,
            mean: Some(0.02),
            p50: None,
            p90: None,
            p95: None,
            p99: None,
        };
        let gauge = GaugeStats {
            mean: 2.0,
            max: 3.0,
            samples: 4,
        };
        let json = |engine: Engine| {
            let s = RunServerSummary {
                engine: Some(engine),
                itl_s: Some(est),
                running_requests: Some(gauge),
                prefix_cache_hit_rate: Some(0.5),
                ..Default::default()
            };
            let v = serde_json::to_value(&s).unwrap();
            let key = |k: &str| v.get(k).and_then(|x| x.as_str()).map(str::to_owned);
            (
                key("itl_observation"),
                key("running_requests_counts"),
                key("prefix_cache_hit_rate_kind"),
            )
        };
        let some = |s: &str| Some(s.to_owned());
        assert_eq!(
            json(Engine::Tgi),
            (some("request_mean"), some("in_batch"), some("estimate"))
        );
        assert_eq!(
            json(Engine::TensorrtLlm),
            (some("request_mean"), some("in_batch"), some("exact"))
        );
        assert_eq!(
            json(Engine::Dynamo),
            (some("token_gap"), some("in_flight"), some("estimate"))
        );
        assert_eq!(
            json(Engine::Sglang),
            (some("token_gap"), some("in_batch"), some("exact"))
        );
        assert_eq!(json(Engine::VllmV0).2, some("estimate"));
        assert_eq!(json(Engine::Unknown), (None, None, None));
        // Said only beside a figure; the keys written before stay as they were.
        let v = serde_json::to_value(RunServerSummary {
            engine: Some(Engine::Tgi),
            ..Default::default()
        })
        .unwrap();
        for k in [
            "itl_observation",
            "running_requests_counts",
            "prefix_cache_hit_rate_kind",
            "note",
            "comparison",
            "client_inter_chunk_latency_ms",
        ] {
            assert!(v.get(k).is_none(), "{k}: {v}");
        }
        for k in ["engine", "itl_s", "queue_depth", "prefix_cache_hit_rate"] {
            assert!(v.get(k).is_some(), "{k}: {v}");
        }
        assert_eq!(v["engine"], "tgi");
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

//! [`RunServerSummary`]: what the server itself saw during one replay run — its own latency
//! percentiles (estimated from histogram deltas), token counts, queue, batch and KV usage.

use crate::engine::{counter_delta, Engine, ServerSample};
use crate::prometheus::HistogramSnapshot;

/// Percentile estimates from one histogram's delta over a run, in the histogram's unit
/// (seconds for latencies).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
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

impl LatencyEstimate {
    /// Estimates from a histogram (usually a run delta); `None` with no observations.
    pub fn from_histogram(h: &HistogramSnapshot) -> Option<LatencyEstimate> {
        let count = h.total();
        (count > 0.0).then(|| LatencyEstimate {
            count,
            mean: h.mean(),
            p50: h.quantile(0.5),
            p90: h.quantile(0.9),
            p95: h.quantile(0.95),
            p99: h.quantile(0.99),
        })
    }
}

/// Mean and maximum of a gauge over the scrapes of a run.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct GaugeStats {
    /// Mean over scrapes (not time-weighted; scrapes are evenly spaced).
    pub mean: f64,
    /// Maximum seen.
    pub max: f64,
    /// Scrapes that had the gauge.
    pub samples: usize,
}

impl GaugeStats {
    fn over(values: impl Iterator<Item = f64>) -> Option<GaugeStats> {
        let (mut n, mut sum, mut max) = (0usize, 0.0, f64::NEG_INFINITY);
        for v in values.filter(|v| v.is_finite()) {
            n += 1;
            sum += v;
            max = max.max(v);
        }
        (n > 0).then(|| GaugeStats {
            mean: sum / n as f64,
            max,
            samples: n,
        })
    }
}

/// What the server's `/metrics` said about one run.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
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
}

/// Sum of reset-aware deltas of a counter over consecutive samples.
fn counter_growth(
    samples: &[ServerSample],
    f: impl Fn(&ServerSample) -> Option<f64>,
) -> Option<f64> {
    let values: Vec<f64> = samples.iter().filter_map(&f).collect();
    (values.len() >= 2).then(|| values.windows(2).map(|w| counter_delta(w[0], w[1])).sum())
}

fn hist_delta(
    samples: &[ServerSample],
    f: impl Fn(&ServerSample) -> Option<&HistogramSnapshot>,
) -> Option<LatencyEstimate> {
    let first = samples.iter().find_map(&f)?;
    let last = samples.iter().rev().find_map(&f)?;
    LatencyEstimate::from_histogram(&last.delta(first))
}

impl RunServerSummary {
    /// Summarizes time-ordered samples spanning a run, from the last scrape before it to the
    /// first after it (see `ServerMetrics::run_window`).
    pub fn from_samples(samples: &[ServerSample]) -> RunServerSummary {
        let (Some(first), Some(last)) = (samples.first(), samples.last()) else {
            return RunServerSummary::default();
        };
        let hits = counter_growth(samples, |s| s.prefix_cache_hits);
        let queries = counter_growth(samples, |s| s.prefix_cache_queries);
        let prefix_cache_hit_rate = match (hits, queries) {
            (Some(h), Some(q)) if q > 0.0 => Some((h / q).clamp(0.0, 1.0)),
            _ => GaugeStats::over(samples.iter().filter_map(|s| s.prefix_cache_hit_rate_gauge))
                .map(|g| g.mean),
        };
        let note = (last.engine == Some(Engine::Unknown)).then(|| {
            format!(
                "engine not recognized ({} metric families, none of vLLM, SGLang, Dynamo, TGI \
                 or llama.cpp): no server-side figures",
                last.families
            )
        });
        RunServerSummary {
            engine: last.engine,
            metric_families: last.families,
            note,
            scrapes: samples.len(),
            window_s: last.at.since(first.at).as_secs_f64(),
            ttft_s: hist_delta(samples, |s| s.ttft.as_ref()),
            itl_s: hist_delta(samples, |s| s.itl.as_ref()),
            e2e_s: hist_delta(samples, |s| s.e2e.as_ref()),
            queue_time_s: hist_delta(samples, |s| s.queue_time.as_ref()),
            prompt_tokens: counter_growth(samples, |s| s.prompt_tokens_total),
            generation_tokens: counter_growth(samples, |s| s.generation_tokens_total),
            queue_depth: GaugeStats::over(samples.iter().filter_map(|s| s.queue_depth)),
            running_requests: GaugeStats::over(samples.iter().filter_map(|s| s.running_requests)),
            kv_cache_usage: GaugeStats::over(samples.iter().filter_map(|s| s.kv_cache_usage)),
            prefix_cache_hit_rate,
        }
    }
}

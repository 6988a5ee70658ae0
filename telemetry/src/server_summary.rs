//! [`server_summary`]: what the server itself saw during one run — its own latency
//! percentiles (bounded by the buckets of histogram deltas), token counts, queue, batch and
//! KV usage — as `canary_core`'s [`RunServerSummary`].

use crate::engine::{counter_delta, ServerSample};
use crate::prometheus::HistogramSnapshot;
use canary_core::{Engine, GaugeStats, LatencyEstimate, RunServerSummary};

/// Count, mean and bucket-bounded percentiles of a histogram (usually a run delta); `None`
/// with no observations.
pub fn latency_estimate(h: &HistogramSnapshot) -> Option<LatencyEstimate> {
    let count = h.total();
    (count > 0.0).then(|| LatencyEstimate {
        count,
        mean: h.mean(),
        p50: h.quantile_bucket(0.5),
        p90: h.quantile_bucket(0.9),
        p95: h.quantile_bucket(0.95),
        p99: h.quantile_bucket(0.99),
    })
}

/// Mean and maximum of a gauge's finite values; `None` without one.
fn gauge_stats(values: impl Iterator<Item = f64>) -> Option<GaugeStats> {
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

/// Sum of reset-aware deltas of a counter over consecutive samples.
fn counter_growth(
    samples: &[ServerSample],
    f: impl Fn(&ServerSample) -> Option<f64>,
) -> Option<f64> {
    let values: Vec<f64> = samples.iter().filter_map(&f).collect();
    (values.len() >= 2).then(|| values.windows(2).map(|w| counter_delta(w[0], w[1])).sum())
}

/// What a histogram gained over the run: the sum of each scrape's gain over the one before
/// (a server restart is a step that starts from zero, by [`HistogramSnapshot::delta`]'s own
/// rule), as counters are summed. The last scrape less the first missed a restart whose
/// counts grew back past the first's.
fn hist_delta(
    samples: &[ServerSample],
    f: impl Fn(&ServerSample) -> Option<&HistogramSnapshot>,
) -> Option<LatencyEstimate> {
    let snaps: Vec<&HistogramSnapshot> = samples.iter().filter_map(&f).collect();
    let gained = match snaps.as_slice() {
        [] => return None,
        [one] => one.delta(one),
        _ => snaps
            .windows(2)
            .map(|w| w[1].delta(w[0]))
            .reduce(|a, b| a.merge(&b))?,
    };
    latency_estimate(&gained)
}

/// Summarizes time-ordered samples spanning a run, from the last scrape before it to the
/// first after it (see `ServerMetrics::run_window`).
pub fn server_summary(samples: &[ServerSample]) -> RunServerSummary {
    let (Some(first), Some(last)) = (samples.first(), samples.last()) else {
        return RunServerSummary::default();
    };
    let hits = counter_growth(samples, |s| s.prefix_cache_hits);
    let queries = counter_growth(samples, |s| s.prefix_cache_queries);
    let prefix_cache_hit_rate = match (hits, queries) {
        (Some(h), Some(q)) if q > 0.0 => Some((h / q).clamp(0.0, 1.0)),
        _ => gauge_stats(samples.iter().filter_map(|s| s.prefix_cache_hit_rate_gauge))
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
        client_inter_chunk_latency_ms: None,
        e2e_s: hist_delta(samples, |s| s.e2e.as_ref()),
        queue_time_s: hist_delta(samples, |s| s.queue_time.as_ref()),
        prefill_time_s: hist_delta(samples, |s| s.prefill_time.as_ref()),
        decode_time_s: hist_delta(samples, |s| s.decode_time.as_ref()),
        preemptions: counter_growth(samples, |s| s.preemptions_total),
        requests_swapped: gauge_stats(samples.iter().filter_map(|s| s.requests_swapped)),
        prompt_tokens: counter_growth(samples, |s| s.prompt_tokens_total),
        generation_tokens: counter_growth(samples, |s| s.generation_tokens_total),
        queue_depth: gauge_stats(samples.iter().filter_map(|s| s.queue_depth)),
        running_requests: gauge_stats(samples.iter().filter_map(|s| s.running_requests)),
        kv_cache_usage: gauge_stats(samples.iter().filter_map(|s| s.kv_cache_usage)),
        prefix_cache_hit_rate,
        comparison: None,
    }
}

//! [`server_summary`]: what the server itself saw during one run — its own latency
//! percentiles (bounded by the buckets of histogram deltas), token counts, queue, batch and
//! KV usage — as `canary_core`'s [`RunServerSummary`].

use crate::engine::ServerSample;
use crate::growth::{Hist, Walk};
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

/// What the cumulative signals gained over a run's samples, judged per series
/// ([`Walk`]): each step's growth added up (`None` where no step had the signal), and why it is
/// not to be reported, when a series went backwards more than once.
struct Gained {
    prompt_tokens: Option<f64>,
    generation_tokens: Option<f64>,
    preemptions: Option<f64>,
    prefix_hits: Option<f64>,
    prefix_queries: Option<f64>,
    hists: [Option<HistogramSnapshot>; 6],
    flipping: Option<String>,
}

fn gained(samples: &[ServerSample]) -> Gained {
    let mut walk = Walk::default();
    let add = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => Some(a + b),
        (x, None) | (None, x) => x,
    };
    let mut g = Gained {
        prompt_tokens: None,
        generation_tokens: None,
        preemptions: None,
        prefix_hits: None,
        prefix_queries: None,
        hists: Default::default(),
        flipping: None,
    };
    for s in samples {
        let step = walk.step(s);
        g.prompt_tokens = add(g.prompt_tokens, step.prompt_tokens);
        g.generation_tokens = add(g.generation_tokens, step.generation_tokens);
        g.preemptions = add(g.preemptions, step.preemptions);
        g.prefix_hits = add(g.prefix_hits, step.prefix_hits);
        g.prefix_queries = add(g.prefix_queries, step.prefix_queries);
        for (sum, d) in g.hists.iter_mut().zip(step.hists) {
            *sum = match (sum.take(), d) {
                (Some(a), Some(b)) => Some(a.merge(&b)),
                (x, None) | (None, x) => x,
            };
        }
    }
    g.flipping = walk.flipping();
    g
}

/// Says which counters or histograms had more label sets than `growth::MAX_SERIES` in any
/// sample: their growth was judged merged over label sets.
fn merged_note(samples: &[ServerSample]) -> Option<String> {
    let mut names: Vec<&str> = Vec::new();
    for m in samples.iter().flat_map(|s| &s.merged_only) {
        let name = m.split(" (").next().unwrap_or(m);
        if !names.contains(&name) {
            names.push(name);
        }
    }
    (!names.is_empty()).then(|| {
        format!(
            "over {} label sets, judged merged over them (a label set that vanishes or \
             restarts reads as a reset of the sum): {}",
            crate::growth::MAX_SERIES,
            names.join(", ")
        )
    })
}

/// Says that the figures are over every model's series when the page had several models'
/// and none was the run's (the last such sample's words).
fn model_note(samples: &[ServerSample]) -> Option<String> {
    samples.iter().rev().find_map(|s| match &s.model {
        Some(c @ crate::ModelChoice::NoneMatched { .. }) => Some(c.to_string()),
        _ => None,
    })
}

/// KV-cache usage over the run: the mean of the scrapes' means over label sets (the pool's
/// share in use), and the largest any label set (data-parallel rank) was scraped at.
fn kv_stats(samples: &[ServerSample]) -> Option<GaugeStats> {
    let mut g = gauge_stats(samples.iter().filter_map(|s| s.kv_cache_usage))?;
    g.max = samples
        .iter()
        .filter_map(|s| s.kv_cache_usage_max.or(s.kv_cache_usage))
        .fold(g.max, f64::max);
    Some(g)
}

/// Summarizes time-ordered samples spanning a run, from the last scrape before it to the
/// first after it (see `ServerMetrics::run_window`).
pub fn server_summary(samples: &[ServerSample]) -> RunServerSummary {
    let (Some(first), Some(last)) = (samples.first(), samples.last()) else {
        return RunServerSummary::default();
    };
    let mut g = gained(samples);
    if g.flipping.is_some() {
        // Inflated growth is worse than none: withhold every figure counters give.
        g.prompt_tokens = None;
        g.generation_tokens = None;
        g.preemptions = None;
        g.prefix_hits = None;
        g.prefix_queries = None;
        g.hists = Default::default();
    }
    let prefix_cache_hit_rate = match (g.prefix_hits, g.prefix_queries) {
        (Some(h), Some(q)) if q > 0.0 => Some((h / q).clamp(0.0, 1.0)),
        _ => gauge_stats(samples.iter().filter_map(|s| s.prefix_cache_hit_rate_gauge))
            .map(|g| g.mean),
    };
    let hist = |h: Hist| g.hists[h as usize].as_ref().and_then(latency_estimate);
    let note = (last.engine == Some(Engine::Unknown))
        .then(|| {
            format!(
                "engine not recognized ({} metric families, none of vLLM, SGLang, Dynamo, TGI \
                 or llama.cpp): no server-side figures",
                last.families
            )
        })
        .or_else(|| {
            let notes: Vec<String> = g
                .flipping
                .clone()
                .into_iter()
                .chain(merged_note(samples))
                .chain(model_note(samples))
                .collect();
            (!notes.is_empty()).then(|| notes.join("; "))
        });
    RunServerSummary {
        engine: last.engine,
        metric_families: last.families,
        note,
        scrapes: samples.len(),
        window_s: last.at.since(first.at).as_secs_f64(),
        ttft_s: hist(Hist::Ttft),
        itl_s: hist(Hist::Itl),
        client_inter_chunk_latency_ms: None,
        e2e_s: hist(Hist::E2e),
        queue_time_s: hist(Hist::QueueTime),
        prefill_time_s: hist(Hist::PrefillTime),
        decode_time_s: hist(Hist::DecodeTime),
        preemptions: g.preemptions,
        requests_swapped: gauge_stats(samples.iter().filter_map(|s| s.requests_swapped)),
        prompt_tokens: g.prompt_tokens,
        generation_tokens: g.generation_tokens,
        queue_depth: gauge_stats(samples.iter().filter_map(|s| s.queue_depth)),
        running_requests: gauge_stats(samples.iter().filter_map(|s| s.running_requests)),
        kv_cache_usage: kv_stats(samples),
        prefix_cache_hit_rate,
        comparison: None,
    }
}

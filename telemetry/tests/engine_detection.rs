//! Which engine a page is, and where its prefix-cache hit rate comes from, on pages built from
//! the engines' own names (no capture of these exists in `shared/fixtures`).

use canary_core::MonoTime;
use canary_telemetry::prometheus::parse;
use canary_telemetry::{Engine, ServerSample};

fn sample(text: &str) -> ServerSample {
    ServerSample::from_scrape(parse(text), MonoTime(1_000_000_000), false)
}

// Early vLLM V1 builds (vllm/v1/metrics/loggers.py before the rename) kept V0's
// `gpu_cache_usage_perc` and counted prefix-cache queries and hits as
// `gpu_prefix_cache_queries` / `gpu_prefix_cache_hits`: V1, its hit rate from the counters
// (summary.json calls it exact by the engine). Read as V0 before.
#[test]
fn early_vllm_v1_with_v0s_kv_name_is_v1_by_its_prefix_counters() {
    let page = concat!(
        "# TYPE vllm:gpu_cache_usage_perc gauge\n",
        "vllm:gpu_cache_usage_perc{model_name=\"m\"} 0.25\n",
        "# TYPE vllm:gpu_prefix_cache_queries counter\n",
        "vllm:gpu_prefix_cache_queries_total{model_name=\"m\"} 100\n",
        "# TYPE vllm:gpu_prefix_cache_hits counter\n",
        "vllm:gpu_prefix_cache_hits_total{model_name=\"m\"} 40\n",
    );
    let s = sample(page);
    assert_eq!(s.engine, Some(Engine::VllmV1));
    assert_eq!(s.kv_cache_usage, Some(0.25));
    assert_eq!(
        (s.prefix_cache_hits, s.prefix_cache_queries),
        (Some(40.0), Some(100.0))
    );
    // V0's own page (the capture) stays V0, its hit rate a gauge.
    let v0 = sample(&fixture!("vllm_metrics_v0_qwen2.5-coder-1.5b.prom"));
    assert_eq!(v0.engine, Some(Engine::VllmV0));
    assert_eq!(v0.prefix_cache_hits, None);
}

// SGLang's collector.py: `sglang:cached_tokens_total` has one series per `cache_source`
// (device, host, storage) in newer builds; the hits are their sum, the lookups every prompt
// token.
#[test]
fn sglang_cached_tokens_of_every_source_are_hits_among_all_prompt_tokens() {
    let page = concat!(
        "# TYPE sglang:prompt_tokens_total counter\n",
        "sglang:prompt_tokens_total{model_name=\"m\"} 1000\n",
        "# TYPE sglang:cached_tokens_total counter\n",
        "sglang:cached_tokens_total{model_name=\"m\",cache_source=\"device\"} 600\n",
        "sglang:cached_tokens_total{model_name=\"m\",cache_source=\"host\"} 150\n",
        "# TYPE sglang:cache_hit_rate gauge\n",
        "sglang:cache_hit_rate{model_name=\"m\"} 0.0\n",
    );
    let s = sample(page);
    assert_eq!(s.engine, Some(Engine::Sglang));
    assert_eq!(
        (s.prefix_cache_hits, s.prefix_cache_queries),
        (Some(750.0), Some(1000.0))
    );
    assert_eq!(s.prefix_cache_hit_rate_gauge, None);
}

// TensorRT-LLM's collector.py: without `trtllm_prompt_cached_tokens_total` (older builds) there
// is no hit rate; its `trtllm_kv_cache_hit_rate` gauge is not put in its place.
#[test]
fn tensorrt_llm_without_its_cached_tokens_counter_has_no_hit_rate() {
    let page = concat!(
        "# TYPE trtllm_prompt_tokens_total counter\n",
        "trtllm_prompt_tokens_total{model_name=\"m\",engine_type=\"trtllm\"} 320\n",
        "# TYPE trtllm_kv_cache_hit_rate gauge\n",
        "trtllm_kv_cache_hit_rate{model_name=\"m\",engine_type=\"trtllm\"} 0.5\n",
    );
    let s = sample(page);
    assert_eq!(s.engine, Some(Engine::TensorrtLlm));
    assert_eq!(s.prompt_tokens_total, Some(320.0));
    assert_eq!(
        (s.prefix_cache_hits, s.prefix_cache_hit_rate_gauge),
        (None, None)
    );
}

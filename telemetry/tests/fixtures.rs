//! The parser on every real capture under `shared/fixtures/*.prom`, asserting facts read from
//! the files by hand.

use canary_telemetry::prometheus::{parse, Format, MetricKind, Scrape};

/// Every capture, by name, for the checks that hold on all of them.
pub fn all() -> Vec<(&'static str, String)> {
    vec![
        (
            "dcgm_exporter_metrics_aiperf_testfixture_rtx6000ada.prom",
            fixture!("dcgm_exporter_metrics_aiperf_testfixture_rtx6000ada.prom"),
        ),
        (
            "dcgm_exporter_metrics_rtx4000ada.prom",
            fixture!("dcgm_exporter_metrics_rtx4000ada.prom"),
        ),
        (
            "llamacpp_server_metrics.prom",
            fixture!("llamacpp_server_metrics.prom"),
        ),
        (
            "vllm_metrics_docs_usage_excerpt.prom",
            fixture!("vllm_metrics_docs_usage_excerpt.prom"),
        ),
        (
            "vllm_metrics_v0_qwen2.5-coder-1.5b.prom",
            fixture!("vllm_metrics_v0_qwen2.5-coder-1.5b.prom"),
        ),
    ]
}

#[test]
fn every_capture_parses_cleanly_with_one_family_per_type_line() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/fixtures");
    let on_disk = std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "prom")
        })
        .count();
    let all = all();
    assert_eq!(
        on_disk,
        all.len(),
        "a new .prom capture needs its checks here"
    );
    for (name, text) in all {
        let s = parse(&text);
        assert!(s.errors.is_empty(), "{name}: {:?}", s.errors);
        assert_eq!(s.skipped_lines, 0, "{name}");
        let types = text.lines().filter(|l| l.starts_with("# TYPE")).count();
        assert_eq!(s.families.len(), types, "{name}");
        let samples = text.lines().filter(|l| !l.starts_with('#')).count();
        let parsed: usize = s.families.iter().map(|f| f.samples.len()).sum();
        assert_eq!(parsed, samples, "{name}");
        assert_eq!(s.format(), Format::Prometheus, "{name}");
        for f in &s.families {
            // Real pages are within the caps a hostile page is held to.
            for (_, h) in f.histograms().expect("a real page's histograms are usable") {
                assert!(h.is_monotone(), "{name}: {}", f.name);
            }
        }
    }
}

#[test]
fn llamacpp_colon_names() {
    let s = parse(&fixture!("llamacpp_server_metrics.prom"));
    assert_eq!(s.families.len(), 15);
    assert_close!(s.sum("llamacpp:prompt_tokens_total").unwrap(), 42.0);
    assert_close!(s.sum("llamacpp:tokens_predicted_total").unwrap(), 81.0);
    assert_close!(s.sum("llamacpp:prompt_seconds_total").unwrap(), 0.216855);
    assert_close!(s.sum("llamacpp:predicted_tokens_seconds").unwrap(), 95.0239);
    assert_eq!(s.sum("llamacpp:requests_processing"), Some(0.0));
    let f = s.family("llamacpp:n_tokens_max").unwrap();
    assert_eq!(f.kind, MetricKind::Counter);
    assert_eq!(
        f.help.as_deref(),
        Some("Largest observed sequence length (prompt + generation)")
    );
    // HELP with parentheses and commas survives whole.
    let help = s.family("llamacpp:n_decode_total").unwrap().help.clone();
    assert_eq!(
        help.as_deref(),
        Some("Total number of llama_decode() calls, excluding speculative decoding and multimodal decoding")
    );
}

#[test]
fn vllm_v0_capture() {
    let s = parse(&fixture!("vllm_metrics_v0_qwen2.5-coder-1.5b.prom"));
    assert_eq!(s.families.len(), 14);
    assert_eq!(s.sum("vllm:num_requests_running"), Some(0.0));
    assert_close!(s.sum("vllm:prompt_tokens_total").unwrap(), 148.0);
    assert_close!(s.sum("vllm:generation_tokens_total").unwrap(), 955.0);
    assert_close!(s.sum("vllm:gpu_prefix_cache_hit_rate").unwrap(), -1.0);
    let run = s.family("vllm:num_requests_running").unwrap();
    assert_eq!(
        run.samples[0].labels.get("model_name"),
        Some("Qwen/Qwen2.5-Coder-1.5B-Instruct")
    );
    // Info-style gauges: many labels, some empty, an exponent value.
    let cfg = &s.family("vllm:cache_config_info").unwrap().samples[0];
    assert_eq!(cfg.labels.len(), 12);
    assert_eq!(cfg.labels.get("num_gpu_blocks"), Some("81767"));
    assert_eq!(cfg.labels.get("gpu_memory_utilization"), Some("0.9"));
    let lora = &s.family("vllm:lora_requests_info").unwrap().samples[0];
    assert_eq!(lora.labels.get("running_lora_adapters"), Some(""));
    assert_close!(lora.value, 1.7382173358407154e9);
    let ok = &s.family("vllm:request_success_total").unwrap().samples[0];
    assert_eq!(ok.labels.get("finished_reason"), Some("stop"));
    // The doc cut the histogram short after the le="96.0" bucket: no +Inf, no _count.
    let h = s.histogram("vllm:iteration_tokens_total").unwrap();
    assert_eq!(h.buckets.len(), 15);
    assert!(!h.is_complete());
    assert_eq!(h.count, None);
    assert_eq!(h.sum, Some(1103.0));
    assert_eq!(h.buckets[0], (1.0, 994.0));
    assert_eq!(*h.buckets.last().unwrap(), (96.0, 998.0));
    assert_eq!(h.total(), 998.0);
    assert!(h.is_monotone());
    // 994 of 998 steps had one token: the median sits in the first bucket.
    assert!(h.quantile(0.5).unwrap() <= 1.0);
    assert!(h.quantile(0.999).unwrap() > 32.0);
    // Issue 16, item 3: what the buckets know is a bucket, not a value. The median is at most
    // 1 token; the 99.9th percentile (rank 997 of 998) is above 32 and at most 40, the
    // capture's own edges, whatever the interpolation guesses inside.
    let p50 = h.quantile_bucket(0.5).unwrap();
    assert_eq!((p50.lower_bound, p50.upper_bound), (0.0, Some(1.0)));
    let p999 = h.quantile_bucket(0.999).unwrap();
    assert_eq!((p999.lower_bound, p999.upper_bound), (32.0, Some(40.0)));
    assert!(p999.estimate > 32.0 && p999.estimate <= 40.0, "{p999:?}");
    let est = canary_telemetry::latency_estimate(&h).unwrap();
    assert_eq!(est.count, 998.0);
    for q in [est.p50, est.p90, est.p95, est.p99].into_iter().flatten() {
        let edges: Vec<f64> = h.buckets.iter().map(|b| b.0).collect();
        assert!(edges.contains(&q.upper_bound.unwrap()), "{q:?}");
        assert!(
            q.lower_bound == 0.0 || edges.contains(&q.lower_bound),
            "{q:?}"
        );
        assert!(q.lower_bound <= q.estimate && q.estimate <= q.upper_bound.unwrap());
    }
}

#[test]
fn vllm_docs_excerpt_sum_before_buckets() {
    let s = parse(&fixture!("vllm_metrics_docs_usage_excerpt.prom"));
    assert_eq!(s.families.len(), 1);
    let f = &s.families[0];
    assert_eq!(f.name, "vllm:iteration_tokens_total");
    assert_eq!(f.kind, MetricKind::Histogram);
    assert_eq!(f.samples.len(), 9);
    let h = s.histogram("vllm:iteration_tokens_total").unwrap();
    assert_eq!(h.buckets.len(), 8);
    assert!(h.buckets.iter().all(|b| b.1 == 3.0));
    assert_eq!(h.sum, Some(0.0));
}

fn dcgm_value(s: &Scrape, name: &str) -> f64 {
    s.sum(name).unwrap_or_else(|| panic!("{name} missing"))
}

#[test]
fn dcgm_captures() {
    let s = parse(&fixture!("dcgm_exporter_metrics_rtx4000ada.prom"));
    assert_eq!(s.families.len(), 25);
    assert_close!(dcgm_value(&s, "DCGM_FI_DEV_POWER_USAGE"), 40.979);
    assert_close!(
        dcgm_value(&s, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"),
        455_497_156.0
    );
    assert_close!(dcgm_value(&s, "DCGM_FI_PROF_PCIE_TX_BYTES"), 78_398_480.0);
    let xid = &s.family("DCGM_FI_DEV_XID_ERRORS").unwrap().samples[0];
    assert_eq!(xid.labels.get("err_msg"), Some("No Error"));
    assert_eq!(xid.labels.get("pod"), Some("cuda-75454ffb9f-8ljq7"));
    assert_eq!(xid.labels.get("pod_uid"), Some(""));
    assert_eq!(
        xid.labels.get("modelName"),
        Some("NVIDIA RTX 4000 Ada Generation")
    );

    let s = parse(&fixture!(
        "dcgm_exporter_metrics_aiperf_testfixture_rtx6000ada.prom"
    ));
    assert_eq!(s.families.len(), 13);
    assert_close!(dcgm_value(&s, "DCGM_FI_DEV_FB_TOTAL"), 48662.0);
    assert_close!(dcgm_value(&s, "DCGM_FI_DEV_POWER_MGMT_LIMIT"), 300.0);
    assert_eq!(
        s.family("DCGM_FI_DEV_THERMAL_VIOLATION").unwrap().kind,
        MetricKind::Counter
    );
}

#[test]
fn truncated_tail_is_skipped_or_parsed_safely() {
    // Cut every capture at every byte of its last 200: never a panic, at most the cut line
    // lost, and every complete line before the cut still there.
    let count = |s: &str| -> usize { parse(s).families.iter().map(|f| f.samples.len()).sum() };
    for (name, text) in all() {
        for cut in text.len().saturating_sub(200)..text.len() {
            if !text.is_char_boundary(cut) {
                continue;
            }
            let s = parse(&text[..cut]);
            assert!(s.skipped_lines <= 1, "{name} cut at {cut}: {:?}", s.errors);
            let whole_lines = &text[..text[..cut].rfind('\n').map_or(0, |i| i + 1)];
            let n: usize = s.families.iter().map(|f| f.samples.len()).sum();
            assert!(n >= count(whole_lines), "{name} cut at {cut}");
        }
    }
}

#[test]
fn a_series_twice_on_a_page_is_kept_once_and_said() {
    // The real vLLM V0 capture with every sample line written twice (as a broken exporter or
    // a proxy joining two copies would): Prometheus rejects such a page; summed, every
    // counter doubled.
    let text = fixture!("vllm_metrics_v0_qwen2.5-coder-1.5b.prom");
    let mut doubled = String::new();
    let mut sample_lines = 0;
    for line in text.lines() {
        doubled += line;
        doubled.push('\n');
        if !line.starts_with('#') && !line.trim().is_empty() {
            doubled += line;
            doubled.push('\n');
            sample_lines += 1;
        }
    }
    let s = parse(&doubled);
    assert_close!(s.sum("vllm:prompt_tokens_total").unwrap(), 148.0);
    assert_eq!(s.skipped_lines, sample_lines);
    assert!(s
        .errors
        .iter()
        .all(|e| e.kind == canary_telemetry::prometheus::IssueKind::DuplicateSeries));
    assert_eq!(s, {
        let mut once = parse(&text);
        (once.errors, once.skipped_lines) = (s.errors.clone(), s.skipped_lines);
        once
    });
}

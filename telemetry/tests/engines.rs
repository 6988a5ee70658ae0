//! Engine detection and the mapping onto canonical signals, on the real captures and on
//! synthetic pages for the engines without one.

use canary_core::MonoTime;
use canary_telemetry::prometheus::parse;
use canary_telemetry::{server_summary, Engine, ServerRates, ServerSample};

fn sample(text: &str, at_s: u64) -> ServerSample {
    ServerSample::from_scrape(parse(text), MonoTime(at_s * 1_000_000_000), false)
}

/// A vLLM V1 page after `n` steps of a steady load: 10 requests/step, 2 of them slower.
pub fn vllm_v1_page(n: u64) -> String {
    let hist = |name: &str, les: &[(&str, u64)], sum: f64| {
        let mut s = format!("# HELP {name} h\n# TYPE {name} histogram\n");
        for (le, per_step) in les {
            s += &format!(
                "{name}_bucket{{engine=\"0\",le=\"{le}\",model_name=\"m,1\"}} {}\n",
                per_step * n
            );
        }
        let count = les.last().unwrap().1 * n;
        s += &format!("{name}_count{{engine=\"0\",model_name=\"m,1\"}} {count}\n");
        s += &format!(
            "{name}_sum{{engine=\"0\",model_name=\"m,1\"}} {}\n",
            sum * n as f64
        );
        s
    };
    let mut page = String::new();
    for (name, kind, v) in [
        ("vllm:num_requests_running", "gauge", (n % 4) as f64),
        ("vllm:num_requests_waiting", "gauge", (n % 3) as f64),
        ("vllm:kv_cache_usage_perc", "gauge", 0.25),
        (
            "vllm:prefix_cache_queries_total",
            "counter",
            100.0 * n as f64,
        ),
        ("vllm:prefix_cache_hits_total", "counter", 40.0 * n as f64),
        ("vllm:prompt_tokens_total", "counter", 1000.0 * n as f64),
        ("vllm:generation_tokens_total", "counter", 200.0 * n as f64),
        ("vllm:num_preemptions_total", "counter", (n / 2) as f64),
    ] {
        page += &format!("# TYPE {name} {kind}\n{name}{{engine=\"0\",model_name=\"m,1\"}} {v}\n");
    }
    page += &hist(
        "vllm:time_to_first_token_seconds",
        &[("0.1", 8), ("0.5", 10), ("+Inf", 10)],
        1.0,
    );
    page += &hist(
        "vllm:inter_token_latency_seconds",
        &[("0.01", 100), ("0.05", 200), ("+Inf", 200)],
        4.0,
    );
    page += &hist(
        "vllm:e2e_request_latency_seconds",
        &[("1.0", 5), ("5.0", 10), ("+Inf", 10)],
        20.0,
    );
    page += &hist(
        "vllm:request_queue_time_seconds",
        &[("0.001", 10), ("+Inf", 10)],
        0.001,
    );
    page += &hist(
        "vllm:request_prefill_time_seconds",
        &[("0.3", 10), ("+Inf", 10)],
        0.5,
    );
    page += &hist(
        "vllm:request_decode_time_seconds",
        &[("0.3", 2), ("1.0", 10), ("+Inf", 10)],
        6.0,
    );
    page
}

#[test]
fn fixtures_detect_their_engine() {
    let v0 = sample(&fixture!("vllm_metrics_v0_qwen2.5-coder-1.5b.prom"), 1);
    assert_eq!(v0.engine, Some(Engine::VllmV0));
    assert_eq!(v0.running_requests, Some(0.0));
    assert_eq!(v0.queue_depth, Some(0.0));
    assert_eq!(v0.kv_cache_usage, Some(0.0));
    // -1 means "no data yet" in vLLM V0.
    assert_eq!(v0.prefix_cache_hit_rate_gauge, None);
    assert_eq!(v0.prompt_tokens_total, Some(148.0));
    assert_eq!(v0.generation_tokens_total, Some(955.0));
    // KV pressure, by the capture's own names: `vllm:num_preemptions_total` and V0's
    // `vllm:num_requests_swapped`.
    assert_eq!(v0.preemptions_total, Some(0.0));
    assert_eq!(v0.requests_swapped, Some(0.0));
    assert!(v0.raw.is_none());

    let ll = sample(&fixture!("llamacpp_server_metrics.prom"), 1);
    assert_eq!(ll.engine, Some(Engine::LlamaCpp));
    assert_eq!(ll.running_requests, Some(0.0));
    assert_eq!(ll.queue_depth, Some(0.0));
    assert_eq!(ll.prompt_tokens_total, Some(42.0));
    assert_eq!(ll.generation_tokens_total, Some(81.0));
    assert_eq!(
        (ll.prefix_cache_hits, ll.prefix_cache_queries),
        (Some(0.0), Some(42.0))
    );
    assert_eq!(
        ll.kv_cache_usage, None,
        "this llama.cpp build has no KV gauge"
    );

    let dcgm = sample(&fixture!("dcgm_exporter_metrics_rtx4000ada.prom"), 1);
    assert_eq!(dcgm.engine, Some(Engine::Unknown));
    assert_eq!(dcgm.families, 25);
}

#[test]
fn unknown_engine_keeps_no_page_and_its_summary_says_so() {
    // A server whose page matches no known engine (dcgm-exporter's, as it happens).
    let page = fixture!("dcgm_exporter_metrics_rtx4000ada.prom");
    let samples: Vec<ServerSample> = (1..=3).map(|n| sample(&page, n)).collect();
    // Samples go into a ring of thousands: none may carry the whole parsed page.
    assert!(samples.iter().all(|s| s.raw.is_none()));
    let kept = ServerSample::from_scrape(parse(&page), MonoTime(1), true);
    assert_eq!(kept.raw.unwrap().families.len(), 25, "only when asked for");
    let s = server_summary(&samples);
    assert_eq!(
        (s.engine, s.metric_families, s.scrapes),
        (Some(Engine::Unknown), 25, 3)
    );
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json["engine"], "unknown");
    let note = json["note"].as_str().unwrap();
    assert!(
        note.contains("not recognized") && note.contains("25 metric families"),
        "{note}"
    );
    // A known engine has no note.
    let v0 = sample(&fixture!("vllm_metrics_v0_qwen2.5-coder-1.5b.prom"), 1);
    let json = serde_json::to_value(server_summary(&[v0])).unwrap();
    assert!(json.get("note").is_none(), "{json}");
}

// The server restarted mid-run and its counts grew back past the first scrape's: first and
// last alone gave 60 requests where 120 were served (40 before, 10 + 70 after).
#[test]
fn a_restart_mid_run_sums_each_steps_gain() {
    let before = (2..=6).map(|n| sample(&vllm_v1_page(n), n));
    let after = (1..=8).map(|n| sample(&vllm_v1_page(n), 10 + n));
    let samples: Vec<ServerSample> = before.chain(after).collect();
    let s = server_summary(&samples);
    let ttft = s.ttft_s.unwrap();
    assert_eq!(ttft.count, 120.0);
    assert!((ttft.mean.unwrap() - 0.1).abs() < 1e-12);
    // Without a restart, the same as before: last less first.
    let plain: Vec<ServerSample> = (2..=10).map(|n| sample(&vllm_v1_page(n), n)).collect();
    assert_eq!(server_summary(&plain).ttft_s.unwrap().count, 80.0);
}

#[test]
fn vllm_v1_run_summary_from_histogram_deltas() {
    let samples: Vec<ServerSample> = (0..=10).map(|n| sample(&vllm_v1_page(n), n)).collect();
    let first = &samples[0];
    assert_eq!(first.engine, Some(Engine::VllmV1));
    assert_eq!(first.kv_cache_usage, Some(0.25));
    let r = ServerRates::between(&samples[1], &samples[2]);
    assert_eq!(r.prompt_tokens_per_s, Some(1000.0));
    assert_eq!(r.generation_tokens_per_s, Some(200.0));
    assert_eq!(r.prefix_cache_hit_rate, Some(0.4));

    let s = server_summary(&samples[2..]);
    assert_eq!(s.engine, Some(Engine::VllmV1));
    assert_eq!(s.scrapes, 9);
    assert_eq!(s.window_s, 8.0);
    assert_eq!(s.prompt_tokens, Some(8000.0));
    assert_eq!(s.generation_tokens, Some(1600.0));
    assert_eq!(s.prefix_cache_hit_rate, Some(0.4));
    let ttft = s.ttft_s.unwrap();
    assert_eq!(ttft.count, 80.0);
    assert!((ttft.mean.unwrap() - 0.1).abs() < 1e-12);
    // 64 of 80 under 0.1 s: p50 at rank 40 is in the first bucket, interpolated to 0.0625.
    let p50 = ttft.p50.unwrap();
    assert_eq!((p50.lower_bound, p50.upper_bound), (0.0, Some(0.1)));
    assert!((p50.estimate - 0.0625).abs() < 1e-12);
    // p90 at rank 72 sits in (0.1, 0.5]: 0.1 + 0.4 * 8/16.
    let p90 = ttft.p90.unwrap();
    assert_eq!((p90.lower_bound, p90.upper_bound), (0.1, Some(0.5)));
    assert!((p90.estimate - 0.3).abs() < 1e-12);
    assert_eq!(s.itl_s.unwrap().count, 1600.0);
    let e2e_p99 = s.e2e_s.unwrap().p99.unwrap();
    assert_eq!(e2e_p99.upper_bound, Some(5.0));
    assert!((e2e_p99.estimate - 4.92).abs() < 1e-12);
    assert_eq!(s.queue_time_s.unwrap().count, 80.0);
    // The phases: 0.05 s of prefill and 0.6 s of decode per request; one preemption every
    // second step (from 1 at step 2 to 5 at step 10).
    assert!((s.prefill_time_s.unwrap().mean.unwrap() - 0.05).abs() < 1e-12);
    assert!((s.decode_time_s.unwrap().mean.unwrap() - 0.6).abs() < 1e-12);
    assert_eq!(s.preemptions, Some(4.0));
    let q = s.queue_depth.unwrap();
    assert_eq!((q.max, q.samples), (2.0, 9));
    assert_eq!(s.running_requests.unwrap().max, 3.0);
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json["engine"], "vllm_v1");
    assert_eq!(json["ttft_s"]["count"], 80.0);
    // Each percentile says it is a bucket: both edges and the interpolated estimate.
    let p90 = &json["ttft_s"]["p90"];
    assert_eq!(
        (&p90["lower_bound"], &p90["upper_bound"]),
        (&0.1.into(), &0.5.into())
    );
    assert!(
        (p90["estimate"].as_f64().unwrap() - 0.3).abs() < 1e-12,
        "{p90}"
    );
}

#[test]
fn counter_reset_mid_run_counts_from_zero() {
    // Server restarted after step 5: counters drop back to step-1 values.
    let mut samples: Vec<ServerSample> = (0..=5).map(|n| sample(&vllm_v1_page(n), n)).collect();
    samples.push(sample(&vllm_v1_page(1), 6));
    samples.push(sample(&vllm_v1_page(2), 7));
    let s = server_summary(&samples);
    assert_eq!(s.prompt_tokens, Some(7000.0));
    // As the counter: 50 requests before the restart, then 10 and 10 more (it used to be the
    // end histogram alone, 20, beside 7,000 prompt tokens counted over the same run).
    assert_eq!(s.ttft_s.unwrap().count, 70.0);
}

/// Shares are averaged over engines (data-parallel ranks), not summed, and an engine's "no
/// data" (-1) is left out: two half-full caches are half full, not full.
#[test]
fn shares_are_the_mean_over_engines_without_their_no_data() {
    let page = concat!(
        "# TYPE vllm:num_requests_running gauge
",
        "vllm:num_requests_running{engine=\"0\"} 3
vllm:num_requests_running{engine=\"1\"} 4
",
        "# TYPE vllm:kv_cache_usage_perc gauge
",
        "vllm:kv_cache_usage_perc{engine=\"0\"} 0.5
vllm:kv_cache_usage_perc{engine=\"1\"} 0.7
",
        "# TYPE vllm:gpu_prefix_cache_hit_rate gauge
",
        "vllm:gpu_prefix_cache_hit_rate{engine=\"0\"} -1
",
        "vllm:gpu_prefix_cache_hit_rate{engine=\"1\"} 0.25
",
    );
    let s = sample(page, 1);
    // Counts add up over engines; shares do not.
    assert_eq!(s.running_requests, Some(7.0));
    assert!((s.kv_cache_usage.unwrap() - 0.6).abs() < 1e-12, "{s:?}");
    assert_eq!(s.prefix_cache_hit_rate_gauge, Some(0.25));
    let none = sample(
        "# TYPE vllm:gpu_prefix_cache_hit_rate gauge
vllm:gpu_prefix_cache_hit_rate -1
",
        1,
    );
    assert_eq!(none.prefix_cache_hit_rate_gauge, None);
}

#[test]
fn other_engines_map_their_names() {
    let sglang = sample(
        concat!(
            "# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{model_name=\"x\"} 7\n",
            "# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs{model_name=\"x\"} 3\n",
            "# TYPE sglang:token_usage gauge\nsglang:token_usage{model_name=\"x\"} 0.28\n",
            "# TYPE sglang:cache_hit_rate gauge\nsglang:cache_hit_rate{model_name=\"x\"} 0.0075\n",
            "# TYPE sglang:prompt_tokens_total counter\nsglang:prompt_tokens_total 8.128902e+06\n",
            "# TYPE sglang:time_to_first_token_seconds histogram\n",
            "sglang:time_to_first_token_seconds_bucket{le=\"0.5\"} 2\n",
            "sglang:time_to_first_token_seconds_bucket{le=\"+Inf\"} 4\n",
        ),
        1,
    );
    assert_eq!(sglang.engine, Some(Engine::Sglang));
    assert_eq!(
        (
            sglang.running_requests,
            sglang.queue_depth,
            sglang.kv_cache_usage
        ),
        (Some(7.0), Some(3.0), Some(0.28))
    );
    // SGLang's `cache_hit_rate` is its last prefill batch's rate (0 after a decode log): not
    // read; its counters are (none on this page).
    assert_eq!(sglang.prefix_cache_hit_rate_gauge, None);
    assert_eq!(sglang.prefix_cache_hits, None);
    assert_eq!(sglang.prompt_tokens_total, Some(8_128_902.0));
    assert_eq!(sglang.ttft.unwrap().count, Some(4.0));

    let tgi = sample(
        concat!(
            "# TYPE tgi_queue_size gauge\ntgi_queue_size 5\n",
            "# TYPE tgi_batch_current_size gauge\ntgi_batch_current_size 12\n",
            "# TYPE tgi_request_input_length histogram\n",
            "tgi_request_input_length_bucket{le=\"+Inf\"} 3\ntgi_request_input_length_sum 300\n",
            "tgi_request_input_length_count 3\n",
            "# TYPE tgi_request_duration histogram\ntgi_request_duration_bucket{le=\"1\"} 3\n",
            "tgi_request_duration_bucket{le=\"+Inf\"} 3\n",
        ),
        1,
    );
    assert_eq!(tgi.engine, Some(Engine::Tgi));
    assert_eq!(
        (tgi.queue_depth, tgi.running_requests),
        (Some(5.0), Some(12.0))
    );
    assert_eq!(tgi.prompt_tokens_total, Some(300.0));
    assert!(tgi.e2e.is_some() && tgi.ttft.is_none());

    let dynamo = sample(
        concat!(
            "# TYPE dynamo_frontend_inflight_requests gauge\n",
            "dynamo_frontend_inflight_requests{model=\"m\"} 9\n",
            "# TYPE dynamo_frontend_queued_requests gauge\n",
            "dynamo_frontend_queued_requests{model=\"m\"} 2\n",
            "# TYPE dynamo_frontend_output_sequence_tokens histogram\n",
            "dynamo_frontend_output_sequence_tokens_bucket{model=\"m\",le=\"+Inf\"} 2\n",
            "dynamo_frontend_output_sequence_tokens_sum{model=\"m\"} 512\n",
            "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1\n",
        ),
        1,
    );
    assert_eq!(dynamo.engine, Some(Engine::Dynamo));
    // `queued_requests` counts requests awaiting their first token, prefill included: no queue.
    assert_eq!(
        (dynamo.running_requests, dynamo.queue_depth),
        (Some(9.0), None)
    );
    assert_eq!(dynamo.generation_tokens_total, Some(512.0));
}

/// The real vLLM V0 capture with the value of `name`'s one sample replaced by `value`.
fn v0_with(name: &str, value: &str) -> String {
    fixture!("vllm_metrics_v0_qwen2.5-coder-1.5b.prom")
        .lines()
        .map(|l| match l.rsplit_once(' ') {
            Some((head, _)) if l.starts_with(&format!("{name}{{")) => format!("{head} {value}"),
            _ => l.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn out_of_range_gauges_and_counters_are_left_out_and_said() {
    use canary_telemetry::OutOfRange;
    for (name, value, why) in [
        ("vllm:gpu_cache_usage_perc", "+Inf", OutOfRange::Infinite),
        (
            "vllm:gpu_cache_usage_perc",
            "87.5",
            OutOfRange::ShareOutside01,
        ),
        ("vllm:num_requests_waiting", "-5", OutOfRange::NegativeCount),
        ("vllm:prompt_tokens_total", "-Inf", OutOfRange::Infinite),
        (
            "vllm:num_preemptions_total",
            "-3",
            OutOfRange::NegativeCount,
        ),
    ] {
        let s = sample(&v0_with(name, value), 1);
        let left = s
            .left_out
            .first()
            .unwrap_or_else(|| panic!("{name} {value}"));
        assert_eq!((left.name, left.why), (name, why), "{name} {value}");
        match name {
            "vllm:gpu_cache_usage_perc" => assert_eq!(s.kv_cache_usage, None),
            "vllm:num_requests_waiting" => assert_eq!(s.queue_depth, None),
            "vllm:prompt_tokens_total" => assert_eq!(s.prompt_tokens_total, None),
            _ => assert_eq!(s.preemptions_total, None),
        }
        let points = canary_telemetry::server_series(&[s.clone(), s], MonoTime(0));
        assert!(points.iter().all(|p| p.kv_usage.is_none_or(|k| k <= 1.0)));
        assert!(points
            .iter()
            .all(|p| p.queue_depth.is_none_or(|q| q >= 0.0)));
    }
    // In range, and the capture's own values, leave nothing out.
    let s = sample(&v0_with("vllm:gpu_cache_usage_perc", "0.875"), 1);
    assert_eq!((s.kv_cache_usage, s.left_out.len()), (Some(0.875), 0));
    assert!(
        sample(&fixture!("vllm_metrics_v0_qwen2.5-coder-1.5b.prom"), 1)
            .left_out
            .is_empty()
    );
}

#[test]
fn a_token_total_from_a_histograms_sum_leaves_out_a_sum_that_is_no_count() {
    use canary_telemetry::OutOfRange;
    let page = |sum: &str| {
        format!(
            "# TYPE tgi_queue_size gauge\ntgi_queue_size 0\n\
             # TYPE tgi_request_input_length histogram\n\
             tgi_request_input_length_bucket{{le=\"+Inf\"}} 3\n\
             tgi_request_input_length_sum {sum}\ntgi_request_input_length_count 3\n"
        )
    };
    for (sum, why) in [
        ("+Inf", OutOfRange::Infinite),
        ("-Inf", OutOfRange::Infinite),
        ("-300", OutOfRange::NegativeCount),
    ] {
        let s = sample(&page(sum), 1);
        assert_eq!(s.engine, Some(Engine::Tgi));
        assert_eq!(s.prompt_tokens_total, None, "{sum}");
        let left = s.left_out.first().unwrap_or_else(|| panic!("{sum}"));
        assert_eq!((left.name, left.why), ("tgi_request_input_length", why));
    }
    // NaN is "no data": no total, nothing said; a real sum is kept.
    let s = sample(&page("NaN"), 1);
    assert_eq!((s.prompt_tokens_total, s.left_out.len()), (None, 0));
    let s = sample(&page("300"), 1);
    assert_eq!((s.prompt_tokens_total, s.left_out.len()), (Some(300.0), 0));
}

//! Counter and histogram growth judged per series, on transformations of the real vLLM V0
//! capture (`vllm_metrics_v0_qwen2.5-coder-1.5b.prom`): every counter and histogram line is
//! raised by a constant (as if that much more had been served), a label set is copied under
//! `engine="1"` (a second engine), and the capture's `vllm:iteration_tokens_total` histogram
//! is renamed `vllm:time_to_first_token_seconds` so a mapped histogram takes part. Gauges,
//! HELP and TYPE lines stay as captured.

use canary_core::MonoTime;
use canary_telemetry::prometheus::parse;
use canary_telemetry::{
    server_series, server_summary, ServerSample, MAX_SERIES, MAX_SERIES_BUCKETS,
};

/// The capture with counters and histograms raised by `add`; with `extra`, a copy of every
/// sample under `engine="1"`, raised by `extra` instead.
fn page(add: f64, extra: Option<f64>) -> String {
    let text = fixture!("vllm_metrics_v0_qwen2.5-coder-1.5b.prom").replace(
        "vllm:iteration_tokens_total",
        "vllm:time_to_first_token_seconds",
    );
    let raise = |line: &str, by: f64| -> String {
        let name = line.split(['{', ' ']).next().unwrap_or("");
        let cumulative = ["_total", "_bucket", "_sum", "_count"]
            .iter()
            .any(|s| name.ends_with(s));
        match line.rsplit_once(' ') {
            Some((head, v)) if cumulative => format!("{head} {}", v.parse::<f64>().unwrap() + by),
            _ => line.to_owned(),
        }
    };
    let mut out = String::new();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            out += line;
            out.push('\n');
            continue;
        }
        out += &raise(line, add);
        out.push('\n');
        if let Some(by) = extra {
            out += &raise(&line.replacen('{', "{engine=\"1\",", 1), by);
            out.push('\n');
        }
    }
    out
}

fn samples(pages: impl IntoIterator<Item = String>) -> Vec<ServerSample> {
    pages
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            ServerSample::from_scrape(parse(&p), MonoTime((i as u64 + 1) * 1_000_000_000), false)
        })
        .collect()
}

/// Seven scrapes of one server serving 100 prompt tokens (and 100 TTFT observations, and so
/// on) per scrape interval.
fn truth() -> Vec<ServerSample> {
    samples((0..7).map(|i| page(100.0 * i as f64, None)))
}

#[test]
fn one_server_grows_by_its_own_steps() {
    let s = server_summary(&truth());
    assert_eq!(s.prompt_tokens, Some(600.0));
    assert_eq!(s.generation_tokens, Some(600.0));
    assert_eq!(s.preemptions, Some(600.0));
    assert_eq!(s.ttft_s.map(|t| t.count), Some(600.0));
    assert_eq!(s.note, None);
}

#[test]
fn a_url_alternating_between_two_replicas_withholds_counter_figures() {
    // Every other scrape reaches a replica whose counters are 500 ahead: summed, each flip
    // back read as a restart and counted the whole counter again.
    let flipping = samples((0..7).map(|i| {
        let ahead = if i % 2 == 1 { 500.0 } else { 0.0 };
        page(100.0 * i as f64 + ahead, None)
    }));
    let s = server_summary(&flipping);
    assert_eq!(s.prompt_tokens, None);
    assert_eq!(s.generation_tokens, None);
    assert_eq!(s.preemptions, None);
    assert_eq!(s.ttft_s, None);
    let note = s.note.expect("a note says why");
    assert!(
        note.starts_with("counters went backwards 3 times: the URL may reach more than one"),
        "{note}"
    );
    let points = server_series(&flipping, flipping[0].at);
    assert!(points
        .iter()
        .all(|p| p.preemptions.is_none() && p.ttft.is_none()));
    // Gauges are still read.
    assert!(points.iter().all(|p| p.kv_usage.is_some()));
}

#[test]
fn an_idle_label_set_that_vanishes_adds_nothing() {
    let pages = (0..7).map(|i| {
        let extra = (i < 4).then_some(1000.0);
        page(100.0 * i as f64, extra)
    });
    let s = server_summary(&samples(pages));
    let t = server_summary(&truth());
    assert_eq!(s.prompt_tokens, t.prompt_tokens);
    assert_eq!(s.preemptions, t.preemptions);
    assert_eq!(s.ttft_s.map(|t| t.count), Some(600.0));
    assert_eq!(s.note, None);
}

#[test]
fn a_label_set_that_appears_with_history_adds_only_its_growth() {
    // A second engine shows up at the fourth scrape with 5,000 already counted, then grows
    // by 10 a scrape.
    let pages = (0..7).map(|i| {
        let extra = (i >= 3).then(|| 5000.0 + 10.0 * (i - 3) as f64);
        page(100.0 * i as f64, extra)
    });
    let s = server_summary(&samples(pages));
    assert_eq!(s.prompt_tokens, Some(600.0 + 30.0));
    assert_eq!(s.ttft_s.map(|t| t.count), Some(630.0));
    assert_eq!(s.note, None);
}

#[test]
fn a_restart_still_counts_from_zero() {
    // 1,000 ahead, then the server restarts between the third and fourth scrapes: its
    // counters drop to the capture's own values (148 prompt tokens) and grow again.
    let adds = [1000.0, 1100.0, 1200.0, 0.0, 100.0, 200.0];
    let s = server_summary(&samples(adds.map(|a| page(a, None))));
    assert_eq!(s.prompt_tokens, Some(400.0 + 148.0));
    assert_eq!(s.note, None);
    let ttft = s.ttft_s.expect("ttft");
    // The capture's histogram (cut short after its 96 bucket) counted 998 observations;
    // after the restart they count again.
    assert_eq!(ttft.count, 400.0 + 998.0);
}

/// The capture as `page(add, None)` makes it, exposed by a gateway in front of `workers`
/// workers: every sample line (counters, histograms and gauges) copied once per worker under
/// `worker="0"`, `worker="1"`, ..., each with the same values.
fn workers_page(add: f64, workers: usize) -> String {
    let mut out = String::new();
    for line in page(add, None).lines() {
        if line.starts_with('#') || !line.contains('{') {
            out += line;
            out.push('\n');
            continue;
        }
        for w in 0..workers {
            out += &line.replacen('{', &format!("{{worker=\"{w}\","), 1);
            out.push('\n');
        }
    }
    out
}

/// Buckets a sample keeps for its six histograms: the merged copies and the per-series ones.
fn buckets_kept(s: &ServerSample) -> usize {
    let merged = [
        &s.ttft,
        &s.itl,
        &s.e2e,
        &s.queue_time,
        &s.prefill_time,
        &s.decode_time,
    ]
    .iter()
    .filter_map(|h| h.as_ref())
    .map(|h| h.buckets.len())
    .sum::<usize>();
    let parts = s
        .series
        .hists
        .iter()
        .flat_map(|h| &h.parts)
        .map(|h| h.buckets.len())
        .sum::<usize>();
    merged + parts
}

#[test]
fn a_gateway_over_many_workers_is_kept_merged_only_and_still_measured() {
    // 64 workers: each counter and histogram has 64 label sets, past the cap.
    const WORKERS: usize = 64;
    let wide = samples((0..7).map(|i| workers_page(100.0 * i as f64, WORKERS)));
    for s in &wide {
        let v = &s.series;
        for list in [&v.prompt_tokens, &v.generation_tokens, &v.preemptions] {
            assert_eq!(list.len(), 1, "kept as one series");
        }
        assert!(v
            .hists
            .iter()
            .all(|h| h.parts.is_empty() && h.keys.len() <= 1));
        // The merged TTFT histogram only: its 15 buckets (+Inf added), not 64 copies.
        assert!(buckets_kept(s) <= 16, "{}", buckets_kept(s));
        assert_eq!(
            s.merged_only,
            vec![
                "vllm:prompt_tokens_total (64 label sets)",
                "vllm:generation_tokens_total (64 label sets)",
                "vllm:num_preemptions_total (64 label sets)",
                "vllm:time_to_first_token_seconds (64 label sets)",
            ]
        );
    }
    // The figures still come out, from the sums, with a note saying so.
    let s = server_summary(&wide);
    let n = WORKERS as f64;
    assert_eq!(s.prompt_tokens, Some(600.0 * n));
    assert_eq!(s.generation_tokens, Some(600.0 * n));
    assert_eq!(s.preemptions, Some(600.0 * n));
    assert_eq!(s.ttft_s.map(|t| t.count), Some(600.0 * n));
    let note = s.note.expect("a note says the series were merged");
    assert!(
        note.starts_with(&format!(
            "over {MAX_SERIES} label sets, judged merged over them"
        )),
        "{note}"
    );
    assert!(note.contains("vllm:time_to_first_token_seconds"), "{note}");
}

#[test]
fn up_to_the_cap_series_are_kept_one_by_one() {
    let at_cap = samples((0..7).map(|i| workers_page(100.0 * i as f64, MAX_SERIES)));
    for s in &at_cap {
        assert_eq!(s.series.prompt_tokens.len(), MAX_SERIES);
        assert_eq!(s.series.hists[0].parts.len(), MAX_SERIES);
        assert!(s.merged_only.is_empty(), "{:?}", s.merged_only);
        assert!(
            buckets_kept(s) <= 16 + MAX_SERIES_BUCKETS,
            "{}",
            buckets_kept(s)
        );
    }
    let s = server_summary(&at_cap);
    assert_eq!(s.prompt_tokens, Some(600.0 * MAX_SERIES as f64));
    assert_eq!(s.ttft_s.map(|t| t.count), Some(600.0 * MAX_SERIES as f64));
    assert_eq!(s.note, None);
    // One more worker and the series are merged.
    let over = samples([workers_page(0.0, MAX_SERIES + 1)]);
    assert!(over[0].series.hists[0].parts.is_empty());
    assert_eq!(over[0].series.prompt_tokens.len(), 1);
}

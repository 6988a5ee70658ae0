//! Prometheus / OpenMetrics text parsing throughput (MB/s) on the real captures in
//! `shared/fixtures/` (vLLM, llama.cpp, dcgm-exporter).
//!
//! Criterion, short measurement windows: `cargo bench -p canary-telemetry --bench prometheus`.

use std::hint::black_box;
use std::time::Duration;

use canary_telemetry::prometheus::parse;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/fixtures/");

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("prometheus_parse");
    for name in [
        "vllm_metrics_v0_qwen2.5-coder-1.5b.prom",
        "llamacpp_server_metrics.prom",
        "dcgm_exporter_metrics_rtx4000ada.prom",
    ] {
        let path = format!("{FIXTURES}{name}");
        let text = std::fs::read_to_string(&path).expect(&path);
        let scrape = parse(&text);
        assert!(!scrape.families.is_empty(), "{name}: no families");
        group.throughput(Throughput::Bytes(text.len() as u64));
        group.bench_function(name, |b| b.iter(|| parse(black_box(&text))));
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20);
    targets = bench
}
criterion_main!(benches);

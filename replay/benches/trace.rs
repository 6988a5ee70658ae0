//! Trace parsing throughput (rows/s) on the real Mooncake files in `shared/traces/`.
//!
//! Criterion, short measurement windows: `cargo bench -p canary-replay --bench trace`.
//! The file is read into memory once, so the figure is parsing and validation (JSON, the block
//! rule, sorting), not disk.

use std::hint::black_box;
use std::io::Cursor;
use std::path::Path;
use std::time::Duration;

use canary_replay::trace::{parse, LoadOptions};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

const TRACES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/traces/");

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("trace_parse");
    for name in [
        "mooncake_conversation_first2000.jsonl",
        "mooncake_synthetic.jsonl",
    ] {
        let path = format!("{TRACES}{name}");
        let bytes = std::fs::read(&path).expect(&path);
        let opts = LoadOptions::default();
        let rows = parse(Cursor::new(&bytes), Path::new(name), &opts)
            .expect(name)
            .requests
            .len();
        group.throughput(Throughput::Elements(rows as u64));
        group.bench_function(name, |b| {
            b.iter(|| parse(Cursor::new(black_box(&bytes)), Path::new(name), &opts).unwrap())
        });
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

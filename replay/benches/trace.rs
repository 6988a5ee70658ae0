//! Trace parsing throughput (rows/s) on the real Mooncake files in `shared/traces/`.
//!
//! Criterion, short measurement windows: `cargo bench -p canary-replay --bench trace`.
//! The file is read into memory once, so the figure is parsing and validation (JSON, the block
//! rule, sorting), not disk.
//!
//! `load_and_synthesize`: the 2,000 real rows tiled six times (12,000 rows, later copies shifted
//! in time, hash ids kept distinct), parsed, and every prompt built with the built-in o200k
//! vocabulary: the whole preparation of a 12,000-row replay, done once per iteration.

use std::hint::black_box;
use std::io::Cursor;
use std::path::Path;
use std::time::Duration;

use canary_replay::trace::{parse, LoadOptions};
use canary_replay::{PromptBuilder, Tokenizer, TokenizerSpec};
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

/// The real slice repeated `copies` times as JSONL text (same tiling as bench/aiperf_compare.py).
fn tiled(text: &str, copies: u64) -> String {
    let rows: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let last = rows
        .iter()
        .map(|r| r["timestamp"].as_u64().unwrap())
        .max()
        .unwrap();
    let ids = 1 + rows
        .iter()
        .flat_map(|r| {
            r["hash_ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|h| h.as_u64().unwrap())
        })
        .max()
        .unwrap();
    let mut out = String::new();
    for c in 0..copies {
        for r in &rows {
            let mut r = r.clone();
            r["timestamp"] = (r["timestamp"].as_u64().unwrap() + c * (last + 3000)).into();
            let hashes: Vec<u64> = r["hash_ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|h| h.as_u64().unwrap() + c * ids)
                .collect();
            r["hash_ids"] = hashes.into();
            out.push_str(&r.to_string());
            out.push('\n');
        }
    }
    out
}

fn load_and_synthesize(c: &mut Criterion) {
    let name = "mooncake_conversation_first2000.jsonl";
    let path = format!("{TRACES}{name}");
    let text = tiled(&std::fs::read_to_string(&path).expect(&path), 6);
    let mut group = c.benchmark_group("load_and_synthesize");
    group.sample_size(10);
    group.bench_function("o200k_tokenizer_and_vocabulary", |b| {
        b.iter(|| {
            let tok = Tokenizer::load(&TokenizerSpec::BuiltinO200k).unwrap();
            PromptBuilder::new(tok, 0).unwrap()
        })
    });
    let builder =
        PromptBuilder::new(Tokenizer::load(&TokenizerSpec::BuiltinO200k).unwrap(), 0).unwrap();
    group.throughput(Throughput::Elements(12_000));
    group.bench_function("12000_rows_parse_and_build_every_prompt", |b| {
        b.iter(|| {
            let trace = parse(
                Cursor::new(text.as_bytes()),
                Path::new("tiled"),
                &LoadOptions::default(),
            )
            .unwrap();
            assert_eq!(trace.requests.len(), 12_000);
            let mut tokens = 0u64;
            for r in &trace.requests {
                tokens += u64::from(black_box(builder.build(&r, 0)).tokens.unwrap_or(0));
            }
            tokens
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20);
    targets = bench, load_and_synthesize
}
criterion_main!(benches);

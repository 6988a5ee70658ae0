//! SSE framing and chunk parsing throughput (MB/s) on the real captures in `shared/fixtures/`.
//!
//! Criterion, short measurement windows: `cargo bench -p canary-replay --bench sse`. Each
//! capture is fed in 1,448-byte reads (one TCP segment's payload on loopback-sized MTUs is
//! larger; small reads are the harder case), then each event's `data:` is parsed as a chunk.
//! `parse/scan` and `parse/serde_json` parse the chunks alone, by the path canaryd uses (the
//! scanner, serde_json where it gives up) and by serde_json alone.
//!
//! Instructions, for callgrind (repeatable where time on shared cores is not):
//! `CANARYD_SSE_ROUNDS=N CANARYD_SSE_WHAT=frame|scan|serde_json <bench binary>` skips criterion
//! and runs N rounds of that over all four captures; the difference between two values of N,
//! divided by the rounds and chunks between them, is the cost per chunk without start-up.

use std::hint::black_box;
use std::time::Duration;

use canary_core::MonoTime;
use canary_replay::{parse_chunk, parse_chunk_serde, ChunkInfo, SseParser};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/fixtures/");
const READ: usize = 1448;

fn frame(body: &[u8], events: &mut Vec<canary_replay::SseEvent>) {
    let mut parser = SseParser::new();
    for read in body.chunks(READ) {
        parser
            .push(read, MonoTime(0), events)
            .expect("events within the limit");
    }
}

/// The `data:` of every chunk of `body` (not `[DONE]`).
fn chunks(body: &[u8]) -> Vec<String> {
    let mut events = Vec::new();
    frame(body, &mut events);
    events
        .into_iter()
        .map(|e| e.data)
        .filter(|d| d != "[DONE]")
        .collect()
}

fn tokens(chunks: &[String], parse: fn(&str) -> Result<ChunkInfo, serde_json::Error>) -> usize {
    chunks
        .iter()
        .filter_map(|d| parse(black_box(d)).ok())
        .filter(|c| c.has_token())
        .count()
}

/// `CANARYD_SSE_ROUNDS` rounds of one stage, for an instruction count; false when unset.
fn rounds_for_callgrind() -> bool {
    let Some(rounds) = std::env::var("CANARYD_SSE_ROUNDS")
        .ok()
        .and_then(|r| r.parse::<usize>().ok())
    else {
        return false;
    };
    let what = std::env::var("CANARYD_SSE_WHAT").unwrap_or_default();
    let bodies: Vec<Vec<u8>> = [
        "llamacpp_server_chat_stream.sse",
        "llamacpp_server_completions_stream.sse",
        "llama_cpp_python_chat_stream.sse",
        "llama_cpp_python_completions_stream.sse",
    ]
    .iter()
    .map(|n| std::fs::read(format!("{FIXTURES}{n}")).expect(n))
    .collect();
    let all: Vec<Vec<String>> = bodies.iter().map(|b| chunks(b)).collect();
    let n: usize = all.iter().map(Vec::len).sum();
    let mut events = Vec::new();
    let mut out = 0;
    for _ in 0..rounds {
        for (body, chunks) in bodies.iter().zip(&all) {
            out += match what.as_str() {
                "frame" => {
                    events.clear();
                    frame(black_box(body), &mut events);
                    events.len()
                }
                "scan" => tokens(chunks, parse_chunk),
                "serde_json" => tokens(chunks, parse_chunk_serde),
                other => panic!("CANARYD_SSE_WHAT={other:?}: frame, scan or serde_json"),
            };
        }
    }
    println!("{what}: {rounds} rounds of {n} chunks ({out})");
    true
}

fn bench(c: &mut Criterion) {
    if rounds_for_callgrind() {
        return;
    }
    let mut group = c.benchmark_group("sse");
    for name in [
        "llamacpp_server_chat_stream.sse",
        "llamacpp_server_completions_stream.sse",
        "llama_cpp_python_chat_stream.sse",
    ] {
        let path = format!("{FIXTURES}{name}");
        let body = std::fs::read(&path).expect(&path);
        let mut events = Vec::new();
        frame(&body, &mut events);
        assert!(events.len() > 10, "{name}: {} events", events.len());
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_function(format!("frame/{name}"), |b| {
            b.iter(|| {
                events.clear();
                frame(black_box(&body), &mut events);
                events.len()
            })
        });
        let data = chunks(&body);
        group.bench_function(format!("parse/scan/{name}"), |b| {
            b.iter(|| tokens(&data, parse_chunk))
        });
        group.bench_function(format!("parse/serde_json/{name}"), |b| {
            b.iter(|| tokens(&data, parse_chunk_serde))
        });
        group.bench_function(format!("frame+parse/{name}"), |b| {
            b.iter(|| {
                events.clear();
                frame(black_box(&body), &mut events);
                events
                    .iter()
                    .filter(|e| e.data != "[DONE]")
                    .filter_map(|e| parse_chunk(&e.data).ok())
                    .filter(|c| c.has_token())
                    .count()
            })
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

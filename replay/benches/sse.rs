//! SSE framing and chunk parsing throughput (MB/s) on the real captures in `shared/fixtures/`.
//!
//! Criterion, short measurement windows: `cargo bench -p canary-replay --bench sse`. Each
//! capture is fed in 1,448-byte reads (one TCP segment's payload on loopback-sized MTUs is
//! larger; small reads are the harder case), then each event's `data:` is parsed as a chunk.

use std::hint::black_box;
use std::time::Duration;

use canary_core::MonoTime;
use canary_replay::{parse_chunk, SseParser};
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

fn bench(c: &mut Criterion) {
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

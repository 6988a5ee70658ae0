//! Statistics aggregation throughput (records/s): request records into the run [`Aggregator`]
//! (every per-metric histogram, goodput, token agreement), then the summary.
//!
//! Criterion, short measurement windows: `cargo bench -p canary-core --bench aggregate`.
//! The records' lengths come from the real Mooncake slice in `shared/traces/`; their timings
//! are derived from the lengths (a fixed prefill and decode rate), since no recorded run ships
//! with the repository.

use std::hint::black_box;
use std::time::Duration;

use canary_core::{Aggregator, ChunkGaps, Goodput, RequestRecord, Usage};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

const MOONCAKE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/traces/mooncake_conversation_first2000.jsonl"
);

fn records() -> Vec<(RequestRecord, ChunkGaps)> {
    let trace = std::fs::read_to_string(MOONCAKE).expect(MOONCAKE);
    trace
        .lines()
        .enumerate()
        .map(|(i, line)| {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let input = v["input_length"].as_u64().unwrap() as u32;
            let output = v["output_length"].as_u64().unwrap() as u32;
            let sent = v["timestamp"].as_f64().unwrap();
            let ttft = 20.0 + f64::from(input) / 10_000.0;
            let itl = 10.0 + (i % 7) as f64;
            let e2e = ttft + itl * f64::from(output.saturating_sub(1));
            let gaps = ChunkGaps::from(&vec![itl; output.saturating_sub(1) as usize][..]);
            let record = RequestRecord {
                id: i as u32,
                trace_line: i as u32 + 1,
                scheduled_at_ms: sent,
                sent_at_ms: sent + 0.1,
                ended_at_ms: sent + 0.1 + e2e,
                schedule_lag_ms: 0.1,
                ttfb_ms: Some(ttft - 1.0),
                ttft_ms: Some(ttft),
                ttst_ms: Some(itl),
                ttfo_ms: Some(ttft),
                itl_ms: (output > 1).then_some(itl),
                max_chunk_gap_ms: Some(itl),
                e2e_ms: Some(e2e),
                output_tokens_per_s: Some(1000.0 / itl),
                chunks: output,
                input_tokens: input,
                output_tokens: output,
                usage: Some(Usage {
                    prompt_tokens: Some(input),
                    completion_tokens: Some(output),
                    ..Default::default()
                }),
                ..Default::default()
            };
            (record, gaps)
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let records = records();
    let goodput: Goodput = "time_to_first_token:400 inter_token_latency:40"
        .parse()
        .unwrap();
    let mut group = c.benchmark_group("aggregate");
    group.throughput(Throughput::Elements(records.len() as u64));
    group.bench_function("records+summary", |b| {
        b.iter(|| {
            let mut agg = Aggregator::new(goodput.clone());
            for (r, gaps) in &records {
                agg.add(black_box(r), black_box(gaps));
            }
            agg.summary()
        })
    });
    group.bench_function("records, no chunk gaps", |b| {
        b.iter(|| {
            let mut agg = Aggregator::new(goodput.clone());
            for (r, _) in &records {
                agg.add(black_box(r), &ChunkGaps::new());
            }
            agg.requests()
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
    targets = bench
}
criterion_main!(benches);

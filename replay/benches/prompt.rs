//! Prompt synthesis throughput on the real Mooncake conversation slice.
//!
//! A plain timing harness (`harness = false`, no criterion: the workspace's criterion is
//! not in Cargo.lock and this machine has no network). Run with
//! `cargo bench -p canary-replay --bench prompt`.
//!
//! Last results (2-core dev VM, release profile, `cargo bench`):
//!   o200k load 175 ms, vocabulary build 1.3 ms (963 single-token words)
//!   build: 2000 rows, 27.4M tokens in 39 ms = 710M tokens/s (mean 19 µs per prompt;
//!   max 0.4–3.6 ms across runs, a 126k-token prompt's first-touch page faults and VM
//!   noise); real o200k encode of the same text, for comparison: 7.7M tokens/s.

use std::hint::black_box;
use std::time::{Duration, Instant};

use canary_core::TraceRequest;
use canary_replay::{PromptBody, PromptBuilder, Tokenizer, TokenizerSpec};

const MOONCAKE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/traces/mooncake_conversation_first2000.jsonl"
);

fn rows() -> Vec<TraceRequest> {
    let trace = std::fs::read_to_string(MOONCAKE).expect(MOONCAKE);
    trace
        .lines()
        .enumerate()
        .map(|(i, line)| {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            TraceRequest::new(
                i as u32,
                i as u32 + 1,
                v["timestamp"].as_u64().unwrap_or(0) * 1000,
                None,
                0,
                v["input_length"].as_u64().unwrap() as u32,
                v["output_length"].as_u64().unwrap() as u32,
                v["hash_ids"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|id| id.as_u64().unwrap())
                    .collect(),
                512,
            )
        })
        .collect()
}

fn main() {
    let t = Instant::now();
    let tok = Tokenizer::load(&TokenizerSpec::BuiltinO200k).unwrap();
    let load = t.elapsed();
    let mut vocab = Duration::MAX;
    let mut builder = None;
    for _ in 0..5 {
        let t = Instant::now();
        builder = Some(PromptBuilder::new(tok.clone(), 0).unwrap());
        vocab = vocab.min(t.elapsed());
    }
    let builder = builder.unwrap();
    println!(
        "o200k load {load:.2?}, vocabulary build {vocab:.2?} ({} words)",
        builder.vocabulary_len()
    );

    let rows = rows();
    let tokens: u64 = rows.iter().map(|r| u64::from(r.input_tokens)).sum();
    let mut best = Duration::MAX;
    let mut max_one = Duration::ZERO;
    for _ in 0..5 {
        let start = Instant::now();
        for r in &rows {
            let t = Instant::now();
            black_box(builder.build(black_box(r), 0));
            max_one = max_one.max(t.elapsed());
        }
        best = best.min(start.elapsed());
    }
    println!(
        "build: {} rows, {:.1}M tokens in {best:.2?} = {:.2}M tokens/s \
         (mean {:.1?}, max {max_one:.1?} per prompt)",
        rows.len(),
        tokens as f64 / 1e6,
        tokens as f64 / best.as_secs_f64() / 1e6,
        best / rows.len() as u32,
    );

    // For comparison: encoding the same prompts, which the hot path never does.
    let sample = &rows[..200];
    let texts: Vec<String> = sample
        .iter()
        .map(|r| match builder.build(r, 0).body {
            PromptBody::Text(t) => t,
            PromptBody::Messages(_) => unreachable!(),
        })
        .collect();
    let t = Instant::now();
    let counted: usize = texts.iter().map(|t| tok.count_tokens(t)).sum();
    let enc = t.elapsed();
    let expected: u64 = sample.iter().map(|r| u64::from(r.input_tokens)).sum();
    assert_eq!(counted as u64, expected);
    println!(
        "encode (check only): {:.1}M tokens in {enc:.2?} = {:.2}M tokens/s",
        counted as f64 / 1e6,
        counted as f64 / enc.as_secs_f64() / 1e6
    );
}

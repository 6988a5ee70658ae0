//! The parsers of what canaryd reads from outside, fed mutations of real captures (the traces
//! and SSE bodies under `shared/`): never a panic, errors that name the file, and the same
//! events however a stream is cut into reads. `CANARYD_FUZZ_SECS=N` runs each for N seconds
//! (see the README's "Fuzzing").

use canary_core::MonoTime;
use canary_replay::trace::{self, LoadOptions, TraceFormat};
use canary_replay::{parse_chunk, SseEvent, SseParser};
use canary_testkit::fuzz::{fuzz, line_windows, Rng};
use std::path::Path;

fn shared(rel: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared")
        .join(rel);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Parses `input` as a trace named `name`, both strictly and skipping bad rows, and checks
/// what a parser owes its user: an error names the file, a trace is numbered and in order.
fn parse_trace(name: &str, input: &[u8]) -> String {
    let mut label = String::new();
    for skip_invalid in [false, true] {
        let opts = LoadOptions {
            skip_invalid,
            ..LoadOptions::default()
        };
        match trace::parse(input, Path::new(name), &opts) {
            Ok(t) => {
                for (i, r) in t.requests.iter().enumerate() {
                    assert_eq!(r.index as usize, i);
                    assert!(r.line >= 1);
                }
                assert!(t
                    .requests
                    .to_vec()
                    .windows(2)
                    .all(|w| w[0].timestamp_us <= w[1].timestamp_us));
                label += &format!("ok {:?} {} ", t.format, t.requests.len().min(3));
            }
            Err(e) => {
                let msg = e.to_string();
                assert!(msg.starts_with(name), "error without the file name: {msg}");
                label += &format!("{:?} ", e.kind());
            }
        }
    }
    label
}

const TRACE_WORDS: &[&[u8]] = &[
    b"\"timestamp\": ",
    b"\"input_length\": ",
    b"\"output_length\": ",
    b"\"hash_ids\": [",
    b"\"session_id\": ",
    b"\"delay\": ",
    b"\"chat_id\": ",
    b"\"parent_chat_id\": ",
    b"\"turn\": ",
    b"\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]",
    b"\"text_input\": ",
    b"\"extra\": {",
    b"null",
    b"true",
    b"{}",
    b"[]",
    b",",
    b"\"",
    b"\\u0000",
    b"\xef\xbb\xbf",
    b"\r\n",
];

#[test]
fn trace_rows_jsonl() {
    let mut seeds = Vec::new();
    for file in [
        "traces/mooncake_conversation_first2000.jsonl",
        "traces/mooncake_arxiv_first20.jsonl",
        "traces/mooncake_synthetic.jsonl",
        "traces/bailian_documented_row.jsonl",
    ] {
        seeds.extend(line_windows(&shared(file), 6, 97));
    }
    let report = fuzz("trace-jsonl", seeds, TRACE_WORDS, 60_000, |input| {
        parse_trace("fuzz.jsonl", input)
    });
    assert!(report.outcomes >= 8, "{report}");
}

const CSV_WORDS: &[&[u8]] = &[
    b"Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n",
    b"Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,Log Type\n",
    b",",
    b"\"",
    b"ChatGPT",
    b"GPT-4",
    b"Conversation log",
    b"API log",
    b"\r\n",
    b"\xef\xbb\xbf",
];

#[test]
fn trace_rows_csv() {
    let seeds = line_windows(&shared("traces/burstgpt_readme_rows.csv"), 8, 3);
    let report = fuzz("trace-csv", seeds, CSV_WORDS, 40_000, |input| {
        parse_trace("fuzz.csv", input)
    });
    assert!(report.outcomes >= 4, "{report}");
    // Every seed was a CSV trace.
    assert!(matches!(
        trace::parse(
            &shared("traces/burstgpt_readme_rows.csv")[..],
            Path::new("f.csv"),
            &LoadOptions::default()
        )
        .map(|t| t.format),
        Ok(TraceFormat::BurstGpt)
    ));
}

/// The events of `input` fed as one read.
fn events_whole(input: &[u8]) -> Vec<SseEvent> {
    let mut out = Vec::new();
    // Fuzz inputs are kilobytes: far below the parser's 1 MiB event cap.
    SseParser::new()
        .push(input, MonoTime(1), &mut out)
        .expect("under the event cap");
    out
}

/// The events of `input` cut into reads at points drawn from `rng`, each read at its own time.
fn events_cut(input: &[u8], rng: &mut Rng) -> Vec<SseEvent> {
    let mut out = Vec::new();
    let mut p = SseParser::new();
    let mut rest = input;
    let mut t = 1;
    while !rest.is_empty() {
        let n = 1 + rng.below(rest.len().min(64));
        p.push(&rest[..n], MonoTime(t), &mut out)
            .expect("under the event cap");
        rest = &rest[n..];
        t += 1;
    }
    out
}

const SSE_WORDS: &[&[u8]] = &[
    b"data: ",
    b"data:",
    b"event: ",
    b": keep-alive\n",
    b"\n\n",
    b"\r\n\r\n",
    b"\r\r",
    b"[DONE]",
    b"{\"choices\":[{\"delta\":{\"content\":\"x\"}}]}",
    b"{\"choices\":[{\"delta\":{\"reasoning_content\":\"r\"}}]}",
    b"{\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2,\"prompt_tokens_details\":{\"cached_tokens\":3}}}",
    b"\"timings\":{\"prompt_ms\":1.5,\"cache_n\":2}",
    b"{\"error\":{\"message\":\"m\"}}",
    b"null",
    b"\\ud800",
];

#[test]
fn sse_streams_and_their_chunks() {
    let seeds: Vec<Vec<u8>> = [
        "fixtures/llamacpp_server_chat_stream.sse",
        "fixtures/llamacpp_server_completions_stream.sse",
        "fixtures/llama_cpp_python_chat_stream.sse",
        "fixtures/llama_cpp_python_completions_stream.sse",
    ]
    .iter()
    .map(|f| shared(f))
    .collect();
    let mut rng = Rng::new(7);
    let report = fuzz("sse", seeds, SSE_WORDS, 20_000, |input| {
        let whole = events_whole(input);
        // Where the reads fall changes only the times, never the events.
        let strip = |v: Vec<SseEvent>| -> Vec<(Option<String>, String)> {
            v.into_iter().map(|e| (e.event, e.data)).collect()
        };
        let whole_events = strip(whole.clone());
        let cut = events_cut(input, &mut rng);
        assert!(cut.windows(2).all(|w| w[0].at <= w[1].at));
        assert_eq!(strip(cut), whole_events, "cut into reads");
        let mut parsed = 0;
        for e in &whole {
            if e.data != "[DONE]" && parse_chunk(&e.data).is_ok() {
                parsed += 1;
            }
        }
        format!("{} events, {} chunks", whole.len().min(4), parsed.min(4))
    });
    assert!(report.outcomes >= 6, "{report}");
}

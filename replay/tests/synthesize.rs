//! `synthesize` on the real Mooncake conversation trace, read back by the same loader: the
//! identity keeps every length, time and the prefix reuse; each factor changes what it names
//! and nothing else (issue 17).

use crate::support::load_shared;
use canary_replay::trace::Prompts;
use canary_replay::{
    analyze, parse, synthesize, LoadOptions, Synthesis, SynthesisError, Trace, TraceFormat,
};
use std::collections::HashSet;
use std::path::Path;

const TRACE: &str = "mooncake_conversation_first2000.jsonl";

/// `trace` synthesized by `s`, loaded back.
fn round_trip(trace: &Trace, s: &Synthesis) -> Trace {
    let mut out = Vec::new();
    let report = synthesize(trace, s, LoadOptions::default().length_limit, &mut out).unwrap();
    assert_eq!(report.rows, trace.requests.len() as u64);
    parse(
        &out[..],
        Path::new("synthesized.jsonl"),
        &LoadOptions::default(),
    )
    .unwrap()
}

/// Rows by line (the loader sorts by timestamp; equal timestamps keep file order).
fn lengths(t: &Trace) -> Vec<(u32, u32)> {
    t.requests
        .iter()
        .map(|r| (r.input_tokens, r.output_tokens))
        .collect()
}

#[test]
fn the_identity_keeps_lengths_times_and_prefix_reuse() {
    let trace = load_shared(TRACE);
    let back = round_trip(&trace, &Synthesis::default());
    assert_eq!(lengths(&back), lengths(&trace));
    for (a, b) in trace.requests.iter().zip(&back.requests) {
        assert_eq!(a.timestamp_us, b.timestamp_us);
        assert_eq!(a.hash_ids.len(), b.hash_ids.len());
    }
    let (a, b) = (analyze(&trace), analyze(&back));
    let (pa, pb) = (a.prefix_reuse.unwrap(), b.prefix_reuse.unwrap());
    assert!(pa.reused_blocks > 0, "the trace shares prefixes");
    assert_eq!(
        (pa.blocks, pa.reused_blocks, pa.distinct_blocks),
        (pb.blocks, pb.reused_blocks, pb.distinct_blocks)
    );
}

#[test]
fn each_factor_changes_what_it_names() {
    let trace = load_shared(TRACE);
    let base = analyze(&trace).prefix_reuse.unwrap();
    let shared: HashSet<u64> = {
        let mut seen = HashSet::new();
        let mut twice = HashSet::new();
        for id in trace.requests.iter().flat_map(|r| r.hash_ids.to_vec()) {
            if !seen.insert(id) {
                twice.insert(id);
            }
        }
        twice
    };

    // Twice the speed: every timestamp halved (to the microsecond).
    let fast = round_trip(
        &trace,
        &Synthesis {
            speedup_ratio: 2.0,
            ..Synthesis::default()
        },
    );
    for (a, b) in trace.requests.iter().zip(&fast.requests) {
        assert!(a.timestamp_us / 2 - b.timestamp_us <= 1);
    }
    assert_eq!(lengths(&fast), lengths(&trace));

    // Four prefix roots: the same lengths, fewer reused blocks, more distinct ones.
    let roots = round_trip(
        &trace,
        &Synthesis {
            prefix_root_multiplier: 4,
            seed: 1,
            ..Synthesis::default()
        },
    );
    assert_eq!(lengths(&roots), lengths(&trace));
    let r = analyze(&roots).prefix_reuse.unwrap();
    assert!(r.reused_blocks < base.reused_blocks, "{r:?} vs {base:?}");
    assert!(r.distinct_blocks > base.distinct_blocks);

    // Half the unique prompt: the leading shared blocks (the prefix) keep their tokens, the
    // rest halves; outputs stay.
    let half = round_trip(
        &trace,
        &Synthesis {
            prompt_len_multiplier: 0.5,
            ..Synthesis::default()
        },
    );
    let mut changed = 0;
    for (a, b) in trace.requests.iter().zip(&half.requests) {
        assert_eq!(a.output_tokens, b.output_tokens);
        let prefix_blocks = a
            .hash_ids
            .iter()
            .take_while(|id| shared.contains(id))
            .count();
        let prefix = (prefix_blocks as u32 * 512).min(a.input_tokens);
        let unique = a.input_tokens - prefix;
        let want = (prefix + (unique as f64 * 0.5).round() as u32).max(1);
        assert_eq!(b.input_tokens, want, "line {}", a.line);
        changed += (b.input_tokens != a.input_tokens) as u32;
    }
    assert!(changed > 0);

    // Twice the shared prefix: more reused blocks, never a shorter prompt.
    let long = round_trip(
        &trace,
        &Synthesis {
            prefix_len_multiplier: 2.0,
            ..Synthesis::default()
        },
    );
    let l = analyze(&long).prefix_reuse.unwrap();
    assert!(l.reused_blocks > base.reused_blocks, "{l:?} vs {base:?}");
    for (a, b) in trace.requests.iter().zip(&long.requests) {
        assert!(b.input_tokens >= a.input_tokens);
    }

    // Caps: every length within them, blocks matching the capped length.
    let capped = round_trip(
        &trace,
        &Synthesis {
            max_isl: Some(1000),
            max_osl: Some(100),
            ..Synthesis::default()
        },
    );
    for (a, b) in trace.requests.iter().zip(&capped.requests) {
        assert_eq!(b.input_tokens, a.input_tokens.min(1000));
        assert_eq!(b.output_tokens, a.output_tokens.min(100));
        assert_eq!(b.hash_ids.len() as u32, b.input_tokens.div_ceil(512));
    }
}

#[test]
fn nonsense_settings_are_refused() {
    let trace = load_shared(TRACE);
    for s in [
        Synthesis {
            speedup_ratio: 0.0,
            ..Synthesis::default()
        },
        Synthesis {
            prefix_root_multiplier: 0,
            ..Synthesis::default()
        },
        Synthesis {
            prompt_len_multiplier: f64::NAN,
            ..Synthesis::default()
        },
        Synthesis {
            max_isl: Some(0),
            ..Synthesis::default()
        },
    ] {
        assert!(
            synthesize(
                &trace,
                &s,
                LoadOptions::default().length_limit,
                &mut Vec::new()
            )
            .is_err(),
            "{s:?}"
        );
    }
}

/// A factor that makes a row longer than the length limit is refused by its line before the
/// row's blocks are built: 1e6 used to ask for millions of block ids a row (out of memory),
/// and 1e300 on the prefix overflowed the block arithmetic (a panic in debug builds).
#[test]
fn a_row_scaled_past_the_length_limit_is_refused_by_its_line_before_it_is_built() {
    let trace = load_shared(TRACE);
    for s in [
        Synthesis {
            prompt_len_multiplier: 1e6,
            ..Synthesis::default()
        },
        Synthesis {
            prefix_len_multiplier: 1e300,
            ..Synthesis::default()
        },
    ] {
        let e = synthesize(&trace, &s, 10_000_000, &mut Vec::new()).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.starts_with("line ") && msg.contains("over the limit of 10000000"),
            "{msg}"
        );
    }
}

/// The real Bailian row (the one its documentation quotes: 502 tokens in 32 blocks of 16) is
/// written back as Bailian, in its own 16-token blocks, and the same loader reads it; it used
/// to be refused because a Mooncake file can only say 512-token blocks.
#[test]
fn a_bailian_trace_is_written_as_bailian_in_its_own_blocks() {
    let trace = load_shared("bailian_documented_row.jsonl");
    assert_eq!(trace.format, TraceFormat::Bailian);
    let a = trace.requests.get(0).unwrap();
    assert_eq!(
        (a.input_tokens, a.hash_ids.len(), a.block_size),
        (502, 32, 16)
    );

    let mut out = Vec::new();
    synthesize(
        &trace,
        &Synthesis::default(),
        LoadOptions::default().length_limit,
        &mut out,
    )
    .unwrap();
    let text = String::from_utf8(out.clone()).unwrap();
    let row: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    // The first turn keeps its chat id (the session's), and the documented fields are there.
    assert_eq!(row["chat_id"], 0, "{text}");
    assert_eq!(row["parent_chat_id"], -1, "{text}");
    assert_eq!(row["turn"], 1, "{text}");
    assert_eq!(row["timestamp"], 0.0, "{text}");
    assert_eq!(row["type"], "thinking", "{text}");
    assert_eq!(row["hash_ids"].as_array().unwrap().len(), 32, "{text}");
    let back = round_trip(&trace, &Synthesis::default());
    assert_eq!(back.format, TraceFormat::Bailian);
    let b = back.requests.get(0).unwrap();
    assert_eq!(
        (
            b.timestamp_us,
            b.session,
            b.turn,
            b.input_tokens,
            b.output_tokens
        ),
        (
            a.timestamp_us,
            a.session,
            a.turn,
            a.input_tokens,
            a.output_tokens
        )
    );
    assert_eq!((b.block_size, b.hash_ids.len()), (16, 32));
    assert_eq!(back.report.categories, trace.report.categories);

    // Half the prompt and a capped output: 251 tokens are 16 blocks of 16 (the loader's block
    // rule holds, or the parse above would fail), the output capped.
    let s = Synthesis {
        prompt_len_multiplier: 0.5,
        max_osl: Some(100),
        speedup_ratio: 2.0,
        ..Synthesis::default()
    };
    let half = round_trip(&trace, &s);
    let h = half.requests.get(0).unwrap();
    assert_eq!((h.input_tokens, h.output_tokens), (251, 100));
    assert_eq!((h.block_size, h.hash_ids.len()), (16, 16));
    assert_eq!(analyze(&half).requests, 1);
}

/// FNV-1a of `bytes`: a digest of a written trace, stable across Rust releases.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The settings [`the_written_bytes_are_those_of_the_map_of_every_block`] covers: each factor,
/// several prefix roots, caps.
fn digest_cases() -> Vec<(&'static str, Synthesis)> {
    let d = Synthesis::default;
    vec![
        ("identity", d()),
        (
            "roots",
            Synthesis {
                prefix_root_multiplier: 3,
                seed: 1,
                speedup_ratio: 2.0,
                ..d()
            },
        ),
        (
            "lengths",
            Synthesis {
                prefix_len_multiplier: 2.5,
                prompt_len_multiplier: 0.5,
                ..d()
            },
        ),
        (
            "caps",
            Synthesis {
                prompt_len_multiplier: 3.0,
                prefix_root_multiplier: 2,
                max_isl: Some(20_000),
                max_osl: Some(100),
                ..d()
            },
        ),
    ]
}

/// Block ids used to be numbered by a map holding a key for every block written, shared or
/// not; now only the shared-prefix blocks are in a map and a counter numbers the rest. The
/// written bytes must not change: these digests are of the files the map of every block wrote
/// (captured from that code on these real traces), so a renumbering shows here.
#[test]
fn the_written_bytes_are_those_of_the_map_of_every_block() {
    let want: &[(&str, &str, u64)] = &[
        (
            "mooncake_conversation_first2000.jsonl",
            "identity",
            0x767b24732a82a291,
        ),
        (
            "mooncake_conversation_first2000.jsonl",
            "roots",
            0xd91d82a0a83d7829,
        ),
        (
            "mooncake_conversation_first2000.jsonl",
            "lengths",
            0xef2cc6f714d95479,
        ),
        (
            "mooncake_conversation_first2000.jsonl",
            "caps",
            0x924b563a10049ff9,
        ),
        ("mooncake_synthetic.jsonl", "identity", 0x1a8ff5badfbfc71f),
        ("mooncake_synthetic.jsonl", "roots", 0x2ec9567518271f12),
        ("mooncake_synthetic.jsonl", "lengths", 0x7f96a5f4a5db48da),
        ("mooncake_synthetic.jsonl", "caps", 0x8d009bf9be33935b),
        (
            "mooncake_arxiv_first20.jsonl",
            "identity",
            0xafbb3b30339916f2,
        ),
        ("mooncake_arxiv_first20.jsonl", "roots", 0x6f56a5871bbaae3f),
        (
            "mooncake_arxiv_first20.jsonl",
            "lengths",
            0x6980adb6258083b2,
        ),
        ("mooncake_arxiv_first20.jsonl", "caps", 0x9592a7d1afec3f1c),
        (
            "bailian_documented_row.jsonl",
            "identity",
            0xb4440cf2bdba1e79,
        ),
        ("bailian_documented_row.jsonl", "roots", 0xb4440cf2bdba1e79),
        (
            "bailian_documented_row.jsonl",
            "lengths",
            0x1133152e598021f0,
        ),
        ("bailian_documented_row.jsonl", "caps", 0x3f92802cb078f2cf),
    ];
    let mut got = Vec::new();
    for file in [
        TRACE,
        "mooncake_synthetic.jsonl",
        "mooncake_arxiv_first20.jsonl",
        "bailian_documented_row.jsonl",
    ] {
        let trace = load_shared(file);
        // `canaryd synthesize` loads without the prompts: the same bytes.
        let skipping = LoadOptions {
            prompts: Prompts::Skip,
            ..LoadOptions::default()
        };
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../shared/traces")
            .join(file);
        let skipped = canary_replay::load(&path, &skipping).unwrap();
        for (name, s) in digest_cases() {
            let [mut out, mut out_skipped] = [Vec::new(), Vec::new()];
            synthesize(&trace, &s, LoadOptions::default().length_limit, &mut out).unwrap();
            synthesize(&skipped, &s, skipping.length_limit, &mut out_skipped).unwrap();
            assert!(out == out_skipped, "{file} {name}: prompts skipped");
            got.push((file, name, fnv1a(&out)));
        }
    }
    assert_eq!(got, want);
}

/// A prompt multiplier writes many more blocks, none of them shared: the ids held to be
/// reused stay those of the shared prefixes, as many as without it. Every block written used
/// to be held (about 80 bytes each), so memory grew with the file written: +98 MB for the
/// 1.3 M blocks of this trace at 50 times the prompt.
#[test]
fn the_ids_held_are_the_shared_prefixes_not_every_block_written() {
    let trace = load_shared(TRACE);
    let run = |s: &Synthesis| {
        let mut out = Vec::new();
        synthesize(&trace, s, LoadOptions::default().length_limit, &mut out).unwrap()
    };
    let base = run(&Synthesis::default());
    let long = run(&Synthesis {
        prompt_len_multiplier: 10.0,
        ..Synthesis::default()
    });
    let shared = analyze(&trace).prefix_reuse.unwrap();
    assert!(long.blocks > 5 * base.blocks, "{long:?} vs {base:?}");
    assert_eq!(long.held_blocks, base.held_blocks, "{long:?} vs {base:?}");
    // Held: one per distinct shared block, fewer than the distinct blocks of the trace.
    assert!(
        base.held_blocks > 0 && base.held_blocks < shared.distinct_blocks,
        "{base:?} vs {shared:?}"
    );
    // Three prefix copies hold at most three times as many.
    let roots = run(&Synthesis {
        prefix_root_multiplier: 3,
        prompt_len_multiplier: 10.0,
        ..Synthesis::default()
    });
    assert!(roots.held_blocks <= 3 * base.held_blocks, "{roots:?}");
    assert!(roots.held_blocks < roots.blocks / 10, "{roots:?}");
}

/// A row with its own prompt is refused by its line whether the prompts were kept or only
/// checked (`canaryd synthesize` skips them): the first such row in replay order, after the
/// rows before it were checked as ever.
#[test]
fn a_row_with_a_skipped_prompt_is_refused_as_a_kept_one_is() {
    // Generated rows in the aiperf superset of Mooncake: line 3 is the earliest with a prompt.
    let text = r#"{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}
{"timestamp": 30, "input_length": 10, "output_length": 5, "text_input": "hi"}
{"timestamp": 20, "input_length": 10, "output_length": 5, "messages": [{"role": "user", "content": "x"}]}
"#;
    let refusal = |prompts| {
        let opts = LoadOptions {
            prompts,
            ..LoadOptions::default()
        };
        let trace = parse(text.as_bytes(), Path::new("p.jsonl"), &opts).unwrap();
        let mut out = Vec::new();
        synthesize(&trace, &Synthesis::default(), opts.length_limit, &mut out).unwrap_err()
    };
    let (kept, skipped) = (refusal(Prompts::Keep), refusal(Prompts::Skip));
    assert!(
        matches!(skipped, SynthesisError::Row { line: 3, .. }),
        "{skipped}"
    );
    assert_eq!(skipped.to_string(), kept.to_string());
}

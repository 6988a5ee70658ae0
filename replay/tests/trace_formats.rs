//! Integration tests of the trace layer (`canary_replay::trace`): the real trace files under
//! `shared/traces/` (see its SOURCES.md), generated BurstGPT, Bailian and Mooncake rows, one
//! test per error class, `skip_invalid`, selection maths and analysis numbers.
//!
//! Rows written inline in this file are GENERATED for the tests, following each format's
//! documentation; they are not taken from a published trace.

use std::path::Path;
use std::time::Duration;

use canary_replay::trace::{
    self, FailedPolicy, LoadOptions, Selection, Shard, Trace, TraceError, TraceErrorKind,
    TraceFormat,
};

macro_rules! trace_file {
    ($name:literal) => {
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/traces/", $name)
    };
}

fn load(path: &str) -> Trace {
    trace::load(Path::new(path), &LoadOptions::default()).unwrap_or_else(|e| panic!("{e}"))
}

fn parse_with(name: &str, text: &str, opts: &LoadOptions) -> Result<Trace, TraceError> {
    trace::parse(text.as_bytes(), Path::new(name), opts)
}

fn parse(name: &str, text: &str) -> Trace {
    parse_with(name, text, &LoadOptions::default()).unwrap_or_else(|e| panic!("{e}"))
}

/// Parses text that must fail; checks the error's kind and that its message contains each of
/// `parts` (file:line and the field).
fn parse_err(name: &str, text: &str, kind: TraceErrorKind, parts: &[&str]) -> TraceError {
    let err = match parse_with(name, text, &LoadOptions::default()) {
        Ok(t) => panic!(
            "expected a {kind:?} error, got {} requests",
            t.requests.len()
        ),
        Err(e) => e,
    };
    let msg = err.to_string();
    assert_eq!(err.kind(), kind, "{msg}");
    for p in parts {
        assert!(msg.contains(p), "{msg:?} should contain {p:?}");
    }
    err
}

fn block_rule_holds(t: &Trace) {
    for r in &t.requests {
        let n = r.hash_ids.len() as u32;
        if n > 0 {
            assert!((n - 1) * r.block_size < r.input_tokens, "line {}", r.line);
            assert!(r.input_tokens <= n * r.block_size, "line {}", r.line);
        }
    }
}

fn indices_contiguous_and_sorted(t: &Trace) {
    for (i, r) in t.requests.iter().enumerate() {
        assert_eq!(r.index as usize, i);
    }
    assert!(t
        .requests
        .to_vec()
        .windows(2)
        .all(|w| w[0].timestamp_us <= w[1].timestamp_us));
}

// === Real files ===

#[test]
fn mooncake_conversation_first2000() {
    let t = load(trace_file!("mooncake_conversation_first2000.jsonl"));
    assert_eq!(t.format, TraceFormat::Mooncake);
    assert_eq!(t.requests.len(), 2000);
    assert_eq!(t.report.rows, 2000);
    block_rule_holds(&t);
    indices_contiguous_and_sorted(&t);
    let first = &t.requests.get(0).unwrap();
    assert_eq!(
        (first.timestamp_us, first.input_tokens, first.output_tokens),
        (0, 6758, 500)
    );
    assert_eq!(first.hash_ids, (0..14).collect::<Vec<u64>>());
    assert_eq!(
        (first.block_size, first.session, first.turn, first.line),
        (512, None, 0, 1)
    );
    let last = t.requests.last().unwrap();
    assert_eq!(
        (last.timestamp_us, last.input_tokens, last.line),
        (669_000_000, 1504, 2000)
    );

    let a = trace::analyze(&t);
    assert_eq!(a.requests, 2000);
    assert_eq!(a.duration_s, 669.0);
    // The largest burst in these 2000 lines: 19 requests on t = 570 s (SOURCES.md's "up to 28"
    // is over the whole 12,031-line trace).
    assert_eq!((a.peak_burst.requests, a.peak_burst.at_s), (19, 570.0));
    assert_eq!(a.peak_1s.requests, 19);
    assert_eq!((a.input_tokens.min, a.input_tokens.max), (891, 123_192));
    assert_eq!((a.output_tokens.min, a.output_tokens.max), (1, 2000));
    let p = a.prefix_reuse.expect("hash ids");
    assert_eq!(
        (p.blocks, p.distinct_blocks, p.reused_blocks),
        (54_559, 38_788, 15_771)
    );
    assert!(
        (p.block_hit_rate - 0.28906).abs() < 1e-4,
        "{}",
        p.block_hit_rate
    );
    assert!(
        (p.token_hit_rate - 0.29411).abs() < 1e-4,
        "{}",
        p.token_hit_rate
    );
    assert_eq!(a.sessions.sessions, 0);
}

#[test]
fn mooncake_synthetic() {
    let t = load(trace_file!("mooncake_synthetic.jsonl"));
    assert_eq!(t.requests.len(), 3993);
    block_rule_holds(&t);
    indices_contiguous_and_sorted(&t);
    assert_eq!(t.requests.last().unwrap().timestamp_us, 1_022_025_000);
    let a = trace::analyze(&t);
    assert_eq!(a.input_tokens.min, 13);
    assert_eq!(a.peak_burst.requests, 2);
}

#[test]
fn mooncake_arxiv_first20() {
    let t = load(trace_file!("mooncake_arxiv_first20.jsonl"));
    assert_eq!(t.requests.len(), 20);
    block_rule_holds(&t);
    let r = &t.requests.get(0).unwrap();
    assert_eq!(
        (r.input_tokens, r.output_tokens, r.hash_ids.len()),
        (6755, 500, 14)
    );
    let r = &t.requests.get(19).unwrap();
    assert_eq!(
        (r.timestamp_us, r.input_tokens, r.hash_ids.to_vec()),
        (3_052_000, 2007, vec![0, 446, 447, 448])
    );
    let a = trace::analyze(&t);
    assert_eq!((a.peak_burst.requests, a.peak_burst.at_s), (15, 0.0));
}

#[test]
fn bailian_documented_row() {
    let t = load(trace_file!("bailian_documented_row.jsonl"));
    assert_eq!(t.format, TraceFormat::Bailian);
    assert_eq!(t.requests.len(), 1);
    let r = &t.requests.get(0).unwrap();
    assert_eq!((r.timestamp_us, r.session, r.turn), (0, Some(0), 0));
    assert_eq!(
        (r.input_tokens, r.output_tokens, r.block_size),
        (502, 1494, 16)
    );
    assert_eq!(r.hash_ids, (0..32).collect::<Vec<u64>>());
    assert_eq!(t.report.categories.get("thinking"), Some(&1));
}

#[test]
fn burstgpt_readme_rows() {
    let t = load(trace_file!("burstgpt_readme_rows.csv"));
    assert_eq!(t.format, TraceFormat::BurstGpt);
    let got: Vec<_> = t
        .requests
        .iter()
        .map(|r| (r.line, r.timestamp_us, r.input_tokens, r.output_tokens))
        .collect();
    assert_eq!(
        got,
        [
            (2, 5_000_000, 472, 18),
            (3, 45_000_000, 1087, 230),
            (4, 118_000_000, 417, 276)
        ]
    );
    assert!(t
        .requests
        .iter()
        .all(|r| r.hash_ids.is_empty() && r.block_size == 512 && r.session.is_none()));
    assert_eq!(t.report.categories.get("ChatGPT"), Some(&2));
    assert_eq!(t.report.categories.get("GPT-4"), Some(&1));
}

// The README listed Mooncake's `hash_ids` as required, with the block rule for every row; the
// loader takes a row without them or with `[]` (a prompt of unique blocks), as documented now.
#[test]
fn mooncake_hash_ids_are_optional() {
    // The real arXiv rows, row 2's `hash_ids` removed and row 3's emptied.
    let text = edited(trace_file!("mooncake_arxiv_first20.jsonl"), 4, |n, l| {
        let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
        match n {
            2 => drop(v.as_object_mut().unwrap().remove("hash_ids")),
            3 => v["hash_ids"] = serde_json::json!([]),
            _ => {}
        }
        v.to_string()
    });
    let t = parse("h.jsonl", &text);
    let by_line = |line: u32| t.requests.iter().find(|r| r.line == line).unwrap();
    for line in [2, 3] {
        let r = by_line(line);
        assert!(r.hash_ids.is_empty(), "line {line}");
        assert!(r.input_tokens > 512, "line {line}: the rule would need ids");
    }
    assert!(!by_line(1).hash_ids.is_empty());
    let a = trace::analyze(&t);
    let blocks = a.prefix_reuse.unwrap().blocks;
    assert_eq!(
        blocks,
        [1, 4]
            .iter()
            .map(|&l| by_line(l).hash_ids.len() as u64)
            .sum::<u64>()
    );
}

// === Generated rows ===

#[test]
fn mooncake_sessions_delay_and_prompts() {
    // Generated, in the aiperf superset of the Mooncake format.
    let text = r#"{"session_id": "conv-a", "timestamp": 1000, "input_length": 10, "output_length": 2, "text_input": "hi"}
{"session_id": 7, "timestamp": 500.5, "input_length": 10, "output_length": 2, "messages": [{"role": "user", "content": "x"}]}
{"session_id": "conv-a", "delay": 250.5, "input_length": 20, "output_length": 3, "extra": {"temperature": 0}}
{"session_id": "7", "timestamp": 3000, "input_length": 30, "output_length": 4}

{"timestamp": 2000, "input_length": 5, "output_length": 1, "unknown_field": [1, 2]}
"#;
    let t = parse("gen.jsonl", text);
    let got: Vec<_> = t
        .requests
        .iter()
        .map(|r| (r.line, r.timestamp_us, r.session, r.turn, r.delay_us()))
        .collect();
    assert_eq!(
        got,
        [
            (2, 500_500, Some(1), 0, None),
            (1, 1_000_000, Some(0), 0, None),
            // No timestamp: the previous turn's, with the delay kept for the scheduler.
            (3, 1_000_000, Some(0), 1, Some(250_500)),
            (6, 2_000_000, None, 0, None),
            (4, 3_000_000, Some(1), 1, None),
        ]
    );
    use canary_core::TracePrompt;
    assert_eq!(
        t.requests.get(1).unwrap().prompt(),
        Some(&TracePrompt::Text("hi".into()))
    );
    assert!(matches!(
        t.requests.get(0).unwrap().prompt(),
        Some(TracePrompt::Messages(_))
    ));
    assert_eq!(
        t.requests.get(2).unwrap().extra(),
        Some(&serde_json::json!({"temperature": 0}))
    );
    let a = trace::analyze(&t);
    assert_eq!(
        (
            a.sessions.sessions,
            a.sessions.max_turns,
            a.sessions.mean_turns
        ),
        (2, 2, 2.0)
    );
}

// A turn that carries only a Mooncake `delay` is sent that long after its previous turn
// (which has its own server time) at the earliest. The loader gives it its previous turn's
// timestamp, and analyze-trace counted it there: a session of delays seemed sent at its
// start, one burst, over no time. Its rate, bursts and span now count the delays (server
// time not counted, and say so).
#[test]
fn analysis_times_delay_turns_after_their_previous_turn() {
    // Generated, in the aiperf superset of the Mooncake format: session "a" starts at 0 and
    // sends three more turns 10 s apart by delay; session "b" and a lone row at 0 and 5 s.
    let text = r#"{"session_id": "a", "timestamp": 0, "input_length": 10, "output_length": 2}
{"session_id": "a", "delay": 10000, "input_length": 20, "output_length": 2}
{"session_id": "a", "delay": 10000, "input_length": 30, "output_length": 2}
{"session_id": "a", "delay": 10000, "input_length": 40, "output_length": 2}
{"session_id": "b", "timestamp": 0, "input_length": 10, "output_length": 2}
{"timestamp": 5000, "input_length": 10, "output_length": 2}
"#;
    let a = trace::analyze(&parse("delays.jsonl", text));
    assert_eq!(a.delay_turns, 3);
    assert_eq!((a.first_timestamp_s, a.last_timestamp_s), (0.0, 5.0));
    assert_eq!(a.duration_s, 30.0);
    // Two requests at 0 s (a's first turn and b's), not five.
    assert_eq!((a.peak_burst.requests, a.peak_burst.at_s), (2, 0.0));
    assert_eq!(a.peak_1s.requests, 2);
    assert!(
        a.to_string().contains("3 turns are timed by their delay"),
        "{a}"
    );
    // The span a lower bound, the rate an upper one: said in the JSON too, never "exact".
    assert_eq!(
        (a.duration_kind, a.rate_kind),
        ("lower_bound", "upper_bound")
    );
    let text = a.to_string();
    assert!(
        !text.contains(" s, exact)") && !text.contains("sends, exact)"),
        "{text}"
    );
    // Without delays, the times are the timestamps, as before.
    let plain = trace::analyze(&load(trace_file!("mooncake_arxiv_first20.jsonl")));
    assert_eq!(plain.delay_turns, 0);
    assert_eq!(
        plain.duration_s,
        plain.last_timestamp_s - plain.first_timestamp_s
    );
    assert!(!plain.to_string().contains("timed by their delay"));
    assert_eq!((plain.duration_kind, plain.rate_kind), ("exact", "exact"));
    let text = plain.to_string();
    assert!(
        text.contains(" s, exact)") && text.contains("sends, exact)"),
        "{text}"
    );
    // The ideal cache's reuse is an upper bound on a real cache's.
    assert_eq!(plain.prefix_reuse.unwrap().kind, "upper_bound");
    assert!(
        text.contains("an upper bound on a real one's hits"),
        "{text}"
    );
}

#[test]
fn bailian_chains() {
    // Generated rows following the documented Bailian format; chat 12 appears before its parent.
    let text = r#"{"chat_id": 10, "parent_chat_id": -1, "timestamp": 1.5, "input_length": 20, "output_length": 5, "type": "text", "turn": 1, "hash_ids": [100, 101]}
{"chat_id": 12, "parent_chat_id": 11, "timestamp": 9.0, "input_length": 70, "output_length": 5, "type": "text", "turn": 3, "hash_ids": [100, 101, 102, 103, 104]}
{"chat_id": 11, "parent_chat_id": 10, "timestamp": 4.25, "input_length": 40, "output_length": 5, "type": "text", "turn": 2, "hash_ids": [100, 101, 102]}
{"chat_id": 20, "parent_chat_id": -1, "timestamp": 2.0, "input_length": 16, "output_length": 9, "type": "search", "turn": 1, "hash_ids": [200]}
"#;
    let t = parse("gen_bailian.jsonl", text);
    let got: Vec<_> = t
        .requests
        .iter()
        .map(|r| (r.line, r.timestamp_us, r.session, r.turn))
        .collect();
    assert_eq!(
        got,
        [
            (1, 1_500_000, Some(10), 0),
            (4, 2_000_000, Some(20), 0),
            (3, 4_250_000, Some(10), 1),
            (2, 9_000_000, Some(10), 2)
        ]
    );
    assert_eq!(t.report.categories.get("text"), Some(&3));
    let p = trace::analyze(&t).prefix_reuse.unwrap();
    // 11 blocks; 100 and 101 reused twice, 102 once.
    assert_eq!((p.blocks, p.reused_blocks, p.distinct_blocks), (11, 5, 6));

    // A `turn` field that contradicts the chain.
    let bad = text.replace(r#""turn": 3"#, r#""turn": 5"#);
    parse_err(
        "gen_bailian.jsonl",
        &bad,
        TraceErrorKind::InvalidValue,
        &["gen_bailian.jsonl:2:", "field \"turn\""],
    );
    let opts = LoadOptions {
        skip_invalid: true,
        ..Default::default()
    };
    let t = parse_with("gen_bailian.jsonl", &bad, &opts).unwrap();
    assert_eq!(
        (t.report.turn_mismatches, t.requests.get(3).unwrap().turn),
        (1, 2)
    );
}

// A follow-up timestamped before its parent cannot be sent after the parent's answer. It was
// accepted, and the selection then dropped it without a word (an orphan turn: its session's
// first turn not yet seen). Refused at load, naming the row's timestamp and the parent's, as
// Mooncake refuses a turn earlier than the one before it; with --skip-invalid, kept as its own
// session (and so replayed).
#[test]
fn error_bailian_follow_up_before_its_parent() {
    // Generated rows following the documented Bailian format: chat 11 (line 2) answers chat
    // 10 (line 1) but is timestamped before it.
    let text = r#"{"chat_id": 10, "parent_chat_id": -1, "timestamp": 4.0, "input_length": 20, "output_length": 5, "type": "text", "turn": 1, "hash_ids": [100, 101]}
{"chat_id": 11, "parent_chat_id": 10, "timestamp": 2.5, "input_length": 40, "output_length": 5, "type": "text", "turn": 2, "hash_ids": [100, 101, 102]}
{"chat_id": 12, "parent_chat_id": 11, "timestamp": 9.0, "input_length": 70, "output_length": 5, "type": "text", "turn": 3, "hash_ids": [100, 101, 102, 103, 104]}
"#;
    parse_err(
        "early.jsonl",
        text,
        TraceErrorKind::InvalidValue,
        &[
            "early.jsonl:2:",
            "field \"timestamp\"",
            "parent's (chat 10 on line 1, 4 s)",
            "found 2.5 s",
        ],
    );
    let opts = LoadOptions {
        skip_invalid: true,
        ..Default::default()
    };
    let t = parse_with("early.jsonl", text, &opts).unwrap();
    assert_eq!(t.report.orphans_rerooted, 1);
    let sessions: Vec<_> = t
        .requests
        .iter()
        .map(|r| (r.line, r.session, r.turn))
        .collect();
    assert_eq!(
        sessions,
        [(2, Some(11), 0), (1, Some(10), 0), (3, Some(11), 1)]
    );
    let (kept, rep) = t.select(&Selection::default()).unwrap();
    assert_eq!((kept.requests.len(), rep.dropped_orphan_turns), (3, 0));
}

const BURSTGPT_HEADER: &str =
    "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n";

#[test]
fn burstgpt_failed_rows() {
    // Generated rows in the BurstGPT format; two failed (0 response tokens), unsorted.
    let text = format!(
        "{BURSTGPT_HEADER}10,ChatGPT,100,0,100,Conversation log\n3,GPT-4,200,50,250,API log\n\
         20,ChatGPT,300,0,300,API log\n25.5,ChatGPT,400,60,460,Conversation log\n"
    );
    let t = parse("gen.csv", &text);
    let got: Vec<_> = t
        .requests
        .iter()
        .map(|r| (r.line, r.timestamp_us, r.output_tokens))
        .collect();
    assert_eq!(got, [(3, 3_000_000, 50), (5, 25_500_000, 60)]);
    assert_eq!(
        (t.report.rows, t.report.failed_skipped, t.report.failed_kept),
        (4, 2, 0)
    );

    let opts = LoadOptions {
        burstgpt_failed: FailedPolicy::Send,
        ..Default::default()
    };
    let t = parse_with("gen.csv", &text, &opts).unwrap();
    let got: Vec<_> = t
        .requests
        .iter()
        .map(|r| (r.index, r.line, r.output_tokens))
        .collect();
    assert_eq!(got, [(0, 3, 50), (1, 2, 0), (2, 4, 0), (3, 5, 60)]);
    assert_eq!((t.report.failed_skipped, t.report.failed_kept), (0, 2));

    // A failed row with no request tokens either, as upstream's BurstGPT_1.csv has them
    // (`1106,ChatGPT,0,0,0,Conversation log`): a failed row, not an invalid one that stops
    // the load; sent, with a one-token prompt.
    let zeros = format!("{text}1106,ChatGPT,0,0,0,Conversation log\n");
    let t = parse("gen.csv", &zeros);
    assert_eq!((t.report.failed_skipped, t.report.invalid_skipped), (3, 0));
    let t = parse_with("gen.csv", &zeros, &opts).unwrap();
    let failed = t.requests.iter().find(|r| r.line == 6).unwrap();
    assert_eq!((failed.input_tokens, failed.output_tokens), (1, 0));
    // A kept failed row cannot be synthesized: refused, naming it, rather than failing on
    // the written trace read back.
    let e = canary_replay::synthesize(
        &t,
        &canary_replay::Synthesis::default(),
        u32::MAX,
        &mut Vec::new(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("a failed row (0 output tokens"), "{e}");

    // Every row failed: nothing to replay.
    let all_failed = format!("{BURSTGPT_HEADER}10,ChatGPT,100,0,100,Conversation log\n");
    let err = parse_with("gen.csv", &all_failed, &LoadOptions::default()).unwrap_err();
    assert_eq!(err.kind(), TraceErrorKind::Empty);
}

#[test]
fn burstgpt_sessions() {
    // Generated rows in the newer BurstGPT layout, with `Session ID` and `Elapsed time`.
    let text = "Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,Log Type\n\
                7,s1,1.5,ChatGPT,30,3,33,Conversation log\n\
                2,s1,0.5,ChatGPT,10,1,11,Conversation log\n\
                4,s2,0.7,GPT-4,20,2,22,Conversation log\n\
                5,,0.7,GPT-4,20,2,22,API log\n";
    let t = parse("gen_sessions.csv", text);
    let got: Vec<_> = t
        .requests
        .iter()
        .map(|r| (r.timestamp_us / 1_000_000, r.session, r.turn))
        .collect();
    // Turns follow timestamp order within a session; keys in order of first appearance.
    assert_eq!(
        got,
        [
            (2, Some(0), 0),
            (4, Some(1), 0),
            (5, None, 0),
            (7, Some(0), 1)
        ]
    );
}

// === Errors: one per class ===

#[test]
fn error_bad_json() {
    let text = "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1}\n\n{\"timestamp\": 0, \"input_length\": 5\n";
    let err = parse_err(
        "bad.jsonl",
        text,
        TraceErrorKind::Json,
        &[r#"bad.jsonl:3: field "input_length": malformed JSON"#],
    );
    assert!(std::error::Error::source(&err).is_some());
}

// serde's derive reads a JSON array into a struct by position: a row written as
// `[0, 7319, 490, [0, 14, …]]` loaded as timestamp, input and output, and a Bailian row's
// values in a different order would have loaded into the wrong fields.
#[test]
fn error_a_row_that_is_not_an_object() {
    // The real arXiv Mooncake rows, the second one's values written as an array.
    let text = edited(trace_file!("mooncake_arxiv_first20.jsonl"), 3, |n, l| {
        if n != 2 {
            return l.to_string();
        }
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        let keys = ["timestamp", "input_length", "output_length", "hash_ids"];
        serde_json::Value::Array(keys.iter().map(|k| v[k].clone()).collect()).to_string()
    });
    assert!(text
        .lines()
        .nth(1)
        .unwrap()
        .starts_with("[0,7319,490,[0,14,"));
    parse_err(
        "arr.jsonl",
        &text,
        TraceErrorKind::NotAnObject,
        &["arr.jsonl:2: expected a JSON object, found an array"],
    );
    // The same row wrapped in an array, a number, a string: all refused; with skip_invalid
    // counted and the two real rows kept.
    let opts = LoadOptions {
        skip_invalid: true,
        ..Default::default()
    };
    for (i, found) in ["an array", "7", "string"].into_iter().enumerate() {
        let text = edited(
            trace_file!("mooncake_arxiv_first20.jsonl"),
            3,
            |n, l| match (n, i) {
                (2, 0) => format!("[{l}]"),
                (2, 1) => "7".into(),
                (2, _) => serde_json::Value::String(l.into()).to_string(),
                _ => l.to_string(),
            },
        );
        let t = parse_with("arr.jsonl", &text, &opts).unwrap();
        assert_eq!(
            t.requests.iter().map(|r| r.line).collect::<Vec<_>>(),
            [1, 3],
            "{found}"
        );
        assert_eq!(
            t.report.invalid_by_kind.get(&TraceErrorKind::NotAnObject),
            Some(&1)
        );
        assert!(
            t.report.warnings[0].contains(&format!(
                "arr.jsonl:2: expected a JSON object, found {found}"
            )),
            "{:?}",
            t.report.warnings
        );
    }
    // The documented Bailian row, then its values as an array.
    let real = std::fs::read_to_string(trace_file!("bailian_documented_row.jsonl")).unwrap();
    let v: serde_json::Value = serde_json::from_str(real.trim()).unwrap();
    let values: Vec<_> = v.as_object().unwrap().values().cloned().collect();
    let text = format!("{}\n{}\n", real.trim(), serde_json::Value::Array(values));
    parse_err(
        "barr.jsonl",
        &text,
        TraceErrorKind::NotAnObject,
        &["barr.jsonl:2: expected a JSON object, found an array"],
    );
}

// A syntax error after a row's closing brace was blamed on its last field:
// `trail.jsonl:2: field "hash_ids": malformed JSON: trailing characters`.
#[test]
fn error_after_the_object_names_no_field() {
    // The real arXiv Mooncake rows, a second object appended to the second one.
    let text = edited(
        trace_file!("mooncake_arxiv_first20.jsonl"),
        3,
        |n, l| match n {
            2 => format!(r#"{l}{{"a":1}}"#),
            _ => l.to_string(),
        },
    );
    let err = parse_err(
        "trail.jsonl",
        &text,
        TraceErrorKind::Json,
        &["trail.jsonl:2: malformed JSON after the object"],
    );
    assert!(!err.to_string().contains("field"), "{err}");
    let chain = format!("{:#}", anyhow::Error::new(err));
    assert!(chain.contains("trailing characters"), "{chain}");
}

#[test]
fn error_missing_field() {
    parse_err(
        "m.jsonl",
        r#"{"timestamp": 0, "output_length": 5}"#,
        TraceErrorKind::MissingField,
        &[r#"m.jsonl:1: missing required field "input_length""#],
    );
    // A first turn (or a row without session) needs a timestamp even with a delay.
    parse_err(
        "m.jsonl",
        r#"{"session_id": "a", "delay": 5, "input_length": 5, "output_length": 5}"#,
        TraceErrorKind::MissingField,
        &[r#"m.jsonl:1: missing required field "timestamp""#],
    );
}

#[test]
fn error_wrong_type() {
    parse_err(
        "w.jsonl",
        r#"{"timestamp": 0, "input_length": "abc", "output_length": 5}"#,
        TraceErrorKind::WrongType,
        &[r#"w.jsonl:1: field "input_length": expected a positive integer, found string "abc""#],
    );
    parse_err(
        "w.jsonl",
        r#"{"timestamp": 0, "input_length": 5, "output_length": 5, "hash_ids": [0, "x"]}"#,
        TraceErrorKind::WrongType,
        &["w.jsonl:1:", r#"field "hash_ids""#, "element 1"],
    );
}

// Values were quoted as Rust prints the float serde read: a hash id `0.0` as "element 0 = 0"
// (which reads as a valid id), 2^64 as 18446744073709552000 (another number).
#[test]
fn errors_quote_values_as_the_row_writes_them() {
    let arxiv = |edit: fn(&str) -> String| {
        edited(
            trace_file!("mooncake_arxiv_first20.jsonl"),
            3,
            |n, l| match n {
                2 => edit(l),
                _ => l.to_string(),
            },
        )
    };
    parse_err(
        "h.jsonl",
        &arxiv(|l| l.replacen("[0, 14,", "[0.0, 14,", 1)),
        TraceErrorKind::WrongType,
        &[
            r#"h.jsonl:2: field "hash_ids": expected an array of non-negative integers, found element 0 = 0.0"#,
        ],
    );
    parse_err(
        "h.jsonl",
        &arxiv(|l| l.replacen(", 14,", ", 18446744073709551616,", 1)),
        TraceErrorKind::WrongType,
        &["found element 1 = 18446744073709551616"],
    );
    parse_err(
        "h.jsonl",
        &arxiv(|l| {
            l.replacen(
                r#""timestamp": 0"#,
                r#""timestamp": 18446744073709551616"#,
                1,
            )
        }),
        TraceErrorKind::InvalidValue,
        &[
            r#"h.jsonl:2: field "timestamp""#,
            "found 18446744073709551616",
        ],
    );
    parse_err(
        "h.jsonl",
        &arxiv(|l| l.replacen("7319", "7319.50", 1)),
        TraceErrorKind::WrongType,
        &[r#"h.jsonl:2: field "input_length": expected a positive integer, found 7319.50"#],
    );
    // A BurstGPT cell too: the real rows, one `Request tokens` written with decimals.
    let real = std::fs::read_to_string(trace_file!("burstgpt_readme_rows.csv")).unwrap();
    parse_err(
        "h.csv",
        &real.replacen(",1087,", ",1087.50,", 1),
        TraceErrorKind::WrongType,
        &[r#"h.csv:3: field "Request tokens": expected a positive integer, found 1087.50"#],
    );
}

#[test]
fn error_invalid_lengths() {
    parse_err(
        "mooncake_x.jsonl",
        r#"{"timestamp": 0, "input_length": -3, "output_length": 5}"#,
        TraceErrorKind::InvalidValue,
        &[r#"mooncake_x.jsonl:1: field "input_length": expected a positive integer, found -3"#],
    );
    parse_err(
        "mooncake_x.jsonl",
        r#"{"timestamp": 0, "input_length": 3, "output_length": 0}"#,
        TraceErrorKind::InvalidValue,
        &[r#"mooncake_x.jsonl:1: field "output_length": expected a positive integer, found 0"#],
    );
}

#[test]
fn error_extra_replaces_a_field_canaryd_sets() {
    parse_err(
        "x.jsonl",
        "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1, \"extra\": {\"top_p\": 1}}\n\
         {\"timestamp\": 1, \"input_length\": 5, \"output_length\": 1, \"extra\": {\"stream\": false}}\n",
        TraceErrorKind::InvalidValue,
        &[
            r#"x.jsonl:2: field "extra": expected an object without fields canaryd sets"#,
            r#"found field "stream""#,
        ],
    );
}

#[test]
fn error_block_rule() {
    let text = "{\"timestamp\": 0, \"input_length\": 1024, \"output_length\": 5, \"hash_ids\": [1, 2]}\n\
                {\"timestamp\": 0, \"input_length\": 1025, \"output_length\": 5, \"hash_ids\": [1, 2]}\n";
    parse_err(
        "b.jsonl",
        text,
        TraceErrorKind::BlockRule,
        &["b.jsonl:2: field \"hash_ids\": block rule violated: 2 blocks of 512 tokens need 512 < input_length <= 1024, found input_length 1025"],
    );
    // A full last block is fine, an empty one is not.
    parse_err(
        "b.jsonl",
        r#"{"timestamp": 0, "input_length": 512, "output_length": 5, "hash_ids": [1, 2]}"#,
        TraceErrorKind::BlockRule,
        &["b.jsonl:1:"],
    );
}

#[test]
fn error_negative_timestamp() {
    parse_err(
        "t.jsonl",
        r#"{"timestamp": -5, "input_length": 3, "output_length": 5}"#,
        TraceErrorKind::InvalidValue,
        &[
            r#"t.jsonl:1: field "timestamp": expected a non-negative number of milliseconds, found -5"#,
        ],
    );
    let text = format!("{BURSTGPT_HEADER}-1.5,ChatGPT,472,18,490,Conversation log\n");
    parse_err(
        "t.csv",
        &text,
        TraceErrorKind::InvalidValue,
        &[r#"t.csv:2: field "Timestamp""#, "found -1.5"],
    );
}

#[test]
fn error_unknown_format() {
    parse_err(
        "u.txt",
        "\nhello,world\n",
        TraceErrorKind::UnknownFormat,
        &["u.txt:2: unknown trace format", "hello,world"],
    );
    parse_err(
        "u.jsonl",
        r#"{"foo": 1}"#,
        TraceErrorKind::UnknownFormat,
        &["u.jsonl:1:"],
    );
}

/// `data` in the gzip format (RFC 1952) with its deflate stream in stored blocks, as `gzip -0`
/// would not quite write but `gzip -d` reads: a real gzip file without a compressor here.
fn gzip_stored(data: &[u8]) -> Vec<u8> {
    let crc = data.iter().fold(!0u32, |mut crc, &b| {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
        crc
    });
    let mut out = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3];
    let mut blocks = data.chunks(0xffff).peekable();
    while let Some(block) = blocks.next() {
        out.push(u8::from(blocks.peek().is_none()));
        let len = block.len() as u16;
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(block);
    }
    out.extend_from_slice(&(!crc).to_le_bytes());
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out
}

// A gzip-compressed trace was "unknown trace format: first line starts with
// \"\u{1f}�\u{8}\u{8}�O\rk\0\u{3}mooncake…\"": binary quoted, no word of compression (audit L1).
#[test]
fn error_a_compressed_trace_says_so_without_quoting_it() {
    let real = std::fs::read(trace_file!("mooncake_arxiv_first20.jsonl")).unwrap();
    let gz = gzip_stored(&real);
    for format in [None, Some(TraceFormat::Mooncake)] {
        let opts = LoadOptions {
            format,
            skip_invalid: true,
            ..Default::default()
        };
        let err = trace::parse(&gz[..], Path::new("m.jsonl.gz"), &opts).unwrap_err();
        assert_eq!(err.kind(), TraceErrorKind::UnknownFormat);
        assert_eq!(
            err.to_string(),
            "m.jsonl.gz: unknown trace format: the file looks gzip-compressed (it starts with \
             gzip's magic bytes): decompress it first; canaryd reads plain JSONL or CSV"
        );
    }
}

#[test]
fn error_empty_file() {
    parse_err(
        "e.jsonl",
        "",
        TraceErrorKind::Empty,
        &["e.jsonl: empty trace"],
    );
    parse_err(
        "e.jsonl",
        "\n  \n\n",
        TraceErrorKind::Empty,
        &["e.jsonl: empty trace"],
    );
    parse_err(
        "e.csv",
        BURSTGPT_HEADER,
        TraceErrorKind::Empty,
        &["e.csv: empty trace"],
    );
}

#[test]
fn error_unreadable_file() {
    let err = trace::load(
        Path::new("/nonexistent/trace.jsonl"),
        &LoadOptions::default(),
    )
    .unwrap_err();
    assert_eq!(err.kind(), TraceErrorKind::Io);
    assert!(
        err.to_string().contains("/nonexistent/trace.jsonl"),
        "{err}"
    );
}

#[test]
fn error_orphan_parent() {
    let text = r#"{"chat_id": 1, "parent_chat_id": -1, "timestamp": 0.0, "input_length": 16, "output_length": 5, "type": "text", "turn": 1, "hash_ids": [1]}
{"chat_id": 5, "parent_chat_id": 4, "timestamp": 1.0, "input_length": 16, "output_length": 5, "type": "text", "turn": 2, "hash_ids": [2]}
"#;
    parse_err(
        "o.jsonl",
        text,
        TraceErrorKind::OrphanParent,
        &[r#"o.jsonl:2: field "parent_chat_id": parent chat 4 of chat 5 never appears"#],
    );
    let opts = LoadOptions {
        skip_invalid: true,
        ..Default::default()
    };
    let t = parse_with("o.jsonl", text, &opts).unwrap();
    assert_eq!(t.report.orphans_rerooted, 1);
    assert_eq!(
        (
            t.requests.get(1).unwrap().session,
            t.requests.get(1).unwrap().turn
        ),
        (Some(5), 0)
    );
    assert_eq!(t.report.warnings.len(), 1);
}

#[test]
fn error_burstgpt_bad_header() {
    let text = "Timestamp,Model,Request tokens,Total tokens\n5,ChatGPT,472,490\n";
    parse_err(
        "h.csv",
        text,
        TraceErrorKind::BadHeader,
        &["h.csv:1: bad BurstGPT header", "Response tokens"],
    );
    // Forcing BurstGPT on a JSONL file.
    let opts = LoadOptions {
        format: Some(TraceFormat::BurstGpt),
        ..Default::default()
    };
    let err = parse_with("h.jsonl", r#"{"timestamp": 0}"#, &opts).unwrap_err();
    assert_eq!(err.kind(), TraceErrorKind::BadHeader);
}

#[test]
fn error_burstgpt_bad_number() {
    let text = format!("{BURSTGPT_HEADER}5,ChatGPT,472,18,490,Conversation log\n6,ChatGPT,abc,18,490,Conversation log\n");
    parse_err(
        "n.csv",
        &text,
        TraceErrorKind::WrongType,
        &[r#"n.csv:3: field "Request tokens": expected a positive integer, found string "abc""#],
    );
}

#[test]
fn burstgpt_rows_with_the_wrong_number_of_columns() {
    // The real README rows with one row cut short and one given an extra column.
    let real = std::fs::read_to_string(trace_file!("burstgpt_readme_rows.csv")).unwrap();
    let mut lines: Vec<String> = real.lines().map(String::from).collect();
    lines[2] = lines[2].rsplitn(4, ',').last().unwrap().to_string(); // "45,ChatGPT,1087"
    lines[3].push_str(",extra");
    let text = lines.join("\n") + "\n";
    parse_err(
        "n.csv",
        &text,
        TraceErrorKind::Csv,
        &["n.csv:3: malformed CSV"],
    );
    let opts = LoadOptions {
        skip_invalid: true,
        ..Default::default()
    };
    let t = parse_with("n.csv", &text, &opts).unwrap();
    assert_eq!(
        t.requests.iter().map(|r| r.line).collect::<Vec<_>>(),
        [2],
        "the two bad rows are skipped, the good one kept"
    );
    assert_eq!((t.report.rows, t.report.invalid_skipped), (3, 2));
    assert_eq!(t.report.invalid_by_kind.get(&TraceErrorKind::Csv), Some(&2));
    assert!(t.report.warnings[0].contains("n.csv:3:"), "{:?}", t.report);
    assert!(t.report.warnings[1].contains("n.csv:4:"), "{:?}", t.report);
}

// A header that lost its last columns was blamed on the first row: `g.csv:2: malformed CSV
// record: 6 fields where the header (line 1) has 4` (audit L2).
#[test]
fn burstgpt_a_header_short_of_the_rows_columns_is_blamed() {
    // The real README rows under their header cut to its first four columns.
    let real = std::fs::read_to_string(trace_file!("burstgpt_readme_rows.csv")).unwrap();
    let mut lines: Vec<String> = real.lines().map(String::from).collect();
    lines[0] = lines[0]
        .splitn(5, ',')
        .take(4)
        .collect::<Vec<_>>()
        .join(",");
    assert_eq!(lines[0], "Timestamp,Model,Request tokens,Response tokens");
    let text = lines.join("\n") + "\n";
    let expected = "g.csv:1: bad BurstGPT header: 4 columns, but the rows have 6 (the first, \
                    line 2): columns 5 to 6 have no name; a BurstGPT header also names `Total \
                    tokens`, `Log Type`";
    let err = parse_err("g.csv", &text, TraceErrorKind::BadHeader, &[]);
    assert_eq!(err.to_string(), expected);
    // Not a row to skip: every row would be.
    let opts = LoadOptions {
        skip_invalid: true,
        ..Default::default()
    };
    assert_eq!(
        parse_with("g.csv", &text, &opts).unwrap_err().to_string(),
        expected
    );
    // One column short: that column is named.
    lines[0].push_str(",Total tokens");
    let text = lines.join("\n") + "\n";
    let err = parse_err("g.csv", &text, TraceErrorKind::BadHeader, &[]);
    assert!(
        err.to_string().contains(
            "(the first, line 2): column 6 has no name; a BurstGPT header also names `Log Type`"
        ),
        "{err}"
    );
    // Under the whole header, a first row with a column more is that row's fault.
    let mut lines: Vec<String> = real.lines().map(String::from).collect();
    lines[1].push_str(",extra");
    parse_err(
        "g.csv",
        &(lines.join("\n") + "\n"),
        TraceErrorKind::Csv,
        &["g.csv:2: malformed CSV record: 7 fields where the header (line 1) has 6"],
    );
}

// The csv crate counted a CRLF file's lines as one fewer (BurntSushi/rust-csv#395) and skipped
// blank lines without counting them (#208): records said lines 1, 2, 3 for rows on lines 2, 3,
// 4, errors named the line before the bad one, and `--shard` (keyed by line) split a CRLF copy
// of a file differently.
#[test]
fn burstgpt_lines_are_the_files_own_whatever_the_line_endings() {
    let real = std::fs::read_to_string(trace_file!("burstgpt_readme_rows.csv")).unwrap();
    let crlf = real.replace('\n', "\r\n");
    // A blank line (and a CRLF one) before the last row.
    let blank = real.replacen("118,", "\n118,", 1);
    let blank_crlf = crlf.replacen("118,", "\r\n\r\n118,", 1);
    let lines = |text: &str| -> Vec<(u32, u32)> {
        let t = parse("b.csv", text);
        t.requests
            .iter()
            .map(|r| (r.line, r.input_tokens))
            .collect()
    };
    assert_eq!(lines(&real), [(2, 472), (3, 1087), (4, 417)]);
    assert_eq!(lines(&crlf), [(2, 472), (3, 1087), (4, 417)]);
    assert_eq!(lines(&blank), [(2, 472), (3, 1087), (5, 417)]);
    assert_eq!(lines(&blank_crlf), [(2, 472), (3, 1087), (6, 417)]);
    // The same file's shards are the same whatever its line endings.
    let owners = |text: &str| -> Vec<Vec<u32>> {
        let t = parse("b.csv", text);
        (0..2)
            .map(|index| {
                let shard = Shard { index, count: 2 };
                t.requests
                    .iter()
                    .filter(|r| shard.owns(r))
                    .map(|r| r.line)
                    .collect()
            })
            .collect()
    };
    assert_eq!(owners(&crlf), owners(&real));

    // Errors name the bad row's own line: `Request tokens` spoiled on line 3 ...
    let bad3 = |text: &str| text.replacen(",1087,", ",x1087,", 1);
    for text in [bad3(&real), bad3(&crlf)] {
        parse_err(
            "b.csv",
            &text,
            TraceErrorKind::WrongType,
            &[r#"b.csv:3: field "Request tokens""#],
        );
    }
    // ... and on line 4 (after a blank line) or 5 (after two).
    let bad4 = |text: &str| text.replacen(",417,", ",x417,", 1);
    let blank_before_3 = real.replacen("45,", "\n45,", 1);
    for (text, line) in [
        (bad4(&blank), 5),
        (bad3(&blank_before_3), 4),
        (bad4(&blank_crlf), 6),
    ] {
        parse_err(
            "b.csv",
            &text,
            TraceErrorKind::WrongType,
            &[&format!(r#"b.csv:{line}: field "#)],
        );
    }
}

// A row whose quoted field lacks its closing quote ran on into the next lines: the csv crate read
// every row up to the next quote as one field, so the rows were merged, half of them loaded,
// and none was counted invalid.
#[test]
fn burstgpt_an_unbalanced_quote_is_refused_on_its_own_line() {
    // The real README rows, `Log Type` quoted, the quote left open on line 3; then the same
    // file with every row's quote left open.
    let real = std::fs::read_to_string(trace_file!("burstgpt_readme_rows.csv")).unwrap();
    let open = real.replacen("1317,Conversation log", "1317,\"Conversation log", 1);
    parse_err(
        "q.csv",
        &open,
        TraceErrorKind::Csv,
        &[
            r#"q.csv:3: field "Log Type": malformed CSV record: a quoted field runs past the end of the line (an unbalanced `"`?)"#,
        ],
    );
    let opts = LoadOptions {
        skip_invalid: true,
        ..Default::default()
    };
    let t = parse_with("q.csv", &open, &opts).unwrap();
    assert_eq!(
        t.requests.iter().map(|r| r.line).collect::<Vec<_>>(),
        [2, 4]
    );
    assert_eq!((t.report.rows, t.report.invalid_skipped), (3, 1));
    let all_open = edited(trace_file!("burstgpt_readme_rows.csv"), 4, |n, l| match n {
        1 => l.to_string(),
        _ => l.replace(",Conversation log", ",\"Conversation log"),
    });
    let err = parse_with("q.csv", &all_open, &opts).unwrap_err();
    assert_eq!(err.kind(), TraceErrorKind::Empty, "{err}");
    assert!(err.to_string().contains("(3 rows read)"), "{err}");
    // A quote closed on its line is read as ever, `""` inside it too.
    let closed = real.replacen("Conversation log", "\"Conversation \"\"log\"\"\"", 1);
    assert_eq!(parse("q.csv", &closed).requests.len(), 3);
}

// Bytes that are not UTF-8 in `Model` were read lossily (`categories … "GPT-\u{fffd}": 1`)
// where a JSONL trace refuses them (audit L3).
#[test]
fn burstgpt_bytes_that_are_not_utf8_are_refused_naming_the_column() {
    // The real README rows, the last one's `Model` `GPT-4` written `GPT-\xff`.
    let real = std::fs::read_to_string(trace_file!("burstgpt_readme_rows.csv")).unwrap();
    let at = real.find(",GPT-4,").unwrap();
    let mut bytes = real.as_bytes()[..at].to_vec();
    bytes.extend_from_slice(b",GPT-\xff,");
    bytes.extend_from_slice(&real.as_bytes()[at + ",GPT-4,".len()..]);
    let load = |opts: &LoadOptions| trace::parse(&bytes[..], Path::new("u.csv"), opts);
    let err = load(&LoadOptions::default()).unwrap_err();
    assert_eq!(err.kind(), TraceErrorKind::Csv, "{err}");
    assert_eq!(
        err.to_string(),
        "u.csv:4: field \"Model\": malformed CSV record: bytes that are not UTF-8 (byte 5 of \
         the field)"
    );
    // Skipped and counted with --skip-invalid; no category is made up for it.
    let t = load(&LoadOptions {
        skip_invalid: true,
        ..Default::default()
    })
    .unwrap();
    assert_eq!((t.report.rows, t.report.invalid_skipped), (3, 1));
    assert_eq!(t.report.categories.len(), 1, "{:?}", t.report.categories);
}

// `Total tokens` other than `Request tokens` + `Response tokens` was accepted without a word
// (audit L3). Every real row has the sum (the README's three rows, upstream's failed rows
// `…,0,0,0,…`), so a row without it is refused.
#[test]
fn burstgpt_total_tokens_must_be_the_sum() {
    // The real README rows, the last one's `Total tokens` 693 written 999, then 6.93e2.
    let real = std::fs::read_to_string(trace_file!("burstgpt_readme_rows.csv")).unwrap();
    let wrong = real.replacen(",693,", ",999,", 1);
    let err = parse_err("t.csv", &wrong, TraceErrorKind::InvalidValue, &[]);
    assert_eq!(
        err.to_string(),
        "t.csv:4: field \"Total tokens\": expected Request tokens + Response tokens = 417 + \
         276 = 693, found 999"
    );
    parse_err(
        "t.csv",
        &real.replacen(",693,", ",abc,", 1),
        TraceErrorKind::WrongType,
        &[r#"t.csv:4: field "Total tokens": expected a non-negative integer, found string "abc""#],
    );
    parse_err(
        "t.csv",
        &real.replacen(",693,", ",,", 1),
        TraceErrorKind::MissingField,
        &[r#"t.csv:4: missing required field "Total tokens""#],
    );
    let opts = LoadOptions {
        skip_invalid: true,
        ..Default::default()
    };
    let t = parse_with("t.csv", &wrong, &opts).unwrap();
    assert_eq!((t.report.rows, t.report.invalid_skipped), (3, 1));
    // The sum written as an integral float is the sum.
    assert_eq!(
        parse("t.csv", &real.replacen(",693,", ",693.0,", 1))
            .requests
            .len(),
        3
    );
}

// `Elapsed time` values `-3` and `abc` were accepted because the column is unused (audit L3).
#[test]
fn burstgpt_elapsed_time_must_be_a_time() {
    // The real README rows given the newer layout's `Elapsed time` column at the end: its
    // values are GENERATED (no real file with the column is held here).
    let with_elapsed = |values: [&str; 3]| {
        edited(trace_file!("burstgpt_readme_rows.csv"), 4, |n, l| match n {
            1 => format!("{l},Elapsed time"),
            n => format!("{l},{}", values[n - 2]),
        })
    };
    // Seconds, and an empty cell (nothing said), are read; the column changes nothing.
    let t = parse("e.csv", &with_elapsed(["1.5", "", "12"]));
    assert_eq!(t.requests.len(), 3);
    let cases = [
        (
            ["1.5", "-3", "12"],
            TraceErrorKind::InvalidValue,
            "e.csv:3: field \"Elapsed time\": expected a non-negative number of seconds, found -3",
        ),
        (
            ["1.5", "0.5", "abc"],
            TraceErrorKind::WrongType,
            "e.csv:4: field \"Elapsed time\": expected a number, found string \"abc\"",
        ),
        (
            ["NaN", "0.5", "1"],
            TraceErrorKind::InvalidValue,
            "e.csv:2: field \"Elapsed time\": expected a non-negative number of seconds, found NaN",
        ),
    ];
    for (values, kind, expected) in cases {
        let err = parse_err("e.csv", &with_elapsed(values), kind, &[]);
        assert_eq!(err.to_string(), expected);
    }
}

/// The first `n` lines of a real trace file, each passed through `edit(line number, line)`.
fn edited(path: &str, n: usize, edit: impl Fn(usize, &str) -> String) -> String {
    let real = std::fs::read_to_string(path).unwrap();
    let lines: Vec<String> = real
        .lines()
        .take(n)
        .enumerate()
        .map(|(i, l)| edit(i + 1, l))
        .collect();
    lines.join("\n") + "\n"
}

#[test]
fn error_timestamp_in_the_wrong_unit() {
    // The real BurstGPT rows, the last one's `Timestamp` written as epoch milliseconds.
    let text = edited(trace_file!("burstgpt_readme_rows.csv"), 4, |n, l| {
        if n == 4 {
            l.replacen("118,", "1700000118000,", 1)
        } else {
            l.to_string()
        }
    });
    parse_err(
        "u.csv",
        &text,
        TraceErrorKind::InvalidValue,
        &[
            r#"u.csv:4: field "Timestamp": expected a time at most 365 days after the trace's first request (line 2, 5 s)"#,
            "found 1700000118000 s",
        ],
    );
    let opts = LoadOptions {
        skip_invalid: true,
        ..Default::default()
    };
    let t = parse_with("u.csv", &text, &opts).unwrap();
    assert_eq!(
        t.requests.iter().map(|r| r.line).collect::<Vec<_>>(),
        [2, 3]
    );
    assert_eq!(t.report.invalid_skipped, 1);
}

#[test]
fn error_huge_delay() {
    // The first two rows of the real arXiv Mooncake trace made one session, the second turn
    // given a delay of about 31,700 years.
    let text = edited(trace_file!("mooncake_arxiv_first20.jsonl"), 2, |n, l| {
        let extra = if n == 2 {
            r#""session_id": "s", "delay": 1e15, "#
        } else {
            r#""session_id": "s", "#
        };
        l.replacen('{', &format!("{{{extra}"), 1)
    });
    parse_err(
        "d.jsonl",
        &text,
        TraceErrorKind::InvalidValue,
        &[r#"d.jsonl:2: field "delay": expected at most 365 days"#],
    );
}

#[test]
fn analysis_at_the_end_of_the_clock() {
    // Real arXiv Mooncake rows moved to the last millisecond a u64 of microseconds can hold.
    let text = edited(trace_file!("mooncake_arxiv_first20.jsonl"), 3, |_, l| {
        l.replacen(r#""timestamp": 0"#, r#""timestamp": 18446744073709551"#, 1)
    });
    let t = parse("end.jsonl", &text);
    assert_eq!(
        t.requests.get(0).unwrap().timestamp_us,
        18_446_744_073_709_551_000
    );
    let a = trace::analyze(&t);
    assert_eq!((a.peak_burst.requests, a.peak_1s.requests), (3, 3));
}

#[test]
fn skip_invalid_counts_and_caps_warnings() {
    let mut text = String::from("{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1}\n");
    for i in 0..25 {
        text.push_str(if i % 2 == 0 {
            "{\"timestamp\": 1, \"input_length\": 0, \"output_length\": 1}\n"
        } else {
            "not json\n"
        });
    }
    text.push_str("{\"timestamp\": 2, \"input_length\": 5, \"output_length\": 1}\n");
    let opts = LoadOptions {
        skip_invalid: true,
        ..Default::default()
    };
    let t = parse_with("s.jsonl", &text, &opts).unwrap();
    assert_eq!(t.requests.len(), 2);
    assert_eq!(
        (t.report.rows, t.report.requests, t.report.invalid_skipped),
        (27, 2, 25)
    );
    assert_eq!(
        t.report.invalid_by_kind.get(&TraceErrorKind::InvalidValue),
        Some(&13)
    );
    assert_eq!(
        t.report.invalid_by_kind.get(&TraceErrorKind::Json),
        Some(&12)
    );
    assert_eq!(
        (t.report.warnings.len(), t.report.warnings_omitted),
        (20, 5)
    );
    assert!(
        t.report.warnings[0].contains("s.jsonl:2:"),
        "{}",
        t.report.warnings[0]
    );
    assert_eq!(t.requests.get(1).unwrap().line, 27);
}

#[test]
fn format_names_and_override() {
    for f in [
        TraceFormat::Mooncake,
        TraceFormat::Bailian,
        TraceFormat::BurstGpt,
    ] {
        assert_eq!(f.to_string().parse::<TraceFormat>().unwrap(), f);
    }
    assert!("parquet".parse::<TraceFormat>().is_err());
    assert_eq!("send".parse::<FailedPolicy>().unwrap(), FailedPolicy::Send);
    // A Bailian row read as Mooncake: its chain fields are refused (its lengths are fine, and
    // `hash_ids` would then break the 512 rule).
    let opts = LoadOptions {
        format: Some(TraceFormat::Mooncake),
        ..Default::default()
    };
    let err = trace::load(
        Path::new(trace_file!("bailian_documented_row.jsonl")),
        &opts,
    )
    .unwrap_err();
    assert_eq!(err.kind(), TraceErrorKind::InvalidValue);
    assert!(err.to_string().contains(":1: field \"chat_id\""), "{err}");
}

// === Selection ===

/// Generated Mooncake rows with two sessions, for the selection tests.
const SESSIONS: &str = r#"{"timestamp": 0, "session_id": "a", "input_length": 600, "output_length": 100, "hash_ids": [1, 2]}
{"timestamp": 1000, "input_length": 1, "output_length": 1}
{"timestamp": 2000, "session_id": "a", "input_length": 1100, "output_length": 50, "hash_ids": [1, 2, 3]}
{"timestamp": 3000, "session_id": "b", "input_length": 513, "output_length": 1, "hash_ids": [4, 5]}
{"timestamp": 4000, "session_id": "b", "input_length": 20, "output_length": 7}
{"timestamp": 5000, "input_length": 1, "output_length": 1}
"#;

#[test]
fn select_window_orphans_and_limit() {
    let t = parse("sel.jsonl", SESSIONS);
    let window = Selection {
        start_offset: Some(Duration::from_secs(1)),
        end_offset: Some(Duration::from_millis(4500)),
        ..Default::default()
    };
    let (w, rep) = t.clone().select(&window).unwrap();
    let lines: Vec<_> = w.requests.iter().map(|r| (r.index, r.line)).collect();
    assert_eq!(lines, [(0, 2), (1, 4), (2, 5)]);
    assert_eq!((rep.requests_in, rep.requests_out), (6, 3));
    assert_eq!(
        (
            rep.dropped_outside_window,
            rep.dropped_orphan_turns,
            rep.dropped_over_limit
        ),
        (2, 1, 0)
    );

    let limited = Selection {
        max_requests: Some(2),
        ..window
    };
    let (w, rep) = t.clone().select(&limited).unwrap();
    assert_eq!(
        w.requests.iter().map(|r| r.line).collect::<Vec<_>>(),
        [2, 4]
    );
    assert_eq!(rep.dropped_over_limit, 1);

    let empty = Selection {
        start_offset: Some(Duration::from_secs(60)),
        ..Default::default()
    };
    assert_eq!(
        t.select(&empty).unwrap_err().kind(),
        TraceErrorKind::EmptySelection
    );
}

// A shard that owns none of a window holding requests keeps its empty part (its run is
// written for `canaryd merge`); a window holding nothing is an error for every shard alike.
// A turn timed by its `delay` (no `timestamp`) is stored with its previous turn's timestamp, and
// the window tested that: `--end-offset 60s --speedup 10` replayed for 66 s, sending turns at
// trace time ~642 s. The window now takes each turn at its earliest send, as analyze-trace does.
#[test]
fn the_window_bounds_turns_timed_by_their_delay() {
    // The real conversation slice made into sessions (by each row's second block id, the
    // prefix after the shared system prompt), every later turn timed by its delay after the
    // turn before it instead of its timestamp: its earliest send is then its real timestamp.
    let real =
        std::fs::read_to_string(trace_file!("mooncake_conversation_first2000.jsonl")).unwrap();
    let mut last_ms: std::collections::HashMap<String, u64> = Default::default();
    let (mut text, mut timestamps_ms) = (String::new(), Vec::new());
    for l in real.lines() {
        let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
        let ts = v["timestamp"].as_u64().unwrap();
        timestamps_ms.push(ts);
        if let Some(id) = v["hash_ids"].get(1).map(|id| format!("s{id}")) {
            let row = v.as_object_mut().unwrap();
            if let Some(prev) = last_ms.insert(id.clone(), ts) {
                row.remove("timestamp");
                row.insert("delay".into(), (ts - prev).into());
            }
            row.insert("session_id".into(), id.into());
        }
        text.push_str(&format!("{v}\n"));
    }
    let t = parse("sessdelay.jsonl", &text);
    assert!(trace::analyze(&t).delay_turns > 500);
    let first_ms = timestamps_ms[0];
    for (start, end) in [(0, 60), (30, 90), (0, 600)] {
        let sel = Selection {
            start_offset: Some(Duration::from_secs(start)),
            end_offset: Some(Duration::from_secs(end)),
            ..Default::default()
        };
        let (part, report) = t.clone().select(&sel).unwrap();
        let window = (first_ms + start * 1000)..(first_ms + end * 1000);
        let mut got: Vec<u32> = part.requests.iter().map(|r| r.line).collect();
        got.sort_unstable();
        // Every row sent in the window, and no other: with a start, turns whose session
        // began before it are dropped as orphans.
        let sent_in: Vec<u32> = (1..=timestamps_ms.len() as u32)
            .filter(|&line| window.contains(&timestamps_ms[line as usize - 1]))
            .collect();
        assert!(got.iter().all(|l| sent_in.contains(l)), "{start}..{end} s");
        if start == 0 {
            assert_eq!(got, sent_in, "0..{end} s");
        }
        assert_eq!(
            report.dropped_outside_window,
            2000 - sent_in.len() as u64,
            "{start}..{end} s: {report:?}"
        );
        // The schedule (what check-config estimates) ends inside the window.
        let s = canary_replay::Schedule::new(part.requests, 10.0);
        assert!(
            s.min_duration() < Duration::from_secs(end - start) / 10,
            "{start}..{end} s: {:?}",
            s.min_duration()
        );
    }
}

#[test]
fn a_shard_owning_none_of_the_window_selects_an_empty_part() {
    let t = load(trace_file!("burstgpt_readme_rows.csv"));
    let parts: Vec<_> = (0..4)
        .map(|index| {
            let sel = Selection {
                shard: Some(Shard { index, count: 4 }),
                ..Default::default()
            };
            t.clone()
                .select(&sel)
                .map(|(part, rep)| (part.requests.len(), rep))
        })
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(parts.iter().map(|(n, _)| n).sum::<usize>(), 3);
    let (_, empty) = parts.iter().find(|(n, _)| *n == 0).expect("an empty shard");
    assert_eq!((empty.requests_out, empty.dropped_other_shards), (0, 3));
    let outside = Selection {
        start_offset: Some(Duration::from_secs(3600 * 24 * 365)),
        shard: Some(Shard { index: 0, count: 4 }),
        ..Default::default()
    };
    assert_eq!(
        t.select(&outside).unwrap_err().kind(),
        TraceErrorKind::EmptySelection
    );
}

#[test]
fn select_scale_keeps_block_structure() {
    let t = parse("sel.jsonl", SESSIONS);
    let (s, _) = t
        .clone()
        .select(&Selection {
            scale_lengths: Some(0.3),
            ..Default::default()
        })
        .unwrap();
    // bs' = round(512 * 0.3) = 154.
    let got: Vec<_> = s
        .requests
        .iter()
        .map(|r| {
            (
                r.input_tokens,
                r.output_tokens,
                r.block_size,
                r.hash_ids.len(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (180, 30, 154, 2),
            (1, 1, 154, 0),
            (330, 15, 154, 3),
            // round(513 * 0.3) = 154 would leave the second block empty: clamped to 155.
            (155, 1, 154, 2),
            (6, 2, 154, 0),
            (1, 1, 154, 0),
        ]
    );
    block_rule_holds(&s);

    let (s, _) = t
        .clone()
        .select(&Selection {
            scale_lengths: Some(2.0),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(
        (
            s.requests.get(0).unwrap().input_tokens,
            s.requests.get(0).unwrap().block_size,
            s.requests.get(0).unwrap().output_tokens
        ),
        (1200, 1024, 200)
    );
    block_rule_holds(&s);

    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let err = t
            .clone()
            .select(&Selection {
                scale_lengths: Some(bad),
                ..Default::default()
            })
            .unwrap_err();
        assert_eq!(err.kind(), TraceErrorKind::InvalidSelection, "{bad}");
        assert!(err.to_string().contains("scale_lengths"), "{err}");
    }
}

#[test]
fn select_caps() {
    let t = parse("sel.jsonl", SESSIONS);
    let sel = Selection {
        max_input_tokens: Some(700),
        max_output_tokens: Some(60),
        ..Default::default()
    };
    let (s, rep) = t.select(&sel).unwrap();
    let r = &s.requests.get(2).unwrap();
    assert_eq!((r.input_tokens, r.hash_ids.to_vec()), (700, vec![1, 2]));
    assert_eq!(s.requests.get(0).unwrap().output_tokens, 60);
    assert_eq!((rep.input_capped, rep.output_capped), (1, 1));
    block_rule_holds(&s);
}

#[test]
fn select_real_window() {
    let t = load(trace_file!("mooncake_conversation_first2000.jsonl"));
    let sel = Selection {
        start_offset: Some(Duration::from_secs(100)),
        end_offset: Some(Duration::from_secs(200)),
        max_input_tokens: Some(32_768),
        ..Default::default()
    };
    let (s, rep) = t.select(&sel).unwrap();
    assert_eq!(s.requests.len(), 308);
    assert_eq!(rep.dropped_outside_window, 2000 - 308);
    indices_contiguous_and_sorted(&s);
    block_rule_holds(&s);
    assert!(s
        .requests
        .iter()
        .all(|r| r.input_tokens <= 32_768 && r.hash_ids.len() <= 64));
}

// === Analysis ===

#[test]
fn analysis_of_a_small_trace() {
    // Generated Mooncake rows with known statistics.
    let text = r#"{"timestamp": 0, "input_length": 1000, "output_length": 10, "hash_ids": [1, 2]}
{"timestamp": 0, "input_length": 600, "output_length": 20, "hash_ids": [1, 3]}
{"timestamp": 500, "input_length": 512, "output_length": 30, "hash_ids": [1]}
{"timestamp": 2000, "input_length": 100, "output_length": 40, "hash_ids": [4]}
"#;
    let a = trace::analyze(&parse("small.jsonl", text));
    assert_eq!(
        (a.requests, a.duration_s, a.mean_rate_rps),
        // 3 gaps over 2 s: one over the mean gap (it was 4 / 2 s, without saying which).
        (4, 2.0, Some(1.5))
    );
    assert_eq!((a.peak_burst.requests, a.peak_burst.at_s), (2, 0.0));
    assert_eq!((a.peak_1s.requests, a.peak_1s.at_s), (3, 0.0));
    let i = a.input_tokens;
    assert_eq!(
        (i.min, i.p50, i.p90, i.p99, i.max, i.total),
        (100, 512, 1000, 1000, 1000, 2212)
    );
    assert_eq!(i.mean, 553.0);
    let o = a.output_tokens;
    assert_eq!((o.min, o.p50, o.p90, o.max, o.mean), (10, 20, 40, 40, 25.0));
    let p = a.prefix_reuse.unwrap();
    assert_eq!((p.blocks, p.reused_blocks, p.distinct_blocks), (6, 2, 4));
    assert_eq!((p.tokens, p.reused_tokens), (2212, 1024));
    assert!((p.block_hit_rate - 2.0 / 6.0).abs() < 1e-12);
    let text = a.to_string();
    assert!(text.contains("2 requests at one time"), "{text}");
    let json = serde_json::to_value(&a).unwrap();
    assert_eq!(json["format"], "mooncake");
    assert_eq!(json["peak_1s"]["requests"], 3);
}

#[test]
fn byte_order_mark_and_crlf() {
    // Generated: a BurstGPT file saved by a Windows tool, with a BOM and CRLF line endings.
    let text = "\u{feff}Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\r\n5,ChatGPT,472,18,490,Conversation log\r\n";
    assert_eq!(
        parse("bom.csv", text).requests.get(0).unwrap().input_tokens,
        472
    );
    let text = "\u{feff}{\"timestamp\": 1, \"input_length\": 5, \"output_length\": 1}\r\n";
    assert_eq!(
        parse("bom.jsonl", text)
            .requests
            .get(0)
            .unwrap()
            .timestamp_us,
        1000
    );
}

#[test]
fn shards_split_the_real_traces_by_line_without_overlap() {
    for file in [
        trace_file!("mooncake_conversation_first2000.jsonl"),
        trace_file!("mooncake_arxiv_first20.jsonl"),
    ] {
        let t = load(file);
        // No session here, so this is the by-line split; sessions are the next test's.
        assert!(t.requests.iter().all(|r| r.session.is_none()), "{file}");
        let shard_of = split_in_4(&t);
        assert_eq!(
            shard_of.len(),
            t.requests.len(),
            "{file}: every request in some shard"
        );
        let sizes: Vec<usize> = (0..4)
            .map(|i| shard_of.values().filter(|&&s| s == i).count())
            .collect();
        assert!(sizes.iter().all(|&k| k > 0), "{file}: {sizes:?}");
    }
}

#[test]
fn shards_keep_sessions_whole() {
    // Generated Mooncake rows: 40 sessions of 1 to 4 turns, their turns interleaved in time
    // with the other sessions' and with 10 rows that have no session.
    let mut text = String::new();
    let mut expected_turns = std::collections::HashMap::new();
    for session in 0..40u32 {
        let turns = 1 + session % 4;
        expected_turns.insert(session, turns);
        for turn in 0..turns {
            text += &format!(
                "{{\"session_id\": \"conv-{session}\", \"timestamp\": {}, \"input_length\": 10, \"output_length\": 2}}\n",
                turn * 1000 + session
            );
        }
    }
    for i in 0..10 {
        text += &format!(
            "{{\"timestamp\": {}, \"input_length\": 5, \"output_length\": 1}}\n",
            i * 333
        );
    }
    let t = parse("gen_sessions.jsonl", &text);
    let shard_of = split_in_4(&t);
    assert_eq!(
        shard_of.len(),
        t.requests.len(),
        "every request in some shard"
    );
    // Group by session: each session's turns, all of them, in exactly one shard.
    let mut sessions: std::collections::HashMap<u64, Vec<(u32, u32)>> = Default::default();
    for r in &t.requests {
        if let Some(s) = r.session {
            sessions
                .entry(s)
                .or_default()
                .push((r.turn, shard_of[&r.line]));
        }
    }
    assert_eq!(sessions.len(), 40);
    let mut owners = std::collections::HashSet::new();
    for (s, turns) in &sessions {
        let shard = turns[0].1;
        assert!(
            turns.iter().all(|&(_, i)| i == shard),
            "session {s} split: {turns:?}"
        );
        let mut numbers: Vec<u32> = turns.iter().map(|&(turn, _)| turn).collect();
        numbers.sort();
        assert_eq!(
            numbers,
            (0..numbers.len() as u32).collect::<Vec<_>>(),
            "session {s}"
        );
        owners.insert(shard);
    }
    let mut sizes: Vec<usize> = sessions.values().map(Vec::len).collect();
    sizes.sort();
    let mut want: Vec<usize> = expected_turns.values().map(|&n| n as usize).collect();
    want.sort();
    assert_eq!(sizes, want, "every turn of every session kept");
    assert!(owners.len() > 1, "sessions spread over shards: {owners:?}");
}

#[test]
fn every_shard_schedules_from_the_whole_windows_origin() {
    // Each row is due at the same offset whichever process replays it, so shards started at
    // one instant together send the trace's arrival pattern (issue 22).
    for file in [
        trace_file!("mooncake_conversation_first2000.jsonl"),
        trace_file!("mooncake_arxiv_first20.jsonl"),
    ] {
        for start_offset in [None, Some(Duration::from_secs(2))] {
            let t = load(file);
            let window = Selection {
                start_offset,
                ..Selection::default()
            };
            let (whole, _) = t.clone().select(&window).unwrap();
            let due = |part: Trace| -> Vec<(u32, Duration)> {
                let s = canary_replay::Schedule::with_origin(part.requests, 3.0, part.origin_us);
                let timing = s.timing();
                let rows = s.into_sessions().flat_map(|s| s.turns);
                rows.map(|r| (r.line, timing.offset(&r))).collect()
            };
            let want: std::collections::HashMap<u32, Duration> = due(whole).into_iter().collect();
            let mut seen = 0;
            for index in 0..4 {
                let sel = Selection {
                    shard: Some(Shard { index, count: 4 }),
                    ..window.clone()
                };
                let part = match t.clone().select(&sel) {
                    Ok((part, _)) => part,
                    // A small window may leave a shard nothing.
                    Err(TraceError::EmptySelection { .. }) => continue,
                    Err(e) => panic!("{e}"),
                };
                for (line, at) in due(part) {
                    assert_eq!(at, want[&line], "{file} shard {index}/4 line {line}");
                    seen += 1;
                }
            }
            assert_eq!(seen, want.len(), "{file}");
        }
    }
}

/// Splits `t` into 4 shards; the shard of each request, by trace line. Fails on a line in two
/// shards or a report that does not add up.
fn split_in_4(t: &Trace) -> std::collections::HashMap<u32, u32> {
    let mut shard_of = std::collections::HashMap::new();
    for index in 0..4 {
        let sel = Selection {
            shard: Some(Shard { index, count: 4 }),
            ..Selection::default()
        };
        let (part, rep) = t.clone().select(&sel).unwrap();
        assert_eq!(
            rep.requests_out + rep.dropped_other_shards,
            t.requests.len() as u64
        );
        for r in &part.requests {
            assert!(
                shard_of.insert(r.line, index).is_none(),
                "line {} twice",
                r.line
            );
        }
    }
    shard_of
}

// === Prompts skipped (`analyze-trace`, `synthesize`) ===

fn skipping() -> LoadOptions {
    LoadOptions {
        prompts: trace::Prompts::Skip,
        ..LoadOptions::default()
    }
}

/// A prompt field of the wrong kind is the same clear error whether prompts are kept or only
/// checked: the skipped `messages` is scanned, not built, but still refused by file, line and
/// field.
#[test]
fn a_skipped_prompt_of_the_wrong_type_is_the_same_error() {
    // Generated rows, in the aiperf superset of the Mooncake format.
    let row = r#"{"timestamp": 0, "input_length": 10, "output_length": 2"#;
    for (field, bad) in [
        ("text_input", r#""text_input": 5"#),
        ("text_input", r#""text_input": ["hi"]"#),
        ("messages", r#""messages": "hi""#),
        (
            "messages",
            r#""messages": {"role": "user", "content": "x"}"#,
        ),
        ("messages", r#""messages": 1e400"#),
    ] {
        let text = format!("{row}}}\n{row}, {bad}}}\n");
        let kept = parse_with("p.jsonl", &text, &LoadOptions::default()).unwrap_err();
        let skipped = parse_with("p.jsonl", &text, &skipping()).unwrap_err();
        assert_eq!(skipped.to_string(), kept.to_string(), "{bad}");
        assert_eq!(skipped.kind(), kept.kind(), "{bad}");
        let msg = skipped.to_string();
        assert!(
            msg.starts_with(&format!("p.jsonl:2: field \"{field}\"")),
            "{bad}: {msg}"
        );
    }
    // Unclosed inside `messages`: a syntax error, named by its field, either way.
    let text = format!("{row}, \"messages\": [{{\"role\": \"user\"]}}\n");
    let kept = parse_with("p.jsonl", &text, &LoadOptions::default()).unwrap_err();
    let skipped = parse_with("p.jsonl", &text, &skipping()).unwrap_err();
    assert_eq!(skipped.to_string(), kept.to_string());
    assert!(skipped.to_string().contains("p.jsonl:1"), "{skipped}");
}

/// Skipped prompts are not held; the rows that had one are named by line, and every other
/// field (and so every figure) is what a load that keeps them reads.
#[test]
fn skipped_prompts_are_not_held_and_their_rows_are_named() {
    // Generated, as in `mooncake_sessions_delay_and_prompts`; `messages` wins over a bad
    // `text_input`, as when kept.
    let text = r#"{"session_id": "conv-a", "timestamp": 1000, "input_length": 10, "output_length": 2, "text_input": "hi"}
{"session_id": 7, "timestamp": 500.5, "input_length": 10, "output_length": 2, "messages": [{"role": "user", "content": "x"}], "text_input": 3}
{"session_id": "conv-a", "delay": 250.5, "input_length": 20, "output_length": 3, "extra": {"temperature": 0}}
{"timestamp": 2000, "input_length": 5, "output_length": 1, "messages": null}
"#;
    let kept = parse("gen.jsonl", text);
    let skipped = parse_with("gen.jsonl", text, &skipping()).unwrap();
    assert_eq!(kept.skipped_prompts, Vec::<u32>::new());
    assert_eq!(skipped.skipped_prompts, [1, 2]);
    assert!(skipped.requests.iter().all(|r| r.prompt().is_none()));
    let carrying = |t: &Trace| -> Vec<u32> {
        t.requests
            .iter()
            .filter(|r| t.carries_prompt(r))
            .map(|r| r.line)
            .collect()
    };
    assert_eq!(carrying(&kept), [2, 1]);
    assert_eq!(carrying(&skipped), carrying(&kept));
    let fields = |t: &Trace| -> Vec<_> {
        t.requests
            .iter()
            .map(|mut r| {
                r.set_prompt(None);
                r
            })
            .collect()
    };
    assert_eq!(fields(&skipped), fields(&kept));
    assert_eq!(trace::analyze(&skipped), trace::analyze(&kept));
}

/// FNV-1a of `bytes`.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Every figure of `analyze-trace --json` on the real traces, pinned: digests of the JSON
/// (path left out) that the code before skipped prompts and the bitmap of ids printed. A
/// change to how rows are read or ids counted shows here.
#[test]
fn the_analysis_of_each_real_trace_is_unchanged() {
    let want: &[(&str, u64)] = &[
        ("mooncake_conversation_first2000.jsonl", 0x8e697e940bc58daa),
        ("mooncake_synthetic.jsonl", 0x222bedccd09c788b),
        ("mooncake_arxiv_first20.jsonl", 0xaa6dc2fd77903221),
        ("bailian_documented_row.jsonl", 0x23b61f93c4ee8148),
        ("burstgpt_readme_rows.csv", 0x4d02479e15bff275),
    ];
    let mut got = Vec::new();
    for &(name, _) in want {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../shared/traces")
            .join(name);
        let mut digests = [LoadOptions::default(), skipping()].map(|opts| {
            let mut a = trace::analyze(&trace::load(&path, &opts).unwrap());
            a.path.clear();
            fnv1a(serde_json::to_string(&a).unwrap().as_bytes())
        });
        assert_eq!(digests[0], digests[1], "{name}: kept and skipped prompts");
        got.push((name, std::mem::take(&mut digests[0])));
    }
    assert_eq!(got, want);
}

//! Hostile input to the trace layer (issue 14): lengths no model serves, lines that never end,
//! a load that must stop, and `--skip-invalid` warnings that read like the errors they replace.
//!
//! Rows are the real ones under `shared/traces/` with one value edited, said where it is done;
//! the endless inputs are `/dev/zero` and a reader that repeats a real file forever.

use std::io::Read;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use canary_replay::trace::{
    self, LoadOptions, Selection, TraceErrorKind, DEFAULT_LENGTH_LIMIT, DEFAULT_MAX_LINE_BYTES,
};

fn real(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/traces")
        .join(name);
    std::fs::read_to_string(path).unwrap()
}

/// `text` with its line `n` (1-based) passed through `edit`.
fn edit_line(text: &str, n: usize, edit: impl Fn(&str) -> String) -> String {
    let lines: Vec<String> = text
        .lines()
        .enumerate()
        .map(|(i, l)| if i + 1 == n { edit(l) } else { l.to_string() })
        .collect();
    lines.join("\n") + "\n"
}

fn parse(name: &str, text: &str, opts: &LoadOptions) -> Result<trace::Trace, trace::TraceError> {
    trace::parse(text.as_bytes(), Path::new(name), opts)
}

#[test]
fn lengths_no_model_serves_are_refused_naming_row_and_field() {
    let mooncake = edit_line(&real("mooncake_arxiv_first20.jsonl"), 2, |l| {
        l.replace(r#""input_length": 7319"#, r#""input_length": 1000000000"#)
    });
    let bailian = edit_line(&real("bailian_documented_row.jsonl"), 1, |l| {
        l.replace(r#""output_length": 1494"#, r#""output_length": 4e9"#)
    });
    let burstgpt = edit_line(&real("burstgpt_readme_rows.csv"), 3, |l| {
        l.replace(
            "45,ChatGPT,1087,230,1317,",
            "45,ChatGPT,20000000,230,20000230,",
        )
    });
    let cases = [
        ("m.jsonl", &mooncake, "m.jsonl:2: field \"input_length\": expected at most 10000000 tokens (length_limit), found 1000000000"),
        ("b.jsonl", &bailian, "b.jsonl:1: field \"output_length\": expected at most 10000000 tokens (length_limit), found 4000000000"),
        ("g.csv", &burstgpt, "g.csv:3: field \"Request tokens\": expected at most 10000000 tokens (length_limit), found 20000000"),
    ];
    for (name, text, expected) in cases {
        let err = parse(name, text, &LoadOptions::default()).unwrap_err();
        assert_eq!(err.kind(), TraceErrorKind::InvalidValue, "{err}");
        assert_eq!(err.to_string(), expected);
    }

    // Skipped with --skip-invalid, and the warning names the field.
    let opts = LoadOptions {
        skip_invalid: true,
        ..Default::default()
    };
    let t = parse("m.jsonl", &mooncake, &opts).unwrap();
    assert_eq!(t.requests.len(), 19);
    assert!(
        t.report.warnings[0].starts_with("m.jsonl:2: field \"input_length\": expected at most"),
        "{:?}",
        t.report.warnings
    );

    // A raised limit lets a real-but-huge row through.
    let opts = LoadOptions {
        length_limit: 30_000_000,
        ..Default::default()
    };
    let t = parse("g.csv", &burstgpt, &opts).unwrap();
    assert_eq!(t.requests.get(1).unwrap().input_tokens, 20_000_000);
}

#[test]
fn scaling_past_the_length_limit_is_refused_naming_the_row() {
    let t = trace::load(
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../shared/traces/mooncake_arxiv_first20.jsonl"),
        &LoadOptions::default(),
    )
    .unwrap();
    for f in [1e30, 2000.0] {
        let err = t
            .clone()
            .select(&Selection {
                scale_lengths: Some(f),
                ..Default::default()
            })
            .unwrap_err();
        assert_eq!(err.kind(), TraceErrorKind::InvalidSelection);
        let msg = err.to_string();
        assert!(
            msg.contains("invalid selection: scale_lengths: scaling by"),
            "{msg}"
        );
        assert!(
            msg.contains("takes the input of line 1 from 6755 tokens to"),
            "{msg}"
        );
        assert!(
            msg.ends_with("over the length limit of 10000000 (length_limit)"),
            "{msg}"
        );
    }
    let err = t
        .clone()
        .select(&Selection {
            scale_lengths: Some(1e30),
            ..Default::default()
        })
        .unwrap_err();
    assert!(err.to_string().contains("scaling by 1e30"), "{err}");

    // Caps applied after scaling bring lengths back under the limit: that is fine.
    let (s, _) = t
        .clone()
        .select(&Selection {
            scale_lengths: Some(2000.0),
            max_input_tokens: Some(1_000_000),
            max_output_tokens: Some(1_000_000),
            ..Default::default()
        })
        .unwrap();
    assert!(s.requests.iter().all(|r| r.input_tokens == 1_000_000));
    // And a raised limit allows what the default refuses.
    let (s, _) = t
        .select(&Selection {
            scale_lengths: Some(1000.0),
            length_limit: 100_000_000,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(s.requests.get(0).unwrap().input_tokens, 6_755_000);
    assert!(s
        .requests
        .iter()
        .all(|r| r.input_tokens > DEFAULT_LENGTH_LIMIT / 100));
}

#[test]
fn a_line_over_the_limit_ends_the_load_naming_it() {
    let opts = LoadOptions {
        max_line_bytes: 4096,
        skip_invalid: true, // not skippable: a line without end could not be skipped
        ..Default::default()
    };
    // The real arXiv rows, the second one padded with an unknown field to 5,000 bytes.
    let padded = edit_line(&real("mooncake_arxiv_first20.jsonl"), 2, |l| {
        l.replacen('{', &format!("{{\"pad\": \"{}\", ", "x".repeat(5000)), 1)
    });
    let err = parse("p.jsonl", &padded, &opts).unwrap_err();
    assert_eq!(err.kind(), TraceErrorKind::LineTooLong);
    assert_eq!(
        err.to_string(),
        "p.jsonl:2: line longer than 4096 bytes (max_line_bytes); is this a trace file?"
    );
    // The default limit is far above it.
    assert_eq!(
        parse("p.jsonl", &padded, &LoadOptions::default())
            .unwrap()
            .requests
            .len(),
        20
    );

    // A CSV line is a line like any other: a quoted field may not hold a line break (no
    // BurstGPT row has one), so a field quoted over many short lines is refused at its first
    // line, not read on as one long record.
    let burst = real("burstgpt_readme_rows.csv");
    let quoted =
        |model: &str| edit_line(&burst, 3, |l| l.replace("ChatGPT", &format!("\"{model}\"")));
    let strict = LoadOptions {
        max_line_bytes: 4096,
        ..Default::default()
    };
    let err = parse("q.csv", &quoted(&"GPT\n".repeat(200_000)), &strict).unwrap_err();
    assert_eq!(err.kind(), TraceErrorKind::Csv, "{err}");
    assert!(
        err.to_string()
            .starts_with("q.csv:3: field \"Model\": malformed CSV record: a quoted field runs"),
        "{err}"
    );
    let long = edit_line(&burst, 3, |l| l.replace("ChatGPT", &"GPT".repeat(2_000)));
    let err = parse("q.csv", &long, &opts).unwrap_err();
    assert_eq!(err.kind(), TraceErrorKind::LineTooLong, "{err}");
    assert!(
        err.to_string()
            .starts_with("q.csv:3: line longer than 4096 bytes"),
        "{err}"
    );
}

#[test]
fn dev_zero_is_refused_at_the_first_line() {
    let err = trace::load(Path::new("/dev/zero"), &LoadOptions::default()).unwrap_err();
    assert_eq!(err.kind(), TraceErrorKind::LineTooLong);
    assert_eq!(
        err.to_string(),
        format!(
            "/dev/zero:1: line longer than {DEFAULT_MAX_LINE_BYTES} bytes (max_line_bytes); is this a trace file?"
        )
    );
}

/// A real trace file repeated without end, counting what was read: a FIFO fed by `while true;
/// do cat trace; done`.
struct Endless {
    data: Vec<u8>,
    at: usize,
    read: Arc<std::sync::atomic::AtomicUsize>,
}

impl Read for Endless {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let n = out.len().min(self.data.len() - self.at);
        out[..n].copy_from_slice(&self.data[self.at..self.at + n]);
        self.at = (self.at + n) % self.data.len();
        self.read.fetch_add(n, Ordering::Relaxed);
        Ok(n)
    }
}

#[test]
fn a_load_stops_when_asked() {
    let stop = Arc::new(AtomicBool::new(false));
    let read = Arc::default();
    let endless = Endless {
        data: real("mooncake_arxiv_first20.jsonl").into_bytes(),
        at: 0,
        read: Arc::clone(&read),
    };
    let opts = LoadOptions {
        stop: Some(stop.clone()),
        ..Default::default()
    };
    let loading = std::thread::spawn(move || {
        trace::parse(std::io::BufReader::new(endless), Path::new("fifo"), &opts)
    });
    // Wait until it is well into the endless input, then stop it.
    while read.load(Ordering::Relaxed) < 1 << 20 {
        std::thread::sleep(Duration::from_millis(5));
    }
    stop.store(true, Ordering::Relaxed);
    let err = loading.join().unwrap().unwrap_err();
    assert_eq!(err.kind(), TraceErrorKind::Stopped);
    assert!(
        err.to_string()
            .starts_with("fifo: loading stopped at line "),
        "{err}"
    );
    assert!(err.line().unwrap() > 20 * 50, "{err}");
}

#[test]
fn skip_invalid_warnings_read_like_errors() {
    // The real arXiv rows with row 2 given a string length, row 3 a number JSON cannot hold
    // and row 4 cut short.
    let text = real("mooncake_arxiv_first20.jsonl");
    let text = edit_line(&text, 2, |l| l.replace("7319", "\"7319\""));
    let text = edit_line(&text, 3, |l| l.replace("7234", "1e400"));
    let text = edit_line(&text, 4, |l| l[..l.len() - 10].to_string());
    let opts = LoadOptions {
        skip_invalid: true,
        ..Default::default()
    };
    let t = parse("w.jsonl", &text, &opts).unwrap();
    assert_eq!(t.report.invalid_skipped, 3);
    let w = &t.report.warnings;
    assert_eq!(
        w[0],
        "w.jsonl:2: field \"input_length\": expected a positive integer, found string \"7319\" (row skipped)"
    );
    assert!(
        w[1].starts_with("w.jsonl:3: field \"input_length\": malformed JSON: number out of range"),
        "{w:?}"
    );
    assert!(
        w[2].starts_with("w.jsonl:4: field \"hash_ids\": malformed JSON: EOF while parsing"),
        "{w:?}"
    );
    // The error without --skip-invalid says the same.
    let err = parse(
        "w.jsonl",
        &edit_line(&text, 2, |_| {
            real("mooncake_arxiv_first20.jsonl")
                .lines()
                .nth(1)
                .unwrap()
                .into()
        }),
        &LoadOptions::default(),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "w.jsonl:3: field \"input_length\": malformed JSON"
    );

    // A CSV row with a column missing: the cause is in the warning too.
    let burst = edit_line(&real("burstgpt_readme_rows.csv"), 3, |l| {
        l.rsplitn(2, ',').last().unwrap().into()
    });
    let t = parse("n.csv", &burst, &opts).unwrap();
    assert!(
        t.report.warnings[0].starts_with("n.csv:3: malformed CSV record: ")
            && t.report.warnings[0].contains("5 fields where the header (line 1) has 6"),
        "{:?}",
        t.report.warnings
    );
}

/// The real arXiv rows as bytes, row `n` given one more field written as `tail` (raw bytes,
/// in place of the row's closing `}`): a field no arXiv row has, holding bytes that are not
/// UTF-8, or cut off where the row ends.
fn with_field(n: usize, tail: &[u8]) -> (Vec<u8>, usize) {
    let mut out = Vec::new();
    let mut prefix = 0;
    for (i, l) in real("mooncake_arxiv_first20.jsonl").lines().enumerate() {
        if i + 1 == n {
            let l = l.strip_suffix('}').unwrap();
            out.extend_from_slice(l.as_bytes());
            prefix = l.len();
            out.extend_from_slice(tail);
        } else {
            out.extend_from_slice(l.as_bytes());
        }
        out.push(b'\n');
    }
    (out, prefix)
}

/// The error and its cause, as `{:#}` prints them.
fn chain(e: &trace::TraceError) -> String {
    let cause = std::error::Error::source(e).map(ToString::to_string);
    format!("{e}: {}", cause.unwrap_or_default())
}

// A syntax error inside a value's string named no field, and serde's line within the row stood
// beside the file's: `m.jsonl:5: malformed JSON: invalid unicode code point at line 1 column
// 92` (audit M3), though the README says a JSON syntax error names the field it is in.
#[test]
fn a_syntax_error_inside_a_string_names_its_field_and_one_line() {
    let load = |bytes: &[u8]| {
        trace::parse(bytes, Path::new("m.jsonl"), &LoadOptions::default()).unwrap_err()
    };
    // Row 5 given a `text_input` of two bytes that are not UTF-8.
    let (bytes, prefix) = with_field(5, b", \"text_input\": \"\xff\xfe\"}");
    let e = load(&bytes);
    assert_eq!(e.kind(), TraceErrorKind::Json);
    let column = prefix + r#", "text_input": ""#.len() + 1;
    assert_eq!(
        chain(&e),
        format!(
            "m.jsonl:5: field \"text_input\": malformed JSON: bytes that are not UTF-8 in a \
             string (column {column} of the row)"
        )
    );
    // The same in a `session_id`, and in a string nested in `messages`.
    let (bytes, _) = with_field(1, b", \"session_id\": \"\xff\", \"delay\": 1}");
    assert!(
        chain(&load(&bytes)).starts_with("m.jsonl:1: field \"session_id\": malformed JSON: bytes"),
        "{}",
        chain(&load(&bytes))
    );
    let (bytes, _) = with_field(
        1,
        b", \"messages\": [{\"role\": \"user\", \"content\": \"\xff\"}]}",
    );
    assert!(
        chain(&load(&bytes)).starts_with("m.jsonl:1: field \"messages\": malformed JSON: bytes"),
        "{}",
        chain(&load(&bytes))
    );
    // Row 3 cut off inside its `text_input` string.
    let (bytes, prefix) = with_field(3, b", \"text_input\": \"abc");
    let column = prefix + r#", "text_input": "abc"#.len();
    assert_eq!(
        chain(&load(&bytes)),
        format!(
            "m.jsonl:3: field \"text_input\": malformed JSON: EOF while parsing a string \
             (column {column} of the row)"
        )
    );
    // A key's name with such bytes: the field before it is named.
    let (bytes, _) = with_field(2, b", \"\xff\": 1}");
    assert!(
        chain(&load(&bytes))
            .starts_with("m.jsonl:2: malformed JSON in the key after field \"hash_ids\": "),
        "{}",
        chain(&load(&bytes))
    );
    // No message says "line" but the file's.
    for tail in [&b", \"text_input\": \"\xff\"}"[..], b", \"t\": [1, 2"] {
        let m = chain(&load(&with_field(4, tail).0));
        assert!(!m.contains("line"), "{m}");
    }
}

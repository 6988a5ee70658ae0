//! The chunk scanner against serde_json, on real captures (`shared/fixtures`), on the
//! simulator's own stream read over loopback, on rewritten variants of both (whitespace, key
//! order, escapes, ignored fields of nested junk, duplicates, nulls) and on byte mutations of
//! all of them. Wherever the scanner answers, serde_json must answer the same; `parse_chunk`
//! must equal serde_json everywhere, errors included.

use crate::support::sim;
use canary_core::MonoTime;
use canary_replay::{parse_chunk, parse_chunk_serde, scan_chunk, SseParser};
use canary_testkit::fuzz::{fuzz, Rng};
use serde_json::Value;
use std::path::Path;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What `data` gives each way; panics where they disagree. The label says which path answered.
pub fn differential(data: &str) -> String {
    let reference = parse_chunk_serde(data);
    let scanned = scan_chunk(data);
    if let Some(s) = &scanned {
        match &reference {
            // Debug, not `==`: tells -0.0 from 0.0.
            Ok(r) => assert_eq!(format!("{s:?}"), format!("{r:?}"), "scanner vs serde_json"),
            Err(e) => panic!("the scanner answered {s:?} where serde_json errs: {e}"),
        }
    }
    let parsed = parse_chunk(data);
    assert_eq!(
        format!("{parsed:?}"),
        format!("{reference:?}"),
        "parse_chunk vs serde_json"
    );
    match (scanned, reference) {
        (Some(_), _) => "scanned".into(),
        (None, Ok(_)) => "serde_json ok".into(),
        // The message without its position: a new kind of error is a new outcome.
        (None, Err(e)) => {
            let msg = e.to_string();
            let kind = msg.split(" at line").next().unwrap_or_default();
            let kind = kind.split(['`', '"', '(']).next().unwrap_or_default();
            format!("serde_json err: {kind}")
        }
    }
}

fn data_lines(sse: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    SseParser::new()
        .push(sse, MonoTime(0), &mut out)
        .expect("within the event cap");
    out.into_iter()
        .map(|e| e.data)
        .filter(|d| d != "[DONE]")
        .collect()
}

/// Every chunk (and the non-streaming body) of the real captures.
pub fn captured_chunks() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures");
    let read = |name: &str| {
        let p = dir.join(name);
        std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    };
    let mut chunks = Vec::new();
    for name in [
        "llamacpp_server_chat_stream.sse",
        "llamacpp_server_completions_stream.sse",
        "llama_cpp_python_chat_stream.sse",
        "llama_cpp_python_completions_stream.sse",
    ] {
        chunks.extend(data_lines(&read(name)));
    }
    chunks.push(String::from_utf8(read("llama_cpp_python_chat_nonstream.json")).unwrap());
    chunks
}

/// One request to the simulator over a plain socket; the response body, de-chunked. The sim
/// writes its own HTTP/1.1 (chunked bodies, `Content-Length` for whole ones).
async fn post(port: u16, path: &str, headers: &str, body: &str) -> Vec<u8> {
    let exchange = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        let req = format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             {headers}Connection: close\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        s.write_all(req.as_bytes()).await.unwrap();
        let mut resp = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let n = s.read(&mut buf).await.unwrap();
            resp.extend_from_slice(&buf[..n]);
            if n == 0 || complete(&resp) {
                return resp;
            }
        }
    };
    let resp = tokio::time::timeout(std::time::Duration::from_secs(20), exchange)
        .await
        .expect("the simulator answers within 20 s");
    let head_end = resp.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let head = String::from_utf8_lossy(&resp[..head_end]).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    let mut rest = &resp[head_end..];
    if !head.contains("transfer-encoding: chunked") {
        return rest.to_vec();
    }
    let mut body = Vec::new();
    loop {
        let line = rest.windows(2).position(|w| w == b"\r\n").unwrap();
        let size = usize::from_str_radix(std::str::from_utf8(&rest[..line]).unwrap().trim(), 16)
            .unwrap();
        if size == 0 {
            return body;
        }
        body.extend_from_slice(&rest[line + 2..line + 2 + size]);
        rest = &rest[line + 4 + size..];
    }
}

/// A whole response: its head, then a `Content-Length` body or the last chunk.
fn complete(resp: &[u8]) -> bool {
    let Some(head_end) = resp.windows(4).position(|w| w == b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&resp[..head_end]).to_ascii_lowercase();
    match head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
    {
        Some(n) => resp.len() >= head_end + 4 + n,
        None => resp.ends_with(b"\r\n0\r\n\r\n"),
    }
}

/// The simulator's chunks, streamed and whole, chat (with reasoning) and completions.
async fn sim_chunks() -> Vec<String> {
    let sim = sim(&["--profile", "fast"]).await;
    let port: u16 = sim.url().rsplit(':').next().unwrap().parse().unwrap();
    let chat = r#"{"model":"canary-sim","messages":[{"role":"user","content":"hi there"}],"max_tokens":12"#;
    let completion = r#"{"model":"canary-sim","prompt":"hi there","max_tokens":12"#;
    let stream = r#","stream":true,"stream_options":{"include_usage":true}}"#;
    let reasoning = "x-sim-reasoning-tokens: 4\r\n";
    let mut chunks = Vec::new();
    for (path, body) in [
        ("/v1/chat/completions", chat),
        ("/v1/completions", completion),
    ] {
        let sse = post(port, path, reasoning, &format!("{body}{stream}")).await;
        chunks.extend(data_lines(&sse));
        let whole = post(port, path, reasoning, &format!("{body}}}")).await;
        chunks.push(String::from_utf8(whole).unwrap());
    }
    chunks
}

#[tokio::test]
async fn the_scanner_reads_every_real_and_simulated_chunk_itself() {
    let mut chunks = captured_chunks();
    let captured = chunks.len();
    let simulated = sim_chunks().await;
    assert!(
        simulated.len() >= 2 * 12,
        "sim chunks: {}",
        simulated.len()
    );
    chunks.extend(simulated);
    let mut reasoning = 0;
    for c in &chunks {
        assert_eq!(differential(c), "scanned", "the scanner gave up on {c}");
        reasoning += parse_chunk(c).unwrap().reasoning_bytes;
    }
    assert!(reasoning > 0, "the sim's reasoning chunks were read");
    assert!(captured > 150, "{captured} captured chunks");
}

/// Writes `v` back as JSON with random whitespace, key order, escapes and ignored junk.
struct Rewriter<'r> {
    rng: &'r mut Rng,
    /// Chance in 16 that a character of a value string is escaped.
    escape: usize,
    out: String,
}

const JUNK_KEYS: &[&str] = &["id", "model", "logprobs", "x", "{\"[", "object", "é😀"];
const JUNK_TEXT: &[&str] = &["}{", "\"]", "a,b:c", "\\", "é", "😀", "\u{1}", "", "null"];

impl Rewriter<'_> {
    fn ws(&mut self) {
        if self.rng.below(4) == 0 {
            for _ in 0..1 + self.rng.below(3) {
                self.out.push([' ', '\n', '\t', '\r'][self.rng.below(4)]);
            }
        }
    }

    fn string(&mut self, s: &str, escape: usize) {
        self.out.push('"');
        for c in s.chars() {
            let forced = matches!(c, '"' | '\\') || (c as u32) < 0x20;
            if !forced && self.rng.below(16) >= escape {
                self.out.push(c);
                continue;
            }
            let short = match c {
                '"' => Some("\\\""),
                '\\' => Some("\\\\"),
                '/' => Some("\\/"),
                '\n' => Some("\\n"),
                '\t' => Some("\\t"),
                '\r' => Some("\\r"),
                '\u{8}' => Some("\\b"),
                '\u{c}' => Some("\\f"),
                _ => None,
            };
            match short {
                Some(e) if self.rng.below(2) == 0 => self.out.push_str(e),
                _ => {
                    let mut units = [0u16; 2];
                    for u in c.encode_utf16(&mut units) {
                        let hex = match self.rng.below(2) {
                            0 => format!("\\u{u:04x}"),
                            _ => format!("\\u{u:04X}"),
                        };
                        self.out.push_str(&hex);
                    }
                }
            }
        }
        self.out.push('"');
    }

    fn junk(&mut self, depth: usize) {
        match self.rng.below(if depth > 3 { 5 } else { 7 }) {
            0 => self.out.push_str(["true", "false", "null"][self.rng.below(3)]),
            1 => self
                .out
                .push_str(["0", "-1.5e-3", "17", "1E+2", "-0"][self.rng.below(5)]),
            2..=4 => {
                let t = JUNK_TEXT[self.rng.below(JUNK_TEXT.len())];
                self.string(t, 8);
            }
            5 => {
                self.out.push('[');
                for i in 0..self.rng.below(3) {
                    if i > 0 {
                        self.out.push(',');
                    }
                    self.ws();
                    self.junk(depth + 1);
                }
                self.out.push(']');
            }
            _ => {
                self.out.push('{');
                for i in 0..self.rng.below(3) {
                    if i > 0 {
                        self.out.push(',');
                    }
                    let k = JUNK_KEYS[self.rng.below(JUNK_KEYS.len())];
                    self.string(k, 0);
                    self.out.push(':');
                    self.junk(depth + 1);
                }
                self.out.push('}');
            }
        }
    }

    fn value(&mut self, v: &Value) {
        self.ws();
        match v {
            Value::String(s) => self.string(s, self.escape),
            Value::Array(items) => {
                self.out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        self.out.push(',');
                    }
                    self.value(item);
                }
                self.ws();
                self.out.push(']');
            }
            Value::Object(map) => {
                let mut members: Vec<(&String, &Value)> = map.iter().collect();
                // Shuffle, then add ignored members (sometimes the same key twice).
                for i in (1..members.len()).rev() {
                    members.swap(i, self.rng.below(i + 1));
                }
                self.out.push('{');
                let mut first = true;
                let junk = self.rng.below(3);
                for (k, v) in members {
                    for _ in 0..junk {
                        if !first {
                            self.out.push(',');
                        }
                        first = false;
                        self.ws();
                        let key = format!("junk{}", self.rng.below(2));
                        self.string(&key, 0);
                        self.out.push(':');
                        self.junk(0);
                    }
                    if !first {
                        self.out.push(',');
                    }
                    first = false;
                    self.ws();
                    // A key rarely escaped: the scanner then leaves it to serde_json.
                    let esc = usize::from(self.rng.below(20) == 0) * 16;
                    self.string(k, esc);
                    self.ws();
                    self.out.push(':');
                    self.value(v);
                }
                self.ws();
                self.out.push('}');
            }
            other => self.out.push_str(&other.to_string()),
        }
        self.ws();
    }
}

/// Sometimes swaps a known string for `null`, adds reasoning or an `error: null`.
fn vary(v: &mut Value, rng: &mut Rng) {
    if let Value::Object(map) = v {
        for (k, val) in map.iter_mut() {
            let known = matches!(k.as_str(), "content" | "text" | "reasoning_content");
            if known && rng.below(6) == 0 {
                *val = Value::Null;
            } else {
                vary(val, rng);
            }
        }
        if map.contains_key("content") && rng.below(4) == 0 {
            map.insert("reasoning".into(), "thinking \u{e9}\u{1F600}".into());
        }
        if map.contains_key("choices") && rng.below(8) == 0 {
            map.insert("error".into(), Value::Null);
        }
    } else if let Value::Array(items) = v {
        items.iter_mut().for_each(|i| vary(i, rng));
    }
}

/// Rewritten variants of every captured and simulated chunk.
fn variants(chunks: &[String], per_chunk: usize, rng: &mut Rng) -> Vec<String> {
    let mut out = Vec::new();
    for c in chunks {
        let v: Value = serde_json::from_str(c).unwrap();
        for _ in 0..per_chunk {
            let mut v = v.clone();
            vary(&mut v, rng);
            let escape = [0, 1, 8, 16][rng.below(4)];
            let mut w = Rewriter {
                rng,
                escape,
                out: String::new(),
            };
            w.value(&v);
            out.push(w.out);
        }
    }
    out
}

#[tokio::test]
async fn the_scanner_agrees_with_serde_json_on_rewritten_chunks() {
    let mut chunks = captured_chunks();
    chunks.extend(sim_chunks().await);
    let mut rng = Rng::new(21);
    let mut scanned = 0;
    let all = variants(&chunks, 20, &mut rng);
    for v in &all {
        scanned += usize::from(differential(v) == "scanned");
    }
    // Most variants stay on the fast path (an escaped known-level key sends one to
    // serde_json), so the comparison above is mostly of the scanner.
    assert!(scanned * 2 > all.len(), "{scanned} of {} scanned", all.len());
    assert!(scanned < all.len(), "some variants must reach serde_json");
}

const CHUNK_WORDS: &[&[u8]] = &[
    b"\\u00e9",
    b"\\ud83d\\ude00",
    b"\\ud800",
    b"\\udc00",
    b"\\\"",
    b"\\n",
    b"\\/",
    b"\"content\":",
    b"\"reasoning\":",
    b"\"reasoning_content\":",
    b"\"text\":",
    b"\"delta\":",
    b"\"message\":",
    b"\"choices\":",
    b"\"usage\":",
    b"\"timings\":",
    b"\"error\":",
    b"\"prompt_tokens\":",
    b"\"cached_tokens\":",
    b"\"prompt_ms\":",
    b"null",
    b"{}",
    b"[]",
    b"[[[[[[[[",
    b",",
    b":",
    b"\"",
    b"\t",
    b"\x01",
];

#[tokio::test]
async fn fuzz_chunk_scanner_against_serde_json() {
    let mut chunks = captured_chunks();
    chunks.extend(sim_chunks().await);
    let mut rng = Rng::new(2121);
    chunks.extend(variants(&chunks.clone(), 2, &mut rng));
    let seeds = chunks.into_iter().map(String::into_bytes).collect();
    let report = fuzz("chunk-scan", seeds, CHUNK_WORDS, 100_000, |input| {
        differential(&String::from_utf8_lossy(input))
    });
    assert!(report.outcomes >= 10, "{report}");
}

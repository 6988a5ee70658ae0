//! The chunk scanner against serde_json, on real captures (`shared/fixtures`), on the
//! simulator's own stream read over loopback, on rewritten variants of both (whitespace, key
//! order, escapes, ignored fields of nested junk, duplicates, nulls) and on byte mutations of
//! all of them. Wherever the scanner answers, serde_json must answer the same; `parse_chunk`
//! must equal serde_json everywhere, errors included.

use crate::support::sim;
use canary_core::MonoTime;
use canary_replay::{parse_chunk, parse_chunk_serde, scan_chunk, SseParser};
use canary_testkit::fuzz::{fuzz, Rng};
use std::path::Path;

mod rewrite;

use rewrite::variants;
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
        let size =
            usize::from_str_radix(std::str::from_utf8(&rest[..line]).unwrap().trim(), 16).unwrap();
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
    assert!(simulated.len() >= 2 * 12, "sim chunks: {}", simulated.len());
    chunks.extend(simulated);
    let mut reasoning = 0;
    for c in &chunks {
        assert_eq!(differential(c), "scanned", "the scanner gave up on {c}");
        reasoning += parse_chunk(c).unwrap().reasoning_bytes;
    }
    assert!(reasoning > 0, "the sim's reasoning chunks were read");
    assert!(captured > 150, "{captured} captured chunks");
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
    assert!(
        scanned * 2 > all.len(),
        "{scanned} of {} scanned",
        all.len()
    );
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

//! Hostile servers (issue 14): a line, an event or a stream that never ends, a 4 GB body,
//! headers that never end, garbage, hang-ups. Each costs its request one classified error,
//! holds bounded memory, and the run goes on. The servers are bounded in bytes and time, and
//! so is every replay here (a generous request timeout): before the caps, these tests fail on
//! the error kind, they do not exhaust memory.

use crate::support::*;
use canary_core::{ChunkGaps, ErrorKind, Status};
use canary_replay::{header, ApiKey, MaxTokensField, Target};
use canary_testkit::{Hostile, HostileServer};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// A target at `server` with small caps ([`small_target`]).
fn target(server: &HostileServer, streaming: bool) -> Target {
    small_target(&server.url(), streaming)
}

#[tokio::test]
async fn an_sse_line_or_event_that_never_ends_is_response_too_large() {
    for mode in [
        Hostile::EndlessLine { bytes: 64 << 20 },
        Hostile::EndlessEvent { bytes: 64 << 20 },
    ] {
        let server = HostileServer::start(mode);
        let run = replay(requests(3, 20, 4), target(&server, true), |_| {}).await;
        for m in errors_of(&run.records, 3, ErrorKind::ResponseTooLarge) {
            assert_eq!(m, "an SSE event over 64 KiB (max_event_bytes)", "{mode:?}");
        }
        assert_eq!(run.outcome.summary.errors_by_kind["response_too_large"], 3);
        // Each request stopped reading near the cap: far less than the server offered.
        assert!(
            server.bytes_sent() < 3 * (16 << 20),
            "{mode:?}: {}",
            server.bytes_sent()
        );
    }
}

// serde_json's complaint quotes the value it met whole: a chunk's string of 60 KiB where an
// array was due made a 60 KiB message in every record (16 MiB without streaming).
#[tokio::test]
async fn a_malformed_chunk_quoting_a_huge_value_keeps_a_short_message() {
    let server = HostileServer::start(Hostile::WrongType { bytes: 60 << 10 });
    let run = replay(requests(2, 20, 4), target(&server, true), |_| {}).await;
    for m in errors_of(&run.records, 2, ErrorKind::MalformedChunk) {
        assert!(m.len() < 1024, "{} bytes: {}", m.len(), &m[..200]);
        assert!(m.starts_with("chunk 1: invalid type: string \"aaa"), "{m}");
        assert!(m.contains("… at line 1 column"), "{m}");
    }
}

// A 200 that generates nothing (`[DONE]` alone, `{}`-like bodies) was a completed request:
// a server answering every request so passed the canary with no latency to show.
#[tokio::test]
async fn a_response_that_generates_nothing_is_an_error_but_a_stop_at_once_is_not() {
    for streaming in [true, false] {
        let server = HostileServer::start(Hostile::NothingGenerated { streaming });
        let run = replay(requests(2, 20, 4), target(&server, streaming), |_| {}).await;
        for m in errors_of(&run.records, 2, ErrorKind::EmptyResponse) {
            assert_eq!(
                m,
                "the response ended without a token, and its usage counts no completion tokens"
            );
        }
        assert_eq!(run.outcome.summary.completed, 0, "streaming {streaming}");
    }
    // A model that stops at once streams no text, but its usage counts the end of sequence.
    let server = HostileServer::start(Hostile::EndOfSequenceOnly);
    let run = replay(requests(2, 20, 4), target(&server, true), |_| {}).await;
    assert_eq!(run.outcome.summary.completed, 2);
    assert!(run.records.iter().all(|r| r.is_ok() && r.ttft_ms.is_none()));
    assert_eq!(run.outcome.summary.total_output_tokens, 2);
}

/// vLLM ends a request it gave up on with `finish_reason: "abort"` (or `"error"`) and
/// `[DONE]`: that counted as a completion with a short output.
#[tokio::test]
async fn a_generation_the_server_aborted_is_a_server_error_keeping_its_tokens() {
    for streaming in [true, false] {
        let server = HostileServer::start(Hostile::AbortedGeneration { streaming });
        let run = replay(requests(2, 20, 4), target(&server, streaming), |_| {}).await;
        for m in errors_of(&run.records, 2, ErrorKind::ServerError) {
            assert_eq!(m, r#"the generation ended with finish_reason "abort""#);
        }
        for r in &run.records {
            assert_eq!(r.chunks, 1, "the token before it is kept: {r:?}");
        }
        assert_eq!(run.outcome.summary.completed, 0, "streaming {streaming}");
    }
}

/// vLLM sends its usage chunk after the finish chunk (with `include_usage`): reading stopped
/// at a failing `finish_reason`, so the record kept the client's count of 1 token, not the
/// server's 2. Still a `server_error`, and the summary counts no tokens of it.
#[tokio::test]
async fn a_usage_after_a_failing_finish_reason_is_the_records_count() {
    let server = HostileServer::start(Hostile::AbortedGeneration { streaming: true });
    let run = replay(requests(2, 20, 4), target(&server, true), |_| {}).await;
    for m in errors_of(&run.records, 2, ErrorKind::ServerError) {
        assert_eq!(m, r#"the generation ended with finish_reason "abort""#);
    }
    for r in &run.records {
        let usage = r.usage.as_ref().expect("the usage after the abort");
        assert_eq!(
            (usage.prompt_tokens, usage.completion_tokens),
            (Some(5), Some(2))
        );
        assert_eq!((r.chunks, r.output_token_count()), (1, 2), "{r:?}");
        assert_eq!(r.e2e_ms, None);
    }
    let s = &run.outcome.summary;
    assert_eq!((s.completed, s.errors), (0, 2));
    assert_eq!(s.errors_by_kind["server_error"], 2);
    assert_eq!(
        s.total_output_tokens, 0,
        "a failed request's tokens are not counted"
    );
}

/// A server that stalls after a failing `finish_reason` (no usage, no `[DONE]`) costs its
/// request only the short read on for the usage: it ends as the `server_error` it is, long
/// before its 10 s timeout, with the tokens that came and no usage.
#[tokio::test]
async fn a_stream_stalled_after_a_failing_finish_reason_ends_promptly_as_a_server_error() {
    let server = HostileServer::start(Hostile::AbortedThenStalls);
    let mut t = target(&server, true);
    t.timeout = Duration::from_secs(10);
    let run = replay(requests(2, 20, 4), t, |_| {}).await;
    for m in errors_of(&run.records, 2, ErrorKind::ServerError) {
        assert_eq!(m, r#"the generation ended with finish_reason "abort""#);
    }
    for r in &run.records {
        assert_eq!((r.chunks, r.usage.as_ref()), (1, None), "{r:?}");
        // The read on lasts 250 ms; half the timeout is a margin no load reaches.
        let took = r.ended_at_ms - r.sent_at_ms;
        assert!(took < 5_000.0, "{took} ms: waited for more than the usage");
    }
}

/// The read on for the usage stops at the request's deadline, and the failure the stream said
/// before it stands: a 200 ms timeout, shorter than the read on, does not make the request
/// a `timeout`.
#[tokio::test]
async fn a_failing_finish_reason_before_the_deadline_stays_a_server_error_at_it() {
    let server = HostileServer::start(Hostile::AbortedThenStalls);
    let mut t = target(&server, true);
    t.timeout = Duration::from_millis(200);
    let run = replay(requests(2, 20, 4), t, |_| {}).await;
    for m in errors_of(&run.records, 2, ErrorKind::ServerError) {
        assert_eq!(m, r#"the generation ended with finish_reason "abort""#);
    }
    assert!(run.records.iter().all(|r| r.chunks == 1));
}

/// An `event: error` whose data had no `error` key was read as a chunk of nothing and skipped:
/// with `[DONE]` after it, the request completed.
#[tokio::test]
async fn an_error_event_is_a_server_error_whatever_its_data() {
    let server = HostileServer::start(Hostile::ErrorEvent);
    let run = replay(requests(2, 20, 4), target(&server, true), |_| {}).await;
    for m in errors_of(&run.records, 2, ErrorKind::ServerError) {
        assert_eq!(m, "engine overloaded");
    }
    assert!(run.records.iter().all(|r| r.chunks == 1));
}

/// canaryd asks for no content coding, but a `-H accept-encoding` or a proxy may bring one:
/// the compressed bytes read as a stream cut before any token, or a malformed body.
#[tokio::test]
async fn a_compressed_response_is_a_protocol_error_naming_its_coding() {
    let server = HostileServer::start(Hostile::Gzipped { status: 200 });
    for streaming in [true, false] {
        let run = replay(requests(2, 20, 4), target(&server, streaming), |_| {}).await;
        for m in errors_of(&run.records, 2, ErrorKind::Protocol) {
            assert_eq!(
                m,
                "response body in Content-Encoding \"gzip\", which canaryd does not decode \
                 (not asked for: the request sent no accept-encoding)"
            );
        }
    }
    // An error status keeps its status.
    let server = HostileServer::start(Hostile::Gzipped { status: 503 });
    let run = replay(requests(2, 20, 4), target(&server, true), |_| {}).await;
    for r in &run.records {
        let e = r.error.as_ref().expect("an error");
        assert_eq!((e.kind, e.http_status), (ErrorKind::HttpStatus, Some(503)));
        assert_eq!(
            e.message,
            "error body in Content-Encoding \"gzip\", not read"
        );
    }
}

#[tokio::test]
async fn a_huge_body_is_response_too_large_streaming_or_not() {
    // A declared 4 GB body is refused before a byte of it is read.
    let server = HostileServer::start(Hostile::HugeBody {
        declared: 4 << 30,
        bytes: 64 << 20,
    });
    let run = replay(requests(2, 20, 4), target(&server, false), |_| {}).await;
    for m in errors_of(&run.records, 2, ErrorKind::ResponseTooLarge) {
        assert_eq!(
            m,
            "response body of 4294967296 bytes (Content-Length), over 256 KiB (max_body_bytes)"
        );
    }
    // Streaming, the same body is one SSE line that never ends.
    let run = replay(requests(2, 20, 4), target(&server, true), |_| {}).await;
    errors_of(&run.records, 2, ErrorKind::ResponseTooLarge);
    // A chunked body, with no length to refuse up front, is cut at the cap.
    let server = HostileServer::start(Hostile::EndlessLine { bytes: 64 << 20 });
    let run = replay(requests(2, 20, 4), target(&server, false), |_| {}).await;
    for m in errors_of(&run.records, 2, ErrorKind::ResponseTooLarge) {
        assert_eq!(m, "response body, over 256 KiB (max_body_bytes)");
    }
}

#[tokio::test]
async fn headers_that_never_end_are_response_too_large() {
    let server = HostileServer::start(Hostile::HugeHeaders { bytes: 8 << 20 });
    let run = replay(requests(2, 20, 4), target(&server, true), |_| {}).await;
    for m in errors_of(&run.records, 2, ErrorKind::ResponseTooLarge) {
        assert_eq!(
            m,
            "response head over 16 KiB or 100 headers (max_header_bytes)"
        );
    }
}

#[tokio::test]
async fn an_error_body_keeps_only_its_first_4_kib() {
    let server = HostileServer::start(Hostile::HugeErrorBody { bytes: 1 << 30 });
    let run = replay(requests(2, 20, 4), target(&server, true), |_| {}).await;
    for r in &run.records {
        let e = r.error.as_ref().unwrap();
        assert_eq!((e.kind, e.http_status), (ErrorKind::HttpStatus, Some(503)));
        assert_eq!(e.message.len(), 4096, "trimmed to the error body limit");
    }
    assert!(server.bytes_sent() < 1 << 28, "{}", server.bytes_sent());
}

/// An error status whose body never completes ended at the request timeout as `timeout`, its
/// status lost; the body has its own second.
#[tokio::test]
async fn an_error_body_that_never_completes_keeps_its_status() {
    let server = HostileServer::start(Hostile::StalledErrorBody);
    let mut t = target(&server, true);
    t.timeout = Duration::from_secs(10);
    let run = replay(requests(2, 20, 4), t, |_| {}).await;
    for r in &run.records {
        let e = r.error.as_ref().expect("an error");
        assert_eq!(
            (e.kind, e.http_status),
            (ErrorKind::HttpStatus, Some(503)),
            "{e:?}"
        );
        assert_eq!(
            e.message,
            r#"{"error":{"message":"busy" (error body cut short: not complete 1000 ms after the head)"#
        );
    }
}

#[tokio::test]
async fn a_stream_far_past_max_tokens_is_response_too_long() {
    let server = HostileServer::start(Hostile::EndlessStream {
        chunks: 10_000_000,
        every: Duration::ZERO,
    });
    // max_tokens 10: at most 10 x 8 + 64 token chunks are read.
    let run = replay(requests(2, 20, 10), target(&server, true), |_| {}).await;
    for m in errors_of(&run.records, 2, ErrorKind::ResponseTooLong) {
        assert_eq!(
            m,
            "over 144 token chunks for max_tokens 10 (max_output_ratio)"
        );
    }
    for r in &run.records {
        assert_eq!(r.chunks, 144);
    }
}

/// Events that carry no token were not counted: a stream of role-only chunks, empty contents,
/// `choices: []` and `: ping` comments was read to the request timeout.
#[tokio::test]
async fn a_stream_of_events_without_tokens_is_response_too_long() {
    let server = HostileServer::start(Hostile::EndlessNothing { events: 400_000 });
    // max_tokens 10: 144 token chunks, so 4 x 144 + 4096 lines without data.
    let run = replay(requests(2, 20, 10), target(&server, true), |_| {}).await;
    for m in errors_of(&run.records, 2, ErrorKind::ResponseTooLong) {
        assert_eq!(
            m,
            "over 4672 SSE events, comments and fields for max_tokens 10 (max_output_ratio)"
        );
    }
    assert!(run.records.iter().all(|r| r.chunks == 0));
}

#[tokio::test]
async fn a_long_stream_keeps_a_bounded_prefix_of_its_chunk_gaps() {
    let chunks = ChunkGaps::KEPT as u64 * 5 / 2;
    let server = HostileServer::start(Hostile::EndlessStream {
        chunks,
        every: Duration::ZERO,
    });
    let mut t = target(&server, true);
    t.max_tokens_field = MaxTokensField::None;
    let run = replay(requests(1, 20, 10), t, |c| c.record_chunks = true).await;
    let r = &run.records[0];
    // The server hung up without [DONE] after its last chunk.
    assert_eq!(r.error.as_ref().unwrap().kind, ErrorKind::StreamCut);
    assert_eq!(u64::from(r.chunks), chunks);
    let gaps = r.chunk_gaps_ms.as_ref().expect("--record-chunks");
    assert_eq!(gaps.len(), ChunkGaps::KEPT, "only the first gaps are kept");
    let max = r
        .max_chunk_gap_ms
        .expect("the largest gap over every chunk");
    assert!(gaps.iter().all(|g| *g <= max));
}

#[tokio::test]
async fn response_side_failures_say_where_they_happened() {
    // Bytes that are not HTTP are the server's protocol failure (audit finding 5), not a cut.
    let server = HostileServer::start(Hostile::Garbage { bytes: 4096 });
    let run = replay(requests(2, 20, 4), target(&server, true), |_| {}).await;
    for m in errors_of(&run.records, 2, ErrorKind::Protocol) {
        assert!(
            m.starts_with("reading the response head: invalid HTTP"),
            "{m}"
        );
    }
    for (mode, label) in [
        (
            Hostile::CloseAfterRequest,
            "waiting for the response: connection closed before message completed",
        ),
        (
            Hostile::ResetAfterRequest,
            "waiting for the response: connection error: Connection reset by peer",
        ),
    ] {
        let server = HostileServer::start(mode);
        let run = replay(requests(2, 20, 4), target(&server, true), |_| {}).await;
        for m in errors_of(&run.records, 2, ErrorKind::StreamCut) {
            assert!(m.starts_with(label), "{mode:?}: {m}");
            // hyper's error, then its io cause, each once.
            let cause = m.rsplit(": ").next().unwrap();
            assert_eq!(m.matches(cause).count(), 1, "{m}");
        }
    }
}

#[tokio::test]
async fn a_run_against_a_hostile_server_still_measures_its_healthy_neighbour() {
    // Two runs at once in one process: the hostile one cannot starve the healthy one.
    let sim = sim(&["--profile", "fast"]).await;
    let server = HostileServer::start(Hostile::EndlessLine { bytes: 256 << 20 });
    let (healthy, hostile) = tokio::join!(
        replay(requests(20, 50, 8), crate::support::target(&sim), |_| {}),
        replay(requests(20, 20, 4), target(&server, true), |_| {}),
    );
    assert!(healthy.records.iter().all(|r| r.status == Status::Ok));
    errors_of(&hostile.records, 20, ErrorKind::ResponseTooLarge);
}

#[tokio::test]
async fn a_server_that_quotes_the_request_puts_no_secret_and_no_control_character_into_records() {
    for in_stream in [false, true] {
        let server = HostileServer::start(Hostile::EchoRequest { in_stream });
        let mut t = target(&server, true);
        t.api_key = Some(ApiKey::new("sk-live-SECRET"));
        t.headers = vec![header("x-tenant-token", "tenant-SECRET").unwrap()];
        let run = replay(requests(2, 20, 4), t, |_| {}).await;
        let kind = match in_stream {
            true => ErrorKind::ServerError,
            false => ErrorKind::HttpStatus,
        };
        for m in errors_of(&run.records, 2, kind) {
            // The quote is kept, its secrets are not.
            assert!(m.starts_with("refused: POST /v1/chat/completions"), "{m}");
            assert!(m.contains("authorization: Bearer <redacted>"), "{m}");
            assert!(m.contains("x-tenant-token: <redacted>"), "{m}");
            assert!(!m.contains("SECRET"), "{m}");
            // The quoted head's line breaks are escaped: the message is printed as the top
            // cause and logged in verdicts, where a raw one could forge lines or, with ESC,
            // drive the terminal.
            assert!(!m.chars().any(char::is_control), "{m}");
            assert!(m.contains(r"\r\n"), "{m}");
        }
        for file in std::fs::read_dir(run.dir.path()).unwrap() {
            let path = file.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            assert!(!text.contains("SECRET"), "{}: {text}", path.display());
        }
    }
}

/// The secrets audit's key: `/`, `+` and `=` in it, as in base64-made keys.
const AUDIT_KEY: &str = "sk-ZQ1xAPIKEY/k+y=1";

/// Every file a run wrote, none holding `needle`.
fn no_file_holds(run: &Run, needle: &str) {
    for file in std::fs::read_dir(run.dir.path()).unwrap() {
        let path = file.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(!text.contains(needle), "{}: {text}", path.display());
    }
}

// Secrets audit, item 1: a quote cut inside the key, with words after the cut, kept all of
// the key but its last bytes: a 401 whose body the server cut short (" (error body cut
// short: …)" after it), and a parser's complaint quoting the key, cut at 200 bytes ("… at
// line L column C" after it). The 153 `Q`s put the parser's cut 11 bytes into the key.
#[tokio::test]
async fn a_key_a_quote_cuts_short_is_redacted_whatever_follows_the_cut() {
    for (mode, streaming, kind, says) in [
        (
            Hostile::EchoCutThenClose,
            true,
            ErrorKind::HttpStatus,
            "refused: Bearer <redacted> (error body cut short: ",
        ),
        (
            Hostile::EchoAsWrongType {
                pad: 153,
                streaming: true,
            },
            true,
            ErrorKind::MalformedChunk,
            "QQQBearer <redacted>",
        ),
        (
            Hostile::EchoAsWrongType {
                pad: 153,
                streaming: false,
            },
            false,
            ErrorKind::MalformedChunk,
            "QQQBearer <redacted>",
        ),
    ] {
        let server = HostileServer::start(mode);
        let mut t = target(&server, streaming);
        t.api_key = Some(ApiKey::new(AUDIT_KEY));
        let run = replay(requests(2, 20, 4), t, |_| {}).await;
        for m in errors_of(&run.records, 2, kind) {
            assert!(m.contains(says), "{mode:?}: {m}");
            assert!(!m.contains("ZQ1x"), "{mode:?}: {m}");
            if kind == ErrorKind::MalformedChunk {
                assert!(m.contains("… at line 1 column "), "{mode:?}: {m}");
            }
        }
        no_file_holds(&run, "ZQ1x");
    }
}

// Secrets audit, item 2: a header value past ASCII (`-H 'X-Secret-Hdr: ZQ2xNONASCIIé'`) was
// never redacted, the scrub skipping every value that was not plain ASCII: quoted as its
// bytes, or as a server that read them as Latin-1 writes them back, it reached records whole.
#[tokio::test]
async fn a_header_value_past_ascii_is_redacted_as_sent_and_as_read_as_latin_1() {
    let server = HostileServer::start(Hostile::EchoHeadBytes);
    let mut t = target(&server, true);
    t.headers = vec![
        header("x-secret-hdr", "ZQ2xNONASCIIé").unwrap(),
        header("authorization", "Bearer ZQ3xTOKÉN-99").unwrap(),
    ];
    let run = replay(requests(2, 20, 4), t, |_| {}).await;
    for m in errors_of(&run.records, 2, ErrorKind::HttpStatus) {
        // Both quotes are kept, their secrets are not.
        assert!(m.contains("x-secret-hdr: <redacted>"), "{m}");
        assert!(m.contains(" | as read: POST "), "{m}");
        assert!(!m.contains("ZQ2x") && !m.contains("ZQ3x"), "{m}");
    }
    no_file_holds(&run, "ZQ2x");
    no_file_holds(&run, "ZQ3x");
}

// Secrets audit, item 3: a server that quoted the key and a header in another case, in
// base64, percent-encoded or HTML-escaped put them into records, only their exact and
// JSON-escaped forms being looked for.
#[tokio::test]
async fn a_key_quoted_encoded_or_in_another_case_is_redacted() {
    use base64::Engine;
    let server = HostileServer::start(Hostile::EchoEncoded);
    let mut t = target(&server, true);
    t.api_key = Some(ApiKey::new(AUDIT_KEY));
    // A header named as a credential: other headers' values are no secrets (TLS audit M1).
    t.headers = vec![header("x-key", "ZQcx&CFG<HDR>").unwrap()];
    let run = replay(requests(2, 20, 4), t, |_| {}).await;
    let quoted = format!("Bearer {AUDIT_KEY} | x-key=ZQcx&CFG<HDR>");
    let b64 = base64::engine::general_purpose::STANDARD.encode(&quoted);
    for m in errors_of(&run.records, 2, ErrorKind::HttpStatus) {
        // Every quote is there, without its secrets.
        for label in ["lower=", "upper=", "b64=", "url=", "html="] {
            assert!(m.contains(label), "{m}");
        }
        assert!(!m.to_lowercase().contains("zq1x"), "{m}");
        assert!(!m.to_lowercase().contains("zqcx"), "{m}");
        // The base64 keeps at most the few characters at a secret's edges.
        assert!(
            !m.contains(&b64[12..20]) && !m.contains(&b64[48..56]),
            "{m}"
        );
    }
    no_file_holds(&run, "ZQ1x");
    no_file_holds(&run, &b64[12..20]);
}

#[tokio::test]
async fn the_hard_stop_keeps_what_an_exchange_in_flight_measured() {
    // A token, then silence: the stop's grace period runs out with the exchange in flight.
    let server = HostileServer::start(Hostile::EndlessStream {
        chunks: 10,
        every: Duration::from_secs(30),
    });
    let stop = CancellationToken::new();
    let progress = std::sync::Arc::new(canary_replay::Progress::default());
    let run = {
        let (stop, progress) = (stop.clone(), progress.clone());
        tokio::spawn(async move {
            replay_watched(
                requests(2, 20, 4),
                target(&server, true),
                |s| s.grace_period = Duration::from_millis(300),
                stop,
                progress,
            )
            .await
        })
    };
    for _ in 0..3000 {
        if progress.sent.load(std::sync::atomic::Ordering::Relaxed) == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Time for the first token to arrive (the server sends it with the head).
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.cancel();
    let run = run.await.unwrap();
    assert_eq!(run.records.len(), 2);
    for r in &run.records {
        let e = r.error.as_ref().expect("an error");
        assert_eq!(
            (e.kind, e.message.as_str()),
            (ErrorKind::Cancelled, "run stopped; grace period over")
        );
        // What came before the hard stop is kept: it used to be dropped, and the send time
        // taken at the stop (a schedule lag of the whole wait).
        assert_eq!(r.chunks, 1, "{r:?}");
        let ttft = r.ttft_ms.expect("the first token's time");
        assert!(r.sent_at_ms + ttft <= r.ended_at_ms, "{r:?}");
    }
}

/// A response that comes before its request was sent answers nothing canaryd asked: it is a
/// `protocol` error, not a 0 ms success, and the request it raced is never sent after it.
/// The connection opens and the request is handed over (held) 300 ms before it is due; the
/// server answers 150 ms after the connection opens, without reading.
#[tokio::test]
async fn a_response_before_the_request_is_sent_is_a_protocol_error_not_a_success() {
    let server = HostileServer::start(Hostile::AnswersFirst {
        after: Duration::from_millis(150),
    });
    // Connections are opened and the requests held well before they are due.
    let mut reqs = requests(2, 20, 4);
    for (i, r) in reqs.iter_mut().enumerate() {
        r.timestamp_us = 400_000 * (i as u64 + 1);
    }
    let run = replay(reqs, target(&server, true), |c| {
        c.prepare_ahead = Duration::from_millis(300);
    })
    .await;
    for m in errors_of(&run.records, 2, ErrorKind::Protocol) {
        assert!(
            m.contains("a response (200 OK) came before the request was sent"),
            "{m}"
        );
    }
    assert_eq!(run.outcome.summary.errors_by_kind["protocol"], 2);
    assert_eq!(run.outcome.summary.completed, 0);
}

/// Each cap is one response's: thousands in flight, each just under its cap, would add up
/// past any machine's memory. Four responses here each hold an unfinished 48 KiB line (under
/// the 64 KiB event cap), 192 KiB together; with 128 KiB for all of them, those that would
/// take the sum past it end as `response_too_large`, and at most two go on to their timeout.
#[tokio::test]
async fn responses_in_flight_together_stay_within_the_held_budget() {
    let server = HostileServer::lasting(
        Hostile::EndlessLine { bytes: 48 << 10 },
        Duration::from_secs(10),
    );
    let mut t = target(&server, true);
    t.limits.held_bytes = 128 << 10;
    t.timeout = Duration::from_secs(3);
    let run = replay(requests(4, 20, 4), t, |_| {}).await;
    assert_eq!(run.records.len(), 4);
    let kinds: Vec<(ErrorKind, String)> = run
        .records
        .iter()
        .map(|r| {
            let e = r.error.as_ref().expect("an error");
            (e.kind, e.message.clone())
        })
        .collect();
    let over = kinds
        .iter()
        .filter(|(k, m)| {
            *k == ErrorKind::ResponseTooLarge
                && m == "responses in flight would hold over 128 KiB together (max_held_bytes)"
        })
        .count();
    assert!(over >= 2, "{kinds:?}");
    assert!(
        kinds
            .iter()
            .all(|(k, _)| matches!(k, ErrorKind::ResponseTooLarge | ErrorKind::Timeout)),
        "{kinds:?}"
    );
}

/// `[DONE]` finishes a request; a body that never ends after it costs the connection only.
/// Its end was read inside the request's deadline, so a `[DONE]` 100 ms into a 300 ms
/// timeout became a timeout 250 ms later. The timeout here is 5 s, far beyond a loaded
/// host's stalls: the body still never ends, so the old code still timed every request out.
#[tokio::test]
async fn done_near_the_deadline_is_a_finished_request_whatever_follows() {
    let server = HostileServer::start(Hostile::DoneWithoutEnd {
        after: Duration::from_millis(100),
    });
    let mut t = target(&server, true);
    t.timeout = Duration::from_secs(5);
    let run = replay(requests(2, 20, 4), t, |_| {}).await;
    for r in &run.records {
        assert_eq!(r.status, Status::Ok, "{:?}", r.error);
        assert!(r.e2e_ms.unwrap() < 5_000.0, "{:?}", r.e2e_ms);
    }
}

/// A pooled connection that fails without a byte right after the send was closed idle (the
/// request is sent again, `release.rs`); one whose server held the request 1.5 s first had
/// read it. That drop was taken for the idle close: sent again, it succeeded with the 1.5 s
/// as schedule lag, and one request could take twice its timeout. Both ways of sending: after
/// a concurrency slot, and held for the release thread.
#[tokio::test]
async fn a_request_held_then_dropped_on_a_pooled_connection_is_stream_cut_not_resent() {
    for held in [false, true] {
        let server = HostileServer::start(Hostile::DropsSecondRequest {
            after: Duration::from_millis(1500),
        });
        let mut reqs = requests(2, 20, 4);
        // The second takes the first's pooled connection: one at a time, or due long after.
        if held {
            reqs[1].timestamp_us = 1_000_000;
        }
        let run = replay(reqs, target(&server, true), |c| {
            c.concurrency = (!held).then_some(1);
        })
        .await;
        // Whichever went first opened the connection.
        let (fresh, pooled): (Vec<_>, Vec<_>) =
            run.records.iter().partition(|r| r.connect_ms.is_some());
        assert_eq!(
            (fresh.len(), pooled.len()),
            (1, 1),
            "held {held}: the second sent once, pooled: {:?}",
            run.records
        );
        assert_eq!(fresh[0].status, Status::Ok, "{:?}", fresh[0].error);
        let e = pooled[0].error.as_ref().expect("an error");
        assert_eq!(e.kind, ErrorKind::StreamCut, "{e:?}");
        assert!(
            e.message.starts_with(
                "waiting for the response: connection closed before message completed"
            ),
            "{e:?}"
        );
        assert_eq!(server.requests(), 2, "held {held}: not sent again");
    }
}

//! Servers that do not speak HTTP/1.1 as asked (the hostile-server audit, findings 2, 5, 6
//! and 8): endless interim (1xx) responses, answers hyper cannot parse, a page or a JSON
//! body where a stream was asked for, a redirect, events just under the size cap back to
//! back. Each is a raw loopback server written here, bounded in bytes and time.

use crate::support::*;
use canary_core::ErrorKind;
use canary_replay::Target;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How one connection is answered: `answer` once, then `flood` over and over (up to
/// [`FLOOD_LIMIT`] bytes), then held open until the client closes it (or closed).
#[derive(Clone)]
struct Answer {
    answer: Vec<u8>,
    flood: Vec<u8>,
    /// Close the connection after `answer`, rather than hold it.
    close: bool,
}

/// Bytes a flood sends at most.
const FLOOD_LIMIT: u64 = 256 << 20;

/// A connection lasts this long at most, whatever the client does.
const CONNECTION_LIMIT: Duration = Duration::from_secs(60);

struct RawServer {
    port: u16,
    /// Bytes written, over every connection.
    sent: Arc<AtomicU64>,
    /// Connections the client closed after its request (a failed write, or the end of its
    /// bytes).
    closed_by_client: Arc<AtomicU64>,
}

impl RawServer {
    fn start(answer: Answer) -> RawServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let sent = Arc::new(AtomicU64::new(0));
        let closed = Arc::new(AtomicU64::new(0));
        let (s, c) = (sent.clone(), closed.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { return };
                let (answer, s, c) = (answer.clone(), s.clone(), c.clone());
                std::thread::spawn(move || {
                    if serve(conn, &answer, &s) {
                        c.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
        });
        RawServer {
            port,
            sent,
            closed_by_client: closed,
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

/// Answers one connection's first request; true when the client closed it after the
/// request.
fn serve(mut tcp: TcpStream, answer: &Answer, sent: &AtomicU64) -> bool {
    let deadline = Instant::now() + CONNECTION_LIMIT;
    tcp.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    tcp.set_write_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    // The request's head and its Content-Length body.
    let mut buf = Vec::new();
    let mut piece = [0u8; 8192];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let length: usize = head
                .split("\r\n")
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            if buf.len() >= end + 4 + length {
                break;
            }
        }
        if Instant::now() > deadline {
            return false;
        }
        // A connection closed before its request (a spare one) is not counted.
        match tcp.read(&mut piece) {
            Ok(0) => return false,
            Ok(n) => buf.extend_from_slice(&piece[..n]),
            Err(e) if is_timeout(&e) => {}
            Err(_) => return false,
        }
    }
    let mut write = |mut bytes: &[u8]| -> Result<(), bool> {
        while !bytes.is_empty() {
            if Instant::now() > deadline {
                return Err(false);
            }
            match tcp.write(bytes) {
                Ok(0) => return Err(true),
                Ok(n) => {
                    sent.fetch_add(n as u64, Ordering::Relaxed);
                    bytes = &bytes[n..];
                }
                Err(e) if is_timeout(&e) => {}
                Err(_) => return Err(true),
            }
        }
        Ok(())
    };
    if let Err(closed) = write(&answer.answer) {
        return closed;
    }
    let mut flooded = 0;
    while !answer.flood.is_empty() && flooded < FLOOD_LIMIT {
        if let Err(closed) = write(&answer.flood) {
            return closed;
        }
        flooded += answer.flood.len() as u64;
    }
    if answer.close {
        let _ = tcp.shutdown(Shutdown::Both);
        return false;
    }
    // Held open until the client goes.
    while Instant::now() < deadline {
        match tcp.read(&mut piece) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if is_timeout(&e) => {}
            Err(_) => return true,
        }
    }
    let _ = tcp.shutdown(Shutdown::Both);
    false
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// A target at `server` with small caps ([`small_target`]).
fn target(server: &RawServer, streaming: bool) -> Target {
    small_target(&server.url(), streaming)
}

fn answer(bytes: &[u8]) -> Answer {
    Answer {
        answer: bytes.to_vec(),
        flood: Vec::new(),
        close: false,
    }
}

/// A whole SSE answer of one token and `[DONE]`, `content_type` its type.
fn sse_answer(content_type: &str) -> Vec<u8> {
    let events = "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\ndata: [DONE]\n\n";
    format!(
        "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\r\n{events}",
        events.len()
    )
    .into_bytes()
}

// Finding 2: `100 Continue` forever had each request parse hundreds of MiB of heads until its
// timeout, a core busy, the timeout firing seconds late.
#[tokio::test]
async fn endless_interim_responses_end_the_request_at_the_cap() {
    let server = RawServer::start(Answer {
        answer: Vec::new(),
        flood: b"HTTP/1.1 100 Continue\r\n\r\n".repeat(2048),
        close: false,
    });
    let run = replay(requests(2, 20, 4), target(&server, true), |_| {}).await;
    for m in errors_of(&run.records, 2, ErrorKind::Protocol) {
        assert_eq!(m, "over 16 interim (1xx) responses");
    }
    // Dropping the response closed each connection: the server saw it, its flood cut short.
    wait_until(|| server.closed_by_client.load(Ordering::Relaxed) == 2);
    let sent = server.sent.load(Ordering::Relaxed);
    assert!(sent < FLOOD_LIMIT / 4, "{sent} bytes of interim heads sent");
    // A few interim responses, as servers send them, are read past.
    let hints = b"HTTP/1.1 103 Early Hints\r\nlink: </x>\r\n\r\n".repeat(3);
    let server = RawServer::start(answer(&[hints, sse_answer("text/event-stream")].concat()));
    let run = replay(requests(2, 20, 4), target(&server, true), |_| {}).await;
    assert_eq!(run.outcome.summary.completed, 2, "{:?}", run.records);
}

/// Polls `cond` until it holds; panics after a generous deadline (not a timing check).
fn wait_until(cond: impl Fn() -> bool) {
    let end = Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(Instant::now() < end, "the condition never held");
        std::thread::sleep(Duration::from_millis(10));
    }
}

// Finding 5: bytes hyper cannot parse as HTTP/1.1 were `stream_cut`, as if a network had cut
// them.
#[tokio::test]
async fn an_answer_that_is_not_http_is_a_protocol_error_and_a_cut_stays_a_cut() {
    let sse_head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                    transfer-encoding: chunked\r\n\r\n";
    let event = "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n";
    let one_event = format!("{:x}\r\n{event}\r\n", event.len());
    for (raw, said) in [
        (
            format!("{event}data: [DONE]\n\n"),
            "reading the response head: invalid HTTP version parsed",
        ),
        (
            "HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 500\r\n\r\nhello".to_string(),
            "reading the response head: invalid content-length parsed",
        ),
        (
            format!("{sse_head}ffffffffffffffffffff\r\n"),
            "reading stream: error reading a body from connection: invalid chunk size: overflow",
        ),
        (
            format!("{sse_head}{one_event}zz\r\nhello\r\n"),
            "reading stream: error reading a body from connection: Invalid chunk size line: \
             missing size digit",
        ),
    ] {
        let server = RawServer::start(answer(raw.as_bytes()));
        let run = replay(requests(2, 20, 4), target(&server, true), |_| {}).await;
        for m in errors_of(&run.records, 2, ErrorKind::Protocol) {
            assert!(m.starts_with(said), "{m}");
        }
    }
    // A stream the server closes mid-chunk was cut.
    let server = RawServer::start(Answer {
        close: true,
        ..answer(format!("{sse_head}{one_event}100\r\nda").as_bytes())
    });
    let run = replay(requests(2, 20, 4), target(&server, true), |_| {}).await;
    for m in errors_of(&run.records, 2, ErrorKind::StreamCut) {
        assert!(
            m.contains("end of file before message length reached"),
            "{m}"
        );
    }
}

// Finding 6: a proxy's login page answering a streaming request read `stream_cut: stream
// ended before any token and without [DONE]`, saying nothing of what came.
#[tokio::test]
async fn a_streaming_request_answered_with_something_else_says_what_came() {
    let page = format!("<html>{}</html>", "x".repeat(5000));
    let html = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/html; charset=utf-8\r\ncontent-length: {}\r\n\r\n\
         {page}",
        page.len()
    );
    let server = RawServer::start(answer(html.as_bytes()));
    let run = replay(requests(2, 20, 4), target(&server, true), |_| {}).await;
    for m in errors_of(&run.records, 2, ErrorKind::Protocol) {
        assert_eq!(
            m,
            format!(
                "not an SSE stream: Content-Type \"text/html; charset=utf-8\" (not \
                 text/event-stream), a body starting \"<html>{}\"…",
                "x".repeat(114)
            )
        );
    }
    // A whole JSON answer (a server that ignored `stream`) is read, then named.
    let body = "{\"choices\":[{\"message\":{\"content\":\"hi\"}}]}";
    let json = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let server = RawServer::start(answer(json.as_bytes()));
    let run = replay(requests(2, 20, 4), target(&server, true), |_| {}).await;
    for m in errors_of(&run.records, 2, ErrorKind::Protocol) {
        assert_eq!(
            m,
            format!(
                "not an SSE stream: Content-Type \"application/json\" (not text/event-stream) \
                 and no event in a body of {} bytes starting {body:?}",
                body.len()
            )
        );
    }
    // SSE under another type, or none, is still read: servers get the type wrong.
    for content_type in ["text/plain", "application/octet-stream"] {
        let server = RawServer::start(answer(&sse_answer(content_type)));
        let run = replay(requests(2, 20, 4), target(&server, true), |_| {}).await;
        assert_eq!(run.outcome.summary.completed, 2, "{content_type}");
    }
    // An empty event stream says so.
    let empty = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: 0\r\n\r\n";
    let server = RawServer::start(answer(empty.as_bytes()));
    let run = replay(requests(1, 20, 4), target(&server, true), |_| {}).await;
    for m in errors_of(&run.records, 1, ErrorKind::StreamCut) {
        assert_eq!(m, "stream ended before any token and without [DONE]");
    }
}

// Finding 6: a redirect's message was empty (`http_status 302: `).
#[tokio::test]
async fn a_redirect_says_where_it_pointed_and_is_not_followed() {
    for (location, said) in [
        (
            "http://10.255.255.1:9/steal".to_string(),
            "\"http://10.255.255.1:9/steal\"".to_string(),
        ),
        (
            format!("/{}", "a".repeat(500)),
            format!("\"/{}\"…", "a".repeat(119)),
        ),
    ] {
        let raw = format!(
            "HTTP/1.1 307 Temporary Redirect\r\nlocation: {location}\r\ncontent-length: 0\r\n\r\n"
        );
        let server = RawServer::start(answer(raw.as_bytes()));
        let run = replay(requests(2, 20, 4), target(&server, true), |_| {}).await;
        for r in &run.records {
            let e = r.error.as_ref().expect("an error");
            assert_eq!((e.kind, e.http_status), (ErrorKind::HttpStatus, Some(307)));
            assert_eq!(e.message, format!("redirect to {said} not followed"));
        }
    }
}

// Finding 8: events just under the cap, back to back in one read, were refused as over it:
// the next event's bytes counted as the first's.
#[tokio::test]
async fn events_just_under_the_cap_back_to_back_are_read() {
    let content = "a".repeat((64 << 10) - 64);
    let event = format!("data: {{\"choices\":[{{\"delta\":{{\"content\":\"{content}\"}}}}]}}\n\n");
    let events = format!("{}data: [DONE]\n\n", event.repeat(8));
    let raw = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n{events}",
        events.len()
    );
    let server = RawServer::start(answer(raw.as_bytes()));
    let run = replay(requests(2, 20, 40), target(&server, true), |_| {}).await;
    assert_eq!(
        run.outcome.summary.completed, 2,
        "{:?}",
        run.records[0].error
    );
    assert!(run.records.iter().all(|r| r.chunks == 8));
}

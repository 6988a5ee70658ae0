//! Exchanges with real loopback servers.

use super::*;
use crate::connection::Connector;
use crate::limits::HeldBytes;
use std::io::{Read, Write};

/// A loopback server answering every request on every connection with one token and
/// `[DONE]` as SSE under `content_type`; its port.
fn sse_server(content_type: &'static str) -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            std::thread::spawn(move || {
                let events =
                    "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\ndata: [DONE]\n\n";
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\n\
                     content-length: {}\r\n\r\n{events}",
                    events.len()
                );
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                // A GET: its head is the request.
                loop {
                    match conn.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                    if request.windows(4).any(|w| w == b"\r\n\r\n") {
                        request.clear();
                        if conn.write_all(answer.as_bytes()).is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    port
}

/// Two streaming exchanges with a server answering under `content_type`, each on a connection
/// of its own from one connector (a run's): what the connector noted.
async fn two_streams(content_type: &'static str) -> Option<(String, u64)> {
    let port = sse_server(content_type);
    let connector = Connector::new(
        "127.0.0.1",
        port,
        None,
        Duration::from_secs(10),
        64 << 10,
        false,
    )
    .unwrap();
    let caps = ResponseLimits::default();
    let limits = ReadLimits {
        caps,
        held: HeldBytes::new(caps.held_bytes),
        max_chunks: 100,
        max_tokens: None,
        cancel_after: None,
        secrets: Arc::default(),
    };
    for _ in 0..2 {
        let mut conn = connector.open().await.unwrap();
        let request = http::Request::get("/v1/chat/completions")
            .header(http::header::HOST, format!("127.0.0.1:{port}"))
            .body(Full::new(Bytes::new()))
            .unwrap();
        // Generous: the answer is immediate (not a timing check).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let stop = CancellationToken::new();
        let m = exchange(&mut conn, request, true, deadline, &limits, None, &stop).await;
        assert!(m.error.is_none(), "{content_type}: {:?}", m.error);
        assert_eq!(m.chunks, 1, "{content_type}");
    }
    connector
        .unexpected_content_type()
        .map(|(first, n)| (first.to_string(), n))
}

// SSE under another type was read without a word: servers get the type wrong, but it can as
// well be a proxy's or another API's answer.
#[tokio::test]
async fn a_stream_under_another_type_is_read_and_noted_once_per_run() {
    for content_type in ["text/plain", "application/octet-stream"] {
        assert_eq!(
            two_streams(content_type).await,
            Some((format!("Content-Type {content_type:?}"), 2)),
        );
    }
    assert_eq!(two_streams("text/event-stream; charset=utf-8").await, None);
}

//! Opening connections with and without kernel receive timestamps, on real sockets.

use super::*;
use std::sync::atomic::AtomicUsize;

/// A loopback listener that accepts and holds connections; its port.
fn listener() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in l.incoming() {
            held.extend(c.ok());
        }
    });
    port
}

fn connector(port: u16, rx_stamps: bool) -> Connector {
    Connector::new(
        "127.0.0.1",
        port,
        None,
        Duration::from_secs(5),
        64 << 10,
        rx_stamps,
    )
    .unwrap()
}

#[tokio::test]
async fn connections_read_with_kernel_stamps_unless_turned_off() {
    let port = listener();
    let on = connector(port, true);
    assert!(on.open().await.unwrap().io.rx.is_some());
    assert_eq!(on.rx_state(), ("on", None));
    let off = connector(port, false);
    assert!(off.open().await.unwrap().io.rx.is_none());
    assert_eq!(off.rx_state(), ("off", None));
}

#[tokio::test]
async fn a_refused_socket_option_is_reported_once_and_connections_read_without_stamps() {
    static ASKED: AtomicUsize = AtomicUsize::new(0);
    fn refuse(_: &TcpStream) -> std::io::Result<()> {
        ASKED.fetch_add(1, Ordering::Relaxed);
        Err(std::io::Error::from_raw_os_error(libc::ENOPROTOOPT))
    }
    let mut c = connector(listener(), true);
    Arc::get_mut(&mut c.rx).unwrap().enable = refuse;
    for _ in 0..3 {
        let conn = c.open().await.expect("the connection opens all the same");
        assert!(conn.io.rx.is_none());
    }
    // Asked once; from then on the connector knows.
    assert_eq!(ASKED.load(Ordering::Relaxed), 1);
    let (state, why) = c.rx_state();
    assert_eq!(state, "refused");
    assert!(
        why.as_deref()
            .unwrap()
            .starts_with("setsockopt(SO_TIMESTAMPING): "),
        "{why:?}"
    );
}

/// A request for `/` on `port`.
fn get(port: u16) -> http::Request<Full<Bytes>> {
    http::Request::get(format!("http://127.0.0.1:{port}/"))
        .body(Full::new(Bytes::new()))
        .unwrap()
}

#[tokio::test]
async fn the_connection_reads_a_segment_while_the_requests_task_is_not_polling() {
    // A server that writes a streamed response's head, then each SSE event when told.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let (next, told) = std::sync::mpsc::channel::<&'static [u8]>();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        let (mut s, _) = l.accept().unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0, "closed before the request");
            got.extend_from_slice(&buf[..n]);
        }
        s.write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
            .unwrap();
        for piece in told {
            s.write_all(piece).unwrap();
        }
    });
    let c = connector(port, true);
    let conn = c.open().await.unwrap();
    let log = conn.io.rx.clone().expect("stamps on");
    let mut sender = conn.sender;
    let response = tokio::time::timeout(Duration::from_secs(10), sender.send_request(get(port)))
        .await
        .expect("a response head: the connection is driven without the request's task")
        .unwrap();
    let mut body = response.into_body();
    // Ask for the body once, as the exchange does, then leave it unpolled: the request's task
    // busy elsewhere (parsing, building another prompt).
    std::future::poll_fn(|cx| {
        assert!(hyper::body::Body::poll_frame(Pin::new(&mut body), cx).is_pending());
        Poll::Ready(())
    })
    .await;
    let before = log.last().seq;
    next.send(b"9\r\ndata: 1\n\n\r\n").unwrap();
    // Bounded, so a connection that is never read fails the test instead of hanging it.
    let mut waited = 0;
    while log.last().seq == before {
        assert!(
            waited < 10_000,
            "the first event's segment was not read while the body was not polled"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
        waited += 1;
    }
    let first_read = log.last();
    // The second event is sent only after the first was read: that read held the first alone,
    // so its stamp is the first event's own.
    next.send(b"9\r\ndata: 2\n\n\r\n0\r\n\r\n").unwrap();
    let frame = |f: Option<Result<hyper::body::Frame<Bytes>, hyper::Error>>| {
        f.expect("a frame").unwrap().into_data().unwrap()
    };
    use http_body_util::BodyExt;
    assert_eq!(frame(body.frame().await), "data: 1\n\n");
    assert_eq!(frame(body.frame().await), "data: 2\n\n");
    assert!(body.frame().await.is_none());
    assert!(!first_read.filled);
    assert!(
        log.last().seq > first_read.seq,
        "the second came in a read of its own"
    );
}

#[tokio::test]
async fn pooled_connections_are_reused_while_the_server_keeps_them() {
    // A server answering two requests on one connection, with a chunked (streamed) body.
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let mut got = Vec::new();
                loop {
                    let Ok(n @ 1..) = s.read(&mut buf).await else {
                        return;
                    };
                    got.extend_from_slice(&buf[..n]);
                    while let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                        got.drain(..end + 4);
                        let r = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n";
                        if s.write_all(r).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    let c = connector(port, false);
    for i in 0..3 {
        let mut conn = c.acquire().await.unwrap();
        assert_eq!(conn.connect_time.is_some(), i == 0, "request {i}");
        let resp = conn.sender.send_request(get(port)).await.unwrap();
        let body = http_body_util::BodyExt::collect(resp.into_body())
            .await
            .unwrap();
        assert_eq!(body.to_bytes(), "ok");
        c.release(conn);
    }
}

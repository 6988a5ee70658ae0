//! Opening connections with and without kernel receive timestamps, on real sockets.

use super::*;
use std::future::Future;
use std::sync::atomic::AtomicUsize;
use std::task::Waker;

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

/// A waker counting its wake-ups.
#[derive(Default)]
struct Count(AtomicUsize);

impl std::task::Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Pending `n` times, each time waking its own waker at once (as hyper's body channel does
/// when the reader asks the connection for more), then ready.
struct SelfWaking(usize);

impl Future for SelfWaking {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 == 0 {
            return Poll::Ready(());
        }
        self.0 -= 1;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[test]
fn wake_ups_raised_while_polling_are_taken_in_the_same_poll_not_rescheduled() {
    let outer = Arc::new(Count::default());
    let waker = Waker::from(outer.clone());
    let mut cx = Context::from_waker(&waker);
    let mut driver = None;
    let mut fut = std::pin::pin!(driven(&mut driver, SelfWaking(3)));
    assert_eq!(fut.as_mut().poll(&mut cx), Poll::Ready(()));
    assert_eq!(
        outer.0.load(Ordering::SeqCst),
        0,
        "the runtime was not asked"
    );
}

#[test]
fn a_wake_up_after_the_poll_reaches_the_task() {
    let outer = Arc::new(Count::default());
    let waker = Waker::from(outer.clone());
    let mut cx = Context::from_waker(&waker);
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let mut driver = None;
    let mut fut = std::pin::pin!(driven(&mut driver, rx));
    assert!(fut.as_mut().poll(&mut cx).is_pending());
    // From elsewhere (the reactor, another task): forwarded to the task's own waker.
    tx.send(()).unwrap();
    assert_eq!(outer.0.load(Ordering::SeqCst), 1);
    assert!(fut.as_mut().poll(&mut cx).is_ready());
}

#[test]
fn a_future_that_keeps_waking_itself_yields_to_the_runtime_in_the_end() {
    let outer = Arc::new(Count::default());
    let waker = Waker::from(outer.clone());
    let mut cx = Context::from_waker(&waker);
    let mut driver = None;
    let mut fut = std::pin::pin!(driven(&mut driver, SelfWaking(1000)));
    assert!(fut.as_mut().poll(&mut cx).is_pending());
    assert_eq!(
        outer.0.load(Ordering::SeqCst),
        1,
        "rescheduled, not spun forever"
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
    let get = || {
        http::Request::get(format!("http://127.0.0.1:{port}/"))
            .body(Full::new(Bytes::new()))
            .unwrap()
    };
    for i in 0..3 {
        let mut conn = c.acquire().await.unwrap();
        assert_eq!(conn.connect_time.is_some(), i == 0, "request {i}");
        let resp = driven(&mut conn.driver, conn.sender.send_request(get()))
            .await
            .unwrap();
        let body = driven(
            &mut conn.driver,
            http_body_util::BodyExt::collect(resp.into_body()),
        )
        .await
        .unwrap();
        assert_eq!(body.to_bytes(), "ok");
        c.release(conn);
    }
}

//! The gate on real loopback sockets: what the peer receives, and when, in bytes.

use super::*;
use std::io::{ErrorKind, Read};
use std::os::fd::AsRawFd;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// A connected pair: the client side behind a gate (its shared state too), and the peer as
/// a blocking std socket.
async fn pair() -> (Gate<TcpStream>, Arc<GateShared>, std::net::TcpStream) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let tcp = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
    let (peer, _) = l.accept().unwrap();
    let fd = tcp.as_raw_fd();
    let (gate, shared) = Gate::new(tcp, fd, &Arc::default());
    (gate, shared, peer)
}

/// What the peer can read right now, without waiting.
fn ready_bytes(peer: &mut std::net::TcpStream) -> Vec<u8> {
    peer.set_nonblocking(true).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 64 << 10];
    loop {
        match peer.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) => panic!("{e}"),
        }
    }
    peer.set_nonblocking(false).unwrap();
    got
}

#[tokio::test]
async fn an_armed_gate_holds_the_request_until_the_release_writes_it() {
    let (mut gate, shared, mut peer) = pair().await;
    // Open: straight through.
    gate.write_all(b"hello ").await.unwrap();
    gate.flush().await.unwrap();
    peer.read_exact(&mut [0u8; 6]).unwrap();

    assert!(shared.arm());
    assert!(!shared.arm(), "armed already");
    gate.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
    // Reported flushed, yet nothing left: the writer goes on to wait for the answer.
    gate.flush().await.unwrap();
    assert_eq!(shared.sent_at(), None);
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(ready_bytes(&mut peer), b"", "nothing before the release");

    let before = MonoTime::now();
    assert!(
        shared.send_held(),
        "released from this (the release) thread"
    );
    let sent = shared.sent_at().expect("stamped by the release");
    assert!(sent >= before);
    let mut got = [0u8; 18];
    peer.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"GET / HTTP/1.1\r\n\r\n");
    assert!(!shared.send_held(), "a release happens once");

    // Open again for the connection's next request.
    gate.write_all(b"more").await.unwrap();
    peer.read_exact(&mut [0u8; 4]).unwrap();
    assert!(shared.arm());
}

#[tokio::test]
async fn a_withdrawn_request_is_never_written() {
    let (mut gate, shared, mut peer) = pair().await;
    assert!(shared.arm());
    gate.write_all(b"POST /v1/chat/completions HTTP/1.1\r\n")
        .await
        .unwrap();
    assert!(shared.withdraw(), "nothing had gone out");
    assert!(
        !shared.send_held(),
        "the deadline comes after the withdrawal"
    );
    // The writer learns it may not write on this connection.
    let e = gate.write_all(b"x").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::BrokenPipe);
    drop(gate);
    let mut rest = Vec::new();
    peer.read_to_end(&mut rest).unwrap();
    assert_eq!(rest, b"", "the peer saw the connection close and no byte");
}

#[tokio::test]
async fn a_released_request_cannot_be_withdrawn() {
    let (mut gate, shared, mut peer) = pair().await;
    assert!(shared.arm());
    gate.write_all(b"abc").await.unwrap();
    assert!(shared.send_held());
    assert!(!shared.withdraw(), "in flight");
    peer.read_exact(&mut [0u8; 3]).unwrap();
}

#[tokio::test]
async fn a_request_larger_than_the_gate_and_the_socket_buffers_goes_out_whole_in_order() {
    let (gate, shared, mut peer) = pair().await;
    // Small socket buffers on both ends, so the release thread's one send is partial.
    for fd in [gate.inner.as_raw_fd(), peer.as_raw_fd()] {
        let size: libc::c_int = 32 << 10;
        let opt = if fd == peer.as_raw_fd() {
            libc::SO_RCVBUF
        } else {
            libc::SO_SNDBUF
        };
        // SAFETY: valid fd, option and length.
        let rc = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                (&size as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0);
    }
    let body: Vec<u8> = (0..HELD_MAX * 3).map(|i| (i % 251) as u8).collect();
    assert!(shared.arm());
    let writer = {
        let body = body.clone();
        tokio::spawn(async move {
            let mut gate = gate;
            gate.write_all(&body).await.unwrap();
            gate.flush().await.unwrap();
            gate
        })
    };
    // The writer fills the gate's buffer and then waits: nothing reaches the peer yet.
    while shared.lock().held.len() < HELD_MAX {
        tokio::task::yield_now().await;
    }
    assert_eq!(ready_bytes(&mut peer), b"");
    assert!(shared.send_held());
    assert!(
        shared.sent_at().is_some(),
        "the first bytes went at the release"
    );
    // (This runtime's one thread is here: the writer has not run since.)
    let left = shared.lock().held.len();
    assert!(left > 0, "premise: the release's send was partial");
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        peer.read_to_end(&mut got).unwrap();
        got
    });
    let gate = writer.await.unwrap();
    drop(gate);
    let got = reader.join().unwrap();
    assert_eq!(got.len(), body.len());
    assert!(got == body, "the bytes arrived in order");
}

/// A socket stand-in that notes when its first write began.
#[derive(Default)]
struct FirstWrite(Option<MonoTime>);

impl tokio::io::AsyncWrite for FirstWrite {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.0.get_or_insert_with(MonoTime::now);
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[tokio::test]
async fn a_written_through_request_is_stamped_before_its_write_begins() {
    // Loopback hands the bytes to the server inside the write: a stamp taken after it could
    // fall after the server's arrival stamp (seen once in CI as "arrived before it was sent").
    // The fd is never used: nothing is held when the release comes.
    let (mut gate, shared) = Gate::new(FirstWrite::default(), -1, &Arc::default());
    assert!(shared.arm());
    assert!(shared.send_held(), "released before the task wrote");
    gate.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
    let sent = shared.sent_at().expect("stamped by the task's write");
    let began = gate.inner.0.expect("written");
    assert!(
        sent <= began,
        "sent {sent:?} after the write began at {began:?}"
    );
}

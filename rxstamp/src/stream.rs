//! One stamped read of a tokio `TcpStream`, with tokio's readiness handling.

use std::io;
use std::os::fd::AsRawFd;
use std::task::{ready, Context, Poll};
use tokio::io::{Interest, ReadBuf};
use tokio::net::TcpStream;

use crate::recv;

/// What one read returned.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Received {
    /// Bytes read (0: end of stream).
    pub n: usize,
    /// The kernel's software stamp of the last segment the read consumed (`CLOCK_REALTIME`
    /// ns), when it gave one (never for the end of the stream).
    pub realtime_ns: Option<u64>,
    /// The read filled the space it was given, so the socket may hold more: later segments
    /// merged into its last one would have moved the stamp past this read's last byte.
    pub filled: bool,
}

/// Reads `tcp` into `buf`'s unfilled part with one `recvmsg`, once the socket is readable, and
/// advances `buf` by what was read. `buf` must have room (a read into no room would look like
/// the end of the stream).
///
/// Costs one `recvmsg` per read, as tokio's own read costs one `read`: after a read that did
/// not fill its space (it took all the kernel had queued) the readiness is cleared, so the next
/// read waits for new data instead of spending a `recvmsg` on an empty socket.
pub fn poll_recv(
    tcp: &TcpStream,
    cx: &mut Context<'_>,
    buf: &mut ReadBuf<'_>,
) -> Poll<io::Result<Received>> {
    debug_assert!(buf.remaining() > 0, "a read into no room");
    loop {
        ready!(tcp.poll_read_ready(cx))?;
        let fd = tcp.as_raw_fd();
        // SAFETY: recvmsg only writes initialized bytes into the unfilled part, and the count
        // it returns is what `assume_init` is told.
        let unfilled = unsafe { buf.unfilled_mut() };
        let len = unfilled.len();
        let mut drained = None;
        let read = tcp.try_io(Interest::READABLE, || {
            let (n, stamp) = recv::recv_stamped(fd, unfilled)?;
            if n > 0 && n < len {
                // A read that did not fill the buffer took all the kernel had queued: told
                // "would block", tokio clears the readiness now (as its own TcpStream does
                // after a short read), so the next read waits for new data instead of costing
                // a recvmsg that finds none. Data that came meanwhile raised the readiness
                // again, and tokio keeps it.
                drained = Some((n, stamp));
                return Err(io::ErrorKind::WouldBlock.into());
            }
            Ok((n, stamp))
        });
        let (n, stamp) = match (read, drained) {
            (_, Some(got)) | (Ok(got), None) => got,
            // Readiness was stale: `try_io` cleared it, wait again.
            (Err(e), None) if e.kind() == io::ErrorKind::WouldBlock => continue,
            (Err(e), None) => return Poll::Ready(Err(e)),
        };
        // SAFETY: the kernel wrote `n` bytes at the start of the unfilled part.
        unsafe { buf.assume_init(n) };
        buf.advance(n);
        return Poll::Ready(Ok(Received {
            n,
            // End of stream carries no data, and no stamp.
            realtime_ns: stamp.filter(|_| n > 0),
            filled: n == len,
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime, UNIX_EPOCH};
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpListener;

    fn realtime_ns() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
    }

    // The stamp is the kernel's, taken between the peer's write and this read, on
    // CLOCK_REALTIME; the end of the stream comes with none.
    #[tokio::test]
    async fn a_read_is_stamped_between_the_write_and_the_read() {
        assert!(crate::wait_until_stamped(Duration::from_secs(1))
            .await
            .unwrap());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        crate::enable(&listener).unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let before = realtime_ns();
        client.write_all(b"hello").await.unwrap();
        let mut space = [std::mem::MaybeUninit::uninit(); 64];
        let mut buf = ReadBuf::uninit(&mut space);
        let got = std::future::poll_fn(|cx| poll_recv(&server, cx, &mut buf))
            .await
            .unwrap();
        let after = realtime_ns();
        assert_eq!(buf.filled(), b"hello");
        assert_eq!((got.n, got.filled), (5, false));
        let stamp = got
            .realtime_ns
            .expect("accepted socket inherits the listener's stamps");
        assert!(
            before <= stamp && stamp <= after,
            "{before} {stamp} {after}"
        );
        drop(client);
        let mut buf = ReadBuf::uninit(&mut space);
        let end = std::future::poll_fn(|cx| poll_recv(&server, cx, &mut buf))
            .await
            .unwrap();
        assert_eq!(end, Received::default());
    }
}

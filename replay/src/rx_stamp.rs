//! Kernel receive timestamps on the response socket, for any user (issue 16).
//!
//! canaryd's read of a socket can lag the data's arrival by milliseconds when its threads wait
//! for a core. Linux stamps every received segment in software, and with `SO_TIMESTAMPING`
//! (`SOF_TIMESTAMPING_RX_SOFTWARE | SOF_TIMESTAMPING_SOFTWARE`) `recvmsg` returns, with each
//! read, the stamp of the last segment that read consumed: no privilege needed. [`RxStream`]
//! reads the TCP socket that way (under TLS as well: rustls reads through it) and notes each
//! read's stamp in the connection's [`RxLog`]; [`RxTimer`] turns those into the times of one
//! exchange's response events, on the monotonic clock.
//!
//! A stamp is the arrival of the last segment the read consumed, and no earlier one can be
//! recovered: reading only up to an event's end does not help, because the kernel merges
//! segments queued behind an unread one into it (`tcp_try_coalesce`) and moves its stamp to
//! the latest. Measured here (issue 16): a first token written 106 ms after the request, read
//! alone 420 ms later with 23 tokens queued behind it, was stamped 186 ms, the 17th token's
//! arrival. So an event is exact only when nothing came after it before the read.
//!
//! The socket option, the stamped `recvmsg` and its readiness handling live in
//! `canary-rxstamp`, shared with the simulator (which stamps a request's arrival with them).

mod timer;

pub(crate) use timer::{Role, RxTimer, Stamp};

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// Turns receive stamps on for `tcp` (an error: the kernel refused them).
pub(crate) fn enable(tcp: &TcpStream) -> io::Result<()> {
    canary_rxstamp::enable(tcp)
}

/// Whether a connector's connections read with kernel receive timestamps.
#[derive(Debug)]
pub(crate) struct RxStamps {
    wanted: bool,
    /// Why the kernel refused them, the first time it did; from then on none is asked for.
    refused: OnceLock<String>,
    /// Turns them on for a socket (a seam: tests make it fail).
    pub(crate) enable: fn(&TcpStream) -> io::Result<()>,
}

impl RxStamps {
    /// Stamps `wanted` or not.
    pub(crate) fn new(wanted: bool) -> RxStamps {
        RxStamps {
            wanted,
            refused: OnceLock::new(),
            enable,
        }
    }

    /// `on`, `off` (not asked for) or `refused`, with the kernel's reason.
    pub(crate) fn state(&self) -> (&'static str, Option<String>) {
        match (self.wanted, self.refused.get()) {
            (false, _) => ("off", None),
            (true, None) => ("on", None),
            (true, Some(why)) => ("refused", Some(why.clone())),
        }
    }

    /// Turns stamps on for `tcp` and returns the log its reads will note them in; `None` when
    /// they are off or refused (said once, the first time).
    pub(crate) fn log_for(&self, tcp: &TcpStream) -> Option<Arc<RxLog>> {
        if !self.wanted || self.refused.get().is_some() {
            return None;
        }
        match (self.enable)(tcp) {
            Ok(()) => Some(Arc::default()),
            Err(e) => {
                let why = format!("setsockopt(SO_TIMESTAMPING): {e}");
                if self.refused.set(why.clone()).is_ok() {
                    tracing::warn!(
                        "kernel receive timestamps off, the kernel refused them ({why}): \
                         response times are canaryd's own reads"
                    );
                }
                None
            }
        }
    }
}

/// The last read of one connection's socket: its sequence number (1 for the first read that
/// returned data) and the kernel's stamp of the last segment it consumed (`CLOCK_REALTIME`
/// ns), when the kernel gave one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct LastRead {
    pub seq: u64,
    pub realtime_ns: Option<u64>,
    /// The read filled its buffer, so the socket may have held more: later segments merged
    /// into its last one would have moved the stamp past this read's last byte.
    pub filled: bool,
}

/// What the socket's reads were stamped with, shared by the reader (the connection's task)
/// and the exchange timing the events.
#[derive(Debug, Default)]
pub(crate) struct RxLog {
    last: Mutex<LastRead>,
}

impl RxLog {
    pub(crate) fn note(&self, realtime_ns: Option<u64>, filled: bool) {
        let mut last = self.last.lock().expect("rx log lock");
        last.seq += 1;
        last.realtime_ns = realtime_ns;
        last.filled = filled;
    }

    /// The last read so far.
    pub(crate) fn last(&self) -> LastRead {
        *self.last.lock().expect("rx log lock")
    }
}

/// A TCP stream whose reads go through `recvmsg` and note the kernel's stamp in `log`; with
/// no log it reads as a plain stream.
pub(crate) struct RxStream {
    tcp: TcpStream,
    log: Option<Arc<RxLog>>,
}

impl RxStream {
    /// Reads `tcp`, noting stamps into `log` when there is one.
    pub(crate) fn new(tcp: TcpStream, log: Option<Arc<RxLog>>) -> RxStream {
        RxStream { tcp, log }
    }
}

impl AsyncRead for RxStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let Some(log) = &this.log else {
            return Pin::new(&mut this.tcp).poll_read(cx, buf);
        };
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        let got = ready!(canary_rxstamp::poll_recv(&this.tcp, cx, buf))?;
        // End of stream carries no data, and no stamp.
        if got.n > 0 {
            log.note(got.realtime_ns, got.filled);
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for RxStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    fn recvmsg_calls() -> usize {
        canary_rxstamp::recvmsg_calls()
    }

    // Issue 21, fewer syscalls per request: after a read that did not fill its buffer, the next
    // read waits for new data instead of first spending a recvmsg on an empty socket.
    #[tokio::test]
    async fn a_read_that_emptied_the_socket_waits_without_another_recvmsg() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (mut server, _) = listener.accept().await.unwrap();
        enable(&client).unwrap();
        // The first socket on the host to want stamps turns the kernel's stamping on a moment
        // later, from a workqueue: without this wait the first read can come unstamped.
        assert!(
            canary_rxstamp::wait_until_stamped(std::time::Duration::from_secs(1))
                .await
                .unwrap()
        );
        let log = Arc::new(RxLog::default());
        let mut rx = RxStream::new(client, Some(log.clone()));
        let mut buf = [0u8; 64];
        for word in [&b"hello"[..], b"again"] {
            server.write_all(word).await.unwrap();
            let n = rx.read(&mut buf).await.unwrap();
            assert_eq!(&buf[..n], word);
            let calls = recvmsg_calls();
            let mut cx = Context::from_waker(std::task::Waker::noop());
            let mut rb = ReadBuf::new(&mut buf);
            assert!(Pin::new(&mut rx).poll_read(&mut cx, &mut rb).is_pending());
            assert_eq!(recvmsg_calls(), calls, "a recvmsg found the socket empty");
        }
        // Each read came with the kernel's stamp, and neither filled the buffer.
        let last = log.last();
        assert_eq!(last.seq, 2);
        assert!(last.realtime_ns.is_some() && !last.filled, "{last:?}");
        // The end of the stream is still seen.
        drop(server);
        assert_eq!(rx.read(&mut buf).await.unwrap(), 0);
    }
}

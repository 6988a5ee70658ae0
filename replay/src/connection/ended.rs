//! How a connection's HTTP/1.1 task ended. hyper hands a request the connection's error only
//! when it was carrying it, and only the first it met: a request the connection closed before
//! it could carry is told only "canceled", and one whose write the server refused by closing
//! is told "broken pipe", while why the server closed (a TLS 1.3 server's refusal of a missing
//! client certificate, an alert sent right after the handshake) is the task's own error, or
//! waits unread on the socket.

use super::IoTrace;
use bytes::Bytes;
use http_body_util::Full;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use std::error::Error;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::oneshot;

/// How long a failed request waits for its connection's task to say why. The task ends in the
/// poll that fails the request, and then reads at most 250 ms ([`canary_tls::last_words`]):
/// this is only a bound, so that a connection somehow still alive never holds the request.
pub(crate) const END_WAIT: Duration = Duration::from_secs(1);

/// Why a connection's task ended, when it failed.
pub(crate) type Cause = Box<dyn Error + Send + Sync>;

/// The end of a connection's task ([`watch`]).
#[derive(Debug)]
pub(crate) struct Ended(Option<oneshot::Receiver<Option<Cause>>>);

/// Runs `conn` (hyper's side of a connection) as `conn.await` would, noting why it failed:
/// the task to spawn, and where its cause is read.
pub(crate) fn watch<S>(
    mut conn: http1::Connection<TokioIo<S>, Full<Bytes>>,
    trace: Arc<IoTrace>,
) -> (impl Future<Output = ()>, Ended)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (tx, rx) = oneshot::channel();
    let task = async move {
        // Without hyper's shutdown, to read from the stream after a failed write.
        let end = std::future::poll_fn(|cx| conn.poll_without_shutdown(cx)).await;
        let mut io = conn.into_parts().io.into_inner();
        let refused = trace.write_failed() && !trace.read_failed() && trace.bytes_read() == 0;
        let said = match refused {
            true => canary_tls::last_words(&mut io).await.map(Cause::from),
            false => None,
        };
        // Nobody asking (the connection dropped) is fine.
        let _ = tx.send(said.or(end.err().map(Cause::from)));
        // As hyper ends a connection (a TLS close_notify, then the socket's).
        let _ = io.shutdown().await;
    };
    (task, Ended(Some(rx)))
}

impl Ended {
    /// Why the task failed, once it ended within [`END_WAIT`]: `None` when it ended cleanly,
    /// is still running, or was asked before.
    pub(crate) async fn cause(&mut self) -> Option<Cause> {
        let rx = self.0.as_mut()?;
        let end = tokio::time::timeout(END_WAIT, rx).await.ok()?;
        self.0 = None;
        end.ok()?
    }
}

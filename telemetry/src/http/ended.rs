//! How a scrape's connection ended. hyper hands a request the connection's error only when it
//! was carrying it, and only the first it met: a GET the connection closed before it could
//! carry is told "operation was canceled: connection was not ready", and one whose write the
//! server refused by closing is told "broken pipe", while why the server closed (a TLS 1.3
//! server's refusal of a missing client certificate, an alert sent right after the handshake)
//! is the connection task's own error, or waits unread on the socket. The replay's connections
//! do the same (canary-replay's `connection::ended`); both read the socket through
//! [`canary_tls::last_words`].

use bytes::Bytes;
use http_body_util::Empty;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use std::error::Error;
use std::future::Future;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::oneshot;

/// Why a scrape's HTTP exchange failed.
pub(crate) type Cause = Box<dyn Error + Send + Sync>;

/// How long a failed GET waits for its connection's task to say why. The task ends in the
/// poll that fails the GET, then reads at most 250 ms ([`canary_tls::last_words`]): this is
/// only a bound, so a connection somehow still alive never holds the scrape (its own timeout
/// bounds it too).
const END_WAIT: Duration = Duration::from_secs(1);

/// The end of a connection's task ([`watch`]).
#[derive(Debug)]
pub(crate) struct Ended(oneshot::Receiver<Option<Cause>>);

/// Runs `conn` (hyper's side of a connection) as `conn.await` would, noting why it failed:
/// the task to spawn, and where its cause is read.
pub(crate) fn watch<S>(
    mut conn: http1::Connection<TokioIo<S>, Empty<Bytes>>,
) -> (impl Future<Output = ()>, Ended)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (tx, rx) = oneshot::channel();
    let task = async move {
        // Without hyper's shutdown, to read from the stream after a failed write.
        let end = std::future::poll_fn(|cx| conn.poll_without_shutdown(cx)).await;
        let mut io = conn.into_parts().io.into_inner();
        let cause = match end {
            Ok(()) => None,
            Err(e) if canary_tls::explain_chain(&e).is_some() => Some(e.into()),
            // A failed write, a reset: the server may have said why before closing.
            Err(e) => Some(
                canary_tls::last_words(&mut io)
                    .await
                    .map(Cause::from)
                    .unwrap_or_else(|| e.into()),
            ),
        };
        // Nobody asking (the scrape got its page, or gave up) is fine.
        let _ = tx.send(cause);
        // As hyper ends a connection (a TLS close_notify, then the socket's).
        let _ = io.shutdown().await;
    };
    (task, Ended(rx))
}

impl Ended {
    /// Why the GET failed with `e`: `e` when it names a TLS failure itself; else the
    /// connection's own cause when that names one or `e` is only hyper's "canceled" (the
    /// request never went out); else `e`.
    pub(crate) async fn why(self, e: hyper::Error) -> Cause {
        if canary_tls::explain_chain(&e).is_some() {
            return e.into();
        }
        let cause = tokio::time::timeout(END_WAIT, self.0)
            .await
            .ok()
            .and_then(Result::ok)
            .flatten();
        match cause {
            Some(c) if e.is_canceled() || canary_tls::explain_chain(&*c).is_some() => c,
            _ => e.into(),
        }
    }
}

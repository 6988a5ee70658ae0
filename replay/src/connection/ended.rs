//! How a connection's HTTP/1.1 task ended. hyper hands a request the connection's error only
//! when it was carrying it: a request the connection closed before it could carry (a TLS 1.3
//! server's refusal of a missing client certificate arrives right after the handshake) is
//! told only "canceled", and the cause is the task's own error.

use std::future::Future;
use std::time::Duration;
use tokio::sync::oneshot;

/// How long a request told "canceled" waits for its connection's task to say why. The task
/// ends in the same poll that cancels the request, so this is only a bound: a connection
/// that is somehow alive never holds the request.
pub(crate) const END_WAIT: Duration = Duration::from_secs(1);

/// The end of a connection's task ([`watch`]).
#[derive(Debug)]
pub(crate) struct Ended(Option<oneshot::Receiver<hyper::Result<()>>>);

/// `conn` (hyper's side of a connection), noting how it ends, and where that is read.
pub(crate) fn watch<F>(conn: F) -> (impl Future<Output = ()>, Ended)
where
    F: Future<Output = hyper::Result<()>>,
{
    let (tx, rx) = oneshot::channel();
    let task = async move {
        // Nobody asking (the connection dropped) is fine.
        let _ = tx.send(conn.await);
    };
    (task, Ended(Some(rx)))
}

impl Ended {
    /// The task's error, once it ended within [`END_WAIT`]: `None` when it ended cleanly,
    /// is still running, or was asked before.
    pub(crate) async fn error(&mut self) -> Option<hyper::Error> {
        let rx = self.0.as_mut()?;
        let end = tokio::time::timeout(END_WAIT, rx).await.ok()?;
        self.0 = None;
        end.ok()?.err()
    }
}

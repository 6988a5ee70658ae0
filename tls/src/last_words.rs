//! The alert a TLS server sent before closing a connection it refused (a TLS 1.3 server's
//! refusal of a missing client certificate comes right after the handshake), read from the
//! socket once when hyper's own error (a broken pipe, a cancel) does not carry it. Shared by
//! the replay's connections and the telemetry scrapers'.

use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};

/// How long the read waits: the peer has closed, so it returns at once (its bytes, its end
/// or a reset).
const LAST_WORDS_WAIT: Duration = Duration::from_millis(250);

/// Bytes read at most: a TLS alert is a 7-byte record (31 when encrypted); anything longer
/// is not what is looked for.
const LAST_WORDS_MAX: usize = 512;

/// The error reading `io` ends in when the server closed it after a TLS alert (rustls' error,
/// which [`crate::explain_error`] says in plain words); `None` for its end, bytes or no answer
/// within 250 ms. Reads once, at most 512 bytes.
pub async fn last_words<S: AsyncRead + Unpin>(io: &mut S) -> Option<std::io::Error> {
    let mut buf = [0u8; LAST_WORDS_MAX];
    match tokio::time::timeout(LAST_WORDS_WAIT, io.read(&mut buf)).await {
        Ok(Err(e)) if crate::explain_error(&e).is_some() => Some(e),
        _ => None,
    }
}

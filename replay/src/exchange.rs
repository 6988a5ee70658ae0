//! One request/response exchange, timed from the client side.
//!
//! Timestamps are taken at the points canaryd's own code observes: right before the request
//! is handed to the connection, when the response head is parsed, and when the read that
//! completes each SSE event returns. Each response event also gets the kernel's receive time
//! of its bytes where the socket stamps them ([`RxTimer`]). Everything else is derived from
//! those.

pub mod interim;
mod read;

use crate::connection::{Connection, IoTrace};
use crate::limits::{show_bytes, HeldBytes, ResponseLimits};
use crate::rx_stamp::{Role, RxTimer, Stamp};
use crate::secrets::Secrets;
use bytes::Bytes;
use canary_core::{
    ChunkGaps, ErrorKind, MonoTime, RequestError, RxTiming, ServerTimings, Usage, UserspaceTimes,
};
use http_body_util::Full;
pub(crate) use read::TypeNote;
use read::{
    body_start, content_coding, drain, error_body, not_sse, read_stream, read_whole, redirect,
    DRAIN_LIMIT, ERROR_BODY_WAIT,
};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How soon after its send a request's connection may fail without a byte of response and
/// still count as closed idle by the server, its close racing the request
/// ([`Measurement::unanswered`]): such a close shows within a round trip. Generous for long
/// paths and a loaded client; a server that held the request longer had read it, and its
/// drop is a failure.
const IDLE_CLOSE_RACE: Duration = Duration::from_millis(500);

/// How the error of a request its connection closed before sending begins (here, and where
/// a request held for its release is withdrawn: `run/send/held.rs`, which says it once).
pub(crate) const CLOSED_UNSENT: &str = "connection closed before the request was sent";

/// What the client saw of one exchange. Each response time is a [`Stamp`]: the kernel's
/// receive time where the socket gave one, and canaryd's read.
#[derive(Debug, Default)]
pub struct Measurement {
    /// Request handed to the connection.
    pub sent: MonoTime,
    /// Response head parsed.
    pub head: Option<Stamp>,
    /// First token (output or reasoning).
    pub first_token: Option<Stamp>,
    /// Second token.
    pub second_token: Option<Stamp>,
    /// First output (non-reasoning) token.
    pub first_output: Option<Stamp>,
    /// Response complete (`[DONE]`, the body's end), or reading stopped at an error (a read
    /// only; after a failing `finish_reason`, once the usage after it was read for).
    pub end: Stamp,
    /// Token-bearing chunks.
    pub chunks: u32,
    /// Gaps between consecutive token-bearing chunks (ms), in bounded memory.
    pub gaps: Gaps,
    /// How the times were taken, when the connection had kernel receive timestamps on
    /// (`userspace` is left for the record to fill).
    pub rx: Option<RxTiming>,
    /// Server-reported usage.
    pub usage: Option<Usage>,
    /// Server-reported timings.
    pub timings: Option<ServerTimings>,
    /// Set when the exchange failed.
    pub error: Option<RequestError>,
    /// The response was read to its very end, so the connection can carry another request.
    pub reusable: bool,
    /// The connection failed before a byte of response, the request unsent or within
    /// [`IDLE_CLOSE_RACE`] of its send: on a reused connection this is a server that closed
    /// it while idle, and the request never reached the server.
    pub unanswered: bool,
    /// The client closed it on purpose ([`ReadLimits::cancel_after`]) before it completed or
    /// failed.
    pub cancelled: bool,
}

/// One request's inter-chunk gaps on both clocks.
#[derive(Debug, Default)]
pub struct Gaps {
    /// Between the kernel's receive times, where stamped (else canaryd's reads): what the
    /// run's statistics use.
    pub at: ChunkGaps,
    /// Between canaryd's reads: what joins of canaryd's own reads (eBPF) use.
    pub read: ChunkGaps,
}

/// A copy of `r` for a second attempt (the body is reference-counted, so this is cheap).
pub fn duplicate(r: &http::Request<Full<Bytes>>) -> http::Request<Full<Bytes>> {
    let mut copy = http::Request::new(r.body().clone());
    *copy.method_mut() = r.method().clone();
    *copy.uri_mut() = r.uri().clone();
    *copy.version_mut() = r.version();
    *copy.headers_mut() = r.headers().clone();
    copy
}

/// The error of an exchange the hard stop ended (the grace period after a stop ran out).
pub(crate) fn grace_over() -> RequestError {
    error(ErrorKind::Cancelled, "run stopped; grace period over")
}

fn error(kind: ErrorKind, message: impl Into<String>) -> RequestError {
    RequestError {
        kind,
        http_status: None,
        message: message.into(),
    }
}

/// How much of one response may be read: the target's caps, and the token chunks this
/// request may stream.
#[derive(Debug, Clone)]
pub struct ReadLimits {
    /// The target's caps.
    pub caps: ResponseLimits,
    /// The run's budget of bytes all responses in flight hold ([`ResponseLimits::held_bytes`]).
    pub held: Arc<HeldBytes>,
    /// Token-bearing chunks read at most ([`ResponseLimits::max_output_chunks`]).
    pub max_chunks: u64,
    /// The `max_tokens` asked for, for the message.
    pub max_tokens: Option<u32>,
    /// Close the exchange this long after sending, keeping what arrived (a cancelled
    /// request); `None`: read it to its end.
    pub cancel_after: Option<Duration>,
    /// The run's secrets: a server's text is scrubbed of them before a message cuts it or
    /// adds words after it.
    pub secrets: Arc<Secrets>,
}

/// Sends `request` on `conn` and reads the whole response, never failing: errors are part
/// of the measurement. `deadline` bounds the whole exchange, `limits` what it may hold.
/// `held_until`: the connection's gate is armed and the release thread writes the request at
/// that deadline; the send time is then the gate's (the first byte's write).
pub async fn exchange(
    conn: &mut Connection,
    mut request: http::Request<Full<Bytes>>,
    streaming: bool,
    deadline: tokio::time::Instant,
    limits: &ReadLimits,
    held_until: Option<MonoTime>,
    hard_stop: &CancellationToken,
) -> Measurement {
    let mut rx = RxTimer::start(conn.io.rx.clone());
    let now = MonoTime::now();
    // Until the gate says when it went: not before its deadline.
    let expected = held_until.map_or(now, |at| at.max(now));
    let mut m = Measurement {
        sent: expected,
        ..Default::default()
    };
    rx.sent(m.sent);
    let gate = held_until.map(|_| conn.gate.clone());
    let sent_at = |fallback: MonoTime| {
        gate.as_ref()
            .map_or(fallback, |g| g.sent_at().unwrap_or(fallback))
    };
    // A reused connection has read earlier responses: only what comes after counts here.
    let read_before = conn.io.bytes_read();
    let interim = interim::watch(&mut request);
    // A `-H accept-encoding` asks for a coding; canaryd itself never does.
    let asked_coding = request
        .headers()
        .contains_key(http::header::ACCEPT_ENCODING);
    let run = async {
        // Past the cap the response's future is dropped: hyper closes the connection.
        // The cap first: a flood and its final answer read in one go are both ready at once.
        let sent = tokio::select! {
            biased;
            () = interim.over_cap() => {
                return Err(error(
                    ErrorKind::Protocol,
                    format!("over {} interim (1xx) responses", interim::MAX_INTERIM),
                ))
            }
            r = conn.sender.send_request(request) => r,
        };
        let response = match sent {
            Ok(response) => response,
            Err(e) => {
                let answered = conn.io.bytes_read() > read_before;
                // Nothing of a response came, and the request never went out or the failure
                // came right after it: on a reused connection, the server closed it idle, its
                // close racing the request. Later, the server read the request and dropped it.
                let unsent =
                    e.is_canceled() || gate.as_ref().is_some_and(|g| g.sent_at().is_none());
                let soon = MonoTime::now().since(sent_at(m.sent)) <= IDLE_CLOSE_RACE;
                m.unanswered = !answered && (unsent || soon);
                return Err(if e.is_canceled() {
                    // hyper cancels a request only before writing any of it: the connection was
                    // closed before it could carry the request, so nothing reached the server.
                    // Why it closed is in the cancel when the request was queued on it, else
                    // only in the connection's own end (a TLS 1.3 server's refusal that came
                    // before the request did).
                    let ended = match tls_failure(&e) {
                        Some(_) => None,
                        None => conn.ended.cause().await,
                    };
                    error(
                        ErrorKind::Connect,
                        format!("{CLOSED_UNSENT}: {}", closed_because(&e, ended.as_deref())),
                    )
                } else if e.is_parse_too_large() {
                    error(
                        ErrorKind::ResponseTooLarge,
                        format!(
                            "response head over {} or 100 headers (max_header_bytes)",
                            show_bytes(limits.caps.header_bytes)
                        ),
                    )
                } else if let Some(tls) = tls_failure(&e) {
                    // TLS 1.3: the client's handshake ends before the server has checked its
                    // certificate, so a server requiring one says so at the first read.
                    error(ErrorKind::Connect, format!("TLS handshake: {tls}"))
                } else if let Some(tls) = refused_by(&e, conn, answered).await {
                    error(ErrorKind::Connect, format!("TLS handshake: {tls}"))
                } else {
                    classify_hyper(&e, head_failure(&e, &conn.io, answered))
                });
            }
        };
        let read = MonoTime::now();
        if gate.as_ref().is_some_and(|g| g.sent_at().is_none()) {
            // The gate holds the request until its time while telling hyper it was written,
            // so hyper reads on: a response parsed before any byte of the request reached
            // the socket answers something else (the gate's lock orders the two).
            return Err(error(
                ErrorKind::Protocol,
                format!(
                    "a response ({}) came before the request was sent",
                    response.status()
                ),
            ));
        }
        m.sent = sent_at(m.sent);
        rx.sent(m.sent);
        let head = Role {
            head: true,
            ..Role::default()
        };
        let last = rx.bytes();
        m.head = Some(rx.event(last, read, head, false));
        let status = response.status();
        let coding = content_coding(response.headers(), &limits.secrets);
        let (parts, mut body) = response.into_parts();
        let headers = parts.headers;
        if let Some(coding) = coding {
            // canaryd asks for no coding, but a `-H accept-encoding` or a proxy may bring one:
            // compressed bytes would read as a cut or malformed stream.
            return Err(match status.is_success() {
                true => error(
                    ErrorKind::Protocol,
                    format!(
                        "response body in Content-Encoding {coding:?}, which canaryd does not \
                         decode ({})",
                        match asked_coding {
                            true => "the request's accept-encoding header asked for a coding",
                            false => "not asked for: the request sent no accept-encoding",
                        }
                    ),
                ),
                false => RequestError {
                    kind: ErrorKind::HttpStatus,
                    http_status: Some(status.as_u16()),
                    message: format!("error body in Content-Encoding {coding:?}, not read"),
                },
            });
        }
        // Its own bound, within the request's: a body that never completes would end at
        // the deadline as a timeout, the status lost.
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if let Some(to) = redirect(&headers, &limits.secrets).filter(|_| status.is_redirection()) {
            return Err(RequestError {
                kind: ErrorKind::HttpStatus,
                http_status: Some(status.as_u16()),
                message: to,
            });
        }
        if !status.is_success() {
            return Err(RequestError {
                kind: ErrorKind::HttpStatus,
                http_status: Some(status.as_u16()),
                message: error_body(&mut body, ERROR_BODY_WAIT.min(left), &limits.secrets).await,
            });
        }
        if streaming {
            let not_sse = not_sse(&headers, &limits.secrets);
            if let Some(t) = not_sse.as_ref().filter(|t| t.document) {
                // A proxy's login or error page: a document, never a stream.
                let start = body_start(&mut body, ERROR_BODY_WAIT.min(left), &limits.secrets);
                return Err(error(
                    ErrorKind::Protocol,
                    format!(
                        "not an SSE stream: {} (not text/event-stream), {}",
                        t.shown,
                        start.await
                    ),
                ));
            }
            if let Some(t) = &not_sse {
                conn.types.note(t);
            }
            // Done at [DONE]: the body's end is read after the exchange's own deadlines.
            read_stream(
                &mut body,
                &mut m,
                &mut rx,
                limits,
                deadline,
                not_sse.as_ref(),
            )
            .await?;
            Ok(Some(body))
        } else {
            let declared = hyper::body::Body::size_hint(&body).exact();
            read_whole(&mut body, &mut m, &mut rx, limits, declared).await?;
            Ok(None)
        }
    };
    // What the deadline left this exchange, for the message: the cause, not only the kind.
    let start = tokio::time::Instant::now() + expected.since(now);
    let budget = deadline.saturating_duration_since(start);
    let cancel_at = limits.cancel_after.map(|d| start + d);
    let cancel = async {
        match cancel_at {
            Some(at) if at < deadline => tokio::time::sleep_until(at).await,
            _ => std::future::pending().await,
        }
    };
    let result = tokio::select! {
        r = tokio::time::timeout_at(deadline, run) => match r {
            Ok(r) => r,
            // A failure the stream said before the deadline stands (the deadline cut the read
            // on for its usage, `read::read_stream`).
            Err(_) => Err(m.error.take().unwrap_or_else(|| {
                error(
                    ErrorKind::Timeout,
                    format!(
                        "no complete response within {:.0} ms of sending (request timeout)",
                        budget.as_secs_f64() * 1e3
                    ),
                )
            })),
        },
        () = cancel => {
            // The response is dropped unread: the connection cannot carry another request,
            // and closing it is the disconnect the server must see.
            m.end = Stamp::read(MonoTime::now());
            m.sent = sent_at(m.sent);
            // Unless the stream had failed before it (its error stands).
            m.cancelled = m.error.is_none();
            m.reusable = false;
            // What arrived before the cancel keeps its receive-time labels.
            m.rx = rx.finish(UserspaceTimes::default());
            return m;
        }
        () = hard_stop.cancelled() => {
            // The run's grace period is over: what arrived stays measured (its send time,
            // head, tokens), the rest is not waited for.
            m.end = Stamp::read(MonoTime::now());
            m.sent = sent_at(m.sent.min(m.end.read));
            // A failure the stream said before the stop stands.
            m.error = Some(m.error.take().unwrap_or_else(grace_over));
            m.reusable = false;
            m.rx = rx.finish(UserspaceTimes::default());
            return m;
        }
    };
    let (result, rest) = match result {
        Ok(rest) => (Ok(()), rest),
        Err(e) => (Err(e), None),
    };
    m.end = match (&result, m.end) {
        (Ok(()), end) if end != Stamp::default() => end,
        _ => Stamp::read(MonoTime::now()),
    };
    m.error = result.and_then(|()| generated(&m)).err();
    if let Some(mut body) = rest {
        // Read past [DONE] to the end of the body (the chunked terminator): a body dropped
        // early makes hyper close the connection, and a request racing that close on a
        // pooled connection would fail with a reset. Bounded, so a server that never ends
        // its body only costs the connection; after the request's deadlines, so a [DONE]
        // near one is not lost to it.
        m.reusable = tokio::select! {
            r = tokio::time::timeout(DRAIN_LIMIT, drain(&mut body)) => r.unwrap_or(false),
            () = hard_stop.cancelled() => false,
        };
    }
    if m.head.is_none() {
        // Failed before a response head: sent when the gate wrote it, else (never written)
        // no later than the failure.
        m.sent = sent_at(m.sent.min(m.end.read));
    }
    m.rx = rx.finish(UserspaceTimes::default());
    m
}

/// A response that ended well is a completion only when it generated something: a token
/// chunk, or a usage that counts completion tokens (a model that stopped at once streams no
/// text, but its end-of-sequence token is counted).
fn generated(m: &Measurement) -> Result<(), RequestError> {
    let counted = m.usage.as_ref().and_then(|u| u.completion_tokens);
    if m.chunks > 0 || counted.is_some_and(|n| n > 0) {
        return Ok(());
    }
    Err(error(
        ErrorKind::EmptyResponse,
        "the response ended without a token, and its usage counts no completion tokens",
    ))
}

/// Where a request failed before its response head: the socket and hyper's error say
/// whether it was writing the request, or waiting for or reading the answer. `answered`:
/// bytes of a response came.
fn head_failure(e: &hyper::Error, io: &IoTrace, answered: bool) -> &'static str {
    if answered || e.is_parse() {
        "reading the response head"
    } else if io.write_failed() || e.is_body_write_aborted() {
        "sending the request"
    } else if io.read_failed() || e.is_incomplete_message() {
        // Closed or reset before a byte of response.
        "waiting for the response"
    } else {
        "before the response head"
    }
}

/// Why a connection closed before carrying a request hyper `canceled`: the server's TLS
/// alert, else the connection's own error (`ended`, when it failed), else what hyper says.
fn closed_because(canceled: &hyper::Error, ended: Option<&ConnError>) -> String {
    let tls = tls_failure(canceled).or_else(|| ended.and_then(|e| canary_tls::explain_chain(e)));
    match (tls, ended) {
        (Some(tls), _) => format!("TLS handshake: {tls}"),
        (None, Some(e)) => chain(e),
        (None, None) => chain(canceled),
    }
}

/// What a server that refused a request's write by closing the connection (`e` a broken pipe
/// or reset, before any byte of response) said before it closed: a TLS 1.3 server's refusal
/// of the client's certificate comes after the handshake, and can reach the socket just
/// before the request does ([`crate::connection::Ended`]).
async fn refused_by(e: &hyper::Error, conn: &mut Connection, answered: bool) -> Option<String> {
    if answered || !conn.io.write_failed() || tls_failure(e).is_some() {
        return None;
    }
    canary_tls::explain_chain(conn.ended.cause().await?.as_ref())
}

/// An error and what it holds.
type ConnError = dyn std::error::Error + Send + Sync + 'static;

/// `e` and its sources, joined.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut said = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        said.push_str(": ");
        said.push_str(&s.to_string());
        source = s.source();
    }
    said
}

/// rustls' error in `e`'s chain (an alert the server sent), in plain words.
fn tls_failure(e: &hyper::Error) -> Option<String> {
    std::error::Error::source(e).and_then(canary_tls::explain_chain)
}

fn classify_hyper(e: &hyper::Error, doing: &str) -> RequestError {
    // A closed or reset connection while the response was in flight is a cut stream; hyper's
    // error chain carries the io cause (a TLS error said in plain words). Bytes that are not
    // HTTP/1.1 (no status line, a bad Content-Length, a bad chunk size) are the server's
    // protocol failure, not a cut.
    let mut msg = e.to_string();
    let mut kind = match e.is_parse() {
        true => ErrorKind::Protocol,
        false => ErrorKind::StreamCut,
    };
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        msg.push_str(": ");
        match canary_tls::explain_error(s) {
            Some(said) => {
                msg.push_str(&said);
                kind = ErrorKind::StreamCut;
                break;
            }
            None => msg.push_str(&s.to_string()),
        }
        if malformed_body(s) {
            kind = ErrorKind::Protocol;
        }
        source = s.source();
    }
    error(kind, format!("{doing}: {msg}"))
}

/// hyper's body decoder says a framing it cannot read (a chunk size that is not hex or
/// overflows, bad trailers) with an io error of these kinds; the socket's own failures
/// (reset, broken pipe) and an end before the message's length (`UnexpectedEof`) are others.
fn malformed_body(e: &(dyn std::error::Error + 'static)) -> bool {
    e.downcast_ref::<std::io::Error>().is_some_and(|io| {
        matches!(
            io.kind(),
            std::io::ErrorKind::InvalidData | std::io::ErrorKind::InvalidInput
        )
    })
}

#[cfg(test)]
mod tests;

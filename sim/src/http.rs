//! A small HTTP/1.1 server side: request heads and bodies in, raw response bytes out.
//!
//! The sim writes its responses straight to the socket rather than through hyper so that (a) the
//! ground-truth write times are the times the bytes entered the kernel, and (b) faults can do
//! what a library would not allow: trickle a response head, reset mid-body, stop without the
//! terminating chunk. Supported: keep-alive, pipelining, `Content-Length` bodies,
//! `Expect: 100-continue`. Not supported: chunked request bodies (answered with 411).

use std::fmt::Write as _;

use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};
use canary_core::MonoTime;
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::link::DelayLine;
use crate::wire_arrival::ReadStamps;

/// Largest request head, its closing blank line included.
const MAX_HEAD: usize = 64 * 1024;
/// A connection's input buffer to begin with.
const BUF_CAPACITY: usize = 16 * 1024;
/// The most input buffer a connection keeps once a request's body has been taken (a body is
/// read into its own buffer, but a head may grow the input buffer to [`MAX_HEAD`] and more),
/// so that a kept-alive connection does not hold its largest request for its life.
const KEPT_CAPACITY: usize = 2 * MAX_HEAD;
/// Once a head's first byte is in, the rest of the head must come within this; before it, the
/// idle timeout ([`Timeouts::idle`]) applies.
pub(crate) const HEAD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// Default of [`Timeouts::idle`]: long enough for a trace's pauses on a kept-alive connection
/// (vLLM's uvicorn closes after 5 s; clients reconnect).
pub(crate) const IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);
/// Default of [`Timeouts::write`].
pub(crate) const WRITE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);
/// A body must be in within this of its head.
pub(crate) const BODY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);
/// After an answer sent without reading the request's body, how long the sim goes on reading
/// and dropping what comes of it before it closes.
pub(crate) const LINGER: std::time::Duration = std::time::Duration::from_secs(10);
/// Largest accepted body of a generation request (a 126k-token Mooncake prompt is about
/// 600 KB).
pub(crate) const MAX_BODY: usize = 64 * 1024 * 1024;
/// Default of the bytes of request bodies held at once over all connections ([`BodyBudget`]):
/// four bodies of [`MAX_BODY`]. Without it, 16,384 connections of 64 MiB each could make the
/// sim hold a terabyte.
pub const BODY_BUDGET: usize = 4 * MAX_BODY;
/// A body's buffer grows by at least this much (or to its end): a 64 MiB body takes about ten
/// allocations rather than one per read.
const BODY_STEP: usize = 64 * 1024;
/// Largest accepted body of any other request: none takes more than a small JSON, and most are
/// open without the API key, so they must not let anyone make the sim buffer [`MAX_BODY`].
pub(crate) const MAX_OTHER_BODY: usize = 64 * 1024;

/// A parsed request head.
#[derive(Debug, Clone, Default)]
pub(crate) struct RequestHead {
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    /// Lower-cased names.
    pub headers: Vec<(String, String)>,
    pub content_length: usize,
    pub keep_alive: bool,
    /// An HTTP/1.0 request: its reply must not be chunked (RFC 9112 §6.1).
    pub http10: bool,
    pub expect_continue: bool,
    pub chunked: bool,
}

impl RequestHead {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Why a request could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    #[error("connection error: {0}")]
    Io(#[from] std::io::Error),
    #[error("connection closed mid-request")]
    Truncated,
    #[error("bad request: {0}")]
    Bad(String),
    #[error("{0}")]
    Status(u16, String),
    /// The client started a request and stopped sending it.
    #[error("request not completed within {0:?}")]
    Timeout(std::time::Duration),
}

/// How long a connection waits on its client besides the head and body limits: without them
/// a client that connects and sends nothing, or stops reading a response, holds a connection
/// task (and a slot of the 16,384) for ever.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Timeouts {
    /// With no request under way (before the first, or between two), the connection closes
    /// after this long without a byte; `None`: never.
    pub idle: Option<std::time::Duration>,
    /// A write of a response that makes no progress for this long (the client stopped
    /// reading and the socket's buffers are full) fails, and the connection closes.
    pub write: std::time::Duration,
}

/// One accepted connection: the socket plus unread input.
pub(crate) struct Conn {
    pub stream: TcpStream,
    pub buf: BytesMut,
    /// A slow link for the response in progress (the `net_delay_ms` fault).
    pub link: Option<DelayLine>,
    /// With kernel receive stamps on: each read's stamp, by the bytes it brought.
    stamps: Option<ReadStamps>,
    timeouts: Timeouts,
}

/// A request head as read: the head, when the sim had read and parsed it, and the kernel's
/// receive stamp (`CLOCK_REALTIME` ns) of the read that brought its first byte.
pub(crate) struct HeadRead {
    pub head: RequestHead,
    pub parsed: MonoTime,
    pub first_byte_realtime_ns: Option<u64>,
}

impl Conn {
    /// A connection; `stamped`: its socket has kernel receive stamps on, and reads take them.
    pub fn new(stream: TcpStream, stamped: bool, timeouts: Timeouts) -> Conn {
        Conn {
            stream,
            buf: BytesMut::with_capacity(BUF_CAPACITY),
            link: None,
            stamps: stamped.then(ReadStamps::default),
            timeouts,
        }
    }

    /// Writes all of `bytes` to the socket; a write that makes no progress for the write
    /// timeout fails with `TimedOut`.
    pub async fn write_all(&mut self, mut bytes: &[u8]) -> std::io::Result<()> {
        let limit = self.timeouts.write;
        while !bytes.is_empty() {
            let n = match tokio::time::timeout(limit, self.stream.write(bytes)).await {
                Ok(written) => written?,
                Err(_) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("the client read nothing for {limit:?}; write given up"),
                    ))
                }
            };
            if n == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            bytes = &bytes[n..];
        }
        Ok(())
    }

    /// Reads more input into the buffer: one `read`, or with stamps on one `recvmsg` whose
    /// stamp is noted. 0 at the end of the stream. Cancel-safe (a read either completes within
    /// one poll or has taken nothing).
    async fn fill(&mut self) -> std::io::Result<usize> {
        let Some(stamps) = &mut self.stamps else {
            return self.stream.read_buf(&mut self.buf).await;
        };
        if self.buf.len() == self.buf.capacity() {
            // As tokio's `read_buf` does for a full BytesMut (it reclaims consumed space first).
            self.buf.reserve(64);
        }
        let before = self.buf.len();
        let stream = &self.stream;
        let mut rb = ReadBuf::uninit(self.buf.spare_capacity_mut());
        let got = std::future::poll_fn(|cx| canary_rxstamp::poll_recv(stream, cx, &mut rb)).await?;
        // SAFETY: `poll_recv` initialized the first `got.n` bytes of the spare capacity.
        unsafe { self.buf.set_len(before + got.n) };
        stamps.note(before, got.n, got.realtime_ns);
        Ok(got.n)
    }

    /// [`Conn::fill`], given up at `deadline` (`limit` after the request began) when there is
    /// one.
    async fn fill_before(
        &mut self,
        deadline: Option<tokio::time::Instant>,
        limit: std::time::Duration,
    ) -> Result<usize, ReadError> {
        match deadline {
            None => Ok(self.fill().await?),
            Some(at) => match tokio::time::timeout_at(at, self.fill()).await {
                Ok(read) => Ok(read?),
                Err(_) => Err(ReadError::Timeout(limit)),
            },
        }
    }

    /// Reads the next request head. `Ok(None)` on a clean close between requests, or when the
    /// client sent nothing for the idle timeout. The time is taken right after the read that
    /// completed the head.
    pub async fn read_head(&mut self) -> Result<Option<HeadRead>, ReadError> {
        let mut scanned = 0;
        let mut deadline = None;
        // Stream offset of the head's first byte (read already, or the next to come).
        let first = self
            .stamps
            .as_ref()
            .map(|s| s.received() - self.buf.len() as u64);
        loop {
            if let Some(end) = find_head_end(&self.buf, scanned) {
                // A head that came whole in one read is held to the same bound as one that
                // came in pieces (which the check below refuses once past it).
                if end + 4 > MAX_HEAD {
                    return Err(ReadError::Status(431, "request head too large".into()));
                }
                let parsed = MonoTime::now();
                let head = parse_head(&self.buf[..end])?;
                self.buf.advance(end + 4);
                let first_byte_realtime_ns =
                    self.stamps.as_ref().zip(first).and_then(|(s, at)| s.at(at));
                return Ok(Some(HeadRead {
                    head,
                    parsed,
                    first_byte_realtime_ns,
                }));
            }
            scanned = self.buf.len().saturating_sub(3);
            if self.buf.len() > MAX_HEAD {
                return Err(ReadError::Status(431, "request head too large".into()));
            }
            if self.buf.is_empty() {
                // Closed without a word: a 408 now could reach a client that has just sent
                // its next request, as that request's answer.
                let read = match self.timeouts.idle {
                    None => self.fill().await?,
                    Some(idle) => match tokio::time::timeout(idle, self.fill()).await {
                        Ok(read) => read?,
                        Err(_) => return Ok(None),
                    },
                };
                if read == 0 {
                    return Ok(None);
                }
                continue;
            }
            deadline.get_or_insert_with(|| tokio::time::Instant::now() + HEAD_TIMEOUT);
            if self.fill_before(deadline, HEAD_TIMEOUT).await? == 0 {
                return Err(ReadError::Truncated);
            }
        }
    }

    /// Reads the body announced by `head`, refused (413) over `max` bytes, or (503) when
    /// holding it would take `budget` past its bound. Memory is taken from `budget` as the
    /// bytes arrive, not when the head announces them, and given back when the body is dropped.
    pub async fn read_body(
        &mut self,
        head: &RequestHead,
        max: usize,
        budget: &BodyBudget,
    ) -> Result<Bytes, ReadError> {
        if head.chunked {
            return Err(ReadError::Status(
                411,
                "chunked request bodies are not supported; send Content-Length".into(),
            ));
        }
        let len = head.content_length;
        if len > max {
            return Err(ReadError::Status(413, "request body too large".into()));
        }
        if len == 0 {
            return Ok(Bytes::new());
        }
        if head.expect_continue && self.buf.len() < len {
            self.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await?;
        }
        // The body goes into its own buffer, grown as its bytes come (doubling, never past
        // `len`): a head announcing 64 MiB costs nothing until the bytes are sent, and the
        // connection's input buffer stays small.
        let mut body: Vec<u8> = Vec::new();
        let mut held: Option<OwnedSemaphorePermit> = None;
        let deadline = Some(tokio::time::Instant::now() + BODY_TIMEOUT);
        loop {
            let take = (len - body.len()).min(self.buf.len());
            if body.capacity() - body.len() < take {
                let cap = (body.capacity() * 2)
                    .max(body.len() + take)
                    .max(BODY_STEP)
                    .min(len);
                budget.take(&mut held, cap - body.capacity())?;
                body.reserve_exact(cap - body.len());
            }
            body.extend_from_slice(&self.buf[..take]);
            self.buf.advance(take);
            if body.len() == len {
                break;
            }
            if self.fill_before(deadline, BODY_TIMEOUT).await? == 0 {
                return Err(ReadError::Truncated);
            }
        }
        if self.buf.capacity() > KEPT_CAPACITY {
            // A pipelined request's start after a long head: do not keep its large buffer.
            let mut rest = BytesMut::with_capacity(BUF_CAPACITY.max(self.buf.len()));
            rest.extend_from_slice(&self.buf);
            self.buf = rest;
        }
        Ok(match held {
            Some(permit) => Bytes::from_owner(Held {
                bytes: body,
                _permit: permit,
            }),
            None => Bytes::from(body),
        })
    }

    /// After an answer sent without reading the body `head` announced, with the write side
    /// shut: reads and drops that body, holding no more of it than one read, until it is all
    /// in, the client closes, or [`LINGER`] has passed. Closing while a client still sends
    /// makes the kernel reset the connection, and the client may then see the reset rather
    /// than the answer (the lingering close of nginx and Go's net/http).
    pub async fn discard_body(&mut self, head: &RequestHead) {
        // A chunked body's end is not looked for: read until the client closes or LINGER.
        let left = if head.chunked {
            usize::MAX
        } else {
            head.content_length
        };
        self.discard(left).await
    }

    /// Reads and drops up to `left` more bytes, one read at a time, until the client closes or
    /// [`LINGER`] has passed (see [`Conn::discard_body`]).
    pub async fn discard(&mut self, mut left: usize) {
        let deadline = Some(tokio::time::Instant::now() + LINGER);
        loop {
            left = left.saturating_sub(self.buf.len());
            self.buf.clear();
            if left == 0 {
                return;
            }
            match self.fill_before(deadline, LINGER).await {
                Ok(n) if n > 0 => {}
                _ => return,
            }
        }
    }

    /// Reads whatever the client sends while a response is in progress (a pipelined request)
    /// into the buffer. Returns false when the client has closed its side or the socket failed.
    pub async fn read_more(&mut self) -> bool {
        if self.buf.len() > MAX_HEAD {
            // Enough to see the client is there; the next request's body is read in its turn.
            std::future::pending::<()>().await;
        }
        matches!(self.fill().await, Ok(n) if n > 0)
    }
}

impl Conn {
    /// What can be made of a head [`Conn::read_head`] refused (not UTF-8, too large, cut
    /// short, not complete in time), still in the buffer: its request line, if that reads,
    /// and whichever of its complete header lines read, so that a refused generation request
    /// can still have its truth record. `None` when even the request line does not read.
    pub fn refused_head(&self) -> Option<RequestHead> {
        let raw = &self.buf[..self.buf.len().min(MAX_HEAD)];
        let raw = find_head_end(raw, 0).map_or(raw, |end| &raw[..end + 2]);
        let mut lines = raw.split_inclusive(|&b| b == b'\n');
        let line = std::str::from_utf8(lines.next()?)
            .ok()?
            .strip_suffix("\r\n")?;
        let mut parts = line.split(' ');
        let (method, target) = match (parts.next(), parts.next()) {
            (Some(m), Some(t)) if !m.is_empty() && t.starts_with('/') => (m, t),
            _ => return None,
        };
        let path = target.split_once('?').map_or(target, |(p, _)| p);
        let mut head = RequestHead {
            method: method.to_owned(),
            path: path.to_owned(),
            ..Default::default()
        };
        // Only whole lines: the last may be cut anywhere.
        let headers = lines.filter_map(|l| std::str::from_utf8(l).ok()?.strip_suffix("\r\n"));
        for (name, value) in headers.filter_map(|l| l.split_once(':')) {
            let name = name.trim().to_ascii_lowercase();
            head.headers.push((name, value.trim().to_owned()));
        }
        Some(head)
    }
}

/// The bytes of request bodies held at once, over all connections: each body takes its share
/// as its bytes arrive, and gives it back when the body is dropped (once parsed). A body that
/// would take the total past the bound is refused with 503: memory stays bounded however many
/// clients send large bodies at once, and the sim goes on serving the others.
#[derive(Debug, Clone)]
pub(crate) struct BodyBudget {
    bytes: Arc<Semaphore>,
    bound: usize,
}

impl BodyBudget {
    pub fn new(bound: usize) -> BodyBudget {
        let bound = bound.min(Semaphore::MAX_PERMITS);
        BodyBudget {
            bytes: Arc::new(Semaphore::new(bound)),
            bound,
        }
    }

    /// Takes `n` more bytes into `held`; a 503 when the budget has not that many left.
    fn take(&self, held: &mut Option<OwnedSemaphorePermit>, n: usize) -> Result<(), ReadError> {
        let refused = || {
            let mib = |b: usize| b as f64 / (1024.0 * 1024.0);
            ReadError::Status(
                503,
                format!(
                    "the simulator already holds {:.1} MiB of request bodies being received or \
                     parsed, and this one would take that past its bound of {:.1} MiB; retry \
                     later",
                    mib(self.bound - self.bytes.available_permits()),
                    mib(self.bound),
                ),
            )
        };
        let n32 = u32::try_from(n).map_err(|_| refused())?;
        let more = self
            .bytes
            .clone()
            .try_acquire_many_owned(n32)
            .map_err(|_| refused())?;
        match held {
            Some(p) => p.merge(more),
            None => *held = Some(more),
        }
        Ok(())
    }
}

/// A body's bytes and its share of the [`BodyBudget`], given back with them.
struct Held {
    bytes: Vec<u8>,
    _permit: OwnedSemaphorePermit,
}

impl AsRef<[u8]> for Held {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

fn find_head_end(buf: &[u8], from: usize) -> Option<usize> {
    buf.get(from..)?
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|p| p + from)
}

fn parse_head(raw: &[u8]) -> Result<RequestHead, ReadError> {
    let text = std::str::from_utf8(raw).map_err(|_| ReadError::Bad("head is not UTF-8".into()))?;
    let mut lines = text.split("\r\n");
    let line = lines.next().unwrap_or_default();
    let mut parts = line.split(' ');
    let (method, target, version) = match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(m), Some(t), Some(v), None) if !m.is_empty() && t.starts_with('/') => (m, t, v),
        _ => return Err(ReadError::Bad(format!("bad request line {line:?}"))),
    };
    let http10 = match version {
        "HTTP/1.1" => false,
        "HTTP/1.0" => true,
        _ => {
            return Err(ReadError::Status(
                505,
                format!("unsupported version {version:?}"),
            ))
        }
    };
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p.to_owned(), Some(q.to_owned())),
        None => (target.to_owned(), None),
    };
    let mut head = RequestHead {
        method: method.to_owned(),
        path,
        query,
        keep_alive: !http10,
        http10,
        ..Default::default()
    };
    let mut seen_length: Option<usize> = None;
    for l in lines {
        let (name, value) = l
            .split_once(':')
            .ok_or_else(|| ReadError::Bad(format!("bad header line {l:?}")))?;
        let name = name.trim().to_ascii_lowercase();
        let value = value.trim().to_owned();
        match name.as_str() {
            "content-length" => {
                let n = value
                    .parse()
                    .map_err(|_| ReadError::Bad(format!("bad content-length {value:?}")))?;
                // Differing lengths: which one frames the body is a guess, and a proxy may
                // guess otherwise (request smuggling); RFC 9112 §6.3 says refuse.
                if seen_length.is_some_and(|seen| seen != n) {
                    return Err(ReadError::Bad(format!(
                        "conflicting content-length headers ({} and {n})",
                        head.content_length
                    )));
                }
                seen_length = Some(n);
                head.content_length = n;
            }
            "connection" => {
                let v = value.to_ascii_lowercase();
                if v.contains("close") {
                    head.keep_alive = false;
                } else if v.contains("keep-alive") {
                    head.keep_alive = true;
                }
            }
            "expect" => head.expect_continue = value.eq_ignore_ascii_case("100-continue"),
            "transfer-encoding" => head.chunked = value.to_ascii_lowercase().contains("chunked"),
            _ => {}
        }
        head.headers.push((name, value));
    }
    Ok(head)
}

/// Standard reason phrases for the statuses the sim sends.
pub(crate) fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        411 => "Length Required",
        413 => "Payload Too Large",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "Unknown",
    }
}

/// A response head. `content_length: None` means a chunked body.
pub(crate) fn response_head(
    status: u16,
    content_type: &str,
    content_length: Option<usize>,
    keep_alive: bool,
    extra: &[(&str, &str)],
) -> Vec<u8> {
    let framing = match content_length {
        Some(n) => Framing::Length(n),
        None => Framing::Chunked,
    };
    framed_head(status, content_type, framing, keep_alive, extra)
}

/// How a response body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    Length(usize),
    Chunked,
    /// Ended by closing the connection: a stream to an HTTP/1.0 client, which must not get
    /// chunked (RFC 9112 §6.1), as uvicorn sends it.
    Close,
}

/// A response head framed as `framing` says (with [`Framing::Close`], `connection: close`
/// whatever `keep_alive` says).
pub(crate) fn framed_head(
    status: u16,
    content_type: &str,
    framing: Framing,
    keep_alive: bool,
    extra: &[(&str, &str)],
) -> Vec<u8> {
    let keep_alive = keep_alive && framing != Framing::Close;
    let mut h = String::with_capacity(256);
    let _ = write!(
        h,
        "HTTP/1.1 {status} {}\r\nserver: canary-sim\r\ncontent-type: {content_type}\r\n",
        reason(status)
    );
    match framing {
        Framing::Length(n) => {
            let _ = write!(h, "content-length: {n}\r\n");
        }
        Framing::Chunked => h.push_str("transfer-encoding: chunked\r\ncache-control: no-cache\r\n"),
        Framing::Close => h.push_str("cache-control: no-cache\r\n"),
    }
    if !keep_alive {
        h.push_str("connection: close\r\n");
    }
    for (k, v) in extra {
        let _ = write!(h, "{k}: {v}\r\n");
    }
    h.push_str("\r\n");
    h.into_bytes()
}

/// Appends `payload` as one HTTP chunk.
pub(crate) fn push_chunk(out: &mut Vec<u8>, payload: &[u8]) {
    if payload.is_empty() {
        return;
    }
    let _ = write!(VecWriter(out), "{:x}\r\n", payload.len());
    out.extend_from_slice(payload);
    out.extend_from_slice(b"\r\n");
}

/// The last chunk of a chunked body.
pub(crate) const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

struct VecWriter<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for VecWriter<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

/// Writes `bytes` and returns the CLOCK_MONOTONIC time right after the write returned (on a
/// slow link, the time the sim produced them; see [`Conn::send`]).
pub(crate) async fn write_timed(conn: &mut Conn, bytes: &[u8]) -> std::io::Result<u64> {
    conn.send(bytes).await
}

/// A complete response in one write.
pub(crate) async fn respond(
    conn: &mut Conn,
    status: u16,
    content_type: &str,
    body: &[u8],
    keep_alive: bool,
    extra: &[(&str, &str)],
) -> std::io::Result<u64> {
    let mut out = response_head(status, content_type, Some(body.len()), keep_alive, extra);
    out.extend_from_slice(body);
    write_timed(conn, &out).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_heads() {
        let h = parse_head(
            b"POST /v1/completions?x=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 12\r\n\
              X-Request-Id: abc\r\nExpect: 100-continue",
        )
        .unwrap();
        assert_eq!(h.method, "POST");
        assert_eq!(h.path, "/v1/completions");
        assert_eq!(h.query.as_deref(), Some("x=1"));
        assert_eq!(h.content_length, 12);
        assert!(h.keep_alive && h.expect_continue);
        assert_eq!(h.header("x-request-id"), Some("abc"));
        let h10 = parse_head(b"GET / HTTP/1.0").unwrap();
        assert!(!h10.keep_alive);
        let close = parse_head(b"GET / HTTP/1.1\r\nConnection: close").unwrap();
        assert!(!close.keep_alive);
        assert!(parse_head(b"GARBAGE").is_err());
        assert!(parse_head(b"GET / HTTP/2").is_err());
        assert!(parse_head(b"GET / HTTP/1.1\r\nno-colon").is_err());
        assert!(parse_head(b"GET / HTTP/1.1\r\ncontent-length: x").is_err());
        // Before, the last of two differing lengths framed the body.
        let two = parse_head(b"POST / HTTP/1.1\r\ncontent-length: 5\r\ncontent-length: 7");
        assert!(
            matches!(&two, Err(ReadError::Bad(m)) if m.contains("conflicting content-length")),
            "{two:?}"
        );
        let same = parse_head(b"POST / HTTP/1.1\r\ncontent-length: 5\r\ncontent-length: 5");
        assert_eq!(same.unwrap().content_length, 5);
        assert!(parse_head(b"GET / HTTP/1.0").unwrap().http10);
    }

    // A kept-alive connection gives back a large body's buffer: before, the read of the next
    // request took the body's whole allocation back (1 MiB here, 64 MiB at most) and the
    // connection held it for its life.
    #[tokio::test]
    async fn a_large_body_leaves_no_large_buffer_behind() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let timeouts = Timeouts {
            idle: None,
            write: WRITE_TIMEOUT,
        };
        let mut conn = Conn::new(listener.accept().await.unwrap().0, false, timeouts);
        let body = vec![b'x'; 1 << 20];
        let head = format!("POST / HTTP/1.1\r\ncontent-length: {}\r\n\r\n", body.len());
        let send = async {
            client.write_all(head.as_bytes()).await.unwrap();
            client.write_all(&body).await.unwrap();
        };
        let read = async {
            let head = conn.read_head().await.unwrap().unwrap().head;
            let budget = BodyBudget::new(BODY_BUDGET);
            conn.read_body(&head, MAX_BODY, &budget).await.unwrap()
        };
        let (_, got) = tokio::join!(send, read);
        assert_eq!(got.len(), body.len());
        drop(got);
        client.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        let next = conn.read_head().await.unwrap().unwrap();
        assert_eq!(next.head.method, "GET");
        assert!(
            conn.buf.capacity() <= KEPT_CAPACITY,
            "{}",
            conn.buf.capacity()
        );
    }

    #[test]
    fn chunk_framing() {
        let mut out = Vec::new();
        push_chunk(&mut out, &[b'a'; 26]);
        push_chunk(&mut out, b"");
        assert_eq!(out, [b"1a\r\n".as_slice(), &[b'a'; 26], b"\r\n"].concat());
        let head = response_head(200, "text/plain", Some(3), false, &[("x-a", "b")]);
        let head = String::from_utf8(head).unwrap();
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"));
        assert!(head.contains("content-length: 3\r\nconnection: close\r\nx-a: b\r\n\r\n"));
        assert_eq!(find_head_end(b"ab\r\n\r\ncd", 0), Some(2));
        assert_eq!(find_head_end(b"ab\r\n\r\ncd", 5), None);
    }
}

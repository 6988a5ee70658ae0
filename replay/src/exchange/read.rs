//! Reading an exchange's response after its head: the stream event by event, a whole body
//! without streaming, an error status's body for its message, the rest of a stream after
//! `[DONE]`, and the check that a body is not compressed. Every read is bounded by the
//! target's caps and the run's held-bytes budget.

use super::{classify_hyper, error, Measurement, ReadLimits};
use crate::chunk::{self, ChunkInfo};
use crate::limits::{show_bytes, Hold, ResponseLimits};
use crate::rx_stamp::{Role, RxTimer, Stamp};
use crate::secrets::Secrets;
use crate::sse::{SseEvent, SseParser};
use canary_core::{ErrorKind, MonoTime, RequestError};
use http_body_util::BodyExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// Bytes of an error response body kept for the error message.
const ERROR_BODY_LIMIT: usize = 4096;

/// Bytes of a malformed chunk quoted in its message.
const SHOWN_CHUNK_BYTES: usize = 120;

/// Bytes of a body that is not an SSE stream quoted in its message, and of a redirect's
/// `Location`.
const SHOWN_BODY_BYTES: usize = 120;

/// A streaming request's answer whose `Content-Type` is not `text/event-stream`.
#[derive(Debug)]
pub(super) struct NotSse {
    /// Its `Content-Type`, quoted and cut short (scrubbed), or that it had none.
    pub shown: String,
    /// A document (HTML: a proxy's login or error page), never an SSE stream: refused at its
    /// head. Other types are read on, since a server may send SSE under a wrong type, and
    /// named when no event came.
    pub document: bool,
}

/// Streams read as SSE under another `Content-Type` (or none), noted once per run and target
/// (its connector's): servers get the type wrong, so they are read, but a type that is not
/// SSE's can as well be a proxy's or another API's answer, which a user should hear of.
#[derive(Debug)]
pub(crate) struct TypeNote {
    /// The target's `host:port`, for the note.
    origin: String,
    /// The first such answer's type, as [`NotSse::shown`] says it.
    first: OnceLock<String>,
    /// How many such answers were read (exact).
    seen: AtomicU64,
}

impl TypeNote {
    /// No such answer yet, from the target at `origin`.
    pub(crate) fn new(origin: String) -> TypeNote {
        TypeNote {
            origin,
            first: OnceLock::new(),
            seen: AtomicU64::new(0),
        }
    }

    /// A stream about to be read under `t`: counted, and said at the first.
    pub(super) fn note(&self, t: &NotSse) {
        self.seen.fetch_add(1, Ordering::Relaxed);
        if self.first.set(t.shown.clone()).is_ok() {
            tracing::warn!(
                "{}: a streaming answer came with {} (not text/event-stream); read as SSE all \
                 the same, and said once per run",
                self.origin,
                t.shown
            );
        }
    }

    /// The first such answer's type, and how many came.
    #[cfg(test)]
    pub(crate) fn noted(&self) -> Option<(&str, u64)> {
        let first = self.first.get()?;
        Some((first.as_str(), self.seen.load(Ordering::Relaxed)))
    }
}

/// The `Content-Type` of a streaming request's answer, when it is not an SSE stream's.
pub(super) fn not_sse(headers: &http::HeaderMap, secrets: &Secrets) -> Option<NotSse> {
    let Some(value) = headers.get(http::header::CONTENT_TYPE) else {
        return Some(NotSse {
            shown: "no Content-Type".to_string(),
            document: false,
        });
    };
    let text = String::from_utf8_lossy(value.as_bytes());
    let media = text
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if media == "text/event-stream" {
        return None;
    }
    Some(NotSse {
        shown: format!(
            "Content-Type {:?}",
            secrets.cut(text.trim(), SHOWN_BODY_BYTES)
        ),
        document: matches!(media.as_str(), "text/html" | "application/xhtml+xml"),
    })
}

/// The message of a redirect (a `Location`), which canaryd never follows: where it pointed.
pub(super) fn redirect(headers: &http::HeaderMap, secrets: &Secrets) -> Option<String> {
    let l = headers.get(http::header::LOCATION)?;
    Some(format!(
        "redirect to {} not followed",
        quote(l.as_bytes(), l.len(), secrets)
    ))
}

/// The first bytes of a body, `start`, of `total` read, quoted: scrubbed, cut short and said
/// to be.
fn quote(start: &[u8], total: usize, secrets: &Secrets) -> String {
    let text = String::from_utf8_lossy(start);
    let shown = secrets.cut(&text, SHOWN_BODY_BYTES);
    match shown.len() < text.len() || total > start.len() {
        true => format!("{shown:?}…"),
        false => format!("{shown:?}"),
    }
}

/// The start of `body`, quoted, read for `wait` at most: for the message of an answer that
/// is not what was asked for.
pub(super) async fn body_start(
    body: &mut hyper::body::Incoming,
    wait: Duration,
    secrets: &Secrets,
) -> String {
    let mut start = Vec::new();
    let mut total = 0;
    let read = async {
        while let Some(Ok(frame)) = body.frame().await {
            if let Some(d) = frame.data_ref() {
                total += d.len();
                start.extend_from_slice(&d[..d.len().min(SHOWN_BODY_BYTES - start.len())]);
            }
            if start.len() >= SHOWN_BODY_BYTES {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(wait, read).await;
    match total {
        0 => "an empty body".to_string(),
        _ => format!("a body starting {}", quote(&start, total, secrets)),
    }
}

/// What a body of `total` bytes that began with `start` was, for a message.
fn said_start(start: &[u8], total: usize, secrets: &Secrets) -> String {
    match total {
        0 => "an empty body".to_string(),
        _ => format!(
            "a body of {total} bytes starting {}",
            quote(start, total, secrets)
        ),
    }
}

/// How long an error status's body is read for its message after the head: servers send it
/// with the head, a few hundred bytes.
pub(super) const ERROR_BODY_WAIT: Duration = Duration::from_secs(1);

/// The error of a response that would take what all responses in flight hold past the run's
/// budget.
fn held_over(limits: &ReadLimits) -> RequestError {
    error(
        ErrorKind::ResponseTooLarge,
        format!(
            "responses in flight would hold over {} together (max_held_bytes)",
            show_bytes(limits.held.limit())
        ),
    )
}

/// How long a stream is read on, at most, after a chunk whose `finish_reason` says the
/// generation failed, for the usage that may follow it: vLLM sends its usage chunk right after
/// the finish chunk when `include_usage` is on, and without it the record counts the tokens
/// the client saw instead of the server's. Short, so a server that stalls there costs its
/// request little; never past the request's deadline.
const USAGE_AFTER_FAILURE_WAIT: Duration = Duration::from_millis(250);

/// Events read at most after a failing `finish_reason`, for the usage: the usage chunk and
/// `[DONE]` come next, a few to spare for servers that send more.
const USAGE_AFTER_FAILURE_EVENTS: u32 = 4;

/// Reads an SSE stream to its `[DONE]`: each event's tokens, usage and errors into `m`,
/// timed; the body's end is left to the caller (read after the exchange's own deadlines).
/// `deadline`: the request's, which the short read on for a usage after a failing
/// `finish_reason` never passes.
pub(super) async fn read_stream(
    body: &mut hyper::body::Incoming,
    m: &mut Measurement,
    rx: &mut RxTimer,
    limits: &ReadLimits,
    deadline: tokio::time::Instant,
    not_sse: Option<&NotSse>,
) -> Result<(), RequestError> {
    let mut parser = SseParser::with_limit(limits.caps.event_bytes);
    let mut hold = limits.held.hold();
    let mut events: Vec<SseEvent> = Vec::new();
    let mut last_token: Option<Stamp> = None;
    // The body's first bytes and its length while no event came: what to say of an answer
    // that was no SSE stream.
    let mut start: Vec<u8> = Vec::new();
    let mut total = 0usize;
    let mut any_event = false;
    loop {
        let Some(frame) = body.frame().await else {
            return Err(match (any_event, not_sse) {
                (false, Some(t)) => error(
                    ErrorKind::Protocol,
                    format!(
                        "not an SSE stream: {} (not text/event-stream) and no event in {}",
                        t.shown,
                        said_start(&start, total, &limits.secrets)
                    ),
                ),
                (false, None) if total > 0 => error(
                    ErrorKind::StreamCut,
                    format!(
                        "stream ended without a complete SSE event, in {}",
                        said_start(&start, total, &limits.secrets)
                    ),
                ),
                _ if m.chunks == 0 => error(
                    ErrorKind::StreamCut,
                    "stream ended before any token and without [DONE]",
                ),
                _ => error(ErrorKind::StreamCut, "stream ended without [DONE]"),
            });
        };
        let frame = frame.map_err(|e| classify_hyper(&e, "reading stream"))?;
        let at = MonoTime::now();
        let Some(data) = frame.data_ref() else {
            continue;
        };
        if !any_event {
            total += data.len();
            let room = SHOWN_BODY_BYTES - start.len();
            start.extend_from_slice(&data[..data.len().min(room)]);
        }
        // Before the parser: the read these bytes came in (or a later one).
        let read = rx.bytes();
        parser.push(data, at, &mut events).map_err(|_| {
            error(
                ErrorKind::ResponseTooLarge,
                format!(
                    "an SSE event over {} (max_event_bytes)",
                    show_bytes(limits.caps.event_bytes)
                ),
            )
        })?;
        if !hold.set(parser.held()) {
            return Err(held_over(limits));
        }
        any_event |= !events.is_empty();
        // Every event this piece completed but the last is followed by more of it; the last
        // too when the piece holds the start of the next event.
        let n = events.len();
        let partial = parser.has_partial_event();
        let mut piece = events.drain(..).enumerate();
        while let Some((i, ev)) = piece.next() {
            let more_after = i + 1 < n || partial;
            // Whatever its data holds (an `error` key or not): the server says it failed.
            if ev.event.as_deref() == Some("error") {
                let message = chunk::error_event_message(&ev.data);
                return Err(error(ErrorKind::ServerError, message));
            }
            if ev.data == "[DONE]" {
                let end = Role {
                    end: true,
                    ..Role::default()
                };
                m.end = rx.event(read, ev.at, end, more_after);
                return Ok(());
            }
            let info: ChunkInfo = chunk::parse(&ev.data).map_err(|e| {
                let secrets = &limits.secrets;
                let shown = secrets.cut(&ev.data, SHOWN_CHUNK_BYTES);
                let why = chunk::reason(&e, secrets);
                error(
                    ErrorKind::MalformedChunk,
                    format!("chunk {}: {why}: {shown}", m.chunks + 1),
                )
            })?;
            if let Some(msg) = info.error {
                return Err(error(ErrorKind::ServerError, msg));
            }
            let role = Role {
                token: info.has_token(),
                first_token: info.has_token() && m.chunks == 0,
                ..Role::default()
            };
            let at = rx.event(read, ev.at, role, more_after);
            absorb(m, &info, at, &mut last_token, limits)?;
            if let Err(failed) = failed_finish(&info) {
                // The request failed here, whatever comes next; known in `m` now, so the
                // deadline cutting the read on below leaves it standing.
                m.error = Some(failed.clone());
                let rest: Vec<SseEvent> = piece.map(|(_, ev)| ev).collect();
                let until = (tokio::time::Instant::now() + USAGE_AFTER_FAILURE_WAIT).min(deadline);
                let most = ResponseLimits::max_bare_lines(limits.max_chunks);
                let read_on = usage_after_failure(body, &mut parser, &mut hold, rest, m, rx, most);
                let _ = tokio::time::timeout_at(until, read_on).await;
                return Err(failed);
            }
        }
        // After this read's events, so what they carried is kept.
        let most = ResponseLimits::max_bare_lines(limits.max_chunks);
        if parser.bare_lines() > most {
            return Err(error(
                ErrorKind::ResponseTooLong,
                format!(
                    "over {most} SSE events, comments and fields{} (max_output_ratio)",
                    for_max_tokens(limits)
                ),
            ));
        }
    }
}

/// Reads on after a chunk whose `finish_reason` said the generation failed, for the usage
/// (and llama.cpp's `timings`) the server may still send: `rest`, the events that came in the
/// failing chunk's read after it, then the body, until a chunk carries a usage, `[DONE]`, the
/// body's end, anything amiss (an error, a malformed chunk, a cap), or
/// [`USAGE_AFTER_FAILURE_EVENTS`] events; the caller bounds it in time. The request has
/// failed already: tokens that still come are not counted, and nothing here changes its error.
async fn usage_after_failure(
    body: &mut hyper::body::Incoming,
    parser: &mut SseParser,
    hold: &mut Hold,
    rest: Vec<SseEvent>,
    m: &mut Measurement,
    rx: &mut RxTimer,
    most_bare_lines: u64,
) {
    let mut events = rest;
    let mut left = USAGE_AFTER_FAILURE_EVENTS;
    loop {
        for ev in events.drain(..) {
            if left == 0 || ev.event.as_deref() == Some("error") || ev.data == "[DONE]" {
                return;
            }
            left -= 1;
            let Ok(info) = chunk::parse(&ev.data) else {
                return;
            };
            if info.timings.is_some() {
                m.timings = info.timings;
            }
            if info.usage.is_some() {
                m.usage = info.usage;
                return;
            }
        }
        let Some(Ok(frame)) = body.frame().await else {
            return;
        };
        let Some(data) = frame.data_ref() else {
            continue;
        };
        // Later bytes of the failing chunk's read make its time a bound, as in the stream.
        rx.bytes();
        let pushed = parser.push(data, MonoTime::now(), &mut events);
        if pushed.is_err() || !hold.set(parser.held()) || parser.bare_lines() > most_bare_lines {
            return;
        }
    }
}

/// What the chunk caps were derived from, for their messages.
fn for_max_tokens(limits: &ReadLimits) -> String {
    match limits.max_tokens {
        Some(n) => format!(" for max_tokens {n}"),
        None => " with no max_tokens sent".to_string(),
    }
}

/// The message of an error status's `body`: its error's, else its text; from the first
/// [`ERROR_BODY_LIMIT`] bytes, read for `wait` at most, and said to be cut when it did not end.
/// Without `secrets`, scrubbed before anything is said after it: a body cut short can end
/// inside a key, and the words after it would hide that start of the key from the scrub of
/// the whole message.
pub(super) async fn error_body(
    body: &mut hyper::body::Incoming,
    wait: Duration,
    secrets: &Secrets,
) -> String {
    let mut text = Vec::new();
    let read = async {
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else {
                return Some("the connection closed".to_string());
            };
            if let Some(d) = frame.data_ref() {
                text.extend_from_slice(&d[..d.len().min(ERROR_BODY_LIMIT - text.len())]);
            }
            if text.len() >= ERROR_BODY_LIMIT {
                break;
            }
        }
        None
    };
    let cut = tokio::time::timeout(wait, read).await.unwrap_or_else(|_| {
        Some(format!(
            "not complete {} ms after the head",
            wait.as_millis()
        ))
    });
    let text = String::from_utf8_lossy(&text);
    let message = chunk::error_in_body(&text).unwrap_or_else(|| text.trim().to_string());
    let message = secrets.clean(&message);
    match cut {
        Some(why) => format!("{message} (error body cut short: {why})"),
        None => message.into_owned(),
    }
}

/// A response's `Content-Encoding`, if it names a coding that compresses (cut short and
/// without `secrets`: the server's words go into the message). Others are taken as identity:
/// relays write `none` to keep compression middleware from buffering a stream, and the body
/// is then plain.
pub(super) fn content_coding(headers: &http::HeaderMap, secrets: &Secrets) -> Option<String> {
    const COMPRESSING: [&[u8]; 7] = [
        b"gzip",
        b"x-gzip",
        b"deflate",
        b"br",
        b"zstd",
        b"compress",
        b"x-compress",
    ];
    let values = headers.get_all(http::header::CONTENT_ENCODING);
    let compressed = values
        .iter()
        .flat_map(|v| v.as_bytes().split(|&b| b == b','))
        .map(<[u8]>::trim_ascii)
        .any(|c| COMPRESSING.iter().any(|z| c.eq_ignore_ascii_case(z)));
    if !compressed {
        return None;
    }
    let shown: Vec<_> = values
        .iter()
        .map(|v| String::from_utf8_lossy(v.as_bytes()))
        .collect();
    Some(secrets.cut(shown.join(", ").trim(), 100))
}

/// How long to wait for the end of a body after `[DONE]`.
pub(super) const DRAIN_LIMIT: Duration = Duration::from_millis(250);

/// Reads a body to its end; true when it ended cleanly with nothing but framing left.
pub(super) async fn drain(body: &mut hyper::body::Incoming) -> bool {
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(f)
                if f.data_ref()
                    .is_some_and(|d| !d.iter().all(u8::is_ascii_whitespace)) =>
            {
                return false
            }
            Ok(_) => {}
            Err(_) => return false,
        }
    }
    true
}

pub(super) async fn read_whole(
    body: &mut hyper::body::Incoming,
    m: &mut Measurement,
    rx: &mut RxTimer,
    limits: &ReadLimits,
    declared: Option<u64>,
) -> Result<(), RequestError> {
    let cap = limits.caps.body_bytes;
    let too_large = |what: String| {
        error(
            ErrorKind::ResponseTooLarge,
            format!("{what}, over {} (max_body_bytes)", show_bytes(cap)),
        )
    };
    if let Some(n) = declared.filter(|&n| n > cap as u64) {
        // Refused before a byte of it is read.
        return Err(too_large(format!(
            "response body of {n} bytes (Content-Length)"
        )));
    }
    let mut buf = Vec::new();
    let mut hold = limits.held.hold();
    let mut read = rx.bytes();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| classify_hyper(&e, "reading body"))?;
        if let Some(d) = frame.data_ref() {
            if buf.len() + d.len() > cap {
                return Err(too_large("response body".to_string()));
            }
            if !hold.set(buf.len() + d.len()) {
                return Err(held_over(limits));
            }
            buf.extend_from_slice(d);
            read = rx.bytes();
        }
    }
    let at = MonoTime::now();
    let text = String::from_utf8_lossy(&buf);
    let info = chunk::parse(&text).map_err(|e| {
        let why = chunk::reason(&e, &limits.secrets);
        error(ErrorKind::MalformedChunk, format!("response body: {why}"))
    })?;
    if let Some(msg) = info.error {
        return Err(error(ErrorKind::ServerError, msg));
    }
    // One event: the whole body, its first token and its end.
    let role = Role {
        token: info.has_token(),
        first_token: info.has_token(),
        end: true,
        ..Role::default()
    };
    let at = rx.event(read, at, role, false);
    absorb(m, &info, at, &mut None, limits)?;
    failed_finish(&info)?;
    m.end = at;
    m.reusable = true;
    Ok(())
}

/// A chunk whose `finish_reason` says the server gave up on the generation (vLLM's `abort`):
/// the request failed, with what it streamed until then absorbed.
fn failed_finish(info: &ChunkInfo) -> Result<(), RequestError> {
    match &info.failed_finish {
        Some(reason) => Err(error(
            ErrorKind::ServerError,
            format!("the generation ended with finish_reason {reason:?}"),
        )),
        None => Ok(()),
    }
}

fn absorb(
    m: &mut Measurement,
    info: &ChunkInfo,
    at: Stamp,
    last_token: &mut Option<Stamp>,
    limits: &ReadLimits,
) -> Result<(), RequestError> {
    if info.has_token() {
        if u64::from(m.chunks) >= limits.max_chunks {
            return Err(error(
                ErrorKind::ResponseTooLong,
                format!(
                    "over {} token chunks{} (max_output_ratio)",
                    limits.max_chunks,
                    for_max_tokens(limits)
                ),
            ));
        }
        m.chunks += 1;
        if m.first_token.is_none() {
            m.first_token = Some(at);
        } else if m.second_token.is_none() {
            m.second_token = Some(at);
        }
        if info.content_bytes > 0 && m.first_output.is_none() {
            m.first_output = Some(at);
        }
        if let Some(prev) = last_token.replace(at) {
            let ms = |a: MonoTime, b: MonoTime| a.since(b).as_secs_f64() * 1e3;
            m.gaps.at.push(ms(at.at, prev.at));
            m.gaps.read.push(ms(at.read, prev.read));
        }
    }
    if info.usage.is_some() {
        m.usage.clone_from(&info.usage);
    }
    if info.timings.is_some() {
        m.timings.clone_from(&info.timings);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_compressing_content_coding_is_named() {
        let coding = |values: &[&str]| {
            let mut h = http::HeaderMap::new();
            for v in values {
                h.append(http::header::CONTENT_ENCODING, v.parse().unwrap());
            }
            content_coding(&h, &Secrets::default())
        };
        assert_eq!(coding(&[]), None);
        assert_eq!(coding(&["identity"]), None);
        assert_eq!(coding(&[" Identity , ", ""]), None);
        assert_eq!(
            coding(&["none"]),
            None,
            "an SSE relay's way of saying plain"
        );
        assert_eq!(coding(&["gzip"]).as_deref(), Some("gzip"));
        assert_eq!(coding(&["GZip"]).as_deref(), Some("GZip"));
        assert_eq!(coding(&["identity, br"]).as_deref(), Some("identity, br"));
        assert_eq!(
            coding(&["identity", "zstd"]).as_deref(),
            Some("identity, zstd")
        );
        let long = format!("br, {}", "x".repeat(500));
        assert_eq!(coding(&[long.as_str()]).map(|c| c.len()), Some(100));
    }
}

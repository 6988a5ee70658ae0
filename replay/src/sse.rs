//! Server-sent events framing over timestamped reads.
//!
//! The body arrives as byte chunks, each stamped with the monotonic time of the read that
//! returned it. An event is complete when its terminating blank line arrives, so it carries the
//! time of *that* read: the moment canaryd's code could first have acted on it. Handles `\n`,
//! `\r\n` and `\r` line endings, comments, multi-line `data:`, events split across reads and a
//! byte order mark opening the stream.
//!
//! Memory is bounded: an event (its unfinished line included) longer than the parser's limit
//! is an error, so a `data:` line that never ends costs one request, not the process.

use bytes::BytesMut;

/// A line longer than this gets its room up to the parser's limit at once ([`SseParser::push`]).
const BIG_LINE: usize = 64 << 10;
use canary_core::MonoTime;

/// One complete SSE event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, if any.
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
    /// When the read that completed this event returned.
    pub at: MonoTime,
}

/// An SSE event grew past the parser's limit (its unfinished line included).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("an SSE event over the limit of {limit} bytes")]
pub struct EventTooLarge {
    /// The limit, in bytes.
    pub limit: usize,
}

/// Incremental SSE parser.
#[derive(Debug)]
pub struct SseParser {
    /// Bytes an event may hold, its unfinished line included.
    limit: usize,
    buf: BytesMut,
    event: Option<String>,
    data: Option<String>,
    // A `\r` ended the previous read; a `\n` starting the next one belongs to it.
    pending_cr: bool,
    // Bytes of `buf` already scanned for a line end.
    scanned: usize,
    // Bytes of a byte order mark read at the stream's start, held back until it is whole or
    // turns out not to be one; `None` past the start.
    bom: Option<usize>,
    // Lines that added nothing to an event's data ([`SseParser::bare_lines`]).
    bare_lines: u64,
}

/// UTF-8's byte order mark, which the SSE spec strips from a stream's start: left on, it would
/// make the first field `\u{feff}data`, and the first event would be lost.
const BOM: &[u8] = b"\xef\xbb\xbf";

impl Default for SseParser {
    fn default() -> SseParser {
        SseParser::with_limit(crate::limits::ResponseLimits::EVENT_BYTES)
    }
}

impl SseParser {
    /// An empty parser whose events may hold up to 1 MiB.
    pub fn new() -> SseParser {
        SseParser::default()
    }

    /// An empty parser whose events may hold up to `limit` bytes, the line still being read
    /// included.
    pub fn with_limit(limit: usize) -> SseParser {
        SseParser {
            limit,
            buf: BytesMut::new(),
            event: None,
            data: None,
            pending_cr: false,
            scanned: 0,
            bom: Some(0),
            bare_lines: 0,
        }
    }

    /// Feeds one read; complete events are appended to `out`. Past the limit the event is
    /// an error (the parser holds at most the limit plus one read).
    pub fn push(
        &mut self,
        bytes: &[u8],
        at: MonoTime,
        out: &mut Vec<SseEvent>,
    ) -> Result<(), EventTooLarge> {
        let mut bytes = bytes;
        if let Some(matched) = self.bom {
            let want = &BOM[matched..];
            let n = want.len().min(bytes.len());
            if bytes[..n] != want[..n] {
                // Not a mark: what was held back is the stream's.
                self.bom = None;
                self.buf.extend_from_slice(&BOM[..matched]);
            } else if n < want.len() {
                self.bom = Some(matched + n);
                return Ok(());
            } else {
                self.bom = None;
                bytes = &bytes[n..];
            }
        }
        if self.pending_cr {
            self.pending_cr = false;
            if bytes.first() == Some(&b'\n') {
                bytes = &bytes[1..];
            }
        }
        // A line past 64 KiB is a rare one (a huge event, or a server that never ends its
        // line): it gets room up to the limit at once, one allocation at glibc's mmap
        // threshold (daemon/src/malloc_arenas.rs), whose pages stay out of RSS until written
        // and go back to the kernel when freed, not a doubling whose steps leave resident
        // holes in the allocator's arenas (bench/RESULTS.md, "held bytes and RSS").
        let need = self.buf.len() + bytes.len();
        if need > BIG_LINE && self.buf.capacity() < need {
            self.buf.reserve(need.max(self.limit) - self.buf.len());
        }
        self.buf.extend_from_slice(bytes);
        loop {
            let Some(pos) =
                memchr::memchr2(b'\n', b'\r', &self.buf[self.scanned..]).map(|p| p + self.scanned)
            else {
                self.scanned = self.buf.len();
                // What is left is one unfinished line, the event's.
                return self.check(self.buf.len());
            };
            let mut end = pos + 1;
            if self.buf[pos] == b'\r' {
                match self.buf.get(pos + 1) {
                    Some(b'\n') => end += 1,
                    Some(_) => {}
                    None => self.pending_cr = true,
                }
            }
            let line = self.buf.split_to(end);
            self.scanned = 0;
            self.line(&line[..pos], at, out);
            // The event so far only: what is left of this read belongs to the lines (and
            // events) after it, each checked when it is reached.
            self.check(0)?;
        }
    }

    /// Bytes held: the event so far and the line being read.
    pub fn held(&self) -> usize {
        self.buf.len()
            + self.data.as_ref().map_or(0, String::len)
            + self.event.as_ref().map_or(0, String::len)
    }

    /// The event so far, and `line` bytes of its unfinished line, within the limit.
    fn check(&self, line: usize) -> Result<(), EventTooLarge> {
        let event =
            self.data.as_ref().map_or(0, String::len) + self.event.as_ref().map_or(0, String::len);
        match event + line > self.limit {
            true => Err(EventTooLarge { limit: self.limit }),
            false => Ok(()),
        }
    }

    /// Lines read that added nothing to an event's data: blank lines (each event's end among
    /// them), comments (`: ping`), `event:`, `id:` and other fields. A `data:` line grows its
    /// event towards the size cap; these hold nothing, so only their count bounds a stream of
    /// them.
    pub fn bare_lines(&self) -> u64 {
        self.bare_lines
    }

    /// Bytes buffered that do not yet form a complete line.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// True when an event has started (fields seen) but its blank line has not arrived.
    pub fn has_partial_event(&self) -> bool {
        self.data.is_some() || self.event.is_some() || !self.buf.is_empty()
    }

    fn line(&mut self, line: &[u8], at: MonoTime, out: &mut Vec<SseEvent>) {
        if line.is_empty() {
            self.bare_lines = self.bare_lines.saturating_add(1);
            if let Some(data) = self.data.take() {
                out.push(SseEvent {
                    event: self.event.take(),
                    data,
                    at,
                });
            }
            self.event = None;
            return;
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        if field != b"data" {
            self.bare_lines = self.bare_lines.saturating_add(1);
            if field.is_empty() {
                return; // comment / keep-alive
            }
        }
        // Valid UTF-8 (every real chunk) is checked a word at a time; only a line with a bad
        // byte pays for the lossy walk.
        let value = match std::str::from_utf8(value) {
            Ok(s) => std::borrow::Cow::Borrowed(s),
            Err(_) => String::from_utf8_lossy(value),
        };
        match field {
            b"data" => match &mut self.data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(&value);
                }
                None => self.data = Some(value.into_owned()),
            },
            b"event" => self.event = Some(value.into_owned()),
            _ => {} // id, retry and unknown fields do not matter here
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_in_pieces(input: &[u8], piece: usize) -> Vec<SseEvent> {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        for (i, chunk) in input.chunks(piece).enumerate() {
            p.push(chunk, MonoTime(i as u64), &mut out).unwrap();
        }
        out
    }

    #[test]
    fn frames_events_whatever_the_read_boundaries() {
        let input =
            b"data: {\"a\":1}\n\n: keep-alive\n\nevent: x\ndata: l1\ndata: l2\n\ndata: [DONE]\n\n";
        for piece in [1, 2, 3, 7, 1000] {
            let ev = parse_in_pieces(input, piece);
            let data: Vec<_> = ev.iter().map(|e| e.data.as_str()).collect();
            assert_eq!(data, ["{\"a\":1}", "l1\nl2", "[DONE]"], "piece {piece}");
            assert_eq!(ev[1].event.as_deref(), Some("x"));
        }
    }

    #[test]
    fn event_time_is_the_read_that_completed_it() {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        p.push(b"data: hel", MonoTime(10), &mut out).unwrap();
        assert!(out.is_empty());
        assert!(p.has_partial_event());
        p.push(b"lo\n", MonoTime(20), &mut out).unwrap();
        assert!(out.is_empty());
        p.push(b"\n", MonoTime(30), &mut out).unwrap();
        assert_eq!(
            out,
            [SseEvent {
                event: None,
                data: "hello".into(),
                at: MonoTime(30)
            }]
        );
        assert!(!p.has_partial_event());
    }

    // Issue 14, item 1: a `data:` line that never ended was buffered until the process
    // aborted.
    #[test]
    fn a_line_or_an_event_past_the_limit_is_an_error_and_nothing_more_is_held() {
        let mut p = SseParser::with_limit(1000);
        let mut out = Vec::new();
        let piece = [b'a'; 300];
        p.push(b"data: ", MonoTime(0), &mut out).unwrap();
        for _ in 0..3 {
            p.push(&piece, MonoTime(1), &mut out).unwrap();
        }
        assert_eq!(
            p.push(&piece, MonoTime(2), &mut out),
            Err(EventTooLarge { limit: 1000 })
        );
        assert!(p.buffered() <= 1000 + piece.len());
        // Many short data lines that never meet their blank line.
        let mut p = SseParser::with_limit(1000);
        let lines = b"data: 0123456789\n".repeat(10);
        let mut result = Ok(());
        for i in 0..20 {
            result = p.push(&lines, MonoTime(i), &mut out);
            if result.is_err() {
                break;
            }
        }
        assert_eq!(result, Err(EventTooLarge { limit: 1000 }));
        assert!(out.is_empty());
        // Events within the limit, however many, pass.
        let mut p = SseParser::with_limit(1000);
        for i in 0..1000 {
            p.push(b"data: {\"x\":1}\n\n", MonoTime(i), &mut out)
                .unwrap();
        }
        assert_eq!(out.len(), 1000);
    }

    // Audit finding 8: the bytes of the next event, read with an event just under the limit,
    // were counted as the first event's.
    #[test]
    fn events_just_under_the_limit_pass_however_many_come_in_one_read() {
        let event = |n: usize| format!("data: {}\n\n", "a".repeat(n - 8));
        let mut p = SseParser::with_limit(1000);
        let mut out = Vec::new();
        let read = [event(1000), event(1000), event(1000)].concat();
        p.push(read.as_bytes(), MonoTime(0), &mut out).unwrap();
        assert_eq!(out.len(), 3);
        // Split mid-event: a read ending in the next event's start.
        let read = [event(1000), event(1000)].concat();
        let (a, b) = read.as_bytes().split_at(1500);
        p.push(a, MonoTime(1), &mut out).unwrap();
        p.push(b, MonoTime(2), &mut out).unwrap();
        assert_eq!(out.len(), 5);
        // One over is still refused, in one read or a byte at a time.
        let over = event(1010);
        assert_eq!(
            SseParser::with_limit(1000).push(over.as_bytes(), MonoTime(3), &mut out),
            Err(EventTooLarge { limit: 1000 })
        );
        let mut p = SseParser::with_limit(1000);
        let failed = over
            .as_bytes()
            .chunks(1)
            .any(|b| p.push(b, MonoTime(4), &mut out).is_err());
        assert!(failed);
    }

    #[test]
    fn a_byte_order_mark_opening_the_stream_is_dropped_however_it_is_split() {
        let input = b"\xef\xbb\xbfdata: a\n\n\xef\xbb\xbfdata: b\n\n";
        for piece in [1, 2, 3, 4, 100] {
            let ev = parse_in_pieces(input, piece);
            let data: Vec<_> = ev.iter().map(|e| e.data.as_str()).collect();
            // Only at the start: a later one is the next line's, a field the spec ignores.
            assert_eq!(data, ["a"], "piece {piece}");
        }
        // A start that is not a mark is kept whole.
        for piece in [1, 2, 100] {
            let ev = parse_in_pieces(b"\xef\xbbdata: a\n\ndata: b\n\n", piece);
            let data: Vec<_> = ev.iter().map(|e| e.data.as_str()).collect();
            assert_eq!(data, ["b"], "piece {piece}");
            let ev = parse_in_pieces(b"\xefx: 1\ndata: a\n\n", piece);
            assert_eq!(ev.len(), 1, "piece {piece}");
        }
        // An empty read changes nothing.
        let mut p = SseParser::new();
        let mut out = Vec::new();
        for bytes in [&b"\xef"[..], b"", b"\xbb\xbf", b"", b"data: a\n\n"] {
            p.push(bytes, MonoTime(0), &mut out).unwrap();
        }
        assert_eq!(out.len(), 1);
    }

    #[test]
    fn lines_without_data_are_counted() {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        let input = b"data: a\n\n: ping\n\nevent: x\nid: 1\ndata\ndata:b\ndatum: c\n\n\n";
        p.push(input, MonoTime(0), &mut out).unwrap();
        assert_eq!(out.len(), 2);
        // The blank lines (4), the comment, `event`, `id`, `datum`.
        assert_eq!(p.bare_lines(), 8);
    }

    #[test]
    fn invalid_utf8_is_replaced_not_refused() {
        for piece in [1, 4, 100] {
            let ev = parse_in_pieces(b"data: a\xffb\xe2\x82\n\ndata: \xe2\x82\xac\n\n", piece);
            let data: Vec<_> = ev.iter().map(|e| e.data.as_str()).collect();
            assert_eq!(data, ["a\u{fffd}b\u{fffd}", "\u{20ac}"], "piece {piece}");
        }
    }

    #[test]
    fn crlf_and_bare_cr_line_endings() {
        for input in [
            &b"data: a\r\n\r\ndata: b\r\n\r\n"[..],
            &b"data: a\r\rdata: b\r\r"[..],
        ] {
            for piece in [1, 3, 100] {
                let ev = parse_in_pieces(input, piece);
                let data: Vec<_> = ev.iter().map(|e| e.data.as_str()).collect();
                assert_eq!(data, ["a", "b"], "{input:?} piece {piece}");
            }
        }
    }

    #[test]
    fn real_llamacpp_capture_frames_into_its_data_lines() {
        let raw = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../shared/fixtures/llamacpp_server_chat_stream.sse"
        ))
        .expect("shared fixture");
        let expected = String::from_utf8_lossy(&raw)
            .lines()
            .filter(|l| l.starts_with("data:"))
            .count();
        for piece in [1, 13, 4096] {
            let ev = parse_in_pieces(&raw, piece);
            assert_eq!(ev.len(), expected);
            assert_eq!(ev.last().unwrap().data, "[DONE]");
            for e in &ev[..ev.len() - 1] {
                serde_json::from_str::<serde_json::Value>(&e.data).expect("each chunk is JSON");
            }
        }
    }
}

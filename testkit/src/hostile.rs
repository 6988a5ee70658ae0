//! A loopback HTTP server that misbehaves on purpose, the way a broken or hostile inference
//! server would: a line that never ends, a stream that never ends, a 4 GB body, headers that
//! never end or come a byte at a time, silence, garbage. Every way ends on its own after a
//! bounded time and byte count, so a test that fails cannot hang or fill the disk.
//!
//! Plain threads, no runtime: the replay tests (async) and the daemon tests (a `canaryd run`
//! process) use it alike.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How the server answers every request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hostile {
    /// A 200 SSE stream whose first `data:` line never ends: up to `bytes` of text, no newline.
    EndlessLine {
        /// Bytes of the line sent at most.
        bytes: u64,
    },
    /// A 200 SSE stream of one event whose `data:` lines never meet a blank line.
    EndlessEvent {
        /// Bytes sent at most.
        bytes: u64,
    },
    /// A 200 SSE stream of valid one-token chunks that never sends `[DONE]`: `chunks` of them,
    /// one every `every` (zero: as fast as the socket takes them), then it hangs up.
    EndlessStream {
        /// Chunks sent at most.
        chunks: u64,
        /// Pause between chunks.
        every: Duration,
    },
    /// A 200 SSE stream of events that carry no token, as fast as the socket takes them: a
    /// role-only chunk, an empty content, `choices: []` and a `: ping` comment, over and over,
    /// `events` of them in all; then it hangs up without `[DONE]`.
    EndlessNothing {
        /// Events (the comments among them) sent at most.
        events: u64,
    },
    /// A 200 response declaring `Content-Length: declared` (say 4 GB) that sends at most
    /// `bytes` of a JSON body that never closes, streaming or not.
    HugeBody {
        /// The declared length.
        declared: u64,
        /// Bytes actually sent at most.
        bytes: u64,
    },
    /// A 200 SSE stream whose one chunk has a string of `bytes` where `choices`' array is
    /// due, then `[DONE]`: a JSON parser's complaint quotes the string whole.
    WrongType {
        /// Bytes of the string.
        bytes: u64,
    },
    /// A 200 answer that generates nothing: a stream of a role chunk and `[DONE]`, or a body
    /// whose message is empty, its usage counting 0 completion tokens.
    NothingGenerated {
        /// An SSE stream rather than one JSON body.
        streaming: bool,
    },
    /// A 200 stream as a model that stopped at once sends it: a role chunk, an empty content
    /// with `finish_reason: stop`, a usage counting 1 completion token (the end of sequence),
    /// `[DONE]`.
    EndOfSequenceOnly,
    /// A 200 answer of one token whose choice then finishes with `finish_reason: "abort"` (as
    /// vLLM ends a request it gave up on), a usage and `[DONE]`: a stream, or one JSON body.
    /// The usage counts 2 completion tokens, one more than came (generated, never sent), so a
    /// record can tell the server's count from its own.
    AbortedGeneration {
        /// An SSE stream rather than one JSON body.
        streaming: bool,
    },
    /// A 200 SSE stream of one token and a chunk finishing with `finish_reason: "abort"`,
    /// then nothing: no usage, no `[DONE]`, the connection held open.
    AbortedThenStalls,
    /// A 200 SSE stream of one token, then an `event: error` whose data has no `error` key
    /// (`{"message":"engine overloaded","code":503}`), then `[DONE]`.
    ErrorEvent,
    /// A whole SSE stream (one token, `[DONE]`) compressed with gzip, as a proxy that honours
    /// an `accept-encoding` would send it: `Content-Encoding: gzip`, the status `status`.
    Gzipped {
        /// The status code (200, or an error).
        status: u16,
    },
    /// An error status whose body is `bytes` long (the client keeps only the start).
    HugeErrorBody {
        /// Bytes of the body.
        bytes: u64,
    },
    /// A 503 declaring a 1,000-byte JSON body that sends its first 26 bytes
    /// (`{"error":{"message":"busy"`) and holds the connection.
    StalledErrorBody,
    /// A status line, then one header whose value never ends: up to `bytes`.
    HugeHeaders {
        /// Bytes of the header sent at most.
        bytes: u64,
    },
    /// A status line, then one header byte every `every`, never finishing the head.
    SlowHeaders {
        /// Pause between bytes.
        every: Duration,
    },
    /// Reads the request and never answers.
    Silent,
    /// Reads the request and answers with `bytes` of bytes that are not HTTP, then closes.
    Garbage {
        /// Bytes sent.
        bytes: u64,
    },
    /// Answers with an error that quotes the request's head, its `Authorization` and other
    /// headers among it, as some servers quote what they refused: as a 401's OpenAI-style
    /// error body, or as an error event in a 200 stream (after one token).
    EchoRequest {
        /// In a 200 stream (`data: {"error":…}`) rather than as a 401.
        in_stream: bool,
    },
    /// A 401 declaring a 1,000-byte text body that sends `refused: ` and the request's
    /// `Authorization` value but its last 3 bytes, then closes: a quote the server cut short
    /// inside the key.
    EchoCutThenClose,
    /// A 200 answer whose usage's `prompt_tokens` is a string where a number is due: `pad`
    /// bytes of `Q`, then the request's `Authorization` value. A JSON parser's complaint
    /// quotes it, and a message cuts the complaint short. A stream, or one JSON body.
    EchoAsWrongType {
        /// Bytes before the value, which decide where a cut falls in it.
        pad: usize,
        /// An SSE stream rather than one JSON body.
        streaming: bool,
    },
    /// A 401 whose text body quotes the request's head twice: its bytes as they came, and as
    /// a server that reads header bytes from 0x80 up as Latin-1 (Python's `http.server`)
    /// writes them back in UTF-8.
    EchoHeadBytes,
    /// A 400 whose OpenAI-style error quotes the request's `Authorization` and `x-` headers
    /// (`Bearer … | x-a=… x-b=…`) encoded: in lower and in upper case, in base64, percent-
    /// encoded as a URL's part, and HTML-escaped (as the secrets audit's server did).
    EchoEncoded,
    /// A 200 `/v1/models` list (whatever the path) whose model ids quote the request's
    /// `Authorization`: the first after `pad` bytes of `Q`, the second as it is.
    EchoInModelList {
        /// Bytes before the value in the first id, which decide where a cut falls in it.
        pad: usize,
    },
    /// Answers a `POST` with a whole 200 SSE response of three tokens whose last chunk
    /// carries llama.cpp's `timings`, `prompt_ms` written as `first` (its JSON text, say
    /// `-1e200`) for the first `POST` and as `later` for every other; anything else (a probe,
    /// a `/metrics` scrape) gets a 404. `connection: close`, so each request comes on a
    /// connection of its own. A buggy or hostile server's prompt time beside sane ones.
    PromptTime {
        /// `prompt_ms` for the first `POST`.
        first: &'static str,
        /// `prompt_ms` for every later one.
        later: &'static str,
    },
    /// Reads the request and closes the connection without a byte.
    CloseAfterRequest,
    /// Reads the request and resets the connection (RST).
    ResetAfterRequest,
    /// After `after`, one token and `[DONE]` in a 200 SSE stream whose chunked body never
    /// ends (no terminating chunk): the request is finished, the connection is not.
    DoneWithoutEnd {
        /// Wait before answering.
        after: Duration,
    },
    /// Answers a connection's first request with a whole 200 SSE response (one token,
    /// `[DONE]`), keeping the connection alive; reads the second request on it, holds it
    /// `after`, then closes without a byte: a server that read a request and dropped it, not
    /// one that closed an idle connection.
    DropsSecondRequest {
        /// How long the second request is held before the close.
        after: Duration,
    },
    /// The first connection as [`Hostile::DropsSecondRequest`]; every later one reads its
    /// request and never answers, as [`Hostile::Silent`]: a request sent again on a new
    /// connection after its pooled one closed waits there until its deadline.
    DropsSecondRequestThenSilent {
        /// How long the first connection's second request is held before the close.
        after: Duration,
    },
    /// Writes a whole 200 SSE response (one token, `[DONE]`) `after` the connection opens,
    /// before reading anything, as a broken proxy or a server replaying a canned answer
    /// would; then reads the request and holds the connection.
    AnswersFirst {
        /// Wait after the connection opens.
        after: Duration,
    },
}

/// A running hostile server on `127.0.0.1`. Dropping it stops it: the listener closes and
/// every connection ends at its next write or within a second.
pub struct HostileServer {
    port: u16,
    stop: Arc<AtomicBool>,
    stats: Arc<Stats>,
}

#[derive(Default)]
struct Stats {
    requests: AtomicU64,
    /// Requests read whose method is `POST` (a completion, not a `GET` of `/v1/models`).
    post_requests: AtomicU64,
    /// `POST` requests answered by [`Hostile::PromptTime`].
    posts: AtomicU64,
    bytes_sent: AtomicU64,
    connections: AtomicU64,
}

/// How long one connection may last, whatever its mode, unless [`HostileServer::lasting`]
/// says otherwise.
pub const DEFAULT_CONNECTION_LIMIT: Duration = Duration::from_secs(120);

impl HostileServer {
    /// Starts answering every request as `mode`; each connection lasts at most
    /// [`DEFAULT_CONNECTION_LIMIT`].
    pub fn start(mode: Hostile) -> HostileServer {
        HostileServer::lasting(mode, DEFAULT_CONNECTION_LIMIT)
    }

    /// [`HostileServer::start`], each connection lasting at most `limit`.
    pub fn lasting(mode: Hostile, limit: Duration) -> HostileServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(Stats::default());
        {
            let (stop, stats) = (stop.clone(), stats.clone());
            std::thread::spawn(move || {
                for conn in listener.incoming() {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    let Ok(conn) = conn else { continue };
                    let (stop, stats) = (stop.clone(), stats.clone());
                    let index = stats.connections.fetch_add(1, Ordering::Relaxed);
                    std::thread::spawn(move || {
                        let deadline = Instant::now() + limit;
                        let mut c = Conn {
                            tcp: conn,
                            index,
                            deadline,
                            stop,
                            stats,
                        };
                        c.serve(mode);
                    });
                }
            });
        }
        HostileServer { port, stop, stats }
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Requests read so far.
    pub fn requests(&self) -> u64 {
        self.stats.requests.load(Ordering::Relaxed)
    }

    /// `POST` requests read so far: the completions sent, without a run's `GET`s before it
    /// (the target's context length asked of `/v1/models`).
    pub fn post_requests(&self) -> u64 {
        self.stats.post_requests.load(Ordering::Relaxed)
    }

    /// Response bytes written so far, over every connection.
    pub fn bytes_sent(&self) -> u64 {
        self.stats.bytes_sent.load(Ordering::Relaxed)
    }
}

impl Drop for HostileServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wake the accept loop so it sees the stop.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

struct Conn {
    tcp: TcpStream,
    /// Connections accepted before this one.
    index: u64,
    deadline: Instant,
    stop: Arc<AtomicBool>,
    stats: Arc<Stats>,
}

/// Bytes written per call while streaming filler.
const PIECE: usize = 64 * 1024;

impl Conn {
    fn over(&self) -> bool {
        self.stop.load(Ordering::Relaxed) || Instant::now() >= self.deadline
    }

    /// Writes all of `bytes`; false once the client is gone or time is up.
    fn send(&mut self, mut bytes: &[u8]) -> bool {
        while !bytes.is_empty() {
            if self.over() {
                return false;
            }
            match self.tcp.write(bytes) {
                Ok(0) => return false,
                Ok(n) => {
                    self.stats.bytes_sent.fetch_add(n as u64, Ordering::Relaxed);
                    bytes = &bytes[n..];
                }
                // The write timeout: the client is not reading; look at the clock again.
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        true
    }

    /// Sends `filler` again and again, `total` bytes at most.
    fn flood(&mut self, filler: u8, total: u64) {
        let piece = vec![filler; PIECE];
        let mut left = total;
        while left > 0 {
            let n = left.min(PIECE as u64) as usize;
            if !self.send(&piece[..n]) {
                return;
            }
            left -= n as u64;
        }
    }

    /// Waits until the client closes or time is up, reading and dropping what it sends.
    fn linger(&mut self) {
        let mut buf = [0u8; 4096];
        while !self.over() {
            match self.tcp.read(&mut buf) {
                Ok(0) => return,
                Ok(_) => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(_) => return,
            }
        }
    }

    fn pause(&self, d: Duration) -> bool {
        let end = Instant::now() + d;
        while Instant::now() < end {
            if self.over() {
                return false;
            }
            std::thread::sleep((end - Instant::now()).min(Duration::from_millis(50)));
        }
        true
    }

    /// Reads one request (head and `Content-Length` body, both bounded); its head's bytes, or
    /// `None` if none came.
    fn read_request(&mut self) -> Option<Vec<u8>> {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 8192];
        let head_end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            if self.over() || buf.len() > 1 << 20 {
                return None;
            }
            match self.tcp.read(&mut chunk) {
                Ok(0) => return None,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(_) => return None,
            }
        };
        let head = buf[..head_end].to_vec();
        let length: usize = String::from_utf8_lossy(&head)
            .to_ascii_lowercase()
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
            .min(64 << 20);
        let mut have = buf.len() - head_end;
        while have < length {
            if self.over() {
                return None;
            }
            match self.tcp.read(&mut chunk) {
                Ok(0) => return None,
                Ok(n) => have += n,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(_) => return None,
            }
        }
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        if head.starts_with(b"POST ") {
            self.stats.post_requests.fetch_add(1, Ordering::Relaxed);
        }
        Some(head)
    }

    /// Answers the first request with `answer`, reads the second, holds it `after` and
    /// returns, for the caller to close the connection without a byte: the client's read
    /// sees the end, not a reset (its request was read whole).
    fn drop_second(&mut self, answer: &[u8], after: Duration) {
        if self.send(answer) && self.read_request().is_some() {
            self.pause(after);
        }
    }

    fn serve(&mut self, mode: Hostile) {
        let tick = Some(Duration::from_secs(1));
        if self.tcp.set_read_timeout(tick).is_err() || self.tcp.set_write_timeout(tick).is_err() {
            return;
        }
        let _ = self.tcp.set_nodelay(true);
        const SSE: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                             cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n";
        // One token and `[DONE]`, the body ended: a whole response.
        let whole = || {
            let token = "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\ndata: [DONE]\n\n";
            let mut answer = SSE.to_vec();
            answer.extend(format!("{:x}\r\n{token}\r\n0\r\n\r\n", token.len()).bytes());
            answer
        };
        if let Hostile::AnswersFirst { after } = mode {
            if !self.pause(after) {
                return;
            }
            self.send(&whole());
        }
        let Some(head) = self.read_request() else {
            return;
        };
        let request = String::from_utf8_lossy(&head).into_owned();
        match mode {
            Hostile::EndlessLine { bytes } => {
                // One chunk of the chunked body as large as the whole line.
                let start = b"data: {\"choices\":[{\"delta\":{\"content\":\"";
                let head = format!("{:x}\r\n", start.len() as u64 + bytes);
                if self.send(SSE) && self.send(head.as_bytes()) && self.send(start) {
                    self.flood(b'a', bytes);
                }
            }
            Hostile::EndlessEvent { bytes } => {
                let line = b"data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n";
                let per = line.len() as u64;
                let lines = bytes / per;
                let head = format!("{:x}\r\n", lines * per);
                if self.send(SSE) && self.send(head.as_bytes()) {
                    let piece: Vec<u8> = line
                        .iter()
                        .copied()
                        .cycle()
                        .take(line.len() * 1024)
                        .collect();
                    let mut left = lines;
                    while left > 0 {
                        let n = left.min(1024);
                        if !self.send(&piece[..(n * per) as usize]) {
                            return;
                        }
                        left -= n;
                    }
                }
            }
            Hostile::EndlessStream { chunks, every } => {
                if !self.send(SSE) {
                    return;
                }
                let event =
                    b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\n";
                let framed = [format!("{:x}\r\n", event.len()).as_bytes(), event, b"\r\n"].concat();
                // Without a pause, batch the chunks into large writes; each is still its
                // own SSE event, so the client counts every one.
                let batch = if every.is_zero() { 512 } else { 1 };
                let piece = framed.repeat(batch);
                let mut sent = 0;
                while sent < chunks {
                    let n = (chunks - sent).min(batch as u64) as usize;
                    if !self.send(&piece[..n * framed.len()]) {
                        return;
                    }
                    sent += n as u64;
                    if !every.is_zero() && !self.pause(every) {
                        return;
                    }
                }
                // Hang up without `[DONE]`: the stream is cut.
                return;
            }
            Hostile::EndlessNothing { events } => {
                if !self.send(SSE) {
                    return;
                }
                let cycle = "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n\
                             data: {\"choices\":[{\"delta\":{\"content\":\"\"}}]}\n\n\
                             data: {\"choices\":[]}\n\n\
                             : ping\n\n";
                let framed = format!("{:x}\r\n{cycle}\r\n", cycle.len()).repeat(256);
                let mut sent = 0;
                while sent < events {
                    if !self.send(framed.as_bytes()) {
                        return;
                    }
                    sent += 4 * 256;
                }
                return;
            }
            Hostile::HugeBody { declared, bytes } => {
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {declared}\r\n\r\n"
                );
                let start = b"{\"choices\":[{\"message\":{\"content\":\"";
                if self.send(head.as_bytes()) && self.send(start) {
                    self.flood(b'a', bytes.min(declared));
                }
            }
            Hostile::HugeErrorBody { bytes } => {
                let head = format!(
                    "HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\ncontent-length: {bytes}\r\n\r\n"
                );
                if self.send(head.as_bytes()) {
                    self.flood(b'e', bytes);
                }
            }
            Hostile::StalledErrorBody => {
                let answer =
                    "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
                              content-length: 1000\r\n\r\n{\"error\":{\"message\":\"busy\"";
                if !self.send(answer.as_bytes()) {
                    return;
                }
            }
            Hostile::HugeHeaders { bytes } => {
                if self.send(b"HTTP/1.1 200 OK\r\nx-filler: ") {
                    self.flood(b'h', bytes);
                }
            }
            Hostile::SlowHeaders { every } => {
                if !self.send(b"HTTP/1.1 200 OK\r\n") {
                    return;
                }
                for &b in b"x-slow: 1".iter().cycle() {
                    if !self.pause(every) || !self.send(&[b]) {
                        return;
                    }
                }
            }
            Hostile::Silent => {}
            Hostile::Garbage { bytes } => {
                let noise: Vec<u8> = (0..bytes).map(|i| (i * 131 % 251) as u8).collect();
                self.send(&noise);
                return;
            }
            Hostile::EchoRequest { in_stream } => {
                let quoted = serde_json::json!({
                    "error": {"message": format!("refused: {request}"), "type": "auth"}
                })
                .to_string();
                if in_stream {
                    let token = "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n";
                    let body = format!("{token}data: {quoted}\n\n");
                    let framed = format!("{:x}\r\n{body}\r\n", body.len());
                    if !self.send(SSE) || !self.send(framed.as_bytes()) {
                        return;
                    }
                } else {
                    let head = format!(
                        "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                        quoted.len()
                    );
                    if !self.send(head.as_bytes()) || !self.send(quoted.as_bytes()) {
                        return;
                    }
                }
            }
            Hostile::EchoCutThenClose => {
                let auth = header_value(&request, "authorization");
                let part = &auth[..auth.len().saturating_sub(3)];
                let answer = format!(
                    "HTTP/1.1 401 Unauthorized\r\ncontent-type: text/plain\r\n\
                     content-length: 1000\r\n\r\nrefused: {part}"
                );
                self.send(answer.as_bytes());
                return;
            }
            Hostile::EchoAsWrongType { pad, streaming } => {
                let auth = header_value(&request, "authorization").replace(['"', '\\'], "");
                let usage = format!(
                    "{{\"choices\":[],\"usage\":{{\"prompt_tokens\":\"{}{auth}\"}}}}",
                    "Q".repeat(pad)
                );
                let answer = match streaming {
                    true => {
                        let events = format!(
                            "data: {{\"choices\":[{{\"delta\":{{\"content\":\"x\"}}}}]}}\n\n\
                             data: {usage}\n\ndata: [DONE]\n\n"
                        );
                        let framed = format!("{:x}\r\n{events}\r\n0\r\n\r\n", events.len());
                        [SSE, framed.as_bytes()].concat()
                    }
                    false => format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                         content-length: {}\r\n\r\n{usage}",
                        usage.len()
                    )
                    .into_bytes(),
                };
                if !self.send(&answer) {
                    return;
                }
            }
            Hostile::EchoHeadBytes => {
                let as_read: String = head.iter().map(|&b| char::from(b)).collect();
                let body = [
                    b"refused: ".as_slice(),
                    &head,
                    b" | as read: ",
                    as_read.as_bytes(),
                ]
                .concat();
                let answer = format!(
                    "HTTP/1.1 401 Unauthorized\r\ncontent-type: text/plain; charset=utf-8\r\n\
                     content-length: {}\r\n\r\n",
                    body.len()
                );
                if !self.send(&[answer.as_bytes(), &body].concat()) {
                    return;
                }
            }
            Hostile::EchoEncoded => {
                use base64::Engine;
                let mut quoted = header_value(&request, "authorization");
                quoted.push_str(" |");
                for line in request.split("\r\n").filter(|l| l.starts_with("x-")) {
                    if let Some((name, value)) = line.split_once(':') {
                        quoted.push_str(&format!(" {name}={}", value.trim()));
                    }
                }
                let percent: String = quoted
                    .bytes()
                    .map(
                        |b| match b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                            true => char::from(b).to_string(),
                            false => format!("%{b:02X}"),
                        },
                    )
                    .collect();
                let html = quoted
                    .replace('&', "&amp;")
                    .replace('<', "&lt;")
                    .replace('>', "&gt;");
                let message = format!(
                    "lower={} upper={} b64={} url={percent} html={html}",
                    quoted.to_lowercase(),
                    quoted.to_uppercase(),
                    base64::engine::general_purpose::STANDARD.encode(&quoted),
                );
                let body = serde_json::json!({ "error": { "message": message } }).to_string();
                let answer = format!(
                    "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n\
                     content-length: {}\r\n\r\n{body}",
                    body.len()
                );
                if !self.send(answer.as_bytes()) {
                    return;
                }
            }
            Hostile::EchoInModelList { pad } => {
                let auth = header_value(&request, "authorization");
                let body = serde_json::json!({
                    "object": "list",
                    "data": [
                        { "id": format!("{}{auth}", "Q".repeat(pad)) },
                        { "id": auth },
                    ]
                })
                .to_string();
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                     content-length: {}\r\n\r\n{body}",
                    body.len()
                );
                if !self.send(answer.as_bytes()) {
                    return;
                }
            }
            Hostile::PromptTime { .. } if !request.starts_with("POST ") => {
                let answer =
                    "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
                self.send(answer.as_bytes());
                let _ = self.tcp.shutdown(Shutdown::Both);
                return;
            }
            Hostile::PromptTime { first, later } => {
                let prompt_ms = match self.stats.posts.fetch_add(1, Ordering::Relaxed) {
                    0 => first,
                    _ => later,
                };
                let token = |t: &str| {
                    format!("data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{t}\"}}}}]}}\n\n")
                };
                let events = [
                    "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"}}]}\n\n"
                        .to_string(),
                    token("a"),
                    token("b"),
                    token("c"),
                    format!(
                        "data: {{\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"stop\"}}],\
                         \"usage\":{{\"prompt_tokens\":5,\"completion_tokens\":3}},\
                         \"timings\":{{\"prompt_n\":5,\"prompt_ms\":{prompt_ms},\"predicted_n\":3,\
                         \"predicted_ms\":1.5}}}}\n\n"
                    ),
                    "data: [DONE]\n\n".to_string(),
                ];
                let mut answer = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                                   connection: close\r\ntransfer-encoding: chunked\r\n\r\n"
                    .to_vec();
                for e in events {
                    answer.extend(format!("{:x}\r\n{e}\r\n", e.len()).bytes());
                }
                answer.extend(b"0\r\n\r\n");
                self.send(&answer);
                let _ = self.tcp.shutdown(Shutdown::Both);
                return;
            }
            Hostile::CloseAfterRequest => return,
            Hostile::DropsSecondRequest { after } => {
                self.drop_second(&whole(), after);
                return;
            }
            Hostile::DropsSecondRequestThenSilent { after } if self.index == 0 => {
                self.drop_second(&whole(), after);
                return;
            }
            Hostile::DropsSecondRequestThenSilent { .. } => {}
            Hostile::AnswersFirst { .. } => {}
            Hostile::WrongType { bytes } => {
                let start = b"data: {\"choices\":\"";
                let end = b"\"}\n\ndata: [DONE]\n\n";
                let size = start.len() as u64 + bytes + end.len() as u64;
                let head = format!("{size:x}\r\n");
                if self.send(SSE) && self.send(head.as_bytes()) && self.send(start) {
                    self.flood(b'a', bytes);
                    let _ = self.send(end) && self.send(b"\r\n0\r\n\r\n");
                }
            }
            Hostile::NothingGenerated { streaming: true } => {
                let events = "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n\
                              data: [DONE]\n\n";
                let mut answer = SSE.to_vec();
                answer.extend(format!("{:x}\r\n{events}\r\n0\r\n\r\n", events.len()).bytes());
                let _ = self.send(&answer);
            }
            Hostile::NothingGenerated { streaming: false } => {
                let body =
                    "{\"choices\":[{\"message\":{\"role\":\"assistant\",\"content\":\"\"}}],\
                            \"usage\":{\"prompt_tokens\":5,\"completion_tokens\":0}}";
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                );
                let _ = self.send(answer.as_bytes());
            }
            Hostile::AbortedGeneration { streaming: true } => {
                // Each event its own piece of the chunked body, as vLLM writes them: the usage
                // comes in a read of its own after the abort.
                let events = [
                    "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n",
                    "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n",
                    "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"abort\"}]}\n\n",
                    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2}}\n\n",
                    "data: [DONE]\n\n",
                ];
                let mut answer = SSE.to_vec();
                for e in events {
                    answer.extend(format!("{:x}\r\n{e}\r\n", e.len()).bytes());
                }
                answer.extend(b"0\r\n\r\n");
                let _ = self.send(&answer);
            }
            Hostile::AbortedGeneration { streaming: false } => {
                let body = "{\"choices\":[{\"message\":{\"role\":\"assistant\",\"content\":\"x\"},\
                            \"finish_reason\":\"abort\"}],\
                            \"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2}}";
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                );
                let _ = self.send(answer.as_bytes());
            }
            Hostile::AbortedThenStalls => {
                let events = "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n\
                              data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"abort\"}]}\n\n";
                let framed = format!("{:x}\r\n{events}\r\n", events.len());
                if !self.send(SSE) || !self.send(framed.as_bytes()) {
                    return;
                }
            }
            Hostile::ErrorEvent => {
                let events = "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n\
                              event: error\n\
                              data: {\"message\":\"engine overloaded\",\"code\":503}\n\n\
                              data: [DONE]\n\n";
                let mut answer = SSE.to_vec();
                answer.extend(format!("{:x}\r\n{events}\r\n0\r\n\r\n", events.len()).bytes());
                let _ = self.send(&answer);
            }
            Hostile::Gzipped { status } => {
                // gzip (mtime 0) of `data: {"choices":[{"delta":{"content":"x"}}]}\n\n` and
                // `data: [DONE]\n\n`.
                const GZIP: &[u8] = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\x03\x4b\x49\x2c\x49\xb4\
                    \x52\xa8\x56\x4a\xce\xc8\xcf\x4c\x4e\x2d\x56\xb2\x8a\xae\x56\x4a\x49\xcd\x29\x49\
                    \x54\xb2\x02\x0a\xe6\xe7\x95\xa4\xe6\x95\x28\x59\x29\x55\x28\xd5\xd6\xc6\xd6\x72\
                    \x71\xa5\x80\x95\x47\xbb\xf8\xfb\xb9\xc6\x72\x71\x01\x00\x77\x45\x7d\x0a\x3d\x00\
                    \x00\x00";
                let head = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: text/event-stream\r\n\
                     content-encoding: gzip\r\ncontent-length: {}\r\n\r\n",
                    GZIP.len()
                );
                let _ = self.send(&[head.as_bytes(), GZIP].concat());
            }
            Hostile::EndOfSequenceOnly => {
                let events = "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n\
                              data: {\"choices\":[{\"delta\":{\"content\":\"\"},\"finish_reason\":\"stop\"}]}\n\n\
                              data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":1}}\n\n\
                              data: [DONE]\n\n";
                let mut answer = SSE.to_vec();
                answer.extend(format!("{:x}\r\n{events}\r\n0\r\n\r\n", events.len()).bytes());
                let _ = self.send(&answer);
            }
            Hostile::DoneWithoutEnd { after } => {
                if !self.pause(after) {
                    return;
                }
                let events =
                    "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\ndata: [DONE]\n\n";
                let mut answer = SSE.to_vec();
                answer.extend(format!("{:x}\r\n{events}\r\n", events.len()).bytes());
                if !self.send(&answer) {
                    return;
                }
            }
            Hostile::ResetAfterRequest => {
                // SO_LINGER 0: close sends RST instead of FIN.
                let _ = socket_linger_zero(&self.tcp);
                return;
            }
        }
        // Hold the connection until the client goes or time is up: a hostile server never
        // ends a response properly.
        self.linger();
        let _ = self.tcp.shutdown(Shutdown::Both);
    }
}

/// The value of header `name` (lower case) in a request's `head`, empty if it has none.
fn header_value(head: &str, name: &str) -> String {
    head.split("\r\n")
        .filter_map(|l| l.split_once(':'))
        .find(|(n, _)| n.trim().eq_ignore_ascii_case(name))
        .map_or(String::new(), |(_, v)| v.trim().to_string())
}

fn socket_linger_zero(tcp: &TcpStream) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: valid fd, a `linger` struct and its size, as SO_LINGER takes.
    let rc = unsafe {
        libc::setsockopt(
            tcp.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            &linger as *const libc::linger as *const libc::c_void,
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    match rc {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

#[cfg(test)]
mod tests;

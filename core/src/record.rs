//! What was measured for one request: the line written to `records.jsonl`.
//!
//! Times are milliseconds on the monotonic clock, relative to the run's start, so records from
//! one run can be compared directly and joined with telemetry samples.

use serde::{Deserialize, Serialize};

/// The measurements of one request.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// Index of the request in the replayed sequence.
    pub id: u32,
    /// 1-based line of the trace file the request came from.
    pub trace_line: u32,
    /// Session key, if the trace has sessions.
    pub session: Option<u64>,
    /// Turn within the session (0 for first turns).
    pub turn: u32,
    /// True for warm-up requests, which statistics leave out.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub warmup: bool,
    /// When the schedule said to send it (ms from run start).
    pub scheduled_at_ms: f64,
    /// When its first request byte was handed to the socket (ms from run start).
    pub sent_at_ms: f64,
    /// When canaryd's code saw the response end or the request fail (ms from run start):
    /// a read time, never a kernel one, so the next turn of a session is timed from it.
    pub ended_at_ms: f64,
    /// `sent_at_ms - scheduled_at_ms`: absolute, not relative to the least-late request.
    pub schedule_lag_ms: f64,
    /// The part of the lag spent held back on purpose: waiting for the session's previous turn
    /// or for a free slot under the concurrency ceiling.
    pub hold_ms: f64,
    /// The part of the lag past the hold spent waiting for the request's connection to open
    /// (TCP connect and TLS handshake still under way when the request was due, or, for a
    /// request resent after a pooled connection turned out closed, until the fresh one was
    /// open). What is left, `schedule_lag_ms - hold_ms - connect_wait_ms`, is canaryd's own
    /// delay. A request that never got a connection was never sent: its `sent_at_ms` is when
    /// it was given up, and its lag past the hold is this wait up to the failure.
    #[serde(default)]
    pub connect_wait_ms: f64,
    /// Kernel socket cookie (`SO_COOKIE`) of the connection it used: the key eBPF events join on.
    pub socket_cookie: Option<u64>,
    /// The URL it was sent to (one of several with `--url` repeated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Time to open the connection, when this request opened a new one.
    pub connect_ms: Option<f64>,
    /// Time to the response head (status line and headers). This and the response times
    /// below end at the kernel's receive time of the bytes where the socket gave one, else
    /// at canaryd's read: `rx` says which, and keeps canaryd's reads beside them.
    pub ttfb_ms: Option<f64>,
    /// Time to the first token (reasoning or output).
    pub ttft_ms: Option<f64>,
    /// Time from the first token to the second.
    pub ttst_ms: Option<f64>,
    /// Time to the first output (non-reasoning) token.
    pub ttfo_ms: Option<f64>,
    /// Inter-token latency: `(e2e - ttft) / (output tokens - 1)`.
    pub itl_ms: Option<f64>,
    /// Largest gap between two consecutive content chunks.
    pub max_chunk_gap_ms: Option<f64>,
    /// End-to-end latency, send to the end of the response (`[DONE]`, or the body's end).
    pub e2e_ms: Option<f64>,
    /// Output tokens per second seen by this request's user, after the first token.
    pub output_tokens_per_s: Option<f64>,
    /// Content-bearing chunks received.
    pub chunks: u32,
    /// `ok`, `error` or `cancelled`.
    pub status: Status,
    /// What went wrong, when `status` is `error`.
    pub error: Option<RequestError>,
    /// Requested prompt length (tokens).
    pub input_tokens: u32,
    /// Requested output length (tokens).
    pub output_tokens: u32,
    /// Prompt tokens as synthesized and counted by canaryd's tokenizer, when known.
    pub prompt_tokens_synthesized: Option<u32>,
    /// Token counts the server reported.
    pub usage: Option<Usage>,
    /// Timings the server reported in the stream (llama.cpp's `timings`), when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_timings: Option<ServerTimings>,
    /// How the response times were taken (kernel receive timestamps or canaryd's reads),
    /// which are exact and which bounds, and canaryd's reads beside them. Absent when receive
    /// timestamps were off or refused (every time is then canaryd's read) and for requests that
    /// opened no connection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx: Option<RxTiming>,
    /// What the GPU and the server's own metrics showed while this request ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub telemetry: Option<RequestTelemetry>,
    /// What the kernel saw of this request's socket (eBPF), when tracing was on and working.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<KernelTiming>,
    /// W3C trace id sent in `traceparent`.
    pub trace_id: String,
    /// Parent id sent in `traceparent`: the id of canaryd's client span for this request, so
    /// the server's own spans hang under it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub span_id: String,
    /// Inter-chunk gaps in ms, only when the run asks for them (`--record-chunks`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk_gaps_ms: Option<Vec<f64>>,
}

/// Outcome of a request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// The response completed.
    #[default]
    Ok,
    /// It did not; see [`RequestError`].
    Error,
    /// The client closed it on purpose (`--request-cancellation-rate`), keeping what it had
    /// received: neither an error nor a completion, counted apart.
    Cancelled,
}

impl Status {
    /// The name `records.jsonl` and the exporters use.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Error => "error",
            Status::Cancelled => "cancelled",
        }
    }
}

/// Server-reported token counts (`usage` of the last chunk).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// `prompt_tokens`.
    pub prompt_tokens: Option<u32>,
    /// `completion_tokens`.
    pub completion_tokens: Option<u32>,
    /// `completion_tokens_details.reasoning_tokens`.
    pub reasoning_tokens: Option<u32>,
    /// `prompt_tokens_details.cached_tokens`.
    pub cached_tokens: Option<u32>,
}

/// Per-request timings some servers add to the final chunk (llama.cpp's `timings`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerTimings {
    /// Prompt processing time, ms.
    pub prompt_ms: Option<f64>,
    /// Generation time, ms.
    pub predicted_ms: Option<f64>,
    /// Prompt tokens processed (excluding cached).
    pub prompt_n: Option<u32>,
    /// Tokens generated.
    pub predicted_n: Option<u32>,
    /// Prompt tokens reused from the cache.
    pub cache_n: Option<u32>,
}

/// Telemetry joined to one request by time (same monotonic clock). Absent fields: the
/// source was off or had no sample in the window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestTelemetry {
    /// Mean GPU utilization (%) over the request's lifetime.
    pub gpu_util_avg_pct: Option<f64>,
    /// Peak GPU utilization (%) over the request's lifetime.
    pub gpu_util_max_pct: Option<f64>,
    /// Mean board power (W) over the request's lifetime.
    pub gpu_power_avg_w: Option<f64>,
    /// Peak board power (W) over the request's lifetime.
    pub gpu_power_max_w: Option<f64>,
    /// Requests waiting in the server's queue when this one was sent: the last scrape at or
    /// before the send, if at most two scrape intervals and a timeout older (else absent).
    pub server_queue_depth_at_send: Option<f64>,
    /// Server KV-cache usage (0–1) when this one was sent (the same scrape).
    pub server_kv_usage_at_send: Option<f64>,
    /// Requests the server was running when this one's first token arrived (the last scrape
    /// before it, as old at most).
    pub server_running_at_first_token: Option<f64>,
}

/// The kernel's view of one request, from eBPF socket events on its connection (joined by
/// socket cookie, same monotonic clock). The TTFT parts add up to `ttft_ms` within the
/// tolerance the tracer states; a part the kernel did not see is absent, never zero.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KernelTiming {
    /// SYN_SENT to ESTABLISHED, when this request opened its connection.
    pub connect_ms: Option<f64>,
    /// canaryd's send call to the last request byte handed to TCP.
    pub request_write_ms: Option<f64>,
    /// Last request byte sent to first response byte received by TCP: network, queueing and
    /// prefill.
    pub server_wait_ms: Option<f64>,
    /// First-token bytes received by TCP to canaryd's code seeing them.
    pub client_overhead_ms: Option<f64>,
    /// What TTFT has left once the parts above are taken out.
    pub remainder_ms: Option<f64>,
    /// canaryd's send call to the first request byte handed to TCP.
    pub first_send_ms: Option<f64>,
    /// canaryd's send call to the last response bytes TCP received while the request ran:
    /// beside `e2e_ms`, how long canaryd took to see the end.
    pub last_received_ms: Option<f64>,
    /// canaryd's send call to the connection's close, when it closed while the request ran
    /// (a server that cut the stream, say).
    pub closed_ms: Option<f64>,
    /// Bytes handed to TCP for the request.
    pub bytes_sent: Option<u64>,
    /// Bytes TCP received for the response.
    pub bytes_received: Option<u64>,
    /// Smoothed RTT of the connection, µs.
    pub srtt_us: Option<u32>,
    /// TCP retransmits on the connection while the request ran.
    pub retransmits: Option<u32>,
    /// Per-chunk client delay (kernel arrival to canaryd's read), p50 in ms.
    pub chunk_delay_p50_ms: Option<f64>,
    /// Per-chunk client delay, p99 in ms.
    pub chunk_delay_p99_ms: Option<f64>,
}

/// Where one response time comes from, and so what kind of figure it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RxSource {
    /// The kernel's receive time of the segment that completed the event, nothing read after
    /// it in the same read: exact (to the clock mapping's uncertainty).
    Kernel,
    /// The kernel's receive time of the last segment of a read that also carried later bytes
    /// of the response: an upper bound.
    KernelBound,
    /// canaryd's own read, the socket gave no stamp: an upper bound, late by canaryd's delay.
    Userspace,
}

impl RxSource {
    /// Its name in records, `summary.json` and the OTLP spans (`kernel`, `kernel_bound`,
    /// `userspace`).
    pub fn as_str(self) -> &'static str {
        match self {
            RxSource::Kernel => "kernel",
            RxSource::KernelBound => "kernel_bound",
            RxSource::Userspace => "userspace",
        }
    }
}

/// How one request's response times were taken (issue 16). Linux stamps every received
/// segment and `recvmsg` returns the stamp of the last segment a read consumed; canaryd maps it
/// from `CLOCK_REALTIME` to the monotonic clock and times each response event (the head, each
/// SSE event, a non-streaming body) by the read that completed it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RxTiming {
    /// Source of the response head's time (`ttfb_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<RxSource>,
    /// Source of the first token's time (`ttft_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_token: Option<RxSource>,
    /// Source of the end's time (`e2e_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<RxSource>,
    /// Response events timed: the head, each SSE event (or a non-streaming body).
    pub events: u32,
    /// Of those, events the kernel stamped (exactly or as a bound).
    pub stamped_events: u32,
    /// Token-bearing events.
    pub token_events: u32,
    /// Of those, events whose time is only a bound (`kernel_bound` or `userspace`).
    pub token_events_bound: u32,
    /// How far the `CLOCK_REALTIME` → monotonic mapping may be off, µs (it grows to cover a
    /// step of the realtime clock during the request).
    pub clock_map_uncertainty_us: f64,
    /// canaryd's own delay per stamped event, its read minus the kernel's receive time: the
    /// median (over the first events kept, see README) and the largest, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_delay_p50_ms: Option<f64>,
    /// The largest such delay, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_delay_max_ms: Option<f64>,
    /// The record's response times as canaryd's reads saw them.
    pub userspace: UserspaceTimes,
}

/// Response times ending at canaryd's reads (user space): what `ttft_ms` and the others were
/// before kernel receive timestamps, kept so nothing is lost.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UserspaceTimes {
    /// Time to the response head.
    pub ttfb_ms: Option<f64>,
    /// Time to the first token.
    pub ttft_ms: Option<f64>,
    /// First token to the second.
    pub ttst_ms: Option<f64>,
    /// Time to the first output token.
    pub ttfo_ms: Option<f64>,
    /// `(e2e - ttft) / (output tokens - 1)`.
    pub itl_ms: Option<f64>,
    /// Largest gap between two consecutive token chunks.
    pub max_chunk_gap_ms: Option<f64>,
    /// Send to the end of the response.
    pub e2e_ms: Option<f64>,
    /// Gaps between the reads of consecutive token chunks, only when the run asks for them
    /// (`--record-chunks`; `chunk_gaps_ms` of the record holds the kernel's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk_gaps_ms: Option<Vec<f64>>,
}

/// Why a request failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestError {
    /// The error class.
    pub kind: ErrorKind,
    /// HTTP status, for `http_status` errors.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_status: Option<u16>,
    /// A human-readable description (server error message, I/O cause).
    pub message: String,
}

/// Error classes, counted per run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// Could not connect (refused, unreachable, timed out, TLS handshake failed), or a new
    /// connection closed before any of the request was written.
    Connect,
    /// The server answered with a non-2xx status.
    HttpStatus,
    /// The connection closed or reset before the response completed.
    StreamCut,
    /// The per-request timeout expired.
    Timeout,
    /// A chunk was not valid SSE / JSON.
    MalformedChunk,
    /// The server sent an error object or an `event: error` inside a 200 stream, or ended a
    /// generation with a `finish_reason` that says it failed (vLLM's `abort`).
    ServerError,
    /// The run stopped before the request finished.
    Cancelled,
    /// The response overran a buffer cap (its head, one SSE event, or a non-streaming body):
    /// canaryd stopped reading instead of holding it all.
    ResponseTooLarge,
    /// The response streamed far more token chunks than the request's `max_tokens` allows:
    /// canaryd stopped reading a stream that may never end.
    ResponseTooLong,
    /// canaryd itself ran out of a resource (open files, memory, local ports) before the
    /// request reached the target: the client's fault, never counted against the target.
    ClientResources,
    /// The server broke HTTP's order: a response came before the request was sent (one
    /// written before reading, or bytes left over on a reused connection). It answers
    /// nothing canaryd asked, so it is not timed. Also a 2xx body in a `Content-Encoding`
    /// canaryd does not decode (anything but `identity`).
    Protocol,
    /// The response ended well (`[DONE]`, or a whole body) without generating anything: no
    /// token of content or reasoning, and no `completion_tokens` in its usage. `{}` or a
    /// stream of `[DONE]` alone answers nothing, and nothing in it can be timed.
    EmptyResponse,
}

impl ErrorKind {
    /// Every kind, in report order.
    pub const ALL: [ErrorKind; 12] = [
        ErrorKind::Connect,
        ErrorKind::HttpStatus,
        ErrorKind::StreamCut,
        ErrorKind::Timeout,
        ErrorKind::MalformedChunk,
        ErrorKind::ServerError,
        ErrorKind::ResponseTooLarge,
        ErrorKind::ResponseTooLong,
        ErrorKind::EmptyResponse,
        ErrorKind::Protocol,
        ErrorKind::ClientResources,
        ErrorKind::Cancelled,
    ];

    /// The snake_case name used in records and summaries.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Connect => "connect",
            ErrorKind::HttpStatus => "http_status",
            ErrorKind::StreamCut => "stream_cut",
            ErrorKind::Timeout => "timeout",
            ErrorKind::MalformedChunk => "malformed_chunk",
            ErrorKind::ServerError => "server_error",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::ResponseTooLarge => "response_too_large",
            ErrorKind::ResponseTooLong => "response_too_long",
            ErrorKind::ClientResources => "client_resources",
            ErrorKind::Protocol => "protocol",
            ErrorKind::EmptyResponse => "empty_response",
        }
    }
}

impl ErrorKind {
    /// True for failures of canaryd's own, which say nothing about the target.
    pub fn is_client_side(self) -> bool {
        self == ErrorKind::ClientResources
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether a server's `completion_tokens` (`n`) can be a request's that streamed `chunks`
/// token chunks and asked for `asked` tokens (0: no length asked): see
/// [`RequestRecord::completion_plausible`]. Without a length asked, the cap is the chunk
/// cap's own for such requests (8 Mi chunks, 8 per chunk at most).
pub fn completion_plausible(n: u64, chunks: u64, asked: u64) -> bool {
    const UNBOUNDED_CHUNKS: u64 = 8 << 20;
    let none_for_tokens = n == 0 && chunks > 0;
    let cap = match asked {
        0 => 8 * UNBOUNDED_CHUNKS.max(chunks),
        asked => 8 * asked.max(chunks) + 64,
    };
    !none_for_tokens && n <= cap
}

impl RequestRecord {
    /// Output tokens as counted for throughput: the server's count when it gave a plausible
    /// one, else the number of content chunks received.
    pub fn output_token_count(&self) -> u32 {
        match self.usage.as_ref().and_then(|u| u.completion_tokens) {
            Some(n) if self.completion_plausible(n) => n,
            _ => self.chunks,
        }
    }

    /// Whether a server's `completion_tokens` can be this request's: not none for a stream
    /// that carried tokens, and not past what the chunk cap lets a request asking for
    /// `output_tokens` stream (8 per token asked for, plus 64). A server is trusted with its
    /// count, but 2^32 − 1 of them would make a throughput of billions, and 0 would hide ITL.
    pub fn completion_plausible(&self, n: u32) -> bool {
        completion_plausible(n.into(), self.chunks.into(), self.output_tokens.into())
    }

    /// True when the request completed.
    pub fn is_ok(&self) -> bool {
        self.status == Status::Ok
    }

    /// True when the client cancelled it on purpose.
    pub fn is_cancelled(&self) -> bool {
        self.status == Status::Cancelled
    }

    /// Time to the first token as canaryd's code saw it (user space), whatever clock
    /// `ttft_ms` is on: what joins of canaryd's own reads (eBPF's client overhead) start from.
    pub fn userspace_ttft_ms(&self) -> Option<f64> {
        match &self.rx {
            Some(rx) => rx.userspace.ttft_ms,
            None => self.ttft_ms,
        }
    }

    /// canaryd's own delay reading the first token: its read minus the kernel's receive time,
    /// when the kernel stamped it.
    pub fn first_token_read_delay_ms(&self) -> Option<f64> {
        let rx = self.rx.as_ref()?;
        match rx.first_token? {
            RxSource::Kernel | RxSource::KernelBound => Some(rx.userspace.ttft_ms? - self.ttft_ms?),
            RxSource::Userspace => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serializes_error_kind_snake_case_and_round_trips() {
        let r = RequestRecord {
            status: Status::Error,
            error: Some(RequestError {
                kind: ErrorKind::HttpStatus,
                http_status: Some(503),
                message: "overloaded".into(),
            }),
            ..Default::default()
        };
        let s = serde_json::to_string(&r).unwrap();
        assert!(s.contains(r#""kind":"http_status""#), "{s}");
        assert!(s.contains(r#""status":"error""#), "{s}");
        assert!(!s.contains("warmup"), "{s}");
        let back: RequestRecord = serde_json::from_str(&s).unwrap();
        assert_eq!(back, r);
        for k in ErrorKind::ALL {
            assert_eq!(serde_json::to_string(&k).unwrap(), format!("\"{k}\""));
        }
    }
}

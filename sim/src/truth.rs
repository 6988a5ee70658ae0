//! Ground truth: what the sim did for each request, on CLOCK_MONOTONIC.
//!
//! Arrival has two times: `arrival_kernel_ns`, when the request's first byte reached the sim's
//! socket (the kernel's receive stamp), and `arrival_ns`, when the sim's task had read and parsed
//! its head; the difference is the sim's own delay in getting to it.
//!
//! Every "written" time is read with [`MonoTime::now`] right after the `write(2)` (through
//! tokio's `write_all`) that carried those bytes returned: at that point the bytes are in the
//! kernel's socket send buffer, which is as close to "on the wire" as user space can see and the
//! same point eBPF's `sock_send_length` observes. The sim writes its own HTTP/1.1 responses
//! straight to the socket (no buffering layer in between), so these are not "handed to a
//! library" times. Several events written in one call (e.g. the role chunk and the first token,
//! or tokens that piled up while the writer was busy) share one time.
//!
//! Records are kept in a bounded in-memory ring (default the last 100,000 requests, and at most
//! 10 million chunk timestamps, about 80 MB, in all; the oldest records go first), served a
//! bounded page at a time, and, with `--truth-log FILE`, appended to FILE as JSON lines by a
//! background thread.

use std::collections::VecDeque;
use std::io::Write;
use std::path::Path;
use std::sync::{mpsc, Mutex};
use std::thread::JoinHandle;

use serde::{Deserialize, Serialize};

/// Bound on the total chunk timestamps kept in memory.
const MAX_CHUNK_TIMES: usize = 10_000_000;

/// The most records one page of the ring holds (`GET /sim/truth`).
pub(crate) const MAX_PAGE: usize = 10_000;

/// The most chunk timestamps one page holds (about 8 MB in memory, 20 MB as JSON), unless its
/// first record alone has more.
const MAX_PAGE_CHUNK_TIMES: usize = 1_000_000;

/// One request as the sim saw it. Times are CLOCK_MONOTONIC nanoseconds
/// ([`canary_core::MonoTime`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TruthRecord {
    /// The sim's sequence number for this request (from 1, in arrival order).
    pub seq: u64,
    /// HTTP method.
    pub method: String,
    /// Request path (without query).
    pub path: String,
    /// The `x-request-id` request header, if sent.
    pub request_id: Option<String>,
    /// The `traceparent` request header, if sent (echoed in the response).
    pub traceparent: Option<String>,
    /// True for `stream: true` generation requests.
    pub stream: bool,
    /// HTTP status sent (0 when the connection was reset before a head was written).
    pub status: u16,
    /// Injected fault, canonical syntax, if any.
    pub fault: Option<String>,
    /// Why the request ended abnormally (client gone, injected reset, bad request...).
    pub error: Option<String>,
    /// Request head parsed: when the sim's own task had read and parsed it (the server's view;
    /// includes the sim's scheduling delay).
    pub arrival_ns: u64,
    /// The kernel's receive stamp of the read that brought the request's first byte, on
    /// CLOCK_MONOTONIC (the wire's view: on loopback, the client's `write`). Never earlier than
    /// that byte's arrival; exact unless the same read took later segments too (then a bound,
    /// late by how long they took to follow). Converted from CLOCK_REALTIME within the map's
    /// uncertainty (tens of ns; see the `wire_arrival` module). `None` when the kernel refused
    /// receive timestamps, or in logs written before this field existed.
    #[serde(default)]
    pub arrival_kernel_ns: Option<u64>,
    /// Request body fully received.
    pub body_received_ns: u64,
    /// Engine admitted the request (left the waiting queue); generation requests only.
    pub admitted_ns: Option<u64>,
    /// Response head written to the socket.
    pub first_byte_ns: Option<u64>,
    /// First SSE event written (streaming).
    pub first_chunk_ns: Option<u64>,
    /// First output token written, reasoning or content (streaming).
    pub first_token_ns: Option<u64>,
    /// First non-reasoning (content) token written (streaming): the TTFO ground truth.
    pub first_output_ns: Option<u64>,
    /// Every SSE event written, in order: role, tokens, finish, usage, `[DONE]` (streaming).
    pub chunk_ns: Vec<u64>,
    /// Last byte of the response written (or the connection reset).
    pub end_ns: u64,
    /// Prompt length in sim tokens (words).
    pub prompt_tokens: u32,
    /// Prompt tokens served from the prefix cache.
    pub cached_tokens: u32,
    /// Output tokens delivered (streaming: token chunks written; otherwise all generated).
    pub completion_tokens: u32,
    /// Of those, reasoning tokens.
    pub reasoning_tokens: u32,
    /// End of the engine step that produced the first token: vLLM's `first_token_ts`.
    /// `engine_first_token_ns - admitted_ns` is the prefill time in `/metrics`.
    #[serde(default)]
    pub engine_first_token_ns: Option<u64>,
    /// End of the engine step that produced the last token generated for this request:
    /// vLLM's `last_token_ts`.
    #[serde(default)]
    pub engine_last_token_ns: Option<u64>,
    /// Tokens the engine generated for this request by the time it ended; more than
    /// `completion_tokens` when the client left, or a reset cut the stream, before all were
    /// written.
    #[serde(default)]
    pub generated_tokens: u32,
    /// Times the engine preempted this request (optimistic KV admission only).
    #[serde(default)]
    pub preemptions: u32,
    /// Step time the profile gave this request's engine steps past the cap of 100 s on one
    /// step, cut instead of simulated (summed over the steps it ran in; 0 almost always). The
    /// profile's time is the engine times above plus this.
    #[serde(default)]
    pub engine_clamped_ns: u64,
    /// The client closed the connection (or it failed) before the response was complete; the
    /// engine aborted the sequence, freeing its batch slot and KV.
    #[serde(default)]
    pub disconnected: bool,
    /// When the sim noticed the disconnect (a read saw the end of the stream, or a write
    /// failed or made no progress for the write timeout).
    #[serde(default)]
    pub disconnect_ns: Option<u64>,
    /// With the `net_delay_ms` fault: when the sim produced each write, that is when it would
    /// have been written without the slow link. The server-side figures (`/metrics`) use these;
    /// the top-level times above are when the delayed writes reached the socket.
    #[serde(default)]
    pub net_delay: Option<NetDelay>,
}

/// The times a response was produced, before a slow link (`net_delay_ms`) delayed its writes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetDelay {
    /// The delay, in milliseconds.
    pub delay_ms: u64,
    /// Response head produced.
    pub first_byte_ns: Option<u64>,
    /// First SSE event produced.
    pub first_chunk_ns: Option<u64>,
    /// First output token produced.
    pub first_token_ns: Option<u64>,
    /// First content token produced.
    pub first_output_ns: Option<u64>,
    /// Every SSE event produced, in order (including any the client left before receiving).
    pub chunk_ns: Vec<u64>,
    /// Last byte produced (or, if the client left, when the sim noticed).
    pub end_ns: u64,
}

impl TruthRecord {
    /// Timestamps held, for the ring's memory bound.
    fn chunk_times(&self) -> usize {
        self.chunk_ns.len() + self.net_delay.as_ref().map_or(0, |n| n.chunk_ns.len())
    }
}

/// Some of the ring's records, as [`TruthStore::page`] chose them.
#[derive(Debug)]
pub(crate) struct TruthPage {
    pub records: Vec<TruthRecord>,
    /// Records past these were left for a next page.
    pub more: bool,
}

/// Ring of recent records plus the optional JSONL file.
pub(crate) struct TruthStore {
    ring: Mutex<Ring>,
    file: Mutex<Option<mpsc::SyncSender<String>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    /// Lines left out of the file because the writer fell behind by [`LOG_QUEUE`] lines.
    dropped: std::sync::atomic::AtomicU64,
}

/// Lines waiting for the truth log's writer at most: a slow disk or a pipe nobody reads must
/// not grow the sim's memory without end.
const LOG_QUEUE: usize = 65_536;

struct Ring {
    records: VecDeque<TruthRecord>,
    capacity: usize,
    chunk_times: usize,
}

impl TruthStore {
    pub fn new(capacity: usize, log: Option<&Path>) -> std::io::Result<TruthStore> {
        let (file, writer) = match log {
            Some(path) => {
                let f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)?;
                let (tx, rx) = mpsc::sync_channel::<String>(LOG_QUEUE);
                let handle = std::thread::Builder::new()
                    .name("sim-truth-log".into())
                    .spawn(move || write_lines(f, rx))?;
                (Some(tx), Some(handle))
            }
            None => (None, None),
        };
        Ok(TruthStore {
            ring: Mutex::new(Ring {
                records: VecDeque::new(),
                capacity: capacity.max(1),
                chunk_times: 0,
            }),
            file: Mutex::new(file),
            writer: Mutex::new(writer),
            dropped: Default::default(),
        })
    }

    pub fn push(&self, mut record: TruthRecord) {
        // What a client sent is kept short: the ring's bound counts records and chunk times,
        // and 60 KB request ids or fault specs on 100,000 requests held gigabytes.
        for text in [&mut record.method, &mut record.path] {
            cap_text(text);
        }
        for text in [
            &mut record.request_id,
            &mut record.traceparent,
            &mut record.fault,
            &mut record.error,
        ]
        .into_iter()
        .flatten()
        {
            cap_text(text);
        }
        if let Some(tx) = self.file.lock().expect("truth lock").as_ref() {
            if let Ok(line) = serde_json::to_string(&record) {
                if let Err(mpsc::TrySendError::Full(_)) = tx.try_send(line) {
                    use std::sync::atomic::Ordering::Relaxed;
                    if self.dropped.fetch_add(1, Relaxed) == 0 {
                        tracing::warn!(
                            "canary-sim: the truth log's writer is {LOG_QUEUE} lines behind; \
                             lines are left out of the file until it catches up (counted at exit)"
                        );
                    }
                }
            }
        }
        let mut ring = self.ring.lock().expect("truth lock");
        ring.chunk_times += record.chunk_times();
        ring.records.push_back(record);
        while ring.records.len() > ring.capacity
            || (ring.chunk_times > MAX_CHUNK_TIMES && ring.records.len() > 1)
        {
            let old = ring.records.pop_front().expect("non-empty");
            ring.chunk_times -= old.chunk_times();
        }
    }

    /// Records with `seq > since`, oldest first.
    pub fn snapshot(&self, since: u64) -> Vec<TruthRecord> {
        let ring = self.ring.lock().expect("truth lock");
        ring.records
            .iter()
            .filter(|r| r.seq > since)
            .cloned()
            .collect()
    }

    /// The records with `seq > since`, lowest `seq` first: at most `limit` of them (1 to
    /// [`MAX_PAGE`]) holding at most [`MAX_PAGE_CHUNK_TIMES`] chunk timestamps (unless the first
    /// alone has more). A client reads the ring page by page, each asked with `since` = the last
    /// `seq` of the one before; a copy of the whole ring per request (100,000 records and
    /// 80 MB of timestamps at most) was one client's to ask for, as often as it liked.
    pub fn page(&self, since: u64, limit: usize) -> TruthPage {
        let limit = limit.clamp(1, MAX_PAGE);
        let ring = self.ring.lock().expect("truth lock");
        // By `seq`, not in the ring's order (the order requests finished in): a long request
        // finishes after later ones, and paging by `since` in finish order would skip it.
        let mut chosen: Vec<&TruthRecord> = ring.records.iter().filter(|r| r.seq > since).collect();
        let matching = chosen.len();
        if matching > limit {
            chosen.select_nth_unstable_by_key(limit, |r| r.seq);
            chosen.truncate(limit);
        }
        chosen.sort_unstable_by_key(|r| r.seq);
        let mut records = Vec::with_capacity(chosen.len());
        let mut times = 0;
        for r in chosen {
            times += r.chunk_times();
            if times > MAX_PAGE_CHUNK_TIMES && !records.is_empty() {
                break;
            }
            records.push(r.clone());
        }
        TruthPage {
            more: records.len() < matching,
            records,
        }
    }

    /// Stops the file writer after it has written and flushed everything sent so far.
    pub fn close(&self) {
        drop(self.file.lock().expect("truth lock").take());
        if let Some(h) = self.writer.lock().expect("truth lock").take() {
            let _ = h.join();
        }
        let dropped = self.dropped.load(std::sync::atomic::Ordering::Relaxed);
        if dropped > 0 {
            tracing::warn!("canary-sim: {dropped} truth records were left out of the truth log");
        }
    }
}

fn write_lines(file: std::fs::File, rx: mpsc::Receiver<String>) {
    let mut out = std::io::BufWriter::new(file);
    while let Ok(line) = rx.recv() {
        let mut ok = writeln!(out, "{line}").is_ok();
        while let Ok(line) = rx.try_recv() {
            ok &= writeln!(out, "{line}").is_ok();
        }
        if !(ok && out.flush().is_ok()) {
            tracing::warn!("canary-sim: writing the truth log failed");
        }
    }
    let _ = out.flush();
}

/// The most of a client's text a truth record keeps, in bytes.
const MAX_TEXT: usize = 256;

/// Cuts `text` to [`MAX_TEXT`] bytes at a character boundary.
fn cap_text(text: &mut String) {
    let kept = canary_core::prefix_within(text, MAX_TEXT).len();
    text.truncate(kept);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_bound_and_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("truth.jsonl");
        let store = TruthStore::new(2, Some(&path)).unwrap();
        for seq in 1..=3 {
            store.push(TruthRecord {
                seq,
                chunk_ns: vec![seq; 3],
                ..Default::default()
            });
        }
        let snap = store.snapshot(0);
        assert_eq!(snap.iter().map(|r| r.seq).collect::<Vec<_>>(), [2, 3]);
        assert_eq!(store.snapshot(2).len(), 1);
        store.close();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<TruthRecord> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[2].chunk_ns, [3, 3, 3]);
    }

    #[test]
    fn pages_go_by_seq_and_are_bounded() {
        let store = TruthStore::new(MAX_PAGE * 3, None).unwrap();
        // Finish order is not arrival order: 2 finished before 1.
        for seq in [2, 1, 3] {
            store.push(TruthRecord {
                seq,
                ..Default::default()
            });
        }
        let seqs = |p: &TruthPage| p.records.iter().map(|r| r.seq).collect::<Vec<_>>();
        let p = store.page(0, 2);
        assert_eq!((seqs(&p), p.more), (vec![1, 2], true));
        let p = store.page(2, 2);
        assert_eq!((seqs(&p), p.more), (vec![3], false));
        assert!(store.page(3, 2).records.is_empty());
        // The record bound, whatever limit is asked.
        for seq in 4..=(MAX_PAGE as u64 * 2) {
            store.push(TruthRecord {
                seq,
                ..Default::default()
            });
        }
        let p = store.page(0, usize::MAX);
        assert_eq!((p.records.len(), p.more), (MAX_PAGE, true));
        assert_eq!(p.records.last().unwrap().seq, MAX_PAGE as u64);
        // The timestamp bound: each of these holds 40% of a page's timestamps.
        let store = TruthStore::new(10, None).unwrap();
        for seq in 1..=4 {
            store.push(TruthRecord {
                seq,
                chunk_ns: vec![seq; MAX_PAGE_CHUNK_TIMES * 2 / 5],
                ..Default::default()
            });
        }
        let p = store.page(0, 10);
        assert_eq!((seqs(&p), p.more), (vec![1, 2], true));
        let p = store.page(2, 10);
        assert_eq!((seqs(&p), p.more), (vec![3, 4], false));
    }

    #[test]
    fn a_clients_long_texts_are_kept_short_at_a_character_boundary() {
        let store = TruthStore::new(4, None).unwrap();
        store.push(TruthRecord {
            seq: 1,
            request_id: Some("x".repeat(60_000)),
            error: Some(format!("a{}", "é".repeat(30_000))),
            path: "/".repeat(70_000),
            ..Default::default()
        });
        let r = &store.snapshot(0)[0];
        assert_eq!(r.request_id.as_ref().unwrap().len(), MAX_TEXT);
        // 'a' then two-byte characters: 256 would cut one in half.
        assert_eq!(r.error.as_ref().unwrap().len(), MAX_TEXT - 1);
        assert_eq!(r.path.len(), MAX_TEXT);
    }

    // Truth logs written before `arrival_kernel_ns` existed still parse, with no kernel arrival.
    #[test]
    fn a_log_line_without_the_kernel_arrival_parses() {
        let rec = TruthRecord {
            seq: 7,
            arrival_ns: 1_000,
            arrival_kernel_ns: Some(900),
            ..Default::default()
        };
        let mut line: serde_json::Value = serde_json::to_value(&rec).unwrap();
        assert!(line
            .as_object_mut()
            .unwrap()
            .remove("arrival_kernel_ns")
            .is_some());
        let old: TruthRecord = serde_json::from_value(line).unwrap();
        assert_eq!(old.arrival_kernel_ns, None);
        assert_eq!((old.seq, old.arrival_ns), (7, 1_000));
    }
}

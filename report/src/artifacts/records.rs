//! `records.jsonl` read tolerantly: only the fields a report draws, unknown fields ignored,
//! missing optional ones absent, so records of other canaryd versions still load.

use crate::error::{io, ReportError};
use serde::Deserialize;
use std::io::{BufRead, Read};
use std::path::Path;

/// One request, as far as a report needs it. Times are ms from the run's start, on the
/// run's monotonic clock.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Request {
    /// Warm-up requests are left out of every figure.
    pub warmup: bool,
    /// The response completed.
    pub ok: bool,
    /// Cancelled on purpose by canaryd (`--request-cancellation-rate`): neither completed nor
    /// the target's error, as `summary.json` counts it.
    pub cancelled: bool,
    /// The error class, for failed requests (`connect`, `http_status`, …).
    pub error_kind: Option<String>,
    /// When the schedule said to send it.
    pub scheduled_ms: f64,
    /// When it was sent.
    pub sent_ms: f64,
    /// When it ended.
    pub ended_ms: f64,
    /// Sent − scheduled.
    pub lag_ms: f64,
    /// The part of the lag held on purpose.
    pub hold_ms: f64,
    /// Time to the response head.
    pub ttfb_ms: Option<f64>,
    /// Time to first token.
    pub ttft_ms: Option<f64>,
    /// Time from the first token to the second.
    pub ttst_ms: Option<f64>,
    /// Time to the first output (non-reasoning) token.
    pub ttfo_ms: Option<f64>,
    /// Inter-token latency.
    pub itl_ms: Option<f64>,
    /// End-to-end latency.
    pub e2e_ms: Option<f64>,
    /// Output tokens/s seen by this request's user.
    pub tokens_per_s: Option<f64>,
    /// Completed and met every SLO of the run (`None`: the run had no SLOs).
    pub good: Option<bool>,
    /// Output tokens (the server's count, else chunks).
    pub output_tokens: u64,
    /// What the GPU and the server's metrics showed around it.
    pub telemetry: Telemetry,
    /// The kernel's split of its TTFT (eBPF), when traced.
    pub kernel: Option<KernelParts>,
    /// Where its first token's time comes from (`rx.first_token`), when the record says;
    /// `userspace` for a timed record with no `rx` (receive timestamps off or refused).
    pub ttft_rx: Option<RxKind>,
    /// Where its end's time comes from (`rx.end`), when the record says; `userspace` for a
    /// timed record with no `rx`.
    pub e2e_rx: Option<RxKind>,
    /// Where its response head's time comes from (`rx.head`), when the record says;
    /// `userspace` for a timed record with no `rx`.
    pub ttfb_rx: Option<RxKind>,
    /// Its token events whose time is only a bound (`rx.token_events_bound`); `None` for a
    /// record with no `rx` (every time canaryd's read). Goodput's doubt reads it.
    pub token_events_bound: Option<u32>,
    /// The shard of a merged run that sent it (`canaryd merge` prefixes each record with
    /// its `shard`): its index in [`Records::shards`].
    pub shard: Option<u16>,
}

/// Where a response event's time comes from (a record's `rx`): the kernel's receive stamp of
/// the segment that completed it (exact), a later segment's when the read also carried later
/// bytes (an upper bound), or canaryd's read with no stamp (an upper bound too).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RxKind {
    /// Exact.
    Kernel,
    /// An upper bound: the stamp is of the read's last segment.
    KernelBound,
    /// An upper bound: canaryd's read.
    Userspace,
    /// Not known to this report (another version's kind, or none named while the record has
    /// an `rx` and the time): counted as a bound, never as exact, and named in a note.
    #[serde(skip)]
    Unknown,
}

impl RxKind {
    /// Its name in records and in `summary.json`.
    pub fn name(self) -> &'static str {
        match self {
            RxKind::Kernel => "kernel",
            RxKind::KernelBound => "kernel_bound",
            RxKind::Userspace => "userspace",
            RxKind::Unknown => "unknown",
        }
    }

    /// The time is only an upper bound.
    pub fn is_bound(self) -> bool {
        self != RxKind::Kernel
    }
}

/// Telemetry joined to one request (absent: the source was off or had no sample).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Telemetry {
    /// Mean GPU utilization (%) over its lifetime.
    pub gpu_util_avg_pct: Option<f64>,
    /// Peak GPU utilization (%).
    pub gpu_util_max_pct: Option<f64>,
    /// Mean board power (W).
    pub gpu_power_avg_w: Option<f64>,
    /// Peak board power (W).
    pub gpu_power_max_w: Option<f64>,
    /// Server queue depth when it was sent.
    pub server_queue_depth_at_send: Option<f64>,
    /// Server KV-cache usage (0–1) when it was sent.
    pub server_kv_usage_at_send: Option<f64>,
    /// Requests running when its first token came.
    pub server_running_at_first_token: Option<f64>,
}

impl Request {
    /// Failed: neither completed nor cancelled on purpose.
    pub fn is_error(&self) -> bool {
        !self.ok && !self.cancelled
    }
}

/// The kernel's parts of one TTFT (eBPF), ms; a part not seen is absent.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct KernelParts {
    /// SYN_SENT to ESTABLISHED (new connections only).
    pub connect_ms: Option<f64>,
    /// Send call to the last request byte handed to TCP.
    pub request_write_ms: Option<f64>,
    /// Last request byte out to first response byte in: network, queueing, prefill.
    pub server_wait_ms: Option<f64>,
    /// First-token bytes in the kernel to canaryd reading them.
    pub client_overhead_ms: Option<f64>,
    /// What TTFT has left.
    pub remainder_ms: Option<f64>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Line {
    shard: Option<String>,
    warmup: bool,
    scheduled_at_ms: Option<f64>,
    sent_at_ms: Option<f64>,
    ended_at_ms: Option<f64>,
    schedule_lag_ms: Option<f64>,
    hold_ms: Option<f64>,
    ttfb_ms: Option<f64>,
    ttft_ms: Option<f64>,
    ttst_ms: Option<f64>,
    ttfo_ms: Option<f64>,
    itl_ms: Option<f64>,
    e2e_ms: Option<f64>,
    output_tokens_per_s: Option<f64>,
    chunks: Option<u64>,
    output_tokens: Option<u64>,
    status: Option<String>,
    error: Option<ErrorLine>,
    usage: Option<UsageLine>,
    telemetry: Option<Telemetry>,
    kernel: Option<KernelParts>,
    #[serde(deserialize_with = "rx")]
    rx: RxLine,
}

/// A record's `rx`, as far as a report reads it: what it cannot read (another version's
/// shape, a kind it does not know) is absent, not an error, as an unknown field is.
#[derive(Default)]
struct RxLine {
    /// The record has an `rx`. A record without one was written with receive timestamps off
    /// or refused (or a merged or recovered run's from such a run): every time in it is
    /// canaryd's read, an upper bound (`userspace`).
    present: bool,
    head: Option<RxKind>,
    first_token: Option<RxKind>,
    end: Option<RxKind>,
    token_events_bound: u32,
    /// The kinds it names that this report does not know (as written).
    unknown: Vec<String>,
}

fn rx<'de, D: serde::Deserializer<'de>>(d: D) -> Result<RxLine, D::Error> {
    let v = serde_json::Value::deserialize(d)?;
    let mut unknown = Vec::new();
    let mut kind = |key: &str| {
        let named = v.get(key).filter(|k| !k.is_null())?;
        Some(RxKind::deserialize(named).unwrap_or_else(|_| {
            let name = named
                .as_str()
                .map_or_else(|| named.to_string(), str::to_string);
            // Printable and short, whatever the file holds: it is named in a note.
            let name: String = name.chars().take(40).collect();
            unknown.push(canary_core::printable(&name).into_owned());
            RxKind::Unknown
        }))
    };
    let (head, first_token, end) = (kind("head"), kind("first_token"), kind("end"));
    Ok(RxLine {
        present: true,
        unknown,
        head,
        first_token,
        end,
        token_events_bound: v
            .get("token_events_bound")
            .and_then(serde_json::Value::as_u64)
            .map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX)),
    })
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ErrorLine {
    kind: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct UsageLine {
    completion_tokens: Option<u64>,
}

/// The requests of one `records.jsonl`, and what was left out.
#[derive(Debug, Default)]
pub struct Records {
    /// Every record, warm-up included, in file order.
    pub requests: Vec<Request>,
    /// A sentence per line left out (a last line cut short by a process that died).
    pub notes: Vec<String>,
    /// Records past `MAX_REQUESTS`, read but not kept: the figures drawn are the first
    /// ones'.
    pub left_out: u64,
    /// The shards the records name (`1/3`), in order of first appearance.
    pub shards: Vec<String>,
}

/// Longest line read: a record with every chunk gap of a long answer is well under it.
const MAX_LINE: u64 = 64 << 20;

/// Records a report draws at most (about 370 bytes each in memory): a day-long rate run can
/// hold ten million, and the daemon makes reports beside its runs. Past these, the rest of
/// the file is read (so a damaged line still names itself) but left out, and a note says so.
pub const MAX_REQUESTS: usize = 1_000_000;

/// The records one page (or one side of a comparison) may still keep: [`MAX_REQUESTS`] over
/// all its runs, not each, so a series of ten million-record runs holds 370 MB, not 3.7 GB.
#[derive(Debug)]
pub struct RecordBudget {
    left: usize,
}

impl Default for RecordBudget {
    fn default() -> RecordBudget {
        RecordBudget { left: MAX_REQUESTS }
    }
}

/// Reads `path`, keeping what is left of `budget` at most, and takes what it kept from it. A
/// line that is not a record is an error naming its line and field, except a last line with
/// no line break, which a run killed mid-write leaves: it is left out and noted.
pub fn read_within(path: &Path, budget: &mut RecordBudget) -> Result<Records, ReportError> {
    let records = read_at_most(path, budget.left)?;
    budget.left -= records.requests.len();
    Ok(records)
}

/// [`read`], keeping the first `most` records.
fn read_at_most(path: &Path, most: usize) -> Result<Records, ReportError> {
    let file = std::fs::File::open(path).map_err(io(path))?;
    let mut reader = std::io::BufReader::with_capacity(1 << 20, file);
    let mut out = Records::default();
    let mut buf = Vec::new();
    let mut line_no = 0u64;
    let mut left_out = 0u64;
    let mut unknown = std::collections::BTreeMap::new();
    loop {
        buf.clear();
        let n = (&mut reader)
            .take(MAX_LINE + 1)
            .read_until(b'\n', &mut buf)
            .map_err(io(path))?;
        if n == 0 {
            break;
        }
        line_no += 1;
        let complete = buf.last() == Some(&b'\n');
        if buf.len() as u64 > MAX_LINE && !complete {
            return Err(ReportError::Record {
                path: path.to_path_buf(),
                line: line_no,
                what: format!("longer than {} MiB: not a record", MAX_LINE >> 20),
            });
        }
        if buf.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<Line>(&buf) {
            Ok(_) if out.requests.len() >= most => left_out += 1,
            Ok(l) => {
                for name in &l.rx.unknown {
                    *unknown.entry(name.clone()).or_insert(0u64) += 1;
                }
                let shard = l.shard.as_deref().map(|s| shard_index(&mut out.shards, s));
                out.requests.push(Request {
                    shard,
                    ..request(l)
                })
            }
            Err(_) if !complete => out.notes.push(format!(
                "{}:{line_no}: the last line is cut short (the run's process died while \
                 writing it): left out",
                path.display()
            )),
            Err(e) => {
                return Err(ReportError::Record {
                    path: path.to_path_buf(),
                    line: line_no,
                    what: describe(&buf, e),
                })
            }
        }
    }
    out.left_out = left_out;
    if !unknown.is_empty() {
        let named: Vec<String> = unknown
            .iter()
            .take(5)
            .map(|(k, n)| format!("\"{k}\" ×{n}"))
            .collect();
        let more = match unknown.len().saturating_sub(5) {
            0 => String::new(),
            n => format!(" and {n} more"),
        };
        out.notes.push(format!(
            "{}: receive-stamp kinds (rx) this report does not know: {}{more}; those times \
             are counted as bounds (unknown), not as exact",
            path.display(),
            named.join(", ")
        ));
    }
    if left_out > 0 {
        out.notes.push(format!(
            "{}: the first {most} records are drawn and counted here, the last {left_out} \
             are left out (memory: a page draws {MAX_REQUESTS} records at most, over all its \
             runs); summary.json's figures are the whole run's",
            path.display()
        ));
    }
    Ok(out)
}

/// The index of `shard` in `shards`, added when new. A merge has a handful of shards; a
/// file naming more than `u16` can count is not a merge's, and its later ones share the last.
fn shard_index(shards: &mut Vec<String>, shard: &str) -> u16 {
    if let Some(i) = shards.iter().position(|s| s == shard) {
        return i as u16;
    }
    if shards.len() > u16::MAX as usize {
        return u16::MAX;
    }
    shards.push(shard.to_string());
    (shards.len() - 1) as u16
}

fn request(l: Line) -> Request {
    let sent = l.sent_at_ms.unwrap_or(0.0);
    let scheduled = l.scheduled_at_ms.unwrap_or(sent);
    let ok = match l.status.as_deref() {
        Some(s) => s == "ok",
        None => l.error.is_none(),
    };
    let cancelled = l.status.as_deref() == Some("cancelled");
    Request {
        warmup: l.warmup,
        ok,
        cancelled,
        error_kind: (!ok && !cancelled).then(|| {
            l.error
                .and_then(|e| e.kind)
                .unwrap_or_else(|| "unknown".into())
        }),
        scheduled_ms: scheduled,
        sent_ms: sent,
        ended_ms: l.ended_at_ms.unwrap_or(sent),
        lag_ms: l.schedule_lag_ms.unwrap_or(sent - scheduled),
        hold_ms: l.hold_ms.unwrap_or(0.0),
        ttfb_ms: l.ttfb_ms,
        ttft_ms: l.ttft_ms,
        ttst_ms: l.ttst_ms,
        ttfo_ms: l.ttfo_ms,
        itl_ms: l.itl_ms,
        e2e_ms: l.e2e_ms,
        tokens_per_s: l.output_tokens_per_s,
        good: None,
        // As summary.json counts them: the server's count when it can be this request's.
        output_tokens: l
            .usage
            .and_then(|u| u.completion_tokens)
            .filter(|&n| {
                canary_core::completion_plausible(
                    n,
                    l.chunks.unwrap_or(0),
                    l.output_tokens.unwrap_or(0),
                )
            })
            .or(l.chunks)
            .unwrap_or(0),
        telemetry: l.telemetry.unwrap_or_default(),
        kernel: l.kernel,
        // No `rx`: canaryd's reads (receive timestamps off or refused), upper bounds. A record
        // that is not exact must never read as exact.
        // With an `rx` that names no kind for a time it has: unknown, a bound too.
        ttft_rx: if l.rx.present {
            l.rx.first_token.or(l.ttft_ms.map(|_| RxKind::Unknown))
        } else {
            l.ttft_ms.map(|_| RxKind::Userspace)
        },
        e2e_rx: if l.rx.present {
            l.rx.end.or(l.e2e_ms.map(|_| RxKind::Unknown))
        } else {
            l.e2e_ms.map(|_| RxKind::Userspace)
        },
        ttfb_rx: if l.rx.present {
            l.rx.head.or(l.ttfb_ms.map(|_| RxKind::Unknown))
        } else {
            l.ttfb_ms.map(|_| RxKind::Userspace)
        },
        token_events_bound: l.rx.present.then_some(l.rx.token_events_bound),
        shard: None,
    }
}

/// serde_json says where and what, not which field: find the field by parsing the line
/// loosely and trying each known field on its own.
fn describe(line: &[u8], e: serde_json::Error) -> String {
    let Ok(serde_json::Value::Object(map)) = serde_json::from_slice::<serde_json::Value>(line)
    else {
        return format!("not a JSON object: {e}");
    };
    for (key, value) in &map {
        let one = serde_json::Value::Object([(key.clone(), value.clone())].into_iter().collect());
        if let Err(e) = serde_json::from_value::<Line>(one) {
            return format!("field \"{key}\": {e}");
        }
    }
    e.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_str(text: &str) -> Result<Records, ReportError> {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "canary-report-records-{}-{}",
            std::process::id(),
            N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("records.jsonl");
        std::fs::write(&path, text).unwrap();
        let r = read_within(&path, &mut RecordBudget::default());
        std::fs::remove_dir_all(&dir).unwrap();
        r
    }

    #[test]
    fn unknown_fields_are_ignored_and_missing_ones_absent() {
        let r = read_str(
            "{\"sent_at_ms\":5.0,\"ttft_ms\":12.5,\"status\":\"ok\",\"rx_stamp_ns\":7,\"new\":{\"a\":1}}\n\
             {\"sent_at_ms\":6.0,\"status\":\"error\",\"error\":{\"kind\":\"timeout\",\"message\":\"x\"}}\n",
        )
        .unwrap();
        assert_eq!(r.requests.len(), 2);
        assert_eq!(r.requests[0].ttft_ms, Some(12.5));
        assert!(r.requests[0].ok && r.requests[0].kernel.is_none());
        assert_eq!(r.requests[1].error_kind.as_deref(), Some("timeout"));
        assert!(r.notes.is_empty());
    }

    #[test]
    fn an_rx_kind_this_report_does_not_know_is_a_bound_and_named() {
        // Another version's kind, and an `rx` naming none for a time the record has: never
        // exact (they read as exact before).
        let r = read_str(
            "{\"sent_at_ms\":1,\"status\":\"ok\",\"ttfb_ms\":1,\"ttft_ms\":2,\"e2e_ms\":3,\
             \"rx\":{\"head\":\"kernel\",\"first_token\":\"nic_hw\",\"token_events_bound\":0}}\n",
        )
        .unwrap();
        let q = &r.requests[0];
        assert_eq!(q.ttfb_rx, Some(RxKind::Kernel));
        assert_eq!(q.ttft_rx, Some(RxKind::Unknown));
        assert_eq!(q.e2e_rx, Some(RxKind::Unknown), "no `end` named");
        assert!(RxKind::Unknown.is_bound());
        assert_eq!(r.notes.len(), 1, "{:?}", r.notes);
        assert!(
            r.notes[0].contains("does not know: \"nic_hw\" ×1;"),
            "{:?}",
            r.notes
        );
    }

    #[test]
    fn a_bad_line_names_its_line_and_field_but_a_cut_last_line_is_noted() {
        let err = read_str("{\"sent_at_ms\":1}\n{\"ttft_ms\":\"fast\"}\n").unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.ends_with(":2: field \"ttft_ms\": invalid type: string \"fast\", expected f64"),
            "{msg}"
        );
        let r = read_str("{\"sent_at_ms\":1}\n{\"sent_at_ms\":2,\"ttf").unwrap();
        assert_eq!(r.requests.len(), 1);
        assert!(
            r.notes[0].contains(":2: the last line is cut short"),
            "{:?}",
            r.notes
        );
    }

    #[test]
    fn a_pages_runs_share_one_budget_of_records() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("records.jsonl");
        let lines: String = (0..3)
            .map(|i| format!("{{\"sent_at_ms\":{i},\"status\":\"ok\"}}\n"))
            .collect();
        std::fs::write(&path, lines).unwrap();
        let mut budget = RecordBudget { left: 4 };
        assert_eq!(read_within(&path, &mut budget).unwrap().requests.len(), 3);
        // The second run gets what the first left: one record, and its note says why.
        let second = read_within(&path, &mut budget).unwrap();
        assert_eq!((second.requests.len(), second.left_out), (1, 2));
        assert!(
            second.notes[0].contains("at most, over all its runs"),
            "{:?}",
            second.notes
        );
        assert_eq!(read_within(&path, &mut budget).unwrap().requests.len(), 0);
    }

    #[test]
    fn past_the_cap_records_are_left_out_and_a_note_says_how_many() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("records.jsonl");
        let lines: String = (0..10)
            .map(|i| format!("{{\"sent_at_ms\":{i},\"status\":\"ok\"}}\n"))
            .collect();
        std::fs::write(&path, lines + "{\"ttft_ms\":\"x\"}\n").unwrap();
        // A damaged line past the cap still names itself.
        let e = read_at_most(&path, 4).unwrap_err().to_string();
        assert!(e.contains(":11: field \"ttft_ms\""), "{e}");
        let lines: String = (0..10)
            .map(|i| format!("{{\"sent_at_ms\":{i},\"status\":\"ok\"}}\n"))
            .collect();
        std::fs::write(&path, lines).unwrap();
        let r = read_at_most(&path, 4).unwrap();
        assert_eq!(r.requests.len(), 4);
        assert_eq!(r.left_out, 6);
        assert_eq!(r.requests[3].sent_ms, 3.0);
        assert!(
            r.notes[0].contains("the first 4 records are drawn and counted here, the last 6"),
            "{:?}",
            r.notes
        );
    }
}

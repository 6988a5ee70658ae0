//! Every latency canaryd reports, checked from both sides against the simulator's ground truth.
//!
//! The sim runs in this test's single-threaded runtime and records, on the client's clock, when
//! each of its writes returned. On one thread the client reads an event only after that write
//! and its timestamp, so each read time lies at or after the server's. The kernel stamps the
//! bytes inside that write (loopback delivers them before it returns), so a kernel receive time
//! lies after the write *began*: after the sim's previous write returned, after a stall it slept
//! before this one, after the engine produced the token; and never after canaryd's read. Upper
//! bounds come from what the server did next, never from how fast this machine is: with one
//! request at a time, the next request reaches the server after canaryd ended the previous one;
//! and a stall of `STALL_MS` after chunk `k` leaves the client that long to read chunk `k`
//! before chunk `k + 1` exists. A client that timestamped the wrong event (the head for the
//! first token, the schedule for the send, a gap on the wrong chunk) falls outside these bounds;
//! a slow one does not.

use crate::support::*;
use canary_core::{RequestRecord, Status};
use canary_sim::TruthRecord;

/// Output tokens per request.
const TOKENS: u32 = 6;
/// How long the server stops writing after chunk `k`.
const STALL_MS: f64 = 600.0;
/// How long the server waits before its response head: TTFT well above noise.
const STALL_FIRST_MS: f64 = 50.0;
/// Prefill time: the head goes out after `STALL_FIRST_MS`, the first token only after this,
/// so a TTFT taken at the head is caught.
const PREFILL_MS: f64 = 250.0;
/// Float slack for times rebuilt from ms fields (ns).
const ROUNDING_NS: f64 = 1e3;

/// A request's client-side times and figures on one clock, times as absolute monotonic ns,
/// rebuilt from its record.
struct ClientTimes {
    sent: f64,
    head: f64,
    /// Token chunk `k` (1-based) was received at `tokens[k - 1]`.
    tokens: Vec<f64>,
    end: f64,
    ttft: f64,
    ttst: f64,
    gaps: Vec<f64>,
    max_gap: f64,
    e2e: f64,
    itl: f64,
}

impl ClientTimes {
    /// The record's own figures: the kernel's receive times.
    fn kernel(r: &RequestRecord, t0_ns: f64) -> ClientTimes {
        let gaps = r.chunk_gaps_ms.clone().expect("--record-chunks");
        ClientTimes::new(
            r,
            t0_ns,
            [
                r.ttfb_ms,
                r.ttft_ms,
                r.ttst_ms,
                r.max_chunk_gap_ms,
                r.e2e_ms,
                r.itl_ms,
            ],
            gaps,
        )
    }

    /// canaryd's reads, kept beside them.
    fn read(r: &RequestRecord, t0_ns: f64) -> ClientTimes {
        let u = &r.rx.as_ref().expect("receive timestamps on").userspace;
        let gaps = u.chunk_gaps_ms.clone().expect("--record-chunks");
        ClientTimes::new(
            r,
            t0_ns,
            [
                u.ttfb_ms,
                u.ttft_ms,
                u.ttst_ms,
                u.max_chunk_gap_ms,
                u.e2e_ms,
                u.itl_ms,
            ],
            gaps,
        )
    }

    fn new(r: &RequestRecord, t0_ns: f64, figures: [Option<f64>; 6], gaps: Vec<f64>) -> Self {
        let [ttfb, ttft, ttst, max_gap, e2e, itl] = figures.map(Option::unwrap);
        let sent = t0_ns + r.sent_at_ms * 1e6;
        let mut at = sent + ttft * 1e6;
        let mut tokens = vec![at];
        for gap in &gaps {
            at += gap * 1e6;
            tokens.push(at);
        }
        ClientTimes {
            sent,
            head: sent + ttfb * 1e6,
            tokens,
            end: sent + e2e * 1e6,
            ttft,
            ttst,
            gaps,
            max_gap,
            e2e,
            itl,
        }
    }
}

/// The earliest the sim can have begun the write that returned at `written`: after the
/// request arrived and the head stall, for the head; else after its previous write returned,
/// after the stall when this write is the one the stall held back (`w[k]`), and after the
/// engine produced the first token.
fn write_began(tr: &TruthRecord, written: f64, after_stall: f64) -> f64 {
    let first_byte = tr.first_byte_ns.unwrap() as f64;
    if written <= first_byte {
        return tr.arrival_ns as f64 + STALL_FIRST_MS * 1e6;
    }
    let previous = std::iter::once(first_byte)
        .chain(tr.chunk_ns.iter().map(|&ns| ns as f64))
        .filter(|&x| x < written)
        .fold(first_byte, f64::max);
    let stall = if written == after_stall {
        STALL_MS * 1e6
    } else {
        0.0
    };
    (previous + stall).max(tr.engine_first_token_ns.unwrap() as f64)
}

/// `a <= b` up to float rounding, with both values in the message.
#[track_caller]
fn before(a: f64, b: f64, what: &str) {
    assert!(
        a <= b + ROUNDING_NS,
        "{what}: {a} ns is {:.3} ms after {b} ns",
        (a - b) / 1e6
    );
}

#[tokio::test]
async fn every_latency_lies_between_the_servers_write_and_its_next_step() {
    // The stall after the first chunk makes TTST long; after the third, it is the largest
    // inter-chunk gap, on the third gap and not on TTST.
    for k in [1, 3] {
        stalled_after(k).await;
    }
}

/// Three requests, one at a time, each stalled by the server after its `k`-th token chunk.
async fn stalled_after(k: usize) {
    // The fast profile (no decode time) with a long prefill.
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("profile.json");
    std::fs::write(
        &profile,
        format!(
            r#"{{"profile": "fast", "prefill_overhead_us": {}}}"#,
            PREFILL_MS * 1e3
        ),
    )
    .unwrap();
    let sim = sim(&["--profile", profile.to_str().unwrap()]).await;
    let mut t = target(&sim);
    t.headers.push(header(
        "x-sim-fault",
        &format!("stall_first_ms={STALL_FIRST_MS},stall_mid_ms={STALL_MS},at={k}"),
    ));
    let run = replay(requests(3, 64, TOKENS), t, |c| {
        c.concurrency = Some(1);
        c.record_chunks = true;
        // The client on this test's one thread, beside the sim (see the top).
        c.own_runtime = false;
    })
    .await;
    let truth = sim.truth();
    let by_id = truth_by_request_id(&truth, &run.run_id);
    let t0 = run.outcome.t0_monotonic_ns as f64;
    let mut records = run.records.clone();
    records.sort_by(|a, b| a.sent_at_ms.total_cmp(&b.sent_at_ms));
    assert_eq!(records.len(), 3);

    for (i, r) in records.iter().enumerate() {
        let id = r.id;
        assert_eq!(r.status, Status::Ok, "{:?}", r.error);
        let tr = by_id[&id];
        let n = r.usage.as_ref().unwrap().completion_tokens.unwrap();
        assert_eq!((n, r.chunks), (TOKENS, TOKENS), "request {id}");
        // Chat: the role chunk, TOKENS token chunks, finish, usage, [DONE].
        assert_eq!(tr.chunk_ns.len(), TOKENS as usize + 4, "{tr:?}");
        let w: Vec<f64> = tr.chunk_ns[1..=TOKENS as usize]
            .iter()
            .map(|&ns| ns as f64)
            .collect();
        assert!(
            w[k] - w[k - 1] >= STALL_MS * 1e6,
            "the sim stalled after chunk {k}: {tr:?}"
        );
        // The prefill keeps the head and the first token apart.
        let first_byte = tr.first_byte_ns.unwrap() as f64;
        assert!(
            w[0] - first_byte >= (PREFILL_MS - STALL_FIRST_MS) * 1e6 / 2.0,
            "{tr:?}"
        );
        let next_arrival = records
            .get(i + 1)
            .map(|next| by_id[&next.id].arrival_ns as f64);
        let prev_end = (i > 0).then(|| by_id[&records[i - 1].id].end_ns as f64);

        let read = ClientTimes::read(r, t0);
        let kernel = ClientTimes::kernel(r, t0);
        // canaryd's reads: each at or after the write that returned the event.
        check(r, tr, &read, &w, k, prev_end, next_arrival, |written| {
            written
        });
        // The kernel's receive times: each after its write began, none after its read.
        let began = |written: f64| write_began(tr, written, w[k]);
        check(r, tr, &kernel, &w, k, prev_end, next_arrival, began);
        before(kernel.head, read.head, "head: kernel vs read");
        before(kernel.end, read.end, "end: kernel vs read");
        for (j, (kj, cj)) in kernel.tokens.iter().zip(&read.tokens).enumerate() {
            before(
                *kj,
                *cj,
                &format!("request {id} chunk {}: kernel vs read", j + 1),
            );
        }
        // The record's derived figures come from the kernel's times, as documented.
        assert_same(
            r.output_tokens_per_s.unwrap(),
            1000.0 / kernel.itl,
            "tokens/s formula",
        );
    }
}

/// The bounds on one clock. `lower` turns the time a write of the sim returned into the
/// earliest this clock can have seen the bytes it wrote.
#[allow(clippy::too_many_arguments)]
fn check(
    r: &RequestRecord,
    tr: &TruthRecord,
    c: &ClientTimes,
    w: &[f64],
    k: usize,
    prev_end: Option<f64>,
    next_arrival: Option<f64>,
    lower: impl Fn(f64) -> f64,
) {
    let id = r.id;
    assert_eq!(c.tokens.len(), TOKENS as usize);
    // The head: after the server wrote it, before the first token was written.
    let first_byte = tr.first_byte_ns.unwrap() as f64;
    before(lower(first_byte), c.head, "head written vs received");
    before(c.head, w[0], "head received vs first token written");

    // The send: not after the server parsed the request, and (one at a time) not before
    // the server finished the previous one.
    before(c.sent, tr.arrival_ns as f64, "sent vs the server's arrival");
    if let Some(prev_end) = prev_end {
        before(prev_end, c.sent, "previous end vs this send");
    }
    // Each token chunk: received after the server wrote it, before the server wrote anything
    // after the stall (for chunks up to k) or before the response ended on the client.
    for (j, (&cj, &wj)) in c.tokens.iter().zip(w).enumerate() {
        before(
            lower(wj),
            cj,
            &format!("request {id} chunk {} written vs received", j + 1),
        );
        before(cj, c.end, &format!("request {id} chunk {} vs end", j + 1));
        if j < k {
            before(
                cj,
                w[k],
                &format!("request {id} chunk {} vs chunk after stall", j + 1),
            );
        }
    }
    // The end: after the server's [DONE], before the next request reached the server.
    before(lower(tr.end_ns as f64), c.end, "[DONE] written vs received");
    if let Some(next) = next_arrival {
        before(c.end, next, "end vs next arrival");
    }

    // The same bounds in each metric's own terms.
    let arrival = tr.arrival_ns as f64;
    assert!(
        w[0] - arrival >= STALL_FIRST_MS * 1e6,
        "the sim stalled its head: {tr:?}"
    );
    before(lower(w[0]) - arrival, c.ttft * 1e6, "TTFT vs truth");
    if let Some(prev_end) = prev_end {
        // Sent after the previous end, first token received before the post-stall write.
        before(c.ttft * 1e6, w[k] - prev_end, "TTFT upper bound");
    }
    assert_eq!(c.ttst, c.gaps[0], "TTST is the first gap");
    // From chunk 1's arrival to chunk 2's write at least; at most from chunk 1's write to the
    // latest chunk 2 can have been received.
    let second_by = if k > 1 { w[k] } else { c.end };
    before(lower(w[1]) - c.tokens[0], c.ttst * 1e6, "TTST lower bound");
    before(c.ttst * 1e6, second_by - lower(w[0]), "TTST upper bound");
    assert_eq!(c.max_gap, c.gaps.iter().copied().fold(f64::MIN, f64::max));
    let at = c.gaps.iter().position(|&g| g == c.max_gap).unwrap();
    assert_eq!(
        at,
        k - 1,
        "the stall is the gap after chunk {k}: {:?}",
        c.gaps
    );
    // At least from chunk k's arrival to the write after the stall; at most from chunk k's
    // to the end.
    before(
        lower(w[k]) - c.tokens[k - 1],
        c.max_gap * 1e6,
        "max gap vs the stall",
    );
    before(
        c.tokens[k - 1] + c.max_gap * 1e6,
        c.end,
        "the gap ends within the response",
    );
    before(
        lower(tr.end_ns as f64) - arrival,
        c.e2e * 1e6,
        "truth e2e vs client e2e",
    );
    // Derived figures, exactly as documented.
    let n = r.usage.as_ref().unwrap().completion_tokens.unwrap();
    assert_same(c.itl, (c.e2e - c.ttft) / f64::from(n - 1), "ITL formula");
}

//! Every latency canaryd reports, checked from both sides against the simulator's ground truth.
//!
//! The sim runs in this test's single-threaded runtime and records, on the client's clock, when
//! each of its writes returned. On one thread the client reads an event only after that write
//! and its timestamp, so each client time lies at or after the server's. Upper bounds come from
//! what the server did next, never from how fast this machine is: with one request at a time,
//! the next request reaches the server after canaryd ended the previous one; and a stall of
//! `STALL_MS` after chunk `k` leaves the client that long to read chunk `k` before chunk `k + 1`
//! exists. A client that timestamped the wrong event (the head for the first token, the schedule
//! for the send, a gap on the wrong chunk) falls outside these bounds; a slow one does not.

use crate::support::*;
use canary_core::{RequestRecord, Status};

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

/// A request's client-side times as absolute monotonic ns, rebuilt from its record.
struct ClientTimes {
    sent: f64,
    /// Token chunk `k` (1-based) was read at `tokens[k - 1]`.
    tokens: Vec<f64>,
    end: f64,
}

impl ClientTimes {
    fn of(r: &RequestRecord, t0_ns: f64) -> ClientTimes {
        let sent = t0_ns + r.sent_at_ms * 1e6;
        let mut at = sent + r.ttft_ms.unwrap() * 1e6;
        let mut tokens = vec![at];
        for gap in r.chunk_gaps_ms.as_ref().expect("--record-chunks") {
            at += gap * 1e6;
            tokens.push(at);
        }
        ClientTimes {
            sent,
            tokens,
            end: sent + r.e2e_ms.unwrap() * 1e6,
        }
    }
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
        let c = ClientTimes::of(r, t0);
        let n = r.usage.as_ref().unwrap().completion_tokens.unwrap();
        assert_eq!((n, r.chunks), (TOKENS, TOKENS), "request {id}");
        assert_eq!(c.tokens.len(), TOKENS as usize);
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

        // The head: read after the server wrote it, and before the first token was written
        // (the prefill keeps them apart).
        let first_byte = tr.first_byte_ns.unwrap() as f64;
        assert!(
            w[0] - first_byte >= (PREFILL_MS - STALL_FIRST_MS) * 1e6 / 2.0,
            "{tr:?}"
        );
        let head = c.sent + r.ttfb_ms.unwrap() * 1e6;
        before(first_byte, head, "head written vs read");
        before(head, w[0], "head read vs first token written");

        // The send: not after the server parsed the request, and (one at a time) not before
        // the server finished the previous one.
        before(c.sent, tr.arrival_ns as f64, "sent vs the server's arrival");
        if i > 0 {
            let prev = by_id[&records[i - 1].id];
            before(prev.end_ns as f64, c.sent, "previous end vs this send");
        }
        // Each token chunk: read after the server wrote it, before the server wrote anything
        // after the stall (for chunks up to k) or before the response ended on the client.
        for (j, (&cj, &wj)) in c.tokens.iter().zip(&w).enumerate() {
            before(
                wj,
                cj,
                &format!("request {id} chunk {} written vs read", j + 1),
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
        before(tr.end_ns as f64, c.end, "[DONE] written vs read");
        if let Some(next) = records.get(i + 1) {
            before(
                c.end,
                by_id[&next.id].arrival_ns as f64,
                "end vs next arrival",
            );
        }

        // The same bounds in each metric's own terms.
        let ttft = r.ttft_ms.unwrap();
        let truth_ttft = (w[0] - tr.arrival_ns as f64) / 1e6;
        assert!(
            truth_ttft >= STALL_FIRST_MS,
            "the sim stalled its head: {tr:?}"
        );
        assert!(
            ttft * 1e6 + ROUNDING_NS >= truth_ttft * 1e6,
            "{ttft} < truth {truth_ttft}"
        );
        if i > 0 {
            // Sent after the previous end, first token read before the post-stall write.
            let prev_end = by_id[&records[i - 1].id].end_ns as f64;
            let most = (w[k] - prev_end) / 1e6;
            assert!(ttft <= most + 1e-3, "TTFT {ttft} ms > {most} ms");
        }
        let gaps = r.chunk_gaps_ms.as_ref().unwrap();
        let ttst = r.ttst_ms.unwrap();
        assert_eq!(ttst, gaps[0], "TTST is the first gap");
        // From chunk 1's read to chunk 2's write at least; at most from chunk 1's write to the
        // latest chunk 2 can have been read.
        let second_by = if k > 1 { w[k] } else { c.end };
        before(w[1] - c.tokens[0], ttst * 1e6, "TTST lower bound");
        before(ttst * 1e6, second_by - w[0], "TTST upper bound");
        let max = r.max_chunk_gap_ms.unwrap();
        assert_eq!(max, gaps.iter().copied().fold(f64::MIN, f64::max));
        let at = gaps.iter().position(|&g| g == max).unwrap();
        assert_eq!(at, k - 1, "the stall is the gap after chunk {k}: {gaps:?}");
        // At least the stall, less what the client took to read chunk k (from the truth);
        // at most from chunk k's write to the end.
        let read_delay = c.tokens[k - 1] - w[k - 1];
        assert!(
            max * 1e6 + ROUNDING_NS >= w[k] - w[k - 1] - read_delay,
            "max gap {max} ms, stall {STALL_MS} ms, chunk {k} read {:.3} ms late",
            read_delay / 1e6
        );
        assert!(max >= STALL_MS - read_delay / 1e6 - 1e-3);
        before(
            c.tokens[k - 1] + max * 1e6,
            c.end,
            "the gap ends within the response",
        );
        let e2e = r.e2e_ms.unwrap();
        before(
            tr.end_ns as f64 - tr.arrival_ns as f64,
            e2e * 1e6,
            "truth e2e vs client e2e",
        );

        // Derived figures, exactly as documented.
        let itl = r.itl_ms.unwrap();
        assert_same(itl, (e2e - ttft) / f64::from(n - 1), "ITL formula");
        assert_same(
            r.output_tokens_per_s.unwrap(),
            1000.0 / itl,
            "tokens/s formula",
        );
    }
}

//! vLLM's request phase histograms (queue, prefill, decode, inference) are exact: their sums
//! equal what the truth records, and "queueing dominates TTFT" shows when it does.

use canary_sim::TruthRecord;

use crate::client::{completion_body, metric, request};
use crate::sim_with;

fn secs(a: u64, b: u64) -> f64 {
    (b - a) as f64 / 1e9
}

/// Sums over requests, in the order they finished (the order /metrics added them).
fn sum(truth: &[TruthRecord], f: impl Fn(&TruthRecord) -> f64) -> f64 {
    let mut by_end: Vec<&TruthRecord> = truth.iter().collect();
    by_end.sort_by_key(|t| t.end_ns);
    by_end.into_iter().map(f).sum()
}

#[tokio::test]
async fn phase_histograms_match_the_truth() {
    // One slot; 20 ms of prefill overhead and 10 ms steps.
    let sim = sim_with(|c| {
        c.profile.max_running = 1;
        c.profile.prefill_overhead_us = 20_000.0;
        c.profile.decode_base_us = 10_000.0;
    })
    .await;
    let addr = sim.addr;
    let send = |p: &'static str| {
        tokio::spawn(async move {
            request(
                addr,
                "POST",
                "/v1/completions",
                &[],
                &completion_body(p, 5, true),
            )
            .await
        })
    };
    let first = send("a b c");
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let second = send("d e f");
    assert_eq!(first.await.unwrap().status, 200);
    assert_eq!(second.await.unwrap().status, 200);
    let m = request(addr, "GET", "/metrics", &[], "").await.text();
    let truth = sim.truth();
    assert_eq!(truth.len(), 2);
    for t in &truth {
        let (admitted, first, last) = (
            t.admitted_ns.unwrap(),
            t.engine_first_token_ns.unwrap(),
            t.engine_last_token_ns.unwrap(),
        );
        // Prefill = its prefill step: 20 ms + a 10 ms decode; then 4 more 10 ms steps. That is
        // virtual time: on the wall clock an engine that fell behind catches up by up to 5 ms.
        assert!(secs(admitted, first) >= 0.020, "{t:?}");
        assert!(secs(first, last) >= 0.030, "{t:?}");
        assert!(t.first_token_ns.unwrap() >= first && t.end_ns >= last);
    }
    let close = |name: &str, want: f64| {
        let got = metric(&m, &format!("{name}_sum"));
        assert!((got - want).abs() < 1e-9, "{name}: {got} vs truth {want}");
        assert_eq!(metric(&m, &format!("{name}_count")), 2.0, "{name}");
    };
    // Queued from the body's arrival: the upload before it is the client's, not the engine's.
    close(
        "vllm:request_queue_time_seconds",
        sum(&truth, |t| {
            secs(t.body_received_ns.max(t.arrival_ns), t.admitted_ns.unwrap())
        }),
    );
    close(
        "vllm:request_prefill_time_seconds",
        sum(&truth, |t| {
            secs(t.admitted_ns.unwrap(), t.engine_first_token_ns.unwrap())
        }),
    );
    close(
        "vllm:request_decode_time_seconds",
        sum(&truth, |t| {
            secs(
                t.engine_first_token_ns.unwrap(),
                t.engine_last_token_ns.unwrap(),
            )
        }),
    );
    close(
        "vllm:request_inference_time_seconds",
        sum(&truth, |t| {
            secs(t.admitted_ns.unwrap(), t.engine_last_token_ns.unwrap())
        }),
    );
    close(
        "vllm:time_to_first_token_seconds",
        sum(&truth, |t| secs(t.arrival_ns, t.first_token_ns.unwrap())),
    );
    // The second request waited for the first one's whole run: its queue time dominates its
    // TTFT, which is what a "queueing" diagnosis reads from these histograms.
    let mut by_arrival = truth.clone();
    by_arrival.sort_by_key(|t| t.arrival_ns);
    let late = &by_arrival[1];
    let queue = secs(late.arrival_ns, late.admitted_ns.unwrap());
    let ttft = secs(late.arrival_ns, late.first_token_ns.unwrap());
    assert!(queue > 0.5 * ttft, "queue {queue} of TTFT {ttft}");
    assert!(late.admitted_ns.unwrap() >= by_arrival[0].engine_last_token_ns.unwrap());
}

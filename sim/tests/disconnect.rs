//! Clients that leave: the sim notices, aborts the sequence (batch slot and KV freed) and its
//! ground truth says so.

use crate::client::{completion_body, count, labelled, metric, read_until, wait_metrics};
use crate::{first_record, sim_with, truth_once};

/// 5 ms steps: a 2,000-token request would run for 10 s if nobody aborted it.
const LONG: u32 = 2_000;

fn slow(c: &mut canary_sim::Config) {
    c.profile.decode_base_us = 5_000.0;
}

/// Token chunks of a completions stream (every output word has a leading space).
const TOKEN: &str = "\"text\":\" ";

#[tokio::test]
async fn a_client_leaving_mid_stream_is_seen_and_freed() {
    let sim = sim_with(slow).await;
    let body = completion_body("a b c d e f", LONG, true);
    let headers = [("x-request-id", "leaver")];
    let (stream, got, _) = read_until(sim.addr, "/v1/completions", &headers, &body, |b| {
        count(b, TOKEN) >= 5
    })
    .await;
    let read = count(&got, TOKEN) as u32;
    assert!(read >= 5);
    let (m, _) = wait_metrics(sim.addr, 1.0, |m| {
        metric(m, "vllm:num_requests_running") == 1.0
    })
    .await;
    assert!(metric(&m, "vllm:kv_cache_usage_perc") > 0.0);
    drop(stream);
    // Without the abort the sequence would hold its slot for another ~10 s.
    let (m, idle) = wait_metrics(sim.addr, 3.0, |m| {
        metric(m, "vllm:num_requests_running") == 0.0
    })
    .await;
    assert!(idle, "the sequence still runs after its client left:\n{m}");
    assert_eq!(metric(&m, "vllm:kv_cache_usage_perc"), 0.0);
    assert_eq!(metric(&m, "vllm:num_requests_waiting"), 0.0);
    assert_eq!(
        labelled(
            &m,
            "vllm:request_success_total",
            "finished_reason=\"abort\""
        ),
        1.0
    );
    let t = &sim.truth()[0];
    assert_eq!(t.request_id.as_deref(), Some("leaver"));
    assert!(t.disconnected, "{t:?}");
    assert_eq!(t.status, 200);
    assert!(t.error.as_deref().unwrap().contains("closed"), "{t:?}");
    // It wrote at least what the client read, and the engine stopped long before the end.
    assert!(
        (read..LONG / 2).contains(&t.completion_tokens),
        "{}",
        t.completion_tokens
    );
    assert!(t.generated_tokens >= t.completion_tokens && t.generated_tokens < LONG / 2);
    let noticed = t.disconnect_ns.unwrap();
    assert!(noticed >= *t.chunk_ns.last().unwrap());
    assert_eq!(t.end_ns, noticed);
    // Counted as served: what it wrote, no more.
    assert_eq!(
        metric(&m, "vllm:generation_tokens_total"),
        t.completion_tokens as f64
    );
}

#[tokio::test]
async fn a_client_leaving_before_its_first_token_leaves_the_queue_at_once() {
    let sim = sim_with(|c| {
        slow(c);
        c.profile.max_running = 1;
    })
    .await;
    let addr = sim.addr;
    let body = completion_body("a b", LONG, true);
    // The first request holds the only slot.
    let (first, _, _) = read_until(addr, "/v1/completions", &[], &body, |b| {
        count(b, TOKEN) >= 1
    })
    .await;
    // Two wait behind it; the client of the second one in line gives up.
    let headers = |id| [("x-request-id", id)];
    let (next, _, _) = read_until(addr, "/v1/completions", &headers("next"), &body, |_| true).await;
    let (_, queued) =
        wait_metrics(addr, 2.0, |m| metric(m, "vllm:num_requests_waiting") == 1.0).await;
    assert!(queued);
    let (leaver, got, _) =
        read_until(addr, "/v1/completions", &headers("leaver"), &body, |_| true).await;
    assert!(got.is_empty());
    let (_, queued) =
        wait_metrics(addr, 2.0, |m| metric(m, "vllm:num_requests_waiting") == 2.0).await;
    assert!(queued);
    drop(leaver);
    // Before, it stayed in the queue (and in num_requests_waiting) until it reached the front,
    // here after the first request's ~10 s.
    let (m, gone) =
        wait_metrics(addr, 1.0, |m| metric(m, "vllm:num_requests_waiting") == 1.0).await;
    assert!(gone, "still waiting:\n{m}");
    assert_eq!(metric(&m, "vllm:num_requests_running"), 1.0);
    let truth = sim.truth();
    let t = &truth[0];
    assert_eq!(t.request_id.as_deref(), Some("leaver"));
    assert!(t.disconnected && t.admitted_ns.is_none(), "{t:?}");
    // A stream's head goes out at once (as vLLM's does); nothing else did.
    assert_eq!(
        (t.status, t.completion_tokens, t.generated_tokens),
        (200, 0, 0)
    );
    assert!(t.first_byte_ns.is_some() && t.chunk_ns.is_empty());
    assert!(t.disconnect_ns.unwrap() > t.arrival_ns);
    drop(next);
    let (_, gone) =
        wait_metrics(addr, 1.0, |m| metric(m, "vllm:num_requests_waiting") == 0.0).await;
    assert!(gone);
    drop(first);
    let (_, idle) = wait_metrics(addr, 3.0, |m| {
        metric(m, "vllm:num_requests_running") == 0.0
            && metric(m, "vllm:kv_cache_usage_perc") == 0.0
    })
    .await;
    assert!(idle);
    // The slot is free again: a new request is served at once.
    let (_, got, _) = read_until(
        addr,
        "/v1/completions",
        &[],
        &completion_body("z", 3, true),
        |b| count(b, "[DONE]") == 1,
    )
    .await;
    assert_eq!(count(&got, TOKEN), 3);
    let truth = truth_once(&sim, "the served request's record", |t| {
        t.iter().any(|r| !r.disconnected)
    })
    .await;
    assert_eq!(truth.iter().filter(|t| t.disconnected).count(), 3);
    assert!(!truth.last().unwrap().disconnected);
}

#[tokio::test]
async fn a_non_streaming_client_leaving_is_seen_too() {
    let sim = sim_with(slow).await;
    let body = completion_body("a b", LONG, false);
    let (stream, _, _) = read_until(sim.addr, "/v1/completions", &[], &body, |_| true).await;
    let (_, running) = wait_metrics(sim.addr, 2.0, |m| {
        metric(m, "vllm:num_requests_running") == 1.0
    })
    .await;
    assert!(running);
    drop(stream);
    let (m, idle) = wait_metrics(sim.addr, 3.0, |m| {
        metric(m, "vllm:num_requests_running") == 0.0
    })
    .await;
    assert!(idle, "{m}");
    let t = &sim.truth()[0];
    assert!(t.disconnected && !t.stream);
    assert!(t.generated_tokens > 0 && t.generated_tokens < LONG / 2);
}

#[tokio::test]
async fn a_client_leaving_during_a_stall_is_seen() {
    let sim = sim_with(slow).await;
    let body = completion_body("a b", LONG, true);
    let headers = [
        ("x-request-id", "stalled"),
        ("x-sim-fault", "stall_first_ms=600000"),
    ];
    let (stream, got, _) = read_until(sim.addr, "/v1/completions", &headers, &body, |_| true).await;
    assert!(got.is_empty());
    let (_, running) = wait_metrics(sim.addr, 2.0, |m| {
        metric(m, "vllm:num_requests_running") == 1.0
    })
    .await;
    assert!(running);
    drop(stream);
    // Before, the stall slept its ten minutes for a client long gone.
    let t = first_record(&sim)
        .await
        .expect("the stall outlived its client");
    assert_eq!(t.request_id.as_deref(), Some("stalled"));
    assert!(t.disconnected, "{t:?}");
    assert!(t.error.as_deref().unwrap().contains("closed"), "{t:?}");
    assert_eq!(
        (t.status, t.first_byte_ns),
        (0, None),
        "stalled before the head"
    );
    assert!(t.generated_tokens < LONG / 2, "{t:?}");
    let (m, idle) = wait_metrics(sim.addr, 3.0, |m| {
        metric(m, "vllm:num_requests_running") == 0.0
    })
    .await;
    assert!(idle, "{m}");
}

//! A slow link (`net_delay_ms`): the client sees the delay, the server's own figures do not.

use std::time::Duration;

use canary_sim::{FaultInjector, FaultPlan};

use crate::client::{chat_body, completion_body, count, metric, read_until, request, wait_metrics};
use crate::{first_record, sim, sim_with};

const DELAY_MS: u64 = 150;

/// Streams a chat request; returns the client's TTFT (request written → first token read)
/// and the sim's TTFT for it from `/metrics` (one request per sim).
async fn ttft_pair(fault: Option<&str>) -> (f64, f64, canary_sim::SimHandle) {
    let sim = sim_with(|c| c.profile.decode_base_us = 2_000.0).await;
    let headers: Vec<(&str, &str)> = fault.map(|f| ("x-sim-fault", f)).into_iter().collect();
    let body = chat_body("how far away are you", 5, true);
    let (mut stream, mut got, ttft) =
        read_until(sim.addr, "/v1/chat/completions", &headers, &body, |b| {
            count(b, "\"content\":\" ") >= 1
        })
        .await;
    // Read the rest, to [DONE].
    let mut tmp = [0u8; 4096];
    while count(&got, "[DONE]") == 0 {
        use tokio::io::AsyncReadExt;
        let n = stream.read(&mut tmp).await.unwrap();
        assert!(n > 0, "{}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&tmp[..n]);
    }
    assert_eq!(count(&got, "\"content\":\" "), 5);
    // The record and the metrics are written once the last event went out: wait for both.
    first_record(&sim).await.expect("the request's record");
    let (m, _) = wait_metrics(sim.addr, 30.0, |m| {
        metric(m, "vllm:time_to_first_token_seconds_count") >= 1.0
    })
    .await;
    assert_eq!(metric(&m, "vllm:time_to_first_token_seconds_count"), 1.0);
    let server = metric(&m, "vllm:time_to_first_token_seconds_sum");
    (ttft.as_secs_f64(), server, sim)
}

#[tokio::test]
async fn the_client_sees_the_delay_and_the_server_figures_do_not() {
    let (client, server, sim) = ttft_pair(Some("net_delay_ms=150")).await;
    let gap = client - server;
    // At least the delay: server figures that counted it would leave no gap. The upper bound
    // only says the delay was not repeated beyond reason: it is wide, since a loaded host can
    // stall the client's read (the exact checks are on the truth below).
    assert!(
        (0.150..1.150).contains(&gap),
        "client TTFT {client:.4} s, server {server:.4} s"
    );
    let t = &sim.truth()[0];
    let nd = t.net_delay.as_ref().expect("net_delay times");
    assert_eq!(nd.delay_ms, DELAY_MS);
    assert_eq!(t.fault.as_deref(), Some("net_delay_ms=150"));
    // The top-level times are when the delayed writes reached the socket.
    let first = t.first_token_ns.unwrap() - nd.first_token_ns.unwrap();
    assert!(first >= DELAY_MS * 1_000_000, "{first} ns");
    assert_eq!(
        (server * 1e9).round() as u64,
        nd.first_token_ns.unwrap() - t.arrival_ns,
        "the server's TTFT is the produced time's"
    );
    // Every event went out, keeping its spacing: a delay, not a stall per write.
    assert_eq!(t.chunk_ns.len(), nd.chunk_ns.len());
    assert_eq!(t.completion_tokens, 5);
    let span = |v: &[u64]| v.last().unwrap() - v[0];
    let stretch = span(&t.chunk_ns) as i64 - span(&nd.chunk_ns) as i64;
    assert!(stretch.abs() < 50_000_000, "stretched by {stretch} ns");
    // The tokens were produced over several engine steps (so the stretch check above is
    // not vacuous); how far apart depends on the host's load, as the engine catches up
    // after a busy spell, so no figure is asserted.
    assert!(span(&nd.chunk_ns) > 0);
    let m = request(sim.addr, "GET", "/metrics", &[], "").await.text();
    let e2e = metric(&m, "vllm:e2e_request_latency_seconds_sum");
    assert_eq!((e2e * 1e9).round() as u64, nd.end_ns - t.arrival_ns);
    assert!(t.end_ns - nd.end_ns >= DELAY_MS * 1_000_000);
}

#[tokio::test]
async fn without_the_fault_client_and_server_agree() {
    let (client, server, sim) = ttft_pair(None).await;
    assert!(
        client - server < 0.1,
        "client TTFT {client:.4} s, server {server:.4} s"
    );
    assert!(sim.truth()[0].net_delay.is_none());
}

#[tokio::test]
async fn server_wide_and_non_streaming() {
    let sim = sim_with(|c| {
        c.faults = FaultInjector {
            rate: 1.0,
            mix: vec![FaultPlan::parse("net_delay_ms=80").unwrap()],
            seed: 0,
        }
    })
    .await;
    let started = std::time::Instant::now();
    let r = request(
        sim.addr,
        "POST",
        "/v1/completions",
        &[],
        &completion_body("a b", 3, false),
    )
    .await;
    assert!(started.elapsed() >= Duration::from_millis(80));
    assert_eq!(r.json()["usage"]["completion_tokens"], 3);
    let t = &sim.truth()[0];
    assert_eq!(t.fault.as_deref(), Some("net_delay_ms=80"));
    let nd = t.net_delay.as_ref().unwrap();
    assert!(t.end_ns - nd.end_ns >= 80_000_000);
    assert_eq!(
        t.first_byte_ns,
        Some(t.end_ns),
        "head and body in one write"
    );
    let m = request(sim.addr, "GET", "/metrics", &[], "").await.text();
    assert!(metric(&m, "vllm:e2e_request_latency_seconds_sum") < 0.08);
}

#[tokio::test]
async fn a_client_leaving_during_the_delay_got_nothing() {
    // The client leaves 100 ms into the 300 ms delay. That rests on a sleep: an attempt
    // whose client left 250 ms or more after its request (a loaded host stalled it) is
    // printed and made again, on a new sim.
    for attempt in 1..=3 {
        let sim = sim().await;
        let body = chat_body("a b", 3, true);
        let headers = [("x-sim-fault", "net_delay_ms=300")];
        let (stream, got, since_sent) =
            read_until(sim.addr, "/v1/chat/completions", &headers, &body, |_| true).await;
        let returned = std::time::Instant::now();
        assert!(got.is_empty());
        tokio::time::sleep(Duration::from_millis(100)).await;
        drop(stream);
        let left = since_sent + returned.elapsed();
        if left >= Duration::from_millis(250) {
            eprintln!("attempt {attempt}: the client left {left:?} after its request; again");
            continue;
        }
        return left_during_the_delay(&sim).await;
    }
    panic!("the client never left within 250 ms of its request in 3 attempts");
}

/// The checks of the test above, once its client left during the delay.
async fn left_during_the_delay(sim: &canary_sim::SimHandle) {
    let t = &first_record(sim).await.expect("the request's record");
    assert!(t.disconnected, "noticed during the delay: {t:?}");
    assert_eq!((t.status, t.completion_tokens), (0, 0));
    assert!(t.chunk_ns.is_empty() && t.first_byte_ns.is_none());
    let nd = t.net_delay.as_ref().unwrap();
    // Produced: role, 3 tokens, finish, usage, [DONE].
    assert_eq!(nd.chunk_ns.len(), 7);
    assert_eq!(t.generated_tokens, 3);
    let m = request(sim.addr, "GET", "/metrics", &[], "").await.text();
    assert_eq!(metric(&m, "vllm:generation_tokens_total"), 0.0);
}

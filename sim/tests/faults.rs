//! Each fault over the wire.

use serde_json::Value;

use canary_sim::{FaultInjector, FaultPlan};

use crate::client::{chat_body, completion_body, request, End};
use crate::{sim, sim_with};

const MS: u64 = 1_000_000;

async fn chat_with_fault(sim: &canary_sim::SimHandle, fault: &str, n: u32) -> crate::client::Resp {
    request(
        sim.addr,
        "POST",
        "/v1/chat/completions",
        &[("x-sim-fault", fault)],
        &chat_body("a b", n, true),
    )
    .await
}

#[tokio::test]
async fn error_statuses() {
    let sim = sim().await;
    for status in [429u16, 500, 503] {
        let r = chat_with_fault(&sim, &format!("status={status}"), 4).await;
        assert_eq!(r.status, status);
        let e = &r.json()["error"];
        assert!(e["message"].is_string() && e["type"].is_string());
        assert_eq!(e["code"], status);
    }
    let truth = sim.truth();
    assert_eq!(truth[0].fault.as_deref(), Some("status=429"));
    assert_eq!(truth[2].status, 503);
    // Failed requests never reached the engine.
    let m = request(sim.addr, "GET", "/metrics", &[], "").await.text();
    assert_eq!(
        crate::client::metric(&m, "vllm:generation_tokens_total"),
        0.0
    );
}

#[tokio::test]
async fn bad_fault_header_is_400() {
    let sim = sim().await;
    for bad in ["status=200", "explode", "stall_mid_ms=5", "reset_after=x"] {
        let r = chat_with_fault(&sim, bad, 2).await;
        assert_eq!(r.status, 400, "{bad}");
        assert!(r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("x-sim-fault"));
    }
}

#[tokio::test]
async fn reset_mid_stream() {
    let sim = sim().await;
    let r = chat_with_fault(&sim, "reset_after=3", 10).await;
    assert_eq!(r.status, 200);
    assert_ne!(r.end, End::Complete, "the chunked body must not complete");
    // What arrived before the RST is at most role + 3 tokens, and never [DONE].
    let text = r.text();
    assert!(!text.contains("[DONE]") && !text.contains("finish_reason\":\"length"));
    assert!(text.matches("\"content\":\"").count() <= 3);
    let t = &sim.truth()[0];
    assert_eq!(t.completion_tokens, 3);
    assert_eq!(t.error.as_deref(), Some("injected reset"));
    // reset_after=0 resets right after the head; a non-stream request resets before any byte.
    let r = chat_with_fault(&sim, "reset_after=0", 10).await;
    assert_ne!(r.end, End::Complete);
    let r = request(
        sim.addr,
        "POST",
        "/v1/completions",
        &[("x-sim-fault", "reset_after=1")],
        &completion_body("a", 3, false),
    )
    .await;
    assert_eq!(r.status, 0);
    assert_ne!(r.end, End::Complete);
}

#[tokio::test]
async fn stalls() {
    let sim = sim().await;
    let r = chat_with_fault(&sim, "stall_first_ms=150", 3).await;
    assert_eq!(r.events().len(), 1 + 3 + 3);
    let r = chat_with_fault(&sim, "stall_mid_ms=150,at=2", 4).await;
    assert_eq!(r.events().len(), 1 + 4 + 3);
    let truth = sim.truth();
    let t = &truth[0];
    assert!(t.first_byte_ns.unwrap() - t.body_received_ns >= 150 * MS);
    let t = &truth[1];
    // chunk_ns: role, tok1, tok2 | stall | tok3 ...
    assert!(t.chunk_ns[3] - t.chunk_ns[2] >= 150 * MS);
    assert_eq!(t.fault.as_deref(), Some("stall_mid_ms=150,at=2"));
}

#[tokio::test]
async fn malformed_chunk() {
    let sim = sim().await;
    let r = chat_with_fault(&sim, "malformed_at=2", 4).await;
    assert_eq!(r.end, End::Complete);
    let events = r.events();
    let bad: Vec<usize> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| *e != "[DONE]" && serde_json::from_str::<Value>(e).is_err())
        .map(|(i, _)| i)
        .collect();
    // Event 0 is the role chunk, so token chunk 2 is event 2.
    assert_eq!(bad, [2]);
    let r = request(
        sim.addr,
        "POST",
        "/v1/completions",
        &[("x-sim-fault", "malformed_at=1")],
        &completion_body("a", 3, false),
    )
    .await;
    assert!(serde_json::from_slice::<Value>(&r.body).is_err());
}

/// Half of a non-streaming body, cut inside a model named in non-ASCII letters, panicked the
/// connection's task (the request got no answer, its truth record was lost).
#[tokio::test]
async fn a_malformed_body_is_cut_at_a_character_boundary() {
    let model = "通义千问-模型";
    let sim = sim_with(|c| c.model = model.into()).await;
    for max_tokens in 1..=24 {
        let body = serde_json::json!({
            "model": model, "prompt": "a", "max_tokens": max_tokens, "stream": false,
        })
        .to_string();
        let r = request(
            sim.addr,
            "POST",
            "/v1/completions",
            &[("x-sim-fault", "malformed_at=1")],
            &body,
        )
        .await;
        assert_eq!(r.status, 200, "max_tokens {max_tokens}");
        assert!(serde_json::from_slice::<Value>(&r.body).is_err());
    }
}

#[tokio::test]
async fn trickled_headers() {
    let sim = sim().await;
    let r = chat_with_fault(&sim, "trickle_headers_ms=200", 2).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.events().len(), 1 + 2 + 3);
    let t = &sim.truth()[0];
    // The head's first piece went out at first_byte; the first chunk only after the last piece.
    assert!(t.first_chunk_ns.unwrap() - t.first_byte_ns.unwrap() >= 100 * MS);
    let r = request(
        sim.addr,
        "POST",
        "/v1/completions",
        &[("x-sim-fault", "status=503,trickle_headers_ms=50")],
        &completion_body("a", 3, false),
    )
    .await;
    assert_eq!(r.status, 503);
}

#[tokio::test]
async fn stream_without_done() {
    let sim = sim().await;
    let r = chat_with_fault(&sim, "no_done", 3).await;
    assert_eq!(r.end, End::Complete, "the HTTP body ends cleanly");
    let events = r.events();
    assert_eq!(events.len(), 1 + 3 + 2);
    assert!(!events.iter().any(|e| e == "[DONE]"));
    assert!(events[4].contains("\"finish_reason\":\"length\""));
}

#[tokio::test]
async fn server_wide_rate_is_seeded() {
    let run = |seed| async move {
        let sim = sim_with(|c| {
            c.faults = FaultInjector {
                rate: 0.5,
                mix: vec![
                    FaultPlan::parse("status=503").unwrap(),
                    FaultPlan::parse("status=429").unwrap(),
                ],
                seed,
            }
        })
        .await;
        let mut statuses = Vec::new();
        for _ in 0..24 {
            let r = request(
                sim.addr,
                "POST",
                "/v1/completions",
                &[],
                &completion_body("a", 1, false),
            )
            .await;
            statuses.push(r.status);
        }
        statuses
    };
    let a = run(7).await;
    assert_eq!(a, run(7).await);
    assert!(
        a.contains(&200) && (a.contains(&503) || a.contains(&429)),
        "{a:?}"
    );
    // The header overrides the server-wide draw.
    let sim = sim_with(|c| {
        c.faults = FaultInjector {
            rate: 1.0,
            mix: vec![FaultPlan::parse("status=500").unwrap()],
            seed: 1,
        }
    })
    .await;
    let r = chat_with_fault(&sim, "no_done", 1).await;
    assert_eq!(r.status, 200);
    let r = request(
        sim.addr,
        "POST",
        "/v1/completions",
        &[],
        &completion_body("a", 1, false),
    )
    .await;
    assert_eq!(r.status, 500);
}

//! KV pressure: optimistic admission preempts like vLLM, and every request still completes.

use canary_sim::{KvAdmission, SimHandle, TruthRecord};

use crate::client::{completion_body, count, metric, request, Client};
use crate::sim_with;

const USERS: usize = 8;
const MAX_TOKENS: u32 = 30;
/// Room for three requests of 10 + 30 tokens reserved up front; eight 10-token prompts fit.
const BUDGET: u64 = 120;

async fn pressure(admission: KvAdmission) -> (SimHandle, Vec<f64>) {
    let sim = sim_with(|c| {
        c.profile.decode_base_us = 1_000.0;
        c.profile.kv_budget_tokens = BUDGET;
        c.profile.kv_admission = admission;
    })
    .await;
    let addr = sim.addr;
    let users: Vec<_> = (0..USERS)
        .map(|i| {
            let prompt: Vec<String> = (0..10).map(|w| format!("u{i}w{w}")).collect();
            let body = completion_body(&prompt.join(" "), MAX_TOKENS, true);
            tokio::spawn(async move {
                request(addr, "POST", "/v1/completions", &[], &body)
                    .await
                    .text()
            })
        })
        .collect();
    let mut kv = Vec::new();
    let mut scrapes = Client::connect(addr).await;
    while !users.iter().all(|u| u.is_finished()) {
        let m = scrapes.send("GET", "/metrics", &[], "").await.text();
        kv.push(metric(&m, "vllm:kv_cache_usage_perc"));
        tokio::time::sleep(std::time::Duration::from_micros(500)).await;
    }
    for u in users {
        let text = u.await.unwrap();
        assert_eq!(count(text.as_bytes(), "\"text\":\" "), MAX_TOKENS as usize);
        assert!(text.contains("\"completion_tokens\":30"), "{text}");
        assert!(text.contains("[DONE]"));
    }
    (sim, kv)
}

/// The most requests the engine ran at once, from the truth's admission and last-token times.
fn peak_running(truth: &[TruthRecord]) -> usize {
    let mut events: Vec<(u64, i32)> = truth
        .iter()
        .flat_map(|t| {
            [
                (t.admitted_ns.unwrap(), 1),
                (t.engine_last_token_ns.unwrap(), -1),
            ]
        })
        .collect();
    events.sort();
    let mut now = 0;
    let mut peak = 0;
    for (_, d) in events {
        now += d;
        peak = peak.max(now);
    }
    peak as usize
}

#[tokio::test]
async fn optimistic_admission_preempts_and_every_request_completes() {
    let (sim, kv) = pressure(KvAdmission::Optimistic).await;
    let m = request(sim.addr, "GET", "/metrics", &[], "").await.text();
    let preemptions = metric(&m, "vllm:num_preemptions_total");
    assert!(preemptions > 0.0, "no preemption under KV pressure");
    let truth = sim.truth();
    assert_eq!(truth.len(), USERS);
    let per_request: u32 = truth.iter().map(|t| t.preemptions).sum();
    assert_eq!(per_request as f64, preemptions, "truth and /metrics agree");
    assert!(truth.iter().all(|t| t.completion_tokens == MAX_TOKENS));
    assert!(truth.iter().all(|t| t.generated_tokens == MAX_TOKENS));
    // More ran at once than reserve admission allows (3).
    assert!(peak_running(&truth) > 3, "{}", peak_running(&truth));
    let peak_kv = kv.iter().cloned().fold(0.0, f64::max);
    assert!(peak_kv >= 0.9, "KV usage peaked at {peak_kv}");
    assert_eq!(metric(&m, "vllm:kv_cache_usage_perc"), 0.0);
    assert_eq!(metric(&m, "vllm:num_requests_running"), 0.0);
    assert_eq!(
        metric(&m, "vllm:generation_tokens_total"),
        (USERS as u32 * MAX_TOKENS) as f64
    );
}

#[tokio::test]
async fn reserve_admission_under_the_same_load_never_preempts() {
    let (sim, _) = pressure(KvAdmission::Reserve).await;
    let m = request(sim.addr, "GET", "/metrics", &[], "").await.text();
    assert_eq!(metric(&m, "vllm:num_preemptions_total"), 0.0);
    let truth = sim.truth();
    assert!(truth.iter().all(|t| t.preemptions == 0));
    assert!(peak_running(&truth) <= 3, "{}", peak_running(&truth));
}

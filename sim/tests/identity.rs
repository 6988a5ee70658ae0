//! What the sim says about itself: `/version` and `/v1/models`, shaped like vLLM's.

use crate::client::{completion_body, request};
use crate::sim_with;

#[tokio::test]
async fn version_and_models_look_like_vllm() {
    let sim = sim_with(|c| c.api_key = Some("k".into())).await;
    // Like vLLM, /version is outside /v1 and needs no key.
    let v = request(sim.addr, "GET", "/version", &[], "").await;
    assert_eq!(v.status, 200);
    assert_eq!(
        v.json(),
        serde_json::json!({"version": format!("canary-sim {}", env!("CARGO_PKG_VERSION"))})
    );
    let auth = [("authorization", "Bearer k")];
    let models = request(sim.addr, "GET", "/v1/models", &auth, "")
        .await
        .json();
    assert_eq!(models["object"], "list");
    let card = &models["data"][0];
    assert_eq!(card["id"], "canary-sim");
    assert_eq!(card["object"], "model");
    assert_eq!(card["owned_by"], "canary-sim");
    assert_eq!(card["root"], "canary-sim");
    assert!(card["parent"].is_null());
    assert!(card["created"].as_u64().unwrap() > 1_600_000_000);
    // The fast profile's KV budget.
    assert_eq!(card["max_model_len"], 1u64 << 32);
    assert_eq!(card["permission"][0]["object"], "model_permission");
    assert_eq!(card["permission"][0]["organization"], "*");
}

#[tokio::test]
async fn engine_version_and_max_model_len_are_settable() {
    let sim = sim_with(|c| {
        c.engine_version = "0.9.2".into();
        c.max_model_len = Some(64);
    })
    .await;
    let version = || async { request(sim.addr, "GET", "/version", &[], "").await.json() };
    assert_eq!(version().await["version"], "0.9.2");
    // "The engine was upgraded" between two runs, without a restart.
    let r = request(
        sim.addr,
        "POST",
        "/sim/version",
        &[],
        r#"{"version":"0.10.0"}"#,
    )
    .await;
    assert_eq!(
        (r.status, r.json()["version"].as_str()),
        (200, Some("0.10.0"))
    );
    assert_eq!(version().await["version"], "0.10.0");
    for bad in [r#"{"version":""}"#, r#"{"v":"1"}"#, "nope"] {
        let r = request(sim.addr, "POST", "/sim/version", &[], bad).await;
        assert_eq!(r.status, 400, "{bad}");
    }
    assert_eq!(version().await["version"], "0.10.0");
    let models = request(sim.addr, "GET", "/v1/models", &[], "").await.json();
    assert_eq!(models["data"][0]["max_model_len"], 64);
    // 60 prompt + 4 completion fits; one more token does not.
    let words = vec!["w"; 60].join(" ");
    let ok = request(
        sim.addr,
        "POST",
        "/v1/completions",
        &[],
        &completion_body(&words, 4, false),
    )
    .await;
    assert_eq!(ok.status, 200);
    let long = request(
        sim.addr,
        "POST",
        "/v1/completions",
        &[],
        &completion_body(&words, 5, false),
    )
    .await;
    assert_eq!(long.status, 400);
    let msg = long.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(msg.contains("maximum context length is 64 tokens"), "{msg}");
    // The KV budget caps it: a smaller profile budget wins over the flag.
    let r = request(
        sim.addr,
        "POST",
        "/sim/profile",
        &[],
        r#"{"kv_budget_tokens":32}"#,
    )
    .await;
    assert_eq!(r.status, 200);
    let models = request(sim.addr, "GET", "/v1/models", &[], "").await.json();
    assert_eq!(models["data"][0]["max_model_len"], 32);
}

/// A request without `max_tokens`, as vLLM takes it: refused when its prompt leaves no room for
/// one output token (a prompt of exactly max_model_len), else given the room left (at most
/// the profile's default of 16). The sim used to default to 16 whatever the room.
#[tokio::test]
async fn without_max_tokens_the_prompt_must_leave_room_for_one_token() {
    let sim = sim_with(|c| c.max_model_len = Some(64)).await;
    let ask = |words: usize| {
        let body = serde_json::json!({
            "model": "canary-sim",
            "prompt": vec!["w"; words].join(" "),
        })
        .to_string();
        async move { request(sim.addr, "POST", "/v1/completions", &[], &body).await }
    };
    for (words, completion) in [(60, 4), (63, 1), (40, 16)] {
        let r = ask(words).await;
        assert_eq!(r.status, 200, "{words} words");
        let usage = &r.json()["usage"];
        assert_eq!(usage["prompt_tokens"], words, "{usage}");
        assert_eq!(usage["completion_tokens"], completion, "{usage}");
    }
    let r = ask(64).await;
    assert_eq!(r.status, 400);
    let msg = r.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(msg.contains("maximum context length is 64 tokens"), "{msg}");
    assert!(msg.contains("requested 64 tokens"), "{msg}");
}

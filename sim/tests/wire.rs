//! The wire format, compared with real captures in `shared/fixtures/`.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::client::{chat_body, completion_body, request, sse_events};
use crate::{fixture, sim};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Role,
    Token,
    Finish,
    Usage,
    FinishUsage,
    Done,
}

fn kind(event: &str) -> Kind {
    if event == "[DONE]" {
        return Kind::Done;
    }
    let v: Value = serde_json::from_str(event).unwrap();
    let choice = &v["choices"][0];
    let finish = !choice.is_null() && !choice["finish_reason"].is_null();
    match (finish, v.get("usage").is_some()) {
        (true, true) => Kind::FinishUsage,
        (true, false) => Kind::Finish,
        (false, true) => Kind::Usage,
        (false, false) if choice["delta"].get("role").is_some() => Kind::Role,
        _ => Kind::Token,
    }
}

/// Kinds with runs of tokens collapsed to one.
fn shape(events: &[String]) -> Vec<Kind> {
    let mut out: Vec<Kind> = Vec::new();
    for k in events.iter().map(|e| kind(e)) {
        if !(k == Kind::Token && out.last() == Some(&Kind::Token)) {
            out.push(k);
        }
    }
    out
}

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object().unwrap().keys().cloned().collect()
}

/// The first event of `kind`, parsed.
fn first(events: &[String], k: Kind) -> Value {
    let e = events.iter().find(|e| kind(e) == k).unwrap();
    serde_json::from_str(e).unwrap()
}

/// Top-level keys, without llama.cpp's own `timings`.
fn top_keys(v: &Value) -> BTreeSet<String> {
    let mut k = keys(v);
    k.remove("timings");
    k
}

#[tokio::test]
async fn chat_stream_matches_capture() {
    let capture = sse_events(&fixture("llamacpp_server_chat_stream.sse"));
    let sim = sim().await;
    let resp = request(
        sim.addr,
        "POST",
        "/v1/chat/completions",
        &[],
        &chat_body("hi there", 5, true),
    )
    .await;
    assert_eq!(resp.status, 200);
    assert_eq!(resp.header("content-type"), Some("text/event-stream"));
    let events = resp.events();
    use Kind::*;
    assert_eq!(shape(&capture), [Role, Token, Finish, Usage, Done]);
    assert_eq!(shape(&events), shape(&capture));
    assert_eq!(events.len(), 1 + 5 + 3);
    for k in [Role, Token, Finish, Usage] {
        let (c, s) = (first(&capture, k), first(&events, k));
        assert_eq!(top_keys(&s), top_keys(&c), "{k:?} top-level keys");
        assert_eq!(s["object"], "chat.completion.chunk");
        if k != Usage {
            assert_eq!(
                keys(&s["choices"][0]),
                keys(&c["choices"][0]),
                "{k:?} choice keys"
            );
            assert_eq!(
                keys(&s["choices"][0]["delta"]),
                keys(&c["choices"][0]["delta"]),
                "{k:?} delta"
            );
        }
    }
    let usage = &first(&events, Usage)["usage"];
    let cap_usage = &first(&capture, Usage)["usage"];
    assert!(keys(cap_usage).is_subset(&keys(usage)));
    assert!(
        keys(&cap_usage["prompt_tokens_details"]).is_subset(&keys(&usage["prompt_tokens_details"]))
    );
    assert_eq!(usage["completion_tokens_details"]["reasoning_tokens"], 0);
    assert_eq!(usage["prompt_tokens"], 2);
    assert_eq!(usage["completion_tokens"], 5);
    assert_eq!(usage["total_tokens"], 7);
    // Every event of one stream shares its id.
    let ids: BTreeSet<String> = events[..events.len() - 1]
        .iter()
        .map(|e| {
            serde_json::from_str::<Value>(e).unwrap()["id"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(ids.len(), 1);
}

#[tokio::test]
async fn completions_stream_matches_capture() {
    let capture = sse_events(&fixture("llamacpp_server_completions_stream.sse"));
    let sim = sim().await;
    let resp = request(
        sim.addr,
        "POST",
        "/v1/completions",
        &[],
        &completion_body("a b c", 4, true),
    )
    .await;
    assert_eq!(resp.status, 200);
    let events = resp.events();
    use Kind::*;
    // llama.cpp merges finish and usage; the sim sends them apart, as vLLM does.
    assert_eq!(shape(&capture), [Token, FinishUsage, Done]);
    assert_eq!(shape(&events), [Token, Finish, Usage, Done]);
    let (c, s) = (first(&capture, Token), first(&events, Token));
    assert_eq!(top_keys(&s), top_keys(&c));
    assert_eq!(keys(&s["choices"][0]), keys(&c["choices"][0]));
    assert_eq!(s["object"], "text_completion");
    assert!(s["choices"][0]["text"].as_str().unwrap().starts_with(' '));
    let cap_last = first(&capture, FinishUsage);
    let mut sim_last = top_keys(&first(&events, Finish));
    sim_last.extend(top_keys(&first(&events, Usage)));
    assert!(top_keys(&cap_last).is_subset(&sim_last));
    assert_eq!(
        keys(&first(&events, Finish)["choices"][0]),
        keys(&cap_last["choices"][0])
    );
}

#[tokio::test]
async fn non_stream_matches_capture() {
    let capture: Value =
        serde_json::from_str(&fixture("llama_cpp_python_chat_nonstream.json")).unwrap();
    let sim = sim().await;
    let resp = request(
        sim.addr,
        "POST",
        "/v1/chat/completions",
        &[],
        &chat_body("x y", 3, false),
    )
    .await;
    assert_eq!(resp.status, 200);
    let v = resp.json();
    assert_eq!(keys(&v), keys(&capture));
    assert_eq!(keys(&v["choices"][0]), keys(&capture["choices"][0]));
    assert_eq!(
        keys(&v["choices"][0]["message"]),
        keys(&capture["choices"][0]["message"])
    );
    assert!(keys(&capture["usage"]).is_subset(&keys(&v["usage"])));
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["usage"]["completion_tokens"], 3);
    assert_eq!(v["choices"][0]["message"]["content"], " the sea is");
    let c = request(
        sim.addr,
        "POST",
        "/v1/completions",
        &[],
        &completion_body("x", 2, false),
    )
    .await;
    assert_eq!(c.json()["choices"][0]["text"], " the sea");
    assert_eq!(c.json()["object"], "text_completion");
}

#[tokio::test]
async fn other_routes() {
    let sim = sim().await;
    let models = request(sim.addr, "GET", "/v1/models", &[], "").await;
    assert_eq!(models.json()["data"][0]["id"], "canary-sim");
    assert_eq!(
        request(sim.addr, "GET", "/health", &[], "").await.status,
        200
    );
    assert_eq!(request(sim.addr, "GET", "/nope", &[], "").await.status, 404);
    assert_eq!(
        request(sim.addr, "GET", "/v1/completions", &[], "")
            .await
            .status,
        405
    );
    let bad = request(sim.addr, "POST", "/v1/completions", &[], "{").await;
    assert_eq!(bad.status, 400);
    assert!(bad.json()["error"]["message"].is_string());
    // Keep-alive: several requests on one connection.
    let mut c = crate::client::Client::connect(sim.addr).await;
    for n in 1..4 {
        let r = c
            .send(
                "POST",
                "/v1/completions",
                &[],
                &completion_body("p", n, true),
            )
            .await;
        assert_eq!(r.events().len(), n as usize + 3);
    }
}

#[tokio::test]
async fn a_burst_of_connections_waits_in_the_listen_queue_not_dropped() {
    // Bound but not serving yet, so nothing accepts: every connection the kernel completes
    // waits in the listen queue. A burst of 1,500 must connect; with the queue full the kernel
    // drops the SYN and the connect hangs (with `TcpListener::bind`'s backlog, from the 130th).
    let sim = canary_sim::Sim::bind(canary_sim::Config::default())
        .await
        .unwrap();
    let addr = sim.local_addr();
    let connected = tokio::task::spawn_blocking(move || {
        let mut held = Vec::new();
        for i in 0..1500 {
            match std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(5)) {
                Ok(c) => held.push(c),
                Err(e) => return Err(format!("connection {} of 1500: {e}", i + 1)),
            }
        }
        Ok(held.len())
    })
    .await
    .unwrap();
    assert_eq!(connected, Ok(1500));
    drop(sim);
}

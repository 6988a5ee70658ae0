//! Token counts, reasoning, prefix cache, metrics, truth, queueing, profile switching.

use serde_json::Value;

use crate::client::{chat_body, completion_body, metric, request, Client};
use crate::{sim, sim_with};

fn content_tokens(events: &[String], field: &str) -> Vec<String> {
    events
        .iter()
        .filter(|e| *e != "[DONE]")
        .filter_map(|e| {
            let v: Value = serde_json::from_str(e).unwrap();
            v["choices"][0]["delta"][field].as_str().map(str::to_owned)
        })
        .collect()
}

#[tokio::test]
async fn exact_max_tokens() {
    let sim = sim().await;
    for n in [1u32, 7, 33] {
        let r = request(
            sim.addr,
            "POST",
            "/v1/chat/completions",
            &[],
            &chat_body("a", n, true),
        )
        .await;
        assert_eq!(content_tokens(&r.events(), "content").len(), n as usize);
        let r = request(
            sim.addr,
            "POST",
            "/v1/completions",
            &[],
            &completion_body("a", n, false),
        )
        .await;
        assert_eq!(r.json()["usage"]["completion_tokens"], n);
        assert_eq!(
            r.json()["choices"][0]["text"]
                .as_str()
                .unwrap()
                .split(' ')
                .count(),
            n as usize + 1
        );
    }
    // max_completion_tokens wins over max_tokens; neither gives the profile default (16).
    let body = r#"{"messages":[{"role":"user","content":"q"}],"max_tokens":3,"max_completion_tokens":5,"ignore_eos":true}"#;
    let r = request(sim.addr, "POST", "/v1/chat/completions", &[], body).await;
    assert_eq!(r.json()["usage"]["completion_tokens"], 5);
    let body = r#"{"messages":[{"role":"user","content":"q"}]}"#;
    let r = request(sim.addr, "POST", "/v1/chat/completions", &[], body).await;
    assert_eq!(r.json()["usage"]["completion_tokens"], 16);
}

#[tokio::test]
async fn max_tokens_past_a_million_is_refused_by_name() {
    // The fast profile's context (2^32 tokens) would admit it, and a non-streamed reply of
    // four billion words is built whole.
    let sim = sim().await;
    let body = r#"{"messages":[{"role":"user","content":"q"}],"max_tokens":4000000000}"#;
    let r = request(sim.addr, "POST", "/v1/chat/completions", &[], body).await;
    assert_eq!(r.status, 400, "{}", r.text());
    let msg = r.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(
        msg.contains("max_tokens 4000000000") && msg.contains("1048576"),
        "{msg}"
    );
    // The sim still serves.
    let r = request(
        sim.addr,
        "POST",
        "/v1/chat/completions",
        &[],
        &chat_body("a", 3, false),
    )
    .await;
    assert_eq!(r.status, 200);
}

#[tokio::test]
async fn a_head_left_half_sent_is_closed_and_an_idle_connection_is_not() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let sim = sim().await;
    let mut idle = tokio::net::TcpStream::connect(sim.addr).await.unwrap();
    let mut half = tokio::net::TcpStream::connect(sim.addr).await.unwrap();
    half.write_all(b"POST /v1/completions HTTP/1.1\r\nHost: sim\r\n")
        .await
        .unwrap();
    // The rest of the head never comes: 408 once its time is up, then the close.
    let mut answer = Vec::new();
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        half.read_to_end(&mut answer),
    )
    .await;
    assert!(read.is_ok(), "the half-sent head was held open past 30 s");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    // A keep-alive connection that sent nothing is left alone (a trace may pause for minutes):
    // still there well past the head's limit.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let body = completion_body("a", 2, false);
    let req = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: sim\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    idle.write_all(req.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    idle.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

#[tokio::test]
async fn reasoning_split() {
    let sim = sim_with(|c| c.reasoning_tokens = 1).await;
    let r = request(
        sim.addr,
        "POST",
        "/v1/chat/completions",
        &[("x-sim-reasoning-tokens", "3")],
        &chat_body("a b", 5, true),
    )
    .await;
    let events = r.events();
    // Reasoning first, then content, never both in one chunk.
    let tokens: Vec<&str> = events[1..6]
        .iter()
        .map(|e| {
            if e.contains("reasoning_content") {
                "r"
            } else {
                "c"
            }
        })
        .collect();
    assert_eq!(tokens, ["r", "r", "r", "c", "c"]);
    assert_eq!(content_tokens(&events, "reasoning_content").len(), 3);
    let usage: Value = serde_json::from_str(&events[7]).unwrap();
    assert_eq!(
        usage["usage"]["completion_tokens_details"]["reasoning_tokens"],
        3
    );
    let truth = sim.truth();
    let t = &truth[0];
    assert_eq!((t.reasoning_tokens, t.completion_tokens), (3, 5));
    // chunk_ns: role, r, r, r, c, ...: first output = the fourth token chunk.
    assert_eq!(t.first_output_ns, Some(t.chunk_ns[4]));
    assert_eq!(t.first_token_ns, Some(t.chunk_ns[1]));
    // The server default (1) applies without the header; more than max_tokens caps.
    let r = request(
        sim.addr,
        "POST",
        "/v1/chat/completions",
        &[],
        &chat_body("a", 2, false),
    )
    .await;
    assert_eq!(
        r.json()["usage"]["completion_tokens_details"]["reasoning_tokens"],
        1
    );
    assert_eq!(
        r.json()["choices"][0]["message"]["reasoning_content"],
        " the"
    );
    let r = request(
        sim.addr,
        "POST",
        "/v1/chat/completions",
        &[("x-sim-reasoning-tokens", "9")],
        &chat_body("a", 2, false),
    )
    .await;
    assert_eq!(
        r.json()["usage"]["completion_tokens_details"]["reasoning_tokens"],
        2
    );
    let bad = request(
        sim.addr,
        "POST",
        "/v1/chat/completions",
        &[("x-sim-reasoning-tokens", "x")],
        &chat_body("a", 2, false),
    )
    .await;
    assert_eq!(bad.status, 400);
}

/// A Mooncake-style prompt: each hash id is one block of `block` distinct words.
fn mooncake_prompt(ids: &[u32], block: u32, tail: &str) -> String {
    let mut words = Vec::new();
    for id in ids {
        for j in 0..block {
            words.push(format!("h{id}w{j}"));
        }
    }
    words.push(tail.to_owned());
    words.join(" ")
}

#[tokio::test]
async fn prefix_cache_hits_for_shared_hash_ids() {
    let sim = sim().await; // block size 4
    let cached = |r: &crate::client::Resp| {
        r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap()
    };
    let first = request(
        sim.addr,
        "POST",
        "/v1/completions",
        &[],
        &completion_body(&mooncake_prompt(&[1, 2, 3], 4, "x"), 2, false),
    )
    .await;
    assert_eq!(cached(&first), 0);
    assert_eq!(first.json()["usage"]["prompt_tokens"], 13);
    // Same ids 1, 2, then a new one: two blocks hit.
    let second = request(
        sim.addr,
        "POST",
        "/v1/completions",
        &[],
        &completion_body(&mooncake_prompt(&[1, 2, 9], 4, "y"), 2, false),
    )
    .await;
    assert_eq!(cached(&second), 8);
    // Different first block: nothing hits, even though block 2 matches.
    let third = request(
        sim.addr,
        "POST",
        "/v1/completions",
        &[],
        &completion_body(&mooncake_prompt(&[5, 2, 3], 4, "x"), 2, false),
    )
    .await;
    assert_eq!(cached(&third), 0);
    // Streaming usage reports it too, and so does the truth and /metrics.
    let fourth = request(
        sim.addr,
        "POST",
        "/v1/chat/completions",
        &[],
        &chat_body(&mooncake_prompt(&[1, 2, 3], 4, "z"), 2, true),
    )
    .await;
    let usage: Value = serde_json::from_str(&fourth.events()[4]).unwrap();
    assert_eq!(usage["usage"]["prompt_tokens_details"]["cached_tokens"], 12);
    let truth = sim.truth();
    assert_eq!(
        truth.iter().map(|t| t.cached_tokens).collect::<Vec<_>>(),
        [0, 8, 0, 12]
    );
    let m = request(sim.addr, "GET", "/metrics", &[], "").await.text();
    assert_eq!(metric(&m, "vllm:prefix_cache_hits_total"), 20.0);
    assert_eq!(metric(&m, "vllm:prefix_cache_queries_total"), 52.0);
}

#[tokio::test]
async fn metrics_counters_are_exact() {
    let sim = sim().await;
    let mut expect_gen = 0;
    for i in 0..12u32 {
        let n = 1 + i * 3;
        let stream = i % 2 == 0;
        let body = if i % 3 == 0 {
            completion_body("a b c d", n, stream)
        } else {
            chat_body("a b", n, stream)
        };
        let path = if i % 3 == 0 {
            "/v1/completions"
        } else {
            "/v1/chat/completions"
        };
        assert_eq!(
            request(sim.addr, "POST", path, &[], &body).await.status,
            200
        );
        expect_gen += n as u64;
    }
    let m = request(sim.addr, "GET", "/metrics", &[], "").await.text();
    let truth = sim.truth();
    let served: u64 = truth.iter().map(|t| t.completion_tokens as u64).sum();
    let prompt: u64 = truth.iter().map(|t| t.prompt_tokens as u64).sum();
    assert_eq!(served, expect_gen);
    assert_eq!(metric(&m, "vllm:generation_tokens_total"), served as f64);
    assert_eq!(metric(&m, "vllm:prompt_tokens_total"), prompt as f64);
    assert_eq!(metric(&m, "vllm:e2e_request_latency_seconds_count"), 12.0);
    // Every request, streamed or not (before, the 6 streamed ones only), as vLLM counts them.
    assert_eq!(metric(&m, "vllm:time_to_first_token_seconds_count"), 12.0);
    assert_eq!(
        metric(&m, "vllm:inter_token_latency_seconds_count"),
        (served - 12) as f64
    );
    assert_eq!(metric(&m, "vllm:num_requests_running"), 0.0);
    assert!(m.contains("# TYPE vllm:request_queue_time_seconds histogram"));
    assert!(m.contains(r#"vllm:e2e_request_latency_seconds_bucket{model_name="canary-sim",engine="0",le="+Inf"} 12"#));
}

#[tokio::test]
async fn truth_log_and_traceparent() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("truth.jsonl");
    let p = path.clone();
    let sim = sim_with(move |c| c.truth_log = Some(p)).await;
    let tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let r = request(
        sim.addr,
        "POST",
        "/v1/chat/completions",
        &[("traceparent", tp), ("x-request-id", "req-7")],
        &chat_body("a b c", 4, true),
    )
    .await;
    assert_eq!(r.header("traceparent"), Some(tp));
    assert_eq!(r.header("x-request-id"), Some("req-7"));
    request(
        sim.addr,
        "POST",
        "/v1/completions",
        &[],
        &completion_body("a", 2, false),
    )
    .await;
    let in_memory = sim.truth();
    // /sim/truth serves the same records as JSON lines, and ?since= filters.
    let over_http = request(sim.addr, "GET", "/sim/truth", &[], "").await.text();
    assert_eq!(over_http.lines().count(), 2);
    assert_eq!(
        request(sim.addr, "GET", "/sim/truth?since=1", &[], "")
            .await
            .text()
            .lines()
            .count(),
        1
    );
    sim.shutdown().await.unwrap();
    let lines: Vec<canary_sim::TruthRecord> = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines, in_memory);
    let t = &lines[0];
    assert_eq!(t.path, "/v1/chat/completions");
    assert_eq!(t.traceparent.as_deref(), Some(tp));
    assert_eq!(t.request_id.as_deref(), Some("req-7"));
    assert_eq!(
        (t.status, t.stream, t.prompt_tokens, t.completion_tokens),
        (200, true, 3, 4)
    );
    assert_eq!(t.chunk_ns.len(), 1 + 4 + 3);
    assert!(t.arrival_ns <= t.body_received_ns);
    assert!(t.body_received_ns <= t.first_byte_ns.unwrap());
    assert!(t.first_byte_ns <= t.first_chunk_ns);
    assert!(t.first_chunk_ns <= t.first_token_ns && t.first_token_ns <= t.first_output_ns);
    assert!(t.chunk_ns.windows(2).all(|w| w[0] <= w[1]));
    assert_eq!(t.end_ns, *t.chunk_ns.last().unwrap());
    assert!(t.admitted_ns.unwrap() >= t.body_received_ns);
    let t = &lines[1];
    assert!(!t.stream && t.chunk_ns.is_empty() && t.first_byte_ns == Some(t.end_ns));
}

#[tokio::test]
async fn queues_beyond_capacity() {
    // One sequence at a time, 10 ms steps: the second request must wait.
    let sim = sim_with(|c| {
        c.profile.max_running = 1;
        c.profile.decode_base_us = 10_000.0;
    })
    .await;
    let addr = sim.addr;
    let a = tokio::spawn(async move {
        request(
            addr,
            "POST",
            "/v1/completions",
            &[],
            &completion_body("a", 40, true),
        )
        .await
    });
    let b = tokio::spawn(async move {
        request(
            addr,
            "POST",
            "/v1/completions",
            &[],
            &completion_body("b", 40, true),
        )
        .await
    });
    let mut saw_waiting = false;
    let mut scrapes = Client::connect(addr).await;
    while !(a.is_finished() && b.is_finished()) {
        let m = scrapes.send("GET", "/metrics", &[], "").await.text();
        if metric(&m, "vllm:num_requests_waiting") == 1.0
            && metric(&m, "vllm:num_requests_running") == 1.0
        {
            saw_waiting = true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    assert_eq!(a.await.unwrap().events().len(), 43);
    assert_eq!(b.await.unwrap().events().len(), 43);
    assert!(saw_waiting, "never saw one running and one waiting");
    // The later-admitted request was admitted after the other had produced tokens.
    let mut truth = sim.truth();
    truth.sort_by_key(|t| t.admitted_ns);
    assert!(truth[1].admitted_ns.unwrap() >= truth[0].first_token_ns.unwrap());
    let m = request(addr, "GET", "/metrics", &[], "").await.text();
    assert_eq!(metric(&m, "vllm:request_queue_time_seconds_count"), 2.0);
}

#[tokio::test]
async fn profile_switching() {
    let sim = sim().await;
    let get = || async {
        request(sim.addr, "GET", "/sim/profile", &[], "")
            .await
            .json()
    };
    assert_eq!(get().await["name"], "fast");
    let r = request(
        sim.addr,
        "POST",
        "/sim/profile",
        &[],
        r#"{"profile":"illustrative"}"#,
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(get().await["name"], "illustrative");
    assert_eq!(get().await["decode_base_us"], 5000.0);
    let r = request(
        sim.addr,
        "POST",
        "/sim/profile",
        &[],
        r#"{"decode_base_us":250,"max_running":8}"#,
    )
    .await;
    assert_eq!(r.json()["name"], "custom");
    assert_eq!(sim.profile().max_running, 8);
    assert_eq!(
        sim.profile().prefill_overhead_us,
        4000.0,
        "the rest of the current profile stays"
    );
    for bad in [
        r#"{"profile":"warp"}"#,
        r#"{"decode_base_us":-5}"#,
        // 116 days a step: the engine would sleep past any later profile.
        r#"{"decode_base_us":1e13}"#,
        // Over the request limit: every request without max_tokens would get a 400.
        r#"{"default_max_tokens":1048577}"#,
        r#"{"bogus":1}"#,
        "nope",
    ] {
        assert_eq!(
            request(sim.addr, "POST", "/sim/profile", &[], bad)
                .await
                .status,
            400,
            "{bad}"
        );
    }
    // Requests still work under the new profile.
    let r = request(
        sim.addr,
        "POST",
        "/v1/completions",
        &[],
        &completion_body("a", 2, true),
    )
    .await;
    assert_eq!(r.events().len(), 5);
}

#[tokio::test]
async fn an_api_key_guards_v1_and_leaves_health_and_metrics_open() {
    let sim = sim_with(|c| c.api_key = Some("sk-sim-test".into())).await;
    let body = chat_body("hello there", 3, false);
    let chat = |headers: &'static [(&'static str, &'static str)]| {
        let body = body.clone();
        async move { request(sim.addr, "POST", "/v1/chat/completions", headers, &body).await }
    };
    let r = chat(&[]).await;
    assert_eq!(r.status, 401, "{}", r.text());
    assert!(r.json()["error"]["message"].is_string(), "{}", r.text());
    assert_eq!(chat(&[("authorization", "Bearer wrong")]).await.status, 401);
    assert_eq!(
        chat(&[("authorization", "Bearer sk-sim-test")])
            .await
            .status,
        200
    );
    assert_eq!(
        request(sim.addr, "GET", "/v1/models", &[], "").await.status,
        401
    );
    assert_eq!(
        request(sim.addr, "GET", "/health", &[], "").await.status,
        200
    );
    // The sim's own switches want the key too; reading them does not.
    let slower = r#"{"decode_base_us":9000}"#;
    let r = request(sim.addr, "POST", "/sim/profile", &[], slower).await;
    assert_eq!(r.status, 401, "{}", r.text());
    assert_eq!(sim.profile().name, "fast");
    let key = [("authorization", "Bearer sk-sim-test")];
    let r = request(sim.addr, "POST", "/sim/profile", &key, slower).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r#"{"version":"9"}"#;
    assert_eq!(
        request(sim.addr, "POST", "/sim/version", &[], v)
            .await
            .status,
        401
    );
    assert_eq!(
        request(sim.addr, "GET", "/sim/profile", &[], "")
            .await
            .status,
        200
    );
    assert_eq!(
        request(sim.addr, "GET", "/metrics", &[], "").await.status,
        200
    );
}

#[tokio::test]
async fn non_streamed_requests_have_engine_ttft_and_itl() {
    let sim = sim().await;
    for (path, body) in [
        ("/v1/completions", completion_body("a b c", 5, false)),
        ("/v1/chat/completions", chat_body("a b", 3, false)),
        ("/v1/completions", completion_body("x", 1, false)),
    ] {
        let r = request(sim.addr, "POST", path, &[], &body).await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let m = request(sim.addr, "GET", "/metrics", &[], "").await.text();
    let truth = sim.truth();
    assert_eq!(truth.len(), 3);
    let secs = |a: u64, b: u64| (b - a) as f64 / 1e9;
    // Before, a non-streamed request added nothing to either (it has no token writes): the
    // engine's times are vLLM's, for every request.
    let ttft: f64 = truth
        .iter()
        .map(|t| secs(t.arrival_ns, t.engine_first_token_ns.unwrap()))
        .sum();
    let itl: f64 = truth
        .iter()
        .map(|t| {
            secs(
                t.engine_first_token_ns.unwrap(),
                t.engine_last_token_ns.unwrap(),
            )
        })
        .sum();
    assert_eq!(metric(&m, "vllm:time_to_first_token_seconds_count"), 3.0);
    let got = metric(&m, "vllm:time_to_first_token_seconds_sum");
    assert!((got - ttft).abs() < 1e-9, "TTFT sum {got} vs truth {ttft}");
    // One interval between consecutive tokens: 4 + 2 + 0.
    assert_eq!(metric(&m, "vllm:inter_token_latency_seconds_count"), 6.0);
    let got = metric(&m, "vllm:inter_token_latency_seconds_sum");
    assert!((got - itl).abs() < 1e-9, "ITL sum {got} vs truth {itl}");
}

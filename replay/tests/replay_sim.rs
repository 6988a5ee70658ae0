//! Replays against the real simulator over loopback, checked against its ground truth.

use crate::support::*;
use canary_core::{ErrorKind, Status};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mooncake_slice_at_high_speedup_accounts_for_every_request() {
    let sim = sim(&["--profile", "fast"]).await;
    let trace = load_shared("mooncake_conversation_first2000.jsonl");
    let expected: Vec<_> = trace
        .requests
        .iter()
        .map(|r| (r.index, r.input_tokens, r.output_tokens))
        .collect();
    let trace_rows = trace.requests.to_vec();
    let run = replay(trace.requests, target(&sim), |c| c.speedup = 200.0).await;

    assert_eq!(run.records.len(), 2000);
    assert_eq!(run.outcome.summary.requests, 2000);
    let errors: Vec<_> = run
        .records
        .iter()
        .filter_map(|r| r.error.as_ref())
        .take(5)
        .collect();
    assert_eq!(run.outcome.summary.errors, 0, "{errors:?}");
    let mut ids: Vec<_> = run.records.iter().map(|r| r.id).collect();
    ids.sort();
    assert_eq!(ids, (0..2000).collect::<Vec<_>>());
    for r in &run.records {
        let (_, input, output) = expected[r.id as usize];
        let usage = r.usage.as_ref().expect("usage chunk");
        // The simulator counts one token per word; canaryd's prompts are exact by construction.
        assert_eq!(usage.prompt_tokens, Some(input), "request {}", r.id);
        assert_eq!(usage.completion_tokens, Some(output), "request {}", r.id);
        // Released at its deadline, never before it: the lag is the plain difference, with
        // nothing clamped away.
        assert!(
            r.sent_at_ms >= r.scheduled_at_ms,
            "request {} sent {} ms early",
            r.id,
            r.scheduled_at_ms - r.sent_at_ms
        );
        assert_same(
            r.schedule_lag_ms,
            r.sent_at_ms - r.scheduled_at_ms,
            "lag = sent - scheduled",
        );
        assert!(r.ttft_ms.unwrap() <= r.e2e_ms.unwrap());
    }
    // The recorded prompt length is what the tokenizer counts in the prompt sent: the same
    // builder and salt give the same bytes, re-encoded here (a sample: encoding is slow).
    for r in run.records.iter().step_by(97) {
        let req = &trace_rows[r.id as usize];
        let (_, check) = prompts().build_verified(req, run.outcome.prompt_salt);
        let check = check.expect("a synthesized prompt");
        assert_eq!(
            Some(check.counted_before as u32),
            r.prompt_tokens_synthesized,
            "request {}: {check:?}",
            r.id
        );
    }
    // The trace repeats prefixes (hash id 0 opens most prompts): the server must see reuse.
    assert!(run.outcome.summary.total_cached_tokens > 0);
    // Every request reached the referee exactly once, with our trace id.
    let truth = sim.truth();
    let by_id = truth_by_request_id(&truth, &run.run_id);
    assert_eq!(by_id.len(), 2000);
    for r in &run.records {
        let t = by_id[&r.id];
        assert!(t.traceparent.as_deref().unwrap().contains(&r.trace_id));
        // Same clock on both sides: the server cannot see a request before we sent it.
        let sent_ns = run.outcome.t0_monotonic_ns as f64 + r.sent_at_ms * 1e6;
        assert!(
            t.arrival_ns as f64 >= sent_ns - 1e3,
            "request {} arrived before it was sent",
            r.id
        );
    }
}

#[tokio::test]
async fn reasoning_tokens_separate_ttfo_from_ttft() {
    let sim = sim(&["--profile", "fast"]).await;
    let mut t = target(&sim);
    t.headers.push(header("x-sim-reasoning-tokens", "4"));
    // A stall between the last reasoning token and the first output token keeps them apart
    // (the fast profile would otherwise write all ten at once).
    t.headers
        .push(header("x-sim-fault", "stall_mid_ms=300,at=4"));
    let run = replay(requests(3, 50, 10), t, |c| {
        c.record_chunks = true;
        // Sim and client on this test's one thread (see below).
        c.own_runtime = false;
    })
    .await;
    let truth = sim.truth();
    let by_id = truth_by_request_id(&truth, &run.run_id);
    for r in &run.records {
        assert_eq!(r.status, Status::Ok, "{:?}", r.error);
        assert_eq!(r.usage.as_ref().unwrap().reasoning_tokens, Some(4));
        assert_eq!(r.chunks, 10);
        let t = by_id[&r.id];
        let (first_token, first_output) = (t.first_token_ns.unwrap(), t.first_output_ns.unwrap());
        assert!(first_output - first_token >= 300_000_000, "{t:?}");
        // The first output token is the fifth token chunk: TTFO is TTFT plus the first four
        // gaps, the stall among them, on the kernel's clock and on canaryd's reads alike.
        let u = &r.rx.as_ref().unwrap().userspace;
        let clocks = [
            (r.ttft_ms, r.ttfo_ms, r.chunk_gaps_ms.as_ref()),
            (u.ttft_ms, u.ttfo_ms, u.chunk_gaps_ms.as_ref()),
        ];
        for (ttft, ttfo, gaps) in clocks {
            let (ttft, ttfo) = (ttft.unwrap(), ttfo.unwrap());
            let fifth = ttft + gaps.unwrap()[..4].iter().sum::<f64>();
            assert!(
                (ttfo - fifth).abs() < 1e-6,
                "TTFO {ttfo} vs chunk 5 at {fifth}"
            );
        }
        let sent_ns = run.outcome.t0_monotonic_ns as f64 + r.sent_at_ms * 1e6;
        let at = |ms: Option<f64>| sent_ns + ms.unwrap() * 1e6;
        // Read no earlier than the sim wrote it, and (on this one thread, sim and client
        // alike) the first token read before the stall ended.
        let (ttft_at, ttfo_at) = (at(u.ttft_ms), at(u.ttfo_ms));
        assert!(ttft_at + 1e3 >= first_token as f64, "TTFT before the write");
        assert!(
            ttft_at < first_output as f64,
            "first token read after the stall"
        );
        assert!(
            ttfo_at + 1e3 >= first_output as f64,
            "TTFO before the write"
        );
        // Received by the kernel during the sim's write, so after the write before it (the
        // head) and after the stall; never after canaryd's read.
        let (kernel_ttft, kernel_ttfo) = (at(r.ttft_ms), at(r.ttfo_ms));
        assert!(
            kernel_ttft + 1e3 >= t.first_byte_ns.unwrap() as f64,
            "{r:?}"
        );
        assert!(
            kernel_ttfo + 1e3 >= (first_token + 300_000_000) as f64,
            "{r:?}"
        );
        assert!(kernel_ttft <= ttft_at && kernel_ttfo <= ttfo_at, "{r:?}");
    }
    assert_eq!(run.outcome.summary.total_reasoning_tokens, 12);
}

#[tokio::test]
async fn each_error_class_is_a_record_not_a_crash() {
    let sim = sim(&["--profile", "fast"]).await;
    let cases: [(&str, ErrorKind, Option<u16>); 5] = [
        ("status=503", ErrorKind::HttpStatus, Some(503)),
        ("status=429", ErrorKind::HttpStatus, Some(429)),
        ("reset_after=3", ErrorKind::StreamCut, None),
        ("malformed_at=2", ErrorKind::MalformedChunk, None),
        ("no_done", ErrorKind::StreamCut, None),
    ];
    for (fault, kind, status) in cases {
        let mut t = target(&sim);
        t.headers.push(header("x-sim-fault", fault));
        let run = replay(requests(2, 20, 8), t, |_| {}).await;
        assert_eq!(run.records.len(), 2, "{fault}");
        for r in &run.records {
            let e = r
                .error
                .as_ref()
                .unwrap_or_else(|| panic!("{fault}: no error recorded"));
            assert_eq!(
                (r.status, e.kind, e.http_status),
                (Status::Error, kind, status),
                "{fault}: {e:?}"
            );
        }
        assert_eq!(
            run.outcome.summary.errors_by_kind[kind.as_str()],
            2,
            "{fault}"
        );
    }
}

#[tokio::test]
async fn a_stalled_server_times_out() {
    let sim = sim(&["--profile", "fast"]).await;
    let mut t = target(&sim);
    t.headers.push(header("x-sim-fault", "stall_first_ms=5000"));
    t.timeout = Duration::from_millis(200);
    let run = replay(requests(1, 20, 8), t, |_| {}).await;
    let e = run.records[0].error.as_ref().unwrap();
    assert_eq!(e.kind, ErrorKind::Timeout);
    // Issue 16, item 6: the message said "request timed out", not after how long.
    assert!(
        e.message.starts_with("no complete response within ")
            && e.message.ends_with(" ms of sending (request timeout)"),
        "{e:?}"
    );
    let ms: f64 = e.message["no complete response within ".len()..]
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(ms > 0.0 && ms <= 200.0, "{e:?}");
}

#[tokio::test]
async fn closed_port_is_a_connect_error() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let t = canary_replay::Target::new(
        &format!("http://127.0.0.1:{port}"),
        canary_replay::Endpoint::Chat,
        "m",
    )
    .unwrap();
    let run = replay(requests(2, 20, 8), t, |_| {}).await;
    for r in &run.records {
        assert_eq!(r.error.as_ref().unwrap().kind, ErrorKind::Connect);
    }
}

#[tokio::test]
async fn completions_and_non_streaming_endpoints() {
    let sim = sim(&["--profile", "fast"]).await;
    let mut t = target(&sim);
    t.endpoint = canary_replay::Endpoint::Completions;
    t.path = "/v1/completions".into();
    let run = replay(requests(2, 30, 6), t.clone(), |_| {}).await;
    assert!(run
        .records
        .iter()
        .all(|r| r.usage.as_ref().unwrap().completion_tokens == Some(6)));
    t.streaming = false;
    let run = replay(requests(2, 30, 6), t, |_| {}).await;
    for r in &run.records {
        assert_eq!(r.status, Status::Ok, "{:?}", r.error);
        assert_eq!(r.usage.as_ref().unwrap().completion_tokens, Some(6));
        // One body, one arrival: the first token is the whole response.
        assert_eq!(r.ttft_ms, r.e2e_ms);
    }
}

#[tokio::test]
async fn later_turns_wait_for_the_previous_turn() {
    let sim = sim(&["--profile", "illustrative"]).await;
    // Generated Bailian-style session: three turns 1 ms apart in trace time, so each later
    // turn is due before its predecessor can finish and must be held.
    let mut reqs = requests(3, 64, 16);
    for (i, r) in reqs.iter_mut().enumerate() {
        r.session = Some(42);
        r.turn = i as u32;
        r.timestamp_us = i as u64 * 1000;
    }
    let run = replay(reqs, target(&sim), |_| {}).await;
    let mut recs = run.records.clone();
    recs.sort_by_key(|r| r.turn);
    for w in recs.windows(2) {
        assert!(
            w[1].sent_at_ms >= w[0].ended_at_ms,
            "turn {} sent before turn {} ended",
            w[1].turn,
            w[0].turn
        );
        assert!(w[1].hold_ms > 0.0, "the wait is recorded as hold");
        // The hold ends with the previous turn; nothing of it is the connection's or canaryd's.
        assert!(
            (w[0].ended_at_ms - w[1].scheduled_at_ms - w[1].hold_ms).abs() < 0.01,
            "turn {}: hold {} ms, previous end {} ms, due {} ms",
            w[1].turn,
            w[1].hold_ms,
            w[0].ended_at_ms,
            w[1].scheduled_at_ms
        );
    }
    // The trace's order held them, not the in-flight ceiling: a sweep point of this trace is
    // not "capped".
    assert_eq!(run.outcome.in_flight_cap.waited, 0);
}

#[tokio::test]
async fn concurrency_ceiling_holds_requests_and_records_it() {
    let sim = sim(&["--profile", "illustrative"]).await;
    let reqs = requests(4, 64, 16); // all due at t=0
    let run = replay(reqs, target(&sim), |c| c.concurrency = Some(1)).await;
    let held = run.records.iter().filter(|r| r.hold_ms > 0.0).count();
    assert_eq!(held, 3, "one goes at once, three wait for the single slot");
    assert_eq!(run.outcome.in_flight_cap.waited, 3);
    let mut recs = run.records.clone();
    recs.sort_by(|a, b| a.sent_at_ms.total_cmp(&b.sent_at_ms));
    for w in recs.windows(2) {
        assert!(w[1].sent_at_ms >= w[0].ended_at_ms - 0.01);
    }
    let s = &run.outcome.summary.metrics;
    assert!(s["schedule_hold"].max > 0.0);
    assert!(s["dispatch_lag"].max < s["schedule_lag"].max);
}

#[tokio::test]
async fn warmup_requests_are_marked_and_left_out() {
    let sim = sim(&["--profile", "fast"]).await;
    let run = replay(requests(3, 40, 4), target(&sim), |c| c.warmup_requests = 2).await;
    assert_eq!(run.records.iter().filter(|r| r.warmup).count(), 2);
    assert_eq!(run.outcome.summary.requests, 3);
    assert_eq!(run.outcome.summary.warmup_requests, 2);
}

// Warm-up records are timed from the run's own t0, which is set once the warm-up is over (or
// is `--start-at`): before it, negative. They were timed from a t0 set before the warm-up and
// replaced after it, so in `records.jsonl` they overlapped the measured requests (3 warm-ups
// and a ceiling of 3 read as 4 in flight).
#[tokio::test]
async fn warmup_records_are_timed_from_the_runs_t0_before_it() {
    let sim = sim(&["--profile", "fast"]).await;
    let in_s = |secs: i64| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        now.as_nanos() as i64 + secs * 1_000_000_000
    };
    for start_at in [false, true] {
        let run = replay(requests(6, 40, 4), target(&sim), |c| {
            c.warmup_requests = 3;
            c.concurrency = Some(3);
            if start_at {
                c.start_at = Some(canary_replay::StartAt {
                    text: "in two seconds".into(),
                    unix_ns: in_s(2),
                    max_late: Duration::from_secs(600),
                });
            }
        })
        .await;
        let (warm, measured): (Vec<_>, Vec<_>) = run.records.iter().partition(|r| r.warmup);
        assert_eq!((warm.len(), measured.len()), (3, 6), "start_at {start_at}");
        // In the order they were sent, each ended before the next, and all before t0.
        for w in &warm {
            assert!(
                w.scheduled_at_ms <= w.sent_at_ms && w.sent_at_ms <= w.ended_at_ms,
                "start_at {start_at}: {w:?}"
            );
            assert!(w.ended_at_ms < 0.0, "start_at {start_at}: {w:?}");
        }
        assert!(warm.windows(2).all(|p| p[0].ended_at_ms <= p[1].sent_at_ms));
        assert!(measured.iter().all(|r| r.scheduled_at_ms >= 0.0));
        // Never more in flight than the ceiling, over every record.
        let mut edges: Vec<(f64, i32)> = run
            .records
            .iter()
            .flat_map(|r| [(r.sent_at_ms, 1), (r.ended_at_ms, -1)])
            .collect();
        edges.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let (mut now, mut most) = (0, 0);
        for (_, d) in edges {
            now += d;
            most = most.max(now);
        }
        assert!(most <= 3, "start_at {start_at}: {most} in flight");
    }
}

#[tokio::test]
async fn stopping_mid_run_keeps_what_was_measured() {
    let sim = sim(&["--profile", "fast"]).await;
    let mut reqs = requests(20, 20, 4);
    for (i, r) in reqs.iter_mut().enumerate() {
        r.timestamp_us = i as u64 * 100_000; // one every 100 ms
    }
    let stop = tokio_util::sync::CancellationToken::new();
    let s2 = stop.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(550)).await;
        s2.cancel();
    });
    let run = replay_with_stop(reqs, target(&sim), |_| {}, stop).await;
    assert!(run.outcome.interrupted);
    assert!(run.outcome.unsent > Some(0));
    assert_eq!(run.records.len() as u64 + run.outcome.unsent.unwrap(), 20);
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.dir.path().join("summary.json")).unwrap())
            .unwrap();
    assert_eq!(summary["interrupted"], true);
    assert_eq!(
        summary["requests"].as_u64().unwrap(),
        run.records.len() as u64
    );
}

#[tokio::test]
async fn goodput_counts_requests_meeting_every_slo() {
    let sim = sim(&["--profile", "fast"]).await;
    let mut t = target(&sim);
    t.headers.push(header("x-sim-fault", "stall_first_ms=30"));
    let run = replay(requests(3, 20, 4), t, |c| {
        c.goodput = "time_to_first_token:10".parse().unwrap();
    })
    .await;
    let g = run.outcome.summary.goodput.unwrap();
    assert_eq!(g.good_requests, 0, "every TTFT is above 30 ms");
    assert_eq!(g.misses_by_metric["time_to_first_token"], 3);
}

#[tokio::test]
async fn a_server_that_closes_after_each_response_costs_no_request() {
    // llama-server closes the connection after every stream while promising keep-alive; the
    // next request must not fail on the dead pooled connection, nor reach the server twice.
    let sim = sim(&["--profile", "fast"]).await;
    let mut t = target(&sim);
    // Like llama-server: the close comes a little after the response, so the client may
    // already have taken the connection for its next request.
    t.headers.push(header("x-sim-fault", "close_after=50"));
    let reqs = requests(8, 32, 4); // all due at t=0, one at a time
    let run = replay(reqs, t, |c| c.concurrency = Some(1)).await;
    assert_eq!(run.outcome.summary.errors, 0, "{:?}", run.records);
    assert!(
        run.records.iter().all(|r| r.connect_ms.is_some()),
        "every request opened its own connection"
    );
    let truth = sim.truth();
    let generations = truth.iter().filter(|t| t.path == "/v1/chat/completions");
    assert_eq!(
        generations.count(),
        8,
        "each request reached the server once"
    );
}

#[tokio::test]
async fn settings_that_could_never_run_are_refused_up_front() {
    let sim = sim(&["--profile", "fast"]).await;
    let mut bad_body = target(&sim);
    bad_body
        .extra_inputs
        .insert("stream".into(), serde_json::json!(false));
    let cases = [
        (target(&sim), Some(0), "--concurrency"),
        (bad_body, None, "--extra-inputs"),
    ];
    for (t, concurrency, field) in cases {
        let mut config = canary_replay::Config::new(t);
        config.concurrency = concurrency;
        let run = canary_replay::run(
            config,
            canary_replay::Schedule::new(requests(2, 20, 4).into(), 1.0),
            prompts(),
            info("refused"),
            None,
            tokio_util::sync::CancellationToken::new(),
            Default::default(),
        );
        // Without the check a zero-slot ceiling waits forever: bound the wait so the test
        // fails instead of hanging.
        let err = tokio::time::timeout(Duration::from_secs(60), run)
            .await
            .expect("refused, not hung")
            .expect_err("refused");
        let msg = err.spelled(flag);
        assert!(
            msg.starts_with(&format!("invalid replay setting {field}: ")),
            "{msg}"
        );
    }
    assert!(sim.truth().is_empty(), "nothing was sent");
}

/// Issue 14: a speedup of 1e-12 would wait for ages, a length no model serves would size a
/// prompt by it. Both are refused before anything is sent.
#[tokio::test]
async fn schedules_that_never_end_or_fit_are_refused_up_front() {
    let sim = sim(&["--profile", "fast"]).await;
    let mut spread = requests(2, 20, 4);
    spread[1].timestamp_us = 1_000_000;
    let cases = [
        (
            spread,
            1e-12,
            canary_replay::trace::DEFAULT_LENGTH_LIMIT,
            "--speedup: at 1e-12x the schedule would take more than 365 days",
        ),
        (
            requests(2, 2000, 4),
            1.0,
            1000,
            "--length-limit: line 1 asks for 2000 input and 4 output tokens, over the limit of 1000",
        ),
    ];
    for (reqs, speedup, limit, expected) in cases {
        let mut config = canary_replay::Config::new(target(&sim));
        config.length_limit = limit;
        let run = canary_replay::run(
            config,
            canary_replay::Schedule::new(reqs.into(), speedup),
            prompts(),
            info("refused"),
            None,
            tokio_util::sync::CancellationToken::new(),
            Default::default(),
        );
        let err = tokio::time::timeout(Duration::from_secs(60), run)
            .await
            .expect("refused, not waiting for ages")
            .expect_err("refused");
        assert_eq!(
            err.spelled(flag),
            format!("invalid replay setting {expected}")
        );
    }
    assert!(sim.truth().is_empty(), "nothing was sent");
}

#[tokio::test]
async fn unique_prompts_are_new_to_the_server_on_every_run_and_shard() {
    // 16-token cache blocks, so the short BurstGPT prompts fill whole blocks.
    let sim = sim(&["--profile", "fast", "--block-size", "16"]).await;
    let burst = load_shared("burstgpt_readme_rows.csv");
    // The same rows twice (113 s of trace, replayed 1000× faster): each run draws its own salt.
    for _ in 0..2 {
        let run = replay(burst.requests.clone(), target(&sim), |c| c.speedup = 1000.0).await;
        assert_eq!(run.outcome.summary.errors, 0, "{:?}", run.records);
        assert_eq!(
            run.outcome.summary.total_cached_tokens, 0,
            "{:?}",
            run.records
        );
    }
    // The shards of one trace, given the same salt: each renumbers its rows from 0. (Two
    // splits, each with its own salt: shards of different splits share rows.)
    let mut shards_run = 0;
    for count in [2u32, 3] {
        for index in 0..count {
            let shard = canary_replay::Selection {
                shard: Some(canary_replay::Shard { index, count }),
                ..Default::default()
            };
            let Ok((part, _)) = burst.clone().select(&shard) else {
                continue; // no row of this trace lands on this shard
            };
            shards_run += 1;
            let salt = u64::from(count);
            let run = replay(part.requests, target(&sim), |c| {
                c.speedup = 1000.0;
                c.prompt_salt = salt;
            })
            .await;
            assert_eq!(
                run.outcome.summary.total_cached_tokens, 0,
                "shard {index}/{count}"
            );
            assert_eq!(run.outcome.prompt_salt, salt);
        }
    }
    assert!(shards_run >= 3, "the rows fall on several shards");

    // Rows with hash ids keep their text across runs: the second run finds every full block
    // of every prompt in the server's cache.
    let mut mooncake = load_shared("mooncake_arxiv_first20.jsonl");
    mooncake.requests.truncate(4);
    let first = replay(mooncake.requests.clone(), target(&sim), |_| {}).await;
    let again = replay(mooncake.requests, target(&sim), |_| {}).await;
    assert_ne!(first.outcome.prompt_salt, again.outcome.prompt_salt);
    for r in &again.records {
        let cached = r.usage.as_ref().and_then(|u| u.cached_tokens).unwrap();
        assert!(
            cached + 16 > r.input_tokens,
            "request {}: {cached} of {} tokens cached",
            r.id,
            r.input_tokens
        );
    }
}

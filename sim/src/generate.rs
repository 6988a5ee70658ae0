//! Serving one generation request: fault choice, submission to the engine, the reply (in
//! [`reply`]), and the request's ground truth and metrics.

mod reply;

use std::sync::atomic::Ordering::{Acquire, Relaxed};

use bytes::Bytes;
use canary_core::MonoTime;

use crate::chunk;
use crate::engine::SeqState;
use crate::fault::FaultPlan;
use crate::http::{self, Conn, RequestHead};
use crate::link::{self, DelayLine};
use crate::metrics::{FinishReason, RequestTimings};
use crate::openai::{Api, GenRequest};
use crate::shared::{Next, Shared};
use crate::truth::TruthRecord;
use reply::{client_gone, finish_plain, Job};

/// The most tokens one request may ask for (1 Mi). A non-streamed reply is built whole, and
/// the fast profile's context (2^32 tokens) would otherwise admit a reply of tens of GB.
pub const MAX_COMPLETION_TOKENS: u32 = 1 << 20;

/// Serves a chat or completions request; fills `rec`.
pub(crate) async fn serve(
    shared: &Shared,
    conn: &mut Conn,
    head: &RequestHead,
    body: Bytes,
    rec: &mut TruthRecord,
    api: Api,
) -> Next {
    let index = shared.gen_index.fetch_add(1, Relaxed);
    let fault = match head.header("x-sim-fault") {
        Some(spec) => match FaultPlan::parse(spec) {
            Ok(p) => p,
            Err(e) => {
                let msg = format!("x-sim-fault: {e}");
                return respond_error(conn, rec, 400, &msg, head.keep_alive).await;
            }
        },
        None => shared.faults.draw(index).cloned().unwrap_or_default(),
    };
    if let Some(ms) = fault.net_delay_ms {
        conn.link = Some(DelayLine::new(ms));
    }
    let (mut next, timings) = respond(shared, conn, head, body, rec, api, &fault).await;
    if conn.link.is_some() {
        if !rec.disconnected {
            match conn.drain().await {
                Err(why) => next = client_gone(rec, why),
                Ok(()) if next == Next::Reset => rec.end_ns = MonoTime::now().as_nanos(),
                Ok(()) => {}
            }
        }
        let line = conn.link.take().expect("checked above");
        let role_events = usize::from(api == Api::Chat);
        link::settle(rec, &line, role_events);
    }
    // Counted once the tokens that reached the socket are known, so that the token counters
    // keep equal to the truth's `completion_tokens`.
    if let Some(t) = timings {
        // As vLLM counts prompt tokens, once prefilled: a request that left while queued,
        // or before its prefill ended, was never prefilled.
        let prefilled = if rec.engine_first_token_ns.is_some() {
            rec.prompt_tokens
        } else {
            0
        };
        shared.metrics.finish(prefilled, rec.completion_tokens, &t);
    }
    next
}

/// Everything after the fault is known: validation, the engine, the reply. Returns the
/// server-side timings of a request that reached the engine.
async fn respond(
    shared: &Shared,
    conn: &mut Conn,
    head: &RequestHead,
    body: Bytes,
    rec: &mut TruthRecord,
    api: Api,
    fault: &FaultPlan,
) -> (Next, Option<RequestTimings>) {
    let keep_alive = head.keep_alive;
    let reasoning = match head.header("x-sim-reasoning-tokens") {
        Some(v) => match v.parse::<u32>() {
            Ok(n) => n,
            Err(_) => {
                let msg = format!("x-sim-reasoning-tokens: {v:?} is not a non-negative integer");
                return (respond_error(conn, rec, 400, &msg, keep_alive).await, None);
            }
        },
        None => shared.reasoning_tokens,
    };
    let req = match GenRequest::parse(api, &body, shared.block_size) {
        Ok(r) => r,
        Err(msg) => return (respond_error(conn, rec, 400, &msg, keep_alive).await, None),
    };
    drop(body);
    rec.stream = req.stream;
    rec.prompt_tokens = req.prompt.count;
    if !fault.is_none() {
        rec.fault = Some(fault.to_string());
    }
    let mut extra: Vec<(&str, &str)> = Vec::new();
    if let Some(id) = head.header("x-request-id") {
        extra.push(("x-request-id", id));
    }
    if let Some(tp) = head.header("traceparent") {
        extra.push(("traceparent", tp));
    }

    if let Some(status) = fault.status {
        if let Err(e) = reply::stall(conn, fault.stall_first_ms).await {
            return (client_gone(rec, e.to_string()), None);
        }
        let body = chunk::error_body(status, &format!("injected fault: status={status}"));
        let head_bytes = http::response_head(
            status,
            "application/json",
            Some(body.len()),
            keep_alive,
            &extra,
        );
        let next = finish_plain(
            conn,
            rec,
            status,
            head_bytes,
            body.as_bytes(),
            fault,
            keep_alive,
        )
        .await;
        return (next, None);
    }

    let profile = shared.engine.profile();
    let limit = shared.identity.max_model_len(&profile);
    // Without max_tokens, as vLLM: the prompt must leave room for one output token, and the
    // output defaults to the room left, at most the profile's default (vllm-project/vllm,
    // `vllm/v1/engine/input_processor.py` `_validate_prompt_len` refuses a prompt of
    // max_model_len tokens, "plus ... (at least 1)"; the OpenAI server defaults max_tokens to
    // `max_model_len - prompt`, capped by the model's default). It used to default to the
    // profile's 16 whatever the room, and refused a prompt within 16 tokens of the limit.
    let prompt = req.prompt.count as u64;
    if req.max_tokens.is_none() && prompt >= limit {
        let msg = format!(
            "This model's maximum context length is {limit} tokens. However, you requested \
             {prompt} tokens in the messages, Please reduce the length of the messages."
        );
        return (respond_error(conn, rec, 400, &msg, keep_alive).await, None);
    }
    let room = u32::try_from(limit - prompt.min(limit)).unwrap_or(u32::MAX);
    let max_tokens = req
        .max_tokens
        .unwrap_or_else(|| profile.default_max_tokens.min(room));
    if max_tokens > MAX_COMPLETION_TOKENS {
        let msg = format!(
            "max_tokens {max_tokens} is over this simulator's limit of {MAX_COMPLETION_TOKENS}"
        );
        return (respond_error(conn, rec, 400, &msg, keep_alive).await, None);
    }
    let need = prompt + max_tokens as u64;
    if need > limit {
        let msg = format!(
            "This model's maximum context length is {limit} tokens. However, you requested \
             {need} tokens ({} in the messages, {max_tokens} in the completion).",
            req.prompt.count
        );
        return (respond_error(conn, rec, 400, &msg, keep_alive).await, None);
    }
    let reasoning = if api == Api::Chat {
        reasoning.min(max_tokens)
    } else {
        0
    };
    // A non-streamed reply has no write per token: its TTFT and ITL are the engine's, as
    // vLLM's are for every request.
    let seq = if req.stream {
        shared.engine.submit(req.prompt, max_tokens)
    } else {
        shared.engine.submit_noting_steps(req.prompt, max_tokens)
    };
    let id = match api {
        Api::Chat => format!("chatcmpl-canary-sim-{}", rec.seq),
        Api::Completions => format!("cmpl-canary-sim-{}", rec.seq),
    };
    let job = Job {
        shared,
        state: &seq.state,
        api,
        id,
        max_tokens,
        reasoning,
        fault,
        extra: &extra,
        keep_alive,
        http10: head.http10,
    };
    let next = if req.stream {
        job.stream(conn, rec, req.include_usage).await
    } else {
        job.complete(conn, rec).await
    };
    engine_facts(rec, &seq.state);
    let finished = if seq.state.finished.load(Acquire) {
        FinishReason::Length
    } else {
        FinishReason::Abort
    };
    let steps = seq
        .state
        .token_steps_ns
        .as_ref()
        .map(|s| std::mem::take(&mut *s.lock().expect("token steps lock")));
    // Abort now, not when the slow link (if any) has drained: the engine is done with it.
    drop(seq);
    (next, Some(timings(rec, api, finished, steps.as_deref())))
}

/// What the engine knows about the request, into its record.
fn engine_facts(rec: &mut TruthRecord, state: &SeqState) {
    let nonzero = |v: u64| (v != 0).then_some(v);
    rec.generated_tokens = state.generated.load(Acquire);
    rec.admitted_ns = nonzero(state.admitted_ns.load(Acquire));
    rec.engine_first_token_ns = nonzero(state.first_token_ns.load(Relaxed));
    rec.engine_last_token_ns = nonzero(state.last_token_ns.load(Relaxed));
    rec.cached_tokens = state.cached_tokens.load(Relaxed);
    rec.preemptions = state.preemptions.load(Relaxed);
    rec.engine_clamped_ns = state.clamped_ns.load(Relaxed);
}

/// The server-side timings of a finished request. The reply's times are the times it was
/// produced: a slow link's delay (settled later) is not the server's. TTFT and ITL: a
/// streamed reply's token writes; a non-streamed one's `engine_steps` (the end of the step
/// that produced each token), as vLLM observes them for every request.
fn timings(
    rec: &TruthRecord,
    api: Api,
    finished: FinishReason,
    engine_steps: Option<&[u64]>,
) -> RequestTimings {
    let secs = |a: u64, b: u64| b.saturating_sub(a) as f64 / 1e9;
    let since_arrival = |t: Option<u64>| t.map(|t| secs(rec.arrival_ns, t));
    let between = |a: Option<u64>, b: Option<u64>| a.zip(b).map(|(a, b)| secs(a, b));
    // Token chunks after the first (the role chunk, if any, comes first).
    let skip = if api == Api::Chat { 2 } else { 1 };
    let tokens = rec
        .chunk_ns
        .iter()
        .skip(skip)
        .take(rec.completion_tokens.saturating_sub(1) as usize);
    let (ttft, itl) = match engine_steps {
        Some(steps) => (
            since_arrival(rec.engine_first_token_ns),
            steps.windows(2).map(|w| secs(w[0], w[1])).collect(),
        ),
        None => (
            since_arrival(rec.first_token_ns),
            rec.first_token_ns
                .iter()
                .chain(tokens)
                .collect::<Vec<_>>()
                .windows(2)
                .map(|w| secs(*w[0], *w[1]))
                .collect(),
        ),
    };
    RequestTimings {
        ttft,
        itl,
        e2e: Some(secs(rec.arrival_ns, rec.end_ns)),
        // Waiting for the engine, from the request's whole arrival: a body trickled in over
        // 50 s is the client's upload, not the engine's queue (vLLM times WAITING alike).
        queue: between(
            Some(rec.body_received_ns.max(rec.arrival_ns)),
            rec.admitted_ns,
        ),
        prefill: between(rec.admitted_ns, rec.engine_first_token_ns),
        decode: between(rec.engine_first_token_ns, rec.engine_last_token_ns),
        inference: between(rec.admitted_ns, rec.engine_last_token_ns),
        finished,
    }
}

/// An error reply for a generation request, recorded in its truth record.
pub(crate) async fn respond_error(
    conn: &mut Conn,
    rec: &mut TruthRecord,
    status: u16,
    message: &str,
    keep_alive: bool,
) -> Next {
    let body = chunk::error_body(status, message);
    rec.status = status;
    rec.error = Some(message.to_owned());
    match http::respond(
        conn,
        status,
        "application/json",
        body.as_bytes(),
        keep_alive,
        &[],
    )
    .await
    {
        Ok(t) => {
            rec.first_byte_ns = Some(t);
            rec.end_ns = t;
            if keep_alive {
                Next::Continue
            } else {
                Next::Close
            }
        }
        Err(_) => {
            let now = MonoTime::now().as_nanos();
            rec.end_ns = now;
            rec.disconnected = true;
            rec.disconnect_ns = Some(now);
            Next::Close
        }
    }
}

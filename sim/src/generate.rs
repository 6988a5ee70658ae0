//! Serving one generation request: fault choice, submission to the engine, and writing the
//! streamed (SSE) or complete reply while recording ground truth.

use std::sync::atomic::Ordering::{Acquire, Relaxed};
use std::time::Duration;

use bytes::Bytes;
use canary_core::MonoTime;

use crate::chunk::{self, Chunks, Usage};
use crate::engine::{SeqGuard, SeqState};
use crate::fault::FaultPlan;
use crate::http::{self, Conn, RequestHead};
use crate::metrics::RequestTimings;
use crate::openai::{Api, GenRequest};
use crate::server::{respond_error, write_timed, Next, Shared};
use crate::truth::TruthRecord;

/// Serves a chat or completions request; fills `rec`.
pub(crate) async fn serve(
    shared: &Shared,
    conn: &mut Conn,
    head: &RequestHead,
    body: Bytes,
    rec: &mut TruthRecord,
    api: Api,
) -> Next {
    let keep_alive = head.keep_alive;
    let index = shared.gen_index.fetch_add(1, Relaxed);
    let fault = match head.header("x-sim-fault") {
        Some(spec) => match FaultPlan::parse(spec) {
            Ok(p) => p,
            Err(e) => {
                return respond_error(conn, rec, 400, &format!("x-sim-fault: {e}"), keep_alive)
                    .await
            }
        },
        None => shared.faults.draw(index).cloned().unwrap_or_default(),
    };
    let reasoning = match head.header("x-sim-reasoning-tokens") {
        Some(v) => match v.parse::<u32>() {
            Ok(n) => n,
            Err(_) => {
                let msg = format!("x-sim-reasoning-tokens: {v:?} is not a non-negative integer");
                return respond_error(conn, rec, 400, &msg, keep_alive).await;
            }
        },
        None => shared.reasoning_tokens,
    };
    let req = match GenRequest::parse(api, &body, shared.block_size) {
        Ok(r) => r,
        Err(msg) => return respond_error(conn, rec, 400, &msg, keep_alive).await,
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
        stall(fault.stall_first_ms).await;
        let body = chunk::error_body(status, &format!("injected fault: status={status}"));
        let head_bytes = http::response_head(
            status,
            "application/json",
            Some(body.len()),
            keep_alive,
            &extra,
        );
        return finish_plain(
            conn,
            rec,
            status,
            head_bytes,
            body.as_bytes(),
            &fault,
            keep_alive,
        )
        .await;
    }

    let profile = shared.engine.profile();
    let max_tokens = req.max_tokens.unwrap_or(profile.default_max_tokens);
    let need = req.prompt.count as u64 + max_tokens as u64;
    if need > profile.kv_budget_tokens {
        let msg = format!(
            "This model's maximum context length is {} tokens. However, you requested {need} tokens \
             ({} in the messages, {max_tokens} in the completion).",
            profile.kv_budget_tokens, req.prompt.count
        );
        return respond_error(conn, rec, 400, &msg, keep_alive).await;
    }
    let reasoning = if api == Api::Chat {
        reasoning.min(max_tokens)
    } else {
        0
    };
    let state = shared.engine.submit(req.prompt, max_tokens);
    let _guard = SeqGuard(state.clone());
    let id = match api {
        Api::Chat => format!("chatcmpl-canary-sim-{}", rec.seq),
        Api::Completions => format!("cmpl-canary-sim-{}", rec.seq),
    };
    let job = Job {
        shared,
        state: &state,
        api,
        id,
        max_tokens,
        reasoning,
        fault: &fault,
        extra: &extra,
        keep_alive,
    };
    let next = if req.stream {
        job.stream(conn, rec, req.include_usage).await
    } else {
        job.complete(conn, rec).await
    };
    let admitted = state.admitted_ns.load(Acquire);
    if admitted != 0 {
        rec.admitted_ns = Some(admitted);
    }
    rec.cached_tokens = state.cached_tokens.load(Relaxed);
    let secs = |a: u64, b: u64| b.saturating_sub(a) as f64 / 1e9;
    let timings = RequestTimings {
        ttft: rec.first_token_ns.map(|t| secs(rec.arrival_ns, t)),
        itl: rec
            .first_token_ns
            .iter()
            .chain(token_times(rec, api))
            .collect::<Vec<_>>()
            .windows(2)
            .map(|w| secs(*w[0], *w[1]))
            .collect(),
        e2e: Some(secs(rec.arrival_ns, rec.end_ns)),
        queue: rec.admitted_ns.map(|t| secs(rec.arrival_ns, t)),
    };
    shared
        .metrics
        .finish(rec.prompt_tokens, rec.completion_tokens, &timings);
    next
}

/// Write times of token chunks after the first (the role chunk, if any, comes first).
fn token_times(rec: &TruthRecord, api: Api) -> impl Iterator<Item = &u64> {
    let skip = if api == Api::Chat { 2 } else { 1 };
    rec.chunk_ns
        .iter()
        .skip(skip)
        .take(rec.completion_tokens.saturating_sub(1) as usize)
}

struct Job<'a> {
    shared: &'a Shared,
    state: &'a SeqState,
    api: Api,
    id: String,
    max_tokens: u32,
    reasoning: u32,
    fault: &'a FaultPlan,
    extra: &'a [(&'a str, &'a str)],
    keep_alive: bool,
}

impl Job<'_> {
    /// Waits for the engine to reach `tokens`, watching for the client leaving.
    async fn wait_for(&self, conn: &mut Conn, tokens: u32) -> Result<u32, ()> {
        loop {
            let g = self.state.generated.load(Acquire);
            if g >= tokens {
                return Ok(g);
            }
            tokio::select! {
                _ = self.state.notify.notified() => {}
                alive = conn.read_more() => if !alive { return Err(()) },
            }
        }
    }

    async fn stream(&self, conn: &mut Conn, rec: &mut TruthRecord, include_usage: bool) -> Next {
        let f = self.fault;
        let chunks = Chunks::new(self.api, &self.id, &self.shared.model);
        stall(f.stall_first_ms).await;
        let head = http::response_head(200, "text/event-stream", None, self.keep_alive, self.extra);
        match write_head(conn, &head, f.trickle_headers_ms).await {
            Ok(t) => rec.first_byte_ns = Some(t),
            Err(e) => return client_gone(rec, e.to_string()),
        }
        rec.status = 200;
        let mut payload = Vec::with_capacity(4096);
        let mut out = Vec::with_capacity(4096);
        let mut written = 0u32;
        let mut stalled = false;
        // Reset after N token chunks, or after the last one if there are fewer.
        let reset_at = f.reset_after.map(|n| n.min(self.max_tokens));
        loop {
            if reset_at == Some(written) {
                return reset(conn, rec);
            }
            if let Some((ms, at)) = f.stall_mid {
                if !stalled && written == at {
                    stalled = true;
                    stall(Some(ms)).await;
                }
            }
            let generated = match self.wait_for(conn, written + 1).await {
                Ok(g) => g,
                Err(()) => return client_gone(rec, "client closed the connection".into()),
            };
            let mut limit = generated.min(self.max_tokens);
            if let Some(n) = reset_at {
                limit = limit.min(n);
            }
            if let Some((_, at)) = f.stall_mid {
                if !stalled && at > written {
                    limit = limit.min(at);
                }
            }
            payload.clear();
            let mut events = 0;
            let mut first_output = None;
            if written == 0 && self.api == Api::Chat {
                chunks.push_role(&mut payload);
                events += 1;
            }
            for i in written..limit {
                let reasoning = i < self.reasoning;
                if !reasoning && first_output.is_none() {
                    first_output = Some(());
                }
                chunks.push_token(&mut payload, i, reasoning, f.malformed_at == Some(i + 1));
                events += 1;
            }
            let done = limit == self.max_tokens && reset_at.is_none();
            if done {
                chunks.push_finish(&mut payload);
                events += 1;
                if include_usage {
                    let usage = Usage {
                        prompt: rec.prompt_tokens,
                        completion: self.max_tokens,
                        cached: self.state.cached_tokens.load(Relaxed),
                        reasoning: self.reasoning,
                    };
                    chunks.push_usage(&mut payload, &usage);
                    events += 1;
                }
                if !f.no_done {
                    Chunks::push_done(&mut payload);
                    events += 1;
                }
            }
            out.clear();
            http::push_chunk(&mut out, &payload);
            if done {
                out.extend_from_slice(http::LAST_CHUNK);
            }
            let t = match write_timed(conn, &out).await {
                Ok(t) => t,
                Err(e) => return client_gone(rec, e.to_string()),
            };
            rec.first_chunk_ns.get_or_insert(t);
            if limit > written {
                rec.first_token_ns.get_or_insert(t);
                if first_output.is_some() {
                    rec.first_output_ns.get_or_insert(t);
                }
            }
            rec.chunk_ns.extend(std::iter::repeat_n(t, events));
            rec.completion_tokens = limit;
            rec.reasoning_tokens = limit.min(self.reasoning);
            rec.end_ns = t;
            written = limit;
            if done {
                return match f.close_after {
                    Some(ms) => Next::CloseAfter(ms),
                    None => Next::Continue,
                };
            }
        }
    }

    async fn complete(&self, conn: &mut Conn, rec: &mut TruthRecord) -> Next {
        let f = self.fault;
        if self.wait_for(conn, self.max_tokens).await.is_err() {
            return client_gone(rec, "client closed the connection".into());
        }
        stall(f.stall_first_ms).await;
        if f.reset_after.is_some() {
            return reset(conn, rec);
        }
        let usage = Usage {
            prompt: rec.prompt_tokens,
            completion: self.max_tokens,
            cached: self.state.cached_tokens.load(Relaxed),
            reasoning: self.reasoning,
        };
        let mut body = chunk::full_body(
            self.api,
            &self.id,
            &self.shared.model,
            self.reasoning,
            &usage,
        );
        if f.malformed_at.is_some() {
            body.truncate(body.len() / 2);
        }
        rec.completion_tokens = self.max_tokens;
        rec.reasoning_tokens = self.reasoning;
        let head = http::response_head(
            200,
            "application/json",
            Some(body.len()),
            self.keep_alive,
            self.extra,
        );
        finish_plain(conn, rec, 200, head, body.as_bytes(), f, self.keep_alive).await
    }
}

/// Writes a head (possibly trickled) and a body; records the times.
async fn finish_plain(
    conn: &mut Conn,
    rec: &mut TruthRecord,
    status: u16,
    head: Vec<u8>,
    body: &[u8],
    fault: &FaultPlan,
    keep_alive: bool,
) -> Next {
    let result = if fault.trickle_headers_ms.is_some() {
        match write_head(conn, &head, fault.trickle_headers_ms).await {
            Ok(t) => {
                rec.first_byte_ns = Some(t);
                write_timed(conn, body).await
            }
            Err(e) => Err(e),
        }
    } else {
        let all = [head.as_slice(), body].concat();
        let r = write_timed(conn, &all).await;
        if let Ok(t) = r {
            rec.first_byte_ns = Some(t);
        }
        r
    };
    match result {
        Ok(t) => {
            rec.status = status;
            rec.end_ns = t;
            match (keep_alive, fault.close_after) {
                (true, None) => Next::Continue,
                (true, Some(ms)) => Next::CloseAfter(ms),
                (false, _) => Next::Close,
            }
        }
        Err(e) => client_gone(rec, e.to_string()),
    }
}

/// Writes the response head, in pieces over `trickle_ms` if given. Returns the time the first
/// byte was written.
async fn write_head(conn: &mut Conn, head: &[u8], trickle_ms: Option<u64>) -> std::io::Result<u64> {
    let Some(ms) = trickle_ms else {
        return write_timed(conn, head).await;
    };
    const PIECE: usize = 8;
    let pieces = head.len().div_ceil(PIECE).clamp(1, ms.max(1) as usize);
    let size = head.len().div_ceil(pieces);
    let gap = Duration::from_millis(ms) / pieces as u32;
    let mut first = None;
    for (i, piece) in head.chunks(size).enumerate() {
        if i > 0 {
            tokio::time::sleep(gap).await;
        }
        let t = write_timed(conn, piece).await?;
        first.get_or_insert(t);
    }
    Ok(first.unwrap_or_else(|| MonoTime::now().as_nanos()))
}

async fn stall(ms: Option<u64>) {
    if let Some(ms) = ms.filter(|&ms| ms > 0) {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}

fn reset(conn: &mut Conn, rec: &mut TruthRecord) -> Next {
    let _ = conn.stream.set_zero_linger();
    rec.error = Some("injected reset".into());
    rec.end_ns = MonoTime::now().as_nanos();
    Next::Reset
}

fn client_gone(rec: &mut TruthRecord, why: String) -> Next {
    rec.error = Some(why);
    rec.end_ns = MonoTime::now().as_nanos();
    Next::Close
}

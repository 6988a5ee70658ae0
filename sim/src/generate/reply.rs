//! Writing a generation reply, streamed (SSE) or complete, with its faults, while recording the
//! write times in the request's ground truth.

use std::sync::atomic::Ordering::{Acquire, Relaxed};
use std::time::Duration;

use canary_core::MonoTime;

use crate::chunk::{self, Chunks, Usage};
use crate::engine::SeqState;
use crate::fault::FaultPlan;
use crate::http::write_timed;
use crate::http::{self, Conn};
use crate::openai::Api;
use crate::shared::{Next, Shared};
use crate::truth::TruthRecord;

/// Token chunks written in one turn at most (about 50 KB).
const MAX_TOKENS_PER_WRITE: u32 = 256;

pub(super) struct Job<'a> {
    pub shared: &'a Shared,
    pub state: &'a SeqState,
    pub api: Api,
    pub id: String,
    pub max_tokens: u32,
    pub reasoning: u32,
    pub fault: &'a FaultPlan,
    pub extra: &'a [(&'a str, &'a str)],
    pub keep_alive: bool,
    /// An HTTP/1.0 client: a stream goes close-delimited, not chunked.
    pub http10: bool,
}

impl Job<'_> {
    /// Waits for the engine to reach `tokens`, watching for the client leaving and writing what
    /// a slow link has due meanwhile. `Err` is why the client is gone.
    async fn wait_for(&self, conn: &mut Conn, tokens: u32) -> Result<u32, String> {
        loop {
            let g = self.state.generated.load(Acquire);
            if g >= tokens {
                return Ok(g);
            }
            let due = conn.until_due();
            tokio::select! {
                _ = self.state.notify.notified() => {}
                alive = conn.read_more() => if !alive {
                    return Err("client closed the connection".into());
                },
                _ = sleep_or_never(due) => {
                    conn.flush_due().await.map_err(|e| e.to_string())?;
                }
            }
        }
    }

    pub async fn stream(
        &self,
        conn: &mut Conn,
        rec: &mut TruthRecord,
        include_usage: bool,
    ) -> Next {
        let f = self.fault;
        let chunks = Chunks::new(self.api, &self.id, &self.shared.model);
        if let Err(e) = stall(conn, f.stall_first_ms).await {
            return client_gone(rec, e.to_string());
        }
        let framing = if self.http10 {
            http::Framing::Close
        } else {
            http::Framing::Chunked
        };
        let chunked = framing == http::Framing::Chunked;
        let head = http::framed_head(
            200,
            "text/event-stream",
            framing,
            self.keep_alive,
            self.extra,
        );
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
                    if let Err(e) = stall(conn, Some(ms)).await {
                        return client_gone(rec, e.to_string());
                    }
                }
            }
            let generated = match self.wait_for(conn, written + 1).await {
                Ok(g) => g,
                Err(why) => return client_gone(rec, why),
            };
            // A client that stopped reading lets the engine run ahead: write what it made in
            // pieces, so a turn's buffer stays small however far behind the client is.
            let mut limit = generated
                .min(self.max_tokens)
                .min(written.saturating_add(MAX_TOKENS_PER_WRITE));
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
            if chunked {
                http::push_chunk(&mut out, &payload);
                if done {
                    out.extend_from_slice(http::LAST_CHUNK);
                }
            } else {
                out.extend_from_slice(&payload);
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
                    // The close ends a close-delimited body.
                    None if !chunked => Next::Close,
                    None => Next::Continue,
                };
            }
        }
    }

    pub async fn complete(&self, conn: &mut Conn, rec: &mut TruthRecord) -> Next {
        let f = self.fault;
        if let Err(why) = self.wait_for(conn, self.max_tokens).await {
            return client_gone(rec, why);
        }
        if let Err(e) = stall(conn, f.stall_first_ms).await {
            return client_gone(rec, e.to_string());
        }
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
            // Half the body's bytes, at a character boundary: a model named in non-ASCII
            // letters put the middle inside a character, where `truncate` panics.
            let half = canary_core::prefix_within(&body, body.len() / 2).len();
            body.truncate(half);
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
pub(super) async fn finish_plain(
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
            conn.pause(gap).await?;
        }
        let t = write_timed(conn, piece).await?;
        first.get_or_insert(t);
    }
    Ok(first.unwrap_or_else(|| MonoTime::now().as_nanos()))
}

pub(super) async fn stall(conn: &mut Conn, ms: Option<u64>) -> std::io::Result<()> {
    match ms.filter(|&ms| ms > 0) {
        Some(ms) => conn.pause(Duration::from_millis(ms)).await,
        None => Ok(()),
    }
}

async fn sleep_or_never(d: Option<Duration>) {
    match d {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}

fn reset(conn: &mut Conn, rec: &mut TruthRecord) -> Next {
    let _ = conn.stream.set_zero_linger();
    rec.error = Some("injected reset".into());
    rec.end_ns = MonoTime::now().as_nanos();
    Next::Reset
}

/// The client left (a read saw the end of the stream, or a write failed).
pub(super) fn client_gone(rec: &mut TruthRecord, why: String) -> Next {
    let now = MonoTime::now().as_nanos();
    rec.error = Some(why);
    rec.end_ns = now;
    rec.disconnected = true;
    rec.disconnect_ns = Some(now);
    Next::Close
}

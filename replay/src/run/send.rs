//! One request, top to bottom: build it, take its place under the in-flight ceilings, open
//! its connection ahead, have the release thread write it at its deadline (`held`) or wait
//! for its release and write it, exchange (once more on a fresh connection when a pooled one
//! was already closed), and record what was measured.

use super::record::{self, connect_error, connected, stopped};
use super::replicas::Replica;
use super::{release, unless_stopped, Ctx};
use crate::connection::{ConnectError, Connection, Connector};
use crate::exchange::{duplicate, exchange, Gaps, Measurement, ReadLimits};
use crate::ids::TraceContext;
use crate::prompt::PromptBuilder;
use crate::rx_stamp::Stamp;
use crate::target::Target;
use bytes::Bytes;
use canary_core::{MonoTime, RequestRecord, TraceRequest};
use held::{send_held, Held};
use http_body_util::Full;
use std::sync::atomic::Ordering;
use tokio::sync::{Semaphore, SemaphorePermit};
use tokio_util::sync::CancellationToken;

mod held;

type Request = http::Request<Full<Bytes>>;

/// Prepares, releases and measures one request. `not_before`: a previous turn's end that
/// may hold this one back past its deadline. `None` when the run stopped before the request
/// was sent: every wait before sending (connection, deadline, concurrency slot) gives way to
/// the stop, so a stopped run sends nothing more and counts the rest as unsent.
pub(super) async fn send_one(
    ctx: &Ctx,
    req: &TraceRequest,
    scheduled: MonoTime,
    not_before: Option<MonoTime>,
    warmup: bool,
) -> Option<(RequestRecord, Gaps)> {
    let pick = ctx.replicas.pick();
    let (target, connector) = (&pick.replica.target, &pick.replica.connector);
    let (mut rec, request) = build(ctx, req, pick.replica, scheduled, warmup).await;
    let limits = read_limits(ctx, target, req, warmup);
    // Under the open-file ceiling a request holds a slot from before it opens its
    // connection to its end; waiting for one past the deadline is held time.
    let (_slot, slot_free_at) = take(ctx.slots.as_ref(), &ctx.stop).await?;
    // Open (or take) the connection ahead of the deadline, so a burst never waits on setup.
    // Under a concurrency ceiling the request may wait for a slot: it takes one only then,
    // from the pool the ceiling keeps warm, instead of holding an idle socket meanwhile.
    let early = match ctx.permits {
        None => Some(unless_stopped(&ctx.stop, acquire(connector)).await?),
        Some(_) => None,
    };
    // Not held back by its previous turn, no ceiling to wait on after the deadline and a
    // connection ready: the release thread writes the request itself.
    let on_time = not_before.is_none_or(|end| end <= scheduled);
    let early = match early {
        Some(Ok(conn)) if on_time => {
            if let Some(h) = slot_free_at {
                rec.hold_ms = h.ms_since(scheduled).max(0.0);
                count_ceiling_wait(ctx, h, scheduled, warmup);
            }
            let held = Held {
                conn,
                request,
                scheduled,
                warmup,
            };
            // Boxed, here and below: the exchange's state is large, and inline it made every
            // session task's future large, copied several times over at each spawn (a fifth of
            // all instructions were those copies, by callgrind).
            let m = Box::pin(send_held(ctx, connector, held, &limits, &mut rec)).await?;
            return Some(record::counted(ctx, rec, m, warmup));
        }
        early => early,
    };
    let released = release(ctx, scheduled, not_before).await?;
    let (_permit, permit_free_at) = take(ctx.permits.as_ref(), &ctx.stop).await?;
    if let Some(h) = permit_free_at.max(slot_free_at) {
        count_ceiling_wait(ctx, h, scheduled, warmup);
    }
    let hold_end = permit_free_at.or(released.hold_end).max(slot_free_at);
    if let Some(h) = hold_end {
        rec.hold_ms = h.ms_since(scheduled).max(0.0);
    }

    let conn = match early {
        Some(c) => c,
        None => unless_stopped(&ctx.stop, acquire(connector)).await?,
    };
    // A stop that came while this request was being released is not in flight yet.
    if ctx.stop.is_cancelled() {
        return None;
    }
    let conn = match conn {
        Ok(c) => c,
        Err((e, at)) => return Some(record::connect_failed(ctx, rec, &e, at, warmup)),
    };
    connected(&mut rec, &conn, ctx.t0);
    if !warmup {
        ctx.progress.sent.fetch_add(1, Ordering::Relaxed);
    }
    let deadline = tokio::time::Instant::now() + ctx.config.target.timeout;
    let (m, conn) = Box::pin(send(
        ctx, connector, conn, request, deadline, &limits, &mut rec,
    ))
    .await;
    record::fill(&mut rec, &m, ctx.t0, &ctx.secrets);
    if m.error.is_none() && m.reusable {
        connector.release(conn);
    }
    Some(record::counted(ctx, rec, m, warmup))
}

/// The request's record as known before it is sent, and the request itself: prompt, body
/// and headers (`x-request-id`, `traceparent`) for `replica`.
async fn build(
    ctx: &Ctx,
    req: &TraceRequest,
    replica: &Replica,
    scheduled: MonoTime,
    warmup: bool,
) -> (RequestRecord, Request) {
    let trace = TraceContext::new();
    let mut rec = RequestRecord {
        url: Some(replica.url.to_string()),
        id: req.index,
        trace_line: req.line,
        session: req.session,
        turn: req.turn,
        warmup,
        scheduled_at_ms: scheduled.ms_since(ctx.t0),
        input_tokens: req.input_tokens,
        output_tokens: req.output_tokens,
        trace_id: trace.trace_id.clone(),
        span_id: trace.span_id.clone(),
        ..Default::default()
    };
    let request_id = format!("{}-{}", ctx.config.run_id, req.index);
    let traceparent = trace.traceparent_sampled(trace.is_sampled(ctx.config.trace_sample_ratio));
    let salt = ctx.config.prompt_salt;
    let (tokens, request) = encode(
        &ctx.prompts,
        req,
        &replica.target,
        salt,
        &traceparent,
        &request_id,
    );
    rec.prompt_tokens_synthesized = tokens;
    (rec, request)
}

/// `req`'s prompt built and encoded into `target`'s request: the prompt's synthesized token
/// count and the request.
fn encode(
    prompts: &PromptBuilder,
    req: &TraceRequest,
    target: &Target,
    salt: u64,
    traceparent: &str,
    request_id: &str,
) -> (Option<u32>, Request) {
    let prompt = prompts.build(req, salt);
    let tokens = prompt.tokens;
    let body = target.body(&prompt.body, req.output_tokens, req.extra());
    drop(prompt);
    (tokens, target.request(body, traceparent, request_id))
}

/// A connection from `connector`, or why none could be had and when that was known.
async fn acquire(connector: &Connector) -> Result<Connection, (ConnectError, MonoTime)> {
    connector.acquire().await.map_err(|e| (e, MonoTime::now()))
}

/// A permit of `ceiling` (none without that ceiling), and when it came if it had to be
/// waited for; `None` if the run stopped first.
async fn take<'a>(
    ceiling: Option<&'a Semaphore>,
    stop: &CancellationToken,
) -> Option<(Option<SemaphorePermit<'a>>, Option<MonoTime>)> {
    let Some(sem) = ceiling else {
        return Some((None, None));
    };
    match sem.try_acquire() {
        Ok(p) => Some((Some(p), None)),
        Err(_) => {
            let p = unless_stopped(stop, sem.acquire()).await?.ok();
            Some((p, Some(MonoTime::now())))
        }
    }
}

/// Counts a measured request whose place under the in-flight ceiling came free only at
/// `free_at`, past its deadline: the ceiling held the load back (`in_flight_cap.waited`).
fn count_ceiling_wait(ctx: &Ctx, free_at: MonoTime, scheduled: MonoTime, warmup: bool) {
    if !warmup && free_at > scheduled {
        ctx.progress.ceiling_waits.fetch_add(1, Ordering::Relaxed);
    }
}

/// How much of the response may be read, and whether it is one this run cancels.
fn read_limits(ctx: &Ctx, target: &Target, req: &TraceRequest, warmup: bool) -> ReadLimits {
    let max_tokens = target.max_tokens_sent(req.output_tokens);
    ReadLimits {
        caps: target.limits,
        held: ctx.held.clone(),
        max_chunks: target.limits.max_output_chunks(max_tokens),
        max_tokens,
        cancel_after: ctx
            .config
            .cancellation
            .filter(|c| !warmup && c.cancels(req.index))
            .map(|c| c.delay),
        secrets: ctx.secrets.clone(),
    }
}

/// Sends `request` on `conn` and reads the response, until `deadline` or the hard stop.
///
/// A pooled connection may have been closed by the server just as it was taken (llama.cpp
/// closes after each stream, its FIN racing the next request): then the request never
/// reached the server ([`Measurement::unanswered`]: no byte back, and the failure right after
/// the send), and it is sent once more on a new connection, within the same deadline. The
/// record's send time is the second attempt's, so the lost time shows as schedule lag, as a
/// wait for the connection up to the fresh one's opening (`connect_wait_ms`); later requests
/// stop reusing connections to this server.
pub(super) async fn send(
    ctx: &Ctx,
    connector: &Connector,
    mut conn: Connection,
    request: Request,
    deadline: tokio::time::Instant,
    limits: &ReadLimits,
    rec: &mut RequestRecord,
) -> (Measurement, Connection) {
    let reused = conn.connect_time.is_none();
    let second_try = reused.then(|| duplicate(&request));
    let mut m = read_response(ctx, &mut conn, request, deadline, limits).await;
    if let (true, Some(request)) = (m.unanswered, second_try) {
        connector.stop_reuse();
        match unless_stopped(&ctx.hard_stop, connector.open()).await {
            None => stopped(&mut m),
            Some(Ok(fresh)) => {
                conn = fresh;
                connected(rec, &conn, ctx.t0);
                m = read_response(ctx, &mut conn, request, deadline, limits).await;
            }
            // The request never reached the server, and no connection could be opened to
            // send it again: that is a failure to connect.
            Some(Err(e)) => unreachable_again(&mut m, &e),
        }
    }
    (m, conn)
}

/// One exchange on `conn`, cut short by the hard stop (what it measured by then is kept).
pub(super) async fn read_response(
    ctx: &Ctx,
    conn: &mut Connection,
    request: Request,
    deadline: tokio::time::Instant,
    limits: &ReadLimits,
) -> Measurement {
    let streaming = ctx.config.target.streaming;
    exchange(
        conn,
        request,
        streaming,
        deadline,
        limits,
        None,
        &ctx.hard_stop,
    )
    .await
}

/// `m`, of a request that never reached the server, as the failure to connect `e` that kept
/// it from being sent again.
pub(super) fn unreachable_again(m: &mut Measurement, e: &ConnectError) {
    m.error = Some(connect_error(e));
    m.end = Stamp::read(MonoTime::now());
}

//! A request written at its deadline by the release thread itself (issue 21).
//!
//! The request is handed to its connection ahead of the deadline, where the connection's gate
//! holds its bytes ([`crate::connection`]); the release thread writes them at the deadline, so
//! no runtime worker wakes to send it, and only the response wakes one. A stop before the
//! release withdraws it: nothing reaches the server and it counts as unsent.

use super::{read_response, unreachable_again, Request};
use crate::connection::{Connection, Connector, GateShared};
use crate::dispatch::Release;
use crate::exchange::{duplicate, exchange, Measurement, ReadLimits, CLOSED_UNSENT};
use crate::run::record::{self, connected, stopped};
use crate::run::{release, unless_stopped, Ctx, Progress};
use crate::rx_stamp::Stamp;
use canary_core::{ErrorKind, MonoTime, RequestError, RequestRecord};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A request ready to be held: built, its connection open, on time.
pub(in crate::run) struct Held {
    pub conn: Connection,
    pub request: Request,
    pub scheduled: MonoTime,
    pub warmup: bool,
}

/// What the release thread runs at the deadline: the gate's write, and the count of sent
/// requests for the progress display.
struct Releaser {
    gate: Arc<GateShared>,
    progress: Option<Arc<Progress>>,
}

impl Release for Releaser {
    fn release(&self) {
        if self.gate.send_held() {
            if let Some(p) = &self.progress {
                p.sent.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Withdraws a request that has not gone out when its exchange ends or is dropped, so the
/// release thread never writes a request nobody waits for.
struct Withdraw(Arc<GateShared>);

impl Drop for Withdraw {
    fn drop(&mut self) {
        self.0.withdraw();
    }
}

/// Sends `held` at its deadline and reads the response, filling `rec`; `None` when the run
/// stopped before it went out. A pooled connection the server closed sends it once more on a
/// fresh connection: still at the deadline when the first never went out, else at once (the
/// lost time is schedule lag) within the first attempt's deadline.
pub(in crate::run) async fn send_held(
    ctx: &Ctx,
    connector: &Connector,
    held: Held,
    limits: &ReadLimits,
    rec: &mut RequestRecord,
) -> Option<Measurement> {
    let Held {
        mut conn,
        request,
        scheduled,
        warmup,
    } = held;
    if ctx.stop.is_cancelled() {
        return None;
    }
    connected(rec, &conn, ctx.t0);
    let second_try = conn.connect_time.is_none().then(|| duplicate(&request));
    let (mut m, deadline) =
        held_exchange(ctx, &mut conn, request, scheduled, limits, warmup).await?;
    if m.unanswered {
        let went = !conn.gate.withdraw();
        match second_try {
            Some(request) => {
                connector.stop_reuse();
                match unless_stopped(&ctx.hard_stop, connector.open()).await {
                    None => stopped(&mut m),
                    Some(Ok(fresh)) => {
                        conn = fresh;
                        connected(rec, &conn, ctx.t0);
                        // Sent at once, within the first attempt's deadline: one request
                        // never takes more than its timeout.
                        m = if went {
                            read_response(ctx, &mut conn, request, deadline, limits).await
                        } else {
                            held_exchange(ctx, &mut conn, request, scheduled, limits, warmup)
                                .await?
                                .0
                        };
                    }
                    Some(Err(e)) => unreachable_again(&mut m, &e),
                }
            }
            None if !went => {
                // A fresh connection the server closed before its request could go: a
                // failure to connect, recorded at the deadline as when it is found then.
                release(ctx, scheduled, None).await?;
                closed_unsent(&mut m);
            }
            None => {}
        }
    }
    record::fill(rec, &m, ctx.t0, &ctx.secrets);
    if m.error.is_none() && m.reusable {
        connector.release(conn);
    }
    Some(m)
}

/// One exchange whose request the release thread writes at `scheduled`, and its deadline;
/// `None` when the run stopped before it went out.
async fn held_exchange(
    ctx: &Ctx,
    conn: &mut Connection,
    request: Request,
    scheduled: MonoTime,
    limits: &ReadLimits,
    warmup: bool,
) -> Option<(Measurement, tokio::time::Instant)> {
    let timeout = ctx.config.target.timeout;
    let gate = conn.gate.clone();
    if !gate.arm() {
        // Not idle (a pooled connection's last request went out whole, so not expected):
        // released the other way, its task woken to write it.
        release(ctx, scheduled, None).await?;
        if ctx.stop.is_cancelled() {
            return None;
        }
        if !warmup {
            ctx.progress.sent.fetch_add(1, Ordering::Relaxed);
        }
        let deadline = tokio::time::Instant::now() + timeout;
        let m = read_response(ctx, conn, request, deadline, limits).await;
        return Some((m, deadline));
    }
    let _withdraw = Withdraw(gate.clone());
    let releaser = Arc::new(Releaser {
        gate: gate.clone(),
        progress: (!warmup).then(|| ctx.progress.clone()),
    });
    if !ctx.dispatcher.send_at(scheduled, releaser.clone()) {
        // No release thread: due now.
        releaser.release();
    }
    let deadline = tokio::time::Instant::now() + scheduled.since(MonoTime::now()) + timeout;
    let streaming = ctx.config.target.streaming;
    let ex = exchange(
        conn,
        request,
        streaming,
        deadline,
        limits,
        Some(scheduled),
        &ctx.hard_stop,
    );
    tokio::pin!(ex);
    tokio::select! {
        m = &mut ex => return Some((m, deadline)),
        _ = ctx.stop.cancelled() => {}
    }
    // Stopped: not gone out yet, it never will; in flight, it has the grace period.
    if gate.withdraw() {
        return None;
    }
    // In flight: the exchange ends itself at the hard stop, keeping what it measured.
    Some((ex.await, deadline))
}

/// `m`, of a request whose fresh connection closed before it went out, as the failure to
/// connect it is, now.
fn closed_unsent(m: &mut Measurement) {
    let now = MonoTime::now();
    m.sent = now;
    m.end = Stamp::read(now);
    let why = m.error.take().map(|e| e.message).unwrap_or_default();
    // The exchange says it already when hyper canceled the request; said once.
    let message = match why.as_str() {
        w if w.starts_with(CLOSED_UNSENT) => why,
        "" => CLOSED_UNSENT.to_owned(),
        w => format!("{CLOSED_UNSENT}: {w}"),
    };
    m.error = Some(RequestError {
        kind: ErrorKind::Connect,
        http_status: None,
        message,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn closed(why: Option<&str>) -> String {
        let mut m = Measurement {
            error: why.map(|w| RequestError {
                kind: ErrorKind::Connect,
                http_status: None,
                message: w.to_owned(),
            }),
            ..Measurement::default()
        };
        closed_unsent(&mut m);
        let e = m.error.unwrap();
        assert_eq!(e.kind, ErrorKind::Connect);
        e.message
    }

    #[test]
    fn a_closed_unsent_request_says_so_once() {
        let said = "connection closed before the request was sent: TLS handshake: refused";
        assert_eq!(closed(Some(said)), said);
        assert_eq!(
            closed(Some("broken pipe")),
            "connection closed before the request was sent: broken pipe"
        );
        assert_eq!(
            closed(None),
            "connection closed before the request was sent"
        );
    }
}

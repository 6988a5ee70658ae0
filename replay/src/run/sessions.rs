//! Walking a run's [`Work`]: the warm-up, then a planner that starts each session shortly
//! before its first turn is due (or every user of a closed loop at once), each session or
//! user sending its requests in turn through [`send_one`].

use super::planner::{Planner, Sessions};
use super::send::send_one;
use super::work::Unclaimed;
use super::{sleep_until, ClosedLoopWork, Ctx, Work};
use crate::schedule::{Session, TurnDue};
use canary_core::{MonoTime, TraceRequest};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;

/// Sends the warm-up requests, one at a time: the lengths of `shapes`, unique prompts.
pub(super) async fn warmup(ctx: &Ctx, shapes: &[TraceRequest]) {
    for i in 0..ctx.config.warmup_requests {
        if ctx.stop.is_cancelled() || shapes.is_empty() {
            return;
        }
        // Same lengths as real rows, but unique prompts: warm-up must not pre-fill the
        // server's prefix cache with the measured requests' blocks.
        let mut req = shapes[i % shapes.len()].clone();
        req.hash_ids.clear();
        req.index = u32::MAX - i as u32;
        req.line = 0;
        req.session = None;
        let now = MonoTime::now();
        let Some(rec) = send_one(ctx, &req, now, None, true).await else {
            return; // stopped before it was sent
        };
        let _ = ctx.records.send(rec).await;
    }
}

/// Sends all of `work` and returns once every request has ended or the run stopped; what
/// the stop left unsent is counted in `ctx.unsent`.
pub(super) async fn send_all(ctx: &Arc<Ctx>, work: Work) {
    let mut tasks = JoinSet::new();
    let sessions: Box<dyn Sessions + Send> = match work {
        Work::Schedule(s) => Box::new(s.into_sessions()),
        Work::Rate(r) => Box::new(r.into_sessions()),
        Work::ClosedLoop(users) => {
            let users = Arc::new(users);
            for _ in 0..users.users {
                tasks.spawn(run_user(ctx.clone(), users.clone()));
            }
            while tasks.join_next().await.is_some() {}
            match users.unclaimed() {
                Unclaimed::Exact(n) => {
                    ctx.unsent.fetch_add(n, Ordering::Relaxed);
                }
                Unclaimed::Unknown { time_left, at_most } => {
                    let claimed = ctx.unsent.load(Ordering::Relaxed);
                    let most = at_most.map_or(String::new(), |m| {
                        format!(", at most {} with the rest of the count", claimed + m)
                    });
                    let _ = ctx.unsent_unknown.set(format!(
                        "a closed loop bounded by time was stopped {:.3} s before its end: its \
                         users would have sent as many more requests as the server answered in \
                         that time (at least {claimed}: claimed and not sent{most})",
                        time_left.as_secs_f64()
                    ));
                }
            }
            Box::new(std::iter::empty::<Session>())
        }
    };
    let mut planner = Planner::new(sessions, ctx.t0, ctx.timing, ctx.config.prepare_ahead);
    while let Some(wake) = planner.next_wake() {
        if !sleep_until(wake, &ctx.stop).await {
            // This session and every later one are never sent.
            let left = planner.unstarted();
            ctx.unsent.fetch_add(left.requests, Ordering::Relaxed);
            if left.estimated {
                ctx.unsent_estimated.store(true, Ordering::Relaxed);
            }
            break;
        }
        for session in planner.due(MonoTime::now().max(wake)) {
            tasks.spawn(run_session(ctx.clone(), session));
        }
        // Reap finished sessions as we go so the set stays small on long traces.
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
}

/// Sends a session's turns in order; the planner started it when its first turn was to be
/// prepared, so that one is prepared at once.
async fn run_session(ctx: Arc<Ctx>, session: Session) {
    let mut prev_end: Option<MonoTime> = None;
    let turns = session.turns.len();
    for (k, req) in session.turns.into_iter().enumerate() {
        let (scheduled, not_before) = match (prev_end, ctx.timing.turn_due(&req)) {
            (None, _) => (ctx.t0 + ctx.timing.offset(&req), None),
            (Some(_), TurnDue::At(off)) => (ctx.t0 + off, prev_end),
            (Some(end), TurnDue::AfterPrevious(d)) => (end + d, None),
        };
        let prepare_at = match k {
            0 => MonoTime::default(), // now
            _ => scheduled - ctx.config.prepare_ahead,
        };
        if !sleep_until(prepare_at, &ctx.stop).await {
            ctx.unsent.fetch_add((turns - k) as u64, Ordering::Relaxed);
            return;
        }
        let Some((rec, gaps)) = send_one(&ctx, &req, scheduled, not_before, false).await else {
            // Stopped before it was sent.
            ctx.unsent.fetch_add((turns - k) as u64, Ordering::Relaxed);
            return;
        };
        prev_end = Some(ctx.t0 + Duration::from_nanos((rec.ended_at_ms.max(0.0) * 1e6) as u64));
        let _ = ctx.records.send((rec, gaps)).await;
    }
}

/// One user of a closed loop: sends a request, and its next one when that ends, until the
/// loop's count or duration is reached or the run stops. Each request is due when the
/// previous one ended, so any delay of canaryd's shows as schedule lag.
async fn run_user(ctx: Arc<Ctx>, users: Arc<ClosedLoopWork>) {
    let mut due = ctx.t0;
    while !ctx.stop.is_cancelled() {
        let Some(req) = users.next(due.since(ctx.t0)) else {
            return;
        };
        if !sleep_until(due - ctx.config.prepare_ahead, &ctx.stop).await {
            ctx.unsent.fetch_add(1, Ordering::Relaxed);
            break;
        }
        let Some((rec, gaps)) = send_one(&ctx, &req, due, None, false).await else {
            ctx.unsent.fetch_add(1, Ordering::Relaxed);
            break;
        };
        due = ctx.t0 + Duration::from_nanos((rec.ended_at_ms.max(0.0) * 1e6) as u64);
        let _ = ctx.records.send((rec, gaps)).await;
    }
    // Stopped with (possibly) more to send: what it would have sent is the loop's to judge.
    users.cut(due.since(ctx.t0));
}

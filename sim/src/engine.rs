//! The engine: a single task that steps all running sequences, like vLLM's scheduler loop.
//!
//! What a step does (admission, preemption, cost, tokens) is the [`scheduler`] module, plain
//! synchronous code. This module is the clock around it and the state a request's writer shares
//! with it.
//!
//! Time is virtual and exact: the step costs accumulate in `vt`, and the engine sleeps only when
//! `vt` is more than 1 ms ahead of the clock (tokio's timer has 1 ms resolution), otherwise it
//! just yields. So sub-millisecond steps come out in small bursts but at the right average rate.
//! If the engine falls more than 5 ms behind (the host was busy), the lost time is forgotten
//! instead of replayed as a burst, as a real GPU would not catch up either; it is counted
//! (`canary_sim_engine_lag_dropped_seconds_total`), since the sim then served less than its
//! profile says.
//!
//! One step is at most [`MAX_STEP_NS`] (100 s). A longer one (a profile of 100 s per prompt token
//! meeting a long prompt) is cut to that; the time cut is counted too
//! (`canary_sim_engine_step_clamped_seconds_total`) and charged to every sequence that ran in the
//! step (its truth record's `engine_clamped_ns`), so that truth and [`Profile::capacity`] still
//! reconcile: the profile's time is the truth's plus what was cut.

mod scheduler;

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::*};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use canary_core::MonoTime;
use tokio::sync::{mpsc, Notify};

use crate::metrics::Metrics;
use crate::profile::Profile;
use crate::prompt::PromptTokens;
use scheduler::{Scheduler, Seq};

const SLEEP_THRESHOLD_NS: u64 = 1_000_000;
const MAX_LAG_NS: u64 = 5_000_000;
/// The longest one step may take (100 s): a profile's per-token time times a huge prompt
/// would otherwise overflow the engine's clock, and a step of an hour (a posted profile of
/// 100 s per prompt token) wedged the engine past what a profile change could undo.
/// A step's cost past this is cut and counted, not slept.
pub(crate) const MAX_STEP_NS: f64 = 1e11;

/// What the engine and a request's writer share.
#[derive(Debug, Default)]
pub(crate) struct SeqState {
    /// Tokens generated so far (kept across preemptions: they were already streamed).
    pub generated: AtomicU32,
    /// When the engine first admitted it (0 = still waiting): vLLM's `scheduled_ts`.
    pub admitted_ns: AtomicU64,
    /// End of the step that produced its first token: vLLM's `first_token_ts`.
    pub first_token_ns: AtomicU64,
    /// End of the step that produced its latest token: vLLM's `last_token_ts`.
    pub last_token_ns: AtomicU64,
    pub cached_tokens: AtomicU32,
    /// Times the engine preempted it (optimistic KV admission only).
    pub preemptions: AtomicU32,
    /// Step time cut from the steps it ran in, past [`MAX_STEP_NS`] each.
    pub clamped_ns: AtomicU64,
    /// Set when the client is gone; the engine drops the sequence at its next step.
    pub aborted: AtomicBool,
    /// Set by the engine when the sequence has all its tokens.
    pub finished: AtomicBool,
    /// Woken after every generated token.
    pub notify: Notify,
    /// With [`EngineHandle::submit_noting_steps`]: the end of the step that produced each of
    /// its tokens (vLLM's per-iteration times, which its ITL histogram observes); a streamed
    /// request has its writes' times instead.
    pub token_steps_ns: Option<Mutex<Vec<u64>>>,
}

/// A submitted sequence. Dropping it before the engine finished the sequence (the client left,
/// the request's task ended early or was cancelled) aborts it: the engine frees its batch slot
/// and KV at its next step, as vLLM aborts a request whose client disconnected.
pub(crate) struct SeqGuard {
    pub state: Arc<SeqState>,
    aborts: Arc<AtomicU64>,
}

impl Drop for SeqGuard {
    fn drop(&mut self) {
        if !self.state.finished.load(Acquire) {
            self.state.aborted.store(true, Release);
            self.aborts.fetch_add(1, Release);
        }
    }
}

/// The submit side of the engine.
#[derive(Clone)]
pub(crate) struct EngineHandle {
    tx: mpsc::UnboundedSender<Seq>,
    aborts: Arc<AtomicU64>,
    pub profile: Arc<RwLock<Arc<Profile>>>,
}

impl EngineHandle {
    /// Queues a request; its tokens show up in the guard's state.
    pub fn submit(&self, prompt: PromptTokens, max_tokens: u32) -> SeqGuard {
        self.submit_with(SeqState::default(), prompt, max_tokens)
    }

    /// [`EngineHandle::submit`], the engine noting each token's step time in
    /// [`SeqState::token_steps_ns`].
    pub fn submit_noting_steps(&self, prompt: PromptTokens, max_tokens: u32) -> SeqGuard {
        let state = SeqState {
            token_steps_ns: Some(Mutex::new(Vec::new())),
            ..SeqState::default()
        };
        self.submit_with(state, prompt, max_tokens)
    }

    fn submit_with(&self, state: SeqState, prompt: PromptTokens, max_tokens: u32) -> SeqGuard {
        let state = Arc::new(state);
        let _ = self.tx.send(Seq::new(state.clone(), prompt, max_tokens));
        SeqGuard {
            state,
            aborts: self.aborts.clone(),
        }
    }

    pub fn profile(&self) -> Arc<Profile> {
        self.profile.read().expect("profile lock").clone()
    }

    pub fn set_profile(&self, p: Profile) {
        *self.profile.write().expect("profile lock") = Arc::new(p);
    }
}

/// The stepping loop. Build with [`Engine::new`], drive with [`Engine::run`].
pub(crate) struct Engine {
    rx: mpsc::UnboundedReceiver<Seq>,
    profile: Arc<RwLock<Arc<Profile>>>,
    metrics: Arc<Metrics>,
    sched: Scheduler,
    /// [`MAX_STEP_NS`]; shorter in tests, which cannot wait 100 s.
    max_step_ns: f64,
}

impl Engine {
    pub fn new(
        profile: Profile,
        block_size: u32,
        cache_blocks: usize,
        metrics: Arc<Metrics>,
    ) -> (Engine, EngineHandle) {
        let (tx, rx) = mpsc::unbounded_channel();
        let profile = Arc::new(RwLock::new(Arc::new(profile)));
        let aborts = Arc::new(AtomicU64::new(0));
        let engine = Engine {
            rx,
            profile: profile.clone(),
            metrics: metrics.clone(),
            sched: Scheduler::new(block_size, cache_blocks, metrics, aborts.clone()),
            max_step_ns: MAX_STEP_NS,
        };
        (
            engine,
            EngineHandle {
                tx,
                aborts,
                profile,
            },
        )
    }

    pub async fn run(mut self) {
        let mut vt = MonoTime::now().as_nanos();
        loop {
            if self.sched.is_idle() {
                self.sched.publish(1);
                match self.rx.recv().await {
                    Some(s) => self.sched.push(s),
                    None => return,
                }
                vt = MonoTime::now().as_nanos();
            }
            while let Ok(s) = self.rx.try_recv() {
                self.sched.push(s);
            }
            let profile = self.profile.read().expect("profile lock").clone();
            let Some(cost) = self.sched.plan(&profile, MonoTime::now().as_nanos()) else {
                continue;
            };
            let now = MonoTime::now().as_nanos();
            let floor = now.saturating_sub(MAX_LAG_NS);
            if floor > vt {
                self.metrics.lag_dropped_ns.fetch_add(floor - vt, Relaxed);
            }
            if cost > self.max_step_ns {
                let cut = (cost - self.max_step_ns) as u64;
                self.metrics.step_clamped_ns.fetch_add(cut, Relaxed);
                self.sched.charge_clamped(cut);
            }
            vt = vt
                .max(floor)
                .saturating_add(cost.min(self.max_step_ns) as u64);
            if vt > now + SLEEP_THRESHOLD_NS {
                tokio::time::sleep(Duration::from_nanos(vt - now)).await;
            } else {
                tokio::task::yield_now().await;
            }
            self.sched.emit(MonoTime::now().as_nanos());
            self.sched.publish(profile.kv_budget_tokens);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt::Tokenizer;

    #[tokio::test]
    async fn run_completes_requests_and_frees_aborted_ones() {
        let metrics = Arc::new(Metrics::new("m"));
        let mut p = Profile::fast();
        p.decode_base_us = 1_000.0;
        let (e, h) = Engine::new(p, 4, 100, metrics.clone());
        let task = tokio::spawn(e.run());
        let mut t = Tokenizer::new(4);
        (0..5).for_each(|i| t.push_id(i));
        let prompt = t.finish();
        let s = h.submit(prompt.clone(), 7);
        while s.state.generated.load(Acquire) < 7 {
            s.state.notify.notified().await;
        }
        assert!(s.state.finished.load(Acquire));
        let long = h.submit(prompt, 1_000_000);
        while long.state.generated.load(Acquire) < 2 {
            long.state.notify.notified().await;
        }
        drop(long);
        for _ in 0..1000 {
            if metrics.running.load(Relaxed) == 0 && metrics.kv_usage_ppb.load(Relaxed) == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        assert_eq!(
            metrics.running.load(Relaxed),
            0,
            "the aborted sequence was freed"
        );
        assert_eq!(metrics.kv_usage_ppb.load(Relaxed), 0);
        task.abort();
    }

    // A step longer than the cap used to be cut with no trace: the reply came early and
    // neither the metrics nor the truth said the profile was not served.
    #[tokio::test]
    async fn a_step_past_the_cap_is_cut_and_counted() {
        let metrics = Arc::new(Metrics::new("m"));
        let mut p = Profile::fast();
        // A 1 s prefill step, against a cap of 20 ms.
        p.prefill_overhead_us = 1e6;
        let (mut e, h) = Engine::new(p, 4, 100, metrics.clone());
        e.max_step_ns = 2e7;
        let task = tokio::spawn(e.run());
        let mut t = Tokenizer::new(4);
        (0..5).for_each(|i| t.push_id(i));
        let s = h.submit(t.finish(), 2);
        while !s.state.finished.load(Acquire) {
            s.state.notify.notified().await;
        }
        let cut = 1e9 as u64 - 2e7 as u64;
        assert_eq!(s.state.clamped_ns.load(Relaxed), cut);
        assert_eq!(metrics.step_clamped_ns.load(Relaxed), cut);
        task.abort();
    }
}

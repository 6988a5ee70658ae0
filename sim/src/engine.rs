//! The engine: a single task that steps all running sequences, like vLLM's scheduler loop.
//!
//! Each step it (1) admits waiting requests in FIFO order while fewer than `max_running` run and
//! the KV budget has room for `prompt + max_tokens`, (2) costs the step as
//! `decode_base_us + decode_per_seq_us × running` plus, for each request admitted in this step,
//! `prefill_overhead_us + prefill_us_per_token × uncached_prompt_tokens` (prefill is not chunked,
//! so it stretches the step for everyone, as in vLLM without chunked prefill), (3) waits for the
//! step to end, then (4) gives every running sequence one token (so a newly admitted request gets
//! its first token at the end of its prefill step).
//!
//! Time is virtual and exact: the step costs accumulate in `vt`, and the engine sleeps only when
//! `vt` is more than 1 ms ahead of the clock (tokio's timer has 1 ms resolution), otherwise it
//! just yields. So sub-millisecond steps come out in small bursts but at the right average rate.
//! If the engine falls more than 5 ms behind (the host was busy), the lost time is forgotten
//! instead of replayed as a burst, as a real GPU would not catch up either.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::*};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use canary_core::MonoTime;
use tokio::sync::{mpsc, Notify};

use crate::metrics::Metrics;
use crate::prefix_cache::PrefixCache;
use crate::profile::Profile;
use crate::prompt::PromptTokens;

const SLEEP_THRESHOLD_NS: u64 = 1_000_000;
const MAX_LAG_NS: u64 = 5_000_000;

/// What the engine and a request's writer share.
#[derive(Debug, Default)]
pub(crate) struct SeqState {
    /// Tokens generated so far.
    pub generated: AtomicU32,
    /// When the engine admitted it (0 = still waiting).
    pub admitted_ns: AtomicU64,
    pub cached_tokens: AtomicU32,
    /// Set by the writer when the client is gone; the engine drops the sequence.
    pub aborted: AtomicBool,
    /// Woken after every generated token.
    pub notify: Notify,
}

/// Aborts the sequence when the request's task ends early or is cancelled.
pub(crate) struct SeqGuard(pub Arc<SeqState>);

impl Drop for SeqGuard {
    fn drop(&mut self) {
        self.0.aborted.store(true, Release);
    }
}

struct Submission {
    state: Arc<SeqState>,
    prompt: PromptTokens,
    max_tokens: u32,
}

struct Running {
    state: Arc<SeqState>,
    target: u32,
    generated: u32,
    reserved: u64,
    used: u64,
}

/// The submit side of the engine.
#[derive(Clone)]
pub(crate) struct EngineHandle {
    tx: mpsc::UnboundedSender<Submission>,
    pub profile: Arc<RwLock<Arc<Profile>>>,
}

impl EngineHandle {
    /// Queues a request; its tokens show up in the returned state.
    pub fn submit(&self, prompt: PromptTokens, max_tokens: u32) -> Arc<SeqState> {
        let state = Arc::new(SeqState::default());
        let _ = self.tx.send(Submission {
            state: state.clone(),
            prompt,
            max_tokens,
        });
        state
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
    rx: mpsc::UnboundedReceiver<Submission>,
    profile: Arc<RwLock<Arc<Profile>>>,
    cache: PrefixCache,
    metrics: Arc<Metrics>,
    waiting: VecDeque<Submission>,
    running: Vec<Running>,
    reserved: u64,
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
        let engine = Engine {
            rx,
            profile: profile.clone(),
            cache: PrefixCache::new(block_size, cache_blocks),
            metrics,
            waiting: VecDeque::new(),
            running: Vec::new(),
            reserved: 0,
        };
        (engine, EngineHandle { tx, profile })
    }

    pub async fn run(mut self) {
        let mut vt = MonoTime::now().as_nanos();
        loop {
            if self.running.is_empty() && self.waiting.is_empty() {
                self.publish(1);
                match self.rx.recv().await {
                    Some(s) => self.waiting.push_back(s),
                    None => return,
                }
                vt = MonoTime::now().as_nanos();
            }
            while let Ok(s) = self.rx.try_recv() {
                self.waiting.push_back(s);
            }
            let profile = self.profile.read().expect("profile lock").clone();
            let prefill_ns = self.admit(&profile);
            self.drop_aborted();
            if self.running.is_empty() {
                continue;
            }
            let cost = profile.decode_step_ns(self.running.len()) + prefill_ns;
            let now = MonoTime::now().as_nanos();
            vt = vt.max(now.saturating_sub(MAX_LAG_NS)) + cost as u64;
            if vt > now + SLEEP_THRESHOLD_NS {
                tokio::time::sleep(Duration::from_nanos(vt - now)).await;
            } else {
                tokio::task::yield_now().await;
            }
            self.emit();
            self.publish(profile.kv_budget_tokens);
        }
    }

    /// Admits waiting requests; returns the prefill cost they add to this step, in ns.
    fn admit(&mut self, profile: &Profile) -> f64 {
        let mut prefill_ns = 0.0;
        while let Some(front) = self.waiting.front() {
            if front.state.aborted.load(Acquire) {
                self.waiting.pop_front();
                continue;
            }
            let need = front.prompt.count as u64 + front.max_tokens as u64;
            let fits = self.running.len() < profile.max_running as usize
                && self.reserved + need <= profile.kv_budget_tokens;
            // Never deadlock on a request larger than the budget (the profile may have shrunk
            // after it was accepted): run it alone.
            if !fits && !self.running.is_empty() {
                break;
            }
            let s = self.waiting.pop_front().expect("front exists");
            let cached = self
                .cache
                .lookup_and_insert(s.prompt.count, &s.prompt.block_hashes);
            self.metrics
                .prefix_queries
                .fetch_add(s.prompt.count as u64, Relaxed);
            self.metrics.prefix_hits.fetch_add(cached as u64, Relaxed);
            s.state.cached_tokens.store(cached, Relaxed);
            s.state
                .admitted_ns
                .store(MonoTime::now().as_nanos(), Release);
            prefill_ns += profile.prefill_ns(s.prompt.count - cached);
            self.reserved += need;
            self.running.push(Running {
                state: s.state,
                target: s.max_tokens,
                generated: 0,
                reserved: need,
                used: s.prompt.count as u64,
            });
        }
        prefill_ns
    }

    fn drop_aborted(&mut self) {
        let mut freed = 0;
        self.running.retain(|r| {
            let keep = !r.state.aborted.load(Acquire);
            if !keep {
                freed += r.reserved;
            }
            keep
        });
        self.reserved -= freed;
    }

    fn emit(&mut self) {
        let mut freed = 0;
        self.running.retain_mut(|r| {
            r.generated += 1;
            r.used += 1;
            r.state.generated.store(r.generated, Release);
            r.state.notify.notify_one();
            let done = r.generated >= r.target;
            if done {
                freed += r.reserved;
            }
            !done
        });
        self.reserved -= freed;
    }

    fn publish(&self, budget: u64) {
        let m = &self.metrics;
        m.running.store(self.running.len() as u64, Relaxed);
        m.waiting.store(self.waiting.len() as u64, Relaxed);
        let used: u64 = self.running.iter().map(|r| r.used).sum();
        let ppb = (used as f64 / budget.max(1) as f64 * 1e9).min(1e9);
        m.kv_usage_ppb.store(ppb as u64, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt::Tokenizer;

    fn prompt(n: u32) -> PromptTokens {
        let mut t = Tokenizer::new(4);
        for i in 0..n {
            t.push_id(i as u64);
        }
        t.finish()
    }

    fn engine(profile: Profile) -> (Engine, EngineHandle) {
        Engine::new(profile, 4, 100, Arc::new(Metrics::new("m")))
    }

    fn pull(e: &mut Engine) {
        while let Ok(s) = e.rx.try_recv() {
            e.waiting.push_back(s);
        }
    }

    #[test]
    fn admits_fifo_within_capacity_and_emits() {
        let mut p = Profile::illustrative();
        p.max_running = 2;
        p.kv_budget_tokens = 100;
        let (mut e, h) = engine(p.clone());
        let a = h.submit(prompt(10), 3);
        let b = h.submit(prompt(10), 3);
        let c = h.submit(prompt(10), 3);
        pull(&mut e);
        let prefill = e.admit(&p);
        // a computes all 10 tokens; b, admitted after a in the same step, hits a's two blocks.
        assert_eq!(prefill, p.prefill_ns(10) + p.prefill_ns(2));
        assert_eq!((e.running.len(), e.waiting.len()), (2, 1));
        assert_eq!(c.admitted_ns.load(Relaxed), 0);
        for _ in 0..3 {
            e.emit();
        }
        assert_eq!(a.generated.load(Relaxed), 3);
        assert_eq!(b.generated.load(Relaxed), 3);
        assert!(e.running.is_empty());
        assert_eq!(e.reserved, 0);
        // Same prompt again: two full blocks of 4 hit (9 of 10 tokens may hit).
        e.admit(&p);
        assert_eq!(c.cached_tokens.load(Relaxed), 8);
        assert_eq!(e.metrics.prefix_hits.load(Relaxed), 8 + 8);
        assert_eq!(e.metrics.prefix_queries.load(Relaxed), 30);
    }

    #[test]
    fn kv_budget_queues_and_aborts_free() {
        let mut p = Profile::fast();
        p.kv_budget_tokens = 30;
        let (mut e, h) = engine(p.clone());
        let a = h.submit(prompt(10), 10);
        let _b = h.submit(prompt(10), 10);
        pull(&mut e);
        e.admit(&p);
        assert_eq!((e.running.len(), e.waiting.len()), (1, 1));
        a.aborted.store(true, Relaxed);
        e.drop_aborted();
        assert_eq!(e.reserved, 0);
        e.admit(&p);
        assert_eq!((e.running.len(), e.waiting.len()), (1, 0));
        // A request larger than the whole budget still runs when alone.
        let big = h.submit(prompt(50), 1);
        pull(&mut e);
        e.emit();
        assert_eq!(e.running.len(), 1);
        for _ in 0..9 {
            e.emit();
        }
        e.admit(&p);
        assert!(big.admitted_ns.load(Relaxed) != 0);
    }

    #[tokio::test]
    async fn run_completes_requests() {
        let (e, h) = engine(Profile::fast());
        let task = tokio::spawn(e.run());
        let s = h.submit(prompt(5), 7);
        while s.generated.load(Acquire) < 7 {
            s.notify.notified().await;
        }
        task.abort();
    }
}

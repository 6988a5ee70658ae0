//! One engine step, without the clock: which sequences run, what the step costs, who gets a
//! token. Synchronous, so tests can drive it step by step in virtual time.
//!
//! A step ([`Scheduler::plan`], then [`Scheduler::emit`] when its time is up):
//!
//! 1. **Sweep** sequences whose client left (running and waiting), freeing their KV.
//! 2. **Preempt** (optimistic admission only): every running sequence will hold one more token
//!    at the end of the step; while that would exceed the KV budget, the most recently admitted
//!    sequence is preempted: its KV is freed and it goes back to the head of the queue (vLLM's
//!    recompute preemption). A lone sequence is never preempted.
//! 3. **Admit** waiting sequences in FIFO order while fewer than `max_running` run and the KV
//!    budget has room (reserve: `prompt + max_tokens` beside what running sequences reserved;
//!    optimistic: `prompt + generated + 1` beside what running sequences will hold). No
//!    admission in a step that preempted, as in vLLM. A sequence that fits nowhere runs alone
//!    rather than deadlock. The prefix cache is looked up at each admission; a readmitted
//!    sequence recomputes its prompt and the tokens it had generated, minus the cache hits.
//! 4. **Cost**: `decode_base_us + decode_per_seq_us × running` plus each admitted sequence's
//!    prefill, `prefill_overhead_us + prefill_us_per_token × uncached`.
//! 5. **Emit**: at the end of the step every running sequence gets one token.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering::*};
use std::sync::Arc;

use super::SeqState;
use crate::metrics::Metrics;
use crate::prefix_cache::PrefixCache;
use crate::profile::{KvAdmission, Profile};
use crate::prompt::PromptTokens;

/// A sequence, waiting or running.
pub(crate) struct Seq {
    state: Arc<SeqState>,
    prompt: PromptTokens,
    target: u32,
    generated: u32,
    /// Admitted at least once (a waiting sequence with this set was preempted).
    admitted: bool,
}

impl Seq {
    pub fn new(state: Arc<SeqState>, prompt: PromptTokens, max_tokens: u32) -> Seq {
        Seq {
            state,
            prompt,
            target: max_tokens,
            generated: 0,
            admitted: false,
        }
    }

    /// Tokens whose KV it holds while running.
    fn context(&self) -> u64 {
        self.prompt.count as u64 + self.generated as u64
    }

    /// What reserve admission sets aside for it.
    fn reserve(&self) -> u64 {
        self.prompt.count as u64 + self.target as u64
    }

    fn aborted(&self) -> bool {
        self.state.aborted.load(Acquire)
    }
}

pub(crate) struct Scheduler {
    cache: PrefixCache,
    metrics: Arc<Metrics>,
    /// Bumped by every abort; a sweep runs only when it moved.
    aborts: Arc<AtomicU64>,
    seen_aborts: u64,
    waiting: VecDeque<Seq>,
    running: Vec<Seq>,
    /// Sum of `context()` over running sequences.
    used: u64,
    /// Sum of `reserve()` over running sequences.
    reserved: u64,
}

impl Scheduler {
    pub fn new(
        block_size: u32,
        cache_blocks: usize,
        metrics: Arc<Metrics>,
        aborts: Arc<AtomicU64>,
    ) -> Scheduler {
        Scheduler {
            cache: PrefixCache::new(block_size, cache_blocks),
            metrics,
            aborts,
            seen_aborts: 0,
            waiting: VecDeque::new(),
            running: Vec::new(),
            used: 0,
            reserved: 0,
        }
    }

    pub fn push(&mut self, s: Seq) {
        self.waiting.push_back(s);
    }

    pub fn is_idle(&self) -> bool {
        self.running.is_empty() && self.waiting.is_empty()
    }

    /// Steps 1–4: returns the step's cost in ns, or `None` when nothing runs.
    pub fn plan(&mut self, p: &Profile, now_ns: u64) -> Option<f64> {
        self.sweep();
        let preempted = p.kv_admission == KvAdmission::Optimistic && self.preempt(p);
        let prefill_ns = if preempted {
            0.0
        } else {
            self.admit(p, now_ns)
        };
        if self.running.is_empty() {
            return None;
        }
        Some(p.decode_step_ns(self.running.len()) + prefill_ns)
    }

    fn sweep(&mut self) {
        let aborts = self.aborts.load(Acquire);
        if aborts == self.seen_aborts {
            return;
        }
        self.seen_aborts = aborts;
        let (mut used, mut reserved) = (0, 0);
        self.running.retain(|s| {
            let gone = s.aborted();
            if gone {
                used += s.context();
                reserved += s.reserve();
            }
            !gone
        });
        self.used -= used;
        self.reserved -= reserved;
        self.waiting.retain(|s| !s.aborted());
    }

    /// Preempts until every running sequence has room for its next token. True if any was.
    fn preempt(&mut self, p: &Profile) -> bool {
        let mut any = false;
        while self.running.len() > 1 && self.used + self.running.len() as u64 > p.kv_budget_tokens {
            let s = self.running.pop().expect("more than one running");
            self.used -= s.context();
            self.reserved -= s.reserve();
            s.state.preemptions.fetch_add(1, Relaxed);
            self.metrics.preemptions.fetch_add(1, Relaxed);
            self.waiting.push_front(s);
            any = true;
        }
        any
    }

    /// Admits waiting sequences; returns the prefill cost they add to this step, in ns.
    fn admit(&mut self, p: &Profile, now_ns: u64) -> f64 {
        let mut prefill_ns = 0.0;
        while let Some(front) = self.waiting.front() {
            if front.aborted() {
                self.waiting.pop_front();
                continue;
            }
            let room = match p.kv_admission {
                KvAdmission::Reserve => self.reserved + front.reserve() <= p.kv_budget_tokens,
                // Room for its context and the token it gets at the end of this step, beside
                // what the running sequences will hold then.
                KvAdmission::Optimistic => {
                    let next_step = self.used + self.running.len() as u64;
                    next_step + front.context() < p.kv_budget_tokens
                }
            };
            let fits = room && self.running.len() < p.max_running as usize;
            // Never deadlock on a request larger than the budget (the profile may have shrunk
            // after it was accepted): run it alone.
            if !fits && !self.running.is_empty() {
                break;
            }
            let mut s = self.waiting.pop_front().expect("front exists");
            let cached = self
                .cache
                .lookup_and_insert(s.prompt.count, &s.prompt.block_hashes);
            if !s.admitted {
                s.admitted = true;
                self.metrics
                    .prefix_queries
                    .fetch_add(s.prompt.count as u64, Relaxed);
                self.metrics.prefix_hits.fetch_add(cached as u64, Relaxed);
                s.state.cached_tokens.store(cached, Relaxed);
                s.state.admitted_ns.store(now_ns, Release);
            }
            prefill_ns += p.prefill_ns(s.context() - cached as u64);
            self.used += s.context();
            self.reserved += s.reserve();
            self.running.push(s);
        }
        prefill_ns
    }

    /// Step 5: one token for every running sequence, at `now_ns` (the end of the step).
    pub fn emit(&mut self, now_ns: u64) {
        self.used += self.running.len() as u64;
        let (mut used, mut reserved) = (0, 0);
        self.running.retain_mut(|s| {
            s.generated += 1;
            let done = s.generated >= s.target;
            let st = &s.state;
            if s.generated == 1 {
                st.first_token_ns.store(now_ns, Relaxed);
            }
            st.last_token_ns.store(now_ns, Relaxed);
            if let Some(steps) = &st.token_steps_ns {
                steps.lock().expect("token steps lock").push(now_ns);
            }
            if done {
                used += s.context();
                reserved += s.reserve();
                st.finished.store(true, Release);
            }
            st.generated.store(s.generated, Release);
            st.notify.notify_one();
            !done
        });
        self.used -= used;
        self.reserved -= reserved;
    }

    /// Charges `ns` of step time cut by the engine's cap to every running sequence.
    pub fn charge_clamped(&self, ns: u64) {
        for s in &self.running {
            s.state.clamped_ns.fetch_add(ns, Relaxed);
        }
    }

    /// Publishes the gauges; `budget` scales the KV usage.
    pub fn publish(&self, budget: u64) {
        let m = &self.metrics;
        m.running.store(self.running.len() as u64, Relaxed);
        m.waiting.store(self.waiting.len() as u64, Relaxed);
        let ppb = (self.used as f64 / budget.max(1) as f64 * 1e9).min(1e9);
        m.kv_usage_ppb.store(ppb as u64, Relaxed);
    }
}

#[cfg(test)]
mod tests;

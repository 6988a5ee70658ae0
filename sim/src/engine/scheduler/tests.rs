use super::*;
use crate::prompt::Tokenizer;

/// A prompt of `n` token ids starting at `first` (distinct `first`s share no cache blocks).
fn prompt_from(first: u64, n: u32) -> PromptTokens {
    let mut t = Tokenizer::new(4);
    for i in 0..n as u64 {
        t.push_id(first + i);
    }
    t.finish()
}

fn prompt(n: u32) -> PromptTokens {
    prompt_from(0, n)
}

struct Bench {
    s: Scheduler,
    aborts: Arc<AtomicU64>,
}

impl Bench {
    fn new() -> Bench {
        let aborts = Arc::new(AtomicU64::new(0));
        let metrics = Arc::new(Metrics::new("m"));
        Bench {
            s: Scheduler::new(4, 100, metrics, aborts.clone()),
            aborts,
        }
    }

    fn submit(&mut self, prompt: PromptTokens, max_tokens: u32) -> Arc<SeqState> {
        let state = Arc::new(SeqState::default());
        self.s.push(Seq::new(state.clone(), prompt, max_tokens));
        state
    }

    fn abort(&self, state: &SeqState) {
        state.aborted.store(true, Release);
        self.aborts.fetch_add(1, Release);
    }

    fn counts(&self) -> (usize, usize) {
        (self.s.running.len(), self.s.waiting.len())
    }
}

#[test]
fn admits_fifo_within_capacity_and_emits() {
    let mut p = Profile::illustrative();
    p.max_running = 2;
    p.kv_budget_tokens = 100;
    let mut b = Bench::new();
    let a = b.submit(prompt(10), 3);
    let c2 = b.submit(prompt(10), 3);
    let c = b.submit(prompt(10), 3);
    let cost = b.s.plan(&p, 7).unwrap();
    // a computes all 10 tokens; the second, admitted after a in the same step, hits a's two
    // blocks.
    assert_eq!(
        cost,
        p.decode_step_ns(2) + p.prefill_ns(10) + p.prefill_ns(2)
    );
    assert_eq!(b.counts(), (2, 1));
    assert_eq!(a.admitted_ns.load(Relaxed), 7);
    assert_eq!(c.admitted_ns.load(Relaxed), 0);
    for t in 0..3 {
        b.s.emit(100 + t);
    }
    assert_eq!(a.generated.load(Relaxed), 3);
    assert_eq!(c2.generated.load(Relaxed), 3);
    assert_eq!(
        (
            a.first_token_ns.load(Relaxed),
            a.last_token_ns.load(Relaxed)
        ),
        (100, 102)
    );
    assert!(a.finished.load(Relaxed));
    assert!(b.s.running.is_empty());
    assert_eq!((b.s.reserved, b.s.used), (0, 0));
    // Same prompt again: two full blocks of 4 hit (9 of 10 tokens may hit).
    b.s.plan(&p, 8);
    assert_eq!(c.cached_tokens.load(Relaxed), 8);
    assert_eq!(b.s.metrics.prefix_hits.load(Relaxed), 8 + 8);
    assert_eq!(b.s.metrics.prefix_queries.load(Relaxed), 30);
}

#[test]
fn kv_budget_queues_and_aborts_free() {
    let mut p = Profile::fast();
    p.kv_budget_tokens = 30;
    let mut b = Bench::new();
    let a = b.submit(prompt(10), 10);
    let _b2 = b.submit(prompt(10), 10);
    b.s.plan(&p, 1);
    assert_eq!(b.counts(), (1, 1));
    b.abort(&a);
    b.s.plan(&p, 2);
    assert_eq!(
        b.counts(),
        (1, 0),
        "a freed its reservation and the next one ran"
    );
    assert_eq!(b.s.reserved, 20);
    // A request larger than the whole budget still runs when alone.
    let big = b.submit(prompt(50), 1);
    for t in 0..10 {
        b.s.emit(t);
    }
    assert_eq!(b.counts(), (0, 1));
    b.s.plan(&p, 3);
    assert!(big.admitted_ns.load(Relaxed) != 0);
}

#[test]
fn an_abort_leaves_the_waiting_queue_at_once() {
    let mut p = Profile::fast();
    p.max_running = 1;
    let mut b = Bench::new();
    let _a = b.submit(prompt(4), 100);
    let waits: Vec<_> = (0..3).map(|_| b.submit(prompt(4), 1)).collect();
    b.s.plan(&p, 1);
    b.s.publish(p.kv_budget_tokens);
    assert_eq!(b.s.metrics.waiting.load(Relaxed), 3);
    b.abort(&waits[1]);
    b.s.emit(2);
    b.s.plan(&p, 3);
    b.s.publish(p.kv_budget_tokens);
    assert_eq!(
        b.s.metrics.waiting.load(Relaxed),
        2,
        "gone before reaching the front"
    );
}

#[test]
fn optimistic_admission_preempts_the_newest_and_recomputes_it() {
    let mut p = Profile::fast();
    p.kv_admission = KvAdmission::Optimistic;
    p.kv_budget_tokens = 30;
    p.prefill_us_per_token = 1.0;
    let mut b = Bench::new();
    // Reserve admission would run one at a time (10 + 10 each); optimistic admits both.
    let old = b.submit(prompt_from(0, 10), 10);
    let new = b.submit(prompt_from(100, 10), 10);
    assert_eq!(b.s.plan(&p, 1), Some(p.prefill_ns(10) * 2.0));
    assert_eq!(b.counts(), (2, 0));
    // Each step adds one token per sequence: 20 → 30 after 5 steps.
    for t in 0..5 {
        b.s.emit(10 + t);
        assert!(b.s.plan(&p, 20 + t).is_some());
    }
    // The fifth token took them to 30; a sixth would not fit.
    assert_eq!(b.s.metrics.preemptions.load(Relaxed), 1);
    assert_eq!(
        new.preemptions.load(Relaxed),
        1,
        "the most recently admitted"
    );
    assert_eq!(old.preemptions.load(Relaxed), 0);
    assert_eq!(b.counts(), (1, 1));
    assert_eq!(b.s.used, 15, "the victim's KV was freed");
    // The victim keeps its tokens and comes back when the old one finishes, recomputing its
    // prompt and the 5 tokens it had (its prompt blocks are in the prefix cache: 8 tokens).
    for t in 0..5 {
        b.s.emit(30 + t);
        b.s.plan(&p, 40 + t);
    }
    assert!(old.finished.load(Relaxed));
    assert_eq!(new.generated.load(Relaxed), 5);
    assert_eq!(b.counts(), (1, 0));
    b.s.emit(50);
    let cost = b.s.plan(&p, 51).unwrap();
    assert_eq!(cost, p.decode_step_ns(1));
    assert_eq!(new.generated.load(Relaxed), 6);
    assert_eq!(
        new.admitted_ns.load(Relaxed),
        1,
        "admitted_ns is the first admission"
    );
    assert_eq!(new.cached_tokens.load(Relaxed), 0);
    for t in 0..4 {
        b.s.emit(60 + t);
        b.s.plan(&p, 70 + t);
    }
    assert!(new.finished.load(Relaxed));
    assert_eq!(new.generated.load(Relaxed), 10);
    assert_eq!((b.s.used, b.s.reserved), (0, 0));
}

#[test]
fn readmission_recomputes_prompt_and_generated_tokens() {
    let mut p = Profile::fast();
    p.kv_admission = KvAdmission::Optimistic;
    p.kv_budget_tokens = 23;
    p.prefill_us_per_token = 1.0;
    let mut b = Bench::new();
    let a = b.submit(prompt_from(0, 9), 20);
    let c = b.submit(prompt_from(50, 9), 20);
    b.s.plan(&p, 1);
    b.s.emit(2);
    b.s.emit(3);
    // 2 × (9 + 2) + 2 > 23: c is preempted, nothing is admitted in that step.
    assert_eq!(b.s.plan(&p, 4), Some(0.0));
    assert_eq!(c.preemptions.load(Relaxed), 1);
    assert_eq!(c.generated.load(Relaxed), 2);
    b.abort(&a);
    // Readmitted: 9 + 2 tokens of context, 8 of them (two blocks of its prompt) cached.
    assert_eq!(b.s.plan(&p, 5), Some(p.prefill_ns(11 - 8)));
    assert_eq!(b.counts(), (1, 0));
    assert_eq!(b.s.used, 11);
}

#[test]
fn reserve_admission_never_preempts() {
    let mut p = Profile::fast();
    p.kv_budget_tokens = 30;
    let mut b = Bench::new();
    let states: Vec<_> = (0..4)
        .map(|i| b.submit(prompt_from(i * 100, 5), 10))
        .collect();
    let mut steps = 0;
    while !states.iter().all(|s| s.finished.load(Relaxed)) {
        b.s.plan(&p, steps);
        assert!(b.s.reserved <= 30);
        b.s.emit(steps);
        steps += 1;
    }
    assert_eq!(b.s.metrics.preemptions.load(Relaxed), 0);
    assert_eq!(steps, 20, "two at a time, ten steps each");
}

/// Drives the scheduler in virtual time with `n` requests always queued and returns the
/// completion rate (requests per second of virtual time) between the 25th and 75th percentile
/// of completions, away from the start-up transient and the drain.
fn measured_rate(p: &Profile, n: u64, isl: u32, osl: u32) -> f64 {
    let mut b = Bench::new();
    let states: Vec<_> = (0..n)
        .map(|i| b.submit(prompt_from(i * 1_000_000, isl), osl))
        .collect();
    let mut vt = 0.0;
    let mut done_at = Vec::new();
    while let Some(cost) = b.s.plan(p, vt as u64) {
        vt += cost;
        b.s.emit(vt as u64);
        let done = states.iter().filter(|s| s.finished.load(Relaxed)).count();
        done_at.resize(done, vt);
    }
    let (lo, hi) = (n as usize / 4, 3 * n as usize / 4);
    (hi - lo) as f64 / ((done_at[hi] - done_at[lo]) / 1e9)
}

#[test]
fn the_capacity_formula_matches_the_engine_in_virtual_time() {
    let p = Profile::capacity_profile();
    for (isl, osl) in [(32, 16), (8, 1), (200, 50)] {
        let want = p.capacity(isl, osl).requests_per_s;
        let got = measured_rate(&p, 400, isl, osl);
        assert!(
            (got / want - 1.0).abs() < 0.01,
            "{isl}/{osl}: {got} vs {want}"
        );
    }
    // The KV budget limits concurrency in reserve mode: 3 requests of 32 + 16.
    let mut kv = p.clone();
    kv.kv_budget_tokens = 150;
    let c = kv.capacity(32, 16);
    assert_eq!(c.concurrency, 3);
    let got = measured_rate(&kv, 300, 32, 16);
    assert!(
        (got / c.requests_per_s - 1.0).abs() < 0.01,
        "{got} vs {c:?}"
    );
    // Optimistic admission with room for everyone behaves the same.
    let mut opt = p.clone();
    opt.kv_admission = KvAdmission::Optimistic;
    let got = measured_rate(&opt, 400, 32, 16);
    let want = opt.capacity(32, 16);
    assert!(want.exact);
    assert!((got / want.requests_per_s - 1.0).abs() < 0.01);
}

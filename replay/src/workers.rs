//! The async runtime's worker threads under real-time scheduling: `--realtime-workers` (the
//! daemon's `realtime_workers`), off by default.
//!
//! The front end registers the wanted mode with the process's runtime; each run's own runtime
//! (`run::request_runtime`, the workers that read the responses) takes it from there, so only
//! those workers are ever raised.
//!
//! Why: on a host where the server shares canaryd's cores, a worker woken by a response's
//! first token waits for a core while the server's thread goes on writing (ordinary threads
//! need not preempt each other on a wake-up). The read comes late, and the kernel merges the
//! next token's segment into the unread one, so the first token's time becomes only a bound.
//! `SCHED_FIFO` workers run as soon as the token arrives (bench/RESULTS.md, "Real-time
//! workers"). The cost is CPU: a worker then wakes for nearly every segment the server writes
//! instead of reading several at once.
//!
//! How: tokio gives no hook that runs only on worker threads at their start (blocking-pool
//! threads share `on_thread_start`), but only workers park, so each worker sets its own
//! scheduling the first time it parks after the wanted mode changed
//! ([`RealtimeWorkers::set`], for a daemon's config reload). Workers are raised with
//! `SCHED_RESET_ON_FORK`: threads they start (the blocking pool, helpers) begin ordinary, so
//! prompt building and flushing never run real-time. The release thread stays one priority
//! above the workers (`crate::dispatch`).
//!
//! Safety: a server streaming without pause could keep real-time workers busy; Linux bounds
//! real-time threads to `sched_rt_runtime_us` of every `sched_rt_period_us` (95 % by default,
//! and since 6.12 a deadline server keeps 5 % for ordinary threads on each CPU). Where that
//! bound is off (-1) canaryd says so when it raises a worker.

use crate::dispatch::priority::{self, WORKER_PRIORITY};
use canary_core::{Known, WorkersContext};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// A measurement knob: at most this many worker threads are raised (default: all). It is how
/// bench/RESULTS.md compared one real-time worker against two.
const MAX_THREADS_ENV: &str = "CANARYD_REALTIME_WORKERS_MAX";

/// `CANARYD_REALTIME_WORKERS_MAX` as this process read it, once: every runtime's workers and
/// the daemon's warning about a bad value take this one reading ([`max_threads_env`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxThreadsEnv {
    /// Not set: every worker is raised.
    Unset,
    /// At most this many workers are raised.
    Set(usize),
    /// Set, but not a whole number of 0 or more (or not UTF-8): ignored, every worker is
    /// raised. Its value is never kept or shown.
    Invalid,
}

impl MaxThreadsEnv {
    /// `value` (the variable's, when set) read as the workers read it.
    pub fn parse(value: Option<&std::ffi::OsStr>) -> MaxThreadsEnv {
        match value {
            None => MaxThreadsEnv::Unset,
            Some(v) => match v.to_str().and_then(|v| v.parse().ok()) {
                Some(n) => MaxThreadsEnv::Set(n),
                None => MaxThreadsEnv::Invalid,
            },
        }
    }

    /// Workers raised at most.
    pub fn limit(self) -> usize {
        match self {
            MaxThreadsEnv::Set(n) => n,
            MaxThreadsEnv::Unset | MaxThreadsEnv::Invalid => usize::MAX,
        }
    }

    /// The warning for an [`MaxThreadsEnv::Invalid`] value, without the value.
    pub fn warning(self) -> Option<String> {
        (self == MaxThreadsEnv::Invalid).then(|| {
            format!(
                "{MAX_THREADS_ENV} is not a whole number of 0 or more (the value is not shown); \
                 ignored: with real-time workers, every worker is raised"
            )
        })
    }
}

/// [`MAX_THREADS_ENV`], read and parsed the first time it is asked for, then the same answer
/// for the life of the process.
pub fn max_threads_env() -> MaxThreadsEnv {
    static READ: std::sync::OnceLock<MaxThreadsEnv> = std::sync::OnceLock::new();
    *READ.get_or_init(|| MaxThreadsEnv::parse(std::env::var_os(MAX_THREADS_ENV).as_deref()))
}

/// The wanted scheduling of one runtime's workers, and what they got.
#[derive(Clone)]
pub struct RealtimeWorkers {
    state: Arc<State>,
}

struct State {
    wanted: AtomicBool,
    /// Bumped when `wanted` changes: a worker whose last look is older looks again.
    epoch: AtomicU64,
    /// Worker threads raised at most.
    max_threads: usize,
    /// Worker threads at `SCHED_FIFO` now (exact).
    raised: AtomicUsize,
    /// Why the last refused raise was refused.
    refused: Mutex<Option<String>>,
}

thread_local! {
    /// The epoch this thread last converged to (`u64::MAX`: never).
    static SEEN: Cell<u64> = const { Cell::new(u64::MAX) };
    /// Whether this thread is raised.
    static RAISED: Cell<bool> = const { Cell::new(false) };
}

/// Runtimes built with a [`RealtimeWorkers`], so a run learns its own runtime's.
static RUNTIMES: Mutex<Vec<Registered>> = Mutex::new(Vec::new());

struct Registered {
    id: tokio::runtime::Id,
    /// Kept alive here: the front end's runtime has no other owner of it.
    state: Arc<State>,
    /// A run's own runtime: its worker threads and why that many.
    threads: Option<(u64, String)>,
}

impl RealtimeWorkers {
    /// Workers real-time or not, as asked.
    pub fn new(realtime: bool) -> RealtimeWorkers {
        let max_threads = max_threads_env().limit();
        RealtimeWorkers {
            state: Arc::new(State {
                wanted: AtomicBool::new(realtime),
                epoch: AtomicU64::new(0),
                max_threads,
                raised: AtomicUsize::new(0),
                refused: Mutex::new(None),
            }),
        }
    }

    /// Adds the hooks to a multi-thread runtime's builder. Call [`RealtimeWorkers::register`]
    /// with the built runtime's handle.
    pub fn configure<'b>(
        &self,
        builder: &'b mut tokio::runtime::Builder,
    ) -> &'b mut tokio::runtime::Builder {
        let park = self.state.clone();
        let stop = self.state.clone();
        builder
            .on_thread_park(move || park.converge())
            .on_thread_stop(move || {
                if RAISED.get() {
                    stop.raised.fetch_sub(1, Ordering::Relaxed);
                }
            })
    }

    /// Ties this to the runtime `handle` belongs to, for [`context`] and for the runs started
    /// on it, whose own runtimes take these settings ([`crate::run`]).
    pub fn register(&self, handle: &tokio::runtime::Handle) {
        self.register_threads(handle, None);
    }

    /// [`RealtimeWorkers::register`] for a run's own runtime of `threads` workers, for `why`;
    /// [`unregister`] when it is shut down.
    pub(crate) fn register_threads(
        &self,
        handle: &tokio::runtime::Handle,
        threads: Option<(u64, String)>,
    ) {
        let mut runtimes = RUNTIMES.lock().unwrap_or_else(|e| e.into_inner());
        runtimes.push(Registered {
            id: handle.id(),
            state: self.state.clone(),
            threads,
        });
    }

    /// The settings the calling task's runtime was registered with, if it was.
    pub(crate) fn of_current() -> Option<RealtimeWorkers> {
        let id = tokio::runtime::Handle::try_current().ok()?.id();
        let runtimes = RUNTIMES.lock().unwrap_or_else(|e| e.into_inner());
        let state = runtimes.iter().find(|r| r.id == id)?.state.clone();
        Some(RealtimeWorkers { state })
    }

    /// Changes the wanted mode; each worker follows before it next parks.
    pub fn set(&self, realtime: bool) {
        if self.state.wanted.swap(realtime, Ordering::SeqCst) != realtime {
            self.state.epoch.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// What the workers have now.
    pub fn context(&self) -> WorkersContext {
        self.state.context()
    }
}

impl State {
    /// Runs on a worker about to park: brings its scheduling to the wanted mode.
    fn converge(&self) {
        let epoch = self.epoch.load(Ordering::SeqCst);
        if SEEN.get() == epoch {
            return;
        }
        SEEN.set(epoch);
        let wanted = self.wanted.load(Ordering::SeqCst);
        if wanted && !RAISED.get() {
            self.raise();
        } else if !wanted && RAISED.get() && priority::set_ordinary().is_ok() {
            priority::default_timer_slack();
            RAISED.set(false);
            self.raised.fetch_sub(1, Ordering::Relaxed);
        }
    }

    fn raise(&self) {
        let why = if let Some(why) = priority::refused_by_env() {
            why
        } else if self.raised.fetch_add(1, Ordering::SeqCst) >= self.max_threads {
            self.raised.fetch_sub(1, Ordering::SeqCst);
            return;
        } else {
            match priority::set_fifo(WORKER_PRIORITY, true) {
                Ok(()) => {
                    priority::tighten_timer_slack();
                    RAISED.set(true);
                    warn_if_unbounded();
                    return;
                }
                Err(e) => {
                    self.raised.fetch_sub(1, Ordering::SeqCst);
                    priority::refusal(WORKER_PRIORITY, &e)
                }
            }
        };
        // Once per process, clearly; every run's summary.json says it too.
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            tracing::warn!(
                "real-time workers asked for (--realtime-workers, realtime_workers) but not \
                 had, so responses may be read late on a busy host; the run goes on with \
                 ordinary workers: {why}"
            )
        });
        *self.refused.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
    }

    fn context(&self) -> WorkersContext {
        let requested = self.wanted.load(Ordering::SeqCst);
        let raised = self.raised.load(Ordering::SeqCst) as u64;
        let refused = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        WorkersContext {
            threads: None,
            threads_why: None,
            realtime_requested: requested,
            scheduling: if raised > 0 {
                "SCHED_FIFO"
            } else {
                "SCHED_OTHER"
            }
            .into(),
            priority: (raised > 0).then_some(WORKER_PRIORITY),
            realtime_threads: raised,
            realtime_unavailable: if requested && raised == 0 {
                Some(
                    refused.clone().unwrap_or_else(|| {
                        "no worker thread had parked yet to take it".to_string()
                    }),
                )
            } else {
                None
            },
        }
    }
}

/// Says once when the kernel does not bound real-time threads' CPU.
fn warn_if_unbounded() {
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| {
        if priority::rt_throttle().is_none() {
            tracing::warn!(
                "real-time workers with /proc/sys/kernel/sched_rt_runtime_us at -1 (or \
                 unreadable): nothing bounds their CPU, so a server streaming without pause \
                 could starve this host's ordinary threads"
            );
        }
    });
}

/// Whether the runtime `id` is registered.
#[cfg(test)]
pub(crate) fn is_registered(id: tokio::runtime::Id) -> bool {
    let runtimes = RUNTIMES.lock().unwrap_or_else(|e| e.into_inner());
    runtimes.iter().any(|r| r.id == id)
}

/// Forgets a run's runtime that was shut down.
pub(crate) fn unregister(id: tokio::runtime::Id) {
    let mut runtimes = RUNTIMES.lock().unwrap_or_else(|e| e.into_inner());
    runtimes.retain(|r| r.id != id);
}

/// How many workers the calling task's runtime has and how they are scheduled, for
/// `summary.json`'s `context.canaryd.workers`.
pub fn context() -> Known<WorkersContext> {
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        return Known::unavailable("not run on an async runtime");
    };
    let id = handle.id();
    let runtimes = RUNTIMES.lock().unwrap_or_else(|e| e.into_inner());
    let Some(registered) = runtimes.iter().find(|r| r.id == id) else {
        return Known::unavailable("the runtime was not built by canaryd's front end");
    };
    let mut c = registered.state.context();
    if let Some((threads, why)) = &registered.threads {
        c.threads = Some(*threads);
        c.threads_why = Some(why.clone());
    }
    Known::Value(c)
}

#[cfg(test)]
mod tests;

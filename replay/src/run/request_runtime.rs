//! A run's own async runtime, sized by the load the run plans: its requests are prepared, and
//! their responses read, on these worker threads, not on the process's.
//!
//! Why: tokio's multi-thread runtime wakes an idle worker to steal whenever a task becomes
//! ready, so with two workers on evenly spaced arrivals the second slept and woke around
//! nearly every response (bench/RESULTS.md, "One runtime worker, re-judged" and "The run's own
//! runtime"). One worker kept up with 2,000 short requests per second on a 2-core host (36 of
//! 36 runs on time) and fell behind at 4,000 (2 of 36). So a run gets one worker per 2,000
//! requests or 150,000 tokens per second it plans, whichever needs more, and at most one per
//! core; a closed loop, whose pace is the server's, gets one per core (tokio's default), but
//! no more than it has users (each has at most one request in flight).
//!
//! The process's runtime keeps everything else (the daemon's API, telemetry, exporters), so
//! none of it waits for, or wakes, a run's workers. `--realtime-workers` applies to a run's
//! workers, which read the responses; `CANARYD_REQUEST_WORKERS=N` overrides the rule (a
//! measurement knob).

use super::work::Pace;
use crate::workers::{self, RealtimeWorkers};
use std::future::Future;
use std::time::Duration;

/// Short requests per second one worker keeps up with (see the module's comment).
const REQUESTS_PER_THREAD: f64 = 2_000.0;
/// Tokens in and out per second one worker keeps up with: the same 2,000 requests of 64
/// tokens in and 8 out, rounded up.
const TOKENS_PER_THREAD: f64 = 150_000.0;
/// Overrides the rule: this many workers for every run.
const THREADS_ENV: &str = "CANARYD_REQUEST_WORKERS";
/// How long a finished run's runtime gets to stop its threads (they are idle by then).
const SHUTDOWN: Duration = Duration::from_secs(5);

/// How many workers, and why.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Sizing {
    pub threads: usize,
    pub why: String,
}

/// The workers for `pace` on this host, unless `CANARYD_REQUEST_WORKERS` says otherwise.
pub(super) fn sizing_here(pace: Pace) -> Sizing {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    sizing(pace, cores, std::env::var(THREADS_ENV).ok().as_deref())
}

/// The workers for `pace` on a host of `cores`, unless `knob` (the environment's
/// `CANARYD_REQUEST_WORKERS`) says otherwise.
fn sizing(pace: Pace, cores: usize, knob: Option<&str>) -> Sizing {
    let cores = cores.max(1);
    if let Some(knob) = knob {
        match knob.trim().parse::<usize>() {
            Ok(n) if n > 0 => {
                return Sizing {
                    threads: n,
                    why: format!("{THREADS_ENV}={n}"),
                }
            }
            _ => {
                static SAID: std::sync::Once = std::sync::Once::new();
                SAID.call_once(|| {
                    tracing::warn!(
                        "{THREADS_ENV}={knob:?} is not a whole number above 0; ignored: runs \
                         size their workers by their planned load"
                    )
                });
            }
        }
    }
    let load = match pace {
        Pace::Planned(load) => load,
        Pace::ClosedLoop { users } => {
            return Sizing {
                threads: cores.min(users).max(1),
                why: format!(
                    "a closed loop of {users} users, whose pace is the server's: one worker per \
                     core ({cores}), at most one per user"
                ),
            }
        }
    };
    let needed = (load.requests_per_s / REQUESTS_PER_THREAD)
        .max(load.tokens_per_s / TOKENS_PER_THREAD)
        .ceil();
    // NaN (nothing planned) and 0 are one worker; infinity is one per core.
    let threads = if needed >= cores as f64 {
        cores
    } else {
        (needed as usize).max(1)
    };
    Sizing {
        threads,
        why: format!(
            "{:.0} requests/s and {:.0} tokens/s planned: one worker per {REQUESTS_PER_THREAD:.0} \
             requests/s or {TOKENS_PER_THREAD:.0} tokens/s, at most one per core ({cores})",
            load.requests_per_s, load.tokens_per_s
        ),
    }
}

/// The run's runtime, shut down when the run ends (or when it is dropped unfinished).
pub(super) struct RequestRuntime {
    rt: Option<tokio::runtime::Runtime>,
}

impl RequestRuntime {
    /// Starts `sizing.threads` workers, scheduled as the calling runtime's settings say
    /// (`--realtime-workers`), and registered for `summary.json`'s `context.canaryd.workers`.
    pub fn start(sizing: Sizing) -> std::io::Result<RequestRuntime> {
        let realtime = RealtimeWorkers::of_current().unwrap_or_else(|| RealtimeWorkers::new(false));
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder
            .worker_threads(sizing.threads)
            .thread_name("canary-request")
            .enable_all();
        realtime.configure(&mut builder);
        let rt = builder.build()?;
        // Counted by the runtime itself, not taken from the sizing.
        let threads = rt.metrics().num_workers() as u64;
        realtime.register_threads(rt.handle(), Some((threads, sizing.why)));
        Ok(RequestRuntime { rt: Some(rt) })
    }

    /// Runs `run` to its end on these workers, then stops them. Dropped unfinished (the caller
    /// gave up on the run), it stops them in the background, which drops `run`.
    pub async fn run<F>(mut self, run: F) -> F::Output
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let out = self
            .rt
            .as_ref()
            .expect("not yet shut down")
            .spawn(run)
            .await;
        if let Some(rt) = self.rt.take() {
            workers::unregister(rt.handle().id());
            // Dropping a runtime blocks until its threads stop: not on an async worker.
            let _ = tokio::task::spawn_blocking(move || rt.shutdown_timeout(SHUTDOWN)).await;
        }
        match out {
            Ok(out) => out,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            // Only a shutdown cancels it, and that comes after it finished (above) or with
            // this future dropped (below).
            Err(e) => unreachable!("a run's task ended without finishing: {e}"),
        }
    }
}

impl Drop for RequestRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            workers::unregister(rt.handle().id());
            rt.shutdown_background();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(requests_per_s: f64, tokens_per_s: f64) -> Pace {
        Pace::Planned(super::super::work::PlannedLoad {
            requests_per_s,
            tokens_per_s,
        })
    }

    #[test]
    fn one_worker_per_2000_requests_or_150000_tokens_per_second_at_most_one_per_core_or_user() {
        let threads = |l, cores| sizing(l, cores, None).threads;
        // Short requests (64 in, 8 out): the request rate decides.
        assert_eq!(threads(load(1_000.0, 72_000.0), 16), 1);
        assert_eq!(threads(load(2_000.0, 144_000.0), 16), 1);
        assert_eq!(threads(load(2_001.0, 144_072.0), 16), 2);
        assert_eq!(threads(load(4_000.0, 288_000.0), 2), 2);
        assert_eq!(threads(load(10_000.0, 720_000.0), 16), 5);
        assert_eq!(
            threads(load(10_000.0, 720_000.0), 2),
            2,
            "at most one per core"
        );
        // Real-sized requests (the Mooncake slice at 20x: 60 req/s of ~13k tokens): the tokens.
        assert_eq!(threads(load(60.0, 780_000.0), 16), 6);
        assert_eq!(threads(load(60.0, 780_000.0), 2), 2);
        // Every deadline at one instant; nothing planned.
        assert_eq!(threads(load(f64::INFINITY, f64::INFINITY), 4), 4);
        assert_eq!(threads(load(0.0, 0.0), 4), 1);
        // A closed loop: one per core, at most one per user.
        assert_eq!(threads(Pace::ClosedLoop { users: 1000 }, 4), 4);
        assert_eq!(threads(Pace::ClosedLoop { users: 2 }, 16), 2);
        assert_eq!(threads(Pace::ClosedLoop { users: 0 }, 16), 1);
        let why = sizing(load(1_000.0, 72_000.0), 2, None).why;
        assert!(
            why.contains("1000 requests/s and 72000 tokens/s planned"),
            "{why}"
        );
    }

    #[test]
    fn the_knob_overrides_the_rule_and_a_bad_value_is_ignored() {
        let s = sizing(load(1_000.0, 72_000.0), 2, Some("3"));
        assert_eq!(s.threads, 3);
        assert_eq!(s.why, "CANARYD_REQUEST_WORKERS=3");
        for bad in ["0", "two", "-1", ""] {
            assert_eq!(
                sizing(load(1_000.0, 72_000.0), 2, Some(bad)).threads,
                1,
                "{bad}"
            );
        }
    }

    #[tokio::test]
    async fn a_run_runs_on_its_own_workers_which_stop_when_it_ends() {
        let s = Sizing {
            threads: 2,
            why: "test".into(),
        };
        let outer = tokio::runtime::Handle::current().id();
        let rt = RequestRuntime::start(s).unwrap();
        let (inner, name, ctx) = rt
            .run(async {
                let name = std::thread::current().name().map(str::to_string);
                (
                    tokio::runtime::Handle::current().id(),
                    name,
                    crate::workers::context(),
                )
            })
            .await;
        assert_ne!(inner, outer);
        assert_eq!(name.as_deref(), Some("canary-request"));
        let ctx = ctx.value().cloned().expect("registered");
        assert_eq!(ctx.threads, Some(2));
        assert_eq!(ctx.threads_why.as_deref(), Some("test"));
        assert!(!workers::is_registered(inner), "shut down and forgotten");
    }

    #[tokio::test]
    async fn a_run_given_up_on_is_dropped_with_its_workers() {
        struct Dropped(std::sync::Arc<std::sync::atomic::AtomicBool>);
        impl Drop for Dropped {
            fn drop(&mut self) {
                self.0.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let dropped = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let held = Dropped(dropped.clone());
        let rt = RequestRuntime::start(Sizing {
            threads: 1,
            why: "test".into(),
        })
        .unwrap();
        let run = rt.run(async move {
            let _held = held;
            std::future::pending::<()>().await
        });
        assert!(tokio::time::timeout(Duration::from_millis(20), run)
            .await
            .is_err());
        // Bounded wait, not a timing assertion: the workers drop it as they stop.
        for _ in 0..500 {
            if dropped.load(std::sync::atomic::Ordering::SeqCst) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the run's future outlived the caller giving up on it");
    }

    #[tokio::test]
    async fn a_panic_in_the_run_reaches_the_caller() {
        let rt = RequestRuntime::start(Sizing {
            threads: 1,
            why: "test".into(),
        })
        .unwrap();
        let caught = tokio::spawn(rt.run(async { panic!("inside the run") })).await;
        let panic = caught.unwrap_err().into_panic();
        assert_eq!(panic.downcast_ref::<&str>(), Some(&"inside the run"));
    }
}

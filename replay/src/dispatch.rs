//! Sub-millisecond release of requests at their deadlines, at a CPU cost that follows the
//! host's wake-up error rather than a fixed spin.
//!
//! Tokio's timer has 1 ms granularity, too coarse for a schedule whose bursts must leave within
//! a millisecond. One dedicated thread (real-time priority where permitted, 1 ns timer slack)
//! keeps every pending deadline in a heap and sleeps until shortly before the earliest: by the
//! margin its own recent wake-ups needed ([`wake_error`], measured from its start), not a fixed
//! 200 µs. It spins only that last stretch and releases every due request at once; deadlines
//! closer together than the margin share one wake-up. Registering a later deadline does not
//! wake it; only one due before its planned wake-up does. Requests are prepared (prompt built,
//! connection open, bytes held at the connection's gate) before they register, so a release
//! is one non-blocking write from this thread ([`Dispatcher::send_at`]), or waking a task
//! ([`Dispatcher::at`]) for a request that could not be prepared that far.

mod deadlines;
pub(crate) mod priority;
mod wake_error;

use canary_core::{MonoTime, ReleaseReport};
pub use deadlines::Release;
use deadlines::{Deadlines, Fire, Pending};
use priority::Scheduling;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, TryRecvError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::Thread;
use std::time::Duration;
use tokio::sync::oneshot;
use wake_error::WakeError;

/// What the registering side and the release thread share. Registering takes no lock the
/// release thread waits on: under real-time priority, waiting for a preempted ordinary
/// thread that holds a lock would cost the whole preemption.
#[derive(Default)]
struct Shared {
    /// The earliest deadline registered since the thread last took registrations in, in ns
    /// (`u64::MAX`: none): read by the spinning or about-to-sleep thread.
    fresh: AtomicU64,
    /// When the sleeping thread wakes by itself (`u64::MAX`: not before it is woken; 0:
    /// awake). Only a registration due before this wakes it.
    wake_at: AtomicU64,
    /// Set when the [`Dispatcher`] is dropped.
    closed: AtomicBool,
    /// How the thread has run, for [`Dispatcher::report`] (only the thread writes it).
    stats: Mutex<Stats>,
}

#[derive(Default)]
struct Stats {
    scheduling: Option<Scheduling>,
    wake: WakeError,
    spin: Duration,
}

/// Handle to the release thread; dropping it stops the thread once its heap is empty.
pub struct Dispatcher {
    shared: Arc<Shared>,
    tx: mpsc::Sender<Pending>,
    thread: Thread,
    seq: AtomicU64,
}

impl Dispatcher {
    /// Starts the release thread.
    pub fn start() -> std::io::Result<Dispatcher> {
        let shared = Arc::new(Shared {
            fresh: AtomicU64::new(u64::MAX),
            ..Default::default()
        });
        let (tx, rx) = mpsc::channel();
        let s = shared.clone();
        let handle = std::thread::Builder::new()
            .name("canary-dispatch".into())
            .spawn(move || release_loop(&s, rx))?;
        Ok(Dispatcher {
            shared,
            tx,
            thread: handle.thread().clone(),
            seq: Default::default(),
        })
    }

    /// Resolves at `deadline` (or right away if it has passed) with the release time.
    pub fn at(&self, deadline: MonoTime) -> oneshot::Receiver<MonoTime> {
        let (fire, rx) = oneshot::channel();
        // If the thread is gone the receiver errors, which callers treat as "go now".
        self.register(deadline, Fire::Wake(fire));
        rx
    }

    /// Has the release thread itself write `request` at `deadline` (or right away if it has
    /// passed), without waking its task. False when the thread is gone: the caller writes.
    pub fn send_at(&self, deadline: MonoTime, request: Arc<dyn Release>) -> bool {
        self.register(deadline, Fire::Send(request))
    }

    fn register(&self, deadline: MonoTime, fire: Fire) -> bool {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let registered = self
            .tx
            .send(Pending {
                deadline,
                seq,
                fire,
            })
            .is_ok();
        // Sent first, then announced: the thread clears `fresh` before taking registrations
        // in, so a registration it has not taken in is always announced here.
        self.shared.fresh.fetch_min(deadline.0, Ordering::SeqCst);
        if deadline.0 < self.shared.wake_at.load(Ordering::SeqCst) {
            self.thread.unpark();
        }
        registered
    }

    /// How the release thread has run so far, for the run's `clock.release` block.
    pub fn report(&self) -> ReleaseReport {
        let s = stats(&self.shared);
        let us = |d: Duration| d.as_nanos() as f64 / 1e3;
        ReleaseReport {
            scheduling: s
                .scheduling
                .as_ref()
                .map_or("SCHED_OTHER", |x| x.policy())
                .into(),
            priority: s.scheduling.as_ref().and_then(|x| x.priority()),
            realtime_unavailable: match &s.scheduling {
                Some(x) => x.unavailable().map(str::to_string),
                None => Some("the release thread had not started".into()),
            },
            timer_wakeups: s.wake.wakeups,
            wake_error_p50_us: s.wake.quantile(0.5).map(us),
            wake_error_p95_us: s.wake.quantile(0.95).map(us),
            spin_margin_us: us(s.wake.margin()),
            spin_ms: s.spin.as_secs_f64() * 1e3,
        }
    }
}

impl Drop for Dispatcher {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::SeqCst);
        self.thread.unpark();
    }
}

/// The statistics, whoever panicked while holding them (nothing leaves them half-updated).
fn stats(shared: &Shared) -> MutexGuard<'_, Stats> {
    shared.stats.lock().unwrap_or_else(|e| e.into_inner())
}

/// What the thread does next, `now`, with `next` the earliest deadline.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    /// Sleep until this instant (the deadline less the margin), then look again.
    Sleep(MonoTime),
    /// The deadline is within the margin: spin to it.
    Spin,
}

fn step(now: MonoTime, next: MonoTime, margin: Duration) -> Step {
    let wake = next - margin;
    if wake > now {
        Step::Sleep(wake)
    } else {
        Step::Spin
    }
}

fn release_loop(shared: &Shared, rx: mpsc::Receiver<Pending>) {
    let scheduling = priority::tighten();
    if let Some(why) = scheduling.unavailable() {
        // Once per process; every run's summary.json says it in `clock.release`.
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            tracing::info!(
                "requests are released without real-time priority, so a busy host can delay \
                 them: {why}"
            )
        });
    }
    stats(shared).scheduling = Some(scheduling);
    calibrate(shared);
    let mut pending = Deadlines::default();
    let mut open = true;
    let mut margin = stats(shared).wake.margin();
    let mut due = Vec::new();
    loop {
        shared.fresh.store(u64::MAX, Ordering::SeqCst);
        loop {
            match rx.try_recv() {
                Ok(p) => pending.push(p),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    open = false;
                    break;
                }
            }
        }
        open &= !shared.closed.load(Ordering::SeqCst);
        let now = MonoTime::now();
        pending.take_due(now, &mut due);
        for fire in due.drain(..) {
            match fire {
                Fire::Wake(tx) => {
                    let _ = tx.send(now);
                }
                // Stamps its own time: the last of a burst leaves after the first.
                Fire::Send(request) => request.release(),
            }
        }
        let Some(next) = pending.next() else {
            if !open {
                return;
            }
            if sleep_unless_fresh(shared, u64::MAX) {
                std::thread::park();
            }
            shared.wake_at.store(0, Ordering::SeqCst);
            continue;
        };
        match step(MonoTime::now(), next, margin) {
            Step::Sleep(wake) => {
                if !sleep_unless_fresh(shared, wake.0) {
                    shared.wake_at.store(0, Ordering::SeqCst);
                    continue;
                }
                let before = MonoTime::now();
                if wake > before {
                    std::thread::park_timeout(wake.since(before));
                    let woke = MonoTime::now();
                    // Woken early means a registration (or a spurious wake-up): not a timer's
                    // error. A wake-up at or after the instant asked is.
                    if woke >= wake {
                        let mut s = stats(shared);
                        s.wake.record(woke.since(wake));
                        margin = s.wake.margin();
                    }
                }
                shared.wake_at.store(0, Ordering::SeqCst);
            }
            Step::Spin => {
                let start = MonoTime::now();
                let mut t = start;
                while t < next && t.0 < shared.fresh.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                    t = MonoTime::now();
                }
                stats(shared).spin += t.since(start);
            }
        }
    }
}

/// Announces a sleep until `wake` (ns) and says whether to go ahead: not when a registration
/// came in since the thread last looked. Paired with [`Dispatcher::at`] (which announces, then
/// reads `wake_at`), either the thread sees the registration or the registration wakes it.
fn sleep_unless_fresh(shared: &Shared, wake: u64) -> bool {
    shared.wake_at.store(wake, Ordering::SeqCst);
    shared.fresh.load(Ordering::SeqCst) == u64::MAX
}

/// Measures the first wake-ups before any deadline is due (the run's first one is tens of ms
/// away), so that a dense schedule, which leaves no room to sleep and so to measure, does not
/// spin the conservative starting margin before every deadline.
fn calibrate(shared: &Shared) {
    const NAP: Duration = Duration::from_micros(50);
    for _ in 0..wake_error::WARM_UP {
        let wake = MonoTime::now() + NAP;
        std::thread::park_timeout(NAP);
        let woke = MonoTime::now();
        if woke >= wake {
            stats(shared).wake.record(woke.since(wake));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sleeps_until_the_margin_before_a_deadline_and_spins_within_it() {
        let t = MonoTime(1_000_000_000);
        let us = Duration::from_micros;
        assert_eq!(
            step(t, t + us(500), us(30)),
            Step::Sleep(t + us(470)),
            "wakes the margin early, not the old fixed 200 µs"
        );
        assert_eq!(step(t, t + us(30), us(30)), Step::Spin);
        assert_eq!(step(t, t + us(10), us(30)), Step::Spin);
        // A deadline already passed (registered late) is spun to at once, i.e. released.
        assert_eq!(step(t, t - us(10), us(30)), Step::Spin);
    }

    #[tokio::test]
    async fn the_thread_releases_each_request_at_or_after_its_deadline() {
        let d = Dispatcher::start().unwrap();
        let base = MonoTime::now() + Duration::from_millis(20);
        let waits: Vec<_> = [15u64, 5, 5, 10, 0]
            .iter()
            .map(|ms| {
                let deadline = base + Duration::from_millis(*ms);
                (deadline, d.at(deadline))
            })
            .collect();
        for (deadline, rx) in waits {
            let at = rx.await.expect("released");
            assert!(at >= deadline, "released {} ns early", deadline.0 - at.0);
        }
        let r = d.report();
        assert!(r.timer_wakeups >= 1, "{r:?}");
        assert!(r.spin_margin_us <= 200.0, "{r:?}");
        assert_eq!(
            r.realtime_unavailable.is_none(),
            r.scheduling == "SCHED_FIFO"
        );
    }

    #[tokio::test]
    async fn past_deadlines_release_at_once() {
        let d = Dispatcher::start().unwrap();
        // The thread sleeps towards a deadline an hour away; a past one registered meanwhile
        // must wake it, not wait behind it. (The timeout only turns a hang into a failure.)
        let far = MonoTime::now() + Duration::from_secs(3600);
        let mut later = d.at(far);
        let past = MonoTime::now() - Duration::from_millis(5);
        tokio::time::timeout(Duration::from_secs(60), d.at(past))
            .await
            .expect("released, not held until the far deadline")
            .unwrap();
        // ... and only it: the far one still waits.
        assert_eq!(
            later.try_recv(),
            Err(tokio::sync::oneshot::error::TryRecvError::Empty)
        );
    }

    #[tokio::test]
    async fn a_sooner_deadline_registered_during_a_long_sleep_keeps_its_own_time() {
        let d = Dispatcher::start().unwrap();
        let _far = d.at(MonoTime::now() + Duration::from_secs(3600));
        // Let the thread go to sleep towards the far deadline first.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let soon = MonoTime::now() + Duration::from_millis(30);
        let at = tokio::time::timeout(Duration::from_secs(60), d.at(soon))
            .await
            .expect("released at its deadline, not held until the far one")
            .unwrap();
        assert!(at >= soon, "released {} ns early", soon.0 - at.0);
    }

    #[tokio::test]
    async fn dropping_the_handle_still_releases_what_was_registered() {
        let d = Dispatcher::start().unwrap();
        let deadline = MonoTime::now() + Duration::from_millis(30);
        let rx = d.at(deadline);
        drop(d);
        let at = tokio::time::timeout(Duration::from_secs(60), rx)
            .await
            .expect("released after the handle was dropped")
            .unwrap();
        assert!(at >= deadline);
    }
}

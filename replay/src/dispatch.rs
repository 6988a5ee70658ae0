//! Sub-millisecond release of requests at their deadlines.
//!
//! Tokio's timer has 1 ms granularity, too coarse for a schedule whose bursts must leave within
//! a millisecond. One dedicated thread keeps every pending deadline in a heap, sleeps on a
//! futex with a tight timer slack until shortly before the earliest, then spins the last
//! stretch and releases every due request at once. Requests are prepared (prompt built,
//! connection open) before they register, so a release only has to wake a task.

use canary_core::MonoTime;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;
use tokio::sync::oneshot;

/// Below this distance to the next deadline the thread spins instead of sleeping.
const SPIN: Duration = Duration::from_micros(200);

struct Pending {
    deadline: MonoTime,
    seq: u64,
    fire: oneshot::Sender<MonoTime>,
}

impl PartialEq for Pending {
    fn eq(&self, o: &Self) -> bool {
        (self.deadline, self.seq) == (o.deadline, o.seq)
    }
}
impl Eq for Pending {}
impl PartialOrd for Pending {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Pending {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.deadline, self.seq).cmp(&(o.deadline, o.seq))
    }
}

/// Handle to the release thread; dropping it stops the thread once its heap is empty.
pub struct Dispatcher {
    tx: mpsc::Sender<Pending>,
    seq: std::sync::atomic::AtomicU64,
}

impl Dispatcher {
    /// Starts the release thread.
    pub fn start() -> std::io::Result<Dispatcher> {
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("canary-dispatch".into())
            .spawn(move || release_loop(rx))?;
        Ok(Dispatcher {
            tx,
            seq: Default::default(),
        })
    }

    /// Resolves at `deadline` (or right away if it has passed) with the release time.
    pub fn at(&self, deadline: MonoTime) -> oneshot::Receiver<MonoTime> {
        let (fire, rx) = oneshot::channel();
        let seq = self.seq.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // If the thread is gone the receiver errors, which callers treat as "go now".
        let _ = self.tx.send(Pending {
            deadline,
            seq,
            fire,
        });
        rx
    }
}

fn release_loop(rx: mpsc::Receiver<Pending>) {
    tighten_timer_slack();
    let mut heap: BinaryHeap<Reverse<Pending>> = BinaryHeap::new();
    let mut open = true;
    loop {
        // Take in everything registered so far.
        while let Ok(p) = rx.try_recv() {
            heap.push(Reverse(p));
        }
        let Some(Reverse(next)) = heap.peek() else {
            if !open {
                return;
            }
            match rx.recv() {
                Ok(p) => heap.push(Reverse(p)),
                Err(_) => return,
            }
            continue;
        };
        let now = MonoTime::now();
        if now >= next.deadline {
            while heap.peek().is_some_and(|Reverse(p)| p.deadline <= now) {
                let Reverse(p) = heap.pop().expect("peeked");
                let _ = p.fire.send(now);
            }
            continue;
        }
        let wait = next.deadline.since(now);
        if wait > SPIN && open {
            match rx.recv_timeout(wait - SPIN) {
                Ok(p) => heap.push(Reverse(p)),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => open = false,
            }
        } else if wait > SPIN {
            std::thread::sleep(wait - SPIN);
        } else {
            std::hint::spin_loop();
        }
    }
}

/// The default 50 µs timer slack would dominate the error budget; ask for 1 µs.
fn tighten_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes an integer argument and affects only this thread.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn releases_in_deadline_order_never_early() {
        let d = Dispatcher::start().unwrap();
        let base = MonoTime::now() + Duration::from_millis(20);
        let offsets = [15u64, 5, 5, 10, 0];
        let waits: Vec<_> = offsets
            .iter()
            .map(|ms| {
                let deadline = base + Duration::from_millis(*ms);
                (deadline, d.at(deadline))
            })
            .collect();
        let mut released = Vec::new();
        for (deadline, rx) in waits {
            let at = rx.await.unwrap();
            assert!(at >= deadline, "released {} ns early", deadline.0 - at.0);
            released.push(at);
        }
        // Same deadline, same release instant: a burst leaves together. Distinct deadlines
        // keep their order; on a loaded machine several may fall due in one wake-up, so ties
        // are allowed.
        assert_eq!(released[1], released[2]);
        assert!(
            released[4] <= released[1] && released[1] <= released[3] && released[3] <= released[0]
        );
    }

    #[tokio::test]
    async fn past_deadlines_release_at_once() {
        let d = Dispatcher::start().unwrap();
        let past = MonoTime::now() - Duration::from_millis(5);
        let at = d.at(past).await.unwrap();
        assert!(at >= past);
    }
}

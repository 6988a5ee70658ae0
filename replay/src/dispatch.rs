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

/// Registered releases, earliest deadline first (registration order among equals).
#[derive(Default)]
struct Deadlines {
    heap: BinaryHeap<Reverse<Pending>>,
}

impl Deadlines {
    fn push(&mut self, p: Pending) {
        self.heap.push(Reverse(p));
    }

    /// The earliest deadline pending.
    fn next(&self) -> Option<MonoTime> {
        self.heap.peek().map(|Reverse(p)| p.deadline)
    }

    /// Releases every request due at `now`, all with `now` as their release time: a burst on
    /// one deadline (or several deadlines passed in one wake-up) leaves together.
    fn release_due(&mut self, now: MonoTime) {
        while self.next().is_some_and(|d| d <= now) {
            let Reverse(p) = self.heap.pop().expect("peeked");
            let _ = p.fire.send(now);
        }
    }
}

fn release_loop(rx: mpsc::Receiver<Pending>) {
    tighten_timer_slack();
    let mut pending = Deadlines::default();
    let mut open = true;
    loop {
        // Take in everything registered so far.
        while let Ok(p) = rx.try_recv() {
            pending.push(p);
        }
        let Some(next) = pending.next() else {
            if !open {
                return;
            }
            match rx.recv() {
                Ok(p) => pending.push(p),
                Err(_) => return,
            }
            continue;
        };
        let now = MonoTime::now();
        if now >= next {
            pending.release_due(now);
            continue;
        }
        let wait = next.since(now);
        if wait > SPIN && open {
            match rx.recv_timeout(wait - SPIN) {
                Ok(p) => pending.push(p),
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

    /// A registration at `deadline`, and where its release time arrives.
    fn pending(deadline: MonoTime, seq: u64) -> (Pending, oneshot::Receiver<MonoTime>) {
        let (fire, rx) = oneshot::channel();
        let p = Pending {
            deadline,
            seq,
            fire,
        };
        (p, rx)
    }

    // The order and the bursts, on made-up times: nothing here depends on how fast this
    // machine runs.
    #[test]
    fn releases_in_deadline_order_never_early_and_bursts_together() {
        let base = MonoTime(1_000_000_000);
        let ms = |n: u64| base + Duration::from_millis(n);
        let mut d = Deadlines::default();
        let mut rxs: Vec<_> = [15u64, 5, 5, 10, 0]
            .iter()
            .enumerate()
            .map(|(seq, &off)| {
                let (p, rx) = pending(ms(off), seq as u64);
                d.push(p);
                rx
            })
            .collect();
        let mut released = |d: &mut Deadlines, now: MonoTime| {
            d.release_due(now);
            rxs.iter_mut()
                .map(|rx| rx.try_recv().ok())
                .collect::<Vec<_>>()
        };
        // Just before the first deadline: nothing.
        assert_eq!(released(&mut d, ms(0) - Duration::from_nanos(1)), [None; 5]);
        assert_eq!(
            released(&mut d, ms(0)),
            [None, None, None, None, Some(ms(0))]
        );
        // The two on one deadline leave together; the later ones wait.
        assert_eq!(d.next(), Some(ms(5)));
        assert_eq!(
            released(&mut d, ms(7)),
            [None, Some(ms(7)), Some(ms(7)), None, None]
        );
        // A late wake-up releases every deadline it passed, together.
        assert_eq!(
            released(&mut d, ms(20)),
            [Some(ms(20)), None, None, Some(ms(20)), None]
        );
        assert_eq!(d.next(), None);
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
}

//! The pending releases, earliest deadline first.

use canary_core::MonoTime;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;
use tokio::sync::oneshot;

/// What a release does.
pub(super) enum Fire {
    /// Wakes the request's task with the release time.
    Wake(oneshot::Sender<MonoTime>),
    /// Writes the request's held bytes from the release thread itself.
    Send(Arc<dyn Release>),
}

/// A request whose bytes the release thread writes at its deadline.
pub trait Release: Send + Sync {
    /// Writes them, without blocking; what cannot be written is left to the request's task.
    fn release(&self);
}

/// One registered release.
pub(super) struct Pending {
    pub(super) deadline: MonoTime,
    pub(super) seq: u64,
    pub(super) fire: Fire,
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

/// Registered releases, earliest deadline first (registration order among equals).
#[derive(Default)]
pub(super) struct Deadlines {
    heap: BinaryHeap<Reverse<Pending>>,
}

impl Deadlines {
    pub(super) fn push(&mut self, p: Pending) {
        self.heap.push(Reverse(p));
    }

    /// The earliest deadline pending.
    pub(super) fn next(&self) -> Option<MonoTime> {
        self.heap.peek().map(|Reverse(p)| p.deadline)
    }

    /// Moves every request due at `now` into `due`, to be sent `now` as their release time
    /// once the lock is dropped: a burst on one deadline (or several deadlines passed in one
    /// wake-up) leaves together.
    pub(super) fn take_due(&mut self, now: MonoTime, due: &mut Vec<Fire>) {
        while self.next().is_some_and(|d| d <= now) {
            let Reverse(p) = self.heap.pop().expect("peeked");
            due.push(p.fire);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A registration at `deadline`, and where its release time arrives.
    fn pending(deadline: MonoTime, seq: u64) -> (Pending, oneshot::Receiver<MonoTime>) {
        let (fire, rx) = oneshot::channel();
        let p = Pending {
            deadline,
            seq,
            fire: Fire::Wake(fire),
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
            let mut due = Vec::new();
            d.take_due(now, &mut due);
            for f in due {
                let Fire::Wake(f) = f else { unreachable!() };
                let _ = f.send(now);
            }
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
}

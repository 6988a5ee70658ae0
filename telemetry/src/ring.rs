//! A bounded, time-ordered ring of samples shared between a sampler task and readers.
//!
//! Telemetry runs for as long as the daemon does, so memory must not grow with time: the ring
//! keeps the newest `capacity` samples and drops the oldest. Readers get copies of what they
//! ask for (a run's window, the sample at a time) and never hold the lock while they work.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use canary_core::MonoTime;

/// Something stamped on the monotonic clock.
pub trait Stamped {
    /// When it was taken.
    fn at(&self) -> MonoTime;
}

/// A bounded ring of samples in time order, behind a shared handle (clones share the ring).
#[derive(Debug)]
pub struct Ring<T> {
    inner: Arc<Mutex<VecDeque<T>>>,
    capacity: usize,
}

impl<T> Clone for Ring<T> {
    fn clone(&self) -> Self {
        Ring {
            inner: self.inner.clone(),
            capacity: self.capacity,
        }
    }
}

impl<T: Stamped + Clone> Ring<T> {
    /// A ring holding at most `capacity` samples (at least 1).
    pub fn new(capacity: usize) -> Ring<T> {
        let capacity = capacity.max(1);
        Ring {
            inner: Arc::new(Mutex::new(VecDeque::with_capacity(capacity.min(4096)))),
            capacity,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<T>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends a sample, dropping the oldest when full. A sample older than the newest is
    /// inserted in order, so the ring stays sorted even if two samplers race.
    pub fn push(&self, sample: T) {
        let mut q = self.lock();
        if q.len() == self.capacity {
            q.pop_front();
        }
        let at = sample.at();
        let pos = q.partition_point(|s| s.at() <= at);
        q.insert(pos, sample);
    }

    /// The most samples kept.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// How many samples are held now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// True when nothing has been pushed (or everything was dropped).
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// Samples with `t0 <= at <= t1`, in time order.
    pub fn between(&self, t0: MonoTime, t1: MonoTime) -> Vec<T> {
        let q = self.lock();
        let start = q.partition_point(|s| s.at() < t0);
        q.range(start..)
            .take_while(|s| s.at() <= t1)
            .cloned()
            .collect()
    }

    /// Like [`Ring::between`], plus the last sample before `t0` (the state in force at `t0`).
    pub fn covering(&self, t0: MonoTime, t1: MonoTime) -> Vec<T> {
        let q = self.lock();
        let start = q.partition_point(|s| s.at() < t0).saturating_sub(1);
        q.range(start..)
            .take_while(|s| s.at() <= t1)
            .cloned()
            .collect()
    }

    /// The last sample taken at or before `t`.
    pub fn at_or_before(&self, t: MonoTime) -> Option<T> {
        let q = self.lock();
        let n = q.partition_point(|s| s.at() <= t);
        n.checked_sub(1).and_then(|i| q.get(i).cloned())
    }

    /// The first sample taken at or after `t`.
    pub fn at_or_after(&self, t: MonoTime) -> Option<T> {
        let q = self.lock();
        let n = q.partition_point(|s| s.at() < t);
        q.get(n).cloned()
    }

    /// The newest sample.
    pub fn latest(&self) -> Option<T> {
        self.lock().back().cloned()
    }

    /// Every sample held, in time order.
    pub fn snapshot(&self) -> Vec<T> {
        self.lock().iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, PartialEq)]
    struct S(u64);

    impl Stamped for S {
        fn at(&self) -> MonoTime {
            MonoTime(self.0)
        }
    }

    #[test]
    fn bounded_ordered_and_queryable() {
        let r = Ring::new(3);
        for t in [10, 20, 30, 40] {
            r.push(S(t));
        }
        assert_eq!(r.len(), 3);
        assert_eq!(r.snapshot(), vec![S(20), S(30), S(40)]);
        r.push(S(25)); // out of order: drops 20, inserts in place
        assert_eq!(r.snapshot(), vec![S(25), S(30), S(40)]);
        assert_eq!(r.between(MonoTime(26), MonoTime(40)), vec![S(30), S(40)]);
        assert_eq!(r.covering(MonoTime(26), MonoTime(35)), vec![S(25), S(30)]);
        assert_eq!(r.at_or_before(MonoTime(39)), Some(S(30)));
        assert_eq!(r.at_or_before(MonoTime(24)), None);
        assert_eq!(r.at_or_after(MonoTime(31)), Some(S(40)));
        assert_eq!(r.latest(), Some(S(40)));
        let clone = r.clone();
        clone.push(S(50));
        assert_eq!(r.len(), 3);
        assert_eq!(r.latest(), Some(S(50)));
    }
}

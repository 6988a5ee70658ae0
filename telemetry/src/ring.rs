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

    /// Which series it belongs to, when one ring holds several interleaved series (one per GPU,
    /// say). [`Ring::covering`] keeps the state in force at the window's start per series.
    /// Default: a single series.
    fn series(&self) -> u64 {
        0
    }
}

#[derive(Debug)]
struct Inner<T> {
    samples: VecDeque<T>,
    /// `(series, samples held)`, so `covering` knows when it has found every series. A few
    /// entries (one per GPU), hence a vector.
    series: Vec<(u64, usize)>,
    /// When the newest sample dropped for room was taken.
    last_dropped: Option<MonoTime>,
}

impl<T: Stamped> Inner<T> {
    fn count(&mut self, series: u64, add: bool) {
        match self.series.iter().position(|(k, _)| *k == series) {
            Some(i) if add => self.series[i].1 += 1,
            Some(i) => {
                self.series[i].1 -= 1;
                if self.series[i].1 == 0 {
                    self.series.swap_remove(i);
                }
            }
            None if add => self.series.push((series, 1)),
            None => {}
        }
    }
}

/// How long a sample stays in force for [`Ring::covering`]: far above any sampling interval
/// (NVML 500 ms, DCGM 1 s by default), far below a series that stopped.
pub const IN_FORCE: std::time::Duration = std::time::Duration::from_secs(60);

/// A bounded ring of samples in time order, behind a shared handle (clones share the ring).
#[derive(Debug)]
pub struct Ring<T> {
    inner: Arc<Mutex<Inner<T>>>,
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
            inner: Arc::new(Mutex::new(Inner {
                samples: VecDeque::with_capacity(capacity.min(4096)),
                series: Vec::new(),
                last_dropped: None,
            })),
            capacity,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner<T>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends a sample, dropping the oldest when full. A sample older than the newest is
    /// inserted in order, so the ring stays sorted even if two samplers race.
    pub fn push(&self, sample: T) {
        let mut g = self.lock();
        if g.samples.len() == self.capacity {
            if let Some(old) = g.samples.pop_front() {
                g.count(old.series(), false);
                g.last_dropped = Some(old.at());
            }
        }
        g.count(sample.series(), true);
        let at = sample.at();
        let pos = g.samples.partition_point(|s| s.at() <= at);
        g.samples.insert(pos, sample);
    }

    /// When the newest sample dropped for room was taken, if at or after `t`: a window from
    /// `t` then lacks its samples up to there (a run longer than the ring holds).
    pub fn dropped_since(&self, t: MonoTime) -> Option<MonoTime> {
        self.lock().last_dropped.filter(|&d| d >= t)
    }

    /// The most samples kept.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// How many samples are held now.
    pub fn len(&self) -> usize {
        self.lock().samples.len()
    }

    /// True when nothing has been pushed (or everything was dropped).
    pub fn is_empty(&self) -> bool {
        self.lock().samples.is_empty()
    }

    /// Samples with `t0 <= at <= t1`, in time order.
    pub fn between(&self, t0: MonoTime, t1: MonoTime) -> Vec<T> {
        let g = self.lock();
        let q = &g.samples;
        let start = q.partition_point(|s| s.at() < t0);
        q.range(start..)
            .take_while(|s| s.at() <= t1)
            .cloned()
            .collect()
    }

    /// Like [`Ring::between`], plus, for every series ([`Stamped::series`]: every GPU), the
    /// last sample before `t0` (the state in force at `t0`) if it is at most `IN_FORCE`
    /// old; in time order.
    pub fn covering(&self, t0: MonoTime, t1: MonoTime) -> Vec<T> {
        let g = self.lock();
        let q = &g.samples;
        let start = q.partition_point(|s| s.at() < t0);
        // Walk back until every series held has its sample; that is one sampling round unless
        // a series stopped before t0 or only starts inside the window (then the walk is longer,
        // never longer than the ring).
        let mut found: Vec<u64> = Vec::with_capacity(g.series.len());
        let mut before: Vec<usize> = Vec::with_capacity(g.series.len());
        // A series silent that long (a GPU gone from DCGM, say) says nothing about t0.
        let horizon = t0.as_nanos().saturating_sub(IN_FORCE.as_nanos() as u64);
        for i in (0..start).rev() {
            if found.len() == g.series.len() || q[i].at().as_nanos() < horizon {
                break;
            }
            let k = q[i].series();
            if !found.contains(&k) {
                found.push(k);
                before.push(i);
            }
        }
        let mut out: Vec<T> = before.iter().rev().map(|&i| q[i].clone()).collect();
        out.extend(q.range(start..).take_while(|s| s.at() <= t1).cloned());
        out
    }

    /// The last sample taken at or before `t`.
    pub fn at_or_before(&self, t: MonoTime) -> Option<T> {
        self.read_at_or_before(t, T::clone)
    }

    /// `read` of the last sample taken at or before `t`, without copying the sample: what a
    /// request's record takes from it (a few gauges) costs no copy of its histograms.
    pub fn read_at_or_before<R>(&self, t: MonoTime, read: impl FnOnce(&T) -> R) -> Option<R> {
        let g = self.lock();
        let n = g.samples.partition_point(|s| s.at() <= t);
        n.checked_sub(1).and_then(|i| g.samples.get(i)).map(read)
    }

    /// [`Ring::read_at_or_before`], when that sample is at most `max_age` older than `t`:
    /// a state that old (the scrapes failing since) says nothing about `t`.
    pub fn read_within<R>(
        &self,
        t: MonoTime,
        max_age: std::time::Duration,
        read: impl FnOnce(&T) -> R,
    ) -> Option<R> {
        let g = self.lock();
        let n = g.samples.partition_point(|s| s.at() <= t);
        let s = n.checked_sub(1).and_then(|i| g.samples.get(i))?;
        let age = t.as_nanos() - s.at().as_nanos();
        (u128::from(age) <= max_age.as_nanos()).then(|| read(s))
    }

    /// The first sample taken at or after `t`.
    pub fn at_or_after(&self, t: MonoTime) -> Option<T> {
        let g = self.lock();
        let n = g.samples.partition_point(|s| s.at() < t);
        g.samples.get(n).cloned()
    }

    /// The newest sample.
    pub fn latest(&self) -> Option<T> {
        self.lock().samples.back().cloned()
    }

    /// Every sample held, in time order.
    pub fn snapshot(&self) -> Vec<T> {
        self.lock().samples.iter().cloned().collect()
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
    fn covering_keeps_the_sample_in_force_for_every_gpu() {
        use crate::gpu::GpuSample;
        use canary_core::GpuSource;
        // 8 GPUs sampled one after another every 100 ns.
        let r = Ring::new(1000);
        for tick in 0..5u64 {
            for gpu in 0..8u32 {
                let at = MonoTime(tick * 100 + u64::from(gpu));
                let mut g = GpuSample::new(at, GpuSource::Nvml, gpu);
                g.util_gpu_pct = Some(f64::from(gpu) * 10.0);
                r.push(g);
            }
        }
        // A window from 250 to 260 holds no sample: each GPU's reading from tick 2 is in force.
        let got = r.covering(MonoTime(250), MonoTime(260));
        let gpus: Vec<(u64, u32)> = got.iter().map(|g| (g.at.as_nanos(), g.gpu)).collect();
        assert_eq!(
            gpus,
            (0..8).map(|g| (200 + u64::from(g), g)).collect::<Vec<_>>()
        );
        // So a short request averages all eight GPUs, not the last one read (70 %).
        let w = crate::gpu_over_interval(&got, None, MonoTime(250), MonoTime(260));
        assert_eq!((w.samples, w.util_avg_pct), (8, Some(35.0)));
        // A window starting mid-tick: GPUs 0..3 were last read just before it, 3..8 a tick
        // earlier; GPU 3 is read inside it.
        let got = r.covering(MonoTime(303), MonoTime(303));
        let gpus: Vec<(u64, u32)> = got.iter().map(|g| (g.at.as_nanos(), g.gpu)).collect();
        let mut want: Vec<(u64, u32)> = (0..3).map(|g| (300 + u64::from(g), g)).collect();
        want.extend((3..8).map(|g| (200 + u64::from(g), g)));
        want.push((303, 3));
        want.sort();
        assert_eq!(gpus, want);
    }

    #[test]
    fn a_series_that_stopped_long_ago_is_not_in_force() {
        use crate::gpu::GpuSample;
        use canary_core::GpuSource;
        let s = |secs: u64| secs * 1_000_000_000;
        let r = Ring::new(1000);
        // GPU 1 reported once at 0 s and never again; GPU 0 every second up to 200 s.
        r.push(GpuSample::new(MonoTime(0), GpuSource::Dcgm, 1));
        for t in 1..=200 {
            r.push(GpuSample::new(MonoTime(s(t)), GpuSource::Dcgm, 0));
        }
        let got = r.covering(MonoTime(s(200) + 1), MonoTime(s(200) + 2));
        let gpus: Vec<u32> = got.iter().map(|g| g.gpu).collect();
        assert_eq!(gpus, [0], "GPU 1's 200 s old reading is not in force");
        // Within the horizon it still is.
        let got = r.covering(MonoTime(s(30)), MonoTime(s(30)));
        assert!(got.iter().any(|g| g.gpu == 1), "{got:?}");
    }

    #[test]
    fn bounded_ordered_and_queryable() {
        let r = Ring::new(3);
        for t in [10, 20, 30, 40] {
            r.push(S(t));
        }
        assert_eq!(r.len(), 3);
        assert_eq!(r.snapshot(), vec![S(20), S(30), S(40)]);
        assert_eq!(r.dropped_since(MonoTime(5)), Some(MonoTime(10)));
        assert_eq!(r.dropped_since(MonoTime(11)), None);
        r.push(S(25)); // out of order: drops 20, inserts in place
        assert_eq!(r.snapshot(), vec![S(25), S(30), S(40)]);
        assert_eq!(r.between(MonoTime(26), MonoTime(40)), vec![S(30), S(40)]);
        assert_eq!(r.covering(MonoTime(26), MonoTime(35)), vec![S(25), S(30)]);
        assert_eq!(r.at_or_before(MonoTime(39)), Some(S(30)));
        assert_eq!(r.at_or_before(MonoTime(24)), None);
        assert_eq!(r.read_at_or_before(MonoTime(30), |s| s.0 + 1), Some(31));
        assert_eq!(r.read_at_or_before(MonoTime(24), |s| s.0), None);
        let ns = std::time::Duration::from_nanos;
        assert_eq!(r.read_within(MonoTime(39), ns(9), |s| s.0), Some(30));
        assert_eq!(r.read_within(MonoTime(41), ns(9), |s| s.0), Some(40));
        assert_eq!(r.read_within(MonoTime(50), ns(9), |s| s.0), None, "too old");
        assert_eq!(r.read_within(MonoTime(24), ns(9), |s| s.0), None);
        assert_eq!(r.at_or_after(MonoTime(31)), Some(S(40)));
        assert_eq!(r.latest(), Some(S(40)));
        let clone = r.clone();
        clone.push(S(50));
        assert_eq!(r.len(), 3);
        assert_eq!(r.latest(), Some(S(50)));
    }
}

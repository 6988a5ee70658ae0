//! Growth of counters and histograms over a run, judged per series (one label set), as
//! Prometheus' `increase()` does.
//!
//! Judging a sum over label sets would take any drop of the sum for a restart and count the
//! later value from zero: an idle engine's label set that disappears, or a Service that sends
//! every other scrape to another replica, inflated token counts thousands of times. Here:
//!
//! - a series seen before grows by its own difference; a series that went down was reset (that
//!   process restarted), and its growth counts from zero;
//! - a series seen for the first time starts at its value and adds nothing until its next
//!   scrape (a label set appearing with history is not growth during the run; the cost is a
//!   series created lazily mid-run losing its first step, as a whole signal's first scrape
//!   always did);
//! - a series that vanishes ends at its last value; if it comes back it is compared with that.
//!
//! A series that goes backwards more than once in a run is not one process restarting: the
//! URL likely reaches several server processes (a Kubernetes Service over replicas). Then the
//! counters' growth is meaningless and callers withhold what depends on it
//! ([`Walk::flipping`]).
//!
//! A sample keeps its series' values only up to [`MAX_SERIES`] label sets per signal (and
//! [`MAX_SERIES_BUCKETS`] buckets per histogram): past that, the signal is kept as one series,
//! its sum, and judged as before (the sample's `merged_only`, the source's detail and the
//! run's note say so), so what the ring holds stays bounded whatever a server sends.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use crate::engine::ServerSample;
use crate::prometheus::{HistogramSnapshot, Labels};

/// Series (label sets) of one counter or histogram that a sample keeps one by one; past this
/// the signal's series are kept as one, their sum (merged over label sets), and its growth is
/// judged on that sum, as before growth was judged per series: a label set that vanishes or
/// restarts reads as a reset of the whole sum. Every sample in the scraper's ring (7,200 by
/// default) keeps its series: a gateway exposing 64 workers' six histograms of 30 buckets
/// each would keep ~180 KB a sample, ~1.3 GB over a two-hour run. Real servers have one
/// series per model or data-parallel engine.
pub const MAX_SERIES: usize = 16;

/// Buckets over the per-series snapshots one histogram of a sample keeps (each series may
/// have up to `MAX_BUCKETS`); past this the histogram is kept merged only, as past
/// [`MAX_SERIES`]. With the merged copy, six histograms keep at most 6 × 3 × 128 buckets
/// (~37 KB) a sample.
pub const MAX_SERIES_BUCKETS: usize = 2 * crate::prometheus::MAX_BUCKETS;

/// The key of a signal's series kept as one (past [`MAX_SERIES`]); never a label set's key,
/// so a signal that crosses the cap mid-run starts over (its first merged step adds nothing)
/// rather than comparing a sum with one series.
pub(crate) fn merged_key(name: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    "merged over label sets".hash(&mut h);
    name.hash(&mut h);
    h.finish()
}

/// The key of one series of a signal: a hash of its sample name and labels (stable within a
/// process, which is all a run needs).
pub(crate) fn series_key(name: &str, labels: &Labels) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    name.hash(&mut h);
    labels.hash(&mut h);
    h.finish()
}

/// Per-series values of a [`ServerSample`]'s cumulative signals.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SeriesValues {
    /// Prompt tokens per series.
    pub prompt_tokens: Vec<(u64, f64)>,
    /// Generated tokens per series.
    pub generation_tokens: Vec<(u64, f64)>,
    /// Preemptions per series.
    pub preemptions: Vec<(u64, f64)>,
    /// Prefix-cache hits per series.
    pub prefix_hits: Vec<(u64, f64)>,
    /// Prefix-cache lookups per series.
    pub prefix_queries: Vec<(u64, f64)>,
    /// The histograms' series, in the order of [`Hist::ALL`].
    pub hists: [HistSeries; 6],
}

/// One histogram signal's series. `parts` is empty when there is at most one series: that
/// one is the sample's merged snapshot, not stored twice.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HistSeries {
    /// One key per series.
    pub keys: Vec<u64>,
    /// The snapshot of each series, in the order of `keys`, when there are several.
    pub parts: Vec<HistogramSnapshot>,
}

/// The histogram signals of a [`ServerSample`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hist {
    /// Time to first token.
    Ttft,
    /// Inter-token latency.
    Itl,
    /// End-to-end latency.
    E2e,
    /// Time in queue.
    QueueTime,
    /// Prefill time.
    PrefillTime,
    /// Decode time.
    DecodeTime,
}

impl Hist {
    /// Every histogram signal.
    pub const ALL: [Hist; 6] = [
        Hist::Ttft,
        Hist::Itl,
        Hist::E2e,
        Hist::QueueTime,
        Hist::PrefillTime,
        Hist::DecodeTime,
    ];

    fn merged(self, s: &ServerSample) -> Option<&HistogramSnapshot> {
        match self {
            Hist::Ttft => s.ttft.as_ref(),
            Hist::Itl => s.itl.as_ref(),
            Hist::E2e => s.e2e.as_ref(),
            Hist::QueueTime => s.queue_time.as_ref(),
            Hist::PrefillTime => s.prefill_time.as_ref(),
            Hist::DecodeTime => s.decode_time.as_ref(),
        }
    }

    /// The series of this signal in `s`.
    fn series(self, s: &ServerSample) -> Vec<(u64, &HistogramSnapshot)> {
        let Some(merged) = self.merged(s) else {
            return Vec::new();
        };
        let hs = &s.series.hists[self as usize];
        if hs.parts.len() > 1 && hs.parts.len() == hs.keys.len() {
            hs.keys.iter().copied().zip(&hs.parts).collect()
        } else {
            // One series, the merged snapshot itself (key 0 in a sample built without keys).
            vec![(hs.keys.first().copied().unwrap_or(0), merged)]
        }
    }
}

/// A value that only grows between resets.
trait Cumulative: Clone {
    /// Growth from `earlier` to `self`, and whether it was a reset (counted from zero).
    fn since(&self, earlier: &Self) -> (Self, bool);
    fn add(&self, other: &Self) -> Self;
}

impl Cumulative for f64 {
    fn since(&self, earlier: &f64) -> (f64, bool) {
        if self >= earlier {
            (self - earlier, false)
        } else {
            (*self, true)
        }
    }
    fn add(&self, other: &f64) -> f64 {
        self + other
    }
}

impl Cumulative for HistogramSnapshot {
    fn since(&self, earlier: &HistogramSnapshot) -> (HistogramSnapshot, bool) {
        (self.delta(earlier), self.is_reset_from(earlier))
    }
    fn add(&self, other: &HistogramSnapshot) -> HistogramSnapshot {
        self.merge(other)
    }
}

/// One signal's series' last values and resets, over a walk through a run's samples.
#[derive(Debug)]
struct Tracker<T> {
    last: HashMap<u64, T>,
    resets: HashMap<u64, u32>,
}

impl<T> Default for Tracker<T> {
    fn default() -> Self {
        Tracker {
            last: HashMap::new(),
            resets: HashMap::new(),
        }
    }
}

impl<T: Cumulative> Tracker<T> {
    /// The growth since the previous sample over the series seen before (`None` when none
    /// was), and whether any went backwards.
    fn step<'a>(&mut self, series: impl IntoIterator<Item = (u64, &'a T)>) -> (Option<T>, bool)
    where
        T: 'a,
    {
        let (mut grown, mut back): (Option<T>, bool) = (None, false);
        for (key, value) in series {
            if let Some(prev) = self.last.get(&key) {
                let (d, reset) = value.since(prev);
                if reset {
                    back = true;
                    *self.resets.entry(key).or_default() += 1;
                }
                grown = Some(match grown {
                    Some(g) => g.add(&d),
                    None => d,
                });
            }
            self.last.insert(key, value.clone());
        }
        (grown, back)
    }

    /// Whether a series went backwards more than once.
    fn flipped(&self) -> bool {
        self.resets.values().any(|&n| n > 1)
    }
}

/// What the cumulative signals gained from the previous sample to one sample.
#[derive(Debug, Clone, Default)]
pub struct Step {
    /// Prompt tokens.
    pub prompt_tokens: Option<f64>,
    /// Generated tokens.
    pub generation_tokens: Option<f64>,
    /// Preemptions.
    pub preemptions: Option<f64>,
    /// Prefix-cache hits.
    pub prefix_hits: Option<f64>,
    /// Prefix-cache lookups.
    pub prefix_queries: Option<f64>,
    /// Histograms, in the order of [`Hist::ALL`].
    pub hists: [Option<HistogramSnapshot>; 6],
}

impl Step {
    /// A histogram's growth.
    pub fn hist(&self, h: Hist) -> Option<&HistogramSnapshot> {
        self.hists[h as usize].as_ref()
    }
}

/// A walk through a run's time-ordered samples, one [`Walk::step`] per sample.
#[derive(Debug, Default)]
pub struct Walk {
    counters: [Tracker<f64>; 5],
    hists: [Tracker<HistogramSnapshot>; 6],
    backwards_steps: usize,
}

impl Walk {
    /// What grew from the previous sample stepped to `s`.
    pub fn step(&mut self, s: &ServerSample) -> Step {
        let v = &s.series;
        let lists = [
            &v.prompt_tokens,
            &v.generation_tokens,
            &v.preemptions,
            &v.prefix_hits,
            &v.prefix_queries,
        ];
        let mut back = false;
        let mut c = [None; 5];
        for (i, list) in lists.into_iter().enumerate() {
            let (g, b) = self.counters[i].step(list.iter().map(|(k, v)| (*k, v)));
            c[i] = g;
            back |= b;
        }
        let mut hists: [Option<HistogramSnapshot>; 6] = Default::default();
        for h in Hist::ALL {
            let (g, b) = self.hists[h as usize].step(h.series(s));
            hists[h as usize] = g;
            back |= b;
        }
        self.backwards_steps += usize::from(back);
        Step {
            prompt_tokens: c[0],
            generation_tokens: c[1],
            preemptions: c[2],
            prefix_hits: c[3],
            prefix_queries: c[4],
            hists,
        }
    }

    /// Set when a series went backwards more than once: the URL likely reaches more than one
    /// server process, and counter growth is not to be reported. Says how many samples saw
    /// counters go backwards.
    pub fn flipping(&self) -> Option<String> {
        let flipped =
            self.counters.iter().any(Tracker::flipped) || self.hists.iter().any(Tracker::flipped);
        flipped.then(|| {
            format!(
                "counters went backwards {} times: the URL may reach more than one server \
                 process (token counts, preemptions, prefix-cache hit rate and latency \
                 histograms withheld)",
                self.backwards_steps
            )
        })
    }
}

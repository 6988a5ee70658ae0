//! The gaps between one request's consecutive token chunks, in bounded memory.
//!
//! A stream that never ends must not grow a request's state without bound (issue 14: 26 MB to
//! 905 MB in 30 s, one timestamp kept per chunk). The first [`ChunkGaps::KEPT`] gaps are kept
//! in order: `--record-chunks` writes them, and the kernel join rebuilds each chunk's read time
//! from them. Gaps past those go into a [`Distribution`] of the request's own (fixed-size,
//! exact to the histogram's 0.1%), so the run's `inter_chunk_latency` still counts every gap.
//! The largest gap is tracked exactly.

use crate::stats::Distribution;

/// One request's inter-chunk gaps (ms): the first [`ChunkGaps::KEPT`] in order, the rest as a
/// distribution, and the largest.
#[derive(Debug, Clone, Default)]
pub struct ChunkGaps {
    kept: Vec<f64>,
    rest: Option<Box<Distribution>>,
    count: u64,
    max: Option<f64>,
}

impl ChunkGaps {
    /// Gaps kept in order per request (128 KiB of them); past these, only the distribution.
    pub const KEPT: usize = 16_384;

    /// No gap yet.
    pub fn new() -> ChunkGaps {
        ChunkGaps::default()
    }

    /// Adds the next gap, in ms.
    pub fn push(&mut self, ms: f64) {
        self.count += 1;
        self.max = Some(self.max.map_or(ms, |m| m.max(ms)));
        if self.kept.len() < ChunkGaps::KEPT {
            self.kept.push(ms);
        } else {
            self.rest.get_or_insert_with(Box::default).record(ms);
        }
    }

    /// The first gaps, in order: all of them unless [`ChunkGaps::count`] exceeds
    /// [`ChunkGaps::KEPT`].
    pub fn kept(&self) -> &[f64] {
        &self.kept
    }

    /// Gaps seen, kept or not.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The largest gap, exact.
    pub fn max(&self) -> Option<f64> {
        self.max
    }

    /// Adds every gap, kept or not, to `d`.
    pub fn record_into(&self, d: &mut Distribution) {
        for &g in &self.kept {
            d.record(g);
        }
        if let Some(rest) = &self.rest {
            d.merge(rest);
        }
    }
}

impl From<&[f64]> for ChunkGaps {
    fn from(gaps: &[f64]) -> ChunkGaps {
        let mut g = ChunkGaps::new();
        for &ms in gaps {
            g.push(ms);
        }
        g
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_stops_growing_at_the_kept_prefix_and_every_gap_still_counts() {
        let mut g = ChunkGaps::new();
        let n = ChunkGaps::KEPT as u64 * 3;
        let mut sum = 50.0;
        for i in 0..n {
            let ms = 1.0 + (i % 7) as f64;
            g.push(ms);
            sum += ms;
        }
        g.push(50.0);
        assert_eq!(g.kept().len(), ChunkGaps::KEPT);
        assert_eq!(g.kept()[..3], [1.0, 2.0, 3.0]);
        assert_eq!(g.count(), n + 1);
        assert_eq!(g.max(), Some(50.0));
        let mut d = Distribution::new();
        g.record_into(&mut d);
        let s = d.stats().unwrap();
        assert_eq!(s.count, n + 1);
        assert_eq!(s.max, 50.0);
        assert!((s.avg - sum / (n + 1) as f64).abs() < 1e-9);
    }

    #[test]
    fn a_short_stream_keeps_every_gap() {
        let g = ChunkGaps::from(&[3.0, 1.0, 2.0][..]);
        assert_eq!(g.kept(), [3.0, 1.0, 2.0]);
        assert_eq!((g.count(), g.max()), (3, Some(3.0)));
        assert_eq!(ChunkGaps::new().max(), None);
    }
}

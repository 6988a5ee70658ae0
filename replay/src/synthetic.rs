//! Synthetic requests: input and output lengths drawn around a mean (aiperf's `--isl`,
//! `--isl-stddev`, `--osl`, `--osl-stddev`), with an optional prefix shared by every request
//! (`--shared-system-prompt-length`).
//!
//! Request *i* is a pure function of the seed and *i*: nothing is held per request, so a run
//! of a million requests, or a closed loop that runs for an hour, costs no memory for its
//! requests. Each becomes a [`TraceRequest`] without hash ids (its prompt is unique to the run,
//! as the prompt builder salts it) or, with a shared prefix, with one hash id whose block is
//! the prefix: every request's prompt then starts with the same text, and the server's prefix
//! cache sees it.

use crate::arrival::Rng;
use canary_core::{HashIds, TraceRequest};
use serde::Serialize;

/// The hash id of the shared prefix block (any fixed value: prompts key blocks by id).
const SHARED_PREFIX_ID: u64 = 0x7368_6172_6564; // "shared"

/// A length in tokens: a mean and a standard deviation (0: every request the same).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Length {
    /// The mean, in tokens.
    pub mean: u32,
    /// The standard deviation, in tokens.
    pub stddev: f64,
}

impl Length {
    /// Exactly `mean` tokens every time.
    pub fn fixed(mean: u32) -> Length {
        Length { mean, stddev: 0.0 }
    }

    /// One draw, rounded and kept within `1..=limit`.
    fn draw(&self, rng: &mut Rng, limit: u32) -> u32 {
        let x = if self.stddev > 0.0 {
            (self.mean as f64 + self.stddev * rng.normal()).round()
        } else {
            self.mean as f64
        };
        x.clamp(1.0, limit.max(1) as f64) as u32
    }
}

/// What synthetic requests look like.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SyntheticRequests {
    /// Input length (after the shared prefix).
    pub isl: Length,
    /// Output length.
    pub osl: Length,
    /// Tokens of a prefix every request starts with (0: none).
    pub shared_prefix: u32,
    /// Seeds the lengths (and, for a rate, the arrivals).
    pub seed: u64,
}

impl SyntheticRequests {
    /// `isl` tokens in, `osl` out, every request alike, seed 0.
    pub fn fixed(isl: u32, osl: u32) -> SyntheticRequests {
        SyntheticRequests {
            isl: Length::fixed(isl),
            osl: Length::fixed(osl),
            shared_prefix: 0,
            seed: 0,
        }
    }

    /// Request `index`, its lengths kept within `limit` tokens (the run's length limit): the
    /// same for the same seed and index.
    pub fn request(&self, index: u32, limit: u32) -> TraceRequest {
        let mut rng = Rng::new(self.seed, u64::from(index));
        let isl = self.isl.draw(&mut rng, limit);
        let osl = self.osl.draw(&mut rng, limit);
        let (input_tokens, hash_ids, block_size) = match self.shared_prefix {
            0 => (isl, HashIds::new(), 0),
            p => (
                p.saturating_add(isl).min(limit),
                HashIds::from(&[SHARED_PREFIX_ID][..]),
                p,
            ),
        };
        TraceRequest::new(
            index,
            index + 1,
            0,
            None,
            0,
            input_tokens,
            osl,
            hash_ids,
            block_size,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_lengths_are_exact_and_drawn_ones_spread_around_the_mean() {
        let fixed = SyntheticRequests::fixed(200, 50);
        for i in 0..100 {
            let r = fixed.request(i, 1_000_000);
            assert_eq!((r.input_tokens, r.output_tokens, r.index), (200, 50, i));
            assert!(r.hash_ids.is_empty());
        }
        let spread = SyntheticRequests {
            isl: Length {
                mean: 1000,
                stddev: 100.0,
            },
            ..fixed
        };
        let isl: Vec<f64> = (0..20_000)
            .map(|i| spread.request(i, 1_000_000).input_tokens as f64)
            .collect();
        let mean = isl.iter().sum::<f64>() / isl.len() as f64;
        let sd = (isl.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / isl.len() as f64).sqrt();
        assert!((mean - 1000.0).abs() < 3.0, "mean {mean}");
        assert!((sd - 100.0).abs() < 3.0, "sd {sd}");
        // The same seed and index: the same request.
        assert_eq!(spread.request(17, 10_000), spread.request(17, 10_000));
    }

    #[test]
    fn draws_stay_within_one_token_and_the_limit() {
        let wide = SyntheticRequests {
            isl: Length {
                mean: 10,
                stddev: 1000.0,
            },
            ..SyntheticRequests::fixed(10, 10)
        };
        for i in 0..2000 {
            let r = wide.request(i, 500);
            assert!((1..=500).contains(&r.input_tokens), "{}", r.input_tokens);
        }
    }

    #[test]
    fn a_shared_prefix_is_one_block_every_request_has() {
        let s = SyntheticRequests {
            shared_prefix: 300,
            ..SyntheticRequests::fixed(100, 10)
        };
        let (a, b) = (s.request(0, 10_000), s.request(1, 10_000));
        assert_eq!(a.input_tokens, 400);
        assert_eq!(
            (a.hash_ids.clone(), a.block_size),
            (b.hash_ids, b.block_size)
        );
        assert_eq!(a.block_size, 300);
    }
}

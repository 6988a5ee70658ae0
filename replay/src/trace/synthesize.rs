//! Trace synthesis, as `aiperf synthesize`: a new Mooncake trace from an existing one with its
//! shared prefixes and unique prompts scaled apart, its prefix roots multiplied, lengths capped
//! and time sped up, keeping its structure (which rows share which blocks, sessions, order).
//! Backs `canaryd synthesize IN OUT`.
//!
//! A block is *shared* when its id appears in more than one row; a row's *prefix* is its
//! leading run of shared blocks, the rest of its prompt is *unique*. New block ids are
//! numbered 0, 1, 2… in order of first use, so equal inputs give equal outputs.

use std::collections::HashMap;
use std::io::Write;

use canary_core::{splitmix64, TraceRequest};

use super::Trace;

/// Mooncake's block size, the only one the written trace can say.
const MOONCAKE_BLOCK: u32 = 512;

/// How to change a trace (aiperf's `--synthesis-*` settings). [`Synthesis::default`] changes
/// nothing. Serialized as written in `summary.json`'s `run.trace.synthesis`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Synthesis {
    /// Timestamps and session delays are divided by this.
    pub speedup_ratio: f64,
    /// Shared-prefix lengths are multiplied by this.
    pub prefix_len_multiplier: f64,
    /// Each prefix tree is copied this many times, each row going to one copy (by seed and
    /// row): the same shape of sharing, with this many times as many distinct prefixes.
    pub prefix_root_multiplier: u32,
    /// Unique-prompt lengths are multiplied by this.
    pub prompt_len_multiplier: f64,
    /// Input lengths are capped at this (blocks past it dropped).
    pub max_isl: Option<u32>,
    /// Output lengths are capped at this.
    pub max_osl: Option<u32>,
    /// Picks each row's prefix copy.
    pub seed: u64,
}

impl Default for Synthesis {
    fn default() -> Synthesis {
        Synthesis {
            speedup_ratio: 1.0,
            prefix_len_multiplier: 1.0,
            prefix_root_multiplier: 1,
            prompt_len_multiplier: 1.0,
            max_isl: None,
            max_osl: None,
            seed: 0,
        }
    }
}

/// Why a trace could not be synthesized.
#[derive(Debug, thiserror::Error)]
pub enum SynthesisError {
    /// A setting out of range.
    #[error("{0}")]
    Setting(String),
    /// A row the written trace cannot express.
    #[error("line {line}: {reason}")]
    Row {
        /// Its line in the input.
        line: u32,
        /// Why.
        reason: String,
    },
    /// Writing failed.
    #[error("writing the trace")]
    Io(#[from] std::io::Error),
}

impl Synthesis {
    /// Checks every factor is positive and finite and every cap at least 1.
    pub fn validate(&self) -> Result<(), SynthesisError> {
        for (name, v) in [
            ("speedup ratio", self.speedup_ratio),
            ("prefix length multiplier", self.prefix_len_multiplier),
            ("prompt length multiplier", self.prompt_len_multiplier),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(SynthesisError::Setting(format!(
                    "{name}: expected a positive number, found {v}"
                )));
            }
        }
        if self.prefix_root_multiplier == 0 {
            return Err(SynthesisError::Setting(
                "prefix root multiplier: expected 1 or more".into(),
            ));
        }
        if self.max_isl == Some(0) || self.max_osl == Some(0) {
            return Err(SynthesisError::Setting(
                "max isl/osl: expected 1 or more tokens".into(),
            ));
        }
        Ok(())
    }
}

/// What [`synthesize`] wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SynthesisReport {
    /// Rows written.
    pub rows: u64,
    /// Distinct block ids written.
    pub blocks: u64,
    /// Rows whose input or output was capped.
    pub capped: u64,
}

/// What a new block id stands for.
#[derive(Hash, PartialEq, Eq)]
enum BlockKey {
    /// Position `pos` of a scaled prefix whose source block there was `source`, in copy `root`.
    Prefix { root: u32, source: u64, pos: u32 },
    /// Block `pos` of row `row`'s unique prompt.
    Unique { row: u32, pos: u32 },
}

/// Writes `trace` changed by `s` to `out` as Mooncake JSONL.
pub fn synthesize(
    trace: &Trace,
    s: &Synthesis,
    out: &mut impl Write,
) -> Result<SynthesisReport, SynthesisError> {
    s.validate()?;
    let rows = &trace.requests;
    let mut uses: HashMap<u64, u32> = HashMap::new();
    for r in rows {
        for id in &r.hash_ids {
            *uses.entry(id).or_default() += 1;
        }
    }
    let mut ids: HashMap<BlockKey, u64> = HashMap::new();
    let mut report = SynthesisReport::default();
    for r in rows {
        let line = r.line;
        if r.prompt().is_some() {
            return Err(SynthesisError::Row {
                line,
                reason: "carries its own prompt text, whose length cannot be scaled".into(),
            });
        }
        if !r.hash_ids.is_empty() && r.block_size != MOONCAKE_BLOCK {
            return Err(SynthesisError::Row {
                line,
                reason: format!(
                    "has {}-token blocks; the written Mooncake trace can only say {MOONCAKE_BLOCK}",
                    r.block_size
                ),
            });
        }
        let (input, hash_ids, capped_in) = scale_prompt(&r, s, &uses, &mut ids);
        let output = s
            .max_osl
            .map_or(r.output_tokens, |m| r.output_tokens.min(m));
        report.capped += u64::from(capped_in || output < r.output_tokens);
        write_row(out, &r, s.speedup_ratio, input, output, &hash_ids)?;
        report.rows += 1;
    }
    report.blocks = ids.len() as u64;
    out.flush()?;
    Ok(report)
}

/// The row's new input length and block ids, and whether the cap cut it.
fn scale_prompt(
    r: &TraceRequest,
    s: &Synthesis,
    uses: &HashMap<u64, u32>,
    ids: &mut HashMap<BlockKey, u64>,
) -> (u32, Vec<u64>, bool) {
    let bs = MOONCAKE_BLOCK as u64;
    let prefix_blocks = r.hash_ids.iter().take_while(|id| uses[id] > 1).count() as u64;
    let prefix = (prefix_blocks * bs).min(u64::from(r.input_tokens));
    let unique = u64::from(r.input_tokens) - prefix;
    let scaled_prefix = (prefix as f64 * s.prefix_len_multiplier).round() as u64;
    // A prefix followed by unique text stays whole blocks, so it stays shareable.
    let scaled_prefix = match unique {
        0 => scaled_prefix,
        _ => scaled_prefix.div_ceil(bs) * bs,
    };
    let scaled_unique = (unique as f64 * s.prompt_len_multiplier).round() as u64;
    let wanted = (scaled_prefix + scaled_unique).clamp(1, u64::from(u32::MAX));
    let input = s.max_isl.map_or(wanted, |m| wanted.min(u64::from(m)));
    if r.hash_ids.is_empty() {
        return (input as u32, Vec::new(), input < wanted);
    }
    let root = match s.prefix_root_multiplier {
        1 => 0,
        n => (splitmix64(s.seed ^ splitmix64(u64::from(r.index))) % u64::from(n)) as u32,
    };
    let source = r.hash_ids.to_vec();
    let blocks = input.div_ceil(bs);
    let new_prefix_blocks = scaled_prefix.div_ceil(bs);
    let mut out = Vec::with_capacity(blocks as usize);
    for pos in 0..blocks {
        let key = if pos < new_prefix_blocks && prefix_blocks > 0 {
            // Scaled block `pos` stands for source block `pos / multiplier`.
            let at = ((pos as f64 / s.prefix_len_multiplier) as u64).min(prefix_blocks - 1);
            BlockKey::Prefix {
                root,
                source: source[at as usize],
                pos: pos as u32,
            }
        } else {
            BlockKey::Unique {
                row: r.index,
                pos: pos as u32,
            }
        };
        let next = ids.len() as u64;
        out.push(*ids.entry(key).or_insert(next));
    }
    (input as u32, out, input < wanted)
}

fn write_row(
    out: &mut impl Write,
    r: &TraceRequest,
    speedup: f64,
    input: u32,
    output: u32,
    hash_ids: &[u64],
) -> std::io::Result<()> {
    let ms = |us: u64| us as f64 / 1e3 / speedup;
    let mut row = serde_json::json!({
        "timestamp": ms(r.timestamp_us),
        "input_length": input,
        "output_length": output,
    });
    if !hash_ids.is_empty() {
        row["hash_ids"] = serde_json::json!(hash_ids);
    }
    if let Some(session) = r.session {
        row["session_id"] = serde_json::json!(session);
    }
    if let Some(d) = r.delay_us() {
        row["delay"] = serde_json::json!(ms(d));
    }
    if let Some(extra) = r.extra() {
        row["extra"] = extra.clone();
    }
    serde_json::to_writer(&mut *out, &row)?;
    out.write_all(b"\n")
}

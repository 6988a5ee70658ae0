//! Trace synthesis, as `aiperf synthesize`: a new trace from an existing one with its shared
//! prefixes and unique prompts scaled apart, its prefix roots multiplied, lengths capped and
//! time sped up, keeping its structure (which rows share which blocks, sessions, order).
//! Backs `canaryd synthesize IN OUT`.
//!
//! The trace is written in the input's own format where canaryd can write it: Bailian in,
//! Bailian out (16-token blocks); Mooncake and BurstGPT in, Mooncake out (BurstGPT's rows are
//! lengths and sessions, which Mooncake says in full; see [`written_format`]).
//!
//! A block is *shared* when its id appears in more than one row; a row's *prefix* is its
//! leading run of shared blocks, the rest of its prompt is *unique*. New block ids are
//! numbered 0, 1, 2… in order of first use, so equal inputs give equal outputs.

mod bailian;

use std::collections::HashMap;
use std::io::Write;

use canary_core::{splitmix64, TraceRequest};

use super::id_set::IdSet;
use super::{Trace, TraceFormat, MAX_SPAN};

/// The format [`synthesize`] writes a trace of `input` format in: Bailian stays Bailian,
/// Mooncake stays Mooncake, BurstGPT becomes Mooncake (canaryd keeps a BurstGPT row's lengths,
/// time and session, not its `Model` or `Log Type`, so a BurstGPT file would lose those
/// columns; a Mooncake row holds everything it kept).
pub fn written_format(input: TraceFormat) -> TraceFormat {
    match input {
        TraceFormat::Bailian => TraceFormat::Bailian,
        TraceFormat::Mooncake | TraceFormat::BurstGpt => TraceFormat::Mooncake,
    }
}

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
    /// A row the factors make longer than the length limit.
    #[error("line {line}: its input_length would be {tokens} tokens, over the limit of {limit}")]
    TooLong {
        /// Its line in the input.
        line: u32,
        /// The length it would have.
        tokens: u64,
        /// The limit.
        limit: u32,
    },
    /// A row whose time the speedup ratio puts past what a trace may hold (a reader refuses
    /// it, or drops it as past the trace's span).
    #[error("line {line}: divided by the speedup ratio, its {field} would be {reason}")]
    Time {
        /// Its line in the input.
        line: u32,
        /// `timestamp` or `delay`.
        field: &'static str,
        /// Why it cannot be written.
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
                    "{name}: expected a positive number, found {}",
                    canary_core::rate_text::number(v)
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
    /// Block ids held in memory at the end to be reused: one per distinct shared-prefix block
    /// written (per prefix copy). A unique-prompt block is numbered by a counter and never
    /// held, so synthesis memory grows with the shared prefixes, not with the blocks written.
    pub held_blocks: u64,
}

/// A scaled prefix block: position `pos` of a scaled prefix whose source block there was
/// `source`, in copy `root`. Rows sharing it share its new id.
#[derive(Hash, PartialEq, Eq)]
struct PrefixKey {
    root: u32,
    source: u64,
    pos: u32,
}

/// New block ids, numbered 0, 1, 2… in order of first use. Only prefix blocks are kept, to be
/// found again: a unique-prompt block belongs to one row and one position, which no later
/// block can ask for, so it takes the next number and is forgotten (it used to be kept too,
/// a map entry for every block written: gigabytes for a long trace with a prompt multiplier).
#[derive(Default)]
struct BlockIds {
    prefix: HashMap<PrefixKey, u64>,
    next: u64,
}

impl BlockIds {
    /// The id of a prefix block: its earlier one, or the next number.
    fn prefix(&mut self, key: PrefixKey) -> u64 {
        let next = &mut self.next;
        *self.prefix.entry(key).or_insert_with(|| {
            *next += 1;
            *next - 1
        })
    }

    /// A new id for a unique-prompt block.
    fn unique(&mut self) -> u64 {
        self.next += 1;
        self.next - 1
    }
}

/// Writes `trace` changed by `s` to `out`, in [`written_format`] of the trace's format (JSONL).
pub fn synthesize(
    trace: &Trace,
    s: &Synthesis,
    length_limit: u32,
    out: &mut impl Write,
) -> Result<SynthesisReport, SynthesisError> {
    s.validate()?;
    let format = written_format(trace.format);
    let block = format.block_size();
    let rows = &trace.requests;
    // Bailian says sessions as parent links between chat ids: worked out before any row is
    // written, so a row that cannot be linked is refused before the output is touched.
    let chats = match format {
        TraceFormat::Bailian => Some(bailian::Chats::of(trace)?),
        _ => None,
    };
    // The ids more than one block has: a shared prefix. Two sets of ids, about a bit an id
    // (a count per id took 13 to 26 bytes: 104 MB for a trace of 3.9M distinct blocks).
    let (mut seen, mut shared) = (IdSet::default(), IdSet::default());
    for r in rows {
        for id in &r.hash_ids {
            if !seen.insert(id) {
                shared.insert(id);
            }
        }
    }
    drop(seen);
    let mut ids = BlockIds::default();
    let mut report = SynthesisReport::default();
    let first_us = rows.iter().map(|r| r.timestamp_us).min().unwrap_or(0);
    for r in rows {
        let line = r.line;
        check_times(&r, s.speedup_ratio, first_us)?;
        if trace.carries_prompt(&r) {
            return Err(SynthesisError::Row {
                line,
                reason: "carries its own prompt text, whose length cannot be scaled".into(),
            });
        }
        if !r.hash_ids.is_empty() && r.block_size != block {
            return Err(SynthesisError::Row {
                line,
                reason: format!(
                    "has {}-token blocks; the written {format} trace can only say {block}",
                    r.block_size
                ),
            });
        }
        if r.output_tokens == 0 {
            // A failed BurstGPT row kept (`--burstgpt-failed send`): the written trace has no
            // way to say so, and reading it back would refuse the row.
            return Err(SynthesisError::Row {
                line,
                reason: "a failed row (0 output tokens, kept by --burstgpt-failed send): the \
                         synthesized trace cannot hold it; drop such rows with \
                         --burstgpt-failed skip (the default)"
                    .into(),
            });
        }
        // Refused before its blocks are built: a multiplier of 1e6 would otherwise ask for
        // millions of block ids per row.
        let input = scaled_input(&r, s, block, &shared);
        if input.capped > u64::from(length_limit) {
            return Err(SynthesisError::TooLong {
                line,
                tokens: input.capped,
                limit: length_limit,
            });
        }
        let (input, hash_ids, capped_in) = scale_prompt(&r, s, block, input, &mut ids);
        let output = s
            .max_osl
            .map_or(r.output_tokens, |m| r.output_tokens.min(m));
        report.capped += u64::from(capped_in || output < r.output_tokens);
        let written = Written {
            speedup: s.speedup_ratio,
            input,
            output,
            hash_ids: &hash_ids,
        };
        match &chats {
            Some(chats) => chats.write_row(out, &r, &written)?,
            None => write_row(out, &r, &written)?,
        }
        report.rows += 1;
    }
    report.blocks = ids.next;
    report.held_blocks = ids.prefix.len() as u64;
    out.flush()?;
    Ok(report)
}

/// Checks `r`'s times divided by `speedup` are what the written trace may hold: a timestamp
/// within the u64 µs a reader takes and within [`MAX_SPAN`] of the first request (`first_us`),
/// and a delay within [`MAX_SPAN`]. A tiny ratio made them infinite (written as `null`) or
/// years apart, and the file was written whole but could not be replayed.
fn check_times(r: &TraceRequest, speedup: f64, first_us: u64) -> Result<(), SynthesisError> {
    let max_span_us = MAX_SPAN.as_micros() as f64;
    let days = |us: f64| format!("{:.0} days", us / 86_400e6);
    let error = |field, reason| SynthesisError::Time {
        line: r.line,
        field,
        reason,
    };
    // Infinite too: a ratio of 1e-300.
    if r.timestamp_us as f64 / speedup > 1.8e19 {
        return Err(error(
            "timestamp",
            "past the largest a trace can hold (2^64 µs)".into(),
        ));
    }
    let after_first = (r.timestamp_us - first_us) as f64 / speedup;
    if after_first > max_span_us {
        return Err(error(
            "timestamp",
            format!(
                "{} after the trace's first request; a trace spans at most {}",
                days(after_first),
                days(max_span_us)
            ),
        ));
    }
    match r.delay_us().map(|d| d as f64 / speedup) {
        Some(d) if d > max_span_us => Err(error(
            "delay",
            format!("{}; a delay is at most {}", days(d), days(max_span_us)),
        )),
        _ => Ok(()),
    }
}

/// A row's scaled input: its source prefix (blocks), the scaled prefix (tokens), the length
/// the multipliers ask for and that length within `max_isl`.
#[derive(Debug, Clone, Copy)]
struct ScaledInput {
    prefix_blocks: u64,
    scaled_prefix: u64,
    wanted: u64,
    capped: u64,
}

/// The row's new input length, before any block is built; saturating, whatever the factors.
fn scaled_input(r: &TraceRequest, s: &Synthesis, block: u32, shared: &IdSet) -> ScaledInput {
    let bs = u64::from(block);
    let prefix_blocks = r
        .hash_ids
        .iter()
        .take_while(|&id| shared.contains(id))
        .count() as u64;
    let prefix = (prefix_blocks * bs).min(u64::from(r.input_tokens));
    let unique = u64::from(r.input_tokens) - prefix;
    // `as` saturates: a factor of 1e300 gives u64::MAX, and the sums below saturate too.
    let scaled_prefix = (prefix as f64 * s.prefix_len_multiplier).round() as u64;
    // A prefix followed by unique text stays whole blocks, so it stays shareable.
    let scaled_prefix = match unique {
        0 => scaled_prefix,
        _ => scaled_prefix.div_ceil(bs).saturating_mul(bs),
    };
    let scaled_unique = (unique as f64 * s.prompt_len_multiplier).round() as u64;
    let wanted = scaled_prefix.saturating_add(scaled_unique).max(1);
    ScaledInput {
        prefix_blocks,
        scaled_prefix,
        wanted,
        capped: s.max_isl.map_or(wanted, |m| wanted.min(u64::from(m))),
    }
}

/// The row's new input length and block ids (of `block` tokens), and whether the cap cut it.
/// `scaled` is within the length limit (so within u32).
fn scale_prompt(
    r: &TraceRequest,
    s: &Synthesis,
    block: u32,
    scaled: ScaledInput,
    ids: &mut BlockIds,
) -> (u32, Vec<u64>, bool) {
    let bs = u64::from(block);
    let ScaledInput {
        prefix_blocks,
        scaled_prefix,
        wanted,
        capped: input,
    } = scaled;
    if r.hash_ids.is_empty() {
        return (input as u32, Vec::new(), input < wanted);
    }
    // The copy of the prefix trees a row uses: per session when it has one, so a follow-up
    // turn, which holds its parent's blocks, stays on its conversation's copy and still hits
    // the cache; per row otherwise.
    let root = match s.prefix_root_multiplier {
        1 => 0,
        n => {
            let key = match r.session {
                Some(session) => splitmix64(session ^ 0x5e55_1017),
                None => splitmix64(u64::from(r.index)),
            };
            (splitmix64(s.seed ^ key) % u64::from(n)) as u32
        }
    };
    let source = r.hash_ids.to_vec();
    let blocks = input.div_ceil(bs);
    let new_prefix_blocks = scaled_prefix.div_ceil(bs);
    let mut out = Vec::with_capacity(blocks as usize);
    for pos in 0..blocks {
        let id = if pos < new_prefix_blocks && prefix_blocks > 0 {
            // Scaled block `pos` stands for source block `pos / multiplier`.
            let at = ((pos as f64 / s.prefix_len_multiplier) as u64).min(prefix_blocks - 1);
            ids.prefix(PrefixKey {
                root,
                source: source[at as usize],
                pos: pos as u32,
            })
        } else {
            ids.unique()
        };
        out.push(id);
    }
    (input as u32, out, input < wanted)
}

/// What a row becomes: its new lengths and block ids, and the speedup of its times.
struct Written<'a> {
    speedup: f64,
    input: u32,
    output: u32,
    hash_ids: &'a [u64],
}

/// Writes one Mooncake row.
fn write_row(out: &mut impl Write, r: &TraceRequest, w: &Written<'_>) -> std::io::Result<()> {
    let ms = |us: u64| us as f64 / 1e3 / w.speedup;
    let mut row = serde_json::json!({
        "timestamp": ms(r.timestamp_us),
        "input_length": w.input,
        "output_length": w.output,
    });
    if !w.hash_ids.is_empty() {
        row["hash_ids"] = serde_json::json!(w.hash_ids);
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

#[cfg(test)]
mod tests {
    use super::*;

    // A follow-up turn holds its parent's blocks: with several prefix roots it must land on
    // its conversation's copy, or its history no longer hits the cache. Rows without a
    // session are spread over the copies, one each.
    #[test]
    fn turns_of_one_session_share_a_prefix_root() {
        let s = Synthesis {
            prefix_root_multiplier: 8,
            seed: 3,
            ..Synthesis::default()
        };
        let turn = |index: u32, session: Option<u64>, blocks: u64| {
            TraceRequest::new(
                index,
                index + 1,
                0,
                session,
                index,
                (blocks * 16) as u32,
                4,
                (0..blocks).collect(),
                16,
            )
        };
        let prefix_ids = |r: &TraceRequest, ids: &mut BlockIds| {
            let scaled = ScaledInput {
                prefix_blocks: 2,
                scaled_prefix: 32,
                wanted: u64::from(r.input_tokens),
                capped: u64::from(r.input_tokens),
            };
            scale_prompt(r, &s, 16, scaled, ids).1[..2].to_vec()
        };
        let mut ids = BlockIds::default();
        for session in 0..20 {
            let first = prefix_ids(&turn(2 * session, Some(u64::from(session)), 2), &mut ids);
            let second = prefix_ids(
                &turn(2 * session + 1, Some(u64::from(session)), 3),
                &mut ids,
            );
            assert_eq!(first, second, "session {session}");
        }
        let spread: std::collections::HashSet<Vec<u64>> = (100..140)
            .map(|i| prefix_ids(&turn(i, None, 2), &mut ids))
            .collect();
        assert!(
            spread.len() > 1,
            "rows without a session use several copies"
        );
    }
}

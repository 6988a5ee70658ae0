//! Windowing, request limits and length transforms applied to a loaded trace.
//!
//! In order: the time window (`[first + start_offset, first + end_offset)` in trace time, by
//! when each request is sent at the earliest: its timestamp, or for a Mooncake turn timed by
//! its `delay`, its previous turn's send plus the delay, as `analyze-trace` counts it), the
//! shard (`--shard i/n`: every session lands on exactly one of `n` shards), the session rule (a later turn whose session's first turn was dropped is dropped too: it would
//! wait forever for a turn that is never sent), `max_requests`, `scale_lengths`, then the
//! `max_input_tokens` / `max_output_tokens` caps. Indices are reassigned 0-based.
//!
//! Scaling keeps the block structure so prompt synthesis still sees the trace's prefix reuse:
//! with `bs' = max(1, round(bs·F))` and `n` hash ids, `input' = round(input·F)` is clamped into
//! `((n-1)·bs', n·bs']`, so the ids are unchanged and the block rule still holds.

use std::collections::HashSet;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use canary_core::{splitmix64, RowRef, TraceRequest};
use serde::Serialize;

use super::{Trace, TraceError, DEFAULT_LENGTH_LIMIT};

/// Which part of a trace to replay, and how to transform lengths.
#[derive(Debug, Clone, PartialEq)]
pub struct Selection {
    /// Keep requests sent at or after this offset from the trace's first timestamp (a turn
    /// timed by a `delay` is sent, at the earliest, its delay after its previous turn).
    pub start_offset: Option<Duration>,
    /// Keep requests sent before this offset from the trace's first timestamp.
    pub end_offset: Option<Duration>,
    /// Keep at most this many requests (the earliest, after the window).
    pub max_requests: Option<usize>,
    /// Multiply input and output lengths by this factor (> 0), keeping the block structure.
    pub scale_lengths: Option<f64>,
    /// Cap input lengths (after scaling), truncating `hash_ids` to match.
    pub max_input_tokens: Option<u32>,
    /// Cap output lengths (after scaling).
    pub max_output_tokens: Option<u32>,
    /// Keep only this shard's part of the trace.
    pub shard: Option<Shard>,
    /// No length may end above this many tokens after scaling and caps: a scale factor that
    /// takes one there is refused (default [`DEFAULT_LENGTH_LIMIT`]).
    pub length_limit: u32,
}

impl Default for Selection {
    fn default() -> Self {
        Selection {
            start_offset: None,
            end_offset: None,
            max_requests: None,
            scale_lengths: None,
            max_input_tokens: None,
            max_output_tokens: None,
            shard: None,
            length_limit: DEFAULT_LENGTH_LIMIT,
        }
    }
}

/// One of `count` disjoint parts of a trace, for one big replay spread over several machines.
/// Deterministic by session: every turn of a session lands on the same shard, on every machine
/// and every run; requests without a session are split by their trace line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// 0-based, below `count`.
    pub index: u32,
    /// At least 1.
    pub count: u32,
}

impl Shard {
    /// Whether `r` belongs to this shard.
    pub fn owns(&self, r: &TraceRequest) -> bool {
        self.owns_row(r.session, r.line)
    }

    /// Whether the row `r` belongs to this shard (as [`Shard::owns`]).
    pub fn owns_ref(&self, r: RowRef<'_>) -> bool {
        self.owns_row(r.session(), r.line())
    }

    /// Whether the row at trace `line` of `session` belongs to this shard (what a record
    /// keeps of its row is enough: `canaryd merge` checks each shard's records with it).
    pub fn owns_row(&self, session: Option<u64>, line: u32) -> bool {
        let key = match session {
            Some(s) => s,
            None => u64::from(line) | 1 << 63,
        };
        splitmix64(key) % u64::from(self.count) == u64::from(self.index)
    }
}

impl FromStr for Shard {
    type Err = String;

    /// `i/n`, with `0 <= i < n`.
    fn from_str(s: &str) -> Result<Shard, String> {
        let (i, n) = s
            .split_once('/')
            .ok_or_else(|| format!("expected `i/n` (e.g. `0/4`), found `{s}`"))?;
        let num = |x: &str, what: &str| {
            x.trim()
                .parse::<u32>()
                .map_err(|_| format!("expected `i/n` with whole numbers, found {what} `{x}`"))
        };
        let (index, count) = (num(i, "index")?, num(n, "count")?);
        if count == 0 || index >= count {
            return Err(format!(
                "expected 0 <= i < n in `i/n`, found {index}/{count}"
            ));
        }
        Ok(Shard { index, count })
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// What [`Trace::select`] dropped or changed.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SelectionReport {
    /// Requests in the trace before selection.
    pub requests_in: u64,
    /// Requests kept.
    pub requests_out: u64,
    /// Requests outside `[start_offset, end_offset)` (by their earliest send: a turn timed by
    /// a `delay` at its previous turn's send plus the delay).
    pub dropped_outside_window: u64,
    /// Requests that belong to other shards.
    pub dropped_other_shards: u64,
    /// Later turns dropped because their session's first turn was dropped.
    pub dropped_orphan_turns: u64,
    /// Requests dropped by `max_requests`.
    pub dropped_over_limit: u64,
    /// Requests whose input was capped by `max_input_tokens`.
    pub input_capped: u64,
    /// Requests whose output was capped by `max_output_tokens`.
    pub output_capped: u64,
    /// With `scale_lengths`: the input tokens kept over those of the trace (before the
    /// caps), which can differ from the factor asked for. Inputs scale with their blocks
    /// (each row keeps its block count), so a block size the factor rounds (16 × 0.05 = 0.8,
    /// taken as 1) scales them by another factor than outputs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_scale_effective: Option<f64>,
    /// With `scale_lengths`: the output tokens kept over those of the trace (before the caps;
    /// failed BurstGPT rows kept with 0 output tokens left out). Above the factor when
    /// outputs round to 0 and are raised to 1 ([`SelectionReport::outputs_raised_to_1`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_scale_effective: Option<f64>,
    /// With `scale_lengths`: requests whose output rounded to 0 tokens and was raised to 1
    /// (a single-token request: no inter-token latency). Exact count.
    #[serde(default)]
    pub outputs_raised_to_1: u64,
    /// With `scale_lengths`: requests whose scaled input was moved to keep a row's block
    /// count (raised to 1 token, or into `((n-1)·bs', n·bs']` for `n` hash ids). Exact count.
    #[serde(default)]
    pub inputs_clamped: u64,
    /// The target's context length (tokens), read from the server before the run; absent
    /// when it was not known then (the counts below are absent too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_limit: Option<u64>,
    /// Where [`SelectionReport::context_limit`] was read (`/v1/models max_model_len`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_limit_source: Option<String>,
    /// Requests whose planned prompt tokens plus the `max_tokens` they carry exceed
    /// [`SelectionReport::context_limit`]: the plan's token counts, an estimate of the
    /// server's tokenizer (exact count of the plan's requests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub over_context: Option<u64>,
    /// Of [`SelectionReport::over_context`], those whose planned prompt alone exceeds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_over_context: Option<u64>,
    /// What the selection could not do as asked, in words (`max_requests` above what the
    /// window holds: fewer requests are replayed than asked for); absent when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl Trace {
    /// Applies a [`Selection`] and reassigns `index`. Errors on an invalid parameter (a scale
    /// factor that is not a positive finite number or that takes a length over the limit, a
    /// zero cap, an empty window) or when nothing is left, except for a shard that owns none
    /// of a window that holds requests: its part is empty, and it is kept (empty).
    pub fn select(mut self, sel: &Selection) -> Result<(Trace, SelectionReport), TraceError> {
        let invalid = |field, reason: String| TraceError::InvalidSelection {
            path: self.path.clone(),
            field,
            reason,
        };
        if let Some(f) = sel.scale_lengths {
            if !(f.is_finite() && f > 0.0) {
                return Err(invalid(
                    "scale_lengths",
                    format!("expected a positive finite factor, found {f}"),
                ));
            }
        }
        if sel.max_input_tokens == Some(0) {
            return Err(invalid("max_input_tokens", "expected at least 1".into()));
        }
        if sel.max_output_tokens == Some(0) {
            return Err(invalid("max_output_tokens", "expected at least 1".into()));
        }
        if let (Some(s), Some(e)) = (sel.start_offset, sel.end_offset) {
            if e <= s {
                return Err(invalid(
                    "end_offset",
                    format!("expected it after start_offset ({s:?}), found {e:?}"),
                ));
            }
        }

        let rows = &mut self.requests;
        let mut report = SelectionReport {
            requests_in: rows.len() as u64,
            ..Default::default()
        };
        let first = match rows.is_empty() {
            true => 0,
            false => rows.row(0).timestamp_us(),
        };
        let to_us =
            |d: Duration| first.saturating_add(u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
        let start = sel.start_offset.map_or(0, to_us);
        let end = sel.end_offset.map_or(u64::MAX, to_us);
        let limit = sel.max_requests.unwrap_or(usize::MAX);
        // Sessions whose first turn is kept. Requests are in timestamp order and a session's
        // first turn comes no later than its other turns.
        let mut open_sessions = HashSet::new();
        let mut kept = 0usize;
        // The window holds the requests sent in it: a later turn timed by its `delay` has its
        // previous turn's timestamp, and was kept with that turn, however late its delay sent
        // it (`--end-offset 60s` sent turns at 642 s).
        let (sends, _) = super::analyze::earliest_sends(rows);
        if sel.shard.is_some() {
            self.origin_us = sends
                .iter()
                .copied()
                .filter(|&t| t >= start && t < end)
                .min();
        }
        let mut sends = sends.into_iter();
        rows.retain(|r| {
            let t = sends.next().expect("one send per row");
            if t < start || t >= end {
                report.dropped_outside_window += 1;
                return false;
            }
            if sel.shard.is_some_and(|sh| !sh.owns_ref(r)) {
                report.dropped_other_shards += 1;
                return false;
            }
            if kept >= limit {
                report.dropped_over_limit += 1;
                return false;
            }
            if let Some(s) = r.session_number() {
                if r.is_first_turn() {
                    open_sessions.insert(s);
                } else if !open_sessions.contains(&s) {
                    report.dropped_orphan_turns += 1;
                    return false;
                }
            }
            kept += 1;
            true
        });
        drop(open_sessions);
        // A shard may own none of a window that holds requests (3 rows over 4 shards): its
        // empty part is still its part, and `canaryd merge` needs its run to count every
        // shard. A window that holds nothing is empty for every shard: an error as ever.
        let window_held = report.requests_in > report.dropped_outside_window;
        if rows.is_empty() && !(sel.shard.is_some() && window_held) {
            return Err(TraceError::EmptySelection {
                path: self.path.clone(),
                reason: describe_drops(&report),
            });
        }

        // Scaling scales the blocks: the trace's block size, the same for every row.
        let block_size = rows.block_size().unwrap_or_default();
        let scaled_block = sel.scale_lengths.map(|f| scaled_block_size(block_size, f));
        if let Some(bs) = scaled_block {
            rows.set_block_size(bs);
        }
        let transforms = sel.scale_lengths.is_some()
            || sel.max_input_tokens.is_some()
            || sel.max_output_tokens.is_some();
        let mut over = None;
        let (mut inputs_before, mut inputs_scaled) = (0u64, 0u64);
        let (mut outputs_before, mut outputs_scaled) = (0u64, 0u64);
        for i in 0..rows.len() {
            let r = rows.row(i);
            let before = (r.input_tokens(), r.output_tokens());
            let mut now = before;
            if transforms {
                rows.update(i, |r| {
                    if let (Some(f), Some(bs)) = (sel.scale_lengths, scaled_block) {
                        let moved = scale(r, f, bs);
                        inputs_before += u64::from(before.0);
                        inputs_scaled += u64::from(r.input_tokens);
                        outputs_before += u64::from(before.1);
                        outputs_scaled += u64::from(r.output_tokens);
                        report.inputs_clamped += u64::from(moved.input);
                        report.outputs_raised_to_1 += u64::from(moved.output);
                    }
                    if let Some(cap) = sel.max_input_tokens {
                        if r.input_tokens > cap {
                            r.input_tokens = cap;
                            r.hash_ids.truncate(cap.div_ceil(r.block_size) as usize);
                            report.input_capped += 1;
                        }
                    }
                    if let Some(cap) = sel.max_output_tokens {
                        if r.output_tokens > cap {
                            r.output_tokens = cap;
                            report.output_capped += 1;
                        }
                    }
                    now = (r.input_tokens, r.output_tokens);
                })
                .expect("the block size is the trace's");
            }
            over = [("input", before.0, now.0), ("output", before.1, now.1)]
                .into_iter()
                .find(|&(_, _, now)| now > sel.length_limit)
                .map(|(what, was, now)| (what, was, now, rows.row(i).line()));
            if over.is_some() {
                break;
            }
        }
        if let Some((what, was, now, line)) = over {
            let limit = sel.length_limit;
            return Err(match sel.scale_lengths {
                Some(f) => invalid(
                    "scale_lengths",
                    format!(
                        "scaling by {} takes the {what} of line {line} from {was} tokens to {}, \
                         over the length limit of {limit} (length_limit)",
                        Number(f),
                        Number(was as f64 * f),
                    ),
                ),
                None => invalid(
                    "length_limit",
                    format!("line {line} asks for {now} {what} tokens, over the limit of {limit}"),
                ),
            });
        }
        // What was dropped gives its memory back (a window of a big trace would otherwise
        // keep the whole trace's pages for the run).
        rows.shrink_to_fit();
        if inputs_before > 0 {
            report.input_scale_effective = Some(inputs_scaled as f64 / inputs_before as f64);
        }
        if outputs_before > 0 {
            report.output_scale_effective = Some(outputs_scaled as f64 / outputs_before as f64);
        }
        if let Some(f) = sel.scale_lengths {
            if let Some(note) = scale_note(f, &report, rows.len()) {
                report.notes.push(note);
            }
        }
        report.requests_out = rows.len() as u64;
        self.report.requests = report.requests_out;
        // Fewer than asked is not an error (the count is a cap), but it is said: a
        // `--request-count 100` over a 5-row trace sent 5 without a word.
        if let Some(n) = sel.max_requests.filter(|&n| n > rows.len()) {
            report.notes.push(format!(
                "max_requests {n}: the selected window holds only {} requests; all of them are \
                 replayed",
                rows.len()
            ));
        }
        Ok((self, report))
    }
}

impl SelectionReport {
    /// Counts the requests that ask for more tokens than the target's context of `limit`
    /// tokens (read from `source`): `requests` gives each one's planned prompt tokens and the
    /// `max_tokens` it carries (`None`: none sent, the server picks); `refused` says, for a
    /// prompt and its `max_tokens`, whether the server refuses it and whether by its prompt
    /// alone (the server's own rule: vLLM refuses prompt + max_tokens > limit, and a prompt
    /// leaving no room for one output token; SGLang a total at the limit too). Returns the
    /// warning to print when any is over.
    pub fn count_over_context(
        &mut self,
        limit: u64,
        source: &str,
        requests: impl Iterator<Item = (u32, Option<u32>)>,
        refused: impl Fn(u64, Option<u64>) -> (bool, bool),
    ) -> Option<String> {
        self.count_over_context_times(limit, source, requests.map(|r| (r, 1)), refused)
    }

    /// [`SelectionReport::count_over_context`] of requests given with how many times each
    /// is planned (`((prompt, max_tokens), times)`): a billion alike requests are judged
    /// once.
    pub fn count_over_context_times(
        &mut self,
        limit: u64,
        source: &str,
        requests: impl Iterator<Item = ((u32, Option<u32>), u64)>,
        refused: impl Fn(u64, Option<u64>) -> (bool, bool),
    ) -> Option<String> {
        let (mut total, mut over, mut prompt_over) = (0u64, 0u64, 0u64);
        for ((prompt, max_tokens), times) in requests {
            total += times;
            let (is_over, alone) = refused(u64::from(prompt), max_tokens.map(u64::from));
            if is_over {
                over += times;
                if alone {
                    prompt_over += times;
                }
            }
        }
        self.context_limit = Some(limit);
        self.context_limit_source = Some(source.to_string());
        self.over_context = Some(over);
        self.prompt_over_context = Some(prompt_over);
        (over > 0).then(|| {
            format!(
                "{over} of {total} requests ask for more tokens than the target's context \
                 ({limit}, from {source}): {prompt_over} by their prompt alone; the server will \
                 likely refuse them (HTTP 400). Counts are the plan's (prompt tokens + \
                 max_tokens as planned: an estimate of the server's tokenizer); they are sent \
                 as planned"
            )
        })
    }
}

fn describe_drops(r: &SelectionReport) -> String {
    format!(
        "of {} requests, {} outside the window, {} in other shards, {} orphan turns, {} over the limit",
        r.requests_in,
        r.dropped_outside_window,
        r.dropped_other_shards,
        r.dropped_orphan_turns,
        r.dropped_over_limit
    )
}

/// A number as a person would write it in a message: `1e30` and `1e-12`, not thirty digits.
#[derive(Debug, Clone, Copy)]
pub struct Number(pub f64);

impl fmt::Display for Number {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let x = self.0;
        if x != 0.0 && !(1e-4..1e9).contains(&x.abs()) {
            write!(f, "{x:e}")
        } else if x.fract() == 0.0 {
            write!(f, "{x:.0}")
        } else {
            write!(f, "{x}")
        }
    }
}

/// Rounds a non-negative product into `u32`, saturating.
fn scaled(x: u32, f: f64) -> u32 {
    let y = (x as f64 * f).round();
    if y >= u32::MAX as f64 {
        u32::MAX
    } else {
        y as u32
    }
}

/// The block size of a trace whose lengths are scaled by `f`.
fn scaled_block_size(block_size: u32, f: f64) -> u32 {
    scaled(block_size, f).max(1)
}

/// What [`scale`] moved off `round(length·F)`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Moved {
    /// The input, raised to 1 or into its blocks' range.
    input: bool,
    /// The output, rounded to 0 and raised to 1.
    output: bool,
}

/// Scales one request's lengths by `f`, keeping its hash ids and the block rule; `bs` is its
/// block size scaled ([`scaled_block_size`]). Says which lengths it moved off the product.
fn scale(r: &mut TraceRequest, f: f64, bs: u32) -> Moved {
    let n = r.hash_ids.len() as u64;
    let product = scaled(r.input_tokens, f) as u64;
    let mut input = product.max(1);
    if n > 0 {
        input = input.clamp((n - 1) * bs as u64 + 1, n * bs as u64);
    }
    r.input_tokens = u32::try_from(input).unwrap_or(u32::MAX);
    r.block_size = bs;
    let mut moved = Moved {
        input: input != product,
        output: false,
    };
    // A failed BurstGPT row kept with 0 output tokens stays at 0.
    if r.output_tokens > 0 {
        let out = scaled(r.output_tokens, f);
        moved.output = out == 0;
        r.output_tokens = out.max(1);
    }
    moved
}

/// What `--scale-lengths F` did other than multiply by F, in words, when the lengths kept
/// differ from F by more than 3 % or any output was raised to 1 token; `None` otherwise.
fn scale_note(f: f64, r: &SelectionReport, rows: usize) -> Option<String> {
    let off = |e: Option<f64>| e.is_some_and(|e| (e / f - 1.0).abs() > 0.03);
    if r.outputs_raised_to_1 == 0 && !off(r.output_scale_effective) && !off(r.input_scale_effective)
    {
        return None;
    }
    let eff = |e: Option<f64>| e.map_or("-".to_string(), |e| format!("{:.3}", e));
    let mut note = format!(
        "scale_lengths {}: in effect outputs were scaled by {} and inputs by {} (tokens kept \
         over the trace's, exact); {} of {rows} outputs rounded to 0 tokens and were raised to \
         1 (single-token requests, no inter-token latency); {} inputs were raised to 1 token \
         or into their blocks' range",
        Number(f),
        eff(r.output_scale_effective),
        eff(r.input_scale_effective),
        r.outputs_raised_to_1,
        r.inputs_clamped,
    );
    if r.outputs_raised_to_1 > 0 && r.outputs_raised_to_1 as usize == rows {
        note.push_str(&format!(
            "; every output is 1 token: is the factor {} meant?",
            Number(f)
        ));
    }
    Some(note)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(input: u32, blocks: usize, block_size: u32) -> TraceRequest {
        TraceRequest::new(
            0,
            1,
            0,
            None,
            0,
            input,
            1,
            (0..blocks as u64).collect(),
            block_size,
        )
    }

    #[test]
    fn scaling_keeps_the_block_rule_everywhere() {
        for bs in [16, 512] {
            for n in 1..6usize {
                let lo = (n as u32 - 1) * bs + 1;
                for input in [lo, lo + 1, (lo + n as u32 * bs) / 2, n as u32 * bs] {
                    for f in [0.001, 0.01, 0.3, 0.5, 0.77, 1.0, 1.5, 3.0, 10.0] {
                        let mut r = request(input, n, bs);
                        let _ = scale(&mut r, f, scaled_block_size(bs, f));
                        let (b, k) = (r.block_size as u64, n as u64);
                        assert!(b >= 1 && r.hash_ids.len() == n, "bs {bs} n {n} f {f}");
                        let i = r.input_tokens as u64;
                        assert!(
                            (k - 1) * b < i && i <= k * b,
                            "bs {bs} n {n} input {input} f {f}: {i}"
                        );
                        assert!(r.output_tokens >= 1);
                    }
                }
            }
        }
    }

    #[test]
    fn shard_parses_and_rejects_with_a_reason() {
        assert_eq!("1/4".parse(), Ok(Shard { index: 1, count: 4 }));
        assert_eq!("1/4".parse::<Shard>().unwrap().to_string(), "1/4");
        for bad in ["4/4", "0/0", "1", "a/2", "1/-2"] {
            assert!(bad.parse::<Shard>().is_err(), "{bad}");
        }
    }

    #[test]
    fn every_session_lands_on_exactly_one_shard() {
        let mut r = request(10, 1, 16);
        for n in [1u32, 2, 3, 7] {
            for session in 0..500u64 {
                r.session = Some(session);
                for turn in 0..3 {
                    r.turn = turn;
                    r.line = session as u32 * 3 + turn + 1;
                    let owners: Vec<u32> = (0..n)
                        .filter(|&i| Shard { index: i, count: n }.owns(&r))
                        .collect();
                    assert_eq!(
                        owners.len(),
                        1,
                        "session {session} in {n} shards: {owners:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn numbers_read_as_written() {
        let s = |x: f64| Number(x).to_string();
        assert_eq!(
            [s(1e30), s(1e-12), s(0.125), s(512.0), s(2.5e9), s(0.0)],
            ["1e30", "1e-12", "0.125", "512", "2.5e9", "0"]
        );
    }

    #[test]
    fn scaling_saturates() {
        let mut r = request(u32::MAX, 0, 512);
        let _ = scale(&mut r, 1e9, scaled_block_size(512, 1e9));
        assert_eq!(r.input_tokens, u32::MAX);
    }

    /// The counts follow the rule given (here vLLM's: prompt + max_tokens > limit, and a
    /// prompt leaving no room for one output token; the rule itself is telemetry's
    /// `FitRule`, tested there).
    #[test]
    fn over_context_follows_the_rule_given() {
        let vllm = |p: u64, m: Option<u64>| {
            let alone = p.saturating_add(1) > 100;
            (
                alone || p.saturating_add(m.unwrap_or(1).max(1)) > 100,
                alone,
            )
        };
        let mut r = SelectionReport::default();
        let requests = [
            (90, Some(10)),             // exactly 100: fits
            (90, Some(11)),             // 101: over
            (101, Some(1)),             // over by its prompt alone
            (100, None),                // no max_tokens: no room for one output token
            (99, None),                 // room for one: fits
            (u32::MAX, Some(u32::MAX)), // no overflow
        ];
        let w = r.count_over_context(100, "/v1/models max_model_len", requests.into_iter(), vllm);
        assert_eq!((r.over_context, r.prompt_over_context), (Some(4), Some(3)));
        assert_eq!(r.context_limit, Some(100));
        let w = w.unwrap();
        assert!(w.starts_with("4 of 6 requests ask for more tokens than the target's context (100, from /v1/models max_model_len): 3 by their prompt alone"), "{w}");
        let mut r = SelectionReport::default();
        assert_eq!(
            r.count_over_context(100, "x", [(90, Some(10))].into_iter(), vllm),
            None
        );
        assert_eq!(r.over_context, Some(0));
        // A billion alike requests, judged once (the pre-flight's synthetic plan): the
        // counts and the warning are the billion's.
        let mut r = SelectionReport::default();
        let calls = std::cell::Cell::new(0u32);
        let counted = |p, m| {
            calls.set(calls.get() + 1);
            vllm(p, m)
        };
        let w = r.count_over_context_times(
            100,
            "x",
            [((95, Some(10)), 1_000_000_000)].into_iter(),
            counted,
        );
        assert_eq!(calls.get(), 1);
        assert_eq!(
            (r.over_context, r.prompt_over_context),
            (Some(1_000_000_000), Some(0))
        );
        assert!(w
            .unwrap()
            .starts_with("1000000000 of 1000000000 requests ask for more tokens"),);
    }
}

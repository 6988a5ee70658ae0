//! One request of a production trace, as the replay engine schedules it.

mod hash_ids;

pub use hash_ids::{HashIds, Iter as HashIdsIter};

use serde::Serialize;

/// One row of a trace after parsing and validation, independent of the source format.
///
/// Kept compact: a 12,000-row trace must fit in a few MB. Prompt text is built from
/// `hash_ids` just in time, never stored here (unless the trace itself carries text).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TraceRequest {
    /// Position in the replayed sequence, 0-based, after windowing and filtering.
    pub index: u32,
    /// 1-based line of the source file this row came from (for error messages and records).
    pub line: u32,
    /// Arrival time in the trace's own clock, microseconds from the trace origin.
    pub timestamp_us: u64,
    /// Session this row belongs to; rows of one session are replayed in turn order.
    pub session: Option<u64>,
    /// Turn number within the session, 0 for the first (or only) turn.
    pub turn: u32,
    /// Mooncake `delay`: microseconds after the previous turn of the session ends.
    pub delay_us: Option<u64>,
    /// Prompt length in tokens.
    pub input_tokens: u32,
    /// Requested output length in tokens.
    pub output_tokens: u32,
    /// Prefix-block ids; equal ids mean byte-identical prompt blocks. Empty: unique prompt.
    /// Stored as runs of consecutive ids, inline for real rows (see [`HashIds`]).
    pub hash_ids: HashIds,
    /// Tokens per hash-id block (512 Mooncake, 16 Bailian).
    pub block_size: u32,
    /// Prompt carried by the trace itself (Mooncake `text_input` / `messages`), if any.
    pub prompt: Option<Box<TracePrompt>>,
    /// Mooncake `extra`: fields merged into this request's body.
    pub extra: Option<Box<serde_json::Value>>,
}

/// Prompt content given verbatim by a trace row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum TracePrompt {
    /// `text_input`: a plain prompt string.
    Text(String),
    /// `messages`: a chat message array, kept as raw JSON.
    Messages(serde_json::Value),
}

impl TraceRequest {
    /// True for the first turn of a session (or a row with no session): open-loop dispatch.
    pub fn is_first_turn(&self) -> bool {
        self.turn == 0
    }
}

//! One request of a production trace, as the replay engine schedules it.

mod hash_ids;
mod rows;

pub use hash_ids::{HashIds, Iter as HashIdsIter};
pub use rows::{Iter as TraceRowsIter, RowRef, RowsError, TraceRows};

use serde::ser::{SerializeStruct, Serializer};
use serde::Serialize;

/// One row of a trace after parsing and validation, independent of the source format.
///
/// A whole trace is held as [`TraceRows`] (32 bytes a row and its ids in one arena); a
/// `TraceRequest` is built from a row when the row is read: when its session is dispatched,
/// or when a trace is analysed. Kept compact all the same (72 bytes, see the size test):
/// the fields most rows lack (`delay_us`, a verbatim prompt, `extra`) share one box, absent
/// for a row with none. Prompt text is built from `hash_ids` just in time, never stored here
/// (unless the trace itself carries text).
#[derive(Debug, Clone, PartialEq)]
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
    /// Prompt length in tokens.
    pub input_tokens: u32,
    /// Requested output length in tokens.
    pub output_tokens: u32,
    /// Prefix-block ids; equal ids mean byte-identical prompt blocks. Empty: unique prompt.
    /// Stored as runs of consecutive ids, inline for real rows (see [`HashIds`]).
    pub hash_ids: HashIds,
    /// Tokens per hash-id block (512 Mooncake, 16 Bailian).
    pub block_size: u32,
    /// `delay_us`, `prompt` and `extra`: `None` when the row has none of them.
    rare: Option<Box<RareFields>>,
}

/// The fields few rows have, boxed together out of [`TraceRequest`].
#[derive(Debug, Clone, PartialEq, Default)]
struct RareFields {
    delay_us: Option<u64>,
    prompt: Option<TracePrompt>,
    extra: Option<serde_json::Value>,
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
    /// A row with these fields and none of the rare ones (no delay, prompt or `extra`).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        index: u32,
        line: u32,
        timestamp_us: u64,
        session: Option<u64>,
        turn: u32,
        input_tokens: u32,
        output_tokens: u32,
        hash_ids: HashIds,
        block_size: u32,
    ) -> TraceRequest {
        TraceRequest {
            index,
            line,
            timestamp_us,
            session,
            turn,
            input_tokens,
            output_tokens,
            hash_ids,
            block_size,
            rare: None,
        }
    }

    /// Mooncake `delay`: microseconds after the previous turn of the session ends.
    pub fn delay_us(&self) -> Option<u64> {
        self.rare.as_ref().and_then(|r| r.delay_us)
    }

    /// Prompt carried by the trace itself (Mooncake `text_input` / `messages`), if any.
    pub fn prompt(&self) -> Option<&TracePrompt> {
        self.rare.as_ref().and_then(|r| r.prompt.as_ref())
    }

    /// Mooncake `extra`: fields merged into this request's body.
    pub fn extra(&self) -> Option<&serde_json::Value> {
        self.rare.as_ref().and_then(|r| r.extra.as_ref())
    }

    /// Sets (or clears) `delay_us`.
    pub fn set_delay_us(&mut self, delay_us: Option<u64>) {
        self.rare_mut(|r| r.delay_us = delay_us);
    }

    /// Sets (or clears) the verbatim prompt.
    pub fn set_prompt(&mut self, prompt: Option<TracePrompt>) {
        self.rare_mut(|r| r.prompt = prompt);
    }

    /// Sets (or clears) `extra`.
    pub fn set_extra(&mut self, extra: Option<serde_json::Value>) {
        self.rare_mut(|r| r.extra = extra);
    }

    /// Applies `f` to the rare fields, boxing them if needed and dropping the box once empty.
    fn rare_mut(&mut self, f: impl FnOnce(&mut RareFields)) {
        let mut rare = self.rare.take().unwrap_or_default();
        f(&mut rare);
        if *rare != RareFields::default() {
            self.rare = Some(rare);
        }
    }

    /// True for the first turn of a session (or a row with no session): open-loop dispatch.
    pub fn is_first_turn(&self) -> bool {
        self.turn == 0
    }
}

/// The same fields, in the same order, as when every field was stored in the row.
impl Serialize for TraceRequest {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("TraceRequest", 12)?;
        st.serialize_field("index", &self.index)?;
        st.serialize_field("line", &self.line)?;
        st.serialize_field("timestamp_us", &self.timestamp_us)?;
        st.serialize_field("session", &self.session)?;
        st.serialize_field("turn", &self.turn)?;
        st.serialize_field("delay_us", &self.delay_us())?;
        st.serialize_field("input_tokens", &self.input_tokens)?;
        st.serialize_field("output_tokens", &self.output_tokens)?;
        st.serialize_field("hash_ids", &self.hash_ids)?;
        st.serialize_field("block_size", &self.block_size)?;
        st.serialize_field("prompt", &self.prompt())?;
        st.serialize_field("extra", &self.extra())?;
        st.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row() -> TraceRequest {
        TraceRequest::new(
            3,
            4,
            5_000,
            Some(7),
            1,
            100,
            10,
            HashIds::from(vec![1, 2, 3]),
            512,
        )
    }

    #[test]
    fn a_row_is_72_bytes() {
        assert_eq!(std::mem::size_of::<TraceRequest>(), 72);
    }

    #[test]
    fn rare_fields_round_trip_and_an_emptied_box_is_dropped() {
        let mut r = row();
        assert_eq!((r.delay_us(), r.prompt(), r.extra()), (None, None, None));
        r.set_delay_us(Some(u64::MAX));
        r.set_prompt(Some(TracePrompt::Text("hi".into())));
        r.set_extra(Some(serde_json::json!({"k": 1})));
        assert_eq!(r.delay_us(), Some(u64::MAX));
        assert_eq!(r.prompt(), Some(&TracePrompt::Text("hi".into())));
        assert_eq!(r.extra(), Some(&serde_json::json!({"k": 1})));
        r.set_delay_us(None);
        assert_eq!(r.prompt(), Some(&TracePrompt::Text("hi".into())));
        r.set_prompt(None);
        r.set_extra(None);
        assert!(r.rare.is_none());
        assert_eq!(r, row());
    }

    #[test]
    fn serializes_every_field_as_before() {
        let mut r = row();
        r.set_delay_us(Some(9));
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"index": 3, "line": 4, "timestamp_us": 5000, "session": 7,
                "turn": 1, "delay_us": 9, "input_tokens": 100, "output_tokens": 10,
                "hash_ids": [1, 2, 3], "block_size": 512, "prompt": null, "extra": null})
        );
    }
}

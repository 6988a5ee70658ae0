//! Reading a [`TraceRows`]' rows: one in place ([`RowRef`]), or each built whole ([`Iter`]).

use super::{Row, TraceRows, NONE};
use crate::trace::TraceRequest;

/// One row of a [`TraceRows`], read in place.
#[derive(Clone, Copy)]
pub struct RowRef<'a> {
    pub(super) rows: &'a TraceRows,
    pub(super) index: u32,
    pub(super) row: &'a Row,
}

impl RowRef<'_> {
    /// Position in the rows: the row's `index`.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// 1-based line of the source file.
    pub fn line(&self) -> u32 {
        self.row.line
    }

    /// Arrival time in the trace's own clock, in microseconds.
    pub fn timestamp_us(&self) -> u64 {
        self.row.timestamp_us
    }

    /// The session, as the trace names it.
    pub fn session(&self) -> Option<u64> {
        self.rows.sessions.id(self.row.session)
    }

    /// The session as a number, the same for every row of one session: numbers are dense
    /// (below [`TraceRows::session_numbers`]), so tables by session can be `Vec`s.
    pub fn session_number(&self) -> Option<u32> {
        (self.row.session != NONE).then_some(self.row.session)
    }

    /// Turn number within the session.
    pub fn turn(&self) -> u32 {
        self.row.turn
    }

    /// Prompt length in tokens.
    pub fn input_tokens(&self) -> u32 {
        self.row.input_tokens
    }

    /// Requested output length in tokens.
    pub fn output_tokens(&self) -> u32 {
        self.row.output_tokens
    }

    /// Mooncake `delay`, in microseconds.
    pub fn delay_us(&self) -> Option<u64> {
        self.rows.rare.get(&self.index)?.delay_us
    }

    /// True for the first turn of a session (or a row with no session).
    pub fn is_first_turn(&self) -> bool {
        self.row.turn == 0
    }

    /// The row, built whole.
    pub fn to_request(&self) -> TraceRequest {
        self.rows.request(self.index as usize)
    }
}

/// Rows built whole, in order (see [`TraceRows::iter`]).
#[derive(Clone)]
pub struct Iter<'a> {
    pub(super) rows: &'a TraceRows,
    pub(super) range: std::ops::Range<usize>,
}

impl Iterator for Iter<'_> {
    type Item = TraceRequest;

    fn next(&mut self) -> Option<TraceRequest> {
        self.range.next().map(|i| self.rows.request(i))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.range.size_hint()
    }
}

impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<TraceRequest> {
        self.range.next_back().map(|i| self.rows.request(i))
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl<'a> IntoIterator for &'a TraceRows {
    type Item = TraceRequest;
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

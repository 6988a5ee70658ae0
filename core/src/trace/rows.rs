//! [`TraceRows`]: a whole trace's rows, packed to be held for a run of a million of them.
//!
//! A [`TraceRequest`] is 72 bytes and owns its hash ids, so 1M rows took 72 MB and more
//! (issue 21 asks for a 1M-row replay within 64 MB). Here a row is 32 bytes (see the size
//! test): the fields every row has, its session as a number into a table of the trace's own
//! session ids (Bailian's are raw chat ids, kept as they are), and where its hash ids start
//! in one arena that holds every row's ids in [`HashIds`]' encoding (self-delimiting, so no
//! length is stored). The block size is the trace's, stored once. The fields few rows have
//! (delay, a verbatim prompt, `extra`) are kept by position in a side map. A
//! [`TraceRequest`] is built from a row when it is read ([`TraceRows::get`],
//! [`TraceRows::iter`]); [`RowRef`] reads single fields without building one.

mod sessions;
mod view;

use super::hash_ids::{encoded_len, HashIds};
use super::{RareFields, TraceRequest};
use sessions::Sessions;
use std::collections::BTreeMap;
use std::fmt;
pub use view::{Iter, RowRef};

/// No session, no ids: the value of `Row::session` or `Row::ids` that means none.
const NONE: u32 = u32::MAX;

/// One row as held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Row {
    timestamp_us: u64,
    line: u32,
    /// Number in `TraceRows::sessions`; [`NONE`]: no session.
    session: u32,
    turn: u32,
    input_tokens: u32,
    output_tokens: u32,
    /// Where the row's ids start in `TraceRows::ids`; [`NONE`]: no ids.
    ids: u32,
}

const _: () = assert!(std::mem::size_of::<Row>() == 32);

/// Why a row could not be added to (or changed in) a [`TraceRows`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RowsError {
    /// Every row of a trace has the trace's block size.
    #[error("a row of {found}-token blocks in a trace of {expected}-token blocks")]
    BlockSize {
        /// The trace's.
        expected: u32,
        /// The row's.
        found: u32,
    },
    /// Positions are `u32` (a [`TraceRequest`]'s `index`).
    #[error("more than {} rows", u32::MAX - 1)]
    TooManyRows,
    /// Arena offsets are `u32`.
    #[error("the rows' hash ids take more than 4 GiB")]
    TooManyIds,
    /// Session numbers are `u32`.
    #[error("more than {} sessions", u32::MAX - 1)]
    TooManySessions,
}

/// A trace's rows in order, packed (see the module docs). Position `i` is the `index` of the
/// row read there.
#[derive(Clone, Default)]
pub struct TraceRows {
    rows: Vec<Row>,
    /// Every row's hash ids, encoded, one after another.
    ids: Vec<u8>,
    /// Bytes of `ids` no row points at any more (rows dropped, ids shortened).
    dead: usize,
    sessions: Sessions,
    /// The delay, prompt and `extra` of the rows that have any, by position.
    rare: BTreeMap<u32, RareFields>,
    /// The trace's; `None` until a row is added.
    block_size: Option<u32>,
}

impl TraceRows {
    /// No rows; the first row added sets the block size.
    pub fn new() -> TraceRows {
        TraceRows::default()
    }

    /// Adds `req` at the end (its `index` is ignored: a row's index is its position).
    pub fn push(&mut self, req: TraceRequest) -> Result<(), RowsError> {
        let pos = u32::try_from(self.rows.len())
            .ok()
            .filter(|&p| p != NONE)
            .ok_or(RowsError::TooManyRows)?;
        let expected = *self.block_size.get_or_insert(req.block_size);
        if req.block_size != expected {
            return Err(RowsError::BlockSize {
                expected,
                found: req.block_size,
            });
        }
        let row = self.pack(&req, NONE)?;
        self.rows.push(row);
        if let Some(rare) = req.rare {
            self.rare.insert(pos, *rare);
        }
        Ok(())
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Tokens per hash-id block, the same for every row; `None` with no row yet.
    pub fn block_size(&self) -> Option<u32> {
        self.block_size
    }

    /// Sets every row's block size (lengths scaled by a factor scale the blocks too).
    pub fn set_block_size(&mut self, block_size: u32) {
        self.block_size = Some(block_size);
    }

    /// The row at `i`, built whole.
    pub fn get(&self, i: usize) -> Option<TraceRequest> {
        (i < self.rows.len()).then(|| self.request(i))
    }

    /// The last row, built whole.
    pub fn last(&self) -> Option<TraceRequest> {
        self.len().checked_sub(1).map(|i| self.request(i))
    }

    /// The row at `i`, read in place. Panics when out of range, as slice indexing does.
    pub fn row(&self, i: usize) -> RowRef<'_> {
        RowRef {
            rows: self,
            index: i as u32,
            row: &self.rows[i],
        }
    }

    /// Every row, built whole, in order.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            rows: self,
            range: 0..self.rows.len(),
        }
    }

    /// Every row, built whole, in a `Vec`.
    pub fn to_vec(&self) -> Vec<TraceRequest> {
        self.iter().collect()
    }

    /// Changes the row at `i`: `f` is given it whole, and what it leaves is stored back (its
    /// `index` ignored). Its block size must stay the trace's ([`TraceRows::set_block_size`]
    /// changes it for every row). Panics when `i` is out of range.
    pub fn update(&mut self, i: usize, f: impl FnOnce(&mut TraceRequest)) -> Result<(), RowsError> {
        let mut req = self.request(i);
        f(&mut req);
        let expected = self.block_size.unwrap_or(req.block_size);
        if req.block_size != expected {
            return Err(RowsError::BlockSize {
                expected,
                found: req.block_size,
            });
        }
        let row = self.pack(&req, self.rows[i].ids)?;
        self.rows[i] = row;
        match req.rare {
            Some(rare) => self.rare.insert(i as u32, *rare),
            None => self.rare.remove(&(i as u32)),
        };
        Ok(())
    }

    /// Keeps the rows `keep` says yes to, in order (each is asked once, in order).
    pub fn retain(&mut self, mut keep: impl FnMut(RowRef<'_>) -> bool) {
        let mut kept = 0;
        let mut rare = BTreeMap::new();
        for i in 0..self.rows.len() {
            if keep(self.row(i)) {
                if let Some(r) = self.rare.remove(&(i as u32)) {
                    rare.insert(kept as u32, r);
                }
                self.rows[kept] = self.rows[i];
                kept += 1;
            } else {
                self.dead += self.ids_len(&self.rows[i]);
            }
        }
        self.rows.truncate(kept);
        self.rare = rare;
    }

    /// Keeps the first `n` rows.
    pub fn truncate(&mut self, n: usize) {
        if n < self.rows.len() {
            self.retain(|r| (r.index as usize) < n);
        }
    }

    /// Sorts the rows by `key`, stably (equal keys keep their order); each row keeps its
    /// fields, and its index becomes its new position. Costs nothing when already sorted
    /// (a trace file in time order); otherwise 4 bytes a row while it sorts.
    pub fn sort_by_key<K: Ord>(&mut self, mut key: impl FnMut(RowRef<'_>) -> K) {
        let n = self.rows.len();
        if (0..n).map(|i| key(self.row(i))).is_sorted() {
            return;
        }
        let mut order: Vec<u32> = (0..n as u32).collect();
        order.sort_by_key(|&i| key(self.row(i as usize)));
        if !self.rare.is_empty() {
            let mut rare = BTreeMap::new();
            for (new, old) in order.iter().enumerate() {
                if let Some(r) = self.rare.remove(old) {
                    rare.insert(new as u32, r);
                }
            }
            self.rare = rare;
        }
        permute(&mut self.rows, order);
    }

    /// Gives back what rows dropped or shortened left unused (the arena is copied when more
    /// than half of it is), and the session index only adding rows needs.
    pub fn shrink_to_fit(&mut self) {
        if self.dead > self.ids.len() / 2 {
            let mut ids = Vec::with_capacity(self.ids.len() - self.dead);
            for row in &mut self.rows {
                if row.ids != NONE {
                    let at = row.ids as usize;
                    let len = encoded_len(&self.ids[at..]);
                    row.ids = ids.len() as u32;
                    ids.extend_from_slice(&self.ids[at..at + len]);
                }
            }
            self.ids = ids;
            self.dead = 0;
        }
        self.rows.shrink_to_fit();
        self.ids.shrink_to_fit();
        self.sessions.shrink_to_fit();
    }

    /// Bytes held on the heap, capacity included (the side map of rare fields estimated at
    /// its entries' sizes): for memory accounting.
    pub fn heap_bytes(&self) -> usize {
        self.rows.capacity() * std::mem::size_of::<Row>()
            + self.ids.capacity()
            + self.sessions.heap_bytes()
            + self.rare.len() * std::mem::size_of::<(u32, RareFields)>()
    }

    /// Builds the row at `i` (in range).
    fn request(&self, i: usize) -> TraceRequest {
        let r = &self.rows[i];
        TraceRequest {
            index: i as u32,
            line: r.line,
            timestamp_us: r.timestamp_us,
            session: self.sessions.id(r.session),
            turn: r.turn,
            input_tokens: r.input_tokens,
            output_tokens: r.output_tokens,
            hash_ids: match r.ids {
                NONE => HashIds::new(),
                at => {
                    let bytes = &self.ids[at as usize..];
                    HashIds::from_encoded(&bytes[..encoded_len(bytes)])
                }
            },
            block_size: self.block_size.unwrap_or_default(),
            rare: self.rare.get(&(i as u32)).cloned().map(Box::new),
        }
    }

    /// `req` as a row; its ids overwrite those at `old` when they fit there.
    fn pack(&mut self, req: &TraceRequest, old: u32) -> Result<Row, RowsError> {
        let session = match req.session {
            Some(id) => self.sessions.number(id)?,
            None => NONE,
        };
        Ok(Row {
            timestamp_us: req.timestamp_us,
            line: req.line,
            session,
            turn: req.turn,
            input_tokens: req.input_tokens,
            output_tokens: req.output_tokens,
            ids: self.store_ids(&req.hash_ids, old)?,
        })
    }

    /// Stores `ids`, where `old` (a row's previous ids) was when they fit there, otherwise at
    /// the end of the arena; returns where.
    fn store_ids(&mut self, ids: &HashIds, old: u32) -> Result<u32, RowsError> {
        let enc = ids.bytes();
        let old_len = match old {
            NONE => 0,
            at => encoded_len(&self.ids[at as usize..]),
        };
        if enc.is_empty() {
            self.dead += old_len;
            return Ok(NONE);
        }
        if enc.len() <= old_len {
            let at = old as usize;
            self.ids[at..at + enc.len()].copy_from_slice(enc);
            self.dead += old_len - enc.len();
            return Ok(old);
        }
        let at = self.ids.len();
        if at + enc.len() > NONE as usize {
            return Err(RowsError::TooManyIds);
        }
        self.ids.extend_from_slice(enc);
        self.dead += old_len;
        Ok(at as u32)
    }

    /// Bytes of `row`'s ids in the arena.
    fn ids_len(&self, row: &Row) -> usize {
        match row.ids {
            NONE => 0,
            at => encoded_len(&self.ids[at as usize..]),
        }
    }
}

impl TraceRows {
    /// Session numbers given so far ([`RowRef::session_number`] is below it).
    pub fn session_numbers(&self) -> usize {
        self.sessions.len()
    }
}

/// Rows in order. Panics on a row whose block size differs from the first's, or past
/// 2^32 − 1 rows, sessions or 4 GiB of ids: for rows made in code; a loader uses
/// [`TraceRows::push`].
impl FromIterator<TraceRequest> for TraceRows {
    fn from_iter<I: IntoIterator<Item = TraceRequest>>(reqs: I) -> TraceRows {
        let mut rows = TraceRows::new();
        for r in reqs {
            if let Err(e) = rows.push(r) {
                panic!("cannot hold these rows: {e}");
            }
        }
        rows
    }
}

/// The rows of a `Vec`, in order; panics as [`FromIterator`] does.
impl From<Vec<TraceRequest>> for TraceRows {
    fn from(reqs: Vec<TraceRequest>) -> TraceRows {
        reqs.into_iter().collect()
    }
}

/// Equal when every row reads the same (however the arena is laid out).
impl PartialEq for TraceRows {
    fn eq(&self, other: &TraceRows) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl fmt::Debug for TraceRows {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// Puts `rows[order[j]]` at `j` for every `j`, in place (`order` is a permutation).
fn permute<T>(rows: &mut [T], mut order: Vec<u32>) {
    const DONE: u32 = u32::MAX;
    for start in 0..rows.len() {
        let mut j = start;
        while order[j] != DONE {
            let src = order[j] as usize;
            order[j] = DONE;
            if src == start {
                break;
            }
            rows.swap(j, src);
            j = src;
        }
    }
}

#[cfg(test)]
mod tests;

//! [`Sessions`]: a trace's session ids, numbered densely in order of first appearance, so a
//! row keeps 4 bytes for its session and the trace's own id (any `u64`: Bailian's are raw
//! chat ids) is kept once.

use super::{RowsError, NONE};
use std::collections::HashMap;

/// Session ids by number, and numbers by id while rows are added.
#[derive(Debug, Clone, Default)]
pub(super) struct Sessions {
    /// The id of each number.
    ids: Vec<u64>,
    /// The number of each id; empty while not `sparse` (no map needed) and after
    /// [`Sessions::shrink_to_fit`] (made again if a row is added later).
    numbers: HashMap<u64, u32>,
    /// True while every id is its own number (`ids` is `0, 1, 2, …`): the Mooncake and
    /// BurstGPT parsers number sessions that way, so their traces need no map at all.
    sparse: bool,
}

impl Sessions {
    /// The number of session `id`, given a new one the first time.
    pub(super) fn number(&mut self, id: u64) -> Result<u32, RowsError> {
        let next = self.ids.len() as u64;
        if !self.sparse {
            if id < next {
                return Ok(id as u32);
            }
            if id > next {
                self.sparse = true;
            }
        }
        if self.sparse {
            if self.numbers.len() < self.ids.len() {
                self.numbers = (0u32..).zip(&self.ids).map(|(n, &id)| (id, n)).collect();
            }
            if let Some(&n) = self.numbers.get(&id) {
                return Ok(n);
            }
        }
        let n = u32::try_from(next)
            .ok()
            .filter(|&n| n != NONE)
            .ok_or(RowsError::TooManySessions)?;
        self.ids.push(id);
        if self.sparse {
            self.numbers.insert(id, n);
        }
        Ok(n)
    }

    /// The id of `number`; `None` for [`NONE`].
    pub(super) fn id(&self, number: u32) -> Option<u64> {
        match number {
            NONE => None,
            n => Some(self.ids[n as usize]),
        }
    }

    /// Numbers given.
    pub(super) fn len(&self) -> usize {
        self.ids.len()
    }

    /// Drops the map of numbers by id (only adding rows needs it).
    pub(super) fn shrink_to_fit(&mut self) {
        self.numbers = HashMap::new();
        self.ids.shrink_to_fit();
    }

    /// Bytes held on the heap (the map estimated from its capacity).
    pub(super) fn heap_bytes(&self) -> usize {
        self.ids.capacity() * 8 + self.numbers.capacity() * (std::mem::size_of::<(u64, u32)>() + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_ids_need_no_map_and_any_other_id_gets_one() {
        let mut s = Sessions::default();
        for id in [0, 1, 0, 2, 1] {
            assert_eq!(s.number(id), Ok(id as u32));
        }
        assert!(s.numbers.is_empty(), "ids 0, 1, 2: their own numbers");
        // A raw chat id: numbered next, and every earlier id keeps its number.
        assert_eq!(s.number(u64::MAX - 1), Ok(3));
        assert_eq!(s.number(7), Ok(4));
        for (id, n) in [(0, 0), (2, 2), (u64::MAX - 1, 3), (7, 4), (1, 1)] {
            assert_eq!(s.number(id), Ok(n));
            assert_eq!(s.id(n), Some(id));
        }
        assert_eq!(s.id(NONE), None);
        // Dropping the map loses nothing: it is made again when a row is added.
        s.shrink_to_fit();
        assert!(s.numbers.is_empty());
        assert_eq!(s.number(7), Ok(4));
        assert_eq!(s.number(9), Ok(5));
        assert_eq!(s.len(), 6);
    }

    #[test]
    fn ids_first_seen_out_of_order_are_numbered_by_appearance() {
        let mut s = Sessions::default();
        assert_eq!(s.number(5), Ok(0));
        assert_eq!(s.number(0), Ok(1));
        assert_eq!(s.number(5), Ok(0));
        assert_eq!((s.id(0), s.id(1)), (Some(5), Some(0)));
    }
}

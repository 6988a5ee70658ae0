//! [`HashIds`]: a row's prefix-block ids, stored as runs of consecutive ids.
//!
//! Real traces number blocks as they first appear, so a row's ids are a few runs of
//! consecutive integers (a Mooncake conversation row: a shared root, then its own blocks
//! `n, n+1, …`). Each run is two LEB128 varints (the gap from the previous run's end, zigzag,
//! and the run's length − 1) after one varint with the count: 27 ids that took 216 bytes in a
//! `Vec<u64>` (plus its allocation) take 6 or so, kept inline in a 16-byte value (15 bytes of
//! encoding and their length, whose unused values tell the inline form from the boxed one).
//! Longer encodings go to the heap. Any sequence of `u64` round-trips, in order, and
//! one sequence has one encoding, so equality of the encodings is equality of the ids.

use serde::{Serialize, Serializer};
use std::fmt;

/// Encoded bytes that fit in the value itself (no allocation).
const INLINE: usize = 15;

/// A row's prefix-block ids, in order (see the module docs for the encoding).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct HashIds(Repr);

#[derive(Clone, PartialEq, Eq, Hash)]
enum Repr {
    Inline {
        len: InlineLen,
        bytes: [u8; INLINE],
    },
    /// Boxed twice so that this variant is one thin pointer: the whole value stays 16 bytes,
    /// the variant told apart by `InlineLen`'s unused values. Only rows with scattered ids
    /// pay the second allocation.
    #[allow(clippy::box_collection, clippy::redundant_allocation)]
    Heap(Box<Box<[u8]>>),
}

/// Length of an inline encoding, 0..=15: an enum so that its 240 unused byte values are free
/// to mark the `Heap` variant (no separate tag byte).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
#[rustfmt::skip]
enum InlineLen {
    L0, L1, L2, L3, L4, L5, L6, L7, L8, L9, L10, L11, L12, L13, L14, L15,
}

impl InlineLen {
    const ALL: [InlineLen; INLINE + 1] = {
        use InlineLen::*;
        [
            L0, L1, L2, L3, L4, L5, L6, L7, L8, L9, L10, L11, L12, L13, L14, L15,
        ]
    };

    fn get(self) -> usize {
        self as usize
    }
}

const _: () = assert!(std::mem::size_of::<HashIds>() == 16);

impl Default for HashIds {
    fn default() -> HashIds {
        HashIds::new()
    }
}

impl HashIds {
    /// No ids: a unique prompt.
    pub const fn new() -> HashIds {
        HashIds(Repr::Inline {
            len: InlineLen::L0,
            bytes: [0; INLINE],
        })
    }

    /// The encoding (empty for no ids): what [`TraceRows`](super::TraceRows) keeps in its
    /// arena.
    pub(super) fn bytes(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, bytes } => &bytes[..len.get()],
            Repr::Heap(b) => b,
        }
    }

    /// The ids an encoding made by [`HashIds::bytes`] stands for.
    pub(super) fn from_encoded(enc: &[u8]) -> HashIds {
        if enc.len() <= INLINE {
            let mut bytes = [0; INLINE];
            bytes[..enc.len()].copy_from_slice(enc);
            HashIds(Repr::Inline {
                len: InlineLen::ALL[enc.len()],
                bytes,
            })
        } else {
            HashIds(Repr::Heap(Box::new(enc.into())))
        }
    }

    /// How many ids.
    pub fn len(&self) -> usize {
        match self.bytes() {
            [] => 0,
            b => read_varint(b, &mut 0) as usize,
        }
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The ids, in order.
    pub fn iter(&self) -> Iter<'_> {
        let bytes = self.bytes();
        let mut pos = 0;
        let left = match bytes {
            [] => 0,
            b => read_varint(b, &mut pos),
        };
        Iter {
            bytes,
            pos,
            left,
            next: 0,
            run: 0,
        }
    }

    /// The id at `i`, if there are that many.
    pub fn get(&self, i: usize) -> Option<u64> {
        self.iter().nth(i)
    }

    /// The first id, if any.
    pub fn first(&self) -> Option<u64> {
        self.iter().next()
    }

    /// The ids as a `Vec`.
    pub fn to_vec(&self) -> Vec<u64> {
        self.iter().collect()
    }

    /// Keeps the first `n` ids.
    pub fn truncate(&mut self, n: usize) {
        if n < self.len() {
            *self = self.iter().take(n).collect();
        }
    }

    /// Removes every id.
    pub fn clear(&mut self) {
        *self = HashIds::new();
    }

    /// Bytes of the encoding held on the heap (0 when inline), for memory accounting.
    pub fn heap_bytes(&self) -> usize {
        match &self.0 {
            Repr::Inline { .. } => 0,
            Repr::Heap(b) => std::mem::size_of::<Box<[u8]>>() + b.len(),
        }
    }
}

/// Iterator over [`HashIds`].
#[derive(Clone)]
pub struct Iter<'a> {
    bytes: &'a [u8],
    pos: usize,
    /// Ids still to yield.
    left: u64,
    /// The next id of the current run.
    next: u64,
    /// Ids left in the current run.
    run: u64,
}

impl Iterator for Iter<'_> {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        if self.left == 0 {
            return None;
        }
        if self.run == 0 {
            let gap = unzigzag(read_varint(self.bytes, &mut self.pos));
            self.next = self.next.wrapping_add(gap as u64);
            self.run = read_varint(self.bytes, &mut self.pos) + 1;
        }
        let id = self.next;
        self.next = self.next.wrapping_add(1);
        self.run -= 1;
        self.left -= 1;
        Some(id)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left as usize, Some(self.left as usize))
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl<'a> IntoIterator for &'a HashIds {
    type Item = u64;
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl FromIterator<u64> for HashIds {
    fn from_iter<I: IntoIterator<Item = u64>>(ids: I) -> HashIds {
        // Runs as (first id, length), then the count and the runs encoded.
        let mut runs: Vec<(u64, u64)> = Vec::new();
        let mut count = 0u64;
        for id in ids {
            count += 1;
            match runs.last_mut() {
                Some((first, len)) if first.wrapping_add(*len) == id && *len < u64::MAX => {
                    *len += 1
                }
                _ => runs.push((id, 1)),
            }
        }
        if count == 0 {
            return HashIds::new();
        }
        let mut enc = Vec::with_capacity(2 + runs.len() * 4);
        write_varint(&mut enc, count);
        let mut end = 0u64;
        for (first, len) in runs {
            write_varint(&mut enc, zigzag(first.wrapping_sub(end) as i64));
            write_varint(&mut enc, len - 1);
            end = first.wrapping_add(len);
        }
        HashIds::from_encoded(&enc)
    }
}

impl From<Vec<u64>> for HashIds {
    fn from(ids: Vec<u64>) -> HashIds {
        ids.into_iter().collect()
    }
}

impl From<&[u64]> for HashIds {
    fn from(ids: &[u64]) -> HashIds {
        ids.iter().copied().collect()
    }
}

impl PartialEq<[u64]> for HashIds {
    fn eq(&self, other: &[u64]) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter().copied())
    }
}

impl PartialEq<Vec<u64>> for HashIds {
    fn eq(&self, other: &Vec<u64>) -> bool {
        *self == other[..]
    }
}

impl fmt::Debug for HashIds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// Written as the list of ids, as the `Vec<u64>` it replaces was.
impl Serialize for HashIds {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

/// The length of the encoding that starts `bytes` (made by [`HashIds::bytes`], not empty):
/// encodings are self-delimiting, so an arena of them needs no lengths.
pub(super) fn encoded_len(bytes: &[u8]) -> usize {
    let mut pos = 0;
    let mut left = read_varint(bytes, &mut pos);
    while left > 0 {
        read_varint(bytes, &mut pos); // the gap
        left -= read_varint(bytes, &mut pos) + 1; // the run's length − 1
    }
    pos
}

fn zigzag(x: i64) -> u64 {
    ((x << 1) ^ (x >> 63)) as u64
}

fn unzigzag(x: u64) -> i64 {
    ((x >> 1) as i64) ^ -((x & 1) as i64)
}

fn write_varint(out: &mut Vec<u8>, mut x: u64) {
    while x >= 0x80 {
        out.push((x as u8) | 0x80);
        x >>= 7;
    }
    out.push(x as u8);
}

/// Reads a varint the encoder wrote (the bytes are never anything else).
fn read_varint(bytes: &[u8], pos: &mut usize) -> u64 {
    let mut x = 0u64;
    let mut shift = 0;
    loop {
        let b = bytes[*pos];
        *pos += 1;
        x |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return x;
        }
        shift += 7;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(ids: &[u64]) {
        let h = HashIds::from(ids);
        assert_eq!(h.to_vec(), ids, "{ids:?}");
        assert_eq!(h.len(), ids.len());
        assert_eq!(h.iter().len(), ids.len());
        assert_eq!(h, *ids);
        assert_eq!(
            h,
            h.iter().collect::<HashIds>(),
            "one encoding per sequence"
        );
        for (i, &id) in ids.iter().enumerate() {
            assert_eq!(h.get(i), Some(id));
        }
        assert_eq!(h.get(ids.len()), None);
        assert_eq!(
            serde_json::to_string(&h).unwrap(),
            serde_json::to_string(ids).unwrap()
        );
        assert_eq!(format!("{h:?}"), format!("{ids:?}"));
    }

    #[test]
    fn any_sequence_round_trips() {
        let max = u64::MAX;
        for ids in [
            vec![],
            vec![0],
            vec![max],
            vec![max, 0],
            vec![0, max],
            vec![max - 1, max],
            vec![max, max],
            vec![5, 4, 3, 2, 1, 0],
            vec![7, 7, 7],
            vec![0, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27],
            vec![1 << 63, (1 << 63) + 1, 1, 2, max / 3],
            (0..1000).collect(),
            (0..300).map(|i| i * 1_000_003 % 977).collect(),
            (0..64).map(|i| max - i * 2).collect(),
        ] {
            round_trip(&ids);
        }
    }

    #[test]
    fn pseudo_random_sequences_round_trip() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for n in 0..400 {
            let ids: Vec<u64> = (0..n % 97)
                .map(|i| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    // Mix long runs, small gaps and arbitrary values.
                    match x % 4 {
                        0 => x,
                        1 => i,
                        _ => x % 64,
                    }
                })
                .collect();
            round_trip(&ids);
        }
    }

    #[test]
    fn truncate_and_clear_keep_a_prefix() {
        let ids: Vec<u64> = vec![0, 14, 15, 16, 3, 4, 9, 100, 101];
        for n in 0..=ids.len() + 1 {
            let mut h = HashIds::from(&ids[..]);
            h.truncate(n);
            assert_eq!(h, ids[..n.min(ids.len())], "truncate({n})");
            assert_eq!(h, HashIds::from(&ids[..n.min(ids.len())]));
        }
        let mut h = HashIds::from(&ids[..]);
        h.clear();
        assert!(h.is_empty() && h == HashIds::new());
    }

    #[test]
    fn runs_stay_inline_and_scattered_ids_go_to_the_heap() {
        // A Mooncake conversation row: a root and its own consecutive blocks.
        let row: Vec<u64> = std::iter::once(0).chain(1_000_000..1_000_374).collect();
        assert_eq!(HashIds::from(&row[..]).heap_bytes(), 0);
        let scattered: Vec<u64> = (0..40).map(|i| i * 1000).collect();
        let h = HashIds::from(&scattered[..]);
        assert!(h.heap_bytes() > INLINE);
        assert_eq!(h, scattered);
        assert_eq!(std::mem::size_of::<HashIds>(), 16);
    }

    #[test]
    fn encodings_either_side_of_the_inline_limit_round_trip() {
        // Isolated ids 2 apart: each a run of its own, 2 bytes (gap, length); 1 byte of count.
        for n in 5..=9 {
            let ids: Vec<u64> = (0..n).map(|i| i * 2).collect();
            let h = HashIds::from(&ids[..]);
            let enc = 1 + 2 * n as usize;
            assert_eq!(h.heap_bytes() == 0, enc <= INLINE, "{n} ids, {enc} bytes");
            assert_eq!(h.to_vec(), ids);
            assert_eq!(h.len(), ids.len());
            assert_eq!(h.clone(), h);
        }
    }
}

//! [`IdSet`]: a set of hash ids, exact, in about one bit an id for the ids real traces use
//! (`analyze-trace`'s distinct blocks, `synthesize`'s shared ones).
//!
//! Mooncake's and Bailian's published traces number their blocks 0, 1, 2… (Bailian's salted
//! hashes are remapped to such integers), and so does `canaryd synthesize`. A `HashSet<u64>`
//! took 9 to 18 bytes an id (its load factor, and twice that while it grows): 3.9M distinct ids
//! in a 200k-row trace were most of `analyze-trace`'s 146 MB. A bitmap over `0..=max` takes
//! an eighth of a byte an id when the ids are that dense. Ids far sparser than that (a trace of
//! random 64-bit ids) would make the bitmap larger than the set, so past [`SPARSE`] bits an id
//! the set moves to a `HashSet` and costs what it used to.

use std::collections::HashSet;

/// Bits of bitmap allowed per id held (beyond [`SLACK`]) before the set becomes a `HashSet`:
/// 64 bits is what a `HashSet<u64>` takes at best, so the bitmap is never the larger.
const SPARSE: u64 = 64;

/// Bits of bitmap allowed whatever the ids held (128 KiB): a trace's first rows may name
/// ids well above the number seen so far.
const SLACK: u64 = 1 << 20;

/// A set of `u64` ids (see the module docs).
#[derive(Debug)]
pub(crate) enum IdSet {
    /// Bit `i` of word `i / 64` set: `i` is in the set; `len` ids are.
    Bitmap { words: Vec<u64>, len: u64 },
    /// Ids too sparse for a bitmap.
    Hashed(HashSet<u64>),
}

impl Default for IdSet {
    fn default() -> Self {
        IdSet::Bitmap {
            words: Vec::new(),
            len: 0,
        }
    }
}

impl IdSet {
    /// Adds `id`; true when it was not in the set.
    pub(crate) fn insert(&mut self, id: u64) -> bool {
        match self {
            IdSet::Hashed(set) => set.insert(id),
            IdSet::Bitmap { words, len } => {
                let bits_needed = id.saturating_add(1);
                if bits_needed > (*len + 1).saturating_mul(SPARSE).saturating_add(SLACK) {
                    *self = IdSet::Hashed(Self::ids(words).collect());
                    return self.insert(id);
                }
                let (word, bit) = ((id / 64) as usize, id % 64);
                if word >= words.len() {
                    words.resize(word + 1, 0);
                }
                let new = words[word] & (1 << bit) == 0;
                words[word] |= 1 << bit;
                *len += u64::from(new);
                new
            }
        }
    }

    /// True when `id` is in the set.
    pub(crate) fn contains(&self, id: u64) -> bool {
        match self {
            IdSet::Hashed(set) => set.contains(&id),
            IdSet::Bitmap { words, .. } => words
                .get((id / 64) as usize)
                .is_some_and(|w| w & (1 << (id % 64)) != 0),
        }
    }

    /// Ids in the set.
    pub(crate) fn len(&self) -> u64 {
        match self {
            IdSet::Bitmap { len, .. } => *len,
            IdSet::Hashed(set) => set.len() as u64,
        }
    }

    /// The ids a bitmap holds, ascending.
    fn ids(words: &[u64]) -> impl Iterator<Item = u64> + '_ {
        words.iter().enumerate().flat_map(|(i, &w)| {
            (0..64)
                .filter(move |b| w & (1 << b) != 0)
                .map(move |b| i as u64 * 64 + b)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same answers as a `HashSet`, dense ids and sparse ones, across the switch.
    #[test]
    fn answers_as_a_hash_set_does() {
        let dense = (0..200_000u64).map(|i| (i * 7919) % 150_000);
        let sparse = (0..20_000u64).map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let mut set = IdSet::default();
        let mut want = HashSet::new();
        for (n, id) in dense
            .chain(sparse)
            .chain(0..10)
            .chain([u64::MAX])
            .enumerate()
        {
            assert_eq!(set.insert(id), want.insert(id), "id {id} (#{n})");
            let other = id ^ (1 << 40);
            assert!(set.contains(id));
            assert_eq!(set.contains(other), want.contains(&other), "id {other}");
            assert_eq!(set.len(), want.len() as u64);
            if n == 199_999 {
                assert!(
                    matches!(set, IdSet::Bitmap { .. }),
                    "dense ids stay a bitmap"
                );
            }
        }
        assert!(
            matches!(set, IdSet::Hashed(_)),
            "sparse ids moved to a HashSet"
        );
    }
}

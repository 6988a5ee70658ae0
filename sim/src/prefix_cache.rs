//! Prefix cache: an LRU of chained block hashes, like vLLM's automatic prefix caching.
//!
//! A lookup walks the prompt's block hashes from the start and stops at the first miss; since
//! each hash is chained with its predecessor, a hit on block *i* implies the whole prefix up to
//! *i* matches. As in vLLM, at most `prompt_tokens - 1` tokens can hit (the last prompt token is
//! always computed, to produce logits), so a prompt that is all cached still computes its last
//! block. After the lookup all of the prompt's full blocks are inserted (or refreshed) as most
//! recently used, evicting the least recently used blocks beyond the capacity.
//!
//! Simplification: the cache is separate from the KV budget of running sequences (vLLM keeps
//! cached blocks in free KV memory); its capacity is `--cache-blocks`.

use std::collections::{BTreeMap, HashMap};

/// LRU set of block hashes.
#[derive(Debug)]
pub(crate) struct PrefixCache {
    block_size: u32,
    capacity: usize,
    tick: u64,
    last_use: HashMap<u64, u64>,
    by_age: BTreeMap<u64, u64>,
}

impl PrefixCache {
    pub fn new(block_size: u32, capacity_blocks: usize) -> PrefixCache {
        PrefixCache {
            block_size,
            capacity: capacity_blocks,
            tick: 0,
            last_use: HashMap::new(),
            by_age: BTreeMap::new(),
        }
    }

    /// Looks the prompt up and then inserts its blocks. Returns the number of cached tokens:
    /// matched leading full blocks × block size.
    pub fn lookup_and_insert(&mut self, prompt_tokens: u32, block_hashes: &[u64]) -> u32 {
        let max_hit_blocks = (prompt_tokens.saturating_sub(1) / self.block_size) as usize;
        let hits = block_hashes
            .iter()
            .take(max_hit_blocks)
            .take_while(|h| self.last_use.contains_key(h))
            .count();
        for &h in block_hashes {
            self.touch(h);
        }
        hits as u32 * self.block_size
    }

    fn touch(&mut self, hash: u64) {
        if self.capacity == 0 {
            return;
        }
        self.tick += 1;
        if let Some(old) = self.last_use.insert(hash, self.tick) {
            self.by_age.remove(&old);
        }
        self.by_age.insert(self.tick, hash);
        while self.last_use.len() > self.capacity {
            let (_, victim) = self.by_age.pop_first().expect("ages track entries");
            self.last_use.remove(&victim);
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.last_use.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompt::Tokenizer;

    fn prompt(words: &[&str], block: u32) -> (u32, Vec<u64>) {
        let mut t = Tokenizer::new(block);
        t.push_text(&words.join(" "));
        let p = t.finish();
        (p.count, p.block_hashes)
    }

    #[test]
    fn shared_prefix_hits() {
        let mut c = PrefixCache::new(2, 100);
        let (n, h) = prompt(&["a", "b", "c", "d", "e"], 2);
        assert_eq!(c.lookup_and_insert(n, &h), 0);
        assert_eq!(c.lookup_and_insert(n, &h), 4);
        // Shares only the first block.
        let (n2, h2) = prompt(&["a", "b", "x", "d", "e"], 2);
        assert_eq!(c.lookup_and_insert(n2, &h2), 2);
        // Nothing shared at the start: no hit even though block 2 text is equal.
        let (n3, h3) = prompt(&["q", "q", "c", "d", "e"], 2);
        assert_eq!(c.lookup_and_insert(n3, &h3), 0);
    }

    #[test]
    fn last_token_always_computed() {
        let mut c = PrefixCache::new(2, 100);
        let (n, h) = prompt(&["a", "b", "c", "d"], 2);
        c.lookup_and_insert(n, &h);
        // 4 tokens, all cached: at most 3 can hit, so one full block.
        assert_eq!(c.lookup_and_insert(n, &h), 2);
    }

    #[test]
    fn lru_eviction() {
        let mut c = PrefixCache::new(1, 2);
        c.lookup_and_insert(2, &[1, 2]);
        assert_eq!(c.len(), 2);
        // Refresh 1, then insert 3: 2 is the least recently used and goes.
        c.lookup_and_insert(2, &[1]);
        c.lookup_and_insert(2, &[3]);
        assert_eq!(c.len(), 2);
        assert_eq!(c.lookup_and_insert(2, &[1]), 1);
        assert_eq!(c.lookup_and_insert(2, &[2]), 0);
        let mut off = PrefixCache::new(1, 0);
        off.lookup_and_insert(2, &[1]);
        assert_eq!(off.lookup_and_insert(2, &[1]), 0);
    }
}

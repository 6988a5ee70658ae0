//! The sim's stand-in for a tokenizer: one token is one whitespace-separated word.
//!
//! canaryd's prompt synthesizer builds prompts from single-token words separated by spaces, so
//! counting words gives exactly the trace's input length. Messages of a chat request are joined
//! with a space, so a word never spans two messages. A completions prompt given as token ids
//! counts one token per id.
//!
//! While counting, full blocks of `block_size` tokens are hashed, each hash chained with the
//! previous block's hash (FNV-1a over the words and the previous hash), so a block's hash names
//! its whole prefix, like vLLM's block hashes.

/// Token count and chained block hashes of one prompt.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct PromptTokens {
    pub count: u32,
    /// One hash per full block, in order; the partial tail block is not hashed.
    pub block_hashes: Vec<u64>,
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// Builds [`PromptTokens`] from a sequence of words or token ids.
pub(crate) struct Tokenizer {
    block_size: u32,
    in_block: u32,
    hash: u64,
    prev: u64,
    out: PromptTokens,
}

impl Tokenizer {
    pub fn new(block_size: u32) -> Tokenizer {
        assert!(block_size > 0);
        Tokenizer {
            block_size,
            in_block: 0,
            hash: FNV_OFFSET,
            prev: FNV_OFFSET,
            out: PromptTokens::default(),
        }
    }

    /// Adds every whitespace-separated word of `text`.
    pub fn push_text(&mut self, text: &str) {
        for word in text.split_ascii_whitespace() {
            self.push_bytes(word.as_bytes());
        }
    }

    /// Adds one token given as an id.
    pub fn push_id(&mut self, id: u64) {
        self.push_bytes(&id.to_le_bytes());
    }

    fn push_bytes(&mut self, bytes: &[u8]) {
        if self.in_block == 0 {
            // Chain: the block's hash starts from the previous block's hash.
            self.hash = self.prev;
        }
        for &b in bytes {
            self.hash = (self.hash ^ b as u64).wrapping_mul(FNV_PRIME);
        }
        // A separator so that "ab c" and "a bc" differ.
        self.hash = (self.hash ^ 0xff).wrapping_mul(FNV_PRIME);
        self.in_block += 1;
        self.out.count += 1;
        if self.in_block == self.block_size {
            self.out.block_hashes.push(self.hash);
            self.prev = self.hash;
            self.in_block = 0;
        }
    }

    pub fn finish(self) -> PromptTokens {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tok(text: &str, block: u32) -> PromptTokens {
        let mut t = Tokenizer::new(block);
        t.push_text(text);
        t.finish()
    }

    #[test]
    fn counts_words() {
        assert_eq!(tok("", 4).count, 0);
        assert_eq!(tok("  a  b\tc\nd ", 4).count, 4);
        let mut t = Tokenizer::new(2);
        t.push_text("a b");
        t.push_text("c");
        t.push_id(7);
        let p = t.finish();
        assert_eq!(p.count, 4);
        assert_eq!(p.block_hashes.len(), 2);
    }

    #[test]
    fn chained_block_hashes() {
        let a = tok("w1 w2 w3 w4 w5", 2);
        assert_eq!(a.block_hashes.len(), 2, "partial tail block is not hashed");
        let b = tok("w1 w2 w3 w4 x5 x6", 2);
        assert_eq!(a.block_hashes[..], b.block_hashes[..2]);
        // Same second block after a different first block: different hash (chained).
        let c = tok("z1 z2 w3 w4", 2);
        assert_ne!(a.block_hashes[1], c.block_hashes[1]);
        // Word boundaries matter.
        assert_ne!(tok("ab c", 2).block_hashes, tok("a bc", 2).block_hashes);
    }
}

//! The single-token word vocabulary that prompt text is assembled from.
//!
//! Why words and not token ids: a prompt of N tokens is written as N corpus words, each
//! `" word"` (one leading space) and each exactly one token under the chosen tokenizer.
//! Byte-level BPE tokenizers (o200k, GPT-2, Llama 3, SmolLM, …) and Metaspace ones split
//! text into pre-tokens at each space before merging, so a word can never merge with its
//! neighbour and the count is exact by construction: no encoding on the hot path, only
//! string concatenation. It also keeps the simulator's rule (tokens = whitespace words)
//! true. Both facts are checked against the real tokenizer when the vocabulary is built.
//!
//! Storage is one `String` holding every `" word"` back to back plus `u32` offsets, and the
//! corpus as a sequence of word ids (the corpus with rejected words left out), so a block
//! is a handful of slices of prose copied into the output.

use canary_core::splitmix64;
use std::collections::{HashMap, HashSet};

use super::{PromptError, Tokenizer};

/// The public-domain corpus (see its header for sources).
pub(crate) const CORPUS: &str = include_str!("corpus.txt");

/// Fewer single-token words than this and prompts would repeat too visibly (and the
/// tokenizer is probably not one this scheme suits).
pub(crate) const MIN_WORDS: usize = 256;

/// Words per prose fragment. A block is a run of fragments, each starting at its own
/// hashed position in the corpus, so two different block ids almost never share text
/// (a 16-token Bailian block has about `len²` ≈ 10⁷ variants, not `len`).
const FRAGMENT_WORDS: usize = 8;

/// Words per window when checking that concatenated words never merge.
const CHECK_WINDOW: usize = 64;

/// Single-token words and the corpus expressed in them.
pub(crate) struct Vocabulary {
    /// Every accepted `" word"`, back to back.
    text: String,
    /// `text[offsets[i]..offsets[i + 1]]` is word `i`.
    offsets: Vec<u32>,
    /// The corpus in reading order, as word ids.
    sequence: Vec<u32>,
    /// The same corpus as text, every word `" word"`: blocks copy runs of it, one
    /// `memcpy` per fragment rather than one per word.
    stream: String,
    /// `stream[stream_offsets[p]..stream_offsets[p + 1]]` is word `sequence[p]`.
    stream_offsets: Vec<u32>,
}

// === impl Vocabulary ===

impl Vocabulary {
    /// Finds the corpus words that are one token each under `tokenizer` and checks that a
    /// run of them counts one token per word, dropping any word that merges.
    pub(crate) fn build(tokenizer: &Tokenizer) -> Result<Vocabulary, PromptError> {
        let mut ids: HashMap<&str, Option<u32>> = HashMap::new();
        let mut words: Vec<&str> = Vec::new();
        let mut sequence = Vec::new();
        let mut spaced = String::new();
        for word in corpus_words() {
            let id = *ids.entry(word).or_insert_with(|| {
                spaced.clear();
                spaced.push(' ');
                spaced.push_str(word);
                (tokenizer.count_tokens(&spaced) == 1).then(|| {
                    words.push(word);
                    (words.len() - 1) as u32
                })
            });
            sequence.extend(id);
        }
        let mut vocab = Vocabulary::from_parts(&words, &sequence);
        // Drop words that merge with a neighbour until a clean pass. Two orders are
        // checked: the corpus's own, and a scrambled one, since blocks join fragments
        // from anywhere in the corpus.
        for _ in 0..4 {
            let mut bad = vocab.merging_words(tokenizer, vocab.sequence.iter().copied());
            let scrambled = (0..vocab.sequence.len() as u64)
                .map(|i| vocab.sequence[(splitmix64(i) % vocab.sequence.len() as u64) as usize]);
            bad.extend(vocab.merging_words(tokenizer, scrambled));
            if bad.is_empty() {
                break;
            }
            let keep: Vec<String> = (0..vocab.len() as u32)
                .filter(|i| !bad.contains(i))
                .map(|i| vocab.word(i).trim_start().to_owned())
                .collect();
            let keep: Vec<&str> = keep.iter().map(String::as_str).collect();
            let index: HashMap<&str, u32> = keep
                .iter()
                .enumerate()
                .map(|(i, w)| (*w, i as u32))
                .collect();
            let seq: Vec<u32> = vocab
                .sequence
                .iter()
                .filter_map(|&id| index.get(vocab.word(id).trim_start()).copied())
                .collect();
            vocab = Vocabulary::from_parts(&keep, &seq);
        }
        if vocab.len() < MIN_WORDS {
            return Err(PromptError::TooFewWords {
                tokenizer: tokenizer.name().to_owned(),
                found: vocab.len(),
                needed: MIN_WORDS,
            });
        }
        Ok(vocab)
    }

    /// The vocabulary [`build`](Self::build) finds for the built-in o200k_base, without
    /// loading it: the corpus minus [`O200K_REJECTED`]. Loading o200k costs about 40 MB of
    /// resident memory and 0.2 s, which a replay that never re-encodes a prompt does not need.
    /// A test checks that the list still matches the real tokenizer.
    pub(crate) fn builtin_o200k() -> Vocabulary {
        let rejected: HashSet<&str> = o200k_rejected().collect();
        let mut ids: HashMap<&str, Option<u32>> = HashMap::new();
        let mut words: Vec<&str> = Vec::new();
        let mut sequence = Vec::new();
        for word in corpus_words() {
            let id = *ids.entry(word).or_insert_with(|| {
                (!rejected.contains(word)).then(|| {
                    words.push(word);
                    (words.len() - 1) as u32
                })
            });
            sequence.extend(id);
        }
        Vocabulary::from_parts(&words, &sequence)
    }

    fn from_parts(words: &[&str], sequence: &[u32]) -> Vocabulary {
        let mut text = String::with_capacity(words.iter().map(|w| w.len() + 1).sum());
        let mut offsets = Vec::with_capacity(words.len() + 1);
        offsets.push(0);
        for w in words {
            text.push(' ');
            text.push_str(w);
            offsets.push(text.len() as u32);
        }
        let mut stream = String::new();
        let mut stream_offsets = Vec::with_capacity(sequence.len() + 1);
        stream_offsets.push(0);
        for &id in sequence {
            let id = id as usize;
            stream.push_str(&text[offsets[id] as usize..offsets[id + 1] as usize]);
            stream_offsets.push(stream.len() as u32);
        }
        Vocabulary {
            text,
            offsets,
            sequence: sequence.to_vec(),
            stream,
            stream_offsets,
        }
    }

    /// Bytes to reserve per word so a prompt is built without regrowing: the corpus
    /// average rounded up, plus one for luck (fragments start anywhere).
    pub(crate) fn bytes_per_word(&self) -> usize {
        self.stream.len().div_ceil(self.sequence.len().max(1)) + 1
    }

    /// Number of distinct single-token words.
    pub(crate) fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    /// Word `id` with its leading space.
    fn word(&self, id: u32) -> &str {
        let id = id as usize;
        &self.text[self.offsets[id] as usize..self.offsets[id + 1] as usize]
    }

    /// Appends words `start..start + count` of the endless word stream of block `key`.
    ///
    /// Word `j` of the stream lies in fragment `j / FRAGMENT_WORDS`, which starts at a
    /// position of the corpus hashed from `(key, fragment)`. Any prefix of the stream is
    /// therefore the same bytes whatever the block's length, which is what lets a partial
    /// last block share bytes with the full block of the same id.
    pub(crate) fn write_words(&self, out: &mut String, key: u64, start: usize, count: usize) {
        let len = self.sequence.len();
        let mut j = start;
        let end = start + count;
        while j < end {
            let fragment = (j / FRAGMENT_WORDS) as u64;
            let at = (splitmix64(key ^ fragment.wrapping_mul(0x9E37_79B9_7F4A_7C15)) % len as u64)
                as usize;
            let within = j % FRAGMENT_WORDS;
            let n = (FRAGMENT_WORDS - within).min(end - j);
            // A fragment may run off the end of the corpus and wrap to its start.
            let (mut p, mut left) = ((at + within) % len, n);
            while left > 0 {
                let run = left.min(len - p);
                self.push_run(out, p, run);
                (p, left) = (0, left - run);
            }
            j += n;
        }
    }

    /// Appends `n` words of the corpus stream starting at position `p` (no wrap).
    fn push_run(&self, out: &mut String, p: usize, n: usize) {
        let (a, b) = (self.stream_offsets[p], self.stream_offsets[p + n]);
        out.push_str(&self.stream[a as usize..b as usize]);
    }

    /// Ids of words that, in the order `stream` gives, do not count one token each.
    fn merging_words(&self, tokenizer: &Tokenizer, stream: impl Iterator<Item = u32>) -> Vec<u32> {
        let stream: Vec<u32> = stream.collect();
        let mut bad = Vec::new();
        let mut text = String::new();
        for window in stream.chunks(CHECK_WINDOW) {
            text.clear();
            window.iter().for_each(|&id| text.push_str(self.word(id)));
            if tokenizer.count_tokens(&text) == window.len() {
                continue;
            }
            // Rare: find the pairs that merge and drop their second word.
            for pair in window.windows(2) {
                text.clear();
                text.push_str(self.word(pair[0]));
                text.push_str(self.word(pair[1]));
                if tokenizer.count_tokens(&text) != 2 && !bad.contains(&pair[1]) {
                    bad.push(pair[1]);
                }
            }
        }
        bad
    }
}

impl std::fmt::Debug for Vocabulary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The word lists are kilobytes of text: show their sizes only.
        f.debug_struct("Vocabulary")
            .field("words", &self.len())
            .field("corpus_words", &self.sequence.len())
            .field("corpus_bytes", &self.stream.len())
            .finish()
    }
}

/// Corpus words that are not one token under o200k_base, or merge with a neighbour, in
/// corpus order: what [`Vocabulary::build`] drops for the built-in tokenizer. Regenerate
/// from the failure message of the test `builtin_word_list_matches_o200k`.
const O200K_REJECTED: &str = include_str!("o200k_rejected.txt");

/// The words of [`O200K_REJECTED`].
fn o200k_rejected() -> impl Iterator<Item = &'static str> {
    O200K_REJECTED
        .lines()
        .filter(|line| !line.starts_with('#'))
        .flat_map(str::split_whitespace)
}

/// Candidate words of the corpus in reading order: whitespace-separated, outer punctuation
/// trimmed, ASCII letters only (so no apostrophes, hyphens or digits, which tokenizers
/// split). Lines starting with `#` are the corpus header.
fn corpus_words() -> impl Iterator<Item = &'static str> {
    CORPUS
        .lines()
        .filter(|line| !line.starts_with('#'))
        .flat_map(str::split_whitespace)
        .map(|w| w.trim_matches(|c: char| !c.is_ascii_alphabetic()))
        .filter(|w| !w.is_empty() && w.bytes().all(|b| b.is_ascii_alphabetic()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corpus_has_a_few_thousand_words() {
        let n = corpus_words().count();
        assert!(n > 2500, "{n}");
        assert!(corpus_words().all(|w| !w.contains(' ')));
    }

    #[test]
    fn builtin_word_list_matches_o200k() {
        let tokenizer = Tokenizer::load(&super::super::TokenizerSpec::BuiltinO200k).unwrap();
        let built = Vocabulary::build(&tokenizer).unwrap();
        let accepted: HashSet<&str> = (0..built.len() as u32)
            .map(|id| built.word(id).trim_start())
            .collect();
        let mut rejected: Vec<&str> = Vec::new();
        for word in corpus_words() {
            if !accepted.contains(word) && !rejected.contains(&word) {
                rejected.push(word);
            }
        }
        let shipped: Vec<&str> = o200k_rejected().collect();
        assert_eq!(
            rejected.join(" "),
            shipped.join(" "),
            "regenerate o200k_rejected.txt from the left side"
        );
        let shipped = Vocabulary::builtin_o200k();
        assert_eq!(shipped.text, built.text);
        assert_eq!(shipped.sequence, built.sequence);
        assert_eq!(shipped.stream, built.stream);
    }

    #[test]
    fn stream_prefix_is_stable() {
        let words: Vec<String> = corpus_words().map(str::to_owned).collect();
        let refs: Vec<&str> = words.iter().map(String::as_str).collect();
        let seq: Vec<u32> = (0..refs.len() as u32).collect();
        let vocab = Vocabulary::from_parts(&refs, &seq);
        let (mut long, mut short, mut split) = (String::new(), String::new(), String::new());
        vocab.write_words(&mut long, 42, 0, 100);
        vocab.write_words(&mut short, 42, 0, 37);
        vocab.write_words(&mut split, 42, 0, 13);
        vocab.write_words(&mut split, 42, 13, 87);
        assert!(long.starts_with(&short));
        assert_eq!(long, split);
        assert_eq!(long.split_whitespace().count(), 100);
    }

    #[test]
    fn fragments_wrap_around_the_corpus_end() {
        let vocab = Vocabulary::from_parts(&["a", "b", "c"], &[0, 1, 2]);
        let mut out = String::new();
        vocab.write_words(&mut out, 7, 0, 803);
        let words: Vec<&str> = out.split_whitespace().collect();
        assert_eq!(words.len(), 803);
        for fragment in words.chunks(FRAGMENT_WORDS) {
            for pair in fragment.windows(2) {
                let next = match pair[0] {
                    "a" => "b",
                    "b" => "c",
                    _ => "a",
                };
                assert_eq!(pair[1], next, "{fragment:?}");
            }
        }
    }
}

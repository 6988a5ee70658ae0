//! Prompt synthesis: turns a trace row's hash ids into prompt text of exactly the row's
//! input length.
//!
//! Each hash id maps to one deterministic block of `block_size` tokens, so equal ids give
//! byte-identical blocks and the server's prefix cache sees the trace's real reuse. A row
//! without hash ids (or tokens past its last block) gets blocks keyed, in a separate
//! namespace, by its trace line, its index and a `salt` given with each build: the line keeps
//! rows unique across the shards of one trace (each shard renumbers its rows from 0), the
//! salt across runs (a replay passes a fresh one each run, so a server never serves a
//! "unique" prompt from the prefix cache a previous run filled). The builder's `seed` changes
//! the id → text mapping; the same seed always gives the same text for the same hash ids,
//! whatever the salt.
//!
//! Prompts are built just in time, shortly before they are sent: a 12k-token prompt is a
//! few hundred string copies out of a [`Vocabulary`] of words that are one token each, so
//! nothing is encoded on the hot path (DESIGN.md, "Prompt synthesis at scale"). The count
//! is exact by construction for byte-level BPE and Metaspace tokenizers, checked when the
//! vocabulary is built; [`PromptBuilder::build_verified`] re-encodes and repairs the last
//! block for callers that want proof.
//!
//! ```no_run
//! # fn demo(req: &canary_core::TraceRequest) -> Result<(), canary_replay::PromptError> {
//! use canary_replay::{PromptBuilder, Tokenizer, TokenizerSpec};
//! let tokenizer = Tokenizer::load(&TokenizerSpec::BuiltinO200k)?;
//! let builder = PromptBuilder::new(tokenizer, 0)?;
//! let prompt = builder.build(req, 0);
//! assert_eq!(prompt.tokens, Some(req.input_tokens));
//! # Ok(()) }
//! ```

mod tokenizer;
mod vocabulary;

use std::path::PathBuf;

use canary_core::{TracePrompt, TraceRequest};

pub use self::tokenizer::{Tokenizer, TokenizerSpec};
use self::vocabulary::Vocabulary;
use canary_core::splitmix64;

/// Block size used for rows that report none (`block_size == 0`).
const DEFAULT_BLOCK_SIZE: usize = 512;

/// Namespace tag mixed into keys of blocks derived from a row's index rather than a hash
/// id, so that they can never coincide with a hash-id block.
const UNIQUE_NAMESPACE: u64 = 0x756E_6971_7565_2D62; // "unique-b"

/// Tail repairs tried by [`PromptBuilder::build_verified`] before giving up.
const MAX_REPAIRS: usize = 4;

/// Why a tokenizer or prompt builder could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum PromptError {
    /// The `tokenizer.json` could not be read.
    #[error("cannot read tokenizer file {}", path.display())]
    TokenizerRead {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The `tokenizer.json` is not a tokenizer the `tokenizers` crate understands.
    #[error(
        "invalid tokenizer file {}{}",
        path.display(),
        if *valid_json { " (valid JSON, but not a tokenizer.json)" } else { "" }
    )]
    TokenizerParse {
        /// The file.
        path: PathBuf,
        /// Whether the file is well-formed JSON: the crate's error (`expected , or }`) then
        /// reads like a syntax error that is not there.
        valid_json: bool,
        /// The parse error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The tokenizer splits too many corpus words into several tokens.
    #[error("tokenizer {tokenizer} has only {found} single-token corpus words, {needed} needed")]
    TooFewWords {
        /// [`Tokenizer::name`].
        tokenizer: String,
        /// Words that passed.
        found: usize,
        /// The minimum.
        needed: usize,
    },
}

/// A prompt's content, ready for the request body.
#[derive(Debug, Clone, PartialEq)]
pub enum PromptBody {
    /// A plain text prompt (synthesized, or the trace's `text_input`).
    Text(String),
    /// The trace's own chat `messages` array, verbatim.
    Messages(serde_json::Value),
}

/// A prompt for one trace row.
#[derive(Debug, Clone, PartialEq)]
pub struct Prompt {
    /// The content.
    pub body: PromptBody,
    /// Exact token count of a synthesized prompt under the builder's tokenizer; `None` when
    /// the trace supplied the prompt verbatim (then only the trace's `input_tokens` is known).
    pub tokens: Option<u32>,
}

/// Result of re-encoding a synthesized prompt ([`PromptBuilder::build_verified`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenCheck {
    /// Tokens the trace asked for.
    pub expected: u32,
    /// Tokens the first build really encoded to.
    pub counted_before: usize,
    /// Tokens after any repair of the last block (equals `expected` on success).
    pub counted: usize,
    /// Words added to (positive) or removed from (negative) the last block by the repair.
    pub tail_words_changed: i64,
}

impl TokenCheck {
    /// True when the first build was already exact.
    pub fn was_exact(&self) -> bool {
        self.counted_before == self.expected as usize
    }

    /// True when the final prompt has exactly the expected count.
    pub fn is_exact(&self) -> bool {
        self.counted == self.expected as usize
    }
}

/// Builds prompts from trace rows. `Send + Sync`; share one behind an `Arc`.
#[derive(Debug)]
pub struct PromptBuilder {
    tokenizer: Tokenizer,
    vocabulary: Vocabulary,
    /// `splitmix64(seed)`, mixed into every block key.
    seed_key: u64,
}

/// One block of a planned prompt: the key of its word stream and how many words it takes.
#[derive(Debug, Clone, Copy)]
struct Segment {
    key: u64,
    words: usize,
}

// === impl PromptBuilder ===

impl PromptBuilder {
    /// Builds the single-token vocabulary for `tokenizer` (a few ms; the built-in o200k ships
    /// its list, so it is never parsed unless a prompt is verified) and keys the
    /// id → text mapping on `seed` (0 by default; change it to dodge warm caches across runs).
    ///
    /// Fails if the tokenizer yields fewer than 256 usable single-token words.
    pub fn new(tokenizer: Tokenizer, seed: u64) -> Result<PromptBuilder, PromptError> {
        let vocabulary = if tokenizer.is_builtin() {
            Vocabulary::builtin_o200k()
        } else {
            Vocabulary::build(&tokenizer)?
        };
        Ok(PromptBuilder {
            tokenizer,
            vocabulary,
            seed_key: splitmix64(seed),
        })
    }

    /// The prompt for `req`: the trace's own prompt verbatim if it has one, otherwise
    /// `req.input_tokens` tokens synthesized from its hash ids. `salt` changes the text of the
    /// blocks no hash id covers, and only those.
    ///
    /// The text is sized by `req.input_tokens` (a few bytes a token): lengths are checked
    /// before this, when the trace loads and again when [`run()`](crate::run()) starts
    /// ([`Config::length_limit`](crate::Config::length_limit)).
    pub fn build(&self, req: &TraceRequest, salt: u64) -> Prompt {
        if let Some(verbatim) = verbatim(req) {
            return verbatim;
        }
        let mut text = String::new();
        self.write(req, salt, &mut text);
        Prompt {
            body: PromptBody::Text(text),
            tokens: Some(req.input_tokens),
        }
    }

    /// Like [`build`](Self::build), then encodes the text with the real tokenizer and, if
    /// the count is off, grows or shrinks the last block until it is exact (earlier blocks,
    /// and so prefix sharing, are never touched). The check is `None` for verbatim prompts.
    ///
    /// Costs a full encode per call (o200k: about 5M tokens/s): for spot checks and
    /// start-up probes, not every request.
    pub fn build_verified(&self, req: &TraceRequest, salt: u64) -> (Prompt, Option<TokenCheck>) {
        if let Some(verbatim) = verbatim(req) {
            return (verbatim, None);
        }
        let mut text = String::new();
        let last = self.write(req, salt, &mut text);
        let check = self.repair(&mut text, last, req.input_tokens);
        let prompt = Prompt {
            body: PromptBody::Text(text),
            tokens: Some(check.counted as u32),
        };
        (prompt, Some(check))
    }

    /// Encodes `text` and, while the count is off, regrows its last block (`last`: where
    /// it starts in `text`, and which block it is) by the difference.
    fn repair(
        &self,
        text: &mut String,
        last: Option<(usize, Segment)>,
        expected: u32,
    ) -> TokenCheck {
        let counted_before = self.tokenizer.count_tokens(text);
        let mut check = TokenCheck {
            expected,
            counted_before,
            counted: counted_before,
            tail_words_changed: 0,
        };
        let Some((prefix_len, segment)) = last else {
            return check;
        };
        let mut words = segment.words as i64;
        for _ in 0..MAX_REPAIRS {
            if check.is_exact() {
                break;
            }
            words = (words + i64::from(expected) - check.counted as i64).max(0);
            text.truncate(prefix_len);
            self.vocabulary
                .write_words(text, segment.key, 0, words as usize);
            check.counted = self.tokenizer.count_tokens(text);
            check.tail_words_changed = words - segment.words as i64;
        }
        check
    }

    /// Number of distinct single-token words prompts are made of.
    pub fn vocabulary_len(&self) -> usize {
        self.vocabulary.len()
    }

    /// The tokenizer counts are exact for.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// Appends the synthesized text of `req` to `out`. Returns where the last block starts
    /// in `out` and that block, for tail repair.
    fn write(&self, req: &TraceRequest, salt: u64, out: &mut String) -> Option<(usize, Segment)> {
        // Reserve once, then copy without regrowing.
        out.reserve(req.input_tokens as usize * self.vocabulary.bytes_per_word());
        let mut last = None;
        for segment in self.plan(req, salt) {
            last = Some((out.len(), segment));
            self.vocabulary
                .write_words(out, segment.key, 0, segment.words);
        }
        last
    }

    /// The blocks of `req`'s prompt: one per hash id while tokens remain (the last one
    /// possibly partial), then blocks keyed by `(salt, line, index, position)` for any tokens
    /// the hash ids do not cover (all of them for a row without ids).
    fn plan<'a>(&'a self, req: &'a TraceRequest, salt: u64) -> impl Iterator<Item = Segment> + 'a {
        let block = match req.block_size {
            0 => DEFAULT_BLOCK_SIZE,
            b => b as usize,
        };
        let total = req.input_tokens as usize;
        let ids = req.hash_ids.iter().map(|id| self.hash_key(id));
        let row = unique_row(salt, req.line, req.index);
        let unique = (req.hash_ids.len() as u64..).map(move |pos| self.unique_key(row, pos));
        ids.chain(unique)
            .enumerate()
            .map(move |(i, key)| Segment {
                key,
                words: total.saturating_sub(i * block).min(block),
            })
            .take_while(|s| s.words > 0)
    }

    /// Key of the block for trace hash id `id`.
    fn hash_key(&self, id: u64) -> u64 {
        splitmix64(self.seed_key ^ splitmix64(id))
    }

    /// Key of the `pos`-th block of a row (see [`unique_row`]) when no hash id covers it.
    fn unique_key(&self, row: u64, pos: u64) -> u64 {
        splitmix64(self.seed_key ^ splitmix64(row ^ pos))
    }
}

/// The key of a row's unique blocks. Its trace line tells rows of one file apart on every
/// shard (a row's index only counts within one shard's selection; warm-up requests have line
/// 0 and indices counted down from `u32::MAX`); the salt tells runs apart.
fn unique_row(salt: u64, line: u32, index: u32) -> u64 {
    let row = (u64::from(line) << 32) | u64::from(index);
    splitmix64(UNIQUE_NAMESPACE ^ splitmix64(salt ^ splitmix64(row)))
}

/// The trace's own prompt, if the row carries one.
fn verbatim(req: &TraceRequest) -> Option<Prompt> {
    let body = match req.prompt()? {
        TracePrompt::Text(text) => PromptBody::Text(text.clone()),
        TracePrompt::Messages(messages) => PromptBody::Messages(messages.clone()),
    };
    Some(Prompt { body, tokens: None })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builder_is_send_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<PromptBuilder>();
    }

    /// The repair path never runs with o200k (counts are exact by construction), so drive
    /// it directly: ask for a different count than was built and check it converges.
    #[test]
    fn repair_regrows_only_the_last_block() {
        let tok = Tokenizer::load(&TokenizerSpec::BuiltinO200k).unwrap();
        let builder = PromptBuilder::new(tok, 0).unwrap();
        let req = TraceRequest::new(0, 1, 0, None, 0, 40, 1, vec![1, 2, 3].into(), 16);
        for (expected, change) in [(45, 5), (33, -7), (40, 0)] {
            let mut text = String::new();
            let last = builder.write(&req, 0, &mut text);
            let head = text[..last.unwrap().0].to_owned();
            let check = builder.repair(&mut text, last, expected);
            assert_eq!(check.counted_before, 40);
            assert!(check.is_exact(), "{check:?}");
            assert_eq!(check.tail_words_changed, change);
            assert!(text.starts_with(&head));
            assert_eq!(builder.tokenizer().count_tokens(&text), expected as usize);
        }
    }
}

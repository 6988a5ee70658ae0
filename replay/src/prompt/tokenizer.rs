//! The tokenizer that prompt lengths are measured in.
//!
//! Two back ends: the o200k_base BPE that ships inside `tiktoken-rs` (no file, no
//! network, but only an approximation for models that are not OpenAI's), and any
//! Hugging Face `tokenizer.json` given by the user, loaded with the `tokenizers` crate.
//! Both count tokens *without* special tokens: a BOS/EOS added by a post-processor or a
//! chat template is the server's business, not part of the trace's prompt length.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use super::PromptError;

/// Which tokenizer prompt lengths are measured in.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum TokenizerSpec {
    /// The o200k_base BPE embedded in the binary. Counts are exact for OpenAI's o-series /
    /// GPT-4o family and approximate for every other model.
    #[default]
    BuiltinO200k,
    /// A Hugging Face `tokenizer.json` on disk: counts are exact for that model.
    HuggingFace(PathBuf),
}

/// A loaded tokenizer. Cloning is cheap (an `Arc`), and it is `Send + Sync`.
#[derive(Clone)]
pub struct Tokenizer {
    inner: Arc<Inner>,
}

struct Inner {
    name: String,
    backend: Backend,
}

// One per loaded tokenizer, behind the Arc: its size does not matter.
#[allow(clippy::large_enum_variant)]
enum Backend {
    /// Parsed on first use: about 40 MB resident and 0.2 s, which a replay that only builds
    /// prompts from the shipped word list never pays. `None` if the embedded table fails
    /// to parse (it is compiled in, so only a broken build could).
    Tiktoken(OnceLock<Option<tiktoken_rs::CoreBPE>>),
    HuggingFace(tokenizers::Tokenizer),
}

/// Label used by [`Tokenizer::name`] for the built-in tokenizer.
const BUILTIN_NAME: &str = "o200k_base (built-in)";

// === impl Tokenizer ===

impl Tokenizer {
    /// Loads the tokenizer `spec` names. The built-in one parses its embedded rank table
    /// (about 0.2 s) the first time it counts, so load once and clone.
    ///
    /// A Hugging Face file that cannot be read or parsed gives an error naming the file.
    pub fn load(spec: &TokenizerSpec) -> Result<Tokenizer, PromptError> {
        let (name, backend) = match spec {
            TokenizerSpec::BuiltinO200k => {
                (BUILTIN_NAME.to_owned(), Backend::Tiktoken(OnceLock::new()))
            }
            TokenizerSpec::HuggingFace(path) => (
                path.display().to_string(),
                Backend::HuggingFace(load_hf(path)?),
            ),
        };
        Ok(Tokenizer {
            inner: Arc::new(Inner { name, backend }),
        })
    }

    /// `"o200k_base (built-in)"`, or the path of the `tokenizer.json`.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// True for the built-in o200k_base: token counts are then approximate for any model
    /// that does not use o200k, and callers should say so (a notice in logs and summary).
    pub fn is_builtin(&self) -> bool {
        matches!(self.inner.backend, Backend::Tiktoken(_))
    }

    /// Number of tokens in `text`, by really encoding it (no special tokens added).
    ///
    /// Costs a full encode (o200k: about 5M tokens/s), so it is for checks, not for the
    /// per-request hot path. A text the Hugging Face tokenizer refuses counts as 0.
    pub fn count_tokens(&self, text: &str) -> usize {
        match &self.inner.backend {
            Backend::Tiktoken(bpe) => bpe
                .get_or_init(|| {
                    tiktoken_rs::o200k_base()
                        .inspect_err(|e| tracing::error!("built-in o200k_base unusable: {e}"))
                        .ok()
                })
                .as_ref()
                .map_or(0, |bpe| bpe.encode_ordinary(text).len()),
            Backend::HuggingFace(tok) => tok.encode_fast(text, false).map_or(0, |e| e.len()),
        }
    }
}

impl fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tokenizer")
            .field("name", &self.inner.name)
            .finish_non_exhaustive()
    }
}

/// The largest `tokenizer.json` read: the largest real ones are tens of MB (Gemma 3's is
/// 33 MB); past this a file is not a tokenizer, and reading it whole (`/dev/zero`) would fill
/// memory.
pub const MAX_TOKENIZER_BYTES: u64 = 64 << 20;

/// Reads and parses a `tokenizer.json`, with truncation and padding switched off: a file
/// saved with `max_length` would otherwise silently cap every count.
fn load_hf(path: &Path) -> Result<tokenizers::Tokenizer, PromptError> {
    let json = canary_files::read_small_file(path, MAX_TOKENIZER_BYTES).map_err(|source| {
        PromptError::TokenizerRead {
            path: path.to_owned(),
            source,
        }
    })?;
    let mut tok =
        tokenizers::Tokenizer::from_bytes(&json).map_err(|source| PromptError::TokenizerParse {
            path: path.to_owned(),
            // Parsed again only on this error path.
            valid_json: serde_json::from_slice::<serde::de::IgnoredAny>(&json).is_ok(),
            source,
        })?;
    tok.with_truncation(None)
        .map_err(|source| PromptError::TokenizerParse {
            path: path.to_owned(),
            valid_json: true,
            source,
        })?;
    tok.with_padding(None);
    Ok(tok)
}

#[cfg(test)]
mod tests {
    use super::*;

    // A `--tokenizer /dev/zero` grew until the kernel killed it: a tokenizer.json is read
    // only as a regular file of at most MAX_TOKENIZER_BYTES.
    #[test]
    fn a_tokenizer_file_past_the_cap_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("tokenizer.json");
        let file = std::fs::File::create(&big).unwrap();
        file.set_len(MAX_TOKENIZER_BYTES + 1).unwrap();
        let e = load_hf(&big).unwrap_err();
        let chain = format!("{e}: {}", std::error::Error::source(&e).unwrap());
        assert!(
            chain.contains("tokenizer.json") && chain.contains("larger than 67108864 bytes"),
            "{chain}"
        );
        let e = load_hf(Path::new("/dev/zero")).unwrap_err();
        let chain = format!("{e}: {}", std::error::Error::source(&e).unwrap());
        assert!(chain.contains("not a regular file"), "{chain}");
    }

    // A well-formed JSON file that is no tokenizer drew the crate's "expected `,` or `}` at
    // line 1 column 7", which reads as a syntax error; a broken file is still told as one.
    #[test]
    fn a_json_file_that_is_no_tokenizer_is_told_from_a_broken_one() {
        let dir = tempfile::tempdir().unwrap();
        let valid = dir.path().join("valid.json");
        std::fs::write(&valid, r#"{"not":"a tokenizer"}"#).unwrap();
        let e = load_hf(&valid).unwrap_err().to_string();
        assert!(
            e.contains("valid.json (valid JSON, but not a tokenizer.json)"),
            "{e}"
        );
        let broken = dir.path().join("broken.json");
        std::fs::write(&broken, r#"{"not":"#).unwrap();
        let e = load_hf(&broken).unwrap_err().to_string();
        assert!(e.ends_with("broken.json"), "{e}");
    }

    #[test]
    fn tokenizer_is_send_sync_and_cheap_to_clone() {
        fn assert_send_sync<T: Send + Sync + Clone>() {}
        assert_send_sync::<Tokenizer>();
    }

    #[test]
    fn builtin_counts_without_special_tokens() {
        let tok = Tokenizer::load(&TokenizerSpec::BuiltinO200k).unwrap();
        assert!(tok.is_builtin());
        assert_eq!(tok.name(), BUILTIN_NAME);
        assert_eq!(tok.count_tokens(""), 0);
        assert_eq!(tok.count_tokens(" the"), 1);
        // Special-token text is counted as ordinary text, never as one special token.
        assert!(tok.count_tokens("<|endoftext|>") > 1);
    }

    #[test]
    fn missing_file_error_names_the_file() {
        let spec = TokenizerSpec::HuggingFace("/nonexistent/dir/tokenizer.json".into());
        let err = Tokenizer::load(&spec).unwrap_err();
        assert!(
            err.to_string().contains("/nonexistent/dir/tokenizer.json"),
            "{err}"
        );
    }
}

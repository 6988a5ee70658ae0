//! Prompt synthesis against real tokenizers: the built-in o200k_base, Hugging Face
//! tokenizers trained here on the embedded corpus (there is no network to fetch one), and
//! the first rows of the real Mooncake conversation trace.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use canary_core::{TracePrompt, TraceRequest};
use canary_replay::{Prompt, PromptBody, PromptBuilder, PromptError, Tokenizer, TokenizerSpec};

const CORPUS: &str = include_str!("../src/prompt/corpus.txt");
const MOONCAKE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/traces/mooncake_conversation_first2000.jsonl"
);

/// One o200k builder for the whole binary: loading o200k is the slow part.
fn o200k() -> &'static PromptBuilder {
    static BUILDER: OnceLock<PromptBuilder> = OnceLock::new();
    BUILDER.get_or_init(|| {
        let tok = Tokenizer::load(&TokenizerSpec::BuiltinO200k).unwrap();
        PromptBuilder::new(tok, 0).unwrap()
    })
}

/// A row of `input` tokens over `ids`, blocks of `block` tokens.
fn req(index: u32, input: u32, ids: &[u64], block: u32) -> TraceRequest {
    TraceRequest::new(index, index + 1, 0, None, 0, input, 16, ids.into(), block)
}

/// A row whose hash ids exactly cover `input` tokens, ids starting at `first`.
fn covered(index: u32, input: u32, first: u64, block: u32) -> TraceRequest {
    let ids: Vec<u64> = (first..first + u64::from(input.div_ceil(block))).collect();
    req(index, input, &ids, block)
}

fn text(prompt: &Prompt) -> &str {
    match &prompt.body {
        PromptBody::Text(t) => t,
        PromptBody::Messages(m) => panic!("expected text, got messages {m}"),
    }
}

/// Builds `r` and checks the count three ways: claimed, really encoded, and the
/// simulator's whitespace-word rule.
macro_rules! assert_exact {
    ($builder:expr, $req:expr) => {{
        let (builder, r) = ($builder, &$req);
        let prompt = builder.build(r, 0);
        let t = text(&prompt);
        let n = r.input_tokens as usize;
        assert_eq!(prompt.tokens, Some(r.input_tokens));
        assert_eq!(
            builder.tokenizer().count_tokens(t),
            n,
            "encoded count, {r:?}"
        );
        assert_eq!(t.split_whitespace().count(), n, "whitespace words");
        prompt
    }};
}

#[test]
fn exact_o200k_counts_for_many_lengths() {
    let b = o200k();
    assert!(b.tokenizer().is_builtin());
    assert!(b.vocabulary_len() >= 256, "{}", b.vocabulary_len());
    for (i, len) in [0, 1, 2, 511, 512, 513, 1000, 12_000, 126_000]
        .into_iter()
        .enumerate()
    {
        assert_exact!(b, covered(i as u32, len, 1000 * i as u64, 512));
        // No hash ids at all: unique blocks from the row index.
        assert_exact!(b, req(i as u32, len, &[], 512));
        // Hash ids covering only part of the prompt: the rest is unique.
        assert_exact!(b, req(i as u32, len, &[7], 512));
    }
}

#[test]
fn bailian_and_scaled_mooncake_block_sizes() {
    let b = o200k();
    for block in [16, 32] {
        for len in [1, block - 1, block, block + 1, 10 * block + 3, 4000] {
            assert_exact!(b, covered(len, len, 0, block));
        }
    }
}

#[test]
fn equal_hash_ids_give_byte_identical_prefixes() {
    let b = o200k();
    for block in [16, 32, 512] {
        let shared = [11, 12, 13];
        let a = assert_exact!(b, req(0, 4 * block + 5, &[11, 12, 13, 14, 15], block));
        let c = assert_exact!(b, req(1, 5 * block, &[11, 12, 13, 99, 98], block));
        let prefix = assert_exact!(b, req(2, 3 * block, &shared, block));
        let (a, c, n) = (text(&a), text(&c), text(&prefix).len());
        assert_eq!(a[..n], c[..n]);
        assert_eq!(&a[..n], text(&prefix));
        // The fourth blocks differ (ids 14 and 99), so the texts diverge right after.
        let fourth = |t: &str| {
            t[n..]
                .split(' ')
                .take(block as usize + 1)
                .collect::<String>()
        };
        assert_ne!(fourth(a), fourth(c));
    }
}

#[test]
fn partial_last_block_is_a_prefix_of_the_full_block() {
    let b = o200k();
    let full = assert_exact!(b, req(0, 1024, &[5, 6], 512));
    for len in [513, 600, 1023] {
        let part = assert_exact!(b, req(1, len, &[5, 6], 512));
        assert!(text(&full).starts_with(text(&part)), "len {len}");
    }
}

#[test]
fn seed_changes_the_text_and_same_seed_repeats_it() {
    let tok = o200k().tokenizer().clone();
    let seeded = PromptBuilder::new(tok.clone(), 1).unwrap();
    let again = PromptBuilder::new(tok, 1).unwrap();
    let r = covered(0, 700, 0, 512);
    assert_ne!(text(&o200k().build(&r, 0)), text(&seeded.build(&r, 0)));
    assert_eq!(seeded.build(&r, 0), again.build(&r, 0));
    assert_eq!(o200k().build(&r, 0), o200k().build(&r, 0));
    assert_exact!(&seeded, r);
}

#[test]
fn unique_blocks_differ_across_runs_and_shards_hash_id_blocks_do_not() {
    let b = o200k();
    let words = |p: &Prompt, n: usize| text(p).split(' ').take(n + 1).collect::<Vec<_>>().join(" ");
    // Two shards each renumber their rows from 0; their rows come from different trace lines.
    let shard0 = req(0, 300, &[], 512);
    let mut shard1 = req(0, 300, &[], 512);
    shard1.line = 7;
    assert_ne!(
        words(&b.build(&shard0, 1), 16),
        words(&b.build(&shard1, 1), 16)
    );
    // The same row on two runs: a fresh salt each run.
    assert_ne!(
        words(&b.build(&shard0, 1), 16),
        words(&b.build(&shard0, 2), 16)
    );
    assert_eq!(b.build(&shard0, 1), b.build(&shard0, 1));
    // Hash-id blocks are the same whatever the salt; only the uncovered tail changes.
    let covered = covered(0, 1000, 40, 512);
    assert_eq!(b.build(&covered, 1), b.build(&covered, 2));
    let tail = req(0, 600, &[40], 512);
    let (x, y) = (b.build(&tail, 1), b.build(&tail, 2));
    assert_eq!(words(&x, 512), words(&y, 512));
    assert_ne!(text(&x), text(&y));
    assert_exact!(b, tail);
}

#[test]
fn rows_without_hash_ids_are_unique() {
    let b = o200k();
    let prompts: Vec<String> = (0..50)
        .map(|i| text(&assert_exact!(b, req(i, 16, &[], 16))).to_owned())
        .collect();
    let mut distinct = prompts.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), prompts.len());
    // Index-derived blocks never coincide with hash-id blocks of the same number.
    assert_ne!(prompts[3], text(&b.build(&req(9, 16, &[3], 16), 0)));
}

#[test]
fn verbatim_trace_prompts_are_used_as_is() {
    let b = o200k();
    let mut r = req(0, 100, &[1], 16);
    r.set_prompt(Some(TracePrompt::Text("hello there".into())));
    let p = b.build(&r, 0);
    assert_eq!(p.body, PromptBody::Text("hello there".into()));
    assert_eq!(p.tokens, None);
    let messages = serde_json::json!([{"role": "user", "content": "hi"}]);
    r.set_prompt(Some(TracePrompt::Messages(messages.clone())));
    assert_eq!(b.build(&r, 0).body, PromptBody::Messages(messages));
    assert_eq!(b.build_verified(&r, 0).1, None);
}

#[test]
fn verified_build_reports_exact_counts() {
    let b = o200k();
    for len in [0, 1, 17, 512, 3000] {
        let r = covered(len, len, 40, 512);
        let (p, check) = b.build_verified(&r, 0);
        let check = check.unwrap();
        assert!(check.was_exact() && check.is_exact(), "{check:?}");
        assert_eq!(check.tail_words_changed, 0);
        assert_eq!(p, b.build(&r, 0));
    }
}

/// Trains a small BPE on the embedded corpus and saves it as a `tokenizer.json`.
fn trained_tokenizer(dir: &Path, metaspace: bool) -> PathBuf {
    use tokenizers::models::bpe::{BpeTrainerBuilder, BPE};
    use tokenizers::models::TrainerWrapper;
    use tokenizers::pre_tokenizers::byte_level::ByteLevel;
    use tokenizers::pre_tokenizers::metaspace::{Metaspace, PrependScheme};
    use tokenizers::processors::template::TemplateProcessing;
    use tokenizers::AddedToken;

    let mut tok = tokenizers::Tokenizer::new(BPE::default());
    let mut trainer = BpeTrainerBuilder::new()
        .vocab_size(4000)
        .show_progress(false)
        .special_tokens(vec![AddedToken::from("<s>", true)]);
    if metaspace {
        // SentencePiece style, with a BOS the post-processor adds (counts must skip it).
        tok.with_pre_tokenizer(Some(Metaspace::new('▁', PrependScheme::Always, true)));
        let bos = TemplateProcessing::builder()
            .try_single("<s> $A")
            .unwrap()
            .special_tokens(vec![("<s>", 0)])
            .build()
            .unwrap();
        tok.with_post_processor(Some(bos));
    } else {
        tok.with_pre_tokenizer(Some(ByteLevel::default()));
        tok.with_decoder(Some(ByteLevel::default()));
        trainer = trainer.initial_alphabet(ByteLevel::alphabet().into_iter().collect());
    }
    let mut trainer = TrainerWrapper::from(trainer.build());
    tok.train(&mut trainer, CORPUS.lines()).unwrap();
    let path = dir.join(if metaspace {
        "metaspace.json"
    } else {
        "bytelevel.json"
    });
    tok.save(&path, false).unwrap();
    path
}

#[test]
fn hugging_face_tokenizers_give_exact_counts() {
    let dir = tempfile::tempdir().unwrap();
    for metaspace in [false, true] {
        let path = trained_tokenizer(dir.path(), metaspace);
        let tok = Tokenizer::load(&TokenizerSpec::HuggingFace(path.clone())).unwrap();
        assert!(!tok.is_builtin());
        assert_eq!(tok.name(), path.display().to_string());
        let b = PromptBuilder::new(tok, 0).unwrap();
        for len in [1, 2, 15, 16, 17, 511, 512, 513, 5000] {
            for block in [16, 512] {
                assert_exact!(&b, covered(len, len, 3, block));
            }
            let (_, check) = b.build_verified(&req(len, len, &[], 32), 0);
            assert!(check.unwrap().was_exact());
        }
        let shared = text(&b.build(&req(0, 32, &[1, 2], 16), 0)).to_owned();
        assert!(text(&b.build(&req(1, 40, &[1, 2, 3], 16), 0)).starts_with(&shared));
    }
}

#[test]
fn bad_tokenizer_files_are_errors_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let invalid = dir.path().join("tokenizer.json");
    std::fs::write(&invalid, "{ not a tokenizer").unwrap();
    let missing = dir.path().join("missing.json");
    for path in [invalid, missing] {
        let err = Tokenizer::load(&TokenizerSpec::HuggingFace(path.clone())).unwrap_err();
        assert!(
            err.to_string().contains(&path.display().to_string()),
            "{err}"
        );
    }
    let err = Tokenizer::load(&TokenizerSpec::HuggingFace(dir.path().into())).unwrap_err();
    assert!(matches!(err, PromptError::TokenizerRead { .. }), "{err:?}");
}

#[test]
fn mooncake_rows_get_exact_counts_and_shared_prefixes() {
    let b = o200k();
    let trace = std::fs::read_to_string(MOONCAKE).expect(MOONCAKE);
    let rows: Vec<TraceRequest> = trace
        .lines()
        .take(50)
        .enumerate()
        .map(|(i, line)| {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let ids: Vec<u64> = v["hash_ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|id| id.as_u64().unwrap())
                .collect();
            let input = v["input_length"].as_u64().unwrap() as u32;
            req(i as u32, input, &ids, 512)
        })
        .collect();
    let block0 = text(&b.build(&req(0, 512, &[0], 512), 0)).to_owned();
    let mut sharing = 0;
    for r in &rows {
        let p = assert_exact!(b, r);
        if r.hash_ids.first() == Some(0) && r.input_tokens >= 512 {
            assert!(text(&p).starts_with(&block0), "row {}", r.index);
            sharing += 1;
        }
    }
    assert!(sharing > 10, "{sharing} rows share block 0");
}

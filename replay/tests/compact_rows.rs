//! The compact row (hash ids as runs, inline) holds exactly what the trace file says, on every
//! real trace: each row's ids, read back, equal the file's own list; and what a row costs is
//! bounded by its type, whatever the trace (issue 21: a 1M-row trace in 64 MB).

use canary_core::{HashIds, TraceRequest};
use canary_replay::trace::{self, LoadOptions, Selection};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

const TRACES: &str = "../../shared/traces";

fn real_traces() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(TRACES)
        .expect(TRACES)
        .map(|e| e.unwrap().path())
        .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("jsonl")))
        .collect();
    v.sort();
    assert!(v.len() >= 4, "real JSONL traces in {TRACES}: {v:?}");
    v
}

/// Each line's `hash_ids` as the file writes them, by 1-based line number.
fn ids_in_file(path: &Path) -> HashMap<u32, Vec<u64>> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let ids = v["hash_ids"]
                .as_array()
                .map(|a| a.iter().map(|x| x.as_u64().unwrap()).collect())
                .unwrap_or_default();
            (i as u32 + 1, ids)
        })
        .collect()
}

#[test]
fn every_real_rows_ids_read_back_as_the_file_lists_them() {
    let mut rows = 0;
    for path in real_traces() {
        let file = ids_in_file(&path);
        let t = trace::load(&path, &LoadOptions::default()).unwrap();
        for r in &t.requests {
            let want = &file[&r.line];
            assert_eq!(r.hash_ids.to_vec(), *want, "{}:{}", path.display(), r.line);
            assert_eq!(r.hash_ids.len(), want.len());
            assert_eq!(r.hash_ids, HashIds::from(want.clone()));
            // Serialized as the `Vec<u64>` it replaced.
            assert_eq!(
                serde_json::to_value(&r.hash_ids).unwrap(),
                serde_json::json!(want)
            );
            rows += 1;
        }
    }
    assert!(rows > 2000, "{rows} rows checked");
}

#[test]
fn caps_truncate_the_compact_ids_as_the_list_was() {
    let path = Path::new(TRACES).join("mooncake_conversation_first2000.jsonl");
    let file = ids_in_file(&path);
    let t = trace::load(&path, &LoadOptions::default()).unwrap();
    let sel = Selection {
        max_input_tokens: Some(3000),
        scale_lengths: Some(0.5),
        ..Selection::default()
    };
    let (t, report) = t.select(&sel).unwrap();
    assert!(report.input_capped > 0);
    for r in &t.requests {
        let full = &file[&r.line];
        let keep = (r.input_tokens.div_ceil(r.block_size) as usize).min(full.len());
        assert_eq!(r.hash_ids.to_vec(), full[..keep], "line {}", r.line);
    }
}

#[test]
fn real_mooncake_rows_cost_their_struct_and_nothing_on_the_heap() {
    // 16 bytes for the ids (the `Vec<u64>` header they replaced took 24), no allocation
    // behind them; the rare fields boxed out of the row.
    assert_eq!(std::mem::size_of::<HashIds>(), 16);
    assert!(
        std::mem::size_of::<TraceRequest>() <= 72,
        "{}",
        std::mem::size_of::<TraceRequest>()
    );
    for name in [
        "mooncake_conversation_first2000.jsonl",
        "mooncake_arxiv_first20.jsonl",
    ] {
        let t = trace::load(&Path::new(TRACES).join(name), &LoadOptions::default()).unwrap();
        let heap: usize = t.requests.iter().map(|r| r.hash_ids.heap_bytes()).sum();
        let listed: usize = t.requests.iter().map(|r| r.hash_ids.len() * 8).sum();
        // The Vecs held `listed` bytes; the runs at most 1/20 of that.
        assert!(
            heap * 20 <= listed,
            "{name}: {heap} heap bytes for {listed}"
        );
    }
}

#[test]
fn a_loaded_trace_holds_44_bytes_a_real_row_or_less() {
    // Issue 21: 1M rows in 64 MB, about 16 of which are not the trace. Held as
    // `TraceRequest`s, these rows took 72 bytes each and more; packed, 32 bytes and their
    // ids' runs (8 bytes a row of the conversation slice), sessions, block size and rare
    // fields out of the row. Selecting (scaling, capping) keeps it so.
    for name in [
        "mooncake_conversation_first2000.jsonl",
        "mooncake_synthetic.jsonl",
        "mooncake_arxiv_first20.jsonl",
    ] {
        let t = trace::load(&Path::new(TRACES).join(name), &LoadOptions::default()).unwrap();
        let per_row = t.requests.heap_bytes() as f64 / t.requests.len() as f64;
        eprintln!("{name}: {per_row:.1} bytes a row");
        assert!(per_row <= 44.0, "{name}: {per_row:.1} bytes a row");
        let sel = Selection {
            scale_lengths: Some(1.0 / 64.0),
            max_input_tokens: Some(100),
            max_output_tokens: Some(8),
            ..Selection::default()
        };
        let (t, _) = t.select(&sel).unwrap();
        let per_row = t.requests.heap_bytes() as f64 / t.requests.len() as f64;
        assert!(per_row <= 44.0, "{name} selected: {per_row:.1} bytes a row");
    }
}

#[test]
fn digests_of_the_real_traces_are_what_they_were_with_vec_ids() {
    // Written by main at 2267b75 (hash ids in a `Vec<u64>`), in `summary.json`'s
    // `run.trace.digest`: shards and merges compare these across versions.
    for (name, want) in [
        (
            "mooncake_conversation_first2000.jsonl",
            "fnv1a64:4d5e33fce39f3d45",
        ),
        ("mooncake_synthetic.jsonl", "fnv1a64:013c8219fe2d588a"),
        ("bailian_documented_row.jsonl", "fnv1a64:1c98fb76ff23676f"),
        ("burstgpt_readme_rows.csv", "fnv1a64:e0a16745f460a3b7"),
    ] {
        let t = trace::load(&Path::new(TRACES).join(name), &LoadOptions::default()).unwrap();
        assert_eq!(trace::digest(&t), want, "{name}");
    }
}

// Inputs scale with their blocks: the real Bailian row's 16-token blocks at 0.05 become
// 1-token blocks (0.8, rounded up to the least), so its 502 input tokens become 32 (one per
// block), 0.064 of them where outputs get 0.05. The selection says which factor inputs got.
#[test]
fn the_input_factor_scaling_gave_is_said_when_blocks_round_it() {
    let path = Path::new(TRACES).join("bailian_documented_row.jsonl");
    let t = trace::load(&path, &LoadOptions::default()).unwrap();
    let sel = Selection {
        scale_lengths: Some(0.05),
        ..Selection::default()
    };
    let (t, report) = t.select(&sel).unwrap();
    assert_eq!(t.requests.get(0).unwrap().input_tokens, 32);
    let eff = report.input_scale_effective.unwrap();
    assert!((eff - 32.0 / 502.0).abs() < 1e-12, "{eff}");
    // Mooncake's 512-token blocks scale closely.
    let path = Path::new(TRACES).join("mooncake_conversation_first2000.jsonl");
    let t = trace::load(&path, &LoadOptions::default()).unwrap();
    let (_, report) = t.select(&sel).unwrap();
    let eff = report.input_scale_effective.unwrap();
    assert!((eff / 0.05 - 1.0).abs() < 0.01, "{eff}");
    // Without scaling, nothing to say.
    let path = Path::new(TRACES).join("bailian_documented_row.jsonl");
    let t = trace::load(&path, &LoadOptions::default()).unwrap();
    let (_, report) = t.select(&Selection::default()).unwrap();
    assert_eq!(report.input_scale_effective, None);
}

//! Integration tests of the trace layer (`canary_replay::trace`): the real trace files under
//! `shared/traces/` (see its SOURCES.md), generated BurstGPT and Bailian rows, one test per
//! error class, `skip_invalid`, selection maths and analysis numbers.

use std::path::Path;

use canary_replay::trace::{self, LoadOptions, Trace};

macro_rules! trace_file {
    ($name:literal) => {
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/traces/", $name)
    };
}

fn load(path: &str) -> Trace {
    trace::load(Path::new(path), &LoadOptions::default()).unwrap_or_else(|e| panic!("{e:#?}"))
}

#[test]
fn mooncake_conversation_first2000() {
    let t = load(trace_file!("mooncake_conversation_first2000.jsonl"));
    assert_eq!(t.requests.len(), 2000);
    let a = trace::analyze(&t);
    println!("{a}");
}

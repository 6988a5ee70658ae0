//! The trace bundled into the binary for the demo: the first 300 rows of the real Mooncake
//! conversation trace (see `daemon/data/NOTICE` for source and license).

/// Name the bundled trace goes by in reports.
pub const BUNDLED_TRACE_NAME: &str = "bundled:mooncake_conversation_first300.jsonl";

/// The trace's bytes.
pub const BUNDLED_TRACE: &str = include_str!("../data/mooncake_conversation_first300.jsonl");

//! A digest of a loaded trace: what every row asks for, as canaryd read it. Shards of one
//! replay each load the whole trace and record its digest, so `canaryd merge` can tell that
//! they replayed the same trace (a file edited between two shards' starts, another file
//! under the same name) without reading the trace again.
//!
//! FNV-1a over a fixed little-endian encoding of each row's fields: stable across builds and
//! hosts, cheap (a few ns per byte), and meant to catch mistakes, not adversaries.

use super::Trace;

const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const PRIME: u64 = 0x0000_0100_0000_01b3;

struct Fnv(u64);

impl Fnv {
    fn bytes(&mut self, b: &[u8]) {
        for &x in b {
            self.0 ^= u64::from(x);
            self.0 = self.0.wrapping_mul(PRIME);
        }
    }
    fn u64(&mut self, x: u64) {
        self.bytes(&x.to_le_bytes());
    }
}

/// `fnv1a64:<16 hex digits>` of `trace`'s format and rows (line, timestamp, session, turn,
/// delay, lengths, block size, hash ids, and any prompt or extra fields the rows carry).
pub fn digest(trace: &Trace) -> String {
    fnv(trace, Lines::File)
}

/// [`digest`] of a trace synthesized on the fly, which keeps its input's lines: each row's
/// position in time order (1-based) stands for its line, which is the line it has in the file
/// `canaryd synthesize` writes (in time order, one row a line). So a synthesized file and the
/// same synthesis on the fly show one digest, whatever the input's lines were (a BurstGPT
/// header, blank lines, rows out of time order, skipped rows).
pub fn digest_synthesized(trace: &Trace) -> String {
    fnv(trace, Lines::Positions)
}

/// Which line numbers a digest hashes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Lines {
    /// The rows' own.
    File,
    /// Their 1-based positions in time order.
    Positions,
}

fn fnv(trace: &Trace, lines: Lines) -> String {
    let mut h = Fnv(OFFSET);
    h.bytes(trace.format.name().as_bytes());
    h.u64(trace.requests.len() as u64);
    for (i, r) in trace.requests.iter().enumerate() {
        h.u64(match lines {
            Lines::File => u64::from(r.line),
            Lines::Positions => i as u64 + 1,
        });
        h.u64(r.timestamp_us);
        h.u64(r.session.map_or(u64::MAX, |s| s));
        h.u64(u64::from(r.turn));
        h.u64(r.delay_us().map_or(u64::MAX, |d| d));
        h.u64(u64::from(r.input_tokens));
        h.u64(u64::from(r.output_tokens));
        h.u64(u64::from(r.block_size));
        h.u64(r.hash_ids.len() as u64);
        for id in &r.hash_ids {
            h.u64(id);
        }
        for text in [
            r.prompt()
                .map(|p| serde_json::to_string(p).unwrap_or_default()),
            r.extra().map(|e| e.to_string()),
        ] {
            let text = text.unwrap_or_default();
            h.u64(text.len() as u64);
            h.bytes(text.as_bytes());
        }
    }
    format!("fnv1a64:{:016x}", h.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{parse, LoadOptions};
    use std::path::Path;

    const ROWS: &str = "{\"timestamp\":0,\"input_length\":600,\"output_length\":5,\"hash_ids\":[1,2]}\n\
                        {\"timestamp\":10,\"input_length\":100,\"output_length\":7,\"hash_ids\":[3]}\n";

    fn of(text: &str) -> String {
        digest(&parse(text.as_bytes(), Path::new("t"), &LoadOptions::default()).unwrap())
    }

    #[test]
    fn equal_rows_give_one_digest_and_any_change_another() {
        let d = of(ROWS);
        assert!(d.starts_with("fnv1a64:") && d.len() == 8 + 16, "{d}");
        assert_eq!(d, of(ROWS));
        assert_ne!(
            d,
            of(&ROWS.replace("\"output_length\":7", "\"output_length\":8"))
        );
        assert_ne!(d, of(&ROWS.replace("[3]", "[4]")));
        assert_ne!(d, of(ROWS.lines().next().unwrap()));
    }
}

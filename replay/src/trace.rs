//! Production trace files: format detection, streaming parse and validation into
//! [`TraceRequest`]s, windowing and length scaling ([`Trace::select`]) and a summary of what a
//! trace asks of a server ([`analyze`]).
//!
//! Three formats are read, detected from the first non-empty line (or forced with
//! [`LoadOptions::format`]):
//!
//! * **Mooncake** JSONL: `timestamp` (ms), `input_length`, `output_length`, `hash_ids`
//!   (512-token blocks), plus aiperf's optional `session_id`, `delay`, `text_input`,
//!   `messages` and `extra`.
//! * **Bailian** JSONL (Qwen usage traces): `chat_id`, `parent_chat_id`, `timestamp` (s),
//!   lengths, `type`, `turn`, `hash_ids` (16-token blocks).
//! * **BurstGPT** CSV: `Timestamp` (s), `Model`, `Request tokens`, `Response tokens`, … with
//!   optional `Session ID`.
//!
//! Files are read line by line; a row is kept only in its packed form ([`TraceRows`]: 32
//! bytes and its ids in one arena), and read back as a [`TraceRequest`] when needed.
//! Requests come out sorted by timestamp (stable), with `index` 0-based and contiguous (a
//! row's position), and `timestamp_us` in the trace's own absolute clock (the scheduler
//! subtracts the first).
//!
//! [`TraceRequest`]: canary_core::TraceRequest
//!
//! ```no_run
//! # use std::path::Path;
//! use canary_replay::trace::{self, LoadOptions, Selection};
//! let trace = trace::load(Path::new("mooncake.jsonl"), &LoadOptions::default())?;
//! let sel = Selection { max_requests: Some(100), ..Selection::default() };
//! let (trace, _dropped) = trace.select(&sel)?;
//! println!("{}", trace::analyze(&trace));
//! # Ok::<(), canary_replay::trace::TraceError>(())
//! ```

mod analyze;
mod bailian;
mod burstgpt;
mod digest;
mod error;
mod field;
mod id_set;
mod kinds;
mod mooncake;
mod read;
mod select;
mod skipped;
mod synthesize;

use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use canary_core::TraceRows;
use serde::Serialize;

pub use analyze::{analyze, Burst, LengthStats, PrefixReuse, SessionStats, TraceAnalysis};
pub use digest::{digest, digest_synthesized};
pub use error::{JsonPlace, JsonSyntax, TraceError, TraceErrorKind};
pub use kinds::RowKinds;
pub use select::{Number, Selection, SelectionReport, Shard};
pub use synthesize::{synthesize, written_format, Synthesis, SynthesisError, SynthesisReport};

use read::{Guard, Lines, Rows};

/// How many warning messages a [`LoadReport`] keeps; later ones are only counted.
pub const MAX_WARNINGS: usize = 20;

/// The longest schedule a trace may describe: no request more than this after the trace's
/// first, and no Mooncake `delay` longer. Far above any real trace (BurstGPT's files span
/// months), it catches a timestamp in the wrong unit (epoch milliseconds in a seconds column)
/// at load time, naming the row, instead of a deadline centuries away.
pub const MAX_SPAN: std::time::Duration = std::time::Duration::from_secs(365 * 24 * 3600);

/// The longest input or output a row may ask for, in tokens, unless [`LoadOptions::length_limit`]
/// says otherwise: the largest context any model is served with today, Llama 4 Scout's 10M
/// tokens (Meta, "The Llama 4 herd", 5 April 2025, and the model card of
/// `meta-llama/Llama-4-Scout-17B-16E-Instruct`). Magic's LTM-2-mini was announced with 100M
/// (magic.dev/blog/100m-token-context-windows, August 2024) but is not served to anyone.
/// A longer row is a unit mistake or hostile input: the prompt built for it would be sized by
/// the number (`input_length` 1e9 is a 7 GB allocation), so it is refused at load, naming the
/// row.
pub const DEFAULT_LENGTH_LIMIT: u32 = 10_000_000;

/// The highest [`LoadOptions::length_limit`] (and [`Config::length_limit`](crate::Config))
/// may be set to: the longest context ever announced, Magic's LTM-2-mini's 100M tokens (see
/// [`DEFAULT_LENGTH_LIMIT`]). A prompt of that many tokens is about 0.7 GB; the limit was
/// unbounded, and `--length-limit 4294967295 --isl 4000000000` aborted the process on a
/// 28 GB allocation instead of refusing the setting.
pub const MAX_LENGTH_LIMIT: u32 = 100_000_000;

/// The longest line a trace may hold, in bytes, unless [`LoadOptions::max_line_bytes`] says
/// otherwise. Real rows are far shorter (the longest in the published Mooncake traces,
/// 191k tokens in 374 hash ids, is 2.7 KB), but a row of [`DEFAULT_LENGTH_LIMIT`] tokens in
/// Bailian's 16-token blocks lists 625,000 hash ids, up to 13.75 MB written out (20 digits,
/// a comma and a space each): 16 MiB keeps every well-formed row loadable, and bounds the
/// memory a file without line breaks (`/dev/zero`, a FIFO) can take before it is refused.
pub const DEFAULT_MAX_LINE_BYTES: usize = 16 << 20;

/// A supported trace file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TraceFormat {
    /// Mooncake / aiperf JSONL: ms timestamps, 512-token hash blocks.
    Mooncake,
    /// Alibaba Bailian (Qwen) JSONL: chat chains, s timestamps, 16-token hash blocks.
    Bailian,
    /// BurstGPT CSV: s timestamps, lengths only (every prompt unique).
    BurstGpt,
}

impl TraceFormat {
    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Mooncake => "mooncake",
            Self::Bailian => "bailian",
            Self::BurstGpt => "burstgpt",
        }
    }

    /// The name of the timestamp field, its unit and microseconds per unit.
    pub(crate) fn timestamp_field(self) -> (&'static str, &'static str, u64) {
        match self {
            Self::Mooncake => ("timestamp", "ms", 1_000),
            Self::Bailian => ("timestamp", "s", 1_000_000),
            Self::BurstGpt => ("Timestamp", "s", 1_000_000),
        }
    }

    /// Tokens per `hash_ids` block in this format.
    pub fn block_size(self) -> u32 {
        match self {
            Self::Mooncake | Self::BurstGpt => 512,
            Self::Bailian => 16,
        }
    }

    /// Guesses the format from a trace's first non-empty line: a JSON object with `chat_id` is
    /// Bailian, one with `input_length`, `hash_ids` or `timestamp` is Mooncake, a CSV header
    /// starting with `Timestamp,` is BurstGPT; a line that starts like a JSON object but does
    /// not parse is taken as Mooncake. A load looks further ([`load`] reads the first rows that
    /// parse, see [`DETECT_ROWS`]).
    pub fn detect(first_line: &[u8]) -> Option<Self> {
        match Sniff::of(first_line) {
            Sniff::Format(f) => Some(f),
            Sniff::Unparsed => Some(Self::Mooncake),
            Sniff::Unknown => None,
        }
    }
}

/// How many rows that parse as JSON objects a load reads to tell Mooncake from Bailian: a
/// Bailian trace whose first line is damaged, or lacks `chat_id`, was read as Mooncake
/// (seconds taken as milliseconds, chat chains dropped) when only the first line was read.
pub const DETECT_ROWS: usize = 16;
/// Lines, and bytes, read at most looking for them.
const DETECT_LINES: usize = 256;
const DETECT_BYTES: usize = 16 << 20;

/// What one line says of the format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sniff {
    Format(TraceFormat),
    /// Starts like a JSON object but does not parse as one.
    Unparsed,
    Unknown,
}

impl Sniff {
    fn of(line: &[u8]) -> Sniff {
        let line = line
            .strip_prefix(b"\xEF\xBB\xBF")
            .unwrap_or(line)
            .trim_ascii();
        if line.starts_with(b"Timestamp,") {
            return Sniff::Format(TraceFormat::BurstGpt);
        }
        if !line.starts_with(b"{") {
            return Sniff::Unknown;
        }
        let Ok(obj) = serde_json::from_slice::<BTreeMap<&str, serde::de::IgnoredAny>>(line) else {
            return Sniff::Unparsed;
        };
        if obj.contains_key("chat_id") {
            Sniff::Format(TraceFormat::Bailian)
        } else if ["input_length", "hash_ids", "timestamp"]
            .iter()
            .any(|k| obj.contains_key(k))
        {
            Sniff::Format(TraceFormat::Mooncake)
        } else {
            Sniff::Unknown
        }
    }
}

/// Tells Mooncake from Bailian by the first [`DETECT_ROWS`] rows that parse, from `first`
/// (line `line`, which did not parse or parsed as Mooncake) on: any with `chat_id` makes the
/// trace Bailian (a Mooncake row with one is refused anyway), else Mooncake. When none parses:
/// Mooncake, whose parser then names line 1's error, or with `skip_invalid` a refusal (rows
/// skipped until one parses would be read in a guessed format). The lines read are handed back.
fn detect_json<R: BufRead>(
    lines: &mut Lines<'_, R>,
    name: &Path,
    line: u64,
    first: Vec<u8>,
    skip_invalid: bool,
) -> Result<TraceFormat, TraceError> {
    let (mut parsed, mut bailian) = (0, false);
    let mut bytes = first.len();
    let mut held = vec![(line, first)];
    let mut text: &[u8] = &held[0].1;
    loop {
        match Sniff::of(text) {
            Sniff::Format(f) => {
                parsed += 1;
                bailian |= f == TraceFormat::Bailian;
            }
            // A JSON object without the keys of either: a row error for the parser.
            Sniff::Unknown => parsed += 1,
            Sniff::Unparsed => {}
        }
        if bailian || parsed >= DETECT_ROWS || held.len() >= DETECT_LINES || bytes >= DETECT_BYTES {
            break;
        }
        let Some((n, next)) = lines.next_line()? else {
            break;
        };
        bytes += next.len();
        held.push((n, next.to_vec()));
        text = &held.last().expect("pushed").1;
    }
    let last = held.last().map_or(line, |&(n, _)| n);
    lines.hand_back(held);
    match (bailian, parsed) {
        (true, _) => Ok(TraceFormat::Bailian),
        (false, 0) if skip_invalid => Err(TraceError::Undetected {
            path: name.into(),
            line,
            reason: format!("no line of lines {line} to {last} is a JSON object"),
        }),
        _ => Ok(TraceFormat::Mooncake),
    }
}

/// The compressed format whose magic bytes `first_line` starts with, if any: a trace given
/// still compressed (`trace.jsonl.gz`) is named so rather than quoted as binary.
fn compression(first_line: &[u8]) -> Option<&'static str> {
    const MAGIC: [(&[u8], &str); 5] = [
        (b"\x1f\x8b", "gzip"),
        (b"\x28\xb5\x2f\xfd", "zstd"),
        (b"\xfd7zXZ\x00", "xz"),
        (b"BZh", "bzip2"),
        (b"PK\x03\x04", "zip"),
    ];
    let (magic, name) = MAGIC.iter().find(|(m, _)| first_line.starts_with(m))?;
    // bzip2's magic is text: `BZh` and a block size digit.
    let bzip2_digit = |b: &u8| (b'1'..=b'9').contains(b);
    match *name {
        "bzip2" if !first_line.get(magic.len()).is_some_and(bzip2_digit) => None,
        name => Some(name),
    }
}

impl fmt::Display for TraceFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A format or policy name that is not one of the known ones.
#[derive(Debug, Clone, thiserror::Error)]
#[error("unknown {what} {name:?} (expected one of: {expected})")]
pub struct ParseNameError {
    what: &'static str,
    name: String,
    expected: &'static str,
}

impl FromStr for TraceFormat {
    type Err = ParseNameError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "mooncake" => Ok(Self::Mooncake),
            "bailian" => Ok(Self::Bailian),
            "burstgpt" => Ok(Self::BurstGpt),
            _ => Err(ParseNameError {
                what: "trace format",
                name: s.into(),
                expected: "mooncake, bailian, burstgpt",
            }),
        }
    }
}

/// What to do with BurstGPT rows whose `Response tokens` is 0 (failed in the original service).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FailedPolicy {
    /// Drop them and count them in [`LoadReport::failed_skipped`].
    #[default]
    Skip,
    /// Keep them, with `output_tokens` 0 (the dispatcher decides what to ask for), and count
    /// them in [`LoadReport::failed_kept`].
    Send,
}

impl fmt::Display for FailedPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Skip => "skip",
            Self::Send => "send",
        })
    }
}

impl FromStr for FailedPolicy {
    type Err = ParseNameError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "skip" => Ok(Self::Skip),
            "send" => Ok(Self::Send),
            _ => Err(ParseNameError {
                what: "failed-row policy",
                name: s.into(),
                expected: "skip, send",
            }),
        }
    }
}

/// Whether a load keeps the rows' verbatim prompts (Mooncake `text_input`, `messages`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Prompts {
    /// Keep them, for a replay to send.
    #[default]
    Keep,
    /// Check them and drop them, for a caller that never sends the rows (`analyze-trace`,
    /// `synthesize`): a kept `messages` array is a JSON tree built per row, about five times
    /// its text (825 MB for a 161 MB trace, bench/RESULTS.md). The checks and their errors are
    /// the same (`text_input` a string, `messages` an array, its numbers and nesting read as
    /// when built), but `messages` is read through, never built, and neither is stored:
    /// [`Trace::skipped_prompts`] lists the rows that had one.
    Skip,
}

/// How to read a trace file.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Force a format instead of detecting it from the first line.
    pub format: Option<TraceFormat>,
    /// Skip invalid rows (counting them, keeping the first [`MAX_WARNINGS`] messages) instead
    /// of failing on the first one. File-level errors (unreadable, empty, unknown format, bad
    /// CSV header) still fail.
    pub skip_invalid: bool,
    /// What to do with BurstGPT failed rows.
    pub burstgpt_failed: FailedPolicy,
    /// Rows asking for more input or output tokens than this are invalid (default
    /// [`DEFAULT_LENGTH_LIMIT`]; at most [`MAX_LENGTH_LIMIT`]).
    pub length_limit: u32,
    /// A line (a CSV record) longer than this many bytes ends the load with
    /// [`TraceError::LineTooLong`] (default [`DEFAULT_MAX_LINE_BYTES`]).
    pub max_line_bytes: usize,
    /// Set it to stop a load in progress: it ends with [`TraceError::Stopped`] at the next
    /// read. A read blocked on a pipe that sends nothing does not see it; a caller that must
    /// not wait loads on a thread of its own.
    pub stop: Option<Arc<AtomicBool>>,
    /// Whether the rows' verbatim prompts are kept (default) or only checked.
    pub prompts: Prompts,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            format: None,
            skip_invalid: false,
            burstgpt_failed: FailedPolicy::default(),
            length_limit: DEFAULT_LENGTH_LIMIT,
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            stop: None,
            prompts: Prompts::Keep,
        }
    }
}

/// What loading a trace skipped, kept or noticed.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LoadReport {
    /// Data rows read (non-empty JSONL lines, CSV records).
    pub rows: u64,
    /// Rows that became requests.
    pub requests: u64,
    /// Invalid rows skipped (only with `skip_invalid`).
    pub invalid_skipped: u64,
    /// Those invalid rows by error kind.
    pub invalid_by_kind: BTreeMap<TraceErrorKind, u64>,
    /// Bailian rows whose parent chain cannot be followed (the parent never appears, is part
    /// of a cycle, or is timestamped after the row), kept as the root of their own session
    /// (only with `skip_invalid`).
    pub orphans_rerooted: u64,
    /// Bailian rows whose `turn` field contradicts the depth of their parent chain; the chain
    /// wins (only with `skip_invalid`).
    pub turn_mismatches: u64,
    /// BurstGPT failed rows (0 response tokens) dropped.
    pub failed_skipped: u64,
    /// BurstGPT failed rows kept ([`FailedPolicy::Send`]).
    pub failed_kept: u64,
    /// Requests by category: Bailian `type`, BurstGPT `Model`; empty for Mooncake.
    pub categories: BTreeMap<String, u64>,
    /// The first [`MAX_WARNINGS`] warning messages (skipped rows, reroots).
    pub warnings: Vec<String>,
    /// Warnings beyond those kept.
    pub warnings_omitted: u64,
}

/// Categories named in a [`LoadReport`] at most; a trace's text, so it is bounded.
pub const MAX_CATEGORIES: usize = 64;
/// The longest category name kept (bytes).
pub const CATEGORY_LIMIT: usize = 64;
/// Where rows of categories past [`MAX_CATEGORIES`] are counted.
pub const OTHER_CATEGORIES: &str = "(other)";

impl LoadReport {
    /// Records a warning message, keeping only the first [`MAX_WARNINGS`].
    pub fn warn(&mut self, message: impl fmt::Display) {
        if self.warnings.len() < MAX_WARNINGS {
            self.warnings.push(message.to_string());
        } else {
            self.warnings_omitted += 1;
        }
    }

    /// Counts a row of category `name`: at most [`MAX_CATEGORIES`] are named, each cut to
    /// [`CATEGORY_LIMIT`] bytes and printable; past them rows count under [`OTHER_CATEGORIES`].
    fn count_category(&mut self, name: &str) {
        let name = canary_core::printable(canary_core::prefix_within(name, CATEGORY_LIMIT));
        if let Some(n) = self.categories.get_mut(name.as_ref()) {
            *n += 1;
            return;
        }
        let name = if self.categories.len() < MAX_CATEGORIES {
            name.into_owned()
        } else {
            OTHER_CATEGORIES.to_owned()
        };
        *self.categories.entry(name).or_insert(0) += 1;
    }
}

/// A loaded trace: its requests in replay order and what loading it reported.
#[derive(Debug, Clone)]
pub struct Trace {
    /// The file (or name given to [`parse`]).
    pub path: PathBuf,
    /// Its format.
    pub format: TraceFormat,
    /// Requests sorted by timestamp, `index` 0-based and contiguous.
    pub requests: TraceRows,
    /// What was skipped or noticed while loading.
    pub report: LoadReport,
    /// Bailian's `type` of each row, by line (for `canaryd synthesize` to write it again);
    /// `None` for the other formats.
    pub kinds: Option<RowKinds>,
    /// The trace time the schedule starts from when it is not the first request kept: a
    /// shard's is the window's first request, whichever shard owns it, so every shard's
    /// schedule has one origin and together they keep the trace's timing.
    pub origin_us: Option<u64>,
    /// With [`Prompts::Skip`], the lines of the rows that carried a verbatim prompt, which was
    /// checked and not kept (ascending); empty otherwise.
    pub skipped_prompts: Vec<u32>,
}

impl Trace {
    /// True when `req`'s row carried a verbatim prompt, kept or skipped.
    pub fn carries_prompt(&self, req: &canary_core::TraceRequest) -> bool {
        req.prompt().is_some() || self.skipped_prompts.binary_search(&req.line).is_ok()
    }
}

/// Opens and parses a trace file (see [`parse`]).
pub fn load(path: &Path, opts: &LoadOptions) -> Result<Trace, TraceError> {
    let file = File::open(path).map_err(|source| TraceError::Io {
        path: path.into(),
        line: None,
        source,
    })?;
    parse_guarded(Guard::new(file, opts), path, opts)
}

/// Parses a trace from any reader; `name` is used in error messages and [`Trace::path`].
pub fn parse(reader: impl BufRead, name: &Path, opts: &LoadOptions) -> Result<Trace, TraceError> {
    parse_guarded(Guard::new(reader, opts), name, opts)
}

/// Every byte goes through the [`Guard`], which bounds lines and sees the stop flag.
fn parse_guarded<R: Read>(
    guard: Guard<R>,
    name: &Path,
    opts: &LoadOptions,
) -> Result<Trace, TraceError> {
    let mut lines = Lines::new(BufReader::with_capacity(1 << 18, guard), name);
    let Some((line, first)) = lines.next_line()? else {
        return Err(TraceError::Empty {
            path: name.into(),
            rows: 0,
            format: None,
        });
    };
    // Whatever `--format` says: a compressed file is no trace of any format.
    if let Some(compression) = compression(first) {
        return Err(TraceError::Compressed {
            path: name.into(),
            line,
            compression,
        });
    }
    let format = match opts.format.map_or_else(|| Sniff::of(first), Sniff::Format) {
        Sniff::Format(TraceFormat::Mooncake) | Sniff::Unparsed if opts.format.is_none() => {
            let first = first.to_vec();
            detect_json(&mut lines, name, line, first, opts.skip_invalid)?
        }
        Sniff::Format(f) => {
            lines.unread();
            f
        }
        Sniff::Unparsed | Sniff::Unknown => {
            let text = String::from_utf8_lossy(first);
            return Err(TraceError::UnknownFormat {
                path: name.into(),
                line,
                found: text.trim().chars().take(40).collect(),
            });
        }
    };
    let mut rows = Rows::new(name, opts);
    match format {
        TraceFormat::Mooncake => mooncake::parse(&mut lines, &mut rows)?,
        TraceFormat::Bailian => bailian::parse(&mut lines, &mut rows)?,
        TraceFormat::BurstGpt => burstgpt::parse(&mut lines, &mut rows)?,
    }
    rows.finish(format)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compressed_files_are_known_by_their_magic_bytes() {
        // Each format's magic, as its specification gives it (RFC 1952, RFC 8878, the xz and
        // bzip2 file formats, PKWARE's APPNOTE).
        for (start, name) in [
            (&b"\x1f\x8b\x08\x08"[..], "gzip"),
            (b"\x28\xb5\x2f\xfd\x24", "zstd"),
            (b"\xfd7zXZ\x00\x00", "xz"),
            (b"BZh91AY&SY", "bzip2"),
            (b"PK\x03\x04\x14\x00", "zip"),
        ] {
            assert_eq!(compression(start), Some(name));
        }
        // Text that merely starts alike is not compressed.
        for text in [
            &b"BZh,1,2"[..],
            b"{\"timestamp\": 0}",
            b"Timestamp,Model",
            b"PK",
        ] {
            assert_eq!(compression(text), None);
        }
    }

    #[test]
    fn categories_are_bounded_in_number_and_length() {
        let mut report = LoadReport::default();
        report.count_category("gpt-4\u{1b}[2J");
        report.count_category(&"x".repeat(1 << 20));
        for i in 0..1000 {
            report.count_category(&format!("model-{i}"));
        }
        report.count_category("gpt-4\u{1b}[2J");
        assert_eq!(report.categories.len(), MAX_CATEGORIES + 1);
        assert_eq!(report.categories[r"gpt-4\u{1b}[2J"], 2);
        assert!(report
            .categories
            .keys()
            .all(|k| k.len() <= CATEGORY_LIMIT * 6));
        assert!(report.categories.contains_key(&"x".repeat(CATEGORY_LIMIT)));
        assert_eq!(
            report.categories[OTHER_CATEGORIES],
            1002 - MAX_CATEGORIES as u64
        );
        assert_eq!(report.categories.values().sum::<u64>(), 1003);
    }
}

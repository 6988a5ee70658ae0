//! The one error type of the trace layer, and the small enum used to count errors by kind.
//!
//! Every row-level variant names the file, the 1-based line and (where one applies) the field,
//! in the shape `file:line: field "name": expected …, found …`, so that a user can open the
//! file at the right place. Causes from `std::io` and `serde_json` are kept as
//! `#[source]` and are not repeated in the message: print the chain (`{:#}` with anyhow).

use std::path::PathBuf;

use serde::Serialize;

/// Why a trace could not be loaded or selected.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The file could not be opened or read.
    #[error("{}: cannot read trace{}", path.display(), at_line(*line))]
    Io {
        /// The trace file.
        path: PathBuf,
        /// The line being read when the error happened, if reading had started.
        line: Option<u64>,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A line is longer than the limit: not a trace, or a row far beyond any
    /// real one. Not skippable: the rest of the line would have to be read to skip it, and a
    /// file without line breaks never ends.
    #[error(
        "{}:{line}: line longer than {limit} bytes (max_line_bytes); is this a trace file?",
        path.display()
    )]
    LineTooLong {
        /// The trace file.
        path: PathBuf,
        /// The line that is too long.
        line: u64,
        /// The limit, in bytes.
        limit: usize,
    },
    /// The load was stopped ([`LoadOptions::stop`](super::LoadOptions::stop)).
    #[error("{}: loading stopped at line {line}", path.display())]
    Stopped {
        /// The trace file.
        path: PathBuf,
        /// The line being read.
        line: u64,
    },
    /// The file holds no row at all, or every row was skipped as invalid or failed.
    #[error(
        "{}: empty trace: no usable rows{} ({rows} rows read)",
        path.display(),
        format.map_or(String::new(), |f| format!(" in the {f} format"))
    )]
    Empty {
        /// The trace file.
        path: PathBuf,
        /// Data rows read (all of them skipped).
        rows: u64,
        /// The format the rows were read as (none when the file holds no line).
        format: Option<super::TraceFormat>,
    },
    /// No line of the trace's first ones tells its format: none parses as a JSON object (with
    /// `--skip-invalid`, guessing would read the rows that do parse in a format maybe not
    /// theirs: Bailian's seconds as Mooncake's milliseconds).
    #[error(
        "{}:{line}: cannot tell the trace format: {reason}; pass --format (mooncake or bailian)",
        path.display()
    )]
    Undetected {
        /// The trace file.
        path: PathBuf,
        /// The first line inspected.
        line: u64,
        /// What was inspected and why it did not tell.
        reason: String,
    },
    /// The first non-empty line matches none of the known formats.
    #[error(
        "{}:{line}: unknown trace format: first line starts with {found:?} (expected a Mooncake \
         or Bailian JSON object, or a BurstGPT CSV header starting with `Timestamp,`)",
        path.display()
    )]
    UnknownFormat {
        /// The trace file.
        path: PathBuf,
        /// The line that was inspected.
        line: u64,
        /// The beginning of that line.
        found: String,
    },
    /// The file starts with the magic bytes of a compressed format: canaryd reads plain
    /// JSONL and CSV only. Its bytes are not quoted (binary, and of no help).
    #[error(
        "{}: unknown trace format: the file looks {compression}-compressed (it starts with \
         {compression}'s magic bytes): decompress it first; canaryd reads plain JSONL or CSV",
        path.display()
    )]
    Compressed {
        /// The trace file.
        path: PathBuf,
        /// The line that was inspected (the first non-empty one).
        line: u64,
        /// The compression its magic bytes name: `gzip`, `zstd`, `xz`, `bzip2`, `zip`.
        compression: &'static str,
    },
    /// A JSONL row is not valid JSON (or not an object).
    #[error("{}:{line}: {}", path.display(), place.malformed())]
    Json {
        /// The trace file.
        path: PathBuf,
        /// The offending line.
        line: u64,
        /// Where in the row the error is: the field whose value it is in, when there is one.
        place: JsonPlace,
        /// The parser's error, worded for one row of a file.
        #[source]
        source: JsonSyntax,
    },
    /// A JSONL row is valid JSON but not an object: an array of values would be read by
    /// position, each value into whichever field its place happens to match.
    #[error("{}:{line}: expected a JSON object, found {found}", path.display())]
    NotAnObject {
        /// The trace file.
        path: PathBuf,
        /// The offending line.
        line: u64,
        /// What the line holds instead (`an array`, a number, a string).
        found: String,
    },
    /// A CSV line is not one record of the header's fields (a quoted field that runs past
    /// the end of the line, the wrong number of fields).
    #[error("{}:{line}: {}malformed CSV record: {reason}", path.display(), in_field(field))]
    Csv {
        /// The trace file.
        path: PathBuf,
        /// The offending line.
        line: u64,
        /// The column the error is in (its header name), when it is in one.
        field: Option<String>,
        /// What is wrong.
        reason: String,
    },
    /// A required field is absent (or `null`).
    #[error("{}:{line}: missing required field \"{field}\"", path.display())]
    MissingField {
        /// The trace file.
        path: PathBuf,
        /// The offending line.
        line: u64,
        /// The field's name.
        field: &'static str,
    },
    /// A field has the wrong JSON type, or a CSV cell is not a number.
    #[error("{}:{line}: field \"{field}\": expected {expected}, found {found}", path.display())]
    WrongType {
        /// The trace file.
        path: PathBuf,
        /// The offending line.
        line: u64,
        /// The field's name.
        field: &'static str,
        /// What the format requires.
        expected: &'static str,
        /// What the row holds.
        found: String,
    },
    /// A field has the right type but an impossible value (a zero or negative length, a
    /// negative timestamp, a duplicate id, a turn number that contradicts the chain).
    #[error("{}:{line}: field \"{field}\": expected {expected}, found {found}", path.display())]
    InvalidValue {
        /// The trace file.
        path: PathBuf,
        /// The offending line.
        line: u64,
        /// The field's name.
        field: &'static str,
        /// What the format requires.
        expected: String,
        /// What the row holds.
        found: String,
    },
    /// `hash_ids` and `input_length` disagree: every block must be full except the last,
    /// which holds between 1 and `block_size` tokens.
    #[error(
        "{}:{line}: field \"hash_ids\": block rule violated: {blocks} blocks of {block_size} \
         tokens need {} < input_length <= {}, found input_length {input_length}",
        path.display(),
        (*blocks as u64 - 1) * *block_size as u64,
        *blocks as u64 * *block_size as u64
    )]
    BlockRule {
        /// The trace file.
        path: PathBuf,
        /// The offending line.
        line: u64,
        /// `input_length` of the row.
        input_length: u32,
        /// Number of hash ids of the row (at least 1).
        blocks: usize,
        /// Tokens per block for this format.
        block_size: u32,
    },
    /// A Bailian row's `parent_chat_id` names a chat that never appears in the trace (or the
    /// parent chain loops).
    #[error(
        "{}:{line}: field \"parent_chat_id\": parent chat {parent} of chat {chat} {problem}",
        path.display()
    )]
    OrphanParent {
        /// The trace file.
        path: PathBuf,
        /// The line of the row whose parent is missing.
        line: u64,
        /// That row's `chat_id`.
        chat: u64,
        /// Its `parent_chat_id`.
        parent: i64,
        /// "never appears in the trace" or "is part of a cycle".
        problem: &'static str,
    },
    /// The BurstGPT CSV header lacks a required column.
    #[error("{}:{line}: bad BurstGPT header: {reason}", path.display())]
    BadHeader {
        /// The trace file.
        path: PathBuf,
        /// The header's line.
        line: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// A [`Selection`](super::Selection) parameter is out of range.
    #[error("{}: invalid selection: {field}: {reason}", path.display())]
    InvalidSelection {
        /// The trace file the selection was applied to.
        path: PathBuf,
        /// The parameter's name (`scale_lengths`, `end_offset`, …).
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The selection keeps no request of the trace.
    #[error("{}: selection keeps no requests ({reason})", path.display())]
    EmptySelection {
        /// The trace file.
        path: PathBuf,
        /// What dropped them.
        reason: String,
    },
    /// The trace is larger than canaryd can hold (2^32 − 1 rows or sessions, 4 GiB of hash
    /// ids). Not skippable: every later row would be too.
    #[error("{}:{line}: trace too large to hold", path.display())]
    TooLarge {
        /// The trace file.
        path: PathBuf,
        /// The row that did not fit.
        line: u64,
        /// What ran out.
        #[source]
        source: canary_core::RowsError,
    },
}

/// Where in a one-line JSON row a syntax error is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JsonPlace {
    /// In the value of this top-level key: a number out of range, a truncated array, bytes
    /// that are not UTF-8 inside a string, a row cut off inside a string.
    Field(String),
    /// In a top-level key's name (or where one was due), after the value of this field
    /// (`None`: the first key).
    Key {
        /// The field before it, if any.
        after: Option<String>,
    },
    /// After the row's object closed (`{…} {…}`, `{…} x`): in no field.
    AfterObject,
    /// Not in an object: the row does not start as one.
    Row,
}

impl JsonPlace {
    /// `field "hash_ids": malformed JSON`, `malformed JSON in the key after field "a"`, …
    fn malformed(&self) -> String {
        match self {
            Self::Field(f) => format!("field {f:?}: malformed JSON"),
            Self::Key { after: Some(f) } => format!("malformed JSON in the key after field {f:?}"),
            Self::Key { after: None } => "malformed JSON in the first key".into(),
            Self::AfterObject => "malformed JSON after the object".into(),
            Self::Row => "malformed JSON".into(),
        }
    }
}

/// serde_json's complaint about one row, worded for a line of a file: serde's "at line 1
/// column 92" counts lines within the row, which beside `file:5:` read as a second,
/// contradictory line number; here it is `(column 92 of the row)`. Bytes that are not UTF-8
/// are named so (serde says "invalid unicode code point", as for a bad `\u` escape).
#[derive(Debug)]
pub struct JsonSyntax {
    error: serde_json::Error,
    invalid_utf8: bool,
}

impl JsonSyntax {
    /// The error serde_json gave for `row`.
    pub fn new(row: &[u8], error: serde_json::Error) -> Self {
        // The first byte that is not UTF-8 lies at or before the column serde points at (it
        // points at that byte, or at the end of its string).
        let invalid_utf8 = std::str::from_utf8(row)
            .is_err_and(|e| e.valid_up_to() < error.column().max(1))
            && error.is_syntax()
            && error.to_string().starts_with("invalid unicode code point");
        Self {
            error,
            invalid_utf8,
        }
    }

    /// The parser's error.
    pub fn inner(&self) -> &serde_json::Error {
        &self.error
    }
}

impl std::fmt::Display for JsonSyntax {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = self.error.to_string();
        let suffix = format!(
            " at line {} column {}",
            self.error.line(),
            self.error.column()
        );
        let reason = match text.strip_suffix(&suffix) {
            _ if self.invalid_utf8 => "bytes that are not UTF-8 in a string",
            Some(reason) => reason,
            None => &text,
        };
        match self.error.column() {
            0 => f.write_str(reason),
            column => write!(f, "{reason} (column {column} of the row)"),
        }
    }
}

impl std::error::Error for JsonSyntax {}

fn in_field(field: &Option<String>) -> String {
    field
        .as_ref()
        .map(|f| format!("field {f:?}: "))
        .unwrap_or_default()
}

fn at_line(line: Option<u64>) -> String {
    line.map(|l| format!(" (at line {l})")).unwrap_or_default()
}

/// The kind of a [`TraceError`], for counting skipped rows without comparing strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)] // one per TraceError variant, same names
pub enum TraceErrorKind {
    Io,
    LineTooLong,
    Stopped,
    Empty,
    UnknownFormat,
    Json,
    NotAnObject,
    Csv,
    MissingField,
    WrongType,
    InvalidValue,
    BlockRule,
    OrphanParent,
    BadHeader,
    InvalidSelection,
    EmptySelection,
    TooLarge,
}

impl TraceError {
    /// The variant, without its context.
    pub fn kind(&self) -> TraceErrorKind {
        match self {
            Self::Io { .. } => TraceErrorKind::Io,
            Self::LineTooLong { .. } => TraceErrorKind::LineTooLong,
            Self::Stopped { .. } => TraceErrorKind::Stopped,
            Self::Empty { .. } => TraceErrorKind::Empty,
            Self::UnknownFormat { .. } | Self::Compressed { .. } | Self::Undetected { .. } => {
                TraceErrorKind::UnknownFormat
            }
            Self::Json { .. } => TraceErrorKind::Json,
            Self::NotAnObject { .. } => TraceErrorKind::NotAnObject,
            Self::Csv { .. } => TraceErrorKind::Csv,
            Self::MissingField { .. } => TraceErrorKind::MissingField,
            Self::WrongType { .. } => TraceErrorKind::WrongType,
            Self::InvalidValue { .. } => TraceErrorKind::InvalidValue,
            Self::BlockRule { .. } => TraceErrorKind::BlockRule,
            Self::OrphanParent { .. } => TraceErrorKind::OrphanParent,
            Self::BadHeader { .. } => TraceErrorKind::BadHeader,
            Self::InvalidSelection { .. } => TraceErrorKind::InvalidSelection,
            Self::EmptySelection { .. } => TraceErrorKind::EmptySelection,
            Self::TooLarge { .. } => TraceErrorKind::TooLarge,
        }
    }

    /// The 1-based line the error points at, if it is about one line.
    pub fn line(&self) -> Option<u64> {
        match self {
            Self::Io { line, .. } => *line,
            Self::UnknownFormat { line, .. }
            | Self::Undetected { line, .. }
            | Self::Compressed { line, .. }
            | Self::LineTooLong { line, .. }
            | Self::Stopped { line, .. }
            | Self::Json { line, .. }
            | Self::NotAnObject { line, .. }
            | Self::Csv { line, .. }
            | Self::MissingField { line, .. }
            | Self::WrongType { line, .. }
            | Self::InvalidValue { line, .. }
            | Self::BlockRule { line, .. }
            | Self::OrphanParent { line, .. }
            | Self::BadHeader { line, .. }
            | Self::TooLarge { line, .. } => Some(*line),
            Self::Empty { .. } | Self::InvalidSelection { .. } | Self::EmptySelection { .. } => {
                None
            }
        }
    }
}

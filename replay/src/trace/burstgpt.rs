//! BurstGPT CSV.
//!
//! Header `Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type`; newer files add
//! `Session ID` and `Elapsed time`. Columns are found by name; `Timestamp`, `Request tokens`
//! and `Response tokens` are required. `Timestamp` is in seconds. There are no hash ids (every
//! prompt is unique) and the block size is 512 by convention.
//!
//! A row is text: bytes that are not UTF-8 are refused naming their column, as a JSONL
//! trace refuses them. `Total tokens`, where the header has it, must be `Request tokens` +
//! `Response tokens` (every real row is); `Elapsed time`, unused, must still be a number of
//! seconds or empty, so that a shifted column is caught rather than read.
//!
//! Rows with `Response tokens` 0 failed in the original service: they are dropped and counted
//! unless [`FailedPolicy::Send`] keeps them (with `output_tokens` 0). With a `Session ID`
//! column, rows of one id form a session; turns follow timestamp order.

use std::collections::HashMap;
use std::io::BufRead;

use canary_core::TraceRequest;

use super::field::{Row, Scalar};
use super::read::{line_u32, Lines, Rows};
use super::{FailedPolicy, TraceError, TraceFormat};

const TIMESTAMP: &str = "Timestamp";
const MODEL: &str = "Model";
const REQUEST: &str = "Request tokens";
const RESPONSE: &str = "Response tokens";
const SESSION: &str = "Session ID";
const TOTAL: &str = "Total tokens";
const ELAPSED: &str = "Elapsed time";
/// The columns of the original header, in its order (newer files add `Session ID` and
/// `Elapsed time`).
const STANDARD: [&str; 6] = [TIMESTAMP, MODEL, REQUEST, RESPONSE, TOTAL, "Log Type"];

/// Column positions found in the header.
struct Columns {
    timestamp: usize,
    request: usize,
    response: usize,
    model: Option<usize>,
    session: Option<usize>,
    total: Option<usize>,
    elapsed: Option<usize>,
}

impl Columns {
    fn from_header(header: &csv::ByteRecord, row: Row<'_>) -> Result<Self, TraceError> {
        let find = |name: &str| {
            header
                .iter()
                .position(|h| h.trim_ascii() == name.as_bytes())
        };
        let bad = |reason: String| TraceError::BadHeader {
            path: row.path.into(),
            line: row.line,
            reason,
        };
        // A column read twice: which one is meant is not known (the first was read, without a
        // word).
        for name in [TIMESTAMP, MODEL, REQUEST, RESPONSE, SESSION, TOTAL, ELAPSED] {
            let mut at = header
                .iter()
                .enumerate()
                .filter(|(_, h)| h.trim_ascii() == name.as_bytes())
                .map(|(i, _)| i + 1);
            if let (Some(first), Some(again)) = (at.next(), at.next()) {
                return Err(bad(format!(
                    "`{name}` is given twice (columns {first} and {again}); which one to read \
                     is not known: keep one"
                )));
            }
        }
        if find(TIMESTAMP) != Some(0) {
            return Err(bad(format!("expected it to start with `{TIMESTAMP},`")));
        }
        let required = |name: &str| find(name).ok_or_else(|| bad(format!("no `{name}` column")));
        Ok(Self {
            timestamp: 0,
            request: required(REQUEST)?,
            response: required(RESPONSE)?,
            model: find(MODEL),
            session: find(SESSION),
            total: find(TOTAL),
            elapsed: find(ELAPSED),
        })
    }
}

pub(super) fn parse<R: BufRead>(
    lines: &mut Lines<'_, R>,
    rows: &mut Rows<'_>,
) -> Result<(), TraceError> {
    // Each physical line is one record: BurstGPT rows never hold a line break, so a quoted
    // field that runs past one is an unbalanced quote, refused on its own line rather than
    // merging the rows after it into one. Line numbers are then the file's own, whatever the
    // line endings and blank lines (the csv crate's miscounted CRLF files and blank lines:
    // BurntSushi/rust-csv#395, #208).
    let mut cells = Cells::new();
    let Some((header_line, text)) = lines.next_line()? else {
        return Ok(());
    };
    let header_row = Row {
        path: rows.path,
        line: header_line,
    };
    if let Err(field) = cells.split(text) {
        return Err(TraceError::BadHeader {
            path: rows.path.into(),
            line: header_line,
            reason: format!(
                "column {} starts a quoted name that runs past the end of the line (an \
                 unbalanced `\"`?)",
                field + 1
            ),
        });
    }
    let header = cells.record.clone();
    let cols = Columns::from_header(&header, header_row)?;
    let name = |i: usize| match header.get(i) {
        Some(h) => String::from_utf8_lossy(h.trim_ascii()).into_owned(),
        None => format!("column {}", i + 1),
    };

    let mut session_keys: HashMap<Box<[u8]>, u64> = HashMap::new();
    let (path, limit) = (rows.path, rows.opts.length_limit);
    while let Some((line, text)) = lines.next_line()? {
        rows.report.rows += 1;
        let row = Row { path, line };
        let malformed = |field: Option<String>, reason: String| TraceError::Csv {
            path: path.into(),
            line,
            field,
            reason,
        };
        let first = rows.report.rows == 1;
        let record = match cells.split(text) {
            Ok(record) if record.len() == header.len() => record,
            Ok(record) => {
                // A header short of the standard columns, under rows that have more: the
                // header is what lost them (every row would be refused for it).
                if first && record.len() > header.len() {
                    if let Some(e) = short_header(&header, header_line, record.len(), row) {
                        return Err(e);
                    }
                }
                rows.reject(malformed(
                    None,
                    format!(
                        "{} fields where the header (line {header_line}) has {}",
                        record.len(),
                        header.len()
                    ),
                ))?;
                continue;
            }
            Err(field) => {
                rows.reject(malformed(
                    Some(name(field)),
                    "a quoted field runs past the end of the line (an unbalanced `\"`?)".into(),
                ))?;
                continue;
            }
        };
        if let Err(e) = utf8(text, record, name, malformed) {
            rows.reject(e)?;
            continue;
        }
        match convert(row, record, &cols, &mut session_keys, limit) {
            Ok(req)
                if req.output_tokens == 0 && rows.opts.burstgpt_failed == FailedPolicy::Skip =>
            {
                rows.report.failed_skipped += 1;
            }
            Ok(req) => {
                if req.output_tokens == 0 {
                    rows.report.failed_kept += 1;
                }
                let model = cols.model.and_then(|i| record.get(i)).unwrap_or_default();
                rows.report
                    .count_category(&String::from_utf8_lossy(model.trim_ascii()));
                rows.push(req)?;
            }
            Err(e) => rows.reject(e)?,
        }
    }
    assign_turns(rows)
}

/// The header's error (on `header_line`) when it names fewer columns than the first row has
/// and lacks some of the standard ones, which are then most likely the rows' unnamed columns.
fn short_header(
    header: &csv::ByteRecord,
    header_line: u64,
    fields: usize,
    first_row: Row<'_>,
) -> Option<TraceError> {
    let named = |name: &str| header.iter().any(|h| h.trim_ascii() == name.as_bytes());
    let missing: Vec<String> = STANDARD
        .iter()
        .filter(|n| !named(n))
        .map(|n| format!("`{n}`"))
        .collect();
    if missing.is_empty() {
        return None;
    }
    let unnamed = match (header.len() + 1, fields) {
        (a, b) if a == b => format!("column {a} has"),
        (a, b) => format!("columns {a} to {b} have"),
    };
    Some(TraceError::BadHeader {
        path: first_row.path.into(),
        line: header_line,
        reason: format!(
            "{} columns, but the rows have {fields} (the first, line {}): {unnamed} no name; \
             a BurstGPT header also names {}",
            header.len(),
            first_row.line,
            missing.join(", ")
        ),
    })
}

/// Refuses a line that is not UTF-8, naming the first column holding such bytes: a JSONL
/// trace refuses the same bytes, and a `Model` read lossily would count a category no row
/// names (`GPT-\u{fffd}`).
fn utf8(
    line: &[u8],
    record: &csv::ByteRecord,
    name: impl Fn(usize) -> String,
    malformed: impl Fn(Option<String>, String) -> TraceError,
) -> Result<(), TraceError> {
    if std::str::from_utf8(line).is_ok() {
        return Ok(());
    }
    let bad = record
        .iter()
        .enumerate()
        .find_map(|(i, f)| std::str::from_utf8(f).err().map(|e| (i, e.valid_up_to())));
    Err(match bad {
        Some((i, at)) => malformed(
            Some(name(i)),
            format!("bytes that are not UTF-8 (byte {} of the field)", at + 1),
        ),
        // Only in a separator or quote, which UTF-8 bytes never are: not reached.
        None => malformed(None, "bytes that are not UTF-8".into()),
    })
}

/// Splits one line into its CSV fields (quotes and `""` as the csv crate reads them),
/// reusing its buffers from line to line.
struct Cells {
    reader: csv_core::Reader,
    out: Vec<u8>,
    ends: Vec<usize>,
    record: csv::ByteRecord,
}

impl Cells {
    fn new() -> Self {
        Self {
            // Only `\n` ends a record: the line has none (nor its `\r`), and the one fed after
            // it tells whether the record ends there.
            reader: csv_core::ReaderBuilder::new()
                .terminator(csv_core::Terminator::Any(b'\n'))
                .build(),
            out: Vec::new(),
            ends: vec![0; 16],
            record: csv::ByteRecord::new(),
        }
    }

    /// The fields of `line` (one line, without its line break), or `Err(i)` when field `i`
    /// (0-based) opens a quote the line does not close: the record would go on into the
    /// next line.
    fn split(&mut self, line: &[u8]) -> Result<&csv::ByteRecord, usize> {
        use csv_core::ReadRecordResult as R;
        self.reader.reset();
        // A field's bytes unescaped are never more than the line's.
        if self.out.len() < line.len() + 1 {
            self.out.resize(line.len() + 1, 0);
        }
        let (mut input, mut fed_end) = (line, false);
        let (mut nout, mut nends) = (0, 0);
        loop {
            let (res, i, o, e) =
                self.reader
                    .read_record(input, &mut self.out[nout..], &mut self.ends[nends..]);
            input = &input[i..];
            (nout, nends) = (nout + o, nends + e);
            match res {
                R::InputEmpty if fed_end => return Err(nends),
                R::InputEmpty => (input, fed_end) = (b"\n", true),
                R::OutputFull => self.out.resize(self.out.len() * 2, 0),
                R::OutputEndsFull => self.ends.resize(self.ends.len() * 2, 0),
                R::Record | R::End => break,
            }
        }
        self.record.clear();
        let mut start = 0;
        for &end in &self.ends[..nends] {
            self.record.push_field(&self.out[start..end]);
            start = end;
        }
        Ok(&self.record)
    }
}

/// Numbers turns within each session in timestamp order (the file may be unsorted).
fn assign_turns(rows: &mut Rows<'_>) -> Result<(), TraceError> {
    rows.requests.sort_by_key(|r| r.timestamp_us());
    let mut next: Vec<u32> = vec![0; rows.requests.session_numbers()];
    for i in 0..rows.requests.len() {
        let r = rows.requests.row(i);
        if let Some(s) = r.session_number() {
            let turn = next[s as usize];
            next[s as usize] += 1;
            if r.turn() != turn {
                let line = r.line();
                rows.requests
                    .update(i, |r| r.turn = turn)
                    .map_err(|e| rows.too_large(line, e))?;
            }
        }
    }
    Ok(())
}

/// A CSV cell read as the JSON-like value the shared conversions expect.
fn cell<'r>(
    row: Row<'_>,
    record: &'r csv::ByteRecord,
    i: usize,
    field: &'static str,
) -> Result<Scalar<'r>, TraceError> {
    let raw = record.get(i).unwrap_or_default().trim_ascii();
    if raw.is_empty() {
        return Err(row.missing(field));
    }
    let text = std::str::from_utf8(raw)
        .map_err(|_| row.wrong_type(field, "a number", String::from_utf8_lossy(raw)))?;
    Ok(if let Ok(n) = text.parse::<u64>() {
        Scalar::Uint(n)
    } else if let Ok(n) = text.parse::<i64>() {
        Scalar::Int(n)
    } else if let Ok(x) = text.parse::<f64>() {
        Scalar::Float(x, text)
    } else {
        Scalar::Str(text.into())
    })
}

/// Checks a `Total tokens` cell: the sum of the row's request and response tokens, as in
/// every real row (the README's three from `BurstGPT_1.csv`, and upstream's failed rows
/// `…,0,0,0,…`). A row that disagrees was edited or shifted: which count would be right?
fn total(row: Row<'_>, v: &Scalar<'_>, request: u32, response: u32) -> Result<(), TraceError> {
    let expected = "a non-negative integer";
    let n = match *v {
        Scalar::Uint(n) => n,
        Scalar::Float(x, _) if x.fract() == 0.0 && (0.0..1.8e19).contains(&x) => x as u64,
        Scalar::Int(_) | Scalar::Float(..) => return Err(row.invalid(TOTAL, expected, v)),
        _ => return Err(row.wrong_type(TOTAL, expected, v)),
    };
    let sum = u64::from(request) + u64::from(response);
    if n != sum {
        return Err(row.invalid(
            TOTAL,
            format!("{REQUEST} + {RESPONSE} = {request} + {response} = {sum}"),
            v,
        ));
    }
    Ok(())
}

/// Checks an `Elapsed time` cell (not empty): unused, but a number of seconds; text or a
/// negative time there says the columns are not what the header names.
fn elapsed(row: Row<'_>, v: &Scalar<'_>) -> Result<(), TraceError> {
    let expected = "a non-negative number of seconds";
    match *v {
        Scalar::Uint(_) => Ok(()),
        Scalar::Float(x, _) if x >= 0.0 && x.is_finite() => Ok(()),
        Scalar::Int(_) | Scalar::Float(..) => Err(row.invalid(ELAPSED, expected, v)),
        _ => Err(row.wrong_type(ELAPSED, "a number", v)),
    }
}

fn convert(
    row: Row<'_>,
    record: &csv::ByteRecord,
    cols: &Columns,
    session_keys: &mut HashMap<Box<[u8]>, u64>,
    limit: u32,
) -> Result<TraceRequest, TraceError> {
    let timestamp_us = row.time_us(
        TIMESTAMP,
        &cell(row, record, cols.timestamp, TIMESTAMP)?,
        "seconds",
        1_000_000,
    )?;
    let output = row.length(
        RESPONSE,
        &cell(row, record, cols.response, RESPONSE)?,
        true,
        limit,
    )?;
    // A failed row (no response tokens) may have none in either: BurstGPT_1.csv upstream has
    // rows like `1106,ChatGPT,0,0,0,Conversation log`. Skipped as failed, or sent with the
    // one-token prompt, the least a prompt holds.
    let request = row.length(
        REQUEST,
        &cell(row, record, cols.request, REQUEST)?,
        output == 0,
        limit,
    )?;
    if let Some(i) = cols.total {
        total(row, &cell(row, record, i, TOTAL)?, request, output)?;
    }
    if let Some(i) = cols.elapsed {
        if !record.get(i).unwrap_or_default().trim_ascii().is_empty() {
            elapsed(row, &cell(row, record, i, ELAPSED)?)?;
        }
    }
    let input = request.max(1);
    let session = match cols
        .session
        .and_then(|i| record.get(i))
        .map(<[u8]>::trim_ascii)
    {
        None | Some(b"") => None,
        Some(id) => {
            let next = session_keys.len() as u64;
            Some(match session_keys.get(id) {
                Some(&k) => k,
                None => *session_keys.entry(id.into()).or_insert(next),
            })
        }
    };
    Ok(TraceRequest::new(
        0,
        line_u32(row.line),
        timestamp_us,
        session,
        0,
        input,
        output,
        canary_core::HashIds::new(),
        TraceFormat::BurstGpt.block_size(),
    ))
}

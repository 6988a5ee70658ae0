//! BurstGPT CSV.
//!
//! Header `Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type`; newer files add
//! `Session ID` and `Elapsed time`. Columns are found by name; `Timestamp`, `Request tokens`
//! and `Response tokens` are required. `Timestamp` is in seconds. There are no hash ids (every
//! prompt is unique) and the block size is 512 by convention.
//!
//! Rows with `Response tokens` 0 failed in the original service: they are dropped and counted
//! unless [`FailedPolicy::Send`] keeps them (with `output_tokens` 0). With a `Session ID`
//! column, rows of one id form a session; turns follow timestamp order.

use std::collections::HashMap;
use std::io::{Cursor, Read};

use canary_core::TraceRequest;

use super::field::{Row, Scalar};
use super::read::{halted, line_u32, Lines, Rows, Source};
use super::{FailedPolicy, TraceError, TraceFormat};

const TIMESTAMP: &str = "Timestamp";
const MODEL: &str = "Model";
const REQUEST: &str = "Request tokens";
const RESPONSE: &str = "Response tokens";
const SESSION: &str = "Session ID";

/// Column positions found in the header.
struct Columns {
    timestamp: usize,
    request: usize,
    response: usize,
    model: Option<usize>,
    session: Option<usize>,
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
        })
    }
}

/// The CSV reader's own buffer (its default), read ahead of the record it parses.
const CSV_BUFFER: usize = 8 << 10;

pub(super) fn parse<R: Read>(
    lines: Lines<'_, Source<R>>,
    rows: &mut Rows<'_>,
) -> Result<(), TraceError> {
    // The header line was already read for detection: put it back in front of the reader.
    let (header_line, first, mut rest) = lines.into_parts();
    let offset = header_line - 1;
    // From here a quoted field may hold line breaks: the limit is on a whole record, and the
    // buffers between the guard and the parser may hold that much more.
    let slack = rest.capacity() + CSV_BUFFER + first.len();
    rest.get_mut().records(slack, header_line + 1);
    let input = Cursor::new(first).chain(rest);
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .buffer_capacity(CSV_BUFFER)
        .from_reader(input);
    let header_row = Row {
        path: rows.path,
        line: header_line,
    };
    let csv_error = |source: csv::Error, line: u64| {
        match source.kind() {
            csv::ErrorKind::Io(e) => halted(e, rows.path),
            _ => None,
        }
        .unwrap_or_else(|| TraceError::Csv {
            path: rows.path.into(),
            line,
            source,
        })
    };
    let header = match reader.byte_headers() {
        Ok(h) => h.clone(),
        Err(source) => return Err(csv_error(source, header_line)),
    };
    let cols = Columns::from_header(&header, header_row)?;

    let mut record = csv::ByteRecord::new();
    let mut session_keys: HashMap<Box<[u8]>, u64> = HashMap::new();
    let limit = rows.opts.length_limit;
    loop {
        let read = reader.read_byte_record(&mut record);
        // Whatever was read, the next record starts here.
        let next = reader.position().line() + offset;
        reader.get_mut().get_mut().1.get_mut().mark_record(next);
        let more = match read {
            Ok(more) => more,
            Err(source) => {
                let line = source.position().map_or(header_line, |p| p.line() + offset);
                // A record with the wrong number of fields was read whole: it is one bad row,
                // and the reader goes on after it. Anything else (I/O) ends the file.
                let one_row = matches!(source.kind(), csv::ErrorKind::UnequalLengths { .. });
                let err = csv_error(source, line);
                if !one_row {
                    return Err(err);
                }
                rows.report.rows += 1;
                rows.reject(err)?;
                continue;
            }
        };
        if !more {
            break;
        }
        rows.report.rows += 1;
        let line = record.position().map_or(0, |p| p.line()) + offset;
        let row = Row {
            path: rows.path,
            line,
        };
        match convert(row, &record, &cols, &mut session_keys, limit) {
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
        Scalar::Float(x)
    } else {
        Scalar::Str(text.into())
    })
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
    let input = row
        .length(
            REQUEST,
            &cell(row, record, cols.request, REQUEST)?,
            output == 0,
            limit,
        )?
        .max(1);
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

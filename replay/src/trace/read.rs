//! Plumbing shared by the parsers: a reader of non-empty lines that reuses one buffer, and
//! the collector that applies `skip_invalid`, sorts by timestamp and assigns indices.

use std::io::BufRead;
use std::path::Path;

use canary_core::TraceRequest;

use super::field::Row;
use super::{LoadOptions, LoadReport, Trace, TraceError, TraceFormat, MAX_SPAN};

const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// Non-empty lines of a reader, with 1-based line numbers, reusing one buffer.
pub(crate) struct Lines<'p, R> {
    reader: R,
    path: &'p Path,
    buf: Vec<u8>,
    line: u64,
    replay: bool,
}

impl<'p, R: BufRead> Lines<'p, R> {
    pub(super) fn new(reader: R, path: &'p Path) -> Self {
        Self {
            reader,
            path,
            buf: Vec::with_capacity(4096),
            line: 0,
            replay: false,
        }
    }

    /// The next non-empty line (without its line ending), or `None` at the end.
    pub fn next_line(&mut self) -> Result<Option<(u64, &[u8])>, TraceError> {
        if std::mem::take(&mut self.replay) {
            return Ok(Some((self.line, self.buf.trim_ascii())));
        }
        loop {
            self.buf.clear();
            let n = self
                .reader
                .read_until(b'\n', &mut self.buf)
                .map_err(|source| TraceError::Io {
                    path: self.path.into(),
                    line: Some(self.line + 1),
                    source,
                })?;
            if n == 0 {
                return Ok(None);
            }
            self.line += 1;
            if self.line == 1 && self.buf.starts_with(UTF8_BOM) {
                self.buf.drain(..UTF8_BOM.len());
            }
            if !self.buf.trim_ascii().is_empty() {
                return Ok(Some((self.line, self.buf.trim_ascii())));
            }
        }
    }

    /// Makes the next call return the current line again (after format detection).
    pub(super) fn unread(&mut self) {
        self.replay = true;
    }

    /// The line returned last and the underlying reader (for the CSV parser).
    pub fn into_parts(self) -> (u64, Vec<u8>, R) {
        (self.line, self.buf, self.reader)
    }
}

/// Collects a parser's requests and report, applying `skip_invalid`.
pub(crate) struct Rows<'p> {
    pub path: &'p Path,
    pub opts: &'p LoadOptions,
    pub requests: Vec<TraceRequest>,
    pub report: LoadReport,
}

impl<'p> Rows<'p> {
    pub(super) fn new(path: &'p Path, opts: &'p LoadOptions) -> Self {
        Self {
            path,
            opts,
            requests: Vec::new(),
            report: LoadReport::default(),
        }
    }

    /// Handles an invalid row: an error, or with `skip_invalid` a counted warning.
    pub fn reject(&mut self, err: TraceError) -> Result<(), TraceError> {
        if !self.opts.skip_invalid {
            return Err(err);
        }
        self.report.invalid_skipped += 1;
        *self.report.invalid_by_kind.entry(err.kind()).or_default() += 1;
        self.report.warn(format_args!("skipped: {err}"));
        Ok(())
    }

    /// Sorts by timestamp (stable), checks the span, assigns `index` and checks something is
    /// left.
    pub(super) fn finish(mut self, format: TraceFormat) -> Result<Trace, TraceError> {
        self.requests.sort_by_key(|r| r.timestamp_us);
        self.check_span(format)?;
        if self.requests.is_empty() {
            return Err(TraceError::Empty {
                path: self.path.into(),
                rows: self.report.rows,
            });
        }
        reindex(&mut self.requests);
        self.report.requests = self.requests.len() as u64;
        Ok(Trace {
            path: self.path.into(),
            format,
            requests: self.requests,
            report: self.report,
        })
    }
}

impl Rows<'_> {
    /// Rejects the rows more than [`MAX_SPAN`] after the first (requests are sorted by
    /// timestamp, so they are a tail), in file order.
    fn check_span(&mut self, format: TraceFormat) -> Result<(), TraceError> {
        let Some(first) = self.requests.first() else {
            return Ok(());
        };
        let (first_us, first_line) = (first.timestamp_us, first.line);
        let limit = first_us.saturating_add(MAX_SPAN.as_micros() as u64);
        let keep = self.requests.partition_point(|r| r.timestamp_us <= limit);
        let mut late: Vec<TraceRequest> = self.requests.split_off(keep);
        late.sort_by_key(|r| r.line);
        let (field, unit, us_per_unit) = format.timestamp_field();
        let in_unit = |us: u64| us as f64 / us_per_unit as f64;
        for r in late {
            let row = Row {
                path: self.path,
                line: u64::from(r.line),
            };
            self.reject(row.invalid(
                field,
                format!(
                    "a time at most {} days after the trace's first request (line {first_line}, \
                     {} {unit}); is the column in {unit}?",
                    MAX_SPAN.as_secs() / 86_400,
                    in_unit(first_us)
                ),
                format_args!("{} {unit}", in_unit(r.timestamp_us)),
            ))?;
        }
        Ok(())
    }
}

/// Line numbers in [`TraceRequest`] are `u32`; a file longer than that saturates.
pub(crate) fn line_u32(line: u64) -> u32 {
    u32::try_from(line).unwrap_or(u32::MAX)
}

pub(crate) fn reindex(requests: &mut [TraceRequest]) {
    for (i, r) in requests.iter_mut().enumerate() {
        r.index = u32::try_from(i).unwrap_or(u32::MAX);
    }
}

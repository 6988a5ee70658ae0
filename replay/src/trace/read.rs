//! Plumbing shared by the parsers: the [`Guard`] every byte is read through (it bounds a line
//! and sees the stop flag), a reader of non-empty lines that reuses one buffer, and the
//! collector that applies `skip_invalid`, sorts by timestamp and assigns indices.

use std::fmt;
use std::io::{self, BufRead, Read};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use canary_core::{TraceRequest, TraceRows};

use super::field::Row;
use super::{LoadOptions, LoadReport, Trace, TraceError, TraceFormat, MAX_SPAN};

const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// Why the [`Guard`] refused to read on, carried inside an `io::Error` through `BufRead` and
/// the line reader, and turned back into a [`TraceError`] by [`halted`].
#[derive(Debug)]
enum Halt {
    TooLong { line: u64, limit: usize },
    Stopped { line: u64 },
}

impl fmt::Display for Halt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Halt::TooLong { line, limit } => write!(f, "line {line} is over {limit} bytes"),
            Halt::Stopped { line } => write!(f, "stopped at line {line}"),
        }
    }
}

impl std::error::Error for Halt {}

/// The [`TraceError`] for an I/O error that is the [`Guard`] refusing to read on, if it is one.
pub(crate) fn halted(e: &io::Error, path: &Path) -> Option<TraceError> {
    match *e.get_ref()?.downcast_ref::<Halt>()? {
        Halt::TooLong { line, limit } => Some(TraceError::LineTooLong {
            path: path.into(),
            line,
            limit,
        }),
        Halt::Stopped { line } => Some(TraceError::Stopped {
            path: path.into(),
            line,
        }),
    }
}

/// Reads a trace file and refuses, with the line's number, to go past a line longer than the
/// limit, so a file without line breaks (`/dev/zero`, a FIFO) costs at most that much memory.
/// Also stops when the stop flag is set.
pub(crate) struct Guard<R> {
    inner: R,
    limit: usize,
    /// Bytes read since the last line break.
    run: usize,
    /// Line breaks read: the line being read is `breaks + 1`.
    breaks: u64,
    stop: Option<Arc<AtomicBool>>,
}

impl<R: Read> Guard<R> {
    pub(crate) fn new(inner: R, opts: &LoadOptions) -> Self {
        Guard {
            inner,
            limit: opts.max_line_bytes.max(1),
            run: 0,
            breaks: 0,
            stop: opts.stop.clone(),
        }
    }

    /// Ends the bytes handed on one past the limit, in a run that starts at `start` of the
    /// buffer: how many bytes to hand on.
    fn cut(&mut self, start: usize) -> usize {
        let kept = start + (self.limit + 1 - self.run);
        self.run = self.limit + 1;
        kept
    }
}

impl<R: Read> Read for Guard<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self
            .stop
            .as_ref()
            .is_some_and(|s| s.load(Ordering::Relaxed))
        {
            return Err(io::Error::other(Halt::Stopped {
                line: self.breaks + 1,
            }));
        }
        if self.run > self.limit {
            return Err(io::Error::other(Halt::TooLong {
                line: self.breaks + 1,
                limit: self.limit,
            }));
        }
        let n = self.inner.read(out)?;
        // Walk the line breaks: each one ends a run, and the first run over the limit cuts
        // what is handed on one byte past the limit; the next read reports it.
        let mut start = 0;
        for p in memchr::memchr_iter(b'\n', &out[..n]) {
            if self.run + (p - start) > self.limit {
                return Ok(self.cut(start));
            }
            self.breaks += 1;
            self.run = 0;
            start = p + 1;
        }
        if self.run + (n - start) > self.limit {
            return Ok(self.cut(start));
        }
        self.run += n - start;
        Ok(n)
    }
}

/// Non-empty lines of a reader, with 1-based line numbers, reusing one buffer.
pub(crate) struct Lines<'p, R> {
    reader: R,
    path: &'p Path,
    buf: Vec<u8>,
    /// Lines read from the reader.
    line: u64,
    /// The line in `buf`.
    cur: u64,
    replay: bool,
    /// Lines read ahead (format detection), handed out again before any new one.
    ahead: std::collections::VecDeque<(u64, Vec<u8>)>,
}

impl<'p, R: BufRead> Lines<'p, R> {
    pub(super) fn new(reader: R, path: &'p Path) -> Self {
        Self {
            reader,
            path,
            buf: Vec::with_capacity(4096),
            line: 0,
            cur: 0,
            replay: false,
            ahead: Default::default(),
        }
    }

    /// The next non-empty line (without its line ending), or `None` at the end.
    pub fn next_line(&mut self) -> Result<Option<(u64, &[u8])>, TraceError> {
        if std::mem::take(&mut self.replay) {
            return Ok(Some((self.cur, self.buf.trim_ascii())));
        }
        if let Some((line, text)) = self.ahead.pop_front() {
            (self.cur, self.buf) = (line, text);
            return Ok(Some((line, self.buf.trim_ascii())));
        }
        loop {
            self.buf.clear();
            let n = self
                .reader
                .read_until(b'\n', &mut self.buf)
                .map_err(|source| match halted(&source, self.path) {
                    Some(e) => e,
                    None => TraceError::Io {
                        path: self.path.into(),
                        line: Some(self.line + 1),
                        source,
                    },
                })?;
            if n == 0 {
                return Ok(None);
            }
            self.line += 1;
            if self.line == 1 && self.buf.starts_with(UTF8_BOM) {
                self.buf.drain(..UTF8_BOM.len());
            }
            if !self.buf.trim_ascii().is_empty() {
                self.cur = self.line;
                return Ok(Some((self.line, self.buf.trim_ascii())));
            }
        }
    }

    /// Makes the next call return the current line again (after format detection).
    pub(super) fn unread(&mut self) {
        self.replay = true;
    }

    /// Makes the next calls return `lines` (read ahead, in order, before any line not yet
    /// returned) again.
    pub(super) fn hand_back(&mut self, lines: Vec<(u64, Vec<u8>)>) {
        debug_assert!(self.ahead.is_empty() && !self.replay);
        self.ahead = lines.into();
    }
}

/// Collects a parser's requests and report, applying `skip_invalid`.
pub(crate) struct Rows<'p> {
    pub path: &'p Path,
    pub opts: &'p LoadOptions,
    pub requests: TraceRows,
    pub report: LoadReport,
    pub kinds: Option<super::RowKinds>,
    /// Lines of the rows whose prompt was checked and not kept ([`super::Prompts::Skip`]).
    pub skipped_prompts: Vec<u32>,
}

impl<'p> Rows<'p> {
    pub(super) fn new(path: &'p Path, opts: &'p LoadOptions) -> Self {
        Self {
            path,
            opts,
            requests: TraceRows::new(),
            report: LoadReport::default(),
            kinds: None,
            skipped_prompts: Vec::new(),
        }
    }

    /// Keeps a parsed row.
    pub fn push(&mut self, req: TraceRequest) -> Result<(), TraceError> {
        let line = req.line;
        self.requests.push(req).map_err(|e| self.too_large(line, e))
    }

    /// The error for a row the rows cannot hold.
    pub fn too_large(&self, line: u32, source: canary_core::RowsError) -> TraceError {
        TraceError::TooLarge {
            path: self.path.into(),
            line: u64::from(line),
            source,
        }
    }

    /// Handles an invalid row: an error, or with `skip_invalid` a counted warning.
    pub fn reject(&mut self, err: TraceError) -> Result<(), TraceError> {
        if !self.opts.skip_invalid {
            return Err(err);
        }
        self.report.invalid_skipped += 1;
        *self.report.invalid_by_kind.entry(err.kind()).or_default() += 1;
        self.report
            .warn(format_args!("{} (row skipped)", Chain(&err)));
        Ok(())
    }

    /// Sorts by timestamp (stable), checks the span, assigns `index` and checks something is
    /// left.
    pub(super) fn finish(mut self, format: TraceFormat) -> Result<Trace, TraceError> {
        self.requests.sort_by_key(|r| r.timestamp_us());
        self.check_span(format)?;
        if self.requests.is_empty() {
            return Err(TraceError::Empty {
                path: self.path.into(),
                rows: self.report.rows,
                format: Some(format),
            });
        }
        self.requests.shrink_to_fit();
        self.report.requests = self.requests.len() as u64;
        Ok(Trace {
            path: self.path.into(),
            format,
            requests: self.requests,
            report: self.report,
            kinds: self.kinds,
            origin_us: None,
            skipped_prompts: self.skipped_prompts,
        })
    }
}

impl Rows<'_> {
    /// Rejects the rows outside the [`MAX_SPAN`] window that holds the most rows (requests are
    /// sorted by timestamp, so the window is a run of them and the rows outside are a head and
    /// a tail), in file order. One stray timestamp, early or late, is the row blamed, however
    /// it sorts: the window was anchored at the earliest row, so one row stamped 0 in a trace
    /// of epoch times had every other row rejected. Equal windows: the earliest wins. A later
    /// turn whose session lost an earlier turn this way is rejected with it (it would wait for
    /// a turn that is never sent).
    fn check_span(&mut self, format: TraceFormat) -> Result<(), TraceError> {
        let rows = &self.requests;
        let n = rows.len();
        if n == 0 {
            return Ok(());
        }
        let span = MAX_SPAN.as_micros() as u64;
        // The window [lo, hi) with the most rows, over windows starting at each row.
        let (mut lo, mut hi) = (0, 0);
        let mut end = 0;
        for start in 0..n {
            let limit = rows.row(start).timestamp_us().saturating_add(span);
            end = end.max(start);
            while end < n && rows.row(end).timestamp_us() <= limit {
                end += 1;
            }
            if end - start > hi - lo {
                (lo, hi) = (start, end);
            }
            if end == n {
                break;
            }
        }
        if lo == 0 && hi == n {
            return Ok(());
        }
        let (first_us, first_line) = (rows.row(lo).timestamp_us(), rows.row(lo).line());
        // Sessions that lose an earlier turn (a head row's session).
        let lost: std::collections::HashSet<u64> =
            (0..lo).filter_map(|i| rows.row(i).session()).collect();
        // (line, timestamp, why) of each row rejected, in file order.
        let mut out: Vec<(u32, u64, Out)> = (0..n)
            .filter_map(|i| {
                let r = rows.row(i);
                let why = if i < lo {
                    Out::Early
                } else if i >= hi {
                    Out::Late
                } else if r.session().is_some_and(|s| lost.contains(&s)) {
                    Out::Orphan
                } else {
                    return None;
                };
                Some((r.line(), r.timestamp_us(), why))
            })
            .collect();
        out.sort_unstable_by_key(|&(line, ..)| line);
        let mut i = 0;
        self.requests.retain(|r| {
            let keep = i >= lo && i < hi && !r.session().is_some_and(|s| lost.contains(&s));
            i += 1;
            keep
        });
        let (field, unit, us_per_unit) = format.timestamp_field();
        let days = MAX_SPAN.as_secs() / 86_400;
        let first = format!("line {first_line}, {} {unit}", exact(first_us, us_per_unit));
        let main = format!("{} of the {n} rows lie within {days} days of it", hi - lo);
        for (line, timestamp_us, why) in out {
            let row = Row {
                path: self.path,
                line: u64::from(line),
            };
            let found = format!("{} {unit}", exact(timestamp_us, us_per_unit));
            self.reject(match why {
                Out::Late if lo == 0 => row.invalid(
                    field,
                    format!(
                        "a time at most {days} days after the trace's first request ({first}); \
                         is the column in {unit}?"
                    ),
                    found,
                ),
                Out::Late => row.invalid(
                    field,
                    format!(
                        "a time at most {days} days after the first request of the trace's main \
                         span ({first}: {main}); is the column in {unit}?"
                    ),
                    found,
                ),
                Out::Early => row.invalid(
                    field,
                    format!(
                        "a time no earlier than the first request of the trace's main span \
                         ({first}: {main}); is the column in {unit}?"
                    ),
                    found,
                ),
                Out::Orphan => row.invalid(
                    field,
                    "a session whose earlier turns are kept (an earlier turn's time is outside \
                     the trace's span)",
                    found,
                ),
            })?;
        }
        Ok(())
    }
}

/// Why [`Rows::check_span`] rejects a row.
#[derive(Clone, Copy)]
enum Out {
    /// Before the window.
    Early,
    /// After it.
    Late,
    /// In it, but a later turn of a session that lost an earlier turn before it.
    Orphan,
}

/// `us` microseconds in a unit of `us_per_unit` (a power of ten), in decimal and exact: a
/// timestamp quoted as the row wrote it, not rounded through a float (9007199254740993 ms).
pub(crate) fn exact(us: u64, us_per_unit: u64) -> String {
    let (whole, frac) = (us / us_per_unit, us % us_per_unit);
    if frac == 0 {
        return whole.to_string();
    }
    let digits = us_per_unit.ilog10() as usize;
    let frac = format!("{frac:0digits$}");
    format!("{whole}.{}", frac.trim_end_matches('0'))
}

/// An error and its causes, `: `-separated (what anyhow's `{:#}` prints), for warnings.
pub(crate) struct Chain<'e>(pub &'e dyn std::error::Error);

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut cause = self.0.source();
        while let Some(c) = cause {
            write!(f, ": {c}")?;
            cause = c.source();
        }
        Ok(())
    }
}

/// Line numbers in [`TraceRequest`] are `u32`; a file longer than that saturates.
pub(crate) fn line_u32(line: u64) -> u32 {
    u32::try_from(line).unwrap_or(u32::MAX)
}

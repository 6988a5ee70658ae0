//! Run artifacts: `records.jsonl`, `summary.json` and `summary.csv`.
//!
//! Records are appended as their requests end and flushed once per batch the record-writing
//! thread takes (at most every 50 ms), not once per record: a run that dies halfway leaves
//! every measurement it took but at most that last batch. The summary is written at the end of every run, including
//! interrupted and failed ones.

use crate::plan::RunInfo;
use canary_core::{
    Aggregator, ChunkGaps, Goodput, RequestRecord, RunSummary, Stats, SUMMARY_SCHEMA_VERSION,
};
use canary_files::write_whole;
use serde::Serialize;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// `summary.json`: the version of its schema, the `run` block, then what the run produced
/// (`body`, flattened: a [`RunOutcome`](canary_core::RunOutcome), or the summary of a run
/// rebuilt from its records). Its JSON Schema is `core/summary.schema.json`.
#[derive(Debug, Serialize)]
pub struct SummaryFile<'a, T: Serialize> {
    /// [`SUMMARY_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// What the run was.
    pub run: &'a RunInfo,
    /// What it produced.
    #[serde(flatten)]
    pub body: &'a T,
}

impl<'a, T: Serialize> SummaryFile<'a, T> {
    /// The summary of the run `run`, which produced `body`.
    pub fn new(run: &'a RunInfo, body: &'a T) -> SummaryFile<'a, T> {
        SummaryFile {
            schema_version: SUMMARY_SCHEMA_VERSION,
            run,
            body,
        }
    }
}

/// An artifact that could not be written.
#[derive(Debug, thiserror::Error)]
#[error("{}", path.display())]
pub struct ArtifactError {
    /// The file.
    pub path: PathBuf,
    /// The cause.
    #[source]
    pub source: std::io::Error,
}

fn at(path: &Path) -> impl FnOnce(std::io::Error) -> ArtifactError + '_ {
    move |source| ArtifactError {
        path: path.to_path_buf(),
        source,
    }
}

/// Bytes of records buffered before a write: more than a 50 ms batch of records at
/// 4,000 req/s takes (about 1 KB each without chunk gaps).
const RECORDS_BUFFER: usize = 256 << 10;

/// Appends records and aggregates them.
pub struct ResultsWriter {
    dir: Option<PathBuf>,
    records: Option<(PathBuf, BufWriter<File>)>,
    /// One record's line, serialized whole before it goes to the writer (reused).
    line: Vec<u8>,
    aggregator: Aggregator,
    write_error: Option<ArtifactError>,
}

impl ResultsWriter {
    /// Writes into `dir` (created if missing), or only aggregates when `dir` is `None`.
    pub fn new(dir: Option<&Path>, goodput: Goodput) -> Result<ResultsWriter, ArtifactError> {
        let records = match dir {
            Some(dir) => {
                std::fs::create_dir_all(dir).map_err(at(dir))?;
                let path = dir.join("records.jsonl");
                let file = canary_files::create_artifact(&path).map_err(at(&path))?;
                // One write(2) per batch the collector takes (200 records at 4,000 req/s),
                // not one per 8 KiB.
                Some((path, BufWriter::with_capacity(RECORDS_BUFFER, file)))
            }
            None => None,
        };
        Ok(ResultsWriter {
            dir: dir.map(Path::to_path_buf),
            records,
            line: Vec::new(),
            aggregator: Aggregator::new(goodput),
            write_error: None,
        })
    }

    /// The same, also keeping the run's figures in slices of `width` (`--slice-duration`),
    /// written to `summary.json`'s `timeslices` and `timeslices.csv`.
    pub fn with_timeslices(mut self, width: Option<std::time::Duration>) -> ResultsWriter {
        if let Some(w) = width {
            self.aggregator = std::mem::take(&mut self.aggregator).with_timeslices(w);
        }
        self
    }

    /// Records one finished request, buffered until [`flush`]. A write failure is kept and
    /// reported by [`finish`] (measuring goes on: the summary still counts the request).
    ///
    /// [`flush`]: ResultsWriter::flush
    /// [`finish`]: ResultsWriter::finish
    pub fn record(&mut self, record: &RequestRecord, chunk_gaps: &ChunkGaps) {
        self.aggregator.add(record, chunk_gaps);
        if let (Some((path, w)), None) = (&mut self.records, &self.write_error) {
            // Whole lines to the buffered writer, so that its writes end between records: a
            // record serialized straight into it was split where the buffer filled, and a
            // process killed between the two writes left a torn last line. The line's buffer
            // is reused: no allocation per record.
            self.line.clear();
            let res = serde_json::to_writer(&mut self.line, record)
                .map_err(std::io::Error::from)
                .and_then(|_| {
                    self.line.push(b'\n');
                    w.write_all(&self.line)
                });
            if let Err(e) = res {
                self.write_error = Some(at(path)(e));
            }
        }
    }

    /// Puts every record so far on disk: after each batch of records, so a run that dies
    /// loses at most its last batch, at one write(2) per batch instead of one per record
    /// (issue 21).
    pub fn flush(&mut self) {
        if let (Some((path, w)), None) = (&mut self.records, &self.write_error) {
            if let Err(e) = w.flush() {
                self.write_error = Some(at(path)(e));
            }
        }
    }

    /// The statistics so far.
    pub fn summary(&self) -> RunSummary {
        self.aggregator.summary()
    }

    /// The requests so far over the run's time, for the diagnosis.
    pub fn timeline(&self) -> &canary_core::ClientTimeline {
        self.aggregator.timeline()
    }

    /// Writes `summary.json` and `summary.csv` for `report` (whose summary should come from
    /// [`ResultsWriter::summary`]) and closes the records file.
    /// Every file is tried, whatever failed before it: the summary is small and may still
    /// fit where the records did not. The first error is returned.
    pub fn finish<R: Serialize>(
        mut self,
        report: &R,
        summary: &RunSummary,
    ) -> Result<(), ArtifactError> {
        let mut first = self.write_error.take();
        if let Some((path, mut w)) = self.records.take() {
            if let Err(e) = w.flush() {
                first.get_or_insert(at(&path)(e));
            }
        }
        let Some(dir) = &self.dir else {
            return first.map_or(Ok(()), Err);
        };
        if let Err(e) = write_summary(dir, report, summary) {
            first.get_or_insert(e);
        }
        // The whole distributions, so shard runs merge exactly (`canaryd merge`).
        let path = dir.join(crate::HISTOGRAMS_FILE);
        let json = serde_json::to_vec(&crate::Histograms::of(&self.aggregator))
            .expect("histograms always serialize");
        if let Err(e) = write_whole(&path, &json) {
            first.get_or_insert(at(&path)(e));
        }
        first.map_or(Ok(()), Err)
    }
}

/// Writes `summary.json` (`report`) and `summary.csv` (`summary`) into `dir`: the end of
/// every run, and of a run rebuilt from its records after its process died.
pub fn write_summary<R: Serialize>(
    dir: &Path,
    report: &R,
    summary: &RunSummary,
) -> Result<(), ArtifactError> {
    // Whole or not at all: a process killed mid-write must not leave a torn summary.json,
    // which readers (the daemon's recovery among them) take as the run's own.
    let path = dir.join("summary.json");
    let json = serde_json::to_vec_pretty(report).expect("reports always serialize");
    write_whole(&path, &json).map_err(at(&path))?;
    let path = dir.join("summary.csv");
    write_whole(&path, summary_csv(summary).as_bytes()).map_err(at(&path))?;
    if let Some(t) = &summary.timeslices {
        let path = dir.join("timeslices.csv");
        write_whole(&path, t.csv().as_bytes()).map_err(at(&path))?;
    }
    Ok(())
}

/// One line's record, or why not, naming the field that failed (`field "trace_line": invalid
/// type: …`) and its column. `last`: the line is the file's last and has no line break; one
/// that ends inside its record is then the end of a file cut short (a process killed
/// mid-write, a partial copy), said so rather than as serde's `field "?": EOF while parsing a
/// value`.
fn record_of(line: &[u8], last: bool) -> Result<RequestRecord, String> {
    // The plain parse first: tracking the path costs every line of a long run; only a line
    // that fails is parsed again to name its field.
    if let Ok(r) = serde_json::from_slice::<RequestRecord>(line) {
        return Ok(r);
    }
    let mut de = serde_json::Deserializer::from_slice(line);
    serde_path_to_error::deserialize::<_, RequestRecord>(&mut de)
        .map_err(|e| {
            let field = e.path().to_string();
            unreadable(&e.into_inner(), (field != ".").then_some(field), last)
        })
        .and_then(|r| de.end().map(|()| r).map_err(|e| unreadable(&e, None, last)))
}

/// Why a line is not a record: serde's error `e` in `field`, for the file's `last` line or
/// another.
fn unreadable(e: &serde_json::Error, field: Option<String>, last: bool) -> String {
    let column = e.column();
    if e.is_eof() {
        // serde_path_to_error names a field whose key was never read `?`.
        let inside = match field.as_deref() {
            Some(f) if !f.contains('?') => format!("field \"{f}\""),
            _ => "a record".to_string(),
        };
        return match last {
            true => format!(
                "the last line is cut short: the file is truncated (it ends inside {inside}, at \
                 column {column})"
            ),
            false => format!("the line is cut short (it ends inside {inside}, at column {column})"),
        };
    }
    // serde_json counts lines within the one it was given: say the column only.
    let why = e.to_string();
    let why = why
        .rsplit_once(" at line ")
        .map_or(why.as_str(), |(w, _)| w);
    match field {
        Some(f) => format!("field \"{f}\": {why} (column {column})"),
        None => format!("{why} (column {column})"),
    }
}

/// A `records.jsonl` folded again into statistics.
#[derive(Debug, Clone)]
pub struct FoldedRecords {
    /// The statistics of every record read, as the run's writer would have made them
    /// (inter-chunk gaps only where records carry them, `--record-chunks`).
    pub summary: RunSummary,
    /// Records read.
    pub records: u64,
    /// Lines that are not a record, skipped: a run killed mid-write leaves its last line
    /// cut short.
    pub skipped_lines: u64,
}

/// Longest line [`read_records`] reads; a longer one is an error (a record with every chunk
/// gap of a long answer is well under it, and a file with no end of line, `/dev/zero`, must
/// not be read for ever).
const MAX_RECORD_LINE: u64 = 64 << 20;

/// Reads `records.jsonl` at `path` and folds its records with `goodput`, as the run itself
/// would have: for a run whose process died before writing its summary. Lines that do not
/// parse (the cut-short last one of a process killed mid-write) are skipped and counted.
pub fn fold_records(path: &Path, goodput: Goodput) -> Result<FoldedRecords, ArtifactError> {
    let mut aggregator = Aggregator::new(goodput);
    let read = read_records(path, |r, _| {
        let gaps = canary_core::ChunkGaps::from(r.chunk_gaps_ms.as_deref().unwrap_or_default());
        aggregator.add(&r, &gaps);
    })?;
    Ok(FoldedRecords {
        summary: aggregator.summary(),
        records: read.records,
        skipped_lines: read.skipped_lines,
    })
}

/// What [`read_records`] read of a `records.jsonl`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RecordsRead {
    /// Records read.
    pub records: u64,
    /// Lines skipped: not a record (the cut-short last line of a process killed mid-write
    /// among them).
    pub skipped_lines: u64,
    /// The first line skipped (counted from 1) and why it is not a record, naming the field.
    pub first_skipped: Option<(u64, String)>,
}

/// Calls `f` with each record of the `records.jsonl` at `path` and its line as written;
/// says what it read and skipped. A path that is not a regular file (a FIFO would wait for a
/// writer for ever, a device never end), or a line longer than `MAX_RECORD_LINE`, is an
/// error naming the file (and the line).
pub fn read_records(
    path: &Path,
    mut f: impl FnMut(RequestRecord, &[u8]),
) -> Result<RecordsRead, ArtifactError> {
    use std::io::{BufRead, Read};
    use std::os::unix::fs::OpenOptionsExt;
    // Opened without waiting (a FIFO's open waits for a writer), then refused unless it is a
    // regular file: checked on the file opened, not on the path before, so nothing can be
    // swapped in between. O_NONBLOCK does nothing to a regular file's reads.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(at(path))?;
    if !file.metadata().map_err(at(path))?.is_file() {
        return Err(at(path)(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file",
        )));
    }
    let mut reader = std::io::BufReader::new(file);
    let mut read = RecordsRead::default();
    let skip = |read: &mut RecordsRead, number: u64, why: String| {
        read.skipped_lines += 1;
        read.first_skipped.get_or_insert((number, why));
    };
    let mut line = Vec::new();
    for number in 1.. {
        line.clear();
        let n = (&mut reader)
            .take(MAX_RECORD_LINE + 1)
            .read_until(b'\n', &mut line)
            .map_err(at(path))?;
        if n == 0 {
            break;
        }
        if line.len() as u64 > MAX_RECORD_LINE && line.last() != Some(&b'\n') {
            // Too long to be a record, and perhaps endless: not read further.
            return Err(at(path)(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("line {number} is over {MAX_RECORD_LINE} bytes, longer than any record"),
            )));
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        // Only the file's last line can lack its line break.
        match record_of(&line, line.last() != Some(&b'\n')) {
            Ok(r) => {
                f(r, line.trim_ascii());
                read.records += 1;
            }
            Err(why) => skip(&mut read, number, why),
        }
    }
    Ok(read)
}

/// What a metric row's values are, by the run's rule for its client times
/// ([`canary_core::RxBounds::is_bound`]): `exact`, or `upper_bound` (TTFT, TTFO, TTFB, e2e over a
/// later segment's stamp or canaryd's read), `lower_bound` (canaryd's read delay over such a
/// stamp), `bound` (a gap between two such times: in neither direction).
fn values_kind(bounds: &canary_core::RxBounds, metric: &str) -> &'static str {
    if !bounds.is_bound(metric) {
        return "exact";
    }
    match metric {
        "time_to_first_token"
        | "time_to_first_output_token"
        | "time_to_first_byte"
        | "request_latency" => "upper_bound",
        "client_read_delay" => "lower_bound",
        _ => "bound",
    }
}

/// The summary as CSV: one row per metric with its statistics, then the run-level figures.
/// A metric row ends with its kinds: `values_kind` (count, avg, min, max and std are exact
/// over the values, which are themselves as this says) and `percentiles_kind` (`estimate`:
/// from a histogram, within 0.1 % or 0.5 µs, whichever is larger).
pub fn summary_csv(s: &RunSummary) -> String {
    let mut out = String::from(
        "metric,unit,count,avg,min,max,std,p1,p5,p10,p25,p50,p75,p90,p95,p99,p99.9,values_kind,\
         percentiles_kind\n",
    );
    let bounds = s.receive_timestamps.bounds();
    for (name, st) in &s.metrics {
        let Stats {
            unit,
            count,
            avg,
            min,
            max,
            std,
            p1,
            p5,
            p10,
            p25,
            p50,
            p75,
            p90,
            p95,
            p99,
            p99_9,
        } = st;
        out.push_str(&format!(
            "{name},{unit},{count},{avg:.4},{min:.4},{max:.4},{std:.4},{p1:.4},{p5:.4},{p10:.4},{p25:.4},{p50:.4},{p75:.4},{p90:.4},{p95:.4},{p99:.4},{p99_9:.4},{},estimate\n",
            values_kind(&bounds, name)
        ));
    }
    out.push_str("\nmetric,value\n");
    // A free-text cell, quoted as RFC 4180 says.
    let csv_text = |t: &str| format!("\"{}\"", t.replace('"', "\"\""));
    let mut scalar = |k: &str, v: String| out.push_str(&format!("{k},{v}\n"));
    scalar("requests", s.requests.to_string());
    scalar("completed", s.completed.to_string());
    scalar("errors", s.errors.to_string());
    // A share of no judged request (every one cancelled on purpose) is an empty cell, as
    // summary.json's null.
    let share = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.6}"));
    scalar("error_rate", share(s.error_rate));
    for (kind, n) in &s.errors_by_kind {
        scalar(&format!("errors.{kind}"), n.to_string());
    }
    scalar("warmup_requests", s.warmup_requests.to_string());
    scalar("duration_s", format!("{:.3}", s.duration_s));
    // A run too short for a rate leaves the cell empty; `rate_unavailable` says why.
    let rate = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.4}"));
    scalar("request_throughput", rate(s.request_throughput));
    scalar("output_token_throughput", rate(s.output_token_throughput));
    if let Some(why) = &s.rate_unavailable {
        scalar("rate_unavailable", csv_text(why));
    }
    scalar("total_input_tokens", s.total_input_tokens.to_string());
    scalar("total_output_tokens", s.total_output_tokens.to_string());
    scalar("total_cached_tokens", s.total_cached_tokens.to_string());
    if let Some(g) = &s.goodput {
        scalar("goodput", rate(g.goodput));
        scalar("good_requests", g.good_requests.to_string());
        scalar("good_request_fraction", share(g.good_request_fraction));
        // The judgements that rest on a bound, and what they leave of the good count.
        for (kind, counts) in [
            ("misses", &g.uncertain_misses),
            ("meets", &g.uncertain_meets),
        ] {
            for (metric, n) in counts {
                scalar(&format!("goodput.uncertain_{kind}.{metric}"), n.to_string());
            }
        }
        if let Some(n) = g.good_requests_at_least {
            scalar("goodput.good_requests_at_least", n.to_string());
        }
        if let Some(n) = g.good_requests_at_most {
            scalar("goodput.good_requests_at_most", n.to_string());
        }
    }
    let rx = &s.receive_timestamps;
    if let Some(state) = &rx.state {
        scalar("receive_timestamps.state", state.clone());
    }
    scalar("receive_timestamps.requests", rx.requests.to_string());
    for (event, sources) in [
        ("first_token", &rx.first_token),
        ("end", &rx.end),
        ("head", &rx.head),
    ] {
        for (source, n) in sources {
            scalar(
                &format!("receive_timestamps.{event}.{source}"),
                n.to_string(),
            );
        }
    }
    scalar(
        "receive_timestamps.token_events",
        rx.token_events.to_string(),
    );
    scalar(
        "receive_timestamps.token_events_bound",
        rx.token_events_bound.to_string(),
    );
    if let Some(u) = rx.clock_map_uncertainty_max_us {
        scalar(
            "receive_timestamps.clock_map_uncertainty_max_us",
            format!("{u:.3}"),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use canary_core::Status;

    #[test]
    fn writes_records_as_they_come_and_a_summary_at_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = ResultsWriter::new(Some(dir.path()), Goodput::default()).unwrap();
        let rec = RequestRecord {
            id: 3,
            ttft_ms: Some(12.5),
            e2e_ms: Some(40.0),
            ended_at_ms: 40.0,
            ..Default::default()
        };
        w.record(&rec, &ChunkGaps::from(&[1.0, 2.0][..]));
        // Already on disk after its batch, before the run finishes.
        w.flush();
        let lines = std::fs::read_to_string(dir.path().join("records.jsonl")).unwrap();
        let back: RequestRecord = serde_json::from_str(lines.lines().next().unwrap()).unwrap();
        assert_eq!(back.id, 3);
        assert_eq!(back.status, Status::Ok);
        let summary = w.summary();
        w.finish(&summary, &summary).unwrap();
        let json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.path().join("summary.json")).unwrap())
                .unwrap();
        assert_eq!(json["requests"], 1);
        assert_eq!(json["time_to_first_token"]["avg"], 12.5);
        let csv = std::fs::read_to_string(dir.path().join("summary.csv")).unwrap();
        assert!(csv.contains("time_to_first_token,ms,1,12.5000"), "{csv}");
        assert!(csv.contains("inter_chunk_latency,ms,2,"), "{csv}");
        assert!(csv.contains("\nrequests,1\n"), "{csv}");
    }

    #[test]
    fn records_wait_for_their_batch_to_reach_the_disk_and_all_of_them_do() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = ResultsWriter::new(Some(dir.path()), Goodput::default()).unwrap();
        let path = dir.path().join("records.jsonl");
        let on_disk = || std::fs::read_to_string(&path).unwrap().lines().count();
        let rec = |id| RequestRecord {
            id,
            e2e_ms: Some(40.0),
            ..Default::default()
        };
        for id in 0..3 {
            w.record(&rec(id), &ChunkGaps::default());
        }
        // Buffered: one write(2) per batch, not per record.
        assert_eq!(on_disk(), 0);
        w.flush();
        assert_eq!(on_disk(), 3);
        w.record(&rec(3), &ChunkGaps::default());
        assert_eq!(on_disk(), 3);
        let summary = w.summary();
        w.finish(&summary, &summary).unwrap();
        assert_eq!(on_disk(), 4, "finish writes the last batch");
    }

    // A process killed between two of the writer's writes must not leave half a record: every
    // write ends at a line's end, however many records a batch holds.
    #[test]
    fn what_reaches_the_file_always_ends_between_records() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = ResultsWriter::new(Some(dir.path()), Goodput::default()).unwrap();
        let path = dir.path().join("records.jsonl");
        let gaps: Vec<f64> = (0..200).map(|i| i as f64 * 0.37).collect();
        let mut wrote = 0;
        // About 2 KB a record, 600 of them: the buffer (256 KiB) fills several times before
        // the batch is flushed.
        for id in 0..600 {
            let rec = RequestRecord {
                id,
                e2e_ms: Some(40.0),
                chunk_gaps_ms: Some(gaps.clone()),
                ..Default::default()
            };
            w.record(&rec, &ChunkGaps::default());
            let on_disk = std::fs::read(&path).unwrap();
            if on_disk.len() > wrote {
                assert_eq!(
                    on_disk.last(),
                    Some(&b'\n'),
                    "a write ended inside record {id}"
                );
                wrote = on_disk.len();
            }
        }
        assert!(
            wrote > 0,
            "the buffer never filled: the test checked nothing"
        );
        w.flush();
        let lines = std::fs::read_to_string(&path).unwrap().lines().count();
        assert_eq!(lines, 600);
    }

    #[test]
    fn records_fold_back_into_the_same_summary_skipping_a_line_cut_short() {
        let dir = tempfile::tempdir().unwrap();
        let goodput: Goodput = "time_to_first_token:20".parse().unwrap();
        let mut w = ResultsWriter::new(Some(dir.path()), goodput.clone()).unwrap();
        for (id, ttft) in [(0, 12.5), (1, 30.0), (2, 8.0)] {
            let rec = RequestRecord {
                id,
                ttft_ms: Some(ttft),
                e2e_ms: Some(ttft + 40.0),
                ended_at_ms: 100.0 * id as f64 + ttft + 40.0,
                ..Default::default()
            };
            w.record(&rec, &ChunkGaps::new());
        }
        // The collector's batch ends, then the process is killed in its next one.
        w.flush();
        let written = w.summary();
        // The process is killed in the middle of writing a fourth record.
        let path = dir.path().join("records.jsonl");
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(br#"{"id":3,"ttft_ms":1"#).unwrap();
        drop(f);
        let folded = fold_records(&path, goodput).unwrap();
        assert_eq!((folded.records, folded.skipped_lines), (3, 1));
        // Said as what it is: serde said `field "?": EOF while parsing a value`.
        let read = read_records(&path, |_, _| {}).unwrap();
        assert_eq!(
            read.first_skipped,
            Some((
                4,
                "the last line is cut short: the file is truncated (it ends inside a record, \
                 at column 19)"
                    .into()
            ))
        );
        assert_eq!(
            serde_json::to_value(&folded.summary).unwrap(),
            serde_json::to_value(&written).unwrap()
        );
        assert_eq!(folded.summary.goodput.unwrap().good_requests, 2);
        let e = fold_records(&dir.path().join("none.jsonl"), Goodput::default()).unwrap_err();
        assert!(e.to_string().contains("none.jsonl"), "{e}");
    }

    // `canaryd merge` with a shard's records.jsonl a FIFO or /dev/zero never ended (a CPU spun
    // on /dev/zero's endless line): not a regular file, or a line past the cap, is an error
    // naming the file and the line.
    #[test]
    fn records_that_are_not_a_file_or_have_an_endless_line_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let chain = |e: ArtifactError| canary_core::error_chain(&e);
        let fifo = dir.path().join("fifo.jsonl");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = chain(read_records(&fifo, |_, _| {}).unwrap_err());
        assert!(e.ends_with("fifo.jsonl: not a regular file"), "{e}");
        let e = chain(read_records(Path::new("/dev/zero"), |_, _| {}).unwrap_err());
        assert_eq!(e, "/dev/zero: not a regular file");
        // A regular file whose second line never ends before the cap: read no further.
        let long = dir.path().join("long.jsonl");
        let mut f = File::create(&long).unwrap();
        f.write_all(b"{}\n").unwrap();
        f.set_len(MAX_RECORD_LINE + 10).unwrap();
        drop(f);
        let e = chain(read_records(&long, |_, _| {}).unwrap_err());
        assert!(
            e.ends_with(&format!(
                "long.jsonl: line 2 is over {MAX_RECORD_LINE} bytes, longer than any record"
            )),
            "{e}"
        );
    }

    #[test]
    fn unwritable_directory_names_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("plainfile");
        std::fs::write(&file, "x").unwrap();
        let err = ResultsWriter::new(Some(&file.join("sub")), Goodput::default())
            .err()
            .unwrap();
        assert!(err.to_string().contains("plainfile"), "{err}");
        // Issue 14, item 13: the chain printed its cause three times.
        let chain = format!("{:#}", anyhow::Error::from(crate::ReplayError::from(err)));
        assert!(chain.starts_with("writing results: "), "{chain}");
        assert_eq!(chain.matches("Not a directory").count(), 1, "{chain}");
    }

    // Every request cancelled on purpose: no share to state, an empty cell as summary.json's
    // null (it wrote 0.000000, "no errors").
    #[test]
    fn a_run_that_judged_nothing_leaves_its_shares_empty() {
        let mut agg = Aggregator::new("time_to_first_token:20".parse().unwrap());
        let rec = RequestRecord {
            status: Status::Cancelled,
            ..Default::default()
        };
        agg.add(&rec, &ChunkGaps::default());
        let csv = summary_csv(&agg.summary());
        assert!(csv.contains("\nerror_rate,\n"), "{csv}");
        assert!(csv.contains("\ngood_request_fraction,\n"), "{csv}");
    }

    // Audit F7: summary.csv's metric rows said nothing of their kind, though a quarter of
    // the first tokens were a later segment's stamp (TTFT upper bounds) and every
    // percentile is a histogram estimate.
    #[test]
    fn metric_rows_say_what_kind_of_figure_they_are() {
        use canary_core::{RxSource, RxTiming};
        let stamped = |first, ttft| RequestRecord {
            ttft_ms: Some(ttft),
            e2e_ms: Some(40.0),
            itl_ms: Some(3.0),
            ended_at_ms: 40.0,
            chunks: 11,
            rx: Some(RxTiming {
                first_token: Some(first),
                end: Some(RxSource::Kernel),
                userspace: canary_core::UserspaceTimes {
                    ttft_ms: Some(ttft + 0.2),
                    ..Default::default()
                },
                ..Default::default()
            }),
            ..Default::default()
        };
        let csv = |records: &[RequestRecord]| {
            let mut agg = Aggregator::new(Goodput::default());
            for r in records {
                agg.add(r, &ChunkGaps::default());
            }
            summary_csv(&agg.summary())
        };
        let row = |csv: &str, metric: &str| {
            let line = csv
                .lines()
                .find(|l| l.starts_with(&format!("{metric},")))
                .unwrap_or_else(|| panic!("{metric}: {csv}"))
                .to_string();
            let cells: Vec<String> = line.split(',').map(str::to_string).collect();
            (cells[17].clone(), cells[18].clone())
        };
        let exact = csv(&[stamped(RxSource::Kernel, 10.0)]);
        assert!(
            exact.starts_with("metric,unit,count,avg,min,max,std,p1,"),
            "{exact}"
        );
        assert!(exact
            .lines()
            .next()
            .unwrap()
            .ends_with(",p99.9,values_kind,percentiles_kind"));
        assert_eq!(
            row(&exact, "time_to_first_token"),
            ("exact".into(), "estimate".into())
        );
        let late = csv(&[
            stamped(RxSource::Kernel, 10.0),
            stamped(RxSource::KernelBound, 12.0),
        ]);
        assert_eq!(row(&late, "time_to_first_token").0, "upper_bound");
        assert_eq!(row(&late, "inter_token_latency").0, "bound");
        assert_eq!(row(&late, "client_read_delay").0, "lower_bound");
        assert_eq!(row(&late, "request_latency").0, "exact");
        // The run-level section keeps its two columns.
        assert!(late.contains("\nrequests,2\n"), "{late}");
    }

    // summary.csv's run rows counted only the first tokens' stamps and the plain good count:
    // the ends' and heads' stamps, and the judgements resting on a bound, were in
    // summary.json alone.
    #[test]
    fn run_rows_carry_every_stamp_count_and_the_uncertain_judgements() {
        use canary_core::{RxSource, RxTiming};
        let mut agg = Aggregator::new("time_to_first_token:20".parse().unwrap());
        let late = RequestRecord {
            ttfb_ms: Some(24.0),
            ttft_ms: Some(25.0),
            e2e_ms: Some(40.0),
            ended_at_ms: 40.0,
            chunks: 3,
            rx: Some(RxTiming {
                head: Some(RxSource::KernelBound),
                first_token: Some(RxSource::KernelBound),
                end: Some(RxSource::Userspace),
                ..Default::default()
            }),
            ..Default::default()
        };
        agg.add(&late, &ChunkGaps::default());
        let csv = summary_csv(&agg.summary());
        for row in [
            "\nreceive_timestamps.first_token.kernel_bound,1\n",
            "\nreceive_timestamps.end.userspace,1\n",
            "\nreceive_timestamps.head.kernel_bound,1\n",
            "\ngoodput.uncertain_misses.time_to_first_token,1\n",
            "\ngoodput.good_requests_at_least,0\n",
            "\ngoodput.good_requests_at_most,1\n",
        ] {
            assert!(csv.contains(row), "{row:?} in {csv}");
        }
    }

    // TTFB was always `exact`, though the head's stamp can be a later segment's: a whole
    // response in one write (a non-streaming answer) reaches canaryd in one read, and the
    // head's time is the body's.
    #[test]
    fn a_ttfb_over_a_head_read_with_later_bytes_is_an_upper_bound() {
        use canary_core::{RxSource, RxTiming};
        let headed = |head| RequestRecord {
            ttfb_ms: Some(8.0),
            ttft_ms: Some(10.0),
            e2e_ms: Some(40.0),
            ended_at_ms: 40.0,
            chunks: 1,
            rx: Some(RxTiming {
                head: Some(head),
                first_token: Some(RxSource::Kernel),
                end: Some(RxSource::Kernel),
                ..Default::default()
            }),
            ..Default::default()
        };
        let kind = |records: &[RequestRecord]| {
            let mut agg = Aggregator::new(Goodput::default());
            for r in records {
                agg.add(r, &ChunkGaps::default());
            }
            let csv = summary_csv(&agg.summary());
            let line = csv
                .lines()
                .find(|l| l.starts_with("time_to_first_byte,"))
                .unwrap_or_else(|| panic!("no TTFB row: {csv}"))
                .to_string();
            line.split(',').nth(17).unwrap().to_string()
        };
        assert_eq!(kind(&[headed(RxSource::Kernel)]), "exact");
        for late in [RxSource::KernelBound, RxSource::Userspace] {
            assert_eq!(
                kind(&[headed(RxSource::Kernel), headed(late)]),
                "upper_bound",
                "{late:?}"
            );
        }
        // Receive timestamps off: every head is canaryd's read.
        let mut off = headed(RxSource::Kernel);
        off.rx = None;
        assert_eq!(kind(&[off]), "upper_bound");
    }
}

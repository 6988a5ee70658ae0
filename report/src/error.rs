//! What can go wrong reading artifacts or writing a report.

use std::path::PathBuf;

/// A report that could not be made, naming the file (and line, and field) at fault.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// A file could not be read or written.
    #[error("{}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A folder holds no run: neither `records.jsonl` nor runs in its subfolders.
    #[error("{}: no run here (no records.jsonl, and no subfolder holds one)", path.display())]
    NoRun {
        /// The folder.
        path: PathBuf,
    },
    /// A folder that cannot be one side of a comparison (a sweep's, or neither a run's nor
    /// an experiment's).
    #[error("{}: {why}", path.display())]
    NotComparable {
        /// The folder.
        path: PathBuf,
        /// Why not.
        why: String,
    },
    /// `summary.json` is not a JSON object, or a field of it has the wrong type.
    #[error("{}: {what}", path.display())]
    Summary {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the field.
        what: String,
    },
    /// A line of `records.jsonl` is not a record.
    #[error("{}:{line}: {what}", path.display())]
    Record {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: u64,
        /// What is wrong, naming the field when one is at fault.
        what: String,
    },
    /// A folder named twice on one command line: a series would show its runs twice.
    #[error(
        "{}: named twice (folders {first} and {again} of those given): a series shows each \
         run once",
        path.display()
    )]
    Twice {
        /// The folder, as given the second time.
        path: PathBuf,
        /// Its first place among the folders given, from 1.
        first: usize,
        /// Its second.
        again: usize,
    },
    /// The page's file is refused: it would replace a file of a run being read.
    #[error("{}: {why}", path.display())]
    Output {
        /// The file asked for (`-o`).
        path: PathBuf,
        /// Why not.
        why: String,
    },
    /// A chart could not be drawn (a bug: ranges are checked before drawing).
    #[error("drawing the chart {chart}: {what}")]
    Draw {
        /// The chart's id.
        chart: String,
        /// The drawing library's message.
        what: String,
    },
}

pub(crate) fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> ReportError + '_ {
    move |source| ReportError::Io {
        path: path.to_path_buf(),
        source,
    }
}

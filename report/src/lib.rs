//! canary-report: self-contained HTML reports of canaryd runs, read from their artifacts
//! (`records.jsonl`, `summary.json`), never from canaryd's internals.
//!
//! * [`load`] reads run folders (one run, several, a folder of runs: a series; a sweep's folder
//!   with its `sweep.json`; a `--runs N` experiment's).
//! * [`render_report`] makes one HTML page of them: latency CDFs and histograms, TTFT over the
//!   run with schedule lag and errors, telemetry, the eBPF TTFT split, the run context; for a
//!   series the throughput–latency curve with its knee and the Pareto front (a sweep's as its
//!   `sweep.json` states them); for an experiment its estimates with their intervals.
//! * [`compare`] judges two runs, or two `--runs N` experiments ([`Experiment`]), metric by
//!   metric: the daemon's baseline rule ([`canary_core::compare`]) on every request's value,
//!   and Welch's t-test on run figures when both sides are repeated; for the terminal
//!   ([`Comparison::to_text`]) and as a page ([`Comparison::to_html`]).
//! * [`status::render`] draws the daemon's status page (recent runs per workload) from a
//!   [`status::StatusPage`] the daemon fills.
//!
//! Pages are one file with no script: inline CSS, charts as SVG drawn in Rust (plotters), and
//! a Content-Security-Policy of `default-src 'none'`, so a report opened from a laptop's disk
//! or an artifact store fetches nothing.
//!
//! ```no_run
//! let loaded = canary_report::load(&["canaryd-out/demo".into()]).unwrap();
//! std::fs::write("report.html", canary_report::render_report(&loaded).unwrap()).unwrap();
//! ```
#![deny(missing_docs)]

mod artifacts;
pub mod cli;
mod compare;
mod error;
mod experiment;
mod html;
mod page_file;
mod plot;
mod report;
mod sample;
mod sections;
pub mod status;

pub use artifacts::{
    load, utc, Figures, KernelParts, Loaded, Metric, Records, Repeats, Request, Run, Summary,
    SweepFile, Telemetry,
};
pub use compare::{compare, compare_sweeps, Comparison, Sweep, SweepComparison, RUNS_ALPHA};
pub use error::ReportError;
pub use experiment::{Experiment, LeftOutRun};
pub use html::{esc, page, CSP};
pub use report::render as render_report;

//! The `canaryd report` and `canaryd compare` commands: their flags and what they do, so the
//! daemon's command line only parses and prints.

use crate::{load, render_report, Experiment, ReportError, Sweep};
use canary_core::compare::ShiftRules;
use std::path::{Path, PathBuf};

/// Flags of `canaryd report`.
#[derive(Debug, Clone, clap::Args)]
pub struct ReportArgs {
    /// Run folders (each with records.jsonl and summary.json). Several, or a folder of runs,
    /// make a series (a sweep).
    #[arg(required = true, value_name = "DIR")]
    pub dirs: Vec<PathBuf>,
    /// The HTML file to write.
    #[arg(short, long, value_name = "FILE", default_value = "report.html")]
    pub output: PathBuf,
}

/// Flags of `canaryd compare`.
#[derive(Debug, Clone, clap::Args)]
pub struct CompareArgs {
    /// The reference: a run's folder, or a `--runs N` experiment's.
    pub a: PathBuf,
    /// What is compared against it: a run's folder, or an experiment's.
    pub b: PathBuf,
    /// Also write the comparison as an HTML page.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Print JSON instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// Writes the report; returns the line to print.
pub fn report(args: &ReportArgs) -> Result<String, ReportError> {
    let inputs: Vec<&Path> = args.dirs.iter().map(PathBuf::as_path).collect();
    crate::page_file::check(&args.output, &inputs)?;
    let loaded = load(&args.dirs)?;
    let html = render_report(&loaded)?;
    write(&args.output, &html)?;
    let requests: u64 = loaded.runs.iter().map(|r| r.figures().requests).sum();
    Ok(format!(
        "report: {} ({} run(s), {} requests, {} KiB)",
        args.output.display(),
        loaded.runs.len(),
        requests,
        html.len().div_ceil(1024)
    ))
}

/// Compares the runs (or the sweeps), writes the page if asked; returns the text to print.
pub fn compare(args: &CompareArgs) -> Result<String, ReportError> {
    if let Some(out) = &args.output {
        crate::page_file::check(out, &[&args.a, &args.b])?;
    }
    match (Sweep::load(&args.a)?, Sweep::load(&args.b)?) {
        (Some(a), Some(b)) => return compare_sweeps(args, &a, &b),
        (None, None) => {}
        (a, _) => {
            let (sweep, other) = if a.is_some() {
                (&args.a, &args.b)
            } else {
                (&args.b, &args.a)
            };
            return Err(ReportError::NotComparable {
                path: other.clone(),
                why: format!(
                    "not a sweep, and {} is one: compare two sweeps, or two runs",
                    sweep.display()
                ),
            });
        }
    }
    let a = Experiment::load(&args.a)?;
    let b = Experiment::load(&args.b)?;
    let c = crate::compare(&a, &b, &ShiftRules::default());
    let html = || c.to_html();
    say(args, &c, c.to_text(), html)
}

/// [`compare`] of two sweeps.
fn compare_sweeps(args: &CompareArgs, a: &Sweep, b: &Sweep) -> Result<String, ReportError> {
    let c = crate::compare_sweeps(a, b, &ShiftRules::default())?;
    say(args, &c, c.to_text(), || Ok(c.to_html()))
}

/// Writes the comparison's page when asked (`-o`), and returns what to print: its JSON with
/// `--json`, else `text` and where the page went.
fn say(
    args: &CompareArgs,
    comparison: &impl serde::Serialize,
    text: String,
    html: impl FnOnce() -> Result<String, ReportError>,
) -> Result<String, ReportError> {
    if let Some(path) = &args.output {
        write(path, &html()?)?;
    }
    let mut out = if args.json {
        serde_json::to_string_pretty(comparison).expect("comparisons always serialize")
    } else {
        text
    };
    if let (Some(path), false) = (&args.output, args.json) {
        out.push_str(&format!("\npage: {}", path.display()));
    }
    Ok(out.trim_end().to_string())
}

/// Writes `text` to `path` whole (beside it, then renamed), never through a link planted
/// where it goes: a reader never sees half a page.
fn write(path: &Path, text: &str) -> Result<(), ReportError> {
    canary_files::write_whole(path, text.as_bytes()).map_err(crate::error::io(path))
}

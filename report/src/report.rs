//! A whole report page: one run, or a series of runs (a sweep).

use crate::artifacts::Run;
use crate::html::{attr, esc, page};
use crate::sections::{self, section};
use crate::ReportError;

/// The report of `runs`: a run page for one, a series page for several. `runs` must not be
/// empty ([`crate::load_runs`] never returns none).
pub fn render(runs: &[Run]) -> Result<String, ReportError> {
    match runs {
        [run] => {
            let title = format!("canaryd report: {}", run.name());
            let mut body = format!("<h1>{}</h1>\n{}", esc(&title), lead(run));
            body.push_str(&run_sections(run, "")?);
            Ok(page(&title, "run", &body))
        }
        _ => series(runs),
    }
}

fn series(runs: &[Run]) -> Result<String, ReportError> {
    let title = format!("canaryd report: a series of {} runs", runs.len());
    let mut body = format!(
        "<h1>{}</h1>\n<p class=\"lead\">{}</p>\n",
        esc(&title),
        esc(&runs
            .iter()
            .map(|r| r.label.as_str())
            .collect::<Vec<_>>()
            .join(", "))
    );
    body.push_str(&section(
        "series",
        "Throughput and latency across the runs",
        &sections::sweep::render(runs)?,
    ));
    let labelled: Vec<(String, &Run)> = runs.iter().map(|r| (r.label.clone(), r)).collect();
    body.push_str(&section(
        "series-latency",
        "Latency distributions, run by run",
        &sections::latency::overlay(&labelled, "series-")?,
    ));
    for (i, run) in runs.iter().enumerate() {
        let prefix = format!("run{i}-");
        body.push_str(&format!(
            "<details id=\"{}\"><summary>{}</summary>\n{}{}</details>\n",
            attr(&format!("{prefix}details")),
            esc(&format!("Run {}: {}", i + 1, run.label)),
            lead(run),
            run_sections(run, &prefix)?
        ));
    }
    Ok(page(&title, "series", &body))
}

/// One line of what was run against what.
fn lead(run: &Run) -> String {
    let Some(s) = &run.summary else {
        return format!(
            "<p class=\"lead\">{}</p>\n",
            esc(&run.dir.display().to_string())
        );
    };
    let mut parts = Vec::new();
    if let Some(model) = s.text(&["run", "target", "model"]) {
        parts.push(format!("model {model}"));
    }
    if let Some(url) = s.text(&["run", "target", "url"]) {
        parts.push(format!("at {url}"));
    }
    if let Some(trace) = s.text(&["run", "trace", "path"]) {
        parts.push(format!("trace {trace}"));
    }
    if let Some(speedup) = s.number(&["run", "speedup"]) {
        parts.push(format!("{speedup}× speed"));
    }
    if let Some(ns) = s.started_unix_ns() {
        parts.push(format!("started {}", crate::artifacts::utc(ns)));
    }
    format!("<p class=\"lead\">{}</p>\n", esc(&parts.join(" · ")))
}

/// Every section of one run that its artifacts have data for; `prefix` keeps ids unique.
fn run_sections(run: &Run, prefix: &str) -> Result<String, ReportError> {
    let id = |s: &str| format!("{prefix}{s}");
    let mut html = section(
        &id("headline"),
        "Headline",
        &sections::headline::render(run),
    );
    html.push_str(&section(
        &id("latency"),
        "Latency distributions",
        &sections::latency::render(run, prefix)?,
    ));
    html.push_str(&section(
        &id("timeline"),
        "Over the run",
        &sections::timeline::render(run, prefix)?,
    ));
    if let Some(t) = sections::telemetry::render(run, prefix)? {
        html.push_str(&section(&id("telemetry"), "GPU and server telemetry", &t));
    }
    if let Some(k) = sections::kernel::render(run, prefix)? {
        html.push_str(&section(&id("kernel"), "TTFT decomposition (eBPF)", &k));
    }
    if let Some(t) = sections::slots::timeslices(run) {
        html.push_str(&section(&id("timeslices"), "Timeslices", &t));
    }
    if let Some(d) = sections::slots::diagnosis(run) {
        html.push_str(&section(&id("diagnosis"), "Diagnosis", &d));
    }
    html.push_str(&section(
        &id("context"),
        "Run context",
        &sections::context::render(run),
    ));
    Ok(html)
}

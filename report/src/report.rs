//! A whole report page: one run, a `--runs N` experiment, or a series of runs (a sweep).

use crate::artifacts::{Loaded, Repeats, Run};
use crate::html::{attr, esc, page};
use crate::sections::{self, section};
use crate::ReportError;

/// The report of what [`crate::load`] loaded: an experiment's page for an experiment, a run
/// page for one run, a series page for several.
pub fn render(loaded: &Loaded) -> Result<String, ReportError> {
    if let Some(e) = &loaded.experiment {
        return experiment(e, loaded);
    }
    match loaded.runs.as_slice() {
        [run] => {
            let title = format!("canaryd report: {}", run.name());
            let mut body = format!("<h1>{}</h1>\n{}", esc(&title), lead(run));
            body.push_str(&warnings(&loaded.notes));
            body.push_str(&run_sections(run, "")?);
            Ok(page(&title, "run", &body))
        }
        runs => series(runs, loaded),
    }
}

/// Sentences about what the folders hold that is not on the page, first.
fn warnings(notes: &[String]) -> String {
    notes
        .iter()
        .map(|n| format!("<p class=\"warn\">{}</p>\n", esc(n)))
        .collect()
}

fn series(runs: &[Run], loaded: &Loaded) -> Result<String, ReportError> {
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
    body.push_str(&warnings(&loaded.notes));
    body.push_str(&section(
        "series",
        "Throughput and latency across the runs",
        &sections::sweep::render(runs, loaded.sweep.as_ref())?,
    ));
    body.push_str(&overlay(runs.iter())?);
    body.push_str(&run_details(runs, |_| None)?);
    Ok(page(&title, "series", &body))
}

/// A `--runs N` experiment: its estimates, its runs' distributions overlaid (those its
/// estimates are over), then each run's own sections, those left out named.
fn experiment(e: &Repeats, loaded: &Loaded) -> Result<String, ReportError> {
    let name = crate::artifacts::folder_name(&e.dir);
    let title = format!(
        "canaryd report: experiment {name} ({} runs)",
        e.per_run.len()
    );
    let mut body = format!("<h1>{}</h1>\n", esc(&title));
    if let Some(first) = loaded.runs.first() {
        body.push_str(&lead(first));
    }
    body.push_str(&warnings(&loaded.notes));
    body.push_str(&section(
        "estimates",
        "Estimates over the runs",
        &sections::repeats::render(e, &loaded.runs),
    ));
    let left_out = |r: &Run| e.run(&r.label).and_then(|x| x.left_out.clone());
    let complete = loaded.runs.iter().filter(|r| left_out(r).is_none());
    if complete.clone().next().is_some() {
        body.push_str(&overlay(complete)?);
    }
    body.push_str(&run_details(&loaded.runs, left_out)?);
    Ok(page(&title, "experiment", &body))
}

/// The runs' CDFs overlaid.
fn overlay<'a>(runs: impl Iterator<Item = &'a Run>) -> Result<String, ReportError> {
    let labelled: Vec<(String, &Run)> = runs.map(|r| (r.label.clone(), r)).collect();
    Ok(section(
        "series-latency",
        "Latency distributions, run by run",
        &sections::latency::overlay(&labelled, "series-")?,
    ))
}

/// Each run's own sections, collapsed; `left_out` says why a run is left out of its
/// experiment's estimates.
fn run_details(
    runs: &[Run],
    left_out: impl Fn(&Run) -> Option<String>,
) -> Result<String, ReportError> {
    let mut html = String::new();
    for (i, run) in runs.iter().enumerate() {
        let prefix = format!("run{i}-");
        let mut head = format!("Run {}: {}", i + 1, run.label);
        if let Some(why) = left_out(run) {
            head.push_str(&format!(" (left out of the estimates: {why})"));
        }
        html.push_str(&format!(
            "<details id=\"{}\"><summary>{}</summary>\n{}{}</details>\n",
            attr(&format!("{prefix}details")),
            esc(&head),
            lead(run),
            run_sections(run, &prefix)?
        ));
    }
    Ok(html)
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
    if let Some(d) = sections::diagnosis::render(run) {
        html.push_str(&section(&id("diagnosis"), "Diagnosis", &d));
    }
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
    if let Some(t) = sections::timeslices::render(run, prefix)? {
        html.push_str(&section(&id("timeslices"), "Timeslices", &t));
    }
    html.push_str(&section(
        &id("context"),
        "Run context",
        &sections::context::render(run),
    ));
    Ok(html)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::artifacts::{KernelParts, Records, Request, Telemetry};

    fn loaded(runs: Vec<Run>) -> Loaded {
        Loaded {
            runs,
            ..Default::default()
        }
    }

    /// Generated requests (not a real run: real runs are rendered by daemon/tests/report.rs):
    /// one every 10 ms, TTFT rising with a slow wave, one huge outlier, 1 % errors, kernel
    /// parts and telemetry on each.
    fn generated(n: usize) -> Run {
        let requests = (0..n)
            .map(|i| {
                let t = i as f64 * 10.0;
                let ttft = if i == n / 2 {
                    98_765.0
                } else {
                    20.0 + (i % 97) as f64 + 10.0 * (t / 60_000.0).sin()
                };
                let ok = i % 100 != 7;
                Request {
                    ok,
                    error_kind: (!ok).then(|| "timeout".into()),
                    scheduled_ms: t,
                    sent_ms: t + 0.2,
                    ended_ms: t + ttft + 500.0,
                    lag_ms: 0.2,
                    ttft_ms: ok.then_some(ttft),
                    itl_ms: ok.then_some(5.0 + (i % 13) as f64 / 10.0),
                    e2e_ms: ok.then_some(ttft + 500.0),
                    tokens_per_s: Some(200.0),
                    output_tokens: 100,
                    telemetry: Telemetry {
                        server_queue_depth_at_send: Some((i % 17) as f64),
                        server_kv_usage_at_send: Some(0.5),
                        ..Default::default()
                    },
                    kernel: Some(KernelParts {
                        request_write_ms: Some(0.05),
                        server_wait_ms: Some(ttft * 0.8),
                        remainder_ms: Some(ttft * 0.15),
                        client_overhead_ms: Some(ttft * 0.05 - 0.05),
                        ..Default::default()
                    }),
                    ..Default::default()
                }
            })
            .collect();
        Run {
            dir: "generated".into(),
            label: "generated".into(),
            records: Records {
                requests,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn a_100k_request_page_stays_small_and_keeps_its_tail() {
        let html = render(&loaded(vec![generated(100_000)])).unwrap();
        assert!(html.len() < 3 << 20, "{} bytes", html.len());
        // The one outlier is on the page: in the table (exact max) and as the CDF's last point.
        assert!(html.contains("98,765 ms"), "max TTFT missing");
        // Timelines are folded into buckets, errors included.
        assert!(html.contains("TTFT min–max"));
        assert!(
            html.contains("errors (1,000) at their end"),
            "errors not marked"
        );
        assert!(
            html.contains("2,000 of 99,000 values drawn"),
            "CDF not downsampled"
        );
        for id in [
            "ttft-cdf",
            "ttft-time",
            "lag-time",
            "queue-time",
            "kv-time",
            "kernel-parts",
        ] {
            assert!(html.contains(&format!("id=\"{id}\"")), "no {id}");
        }
        // No per-request GPU figures in these records: said, not drawn.
        assert!(html.contains("Not in these records: Requests running on the server at each first token; GPU utilization"));
        assert!(!html.contains("id=\"gpu-util-time\""));
    }

    #[test]
    fn the_kernel_split_leaves_out_requests_without_every_part() {
        let mut run = generated(1000);
        // A new https connection's first request: no server wait nor remainder.
        for r in run.records.requests.iter_mut().step_by(10) {
            if let Some(k) = r.kernel.as_mut() {
                (k.server_wait_ms, k.remainder_ms) = (None, None);
            }
        }
        let html = sections::kernel::render(&run, "").unwrap().unwrap();
        assert!(html.contains("requests with all four parts"), "{html}");
        assert!(
            html.contains("more with kernel timing but not every part"),
            "{html}"
        );
        // None with every part (an https server that closes after each response): a note.
        for r in run.records.requests.iter_mut() {
            if let Some(k) = r.kernel.as_mut() {
                k.server_wait_ms = None;
            }
        }
        let html = sections::kernel::render(&run, "").unwrap().unwrap();
        assert!(html.contains("none of them all four parts"), "{html}");
    }

    #[test]
    fn a_series_has_its_sweep_charts_and_every_run_collapsed() {
        let html = render(&loaded(vec![generated(500), generated(800)])).unwrap();
        for id in [
            "sweep-latency",
            "sweep-pareto",
            "series-ttft-cdf",
            "run0-ttft-cdf",
            "run1-kernel-parts",
        ] {
            assert!(html.contains(&format!("id=\"{id}\"")), "no {id}");
        }
        assert_eq!(html.matches("<details").count(), 2);
    }
}

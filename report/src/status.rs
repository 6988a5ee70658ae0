//! The daemon's status page: recent runs per workload, each with its verdict, baseline trend
//! and headline figures, a chart of those figures across the runs, and links to each run's
//! report and JSON. The daemon fills a [`StatusPage`] from its history; this module only
//! draws it, so the page follows the same rules as a report (no script, nothing fetched).

use crate::html::{attr, esc, page, table};
use crate::plot::{Axis, Colour, Mark, Plot, WIDE};
use crate::sections::{ms, num, pct, section};
use crate::ReportError;
use canary_core::PERCENTILE_PRECISION;

mod capacity;

/// What the status page shows.
#[derive(Debug, Clone, Default)]
pub struct StatusPage {
    /// When the page was made, Unix ms (the charts' time axis ends there).
    pub now_unix_ms: i64,
    /// The daemon's version.
    pub version: String,
    /// Each workload with its recent runs, in display order.
    pub workloads: Vec<WorkloadRuns>,
    /// Why the daemon is unhealthy now (its `/healthz` reasons, each a sentence), shown at
    /// the top: while the history cannot be written the runs below are not the newest.
    pub unhealthy: Vec<String>,
}

/// A workload and its recent runs.
#[derive(Debug, Clone, Default)]
pub struct WorkloadRuns {
    /// The workload's name.
    pub name: String,
    /// A run of it is in progress now.
    pub running: bool,
    /// Its recent runs, newest first.
    pub runs: Vec<RunLine>,
}

/// One run as the status page lists it.
#[derive(Debug, Clone, Default)]
pub struct RunLine {
    /// The run id.
    pub id: String,
    /// The target's name.
    pub target: String,
    /// Wall-clock start, Unix ms.
    pub started_unix_ms: i64,
    /// `pass`, `fail`, `error`, … (also a CSS class).
    pub verdict_kind: String,
    /// Why it is not a pass.
    pub reasons: Vec<String>,
    /// Against the baseline, as shown: `steady`, `regressed`, `improved`, `insufficient`,
    /// or `insufficient (unconfirmed: regressed)`.
    pub trend: Option<String>,
    /// The trend's word alone (`insufficient`), its cell's CSS class; `None`: the first word
    /// of [`RunLine::trend`].
    pub trend_class: Option<String>,
    /// What changed in the run's context since its baseline run (`server.version 0.9 →
    /// 0.10`), shown beside the trend as its likely cause; empty: nothing, or not compared.
    pub context_changes: Vec<String>,
    /// Measured requests.
    pub requests: Option<u64>,
    /// Failed requests.
    pub errors: Option<u64>,
    /// Share of requests meeting every SLO.
    pub good_fraction: Option<f64>,
    /// TTFT median and p99, ms.
    pub ttft_ms: (Option<f64>, Option<f64>),
    /// ITL median and p99, ms.
    pub itl_ms: (Option<f64>, Option<f64>),
    /// Request latency median and p99, ms.
    pub e2e_ms: (Option<f64>, Option<f64>),
    /// Those of `time_to_first_token`, `inter_token_latency` and `request_latency` whose
    /// figures are not exact (some times a later segment's stamp or canaryd's read):
    /// marked `*` in the tables.
    pub bounds: Vec<String>,
    /// The run's diagnosis (issue 19), when it has one.
    pub diagnosis: Option<RunDiagnosis>,
    /// A capacity search's answer: a capacity workload's run, or a rate sweep's.
    pub capacity: Option<RunCapacity>,
    /// A sweep workload's knee.
    pub sweep: Option<RunKnee>,
    /// The run's report, a link relative to the page (`runs/ID/report`).
    pub report_href: String,
    /// The run's JSON, a link relative to the page.
    pub json_href: String,
}

/// A run's diagnosis in brief, as the daemon's `/api/runs` lists it.
#[derive(Debug, Clone, Default)]
pub struct RunDiagnosis {
    /// The bottleneck class (`queueing`, `healthy`, …; also a CSS class).
    pub class: String,
    /// `high`, `medium` or `low`.
    pub confidence: String,
    /// Why, in a sentence.
    pub why: String,
}

/// A run's capacity at the SLO, requests/s. The search knows it only to lie in a bracket,
/// at least the highest passing rate and below the lowest failing one: a pair of bounds, not
/// a figure.
#[derive(Debug, Clone, Default)]
pub struct RunCapacity {
    /// The highest offered rate that passed; `None` when none did.
    pub max_passing_rate: Option<f64>,
    /// The lowest offered rate above it that failed; `None` when none did.
    pub min_failing_rate: Option<f64>,
    /// The baseline the run met: its capacity and `±`.
    pub baseline: Option<(f64, f64)>,
    /// The bracket's ends not established, each with the probe's reason (`rests on bounds:
    /// up to 98.8 % may be good (…)`): its pass or fail rests on goodput judgements made on
    /// bounds and could go the other way.
    pub not_established: Vec<canary_core::EndOnBounds>,
}

/// A sweep run's knee.
#[derive(Debug, Clone, Default)]
pub struct RunKnee {
    /// The knee point's label (`c8`) and its completed requests/s; `None` when the sweep found
    /// none.
    pub knee: Option<(String, f64)>,
    /// Why it found none, in the sweep's own words (points left out, too few that are
    /// evidence, points not run, or the series did not saturate), as the daemon's log says it.
    pub no_knee: Option<String>,
    /// The baseline the run met: its knee (requests/s) and `±`.
    pub baseline: Option<(f64, f64)>,
}

/// The status page as HTML.
pub fn render(p: &StatusPage) -> Result<String, ReportError> {
    let title = "canaryd status";
    let runs: usize = p.workloads.iter().map(|w| w.runs.len()).sum();
    let running: Vec<&str> = p
        .workloads
        .iter()
        .filter(|w| w.running)
        .map(|w| w.name.as_str())
        .collect();
    let mut body = format!(
        "<h1>{title}</h1>\n<p class=\"lead\">canaryd {}, {} workload(s), {runs} recent run(s); \
         made {}. {} Read-only: reload for newer runs. Percentiles are the runs' \
         summary.json values (histogram, within {PERCENTILE_PRECISION}); counts are exact. A \
         latency marked * \
         is not exact: some of the run's times were a later segment's receive stamp or \
         canaryd's read, so TTFT and e2e are upper bounds and ITL exact in neither \
         direction.</p>\n",
        esc(&p.version),
        p.workloads.len(),
        esc(&crate::utc(p.now_unix_ms.max(0) as u64 * 1_000_000)),
        if running.is_empty() {
            "No run in progress.".to_string()
        } else {
            format!("Running now: {}.", esc(&running.join(", ")))
        },
    );
    for why in &p.unhealthy {
        body.push_str(&format!("<p class=\"warn\">Unhealthy: {}</p>\n", esc(why)));
    }
    if p.workloads.is_empty() {
        body.push_str("<p class=\"note\">No run yet: the first appears here when it ends.</p>\n");
    }
    body.push_str(&overview(p));
    for (i, w) in p.workloads.iter().enumerate() {
        body.push_str(&section(
            &format!("workload-{i}"),
            &format!(
                "{}{}",
                w.name,
                if w.running { " (running now)" } else { "" }
            ),
            &workload(p.now_unix_ms, i, w)?,
        ));
    }
    Ok(page(title, "status", &body))
}

/// One line per workload: its last run's verdict and trend.
fn overview(p: &StatusPage) -> String {
    let rows: Vec<Vec<String>> = p
        .workloads
        .iter()
        .enumerate()
        .filter_map(|(i, w)| {
            let last = w.runs.first()?;
            Some(vec![
                format!("<a href=\"#workload-{i}\">{}</a>", esc(&w.name)),
                verdict(last),
                trend(last),
                diagnosis(last, true),
                marked(last, "time_to_first_token", last.ttft_ms.1),
                marked(last, "request_latency", last.e2e_ms.1),
                opt(last.good_fraction, pct),
                esc(&crate::utc(last.started_unix_ms.max(0) as u64 * 1_000_000)),
            ])
        })
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    table(
        "overview",
        &[
            "workload",
            "last verdict",
            "trend",
            "diagnosis",
            "TTFT p99",
            "e2e p99",
            "good",
            "started",
        ],
        &rows,
    )
}

fn workload(now: i64, i: usize, w: &WorkloadRuns) -> Result<String, ReportError> {
    let mut html = capacity::chart(now, i, w)?.unwrap_or_default();
    html.push_str(&trend_chart(now, i, w)?);
    // A capacity or sweep workload's own figures, in columns of their own.
    let with_capacity = w.runs.iter().any(|r| r.capacity.is_some());
    let with_knee = w.runs.iter().any(|r| r.sweep.is_some());
    let rows: Vec<Vec<String>> = w
        .runs
        .iter()
        .map(|r| {
            let mut row = vec![
                esc(&crate::utc(r.started_unix_ms.max(0) as u64 * 1_000_000)),
                esc(&r.target),
                verdict(r),
                trend(r),
                diagnosis(r, false),
            ];
            if with_capacity {
                row.push(capacity::capacity_cell(r));
            }
            if with_knee {
                row.push(capacity::knee_cell(r));
            }
            row.extend([
                opt(r.requests.map(|v| v as f64), num),
                opt(r.errors.map(|v| v as f64), num),
                marked(r, "time_to_first_token", r.ttft_ms.0),
                marked(r, "time_to_first_token", r.ttft_ms.1),
                marked(r, "inter_token_latency", r.itl_ms.0),
                marked(r, "request_latency", r.e2e_ms.1),
                opt(r.good_fraction, pct),
                format!(
                    "<a class=\"report\" href=\"{}\">report</a> · <a href=\"{}\">json</a>",
                    attr(&r.report_href),
                    attr(&r.json_href)
                ),
            ]);
            row
        })
        .collect();
    let mut head = vec!["started", "target", "verdict", "trend", "diagnosis"];
    if with_capacity {
        head.push("capacity at SLO, req/s");
    }
    if with_knee {
        head.push("knee, req/s");
    }
    head.extend([
        "requests", "errors", "TTFT p50", "TTFT p99", "ITL p50", "e2e p99", "good", "run",
    ]);
    html.push_str(&table("runs", &head, &rows));
    Ok(html)
}

/// The charts' time axis: its unit (seconds, minutes or hours, whichever keeps the numbers
/// short) and each run's start on it, negative: before the page was made.
fn time_axis(now: i64, w: &WorkloadRuns) -> (&'static str, impl Fn(&RunLine) -> f64) {
    let oldest = w
        .runs
        .iter()
        .map(|r| r.started_unix_ms)
        .min()
        .unwrap_or(now);
    let (unit, per) = match now - oldest {
        span if span > 3 * 3_600_000 => ("hours", 3_600_000.0),
        span if span > 3 * 60_000 => ("minutes", 60_000.0),
        _ => ("seconds", 1000.0),
    };
    (unit, move |r: &RunLine| {
        (r.started_unix_ms - now) as f64 / per
    })
}

/// TTFT and request latency percentiles across the runs, by start time, with the runs that
/// did not pass marked: the trend a reader looks for first.
fn trend_chart(now: i64, i: usize, w: &WorkloadRuns) -> Result<String, ReportError> {
    let (unit, x) = time_axis(now, w);
    let series = |f: fn(&RunLine) -> Option<f64>| -> Vec<(f64, f64)> {
        let mut pts: Vec<(f64, f64)> = w
            .runs
            .iter()
            .filter_map(|r| {
                f(r).filter(|v| v.is_finite() && *v > 0.0)
                    .map(|v| (x(r), v))
            })
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        pts
    };
    // A capacity run's summary is its probe at the capacity (the highest passing rate), a
    // sweep's its knee point: latency at a rate that moves from run to run, still worth a
    // look (a probe that passed only just) but no trend at one load, so said so.
    let (title, what) = if w.runs.iter().any(|r| r.sweep.is_some()) {
        (
            "Latency at each run's knee point",
            "each point is the latency of the run's knee point (its last point without one), \
             whose load moves with the knee: not a trend at one load",
        )
    } else if w.runs.iter().any(|r| r.capacity.is_some()) {
        (
            "Latency at each run's capacity probe",
            "each point is the latency of the run's probe at its capacity (the highest rate \
             that passed), whose rate moves with the capacity: not a trend at one load",
        )
    } else {
        (
            "Latency across recent runs",
            "each point is one run's percentile",
        )
    };
    let mut plot = Plot::new(
        &format!("trend-{i}"),
        title,
        Axis::linear(&format!("run start, {unit} before this page")),
        Axis::log("ms (log)"),
        WIDE,
    );
    plot.layer(
        "TTFT p50",
        Colour::nth(0),
        Mark::LinePoints(series(|r| r.ttft_ms.0)),
    )
    .layer(
        "TTFT p99",
        Colour::nth(1),
        Mark::LinePoints(series(|r| r.ttft_ms.1)),
    )
    .layer(
        "e2e p99",
        Colour::nth(2),
        Mark::LinePoints(series(|r| r.e2e_ms.1)),
    );
    // Failed and errored runs, drawn at their TTFT p99 (or the chart's floor without one).
    let floor = series(|r| r.ttft_ms.1)
        .iter()
        .map(|p| p.1)
        .fold(f64::INFINITY, f64::min);
    let own_p99 = |r: &RunLine| r.ttft_ms.1.filter(|v| v.is_finite() && *v > 0.0);
    let failed = || w.runs.iter().filter(|r| r.verdict_kind != "pass");
    let bad: Vec<(f64, f64)> = failed()
        .map(|r| (x(r), own_p99(r).unwrap_or(floor)))
        .filter(|p| p.1.is_finite())
        .collect();
    // Those drawn at the floor: none when there is no floor (no run has a p99).
    let without = match floor.is_finite() {
        true => failed().filter(|r| own_p99(r).is_none()).count(),
        false => 0,
    };
    plot.layer("not a pass", Colour::ERROR, Mark::Crosses(bad));
    if plot.layers.is_empty() {
        return Ok(
            "<p class=\"note\">No run with latency figures yet: nothing to chart.</p>\n".into(),
        );
    }
    let mut note = format!(
        "{} run(s); {what} from its summary.json; a run that did not pass is crossed at its \
         TTFT p99",
        w.runs.len()
    );
    if without > 0 {
        // At the lowest p99 drawn, they would pass for the fastest runs unless said.
        note.push_str(&format!(
            ", and {without} without one (no request completed) at the lowest TTFT p99 drawn: \
             that height is not theirs"
        ));
    }
    plot.note(format!("{note}."));
    plot.to_html()
}

fn verdict(r: &RunLine) -> String {
    let mut s = format!(
        "<span class=\"verdict {}\">{}</span>",
        attr(&r.verdict_kind),
        esc(&r.verdict_kind)
    );
    if !r.reasons.is_empty() {
        s.push_str(&format!(": {}", esc(&r.reasons.join("; "))));
    }
    s
}

fn trend(r: &RunLine) -> String {
    let mut s = match &r.trend {
        Some(t) => {
            let class = r
                .trend_class
                .as_deref()
                .unwrap_or_else(|| t.split_whitespace().next().unwrap_or(""));
            format!("<span class=\"{}\">{}</span>", attr(class), esc(t))
        }
        None => "–".into(),
    };
    if !r.context_changes.is_empty() {
        s.push_str(&format!(
            "<br><small class=\"changed\">changed: {}</small>",
            esc(&r.context_changes.join("; "))
        ));
    }
    s
}

/// The diagnosis class with its confidence, and why: in the cell under it (`why_shown`,
/// the overview), always as the hover title.
fn diagnosis(r: &RunLine, why_shown: bool) -> String {
    let Some(d) = &r.diagnosis else {
        return "–".into();
    };
    let mut s = format!(
        "<span class=\"bottleneck {}\" title=\"{}\">{}</span> <span class=\"confidence\">{}</span>",
        attr(&d.class),
        attr(&d.why),
        esc(&d.class),
        esc(&d.confidence)
    );
    if why_shown && !d.why.is_empty() {
        s.push_str(&format!("<small class=\"why\">{}</small>", esc(&d.why)));
    }
    s
}

fn opt(v: Option<f64>, f: fn(f64) -> String) -> String {
    v.map_or("–".into(), f)
}

/// A latency cell of `r`, `*` after it when its `metric`'s figures are not exact.
fn marked(r: &RunLine, metric: &str, v: Option<f64>) -> String {
    match v {
        Some(v) if r.bounds.iter().any(|b| b == metric) => format!("{}*", ms(v)),
        v => opt(v, ms),
    }
}

#[cfg(test)]
mod tests;

//! `sweep.json` and `sweep.csv`: every point's figures, the knee, the Pareto front and, for a
//! capacity search, the bracket of the highest passing rate.

use super::point::{Axis, LeftOut, Point};
use crate::capacity::Capacity;
use anyhow::{Context, Result};
use canary_core::series;
use serde::Serialize;
use std::path::Path;

/// `sweep.json`'s schema version: bumped when a field changes meaning or goes away (2: a
/// point's `error_rate` and `good_fraction` are null when it judged no request, as
/// `summary.json`'s are since its version 3).
pub const SWEEP_SCHEMA_VERSION: u32 = 2;

/// The knee as `sweep.json` states it.
#[derive(Debug, Clone, Serialize)]
pub struct Knee {
    /// The knee point's label.
    pub label: String,
    /// Its axis value.
    pub value: f64,
    /// Its completed requests per second.
    pub request_throughput: Option<f64>,
}

/// The whole of `sweep.json`.
#[derive(Debug, Clone, Serialize)]
pub struct SweepDoc {
    /// [`SWEEP_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// `sweep` or `find_max_rate`.
    pub kind: &'static str,
    /// What varies from point to point.
    pub axis: Axis,
    /// The knee rule, in words.
    pub knee_method: String,
    /// The knee, when the series saturates (points in order of increasing load).
    pub knee: Option<Knee>,
    /// The points the knee leaves out, in order of increasing load, and why (`cut_short`,
    /// `capped`, `error_verdict`, `target_errors` with the `error_rate`, `no_figures`): the
    /// knee is found among the others alone, each compared with the one before it.
    pub left_out: Vec<LeftOut>,
    /// What the Pareto front compares: `output_tokens_per_s_per_gpu` against
    /// `output_tokens_per_s_per_user`, or the total when the GPU count is unknown.
    pub pareto_axes: [&'static str; 2],
    /// The Pareto-optimal points' labels, in order of increasing load (a search runs its
    /// probes out of order).
    pub pareto: Vec<String>,
    /// Why a figure is missing: the GPU count, when no point knows it.
    pub notes: Vec<String>,
    /// Set when a signal stopped the sweep: its points are those run before (the last maybe
    /// cut short), and `not_run` names those asked for that never ran.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub interrupted: bool,
    /// The points asked for that never ran (a signal, or a point before them that failed or
    /// could not run, stopped the sweep), in the order given: labels, as `points[].label`. A
    /// search's probes are its own to pick, so it has none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_run: Vec<String>,
    /// The search's answer, for `--find-max-rate`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity: Option<Capacity>,
    /// Every point, in run order.
    pub points: Vec<Point>,
}

impl SweepDoc {
    /// The document of `points`, with the knee and the front marked on them.
    pub fn new(kind: &'static str, axis: Axis, mut points: Vec<Point>) -> SweepDoc {
        for p in &mut points {
            if let Some(note) = p.open_files_cap(axis) {
                p.capped = true;
                p.notes.push(note);
            }
            if let Some(note) = p.errors_note() {
                p.notes.push(note);
            }
            // Last: a note about one column, after those about the whole point.
            if let Some(note) = p.figures.as_ref().and_then(|f| f.per_user_note()) {
                p.notes.push(note);
            }
        }
        // The knee walks the points in order of increasing load, whatever order they ran in.
        let mut order: Vec<usize> = (0..points.len()).collect();
        order.sort_by(|&a, &b| points[a].value.total_cmp(&points[b].value));
        let steps: Vec<_> = order.iter().map(|&i| points[i].step()).collect();
        let knee = series::knee(&steps).map(|k| order[k]);
        let left_out = order.iter().filter_map(|&i| points[i].left_out()).collect();
        // Whether the GPU count is known, not whether every point has a per-GPU figure: a
        // point too short for a rate has none (`rate_unavailable`) though `--gpus` was given,
        // and the note then said no GPU was seen and no --gpus given.
        let per_gpu_known = !points.is_empty()
            && points
                .iter()
                .all(|p| p.figures.as_ref().is_none_or(|f| f.gpus.is_some()))
            && points.iter().any(|p| p.figures.is_some());
        let rates: Vec<_> = points.iter().map(|p| p.rates(per_gpu_known)).collect();
        let mut front = series::pareto(&rates);
        front.sort_by(|&a, &b| points[a].value.total_cmp(&points[b].value));
        for &i in &front {
            points[i].pareto = true;
        }
        if let Some(k) = knee {
            points[k].knee = true;
        }
        let mut notes = Vec::new();
        if !per_gpu_known {
            notes.push(
                "tokens/s per GPU unknown: no GPU seen through NVML or DCGM and no --gpus; \
                 the Pareto front compares tokens/s in all (the same order on a fixed set of GPUs)"
                    .to_string(),
            );
        }
        SweepDoc {
            schema_version: SWEEP_SCHEMA_VERSION,
            kind,
            axis,
            knee_method: format!(
                "over the points that are evidence (left_out lists the others), in order of \
                 increasing load, the first step from one to the next whose request throughput \
                 grows by less than {:.0}%, or by less than {:.0}% of the step's relative \
                 increase in the axis value (the offered load) where that is smaller, while \
                 TTFT p99 rises by more than {:.0}%; the knee is the point before that step",
                series::KNEE_GAIN * 100.0,
                series::KNEE_LOAD_SHARE * 100.0,
                series::KNEE_RISE * 100.0
            ),
            knee: knee.map(|k| Knee {
                label: points[k].label.clone(),
                value: points[k].value,
                request_throughput: points[k]
                    .figures
                    .as_ref()
                    .and_then(|f| f.request_throughput),
            }),
            left_out,
            pareto_axes: if per_gpu_known {
                [
                    "output_tokens_per_s_per_gpu",
                    "output_tokens_per_s_per_user",
                ]
            } else {
                ["output_tokens_per_s", "output_tokens_per_s_per_user"]
            },
            pareto: front.iter().map(|&i| points[i].label.clone()).collect(),
            notes,
            interrupted: false,
            not_run: Vec::new(),
            capacity: None,
            points,
        }
    }

    /// Says how the sweep of `asked` (the values given, in order) ended: `interrupted` when a
    /// signal stopped it, and `not_run` the values past its points, which never ran (a point
    /// that failed is the last of its points; one that could not run is not among them). `canaryd sweep` and the daemon's
    /// `kind = "sweep"` workloads both end their documents here.
    pub fn ended(&mut self, interrupted: bool, asked: &[f64]) {
        self.interrupted = interrupted;
        let ran = self.points.len().min(asked.len());
        self.not_run = asked[ran..].iter().map(|&v| self.axis.label(v)).collect();
    }

    /// Writes `sweep.json` and `sweep.csv` into `dir`.
    pub fn write(&self, dir: &Path) -> Result<()> {
        let json = dir.join("sweep.json");
        let text = serde_json::to_string_pretty(self)?;
        canary_files::write_whole(&json, (text + "\n").as_bytes())
            .with_context(|| format!("writing {}", json.display()))?;
        let csv = dir.join("sweep.csv");
        canary_files::write_whole(&csv, self.csv().as_bytes())
            .with_context(|| format!("writing {}", csv.display()))
    }

    /// `sweep.csv`: one row per point, in run order.
    pub fn csv(&self) -> String {
        let mut out = CSV_COLUMNS.join(",");
        out.push(',');
        out.push_str(&RUNS_COLUMNS.join(","));
        out.push('\n');
        for p in &self.points {
            let f = p.figures.clone().unwrap_or_default();
            let server = f.server.clone().unwrap_or_default();
            let n = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v}"));
            let row = [
                p.index.to_string(),
                p.label.clone(),
                format!("{}", p.value),
                p.dir.clone(),
                quoted(&p.verdict),
                f.requests.to_string(),
                f.completed.to_string(),
                f.errors.to_string(),
                n(f.error_rate),
                format!("{}", f.duration_s),
                n(f.request_throughput),
                n(f.output_tokens_per_s),
                n(f.output_tokens_per_s_per_user),
                n(f.output_tokens_per_s_per_gpu),
                f.gpus.map_or(String::new(), |g| g.to_string()),
                n(f.time_to_first_token_ms.p50),
                n(f.time_to_first_token_ms.p90),
                n(f.time_to_first_token_ms.p99),
                n(f.inter_token_latency_ms.p50),
                n(f.inter_token_latency_ms.p90),
                n(f.inter_token_latency_ms.p99),
                n(f.request_latency_ms.p50),
                n(f.request_latency_ms.p90),
                n(f.request_latency_ms.p99),
                n(f.goodput),
                n(f.good_fraction),
                n(server.queue_depth_mean),
                n(server.queue_depth_max),
                n(server.running_mean),
                n(server.kv_cache_usage_mean),
                n(server.kv_cache_usage_max),
                n(server.preemptions),
                p.knee.to_string(),
                p.pareto.to_string(),
                f.in_flight_cap.map_or(String::new(), |c| c.to_string()),
                f.in_flight_cap_source.unwrap_or("").to_string(),
                p.capped.to_string(),
                f.bounds.join(";"),
                quoted(&p.notes.join("; ")),
            ];
            let mut row = row.to_vec();
            row.extend(runs_columns(p));
            out.push_str(&row.join(","));
            out.push('\n');
        }
        out
    }
}

/// The columns of `sweep.csv` that are, with `--runs N`, the mean of the point's runs' own
/// figures (estimates), not one run's: every rate, share and percentile, and the server's
/// means. Counts and `duration_s` are the runs' sums, the server's maxima their largest.
pub const MEAN_OF_RUNS: [&str; 19] = [
    "error_rate",
    "request_throughput",
    "output_tokens_per_s",
    "output_tokens_per_s_per_user",
    "output_tokens_per_s_per_gpu",
    "ttft_p50_ms",
    "ttft_p90_ms",
    "ttft_p99_ms",
    "itl_p50_ms",
    "itl_p90_ms",
    "itl_p99_ms",
    "e2e_p50_ms",
    "e2e_p90_ms",
    "e2e_p99_ms",
    "goodput",
    "good_fraction",
    "queue_depth_mean",
    "running_mean",
    "kv_cache_usage_mean",
];

/// The headline figures `--runs N` gives a 95% interval, as (`sweep.csv` column, the
/// experiment's metric, statistic): their half-widths end each row.
const HALF_WIDTHS: [(&str, &str, &str); 9] = [
    ("request_throughput", "request_throughput", "value"),
    ("output_tokens_per_s", "output_token_throughput", "value"),
    ("goodput", "goodput", "value"),
    ("ttft_p50_ms", "time_to_first_token", "p50"),
    ("ttft_p99_ms", "time_to_first_token", "p99"),
    ("itl_p50_ms", "inter_token_latency", "p50"),
    ("itl_p99_ms", "inter_token_latency", "p99"),
    ("e2e_p50_ms", "request_latency", "p50"),
    ("e2e_p99_ms", "request_latency", "p99"),
];

/// The columns appended after `notes` (so a reader of the older 39 keeps working): how many
/// runs the point's figures are over and which of them are means of runs, and each headline
/// figure's 95% half-width (empty for one run, or a figure no run gave).
fn runs_columns(p: &Point) -> Vec<String> {
    let Some(r) = &p.repeats else {
        let mut cells = vec!["1".to_string(), "1".to_string(), String::new()];
        cells.extend(HALF_WIDTHS.iter().map(|_| String::new()));
        return cells;
    };
    // The runs the figures are over: the complete ones, or every run when none was.
    let complete = r.per_run.iter().filter(|e| e.left_out.is_none()).count() as u64;
    let over = if complete == 0 { r.runs } else { complete };
    let mut cells = vec![r.runs.to_string(), over.to_string(), MEAN_OF_RUNS.join(";")];
    cells.extend(HALF_WIDTHS.iter().map(|(_, metric, statistic)| {
        r.metrics
            .iter()
            .find(|m| m.metric == *metric && m.statistic == *statistic)
            .and_then(|m| m.interval.half_width)
            .map_or(String::new(), |h| format!("{h}"))
    }));
    cells
}

/// `sweep.csv`'s header (tidy: one row per point, one column per figure, ms and tokens/s),
/// then [`RUNS_COLUMNS`].
pub const CSV_COLUMNS: [&str; 39] = [
    "index",
    "label",
    "value",
    "dir",
    "verdict",
    "requests",
    "completed",
    "errors",
    "error_rate",
    "duration_s",
    "request_throughput",
    "output_tokens_per_s",
    "output_tokens_per_s_per_user",
    "output_tokens_per_s_per_gpu",
    "gpus",
    "ttft_p50_ms",
    "ttft_p90_ms",
    "ttft_p99_ms",
    "itl_p50_ms",
    "itl_p90_ms",
    "itl_p99_ms",
    "e2e_p50_ms",
    "e2e_p90_ms",
    "e2e_p99_ms",
    "goodput",
    "good_fraction",
    "queue_depth_mean",
    "queue_depth_max",
    "running_mean",
    "kv_cache_usage_mean",
    "kv_cache_usage_max",
    "preemptions",
    "knee",
    "pareto",
    "in_flight_cap",
    "in_flight_cap_source",
    "capped",
    "bounds",
    "notes",
];

/// `sweep.csv`'s last columns, after [`CSV_COLUMNS`]: `runs` (carried out; 1 without
/// `--runs`), `runs_in_figures` (the runs the figures are over: the complete ones),
/// `mean_of_runs` (the columns that are means of runs, `;`-separated; empty for one run) and
/// the headline figures' 95% half-widths (Student's t over the runs; estimates).
pub const RUNS_COLUMNS: [&str; 12] = [
    "runs",
    "runs_in_figures",
    "mean_of_runs",
    "request_throughput_half_width",
    "output_tokens_per_s_half_width",
    "goodput_half_width",
    "ttft_p50_ms_half_width",
    "ttft_p99_ms_half_width",
    "itl_p50_ms_half_width",
    "itl_p99_ms_half_width",
    "e2e_p50_ms_half_width",
    "e2e_p99_ms_half_width",
];

/// A CSV field, quoted when it holds a comma, a quote or a line break.
fn quoted(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::sweep::point::PointFigures;

    // `--concurrency 1,4 --request-count 4 --gpus 1`: c4's four requests spanned under 100 ms,
    // so it had no rate and no tokens/s per GPU, and the note said "no GPU seen through NVML
    // or DCGM and no --gpus" of a sweep given --gpus 1.
    #[test]
    fn a_point_without_a_rate_does_not_make_the_gpu_count_unknown() {
        let point = |value: f64, tokens: Option<f64>| Point {
            value,
            label: Axis::Concurrency.label(value),
            passed: true,
            cut_short: false,
            errored: false,
            figures: Some(PointFigures {
                output_tokens_per_s: tokens,
                output_tokens_per_s_per_gpu: tokens,
                output_tokens_per_s_per_user: Some(100.0),
                gpus: Some(1),
                gpus_from: Some("--gpus".into()),
                ..Default::default()
            }),
            ..Point::of_run(1, String::new(), value, String::new(), None, None)
        };
        let doc = SweepDoc::new(
            "sweep",
            Axis::Concurrency,
            vec![point(1.0, Some(400.0)), point(4.0, None)],
        );
        assert!(doc.notes.is_empty(), "{:?}", doc.notes);
        assert_eq!(doc.pareto_axes[0], "output_tokens_per_s_per_gpu");
        assert_eq!(doc.pareto, ["c1"]);
        // No count at all: the note stands.
        let mut unknown = point(1.0, Some(400.0));
        unknown.figures.as_mut().unwrap().gpus = None;
        let doc = SweepDoc::new("sweep", Axis::Concurrency, vec![unknown]);
        assert!(doc.notes[0].contains("no GPU seen"), "{:?}", doc.notes);
    }

    // Audit F13: a sweep.csv row did not say whether it was one run's figures or the mean
    // of several. One run: runs 1, no column a mean of runs, no half-widths; the older
    // columns keep their places so readers of them do not break.
    #[test]
    fn a_single_run_points_csv_row_says_it_is_one_run() {
        let doc = SweepDoc::new(
            "sweep",
            Axis::Concurrency,
            vec![Point::of_run(
                1,
                "c1".into(),
                1.0,
                String::new(),
                None,
                None,
            )],
        );
        let csv = doc.csv();
        let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
        assert_eq!(header[..CSV_COLUMNS.len()], CSV_COLUMNS, "{csv}");
        assert_eq!(header[CSV_COLUMNS.len()..], RUNS_COLUMNS, "{csv}");
        let row: Vec<&str> = csv.lines().nth(1).unwrap().split(',').collect();
        assert_eq!(row.len(), header.len(), "{csv}");
        let col = |name| header.iter().position(|c| *c == name).unwrap();
        assert_eq!(row[col("runs")], "1");
        assert_eq!(row[col("runs_in_figures")], "1");
        assert_eq!(row[col("mean_of_runs")], "");
        assert_eq!(row[col("ttft_p99_ms_half_width")], "");
        // Every column a mean of runs is one of the CSV's own.
        for name in MEAN_OF_RUNS.iter().chain(HALF_WIDTHS.iter().map(|h| &h.0)) {
            assert!(CSV_COLUMNS.contains(name), "{name}");
        }
    }

    // A point that judged no request (every one cancelled on purpose) has no error rate and
    // no good fraction: an empty cell and null, not the 0 that read as "no errors".
    #[test]
    fn a_point_that_judged_nothing_writes_no_share() {
        let point = |error_rate, good_fraction| Point {
            figures: Some(PointFigures {
                requests: 4,
                error_rate,
                good_fraction,
                ..Default::default()
            }),
            ..Point::of_run(1, "c1".into(), 1.0, String::new(), None, None)
        };
        let doc = SweepDoc::new(
            "sweep",
            Axis::Concurrency,
            vec![point(None, None), point(Some(0.25), Some(0.5))],
        );
        let json = serde_json::to_value(&doc).unwrap();
        assert!(json["points"][0]["error_rate"].is_null(), "{json}");
        assert!(json["points"][0]["good_fraction"].is_null(), "{json}");
        assert_eq!(json["points"][1]["error_rate"], 0.25);
        let csv = doc.csv();
        let rows: Vec<Vec<&str>> = csv.lines().map(|l| l.split(',').collect()).collect();
        let col = |name| CSV_COLUMNS.iter().position(|c| *c == name).unwrap();
        assert_eq!(rows[1][col("error_rate")], "", "{csv}");
        assert_eq!(rows[1][col("good_fraction")], "", "{csv}");
        assert_eq!(rows[2][col("error_rate")], "0.25", "{csv}");
        assert_eq!(rows[2][col("good_fraction")], "0.5", "{csv}");
    }
}

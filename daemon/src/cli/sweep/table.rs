//! What a person sees of a sweep: one line per point as it ends, then the table with the
//! knee, the Pareto front and the search's answer.

use super::document::SweepDoc;
use super::point::Point;
use crate::cli::repeats::few_runs_line;
use canary_core::PERCENTILE_PRECISION_SPACED;

fn num(v: Option<f64>) -> String {
    match v {
        Some(v) if v.is_finite() && v.abs() >= 100.0 => format!("{v:.0}"),
        Some(v) if v.is_finite() => format!("{v:.1}"),
        _ => "-".into(),
    }
}

/// A gate's share as a percentage, with the digits it was given (99.5, not 100).
fn good_percent(fraction: f64) -> String {
    format!("{}", (fraction * 100.0 * 1e6).round() / 1e6)
}

fn pct(v: Option<f64>) -> String {
    match v {
        Some(v) if v > 0.0 && v < 0.01 => format!("{:.2}%", v * 100.0),
        Some(v) => format!("{:.1}%", v * 100.0),
        None => "-".into(),
    }
}

/// `v`, and with `--runs N` the half-width of its 95% confidence interval: `107 ±3.1`. An
/// interval whose low end fell below 0 (a time or a rate cannot be negative; `summary.json`
/// keeps it clipped there) keeps its ± and says it was cut: `18.9 ±20.1 (cut at 0)`, the
/// interval 0 to 39.0. Its ends alone, `18.9 [0.0-39.0]`, read as if the runs had reached 0.
fn num_ci(v: Option<f64>, p: &Point, metric: &str, statistic: &str) -> String {
    let Some(r) = p.repeats.as_ref().filter(|_| v.is_some()) else {
        return num(v);
    };
    if r.no_spread(metric, statistic) {
        // Runs that all gave the same figure: a zero-wide interval, never `±0`.
        return format!("{} (no spread)", num(v));
    }
    match (
        r.half_width(metric, statistic),
        r.clipped_ends(metric, statistic),
    ) {
        (Some(h), Some(_)) => format!("{} ±{} (cut at 0)", num(v), num(Some(h))),
        (Some(h), None) => format!("{} ±{}", num(v), num(Some(h))),
        (None, _) => num(v),
    }
}

/// Whether some interval of the table reached below 0 and was cut there.
fn any_cut(doc: &SweepDoc) -> bool {
    doc.points
        .iter()
        .filter_map(|p| p.repeats.as_ref())
        .any(|r| {
            r.metrics
                .iter()
                .any(|f| f.clipped && f.interval.half_width.is_some())
        })
}

/// The fewest complete runs any repeated point's intervals are over, when at least 2.
fn fewest_runs(doc: &SweepDoc) -> Option<u64> {
    doc.points
        .iter()
        .filter_map(|p| p.repeats.as_ref())
        .map(|r| r.metrics_runs())
        .filter(|&n| n >= 2)
        .min()
}

/// Under the table when some point's intervals are over few runs (see
/// [`few_runs_line`]).
fn few_runs(n: u64) -> Option<String> {
    few_runs_line(n, "a point's")
}

/// `cell` with `*` after it when the point's `metric` is not exact (see
/// [`super::point::PointFigures::bounds`]).
fn marked(cell: String, f: &super::point::PointFigures, metric: &str) -> String {
    match f.bounds.contains(&metric) && cell != "-" {
        true => format!("{cell}*"),
        false => cell,
    }
}

/// `point 3 c16: 107 req/s, 1715 tok/s, TTFT p99 148 ms: pass`; with `--runs N`, the means
/// of its runs with their intervals.
pub fn progress_line(p: &Point) -> std::io::Result<()> {
    let f = p.figures.clone().unwrap_or_default();
    let runs = p
        .repeats
        .as_ref()
        .map_or(String::new(), |r| match r.metrics_runs() {
            n if n >= 2 => format!(" (mean of {n} runs, ± 95% CI)"),
            n => format!(" ({n} of {} runs complete: no interval)", r.runs_asked),
        });
    outln!(
        "point {} {}{runs}: {} req/s, {} tok/s, TTFT p99 {} ms{}: {}",
        p.index,
        p.label,
        num_ci(f.request_throughput, p, "request_throughput", "value"),
        num_ci(f.output_tokens_per_s, p, "output_token_throughput", "value"),
        marked(
            num_ci(
                f.time_to_first_token_ms.p99,
                p,
                "time_to_first_token",
                "p99"
            ),
            &f,
            "time_to_first_token"
        ),
        f.good_fraction.map_or(String::new(), |g| format!(
            ", good {}",
            marked(pct(Some(g)), &f, super::point::GOODPUT)
        )),
        p.verdict
    )
}

/// The sweep's table, then the knee, the front and the capacity at the SLO.
pub fn print(doc: &SweepDoc) -> std::io::Result<()> {
    let head = [
        "point",
        "req/s",
        "tok/s",
        "tok/s/user",
        "tok/s/GPU",
        "TTFT p50",
        "TTFT p99",
        "ITL p50",
        "e2e p99",
        "good",
        "queue max",
        "KV max",
        "",
    ];
    let mut rows: Vec<Vec<String>> = vec![head.iter().map(|s| s.to_string()).collect()];
    for p in &doc.points {
        let f = p.figures.clone().unwrap_or_default();
        let server = f.server.clone().unwrap_or_default();
        let mut tags = Vec::new();
        if p.knee {
            tags.push("knee".to_string());
        }
        if p.pareto {
            tags.push("Pareto".to_string());
        }
        if p.capped {
            let cap = f
                .in_flight_cap
                .map_or(String::new(), |c| format!(" at {c}"));
            tags.push(format!("capped{cap} (open files)"));
        }
        if !p.passed {
            tags.push(p.verdict.split(':').next().unwrap_or("").to_string());
        }
        rows.push(vec![
            format!("{:02} {}", p.index, p.label),
            num_ci(f.request_throughput, p, "request_throughput", "value"),
            num_ci(f.output_tokens_per_s, p, "output_token_throughput", "value"),
            marked(
                num(f.output_tokens_per_s_per_user),
                &f,
                "output_token_throughput_per_user",
            ),
            num(f.output_tokens_per_s_per_gpu),
            marked(
                num_ci(
                    f.time_to_first_token_ms.p50,
                    p,
                    "time_to_first_token",
                    "p50",
                ),
                &f,
                "time_to_first_token",
            ),
            marked(
                num_ci(
                    f.time_to_first_token_ms.p99,
                    p,
                    "time_to_first_token",
                    "p99",
                ),
                &f,
                "time_to_first_token",
            ),
            marked(
                num_ci(
                    f.inter_token_latency_ms.p50,
                    p,
                    "inter_token_latency",
                    "p50",
                ),
                &f,
                "inter_token_latency",
            ),
            marked(
                num_ci(f.request_latency_ms.p99, p, "request_latency", "p99"),
                &f,
                "request_latency",
            ),
            marked(pct(f.good_fraction), &f, super::point::GOODPUT),
            num(server.queue_depth_max),
            pct(server.kv_cache_usage_max),
            tags.join(", "),
        ]);
    }
    let widths: Vec<usize> = (0..head.len())
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    for r in &rows {
        let line: Vec<String> = r
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(c, (cell, w))| {
                if c == 0 || c == head.len() - 1 {
                    format!("{cell:<w$}")
                } else {
                    format!("{cell:>w$}")
                }
            })
            .collect();
        outln!("{}", line.join("  ").trim_end())?;
    }
    let bounds = doc
        .points
        .iter()
        .any(|p| p.figures.as_ref().is_some_and(|f| !f.bounds.is_empty()));
    for line in footer(doc.points.iter().any(|p| p.repeats.is_some()), bounds) {
        outln!("{line}")?;
    }
    if let Some(line) = good_on_bounds(doc) {
        outln!("{line}")?;
    }
    if any_cut(doc) {
        outln!("{CUT_NOTE}")?;
    }
    if let Some(line) = fewest_runs(doc).and_then(few_runs) {
        outln!("{line}")?;
    }
    outln!("{}", knee_line(doc))?;
    outln!(
        "Pareto front ({} against {}): {}",
        doc.pareto_axes[0],
        doc.pareto_axes[1],
        pareto_said(doc)
    )?;
    for n in &doc.notes {
        outln!("note: {n}")?;
    }
    if !doc.not_run.is_empty() {
        // A sweep stops after a failed point, so when its last point failed, that one stopped it.
        let failed = doc.points.last().filter(|p| p.failed());
        outln!(
            "not run: {} ({})",
            doc.not_run.join(", "),
            match (doc.interrupted, failed) {
                (true, _) => "a signal stopped the sweep".to_string(),
                (false, Some(p)) => format!(
                    "point {} {} failed, its verdict an error, and the sweep stopped there",
                    p.index, p.label
                ),
                (false, None) => "a point could not run, and the sweep stopped there".to_string(),
            }
        )?;
    }
    for p in &doc.points {
        for n in &p.notes {
            outln!("note: {:02} {}: {n}", p.index, p.label)?;
        }
    }
    if let Some(c) = &doc.capacity {
        outln!("{}", capacity_line(c, doc.points.len()))?;
    }
    Ok(())
}

/// The front's labels, in order of load, or why it has none.
fn pareto_said(doc: &SweepDoc) -> String {
    if !doc.pareto.is_empty() {
        return doc.pareto.join(", ");
    }
    let left = doc.left_out.len();
    match doc.points.len() {
        0 => "none (no point ran)".into(),
        n if left >= n => "none (every point left out)".into(),
        _ => "none (no point has both tokens/s figures)".into(),
    }
}

/// `knee: c8 (101 req/s): …`, or why there is none; with points left out, which and why
/// (the knee is found among the others alone), so a series that saturated by failing does
/// not read as one that never saturated.
fn knee_line(doc: &SweepDoc) -> String {
    // A sweep's points are loads: the floor weighs each step's throughput against its load.
    let rule = canary_core::series::step_words(true, "%");
    let (evidence, among, left) =
        super::point::LeftOut::knee_words(doc.points.len(), &doc.left_out);
    match &doc.knee {
        Some(k) => format!(
            "knee: {} ({} req/s){among}: the next step in load {rule}{left}",
            k.label,
            num(k.request_throughput),
        ),
        None if !doc.left_out.is_empty() && evidence < 2 => format!(
            "knee: none: {evidence} of the {} points {} evidence, and a knee is a step between \
             two{left}",
            doc.points.len(),
            if evidence == 1 { "is" } else { "are" },
        ),
        None => format!("knee: none{among} (no step in load {rule}){left}"),
    }
}

/// Under the table when some point's good share rests on judgements made on bounds (its cell
/// marked `*`): each such point's truly-good range, as its `summary.json` counts it.
fn good_on_bounds(doc: &SweepDoc) -> Option<String> {
    let each: Vec<String> = doc
        .points
        .iter()
        .filter_map(|p| {
            let f = p.figures.as_ref()?;
            if !f.bounds.contains(&super::point::GOODPUT) {
                return None;
            }
            let range = match (f.good_requests_at_least, f.good_requests_at_most) {
                (Some(low), Some(high)) => format!("truly {low} to {high} good, "),
                _ => String::new(),
            };
            Some(format!(
                "{:02} {} {range}{} judged good ({} on a bound)",
                p.index,
                p.label,
                f.good_requests.unwrap_or(0),
                f.good_judged_on_bound
            ))
        })
        .collect();
    (!each.is_empty()).then(|| {
        format!(
            "good*: some of the point's goodput judgements rest on a bound (a time read late: \
             a TTFT miss may be a meet, an ITL meet a miss), so its good share is exact only as \
             a count of judgements (sweep.json's good_requests_at_least, \
             good_requests_at_most): {}",
            each.join("; ")
        )
    })
}

/// What each kind of column is, under the table: counts are exact, percentiles estimates,
/// the server's gauges the highest sampled; with `--runs`, every figure is a mean of runs.
fn footer(repeated: bool, bounds: bool) -> Vec<String> {
    let per_run = if repeated { "each run's " } else { "" };
    let mut lines = vec![format!(
        "{per_run}req/s, tok/s, tok/s/GPU and good: exact, counted per request over the \
         point's span (good as a count of judgements: marked * when some rest on a bound); TTFT, ITL and e2e (ms) and tok/s/user (the median of the requests \
         with a per-user rate; a point's notes count those without): percentiles of per-request times, estimates within {PERCENTILE_PRECISION_SPACED}; queue \
         max and KV max: the \
         highest the server's /metrics scrapes sampled (lower bounds: a peak between scrapes \
         is missed)"
    )];
    if bounds {
        lines.push(
            "*: not exact: some of the point's times were a later segment's stamp or canaryd's \
             read (summary.json's receive_timestamps), so TTFT and e2e are upper bounds, ITL \
             and tok/s/user exact in neither direction (sweep.json's bounds)"
                .into(),
        );
    }
    if repeated {
        lines.push(
            "repeated points (--runs): every figure the mean of the point's complete runs, an \
             estimate, with ± the half-width of its 95% confidence interval (Student's t) where \
             shown; queue max and KV max the highest of any run; the knee and the front are \
             found on the means"
                .into(),
        );
    }
    lines
}

/// Under the table when an interval was cut at 0.
const CUT_NOTE: &str = "(cut at 0): the interval, mean ± half-width, reached below 0, where a \
                        time or a rate cannot be: it is 0 to mean + half-width (sweep.json's \
                        repeats.metrics[].low, clipped true), and the runs disagreed by more \
                        than the figure";

/// The search's answer in a line, `runs` rates tried. Its bounds are rounded outward, as the
/// daemon's verdicts round them, so what is printed still holds: at least 106.5625 reads
/// "at least 106" (to the nearest thousandth it read 106.563, above the rate that passed).
fn capacity_line(c: &crate::capacity::Capacity, runs: usize) -> String {
    use crate::judge::capacity::{rate_at_least, rate_below};
    let (slo, good) = (&c.slo, good_percent(c.min_good_fraction));
    // An end whose probe's pass or fail the bounds could turn: said after the line.
    let not_established = c.bounds_said();
    let line = match (c.max_passing_rate, c.min_failing_rate) {
        (Some(p), Some(f)) => format!(
            "capacity at SLO ({slo}, {good}% good): {} req/s, a bound: at least {} (passed), \
             below {} (failed); {runs} rates tried, stopped by {}",
            rate_at_least(p),
            rate_at_least(p),
            rate_below(f),
            c.stopped_by
        ),
        (Some(p), None) => format!(
            "capacity at SLO ({slo}, {good}% good): at least {} req/s (a lower bound: no rate \
             failed of {runs} tried, stopped by {})",
            rate_at_least(p),
            c.stopped_by
        ),
        (None, f) => format!(
            "capacity at SLO ({slo}, {good}% good): no rate passed (lowest tried, failed: {} \
             req/s, the capacity below it); {runs} rates tried, stopped by {}",
            f.map_or("-".into(), rate_below),
            c.stopped_by
        ),
    };
    line + &not_established
}

#[cfg(test)]
mod tests {
    use super::*;

    fn capacity(passed: Option<f64>, failed: Option<f64>) -> crate::capacity::Capacity {
        crate::capacity::Capacity::of(
            canary_core::RateBracket { passed, failed },
            "time_to_first_token:100".into(),
            0.95,
            "precision",
        )
    }

    // Audit 2b: the line called "below R (failed)" established though the failing probe's
    // fail rested on goodput judged on bounds.
    #[test]
    fn a_capacity_end_on_bounds_is_called_not_established() {
        let mut c = capacity(Some(800.0), Some(1600.0));
        let why = "rests on bounds: up to 98.8 % may be good (276 judgements rest on a bound; \
                   truly good 1306 to 1582 of 1601)";
        c.note_bounds([
            (800.0, "pass"),
            (
                1600.0,
                format!("fail: good-request fraction 0.816 below …, which {why}").as_str(),
            ),
        ]);
        assert_eq!(c.not_established.len(), 1, "{c:?}");
        assert_eq!(c.not_established[0].end.as_str(), "failed");
        assert_eq!(
            capacity_line(&c, 4),
            format!(
                "capacity at SLO (time_to_first_token:100, 95% good): 800 req/s, a bound: at \
                 least 800 (passed), below 1600 (failed); 4 rates tried, stopped by precision; \
                 not established: the fail at 1600 req/s {why}"
            )
        );
        // Without a probe on bounds, nothing is added.
        let mut c = capacity(Some(800.0), Some(1600.0));
        c.note_bounds([(800.0, "pass"), (1600.0, "fail: …")]);
        assert!(!capacity_line(&c, 4).contains("not established"));
    }

    /// The footer called percentiles exact and the gauges means, under maxima.
    #[test]
    fn the_footer_says_what_each_kind_of_column_is() {
        let one = footer(false, false).join("\n");
        assert!(!one.contains("exact: counted and timed"), "{one}");
        assert!(!one.contains("means of the samples"), "{one}");
        assert!(
            one.starts_with("req/s, tok/s, tok/s/GPU and good: exact"),
            "{one}"
        );
        assert!(one.contains("percentiles of per-request times, estimates within 0.1 % or 0.5 µs, whichever is larger"));
        assert!(one.contains("queue max and KV max: the highest"), "{one}");
        assert!(!one.contains("*: not exact"), "{one}");
        let runs = footer(true, false);
        assert_eq!(runs.len(), 2, "{runs:?}");
        assert!(runs[0].starts_with("each run's req/s"), "{runs:?}");
        assert!(runs[1].contains("mean of the point's complete runs, an estimate"));
    }

    // A point whose times were bounds (a response in one read, or no kernel stamps) showed
    // its TTFT, ITL and e2e like exact ones; its cells are marked and the footer says why.
    #[test]
    fn a_points_figures_that_are_bounds_are_marked() {
        let f = super::super::point::PointFigures {
            bounds: vec!["time_to_first_token", "inter_token_latency"],
            ..Default::default()
        };
        assert_eq!(marked("148".into(), &f, "time_to_first_token"), "148*");
        assert_eq!(marked("0.4".into(), &f, "inter_token_latency"), "0.4*");
        assert_eq!(marked("900".into(), &f, "request_latency"), "900");
        assert_eq!(marked("-".into(), &f, "time_to_first_token"), "-");
        let lines = footer(false, true);
        assert!(
            lines[1].starts_with("*: not exact") && lines[1].contains("TTFT and e2e are upper"),
            "{lines:?}"
        );
    }

    /// A point with `--runs` whose TTFT p50 runs gave `values` (ms).
    fn repeated(values: &[f64]) -> Point {
        use crate::cli::repeats::{Figure, RepeatsSummary, CONFIDENCE};
        let mut p = Point::of_run(1, "c1".into(), 1.0, "point-01-c1".into(), None, None);
        let figure = Figure::of(
            ("time_to_first_token", "p50", "ms", "TTFT p50"),
            values.to_vec(),
            false,
        );
        p.repeats = Some(RepeatsSummary {
            runs_asked: values.len() as u32,
            runs: values.len() as u64,
            confidence: CONFIDENCE,
            method: "",
            exit_status: 0,
            interrupted: false,
            per_run: Vec::new(),
            metrics: figure.into_iter().collect(),
            unavailable: Vec::new(),
        });
        p
    }

    // Two runs 3.2 ms apart, 17.3 and 20.5 ms: Student's t on 1 degree of freedom (12.71)
    // gave ± 20.3 about 18.9, a low end of -1.4 ms clipped to 0, and the cell read
    // `18.9 [0.0-39.2]`: an unlabelled 0 as if a run had measured it, and nothing said why
    // two close runs made so wide an interval.
    #[test]
    fn an_interval_cut_at_zero_keeps_its_half_width_and_says_so() {
        let p = repeated(&[17.3, 20.5]);
        let cell = num_ci(Some(18.9), &p, "time_to_first_token", "p50");
        assert_eq!(cell, "18.9 ±20.3 (cut at 0)");
        let doc = super::super::document::SweepDoc::new(
            "sweep",
            super::super::point::Axis::Concurrency,
            vec![p],
        );
        assert!(any_cut(&doc));
        assert!(
            CUT_NOTE.contains("it is 0 to mean + half-width"),
            "{CUT_NOTE}"
        );
        let few = fewest_runs(&doc).and_then(few_runs).unwrap();
        assert!(
            few.starts_with("few runs: with 2 runs")
                && few.contains("on 1 degree of freedom (12.71)")
                && few.contains("8.98 times the runs' standard deviation"),
            "{few}"
        );
        // Inside the limits: a plain ±, nothing cut; five runs are not few.
        let p = repeated(&[43.0, 44.0, 45.0, 46.0, 48.0]);
        assert_eq!(
            num_ci(Some(45.2), &p, "time_to_first_token", "p50"),
            "45.2 ±2.4"
        );
        let doc = super::super::document::SweepDoc::new(
            "sweep",
            super::super::point::Axis::Concurrency,
            vec![p],
        );
        assert!(!any_cut(&doc));
        assert_eq!(fewest_runs(&doc).and_then(few_runs), None);
        // Runs that all gave the same figure: no spread, not a zero-wide ±.
        let p = repeated(&[45.0, 45.0, 45.0]);
        assert_eq!(
            num_ci(Some(45.0), &p, "time_to_first_token", "p50"),
            "45.0 (no spread)"
        );
    }

    // A search from 10 req/s bisects to 106.5625 passed, 106.875 failed: to the nearest
    // thousandth the lower bound read 106.563, above the rate that passed.
    #[test]
    fn the_answers_bounds_are_rounded_outward() {
        let line = capacity_line(&capacity(Some(106.5625), Some(106.875)), 13);
        assert!(
            line.contains("106 req/s, a bound: at least 106 (passed), below 107 (failed)"),
            "{line}"
        );
        let line = capacity_line(&capacity(Some(31.254), None), 5);
        assert!(
            line.contains("at least 31.25 req/s (a lower bound"),
            "{line}"
        );
        let line = capacity_line(&capacity(None, Some(0.0975)), 4);
        assert!(line.contains("failed: 0.0975 req/s"), "{line}");
    }
}

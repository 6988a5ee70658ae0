//! `summary.json`'s `timeslices` (issue 18, `--slice-duration`): TTFT and throughput slice by
//! slice, so drift within a run shows, then the slices as a table. Read from the artifact
//! tolerantly (a missing figure is a gap, not an error), as the diagnosis section is.

use super::{ms, num};
use crate::artifacts::Run;
use crate::html::{esc, table};
use crate::plot::{Axis, Colour, Mark, Plot, HALF};
use crate::ReportError;
use serde_json::Value;

/// One slice as the report reads it.
struct Slice {
    start: f64,
    covered: f64,
    partial: bool,
    requests: f64,
    errors: f64,
    ttft_p50: Option<f64>,
    ttft_p99: Option<f64>,
    e2e_p99: Option<f64>,
    /// The slice's TTFT (e2e) is over times some of which are upper bounds (the slice's
    /// `bound`; a summary from before slices said so reads as bound: not known exact).
    ttft_bound: bool,
    e2e_bound: bool,
    throughput: Option<f64>,
    tokens: Option<f64>,
}

impl Slice {
    fn read(v: &Value) -> Option<Slice> {
        let n = |k: &str| v.get(k).and_then(Value::as_f64);
        let stat = |m: &str, s: &str| v.get(m).and_then(|m| m.get(s)).and_then(Value::as_f64);
        let bound = |m: &str| {
            v.get(m)
                .and_then(|m| m.get("bound"))
                .and_then(Value::as_bool)
                .unwrap_or(true)
        };
        Some(Slice {
            start: n("start_s")?,
            covered: n("covered_s").unwrap_or(0.0),
            partial: v.get("partial").and_then(Value::as_bool).unwrap_or(false),
            requests: n("requests").unwrap_or(0.0),
            errors: n("errors").unwrap_or(0.0),
            ttft_p50: stat("time_to_first_token", "p50"),
            ttft_p99: stat("time_to_first_token", "p99"),
            e2e_p99: stat("request_latency", "p99"),
            ttft_bound: bound("time_to_first_token"),
            e2e_bound: bound("request_latency"),
            throughput: n("request_throughput"),
            tokens: n("output_token_throughput"),
        })
    }

    /// The middle of the part of the slice the run covered: where its point is drawn.
    fn mid(&self) -> f64 {
        self.start + self.covered / 2.0
    }
}

/// The section's body, when the summary has timeslices.
pub fn render(run: &Run, prefix: &str) -> Result<Option<String>, ReportError> {
    let Some(t) = run.summary.as_ref().and_then(|s| s.section("timeslices")) else {
        return Ok(None);
    };
    let listed = t.get("slices").and_then(Value::as_array);
    let in_file = listed.map_or(0, Vec::len);
    // A run writes at most MAX_SLICES; a file with more is not one canaryd wrote, and a
    // million would draw a million points and rows.
    let slices: Vec<Slice> = listed.map_or(Vec::new(), |a| {
        a.iter()
            .take(canary_core::Timeslices::MAX_SLICES)
            .filter_map(Slice::read)
            .collect()
    });
    if slices.is_empty() {
        return Ok(None);
    }
    let width = t.get("slice_duration_s").and_then(Value::as_f64);
    let points = |f: fn(&Slice) -> Option<f64>| -> Vec<(f64, f64)> {
        slices
            .iter()
            .filter_map(|s| Some((s.mid(), f(s)?)))
            .filter(|p| p.1.is_finite())
            .collect()
    };
    let mut html = String::from("<div class=\"grid\">\n");
    let mut lat = Plot::new(
        &format!("{prefix}slices-latency"),
        "Latency by slice (requests sent in it)",
        Axis::linear("time since the run's start (s)"),
        Axis::linear("ms"),
        HALF,
    );
    lat.layer(
        "TTFT p50",
        Colour::nth(0),
        Mark::LinePoints(points(|s| s.ttft_p50)),
    );
    lat.layer(
        "TTFT p99",
        Colour::nth(1),
        Mark::LinePoints(points(|s| s.ttft_p99)),
    );
    lat.layer(
        "e2e p99",
        Colour::nth(2),
        Mark::LinePoints(points(|s| s.e2e_p99)),
    );
    html.push_str(&lat.to_html()?);
    let mut thr = Plot::new(
        &format!("{prefix}slices-throughput"),
        "Throughput by slice (requests that finished in it)",
        Axis::linear("time since the run's start (s)"),
        Axis::linear("per second"),
        HALF,
    );
    thr.layer(
        "requests/s",
        Colour::nth(0),
        Mark::LinePoints(points(|s| s.throughput)),
    );
    html.push_str(&thr.to_html()?);
    html.push_str("</div>\n");

    // An upper bound reads `≤ 12.3 ms`, as nowhere else on the page needs a legend for it.
    let opt_ms = |v: Option<f64>, bound: bool| {
        v.map_or("–".to_string(), |v| {
            if bound {
                format!("≤ {}", ms(v))
            } else {
                ms(v)
            }
        })
    };
    let opt = |v: Option<f64>| v.map_or("–".to_string(), num);
    let rows: Vec<Vec<String>> = slices
        .iter()
        .map(|s| {
            vec![
                format!(
                    "{}–{}{}",
                    num(s.start),
                    num(s.start + s.covered),
                    if s.partial { " (partial)" } else { "" }
                ),
                num(s.requests),
                num(s.errors),
                opt_ms(s.ttft_p50, s.ttft_bound),
                opt_ms(s.ttft_p99, s.ttft_bound),
                opt_ms(s.e2e_p99, s.e2e_bound),
                opt(s.throughput),
                opt(s.tokens),
            ]
        })
        .collect();
    html.push_str(&format!(
        "<p>Slices of {} s from the run's start. A request belongs to the slice it was sent in; \
         throughput counts what finished in the slice. Counts exact, percentiles within 1 % or \
         0.5 µs, whichever is larger; a latency marked ≤ is an upper bound (some of the slice's \
         first tokens or ends were timed at a later segment's stamp or canaryd's read, as the \
         run's own table says); a partial slice's rates are over the part the run covered.</p>\n",
        esc(&width.map_or("–".to_string(), num))
    ));
    if in_file > canary_core::Timeslices::MAX_SLICES {
        html.push_str(&format!(
            "<p class=\"note\">summary.json lists {in_file} slices; a run writes at most {}: \
             the first {} are shown.</p>\n",
            canary_core::Timeslices::MAX_SLICES,
            canary_core::Timeslices::MAX_SLICES
        ));
    }
    html.push_str(&table(
        "timeslices",
        &[
            "slice (s)",
            "sent",
            "errors",
            "TTFT p50",
            "TTFT p99",
            "e2e p99",
            "requests/s",
            "output tokens/s",
        ],
        &rows,
    ));
    Ok(Some(html))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_with_more_slices_than_a_run_writes_shows_the_first_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("records.jsonl"), "").unwrap();
        let slices: Vec<Value> = (0..100_000)
            .map(|i| serde_json::json!({"start_s": i, "covered_s": 1.0, "requests": 1}))
            .collect();
        let summary = serde_json::json!({
            "timeslices": {"slice_duration_s": 1.0, "slices": slices}
        });
        std::fs::write(dir.path().join("summary.json"), summary.to_string()).unwrap();
        let html = render(&Run::load(dir.path()).unwrap(), "t-")
            .unwrap()
            .unwrap();
        assert!(
            html.contains("lists 100000 slices; a run writes at most 256"),
            "note"
        );
        assert_eq!(
            html.matches("<tr>").count(),
            256 + 1,
            "256 rows and the head"
        );
    }
}

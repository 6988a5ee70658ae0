//! GPU and server telemetry on the requests' time axis, and the run's telemetry summaries.
//!
//! Run artifacts carry telemetry per request (the value joined to each request: at its send,
//! at its first token, or over its lifetime) and summed up per run in `summary.json`; they do
//! not carry the raw sample timelines, and the report says so.

use super::context::{flatten, kv_table};
use super::time_range;
use super::timeline::series;
use crate::artifacts::{Request, Run};
use crate::html::esc;
use crate::plot::{Axis, Plot, WIDE};
use crate::ReportError;

/// A per-request signal: its name, unit, when it applies, and its value.
struct Signal {
    id: &'static str,
    title: &'static str,
    unit: &'static str,
    when: &'static str,
    at: fn(&Request) -> f64,
    value: fn(&Request) -> Option<f64>,
}

const SIGNALS: [Signal; 5] = [
    Signal {
        id: "queue",
        title: "Server queue depth when each request was sent",
        unit: "requests waiting",
        when: "send",
        at: |r| r.sent_ms,
        value: |r| r.telemetry.server_queue_depth_at_send,
    },
    Signal {
        id: "kv",
        title: "Server KV-cache usage when each request was sent",
        unit: "KV cache used (%)",
        when: "send",
        at: |r| r.sent_ms,
        value: |r| r.telemetry.server_kv_usage_at_send.map(|v| v * 100.0),
    },
    Signal {
        id: "running",
        title: "Requests running on the server at each first token",
        unit: "requests running",
        when: "first token",
        at: |r| r.sent_ms + r.ttft_ms.unwrap_or(0.0),
        value: |r| r.telemetry.server_running_at_first_token,
    },
    Signal {
        id: "gpu-util",
        title: "GPU utilization over each request's lifetime (mean)",
        unit: "GPU utilization (%)",
        when: "lifetime midpoint",
        at: |r| (r.sent_ms + r.ended_ms) / 2.0,
        value: |r| r.telemetry.gpu_util_avg_pct,
    },
    Signal {
        id: "gpu-power",
        title: "GPU board power over each request's lifetime (mean)",
        unit: "power (W)",
        when: "lifetime midpoint",
        at: |r| (r.sent_ms + r.ended_ms) / 2.0,
        value: |r| r.telemetry.gpu_power_avg_w,
    },
];

/// The telemetry timelines and summaries of one run; `None` when the run has none at all.
pub fn render(run: &Run, prefix: &str) -> Result<Option<String>, ReportError> {
    let (t0, t1) = time_range(run);
    let mut html = String::new();
    let mut missing = Vec::new();
    for s in &SIGNALS {
        let points: Vec<(f64, f64)> = run
            .measured()
            .filter_map(|r| Some(((s.at)(r) / 1000.0, (s.value)(r)?)))
            .filter(|p| p.1.is_finite())
            .collect();
        if points.is_empty() {
            missing.push(s.title);
            continue;
        }
        let mut plot = Plot::new(
            &format!("{prefix}{}-time", s.id),
            s.title,
            Axis::linear("time since the run's start (s)").range(t0, t1),
            Axis::linear(s.unit),
            WIDE,
        );
        let note = series(&mut plot, s.id, &points, t0, t1, 2);
        plot.note(format!("x: each request's {}. {note}", s.when));
        html.push_str(&plot.to_html()?);
    }
    let summary = run.summary.as_ref();
    let mut tables = String::new();
    if let Some(sources) = summary.and_then(|s| s.section("telemetry_sources")) {
        tables.push_str("<h3>Sources</h3>\n");
        tables.push_str(&kv_table(&flatten(sources)));
    }
    for (key, title) in [
        (
            "server",
            "The server's own figures (/metrics; each percentile is the Prometheus bucket \
             holding it, lower_bound to upper_bound, and an estimate inside; a gauge (queue \
             depth, running requests, KV-cache usage) was sampled at each scrape: its max is \
             a lower bound, the gauge may have peaked between scrapes, and its mean an \
             estimate)",
        ),
        ("gpu", "GPU over the run (NVML / DCGM)"),
    ] {
        if let Some(v) = summary.and_then(|s| s.section(key)) {
            tables.push_str(&format!("<h3>{}</h3>\n", esc(title)));
            let rows = if key == "server" {
                gauges_labelled(flatten(v))
            } else {
                flatten(v)
            };
            tables.push_str(&kv_table(&rows));
        }
    }
    if html.is_empty() && tables.is_empty() {
        return Ok(None);
    }
    let mut out = String::from(
        "<p class=\"lead\">Each point is the value canaryd joined to one request (same \
         monotonic clock as the requests). The run's artifacts hold these per-request values \
         and the per-run summaries below, not the raw sample timelines of each source.</p>\n",
    );
    out.push_str(&html);
    if !missing.is_empty() {
        out.push_str(&format!(
            "<p class=\"note\">Not in these records: {}.</p>\n",
            esc(&missing.join("; "))
        ));
    }
    out.push_str(&tables);
    Ok(Some(out))
}

/// The server gauges sampled at each scrape (`summary.json`'s `server.<gauge>.mean`, `.max`).
const SAMPLED_GAUGES: [&str; 4] = [
    "queue_depth",
    "running_requests",
    "kv_cache_usage",
    "requests_swapped",
];

/// The server section's rows with each sampled gauge's mean called an estimate and its max a
/// lower bound (a summary from before they said so has no `mean_kind`; a newer one's kinds
/// are in the values, not rows of their own).
fn gauges_labelled(rows: Vec<(String, String)>) -> Vec<(String, String)> {
    rows.into_iter()
        .filter_map(|(k, v)| {
            let Some((gauge, field)) = k.split_once('.') else {
                return Some((k, v));
            };
            if !SAMPLED_GAUGES.contains(&gauge) {
                return Some((k, v));
            }
            match field {
                "mean_kind" | "max_kind" => None,
                "mean" => Some((k, format!("{v} (estimate)"))),
                "max" => Some((k, format!("{v} (lower bound: the largest scraped)"))),
                _ => Some((k, v)),
            }
        })
        .collect()
}

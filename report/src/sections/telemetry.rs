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
use serde_json::Value;

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
             estimate; a client − server mean is exact, or at most its value where some \
             client times were upper bounds)",
        ),
        (
            "gpu",
            "GPU over the run (NVML / DCGM; clocks and memory utilization are readings at \
             sample instants: their means are estimates, the lowest clock and the highest \
             utilization read are bounds on the run's)",
        ),
    ] {
        if let Some(v) = summary.and_then(|s| s.section(key)) {
            tables.push_str(&format!("<h3>{}</h3>\n", esc(title)));
            let rows = if key == "server" {
                gauges_labelled(flatten(&server_in_ms(v)))
            } else {
                gpu_labelled(flatten(v))
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

/// The server block with its durations in ms, each value said with its unit: the server's
/// histograms are in seconds (`ttft_s`, `itl_s`, …), where `num`'s three decimals read a
/// 0.068 ms mean ITL as `0.000`. Keys stay summary.json's, so a reader finds them there; a
/// `*_ms` block (the client's figures beside the server's) gets its unit too. Counts and
/// labels are left as they are.
fn server_in_ms(v: &Value) -> Value {
    /// `v` with its numbers times `scale` in ms when `scale` is set (inside a duration
    /// block), blocks named `*_s` and `*_ms` found at any depth.
    fn walk(v: &Value, scale: Option<f64>) -> Value {
        match v {
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| {
                        let unitless =
                            matches!(k.as_str(), "count" | "samples" | "unit" | "client_times")
                                || k.ends_with("_kind")
                                || k == "requests";
                        let scale = match v {
                            _ if unitless => None,
                            Value::Object(_) if k.ends_with("_s") => Some(1000.0),
                            Value::Object(_) if k.ends_with("_ms") => Some(1.0),
                            // The client_times counts of a comparison, and the like.
                            Value::Object(_) if scale.is_none() => None,
                            _ => scale,
                        };
                        (k.clone(), walk(v, scale))
                    })
                    .collect(),
            ),
            Value::Number(n) => match (n.as_f64(), scale) {
                (Some(x), Some(scale)) => Value::String(super::ms(x * scale)),
                _ => v.clone(),
            },
            _ => v.clone(),
        }
    }
    walk(v, None)
}

/// The server gauges sampled at each scrape (`summary.json`'s `server.<gauge>.mean`, `.max`).
const SAMPLED_GAUGES: [&str; 4] = [
    "queue_depth",
    "running_requests",
    "kv_cache_usage",
    "requests_swapped",
];

/// The server section's rows with each `mean` and `max` qualified by what its summary says it
/// is (`mean_kind`, `max_kind`: `at most 0.512 (upper bound)` for a client − server mean over
/// client times that are bounds), the kinds then not rows of their own. A sampled gauge of a
/// summary from before the kinds were written has neither: its mean is an estimate and its
/// max a lower bound all the same.
fn gauges_labelled(rows: Vec<(String, String)>) -> Vec<(String, String)> {
    use std::collections::{BTreeMap, BTreeSet};
    let kinds: BTreeMap<String, String> = rows
        .iter()
        .filter(|(k, _)| k.ends_with(".mean_kind") || k.ends_with(".max_kind"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let keys: BTreeSet<String> = rows.iter().map(|(k, _)| k.clone()).collect();
    rows.into_iter()
        .filter_map(|(k, v)| {
            let Some((prefix, field)) = k.rsplit_once('.') else {
                return Some((k, v));
            };
            let gauge = SAMPLED_GAUGES.contains(&prefix);
            let kind = |name: &str| kinds.get(&format!("{prefix}.{name}")).map(String::as_str);
            let labelled = match field {
                // Said with the value it qualifies, when there is one.
                "mean_kind" | "max_kind"
                    if keys.contains(&format!("{prefix}.{}", &field[..field.len() - 5])) =>
                {
                    return None
                }
                "mean" => match kind("mean_kind").or(gauge.then_some("estimate")) {
                    Some(kind) => qualified(&v, kind, false),
                    None => v,
                },
                "max" => match kind("max_kind").or(gauge.then_some("lower_bound")) {
                    Some(kind) => qualified(&v, kind, gauge),
                    None => v,
                },
                _ => v,
            };
            Some((k, labelled))
        })
        .collect()
}

/// The GPU section's rows with each sampled clock and memory-utilization figure (overall and
/// per GPU) qualified by what it is: a mean of readings an estimate, the lowest clock read an
/// upper bound on the lowest, the highest utilization read a lower bound on the highest.
fn gpu_labelled(rows: Vec<(String, String)>) -> Vec<(String, String)> {
    rows.into_iter()
        .map(|(k, v)| {
            let field = k.rsplit_once('.').map_or(k.as_str(), |(_, f)| f);
            let kind = match field {
                "sm_clock_avg_mhz" | "mem_clock_avg_mhz" | "util_mem_avg_pct" => "estimate",
                "sm_clock_min_mhz" => "upper_bound",
                "util_mem_max_pct" => "lower_bound",
                _ => return (k, v),
            };
            let v = qualified(&v, kind, false);
            (k, v)
        })
        .collect()
}

/// A value with its kind, as the CLI prints it: `at most 0.512 (upper bound)`.
fn qualified(v: &str, kind: &str, scraped_max: bool) -> String {
    if v == "–" {
        return v.to_string();
    }
    match kind {
        "exact" => format!("{v} (exact)"),
        "estimate" => format!("{v} (estimate)"),
        "upper_bound" => format!("at most {v} (upper bound)"),
        "lower_bound" if scraped_max => format!("{v} (lower bound: the largest scraped)"),
        "lower_bound" => format!("at least {v} (lower bound)"),
        other => format!("{v} ({other})"),
    }
}

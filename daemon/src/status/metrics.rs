//! The daemon's own metrics: run counts by verdict, skips, reloads, export drops, and each
//! workload's last run (verdict, baseline trend, figures, telemetry source states), rendered
//! as Prometheus text for `/metrics` and summarized for `/api/runs`.

use crate::export::RunSink;
use crate::history::{History, RunRow};
use crate::runner::RunResult;
use crate::verdict::VerdictKind;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// The daemon's live state, as the status endpoint shows it.
#[derive(Default)]
pub struct StatusMetrics {
    ready: AtomicBool,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    runs: BTreeMap<(String, VerdictKind), u64>,
    skips: BTreeMap<String, u64>,
    running: BTreeMap<String, bool>,
    last: BTreeMap<String, Value>,
    reloads: BTreeMap<&'static str, u64>,
    export_drops: u64,
}

impl StatusMetrics {
    /// Seeds last-run figures from history, so a restart does not blank them.
    pub fn seed(&self, history: &History) {
        let Ok(latest) = history.latest_per_workload() else {
            return;
        };
        let mut s = self.state.lock().unwrap();
        for row in latest {
            s.last.insert(row.workload.clone(), brief(&row));
        }
    }

    /// Sets readiness (`/readyz` is 503 until then, and again while stopping).
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    /// Whether `/readyz` says ready.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    /// A run of `workload` starts or ends.
    pub fn set_running(&self, workload: &str, running: bool) {
        self.state
            .lock()
            .unwrap()
            .running
            .insert(workload.to_string(), running);
    }

    /// Workloads now running.
    pub fn running(&self) -> Vec<String> {
        let s = self.state.lock().unwrap();
        s.running
            .iter()
            .filter(|(_, r)| **r)
            .map(|(w, _)| w.clone())
            .collect()
    }

    /// Each workload's last verdict kind and trend, `chat pass (steady)`, by workload.
    pub fn last_verdicts(&self) -> Vec<String> {
        let s = self.state.lock().unwrap();
        s.last
            .iter()
            .map(|(w, v)| {
                let kind = v["verdict_kind"].as_str().unwrap_or("?");
                match v["trend"].as_str() {
                    Some(t) => format!("{w} {kind} ({t})"),
                    None => format!("{w} {kind}"),
                }
            })
            .collect()
    }

    /// A SIGHUP reload was applied (`ok`) or rejected.
    pub fn reloaded(&self, ok: bool) {
        let key = if ok { "ok" } else { "rejected" };
        *self.state.lock().unwrap().reloads.entry(key).or_default() += 1;
    }

    /// Exporters dropped `n` items (queue full, endpoint down).
    pub fn export_dropped(&self, n: u64) {
        self.state.lock().unwrap().export_drops += n;
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let s = self.state.lock().unwrap();
        let mut out = String::new();
        write_family(
            &mut out,
            "canaryd_runs_total",
            "counter",
            "Finished runs by workload and verdict, since start.",
            s.runs.iter().map(|((w, v), c)| {
                (
                    format!("workload=\"{}\",verdict=\"{}\"", esc(w), v.as_str()),
                    *c as f64,
                )
            }),
        );
        write_family(
            &mut out,
            "canaryd_skips_total",
            "counter",
            "Scheduled runs skipped: the previous run of the workload was still going, or the daemon stopped while the run waited for its target.",
            s.skips
                .iter()
                .map(|(w, c)| (format!("workload=\"{}\"", esc(w)), *c as f64)),
        );
        write_family(
            &mut out,
            "canaryd_running",
            "gauge",
            "1 while a run of the workload is going (or waiting for its target).",
            s.running
                .iter()
                .map(|(w, r)| (format!("workload=\"{}\"", esc(w)), f64::from(u8::from(*r)))),
        );
        write_family(
            &mut out,
            "canaryd_config_reloads_total",
            "counter",
            "SIGHUP reloads, applied (ok) or rejected (bad config; the old one kept running).",
            s.reloads
                .iter()
                .map(|(k, c)| (format!("result=\"{k}\""), *c as f64)),
        );
        write_family(
            &mut out,
            "canaryd_export_drops_total",
            "counter",
            "Items exporters dropped.",
            [(String::new(), s.export_drops as f64)].into_iter(),
        );
        let last = |key: &'static str| last_values(&s.last, key);
        write_family(
            &mut out,
            "canaryd_last_run_timestamp_seconds",
            "gauge",
            "When the workload's last run finished (Unix time).",
            last("/finished_unix_ms").map(|(l, v)| (l, v / 1000.0)),
        );
        write_family(
            &mut out,
            "canaryd_last_run_verdict",
            "gauge",
            "1 for the verdict of the workload's last run.",
            s.last.iter().flat_map(|(w, v)| {
                let kind = v["verdict_kind"].as_str().unwrap_or("").to_string();
                VerdictKind::ALL.into_iter().map(move |k| {
                    (
                        format!("workload=\"{}\",verdict=\"{}\"", esc(w), k.as_str()),
                        f64::from(u8::from(k.as_str() == kind)),
                    )
                })
            }),
        );
        write_family(
            &mut out,
            "canaryd_last_run_baseline",
            "gauge",
            "1 for the baseline trend of the workload's last run.",
            s.last.iter().flat_map(|(w, v)| {
                let trend = v["trend"].as_str().unwrap_or("").to_string();
                crate::baseline::Trend::ALL.into_iter().map(move |t| {
                    (
                        format!("workload=\"{}\",trend=\"{}\"", esc(w), t.as_str()),
                        f64::from(u8::from(t.as_str() == trend)),
                    )
                })
            }),
        );
        for (name, key, help) in [
            ("requests", "/figures/requests", "Measured requests"),
            ("errors", "/figures/errors", "Failed requests"),
            (
                "good_request_fraction",
                "/figures/good_request_fraction",
                "Share of requests meeting every SLO",
            ),
            ("duration_seconds", "/figures/duration_s", "Run duration"),
        ] {
            write_family(
                &mut out,
                &format!("canaryd_last_run_{name}"),
                "gauge",
                &format!("{help} in the workload's last run."),
                last(key),
            );
        }
        write_family(
            &mut out,
            "canaryd_last_run_latency_ms",
            "gauge",
            "Client-side latency percentiles of the workload's last run, ms.",
            s.last.iter().flat_map(|(w, v)| {
                let w = esc(w);
                [
                    "time_to_first_token",
                    "inter_token_latency",
                    "request_latency",
                ]
                .into_iter()
                .flat_map(move |m| ["p50", "p99"].into_iter().map(move |q| (m, q)))
                .filter_map(move |(m, q)| {
                    v.pointer(&format!("/figures/{m}/{q}"))
                        .and_then(Value::as_f64)
                        .map(|x| {
                            (
                                format!(
                                    "workload=\"{w}\",metric=\"{m}\",quantile=\"0.{}\"",
                                    &q[1..]
                                ),
                                x,
                            )
                        })
                })
            }),
        );
        write_family(
            &mut out,
            "canaryd_telemetry_source_up",
            "gauge",
            "Telemetry sources in the workload's last run: 1 available, 0 not (state label says why).",
            s.last.iter().flat_map(|(w, v)| {
                let w = esc(w);
                v["telemetry_sources"]
                    .as_object()
                    .cloned()
                    .unwrap_or_default()
                    .into_iter()
                    .map(move |(src, st)| {
                        let state = st["state"].as_str().unwrap_or("unknown").to_string();
                        (
                            format!("workload=\"{w}\",source=\"{}\",state=\"{state}\"", esc(&src)),
                            f64::from(u8::from(state == "available")),
                        )
                    })
            }),
        );
        out
    }
}

/// `(workload label, number at key)` for each workload's last run that has it.
fn last_values<'a>(
    last: &'a BTreeMap<String, Value>,
    key: &'a str,
) -> impl Iterator<Item = (String, f64)> + 'a {
    last.iter().filter_map(move |(w, v)| {
        v.pointer(key)
            .and_then(Value::as_f64)
            .map(|x| (format!("workload=\"{}\"", esc(w)), x))
    })
}

fn write_family(
    out: &mut String,
    name: &str,
    kind: &str,
    help: &str,
    samples: impl Iterator<Item = (String, f64)>,
) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    for (labels, v) in samples {
        if labels.is_empty() {
            let _ = writeln!(out, "{name} {v}");
        } else {
            let _ = writeln!(out, "{name}{{{labels}}} {v}");
        }
    }
}

/// Escapes a Prometheus label value.
fn esc(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl RunSink for StatusMetrics {
    fn run_finished(&self, workload: &str, run: &RunResult) {
        let mut s = self.state.lock().unwrap();
        *s.runs
            .entry((workload.to_string(), run.verdict.kind))
            .or_default() += 1;
        s.last
            .insert(workload.to_string(), brief(&RunRow::from(run)));
    }

    fn run_skipped(&self, workload: &str) {
        *self
            .state
            .lock()
            .unwrap()
            .skips
            .entry(workload.to_string())
            .or_default() += 1;
    }
}

/// A run as `/api/runs` lists it: verdict, trend and the headline figures.
pub fn brief(r: &RunRow) -> Value {
    let sum = r.summary.as_ref();
    let metric = |m: &str| {
        sum.and_then(|s| s.get(m))
            .map(|b| json!({ "p50": b.get("p50"), "p99": b.get("p99") }))
    };
    let figures = sum.map(|s| {
        json!({
            "requests": s.get("requests"),
            "completed": s.get("completed"),
            "errors": s.get("errors"),
            "duration_s": s.get("duration_s"),
            "interrupted": s.get("interrupted"),
            "good_request_fraction": s.pointer("/goodput/good_request_fraction"),
            "time_to_first_token": metric("time_to_first_token"),
            "inter_token_latency": metric("inter_token_latency"),
            "request_latency": metric("request_latency"),
        })
    });
    json!({
        "id": r.id,
        "workload": r.workload,
        "target": r.target,
        "started_unix_ms": r.started_unix_ms,
        "finished_unix_ms": r.finished_unix_ms,
        "verdict": r.verdict.to_string(),
        "verdict_kind": r.verdict.kind.as_str(),
        "reasons": r.verdict.reasons,
        "trend": r.trend.map(|t| t.as_str()),
        "figures": figures,
        "telemetry_sources": sum.and_then(|s| s.get("telemetry_sources")),
        "artifacts": r.artifacts,
    })
}

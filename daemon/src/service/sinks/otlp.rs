//! OTLP export of the daemon's runs: one exporter for the life of the process, a run
//! observer per run (a span and metric points per request), and when a run ends its verdict
//! and trend as `canary.runs` and one `canary.run` log event. Flushed, with the `[otlp]`
//! flush timeout, when the daemon stops.
//!
//! Each workload's last-run gauges (its verdict, trend and diagnosis state sets) are seeded at
//! start from the history's last run of each workload, as `/metrics` seeds its own, without
//! counting it again; a run recovered at start that began before the last one known is
//! exported and counted but does not replace them (the rule `/metrics` follows:
//! [`super::last_run`]).
//!
//! A collector that is down is reported once by the exporter and runs go on; what it loses
//! is added to the status endpoint's `canaryd_export_drops_total` as each run ends and every
//! few seconds between runs.

use crate::capacity::Capacity;
use crate::config::{Config, Target, Workload};
use crate::judge::capacity::CapacityRun;
use crate::judge::knee::SweepRun;
use crate::service::history::ListedRow;
use crate::service::run_result::RunResult;
use crate::service::sinks::{last_run, RunSink};
use crate::service::status::{RunBrief, StatusMetrics};
use canary_core::{Bottleneck, Confidence};
use canary_exporters::{OtlpExporter, RunJudgement, RunLabels, RunObserver, Signal};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The signals, in the order of [`OtlpSink`]'s drop counts.
const SIGNALS: [Signal; 3] = [Signal::Traces, Signal::Metrics, Signal::Logs];

/// The daemon's OTLP exporter as a [`RunSink`].
pub struct OtlpSink {
    /// `None` once flushed.
    exporter: Mutex<Option<OtlpExporter>>,
    flush_timeout: Duration,
    /// Labels of runs in flight, by run id (their observer carries the same ones).
    labels: Mutex<HashMap<String, RunLabels>>,
    metrics: Arc<StatusMetrics>,
    /// Drops already added to the status metrics, by signal (traces, metrics, logs).
    drops_counted: [AtomicU64; 3],
    /// The running config's workloads and their labels, once a schedule set them: a run of
    /// a workload a reload took out, finishing after it, does not bring its last-run gauges
    /// back; a run that ended before its observer was made is exported under its workload's
    /// labels, not empty ones (whose series would replace the workload's, leaving its last
    /// real verdict standing in Grafana under the old labels).
    configured: Mutex<Option<HashMap<String, RunLabels>>>,
    /// The start (Unix ms) of each workload's last run as the gauges show it: the history's
    /// last at start, then each run that replaced it. A recovered run older than it is not
    /// made the last.
    last_started: Mutex<HashMap<String, i64>>,
}

impl OtlpSink {
    /// Starts the exporter when `config` (or the environment) names an endpoint, its last-run
    /// gauges seeded from each workload's last stored run (`latest`). Settings that cannot be
    /// used (a header variable unset, a bad `OTEL_*` value) are logged once and the daemon runs
    /// without export.
    pub fn start(
        config: &Config,
        metrics: Arc<StatusMetrics>,
        latest: &[ListedRow],
    ) -> Option<Arc<OtlpSink>> {
        let settings = match config.otlp.exporter_config() {
            Ok(s) => s,
            Err(e) => {
                tracing::error!("OTLP export off: {e}");
                return None;
            }
        };
        if !settings.is_enabled() {
            return None;
        }
        let sink = match OtlpExporter::start(settings) {
            Ok(exporter) => Arc::new(OtlpSink {
                exporter: Mutex::new(Some(exporter)),
                flush_timeout: config.otlp.flush_timeout,
                labels: Mutex::default(),
                metrics,
                drops_counted: Default::default(),
                configured: Mutex::default(),
                last_started: Mutex::default(),
            }),
            Err(e) => {
                tracing::error!("OTLP export off: {e}");
                return None;
            }
        };
        sink.metrics.export_enabled();
        sink.seed(config, latest);
        // Metric exports fail between runs too: the status metrics follow every few seconds.
        let weak = Arc::downgrade(&sink);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(5));
            loop {
                tick.tick().await;
                match weak.upgrade() {
                    Some(sink) if sink.refresh_drops() => {}
                    _ => return,
                }
            }
        });
        Some(sink)
    }

    /// Seeds each configured workload's last-run state sets from its last stored run in
    /// `latest` (the runs `/metrics` seeds its own from, see [`last_run::stored`]), so a
    /// restart does not blank them. Nothing is counted: the run was counted by the process
    /// that ran it.
    pub fn seed(&self, config: &Config, latest: &[ListedRow]) {
        let guard = self.exporter.lock().unwrap();
        let Some(exporter) = guard.as_ref() else {
            return;
        };
        let mut last_started = self.last_started.lock().unwrap();
        for row in latest {
            last_started.insert(row.run.workload.clone(), row.run.started_unix_ms);
            let configured = config.workloads.iter().find(|w| w.name == row.run.workload);
            let Some((w, t)) = configured.and_then(|w| Some((w, config.targets.get(&w.target)?)))
            else {
                continue;
            };
            let (judgement, diagnosis) = stored_states(row);
            exporter.seed_last_run(&labels(w, t, &row.run.id), &judgement, diagnosis);
        }
    }

    /// Brings `canaryd_export_drops_total` up to date; false once the exporter is flushed.
    fn refresh_drops(&self) -> bool {
        let guard = self.exporter.lock().unwrap();
        let Some(exporter) = guard.as_ref() else {
            return false;
        };
        for s in SIGNALS {
            self.count_drops(s, exporter.dropped_of(s));
        }
        true
    }

    /// The observer for run `id` of `w` against `t`, and the sampling ratio its
    /// `traceparent` flags must follow; `None` once the exporter is flushed.
    pub fn begin_run(&self, w: &Workload, t: &Target, id: &str) -> Option<(RunObserver, f64)> {
        let guard = self.exporter.lock().unwrap();
        let exporter = guard.as_ref()?;
        // A collector quoting the target's key back is scrubbed of it, as of its own headers.
        exporter.scrub_also(&w.target, target_secrets(t));
        let labels = labels(w, t, id);
        self.labels
            .lock()
            .unwrap()
            .insert(id.to_string(), labels.clone());
        Some((exporter.run_observer(labels), exporter.sample_ratio()))
    }

    /// Lets go of the labels kept for run `id`, which will not be exported (a stop caught it
    /// before its first measured request: a skip). Each such run left its entry behind.
    pub fn end_unexported(&self, id: &str) {
        self.labels.lock().unwrap().remove(id);
    }

    /// How many runs' labels are kept (runs begun and not yet finished or skipped).
    pub fn runs_in_flight(&self) -> usize {
        self.labels.lock().unwrap().len()
    }

    /// Ends the last-run gauge series of workloads no longer in `config`.
    pub fn retain_workloads(&self, config: &Config) {
        let configured: HashMap<String, RunLabels> = config
            .workloads
            .iter()
            .filter_map(|w| {
                let t = config.targets.get(&w.target)?;
                let mut l = labels(w, t, "");
                l.run_id = None;
                Some((w.name.clone(), l))
            })
            .collect();
        if let Some(exporter) = self.exporter.lock().unwrap().as_ref() {
            exporter.retain_workloads(&|w| configured.contains_key(w));
        }
        self.last_started
            .lock()
            .unwrap()
            .retain(|w, _| configured.contains_key(w));
        *self.configured.lock().unwrap() = Some(configured);
    }

    /// Adds the drops since the last call to `canaryd_export_drops_total`.
    fn count_drops(&self, signal: Signal, total: u64) {
        let i = SIGNALS.iter().position(|s| *s == signal).unwrap_or(0);
        let before = self.drops_counted[i].fetch_max(total, Ordering::Relaxed);
        if total > before {
            self.metrics.export_dropped(signal, total - before);
        }
    }
}

/// The verdict, trend and diagnosis of a stored run, as its last-run state sets show them. A
/// diagnosis this version cannot read (another class name) leaves that state set unseeded.
fn stored_states(row: &ListedRow) -> (RunJudgement, Option<(Bottleneck, Confidence)>) {
    let brief = RunBrief::from(row);
    let judgement = RunJudgement {
        verdict: brief.verdict_kind.as_str().to_string(),
        reasons: brief.reasons,
        trend: brief.trend.map(|t| t.as_str().to_string()),
        // The history keeps the trend alone: a stored run's unconfirmed direction is not
        // known here.
        trend_unconfirmed: None,
    };
    let diagnosis = brief
        .diagnosis
        .and_then(|d| Some((named(d.class)?, named(d.confidence)?)));
    (judgement, diagnosis)
}

/// The target's API key (as the run reads it) and its extra headers' credentials, for the
/// exporter's scrub of a collector's text. A key that cannot be read now is not the run's
/// either (the run fails on it), so it is left out.
fn target_secrets(t: &Target) -> canary_core::Secrets {
    let Ok(mut target) = canary_replay::Target::new(&t.url, t.endpoint, &t.model) else {
        return canary_core::Secrets::default();
    };
    // The replay's own rule for which of a target's values are secrets.
    target.api_key = t.api_key.as_ref().and_then(|k| k.read().ok().flatten());
    target.headers = t.headers.clone();
    canary_core::Secrets::of([&target])
}

/// The value of an enum `summary.json` names `name` (`queueing`, `high`).
fn named<T: serde::de::DeserializeOwned>(name: String) -> Option<T> {
    serde_json::from_value(serde_json::Value::String(name)).ok()
}

/// Labels of one run; the target's URL was checked when the config loaded.
fn labels(w: &Workload, t: &Target, id: &str) -> RunLabels {
    let mut labels = match canary_replay::Target::new(&t.url, t.endpoint, &t.model) {
        Ok(target) => crate::execute::run_labels(&target, &w.name),
        Err(_) => RunLabels {
            workload: w.name.clone(),
            operation: t.endpoint.operation().to_string(),
            model: t.model.clone(),
            provider: "openai".into(),
            server_address: String::new(),
            server_port: 0,
            run_id: None,
            goodput: Default::default(),
        },
    };
    labels.run_id = Some(id.to_string());
    labels.goodput = w.slos.clone();
    labels
}

impl RunSink for OtlpSink {
    fn run_finished(&self, workload: &str, run: &RunResult) {
        let guard = self.exporter.lock().unwrap();
        let Some(exporter) = guard.as_ref() else {
            return;
        };
        // A run that ended before its observer was made (recovered after a crash, or failed
        // before it replayed) still gets its verdict out, under its workload's labels.
        let labels = self.labels.lock().unwrap().remove(&run.run.id);
        let configured = || {
            let c = self.configured.lock().unwrap();
            c.as_ref()?.get(workload).cloned()
        };
        let mut labels = labels.or_else(configured).unwrap_or_else(|| RunLabels {
            workload: workload.to_string(),
            operation: String::new(),
            model: String::new(),
            provider: "openai".into(),
            server_address: String::new(),
            server_port: 0,
            run_id: None,
            goodput: Default::default(),
        });
        labels.run_id = Some(run.run.id.clone());
        let judgement = RunJudgement {
            verdict: run.run.verdict.kind.as_str().to_string(),
            reasons: run.run.verdict.reasons.clone(),
            trend: run
                .run
                .comparison
                .as_ref()
                .map(|c| c.trend.as_str().to_string()),
            trend_unconfirmed: run
                .run
                .comparison
                .as_ref()
                .and_then(|c| c.unconfirmed)
                .map(|t| t.as_str().to_string()),
        };
        let last = {
            let mut last_started = self.last_started.lock().unwrap();
            let last = last_run::replaces_last(run, last_started.get(workload).copied());
            if last {
                last_started.insert(workload.to_string(), run.run.started_unix_ms);
            }
            last
        };
        if !last {
            // Counted and sent as the run it is; the newer run's gauges stay.
            exporter.export_earlier_run(&labels, run.outcome.as_ref(), &judgement);
            for s in SIGNALS {
                self.count_drops(s, exporter.dropped_of(s));
            }
            return;
        }
        exporter.export_judged_run(&labels, run.outcome.as_ref(), &judgement);
        if let Some(c) = &run.run.capacity {
            exporter.export_capacity(&labels, &capacity_figures(c));
            exporter.export_capacity_not_established(&labels, &c.found.not_established_gauge());
        }
        if let Some(s) = &run.run.sweep {
            exporter.export_knee(&labels, &knee_figures(s));
            // A sweep over rates brackets the capacity at the SLO as a search does; one over
            // another axis has none, and ends an earlier sweep's bracket.
            let none = [("passed", None), ("failed", None)];
            exporter.export_capacity(&labels, &s.capacity.as_ref().map_or(none, bracket));
            let ends = s
                .capacity
                .as_ref()
                .map_or(none, Capacity::not_established_gauge);
            exporter.export_capacity_not_established(&labels, &ends);
        }
        // Counted and exported as it ran, but its workload is gone: its gauges end again.
        if let Some(names) = self.configured.lock().unwrap().as_ref() {
            if !names.contains_key(workload) {
                exporter.retain_workloads(&|w| names.contains_key(w));
            }
        }
        for s in SIGNALS {
            self.count_drops(s, exporter.dropped_of(s));
        }
    }

    fn flush(&self) {
        let Some(exporter) = self.exporter.lock().unwrap().take() else {
            return;
        };
        let r = exporter.shutdown(self.flush_timeout);
        self.count_drops(Signal::Traces, r.spans_dropped);
        self.count_drops(Signal::Metrics, r.metric_exports_failed);
        self.count_drops(Signal::Logs, r.logs_dropped);
        tracing::info!(
            "OTLP: {} spans, {} metric exports, {} run events sent over the daemon's life",
            r.spans_exported,
            r.metric_exports,
            r.logs_exported
        );
    }
}

/// `canary.capacity.rate` of a capacity run, by bound. A bound the run does not have is
/// `None`: the exporter then stops exporting it, so no earlier run's bound goes on showing (a
/// failed bound below this run's passed one, say).
fn capacity_figures(c: &CapacityRun) -> [(&'static str, Option<f64>); 3] {
    let [passed, failed] = bracket(&c.found);
    let baseline = ("baseline", c.baseline.as_ref().map(|b| b.capacity));
    [passed, failed, baseline]
}

/// The passed and failed bounds of a capacity bracket.
fn bracket(c: &Capacity) -> [(&'static str, Option<f64>); 2] {
    [
        ("passed", c.max_passing_rate),
        ("failed", c.min_failing_rate),
    ]
}

/// `canary.sweep.knee` of a sweep run, by figure.
fn knee_figures(s: &SweepRun) -> [(&'static str, Option<f64>); 2] {
    [
        ("knee", s.knee.as_ref().map(|k| k.request_throughput)),
        ("baseline", s.baseline.as_ref().map(|b| b.knee)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // A search that ran out of probes while still passing has no failed bound: the gauge must
    // not go on showing the failed bound of an earlier search, which could lie below this
    // run's passed one.
    // The capacity's ends on bounds went out on /metrics but not over OTLP. sweep.json's
    // `capacity` as `canaryd sweep --find-max-rate` wrote it (core/tests/data/SOURCES.md):
    // the failing end on bounds, 1; no passing end, no point; every end established, 0.
    #[test]
    fn a_capacity_end_on_bounds_is_1_an_established_end_0_and_a_missing_end_none() {
        let data = concat!(env!("CARGO_MANIFEST_DIR"), "/../core/tests/data/");
        let capacity = |file: &str| -> Capacity {
            let text = std::fs::read_to_string(format!("{data}{file}")).unwrap();
            let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
            serde_json::from_value(doc["capacity"].clone()).unwrap()
        };
        let c = capacity("sweep_capacity_on_bounds.json");
        assert_eq!(
            c.not_established_gauge(),
            [("passed", None), ("failed", Some(1.0))]
        );
        let c = capacity("sweep_capacity_established.json");
        assert_eq!(
            c.not_established_gauge(),
            [("passed", Some(0.0)), ("failed", None)]
        );
    }

    #[test]
    fn a_figure_the_run_does_not_have_is_none() {
        let run: CapacityRun = serde_json::from_value(json!({
            "slo": "time_to_first_token:100", "min_good_fraction": 0.95,
            "max_passing_rate": 400.0, "min_failing_rate": null, "relative_uncertainty": null,
            "stopped_by": "max_runs", "probes": [], "baseline": null
        }))
        .unwrap();
        let f = capacity_figures(&run);
        assert_eq!(f.map(|(bound, _)| bound), ["passed", "failed", "baseline"]);
        assert_eq!(f.map(|(_, v)| v), [Some(400.0), None, None]);
        let sweep: SweepRun = serde_json::from_value(json!({
            "axis": "concurrency", "knee": null, "capacity": null, "points": [],
            "baseline": {"runs": 3, "knee": 103.0, "spread": 2.0, "fail_at_or_below": 90.0}
        }))
        .unwrap();
        assert_eq!(
            knee_figures(&sweep),
            [("knee", None), ("baseline", Some(103.0))]
        );
    }
}

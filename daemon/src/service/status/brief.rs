//! [`RunBrief`]: a run as `/api/runs` lists it and as the status metrics keep each workload's
//! last one — verdict, trend and the headline figures. The figures are read back from the
//! summary the history stored (JSON, the history's edge) into typed fields once, here.

use crate::judge::baseline::Trend;
use crate::judge::verdict::VerdictKind;
use crate::service::history::{ListedRow, RunRow};
use canary_core::{ContextComparison, RxSummary, Source, SourceState};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// A run's verdict, trend and headline figures.
#[derive(Debug, Clone, Serialize)]
pub struct RunBrief {
    /// The run id.
    pub id: String,
    /// The workload.
    pub workload: String,
    /// The target's name.
    pub target: String,
    /// Wall-clock start, Unix ms.
    pub started_unix_ms: i64,
    /// When it was due (its tick, Unix ms; before jitter and any wait), as its `verdict.json`
    /// says; absent for a run recorded without it (an older canaryd's, a recovered one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub due_unix_ms: Option<i64>,
    /// Wall-clock end, Unix ms.
    pub finished_unix_ms: i64,
    /// The verdict in words (`fail: …`).
    pub verdict: String,
    /// The verdict's kind.
    pub verdict_kind: VerdictKind,
    /// Why it is not a pass.
    pub reasons: Vec<String>,
    /// Against the baseline.
    pub trend: Option<Trend>,
    /// The direction a comparison against too thin a baseline found but did not confirm
    /// (`regressed`, `improved`; the trend then reads `insufficient`), from the stored
    /// comparison's `unconfirmed`; absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unconfirmed: Option<Trend>,
    /// What changed in the run's context since its baseline run (`summary.json`'s
    /// `context_changes`); `None` when it was not compared with one.
    pub context_changes: Option<ContextComparison>,
    /// The headline figures; `None` for a run that never started.
    pub figures: Option<Figures>,
    /// The telemetry sources' states in the run.
    pub telemetry_sources: Option<BTreeMap<Source, SourceState>>,
    /// Why it was slow: the diagnosis's class, confidence and reason (`summary.json` has
    /// its evidence); `None` for a run without one.
    pub diagnosis: Option<DiagnosisBrief>,
    /// The run's artifacts folder.
    pub artifacts: PathBuf,
    /// A capacity workload's search: the bracket, the probes and the baseline it met.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity: Option<crate::judge::capacity::CapacityRun>,
    /// A sweep workload's knee, points and the baseline it met.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sweep: Option<crate::judge::knee::SweepRun>,
}

/// A run's headline figures, read from the stored summary under the same names (but
/// `good_request_fraction`, which sits in its `goodput` block).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Figures {
    /// Measured requests.
    pub requests: Option<u64>,
    /// Completed ones.
    pub completed: Option<u64>,
    /// Failed ones.
    pub errors: Option<u64>,
    /// First send to last end, seconds.
    pub duration_s: Option<f64>,
    /// Cut short by a stop signal (not by the run's own limits: `cut`).
    pub interrupted: Option<bool>,
    /// Why the run's own limits stopped it (a run deadline, a target that answered nothing);
    /// absent when they did not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cut: Option<String>,
    /// Share of requests meeting every SLO.
    pub good_request_fraction: Option<f64>,
    /// Client-side TTFT, ms.
    pub time_to_first_token: Option<Quantiles>,
    /// Client-side ITL, ms.
    pub inter_token_latency: Option<Quantiles>,
    /// Client-side request latency, ms.
    pub request_latency: Option<Quantiles>,
    /// Those of the three above that are not exact (`summary.json`'s `receive_timestamps`
    /// say some of their times were a later segment's stamp or canaryd's read): TTFT and
    /// latency upper bounds, ITL exact in neither direction.
    pub bounds: Vec<&'static str>,
}

/// The figures of a brief that can be bounds, as `summary.json` names them.
const BOUND_FIGURES: [&str; 3] = [
    "time_to_first_token",
    "inter_token_latency",
    "request_latency",
];

/// A run's diagnosis in brief, read from its stored summary.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct DiagnosisBrief {
    /// The dominant bottleneck (`queueing`, `kv-memory-bound`, …).
    pub class: String,
    /// `high`, `medium` or `low`.
    pub confidence: String,
    /// The thresholds that fired and where in the run.
    pub why: String,
}

/// The median and 99th percentile of a metric.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct Quantiles {
    /// Median.
    pub p50: Option<f64>,
    /// 99th percentile.
    pub p99: Option<f64>,
}

/// The parts of a stored summary a brief shows, under its names. Listings read them from
/// the stored text ([`SummaryBrief::read`]): every other key (tens of KB: timeslices,
/// per-URL figures, error causes) is skipped unparsed, so none is flattened in here (serde
/// would buffer every other key for it).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct SummaryBrief {
    requests: Option<u64>,
    completed: Option<u64>,
    errors: Option<u64>,
    duration_s: Option<f64>,
    interrupted: Option<bool>,
    cut: Option<String>,
    time_to_first_token: Option<Quantiles>,
    inter_token_latency: Option<Quantiles>,
    request_latency: Option<Quantiles>,
    goodput: Option<Goodput>,
    telemetry_sources: Option<BTreeMap<Source, SourceState>>,
    diagnosis: Option<DiagnosisBrief>,
    context_changes: Option<ContextComparison>,
    /// A block of another shape costs the bounds, not every figure.
    #[serde(deserialize_with = "or_none")]
    receive_timestamps: Option<RxSummary>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
struct Goodput {
    good_request_fraction: Option<f64>,
}

/// `None` for a value of another shape.
fn or_none<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<RxSummary>, D::Error> {
    let v = serde_json::Value::deserialize(d)?;
    Ok(RxSummary::deserialize(v).ok())
}

impl SummaryBrief {
    /// The brief's parts of the stored summary `text` (a listing's read). Text that is not
    /// JSON reads as no summary and JSON not of a summary's shape as an empty one, as the
    /// whole summary parsed does ([`SummaryBrief::of`]).
    pub fn read(text: &str) -> Option<SummaryBrief> {
        // Only an object is a summary (a struct would read an array too, field by field).
        if !text.trim_start().starts_with('{') {
            return serde_json::from_str::<serde::de::IgnoredAny>(text)
                .ok()
                .map(|_| SummaryBrief::default());
        }
        match serde_json::from_str(text) {
            Ok(brief) => Some(brief),
            Err(e) if e.classify() == serde_json::error::Category::Data => Some(Default::default()),
            Err(_) => None,
        }
    }

    /// The brief's parts of a whole summary: one this version cannot read (of another
    /// shape) shows no figures rather than failing the listing or the endpoint.
    pub fn of(summary: &serde_json::Value) -> SummaryBrief {
        if !summary.is_object() {
            return SummaryBrief::default();
        }
        SummaryBrief::deserialize(summary).unwrap_or_default()
    }

    /// The headline figures, and which of them are bounds.
    fn figures(&self) -> Figures {
        // A summary without the block (or with one this version cannot read) says nothing
        // of its times: not known exact, so bounds, as the run's table reads it.
        let rx = self.receive_timestamps.clone().unwrap_or_default().bounds();
        Figures {
            requests: self.requests,
            completed: self.completed,
            errors: self.errors,
            duration_s: self.duration_s,
            interrupted: self.interrupted,
            cut: self.cut.clone(),
            good_request_fraction: self.goodput.as_ref().and_then(|g| g.good_request_fraction),
            time_to_first_token: self.time_to_first_token,
            inter_token_latency: self.inter_token_latency,
            request_latency: self.request_latency,
            bounds: BOUND_FIGURES
                .into_iter()
                .filter(|m| rx.is_bound(m))
                .collect(),
        }
    }
}

impl From<&RunRow> for RunBrief {
    /// A run with its whole summary (just finished, or one run's endpoint).
    fn from(r: &RunRow) -> RunBrief {
        RunBrief::of(r, r.summary.as_ref().map(SummaryBrief::of).as_ref())
    }
}

impl From<&ListedRow> for RunBrief {
    /// A listed run, its summary read as far as a brief goes.
    fn from(r: &ListedRow) -> RunBrief {
        RunBrief::of(r, r.summary.as_ref())
    }
}

impl RunBrief {
    fn of<S>(r: &RunRow<S>, summary: Option<&SummaryBrief>) -> RunBrief {
        RunBrief {
            id: r.run.id.clone(),
            workload: r.run.workload.clone(),
            target: r.run.target.clone(),
            started_unix_ms: r.run.started_unix_ms,
            due_unix_ms: r.run.due_unix_ms,
            finished_unix_ms: r.run.finished_unix_ms,
            verdict: r.run.verdict.to_string(),
            verdict_kind: r.run.verdict.kind,
            reasons: r.run.verdict.reasons.clone(),
            trend: r.trend,
            unconfirmed: r.run.comparison.as_ref().and_then(|c| c.unconfirmed),
            context_changes: summary.and_then(|s| s.context_changes.clone()),
            figures: summary.map(SummaryBrief::figures),
            telemetry_sources: summary.and_then(|s| s.telemetry_sources.clone()),
            diagnosis: summary.and_then(|s| s.diagnosis.clone()),
            artifacts: r.run.artifacts.clone(),
            capacity: r.run.capacity.clone(),
            sweep: r.run.sweep.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::verdict::Verdict;
    use crate::service::history::RunFacts;
    use serde_json::json;

    fn row(summary: Option<serde_json::Value>) -> RunRow {
        RunRow {
            run: RunFacts {
                id: "r1".into(),
                workload: "w".into(),
                target: "t".into(),
                started_unix_ms: 1,
                due_unix_ms: None,
                finished_unix_ms: 2,
                verdict: Verdict {
                    kind: VerdictKind::Pass,
                    reasons: Vec::new(),
                },
                comparison: None,
                artifacts: "/a/r1".into(),
                samples: None,
                capacity: None,
                sweep: None,
                load: None,
            },
            trend: None,
            summary,
        }
    }

    #[test]
    fn figures_and_sources_come_from_the_stored_summary() {
        let summary = json!({
            "requests": 20, "completed": 19, "errors": 1, "duration_s": 3.5,
            "interrupted": false,
            "goodput": {"good_request_fraction": 0.9, "goodput": 5.0},
            "time_to_first_token": {"p50": 12.0, "p99": 40.0, "avg": 15.0},
            "receive_timestamps": {"state": "on", "requests": 19,
                "first_token": {"kernel": 19}, "end": {"kernel": 18, "userspace": 1},
                "token_events": 200, "token_events_bound": 0,
                "clock_map_uncertainty_max_us": 0.5},
            "telemetry_sources": {"nvml": {"state": "unavailable", "reason": "no GPU"}},
            "diagnosis": {"class": "queueing", "confidence": "high", "why": "queue 400 ms",
                          "evidence": [], "findings": []},
        });
        let b = json!(RunBrief::from(&row(Some(summary))));
        assert_eq!(
            b["figures"],
            json!({
                "requests": 20, "completed": 19, "errors": 1, "duration_s": 3.5,
                "interrupted": false, "good_request_fraction": 0.9,
                "time_to_first_token": {"p50": 12.0, "p99": 40.0},
                "inter_token_latency": null, "request_latency": null,
                // One end was canaryd's read: its e2e is a bound, and so is its ITL (over
                // its first token and end; this summary does not count ITLs itself).
                "bounds": ["inter_token_latency", "request_latency"],
            })
        );
        assert_eq!(b["telemetry_sources"]["nvml"]["state"], "unavailable");
        assert_eq!(
            b["diagnosis"],
            json!({"class": "queueing", "confidence": "high", "why": "queue 400 ms"})
        );
        assert_eq!(b["verdict_kind"], "pass");
        // A run that never started has no figures; one this version cannot read shows none.
        assert!(json!(RunBrief::from(&row(None)))["figures"].is_null());
        assert!(json!(RunBrief::from(&row(None)))["diagnosis"].is_null());
        let odd = json!(RunBrief::from(&row(Some(json!({"requests": "many"})))));
        assert!(odd["figures"]["requests"].is_null(), "{odd}");
        // Without receive timestamps (off, or a summary from before them) every client time
        // is canaryd's read; a block of another shape costs the bounds only.
        for rx in [
            json!(null),
            json!({"state": "off", "requests": 0, "first_token": {},
            "token_events": 0, "token_events_bound": 0, "clock_map_uncertainty_max_us": null}),
            json!({"requests": "odd"}),
        ] {
            let b = json!(RunBrief::from(&row(Some(
                json!({"requests": 3, "receive_timestamps": rx})
            ))));
            assert_eq!(b["figures"]["requests"], 3, "{b}");
            assert_eq!(
                b["figures"]["bounds"],
                json!([
                    "time_to_first_token",
                    "inter_token_latency",
                    "request_latency"
                ]),
                "{b}"
            );
        }
    }
}

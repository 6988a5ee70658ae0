//! How a finished run is announced: its verdict's log line and its `verdict.json`, each with
//! the trend and what changed in the run's context since its baseline run.

use crate::config::Config;
use crate::service::run_result::RunResult;
use anyhow::{Context, Result};

/// The run's verdict and trend, in the log: `info` for a pass, `warn` otherwise.
pub(super) fn log_verdict(config: &Config, workload: &str, result: &RunResult) {
    let trend = result.run.comparison.as_ref().map(|c| c.trend.as_str());
    // The figures the verdict rests on and the bars they met or missed, so the log line says
    // more than `pass`.
    let w = config.workloads.iter().find(|w| w.name == workload);
    let figures = match (&result.run.capacity, &result.run.sweep) {
        (Some(c), _) => Some(capacity_figures(c)),
        (None, Some(s)) => Some(sweep_figures(s)),
        (None, None) => result
            .outcome
            .as_ref()
            .zip(w)
            .map(|(o, w)| crate::judge::verdict::Criteria::of(w).figures(&o.summary)),
    };
    // What changed in the context since the baseline run: a regression's likely cause.
    let changed = result
        .outcome
        .as_ref()
        .and_then(|o| o.context_changes.as_ref())
        .filter(|c| !c.changes.is_empty());
    let line = format!(
        "{}: {}{}{}{}",
        result.run.id,
        result.run.verdict,
        figures.map(|f| format!(" [{f}]")).unwrap_or_default(),
        trend
            .map(|t| format!("; baseline: {t}"))
            .unwrap_or_default(),
        changed.map(|c| format!("; {c}")).unwrap_or_default()
    );
    match result.run.verdict.kind {
        crate::judge::verdict::VerdictKind::Pass => {
            tracing::info!(workload = %workload, "{line}")
        }
        _ => tracing::warn!(workload = %workload, "{line}"),
    }
}

/// `capacity at SLO 100 req/s, a bound: at least 100, below 125; 5 probes; baseline 100 ±
/// 12 over 1 runs`.
fn capacity_figures(c: &crate::judge::capacity::CapacityRun) -> String {
    use crate::judge::capacity::{rate, rate_at_least, rate_below};
    let f = &c.found;
    let bracket = match (f.max_passing_rate, f.min_failing_rate) {
        (Some(p), Some(b)) => format!(
            "capacity at SLO {} req/s, a bound: at least {}, below {}",
            rate_at_least(p),
            rate_at_least(p),
            rate_below(b)
        ),
        (Some(p), None) => format!(
            "capacity at SLO at least {} req/s (no rate failed)",
            rate_at_least(p)
        ),
        (None, Some(b)) => format!(
            "capacity at SLO below {} req/s (no rate passed)",
            rate_below(b)
        ),
        (None, None) => "capacity at SLO unknown (no probe ran)".into(),
    };
    let baseline = match &c.baseline {
        Some(b) => format!(
            "; baseline {} ± {} over {} runs",
            rate(b.capacity),
            rate(b.spread),
            b.runs
        ),
        None => "; no baseline yet".into(),
    };
    format!(
        "{bracket}; {} probes, stopped by {}{baseline}",
        c.probes.len(),
        f.stopped_by
    )
}

/// `knee at c8: 107 req/s; 3 points; baseline 107 ± 1 over 2 runs`.
fn sweep_figures(s: &crate::judge::knee::SweepRun) -> String {
    use crate::judge::capacity::{rate, rate_at_least};
    let knee = match &s.knee {
        Some(k) => format!("knee at {}: {} req/s", k.label, rate(k.request_throughput)),
        None => "no knee (the series did not saturate)".into(),
    };
    let capacity = s
        .capacity
        .as_ref()
        .and_then(|c| c.max_passing_rate)
        .map(|p| format!("; capacity at SLO at least {} req/s", rate_at_least(p)))
        .unwrap_or_default();
    let baseline = match &s.baseline {
        Some(b) => format!(
            "; baseline {} ± {} over {} runs",
            rate(b.knee),
            rate(b.spread),
            b.runs
        ),
        None => "; no baseline yet".into(),
    };
    format!("{knee}{capacity}; {} points{baseline}", s.points.len())
}

/// Writes the run's `verdict.json` into its artifacts folder.
pub(super) fn write_verdict(result: &RunResult) -> Result<()> {
    std::fs::create_dir_all(&result.run.artifacts)
        .with_context(|| format!("creating {}", result.run.artifacts.display()))?;
    let verdict = serde_json::json!({
        "id": result.run.id,
        "workload": result.run.workload,
        "target": result.run.target,
        "verdict": result.run.verdict.to_string(),
        "verdict_kind": result.run.verdict.kind,
        "reasons": result.run.verdict.reasons,
        "trend": result.run.comparison.as_ref().map(|c| c.trend.as_str()),
        "comparison": result.run.comparison,
        "capacity": result.run.capacity,
        "sweep": result.run.sweep,
        "context_changes": result.outcome.as_ref().and_then(|o| o.context_changes.as_ref()),
        "started_unix_ms": result.run.started_unix_ms,
        "finished_unix_ms": result.run.finished_unix_ms,
    });
    // Whole or not at all: recovery takes a readable verdict.json as the run settled.
    let path = result.run.artifacts.join("verdict.json");
    canary_files::write_whole(&path, &serde_json::to_vec_pretty(&verdict)?)
        .with_context(|| format!("writing {}", path.display()))
}

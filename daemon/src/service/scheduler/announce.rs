//! How a finished run is announced: its verdict's log line and its `verdict.json`, each with
//! the trend and what changed in the run's context since its baseline run.

use crate::config::Config;
use crate::service::run_result::RunResult;
use anyhow::{Context, Result};

/// The run's verdict and trend, in the log: `info` for a pass, `warn` otherwise.
pub(super) fn log_verdict(config: &Config, workload: &str, result: &RunResult) {
    // With what an `insufficient` holds back, and what a trend rests on when its reference
    // runs measure no run-to-run variation.
    let trend = result.run.comparison.as_ref().map(|c| c.said());
    // The figures the verdict rests on and the bars they met or missed, so the log line says
    // more than `pass`.
    let w = config.workloads.iter().find(|w| w.name == workload);
    let passed = result.run.verdict.kind == crate::judge::verdict::VerdictKind::Pass;
    let figures = match (&result.run.capacity, &result.run.sweep) {
        (Some(c), _) => Some(capacity_figures(c, passed)),
        (None, Some(s)) => Some(sweep_figures(s, passed)),
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
    let new_load = result
        .run
        .comparison
        .as_ref()
        .and_then(|c| c.new_load.as_deref());
    let line = format!(
        "{}: {}{}{}{}{}",
        result.run.id,
        result.run.verdict,
        figures.map(|f| format!(" [{f}]")).unwrap_or_default(),
        trend
            .map(|t| format!("; baseline: {t}"))
            .unwrap_or_default(),
        new_load.map(|n| format!("; {n}")).unwrap_or_default(),
        changed.map(|c| format!("; {c}")).unwrap_or_default()
    );
    match result.run.verdict.kind {
        crate::judge::verdict::VerdictKind::Pass => {
            tracing::info!(workload = %workload, "{line}")
        }
        _ => tracing::warn!(workload = %workload, "{line}"),
    }
}

/// What the log says of a run's baseline: the one it was compared with, or why none was.
/// Only a passing run is compared (the scheduler's rule), so a run that failed, erred or was
/// interrupted without one is not waiting for a baseline: it said "no baseline yet" beside a
/// three-run baseline.
/// A baseline that started again for a new load says so, and what changed.
fn baseline_said(
    baseline: Option<(f64, f64, usize)>,
    passed: bool,
    new_load: Option<&str>,
) -> String {
    use crate::judge::capacity::rate;
    match baseline {
        Some((figure, spread, runs)) => format!(
            "; baseline {} ± {} over {runs} runs",
            rate(figure),
            rate(spread)
        ),
        None if !passed => "; not compared with the baseline (only a passing run is)".into(),
        None => match new_load {
            Some(n) => format!("; {n}"),
            None => "; no baseline yet".into(),
        },
    }
}

/// `capacity at SLO 100 req/s, a bound: at least 100, below 125; 5 probes, stopped by
/// precision; baseline 100 ± 12 over 1 runs`. A probe a signal cut short is not in the
/// bracket, and is counted apart: `interrupted during probe 1, none finished`.
fn capacity_figures(c: &crate::judge::capacity::CapacityRun, passed: bool) -> String {
    use crate::judge::capacity::{rate_at_least, rate_below};
    let f = &c.found;
    let finished = c.probes.iter().filter(|p| !p.interrupted).count();
    let cut = c.probes.len() - finished;
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
        (None, None) if c.probes.is_empty() => "capacity at SLO unknown (no probe ran)".into(),
        (None, None) => "capacity at SLO unknown (no probe finished)".into(),
    };
    let finished_said = match finished {
        0 => "none".to_string(),
        n => n.to_string(),
    };
    let probes = if cut > 0 {
        format!(
            "interrupted during probe {}, {finished_said} finished",
            c.probes.len()
        )
    } else if f.stopped_by == "interrupted" && finished == 0 {
        "interrupted before the first probe".into()
    } else if f.stopped_by == "interrupted" {
        format!("interrupted after {finished} probes")
    } else {
        format!("{finished} probes, stopped by {}", f.stopped_by)
    };
    let baseline = c.baseline.as_ref().map(|b| (b.capacity, b.spread, b.runs));
    // An end whose probe's pass or fail rests on goodput judgements made on bounds, by its
    // verdict: the bracket holds as decided, but that end is not established.
    let mut on_bounds = f.clone();
    on_bounds.note_bounds(
        c.probes
            .iter()
            .filter(|p| !p.interrupted)
            .map(|p| (p.rate, p.verdict.as_str())),
    );
    format!(
        "{bracket}{}; {probes}{}",
        on_bounds.bounds_said(),
        baseline_said(baseline, passed, c.new_load.as_deref())
    )
}

/// `knee at c8: 107 req/s; 3 points; baseline 107 ± 1 over 2 runs`; without a knee, why in
/// the sweep's own words ([`crate::judge::knee::SweepRun::knee_said`]: points left out, too
/// few that are evidence, points not run), "did not saturate" only of a series that showed it.
fn sweep_figures(s: &crate::judge::knee::SweepRun, passed: bool) -> String {
    use crate::judge::capacity::rate_at_least;
    let knee = s.knee_said();
    let capacity = match s.capacity.as_ref() {
        Some(c) => match c.max_passing_rate {
            Some(p) => format!("; capacity at SLO at least {} req/s", rate_at_least(p)),
            None => "; capacity at SLO: no rate passed".into(),
        },
        None => String::new(),
    };
    let baseline = s.baseline.as_ref().map(|b| (b.knee, b.spread, b.runs));
    format!(
        "{knee}{capacity}; {} points{}",
        s.points.len(),
        baseline_said(baseline, passed, s.new_load.as_deref())
    )
}

/// Writes the run's `verdict.json` into its artifacts folder.
pub(super) fn write_verdict(result: &RunResult, waits: Option<super::Waits>) -> Result<()> {
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
        // The load its baseline is of: a run recorded from this file at a restart (the
        // history could not be written) joins the baseline of its load.
        "load": result.run.load,
        "context_changes": result.outcome.as_ref().and_then(|o| o.context_changes.as_ref()),
        "started_unix_ms": result.run.started_unix_ms,
        "finished_unix_ms": result.run.finished_unix_ms,
        // The time its schedule had it due (before jitter and waits, Unix ms): a restart
        // resumes the cadence from it; null for a run no cadence started.
        "due_unix_ms": result.run.due_unix_ms,
        // How long the run waited for its turn on its servers before it started (measured,
        // ms; 0: none was held); null for a run recovered at start.
        "turn_wait_ms": waits.map(|w| w.turn.as_secs_f64() * 1000.0),
        // How long after its tick (due time plus jitter) it started because its previous
        // run was still going (on_overrun = "start_when_free"; measured on the monotonic
        // clock, ms, before any turn wait); null when it did not wait so.
        "start_late_ms": waits.and_then(|w| w.late).map(|d| d.as_secs_f64() * 1000.0),
    });
    // Whole or not at all: recovery takes a readable verdict.json as the run settled.
    let path = result.run.artifacts.join("verdict.json");
    canary_files::write_whole(&path, &serde_json::to_vec_pretty(&verdict)?)
        .with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capacity::Capacity;
    use crate::judge::capacity::{CapacityProbe, CapacityRun};
    use crate::judge::knee::{SweepPointRow, SweepRun};
    use canary_core::RateBracket;

    fn capacity(bracket: RateBracket, stopped_by: &str, probes: &[(f64, bool)]) -> CapacityRun {
        CapacityRun {
            found: Capacity::of(bracket, "time_to_first_token:100".into(), 0.95, stopped_by),
            probes: probes
                .iter()
                .map(|&(rate, interrupted)| CapacityProbe {
                    rate,
                    passed: false,
                    verdict: if interrupted {
                        "error: interrupted"
                    } else {
                        "fail: …"
                    }
                    .into(),
                    interrupted,
                })
                .collect(),
            baseline: None,
            new_load: None,
            load: None,
        }
    }

    /// A SIGTERM during the first probe was logged "capacity at SLO unknown (no probe ran); 1
    /// probes, stopped by interrupted; no baseline yet", though a probe ran and a baseline
    /// existed; an interrupted sweep said "no baseline yet" and "the series did not saturate".
    #[test]
    fn an_interrupted_run_is_logged_as_what_happened() {
        let none = RateBracket {
            passed: None,
            failed: None,
        };
        let line = capacity_figures(&capacity(none, "interrupted", &[(50.0, true)]), false);
        assert_eq!(
            line,
            "capacity at SLO unknown (no probe finished); interrupted during probe 1, none \
             finished; not compared with the baseline (only a passing run is)"
        );
        let some = RateBracket {
            passed: Some(50.0),
            failed: None,
        };
        let line = capacity_figures(
            &capacity(some, "interrupted", &[(50.0, false), (100.0, true)]),
            false,
        );
        assert!(line.ends_with("; interrupted during probe 2, 1 finished; not compared with the baseline (only a passing run is)"), "{line}");
        let line = capacity_figures(&capacity(none, "interrupted", &[]), false);
        assert!(
            line.starts_with(
                "capacity at SLO unknown (no probe ran); interrupted before the first probe;"
            ),
            "{line}"
        );
        // A finished search is logged as before.
        let line = capacity_figures(&capacity(some, "max_runs", &[(50.0, false)]), true);
        assert!(
            line.ends_with("; 1 probes, stopped by max_runs; no baseline yet"),
            "{line}"
        );
        // Audit 2b: its failing end's probe rests on goodput judged on bounds: said.
        let both = RateBracket {
            passed: Some(50.0),
            failed: Some(100.0),
        };
        let mut run = capacity(both, "max_runs", &[(50.0, false), (100.0, false)]);
        run.probes[1].verdict = "fail: good-request fraction 0.816 below min_good_fraction \
                                 0.9 (time_to_first_token: 295 missed), which rests on bounds: \
                                 up to 98.8 % may be good (276 judgements rest on a bound; \
                                 truly good 1306 to 1582 of 1601)"
            .into();
        let line = capacity_figures(&run, true);
        assert!(
            line.starts_with(
                "capacity at SLO 50 req/s, a bound: at least 50, below 100; not established: \
                 the fail at 100 req/s rests on bounds: up to 98.8 % may be good (276 \
                 judgements rest on a bound; truly good 1306 to 1582 of 1601); 2 probes"
            ),
            "{line}"
        );

        // A sweep a signal stopped after its first point: which never ran, not "did not
        // saturate" (it was, when the run failed for another reason than its points).
        let row = |label: &str, value| SweepPointRow {
            label: label.into(),
            value,
            verdict: "pass".into(),
            request_throughput: Some(10.0),
            ttft_p99_ms: Some(20.0),
        };
        let mut sweep = SweepRun {
            axis: crate::cli::sweep::point::Axis::Concurrency,
            knee: None,
            knee_rule: crate::judge::knee::KNEE_RULE,
            left_out: Vec::new(),
            interrupted: true,
            not_run: vec!["c8".into(), "c32".into()],
            capacity: None,
            points: vec![row("c2", 2.0)],
            baseline: None,
            new_load: None,
        };
        assert_eq!(
            sweep_figures(&sweep, false),
            "no knee: 1 of the 1 points is evidence, and a knee is a step between two; not \
             run: c8, c32 (a signal stopped the sweep); 1 points; not compared with the \
             baseline (only a passing run is)"
        );
        sweep.points.push(row("c8", 8.0));
        sweep.not_run = vec!["c32".into()];
        assert_eq!(
            sweep_figures(&sweep, false),
            "no knee among the 2 points run; not run: c32 (a signal stopped the sweep); 2 \
             points; not compared with the baseline (only a passing run is)"
        );
        // Every point ran and is evidence: that series did not saturate, failed or not.
        sweep.points.push(row("c32", 32.0));
        (sweep.interrupted, sweep.not_run) = (false, Vec::new());
        for passed in [true, false] {
            let line = sweep_figures(&sweep, passed);
            assert!(
                line.starts_with("no knee: the series did not saturate (no step in load"),
                "{line}"
            );
        }
    }

    /// A series whose loaded points failed at the target was logged "no knee (the series did
    /// not saturate)": the knee had left those points out. It names them instead.
    #[test]
    fn a_sweep_with_points_left_out_never_reads_as_not_saturated() {
        use crate::cli::sweep::point::{Exclusion, LeftOut};
        let row = |label: &str, value| SweepPointRow {
            label: label.into(),
            value,
            verdict: "pass".into(),
            request_throughput: Some(10.0),
            ttft_p99_ms: Some(20.0),
        };
        let mut sweep = SweepRun {
            axis: crate::cli::sweep::point::Axis::Concurrency,
            knee: None,
            knee_rule: crate::judge::knee::KNEE_RULE,
            left_out: vec![
                LeftOut {
                    label: "c16".into(),
                    value: 16.0,
                    why: Exclusion::TargetErrors,
                    error_rate: Some(0.2),
                    missing: None,
                },
                LeftOut {
                    label: "c64".into(),
                    value: 64.0,
                    why: Exclusion::Capped,
                    error_rate: None,
                    missing: None,
                },
            ],
            interrupted: false,
            not_run: Vec::new(),
            capacity: None,
            points: vec![
                row("c1", 1.0),
                row("c4", 4.0),
                row("c16", 16.0),
                row("c64", 64.0),
            ],
            baseline: None,
            new_load: None,
        };
        let line = sweep_figures(&sweep, true);
        assert_eq!(
            line,
            "no knee among the 2 points that are evidence; left out: c16 (20.0% of its requests \
             failed at the target), c64 (capped by the open-file limit); 4 points; no baseline \
             yet"
        );
        sweep.knee = Some(crate::judge::knee::SweepKnee {
            label: "c4".into(),
            value: 4.0,
            request_throughput: 10.0,
        });
        let line = sweep_figures(&sweep, true);
        assert!(
            line.starts_with(
                "knee at c4: 10 req/s among the 2 points that are evidence; left out: c16"
            ),
            "{line}"
        );
    }
}

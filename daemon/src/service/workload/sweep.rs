//! One run of a `kind = "sweep"` workload: a run of the workload's load per value of the
//! sweep's axis, each through the one run function ([`RunContext::replay`], as a capacity
//! probe) into its own folder (`<run>/point-NN-<label>/`), each made a sweep point by
//! `canaryd sweep`'s own code ([`Point::of_run`]) and the whole by its [`SweepDoc`] (the
//! knee and the Pareto front, `sweep.json` and `sweep.csv` in the run's folder). The run's
//! summary is the knee point's (the last point's when there is no knee); its verdict is
//! `error` when a point could not run or errored, or its limits cut it (its run deadline, a
//! target that answered nothing: that error, naming the point; not `interrupted`), `fail` when a point's target errors were
//! over the workload's `max_error_rate` (as a latency run's are) or, over request rates with
//! SLOs, no rate passed (as a capacity search's), else `pass` until the scheduler compares the
//! knee with the baseline ([`crate::judge::knee`]).

use super::{RunContext, RunIds};
use crate::capacity::Capacity;
use crate::cli::sweep::document::SweepDoc;
use crate::cli::sweep::point::{Axis, Exclusion, Point, EVIDENCE_MAX_ERROR_RATE};
use crate::config::shape::Synthetic;
use crate::config::{Config, SweepSpec, Workload};
use crate::judge::knee::{SweepKnee, SweepPointRow, SweepRun};
use crate::judge::verdict::{Verdict, VerdictKind};
use crate::service::run_result::RunResult;
use anyhow::{bail, Result};
use canary_core::{RateBracket, RunOutcome};
use canary_replay::Progress;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// `w` with the point's value of `axis` set, as `canaryd sweep` sets its flag per point.
fn point_workload(w: &Workload, axis: Axis, value: f64, index: usize) -> Result<Workload> {
    let mut w = w.clone();
    if index > 1 {
        // The run's start instant is the first point's; later points follow their cooldown.
        w.start_at = None;
    }
    match axis {
        Axis::Concurrency => {
            w.concurrency = Some(value as usize);
            if let Some(Synthetic::ClosedLoop(c)) = &mut w.synthetic {
                c.users = value as usize;
            }
        }
        Axis::RequestRate => match &mut w.synthetic {
            Some(Synthetic::Rate(plan)) => plan.rate = value,
            _ => bail!(
                "workloads.{}: sweep_request_rate needs request_rate",
                w.name
            ),
        },
        Axis::Speedup => w.speedup = value,
    }
    Ok(w)
}

/// What every point of one sweep run shares.
struct Sweeper<'a> {
    ctx: &'a RunContext,
    config: &'a Config,
    w: &'a Workload,
    spec: &'a SweepSpec,
    /// The sweep run's id and folder.
    run_id: String,
    artifacts: std::path::PathBuf,
    shutdown: &'a CancellationToken,
    progress: &'a Arc<Progress>,
}

impl Sweeper<'_> {
    /// Runs point `index` (from 1) at `value`: its sweep point, outcome, load
    /// ([`crate::judge::load::of_plan`]) and why its limits cut it (a run deadline, a target
    /// that answered nothing; [`crate::execute::Judged::cut`]); `Err` only when it could not
    /// run. A point that ran and failed ([`Point::failed`]) is returned, for `sweep.json` to
    /// keep its figures.
    async fn run_point(&self, index: usize, value: f64) -> Result<PointRun> {
        let (w, spec) = (self.w, self.spec);
        let label = spec.axis.label(value);
        let dir_name = format!("point-{index:02}-{label}");
        let pw = point_workload(w, spec.axis, value, index)?;
        let run_id = format!("{}-p{index:02}", self.run_id);
        let dir = self.artifacts.join(&dir_name);
        let ids = RunIds {
            run: &run_id,
            export: &self.run_id,
            artifacts: &dir,
        };
        let (judged, _) = self
            .ctx
            .replay(
                self.config,
                &pw,
                ids,
                None,
                self.shutdown.clone(),
                self.progress.clone(),
            )
            .await?;
        let mut point = Point::of_run(index, label, value, dir_name, Some(&judged), spec.gpus);
        if spec.axis == Axis::RequestRate && !w.slos.is_empty() {
            // Its verdict bounds the capacity at the SLO (`capacity_of`), as a probe's does.
            point.require_rate_held();
        }
        let cut = judged.cut.clone();
        if cut.is_none() && index == 1 && super::measured_nothing(&judged.outcome) {
            // The sweep never started (see [`run`]): no point to speak of.
            return Ok((point, judged.outcome, None, None));
        }
        tracing::info!(
            workload = %w.name,
            run = %self.run_id,
            "sweep point {index} ({}): {}, {} req/s completed",
            point.label,
            point.verdict,
            point
                .figures
                .as_ref()
                .and_then(|f| f.request_throughput)
                .map_or("no".into(), crate::judge::capacity::rate)
        );
        let load = judged.info.plan.as_ref().map(crate::judge::load::of_plan);
        Ok((point, judged.outcome, load, cut))
    }
}

/// One point's run: its sweep point, outcome, load and cut ([`Sweeper::run_point`]).
type PointRun = (Point, RunOutcome, Option<serde_json::Value>, Option<String>);

/// Over request rates: the highest passing rate and the lowest failing one above it, as a
/// capacity search's answer (its bracket holds as far as each point's verdict does).
fn capacity_of(w: &Workload, axis: Axis, points: &[Point]) -> Option<Capacity> {
    if axis != Axis::RequestRate || w.slos.is_empty() {
        return None;
    }
    Some(Capacity::of(
        bracket(points),
        w.slos.to_string(),
        w.min_good_fraction,
        "sweep",
    ))
}

/// Why a sweep whose every point ran fails by itself, before any baseline: points whose
/// target error rate was over the workload's `max_error_rate` (the rule a latency run meets;
/// past 5 % the knee left them out too, so a server failing under load read "no knee"), and,
/// over request rates with SLOs, no rate that passed (the rule a capacity search meets).
fn own_failures(w: &Workload, points: &[Point], capacity: Option<&Capacity>) -> Vec<String> {
    let mut reasons = Vec::new();
    let over: Vec<&Point> = points
        .iter()
        .filter(|p| !p.cut_short)
        .filter(|p| {
            let rate = p.figures.as_ref().and_then(|f| f.error_rate);
            rate.is_some_and(|r| r > w.max_error_rate)
        })
        .collect();
    if !over.is_empty() {
        let at: Vec<String> = over
            .iter()
            .map(|p| {
                let rate = p.figures.as_ref().and_then(|f| f.error_rate).unwrap_or(0.0);
                format!("{} ({rate:.3})", p.label)
            })
            .collect();
        let left: Vec<&str> = over
            .iter()
            .filter(|p| p.exclusion() == Some(Exclusion::TargetErrors))
            .map(|p| p.label.as_str())
            .collect();
        let left = match left.is_empty() {
            true => String::new(),
            false => format!(
                "; left out of the knee (over {:.0}% errors): {}",
                EVIDENCE_MAX_ERROR_RATE * 100.0,
                left.join(", ")
            ),
        };
        reasons.push(format!(
            "error rate above max_error_rate {} at {}{left}",
            w.max_error_rate,
            at.join(", ")
        ));
    }
    if let Some(c) = capacity.filter(|c| c.max_passing_rate.is_none()) {
        let tried: Vec<f64> = points
            .iter()
            .filter(|p| !p.cut_short)
            .map(|p| p.value)
            .collect();
        reasons.push(match tried.iter().copied().min_by(f64::total_cmp) {
            None => format!("capacity at SLO: no rate passed {} (no point ran)", c.slo),
            Some(lowest) => format!(
                "capacity at SLO: no rate passed {}: below {} req/s, the lowest rate swept ({} \
                 points)",
                c.slo,
                crate::judge::capacity::rate_below(lowest),
                tried.len()
            ),
        });
    }
    reasons
}

/// The highest passing value of `points`, and the lowest failing one above it (any failing
/// one when none passed); a point a signal cut short, or whose verdict is an error
/// (canaryd's own limits, nothing completed: not the target failing the SLOs, as a search's
/// probe), neither passed nor failed.
fn bracket(points: &[Point]) -> RateBracket {
    let points: Vec<&Point> = points
        .iter()
        .filter(|p| !p.cut_short && !p.errored)
        .collect();
    let passed = points
        .iter()
        .filter(|p| p.passed)
        .map(|p| p.value)
        .max_by(f64::total_cmp);
    let failed = points
        .iter()
        .filter(|p| !p.passed && passed.is_none_or(|best| p.value > best))
        .map(|p| p.value)
        .min_by(f64::total_cmp);
    RateBracket { passed, failed }
}

/// Runs the sweep of `w` into `result`: its points, knee, summary and verdict. `Some(when)`
/// when a stop came before its first point measured a request (while loading its trace,
/// during its warm-up, before its first request): the sweep never started, a skip as a
/// latency run's ([`crate::service::run_result::Ran::NotStarted`]); `result` is then left
/// without a verdict and nothing is written.
pub(super) async fn run(
    ctx: &RunContext,
    config: &Config,
    w: &Workload,
    spec: &SweepSpec,
    result: &mut RunResult,
    shutdown: CancellationToken,
    progress: Arc<Progress>,
) -> Option<&'static str> {
    let sweeper = Sweeper {
        ctx,
        config,
        w,
        spec,
        run_id: result.run.id.clone(),
        artifacts: result.run.artifacts.clone(),
        shutdown: &shutdown,
        progress: &progress,
    };
    let mut points = Vec::new();
    let mut outcomes = Vec::new();
    let mut failed = None;
    let mut load = None;
    // When a stop cut the first point before it measured a request.
    let mut stopped_before = None;
    for (i, &v) in spec.values.iter().enumerate() {
        if i > 0 && !spec.cooldown.is_zero() {
            tokio::select! {
                _ = tokio::time::sleep(spec.cooldown) => {}
                _ = shutdown.cancelled() => {}
            }
        }
        if shutdown.is_cancelled() {
            break;
        }
        match sweeper.run_point(i + 1, v).await {
            Ok((_, outcome, _, None)) if i == 0 && super::measured_nothing(&outcome) => {
                stopped_before = Some(super::stopped_before_measuring(w));
                break;
            }
            Err(e) if e.is::<super::StoppedLoading>() => {
                // A later point's load a stop caught measured nothing: the sweep stops there,
                // interrupted, with the points before it.
                stopped_before = Some(super::STOPPED_LOADING);
                break;
            }
            Ok((point, outcome, point_load, cut)) => {
                // Every point's load is the first's but for the axis.
                if load.is_none() {
                    load = point_load
                        .map(|l| crate::judge::load::of_sweep(l, spec.axis, &spec.values));
                }
                // A point its limits cut (a run deadline, a target that answered nothing) is
                // no signal's interruption: the sweep ends there with that error, naming the
                // point, its figures kept (a first point that measured nothing too: an error,
                // not a skip).
                let interrupted = outcome.interrupted && cut.is_none();
                // A failed point stops the sweep, its figures kept (as `canaryd sweep` keeps
                // them); those after it are `not_run`.
                let point_failed = match &cut {
                    Some(why) => Some(anyhow::anyhow!(
                        "{why} (at the point {}, {} of {})",
                        point.label,
                        i + 1,
                        spec.values.len()
                    )),
                    None => point
                        .failed()
                        .then(|| anyhow::anyhow!("the point {}: {}", point.label, point.verdict)),
                };
                points.push(point);
                outcomes.push(outcome);
                if interrupted {
                    break;
                }
                if let Some(e) = point_failed {
                    failed = Some(e);
                    break;
                }
            }
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    // A point its limits cut ended the sweep as `failed`, not interrupted: its outcome's
    // `interrupted` says its replay was stopped, which no signal did.
    let ended_by_error = failed.is_some() && !shutdown.is_cancelled();
    let interrupted = stopped_before.is_some()
        || shutdown.is_cancelled()
        || (!ended_by_error && outcomes.iter().any(|o| o.interrupted));
    if interrupted && outcomes.is_empty() && failed.is_none() {
        // Stopped before its first point measured a request (or began at all).
        return Some(stopped_before.unwrap_or("before its first request"));
    }
    let mut doc = SweepDoc::new("sweep", spec.axis, points);
    doc.ended(interrupted, &spec.values);
    if let Err(e) = std::fs::create_dir_all(&result.run.artifacts)
        .map_err(anyhow::Error::from)
        .and_then(|_| doc.write(&result.run.artifacts))
    {
        tracing::error!(workload = %w.name, "writing sweep.json: {e:#}");
    }
    let knee_at = doc.points.iter().position(|p| p.knee);
    let knee = knee_at.and_then(|k| {
        let p = &doc.points[k];
        Some(SweepKnee {
            label: p.label.clone(),
            value: p.value,
            request_throughput: p.figures.as_ref()?.request_throughput?,
        })
    });
    let capacity = capacity_of(w, spec.axis, &doc.points);
    let own = own_failures(w, &doc.points, capacity.as_ref());
    result.run.verdict = if interrupted {
        Verdict::interrupted()
    } else if let Some(e) = &failed {
        Verdict::error(format!("{e:#}"))
    } else {
        Verdict {
            kind: match own.is_empty() {
                true => VerdictKind::Pass,
                false => VerdictKind::Fail,
            },
            reasons: own,
        }
    };
    let rows = doc
        .points
        .iter()
        .map(|p| SweepPointRow {
            label: p.label.clone(),
            value: p.value,
            verdict: p.verdict.clone(),
            request_throughput: p.figures.as_ref().and_then(|f| f.request_throughput),
            ttft_p99_ms: p
                .figures
                .as_ref()
                .and_then(|f| f.time_to_first_token_ms.p99),
        })
        .collect();
    let summary_at = knee_at.unwrap_or(outcomes.len().saturating_sub(1));
    result.outcome = (summary_at < outcomes.len()).then(|| outcomes.swap_remove(summary_at));
    result.run.load = load;
    result.run.sweep = Some(SweepRun {
        axis: spec.axis,
        knee,
        knee_rule: crate::judge::knee::KNEE_RULE,
        left_out: doc.left_out.clone(),
        interrupted: doc.interrupted,
        not_run: doc.not_run.clone(),
        capacity,
        points: rows,
        baseline: None,
        new_load: None,
    });
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(value: f64, passed: bool) -> Point {
        Point {
            index: 0,
            label: Axis::RequestRate.label(value),
            value,
            dir: String::new(),
            verdict: String::new(),
            passed,
            figures: None,
            repeats: None,
            knee: false,
            pareto: false,
            capped: false,
            cut_short: false,
            errored: false,
            rate_not_held: None,
            notes: Vec::new(),
        }
    }

    #[test]
    fn a_rate_sweep_brackets_the_capacity_between_its_last_pass_and_the_next_fail() {
        // Run order is not rate order; a fail below a pass (noise) does not bound it.
        let pts = [
            point(80.0, true),
            point(40.0, false),
            point(160.0, false),
            point(120.0, true),
            point(140.0, false),
        ];
        let b = bracket(&pts);
        assert_eq!((b.passed, b.failed), (Some(120.0), Some(140.0)));
        let b = bracket(&[point(10.0, false), point(20.0, false)]);
        assert_eq!((b.passed, b.failed), (None, Some(10.0)));
        let b = bracket(&[point(10.0, true), point(20.0, true)]);
        assert_eq!((b.passed, b.failed), (Some(20.0), None));
        // A point a signal cut short is neither.
        let mut cut = point(30.0, false);
        cut.cut_short = true;
        let b = bracket(&[point(10.0, true), point(20.0, true), cut]);
        assert_eq!((b.passed, b.failed), (Some(20.0), None));
        // Nor is one whose verdict is an error (the sweep stopped there, its figures kept).
        let mut errored = point(30.0, false);
        errored.errored = true;
        let b = bracket(&[point(10.0, true), errored]);
        assert_eq!((b.passed, b.failed), (Some(10.0), None));
    }
}

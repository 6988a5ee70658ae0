//! Running the points: each a plan of `canaryd profile`'s flags with the axis set, run through
//! the one run function into its own folder, with a cooldown between points.

use super::document::{Capacity, SweepDoc};
use super::point::{Axis, Point, PointFigures};
use super::{table, SweepArgs, NO_PASSING_RATE, POINT_FAILED};
use crate::cli::profile::ProfileArgs;
use crate::cli::replay::flag;
use crate::cli::report::ProgressDisplay;
use crate::execute::{execute, run_labels, ExportFuture, Front, Judged};
use crate::judge::verdict::{Criteria, Verdict, VerdictKind};
use anyhow::{bail, Context, Result};
use canary_core::{Observer, RateSearch, RunOutcome};
use canary_exporters::{OtlpExporter, RunLabels};
use canary_replay::{Plan, Setting};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// A point judged by the sweep's gates, exported over OTLP when an endpoint is configured
/// (as `canaryd profile` exports a run: each point is a run of its own, with its run id).
struct PointFront {
    criteria: Criteria,
    exporter: Mutex<Option<OtlpExporter>>,
    labels: RunLabels,
    flush_timeout: Duration,
}

impl Front for PointFront {
    fn spell(&self, setting: Setting) -> String {
        flag(setting)
    }

    fn observers(&self) -> Vec<Arc<dyn Observer>> {
        let exporter = self.exporter.lock().unwrap();
        exporter
            .iter()
            .map(|e| Arc::new(e.run_observer(self.labels.clone())) as Arc<dyn Observer>)
            .collect()
    }

    fn judge(&self, outcome: &RunOutcome) -> Option<Verdict> {
        Some(Verdict::judge_by(
            &self.criteria,
            &outcome.summary,
            outcome.interrupted,
        ))
    }

    fn export<'a>(&'a self, run: &'a Judged) -> ExportFuture<'a> {
        Box::pin(async move {
            let exporter = self.exporter.lock().unwrap().take();
            if let Some(e) = exporter {
                crate::cli::otlp_flags::finish(
                    e,
                    self.labels.clone(),
                    &run.outcome,
                    self.flush_timeout,
                )
                .await;
            }
        })
    }
}

/// One point's run: its entry in `sweep.json`, and whether a signal stopped it.
struct PointRun {
    point: Point,
    interrupted: bool,
}

/// `base` with the values every point shares (a list of one) and the point's own.
fn point_args(args: &SweepArgs, axis: Axis, value: f64, dir: &Path) -> ProfileArgs {
    let s = &args.sweep;
    let mut p = args.profile.clone();
    if let [c] = s.concurrency[..] {
        p.shape.concurrency = Some(c);
    }
    if let [r] = s.request_rate[..] {
        p.request_rate = Some(r);
    }
    if let [x] = s.speedup[..] {
        p.shape.speedup = x;
    }
    match axis {
        Axis::Concurrency => p.shape.concurrency = Some(value as usize),
        Axis::RequestRate => p.request_rate = Some(value),
        Axis::Speedup => p.shape.speedup = value,
    }
    p.shape.output_dir = dir.to_path_buf();
    // The sweep owns its folder: --overwrite was checked for it as a whole.
    p.shape.overwrite = true;
    p
}

/// Refuses a folder holding an earlier sweep unless `--overwrite`; with it, removes the
/// earlier points, so a report of the folder shows this sweep's alone.
fn prepare_root(root: &Path, overwrite: bool) -> Result<()> {
    let earlier: Vec<_> = match std::fs::read_dir(root) {
        Ok(entries) => entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| {
                let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
                (name.starts_with("point-") && p.is_dir()) || name == "sweep.json"
            })
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e).with_context(|| format!("reading {}", root.display())),
    };
    if earlier.is_empty() {
    } else if !overwrite {
        bail!(
            "{} holds an earlier sweep: give another --output-dir, or --overwrite to replace it",
            root.display()
        );
    } else {
        for p in earlier.iter().filter(|p| p.is_dir()) {
            std::fs::remove_dir_all(p).with_context(|| format!("removing {}", p.display()))?;
        }
    }
    std::fs::create_dir_all(root).with_context(|| format!("creating {}", root.display()))
}

/// Runs the point `index` (from 1) at `value` into `root/point-NN-label`. An error means
/// the point could not run at all (its plan, its trace, its folder).
async fn run_point(
    args: &SweepArgs,
    axis: Axis,
    value: f64,
    index: usize,
    root: &Path,
    shutdown: &CancellationToken,
) -> Result<PointRun> {
    let label = axis.label(value);
    let dir_name = format!("point-{index:02}-{label}");
    let pargs = point_args(args, axis, value, &root.join(&dir_name));
    let mut plan = Plan::try_from(&pargs)?;
    let observe = pargs.shape.telemetry.observe(&plan.replay.target);
    let export = &pargs.shape.export;
    let exporter = export.start()?;
    let mut labels = run_labels(&plan.replay.target, &plan.workload);
    labels.goodput = plan.replay.goodput.clone();
    labels.run_id = Some(plan.replay.run_id.clone());
    if let Some(e) = &exporter {
        plan.replay.trace_sample_ratio = e.sample_ratio();
    }
    let front = PointFront {
        criteria: pargs.shape.criteria(),
        exporter: Mutex::new(exporter),
        labels,
        flush_timeout: export.flush_timeout(),
    };
    let progress = Arc::new(canary_replay::Progress::default());
    let display = ProgressDisplay::start(progress.clone());
    let run = execute(plan, &observe, &front, shutdown.clone(), progress).await;
    display.finish();
    let mut point = Point {
        index,
        label,
        value,
        dir: dir_name,
        verdict: String::new(),
        passed: false,
        figures: None,
        knee: false,
        pareto: false,
    };
    let run = match run.with_context(|| format!("point {index} ({})", point.label))? {
        Some(run) => run,
        None => {
            point.verdict = Verdict::error("interrupted before anything was sent").to_string();
            return Ok(PointRun {
                point,
                interrupted: true,
            });
        }
    };
    let verdict = run.verdict.clone().unwrap_or(Verdict {
        kind: VerdictKind::Pass,
        reasons: Vec::new(),
    });
    point.passed = verdict.kind == VerdictKind::Pass;
    point.verdict = verdict.to_string();
    point.figures = Some(PointFigures::of(&run, args.sweep.gpus));
    if !args.profile.shape.json {
        // With --json, stdout holds sweep.json alone.
        table::progress_line(&point)?;
    }
    Ok(PointRun {
        point,
        interrupted: run.outcome.interrupted,
    })
}

/// Waits `--cooldown`, or less when a signal comes.
async fn cooldown(args: &SweepArgs, shutdown: &CancellationToken) {
    let d = args.sweep.cooldown;
    if !d.is_zero() {
        tokio::select! {
            _ = tokio::time::sleep(d) => {}
            _ = shutdown.cancelled() => {}
        }
    }
}

/// Writes the document, prints it, and picks the exit status: interrupted, a point that
/// failed to run or measured nothing, or `ok`.
fn finish(args: &SweepArgs, doc: &SweepDoc, interrupted: bool, ok: i32) -> Result<i32> {
    let root = &args.profile.shape.output_dir;
    doc.write(root)?;
    if args.profile.shape.json {
        outln!("{}", serde_json::to_string_pretty(doc)?)?;
    } else {
        table::print(doc)?;
        outln!("artifacts: {}", root.display())?;
    }
    let measured_nothing = doc.points.iter().any(|p| {
        p.figures.as_ref().is_none_or(|f| f.completed == 0) && !p.verdict.contains("interrupted")
    });
    Ok(if interrupted {
        crate::INTERRUPTED
    } else if measured_nothing {
        POINT_FAILED
    } else {
        ok
    })
}

/// A sweep over `values` of `axis`, in the order given.
pub async fn sweep(
    args: &SweepArgs,
    axis: Axis,
    values: &[f64],
    shutdown: CancellationToken,
) -> Result<i32> {
    let root = &args.profile.shape.output_dir;
    // Every point's flags checked before anything is sent.
    for v in values {
        Plan::try_from(&point_args(args, axis, *v, root))?;
    }
    prepare_root(root, args.profile.shape.overwrite)?;
    let mut points = Vec::new();
    let mut interrupted = false;
    let mut failed = None;
    for (i, &v) in values.iter().enumerate() {
        if i > 0 {
            cooldown(args, &shutdown).await;
        }
        if shutdown.is_cancelled() {
            interrupted = true;
            break;
        }
        match run_point(args, axis, v, i + 1, root, &shutdown).await {
            Ok(run) => {
                points.push(run.point);
                if run.interrupted {
                    interrupted = true;
                    break;
                }
            }
            Err(e) => {
                // What the earlier points measured is still written.
                failed = Some(e);
                break;
            }
        }
    }
    let doc = SweepDoc::new("sweep", axis, points);
    let code = finish(args, &doc, interrupted, 0)?;
    if let Some(e) = failed {
        tracing::error!("{e:#}");
        return Ok(POINT_FAILED);
    }
    Ok(code)
}

/// `--find-max-rate`: bracketing then bisection from `start` requests/s.
pub async fn find_max_rate(
    args: &SweepArgs,
    start: f64,
    shutdown: CancellationToken,
) -> Result<i32> {
    let root = &args.profile.shape.output_dir;
    let s = &args.sweep;
    let Some(slo) = args.profile.shape.goodput.clone() else {
        bail!("--find-max-rate needs the SLOs: --slo \"time_to_first_token:400 …\"");
    };
    let min_good = args
        .profile
        .shape
        .min_good_fraction
        .context("--find-max-rate needs --min-good-fraction")?;
    Plan::try_from(&point_args(args, Axis::RequestRate, start, root))?;
    prepare_root(root, args.profile.shape.overwrite)?;
    let mut search = RateSearch::new(start, s.min_rate, s.search_precision, s.max_runs);
    let mut points = Vec::new();
    let mut interrupted = false;
    let mut failed = None;
    while let Some(rate) = search.next_rate() {
        if !points.is_empty() {
            cooldown(args, &shutdown).await;
        }
        if shutdown.is_cancelled() {
            interrupted = true;
            break;
        }
        match run_point(
            args,
            Axis::RequestRate,
            rate,
            points.len() + 1,
            root,
            &shutdown,
        )
        .await
        {
            Ok(run) => {
                search.record(rate, run.point.passed);
                points.push(run.point);
                if run.interrupted {
                    interrupted = true;
                    break;
                }
            }
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    let b = search.bracket();
    let stopped_by = if interrupted {
        "interrupted"
    } else if failed.is_some() {
        "point_failed"
    } else if search.runs().len() >= s.max_runs {
        "max_runs"
    } else if b.passed.is_none() {
        "floor"
    } else {
        "precision"
    };
    let mut doc = SweepDoc::new("find_max_rate", Axis::RequestRate, points);
    doc.capacity = Some(Capacity {
        slo: slo.to_string(),
        min_good_fraction: min_good,
        max_passing_rate: b.passed,
        min_failing_rate: b.failed,
        relative_uncertainty: b.passed.zip(b.failed).map(|(p, f)| (f - p) / (f + p)),
        stopped_by: stopped_by.to_string(),
    });
    let ok = if b.passed.is_some() {
        0
    } else {
        NO_PASSING_RATE
    };
    let code = finish(args, &doc, interrupted, ok)?;
    if let Some(e) = failed {
        tracing::error!("{e:#}");
        return Ok(POINT_FAILED);
    }
    Ok(code)
}

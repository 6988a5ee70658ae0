//! Running the points: each a plan of `canaryd profile`'s flags with the axis set, run through
//! the one run function into its own folder, with a cooldown between points.

use super::document::SweepDoc;
use super::point::{Axis, Point};
use super::{table, SweepArgs, NO_PASSING_RATE, POINT_FAILED};
use crate::capacity::{self, Probed, Prober, SearchBounds};
use crate::cli::one_shot::{self, OneShot};
use crate::cli::profile::ProfileArgs;
use crate::cli::repeats::{self, RepeatsSummary};
use crate::cli::replay::flag;
use crate::cli::report::ProgressDisplay;
use crate::execute::{execute, run_labels, spelled, Judged, KnownUnavailable};
use anyhow::{bail, Context, Result};
use canary_replay::Plan;
use std::path::Path;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// One point's run: its entry in `sweep.json`, and whether a signal stopped it.
struct PointRun {
    point: Point,
    interrupted: bool,
}

/// `base` with the values every point shares (a list of one) and the point's own, for the
/// point `index` (from 1). `--start-at` is the first point's: the later ones follow on after
/// their cooldown (by then the instant has passed), as the daemon's sweeps do.
fn point_args(args: &SweepArgs, axis: Axis, value: f64, index: usize, dir: &Path) -> ProfileArgs {
    let s = &args.sweep;
    let mut p = args.profile.clone();
    if index > 1 {
        p.shape.start_at = None;
    }
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

/// Checks the point at `value` as its run would, before anything is sent: a plan that builds
/// can still hold settings that do not go together (16 users for 10 requests, a rate past the
/// range), which only [`Plan::validate`] sees.
fn check_point(args: &SweepArgs, axis: Axis, value: f64, index: usize, dir: &Path) -> Result<()> {
    let plan = Plan::try_from(&point_args(args, axis, value, index, dir))?;
    plan.validate()
        .map_err(|e| spelled(e, flag))
        .with_context(|| format!("point {}", axis.label(value)))
}

/// A point folder an earlier sweep wrote: named `point-NN-…`, a real folder (not a link), with
/// a run's artifacts in it. Anything else in the folder is the user's, and `--overwrite`
/// leaves it alone (a `point-cloud/` beside `-o .` used to be removed).
fn earlier_point(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let numbered = name
        .strip_prefix("point-")
        .and_then(|rest| rest.split_once('-'))
        .is_some_and(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    let folder = std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir());
    let artifacts = ["records.jsonl", "summary.json", "run-1"]
        .iter()
        .any(|f| path.join(f).exists());
    numbered && folder && artifacts
}

/// Refuses a folder holding an earlier sweep unless `--overwrite`; with it, removes the
/// earlier points, so a report of the folder shows this sweep's alone.
fn prepare_root(root: &Path, overwrite: bool) -> Result<()> {
    crate::service::state_lock::refuse_daemon_folder(root)?;
    let earlier: Vec<_> = match std::fs::read_dir(root) {
        Ok(entries) => entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| earlier_point(p) || p.file_name().is_some_and(|n| n == "sweep.json"))
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

/// Runs the point `index` (from 1) at `value` into `root/point-NN-label`: once, or with
/// `--runs N` N times into its `run-1` … `run-N` with the experiment's `summary.json` beside
/// them. An error means the point could not run at all (its plan, its trace, its folder).
async fn run_point(
    args: &SweepArgs,
    axis: Axis,
    value: f64,
    index: usize,
    root: &Path,
    shutdown: &CancellationToken,
    known: &mut KnownUnavailable,
) -> Result<PointRun> {
    let label = axis.label(value);
    let dir_name = format!("point-{index:02}-{label}");
    let point_dir = root.join(&dir_name);
    let pargs = point_args(args, axis, value, index, &point_dir);
    let plan = Plan::try_from(&pargs)?;
    let context = || format!("point {index} ({label})");
    let gpus = args.sweep.gpus;
    let (point, interrupted) = match pargs.shape.repeats() {
        None => {
            let run = run_once(&pargs, plan, shutdown, known)
                .await
                .with_context(context)?;
            let interrupted = run.as_ref().is_none_or(|r| r.outcome.interrupted);
            let point = Point::of_run(index, label.clone(), value, dir_name, run.as_ref(), gpus);
            (point, interrupted)
        }
        Some(repeats) => {
            let n = repeats.runs;
            let mut runs = Vec::new();
            let mut interrupted = false;
            for i in 1..=n {
                let (dir, p) = repeats.nth(&plan, &point_dir, i);
                let run = match run_once(&pargs, p, shutdown, known).await {
                    Ok(run) => run,
                    Err(e) => {
                        // The point's runs before it were measured: their summary is kept.
                        // A failure to write it is said; the run's own error is returned.
                        if !runs.is_empty() {
                            let summary = RepeatsSummary::of(n, &runs, POINT_FAILED, false);
                            if let Err(w) = repeats::write(&point_dir, &summary) {
                                tracing::error!(
                                    "{}: writing the summary of the runs before: {w:#}",
                                    context()
                                );
                            }
                        }
                        return Err(e.context(format!("run {i} of {n}"))).with_context(context);
                    }
                };
                let Some(run) = run else {
                    interrupted = true;
                    break;
                };
                let status = one_shot::exit_status(&run);
                interrupted = run.outcome.interrupted;
                runs.push((dir, run, status));
                if interrupted {
                    break;
                }
            }
            let status = repeats::exit_status(&runs, interrupted);
            let summary = RepeatsSummary::of(n, &runs, status, interrupted);
            if !runs.is_empty() {
                // Beside the runs it summarizes (none, and no folder, if a signal came first).
                repeats::write(&point_dir, &summary).with_context(context)?;
            }
            let point = Point::of_runs(index, label, value, dir_name, &runs, summary, gpus);
            (point, interrupted)
        }
    };
    let mut point = point;
    if args.sweep.find_max_rate {
        point.require_rate_held();
    } else if axis == Axis::RequestRate {
        // A plain rate sweep's point is a measurement whatever its load did: it keeps its
        // verdict, and its notes say when the rate asked for was not the rate run.
        point.note_rate_not_held();
    }
    if point.figures.is_some() && !args.profile.shape.json {
        // With --json, stdout holds sweep.json alone.
        table::progress_line(&point)?;
    }
    Ok(PointRun { point, interrupted })
}

/// One run of a point's plan, judged by the sweep's gates and exported as `canaryd profile`
/// exports a run (each with its own run id). `None`: a signal came before anything was sent.
/// eBPF and NVML an earlier run of the sweep found unavailable (`known`) are not tried, nor
/// warned about, again; this run's findings are kept there for the next.
async fn run_once(
    pargs: &ProfileArgs,
    mut plan: Plan,
    shutdown: &CancellationToken,
    known: &mut KnownUnavailable,
) -> Result<Option<Judged>> {
    let mut observe = pargs.shape.telemetry.observe(&plan.replay.target);
    observe.take_known(known);
    share_outages(&mut observe.telemetry);
    let front = OneShot::start(&mut plan, &pargs.shape.export, pargs.shape.criteria())?;
    let progress = Arc::new(canary_replay::Progress::default());
    let display = ProgressDisplay::start(progress.clone());
    let run = execute(plan, &observe, &front, shutdown.clone(), progress).await;
    display.finish();
    if let Ok(Some(j)) = &run {
        observe.remember_unavailable(&j.outcome);
        *known = observe.known();
    }
    // A point whose files could not all be written (a full disk) failed: the sweep stops
    // there, as `replay` does, rather than report a knee without it and exit 0.
    if let Ok(Some(j)) = &run {
        if let Some(e) = &j.outcome.artifacts_error {
            anyhow::bail!("{e}");
        }
    }
    run
}

/// Per scraped source and URL: whether its outage (and each trouble of its pages) was warned
/// about, shared by the sweep's points as the daemon's runs share theirs, so a metrics
/// endpoint that is down is said once, not once per point or probe.
type Outages = std::sync::Mutex<
    std::collections::HashMap<(&'static str, String), canary_telemetry::OutageLog>,
>;

/// Gives `telemetry`'s scrapers the outage logs of the sweep's earlier points.
fn share_outages(telemetry: &mut canary_telemetry::Config) {
    static OUTAGES: std::sync::OnceLock<Outages> = std::sync::OnceLock::new();
    let mut outages = OUTAGES
        .get_or_init(Outages::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let mut log = |source, url: &Option<String>, log: &mut canary_telemetry::OutageLog| {
        if let Some(url) = url {
            *log = outages.entry((source, url.clone())).or_default().clone();
        }
    };
    log(
        "server_metrics",
        &telemetry.server_metrics_url,
        &mut telemetry.server_metrics_outage,
    );
    log("dcgm", &telemetry.dcgm_url, &mut telemetry.dcgm_outage);
}

/// Warns, once before the first point, when no flag sets a point's length: each then sends
/// `profile`'s default of 10 requests, a few tens of milliseconds against a fast server, too
/// short for a rate (under 100 ms) and so for a knee.
fn warn_if_short(args: &SweepArgs) {
    let p = &args.profile;
    if p.trace.is_none() && p.request_count.is_none() && p.benchmark_duration.is_none() {
        tracing::warn!(
            "no --benchmark-duration or --request-count: each point sends profile's default of \
             10 requests, too few to show a knee (a point whose requests span under 100 ms has \
             no rate at all); give each point a length, --benchmark-duration 2s say"
        );
    }
}

/// Adds a note to `doc` when the knee left a point out for want of a rate: the flag that
/// gives a point one. (The daemon's sweeps have no such flag, so [`SweepDoc::new`] does not.)
fn note_short_points(doc: &mut SweepDoc) {
    let short: Vec<&str> = doc
        .left_out
        .iter()
        .filter(|l| {
            l.why == super::point::Exclusion::NoFigures
                && l.missing
                    .as_deref()
                    .is_some_and(|m| m.starts_with("no request rate"))
        })
        .map(|l| l.label.as_str())
        .collect();
    if !short.is_empty() {
        doc.notes.push(format!(
            "{} had no request rate (too few requests, or too short a span): give each point a \
             longer --benchmark-duration (or a larger --request-count)",
            short.join(", ")
        ));
    }
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
/// failed to run or measured canaryd rather than the target, or `ok`.
fn finish(args: &SweepArgs, doc: &SweepDoc, interrupted: bool, ok: i32) -> Result<i32> {
    let root = &args.profile.shape.output_dir;
    doc.write(root)?;
    if args.profile.shape.json {
        outln!("{}", serde_json::to_string_pretty(doc)?)?;
    } else {
        table::print(doc)?;
        outln!("artifacts: {}", root.display())?;
    }
    Ok(if interrupted {
        crate::INTERRUPTED
    } else if doc.points.iter().any(Point::failed) {
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
    for (i, v) in values.iter().enumerate() {
        check_point(args, axis, *v, i + 1, root)?;
    }
    prepare_root(root, args.profile.shape.overwrite)?;
    warn_if_short(args);
    let mut points = Vec::new();
    let mut interrupted = false;
    let mut failed = None;
    let mut known = KnownUnavailable::default();
    for (i, &v) in values.iter().enumerate() {
        if i > 0 {
            cooldown(args, &shutdown).await;
        }
        if shutdown.is_cancelled() {
            interrupted = true;
            break;
        }
        match run_point(args, axis, v, i + 1, root, &shutdown, &mut known).await {
            Ok(run) => {
                // A failed point (its verdict an error: nothing completed, or canaryd was the
                // bottleneck) stops the sweep, its figures kept, as the daemon's sweep stops:
                // the points past it would load a target already failing, or measure canaryd.
                let point_failed = run.point.failed().then(|| {
                    anyhow::anyhow!(
                        "point {} ({}) failed: {}",
                        run.point.index,
                        run.point.label,
                        run.point.verdict
                    )
                });
                points.push(run.point);
                if run.interrupted {
                    interrupted = true;
                    break;
                }
                if let Some(e) = point_failed {
                    failed = Some(e);
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
    let mut doc = SweepDoc::new("sweep", axis, points);
    doc.ended(interrupted, values);
    note_short_points(&mut doc);
    if let Some(&first) = values.first() {
        export_knee(args, axis, first, &doc).await?;
    }
    let code = finish(args, &doc, interrupted, 0)?;
    if let Some(e) = failed {
        tracing::error!("{e:#}{}", stopped_there(&doc));
        return Ok(POINT_FAILED);
    }
    Ok(code)
}

/// The end of the line that says why a sweep stopped early: `; the sweep stopped there, not
/// run: c8, c16`; empty when the point that stopped it was the last asked for.
fn stopped_there(doc: &SweepDoc) -> String {
    match doc.not_run.is_empty() {
        true => String::new(),
        false => format!(
            "; the sweep stopped there, not run: {}",
            doc.not_run.join(", ")
        ),
    }
}

/// The sweep's runs as the capacity search's probes: each a point of its own folder.
struct SweepProber<'a> {
    args: &'a SweepArgs,
    root: &'a Path,
    shutdown: &'a CancellationToken,
    points: Vec<Point>,
    /// eBPF an earlier probe found unavailable: not tried again.
    known: KnownUnavailable,
}

impl Prober for SweepProber<'_> {
    async fn probe(&mut self, rate: f64, index: usize) -> Result<Probed> {
        let run = run_point(
            self.args,
            Axis::RequestRate,
            rate,
            index,
            self.root,
            self.shutdown,
            &mut self.known,
        )
        .await?;
        let (passed, errored) = (run.point.passed, run.point.errored);
        let verdict = run.point.verdict.clone();
        self.points.push(run.point);
        // An error (canaryd's own limits, nothing completed) is not the target failing the
        // SLOs: the search stops there rather than bound the capacity by it, as the daemon's.
        if errored && !run.interrupted {
            bail!("the probe at {rate} req/s: {verdict}");
        }
        Ok(Probed {
            passed,
            interrupted: run.interrupted,
        })
    }

    async fn pause(&mut self) {
        cooldown(self.args, self.shutdown).await
    }
}

/// Exports one series figure of the sweep (`export_it`, given the exporter and the labels of
/// the plan at the axis value `at`) and flushes it, when an OTLP endpoint is configured.
async fn export_series(
    args: &SweepArgs,
    axis: Axis,
    at: f64,
    export_it: impl FnOnce(&canary_exporters::OtlpExporter, &canary_exporters::RunLabels),
) -> Result<()> {
    let export = &args.profile.shape.export;
    let Some(exporter) = export.start()? else {
        return Ok(());
    };
    let root = &args.profile.shape.output_dir;
    let plan = Plan::try_from(&point_args(args, axis, at, 1, root))?;
    export_it(&exporter, &run_labels(&plan.replay.target, &plan.workload));
    let timeout = export.flush_timeout();
    tokio::task::spawn_blocking(move || exporter.shutdown(timeout))
        .await
        .context("flushing the OTLP export")?;
    Ok(())
}

/// The search's answer as `canary.capacity.rate` (by bound: `passed`, `failed`) and
/// `canary.capacity.not_established` (by end), as the daemon's capacity workloads export theirs.
async fn export_capacity(args: &SweepArgs, start: f64, c: &capacity::Capacity) -> Result<()> {
    let figures = [
        ("passed", c.max_passing_rate),
        ("failed", c.min_failing_rate),
    ];
    let ends = c.not_established_gauge();
    export_series(args, Axis::RequestRate, start, |e, labels| {
        e.export_capacity(labels, &figures);
        e.export_capacity_not_established(labels, &ends);
    })
    .await
}

/// The knee's completed requests/s as `canary.sweep.knee` (`knee`), as the daemon's sweep
/// workloads export theirs; none when the series has no knee.
async fn export_knee(args: &SweepArgs, axis: Axis, first: f64, doc: &SweepDoc) -> Result<()> {
    let knee = doc.knee.as_ref().and_then(|k| k.request_throughput);
    export_series(args, axis, first, |e, labels| {
        e.export_knee(labels, &[("knee", knee)])
    })
    .await
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
    if s.min_rate > start {
        // Begun below its own floor, its first failure would stop it "by the floor" without
        // trying the floor (the config refuses the same, at `min_rate`'s line).
        bail!(
            "--min-rate {} req/s is above --request-rate ({} req/s), where the search starts; \
             give a floor at or below it",
            canary_replay::trace::Number(s.min_rate),
            canary_replay::trace::Number(start)
        );
    }
    check_point(args, Axis::RequestRate, start, 1, root)?;
    prepare_root(root, args.profile.shape.overwrite)?;
    warn_if_short(args);
    let bounds = SearchBounds {
        start,
        min_rate: s.min_rate,
        precision: s.search_precision,
        max_runs: s.max_runs,
    };
    let mut prober = SweepProber {
        args,
        root,
        shutdown: &shutdown,
        points: Vec::new(),
        known: KnownUnavailable::default(),
    };
    let found = capacity::search(bounds, slo.to_string(), min_good, &mut prober, &shutdown).await;
    let mut doc = SweepDoc::new("find_max_rate", Axis::RequestRate, prober.points);
    doc.interrupted = found.interrupted;
    note_short_points(&mut doc);
    let ok = if found.capacity.max_passing_rate.is_some() {
        0
    } else {
        NO_PASSING_RATE
    };
    let mut capacity = found.capacity;
    // An end whose probe's decision the bounds could turn is said, not left to read as
    // established.
    capacity.note_bounds(doc.points.iter().map(|p| (p.value, p.verdict.as_str())));
    export_capacity(args, start, &capacity).await?;
    doc.capacity = Some(capacity);
    let code = finish(args, &doc, found.interrupted, ok)?;
    if let Some(e) = found.failed {
        tracing::error!("{e:#}");
        return Ok(POINT_FAILED);
    }
    Ok(code)
}

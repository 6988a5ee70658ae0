//! The run of `canaryd replay` and `canaryd demo`: judged by its gates, shown live, printed as a table
//! or JSON, exported over OTLP when an endpoint is configured.

use crate::cli::replay::flag;
use crate::cli::report;
use crate::execute::{execute, run_labels, ExportFuture, Front, Judged, Observe};
use crate::judge::verdict::{Criteria, Verdict, VerdictKind};
use anyhow::{bail, Result};
use canary_core::{Observer, RunOutcome};
use canary_exporters::{OtlpExporter, RunLabels};
use canary_replay::{Plan, Setting};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// `canaryd replay` and `canaryd demo`: a run judged by `criteria` (by default only whether
/// anything completed), exported over OTLP when an endpoint is configured, flushed within
/// `--otlp-flush-timeout`.
pub struct OneShot {
    exporter: Mutex<Option<OtlpExporter>>,
    labels: RunLabels,
    flush_timeout: Duration,
    criteria: Criteria,
}

impl OneShot {
    /// The front of `plan` judged by `criteria`, its OTLP exporter started from `export` (bad
    /// OTLP settings stop the run before anything is sent) and the plan's trace sampling set
    /// to the exporter's ratio. `canaryd sweep` runs each point through one too.
    pub fn start(
        plan: &mut Plan,
        export: &crate::cli::otlp_flags::ExportArgs,
        criteria: Criteria,
    ) -> Result<OneShot> {
        let exporter = export.start()?;
        let mut labels = run_labels(&plan.replay.target, &plan.workload);
        labels.goodput = plan.replay.goodput.clone();
        labels.run_id = Some(plan.replay.run_id.clone());
        if let Some(e) = &exporter {
            plan.replay.trace_sample_ratio = e.sample_ratio();
            // A collector quoting the target's key back is scrubbed of it, as in the daemon.
            let r = &plan.replay;
            e.scrub_also(
                "target",
                canary_replay::Secrets::of(std::iter::once(&r.target).chain(&r.replicas)),
            );
        }
        Ok(OneShot {
            exporter: Mutex::new(exporter),
            labels,
            flush_timeout: export.flush_timeout(),
            criteria,
        })
    }
}

impl Front for OneShot {
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
                    run.verdict.as_ref(),
                    self.flush_timeout,
                )
                .await;
            }
        })
    }
}

/// What a one-shot run prints when it ends, and what it is judged by.
#[derive(Clone)]
pub struct Print {
    /// The summary as JSON instead of a table.
    pub json: bool,
    /// The server's token counts against the requested lengths.
    pub token_counts: bool,
    /// The bars of the verdict (and so of the exit status).
    pub criteria: Criteria,
    /// Replace an earlier run's artifacts in the output directory.
    pub overwrite: bool,
    /// Print nothing: a repeat of `--runs`, whose summary is printed once at the end.
    pub quiet: bool,
}

/// The files a run writes into its output directory.
const ARTIFACTS: [&str; 4] = [
    "records.jsonl",
    "summary.json",
    "summary.csv",
    canary_replay::HISTOGRAMS_FILE,
];

/// Refuses `dir` when it holds an earlier run's artifacts, unless `overwrite`: a second run
/// would silently replace what the first measured. A folder of a running daemon's is refused
/// whatever `overwrite` says.
pub(crate) fn refuse_earlier_run(dir: &Path, overwrite: bool) -> Result<()> {
    crate::service::state_lock::refuse_daemon_folder(dir)?;
    if overwrite {
        return Ok(());
    }
    let earlier: Vec<&str> = ARTIFACTS
        .into_iter()
        .filter(|f| dir.join(f).exists())
        .collect();
    if !earlier.is_empty() {
        bail!(
            "{} holds an earlier run ({}): give another --output-dir, or --overwrite to replace it",
            dir.display(),
            earlier.join(", ")
        );
    }
    Ok(())
}

/// The exit status when no request completed (or canaryd itself was the bottleneck): the run
/// measured nothing of the target. (2 is a usage error, as clap reports it.)
pub const NOTHING_COMPLETED: i32 = 4;
/// The exit status when the run missed `--max-error-rate` or `--min-good-fraction`.
pub const GATE_FAILED: i32 = 3;

/// A one-shot run's exit status: 0 when it passed, [`crate::INTERRUPTED`] when a signal
/// stopped it, [`NOTHING_COMPLETED`] or [`GATE_FAILED`] otherwise.
pub fn exit_status(run: &Judged) -> i32 {
    if run.outcome.interrupted {
        return crate::INTERRUPTED;
    }
    match run.verdict.as_ref().map(|v| v.kind) {
        None | Some(VerdictKind::Pass) => 0,
        Some(VerdictKind::Fail) => GATE_FAILED,
        Some(VerdictKind::Error) => NOTHING_COMPLETED,
        // Only a signal makes it, and the signal's status is returned above.
        Some(VerdictKind::Interrupted) => crate::INTERRUPTED,
    }
}

/// Runs `plan` once with the telemetry `observe` names, exported as `export` says, showing
/// progress and printing the summary. `None` when a signal stopped it before anything was
/// sent.
pub async fn one_shot(
    mut plan: Plan,
    observe: &Observe,
    export: &crate::cli::otlp_flags::ExportArgs,
    print: Print,
    shutdown: CancellationToken,
) -> Result<Option<Judged>> {
    let front = OneShot::start(&mut plan, export, print.criteria)?;
    let output_dir = plan.replay.output_dir.clone();
    if let Some(dir) = &output_dir {
        refuse_earlier_run(dir, print.overwrite)?;
    }
    let progress = Arc::new(canary_replay::Progress::default());
    let display = report::ProgressDisplay::start(progress.clone());
    let run = execute(plan, observe, &front, shutdown, progress).await;
    display.finish();
    let Some(run) = run? else {
        return Ok(None);
    };
    if print.quiet {
        return artifacts_written(run);
    }
    if print.json {
        // What summary.json holds, `run` block included.
        let file = canary_replay::SummaryFile::new(&run.info, &run.outcome);
        outln!("{}", serde_json::to_string_pretty(&file)?)?;
    } else {
        let plan = run.info.plan.as_ref();
        report::print_table(
            &run.outcome,
            print.token_counts,
            plan.and_then(|p| p.concurrency),
        )?;
        if let Some(t) = &run.outcome.summary.timeslices {
            crate::cli::timeslices::print(t)?;
        }
        // What the selection could not do as asked (fewer requests than --max-requests).
        let trace = plan.and_then(|p| p.trace.as_ref());
        for note in trace.iter().flat_map(|t| &t.selection.notes) {
            outln!("note: {note}")?;
        }
        // Rows --skip-invalid left out: the requests counted above are fewer than the
        // trace's rows, and the warnings that named them scrolled by on stderr.
        if let Some(load) = trace.map(|t| &t.load).filter(|l| l.invalid_skipped > 0) {
            outln!("note: {}", skipped_note(load))?;
        }
        if let Some(v) = &run.verdict {
            // A plain pass without bars says nothing the table does not.
            if v.kind != VerdictKind::Pass || print.criteria != Criteria::NONE {
                outln!("verdict: {v}")?;
            }
        }
        if let Some(dir) = output_dir {
            outln!("artifacts: {}", dir.display())?;
        }
    }
    artifacts_written(run)
}

/// What `--skip-invalid` left out of a trace: `1 invalid trace row of 5 skipped (…)`.
fn skipped_note(load: &canary_replay::LoadReport) -> String {
    let (row, named) = match load.invalid_skipped {
        1 => ("row", "it"),
        _ => ("rows", "them"),
    };
    format!(
        "{} invalid trace {row} of {} skipped (--skip-invalid; stderr named {named}, \
         summary.json's run.trace.load counts them by kind)",
        load.invalid_skipped, load.rows,
    )
}

/// `run`, or the error of the artifacts it could not write (a full disk) once its figures
/// were shown: the exit status says the run's files are not all there.
fn artifacts_written(run: Judged) -> Result<Option<Judged>> {
    match &run.outcome.artifacts_error {
        Some(e) => anyhow::bail!("{e} (the figures shown are the run's, whole)"),
        None => Ok(Some(run)),
    }
}

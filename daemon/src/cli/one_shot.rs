//! The run of `canaryd replay` and `canaryd demo`: not judged, shown live, printed as a table
//! or JSON, exported over OTLP when an endpoint is configured.

use crate::cli::replay::flag;
use crate::cli::report;
use crate::execute::{execute, run_labels, ExportFuture, Front, Judged, Observe};
use crate::judge::verdict::Verdict;
use anyhow::Result;
use canary_core::{Observer, RunOutcome};
use canary_exporters::{OtlpExporter, RunLabels};
use canary_replay::{Plan, Setting};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// `canaryd replay` and `canaryd demo`: a run not judged, exported over OTLP when an
/// endpoint is configured, flushed within `--otlp-flush-timeout`.
pub struct OneShot {
    exporter: Mutex<Option<OtlpExporter>>,
    labels: RunLabels,
    flush_timeout: Duration,
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

    fn judge(&self, _: &RunOutcome) -> Option<Verdict> {
        None
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

/// What a one-shot run prints when it ends.
pub struct Print {
    /// The summary as JSON instead of a table.
    pub json: bool,
    /// The server's token counts against the requested lengths.
    pub token_counts: bool,
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
) -> Result<Option<RunOutcome>> {
    // Bad OTLP settings stop the run before anything is sent.
    let exporter = export.start()?;
    let mut labels = run_labels(&plan.replay.target, &plan.workload);
    labels.goodput = plan.replay.goodput.clone();
    labels.run_id = Some(plan.replay.run_id.clone());
    if let Some(e) = &exporter {
        plan.replay.trace_sample_ratio = e.sample_ratio();
    }
    let output_dir = plan.replay.output_dir.clone();
    let front = OneShot {
        exporter: Mutex::new(exporter),
        labels,
        flush_timeout: export.flush_timeout(),
    };
    let progress = Arc::new(canary_replay::Progress::default());
    let display = report::ProgressDisplay::start(progress.clone());
    let run = execute(plan, observe, &front, shutdown, progress).await;
    display.finish();
    let Some(run) = run? else {
        return Ok(None);
    };
    if print.json {
        outln!("{}", serde_json::to_string_pretty(&run.outcome)?)?;
    } else {
        report::print_table(&run.outcome, print.token_counts)?;
        if let Some(dir) = output_dir {
            outln!("artifacts: {}", dir.display())?;
        }
    }
    Ok(Some(run.outcome))
}

//! The end of a run: the records' summary, what the observers saw, the run's context (and
//! what changed in it since the baseline run) and diagnosis, canaryd's own bottleneck, and
//! the artifacts, as one [`RunOutcome`].

use super::setup::Collector;
use super::Ctx;
use crate::plan::RunInfo;
use crate::results::SummaryFile;
use canary_core::{
    ClockReport, DiagnosisInput, InFlightCap, MonoTime, Observer, RunContext, RunOutcome,
    RunSummary, RunTelemetry, WorkloadContext,
};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// How the run went, as known when its last request ended.
pub(super) struct Ended {
    /// A stop cut it short.
    pub interrupted: bool,
    pub in_flight_cap: InFlightCap,
    pub workload: WorkloadContext,
    pub clock: ClockReport,
    pub started_unix_ns: u64,
}

/// Closes the records, joins what every source saw, judges, and writes the artifacts.
pub(super) async fn finish(
    ctx: Ctx,
    collector: Collector,
    observer: Option<Arc<dyn Observer>>,
    ended: Ended,
    info: &RunInfo,
) -> Result<RunOutcome, super::ReplayError> {
    let unsent_unknown = ctx.unsent_unknown.get().cloned();
    let unsent = unsent_unknown
        .is_none()
        .then(|| ctx.unsent.load(Ordering::Relaxed));
    let unsent_estimated = unsent.is_some() && ctx.unsent_estimated.load(Ordering::Relaxed);
    let t0 = ctx.t0;
    drop(ctx.records);
    let writer = collector.join().expect("collector thread does not panic");
    let mut summary = writer.summary();
    let (state, reason) = ctx.replicas.rx_state();
    summary.receive_timestamps.state = Some(state.to_string());
    summary.receive_timestamps.reason = reason;
    let end = MonoTime::now();
    let telemetry = telemetry(observer.as_deref(), t0, end, &summary, ended.workload).await;
    let context_changes = ctx.config.baseline_context.as_ref().map(|baseline| {
        let now = telemetry.context.clone().unwrap_or_default();
        baseline.compare(&now)
    });
    let diagnosis = canary_core::diagnose(&DiagnosisInput {
        summary: &summary,
        telemetry: &telemetry,
        timeline: Some(writer.timeline()),
    });
    let client_bottleneck = bottleneck(&summary);
    if let Some(b) = &client_bottleneck {
        tracing::warn!("{b}");
    }
    let cut = match ended.interrupted {
        true => ctx.config.stop_reason.as_ref().and_then(|why| (why.0)()),
        false => None,
    };
    let outcome = RunOutcome {
        interrupted: ended.interrupted,
        signalled: ended.interrupted && cut.is_none(),
        cut,
        unsent,
        unsent_estimated,
        unsent_unknown,
        in_flight_cap: InFlightCap {
            waited: ctx.progress.ceiling_waits.load(Ordering::Relaxed),
            ..ended.in_flight_cap
        },
        client_bottleneck,
        prompt_salt: ctx.config.prompt_salt,
        started_unix_ns: ended.started_unix_ns,
        t0_monotonic_ns: t0.as_nanos(),
        clock: ended.clock,
        diagnosis,
        context_changes,
        telemetry,
        summary,
        artifacts_error: None,
    };
    // Nothing measured is lost to a full disk: the outcome goes on, saying what failed.
    let mut outcome = outcome;
    if let Err(e) = writer.finish(&SummaryFile::new(info, &outcome), &outcome.summary) {
        outcome.artifacts_error = Some(format!("writing results: {}", one_line(&e)));
    }
    Ok(outcome)
}

/// What the observers saw from `t0` to `end`, with the context canaryd knows itself: its
/// build, the host, and `workload`.
async fn telemetry(
    observer: Option<&dyn Observer>,
    t0: MonoTime,
    end: MonoTime,
    summary: &RunSummary,
    workload: WorkloadContext,
) -> RunTelemetry {
    let mut telemetry = match observer {
        Some(o) => o.finish(t0, end, summary).await,
        None => RunTelemetry::default(),
    };
    telemetry
        .context
        .get_or_insert_with(Default::default)
        .merge(RunContext {
            canaryd: crate::host::canaryd_context(),
            host: crate::host::host_context(),
            workload,
            ..Default::default()
        });
    telemetry
}

/// `summary.json` and the rest of the artifacts.
/// An error and its causes on one line.
fn one_line(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(&format!(": {s}"));
        source = s.source();
    }
    text
}

/// What a run where canaryd ran out of its own resources says about it.
fn bottleneck(s: &RunSummary) -> Option<String> {
    (s.client_errors > 0).then(|| {
        format!(
            "canaryd was the bottleneck: {} of {} requests failed for lack of its own resources \
             (open files, memory or local ports), not counted against the target; raise the \
             open-file limit (ulimit -n, LimitNOFILE=) or lower --concurrency",
            s.client_errors, s.requests
        )
    })
}

